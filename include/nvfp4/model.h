/* SPDX-License-Identifier: MIT */
/**
 * @file nvfp4/model.h
 * @brief The model layer: architectures, weight assembly, the forward pass
 * (prefill and decode with a paged KV cache, many sequences per context),
 * perplexity, sampling, the BPE tokenizer of tokenizer.json and
 * chat templates (link with @c pkg-config @c nvfp4-model).
 *
 * Built on nvfp4/kernels.h.
 *
 * @par Errors
 * Every fallible call returns NULL, -1, (size_t)-1 or a non-zero
 * ::nvfp4_status and, when the caller passes one, fills an ::nvfp4_error
 * naming the file, the tensor or JSON key (and, for chat templates, the
 * template line and column).  The @c err argument may always be NULL.
 * Nothing aborts or prints, except the warnings of nvfp4_model_open()
 * (see nvfp4_model_options::quiet).
 *
 * @par Objects and ownership
 * ::nvfp4_tokenizer, ::nvfp4_model, ::nvfp4_context and
 * ::nvfp4_chat_template are opaque, have one owner and one @c _free, and
 * @c _free(NULL) does nothing.  Pointers that a getter returns into an
 * object (strings, the model's tokenizer and backend, token bytes) are
 * borrowed: they stay valid until that object is freed and must not be
 * freed by the caller.  Buffers the library allocates for the caller (the
 * ids of nvfp4_tokenizer_encode(), the text of nvfp4_tokenizer_decode() and
 * nvfp4_chat_template_render()) are the caller's, released with free().
 * Option and result structs (::nvfp4_model_options,
 * ::nvfp4_context_options, ::nvfp4_batch_entry, ::nvfp4_ppl_result,
 * ::nvfp4_sampler, ::nvfp4_chat_options) are plain caller-owned data.
 *
 * @par Threads
 * An ::nvfp4_model holds the weights and nothing a forward pass writes:
 * after nvfp4_model_open() returns it is immutable, and any number of
 * threads may use one model at the same time through their own contexts
 * (::nvfp4_context), and call its getters and nvfp4_model_perplexity().  A
 * context is not thread-safe: one thread at a time per context (its
 * nvfp4_seq_* and nvfp4_context_* calls included).  On a GPU backend the
 * contexts of one model share the device and its queue, and the library
 * serialises their calls (one pass at a time); on the CPU backend they run
 * truly concurrently.  Three things are NOT thread-safe: nvfp4_model_free()
 * (no context may be alive), nvfp4_backend_set_threads() on
 * nvfp4_model_backend(), and the single-sequence wrappers
 * nvfp4_model_forward() / nvfp4_model_reset(), which share one default
 * context inside the model (call them from one thread at a time, and not
 * while nvfp4_model_free() runs).  A tokenizer and a chat template are
 * immutable once loaded: their @c const functions may be called from
 * several threads at once.  A sampler is used by one thread at a time.
 * The library keeps no global state of its own.
 */
#ifndef NVFP4_MODEL_H
#define NVFP4_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <nvfp4/kernels.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * The version of the libnvfp4-model library in use.
 * @return a static string such as "0.1.0"
 */
NVFP4_API const char *nvfp4_model_version(void);

/* ---- tokenizer (tokenizer.json, BPE) --------------------------------------- */

/** A loaded tokenizer (opaque), immutable after nvfp4_tokenizer_load().
 *  Owned by the caller and freed with nvfp4_tokenizer_free(), unless it is
 *  a model's (nvfp4_model_tokenizer()), which the model owns. */
typedef struct nvfp4_tokenizer nvfp4_tokenizer;

/**
 * Load a Hugging Face tokenizer.json whose model is BPE: byte-level (GPT-2,
 * Llama 3, Qwen, SmolLM styles) or SentencePiece-style with byte fallback
 * (Llama 2, Mistral, Phi-3, Gemma styles), with merges, added and special
 * tokens and these components: normalizers NFC, Prepend, Replace (string
 * pattern); pre-tokenizers ByteLevel (last), Metaspace, Split, Digits, or
 * none; decoders ByteLevel, Metaspace, ByteFallback, Fuse, Replace (string
 * pattern), Strip; Sequences of them.
 * @param path the tokenizer.json file
 * @param err filled on failure, or NULL
 * @return the tokenizer, to be freed with nvfp4_tokenizer_free(); NULL on
 *         failure, naming the file and the key: ::NVFP4_ERR_INVALID (NULL
 *         @p path, or a bad value), ::NVFP4_ERR_NOT_FOUND (no such
 *         file, or a missing key), ::NVFP4_ERR_IO, ::NVFP4_ERR_BAD_JSON,
 *         ::NVFP4_ERR_BAD_ENTRY, ::NVFP4_ERR_TYPE, ::NVFP4_ERR_UNSUPPORTED
 *         for any other model or component (the error names its JSON path,
 *         e.g. "decoder.decoders[1].type"), ::NVFP4_ERR_NOMEM
 */
