/* SPDX-License-Identifier: MIT */
/* bench-kernels: the CPU backend's NVFP4 Linear, timed (not a test).
 *
 * (1) GEMV, one token: effective weight bandwidth (the NVFP4 bytes of the
 *     weight, 4.5 bits per weight, or 2 bytes per BF16/F16 weight, over
 *     the time) beside two read probes of the same byte count run
 *     interleaved with it on the same threads (the machine's bandwidth
 *     moves with its neighbours, see docs/perf-anchors.md): "same" reads
 *     one buffer again and again (cache speed when it fits the L3), "ooc"
 *     reads the next of several copies whose total exceeds the L3 (out of
 *     cache).  The kernel is timed out of cache the same way: it cycles
 *     through as many uploaded copies of the weight.  The ratio printed is
 *     kernel GB/s over the ooc probe's (target >= 0.85); at 2 or more
 *     threads each timed call follows an untimed one of its kind (on
 *     another copy), so that neither the kernel nor the probe shares its
 *     cores with the other's spinning threads; "cpu" is the same
 *     ratio of the best process CPU times (at 1 thread: the rate while
 *     running, which a loaded machine distorts less than the wall time;
 *     at more threads it sums every thread's time, spinning included).
 *     Then batched decode, B tokens in one call (a context step of B
 *     sequences), weights out of cache as above: the time per step beside
 *     B one-token GEMVs (target: far below 1, each weight read once per
 *     step for all B rows) and the ooc probe.
 * (2) GEMM, 16..512 tokens: GFLOPS (2 m n k / time) against OpenBLAS
 *     cblas_sgemm on the pre-dequantized float32 weight with the same
 *     threads (target >= 1.0x at >= 64 tokens).  OpenBLAS is loaded with
 *     dlopen so that nothing else in the tree links it; without it the
 *     column says "-".
 *
 * Usage: bench/bench-kernels [-t THREADS,..] [-s SHAPE,..] [-m TOKENS,..]
 *                            [-b BATCH,..] [-r SECONDS] [-c] [-q] [-g]
 *                            [-P MIB] [-i ISA,..] [-A CTX,..]
 * defaults: -t 1,2  -s the decode shapes of SmolLM2, Llama-3.2-1B,
 * Llama-3-8B, Qwen3-30B-A3B's experts and a BF16 vocabulary head (GEMM on
 * the 8B ones and 576x576)  -m 16,64,128,512  -b 4,16,64 (-b 0: none)
 * -r 0.15
 * -c: the GEMV (and batched decode) on one copy of the weight, which
 * stays in the cache where it fits, and the ooc probe on one buffer too:
 * the kernel's own speed (a kernel as fast in cache as out of it is
 * bound by its operations, not by memory).
 * -A CTX,..: only decode attention (nvfp4_k_attention_paged, one row at
 * position CTX - 1) at the shapes of SmolLM2 (9 query / 3 KV heads of 64),
 * Llama-3.2-1B (32 / 8 of 64) and Llama-3-8B (32 / 8 of 128), float32 and
 * FP8 pools of 16-position blocks: the pools' bytes read a call (keys and
 * values of CTX positions) as GB/s, cycling through copies (layers) whose
 * total exceeds the ooc size like the GEMVs, beside the ooc probe of the
 * same bytes.
 * -q: GEMV only; -g: GEMM only; -P MIB: only the read probe, a sum over MIB
 * MiB (1024 for scripts/bench-llama.sh), best of 5 at each thread count, one
 * line "probe MIB MiB th=T GB/s" each.  -i ISA,..: only the W4A4 GEMM of
 * each shape and -m token count at each of these isa= levels (e.g.
 * vnni,amx), interleaved, wall and CPU-time GFLOPS and the ratios (give
 * -r 2 or more at 2 threads: each product measures 1 and 2 threads before
 * it settles).  A SHAPE is NxK (outputs x inputs), NVFP4; NxKb or NxKh: a BF16 or F16 dense weight (GEMV only).  Each figure is the
 * best of timed repetitions filling about SECONDS, kernel and references
 * interleaved. */
#include "config.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
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

/* CPU time of the process (all its threads): on a loaded machine a call
 * longer than the scheduler's time slice is preempted in nearly every
 * repetition and its best wall time grows with the number of runnable
 * tasks, while shorter calls (and the probe) still find a clean slice */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Buffers of 4 MiB or more as the CPU backend allocates its weights
 * (nvfp4k_cpu_lasting_alloc): 2 MiB-aligned and offered to transparent
 * huge pages, so that the probes read memory mapped as the kernels' is. */
