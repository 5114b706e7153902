/* SPDX-License-Identifier: MIT */
/* The CPU backend's Linear: NVFP4 (W4A16, W4A4) and unquantized weights.
 *
 * Dequantization is fused into the matrix products: the weight is never
 * expanded to float32 in memory.  At upload the packed E2M1 nibbles of each
 * row are repacked (same 4 bits per weight; the E4M3 block scales stay
 * bytes, so the kernels read 4.5 bits per weight) into one of two layouts:
 *
 * BLOCK (float kernels: W4A16, and W4A4 without VNNI).  Groups of 8
 *   blocks of 16 (§2) in 64 bytes: 32-bit lane l of the group holds element
 *   l of its 8 blocks, block p of the group in nibble p (bits 4p..4p+3).
 *   Loading the group into a zmm register and shifting every lane right by
 *   4p leaves block p's codes in the low bits of the lanes, in element
 *   order; vpermps (which reads only those 4 bits) then maps them through
 *   the 16-entry E2M1 table and a multiply by the block scale gives §2's
 *   float32 weight exactly: one shift and one shuffle per 16 weights,
 *   activations in their natural order.  The one-token kernel looks the
 *   same products up instead, in a table of 256 x 16 floats per weight
 *   (wlut: one row per E4M3 scale byte).  The last nb % 8 blocks of a row
 *   are one 64-bit word each, the even elements in the low 32 bits and the
 *   odd ones in the high 32, nibble i of each half being element 2i (or
 *   2i+1): broadcast and shifted lane by lane.  Either way block b's bytes
 *   are bytes 8b .. 8b+7 of its group's span, so the streams and their
 *   prefetches are the same as for the file layout.
 *
 * CHUNK (the AVX-512 VNNI W4A4 kernel).  Chunks of 256 weights (16 blocks)
 *   in 128 bytes: step s = 0..3 covers elements 4s..4s+3 of every block;
 *   its byte i = 4j + e (block j, element 4s + e) is the low nibble (s even)
 *   or high nibble (s odd) of byte i of plane P(s/2), P0 then P1, 64 bytes
 *   each; a tail chunk of c < 16 blocks uses 4c bytes per plane.  With 4
 *   consecutive elements of one block per 32-bit lane, vpdpbusd sums exactly
 *   one block per lane: in W4A4 both operands lie on the E2M1 grid (§5), so
 *   the 16 products of a block form an exact integer and the two block
 *   scales are applied once per block in float32.  The AMX GEMM (W4A4
 *   prefill, isa=amx) unpacks these chunks into tiles per call and forms
 *   the same integers on the tile unit (see amx_tile16).
 *
 * Outputs (rows) are partitioned across threads; every output is reduced by
 * one thread in a fixed order, so results do not depend on thread count.
 * The order is also the same for every m (batch invariance): one accumulator
 * per output and token in every kernel (GEMV, GEMM, paired rows), k walked in
 * the same stretches whose partial sums are added to y in k order, so a
 * token's outputs are the same bits alone or among any other tokens.
 */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

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
static size_t cpu_pf1 = 4096, cpu_pf4 = 8192;
#define CPU_PREFETCH cpu_pf1
#define CPU_PREFETCH4 cpu_pf4
static int cpu_pf_l2; /* PREFETCHT1 instead of T0 */
#define CPU_PF(p)                                                     \
    do {                                                              \
        if (cpu_pf_l2)                                                \
            _mm_prefetch((const char *)(p), _MM_HINT_T1);             \
        else                                                          \
            _mm_prefetch((const char *)(p), _MM_HINT_T0);             \
    } while (0)
#define CPU_PF_LINE(p) CPU_PF(p)
#else
#define CPU_PF_LINE(p) __builtin_prefetch((p), 0, 3)
#endif

/* Products of fewer multiply-adds than this run on one thread: waking a
 * second worker costs microseconds on an idle machine and milliseconds on
 * a busy one (nvfp4k_cpu_linear). */
#define CPU_LINEAR_PAR_MIN_QUIET (64.0 * 1024.0)
#define CPU_LINEAR_PAR_MIN (512.0 * 1024.0)

/* Block scales decoded per stretch of a row (floats on the stack). */
#define CPU_SCALE_SEG 512

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

/* Activations of the float kernels for m > 1, packed per tile of 8 tokens
 * as [block][token][16] (zero rows past m): the 8 loads that meet one
 * decoded block are then consecutive, instead of 8 streams k floats apart
 * that fight over the same L1 sets. */
static void pack_x(const float *x, size_t m, size_t k, float *xp)
{
    const size_t nb = k / 16;
    for (size_t t0 = 0; t0 < m; t0 += 8) {
        float *tile = xp + (t0 / 8) * nb * 128;
        for (size_t b = 0; b < nb; b++)
            for (size_t t = 0; t < 8; t++) {
                float *dst = tile + b * 128 + t * 16;
                if (t0 + t < m)
                    memcpy(dst, x + (t0 + t) * k + 16 * b, 16 * sizeof(float));
                else
                    memset(dst, 0, 16 * sizeof(float));
            }
    }
}

/* Address of token t0+t's block b for the float kernels. */
static inline const float *xblock(const float *x, size_t k, size_t t0, size_t t, size_t b,
                                  int packed)
{
    return packed ? x + (t0 / 8) * (k / 16) * 128 + b * 128 + t * 16
                  : x + (t0 + t) * k + 16 * b;
}

/* E4M3 byte -> float (§1), from numerics.h's decoder once; and the
 * prefetch distances (CPU_PREFETCH). */
static float e4m3_table[256];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void cpu_tables_fill(void)
{
    for (int i = 0; i < 256; i++)
        e4m3_table[i] = num_e4m3_value((uint32_t)i);
#ifdef CPU_X86
    __builtin_cpu_init();
    if (__builtin_cpu_is("amd")) {
        cpu_pf1 = 8192;
        cpu_pf4 = 16384;
        cpu_pf_l2 = 1;
    } else if (__builtin_cpu_is("intel")) {
        cpu_pf1 = 2048;
        cpu_pf4 = 8192;
    }
#endif
}

void nvfp4k_cpu_tables_init(void)
{
    pthread_once(&tables_once, cpu_tables_fill);
}

/* ---- layouts ---------------------------------------------------------------- */

static size_t chunks_of(int64_t k)
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

/* Little-endian words of a row's bytes (whatever the host's order). */
static inline uint64_t load64le(const uint8_t *p)
{
    uint64_t w = 0;

    for (int i = 7; i >= 0; i--)
        w = w << 8 | p[i];
    return w;
}

static inline void store32le(uint8_t *p, uint32_t w)
{
    for (int i = 0; i < 4; i++, w >>= 8)
        p[i] = (uint8_t)w;
}

/* Repack one row of K/2 bytes from the file layout (§2: element 2i in the
 * low nibble of byte i, so element e of block b is nibble e of the
 * little-endian word of bytes 8b .. 8b+7) into LAYOUT, a word at a time
 * (block_pos, chunk_pos give the same places one element at a time). */
static void repack_row(const uint8_t *src, int64_t k, int layout, uint8_t *dst)
{
    size_t nb = (size_t)k / NVFP4_BLOCK;

    if (layout == CPU_LAYOUT_BLOCK) {
        /* groups of 8 blocks: word e (bytes 4e..4e+3) holds element e of
         * blocks 0..7 in nibbles 0..7 */
        for (size_t g = 0; g < block_nb8(nb) / 8; g++) {
            uint64_t w[8];

            for (int i = 0; i < 8; i++)
                w[i] = load64le(src + 8 * (8 * g + (size_t)i));
            for (unsigned e = 0; e < 16; e++) {
                uint32_t v = 0;
                for (unsigned i = 0; i < 8; i++)
                    v |= (uint32_t)((w[i] >> (4 * e)) & 0xF) << (4 * i);
                store32le(dst + 64 * g + 4 * e, v);
            }
        }
        /* the rest: one word a block, the even elements in nibbles 0..7,
         * the odd ones in 8..15 */
        for (size_t b = block_nb8(nb); b < nb; b++) {
            const uint64_t w = load64le(src + 8 * b);
            uint64_t v = 0;

            for (unsigned e = 0; e < 16; e++)
                v |= ((w >> (4 * e)) & 0xF) << (4 * ((e & 1) ? 8 + e / 2 : e / 2));
            store32le(dst + 8 * b, (uint32_t)v);
            store32le(dst + 8 * b + 4, (uint32_t)(v >> 32));
        }
        return;
    }
    /* CHUNK: block j of a chunk of c blocks gives bytes 4j..4j+3 of plane
     * P0 (elements 0-3 in the low nibbles, 4-7 in the high ones) and of
     * P1 at 4c (elements 8-11, 12-15): in each half of the block's word
     * the nibbles a0..a3 b0..b3 interleaved into a0 b0 a1 b1 .. a3 b3, by
     * two swaps of bit fields */
    for (size_t ch = 0; ch * CPU_CHUNK_BLOCKS < nb; ch++) {
        const size_t c = nb - ch * CPU_CHUNK_BLOCKS < CPU_CHUNK_BLOCKS
                             ? nb - ch * CPU_CHUNK_BLOCKS
                             : CPU_CHUNK_BLOCKS;
        const uint8_t *s = src + ch * CPU_CHUNK_BYTES;
        uint8_t *d = dst + ch * CPU_CHUNK_BYTES;

        for (size_t j = 0; j < c; j++) {
            uint64_t x = load64le(s + 8 * j), t;

            t = (x ^ (x >> 8)) & UINT64_C(0x0000FF000000FF00);
            x ^= t ^ (t << 8);
            t = (x ^ (x >> 4)) & UINT64_C(0x00F000F000F000F0);
            x ^= t ^ (t << 4);
            store32le(d + 4 * j, (uint32_t)x);
            store32le(d + 4 * c + 4 * j, (uint32_t)(x >> 32));
        }
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

/* ---- scalar kernel ------------------------------------------------------------- */

/* y[t*n + r] for tokens t0..t0+nt-1 of row r; x in the file order.  The
 * portable path: one block's 16 weights formed in float32 exactly as §2
 * (block scale times global scale, then times the code), then used by
 * every token. */
static void row_scalar(const cpu_kweight *w, int64_t r, const float *x, size_t t0,
                       const krange *kr, size_t nt, float *y)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n, nb = k / NVFP4_BLOCK;
    const uint8_t *row = w->packed + (size_t)r * k / 2;
    const uint8_t *srow = w->scales + (size_t)r * nb;
    const float s2 = w->d.weight_scale_2;
    float acc[TOK_TILE] = {0};

    for (size_t b = kr->b0; b < kr->b1; b++) {
        const float bs = e4m3_table[srow[b]] * s2;
        float wb[16];

        for (unsigned e = 0; e < 16; e++)
            wb[e] = e2m1_f[code_at(w, row, b * 16 + e)] * bs;
        for (size_t t = 0; t < nt; t++) {
            const float *xb = x + (t0 + t) * k + b * 16;
            for (unsigned e = 0; e < 16; e++)
                acc[t] += wb[e] * xb[e];
        }
    }
    for (size_t t = 0; t < nt; t++) {
        float *yo = y + (t0 + t) * n + (size_t)r;
        *yo = kr->acc ? *yo + acc[t] : acc[t];
    }
}

/* One token, four rows at a time: the activation block loaded once feeds
 * each row, and the rows' chains (one accumulator each) are independent,
 * where one row alone is bound by the latency of its multiply-adds.  Each
 * row sees exactly the operations of its kernel with nt = 1 (one
 * accumulator, same order, same reduction), so grouping rows changes no
 * bit. */
#define GEMV_ROWS 4
#define DENSE_GEMV_ROWS 4
/* Batches of up to this many tokens read a dense weight as four streams
 * (tiles_range), four tokens at a time. */
#define DENSE_SPREAD_MAX_M 8

/* Activations quantized for the int8 kernel, per token and chunk: 256 int8
 * codes (2 * E2M1, in the plane order), per block the float32 factor
 * (s / gs) / 4 of §5 (the /4 undoes the two doublings) and -12 * the sum
 * of the block's codes (weights are fed to vpdpbusd as unsigned 2*code + 12;
 * the kernels start each block's integer sum at this offset instead of
 * subtracting it at the end: the sum is exact in int32, so the order of its
 * terms changes no bit). */
typedef struct {
    int8_t *q;          /* [m, nch * 256] */
    float *xs;          /* [m, nch * 16] */
    int32_t *corr;      /* [m, nch * 16]: -12 * sum of codes */
    int8_t *aq;         /* AMX: the codes of each group of 16 tokens as
                         * [block][token][16], natural element order (the
                         * A tiles); NULL for the other paths */
    size_t vnni0;       /* q and corr hold tokens from vnni0 on: the AMX
                         * kernel takes every row of the tokens before
                         * (linear_run); 0 for the other paths */
    int64_t *amx_failed; /* the rows (n) of a weight whose tiles' memory
                          * amx_range could not get, vnni0 leaving it no
                          * VNNI fallback; 0: none */
} act_q8;

/* Tokens of a group in aq, and bytes of one block's A tile there. */
#define AMX_A_TOKENS 16
#define AMX_A_BLOCK (AMX_A_TOKENS * NVFP4_BLOCK)

#ifdef CPU_X86
/* 16 E4M3 bytes -> float32 * s2.  The E4M3 bits placed in a half's fields
 * give value * 2^-8 exactly (subnormals included, and no float32
 * denormals), so one exact multiply by 256 recovers the E4M3 value before
 * the §2 product with the global scale. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline __m512
scalesn_avx512(const uint8_t *sc, size_t cnt, __m512 s2)
{
    /* a masked load: the tail of a row reads no byte past its scales */
    __mmask16 mk = cnt >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cnt) - 1);
    __m256i b = _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(mk, sc));
    __m256i h = _mm256_or_si256(
        _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7F)), 7),
        _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8));
    __m512 v = _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));
    return _mm512_mul_ps(v, s2);
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

/* ---- AVX2 float kernel (BLOCK layout) ------------------------------------------ */

/* Elements 8h .. 8h+7 of block B of a BLOCK-layout row of NB blocks, lane
 * l holding its code in the low 3 bits and the sign in bit 3 (the bits
 * above belong to other blocks). */
__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) __m256i
block_codes256(const uint8_t *row, size_t nb, size_t b, int h)
{
    uint64_t q;

    if (b < block_nb8(nb))
        return _mm256_srl_epi32(
            _mm256_loadu_si256((const void *)(row + 8 * (b & ~(size_t)7) + 32 * (size_t)h)),
            _mm_cvtsi32_si128((int)(4 * (b & 7))));
    memcpy(&q, row + 8 * b, 8);
    return _mm256_srlv_epi32(_mm256_set1_epi64x((long long)q),
                             h ? _mm256_setr_epi32(16, 16, 20, 20, 24, 24, 28, 28)
                               : _mm256_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12));
}

__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) void
row_avx2_body(const cpu_kweight *w, int64_t r, const float *x, size_t t0, const krange *kr,
              size_t nt,
              float *y)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n, nb = k / NVFP4_BLOCK;
    const uint8_t *row = w->packed + (size_t)r * k / 2;
    const uint8_t *srow = w->scales + (size_t)r * nb;
    const float s2 = w->d.weight_scale_2;
    const __m256 mag = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    const __m256i eight = _mm256_set1_epi32(8);
    /* one accumulator per token whatever nt: the same sums for a row in a
     * GEMV as in a GEMM (batch invariance) */
    const size_t na = 1;
    /* acc[t * na + a]: at most 8 registers, small enough for GCC to keep
     * every one in a register */
    __m256 acc[8];