NVFP4_API nvfp4_tokenizer *nvfp4_tokenizer_load(const char *path, nvfp4_error *err);
/**
 * Free a tokenizer from nvfp4_tokenizer_load(); the token bytes it returned
 * become invalid.  Never pass the tokenizer of a model.
 * @param tok the tokenizer, or NULL (nothing is done)
 */
NVFP4_API void nvfp4_tokenizer_free(nvfp4_tokenizer *tok);
/**
 * The number of token ids: one more than the largest id of the vocabulary
 * and the added tokens.
 * @param tok the tokenizer
 * @return the count; 0 when @p tok is NULL
 */
NVFP4_API size_t nvfp4_tokenizer_vocab_size(const nvfp4_tokenizer *tok);
/**
 * Encode UTF-8 text.  Added and special tokens in the text are matched as
 * the tokenizers library does: the result equals `tokenizers`
 * Tokenizer.encode(text, add_special_tokens=False).ids.
 * @param tok the tokenizer
 * @param text the text (need not be NUL-terminated; NULL only when @p len
 *        is 0)
 * @param len its length in bytes
 * @param ids set to the ids, malloc'ed, which the caller frees with free()
 *        (NULL when there are none); set to NULL on failure
 * @param n_ids set to the number of ids (0 on failure)
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_INVALID for a NULL argument, text that is
 *         not valid UTF-8 (err->offset is the byte), text that exhausts
 *         the pre-tokenizer's matching budget or that the normalizer's
 *         Replace/Prepend steps would make longer than 8 times a piece plus
 *         4096 bytes; ::NVFP4_ERR_NOMEM
 */
NVFP4_API nvfp4_status nvfp4_tokenizer_encode(const nvfp4_tokenizer *tok,
                                              const char *text, size_t len,
                                              int32_t **ids, size_t *n_ids,
                                              nvfp4_error *err);
/**
 * The bytes a token stands for, for streaming output: the decoder chain on
 * the token alone (ByteLevel mapped back to bytes, a <0xNN> byte token its
 * raw byte, Metaspace's and Replace's U+2581 a space), possibly a partial
 * UTF-8 sequence, which the following tokens complete.  Steps that concern
 * the start of the whole text are left out (Strip, and Metaspace dropping
 * the first token's leading U+2581): a streamed token follows a prompt.
 * @param tok the tokenizer
 * @param id the token id
 * @param len set to the number of bytes, or NULL; untouched when NULL is
 *        returned
 * @return the bytes (followed by a NUL byte; use @p len, as a token may
 *         stand for a NUL byte), owned by the tokenizer and valid until it
 *         is freed; NULL for a NULL @p tok or an id out of range or
 *         without a token
 */
NVFP4_API const char *nvfp4_tokenizer_token_bytes(const nvfp4_tokenizer *tok,
                                                  int32_t id, size_t *len);
/**
 * Decode ids to text, as Tokenizer.decode does (the decoder chain over the
 * token strings).
 * @param tok the tokenizer
 * @param ids the ids (NULL only when @p n is 0)
 * @param n their number
 * @param skip_special nonzero drops special tokens
 * @param err filled on failure, or NULL
 * @return the NUL-terminated text, malloc'ed, which the caller frees with
 *         free(); NULL on failure: ::NVFP4_ERR_INVALID (NULL argument, or
 *         the decoder's Replace steps would make the text longer than 8
 *         times the token strings plus 4096 bytes),
 *         ::NVFP4_ERR_OUT_OF_RANGE (an id that is not a token, naming its
 *         index), ::NVFP4_ERR_NOMEM
 */
NVFP4_API char *nvfp4_tokenizer_decode(const nvfp4_tokenizer *tok, const int32_t *ids,
                                       size_t n, int skip_special, nvfp4_error *err);
/**
 * The id of a token string (e.g. `"<|im_end|>"`), the added tokens first.
 * @param tok the tokenizer
 * @param token the exact token string, NUL-terminated
 * @return the id; -1 when there is no such token or an argument is NULL
 */
NVFP4_API int32_t nvfp4_tokenizer_token_id(const nvfp4_tokenizer *tok, const char *token);
/**
 * Whether a token is a special (added, "special": true) token.
 * @param tok the tokenizer
 * @param id the token id
 * @return 1 or 0 (0 for a NULL @p tok or an id out of range)
 */
NVFP4_API int nvfp4_tokenizer_is_special(const nvfp4_tokenizer *tok, int32_t id);

