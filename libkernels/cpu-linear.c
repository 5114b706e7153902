/* The CPU backend's Linear: NVFP4 (W4A16, W4A4) and unquantized weights.
 *
 * Dequantization is fused into the matrix products: the weight is never
 * expanded to float32 in memory.  At upload the packed E2M1 nibbles are
 * repacked, chunk by chunk (256 weights = 16 blocks of §2), so that one
 * 64-byte load feeds two SIMD steps:
 *
 *   step s = 0..3 covers elements 4s..4s+3 of each of the 16 blocks; its
 *   byte i = 4j + e (block j, element 4s + e) is the low nibble (s even) or
 *   the high nibble (s odd) of byte i of plane P(s/2); P0 then P1, 64 bytes
 *   each.  A tail chunk of c < 16 blocks uses 4c bytes per plane.
 *
 * With 4 consecutive bytes of one block per 32-bit lane, AVX-512 VNNI's
 * vpdpbusd sums exactly one block per lane, so in W4A4 mode (both operands
 * on the E2M1 grid, §5) the 16 products of a block are an exact integer and
 * the two block scales are applied once per block in float32.  The float
 * paths (W4A16; W4A4 without VNNI) sum code * x per block and then multiply
 * by the block scale: the same value as (code * scale) * x up to float32
 * rounding.  Block scales stay as the E4M3 bytes of the file (4.5 bits per
 * weight in memory) and are decoded in the loop.
 *
 * Outputs (rows) are partitioned across threads; every output is reduced by
 * one thread in a fixed order, so results do not depend on thread count.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu-internal.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define CPU_X86 1
#endif

static const float e2m1_f[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                 -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

/* ---- layout -------------------------------------------------------------- */

static size_t chunks_of(int64_t k)
{
    return ((size_t)k + CPU_CHUNK - 1) / CPU_CHUNK;
}

/* Position of element E (0..255) of a chunk with C blocks: byte offset and
 * whether it is the high nibble. */
static inline void chunk_pos(unsigned e, unsigned c, unsigned *byte, unsigned *hi)
{
    unsigned j = e / 16, r = e % 16, s = r / 4;
    *byte = (s / 2) * 4 * c + 4 * j + r % 4;
    *hi = s & 1;
}

/* Repack one row of K/2 bytes from the file layout (§2: element 2i in the
 * low nibble of byte i). */
static void repack_row(const uint8_t *src, int64_t k, uint8_t *dst)
{
    size_t nb = (size_t)k / NVFP4_BLOCK;

    memset(dst, 0, (size_t)k / 2);
    for (size_t ch = 0; ch * CPU_CHUNK_BLOCKS < nb; ch++) {
        unsigned c = (unsigned)(nb - ch * CPU_CHUNK_BLOCKS < CPU_CHUNK_BLOCKS
                                    ? nb - ch * CPU_CHUNK_BLOCKS
                                    : CPU_CHUNK_BLOCKS);
        const uint8_t *s = src + ch * CPU_CHUNK_BYTES;
        uint8_t *d = dst + ch * CPU_CHUNK_BYTES;

        for (unsigned e = 0; e < 16 * c; e++) {
            unsigned byte, hi;
            uint8_t code = (s[e / 2] >> (4 * (e & 1))) & 0xF;
            chunk_pos(e, c, &byte, &hi);
            d[byte] |= (uint8_t)(code << (4 * hi));
        }
    }
}

/* A full-size copy of chunk CH of a row (zero-padded when it is the tail),
 * so that the SIMD kernels only ever see whole chunks.  Returns the pointer
 * to use: the row itself when the chunk is whole. */
static inline const uint8_t *chunk_bytes(const uint8_t *row, const uint8_t *srow, size_t nb,
                                         size_t ch, uint8_t *wbuf, uint8_t *sbuf,
                                         const uint8_t **sc)
{
    size_t c = nb - ch * CPU_CHUNK_BLOCKS;

    if (c >= CPU_CHUNK_BLOCKS) {
        *sc = srow + ch * CPU_CHUNK_BLOCKS;
        return row + ch * CPU_CHUNK_BYTES;
    }
    memset(wbuf, 0, CPU_CHUNK_BYTES);
    memset(sbuf, 0, CPU_CHUNK_BLOCKS);
    memcpy(wbuf, row + ch * CPU_CHUNK_BYTES, 4 * c);
    memcpy(wbuf + 64, row + ch * CPU_CHUNK_BYTES + 4 * c, 4 * c);
    memcpy(sbuf, srow + ch * CPU_CHUNK_BLOCKS, c);
    *sc = sbuf;
    return wbuf;
}

