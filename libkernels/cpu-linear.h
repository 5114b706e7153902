/* SPDX-License-Identifier: MIT */
/* Shared by the files of the CPU backend's Linear, not exported: cpu-linear.c
 * (the layouts' repacking, upload, the product's driver, embedding),
 * cpu-nvfp4.c (the NVFP4 row kernels and the activation quantizer),
 * cpu-i8avx2.c (the int8 kernels and quantizer in AVX2),
 * cpu-amx.c (the AMX GEMM) and cpu-dense.c (unquantized weights).  It holds
 * the kernels' argument types, the prefetch distances, the layouts'
 * accessors and the small inline helpers several of them use, and declares
 * the kernels' entry points. */
#ifndef NVFP4_KERNELS_CPU_LINEAR_H
#define NVFP4_KERNELS_CPU_LINEAR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cpu-internal.h"
#include "numerics.h" /* §1 codecs, §5: libquant/numerics.h */

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && !defined(NVFP4_CPU_GENERIC)
#include <immintrin.h>
#define CPU_X86 1
#include "cpu-lanes16.h"
#endif

/* Tokens per tile of the kernels (activations of a tile packed together). */
#define TOK_TILE 8

/* The GEMV kernels prefetch the weight stream ahead of their loads (the
 * hardware prefetchers alone fall behind: rows of 8K-16K weights from DRAM
 * read at about half the probe without it).  How far ahead pays depends on
 * the CPU -- its bandwidth per core times the latency to be hidden -- so
 * nvfp4k_cpu_tables_init() picks the distances by vendor; measured with
 * bench-kernels (GEMV over the ooc probe, 1 thread, best of 3):
 *   CPU_PREFETCH, one row streamed (the W4A4 VNNI GEMV, the float GEMV of
 *   one row, the GEMM's rows): Zen 4 (EPYC Genoa, 35 GB/s a core; an
 *   earlier note called it Zen 5) 4096 -> 8192 bytes took 4096x14336 from
 *   0.60-0.78 to 0.92-1.0; a Xeon with AMX (16 GB/s a core) 4096 -> 2048
 *   took 16384x2048 from 0.85 to 0.96, 2048x8192 0.88 -> 0.96, 4096x14336
 *   0.94 -> 0.91;
 *   CPU_PREFETCH4, per row of the 4-row GEMVs (four streams, each
 *   consumed at a quarter of the rate), measured on the W4A16 LUT GEMV
 *   against 4096 (the 4-row VNNI GEMV, k <= GEMV4_MAX_K, had used the
 *   single stream's distance: on the Xeon without AMX, W4A4 2048x2048
 *   went from 0.77 to 0.84 at 1 thread with this one): Zen 4 16384 took
 *   2048x8192 from 0.37 to 0.5, 16384x2048 0.45 -> 0.55; the Xeon 8192
 *   took 14336x4096 from 0.48 to 0.71, 4096x14336 0.51 -> 0.57, 16384x2048
 *   0.67 -> 0.62.
 * Other CPUs get 4096 and 8192, between the two.
 *
 * On AMD the prefetches go to L2 only (PREFETCHT1): with T0 the lines
 * prefetched 8-16 KiB ahead on up to four streams fill L1 (32 KiB) and
 * evict the activations and the lines about to be read.  On Zen 4, 1
 * thread, W4A4 against the ooc probe went 0.34 -> 0.81 (16384x2048), 0.40
 * -> 0.82 (4096x14336), 0.49 -> 0.74 (2048x8192), 0.57 -> 0.79
 * (14336x4096); W4A16 10.1 -> 15.8 GB/s on 16384x2048, the bf16 head
 * 128256x2048 16.5 -> 21.8 GB/s; the distances, re-measured with T1
 * (4096-16384 by 4096-32768), stayed best where they were.  The Xeons were
 * measured with T0 only, and keep it. */
#ifdef CPU_X86
/* Defined in cpu-linear.c and set by nvfp4k_cpu_tables_init(); hidden, so
 * that the kernels read them PC-relative, as they read the file's statics
 * (-fvisibility=hidden covers definitions, not extern declarations). */
