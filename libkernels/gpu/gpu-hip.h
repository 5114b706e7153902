/* SPDX-License-Identifier: MIT */
/*
 * libkernels/gpu/gpu-hip.h - the neutral GPU spelling of libkernels/gpu/gpu.h, defined for HIP
 * (AMD ROCm).  Mirrors libkernels/gpu/gpu-cuda.h name for name: a mapping missing here
 * fails the HIP build at once instead of hiding behind a rename macro.
 */
#ifndef NVFP4_GPU_HIP_H
#define NVFP4_GPU_HIP_H

#include <stdint.h>
#include <stdio.h>

#include <hip/hip_runtime.h>

#define GPU_VENDOR_HIP 1
#define GPU_VENDOR_NAME "hip"

typedef hipError_t gpu_error_t;
typedef hipStream_t gpu_stream_t;
typedef hipEvent_t gpu_event_t;

#define GPU_SUCCESS hipSuccess

/* ---- host side ---------------------------------------------------------- */

static inline int gpu_is_oom(gpu_error_t e) { return e == hipErrorOutOfMemory; }
static inline const char *gpu_error_string(gpu_error_t e) { return hipGetErrorString(e); }
static inline const char *gpu_error_name(gpu_error_t e) { return hipGetErrorName(e); }
static inline gpu_error_t gpu_last_error(void) { return hipGetLastError(); }

static inline gpu_error_t gpu_device_count(int *n) { return hipGetDeviceCount(n); }
static inline gpu_error_t gpu_set_device(int dev) { return hipSetDevice(dev); }
static inline gpu_error_t gpu_get_device(int *dev) { return hipGetDevice(dev); }

typedef struct {
    char name[256];
    char arch[64];        /* "gfx90a", "gfx942" */
    int major, minor;
    int warp_size;        /* 64 on CDNA (gfx9), 32 on RDNA */
    int sm_count;
    size_t total_mem;
} gpu_device_info;

static inline gpu_error_t gpu_get_device_info(int dev, gpu_device_info *info)
{
    hipDeviceProp_t p;
    gpu_error_t e = hipGetDeviceProperties(&p, dev);
    if (e != hipSuccess)
        return e;
    snprintf(info->name, sizeof info->name, "%s", p.name);
    snprintf(info->arch, sizeof info->arch, "%s", p.gcnArchName);
    info->major = p.major;
    info->minor = p.minor;
    info->warp_size = p.warpSize;
    info->sm_count = p.multiProcessorCount;
    info->total_mem = p.totalGlobalMem;
    return hipSuccess;
}

static inline gpu_error_t gpu_malloc(void **p, size_t bytes) { return hipMalloc(p, bytes); }
static inline gpu_error_t gpu_free(void *p) { return hipFree(p); }
static inline gpu_error_t gpu_mem_info(size_t *free_b, size_t *total_b)
{
    return hipMemGetInfo(free_b, total_b);
}

static inline gpu_error_t gpu_stream_create(gpu_stream_t *s)
{
    return hipStreamCreateWithFlags(s, hipStreamNonBlocking);
}
static inline gpu_error_t gpu_stream_destroy(gpu_stream_t s) { return hipStreamDestroy(s); }
static inline gpu_error_t gpu_stream_sync(gpu_stream_t s) { return hipStreamSynchronize(s); }

static inline gpu_error_t gpu_copy_h2d(void *dst, const void *src, size_t n, gpu_stream_t s)
{
    return hipMemcpyAsync(dst, src, n, hipMemcpyHostToDevice, s);
}
static inline gpu_error_t gpu_copy_d2h(void *dst, const void *src, size_t n, gpu_stream_t s)
{
    return hipMemcpyAsync(dst, src, n, hipMemcpyDeviceToHost, s);
}
static inline gpu_error_t gpu_copy_d2d(void *dst, const void *src, size_t n, gpu_stream_t s)
{
    return hipMemcpyAsync(dst, src, n, hipMemcpyDeviceToDevice, s);
}
static inline gpu_error_t gpu_memset(void *dst, int v, size_t n, gpu_stream_t s)
{
    return hipMemsetAsync(dst, v, n, s);
}

