/* SPDX-License-Identifier: MIT */
/* The CPU backend's AVX2 int8 W4A4 kernels (CHUNK layout, isa=avx2): the
 * AVX-512 VNNI kernels of cpu-nvfp4.c (one row, two rows, the 4-row GEMV)
 * and their activation quantizer, in 256-bit registers, computing the same
 * bits.  The product (tiles_range, cpu-linear.c) calls them where it calls
 * the VNNI ones (PATH_I8AVX2).
 *
 * Why the bits are the same:
 *  - a block's integer sum: vpdpbusd(acc, u8, s8) becomes
 *    maddubs(u8, s8) (pairs of products into int16), the four steps'
 *    int16 added, then madd_epi16 by ones (pairs into int32) and the add of
 *    the offset.  Weights are 2*code + 12 in [0, 24], activations 2*E2M1 in
 *    [-12, 12]: a product is at most 288 in magnitude, a maddubs lane 576,
 *    the four steps' 2304, so nothing saturates and the block's sum is the
 *    exact integer vpdpbusd forms;
 *  - the floats: each 16-lane vector of the VNNI kernels (lane j: block j
 *    of a chunk) is two 8-lane halves, blocks 0-7 and 8-15, and every lane
 *    sees the same IEEE operations in the same order (cvtepi32_ps, ws * xs,
 *    fmadd in chunk order); the E4M3 block scales are decoded by the same
 *    half-precision trick (F16C's vcvtph2ps) and the same product,
 *    rounded once (value * 2^-8 times 256 * s2 here, times 256 and then
 *    s2 there: both factors of 256 exact);
 *  - the 16 lanes are summed in the tree of GCC's _mm512_reduce_add_ps
 *    (reduce16_avx2): high half + low half, then quarters, pairs, neighbours;
 *  - the quantizer gives numerics.h's num_qdq_block codes and scales (its
 *    num_qdq_scale per block; the codes by qdq_codes_avx512's arithmetic in
 *    8 lanes), as nvfp4k_cpu_quantize_row_q8 does, in the same act_q8
 *    layout.
 * test-kernels compares isa=avx2 with isa=vnni bit for bit where the CPU
 * has VNNI (test_i8avx2_matches_vnni). */
#include "config.h"

#include <string.h>

#include "cpu-internal.h"
#include "cpu-linear.h"

#ifdef CPU_X86
#define I8_TARGET "avx2,fma,f16c"

/* Chunk CH of a row of NB blocks: its first byte, and the count of its
 * blocks (CPU_CHUNK_BLOCKS, or c < 16 for a tail chunk, whose planes hold
 * 4c bytes each).  Prefetches the stream PF bytes on. */
static inline __attribute__((always_inline)) size_t
chunk_at(const uint8_t *row, size_t nb, size_t ch, size_t pf, const uint8_t **cb)
{
    const size_t c = nb - ch * CPU_CHUNK_BLOCKS;

    *cb = row + ch * CPU_CHUNK_BYTES;
    CPU_PF(*cb + pf);
    CPU_PF(*cb + pf + 64);
    return c < CPU_CHUNK_BLOCKS ? c : CPU_CHUNK_BLOCKS;
}

/* 16 bytes 0xFF, then 16 zeros: from tail_mask + 16 - c, the mask of a
 * register's first c bytes. */
static const uint8_t tail_mask[32] = {
    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
};

/* weight_scale_2 * 256 in 8 lanes: exact, as validation keeps
 * weight_scale_2 at or below FLT_MAX / 2688 (scales16_avx2). */
__attribute__((target(I8_TARGET))) static inline __attribute__((always_inline)) __m256
s2x256_avx2(const cpu_kweight *w)
{
    return _mm256_set1_ps(w->d.weight_scale_2 * 256.0f);
}

/* The 16 E4M3 bytes BYTES -> E4M3 value * s2 in two halves (blocks 0-7,
 * 8-15): scalesn_avx512's bits placed in a half's fields (value * 2^-8
 * exactly), converted by F16C, times S2X256 = 256 * s2 (s2x256_avx2): one
 * rounding of the same product as scalesn_avx512's times 256 (exact) then
 * times s2, so the same bits with one multiply fewer.  SHORT_FORM (a
 * constant) picks one of two ways to the same half-precision bits. */
