/* SPDX-License-Identifier: MIT */
/*
 * libkernels/gpu/bench-gpu.cu - GPU benchmarks for scripts/gpu-check.sh (not a test).
 *
 *   GEMV (decode, 1 token): NVFP4 weights W4A16 and W4A4 against a
 *   device-to-device copy of the same bytes (packed weights + block scales),
 *   the bandwidth bound of a kernel that reads each weight byte once.
 *   GEMM (prefill, 16..4096 tokens): our NVFP4 kernels (the BF16 tensor-core
 *   GEMM on CUDA sm_80+ and AMD CDNA2/3, the FP4 tensor-core W4A4 GEMM on
 *   sm_120a, the portable tiled kernel everywhere) against cuBLAS BF16
 *   (cublasGemmEx, BF16 in/out, float32 compute) on the same shape - the
 *   dense peer at 16 bits per weight (CUDA only; cuBLAS is linked into this
 *   program alone).
 *
 * Times come from device events around ITERS back-to-back launches on one
 * stream, after warm-up.  Inputs are random bytes/floats: the timing of
 * these kernels does not depend on the values.  Usage: bench-gpu [--quick]
 */
#include "gpu.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#ifdef GPU_VENDOR_CUDA
#include <cublas_v2.h>
#include <cuda_bf16.h>
#endif

static gpu_stream_t stream;
static gk_device dev;

