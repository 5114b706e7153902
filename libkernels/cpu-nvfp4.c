/* SPDX-License-Identifier: MIT */
/* The CPU backend's NVFP4 row kernels: the portable one, the float kernels
 * of AVX2 and AVX-512 (BLOCK layout: W4A16, and W4A4 at isa=avx512) and the
 * AVX-512 VNNI int8 kernel (CHUNK layout, W4A4) with its activation
 * quantizer; the layouts are described at the top of cpu-linear.c, whose
 * product (tiles_range) calls these kernels a row, or a few, at a time. */
#include "config.h"

#include <string.h>

#include "cpu-internal.h"
#include "cpu-linear.h"

/* Block scales decoded per stretch of a row (floats on the stack). */
#define CPU_SCALE_SEG 512

/* ---- scalar kernel ------------------------------------------------------------- */

/* y[t*n + r] for tokens t0..t0+nt-1 of row r; x in the file order.  The
 * portable path: one block's 16 weights formed in float32 exactly as §2
 * (block scale times global scale, then times the code), then used by
 * every token. */
void nvfp4k_cpu_row_scalar(const cpu_kweight *w, int64_t r, const float *x, size_t t0,
                           const krange *kr, size_t nt, float *y)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n, nb = k / NVFP4_BLOCK;
    const uint8_t *row = w->packed + (size_t)r * k / 2;
    const uint8_t *srow = w->scales + (size_t)r * nb;
    const float s2 = w->d.weight_scale_2;
    float acc[TOK_TILE] = {0};

    for (size_t b = kr->b0; b < kr->b1; b++) {
        const float bs = nvfp4k_cpu_e4m3_table[srow[b]] * s2;
        float wb[16];

        for (unsigned e = 0; e < 16; e++)
            wb[e] = e2m1_f[code_at(w, row, b * 16 + e)] * bs;
        for (size_t t = 0; t < nt; t++) {
            const float *xb = x + (t0 + t) * k + b * 16;
            for (unsigned e = 0; e < 16; e++)
                acc[t] += wb[e] * xb[e];
        }
    }
    for (size_t t = 0; t < nt; t++) {
        float *yo = y + (t0 + t) * n + (size_t)r;
        *yo = kr->acc ? *yo + acc[t] : acc[t];
    }
}
#ifdef CPU_X86
/* ---- AVX2 float kernel (BLOCK layout) ------------------------------------------ */

/* Elements 8h .. 8h+7 of block B of a BLOCK-layout row of NB blocks, lane
 * l holding its code in the low 3 bits and the sign in bit 3 (the bits
 * above belong to other blocks). */
__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) __m256i
block_codes256(const uint8_t *row, size_t nb, size_t b, int h)
{
    uint64_t q;

    if (b < block_nb8(nb))
        return _mm256_srl_epi32(
            _mm256_loadu_si256((const void *)(row + 8 * (b & ~(size_t)7) + 32 * (size_t)h)),
            _mm_cvtsi32_si128((int)(4 * (b & 7))));
    memcpy(&q, row + 8 * b, 8);
    return _mm256_srlv_epi32(_mm256_set1_epi64x((long long)q),
                             h ? _mm256_setr_epi32(16, 16, 20, 20, 24, 24, 28, 28)
                               : _mm256_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12));
}

__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) void
row_avx2_body(const cpu_kweight *w, int64_t r, const float *x, size_t t0, const krange *kr,
              size_t nt,
              float *y)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n, nb = k / NVFP4_BLOCK;
    const uint8_t *row = w->packed + (size_t)r * k / 2;
    const uint8_t *srow = w->scales + (size_t)r * nb;
    const float s2 = w->d.weight_scale_2;
    const __m256 mag = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    const __m256i eight = _mm256_set1_epi32(8);
    /* one accumulator per token whatever nt: the same sums for a row in a
     * GEMV as in a GEMM (batch invariance) */
    const size_t na = 1;
    /* acc[t * na + a]: at most 8 registers, small enough for GCC to keep
     * every one in a register */
    __m256 acc[8];

#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++)
#pragma GCC unroll 4
        for (size_t a = 0; a < na; a++)
            acc[t * na + a] = _mm256_setzero_ps();
    for (size_t b = kr->b0; b < kr->b1; b++) {
        /* §2: block scale times global scale, rounded once */
        const __m256 bs = _mm256_set1_ps(nvfp4k_cpu_e4m3_table[srow[b]] * s2);

        for (int h = 0; h < 2; h++) {
            __m256i nib = block_codes256(row, nb, b, h);
            /* magnitude from the low 3 bits, sign from bit 3 */
            __m256 m = _mm256_permutevar8x32_ps(mag, nib);
            __m256i sg = _mm256_slli_epi32(_mm256_and_si256(nib, eight), 28);
            __m256 wv = _mm256_mul_ps(_mm256_xor_ps(m, _mm256_castsi256_ps(sg)), bs);
#pragma GCC unroll 8
            for (size_t t = 0; t < nt; t++)
                acc[t * na + h % na] = _mm256_fmadd_ps(
                    wv, _mm256_loadu_ps(xblock(x, k, t0, t, b, kr->packed) + 8 * (size_t)h),
                    acc[t * na + h % na]);
        }
    }
#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++) {
        __m256 v = na == 2 ? _mm256_add_ps(acc[2 * t], acc[2 * t + 1]) : acc[t];
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        float *yo = y + (t0 + t) * n + (size_t)r;
        *yo = kr->acc ? *yo + _mm_cvtss_f32(s) : _mm_cvtss_f32(s);
    }
}

_Static_assert(GEMV_ROWS == 4, "nvfp4k_cpu_gemv4_avx2 names its four rows");
/* The AVX2 float GEMV (one token; W4A16, and W4A4 where the int8 kernels
 * do not run): four rows RS apart, whose four accumulator chains overlap
 * where row_avx2_body's one chain per row waits on its multiply-adds (3.2
 * GB/s, 0.15 of the read probe, on Zen 3).  A half block's 8 weights are
 * a vpermps of the weight's table row for its scale byte (wlut: E2M1
 * value times the block scale, rounded once as row_avx2_body's product of
 * the signed magnitude and the scale is) with the sign bit xored in, so per
 * row the same values, multiply-adds and reduction as row_avx2_body with
 * nt = 1: the same bits at every m. */
__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) __m256
lut_half_avx2(const float *lrow, __m256i nib)
{
    /* the magnitude's product for code c = nib & 7 from the table's
     * entries 8-15 (at isa=avx2: entry c's bits with c xored into bits
     * 28-30), then the nibble moved to bits 28-31 xored in: c's bits
     * cancel and the sign (bit 3) lands in bit 31, -(m * s) being (-m) * s
     * exactly; one vpermps where a blend of both halves took two, and no
     * mask of the shifted nibble */
    return _mm256_xor_ps(_mm256_permutevar8x32_ps(_mm256_load_ps(lrow + 8), nib),
                         _mm256_castsi256_ps(_mm256_slli_epi32(nib, 28)));
}