__attribute__((target(I8_TARGET))) static inline __attribute__((always_inline)) void
scales16_bytes(__m128i bytes, __m256 s2x256, __m256 ws[2], int short_form)
{
    __m256i b, h;

    if (short_form) {
        /* sign-extended, the byte's bits 6..0 land in bits 13..7 and its
         * sign in bits 15 and 14 (bit 14 cleared): the same halves for
         * all 256 bytes in three operations where the form below takes
         * six.  The 4-row GEMV only: in the 2-row kernel GCC then
         * allocated registers worse ([576, 576] by 512 tokens 76 -> 61
         * GFLOPS); W4A4 GEMV [16384, 2048] 16.1-16.5 -> 16.2-17.1 GB/s,
         * one Zen 3 thread. */
        b = _mm256_cvtepi8_epi16(bytes);
        h = _mm256_and_si256(_mm256_slli_epi16(b, 7), _mm256_set1_epi16((short)0xBF80));
    } else {
        b = _mm256_cvtepu8_epi16(bytes);
        h = _mm256_or_si256(
            _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7F)), 7),
            _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8));
    }
    ws[0] = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), s2x256);
    ws[1] = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), s2x256);
}

/* scales16_bytes of the C (<= 16) bytes SC, zero past C as
 * chunk_load_pf's masked loads give (a tail chunk's 16-byte load reaches
 * into the next row's scales or the weight's CPU_TAIL_PAD, and is
 * masked). */
__attribute__((target(I8_TARGET))) static inline __attribute__((always_inline)) void
scales16_avx2(const uint8_t *sc, size_t c, __m256 s2x256, __m256 ws[2], int short_form)
{
    __m128i bytes;

    if (c >= CPU_CHUNK_BLOCKS)
        bytes = _mm_loadu_si128((const __m128i *)sc);
    else /* a copy of the C bytes to the stack read back as one 16-byte
          * load stalled on store forwarding: SmolLM2's k = 576 (a tail of
          * 4 blocks), [576, 576] GEMV 9.5 -> 12.9 GB/s in L3, one Zen 3
          * thread */
        bytes = _mm_and_si128(_mm_loadu_si128((const __m128i *)sc),
                              _mm_loadu_si128((const __m128i *)(tail_mask + 16 - c)));
    scales16_bytes(bytes, s2x256, ws, short_form);
}

/* A half chunk's four steps as vpdpbusd's unsigned weights 2*code + 12
 * (the VNNI kernels' table) from its two planes' bytes: steps 0 and 1
 * from the low and high nibbles of P0, 2 and 3 from P1. */
__attribute__((target(I8_TARGET))) static inline __attribute__((always_inline)) void
weights_planes(__m256i p0, __m256i p1, __m256i wv[4])
{
    const __m256i lut = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m256i lo4 = _mm256_set1_epi8(0x0F);

    wv[0] = _mm256_shuffle_epi8(lut, _mm256_and_si256(p0, lo4));
    wv[1] = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(p0, 4), lo4));
    wv[2] = _mm256_shuffle_epi8(lut, _mm256_and_si256(p1, lo4));
    wv[3] = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(p1, 4), lo4));
}

/* weights_planes of half H (blocks 8h .. 8h+7) of the chunk's bytes CB of
 * C blocks (plane 0, then plane 1).  A tail chunk's planes (4c bytes: a
 * dword a block) by masked dword loads, zero past them, as the VNNI
 * kernels read them (byte 0: the weight 12, whose products the offset
 * takes away again). */
__attribute__((target(I8_TARGET))) static inline __attribute__((always_inline)) void
weights_half(const uint8_t *cb, size_t c, int h, __m256i wv[4])
{
    __m256i p0, p1;

    if (c >= CPU_CHUNK_BLOCKS) {
        p0 = _mm256_loadu_si256((const __m256i *)(cb + 32 * h));
        p1 = _mm256_loadu_si256((const __m256i *)(cb + 64 + 32 * h));
    } else {
        const __m256i mk = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)c - 8 * h),
                                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        p0 = _mm256_maskload_epi32((const int *)(const void *)(cb + 32 * h), mk);
        p1 = _mm256_maskload_epi32((const int *)(const void *)(cb + 4 * c + 32 * h), mk);
    }
    weights_planes(p0, p1, wv);
}

/* Eight blocks of one token: CORR plus the 16 products of each block, the
 * four steps' weights WV times the token's codes X0 .. X3, exact (see the
 * top). */
__attribute__((target(I8_TARGET))) static inline __attribute__((always_inline)) __m256i
dot_steps(const __m256i wv[4], __m256i x0, __m256i x1, __m256i x2, __m256i x3, __m256i corr)
{
    const __m256i s01 = _mm256_add_epi16(_mm256_maddubs_epi16(wv[0], x0),
                                         _mm256_maddubs_epi16(wv[1], x1));
    const __m256i s23 = _mm256_add_epi16(_mm256_maddubs_epi16(wv[2], x2),
                                         _mm256_maddubs_epi16(wv[3], x3));

    return _mm256_add_epi32(corr,
                            _mm256_madd_epi16(_mm256_add_epi16(s01, s23), _mm256_set1_epi16(1)));
}

