/* SPDX-License-Identifier: MIT */
/* The sum of exp(row[k] - mx) over a row of logits in double: the
 * denominator of a log-softmax, what perplexity scores (eval.c) spend a
 * sixth of their time on with libm's exp.  One exp and one summation order
 * whatever the CPU: eight partial sums (element k goes to sum k % 8; past
 * the end of the row a lane adds exp(-inf) = +0) added as ((s0 + s4) + (s2
 * + s6)) + ((s1 + s5) + (s3 + s7)), and exp by the same IEEE operations in
 * 8 lanes of AVX-512, 2 x 4 of AVX2 with FMA, or one at a time with fma():
 * the three give the same bits (tests/test-lse.c).
 *
 * exp(x), x <= 0: k = x / ln 2 rounded to nearest (by adding 1.5 * 2^52),
 * r = x - k ln 2 with ln 2 in two parts (fma), e^r by its Taylor series to
 * r^13 (|r| <= 0.347: the truncation is below 4e-18) in Horner's form with
 * fma, times 2^k built from k's bits.  Within 2 ulp of the correctly
 * rounded value (test-lse checks it against expl).  Below -708 it gives 0
 * (exp there is below 2^-1021: in a sum that holds exp(0) = 1 it adds
 * nothing); -inf gives 0 and NaN gives NaN, as exp. */
#ifndef NVFP4_LSE_H
#define NVFP4_LSE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LSE_X86 1
#endif

#define LSE_LANES 8
/* fdlibm's constants (e_exp.c): 1 / ln 2, and ln 2 as a 32-bit head and
 * its remainder */
#define LSE_LOG2E 1.44269504088896338700e+00
#define LSE_LN2HI 6.93147180369123816490e-01
#define LSE_LN2LO 1.90821492927058770002e-10
#define LSE_SHIFT 0x1.8p52
#define LSE_MIN (-708.0)

/* 1 / n!, n = 13 .. 0, each correctly rounded (exact factorials divided) */
static const double lse_coef[14] = {
    1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
    1.0 / 40320.0,      1.0 / 5040.0,      1.0 / 720.0,      1.0 / 120.0,     1.0 / 24.0,
    1.0 / 6.0,          1.0 / 2.0,         1.0,              1.0};

static inline double lse_exp1(double x)
{
    const double s = fma(x, LSE_LOG2E, LSE_SHIFT);
    const double k = s - LSE_SHIFT;
    double r = fma(-k, LSE_LN2HI, x), p = lse_coef[0];
    uint64_t sb, e;

    r = fma(-k, LSE_LN2LO, r);
    for (int i = 1; i < 14; i++)
        p = fma(p, r, lse_coef[i]);
    memcpy(&sb, &s, sizeof sb);
    /* s's low bits are k (two's complement); 2^k = (k + 1023) << 52 */
    e = (sb + (uint64_t)1023) << 52;
    {
        double two_k;
        memcpy(&two_k, &e, sizeof two_k);
        /* x < LSE_MIN is false for NaN, which p carries */
        return x < LSE_MIN ? 0.0 : p * two_k;
    }
}