#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++)
#pragma GCC unroll 4
        for (size_t a = 0; a < na; a++)
            acc[t * na + a] = _mm256_setzero_ps();
    for (size_t b = kr->b0; b < kr->b1; b++) {
        /* §2: block scale times global scale, rounded once */
        const __m256 bs = _mm256_set1_ps(e4m3_table[srow[b]] * s2);

        for (int h = 0; h < 2; h++) {
            __m256i nib = block_codes256(row, nb, b, h);
            /* magnitude from the low 3 bits, sign from bit 3 */
            __m256 m = _mm256_permutevar8x32_ps(mag, nib);
            __m256i sg = _mm256_slli_epi32(_mm256_and_si256(nib, eight), 28);
            __m256 wv = _mm256_mul_ps(_mm256_xor_ps(m, _mm256_castsi256_ps(sg)), bs);
#pragma GCC unroll 8
            for (size_t t = 0; t < nt; t++)
                acc[t * na + h % na] = _mm256_fmadd_ps(
                    wv, _mm256_loadu_ps(xblock(x, k, t0, t, b, kr->packed) + 8 * (size_t)h),
                    acc[t * na + h % na]);
        }
    }
#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++) {
        __m256 v = na == 2 ? _mm256_add_ps(acc[2 * t], acc[2 * t + 1]) : acc[t];
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        float *yo = y + (t0 + t) * n + (size_t)r;
        *yo = kr->acc ? *yo + _mm_cvtss_f32(s) : _mm_cvtss_f32(s);
    }
}

/* ---- AVX-512 float kernel (BLOCK layout) ------------------------------------------ */

/* Block B of a BLOCK-layout row of NB blocks: lane l holds element l's
 * code in its low 4 bits, the bits above belonging to other blocks (which
 * vpermps ignores).  For any B; the kernels shift whole groups in place. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline __attribute__((always_inline)) __m512i
block_codes512(const uint8_t *row, size_t nb, size_t b)
{
    uint64_t q;

    if (b < block_nb8(nb))
        return _mm512_srl_epi32(_mm512_loadu_si512((const void *)(row + 8 * (b & ~(size_t)7))),
                                _mm_cvtsi32_si128((int)(4 * (b & 7))));
    memcpy(&q, row + 8 * b, 8);
    return _mm512_srlv_epi32(
        _mm512_set1_epi64((long long)q),
        _mm512_set_epi32(28, 28, 24, 24, 20, 20, 16, 16, 12, 12, 8, 8, 4, 4, 0, 0));
}

/* Whether blocks B .. B+7 of a row of NB blocks are one group. */
static inline int block_group(size_t b, size_t nb)
{
    return b % 8 == 0 && b + 8 <= block_nb8(nb);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline __attribute__((always_inline)) void
row_avx512_body(const cpu_kweight *w, int64_t r, const float *x, size_t t0, const krange *kr,
                size_t nt,
                float *y)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n, nb = k / NVFP4_BLOCK;
    const uint8_t *row = w->packed + (size_t)r * k / 2;
    const uint8_t *srow = w->scales + (size_t)r * nb;
    const __m512 s2 = _mm512_set1_ps(w->d.weight_scale_2);
    const __m512 lut = _mm512_loadu_ps(e2m1_f);
    /* one accumulator per token whatever nt: the same sums for a row in a
     * GEMV as in a GEMM (batch invariance) */
    const size_t na = 1;
    /* acc[t * na + a]: at most 8 registers, small enough for GCC to keep
     * every one in a register */
    __m512 acc[8];
    /* block scales of a stretch of the row, decoded 16 at a time and stored
     * well before they are read back as broadcasts (a load right behind a
     * wide store of the same line would stall on store forwarding) */
    float bsa[CPU_SCALE_SEG];

#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++)
#pragma GCC unroll 4
        for (size_t a = 0; a < na; a++)
            acc[t * na + a] = _mm512_setzero_ps();
    for (size_t seg = kr->b0; seg < kr->b1; seg += CPU_SCALE_SEG) {
        const size_t cnt = kr->b1 - seg < CPU_SCALE_SEG ? kr->b1 - seg : CPU_SCALE_SEG;

        for (size_t g = 0; g < cnt; g += 16)
            _mm512_storeu_ps(bsa + g, scalesn_avx512(srow + seg + g, cnt - g, s2));
        for (size_t j = 0; j < cnt; j += 8) {
            const size_t bg = seg + j;
            const int whole = block_group(bg, nb);
            const __m512i grp =
                whole ? _mm512_loadu_si512((const void *)(row + 8 * bg)) : _mm512_setzero_si512();

            /* one line per 8 blocks; see CPU_PREFETCH */
            CPU_PF(row + 8 * bg + CPU_PREFETCH);
#pragma GCC unroll 8
            for (size_t u = 0; u < 8; u++) {
                const size_t b = bg + u;
                __m512 wv;

                if (j + u >= cnt)
                    break;
                /* code times block scale is §2's float32 weight exactly */
                wv = _mm512_mul_ps(
                    _mm512_permutexvar_ps(whole ? (u ? _mm512_srli_epi32(grp, 4 * (unsigned)u)
                                                     : grp)
                                                : block_codes512(row, nb, b),
                                          lut),
                    _mm512_set1_ps(bsa[j + u]));
#pragma GCC unroll 8
                for (size_t t = 0; t < nt; t++)
                    acc[t * na + u % na] = _mm512_fmadd_ps(
                        wv, _mm512_loadu_ps(xblock(x, k, t0, t, b, kr->packed)),
                        acc[t * na + u % na]);
            }
        }
    }
#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++) {
        __m512 v = acc[t];
        if (na == 4)
            v = _mm512_add_ps(_mm512_add_ps(acc[4 * t], acc[4 * t + 1]),
                              _mm512_add_ps(acc[4 * t + 2], acc[4 * t + 3]));
        float *yo = y + (t0 + t) * n + (size_t)r;
        *yo = kr->acc ? *yo + _mm512_reduce_add_ps(v) : _mm512_reduce_add_ps(v);
    }
}

_Static_assert(GEMV_ROWS == 4, "gemv_lut_avx512 names its four rows");
/* Where the rows of a one-token tile are not spread as four streams (a
 * tile of fewer than 8 rows or not a multiple of 4: see tiles_range), the
 * VNNI kernel groups neighbouring rows of up to this many weights, where
 * the per-row set-up is a large share of the work; longer rows streamed
 * from DRAM measured faster one at a time (one sequential stream for the
 * prefetchers; its chunks' chains already overlap). */
#define GEMV4_MAX_K 2048

/* The float GEMV (W4A16; W4A4 below VNNI) by the weight's table of §2
 * products (wlut): a block's 16 weights are one vpermps of the table row of
 * its scale byte, so no multiply or scale decoding is left per block, only
 * the shift that brings the block's codes down in its group (see BLOCK at
 * the top).  The entry is the product the other float kernels form, E2M1
 * value times the block scale rounded once with the global scale, so the
 * bits are those of row_avx512_body at every m. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static void
gemv_lut_avx512(const cpu_kweight *w, int64_t r, size_t rs, const float *x, const krange *kr,
                float *y)
{
    /* rb, sb: the byte strides between the four rows' codes and scales */
    const size_t k = (size_t)w->d.k, nb = k / NVFP4_BLOCK, rb = rs * (k / 2), sb = rs * nb;
    const size_t pfd = rs > 1 ? CPU_PREFETCH : CPU_PREFETCH4;
    const float *lut = w->wlut;
    /* the four rows from one base and stride, their accumulators and
     * codes as named variables: as arrays GCC kept them on the stack,
     * storing and reloading them at every group */
    const uint8_t *row = w->packed + (size_t)r * (k / 2), *srow = w->scales + (size_t)r * nb;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    size_t b = kr->b0;

/* Block B of row I (codes G, already shifted to the block's nibble) */
#define GEMV_LUT_STEP(I, G, B)                                                                     \
    acc##I = _mm512_fmadd_ps(                                                                      \
        _mm512_permutexvar_ps(G, _mm512_load_ps(lut + 16 * (size_t)srow[(I) * sb + (B)])), xv,    \
        acc##I)
    /* a group at a time: one 64-byte load of each row's codes and a byte of
     * its scales per block */
    for (; b + 8 <= kr->b1 && block_group(b, nb); b += 8) {
        __m512i g0 = _mm512_loadu_si512((const void *)(row + 8 * b));
        __m512i g1 = _mm512_loadu_si512((const void *)(row + rb + 8 * b));
        __m512i g2 = _mm512_loadu_si512((const void *)(row + 2 * rb + 8 * b));
        __m512i g3 = _mm512_loadu_si512((const void *)(row + 3 * rb + 8 * b));

        /* in registers (GCC spilled one and reread another for each shift) */
        __asm__("" : "+v"(g0), "+v"(g1), "+v"(g2), "+v"(g3));
        for (size_t i = 0; i < GEMV_ROWS; i++)
            CPU_PF(row + i * rb + 8 * b + pfd);
#pragma GCC unroll 8
        for (unsigned p = 0; p < 8; p++) {
            const __m512 xv = _mm512_loadu_ps(x + 16 * (b + p));
            GEMV_LUT_STEP(0, p ? _mm512_srli_epi32(g0, 4 * p) : g0, b + p);
            GEMV_LUT_STEP(1, p ? _mm512_srli_epi32(g1, 4 * p) : g1, b + p);
            GEMV_LUT_STEP(2, p ? _mm512_srli_epi32(g2, 4 * p) : g2, b + p);
            GEMV_LUT_STEP(3, p ? _mm512_srli_epi32(g3, 4 * p) : g3, b + p);
        }
    }
    for (; b < kr->b1; b++) {
        const __m512 xv = _mm512_loadu_ps(x + 16 * b);
        GEMV_LUT_STEP(0, block_codes512(row, nb, b), b);
        GEMV_LUT_STEP(1, block_codes512(row + rb, nb, b), b);
        GEMV_LUT_STEP(2, block_codes512(row + 2 * rb, nb, b), b);
        GEMV_LUT_STEP(3, block_codes512(row + 3 * rb, nb, b), b);
    }
#undef GEMV_LUT_STEP
    {
        const float v[GEMV_ROWS] = {_mm512_reduce_add_ps(acc0), _mm512_reduce_add_ps(acc1),
                                    _mm512_reduce_add_ps(acc2), _mm512_reduce_add_ps(acc3)};
        for (int i = 0; i < GEMV_ROWS; i++) {
            float *yo = y + (size_t)r + (size_t)i * rs;
            *yo = kr->acc ? *yo + v[i] : v[i];
        }
    }
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

/* Two rows RS apart by a tile of NT packed tokens: each activation load
 * feeds two FMAs, so the loop is bound by the FMA units rather than by
 * loads; with fewer than 8 tokens (decode batches of 2-7 sequences, a
 * GEMM's last tile) the two rows also double the independent accumulator
 * chains that one row's NT alone leaves latency-bound.  Every output sees exactly the
 * operations of row_avx512_body with the same nt (same order, same
 * roundings), so pairing rows changes no bit. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline
    __attribute__((always_inline)) void
row2_avx512_body(const cpu_kweight *w, int64_t r, size_t rs, const float *x, size_t t0,
                 const krange *kr, size_t nt, float *y)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n, nb = k / NVFP4_BLOCK;
    const uint8_t *row0 = w->packed + (size_t)r * k / 2, *row1 = row0 + rs * k / 2;
    const uint8_t *srow0 = w->scales + (size_t)r * nb, *srow1 = srow0 + rs * nb;
    const float *lut = w->wlut;
    const float *xt = x + (t0 / 8) * nb * 128;
    __m512 a0[8], a1[8];
    size_t b = kr->b0;

/* Block B with the two rows' weights W0, W1: every token of the tile. */
#define ROW2_STEP(B, W0, W1)                                                                       \
    do {                                                                                           \
        const float *xb_ = xt + (B) * 128;                                                         \
        _Pragma("GCC unroll 8") for (size_t t = 0; t < nt; t++)                                    \
        {                                                                                          \
            __m512 xv = _mm512_loadu_ps(xb_ + 16 * t);                                             \
            /* one load for both rows: keep GCC from folding it into each                          \
             * FMA as a memory operand (twice the loads) */                                        \
            __asm__("" : "+v"(xv));                                                                \
            a0[t] = _mm512_fmadd_ps(W0, xv, a0[t]);                                                \
            a1[t] = _mm512_fmadd_ps(W1, xv, a1[t]);                                                \
        }                                                                                          \
    } while (0)

#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++)
        a0[t] = a1[t] = _mm512_setzero_ps();
    /* the weight's table of §2 products (wlut): a block's 16 weights are
     * the table row of its scale byte permuted by its codes, the same
     * float32 products as code times decoded scale */
    for (; b + 8 <= kr->b1 && block_group(b, nb); b += 8) {
        const __m512i g0 = _mm512_loadu_si512((const void *)(row0 + 8 * b));
        const __m512i g1 = _mm512_loadu_si512((const void *)(row1 + 8 * b));
#pragma GCC unroll 8
        for (unsigned u = 0; u < 8; u++) {
            const __m512 w0 = _mm512_permutexvar_ps(u ? _mm512_srli_epi32(g0, 4 * u) : g0,
                                                    _mm512_load_ps(lut + 16 * (size_t)srow0[b + u]));
            const __m512 w1 = _mm512_permutexvar_ps(u ? _mm512_srli_epi32(g1, 4 * u) : g1,
                                                    _mm512_load_ps(lut + 16 * (size_t)srow1[b + u]));
            ROW2_STEP(b + u, w0, w1);
        }
    }
    for (; b < kr->b1; b++) {
        const __m512 w0 = _mm512_permutexvar_ps(block_codes512(row0, nb, b),
                                                _mm512_load_ps(lut + 16 * (size_t)srow0[b]));
        const __m512 w1 = _mm512_permutexvar_ps(block_codes512(row1, nb, b),
                                                _mm512_load_ps(lut + 16 * (size_t)srow1[b]));
        ROW2_STEP(b, w0, w1);
    }
#undef ROW2_STEP
    store2x8(a0, a1, y, t0, n, r, rs, kr->acc, nt);
}

/* ---- AVX-512 VNNI int8 kernel (CHUNK layout, W4A4) ---------------------------- */


__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) static inline __attribute__((always_inline)) void
row_vnni_body(const cpu_kweight *w, int64_t r, const act_q8 *a, size_t nch, size_t t0,
              const krange *kr, size_t nt, float *y)
{
    const int64_t k = w->d.k, n = w->d.n;
    const size_t nb = (size_t)k / NVFP4_BLOCK;
    const uint8_t *row = w->packed + (size_t)r * (size_t)k / 2;
    const uint8_t *srow = w->scales + (size_t)r * nb;
    const __m512 s2 = _mm512_set1_ps(w->d.weight_scale_2);
    /* unsigned 2*E2M1 + 12 per nibble, in every 128-bit lane */
    const __m512i lut = _mm512_broadcast_i32x4(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    __m512 acc[8];

#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++)
        acc[t] = _mm512_setzero_ps();
    for (size_t ch = kr->b0; ch < kr->b1; ch++) {
        __m512i p0, p1;
        __m512 ws;
        chunk_load(row, srow, nb, ch, s2, &p0, &p1, &ws);
        __m512i w0 = _mm512_shuffle_epi8(lut, _mm512_and_si512(p0, lo4));
        __m512i w1 = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(p0, 4), lo4));
        __m512i w2 = _mm512_shuffle_epi8(lut, _mm512_and_si512(p1, lo4));
        __m512i w3 = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(p1, 4), lo4));

