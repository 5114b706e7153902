/* SPDX-License-Identifier: MIT */
/* The CPU backend: host memory, OpenMP threads, runtime SIMD dispatch.
 * The Linear lives in cpu-linear.c (its kernels in cpu-nvfp4.c, cpu-amx.c
 * and cpu-dense.c), the attention in cpu-attn.c; the other transformer
 * operations are here.  Every operation partitions its outputs
 * (rows, heads, tokens) across threads and reduces each output in one
 * thread, in a fixed order, so that results are the same bits for any
 * thread count. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifdef __linux__
#include <sys/mman.h>
#endif
#if defined(__linux__) && defined(__x86_64__) && !defined(NVFP4_CPU_GENERIC)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(NVFP4_CPU_GENERIC)
#include <cpuid.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu-internal.h"

/* ---- context, memory ------------------------------------------------------ */

/* AMX: CPUID.(7,0):EDX bits 24 (AMX-TILE) and 25 (AMX-INT8), XCR0 bits 17
 * and 18 (XTILECFG, XTILEDATA) set by the OS, and Linux's permission for
 * this process to use the tile data (without it the first tile instruction
 * raises SIGILL).  The permission is process-wide; asked for once. */
static int amx_usable;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_probe(void)
{
#if defined(__linux__) && defined(__x86_64__) && defined(__GNUC__) && defined(SYS_arch_prctl) && \
    !defined(NVFP4_CPU_GENERIC)
    unsigned a, b, c, d, lo, hi;

    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25)))
        return;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) /* OSXSAVE: xgetbv */
        return;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    if ((lo & (3u << 17)) != (3u << 17))
        return;
    /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18) */
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0)
        return;
    amx_usable = 1;
#endif
}

int nvfp4k_cpu_amx_ok(void)
{
    pthread_once(&amx_once, amx_probe);
    return amx_usable;
}

/* The best level this CPU has, capped by CAP (scalar|avx2|avx512|vnni|amx;
 * NULL: no cap; anything else is refused before this is called). */
static cpu_isa detect_isa(const char *cap)
{
    cpu_isa isa = CPU_ISA_SCALAR;

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(NVFP4_CPU_GENERIC)
    __builtin_cpu_init();
    /* The AVX2 level's kernels use F16C too (cpu-dense.c, cpu-i8avx2.c),
     * which every CPU with AVX2 and FMA has (Haswell, Piledriver on); not
     * asked, as clang's __builtin_cpu_supports does not know "f16c" */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        isa = CPU_ISA_AVX2;
    if (isa == CPU_ISA_AVX2 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq"))
        isa = CPU_ISA_AVX512;
    if (isa == CPU_ISA_AVX512 && __builtin_cpu_supports("avx512vnni"))
        isa = CPU_ISA_VNNI;
    /* asked only when the cap allows AMX: the permission is process-wide
     * and makes every signal frame of the process carry the 8 KiB tile
     * state (a small sigaltstack of the application could no longer hold
     * it) */
    if (isa == CPU_ISA_VNNI && (!cap || strcmp(cap, "amx") == 0) && nvfp4k_cpu_amx_ok())
        isa = CPU_ISA_AMX;
#endif
    if (cap) {
        cpu_isa lim = isa;
        if (strcmp(cap, "scalar") == 0)
            lim = CPU_ISA_SCALAR;
        else if (strcmp(cap, "avx2") == 0)
            lim = CPU_ISA_AVX2;
        else if (strcmp(cap, "avx512") == 0)
            lim = CPU_ISA_AVX512;
        else if (strcmp(cap, "vnni") == 0)
            lim = CPU_ISA_VNNI;
        else if (strcmp(cap, "amx") == 0)
            lim = CPU_ISA_AMX;
        if (lim < isa)
            isa = lim;
    }
    return isa;
}

static int cpu_available(void)
{
    return 1;
}

static int isa_name_ok(const char *s)
{
    return !strcmp(s, "scalar") || !strcmp(s, "avx2") || !strcmp(s, "avx512") ||
           !strcmp(s, "vnni") || !strcmp(s, "amx");
}

/* Options (nvfp4_backend_open_with()): isa=..., threads=N; the environment's
 * NVFP4_CPU_ISA is the default cap (an unknown value there is no cap, as it
 * always was). */
static void *cpu_open(const char *params, nvfp4_error *err)
{
    const char *cap = getenv("NVFP4_CPU_ISA");
    char key[32], val[32], isa[32] = "";
    const char *p = params;
    int threads = 0, r;
    cpu_ctx *c;

    while (p && (r = nvfp4_backend_param_next(&p, key, sizeof key, val, sizeof val)) != 0) {
        char *end;
        long v;
        if (r < 0) {
            nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "cpu", -1,
                            "backend option \"%.40s\" is not key=value (keys: isa, threads)",
                            p);
            return NULL;
        }
        if (!strcmp(key, "isa") && isa_name_ok(val)) {
            memcpy(isa, val, sizeof isa);
            continue;
        }
        v = strtol(val, &end, 10);
        if (!strcmp(key, "threads") && *val && !*end && v >= 0 && v <= 4096) {
            threads = (int)v;
            continue;
        }
        nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "cpu", -1,
                        !strcmp(key, "isa") || !strcmp(key, "threads")
                            ? "backend option %s=%s: expected isa=scalar|avx2|avx512|vnni|amx or "
                              "threads=0..4096"
                            : "unknown backend option \"%s\" (=%s); the cpu backend knows "
                              "isa and threads",
                        key, val);
        return NULL;
    }
    c = calloc(1, sizeof(*c));
    if (!c) {
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", "cpu", -1, "out of memory");
        return NULL;
    }
    {
        /* the three locks, or none: undo those made before a failure */
        pthread_mutex_t *locks[] = {&c->moe_scratch.lock, &c->act_scratch.lock, &c->pool_lock};
        size_t made = 0;

        while (made < 3 && pthread_mutex_init(locks[made], NULL) == 0)
            made++;
        if (made < 3) {
            while (made > 0)
                pthread_mutex_destroy(locks[--made]);
            free(c);
            nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", "cpu", -1, "out of memory");
            return NULL;
        }
    }
    c->isa = detect_isa(*isa ? isa : cap);
    c->threads = threads;
    return c;
}

