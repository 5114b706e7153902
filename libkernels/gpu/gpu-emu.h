/* SPDX-License-Identifier: MIT */
/*
 * libkernels/gpu/gpu-emu.h - the neutral GPU spelling of libkernels/gpu/gpu.h, defined for a CPU
 * emulator: a developer tool (scripts/gpu-emu-check.sh), never installed,
 * that runs libkernels/gpu/kernels.cu and libkernels/gpu/backend-gpu.cu on a machine without a
 * GPU so that the kernels' indexing, reductions, barriers and warp
 * exchanges are exercised by tests/test-gpu.c.
 *
 * Every GPU thread is a fiber (ucontext) on one OS thread; the blocks of a
 * launch run one after the other.  __syncthreads waits for every live
 * thread of the block, a warp shuffle for every live lane of the warp; a
 * divergent barrier is reported and aborts (this is a test tool).  The warp
 * is GPU_EMU_WARP lanes (32 by default; 64 emulates CDNA wavefronts).
 * Device memory is host memory.  The tensor-core instructions of libkernels/gpu/gpu.h
 * are emulated as warp collectives (libkernels/gpu/emu.cc): at warp 32 NVIDIA's
 * mma.sync m16n8k16 BF16 and the block-scaled m16n8k64 FP4 MMA, at warp 64
 * AMD's 16x16x16 BF16 MFMA, each with its documented lane layout, exact
 * products and float32 accumulation in k order.  The <<<...>>> launches are
 * rewritten into gpu_emu_launch() calls by the script before compiling.
 */
#ifndef NVFP4_GPU_EMU_H
#define NVFP4_GPU_EMU_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef __cplusplus
#include <functional>
#endif

#define GPU_VENDOR_EMU 1
#ifndef GPU_EMU_NAME
#define GPU_EMU_NAME "cuda"
#endif
#define GPU_VENDOR_NAME GPU_EMU_NAME
#ifndef GPU_EMU_WARP
#define GPU_EMU_WARP 32
#endif

typedef int gpu_error_t;
typedef void *gpu_stream_t;
typedef double *gpu_event_t;

#define GPU_SUCCESS 0
#define GPU_EMU_ERR_OOM 2

/* ---- host side ---------------------------------------------------------- */

static inline int gpu_is_oom(gpu_error_t e) { return e == GPU_EMU_ERR_OOM; }
static inline const char *gpu_error_string(gpu_error_t e)
{
    return e == GPU_EMU_ERR_OOM ? "out of memory" : e ? "emulator error" : "no error";
}
static inline const char *gpu_error_name(gpu_error_t e)
{
    return e == GPU_EMU_ERR_OOM ? "emuErrorMemoryAllocation" : e ? "emuError" : "emuSuccess";
}
static inline gpu_error_t gpu_last_error(void) { return GPU_SUCCESS; }
static inline gpu_error_t gpu_device_count(int *n)
{
    *n = 1;
    return GPU_SUCCESS;
}
static inline gpu_error_t gpu_set_device(int dev) { return dev == 0 ? GPU_SUCCESS : 1; }
static inline gpu_error_t gpu_get_device(int *dev)
{
    *dev = 0;
    return GPU_SUCCESS;
}

typedef struct {
    char name[256];
    char arch[64];
    int major, minor;
    int warp_size;
    int sm_count;
    size_t total_mem;
} gpu_device_info;

static inline gpu_error_t gpu_get_device_info(int dev, gpu_device_info *info)
{
    (void)dev;
    memset(info, 0, sizeof(*info));
    snprintf(info->name, sizeof info->name, "CPU emulator");
    snprintf(info->arch, sizeof info->arch, "emu%d", GPU_EMU_WARP);
    info->warp_size = GPU_EMU_WARP;
    info->sm_count = 1;
    info->total_mem = (size_t)1 << 34;
    return GPU_SUCCESS;
}

