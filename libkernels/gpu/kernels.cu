/* SPDX-License-Identifier: MIT */
/*
 * libkernels/gpu/kernels.cu - every operation of a decode/prefill step, written once
 * against the neutral spelling of libkernels/gpu/gpu.h and compiled by nvcc (CUDA) and
 * hipcc (HIP).  The tensor-core GEMMs use the warp-wide MMA instructions of
 * libkernels/gpu/gpu.h, whose per-vendor lane layouts are spelled out once below.
 *
 * Numerics (section numbers refer to docs/quark-nvfp4-spec.md):
 *  - weights dequantize as E2M1 * (E4M3(scale) * global), §2; the GEMV
 *    factors the block scale out of each 16-element partial sum, the
 *    portable GEMM forms the dequantized value in float32, the BF16
 *    tensor-core GEMM takes E2M1 * E4M3 (exact in BF16) and applies the
 *    global scale once at the end; its activations are either exact in
 *    BF16 (W4A4: the §5 codes times their block scale, input_scale applied
 *    at the end) or split into two BF16 halves (16 significant bits), so
 *    it agrees with the float32 paths to float32 summation error;
 *  - W4A4 on block-scaled FP4 tensor cores (sm_120a) multiplies the §5
 *    codes and scales of the activations with the weight's own codes and
 *    scales, and applies weight_scale_2 * input_scale once at the end;
 *  - the W4A4 activation quantize-dequantize is bit-exact with the CPU
 *    (libquant/numerics.h, same float32 operations in the same order);
 *  - everything else accumulates in float32; reductions have a fixed shape
 *    per launch, so results do not depend on timing (determinism contract of
 *    libkernels/backend-impl.h).
 * The build disables multiply-add contraction (nvcc --fmad=false, hipcc
 * -ffp-contract=off); the kernels spell every fused multiply-add they want
 * as fmaf().
 */
#include "gpu.h"

#include <math.h>
#include <stdint.h>

#include "kernels.h"
#include "numerics.h"

#define GK_THREADS 256

/* ---- small helpers ---------------------------------------------------------- */

static gpu_error_t launched(void)
{
    return gpu_last_error();
}

static unsigned grid_for(int64_t n, int64_t per_block)
{
    int64_t g = (n + per_block - 1) / per_block;
    return (unsigned)(g < 1 ? 1 : g);
}

GPU_DEV float warp_sum(float v)
{
    for (int o = GPU_WARP / 2; o > 0; o >>= 1)
        v += gpu_shfl_xor(v, o);
    return v;
}

GPU_DEV float warp_max(float v)
{
    for (int o = GPU_WARP / 2; o > 0; o >>= 1)
        v = fmaxf(v, gpu_shfl_xor(v, o));
    return v;
}

/* Reduce over the block (blockDim.x a multiple of the warp, at most 1024);
 * SH holds at least 32 floats.  Every thread gets the result. */
template <bool MAX>
GPU_DEV float block_reduce(float v, float *sh)
{
    const int lane = threadIdx.x % GPU_WARP, wid = threadIdx.x / GPU_WARP;
    const int nw = blockDim.x / GPU_WARP;

    v = MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0)
        sh[wid] = v;
    gpu_syncthreads();
    if (wid == 0) {
        float w = lane < nw ? sh[lane] : (MAX ? -INFINITY : 0.0f);
        w = MAX ? warp_max(w) : warp_sum(w);
        if (lane == 0)
            sh[0] = w;
    }
    gpu_syncthreads();
    v = sh[0];
    gpu_syncthreads();
    return v;
}

/* Element I of a dense weight row in its file dtype. */
template <int FMT>
GPU_DEV float dense_at(const void *base, int64_t i)
{
    if (FMT == GK_F32)
        return ((const float *)base)[i];
    if (FMT == GK_BF16)
        return num_bf16_value(((const uint16_t *)base)[i]);
    return num_f16_value(((const uint16_t *)base)[i]);
}

/* Eight consecutive dense elements from a 16-byte aligned address. */
template <int FMT>
GPU_DEV void dense_load8(const void *base, int64_t i, float *v)
{
    if (FMT == GK_F32) {
        const float4 *p = (const float4 *)((const float *)base + i);
        float4 a = p[0], b = p[1];
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
        uint4 q = *(const uint4 *)((const uint16_t *)base + i);
        uint32_t wd[4] = {q.x, q.y, q.z, q.w};
        for (int j = 0; j < 4; j++) {
            if (FMT == GK_BF16) {
                v[2 * j] = num_bf16_value(wd[j] & 0xFFFFu);
                v[2 * j + 1] = num_bf16_value(wd[j] >> 16);
            } else {
                v[2 * j] = num_f16_value(wd[j] & 0xFFFFu);
                v[2 * j + 1] = num_f16_value(wd[j] >> 16);
            }
        }
    }
}

/* ---- §5 activation quantize-dequantize --------------------------------------- */

/* One thread per block of 16; bit-exact with the CPU (libquant/numerics.h). */
__global__ void qdq_kernel(const float *__restrict__ x, int64_t nblocks, float gs,
                           float *__restrict__ out)
{
    int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    float v[NUM_BLOCK], o[NUM_BLOCK];

    if (b >= nblocks)
        return;
    for (int j = 0; j < NUM_BLOCK; j++)
        v[j] = x[b * NUM_BLOCK + j];
    num_qdq_block(v, gs, o);
    for (int j = 0; j < NUM_BLOCK; j++)
        out[b * NUM_BLOCK + j] = o[j];
}

extern "C" gpu_error_t gk_qdq(const float *x, int64_t rows, int64_t k, float gs, float *out,
                              gpu_stream_t s)
{
    /* gs as the CPU takes it: the weight's input_gs (gk_weight) */
    const int64_t nblocks = rows * (k / NUM_BLOCK);

    qdq_kernel<<<grid_for(nblocks, GK_THREADS), GK_THREADS, 0, s>>>(x, nblocks, gs, out);
    return launched();
}

/* ---- GEMV: decode, m <= 8 ------------------------------------------------------
 * Each warp owns R consecutive output rows; the lanes stride the rows with
 * 16-byte loads (two NVFP4 blocks, 32 weights) so a warp reads 512
 * contiguous bytes of each row per step and every weight byte is read once
 * for up to MT tokens, while each activation chunk loaded serves all R rows.
 * E2M1 codes are decoded through a table in shared memory that holds one
 * copy per lane: entry (code, lane) lives in bank `lane`, so the 32 lookups
 * of a warp never conflict whatever the codes.  Per block of 16 the
 * code-times-activation partial sum is scaled once by E4M3(scale) * global
 * (the §2 product, one rounding), then accumulated. */

struct lut_t {
    float v[16 * GPU_WARP];
};

GPU_DEV void lut_fill(lut_t *lut)
{
    for (int i = threadIdx.x; i < 16 * GPU_WARP; i += blockDim.x)
        lut->v[i] = num_e2m1_value((uint32_t)(i / GPU_WARP));
}

/* Partial sum of one NVFP4 block (8 bytes in W0, W1) with XV[0..15]; LT is
 * this lane's column of the table. */
GPU_DEV float block_dot(const float *lt, uint32_t w0, uint32_t w1, const float *xv)
{
    float p = 0.0f;

    for (int j = 0; j < 4; j++) {
        const uint32_t b = w0 >> (8 * j);
        p = fmaf(lt[(b & 15u) * GPU_WARP], xv[2 * j], p);
        p = fmaf(lt[((b >> 4) & 15u) * GPU_WARP], xv[2 * j + 1], p);
    }
    for (int j = 0; j < 4; j++) {
        const uint32_t b = w1 >> (8 * j);
        p = fmaf(lt[(b & 15u) * GPU_WARP], xv[8 + 2 * j], p);
        p = fmaf(lt[((b >> 4) & 15u) * GPU_WARP], xv[8 + 2 * j + 1], p);
    }
    return p;
}

/* N activations starting at P (16-byte aligned when VEC). */
template <bool VEC, int N>
GPU_DEV void load_x(const float *p, float *xv)
{
    if (VEC) {
        const float4 *x4 = (const float4 *)p;
        for (int q = 0; q < N / 4; q++) {
            const float4 t = x4[q];
            xv[4 * q] = t.x; xv[4 * q + 1] = t.y; xv[4 * q + 2] = t.z; xv[4 * q + 3] = t.w;
        }
    } else {
        for (int q = 0; q < N; q++)
            xv[q] = p[q];
    }
}

/* acc[r][t] += row (ROW0 + r) . x_t for the tokens t < cnt of XR (row
 * pointers).  Rows past the end repeat the last row; the caller does not
 * store them. */
template <int MT, bool VEC, int R>
GPU_DEV void nvfp4_row_dot(const lut_t *lut, const gk_weight &w, int64_t row0,
                           const float *const *xr, int cnt, float (*acc)[MT])
{
    const int lane = threadIdx.x % GPU_WARP;
    const float *lt = lut->v + lane;
    const int64_t nblk = w.k / NUM_BLOCK;
    const uint8_t *prow[R], *srow[R];

    GPU_UNROLL
    for (int r = 0; r < R; r++) {
        const int64_t row = row0 + r < w.n ? row0 + r : w.n - 1;
        prow[r] = w.packed + row * (w.k / 2);
        srow[r] = w.scales + row * nblk;
    }
    if (VEC) {
        /* two blocks per lane and step: 16 bytes, k % 32 == 0 */
        for (int64_t b = 2 * (int64_t)lane; b < nblk; b += 2 * GPU_WARP) {
            uint4 q[R];
            float s0[R], s1[R];
            GPU_UNROLL
            for (int r = 0; r < R; r++) {
                q[r] = *(const uint4 *)(prow[r] + b * 8);
                s0[r] = gpu_mul_rn(num_e4m3_value(srow[r][b]), w.global);
                s1[r] = gpu_mul_rn(num_e4m3_value(srow[r][b + 1]), w.global);
            }
            GPU_UNROLL
            for (int t = 0; t < MT; t++) {
                if (t < cnt) {
                    float xv[32];
                    load_x<true, 32>(xr[t] + b * NUM_BLOCK, xv);
                    GPU_UNROLL
                    for (int r = 0; r < R; r++) {
                        acc[r][t] = fmaf(block_dot(lt, q[r].x, q[r].y, xv), s0[r], acc[r][t]);
                        acc[r][t] =
                            fmaf(block_dot(lt, q[r].z, q[r].w, xv + 16), s1[r], acc[r][t]);
                    }
                }
            }
        }
    } else {
        /* one block (8 bytes) per lane and step; also takes unaligned x */
        for (int64_t b = lane; b < nblk; b += GPU_WARP) {
            uint2 q[R];
            float s0[R];
            GPU_UNROLL
            for (int r = 0; r < R; r++) {
                q[r] = *(const uint2 *)(prow[r] + b * 8);
                s0[r] = gpu_mul_rn(num_e4m3_value(srow[r][b]), w.global);
            }
            GPU_UNROLL
            for (int t = 0; t < MT; t++) {
                if (t < cnt) {
                    float xv[16];
                    load_x<false, 16>(xr[t] + b * NUM_BLOCK, xv);
                    GPU_UNROLL
                    for (int r = 0; r < R; r++)
                        acc[r][t] = fmaf(block_dot(lt, q[r].x, q[r].y, xv), s0[r], acc[r][t]);
                }
            }
        }
    }
}

