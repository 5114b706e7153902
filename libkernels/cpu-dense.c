/* SPDX-License-Identifier: MIT */
/* The CPU backend's kernels for unquantized weights (F32, BF16, F16 rows,
 * read in place from the mapped file or from the backend's copy), called by
 * the product (tiles_range, cpu-linear.c) a row, or a few, at a time:
 * portable, AVX2 (with F16C) and AVX-512, the last two with the same bits. */
#include "config.h"

#include <string.h>

#include "cpu-internal.h"
#include "cpu-linear.h"

/* ---- dense (F32 / BF16 / F16) -------------------------------------------- */

void nvfp4k_cpu_dense_row_scalar(const cpu_kweight *w, int64_t r, const float *x, size_t t0,
                                 const krange *kr, size_t nt, float *y)
{
    int64_t lr;
    const cpu_dense_part *p = dense_row(w, r, &lr);
    const size_t k = (size_t)w->d.k, base = (size_t)lr * k;
    const size_t i1 = 16 * kr->b1 < k ? 16 * kr->b1 : k;

    for (size_t t = t0; t < t0 + nt; t++) {
        float acc = 0.0f;
        float *yo = y + t * (size_t)w->d.n + (size_t)r;
        for (size_t i = 16 * kr->b0; i < i1; i++)
            acc += dense_at(p, base + i) * x[t * k + i];
        *yo = kr->acc ? *yo + acc : acc;
    }
}

#ifdef CPU_X86
/* ---- AVX2 (with F16C): the AVX-512 kernels' arithmetic in 8-lane halves ---- */

/* Each 16-lane vector of the AVX-512 kernels below is two halves here,
 * lanes 0-7 and 8-15, with the same IEEE operation per lane (the same
 * conversions: bf16 by a shift, f16 by vcvtph2ps; the same multiply-adds),
 * and reduce16_avx2 adds the 16 lanes in _mm512_reduce_add_ps's order: so a
 * row gives the same bits on a CPU with AVX2 only (Zen 3, older Xeons) as
 * on one with AVX-512, and the batch invariance of the kernels carries
 * over.  A tail of k past the last 16 is read through a zeroed local copy
 * (AVX2 has no masked 16-bit loads): zero weights by zero activations, as
 * the AVX-512 kernels' zero-masked loads give. */

/* STMT once per dtype of a part, DT naming it as a constant there (each
 * always-inline body below compiled for one dtype). */
#define DENSE_BY_DTYPE(dtype, DT, STMT)                                                 \
    do {                                                                               \
        switch (dtype) {                                                               \
        case NVFP4_DTYPE_F32: {                                                        \
            const nvfp4_dtype DT = NVFP4_DTYPE_F32;                                    \
            STMT;                                                                      \
            break;                                                                     \
        }                                                                              \
        case NVFP4_DTYPE_BF16: {                                                       \
            const nvfp4_dtype DT = NVFP4_DTYPE_BF16;                                   \
            STMT;                                                                      \
            break;                                                                     \
        }                                                                              \
        default: {                                                                     \
            const nvfp4_dtype DT = NVFP4_DTYPE_F16;                                    \
            STMT;                                                                      \
            break;                                                                     \
        }                                                                              \
        }                                                                              \
    } while (0)

/* 16 weights of part P from element I as float32 halves. */
__attribute__((target("avx2,fma,f16c"))) static inline __attribute__((always_inline)) void
dense_load16_avx2(const void *data, nvfp4_dtype dt, size_t i, __m256 *lo, __m256 *hi)
{
    switch (dt) {
    case NVFP4_DTYPE_F32:
        *lo = _mm256_loadu_ps((const float *)data + i);
        *hi = _mm256_loadu_ps((const float *)data + i + 8);
        break;
    case NVFP4_DTYPE_BF16: {
        /* bf16 is the top half of a float32: exact */
        const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)data + i));
        *lo = _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)), 16));
        *hi = _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1)), 16));
        break;
    }
    default: {
        const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)data + i));
        *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
        *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
        break;
    }
    }
}

/* Up to DENSE_GEMV_ROWS rows RS apart of part P (local row LR), one token
 * X (unpacked), its outputs at Y + R: dense_gemv4_body's operations, and
 * with NR = 1 dense_row_avx512_body's for one token. */
