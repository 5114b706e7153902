/* SPDX-License-Identifier: MIT */
/* The CPU backend's Linear: NVFP4 (W4A16, W4A4) and unquantized weights.
 *
 * Dequantization is fused into the matrix products: the weight is never
 * expanded to float32 in memory.  At upload the packed E2M1 nibbles of each
 * row are repacked (same 4 bits per weight; the E4M3 block scales stay
 * bytes, so the kernels read 4.5 bits per weight) into one of two layouts:
 *
 * BLOCK (float kernels: W4A16, and W4A4 at isa=scalar and isa=avx512).  Groups of 8
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
 * CHUNK (the int8 W4A4 kernels: AVX-512 VNNI, and AVX2 where the CPU has
 *   no AVX-512: cpu-i8avx2.c, the same bits).  Chunks of 256 weights (16 blocks)
 *   in 128 bytes: step s = 0..3 covers elements 4s..4s+3 of every block;
 *   its byte i = 4j + e (block j, element 4s + e) is the low nibble (s even)
 *   or high nibble (s odd) of byte i of plane P(s/2), P0 then P1, 64 bytes
 *   each; a tail chunk of c < 16 blocks uses 4c bytes per plane.  With 4
 *   consecutive elements of one block per 32-bit lane, vpdpbusd sums exactly
 *   one block per lane: in W4A4 both operands lie on the E2M1 grid (§5), so
 *   the 16 products of a block form an exact integer and the two block
 *   scales are applied once per block in float32.  The AMX GEMM (W4A4
 *   prefill, isa=amx) unpacks these chunks into tiles per call and forms
 *   the same integers on the tile unit (see amx_tile16, cpu-amx.c).
 *
 * Outputs (rows) are partitioned across threads; every output is reduced by
 * one thread in a fixed order, so results do not depend on thread count.
 * The order is also the same for every m (batch invariance): one accumulator
 * per output and token in every kernel (GEMV, GEMM, paired rows), k walked in
 * the same stretches whose partial sums are added to y in k order, so a
 * token's outputs are the same bits alone or among any other tokens.
 *
 * This file holds the layouts' repacking, the upload, the product's driver
 * and the embedding; the kernels live in cpu-nvfp4.c (NVFP4 rows: scalar,
 * AVX2, AVX-512, VNNI, and the activation quantizer), cpu-amx.c (the AMX
 * GEMM) and cpu-dense.c (unquantized weights), and what they share in
 * cpu-linear.h.
 */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu-internal.h"
#include "numerics.h" /* §1 codecs, §5: libquant/numerics.h */
#include "cpu-linear.h"

/* Products of fewer multiply-adds than this run on one thread: waking a
 * second worker costs microseconds on an idle machine and milliseconds on
 * a busy one (nvfp4k_cpu_linear). */
#define CPU_LINEAR_PAR_MIN_QUIET (64.0 * 1024.0)
#define CPU_LINEAR_PAR_MIN (512.0 * 1024.0)

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

/* E4M3 byte -> float (§1), from numerics.h's decoder once; and the
 * prefetch distances (CPU_PREFETCH). */
float nvfp4k_cpu_e4m3_table[256];
#ifdef CPU_X86
size_t nvfp4k_cpu_pf1 = 4096, nvfp4k_cpu_pf4 = 8192;
int nvfp4k_cpu_pf_l2; /* PREFETCHT1 instead of T0 */
#endif
static size_t nvfp4k_cpu_l2_bytes; /* a core's L2, 0 where unknown */
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void cpu_tables_fill(void)
{
    for (int i = 0; i < 256; i++)
        nvfp4k_cpu_e4m3_table[i] = num_e4m3_value((uint32_t)i);
#ifdef CPU_X86
    __builtin_cpu_init();
    if (__builtin_cpu_is("amd")) {
        nvfp4k_cpu_pf1 = 8192;
        nvfp4k_cpu_pf4 = 16384;
        nvfp4k_cpu_pf_l2 = 1;
    } else if (__builtin_cpu_is("intel")) {
        nvfp4k_cpu_pf1 = 2048;
        nvfp4k_cpu_pf4 = 8192;
    }
#endif
#ifdef _SC_LEVEL2_CACHE_SIZE
    {
        const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        nvfp4k_cpu_l2_bytes = l2 > 0 ? (size_t)l2 : 0;
    }
#endif
}

void nvfp4k_cpu_tables_init(void)
{
    pthread_once(&tables_once, cpu_tables_fill);
}