/* Activations for the float kernels: each row in the order of the weight
 * planes (chunk, step s, byte i = 4j + e), zero-padded to whole chunks. */
static void repack_x_row(const float *x, int64_t k, float *xr)
{
    size_t nch = chunks_of(k);

    memset(xr, 0, nch * CPU_CHUNK * sizeof(float));
    for (size_t i = 0; i < (size_t)k; i++) {
        size_t ch = i / CPU_CHUNK;
        unsigned e = (unsigned)(i % CPU_CHUNK), j = e / 16, r = e % 16;
        xr[ch * CPU_CHUNK + (r / 4) * 64 + 4 * j + r % 4] = x[i];
    }
}

/* E4M3 byte -> float; the registry's callers come through libquant's
 * validation, and upload rejects NaN and negative scales again (§8). */
static float e4m3_table[256];

static void e4m3_table_init(void)
{
    static int done;
    if (done)
        return;
    for (int i = 0; i < 256; i++)
        e4m3_table[i] = nvfp4_fp8_e4m3_decode((uint8_t)i);
    done = 1;
}

/* ---- scalar kernels ------------------------------------------------------ */

/* y[t*n + r] for tokens t0..t1 of row r; x in the file order. */
static void row_scalar(const cpu_kweight *w, int64_t r, const float *x, size_t t0, size_t t1,
                       float *y)
{
    const int64_t k = w->d.k, n = w->d.n;
    const size_t nb = (size_t)k / NVFP4_BLOCK;
    const uint8_t *row = w->packed + (size_t)r * (size_t)k / 2;
    const uint8_t *srow = w->scales + (size_t)r * nb;
    const float s2 = w->d.weight_scale_2;

    for (size_t t = t0; t < t1; t++) {
        const float *xt = x + t * (size_t)k;
        float acc = 0.0f;

        for (size_t b = 0; b < nb; b++) {
            size_t ch = b / CPU_CHUNK_BLOCKS;
            unsigned c = (unsigned)(nb - ch * CPU_CHUNK_BLOCKS < CPU_CHUNK_BLOCKS
                                        ? nb - ch * CPU_CHUNK_BLOCKS
                                        : CPU_CHUNK_BLOCKS);
            const uint8_t *cb = row + ch * CPU_CHUNK_BYTES;
            float sum = 0.0f;

            for (unsigned e = 0; e < 16; e++) {
                unsigned byte, hi;
                chunk_pos((unsigned)(b % CPU_CHUNK_BLOCKS) * 16 + e, c, &byte, &hi);
                sum += e2m1_f[(cb[byte] >> (4 * hi)) & 0xF] * xt[b * 16 + e];
            }
            /* §2's block scale: E4M3 times the global scale, rounded once */
            acc += sum * (e4m3_table[srow[b]] * s2);
        }
        y[t * (size_t)n + (size_t)r] = acc;
    }
}

#ifdef CPU_X86
/* ---- AVX2 float kernel --------------------------------------------------- */