template <int MT, int FMT, bool VEC>
GPU_DEV void dense_row_dot(const gk_weight &w, int64_t row, const float *const *xr, int cnt,
                           float *acc)
{
    const int lane = threadIdx.x % GPU_WARP;
    const int64_t k = w.k;
    const int64_t base = row * k;

    if (VEC) {
        /* eight elements per lane and step: 16 bytes of BF16/F16, 32 of F32 */
        for (int64_t i = 8 * (int64_t)lane; i < k; i += 8 * GPU_WARP) {
            float v[8];
            dense_load8<FMT>(w.dense, base + i, v);
            GPU_UNROLL
            for (int t = 0; t < MT; t++) {
                if (t < cnt) {
                    const float4 *x4 = (const float4 *)(xr[t] + i);
                    float4 a = x4[0], b = x4[1];
                    float p = acc[t];
                    p = fmaf(v[0], a.x, p); p = fmaf(v[1], a.y, p);
                    p = fmaf(v[2], a.z, p); p = fmaf(v[3], a.w, p);
                    p = fmaf(v[4], b.x, p); p = fmaf(v[5], b.y, p);
                    p = fmaf(v[6], b.z, p); p = fmaf(v[7], b.w, p);
                    acc[t] = p;
                }
            }
        }
    } else {
        for (int64_t i = lane; i < k; i += GPU_WARP) {
            float v = dense_at<FMT>(w.dense, base + i);
            GPU_UNROLL
            for (int t = 0; t < MT; t++)
                if (t < cnt)
                    acc[t] = fmaf(v, xr[t][i], acc[t]);
        }
    }
}

template <int MT, int FMT, bool VEC, int R>
GPU_DEV void row_dot(const lut_t *lut, const gk_weight &w, int64_t row0,
                     const float *const *xr, int cnt, float (*acc)[MT])
{
    if (FMT == GK_NVFP4) {
        nvfp4_row_dot<MT, VEC, R>(lut, w, row0, xr, cnt, acc);
    } else {
        GPU_UNROLL
        for (int r = 0; r < R; r++)
            dense_row_dot<MT, FMT, VEC>(w, row0 + r < w.n ? row0 + r : w.n - 1, xr, cnt,
                                        acc[r]);
    }
}

/* Reduce the per-lane sums and let lane 0 store them (+ bias). */
template <int MT, int R>
GPU_DEV void row_store(const gk_weight &w, int64_t row0, float (*acc)[MT], float *const *yr,
                       int cnt)
{
    const int lane = threadIdx.x % GPU_WARP;
    GPU_UNROLL
    for (int r = 0; r < R; r++)
        GPU_UNROLL
        for (int t = 0; t < MT; t++) {
            const float v = warp_sum(acc[r][t]);
            const int64_t row = row0 + r;
            if (lane == 0 && t < cnt && row < w.n)
                yr[t][row] = w.bias ? v + w.bias[row] : v;
        }
}

template <int MT, int FMT, bool VEC, int R>
__global__ void __launch_bounds__(GK_THREADS)
gemv_kernel(gk_weight w, const float *__restrict__ x, int m, float *__restrict__ y)
{
    __shared__ lut_t lut;
    const int64_t row0 =
        ((int64_t)blockIdx.x * (blockDim.x / GPU_WARP) + threadIdx.x / GPU_WARP) * R;
    const float *xr[MT];
    float *yr[MT];
    float acc[R][MT];

    if (FMT == GK_NVFP4) {
        lut_fill(&lut);
        gpu_syncthreads();
    }
    if (row0 >= w.n)
        return;
    GPU_UNROLL
    for (int t = 0; t < MT; t++) {
        xr[t] = x + (int64_t)(t < m ? t : 0) * w.k;
        yr[t] = y + (int64_t)(t < m ? t : 0) * w.n;
        GPU_UNROLL
        for (int r = 0; r < R; r++)
            acc[r][t] = 0.0f;
    }
    row_dot<MT, FMT, VEC, R>(&lut, w, row0, xr, m, acc);
    row_store<MT, R>(w, row0, acc, yr, m);
}

template <int FMT, bool VEC, int R>
static void gemv_launch_r(const gk_device *dev, const gk_weight *w, const float *x, int m,
                          float *y, gpu_stream_t s)
{
    const unsigned grid = grid_for(w->n, (int64_t)(GK_THREADS / dev->warp_size) * R);

    if (m <= 1)
        gemv_kernel<1, FMT, VEC, R><<<grid, GK_THREADS, 0, s>>>(*w, x, m, y);
    else if (m <= 2)
        gemv_kernel<2, FMT, VEC, R><<<grid, GK_THREADS, 0, s>>>(*w, x, m, y);
    else if (m <= 4)
        gemv_kernel<4, FMT, VEC, R><<<grid, GK_THREADS, 0, s>>>(*w, x, m, y);
    else
        gemv_kernel<8, FMT, VEC, R><<<grid, GK_THREADS, 0, s>>>(*w, x, m, y);
}

/* Rows per warp: dense rows gain nothing from sharing activations (their
 * weights are as wide as x); NVFP4 rows take dev->gemv_rows (1, 2 or 4;
 * 0 = 2, a guess until measured - bench-gpu sweeps it). */
template <int FMT, bool VEC>
static void gemv_launch(const gk_device *dev, const gk_weight *w, const float *x, int m,
                        float *y, gpu_stream_t s)
{
    const int r = FMT != GK_NVFP4 ? 1 : dev->gemv_rows ? dev->gemv_rows : 2;

    if (r >= 4)
        gemv_launch_r<FMT, VEC, 4>(dev, w, x, m, y, s);
    else if (r == 2)
        gemv_launch_r<FMT, VEC, 2>(dev, w, x, m, y, s);
    else
        gemv_launch_r<FMT, VEC, 1>(dev, w, x, m, y, s);
}

/* ---- GEMM: prefill, portable tiled path (devices without tensor cores) -----
 * 64x64 output tile per block of 256 threads, each thread 4x4 outputs, K in
 * steps of 32 (two NVFP4 blocks).  The weight tile is dequantized to float32
 * in shared memory exactly as §2 (code * (scale * global)). */

#define PT_BM 64
#define PT_BN 64
#define PT_BK 32

/* Dequantize weight rows n0.. of k-step k0 into WS[kk][r] (float32). */
template <int FMT>
GPU_DEV void load_w_tile_f32(const gk_weight &w, int64_t n0, int64_t k0,
                             float (*ws)[PT_BN + 1])
{
    const int tid = threadIdx.x;
    if (FMT == GK_NVFP4) {
        /* 64 rows x 2 blocks = 128 units of 16 weights */
        if (tid < 2 * PT_BN) {
            const int r = tid >> 1, bj = tid & 1;
            const int64_t row = n0 + r, blk = k0 / NUM_BLOCK + bj;
            const int64_t nblk = w.k / NUM_BLOCK;
            if (row < w.n && blk < nblk) {
                const uint8_t *p = w.packed + row * (w.k / 2) + blk * 8;
                const float sc = gpu_mul_rn(num_e4m3_value(w.scales[row * nblk + blk]),
                                            w.global);
                uint2 q = *(const uint2 *)p;
                for (int j = 0; j < 8; j++) {
                    uint32_t b = ((j < 4 ? q.x : q.y) >> (8 * (j & 3))) & 0xFFu;
                    ws[bj * 16 + 2 * j][r] = gpu_mul_rn(num_e2m1_value(b & 15u), sc);
                    ws[bj * 16 + 2 * j + 1][r] = gpu_mul_rn(num_e2m1_value(b >> 4), sc);
                }
            } else {
                for (int j = 0; j < 16; j++)
                    ws[bj * 16 + j][r] = 0.0f;
            }
        }
    } else {
        for (int i = tid; i < PT_BN * PT_BK; i += blockDim.x) {
            const int r = i / PT_BK, c = i % PT_BK;
            const int64_t row = n0 + r, col = k0 + c;
            ws[c][r] = (row < w.n && col < w.k) ? dense_at<FMT>(w.dense, row * w.k + col)
                                               : 0.0f;
        }
    }
}

/* One 64x64 output tile: rows r < PT_BM read activations XROWS[r] (NULL: a
 * row past the end, read as zeros) and write YROWS[r] (+ columns n0..),
 * both in shared memory so that the MoE kernel can gather its rows. */
