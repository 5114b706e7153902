/* SPDX-License-Identifier: MIT */
/**
 * @file nvfp4/kernels.h
 * @brief The compute layer: a backend interface (a small table of functions
 * per backend, a registry, a per-operation "supported?" query, after ggml)
 * and the operations a transformer forward pass needs (link with
 * @c pkg-config @c nvfp4-kernels).
 *
 * Built on nvfp4/quant.h; knows nothing about model architectures.
 *
 * @par Memory
 * Every float/int pointer passed to an operation is backend memory,
 * obtained from nvfp4_backend_alloc() (on the CPU backend that is plain,
 * 64-byte aligned host memory; on a GPU backend, device memory that the
 * host must not dereference: move data with nvfp4_backend_upload() and
 * nvfp4_backend_download()).  Weights are uploaded once with
 * nvfp4_kweight_upload(), into the layout the backend prefers.  All
 * activations are float32, row-major.
 *
 * @par Errors
 * Arguments are checked once, in the registry, before a backend sees them:
 * a NULL pointer, an inconsistent size or a weight of another backend is
 * ::NVFP4_ERR_INVALID (or ::NVFP4_ERR_BAD_SHAPE), element counts beyond
 * 2^48 are ::NVFP4_ERR_OVERFLOW, an operation the backend does not
 * implement is ::NVFP4_ERR_UNSUPPORTED naming the backend and the op
 * (nvfp4_backend_supports() says so beforehand); a backend's own failures
 * are ::NVFP4_ERR_BACKEND, ::NVFP4_ERR_NOMEM or ::NVFP4_ERR_DEVICE_OOM.  An
 * operation with m == 0 (n == 0 for nvfp4_k_add()) returns ::NVFP4_OK
 * without checking its pointers.  Nothing aborts.  The @c err argument may
 * be NULL.
 *
 * @par Asynchrony
 * A GPU backend may queue operations on its stream and return before they
 * finish; nvfp4_backend_upload() and nvfp4_backend_download() wait for the
 * copy (and so for the work queued before it), and nvfp4_backend_sync()
 * waits for everything.  Embedding ids and expert indices in device memory
 * are checked on the device: a bad one is reported (::NVFP4_ERR_INVALID) by
 * the next nvfp4_backend_sync(), and the rows it selected are left zero.
 * The CPU backend runs every operation before returning and checks ids and
 * indices at the call.
 *
 * @par Threads
 * The registry is initialised once, thread-safely, on first use; its
 * functions may be called from any thread.  Different backends (and
 * weights on them) may be used from different threads at once.  The CPU
 * backend keeps no scratch state between calls, so its operations may also
 * run concurrently on one backend, writing distinct outputs (each call runs
 * its own OpenMP team of nvfp4_backend_threads() threads), as long as no
 * thread calls nvfp4_backend_set_threads() meanwhile.  A GPU backend owns
 * one stream and grow-only scratch memory: use it from one thread at a time
 * (external locking).  Freeing a backend or a weight while another thread
 * uses it is undefined.
 *
 * @par Reproducibility
 * For a given backend, input and m, results are the same bits whatever the
 * number of threads (outputs are partitioned, never one reduction).
 * Float32 summation order may differ from PyTorch's.  On the CPU backend
 * every row-wise operation (linear, MoE, norms, attention) is also
 * batch-invariant: a row's result is the same bits whatever the other rows
 * of the call and whatever m.  GPU backends pick kernels by m (GEMV for few
 * rows, tiled or tensor-core GEMM for more) and agree across m only to
 * float32 summation error (docs/ARCHITECTURE.md).
 *
 * @par Environment
 * NVFP4_BACKEND picks the backend when none is named; NVFP4_BACKEND_PATH
 * (colon-separated) is searched for GPU backend modules
 * (nvfp4-backend-NAME.so) before the installed backends directory, once,
 * at the registry's first use; NVFP4_CPU_ISA (scalar, avx2, avx512, vnni,
 * amx) caps the CPU backend's instruction set, read when a CPU backend is
 * opened (the isa option of nvfp4_backend_open_with() overrides it).
 */
#ifndef NVFP4_KERNELS_H
#define NVFP4_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <nvfp4/quant.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * The version of the libnvfp4-kernels library in use.
 * @return a static string such as "0.1.0"
 */
NVFP4_API const char *nvfp4_kernels_version(void);

/** The operations a backend may implement (nvfp4_backend_supports()). */
typedef enum {
    NVFP4_OP_LINEAR_W4A4 = 0,  /**< nvfp4_k_linear(): NVFP4 weights, activations qdq'd (§5) */
    NVFP4_OP_LINEAR_W4A16,     /**< nvfp4_k_linear(): NVFP4 weights, float activations */
    NVFP4_OP_LINEAR_DENSE,     /**< nvfp4_k_linear(): F32/BF16/F16 weights */
    NVFP4_OP_EMBED,            /**< nvfp4_k_embed() */
    NVFP4_OP_RMSNORM,          /**< nvfp4_k_rmsnorm() */
    NVFP4_OP_ROPE,             /**< nvfp4_k_rope() */
    NVFP4_OP_ATTENTION,        /**< nvfp4_k_attention() */
    NVFP4_OP_SILU_MUL,         /**< nvfp4_k_silu_mul() */
    NVFP4_OP_SOFTMAX,          /**< nvfp4_k_softmax() */
    NVFP4_OP_TOPK,             /**< nvfp4_k_topk() */
    NVFP4_OP_MOE,              /**< nvfp4_k_moe() */
    NVFP4_OP_ADD,              /**< nvfp4_k_add() */
    NVFP4_OP_LOGSOFTMAX,       /**< nvfp4_k_logsoftmax() */
    NVFP4_OP_ARGMAX,           /**< nvfp4_k_argmax() */
    NVFP4_OP_GATE_ADD,         /**< nvfp4_k_gate_add(): y += sigmoid(gate) * x (Qwen2-MoE) */
    NVFP4_OP_ATTENTION_PAGED,  /**< nvfp4_k_attention_paged(): per-sequence block tables */
    NVFP4_OP_GLU,              /**< nvfp4_k_glu(): gated activations (nvfp4_glu_kind) */
    NVFP4_OP_SCALE,            /**< nvfp4_k_scale(): y = s * x (Gemma's embedding scale) */
    NVFP4_OP_COUNT             /**< number of operations (not an operation) */
} nvfp4_op;

