/* SPDX-License-Identifier: MIT */
/* bench-dequant: NVFP4 -> float32 dequantization throughput, as a ratio to
 * a memcpy of the same output size measured in the same run (the machine's
 * bandwidth varies with its neighbours, so only a probe taken right beside
 * the timing means anything; see docs/perf-anchors.md).
 *
 * Usage: bench/bench-dequant [N [K [REPS]]]   (default 4096 4096 7)
 * Single thread: one row at a time through nvfp4_quant_dequant_row.
 * All threads: nvfp4_linear_dequant (OpenMP over rows), against a memcpy
 * split over the same threads.  Best of REPS for each, interleaved. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <nvfp4/quant.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void copy_parallel(float *dst, const float *src, size_t count, int threads)
{
    if (threads <= 1) {
        memcpy(dst, src, count * sizeof(float));
        return;
    }
#pragma omp parallel num_threads(threads)
    {
#ifdef _OPENMP
        size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
#else
        size_t t = 0, nt = 1;
#endif
        size_t lo = count * t / nt, hi = count * (t + 1) / nt;
        memcpy(dst + lo, src + lo, (hi - lo) * sizeof(float));
    }
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 4096;
    size_t k = argc > 2 ? strtoul(argv[2], NULL, 10) : 4096;
    int reps = argc > 3 ? atoi(argv[3]) : 7, threads = 1;
    uint8_t *packed, *scales;
    float *out, *src;
    nvfp4_linear lin;
    nvfp4_error err;
    double gb, best[2][2];
    uint32_t x = 1;

    if (n == 0 || k == 0 || k % NVFP4_BLOCK || reps < 1) {
        fprintf(stderr, "usage: bench-dequant [N [K [REPS]]] (K %% 16 == 0)\n");
        return 2;
    }
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    packed = malloc(n * k / 2);
    scales = malloc(n * k / NVFP4_BLOCK);
    out = malloc(n * k * sizeof(float));
    src = malloc(n * k * sizeof(float));
    if (!packed || !scales || !out || !src) {
        fprintf(stderr, "bench-dequant: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n * k / 2; i++)
        packed[i] = (uint8_t)((x = x * 1664525u + 1013904223u) >> 24);
    for (size_t i = 0; i < n * k / NVFP4_BLOCK; i++)
        scales[i] = (uint8_t)(((x = x * 1664525u + 1013904223u) >> 24) % 0x7E);
    memset(out, 0, n * k * sizeof(float)); /* fault the pages in */
    memset(src, 1, n * k * sizeof(float));

    memset(&lin, 0, sizeof(lin));
    lin.scheme = NVFP4_SCHEME_W4A16;
    lin.n = (int64_t)n;
    lin.k = (int64_t)k;
    lin.weight = packed;
    lin.scales = scales;
    lin.weight_scale_2 = 3.0e-4f;

    for (int m = 0; m < 2; m++)
        best[m][0] = best[m][1] = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0, t;
        /* [mode][0] = dequant, [mode][1] = memcpy; mode 0 = 1 thread */
        t0 = now();
        for (size_t i = 0; i < n; i++)
            nvfp4_quant_dequant_row(packed + i * (k / 2), scales + i * (k / NVFP4_BLOCK),
                                    lin.weight_scale_2, k, out + i * k);
        t = now() - t0;
        best[0][0] = t < best[0][0] ? t : best[0][0];
        t0 = now();
        copy_parallel(out, src, n * k, 1);
        t = now() - t0;
        best[0][1] = t < best[0][1] ? t : best[0][1];

        t0 = now();
        if (nvfp4_linear_dequant(&lin, out, &err)) {
            fprintf(stderr, "bench-dequant: %s\n", err.text);
            return 1;
        }
        t = now() - t0;
        best[1][0] = t < best[1][0] ? t : best[1][0];
        t0 = now();
        copy_parallel(out, src, n * k, threads);
        t = now() - t0;
        best[1][1] = t < best[1][1] ? t : best[1][1];
    }
    gb = (double)n * (double)k * sizeof(float) / 1e9;
    printf("dequant %zu x %zu -> %.1f MiB float32 (reads %.1f MiB), best of %d\n", n, k,
           gb * 1e9 / 1048576.0, (double)(n * k / 2 + n * k / 16) / 1048576.0, reps);
    for (int m = 0; m < 2; m++)
        printf("%2d thread%s: dequant %.2f ms (%.1f GB/s written, %.2f Gweights/s), "
               "memcpy %.2f ms (%.1f GB/s); dequant/memcpy throughput ratio %.2f\n",
               m ? threads : 1, (m ? threads : 1) > 1 ? "s" : " ", best[m][0] * 1e3,
               gb / best[m][0], (double)n * (double)k / best[m][0] / 1e9, best[m][1] * 1e3,
               gb / best[m][1], best[m][1] / best[m][0]);
    free(packed);
    free(scales);
    free(out);
    free(src);
    return 0;
}
