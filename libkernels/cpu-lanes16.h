/* SPDX-License-Identifier: MIT */
/* Operations across 16 AVX-512 registers at once: lane p of the result is
 * the sum (sum16x16) or the maximum (max16x16) of the 16 lanes of U[p];
 * their 16 x 16 transpose (tr16x16).
 * For the attention's scores (cpu-attn.c: 16 positions' dot products) and the
 * activation quantizer's block maxima (cpu-nvfp4.c: 16 blocks' amax).
 * x86 with a GNU compiler. */
#ifndef NVFP4_CPU_LANES16_H
#define NVFP4_CPU_LANES16_H

#include <immintrin.h>

/* 128-bit quarters combined in pairs (q0 with q2, q1 with q3), then the
 * halves of what is left, then 32-bit pairs, then neighbours: 15
 * operations and 31 shuffles where 16 separate reductions take about 64
 * of each.  The order depends on nothing but the lanes, so a sum is the
 * same whichever 16 registers it is computed among. */
#define CPU_RED16X16(name, op)                                                            \
    __attribute__((target("avx512f"))) static inline __m512 name(const __m512 u[16])     \
    {                                                                                     \
        __m512 t[8], v[4], w[2], x;                                                       \
                                                                                          \
        for (int l = 0; l < 8; l++)                                                       \
            t[l] = op(_mm512_shuffle_f32x4(u[2 * l], u[2 * l + 1], 0x44),                 \
                      _mm512_shuffle_f32x4(u[2 * l], u[2 * l + 1], 0xEE));                \
        /* t[l]: register 2l in quarters 0-1, 2l + 1 in 2-3 */                            \
        for (int l = 0; l < 4; l++)                                                       \
            v[l] = op(_mm512_shuffle_f32x4(t[2 * l], t[2 * l + 1], 0x88),                 \
                      _mm512_shuffle_f32x4(t[2 * l], t[2 * l + 1], 0xDD));                \
        /* v[l]: register 4l + k in quarter k */                                          \
        for (int l = 0; l < 2; l++)                                                       \
            w[l] = op(_mm512_shuffle_ps(v[2 * l], v[2 * l + 1], 0x44),                    \
                      _mm512_shuffle_ps(v[2 * l], v[2 * l + 1], 0xEE));                   \
        /* w[l]: quarter k holds 8l + k (lanes 0-1) and 8l + 4 + k (lanes 2-3) */         \
        x = op(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xDD)); \
        /* x: lane 4k + j holds register 4j + k */                                        \
        return _mm512_permutexvar_ps(                                                     \
            _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0), x);   \
    }

CPU_RED16X16(sum16x16, _mm512_add_ps)
/* (max: which NaN wins, where a lane holds one, is unspecified) */
CPU_RED16X16(max16x16, _mm512_max_ps)

#undef CPU_RED16X16

/* OUT[j] lane i = IN[i] lane j: a 16 x 16 transpose of 32-bit elements
 * (pairs, quads, then 128-bit lanes), 64 shuffles.  For the AMX B tiles
 * (cpu-amx.c) and the attention's transposed key tiles (cpu-attn.c). */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
tr16x16(const __m512i *in, __m512i *out)
{
    __m512i t[16], u[4][4];

    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(in[2 * i], in[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(in[2 * i], in[2 * i + 1]);
    }
    /* u[g][c], lane l: column 4l + c of rows 4g .. 4g+3 */
    for (int g = 0; g < 4; g++) {
        u[g][0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
        u[g][1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
        u[g][2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
        u[g][3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
    }
    for (int c = 0; c < 4; c++) {
        const __m512i x0 = _mm512_shuffle_i32x4(u[0][c], u[1][c], 0x44);
        const __m512i x1 = _mm512_shuffle_i32x4(u[0][c], u[1][c], 0xEE);
        const __m512i x2 = _mm512_shuffle_i32x4(u[2][c], u[3][c], 0x44);
        const __m512i x3 = _mm512_shuffle_i32x4(u[2][c], u[3][c], 0xEE);
        out[c] = _mm512_shuffle_i32x4(x0, x2, 0x88);
        out[4 + c] = _mm512_shuffle_i32x4(x0, x2, 0xDD);
        out[8 + c] = _mm512_shuffle_i32x4(x1, x3, 0x88);
        out[12 + c] = _mm512_shuffle_i32x4(x1, x3, 0xDD);
    }
}

#endif