/**
 * The name of an operation ("linear_w4a4", "embed", ...), as error
 * messages spell it.
 * @param op any value
 * @return a static string; "unknown" when @p op is out of range
 */
NVFP4_API const char *nvfp4_op_name(nvfp4_op op);

/** An opened backend (opaque): its device context, streams and settings.
 *  Owned by the caller; freed with nvfp4_backend_free(). */
typedef struct nvfp4_backend nvfp4_backend;
/** A Linear (or embedding table) uploaded to a backend (opaque).  Owned by
 *  the caller; freed with nvfp4_kweight_free(), before its backend. */
typedef struct nvfp4_kweight nvfp4_kweight;

/* ---- registry ------------------------------------------------------------ */

/**
 * Number of registered backends: "cpu" always (first), and "cuda" / "hip"
 * when their module was found, available or not.  The first call loads
 * the modules.
 * @return the count, at least 1
 */
NVFP4_API size_t nvfp4_backend_count(void);
/**
 * The name of the @p i th registered backend.
 * @param i index, 0 to nvfp4_backend_count() - 1
 * @return a static string; NULL when @p i is out of range
 */
NVFP4_API const char *nvfp4_backend_name_at(size_t i);
/**
 * Whether a backend is registered and has a usable device on this machine.
 * @param name "cpu", "cuda", "hip", or NULL
 * @return 1 or 0
 */
NVFP4_API int nvfp4_backend_available(const char *name);

/**
 * Open a backend.  Never a silent fallback: an unknown or unavailable
 * backend is an error.
 * @param name the backend; NULL or "" means the value of NVFP4_BACKEND,
 *        else "cpu"
 * @param err filled on failure, or NULL
 * @return the backend, to be freed with nvfp4_backend_free(); NULL on
 *         failure: ::NVFP4_ERR_BACKEND with a message saying why (not
 *         registered, or no device; where the name came from) and listing
 *         the registered backends, ::NVFP4_ERR_NOMEM, or the backend's own
 *         open error (e.g. NVFP4_GPU_DEVICE out of range)
 */
NVFP4_API nvfp4_backend *nvfp4_backend_open(const char *name, nvfp4_error *err);
/**
 * Open a backend with options of its own, parsed once, here (as ggml's
 * device init parameters).  nvfp4_backend_open() is this with no options.
 * An option not given takes its environment default (the variables of the
 * Environment paragraph above and of nvfp4(1)), read now, never later.
 *
 * Options of the cpu backend: isa=scalar|avx2|avx512|vnni|amx (a cap, as
 * NVFP4_CPU_ISA; amx: W4A4 products of 64 tokens or more on the AMX tile
 * unit where the CPU and the OS allow it, the same bits as vnni), threads=N (as nvfp4_backend_set_threads()).  Options of
 * the cuda and hip backends: device=N (NVFP4_GPU_DEVICE),
 * linear=auto|gemv|tiled|mma|fp4 (NVFP4_GPU_LINEAR: pin one linear path;
 * a weight the path cannot run fails with ::NVFP4_ERR_UNSUPPORTED),
 * gemv_rows=1|2|4 (NVFP4_GPU_GEMV_ROWS), mma=0|1 and fp4mma=0|1 (0 as
 * NVFP4_GPU_NO_MMA and NVFP4_GPU_NO_FP4MMA: tensor-core paths off).
 * @param name as for nvfp4_backend_open()
 * @param params NULL, "", or "key=value" pairs separated by commas
 * @param err filled on failure, or NULL
 * @return the backend, or NULL: the errors of nvfp4_backend_open(), and
 *         ::NVFP4_ERR_INVALID for an unknown key or a bad value (the
 *         message names it and lists the backend's keys)
 */
NVFP4_API nvfp4_backend *nvfp4_backend_open_with(const char *name, const char *params,
                                                 nvfp4_error *err);
/**
 * Close a backend and free its state.  Free its weights and release its
 * memory first.  A GPU module stays loaded.
 * @param be the backend, or NULL (nothing is done)
 */
NVFP4_API void nvfp4_backend_free(nvfp4_backend *be);
/**
 * The backend's name.
 * @param be the backend
 * @return a static string ("cpu", "cuda", "hip"); NULL when @p be is NULL
 */
NVFP4_API const char *nvfp4_backend_name(const nvfp4_backend *be);
/**
 * Whether this backend implements an operation; a caller may fall back to
 * the CPU per operation.
 * @param be the backend
 * @param op the operation
 * @return 1 or 0 (0 for a NULL @p be or an unknown @p op)
 */