#pragma GCC unroll 8
        for (size_t t = 0; t < nt; t++) {
            const size_t tc = (t0 + t) * nch + ch;
            const int8_t *xq = a->q + tc * CPU_CHUNK;
            /* exact: the 16 products of one block per lane, from minus the
             * offset; one chain of four (the chunks' chains are independent,
             * so they overlap) */
            __m512i sa = _mm512_dpbusd_epi32(
                _mm512_loadu_si512((const void *)(a->corr + tc * 16)), w0,
                _mm512_loadu_si512((const void *)xq));
            sa = _mm512_dpbusd_epi32(sa, w1, _mm512_loadu_si512((const void *)(xq + 64)));
            sa = _mm512_dpbusd_epi32(sa, w2, _mm512_loadu_si512((const void *)(xq + 128)));
            sa = _mm512_dpbusd_epi32(sa, w3, _mm512_loadu_si512((const void *)(xq + 192)));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sa),
                                     _mm512_mul_ps(ws, _mm512_loadu_ps(a->xs + tc * 16)),
                                     acc[t]);
        }
    }
#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++) {
        float *yo = y + (t0 + t) * (size_t)n + (size_t)r;
        *yo = kr->acc ? *yo + _mm512_reduce_add_ps(acc[t]) : _mm512_reduce_add_ps(acc[t]);
    }
}

/* One token, four rows of the VNNI kernel, RS apart: the activation codes
 * loaded once per chunk feed four rows.  Per row exactly the operations of
 * row_vnni_body with nt = 1, so grouping rows changes no bit.  With RS = 1
 * (neighbours: one stream jumping between four rows) each row is
 * prefetched at the 4-row distance, with RS a quarter of a tile (four
 * sequential streams) at the single stream's. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) static void
gemv4_vnni(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a, size_t nch,
           const krange *kr, float *y)
{
    const size_t k = (size_t)w->d.k, nb = k / NVFP4_BLOCK;
    const __m512 s2 = _mm512_set1_ps(w->d.weight_scale_2);
    const __m512i lut = _mm512_broadcast_i32x4(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    const size_t pfd = rs > 1 ? CPU_PREFETCH : CPU_PREFETCH4;
    __m512 acc[GEMV_ROWS];

    (void)nch;
    for (int i = 0; i < GEMV_ROWS; i++)
        acc[i] = _mm512_setzero_ps();
    for (size_t ch = kr->b0; ch < kr->b1; ch++) {
        const int8_t *xq = a->q + ch * CPU_CHUNK;
        const __m512i x0 = _mm512_loadu_si512((const void *)xq);
        const __m512i x1 = _mm512_loadu_si512((const void *)(xq + 64));
        const __m512i x2 = _mm512_loadu_si512((const void *)(xq + 128));
        const __m512i x3 = _mm512_loadu_si512((const void *)(xq + 192));
        const __m512i corr = _mm512_loadu_si512((const void *)(a->corr + ch * 16));
        const __m512 xs = _mm512_loadu_ps(a->xs + ch * 16);

#pragma GCC unroll 4
        for (int i = 0; i < GEMV_ROWS; i++) {
            __m512i p0, p1, sa, sb;
            __m512 ws;

            const size_t ri = (size_t)r + (size_t)i * rs;

            chunk_load_pf(w->packed + ri * k / 2, w->scales + ri * nb, nb, ch, s2, &p0, &p1, &ws,
                          pfd);
            sa = _mm512_dpbusd_epi32(corr,
                                     _mm512_shuffle_epi8(lut, _mm512_and_si512(p0, lo4)), x0);
            sb = _mm512_dpbusd_epi32(
                _mm512_setzero_si512(),
                _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(p0, 4), lo4)), x1);
            sa = _mm512_dpbusd_epi32(sa, _mm512_shuffle_epi8(lut, _mm512_and_si512(p1, lo4)),
                                     x2);
            sb = _mm512_dpbusd_epi32(
                sb, _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(p1, 4), lo4)),
                x3);
            sa = _mm512_add_epi32(sa, sb);
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sa), _mm512_mul_ps(ws, xs), acc[i]);
        }
    }
    for (int i = 0; i < GEMV_ROWS; i++) {
        float *yo = y + (size_t)r + (size_t)i * rs;
        *yo = kr->acc ? *yo + _mm512_reduce_add_ps(acc[i]) : _mm512_reduce_add_ps(acc[i]);
    }
}

/* Two rows RS apart by NT tokens: the activation codes, offsets and
 * scales loaded once feed both rows, and below 8 tokens the two rows
 * double the chains in flight.  Per output exactly the operations of
 * row_vnni_body (same order), so pairing rows changes no bit. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) static inline
    __attribute__((always_inline)) void
    row2_vnni_body(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a, size_t nch,
                   size_t t0, const krange *kr, size_t nt, float *y)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n, nb = k / NVFP4_BLOCK;
    const size_t r1 = (size_t)r + rs;
    const uint8_t *row[2] = {w->packed + (size_t)r * k / 2, w->packed + r1 * k / 2};
    const uint8_t *srow[2] = {w->scales + (size_t)r * nb, w->scales + r1 * nb};
    const __m512 s2 = _mm512_set1_ps(w->d.weight_scale_2);
    const __m512i lut = _mm512_broadcast_i32x4(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    __m512 acc[2][8];

#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++)
        acc[0][t] = acc[1][t] = _mm512_setzero_ps();
    for (size_t ch = kr->b0; ch < kr->b1; ch++) {
        __m512i wv[2][4];
        __m512 ws[2];

#pragma GCC unroll 2
        for (int i = 0; i < 2; i++) {
            __m512i p0, p1;
            chunk_load(row[i], srow[i], nb, ch, s2, &p0, &p1, &ws[i]);
            wv[i][0] = _mm512_shuffle_epi8(lut, _mm512_and_si512(p0, lo4));
            wv[i][1] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(p0, 4), lo4));
            wv[i][2] = _mm512_shuffle_epi8(lut, _mm512_and_si512(p1, lo4));
            wv[i][3] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(p1, 4), lo4));
        }
#pragma GCC unroll 8
        for (size_t t = 0; t < nt; t++) {
            const size_t tc = (t0 + t) * nch + ch;
            const int8_t *xq = a->q + tc * CPU_CHUNK;
            /* memory operands: 16 accumulators and 8 weight registers leave
             * no room to hold the activations.  One chain of four per row
             * and token, from minus the offset (exact integers: the same
             * sum as row_vnni_body's two chains): 16 chains in flight hide
             * the latency, and no add or subtract is left per block. */
#pragma GCC unroll 2
            for (int i = 0; i < 2; i++) {
                __m512i sa = _mm512_dpbusd_epi32(
                    _mm512_loadu_si512((const void *)(a->corr + tc * 16)), wv[i][0],
                    _mm512_loadu_si512((const void *)xq));
                sa = _mm512_dpbusd_epi32(sa, wv[i][1],
                                         _mm512_loadu_si512((const void *)(xq + 64)));
                sa = _mm512_dpbusd_epi32(sa, wv[i][2],
                                         _mm512_loadu_si512((const void *)(xq + 128)));
                sa = _mm512_dpbusd_epi32(sa, wv[i][3],
                                         _mm512_loadu_si512((const void *)(xq + 192)));
                acc[i][t] = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(sa),
                    _mm512_mul_ps(ws[i], _mm512_loadu_ps(a->xs + tc * 16)), acc[i][t]);
            }
        }
    }
#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++) {
        float *yo = y + (t0 + t) * n + (size_t)r;
        float v0 = _mm512_reduce_add_ps(acc[0][t]), v1 = _mm512_reduce_add_ps(acc[1][t]);
        yo[0] = kr->acc ? yo[0] + v0 : v0;
        yo[rs] = kr->acc ? yo[rs] + v1 : v1;
    }
}

/* §5's E2M1 codes of one block of 16 in AVX-512, doubled (-12..12), from
 * its osc = gs / s: the same float32 product x * osc as numerics.h's
 * num_qdq_code, rounded as num_e2m1_encode's edges (NUM_E2M1_EDGES) round
 * it, by the float adder instead of seven compares: E2M1's steps are 0.5
 * below 2, 1 in [2, 4), 2 from 4, so a + M - M with M = 2^22 times the
 * power of two at or below a (2^22 at the least) rounds a to its step,
 * half to even, as the edges do (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 ->
 * 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4), and the minimum with 6 saturates (7,
 * infinity; a past 2^105 makes M infinite or wraps it below 2^22, and
 * either way the minimum gives 6).  NaN passes no edge: max(a, 0) makes
 * it 0 first.  The sign is x's (a zero code stays 0 as an integer). */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline __m512i
qdq_codes_avx512(__m512 v, __m512 osc)
{
    const __m512 a = _mm512_max_ps(_mm512_abs_ps(_mm512_mul_ps(v, osc)), _mm512_setzero_ps());
    const __m512i mbits = _mm512_max_epi32(
        _mm512_add_epi32(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7F800000)),
                         _mm512_set1_epi32(22 << 23)),
        _mm512_set1_epi32(0x4A800000));
    const __m512 m = _mm512_castsi512_ps(mbits);
    const __m512 r = _mm512_min_ps(_mm512_sub_ps(_mm512_add_ps(a, m), m), _mm512_set1_ps(6.0f));
    /* 2r with x's sign bit: r | (x & sign), an exact integer */
    const __m512i d = _mm512_ternarylogic_epi32(_mm512_castps_si512(_mm512_add_ps(r, r)),
                                                _mm512_castps_si512(v),
                                                _mm512_set1_epi32((int)0x80000000u), 0xF8);

    return _mm512_cvttps_epi32(_mm512_castsi512_ps(d));
}

/* §5 for one block of 16 in AVX-512: the doubled E2M1 codes and s / gs.
 * Identical to numerics.h's num_qdq_block (test-kernels checks the two bit
 * for bit through an identity weight, and against torch's act_qdq
 * fixture): its num_qdq_scale for the block scale. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline __m512i
qdq_block_avx512(const float *xb, float gs, float *back_out)
{
    const __m512 v = _mm512_loadu_ps(xb);
    float osc;

    (void)num_qdq_scale(_mm512_reduce_max_ps(_mm512_abs_ps(v)), gs, &osc, back_out);
    return qdq_codes_avx512(v, _mm512_set1_ps(osc));
}

/* num_qdq_scale() in 16 lanes, the same IEEE operations lane by lane: s =
 * E4M3(gs * (amax * 1/6)) as a float (num_e4m3_encode then
 * num_e4m3_value), osc = s == 0 ? 0 : gs / s, back = s / gs.  The E4M3
 * rounding on the float's bits: a normal result keeps 3 mantissa bits,
 * rounded half to even by adding 0x7FFFF plus the last kept bit; below
 * 2^-6 the value rounds to a multiple of 2^-9 (adding and taking away
 * 2^14, whose float32 ulp is 2^-9, rounds it half to even); from 448 up,
 * infinity too, 448; NaN stays NaN. */
__attribute__((target("avx512f,avx512dq"))) static inline void
qdq_scale16(__m512 amax, float gs, __m512 *osc, __m512 *back)
{
    const __m512 g = _mm512_set1_ps(gs), big = _mm512_set1_ps(16384.0f);
    const __m512 y = _mm512_mul_ps(g, _mm512_mul_ps(amax, _mm512_set1_ps(1.0f / 6.0f)));
    const __m512i u = _mm512_castps_si512(y);
    const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(a, 20), _mm512_set1_epi32(1));
    __m512i r = _mm512_and_si512(
        _mm512_add_epi32(a, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFFF))),
        _mm512_set1_epi32((int)0xFFF00000u));
    __m512 s;

    r = _mm512_mask_mov_epi32(
        r, _mm512_cmplt_epi32_mask(a, _mm512_set1_epi32(0x3C800000)),
        _mm512_castps_si512(_mm512_sub_ps(_mm512_add_ps(_mm512_castsi512_ps(a), big), big)));
    r = _mm512_mask_mov_epi32(r, _mm512_cmpge_epi32_mask(a, _mm512_set1_epi32(0x43E00000)),
                              _mm512_set1_epi32(0x43E00000));
    r = _mm512_mask_mov_epi32(r, _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7F800000)),
                              _mm512_set1_epi32(0x7FC00000));
    s = _mm512_castsi512_ps(
        _mm512_or_si512(r, _mm512_and_si512(u, _mm512_set1_epi32((int)0x80000000u))));
    *osc = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(s, _mm512_setzero_ps(), _CMP_NEQ_UQ), g, s);
    *back = _mm512_div_ps(s, g);
}

/* One row for the VNNI kernel: codes in the CHUNK plane order, a chunk of
 * 16 blocks at a time.  The 16 maxima come from one max16x16, the 16
 * scales from one qdq_scale16.  The codes of block j, elements 4s..4s+3,
 * go to step s (64 bytes: blocks 0-15, 4 codes each): each block's 16
 * bytes are stored in order, then the four steps gathered out of them by
 * dword permutes.  corr = -12 x the block's code sum, which one vpdpbusd
 * per step adds up (4 codes a dword, a dword a block).  AQ (or NULL): the
 * token's row of its group's AMX A tiles, where each block's 16 codes go
 * in order too (act_q8.aq's layout; AMX_A_BLOCK bytes a block).  Q and
 * CORR NULL: only XS and AQ (a token the AMX kernel takes whole). */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) static void