extern __attribute__((visibility("hidden"))) size_t nvfp4k_cpu_pf1, nvfp4k_cpu_pf4;
#define CPU_PREFETCH nvfp4k_cpu_pf1
#define CPU_PREFETCH4 nvfp4k_cpu_pf4
extern __attribute__((visibility("hidden"))) int nvfp4k_cpu_pf_l2; /* PREFETCHT1 instead of T0 */
/* CPU_PF_AS(L2, p): CPU_PF with the flag given, so that a kernel can make
 * it a constant of a loop (CPU_PF reads the global again at every
 * prefetch, as a store through a vector type may alias it). */
#define CPU_PF_AS(l2, p)                                              \
    do {                                                              \
        if (l2)                                                       \
            _mm_prefetch((const char *)(p), _MM_HINT_T1);             \
        else                                                          \
            _mm_prefetch((const char *)(p), _MM_HINT_T0);             \
    } while (0)
#define CPU_PF(p) CPU_PF_AS(nvfp4k_cpu_pf_l2, p)
#define CPU_PF_LINE(p) CPU_PF(p)
#else
#define CPU_PF_LINE(p) __builtin_prefetch((p), 0, 3)
#endif

/* E4M3 byte -> float (§1), filled by nvfp4k_cpu_tables_init() (cpu-linear.c). */
extern __attribute__((visibility("hidden"))) float nvfp4k_cpu_e4m3_table[256];

static const float e2m1_f[16] = {NUM_E2M1_VALUES};

/* The part of the contraction one kernel call covers: blocks of 16 (or
 * chunks, for the VNNI kernel) [b0, b1), added to y when acc != 0.  The
 * driver walks k in such stretches so that the activations of a token tile
 * stay in L1 while a tile of rows passes over them. */
typedef struct {
    size_t b0, b1;
    int acc;
    int packed;     /* float kernels: x is packed per token tile (pack_x) */
} krange;

/* Whether the chunks [b0, b1) of KR end in the tail chunk of a row of k =
 * 256 j + 64 (4 blocks: SmolLM2's k = 576), which the int8 GEMVs run
 * apart (nvfp4k_cpu_gemv4t4_i8avx2, nvfp4k_cpu_gemv4t4_vnni). */
static inline int range_ends_in4(size_t k, const krange *kr)
{
    return kr->b1 > kr->b0 &&
           kr->b1 * CPU_CHUNK_BLOCKS == k / NVFP4_BLOCK + (CPU_CHUNK_BLOCKS - 4);
}

/* Address of token t0+t's block b for the float kernels. */
static inline const float *xblock(const float *x, size_t k, size_t t0, size_t t, size_t b,
                                  int packed)
{
    return packed ? x + (t0 / 8) * (k / 16) * 128 + b * 128 + t * 16
                  : x + (t0 + t) * k + 16 * b;
}

/* ---- layouts (see the top of cpu-linear.c) ---------------------------------- */

static inline size_t chunks_of(int64_t k)
{
    return ((size_t)k + CPU_CHUNK - 1) / CPU_CHUNK;
}

/* CHUNK layout: byte offset and nibble of element E (0..255) of a chunk
 * holding C blocks. */
static inline void chunk_pos(unsigned e, unsigned c, unsigned *byte, unsigned *hi)
{
    unsigned j = e / 16, r = e % 16, s = r / 4;
    *byte = (s / 2) * 4 * c + 4 * j + r % 4;
    *hi = s & 1;
}

/* BLOCK layout: the blocks of a row held in groups of 8 (the rest are
 * single words), and the byte and nibble of element E of block B of a row
 * of NB blocks. */
static inline size_t block_nb8(size_t nb)
{
    return nb & ~(size_t)7;
}

static inline void block_pos(size_t b, unsigned e, size_t nb, size_t *byte, unsigned *hi)
{
    if (b < block_nb8(nb)) {
        *byte = 64 * (b / 8) + 4 * e + (b % 8) / 2;
        *hi = (unsigned)(b % 2);
    } else {
        unsigned nib = (e & 1) ? 8 + e / 2 : e / 2;
        *byte = 8 * b + nib / 2;
        *hi = nib & 1;
    }
}