template <int FMT>
GPU_DEV void tiled_tile(const gk_weight &w, int64_t n0, const float *const *xrows,
                        float *const *yrows)
{
    __shared__ float xs[PT_BK][PT_BM + 1];
    __shared__ float ws[PT_BK][PT_BN + 1];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[4][4] = {{0.0f}};

    for (int64_t k0 = 0; k0 < w.k; k0 += PT_BK) {
        for (int i = threadIdx.x; i < PT_BM * PT_BK; i += blockDim.x) {
            const int r = i / PT_BK, c = i % PT_BK;
            const int64_t col = k0 + c;
            xs[c][r] = (xrows[r] && col < w.k) ? xrows[r][col] : 0.0f;
        }
        load_w_tile_f32<FMT>(w, n0, k0, ws);
        gpu_syncthreads();
        for (int kk = 0; kk < PT_BK; kk++) {
            float a[4], b[4];
            for (int i = 0; i < 4; i++) {
                a[i] = xs[kk][ty * 4 + i];
                b[i] = ws[kk][tx * 4 + i];
            }
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        gpu_syncthreads();
    }
    for (int i = 0; i < 4; i++) {
        const int r = ty * 4 + i;
        if (!xrows[r])
            continue;
        for (int j = 0; j < 4; j++) {
            const int64_t col = n0 + tx * 4 + j;
            if (col < w.n)
                yrows[r][col] = w.bias ? acc[i][j] + w.bias[col] : acc[i][j];
        }
    }
}

template <int FMT>
__global__ void __launch_bounds__(GK_THREADS)
gemm_tiled_kernel(gk_weight w, const float *__restrict__ x, int64_t m,
                  float *__restrict__ y)
{
    __shared__ const float *xrows[PT_BM];
    __shared__ float *yrows[PT_BM];
    const int64_t m0 = (int64_t)blockIdx.y * PT_BM, n0 = (int64_t)blockIdx.x * PT_BN;

    if (threadIdx.x < PT_BM) {
        const int64_t row = m0 + threadIdx.x;
        xrows[threadIdx.x] = row < m ? x + row * w.k : NULL;
        yrows[threadIdx.x] = row < m ? y + row * w.n : NULL;
    }
    gpu_syncthreads();
    tiled_tile<FMT>(w, n0, xrows, yrows);
}

/* ---- GEMM: tensor cores ------------------------------------------------------
 * The same 64x64 tile as the portable path, four warps of 32x32 outputs,
 * each a grid of 16 x MMA_N fragments of gpu_mma_bf16 (libkernels/gpu/gpu.h).  The
 * operands are made exact in BF16 so that the products are those of the
 * float32 paths (each exact in float32, accumulation float32):
 *  - NVFP4 weights enter as E2M1 * E4M3(scale), at most 6 significant
 *    bits; the global scale multiplies the result (POST) once;
 *  - BF16 weights are BF16; F32/F16 ones are rounded to BF16 (the
 *    automatic choice leaves them to the portable GEMM);
 *  - activations: with SPLIT, x = hi + lo, two BF16 (16 significant bits,
 *    relative error 2^-17) and two MMAs; without, the caller guarantees x
 *    exact in BF16 (W4A4: act_exact_kernel's E2M1 * E4M3, with
 *    input_scale in POST).
 * Shared memory holds words of two BF16 of consecutive k, the unit every
 * fragment register takes. */
#if GPU_MMA_KIND
#define TC_WARPS 4
#define TC_THREADS (TC_WARPS * GPU_MMA_LANES)
#define TC_LDW (PT_BK / 2 + 4) /* words per shared row; the pad staggers banks */

/* Lane layouts: register Q of a lane holds A[mma_a_row][mma_a_col ..+1],
 * B[mma_b_k ..+1][mma_b_n]; accumulator element E is C[mma_c_row][mma_c_col]. */
#if GPU_MMA_KIND == GPU_MMA_NV_M16N8K16
/* PTX ISA 9.7.14.5.8 (m16n8k16, .bf16): g = lane / 4, t = lane % 4;
 * A registers {a0a1, a2a3, a4a5, a6a7} are rows g, g+8, g, g+8 at columns
 * 2t, 2t, 2t+8, 2t+8; B registers {b0b1, b2b3} rows 2t, 2t+8 of column g;
 * c0..c3 are (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1). */
#define MMA_N 8
#define MMA_AREGS 4
GPU_DEV int mma_a_row(int l, int q) { return (l >> 2) + 8 * (q & 1); }
GPU_DEV int mma_a_col(int l, int q) { return 2 * (l & 3) + 8 * (q >> 1); }
GPU_DEV int mma_b_k(int l, int q) { return 2 * (l & 3) + 8 * q; }
GPU_DEV int mma_b_n(int l, int q) { return (void)q, l >> 2; }
GPU_DEV int mma_c_row(int l, int e) { return (l >> 2) + 8 * (e >> 1); }
GPU_DEV int mma_c_col(int l, int e) { return 2 * (l & 3) + (e & 1); }
#else
/* AMD 16x16x16 BF16 MFMA (ROCm's matrix instruction calculator, CDNA2 and
 * CDNA3 alike): lane l holds A row l % 16, k = 4 (l / 16) .. +3 in two
 * registers; B column l % 16, the same k; D rows 4 (l / 16) .. +3 of
 * column l % 16. */
#define MMA_N 16
#define MMA_AREGS 2
GPU_DEV int mma_a_row(int l, int q) { return (void)q, l & 15; }
GPU_DEV int mma_a_col(int l, int q) { return 4 * (l >> 4) + 2 * q; }
GPU_DEV int mma_b_k(int l, int q) { return 4 * (l >> 4) + 2 * q; }
GPU_DEV int mma_b_n(int l, int q) { return (void)q, l & 15; }
GPU_DEV int mma_c_row(int l, int e) { return 4 * (l >> 4) + e; }
GPU_DEV int mma_c_col(int l, int e) { return (void)e, l & 15; }
#endif
#define MMA_NJ (32 / MMA_N) /* fragments across a warp's 32 columns */

GPU_DEV uint32_t bf16_pair(float lo, float hi)
{
    return num_bf16_encode(lo) | (num_bf16_encode(hi) << 16);
}

/* What BF16 leaves of V (exact: V - bf16(V) is a float32). */
GPU_DEV float bf16_rest(float v)
{
    return v - num_bf16_value(num_bf16_encode(v));
}

template <int FMT, bool SPLIT>
__global__ void __launch_bounds__(TC_THREADS)
gemm_mma_kernel(gk_weight w, const float *__restrict__ x, int64_t m, float post,
                float *__restrict__ y)
{
#ifdef GPU_MMA_DEVICE
    __shared__ uint32_t xs[PT_BM][TC_LDW];
    __shared__ uint32_t xl[SPLIT ? PT_BM : 1][TC_LDW];
    __shared__ uint32_t ws[PT_BN][TC_LDW];
    const int64_t m0 = (int64_t)blockIdx.y * PT_BM, n0 = (int64_t)blockIdx.x * PT_BN;
    const int tid = threadIdx.x, lane = tid % GPU_MMA_LANES, warp = tid / GPU_MMA_LANES;
    const int wm = warp / 2, wn = warp % 2;
    float acc[2][MMA_NJ][4];

    GPU_UNROLL
    for (int i = 0; i < 2; i++)
        GPU_UNROLL
        for (int j = 0; j < MMA_NJ; j++)
            GPU_UNROLL
            for (int e = 0; e < 4; e++)
                acc[i][j][e] = 0.0f;

    for (int64_t k0 = 0; k0 < w.k; k0 += PT_BK) {
        for (int i = tid; i < PT_BM * PT_BK / 2; i += TC_THREADS) {
            const int r = i / (PT_BK / 2), c = 2 * (i % (PT_BK / 2));
            const int64_t row = m0 + r, col = k0 + c;
            const float *xr = x + row * w.k;
            const float v0 = row < m && col < w.k ? xr[col] : 0.0f;
            const float v1 = row < m && col + 1 < w.k ? xr[col + 1] : 0.0f;
            xs[r][c / 2] = bf16_pair(v0, v1);
            if (SPLIT)
                xl[r][c / 2] = bf16_pair(bf16_rest(v0), bf16_rest(v1));
        }
        if (FMT == GK_NVFP4) {
            /* 64 rows x 2 blocks of 16; byte j of a block is k = 2j, 2j+1 */
            for (int u = tid; u < 2 * PT_BN; u += TC_THREADS) {
                const int r = u >> 1, bj = u & 1;
                const int64_t row = n0 + r, blk = k0 / NUM_BLOCK + bj;
                const int64_t nblk = w.k / NUM_BLOCK;
                if (row < w.n && blk < nblk) {
                    const float sc = num_e4m3_value(w.scales[row * nblk + blk]);
                    const uint2 q = *(const uint2 *)(w.packed + row * (w.k / 2) + blk * 8);
                    GPU_UNROLL
                    for (int j = 0; j < 8; j++) {
                        const uint32_t b = ((j < 4 ? q.x : q.y) >> (8 * (j & 3))) & 0xFFu;
                        ws[r][bj * 8 + j] =
                            bf16_pair(gpu_mul_rn(num_e2m1_value(b & 15u), sc),
                                      gpu_mul_rn(num_e2m1_value(b >> 4), sc));
                    }
                } else {
                    GPU_UNROLL
                    for (int j = 0; j < 8; j++)
                        ws[r][bj * 8 + j] = 0u;
                }
            }
        } else {
            for (int i = tid; i < PT_BN * PT_BK / 2; i += TC_THREADS) {
                const int r = i / (PT_BK / 2), c = 2 * (i % (PT_BK / 2));
                const int64_t row = n0 + r, col = k0 + c;
                ws[r][c / 2] = bf16_pair(
                    row < w.n && col < w.k ? dense_at<FMT>(w.dense, row * w.k + col) : 0.0f,
                    row < w.n && col + 1 < w.k ? dense_at<FMT>(w.dense, row * w.k + col + 1)
                                               : 0.0f);
            }
        }
        gpu_syncthreads();
        GPU_UNROLL
        for (int kk = 0; kk < PT_BK; kk += 16) {
            uint32_t a[2][MMA_AREGS], b[MMA_NJ][2];
            GPU_UNROLL
            for (int i = 0; i < 2; i++)
                GPU_UNROLL
                for (int q = 0; q < MMA_AREGS; q++)
                    a[i][q] = xs[wm * 32 + i * 16 + mma_a_row(lane, q)]
                                [(kk + mma_a_col(lane, q)) / 2];
            GPU_UNROLL
            for (int j = 0; j < MMA_NJ; j++)
                GPU_UNROLL
                for (int q = 0; q < 2; q++)
                    b[j][q] = ws[wn * 32 + j * MMA_N + mma_b_n(lane, q)]
                                [(kk + mma_b_k(lane, q)) / 2];
            GPU_UNROLL
            for (int i = 0; i < 2; i++)
                GPU_UNROLL
                for (int j = 0; j < MMA_NJ; j++)
                    gpu_mma_bf16(acc[i][j], a[i], b[j]);
            if (SPLIT) {
                GPU_UNROLL
                for (int i = 0; i < 2; i++)
                    GPU_UNROLL
                    for (int q = 0; q < MMA_AREGS; q++)
                        a[i][q] = xl[wm * 32 + i * 16 + mma_a_row(lane, q)]
                                    [(kk + mma_a_col(lane, q)) / 2];
                GPU_UNROLL
                for (int i = 0; i < 2; i++)
                    GPU_UNROLL
                    for (int j = 0; j < MMA_NJ; j++)
                        gpu_mma_bf16(acc[i][j], a[i], b[j]);
            }
        }
        gpu_syncthreads();
    }
    GPU_UNROLL
    for (int i = 0; i < 2; i++)
        GPU_UNROLL
        for (int j = 0; j < MMA_NJ; j++)
            GPU_UNROLL
            for (int e = 0; e < 4; e++) {
                const int64_t row = m0 + wm * 32 + i * 16 + mma_c_row(lane, e);
                const int64_t col = n0 + wn * 32 + j * MMA_N + mma_c_col(lane, e);
                if (row < m && col < w.n) {
                    const float v = gpu_mul_rn(acc[i][j][e], post);
                    y[row * w.n + col] = w.bias ? v + w.bias[col] : v;
                }
            }
#else
    (void)w, (void)x, (void)m, (void)post, (void)y;
#endif /* GPU_MMA_DEVICE */
}
#endif /* GPU_MMA_KIND */

/* ---- W4A4 GEMM: block-scaled FP4 tensor cores (sm_120a, sm_121a) -------------
 * The activations are quantized by §5 exactly as qdq_kernel does it (same
 * float32 operations, so the same E2M1 codes and E4M3 block scales), but
 * kept as codes: packed like a weight, [m, k/2] bytes then [m, k/16] scale
 * bytes.  The instruction then forms sum_k (a_k sa)(b_k sb) from codes and
 * scales - every product exact in float32, E2M1 x E4M3 x E2M1 x E4M3 has 12
 * significant bits - and the epilogue multiplies by weight_scale_2 *
 * input_scale: the reference's x' = e2m1 * (s / gs) and w = e2m1 *
 * (scale * global) differ from that only by those few float32 roundings.
 * Fragments are read straight from global memory (L1-cached). */

/* One thread per block of 16: §5 up to the codes (num_qdq_block_codes, the
 * operations of qdq_kernel), the codes packed like a weight's, the scales as
 * bytes (the FP4 GEMM's operands). */
__global__ void act_quant_kernel(const float *__restrict__ x, int64_t nblocks, float gs,
                                 uint8_t *__restrict__ codes, uint8_t *__restrict__ scales)
{
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    float v[NUM_BLOCK], back; /* back: unused here (the epilogue's input_scale) */
    uint32_t c[NUM_BLOCK], sc, lo = 0, hi = 0;

    if (b >= nblocks)
        return;
    for (int j = 0; j < NUM_BLOCK; j++)
        v[j] = x[b * NUM_BLOCK + j];
    sc = num_qdq_block_codes(v, gs, c, &back);
    for (int j = 0; j < 8; j++) {
        lo |= c[j] << (4 * j);
        hi |= c[j + 8] << (4 * j);
    }
    {
        uint2 c2;
        c2.x = lo;
        c2.y = hi;
        ((uint2 *)codes)[b] = c2;
    }
    scales[b] = (uint8_t)sc;
}

/* One thread per block of 16: E2M1(code) * E4M3(scale), the §5 value
 * before its division by gs - exact in float32 and in BF16 (at most 2 + 4
 * significant bits) - for the BF16 tensor-core GEMM, which multiplies by
 * input_scale once at the end. */
__global__ void act_exact_kernel(const float *__restrict__ x, int64_t nblocks, float gs,
                                 float *__restrict__ out)
{
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    float v[NUM_BLOCK], s, back; /* back: unused here, as above */
    uint32_t c[NUM_BLOCK];

    if (b >= nblocks)
        return;
    for (int j = 0; j < NUM_BLOCK; j++)
        v[j] = x[b * NUM_BLOCK + j];
    s = num_e4m3_value(num_qdq_block_codes(v, gs, c, &back));
    for (int j = 0; j < NUM_BLOCK; j++)
        out[b * NUM_BLOCK + j] = gpu_mul_rn(num_e2m1_value(c[j]), s);
}

#if GPU_MMA_KIND == GPU_MMA_NV_M16N8K16
#define F4_THREADS 128

/* The activations' codes at XQ, their scales from here on. */
static size_t fp4_scales_offset(int64_t m, int64_t k)
{
    return ((size_t)(m * (k / 2)) + 255) & ~(size_t)255;
}

/* Four bytes of scales for k0 .. k0+63 of a row (zero past k). */
GPU_DEV uint32_t f4_scales(const uint8_t *row, int64_t k0, int64_t nblk)
{
    uint32_t v = 0;
    for (int c = 0; c < 4; c++)
        if (k0 / NUM_BLOCK + c < nblk)
            v |= (uint32_t)row[k0 / NUM_BLOCK + c] << (8 * c);
    return v;
}

/* Lane layout of mma.m16n8k64 .e2m1 (PTX ISA 9.7.14.5.11), g = lane / 4,
 * t = lane % 4: A register q is 8 codes of row g + 8 (q & 1) at k = 8t +
 * 32 (q >> 1) .. +7 - four consecutive bytes of a packed row, element 0 in
 * the low nibble as in NVFP4 - and B register q 8 codes of column g at
 * k = 8t + 32q.  Scales (PTX ISA 9.7.14.3 and its Figure 43, selectors
 * {0, 0}): lane 4g holds the 4 scales of A row g and of B column g, lane
 * 4g + 1 those of A row g + 8; byte c scales k = 16c .. 16c+15.  The
 * emulator's model (libkernels/gpu/emu.cc) states the same facts element by element. */
__global__ void __launch_bounds__(F4_THREADS)
gemm_fp4_kernel(gk_weight w, const uint8_t *__restrict__ codes,
                const uint8_t *__restrict__ xscales, int64_t m, float post,
                float *__restrict__ y)
{
#ifdef GPU_FP4_MMA_DEVICE
    const int64_t m0 = (int64_t)blockIdx.y * PT_BM, n0 = (int64_t)blockIdx.x * PT_BN;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane >> 2, t = lane & 3;
    const int64_t nblk = w.k / NUM_BLOCK, rowb = w.k / 2;
    float acc[2][4][4];

    GPU_UNROLL
    for (int i = 0; i < 2; i++)
        GPU_UNROLL
        for (int j = 0; j < 4; j++)
            GPU_UNROLL
            for (int e = 0; e < 4; e++)
                acc[i][j][e] = 0.0f;
    for (int64_t k0 = 0; k0 < w.k; k0 += 64) {
        uint32_t a[2][4], b[4][2], sa[2], sb[4];
        GPU_UNROLL
        for (int i = 0; i < 2; i++) {
            const int64_t rbase = m0 + (warp / 2) * 32 + i * 16;
            GPU_UNROLL
            for (int q = 0; q < 4; q++) {
                const int64_t row = rbase + g + 8 * (q & 1), kc = k0 + 8 * t + 32 * (q >> 1);
                a[i][q] = row < m && kc < w.k
                              ? *(const uint32_t *)(codes + row * rowb + kc / 2) : 0u;
            }
            const int64_t srow = rbase + g + 8 * (t & 1);
            sa[i] = t < 2 && srow < m ? f4_scales(xscales + srow * nblk, k0, nblk) : 0u;
        }
        GPU_UNROLL
        for (int j = 0; j < 4; j++) {
            const int64_t col = n0 + (warp % 2) * 32 + j * 8 + g;
            GPU_UNROLL
            for (int q = 0; q < 2; q++) {
                const int64_t kc = k0 + 8 * t + 32 * q;
                b[j][q] = col < w.n && kc < w.k
                              ? *(const uint32_t *)(w.packed + col * rowb + kc / 2) : 0u;
            }
            sb[j] = t == 0 && col < w.n ? f4_scales(w.scales + col * nblk, k0, nblk) : 0u;
        }
        GPU_UNROLL
        for (int i = 0; i < 2; i++)
            GPU_UNROLL
            for (int j = 0; j < 4; j++)
                gpu_mma_fp4(acc[i][j], a[i], b[j], sa[i], sb[j]);
    }
    GPU_UNROLL
    for (int i = 0; i < 2; i++)
        GPU_UNROLL
        for (int j = 0; j < 4; j++)
            GPU_UNROLL
            for (int e = 0; e < 4; e++) {
                const int64_t row = m0 + (warp / 2) * 32 + i * 16 + g + 8 * (e >> 1);
                const int64_t col = n0 + (warp % 2) * 32 + j * 8 + 2 * t + (e & 1);
                if (row < m && col < w.n) {
                    const float v = gpu_mul_rn(acc[i][j][e], post);
                    y[row * w.n + col] = w.bias ? v + w.bias[col] : v;
                }
            }
#else
    (void)w, (void)codes, (void)xscales, (void)m, (void)post, (void)y;
#endif /* GPU_FP4_MMA_DEVICE */
}
#endif

/* Which tensor-core kernels this device's code image holds (GK_CAP_*). */
__global__ void caps_kernel(int *out)
{
    if (threadIdx.x == 0) {
        int c = 0;
#ifdef GPU_MMA_DEVICE
        c |= GK_CAP_MMA;
#endif
#ifdef GPU_FP4_MMA_DEVICE
        c |= GK_CAP_FP4_MMA;
#endif
        *out = c;
    }
}

extern "C" gpu_error_t gk_caps(int *dflag, gpu_stream_t s)
{
    caps_kernel<<<1, 64, 0, s>>>(dflag);
    return launched();
}

/* ---- linear ------------------------------------------------------------------- */

template <int FMT>
static void linear_launch(const gk_device *dev, const gk_weight *w, const float *x,
                          int64_t m, float *y, int force, gpu_stream_t s)
{
    const int use_gemv = force ? force == 1 : m <= GK_GEMV_MAX_M;

    if (use_gemv) {
        /* 16-byte loads need k % 32 (NVFP4: two blocks) or k % 8 (dense:
         * eight elements) and 16-byte aligned rows of x */
        const int vec = (FMT == GK_NVFP4 ? w->k % 32 == 0 : w->k % 8 == 0) &&
                        ((uintptr_t)x % 16) == 0 &&
                        (FMT == GK_NVFP4 || ((uintptr_t)w->dense % 16) == 0);
        for (int64_t t0 = 0; t0 < m; t0 += GK_GEMV_MAX_M) {
            const int cnt = (int)(m - t0 < GK_GEMV_MAX_M ? m - t0 : GK_GEMV_MAX_M);
            if (vec)
                gemv_launch<FMT, true>(dev, w, x + t0 * w->k, cnt, y + t0 * w->n, s);
            else
                gemv_launch<FMT, false>(dev, w, x + t0 * w->k, cnt, y + t0 * w->n, s);
        }
        return;
    }
    {
        dim3 grid(grid_for(w->n, PT_BN), grid_for(m, PT_BM));
        gemm_tiled_kernel<FMT><<<grid, GK_THREADS, 0, s>>>(*w, x, m, y);
    }
}

#if GPU_MMA_KIND
/* The BF16 tensor-core GEMM: X exact in BF16 (no split) or not (split). */
template <int FMT>
static void mma_launch(const gk_weight *w, const float *x, int64_t m, float post, int split,
                       float *y, gpu_stream_t s)
{
    dim3 grid(grid_for(w->n, PT_BN), grid_for(m, PT_BM));

    if (split)
        gemm_mma_kernel<FMT, true><<<grid, TC_THREADS, 0, s>>>(*w, x, m, post, y);
    else
        gemm_mma_kernel<FMT, false><<<grid, TC_THREADS, 0, s>>>(*w, x, m, post, y);
}
#endif

extern "C" gpu_error_t gk_linear(const gk_device *dev, const gk_weight *w, const float *x,
                                 int64_t m, float *y, float *xq, int force, gpu_stream_t s)
{
    const int w4a4 = w->format == GK_NVFP4 && w->input_scale > 0.0f;
    /* the automatic choice takes tensor cores for more than GEMV-sized m
     * and weights whose values BF16 holds exactly (NVFP4 codes x scales,
     * BF16); F32/F16 weights stay on the float32 GEMM */
    const int tc = force == 0 && m > GK_GEMV_MAX_M;

#if GPU_MMA_KIND == GPU_MMA_NV_M16N8K16
    if (w4a4 && dev->fp4mma && (force == 4 || tc)) {
        uint8_t *codes = (uint8_t *)xq, *sc = codes + fp4_scales_offset(m, w->k);
        const int64_t nblocks = m * (w->k / NUM_BLOCK);
        dim3 grid(grid_for(w->n, PT_BN), grid_for(m, PT_BM));
        act_quant_kernel<<<grid_for(nblocks, GK_THREADS), GK_THREADS, 0, s>>>(
            x, nblocks, w->input_gs, codes, sc);
        gemm_fp4_kernel<<<grid, F4_THREADS, 0, s>>>(*w, codes, sc, m,
                                                     gpu_mul_rn(w->global, w->input_scale), y);
        return launched();
    }
#endif
#if GPU_MMA_KIND
    if (dev->mma && (force == 3 || (tc && (w->format == GK_NVFP4 || w->format == GK_BF16)))) {
        if (w4a4) {
            /* E2M1 * E4M3 of §5, with the gs gk_qdq takes */
            const int64_t nblocks = m * (w->k / NUM_BLOCK);
            act_exact_kernel<<<grid_for(nblocks, GK_THREADS), GK_THREADS, 0, s>>>(
                x, nblocks, w->input_gs, xq);
            mma_launch<GK_NVFP4>(w, xq, m, gpu_mul_rn(w->global, w->input_scale), 0, y, s);
            return launched();
        }
        switch (w->format) {
        case GK_NVFP4: mma_launch<GK_NVFP4>(w, x, m, w->global, 1, y, s); break;
        case GK_F32: mma_launch<GK_F32>(w, x, m, 1.0f, 1, y, s); break;
        case GK_BF16: mma_launch<GK_BF16>(w, x, m, 1.0f, 1, y, s); break;
        default: mma_launch<GK_F16>(w, x, m, 1.0f, 1, y, s); break;
        }
        return launched();
    }
#endif
    if (w4a4) {
        gpu_error_t e = gk_qdq(x, m, w->k, w->input_gs, xq, s);
        if (e != GPU_SUCCESS)
            return e;
        x = xq;
    }
    switch (w->format) {
    case GK_NVFP4: linear_launch<GK_NVFP4>(dev, w, x, m, y, force, s); break;
    case GK_F32: linear_launch<GK_F32>(dev, w, x, m, y, force, s); break;
    case GK_BF16: linear_launch<GK_BF16>(dev, w, x, m, y, force, s); break;
    default: linear_launch<GK_F16>(dev, w, x, m, y, force, s); break;
    }
    return launched();
}

/* ---- embedding ------------------------------------------------------------------ */

/* Row ids[i] of the table, exactly as the CPU dequantizes it (§2). */
__global__ void embed_kernel(gk_weight w, const int32_t *__restrict__ ids,
                             float *__restrict__ y, int *flag)
{
    const int64_t i = blockIdx.y;
    const int32_t id = ids[i];
    float *out = y + i * w.k; /* the table is [n rows, k = hidden] */

    /* The registry checked the ids; never read outside the table anyway. */
    if (id < 0 || id >= w.n) {
        if (threadIdx.x == 0 && blockIdx.x == 0)
            gpu_atomic_cas(flag, 0, 1);
        for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < w.k;
             c += (int64_t)gridDim.x * blockDim.x)
            out[c] = 0.0f;
        return;
    }
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < w.k;
         c += (int64_t)gridDim.x * blockDim.x) {
        float v;
        switch (w.format) {
        case GK_NVFP4: {
            const int64_t nblk = w.k / NUM_BLOCK;
            const uint8_t byte = w.packed[(int64_t)id * (w.k / 2) + c / 2];
            const float sc = gpu_mul_rn(num_e4m3_value(w.scales[(int64_t)id * nblk + c / 16]),
                                        w.global);
            v = gpu_mul_rn(num_e2m1_value((c & 1) ? byte >> 4 : byte & 15u), sc);
            break;
        }
        case GK_F32: v = dense_at<GK_F32>(w.dense, (int64_t)id * w.k + c); break;
        case GK_BF16: v = dense_at<GK_BF16>(w.dense, (int64_t)id * w.k + c); break;
        default: v = dense_at<GK_F16>(w.dense, (int64_t)id * w.k + c); break;
        }
        out[c] = v;
    }
}

