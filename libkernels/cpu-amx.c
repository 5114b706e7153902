/* SPDX-License-Identifier: MIT */
/* The CPU backend's AMX int8 GEMM (W4A4 prefill, isa=amx): the CHUNK
 * layout's weights unpacked into B tiles per call, the activations' A tiles
 * from nvfp4k_cpu_quantize_row_q8 (cpu-nvfp4.c), the same bits as the VNNI
 * kernels, which take the tokens and rows left over.  The product
 * (tiles_range, cpu-linear.c) hands it whole row tiles. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cpu-internal.h"
#include "cpu-linear.h"

#ifdef CPU_AMX
/* ---- AMX int8 GEMM (CHUNK layout, W4A4, 16 tokens x 16 rows) ----------------- */

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
 * and BP the tiles of act_q8.aq (nvfp4k_cpu_quantize_row_q8) / amx_pack_b.  The tile
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

/* ---- the product's AMX path (tiles_range: cpu-linear.c) ------------------ */

/* The VNNI GEMM loop of tiles_range for tokens M0 .. M1-1 (M0 a multiple of
 * 8) and rows R0 .. R1-1: the AMX path's tails. */
static void vnni_rows(const tiles_job *j, size_t m0, size_t m1, size_t r0, size_t r1)
{
    for (size_t t0 = m0; t0 < m1; t0 += TOK_TILE) {
        const size_t nt = m1 - t0 < TOK_TILE ? m1 - t0 : TOK_TILE;
        for (size_t u0 = 0; u0 < j->units; u0 += j->ku) {
            krange kr = {u0, u0 + j->ku < j->units ? u0 + j->ku : j->units, u0 > 0, 0};
            size_t r = r0;
            for (; r + 3 < r1; r += 4)
                row4_vnni(j->w, (int64_t)r, 1, j->a, j->nch, t0, &kr, nt, j->y);
            for (; r + 1 < r1; r += 2)
                nvfp4k_cpu_row2_vnni(j->w, (int64_t)r, 1, j->a, j->nch, t0, &kr, nt, j->y);
            for (; r < r1; r++)
                nvfp4k_cpu_row_vnni(j->w, (int64_t)r, j->a, j->nch, t0, &kr, nt, j->y);
        }
    }
}

/* Row tiles TILE0 .. TILE1-1 on the tile unit: a tile's B tiles (every
 * group of 16 rows) unpacked once into this thread's buffer (about 1 MB,
 * L2-sized: run_tiles' tiles hold 512 KB of NVFP4 weights, 20 bytes per 9
 * here), then per group of 16 tokens and stretch, every row group in turn,
 * so that the A tiles of the stretch stay in L1.  The rest on the VNNI kernels.  Same
 * stretches, same bits. */
void nvfp4k_cpu_amx_range(const tiles_job *j, size_t tile0, size_t tile1)
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
#endif /* CPU_AMX */
