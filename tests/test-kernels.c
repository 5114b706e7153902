/* SPDX-License-Identifier: MIT */
/* Tests of libnvfp4-kernels (CPU backend).
 *
 * References are independent of the code under test: float64 computations
 * written plainly below (with this file's own E2M1 / E4M3 / bf16 / f16
 * decoders), PyTorch's layer-level fixtures under tests/data/models/, and,
 * for the W4A4 activation step only, libquant's nvfp4_quant_qdq_row, which
 * test-quant checks bit-exactly against torch (tests/data/quant/act_qdq_*).
 *
 * Every Linear test runs at each SIMD level the machine has (scalar, AVX2,
 * AVX-512, AVX-512 VNNI; $NVFP4_CPU_ISA caps the level at backend open) and
 * checks that 1, 2 and 3 threads give the same bits; test_amx_gemm holds
 * the AMX level to the VNNI one's bits where the CPU has AMX.
 *
 * Tolerances: a float32 dot product of K terms summed in any order is
 * within gamma_K * sum|a_i b_i| of the exact value, gamma_K = K u / (1 - K u),
 * u = 2^-24 (Higham, Accuracy and Stability, 3.1).  The kernels add a
 * rounding per block scale product and per partial sum, so the tests allow
 * (K + 8) u / (1 - (K + 8) u) * sum|a_i b_i|, computed from the data. */
#include "config.h"

#include <check.h>
#include <fenv.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#endif
#if defined(__GNUC__) && defined(__x86_64__)
#include "../libkernels/cpu-exp16.h"
#include "../libkernels/cpu-exp8.h"
#endif

#include <nvfp4/kernels.h>

#include "testutil.h"

#define KREF_SEED 0x9E3779B97F4A7C15ull
#include "kref.h"

/* ---- independent decoders (§1) ------------------------------------------- */




static double ref_f16(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1.0 + m / 1024.0, e - 15);
    return s ? -v : v;
}

/* ---- helpers --------------------------------------------------------------- */





/* Whether the CPU backend here runs its AVX2 or AVX-512 kernels (not the
 * scalar ones): the CPU has AVX2 and FMA, and $NVFP4_CPU_ISA is not scalar. */
static int vector_here(void)
{
#if defined(__GNUC__) && defined(__x86_64__)
    const char *isa = getenv("NVFP4_CPU_ISA");

    if (isa && !strcmp(isa, "scalar"))
        return 0;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* Whether a CPU backend opened with NVFP4_CPU_ISA=ISA runs a vector
 * attention here (cpu-attn.c: AVX-512 from "avx512" up, the AVX2 one at
 * "avx2" and on CPUs with AVX2 but not AVX-512), whose softmax has no
 * subnormal weights (ATTN_EXP_FLOOR); libm's expf of the scalar path
 * makes them. */
static int vector_attention_here(const char *isa)
{
#if defined(__GNUC__) && defined(__x86_64__)
    if (!strcmp(isa, "scalar"))
        return 0;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    (void)isa;
    return 0;
#endif
}

static nvfp4_backend *open_cpu(void)
{
    nvfp4_error err;
    nvfp4_backend *be = nvfp4_backend_open("cpu", &err);
    ck_assert_msg(be != NULL, "cpu backend: %s", err.text);
    return be;
}





/* y = xin @ W^T in float64 and the error bound sum|x w| * gamma. */
static void ref_linear(const nvfp4_linear *parts, size_t np, const float *xin, size_t m,
                       double *yref, double *bound)
{
    int64_t n = 0, k = parts[0].k;
    for (size_t p = 0; p < np; p++)
        n += parts[p].n;
    for (size_t t = 0; t < m; t++) {
        int64_t r0 = 0;
        for (size_t p = 0; p < np; p++) {
            for (int64_t r = 0; r < parts[p].n; r++) {
                double acc = 0, mag = 0;
                for (int64_t c = 0; c < k; c++) {
                    double prod = (double)xin[t * (size_t)k + (size_t)c] * syn_w(&parts[p], r, c);
                    acc += prod;
                    mag += fabs(prod);
                }
                yref[t * (size_t)n + (size_t)(r0 + r)] = acc;
                bound[t * (size_t)n + (size_t)(r0 + r)] = mag * gamma_n((size_t)k) + 1e-30;
            }
            r0 += parts[p].n;
        }
    }
}

static const char *const isa_levels[] = {"scalar", "avx2", "avx512", "vnni"};

/* Run a linear on backend opened at ISA with 1, 2, 3 threads; assert same bits
 * and return the 1-thread result in Y. */
static void run_linear_all_threads(const char *isa, const nvfp4_linear *parts, size_t np,
                                   const float *x, size_t m, float *y, size_t ny)
{
    nvfp4_error err;
    nvfp4_backend *be;
    nvfp4_kweight *w;
    float *y2 = malloc(ny * sizeof(float));

    setenv("NVFP4_CPU_ISA", isa, 1);
    be = open_cpu();
    unsetenv("NVFP4_CPU_ISA");
    w = nvfp4_kweight_upload(be, parts, np, &err);
    ck_assert_msg(w != NULL, "upload: %s", err.text);
    for (int th = 1; th <= 3; th++) {
        nvfp4_backend_set_threads(be, th);
        ck_assert_int_eq(nvfp4_backend_threads(be), th);
        ck_assert_msg(nvfp4_k_linear(be, w, x, m, th == 1 ? y : y2, &err) == NVFP4_OK, "%s",
                      err.text);
        if (th > 1)
            ck_assert_msg(memcmp(y, y2, ny * sizeof(float)) == 0,
                          "%s: %d threads differ from 1 thread", isa, th);
    }
    nvfp4_kweight_free(w);
    nvfp4_backend_free(be);
    free(y2);
}

static void check_close(const float *y, const double *yref, const double *bound, size_t cnt,
                        const char *what)
{
    for (size_t i = 0; i < cnt; i++)
        ck_assert_msg(fabs((double)y[i] - yref[i]) <= bound[i],
                      "%s: element %zu = %.9g, reference %.9g, allowed error %.3g", what, i,
                      (double)y[i], yref[i], bound[i]);
}

/* The products of M tokens X by the weight LIN (N rows) at ISA levels A
 * and B are the same bits (at 1..3 threads each); YA, YB hold m x n. */
static void assert_isas_agree(const char *a, const char *b, const nvfp4_linear *lin,
                              const float *x, size_t m, float *ya, float *yb)
{
    const size_t n = (size_t)lin->n, ny = m * n;

    run_linear_all_threads(a, lin, 1, x, m, ya, ny);
    run_linear_all_threads(b, lin, 1, x, m, yb, ny);
    for (size_t i = 0; i < ny; i++)
        ck_assert_msg(memcmp(&ya[i], &yb[i], sizeof(float)) == 0,
                      "n=%lld k=%lld m=%zu: y[%zu][%zu] = %.9g at %s, %.9g at %s",
                      (long long)lin->n, (long long)lin->k, m, i / n, i % n, (double)ya[i], a,
                      (double)yb[i], b);
}

/* ---- registry ------------------------------------------------------------- */

START_TEST(test_registry)
{
    nvfp4_error err;
    nvfp4_backend *be;
    int found = 0;

    for (size_t i = 0; i < nvfp4_backend_count(); i++)
        found |= strcmp(nvfp4_backend_name_at(i), "cpu") == 0;
    ck_assert(found);
    ck_assert(nvfp4_backend_name_at(nvfp4_backend_count()) == NULL);
    ck_assert_int_eq(nvfp4_backend_available("cpu"), 1);
    ck_assert_int_eq(nvfp4_backend_available("no-such"), 0);
    ck_assert_str_eq(nvfp4_op_name(NVFP4_OP_MOE), "moe");
    ck_assert_str_eq(nvfp4_op_name(NVFP4_OP_COUNT), "unknown");

    be = nvfp4_backend_open("bogus", &err);
    ck_assert(be == NULL);
    ck_assert_int_eq(err.status, NVFP4_ERR_BACKEND);
    ck_assert_msg(strstr(err.text, "\"bogus\"") && strstr(err.text, "not registered") &&
                      strstr(err.text, "cpu"),
                  "%s", err.text);

    /* NULL / "" mean $NVFP4_BACKEND, never a silent fallback */
    setenv("NVFP4_BACKEND", "hip-nope", 1);
    be = nvfp4_backend_open(NULL, &err);
    ck_assert(be == NULL);
    ck_assert_msg(strstr(err.text, "hip-nope") && strstr(err.text, "NVFP4_BACKEND"), "%s",
                  err.text);
    setenv("NVFP4_BACKEND", "cpu", 1);
    be = nvfp4_backend_open("", &err);
    ck_assert(be != NULL);
    ck_assert_str_eq(nvfp4_backend_name(be), "cpu");
    for (int op = 0; op < NVFP4_OP_COUNT; op++)
        ck_assert(nvfp4_backend_supports(be, (nvfp4_op)op));
    ck_assert(!nvfp4_backend_supports(be, NVFP4_OP_COUNT));
    /* every format on the CPU; formats that do not exist, never */
    ck_assert(nvfp4_backend_supports_format(be, NVFP4_OP_LINEAR_DENSE, NVFP4_SCHEME_NONE,
                                            NVFP4_DTYPE_BF16));
    ck_assert(nvfp4_backend_supports_format(be, NVFP4_OP_LINEAR_W4A4, NVFP4_SCHEME_W4A4,
                                            NVFP4_DTYPE_U8));
    ck_assert(nvfp4_backend_supports_format(be, NVFP4_OP_EMBED, NVFP4_SCHEME_W4A16,
                                            NVFP4_DTYPE_U8));
    ck_assert(!nvfp4_backend_supports_format(be, NVFP4_OP_LINEAR_W4A4, NVFP4_SCHEME_W4A16,
                                             NVFP4_DTYPE_U8));
    ck_assert(!nvfp4_backend_supports_format(be, NVFP4_OP_LINEAR_DENSE, NVFP4_SCHEME_NONE,
                                             NVFP4_DTYPE_I32));
    ck_assert(!nvfp4_backend_supports_format(NULL, NVFP4_OP_ADD, NVFP4_SCHEME_NONE,
                                             NVFP4_DTYPE_F32));
    ck_assert_int_eq(nvfp4_backend_sync(be, &err), NVFP4_OK);
    nvfp4_backend_free(be);
    unsetenv("NVFP4_BACKEND");

    /* options at open: parsed once, unknown keys and bad values refused */
    be = nvfp4_backend_open_with("cpu", "threads=3,isa=scalar", &err);
    ck_assert_msg(be != NULL, "%s", err.text);
    ck_assert_int_eq(nvfp4_backend_threads(be), 3);
    nvfp4_backend_free(be);
    be = nvfp4_backend_open_with("cpu", "", &err);
    ck_assert_msg(be != NULL, "%s", err.text);
    nvfp4_backend_free(be);
    be = nvfp4_backend_open_with("cpu", "isa=sse9", &err);
    ck_assert(be == NULL);
    ck_assert_int_eq(err.status, NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "isa=sse9") && strstr(err.text, "avx512"), "%s", err.text);
    be = nvfp4_backend_open_with("cpu", "threads=2,colour=red", &err);
    ck_assert(be == NULL);
    ck_assert_msg(strstr(err.text, "unknown backend option \"colour\"") &&
                      strstr(err.text, "threads"),
                  "%s", err.text);
    be = nvfp4_backend_open_with("cpu", "threads", &err);
    ck_assert(be == NULL);
    ck_assert_msg(strstr(err.text, "not key=value"), "%s", err.text);
    nvfp4_backend_free(NULL);
    nvfp4_kweight_free(NULL);
    ck_assert_str_eq(nvfp4_kernels_version(), NVFP4_VERSION_STRING);
}
END_TEST

static void make_tensor(nvfp4_tensor *t, const char *name, nvfp4_dtype dt, int64_t d0,
                        int64_t d1, const void *data);

/* GPU backends are shared objects found through NVFP4_BACKEND_PATH (here
 * the stand-ins of tests/fake-backend.c).  The registry is built once per
 * process; Check runs each test in its own process (CK_FORK). */
START_TEST(test_plugins)
{
    nvfp4_error err;
    nvfp4_backend *be;
    float a[3] = {1, 2, 3}, b[3] = {10, 20, 30}, y[3];
    int cuda = 0, hip = 0;

    /* without fork the registry was built by an earlier test, before the
     * path was set: nothing to test then */
    if (getenv("CK_FORK") && strcmp(getenv("CK_FORK"), "no") == 0)
        return;
    setenv("NVFP4_BACKEND_PATH", "/nonexistent/dir:" FAKE_BACKEND_DIR, 1);
    for (size_t i = 0; i < nvfp4_backend_count(); i++) {
        cuda |= strcmp(nvfp4_backend_name_at(i), "cuda") == 0;
        hip |= strcmp(nvfp4_backend_name_at(i), "hip") == 0;
    }
    ck_assert_msg(cuda && hip, "stand-in plugins not loaded from %s", FAKE_BACKEND_DIR);
    ck_assert_int_eq(nvfp4_backend_available("cuda"), 1);
    ck_assert_int_eq(nvfp4_backend_available("hip"), 0);

    /* a registered backend without a device: a clear error, no fallback */
    be = nvfp4_backend_open("hip", &err);
    ck_assert(be == NULL);
    ck_assert_int_eq(err.status, NVFP4_ERR_BACKEND);
    ck_assert_msg(strstr(err.text, "\"hip\"") && strstr(err.text, "no usable device") &&
                      strstr(err.text, "cpu") && strstr(err.text, "hip (no device)"),
                  "%s", err.text);

    setenv("NVFP4_BACKEND", "cuda", 1);
    be = nvfp4_backend_open(NULL, &err);
    unsetenv("NVFP4_BACKEND");
    ck_assert_msg(be != NULL, "%s", err.text);
    ck_assert_str_eq(nvfp4_backend_name(be), "cuda");
    ck_assert(nvfp4_backend_supports(be, NVFP4_OP_ADD));
    ck_assert(!nvfp4_backend_supports(be, NVFP4_OP_SOFTMAX));
    ck_assert(!nvfp4_backend_supports(be, NVFP4_OP_LINEAR_W4A4));
    ck_assert_int_eq(nvfp4_k_add(be, a, b, 3, y, &err), NVFP4_OK);
    ck_assert(y[0] == 1011.0f && y[2] == 1033.0f); /* the plugin's own kernel ran */
    ck_assert_int_eq(nvfp4_k_softmax(be, a, 1, 3, y, &err), NVFP4_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.text, "backend \"cuda\" does not implement softmax"), "%s",
                  err.text);
    ck_assert_int_eq(nvfp4_backend_threads(be), 1);

    /* supports per weight format: the stand-in runs F32 dense weights only */
    ck_assert(nvfp4_backend_supports(be, NVFP4_OP_LINEAR_DENSE));
    ck_assert(nvfp4_backend_supports_format(be, NVFP4_OP_LINEAR_DENSE, NVFP4_SCHEME_NONE,
                                            NVFP4_DTYPE_F32));
    ck_assert(!nvfp4_backend_supports_format(be, NVFP4_OP_LINEAR_DENSE, NVFP4_SCHEME_NONE,
                                             NVFP4_DTYPE_BF16));
    {
        static const float wf[2 * 16] = {0};
        static const uint16_t wb[2 * 16] = {0};
        nvfp4_tensor tf, tb;
        nvfp4_linear lin;
        nvfp4_kweight *w;
        float x[16] = {0}, yy[2] = {0};

        memset(&lin, 0, sizeof(lin));
        strcpy(lin.prefix, "fake.dense");
        lin.scheme = NVFP4_SCHEME_NONE;
        lin.n = 2;
        lin.k = 16;
        make_tensor(&tf, "fake.f32", NVFP4_DTYPE_F32, 2, 16, wf);
        make_tensor(&tb, "fake.bf16", NVFP4_DTYPE_BF16, 2, 16, wb);
        lin.dense = &tf;
        w = nvfp4_kweight_upload(be, &lin, 1, &err);
        ck_assert_msg(w != NULL, "%s", err.text);
        ck_assert_int_eq(nvfp4_k_linear(be, w, x, 1, yy, &err), NVFP4_OK);
        ck_assert(yy[0] == 1000.0f && yy[1] == 1000.0f); /* the stand-in ran it */
        ck_assert_int_eq(nvfp4_kweight_holds_copy(w), 1); /* no float_weights_in_place */
        nvfp4_kweight_free(w);
        lin.dense = &tb;
        w = nvfp4_kweight_upload(be, &lin, 1, &err);
        ck_assert_msg(w != NULL, "%s", err.text);
        ck_assert_int_eq(nvfp4_k_linear(be, w, x, 1, yy, &err), NVFP4_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(err.text, "backend \"cuda\" does not run linear_dense on BF16 "
                                       "weights"),
                      "%s", err.text);
        nvfp4_kweight_free(w);
    }

    /* the plug-in's own options, given at open */
    {
        nvfp4_backend *b5 = nvfp4_backend_open_with("cuda", "marker=5", &err);
        ck_assert_msg(b5 != NULL, "%s", err.text);
        ck_assert_int_eq(nvfp4_k_add(b5, a, b, 3, y, &err), NVFP4_OK);
        ck_assert(y[0] == 16.0f && y[2] == 38.0f);
        nvfp4_backend_free(b5);
        ck_assert(nvfp4_backend_open_with("cuda", "colour=red", &err) == NULL);
        ck_assert_int_eq(err.status, NVFP4_ERR_INVALID);
        ck_assert_msg(strstr(err.text, "colour=red"), "%s", err.text);
    }

    /* a weight belongs to the backend it was uploaded to */
    {
        syn_linear s;
        nvfp4_backend *cpu = open_cpu();
        nvfp4_kweight *w;
        float x[16] = {0}, yy[2];

        syn_make(&s, "plugin.proj", NVFP4_SCHEME_W4A16, 2, 16, 1.0f, 0.0f);
        w = nvfp4_kweight_upload(be, &s.lin, 1, &err);
        ck_assert_msg(w != NULL, "%s", err.text);
        ck_assert_int_eq(nvfp4_k_linear(cpu, w, x, 1, yy, &err), NVFP4_ERR_INVALID);
        ck_assert_msg(strstr(err.text, "uploaded to backend \"cuda\", used with \"cpu\""),
                      "%s", err.text);
        ck_assert_int_eq(nvfp4_k_linear(be, w, x, 1, yy, &err), NVFP4_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(err.text, "does not run linear_w4a16 on NVFP4 w4a16 weights"),
                      "%s", err.text);
        nvfp4_kweight_free(w);
        nvfp4_backend_free(cpu);
        syn_free(&s);
    }
    nvfp4_backend_free(be);
}
END_TEST