/* the partial sums' fixed tree */
static inline double lse_fold(const double s[LSE_LANES])
{
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

static inline double lse_sum_scalar(const float *row, size_t n, double mx)
{
    double s[LSE_LANES] = {0};

    for (size_t k = 0; k < n; k++) {
        double e = lse_exp1((double)row[k] - mx);
#ifdef __GNUC__
        /* opaque: where the target has FMA a compiler may fuse exp's last
         * product into this sum (one rounding where the lanes have two;
         * GCC 12 does not here, -march=native included) */
        __asm__("" : "+m"(e));
#endif
        s[k % LSE_LANES] += e;
    }
    /* past the end: + exp(-inf) = +0, which leaves every sum as it is */
    return lse_fold(s);
}

#ifdef LSE_X86
__attribute__((target("avx512f"))) static inline __m512d lse_exp8_avx512(__m512d x)
{
    const __m512d s = _mm512_fmadd_pd(x, _mm512_set1_pd(LSE_LOG2E), _mm512_set1_pd(LSE_SHIFT));
    const __m512d k = _mm512_sub_pd(s, _mm512_set1_pd(LSE_SHIFT));
    __m512d r = _mm512_fnmadd_pd(k, _mm512_set1_pd(LSE_LN2HI), x);
    __m512d p = _mm512_set1_pd(lse_coef[0]);
    __m512i e;

    r = _mm512_fnmadd_pd(k, _mm512_set1_pd(LSE_LN2LO), r);
    for (int i = 1; i < 14; i++)
        p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(lse_coef[i]));
    /* s's low bits are k; 2^k = (k + 1023) << 52 */
    e = _mm512_add_epi64(_mm512_castpd_si512(s), _mm512_set1_epi64(1023));
    e = _mm512_slli_epi64(e, 52);
    p = _mm512_mul_pd(p, _mm512_castsi512_pd(e));
    /* lanes below LSE_MIN (ordered compare: NaN lanes keep p) to +0 */
    return _mm512_maskz_mov_pd(
        (__mmask8)~_mm512_cmp_pd_mask(x, _mm512_set1_pd(LSE_MIN), _CMP_LT_OQ), p);
}

__attribute__((target("avx512f"))) static inline double lse_sum_avx512(const float *row,
                                                                        size_t n, double mx)
{
    const __m512d m = _mm512_set1_pd(mx);
    __m512d acc = _mm512_setzero_pd();
    double s[LSE_LANES];
    size_t k = 0;

    for (; k + LSE_LANES <= n; k += LSE_LANES)
        acc = _mm512_add_pd(acc, lse_exp8_avx512(_mm512_sub_pd(
                                     _mm512_cvtps_pd(_mm256_loadu_ps(row + k)), m)));
    if (k < n) {
        const __mmask16 mk = (__mmask16)((1u << (n - k)) - 1);
        const __m256 v = _mm512_castps512_ps256(
            _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), mk, row + k));
        acc = _mm512_add_pd(acc, lse_exp8_avx512(_mm512_sub_pd(_mm512_cvtps_pd(v), m)));
    }
    _mm512_storeu_pd(s, acc);
    return lse_fold(s);
}

__attribute__((target("avx2,fma"))) static inline __m256d lse_exp4_avx2(__m256d x)
{
    const __m256d s = _mm256_fmadd_pd(x, _mm256_set1_pd(LSE_LOG2E), _mm256_set1_pd(LSE_SHIFT));
    const __m256d k = _mm256_sub_pd(s, _mm256_set1_pd(LSE_SHIFT));
    __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(LSE_LN2HI), x);
    __m256d p = _mm256_set1_pd(lse_coef[0]);
    __m256i e;

    r = _mm256_fnmadd_pd(k, _mm256_set1_pd(LSE_LN2LO), r);
    for (int i = 1; i < 14; i++)
        p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(lse_coef[i]));
    e = _mm256_add_epi64(_mm256_castpd_si256(s), _mm256_set1_epi64x(1023));
    e = _mm256_slli_epi64(e, 52);
    p = _mm256_mul_pd(p, _mm256_castsi256_pd(e));
    return _mm256_andnot_pd(_mm256_cmp_pd(x, _mm256_set1_pd(LSE_MIN), _CMP_LT_OQ), p);
}

/* the row's elements K .. K+3 less MX, as doubles */
__attribute__((target("avx2,fma"))) static inline __m256d lse_x4(const float *row, size_t k,
                                                                 __m256d mx)
{
    return _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(row + k)), mx);
}

