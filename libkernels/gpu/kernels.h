/* SPDX-License-Identifier: MIT */
/*
 * libkernels/gpu/kernels.h - the launchers of libkernels/gpu/kernels.cu, one per operation of
 * nvfp4/kernels.h, shared by the CUDA and the HIP build.  Every pointer is
 * device memory; every launcher only enqueues work on STREAM and returns
 * the launch status (gpu_last_error), which the backend glue turns into an
 * nvfp4 status.  Shapes were checked by the registry (libkernels/
 * backend-impl.h); the launchers check only what the kernels themselves
 * cannot do (sizes beyond a kernel's limits).
 */
#ifndef NVFP4_GPU_KERNELS_H
#define NVFP4_GPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "gpu.h"

/* Storage format of a weight on the device. */
enum {
    GK_NVFP4 = 0,   /* packed E2M1 [n, k/2] + E4M3 scales [n, k/16] + global */
    GK_F32,         /* dense [n, k], the dtype of the file, decoded in the kernel */
    GK_BF16,
    GK_F16,
    GK_FORMAT_COUNT
};

/* One weight as the kernels see it (all pointers device memory).  Passed by
 * value to kernels, and stored in device arrays for the grouped MoE ones. */
typedef struct {
    int format;             /* GK_* */
    int64_t n, k;
    const uint8_t *packed;  /* NVFP4 */
    const uint8_t *scales;  /* NVFP4 */
    float global;           /* NVFP4 weight_scale_2 (a multiplier, §2) */
    float input_scale;      /* W4A4 activation scale (§5, a multiplier); 0 = no qdq */
    float input_gs;         /* W4A4: §5's gs itself, the kernel descriptor's
                               input_gs (1.0f / input_scale, or the
                               compressed-tensors input_global_scale as stored:
                               docs/DIALECTS.md); 0 = no qdq */
    const void *dense;      /* GK_F32/BF16/F16 */
    const float *bias;      /* [n] float32 or NULL */
} gk_weight;

/* Device facts the launchers choose kernels by. */
typedef struct {
    int warp_size;          /* 32 (NVIDIA, RDNA) or 64 (CDNA) */
    int mma;                /* tensor-core BF16 GEMM usable (GK_CAP_MMA) */
    int fp4mma;             /* block-scaled FP4 W4A4 GEMM usable (GK_CAP_FP4_MMA) */
    int gemv_rows;          /* NVFP4 GEMV rows per warp: 1, 2, 4; 0 = default */
} gk_device;

/* What gk_caps reports: the device's code image has the tensor-core GEMM
 * (CUDA sm_80+, HIP gfx90a/gfx94x/gfx950) and the block-scaled FP4 GEMM
 * (CUDA sm_120a/sm_121a).  Asked of the device because the code image the
 * runtime picks (an "a" cubin, PTX JIT of an older target) decides it. */
#define GK_CAP_MMA 1
#define GK_CAP_FP4_MMA 2

/* Token counts up to this take the GEMV (weights read once per 8 tokens);
 * above it the tiled GEMM. */
#define GK_GEMV_MAX_M 8

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the GK_CAP_* bits of the device's code image to the device int
 * DFLAG. */
gpu_error_t gk_caps(int *dflag, gpu_stream_t s);
/* §5 on rows of k (k % 16 == 0), bit-exact with nvfp4_quant_qdq_row. */
gpu_error_t gk_qdq(const float *x, int64_t rows, int64_t k, float gs, float *out,
                   gpu_stream_t s);
/* y[m, n] = x[m, k] @ W^T (+ bias).  For W4A4 (input_scale > 0) the caller
 * passes XQ, scratch of m*k floats for the quantize-dequantized x (or, on
 * the FP4 path, its codes and scales).
 * FORCE: 0 = choose, 1 = GEMV, 2 = portable GEMM, 3 = tensor-core BF16 GEMM
 * (when dev->mma), 4 = FP4 tensor-core GEMM (W4A4 with dev->fp4mma; the
 * caller checks); tests and benchmarks exercise each path.  Choosing, m > 8
 * takes the FP4 GEMM for W4A4 where it exists, else the BF16 tensor-core
 * GEMM where it exists for NVFP4 and BF16 weights (exact in BF16, so it
 * agrees with the float32 paths to float32 summation error; see
 * gemm_mma_kernel), else the portable one. */
gpu_error_t gk_linear(const gk_device *dev, const gk_weight *w, const float *x, int64_t m,
                      float *y, float *xq, int force, gpu_stream_t s);
/* y[m, n] = row ids[i] of W, dequantized exactly (§2) or decoded. */
gpu_error_t gk_embed(const gk_weight *w, const int32_t *ids, int64_t m, float *y,
                     int *flag, gpu_stream_t s);