/* Up to 8 tokens of one row; xr = repacked activations, stride kp floats. */
__attribute__((target("avx2,fma"))) static void
row_avx2(const cpu_kweight *w, int64_t r, const float *xr, size_t kp, size_t t0, size_t nt,
         float *y)
{
    const int64_t k = w->d.k, n = w->d.n;
    const size_t nb = (size_t)k / NVFP4_BLOCK, nch = chunks_of(k);
    const uint8_t *row = w->packed + (size_t)r * (size_t)k / 2;
    const uint8_t *srow = w->scales + (size_t)r * nb;
    const float s2 = w->d.weight_scale_2;
    const __m256 mag = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    const __m256i eight = _mm256_set1_epi32(8);
    __m256 acc[8];
    uint8_t wbuf[CPU_CHUNK_BYTES], sbuf[CPU_CHUNK_BLOCKS];

    for (size_t t = 0; t < nt; t++)
        acc[t] = _mm256_setzero_ps();
    for (size_t ch = 0; ch < nch; ch++) {
        const uint8_t *sc;
        const uint8_t *cb = chunk_bytes(row, srow, nb, ch, wbuf, sbuf, &sc);
        float bs[CPU_CHUNK_BLOCKS];

        for (int j = 0; j < CPU_CHUNK_BLOCKS; j++)
            bs[j] = e4m3_table[sc[j]] * s2;
        /* group g: bytes 8g..8g+7 of every step = blocks 2g and 2g+1 */
        for (int g = 0; g < 8; g++) {
            __m256 part[8];
            const __m256 scale =
                _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(bs[2 * g])),
                                     _mm_set1_ps(bs[2 * g + 1]), 1);

            for (size_t t = 0; t < nt; t++)
                part[t] = _mm256_setzero_ps();
            for (int p = 0; p < 2; p++) {
                __m128i b8 = _mm_loadl_epi64((const __m128i *)(cb + 64 * p + 8 * g));
                __m256i v = _mm256_cvtepu8_epi32(b8);
                for (int h = 0; h < 2; h++) {
                    __m256i nib = h ? _mm256_srli_epi32(v, 4) : v;
                    /* magnitude from the low 3 bits, sign from bit 3 */
                    __m256 m = _mm256_permutevar8x32_ps(mag, nib);
                    __m256i sg = _mm256_slli_epi32(_mm256_and_si256(nib, eight), 28);
                    __m256 code = _mm256_xor_ps(m, _mm256_castsi256_ps(sg));
                    size_t off = ch * CPU_CHUNK + (size_t)(2 * p + h) * 64 + 8 * (size_t)g;
                    for (size_t t = 0; t < nt; t++)
                        part[t] = _mm256_fmadd_ps(
                            code, _mm256_loadu_ps(xr + (t0 + t) * kp + off), part[t]);
                }
            }
            for (size_t t = 0; t < nt; t++)
                acc[t] = _mm256_fmadd_ps(part[t], scale, acc[t]);
        }
    }
    for (size_t t = 0; t < nt; t++) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[t]), _mm256_extractf128_ps(acc[t], 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        y[(t0 + t) * (size_t)n + (size_t)r] = _mm_cvtss_f32(s);
    }
}

/* ---- AVX-512 float kernel ------------------------------------------------ */

/* 16 E4M3 bytes -> float32 * s2.  The E4M3 bits placed in a half's fields
 * give value * 2^-8 exactly (subnormals included, and no float32
 * denormals), so one exact multiply by 256 recovers the E4M3 value before
 * the §2 product with the global scale. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static inline __m512
scales16_avx512(const uint8_t *sc, __m512 s2)
{
    __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)sc));
    __m256i h = _mm256_or_si256(
        _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7F)), 7),
        _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8));
    __m512 v = _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));
    return _mm512_mul_ps(v, s2);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static void
row_avx512(const cpu_kweight *w, int64_t r, const float *xr, size_t kp, size_t t0, size_t nt,
           float *y)
{
    const int64_t k = w->d.k, n = w->d.n;
    const size_t nb = (size_t)k / NVFP4_BLOCK, nch = chunks_of(k);
    const uint8_t *row = w->packed + (size_t)r * (size_t)k / 2;
    const uint8_t *srow = w->scales + (size_t)r * nb;
    const __m512 s2 = _mm512_set1_ps(w->d.weight_scale_2);
    const __m512 lut = _mm512_loadu_ps(e2m1_f);
    __m512 acc[8];
    uint8_t wbuf[CPU_CHUNK_BYTES], sbuf[CPU_CHUNK_BLOCKS];

    for (size_t t = 0; t < nt; t++)
        acc[t] = _mm512_setzero_ps();
    for (size_t ch = 0; ch < nch; ch++) {
        const uint8_t *sc;
        const uint8_t *cb = chunk_bytes(row, srow, nb, ch, wbuf, sbuf, &sc);
        const __m512 bs = scales16_avx512(sc, s2);
        const float *xc = xr + t0 * kp + ch * CPU_CHUNK;

        /* quarter q: bytes 16q..16q+15 of every step = blocks 4q..4q+3 */
        for (int q = 0; q < 4; q++) {
            const __m512i sel = _mm512_set_epi32(4 * q + 3, 4 * q + 3, 4 * q + 3, 4 * q + 3,
                                                 4 * q + 2, 4 * q + 2, 4 * q + 2, 4 * q + 2,
                                                 4 * q + 1, 4 * q + 1, 4 * q + 1, 4 * q + 1,
                                                 4 * q, 4 * q, 4 * q, 4 * q);
            const __m512 scale = _mm512_permutexvar_ps(sel, bs);
            __m512 part[8];

            for (size_t t = 0; t < nt; t++)
                part[t] = _mm512_setzero_ps();
            for (int p = 0; p < 2; p++) {
                __m512i v = _mm512_cvtepu8_epi32(
                    _mm_loadu_si128((const __m128i *)(cb + 64 * p + 16 * q)));
                /* vpermps reads only the low 4 index bits: no mask needed */
                __m512 c0 = _mm512_permutexvar_ps(v, lut);
                __m512 c1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut);
                const float *x0 = xc + (size_t)(2 * p) * 64 + 16 * (size_t)q;
                for (size_t t = 0; t < nt; t++) {
                    part[t] = _mm512_fmadd_ps(c0, _mm512_loadu_ps(x0 + t * kp), part[t]);
                    part[t] = _mm512_fmadd_ps(c1, _mm512_loadu_ps(x0 + 64 + t * kp), part[t]);
                }
            }
            for (size_t t = 0; t < nt; t++)
                acc[t] = _mm512_fmadd_ps(part[t], scale, acc[t]);
        }
    }
    for (size_t t = 0; t < nt; t++)
        y[(t0 + t) * (size_t)n + (size_t)r] = _mm512_reduce_add_ps(acc[t]);
}