NVFP4_API int nvfp4_backend_supports(const nvfp4_backend *be, nvfp4_op op);
/**
 * Whether this backend runs an operation on weights of a given format
 * (as ggml's supports_op looks at the tensors' types): before uploading,
 * a caller can choose where a layer goes.  nvfp4_k_linear(),
 * nvfp4_k_embed() and nvfp4_k_moe() on a weight of a format the backend
 * does not run return ::NVFP4_ERR_UNSUPPORTED naming the op and the format.
 * @param be the backend
 * @param op the operation; for an operation without weights the format is
 *        ignored and this is nvfp4_backend_supports()
 * @param scheme the weight's scheme; ::NVFP4_OP_LINEAR_W4A4,
 *        ::NVFP4_OP_LINEAR_W4A16 and ::NVFP4_OP_LINEAR_DENSE take their own
 *        (W4A4, W4A16, NONE) only
 * @param dtype for ::NVFP4_SCHEME_NONE the weight's dtype (F32, BF16 or
 *        F16); ignored for NVFP4 schemes
 * @return 1 or 0 (0 for a NULL @p be, an unknown @p op, or a format that
 *         does not exist)
 */
NVFP4_API int nvfp4_backend_supports_format(const nvfp4_backend *be, nvfp4_op op,
                                            nvfp4_scheme scheme, nvfp4_dtype dtype);
/**
 * Set the number of worker threads of a CPU backend (ignored by backends
 * without threads): operations run on the calling thread and up to
 * @p threads - 1 threads of the backend's own, started when first needed,
 * which claim pieces of each operation as they get a core.  Results do not
 * depend on it.
 * @param be the backend, or NULL (nothing is done)
 * @param threads the count; 0 (or negative) restores the default, OpenMP's
 *        (OMP_NUM_THREADS, else every core)
 */
NVFP4_API void nvfp4_backend_set_threads(nvfp4_backend *be, int threads);
/**
 * The number of worker threads an operation uses.
 * @param be the backend
 * @return the count; 1 for a backend without threads or a NULL @p be
 */
NVFP4_API int nvfp4_backend_threads(const nvfp4_backend *be);
/**
 * Wait for all queued work of a GPU backend and report errors found on
 * the device (out-of-range embedding ids or expert indices); returns at
 * once on the CPU.
 * @param be the backend
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_INVALID for a bad id or index seen since
 *         the last sync, or a NULL @p be; ::NVFP4_ERR_BACKEND
 */
NVFP4_API nvfp4_status nvfp4_backend_sync(nvfp4_backend *be, nvfp4_error *err);

/* ---- memory -------------------------------------------------------------- */

/**
 * Allocate backend memory for operation arguments.
 * @param be the backend
 * @param bytes size (0 allocates a minimal block)
 * @param err filled on failure, or NULL
 * @return the memory, uninitialised, owned by the caller and released with
 *         nvfp4_backend_release() on the same backend; NULL on failure
 *         (::NVFP4_ERR_NOMEM, ::NVFP4_ERR_DEVICE_OOM, ::NVFP4_ERR_INVALID for
 *         a NULL @p be)
 */
NVFP4_API void *nvfp4_backend_alloc(nvfp4_backend *be, size_t bytes, nvfp4_error *err);
/**
 * Release memory from nvfp4_backend_alloc().
 * @param be the backend it came from
 * @param ptr the memory, or NULL (nothing is done; nor for a NULL @p be)
 */
NVFP4_API void nvfp4_backend_release(nvfp4_backend *be, void *ptr);
/**
 * Copy host memory into backend memory; returns when the copy is done.
 * @param be the backend
 * @param dst backend memory of at least @p bytes
 * @param src host memory
 * @param bytes size; 0 does nothing
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_INVALID for a NULL argument;
 *         ::NVFP4_ERR_BACKEND
 */
NVFP4_API nvfp4_status nvfp4_backend_upload(nvfp4_backend *be, void *dst,
                                            const void *src, size_t bytes,
                                            nvfp4_error *err);
/**
 * Copy backend memory to the host; waits for the work queued before it.
 * @param be the backend
 * @param dst host memory of at least @p bytes
 * @param src backend memory
 * @param bytes size; 0 does nothing
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_INVALID for a NULL argument;
 *         ::NVFP4_ERR_BACKEND
 */
NVFP4_API nvfp4_status nvfp4_backend_download(nvfp4_backend *be, void *dst,
                                              const void *src, size_t bytes,
                                              nvfp4_error *err);

/**
 * Upload a validated Linear, or several fused along the output dimension
 * (q/k/v, gate/up: @p parts[0]'s rows first), as one weight of n = the sum
 * of the parts' n.  Also used for embedding tables and a tied lm_head.
 * The backend may keep pointing into the mapped file (the CPU backend's
 * unquantized weights, unless nvfp4_kweight_upload_ex() asks for a copy)
 * or repack (NVFP4 on the CPU; everything on a GPU).
 * @param be the backend
 * @param parts loaded views (nvfp4_linear_load()) that agree on k and
 *        scheme and, for NVFP4, on weight_scale_2 (nvfp4_linear_fuse_check());
 *        the fused input scale is the largest of the parts'.  The array may
 *        be freed after the call, but the checkpoint holding the parts'
 *        tensors, and any rescaled block scales they own, must stay valid
 *        until nvfp4_kweight_free()
 * @param nparts number of parts, at least 1
 * @param err filled on failure, or NULL
 * @return the weight, to be freed with nvfp4_kweight_free(); NULL on
 *         failure: ::NVFP4_ERR_INVALID (mixed schemes, missing data, bad
 *         scales), ::NVFP4_ERR_BAD_SHAPE, ::NVFP4_ERR_BAD_DTYPE,
 *         ::NVFP4_ERR_SCALE_MISMATCH (global scales differ),
 *         ::NVFP4_ERR_OVERFLOW, ::NVFP4_ERR_NOMEM, ::NVFP4_ERR_DEVICE_OOM,
 *         naming the part
 */
NVFP4_API nvfp4_kweight *nvfp4_kweight_upload(nvfp4_backend *be,
                                              const nvfp4_linear *parts, size_t nparts,
                                              nvfp4_error *err);