/* ---- model ----------------------------------------------------------------
 * Threads: see the file's documentation (a model is immutable and shared;
 * nvfp4_model_free, nvfp4_backend_set_threads on its backend and the
 * single-sequence wrappers are not thread-safe). */

/** An opened model (opaque): its checkpoint, weights uploaded to its
 *  backend, its tokenizer, and the default context of the single-sequence
 *  wrappers.  Owned by the caller; freed with nvfp4_model_free(). */
typedef struct nvfp4_model nvfp4_model;

/** Options of nvfp4_model_open(); nvfp4_model_options_init() sets every
 *  field to 0 (or NULL), which means the default. */
typedef struct {
    const char *backend;      /**< the backend; NULL: $NVFP4_BACKEND or "cpu" */
    int threads;              /**< CPU worker threads; 0: default */
    int max_ctx;              /**< longest sequence (positions); 0: min(config max, 4096) */
    int rescale_fused;        /**< opt-in: fused shards whose global scales differ run
                                 exactly, each with its own (docs/DIALECTS.md) */
    int quiet;                /**< no warnings on stderr */
} nvfp4_model_options;

/**
 * Set every option to its default (all fields 0 or NULL).
 * @param opt the options to fill (not NULL)
 */
NVFP4_API void nvfp4_model_options_init(nvfp4_model_options *opt);

/**
 * Open a model directory (config.json + safetensors [+ tokenizer.json]):
 * check and assemble the weights, upload them to the backend, load the
 * tokenizer when there is one.  Clears @c *err first.  Unless
 * nvfp4_model_options::quiet, warnings (e.g. unexpected tensors, which are
 * ignored) go to stderr.
 * @param path the model directory
 * @param opt options, or NULL for the defaults; only read during the call
 *        (the backend string need not outlive it)
 * @param err filled on failure, or NULL
 * @return the model, to be freed with nvfp4_model_free(); NULL on failure,
 *         with an error naming the file, the tensor or the config key:
 *         unsupported architecture (::NVFP4_ERR_UNSUPPORTED, listing the
 *         supported ones), missing tensors (::NVFP4_ERR_NOT_FOUND, all of
 *         them), shapes that disagree with config.json, fused-scale
 *         mismatches (::NVFP4_ERR_SCALE_MISMATCH, §4), the checkpoint's own
 *         errors (nvfp4_checkpoint_open()), a tokenizer.json that cannot be
 *         loaded or does not fit the vocabulary, the backend's errors
 *         (::NVFP4_ERR_BACKEND, ::NVFP4_ERR_DEVICE_OOM), ::NVFP4_ERR_NOMEM
 */
NVFP4_API nvfp4_model *nvfp4_model_open(const char *path, const nvfp4_model_options *opt,
                                        nvfp4_error *err);
/**
 * Free a model: its default context, weights, backend and tokenizer; every
 * pointer its getters returned becomes invalid.  Not thread-safe: free
 * every context of the model first, and let no other thread use it.
 * @param model the model, or NULL (nothing is done)
 */
NVFP4_API void nvfp4_model_free(nvfp4_model *model);
/**
 * The architecture, as config.json's "architectures"[0] names it (e.g.
 * "LlamaForCausalLM").
 * @param model the model (not NULL)
 * @return a string owned by the model, valid until nvfp4_model_free()
 */
NVFP4_API const char *nvfp4_model_arch(const nvfp4_model *model);
/**
 * The vocabulary size of config.json: the number of logits per token.
 * @param model the model (not NULL)
 * @return the size
 */
NVFP4_API int nvfp4_model_vocab_size(const nvfp4_model *model);
/**
 * The longest sequence a context of this model holds
 * (nvfp4_model_options::max_ctx, or its default).
 * @param model the model (not NULL)
 * @return the number of positions
 */
NVFP4_API int nvfp4_model_max_ctx(const nvfp4_model *model);
/**
 * The backend the model's weights live on.
 * @param model the model (not NULL)
 * @return the backend, owned by the model (never free it), valid until
 *         nvfp4_model_free(); calling nvfp4_backend_set_threads() on it is
 *         not thread-safe
 */
NVFP4_API nvfp4_backend *nvfp4_model_backend(nvfp4_model *model);
/**
 * The tokenizer of the model directory (its tokenizer.json).
 * @param model the model (not NULL)
 * @return the tokenizer, owned by the model (never free it), valid until
 *         nvfp4_model_free(); NULL when the directory has none
 */
NVFP4_API const nvfp4_tokenizer *nvfp4_model_tokenizer(const nvfp4_model *model);
/**
 * The BOS id of config.json (bos_token_id).
 * @param model the model (not NULL)
 * @return the id; -1 when unknown
 */