__attribute__((target("avx2,fma"))) void
nvfp4k_cpu_gemv4_avx2(const cpu_kweight *w, int64_t r, size_t rs, const float *x,
                      const krange *kr, float *y)
{
    const size_t k = (size_t)w->d.k, nb = k / NVFP4_BLOCK, rb = rs * (k / 2), sb = rs * nb;
    const size_t pfd = rs > 1 ? CPU_PREFETCH : CPU_PREFETCH4;
    const float *lut = w->wlut;
    const uint8_t *row = w->packed + (size_t)r * (k / 2), *srow = w->scales + (size_t)r * nb;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    size_t b = kr->b0;

/* Block B of row I, its halves' codes C0, C1 (shifted to the block's
 * nibble) */
#define GEMV4_AVX2_STEP(I, C0, C1, B)                                                      \
    do {                                                                                   \
        const float *lrow = lut + 16 * (size_t)srow[(I) * sb + (B)];                       \
        acc##I = _mm256_fmadd_ps(lut_half_avx2(lrow, (C0)), x0, acc##I);                   \
        acc##I = _mm256_fmadd_ps(lut_half_avx2(lrow, (C1)), x1, acc##I);                   \
    } while (0)
    /* a group of 8 blocks at a time: the rows' 64 code bytes read (from
     * L1 after the first) shifted to each block's nibble */
    for (; b + 8 <= kr->b1 && b % 8 == 0 && b + 8 <= block_nb8(nb); b += 8) {
        const __m256i *g0 = (const __m256i *)(row + 8 * b), *g1 = (const __m256i *)(row + rb + 8 * b),
                      *g2 = (const __m256i *)(row + 2 * rb + 8 * b),
                      *g3 = (const __m256i *)(row + 3 * rb + 8 * b);

        for (size_t i = 0; i < GEMV_ROWS; i++)
            CPU_PF(row + i * rb + 8 * b + pfd);
#pragma GCC unroll 8
        for (unsigned u = 0; u < 8; u++) {
            const __m256 x0 = _mm256_loadu_ps(x + 16 * (b + u)),
                         x1 = _mm256_loadu_ps(x + 16 * (b + u) + 8);
            const __m128i sh = _mm_cvtsi32_si128((int)(4 * u));
            GEMV4_AVX2_STEP(0, _mm256_srl_epi32(_mm256_loadu_si256(g0), sh),
                            _mm256_srl_epi32(_mm256_loadu_si256(g0 + 1), sh), b + u);
            GEMV4_AVX2_STEP(1, _mm256_srl_epi32(_mm256_loadu_si256(g1), sh),
                            _mm256_srl_epi32(_mm256_loadu_si256(g1 + 1), sh), b + u);
            GEMV4_AVX2_STEP(2, _mm256_srl_epi32(_mm256_loadu_si256(g2), sh),
                            _mm256_srl_epi32(_mm256_loadu_si256(g2 + 1), sh), b + u);
            GEMV4_AVX2_STEP(3, _mm256_srl_epi32(_mm256_loadu_si256(g3), sh),
                            _mm256_srl_epi32(_mm256_loadu_si256(g3 + 1), sh), b + u);
        }
    }
    for (; b < kr->b1; b++) {
        const __m256 x0 = _mm256_loadu_ps(x + 16 * b), x1 = _mm256_loadu_ps(x + 16 * b + 8);
        GEMV4_AVX2_STEP(0, block_codes256(row, nb, b, 0), block_codes256(row, nb, b, 1), b);
        GEMV4_AVX2_STEP(1, block_codes256(row + rb, nb, b, 0),
                        block_codes256(row + rb, nb, b, 1), b);
        GEMV4_AVX2_STEP(2, block_codes256(row + 2 * rb, nb, b, 0),
                        block_codes256(row + 2 * rb, nb, b, 1), b);
        GEMV4_AVX2_STEP(3, block_codes256(row + 3 * rb, nb, b, 0),
                        block_codes256(row + 3 * rb, nb, b, 1), b);
    }
#undef GEMV4_AVX2_STEP
    {
        const __m256 a[GEMV_ROWS] = {acc0, acc1, acc2, acc3};
        for (int i = 0; i < GEMV_ROWS; i++) {
            /* row_avx2_body's reduction */
            __m128 s = _mm_add_ps(_mm256_castps256_ps128(a[i]), _mm256_extractf128_ps(a[i], 1));
            float *yo = y + (size_t)r + (size_t)i * rs;
            s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            s = _mm_add_ss(s, _mm_movehdup_ps(s));
            *yo = kr->acc ? *yo + _mm_cvtss_f32(s) : _mm_cvtss_f32(s);
        }
    }
}

/* ---- AVX-512 float kernel (BLOCK layout) ------------------------------------------ */