START_TEST(test_memory)
{
    nvfp4_error err;
    nvfp4_backend *be = open_cpu();
    float src[5] = {1, 2, 3, 4, 5}, dst[5] = {0};
    float *d = nvfp4_backend_alloc(be, sizeof(src), &err);

    ck_assert(d != NULL);
    ck_assert_int_eq(nvfp4_backend_upload(be, d, src, sizeof(src), &err), NVFP4_OK);
    ck_assert_int_eq(nvfp4_backend_download(be, dst, d, sizeof(src), &err), NVFP4_OK);
    ck_assert(memcmp(src, dst, sizeof(src)) == 0);
    ck_assert_int_eq(nvfp4_backend_upload(be, NULL, src, 4, &err), NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "dst is NULL"), "%s", err.text);
    nvfp4_backend_release(be, d);
    nvfp4_backend_free(be);
}
END_TEST

/* ---- NVFP4 linear against float64 ------------------------------------------ */

static void linear_case(nvfp4_scheme scheme, int64_t n, int64_t k, size_t m, int fused)
{
    syn_linear s[3];
    nvfp4_linear parts[3];
    size_t np = fused ? 3 : 1;
    int64_t ntot = 0;
    float *x = malloc(m * (size_t)k * sizeof(float));
    float *xin = malloc(m * (size_t)k * sizeof(float));
    double *yref, *bound;
    float *y;
    const float in_scale = 0.0123f;

    for (size_t p = 0; p < np; p++) {
        syn_make(&s[p], "syn.proj", scheme, n + (int64_t)p, k, 0.00173f,
                 scheme == NVFP4_SCHEME_W4A4 ? in_scale * (float)(p + 1) / 3.0f : 0.0f);
        parts[p] = s[p].lin;
        ntot += n + (int64_t)p;
    }
    for (size_t i = 0; i < m * (size_t)k; i++)
        x[i] = frand(-3.0f, 3.0f) * (i % 97 == 0 ? 20.0f : 1.0f);
    /* an all-zero activation block (§8: scale 0 must give 0, not NaN) */
    if (k >= 32)
        memset(x + 16, 0, 16 * sizeof(float));
    yref = malloc(m * (size_t)ntot * sizeof(double));
    bound = malloc(m * (size_t)ntot * sizeof(double));
    y = malloc(m * (size_t)ntot * sizeof(float));
    memcpy(xin, x, m * (size_t)k * sizeof(float));
    if (scheme == NVFP4_SCHEME_W4A4) {
        /* §5 with the fused input scale = max of the parts' (§4) */
        float fused_in = fused ? in_scale : in_scale / 3.0f;
        for (size_t t = 0; t < m; t++)
            nvfp4_quant_qdq_row(x + t * (size_t)k, (size_t)k, fused_in, xin + t * (size_t)k);
    }
    ref_linear(parts, np, xin, m, yref, bound);
    for (size_t l = 0; l < 4; l++) {
        char what[128];
        run_linear_all_threads(isa_levels[l], parts, np, x, m, y, m * (size_t)ntot);
        snprintf(what, sizeof(what), "%s %s n=%lld k=%lld m=%zu fused=%d", isa_levels[l],
                 nvfp4_scheme_name(scheme), (long long)ntot, (long long)k, m, fused);
        check_close(y, yref, bound, m * (size_t)ntot, what);
    }
    for (size_t p = 0; p < np; p++)
        syn_free(&s[p]);
    free(x);
    free(xin);
    free(yref);
    free(bound);
    free(y);
}

START_TEST(test_linear_w4a16)
{
    /* k: one block, a tail chunk only, one whole chunk plus a tail, SmolLM2's
     * 576 (two chunks + 4 blocks); m: GEMV, a partial token tile, two tiles;
     * the one-token table kernel over fused parts, its 8-block steps, a
     * second 64-block stretch and a tail (k = 1104: 69 blocks) */
    linear_case(NVFP4_SCHEME_W4A16, 5, 16, 1, 0);
    linear_case(NVFP4_SCHEME_W4A16, 13, 1104, 1, 1);
    linear_case(NVFP4_SCHEME_W4A16, 37, 272, 3, 0);
    linear_case(NVFP4_SCHEME_W4A16, 19, 256, 9, 0);
    linear_case(NVFP4_SCHEME_W4A16, 24, 576, 17, 1);
}
END_TEST

START_TEST(test_linear_w4a4)
{
    linear_case(NVFP4_SCHEME_W4A4, 5, 16, 1, 0);
    linear_case(NVFP4_SCHEME_W4A4, 37, 272, 3, 0);
    linear_case(NVFP4_SCHEME_W4A4, 19, 768, 9, 0);
    linear_case(NVFP4_SCHEME_W4A4, 24, 576, 17, 1);
    /* 28 blocks: a tail chunk of 12, so past the 8 of its first half
     * (the AVX2 kernels skip a tail chunk's second half at 8 or fewer) */
    linear_case(NVFP4_SCHEME_W4A4, 21, 448, 1, 0);
    linear_case(NVFP4_SCHEME_W4A4, 21, 448, 5, 0);
    linear_case(NVFP4_SCHEME_W4A4, 21, 448, 17, 0);
    /* k = 4096 (16 chunks): the int8 activations one chunk longer a token
     * than the row (linear_run_n's nchs); 9 tokens, a token tile of 8 and
     * one more */
    linear_case(NVFP4_SCHEME_W4A4, 11, 4096, 9, 0);
    /* 100 blocks: 6 whole chunks, then a stretch that is only the tail
     * chunk of 4 blocks (the AVX2 GEMV's loop over whole chunks is empty
     * there, its tail alone runs: nvfp4k_cpu_gemv4t4_i8avx2); the GEMV
     * at SmolLM2's 576, two whole chunks and that tail in one stretch */
    linear_case(NVFP4_SCHEME_W4A4, 24, 1600, 1, 0);
    linear_case(NVFP4_SCHEME_W4A4, 24, 576, 1, 0);
}
END_TEST

/* The kernels process rows alone, in pairs or in fours; a row's result must
 * not depend on its neighbours: rows 1..n-1 uploaded on their own (every
 * row moves to another place in its group) give the same bits. */
static void make_tensor(nvfp4_tensor *t, const char *name, nvfp4_dtype dt, int64_t d0,
                        int64_t d1, const void *data);

START_TEST(test_row_grouping)
{
    static const size_t ms[] = {1, 3, 8, 16};
    const int64_t n = 13, k = 272;
    static const char *const names[] = {"w4a16", "w4a4", "bf16"};
    static uint16_t dense[13 * 272];
    nvfp4_tensor tfull, tsub;

    for (size_t i = 0; i < sizeof(dense) / sizeof(dense[0]); i++)
        dense[i] = (uint16_t)(0x3C00 + rnd() % 0x0400 + (rnd() & 0x8000));
    make_tensor(&tfull, "dense.full", NVFP4_DTYPE_BF16, n, k, dense);
    make_tensor(&tsub, "dense.sub", NVFP4_DTYPE_BF16, n - 1, k, dense + k);
    for (int scheme = 0; scheme < 3; scheme++) {
        syn_linear s;
        nvfp4_linear full, sub;
        float x[16 * 272], y[16 * 13], ys[16 * 12];

        syn_make(&s, "grouping", scheme == 1 ? NVFP4_SCHEME_W4A4 : NVFP4_SCHEME_W4A16, n, k,
                 0.01f, scheme == 1 ? 0.02f : 0.0f);
        full = s.lin;
        if (scheme == 2) {
            full.scheme = NVFP4_SCHEME_NONE;
            full.dense = &tfull;
        }
        sub = full;
        sub.n = n - 1;
        sub.weight += k / 2;
        sub.scales += k / 16;
        if (scheme == 2)
            sub.dense = &tsub;
        for (size_t i = 0; i < sizeof(x) / sizeof(x[0]); i++)
            x[i] = frand(-2, 2);
        for (size_t l = 0; l < 4; l++)
            for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
                size_t m = ms[mi];
                run_linear_all_threads(isa_levels[l], &full, 1, x, m, y, m * (size_t)n);
                run_linear_all_threads(isa_levels[l], &sub, 1, x, m, ys, m * (size_t)(n - 1));
                for (size_t t = 0; t < m; t++)
                    ck_assert_msg(memcmp(y + t * (size_t)n + 1, ys + t * (size_t)(n - 1),
                                         (size_t)(n - 1) * sizeof(float)) == 0,
                                  "%s %s m=%zu token %zu: rows differ when regrouped",
                                  isa_levels[l], names[scheme], m, t);
            }
        syn_free(&s);
    }
}
END_TEST

/* Batch invariance: a token's outputs are the same bits computed alone
 * (GEMV), among the 19 tokens of one call (GEMM token tiles, of 8, or 4 for
 * AVX2 dense weights, and a tail), in
 * a 9-token call starting elsewhere, or in a 4-token one (small batches:
 * the dense rows as four streams); k long enough that every kernel
 * walks it in several stretches (4144 = 259 blocks: 64-block stretches and
 * 6-chunk VNNI stretches, with tails), at every ISA level and 1..3 threads. */
START_TEST(test_batch_invariance)
{
    enum { N = 21, K = 4144, M = 19 };
    static const char *const names[] = {"w4a16", "w4a4", "bf16", "f16"};
    static uint16_t dense[N * K];
    static float x[M * K], y[M * N], y1[N], y9[9 * N], y4[4 * N];
    nvfp4_tensor td, th;

    for (size_t i = 0; i < sizeof(dense) / sizeof(dense[0]); i++)
        dense[i] = (uint16_t)(0x3C00 + rnd() % 0x0400 + (rnd() & 0x8000));
    make_tensor(&td, "dense.inv", NVFP4_DTYPE_BF16, N, K, dense);
    make_tensor(&th, "dense.inv16", NVFP4_DTYPE_F16, N, K, dense); /* f16 1..2, signed */
    for (size_t i = 0; i < sizeof(x) / sizeof(x[0]); i++)
        x[i] = frand(-2, 2);
    for (int scheme = 0; scheme < 4; scheme++) {
        syn_linear sl;
        nvfp4_linear lin;

        syn_make(&sl, "invariance", scheme == 1 ? NVFP4_SCHEME_W4A4 : NVFP4_SCHEME_W4A16, N, K,
                 0.01f, scheme == 1 ? 0.02f : 0.0f);
        lin = sl.lin;
        if (scheme >= 2) {
            lin.scheme = NVFP4_SCHEME_NONE;
            lin.dense = scheme == 2 ? &td : &th;
        }
        for (size_t l = 0; l < 4; l++) {
            run_linear_all_threads(isa_levels[l], &lin, 1, x, M, y, M * N);
            run_linear_all_threads(isa_levels[l], &lin, 1, x + 5 * K, 9, y9, 9 * N);
            run_linear_all_threads(isa_levels[l], &lin, 1, x + 2 * K, 4, y4, 4 * N);
            for (size_t t = 0; t < M; t++) {
                run_linear_all_threads(isa_levels[l], &lin, 1, x + t * K, 1, y1, N);
                ck_assert_msg(memcmp(y1, y + t * N, sizeof(y1)) == 0,
                              "%s %s token %zu: alone differs from in a batch of %d",
                              isa_levels[l], names[scheme], t, M);
                if (t >= 5 && t < 14)
                    ck_assert_msg(memcmp(y9 + (t - 5) * N, y + t * N, sizeof(y1)) == 0,
                                  "%s %s token %zu: a batch of 9 differs from one of %d",
                                  isa_levels[l], names[scheme], t, M);
                if (t >= 2 && t < 6)
                    ck_assert_msg(memcmp(y4 + (t - 2) * N, y + t * N, sizeof(y1)) == 0,
                                  "%s %s token %zu: a batch of 4 differs from one of %d",
                                  isa_levels[l], names[scheme], t, M);
            }
        }
        syn_free(&sl);
    }
}
END_TEST

/* The one-token products of weights of 128 KiB or more read each thread's
 * rows as four streams, rows r, r + q, r + 2q, r + 3q together (the 4-row
 * GEMVs with RS > 1, tiles_range): a token alone gives the bits it gets in
 * a 9-token call (the GEMM's row kernels, checked against references
 * above), at every ISA level and 1..3 threads.  N = 270 leaves a last tile
 * of 14 rows, which is not read as streams. */
START_TEST(test_gemv_streams)
{
    enum { N = 270, K = 1040, M = 9 };
    static const char *const names[] = {"w4a16", "w4a4"};
    static float x[M * K], y[M * N], y1[N];

    for (size_t i = 0; i < sizeof(x) / sizeof(x[0]); i++)
        x[i] = frand(-2, 2) * (i % 83 == 0 ? 12.0f : 1.0f);
    for (int scheme = 0; scheme < 2; scheme++) {
        syn_linear sl;

        syn_make(&sl, "streams", scheme ? NVFP4_SCHEME_W4A4 : NVFP4_SCHEME_W4A16, N, K, 0.011f,
                 scheme ? 0.019f : 0.0f);
        ck_assert_uint_ge((size_t)N * (K / 2 + K / 16), 128 * 1024);
        for (size_t l = 0; l < 4; l++) {
            run_linear_all_threads(isa_levels[l], &sl.lin, 1, x, M, y, M * N);
            for (size_t t = 0; t < M; t += 4) {
                run_linear_all_threads(isa_levels[l], &sl.lin, 1, x + t * K, 1, y1, N);
                for (size_t i = 0; i < N; i++)
                    ck_assert_msg(memcmp(&y1[i], &y[t * N + i], sizeof(float)) == 0,
                                  "%s %s token %zu row %zu: alone %.9g, in a batch %.9g",
                                  isa_levels[l], names[scheme], t, i, (double)y1[i],
                                  (double)y[t * N + i]);
            }
        }
        syn_free(&sl);
    }
}
END_TEST

/* ---- several weights of one input ----------------------------------------- */

/* nvfp4_k_linear_multi gives each weight nvfp4_k_linear's bits (the CPU
 * backend prepares the input once for a run of weights that share it):
 * q/k/v-like W4A4 weights of one input scale (n 64, 16, 48: multiples of
 * 16, and 40, which is not), then one of another input scale and a W4A16
 * weight (runs of their own), at 1, 3, 64 (AMX where it runs) and 100
 * tokens, on 1 and 2 threads, at every ISA level.  Then its errors: a
 * weight of another k, a NULL output, a NULL weight array. */
START_TEST(test_linear_multi)
{
    enum { NW = 6, K = 1040 };
    static const int64_t ns[NW] = {64, 16, 48, 40, 32, 16};
    static const char *const isas[] = {"scalar", "avx2", "avx512", "vnni", "amx"};
    static const size_t ms[] = {1, 3, 64, 100};
    syn_linear sl[NW], other;
    float *x = malloc(100 * K * sizeof(float));
    nvfp4_error err;

    for (size_t i = 0; i < 100 * K; i++)
        x[i] = frand(-3, 3) * (i % 97 == 0 ? 20.0f : 1.0f);
    for (int i = 0; i < NW; i++)
        syn_make(&sl[i], "multi.proj", i == 5 ? NVFP4_SCHEME_W4A16 : NVFP4_SCHEME_W4A4, ns[i],
                 K, 0.0021f, i == 5 ? 0.0f : i == 4 ? 0.031f : 0.017f);
    syn_make(&other, "multi.other", NVFP4_SCHEME_W4A4, 16, 512, 0.0021f, 0.017f);
    for (size_t li = 0; li < sizeof(isas) / sizeof(isas[0]); li++) {
        nvfp4_backend *be;
        nvfp4_kweight *w[NW], *wo;
        float *ya[NW], *yb[NW];

        setenv("NVFP4_CPU_ISA", isas[li], 1);
        be = open_cpu();
        unsetenv("NVFP4_CPU_ISA");
        for (int i = 0; i < NW; i++) {
            w[i] = nvfp4_kweight_upload(be, &sl[i].lin, 1, &err);
            ck_assert_msg(w[i] != NULL, "upload: %s", err.text);
            ya[i] = malloc(100 * (size_t)ns[i] * sizeof(float));
            yb[i] = malloc(100 * (size_t)ns[i] * sizeof(float));
        }
        for (int th = 1; th <= 2; th++) {
            nvfp4_backend_set_threads(be, th);
            for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
                const size_t m = ms[mi];

                for (int i = 0; i < NW; i++) {
                    memset(yb[i], 0xFF, m * (size_t)ns[i] * sizeof(float));
                    ck_assert_msg(nvfp4_k_linear(be, w[i], x, m, ya[i], &err) == NVFP4_OK,
                                  "%s", err.text);
                }
                ck_assert_msg(nvfp4_k_linear_multi(be, (const nvfp4_kweight *const *)w, NW, x,
                                                   m, yb, &err) == NVFP4_OK,
                              "%s", err.text);
                for (int i = 0; i < NW; i++)
                    for (size_t e = 0; e < m * (size_t)ns[i]; e++)
                        ck_assert_msg(memcmp(&ya[i][e], &yb[i][e], sizeof(float)) == 0,
                                      "%s, %d threads, m=%zu: weight %d y[%zu] = %.9g, "
                                      "alone %.9g",
                                      isas[li], th, m, i, e, (double)yb[i][e],
                                      (double)ya[i][e]);
            }
        }
        /* errors */
        wo = nvfp4_kweight_upload(be, &other.lin, 1, &err);
        ck_assert_msg(wo != NULL, "upload: %s", err.text);
        {
            const nvfp4_kweight *mix[2] = {w[0], wo};
            float *y2[2] = {ya[0], ya[1]}, *ynull[2] = {ya[0], NULL};

            ck_assert_int_eq(nvfp4_k_linear_multi(be, mix, 2, x, 1, y2, &err),
                             NVFP4_ERR_INVALID);
            ck_assert_msg(strstr(err.text, "k = 512") != NULL, "%s", err.text);
            mix[1] = w[1];
            ck_assert_int_eq(nvfp4_k_linear_multi(be, mix, 2, x, 1, ynull, &err),
                             NVFP4_ERR_INVALID);
            ck_assert_msg(strstr(err.text, "output 1") != NULL, "%s", err.text);
            ck_assert_int_eq(nvfp4_k_linear_multi(be, NULL, 2, x, 1, y2, &err),
                             NVFP4_ERR_INVALID);
            ck_assert_int_eq(nvfp4_k_linear_multi(be, mix, 0, NULL, 1, NULL, &err), NVFP4_OK);
        }
        nvfp4_kweight_free(wo);
        for (int i = 0; i < NW; i++) {
            nvfp4_kweight_free(w[i]);
            free(ya[i]);
            free(yb[i]);
        }
        nvfp4_backend_free(be);
    }
    for (int i = 0; i < NW; i++)
        syn_free(&sl[i]);
    syn_free(&other);
    free(x);
}
END_TEST