extern "C" gpu_error_t gk_embed(const gk_weight *w, const int32_t *ids, int64_t m, float *y,
                                int *flag, gpu_stream_t s)
{
    dim3 grid(grid_for(w->k, GK_THREADS) > 64 ? 64 : grid_for(w->k, GK_THREADS),
              (unsigned)m);
    embed_kernel<<<grid, GK_THREADS, 0, s>>>(*w, ids, y, flag);
    return launched();
}

/* ---- row-wise ops ---------------------------------------------------------------- */

/* HF's LlamaRMSNorm in float32: x * rsqrt(mean(x^2) + eps) * weight. */
__global__ void rmsnorm_kernel(const float *__restrict__ x, const float *__restrict__ wt,
                               int64_t d, float eps, float *y)
{
    __shared__ float sh[32];
    const float *xr = x + (int64_t)blockIdx.x * d;
    float *yr = y + (int64_t)blockIdx.x * d;
    float ss = 0.0f, inv;

    for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
        ss = fmaf(xr[i], xr[i], ss);
    ss = block_reduce<false>(ss, sh);
    inv = 1.0f / sqrtf(ss / (float)d + eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
        yr[i] = xr[i] * inv * wt[i];
}

extern "C" gpu_error_t gk_rmsnorm(const float *x, const float *weight, int64_t m, int64_t d,
                                  float eps, float *y, gpu_stream_t s)
{
    rmsnorm_kernel<<<(unsigned)m, GK_THREADS, 0, s>>>(x, weight, d, eps, y);
    return launched();
}

/* "Rotate half" (HF apply_rotary_pos_emb): for j < rot/2,
 * (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin), angle = pos * inv_freq[j],
 * cos and sin scaled by attn_factor (YaRN's mscale; 1 otherwise). */
__global__ void rope_kernel(float *x, const int32_t *__restrict__ pos, int64_t m,
                            int64_t heads, int64_t hd, int64_t half,
                            const float *__restrict__ inv_freq, float attn_factor)
{
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t total = m * heads * half;
    int64_t row, j;
    float ang, c, sn, x1, x2;
    float *base;

    if (t >= total)
        return;
    j = t % half;
    row = t / half; /* token * heads + head */
    base = x + row * hd;
    ang = (float)pos[row / heads] * inv_freq[j];
    c = cosf(ang) * attn_factor;
    sn = sinf(ang) * attn_factor;
    x1 = base[j];
    x2 = base[j + half];
    base[j] = x1 * c - x2 * sn;
    base[j + half] = x2 * c + x1 * sn;
}

extern "C" gpu_error_t gk_rope(float *x, const int32_t *positions, int64_t m, int64_t heads,
                               int64_t head_dim, int64_t rot_dim, const float *inv_freq,
                               float attn_factor, gpu_stream_t s)
{
    const int64_t total = m * heads * (rot_dim / 2);
    rope_kernel<<<grid_for(total, GK_THREADS), GK_THREADS, 0, s>>>(
        x, positions, m, heads, head_dim, rot_dim / 2, inv_freq, attn_factor);
    return launched();
}

__global__ void silu_mul_kernel(const float *__restrict__ gu, int64_t m, int64_t inter,
                                float *__restrict__ out)
{
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    float g, u;

    if (t >= m * inter)
        return;
    g = gu[(t / inter) * 2 * inter + t % inter];
    u = gu[(t / inter) * 2 * inter + inter + t % inter];
    out[t] = g / (1.0f + expf(-g)) * u;
}

extern "C" gpu_error_t gk_silu_mul(const float *gu, int64_t m, int64_t inter, float *out,
                                   gpu_stream_t s)
{
    silu_mul_kernel<<<grid_for(m * inter, GK_THREADS), GK_THREADS, 0, s>>>(gu, m, inter, out);
    return launched();
}

/* The gated activations of nvfp4_k_glu() other than SiLU, the CPU's float32
 * formulas with every product and quotient rounded on its own (no FMA
 * contraction): GeGLU (KIND 1) 0.5 x (1 + tanh(beta (x + kappa x^3))) u;
 * gpt-oss's clamped SwiGLU (KIND 2) (clamp(u) + 1) (g' sigmoid(alpha g')),
 * g' = min(g, limit), gate and up interleaved. */
/* Where gate and up of output C sit in a row of 2 INTER: halves, or
 * interleaved for the clamped SwiGLU (gpt-oss's gate_up_proj). */
GPU_DEV int64_t glu_gate_at(int kind, int64_t c)
{
    return kind == 2 ? 2 * c : c;
}

GPU_DEV int64_t glu_up_at(int kind, int64_t c, int64_t inter)
{
    return kind == 2 ? 2 * c + 1 : inter + c;
}

GPU_DEV float glu_value(int kind, float g, float u, float alpha, float limit)
{
    const float beta = 0.7978845608028654f, kappa = 0.044715f;

    if (kind == 1) {
        const float x3 = gpu_mul_rn(gpu_mul_rn(g, g), g);
        const float inner = gpu_mul_rn(beta, g + gpu_mul_rn(kappa, x3));
        return gpu_mul_rn(gpu_mul_rn(gpu_mul_rn(0.5f, g), 1.0f + tanhf(inner)), u);
    } else {
        const float x = g > limit ? limit : g;
        const float y = u > limit ? limit : u < -limit ? -limit : u;
        const float sg = gpu_div_rn(1.0f, 1.0f + expf(-gpu_mul_rn(x, alpha)));
        return gpu_mul_rn(y + 1.0f, gpu_mul_rn(x, sg));
    }
}

__global__ void glu_kernel(int kind, const float *__restrict__ gu, int64_t m, int64_t inter,
                           float alpha, float limit, float *__restrict__ out)
{
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;

    if (t >= m * inter)
        return;
    out[t] = glu_value(kind, gu[(t / inter) * 2 * inter + glu_gate_at(kind, t % inter)],
                       gu[(t / inter) * 2 * inter + glu_up_at(kind, t % inter, inter)], alpha,
                       limit);
}

extern "C" gpu_error_t gk_glu(int kind, const float *gu, int64_t m, int64_t inter,
                              float alpha, float limit, float *out, gpu_stream_t s)
{
    if (kind == 0)
        return gk_silu_mul(gu, m, inter, out, s);
    glu_kernel<<<grid_for(m * inter, GK_THREADS), GK_THREADS, 0, s>>>(kind, gu, m, inter,
                                                                      alpha, limit, out);
    return launched();
}

__global__ void scale_kernel(const float *x, int64_t n, float sc, float *y)
{
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n)
        y[t] = gpu_mul_rn(x[t], sc);
}