/* Block B of a BLOCK-layout row of NB blocks: lane l holds element l's
 * code in its low 4 bits, the bits above belonging to other blocks (which
 * vpermps ignores).  For any B; the kernels shift whole groups in place. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline __attribute__((always_inline)) __m512i
block_codes512(const uint8_t *row, size_t nb, size_t b)
{
    uint64_t q;

    if (b < block_nb8(nb))
        return _mm512_srl_epi32(_mm512_loadu_si512((const void *)(row + 8 * (b & ~(size_t)7))),
                                _mm_cvtsi32_si128((int)(4 * (b & 7))));
    memcpy(&q, row + 8 * b, 8);
    return _mm512_srlv_epi32(
        _mm512_set1_epi64((long long)q),
        _mm512_set_epi32(28, 28, 24, 24, 20, 20, 16, 16, 12, 12, 8, 8, 4, 4, 0, 0));
}

/* Whether blocks B .. B+7 of a row of NB blocks are one group. */
static inline int block_group(size_t b, size_t nb)
{
    return b % 8 == 0 && b + 8 <= block_nb8(nb);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline __attribute__((always_inline)) void
row_avx512_body(const cpu_kweight *w, int64_t r, const float *x, size_t t0, const krange *kr,
                size_t nt,
                float *y)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n, nb = k / NVFP4_BLOCK;
    const uint8_t *row = w->packed + (size_t)r * k / 2;
    const uint8_t *srow = w->scales + (size_t)r * nb;
    const __m512 s2 = _mm512_set1_ps(w->d.weight_scale_2);
    const __m512 lut = _mm512_loadu_ps(e2m1_f);
    /* one accumulator per token whatever nt: the same sums for a row in a
     * GEMV as in a GEMM (batch invariance) */
    const size_t na = 1;
    /* acc[t * na + a]: at most 8 registers, small enough for GCC to keep
     * every one in a register */
    __m512 acc[8];
    /* block scales of a stretch of the row, decoded 16 at a time and stored
     * well before they are read back as broadcasts (a load right behind a
     * wide store of the same line would stall on store forwarding) */
    float bsa[CPU_SCALE_SEG];

#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++)
#pragma GCC unroll 4
        for (size_t a = 0; a < na; a++)
            acc[t * na + a] = _mm512_setzero_ps();
    for (size_t seg = kr->b0; seg < kr->b1; seg += CPU_SCALE_SEG) {
        const size_t cnt = kr->b1 - seg < CPU_SCALE_SEG ? kr->b1 - seg : CPU_SCALE_SEG;

        for (size_t g = 0; g < cnt; g += 16)
            _mm512_storeu_ps(bsa + g, scalesn_avx512(srow + seg + g, cnt - g, s2));
        for (size_t j = 0; j < cnt; j += 8) {
            const size_t bg = seg + j;
            const int whole = block_group(bg, nb);
            const __m512i grp =
                whole ? _mm512_loadu_si512((const void *)(row + 8 * bg)) : _mm512_setzero_si512();

            /* one line per 8 blocks; see CPU_PREFETCH */
            CPU_PF(row + 8 * bg + CPU_PREFETCH);
#pragma GCC unroll 8
            for (size_t u = 0; u < 8; u++) {
                const size_t b = bg + u;
                __m512 wv;

                if (j + u >= cnt)
                    break;
                /* code times block scale is §2's float32 weight exactly */
                wv = _mm512_mul_ps(
                    _mm512_permutexvar_ps(whole ? (u ? _mm512_srli_epi32(grp, 4 * (unsigned)u)
                                                     : grp)
                                                : block_codes512(row, nb, b),
                                          lut),
                    _mm512_set1_ps(bsa[j + u]));
#pragma GCC unroll 8
                for (size_t t = 0; t < nt; t++)
                    acc[t * na + u % na] = _mm512_fmadd_ps(
                        wv, _mm512_loadu_ps(xblock(x, k, t0, t, b, kr->packed)),
                        acc[t * na + u % na]);
            }
        }
    }
#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++) {
        __m512 v = acc[t];
        if (na == 4)
            v = _mm512_add_ps(_mm512_add_ps(acc[4 * t], acc[4 * t + 1]),
                              _mm512_add_ps(acc[4 * t + 2], acc[4 * t + 3]));
        float *yo = y + (t0 + t) * n + (size_t)r;
        *yo = kr->acc ? *yo + _mm512_reduce_add_ps(v) : _mm512_reduce_add_ps(v);
    }
}

_Static_assert(GEMV_ROWS == 4, "nvfp4k_cpu_gemv_lut_avx512 names its four rows");
/* The float GEMV (W4A16; W4A4 below VNNI) by the weight's table of §2
 * products (wlut): a block's 16 weights are one vpermps of the table row of
 * its scale byte, so no multiply or scale decoding is left per block, only
 * the shift that brings the block's codes down in its group (see BLOCK at
 * the top of cpu-linear.c).  The entry is the product the other float
 * kernels form, E2M1 value times the block scale rounded once with the
 * global scale, so the bits are those of row_avx512_body at every m. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void
nvfp4k_cpu_gemv_lut_avx512(const cpu_kweight *w, int64_t r, size_t rs, const float *x,
                           const krange *kr, float *y)
{
    /* rb, sb: the byte strides between the four rows' codes and scales */
    const size_t k = (size_t)w->d.k, nb = k / NVFP4_BLOCK, rb = rs * (k / 2), sb = rs * nb;
    const size_t pfd = rs > 1 ? CPU_PREFETCH : CPU_PREFETCH4;
    const float *lut = w->wlut;
    /* the four rows from one base and stride, their accumulators and
     * codes as named variables: as arrays GCC kept them on the stack,
     * storing and reloading them at every group */
    const uint8_t *row = w->packed + (size_t)r * (k / 2), *srow = w->scales + (size_t)r * nb;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    size_t b = kr->b0;

/* Block B of row I (codes G, already shifted to the block's nibble) */
#define GEMV_LUT_STEP(I, G, B)                                                                     \
    acc##I = _mm512_fmadd_ps(                                                                      \
        _mm512_permutexvar_ps(G, _mm512_load_ps(lut + 16 * (size_t)srow[(I) * sb + (B)])), xv,    \
        acc##I)
    /* a group at a time: one 64-byte load of each row's codes and a byte of
     * its scales per block */
    for (; b + 8 <= kr->b1 && block_group(b, nb); b += 8) {
        __m512i g0 = _mm512_loadu_si512((const void *)(row + 8 * b));
        __m512i g1 = _mm512_loadu_si512((const void *)(row + rb + 8 * b));
        __m512i g2 = _mm512_loadu_si512((const void *)(row + 2 * rb + 8 * b));
        __m512i g3 = _mm512_loadu_si512((const void *)(row + 3 * rb + 8 * b));

        /* in registers (GCC spilled one and reread another for each shift) */
        __asm__("" : "+v"(g0), "+v"(g1), "+v"(g2), "+v"(g3));
        for (size_t i = 0; i < GEMV_ROWS; i++)
            CPU_PF(row + i * rb + 8 * b + pfd);
#pragma GCC unroll 8
        for (unsigned p = 0; p < 8; p++) {
            const __m512 xv = _mm512_loadu_ps(x + 16 * (b + p));
            GEMV_LUT_STEP(0, p ? _mm512_srli_epi32(g0, 4 * p) : g0, b + p);
            GEMV_LUT_STEP(1, p ? _mm512_srli_epi32(g1, 4 * p) : g1, b + p);
            GEMV_LUT_STEP(2, p ? _mm512_srli_epi32(g2, 4 * p) : g2, b + p);
            GEMV_LUT_STEP(3, p ? _mm512_srli_epi32(g3, 4 * p) : g3, b + p);
        }
    }
    for (; b < kr->b1; b++) {
        const __m512 xv = _mm512_loadu_ps(x + 16 * b);
        GEMV_LUT_STEP(0, block_codes512(row, nb, b), b);
        GEMV_LUT_STEP(1, block_codes512(row + rb, nb, b), b);
        GEMV_LUT_STEP(2, block_codes512(row + 2 * rb, nb, b), b);
        GEMV_LUT_STEP(3, block_codes512(row + 3 * rb, nb, b), b);
    }
#undef GEMV_LUT_STEP
    {
        const float v[GEMV_ROWS] = {_mm512_reduce_add_ps(acc0), _mm512_reduce_add_ps(acc1),
                                    _mm512_reduce_add_ps(acc2), _mm512_reduce_add_ps(acc3)};
        for (int i = 0; i < GEMV_ROWS; i++) {
            float *yo = y + (size_t)r + (size_t)i * rs;
            *yo = kr->acc ? *yo + v[i] : v[i];
        }
    }
}