/* dot_steps for blocks 8h .. 8h+7 of one token's chunk (XQ: its codes,
 * CORR: its offsets). */
__attribute__((target(I8_TARGET))) static inline __attribute__((always_inline)) __m256i
dot_half(const __m256i wv[4], const int8_t *xq, const int32_t *corr, int h)
{
    const __m256i s01 = _mm256_add_epi16(
        _mm256_maddubs_epi16(wv[0], _mm256_loadu_si256((const __m256i *)(xq + 32 * h))),
        _mm256_maddubs_epi16(wv[1], _mm256_loadu_si256((const __m256i *)(xq + 64 + 32 * h))));
    const __m256i s23 = _mm256_add_epi16(
        _mm256_maddubs_epi16(wv[2], _mm256_loadu_si256((const __m256i *)(xq + 128 + 32 * h))),
        _mm256_maddubs_epi16(wv[3], _mm256_loadu_si256((const __m256i *)(xq + 192 + 32 * h))));

    return _mm256_add_epi32(
        _mm256_loadu_si256((const __m256i *)(corr + 8 * h)),
        _mm256_madd_epi16(_mm256_add_epi16(s01, s23), _mm256_set1_epi16(1)));
}

/* acc + float(isum) * (ws * xs), the VNNI kernels' per-lane float steps;
 * fma_half_v with the token's block factors XV already loaded. */
__attribute__((target(I8_TARGET))) static inline __attribute__((always_inline)) __m256
fma_half_v(__m256 acc, __m256i isum, __m256 ws, __m256 xv)
{
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(ws, xv), acc);
}

__attribute__((target(I8_TARGET))) static inline __attribute__((always_inline)) __m256
fma_half(__m256 acc, __m256i isum, __m256 ws, const float *xs)
{
    return fma_half_v(acc, isum, ws, _mm256_loadu_ps(xs));
}

static inline void store_y(float *yo, float v, int acc)
{
    *yo = acc ? *yo + v : v;
}

/* ---- one row, NT tokens (row_vnni_body) ------------------------------------- */

/* The chunk's two halves one after the other, each through every token:
 * 16 ymm registers hold the four weights of a half and a few accumulators
 * (GCC keeps the rest of the 2 x NT in memory, L1). */
__attribute__((target(I8_TARGET))) static inline __attribute__((always_inline)) void
row_i8avx2_body(const cpu_kweight *w, int64_t r, const act_q8 *a, size_t nch, size_t t0,
                const krange *kr, size_t nt, float *y)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n, nb = k / NVFP4_BLOCK;
    const uint8_t *row = w->packed + (size_t)r * k / 2;
    const uint8_t *srow = w->scales + (size_t)r * nb;
    const __m256 s2x256 = s2x256_avx2(w);
    __m256 acc[8][2];

#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++)
        acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    for (size_t ch = kr->b0; ch < kr->b1; ch++) {
        const uint8_t *cb;
        const size_t c = chunk_at(row, nb, ch, CPU_PREFETCH, &cb);
        __m256 ws[2];

        scales16_avx2(srow + ch * CPU_CHUNK_BLOCKS, c, s2x256, ws, 0);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i wv[4];

            /* A tail chunk of 8 blocks or fewer has nothing in its
             * second half, where the VNNI kernels add fma(0, 0, acc) =
             * acc (codes, scales and xs are +0 past the row, times a
             * finite weight_scale_2; an accumulator starts at +0 and is
             * never -0, the products being multiples of 2^-149, so
             * adding a zero leaves its bits): skipped.  SmolLM2's k = 576
             * ends in a chunk of 4 blocks; its [576, 576] GEMM by 512
             * tokens went from 67 to 79 GFLOPS on one Zen 3 thread. */
            if (h == 1 && c <= 8)
                break;

            weights_half(cb, c, h, wv);
#pragma GCC unroll 8
            for (size_t t = 0; t < nt; t++) {
                const size_t tc = (t0 + t) * nch + ch;
                const __m256i s = dot_half(wv, a->q + tc * CPU_CHUNK, a->corr + tc * 16, h);

                acc[t][h] = fma_half(acc[t][h], s, ws[h], a->xs + tc * 16 + 8 * h);
            }
        }
    }
