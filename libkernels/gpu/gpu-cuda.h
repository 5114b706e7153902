/* SPDX-License-Identifier: MIT */
/*
 * libkernels/gpu/gpu-cuda.h - the neutral GPU spelling of libkernels/gpu/gpu.h, defined for the
 * CUDA runtime.  libkernels/gpu/gpu-hip.h defines exactly the same names for HIP; a
 * name missing from one of them fails to compile on that vendor, so add
 * every new mapping to both (never a macro chain renaming cuda* to hip*).
 */
#ifndef NVFP4_GPU_CUDA_H
#define NVFP4_GPU_CUDA_H

#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime.h>

#define GPU_VENDOR_CUDA 1
#define GPU_VENDOR_NAME "cuda"

typedef cudaError_t gpu_error_t;
typedef cudaStream_t gpu_stream_t;
typedef cudaEvent_t gpu_event_t;

#define GPU_SUCCESS cudaSuccess

/* ---- host side ---------------------------------------------------------- */

static inline int gpu_is_oom(gpu_error_t e) { return e == cudaErrorMemoryAllocation; }
static inline const char *gpu_error_string(gpu_error_t e) { return cudaGetErrorString(e); }
static inline const char *gpu_error_name(gpu_error_t e) { return cudaGetErrorName(e); }
/* Launch errors are sticky per thread: read and clear. */
static inline gpu_error_t gpu_last_error(void) { return cudaGetLastError(); }

static inline gpu_error_t gpu_device_count(int *n) { return cudaGetDeviceCount(n); }
static inline gpu_error_t gpu_set_device(int dev) { return cudaSetDevice(dev); }
static inline gpu_error_t gpu_get_device(int *dev) { return cudaGetDevice(dev); }

/* What the backend needs to know about a device. */
typedef struct {
    char name[256];
    char arch[64];        /* "sm_90", "sm_100" */
    int major, minor;     /* compute capability */
    int warp_size;
    int sm_count;
    size_t total_mem;
} gpu_device_info;

static inline gpu_error_t gpu_get_device_info(int dev, gpu_device_info *info)
{
    cudaDeviceProp p;
    gpu_error_t e = cudaGetDeviceProperties(&p, dev);
    if (e != cudaSuccess)
        return e;
    snprintf(info->name, sizeof info->name, "%s", p.name);
    snprintf(info->arch, sizeof info->arch, "sm_%d%d", p.major, p.minor);
    info->major = p.major;
    info->minor = p.minor;
    info->warp_size = p.warpSize;
    info->sm_count = p.multiProcessorCount;
    info->total_mem = p.totalGlobalMem;
    return cudaSuccess;
}

static inline gpu_error_t gpu_malloc(void **p, size_t bytes) { return cudaMalloc(p, bytes); }
static inline gpu_error_t gpu_free(void *p) { return cudaFree(p); }
static inline gpu_error_t gpu_mem_info(size_t *free_b, size_t *total_b)
{
    return cudaMemGetInfo(free_b, total_b);
}

static inline gpu_error_t gpu_stream_create(gpu_stream_t *s)
{
    return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking);
}
static inline gpu_error_t gpu_stream_destroy(gpu_stream_t s) { return cudaStreamDestroy(s); }
static inline gpu_error_t gpu_stream_sync(gpu_stream_t s) { return cudaStreamSynchronize(s); }

static inline gpu_error_t gpu_copy_h2d(void *dst, const void *src, size_t n, gpu_stream_t s)
{
    return cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s);
}
static inline gpu_error_t gpu_copy_d2h(void *dst, const void *src, size_t n, gpu_stream_t s)
{
    return cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s);
}
static inline gpu_error_t gpu_copy_d2d(void *dst, const void *src, size_t n, gpu_stream_t s)
{
    return cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s);
}
static inline gpu_error_t gpu_memset(void *dst, int v, size_t n, gpu_stream_t s)
{
    return cudaMemsetAsync(dst, v, n, s);
}