static inline gpu_error_t gpu_event_create(gpu_event_t *e) { return hipEventCreate(e); }
static inline gpu_error_t gpu_event_destroy(gpu_event_t e) { return hipEventDestroy(e); }
static inline gpu_error_t gpu_event_record(gpu_event_t e, gpu_stream_t s)
{
    return hipEventRecord(e, s);
}
static inline gpu_error_t gpu_event_sync(gpu_event_t e) { return hipEventSynchronize(e); }
static inline gpu_error_t gpu_event_elapsed_ms(float *ms, gpu_event_t a, gpu_event_t b)
{
    return hipEventElapsedTime(ms, a, b);
}

/* ---- device side -------------------------------------------------------- */
#if defined(__HIPCC__)

#define GPU_HD __host__ __device__ inline
#define GPU_DEV __device__ inline
/* before a loop of constant trip count that indexes register arrays */
#define GPU_UNROLL _Pragma("unroll")

#ifdef __HIP_DEVICE_COMPILE__
#define GPU_DEVICE_PASS 1
#endif
/* The wavefront is 64 wide on CDNA (gfx90a, gfx94x) and 32 on RDNA; the
 * compiler knows it per target.  The host pass never indexes lanes. */
#ifdef __AMDGCN_WAVEFRONT_SIZE
#define GPU_WARP __AMDGCN_WAVEFRONT_SIZE
#else
#define GPU_WARP 64
#endif

/* HIP's __fmul_rn is a plain multiply; the build passes -ffp-contract=off so
 * that it is never fused with a neighbouring add. */
GPU_HD float gpu_mul_rn(float a, float b) { return a * b; }
GPU_HD float gpu_div_rn(float a, float b) { return a / b; }

GPU_DEV float gpu_shfl_xor(float v, int mask) { return __shfl_xor(v, mask); }
GPU_DEV int gpu_shfl_xor_int(int v, int mask) { return __shfl_xor(v, mask); }
GPU_DEV float gpu_ldg(const float *p) { return __ldg(p); }
#define GPU_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
GPU_DEV void gpu_syncthreads(void) { __syncthreads(); }
GPU_DEV int gpu_atomic_cas(int *p, int cmp, int val) { return atomicCAS(p, cmp, val); }
GPU_DEV int gpu_atomic_add(int *p, int v) { return atomicAdd(p, v); }

/* Tensor cores (libkernels/gpu/gpu.h): the CDNA2/CDNA3 matrix cores, a wavefront-wide
 * (64-lane) MFMA.  gfx908 lacks the _1k BF16 form and RDNA has no MFMA: there
 * the kernel body is empty and gk_caps tells the backend so. */
#define GPU_MMA_KIND GPU_MMA_AMD_16X16X16
#define GPU_MMA_LANES 64
#if defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || \
    defined(__gfx942__) || defined(__gfx950__)
#define GPU_MMA_DEVICE 1
GPU_DEV void gpu_mma_bf16(float *d, const uint32_t *a, const uint32_t *b)
{
    typedef short bf16x4 __attribute__((ext_vector_type(4)));
    typedef float f32x4 __attribute__((ext_vector_type(4)));
    const bf16x4 va = {(short)(a[0] & 0xFFFFu), (short)(a[0] >> 16), (short)(a[1] & 0xFFFFu),
                       (short)(a[1] >> 16)};
    const bf16x4 vb = {(short)(b[0] & 0xFFFFu), (short)(b[0] >> 16), (short)(b[1] & 0xFFFFu),
                       (short)(b[1] >> 16)};
    f32x4 vd = {d[0], d[1], d[2], d[3]};
    vd = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(va, vb, vd, 0, 0, 0);
    d[0] = vd[0];
    d[1] = vd[1];
    d[2] = vd[2];
    d[3] = vd[3];
}
#endif

#endif /* __HIPCC__ */

/* ---- the collective library of libkernels/gpu/comm-gpu.cu ------------------ */
/* RCCL (NCCL's API, names and values), dlopen()ed at the first
 * communicator and called through libkernels/gpu/comm-abi.h (no header
 * needed). */
#define GPU_COMM_NAME "rccl"
#define GPU_COMM_LIBRARY "librccl.so.1"

#endif /* NVFP4_GPU_HIP_H */
