/* SPDX-License-Identifier: MIT */
/*
 * nvfp4/kernels.h - the compute layer of nvfp4: a backend interface (a small
 * table of functions per backend, a registry, a per-operation "supported?"
 * query, after ggml) and the operations a transformer forward pass needs.
 *
 * Built on nvfp4/quant.h; knows nothing about model architectures.
 *
 * Memory: every float/int pointer passed to an operation is backend memory,
 * obtained from nvfp4_backend_alloc (on the CPU backend that is plain host
 * memory).  Weights are uploaded once with nvfp4_kweight_upload, into the
 * layout the backend prefers.  All activations are float32, row-major.
 *
 * Reproducibility: for a given backend, input and m, results are the same
 * bits whatever the number of threads (outputs are partitioned, never one
 * reduction).  Float32 summation order may differ from PyTorch's.  On the
 * CPU backend every row-wise operation (linear, MoE, norms, attention) is
 * also batch-invariant: a row's result is the same bits whatever the other
 * rows of the call and whatever m.  GPU backends pick kernels by m (GEMV for
 * few rows, tiled or tensor-core GEMM for more) and agree across m only to
 * float32 summation error (docs/ARCHITECTURE.md).
 *
 * Environment: NVFP4_BACKEND picks the backend when none is named;
 * NVFP4_BACKEND_PATH (colon-separated) is searched for GPU backend modules
 * before the installed backends directory; NVFP4_CPU_ISA (scalar, avx2,
 * avx512, vnni) caps the CPU backend's instruction set, read at open.
 */
#ifndef NVFP4_KERNELS_H
#define NVFP4_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <nvfp4/quant.h>