NVFP4_API int32_t nvfp4_model_bos(const nvfp4_model *model);
/**
 * The EOS id of config.json (eos_token_id; the first of a list).
 * @param model the model (not NULL)
 * @return the id; -1 when unknown
 */
NVFP4_API int32_t nvfp4_model_eos(const nvfp4_model *model);

/* ---- contexts: many sequences on one model --------------------------------- */

/** Tokens per block of a context's paged KV cache. */
#define NVFP4_KV_BLOCK 16

/**
 * A context on a model (opaque): a paged KV cache (a pool of blocks of
 * ::NVFP4_KV_BLOCK tokens, each sequence a table of blocks), the scratch of
 * a forward pass and its sequences.  nvfp4_context_run() runs one batch:
 * any mix of prefill chunks and single decode tokens of different
 * sequences, in one pass over the weights.  On the CPU backend a
 * sequence's logits are the same bits whether it runs alone or in any
 * batch, at any thread count.  Owned by the caller and freed with
 * nvfp4_context_free() before its model; used by one thread at a time.
 */
typedef struct nvfp4_context nvfp4_context;
/** A sequence of a context, >= 0: an index into the context's
 *  nvfp4_context_options::max_seqs slots, reused after nvfp4_seq_free(). */
typedef int32_t nvfp4_seq;

/** Element type of a context's KV cache (nvfp4_context_options::kv_cache_dtype). */
typedef enum {
    /** What the checkpoint says: FP8 E4M3 for an AMD Quark export with
     *  kv_cache_scheme fp8 (its per-layer k_proj/v_proj output_scale),
     *  float32 otherwise. */
    NVFP4_KV_CACHE_AUTO = 0,
    /** float32: 4 bytes an element; a checkpoint's FP8 KV scheme is ignored. */
    NVFP4_KV_CACHE_F32 = 1,
    /** FP8 E4M3, 1 byte an element (a quarter of float32): the checkpoint's
     *  scales, or scale 1.0 for K and V of every layer when it has none
     *  (as vLLM's kv_cache_dtype fp8 does). */
    NVFP4_KV_CACHE_FP8 = 2
} nvfp4_kv_cache_dtype;

/** Options of nvfp4_context_create(); nvfp4_context_options_init() sets
 *  every field to 0, which means the default. */
typedef struct {
    size_t kv_tokens;         /**< KV pool in tokens (rounded up to blocks); 0: kv_bytes */
    size_t kv_bytes;          /**< KV pool in bytes (K and V, all layers; rounded down
                               *   to blocks); 0 with kv_tokens 0: the model's max_ctx
                               *   tokens */
    size_t max_batch_tokens;  /**< tokens per nvfp4_context_run(); 0: 512 */
    int max_seqs;             /**< live sequences at most; 0: 256 */
    nvfp4_kv_cache_dtype kv_cache_dtype; /**< KV element type; 0: ::NVFP4_KV_CACHE_AUTO */
} nvfp4_context_options;

/**
 * Set every option to its default (all fields 0).
 * @param opt the options to fill (not NULL)
 */
NVFP4_API void nvfp4_context_options_init(nvfp4_context_options *opt);
/**
 * Create a context on a model, with no sequences: the KV pool and the
 * scratch are allocated on the model's backend now.  Clears @c *err first.
 * @param model the model, which must outlive the context
 * @param opt options, or NULL for the defaults; only read during the call
 * @param err filled on failure, or NULL
 * @return the context, to be freed with nvfp4_context_free(); NULL on
 *         failure: ::NVFP4_ERR_INVALID (NULL @p model, negative max_seqs,
 *         a pool of 0 blocks or sizes out of range), ::NVFP4_ERR_NOMEM,
 *         ::NVFP4_ERR_DEVICE_OOM
 */
NVFP4_API nvfp4_context *nvfp4_context_create(nvfp4_model *model,
                                              const nvfp4_context_options *opt,
                                              nvfp4_error *err);
/**
 * Free a context, its KV pool and all its sequences.
 * @param ctx the context, or NULL (nothing is done)
 */
NVFP4_API void nvfp4_context_free(nvfp4_context *ctx);
/**
 * The model of a context.
 * @param ctx the context
 * @return the model given to nvfp4_context_create() (not owned by the
 *         context); NULL when @p ctx is NULL
 */
NVFP4_API const nvfp4_model *nvfp4_context_model(const nvfp4_context *ctx);
/**
 * The blocks of ::NVFP4_KV_BLOCK tokens in the context's KV pool.
 * @param ctx the context
 * @return the count; 0 when @p ctx is NULL
 */