/**
 * nvfp4_kweight_upload_ex() flag: copy unquantized (float) weights into the
 * backend's own memory instead of pointing into the parts.  On the CPU
 * backend the copy is 2 MiB-aligned and offered to transparent huge pages,
 * which a GEMV streams faster than a mapped file's 4 KiB pages (SmolLM2's
 * BF16 head in a decode step: about 0.78 of the read probe in place, 0.9
 * copied); nvfp4_kweight_holds_copy() then answers 1, and the caller may
 * give the parts' pages back.  Worth it for weights multiplied every token
 * (libmodel asks it for every Linear, the lm_head tied or not); a table
 * only looked up (nvfp4_k_embed()) is read a few rows a token and best left
 * in place.  NVFP4 weights are always repacked, and GPU backends always
 * copy: there the flag changes nothing.
 */
#define NVFP4_KWEIGHT_COPY 1u

/**
 * nvfp4_kweight_upload() with flags.
 * @param be the backend
 * @param parts as for nvfp4_kweight_upload()
 * @param nparts number of parts, at least 1
 * @param flags 0 or ::NVFP4_KWEIGHT_COPY
 * @param err filled on failure, or NULL
 * @return as nvfp4_kweight_upload(); also NULL with ::NVFP4_ERR_INVALID for
 *         an unknown flag
 */
NVFP4_API nvfp4_kweight *nvfp4_kweight_upload_ex(nvfp4_backend *be,
                                                 const nvfp4_linear *parts, size_t nparts,
                                                 unsigned flags, nvfp4_error *err);
/**
 * Free an uploaded weight (its copy, host or device).  Before its backend.
 * @param w the weight, or NULL (nothing is done)
 */
NVFP4_API void nvfp4_kweight_free(nvfp4_kweight *w);
/**
 * Whether the backend keeps its own copy of the weight (repacked in host
 * memory, or on a device), so that the caller may give the parts' mapped
 * pages back (nvfp4_checkpoint_release_pages(); they are faulted in again
 * should they be read).
 * @param w the weight
 * @return 1 for a copy; 0 when the backend reads the parts in place (the
 *         CPU backend's unquantized weights uploaded without
 *         ::NVFP4_KWEIGHT_COPY) or @p w is NULL
 */
NVFP4_API int nvfp4_kweight_holds_copy(const nvfp4_kweight *w);
/**
 * Rows of an uploaded weight.
 * @param w the weight
 * @return n, its outputs; 0 when @p w is NULL
 */
NVFP4_API int64_t nvfp4_kweight_rows(const nvfp4_kweight *w);
/**
 * Columns of an uploaded weight.
 * @param w the weight
 * @return k, its inputs; 0 when @p w is NULL
 */
NVFP4_API int64_t nvfp4_kweight_cols(const nvfp4_kweight *w);

/* ---- operations ------------------------------------------------------------
 * All return NVFP4_OK or an error status (filling err), as described in the
 * file's documentation.  m = number of rows (tokens).  Every array is
 * backend memory.  Output buffers must not alias inputs unless stated. */

/**
 * Linear layer: y[m, n] = x[m, k] · W^T (+ bias), accumulated in float32.
 * The mode follows W's scheme: W4A4 quantize-dequantizes each row of x
 * with W's input scale first (§5); W4A16 and unquantized weights take x as
 * it is.
 * @param be the backend
 * @param w a weight uploaded to @p be, [n, k]
 * @param x [m, k] inputs
 * @param m rows (tokens)
 * @param y [m, n] outputs
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK or an error status
 */
NVFP4_API nvfp4_status nvfp4_k_linear(nvfp4_backend *be, const nvfp4_kweight *w,
                                      const float *x, size_t m, float *y,
                                      nvfp4_error *err);
/**
 * Several linear layers of one input: y[i][m, n_i] = x[m, k] · W_i^T for
 * i < @p count, the same bits as @p count nvfp4_k_linear() calls, with
 * the work they share done once where the backend can (the CPU backend
 * quantizes x once for W4A4 weights whose input scales are equal, as a
 * layer's q, k and v projections are).  Every weight has the same k; on
 * an error no output is defined.
 * @param be the backend
 * @param w @p count weights uploaded to @p be, [n_i, k]
 * @param count number of weights (0: nothing to do)
 * @param x [m, k] inputs
 * @param m rows (tokens)
 * @param y @p count outputs, y[i] [m, n_i], none aliasing @p x or another
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK or an error status
 */
NVFP4_API nvfp4_status nvfp4_k_linear_multi(nvfp4_backend *be,
                                            const nvfp4_kweight *const *w, size_t count,
                                            const float *x, size_t m, float *const *y,
                                            nvfp4_error *err);
/**
 * Embedding lookup: y[i, :] = row @p ids[i] of the table W (an unquantized
 * or NVFP4 weight, dequantized exactly).
 * @param be the backend
 * @param w the table uploaded to @p be, [rows, k]
 * @param ids [m] token ids, each in [0, rows) (see the file's notes on
 *        device memory)
 * @param m number of ids
 * @param y [m, k] outputs
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_INVALID for an id out of range (CPU)
 */
NVFP4_API nvfp4_status nvfp4_k_embed(nvfp4_backend *be, const nvfp4_kweight *w,
                                     const int32_t *ids, size_t m, float *y,
                                     nvfp4_error *err);
/**
 * RMSNorm per row of d: y = x / sqrt(mean(x^2) + eps) × weight.  Also used
 * per head for q/k norms with m = tokens × heads, d = head_dim.
 * @param be the backend
 * @param x [m, d] inputs
 * @param weight [d] scale
 * @param m rows
 * @param d row length, > 0
 * @param eps added to the mean square, >= 0
 * @param y [m, d] outputs; may be @p x (in place)
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK or an error status
 */
