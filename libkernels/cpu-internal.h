/* SPDX-License-Identifier: MIT */
/* Shared between the files of the CPU backend; not exported. */
#ifndef NVFP4_KERNELS_CPU_INTERNAL_H
#define NVFP4_KERNELS_CPU_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "backend-impl.h"

/* cpu.c, cpu-attn.c, cpu-linear.c (with cpu-nvfp4.c, cpu-amx.c and
 * cpu-dense.c) and cpu-pool.c compile their x86 kernels (AVX2, AVX-512,
 * AMX) with GCC or Clang on x86, and only their generic C paths where
 * NVFP4_CPU_GENERIC is defined (make check builds them so, tests/local.mk:
 * the code other architectures build keeps compiling). */

/* CPU_HAVE_X86: the AVX-512 paths of cpu.c and cpu-attn.c are compiled;
 * lanes16(n): the mask of the first min(n, 16) lanes of a vector. */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(NVFP4_CPU_GENERIC)
#include <immintrin.h>
static inline __mmask16 lanes16(size_t n)
{
    return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
}

#define CPU_HAVE_X86 1
#endif

/* Below this many elements an elementwise or row operation runs on the
 * calling thread: waking the team costs more than the work (decode steps
 * call these on one token). */
#define CPU_PAR_MIN 32768

/* Instruction-set levels, lowest first.  The backend runs the highest one the
 * CPU has, capped by $NVFP4_CPU_ISA (scalar|avx2|avx512|vnni|amx) so that
 * tests and benchmarks can exercise every path on one machine. */
typedef enum {
    CPU_ISA_SCALAR = 0,
    CPU_ISA_AVX2,       /* AVX2 + FMA + F16C */
    CPU_ISA_AVX512,     /* F, BW, VL, DQ */
    CPU_ISA_VNNI,       /* AVX512 + VNNI: the int8 W4A4 kernel */
    CPU_ISA_AMX,        /* VNNI + AMX-TILE, AMX-INT8 usable (the OS grants the
                         * tile state): the W4A4 GEMM of prefill */
} cpu_isa;

/* Whether AMX tiles are usable by this process: the CPU has AMX-TILE and
 * AMX-INT8, XCR0 enables the tile state and Linux granted this process the
 * tile data (arch_prctl ARCH_REQ_XCOMP_PERM, asked once per process). */
int nvfp4k_cpu_amx_ok(void);

/* The backend's worker threads (cpu-pool.c). */
typedef struct cpu_pool cpu_pool;

/* A grow-only buffer of a context, taken with trylock: a call that finds it
 * in use by another thread allocates its own (nvfp4k_cpu_scratch_get). */
typedef struct {
    pthread_mutex_t lock;
    void *buf;
    size_t size;
} cpu_scratch;

typedef struct {
    int threads;        /* 0 = OpenMP's default */
    cpu_isa isa;
    /* MoE's buffers (cpu.c) and a Linear's activations (cpu-linear.c):
     * lasting memory, faulted in once rather than at every call */
    cpu_scratch moe_scratch;
    cpu_scratch act_scratch;
    /* started at the first parallel loop (nvfp4k_cpu_par) */
    pthread_mutex_t pool_lock;
    cpu_pool *pool;
} cpu_ctx;

/* Items I0 .. I1-1 of a parallel loop; SLOT < the loop's thread count is
 * the running thread's index (for per-thread scratch). */
typedef void (*cpu_par_fn)(void *arg, size_t i0, size_t i1, int slot);

/* Runs FN over items 0 .. N-1 on up to NTH threads, the calling thread one
 * of them, and returns when all are done.  Chunks are claimed from a
 * counter, so threads that the OS does not run claim none and are not
 * waited for; while another thread uses the pool, an OpenMP loop. */
void nvfp4k_cpu_par(cpu_ctx *c, size_t n, int nth, cpu_par_fn fn, void *arg);
void nvfp4k_cpu_pool_free(cpu_pool *p);
/* Whether the pool last saw a busy machine (more runnable threads than
 * CPUs in half of its recent looks); 0 before its first loop. */
int nvfp4k_cpu_pool_busy(cpu_ctx *c);

/* The CHUNK layout (see cpu-linear.c): chunks of 256 weights (16 blocks)
 * in 128 bytes, the tail chunk of c < 16 blocks in 8*c bytes. */