/* ---- AMX --------------------------------------------------------------------- */

/* Whether this process may run AMX tiles, found here independently of the
 * backend: CPUID.(7,0):EDX bits 24, 25 (AMX-TILE, AMX-INT8), XCR0 bits
 * 17, 18, and Linux's grant of the tile data (ARCH_REQ_XCOMP_PERM). */
static int test_amx_ok(void)
{
#if defined(__linux__) && defined(__x86_64__) && defined(__GNUC__)
    unsigned a, b, c, d, lo, hi;

    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0), "c"(0));
    if (a < 7)
        return 0;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    if (!(d & (1u << 24)) || !(d & (1u << 25)))
        return 0;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
    if (!(c & (1u << 27)))
        return 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    return (lo & (3u << 17)) == (3u << 17) && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return 0;
#endif
}

/* The AMX W4A4 GEMM gives the VNNI kernels' bits (which test_linear_w4a4
 * checks against the float64 reference; the scalar and float paths sum in
 * another order), at 1..3 threads (run_linear_all_threads): every m from 1
 * to 100 (below 64 tokens the VNNI path; above, token groups of 16 with
 * every tail) on N = 37, K = 1040 (65 blocks: a tail chunk of one block, a
 * 6-chunk stretch; row groups of 16 with a tail of 5), then N = 500,
 * K = 4096 at m = 72 and 64 (row tiles of 224, so several threads run
 * tiles; multiples of 16 tokens and a tail) and N = 64, K = 14336
 * (16-multiples, the width of Llama's down projection: many stretches);
 * N = 48 (a multiple of 16: the tokens of whole groups get no VNNI codes,
 * the tail tokens do) at m = 62..100. */
START_TEST(test_amx_gemm)
{
    static const struct {
        int64_t n, k;
        size_t m0, m1;
    } shapes[] = {{37, 1040, 1, 100}, {500, 4096, 72, 72}, {500, 4096, 64, 64},
                  {64, 14336, 64, 64}, {48, 1040, 62, 100},
                  /* k = 576 (a 4-block tail chunk) with 8 rows past the
                   * groups of 16 and 0-15 tokens past them: row4_vnni */
                  {40, 576, 64, 80}};
    nvfp4_error err;
    nvfp4_backend *be = nvfp4_backend_open_with("cpu", "isa=amx", &err);

    /* the option is known everywhere (a cap: without AMX, the best level) */
    ck_assert_msg(be != NULL, "isa=amx: %s", err.text);
    nvfp4_backend_free(be);
    if (!test_amx_ok()) {
        printf("test_amx_gemm: skipped, this CPU (or OS) gives no AMX tiles\n");
        return;
    }
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        const int64_t n = shapes[si].n, k = shapes[si].k;
        const size_t mmax = shapes[si].m1;
        float *x = malloc(mmax * (size_t)k * sizeof(float));
        float *y[2];
        syn_linear sl;

        for (size_t i = 0; i < mmax * (size_t)k; i++)
            x[i] = frand(-2, 2) * (i % 89 == 0 ? 16.0f : 1.0f);
        syn_make(&sl, "amx", NVFP4_SCHEME_W4A4, n, k, 0.013f, 0.017f);
        for (int l = 0; l < 2; l++)
            y[l] = malloc(mmax * (size_t)n * sizeof(float));
        for (size_t m = shapes[si].m0; m <= mmax; m++)
            assert_isas_agree("amx", "vnni", &sl.lin, x, m, y[1], y[0]);
        for (int l = 0; l < 2; l++)
            free(y[l]);
        syn_free(&sl);
        free(x);
    }
}
END_TEST

/* Batch invariance at the decode batch sizes a context step runs (B = 1,
 * 2, 3, 4, 8, 17, 64 rows in one call): every token's outputs equal, bit
 * for bit, its outputs computed alone, for W4A4, W4A16 and BF16 at every
 * ISA level and 1..3 threads.  K = 1040 (65 blocks: a 64-block stretch and
 * a tail; five 256-element chunks, the last of one block) takes the 4-row
 * GEMVs (float, dense and VNNI) for one token, the 2-row x NT-token
 * kernels (NT = 2..8) and their tails for more; N = 37 leaves odd rows
 * after every row grouping. */
START_TEST(test_batch_invariance_decode)
{
    enum { N = 37, K = 1040, M = 64 };
    static const size_t batches[] = {1, 2, 3, 4, 8, 17, 64};
    static const char *const names[] = {"w4a16", "w4a4", "bf16"};
    static float x[M * K], alone[M * N], y[M * N];
    static uint16_t dense[N * K];
    nvfp4_tensor td;

    for (size_t i = 0; i < sizeof(x) / sizeof(x[0]); i++)
        x[i] = frand(-2, 2) * (i % 89 == 0 ? 16.0f : 1.0f);
    for (size_t i = 0; i < sizeof(dense) / sizeof(dense[0]); i++)
        dense[i] = (uint16_t)(0x3C00 + rnd() % 0x0400 + (rnd() & 0x8000));
    make_tensor(&td, "dense.decode", NVFP4_DTYPE_BF16, N, K, dense);
    for (int scheme = 0; scheme < 3; scheme++) {
        syn_linear sl;
        nvfp4_linear lin;

        syn_make(&sl, "invariance.decode", scheme == 1 ? NVFP4_SCHEME_W4A4 : NVFP4_SCHEME_W4A16,
                 N, K, 0.013f, scheme == 1 ? 0.017f : 0.0f);
        lin = sl.lin;
        if (scheme == 2) {
            lin.scheme = NVFP4_SCHEME_NONE;
            lin.dense = &td;
        }
        for (size_t l = 0; l < 4; l++) {
            for (size_t t = 0; t < M; t++)
                run_linear_all_threads(isa_levels[l], &lin, 1, x + t * K, 1, alone + t * N, N);
            for (size_t bi = 0; bi < sizeof(batches) / sizeof(batches[0]); bi++) {
                const size_t b = batches[bi], t0 = (M - b) / 2; /* rows from the middle */

                run_linear_all_threads(isa_levels[l], &lin, 1, x + t0 * K, b, y, b * N);
                for (size_t t = 0; t < b; t++)
                    ck_assert_msg(memcmp(y + t * N, alone + (t0 + t) * N,
                                         N * sizeof(float)) == 0,
                                  "%s %s: token %zu of a batch of %zu differs from it alone",
                                  isa_levels[l], names[scheme], t, b);
            }
        }
        syn_free(&sl);
    }
}
END_TEST

/* ---- the int8 W4A4 path: AVX2 and VNNI ------------------------------------------ */

/* Whether this CPU runs the AVX-512 VNNI kernels (isa=vnni is a cap: below
 * it the backend runs the best level the CPU has). */
static int vnni_here(void)
{
#if defined(__GNUC__) && defined(__x86_64__)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

/* Shapes of the int8 tests: tail chunks (k = 320: a chunk and 4 blocks;
 * 576: SmolLM2's two chunks and 4; 2320: nine and one block, past
 * GEMV4_MAX_K) and row counts that are not multiples of 4; the first two
 * large enough for the one-token product's four streams (gemv_spread),
 * with a last tile of odd rows. */
static const struct {
    int64_t n, k;
} i8_shapes[] = {{37, 320}, {575, 576}, {1001, 320}, {19, 2320}};

/* Batch invariance on the int8 path (isa=avx2 everywhere, and isa=vnni
 * where the CPU has it): a token's outputs in a batch of B = 1..8 (the
 * GEMV, the 2-row kernels' NT), 9..17 (four row streams, token tiles of 8
 * with a lone last token on the GEMV), 33, 64 and 67 (GEMM tiles of 8, with
 * a tail) are its outputs alone, bit for bit, at 1..3 threads. */
START_TEST(test_i8_batch_invariance)
{
    enum { M = 67 };
    static const size_t batches[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 33, 64, 67};
    const char *const lv[] = {"avx2", "vnni"};

    for (size_t si = 0; si < sizeof(i8_shapes) / sizeof(i8_shapes[0]); si++) {
        const int64_t n = i8_shapes[si].n, k = i8_shapes[si].k;
        float *x = malloc(M * (size_t)k * sizeof(float));
        float *alone = malloc(M * (size_t)n * sizeof(float));
        float *y = malloc(M * (size_t)n * sizeof(float));
        syn_linear sl;

        for (size_t i = 0; i < M * (size_t)k; i++)
            x[i] = frand(-2, 2) * (i % 89 == 0 ? 16.0f : 1.0f);
        syn_make(&sl, "i8.invariance", NVFP4_SCHEME_W4A4, n, k, 0.013f, 0.017f);
        for (int l = 0; l < (vnni_here() ? 2 : 1); l++) {
            for (size_t t = 0; t < M; t++)
                run_linear_all_threads(lv[l], &sl.lin, 1, x + t * (size_t)k, 1,
                                       alone + t * (size_t)n, (size_t)n);
            for (size_t bi = 0; bi < sizeof(batches) / sizeof(batches[0]); bi++) {
                const size_t b = batches[bi], t0 = (M - b) / 2;

                run_linear_all_threads(lv[l], &sl.lin, 1, x + t0 * (size_t)k, b, y,
                                       b * (size_t)n);
                for (size_t t = 0; t < b; t++)
                    ck_assert_msg(memcmp(y + t * (size_t)n, alone + (t0 + t) * (size_t)n,
                                         (size_t)n * sizeof(float)) == 0,
                                  "%s n=%lld k=%lld: token %zu of a batch of %zu differs "
                                  "from it alone",
                                  lv[l], (long long)n, (long long)k, t, b);
            }
        }
        syn_free(&sl);
        free(x);
        free(alone);
        free(y);
    }
}
END_TEST

/* The AVX2 int8 kernels (cpu-i8avx2.c) give the VNNI kernels' bits: the
 * same exact block sums, the same float operations lane by lane, the same
 * reduction order.  Only where the CPU has VNNI (otherwise isa=vnni runs
 * the AVX2 path itself); test_linear_w4a4 and the identity tests check
 * both against independent references. */
START_TEST(test_i8avx2_matches_vnni)
{
    static const size_t ms[] = {1, 2, 3, 7, 8, 17, 64, 67};

    if (!vnni_here()) {
        printf("test_i8avx2_matches_vnni: skipped, this CPU has no AVX-512 VNNI\n");
        return;
    }
    for (size_t si = 0; si < sizeof(i8_shapes) / sizeof(i8_shapes[0]); si++) {
        const int64_t n = i8_shapes[si].n, k = i8_shapes[si].k;
        const size_t mmax = 67;
        float *x = malloc(mmax * (size_t)k * sizeof(float));
        float *y[2];
        syn_linear sl;

        for (size_t i = 0; i < mmax * (size_t)k; i++)
            x[i] = frand(-2, 2) * (i % 89 == 0 ? 16.0f : 1.0f);
        /* an all-zero block (s = 0) */
        memset(x + 32, 0, 16 * sizeof(float));
        syn_make(&sl, "i8.vnni", NVFP4_SCHEME_W4A4, n, k, 0.013f, 0.017f);
        for (int l = 0; l < 2; l++)
            y[l] = malloc(mmax * (size_t)n * sizeof(float));
        for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++) {
            assert_isas_agree("avx2", "vnni", &sl.lin, x, ms[mi], y[0], y[1]);
        }
        for (int l = 0; l < 2; l++)
            free(y[l]);
        syn_free(&sl);
        free(x);
    }
}
END_TEST

/* §5 bit for bit: an identity W4A4 weight (code 1.0, block scale 1.0,
 * global 1.0) makes y = x' exactly on every path (one non-zero product per
 * output, each rounded once as the reference rounds q * (s / gs)), so the
 * activation quantizer is checked against torch's act_qdq fixture and, on
 * longer rows, against libquant's nvfp4_quant_qdq_row. */
static void identity_w4a4(int64_t k, float in_scale, const float *x, size_t m,
                          const float *want, const char *what)
{
    syn_linear s;
    float *y = malloc(m * (size_t)k * sizeof(float));

    syn_make(&s, "identity", NVFP4_SCHEME_W4A4, k, k, 1.0f, in_scale);
    memset(s.packed, 0, (size_t)(k * k / 2));
    memset(s.scales, 0x38, (size_t)(k * k / 16)); /* E4M3 1.0 */
    for (int64_t i = 0; i < k; i++)
        s.packed[(size_t)(i * k / 2 + i / 2)] = (uint8_t)(2 << (4 * (i & 1))); /* 1.0 */
    for (size_t l = 0; l < 4; l++) {
        run_linear_all_threads(isa_levels[l], &s.lin, 1, x, m, y, m * (size_t)k);
        for (size_t i = 0; i < m * (size_t)k; i++)
            ck_assert_msg(y[i] == want[i], "%s %s: x'[%zu] = %.9g, expected %.9g (x = %.9g)",
                          what, isa_levels[l], i, (double)y[i], (double)want[i], (double)x[i]);
    }
    syn_free(&s);
    free(y);
}

START_TEST(test_w4a4_activation_exact)
{
    json_t *q = tload_json("quant/quant.json");
    json_t *note = json_object_get(json_object_get(q, "notes"), "act_qdq");
    float in_scale = (float)json_real_value(json_object_get(note, "input_scale_2"));
    size_t len;
    float *x = tload_file("quant/act_qdq_in.f32", &len);
    float *want = tload_file("quant/act_qdq_out.f32", NULL);
    float *x2, *want2;
    const size_t m2 = 5, k2 = 272;

    ck_assert(in_scale > 0.0f);
    ck_assert_uint_eq(len, 12 * 64 * sizeof(float));
    identity_w4a4(64, in_scale, x, 12, want, "torch act_qdq");

    /* longer rows (a chunk and a tail), all-zero and huge blocks */
    x2 = malloc(m2 * k2 * sizeof(float));
    want2 = malloc(m2 * k2 * sizeof(float));
    for (size_t i = 0; i < m2 * k2; i++)
        x2[i] = frand(-1.0f, 1.0f) * (float)(1 + (int)(i % 7) * (int)(i % 5));
    memset(x2 + 32, 0, 16 * sizeof(float));
    x2[100] = 1e6f;
    for (size_t t = 0; t < m2; t++)
        nvfp4_quant_qdq_row(x2 + t * k2, k2, 0.05f, want2 + t * k2);
    identity_w4a4((int64_t)k2, 0.05f, x2, m2, want2, "qdq_row");

    /* the E2M1 rounding edges of §1 hit exactly: with input_scale 1 and a
     * block maximum of 6, s = 1 and x * osc = x; block 0 holds the ties
     * (half to even), block 1 the neighbours just above them */
    {
        static const float ties[16] = {6.0f,  0.25f,  0.75f,  1.25f, 1.75f,  2.5f,
                                       3.5f,  5.0f,   -0.25f, -0.75f, -1.25f, -1.75f,
                                       -2.5f, -3.5f,  -5.0f,  0.0f};
        static const float tie_q[16] = {6, 0, 1, 1, 2, 2, 4, 4, 0, -1, -1, -2, -2, -4, -4, 0};
        static const float up_q[16] = {6, 0.5f, 1, 1.5f, 2, 3, 4, 6,
                                       0, -1, -1.5f, -2, -3, -4, -6, 0};
        float xe[32], we[32], wq[32];
        for (int i = 0; i < 16; i++) {
            xe[i] = ties[i];
            xe[16 + i] = i == 0 || i == 15 ? ties[i] : nextafterf(ties[i], 2 * ties[i]);
            we[i] = tie_q[i];
            we[16 + i] = i == 8 ? 0.0f : up_q[i];
        }
        xe[24] = -0.2500001f; /* just above 0.25 in magnitude: -0.5 */
        we[24] = -0.5f;
        nvfp4_quant_qdq_row(xe, 32, 1.0f, wq);
        for (int i = 0; i < 32; i++)
            ck_assert_msg(wq[i] == we[i], "qdq_row edge %d: %g vs %g", i, wq[i], we[i]);
        identity_w4a4(32, 1.0f, xe, 1, we, "E2M1 edges");
    }

    /* the E4M3 rounding of the block scales (the vector kernels round 16
     * at once): with input_scale 1, s = E4M3(amax / 6) and amax = 6 m 2^e
     * makes amax * float32(1/6) = m 2^e exactly, so these hit the ties
     * (half to even) of normal scales, of subnormal ones (units of 2^-9),
     * of the step to zero, and the saturation at 448; then a float32
     * subnormal block; 20 blocks: a chunk of 16 and a tail of 4 */
    {
        static const double m2e[20] = {
            1.0625,         1.1875,         1.0625 / 8,     2.5 / 512,    3.5 / 512,
            1.5 / 512,      0.5 / 512,      1.0 / 4096,     448,          460,
            470,            1e6,            1.0 / 64,       0.9999 / 64,  7.5 / 512,
            15.5 / 512 / 2, 1.9375 * 0.125, 0.0,            1e-40 / 6,    3.0};
        const size_t kb = 20 * 16;
        float xb[20 * 16], wb[20 * 16];
        for (size_t b = 0; b < 20; b++) {
            const float amax = (float)(6.0 * m2e[b]);
            for (size_t e = 0; e < 16; e++)
                xb[b * 16 + e] = e == b % 16 ? (b & 1 ? -amax : amax)
                                             : amax * frand(-1.0f, 1.0f);
        }
        nvfp4_quant_qdq_row(xb, kb, 1.0f, wb);
        identity_w4a4((int64_t)kb, 1.0f, xb, 1, wb, "E4M3 scale edges");
    }
    free(x);
    free(want);
    free(x2);
    free(want2);
    json_decref(q);
}
END_TEST