extern "C" gpu_error_t gk_scale(const float *x, int64_t n, float sc, float *y,
                                gpu_stream_t s)
{
    scale_kernel<<<grid_for(n, GK_THREADS), GK_THREADS, 0, s>>>(x, n, sc, y);
    return launched();
}

/* Softmax (LOG = 0) or log-softmax (LOG = 1) of one row per block, with the
 * row maximum subtracted first. */
__global__ void softmax_kernel(const float *x, int64_t n, float *y, int log)
{
    __shared__ float sh[32];
    const float *xr = x + (int64_t)blockIdx.x * n;
    float *yr = y + (int64_t)blockIdx.x * n;
    float mx = -INFINITY, sum = 0.0f;

    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        mx = fmaxf(mx, xr[i]);
    mx = block_reduce<true>(mx, sh);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        sum += expf(xr[i] - mx);
    sum = block_reduce<false>(sum, sh);
    if (log) {
        const float lse = logf(sum);
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
            yr[i] = xr[i] - mx - lse;
    } else {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
            yr[i] = expf(xr[i] - mx) / sum;
    }
}

extern "C" gpu_error_t gk_softmax(const float *x, int64_t m, int64_t n, float *y, int log,
                                  gpu_stream_t s)
{
    softmax_kernel<<<(unsigned)m, n >= 4096 ? 1024 : GK_THREADS, 0, s>>>(x, n, y, log);
    return launched();
}

__global__ void add_kernel(const float *a, const float *b, int64_t n, float *y)
{
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n)
        y[t] = a[t] + b[t];
}

extern "C" gpu_error_t gk_add(const float *a, const float *b, int64_t n, float *y,
                              gpu_stream_t s)
{
    add_kernel<<<grid_for(n, GK_THREADS), GK_THREADS, 0, s>>>(a, b, n, y);
    return launched();
}

/* y[t, i] += sigmoid(gate[t]) * x[t, i] (Qwen2-MoE's shared expert), the
 * CPU's float32 formula: 1 / (1 + expf(-g)), one product, one sum. */
__global__ void gate_add_kernel(const float *__restrict__ x, const float *__restrict__ gate,
                                int64_t m, int64_t n, float *y)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < m * n) {
        const float g = gpu_div_rn(1.0f, 1.0f + expf(-gate[i / n]));
        y[i] = y[i] + gpu_mul_rn(g, x[i]);
    }
}

extern "C" gpu_error_t gk_gate_add(const float *x, const float *gate, int64_t m, int64_t n,
                                   float *y, gpu_stream_t s)
{
    gate_add_kernel<<<grid_for(m * n, GK_THREADS), GK_THREADS, 0, s>>>(x, gate, m, n, y);
    return launched();
}

/* (value, index) with the larger value winning and the lower index on
 * ties; NaN never wins (it compares false), as on the CPU's ">" scan. */
GPU_DEV void argmax_merge(float *v, int *i, float ov, int oi)
{
    if (oi >= 0 && (*i < 0 || ov > *v || (ov == *v && oi < *i))) {
        *v = ov;
        *i = oi;
    }
}

GPU_DEV void block_argmax(float *v, int *i, float *shv, int *shi)
{
    const int lane = threadIdx.x % GPU_WARP, wid = threadIdx.x / GPU_WARP;
    const int nw = blockDim.x / GPU_WARP;

    for (int o = GPU_WARP / 2; o > 0; o >>= 1) {
        float ov = gpu_shfl_xor(*v, o);
        int oi = gpu_shfl_xor_int(*i, o);
        argmax_merge(v, i, ov, oi);
    }
    if (lane == 0) {
        shv[wid] = *v;
        shi[wid] = *i;
    }
    gpu_syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < nw; w++)
            argmax_merge(&shv[0], &shi[0], shv[w], shi[w]);
    }
    gpu_syncthreads();
    *v = shv[0];
    *i = shi[0];
    gpu_syncthreads();
}

__global__ void argmax_kernel(const float *__restrict__ x, int64_t n, int32_t *out)
{
    __shared__ float shv[32];
    __shared__ int shi[32];
    const float *xr = x + (int64_t)blockIdx.x * n;
    float v = 0.0f;
    int idx = -1;

    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        argmax_merge(&v, &idx, xr[i], (int)i);
    /* NaN never merges: a lane left with idx -1 only holds NaNs */
    if (idx >= 0 && xr[idx] != xr[idx])
        idx = -1;
    block_argmax(&v, &idx, shv, shi);
    if (threadIdx.x == 0)
        out[blockIdx.x] = idx < 0 ? 0 : idx;
}

extern "C" gpu_error_t gk_argmax(const float *x, int64_t m, int64_t n, int32_t *out,
                                 gpu_stream_t s)
{
    argmax_kernel<<<(unsigned)m, n >= 4096 ? 1024 : GK_THREADS, 0, s>>>(x, n, out);
    return launched();
}

/* ---- router ------------------------------------------------------------------------
 * HF's Mixtral/Qwen-MoE routing: softmax over the logits in float32, then
 * the k largest probabilities (lower expert index first on ties), then
 * optionally divided by their sum. */