#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++)
        store_y(y + (t0 + t) * n + (size_t)r, reduce16_avx2(acc[t][0], acc[t][1]), kr->acc);
}

/* ---- one token, four rows RS apart (nvfp4k_cpu_gemv4_vnni) ------------------- */

/* Per row exactly row_i8avx2_body with nt = 1, so grouping rows changes no
 * bit; prefetch distances as the VNNI GEMV's.  One chunk CH of the four
 * rows (ROW, scales SROW; RB and SBS apart) into ACC; C is the chunk's
 * block count, a constant where the caller knows the chunk is whole, so
 * that the tail's tests and masked loads leave the loop, and PF_L2
 * CPU_PF's choice of hint, a constant there too (CPU_PF_AS). */
__attribute__((target(I8_TARGET))) static inline __attribute__((always_inline)) void
gemv4_chunk(const uint8_t *row, const uint8_t *srow, size_t rb, size_t sbs, size_t ch,
            size_t c, size_t pfd, int pf_l2, __m256 s2x256, const act_q8 *a,
            __m256 acc[GEMV_ROWS][2])
{
    const int8_t *xq = a->q + ch * CPU_CHUNK;
    const int32_t *corr = a->corr + ch * 16;
    const float *xs = a->xs + ch * 16;

#pragma GCC unroll 4
    for (int i = 0; i < GEMV_ROWS; i++) {
        const uint8_t *cb = row + (size_t)i * rb + ch * CPU_CHUNK_BYTES;
        __m256 ws[2];

        CPU_PF_AS(pf_l2, cb + pfd);
        CPU_PF_AS(pf_l2, cb + pfd + 64);
        scales16_avx2(srow + (size_t)i * sbs + ch * CPU_CHUNK_BLOCKS, c, s2x256, ws, 1);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i wv[4];

            if (h == 1 && c <= 8)
                break; /* see row_i8avx2_body */

            weights_half(cb, c, h, wv);
            acc[i][h] = fma_half(acc[i][h], dot_half(wv, xq, corr, h), ws[h], xs + 8 * h);
        }
    }
}

/* A tail chunk of exactly 4 blocks (SmolLM2's k = 576 has 36) of the four
 * rows, two rows to a vector: lanes 0-3 row i, 4-7 row i + 1, where
 * gemv4_chunk fills lanes 0-3 of a vector a row and adds zeros to lanes
 * 4-7 (fma(0, 0, acc) = acc, see row_i8avx2_body).  Each lane sees the
 * same operations as there (the codes, offsets and factors of blocks 0-3
 * in both halves of their vectors), in half the vector operations and
 * without masked loads (a plane is exactly 16 bytes).  No accumulator
 * here: for the row pair I/2 it leaves SUM[I/2], the float of the exact
 * sums, and F[I/2], the factors ws * xs, for tail4_add's fma after the
 * whole chunks, and runs before them (see gemv4_rows). */
__attribute__((target(I8_TARGET))) static inline __attribute__((always_inline)) void
gemv4_tail4(const uint8_t *row, const uint8_t *srow, size_t rb, size_t sbs, size_t ch,
            size_t pfd, int pf_l2, __m256 s2x256, const act_q8 *a, __m256 sum[2], __m256 f[2])
{
    const __m128i *xq = (const __m128i *)(const void *)(a->q + ch * CPU_CHUNK);
    const __m256i x0 = _mm256_broadcastsi128_si256(_mm_loadu_si128(xq));
    const __m256i x1 = _mm256_broadcastsi128_si256(_mm_loadu_si128(xq + 4));
    const __m256i x2 = _mm256_broadcastsi128_si256(_mm_loadu_si128(xq + 8));
    const __m256i x3 = _mm256_broadcastsi128_si256(_mm_loadu_si128(xq + 12));
    const __m256i corr = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)(const void *)(a->corr + ch * 16)));
    const __m256 xv = _mm256_broadcast_ps((const __m128 *)(const void *)(a->xs + ch * 16));

