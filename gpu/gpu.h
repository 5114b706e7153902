/*
 * gpu/gpu.h - the small neutral spelling the GPU backends are written in
 * (house style: CUDA and HIP share one kernel source).
 *
 * Exactly one vendor header defines every name below; the build selects it
 * with -DNVFP4_GPU_CUDA or -DNVFP4_GPU_HIP:
 *
 *   types      gpu_error_t, gpu_stream_t, gpu_event_t, gpu_device_info,
 *              GPU_SUCCESS, GPU_VENDOR_NAME
 *   host       gpu_is_oom, gpu_error_string, gpu_error_name, gpu_last_error,
 *              gpu_device_count, gpu_set_device, gpu_get_device,
 *              gpu_get_device_info, gpu_malloc, gpu_free, gpu_mem_info,
 *              gpu_stream_{create,destroy,sync}, gpu_copy_{h2d,d2h,d2d},
 *              gpu_memset, gpu_event_{create,destroy,record,sync,elapsed_ms}
 *   device     GPU_HD, GPU_DEV, GPU_WARP, GPU_DEVICE_PASS (device pass only),
 *              gpu_mul_rn, gpu_div_rn, gpu_shfl_xor, gpu_shfl_xor_int,
 *              gpu_ldg, gpu_syncthreads, gpu_atomic_cas, gpu_atomic_add,
 *              GPU_HAVE_WMMA,
 *              GPU_DYNAMIC_SHARED(type, name)
 *
 * Kernel launches use the <<<grid, block, shmem, stream>>> syntax both
 * compilers accept.
 */
#ifndef NVFP4_GPU_H
#define NVFP4_GPU_H

#if defined(NVFP4_GPU_CUDA) && defined(NVFP4_GPU_HIP)
#error "define one of NVFP4_GPU_CUDA and NVFP4_GPU_HIP, not both"
#elif defined(NVFP4_GPU_CUDA)
#include "gpu-cuda.h"
#elif defined(NVFP4_GPU_HIP)
#include "gpu-hip.h"
#elif defined(NVFP4_GPU_EMU)
#include "gpu-emu.h" /* CPU emulator for tests, scripts/gpu-emu-check.sh */
#else
#error "define NVFP4_GPU_CUDA or NVFP4_GPU_HIP"
#endif

#endif /* NVFP4_GPU_H */
