/* SPDX-License-Identifier: MIT */
/* exp16(): e^x in the 16 float32 lanes of an AVX-512 register, for the CPU
 * attention's softmax (cpu-attn.c); a header of its own so that test-kernels
 * can check it against float64 exp directly.  x86 with a GNU compiler. */
#ifndef NVFP4_CPU_EXP16_H
#define NVFP4_CPU_EXP16_H

#include <immintrin.h>

/* e^x in 16 lanes, for the softmax of the AVX-512 attention: x = n ln 2 + r
 * with n an integer and |r| <= ln 2 / 2 (ln 2 in two parts, Cody and
 * Waite), e^r by its Taylor series to r^7 (truncation below 1e-8
 * relative), times 2^n by vscalefps, which also rounds a subnormal result
 * once.  Within 1 ulp of the correctly rounded e^x for every float32 x in
 * [-105, 89] (checked against float64 exp, all 2.2e9 of them); arguments
 * are clamped to [-110, 89] first (e^-110 is 0 in float32, e^89
 * infinity), which keeps NaN (the clamps take a NaN second operand) and
 * sends -infinity to 0.  (tests/test-kernels.c holds it to float64 exp.) */
__attribute__((target("avx512f"))) static inline __m512 exp16(__m512 x)
{
    __m512 n, r, p;

    x = _mm512_max_ps(_mm512_set1_ps(-110.0f), x);
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
    n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-6f), r);
    p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

#endif