#pragma GCC unroll 2
    for (int i = 0; i < GEMV_ROWS; i += 2) {
        const uint8_t *c0 = row + (size_t)i * rb + ch * CPU_CHUNK_BYTES, *c1 = c0 + rb;
        const uint8_t *sc = srow + (size_t)i * sbs + ch * CPU_CHUNK_BLOCKS;
        uint32_t s0, s1;
        __m256 ws[2];
        __m256i wv[4];

        CPU_PF_AS(pf_l2, c0 + pfd);
        CPU_PF_AS(pf_l2, c0 + pfd + 64);
        CPU_PF_AS(pf_l2, c1 + pfd);
        CPU_PF_AS(pf_l2, c1 + pfd + 64);
        memcpy(&s0, sc, 4);
        memcpy(&s1, sc + sbs, 4);
        /* ws[0]: row i's 4 scales, then row i + 1's */
        scales16_bytes(_mm_unpacklo_epi32(_mm_cvtsi32_si128((int)s0), _mm_cvtsi32_si128((int)s1)),
                       s2x256, ws, 1);
        weights_planes(_mm256_loadu2_m128i((const __m128i *)(const void *)c1,
                                           (const __m128i *)(const void *)c0),
                       _mm256_loadu2_m128i((const __m128i *)(const void *)(c1 + 16),
                                           (const __m128i *)(const void *)(c0 + 16)),
                       wv);
        sum[i / 2] = _mm256_cvtepi32_ps(dot_steps(wv, x0, x1, x2, x3, corr));
        f[i / 2] = _mm256_mul_ps(ws[0], xv);
    }
}

/* acc[i][0] of rows I and I + 1 plus their tail (gemv4_tail4's SUM and F
 * of the pair I/2): their lanes 0-3 side by side through one fma, lanes
 * 4-7 kept. */
__attribute__((target(I8_TARGET))) static inline __attribute__((always_inline)) void
tail4_add(const __m256 sum[2], const __m256 f[2], __m256 acc[GEMV_ROWS][2])
{
    for (int i = 0; i < GEMV_ROWS; i += 2) {
        __m256 both = _mm256_permute2f128_ps(acc[i][0], acc[i + 1][0], 0x20);

        both = _mm256_fmadd_ps(sum[i / 2], f[i / 2], both);
        acc[i][0] = _mm256_permute2f128_ps(both, acc[i][0], 0x30);
        acc[i + 1][0] = _mm256_permute2f128_ps(both, acc[i + 1][0], 0x31);
    }
}

/* The four rows' chunks of KR, and where TAIL4 (a constant) the range's
 * last chunk holds 4 blocks: gemv4_tail4's products first, its fma last.
 * Run after the whole chunks, its operations had waited on their last
 * and the reduction on it, and halving them made no difference; run first,
 * beside the whole chunks' work, W4A4 [3072, 576] (SmolLM2's gate/up) in
 * the cache 14.7 -> 16.3 GB/s, one Zen 3 thread (17.5 with the function
 * split below). */
__attribute__((target(I8_TARGET))) static inline __attribute__((always_inline)) void
gemv4_rows(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a, const krange *kr,
           float *y, int tail4)
{
    const size_t k = (size_t)w->d.k, nb = k / NVFP4_BLOCK;
    const __m256 s2x256 = s2x256_avx2(w);
    const size_t pfd = rs > 1 ? CPU_PREFETCH : CPU_PREFETCH4;
    const uint8_t *row = w->packed + (size_t)r * (k / 2), *srow = w->scales + (size_t)r * nb;
    const size_t rb = rs * (k / 2), sbs = rs * nb;
    /* the chunks before b1 that hold CPU_CHUNK_BLOCKS blocks */
    const size_t full = nb / CPU_CHUNK_BLOCKS < kr->b1 ? nb / CPU_CHUNK_BLOCKS : kr->b1;
    __m256 acc[GEMV_ROWS][2], t4s[2], t4f[2];
    size_t ch;

    for (int i = 0; i < GEMV_ROWS; i++)
        acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    if (tail4)
        gemv4_tail4(row, srow, rb, sbs, kr->b1 - 1, pfd, nvfp4k_cpu_pf_l2, s2x256, a, t4s, t4f);
    /* The GEMV reads at about its operations' rate (bench-kernels -c: as
     * fast out of the cache as in it, one Zen 3 thread); the loop over
     * whole chunks had carried the tail's tests and CPU_PF's flag, 365
     * instructions a chunk of four rows, now 248.  W4A4 GEMV, one thread,
     * best of 3 interleaved rounds: [16384, 2048] 17.1 -> 18.9 GB/s,
     * [2048, 8192] 17.4 -> 19.8, [2048, 2048] 17.0 -> 18.4. */
    if (nvfp4k_cpu_pf_l2)
        for (ch = kr->b0; ch < full; ch++)
            gemv4_chunk(row, srow, rb, sbs, ch, CPU_CHUNK_BLOCKS, pfd, 1, s2x256, a, acc);
    else
        for (ch = kr->b0; ch < full; ch++)
            gemv4_chunk(row, srow, rb, sbs, ch, CPU_CHUNK_BLOCKS, pfd, 0, s2x256, a, acc);
    if (tail4)
        tail4_add(t4s, t4f, acc);
    else
        for (ch = full > kr->b0 ? full : kr->b0; ch < kr->b1; ch++) /* the tail chunk */
            gemv4_chunk(row, srow, rb, sbs, ch, nb - ch * CPU_CHUNK_BLOCKS, pfd,
                        nvfp4k_cpu_pf_l2, s2x256, a, acc);
    for (int i = 0; i < GEMV_ROWS; i++)
        store_y(y + (size_t)r + (size_t)i * rs, reduce16_avx2(acc[i][0], acc[i][1]), kr->acc);
}