/* Two rows RS apart by a tile of NT packed tokens: each activation load
 * feeds two FMAs, so the loop is bound by the FMA units rather than by
 * loads; with fewer than 8 tokens (decode batches of 2-7 sequences, a
 * GEMM's last tile) the two rows also double the independent accumulator
 * chains that one row's NT alone leaves latency-bound.  Every output sees exactly the
 * operations of row_avx512_body with the same nt (same order, same
 * roundings), so pairing rows changes no bit. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline
    __attribute__((always_inline)) void
row2_avx512_body(const cpu_kweight *w, int64_t r, size_t rs, const float *x, size_t t0,
                 const krange *kr, size_t nt, float *y)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n, nb = k / NVFP4_BLOCK;
    const uint8_t *row0 = w->packed + (size_t)r * k / 2, *row1 = row0 + rs * k / 2;
    const uint8_t *srow0 = w->scales + (size_t)r * nb, *srow1 = srow0 + rs * nb;
    const float *lut = w->wlut;
    const float *xt = x + (t0 / 8) * nb * 128;
    __m512 a0[8], a1[8];
    size_t b = kr->b0;

/* Block B with the two rows' weights W0, W1: every token of the tile. */
#define ROW2_STEP(B, W0, W1)                                                                       \
    do {                                                                                           \
        const float *xb_ = xt + (B) * 128;                                                         \
        _Pragma("GCC unroll 8") for (size_t t = 0; t < nt; t++)                                    \
        {                                                                                          \
            __m512 xv = _mm512_loadu_ps(xb_ + 16 * t);                                             \
            /* one load for both rows: keep GCC from folding it into each                          \
             * FMA as a memory operand (twice the loads) */                                        \
            __asm__("" : "+v"(xv));                                                                \
            a0[t] = _mm512_fmadd_ps(W0, xv, a0[t]);                                                \
            a1[t] = _mm512_fmadd_ps(W1, xv, a1[t]);                                                \
        }                                                                                          \
    } while (0)

#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++)
        a0[t] = a1[t] = _mm512_setzero_ps();
    /* the weight's table of §2 products (wlut): a block's 16 weights are
     * the table row of its scale byte permuted by its codes, the same
     * float32 products as code times decoded scale */
    for (; b + 8 <= kr->b1 && block_group(b, nb); b += 8) {
        const __m512i g0 = _mm512_loadu_si512((const void *)(row0 + 8 * b));
        const __m512i g1 = _mm512_loadu_si512((const void *)(row1 + 8 * b));
#pragma GCC unroll 8
        for (unsigned u = 0; u < 8; u++) {
            const __m512 w0 = _mm512_permutexvar_ps(u ? _mm512_srli_epi32(g0, 4 * u) : g0,
                                                    _mm512_load_ps(lut + 16 * (size_t)srow0[b + u]));
            const __m512 w1 = _mm512_permutexvar_ps(u ? _mm512_srli_epi32(g1, 4 * u) : g1,
                                                    _mm512_load_ps(lut + 16 * (size_t)srow1[b + u]));
            ROW2_STEP(b + u, w0, w1);
        }
    }
    for (; b < kr->b1; b++) {
        const __m512 w0 = _mm512_permutexvar_ps(block_codes512(row0, nb, b),
                                                _mm512_load_ps(lut + 16 * (size_t)srow0[b]));
        const __m512 w1 = _mm512_permutexvar_ps(block_codes512(row1, nb, b),
                                                _mm512_load_ps(lut + 16 * (size_t)srow1[b]));
        ROW2_STEP(b, w0, w1);
    }
#undef ROW2_STEP
    store2x8(a0, a1, y, t0, n, r, rs, kr->acc, nt);
}

/* ---- AVX-512 VNNI int8 kernel (CHUNK layout, W4A4) ---------------------------- */


/* The VNNI kernels' vpshufb table: unsigned 2*E2M1 + 12 per nibble, in
 * every 128-bit lane. */
__attribute__((target("avx512f"))) static inline __m512i vnni_code_lut(void)
{
    return _mm512_broadcast_i32x4(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) static inline __attribute__((always_inline)) void
row_vnni_body(const cpu_kweight *w, int64_t r, const act_q8 *a, size_t nch, size_t t0,
              const krange *kr, size_t nt, float *y)
{
    const int64_t k = w->d.k, n = w->d.n;
    const size_t nb = (size_t)k / NVFP4_BLOCK;
    const uint8_t *row = w->packed + (size_t)r * (size_t)k / 2;
    const uint8_t *srow = w->scales + (size_t)r * nb;
    const __m512 s2 = _mm512_set1_ps(w->d.weight_scale_2);
    const __m512i lut = vnni_code_lut();
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    __m512 acc[8];

#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++)
        acc[t] = _mm512_setzero_ps();
    for (size_t ch = kr->b0; ch < kr->b1; ch++) {
        __m512i p0, p1;
        __m512 ws;
        chunk_load(row, srow, nb, ch, s2, &p0, &p1, &ws);
        __m512i w0 = _mm512_shuffle_epi8(lut, _mm512_and_si512(p0, lo4));
        __m512i w1 = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(p0, 4), lo4));
        __m512i w2 = _mm512_shuffle_epi8(lut, _mm512_and_si512(p1, lo4));
        __m512i w3 = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(p1, 4), lo4));

#pragma GCC unroll 8
        for (size_t t = 0; t < nt; t++) {
            const size_t tc = (t0 + t) * nch + ch;
            const int8_t *xq = a->q + tc * CPU_CHUNK;
            /* exact: the 16 products of one block per lane, from minus the
             * offset; one chain of four (the chunks' chains are independent,
             * so they overlap) */
            __m512i sa = _mm512_dpbusd_epi32(
                _mm512_loadu_si512((const void *)(a->corr + tc * 16)), w0,
                _mm512_loadu_si512((const void *)xq));
            sa = _mm512_dpbusd_epi32(sa, w1, _mm512_loadu_si512((const void *)(xq + 64)));
            sa = _mm512_dpbusd_epi32(sa, w2, _mm512_loadu_si512((const void *)(xq + 128)));
            sa = _mm512_dpbusd_epi32(sa, w3, _mm512_loadu_si512((const void *)(xq + 192)));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sa),
                                     _mm512_mul_ps(ws, _mm512_loadu_ps(a->xs + tc * 16)),
                                     acc[t]);
        }
    }
#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++) {
        float *yo = y + (t0 + t) * (size_t)n + (size_t)r;
        *yo = kr->acc ? *yo + _mm512_reduce_add_ps(acc[t]) : _mm512_reduce_add_ps(acc[t]);
    }
}

