/* SPDX-License-Identifier: MIT */
/*
 * The perplexity scorer's log-sum-exp (libmodel/lse.h).  References: libm's
 * expl in long double (an exp computed elsewhere, 64-bit significand), long
 * double sums of it, and the row maxima found by a plain loop here.  Every
 * path the CPU has (AVX-512, AVX2 with FMA, the fma() one) must give the
 * same bits, since the perplexity printed should not depend on the CPU it
 * ran on beyond the forward pass's own kernels.
 */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lse.h"

static uint64_t dbits(double x)
{
    uint64_t u;
    memcpy(&u, &x, 8);
    return u;
}

static int same_double(double a, double b)
{
    return (isnan(a) && isnan(b)) || dbits(a) == dbits(b);
}

/* xorshift64*, fixed seed: the rows are the same on every run */
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (double)((rng * 2685821657736338717ull) >> 11) * 0x1p-53;
}

#ifdef LSE_X86
static int have_avx512(void)
{
    return __builtin_cpu_supports("avx512f");
}
static int have_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* lane 0 of each path's exp for X (the other lanes hold X too) */
__attribute__((target("avx512f"))) static double exp_avx512(double x)
{
    double o[8];
    _mm512_storeu_pd(o, lse_exp8_avx512(_mm512_set1_pd(x)));
    return o[3];
}
__attribute__((target("avx2,fma"))) static double exp_avx2(double x)
{
    double o[4];
    _mm256_storeu_pd(o, lse_exp4_avx2(_mm256_set1_pd(x)));
    return o[2];
}
#endif

/* The difference of A and the long double R in units of the last place of
 * the double nearest R. */
static double ulps(double a, long double r)
{
    const double rd = (double)r;
    const double ulp = nextafter(rd, INFINITY) - rd;
    return (double)fabsl((long double)a - r) / ulp;
}

static void check_exp(double x)
{
    const double e = lse_exp1(x);

    if (isnan(x))
        ck_assert_msg(isnan(e), "exp(NaN) = %a", e);
    else if (x < LSE_MIN)
        ck_assert_msg(dbits(e) == 0, "exp(%a) = %a, want +0 below %g", x, e, LSE_MIN);
    else {
        const long double r = expl((long double)x);
        ck_assert_msg(ulps(e, r) <= 2.0, "exp(%a) = %a, expl %La: %.2f ulp", x, e, r,
                      ulps(e, r));
    }
#ifdef LSE_X86
    if (have_avx512())
        ck_assert_msg(same_double(exp_avx512(x), e), "exp(%a): avx512 %a, fma() %a", x,
                      exp_avx512(x), e);
    if (have_avx2())
        ck_assert_msg(same_double(exp_avx2(x), e), "exp(%a): avx2 %a, fma() %a", x,
                      exp_avx2(x), e);
#endif
}

START_TEST(test_exp_edges)
{
    static const double xs[] = {0.0, -0.0, -0x1p-1074, -0x1p-60, -1e-9, -0.5 * M_LN2,
                                -M_LN2, -1.0, -2.5, -10.0, -100.0, -700.0, -707.9,
                                -708.0, -708.00001, -709.0, -745.2, -1000.0, -INFINITY,
                                NAN};

    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++)
        check_exp(xs[i]);
    /* k changes where x / ln 2 is half an odd integer: both sides */
    for (int k = 0; k < 1021; k += 7) {
        const double h = -((double)k + 0.5) * M_LN2;
        check_exp(nextafter(h, 0));
        check_exp(h);
        check_exp(nextafter(h, -INFINITY));
    }
}
END_TEST

START_TEST(test_exp_random)
{
    for (int i = 0; i < 200000; i++) {
        /* the range a softmax sees most (-40 .. 0) and all of it */
        check_exp(i % 2 ? -40.0 * urand() : -710.0 * urand());
    }
}
END_TEST

/* A row of N logits of spread SPREAD: the scalar path's sum against a
 * long double one, and every path against the scalar one, bit for bit;
 * the maxima against a plain loop. */
static void check_row(size_t n, double spread)
{
    float *row = malloc(n * sizeof *row);
    float mx;
    long double ref = 0;
    double s;

    ck_assert_ptr_nonnull(row);
    for (size_t k = 0; k < n; k++)
        row[k] = (float)(spread * (2.0 * urand() - 1.0));
    /* a tie of signed zeros and a repeated maximum: any of them is the max */
    if (n > 3) {
        row[n / 2] = row[1];
        row[n - 1] = -0.0f;
    }
    mx = row[0];
    for (size_t k = 1; k < n; k++)
        mx = row[k] > mx ? row[k] : mx;
    ck_assert_msg(lse_max_scalar(row, n) == mx, "n %zu: max %a, loop %a", n,
                  (double)lse_max_scalar(row, n), (double)mx);
    /* Neumaier's compensated sum: accurate where long double is no wider
     * than double (valgrind runs x87 code in double) */
    {
        long double c = 0;
        for (size_t k = 0; k < n; k++) {
            const long double e = expl((long double)row[k] - (long double)mx), t = ref + e;
            c += fabsl(ref) >= fabsl(e) ? (ref - t) + e : (e - t) + ref;
            ref = t;
        }
        ref += c;
    }
    s = lse_sum_scalar(row, n, mx);
    /* eight sums of n / 8 positive terms: each addition within half an ulp
     * of its sum, each term within an ulp of e^x */
    ck_assert_msg(fabsl((long double)s - ref) <= ((double)n / 8 + 4) * 0x1p-52 * ref,
                  "n %zu: sum %a, expl %La", n, s, ref);
    ck_assert(same_double(lse_sum(row, n, mx), s));
    ck_assert(lse_max(row, n) == mx);
#ifdef LSE_X86
    if (have_avx512()) {
        ck_assert_msg(same_double(lse_sum_avx512(row, n, mx), s), "n %zu: avx512 %a, fma() %a",
                      n, lse_sum_avx512(row, n, mx), s);
        ck_assert(lse_max_avx512(row, n) == mx);
    }
    if (have_avx2()) {
        ck_assert_msg(same_double(lse_sum_avx2(row, n, mx), s), "n %zu: avx2 %a, fma() %a", n,
                      lse_sum_avx2(row, n, mx), s);
        ck_assert(lse_max_avx2(row, n) == mx);
    }
#endif
    free(row);
}

START_TEST(test_rows)
{
    /* every tail length, and vocabularies of real models (SmolLM2, Llama 3) */
    for (size_t n = 1; n <= 40; n++)
        check_row(n, 8.0);
    check_row(49152, 30.0);
    check_row(128256 + 3, 60.0);
    check_row(1000, 2000.0); /* most terms below exp(-708): 0 */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("lse");
    TCase *tc = tcase_create("lse");
    SRunner *sr;
    int nf;

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_exp_edges);
    tcase_add_test(tc, test_exp_random);
    tcase_add_test(tc, test_rows);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