quantize_row_q8(const float *x, size_t k, float gs, int8_t *q, float *xs,
                int32_t *corr, int8_t *aq)
{
    const size_t nb = k / NVFP4_BLOCK, nch = chunks_of((int64_t)k);
    const __m512i ones = _mm512_set1_epi8(1);
    /* step s, dword j: dword 4j + s of the blocks' bytes, blocks 0-7 from
     * the first pair of registers, 8-15 from the second */
    const __m512i idx = _mm512_set_epi32(28, 24, 20, 16, 12, 8, 4, 0, 28, 24, 20, 16, 12, 8, 4, 0);
    _Alignas(64) int8_t codes[CPU_CHUNK];

    for (size_t ch = 0; ch < nch; ch++) {
        const size_t b0 = ch * CPU_CHUNK_BLOCKS;
        const size_t cnt = nb - b0 < CPU_CHUNK_BLOCKS ? nb - b0 : CPU_CHUNK_BLOCKS;
        const float *xc = x + b0 * NVFP4_BLOCK;
        __m512 ab[CPU_CHUNK_BLOCKS], osc, back;
        __m512i c[4], acc = _mm512_setzero_si512();

        for (size_t j = 0; j < CPU_CHUNK_BLOCKS; j++)
            ab[j] = j < cnt ? _mm512_abs_ps(_mm512_loadu_ps(xc + j * NVFP4_BLOCK))
                            : _mm512_setzero_ps();
        /* blocks past the row: amax 0, s 0, osc 0, back 0, codes 0 */
        qdq_scale16(max16x16(ab), gs, &osc, &back);
        _mm512_storeu_ps(xs + b0, _mm512_mul_ps(back, _mm512_set1_ps(0.25f)));
        if (!q) {
            for (size_t j = 0; j < cnt; j++) {
                const __m512 oj = _mm512_permutexvar_ps(_mm512_set1_epi32((int)j), osc);
                _mm_storeu_si128(
                    (__m128i *)(aq + (b0 + j) * AMX_A_BLOCK),
                    _mm512_cvtepi32_epi8(
                        qdq_codes_avx512(_mm512_loadu_ps(xc + j * NVFP4_BLOCK), oj)));
            }
            continue;
        }
        if (cnt < CPU_CHUNK_BLOCKS)
            memset(codes, 0, sizeof(codes));
        for (size_t j = 0; j < cnt; j++) {
            const __m512 oj = _mm512_permutexvar_ps(_mm512_set1_epi32((int)j), osc);
            const __m512i cj = qdq_codes_avx512(_mm512_loadu_ps(xc + j * NVFP4_BLOCK), oj);
            const __m128i c8 = _mm512_cvtepi32_epi8(cj);

            _mm_store_si128((__m128i *)(codes + j * NVFP4_BLOCK), c8);
            if (aq) /* the AMX A tiles' row too: block b at b x 256 */
                _mm_storeu_si128((__m128i *)(aq + (b0 + j) * AMX_A_BLOCK), c8);
        }
        for (int i = 0; i < 4; i++)
            c[i] = _mm512_load_si512(codes + 64 * i);
        for (int st = 0; st < 4; st++) {
            const __m512i ix = _mm512_add_epi32(idx, _mm512_set1_epi32(st));
            const __m512i step =
                _mm512_mask_blend_epi32(0xFF00, _mm512_permutex2var_epi32(c[0], ix, c[1]),
                                        _mm512_permutex2var_epi32(c[2], ix, c[3]));
            _mm512_storeu_si512(q + ch * CPU_CHUNK + 64 * st, step);
            acc = _mm512_dpbusd_epi32(acc, ones, step);
        }
        _mm512_storeu_si512(corr + b0, _mm512_mullo_epi32(acc, _mm512_set1_epi32(-12)));
    }
}

/* One row of x' = q * (s / gs) for the AVX-512 float kernel: q2 * (back/2)
 * rounds once, as §5's q * (s / gs) does (halving is exact). */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static void
qdq_row_avx512(const float *x, size_t k, float gs, float *out)
{

    for (size_t b = 0; b < k / NVFP4_BLOCK; b++) {
        float back;
        __m512i c = qdq_block_avx512(x + b * NVFP4_BLOCK, gs, &back);
        _mm512_storeu_ps(out + b * NVFP4_BLOCK,
                         _mm512_mul_ps(_mm512_cvtepi32_ps(c), _mm512_set1_ps(back * 0.5f)));
    }
}

/* One copy of each body per token count, so that the per-token accumulators
 * live in registers (a loop over a run-time count keeps them in memory). */
#define CPU_DISPATCH(tgt, name, params, ...)                                           \
    __attribute__((target(tgt))) static void name params                               \
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

CPU_DISPATCH("avx2,fma", row_avx2,
             (const cpu_kweight *w, int64_t r, const float *x, size_t t0, const krange *kr,
              size_t nt, float *y),
             w, r, x, t0, kr)
CPU_DISPATCH("avx512f,avx512bw,avx512vl,avx512dq", row_avx512,
             (const cpu_kweight *w, int64_t r, const float *x, size_t t0, const krange *kr,
              size_t nt, float *y),
             w, r, x, t0, kr)
CPU_DISPATCH("avx512f,avx512bw,avx512vl,avx512dq", row2_avx512,
             (const cpu_kweight *w, int64_t r, size_t rs, const float *x, size_t t0,
              const krange *kr, size_t nt, float *y),
             w, r, rs, x, t0, kr)
CPU_DISPATCH("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni", row_vnni,
             (const cpu_kweight *w, int64_t r, const act_q8 *a, size_t nch, size_t t0,
              const krange *kr, size_t nt, float *y),
             w, r, a, nch, t0, kr)
CPU_DISPATCH("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni", row2_vnni,
             (const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a, size_t nch,
              size_t t0, const krange *kr, size_t nt, float *y),
             w, r, rs, a, nch, t0, kr)

/* ---- AMX int8 GEMM (CHUNK layout, W4A4, 16 tokens x 16 rows) ----------------- */

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

/* The tile unit computes the exact integer sum of one block for 16 tokens
 * x 16 rows in one TDPBSSD (A: 16 tokens x the block's 16 codes; B: 4 rows
 * of 64 bytes, row s holding elements 4s..4s+3 of the 16 weight rows; both
 * 2 * E2M1 codes, signed, so no offset).  The sum is the same integer
 * vpdpbusd forms, and everything after it is row_vnni_body's float
 * arithmetic, vectorized over 16 rows instead of over the 16 blocks of a
 * chunk: per output, lane j (block j of each chunk) accumulates
 * fma(float(isum), ws * xs, acc) in chunk order over one stretch, and the
 * 16 lanes are summed in _mm512_reduce_add_ps's tree (halves of 8, 4, 2,
 * then 1), done here with vertical adds: the same bits. */
/* GCC's tile intrinsics are asm statements that tell the compiler of no
 * memory read (tileloadd, and ldtilecfg reads "8 bytes"): without this
 * barrier stores to the configuration or to the A and B buffers could be
 * dropped or moved past them. */
#define AMX_BARRIER() __asm__ volatile("" ::: "memory")

typedef struct __attribute__((packed)) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

__attribute__((target("amx-tile,amx-int8"))) static void amx_begin(void)
{
    amx_cfg cfg;

    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    /* tmm0..3: C (16 tokens x 16 int32); tmm4, tmm6: A (16 tokens x 16
     * bytes); tmm5, tmm7: B (4 x 64 bytes) */
    for (int i = 0; i < 4; i++) {
        cfg.rows[i] = AMX_T;
        cfg.colsb[i] = 64;
    }
    cfg.rows[4] = cfg.rows[6] = AMX_T;
    cfg.colsb[4] = cfg.colsb[6] = 16;
    cfg.rows[5] = cfg.rows[7] = 4;
    cfg.colsb[5] = cfg.colsb[7] = 64;
    AMX_BARRIER();
    _tile_loadconfig(&cfg);
}

__attribute__((target("amx-tile"))) static void amx_end(void)
{
    _tile_release();
}

/* The B tiles and scales of rows R .. R+15: bp [nb][4][64] (byte 64s + 4i +
 * e of block b: element 4s + e of row R+i, 2 * E2M1 signed), wst [nb][16]
 * (row i's block scale times the global one, as chunk_load decodes it).
 * Per chunk, step s of the 16 rows (dword j: block j) transposed. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static void
amx_pack_b(const cpu_kweight *w, int64_t r, int8_t *bp, float *wst)
{
    const size_t k = (size_t)w->d.k, nb = k / NVFP4_BLOCK;
    const __m512 s2 = _mm512_set1_ps(w->d.weight_scale_2);
    const __m512i lut = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
    const __m512i lo4 = _mm512_set1_epi8(0x0F);

    for (size_t ch = 0; ch * CPU_CHUNK_BLOCKS < nb; ch++) {
        const size_t c = nb - ch * CPU_CHUNK_BLOCKS < CPU_CHUNK_BLOCKS
                             ? nb - ch * CPU_CHUNK_BLOCKS
                             : CPU_CHUNK_BLOCKS;
        __m512i v[5][AMX_T], o[16];

        for (int i = 0; i < AMX_T; i++) {
            __m512i p0, p1;
            __m512 ws;

            chunk_load(w->packed + (size_t)(r + i) * k / 2, w->scales + (size_t)(r + i) * nb,
                       nb, ch, s2, &p0, &p1, &ws);
            v[0][i] = _mm512_shuffle_epi8(lut, _mm512_and_si512(p0, lo4));
            v[1][i] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(p0, 4), lo4));
            v[2][i] = _mm512_shuffle_epi8(lut, _mm512_and_si512(p1, lo4));
            v[3][i] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(p1, 4), lo4));
            v[4][i] = _mm512_castps_si512(ws);
        }
        for (int st = 0; st < 4; st++) {
            tr16x16(v[st], o);
            for (size_t jj = 0; jj < c; jj++)
                _mm512_store_si512((void *)(bp + (ch * CPU_CHUNK_BLOCKS + jj) * 256 + 64 * st),
                                   o[jj]);
        }
        tr16x16(v[4], o);
        for (size_t jj = 0; jj < c; jj++)
            _mm512_store_si512((void *)(wst + (ch * CPU_CHUNK_BLOCKS + jj) * 16), o[jj]);
    }
}

/* One block's exact sums into BUF [token][row] (int32), on tiles C, A, B. */
#define AMX_BLOCK(c, ta, tb, b, buf)                                     \
    do {                                                                 \
        _tile_loadd(ta, aq + (b) * AMX_T * 16, 16);                      \
        _tile_loadd(tb, bp + (b) * 256, 64);                             \
        _tile_zero(c);                                                   \
        _tile_dpbssd(c, ta, tb);                                         \
        _tile_stored(c, buf, 64);                                        \
    } while (0)

/* row_vnni_body's float step of block B for 16 tokens, over 16 rows. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline
    __attribute__((always_inline)) void
amx_fstep(__m512 *ac, const int32_t *buf, const float *wst, const float *xs, size_t xst,
          size_t b)
{
    const __m512 wsv = _mm512_load_ps(wst + b * 16);

#pragma GCC unroll 16
    for (size_t t = 0; t < AMX_T; t++)
        ac[t] = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(_mm512_load_si512((const void *)(buf + t * 16))),
            _mm512_mul_ps(wsv, _mm512_set1_ps(xs[t * xst + b])), ac[t]);
}

/* The exact sums of lane (block index mod 16) J's blocks in chunks [CH0,
 * CH0 + CNT), CNT <= 6 (one stretch), into BUF [CNT][16 tokens][16 rows]:
 * four C tiles in turn and two pairs of A and B tiles, so that the tile
 * unit's work overlaps. */
__attribute__((target("amx-tile,amx-int8"))) static inline __attribute__((always_inline)) void
amx_lane(const int8_t *aq, const int8_t *bp, size_t b0, size_t cnt, int32_t *buf)
{
    if (cnt > 0)
        AMX_BLOCK(0, 4, 5, b0, buf);
    if (cnt > 1)
        AMX_BLOCK(1, 6, 7, b0 + 16, buf + 256);
    if (cnt > 2)
        AMX_BLOCK(2, 4, 5, b0 + 32, buf + 512);
    if (cnt > 3)
        AMX_BLOCK(3, 6, 7, b0 + 48, buf + 768);
    if (cnt > 4)
        AMX_BLOCK(0, 4, 5, b0 + 64, buf + 1024);
    if (cnt > 5)
        AMX_BLOCK(1, 6, 7, b0 + 80, buf + 1280);
}

/* Chunks of lane J in a stretch [CH0, CH1) that hold block J (a tail
 * chunk of c blocks has none past c: there the lane stays +0, as in the
 * VNNI kernels, which add a zero product to +0). */
static inline size_t amx_lane_cnt(size_t ch0, size_t ch1, size_t j, size_t nb)
{
    size_t cnt = ch1 - ch0;
    while (cnt && (ch0 + cnt - 1) * CPU_CHUNK_BLOCKS + j >= nb)
        cnt--;
    return cnt;
}

/* Outputs of tokens T0 .. T0+15, rows R .. R+15 over chunks [kr->b0,
 * kr->b1) (at most 6): XS is act_q8's xs of token T0 (stride NCH * 16), AQ
 * and BP the tiles of act_q8.aq (quantize_row_q8) / amx_pack_b.  The tile
 * unit computes the next lane's sums while the float step takes this
 * lane's. */
__attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq"))) static void
amx_tile16(const int8_t *aq, const int8_t *bp, const float *wst, const float *xs, size_t nch,
           size_t nb, const krange *kr, float *y, size_t n)
{
    __m512 acc[AMX_T][CPU_CHUNK_BLOCKS]; /* [token][lane j], over 16 rows */
    int32_t cb[2][6 * AMX_T * 16] __attribute__((aligned(64)));
    const size_t xst = nch * CPU_CHUNK_BLOCKS, ch0 = kr->b0, ch1 = kr->b1;

    amx_lane(aq, bp, ch0 * CPU_CHUNK_BLOCKS, amx_lane_cnt(ch0, ch1, 0, nb), cb[0]);
    for (size_t j = 0; j < CPU_CHUNK_BLOCKS; j++) {
        __m512 ac[AMX_T];
        const size_t cnt = amx_lane_cnt(ch0, ch1, j, nb);
        const size_t cn = j + 1 < CPU_CHUNK_BLOCKS ? amx_lane_cnt(ch0, ch1, j + 1, nb) : 0;
        const size_t bn = ch0 * CPU_CHUNK_BLOCKS + j + 1;
        const int32_t *buf = cb[j & 1];
        int32_t *nbuf = cb[(j + 1) & 1];

#pragma GCC unroll 16
        for (size_t t = 0; t < AMX_T; t++)
            ac[t] = _mm512_setzero_ps();
        /* the next lane's blocks on the tile unit, four at a time (the C
         * tiles), while this lane's float steps run, and only then their
         * sums stored: a store right behind its TDPBSSD waits for it (perf:
         * a third of this kernel's samples sat on such stores when each
         * block's float step alone stood between them) */
#define AMX_ISSUE(i, c, ta, tb)                                                \
    if ((i) < cn) {                                                        \
        _tile_loadd(ta, aq + (bn + (i) * CPU_CHUNK_BLOCKS) * AMX_T * 16, 16);  \
        _tile_loadd(tb, bp + (bn + (i) * CPU_CHUNK_BLOCKS) * 256, 64);         \
        _tile_zero(c);                                                     \
        _tile_dpbssd(c, ta, tb);                                           \
    }
#define AMX_FSTEP(i)                                                           \
    if ((i) < cnt)                                                         \
        amx_fstep(ac, buf + (i) * 256, wst, xs, xst, (ch0 + (i)) * CPU_CHUNK_BLOCKS + j);
#define AMX_STORE(i, c)                                                        \
    if ((i) < cn)                                                          \
        _tile_stored(c, nbuf + (i) * 256, 64);
        AMX_ISSUE(0, 0, 4, 5)
        AMX_ISSUE(1, 1, 6, 7)
        AMX_ISSUE(2, 2, 4, 5)
        AMX_ISSUE(3, 3, 6, 7)
        AMX_FSTEP(0)
        AMX_FSTEP(1)
        AMX_FSTEP(2)
        AMX_FSTEP(3)
        AMX_STORE(0, 0)
        AMX_STORE(1, 1)
        AMX_STORE(2, 2)
        AMX_STORE(3, 3)
        AMX_ISSUE(4, 0, 4, 5)
        AMX_ISSUE(5, 1, 6, 7)
        AMX_FSTEP(4)
        AMX_FSTEP(5)
        AMX_STORE(4, 0)
        AMX_STORE(5, 1)
#undef AMX_ISSUE
#undef AMX_FSTEP
#undef AMX_STORE
#pragma GCC unroll 16
        for (size_t t = 0; t < AMX_T; t++)
            acc[t][j] = ac[t];
    }
    for (size_t t = 0; t < AMX_T; t++) {
        __m512 h[8], v;
        float *yo = y + t * n;

        for (int i = 0; i < 8; i++)
            h[i] = _mm512_add_ps(acc[t][8 + i], acc[t][i]);
        for (int i = 0; i < 4; i++)
            h[i] = _mm512_add_ps(h[4 + i], h[i]);
        for (int i = 0; i < 2; i++)
            h[i] = _mm512_add_ps(h[i], h[i + 2]);
        v = _mm512_add_ps(h[0], h[1]);
        _mm512_storeu_ps(yo, kr->acc ? _mm512_add_ps(_mm512_loadu_ps(yo), v) : v);
    }
}
#endif /* compiler with AMX */
#endif /* CPU_X86 */