__attribute__((target("avx2,fma"))) static inline double lse_sum_avx2(const float *row, size_t n,
                                                                       double mx)
{
    const __m256d m = _mm256_set1_pd(mx);
    __m256d a0 = _mm256_setzero_pd(), a1 = a0;
    double s[LSE_LANES];
    size_t k = 0;

    for (; k + LSE_LANES <= n; k += LSE_LANES) {
        a0 = _mm256_add_pd(a0, lse_exp4_avx2(lse_x4(row, k, m)));
        a1 = _mm256_add_pd(a1, lse_exp4_avx2(lse_x4(row, k + 4, m)));
    }
    if (k < n) {
        float t[LSE_LANES];
        for (size_t i = 0; i < LSE_LANES; i++)
            t[i] = k + i < n ? row[k + i] : -INFINITY;
        a0 = _mm256_add_pd(a0, lse_exp4_avx2(lse_x4(t, 0, m)));
        a1 = _mm256_add_pd(a1, lse_exp4_avx2(lse_x4(t, 4, m)));
    }
    _mm256_storeu_pd(s, a0);
    _mm256_storeu_pd(s + 4, a1);
    return lse_fold(s);
}
#endif

/* The largest of N >= 1 finite logits (nvfp4_context_run has refused
 * NaN and infinities): the maximum of finite floats is one of them
 * whatever the order of comparison, so the lanes may split the row. */
static inline float lse_max_scalar(const float *row, size_t n)
{
    float m[4] = {row[0], row[0], row[0], row[0]};
    size_t k = 0;

    for (; k + 4 <= n; k += 4)
        for (int l = 0; l < 4; l++)
            m[l] = row[k + (size_t)l] > m[l] ? row[k + (size_t)l] : m[l];
    for (; k < n; k++)
        m[0] = row[k] > m[0] ? row[k] : m[0];
    m[0] = m[1] > m[0] ? m[1] : m[0];
    m[2] = m[3] > m[2] ? m[3] : m[2];
    return m[2] > m[0] ? m[2] : m[0];
}

#ifdef LSE_X86
__attribute__((target("avx512f"))) static inline float lse_max_avx512(const float *row,
                                                                       size_t n)
{
    __m512 a = _mm512_set1_ps(row[0]), b = a;
    size_t k = 0;

    for (; k + 32 <= n; k += 32) {
        a = _mm512_max_ps(a, _mm512_loadu_ps(row + k));
        b = _mm512_max_ps(b, _mm512_loadu_ps(row + k + 16));
    }
    for (; k < n; k += 16) {
        const __mmask16 mk =
            n - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - k)) - 1);
        a = _mm512_mask_max_ps(a, mk, a, _mm512_maskz_loadu_ps(mk, row + k));
    }
    return _mm512_reduce_max_ps(_mm512_max_ps(a, b));
}

__attribute__((target("avx2"))) static inline float lse_max_avx2(const float *row, size_t n)
{
    __m256 a = _mm256_set1_ps(row[0]), b = a;
    float t[8];
    size_t k = 0;

    for (; k + 16 <= n; k += 16) {
        a = _mm256_max_ps(a, _mm256_loadu_ps(row + k));
        b = _mm256_max_ps(b, _mm256_loadu_ps(row + k + 8));
    }
    _mm256_storeu_ps(t, _mm256_max_ps(a, b));
    for (; k < n; k++)
        t[0] = row[k] > t[0] ? row[k] : t[0];
    return lse_max_scalar(t, 8);
}
#endif

static inline float lse_max(const float *row, size_t n)
{
#ifdef LSE_X86
    if (__builtin_cpu_supports("avx512f"))
        return lse_max_avx512(row, n);
    if (__builtin_cpu_supports("avx2"))
        return lse_max_avx2(row, n);
#endif
    return lse_max_scalar(row, n);
}

/* The sum for a row of N logits whose maximum is MX, on the widest of the
 * three paths the CPU has (the same bits on each). */
static inline double lse_sum(const float *row, size_t n, double mx)
{
#ifdef LSE_X86
    if (__builtin_cpu_supports("avx512f"))
        return lse_sum_avx512(row, n, mx);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return lse_sum_avx2(row, n, mx);
#endif
    return lse_sum_scalar(row, n, mx);
}

#endif