/* ---- AVX-512 VNNI int8 kernel (W4A4) ------------------------------------- */

/* Activations quantized for the int8 kernel, per token and chunk: 256 int8
 * codes (2 * E2M1, in the plane order), per block the float32 factor
 * (s / gs) / 4 of §5 (the /4 undoes the two doublings) and 12 * the sum of
 * the block's codes (weights are fed to vpdpbusd as unsigned 2*code + 12). */
typedef struct {
    int8_t *q;          /* [m, nch * 256] */
    float *xs;          /* [m, nch * 16] */
    int32_t *corr;      /* [m, nch * 16] */
} act_q8;

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) static void
row_vnni(const cpu_kweight *w, int64_t r, const act_q8 *a, size_t nch, size_t t0, size_t nt,
         float *y)
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
    uint8_t wbuf[CPU_CHUNK_BYTES], sbuf[CPU_CHUNK_BLOCKS];

    for (size_t t = 0; t < nt; t++)
        acc[t] = _mm512_setzero_ps();
    for (size_t ch = 0; ch < nch; ch++) {
        const uint8_t *sc;
        const uint8_t *cb = chunk_bytes(row, srow, nb, ch, wbuf, sbuf, &sc);
        const __m512 ws = scales16_avx512(sc, s2);
        __m512i p0 = _mm512_loadu_si512((const void *)cb);
        __m512i p1 = _mm512_loadu_si512((const void *)(cb + 64));
        __m512i w0 = _mm512_shuffle_epi8(lut, _mm512_and_si512(p0, lo4));
        __m512i w1 = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(p0, 4), lo4));
        __m512i w2 = _mm512_shuffle_epi8(lut, _mm512_and_si512(p1, lo4));
        __m512i w3 = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(p1, 4), lo4));

        for (size_t t = 0; t < nt; t++) {
            const size_t tc = (t0 + t) * nch + ch;
            const int8_t *xq = a->q + tc * CPU_CHUNK;
            __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w0,
                                            _mm512_loadu_si512((const void *)xq));
            s = _mm512_dpbusd_epi32(s, w1, _mm512_loadu_si512((const void *)(xq + 64)));
            s = _mm512_dpbusd_epi32(s, w2, _mm512_loadu_si512((const void *)(xq + 128)));
            s = _mm512_dpbusd_epi32(s, w3, _mm512_loadu_si512((const void *)(xq + 192)));
            /* exact: sum of 16 products of 2*codes per lane = one block */
            s = _mm512_sub_epi32(s, _mm512_loadu_si512((const void *)(a->corr + tc * 16)));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
                                     _mm512_mul_ps(ws, _mm512_loadu_ps(a->xs + tc * 16)),
                                     acc[t]);
        }
    }
    for (size_t t = 0; t < nt; t++)
        y[(t0 + t) * (size_t)n + (size_t)r] = _mm512_reduce_add_ps(acc[t]);
}
#endif /* CPU_X86 */