/* Code of element I of a repacked row. */
static inline unsigned code_at(const cpu_kweight *w, const uint8_t *row, size_t i)
{
    size_t b = i / 16;
    if (w->layout == CPU_LAYOUT_BLOCK) {
        size_t byte;
        unsigned hi;
        block_pos(b, (unsigned)(i % 16), (size_t)w->d.k / 16, &byte, &hi);
        return (row[byte] >> (4 * hi)) & 0xF;
    } else {
        size_t nb = (size_t)w->d.k / 16, ch = b / CPU_CHUNK_BLOCKS;
        unsigned c = (unsigned)(nb - ch * CPU_CHUNK_BLOCKS < CPU_CHUNK_BLOCKS
                                    ? nb - ch * CPU_CHUNK_BLOCKS
                                    : CPU_CHUNK_BLOCKS);
        unsigned byte, hi;
        chunk_pos((unsigned)(i % CPU_CHUNK), c, &byte, &hi);
        return (row[ch * CPU_CHUNK_BYTES + byte] >> (4 * hi)) & 0xF;
    }
}

/* ---- what the kernels share --------------------------------------------- */

/* One token, four rows at a time: the activation block loaded once feeds
 * each row, and the rows' chains (one accumulator each) are independent,
 * where one row alone is bound by the latency of its multiply-adds.  Each
 * row sees exactly the operations of its kernel with nt = 1 (one
 * accumulator, same order, same reduction), so grouping rows changes no
 * bit. */
#define GEMV_ROWS 4
#define DENSE_GEMV_ROWS 4

/* Activations quantized for the int8 kernel, per token and chunk: 256 int8
 * codes (2 * E2M1, in the plane order), per block the float32 factor
 * (s / gs) / 4 of §5 (the /4 undoes the two doublings) and -12 * the sum
 * of the block's codes (weights are fed to vpdpbusd as unsigned 2*code + 12;
 * the kernels start each block's integer sum at this offset instead of
 * subtracting it at the end: the sum is exact in int32, so the order of its
 * terms changes no bit). */
typedef struct {
    int8_t *q;          /* [m, nchs * 256]: nchs >= the row's chunks, the
                         * stride chosen by linear_run_n */
    float *xs;          /* [m, nchs * 16] */
    int32_t *corr;      /* [m, nchs * 16]: -12 * sum of codes */
    int8_t *aq;         /* AMX: the codes of each group of 16 tokens as
                         * [block][token][16], natural element order (the
                         * A tiles); NULL for the other paths */
    size_t vnni0;       /* q and corr hold tokens from vnni0 on: the AMX
                         * kernel takes every row of the tokens before
                         * (linear_run); 0 for the other paths */
    int64_t *amx_failed; /* the rows (n) of a weight whose tiles' memory
                          * nvfp4k_cpu_amx_range could not get, vnni0 leaving it no
                          * VNNI fallback; 0: none */
} act_q8;

/* Tokens of a group in aq, and bytes of one block's A tile there. */
#define AMX_A_TOKENS 16
#define AMX_A_BLOCK (AMX_A_TOKENS * NVFP4_BLOCK)

#ifdef CPU_X86
/* 16 E4M3 bytes (in SC) -> float32 * s2.  The E4M3 bits placed in a half's fields
 * give value * 2^-8 exactly (subnormals included, and no float32
 * denormals), so one exact multiply by 256 recovers the E4M3 value before
 * the §2 product with the global scale. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline __m512
scales_bytes_avx512(__m128i sc, __m512 s2)
{
    __m256i b = _mm256_cvtepu8_epi16(sc);
    __m256i h = _mm256_or_si256(
        _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7F)), 7),
        _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8));
    __m512 v = _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));
    return _mm512_mul_ps(v, s2);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline __m512
scalesn_avx512(const uint8_t *sc, size_t cnt, __m512 s2)
{
    /* a masked load: the tail of a row reads no byte past its scales */
    __mmask16 mk = cnt >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cnt) - 1);
    return scales_bytes_avx512(_mm_maskz_loadu_epi8(mk, sc), s2);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline __m512