__attribute__((target("avx2,fma,f16c"))) static inline __attribute__((always_inline)) void
dense_rows_avx2_body(const cpu_kweight *w, const cpu_dense_part *p, int64_t r, int64_t lr,
                     size_t rs, const float *x, const krange *kr, float *y, nvfp4_dtype dt,
                     int nr, int pf)
{
    const size_t k = (size_t)w->d.k, esz = dt == NVFP4_DTYPE_F32 ? 4 : 2;
    const size_t i1 = 16 * kr->b1 < k ? 16 * kr->b1 : k;
    const size_t row = rs * k * esz, ahead = DENSE_GEMV_ROWS * row;
    const size_t l0 = (size_t)lr * k;
    const char *base = (const char *)p->data + l0 * esz;
    __m256 lo[DENSE_GEMV_ROWS], hi[DENSE_GEMV_ROWS];
    size_t i = 16 * kr->b0;

#pragma GCC unroll 4
    for (int j = 0; j < nr; j++)
        lo[j] = hi[j] = _mm256_setzero_ps();
    for (; i + 16 <= i1; i += 16) {
        const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);

        if (pf && (i * esz) % 64 == 0)
#pragma GCC unroll 4
            for (int j = 0; j < nr; j++)
                CPU_PF(base + i * esz + ahead + (size_t)j * row);
#pragma GCC unroll 4
        for (int j = 0; j < nr; j++) {
            __m256 w0, w1;
            dense_load16_avx2(p->data, dt, l0 + (size_t)j * rs * k + i, &w0, &w1);
            lo[j] = _mm256_fmadd_ps(w0, x0, lo[j]);
            hi[j] = _mm256_fmadd_ps(w1, x1, hi[j]);
        }
    }
    if (i < i1) {
        const size_t c = i1 - i;
        _Alignas(32) float xb[16] = {0};
        _Alignas(32) unsigned char wb[64];
        __m256 x0, x1;

        memcpy(xb, x + i, c * sizeof(float));
        x0 = _mm256_load_ps(xb);
        x1 = _mm256_load_ps(xb + 8);
        for (int j = 0; j < nr; j++) {
            __m256 w0, w1;

            memset(wb, 0, sizeof(wb));
            memcpy(wb, base + ((size_t)j * rs * k + i) * esz, c * esz);
            dense_load16_avx2(wb, dt, 0, &w0, &w1);
            lo[j] = _mm256_fmadd_ps(w0, x0, lo[j]);
            hi[j] = _mm256_fmadd_ps(w1, x1, hi[j]);
        }
    }
    for (int j = 0; j < nr; j++) {
        float *yo = y + (size_t)r + (size_t)j * rs;
        const float v = reduce16_avx2(lo[j], hi[j]);
        *yo = kr->acc ? *yo + v : v;
    }
}

/* One row R by NT tokens T0.. a token at a time (x unpacked: the product
 * packs activations for the AVX-512 kernels only): per output
 * dense_row_avx512_body's operations. */
__attribute__((target("avx2,fma,f16c"))) void
nvfp4k_cpu_dense_row_avx2(const cpu_kweight *w, int64_t r, const float *x, size_t t0,
                          const krange *kr, size_t nt, float *y)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n;
    int64_t lr;
    const cpu_dense_part *p = dense_row(w, r, &lr);

    for (size_t t = t0; t < t0 + nt; t++)
        DENSE_BY_DTYPE(p->dtype, dt,
                       dense_rows_avx2_body(w, p, r, lr, 1, x + t * k, kr, y + t * n, dt, 1, 0));
}

/* The dense GEMV on AVX2: nvfp4k_cpu_dense_gemv4_avx512's rows, prefetched
 * the same way (one stream jumping between neighbours, RS = 1), the same
 * bits. */
__attribute__((target("avx2,fma,f16c"))) void
nvfp4k_cpu_dense_gemv4_avx2(const cpu_kweight *w, const cpu_dense_part *p, int64_t r,
                            int64_t lr, size_t rs, const float *x, const krange *kr, float *y)
{
    const int pf = rs == 1;

    DENSE_BY_DTYPE(p->dtype, dt,
                   dense_rows_avx2_body(w, p, r, lr, rs, x, kr, y, dt, DENSE_GEMV_ROWS, pf));
}

/* 8 weights of part P from element I as float32 (one half of
 * dense_load16_avx2's). */