/* §5 for one row, returning the codes the int8 kernel wants.  The values
 * come from libquant's nvfp4_quant_qdq_row (the one implementation of the
 * formula); the block scale s is recomputed from the row exactly as that
 * formula does, and each code is x' / (s / gs), which is exact because x' is
 * a grid value times s / gs rounded once. */
static void quantize_row_q8(const float *x, size_t k, float input_scale, float *tmp,
                            int8_t *q, float *xs, int32_t *corr)
{
    const float gs = 1.0f / input_scale;
    const float sixth = 1.0f / 6.0f;
    const size_t nch = chunks_of((int64_t)k);

    nvfp4_quant_qdq_row(x, k, input_scale, tmp);
    memset(q, 0, nch * CPU_CHUNK);
    memset(xs, 0, nch * CPU_CHUNK_BLOCKS * sizeof(float));
    memset(corr, 0, nch * CPU_CHUNK_BLOCKS * sizeof(int32_t));
    for (size_t b = 0; b < k / NVFP4_BLOCK; b++) {
        const float *xb = x + b * NVFP4_BLOCK;
        size_t ch = b / CPU_CHUNK_BLOCKS, j = b % CPU_CHUNK_BLOCKS;
        float amax = 0.0f, t, s, back;
        int32_t sum = 0;

        for (int e = 0; e < NVFP4_BLOCK; e++)
            amax = fmaxf(amax, fabsf(xb[e]));
        t = gs * (amax * sixth);
        s = nvfp4_fp8_e4m3_decode(nvfp4_fp8_e4m3_encode(t));
        back = s / gs;
        for (int e = 0; e < NVFP4_BLOCK; e++) {
            float v = back != 0.0f ? tmp[b * NVFP4_BLOCK + e] / back : 0.0f;
            long c = lrintf(2.0f * v);
            if (c > 12)
                c = 12;
            if (c < -12)
                c = -12;
            q[ch * CPU_CHUNK + (size_t)(e / 4) * 64 + 4 * j + (size_t)(e % 4)] = (int8_t)c;
            sum += (int32_t)c;
        }
        xs[ch * CPU_CHUNK_BLOCKS + j] = back * 0.25f;
        corr[ch * CPU_CHUNK_BLOCKS + j] = 12 * sum;
    }
}

/* ---- dense (F32 / BF16 / F16) -------------------------------------------- */

static inline float dense_at(const cpu_dense_part *p, size_t i)
{
    switch (p->dtype) {
    case NVFP4_DTYPE_F32: return ((const float *)p->data)[i];
    case NVFP4_DTYPE_BF16: return nvfp4_bf16_decode(((const uint16_t *)p->data)[i]);
    default: return nvfp4_f16_decode(((const uint16_t *)p->data)[i]);
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
                             size_t nt, float *y)
{
    int64_t lr;
    const cpu_dense_part *p = dense_row(w, r, &lr);
    const size_t k = (size_t)w->d.k, base = (size_t)lr * k;

    for (size_t t = t0; t < t0 + nt; t++) {
        float acc = 0.0f;
        for (size_t i = 0; i < k; i++)
            acc += dense_at(p, base + i) * x[t * k + i];
        y[t * (size_t)w->d.n + (size_t)r] = acc;
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

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) static void
dense_row_avx512(const cpu_kweight *w, int64_t r, const float *x, size_t t0, size_t nt,
                 float *y)
{
    int64_t lr;
    const cpu_dense_part *p = dense_row(w, r, &lr);
    const size_t k = (size_t)w->d.k, base = (size_t)lr * k;
    __m512 acc[8];

    for (size_t t = 0; t < nt; t++)
        acc[t] = _mm512_setzero_ps();
    for (size_t i = 0; i < k; i += 16) {
        __mmask16 mk = k - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k - i)) - 1);
        __m512 wv = dense_load16(p, base + i, mk);
        for (size_t t = 0; t < nt; t++)
            acc[t] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(mk, x + (t0 + t) * k + i),
                                     acc[t]);
    }
    for (size_t t = 0; t < nt; t++)
        y[(t0 + t) * (size_t)w->d.n + (size_t)r] = _mm512_reduce_add_ps(acc[t]);
}
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

void cpu_kweight_free(void *ctx, void *kw)
{
    cpu_kweight *w = kw;

    (void)ctx;
    if (!w)
        return;
    free(w->packed);
    free(w->scales);
    free(w->dense);
    free(w->parts);
    free(w->bias);
    free(w);
}