NVFP4_API nvfp4_status nvfp4_k_rmsnorm(nvfp4_backend *be, const float *x,
                                       const float *weight, size_t m, size_t d,
                                       float eps, float *y, nvfp4_error *err);
/**
 * Rotary position embedding, in place, in the "rotate half" layout (HF
 * Llama/Qwen/Mistral): the first @p rot_dim elements of each head are
 * rotated by the angle position × inv_freq[j] (formed in float32), with
 * cos and sin multiplied by @p attn_factor.
 * @param be the backend
 * @param x [m, heads, head_dim], rotated in place
 * @param positions [m] position of each row
 * @param m rows (tokens)
 * @param heads heads per row, > 0
 * @param head_dim elements per head, > 0
 * @param rot_dim rotated elements per head: even, 0 < rot_dim <= head_dim
 * @param inv_freq [rot_dim / 2] inverse frequencies, any scaling (such as
 *        Llama 3's) already folded in by the caller
 * @param attn_factor factor on cos and sin (1 for plain RoPE)
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK or an error status
 */
NVFP4_API nvfp4_status nvfp4_k_rope(nvfp4_backend *be, float *x, const int32_t *positions,
                                    size_t m, size_t heads, size_t head_dim,
                                    size_t rot_dim, const float *inv_freq,
                                    float attn_factor, nvfp4_error *err);
/**
 * Causal attention with grouped-query heads and a KV cache.  @p k and
 * @p v are first appended to the caches at positions pos0 .. pos0 + m - 1;
 * then token i attends to cache positions 0 .. pos0 + i.  Query head h
 * uses KV head h / (nh / nkv).
 * @param be the backend
 * @param q [m, nh, hd] queries
 * @param k [m, nkv, hd] new keys
 * @param v [m, nkv, hd] new values
 * @param k_cache [max_ctx, nkv, hd] key cache (positions below @p pos0 as
 *        earlier calls wrote them)
 * @param v_cache [max_ctx, nkv, hd] value cache
 * @param max_ctx cache length; pos0 + m <= max_ctx
 * @param pos0 position of the first new token (tokens already cached)
 * @param m new tokens
 * @param nh query heads, a positive multiple of @p nkv
 * @param nkv key/value heads, > 0
 * @param hd head dimension, > 0
 * @param scale factor on the scores, usually 1 / sqrt(hd)
 * @param out [m, nh, hd] outputs
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_INVALID when the positions exceed the
 *         cache or the head counts disagree
 */
NVFP4_API nvfp4_status nvfp4_k_attention(nvfp4_backend *be, const float *q,
                                         const float *k, const float *v,
                                         float *k_cache, float *v_cache,
                                         size_t max_ctx, size_t pos0, size_t m,
                                         size_t nh, size_t nkv, size_t hd,
                                         float scale, float *out, nvfp4_error *err);
/** Element type of a paged KV pool (nvfp4_kv_pages::dtype). */
typedef enum {
    NVFP4_KV_ELEM_F32 = 0,      /**< float32, 4 bytes an element */
    NVFP4_KV_ELEM_FP8_E4M3 = 1  /**< FP8 E4M3FN, 1 byte an element: a row x is stored
                                     as e4m3(x / scale) (clamped to +-448, ties to even)
                                     and read back as e4m3 * scale (vLLM's fp8 cache) */
} nvfp4_kv_elem;

/**
 * A paged KV cache (after vLLM's PagedAttention): K and V of every
 * sequence live in fixed-size blocks of a shared pool, found through the
 * sequence's block table.  Everything but max_len is backend memory; the
 * caller (a libmodel context) owns all of it.
 */
typedef struct {
    void *k_pool;               /**< [nblocks, block, nkv, hd] keys, elements of @c dtype */
    void *v_pool;               /**< [nblocks, block, nkv, hd] values, elements of @c dtype */
    size_t nblocks;             /**< blocks in the pool */
    size_t block;               /**< tokens per block */
    const int32_t *tables;      /**< [ntables, max_blocks] block ids */
    size_t ntables;             /**< rows of @c tables (sequences) */
    size_t max_blocks;          /**< columns of @c tables */
    const int32_t *pos;         /**< [m] position of each row in its sequence */
    const int32_t *seq;         /**< [m] table row of each row's sequence */
    size_t max_len;             /**< host value: >= pos[i] + 1 for every row */
    size_t window;              /**< host value: sliding window, a row at position p
                                     attends to positions p - window + 1 .. p only;
                                     0 for none (every earlier position) */
    nvfp4_kv_elem dtype;        /**< host value: element type of both pools (0: float32) */
    float k_scale;              /**< host value: FP8 pools: the keys' per-tensor scale, > 0 */
    float v_scale;              /**< host value: FP8 pools: the values' per-tensor scale, > 0 */
    const float *sinks;         /**< [nh] attention sinks (gpt-oss), one logit per query
                                     head that joins each softmax's denominator (and
                                     its maximum) and weighs no value; NULL for none */
} nvfp4_kv_pages;

