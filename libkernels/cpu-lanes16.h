/* SPDX-License-Identifier: MIT */
/* Reductions across 16 AVX-512 registers at once: lane p of the result is
 * the sum (sum16x16) or the maximum (max16x16) of the 16 lanes of U[p].
 * For the attention's scores (cpu.c: 16 positions' dot products) and the
 * activation quantizer's block maxima (cpu-linear.c: 16 blocks' amax).
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

#endif