_Static_assert(GEMV_ROWS == 4, "nvfp4k_cpu_gemv4_i8avx2 runs four rows");
__attribute__((target(I8_TARGET))) void
nvfp4k_cpu_gemv4_i8avx2(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a,
                        size_t nch, const krange *kr, float *y)
{
    (void)nch;
    gemv4_rows(w, r, rs, a, kr, y, 0);
}

/* A function of its own, picked by the driver (range_ends_in4): in one
 * with the other, the tail's registers had moved the whole chunks' loop to
 * more stack traffic ([2048, 2048] in the cache 19.9 -> 19.0 GB/s). */
__attribute__((target(I8_TARGET))) void
nvfp4k_cpu_gemv4t4_i8avx2(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a,
                          size_t nch, const krange *kr, float *y)
{
    (void)nch;
    gemv4_rows(w, r, rs, a, kr, y, 1);
}

/* ---- two rows RS apart, NT tokens (row2_vnni_body) ------------------------- */

/* dot_half for two rows' weights W0, W1 and one token's half chunk XQ
 * (xq + 32h), its offsets CORR (corr + 8h): the same exact integers, in
 * the order that reads each 32 bytes of codes once for both rows.  The
 * empty asms pin that order: each load lands in a register (GCC otherwise
 * folded it into both vpmaddubsw, two loads where one does) and waits for
 * the step before (GCC otherwise hoisted all four, and the weights went to
 * the stack).  A token's half then reads 10 vectors and writes 2, where it
 * read 16 (and 2 pointers) and wrote 2.  W4A4 GEMM by 512 tokens, one Zen 3
 * thread, best of 3 interleaved rounds: [2048, 8192] 100 -> 111 GFLOPS,
 * [14336, 4096] 103 -> 113, [3072, 2048] 115 -> 120, [576, 576] 94 -> 97
 * (another round: [2048, 2048] 117 -> 121, [4096, 14336] 111 -> 108). */
__attribute__((target(I8_TARGET))) static inline __attribute__((always_inline)) void
dot2_half(const __m256i w0[4], const __m256i w1[4], const int8_t *xq, const int32_t *corr,
          __m256i *s0, __m256i *s1)
{
    __m256i x = _mm256_loadu_si256((const __m256i *)xq), p, q, cr;

    __asm__("" : "+x"(x));
    p = _mm256_maddubs_epi16(w0[0], x);
    q = _mm256_maddubs_epi16(w1[0], x);
    for (int s = 1; s < 4; s++) {
        __asm__("" : "+r"(xq) : "x"(p), "x"(q));
        x = _mm256_loadu_si256((const __m256i *)(xq + 64 * s));
        __asm__("" : "+x"(x));
        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(w0[s], x));
        q = _mm256_add_epi16(q, _mm256_maddubs_epi16(w1[s], x));
    }
    cr = _mm256_loadu_si256((const __m256i *)corr);
    *s0 = _mm256_add_epi32(cr, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
    *s1 = _mm256_add_epi32(cr, _mm256_madd_epi16(q, _mm256_set1_epi16(1)));
}

/* Each token's codes, offsets and scales feed both rows; per output
 * exactly row_i8avx2_body's operations, so pairing rows changes no bit. */