static void *big_alloc(size_t bytes)
{
    void *p = NULL;
    const size_t huge = (size_t)2 << 20;

    if (posix_memalign(&p, bytes >= 2 * huge ? huge : 64, bytes ? bytes : 1) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (bytes >= 2 * huge)
        (void)madvise(p, bytes / huge * huge, MADV_HUGEPAGE);
#endif
    return p;
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

/* Copies of a GEMV's weight cycled so that each is read out of cache: their
 * total is at least this (the L3 here is 32 MiB; 3x leaves no line of a
 * copy in it when its turn comes again). */
#define OOC_MIN_BYTES ((size_t)96 << 20)
/* ... or 3x the L3 the C library reports where that is more (300 MiB on
 * some Xeons, where 96 MiB of copies stay in the cache), up to 1 GiB */
#define OOC_MAX_BYTES ((size_t)1 << 30)
#define OOC_MAX_COPIES 8192

static size_t ooc_bytes(void)
{
    long l3 = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
    l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    if (l3 > 0 && 3 * (size_t)l3 > OOC_MIN_BYTES)
        return 3 * (size_t)l3 < OOC_MAX_BYTES ? 3 * (size_t)l3 : OOC_MAX_BYTES;
    return OOC_MIN_BYTES;
}

typedef struct {
    long n, k;
    int dense;      /* 0: NVFP4; NVFP4_DTYPE_BF16 / _F16: a dense weight */
    int gemm;       /* also the GEMM sweep (default list) */
} shape;

static void fill_lin(nvfp4_linear *lin, size_t n, size_t k, const uint8_t *packed,
                     const uint8_t *scales, const nvfp4_tensor *dense)
{
    memset(lin, 0, sizeof(*lin));
    snprintf(lin->prefix, sizeof(lin->prefix), "bench.%zux%zu", n, k);
    lin->n = (int64_t)n;
    lin->k = (int64_t)k;
    if (dense) {
        lin->scheme = NVFP4_SCHEME_NONE;
        lin->dense = dense;
        return;
    }
    lin->weight = packed;
    lin->scales = scales;
    lin->weight_scale_2 = 0.001f;
    lin->input_scale = 0.003f;
}

/* One line: the GEMV of one shape at TH threads, every copy of the weight
 * in turn, interleaved with both probes.  ws[s][c]: scheme s's copy c. */
static void gemv_line(nvfp4_backend *be, const shape *sh, nvfp4_kweight *const *ws[2],
                      int nsch, size_t copies, const float *x, float *y, const uint8_t *same,
                      const uint8_t *ooc, size_t wbytes, int th, double budget,
                      double *gemv)
{
    double best[4] = {1e30, 1e30, 1e30, 1e30}, cbest[4] = {1e30, 1e30, 1e30, 1e30};
    double t0;
    size_t c = 0;
    int reps = 0;

    for (int s = 0; s < nsch; s++) { /* warm-up: code, activations, threads */
        lin_job j = {be, ws[s][0], x, 1, y};
        run_lin(&j);
    }
    probe(same, wbytes, th);
    t0 = now();
    do {
        for (int s = 0; s < 4; s++) {
            double a = 0, b, ca = 0;
            if (s < 2 && s >= nsch)
                continue;
            /* at more than one thread each timed call follows an untimed
             * one of its own kind: its threads are then awake, as in a
             * decode step (every op on the backend's pool), and the other
             * kind's threads (the probe's OpenMP team, the backend's pool)
             * have spun out their wait on the untimed call rather than on
             * the timed one's cores.  The untimed call reads the copy half
             * a cycle away, so the timed one still finds its copy out of
             * cache. */
            for (int pass = th > 1 ? 0 : 1; pass < 2; pass++) {
                const size_t cc = pass ? c : (c + copies / 2) % copies;
                if (pass == 1) {
                    a = now();
                    ca = cpu_now();
                }
                if (s < 2) {
                    lin_job j = {be, ws[s][cc], x, 1, y};
                    run_lin(&j);
                } else if (s == 2) {
                    probe(same, wbytes, th);
                } else {
                    probe(ooc + cc * wbytes, wbytes, th);
                }
            }
            b = now() - a;
            if (b < best[s])
                best[s] = b;
            ca = cpu_now() - ca;
            if (ca < cbest[s])
                cbest[s] = ca;
        }
        c = (c + 1) % copies;
        reps++;
    } while (now() - t0 < budget || reps < 3 || (size_t)reps < 2 * copies);
    if (sh->dense)
        printf("%6ldx%-6ld th=%d GEMV  %-5s %6.1f GB/s  %18s  probe same %6.1f ooc %6.1f GB/s"
               "  ratio %.2f  (%.1f us)  cpu %.2f\n",
               sh->n, sh->k, th, sh->dense == NVFP4_DTYPE_BF16 ? "bf16" : "f16",
               wbytes / best[0] * 1e-9, "", wbytes / best[2] * 1e-9, wbytes / best[3] * 1e-9,
               best[3] / best[0], best[0] * 1e6, cbest[3] / cbest[0]);
    else
        printf("%6ldx%-6ld th=%d GEMV  w4a16 %6.1f GB/s  w4a4 %6.1f GB/s  probe same %6.1f ooc "
               "%6.1f GB/s  ratio %.2f / %.2f  (%.1f / %.1f us)  cpu %.2f / %.2f\n",
               sh->n, sh->k, th, wbytes / best[0] * 1e-9, wbytes / best[1] * 1e-9,
               wbytes / best[2] * 1e-9, wbytes / best[3] * 1e-9, best[3] / best[0],
               best[3] / best[1], best[0] * 1e6, best[1] * 1e6, cbest[3] / cbest[0],
               cbest[3] / cbest[1]);
    fflush(stdout);
    gemv[0] = best[0];
    gemv[1] = best[1];
}

/* Batched decode at TH threads: B tokens per call on every copy in turn
 * (out of cache), interleaved with the ooc probe; GEMV: the one-token best
 * times of gemv_line, per scheme. */
static void batch_line(nvfp4_backend *be, const shape *sh, nvfp4_kweight *const *ws[2],
                       int nsch, size_t copies, const float *x, float *y, const uint8_t *ooc,
                       size_t wbytes, int th, double budget, size_t b, const double *gemv)
{
    double best[3] = {1e30, 1e30, 1e30};
    double t0;
    size_t c = 0;
    int reps = 0;

    for (int s = 0; s < nsch; s++) {
        lin_job j = {be, ws[s][0], x, b, y};
        run_lin(&j);
    }
    t0 = now();
    do {
        for (int s = 0; s < 3; s++) {
            double a, d;
            if (s < 2 && s >= nsch)
                continue;
            a = now();
            if (s < 2) {
                lin_job j = {be, ws[s][c], x, b, y};
                run_lin(&j);
            } else {
                probe(ooc + c * wbytes, wbytes, th);
            }
            d = now() - a;
            if (d < best[s])
                best[s] = d;
        }
        c = (c + 1) % copies;
        reps++;
    } while (now() - t0 < budget || reps < 3 || (size_t)reps < 2 * copies);
    if (sh->dense)
        printf("%6ldx%-6ld th=%d B=%-3zu %-5s %8.1f us/step = %.2f x B GEMVs%22s  "
               "%.2f x probe\n",
               sh->n, sh->k, th, b, sh->dense == NVFP4_DTYPE_BF16 ? "bf16" : "f16",
               best[0] * 1e6, best[0] / (b * gemv[0]), "", best[0] / best[2]);
    else
        printf("%6ldx%-6ld th=%d B=%-3zu w4a16 %8.1f us/step = %.2f x B GEMVs  w4a4 %8.1f "
               "us/step = %.2f x B GEMVs  %.2f / %.2f x probe\n",
               sh->n, sh->k, th, b, best[0] * 1e6, best[0] / (b * gemv[0]), best[1] * 1e6,
               best[1] / (b * gemv[1]), best[0] / best[2], best[1] / best[2]);
    fflush(stdout);
}

/* -A: decode attention over CTX positions, one row, out of cache (see the
 * top).  Per shape, pool type and thread count: the best call time and the
 * ooc probe's over the same bytes, interleaved as gemv_line does. */
static int attn_only(const long *ctxs, size_t nctx, const long *threads, size_t nthreads,
                     double budget)
{
    static const struct {
        const char *name;
        size_t nh, nkv, hd;
    } shp[] = {{"smollm2", 9, 3, 64}, {"llama-1b", 32, 8, 64}, {"llama-8b", 32, 8, 128}};
    const size_t bs = 16;
    nvfp4_error err;
    nvfp4_backend *be = nvfp4_backend_open("cpu", &err);

    for (size_t ci = 0; ci < nctx; ci++)
        if (ctxs[ci] < 1 || ctxs[ci] > (1L << 24)) {
            fprintf(stderr, "bench-kernels: -A: a context of 1 to %ld positions, not %ld\n",
                    1L << 24, ctxs[ci]);
            return 2;
        }
    if (!be) {
        fprintf(stderr, "%s\n", err.text);
        return 1;
    }
    printf("# decode attention, one row: GB/s of the K and V pool bytes of CTX positions,\n"
           "# cycling over copies whose total exceeds %zu MiB; ooc = the probe over as many\n"
           "# bytes of as many copies; ratio = attention GB/s / ooc GB/s\n",
           ooc_bytes() >> 20);
    for (size_t ci = 0; ci < nctx; ci++)
        for (size_t si = 0; si < sizeof(shp) / sizeof(shp[0]); si++)
            for (int f8 = 0; f8 < 2; f8++) {
                const size_t ctx = (size_t)ctxs[ci], nh = shp[si].nh, nkv = shp[si].nkv,
                             hd = shp[si].hd, nb = (ctx + bs - 1) / bs, esz = f8 ? 1 : 4;
                const size_t pool = nb * bs * nkv * hd * esz, bytes = 2 * ctx * nkv * hd * esz;
                const size_t copies = (ooc_bytes() + 2 * pool - 1) / (2 * pool) < 2
                                          ? 2
                                          : (ooc_bytes() + 2 * pool - 1) / (2 * pool);
                uint8_t *mem = big_alloc(copies * 2 * pool), *ooc = big_alloc(copies * bytes);
                int32_t *tab = malloc(nb * sizeof(int32_t));
                float *q = malloc(nh * hd * sizeof(float)), *kv1 = malloc(nkv * hd * sizeof(float));
                float *out = malloc(nh * hd * sizeof(float));
                const int32_t pos = (int32_t)ctx - 1, seq = 0;

                if (!mem || !ooc || !tab || !q || !kv1 || !out) {
                    fprintf(stderr, "bench-kernels: out of memory for -A %zu\n", ctx);
                    return 1;
                }
                /* keys and values of small magnitude: scores within a few
                 * units, so the softmax spreads its weight */
                for (size_t i = 0; i < copies * 2 * pool; i += esz) {
                    if (f8)
                        mem[i] = (uint8_t)(0x20 + rnd() % 0x18) | (uint8_t)(rnd() & 0x80);
                    else {
                        float v = ((float)(rnd() % 2001) - 1000.0f) * 1e-3f;
                        memcpy(mem + i, &v, 4);
                    }
                }
                memset(ooc, 1, copies * bytes);
                for (size_t i = 0; i < nb; i++)
                    tab[i] = (int32_t)i;
                for (size_t i = 0; i < nh * hd; i++)
                    q[i] = ((float)(rnd() % 2001) - 1000.0f) * 1e-3f;
                for (size_t i = 0; i < nkv * hd; i++)
                    kv1[i] = 0.25f;
                for (size_t ti = 0; ti < nthreads; ti++) {
                    const int th = (int)threads[ti];
                    double best[2] = {1e30, 1e30}, t0;
                    size_t c = 0;
                    int reps = 0;

                    nvfp4_backend_set_threads(be, th);
                    t0 = now();
                    do {
                        for (int s = 0; s < 2; s++)
                            for (int pass = th > 1 ? 0 : 1; pass < 2; pass++) {
                                const size_t cc = pass ? c : (c + copies / 2) % copies;
                                double a = now();
                                if (s == 0) {
                                    nvfp4_kv_pages kv;
                                    memset(&kv, 0, sizeof(kv));
                                    kv.k_pool = mem + cc * 2 * pool;
                                    kv.v_pool = mem + cc * 2 * pool + pool;
                                    kv.nblocks = nb;
                                    kv.block = bs;
                                    kv.tables = tab;
                                    kv.ntables = 1;
                                    kv.max_blocks = nb;
                                    kv.pos = &pos;
                                    kv.seq = &seq;
                                    kv.max_len = ctx;
                                    kv.dtype = f8 ? NVFP4_KV_ELEM_FP8_E4M3 : NVFP4_KV_ELEM_F32;
                                    kv.k_scale = kv.v_scale = 1.0f;
                                    if (nvfp4_k_attention_paged(be, q, kv1, kv1, &kv, 1, nh, nkv,
                                                                hd, 1.0f / sqrtf((float)hd), out,
                                                                &err) != NVFP4_OK) {
                                        fprintf(stderr, "%s\n", err.text);
                                        return 1;
                                    }
                                } else
                                    probe(ooc + cc * bytes, bytes, th);
                                a = now() - a;
                                if (pass == 1 && a < best[s])
                                    best[s] = a;
                            }
                        c = (c + 1) % copies;
                        reps++;
                    } while (now() - t0 < budget || reps < 3 || (size_t)reps < 2 * copies);
                    printf("ctx %6zu %-8s %s th=%d attention %6.1f GB/s  probe ooc %6.1f GB/s  "
                           "ratio %.2f  (%.1f us)\n",
                           ctx, shp[si].name, f8 ? "fp8" : "f32", th, bytes / best[0] * 1e-9,
                           bytes / best[1] * 1e-9, best[1] / best[0], best[0] * 1e6);
                    fflush(stdout);
                }
                free(mem);
                free(ooc);
                free(tab);
                free(q);
                free(kv1);
                free(out);
            }
    nvfp4_backend_free(be);
    return 0;
}

static int probe_only(long mib, const long *threads, size_t nthreads)
{
    const size_t bytes = (size_t)mib << 20;
    uint8_t *buf = big_alloc(bytes + 128);

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

/* -i ISA,..: the W4A4 GEMM of each shape at each ISA level (a backend per
 * level, isa=LEVEL), the levels interleaved call by call; best wall time
 * and best process CPU time per call (on a loaded machine the CPU time is
 * the steadier; at more threads it sums them all), as GFLOPS, and each
 * level's ratio to the first.  Also checks that the levels give the same
 * bits (the AMX and VNNI kernels do). */
static int isa_gemm(char *isas, const shape *shapes, size_t nshapes, const long *threads,
                    size_t nthreads, const long *toks, size_t ntoks, double budget)
{
    char *lv[8];
    size_t nlv = 0;

    for (char *t = strtok(isas, ","); t && nlv < 8; t = strtok(NULL, ","))
        lv[nlv++] = t;
    printf("# W4A4 GEMM by ISA level: GFLOPS = 2*m*n*k / best wall time (cpu: / best process\n"
           "# CPU time of a call), levels interleaved call by call; ratio to %s\n", lv[0]);
    for (size_t si = 0; si < nshapes; si++) {
        const size_t n = (size_t)shapes[si].n, k = (size_t)shapes[si].k;
        size_t mmax = 1;
        uint8_t *packed, *scales;
        float *x, *y, *y0;
        nvfp4_linear lin;

        if (shapes[si].dense || k % 16 || n == 0)
            continue;
        for (size_t mi = 0; mi < ntoks; mi++)
            if ((size_t)toks[mi] > mmax)
                mmax = (size_t)toks[mi];
        packed = malloc(n * k / 2);
        scales = malloc(n * k / 16);
        x = malloc(mmax * k * sizeof(float));
        y = malloc(mmax * n * sizeof(float));
        y0 = malloc(mmax * n * sizeof(float));
        if (!packed || !scales || !x || !y || !y0) {
            fprintf(stderr, "out of memory for %zux%zu\n", n, k);
            return 1;
        }
        for (size_t i = 0; i < n * k / 2; i++)
            packed[i] = (uint8_t)rnd();
        for (size_t i = 0; i < n * k / 16; i++)
            scales[i] = (uint8_t)(0x28 + rnd() % 0x30);
        for (size_t i = 0; i < mmax * k; i++)
            x[i] = (float)((int)(rnd() % 2001) - 1000) / 300.0f;
        fill_lin(&lin, n, k, packed, scales, NULL);
        lin.scheme = NVFP4_SCHEME_W4A4;
        for (size_t ti = 0; ti < nthreads; ti++) {
            nvfp4_backend *be[8];
            nvfp4_kweight *w[8];
            nvfp4_error err;

            for (size_t l = 0; l < nlv; l++) {
                char opt[64];
                snprintf(opt, sizeof opt, "isa=%s,threads=%ld", lv[l], threads[ti]);
                be[l] = nvfp4_backend_open_with("cpu", opt, &err);
                w[l] = be[l] ? nvfp4_kweight_upload(be[l], &lin, 1, &err) : NULL;
                if (!w[l]) {
                    fprintf(stderr, "%s: %s\n", opt, err.text);
                    return 1;
                }
            }
            for (size_t mi = 0; mi < ntoks; mi++) {
                const size_t m = (size_t)toks[mi];
                const double flop = 2.0 * (double)m * (double)n * (double)k;
                double g[8], c[8], t0 = now();
                int reps = 0, same = 1;

                for (size_t l = 0; l < nlv; l++)
                    g[l] = c[l] = 1e30;
                do {
                    for (size_t l = 0; l < nlv; l++) {
                        double a = now(), ca = cpu_now();
                        if (nvfp4_k_linear(be[l], w[l], x, m, l ? y : y0, &err) != NVFP4_OK) {
                            fprintf(stderr, "%s\n", err.text);
                            return 1;
                        }
                        ca = cpu_now() - ca;
                        a = now() - a;
                        g[l] = a < g[l] ? a : g[l];
                        c[l] = ca < c[l] ? ca : c[l];
                        if (l && memcmp(y, y0, m * n * sizeof(float)))
                            same = 0;
                    }
                    reps++;
                } while (now() - t0 < budget || reps < 3);
                printf("%6zux%-6zu th=%ld m=%-4zu", n, k, threads[ti], m);
                for (size_t l = 0; l < nlv; l++)
                    printf("  %s %7.1f cpu %7.1f", lv[l], flop / g[l] * 1e-9, flop / c[l] * 1e-9);
                for (size_t l = 1; l < nlv; l++)
                    printf("  %s/%s %.2f cpu %.2f", lv[l], lv[0], g[0] / g[l], c[0] / c[l]);
                printf("  %s (%d reps)\n", same ? "same bits" : "BITS DIFFER", reps);
                fflush(stdout);
            }
            for (size_t l = 0; l < nlv; l++) {
                nvfp4_kweight_free(w[l]);
                nvfp4_backend_free(be[l]);
            }
        }
        free(packed);
        free(scales);
        free(x);
        free(y);
        free(y0);
    }
    return 0;
}

int main(int argc, char **argv)
{
    long threads[8] = {1, 2}, toks[16] = {16, 64, 128, 512}, batches[16] = {4, 16, 64};
    long ctxs[16];
    size_t nthreads = 2, ntoks = 4, nbatches = 3, nshapes, nctx = 0;
    /* SmolLM2-135M (q/o, k/v, fused gate/up, down, tied head as NVFP4),
     * Llama-3.2-1B (q/o, k/v, down, fused gate/up), Llama-3-8B (q/o, k/v,
     * fused gate/up, down, and its transpose), Qwen3-30B-A3B's experts
     * (fused gate/up, down), the 1B's BF16 head */
    static const shape defaults[] = {
        {576, 576, 0, 1},     {192, 576, 0, 0},     {3072, 576, 0, 0},  {576, 1536, 0, 0},
        {2048, 2048, 0, 0},   {512, 2048, 0, 0},    {2048, 8192, 0, 0}, {16384, 2048, 0, 0},
        {4096, 4096, 0, 1},   {1024, 4096, 0, 0},   {28672, 4096, 0, 0}, {4096, 14336, 0, 1},
        {14336, 4096, 0, 1},  {1536, 2048, 0, 0},   {2048, 768, 0, 0},
        {128256, 2048, NVFP4_DTYPE_BF16, 0},
    };
    shape shapes[32];
    double budget = 0.15;
    int gemv_only = 0, gemm_only = 0, in_cache = 0;
    long probe_mib = 0;
    char *isas = NULL;
    nvfp4_error err;
    nvfp4_backend *be;
    uint8_t *big;
    const size_t big_bytes = (size_t)1 << 30;

    nshapes = sizeof(defaults) / sizeof(defaults[0]);
    memcpy(shapes, defaults, sizeof(defaults));
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc)
            nthreads = parse_list(argv[++i], threads, 8);
        else if (!strcmp(argv[i], "-m") && i + 1 < argc)
            ntoks = parse_list(argv[++i], toks, 16);
        else if (!strcmp(argv[i], "-b") && i + 1 < argc) {
            nbatches = parse_list(argv[++i], batches, 16);
            if (nbatches == 1 && batches[0] <= 0)
                nbatches = 0;
        } else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            budget = atof(argv[++i]);
        else if (!strcmp(argv[i], "-q"))
            gemv_only = 1;
        else if (!strcmp(argv[i], "-c"))
            in_cache = 1;
        else if (!strcmp(argv[i], "-g"))
            gemm_only = 1;
        else if (!strcmp(argv[i], "-i") && i + 1 < argc)
            isas = argv[++i];
        else if (!strcmp(argv[i], "-A") && i + 1 < argc)
            nctx = parse_list(argv[++i], ctxs, 16);
        else if (!strcmp(argv[i], "-P") && i + 1 < argc && atol(argv[i + 1]) > 0)
            probe_mib = atol(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) {
            const char *s = argv[++i];
            nshapes = 0;
            while (s && *s && nshapes < 32) {
                char *end;
                shape *sh = &shapes[nshapes++];
                sh->n = strtol(s, &end, 10);
                sh->k = *end == 'x' ? strtol(end + 1, &end, 10) : 0;
                sh->dense = *end == 'b' ? NVFP4_DTYPE_BF16 : *end == 'h' ? NVFP4_DTYPE_F16 : 0;
                if (sh->dense)
                    end++;
                sh->gemm = !sh->dense;
                s = *end == ',' ? end + 1 : NULL;
            }
        } else {
            fprintf(stderr, "usage: bench-kernels [-t T,..] [-s NxK[b|h],..] [-m M,..] [-b B,..] [-r SEC] "
                            "[-c] [-q] [-g] [-P MIB] [-i ISA,..] [-A CTX,..]\n");
            return 2;
        }
    }
    if (probe_mib)
        return probe_only(probe_mib, threads, nthreads);
    if (nctx)
        return attn_only(ctxs, nctx, threads, nthreads, budget);
    if (isas)
        return isa_gemm(isas, shapes, nshapes, threads, nthreads, toks, ntoks, budget);
    be = nvfp4_backend_open("cpu", &err);
    if (!be) {
        fprintf(stderr, "%s\n", err.text);
        return 1;
    }
    blas_load();
    printf("# NVFP4 Linear, CPU backend (NVFP4_CPU_ISA=%s); weight bytes = 4.5 bits/weight\n",
           getenv("NVFP4_CPU_ISA") ? getenv("NVFP4_CPU_ISA") : "auto");
    if (in_cache)
        printf("# -c: GEMV and batches on ONE copy of the weight, in the cache where it fits, and\n"
               "# the 'ooc' probe on one buffer too (so no longer out of cache): the kernels'\n"
               "# own speed\n");
    else
        printf("# GEMV: GB/s of weight bytes, the kernel cycling over copies of the weight whose\n"
               "# total exceeds %zu MiB; probe same = a same-size buffer read again and again (in\n"
               "# cache when it fits), ooc = same-size slices of as many copies cycled like the\n"
               "# kernel (out of cache); ratio = kernel GB/s / ooc probe GB/s; cpu = the same\n"
               "# with process CPU times (a call longer than a time slice of a loaded machine\n"
               "# is preempted in nearly every repetition: its wall time grows, not its CPU time)\n",
               ooc_bytes() >> 20);
    printf("# GEMM: GFLOPS = 2*m*n*k/s; blas = OpenBLAS sgemm on the dequantized f32 weight%s\n",
           blas_sgemm ? "" : " (OpenBLAS not found)");
    big = big_alloc(big_bytes);
    if (big) {
        memset(big, 1, big_bytes);
        for (size_t ti = 0; ti < nthreads; ti++) {
            double b = 1e30;
            for (int r = 0; r < 3; r++) {
                double a = now();
                probe(big, big_bytes, (int)threads[ti]);
                a = now() - a;
                b = a < b ? a : b;
            }
            printf("# 1 GiB read probe, %ld thread%s: %.1f GB/s\n", threads[ti],
                   threads[ti] == 1 ? "" : "s", big_bytes / b * 1e-9);
        }
        free(big);
    }

    for (size_t si = 0; si < nshapes; si++) {
        const shape *sh = &shapes[si];
        const size_t n = (size_t)sh->n, k = (size_t)sh->k;
        const int do_gemm = !gemv_only && sh->gemm, do_gemv = !gemm_only;
        size_t mmax = do_gemm && toks[ntoks - 1] > 1 ? (size_t)toks[ntoks - 1] : 1;
        const size_t wbytes = sh->dense ? n * k * 2 : n * k / 2 + n * k / 16;
        const size_t copies =
            !do_gemv || in_cache ? 1
            : (ooc_bytes() + wbytes - 1) / wbytes > OOC_MAX_COPIES
                ? OOC_MAX_COPIES
                : (ooc_bytes() + wbytes - 1) / wbytes;
        const int nsch = sh->dense ? 1 : 2;
        uint8_t *packed = NULL, *scales = NULL, *same, *ooc, *dense = NULL;
        nvfp4_tensor *dt = NULL;
        float *x, *y, *wf = NULL;
        nvfp4_linear lin;
        nvfp4_kweight **w[2];

        if (k % 16 || n == 0) {
            fprintf(stderr, "skip %zux%zu: K must be a multiple of 16\n", n, k);
            continue;
        }
        for (size_t bi = 0; do_gemv && bi < nbatches; bi++)
            if (batches[bi] > 0 && (size_t)batches[bi] > mmax)
                mmax = (size_t)batches[bi];
        w[0] = calloc(copies, sizeof(*w[0]));
        w[1] = calloc(copies, sizeof(*w[1]));
        same = big_alloc(wbytes + 128);
        ooc = do_gemv ? big_alloc(copies * wbytes + 128) : NULL;
        x = malloc(mmax * k * sizeof(float));
        y = malloc(mmax * n * sizeof(float));
        if (sh->dense) {
            dense = big_alloc(copies * wbytes);
            dt = calloc(copies, sizeof(*dt));
        } else {
            packed = malloc(n * k / 2);
            scales = malloc(n * k / 16);
        }
        if (!w[0] || !w[1] || !same || (do_gemv && !ooc) || !x || !y ||
            (sh->dense ? !dense || !dt : !packed || !scales)) {
            fprintf(stderr, "out of memory for %zux%zu\n", n, k);
            return 1;
        }
        memset(same, 1, wbytes + 128);
        if (ooc)
            memset(ooc, 1, copies * wbytes + 128);
        for (size_t i = 0; i < mmax * k; i++)
            x[i] = (float)((int)(rnd() % 2001) - 1000) / 300.0f;
        if (sh->dense) {
            /* bf16 / f16 values of a small magnitude: sign, a mid exponent */
            for (size_t i = 0; i < copies * wbytes / 2; i++) {
                uint16_t v = (uint16_t)(sh->dense == NVFP4_DTYPE_BF16 ? 0x3C00 + rnd() % 0x200
                                                                      : 0x2000 + rnd() % 0x1000);
                v |= (uint16_t)((rnd() & 1) << 15);
                memcpy(dense + 2 * i, &v, 2);
            }
            for (size_t c = 0; c < copies; c++) {
                dt[c].name = "bench";
                dt[c].dtype = (nvfp4_dtype)sh->dense;
                dt[c].ndim = 2;
                dt[c].shape[0] = (int64_t)n;
                dt[c].shape[1] = (int64_t)k;
                dt[c].numel = (uint64_t)(n * k);
                dt[c].nbytes = (uint64_t)wbytes;
                dt[c].data = dense + c * wbytes;
                fill_lin(&lin, n, k, NULL, NULL, &dt[c]);
                w[0][c] = nvfp4_kweight_upload(be, &lin, 1, &err);
                if (!w[0][c]) {
                    fprintf(stderr, "%s\n", err.text);
                    return 1;
                }
            }
        } else {
            for (size_t i = 0; i < n * k / 2; i++)
                packed[i] = (uint8_t)rnd();
            for (size_t i = 0; i < n * k / 16; i++)
                scales[i] = (uint8_t)(0x28 + rnd() % 0x30);
            fill_lin(&lin, n, k, packed, scales, NULL);
            for (size_t c = 0; c < copies; c++)
                for (int s = 0; s < 2; s++) {
                    lin.scheme = s == 0 ? NVFP4_SCHEME_W4A16 : NVFP4_SCHEME_W4A4;
                    w[s][c] = nvfp4_kweight_upload(be, &lin, 1, &err);
                    if (!w[s][c]) {
                        fprintf(stderr, "%s\n", err.text);
                        return 1;
                    }
                }
        }
        if (do_gemm && blas_sgemm) {
            wf = malloc(n * k * sizeof(float));
            if (!wf || nvfp4_linear_dequant(&lin, wf, &err) != NVFP4_OK) {
                fprintf(stderr, "dequant: %s\n", wf ? err.text : "out of memory");
                free(wf);
                wf = NULL;
            }
        }

        for (size_t ti = 0; ti < nthreads; ti++) {
            const int th = (int)threads[ti];
            double t0;
            int reps = 0;

            nvfp4_backend_set_threads(be, th);
            /* (1) GEMV */
            if (do_gemv) {
                nvfp4_kweight *const *wl[2] = {w[0], w[1]};
                double gemv[2];
                gemv_line(be, sh, wl, nsch, copies, x, y, same, ooc, wbytes, th, budget, gemv);
                for (size_t bi = 0; bi < nbatches; bi++)
                    if (batches[bi] > 0)
                        batch_line(be, sh, wl, nsch, copies, x, y, ooc, wbytes, th, budget,
                                   (size_t)batches[bi], gemv);
            }
            if (!do_gemm)
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
                            lin_job j = {be, w[s][0], x, m, y};
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
        for (size_t c = 0; c < copies; c++) {
            nvfp4_kweight_free(w[0][c]);
            nvfp4_kweight_free(w[1][c]);
        }
        free(w[0]);
        free(w[1]);
        free(packed);
        free(scales);
        free(dense);
        free(dt);
        free(same);
        free(ooc);
        free(x);
        free(y);
        free(wf);
    }
    nvfp4_backend_free(be);
    return 0;
}
