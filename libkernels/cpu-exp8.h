/* SPDX-License-Identifier: MIT */
/* exp8(): e^x in the 8 float32 lanes of an AVX2 register, for the AVX2
 * attention's softmax (cpu-attn.c); a header of its own so that
 * test-kernels can check it against float64 exp (and against exp16)
 * directly.  x86 with a GNU compiler. */
#ifndef NVFP4_CPU_EXP8_H
#define NVFP4_CPU_EXP8_H

#include <immintrin.h>

/* exp16's method (cpu-exp16.h) in 8 lanes, operation for operation: the
 * same clamps to [-110, 89], the same n = round(x log2 e), the same r by
 * Cody and Waite's two parts of ln 2, the same Taylor polynomial to r^7.
 * AVX2 has no vscalefps, so 2^n is applied as 2^n1 times 2^n2 with
 * n1 = floor(n / 2) and n2 = n - n1, each a normal power of two built in
 * the exponent field (n in [-159, 128]: n1, n2 in [-80, 64]): p times 2^n1
 * is exact (p in [0.7, 1.42], the product normal), so the one rounding is
 * the second multiply's, which rounds p 2^n once as vscalefps does, a
 * subnormal result included.  Hence the same bits as exp16 for every
 * float32 x, and exp16's contract: within 1 ulp of the correctly rounded
 * e^x for x in [-105, 89], NaN kept (the clamps take a NaN second operand;
 * its n is garbage but p is NaN), -infinity to 0.  (tests/test-kernels.c
 * holds it to float64 exp, and to exp16 where the CPU has AVX-512.) */
__attribute__((target("avx2,fma"))) static inline __m256 exp8(__m256 x)
{
    const __m256i bias = _mm256_set1_epi32(127);
    __m256 n, r, p;
    __m256i ni, n1, n2;

    x = _mm256_max_ps(_mm256_set1_ps(-110.0f), x);
    x = _mm256_min_ps(_mm256_set1_ps(89.0f), x);
    n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723e-6f), r);
    p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    ni = _mm256_cvtps_epi32(n); /* n is an integer already: exact */
    n1 = _mm256_srai_epi32(ni, 1);
    n2 = _mm256_sub_epi32(ni, n1);
    p = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23)));
    return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23)));
}

#endif
