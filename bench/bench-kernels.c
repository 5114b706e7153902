/* SPDX-License-Identifier: MIT */
/* bench-kernels: the CPU backend's NVFP4 Linear, timed (not a test).
 *
 * (1) GEMV, one token: effective weight bandwidth (the NVFP4 bytes of the
 *     weight, 4.5 bits per weight, over the time) as a ratio to a read
 *     probe of the same byte count run right beside it with the same
 *     threads (the machine's bandwidth moves with its neighbours, see
 *     docs/perf-anchors.md; target >= 0.85).  A weight that fits the L3
 *     is read from the cache by both, so a second probe reads the same
 *     byte count out of cache: the next slice of a 1 GiB buffer each time
 *     (column "ooc"); the GEMV's ratio is given against both.
 * (2) GEMM, 16..512 tokens: GFLOPS (2 m n k / time) against OpenBLAS
 *     cblas_sgemm on the pre-dequantized float32 weight with the same
 *     threads (target >= 1.0x at >= 64 tokens).  OpenBLAS is loaded with
 *     dlopen so that nothing else in the tree links it; without it the
 *     column says "-".
 *
 * Usage: bench/bench-kernels [-t THREADS,..] [-s NxK,..] [-m TOKENS,..]
 *                            [-r SECONDS] [-q] [-P MIB]
 * defaults: -t 1,2  -s the 8 shapes of the issue  -m 16,64,128,512  -r 0.15
 * -q: GEMV only.  -P MIB: only the read probe, a sum over MIB MiB (1024 for
 * scripts/bench-llama.sh), best of 5 at each thread count: one line
 * "probe MIB MiB th=T GB/s" each.  Shapes are N x K: outputs x inputs.  Each figure is the
 * best of timed repetitions filling about SECONDS, kernel and reference
 * interleaved. */
#include "config.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

#include <nvfp4/kernels.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the read probe ---------------------------------------------------------- */

#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target("avx512f"))) static uint64_t sum_avx512(const uint8_t *p, size_t n)
{
    __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        a = _mm512_add_epi64(a, _mm512_loadu_si512((const void *)(p + i)));
        b = _mm512_add_epi64(b, _mm512_loadu_si512((const void *)(p + i + 64)));
    }
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(a, b)) + i;
}
#endif

static uint64_t sum_scalar(const uint8_t *p, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        s += v;
    }
    return s;
}

static volatile uint64_t probe_sink;

/* The out-of-cache buffer: consecutive probes read consecutive slices, so a
 * slice is read again only after the other 1 GiB went through the cache. */
#define OOC_BYTES ((size_t)1 << 30)
static uint8_t *ooc_buf;
static size_t ooc_pos;

static void probe(const uint8_t *buf, size_t bytes, int threads)
{
    uint64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
#ifdef _OPENMP
        size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
#else
        size_t t = 0, nt = 1;
#endif
        size_t lo = bytes * t / nt / 128 * 128, hi = bytes * (t + 1) / nt / 128 * 128;
#if defined(__GNUC__) && defined(__x86_64__)
        if (__builtin_cpu_supports("avx512f"))
            total += sum_avx512(buf + lo, hi - lo);
        else
#endif
            total += sum_scalar(buf + lo, hi - lo);
    }
    probe_sink = total;
}

/* BYTES of the out-of-cache buffer (at most all of it), the next slice. */
static void probe_ooc(size_t bytes, int threads)
{
    if (bytes > OOC_BYTES)
        bytes = OOC_BYTES;
    if (ooc_pos + bytes > OOC_BYTES)
        ooc_pos = 0;
    probe(ooc_buf + ooc_pos, bytes, threads);
    ooc_pos = (ooc_pos + bytes + 4095) & ~(size_t)4095;
}

/* -P: the sum over MIB MiB at each thread count, best of 5. */
static int probe_only(long mib, const long *threads, size_t nthreads)
{
    const size_t bytes = (size_t)mib << 20;
    uint8_t *buf = malloc(bytes + 128);

    if (!buf) {
        fprintf(stderr, "bench-kernels: cannot allocate %ld MiB\n", mib);
        return 1;
    }
    memset(buf, 1, bytes + 128);
    for (size_t ti = 0; ti < nthreads; ti++) {
        double best = 1e30;
        probe(buf, bytes, (int)threads[ti]);
        for (int r = 0; r < 5; r++) {
            double a = now(), b;
            probe(buf, bytes, (int)threads[ti]);
            b = now() - a;
            if (b < best)
                best = b;
        }
        printf("probe %ld MiB th=%ld %.2f GB/s\n", mib, threads[ti], (double)bytes / best * 1e-9);
        fflush(stdout);
    }
    free(buf);
    return 0;
}

/* ---- OpenBLAS, optional ------------------------------------------------------- */

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                         const float *, int, float, float *, int);
typedef void (*setthreads_fn)(int);
static sgemm_fn blas_sgemm;
static setthreads_fn blas_threads;