/* ---- dense linear and embeddings --------------------------------------------- */

/* Three fused parts of different dtypes (13 rows each: row pairs straddle
 * parts), only the last with a bias; k = 70 takes the masked tails (AVX2:
 * the zeroed copies), k = 80 the packed activations of the 2-row kernel. */
static void dense_case(int64_t k)
{
    const int64_t n = 13;
    const size_t m = 11;
    float *w32 = malloc((size_t)(n * k) * 4), *x = malloc(m * (size_t)k * 4);
    uint16_t *wbf = malloc((size_t)(n * k) * 2), *wf16 = malloc((size_t)(n * k) * 2);
    uint16_t bias16[13];
    nvfp4_tensor tw[3], tb;
    float *y = malloc(m * 3 * (size_t)n * 4);
    double *yref = malloc(m * 3 * (size_t)n * 8), *bound = malloc(m * 3 * (size_t)n * 8);
    nvfp4_linear parts[3];

    for (int64_t i = 0; i < n * k; i++) {
        w32[i] = frand(-1, 1);
        wbf[i] = (uint16_t)(rnd() & 0xBFFF);  /* |value| < 2 */
        wf16[i] = (uint16_t)(rnd() & 0xBBFF); /* finite, |value| < 2 */
    }
    for (int i = 0; i < 13; i++)
        bias16[i] = (uint16_t)(0x3C00 + i * 64); /* f16 1.0 .. */
    for (size_t i = 0; i < m * (size_t)k; i++)
        x[i] = frand(-2, 2);
    make_tensor(&tw[0], "w.f32", NVFP4_DTYPE_F32, n, k, w32);
    make_tensor(&tw[1], "w.bf16", NVFP4_DTYPE_BF16, n, k, wbf);
    make_tensor(&tw[2], "w.f16", NVFP4_DTYPE_F16, n, k, wf16);
    make_tensor(&tb, "b.f16", NVFP4_DTYPE_F16, n, 0, bias16);
    memset(parts, 0, sizeof(parts));
    for (int p = 0; p < 3; p++) {
        snprintf(parts[p].prefix, sizeof(parts[p].prefix), "dense%d", p);
        parts[p].scheme = NVFP4_SCHEME_NONE;
        parts[p].n = n;
        parts[p].k = k;
        parts[p].dense = &tw[p];
    }
    parts[2].bias = &tb; /* only the third part has a bias: others count 0 */
    for (size_t t = 0; t < m; t++)
        for (int p = 0; p < 3; p++)
            for (int64_t r = 0; r < n; r++) {
                double acc = 0, mag = 0;
                for (int64_t c = 0; c < k; c++) {
                    size_t wi = (size_t)(r * k + c);
                    double wv = p == 0 ? w32[wi] : p == 1 ? ref_bf16(wbf[wi]) : ref_f16(wf16[wi]);
                    acc += wv * x[t * (size_t)k + (size_t)c];
                    mag += fabs(wv * x[t * (size_t)k + (size_t)c]);
                }
                if (p == 2)
                    acc += ref_f16(bias16[r]), mag += fabs(ref_f16(bias16[r]));
                yref[t * 3 * (size_t)n + (size_t)(p * n + r)] = acc;
                bound[t * 3 * (size_t)n + (size_t)(p * n + r)] = mag * gamma_n((size_t)k + 1);
            }
    /* one token (the 4-row GEMV), four (small batches), all eleven; the
     * AVX2 kernels do the AVX-512 ones' arithmetic in 8-lane halves, so
     * where the CPU has AVX-512 the two levels give the same bits */
    for (size_t mi = 0; mi < 3; mi++) {
        const size_t mm = mi == 0 ? 1 : mi == 1 ? 4 : m, ny = mm * 3 * (size_t)n;
        float *y2 = malloc(ny * sizeof(float));

        for (size_t l = 0; l < 4; l++) {
            run_linear_all_threads(isa_levels[l], parts, 3, x, mm, y, ny);
            check_close(y, yref, bound, ny, isa_levels[l]);
            if (l == 1)
                memcpy(y2, y, ny * sizeof(float));
            if (l == 2)
                ck_assert_msg(memcmp(y, y2, ny * sizeof(float)) == 0,
                              "dense k %lld, %zu tokens: avx2 and avx512 differ", (long long)k,
                              mm);
        }
        free(y2);
    }
    free(w32);
    free(x);
    free(wbf);
    free(wf16);
    free(y);
    free(yref);
    free(bound);
}

START_TEST(test_linear_dense)
{
    dense_case(70);
    dense_case(80);
}
END_TEST

START_TEST(test_embed)
{
    nvfp4_error err;
    nvfp4_backend *be = open_cpu();
    syn_linear s;
    nvfp4_kweight *w;
    int32_t ids[4] = {6, 0, 6, 2};
    float y[4 * 48];
    uint16_t tab[3 * 8];
    nvfp4_tensor t;
    nvfp4_linear dl;

    /* NVFP4 table: exactly §2's float32 value (bit-exact, no tolerance) */
    syn_make(&s, "embed_tokens", NVFP4_SCHEME_W4A16, 7, 48, 0.25f, 0);
    w = nvfp4_kweight_upload(be, &s.lin, 1, &err);
    ck_assert_msg(w != NULL, "%s", err.text);
    ck_assert_int_eq(nvfp4_kweight_rows(w), 7);
    ck_assert_int_eq(nvfp4_kweight_cols(w), 48);
    ck_assert_int_eq(nvfp4_k_embed(be, w, ids, 4, y, &err), NVFP4_OK);
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < 48; c++)
            ck_assert_msg(y[i * 48 + c] == syn_w(&s.lin, ids[i], c), "row %d col %d", ids[i], c);
    ids[1] = 7;
    ck_assert_int_eq(nvfp4_k_embed(be, w, ids, 4, y, &err), NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "token id 7 at position 1") && strstr(err.text, "7 rows"),
                  "%s", err.text);
    ids[1] = -1;
    ck_assert_int_eq(nvfp4_k_embed(be, w, ids, 4, y, &err), NVFP4_ERR_INVALID);
    nvfp4_kweight_free(w);
    syn_free(&s);

    /* bf16 table */
    for (int i = 0; i < 24; i++)
        tab[i] = (uint16_t)rnd();
    tab[3] = 0x7F80; /* +inf passes through unchanged */
    make_tensor(&t, "embed.bf16", NVFP4_DTYPE_BF16, 3, 8, tab);
    memset(&dl, 0, sizeof(dl));
    strcpy(dl.prefix, "embed");
    dl.scheme = NVFP4_SCHEME_NONE;
    dl.n = 3;
    dl.k = 8;
    dl.dense = &t;
    w = nvfp4_kweight_upload(be, &dl, 1, &err);
    ck_assert_msg(w != NULL, "%s", err.text);
    ids[0] = 2;
    ids[1] = 0;
    ck_assert_int_eq(nvfp4_k_embed(be, w, ids, 2, y, &err), NVFP4_OK);
    for (int c = 0; c < 8; c++) {
        float a = ref_bf16(tab[16 + c]), b = ref_bf16(tab[c]);
        ck_assert(memcmp(&y[c], &a, 4) == 0 || (isnan(y[c]) && isnan(a)));
        ck_assert(memcmp(&y[8 + c], &b, 4) == 0 || (isnan(y[8 + c]) && isnan(b)));
    }
    nvfp4_kweight_free(w);
    nvfp4_backend_free(be);
}
END_TEST

/* NVFP4_KWEIGHT_COPY: a float weight fused of a BF16 and an F32 part, its
 * products (1 and 4 tokens) and rows against float64 references of the
 * original values after the parts' memory was overwritten with NaN bytes;
 * the weight uploaded in place reads the overwritten memory (NaN), as
 * nvfp4_kweight_holds_copy() says it does.  An unknown flag is refused. */
START_TEST(test_dense_copy)
{
    enum { N0 = 5, N1 = 7, K = 48, M = 4 };
    nvfp4_error err;
    nvfp4_backend *be = open_cpu();
    uint16_t *wb = malloc(N0 * K * 2);
    float *wf = malloc(N1 * K * 4), x[M * K], y[2 * K], row[K]; /* 2K >= M(N0 + N1) */
    double ref[M * (N0 + N1)], bound[M * (N0 + N1)], orig[(N0 + N1) * K];
    nvfp4_tensor t[2];
    nvfp4_linear parts[2];
    nvfp4_kweight *wc, *wi;
    int32_t ids[2] = {N0 + 2, 1};

    for (int i = 0; i < N0 * K; i++) {
        wb[i] = (uint16_t)(rnd() & 0xBFFF); /* |value| < 2 */
        orig[i] = ref_bf16(wb[i]);
    }
    for (int i = 0; i < N1 * K; i++)
        orig[N0 * K + i] = wf[i] = frand(-1, 1);
    for (int i = 0; i < M * K; i++)
        x[i] = frand(-2, 2);
    for (int tk = 0; tk < M; tk++)
        for (int r = 0; r < N0 + N1; r++) {
            double acc = 0, mag = 0;
            for (int c = 0; c < K; c++) {
                acc += orig[r * K + c] * x[tk * K + c];
                mag += fabs(orig[r * K + c] * x[tk * K + c]);
            }
            ref[tk * (N0 + N1) + r] = acc;
            bound[tk * (N0 + N1) + r] = mag * gamma_n(K) + 1e-30;
        }
    make_tensor(&t[0], "head.a", NVFP4_DTYPE_BF16, N0, K, wb);
    make_tensor(&t[1], "head.b", NVFP4_DTYPE_F32, N1, K, wf);
    memset(parts, 0, sizeof(parts));
    for (int p = 0; p < 2; p++) {
        snprintf(parts[p].prefix, sizeof(parts[p].prefix), "head%d", p);
        parts[p].scheme = NVFP4_SCHEME_NONE;
        parts[p].n = p ? N1 : N0;
        parts[p].k = K;
        parts[p].dense = &t[p];
    }
    wc = nvfp4_kweight_upload_ex(be, parts, 2, NVFP4_KWEIGHT_COPY, &err);
    ck_assert_msg(wc != NULL, "%s", err.text);
    wi = nvfp4_kweight_upload_ex(be, parts, 2, 0, &err);
    ck_assert_msg(wi != NULL, "%s", err.text);
    ck_assert_int_eq(nvfp4_kweight_holds_copy(wc), 1);
    ck_assert_int_eq(nvfp4_kweight_holds_copy(wi), 0);
    ck_assert(nvfp4_kweight_upload_ex(be, parts, 2, 2u, &err) == NULL);
    ck_assert_int_eq(err.status, NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "unknown flags 0x2"), "%s", err.text);

    memset(wb, 0xFF, N0 * K * 2);
    memset(wf, 0xFF, N1 * K * 4);
    for (int mm = 1; mm <= M; mm += M - 1) {
        ck_assert_int_eq(nvfp4_k_linear(be, wc, x, (size_t)mm, y, &err), NVFP4_OK);
        check_close(y, ref, bound, (size_t)mm * (N0 + N1), "copied weight");
    }
    ck_assert_int_eq(nvfp4_k_embed(be, wc, ids, 2, y, &err), NVFP4_OK);
    for (int c = 0; c < K; c++) {
        ck_assert_msg(y[c] == (float)orig[ids[0] * K + c], "row %d col %d", ids[0], c);
        ck_assert_msg(y[K + c] == (float)orig[ids[1] * K + c], "row %d col %d", ids[1], c);
    }
    ck_assert_int_eq(nvfp4_k_linear(be, wi, x, 1, y, &err), NVFP4_OK);
    ck_assert(isnan(y[0]) && isnan(y[N0]));
    ck_assert_int_eq(nvfp4_k_embed(be, wi, ids, 1, row, &err), NVFP4_OK);
    ck_assert(isnan(row[0]));
    nvfp4_kweight_free(wc);
    nvfp4_kweight_free(wi);
    nvfp4_backend_free(be);
    free(wb);
    free(wf);
}
END_TEST

/* ---- upload rejections ------------------------------------------------------ */

START_TEST(test_upload_rejects)
{
    nvfp4_error err;
    nvfp4_backend *be = open_cpu();
    syn_linear a, b;
    nvfp4_linear parts[2];
    nvfp4_tensor t;
    float data[4];

    syn_make(&a, "layers.0.q_proj", NVFP4_SCHEME_W4A4, 4, 32, 0.5f, 0.01f);
    syn_make(&b, "layers.0.k_proj", NVFP4_SCHEME_W4A4, 4, 32, 0.25f, 0.01f);
    parts[0] = a.lin;
    parts[1] = b.lin;
    /* §4: fused shards must share weight_scale_2 */
    ck_assert(nvfp4_kweight_upload(be, parts, 2, &err) == NULL);
    ck_assert_int_eq(err.status, NVFP4_ERR_SCALE_MISMATCH);
    ck_assert_msg(strstr(err.text, "layers.0.k_proj") && strstr(err.text, "0.25") &&
                      strstr(err.text, "0.5"),
                  "%s", err.text);

    parts[1] = b.lin;
    parts[1].k = 48;
    parts[1].weight_scale_2 = 0.5f;
    ck_assert(nvfp4_kweight_upload(be, parts, 2, &err) == NULL);
    ck_assert_int_eq(err.status, NVFP4_ERR_BAD_SHAPE);
    ck_assert_msg(strstr(err.text, "[4, 48]") && strstr(err.text, "k = 32"), "%s", err.text);

    parts[1] = b.lin;
    parts[1].scheme = NVFP4_SCHEME_W4A16;
    ck_assert(nvfp4_kweight_upload(be, parts, 2, &err) == NULL);
    ck_assert_msg(strstr(err.text, "scheme w4a16") && strstr(err.text, "w4a4"), "%s",
                  err.text);

    parts[0] = a.lin;
    parts[0].k = 24;
    ck_assert(nvfp4_kweight_upload(be, parts, 1, &err) == NULL);
    ck_assert_msg(strstr(err.text, "k % 16 == 0") && strstr(err.text, "24"), "%s", err.text);

    /* sizes whose products overflow are refused before any allocation */
    parts[0] = a.lin;
    parts[0].n = (int64_t)1 << 40;
    parts[0].k = (int64_t)1 << 16;
    ck_assert(nvfp4_kweight_upload(be, parts, 1, &err) == NULL);
    ck_assert_int_eq(err.status, NVFP4_ERR_OVERFLOW);
    ck_assert_msg(strstr(err.text, "fused weight size overflows"), "%s", err.text);
    {
        nvfp4_kweight *w = nvfp4_kweight_upload(be, &a.lin, 1, &err);
        float one = 0;
        ck_assert(w != NULL);
        ck_assert_int_eq(nvfp4_k_linear(be, w, &one, (size_t)1 << 60, &one, &err),
                         NVFP4_ERR_OVERFLOW);
        ck_assert_msg(strstr(err.text, "element count overflows"), "%s", err.text);
        nvfp4_kweight_free(w);
    }

    /* §8: zero / NaN / negative global scales */
    parts[0] = a.lin;
    parts[0].weight_scale_2 = 0.0f;
    ck_assert(nvfp4_kweight_upload(be, parts, 1, &err) == NULL);
    ck_assert_msg(strstr(err.text, "weight_scale_2 must be finite and > 0"), "%s", err.text);
    parts[0].weight_scale_2 = NAN;
    ck_assert(nvfp4_kweight_upload(be, parts, 1, &err) == NULL);
    parts[0] = a.lin;
    parts[0].input_scale = -1.0f;
    ck_assert(nvfp4_kweight_upload(be, parts, 1, &err) == NULL);
    ck_assert_msg(strstr(err.text, "W4A4 input scale"), "%s", err.text);

    /* §8: NaN and negative block scales */
    parts[0] = a.lin;
    a.scales[5] = 0x7F;
    ck_assert(nvfp4_kweight_upload(be, parts, 1, &err) == NULL);
    ck_assert_msg(strstr(err.text, "row 2, block 1 is 0x7F (NaN)") &&
                      strstr(err.text, "layers.0.q_proj"),
                  "%s", err.text);
    a.scales[5] = 0x81;
    ck_assert(nvfp4_kweight_upload(be, parts, 1, &err) == NULL);
    ck_assert_msg(strstr(err.text, "0x81 (negative)"), "%s", err.text);

    /* dense weights of the wrong dtype or size */
    make_tensor(&t, "w.i32", NVFP4_DTYPE_I32, 2, 2, data);
    memset(parts, 0, sizeof(parts));
    strcpy(parts[0].prefix, "lm_head");
    parts[0].n = 2;
    parts[0].k = 2;
    parts[0].dense = &t;
    ck_assert(nvfp4_kweight_upload(be, parts, 1, &err) == NULL);
    ck_assert_int_eq(err.status, NVFP4_ERR_BAD_DTYPE);
    ck_assert_msg(strstr(err.text, "found I32") && strstr(err.text, "w.i32"), "%s", err.text);
    make_tensor(&t, "w.f32", NVFP4_DTYPE_F32, 1, 2, data);
    ck_assert(nvfp4_kweight_upload(be, parts, 1, &err) == NULL);
    ck_assert_msg(strstr(err.text, "expected 4 elements, found 2"), "%s", err.text);
    ck_assert(nvfp4_kweight_upload(be, parts, 0, &err) == NULL);
    ck_assert_msg(strstr(err.text, "no parts"), "%s", err.text);

    syn_free(&a);
    syn_free(&b);
    nvfp4_backend_free(be);
}
END_TEST