scales16_avx512(const uint8_t *sc, __m512 s2)
{
    return scalesn_avx512(sc, 16, s2);
}

/* Chunk CH of a CHUNK-layout row as the two 64-byte planes and the 16
 * decoded block scales; a tail chunk of c < 16 blocks is read with masked
 * loads (zero bytes past its 4c bytes per plane and c scales: code 0 with a
 * zero activation and a zero scale contribute nothing).  The chunk PF
 * bytes further on is prefetched. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline void
chunk_load_pf(const uint8_t *row, const uint8_t *srow, size_t nb, size_t ch, __m512 s2,
              __m512i *p0, __m512i *p1, __m512 *ws, size_t pf)
{
    const size_t c = nb - ch * CPU_CHUNK_BLOCKS;
    const uint8_t *cb = row + ch * CPU_CHUNK_BYTES;

    if (c >= CPU_CHUNK_BLOCKS) {
        *p0 = _mm512_loadu_si512((const void *)cb);
        *p1 = _mm512_loadu_si512((const void *)(cb + 64));
        *ws = scales16_avx512(srow + ch * CPU_CHUNK_BLOCKS, s2);
    } else {
        __mmask64 mk = ((__mmask64)1 << (4 * c)) - 1;
        *p0 = _mm512_maskz_loadu_epi8(mk, cb);
        *p1 = _mm512_maskz_loadu_epi8(mk, cb + 4 * c);
        *ws = scalesn_avx512(srow + ch * CPU_CHUNK_BLOCKS, c, s2);
    }
    CPU_PF(cb + pf);
    CPU_PF(cb + pf + 64);
}

/* The same, prefetching the single stream's distance ahead. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline void
chunk_load(const uint8_t *row, const uint8_t *srow, size_t nb, size_t ch, __m512 s2,
           __m512i *p0, __m512i *p1, __m512 *ws)
{
    chunk_load_pf(row, srow, nb, ch, s2, p0, p1, ws, CPU_PREFETCH);
}

/* The 2-row x NT-token kernels' results: y[t0+t][r, r+rs] = (or +=) the
 * horizontal sums of a0[t], a1[t]. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline
    __attribute__((always_inline)) void
    store2x8(const __m512 *a0, const __m512 *a1, float *y, size_t t0, size_t n, int64_t r,
             size_t rs, int acc, size_t nt)
{
#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++) {
        float *yo = y + (t0 + t) * n + (size_t)r;
        float v0 = _mm512_reduce_add_ps(a0[t]), v1 = _mm512_reduce_add_ps(a1[t]);
        yo[0] = acc ? yo[0] + v0 : v0;
        yo[rs] = acc ? yo[rs] + v1 : v1;
    }
}

/* The sum of 16 lanes held as two AVX2 halves LO (lanes 0-7) and HI (8-15)
 * in the order of GCC's _mm512_reduce_add_ps: T3 = hi + lo, T6 = T3's upper
 * four + lower four, T8 = T6 + T6 with its 64-bit halves swapped, then
 * T8[0] + T8[1]; so the AVX2 twins of the AVX-512 kernels (cpu-dense.c,
 * cpu-i8avx2.c) sum a row as those do.  (Clang orders that reduction its
 * own way.) */
__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) float
reduce16_avx2(__m256 lo, __m256 hi)
{
    const __m256 t3 = _mm256_add_ps(hi, lo);
    const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));

    return _mm_cvtss_f32(_mm_add_ss(t8, _mm_movehdup_ps(t8)));
}

/* One copy of each body per token count, so that the per-token accumulators
 * live in registers (a loop over a run-time count keeps them in memory). */
#define CPU_DISPATCH(tgt, name, params, ...)                                           \
    __attribute__((target(tgt))) void nvfp4k_cpu_##name params                         \
    {                                                                                  \
        switch (nt) {                                                                  \
        case 1: name##_body(__VA_ARGS__, 1, y); break;                                 \
        case 2: name##_body(__VA_ARGS__, 2, y); break;                                 \
        case 3: name##_body(__VA_ARGS__, 3, y); break;                                 \
        case 4: name##_body(__VA_ARGS__, 4, y); break;                                 \
        case 5: name##_body(__VA_ARGS__, 5, y); break;                                 \
        case 6: name##_body(__VA_ARGS__, 6, y); break;                                 \
        case 7: name##_body(__VA_ARGS__, 7, y); break;                                 \
        case 8: name##_body(__VA_ARGS__, 8, y); break;                                 \
        default: break;                                                                \
        }                                                                              \
    }
