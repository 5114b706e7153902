/* SPDX-License-Identifier: MIT */
/*
 * libkernels/gpu/gpu.h - the small neutral spelling the GPU backends are written in
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
 *   device     GPU_HD, GPU_DEV, GPU_UNROLL, GPU_WARP, GPU_DEVICE_PASS (device pass only),
 *              gpu_mul_rn, gpu_div_rn, gpu_shfl_xor, gpu_shfl_xor_int,
 *              gpu_ldg, gpu_syncthreads, gpu_atomic_cas, gpu_atomic_add,
 *              GPU_DYNAMIC_SHARED(type, name)
 *   tensor     GPU_MMA_KIND, GPU_MMA_LANES (all passes); GPU_MMA_DEVICE and
 *   cores      gpu_mma_bf16 where this device target has the instruction;
 *              GPU_FP4_MMA_DEVICE and gpu_mma_fp4 likewise (see below)
 *
 * Tensor cores.  gpu_mma_bf16(d, a, b) is ONE warp-wide instruction,
 * D[16 x N] += A[16 x 16] B[16 x N] with BF16 inputs and float32
 * accumulation, executed by all GPU_MMA_LANES lanes together (never under
 * divergent control flow).  Each lane holds registers of A and B (uint32_t,
 * two BF16 of consecutive k, the lower k in the low half) and 4 floats of D,
 * distributed as GPU_MMA_KIND says:
 *   GPU_MMA_NV_M16N8K16   NVIDIA mma.sync.m16n8k16.row.col.f32.bf16: 32
 *                         lanes, N = 8, A 4 registers, B 2 (PTX ISA
 *                         9.7.14.5.8);
 *   GPU_MMA_AMD_16X16X16  AMD v_mfma_f32_16x16x16[bf16_1k|_bf16] (CDNA2,
 *                         CDNA3): 64 lanes, N = 16, A 2 registers, B 2.
 * libkernels/gpu/kernels.cu spells out both lane layouts once (mma_* helpers); the
 * emulator's model of each instruction (libkernels/gpu/emu.cc) is written
 * independently from the same vendor documents, so the emulator checks the
 * kernel's fragment packing against it.
 *
 * gpu_mma_fp4(d, a, b, sfa, sfb) is the block-scaled FP4 instruction
 * mma.sync.m16n8k64 .kind::mxf4nvf4 .scale_vec::4X with E2M1 operands and
 * UE4M3 scales (NVIDIA sm_120a/sm_121a only; layout in libkernels/gpu/kernels.cu).
 *
 * Kernel launches use the <<<grid, block, shmem, stream>>> syntax both
 * compilers accept.
 */
#ifndef NVFP4_GPU_H
#define NVFP4_GPU_H

/* Values of GPU_MMA_KIND (0: no tensor-core instruction on this vendor). */
#define GPU_MMA_NV_M16N8K16 1
#define GPU_MMA_AMD_16X16X16 2

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