__attribute__((target(I8_TARGET))) static inline __attribute__((always_inline)) void
row2_i8avx2_body(const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a, size_t nch,
                 size_t t0, const krange *kr, size_t nt, float *y)
{
    const size_t k = (size_t)w->d.k, n = (size_t)w->d.n, nb = k / NVFP4_BLOCK;
    const uint8_t *row[2] = {w->packed + (size_t)r * (k / 2),
                             w->packed + ((size_t)r + rs) * (k / 2)};
    const uint8_t *srow[2] = {w->scales + (size_t)r * nb, w->scales + ((size_t)r + rs) * nb};
    const __m256 s2x256 = s2x256_avx2(w);
    __m256 accm[2][8][2];
    __m256(*acc)[8][2] = accm;

    /* The 32 accumulators live in memory (L1) by choice: through a pointer
     * GCC cannot see into, it no longer tries to keep them in the 16 ymm
     * registers, which had spilled the weights instead and reloaded them
     * for every token.  W4A4 GEMM by 512 tokens, one Zen 3 thread, best of
     * 3 interleaved rounds: [2048, 2048] 109 -> 129 GFLOPS (112 -> 119 in
     * two later rounds), [1536, 576] 94 -> 100, [576, 576] 90 -> 94,
     * [2048, 8192] 94 -> 97. */
    __asm__("" : "+r"(acc));
#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++)
        acc[0][t][0] = acc[0][t][1] = acc[1][t][0] = acc[1][t][1] = _mm256_setzero_ps();
    for (size_t ch = kr->b0; ch < kr->b1; ch++) {
        const uint8_t *cb[2];
        size_t c = 0;
        __m256 ws[2][2];

        for (int i = 0; i < 2; i++) {
            c = chunk_at(row[i], nb, ch, CPU_PREFETCH, &cb[i]);
            scales16_avx2(srow[i] + ch * CPU_CHUNK_BLOCKS, c, s2x256, ws[i], 0);
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i wv0[4], wv1[4];

            if (h == 1 && c <= 8)
                break; /* see row_i8avx2_body */

            weights_half(cb[0], c, h, wv0);
            weights_half(cb[1], c, h, wv1);
            {
                const size_t tc0 = t0 * nch + ch;
                const int8_t *xq = a->q + tc0 * CPU_CHUNK + 32 * h;
                const int32_t *corr = a->corr + tc0 * 16 + 8 * h;
                const float *xs = a->xs + tc0 * 16 + 8 * h;

#pragma GCC unroll 8
                for (size_t t = 0; t < nt; t++) {
                    __m256i s0, s1;

                    dot2_half(wv0, wv1, xq, corr, &s0, &s1);
                    {
                        const __m256 xv = _mm256_loadu_ps(xs);

                        acc[0][t][h] = fma_half_v(acc[0][t][h], s0, ws[0][h], xv);
                        acc[1][t][h] = fma_half_v(acc[1][t][h], s1, ws[1][h], xv);
                    }
                    xq += nch * CPU_CHUNK;
                    corr += nch * 16;
                    xs += nch * 16;
                }
            }
        }
    }
#pragma GCC unroll 8
    for (size_t t = 0; t < nt; t++) {
        float *yo = y + (t0 + t) * n + (size_t)r;
        store_y(yo, reduce16_avx2(acc[0][t][0], acc[0][t][1]), kr->acc);
        store_y(yo + rs, reduce16_avx2(acc[1][t][0], acc[1][t][1]), kr->acc);
    }
}

/* ---- the activation quantizer (nvfp4k_cpu_quantize_row_q8) ------------------ */

/* qdq_codes_avx512 in 8 lanes: the doubled E2M1 codes (-12..12) of V
 * times OSC, rounded by the float adder (a + M - M, M = 2^22 times the
 * power of two at or below a) to E2M1's steps, half to even as
 * num_e2m1_encode's edges, saturated at 6; NaN made 0 by max(a, 0) first;
 * the sign is v's. */
__attribute__((target(I8_TARGET))) static inline __attribute__((always_inline)) __m256i
qdq_codes8(__m256 v, __m256 osc)
{
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    const __m256 a = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_mul_ps(v, osc)),
                                   _mm256_setzero_ps());
    const __m256i mbits = _mm256_max_epi32(
        _mm256_add_epi32(_mm256_and_si256(_mm256_castps_si256(a), _mm256_set1_epi32(0x7F800000)),
                         _mm256_set1_epi32(22 << 23)),
        _mm256_set1_epi32(0x4A800000));
    const __m256 m = _mm256_castsi256_ps(mbits);
    const __m256 rq = _mm256_min_ps(_mm256_sub_ps(_mm256_add_ps(a, m), m), _mm256_set1_ps(6.0f));

    return _mm256_cvttps_epi32(_mm256_or_ps(_mm256_add_ps(rq, rq), _mm256_and_ps(v, sign)));
}

/* The largest |x| of a block of 16, NaN skipped as num_qdq_amax's "greater
 * than" skips it: max(a, m) returns m where a is NaN, and m starts at 0
 * (exact: a maximum of numbers does not depend on the order).  Where a
 * block holds NaN, nvfp4k_cpu_quantize_row_q8's max16x16 may keep it (it
 * leaves that unspecified), so the two paths agree on finite inputs only;
 * this one agrees with libquant on every input. */