/**
 * Causal attention for rows of several sequences at once (a batch of
 * prefill chunks and decode tokens).  Row i (q[i], k[i], v[i]) is position
 * pos[i] of the sequence whose block table is row seq[i] of kv->tables: that
 * position lives in block tables[seq[i] * max_blocks + pos[i] / block], slot
 * pos[i] % block.  The k and v rows of every row are stored first; row i then
 * attends to positions 0 .. pos[i] of its own sequence (with kv->window > 0:
 * the last window of them), whose earlier
 * positions must have been stored by earlier calls or this one.  No two rows
 * may name the same slot.  With kv->dtype ::NVFP4_KV_ELEM_FP8_E4M3 the new
 * rows are quantized to E4M3 with kv->k_scale / kv->v_scale as they are
 * stored, and every cached element is read back as e4m3 * scale: the result
 * is the same bits as float32 pools holding those dequantized values.
 * Each row's result depends only on its own q and
 * its sequence's cache, never on the other rows of the call.  Argument
 * checks (block ids, positions, head counts) are made once in the registry.
 * @param be the backend
 * @param q [m, nh, hd] queries
 * @param k [m, nkv, hd] new keys
 * @param v [m, nkv, hd] new values
 * @param kv the pool, the block tables and each row's position and table
 * @param m rows
 * @param nh query heads, a positive multiple of @p nkv
 * @param nkv key/value heads, > 0
 * @param hd head dimension, > 0
 * @param scale factor on the scores, usually 1 / sqrt(hd)
 * @param out [m, nh, hd] outputs
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_INVALID for a bad table, position or head
 *         count; ::NVFP4_ERR_UNSUPPORTED on a backend without the op
 */
NVFP4_API nvfp4_status nvfp4_k_attention_paged(nvfp4_backend *be, const float *q,
                                               const float *k, const float *v,
                                               const nvfp4_kv_pages *kv, size_t m,
                                               size_t nh, size_t nkv, size_t hd,
                                               float scale, float *out, nvfp4_error *err);
/**
 * Gated SiLU: out[i, j] = silu(gu[i, j]) × gu[i, inter + j].
 * @param be the backend
 * @param gu [m, 2 × inter]: the gate half, then the up half, of each row
 * @param m rows
 * @param inter output row length, > 0
 * @param out [m, inter] outputs
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK or an error status
 */
NVFP4_API nvfp4_status nvfp4_k_silu_mul(nvfp4_backend *be, const float *gu, size_t m,
                                        size_t inter, float *out, nvfp4_error *err);
/** The gated activations of nvfp4_k_glu(). */
typedef enum {
    NVFP4_GLU_SILU = 0,   /**< silu(g) × u, silu(g) = g / (1 + expf(-g)) (Llama, Qwen, ...) */
    NVFP4_GLU_GELU_TANH,  /**< gelu_tanh(g) × u, torch's approximate="tanh" in float32 (Gemma) */
    NVFP4_GLU_SWIGLU_OAI, /**< gpt-oss: g' = min(g, limit), u' = clamp(u, -limit, limit),
                               (u' + 1) × g' × sigmoid(alpha × g'); gate and up
                               INTERLEAVED (g = gu[i, 2j], u = gu[i, 2j + 1]), as
                               gpt-oss stores gate_up_proj and vLLM runs it */
    NVFP4_GLU_COUNT       /**< number of kinds (not a kind) */
} nvfp4_glu_kind;

/**
 * Gated activation: out[i, j] = act(gu[i, j], gu[i, inter + j]) for the
 * kind's formula (::NVFP4_GLU_SWIGLU_OAI: act(gu[i, 2j], gu[i, 2j + 1])),
 * in float32 as transformers computes it (::NVFP4_GLU_SILU is
 * nvfp4_k_silu_mul()).
 * @param be the backend
 * @param kind which activation
 * @param gu [m, 2 × inter]: the gate half, then the up half, of each row
 *        (::NVFP4_GLU_SWIGLU_OAI: gate and up interleaved)
 * @param m rows
 * @param inter output row length, > 0
 * @param alpha ::NVFP4_GLU_SWIGLU_OAI's sigmoid slope (gpt-oss: 1.702); else ignored
 * @param limit ::NVFP4_GLU_SWIGLU_OAI's clamp, finite and > 0 (gpt-oss: 7.0); else ignored
 * @param out [m, inter] outputs
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_INVALID for an unknown kind, a bad size,
 *         alpha or limit; ::NVFP4_ERR_UNSUPPORTED when the backend lacks it
 */
NVFP4_API nvfp4_status nvfp4_k_glu(nvfp4_backend *be, nvfp4_glu_kind kind, const float *gu,
                                   size_t m, size_t inter, float alpha, float limit,
                                   float *out, nvfp4_error *err);
/**
 * Scale: y[i] = s × x[i] (one float32 product each).
 * @param be the backend
 * @param x [n] inputs
 * @param n elements
 * @param s the factor, finite
 * @param y [n] outputs; may be @p x (in place)
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_INVALID for a non-finite @p s;
 *         ::NVFP4_ERR_UNSUPPORTED when the backend lacks it
 */
NVFP4_API nvfp4_status nvfp4_k_scale(nvfp4_backend *be, const float *x, size_t n, float s,
                                     float *y, nvfp4_error *err);
/**
 * Softmax over each row of n.
 * @param be the backend
 * @param x [m, n] inputs
 * @param m rows
 * @param n row length, > 0
 * @param y [m, n] outputs; may be @p x (in place)
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK or an error status
 */
NVFP4_API nvfp4_status nvfp4_k_softmax(nvfp4_backend *be, const float *x, size_t m,
                                       size_t n, float *y, nvfp4_error *err);
/**
 * MoE router: softmax over each row of logits, then the top @p k experts
 * (ties: lower index first), their weights renormalised to sum 1 when
 * @p renorm != 0.
 * @param be the backend
 * @param logits [m, e] router logits
 * @param m rows (tokens)
 * @param e experts, > 0
 * @param k experts per token, 1 <= k <= e
 * @param renorm nonzero to renormalise the @p k weights
 * @param idx [m, k] chosen experts
 * @param weights [m, k] their weights
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK or an error status
 */