/* The tail chunk TCH (exactly 4 blocks) of four rows RS apart at once:
 * lanes 4i..4i+3 hold row i's blocks 0-3 (its two 16-byte planes and 4
 * scales in 128-bit lane i), decoded into the four weight vectors WV of
 * the chunk code and the scales WS.  A tail chunk there costs a whole
 * chunk's operations for each row (k = 576: 3 chunks of operations for
 * 2.25 of data); here one chunk's for four rows. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) static inline
    __attribute__((always_inline)) void
    tail4_rows_vnni(const cpu_kweight *w, int64_t r, size_t rs, size_t tch, size_t pfd,
                    __m512i lut, __m512i lo4, __m512 s2, __m512i wv[4], __m512 *ws)
{
    const size_t k = (size_t)w->d.k, nb = k / NVFP4_BLOCK;
    __m512i p0 = _mm512_setzero_si512(), p1 = p0;
    __m128i sc = _mm_setzero_si128();

/* Row I's planes and scales into 128-bit lane I (I a literal: the
 * intrinsics take immediates, which a loop index is not at -O0 or for
 * clang) */
#define TAIL4_ROW(I)                                                                               \
    do {                                                                                           \
        const size_t ri_ = (size_t)r + (size_t)(I) * rs;                                           \
        const uint8_t *cb_ = w->packed + ri_ * k / 2 + tch * CPU_CHUNK_BYTES;                      \
        uint32_t s4_;                                                                              \
        p0 = _mm512_inserti32x4(p0, _mm_loadu_si128((const __m128i *)cb_), I);                     \
        p1 = _mm512_inserti32x4(p1, _mm_loadu_si128((const __m128i *)(cb_ + 16)), I);              \
        memcpy(&s4_, w->scales + ri_ * nb + tch * CPU_CHUNK_BLOCKS, 4);                            \
        sc = _mm_insert_epi32(sc, (int)s4_, I);                                                    \
        CPU_PF(cb_ + pfd);                                                                         \
        CPU_PF(cb_ + pfd + 64);                                                                    \
    } while (0)
    TAIL4_ROW(0);
    TAIL4_ROW(1);
    TAIL4_ROW(2);
    TAIL4_ROW(3);
#undef TAIL4_ROW
    wv[0] = _mm512_shuffle_epi8(lut, _mm512_and_si512(p0, lo4));
    wv[1] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(p0, 4), lo4));
    wv[2] = _mm512_shuffle_epi8(lut, _mm512_and_si512(p1, lo4));
    wv[3] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(p1, 4), lo4));
    *ws = scales_bytes_avx512(sc, s2);
}

/* One token's products with tail4_rows_vnni's four rows, its chunk TC of
 * the activations (16 bytes of each plane, 4 offsets and 4 factors) in
 * every 128-bit lane: each lane sees the operations lane j of row i sees
 * in the chunk code (the integer sum exact in any order, then the same
 * convert and product), *TP the converted sums and *TF the factors;
 * tail4_fma adds them. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) static inline
    __attribute__((always_inline)) void
    tail4_token_vnni(const act_q8 *a, size_t tc, const __m512i wv[4], __m512 ws, __m512 *tp,
                     __m512 *tf)
{
    const int8_t *xq = a->q + tc * CPU_CHUNK;
    __m512i sa = _mm512_dpbusd_epi32(
        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(a->corr + tc * 16))), wv[0],
        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)xq)));
    __m512i sb = _mm512_dpbusd_epi32(
        _mm512_setzero_si512(), wv[1],
        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(xq + 64))));
    sa = _mm512_dpbusd_epi32(sa, wv[2],
                             _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(xq + 128))));
    sb = _mm512_dpbusd_epi32(sb, wv[3],
                             _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(xq + 192))));
    *tp = _mm512_cvtepi32_ps(_mm512_add_epi32(sa, sb));
    *tf = _mm512_mul_ps(ws, _mm512_broadcast_f32x4(_mm_loadu_ps(a->xs + tc * 16)));
}

/* A row's share of tail4_token_vnni's lanes (its 128-bit lane of the sums
 * TP and factors TF) added to its accumulator ACC: lanes 0-3 by the fma
 * nvfp4k_cpu_gemv4_vnni's tail chunk made (lanes 4-15, to which that chunk
 * added exact zeros, are kept). */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline
    __attribute__((always_inline)) __m512
    tail4_fma(__m512 acc, __m128 tp, __m128 tf)
{
    return _mm512_mask3_fmadd_ps(_mm512_castps128_ps512(tp), _mm512_castps128_ps512(tf), acc,
                                 (__mmask16)0x000F);
}