/* ---- dense (F32 / BF16 / F16) -------------------------------------------- */

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

static const cpu_dense_part *dense_row(const cpu_kweight *w, int64_t r, int64_t *local)
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

static void dense_row_scalar(const cpu_kweight *w, int64_t r, const float *x, size_t t0,
                             const krange *kr, size_t nt, float *y)
{
    int64_t lr;
    const cpu_dense_part *p = dense_row(w, r, &lr);
    const size_t k = (size_t)w->d.k, base = (size_t)lr * k;
    const size_t i1 = 16 * kr->b1 < k ? 16 * kr->b1 : k;

    for (size_t t = t0; t < t0 + nt; t++) {
        float acc = 0.0f;
        float *yo = y + t * (size_t)w->d.n + (size_t)r;
        for (size_t i = 16 * kr->b0; i < i1; i++)
            acc += dense_at(p, base + i) * x[t * k + i];
        *yo = kr->acc ? *yo + acc : acc;
    }
}

#ifdef CPU_X86
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline __m512
dense_load16(const cpu_dense_part *p, size_t i, __mmask16 mk)
{
    switch (p->dtype) {
    case NVFP4_DTYPE_F32: return _mm512_maskz_loadu_ps(mk, (const float *)p->data + i);
    case NVFP4_DTYPE_BF16:
        /* bf16 is the top half of a float32: exact */
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(
                _mm256_maskz_loadu_epi16(mk, (const uint16_t *)p->data + i)),
            16));
    default:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)p->data + i));
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline __attribute__((always_inline)) void
dense_row_avx512_body(const cpu_kweight *w, int64_t r, const float *x, size_t t0,
                      const krange *kr, size_t nt, float *y)
{
    int64_t lr;
    const cpu_dense_part *p = dense_row(w, r, &lr);
    const size_t k = (size_t)w->d.k, base = (size_t)lr * k;
    const size_t i1 = 16 * kr->b1 < k ? 16 * kr->b1 : k;
    __m512 acc[8];

#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++)
        acc[t] = _mm512_setzero_ps();
    for (size_t i = 16 * kr->b0; i < i1; i += 16) {
        __mmask16 mk = i1 - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (i1 - i)) - 1);
        __m512 wv = dense_load16(p, base + i, mk);
#pragma GCC unroll 8
        for (size_t t = 0; t < nt; t++)
            acc[t] = _mm512_fmadd_ps(
                wv,
                kr->packed ? _mm512_loadu_ps(xblock(x, k, t0, t, i / 16, 1))
                           : _mm512_maskz_loadu_ps(mk, x + (t0 + t) * k + i),
                acc[t]);
    }
#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++) {
        float *yo = y + (t0 + t) * (size_t)w->d.n + (size_t)r;
        *yo = kr->acc ? *yo + _mm512_reduce_add_ps(acc[t]) : _mm512_reduce_add_ps(acc[t]);
    }
}

/* NT (1-4) tokens of a small batch, four rows of one dense part RS apart
 * (tiles_range: four sequential streams), tokens T0 .. T0 + NT - 1 of the
 * first token tile (x packed or not).  Per row and token exactly the
 * operations of dense_row_avx512_body (one accumulator, same order, same
 * reduction), so the batch reads each weight once and changes no bit. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline
    __attribute__((always_inline)) void
    dense_spread_body(const cpu_kweight *w, const cpu_dense_part *p, int64_t r, int64_t lr,
                      size_t rs, const float *x, size_t t0, const krange *kr, size_t nt,
                      float *y)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n, l0 = (size_t)lr * k;
    const size_t i1 = 16 * kr->b1 < k ? 16 * kr->b1 : k;
    __m512 acc[4][4];

#pragma GCC unroll 4
    for (size_t t = 0; t < nt; t++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            acc[j][t] = _mm512_setzero_ps();
    for (size_t i = 16 * kr->b0; i < i1; i += 16) {
        const __mmask16 mk =
            i1 - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (i1 - i)) - 1);
        __m512 wv[4];

#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            wv[j] = dense_load16(p, l0 + (size_t)j * rs * k + i, mk);
#pragma GCC unroll 4
        for (size_t t = 0; t < nt; t++) {
            const __m512 xv = kr->packed ? _mm512_loadu_ps(xblock(x, k, 0, t0 + t, i / 16, 1))
                                         : _mm512_maskz_loadu_ps(mk, x + (t0 + t) * k + i);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                acc[j][t] = _mm512_fmadd_ps(wv[j], xv, acc[j][t]);
        }
    }
#pragma GCC unroll 4
    for (size_t t = 0; t < nt; t++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            float *yo = y + (t0 + t) * n + (size_t)r + (size_t)j * rs;
            const float v = _mm512_reduce_add_ps(acc[j][t]);
            *yo = kr->acc ? *yo + v : v;
        }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static void
dense_spread_avx512(const cpu_kweight *w, const cpu_dense_part *p, int64_t r, int64_t lr,
                    size_t rs, const float *x, size_t t0, const krange *kr, size_t nt,
                    float *y)
{
    switch (nt) {
    case 1: dense_spread_body(w, p, r, lr, rs, x, t0, kr, 1, y); break;
    case 2: dense_spread_body(w, p, r, lr, rs, x, t0, kr, 2, y); break;
    case 3: dense_spread_body(w, p, r, lr, rs, x, t0, kr, 3, y); break;
    default: dense_spread_body(w, p, r, lr, rs, x, t0, kr, 4, y); break;
    }
}

/* Two rows of one dense part by a tile of NT packed tokens (k % 16 == 0):
 * each activation load feeds two FMAs, and the 2 x NT chains hide the
 * FMA latency one row's NT alone would not (NT < 8).  Per output the
 * operations of dense_row_avx512_body, in the same order. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline
    __attribute__((always_inline)) void
    dense_row2_body(const cpu_kweight *w, const cpu_dense_part *p, int64_t r, int64_t lr,
                    const float *x, size_t t0, const krange *kr, size_t nt, float *y)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n;
    const size_t base0 = (size_t)lr * k, base1 = base0 + k;
    const float *xt = x + (t0 / 8) * (k / 16) * 128;
    __m512 a0[8], a1[8];

#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++)
        a0[t] = a1[t] = _mm512_setzero_ps();
    for (size_t b = kr->b0; b < kr->b1; b++) {
        const __m512 w0 = dense_load16(p, base0 + 16 * b, (__mmask16)0xFFFF);
        const __m512 w1 = dense_load16(p, base1 + 16 * b, (__mmask16)0xFFFF);
#pragma GCC unroll 8
        for (size_t t = 0; t < nt; t++) {
            __m512 xv = _mm512_loadu_ps(xt + b * 128 + 16 * t);
            __asm__("" : "+v"(xv)); /* one load for both rows */
            a0[t] = _mm512_fmadd_ps(w0, xv, a0[t]);
            a1[t] = _mm512_fmadd_ps(w1, xv, a1[t]);
        }
    }
    store2x8(a0, a1, y, t0, n, r, 1, kr->acc, nt);
}

/* One token, four rows of one dense part, unpacked x (m == 1): four FMA
 * chains in flight where one row alone waits on its single accumulator,
 * the dtype's load chosen once per call.  The rows are RS apart.  With
 * RS = 1 (four neighbours, one stream jumping between four rows) the weight
 * stream is prefetched, one line per 64 bytes, the next group of rows' same
 * offset ahead.  With RS a quarter of a tile (tiles_range) each row is a
 * long sequential stream of its own, which the hardware prefetchers follow
 * without help, and software prefetches only got in their way: Zen 4, 1
 * thread, bf16 [128256, 2048] 0.71 -> 1.00 of the ooc probe with none,
 * 0.94-0.99 with T1 0.5-1 KB ahead, 0.75 with 2-16 KB ahead.  Per row
 * exactly the operations of dense_row_avx512_body with nt = 1 (same masks,
 * one accumulator, same order, same reduction), so grouping rows changes
 * no bit. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline
    __attribute__((always_inline)) void
    dense_gemv4_body(const cpu_kweight *w, const cpu_dense_part *p, int64_t r, int64_t lr,
                     size_t rs, const float *x, const krange *kr, float *y, nvfp4_dtype dt,
                     int pf_l2)
{
    const size_t k = (size_t)w->d.k, esz = dt == NVFP4_DTYPE_F32 ? 4 : 2;
    const size_t i1 = 16 * kr->b1 < k ? 16 * kr->b1 : k;
    const size_t row = rs * k * esz, ahead = rs > 1 ? 0 : DENSE_GEMV_ROWS * row;
    const char *base = (const char *)p->data + (size_t)lr * k * esz;
    const cpu_dense_part q = {p->data, dt, p->rows};
    const size_t l0 = (size_t)lr * k;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 16 * kr->b0;

#define DENSE_GEMV4_STEP(mk)                                                         \
    do {                                                                             \
        const __m512 xv = _mm512_maskz_loadu_ps((mk), x + i);                        \
        a0 = _mm512_fmadd_ps(dense_load16(&q, l0 + i, (mk)), xv, a0);                \
        a1 = _mm512_fmadd_ps(dense_load16(&q, l0 + rs * k + i, (mk)), xv, a1);       \
        a2 = _mm512_fmadd_ps(dense_load16(&q, l0 + 2 * rs * k + i, (mk)), xv, a2);   \
        a3 = _mm512_fmadd_ps(dense_load16(&q, l0 + 3 * rs * k + i, (mk)), xv, a3);   \
    } while (0)
    for (; i + 16 <= i1; i += 16) {
        if (ahead && (i * esz) % 64 == 0) {
            const char *pf = base + i * esz + ahead;
            if (pf_l2) {
                _mm_prefetch(pf, _MM_HINT_T1);
                _mm_prefetch(pf + row, _MM_HINT_T1);
                _mm_prefetch(pf + 2 * row, _MM_HINT_T1);
                _mm_prefetch(pf + 3 * row, _MM_HINT_T1);
            } else {
                _mm_prefetch(pf, _MM_HINT_T0);
                _mm_prefetch(pf + row, _MM_HINT_T0);
                _mm_prefetch(pf + 2 * row, _MM_HINT_T0);
                _mm_prefetch(pf + 3 * row, _MM_HINT_T0);
            }
        }
        DENSE_GEMV4_STEP((__mmask16)0xFFFF);
    }
    if (i < i1) {
        const __mmask16 mk = (__mmask16)((1u << (i1 - i)) - 1);
        DENSE_GEMV4_STEP(mk);
    }
#undef DENSE_GEMV4_STEP
    {
        float *yo = y + (size_t)r;
        const float s0 = _mm512_reduce_add_ps(a0), s1 = _mm512_reduce_add_ps(a1),
                    s2 = _mm512_reduce_add_ps(a2), s3 = _mm512_reduce_add_ps(a3);
        yo[0] = kr->acc ? yo[0] + s0 : s0;
        yo[rs] = kr->acc ? yo[rs] + s1 : s1;
        yo[2 * rs] = kr->acc ? yo[2 * rs] + s2 : s2;
        yo[3 * rs] = kr->acc ? yo[3 * rs] + s3 : s3;
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static void
dense_gemv4_avx512(const cpu_kweight *w, const cpu_dense_part *p, int64_t r, int64_t lr,
                   size_t rs, const float *x, const krange *kr, float *y)
{
    const int l2 = cpu_pf_l2;

    switch (p->dtype) {
    case NVFP4_DTYPE_F32: dense_gemv4_body(w, p, r, lr, rs, x, kr, y, NVFP4_DTYPE_F32, l2); break;
    case NVFP4_DTYPE_BF16:
        if (l2)
            dense_gemv4_body(w, p, r, lr, rs, x, kr, y, NVFP4_DTYPE_BF16, 1);
        else
            dense_gemv4_body(w, p, r, lr, rs, x, kr, y, NVFP4_DTYPE_BF16, 0);
        break;
    default:
        if (l2)
            dense_gemv4_body(w, p, r, lr, rs, x, kr, y, NVFP4_DTYPE_F16, 1);
        else
            dense_gemv4_body(w, p, r, lr, rs, x, kr, y, NVFP4_DTYPE_F16, 0);
        break;
    }
}

CPU_DISPATCH("avx512f,avx512bw,avx512vl,avx512dq", dense_row_avx512,
             (const cpu_kweight *w, int64_t r, const float *x, size_t t0, const krange *kr,
              size_t nt, float *y),
             w, r, x, t0, kr)
CPU_DISPATCH("avx512f,avx512bw,avx512vl,avx512dq", dense_row2,
             (const cpu_kweight *w, const cpu_dense_part *p, int64_t r, int64_t lr,
              const float *x, size_t t0, const krange *kr, size_t nt, float *y),
             w, p, r, lr, x, t0, kr)
#endif

/* ---- upload -------------------------------------------------------------- */

static float *bias_to_float(const nvfp4_linear *parts, size_t nparts, int64_t n,
                            nvfp4_error *err)
{
    float *b = malloc((size_t)n * sizeof(float));
    size_t r = 0;

    if (!b) {
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", parts[0].prefix, -1,
                        "out of memory for the bias");
        return NULL;
    }
    for (size_t i = 0; i < nparts; i++)
        for (int64_t j = 0; j < parts[i].n; j++, r++)
            if (!parts[i].bias || nvfp4_quant_read_float(parts[i].bias, (uint64_t)j, &b[r]))
                b[r] = 0.0f;
    return b;
}

void nvfp4k_cpu_kweight_free(void *ctx, void *kw)
{
    cpu_kweight *w = kw;

    (void)ctx;
    if (!w)
        return;
    free(w->packed);
    free(w->scales);
    free(w->wlut);
    for (size_t i = 0; w->dense_copied && i < w->ndense; i++)
        free((void *)w->dense[i].data);
    free(w->dense);
    free(w->parts);
    free(w->bias);
    free(w);
}

/* Rows of one part, repacked on the backend's threads (nvfp4k_cpu_par()). */
typedef struct {
    const uint8_t *src;
    uint8_t *dst;
    size_t k;
    int layout;
} repack_job;

static void repack_range(void *arg, size_t r0, size_t r1, int slot)
{
    const repack_job *j = arg;

    (void)slot;
    for (size_t r = r0; r < r1; r++)
        repack_row(j->src + r * (j->k / 2), (int64_t)j->k, j->layout, j->dst + r * (j->k / 2));
}

/* Bytes of a dense copy, 2 MiB a work item (a huge page: its fault and
 * zeroing, most of the copy's time, then run on the backend's threads). */
typedef struct {
    const unsigned char *src;
    unsigned char *dst;
    size_t bytes;
} copy_job;

#define COPY_PIECE ((size_t)2 << 20)