gpu_error_t gk_rmsnorm(const float *x, const float *weight, int64_t m, int64_t d, float eps,
                       float *y, gpu_stream_t s);
gpu_error_t gk_rope(float *x, const int32_t *positions, int64_t m, int64_t heads,
                    int64_t head_dim, int64_t rot_dim, const float *inv_freq,
                    float attn_factor, gpu_stream_t s);
/* Largest head_dim the attention kernel takes (shared-memory accumulator). */
#define GK_ATTN_MAX_HD 1024
/* SCRATCH: gk_attention_scratch bytes (0 for prefill-sized m: no split). */
size_t gk_attention_scratch(int64_t pos0, int64_t m, int64_t nh, int64_t hd);
gpu_error_t gk_attention(const float *q, const float *k, const float *v, float *k_cache,
                         float *v_cache, int64_t max_ctx, int64_t pos0, int64_t m,
                         int64_t nh, int64_t nkv, int64_t hd, float scale, float *out,
                         float *scratch, gpu_stream_t s);
/* Attention through block tables (nvfp4_k_attention_paged; WINDOW > 0: each
 * row sees its last WINDOW positions only); FP8 != 0: the pools hold E4M3
 * bytes with the per-tensor K_SCALE / V_SCALE (nvfp4_kv_elem), else float32;
 * SCRATCH holds gk_attention_paged_scratch bytes; a row out of range raises
 * FLAG. */
size_t gk_attention_paged_scratch(int64_t max_len, int64_t m, int64_t nh, int64_t hd);
gpu_error_t gk_attention_paged(const float *q, const float *k, const float *v, void *k_pool,
                               void *v_pool, int fp8, float k_scale, float v_scale,
                               int64_t nblocks, int64_t block,
                               const int32_t *tables, int64_t ntables, int64_t max_blocks,
                               const int32_t *pos, const int32_t *seq, int64_t max_len,
                               int64_t window, const float *sinks, int64_t m, int64_t nh,
                               int64_t nkv,
                               int64_t hd, float scale, float *out, void *scratch, int *flag,
                               gpu_stream_t s);
gpu_error_t gk_silu_mul(const float *gu, int64_t m, int64_t inter, float *out,
                        gpu_stream_t s);
gpu_error_t gk_softmax(const float *x, int64_t m, int64_t n, float *y, int log,
                       gpu_stream_t s);
/* nvfp4_k_glu (KIND: nvfp4_glu_kind) and nvfp4_k_scale. */
gpu_error_t gk_glu(int kind, const float *gu, int64_t m, int64_t inter, float alpha,
                   float limit, float *out, gpu_stream_t s);
gpu_error_t gk_scale(const float *x, int64_t n, float sc, float *y, gpu_stream_t s);

/* Largest expert count of the router kernel (probabilities in shared memory). */
#define GK_TOPK_MAX_E 8192
gpu_error_t gk_topk(const float *logits, int64_t m, int64_t e, int64_t k, int renorm,
                    int32_t *idx, float *weights, gpu_stream_t s);
gpu_error_t gk_add(const float *a, const float *b, int64_t n, float *y, gpu_stream_t s);
gpu_error_t gk_argmax(const float *x, int64_t m, int64_t n, int32_t *out, gpu_stream_t s);
/* y[t, i] += sigmoid(gate[t]) * x[t, i] over m rows of n. */
gpu_error_t gk_gate_add(const float *x, const float *gate, int64_t m, int64_t n, float *y,
                        gpu_stream_t s);

/* Mixture of experts (§6), tokens grouped by expert on the device.
 * D13, D2: device arrays of the experts' weights, all of format FMT13 /
 * FMT2; VEC*: 16-byte loads legal (k % 32 for NVFP4, k % 8 and aligned for
 * dense, x 16-byte aligned); QDQ*: W4A4, quantize-dequantize the expert's
 * input first (§5, §6).  SCRATCH: gk_moe_scratch bytes, 256-byte aligned.
 * FLAG: device int set to 1 when an idx is out of range (that slot is
 * skipped).  hidden and inter are multiples of 16 when QDQ* is set.  ACT,
 * ALPHA, LIMIT: the activation between the products, as gk_glu takes it. */
size_t gk_moe_scratch(int64_t experts, int64_t m, int64_t k, int64_t hidden, int64_t inter);
gpu_error_t gk_moe(const gk_device *dev, const gk_weight *d13, const gk_weight *d2,
                   int fmt13, int fmt2, int vec13, int vec2, int qdq13, int qdq2,
                   int64_t experts, const float *x, int64_t m, const int32_t *idx,
                   const float *weights, int64_t k, int64_t hidden, int64_t inter, int act,
                   float alpha, float limit, float *y, void *scratch, int *flag,
                   gpu_stream_t s);

#ifdef __cplusplus
}
#endif

#endif /* NVFP4_GPU_KERNELS_H */