static void cpu_close(void *ctx)
{
    cpu_ctx *c = ctx;

    nvfp4k_cpu_pool_free(c->pool);
    pthread_mutex_destroy(&c->pool_lock);
    pthread_mutex_destroy(&c->moe_scratch.lock);
    pthread_mutex_destroy(&c->act_scratch.lock);
    free(c->moe_scratch.buf);
    free(c->act_scratch.buf);
    free(c);
}

static void cpu_get_caps(void *ctx, nvfp4_backend_caps *caps)
{
    (void)ctx;
    caps->host_memory = 1;
    caps->async = 0;
    caps->float_weights_in_place = 1; /* cpu-linear.c reads dense parts in place */
    caps->threads = 1;
}

/* Every op, every weight format the registry lets through (F32, BF16, F16,
 * mixed; NVFP4 W4A4 and W4A16; float weights with NVFP4 activations). */
static int cpu_supports(void *ctx, nvfp4_op op, const nvfp4_kweight_desc *w)
{
    (void)ctx;
    (void)w;
    return (unsigned)op < NVFP4_OP_COUNT;
}

static void cpu_set_threads(void *ctx, int threads)
{
    ((cpu_ctx *)ctx)->threads = threads;
}

int nvfp4k_cpu_nthreads(const cpu_ctx *c)
{
    if (c->threads > 0)
        return c->threads;
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static int cpu_threads(void *ctx)
{
    return nvfp4k_cpu_nthreads(ctx);
}

/* 64: one cache line, one zmm register.  For a call's temporaries. */
void *nvfp4k_cpu_aligned_alloc(size_t bytes)
{
    void *p = NULL;

    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0)
        return NULL;
    return p;
}

/* Buffers that live as long as a weight or a context (repacked weights, KV
 * pools, a context's scratch) of this size or more are aligned to 2 MiB and
 * offered to the kernel's transparent huge pages: a GEMV streams its weight
 * once per token, and with 4 KiB pages every 64th cache line it reads is
 * also a TLB miss.  A call's temporaries are not (nvfp4k_cpu_aligned_alloc):
 * each would cost a madvise and faults of whole 2 MiB pages per call. */
#define CPU_HUGE_MIN (4u << 20)
#define CPU_HUGE_PAGE (2u << 20)

void *nvfp4k_cpu_lasting_alloc(size_t bytes)
{
#ifdef MADV_HUGEPAGE
    void *p = NULL;

    if (bytes >= CPU_HUGE_MIN) {
        if (posix_memalign(&p, CPU_HUGE_PAGE, bytes) != 0)
            return NULL;
        /* advice only: without THP the buffer is as good as before */
        (void)madvise(p, bytes / CPU_HUGE_PAGE * CPU_HUGE_PAGE, MADV_HUGEPAGE);
        return p;
    }
#endif
    return nvfp4k_cpu_aligned_alloc(bytes);
}

/* NEED bytes: S's buffer (grown if smaller) when no other call holds it,
 * *LOCKED = 1; else the call's own, *LOCKED = 0.  NULL: out of memory.
 * Give it back with nvfp4k_cpu_scratch_put. */