__attribute__((target(I8_TARGET))) static inline __attribute__((always_inline)) float
amax16(const float *xb)
{
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    __m256 m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xb)), _mm256_setzero_ps());
    __m128 q;

    m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xb + 8)), m);
    q = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}

/* One token for the int8 kernels: per chunk, the 16 block scales by
 * numerics.h's num_qdq_scale (xs = (s / gs) / 4), then the codes straight
 * in the plane order: step s, half h (blocks 8h..8h+7) is 32 bytes, dword
 * j the codes of elements 4s..4s+3 of block 8h+j, formed from four vectors
 * of two blocks' four elements each and packed to bytes; corr = -12 x each
 * block's code sum (maddubs by ones, then madd by ones: a dword a block).
 * A tail chunk reads its blocks from a zero-padded copy: blocks past the
 * row get amax 0, s 0, xs 0, codes 0, as in the VNNI quantizer. */
__attribute__((target(I8_TARGET))) void
nvfp4k_cpu_quantize_row_q8_avx2(const float *x, size_t k, float gs, int8_t *q, float *xs,
                                int32_t *corr)
{
    const size_t nb = k / NVFP4_BLOCK, nch = chunks_of((int64_t)k);
    /* packs leave blocks 0 2 4 6 in the low lane, 1 3 5 7 in the high */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    _Alignas(32) float tail[CPU_CHUNK];

    for (size_t ch = 0; ch < nch; ch++) {
        const size_t b0 = ch * CPU_CHUNK_BLOCKS;
        const size_t cnt = nb - b0 < CPU_CHUNK_BLOCKS ? nb - b0 : CPU_CHUNK_BLOCKS;
        const float *xc = x + b0 * NVFP4_BLOCK;
        int8_t *qc = q + ch * CPU_CHUNK;
        float osc[CPU_CHUNK_BLOCKS];
        __m256 op[CPU_CHUNK_BLOCKS / 2];
        __m256i sum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};

        if (cnt < CPU_CHUNK_BLOCKS) {
            memset(tail, 0, sizeof(tail));
            memcpy(tail, xc, cnt * NVFP4_BLOCK * sizeof(float));
            xc = tail;
        }
        for (size_t j = 0; j < CPU_CHUNK_BLOCKS; j++) {
            float back;

            (void)num_qdq_scale(amax16(xc + j * NVFP4_BLOCK), gs, &osc[j], &back);
            xs[b0 + j] = back * 0.25f;
        }
        /* op[p]: block 2p's factor in lanes 0-3, 2p + 1's in 4-7 */
        for (size_t p = 0; p < CPU_CHUNK_BLOCKS / 2; p++)
            op[p] = _mm256_setr_m128(_mm_set1_ps(osc[2 * p]), _mm_set1_ps(osc[2 * p + 1]));
        for (int st = 0; st < 4; st++)
            for (int h = 0; h < 2; h++) {
                __m256i c[4], step;

                for (int p = 0; p < 4; p++) {
                    const float *xp = xc + (size_t)(8 * h + 2 * p) * NVFP4_BLOCK + 4 * st;
                    c[p] = qdq_codes8(_mm256_loadu2_m128(xp + NVFP4_BLOCK, xp), op[4 * h + p]);
                }
                step = _mm256_permutevar8x32_epi32(
                    _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]),
                                       _mm256_packs_epi32(c[2], c[3])),
                    order);
                _mm256_storeu_si256((__m256i *)(qc + 64 * st + 32 * h), step);
                sum[h] = _mm256_add_epi32(
                    sum[h], _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, step), ones16));
            }
        _mm256_storeu_si256((__m256i *)(corr + b0),
                            _mm256_mullo_epi32(sum[0], _mm256_set1_epi32(-12)));
        _mm256_storeu_si256((__m256i *)(corr + b0 + 8),
                            _mm256_mullo_epi32(sum[1], _mm256_set1_epi32(-12)));
    }
}

CPU_DISPATCH(I8_TARGET, row_i8avx2,
             (const cpu_kweight *w, int64_t r, const act_q8 *a, size_t nch, size_t t0,
              const krange *kr, size_t nt, float *y),
             w, r, a, nch, t0, kr)
CPU_DISPATCH(I8_TARGET, row2_i8avx2,
             (const cpu_kweight *w, int64_t r, size_t rs, const act_q8 *a, size_t nch,
              size_t t0, const krange *kr, size_t nt, float *y),
             w, r, rs, a, nch, t0, kr)
#else
/* (ISO C wants a translation unit to hold a declaration) */
typedef int nvfp4k_cpu_i8avx2_unused;
#endif /* CPU_X86 */
