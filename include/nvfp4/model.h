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

/* ---- model ----------------------------------------------------------------
 *
 * Threads.  An nvfp4_model holds the weights and nothing a forward pass
 * writes: after nvfp4_model_open returns it is immutable, and any number of
 * threads may use one model at the same time through their own contexts
 * (nvfp4_context below), and call its getters and nvfp4_model_perplexity.
 * A context is not thread-safe: one thread at a time per context.  On a GPU
 * backend the contexts of one model share the device and its queue, and the
 * library serialises their calls (one pass at a time); on the CPU backend
 * they run truly concurrently.  Three things are NOT thread-safe:
 * nvfp4_model_free (no context may be alive), nvfp4_backend_set_threads on
 * nvfp4_model_backend(), and the single-sequence wrappers
 * nvfp4_model_forward / nvfp4_model_reset, which share one default context
 * inside the model (call them from one thread at a time, and not while
 * nvfp4_model_free runs). */

typedef struct nvfp4_model nvfp4_model;

typedef struct {
    const char *backend;      /* NULL: $NVFP4_BACKEND or "cpu" */
    int threads;              /* 0: default */
    int max_ctx;              /* longest sequence (positions); 0: min(config max, 4096) */
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
/* The longest sequence a context of this model holds (max_ctx). */
NVFP4_API int nvfp4_model_max_ctx(const nvfp4_model *model);
NVFP4_API nvfp4_backend *nvfp4_model_backend(nvfp4_model *model);
/* The tokenizer of the model directory, or NULL when it has none. */
NVFP4_API const nvfp4_tokenizer *nvfp4_model_tokenizer(const nvfp4_model *model);
/* BOS / EOS ids from config.json (or the tokenizer), -1 when unknown. */
NVFP4_API int32_t nvfp4_model_bos(const nvfp4_model *model);
NVFP4_API int32_t nvfp4_model_eos(const nvfp4_model *model);

/* ---- contexts: many sequences on one model ---------------------------------
 *
 * A context owns a paged KV cache (a pool of blocks of NVFP4_KV_BLOCK
 * tokens, each sequence a table of blocks), the scratch of a forward pass
 * and its sequences.  nvfp4_context_run runs one batch: any mix of prefill
 * chunks and single decode tokens of different sequences, in one pass over
 * the weights.  On the CPU backend a sequence's logits are the same bits
 * whether it runs alone or in any batch, at any thread count. */

#define NVFP4_KV_BLOCK 16

typedef struct nvfp4_context nvfp4_context;
typedef int32_t nvfp4_seq;    /* a sequence of a context, >= 0 */

typedef struct {
    size_t kv_tokens;         /* KV pool in tokens (rounded up to blocks); 0: kv_bytes */
    size_t kv_bytes;          /* KV pool in bytes (K and V, all layers); 0 with
                               * kv_tokens 0: the model's max_ctx tokens */
    size_t max_batch_tokens;  /* tokens per nvfp4_context_run; 0: 512 */
    int max_seqs;             /* live sequences at most; 0: 256 */
} nvfp4_context_options;

NVFP4_API void nvfp4_context_options_init(nvfp4_context_options *opt);
/* A context on MODEL (which must outlive it); opt may be NULL. */
NVFP4_API nvfp4_context *nvfp4_context_create(nvfp4_model *model,
                                              const nvfp4_context_options *opt,
                                              nvfp4_error *err);
NVFP4_API void nvfp4_context_free(nvfp4_context *ctx);
NVFP4_API const nvfp4_model *nvfp4_context_model(const nvfp4_context *ctx);
/* Blocks in the pool, and blocks no sequence holds. */
NVFP4_API size_t nvfp4_context_kv_blocks(const nvfp4_context *ctx);
NVFP4_API size_t nvfp4_context_kv_free_blocks(const nvfp4_context *ctx);

/* A new empty sequence; NVFP4_ERR_KV_FULL when max_seqs are alive. */
NVFP4_API nvfp4_status nvfp4_seq_create(nvfp4_context *ctx, nvfp4_seq *seq,
                                        nvfp4_error *err);
/* Give the sequence's blocks back (shared blocks when their last holder
 * goes); an unknown id is ignored. */
NVFP4_API void nvfp4_seq_free(nvfp4_context *ctx, nvfp4_seq seq);
/* Keep the first LEN tokens (LEN <= length); blocks past them go back. */
NVFP4_API nvfp4_status nvfp4_seq_truncate(nvfp4_context *ctx, nvfp4_seq seq, size_t len,
                                          nvfp4_error *err);
/* A new sequence that continues from PARENT's cached tokens: it shares the
 * parent's blocks (reference-counted); whichever of the two writes into a
 * shared block first gets its own copy (copy-on-write), so the two never
 * see each other's later tokens. */
NVFP4_API nvfp4_status nvfp4_seq_fork(nvfp4_context *ctx, nvfp4_seq parent,
                                      nvfp4_seq *child, nvfp4_error *err);
/* Tokens cached for SEQ; (size_t)-1 for an unknown id. */
NVFP4_API size_t nvfp4_seq_length(const nvfp4_context *ctx, nvfp4_seq seq);

typedef enum {
    NVFP4_LOGITS_NONE = 0,    /* only fill the KV cache */
    NVFP4_LOGITS_LAST,        /* the last token's vocab logits */
    NVFP4_LOGITS_ALL          /* every token's: n_tokens * vocab floats */
} nvfp4_logits_mode;

typedef struct {
    nvfp4_seq seq;
    const int32_t *tokens;    /* appended at positions length .. length+n-1 */
    size_t n_tokens;
    nvfp4_logits_mode logits;
    float *out;               /* host buffer for the requested logits */
} nvfp4_batch_entry;

/* Run N entries (distinct sequences) as one batch.  Before computing, the
 * whole batch is checked: ids, token ids, lengths against max_ctx, the
 * total against max_batch_tokens (NVFP4_ERR_INVALID), and that the pool
 * has the blocks it needs (NVFP4_ERR_KV_FULL, saying how many); a refused
 * batch changes nothing and the context stays usable.  On success every
 * entry's sequence is n_tokens longer.  After any other error the
 * sequences keep their lengths (their new tokens are not cached). */
NVFP4_API nvfp4_status nvfp4_context_run(nvfp4_context *ctx, const nvfp4_batch_entry *entries,
                                         size_t n, nvfp4_error *err);

/* ---- single-sequence wrappers (not thread-safe, see above) ---------------- */

/* Forget the default context's sequence. */
NVFP4_API void nvfp4_model_reset(nvfp4_model *model);
/* Run N tokens at positions pos .. pos+N-1 of the model's default sequence
 * (a context created at first use, of max_ctx tokens): the sequence is cut
 * to POS tokens first (pos past its length is NVFP4_ERR_INVALID).  logits:
 * host buffer of N * vocab floats (all positions), or of vocab floats when
 * last_only, or NULL. */
NVFP4_API nvfp4_status nvfp4_model_forward(nvfp4_model *model, const int32_t *tokens,
                                           size_t n, size_t pos, float *logits,
                                           int last_only, nvfp4_error *err);

/* Rolling-window perplexity as lm-eval's wikitext task computes it
 * (loglikelihood_rolling, context_len 1): windows of ctx tokens, each scoring
 * only the tokens not scored before; the first window starts with PREFIX
 * (pass -1 for the model's BOS, or EOS when it has no BOS).  progress may be
 * NULL.  Runs in a context of its own: thread-safe. */
typedef void (*nvfp4_progress_fn)(size_t done, size_t total, void *user);
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

/* ---- chat templates (a Jinja2 subset) ------------------------------------- */

/* A chat template (tokenizer_config.json's "chat_template", or
 * chat_template.jinja) parsed by the Jinja2 subset that chat templates use:
 * the statements, expressions, filters, tests and string methods of the
 * Llama 3, Qwen 2.5/3, Mistral, SmolLM2, DeepSeek-V3, Gemma 3 and Phi-3
 * templates, under the settings of transformers' apply_chat_template
 * (trim_blocks, lstrip_blocks, loop controls, its tojson, raise_exception,
 * strftime_now).  Parsed once, immutable: one template may be rendered from
 * several threads at once.  Errors name the template line and column and the
 * construct that is unsupported or what failed; err->offset is the byte
 * offset in the template source. */
typedef struct nvfp4_chat_template nvfp4_chat_template;

/* Parse LEN bytes of template source.  NAME (may be NULL) names the template
 * in error messages (as err->file). */
NVFP4_API nvfp4_chat_template *nvfp4_chat_template_parse(const char *src, size_t len,
                                                         const char *name,
                                                         nvfp4_error *err);
/* The chat template of a model directory: chat_template.jinja if present,
 * else tokenizer_config.json's "chat_template" (a string, or the list of
 * {"name", "template"} choosing "default").  The bos/eos/unk/pad tokens of
 * tokenizer_config.json become defaults of the render variables. */
NVFP4_API nvfp4_chat_template *nvfp4_chat_template_load(const char *model_dir,
                                                        nvfp4_error *err);
NVFP4_API void nvfp4_chat_template_free(nvfp4_chat_template *t);

/* Bounds that keep a hostile template from hanging or exhausting memory;
 * exceeding one is an NVFP4_ERR_INVALID naming the template line. */
typedef struct {
    int64_t now;              /* strftime_now's time, Unix seconds shown in UTC;
                                 < 0: the current local time */
    size_t max_output;        /* bytes of rendered text (and of any capture) */
    size_t max_iterations;    /* loop iterations and macro calls, all told */
    size_t max_memory;        /* bytes allocated for values while rendering */
    int max_depth;            /* nesting of macro calls */
} nvfp4_chat_options;

/* Defaults: now -1, 16 MiB output, 1000000 iterations, 256 MiB, depth 64. */
NVFP4_API void nvfp4_chat_options_init(nvfp4_chat_options *opt);

/* Render T.  MESSAGES_JSON: a JSON array of message objects (the variable
 * `messages`).  EXTRA_JSON (may be NULL): a JSON object of further variables
 * (bos_token, eos_token, add_generation_prompt, tools, ...), overriding the
 * template's defaults.  As apply_chat_template does, `tools` and `documents`
 * are none and add_generation_prompt false unless given.  OPT may be NULL
 * (defaults).  Returns the malloc'ed NUL-terminated text (caller frees), its
 * length in *len (may be NULL), or NULL with *err set; raise_exception(msg)
 * gives NVFP4_ERR_INVALID with err->text = msg and err->key =
 * "raise_exception". */
NVFP4_API char *nvfp4_chat_template_render(const nvfp4_chat_template *t,
                                           const char *messages_json,
                                           const char *extra_json,
                                           const nvfp4_chat_options *opt, size_t *len,
                                           nvfp4_error *err);

#ifdef __cplusplus
}
#endif

#endif /* NVFP4_MODEL_H */