void *nvfp4k_cpu_scratch_get(cpu_scratch *s, size_t need, int *locked)
{
    *locked = pthread_mutex_trylock(&s->lock) == 0;
    if (!*locked)
        return nvfp4k_cpu_aligned_alloc(need);
    if (s->size < need) {
        free(s->buf);
        s->size = 0;
        if ((s->buf = nvfp4k_cpu_lasting_alloc(need)) != NULL)
            s->size = need;
    }
    return s->buf;
}

void nvfp4k_cpu_scratch_put(cpu_scratch *s, void *buf, int locked)
{
    if (locked)
        pthread_mutex_unlock(&s->lock);
    else
        free(buf);
}

/* the backend's alloc: what libmodel keeps (KV pools, scratch, norms) */
static void *cpu_alloc(void *ctx, size_t bytes, nvfp4_error *err)
{
    void *p = nvfp4k_cpu_lasting_alloc(bytes);

    (void)ctx;
    if (!p)
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", "cpu", -1,
                        "cannot allocate %zu bytes", bytes);
    return p;
}

static void cpu_release(void *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
}

static nvfp4_status cpu_copy(void *ctx, void *dst, const void *src, size_t bytes,
                             nvfp4_error *err)
{
    (void)ctx;
    (void)err;
    memmove(dst, src, bytes);
    return NVFP4_OK;
}

/* ---- elementwise and row operations ---------------------------------------- */

/* The arguments of a row or elementwise operation, for its loop on the
 * backend's threads (nvfp4k_cpu_par(); each item computed as on one thread). */
typedef struct {
    const float *x, *w, *g;
    float *y;
    const int32_t *pos;
    size_t d, n, heads, head_dim, rot;
    float f0, f1, f2;
    int kind;
    int wide; /* glu_range: AVX-512 */
} ew_job;

static int ew_threads(void *ctx, size_t work)
{
    return work >= CPU_PAR_MIN ? nvfp4k_cpu_nthreads(ctx) : 1;
}

#ifdef CPU_HAVE_X86
#include "cpu-exp16.h" /* the SiLU's and the GLUs' e^x */
#include "cpu-exp8.h"  /* the SiLU's e^x on AVX2 */
#endif

#ifdef CPU_HAVE_X86
/* The float64 sum of squares of rmsnorm_range in AVX-512: 16 lanes (the
 * squares of float32 values are exact in float64), lanes 0-7 and 8-15 in
 * two accumulators, added lane by lane and then as _mm512_reduce_add_pd
 * does.  The scalar loop waits on one float64 add per element (rmsnorm
 * was 2.4 % of a SmolLM2-shaped prefill that way, 1.3 % in lanes). */