void *cpu_kweight_upload(void *ctx, const nvfp4_linear *parts, size_t nparts,
                         const nvfp4_kweight_desc *desc, nvfp4_error *err)
{
    cpu_kweight *w = calloc(1, sizeof(*w));
    const size_t k = (size_t)desc->k;

    (void)ctx;
    e4m3_table_init();
    if (!w)
        goto nomem;
    w->d = *desc;
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
        return w;
    }

    /* NVFP4: repack the nibbles, gather the scales of all parts */
    w->packed = cpu_aligned_alloc((size_t)desc->n * (k / 2));
    w->scales = cpu_aligned_alloc((size_t)desc->n * (k / NVFP4_BLOCK));
    if (!w->packed || !w->scales)
        goto nomem;
    {
        size_t r0 = 0;
        for (size_t i = 0; i < nparts; i++) {
            const nvfp4_linear *p = &parts[i];
            const size_t nsc = (size_t)p->n * (k / NVFP4_BLOCK);

            /* §8: NaN and negative non-zero block scales are invalid; libquant
             * rejects them at load, a hand-made nvfp4_linear is checked here */
            for (size_t j = 0; j < nsc; j++) {
                uint8_t b = p->scales[j];
                if ((b & 0x7F) == 0x7F || b > 0x80) {
                    nvfp4_error_set(err, NVFP4_ERR_INVALID, "", p->prefix, -1,
                                    "weight_scale of row %zu, block %zu is 0x%02X (%s); "
                                    "expected a finite non-negative E4M3 value",
                                    j / (k / NVFP4_BLOCK), j % (k / NVFP4_BLOCK), b,
                                    (b & 0x7F) == 0x7F ? "NaN" : "negative");
                    goto fail;
                }
            }
            memcpy(w->scales + r0 * (k / NVFP4_BLOCK), p->scales, nsc);
#pragma omp parallel for schedule(static)
            for (int64_t r = 0; r < p->n; r++)
                repack_row(p->weight + (size_t)r * (k / 2), desc->k,
                           w->packed + (r0 + (size_t)r) * (k / 2));
            r0 += (size_t)p->n;
        }
    }
    return w;

nomem:
    nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", parts[0].prefix, -1,
                    "out of memory uploading a [%lld, %lld] weight", (long long)desc->n,
                    (long long)desc->k);
fail:
    cpu_kweight_free(ctx, w);
    return NULL;
}

/* ---- the product ---------------------------------------------------------- */

#define TOK_TILE 8

/* Rows per work item: enough that a tile of weights stays in L2 while every
 * token tile passes over it, few enough that two threads get balanced work. */
static int64_t row_tile(const cpu_kweight *w, size_t m)
{
    int64_t rt;
    if (m <= TOK_TILE)
        return 16;
    rt = (int64_t)(256 * 1024 / ((size_t)w->d.k / 2 + 1));
    if (rt < 8)
        rt = 8;
    if (rt > 256)
        rt = 256;
    return rt;
}