NVFP4_API size_t nvfp4_context_kv_blocks(const nvfp4_context *ctx);
/**
 * The blocks of the KV pool that no sequence holds.
 * @param ctx the context
 * @return the count; 0 when @p ctx is NULL
 */
NVFP4_API size_t nvfp4_context_kv_free_blocks(const nvfp4_context *ctx);
/**
 * The element type the context's KV cache holds, with
 * ::NVFP4_KV_CACHE_AUTO resolved.
 * @param ctx the context
 * @return ::NVFP4_KV_CACHE_F32 or ::NVFP4_KV_CACHE_FP8; ::NVFP4_KV_CACHE_AUTO
 *         when @p ctx is NULL
 */
NVFP4_API nvfp4_kv_cache_dtype nvfp4_context_kv_cache_dtype(const nvfp4_context *ctx);
/**
 * Bytes of KV cache one token takes: K and V of every layer,
 * layers × 2 × kv_heads × head_dim × (4 for float32, 1 for FP8), with the
 * KV heads of this rank under tensor parallelism; for multi-head latent
 * attention (DeepSeek) the one latent row a layer,
 * layers × (kv_lora_rank + qk_rope_head_dim) × 4.
 * @param ctx the context
 * @return the bytes; 0 when @p ctx is NULL
 */
NVFP4_API size_t nvfp4_context_kv_bytes_per_token(const nvfp4_context *ctx);
/**
 * The KV cache the checkpoint asks for, what ::NVFP4_KV_CACHE_AUTO gives
 * a context of the model.
 * @param model the model
 * @return ::NVFP4_KV_CACHE_FP8 for an FP8 KV scheme with its per-layer
 *         scales (AMD Quark kv_cache_scheme fp8), else ::NVFP4_KV_CACHE_F32;
 *         ::NVFP4_KV_CACHE_AUTO when @p model is NULL
 */
NVFP4_API nvfp4_kv_cache_dtype nvfp4_model_kv_cache_dtype(const nvfp4_model *model);

/**
 * Create a new, empty sequence (length 0, holding no block).  Clears
 * @c *err first.
 * @param ctx the context
 * @param seq set to the new id (the lowest free one); -1 on failure
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_INVALID for a NULL argument;
 *         ::NVFP4_ERR_KV_FULL when max_seqs sequences are alive;
 *         ::NVFP4_ERR_NOMEM
 */
NVFP4_API nvfp4_status nvfp4_seq_create(nvfp4_context *ctx, nvfp4_seq *seq,
                                        nvfp4_error *err);
/**
 * Free a sequence: give its blocks back (shared blocks when their last
 * holder goes).  Its id may then be reused by nvfp4_seq_create() or
 * nvfp4_seq_fork().
 * @param ctx the context, or NULL (nothing is done)
 * @param seq the sequence; an id that is not a live sequence is ignored
 */
NVFP4_API void nvfp4_seq_free(nvfp4_context *ctx, nvfp4_seq seq);
/**
 * Keep the first @p len tokens of a sequence; blocks past them go back to
 * the pool.  Never allocates.  Clears @c *err first.
 * @param ctx the context
 * @param seq the sequence
 * @param len the tokens to keep, at most its length (equal: nothing changes)
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_INVALID for a NULL @p ctx, a sequence
 *         that is not alive, or @p len past its length (nothing changes)
 */
NVFP4_API nvfp4_status nvfp4_seq_truncate(nvfp4_context *ctx, nvfp4_seq seq, size_t len,
                                          nvfp4_error *err);
/**
 * Create a new sequence that continues from a parent's cached tokens: it
 * shares the parent's blocks (reference-counted, no block is taken now);
 * whichever of the two writes into a shared block first gets its own copy
 * (copy-on-write, during nvfp4_context_run()), so the two never see each
 * other's later tokens.  Clears @c *err first.
 * @param ctx the context
 * @param parent a live sequence of @p ctx
 * @param child set to the new sequence's id, of the parent's length;
 *        untouched on failure
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_INVALID for a NULL argument or a parent
 *         that is not alive; ::NVFP4_ERR_KV_FULL when max_seqs sequences
 *         are alive; ::NVFP4_ERR_NOMEM
 */
NVFP4_API nvfp4_status nvfp4_seq_fork(nvfp4_context *ctx, nvfp4_seq parent,
                                      nvfp4_seq *child, nvfp4_error *err);
/**
 * The number of tokens cached for a sequence: the position its next token
 * takes.
 * @param ctx the context
 * @param seq the sequence
 * @return the length; (size_t)-1 for a NULL @p ctx or an id that is not a
 *         live sequence
 */
NVFP4_API size_t nvfp4_seq_length(const nvfp4_context *ctx, nvfp4_seq seq);