__attribute__((target("avx512f"))) static double sumsq_avx512(const float *x, size_t d)
{
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();

    for (size_t j = 0; j < d; j += 16) {
        const __mmask16 mk = lanes16(d - j);
        const __m512 v = _mm512_maskz_loadu_ps(mk, x + j);
        const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        const __m512d hi =
            _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        a0 = _mm512_fmadd_pd(lo, lo, a0);
        a1 = _mm512_fmadd_pd(hi, hi, a1);
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
}
#endif

/* HF's LlamaRMSNorm: float32 variance = mean(x^2), x * rsqrt(var + eps),
 * then times the weight.  The sum of squares is kept in double so the
 * result is within float32 rounding of the exact value
 * (KIND: in AVX-512 lanes, sumsq_avx512). */
static void rmsnorm_range(void *arg, size_t i0, size_t i1, int slot)
{
    const ew_job *jb = arg;
    const float *x = jb->x, *weight = jb->w;
    float *y = jb->y;
    const size_t d = jb->d;
    const float eps = jb->f0;

    (void)slot;
    for (size_t i = i0; i < i1; i++) {
        const float *xi = x + i * d;
        float *yi = y + i * d;
        double ss = 0.0;
        float inv;

#ifdef CPU_HAVE_X86
        if (jb->kind)
            ss = sumsq_avx512(xi, d);
        else
#endif
            for (size_t j = 0; j < d; j++)
                ss += (double)xi[j] * xi[j];
        inv = (float)(1.0 / sqrt(ss / (double)d + (double)eps));
        for (size_t j = 0; j < d; j++)
            yi[j] = (xi[j] * inv) * weight[j];
    }
}

static nvfp4_status cpu_rmsnorm(void *ctx, const float *x, const float *weight, size_t m,
                                size_t d, float eps, float *y, nvfp4_error *err)
{
    ew_job j = {.x = x, .w = weight, .y = y, .d = d, .f0 = eps,
                .kind = ((cpu_ctx *)ctx)->isa >= CPU_ISA_AVX512};

    (void)err;
    nvfp4k_cpu_par(ctx, m, ew_threads(ctx, m * d), rmsnorm_range, &j);
    return NVFP4_OK;
}

/* HF rotate_half: for i < rot/2, (x_i, x_{i+rot/2}) is rotated by
 * pos * inv_freq[i]; cos and sin are scaled by attn_factor (1 normally, the
 * "mscale" of YaRN-style scaling). Dimensions past rot_dim are untouched.
 * A row's angles are computed ROPE_MAX_HALF at a time. */
#define ROPE_MAX_HALF 128

static void rope_range(void *arg, size_t i0, size_t i1, int slot)
{
    const ew_job *jb = arg;
    const float *inv_freq = jb->w;
    float *x = jb->y;
    const int32_t *positions = jb->pos;
    const size_t heads = jb->heads, head_dim = jb->head_dim, half = jb->rot / 2;
    const float attn_factor = jb->f0;

    (void)slot;
    for (size_t i = i0; i < i1; i++) {
        /* a row's angles once, then every head along j (which vectorizes;
         * the same float32 operations as element by element) */
        float cs[2 * ROPE_MAX_HALF];
        size_t j0 = 0;

        while (j0 < half) {
            const size_t nj = half - j0 < ROPE_MAX_HALF ? half - j0 : ROPE_MAX_HALF;
            float *c = cs, *sn = cs + ROPE_MAX_HALF;

            for (size_t j = 0; j < nj; j++) {
                /* HF forms the angle in float32: pos * inv_freq */
                const float ang = (float)positions[i] * inv_freq[j0 + j];
                c[j] = cosf(ang) * attn_factor;
                sn[j] = sinf(ang) * attn_factor;
            }
            for (size_t h = 0; h < heads; h++) {
                float *xa = x + (i * heads + h) * head_dim + j0, *xb = xa + half;
                for (size_t j = 0; j < nj; j++) {
                    const float a = xa[j], b = xb[j];
                    xa[j] = a * c[j] - b * sn[j];
                    xb[j] = b * c[j] + a * sn[j];
                }
            }
            j0 += nj;
        }
    }
}

static nvfp4_status cpu_rope(void *ctx, float *x, const int32_t *positions, size_t m,
                             size_t heads, size_t head_dim, size_t rot_dim,
                             const float *inv_freq, float attn_factor, nvfp4_error *err)
{
    ew_job jb = {.w = inv_freq, .y = x, .pos = positions, .heads = heads,
                 .head_dim = head_dim, .rot = rot_dim, .f0 = attn_factor};

    (void)err;
    nvfp4k_cpu_par(ctx, m, ew_threads(ctx, m * heads * rot_dim), rope_range, &jb);
    return NVFP4_OK;
}

#ifdef CPU_HAVE_X86
/* One row of silu_mul_range in 16 lanes: the same operations, e^-g by
 * exp16 (within 1 ulp of libm's expf, whose call per element was 40 % of
 * the SiLU's time). */
__attribute__((target("avx512f"))) static void silu_mul_avx512(const float *g, const float *u,
                                                               float *o, size_t n)
{
    const __m512 one = _mm512_set1_ps(1.0f);

    for (size_t j = 0; j < n; j += 16) {
        const __mmask16 mk = lanes16(n - j);
        const __m512 gv = _mm512_maskz_loadu_ps(mk, g + j);
        /* e^-g no smaller than e^-87 (normal): 1 + e is 1 either way, and
         * a subnormal e^-g took a microcode assist (a NaN passes) */
        const __m512 e = exp16(_mm512_max_ps(
            _mm512_set1_ps(-87.0f),
            _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(gv),
                                                 _mm512_set1_epi32((int)0x80000000u)))));
        _mm512_mask_storeu_ps(o + j, mk,
                              _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)),
                                            _mm512_maskz_loadu_ps(mk, u + j)));
    }
}

/* The same in 8 lanes for AVX2: exp8 has exp16's bits, so the same
 * results as silu_mul_avx512. */
__attribute__((target("avx2,fma"))) static void silu_mul_avx2(const float *g, const float *u,
                                                              float *o, size_t n)
{
    static const int32_t sel[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    const __m256 one = _mm256_set1_ps(1.0f);

    for (size_t j = 0; j < n; j += 8) {
        const __m256i mk = _mm256_loadu_si256((const __m256i *)(sel + 8 - (n - j < 8 ? n - j : 8)));
        const __m256 gv = _mm256_maskload_ps(g + j, mk);
        const __m256 e = exp8(_mm256_max_ps(
            _mm256_set1_ps(-87.0f),
            _mm256_xor_ps(gv, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)))));
        _mm256_maskstore_ps(o + j, mk,
                            _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)),
                                          _mm256_maskload_ps(u + j, mk)));
    }
}
#endif

/* silu(g) * u = g / (1 + e^-g) * u, as transformers' SiLU computes it in
 * float32; KIND: 1 AVX-512, 2 AVX2 */