#endif /* CPU_X86 */

/* tile instructions exist in 64-bit mode only */
#if defined(CPU_X86) && defined(__x86_64__) && \
    (defined(__clang__) ? __clang_major__ >= 12 : __GNUC__ >= 11)
#define CPU_AMX 1

/* Tokens and rows per AMX output tile; tokens below a multiple of this (and
 * rows past the last full group of a thread's row tile) take the VNNI
 * kernels, which give the same bits.  Products of fewer tokens than
 * AMX_MIN_TOKENS stay on VNNI: unpacking the B tiles costs about as much as
 * 16 tokens of product (measured on 4096x4096, one thread, against VNNI:
 * 0.71x at m = 16, 1.05x at 64, 1.14x at 128, 1.21x at 512). */
#define AMX_T AMX_A_TOKENS
#define AMX_MIN_TOKENS 64
#endif /* compiler with AMX */

/* The data point into the mapped file, where safetensors puts no alignment
 * rule on a tensor's offset: memcpy loads (one plain load on x86). */
static inline float dense_at(const cpu_dense_part *p, size_t i)
{
    const unsigned char *b = p->data;
    uint16_t h;
    float f;

    switch (p->dtype) {
    case NVFP4_DTYPE_F32:
        memcpy(&f, b + 4 * i, 4);
        return f;
    case NVFP4_DTYPE_BF16:
        memcpy(&h, b + 2 * i, 2);
        return nvfp4_bf16_decode(h);
    default:
        memcpy(&h, b + 2 * i, 2);
        return nvfp4_f16_decode(h);
    }
}

static inline const cpu_dense_part *dense_row(const cpu_kweight *w, int64_t r, int64_t *local)
{
    for (size_t i = 0; i < w->ndense; i++) {
        if (r < w->dense[i].rows) {
            *local = r;
            return &w->dense[i];
        }
        r -= w->dense[i].rows;
    }
    *local = 0;
    return &w->dense[0]; /* unreachable: r < n was checked */
}

/* One product's row tiles (plan_tiles, tiles_range: cpu-linear.c). */
typedef struct {
    int path, packed;
    int spread; /* NVFP4 rows as four streams (nvfp4_spread) */
    const cpu_kweight *w;
    const float *x;
    const act_q8 *a;
    size_t nch;         /* a's chunks per token (its stride: linear_run_n) */
    size_t m, units, ku, rt;
    float *y;
} tiles_job;

/* ---- the kernels' entry points (the product: cpu-linear.c) ---------------- */

/* Each computes outputs r (and the rows named) of tokens t0 .. t0+nt-1
 * (nt <= TOK_TILE) over the stretch KR; x, a, y as tiles_job holds them. */

/* cpu-nvfp4.c: the portable NVFP4 kernel, one row (either layout). */
void nvfp4k_cpu_row_scalar(const cpu_kweight *w, int64_t r, const float *x, size_t t0,
                           const krange *kr, size_t nt, float *y);
#ifdef CPU_X86
/* cpu-nvfp4.c: the AVX2 float kernel, one row (BLOCK layout). */
void nvfp4k_cpu_row_avx2(const cpu_kweight *w, int64_t r, const float *x, size_t t0,
                         const krange *kr, size_t nt, float *y);
/* cpu-nvfp4.c: the AVX2 float GEMV, one token, rows r + i * rs, i < 4. */
void nvfp4k_cpu_gemv4_avx2(const cpu_kweight *w, int64_t r, size_t rs, const float *x,
                           const krange *kr, float *y);
/* cpu-nvfp4.c: the AVX-512 float kernel, one row (BLOCK layout). */
void nvfp4k_cpu_row_avx512(const cpu_kweight *w, int64_t r, const float *x, size_t t0,
                           const krange *kr, size_t nt, float *y);