__attribute__((target("avx2,fma,f16c"))) static inline __attribute__((always_inline)) __m256
dense_load8_avx2(const void *data, nvfp4_dtype dt, size_t i)
{
    switch (dt) {
    case NVFP4_DTYPE_F32: return _mm256_loadu_ps((const float *)data + i);
    case NVFP4_DTYPE_BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)data + i))),
            16));
    default: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)data + i)));
    }
}

/* One half (lanes 0-7 from I0, or 8-15 from I0 + 8) of every 16 up to I1
 * of rows L0 and L1 (element offsets in P) by G tokens of X into A0, A1. */
__attribute__((target("avx2,fma,f16c"))) static inline __attribute__((always_inline)) void
dense_half2(const void *data, nvfp4_dtype dt, size_t l0, size_t l1, const float *x, size_t k,
            size_t i0, size_t i1, int g, __m256 *a0, __m256 *a1)
{
#pragma GCC unroll 4
    for (int t = 0; t < g; t++)
        a0[t] = a1[t] = _mm256_setzero_ps();
    for (size_t i = i0; i < i1; i += 16) {
        const __m256 w0 = dense_load8_avx2(data, dt, l0 + i);
        const __m256 w1 = dense_load8_avx2(data, dt, l1 + i);
#pragma GCC unroll 4
        for (int t = 0; t < g; t++) {
            __m256 xv = _mm256_loadu_ps(x + (size_t)t * k + i);
            __asm__("" : "+x"(xv)); /* one load for both rows */
            a0[t] = _mm256_fmadd_ps(w0, xv, a0[t]);
            a1[t] = _mm256_fmadd_ps(w1, xv, a1[t]);
        }
    }
}

/* Rows R and R + RS of part P (local rows LR, LR + RS) by G (1-4) tokens
 * from X (unpacked, token stride k) over whole 16s of stretch KR, a half of
 * every 16 at a time: lanes 0-7 of all G x 2 outputs, then lanes 8-15, and
 * each output's two halves added by reduce16_avx2.  A lane's accumulator
 * takes the same FMAs in the same order as in dense_rows_avx2_body (the
 * halves never meet before the reduction), so every output has the GEMV's
 * bits; but a weight is converted once for G tokens, and 8 accumulators, 2
 * weights and an activation fit AVX2's 16 registers. */
__attribute__((target("avx2,fma,f16c"))) static inline __attribute__((always_inline)) void
dense_row2_group(const cpu_dense_part *p, size_t k, size_t n, int64_t r, int64_t lr, size_t rs,
                 const float *x, const krange *kr, nvfp4_dtype dt, int g, float *y)
{
    const size_t l0 = (size_t)lr * k, l1 = l0 + rs * k, i0 = 16 * kr->b0, i1 = 16 * kr->b1;
    __m256 lo0[4], lo1[4], hi0[4], hi1[4];

    dense_half2(p->data, dt, l0, l1, x, k, i0, i1, g, lo0, lo1);
    dense_half2(p->data, dt, l0, l1, x, k, i0 + 8, i1, g, hi0, hi1);
#pragma GCC unroll 4
    for (int t = 0; t < g; t++) {
        float *yo = y + (size_t)t * n + (size_t)r;
        const float v0 = reduce16_avx2(lo0[t], hi0[t]), v1 = reduce16_avx2(lo1[t], hi1[t]);
        yo[0] = kr->acc ? yo[0] + v0 : v0;
        yo[rs] = kr->acc ? yo[rs] + v1 : v1;
    }
}

__attribute__((target("avx2,fma,f16c"))) static inline __attribute__((always_inline)) void
dense_row2_avx2_body(const cpu_kweight *w, const cpu_dense_part *p, int64_t r, int64_t lr,
                     size_t rs, const float *x, size_t t0, const krange *kr, size_t nt,
                     float *y, nvfp4_dtype dt)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n;

    for (size_t t = t0; t < t0 + nt; t += 4) {
        const float *xt = x + t * k;
        float *yt = y + t * n;

        switch (t0 + nt - t) {
        case 1: dense_row2_group(p, k, n, r, lr, rs, xt, kr, dt, 1, yt); break;
        case 2: dense_row2_group(p, k, n, r, lr, rs, xt, kr, dt, 2, yt); break;
        case 3: dense_row2_group(p, k, n, r, lr, rs, xt, kr, dt, 3, yt); break;
        default: dense_row2_group(p, k, n, r, lr, rs, xt, kr, dt, 4, yt); break;
        }
    }
}