#ifdef __cplusplus
extern "C" {
#endif

NVFP4_API const char *nvfp4_kernels_version(void);

typedef enum {
    NVFP4_OP_LINEAR_W4A4 = 0,  /* NVFP4 weights, activations qdq'd (§5) */
    NVFP4_OP_LINEAR_W4A16,     /* NVFP4 weights, float activations */
    NVFP4_OP_LINEAR_DENSE,     /* F32/BF16/F16 weights */
    NVFP4_OP_EMBED,
    NVFP4_OP_RMSNORM,
    NVFP4_OP_ROPE,
    NVFP4_OP_ATTENTION,
    NVFP4_OP_SILU_MUL,
    NVFP4_OP_SOFTMAX,
    NVFP4_OP_TOPK,
    NVFP4_OP_MOE,
    NVFP4_OP_ADD,
    NVFP4_OP_LOGSOFTMAX,
    NVFP4_OP_ARGMAX,
    NVFP4_OP_GATE_ADD,         /* y += sigmoid(gate) * x, per row (Qwen2-MoE) */
    NVFP4_OP_ATTENTION_PAGED,  /* attention over per-sequence block tables */
    NVFP4_OP_COUNT
} nvfp4_op;

NVFP4_API const char *nvfp4_op_name(nvfp4_op op);

typedef struct nvfp4_backend nvfp4_backend;   /* an opened backend */
typedef struct nvfp4_kweight nvfp4_kweight;   /* a Linear uploaded to a backend */

/* ---- registry ------------------------------------------------------------ */

/* Registered backends ("cpu", and "cuda"/"hip" when built), available or not. */
NVFP4_API size_t nvfp4_backend_count(void);
NVFP4_API const char *nvfp4_backend_name_at(size_t i);
/* 1 when the named backend is registered and usable on this machine. */
NVFP4_API int nvfp4_backend_available(const char *name);

/* Open NAME; NULL or "" means $NVFP4_BACKEND, else "cpu".  An unknown or
 * unavailable backend is NVFP4_ERR_BACKEND with a message saying why and
 * which are available - never a silent fallback. */
NVFP4_API nvfp4_backend *nvfp4_backend_open(const char *name, nvfp4_error *err);
NVFP4_API void nvfp4_backend_free(nvfp4_backend *be);
NVFP4_API const char *nvfp4_backend_name(const nvfp4_backend *be);
/* Does this backend implement OP?  A caller may fall back to the CPU per op. */
NVFP4_API int nvfp4_backend_supports(const nvfp4_backend *be, nvfp4_op op);
/* Worker threads (CPU backend); 0 = OMP_NUM_THREADS / all cores. */
NVFP4_API void nvfp4_backend_set_threads(nvfp4_backend *be, int threads);
NVFP4_API int nvfp4_backend_threads(const nvfp4_backend *be);
/* Wait for queued work (GPU backends); a no-op on the CPU. */
NVFP4_API nvfp4_status nvfp4_backend_sync(nvfp4_backend *be, nvfp4_error *err);

/* ---- memory -------------------------------------------------------------- */

NVFP4_API void *nvfp4_backend_alloc(nvfp4_backend *be, size_t bytes, nvfp4_error *err);
NVFP4_API void nvfp4_backend_release(nvfp4_backend *be, void *ptr);
NVFP4_API nvfp4_status nvfp4_backend_upload(nvfp4_backend *be, void *dst,
                                            const void *src, size_t bytes,
                                            nvfp4_error *err);
NVFP4_API nvfp4_status nvfp4_backend_download(nvfp4_backend *be, void *dst,
                                              const void *src, size_t bytes,
                                              nvfp4_error *err);

/* Upload a validated Linear, or several fused along the output dimension
 * (q/k/v, gate/up: PARTS[0] rows first), as one weight of n = sum of the
 * parts' n.  Parts must agree on k and scheme and, for NVFP4, on
 * weight_scale_2 (see nvfp4_linear_fuse_check); the fused input scale is the
 * max of the parts'.  Also used for embedding tables and a tied lm_head.
 * The backend may keep pointing into the mmapped file or repack; the parts'
 * tensors must outlive the kweight. */
NVFP4_API nvfp4_kweight *nvfp4_kweight_upload(nvfp4_backend *be,
                                              const nvfp4_linear *parts, size_t nparts,
                                              nvfp4_error *err);
NVFP4_API void nvfp4_kweight_free(nvfp4_kweight *w);
/* 1 when the backend keeps its own copy of the weight (repacked in host
 * memory, or on a device), so the parts' source bytes are no longer read;
 * 0 when it reads them in place (the CPU backend's unquantized weights). */
NVFP4_API int nvfp4_kweight_holds_copy(const nvfp4_kweight *w);
NVFP4_API int64_t nvfp4_kweight_rows(const nvfp4_kweight *w);   /* n */
NVFP4_API int64_t nvfp4_kweight_cols(const nvfp4_kweight *w);   /* k */

/* ---- operations ------------------------------------------------------------
 * All return NVFP4_OK or an error status (filling err).  m = number of rows
 * (tokens).  Output buffers must not alias inputs unless stated. */

/* y[m, n] = x[m, k] @ W^T (+ bias).  The mode follows W's scheme: W4A4
 * quantize-dequantizes each row of x with W's input scale first (§5);
 * accumulation in float32. */
NVFP4_API nvfp4_status nvfp4_k_linear(nvfp4_backend *be, const nvfp4_kweight *w,
                                      const float *x, size_t m, float *y,
                                      nvfp4_error *err);
/* y[m, n] = row ids[i] of the table W (an unquantized or NVFP4 weight). */
NVFP4_API nvfp4_status nvfp4_k_embed(nvfp4_backend *be, const nvfp4_kweight *w,
                                     const int32_t *ids, size_t m, float *y,
                                     nvfp4_error *err);
/* y = x / sqrt(mean(x^2) + eps) * weight, per row of d (in-place allowed).
 * Used per head for q/k norms with m = tokens*heads, d = head_dim. */
NVFP4_API nvfp4_status nvfp4_k_rmsnorm(nvfp4_backend *be, const float *x,
                                       const float *weight, size_t m, size_t d,
                                       float eps, float *y, nvfp4_error *err);
/* Rotary embedding, in place, "rotate half" layout (HF Llama/Qwen/Mistral):
 * x[m, heads, head_dim]; positions[m]; inv_freq[rot_dim/2] (scaling such as
 * Llama 3's already folded in by the caller); rot_dim <= head_dim. */
NVFP4_API nvfp4_status nvfp4_k_rope(nvfp4_backend *be, float *x, const int32_t *positions,
                                    size_t m, size_t heads, size_t head_dim,
                                    size_t rot_dim, const float *inv_freq,
                                    float attn_factor, nvfp4_error *err);
/* Causal attention with grouped-query heads and a KV cache.
 * q[m, nh, hd]; k, v[m, nkv, hd] are appended to the caches at positions
 * pos0 .. pos0+m-1; k_cache, v_cache are [max_ctx, nkv, hd].  Token i sees
 * cache positions 0 .. pos0+i.  out[m, nh, hd].  scale = 1/sqrt(hd) usually. */
NVFP4_API nvfp4_status nvfp4_k_attention(nvfp4_backend *be, const float *q,
                                         const float *k, const float *v,
                                         float *k_cache, float *v_cache,
                                         size_t max_ctx, size_t pos0, size_t m,
                                         size_t nh, size_t nkv, size_t hd,
                                         float scale, float *out, nvfp4_error *err);
/* A paged KV cache (after vLLM's PagedAttention): K and V of every
 * sequence live in fixed-size blocks of a shared pool, found through the
 * sequence's block table.  Everything but max_len is backend memory. */
typedef struct {
    float *k_pool, *v_pool;     /* [nblocks, block, nkv, hd] each */
    size_t nblocks;             /* blocks in the pool */
    size_t block;               /* tokens per block */
    const int32_t *tables;      /* [ntables, max_blocks] block ids */
    size_t ntables, max_blocks;
    const int32_t *pos;         /* [m] position of each row in its sequence */
    const int32_t *seq;         /* [m] table row of each row's sequence */
    size_t max_len;             /* host value: >= pos[i] + 1 for every row */
} nvfp4_kv_pages;

/* Causal attention for rows of several sequences at once (a batch of
 * prefill chunks and decode tokens).  Row i (q[i], k[i], v[i]) is position
 * pos[i] of the sequence whose block table is row seq[i] of kv->tables: that
 * position lives in block tables[seq[i] * max_blocks + pos[i] / block], slot
 * pos[i] % block.  The k and v rows of every row are stored first; row i then
 * attends to positions 0 .. pos[i] of its own sequence, whose earlier
 * positions must have been stored by earlier calls or this one.  No two rows
 * may name the same slot.  q[m, nh, hd], k, v[m, nkv, hd], out[m, nh, hd].
 * Each row's result depends only on its own q and its sequence's cache,
 * never on the other rows of the call. */
NVFP4_API nvfp4_status nvfp4_k_attention_paged(nvfp4_backend *be, const float *q,
                                               const float *k, const float *v,
                                               const nvfp4_kv_pages *kv, size_t m,
                                               size_t nh, size_t nkv, size_t hd,
                                               float scale, float *out, nvfp4_error *err);
/* out[m, inter] = silu(gu[m, 0:inter]) * gu[m, inter:2*inter]. */
NVFP4_API nvfp4_status nvfp4_k_silu_mul(nvfp4_backend *be, const float *gu, size_t m,
                                        size_t inter, float *out, nvfp4_error *err);
/* Softmax over rows of n, in place allowed. */
NVFP4_API nvfp4_status nvfp4_k_softmax(nvfp4_backend *be, const float *x, size_t m,
                                       size_t n, float *y, nvfp4_error *err);
/* Router: softmax over logits[m, e], pick the top k (ties: lower index
 * first), renormalise the k weights to sum 1 when renorm != 0.
 * idx[m, k] int32, weights[m, k] float. */
NVFP4_API nvfp4_status nvfp4_k_topk(nvfp4_backend *be, const float *logits, size_t m,
                                    size_t e, size_t k, int renorm, int32_t *idx,
                                    float *weights, nvfp4_error *err);
/* Mixture of experts: for each token and each of its k chosen experts,
 * y += weight * w2[e]( silu(gate) * up ), where w13[e] is the fused
 * [2*inter, hidden] gate/up Linear and w2[e] the [hidden, inter] down Linear.
 * Tokens are grouped by expert.  x[m, hidden]; y[m, hidden] is overwritten. */
NVFP4_API nvfp4_status nvfp4_k_moe(nvfp4_backend *be, nvfp4_kweight *const *w13,
                                   nvfp4_kweight *const *w2, size_t experts,
                                   const float *x, size_t m, const int32_t *idx,
                                   const float *weights, size_t k, float *y,
                                   nvfp4_error *err);
/* y = a + b elementwise over n (y may alias a or b). */
NVFP4_API nvfp4_status nvfp4_k_add(nvfp4_backend *be, const float *a, const float *b,
                                   size_t n, float *y, nvfp4_error *err);
/* y[t, i] += sigmoid(gate[t]) * x[t, i] for rows t < m of n (Qwen2-MoE's
 * gated shared expert); sigmoid(g) = 1 / (1 + expf(-g)) in float32. */
NVFP4_API nvfp4_status nvfp4_k_gate_add(nvfp4_backend *be, const float *x, const float *gate,
                                        size_t m, size_t n, float *y, nvfp4_error *err);
/* Log-softmax over rows of n. */
NVFP4_API nvfp4_status nvfp4_k_logsoftmax(nvfp4_backend *be, const float *x, size_t m,
                                          size_t n, float *y, nvfp4_error *err);
/* Index of the largest element per row (first on ties). */
NVFP4_API nvfp4_status nvfp4_k_argmax(nvfp4_backend *be, const float *x, size_t m,
                                      size_t n, int32_t *out, nvfp4_error *err);

#ifdef __cplusplus
}
#endif

#endif /* NVFP4_KERNELS_H */