static void silu_mul_range(void *arg, size_t i0, size_t i1, int slot)
{
    const ew_job *jb = arg;
    const float *gu = jb->x;
    float *out = jb->y;
    const size_t inter = jb->n;

    (void)slot;
    for (size_t i = i0; i < i1; i++) {
        const float *g = gu + i * 2 * inter, *u = g + inter;
#ifdef CPU_HAVE_X86
        if (jb->kind) {
            if (jb->kind == 1)
                silu_mul_avx512(g, u, out + i * inter, inter);
            else
                silu_mul_avx2(g, u, out + i * inter, inter);
            continue;
        }
#endif
        for (size_t j = 0; j < inter; j++)
            out[i * inter + j] = g[j] / (1.0f + expf(-g[j])) * u[j];
    }
}

static nvfp4_status cpu_silu_mul(void *ctx, const float *gu, size_t m, size_t inter,
                                 float *out, nvfp4_error *err)
{
    ew_job jb = {.x = gu, .y = out, .n = inter,
                 .kind = ((cpu_ctx *)ctx)->isa >= CPU_ISA_AVX512 ? 1
                         : ((cpu_ctx *)ctx)->isa == CPU_ISA_AVX2 ? 2
                                                                 : 0};

    (void)err;
    nvfp4k_cpu_par(ctx, m, ew_threads(ctx, m * inter), silu_mul_range, &jb);
    return NVFP4_OK;
}

/* The gated activations in float32, as transformers computes them:
 * GeGLU with torch's approximate="tanh" GELU, 0.5 x (1 + tanh(sqrt(2/pi)
 * (x + 0.044715 x^3))); gpt-oss's clamped SwiGLU (GptOssExperts._apply_gate,
 * gate and up interleaved as its gate_up_proj stores them):
 * gate clamped above at LIMIT, up to [-LIMIT, LIMIT], (up + 1) * gate *
 * sigmoid(ALPHA * gate). */
static void glu_range(void *arg, size_t i0, size_t i1, int slot);

static nvfp4_status cpu_glu(void *ctx, nvfp4_glu_kind kind, const float *gu, size_t m,
                            size_t inter, float alpha, float limit, float *out,
                            nvfp4_error *err)
{
    ew_job jb = {.x = gu, .y = out, .n = inter, .f0 = alpha, .f1 = limit, .kind = (int)kind,
                 .wide = ((cpu_ctx *)ctx)->isa >= CPU_ISA_AVX512};

    if (kind == NVFP4_GLU_SILU)
        return cpu_silu_mul(ctx, gu, m, inter, out, err);
    nvfp4k_cpu_par(ctx, m, ew_threads(ctx, m * inter), glu_range, &jb);
    return NVFP4_OK;
}

#ifdef CPU_HAVE_X86
/* tanh in 16 lanes: sign(z) (1 - 2 / (e^2|z| + 1)), an absolute error of a
 * few 1e-8 (what 1 + tanh, GeGLU's use, keeps), exp16 in place of libm's
 * tanhf per element; infinity (|z| > 44) gives 1, a NaN stays NaN. */
__attribute__((target("avx512f"))) static inline __m512 tanh16(__m512 z)
{
    const __m512 one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    const __m512 az = _mm512_castsi512_ps(_mm512_andnot_si512(sign, _mm512_castps_si512(z)));
    const __m512 t = _mm512_sub_ps(
        one, _mm512_div_ps(two, _mm512_add_ps(exp16(_mm512_add_ps(az, az)), one)));

    return _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(t), _mm512_and_si512(sign, _mm512_castps_si512(z))));
}

/* One row of glu_range in 16 lanes: the scalar loops' float32 operations
 * in their order, tanhf by tanh16 and expf by exp16 (within 1 ulp). */