/* One token, four rows of the VNNI kernel, RS apart: the activation codes
 * loaded once per chunk feed four rows.  Per row exactly the operations of
 * row_vnni_body with nt = 1, so grouping rows changes no bit.  With RS = 1
 * (neighbours: one stream jumping between four rows) each row is
 * prefetched at the 4-row distance, with RS a quarter of a tile (four
 * sequential streams) at the single stream's.  TAIL4: KR ends in a tail
 * chunk of 4 blocks (range_ends_in4), taken by tail4_rows_vnni before the
 * whole chunks (its products off the chain at the end of the rows) and
 * added after them. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) static inline
    __attribute__((always_inline)) void
    gemv4_vnni_rows(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a,
                    const krange *kr, float *y, int tail4)
{
    const size_t k = (size_t)w->d.k, nb = k / NVFP4_BLOCK;
    const __m512 s2 = _mm512_set1_ps(w->d.weight_scale_2);
    const __m512i lut = vnni_code_lut();
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    const size_t pfd = rs > 1 ? CPU_PREFETCH : CPU_PREFETCH4;
    const size_t b1 = tail4 ? kr->b1 - 1 : kr->b1;
    __m512 acc[GEMV_ROWS], tp = _mm512_setzero_ps(), tf = tp;

    for (int i = 0; i < GEMV_ROWS; i++)
        acc[i] = _mm512_setzero_ps();
    if (tail4) {
        __m512i wv[4];
        __m512 ws;
        tail4_rows_vnni(w, r, rs, b1, pfd, lut, lo4, s2, wv, &ws);
        tail4_token_vnni(a, b1, wv, ws, &tp, &tf);
    }
    for (size_t ch = kr->b0; ch < b1; ch++) {
        const int8_t *xq = a->q + ch * CPU_CHUNK;
        const __m512i x0 = _mm512_loadu_si512((const void *)xq);
        const __m512i x1 = _mm512_loadu_si512((const void *)(xq + 64));
        const __m512i x2 = _mm512_loadu_si512((const void *)(xq + 128));
        const __m512i x3 = _mm512_loadu_si512((const void *)(xq + 192));
        const __m512i corr = _mm512_loadu_si512((const void *)(a->corr + ch * 16));
        const __m512 xs = _mm512_loadu_ps(a->xs + ch * 16);

#pragma GCC unroll 4
        for (int i = 0; i < GEMV_ROWS; i++) {
            __m512i p0, p1, sa, sb;
            __m512 ws;

            const size_t ri = (size_t)r + (size_t)i * rs;

            chunk_load_pf(w->packed + ri * k / 2, w->scales + ri * nb, nb, ch, s2, &p0, &p1, &ws,
                          pfd);
            sa = _mm512_dpbusd_epi32(corr,
                                     _mm512_shuffle_epi8(lut, _mm512_and_si512(p0, lo4)), x0);
            sb = _mm512_dpbusd_epi32(
                _mm512_setzero_si512(),
                _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(p0, 4), lo4)), x1);
            sa = _mm512_dpbusd_epi32(sa, _mm512_shuffle_epi8(lut, _mm512_and_si512(p1, lo4)),
                                     x2);
            sb = _mm512_dpbusd_epi32(
                sb, _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(p1, 4), lo4)),
                x3);
            sa = _mm512_add_epi32(sa, sb);
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sa), _mm512_mul_ps(ws, xs), acc[i]);
        }
    }
    if (tail4) {
        acc[0] = tail4_fma(acc[0], _mm512_castps512_ps128(tp), _mm512_castps512_ps128(tf));
        acc[1] = tail4_fma(acc[1], _mm512_extractf32x4_ps(tp, 1), _mm512_extractf32x4_ps(tf, 1));
        acc[2] = tail4_fma(acc[2], _mm512_extractf32x4_ps(tp, 2), _mm512_extractf32x4_ps(tf, 2));
        acc[3] = tail4_fma(acc[3], _mm512_extractf32x4_ps(tp, 3), _mm512_extractf32x4_ps(tf, 3));
    }
    for (int i = 0; i < GEMV_ROWS; i++) {
        float *yo = y + (size_t)r + (size_t)i * rs;
        *yo = kr->acc ? *yo + _mm512_reduce_add_ps(acc[i]) : _mm512_reduce_add_ps(acc[i]);
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) void
nvfp4k_cpu_gemv4_vnni(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a, size_t nch,
                      const krange *kr, float *y)
{
    (void)nch;
    gemv4_vnni_rows(w, r, rs, a, kr, y, 0);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) void
nvfp4k_cpu_gemv4t4_vnni(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a, size_t nch,
                        const krange *kr, float *y)
{
    (void)nch;
    gemv4_vnni_rows(w, r, rs, a, kr, y, 1);
}

/* Two rows RS apart by NT tokens: the activation codes, offsets and
 * scales loaded once feed both rows, and below 8 tokens the two rows
 * double the chains in flight.  Per output exactly the operations of
 * row_vnni_body (same order), so pairing rows changes no bit.  TL: KR
 * ends in a tail chunk of 4 blocks whose products nvfp4k_cpu_tail4_vnni
 * formed (the two rows in its 128-bit lanes LANE and LANE + 1), added
 * by tail4_fma after the whole chunks. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) static inline
    __attribute__((always_inline)) void
    row2_vnni_rows(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a, size_t nch,
                   size_t t0, const krange *kr, const cpu_tail4 *tl, unsigned lane, size_t nt,
                   float *y)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n, nb = k / NVFP4_BLOCK;
    const size_t r1 = (size_t)r + rs;
    const uint8_t *row[2] = {w->packed + (size_t)r * k / 2, w->packed + r1 * k / 2};
    const uint8_t *srow[2] = {w->scales + (size_t)r * nb, w->scales + r1 * nb};
    const __m512 s2 = _mm512_set1_ps(w->d.weight_scale_2);
    const __m512i lut = vnni_code_lut();
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    __m512 acc[2][8];

#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++)
        acc[0][t] = acc[1][t] = _mm512_setzero_ps();
    for (size_t ch = kr->b0; ch < (tl ? kr->b1 - 1 : kr->b1); ch++) {
        __m512i wv[2][4];
        __m512 ws[2];

#pragma GCC unroll 2
        for (int i = 0; i < 2; i++) {
            __m512i p0, p1;
            chunk_load(row[i], srow[i], nb, ch, s2, &p0, &p1, &ws[i]);
            wv[i][0] = _mm512_shuffle_epi8(lut, _mm512_and_si512(p0, lo4));
            wv[i][1] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(p0, 4), lo4));
            wv[i][2] = _mm512_shuffle_epi8(lut, _mm512_and_si512(p1, lo4));
            wv[i][3] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(p1, 4), lo4));
        }
#pragma GCC unroll 8
        for (size_t t = 0; t < nt; t++) {
            const size_t tc = (t0 + t) * nch + ch;
            const int8_t *xq = a->q + tc * CPU_CHUNK;
            /* memory operands: 16 accumulators and 8 weight registers leave
             * no room to hold the activations.  One chain of four per row
             * and token, from minus the offset (exact integers: the same
             * sum as row_vnni_body's two chains): 16 chains in flight hide
             * the latency, and no add or subtract is left per block. */
#pragma GCC unroll 2
            for (int i = 0; i < 2; i++) {
                __m512i sa = _mm512_dpbusd_epi32(
                    _mm512_loadu_si512((const void *)(a->corr + tc * 16)), wv[i][0],
                    _mm512_loadu_si512((const void *)xq));
                sa = _mm512_dpbusd_epi32(sa, wv[i][1],
                                         _mm512_loadu_si512((const void *)(xq + 64)));
                sa = _mm512_dpbusd_epi32(sa, wv[i][2],
                                         _mm512_loadu_si512((const void *)(xq + 128)));
                sa = _mm512_dpbusd_epi32(sa, wv[i][3],
                                         _mm512_loadu_si512((const void *)(xq + 192)));
                acc[i][t] = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(sa),
                    _mm512_mul_ps(ws[i], _mm512_loadu_ps(a->xs + tc * 16)), acc[i][t]);
            }
        }
    }
    if (tl)
#pragma GCC unroll 8
        for (size_t t = 0; t < nt; t++) {
            acc[0][t] = tail4_fma(acc[0][t], _mm_load_ps(tl[t].tp + 4 * lane),
                                  _mm_load_ps(tl[t].tf + 4 * lane));
            acc[1][t] = tail4_fma(acc[1][t], _mm_load_ps(tl[t].tp + 4 * lane + 4),
                                  _mm_load_ps(tl[t].tf + 4 * lane + 4));
        }