/* ---- PyTorch layer fixtures (tests/data/models/NAME) ------------------------ */

static void torch_linear_case(const char *model)
{
    char rel[256];
    json_t *ref, *lin;
    nvfp4_error err;
    nvfp4_checkpoint *ck;
    nvfp4_linear l;
    nvfp4_backend *be;
    nvfp4_kweight *w;
    const char *prefix;
    int64_t n, k, rows;
    int w4a16;
    float *wref, *x, *xq, *yref, *y, *row;
    double *bound;
    int32_t *ids;
    size_t len;

    snprintf(rel, sizeof(rel), "models/%s/reference.json", model);
    ref = tload_json(rel);
    lin = json_object_get(ref, "linear");
    ck_assert(lin != NULL);
    prefix = json_string_value(json_object_get(lin, "prefix"));
    n = json_integer_value(json_object_get(lin, "N"));
    k = json_integer_value(json_object_get(lin, "K"));
    rows = json_integer_value(json_object_get(lin, "rows"));
    w4a16 = json_is_true(json_object_get(ref, "w4a16"));
    snprintf(rel, sizeof(rel), "models/%s", model);
    ck = nvfp4_checkpoint_open(tdata(rel), &err);
    ck_assert_msg(ck != NULL, "%s", err.text);
    ck_assert_msg(nvfp4_linear_load(ck, prefix, w4a16 ? NVFP4_SCHEME_W4A16 : NVFP4_SCHEME_W4A4,
                                    n, k, &l, &err) == NVFP4_OK,
                  "%s: %s", model, err.text);
    if (!w4a16) /* MoE: the scale synced over experts that the reference used (§6) */
        l.input_scale = (float)json_real_value(json_object_get(lin, "input_scale_used"));

    snprintf(rel, sizeof(rel), "models/%s/linear_weight.f32", model);
    wref = tload_file(rel, &len);
    ck_assert_uint_eq(len, (size_t)(n * k) * 4);
    snprintf(rel, sizeof(rel), "models/%s/linear_x.f32", model);
    x = tload_file(rel, &len);
    ck_assert_uint_eq(len, (size_t)(rows * k) * 4);
    snprintf(rel, sizeof(rel), "models/%s/linear_xq.f32", model);
    xq = tload_file(rel, &len);
    snprintf(rel, sizeof(rel), "models/%s/linear_y.f32", model);
    yref = tload_file(rel, &len);
    ck_assert_uint_eq(len, (size_t)(rows * n) * 4);

    be = open_cpu();
    w = nvfp4_kweight_upload(be, &l, 1, &err);
    ck_assert_msg(w != NULL, "%s", err.text);

    /* the embedding path dequantizes rows: torch's weight, bit for bit */
    ids = malloc((size_t)n * sizeof(int32_t));
    row = malloc((size_t)(n * k) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)i;
    ck_assert_int_eq(nvfp4_k_embed(be, w, ids, (size_t)n, row, &err), NVFP4_OK);
    ck_assert_msg(memcmp(row, wref, (size_t)(n * k) * 4) == 0, "%s: dequantized weight", model);

    /* y against torch's float32 matmul: both sides round a K-term sum */
    bound = malloc((size_t)(rows * n) * sizeof(double));
    for (int64_t t = 0; t < rows; t++)
        for (int64_t r = 0; r < n; r++) {
            double mag = 0;
            for (int64_t c = 0; c < k; c++)
                mag += fabs((double)xq[t * k + c] * wref[r * k + c]);
            bound[t * n + r] = 2 * gamma_n((size_t)k) * mag + 1e-30;
        }
    y = malloc((size_t)(rows * n) * sizeof(float));
    for (size_t lv = 0; lv < 4; lv++) {
        double ry[1];
        (void)ry;
        run_linear_all_threads(isa_levels[lv], &l, 1, w4a16 ? xq : x, (size_t)rows, y,
                               (size_t)(rows * n));
        for (int64_t i = 0; i < rows * n; i++)
            ck_assert_msg(fabs((double)y[i] - yref[i]) <= bound[i],
                          "%s %s: y[%lld] = %.9g, torch %.9g, allowed %.3g", model,
                          isa_levels[lv], (long long)i, (double)y[i], (double)yref[i], bound[i]);
    }
    nvfp4_kweight_free(w);
    nvfp4_backend_free(be);
    nvfp4_linear_release(&l);
    nvfp4_checkpoint_free(ck);
    json_decref(ref);
    free(wref);
    free(x);
    free(xq);
    free(yref);
    free(y);
    free(row);
    free(ids);
    free(bound);
}

START_TEST(test_torch_linear)
{
    static const char *const models[] = {"llama", "llama_w4a16", "qwen3", "qwen3_moe",
                                         "qwen2_moe", "mixtral"};
    int done = 0;
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        char rel[256];
        FILE *f;
        snprintf(rel, sizeof(rel), "models/%s/linear_y.f32", models[i]);
        f = fopen(tdata(rel), "rb");
        if (!f)
            continue; /* fixture generation still adding models */
        fclose(f);
        torch_linear_case(models[i]);
        done++;
    }
    ck_assert_msg(done >= 2, "expected the llama and llama_w4a16 fixtures at least");
}
END_TEST

/* ---- the other operations ----------------------------------------------------- */

/* Y = rmsnorm(X) * W (eps 1e-6) of M rows of D against float64: three
 * float32 roundings of the result, 4 ulp. */
static void rmsnorm_ref_check(const float *x, const float *w, const float *y, int m, int d)
{
    for (int i = 0; i < m; i++) {
        double ss = 0;
        for (int j = 0; j < d; j++)
            ss += (double)x[i * d + j] * x[i * d + j];
        for (int j = 0; j < d; j++) {
            double r = x[i * d + j] / sqrt(ss / d + 1e-6) * w[j];
            ck_assert_msg(fabs(y[i * d + j] - r) <= 4 * ldexp(fabs(r), -24) + 1e-30,
                          "%d,%d: %.9g vs %.9g", i, j, y[i * d + j], r);
        }
    }
}

START_TEST(test_rmsnorm)
{
    nvfp4_error err;
    nvfp4_backend *be = open_cpu();
    enum { M = 5, D = 67 };
    float x[M * D], w[D], y[M * D], y2[M * D];

    for (int i = 0; i < M * D; i++)
        x[i] = frand(-4, 4);
    for (int i = 0; i < D; i++)
        w[i] = frand(0.5f, 1.5f);
    for (int th = 1; th <= 2; th++) {
        nvfp4_backend_set_threads(be, th);
        ck_assert_int_eq(nvfp4_k_rmsnorm(be, x, w, M, D, 1e-6f, th == 1 ? y : y2, &err),
                         NVFP4_OK);
    }
    ck_assert(memcmp(y, y2, sizeof(y)) == 0);
    rmsnorm_ref_check(x, w, y, M, D);
    /* in place */
    ck_assert_int_eq(nvfp4_k_rmsnorm(be, x, w, M, D, 1e-6f, x, &err), NVFP4_OK);
    ck_assert(memcmp(x, y, sizeof(y)) == 0);
    ck_assert_int_eq(nvfp4_k_rmsnorm(be, x, w, M, 0, 1e-6f, y, &err), NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "d = 0"), "%s", err.text);
    ck_assert_int_eq(nvfp4_k_rmsnorm(be, x, NULL, M, D, 1e-6f, y, &err), NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "weight is NULL"), "%s", err.text);
    nvfp4_backend_free(be);
}
END_TEST

/* ---- the attention's e^x ----------------------------------------------------------- */

#if defined(__GNUC__) && defined(__x86_64__)
/* Order of float32 F on a line through -0 and +0 (ulp distances). */
static int64_t f32_order(float f)
{
    int32_t i;
    memcpy(&i, &f, sizeof(i));
    return i < 0 ? -(int64_t)(i & 0x7FFFFFFF) : i;
}

__attribute__((target("avx512f"))) static void exp16_apply(const float *x, float *y)
{
    _mm512_storeu_ps(y, exp16(_mm512_loadu_ps(x)));
}
#endif

#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx2,fma"))) static void exp8_apply(const float *x, float *y)
{
    _mm256_storeu_ps(y, exp8(_mm256_loadu_ps(x)));
    _mm256_storeu_ps(y + 8, exp8(_mm256_loadu_ps(x + 8)));
}

/* NAME's APPLY (16 lanes of e^x) within 1 ulp of float64 exp rounded to
 * float32 on every 61st float32 from 89 down to -105 (3.7e7 of them:
 * normal, subnormal and zero results) and on -0, +-inf, NaN and arguments
 * past the clamps; with SAME, the very bits of SAME on all of them. */
static void check_vexp(const char *name, void (*apply)(const float *, float *),
                       void (*same)(const float *, float *))
{
    const float special[] = {-0.0f, 0.0f, -INFINITY, INFINITY, NAN, -110.5f, -200.0f, 100.0f,
                             88.72f, 89.0f, -87.5f, -103.9f, -104.0f, -1e-30f, 1e-30f, 0.5f};
    float x[16], y[16], z[16];
    /* under valgrind every 6101st */
    const int step = getenv("NVFP4_TEST_QUICK") ? 6101 : 61;
    int64_t worst = 0;
    float at = 0;

    for (float x0 = 89.0f; x0 > -105.0f;) {
        for (int l = 0; l < 16; l++) {
            x[l] = x0;
            for (int s = 0; s < step; s++)
                x0 = nextafterf(x0, -INFINITY);
        }
        apply(x, y);
        if (same) {
            same(x, z);
            ck_assert_msg(memcmp(y, z, sizeof(y)) == 0, "%s differs near %.9g", name, x[0]);
        }
        for (int l = 0; l < 16; l++) {
            const int64_t d = llabs(f32_order(y[l]) - f32_order((float)exp((double)x[l])));
            if (d > worst)
                worst = d, at = x[l];
        }
    }
    ck_assert_msg(worst <= 1, "%s %lld ulp from float64 exp at %.9g", name, (long long)worst,
                  at);
    apply(special, y);
    if (same) {
        same(special, z);
        for (int l = 0; l < 16; l++)
            ck_assert_msg(memcmp(&y[l], &z[l], sizeof(float)) == 0 || (isnan(y[l]) && isnan(z[l])),
                          "%s(%g) = %.9g, the other %.9g", name, special[l], y[l], z[l]);
    }
    for (int l = 0; l < 16; l++) {
        const float r = (float)exp((double)special[l]);
        if (isnan(r))
            ck_assert_msg(isnan(y[l]), "%s(%g) = %g", name, special[l], y[l]);
        else
            ck_assert_msg(llabs(f32_order(y[l]) - f32_order(r)) <= 1, "%s(%g) = %.9g, not %.9g",
                          name, special[l], y[l], r);
    }
}
#endif

/* exp16 (libkernels/cpu-exp16.h, the AVX-512 softmax's e^x) by check_vexp. */
START_TEST(test_exp16)
{
#if defined(__GNUC__) && defined(__x86_64__)
    if (!__builtin_cpu_supports("avx512f")) {
        fprintf(stderr, "test_exp16: skipped, no AVX-512\n");
        return;
    }
    check_vexp("exp16", exp16_apply, NULL);
#endif
}
END_TEST

/* exp8 (libkernels/cpu-exp8.h, the AVX2 softmax's and SiLU's e^x) by
 * check_vexp, and where the CPU has AVX-512 too with the very bits of
 * exp16 (its comment's claim). */
START_TEST(test_exp8)
{
#if defined(__GNUC__) && defined(__x86_64__)
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        fprintf(stderr, "test_exp8: skipped, no AVX2 and FMA\n");
        return;
    }
    check_vexp("exp8", exp8_apply, __builtin_cpu_supports("avx512f") ? exp16_apply : NULL);
#endif
}
END_TEST

/* ---- a busy machine ------------------------------------------------------------ */

static int busy_stop;

static void *busy_spin(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&busy_stop, __ATOMIC_ACQUIRE))
        ;
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runnable threads on the machine (Linux /proc/loadavg), or -1. */
static long runnable_now(void)
{
    char buf[128], *slash;
    long r = -1;
    FILE *f = fopen("/proc/loadavg", "r");

    if (!f)
        return -1;
    if (fgets(buf, sizeof(buf), f) && (slash = strchr(buf, '/')) != NULL) {
        while (slash > buf && slash[-1] >= '0' && slash[-1] <= '9')
            slash--;
        r = strtol(slash, NULL, 10);
    }
    fclose(f);
    return r;
}

/* With more runnable threads than CPUs the pool stops spinning: idle
 * workers sleep at once and a caller waiting for a claimed chunk sleeps
 * until the worker that holds it signals (libkernels/cpu-pool.c).  Beside
 * NCPU - 1 spinning threads, rmsnorm at 2 threads (one more runnable
 * thread than CPUs), called for 300 ms (long enough for the pool to see
 * the load), gives the bits of 1 thread, held to a float64 reference,
 * every time: no chunk is lost or read before it is written, and no call
 * hangs.  (A caller that stops waiting, or a worker that does not signal,
 * fails it: both checked.) */
START_TEST(test_busy_machine)
{
    enum { MAXSPIN = 64 };
    nvfp4_error err;
    nvfp4_backend *be = open_cpu();
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    const int nspin = ncpu < 2 ? 1 : ncpu - 1 > MAXSPIN ? MAXSPIN : (int)ncpu - 1;
    const int quick = getenv("NVFP4_TEST_QUICK") != NULL;
    const double span = quick ? 0.05 : 0.3;
    /* calls long enough for the workers to claim chunks (under valgrind
     * everything is) */
    const int M = quick ? 16 : 256, D = quick ? 1024 : 4096;
    float *x = malloc(sizeof(float) * M * D), *w = malloc(sizeof(float) * D);
    float *y1 = malloc(sizeof(float) * M * D), *y = malloc(sizeof(float) * M * D);
    pthread_t spin[MAXSPIN];
    long calls = 0, seen = -1;
    int started = 0;
    double t0;

    ck_assert(x && w && y1 && y);
    for (int i = 0; i < M * D; i++)
        x[i] = frand(-4, 4);
    for (int i = 0; i < D; i++)
        w[i] = frand(0.5f, 1.5f);
    nvfp4_backend_set_threads(be, 1);
    ck_assert_int_eq(nvfp4_k_rmsnorm(be, x, w, M, D, 1e-6f, y1, &err), NVFP4_OK);
    rmsnorm_ref_check(x, w, y1, M, D);
    __atomic_store_n(&busy_stop, 0, __ATOMIC_RELEASE);
    while (started < nspin && pthread_create(&spin[started], NULL, busy_spin, NULL) == 0)
        started++;
    ck_assert_int_gt(started, 0);
    nvfp4_backend_set_threads(be, 2);
    t0 = now_s();
    do {
        memset(y, 0xff, sizeof(float) * M * D);
        ck_assert_int_eq(nvfp4_k_rmsnorm(be, x, w, M, D, 1e-6f, y, &err), NVFP4_OK);
        ck_assert_msg(memcmp(y, y1, sizeof(float) * M * D) == 0,
                      "call %ld on a busy machine differs from 1 thread", calls);
        if (++calls == 8)
            seen = runnable_now();
    } while (now_s() - t0 < span || calls < (quick ? 3 : 40));
    __atomic_store_n(&busy_stop, 1, __ATOMIC_RELEASE);
    while (started > 0)
        pthread_join(spin[--started], NULL);
    fprintf(stderr, "busy machine: %ld calls at 2 threads beside %d spinning threads, "
                    "%ld runnable of %ld CPUs seen\n",
            calls, nspin, seen, ncpu);
    free(x);
    free(w);
    free(y1);
    free(y);
    nvfp4_backend_free(be);
}
END_TEST