/* Tokens T0 .. T0 + NT - 1 on rows R and R + RS of part P: a batch's
 * weights converted once per 4 tokens instead of once per token (the
 * 128256 x 2048 f16 head by 16 tokens had taken 1.14 times 16 GEMVs).  A
 * stretch ending in a partial 16 (k % 16 != 0) goes a row at a time
 * through nvfp4k_cpu_dense_row_avx2.  The GEMV's bits per output. */
__attribute__((target("avx2,fma,f16c"))) void
nvfp4k_cpu_dense_row2_avx2(const cpu_kweight *w, const cpu_dense_part *p, int64_t r, int64_t lr,
                           size_t rs, const float *x, size_t t0, const krange *kr, size_t nt,
                           float *y)
{
    if (16 * kr->b1 > (size_t)w->d.k) {
        nvfp4k_cpu_dense_row_avx2(w, r, x, t0, kr, nt, y);
        nvfp4k_cpu_dense_row_avx2(w, r + (int64_t)rs, x, t0, kr, nt, y);
        return;
    }
    DENSE_BY_DTYPE(p->dtype, dt, dense_row2_avx2_body(w, p, r, lr, rs, x, t0, kr, nt, y, dt));
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline __m512
dense_load16(const cpu_dense_part *p, size_t i, __mmask16 mk)
{
    switch (p->dtype) {
    case NVFP4_DTYPE_F32: return _mm512_maskz_loadu_ps(mk, (const float *)p->data + i);
    case NVFP4_DTYPE_BF16:
        /* bf16 is the top half of a float32: exact */
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(
                _mm256_maskz_loadu_epi16(mk, (const uint16_t *)p->data + i)),
            16));
    default:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)p->data + i));
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline __attribute__((always_inline)) void
dense_row_avx512_body(const cpu_kweight *w, int64_t r, const float *x, size_t t0,
                      const krange *kr, size_t nt, float *y)
{
    int64_t lr;
    const cpu_dense_part *p = dense_row(w, r, &lr);
    const size_t k = (size_t)w->d.k, base = (size_t)lr * k;
    const size_t i1 = 16 * kr->b1 < k ? 16 * kr->b1 : k;
    __m512 acc[8];

#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++)
        acc[t] = _mm512_setzero_ps();
    for (size_t i = 16 * kr->b0; i < i1; i += 16) {
        __mmask16 mk = i1 - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (i1 - i)) - 1);
        __m512 wv = dense_load16(p, base + i, mk);
#pragma GCC unroll 8
        for (size_t t = 0; t < nt; t++)
            acc[t] = _mm512_fmadd_ps(
                wv,
                kr->packed ? _mm512_loadu_ps(xblock(x, k, t0, t, i / 16, 1))
                           : _mm512_maskz_loadu_ps(mk, x + (t0 + t) * k + i),
                acc[t]);
    }
#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++) {
        float *yo = y + (t0 + t) * (size_t)w->d.n + (size_t)r;
        *yo = kr->acc ? *yo + _mm512_reduce_add_ps(acc[t]) : _mm512_reduce_add_ps(acc[t]);
    }
}