#define CPU_CHUNK 256
#define CPU_CHUNK_BLOCKS 16
#define CPU_CHUNK_BYTES 128
/* Zeroed bytes after a weight's block scales (the NVFP4 upload): the AVX2
 * int8 kernels read a tail chunk's scales with one 16-byte load, masked
 * after it, and the last row's reaches past the end. */
#define CPU_TAIL_PAD 16

typedef struct {
    const void *data;   /* [rows, k] */
    nvfp4_dtype dtype;  /* F32, BF16, F16 */
    int64_t rows;
} cpu_dense_part;

#define CPU_LAYOUT_BLOCK 0   /* float kernels */
#define CPU_LAYOUT_CHUNK 1   /* the VNNI int8 kernel */

typedef struct {
    nvfp4_kweight_desc d;
    int layout;         /* CPU_LAYOUT_*, NVFP4 only */
    /* NVFP4 */
    uint8_t *packed;    /* [n, k/2], repacked row by row */
    uint8_t *scales;    /* [n, k/16] E4M3, row-major as in the file, CPU_TAIL_PAD zeros after */
    float *wlut;        /* BLOCK layout: [256][16], wlut[s][c] = E2M1(c) *
                         * (E4M3(s) * weight_scale_2), §2's float32 weight
                         * of code c in a block of scale byte s (at
                         * isa=avx2, entries 8-15 hold lut_half_avx2's
                         * form of 0-7: cpu-linear.c) */
    /* unquantized: the parts' data, or copies of it (NVFP4_KWEIGHT_COPY) */
    cpu_dense_part *dense;
    size_t ndense;
    int dense_copied;   /* dense[i].data are ours to free */
    /* original parts, for the exact per-row dequantization of embeddings */
    nvfp4_linear *parts;
    size_t nparts;
    float *bias;        /* [n] or NULL */
    /* per kind of call (one token; more, per token): smoothed nanoseconds
     * on one thread and on all (0: not measured yet) and a call count, to
     * run on the faster on a busy machine (nvfp4k_cpu_linear); relaxed
     * atomics only */
    uint64_t run_ns[2][2];
    uint64_t run_calls[2];
} cpu_kweight;

int nvfp4k_cpu_nthreads(const cpu_ctx *c);
void nvfp4k_cpu_tables_init(void);
void *nvfp4k_cpu_aligned_alloc(size_t bytes);
void *nvfp4k_cpu_lasting_alloc(size_t bytes);
void *nvfp4k_cpu_scratch_get(cpu_scratch *s, size_t need, int *locked);
void nvfp4k_cpu_scratch_put(cpu_scratch *s, void *buf, int locked);

void *nvfp4k_cpu_kweight_upload(void *ctx, const nvfp4_linear *parts, size_t nparts,
                         const nvfp4_kweight_desc *desc, nvfp4_error *err);
void nvfp4k_cpu_kweight_free(void *ctx, void *kw);
nvfp4_status nvfp4k_cpu_linear(void *ctx, void *kw, const nvfp4_kweight_desc *desc,
                        const float *x, size_t m, float *y, nvfp4_error *err);
/* Weights a run of nvfp4k_cpu_linear_multi prepares one input for at most
 * (more: the next run) */
#define NVFP4K_CPU_MULTI_MAX 8
nvfp4_status nvfp4k_cpu_linear_multi(void *ctx, const struct nvfp4_kweight *const *w,
                                     size_t count, const float *x, size_t m, float *const *y,
                                     nvfp4_error *err);
nvfp4_status nvfp4k_cpu_embed(void *ctx, void *kw, const nvfp4_kweight_desc *desc,
                       const int32_t *ids, size_t m, float *y, nvfp4_error *err);
/* Paged attention: the backend's attention_paged (cpu-attn.c). */
nvfp4_status nvfp4k_cpu_attention_paged(void *ctx, const float *q, const float *k,
                                        const float *v, const nvfp4_kv_pages *kv, size_t m,
                                        size_t nh, size_t nkv, size_t hd, float scale,
                                        float *out, nvfp4_error *err);
/* The contiguous cache's attention, the paged one over one block (cpu-attn.c). */
nvfp4_status nvfp4k_cpu_attention(void *ctx, const float *q, const float *k, const float *v,
                                  float *k_cache, float *v_cache, size_t max_ctx,
                                  size_t pos0, size_t m, size_t nh, size_t nkv, size_t hd,
                                  float scale, float *out, nvfp4_error *err);

#endif