NVFP4_API nvfp4_status nvfp4_k_topk(nvfp4_backend *be, const float *logits, size_t m,
                                    size_t e, size_t k, int renorm, int32_t *idx,
                                    float *weights, nvfp4_error *err);
/**
 * Mixture of experts: for each token and each of its @p k chosen experts
 * e, y += weight × w2[e](silu(gate) × up), where w13[e] is the fused
 * [2 × inter, hidden] gate/up Linear (gate rows first) and w2[e] the
 * [hidden, inter] down Linear.  Tokens are grouped by expert.
 * @param be the backend
 * @param w13 [experts] host array of gate/up weights uploaded to @p be
 * @param w2 [experts] host array of down weights uploaded to @p be
 * @param experts number of experts, >= k
 * @param x [m, hidden] inputs
 * @param m rows (tokens)
 * @param idx [m, k] experts per token, each in [0, experts) (see the
 *        file's notes on device memory)
 * @param weights [m, k] their weights
 * @param k experts per token, > 0
 * @param y [m, hidden] outputs, overwritten
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_BAD_SHAPE when the experts' shapes
 *         disagree; ::NVFP4_ERR_INVALID for an index out of range (CPU)
 */
NVFP4_API nvfp4_status nvfp4_k_moe(nvfp4_backend *be, nvfp4_kweight *const *w13,
                                   nvfp4_kweight *const *w2, size_t experts,
                                   const float *x, size_t m, const int32_t *idx,
                                   const float *weights, size_t k, float *y,
                                   nvfp4_error *err);
/**
 * Mixture of experts with another gated activation: nvfp4_k_moe() with
 * act(gate, up) of nvfp4_k_glu() in place of silu(gate) × up (gpt-oss:
 * ::NVFP4_GLU_SWIGLU_OAI, whose w13 rows interleave gate and up as
 * gpt-oss's gate_up_proj does; the experts' biases, when uploaded with
 * them, are added by their products).  ::NVFP4_GLU_SILU is nvfp4_k_moe().
 * @param be the backend
 * @param w13 [experts] gate/up weights (gate rows first)
 * @param w2 [experts] down weights
 * @param experts number of experts, >= k
 * @param x [m, hidden] inputs
 * @param m rows (tokens)
 * @param idx [m, k] experts per token
 * @param weights [m, k] their weights
 * @param k experts per token, > 0
 * @param kind the activation
 * @param alpha ::NVFP4_GLU_SWIGLU_OAI's sigmoid slope; else ignored
 * @param limit ::NVFP4_GLU_SWIGLU_OAI's clamp, finite and > 0; else ignored
 * @param y [m, hidden] outputs, overwritten
 * @param err filled on failure, or NULL
 * @return as nvfp4_k_moe(); ::NVFP4_ERR_INVALID also for a bad kind,
 *         alpha or limit
 */
NVFP4_API nvfp4_status nvfp4_k_moe_glu(nvfp4_backend *be, nvfp4_kweight *const *w13,
                                       nvfp4_kweight *const *w2, size_t experts,
                                       const float *x, size_t m, const int32_t *idx,
                                       const float *weights, size_t k, nvfp4_glu_kind kind,
                                       float alpha, float limit, float *y, nvfp4_error *err);
/**
 * Elementwise sum: y = a + b.
 * @param be the backend
 * @param a [n] first input
 * @param b [n] second input
 * @param n elements
 * @param y [n] outputs; may be @p a or @p b
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK or an error status
 */
NVFP4_API nvfp4_status nvfp4_k_add(nvfp4_backend *be, const float *a, const float *b,
                                   size_t n, float *y, nvfp4_error *err);
/**
 * Gated add (Qwen2-MoE's shared expert): y[t, i] += sigmoid(gate[t]) ×
 * x[t, i], with sigmoid(g) = 1 / (1 + expf(-g)) in float32.
 * @param be the backend
 * @param x [m, n] inputs
 * @param gate [m] one gate logit per row
 * @param m rows
 * @param n row length, > 0
 * @param y [m, n] accumulated into
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK or an error status
 */
NVFP4_API nvfp4_status nvfp4_k_gate_add(nvfp4_backend *be, const float *x, const float *gate,
                                        size_t m, size_t n, float *y, nvfp4_error *err);
/**
 * Log-softmax over each row of n.
 * @param be the backend
 * @param x [m, n] inputs
 * @param m rows
 * @param n row length, > 0
 * @param y [m, n] outputs
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK or an error status
 */
NVFP4_API nvfp4_status nvfp4_k_logsoftmax(nvfp4_backend *be, const float *x, size_t m,
                                          size_t n, float *y, nvfp4_error *err);
/**
 * Index of the largest element of each row (the first one on ties).
 * @param be the backend
 * @param x [m, n] inputs
 * @param m rows
 * @param n row length, 0 < n <= INT32_MAX
 * @param out [m] indices
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK or an error status
 */
NVFP4_API nvfp4_status nvfp4_k_argmax(nvfp4_backend *be, const float *x, size_t m,
                                      size_t n, int32_t *out, nvfp4_error *err);

/* ---- the communicator (tensor and expert parallelism) ---------------------- */

/** A group of processes that run one model split between them (opaque): the
 *  process alone, or the ranks of an MPI job.  Process-wide, never freed by
 *  the caller. */
typedef struct nvfp4_comm nvfp4_comm;