/* NT (1-4) tokens of a small batch, four rows of one dense part RS apart
 * (tiles_range: four sequential streams), tokens T0 .. T0 + NT - 1 of the
 * first token tile (x packed or not).  Per row and token exactly the
 * operations of dense_row_avx512_body (one accumulator, same order, same
 * reduction), so the batch reads each weight once and changes no bit. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline
    __attribute__((always_inline)) void
    dense_spread_body(const cpu_kweight *w, const cpu_dense_part *p, int64_t r, int64_t lr,
                      size_t rs, const float *x, size_t t0, const krange *kr, size_t nt,
                      float *y)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n, l0 = (size_t)lr * k;
    const size_t i1 = 16 * kr->b1 < k ? 16 * kr->b1 : k;
    __m512 acc[4][4];

#pragma GCC unroll 4
    for (size_t t = 0; t < nt; t++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            acc[j][t] = _mm512_setzero_ps();
    for (size_t i = 16 * kr->b0; i < i1; i += 16) {
        const __mmask16 mk =
            i1 - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (i1 - i)) - 1);
        __m512 wv[4];

#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            wv[j] = dense_load16(p, l0 + (size_t)j * rs * k + i, mk);
#pragma GCC unroll 4
        for (size_t t = 0; t < nt; t++) {
            const __m512 xv = kr->packed ? _mm512_loadu_ps(xblock(x, k, 0, t0 + t, i / 16, 1))
                                         : _mm512_maskz_loadu_ps(mk, x + (t0 + t) * k + i);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                acc[j][t] = _mm512_fmadd_ps(wv[j], xv, acc[j][t]);
        }
    }
#pragma GCC unroll 4
    for (size_t t = 0; t < nt; t++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            float *yo = y + (t0 + t) * n + (size_t)r + (size_t)j * rs;
            const float v = _mm512_reduce_add_ps(acc[j][t]);
            *yo = kr->acc ? *yo + v : v;
        }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void
nvfp4k_cpu_dense_spread_avx512(const cpu_kweight *w, const cpu_dense_part *p, int64_t r,
                               int64_t lr, size_t rs, const float *x, size_t t0,
                               const krange *kr, size_t nt, float *y)
{
    switch (nt) {
    case 1: dense_spread_body(w, p, r, lr, rs, x, t0, kr, 1, y); break;
    case 2: dense_spread_body(w, p, r, lr, rs, x, t0, kr, 2, y); break;
    case 3: dense_spread_body(w, p, r, lr, rs, x, t0, kr, 3, y); break;
    default: dense_spread_body(w, p, r, lr, rs, x, t0, kr, 4, y); break;
    }
}

/* Two rows RS apart of one dense part by a tile of NT packed tokens (k %
 * 16 == 0): each activation load feeds two FMAs, and the 2 x NT chains
 * hide the FMA latency one row's NT alone would not (NT < 8).  Per output
 * the operations of dense_row_avx512_body, in the same order. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline
    __attribute__((always_inline)) void
    dense_row2_body(const cpu_kweight *w, const cpu_dense_part *p, int64_t r, int64_t lr,
                    size_t rs, const float *x, size_t t0, const krange *kr, size_t nt, float *y)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n;
    const size_t base0 = (size_t)lr * k, base1 = base0 + rs * k;
    const float *xt = x + (t0 / 8) * (k / 16) * 128;
    __m512 a0[8], a1[8];

#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++)
        a0[t] = a1[t] = _mm512_setzero_ps();
    for (size_t b = kr->b0; b < kr->b1; b++) {
        const __m512 w0 = dense_load16(p, base0 + 16 * b, (__mmask16)0xFFFF);
        const __m512 w1 = dense_load16(p, base1 + 16 * b, (__mmask16)0xFFFF);
#pragma GCC unroll 8
        for (size_t t = 0; t < nt; t++) {
            __m512 xv = _mm512_loadu_ps(xt + b * 128 + 16 * t);
            __asm__("" : "+v"(xv)); /* one load for both rows */
            a0[t] = _mm512_fmadd_ps(w0, xv, a0[t]);
            a1[t] = _mm512_fmadd_ps(w1, xv, a1[t]);
        }
    }
    store2x8(a0, a1, y, t0, n, r, rs, kr->acc, nt);
}