__attribute__((target("avx512f"))) static void glu_avx512(nvfp4_glu_kind kind, const float *g,
                                                          float *o, size_t inter, float alpha,
                                                          float limit)
{
    const __m512 one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f);

    if (kind == NVFP4_GLU_GELU_TANH) {
        const __m512 beta = _mm512_set1_ps((float)(M_SQRT2 * M_2_SQRTPI * 0.5)),
                     kappa = _mm512_set1_ps(0.044715f);
        const float *u = g + inter;

        for (size_t j = 0; j < inter; j += 16) {
            const __mmask16 mk = lanes16(inter - j);
            const __m512 x = _mm512_maskz_loadu_ps(mk, g + j);
            const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
            const __m512 inner = _mm512_mul_ps(beta, _mm512_add_ps(x, _mm512_mul_ps(kappa, x3)));
            const __m512 v = _mm512_mul_ps(_mm512_mul_ps(half, x),
                                           _mm512_add_ps(one, tanh16(inner)));
            _mm512_mask_storeu_ps(o + j, mk, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mk, u + j)));
        }
        return;
    }
    {
        /* gate and up interleaved: even lanes gates, odd ups */
        const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                            2, 0),
                      od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
        const __m512 lim = _mm512_set1_ps(limit), nlim = _mm512_set1_ps(-limit),
                     al = _mm512_set1_ps(alpha);
        const __m512i sign = _mm512_set1_epi32((int)0x80000000u);

        for (size_t j = 0; j < inter; j += 16) {
            const size_t c = inter - j < 16 ? inter - j : 16;
            const __m512 a = _mm512_maskz_loadu_ps(lanes16(2 * c), g + 2 * j),
                         b = _mm512_maskz_loadu_ps(lanes16(c > 8 ? 2 * c - 16 : 0),
                                                   g + 2 * j + 16);
            /* min / max return their second operand for a NaN: kept, as
             * the scalar comparisons keep it */
            const __m512 x = _mm512_min_ps(lim, _mm512_permutex2var_ps(a, ev, b));
            const __m512 y =
                _mm512_max_ps(nlim, _mm512_min_ps(lim, _mm512_permutex2var_ps(a, od, b)));
            const __m512 e = exp16(_mm512_castsi512_ps(
                _mm512_xor_si512(_mm512_castps_si512(_mm512_mul_ps(x, al)), sign)));
            const __m512 sg = _mm512_div_ps(one, _mm512_add_ps(one, e));
            _mm512_mask_storeu_ps(o + j, lanes16(c),
                                  _mm512_mul_ps(_mm512_add_ps(y, one), _mm512_mul_ps(x, sg)));
        }
    }
}
#endif

static void glu_range(void *arg, size_t i0, size_t i1, int slot)
{
    const ew_job *jb = arg;
    const float beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
    const float *gu = jb->x;
    float *out = jb->y;
    const size_t inter = jb->n;
    const float alpha = jb->f0, limit = jb->f1;
    const nvfp4_glu_kind kind = (nvfp4_glu_kind)jb->kind;

    (void)slot;
    for (size_t i = i0; i < i1; i++) {
        const float *g = gu + i * 2 * inter, *u = g + inter;
        float *o = out + i * inter;
#ifdef CPU_HAVE_X86
        if (jb->wide) {
            glu_avx512(kind, g, o, inter, alpha, limit);
            continue;
        }
#endif
        if (kind == NVFP4_GLU_GELU_TANH) {
            for (size_t j = 0; j < inter; j++) {
                float x = g[j], inner = beta * (x + kappa * (x * x * x));
                o[j] = 0.5f * x * (1.0f + tanhf(inner)) * u[j];
            }
        } else { /* gate and up interleaved */
            for (size_t j = 0; j < inter; j++) {
                float gj = g[2 * j], uj = g[2 * j + 1];
                float x = gj > limit ? limit : gj;
                float y = uj > limit ? limit : uj < -limit ? -limit : uj;
                float sg = 1.0f / (1.0f + expf(-(x * alpha)));
                o[j] = (y + 1.0f) * (x * sg);
            }
        }
    }
}

static void scale_range(void *arg, size_t i0, size_t i1, int slot)
{
    const ew_job *jb = arg;

    (void)slot;
    for (size_t i = i0; i < i1; i++)
        jb->y[i] = jb->x[i] * jb->f0;
}

static nvfp4_status cpu_scale(void *ctx, const float *x, size_t n, float s, float *y,
                              nvfp4_error *err)
{
    ew_job jb = {.x = x, .y = y, .f0 = s};

    (void)err;
    nvfp4k_cpu_par(ctx, n, ew_threads(ctx, n), scale_range, &jb);
    return NVFP4_OK;
}

static void softmax_row(const float *x, size_t n, float *y)
{
    float mx = -INFINITY, sum = 0.0f, inv;

    for (size_t j = 0; j < n; j++)
        if (x[j] > mx)
            mx = x[j];
    for (size_t j = 0; j < n; j++) {
        y[j] = expf(x[j] - mx);
        sum += y[j];
    }
    inv = 1.0f / sum;
    for (size_t j = 0; j < n; j++)
        y[j] *= inv;
}

static void softmax_range(void *arg, size_t i0, size_t i1, int slot)
{
    const ew_job *jb = arg;

    (void)slot;
    for (size_t i = i0; i < i1; i++)
        softmax_row(jb->x + i * jb->n, jb->n, jb->y + i * jb->n);
}

static nvfp4_status cpu_softmax(void *ctx, const float *x, size_t m, size_t n, float *y,
                                nvfp4_error *err)
{
    ew_job jb = {.x = x, .y = y, .n = n};

    (void)err;
    nvfp4k_cpu_par(ctx, m, ew_threads(ctx, m * n), softmax_range, &jb);
    return NVFP4_OK;
}

/* log_softmax = x - max - log(sum(exp(x - max))), the sum in double: these
 * values feed perplexity, where the error of a float sum over 150k
 * vocabulary entries would show. */