__global__ void topk_kernel(const float *__restrict__ logits, int64_t e, int64_t k,
                            int renorm, int32_t *idx, float *weights)
{
    GPU_DYNAMIC_SHARED(float, prob);
    __shared__ float sh[32];
    __shared__ int shi[32];
    const float *lr = logits + (int64_t)blockIdx.x * e;
    float mx = -INFINITY, sum = 0.0f;

    for (int64_t i = threadIdx.x; i < e; i += blockDim.x)
        mx = fmaxf(mx, lr[i]);
    mx = block_reduce<true>(mx, sh);
    for (int64_t i = threadIdx.x; i < e; i += blockDim.x) {
        prob[i] = expf(lr[i] - mx);
        sum += prob[i];
    }
    sum = block_reduce<false>(sum, sh);
    for (int64_t i = threadIdx.x; i < e; i += blockDim.x)
        prob[i] = prob[i] / sum;
    gpu_syncthreads();
    for (int64_t j = 0; j < k; j++) {
        float v = 0.0f;
        int bi = -1;
        for (int64_t i = threadIdx.x; i < e; i += blockDim.x)
            if (prob[i] >= 0.0f) /* chosen ones are marked -1 */
                argmax_merge(&v, &bi, prob[i], (int)i);
        block_argmax(&v, &bi, sh, shi);
        if (threadIdx.x == 0) {
            const int chosen = bi < 0 ? 0 : bi;
            idx[(int64_t)blockIdx.x * k + j] = chosen;
            weights[(int64_t)blockIdx.x * k + j] = bi < 0 ? 0.0f : prob[chosen];
            prob[chosen] = -1.0f;
        }
        gpu_syncthreads();
    }
    if (renorm && threadIdx.x == 0) {
        float *wr = weights + (int64_t)blockIdx.x * k;
        float tot = 0.0f;
        for (int64_t j = 0; j < k; j++)
            tot += wr[j];
        if (tot > 0.0f)
            for (int64_t j = 0; j < k; j++)
                wr[j] = wr[j] / tot;
    }
}

extern "C" gpu_error_t gk_topk(const float *logits, int64_t m, int64_t e, int64_t k,
                               int renorm, int32_t *idx, float *weights, gpu_stream_t s)
{
    topk_kernel<<<(unsigned)m, GK_THREADS, (size_t)e * sizeof(float), s>>>(logits, e, k,
                                                                          renorm, idx, weights);
    return launched();
}

/* ---- attention ----------------------------------------------------------------------
 * One block per (head, token), online softmax (flash-attention style) over
 * tiles of ATT_TILE cache positions: a warp per position forms q.k with its
 * lanes over head_dim (coalesced), the block rescales the running sum and
 * the accumulator in shared memory when the maximum grows.  k and v were
 * appended to the caches before (stream order). */
#define ATT_TILE 64
#define ATT_THREADS 128

/* Decode (m <= ATT_SPLIT_MAX_M tokens) splits each token's context into
 * chunks of ATT_CHUNK positions, one block per (head, token, chunk), so a
 * long context keeps the whole GPU busy (flash-decoding); each chunk leaves
 * its running maximum, sum and unnormalised accumulator in scratch, and a
 * second kernel merges them in chunk order.  The split depends only on the
 * shapes, so results do not depend on timing. */
#define ATT_CHUNK 256
#define ATT_SPLIT_MAX_M 8

/* Paged addressing (nvfp4_k_attention_paged): row i is position pos[i] of
 * the sequence whose block table is row seq[i] of TABLES; position p of it
 * lives in block tab[p / block], slot p % block.  ok[i] says whether the
 * row's pos, seq and table entries were in range (att_paged_store_kernel). */
struct att_pages {
    const int32_t *pos, *seq, *tables;
    const int *ok;
    int64_t block, max_blocks;
    int64_t window; /* sliding window: a row attends to its last WINDOW positions; 0 none */
    const float *sinks; /* [nh] gpt-oss's per-head sink logits, or NULL */
};

/* The first position a paged row of context LEN attends to. */
GPU_DEV int64_t att_first(const att_pages &pg, int64_t len)
{
    return pg.window && len > pg.window ? len - pg.window : 0;
}

GPU_DEV int64_t att_slot(const att_pages &pg, const int32_t *tab, int64_t p)
{
    return (int64_t)tab[p / pg.block] * pg.block + p % pg.block;
}

/* KV elements (nvfp4_kv_elem): float32, or FP8 E4M3 bytes stored as
 * e4m3(x / scale) and read as e4m3 * scale (numerics.h's codec; one rounded
 * product, never fused into the score's or the sum's FMA), so an FP8 pool
 * reads the very float32 values a pool of quantize-dequantized rows held. */
GPU_DEV float kv_get(const float *p, int64_t i, float)
{
    return p[i];
}

GPU_DEV float kv_get(const uint8_t *p, int64_t i, float s)
{
    return gpu_mul_rn(num_e4m3_value(p[i]), s);
}

GPU_DEV void kv_put(float *p, int64_t i, float x, float)
{
    p[i] = x;
}

GPU_DEV void kv_put(uint8_t *p, int64_t i, float x, float s)
{
    p[i] = (uint8_t)num_e4m3_encode(gpu_div_rn(x, s));
}

template <bool PAGED, typename T>
__global__ void __launch_bounds__(ATT_THREADS)
attention_kernel(const float *__restrict__ q, const T *__restrict__ kc,
                 const T *__restrict__ vc, int64_t pos0, int64_t nh, int64_t nkv,
                 int64_t hd, float scale, float *__restrict__ out, int64_t chunk,
                 float *__restrict__ part, att_pages pg, float ks, float vs)
{
    GPU_DYNAMIC_SHARED(float, smem); /* q[hd] | acc[hd] | p[ATT_TILE] */
    __shared__ float sh[32];
    float *qs = smem, *acc = smem + hd, *p = smem + 2 * hd;
    const int64_t h = blockIdx.x, i = blockIdx.y, z = blockIdx.z;
    const int64_t kvh = h / (nh / nkv);
    const int32_t *tab = NULL;
    int64_t len, beg, end, first = 0;
    const int lane = threadIdx.x % GPU_WARP, warp = threadIdx.x / GPU_WARP;
    const int nwarps = blockDim.x / GPU_WARP;
    float run_max = -INFINITY, run_sum = 0.0f;

    if (PAGED) {
        if (!pg.ok[i]) {
            /* a row out of range (reported at sync): zeros, never a wild read */
            if (!part && z == 0)
                for (int64_t d = threadIdx.x; d < hd; d += blockDim.x)
                    out[(i * nh + h) * hd + d] = 0.0f;
            return;
        }
        len = (int64_t)pg.pos[i] + 1;
        tab = pg.tables + (int64_t)pg.seq[i] * pg.max_blocks;
        first = att_first(pg, len);
    } else {
        len = pos0 + i + 1; /* causal: positions 0 .. pos0 + i */
    }
    beg = z * chunk;
    end = beg + chunk < len ? beg + chunk : len;
    if (beg >= len || end <= first)
        return; /* this token's context is shorter (or past the window): the merge skips it */
    if (beg < first)
        beg = first;
    if (PAGED && pg.sinks && !part) {
        /* gpt-oss's sink: one more logit with no value, the running maximum
         * and sum start from it (split calls: the merge adds it once) */
        run_max = pg.sinks[h];
        run_sum = 1.0f;
    }
    for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
        qs[d] = q[(i * nh + h) * hd + d];
        acc[d] = 0.0f;
    }
    gpu_syncthreads();
    for (int64_t t0 = beg; t0 < end; t0 += ATT_TILE) {
        const int tn = (int)(end - t0 < ATT_TILE ? end - t0 : ATT_TILE);
        float tmax = -INFINITY, tsum = 0.0f, new_max, alpha;

        for (int j = warp; j < tn; j += nwarps) {
            const int64_t slot = PAGED ? att_slot(pg, tab, t0 + j) : t0 + j;
            const T *kr = kc + (slot * nkv + kvh) * hd;
            float dot = 0.0f;
            for (int64_t d = lane; d < hd; d += GPU_WARP)
                dot = fmaf(qs[d], kv_get(kr, d, ks), dot);
            dot = warp_sum(dot);
            if (lane == 0)
                p[j] = dot * scale;
        }
        gpu_syncthreads();
        for (int j = threadIdx.x; j < tn; j += blockDim.x)
            tmax = fmaxf(tmax, p[j]);
        tmax = block_reduce<true>(tmax, sh);
        new_max = fmaxf(run_max, tmax);
        alpha = run_max == -INFINITY ? 0.0f : expf(run_max - new_max);
        for (int j = threadIdx.x; j < tn; j += blockDim.x) {
            p[j] = expf(p[j] - new_max);
            tsum += p[j];
        }
        tsum = block_reduce<false>(tsum, sh); /* also orders the p[] writes */
        run_sum = run_sum * alpha + tsum;
        for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
            float a = acc[d] * alpha;
            for (int j = 0; j < tn; j++) {
                const int64_t slot = PAGED ? att_slot(pg, tab, t0 + j) : t0 + j;
                a = fmaf(p[j], kv_get(vc, (slot * nkv + kvh) * hd + d, vs), a);
            }
            acc[d] = a;
        }
        run_max = new_max;
        gpu_syncthreads();
    }
    if (!part) {
        for (int64_t d = threadIdx.x; d < hd; d += blockDim.x)
            out[(i * nh + h) * hd + d] = acc[d] / run_sum;
        return;
    }
    {
        /* chunk record: max, sum, acc[hd] */
        float *rec = part + ((i * nh + h) * (int64_t)gridDim.z + z) * (hd + 2);
        if (threadIdx.x == 0) {
            rec[0] = run_max;
            rec[1] = run_sum;
        }
        for (int64_t d = threadIdx.x; d < hd; d += blockDim.x)
            rec[2 + d] = acc[d];
    }
}

/* Merge the chunk records of one (head, token), in chunk order. */
template <bool PAGED>
__global__ void attention_merge_kernel(const float *__restrict__ part, int64_t pos0,
                                       int64_t nh, int64_t hd, int64_t chunk, int64_t nsplit,
                                       float *__restrict__ out, att_pages pg)
{
    const int64_t h = blockIdx.x, i = blockIdx.y;
    const float *rec = part + (i * nh + h) * nsplit * (hd + 2);
    float mx = -INFINITY, sum = 0.0f;
    int64_t len, used, z0;

    if (PAGED && !pg.ok[i]) {
        for (int64_t d = threadIdx.x; d < hd; d += blockDim.x)
            out[(i * nh + h) * hd + d] = 0.0f;
        return;
    }
    len = PAGED ? (int64_t)pg.pos[i] + 1 : pos0 + i + 1;
    used = (len + chunk - 1) / chunk;
    z0 = PAGED ? att_first(pg, len) / chunk : 0; /* chunks before the window wrote nothing */
    for (int64_t z = z0; z < used; z++)
        mx = fmaxf(mx, rec[z * (hd + 2)]);
    if (PAGED && pg.sinks)
        mx = fmaxf(mx, pg.sinks[h]);
    for (int64_t z = z0; z < used; z++)
        sum += rec[z * (hd + 2) + 1] * expf(rec[z * (hd + 2)] - mx);
    if (PAGED && pg.sinks) /* gpt-oss's sink: a logit with no value */
        sum += expf(pg.sinks[h] - mx);
    for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f;
        for (int64_t z = z0; z < used; z++)
            a = fmaf(rec[z * (hd + 2) + 2 + d], expf(rec[z * (hd + 2)] - mx), a);
        out[(i * nh + h) * hd + d] = a / sum;
    }
}

/* LEN: the longest context of the call (positions + 1). */
static int64_t attention_splits(int64_t len, int64_t m)
{
    return m <= ATT_SPLIT_MAX_M ? (len + ATT_CHUNK - 1) / ATT_CHUNK : 1;
}

extern "C" size_t gk_attention_scratch(int64_t pos0, int64_t m, int64_t nh, int64_t hd)
{
    const int64_t ns = attention_splits(pos0 + m, m);
    return ns > 1 ? (size_t)m * (size_t)nh * (size_t)ns * (size_t)(hd + 2) * sizeof(float)
                  : 0;
}