static void copy_range(void *arg, size_t i0, size_t i1, int slot)
{
    const copy_job *j = arg;
    const size_t b0 = i0 * COPY_PIECE, b1 = i1 * COPY_PIECE < j->bytes ? i1 * COPY_PIECE : j->bytes;

    (void)slot;
    memcpy(j->dst + b0, j->src + b0, b1 - b0);
}

void *nvfp4k_cpu_kweight_upload(void *ctx, const nvfp4_linear *parts, size_t nparts,
                         const nvfp4_kweight_desc *desc, nvfp4_error *err)
{
    cpu_kweight *w = calloc(1, sizeof(*w));
    const size_t k = (size_t)desc->k;

    nvfp4k_cpu_tables_init();
    if (!w)
        goto nomem;
    w->d = *desc;
    /* the int8 kernel wants its own layout; every other path the BLOCK one */
    w->layout = desc->scheme == NVFP4_SCHEME_W4A4 && ((cpu_ctx *)ctx)->isa >= CPU_ISA_VNNI
                    ? CPU_LAYOUT_CHUNK
                    : CPU_LAYOUT_BLOCK;
    w->nparts = nparts;
    w->parts = malloc(nparts * sizeof(*parts));
    if (!w->parts)
        goto nomem;
    memcpy(w->parts, parts, nparts * sizeof(*parts));
    if (desc->has_bias && !(w->bias = bias_to_float(parts, nparts, desc->n, err)))
        goto fail;

    if (desc->scheme == NVFP4_SCHEME_NONE) {
        w->ndense = nparts;
        w->dense = calloc(nparts, sizeof(*w->dense));
        if (!w->dense)
            goto nomem;
        for (size_t i = 0; i < nparts; i++) {
            w->dense[i].data = parts[i].dense->data;
            w->dense[i].dtype = parts[i].dense->dtype;
            w->dense[i].rows = parts[i].n;
        }
        /* asked for a copy: in 2 MiB pages (nvfp4k_cpu_lasting_alloc), which
         * a GEMV streams faster than the mapped file's 4 KiB ones */
        if (desc->flags & NVFP4_KWEIGHT_COPY) {
            w->dense_copied = 1; /* (free(NULL) for those not copied yet) */
            for (size_t i = 0; i < nparts; i++)
                w->dense[i].data = NULL;
            for (size_t i = 0; i < nparts; i++) {
                const size_t bytes = (size_t)parts[i].dense->nbytes;
                void *cp = nvfp4k_cpu_lasting_alloc(bytes);

                if (!cp) {
                    nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", parts[i].prefix, -1,
                                    "out of memory for a copy of %zu bytes", bytes);
                    goto fail;
                }
                {
                    copy_job j = {parts[i].dense->data, cp, bytes};
                    nvfp4k_cpu_par(ctx, (bytes + COPY_PIECE - 1) / COPY_PIECE,
                                   nvfp4k_cpu_nthreads(ctx), copy_range, &j);
                }
                w->dense[i].data = cp;
            }
        }
        return w;
    }

    /* NVFP4: repack the nibbles, gather the scales of all parts */
    w->packed = nvfp4k_cpu_lasting_alloc((size_t)desc->n * (k / 2));
    w->scales = nvfp4k_cpu_lasting_alloc((size_t)desc->n * (k / NVFP4_BLOCK));
    if (!w->packed || !w->scales)
        goto nomem;
    {
        size_t r0 = 0;
        for (size_t i = 0; i < nparts; i++) {
            const nvfp4_linear *p = &parts[i];
            const size_t nsc = (size_t)p->n * (k / NVFP4_BLOCK);

            /* §8's block-scale bytes: nvfp4_linear_validate() (registry.c) */
            memcpy(w->scales + r0 * (k / NVFP4_BLOCK), p->scales, nsc);
            {
                repack_job j = {p->weight, w->packed + r0 * (k / 2), k, w->layout};
                nvfp4k_cpu_par(ctx, (size_t)p->n, nvfp4k_cpu_nthreads(ctx), repack_range, &j);
            }
            r0 += (size_t)p->n;
        }
    }
    if (w->layout == CPU_LAYOUT_BLOCK) {
        /* §2 in this order: block scale times global scale, then the code */
        if (!(w->wlut = nvfp4k_cpu_aligned_alloc(256 * 16 * sizeof(float))))
            goto nomem;
        for (int sb = 0; sb < 256; sb++) {
            const float bs = e4m3_table[sb] * desc->weight_scale_2;
            for (int c = 0; c < 16; c++)
                w->wlut[16 * sb + c] = e2m1_f[c] * bs;
        }
    }
    return w;

nomem:
    nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", parts[0].prefix, -1,
                    "out of memory uploading a [%lld, %lld] weight", (long long)desc->n,
                    (long long)desc->k);
fail:
    nvfp4k_cpu_kweight_free(ctx, w);
    return NULL;
}

/* ---- the product ---------------------------------------------------------- */

enum { PATH_DENSE_SCALAR, PATH_DENSE_AVX512, PATH_SCALAR, PATH_AVX2, PATH_AVX512, PATH_VNNI,
       PATH_AMX };

static inline void row_call(int path, const cpu_kweight *w, int64_t r, const float *x,
                            const act_q8 *a, size_t nch, size_t t0, const krange *kr,
                            size_t nt, float *y)
{
    switch (path) {
#ifdef CPU_X86
    case PATH_DENSE_AVX512: dense_row_avx512(w, r, x, t0, kr, nt, y); break;
    case PATH_AVX2: row_avx2(w, r, x, t0, kr, nt, y); break;
    case PATH_AVX512: row_avx512(w, r, x, t0, kr, nt, y); break;
    case PATH_VNNI: row_vnni(w, r, a, nch, t0, kr, nt, y); break;
#endif
    case PATH_DENSE_SCALAR: dense_row_scalar(w, r, x, t0, kr, nt, y); break;
    default: row_scalar(w, r, x, t0, kr, nt, y); break;
    }
    (void)a;
    (void)nch;
}

/* The loop nest (cache blocking): threads take tiles of rows (outputs, so
 * no reduction is ever split between threads); inside a tile, tokens go by
 * tiles of 8 whose activations, walked in stretches of k, stay in L1 while
 * every row of the tile passes over them, and the tile's weights stay in
 * L2 while the token tiles pass.  One token: GEMV_CHUNKS tiles of rows
 * per thread (16 on one thread), the activations of a whole row in L1 when
 * they fit. */
/* Row tiles per thread of a one-token product on more than one thread,
 * and fewer when tiles would hold less than GEMV_TILE_MIN bytes (each
 * tile restarts a stream; on 2 threads of a Xeon, W4A4 [512, 2048] read at
 * 0.64-0.67 of the probe with 4 tiles per thread, 0.68-0.73 with 2). */
#define GEMV_CHUNKS 4
#define GEMV_TILE_MIN (128 * 1024)

typedef struct {
    int path, packed;
    int spread; /* NVFP4 rows as four streams (nvfp4_spread) */
    const cpu_kweight *w;
    const float *x;
    const act_q8 *a;
    size_t nch, m, units, ku, rt;
    float *y;
} tiles_job;

/* One token on the 4-row NVFP4 GEMVs (gemv4_vnni at every k,
 * gemv_lut_avx512): rows r, r + q, r + 2q, r + 3q of a tile of 4q rows
 * together, as the dense GEMV does, with the one-thread product cut into
 * long tiles as on several threads (see tiles_range); not for products of
 * under GEMV_TILE_MIN bytes, whose streams would be a few rows long
 * (W4A16 [192, 576], 62 KB, 1 thread: 9.5-9.8 GB/s in 16-row tiles of
 * neighbours, 8.6-9.1 spread). */
static inline int gemv_spread(int path, const cpu_kweight *w)
{
    const size_t k = (size_t)w->d.k;

    return (path == PATH_VNNI || path == PATH_AVX512) &&
           (size_t)w->d.n * (k / 2 + k / 16) >= GEMV_TILE_MIN;
}

/* Batches of 2 .. TOK_TILE tokens on the 2-row NVFP4 kernels (row2_vnni,
 * row2_avx512 on packed activations): the same four streams, two rows
 * RS apart per call (see tiles_range). */
static inline int batch_spread(int path, size_t m, int packed)
{
    return m > 1 && m <= TOK_TILE && (path == PATH_VNNI || (path == PATH_AVX512 && packed));
}

/* Whether a call's NVFP4 tiles are read as four streams (tiles_range). */
static inline int nvfp4_spread(int path, const cpu_kweight *w, size_t m, int packed)
{
    return m == 1 ? gemv_spread(path, w) : batch_spread(path, m, packed);
}

/* the fewest row tiles of a multi-token product per thread (run_tiles) */
#define GEMM_TILES_PER_THREAD 3

static void tiles_range(void *arg, size_t tile0, size_t tile1, int slot);
#ifdef CPU_AMX
static void amx_range(const tiles_job *j, size_t tile0, size_t tile1);
#endif

/* The tiles of one product (its rows cut for NTH threads) into *JO; returns
 * their count. */
static size_t plan_tiles(int path, const cpu_kweight *w, const float *x, int packed,
                         const act_q8 *a, size_t nch, size_t m, int nth, float *y,
                         tiles_job *jo)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n;
    const size_t units = path >= PATH_VNNI ? nch : (k + 15) / 16;
    const int spread = nvfp4_spread(path, w, m, packed);
    size_t ku, rt;

    /* Stretches of k whose partial sums are added to y one after the other:
     * the same for every m, so that a row sums in the same order in a GEMV
     * as in any GEMM (batch invariance; every kernel below keeps one
     * accumulator per output and token). */
    if (path >= PATH_VNNI)
        ku = 6;                               /* 8 tokens x 6 x 256 int8 = 12 KB */
    else
        ku = 64;                              /* 8 tokens x 1024 floats = 32 KB */
    if ((m == 1 && nth > 1) || (m <= DENSE_SPREAD_MAX_M && path == PATH_DENSE_AVX512) || spread) {
        /* one token: about GEMV_CHUNKS tiles per thread, so that each
         * thread streams long runs of rows (16-row tiles, claimed 16 per
         * thread by the pool, restarted the stream every 18-74 KB: on 2
         * threads of a Xeon, W4A4 [1024, 4096] read at 0.71 of the probe,
         * at 0.79-0.84 in 4 runs per thread); a dense weight by up to
         * DENSE_SPREAD_MAX_M tokens and one token of NVFP4 on one
         * thread too, whose tiles tiles_range reads as four streams */
        const size_t row_bytes = w->d.scheme == NVFP4_SCHEME_NONE ? 2 * k : k / 2 + k / 16;
        const size_t chunks = n * row_bytes < (size_t)nth * GEMV_CHUNKS * GEMV_TILE_MIN
                                  ? GEMV_CHUNKS / 2 : GEMV_CHUNKS;
        rt = (n + (size_t)nth * chunks - 1) / ((size_t)nth * chunks);
        rt = rt < 16 ? 16 : (rt + 15) / 16 * 16;
    } else if (m <= TOK_TILE) {
        rt = 16;
    } else {
        /* 512 KB of NVFP4 (or 1 MB of bf16) weights per tile, and at least
         * GEMM_TILES_PER_THREAD tiles a thread where the rows allow: each
         * tile holds all m tokens, so SmolLM2's [576, 576] made 3 tiles of
         * 256 rows, 2 for one thread and 1 for the other (perf of a
         * 2-thread prefill: 28.7 % of the samples in one thread's AMX
         * kernel, 21.9 % in the other's) */
        size_t row_bytes = w->d.scheme == NVFP4_SCHEME_NONE ? 2 * k : k / 2 + k / 16;
        const size_t tiles = (size_t)nth * GEMM_TILES_PER_THREAD;
        const size_t even = ((n + tiles - 1) / tiles + 7) / 8 * 8;

        rt = 512 * 1024 / (row_bytes + 1);
        rt = rt > 256 ? 256 : rt;
        rt = nth > 1 && rt > even ? even : rt;
        rt = rt < 8 ? 8 : rt;
#ifdef CPU_AMX
        if (path == PATH_AMX)
            rt = rt < 16 ? 16 : rt / 16 * 16; /* whole groups of 16 rows */
#endif
    }
    {
        const tiles_job j = {path, packed, spread, w, x, a, nch, m, units, ku, rt, y};
        *jo = j;
    }
    return (n + rt - 1) / rt;
}

/* The tiles of several products in one parallel loop: item i is tile i -
 * first[p] of job p, first[p] <= i < first[p + 1]. */
typedef struct {
    const tiles_job *job;
    const size_t *first;
    size_t count;
} multi_tiles_job;

static void multi_tiles_range(void *arg, size_t i0, size_t i1, int slot)
{
    const multi_tiles_job *mj = arg;

    for (size_t p = 0; p < mj->count && i0 < i1; p++) {
        const size_t f = mj->first[p], e = mj->first[p + 1];

        if (i0 >= e)
            continue;
        tiles_range((void *)&mj->job[p], i0 - f, (i1 < e ? i1 : e) - f, slot);
        i0 = i1 < e ? i1 : e;
    }
}

/* The products of COUNT weights W[i] of one prepared input X into Y[i], all
 * their tiles in one parallel loop (one wake-up of the workers for a
 * layer's q, k and v at decode). */
static void run_tiles_n(cpu_ctx *ctx, int path, cpu_kweight *const *w, size_t count,
                        const float *x, int packed, const act_q8 *a, size_t nch, size_t m,
                        int nth, float *const *y)
{
    tiles_job job[NVFP4K_CPU_MULTI_MAX];
    size_t first[NVFP4K_CPU_MULTI_MAX + 1];
    multi_tiles_job mj = {job, first, count};

    first[0] = 0;
    for (size_t i = 0; i < count; i++)
        first[i + 1] = first[i] + plan_tiles(path, w[i], x, packed, a, nch, m, nth, y[i],
                                             &job[i]);
    if (count == 1)
        nvfp4k_cpu_par(ctx, first[1], nth, tiles_range, &job[0]);
    else
        nvfp4k_cpu_par(ctx, first[count], nth, multi_tiles_range, &mj);
}

/* Rows ahead of the one running whose stretch the GEMM loop prefetches
 * (into L1, or L2 on AMD: CPU_PF). */
#define STRETCH_AHEAD 4

/* The GEMM loop walks a tile's rows stretch by stretch, so each row's
 * stretch (2 KB of bf16 weights, 768 bytes of NVFP4) is a stream of its own
 * on the first pass, too short for the hardware prefetchers to ramp up:
 * latency-bound, a few times the read probe's time for small m.  Ask for
 * row R's stretch KR while an earlier row runs. */
static inline void prefetch_stretch(const cpu_kweight *w, int path, size_t r, const krange *kr)
{
    const size_t k = (size_t)w->d.k, nb = k / NVFP4_BLOCK;
    const char *p, *s = NULL;
    size_t len, slen = 0;

    if (path <= PATH_DENSE_AVX512) {
        int64_t lr;
        const cpu_dense_part *d = dense_row(w, (int64_t)r, &lr);
        const size_t esz = d->dtype == NVFP4_DTYPE_F32 ? 4 : 2;
        const size_t i1 = 16 * kr->b1 < k ? 16 * kr->b1 : k;

        p = (const char *)d->data + ((size_t)lr * k + 16 * kr->b0) * esz;
        len = (i1 - 16 * kr->b0) * esz;
    } else {
        /* a unit is a chunk of 16 blocks (VNNI) or one block */
        const size_t ub = path >= PATH_VNNI ? CPU_CHUNK_BLOCKS : 1;
        const size_t b0 = ub * kr->b0, b1 = ub * kr->b1 < nb ? ub * kr->b1 : nb;

        p = (const char *)w->packed + r * (k / 2) + 8 * b0;
        len = 8 * (b1 - b0);
        s = (const char *)w->scales + r * nb + b0;
        slen = b1 - b0;
    }
    for (size_t o = 0; o < len; o += 64)
        CPU_PF_LINE(p + o);
    for (size_t o = 0; o < slen; o += 64)
        CPU_PF_LINE(s + o);
}