static void blas_load(void)
{
    const char *names[] = {"libopenblas.so.0", "libopenblas.so"};
    for (size_t i = 0; i < 2 && !blas_sgemm; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h)
            continue;
        *(void **)&blas_sgemm = dlsym(h, "cblas_sgemm");
        *(void **)&blas_threads = dlsym(h, "openblas_set_num_threads");
    }
}

/* CBLAS constants */
#define ROW_MAJOR 101
#define NO_TRANS 111
#define TRANS 112

/* ---- timing --------------------------------------------------------------------- */

typedef struct {
    nvfp4_backend *be;
    nvfp4_kweight *w;
    const float *x;
    size_t m;
    float *y;
} lin_job;

static void run_lin(const lin_job *j)
{
    nvfp4_error err;
    if (nvfp4_k_linear(j->be, j->w, j->x, j->m, j->y, &err) != NVFP4_OK) {
        fprintf(stderr, "linear: %s\n", err.text);
        exit(1);
    }
}

static uint32_t rng = 12345;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static size_t parse_list(const char *s, long *out, size_t max)
{
    size_t n = 0;
    while (s && *s && n < max) {
        char *end;
        out[n++] = strtol(s, &end, 10);
        s = *end == ',' ? end + 1 : NULL;
    }
    return n;
}