extern "C" gpu_error_t gk_attention(const float *q, const float *k, const float *v,
                                    float *k_cache, float *v_cache, int64_t max_ctx,
                                    int64_t pos0, int64_t m, int64_t nh, int64_t nkv,
                                    int64_t hd, float scale, float *out, float *scratch,
                                    gpu_stream_t s)
{
    /* the new rows are contiguous in the [max_ctx, nkv, hd] caches */
    const size_t row = (size_t)nkv * (size_t)hd;
    const size_t bytes = (size_t)m * row * sizeof(float);
    const size_t shmem = (2 * (size_t)hd + ATT_TILE) * sizeof(float);
    const int64_t ns = attention_splits(pos0 + m, m);
    const att_pages none = {NULL, NULL, NULL, NULL, 1, 1, 0, NULL};
    gpu_error_t e;

    (void)max_ctx;
    if ((e = gpu_copy_d2d(k_cache + (size_t)pos0 * row, k, bytes, s)) != GPU_SUCCESS)
        return e;
    if ((e = gpu_copy_d2d(v_cache + (size_t)pos0 * row, v, bytes, s)) != GPU_SUCCESS)
        return e;
    if (ns > 1) {
        dim3 grid((unsigned)nh, (unsigned)m, (unsigned)ns);
        attention_kernel<false, float><<<grid, ATT_THREADS, shmem, s>>>(
            q, k_cache, v_cache, pos0, nh, nkv, hd, scale, out, ATT_CHUNK, scratch, none, 1.0f,
            1.0f);
        attention_merge_kernel<false><<<dim3((unsigned)nh, (unsigned)m), ATT_THREADS, 0, s>>>(
            scratch, pos0, nh, hd, ATT_CHUNK, ns, out, none);
    } else {
        /* prefill: heads x tokens blocks already fill the device */
        dim3 grid((unsigned)nh, (unsigned)m, 1);
        attention_kernel<false, float><<<grid, ATT_THREADS, shmem, s>>>(
            q, k_cache, v_cache, pos0, nh, nkv, hd, scale, out, pos0 + m, NULL, none, 1.0f,
            1.0f);
    }
    return launched();
}

/* One block per row: check the row's position, table row and the table
 * entries it reaches (the registry cannot read device memory), note the
 * verdict in ok[i] (a bad row raises FLAG, reported at sync), and store a
 * good row's k and v in its slot. */
template <typename T>
__global__ void att_paged_store_kernel(const float *__restrict__ k, const float *__restrict__ v,
                                       T *__restrict__ kp, T *__restrict__ vp, att_pages pg,
                                       int64_t nblocks, int64_t ntables, int64_t max_len,
                                       int64_t row, int *ok, int *flag, float ks, float vs)
{
    __shared__ int good;
    const int64_t i = blockIdx.x;

    if (threadIdx.x == 0) {
        const int32_t p = pg.pos[i], sq = pg.seq[i];
        int g = p >= 0 && p < max_len && sq >= 0 && sq < ntables;
        for (int64_t b = 0; g && b <= p / pg.block; b++) {
            const int32_t id = pg.tables[(int64_t)sq * pg.max_blocks + b];
            g = id >= 0 && id < nblocks;
        }
        good = g;
        ok[i] = g;
        if (!g)
            gpu_atomic_cas(flag, 0, 1);
    }
    gpu_syncthreads();
    if (good) {
        const int64_t slot =
            att_slot(pg, pg.tables + (int64_t)pg.seq[i] * pg.max_blocks, pg.pos[i]);
        for (int64_t d = threadIdx.x; d < row; d += blockDim.x) {
            kv_put(kp, slot * row + d, k[i * row + d], ks);
            kv_put(vp, slot * row + d, v[i * row + d], vs);
        }
    }
}

extern "C" size_t gk_attention_paged_scratch(int64_t max_len, int64_t m, int64_t nh,
                                             int64_t hd)
{
    const int64_t ns = attention_splits(max_len, m);
    /* ok[m] (padded to 16 bytes), then the split records */
    size_t okb = ((size_t)m * sizeof(int) + 15) / 16 * 16;
    return okb + (ns > 1 ? (size_t)m * (size_t)nh * (size_t)ns * (size_t)(hd + 2) *
                               sizeof(float)
                         : 0);
}

/* The paged launches for pools of element type T. */
template <typename T>
static void attention_paged_run(const float *q, const float *k, const float *v, T *k_pool,
                                T *v_pool, int64_t nblocks, int64_t ntables, int64_t max_len,
                                att_pages pg, int64_t m, int64_t nh, int64_t nkv, int64_t hd,
                                float scale, float *out, int *ok, float *part, int *flag,
                                float ks, float vs, gpu_stream_t s)
{
    const size_t shmem = (2 * (size_t)hd + ATT_TILE) * sizeof(float);
    const int64_t ns = attention_splits(max_len, m);

    att_paged_store_kernel<T><<<(unsigned)m, ATT_THREADS, 0, s>>>(
        k, v, k_pool, v_pool, pg, nblocks, ntables, max_len, nkv * hd, ok, flag, ks, vs);
    if (ns > 1) {
        dim3 grid((unsigned)nh, (unsigned)m, (unsigned)ns);
        attention_kernel<true, T><<<grid, ATT_THREADS, shmem, s>>>(
            q, k_pool, v_pool, 0, nh, nkv, hd, scale, out, ATT_CHUNK, part, pg, ks, vs);
        attention_merge_kernel<true><<<dim3((unsigned)nh, (unsigned)m), ATT_THREADS, 0, s>>>(
            part, 0, nh, hd, ATT_CHUNK, ns, out, pg);
    } else {
        dim3 grid((unsigned)nh, (unsigned)m, 1);
        attention_kernel<true, T><<<grid, ATT_THREADS, shmem, s>>>(
            q, k_pool, v_pool, 0, nh, nkv, hd, scale, out, max_len, NULL, pg, ks, vs);
    }
}

extern "C" gpu_error_t gk_attention_paged(const float *q, const float *k, const float *v,
                                          void *k_pool, void *v_pool, int fp8, float k_scale,
                                          float v_scale, int64_t nblocks,
                                          int64_t block, const int32_t *tables,
                                          int64_t ntables, int64_t max_blocks,
                                          const int32_t *pos, const int32_t *seq,
                                          int64_t max_len, int64_t window,
                                          const float *sinks, int64_t m, int64_t nh,
                                          int64_t nkv, int64_t hd, float scale, float *out,
                                          void *scratch, int *flag, gpu_stream_t s)
{
    int *ok = (int *)scratch;
    float *part = (float *)((char *)scratch + ((size_t)m * sizeof(int) + 15) / 16 * 16);
    att_pages pg = {pos, seq, tables, ok, block, max_blocks, window, sinks};

    if (fp8)
        attention_paged_run<uint8_t>(q, k, v, (uint8_t *)k_pool, (uint8_t *)v_pool, nblocks,
                                     ntables, max_len, pg, m, nh, nkv, hd, scale, out, ok,
                                     part, flag, k_scale, v_scale, s);
    else
        attention_paged_run<float>(q, k, v, (float *)k_pool, (float *)v_pool, nblocks,
                                   ntables, max_len, pg, m, nh, nkv, hd, scale, out, ok,
                                   part, flag, 1.0f, 1.0f, s);
    return launched();
}

/* ---- mixture of experts (§6) ------------------------------------------------------
 * A (token, slot) pair p = t * k + j goes to expert idx[p].  The route
 * kernel counts pairs per expert and lists them grouped by expert; the
 * grouped GEMV kernels then run one grid row per expert, reading that
 * expert's weights once per chunk of up to 8 of its pairs (tokens grouped
 * by expert).  Per pair: x (qdq'd with the expert's w13 input scale for
 * W4A4), gate/up = w13 x, a = silu(gate) * up (qdq'd with the w2 input
 * scale), o = w2 a; finally y[t] = sum_j weight[t, j] * o[t * k + j] in slot
 * order. */

struct moe_layout {
    size_t off_counts, off_list, off_tiles, off_xq, off_gu, off_act, off_out, total;
};

static size_t align256(size_t v)
{
    return (v + 255) & ~(size_t)255;
}

static int64_t pairs_of(int64_t m, int64_t k)
{
    return m * k;
}

static moe_layout moe_plan(int64_t experts, int64_t m, int64_t k, int64_t hidden,
                           int64_t inter)
{
    const size_t pairs = (size_t)m * (size_t)k;
    moe_layout l;
    size_t at = 0;

    l.off_counts = at; at = align256(at + ((size_t)experts + 1) * sizeof(int) * 2);
    l.off_list = at;   at = align256(at + pairs * sizeof(int));
    /* at most pairs / 64 + experts tiles of (expert, start), and their count */
    l.off_tiles = at;
    at = align256(at + (pairs / PT_BM + (size_t)experts + 1) * 2 * sizeof(int) + sizeof(int));
    l.off_xq = at;     at = align256(at + pairs * (size_t)hidden * sizeof(float));
    l.off_gu = at;     at = align256(at + pairs * 2 * (size_t)inter * sizeof(float));
    l.off_act = at;    at = align256(at + pairs * (size_t)inter * sizeof(float));
    l.off_out = at;    at = align256(at + pairs * (size_t)hidden * sizeof(float));
    l.total = at;
    return l;
}

extern "C" size_t gk_moe_scratch(int64_t experts, int64_t m, int64_t k, int64_t hidden,
                                 int64_t inter)
{
    return moe_plan(experts, m, k, hidden, inter).total;
}

/* Counts per expert, exclusive offsets[experts + 1] and the pair list
 * grouped by expert.  One block; the order inside a group does not matter
 * (every pair owns its output rows). */
__global__ void moe_route_kernel(const int32_t *__restrict__ idx, int64_t pairs,
                                 int64_t experts, int *counts, int *offsets, int *list,
                                 int *tiles, int *ntiles, int *flag)
{
    for (int64_t e = threadIdx.x; e < experts; e += blockDim.x)
        counts[e] = 0;
    gpu_syncthreads();
    for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
        const int32_t e = idx[p];
        if (e < 0 || e >= experts)
            gpu_atomic_cas(flag, 0, 1);
        else
            gpu_atomic_add(&counts[e], 1);
    }
    gpu_syncthreads();
    if (threadIdx.x == 0) {
        int at = 0, nt = 0;
        for (int64_t e = 0; e < experts; e++) {
            offsets[e] = at;
            /* the grouped GEMM's tiles: (expert, first of up to 64 pairs) */
            if (tiles)
                for (int r = 0; r < counts[e]; r += PT_BM) {
                    tiles[2 * nt] = (int)e;
                    tiles[2 * nt + 1] = r;
                    nt++;
                }
            at += counts[e];
            counts[e] = 0;
        }
        offsets[experts] = at;
        if (tiles)
            *ntiles = nt;
    }
    gpu_syncthreads();
    for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
        const int32_t e = idx[p];
        if (e >= 0 && e < experts)
            list[offsets[e] + gpu_atomic_add(&counts[e], 1)] = (int)p;
    }
}

/* §5 per pair with its expert's input scale: out[p] = qdq(in[row(p)]). */
__global__ void moe_qdq_kernel(const gk_weight *__restrict__ d, const int32_t *__restrict__ idx,
                               int64_t pairs, int64_t experts, int64_t k_tok, int in_is_pair,
                               const float *in, int64_t cols, float *out)
{
    const int64_t nb = cols / NUM_BLOCK;
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t p, b;
    int32_t e;
    float v[NUM_BLOCK], o[NUM_BLOCK];
    const float *src;

    if (t >= pairs * nb)
        return;
    p = t / nb;
    b = t % nb;
    e = idx[p];
    if (e < 0 || e >= experts)
        return;
    src = in + (in_is_pair ? p : p / k_tok) * cols + b * NUM_BLOCK;
    for (int j = 0; j < NUM_BLOCK; j++)
        v[j] = src[j];
    /* the expert's gs, as the CPU takes it (gk_weight.input_gs) */
    num_qdq_block(v, d[e].input_gs, o);
    for (int j = 0; j < NUM_BLOCK; j++)
        out[p * cols + b * NUM_BLOCK + j] = o[j];
}