#define CHECK(call)                                                                       \
    do {                                                                                  \
        gpu_error_t e_ = (call);                                                          \
        if (e_ != GPU_SUCCESS) {                                                          \
            fprintf(stderr, "bench-gpu: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,      \
                    gpu_error_string(e_));                                                \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t next_u32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static void *dev_random(size_t bytes, int kind)
{
    unsigned char *h = (unsigned char *)malloc(bytes);
    void *d = NULL;

    if (!h)
        return NULL;
    if (kind == 1) { /* float32 in [-1, 1) */
        float *f = (float *)h;
        for (size_t i = 0; i < bytes / 4; i++)
            f[i] = (float)(next_u32() % 20001) / 10000.0f - 1.0f;
    } else if (kind == 2) { /* E4M3 scales between 0.25 and 2 (no NaN codes) */
        for (size_t i = 0; i < bytes; i++)
            h[i] = (unsigned char)(0x28 + next_u32() % 24);
    } else if (kind == 3) { /* bf16 in [-1, 1) */
        uint16_t *b = (uint16_t *)h;
        for (size_t i = 0; i < bytes / 2; i++) {
            float f = (float)(next_u32() % 20001) / 10000.0f - 1.0f;
            uint32_t u;
            memcpy(&u, &f, 4);
            b[i] = (uint16_t)(u >> 16);
        }
    } else {
        for (size_t i = 0; i < bytes; i++)
            h[i] = (unsigned char)next_u32();
    }
    if (gpu_malloc(&d, bytes) != GPU_SUCCESS ||
        gpu_copy_h2d(d, h, bytes, stream) != GPU_SUCCESS ||
        gpu_stream_sync(stream) != GPU_SUCCESS) {
        free(h);
        return NULL;
    }
    free(h);
    return d;
}

/* Milliseconds per call of one of the timed operations. */
enum { OP_LINEAR, OP_COPY, OP_CUBLAS };

typedef struct {
    int op;
    const gk_weight *w;
    const float *x;
    float *y, *xq;
    int64_t m;
    int force;
    void *dst;
    const void *src;
    size_t bytes;
#ifdef GPU_VENDOR_CUDA
    cublasHandle_t blas;
    const void *a, *b;
    void *c;
    int n, k;
#endif
} job;

static gpu_error_t run_once(const job *j)
{
    switch (j->op) {
    case OP_LINEAR: return gk_linear(&dev, j->w, j->x, j->m, j->y, j->xq, j->force, stream);
    case OP_COPY: return gpu_copy_d2d(j->dst, j->src, j->bytes, stream);
#ifdef GPU_VENDOR_CUDA
    case OP_CUBLAS: {
        const float one = 1.0f, zero = 0.0f;
        cublasStatus_t st = cublasGemmEx(j->blas, CUBLAS_OP_T, CUBLAS_OP_N, j->n, (int)j->m,
                                         j->k, &one, j->a, CUDA_R_16BF, j->k, j->b,
                                         CUDA_R_16BF, j->k, &zero, j->c, CUDA_R_16BF, j->n,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        return st == CUBLAS_STATUS_SUCCESS ? GPU_SUCCESS : gpu_last_error();
    }
#endif
    }
    return GPU_SUCCESS;
}

static double time_ms(const job *j, double budget_ms)
{
    gpu_event_t a, b;
    float ms = 0.0f;
    int iters = 3;

    if (gpu_event_create(&a) != GPU_SUCCESS || gpu_event_create(&b) != GPU_SUCCESS)
        return -1.0;
    for (int w = 0; w < 3; w++)
        if (run_once(j) != GPU_SUCCESS)
            return -1.0;
    /* one timed batch to size the real one */
    for (int pass = 0; pass < 2; pass++) {
        if (gpu_event_record(a, stream) != GPU_SUCCESS)
            return -1.0;
        for (int i = 0; i < iters; i++)
            if (run_once(j) != GPU_SUCCESS)
                return -1.0;
        if (gpu_event_record(b, stream) != GPU_SUCCESS || gpu_event_sync(b) != GPU_SUCCESS ||
            gpu_event_elapsed_ms(&ms, a, b) != GPU_SUCCESS)
            return -1.0;
        if (pass == 0) {
            double per = ms / iters;
            iters = per > 0 ? (int)(budget_ms / per) : 1000;
            iters = iters < 5 ? 5 : iters > 2000 ? 2000 : iters;
        }
    }
    (void)gpu_event_destroy(a);
    (void)gpu_event_destroy(b);
    return (double)ms / iters;
}

static int bench_gemv(int64_t n, int64_t k, double budget)
{
    const size_t pb = (size_t)n * (size_t)k / 2, sb = (size_t)n * (size_t)k / 16;
    uint8_t *packed = (uint8_t *)dev_random(pb, 0), *scales = (uint8_t *)dev_random(sb, 2);
    float *x = (float *)dev_random((size_t)k * 4, 1), *xq = NULL, *y = NULL;
    void *copy = NULL;
    gk_weight w;
    job j;
    double t16, t4, tc;
    int best_rows = 0;

    if (!packed || !scales || !x)
        return 1;
    CHECK(gpu_malloc((void **)&y, (size_t)n * 4));
    CHECK(gpu_malloc((void **)&xq, (size_t)k * 4));
    CHECK(gpu_malloc(&copy, pb + sb));
    memset(&w, 0, sizeof w);
    w.format = GK_NVFP4;
    w.n = n;
    w.k = k;
    w.packed = packed;
    w.scales = scales;
    w.global = 0.01f;
    memset(&j, 0, sizeof j);
    j.op = OP_LINEAR;
    j.w = &w;
    j.x = x;
    j.y = y;
    j.xq = xq;
    j.m = 1;
    /* rows per warp of the GEMV: sweep, report each, keep the best */
    t16 = -1;
    for (int r = 1; r <= 4; r *= 2) {
        double t;
        dev.gemv_rows = r;
        t = time_ms(&j, budget);
        printf("gemv %6lld x %-6lld  w4a16 rows/warp %d: %8.2f us %7.0f GB/s\n",
               (long long)n, (long long)k, r, t * 1e3, (pb + sb) / (t * 1e6));
        if (t > 0 && (t16 < 0 || t < t16)) {
            t16 = t;
            best_rows = r;
        }
    }
    dev.gemv_rows = best_rows;
    w.input_scale = 0.002f;
    w.input_gs = 1.0f / w.input_scale;
    t4 = time_ms(&j, budget);
    dev.gemv_rows = 0;
    /* the same bytes, moved device to device (read + write) */
    j.op = OP_COPY;
    j.dst = copy;
    j.src = packed;
    j.bytes = pb;
    tc = time_ms(&j, budget);
    j.src = scales;
    j.dst = (uint8_t *)copy + pb;
    j.bytes = sb;
    tc += time_ms(&j, budget);
    printf("gemv %6lld x %-6lld  bytes %10zu  w4a16 (rows/warp %d) %8.2f us %7.0f GB/s  "
           "w4a4 %8.2f us %7.0f GB/s  d2d-copy %8.2f us %7.0f GB/s(r+w)  "
           "w4a16/copy-time %.2f\n",
           (long long)n, (long long)k, pb + sb, best_rows, t16 * 1e3, (pb + sb) / (t16 * 1e6),
           t4 * 1e3, (pb + sb) / (t4 * 1e6), tc * 1e3, 2.0 * (pb + sb) / (tc * 1e6),
           t16 / tc);
    (void)gpu_free(packed);
    (void)gpu_free(scales);
    (void)gpu_free(x);
    (void)gpu_free(xq);
    (void)gpu_free(y);
    (void)gpu_free(copy);
    return 0;
}

static int bench_gemm(int64_t n, int64_t k, const int64_t *tokens, int ntok, double budget)
{
    const int64_t mmax = tokens[ntok - 1];
    const size_t pb = (size_t)n * (size_t)k / 2, sb = (size_t)n * (size_t)k / 16;
    uint8_t *packed = (uint8_t *)dev_random(pb, 0), *scales = (uint8_t *)dev_random(sb, 2);
    float *x = (float *)dev_random((size_t)mmax * (size_t)k * 4, 1), *xq = NULL, *y = NULL;
    gk_weight w;
    job j;
#ifdef GPU_VENDOR_CUDA
    void *wb = dev_random((size_t)n * (size_t)k * 2, 3);
    void *xb = dev_random((size_t)mmax * (size_t)k * 2, 3);
    void *cb = NULL;
    cublasHandle_t blas;
    if (!wb || !xb || cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(blas, stream) != CUBLAS_STATUS_SUCCESS)
        return 1;
    CHECK(gpu_malloc(&cb, (size_t)mmax * (size_t)n * 2));
#endif

    if (!packed || !scales || !x)
        return 1;
    CHECK(gpu_malloc((void **)&y, (size_t)mmax * (size_t)n * 4));
    CHECK(gpu_malloc((void **)&xq, (size_t)mmax * (size_t)k * 4));
    memset(&w, 0, sizeof w);
    w.format = GK_NVFP4;
    w.n = n;
    w.k = k;
    w.packed = packed;
    w.scales = scales;
    w.global = 0.01f;
    for (int t = 0; t < ntok; t++) {
        const double flop = 2.0 * (double)tokens[t] * (double)n * (double)k;
        double tw = -1, tt, t4, tf = -1, tb = -1;
        memset(&j, 0, sizeof j);
        j.op = OP_LINEAR;
        j.w = &w;
        j.x = x;
        j.y = y;
        j.xq = xq;
        j.m = tokens[t];
        w.input_scale = w.input_gs = 0.0f;
        j.force = 2; /* portable tiled */
        tt = time_ms(&j, budget);
        if (dev.mma) {
            j.force = 3;
            tw = time_ms(&j, budget);
        }
        j.force = 0; /* what the backend picks, W4A4 (qdq included) */
        w.input_scale = 0.002f;
        w.input_gs = 1.0f / w.input_scale;
        t4 = time_ms(&j, budget);
        if (dev.fp4mma) {
            j.force = 4; /* W4A4 on FP4 tensor cores (activation quantization included) */
            tf = time_ms(&j, budget);
        }
#ifdef GPU_VENDOR_CUDA
        j.op = OP_CUBLAS;
        j.blas = blas;
        j.a = wb;
        j.b = xb;
        j.c = cb;
        j.n = (int)n;
        j.k = (int)k;
        tb = time_ms(&j, budget);
#endif
        printf("gemm %6lld x %-6lld tokens %5lld  tiled %9.3f ms %6.1f TFLOPS  mma %9.3f ms "
               "%6.1f TFLOPS  w4a4 %9.3f ms  fp4mma %9.3f ms %6.1f TFLOPS  "
               "cublas-bf16 %9.3f ms %6.1f TFLOPS  best/cublas-time %.2f\n",
               (long long)n, (long long)k, (long long)tokens[t], tt, flop / (tt * 1e9), tw,
               tw > 0 ? flop / (tw * 1e9) : 0.0, t4, tf, tf > 0 ? flop / (tf * 1e9) : 0.0, tb,
               tb > 0 ? flop / (tb * 1e9) : 0.0,
               tb > 0 ? ((tw > 0 && tw < tt) ? tw : tt) / tb : 0.0);
        fflush(stdout);
    }
#ifdef GPU_VENDOR_CUDA
    cublasDestroy(blas);
    (void)gpu_free(wb);
    (void)gpu_free(xb);
    (void)gpu_free(cb);
#endif
    (void)gpu_free(packed);
    (void)gpu_free(scales);
    (void)gpu_free(x);
    (void)gpu_free(xq);
    (void)gpu_free(y);
    return 0;
}

int main(int argc, char **argv)
{
    static const int64_t gemv_shapes[][2] = {
        {4096, 4096}, {4096, 14336}, {14336, 4096}, {8192, 28672}};
    static const int64_t tokens[] = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
    const int quick = argc > 1 && !strcmp(argv[1], "--quick");
    const double budget = quick ? 10.0 : 50.0; /* ms of timed work per measurement */
    gpu_device_info info;
    int count = 0;

    if (gpu_device_count(&count) != GPU_SUCCESS || count == 0) {
        fprintf(stderr, "bench-gpu: no %s device\n", GPU_VENDOR_NAME);
        return 77;
    }
    CHECK(gpu_set_device(0));
    CHECK(gpu_get_device_info(0, &info));
    CHECK(gpu_stream_create(&stream));
    dev.warp_size = info.warp_size;
    {
        int *dcaps = NULL, caps = 0;
        CHECK(gpu_malloc((void **)&dcaps, sizeof(int)));
        CHECK(gk_caps(dcaps, stream));
        CHECK(gpu_copy_d2h(&caps, dcaps, sizeof caps, stream));
        CHECK(gpu_stream_sync(stream));
        (void)gpu_free(dcaps);
        dev.mma = (caps & GK_CAP_MMA) != 0;
        dev.fp4mma = (caps & GK_CAP_FP4_MMA) != 0;
#ifdef GPU_VENDOR_CUDA
        dev.fp4mma = dev.fp4mma && info.major == 12;
#endif
    }
    printf("device %s (%s), %d SMs/CUs, %.1f GiB, warp %d, mma %s, fp4mma %s\n", info.name,
           info.arch, info.sm_count, info.total_mem / 1073741824.0, info.warp_size,
           dev.mma ? "yes" : "no", dev.fp4mma ? "yes" : "no");
    for (size_t i = 0; i < sizeof gemv_shapes / sizeof gemv_shapes[0]; i++)
        if (bench_gemv(gemv_shapes[i][0], gemv_shapes[i][1], budget))
            return 1;
    if (bench_gemm(4096, 4096, tokens, quick ? 5 : 9, budget))
        return 1;
    if (bench_gemm(14336, 4096, tokens, quick ? 5 : 9, budget))
        return 1;
    (void)gpu_stream_destroy(stream);
    return 0;
}