/* cpu-nvfp4.c: the AVX-512 float kernel, rows r and r + rs, packed x. */
void nvfp4k_cpu_row2_avx512(const cpu_kweight *w, int64_t r, size_t rs, const float *x,
                            size_t t0, const krange *kr, size_t nt, float *y);
/* cpu-nvfp4.c: the W4A16 table GEMV, one token, rows r + i * rs, i < 4. */
void nvfp4k_cpu_gemv_lut_avx512(const cpu_kweight *w, int64_t r, size_t rs, const float *x,
                                const krange *kr, float *y);
/* cpu-nvfp4.c: the VNNI int8 kernel, one row (CHUNK layout, W4A4). */
void nvfp4k_cpu_row_vnni(const cpu_kweight *w, int64_t r, const act_q8 *a, size_t nch,
                         size_t t0, const krange *kr, size_t nt, float *y);
/* cpu-nvfp4.c: the VNNI int8 kernel, rows r and r + rs. */
void nvfp4k_cpu_row2_vnni(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a,
                          size_t nch, size_t t0, const krange *kr, size_t nt, float *y);
/* The products of a tail chunk of 4 blocks with one token for four rows
 * (nvfp4k_cpu_tail4_vnni): row i's converted sums and factors in lanes
 * 4i .. 4i+3. */
typedef struct {
    _Alignas(64) float tp[16];
    _Alignas(64) float tf[16];
} cpu_tail4;
/* cpu-nvfp4.c: the tail chunk tch (range_ends_in4) of rows r + i * rs,
 * i < 4, by tokens t0 .. t0+nt-1 into tl[0 .. nt-1]. */
void nvfp4k_cpu_tail4_vnni(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a,
                           size_t nch, size_t t0, size_t tch, size_t nt, cpu_tail4 *tl);
/* nvfp4k_cpu_row2_vnni where KR ends in a tail chunk of 4 blocks whose
 * products tl holds, the two rows in its lanes lane and lane + 1. */
void nvfp4k_cpu_row2t4_vnni(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a,
                            size_t nch, size_t t0, const krange *kr, const cpu_tail4 *tl,
                            unsigned lane, size_t nt, float *y);
/* Rows r + i * rs, i < 4, of the VNNI kernel by NT tokens: where KR ends
 * in a tail chunk of 4 blocks (k = 576), the four rows' tails in one
 * vector per token (nvfp4k_cpu_tail4_vnni) and the whole chunks by two
 * 2-row calls that add them, else two 2-row calls: the same bits. */
static inline void row4_vnni(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a,
                             size_t nch, size_t t0, const krange *kr, size_t nt, float *y)
{
    const int64_t r2 = r + 2 * (int64_t)rs;

    if (range_ends_in4((size_t)w->d.k, kr)) {
        cpu_tail4 tl[TOK_TILE];
        nvfp4k_cpu_tail4_vnni(w, r, rs, a, nch, t0, kr->b1 - 1, nt, tl);
        nvfp4k_cpu_row2t4_vnni(w, r, rs, a, nch, t0, kr, tl, 0, nt, y);
        nvfp4k_cpu_row2t4_vnni(w, r2, rs, a, nch, t0, kr, tl, 2, nt, y);
    } else {
        nvfp4k_cpu_row2_vnni(w, r, rs, a, nch, t0, kr, nt, y);
        nvfp4k_cpu_row2_vnni(w, r2, rs, a, nch, t0, kr, nt, y);
    }
}
/* cpu-nvfp4.c: the VNNI GEMV, one token, rows r + i * rs, i < 4. */
void nvfp4k_cpu_gemv4_vnni(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a,
                           size_t nch, const krange *kr, float *y);
/* nvfp4k_cpu_gemv4_vnni where KR ends in a tail chunk of exactly 4 blocks
 * (range_ends_in4), and only there. */
void nvfp4k_cpu_gemv4t4_vnni(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a,
                             size_t nch, const krange *kr, float *y);
/* cpu-nvfp4.c: §5 of one token for the VNNI and AMX kernels (act_q8). */
void nvfp4k_cpu_quantize_row_q8(const float *x, size_t k, float gs, int8_t *q, float *xs,
                                int32_t *corr, int8_t *aq);