START_TEST(test_rope)
{
    nvfp4_error err;
    nvfp4_backend *be = open_cpu();
    enum { M = 3, H = 2, HD = 12, ROT = 8 };
    float x[M * H * HD], x0[M * H * HD], inv[ROT / 2];
    int32_t pos[M] = {0, 7, 4000};

    for (int i = 0; i < M * H * HD; i++)
        x[i] = x0[i] = frand(-2, 2);
    for (int i = 0; i < ROT / 2; i++)
        inv[i] = (float)pow(10000.0, -2.0 * i / ROT);
    ck_assert_int_eq(nvfp4_k_rope(be, x, pos, M, H, HD, ROT, inv, 1.0f, &err), NVFP4_OK);
    for (int t = 0; t < M; t++)
        for (int h = 0; h < H; h++) {
            const float *a = x0 + (t * H + h) * HD;
            const float *b = x + (t * H + h) * HD;
            for (int j = 0; j < ROT / 2; j++) {
                /* HF forms the angle as float32(pos) * inv_freq in float32 */
                double ang = (double)((float)pos[t] * inv[j]);
                double c = cos(ang), s = sin(ang);
                double r0 = a[j] * c - a[j + ROT / 2] * s;
                double r1 = a[j + ROT / 2] * c + a[j] * s;
                /* cosf/sinf within 2 ulp plus 3 roundings, |x| <= 2: 1e-6 */
                ck_assert_msg(fabs(b[j] - r0) <= 1e-6 && fabs(b[j + ROT / 2] - r1) <= 1e-6,
                              "t%d h%d j%d", t, h, j);
            }
            /* dimensions past rot_dim are left alone */
            ck_assert(memcmp(a + ROT, b + ROT, (HD - ROT) * sizeof(float)) == 0);
        }
    ck_assert_int_eq(nvfp4_k_rope(be, x, pos, M, H, HD, HD + 2, inv, 1.0f, &err),
                     NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "rot_dim 14") && strstr(err.text, "head_dim 12"), "%s",
                  err.text);
    ck_assert_int_eq(nvfp4_k_rope(be, x, pos, M, H, HD, 7, inv, 1.0f, &err), NVFP4_ERR_INVALID);
    nvfp4_backend_free(be);
}
END_TEST

/* Attention over a contiguous cache of ctx positions, p0 of them cached,
 * m new rows of nh query heads over NKV = 2 KV heads of HD (20: the SIMD
 * dot products' masked tails; 64 and 128: the unrolled AVX-512 bodies): 1
 * and 2 threads bit for bit, the new keys and values in positions
 * p0..p0+m-1, every head against the double-precision reference.  Bound:
 * a float32 score of 20 terms with |q k| <= 2 errs by at most gamma_20 *
 * 40 * scale ~ 1.1e-5, carried into the weights as a relative error;
 * |v| <= 1 and the weights sum to 1, plus the rounding of exp and of a sum
 * of up to ctx terms (ctx * 6e-8 <= 5e-6 here): 3e-5.  The score's bound
 * grows as HD^1.5 (HD terms of gamma_HD, scale 1 / sqrt(HD)), and so is
 * the tolerance scaled. */
static void attention_check(const char *isa, int ctx, int p0, int m, int nh, int hd)
{
    enum { NKV = 2, HDM = 128 };
    const int HD = hd;
    const double tol = pow(HD / 20.0, 1.5);
    nvfp4_error err;
    nvfp4_backend *be;
    const size_t cache = (size_t)ctx * NKV * HD, rows = (size_t)m * (size_t)nh * HD,
                 kvrows = (size_t)m * NKV * HD;
    float *kc = calloc(cache, sizeof(float)), *vc = calloc(cache, sizeof(float)),
          *kc2 = calloc(cache, sizeof(float)), *vc2 = calloc(cache, sizeof(float)),
          *q = malloc(rows * sizeof(float)), *out = malloc(rows * sizeof(float)),
          *out2 = malloc(rows * sizeof(float)), *k = malloc(kvrows * sizeof(float)),
          *v = malloc(kvrows * sizeof(float));
    const float scale = 1.0f / sqrtf((float)HD);

    ck_assert(kc && vc && kc2 && vc2 && q && out && out2 && k && v);
    setenv("NVFP4_CPU_ISA", isa, 1);
    be = open_cpu();
    unsetenv("NVFP4_CPU_ISA");
    for (size_t i = 0; i < (size_t)p0 * NKV * HD; i++) {
        kc[i] = frand(-1, 1);
        vc[i] = frand(-1, 1);
    }
    memcpy(kc2, kc, cache * sizeof(float));
    memcpy(vc2, vc, cache * sizeof(float));
    for (size_t i = 0; i < rows; i++)
        q[i] = frand(-2, 2);
    for (size_t i = 0; i < kvrows; i++)
        k[i] = frand(-1, 1), v[i] = frand(-1, 1);
    nvfp4_backend_set_threads(be, 1);
    ck_assert_int_eq(nvfp4_k_attention(be, q, k, v, kc, vc, (size_t)ctx, (size_t)p0, (size_t)m,
                                       (size_t)nh, NKV, HD, scale, out, &err),
                     NVFP4_OK);
    nvfp4_backend_set_threads(be, 2);
    ck_assert_int_eq(nvfp4_k_attention(be, q, k, v, kc2, vc2, (size_t)ctx, (size_t)p0,
                                       (size_t)m, (size_t)nh, NKV, HD, scale, out2, &err),
                     NVFP4_OK);
    ck_assert(memcmp(out, out2, rows * sizeof(float)) == 0);
    ck_assert(memcmp(kc + (size_t)p0 * NKV * HD, k, kvrows * sizeof(float)) == 0);
    ck_assert(memcmp(vc + (size_t)p0 * NKV * HD, v, kvrows * sizeof(float)) == 0);
    for (int i = 0; i < m; i++)
        for (int h = 0; h < nh; h++) {
            int g = h / (nh / NKV), len = p0 + i + 1;
            double ref[HDM];
            ref_attention(q + (i * nh + h) * HD, kc + g * HD, vc + g * HD, (size_t)len, NKV * HD,
                          HD, scale, 0, NULL, ref);
            for (int j = 0; j < HD; j++)
                ck_assert_msg(fabs(out[(i * nh + h) * HD + j] - ref[j]) <= 3e-5 * tol,
                              "%s nh %d token %d head %d dim %d: %.9g vs %.9g", isa, nh, i, h,
                              j, out[(i * nh + h) * HD + j], ref[j]);
        }
    nvfp4_backend_free(be);
    free(kc), free(vc), free(kc2), free(vc2), free(q), free(out), free(out2), free(k), free(v);
}

/* Positions past the cache and heads that do not group are refused,
 * naming the numbers. */
static void attention_refusals(const char *isa)
{
    enum { CTX = 16, NH = 4, NKV = 2, HD = 20, M = 4 };
    static float kc[CTX * NKV * HD], vc[CTX * NKV * HD];
    float q[M * NH * HD] = {0}, k[M * NKV * HD] = {0}, v[M * NKV * HD] = {0}, out[M * NH * HD];
    nvfp4_error err;
    nvfp4_backend *be;

    setenv("NVFP4_CPU_ISA", isa, 1);
    be = open_cpu();
    unsetenv("NVFP4_CPU_ISA");
    ck_assert_int_eq(nvfp4_k_attention(be, q, k, v, kc, vc, CTX, 14, M, NH, NKV, HD, 0.25f,
                                       out, &err),
                     NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "positions 14..17 exceed the KV cache of 16"), "%s",
                  err.text);
    ck_assert_int_eq(nvfp4_k_attention(be, q, k, v, kc, vc, CTX, 0, M, 3, 2, HD, 0.25f, out,
                                       &err),
                     NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "nh 3, nkv 2"), "%s", err.text);
    nvfp4_backend_free(be);
}

START_TEST(test_attention)
{
    for (int i = 0; i < 3; i++) {
        const char *isa = i == 2 ? "vnni" : i ? "avx2" : "scalar";
        attention_check(isa, 16, 5, 4, 4, 20);
        attention_refusals(isa);
    }
}
END_TEST

/* GQA groups larger than the AVX-512 path's 4 query heads per pass (6: 4
 * and 2, 7: 4 and 3) over a context longer than its 32-position prefetch
 * distance. */
START_TEST(test_attention_groups)
{
    attention_check("scalar", 80, 70, 3, 12, 20);
    /* the AVX2 path (attend_group8) as well wherever the CPU has AVX2 */
    for (int i = 0; i < 2; i++) {
        const char *isa = i ? "avx2" : "vnni";
        attention_check(isa, 80, 70, 3, 12, 20);
        attention_check(isa, 80, 70, 3, 14, 20);
        /* the unrolled bodies for head sizes 64 and 128 */
        attention_check(isa, 80, 70, 3, 12, 64);
        attention_check(isa, 80, 70, 3, 6, 128);
        /* groups of 4 and 8 (two units a KV head): the AVX-512 path's KV
         * heads in one walk (attend_heads), as 1-3 above */
        attention_check(isa, 80, 70, 3, 8, 64);
        attention_check(isa, 80, 70, 3, 16, 64);
        attention_check(isa, 80, 70, 3, 16, 20);
    }
    /* a head size neither 8 nor 16 divides (masked tails of both) */
    attention_check("avx2", 80, 70, 3, 6, 13);
}
END_TEST

/* Paged attention: two sequences with scrambled block tables in one call
 * (one decoding, one prefilling a chunk) give each row the bits of the
 * contiguous-cache attention of its sequence alone; the new rows land in
 * their slots; out-of-range positions, tables and block ids are refused. */
static void attention_paged_case(const char *isa, int hd)
{
    enum { BS = 4, NB = 8, MAXB = 4, NH = 4, NKV = 2, HDM = 128, ROWM = NKV * HDM };
    const int HD = hd, ROW = NKV * hd;
    /* sequence A: 9 cached + 1 new (decode); B: 2 cached + 5 new (prefill) */
    enum { A0 = 9, AM = 1, B0 = 2, BM = 5, M = AM + BM };
    const int32_t tab[2 * MAXB] = {6, 1, 4, 0, /* A */ 3, 7, 0, 0 /* B */};
    static float kp[NB * BS * ROWM], vp[NB * BS * ROWM];
    static float ka[16 * ROWM], va[16 * ROWM], kb[16 * ROWM], vb[16 * ROWM];
    float q[M * NH * HDM], k[M * ROWM], v[M * ROWM], out[M * NH * HDM], want[M * NH * HDM];
    int32_t pos[M], seq[M];
    const float scale = 1.0f / sqrtf((float)HD);
    nvfp4_kv_pages kv;
    nvfp4_error err;
    nvfp4_backend *be;

    setenv("NVFP4_CPU_ISA", isa, 1);
    be = open_cpu();
    unsetenv("NVFP4_CPU_ISA");
    for (int i = 0; i < 16 * ROW; i++)
        ka[i] = frand(-1, 1), va[i] = frand(-1, 1), kb[i] = frand(-1, 1), vb[i] = frand(-1, 1);
    /* the cached positions into their slots */
    for (int p = 0; p < A0; p++) {
        memcpy(kp + ((size_t)tab[p / BS] * BS + p % BS) * ROW, ka + p * ROW, ROW * 4);
        memcpy(vp + ((size_t)tab[p / BS] * BS + p % BS) * ROW, va + p * ROW, ROW * 4);
    }
    for (int p = 0; p < B0; p++) {
        memcpy(kp + ((size_t)tab[MAXB + p / BS] * BS + p % BS) * ROW, kb + p * ROW, ROW * 4);
        memcpy(vp + ((size_t)tab[MAXB + p / BS] * BS + p % BS) * ROW, vb + p * ROW, ROW * 4);
    }
    for (int i = 0; i < M * NH * HD; i++)
        q[i] = frand(-2, 2);
    /* rows: B's chunk, then A's decode token (any order is allowed) */
    for (int i = 0; i < M; i++) {
        int isb = i < BM, p = isb ? B0 + i : A0;
        seq[i] = isb ? 1 : 0;
        pos[i] = p;
        memcpy(k + i * ROW, (isb ? kb : ka) + p * ROW, ROW * 4);
        memcpy(v + i * ROW, (isb ? vb : va) + p * ROW, ROW * 4);
    }
    kv_pages_init(&kv, NB, BS, tab, 2, MAXB, pos, seq, A0 + AM, NVFP4_KV_ELEM_F32, 0, 0);
    kv.k_pool = kp;
    kv.v_pool = vp;
    for (int th = 1; th <= 2; th++) {
        nvfp4_backend_set_threads(be, th);
        ck_assert_int_eq(nvfp4_k_attention_paged(be, q, k, v, &kv, M, NH, NKV, HD, scale, out,
                                                 &err),
                         NVFP4_OK);
        /* the same rows through contiguous caches, one sequence at a time */
        ck_assert_int_eq(nvfp4_k_attention(be, q, k, v, kb, vb, 16, B0, BM, NH, NKV, HD, scale,
                                           want, &err),
                         NVFP4_OK);
        ck_assert_int_eq(nvfp4_k_attention(be, q + BM * NH * HD, k + BM * ROW, v + BM * ROW, ka,
                                           va, 16, A0, AM, NH, NKV, HD, scale,
                                           want + BM * NH * HD, &err),
                         NVFP4_OK);
        ck_assert_msg(memcmp(out, want, (size_t)M * NH * HD * sizeof(float)) == 0, "%s: paged differs", isa);
    }
    for (int i = 0; i < M; i++) {
        const int32_t *t = tab + seq[i] * MAXB;
        ck_assert(memcmp(kp + ((size_t)t[pos[i] / BS] * BS + pos[i] % BS) * ROW, k + i * ROW,
                         ROW * 4) == 0);
        ck_assert(memcmp(vp + ((size_t)t[pos[i] / BS] * BS + pos[i] % BS) * ROW, v + i * ROW,
                         ROW * 4) == 0);
    }
    /* attention sinks (gpt-oss): one logit per head joins each softmax with
     * no value; against float64 (the bound of test_attention plus the sink's
     * own exp); head 3's sink dwarfs every score, so its outputs are ~0.
     * Then with a sliding window of 3 as well (gpt-oss's sliding layers). */
    for (size_t w = 0; w <= 3; w += 3) {
        const float sinks[NH] = {-1.0f, 0.5f, 3.0f, 20.0f};
        kv.sinks = sinks;
        kv.window = w;
        ck_assert_int_eq(nvfp4_k_attention_paged(be, q, k, v, &kv, M, NH, NKV, HD, scale, out,
                                                 &err),
                         NVFP4_OK);
        kv.sinks = NULL;
        kv.window = 0;
        for (int i = 0; i < M; i++)
            for (int h = 0; h < NH; h++) {
                const float *kk = seq[i] ? kb : ka, *vv = seq[i] ? vb : va;
                const int g = h / (NH / NKV);
                double ref[HDM];
                ref_attention(q + (i * NH + h) * HD, kk + g * HD, vv + g * HD,
                              (size_t)pos[i] + 1, ROW, HD, scale, w, &sinks[h], ref);
                for (int j = 0; j < HD; j++) {
                    double o = ref[j];
                    ck_assert_msg(fabs(out[(i * NH + h) * HD + j] - o) <= 3e-5,
                                  "%s sinks, window %zu: row %d head %d dim %d: %.9g vs %.9g",
                                  isa, w, i, h, j, out[(i * NH + h) * HD + j], o);
                    if (h == 3)
                        ck_assert(fabs(o) < 1e-6);
                }
            }
    }
    /* refusals, each naming what is wrong */
    pos[0] = A0 + AM;
    ck_assert_int_eq(nvfp4_k_attention_paged(be, q, k, v, &kv, M, NH, NKV, HD, scale, out, &err),
                     NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "row 0: position 10 (max_len 10)"), "%s", err.text);
    pos[0] = B0;
    seq[1] = 2;
    ck_assert_int_eq(nvfp4_k_attention_paged(be, q, k, v, &kv, M, NH, NKV, HD, scale, out, &err),
                     NVFP4_ERR_INVALID);
    seq[1] = 1;
    {
        int32_t bad[2 * MAXB];
        memcpy(bad, tab, sizeof(bad));
        bad[MAXB + 1] = NB;
        kv.tables = bad;
        ck_assert_int_eq(
            nvfp4_k_attention_paged(be, q, k, v, &kv, M, NH, NKV, HD, scale, out, &err),
            NVFP4_ERR_INVALID);
        ck_assert_msg(strstr(err.text, "block 1 of table 1 is 8"), "%s", err.text);
        kv.tables = tab;
    }
    kv.max_len = MAXB * BS + 1;
    ck_assert_int_eq(nvfp4_k_attention_paged(be, q, k, v, &kv, M, NH, NKV, HD, scale, out, &err),
                     NVFP4_ERR_INVALID);
    kv.max_len = A0 + AM;
    ck_assert_int_eq(nvfp4_k_attention_paged(be, q, k, v, &kv, M, 3, 2, HD, scale, out, &err),
                     NVFP4_ERR_INVALID);
    ck_assert_int_eq(nvfp4_k_attention_paged(be, q, k, v, NULL, M, NH, NKV, HD, scale, out, &err),
                     NVFP4_ERR_INVALID);
    ck_assert(nvfp4_backend_supports(be, NVFP4_OP_ATTENTION_PAGED));
    ck_assert_str_eq(nvfp4_op_name(NVFP4_OP_ATTENTION_PAGED), "attention_paged");
    nvfp4_backend_free(be);
}

/* FP8 E4M3 pools (NVFP4_KV_ELEM_FP8_E4M3): the new rows are stored as
 * libquant's e4m3(x / scale) bytes (saturating ones too), and every output
 * is the same bits as float32 pools and rows quantize-dequantized with
 * libquant's codec (the semantics test-model's fixtures check against
 * PyTorch), with and without a sliding window, at 1 and 2 threads. */
static float qdq8(float x, float s)
{
    return nvfp4_fp8_e4m3_decode(nvfp4_fp8_e4m3_encode(x / s)) * s;
}