/* Before rows R .. R+CNT-1 of a tile ending at R1 run: the stretches of
 * the rows STRETCH_AHEAD further on that the tile holds. */
static inline void prefetch_ahead(const cpu_kweight *w, int path, size_t r, size_t cnt,
                                  size_t r1, const krange *kr)
{
    for (size_t q = r + STRETCH_AHEAD; q < r + STRETCH_AHEAD + cnt && q < r1; q++)
        prefetch_stretch(w, path, q, kr);
}

/* Tiles TILE0 .. TILE1-1 of a tiles_job (any thread: nvfp4k_cpu_par()). */
static void tiles_range(void *arg, size_t tile0, size_t tile1, int slot)
{
    const tiles_job *j = arg;
    const int path = j->path, packed = j->packed;
    const cpu_kweight *w = j->w;
    const float *x = j->x;
    const act_q8 *a = j->a;
    const size_t nch = j->nch, m = j->m, units = j->units, ku = j->ku, rt = j->rt;
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n;
    float *y = j->y;

    (void)slot;
    (void)k;
#ifdef CPU_AMX
    if (path == PATH_AMX) {
        amx_range(j, tile0, tile1);
        return;
    }
#endif
    {
        for (size_t tile = tile0; tile < tile1; tile++) {
            const size_t r0 = tile * rt, r1 = r0 + rt < n ? r0 + rt : n;
#ifdef CPU_X86
            /* dense, up to DENSE_SPREAD_MAX_M tokens: rows r, r + q,
             * r + 2q, r + 3q of a tile of 4q rows together, four sequential
             * streams (dense_gemv4_body, dense_spread_body); neighbouring
             * rows, one stream jumping 2k-4k bytes between them, read at
             * 0.64-0.75 of the probe on Zen 4, and the 16-row tiles of
             * small batches at 2.1 (B = 2) and 2.7 (B = 4) times the
             * probe's time for the bf16 head, now 1.4 and 2.1 */
            if (m <= DENSE_SPREAD_MAX_M && path == PATH_DENSE_AVX512 && (m > 1 || !packed) &&
                (r1 - r0) % DENSE_GEMV_ROWS == 0 && r1 - r0 >= 2 * DENSE_GEMV_ROWS) {
                int64_t dl, l1;
                const cpu_dense_part *dp = dense_row(w, (int64_t)r0, &dl);
                if (dense_row(w, (int64_t)r1 - 1, &l1) == dp) {
                    const size_t sp = (r1 - r0) / DENSE_GEMV_ROWS;
                    for (size_t r = r0; r < r0 + sp; r++, dl++)
                        for (size_t u0 = 0; u0 < units; u0 += ku) {
                            krange kr = {u0, u0 + ku < units ? u0 + ku : units, u0 > 0, packed};
                            if (m == 1)
                                dense_gemv4_avx512(w, dp, (int64_t)r, dl, sp, x, &kr, y);
                            else
                                for (size_t t0 = 0; t0 < m; t0 += 4)
                                    dense_spread_avx512(w, dp, (int64_t)r, dl, sp, x, t0, &kr,
                                                        m - t0 < 4 ? m - t0 : 4, y);
                        }
                    continue;
                }
            }
            /* NVFP4 as four streams, rows r, r + q, r + 2q, r + 3q of a
             * tile of 4q rows, each through all its stretches before the
             * next.  One token (gemv_spread) on the 4-row GEMVs: four
             * neighbouring rows (one stream jumping k/2 bytes between them)
             * had read at 0.64-0.79 of the probe (W4A16) and 0.82-0.88
             * (W4A4 [16384, 2048], [4096, 14336]) on a Xeon with AMX, 1
             * thread; as four streams 0.85-1.0 and 0.98-1.03.  2-8 tokens
             * (batch_spread) as two 2-row calls, instead of 16-row tiles
             * walked stretch by stretch (each row's stretch a short stream
             * of its own): W4A4 [16384, 2048], 1 thread, B = 2 1.70 -> 1.27
             * ms, B = 4 2.25 -> 1.50.  Per output the operations of the
             * one-row kernel, so no bit moves. */
            if (j->spread && (r1 - r0) % GEMV_ROWS == 0 && r1 - r0 >= 2 * GEMV_ROWS) {
                const size_t sp = (r1 - r0) / GEMV_ROWS;
                for (size_t r = r0; r < r0 + sp; r++)
                    for (size_t u0 = 0; u0 < units; u0 += ku) {
                        krange kr = {u0, u0 + ku < units ? u0 + ku : units, u0 > 0, packed};
                        const int64_t r2 = (int64_t)(r + 2 * sp);
                        if (m == 1 && path == PATH_VNNI)
                            gemv4_vnni(w, (int64_t)r, sp, a, nch, &kr, y);
                        else if (m == 1)
                            gemv_lut_avx512(w, (int64_t)r, sp, x, &kr, y);
                        else if (path == PATH_VNNI) {
                            row2_vnni(w, (int64_t)r, sp, a, nch, 0, &kr, m, y);
                            row2_vnni(w, r2, sp, a, nch, 0, &kr, m, y);
                        } else {
                            row2_avx512(w, (int64_t)r, sp, x, 0, &kr, m, y);
                            row2_avx512(w, r2, sp, x, 0, &kr, m, y);
                        }
                    }
                continue;
            }
#endif
            if (m == 1) {
                /* One token: the same stretches, but each row (or group of
                 * four) runs through all of them before the next, so that
                 * rows stream from memory one after the other; the partial
                 * sums reach y in the same order as in the GEMM. */
                for (size_t r = r0; r < r1;) {
                    size_t g = 1;
#ifdef CPU_X86
                    /* the float kernel's single accumulator per row is
                     * latency-bound alone: four rows at every k */
                    const cpu_dense_part *dp = NULL;
                    int64_t dl = 0;

                    if (path == PATH_AVX512 && r + GEMV_ROWS <= r1)
                        g = GEMV_ROWS;
                    else if (path == PATH_DENSE_AVX512 && !packed && r + DENSE_GEMV_ROWS <= r1) {
                        int64_t l1;
                        dp = dense_row(w, (int64_t)r, &dl);
                        if (dense_row(w, (int64_t)r + DENSE_GEMV_ROWS - 1, &l1) == dp)
                            g = DENSE_GEMV_ROWS; /* four rows of one part */
                    } else if (path == PATH_VNNI && k <= GEMV4_MAX_K && r + GEMV_ROWS <= r1)
                        g = GEMV_ROWS;
#endif
                    for (size_t u0 = 0; u0 < units; u0 += ku) {
                        krange kr = {u0, u0 + ku < units ? u0 + ku : units, u0 > 0, packed};
#ifdef CPU_X86
                        if (g == GEMV_ROWS && path == PATH_AVX512)
                            gemv_lut_avx512(w, (int64_t)r, 1, x, &kr, y);
                        else if (g == DENSE_GEMV_ROWS && path == PATH_DENSE_AVX512)
                            dense_gemv4_avx512(w, dp, (int64_t)r, dl, 1, x, &kr, y);
                        else if (g == GEMV_ROWS)
                            gemv4_vnni(w, (int64_t)r, 1, a, nch, &kr, y);
                        else
#endif
                            row_call(path, w, (int64_t)r, x, a, nch, 0, &kr, 1, y);
                    }
                    r += g;
                }
                continue;
            }
            for (size_t t0 = 0; t0 < m; t0 += TOK_TILE) {
                const size_t nt = m - t0 < TOK_TILE ? m - t0 : TOK_TILE;
                for (size_t u0 = 0; u0 < units; u0 += ku) {
                    krange kr = {u0, u0 + ku < units ? u0 + ku : units, u0 > 0, packed};
                    /* later token tiles find the stretch in L2 */
                    const int pf = t0 == 0;
                    size_t r = r0;

                    if (pf) /* the first rows; each call below asks for those ahead */
                        for (size_t q = r0; q < r0 + STRETCH_AHEAD && q < r1; q++)
                            prefetch_stretch(w, path, q, &kr);
#ifdef CPU_X86
                    if (path == PATH_AVX512 && packed)
                        for (; r + 1 < r1; r += 2) {
                            if (pf)
                                prefetch_ahead(w, path, r, 2, r1, &kr);
                            row2_avx512(w, (int64_t)r, 1, x, t0, &kr, nt, y);
                        }
                    if (path == PATH_VNNI)
                        for (; r + 1 < r1; r += 2) {
                            if (pf)
                                prefetch_ahead(w, path, r, 2, r1, &kr);
                            row2_vnni(w, (int64_t)r, 1, a, nch, t0, &kr, nt, y);
                        }
                    if (path == PATH_DENSE_AVX512 && packed)
                        while (r + 1 < r1) {
                            int64_t l0, l1;
                            const cpu_dense_part *p0 = dense_row(w, (int64_t)r, &l0);
                            if (dense_row(w, (int64_t)r + 1, &l1) != p0)
                                break; /* a pair across fused parts: one by one */
                            if (pf)
                                prefetch_ahead(w, path, r, 2, r1, &kr);
                            dense_row2(w, p0, (int64_t)r, l0, x, t0, &kr, nt, y);
                            r += 2;
                        }
#endif
                    for (; r < r1; r++) {
                        if (pf)
                            prefetch_ahead(w, path, r, 1, r1, &kr);
                        row_call(path, w, (int64_t)r, x, a, nch, t0, &kr, nt, y);
                    }
                }
            }
        }
    }
}

#ifdef CPU_AMX
/* The VNNI GEMM loop of tiles_range for tokens M0 .. M1-1 (M0 a multiple of
 * 8) and rows R0 .. R1-1: the AMX path's tails. */
static void vnni_rows(const tiles_job *j, size_t m0, size_t m1, size_t r0, size_t r1)
{
    for (size_t t0 = m0; t0 < m1; t0 += TOK_TILE) {
        const size_t nt = m1 - t0 < TOK_TILE ? m1 - t0 : TOK_TILE;
        for (size_t u0 = 0; u0 < j->units; u0 += j->ku) {
            krange kr = {u0, u0 + j->ku < j->units ? u0 + j->ku : j->units, u0 > 0, 0};
            size_t r = r0;
            if (nt == TOK_TILE)
                for (; r + 1 < r1; r += 2)
                    row2_vnni(j->w, (int64_t)r, 1, j->a, j->nch, t0, &kr, nt, j->y);
            for (; r < r1; r++)
                row_vnni(j->w, (int64_t)r, j->a, j->nch, t0, &kr, nt, j->y);
        }
    }
}

/* Row tiles TILE0 .. TILE1-1 on the tile unit: a tile's B tiles (every
 * group of 16 rows) unpacked once into this thread's buffer (about 1 MB,
 * L2-sized: run_tiles' tiles hold 512 KB of NVFP4 weights, 20 bytes per 9
 * here), then per group of 16 tokens and stretch, every row group in turn,
 * so that the A tiles of the stretch stay in L1.  The rest on the VNNI kernels.  Same
 * stretches, same bits. */
static void amx_range(const tiles_job *j, size_t tile0, size_t tile1)
{
    const cpu_kweight *w = j->w;
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n, nb = k / NVFP4_BLOCK;
    const size_t m = j->m, mt = m / AMX_T * AMX_T, nch = j->nch, rt = j->rt;
    const size_t pbytes = nb * 256 + nb * 16 * sizeof(float); /* one group of 16 rows */
    /* amx_tile16 takes stretches of at most 6 chunks (its AMX_STEPs) */
    int8_t *bp = j->ku <= 6 ? nvfp4k_cpu_aligned_alloc(rt / AMX_T * pbytes) : NULL;

    if (!bp) {
        /* no buffer: the VNNI kernels, same bits, where the tokens have
         * their VNNI codes; else linear_run reports it */
        if (j->a->vnni0 == 0)
            vnni_rows(j, 0, m, tile0 * rt, tile1 * rt < n ? tile1 * rt : n);
        else
            __atomic_store_n(j->a->amx_failed, (int64_t)n, __ATOMIC_RELAXED);
        return;
    }
    amx_begin();
    for (size_t tile = tile0; tile < tile1; tile++) {
        const size_t r0 = tile * rt, r1 = r0 + rt < n ? r0 + rt : n;
        const size_t ra = r0 + (r1 - r0) / AMX_T * AMX_T, np = (ra - r0) / AMX_T;

        for (size_t p = 0; p < np; p++)
            amx_pack_b(w, (int64_t)(r0 + p * AMX_T), bp + p * pbytes,
                       (float *)(void *)(bp + p * pbytes + nb * 256));
        AMX_BARRIER();
        for (size_t t0 = 0; t0 < mt; t0 += AMX_T)
            for (size_t u0 = 0; u0 < j->units; u0 += j->ku) {
                krange kr = {u0, u0 + j->ku < j->units ? u0 + j->ku : j->units, u0 > 0, 0};
                for (size_t p = 0; p < np; p++)
                    amx_tile16(j->a->aq + t0 / AMX_T * nb * AMX_T * 16, bp + p * pbytes,
                               (const float *)(const void *)(bp + p * pbytes + nb * 256),
                               j->a->xs + t0 * nch * CPU_CHUNK_BLOCKS, nch, nb, &kr,
                               j->y + t0 * n + r0 + p * AMX_T, n);
            }
        if (mt < m)
            vnni_rows(j, mt, m, r0, ra);
        if (ra < r1)
            vnni_rows(j, 0, m, ra, r1);
    }
    amx_end();
    free(bp);
}
#endif

static nvfp4_status linear_run_n(cpu_ctx *ctx, cpu_kweight *const *ws,
                                 const nvfp4_kweight_desc *const *descs, size_t count,
                                 const float *x, size_t m, float *const *ys, int nthreads,
                                 nvfp4_error *err);

static nvfp4_status linear_run(cpu_ctx *ctx, cpu_kweight *w, const nvfp4_kweight_desc *desc,
                               const float *x, size_t m, float *y, int nthreads,
                               nvfp4_error *err)
{
    return linear_run_n(ctx, &w, &desc, 1, x, m, &y, nthreads, err);
}

/* Products choose between one thread and all of them.  On a quiet machine
 * (the pool's last look: nvfp4k_cpu_pool_busy) all, from
 * CPU_LINEAR_PAR_MIN_QUIET multiply-adds up: a second worker doubles the
 * bandwidth and the FLOPS.  Timing both there misled: while the calls ran
 * on one thread the worker went to sleep, so the calls on two woke it and
 * measured slower than one thread, and SmolLM2's GEMVs stayed on one
 * (2-thread decode 167-182 tok/s, 209-228 with all threads).  On a busy
 * machine a second worker can cost more than it brings (each parallel
 * region waits until it gets a core): there products from
 * CPU_LINEAR_PAR_MIN up measure both.  Each weight keeps a smoothed time per
 * choice for one token and per token for more, runs on the faster and
 * tries the other one call in CPU_RUN_EXPLORE (8 times less often when
 * it measured more than twice as slow) to follow the machine's load.
 * Results do not depend on the thread count (every output is one thread's
 * sum in a fixed order), so the choice changes no bit. */