/** Which logits nvfp4_context_run() writes for a batch entry. */
typedef enum {
    NVFP4_LOGITS_NONE = 0,    /**< none: only fill the KV cache */
    NVFP4_LOGITS_LAST,        /**< the last token's: vocab floats */
    NVFP4_LOGITS_ALL          /**< every token's: n_tokens * vocab floats, token by token */
} nvfp4_logits_mode;

/** One sequence's part of a batch (nvfp4_context_run()); vocab is
 *  nvfp4_model_vocab_size(). */
typedef struct {
    nvfp4_seq seq;            /**< a live sequence of the context */
    const int32_t *tokens;    /**< appended at positions length .. length+n-1; host
                                   memory, read during the call only */
    size_t n_tokens;          /**< number of tokens; 0: the entry does nothing */
    nvfp4_logits_mode logits; /**< which logits to write to out */
    float *out;               /**< host buffer for the requested logits (NULL only
                                   with ::NVFP4_LOGITS_NONE) */
} nvfp4_batch_entry;

/**
 * Run entries of distinct sequences as one batch: append their tokens to
 * their sequences, fill the KV cache and write the requested logits.
 * Before computing, the whole batch is checked: sequence ids, token ids,
 * lengths against max_ctx, the total against max_batch_tokens
 * (::NVFP4_ERR_INVALID), and that the pool has the blocks it needs
 * (::NVFP4_ERR_KV_FULL, saying how many, counting the copies of shared
 * blocks); a refused batch changes nothing and the context stays usable.
 * On success every entry's sequence is n_tokens longer.  After any other
 * error the sequences keep their lengths (their new tokens are not cached)
 * and the output buffers may be partly written.  Clears @c *err first.
 * On a GPU backend the pass holds the model's lock (one pass at a time per
 * model).
 * @param ctx the context
 * @param entries the entries (NULL only when @p n is 0)
 * @param n their number; 0 (or no tokens at all) returns ::NVFP4_OK and
 *        does nothing
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_INVALID (NULL argument, a sequence that
 *         is not alive or named twice, no tokens array or output buffer, a
 *         bad logits mode, a token id outside the vocabulary, past max_ctx
 *         or max_batch_tokens); ::NVFP4_ERR_KV_FULL; during the pass
 *         ::NVFP4_ERR_NONFINITE (a NaN or infinite logit, naming the token
 *         and position), ::NVFP4_ERR_BACKEND, ::NVFP4_ERR_DEVICE_OOM or
 *         ::NVFP4_ERR_NOMEM
 */
NVFP4_API nvfp4_status nvfp4_context_run(nvfp4_context *ctx, const nvfp4_batch_entry *entries,
                                         size_t n, nvfp4_error *err);

/* ---- single-sequence wrappers (not thread-safe, see above) ---------------- */

/**
 * Forget the tokens of the model's default sequence (nvfp4_model_forward());
 * its memory is kept until nvfp4_model_free().  Not thread-safe (the
 * default context is shared).
 * @param model the model, or NULL (nothing is done); nothing is done
 *        either before the first nvfp4_model_forward()
 */
NVFP4_API void nvfp4_model_reset(nvfp4_model *model);
/**
 * Run tokens at positions pos .. pos+N-1 of the model's default sequence,
 * in a default context created at the first call (a KV pool of max_ctx
 * tokens, batches of up to max_ctx tokens, one sequence) and freed by
 * nvfp4_model_free().  The sequence is cut to @p pos tokens first.  Not
 * thread-safe: one thread at a time, and not while nvfp4_model_free()
 * runs; other contexts of the model may be used meanwhile.  Clears
 * @c *err first.
 * @param model the model
 * @param tokens @p n token ids (host memory)
 * @param n their number; 0 returns ::NVFP4_OK and does nothing
 * @param pos the position of the first, at most the tokens cached
 * @param logits host buffer of n * vocab floats (all positions), or of
 *        vocab floats when @p last_only, or NULL (none)
 * @param last_only nonzero writes only the last token's logits
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_INVALID for a NULL @p model, @p pos past
 *         the sequence's length, pos + n past max_ctx or a bad token id;
 *         the errors of nvfp4_context_create() (at the first call) and of
 *         nvfp4_context_run(), after which the sequence holds its first
 *         @p pos tokens
 */
NVFP4_API nvfp4_status nvfp4_model_forward(nvfp4_model *model, const int32_t *tokens,
                                           size_t n, size_t pos, float *logits,
                                           int last_only, nvfp4_error *err);

/**
 * The progress callback of nvfp4_model_perplexity(), called on the calling
 * thread after each window.
 * @param done tokens scored so far
 * @param total tokens to score (the @c n of nvfp4_model_perplexity())
 * @param user the caller's pointer, as given
 * @return 0 to continue; nonzero to cancel the run with
 *         ::NVFP4_ERR_CANCELLED (ignored after the last window)
 */