static void attention_paged_fp8_case(const char *isa, int hd)
{
    enum { BS = 4, NB = 8, MAXB = 4, NH = 4, NKV = 2, HDM = 128, ROWM = NKV * HDM };
    const int HD = hd, ROW = NKV * hd;
    enum { A0 = 9, AM = 1, B0 = 2, BM = 5, M = AM + BM };
    const int32_t tab[2 * MAXB] = {6, 1, 4, 0, /* A */ 3, 7, 0, 0 /* B */};
    const float ks = 0.0123f, vs = 0.0371f;
    static float kp[NB * BS * ROWM], vp[NB * BS * ROWM];
    static uint8_t kp8[NB * BS * ROWM], vp8[NB * BS * ROWM];
    float q[M * NH * HDM], k[M * ROWM], v[M * ROWM], kq[M * ROWM], vq[M * ROWM];
    float out[M * NH * HDM], want[M * NH * HDM];
    int32_t pos[M], seq[M];
    const float scale = 1.0f / sqrtf((float)HD);
    nvfp4_kv_pages kv, kf;
    nvfp4_error err;
    nvfp4_backend *be;

    setenv("NVFP4_CPU_ISA", isa, 1);
    be = open_cpu();
    unsetenv("NVFP4_CPU_ISA");
    /* cached slots: the same values as bytes and as their float32 QDQ */
    for (int i = 0; i < NB * BS * ROW; i++) {
        float a = frand(-3, 3), b = frand(-9, 9);
        kp8[i] = nvfp4_fp8_e4m3_encode(a / ks);
        vp8[i] = nvfp4_fp8_e4m3_encode(b / vs);
        kp[i] = qdq8(a, ks);
        vp[i] = qdq8(b, vs);
    }
    /* the two NaN codes (S 1111 111), which the AVX-512 dequantization
     * maps apart: a key of A's position 0, a value of B's position 1 */
    kp8[6 * BS * ROW + 1] = 0x7F;
    kp[6 * BS * ROW + 1] = nvfp4_fp8_e4m3_decode(0x7F) * ks;
    vp8[(3 * BS + 1) * ROW + 2] = 0xFF;
    vp[(3 * BS + 1) * ROW + 2] = nvfp4_fp8_e4m3_decode(0xFF) * vs;
    for (int i = 0; i < M * NH * HD; i++)
        q[i] = frand(-2, 2);
    for (int i = 0; i < M * ROW; i++) {
        k[i] = frand(-3, 3);
        v[i] = frand(-9, 9);
    }
    k[3] = 40.0f; /* past 448 * ks: saturates to 448 */
    v[7] = -100.0f;
    for (int i = 0; i < M * ROW; i++)
        kq[i] = qdq8(k[i], ks), vq[i] = qdq8(v[i], vs);
    for (int i = 0; i < M; i++) {
        int isb = i < BM;
        seq[i] = isb ? 1 : 0;
        pos[i] = isb ? B0 + i : A0;
    }
    kv_pages_init(&kf, NB, BS, tab, 2, MAXB, pos, seq, A0 + AM, NVFP4_KV_ELEM_F32, 0, 0);
    kv_pages_init(&kv, NB, BS, tab, 2, MAXB, pos, seq, A0 + AM, NVFP4_KV_ELEM_FP8_E4M3, ks, vs);
    kf.k_pool = kp;
    kf.v_pool = vp;
    kv.k_pool = kp8;
    kv.v_pool = vp8;
    for (int w = 0; w < 2; w++) {
        kv.window = kf.window = w ? 3 : 0;
        for (int th = 1; th <= 2; th++) {
            nvfp4_backend_set_threads(be, th);
            ck_assert_int_eq(nvfp4_k_attention_paged(be, q, kq, vq, &kf, M, NH, NKV, HD, scale,
                                                     want, &err),
                             NVFP4_OK);
            ck_assert_int_eq(nvfp4_k_attention_paged(be, q, k, v, &kv, M, NH, NKV, HD, scale,
                                                     out, &err),
                             NVFP4_OK);
            ck_assert_msg(memcmp(out, want, (size_t)M * NH * HD * sizeof(float)) == 0,
                          "%s: FP8 pools differ from float32 QDQ (window %zu, %d threads)", isa,
                          kv.window, th);
            if (!w) { /* the NaN key and value reach their heads */
                ck_assert(isnan(out[(AM + BM - 1) * NH * HD]));
                ck_assert(isnan(out[(BM - 1) * NH * HD + 2]));
                ck_assert(!isnan(out[(BM - 1) * NH * HD + 3]));
            }
        }
    }
    for (int i = 0; i < M; i++) {
        const int32_t *t = tab + seq[i] * MAXB;
        size_t slot = (size_t)t[pos[i] / BS] * BS + pos[i] % BS;
        for (int d = 0; d < ROW; d++) {
            ck_assert_uint_eq(kp8[slot * ROW + d], nvfp4_fp8_e4m3_encode(k[i * ROW + d] / ks));
            ck_assert_uint_eq(vp8[slot * ROW + d], nvfp4_fp8_e4m3_encode(v[i * ROW + d] / vs));
        }
    }
    ck_assert_uint_eq(kp8[((size_t)tab[MAXB + B0 / BS] * BS + B0 % BS) * ROW + 3], 0x7E);
    /* refusals: a scale that is not finite and > 0, an unknown element type */
    kv.v_scale = 0.0f;
    ck_assert_int_eq(nvfp4_k_attention_paged(be, q, k, v, &kv, M, NH, NKV, HD, scale, out, &err),
                     NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "finite scales > 0"), "%s", err.text);
    kv.v_scale = vs;
    kv.k_scale = NAN;
    ck_assert_int_eq(nvfp4_k_attention_paged(be, q, k, v, &kv, M, NH, NKV, HD, scale, out, &err),
                     NVFP4_ERR_INVALID);
    kv.k_scale = ks;
    kv.dtype = (nvfp4_kv_elem)7;
    ck_assert_int_eq(nvfp4_k_attention_paged(be, q, k, v, &kv, M, NH, NKV, HD, scale, out, &err),
                     NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "KV element type 7"), "%s", err.text);
    nvfp4_backend_free(be);
}

/* A prefill's rows (AVX-512, attn_rows_range: blocks of up to 16 rows of
 * one sequence over keys transposed a tile at a time; AVX2: attend_group8
 * row by row) give each row the bits it gets alone (a decode step,
 * attend_group or attend_group8) with the backend at ISA: 37 rows after 30 cached
 * positions (blocks of 16, 16 and 5) and a second sequence's 3 rows (fewer
 * than a block's minimum: row by row) through scrambled block tables, 6
 * query heads of 2 KV heads (groups of 4: 4 and 2 per pass), head size HD
 * (the callers: 64, 80, 96, 128; 20 for AVX2's masked tails), with and without a sliding window (the rows of a block
 * start at different positions) and sinks, at 1 and 2 threads;
 * every row also against float64.  Bound as attention_check's, scaled by
 * HD^1.5, and by QS, the queries' scale: at 400 the scores spread over
 * hundreds, where e^(score - max) of most positions would be subnormal,
 * and no operation may underflow (each would cost a microcode assist on
 * x86; the one thread's floating-point flags tell). */
static void attention_rows_case(const char *isa, int hd, float qs)
{
    enum { BS = 16, NB = 12, MAXB = 6, NH = 6, NKV = 2, HDM = 128, ROWM = NKV * HDM };
    enum { A0 = 30, AM = 37, B0 = 7, BM = 3, M = AM + BM, CTX = MAXB * BS };
    const int HD = hd, ROW = NKV * hd;
    const int32_t tab[2 * MAXB] = {9, 2, 7, 0, 5, 11, /* A */ 3, 1, 0, 0, 0, 0 /* B */};
    static float kp[NB * BS * ROWM], vp[NB * BS * ROWM], ks[2][CTX * ROWM], vs[2][CTX * ROWM];
    static float q[M * NH * HDM], k[M * ROWM], v[M * ROWM], out[M * NH * HDM],
        one[NH * HDM];
    const float sinks[NH] = {-1.0f, 0.5f, 3.0f, 1.0f, -2.0f, 0.0f};
    const float scale = 1.0f / sqrtf((float)HD);
    const double tol = 3e-5 * pow(HD / 20.0, 1.5) * qs;
    int32_t pos[M], seq[M];
    nvfp4_kv_pages kv;
    nvfp4_error err;
    nvfp4_backend *be;

    setenv("NVFP4_CPU_ISA", isa, 1);
    be = open_cpu();
    unsetenv("NVFP4_CPU_ISA");
    for (int sq = 0; sq < 2; sq++)
        for (int i = 0; i < CTX * ROW; i++)
            ks[sq][i] = frand(-1, 1), vs[sq][i] = frand(-1, 1);
    for (int sq = 0; sq < 2; sq++)
        for (int p = 0; p < (sq ? B0 : A0); p++) {
            const int32_t *t = tab + sq * MAXB;
            memcpy(kp + ((size_t)t[p / BS] * BS + p % BS) * ROW, ks[sq] + p * ROW, ROW * 4);
            memcpy(vp + ((size_t)t[p / BS] * BS + p % BS) * ROW, vs[sq] + p * ROW, ROW * 4);
        }
    for (int i = 0; i < M * NH * HD; i++)
        q[i] = frand(-2, 2) * qs;
    for (int i = 0; i < M; i++) {
        const int sq = i >= AM;
        seq[i] = sq;
        pos[i] = sq ? B0 + i - AM : A0 + i;
        memcpy(k + i * ROW, ks[sq] + pos[i] * ROW, ROW * 4);
        memcpy(v + i * ROW, vs[sq] + pos[i] * ROW, ROW * 4);
    }
    kv_pages_init(&kv, NB, BS, tab, 2, MAXB, pos, seq, CTX, NVFP4_KV_ELEM_F32, 0, 0);
    kv.k_pool = kp;
    kv.v_pool = vp;
    for (int c = 0; c < 4; c++) {
        kv.window = c & 1 ? 20 : 0;
        kv.sinks = c & 2 ? sinks : NULL;
        for (int th = 1; th <= 2; th++) {
            nvfp4_backend_set_threads(be, th);
            feclearexcept(FE_UNDERFLOW);
            ck_assert_int_eq(nvfp4_k_attention_paged(be, q, k, v, &kv, M, NH, NKV, HD, scale,
                                                     out, &err),
                             NVFP4_OK);
            if (th == 1 && vector_attention_here(isa))
                ck_assert_msg(!fetestexcept(FE_UNDERFLOW),
                              "%s hd %d case %d scale %g: an operation underflowed", isa, hd, c,
                              qs);
            for (int i = 0; i < M; i++) {
                nvfp4_kv_pages k1 = kv;
                k1.pos = pos + i;
                k1.seq = seq + i;
                ck_assert_int_eq(nvfp4_k_attention_paged(be, q + i * NH * HD, k + i * ROW,
                                                         v + i * ROW, &k1, 1, NH, NKV, HD, scale,
                                                         one, &err),
                                 NVFP4_OK);
                ck_assert_msg(memcmp(out + i * NH * HD, one, (size_t)NH * HD * 4) == 0,
                              "%s hd %d case %d scale %g threads %d: row %d differs from the "
                              "row alone",
                              isa, hd, c, qs, th, i);
                for (int h = 0; h < NH; h++) {
                    double ref[HDM];
                    ref_attention(q + (i * NH + h) * HD, ks[seq[i]] + h / 3 * HD,
                                  vs[seq[i]] + h / 3 * HD, (size_t)pos[i] + 1, ROW, HD, scale,
                                  kv.window, kv.sinks ? &sinks[h] : NULL, ref);
                    for (int d = 0; d < HD; d++)
                        ck_assert_msg(fabs(out[(i * NH + h) * HD + d] - ref[d]) <= tol,
                                      "%s hd %d case %d row %d head %d dim %d: %.9g vs %.9g",
                                      isa, hd, c, i, h, d, out[(i * NH + h) * HD + d], ref[d]);
                }
            }
        }
    }
    nvfp4_backend_free(be);
}

START_TEST(test_attention_rows)
{
    /* the AVX-512 rows (keys transposed), then AVX2's (attend_group8 row
     * by row, the same function as a decode step's), also at head size 20
     * (masked tails) */
    for (int i = 0; i < 2; i++) {
        const char *isa = i ? "avx2" : "vnni";
        attention_rows_case(isa, 64, 1);
        attention_rows_case(isa, 80, 1);
        attention_rows_case(isa, 96, 1);
        attention_rows_case(isa, 128, 1);
        attention_rows_case(isa, 64, 400);
    }
    attention_rows_case("avx2", 20, 1);
    attention_rows_case("avx2", 20, 400);
}
END_TEST

START_TEST(test_attention_paged)
{
    /* head sizes: 20 (tails), 64 and 128 (attend_group's unrolled bodies) */
    for (int hd = 20; hd <= 128; hd = hd == 20 ? 64 : 2 * hd) {
        attention_paged_case("scalar", hd);
        attention_paged_case("avx2", hd);
        attention_paged_case("vnni", hd);
        attention_paged_fp8_case("scalar", hd);
        attention_paged_fp8_case("avx2", hd); /* FP8 rows through vgatherdps */
        attention_paged_fp8_case("avx512", hd); /* FP8 rows through binary16 */
        attention_paged_fp8_case("vnni", hd);   /* through bfloat16 tables where VBMI */
    }
}
END_TEST

/* glu (GeGLU, clamped SwiGLU) and scale against float64, scalar and
 * AVX-512 (rows of 61: three 16-lane steps and a tail of 13): inputs
 * beyond the clamp on both sides, zeros of up + 1, GeGLU arguments where
 * tanh saturates (|inner| past 9 and past 44, e^2|z| infinite) or is near
 * 0, NaN gates and ups (NaN out, as the scalar comparisons and libm keep
 * it), and the argument checks. */
START_TEST(test_glu_scale)
{
    nvfp4_error err;
    nvfp4_backend *be;
    enum { M = 4, I = 61 };
    const float alpha = 1.702f, limit = 2.5f;
    float gu[M * 2 * I], o[M * I], y[M * 2 * I];

    for (int i = 0; i < M * 2 * I; i++)
        gu[i] = frand(-6, 6);
    gu[1] = -1.0f; /* up + 1 == 0 (interleaved) */
    gu[2] = limit;
    gu[4] = -30.0f, gu[5] = 30.0f, gu[6] = 1e-4f, gu[7] = -1e-3f, gu[8] = 300.0f;
    gu[9] = -300.0f;
    gu[2 * I + 2 * 50] = NAN; /* a gate (both layouts: row 1, j 100 / 2 * 50) */
    gu[2 * 2 * I + 2 * 57 + 1] = NAN; /* an up of the clamped SwiGLU, a gate of GeGLU */
    for (int isa = 0; isa < 2; isa++) {
        setenv("NVFP4_CPU_ISA", isa ? "vnni" : "scalar", 1);
        be = open_cpu();
        unsetenv("NVFP4_CPU_ISA");
        for (int kind = NVFP4_GLU_GELU_TANH; kind <= NVFP4_GLU_SWIGLU_OAI; kind++) {
            ck_assert_int_eq(
                nvfp4_k_glu(be, (nvfp4_glu_kind)kind, gu, M, I, alpha, limit, o, &err),
                NVFP4_OK);
            for (int r = 0; r < M; r++)
                for (int j = 0; j < I; j++) {
                    /* the clamped SwiGLU takes gate and up interleaved */
                    int gi = kind == NVFP4_GLU_SWIGLU_OAI ? 2 * j : j;
                    int ui = kind == NVFP4_GLU_SWIGLU_OAI ? 2 * j + 1 : I + j;
                    double tol, want = glu_ref(kind, gu[r * 2 * I + gi], gu[r * 2 * I + ui],
                                               alpha, limit, &tol);
                    if (isnan(want)) {
                        ck_assert_msg(isnan(o[r * I + j]), "isa %d glu kind %d [%d][%d] = %.9g, "
                                      "reference NaN", isa, kind, r, j, o[r * I + j]);
                        continue;
                    }
                    ck_assert_msg(fabs(o[r * I + j] - want) <= tol,
                                  "isa %d glu kind %d [%d][%d] = %.9g, reference %.9g (tol %g)",
                                  isa, kind, r, j, o[r * I + j], want, tol);
                }
        }
        if (isa == 0)
            nvfp4_backend_free(be);
    }
    /* SiLU through glu is silu_mul */
    ck_assert_int_eq(nvfp4_k_glu(be, NVFP4_GLU_SILU, gu, M, I, 0, 0, o, &err), NVFP4_OK);
    ck_assert_int_eq(nvfp4_k_silu_mul(be, gu, M, I, y, &err), NVFP4_OK);
    ck_assert(memcmp(o, y, sizeof(float) * M * I) == 0);
    /* scale: one float32 product each, in place */
    memcpy(y, gu, sizeof(gu));
    ck_assert_int_eq(nvfp4_k_scale(be, y, M * 2 * I, 45.254833f, y, &err), NVFP4_OK);
    for (int i = 0; i < M * 2 * I; i++)
        ck_assert(y[i] == gu[i] * 45.254833f || (isnan(y[i]) && isnan(gu[i])));
    /* bad arguments */
    ck_assert_int_eq(nvfp4_k_glu(be, NVFP4_GLU_COUNT, gu, M, I, alpha, limit, o, &err),
                     NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "unknown activation kind"), "%s", err.text);
    ck_assert_int_eq(nvfp4_k_glu(be, NVFP4_GLU_SWIGLU_OAI, gu, M, I, alpha, 0.0f, o, &err),
                     NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "limit"), "%s", err.text);
    ck_assert_int_eq(nvfp4_k_glu(be, NVFP4_GLU_SWIGLU_OAI, gu, M, I, NAN, limit, o, &err),
                     NVFP4_ERR_INVALID);
    ck_assert_int_eq(nvfp4_k_glu(be, NVFP4_GLU_GELU_TANH, gu, M, 0, 0, 0, o, &err),
                     NVFP4_ERR_INVALID);
    ck_assert_int_eq(nvfp4_k_glu(be, NVFP4_GLU_GELU_TANH, NULL, M, I, 0, 0, o, &err),
                     NVFP4_ERR_INVALID);
    ck_assert_int_eq(nvfp4_k_scale(be, gu, 4, INFINITY, y, &err), NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "finite"), "%s", err.text);
    ck_assert_int_eq(nvfp4_k_scale(be, NULL, 4, 2.0f, y, &err), NVFP4_ERR_INVALID);
    ck_assert_int_eq(nvfp4_k_scale(be, NULL, 0, 2.0f, NULL, &err), NVFP4_OK);
    ck_assert(nvfp4_backend_supports(be, NVFP4_OP_GLU));
    ck_assert(nvfp4_backend_supports(be, NVFP4_OP_SCALE));
    ck_assert_str_eq(nvfp4_op_name(NVFP4_OP_GLU), "glu");
    ck_assert_str_eq(nvfp4_op_name(NVFP4_OP_SCALE), "scale");
    nvfp4_backend_free(be);
}
END_TEST