int main(int argc, char **argv)
{
    long threads[8] = {1, 2}, toks[16] = {16, 64, 128, 512};
    size_t nthreads = 2, ntoks = 4, nshapes = 8;
    long shapes[16][2] = {{4096, 4096}, {4096, 14336}, {14336, 4096}, {576, 576},
                          {192, 576},   {1536, 576},   {576, 1536},   {49152, 576}};
    double budget = 0.15;
    int gemv_only = 0;
    long probe_mib = 0;
    nvfp4_error err;
    nvfp4_backend *be;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc)
            nthreads = parse_list(argv[++i], threads, 8);
        else if (!strcmp(argv[i], "-m") && i + 1 < argc)
            ntoks = parse_list(argv[++i], toks, 16);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            budget = atof(argv[++i]);
        else if (!strcmp(argv[i], "-q"))
            gemv_only = 1;
        else if (!strcmp(argv[i], "-P") && i + 1 < argc && atol(argv[i + 1]) > 0)
            probe_mib = atol(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) {
            const char *s = argv[++i];
            nshapes = 0;
            while (s && *s && nshapes < 16) {
                char *end;
                shapes[nshapes][0] = strtol(s, &end, 10);
                shapes[nshapes][1] = *end == 'x' ? strtol(end + 1, &end, 10) : 0;
                nshapes++;
                s = *end == ',' ? end + 1 : NULL;
            }
        } else {
            fprintf(stderr, "usage: bench-kernels [-t T,..] [-s NxK,..] [-m M,..] [-r SEC] [-q] "
                            "[-P MIB]\n");
            return 2;
        }
    }
    if (probe_mib)
        return probe_only(probe_mib, threads, nthreads);
    ooc_buf = malloc(OOC_BYTES);
    if (!ooc_buf) {
        fprintf(stderr, "bench-kernels: cannot allocate the 1 GiB probe buffer\n");
        return 1;
    }
    memset(ooc_buf, 1, OOC_BYTES);
    be = nvfp4_backend_open("cpu", &err);
    if (!be) {
        fprintf(stderr, "%s\n", err.text);
        return 1;
    }
    blas_load();
    printf("# NVFP4 Linear, CPU backend (NVFP4_CPU_ISA=%s); weight bytes = 4.5 bits/weight\n",
           getenv("NVFP4_CPU_ISA") ? getenv("NVFP4_CPU_ISA") : "auto");
    printf("# GEMV: GB/s of weight bytes, probe = same-size read right beside it (cached when\n"
           "# the weight fits the L3), ooc = the same bytes out of cache; ratio = probe time /\n"
           "# GEMV time, w4a16 and w4a4, against each\n");
    printf("# GEMM: GFLOPS = 2*m*n*k/s; blas = OpenBLAS sgemm on the dequantized f32 weight%s\n",
           blas_sgemm ? "" : " (OpenBLAS not found)");

    for (size_t si = 0; si < nshapes; si++) {
        const size_t n = (size_t)shapes[si][0], k = (size_t)shapes[si][1];
        const size_t mmax = gemv_only ? 1 : (size_t)toks[ntoks - 1] > 1 ? (size_t)toks[ntoks - 1] : 1;
        const size_t wbytes = n * k / 2 + n * k / 16;
        uint8_t *packed, *scales, *pbuf;
        float *x, *y, *wf = NULL;
        nvfp4_linear lin;
        nvfp4_kweight *w[2];

        if (k % 16 || n == 0) {
            fprintf(stderr, "skip %zux%zu: K must be a multiple of 16\n", n, k);
            continue;
        }
        packed = malloc(n * k / 2);
        scales = malloc(n * k / 16);
        pbuf = malloc(wbytes + 128);
        x = malloc(mmax * k * sizeof(float));
        y = malloc(mmax * n * sizeof(float));
        for (size_t i = 0; i < n * k / 2; i++)
            packed[i] = (uint8_t)rnd();
        for (size_t i = 0; i < n * k / 16; i++)
            scales[i] = (uint8_t)(0x28 + rnd() % 0x30);
        memset(pbuf, 1, wbytes + 128);
        for (size_t i = 0; i < mmax * k; i++)
            x[i] = (float)((int)(rnd() % 2001) - 1000) / 300.0f;
        memset(&lin, 0, sizeof(lin));
        snprintf(lin.prefix, sizeof(lin.prefix), "bench.%zux%zu", n, k);
        lin.n = (int64_t)n;
        lin.k = (int64_t)k;
        lin.weight = packed;
        lin.scales = scales;
        lin.weight_scale_2 = 0.001f;
        lin.input_scale = 0.003f;
        lin.scheme = NVFP4_SCHEME_W4A16;
        w[0] = nvfp4_kweight_upload(be, &lin, 1, &err);
        lin.scheme = NVFP4_SCHEME_W4A4;
        w[1] = nvfp4_kweight_upload(be, &lin, 1, &err);
        if (!w[0] || !w[1]) {
            fprintf(stderr, "%s\n", err.text);
            return 1;
        }
        if (!gemv_only && blas_sgemm) {
            wf = malloc(n * k * sizeof(float));
            if (!wf || nvfp4_linear_dequant(&lin, wf, &err) != NVFP4_OK) {
                fprintf(stderr, "dequant: %s\n", wf ? err.text : "out of memory");
                free(wf);
                wf = NULL;
            }
        }

        for (size_t ti = 0; ti < nthreads; ti++) {
            const int th = (int)threads[ti];
            double best[4] = {1e30, 1e30, 1e30, 1e30};
            double t0;
            int reps = 0;

            nvfp4_backend_set_threads(be, th);
            /* (1) GEMV */
            for (int s = 0; s < 2; s++) {
                lin_job j = {be, w[s], x, 1, y};
                run_lin(&j);
            }
            probe(pbuf, wbytes, th);
            t0 = now();
            do {
                for (int s = 0; s < 4; s++) {
                    double a = now(), b;
                    if (s < 2) {
                        lin_job j = {be, w[s], x, 1, y};
                        run_lin(&j);
                    } else if (s == 2) {
                        probe(pbuf, wbytes, th);
                    } else {
                        probe_ooc(wbytes, th);
                    }
                    b = now() - a;
                    if (b < best[s])
                        best[s] = b;
                }
                reps++;
            } while (now() - t0 < budget || reps < 3);
            printf("%6zux%-6zu th=%d GEMV  w4a16 %6.1f GB/s  w4a4 %6.1f GB/s  probe %6.1f GB/s"
                   "  ooc %6.1f GB/s  ratio %.2f / %.2f  ooc ratio %.2f / %.2f"
                   "  (%.1f / %.1f us)\n",
                   n, k, th, wbytes / best[0] * 1e-9, wbytes / best[1] * 1e-9,
                   wbytes / best[2] * 1e-9, wbytes / best[3] * 1e-9, best[2] / best[0],
                   best[2] / best[1], best[3] / best[0], best[3] / best[1], best[0] * 1e6,
                   best[1] * 1e6);
            fflush(stdout);
            if (gemv_only)
                continue;
            /* (2) GEMM */
            for (size_t mi = 0; mi < ntoks; mi++) {
                const size_t m = (size_t)toks[mi];
                const double flop = 2.0 * (double)m * (double)n * (double)k;
                double g[3] = {1e30, 1e30, 1e30};

                if (m > mmax)
                    continue;
                if (blas_threads)
                    blas_threads(th);
                reps = 0;
                t0 = now();
                do {
                    for (int s = 0; s < 3; s++) {
                        double a = now(), b;
                        if (s < 2) {
                            lin_job j = {be, w[s], x, m, y};
                            run_lin(&j);
                        } else if (wf) {
                            blas_sgemm(ROW_MAJOR, NO_TRANS, TRANS, (int)m, (int)n, (int)k,
                                       1.0f, x, (int)k, wf, (int)k, 0.0f, y, (int)n);
                        } else {
                            continue;
                        }
                        b = now() - a;
                        if (b < g[s])
                            g[s] = b;
                    }
                    reps++;
                } while (now() - t0 < budget || reps < 2);
                if (wf)
                    printf("%6zux%-6zu th=%d m=%-4zu w4a16 %7.1f  w4a4 %7.1f  blas %7.1f GFLOPS"
                           "  ratio %.2f / %.2f\n",
                           n, k, th, m, flop / g[0] * 1e-9, flop / g[1] * 1e-9,
                           flop / g[2] * 1e-9, g[2] / g[0], g[2] / g[1]);
                else
                    printf("%6zux%-6zu th=%d m=%-4zu w4a16 %7.1f  w4a4 %7.1f  blas       - GFLOPS\n",
                           n, k, th, m, flop / g[0] * 1e-9, flop / g[1] * 1e-9);
                fflush(stdout);
            }
        }
        nvfp4_kweight_free(w[0]);
        nvfp4_kweight_free(w[1]);
        free(packed);
        free(scales);
        free(pbuf);
        free(x);
        free(y);
        free(wf);
    }
    nvfp4_backend_free(be);
    free(ooc_buf);
    return 0;
}