/**
 * The communicator of this process.  Under `mpirun` (Open MPI's or a PMI
 * launcher's environment) in a build configured with MPI, the first call runs
 * MPI_Init_thread (errors returned, never fatal: MPI_ERRORS_RETURN) and the
 * result spans MPI_COMM_WORLD; MPI_Finalize runs at exit.  Otherwise, or with
 * `NVFP4_COMM=single` in the environment, it is the process alone: rank 0
 * of 1, every collective the identity.  Thread-safe; the collectives of one
 * communicator are serialised by a lock.
 * @param err filled on failure, or NULL
 * @return the communicator, valid until the process exits; NULL when MPI
 *         failed to start (::NVFP4_ERR_BACKEND)
 */
NVFP4_API nvfp4_comm *nvfp4_comm_world(nvfp4_error *err);
/**
 * @param c a communicator
 * @return "single" or "mpi"; static storage
 */
NVFP4_API const char *nvfp4_comm_name(const nvfp4_comm *c);
/**
 * @param c a communicator, or NULL (0)
 * @return this process's rank, from 0
 */
NVFP4_API int nvfp4_comm_rank(const nvfp4_comm *c);
/**
 * @param c a communicator, or NULL (1)
 * @return the number of ranks
 */
NVFP4_API int nvfp4_comm_size(const nvfp4_comm *c);
/**
 * Sum @p n floats over the ranks, in place on every rank.  The sum is taken
 * in rank order (the ranks' buffers gathered, then added from rank 0 up), so
 * every rank gets the same bits, whatever the transport's reduction
 * algorithm.  Collective: every rank calls it with the same @p n.
 * @param c the communicator
 * @param buf @p n floats, host memory
 * @param n count
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_BACKEND naming the failed MPI call;
 *         ::NVFP4_ERR_NOMEM
 */
NVFP4_API nvfp4_status nvfp4_comm_allreduce_sum(nvfp4_comm *c, float *buf, size_t n,
                                                nvfp4_error *err);
/**
 * Gather every rank's bytes, in rank order, on every rank.  Collective.
 * @param c the communicator
 * @param send this rank's bytes (counts[rank] of them, or @p bytes)
 * @param bytes each rank's count when @p counts is NULL
 * @param counts per-rank byte counts (the same array on every rank), or NULL
 * @param recv the sum of the counts bytes; may not overlap @p send
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_BACKEND; ::NVFP4_ERR_INVALID (a count
 *         above INT_MAX, MPI's limit)
 */
NVFP4_API nvfp4_status nvfp4_comm_allgather(nvfp4_comm *c, const void *send, size_t bytes,
                                            const size_t *counts, void *recv,
                                            nvfp4_error *err);
/**
 * Copy @p bytes from rank @p root to every rank.  Collective.
 * @param c the communicator
 * @param buf the bytes: read on @p root, written on the others
 * @param bytes count, at most INT_MAX
 * @param root the sending rank
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_BACKEND; ::NVFP4_ERR_INVALID
 */
NVFP4_API nvfp4_status nvfp4_comm_broadcast(nvfp4_comm *c, void *buf, size_t bytes, int root,
                                            nvfp4_error *err);
/**
 * Bytes this rank has sent through the collectives so far (for benchmarks:
 * what an all-reduce, all-gather or broadcast puts on the wire from this
 * rank, counted as its buffer once per other rank for the gathers).
 * @param c the communicator, or NULL (0)
 * @return the count
 */
NVFP4_API uint64_t nvfp4_comm_bytes_sent(const nvfp4_comm *c);
/**
 * End every rank of the job: MPI_Abort with @p code (the launcher kills the
 * others and names this rank); the process alone: nothing (the caller
 * exits).  For a rank that failed while the others may be waiting in a
 * collective.
 * @param c the communicator, or NULL
 * @param code the exit status
 */
NVFP4_API void nvfp4_comm_abort(nvfp4_comm *c, int code);
/**
 * A communicator over the ranks of @p host whose collectives run on device
 * buffers of @p be (memory from nvfp4_backend_alloc()): NCCL for the CUDA
 * backend, RCCL for the HIP one (the library is loaded at the first call).
 * Collective: every rank of @p host calls it with its own backend (one
 * device per rank).  The ranks first agree over @p host that each can join
 * (its library loads), so that none enters the library's init alone; rank
 * 0 makes the unique id and broadcasts it; each rank joins, waiting at most
 * NVFP4_COMM_TIMEOUT seconds (300 when unset; 0: no limit) for the others
 * before aborting its half-made communicator, and the ranks agree again
 * that every one joined.  Every rank returns the same outcome, naming the
 * first rank that failed.  nvfp4_comm_allreduce_sum() (the library's
 * reduction order), nvfp4_comm_allgather() (equal counts) and
 * nvfp4_comm_broadcast() then take device pointers and return when this
 * rank's part is done; nvfp4_comm_abort() ends the job through @p host.
 * @param be an open GPU backend
 * @param host the host communicator (nvfp4_comm_world())
 * @param err filled on failure, or NULL
 * @return the communicator, to be freed with nvfp4_comm_free() before
 *   @p be is closed; NULL with ::NVFP4_ERR_UNSUPPORTED (a rank's backend has
 *   no device communicator) or ::NVFP4_ERR_NOT_FOUND (a rank cannot load the
 *   library): no rank entered the library, the job may go on without;
 *   ::NVFP4_ERR_BACKEND (a rank's device, id or init failed, or it did not
 *   join in time) or ::NVFP4_ERR_NOMEM
 */
NVFP4_API nvfp4_comm *nvfp4_comm_open_device(nvfp4_backend *be, nvfp4_comm *host,
                                             nvfp4_error *err);
/**
 * Free a communicator of nvfp4_comm_open_device(); the world communicator
 * and NULL: nothing.
 * @param c the communicator, or NULL
 */
NVFP4_API void nvfp4_comm_free(nvfp4_comm *c);

#ifdef __cplusplus
}
#endif

#endif /* NVFP4_KERNELS_H */