#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++) {
        float *yo = y + (t0 + t) * n + (size_t)r;
        float v0 = _mm512_reduce_add_ps(acc[0][t]), v1 = _mm512_reduce_add_ps(acc[1][t]);
        yo[0] = kr->acc ? yo[0] + v0 : v0;
        yo[rs] = kr->acc ? yo[rs] + v1 : v1;
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) static inline
    __attribute__((always_inline)) void
    row2_vnni_body(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a, size_t nch,
                   size_t t0, const krange *kr, size_t nt, float *y)
{
    row2_vnni_rows(w, r, rs, a, nch, t0, kr, NULL, 0, nt, y);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) static inline
    __attribute__((always_inline)) void
    row2t4_vnni_body(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a, size_t nch,
                     size_t t0, const krange *kr, const cpu_tail4 *tl, unsigned lane, size_t nt,
                     float *y)
{
    row2_vnni_rows(w, r, rs, a, nch, t0, kr, tl, lane, nt, y);
}

/* The tail chunk TCH of four rows RS apart by tokens T0 .. T0+NT-1 into
 * TL (see tail4_rows_vnni): one chunk's decoding and one chunk's products
 * per token for all four rows, where the 2-row kernel spends a whole
 * chunk's on each row and token. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) void
nvfp4k_cpu_tail4_vnni(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a, size_t nch,
                      size_t t0, size_t tch, size_t nt, cpu_tail4 *tl)
{
    const __m512 s2 = _mm512_set1_ps(w->d.weight_scale_2);
    const __m512i lut = vnni_code_lut();
    __m512i wv[4];
    __m512 ws;

    tail4_rows_vnni(w, r, rs, tch, CPU_PREFETCH, lut, _mm512_set1_epi8(0x0F), s2, wv, &ws);
    for (size_t t = 0; t < nt; t++) {
        __m512 tp, tf;
        tail4_token_vnni(a, (t0 + t) * nch + tch, wv, ws, &tp, &tf);
        _mm512_store_ps(tl[t].tp, tp);
        _mm512_store_ps(tl[t].tf, tf);
    }
}

/* §5's E2M1 codes of one block of 16 in AVX-512, doubled (-12..12), from
 * its osc = gs / s: the same float32 product x * osc as numerics.h's
 * num_qdq_code, rounded as num_e2m1_encode's edges (NUM_E2M1_EDGES) round
 * it, by the float adder instead of seven compares: E2M1's steps are 0.5
 * below 2, 1 in [2, 4), 2 from 4, so a + M - M with M = 2^22 times the
 * power of two at or below a (2^22 at the least) rounds a to its step,
 * half to even, as the edges do (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 ->
 * 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4), and the minimum with 6 saturates (7,
 * infinity; a past 2^105 makes M infinite or wraps it below 2^22, and
 * either way the minimum gives 6).  NaN passes no edge: max(a, 0) makes
 * it 0 first.  The sign is x's (a zero code stays 0 as an integer). */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline __m512i
qdq_codes_avx512(__m512 v, __m512 osc)
{
    const __m512 a = _mm512_max_ps(_mm512_abs_ps(_mm512_mul_ps(v, osc)), _mm512_setzero_ps());
    const __m512i mbits = _mm512_max_epi32(
        _mm512_add_epi32(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7F800000)),
                         _mm512_set1_epi32(22 << 23)),
        _mm512_set1_epi32(0x4A800000));
    const __m512 m = _mm512_castsi512_ps(mbits);
    const __m512 r = _mm512_min_ps(_mm512_sub_ps(_mm512_add_ps(a, m), m), _mm512_set1_ps(6.0f));
    /* 2r with x's sign bit: r | (x & sign), an exact integer */
    const __m512i d = _mm512_ternarylogic_epi32(_mm512_castps_si512(_mm512_add_ps(r, r)),
                                                _mm512_castps_si512(v),
                                                _mm512_set1_epi32((int)0x80000000u), 0xF8);

    return _mm512_cvttps_epi32(_mm512_castsi512_ps(d));
}

/* §5 for one block of 16 in AVX-512: the doubled E2M1 codes and s / gs.
 * Identical to numerics.h's num_qdq_block (test-kernels checks the two bit
 * for bit through an identity weight, and against torch's act_qdq
 * fixture): its num_qdq_scale for the block scale. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline __m512i
qdq_block_avx512(const float *xb, float gs, float *back_out)
{
    const __m512 v = _mm512_loadu_ps(xb);
    float osc;

    (void)num_qdq_scale(_mm512_reduce_max_ps(_mm512_abs_ps(v)), gs, &osc, back_out);
    return qdq_codes_avx512(v, _mm512_set1_ps(osc));
}

/* num_qdq_scale() in 16 lanes, the same IEEE operations lane by lane: s =
 * E4M3(gs * (amax * 1/6)) as a float (num_e4m3_encode then
 * num_e4m3_value), osc = s == 0 ? 0 : gs / s, back = s / gs.  The E4M3
 * rounding on the float's bits: a normal result keeps 3 mantissa bits,
 * rounded half to even by adding 0x7FFFF plus the last kept bit; below
 * 2^-6 the value rounds to a multiple of 2^-9 (adding and taking away
 * 2^14, whose float32 ulp is 2^-9, rounds it half to even); from 448 up,
 * infinity too, 448; NaN stays NaN. */
__attribute__((target("avx512f,avx512dq"))) static inline void
qdq_scale16(__m512 amax, float gs, __m512 *osc, __m512 *back)
{
    const __m512 g = _mm512_set1_ps(gs), big = _mm512_set1_ps(16384.0f);
    const __m512 y = _mm512_mul_ps(g, _mm512_mul_ps(amax, _mm512_set1_ps(1.0f / 6.0f)));
    const __m512i u = _mm512_castps_si512(y);
    const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(a, 20), _mm512_set1_epi32(1));
    __m512i r = _mm512_and_si512(
        _mm512_add_epi32(a, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFFF))),
        _mm512_set1_epi32((int)0xFFF00000u));
    __m512 s;

    r = _mm512_mask_mov_epi32(
        r, _mm512_cmplt_epi32_mask(a, _mm512_set1_epi32(0x3C800000)),
        _mm512_castps_si512(_mm512_sub_ps(_mm512_add_ps(_mm512_castsi512_ps(a), big), big)));
    r = _mm512_mask_mov_epi32(r, _mm512_cmpge_epi32_mask(a, _mm512_set1_epi32(0x43E00000)),
                              _mm512_set1_epi32(0x43E00000));
    r = _mm512_mask_mov_epi32(r, _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7F800000)),
                              _mm512_set1_epi32(0x7FC00000));
    s = _mm512_castsi512_ps(
        _mm512_or_si512(r, _mm512_and_si512(u, _mm512_set1_epi32((int)0x80000000u))));
    *osc = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(s, _mm512_setzero_ps(), _CMP_NEQ_UQ), g, s);
    *back = _mm512_div_ps(s, g);
}