nvfp4_status cpu_linear(void *vctx, void *kw, const nvfp4_kweight_desc *desc,
                        const float *x, size_t m, float *y, nvfp4_error *err)
{
    cpu_ctx *ctx = vctx;
    cpu_kweight *w = kw;
    const size_t k = (size_t)desc->k, n = (size_t)desc->n, nch = chunks_of(desc->k);
    const size_t kp = nch * CPU_CHUNK;
    const int nth = cpu_nthreads(ctx);
    const int64_t rt = row_tile(w, m);
    const int64_t ntiles = ((int64_t)n + rt - 1) / rt;
    cpu_isa isa = ctx->isa;
    float *xr = NULL, *tmp = NULL;
    act_q8 a = {NULL, NULL, NULL};
    const float *xin = x;

    (void)nth;
    if (desc->scheme == NVFP4_SCHEME_NONE) {
#pragma omp parallel for schedule(static) num_threads(nth)
        for (int64_t tile = 0; tile < ntiles; tile++) {
            for (size_t t0 = 0; t0 < m; t0 += TOK_TILE) {
                size_t nt = m - t0 < TOK_TILE ? m - t0 : TOK_TILE;
                for (int64_t r = tile * rt; r < (tile + 1) * rt && r < (int64_t)n; r++) {
#ifdef CPU_X86
                    if (isa >= CPU_ISA_AVX512)
                        dense_row_avx512(w, r, x, t0, nt, y);
                    else
#endif
                        dense_row_scalar(w, r, x, t0, nt, y);
                }
            }
        }
        goto bias;
    }

    if (desc->scheme == NVFP4_SCHEME_W4A4 && isa == CPU_ISA_VNNI) {
        a.q = cpu_aligned_alloc(m * kp);
        a.xs = cpu_aligned_alloc(m * nch * CPU_CHUNK_BLOCKS * sizeof(float));
        a.corr = cpu_aligned_alloc(m * nch * CPU_CHUNK_BLOCKS * sizeof(int32_t));
        tmp = cpu_aligned_alloc((size_t)nth * k * sizeof(float));
        if (!a.q || !a.xs || !a.corr || !tmp)
            goto nomem;
#pragma omp parallel for schedule(static) num_threads(nth)
        for (size_t t = 0; t < m; t++) {
            int me = 0;
#ifdef _OPENMP
            me = omp_get_thread_num();
#endif
            quantize_row_q8(x + t * k, k, desc->input_scale, tmp + (size_t)me * k,
                            a.q + t * kp, a.xs + t * nch * CPU_CHUNK_BLOCKS,
                            a.corr + t * nch * CPU_CHUNK_BLOCKS);
        }
    } else {
        if (desc->scheme == NVFP4_SCHEME_W4A4) {
            /* §5 via libquant, then the float product */
            tmp = cpu_aligned_alloc(m * k * sizeof(float));
            if (!tmp)
                goto nomem;
#pragma omp parallel for schedule(static) num_threads(nth)
            for (size_t t = 0; t < m; t++)
                nvfp4_quant_qdq_row(x + t * k, k, desc->input_scale, tmp + t * k);
            xin = tmp;
        }
        if (isa >= CPU_ISA_AVX2) {
            xr = cpu_aligned_alloc(m * kp * sizeof(float));
            if (!xr)
                goto nomem;
#pragma omp parallel for schedule(static) num_threads(nth)
            for (size_t t = 0; t < m; t++)
                repack_x_row(xin + t * k, desc->k, xr + t * kp);
        }
    }

#pragma omp parallel for schedule(static) num_threads(nth)
    for (int64_t tile = 0; tile < ntiles; tile++) {
        for (size_t t0 = 0; t0 < m; t0 += TOK_TILE) {
            size_t nt = m - t0 < TOK_TILE ? m - t0 : TOK_TILE;
            for (int64_t r = tile * rt; r < (tile + 1) * rt && r < (int64_t)n; r++) {
#ifdef CPU_X86
                if (a.q)
                    row_vnni(w, r, &a, nch, t0, nt, y);
                else if (isa >= CPU_ISA_AVX512)
                    row_avx512(w, r, xr, kp, t0, nt, y);
                else if (isa == CPU_ISA_AVX2)
                    row_avx2(w, r, xr, kp, t0, nt, y);
                else
#endif
                    row_scalar(w, r, xin, t0, t0 + nt, y);
            }
        }
    }
    free(xr);
    free(tmp);
    free(a.q);
    free(a.xs);
    free(a.corr);

bias:
    if (w->bias) {
#pragma omp parallel for schedule(static) num_threads(nth)
        for (size_t t = 0; t < m; t++)
            for (size_t r = 0; r < n; r++)
                y[t * n + r] += w->bias[r];
    }
    return NVFP4_OK;

nomem:
    free(xr);
    free(tmp);
    free(a.q);
    free(a.xs);
    free(a.corr);
    return nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", "linear", -1,
                           "out of memory for the activations of %zu tokens x %zu", m, k);
}

/* ---- embedding ------------------------------------------------------------- */

nvfp4_status cpu_embed(void *vctx, void *kw, const nvfp4_kweight_desc *desc,
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
            cpu_dense_part dp = {w->parts[p].dense->data, w->parts[p].dense->dtype, 0};
            for (size_t j = 0; j < k; j++)
                y[i * k + j] = dense_at(&dp, (size_t)r * k + j);
        } else {
            /* exactly §2, by libquant */
            nvfp4_quant_dequant_row(w->parts[p].weight + (size_t)r * (k / 2),
                                    w->parts[p].scales + (size_t)r * (k / NVFP4_BLOCK),
                                    desc->weight_scale_2, k, y + i * k);
        }
    }
    return NVFP4_OK;
}