START_TEST(test_rowops)
{
    nvfp4_error err;
    nvfp4_backend *be = open_cpu();
    enum { M = 3, N = 37 };
    float x[M * N], y[M * N], a[M * N], g[M * 2 * N], o[M * N];
    int32_t am[M];

    for (int i = 0; i < M * N; i++)
        x[i] = frand(-30, 30);
    x[5] = x[9] = 100.0f; /* tie in row 0: first index wins */
    x[N + 3] = -INFINITY;
    ck_assert_int_eq(nvfp4_k_softmax(be, x, M, N, y, &err), NVFP4_OK);
    ck_assert_int_eq(nvfp4_k_logsoftmax(be, x, M, N, a, &err), NVFP4_OK);
    ck_assert_int_eq(nvfp4_k_argmax(be, x, M, N, am, &err), NVFP4_OK);
    for (int i = 0; i < M; i++) {
        double mx = -1e300, sum = 0;
        int best = 0;
        for (int j = 0; j < N; j++) {
            mx = fmax(mx, x[i * N + j]);
            if (x[i * N + j] > x[i * N + best])
                best = j;
        }
        for (int j = 0; j < N; j++)
            sum += exp((double)x[i * N + j] - mx);
        ck_assert_int_eq(am[i], best);
        for (int j = 0; j < N; j++) {
            double p = exp((double)x[i * N + j] - mx) / sum;
            double lp = ((double)x[i * N + j] - mx) - log(sum);
            /* float32 x - max (relative error 2^-24 of |x - max|, carried into
             * exp), float32 exp and a 37-term float sum: 1e-6 relative more */
            ck_assert_msg(y[i * N + j] == p ||
                              fabs(y[i * N + j] - p) <= p * (1e-6 + 1.2e-7 * fabs((double)x[i * N + j] - mx)) + 1e-30,
                          "softmax %d,%d: %.9g vs %.9g", i, j, y[i * N + j], p);
            if (isinf(lp))
                ck_assert(isinf(a[i * N + j]) && a[i * N + j] < 0);
            else /* |lp| <= 130: a few float32 ulps of the difference */
                ck_assert_msg(fabs(a[i * N + j] - lp) <= 4e-5, "logsoftmax %d,%d: %.9g vs %.9g",
                              i, j, a[i * N + j], lp);
        }
    }
    ck_assert_int_eq(am[0], 5);
    /* in place */
    memcpy(a, x, sizeof(x));
    ck_assert_int_eq(nvfp4_k_softmax(be, a, M, N, a, &err), NVFP4_OK);
    ck_assert(memcmp(a, y, sizeof(y)) == 0);

    /* silu_mul and add */
    for (int i = 0; i < M * 2 * N; i++)
        g[i] = frand(-8, 8);
    {
        /* gates where e^-g overflows, underflows or nears either; the
         * row of 37 takes the 16-lane kernel's masked tail */
        static const float edge[] = {100.0f, -100.0f, 88.5f, -88.5f, 89.5f, -89.5f,
                                     0.0f,   -0.0f,   20.0f, -20.0f, 1e-30f, -120.0f};
        for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++)
            g[(i % M) * 2 * N + 3 * i] = edge[i];
    }
    /* and no subnormal e^-g on the way in the AVX-512 and AVX2 kernels (a
     * microcode assist each; a row this short runs on the calling thread,
     * whose flags tell) */
    feclearexcept(FE_UNDERFLOW);
    ck_assert_int_eq(nvfp4_k_silu_mul(be, g, M, N, o, &err), NVFP4_OK);
    ck_assert(!vector_here() || !fetestexcept(FE_UNDERFLOW));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double gg = g[i * 2 * N + j], u = g[i * 2 * N + N + j];
            double r = gg / (1 + exp(-gg)) * u;
            ck_assert_msg(fabs(o[i * N + j] - r) <= 1e-6 * fabs(r) + 1e-30, "silu %d,%d", i, j);
        }
    ck_assert_int_eq(nvfp4_k_add(be, x, y, M * N, a, &err), NVFP4_OK);
    for (int i = 0; i < M * N; i++)
        ck_assert(a[i] == x[i] + y[i]); /* one float32 rounding, same as the reference */
    ck_assert_int_eq(nvfp4_k_add(be, a, a, M * N, a, &err), NVFP4_OK);
    /* gate_add: y += sigmoid(gate) * x per row; float64 reference, the
     * float32 sigmoid (expf faithful, two roundings) and one multiply-add:
     * a few ulps of the largest term */
    {
        float gate[M], before[M * N];
        for (int i = 0; i < M; i++)
            gate[i] = frand(-10, 10);
        for (int i = 0; i < M * N; i++)
            a[i] = before[i] = frand(-4, 4);
        ck_assert_int_eq(nvfp4_k_gate_add(be, g, gate, M, N, a, &err), NVFP4_OK);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double sg = 1 / (1 + exp(-(double)gate[i]));
                double r = (double)before[i * N + j] + sg * g[i * N + j];
                double big = fabs((double)before[i * N + j]) + fabs(sg * g[i * N + j]);
                ck_assert_msg(fabs(a[i * N + j] - r) <= 5e-7 * big + 1e-30,
                              "gate_add %d,%d: %.9g vs %.9g", i, j, a[i * N + j], r);
            }
        ck_assert_int_eq(nvfp4_k_gate_add(be, x, NULL, M, N, a, &err), NVFP4_ERR_INVALID);
        ck_assert_msg(strstr(err.text, "gate is NULL"), "%s", err.text);
    }
    ck_assert_int_eq(nvfp4_k_softmax(be, x, M, 0, y, &err), NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "n = 0"), "%s", err.text);
    ck_assert_int_eq(nvfp4_k_argmax(be, NULL, M, N, am, &err), NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "x is NULL"), "%s", err.text);
    ck_assert_int_eq(nvfp4_k_silu_mul(be, g, M, 0, o, &err), NVFP4_ERR_INVALID);
    /* m == 0 is a no-op even with NULL buffers */
    ck_assert_int_eq(nvfp4_k_softmax(be, NULL, 0, N, NULL, &err), NVFP4_OK);
    nvfp4_backend_free(be);
}
END_TEST

START_TEST(test_topk)
{
    nvfp4_error err;
    nvfp4_backend *be = open_cpu();
    float lg[2 * 6] = {0.5f, 2.0f, 2.0f, -1.0f, 0.0f, 1.0f, /* tie: 1 before 2 */
                       3.0f, -2.0f, 0.1f, 0.2f, 0.3f, 0.4f};
    int32_t idx[2 * 3];
    float w[2 * 3];

    for (int renorm = 0; renorm < 2; renorm++) {
        ck_assert_int_eq(nvfp4_k_topk(be, lg, 2, 6, 3, renorm, idx, w, &err), NVFP4_OK);
        ck_assert_int_eq(idx[0], 1);
        ck_assert_int_eq(idx[1], 2);
        ck_assert_int_eq(idx[2], 5);
        ck_assert_int_eq(idx[3], 0);
        ck_assert_int_eq(idx[4], 5);
        ck_assert_int_eq(idx[5], 4);
        for (int i = 0; i < 2; i++) {
            double sum = 0, pick = 0;
            for (int j = 0; j < 6; j++)
                sum += exp(lg[i * 6 + j]);
            for (int j = 0; j < 3; j++)
                pick += exp(lg[i * 6 + idx[i * 3 + j]]) / sum;
            for (int j = 0; j < 3; j++) {
                double p = exp(lg[i * 6 + idx[i * 3 + j]]) / sum;
                if (renorm)
                    p /= pick;
                ck_assert_msg(fabs(w[i * 3 + j] - p) <= 1e-6 * p, "row %d slot %d", i, j);
            }
        }
    }
    ck_assert_int_eq(nvfp4_k_topk(be, lg, 2, 6, 7, 1, idx, w, &err), NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "k = 7, experts = 6"), "%s", err.text);
    nvfp4_backend_free(be);
}
END_TEST

/* Row Q of the fused gate/up weight [G rows | U rows] (I rows each). */
static double fused_w(const nvfp4_linear *g, const nvfp4_linear *u, int i, int q, int c)
{
    return q < i ? syn_w(g, q, c) : syn_w(u, q - i, c);
}

START_TEST(test_moe)
{
    nvfp4_error err;
    nvfp4_backend *be;
    enum { E = 3, H = 32, I = 48, M = 5, K = 2 };
    syn_linear g[E], u[E], d[E];
    nvfp4_kweight *w13[E], *w2[E];
    float x[M * H], y[M * H], y2[M * H];
    int32_t idx[M * K] = {0, 2, 2, 1, 1, 0, 2, 2, 0, 1};
    float wt[M * K] = {0.7f, 0.3f, 0.6f, 0.4f, 0.5f, 0.5f, 0.2f, 0.1f, 0.9f, 0.1f};

    be = open_cpu();
    for (int e = 0; e < E; e++) {
        nvfp4_linear p[2];
        syn_make(&g[e], "experts.gate", NVFP4_SCHEME_W4A16, I, H, 0.01f, 0);
        syn_make(&u[e], "experts.up", NVFP4_SCHEME_W4A16, I, H, 0.01f, 0);
        syn_make(&d[e], "experts.down", NVFP4_SCHEME_W4A16, H, I, 0.02f, 0);
        p[0] = g[e].lin;
        p[1] = u[e].lin;
        w13[e] = nvfp4_kweight_upload(be, p, 2, &err);
        w2[e] = nvfp4_kweight_upload(be, &d[e].lin, 1, &err);
        ck_assert(w13[e] && w2[e]);
    }
    for (int i = 0; i < M * H; i++)
        x[i] = frand(-2, 2);
    nvfp4_backend_set_threads(be, 1);
    ck_assert_int_eq(nvfp4_k_moe(be, w13, w2, E, x, M, idx, wt, K, y, &err), NVFP4_OK);
    nvfp4_backend_set_threads(be, 2);
    ck_assert_int_eq(nvfp4_k_moe(be, w13, w2, E, x, M, idx, wt, K, y2, &err), NVFP4_OK);
    ck_assert(memcmp(y, y2, sizeof(y)) == 0);
    /* kind 0: SiLU (nvfp4_k_moe); kind 1: gpt-oss's clamped SwiGLU with a
     * limit small enough that many gates and ups are clamped */
    for (int kind = 0; kind < 2; kind++) {
        for (int t = 0; t < M; t++) {
            const double alpha = 1.702f, limit = 0.05f;
            double acc[H] = {0}, mag[H] = {0};
            if (kind == 1 && t == 0) {
                ck_assert_int_eq(nvfp4_k_moe_glu(be, w13, w2, E, x, M, idx, wt, K,
                                                 NVFP4_GLU_SWIGLU_OAI, 1.702f, 0.05f, y, &err),
                                 NVFP4_OK);
                nvfp4_backend_set_threads(be, 1);
                ck_assert_int_eq(nvfp4_k_moe_glu(be, w13, w2, E, x, M, idx, wt, K,
                                                 NVFP4_GLU_SWIGLU_OAI, 1.702f, 0.05f, y2, &err),
                                 NVFP4_OK);
                ck_assert(memcmp(y, y2, sizeof(y)) == 0);
            }
            for (int j = 0; j < K; j++) {
                int e = idx[t * K + j];
                double h[I], hm[I];
                for (int r = 0; r < I; r++) {
                    double gg = 0, uu = 0, gm = 0, um = 0;
                    for (int c = 0; c < H; c++) {
                        const int gr = kind ? 2 * r : r, ur = kind ? 2 * r + 1 : I + r;
                        const double wg = fused_w(&g[e].lin, &u[e].lin, I, gr, c);
                        const double wu = fused_w(&g[e].lin, &u[e].lin, I, ur, c);
                        gg += (double)x[t * H + c] * wg;
                        uu += (double)x[t * H + c] * wu;
                        gm += fabs((double)x[t * H + c] * wg);
                        um += fabs((double)x[t * H + c] * wu);
                    }
                    if (kind == 0) {
                        h[r] = gg / (1 + exp(-gg)) * uu;
                        /* error of silu(g)*u from the float32 g and u, and its rounding */
                        hm[r] = (fabs(uu) * gm * 1.2 + fabs(gg) * um) * gamma_n(H) +
                                4e-7 * fabs(h[r]);
                    } else {
                        double cg = gg > limit ? limit : gg;
                        double cu = uu > limit ? limit : uu < -limit ? -limit : uu;
                        h[r] = (cu + 1) * (cg / (1 + exp(-alpha * cg)));
                        /* the same bound with (u + 1) and the slope alpha */
                        hm[r] = ((fabs(cu) + 1) * gm * (1.2 + alpha * fabs(cg)) + fabs(cg) * um) *
                                    gamma_n(H) +
                                8e-7 * (fabs(cu) + 1) * fabs(cg);
                    }
                }
                for (int r = 0; r < H; r++) {
                    double o = 0, om = 0;
                    for (int c = 0; c < I; c++) {
                        o += h[c] * syn_w(&d[e].lin, r, c);
                        om += fabs(h[c] * syn_w(&d[e].lin, r, c)) * gamma_n(I) +
                              hm[c] * fabs(syn_w(&d[e].lin, r, c));
                    }
                    acc[r] += wt[t * K + j] * o;
                    mag[r] += wt[t * K + j] * om + fabs(wt[t * K + j] * o) * 1e-7;
                }
            }
            for (int r = 0; r < H; r++)
                ck_assert_msg(fabs(y[t * H + r] - acc[r]) <= mag[r] + 1e-30,
                              "kind %d token %d dim %d: %.9g vs %.9g (allowed %.3g)", kind, t, r,
                              y[t * H + r], acc[r], mag[r]);
        }
    }
    ck_assert_int_eq(nvfp4_k_moe_glu(be, w13, w2, E, x, M, idx, wt, K, NVFP4_GLU_SWIGLU_OAI,
                                     1.702f, -1.0f, y, &err),
                     NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "limit"), "%s", err.text);
    idx[3] = 3;
    ck_assert_int_eq(nvfp4_k_moe(be, w13, w2, E, x, M, idx, wt, K, y, &err), NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "expert index 3 (token 1, slot 1) is outside 0..2"), "%s",
                  err.text);
    ck_assert_int_eq(nvfp4_k_moe(be, w2, w13, E, x, M, idx, wt, K, y, &err),
                     NVFP4_ERR_BAD_SHAPE);
    ck_assert_msg(strstr(err.text, "expert 0"), "%s", err.text);
    for (int e = 0; e < E; e++) {
        nvfp4_kweight_free(w13[e]);
        nvfp4_kweight_free(w2[e]);
        syn_free(&g[e]);
        syn_free(&u[e]);
        syn_free(&d[e]);
    }
    nvfp4_backend_free(be);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("kernels");
    SRunner *sr;
    int nf;

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_registry);
    tcase_add_test(tc, test_plugins);
    tcase_add_test(tc, test_memory);
    tcase_add_test(tc, test_linear_w4a16);
    tcase_add_test(tc, test_linear_w4a4);
    tcase_add_test(tc, test_row_grouping);
    tcase_add_test(tc, test_w4a4_activation_exact);
    tcase_add_test(tc, test_linear_dense);
    tcase_add_test(tc, test_embed);
    tcase_add_test(tc, test_dense_copy);
    tcase_add_test(tc, test_upload_rejects);
    tcase_add_test(tc, test_torch_linear);
    tcase_add_test(tc, test_rmsnorm);
    tcase_add_test(tc, test_exp16);
    tcase_add_test(tc, test_exp8);
    tcase_add_test(tc, test_busy_machine);
    tcase_add_test(tc, test_rope);
    tcase_add_test(tc, test_attention);
    tcase_add_test(tc, test_attention_groups);
    tcase_add_test(tc, test_attention_paged);
    tcase_add_test(tc, test_attention_rows);
    tcase_add_test(tc, test_batch_invariance);
    tcase_add_test(tc, test_batch_invariance_decode);
    tcase_add_test(tc, test_gemv_streams);
    tcase_add_test(tc, test_i8_batch_invariance);
    tcase_add_test(tc, test_i8avx2_matches_vnni);
    tcase_add_test(tc, test_linear_multi);
    tcase_add_test(tc, test_amx_gemm);
    tcase_add_test(tc, test_rowops);
    tcase_add_test(tc, test_glu_scale);
    tcase_add_test(tc, test_topk);
    tcase_add_test(tc, test_moe);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