static void logsoftmax_range(void *arg, size_t i0, size_t i1, int slot)
{
    const ew_job *jb = arg;
    const float *x = jb->x;
    float *y = jb->y;
    const size_t n = jb->n;

    (void)slot;
    for (size_t i = i0; i < i1; i++) {
        const float *xi = x + i * n;
        float mx = -INFINITY;
        double sum = 0.0;
        float lse;

        for (size_t j = 0; j < n; j++)
            if (xi[j] > mx)
                mx = xi[j];
        for (size_t j = 0; j < n; j++)
            sum += exp((double)xi[j] - (double)mx);
        lse = (float)log(sum);
        for (size_t j = 0; j < n; j++)
            y[i * n + j] = (xi[j] - mx) - lse;
    }
}

static nvfp4_status cpu_logsoftmax(void *ctx, const float *x, size_t m, size_t n, float *y,
                                   nvfp4_error *err)
{
    ew_job jb = {.x = x, .y = y, .n = n};

    (void)err;
    nvfp4k_cpu_par(ctx, m, ew_threads(ctx, m * n), logsoftmax_range, &jb);
    return NVFP4_OK;
}

static nvfp4_status cpu_argmax(void *ctx, const float *x, size_t m, size_t n, int32_t *out,
                               nvfp4_error *err)
{
    (void)ctx;
    (void)err;
    for (size_t i = 0; i < m; i++) {
        const float *xi = x + i * n;
        size_t best = 0;
        /* first maximum wins (torch.argmax); NaN is never chosen over a number */
        for (size_t j = 1; j < n; j++)
            if (xi[j] > xi[best] || (isnan(xi[best]) && !isnan(xi[j])))
                best = j;
        out[i] = (int32_t)best;
    }
    return NVFP4_OK;
}

/* Router (§6): softmax over the expert logits, the k largest probabilities
 * (ties: lower index first), optionally renormalised to sum 1. */
static nvfp4_status cpu_topk(void *ctx, const float *logits, size_t m, size_t e, size_t k,
                             int renorm, int32_t *idx, float *weights, nvfp4_error *err)
{
    float *p = malloc(e * sizeof(float));
    unsigned char *taken = malloc(e);

    (void)ctx;
    if (!p || !taken) {
        free(p);
        free(taken);
        return nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", "topk", -1, "out of memory");
    }
    for (size_t i = 0; i < m; i++) {
        float sum = 0.0f;

        softmax_row(logits + i * e, e, p);
        memset(taken, 0, e);
        for (size_t j = 0; j < k; j++) {
            size_t best = e;
            for (size_t c = 0; c < e; c++)
                if (!taken[c] && (best == e || p[c] > p[best]))
                    best = c;
            taken[best] = 1;
            idx[i * k + j] = (int32_t)best;
            weights[i * k + j] = p[best];
            sum += p[best];
        }
        if (renorm)
            for (size_t j = 0; j < k; j++)
                weights[i * k + j] /= sum;
    }
    free(p);
    free(taken);
    return NVFP4_OK;
}

static void add_range(void *arg, size_t i0, size_t i1, int slot)
{
    const ew_job *jb = arg;

    (void)slot;
    for (size_t i = i0; i < i1; i++)
        jb->y[i] = jb->x[i] + jb->w[i];
}

static nvfp4_status cpu_add(void *ctx, const float *a, const float *b, size_t n, float *y,
                            nvfp4_error *err)
{
    ew_job jb = {.x = a, .w = b, .y = y};

    (void)err;
    nvfp4k_cpu_par(ctx, n, ew_threads(ctx, n), add_range, &jb);
    return NVFP4_OK;
}

static void gate_add_range(void *arg, size_t t0, size_t t1, int slot)
{
    const ew_job *jb = arg;
    const size_t n = jb->n;

    (void)slot;
    for (size_t t = t0; t < t1; t++) {
        const float g = 1.0f / (1.0f + expf(-jb->g[t]));
        for (size_t i = 0; i < n; i++)
            jb->y[t * n + i] += g * jb->x[t * n + i];
    }
}

static nvfp4_status cpu_gate_add(void *ctx, const float *x, const float *gate, size_t m,
                                 size_t n, float *y, nvfp4_error *err)
{
    ew_job jb = {.x = x, .g = gate, .y = y, .n = n};

    (void)err;
    nvfp4k_cpu_par(ctx, m, ew_threads(ctx, m * n), gate_add_range, &jb);
    return NVFP4_OK;
}

/* Mixture of experts (§6): tokens grouped by expert, each expert one batched
 * w13 product, SiLU(gate) * up (or KIND's activation), one w2 product; each token's outputs are
 * summed in ascending expert order, whatever the thread count. */