/* One row for the VNNI kernel: codes in the CHUNK plane order, a chunk of
 * 16 blocks at a time.  The 16 maxima come from one max16x16, the 16
 * scales from one qdq_scale16.  The codes of block j, elements 4s..4s+3,
 * go to step s (64 bytes: blocks 0-15, 4 codes each): each block's 16
 * bytes are stored in order, then the four steps gathered out of them by
 * dword permutes.  corr = -12 x the block's code sum, which one vpdpbusd
 * per step adds up (4 codes a dword, a dword a block).  AQ (or NULL): the
 * token's row of its group's AMX A tiles, where each block's 16 codes go
 * in order too (act_q8.aq's layout; AMX_A_BLOCK bytes a block).  Q and
 * CORR NULL: only XS and AQ (a token the AMX kernel takes whole). */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) void
nvfp4k_cpu_quantize_row_q8(const float *x, size_t k, float gs, int8_t *q, float *xs,
                           int32_t *corr, int8_t *aq)
{
    const size_t nb = k / NVFP4_BLOCK, nch = chunks_of((int64_t)k);
    const __m512i ones = _mm512_set1_epi8(1);
    /* step s, dword j: dword 4j + s of the blocks' bytes, blocks 0-7 from
     * the first pair of registers, 8-15 from the second */
    const __m512i idx = _mm512_set_epi32(28, 24, 20, 16, 12, 8, 4, 0, 28, 24, 20, 16, 12, 8, 4, 0);
    _Alignas(64) int8_t codes[CPU_CHUNK];

    for (size_t ch = 0; ch < nch; ch++) {
        const size_t b0 = ch * CPU_CHUNK_BLOCKS;
        const size_t cnt = nb - b0 < CPU_CHUNK_BLOCKS ? nb - b0 : CPU_CHUNK_BLOCKS;
        const float *xc = x + b0 * NVFP4_BLOCK;
        __m512 ab[CPU_CHUNK_BLOCKS], osc, back;
        __m512i c[4], acc = _mm512_setzero_si512();

        for (size_t j = 0; j < CPU_CHUNK_BLOCKS; j++)
            ab[j] = j < cnt ? _mm512_abs_ps(_mm512_loadu_ps(xc + j * NVFP4_BLOCK))
                            : _mm512_setzero_ps();
        /* blocks past the row: amax 0, s 0, osc 0, back 0, codes 0 */
        qdq_scale16(max16x16(ab), gs, &osc, &back);
        _mm512_storeu_ps(xs + b0, _mm512_mul_ps(back, _mm512_set1_ps(0.25f)));
        if (!q) {
            for (size_t j = 0; j < cnt; j++) {
                const __m512 oj = _mm512_permutexvar_ps(_mm512_set1_epi32((int)j), osc);
                _mm_storeu_si128(
                    (__m128i *)(aq + (b0 + j) * AMX_A_BLOCK),
                    _mm512_cvtepi32_epi8(
                        qdq_codes_avx512(_mm512_loadu_ps(xc + j * NVFP4_BLOCK), oj)));
            }
            continue;
        }
        if (cnt < CPU_CHUNK_BLOCKS)
            memset(codes, 0, sizeof(codes));
        for (size_t j = 0; j < cnt; j++) {
            const __m512 oj = _mm512_permutexvar_ps(_mm512_set1_epi32((int)j), osc);
            const __m512i cj = qdq_codes_avx512(_mm512_loadu_ps(xc + j * NVFP4_BLOCK), oj);
            const __m128i c8 = _mm512_cvtepi32_epi8(cj);

            _mm_store_si128((__m128i *)(codes + j * NVFP4_BLOCK), c8);
            if (aq) /* the AMX A tiles' row too: block b at b x 256 */
                _mm_storeu_si128((__m128i *)(aq + (b0 + j) * AMX_A_BLOCK), c8);
        }
        for (int i = 0; i < 4; i++)
            c[i] = _mm512_load_si512(codes + 64 * i);
        for (int st = 0; st < 4; st++) {
            const __m512i ix = _mm512_add_epi32(idx, _mm512_set1_epi32(st));
            const __m512i step =
                _mm512_mask_blend_epi32(0xFF00, _mm512_permutex2var_epi32(c[0], ix, c[1]),
                                        _mm512_permutex2var_epi32(c[2], ix, c[3]));
            _mm512_storeu_si512(q + ch * CPU_CHUNK + 64 * st, step);
            acc = _mm512_dpbusd_epi32(acc, ones, step);
        }
        _mm512_storeu_si512(corr + b0, _mm512_mullo_epi32(acc, _mm512_set1_epi32(-12)));
    }
}

/* One row of x' = q * (s / gs) for the AVX-512 float kernel: q2 * (back/2)
 * rounds once, as §5's q * (s / gs) does (halving is exact). */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void
nvfp4k_cpu_qdq_row_avx512(const float *x, size_t k, float gs, float *out)
{

    for (size_t b = 0; b < k / NVFP4_BLOCK; b++) {
        float back;
        __m512i c = qdq_block_avx512(x + b * NVFP4_BLOCK, gs, &back);
        _mm512_storeu_ps(out + b * NVFP4_BLOCK,
                         _mm512_mul_ps(_mm512_cvtepi32_ps(c), _mm512_set1_ps(back * 0.5f)));
    }
}

CPU_DISPATCH("avx2,fma", row_avx2,
             (const cpu_kweight *w, int64_t r, const float *x, size_t t0, const krange *kr,
              size_t nt, float *y),
             w, r, x, t0, kr)
CPU_DISPATCH("avx512f,avx512bw,avx512vl,avx512dq", row_avx512,
             (const cpu_kweight *w, int64_t r, const float *x, size_t t0, const krange *kr,
              size_t nt, float *y),
             w, r, x, t0, kr)
CPU_DISPATCH("avx512f,avx512bw,avx512vl,avx512dq", row2_avx512,
             (const cpu_kweight *w, int64_t r, size_t rs, const float *x, size_t t0,
              const krange *kr, size_t nt, float *y),
             w, r, rs, x, t0, kr)
CPU_DISPATCH("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni", row_vnni,
             (const cpu_kweight *w, int64_t r, const act_q8 *a, size_t nch, size_t t0,
              const krange *kr, size_t nt, float *y),
             w, r, a, nch, t0, kr)
CPU_DISPATCH("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni", row2_vnni,
             (const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a, size_t nch,
              size_t t0, const krange *kr, size_t nt, float *y),
             w, r, rs, a, nch, t0, kr)
CPU_DISPATCH("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni", row2t4_vnni,
             (const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a, size_t nch,
              size_t t0, const krange *kr, const cpu_tail4 *tl, unsigned lane, size_t nt,
              float *y),
             w, r, rs, a, nch, t0, kr, tl, lane)
#endif /* CPU_X86 */