/* ---- layouts ---------------------------------------------------------------- */

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
    /* the int8 kernels (VNNI, AMX; AVX2 below AVX-512) want their own
     * layout; every other path the BLOCK one */
    w->layout = desc->scheme == NVFP4_SCHEME_W4A4 && (((cpu_ctx *)ctx)->isa >= CPU_ISA_VNNI ||
                                                      ((cpu_ctx *)ctx)->isa == CPU_ISA_AVX2)
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
        /* asked for a copy: in 2 MiB pages (nvfp4k_cpu_lasting_alloc), which
         * a GEMV streams faster than the mapped file's 4 KiB ones; until it
         * is made, NULL (free(NULL) on a failure) */
        w->dense_copied = (desc->flags & NVFP4_KWEIGHT_COPY) != 0;
        for (size_t i = 0; i < nparts; i++) {
            w->dense[i].data = w->dense_copied ? NULL : parts[i].dense->data;
            w->dense[i].dtype = parts[i].dense->dtype;
            w->dense[i].rows = parts[i].n;
        }
        if (w->dense_copied) {
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
    w->scales = nvfp4k_cpu_lasting_alloc((size_t)desc->n * (k / NVFP4_BLOCK) + CPU_TAIL_PAD);
    if (!w->packed || !w->scales)
        goto nomem;
    memset(w->scales + (size_t)desc->n * (k / NVFP4_BLOCK), 0, CPU_TAIL_PAD);
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
        const int avx2 = ((cpu_ctx *)ctx)->isa == CPU_ISA_AVX2;

        for (int sb = 0; sb < 256; sb++) {
            const float bs = nvfp4k_cpu_e4m3_table[sb] * desc->weight_scale_2;
            for (int c = 0; c < 16; c++)
                w->wlut[16 * sb + c] = e2m1_f[c] * bs;
            /* at isa=avx2 (nvfp4k_cpu_gemv4_avx2: lut_half_avx2) entries
             * 8-15 are entries 0-7 with the code c xored into bits 28-30 */
            for (int c = 0; avx2 && c < 8; c++) {
                uint32_t u;
                memcpy(&u, &w->wlut[16 * sb + c], 4);
                u ^= (uint32_t)c << 28;
                memcpy(&w->wlut[16 * sb + 8 + c], &u, 4);
            }
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

/* Batches of up to this many tokens read a dense weight as four streams
 * (tiles_range), four tokens at a time. */
#define DENSE_SPREAD_MAX_M 8

/* Where the rows of a one-token tile are not spread as four streams (a
 * tile of fewer than 8 rows or not a multiple of 4: see tiles_range), the
 * VNNI kernel groups neighbouring rows of up to this many weights, where
 * the per-row set-up is a large share of the work; longer rows streamed
 * from DRAM measured faster one at a time (one sequential stream for the
 * prefetchers; its chunks' chains already overlap). */
#define GEMV4_MAX_K 2048

/* The dense paths first (path <= PATH_DENSE_AVX512 is a dense weight).
 * PATH_I8AVX2: the VNNI path's driver and layout on the AVX2 int8 kernels
 * (cpu-i8avx2.c); the paths from PATH_VNNI on take int8 activations
 * (act_q8) and walk k in chunks. */
enum { PATH_DENSE_SCALAR, PATH_DENSE_AVX2, PATH_DENSE_AVX512, PATH_SCALAR, PATH_AVX2,
       PATH_AVX512, PATH_VNNI, PATH_I8AVX2, PATH_AMX };

/* Whether PATH runs the int8 row kernels (VNNI or their AVX2 twins). */
static inline int i8_path(int path)
{
    return path == PATH_VNNI || path == PATH_I8AVX2;
}

static inline void row_call(int path, const cpu_kweight *w, int64_t r, const float *x,
                            const act_q8 *a, size_t nch, size_t t0, const krange *kr,
                            size_t nt, float *y)
{
    switch (path) {
#ifdef CPU_X86
    case PATH_DENSE_AVX2: nvfp4k_cpu_dense_row_avx2(w, r, x, t0, kr, nt, y); break;
    case PATH_DENSE_AVX512: nvfp4k_cpu_dense_row_avx512(w, r, x, t0, kr, nt, y); break;
    case PATH_AVX2: nvfp4k_cpu_row_avx2(w, r, x, t0, kr, nt, y); break;
    case PATH_AVX512: nvfp4k_cpu_row_avx512(w, r, x, t0, kr, nt, y); break;
    case PATH_VNNI: nvfp4k_cpu_row_vnni(w, r, a, nch, t0, kr, nt, y); break;
    case PATH_I8AVX2: nvfp4k_cpu_row_i8avx2(w, r, a, nch, t0, kr, nt, y); break;
#endif
    case PATH_DENSE_SCALAR: nvfp4k_cpu_dense_row_scalar(w, r, x, t0, kr, nt, y); break;
    default: nvfp4k_cpu_row_scalar(w, r, x, t0, kr, nt, y); break;
    }
    (void)a;
    (void)nch;
}

/* Whether a dense weight's path has the vector kernels (4-row GEMV, small
 * batches as four streams). */
static inline int dense_vec(int path)
{
    return path == PATH_DENSE_AVX2 || path == PATH_DENSE_AVX512;
}

#ifdef CPU_X86
static inline void dense_gemv4(int path, const cpu_kweight *w, const cpu_dense_part *p,
                               int64_t r, int64_t lr, size_t rs, const float *x,
                               const krange *kr, float *y)
{
    if (path == PATH_DENSE_AVX2)
        nvfp4k_cpu_dense_gemv4_avx2(w, p, r, lr, rs, x, kr, y);
    else
        nvfp4k_cpu_dense_gemv4_avx512(w, p, r, lr, rs, x, kr, y);
}

/* The int8 path's 4-row GEMV and 2-row kernel (i8_path). */
static inline void gemv4_i8(int path, const cpu_kweight *w, int64_t r, size_t rs,
                            const act_q8 *a, size_t nch, const krange *kr, float *y)
{
    if (path != PATH_I8AVX2) {
        if (range_ends_in4((size_t)w->d.k, kr))
            nvfp4k_cpu_gemv4t4_vnni(w, r, rs, a, nch, kr, y);
        else
            nvfp4k_cpu_gemv4_vnni(w, r, rs, a, nch, kr, y);
    } else if (range_ends_in4((size_t)w->d.k, kr))
        nvfp4k_cpu_gemv4t4_i8avx2(w, r, rs, a, nch, kr, y);
    else
        nvfp4k_cpu_gemv4_i8avx2(w, r, rs, a, nch, kr, y);
}

static inline void row2_i8(int path, const cpu_kweight *w, int64_t r, size_t rs,
                           const act_q8 *a, size_t nch, size_t t0, const krange *kr, size_t nt,
                           float *y)
{
    if (path == PATH_I8AVX2)
        nvfp4k_cpu_row2_i8avx2(w, r, rs, a, nch, t0, kr, nt, y);
    else
        nvfp4k_cpu_row2_vnni(w, r, rs, a, nch, t0, kr, nt, y);
}

/* Rows r + i * rs, i < 4, by NT tokens (row4_vnni on VNNI). */
static inline void row4_i8(int path, const cpu_kweight *w, int64_t r, size_t rs,
                           const act_q8 *a, size_t nch, size_t t0, const krange *kr, size_t nt,
                           float *y)
{
    if (path != PATH_I8AVX2)
        row4_vnni(w, r, rs, a, nch, t0, kr, nt, y);
    else {
        nvfp4k_cpu_row2_i8avx2(w, r, rs, a, nch, t0, kr, nt, y);
        nvfp4k_cpu_row2_i8avx2(w, r + 2 * (int64_t)rs, rs, a, nch, t0, kr, nt, y);
    }
}

/* row4_i8, and for one token t0 the GEMV on that token (the row kernels by
 * one token run a 2-token kernel's operations: [2048, 2048] by 9 tokens
 * took 1.7 times as long as by 8).  The GEMV's bits are the row kernels'
 * (batch invariance). */
static inline void row4_tok_i8(int path, const cpu_kweight *w, int64_t r, size_t rs,
                               const act_q8 *a, size_t nch, size_t t0, const krange *kr,
                               size_t nt, float *y)
{
    if (nt == 1) {
        /* token t0's codes, factors and offsets, as the kernels index them
         * (chunk tc = t0 * nch + ch) */
        act_q8 a1 = *a;

        a1.q += t0 * nch * CPU_CHUNK;
        a1.xs += t0 * nch * CPU_CHUNK_BLOCKS;
        a1.corr += t0 * nch * CPU_CHUNK_BLOCKS;
        gemv4_i8(path, w, r, rs, &a1, nch, kr, y + t0 * (size_t)w->d.n);
    } else
        row4_i8(path, w, r, rs, a, nch, t0, kr, nt, y);
}
#endif

/* The loop nest (cache blocking): threads take tiles of rows (outputs, so
 * no reduction is ever split between threads); inside a tile, tokens go by
 * tiles of 8 whose activations, walked in stretches of k, stay in L1 while
 * every row of the tile passes over them, and the tile's weights stay in
 * L2 while the token tiles pass (and the next tile's come into L2 beside
 * them: pf_next).  One token: GEMV_CHUNKS tiles of rows per thread (16 on
 * one thread), the activations of a whole row in L1 when they fit.  Int8
 * batches whose codes for a stretch fit in L1 (tokens_inner: up to 16
 * tokens at k >= 1536) read the rows as four streams and run every token
 * tile on a group of rows before the next group. */
/* Row tiles per thread of a one-token product on more than one thread,
 * and fewer when tiles would hold less than GEMV_TILE_MIN bytes (each
 * tile restarts a stream; on 2 threads of a Xeon, W4A4 [512, 2048] read at
 * 0.64-0.67 of the probe with 4 tiles per thread, 0.68-0.73 with 2). */
#define GEMV_CHUNKS 4
#define GEMV_TILE_MIN (128 * 1024)

/* One token on the 4-row NVFP4 GEMVs (the int8 gemv4 at every k,
 * nvfp4k_cpu_gemv_lut_avx512, nvfp4k_cpu_gemv4_avx2): rows r, r + q, r + 2q, r + 3q of a tile of 4q rows
 * together, as the dense GEMV does, with the one-thread product cut into
 * long tiles as on several threads (see tiles_range); not for products of
 * under GEMV_TILE_MIN bytes, whose streams would be a few rows long
 * (W4A16 [192, 576], 62 KB, 1 thread: 9.5-9.8 GB/s in 16-row tiles of
 * neighbours, 8.6-9.1 spread). */
static inline int gemv_spread(int path, const cpu_kweight *w)
{
    const size_t k = (size_t)w->d.k;

    return (i8_path(path) || path == PATH_AVX512 || path == PATH_AVX2) &&
           (size_t)w->d.n * (k / 2 + k / 16) >= GEMV_TILE_MIN;
}

/* An int8 batch's codes for one stretch (bytes) up to which tiles_range
 * runs every token tile of a group of rows before the next group: about
 * half of an L1 data cache, the rest for the weights and their scales. */
#define TOKENS_INNER_BYTES (24 * 1024)

/* the int8 stretch in chunks (plan_tiles) */
#define I8_STRETCH 6

/* Whether an int8 batch of M tokens takes the four-stream path with its
 * token tiles inner: at most two token tiles (3 and 4 at k = 576, whose
 * codes also fit, ran 3-8 % slower than in the GEMM loop) whose codes for
 * a stretch fit in TOKENS_INNER_BYTES. */
static inline int tokens_inner(int path, const cpu_kweight *w, size_t m)
{
    const size_t units = chunks_of(w->d.k);

    return i8_path(path) && m <= 2 * TOK_TILE &&
           m * (units < I8_STRETCH ? units : I8_STRETCH) * CPU_CHUNK_BLOCKS * NVFP4_BLOCK <=
               TOKENS_INNER_BYTES;
}

/* Batches of 2 .. TOK_TILE tokens on the 2-row NVFP4 kernels (the int8 row2,
 * nvfp4k_cpu_row2_avx512 on packed activations): the same four streams, two rows
 * RS apart per call (see tiles_range). */
static inline int batch_spread(int path, const cpu_kweight *w, size_t m, int packed)
{
    return m > 1 && ((m <= TOK_TILE && (i8_path(path) || (path == PATH_AVX512 && packed))) ||
                     tokens_inner(path, w, m));
}

/* Whether a call's NVFP4 tiles are read as four streams (tiles_range). */
static inline int nvfp4_spread(int path, const cpu_kweight *w, size_t m, int packed)
{
    return m == 1 ? gemv_spread(path, w) : batch_spread(path, w, m, packed);
}

/* the fewest row tiles of a multi-token product per thread (run_tiles) */
#define GEMM_TILES_PER_THREAD 3

static void tiles_range(void *arg, size_t tile0, size_t tile1, int slot);

/* The tiles of one product (its rows cut for NTH threads) into *JO; returns
 * their count. */
static size_t plan_tiles(int path, const cpu_kweight *w, const float *x, int packed,
                         const act_q8 *a, size_t nch, size_t m, int nth, float *y,
                         tiles_job *jo)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n;
    const size_t units = path >= PATH_VNNI ? chunks_of((int64_t)k) : (k + 15) / 16;
    const int spread = nvfp4_spread(path, w, m, packed);
    size_t ku, rt;

    /* Stretches of k whose partial sums are added to y one after the other:
     * the same for every m, so that a row sums in the same order in a GEMV
     * as in any GEMM (batch invariance; every kernel below keeps one
     * accumulator per output and token). */
    if (path >= PATH_VNNI)
        ku = I8_STRETCH;                      /* 8 tokens x 6 x 256 int8 = 12 KB */
    else
        ku = 64;                              /* 8 tokens x 1024 floats = 32 KB */
    if ((m == 1 && nth > 1) || (m <= DENSE_SPREAD_MAX_M && dense_vec(path)) || spread) {
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

/* The next row tile's weights, asked into L2 a share at a time while this
 * tile's token tiles run: the GEMM loop's first pass over a tile had waited
 * on memory (8 tokens of a bf16 row consume it faster than the probe reads)
 * and the later passes, from L2, left memory idle.  Up to two contiguous
 * byte ranges: NVFP4 codes and scales, or the dense part holding the tile's
 * first row. */
typedef struct {
    const char *p[2];
    size_t len[2], i, off, quota;
} pf_next;

/* pf_next asks for every fourth line: the L2's streamer, which a software
 * prefetch trains, fetches the others (each prefetch holds one of a core's
 * few L1 fill buffers until its line arrives, so prefetching every line
 * kept fewer lines in flight: bf16 [128256, 2048] by 16 tokens, 1 thread,
 * 103-104 ms a step with every line, 94-97 with every fourth, 96 with one
 * a 4 KB page) */
#define PF_NEXT_STRIDE 256

/* L2 sizes in tiles below which pf_next stays off */
#define PF_NEXT_L2_TILES 3

static size_t pf_tile_bytes(const tiles_job *j)
{
    const cpu_kweight *w = j->w;
    const size_t k = (size_t)w->d.k;

    if (w->d.scheme != NVFP4_SCHEME_NONE)
        return j->rt * (k / 2 + k / NVFP4_BLOCK);
    return j->rt * k * (w->dense[0].dtype == NVFP4_DTYPE_F32 ? 4 : 2);
}

/* CALLS: the row-calls of this tile (passes x stretches x rows); each
 * pf_next_step for CNT rows asks for CNT shares. */
static void pf_next_init(pf_next *pn, const tiles_job *j, size_t r1, size_t calls)
{
    const cpu_kweight *w = j->w;
    const size_t n = (size_t)w->d.n, k = (size_t)w->d.k;
    const size_t q1 = r1 + j->rt < n ? r1 + j->rt : n;

    memset(pn, 0, sizeof(*pn));
    if (r1 >= n || calls == 0)
        return;
    /* this tile stays in L2 for its later token tiles: only where the L2
     * holds it, the next one and the activations (a Xeon's 2 MB, not Zen
     * 3's 512 KB) */
    if (nvfp4k_cpu_l2_bytes < PF_NEXT_L2_TILES * pf_tile_bytes(j))
        return;
    if (j->path <= PATH_DENSE_AVX512) {
        int64_t l0;
        const cpu_dense_part *d = dense_row(w, (int64_t)r1, &l0);
        const size_t esz = d->dtype == NVFP4_DTYPE_F32 ? 4 : 2;
        const size_t rows = (size_t)(d->rows - l0) < q1 - r1 ? (size_t)(d->rows - l0) : q1 - r1;

        pn->p[0] = (const char *)d->data + (size_t)l0 * k * esz;
        pn->len[0] = rows * k * esz;
    } else {
        pn->p[0] = (const char *)w->packed + r1 * (k / 2);
        pn->len[0] = (q1 - r1) * (k / 2);
        pn->p[1] = (const char *)w->scales + r1 * (k / NVFP4_BLOCK);
        pn->len[1] = (q1 - r1) * (k / NVFP4_BLOCK);
    }
    pn->quota = ((pn->len[0] + pn->len[1]) / calls + 64) & ~(size_t)63;
}

static inline void pf_next_step(pf_next *pn, size_t cnt)
{
    for (size_t left = cnt * pn->quota; left > 0 && pn->i < 2;) {
        if (pn->off >= pn->len[pn->i]) {
            pn->i++;
            pn->off = 0;
            continue;
        }
#ifdef CPU_X86
        _mm_prefetch(pn->p[pn->i] + pn->off, _MM_HINT_T1);
#else
        __builtin_prefetch(pn->p[pn->i] + pn->off, 0, 2);
#endif
        pn->off += PF_NEXT_STRIDE;
        left = left > PF_NEXT_STRIDE ? left - PF_NEXT_STRIDE : 0;
    }
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
        nvfp4k_cpu_amx_range(j, tile0, tile1);
        return;
    }
#endif
    {
        for (size_t tile = tile0; tile < tile1; tile++) {
            const size_t r0 = tile * rt, r1 = r0 + rt < n ? r0 + rt : n;
#ifdef CPU_X86
            /* dense, up to DENSE_SPREAD_MAX_M tokens: rows r, r + q,
             * r + 2q, r + 3q of a tile of 4q rows together, four sequential
             * streams (dense_gemv4_body, dense_spread_body; on AVX2 rows r,
             * r + q and r + 2q, r + 3q by two dense_row2_avx2 calls, which
             * convert a weight once for 4 tokens); neighbouring
             * rows, one stream jumping 2k-4k bytes between them, read at
             * 0.64-0.75 of the probe on Zen 4, and the 16-row tiles of
             * small batches at 2.1 (B = 2) and 2.7 (B = 4) times the
             * probe's time for the bf16 head, now 1.4 and 2.1 */
            if (m <= DENSE_SPREAD_MAX_M && dense_vec(path) && (m > 1 || !packed) &&
                (r1 - r0) % DENSE_GEMV_ROWS == 0 && r1 - r0 >= 2 * DENSE_GEMV_ROWS) {
                int64_t dl, l1;
                const cpu_dense_part *dp = dense_row(w, (int64_t)r0, &dl);
                if (dense_row(w, (int64_t)r1 - 1, &l1) == dp) {
                    const size_t sp = (r1 - r0) / DENSE_GEMV_ROWS;
                    for (size_t r = r0; r < r0 + sp; r++, dl++)
                        for (size_t u0 = 0; u0 < units; u0 += ku) {
                            krange kr = {u0, u0 + ku < units ? u0 + ku : units, u0 > 0, packed};
                            if (m == 1)
                                dense_gemv4(path, w, dp, (int64_t)r, dl, sp, x, &kr, y);
                            else if (path == PATH_DENSE_AVX2) {
                                nvfp4k_cpu_dense_row2_avx2(w, dp, (int64_t)r, dl, sp, x, 0,
                                                           &kr, m, y);
                                nvfp4k_cpu_dense_row2_avx2(w, dp, (int64_t)(r + 2 * sp),
                                                           dl + (int64_t)(2 * sp), sp, x, 0,
                                                           &kr, m, y);
                            } else if (m > 4 && packed) {
                                /* 5-8 tokens: a weight converted once for
                                 * all of them (the 4-row kernel by two
                                 * token groups converted each twice: a
                                 * third of its port work) */
                                nvfp4k_cpu_dense_row2(w, dp, (int64_t)r, dl, sp, x, 0, &kr, m,
                                                      y);
                                nvfp4k_cpu_dense_row2(w, dp, (int64_t)(r + 2 * sp),
                                                      dl + (int64_t)(2 * sp), sp, x, 0, &kr, m,
                                                      y);
                            } else
                                for (size_t t0 = 0; t0 < m; t0 += 4)
                                    nvfp4k_cpu_dense_spread_avx512(
                                        w, dp, (int64_t)r, dl, sp, x, t0, &kr,
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
                        if (m == 1 && i8_path(path))
                            gemv4_i8(path, w, (int64_t)r, sp, a, nch, &kr, y);
                        else if (m == 1 && path == PATH_AVX2)
                            nvfp4k_cpu_gemv4_avx2(w, (int64_t)r, sp, x, &kr, y);
                        else if (m == 1)
                            nvfp4k_cpu_gemv_lut_avx512(w, (int64_t)r, sp, x, &kr, y);
                        else if (i8_path(path))
                            for (size_t t0 = 0; t0 < m; t0 += TOK_TILE)
                                row4_tok_i8(path, w, (int64_t)r, sp, a, nch, t0, &kr,
                                            m - t0 < TOK_TILE ? m - t0 : TOK_TILE, y);
                        else {
                            nvfp4k_cpu_row2_avx512(w, (int64_t)r, sp, x, 0, &kr, m, y);
                            nvfp4k_cpu_row2_avx512(w, r2, sp, x, 0, &kr, m, y);
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

                    if ((path == PATH_AVX512 || path == PATH_AVX2) && r + GEMV_ROWS <= r1)
                        g = GEMV_ROWS;
                    else if (dense_vec(path) && !packed && r + DENSE_GEMV_ROWS <= r1) {
                        int64_t l1;
                        dp = dense_row(w, (int64_t)r, &dl);
                        if (dense_row(w, (int64_t)r + DENSE_GEMV_ROWS - 1, &l1) == dp)
                            g = DENSE_GEMV_ROWS; /* four rows of one part */
                    } else if (i8_path(path) && k <= GEMV4_MAX_K && r + GEMV_ROWS <= r1)
                        g = GEMV_ROWS;
#endif
                    for (size_t u0 = 0; u0 < units; u0 += ku) {
                        krange kr = {u0, u0 + ku < units ? u0 + ku : units, u0 > 0, packed};
#ifdef CPU_X86
                        if (g == GEMV_ROWS && path == PATH_AVX512)
                            nvfp4k_cpu_gemv_lut_avx512(w, (int64_t)r, 1, x, &kr, y);
                        else if (g == GEMV_ROWS && path == PATH_AVX2)
                            nvfp4k_cpu_gemv4_avx2(w, (int64_t)r, 1, x, &kr, y);
                        else if (g == DENSE_GEMV_ROWS && dense_vec(path))
                            dense_gemv4(path, w, dp, (int64_t)r, dl, 1, x, &kr, y);
                        else if (g == GEMV_ROWS)
                            gemv4_i8(path, w, (int64_t)r, 1, a, nch, &kr, y);
                        else
#endif
                            row_call(path, w, (int64_t)r, x, a, nch, 0, &kr, 1, y);
                    }
                    r += g;
                }
                continue;
            }
            /* AVX2 dense: token tiles of 4, whose activations (16 KiB at
             * the 1024-element stretch) stay in Zen 3's 32 KiB L1 through
             * dense_row2_avx2's two passes (tiles of 8: 32 KiB, refetched
             * from L2; [2048, 2048] bf16 by 64 tokens 10.2 -> 9.1 ms) */
            const size_t tt = path == PATH_DENSE_AVX2 ? 4 : TOK_TILE;
            pf_next pn;

            pf_next_init(&pn, j, tile + 1 < tile1 ? r1 : n,
                         (m + tt - 1) / tt * ((units + ku - 1) / ku) * (r1 - r0));
            for (size_t t0 = 0; t0 < m; t0 += tt) {
                const size_t nt = m - t0 < tt ? m - t0 : tt;
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
                            nvfp4k_cpu_row2_avx512(w, (int64_t)r, 1, x, t0, &kr, nt, y);
                            pf_next_step(&pn, 2);
                        }
                    if (i8_path(path))
                        for (; r + 3 < r1; r += 4) {
                            if (pf)
                                prefetch_ahead(w, path, r, 4, r1, &kr);
                            row4_tok_i8(path, w, (int64_t)r, 1, a, nch, t0, &kr, nt, y);
                            pf_next_step(&pn, 4);
                        }
                    if (i8_path(path))
                        for (; r + 1 < r1; r += 2) {
                            if (pf)
                                prefetch_ahead(w, path, r, 2, r1, &kr);
                            row2_i8(path, w, (int64_t)r, 1, a, nch, t0, &kr, nt, y);
                            pf_next_step(&pn, 2);
                        }
                    if ((path == PATH_DENSE_AVX512 && packed) || path == PATH_DENSE_AVX2)
                        while (r + 1 < r1) {
                            int64_t l0, l1;
                            const cpu_dense_part *p0 = dense_row(w, (int64_t)r, &l0);
                            if (dense_row(w, (int64_t)r + 1, &l1) != p0)
                                break; /* a pair across fused parts: one by one */
                            if (pf)
                                prefetch_ahead(w, path, r, 2, r1, &kr);
                            if (path == PATH_DENSE_AVX2)
                                nvfp4k_cpu_dense_row2_avx2(w, p0, (int64_t)r, l0, 1, x, t0, &kr,
                                                           nt, y);
                            else
                                nvfp4k_cpu_dense_row2(w, p0, (int64_t)r, l0, 1, x, t0, &kr, nt,
                                                      y);
                            pf_next_step(&pn, 2);
                            r += 2;
                        }
#endif
                    for (; r < r1; r++) {
                        if (pf)
                            prefetch_ahead(w, path, r, 1, r1, &kr);
                        row_call(path, w, (int64_t)r, x, a, nch, t0, &kr, nt, y);
                        pf_next_step(&pn, 1);
                    }
                }
            }
        }
    }
}

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
enum { PREP_QDQ_REF, PREP_QDQ_AVX512, PREP_Q8, PREP_Q8_AVX2, PREP_BIAS };

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
            nvfp4k_cpu_quantize_row_q8(j->x + t * k, k, j->gs,
                            t < j->a->vnni0 ? NULL : j->a->q + t * j->kp,
                            j->a->xs + t * j->nch * CPU_CHUNK_BLOCKS,
                            t < j->a->vnni0 ? NULL : j->a->corr + t * j->nch * CPU_CHUNK_BLOCKS,
                            j->a->aq && t < j->m / AMX_A_TOKENS * AMX_A_TOKENS
                                ? j->a->aq + t / AMX_A_TOKENS * (k / NVFP4_BLOCK) * AMX_A_BLOCK +
                                      t % AMX_A_TOKENS * NVFP4_BLOCK
                                : NULL);
            break;
        case PREP_Q8_AVX2:
            nvfp4k_cpu_quantize_row_q8_avx2(j->x + t * k, k, j->gs, j->a->q + t * j->kp,
                                            j->a->xs + t * j->nch * CPU_CHUNK_BLOCKS,
                                            j->a->corr + t * j->nch * CPU_CHUNK_BLOCKS);
            break;
        case PREP_QDQ_AVX512:
            nvfp4k_cpu_qdq_row_avx512(j->x + t * k, k, j->gs, j->out + t * k);
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
    /* The int8 activations hold NCHS chunks a token: NCH, or one more where
     * NCH is a multiple of 16 (k a multiple of 4096).  With such a stride
     * (16 KB and up) the 8 tokens of a GEMM tile (act_q8: a stretch of 6
     * chunks is 18 KB) fell on the same 24 sets of Zen 3's 8-way 32 KB L1,
     * and every one of them was evicted before the next rows reused it:
     * W4A4 GEMM by 512 tokens, one Zen 3 thread, best of 3 interleaved
     * rounds, [14336, 4096] 99 -> 119 GFLOPS, [2048, 8192] 97 -> 107.
     * Other strides spread a tile over 48 sets or more already; padding
     * them too left k = 2048 as it was and took [4096, 14336] from 114 to
     * 111.  Every kernel takes NCHS as the stride only (tiles_job.nch);
     * the chunks of a row come from k. */
    const size_t k = (size_t)desc->k, nch = chunks_of(desc->k);
    const size_t nchs = nch % 16 == 0 ? nch + 1 : nch;
    const size_t kp = nchs * CPU_CHUNK;
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
        path = isa >= CPU_ISA_AVX512 ? PATH_DENSE_AVX512
               : isa == CPU_ISA_AVX2 ? PATH_DENSE_AVX2
                                     : PATH_DENSE_SCALAR;
        /* dequantized W4A4 shards (registry.c): §5 first, as below */
        s_tmp = desc->input_scale > 0.0f ? s_x : 0;
        s_pack = path == PATH_DENSE_AVX512 && m > 1 && k % 16 == 0 ? s_xp : 0;
    } else if (w->layout == CPU_LAYOUT_CHUNK) {
        /* (uploaded so at isa=avx2 or from vnni up) */
        path = isa >= CPU_ISA_VNNI ? PATH_VNNI : PATH_I8AVX2;
        s_q = m * kp;
        s_xs = m * nchs * CPU_CHUNK_BLOCKS * sizeof(float);
        s_corr = m * nchs * CPU_CHUNK_BLOCKS * sizeof(int32_t);
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
     * whole groups of AMX_T (nvfp4k_cpu_amx_range), all of them when n is a multiple:
     * those tokens need no VNNI codes (a third of nvfp4k_cpu_quantize_row_q8's work) */
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
        prep_job j = {path == PATH_I8AVX2 ? PREP_Q8_AVX2 : PREP_Q8, x, k, desc->input_gs, NULL,
                      &a, kp, nchs, NULL, 0, m};
        nvfp4k_cpu_par(ctx, m, nth, prep_range, &j);
    }
    if (xp) {
        pack_x(xin, m, k, xp);
        xin = xp;
    }
    run_tiles_n(ctx, path, ws, count, xin, xp != NULL,
                desc->scheme == NVFP4_SCHEME_NONE ? NULL : &a,
                desc->scheme == NVFP4_SCHEME_NONE ? 0 : nchs, m, nth, ys);
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