typedef int (*nvfp4_progress_fn)(size_t done, size_t total, void *user);
/** The result of nvfp4_model_perplexity(). */
typedef struct {
    double nll;               /**< total negative log-likelihood (nats) */
    size_t tokens;            /**< tokens scored */
    double token_ppl;         /**< exp(nll / tokens) */
} nvfp4_ppl_result;
/**
 * Rolling-window perplexity as lm-eval's wikitext task computes it
 * (loglikelihood_rolling, context_len 1): windows of @p ctx tokens, each
 * scoring only the tokens not scored before; the first window starts with
 * @p prefix.  Runs in a context of its own (a KV pool of @p ctx tokens,
 * and ctx * vocab floats of host logits, freed before it returns), so it
 * is thread-safe: several threads may run it on one model at once, and
 * beside other contexts of the model.
 * @param model the model
 * @param tokens @p n token ids (host memory)
 * @param n their number, at least 1
 * @param ctx the window, 2 to nvfp4_model_max_ctx()
 * @param prefix the token that starts the first window; -1 (any negative
 *        value) for the model's BOS, or EOS when it has no BOS
 * @param progress called after each window with the tokens scored so far,
 *        or NULL
 * @param user passed to @p progress
 * @param out the result (not NULL): on success; after a cancellation what
 *        was scored until then (out->tokens of them, their nll and
 *        token_ppl); all zero after any other error
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_CANCELLED when @p progress returned
 *         nonzero before the last window; ::NVFP4_ERR_INVALID (@p n 0,
 *         @p ctx out of range, @p prefix outside the vocabulary, no BOS nor
 *         EOS for a negative @p prefix, a token id outside the
 *         vocabulary); ::NVFP4_ERR_NOMEM; the errors of
 *         nvfp4_context_create() and nvfp4_context_run()
 */
NVFP4_API nvfp4_status nvfp4_model_perplexity(nvfp4_model *model, const int32_t *tokens,
                                              size_t n, size_t ctx, int32_t prefix,
                                              nvfp4_progress_fn progress, void *user,
                                              nvfp4_ppl_result *out, nvfp4_error *err);

/* ---- sampling ------------------------------------------------------------- */

/** A token sampler: temperature, nucleus (top-p) and its random state.
 *  Plain data owned by the caller (nothing to free), set up with
 *  nvfp4_sampler_init(); one thread at a time per sampler.  For a given
 *  seed the sequence of picks is reproducible. */
typedef struct {
    float temperature;        /**< <= 0: greedy (argmax, first on ties) */
    float top_p;              /**< nucleus mass in (0, 1]; 1 = all */
    uint64_t state;           /**< xorshift state from the seed (never 0) */
} nvfp4_sampler;

/**
 * Set up a sampler.
 * @param s the sampler to fill (not NULL)
 * @param temperature the softmax temperature; <= 0 for greedy
 * @param top_p the nucleus mass; a value outside (0, 1] means 1 (all)
 * @param seed any value; the random state is derived from it
 */
NVFP4_API void nvfp4_sampler_init(nvfp4_sampler *s, float temperature, float top_p,
                                  uint64_t seed);
/**
 * Pick the next token from one row of logits: the argmax (the first on
 * ties) when the temperature is <= 0 (or @p vocab < 2, or out of memory);
 * else a draw from the softmax at the temperature, restricted to the most
 * probable tokens whose mass reaches top_p (advancing the random state).
 * @param s the sampler
 * @param logits @p vocab floats (host memory)
 * @param vocab their number, at least 1
 * @return the token id, 0 to @p vocab - 1
 */
NVFP4_API int32_t nvfp4_sampler_sample(nvfp4_sampler *s, const float *logits,
                                       size_t vocab);

/* ---- chat templates (a Jinja2 subset) ------------------------------------- */

/**
 * A chat template (opaque): tokenizer_config.json's "chat_template", or
 * chat_template.jinja, parsed by the Jinja2 subset that chat templates use:
 * the statements, expressions, filters, tests and string methods of the
 * Llama 3, Qwen 2.5/3, Mistral, SmolLM2, DeepSeek-V3, Gemma 3 and Phi-3
 * templates, under the settings of transformers' apply_chat_template
 * (trim_blocks, lstrip_blocks, loop controls, its tojson, raise_exception,
 * strftime_now).  Parsed once, immutable: one template may be rendered from
 * several threads at once.  Errors name the template line and column and
 * the construct that is unsupported or what failed; err->offset is the
 * byte offset in the template source.  Owned by the caller; freed with
 * nvfp4_chat_template_free().
 */