#define CPU_RUN_EXPLORE 32

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int run_pick(cpu_kweight *w, int kind)
{
    const uint64_t c = __atomic_fetch_add(&w->run_calls[kind], 1, __ATOMIC_RELAXED);
    const uint64_t t1 = __atomic_load_n(&w->run_ns[kind][0], __ATOMIC_RELAXED);
    const uint64_t tn = __atomic_load_n(&w->run_ns[kind][1], __ATOMIC_RELAXED);
    uint64_t period;
    int best;

    if (!t1 || !tn)
        return t1 ? 1 : 0; /* measure each once first */
    best = tn < t1;
    period = (best ? t1 > 2 * tn : tn > 2 * t1) ? 8 * CPU_RUN_EXPLORE : CPU_RUN_EXPLORE;
    return c % period == period - 1 ? !best : best;
}

static void run_note(cpu_kweight *w, int kind, int choice, uint64_t ns)
{
    uint64_t old = __atomic_load_n(&w->run_ns[kind][choice], __ATOMIC_RELAXED);
    /* 1/4 of the new sample: a few calls follow a change of load */
    uint64_t v = old ? old - old / 4 + ns / 4 : ns;
    __atomic_store_n(&w->run_ns[kind][choice], v ? v : 1, __ATOMIC_RELAXED);
}

nvfp4_status nvfp4k_cpu_linear(void *vctx, void *kw, const nvfp4_kweight_desc *desc,
                        const float *x, size_t m, float *y, nvfp4_error *err)
{
    cpu_ctx *ctx = vctx;
    const int all = nvfp4k_cpu_nthreads(ctx), kind = m > 1;
    nvfp4_status st;
    uint64_t t0;
    int choice;

    const double work = (double)m * (double)desc->n * (double)desc->k;

    if (all <= 1 || work < CPU_LINEAR_PAR_MIN_QUIET)
        return linear_run(ctx, kw, desc, x, m, y, 1, err);
    if (!nvfp4k_cpu_pool_busy(ctx))
        return linear_run(ctx, kw, desc, x, m, y, all, err);
    if (work < CPU_LINEAR_PAR_MIN)
        return linear_run(ctx, kw, desc, x, m, y, 1, err);
    choice = run_pick(kw, kind);
    t0 = mono_ns();
    st = linear_run(ctx, kw, desc, x, m, y, choice ? all : 1, err);
    run_note(kw, kind, choice, (mono_ns() - t0) / (m ? m : 1));
    return st;
}

/* Whether weights A and B prepare one input alike (linear_run_n): the same
 * scheme and layout, and for W4A4 (or a dequantized W4A4 shard) the same
 * input scale, so the same §5 codes and factors. */
static int linear_shares(const struct nvfp4_kweight *a, const struct nvfp4_kweight *b)
{
    const cpu_kweight *wa = a->impl, *wb = b->impl;

    return a->desc.scheme == b->desc.scheme && wa->layout == wb->layout &&
           a->desc.k == b->desc.k &&
           memcmp(&a->desc.input_gs, &b->desc.input_gs, sizeof(float)) == 0 &&
           (a->desc.input_scale > 0.0f) == (b->desc.input_scale > 0.0f);
}

/* Several weights of one input (nvfp4_k_linear_multi): runs of weights that
 * share their activations' preparation (linear_shares) prepare it once.
 * The thread choice is nvfp4k_cpu_linear's over the run's work; on a busy
 * machine, where that choice is each weight's own timing, each weight runs
 * alone.  Each output is the bits of its own nvfp4k_cpu_linear call: the
 * preparation and each weight's tiles are the same computations. */
nvfp4_status nvfp4k_cpu_linear_multi(void *vctx, const struct nvfp4_kweight *const *w,
                                     size_t count, const float *x, size_t m, float *const *y,
                                     nvfp4_error *err)
{
    cpu_ctx *ctx = vctx;
    const int all = nvfp4k_cpu_nthreads(ctx);
    cpu_kweight *kw[NVFP4K_CPU_MULTI_MAX];
    const nvfp4_kweight_desc *kd[NVFP4K_CPU_MULTI_MAX];
    size_t i = 0;

    while (i < count) {
        size_t c = 1;
        double work = (double)w[i]->desc.n;
        nvfp4_status st;

        while (i + c < count && c < NVFP4K_CPU_MULTI_MAX && linear_shares(w[i], w[i + c]))
            work += (double)w[i + c++]->desc.n;
        work *= (double)m * (double)w[i]->desc.k;
        if (c == 1 || (all > 1 && work >= CPU_LINEAR_PAR_MIN_QUIET &&
                       nvfp4k_cpu_pool_busy(ctx))) {
            for (size_t e = i; e < i + c; e++)
                if ((st = nvfp4k_cpu_linear(vctx, w[e]->impl, &w[e]->desc, x, m, y[e], err)) !=
                    NVFP4_OK)
                    return st;
        } else {
            for (size_t e = 0; e < c; e++) {
                kw[e] = w[i + e]->impl;
                kd[e] = &w[i + e]->desc;
            }
            st = linear_run_n(ctx, kw, kd, c, x, m, y + i,
                              all <= 1 || work < CPU_LINEAR_PAR_MIN_QUIET ? 1 : all, err);
            if (st != NVFP4_OK)
                return st;
        }
        i += c;
    }
    return NVFP4_OK;
}

/* The per-token steps of a product (any thread: nvfp4k_cpu_par()). */
enum { PREP_QDQ_REF, PREP_QDQ_AVX512, PREP_Q8, PREP_BIAS };

typedef struct {
    int kind;
    const float *x;
    size_t k;
    float gs;
    float *out;          /* QDQ: [m, k]; BIAS: y [m, n] */
    const act_q8 *a;     /* Q8 */
    size_t kp, nch;
    const float *bias;
    size_t n;
    size_t m;            /* Q8: the call's tokens */
} prep_job;

static void prep_range(void *arg, size_t t0, size_t t1, int slot)
{
    const prep_job *j = arg;
    const size_t k = j->k;

    (void)slot;
    for (size_t t = t0; t < t1; t++) {
        switch (j->kind) {
        case PREP_BIAS:
            for (size_t r = 0; r < j->n; r++)
                j->out[t * j->n + r] += j->bias[r];
            break;
#ifdef CPU_X86
        case PREP_Q8:
            /* tokens of whole groups of AMX_T also write their A tiles'
             * rows (a.aq: m / AMX_T groups); those before vnni0 only them */
            quantize_row_q8(j->x + t * k, k, j->gs,
                            t < j->a->vnni0 ? NULL : j->a->q + t * j->kp,
                            j->a->xs + t * j->nch * CPU_CHUNK_BLOCKS,
                            t < j->a->vnni0 ? NULL : j->a->corr + t * j->nch * CPU_CHUNK_BLOCKS,
                            j->a->aq && t < j->m / AMX_A_TOKENS * AMX_A_TOKENS
                                ? j->a->aq + t / AMX_A_TOKENS * (k / NVFP4_BLOCK) * AMX_A_BLOCK +
                                      t % AMX_A_TOKENS * NVFP4_BLOCK
                                : NULL);
            break;
        case PREP_QDQ_AVX512:
            qdq_row_avx512(j->x + t * k, k, j->gs, j->out + t * k);
            break;
#endif
        case PREP_QDQ_REF:
            nvfp4_quant_qdq_row_gs(j->x + t * k, k, j->gs, j->out + t * k);
            break;
        default:
            break;
        }
    }
}

/* The next 64-byte aligned piece of BYTES (none: NULL) of a call's scratch
 * BASE; with BASE NULL it only counts the size in *OFF */
static void *carve(unsigned char *base, size_t *off, size_t bytes)
{
    void *p = base && bytes ? base + *off : NULL;

    *off += (bytes + 63) & ~(size_t)63;
    return p;
}

/* The products of COUNT weights of one input X whose activations are
 * prepared alike (linear_shares: the first one's scheme, layout and input
 * scales): the preparation once, then each weight's tiles and bias. */
static nvfp4_status linear_run_n(cpu_ctx *ctx, cpu_kweight *const *ws,
                                 const nvfp4_kweight_desc *const *descs, size_t count,
                                 const float *x, size_t m, float *const *ys, int nthreads,
                                 nvfp4_error *err)
{
    cpu_kweight *const w = ws[0];
    const nvfp4_kweight_desc *const desc = descs[0];
    const size_t k = (size_t)desc->k, nch = chunks_of(desc->k);
    const size_t kp = nch * CPU_CHUNK;
    const int nth = nthreads; /* nvfp4k_cpu_linear's choice */
    const cpu_isa isa = ctx->isa;
    const size_t s_x = m * k * sizeof(float),
                 s_xp = (m + 7) / 8 * (k / 16) * 128 * sizeof(float);
    /* the pieces this call needs (bytes; 0: not needed) */
    size_t s_tmp = 0, s_pack = 0, s_q = 0, s_xs = 0, s_corr = 0, s_aq = 0, need = 0;
    float *tmp, *xp;
    act_q8 a;
    const float *xin = x;
    unsigned char *buf;
    int path, locked = 0;
    int64_t amx_failed = 0;

    if (desc->scheme == NVFP4_SCHEME_NONE) {
        path = isa >= CPU_ISA_AVX512 ? PATH_DENSE_AVX512 : PATH_DENSE_SCALAR;
        /* dequantized W4A4 shards (registry.c): §5 first, as below */
        s_tmp = desc->input_scale > 0.0f ? s_x : 0;
        s_pack = path == PATH_DENSE_AVX512 && m > 1 && k % 16 == 0 ? s_xp : 0;
    } else if (w->layout == CPU_LAYOUT_CHUNK) {
        path = PATH_VNNI;
        s_q = m * kp;
        s_xs = m * nch * CPU_CHUNK_BLOCKS * sizeof(float);
        s_corr = m * nch * CPU_CHUNK_BLOCKS * sizeof(int32_t);
#ifdef CPU_AMX
        if (isa >= CPU_ISA_AMX && m >= AMX_MIN_TOKENS) {
            path = PATH_AMX;
            s_aq = m / AMX_T * (k / NVFP4_BLOCK) * AMX_T * 16;
        }
#endif
    } else {
        path = isa >= CPU_ISA_AVX512 ? PATH_AVX512
               : isa == CPU_ISA_AVX2 ? PATH_AVX2
                                     : PATH_SCALAR;
        s_tmp = desc->scheme == NVFP4_SCHEME_W4A4 ? s_x : 0;
        s_pack = m > 1 && path != PATH_SCALAR ? s_xp : 0;
    }
    (void)carve(NULL, &need, s_tmp);
    (void)carve(NULL, &need, s_pack);
    (void)carve(NULL, &need, s_q);
    (void)carve(NULL, &need, s_xs);
    (void)carve(NULL, &need, s_corr);
    (void)carve(NULL, &need, s_aq);
    /* a GEMV of float activations needs none */
    buf = need ? nvfp4k_cpu_scratch_get(&ctx->act_scratch, need, &locked) : NULL;
    if (need && !buf) {
        nvfp4k_cpu_scratch_put(&ctx->act_scratch, buf, locked);
        return nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", "linear", -1,
                               "out of memory for the activations of %zu tokens x %zu", m, k);
    }
    need = 0;
    tmp = carve(buf, &need, s_tmp); /* (all NULL when buf is) */
    xp = carve(buf, &need, s_pack);
    a.q = carve(buf, &need, s_q);
    a.xs = carve(buf, &need, s_xs);
    a.corr = carve(buf, &need, s_corr);
    a.aq = carve(buf, &need, s_aq);
    /* The AMX kernel takes the tokens of whole groups of AMX_T for rows of
     * whole groups of AMX_T (amx_range), all of them when n is a multiple:
     * those tokens need no VNNI codes (a third of quantize_row_q8's work) */
    a.vnni0 = 0;
#ifdef CPU_AMX
    if (path == PATH_AMX) {
        a.vnni0 = m / AMX_T * AMX_T;
        for (size_t i = 0; i < count; i++)
            if (descs[i]->n % AMX_T != 0)
                a.vnni0 = 0;
    }
#endif
    a.amx_failed = &amx_failed;

    if (tmp) {
        /* §5, then the float product: libquant's nvfp4_quant_qdq_row, or
         * the same arithmetic in AVX-512 (bit-identical, tested) */
        const int ref = desc->scheme == NVFP4_SCHEME_NONE || isa < CPU_ISA_AVX512;
        prep_job j = {ref ? PREP_QDQ_REF : PREP_QDQ_AVX512, x, k, desc->input_gs, tmp, &a, kp,
                      nch, NULL, 0, m};
        nvfp4k_cpu_par(ctx, m, nth, prep_range, &j);
        xin = tmp;
    }
    if (a.q) {
        /* (with a.aq the AMX A tiles too) */
        prep_job j = {PREP_Q8, x, k, desc->input_gs, NULL, &a, kp, nch, NULL, 0, m};
        nvfp4k_cpu_par(ctx, m, nth, prep_range, &j);
    }
    if (xp) {
        pack_x(xin, m, k, xp);
        xin = xp;
    }
    run_tiles_n(ctx, path, ws, count, xin, xp != NULL,
                desc->scheme == NVFP4_SCHEME_NONE ? NULL : &a,
                desc->scheme == NVFP4_SCHEME_NONE ? 0 : nch, m, nth, ys);
    if (buf)
        nvfp4k_cpu_scratch_put(&ctx->act_scratch, buf, locked);
    if ((amx_failed = __atomic_load_n(&amx_failed, __ATOMIC_RELAXED)) != 0)
        return nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", "linear", -1,
                               "out of memory for the AMX tiles of a product of %zu tokens x "
                               "%zu by a weight of %lld rows",
                               m, k, (long long)amx_failed);

    for (size_t i = 0; i < count; i++)
        if (ws[i]->bias) {
            prep_job j = {PREP_BIAS, NULL, 0, 0.0f, ys[i], &a, 0, 0, ws[i]->bias,
                          (size_t)descs[i]->n, m};
            nvfp4k_cpu_par(ctx, m, nth, prep_range, &j);
        }
    return NVFP4_OK;
}

/* ---- embedding ------------------------------------------------------------- */

nvfp4_status nvfp4k_cpu_embed(void *vctx, void *kw, const nvfp4_kweight_desc *desc,
                       const int32_t *ids, size_t m, float *y, nvfp4_error *err)
{
    cpu_kweight *w = kw;
    const size_t k = (size_t)desc->k;

    (void)vctx;
    (void)err;
    for (size_t i = 0; i < m; i++) {
        int64_t r = ids[i];
        size_t p = 0;

        while (p + 1 < w->nparts && r >= w->parts[p].n)
            r -= w->parts[p++].n;
        if (desc->scheme == NVFP4_SCHEME_NONE) {
            /* (the parts' data, or the copy) */
            for (size_t j = 0; j < k; j++)
                y[i * k + j] = dense_at(&w->dense[p], (size_t)r * k + j);
        } else {
            /* exactly §2, by libquant */
            nvfp4_quant_dequant_row(w->parts[p].weight + (size_t)r * (k / 2),
                                    w->parts[p].scales + (size_t)r * (k / NVFP4_BLOCK),
                                    desc->weight_scale_2, k, y + i * k);
        }
    }
    return NVFP4_OK;
}