static nvfp4_status cpu_moe(void *vctx, nvfp4_kweight *const *kw13, nvfp4_kweight *const *kw2,
                            size_t experts, const float *x, size_t m, const int32_t *idx,
                            const float *weights, size_t k, nvfp4_glu_kind kind, float alpha,
                            float limit, float *y, nvfp4_error *err)
{
    cpu_ctx *ctx = vctx;
    const size_t hidden = (size_t)kw13[0]->desc.k, inter = (size_t)kw2[0]->desc.k;
    /* rows, rw, xe [m, hidden], gu [m, 2 inter], h [m, inter], o [m, hidden]
     * in one block, 64-byte aligned pieces (the registry bounded m * hidden
     * and m * 2 * inter by 2^48) */
    const size_t a_rows = (m * sizeof(size_t) + 63) & ~(size_t)63,
                 a_rw = (m * sizeof(float) + 63) & ~(size_t)63,
                 a_xe = (m * hidden * sizeof(float) + 63) & ~(size_t)63,
                 a_gu = (m * 2 * inter * sizeof(float) + 63) & ~(size_t)63,
                 a_h = (m * inter * sizeof(float) + 63) & ~(size_t)63;
    const size_t need = a_rows + a_rw + a_xe + a_gu + a_h + m * hidden * sizeof(float);
    int locked;
    unsigned char *buf = nvfp4k_cpu_scratch_get(&ctx->moe_scratch, need, &locked);
    size_t *rows;
    float *rw, *xe, *gu, *h, *o;
    nvfp4_status st = NVFP4_OK;

    if (!buf) {
        st = nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", "moe", -1,
                             "out of memory for %zu tokens", m);
        goto out;
    }
    rows = (size_t *)buf;
    rw = (float *)(buf + a_rows);
    xe = (float *)(buf + a_rows + a_rw);
    gu = (float *)(buf + a_rows + a_rw + a_xe);
    h = (float *)(buf + a_rows + a_rw + a_xe + a_gu);
    o = (float *)(buf + a_rows + a_rw + a_xe + a_gu + a_h);
    memset(y, 0, m * hidden * sizeof(float));
    for (size_t e = 0; e < experts && st == NVFP4_OK; e++) {
        size_t cnt = 0;

        for (size_t t = 0; t < m; t++) {
            int hit = 0;
            /* an expert listed twice for a token runs once with both weights */
            for (size_t j = 0; j < k; j++)
                if ((size_t)idx[t * k + j] == e) {
                    if (!hit)
                        rw[cnt] = 0.0f;
                    rw[cnt] += weights[t * k + j];
                    hit = 1;
                }
            if (hit) {
                rows[cnt] = t;
                memcpy(xe + cnt * hidden, x + t * hidden, hidden * sizeof(float));
                cnt++;
            }
        }
        if (cnt == 0)
            continue;
        if ((st = nvfp4k_cpu_linear(vctx, kw13[e]->impl, &kw13[e]->desc, xe, cnt, gu, err)) !=
            NVFP4_OK)
            break;
        cpu_glu(vctx, kind, gu, cnt, inter, alpha, limit, h, err);
        if ((st = nvfp4k_cpu_linear(vctx, kw2[e]->impl, &kw2[e]->desc, h, cnt, o, err)) !=
            NVFP4_OK)
            break;
        for (size_t c = 0; c < cnt; c++)
            for (size_t d = 0; d < hidden; d++)
                y[rows[c] * hidden + d] += rw[c] * o[c * hidden + d];
    }
out:
    nvfp4k_cpu_scratch_put(&ctx->moe_scratch, buf, locked);
    return st;
}

static const nvfp4_backend_iface cpu_iface = {
    .abi_version = NVFP4_BACKEND_ABI_VERSION,
    .name = "cpu",
    .available = cpu_available,
    .open = cpu_open,
    .close = cpu_close,
    .get_caps = cpu_get_caps,
    .supports = cpu_supports,
    .set_threads = cpu_set_threads,
    .threads = cpu_threads,
    .sync = NULL,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .kweight_upload = nvfp4k_cpu_kweight_upload,
    .kweight_free = nvfp4k_cpu_kweight_free,
    .linear = nvfp4k_cpu_linear,
    .linear_multi = nvfp4k_cpu_linear_multi,
    .embed = nvfp4k_cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .attention = nvfp4k_cpu_attention,
    .silu_mul = cpu_silu_mul,
    .softmax = cpu_softmax,
    .topk = cpu_topk,
    .moe = cpu_moe,
    .add = cpu_add,
    .logsoftmax = cpu_logsoftmax,
    .argmax = cpu_argmax,
    .gate_add = cpu_gate_add,
    .attention_paged = nvfp4k_cpu_attention_paged,
    .glu = cpu_glu,
    .scale = cpu_scale,
};

const nvfp4_backend_iface *nvfp4k_cpu_iface(void)
{
    return &cpu_iface;
}