typedef struct nvfp4_chat_template nvfp4_chat_template;

/**
 * Parse template source (after jinja2's newline normalisation: \\r\\n and
 * \\r become \\n, one trailing newline is dropped).  The source and name
 * are copied: they need not outlive the call.
 * @param src the source (need not be NUL-terminated; NULL only when @p len
 *        is 0)
 * @param len its length in bytes, at most 16 MiB
 * @param name names the template in error messages (as err->file), or NULL
 * @param err filled on failure, or NULL
 * @return the template, to be freed with nvfp4_chat_template_free(); NULL
 *         on failure: ::NVFP4_ERR_INVALID (a syntax error, a NUL byte, too
 *         long), ::NVFP4_ERR_UNSUPPORTED (a construct outside the subset),
 *         ::NVFP4_ERR_NOMEM
 */
NVFP4_API nvfp4_chat_template *nvfp4_chat_template_parse(const char *src, size_t len,
                                                         const char *name,
                                                         nvfp4_error *err);
/**
 * Load the chat template of a model directory: chat_template.jinja if
 * present, else tokenizer_config.json's "chat_template" (a string, or the
 * list of {"name", "template"} choosing "default").  The bos/eos/unk/pad
 * tokens of tokenizer_config.json become defaults of the render variables.
 * @param model_dir the model directory
 * @param err filled on failure, or NULL
 * @return the template, to be freed with nvfp4_chat_template_free(); NULL
 *         on failure: ::NVFP4_ERR_INVALID (NULL @p model_dir),
 *         ::NVFP4_ERR_NOT_FOUND (no template), ::NVFP4_ERR_BAD_JSON,
 *         ::NVFP4_ERR_TYPE (a chat_template that is neither a string nor a
 *         list), ::NVFP4_ERR_IO, ::NVFP4_ERR_NOMEM, or the errors of
 *         nvfp4_chat_template_parse() (err->file naming the file)
 */
NVFP4_API nvfp4_chat_template *nvfp4_chat_template_load(const char *model_dir,
                                                        nvfp4_error *err);
/**
 * Free a chat template.
 * @param t the template, or NULL (nothing is done)
 */
NVFP4_API void nvfp4_chat_template_free(nvfp4_chat_template *t);

/** Bounds that keep a hostile template from hanging or exhausting memory;
 *  exceeding one is an ::NVFP4_ERR_INVALID naming the template line.  Each
 *  is a hard limit (0 allows nothing): start from nvfp4_chat_options_init(). */
typedef struct {
    int64_t now;              /**< strftime_now's time, Unix seconds shown in UTC;
                                 < 0: the current local time */
    size_t max_output;        /**< bytes of rendered text (and of any capture) */
    size_t max_iterations;    /**< loop iterations and macro calls, all told */
    size_t max_memory;        /**< bytes allocated for values while rendering */
    int max_depth;            /**< nesting of macro calls */
} nvfp4_chat_options;

/**
 * Set the defaults: now -1, 16 MiB output, 10000000 iterations, 256 MiB,
 * depth 64.
 * @param opt the options to fill, or NULL (nothing is done)
 */
NVFP4_API void nvfp4_chat_options_init(nvfp4_chat_options *opt);

/**
 * Render a template.  As apply_chat_template does, `tools` and `documents`
 * are none and add_generation_prompt false unless given.
 * @param t the template
 * @param messages_json a JSON array of message objects (the variable
 *        `messages`); NULL is an empty array
 * @param extra_json a JSON object of further variables (bos_token,
 *        eos_token, add_generation_prompt, tools, ...), overriding the
 *        template's defaults, or NULL
 * @param opt the bounds, or NULL for the defaults (nvfp4_chat_options_init())
 * @param len set to the text's length (0 on failure), or NULL
 * @param err filled on failure, or NULL
 * @return the NUL-terminated text, malloc'ed, which the caller frees with
 *         free(); NULL on failure: ::NVFP4_ERR_INVALID (NULL @p t, a
 *         bound exceeded, a failing expression; raise_exception(msg) gives
 *         err->text = msg and err->key = "raise_exception"),
 *         ::NVFP4_ERR_BAD_JSON (key "messages" or "extra"),
 *         ::NVFP4_ERR_UNSUPPORTED, ::NVFP4_ERR_NOMEM
 */
NVFP4_API char *nvfp4_chat_template_render(const nvfp4_chat_template *t,
                                           const char *messages_json,
                                           const char *extra_json,
                                           const nvfp4_chat_options *opt, size_t *len,
                                           nvfp4_error *err);

#ifdef __cplusplus
}
#endif

#endif /* NVFP4_MODEL_H */