/* Grid (row groups, experts): rows of expert blockIdx.y's weight times its
 * pairs' inputs, 8 pairs per pass over the weights. */
template <int FMT, bool VEC>
__global__ void __launch_bounds__(GK_THREADS)
moe_gemv_kernel(const gk_weight *__restrict__ d, const int *__restrict__ offsets,
                const int *__restrict__ list, const float *in, int in_is_pair, int64_t k_tok,
                float *out)
{
    __shared__ lut_t lut;
    const int64_t e = blockIdx.y;
    const int beg = offsets[e], end = offsets[e + 1];
    const gk_weight w = d[e];
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / GPU_WARP) + threadIdx.x / GPU_WARP;

    if (beg == end)
        return;
    if (FMT == GK_NVFP4) {
        lut_fill(&lut);
        gpu_syncthreads();
    }
    if (row >= w.n)
        return;
    for (int c0 = beg; c0 < end; c0 += GK_GEMV_MAX_M) {
        const int cnt = end - c0 < GK_GEMV_MAX_M ? end - c0 : GK_GEMV_MAX_M;
        const float *xr[GK_GEMV_MAX_M];
        float *yr[GK_GEMV_MAX_M];
        float acc[1][GK_GEMV_MAX_M];
        for (int t = 0; t < GK_GEMV_MAX_M; t++) {
            const int p = list[c0 + (t < cnt ? t : 0)];
            xr[t] = in + (in_is_pair ? p : p / k_tok) * w.k;
            yr[t] = out + (int64_t)p * w.n;
            acc[0][t] = 0.0f;
        }
        row_dot<GK_GEMV_MAX_M, FMT, VEC, 1>(&lut, w, row, xr, cnt, acc);
        row_store<GK_GEMV_MAX_M, 1>(w, row, acc, yr, cnt);
    }
}

/* Prefill: grid (column tiles, tile bound); tile blockIdx.y of the route's
 * list is (expert, first pair): up to 64 of that expert's pairs times a
 * 64-column slice of its weight, read once per 64 pairs. */
template <int FMT>
__global__ void __launch_bounds__(GK_THREADS)
moe_gemm_kernel(const gk_weight *__restrict__ d, const int *__restrict__ offsets,
                const int *__restrict__ list, const int *__restrict__ tiles,
                const int *__restrict__ ntiles, const float *in, int in_is_pair,
                int64_t k_tok, float *out)
{
    __shared__ const float *xrows[PT_BM];
    __shared__ float *yrows[PT_BM];
    const int t = blockIdx.y;
    int e, r0, cnt;
    int64_t n0 = (int64_t)blockIdx.x * PT_BN;

    if (t >= *ntiles)
        return;
    e = tiles[2 * t];
    r0 = tiles[2 * t + 1];
    cnt = offsets[e + 1] - offsets[e];
    if (n0 >= d[e].n)
        return; /* all experts are as wide as the grid; a guard only */
    {
        const gk_weight w = d[e];
        if (threadIdx.x < PT_BM) {
            const int r = r0 + (int)threadIdx.x;
            if (r < cnt) {
                const int p = list[offsets[e] + r];
                xrows[threadIdx.x] = in + (in_is_pair ? p : p / k_tok) * w.k;
                yrows[threadIdx.x] = out + (int64_t)p * w.n;
            } else {
                xrows[threadIdx.x] = NULL;
                yrows[threadIdx.x] = NULL;
            }
        }
        gpu_syncthreads();
        tiled_tile<FMT>(w, n0, xrows, yrows);
    }
}

static void moe_gemm(int format, const gk_weight *d, int64_t rows, int64_t pairs,
                     int64_t experts, const int *offsets, const int *list, const int *tiles,
                     const int *ntiles, const float *in, int in_is_pair, int64_t k_tok,
                     float *out, gpu_stream_t s)
{
    dim3 grid(grid_for(rows, PT_BN), (unsigned)(pairs / PT_BM + experts + 1));
    switch (format) {
    case GK_NVFP4:
        moe_gemm_kernel<GK_NVFP4><<<grid, GK_THREADS, 0, s>>>(d, offsets, list, tiles, ntiles,
                                                             in, in_is_pair, k_tok, out);
        break;
    case GK_F32:
        moe_gemm_kernel<GK_F32><<<grid, GK_THREADS, 0, s>>>(d, offsets, list, tiles, ntiles,
                                                           in, in_is_pair, k_tok, out);
        break;
    case GK_BF16:
        moe_gemm_kernel<GK_BF16><<<grid, GK_THREADS, 0, s>>>(d, offsets, list, tiles, ntiles,
                                                            in, in_is_pair, k_tok, out);
        break;
    default:
        moe_gemm_kernel<GK_F16><<<grid, GK_THREADS, 0, s>>>(d, offsets, list, tiles, ntiles,
                                                           in, in_is_pair, k_tok, out);
        break;
    }
}

__global__ void moe_silu_kernel(const int32_t *__restrict__ idx, int64_t pairs,
                                int64_t experts, const float *__restrict__ gu, int64_t inter,
                                int kind, float alpha, float limit, float *__restrict__ act)
{
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t p, c;
    float g, u;

    if (t >= pairs * inter)
        return;
    p = t / inter;
    c = t % inter;
    if (idx[p] < 0 || idx[p] >= experts)
        return;
    g = gu[p * 2 * inter + glu_gate_at(kind, c)];
    u = gu[p * 2 * inter + glu_up_at(kind, c, inter)];
    act[t] = kind == 0 ? g / (1.0f + expf(-g)) * u : glu_value(kind, g, u, alpha, limit);
}

__global__ void moe_combine_kernel(const int32_t *__restrict__ idx,
                                   const float *__restrict__ weights, int64_t m, int64_t k,
                                   int64_t experts, const float *__restrict__ o,
                                   int64_t hidden, float *__restrict__ y)
{
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t tok, c;
    float acc = 0.0f;

    if (t >= m * hidden)
        return;
    tok = t / hidden;
    c = t % hidden;
    for (int64_t j = 0; j < k; j++) {
        const int64_t p = tok * k + j;
        if (idx[p] >= 0 && idx[p] < experts)
            acc = fmaf(weights[p], o[p * hidden + c], acc);
    }
    y[t] = acc;
}

template <int FMT>
static void moe_gemv_launch(const gk_device *dev, const gk_weight *d, int64_t experts,
                            int64_t rows, int vec, const int *offsets, const int *list,
                            const float *in, int in_is_pair, int64_t k_tok, float *out,
                            gpu_stream_t s)
{
    dim3 grid(grid_for(rows, GK_THREADS / dev->warp_size), (unsigned)experts);
    if (vec)
        moe_gemv_kernel<FMT, true><<<grid, GK_THREADS, 0, s>>>(d, offsets, list, in,
                                                              in_is_pair, k_tok, out);
    else
        moe_gemv_kernel<FMT, false><<<grid, GK_THREADS, 0, s>>>(d, offsets, list, in,
                                                               in_is_pair, k_tok, out);
}

static void moe_gemv(const gk_device *dev, int format, const gk_weight *d, int64_t experts,
                     int64_t rows, int vec, const int *offsets, const int *list,
                     const float *in, int in_is_pair, int64_t k_tok, float *out,
                     gpu_stream_t s)
{
    switch (format) {
    case GK_NVFP4:
        moe_gemv_launch<GK_NVFP4>(dev, d, experts, rows, vec, offsets, list, in, in_is_pair,
                                  k_tok, out, s);
        break;
    case GK_F32:
        moe_gemv_launch<GK_F32>(dev, d, experts, rows, vec, offsets, list, in, in_is_pair,
                                k_tok, out, s);
        break;
    case GK_BF16:
        moe_gemv_launch<GK_BF16>(dev, d, experts, rows, vec, offsets, list, in, in_is_pair,
                                 k_tok, out, s);
        break;
    default:
        moe_gemv_launch<GK_F16>(dev, d, experts, rows, vec, offsets, list, in, in_is_pair,
                                k_tok, out, s);
        break;
    }
}

/* D13 and D2 are device arrays of the experts' weights, all experts of one
 * array in format FMT13 / FMT2 (the backend checked); VEC13 / VEC2 say that
 * the 16-byte GEMV loads are legal for them (see linear_launch). */
extern "C" gpu_error_t gk_moe(const gk_device *dev, const gk_weight *d13, const gk_weight *d2,
                              int fmt13, int fmt2, int vec13, int vec2, int qdq13, int qdq2,
                              int64_t experts, const float *x, int64_t m, const int32_t *idx,
                              const float *weights, int64_t k, int64_t hidden, int64_t inter,
                              int act_kind, float alpha, float limit, float *y, void *scratch,
                              int *flag, gpu_stream_t s)
{
    const moe_layout l = moe_plan(experts, m, k, hidden, inter);
    char *base = (char *)scratch;
    int *counts = (int *)(base + l.off_counts);
    int *offsets = counts + experts + 1;
    int *list = (int *)(base + l.off_list);
    float *xq = (float *)(base + l.off_xq);
    float *gu = (float *)(base + l.off_gu);
    float *act = (float *)(base + l.off_act);
    float *o = (float *)(base + l.off_out);
    int *tiles = (int *)(base + l.off_tiles);
    int *ntiles = tiles + 2 * (pairs_of(m, k) / PT_BM + experts + 1);
    const int64_t pairs = m * k;
    const float *in13 = x;
    int in13_pair = 0;
    /* decode: grouped GEMV, weights read once per 8 pairs; prefill: grouped
     * tiled GEMM, once per 64 */
    const int gemm = m > GK_GEMV_MAX_M;

    moe_route_kernel<<<1, 1024, 0, s>>>(idx, pairs, experts, counts, offsets, list,
                                        gemm ? tiles : NULL, ntiles, flag);
    if (qdq13) {
        const int64_t nb = pairs * (hidden / NUM_BLOCK);
        moe_qdq_kernel<<<grid_for(nb, GK_THREADS), GK_THREADS, 0, s>>>(
            d13, idx, pairs, experts, k, 0, x, hidden, xq);
        in13 = xq;
        in13_pair = 1;
    }
    if (gemm)
        moe_gemm(fmt13, d13, 2 * inter, pairs, experts, offsets, list, tiles, ntiles, in13,
                 in13_pair, k, gu, s);
    else
        moe_gemv(dev, fmt13, d13, experts, 2 * inter, vec13, offsets, list, in13, in13_pair,
                 k, gu, s);
    moe_silu_kernel<<<grid_for(pairs * inter, GK_THREADS), GK_THREADS, 0, s>>>(
        idx, pairs, experts, gu, inter, act_kind, alpha, limit, act);
    if (qdq2) {
        const int64_t nb = pairs * (inter / NUM_BLOCK);
        moe_qdq_kernel<<<grid_for(nb, GK_THREADS), GK_THREADS, 0, s>>>(
            d2, idx, pairs, experts, k, 1, act, inter, act);
    }
    if (gemm)
        moe_gemm(fmt2, d2, hidden, pairs, experts, offsets, list, tiles, ntiles, act, 1, k, o,
                 s);
    else
        moe_gemv(dev, fmt2, d2, experts, hidden, vec2, offsets, list, act, 1, k, o, s);
    moe_combine_kernel<<<grid_for(m * hidden, GK_THREADS), GK_THREADS, 0, s>>>(
        idx, weights, m, k, experts, o, hidden, y);
    return launched();
}