static inline gpu_error_t gpu_malloc(void **p, size_t bytes)
{
    /* the "device" refuses what no device has, as a GPU runtime would */
    if (bytes > ((size_t)1 << 40)) {
        *p = NULL;
        return GPU_EMU_ERR_OOM;
    }
    *p = malloc(bytes ? bytes : 1);
    if (*p) /* uninitialised device memory: NaN patterns, not zeros */
        memset(*p, 0xFF, bytes);
    return *p ? GPU_SUCCESS : GPU_EMU_ERR_OOM;
}
static inline gpu_error_t gpu_free(void *p)
{
    free(p);
    return GPU_SUCCESS;
}
static inline gpu_error_t gpu_mem_info(size_t *free_b, size_t *total_b)
{
    *free_b = *total_b = (size_t)1 << 34;
    return GPU_SUCCESS;
}
static inline gpu_error_t gpu_stream_create(gpu_stream_t *s)
{
    *s = (void *)1;
    return GPU_SUCCESS;
}
static inline gpu_error_t gpu_stream_destroy(gpu_stream_t s) { (void)s; return GPU_SUCCESS; }
static inline gpu_error_t gpu_stream_sync(gpu_stream_t s) { (void)s; return GPU_SUCCESS; }
static inline gpu_error_t gpu_copy_h2d(void *d, const void *s, size_t n, gpu_stream_t st)
{
    (void)st;
    memmove(d, s, n);
    return GPU_SUCCESS;
}
static inline gpu_error_t gpu_copy_d2h(void *d, const void *s, size_t n, gpu_stream_t st)
{
    (void)st;
    memmove(d, s, n);
    return GPU_SUCCESS;
}
static inline gpu_error_t gpu_copy_d2d(void *d, const void *s, size_t n, gpu_stream_t st)
{
    (void)st;
    memmove(d, s, n);
    return GPU_SUCCESS;
}
static inline gpu_error_t gpu_memset(void *d, int v, size_t n, gpu_stream_t st)
{
    (void)st;
    memset(d, v, n);
    return GPU_SUCCESS;
}
static inline gpu_error_t gpu_event_create(gpu_event_t *e)
{
    *e = (double *)calloc(1, sizeof(double));
    return *e ? GPU_SUCCESS : GPU_EMU_ERR_OOM;
}
static inline gpu_error_t gpu_event_destroy(gpu_event_t e)
{
    free(e);
    return GPU_SUCCESS;
}
static inline gpu_error_t gpu_event_record(gpu_event_t e, gpu_stream_t s)
{
    struct timespec ts;
    (void)s;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *e = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
    return GPU_SUCCESS;
}
static inline gpu_error_t gpu_event_sync(gpu_event_t e) { (void)e; return GPU_SUCCESS; }
static inline gpu_error_t gpu_event_elapsed_ms(float *ms, gpu_event_t a, gpu_event_t b)
{
    *ms = (float)(*b - *a);
    return GPU_SUCCESS;
}

/* ---- device side -------------------------------------------------------- */
#ifdef __cplusplus

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
#define GPU_HD static inline
#define GPU_DEV static inline
/* before a loop of constant trip count that indexes register arrays */
#define GPU_UNROLL /* the host compiler unrolls as it sees fit */
#define GPU_WARP GPU_EMU_WARP
/* Tensor cores: the instruction of the vendor whose warp width is emulated. */
#if GPU_EMU_WARP == 64
#define GPU_MMA_KIND GPU_MMA_AMD_16X16X16
#else
#define GPU_MMA_KIND GPU_MMA_NV_M16N8K16
#define GPU_FP4_MMA_DEVICE 1
#endif
#define GPU_MMA_LANES GPU_EMU_WARP
#define GPU_MMA_DEVICE 1

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct uint2 { uint32_t x, y; };
struct uint4 { uint32_t x, y, z, w; };

/* The running fiber's coordinates (one OS thread runs them all). */
extern dim3 gpu_emu_thread, gpu_emu_block, gpu_emu_bdim, gpu_emu_gdim;
#define threadIdx gpu_emu_thread
#define blockIdx gpu_emu_block
#define blockDim gpu_emu_bdim
#define gridDim gpu_emu_gdim

void gpu_emu_sync_block(void);
uint32_t gpu_emu_exchange(uint32_t bits, int lane_xor);
void *gpu_emu_dynamic_shared(void);
void gpu_emu_launch(dim3 grid, dim3 block, size_t shmem, gpu_stream_t s,
                    const std::function<void()> &body);

void gpu_mma_bf16(float *d, const uint32_t *a, const uint32_t *b);
void gpu_mma_fp4(float *d, const uint32_t *a, const uint32_t *b, uint32_t sfa, uint32_t sfb);

#define GPU_DYNAMIC_SHARED(type, name) type *name = (type *)gpu_emu_dynamic_shared()

static inline float gpu_mul_rn(float a, float b) { return a * b; }
static inline float gpu_div_rn(float a, float b) { return a / b; }
static inline float gpu_shfl_xor(float v, int mask)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    u = gpu_emu_exchange(u, mask);
    memcpy(&v, &u, 4);
    return v;
}
static inline int gpu_shfl_xor_int(int v, int mask)
{
    return (int)gpu_emu_exchange((uint32_t)v, mask);
}
static inline float gpu_ldg(const float *p) { return *p; }
static inline void gpu_syncthreads(void) { gpu_emu_sync_block(); }
static inline int gpu_atomic_cas(int *p, int cmp, int val)
{
    int old = *p;
    if (old == cmp)
        *p = val;
    return old;
}
static inline int gpu_atomic_add(int *p, int v)
{
    int old = *p;
    *p += v;
    return old;
}

#endif /* __cplusplus */

/* The emulated plug-in is backend "cuda": its communicator is NCCL's,
 * pointed at tests/nccl-emu.c's stand-in by NVFP4_COMM_LIBRARY. */
#define GPU_COMM_NAME "nccl"
#define GPU_COMM_LIBRARY "libnccl.so.2"

#endif /* NVFP4_GPU_EMU_H */
