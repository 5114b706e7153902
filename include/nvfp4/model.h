/* SPDX-License-Identifier: MIT */
/*
 * nvfp4/model.h - the model layer of nvfp4: architectures, weight assembly,
 * the forward pass (prefill and decode with a KV cache), perplexity,
 * generation, and the byte-level BPE tokenizer of tokenizer.json.
 *
 * Built on nvfp4/kernels.h.
 */
#ifndef NVFP4_MODEL_H
#define NVFP4_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <nvfp4/kernels.h>

#ifdef __cplusplus
extern "C" {
#endif

NVFP4_API const char *nvfp4_model_version(void);

/* ---- tokenizer (tokenizer.json, byte-level BPE) ---------------------------- */

typedef struct nvfp4_tokenizer nvfp4_tokenizer;

/* Loads a Hugging Face tokenizer.json whose model is byte-level BPE (GPT-2,
 * Llama 3, Qwen, SmolLM styles): pre-tokenizer split regex, merges, added and
 * special tokens.  Anything else is NVFP4_ERR_UNSUPPORTED naming the key. */
NVFP4_API nvfp4_tokenizer *nvfp4_tokenizer_load(const char *path, nvfp4_error *err);
NVFP4_API void nvfp4_tokenizer_free(nvfp4_tokenizer *tok);
NVFP4_API size_t nvfp4_tokenizer_vocab_size(const nvfp4_tokenizer *tok);
/* Encode LEN bytes of UTF-8 TEXT (added/special tokens in the text are
 * matched as the tokenizers library does).  *ids is malloc'ed, caller frees.
 * Equals the output of `tokenizers` Tokenizer.encode(text,
 * add_special_tokens=False).ids. */
NVFP4_API nvfp4_status nvfp4_tokenizer_encode(const nvfp4_tokenizer *tok,
                                              const char *text, size_t len,
                                              int32_t **ids, size_t *n_ids,
                                              nvfp4_error *err);
/* The bytes a token stands for (byte-level decoded), for streaming output.
 * Returns NULL for an id out of range. */
NVFP4_API const char *nvfp4_tokenizer_token_bytes(const nvfp4_tokenizer *tok,
                                                  int32_t id, size_t *len);
/* Decode ids to a malloc'ed NUL-terminated string (caller frees);
 * skip_special != 0 drops special tokens. */
NVFP4_API char *nvfp4_tokenizer_decode(const nvfp4_tokenizer *tok, const int32_t *ids,
                                       size_t n, int skip_special, nvfp4_error *err);
/* Id of a token string (e.g. "<|im_end|>"), or -1. */
NVFP4_API int32_t nvfp4_tokenizer_token_id(const nvfp4_tokenizer *tok, const char *token);
NVFP4_API int nvfp4_tokenizer_is_special(const nvfp4_tokenizer *tok, int32_t id);

/* ---- model ---------------------------------------------------------------- */

typedef struct nvfp4_model nvfp4_model;

typedef struct {
    const char *backend;      /* NULL: $NVFP4_BACKEND or "cpu" */
    int threads;              /* 0: default */
    int max_ctx;              /* KV cache length; 0: min(config max, 4096) */
    int rescale_fused;        /* opt-in lossy rescale of fused shards (§4) */
    int quiet;                /* no warnings on stderr */
} nvfp4_model_options;

NVFP4_API void nvfp4_model_options_init(nvfp4_model_options *opt);

/* Open a model directory (config.json + safetensors [+ tokenizer.json]).
 * Errors name the file, the tensor or the config key: unsupported
 * architecture (listing the supported ones), missing tensors (all of them),
 * shapes that disagree with config.json, fused-scale mismatches (§4). */
NVFP4_API nvfp4_model *nvfp4_model_open(const char *path, const nvfp4_model_options *opt,
                                        nvfp4_error *err);
NVFP4_API void nvfp4_model_free(nvfp4_model *model);
NVFP4_API const char *nvfp4_model_arch(const nvfp4_model *model);
NVFP4_API int nvfp4_model_vocab_size(const nvfp4_model *model);
NVFP4_API int nvfp4_model_max_ctx(const nvfp4_model *model);
NVFP4_API nvfp4_backend *nvfp4_model_backend(nvfp4_model *model);
/* The tokenizer of the model directory, or NULL when it has none. */
NVFP4_API const nvfp4_tokenizer *nvfp4_model_tokenizer(const nvfp4_model *model);
/* BOS / EOS ids from config.json (or the tokenizer), -1 when unknown. */
NVFP4_API int32_t nvfp4_model_bos(const nvfp4_model *model);
NVFP4_API int32_t nvfp4_model_eos(const nvfp4_model *model);

/* Forget the KV cache. */
NVFP4_API void nvfp4_model_reset(nvfp4_model *model);
/* Run N tokens at positions pos .. pos+N-1 (pos = tokens already cached),
 * appending to the KV cache.  logits: host buffer of N * vocab floats
 * (all positions), or of vocab floats when last_only, or NULL. */
NVFP4_API nvfp4_status nvfp4_model_forward(nvfp4_model *model, const int32_t *tokens,
                                           size_t n, size_t pos, float *logits,
                                           int last_only, nvfp4_error *err);

/* Rolling-window perplexity as lm-eval's wikitext task computes it
 * (loglikelihood_rolling, context_len 1): windows of ctx tokens, each scoring
 * only the tokens not scored before; the first window starts with PREFIX
 * (pass -1 for the model's BOS, or EOS when it has no BOS).  progress may be
 * NULL; it is called after each window with the tokens scored so far, and a
 * nonzero return stops the run: NVFP4_ERR_CANCELLED, with OUT holding what
 * was scored until then (out->tokens of them, their nll and token_ppl). */
typedef int (*nvfp4_progress_fn)(size_t done, size_t total, void *user);
typedef struct {
    double nll;               /* total negative log-likelihood (nats) */
    size_t tokens;            /* tokens scored */
    double token_ppl;         /* exp(nll / tokens) */
} nvfp4_ppl_result;
NVFP4_API nvfp4_status nvfp4_model_perplexity(nvfp4_model *model, const int32_t *tokens,
                                              size_t n, size_t ctx, int32_t prefix,
                                              nvfp4_progress_fn progress, void *user,
                                              nvfp4_ppl_result *out, nvfp4_error *err);

/* ---- sampling ------------------------------------------------------------- */

typedef struct {
    float temperature;        /* <= 0: greedy (argmax, first on ties) */
    float top_p;              /* nucleus mass in (0, 1]; 1 = all */
    uint64_t state;           /* xorshift state from the seed */
} nvfp4_sampler;

NVFP4_API void nvfp4_sampler_init(nvfp4_sampler *s, float temperature, float top_p,
                                  uint64_t seed);
/* Pick the next token from one row of VOCAB logits. */
NVFP4_API int32_t nvfp4_sampler_sample(nvfp4_sampler *s, const float *logits,
                                       size_t vocab);

#ifdef __cplusplus
}
#endif

#endif /* NVFP4_MODEL_H */