/* cpu-i8avx2.c: the VNNI kernels above in AVX2 (isa=avx2; the same bits). */
void nvfp4k_cpu_row_i8avx2(const cpu_kweight *w, int64_t r, const act_q8 *a, size_t nch,
                           size_t t0, const krange *kr, size_t nt, float *y);
void nvfp4k_cpu_row2_i8avx2(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a,
                            size_t nch, size_t t0, const krange *kr, size_t nt, float *y);
void nvfp4k_cpu_gemv4_i8avx2(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a,
                             size_t nch, const krange *kr, float *y);
/* nvfp4k_cpu_gemv4_i8avx2 where KR ends in a tail chunk of exactly 4
 * blocks (range_ends_in4), and only there. */
void nvfp4k_cpu_gemv4t4_i8avx2(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a,
                               size_t nch, const krange *kr, float *y);
/* cpu-i8avx2.c: nvfp4k_cpu_quantize_row_q8 in AVX2, without the AMX tiles. */
void nvfp4k_cpu_quantize_row_q8_avx2(const float *x, size_t k, float gs, int8_t *q, float *xs,
                                     int32_t *corr);
/* cpu-nvfp4.c: §5's x' = q * (s / gs) of one token for the float kernels. */
void nvfp4k_cpu_qdq_row_avx512(const float *x, size_t k, float gs, float *out);
#endif

/* cpu-dense.c: the portable dense kernel, one row. */
void nvfp4k_cpu_dense_row_scalar(const cpu_kweight *w, int64_t r, const float *x, size_t t0,
                                 const krange *kr, size_t nt, float *y);
#ifdef CPU_X86
/* cpu-dense.c: the AVX2 dense kernels (the AVX-512 ones' bits, x unpacked):
 * one row; the GEMV's four rows; rows r and r + rs by up to TOK_TILE tokens. */
void nvfp4k_cpu_dense_row_avx2(const cpu_kweight *w, int64_t r, const float *x, size_t t0,
                               const krange *kr, size_t nt, float *y);
void nvfp4k_cpu_dense_gemv4_avx2(const cpu_kweight *w, const cpu_dense_part *p, int64_t r,
                                 int64_t lr, size_t rs, const float *x, const krange *kr,
                                 float *y);
void nvfp4k_cpu_dense_row2_avx2(const cpu_kweight *w, const cpu_dense_part *p, int64_t r,
                                int64_t lr, size_t rs, const float *x, size_t t0,
                                const krange *kr, size_t nt, float *y);
/* cpu-dense.c: the AVX-512 dense kernel, one row. */
void nvfp4k_cpu_dense_row_avx512(const cpu_kweight *w, int64_t r, const float *x, size_t t0,
                                 const krange *kr, size_t nt, float *y);
/* cpu-dense.c: rows r and r + rs of dense part P (local rows lr, lr + rs),
 * packed x. */
void nvfp4k_cpu_dense_row2(const cpu_kweight *w, const cpu_dense_part *p, int64_t r,
                           int64_t lr, size_t rs, const float *x, size_t t0, const krange *kr,
                           size_t nt, float *y);
/* cpu-dense.c: 1-4 tokens of a small batch, rows r + i * rs, i < 4, of part P. */
void nvfp4k_cpu_dense_spread_avx512(const cpu_kweight *w, const cpu_dense_part *p, int64_t r,
                                    int64_t lr, size_t rs, const float *x, size_t t0,
                                    const krange *kr, size_t nt, float *y);
/* cpu-dense.c: the dense GEMV, one token, rows r + i * rs, i < 4, of part P. */
void nvfp4k_cpu_dense_gemv4_avx512(const cpu_kweight *w, const cpu_dense_part *p, int64_t r,
                                   int64_t lr, size_t rs, const float *x, const krange *kr,
                                   float *y);
#endif

#ifdef CPU_AMX
/* cpu-amx.c: row tiles TILE0 .. TILE1-1 of a product on the AMX path. */
void nvfp4k_cpu_amx_range(const tiles_job *j, size_t tile0, size_t tile1);
#endif

#endif