static inline gpu_error_t gpu_event_create(gpu_event_t *e) { return cudaEventCreate(e); }
static inline gpu_error_t gpu_event_destroy(gpu_event_t e) { return cudaEventDestroy(e); }
static inline gpu_error_t gpu_event_record(gpu_event_t e, gpu_stream_t s)
{
    return cudaEventRecord(e, s);
}
static inline gpu_error_t gpu_event_sync(gpu_event_t e) { return cudaEventSynchronize(e); }
static inline gpu_error_t gpu_event_elapsed_ms(float *ms, gpu_event_t a, gpu_event_t b)
{
    return cudaEventElapsedTime(ms, a, b);
}

/* ---- device side -------------------------------------------------------- */
#ifdef __CUDACC__

#define GPU_HD __host__ __device__ __forceinline__
#define GPU_DEV __device__ __forceinline__
/* before a loop of constant trip count that indexes register arrays */
#define GPU_UNROLL _Pragma("unroll")

/* The device pass of the compiler (the host pass sees none of this). */
#ifdef __CUDA_ARCH__
#define GPU_DEVICE_PASS 1
/* WARP: threads that run in lock step and can exchange registers. */
#define GPU_WARP 32
#else
#define GPU_WARP 32
#endif

/* Round-to-nearest float ops that the compiler may never fuse (§5 needs
 * the reference's float32 roundings bit for bit). */
GPU_HD float gpu_mul_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
GPU_HD float gpu_div_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

GPU_DEV float gpu_shfl_xor(float v, int mask)
{
    return __shfl_xor_sync(0xffffffffu, v, mask);
}
GPU_DEV int gpu_shfl_xor_int(int v, int mask)
{
    return __shfl_xor_sync(0xffffffffu, v, mask);
}
GPU_DEV float gpu_ldg(const float *p) { return __ldg(p); }
/* The launch's dynamic shared memory, as an array of TYPE called NAME. */
#define GPU_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
GPU_DEV void gpu_syncthreads(void) { __syncthreads(); }
GPU_DEV int gpu_atomic_cas(int *p, int cmp, int val) { return atomicCAS(p, cmp, val); }
GPU_DEV int gpu_atomic_add(int *p, int v) { return atomicAdd(p, v); }

/* Tensor cores (libkernels/gpu/gpu.h): mma.sync m16n8k16 BF16 from sm_80 on.  The
 * backend asks the device which of these its kernel image has
 * (gk_caps), so a device never runs an empty kernel body. */
#define GPU_MMA_KIND GPU_MMA_NV_M16N8K16
#define GPU_MMA_LANES 32
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define GPU_MMA_DEVICE 1
GPU_DEV void gpu_mma_bf16(float *d, const uint32_t *a, const uint32_t *b)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif
/* Block-scaled FP4 MMA: only the "a" targets of consumer Blackwell accept
 * mma.sync ... .block_scale (ptxas refuses it for sm_100a/103a/110a, whose
 * block scaling is tcgen05-only).  Selectors {byte-id, thread-id} are
 * {0, 0}: .scale_vec::4X uses all four bytes (PTX ISA 9.7.14.3). */
#if defined(__CUDA_ARCH_FEAT_SM120_ALL) || defined(__CUDA_ARCH_FEAT_SM121_ALL)
#define GPU_FP4_MMA_DEVICE 1
GPU_DEV void gpu_mma_fp4(float *d, const uint32_t *a, const uint32_t *b, uint32_t sfa,
                         uint32_t sfb)
{
    asm volatile("mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
                 ".f32.e2m1.e2m1.f32.ue4m3 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}, "
                 "%10, {0, 0}, %11, {0, 0};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "r"(sfa), "r"(sfb));
}
#endif

#endif /* __CUDACC__ */

/* ---- the collective library of libkernels/gpu/comm-gpu.cu ------------------ */
/* NCCL, dlopen()ed at the first communicator and called through the ABI of
 * libkernels/gpu/comm-abi.h (no header needed), so the plug-in needs it
 * only then. */
#define GPU_COMM_NAME "nccl"
#define GPU_COMM_LIBRARY "libnccl.so.2"

#endif /* NVFP4_GPU_CUDA_H */