/* One token, four rows of one dense part, unpacked x (m == 1): four FMA
 * chains in flight where one row alone waits on its single accumulator,
 * the dtype's load chosen once per call.  The rows are RS apart.  With
 * RS = 1 (four neighbours, one stream jumping between four rows) the weight
 * stream is prefetched, one line per 64 bytes, the next group of rows' same
 * offset ahead.  With RS a quarter of a tile (tiles_range) each row is a
 * long sequential stream of its own, which the hardware prefetchers follow
 * without help, and software prefetches only got in their way: Zen 4, 1
 * thread, bf16 [128256, 2048] 0.71 -> 1.00 of the ooc probe with none,
 * 0.94-0.99 with T1 0.5-1 KB ahead, 0.75 with 2-16 KB ahead.  Per row
 * exactly the operations of dense_row_avx512_body with nt = 1 (same masks,
 * one accumulator, same order, same reduction), so grouping rows changes
 * no bit. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline
    __attribute__((always_inline)) void
    dense_gemv4_body(const cpu_kweight *w, const cpu_dense_part *p, int64_t r, int64_t lr,
                     size_t rs, const float *x, const krange *kr, float *y, nvfp4_dtype dt,
                     int pf_l2)
{
    const size_t k = (size_t)w->d.k, esz = dt == NVFP4_DTYPE_F32 ? 4 : 2;
    const size_t i1 = 16 * kr->b1 < k ? 16 * kr->b1 : k;
    const size_t row = rs * k * esz, ahead = rs > 1 ? 0 : DENSE_GEMV_ROWS * row;
    const char *base = (const char *)p->data + (size_t)lr * k * esz;
    const cpu_dense_part q = {p->data, dt, p->rows};
    const size_t l0 = (size_t)lr * k;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 16 * kr->b0;

#define DENSE_GEMV4_STEP(mk)                                                         \
    do {                                                                             \
        const __m512 xv = _mm512_maskz_loadu_ps((mk), x + i);                        \
        a0 = _mm512_fmadd_ps(dense_load16(&q, l0 + i, (mk)), xv, a0);                \
        a1 = _mm512_fmadd_ps(dense_load16(&q, l0 + rs * k + i, (mk)), xv, a1);       \
        a2 = _mm512_fmadd_ps(dense_load16(&q, l0 + 2 * rs * k + i, (mk)), xv, a2);   \
        a3 = _mm512_fmadd_ps(dense_load16(&q, l0 + 3 * rs * k + i, (mk)), xv, a3);   \
    } while (0)
    for (; i + 16 <= i1; i += 16) {
        if (ahead && (i * esz) % 64 == 0) {
            const char *pf = base + i * esz + ahead;
            if (pf_l2) {
                _mm_prefetch(pf, _MM_HINT_T1);
                _mm_prefetch(pf + row, _MM_HINT_T1);
                _mm_prefetch(pf + 2 * row, _MM_HINT_T1);
                _mm_prefetch(pf + 3 * row, _MM_HINT_T1);
            } else {
                _mm_prefetch(pf, _MM_HINT_T0);
                _mm_prefetch(pf + row, _MM_HINT_T0);
                _mm_prefetch(pf + 2 * row, _MM_HINT_T0);
                _mm_prefetch(pf + 3 * row, _MM_HINT_T0);
            }
        }
        DENSE_GEMV4_STEP((__mmask16)0xFFFF);
    }
    if (i < i1) {
        const __mmask16 mk = (__mmask16)((1u << (i1 - i)) - 1);
        DENSE_GEMV4_STEP(mk);
    }
#undef DENSE_GEMV4_STEP
    {
        float *yo = y + (size_t)r;
        const float s0 = _mm512_reduce_add_ps(a0), s1 = _mm512_reduce_add_ps(a1),
                    s2 = _mm512_reduce_add_ps(a2), s3 = _mm512_reduce_add_ps(a3);
        yo[0] = kr->acc ? yo[0] + s0 : s0;
        yo[rs] = kr->acc ? yo[rs] + s1 : s1;
        yo[2 * rs] = kr->acc ? yo[2 * rs] + s2 : s2;
        yo[3 * rs] = kr->acc ? yo[3 * rs] + s3 : s3;
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void
nvfp4k_cpu_dense_gemv4_avx512(const cpu_kweight *w, const cpu_dense_part *p, int64_t r,
                              int64_t lr, size_t rs, const float *x, const krange *kr,
                              float *y)
{
    const int l2 = nvfp4k_cpu_pf_l2;

    switch (p->dtype) {
    case NVFP4_DTYPE_F32: dense_gemv4_body(w, p, r, lr, rs, x, kr, y, NVFP4_DTYPE_F32, l2); break;
    case NVFP4_DTYPE_BF16:
        if (l2)
            dense_gemv4_body(w, p, r, lr, rs, x, kr, y, NVFP4_DTYPE_BF16, 1);
        else
            dense_gemv4_body(w, p, r, lr, rs, x, kr, y, NVFP4_DTYPE_BF16, 0);
        break;
    default:
        if (l2)
            dense_gemv4_body(w, p, r, lr, rs, x, kr, y, NVFP4_DTYPE_F16, 1);
        else
            dense_gemv4_body(w, p, r, lr, rs, x, kr, y, NVFP4_DTYPE_F16, 0);
        break;
    }
}

CPU_DISPATCH("avx512f,avx512bw,avx512vl,avx512dq", dense_row_avx512,
             (const cpu_kweight *w, int64_t r, const float *x, size_t t0, const krange *kr,
              size_t nt, float *y),
             w, r, x, t0, kr)
CPU_DISPATCH("avx512f,avx512bw,avx512vl,avx512dq", dense_row2,
             (const cpu_kweight *w, const cpu_dense_part *p, int64_t r, int64_t lr, size_t rs,
              const float *x, size_t t0, const krange *kr, size_t nt, float *y),
             w, p, r, lr, rs, x, t0, kr)
#endif
