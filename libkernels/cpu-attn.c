/* SPDX-License-Identifier: MIT */
/* The CPU backend's attention: causal grouped-query attention through the
 * block tables of a paged KV cache, float32 or FP8 (E4M3) pools
 * (nvfp4k_cpu_attention_paged()), and the contiguous cache's attention as
 * the paged one over an identity block table (nvfp4k_cpu_attention()).
 * Scalar, AVX2 (+FMA: attend_group8, for decode and prefill rows alike),
 * AVX-512 and, for a prefill's rows, key-transposed AVX-512 paths, chosen
 * by the context's ISA level; every (row, head) is reduced by one thread
 * in position order, so results do not depend on the thread count or on
 * the other rows of the call.  Each path has its own fixed arithmetic
 * (sums in 1, 8 or 16 lanes; libm's expf, or exp8 / exp16, one function
 * with the same bits): within a path a row's bits are the same in a
 * prefill and in a decode step, across paths they differ by roundings. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-internal.h"
#include "numerics.h" /* E4M3 codec of FP8 KV pools: libquant/numerics.h */

static float dot_scalar(const float *a, const float *b, size_t n)
{
    float s = 0.0f;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* ---- paged attention ------------------------------------------------------- */

/* Address of position P of a sequence: slot P % block of block TAB[P / block]. */
static inline const float *page_row(const float *pool, const int32_t *tab, size_t block,
                                    size_t kvw, size_t p)
{
    return pool + ((size_t)tab[p / block] * block + p % block) * kvw;
}

/* page_row for FP8 pools: one byte an element. */
static inline const uint8_t *page_row8(const uint8_t *pool, const int32_t *tab, size_t block,
                                       size_t kvw, size_t p)
{
    return pool + ((size_t)tab[p / block] * block + p % block) * kvw;
}

static void pwsum_scalar(float *out, const float *w, float inv, const float *pool,
                         const int32_t *tab, size_t block, size_t kvw, size_t off,
                         size_t first, size_t len, size_t n)
{
    memset(out, 0, n * sizeof(float));
    for (size_t p = first; p < len; p++) {
        const float wgt = w[p] * inv;
        const float *vp = page_row(pool, tab, block, kvw, p) + off;
        for (size_t d = 0; d < n; d++)
            out[d] += wgt * vp[d];
    }
}


/* One (row, head) without SIMD: scores of QI against the keys of positions
 * first .. len-1 (found through TAB in KPOOL), a numerically safe softmax
 * (max subtracted) in float32, and the weighted sum of the values into O,
 * in position order.  SC holds len scores.  (AVX-512: attend_group().) */
static void attend_head(const float *qi, float *o, const float *kpool, const float *vpool,
                        const int32_t *tab, size_t bs, size_t kvw, size_t off, size_t first,
                        size_t len, size_t hd, float scale, const float *sink, float *sc)
{
    float mx = -INFINITY, sum = 0.0f, inv;

    for (size_t p = first; p < len; p++) {
        const float *kr = page_row(kpool, tab, bs, kvw, p) + off;
        sc[p] = dot_scalar(qi, kr, hd) * scale;
        if (sc[p] > mx)
            mx = sc[p];
    }
    if (sink && *sink > mx) /* transformers: cat, minus the max, softmax */
        mx = *sink;
    for (size_t p = first; p < len; p++) {
        sc[p] = expf(sc[p] - mx);
        sum += sc[p];
    }
    if (sink) /* gpt-oss: the head's sink, one more logit with no value */
        sum += expf(*sink - mx);
    inv = 1.0f / sum;
    pwsum_scalar(o, sc, inv, vpool, tab, bs, kvw, off, first, len, hd);
}

/* Query heads attended together that share a KV head (grouped-query
 * attention): each key and value row is loaded once for all of them. */
#define ATTN_GROUP 4

#ifdef CPU_HAVE_X86
/* Positions ahead whose key and value rows are prefetched: a head's rows
 * are hd floats nkv * hd apart in the pool, a pattern the hardware
 * prefetchers follow poorly, and the first pass over a decode step's
 * context waited on every key's load from memory (perf).  Keys go to L1
 * for the scores, values to L2 for the weighted sum that follows. */
#define ATTN_PREFETCH 32

#include "cpu-exp16.h"
#include "cpu-exp8.h"
#include "cpu-lanes16.h"

/* A walk over the rows of positions first, first + 1, ... of a block table
 * (page_row() without a division per row). */
typedef struct {
    const int32_t *tab;
    size_t bs, blk, in;
} page_walk;

static inline page_walk page_walk_at(const int32_t *tab, size_t bs, size_t p)
{
    page_walk w = {tab, bs, p / bs, p % bs};
    return w;
}

/* The row index of the walk's position; then on to the next. */
static inline size_t page_walk_next(page_walk *w)
{
    const size_t r = (size_t)w->tab[w->blk] * w->bs + w->in;
    if (++w->in == w->bs)
        w->in = 0, w->blk++;
    return r;
}

/* FP8 pools read inside attend_group(): the keys of 16 positions at a time
 * and the values of 16 positions, 64 of their elements at a time,
 * dequantized (fp8_rows) into scratch that stays in L1, where the prefill
 * path dequantizes a sequence's rows once into scratch of the whole context
 * (fp8_gather_kv). */
typedef struct {
    const uint8_t *k, *v; /* the pools */
    float ks, vs;         /* their scales */
    int wide;             /* attn_job.wide */
    float *kbuf, *vbuf;   /* 16 rows of hd floats, 16 rows of 64 */
} attn_fp8;

static void fp8_rows(int wide, float *out, const uint8_t *pool, const int32_t *tab, size_t bs,
                     size_t kvw, size_t off, size_t first, size_t len, size_t n, float scale);

/* The key rows of positions P0 .. P0+C-1 (of LEN) for a group's scores
 * into KR, through the walk WK (F8: dequantized into f8->kbuf first); with
 * PF, the key rows ATTN_PREFETCH positions on asked for through the walk
 * WP, and for FP8 pools the value rows too.  Shared by the AVX-512 and
 * AVX2 paths.  Float32 value rows are asked for in attend_pv, as many
 * positions ahead of their weighted sum: asked for here, during the
 * scores, they held line fill buffers long before their use and, beyond
 * about 2 MB of a head's keys and values, left the L2 before it
 * (`bench-kernels -A 512,4096`, float32 pools, session 37: the Llama-3.2-1B
 * shape at 4096 positions 2.84 -> 2.45 ms at 1 thread, 1.43 -> 1.30 at 2;
 * Llama-3-8B 5.91 -> 5.30 / 3.04 -> 2.76; SmolLM2 0.80 -> 0.73 / 0.53 ->
 * 0.48; at 512 positions SmolLM2 the same, the others 7-13 % faster; the
 * AVX2 path on the same Xeon at 4096 positions 1.06 -> 0.78, 5.24 ->
 * 3.77, 11.2 -> 8.3 ms). */
static inline __attribute__((always_inline)) void
key_rows(const float **kr, const float *kpool, const float *vpool, const int32_t *tab, size_t bs,
         size_t kvw, size_t off, size_t p0, size_t c, size_t len, size_t hd, int pf,
         const attn_fp8 *f8, page_walk *wk, page_walk *wp)
{
    if (f8)
        fp8_rows(f8->wide, f8->kbuf, f8->k, tab, bs, kvw, off, p0, p0 + c, hd, f8->ks);
    for (size_t l = 0; l < c; l++) {
        kr[l] = f8 ? f8->kbuf + l * hd : kpool + page_walk_next(wk) * kvw + off;
        if (pf && p0 + l + ATTN_PREFETCH < len) {
            const size_t rn = page_walk_next(wp) * kvw + off;
            const size_t esz = f8 ? 1 : sizeof(float);
            const char *kn = f8 ? (const char *)(f8->k + rn) : (const char *)(kpool + rn);
            const char *vn = f8 ? (const char *)(f8->v + rn) : (const char *)(vpool + rn);
            for (size_t b = 0; b < hd * esz; b += 64) {
                _mm_prefetch(kn + b, _MM_HINT_T0);
                if (f8)
                    _mm_prefetch(vn + b, _MM_HINT_T1);
            }
        }
    }
}

/* Softmax weights below e^ATTN_EXP_FLOOR of the largest (1.6e-28) are 0:
 * they change no float32 sum of weighted values that is not itself that
 * small.  Below e^-87.3 they were subnormal, as were their products, and
 * each vector operation on a subnormal takes a microcode assist on x86: a
 * prefill of 512 rows at the SmolLM2 shape whose scores spread over a few
 * hundred took 45 ms a layer against 5.5 (1 thread, queries scaled by
 * 400).  From e^-64, times 1 / sum >= 2^-31, a weight stays normal. */
#define ATTN_EXP_FLOOR (-64.0f)

/* Once the scores of G query heads are in SC (G rows of MAXLEN,
 * positions FIRST .. LEN - 1) and MXV holds their maxima in 16 lanes: the
 * softmax in place (weights below e^ATTN_EXP_FLOOR 0). */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
attend_softmax(size_t first, size_t len, const float *sink, float *sc, size_t maxlen,
               const int G, const __m512 *mxv)
{
    const __m512 floor = _mm512_set1_ps(ATTN_EXP_FLOOR);
    float mx[ATTN_GROUP];

    for (int g = 0; g < G; g++) {
        float *scg = sc + (size_t)g * maxlen;
        __m512 acc = _mm512_setzero_ps(), m, inv;
        float sum;

        mx[g] = _mm512_reduce_max_ps(mxv[g]);
        if (sink && sink[g] > mx[g]) /* transformers: cat, minus the max, softmax */
            mx[g] = sink[g];
        m = _mm512_set1_ps(mx[g]);
        for (size_t p0 = first; p0 < len; p0 += 16) {
            const __mmask16 mk = lanes16(len - p0);
            const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(mk, scg + p0), m);
            /* below ATTN_EXP_FLOOR 0 (a NaN kept), and exp16 of the floor
             * there, so that no lane makes a subnormal whether or not the
             * compiler folds the mask into exp16's last operation */
            const __mmask16 keep = mk & (__mmask16)~_mm512_cmp_ps_mask(x, floor, _CMP_LT_OQ);
            const __m512 e = _mm512_maskz_mov_ps(keep, exp16(_mm512_max_ps(floor, x)));
            _mm512_mask_storeu_ps(scg + p0, mk, e);
            acc = _mm512_add_ps(acc, e);
        }
        sum = _mm512_reduce_add_ps(acc);
        /* gpt-oss: the head's sink, one more logit with no value */
        if (sink && !(sink[g] - mx[g] < ATTN_EXP_FLOOR))
            sum += _mm512_cvtss_f32(exp16(_mm512_set1_ps(sink[g] - mx[g])));
        inv = _mm512_set1_ps(1.0f / sum);
        for (size_t p0 = first; p0 < len; p0 += 16) {
            const __mmask16 mk = lanes16(len - p0);
            _mm512_mask_storeu_ps(scg + p0, mk,
                                  _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, scg + p0), inv));
        }
    }
}

/* The weighted sum of the values of positions P0 .. P1 - 1 into O (G
 * heads' rows of HD) with the weights in SC: each output's sum in position
 * order, from 0, or (ACC) from what O holds, a sum that stopped at P0 (the
 * same operations as one pass over all the positions).  TAB NULL: position
 * p's row at VPOOL + p KVW (a prefill block's gathered values).  PF: rows
 * read from a float32 pool through TAB prefetched ATTN_PREFETCH positions
 * ahead (see key_rows). */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
attend_pv(float *o, const float *vpool, const int32_t *tab, size_t bs, size_t kvw, size_t off,
          size_t p0s, size_t p1, size_t hd, const float *sc, size_t maxlen, const attn_fp8 *f8,
          const int G, int acc, int pf)
{
    page_walk wval = {0}, wpf = {0};

    _Static_assert(ATTN_GROUP == 4, "attend_pv names four heads' accumulators");
    for (size_t d0 = 0; d0 < hd; d0 += 64) {
        const size_t nd = hd - d0 < 64 ? hd - d0 : 64;
        const __mmask16 m0 = lanes16(nd), m1 = lanes16(nd > 16 ? nd - 16 : 0),
                        m2 = lanes16(nd > 32 ? nd - 32 : 0), m3 = lanes16(nd > 48 ? nd - 48 : 0);
        /* head g's 64 dimensions in a<g>0 .. a<g>3: as an array (1 KB) GCC kept
         * them in registers but stored all sixteen to the stack at every
         * position, twice the FMAs' cycles on the one store port */
        __m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;
        __m512 a10 = a00, a11 = a00, a12 = a00, a13 = a00;
        __m512 a20 = a00, a21 = a00, a22 = a00, a23 = a00;
        __m512 a30 = a00, a31 = a00, a32 = a00, a33 = a00;
/* OP for each head with its accumulators */
#define PV_HEADS(OP)                                                                               \
    do {                                                                                           \
        OP(0, a00, a01, a02, a03);                                                                 \
        OP(1, a10, a11, a12, a13);                                                                 \
        OP(2, a20, a21, a22, a23);                                                                 \
        OP(3, a30, a31, a32, a33);                                                                 \
    } while (0)

#define PV_LOAD(G_, A0, A1, A2, A3)                                                                \
    do {                                                                                           \
        if ((G_) < G) {                                                                            \
            const float *og = o + (size_t)(G_) * hd + d0;                                          \
            A0 = _mm512_maskz_loadu_ps(m0, og);                                                    \
            A1 = _mm512_maskz_loadu_ps(m1, og + 16);                                               \
            A2 = _mm512_maskz_loadu_ps(m2, og + 32);                                               \
            A3 = _mm512_maskz_loadu_ps(m3, og + 48);                                               \
        }                                                                                          \
    } while (0)
        if (acc)
            PV_HEADS(PV_LOAD);
#undef PV_LOAD
        if (tab)
            wval = page_walk_at(tab, bs, p0s);
        pf = pf && tab && !f8;
        if (pf)
            wpf = page_walk_at(tab, bs, p0s + ATTN_PREFETCH);
        for (size_t p0 = p0s; p0 < p1; p0 += 16) {
            const size_t c = p1 - p0 < 16 ? p1 - p0 : 16;

            if (f8)
                fp8_rows(f8->wide, f8->vbuf, f8->v, tab, bs, kvw, off + d0, p0, p0 + c, nd,
                         f8->vs);
            for (size_t l = 0; l < c; l++) {
                if (pf && p0 + l + ATTN_PREFETCH < p1) {
                    const char *vn = (const char *)(vpool + page_walk_next(&wpf) * kvw + off + d0);
                    for (size_t b = 0; b < nd * sizeof(float); b += 64)
                        _mm_prefetch(vn + b, _MM_HINT_T0);
                }
                const float *vp =
                    f8    ? f8->vbuf + l * nd
                    : tab ? vpool + page_walk_next(&wval) * kvw + off + d0
                          : vpool + (p0 + l) * kvw + off + d0;
                const __m512 v0 = _mm512_maskz_loadu_ps(m0, vp);
                const __m512 v1 = nd > 16 ? _mm512_maskz_loadu_ps(m1, vp + 16) : v0;
                const __m512 v2 = nd > 32 ? _mm512_maskz_loadu_ps(m2, vp + 32) : v0;
                const __m512 v3 = nd > 48 ? _mm512_maskz_loadu_ps(m3, vp + 48) : v0;
/* head G_'s weight of this position times its values */
#define PV_HEAD(G_, A0, A1, A2, A3)                                                                \
    do {                                                                                           \
        if ((G_) < G) {                                                                            \
            const __m512 wv = _mm512_set1_ps(sc[(size_t)(G_) * maxlen + p0 + l]);                 \
            A0 = _mm512_fmadd_ps(wv, v0, A0);                                                      \
            if (nd > 16)                                                                           \
                A1 = _mm512_fmadd_ps(wv, v1, A1);                                                  \
            if (nd > 32)                                                                           \
                A2 = _mm512_fmadd_ps(wv, v2, A2);                                                  \
            if (nd > 48)                                                                           \
                A3 = _mm512_fmadd_ps(wv, v3, A3);                                                  \
        }                                                                                          \
    } while (0)
                PV_HEADS(PV_HEAD);
#undef PV_HEAD
            }
        }
#define PV_STORE(G_, A0, A1, A2, A3)                                                               \
    do {                                                                                           \
        if ((G_) < G) {                                                                            \
            float *og = o + (size_t)(G_) * hd + d0;                                                \
            _mm512_mask_storeu_ps(og, m0, A0);                                                     \
            _mm512_mask_storeu_ps(og + 16, m1, A1);                                                \
            _mm512_mask_storeu_ps(og + 32, m2, A2);                                                \
            _mm512_mask_storeu_ps(og + 48, m3, A3);                                                \
        }                                                                                          \
    } while (0)
        PV_HEADS(PV_STORE);
#undef PV_STORE
    }
#undef PV_HEADS
}

/* The rest of attend_group_body() once the scores of G query heads are in
 * SC (G rows of MAXLEN) and MXV holds their maxima in 16 lanes: the
 * softmax and the weighted sum of the values into O. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
attend_tail(float *o, const float *vpool, const int32_t *tab, size_t bs, size_t kvw, size_t off,
            size_t first, size_t len, size_t hd, const float *sink, float *sc, size_t maxlen,
            const attn_fp8 *f8, const int G, const __m512 *mxv, int pf)
{
    attend_softmax(first, len, sink, sc, maxlen, G, mxv);
    attend_pv(o, vpool, tab, bs, kvw, off, first, len, hd, sc, maxlen, f8, G, 0, pf);
}

/* The scores of G query heads Q (rows of HD) against the C <= 16 key rows
 * KR (lanes under MK) into SC (G rows of MAXLEN from the first position's
 * place), and their maxima into MXV: each a dot product in one
 * accumulator (lane j: dimensions j, j + 16, ... in order) whose lanes
 * sum16x16() adds, times SCALE (attend_group_body, attend_heads_body). */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
scores16(const float *q, const float *const *kr, size_t c, __mmask16 mk, size_t hd, float scale,
         float *sc, size_t maxlen, const int G, __m512 *mxv)
{
    for (int g = 0; g < G; g++) {
        const float *qi = q + (size_t)g * hd;
        __m512 u[16], s;

#pragma GCC unroll 16
        for (size_t l = 0; l < 16; l++) {
            __m512 s0 = _mm512_setzero_ps();
            size_t i = 0;

            if (l >= c) {
                u[l] = s0;
                continue;
            }
            /* lane j: dimensions j, j + 16, j + 32, ... in order (the
             * 16 positions' chains run side by side) */
            for (; i + 16 <= hd; i += 16)
                s0 = _mm512_fmadd_ps(_mm512_loadu_ps(qi + i), _mm512_loadu_ps(kr[l] + i), s0);
            if (i < hd) {
                const __mmask16 mi = lanes16(hd - i);
                s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mi, qi + i),
                                     _mm512_maskz_loadu_ps(mi, kr[l] + i), s0);
            }
            u[l] = s0;
        }
        s = _mm512_mul_ps(sum16x16(u), _mm512_set1_ps(scale));
        _mm512_mask_storeu_ps(sc + (size_t)g * maxlen, mk, s);
        /* a NaN score (first operand) leaves the max as it was */
        mxv[g] = _mm512_mask_max_ps(mxv[g], mk, s, mxv[g]);
    }
}

/* Attention of G query heads of one KV head (AVX-512; every wide path,
 * float32 and FP8 pools, grouped or not, runs it, so their bits agree):
 * the scores of 16 positions at a time, each a dot product in one
 * accumulator (lane j: dimensions j, j + 16, ... in order) whose lanes
 * sum16x16() adds, times
 * SCALE; the max (SINK, G logits or NULL, joins it); e^(score - max) by
 * exp16() (0 below e^ATTN_EXP_FLOOR) summed in 16 lanes in position order
 * and then across them (a sink adds its own term last); the weights
 * score / sum; the weighted sum of the values in position order
 * (attend_tail).  Each key and value row is read once for the G heads,
 * from L1 for all but the first.  SC holds G rows of MAXLEN scores.  PF:
 * prefetch the rows ahead (pools in memory; not the rows an FP8 gather has
 * just written).  F8: FP8 pools read here (KPOOL and VPOOL unused), the
 * same float32 values as their gathered rows. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
attend_group_body(const float *q, float *o, const float *kpool, const float *vpool,
                  const int32_t *tab, size_t bs, size_t kvw, size_t off, size_t first,
                  size_t len, size_t hd, float scale, const float *sink, float *sc,
                  size_t maxlen, int pf, const attn_fp8 *f8, const int G)
{
    __m512 mxv[ATTN_GROUP];
    page_walk wk = page_walk_at(tab, bs, first),
              wp = page_walk_at(tab, bs, first + ATTN_PREFETCH);

    for (int g = 0; g < G; g++)
        mxv[g] = _mm512_set1_ps(-INFINITY);
    for (size_t p0 = first; p0 < len; p0 += 16) {
        const size_t c = len - p0 < 16 ? len - p0 : 16;
        const __mmask16 mk = lanes16(c);
        const float *kr[16];

        key_rows(kr, kpool, vpool, tab, bs, kvw, off, p0, c, len, hd, pf, f8, &wk, &wp);
        scores16(q, kr, c, mk, hd, scale, sc + p0, maxlen, G, mxv);
    }
    attend_tail(o, vpool, tab, bs, kvw, off, first, len, hd, sink, sc, maxlen, f8, G, mxv, pf);
}

__attribute__((target("avx512f"))) static void
attend_group(const float *q, float *o, const float *kpool, const float *vpool,
             const int32_t *tab, size_t bs, size_t kvw, size_t off, size_t first, size_t len,
             size_t hd, float scale, const float *sink, float *sc, size_t maxlen, int pf,
             const attn_fp8 *f8, int G)
{
    /* the body for each group size, and for the common head sizes with
     * their loops unrolled (the same operations as for any hd) */
#define ATTN_BODY(HD, G_)                                                                         \
    attend_group_body(q, o, kpool, vpool, tab, bs, kvw, off, first, len, HD, scale, sink, sc,    \
                      maxlen, pf, f8, G_)
#define ATTN_BODY_HD(G_)                                                                          \
    do {                                                                                          \
        if (hd == 64)                                                                             \
            ATTN_BODY(64, G_);                                                                    \
        else if (hd == 128)                                                                       \
            ATTN_BODY(128, G_);                                                                   \
        else                                                                                      \
            ATTN_BODY(hd, G_);                                                                    \
    } while (0)
    switch (G) {
    case 1:
        ATTN_BODY_HD(1);
        break;
    case 2:
        ATTN_BODY_HD(2);
        break;
    case 3:
        ATTN_BODY_HD(3);
        break;
    default:
        ATTN_BODY_HD(4);
        break;
    }
#undef ATTN_BODY_HD
#undef ATTN_BODY
}

/* ---- AVX2 (+ FMA): 8 lanes ------------------------------------------------- */

/* For CPUs with AVX2 but not AVX-512 (NVFP4_CPU_ISA=avx2 elsewhere): the
 * method of attend_group_body and attend_tail in 8 lanes, one function for
 * a decode row and for every row of a prefill (and for float32 and FP8
 * pools, the latter dequantized into the same float32 values), so that a
 * row gets the same bits alone or among others, at any thread count.  Its
 * sums are not the AVX-512 path's (8 lanes, one accumulator a position),
 * nor the scalar path's; its e^x is exp16's bits (exp8). */

/* The all-ones lanes of attn_lanes8 + 8 - n: the first min(n, 8) lanes of
 * a vector selected (maskload / maskstore / blendv masks). */
static const int32_t attn_lanes8[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

__attribute__((target("avx2"))) static inline __m256i lanes8(size_t n)
{
    return _mm256_loadu_si256((const __m256i *)(attn_lanes8 + 8 - (n < 8 ? n : 8)));
}

/* Lane p of the result: the sum of the 8 lanes of U[p], as
 * ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)) whichever registers
 * it is computed among (two rounds of vhaddps, then the 128-bit halves). */
__attribute__((target("avx2"))) static inline __m256 sum8x8(const __m256 u[8])
{
    const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(u[0], u[1]), _mm256_hadd_ps(u[2], u[3]));
    const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(u[4], u[5]), _mm256_hadd_ps(u[6], u[7]));

    return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20),
                         _mm256_permute2f128_ps(t0, t1, 0x31));
}

/* The sum (in a fixed order: halves, pairs, neighbours) and the maximum of
 * a register's 8 lanes */
__attribute__((target("avx2"))) static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

__attribute__((target("avx2"))) static inline float hmax8(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

/* attend_group_body for AVX2: the scores of 8 positions at a time, each a
 * dot product of one 8-lane accumulator over the head dimension (FMAs in
 * dimension order, a masked tail where hd is not a multiple of 8; the G
 * heads' chains of a position, and the positions', overlap; a prefill of
 * 3 heads a KV head took 5 % less than with a head's 8 positions
 * together), whose lanes sum8x8 adds, times SCALE; the
 * max (SINK joins it); e^(score - max) by exp8 (0 below e^ATTN_EXP_FLOOR,
 * as attend_tail, so that no operation makes a subnormal) summed in 8
 * lanes in position order and then across them (hsum8; a sink's term
 * last); the weights score / sum; the weighted sum of the values in
 * position order, chunks of 8 NV dimensions at a time for the G heads
 * (G x NV accumulators; each value row loaded once for the G heads).
 * Arguments as attend_group_body's; F8's rows are dequantized 8 positions
 * at a time (the keys) and 8 positions of a chunk at a time (the values). */
__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) void
attend_group8_body(const float *q, float *o, const float *kpool, const float *vpool,
                   const int32_t *tab, size_t bs, size_t kvw, size_t off, size_t first,
                   size_t len, size_t hd, float scale, const float *sink, float *sc,
                   size_t maxlen, int pf, const attn_fp8 *f8, const int G, const int NV)
{
    const __m256 floor = _mm256_set1_ps(ATTN_EXP_FLOOR), ninf = _mm256_set1_ps(-INFINITY);
    const __m256i mhd = lanes8(hd % 8);
    __m256 mxv[ATTN_GROUP];
    page_walk wk = page_walk_at(tab, bs, first),
              wp = page_walk_at(tab, bs, first + ATTN_PREFETCH), wval, wpf;

    for (int g = 0; g < G; g++)
        mxv[g] = ninf;
    for (size_t p0 = first; p0 < len; p0 += 8) {
        const size_t c = len - p0 < 8 ? len - p0 : 8;
        const __m256 mk = _mm256_castsi256_ps(lanes8(c));
        const float *kr[8];

        key_rows(kr, kpool, vpool, tab, bs, kvw, off, p0, c, len, hd, pf, f8, &wk, &wp);
        /* position by position, the G heads' dot products together: the
         * key row is loaded once for them */
        __m256 u[ATTN_GROUP][8];

        for (size_t l = 0; l < 8; l++) {
            __m256 a[ATTN_GROUP];
            size_t i = 0;

            for (int g = 0; g < G; g++)
                a[g] = _mm256_setzero_ps();
            if (l < c) {
                for (; i + 8 <= hd; i += 8) {
                    const __m256 kv8 = _mm256_loadu_ps(kr[l] + i);
                    for (int g = 0; g < G; g++)
                        a[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)g * hd + i), kv8, a[g]);
                }
                if (i < hd) {
                    const __m256 kv8 = _mm256_maskload_ps(kr[l] + i, mhd);
                    for (int g = 0; g < G; g++)
                        a[g] = _mm256_fmadd_ps(_mm256_maskload_ps(q + (size_t)g * hd + i, mhd),
                                               kv8, a[g]);
                }
            }
            for (int g = 0; g < G; g++)
                u[g][l] = a[g];
        }
        for (int g = 0; g < G; g++) {
            __m256 s = _mm256_mul_ps(sum8x8(u[g]), _mm256_set1_ps(scale));
            _mm256_maskstore_ps(sc + (size_t)g * maxlen + p0, _mm256_castps_si256(mk), s);
            /* a NaN score (first operand) leaves the max as it was; lanes
             * past the last position leave it too */
            mxv[g] = _mm256_blendv_ps(mxv[g], _mm256_max_ps(s, mxv[g]), mk);
        }
    }
    for (int g = 0; g < G; g++) {
        float *scg = sc + (size_t)g * maxlen;
        __m256 acc = _mm256_setzero_ps(), m, inv;
        float mx = hmax8(mxv[g]), sum;

        if (sink && sink[g] > mx) /* transformers: cat, minus the max, softmax */
            mx = sink[g];
        m = _mm256_set1_ps(mx);
        for (size_t p0 = first; p0 < len; p0 += 8) {
            const __m256i mi = lanes8(len - p0);
            const __m256 mk = _mm256_castsi256_ps(mi);
            /* lanes past the last position at the floor, not at -max
             * (whose e^x could overflow) */
            const __m256 x = _mm256_blendv_ps(
                floor, _mm256_sub_ps(_mm256_maskload_ps(scg + p0, mi), m), mk);
            /* below ATTN_EXP_FLOOR 0 (not-less-than, unordered: a NaN
             * kept), and exp8 of the floor there, as attend_tail */
            const __m256 keep = _mm256_and_ps(mk, _mm256_cmp_ps(x, floor, _CMP_NLT_UQ));
            const __m256 e = _mm256_and_ps(keep, exp8(_mm256_max_ps(floor, x)));

            _mm256_maskstore_ps(scg + p0, mi, e);
            acc = _mm256_add_ps(acc, e);
        }
        sum = hsum8(acc);
        /* gpt-oss: the head's sink, one more logit with no value */
        if (sink && !(sink[g] - mx < ATTN_EXP_FLOOR))
            sum += _mm256_cvtss_f32(exp8(_mm256_set1_ps(sink[g] - mx)));
        inv = _mm256_set1_ps(1.0f / sum);
        for (size_t p0 = first; p0 < len; p0 += 8) {
            const __m256i mi = lanes8(len - p0);
            _mm256_maskstore_ps(scg + p0, mi, _mm256_mul_ps(_mm256_maskload_ps(scg + p0, mi), inv));
        }
    }
    for (size_t d0 = 0; d0 < hd; d0 += 8 * (size_t)NV) {
        const size_t nd = hd - d0 < 8 * (size_t)NV ? hd - d0 : 8 * (size_t)NV;
        __m256i mv[4];
        __m256 a[ATTN_GROUP][4];

        for (int v = 0; v < NV; v++)
            mv[v] = lanes8(nd > 8 * (size_t)v ? nd - 8 * (size_t)v : 0);
        for (int g = 0; g < G; g++)
            for (int v = 0; v < NV; v++)
                a[g][v] = _mm256_setzero_ps();
        wval = page_walk_at(tab, bs, first);
        /* float32 value rows asked for ATTN_PREFETCH positions ahead, as
         * attend_pv does */
        wpf = page_walk_at(tab, bs, first + ATTN_PREFETCH);
        for (size_t p0 = first; p0 < len; p0 += 8) {
            const size_t c = len - p0 < 8 ? len - p0 : 8;

            if (f8)
                fp8_rows(f8->wide, f8->vbuf, f8->v, tab, bs, kvw, off + d0, p0, p0 + c, nd,
                         f8->vs);
            for (size_t l = 0; l < c; l++) {
                if (pf && !f8 && p0 + l + ATTN_PREFETCH < len) {
                    const char *vn = (const char *)(vpool + page_walk_next(&wpf) * kvw + off + d0);
                    for (size_t b = 0; b < nd * sizeof(float); b += 64)
                        _mm_prefetch(vn + b, _MM_HINT_T0);
                }
                const float *vp =
                    f8 ? f8->vbuf + l * nd : vpool + page_walk_next(&wval) * kvw + off + d0;
                __m256 wv[ATTN_GROUP];

                /* the G weights, then a value register at a time: G x NV
                 * accumulators, G weights and one value (3 heads by 32
                 * dimensions: 12 + 3 + 1, AVX2's 16 registers; holding
                 * the 4 value registers instead, one accumulator had
                 * lived in memory, a store and a load in its chain every
                 * position).  Each accumulator's FMAs in position order
                 * as before: the same bits. */
#pragma GCC unroll 4
                for (int g = 0; g < G; g++)
                    wv[g] = _mm256_broadcast_ss(sc + (size_t)g * maxlen + p0 + l);
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) {
                    const __m256 vv = nd == 8 * (size_t)NV
                                          ? _mm256_loadu_ps(vp + 8 * v)
                                          : _mm256_maskload_ps(vp + 8 * v, mv[v]);
#pragma GCC unroll 4
                    for (int g = 0; g < G; g++)
                        a[g][v] = _mm256_fmadd_ps(wv[g], vv, a[g][v]);
                }
            }
        }
        for (int g = 0; g < G; g++)
            for (int v = 0; v < NV; v++)
                _mm256_maskstore_ps(o + (size_t)g * hd + d0 + 8 * v, mv[v], a[g][v]);
    }
}

/* attend_group for AVX2: the body for each group size, and for head size
 * 64 and 128 with its loops unrolled (the same operations as for any hd).
 * Value chunks of 32 dimensions (NV 4) for up to 3 heads, of 16 for 4:
 * a chunk's G x NV accumulators are G x NV chains of one FMA a position,
 * so more of them overlap more (a 512-token prefill's attention, 3 heads
 * of 64 dimensions a KV head, Zen 3: 16 wide took a quarter longer), as
 * long as they stay in AVX2's 16 registers (4 heads 32 wide spilled and
 * took a sixth longer than 16 wide). */
__attribute__((target("avx2,fma"))) static void
attend_group8(const float *q, float *o, const float *kpool, const float *vpool,
              const int32_t *tab, size_t bs, size_t kvw, size_t off, size_t first, size_t len,
              size_t hd, float scale, const float *sink, float *sc, size_t maxlen, int pf,
              const attn_fp8 *f8, int G)
{
#define ATTN8_BODY(HD, G_, NV_)                                                                   \
    attend_group8_body(q, o, kpool, vpool, tab, bs, kvw, off, first, len, HD, scale, sink, sc,   \
                       maxlen, pf, f8, G_, NV_)
#define ATTN8_BODY_HD(G_, NV_)                                                                    \
    do {                                                                                          \
        if (hd == 64)                                                                             \
            ATTN8_BODY(64, G_, NV_);                                                              \
        else if (hd == 128)                                                                       \
            ATTN8_BODY(128, G_, NV_);                                                             \
        else                                                                                      \
            ATTN8_BODY(hd, G_, NV_);                                                              \
    } while (0)
    switch (G) {
    case 1:
        ATTN8_BODY_HD(1, 4);
        break;
    case 2:
        ATTN8_BODY_HD(2, 4);
        break;
    case 3:
        ATTN8_BODY_HD(3, 4);
        break;
    default:
        ATTN8_BODY_HD(4, 2);
        break;
    }
#undef ATTN8_BODY_HD
#undef ATTN8_BODY
}

/* attend_group (WIDE > 1: AVX-512) or attend_group8 (1: AVX2) */
static void attend_group_at(int wide, const float *q, float *o, const float *kpool,
                            const float *vpool, const int32_t *tab, size_t bs, size_t kvw,
                            size_t off, size_t first, size_t len, size_t hd, float scale,
                            const float *sink, float *sc, size_t maxlen, int pf,
                            const attn_fp8 *f8, int G)
{
    if (wide > 1)
        attend_group(q, o, kpool, vpool, tab, bs, kvw, off, first, len, hd, scale, sink, sc,
                     maxlen, pf, f8, G);
    else
        attend_group8(q, o, kpool, vpool, tab, bs, kvw, off, first, len, hd, scale, sink, sc,
                      maxlen, pf, f8, G);
}
#endif

/* FP8 E4M3 pools (nvfp4_kv_elem): numerics.h's codec, the one vLLM's
 * semantics were checked against (kvcache.c's fixtures). */
static float e4m3_lut[256];
#ifdef CPU_HAVE_X86
/* fp8_gather_vbmi's: the bfloat16 bytes of each magnitude, the byte order */
static uint8_t e4m3_bf16_lo[128], e4m3_bf16_hi[128], e4m3_unpack_perm[64];
static int e4m3_vbmi; /* its tables are filled and the CPU has VBMI */
#endif
static pthread_once_t e4m3_lut_once = PTHREAD_ONCE_INIT;

static void e4m3_lut_fill(void)
{
    for (int i = 0; i < 256; i++)
        e4m3_lut[i] = num_e4m3_value((uint32_t)i);
#ifdef CPU_HAVE_X86
    for (int i = 0; i < 128; i++) {
        uint32_t u;
        memcpy(&u, &e4m3_lut[i], sizeof(u));
        e4m3_bf16_lo[i] = (uint8_t)(u >> 16);
        e4m3_bf16_hi[i] = (uint8_t)(u >> 24);
    }
    for (int r = 0; r < 4; r++)
        for (int l = 0; l < 4; l++)
            for (int t = 0; t < 4; t++)
                e4m3_unpack_perm[16 * l + 4 * r + t] = (uint8_t)(16 * r + 4 * l + t);
    e4m3_vbmi = __builtin_cpu_supports("avx512vbmi");
#endif
}

static void fp8_store(uint8_t *dst, const float *x, size_t n, float scale)
{
    for (size_t d = 0; d < n; d++)
        dst[d] = (uint8_t)num_e4m3_encode(x[d] / scale);
}

/* Head OFF of positions first .. len-1 of one pool, dequantized into the
 * contiguous [len, hd] rows of OUT (position p at row p): e4m3 * scale, the
 * very float32 value a float32 pool of quantize-dequantized rows held. */
static void fp8_gather(float *out, const uint8_t *pool, const int32_t *tab, size_t bs,
                       size_t kvw, size_t off, size_t first, size_t len, size_t hd,
                       float scale)
{
    for (size_t p = first; p < len; p++) {
        const uint8_t *r = page_row8(pool, tab, bs, kvw, p) + off;
        float *o = out + (p - first) * hd;
        for (size_t d = 0; d < hd; d++)
            o[d] = e4m3_lut[r[d]] * scale;
    }
}

#ifdef CPU_HAVE_X86
/* fp8_gather 16 elements at a time: an E4M3 byte S EEEE MMM written as the
 * binary16 S 0EEEE MMM0000000 is the same number over 2^8, subnormals
 * included (both exponent biases differ by 8), so vcvtph2ps and an exact
 * multiply by 256 give e4m3_lut's float; the two NaN codes (S 1111 111, a
 * finite binary16) take the table's NaN.  Then the same multiply by the
 * scale: the same bits as fp8_gather. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void
fp8_gather_avx512(float *out, const uint8_t *pool, const int32_t *tab, size_t bs, size_t kvw,
                  size_t off, size_t first, size_t len, size_t hd, float scale)
{
    const __m512 sv = _mm512_set1_ps(scale), k256 = _mm512_set1_ps(256.0f);
    const __m512 nan_pos = _mm512_set1_ps(e4m3_lut[0x7F]), nan_neg = _mm512_set1_ps(e4m3_lut[0xFF]);
    const __m256i mag = _mm256_set1_epi16(0x7F), sgn = _mm256_set1_epi16(0x80);

    for (size_t p = first; p < len; p++) {
        const uint8_t *r = page_row8(pool, tab, bs, kvw, p) + off;
        float *o = out + (p - first) * hd;
        for (size_t d = 0; d < hd; d += 16) {
            const __mmask16 mk = lanes16(hd - d);
            const __m256i w = _mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(mk, r + d));
            const __m256i m7 = _mm256_and_si256(w, mag);
            const __m256i h = _mm256_or_si256(_mm256_slli_epi16(m7, 7),
                                              _mm256_slli_epi16(_mm256_and_si256(w, sgn), 8));
            const __mmask16 nan = _mm256_cmpeq_epi16_mask(m7, mag);
            const __mmask16 neg = _mm256_cmpeq_epi16_mask(_mm256_and_si256(w, sgn), sgn);
            __m512 f = _mm512_mul_ps(_mm512_cvtph_ps(h), k256);

            f = _mm512_mask_mov_ps(f, nan & (__mmask16)~neg, nan_pos);
            f = _mm512_mask_mov_ps(f, nan & neg, nan_neg);
            _mm512_mask_storeu_ps(o + d, mk, _mm512_mul_ps(f, sv));
        }
    }
}

/* fp8_gather 64 elements at a time with AVX-512 VBMI: every E4M3 value is
 * a bfloat16 (its exponent fits, its 3 mantissa bits too, subnormals are
 * normal there, NaN is 0x7FC0), so the float is the code's bfloat16 bits
 * << 16, the very bits of e4m3_lut: two 128-entry byte tables looked up by
 * the 7 magnitude bits (vpermi2b) give the bfloat16's two bytes, the sign
 * bit is ORed in, and two rounds of unpacking with zeros widen them to
 * floats.  The unpacking works within 128-bit lanes, so the bytes are put
 * in the order it undoes first (vpermb): float vector r, lane l, slot s
 * takes byte 16 l + 4 r + s, which must hold element 16 r + 4 l + s. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi"))) static void
fp8_gather_vbmi(float *out, const uint8_t *pool, const int32_t *tab, size_t bs, size_t kvw,
                size_t off, size_t first, size_t len, size_t hd, float scale)
{
    const __m512 sv = _mm512_set1_ps(scale);
    const __m512i lo0 = _mm512_loadu_si512(e4m3_bf16_lo), lo1 = _mm512_loadu_si512(e4m3_bf16_lo + 64);
    const __m512i hi0 = _mm512_loadu_si512(e4m3_bf16_hi), hi1 = _mm512_loadu_si512(e4m3_bf16_hi + 64);
    const __m512i perm = _mm512_loadu_si512(e4m3_unpack_perm), sgn = _mm512_set1_epi8((char)0x80);
    const __m512i zero = _mm512_setzero_si512();

    for (size_t p = first; p < len; p++) {
        const uint8_t *r = page_row8(pool, tab, bs, kvw, p) + off;
        float *o = out + (p - first) * hd;
        for (size_t d = 0; d < hd; d += 64) {
            const size_t nd = hd - d < 64 ? hd - d : 64;
            const __mmask64 mk = nd == 64 ? ~(__mmask64)0 : ((__mmask64)1 << nd) - 1;
            const __m512i b = _mm512_permutexvar_epi8(perm, _mm512_maskz_loadu_epi8(mk, r + d));
            const __m512i lo = _mm512_permutex2var_epi8(lo0, b, lo1);
            /* hi | (b & 0x80) */
            const __m512i hi =
                _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0, b, hi1), b, sgn, 0xF8);
            const __m512i w0 = _mm512_unpacklo_epi8(lo, hi), w1 = _mm512_unpackhi_epi8(lo, hi);
            const __m512i f[4] = {_mm512_unpacklo_epi16(zero, w0), _mm512_unpackhi_epi16(zero, w0),
                                  _mm512_unpacklo_epi16(zero, w1), _mm512_unpackhi_epi16(zero, w1)};

            for (size_t v = 0; v < 4 && 16 * v < nd; v++)
                _mm512_mask_storeu_ps(o + d + 16 * v, lanes16(nd - 16 * v),
                                      _mm512_mul_ps(_mm512_castsi512_ps(f[v]), sv));
        }
    }
}

/* fp8_gather 8 elements at a time with AVX2: e4m3_lut looked up by
 * vgatherdps (the table's very floats; a tail of fewer bytes widened from
 * a copy, never read past the row), times the scale: the same bits. */
__attribute__((target("avx2"))) static void
fp8_gather_avx2(float *out, const uint8_t *pool, const int32_t *tab, size_t bs, size_t kvw,
                size_t off, size_t first, size_t len, size_t hd, float scale)
{
    const __m256 sv = _mm256_set1_ps(scale);

    for (size_t p = first; p < len; p++) {
        const uint8_t *r = page_row8(pool, tab, bs, kvw, p) + off;
        float *o = out + (p - first) * hd;
        size_t d = 0;

        for (; d + 8 <= hd; d += 8) {
            const __m256i ix = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(r + d)));
            _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_i32gather_ps(e4m3_lut, ix, 4), sv));
        }
        if (d < hd) {
            uint8_t b[8] = {0};
            const __m256i mk = lanes8(hd - d);

            memcpy(b, r + d, hd - d);
            _mm256_maskstore_ps(
                o + d, mk,
                _mm256_mul_ps(_mm256_i32gather_ps(e4m3_lut,
                                                  _mm256_cvtepu8_epi32(_mm_loadl_epi64(
                                                      (const __m128i *)b)),
                                                  4),
                              sv));
        }
    }
}
#endif

/* Elements OFF .. OFF + N - 1 of the rows of positions FIRST .. LEN - 1 of
 * an FP8 pool, dequantized into OUT (position p at row p - FIRST, N floats
 * a row) by the gather WIDE (attn_job.wide) selects: the same bits from
 * each. */
static void fp8_rows(int wide, float *out, const uint8_t *pool, const int32_t *tab, size_t bs,
                     size_t kvw, size_t off, size_t first, size_t len, size_t n, float scale)
{
#ifdef CPU_HAVE_X86
    /* VBMI where the backend runs the VNNI kernels (every CPU with VBMI
     * has them; NVFP4_CPU_ISA=avx512 keeps the binary16 path testable) */
    if (wide > 2 && e4m3_vbmi) {
        fp8_gather_vbmi(out, pool, tab, bs, kvw, off, first, len, n, scale);
        return;
    }
    if (wide > 1) {
        fp8_gather_avx512(out, pool, tab, bs, kvw, off, first, len, n, scale);
        return;
    }
    if (wide) {
        fp8_gather_avx2(out, pool, tab, bs, kvw, off, first, len, n, scale);
        return;
    }
#else
    (void)wide;
#endif
    fp8_gather(out, pool, tab, bs, kvw, off, first, len, n, scale);
}

/* Items of nvfp4k_cpu_attention_paged(): a query head (or, FP8, a KV head and
 * its group) of one token; any thread (nvfp4k_cpu_par()), SLOT's scratch. */
typedef struct {
    const float *q;
    float *out;
    const nvfp4_kv_pages *kv;
    size_t nh, nkv, hd;
    float scale;
    float *scores;
    size_t per, m;
    int wide; /* AVX2: 1, AVX-512: 2, 3 at the VNNI level and above (the
               * gather of fp8_rows): query heads ATTN_GROUP at a time
               * (attend_group8, attend_group), SLOT's scratch starting
               * with ATTN_GROUP rows of scores; 0: scalar */
    /* attn_rows_range: blocks of rows, block b rows blk[b] .. blk[b + 1] - 1,
     * and the stride of their score rows (the call's longest context) */
    const size_t *blk;
    size_t nblk, rstride;
    /* attn_group_range: items (units of attend_heads_body) a run of
     * attend_heads, at most (<= 1: attend_row_group item by item) */
    size_t heads;
} attn_job;

/* Positions GF .. GL - 1 of KV head KVH of sequence SEQ, dequantized into
 * KR and VR (row p at p); GL <= GF: none. */
static void fp8_gather_kv(const attn_job *j, int32_t seq, size_t kvh, size_t gf, size_t gl,
                          float *kr, float *vr)
{
    const nvfp4_kv_pages *kv = j->kv;
    const size_t hd = j->hd, kvw = j->nkv * hd, bs = kv->block;
    const int32_t *tab = kv->tables + (size_t)seq * kv->max_blocks;

    if (gl <= gf)
        return;
    fp8_rows(j->wide, kr + gf * hd, kv->k_pool, tab, bs, kvw, kvh * hd, gf, gl, hd, kv->k_scale);
    fp8_rows(j->wide, vr + gf * hd, kv->v_pool, tab, bs, kvw, kvh * hd, gf, gl, hd, kv->v_scale);
}

/* Items (row, KV head) IT0 .. IT1 - 1, a KV head at a time: the rows of one
 * sequence (a prefill's tokens) share its positions, so each position is
 * dequantized once for all of them (GF .. GL: what SLOT's rows hold)
 * where gathering per row redid the whole prefix for every token.  The
 * pools do not change during the loop (the call's rows were stored
 * before it), and each item's operations are the same in any order. */
static void attn_fp8_range(void *arg, size_t it0, size_t it1, int slot)
{
    const attn_job *j = arg;
    const nvfp4_kv_pages *kv = j->kv;
    const size_t nh = j->nh, nkv = j->nkv, hd = j->hd, group = nh / nkv;
    const size_t maxlen = kv->max_len;
    const int32_t zero = 0;
    float *sc = j->scores + (size_t)slot * j->per;
    float *kr = sc + (j->wide ? ATTN_GROUP : 1) * maxlen, *vr = kr + maxlen * hd;
#ifdef CPU_HAVE_X86
    const attn_fp8 f8 = {kv->k_pool, kv->v_pool, kv->k_scale, kv->v_scale,
                         j->wide,    vr + maxlen * hd, vr + maxlen * hd + 16 * hd};
#endif

    for (size_t kvh = 0; kvh < nkv; kvh++) {
        int32_t gseq = -1;
        size_t gf = 0, gl = 0;

        for (size_t it = it0 + (kvh + nkv - it0 % nkv) % nkv; it < it1; it += nkv) {
            const size_t i = it / nkv, len = (size_t)kv->pos[i] + 1;
            const size_t first = kv->window && len > kv->window ? len - kv->window : 0;

#ifdef CPU_HAVE_X86
            /* a row alone in its sequence (decode): no scratch of the whole
             * context, whose rows it would read once, but the pools read
             * inside attend_group (the same bits).  The rows of a prefill
             * share the scratch: at 4096 positions (4 MB of it per KV
             * head) they ran at 350 tok/s that way and 250 converting
             * their rows each. */
            if (j->wide && (i == 0 || kv->seq[i - 1] != kv->seq[i]) &&
                (i + 1 == j->m || kv->seq[i + 1] != kv->seq[i])) {
                const int32_t *tab = kv->tables + (size_t)kv->seq[i] * kv->max_blocks;

                for (size_t g0 = 0; g0 < group; g0 += ATTN_GROUP) {
                    const size_t h = kvh * group + g0;
                    attend_group_at(j->wide, j->q + (i * nh + h) * hd,
                                    j->out + (i * nh + h) * hd, NULL, NULL, tab, kv->block,
                                    nkv * hd, kvh * hd, first, len, hd, j->scale,
                                    kv->sinks ? kv->sinks + h : NULL, sc, maxlen, 1, &f8,
                                    (int)(group - g0 < ATTN_GROUP ? group - g0 : ATTN_GROUP));
                }
                continue;
            }
#endif
            if (kv->seq[i] != gseq || first < gf || first > gl) {
                gseq = kv->seq[i];
                gf = gl = first;
            }
            fp8_gather_kv(j, gseq, kvh, gl, len, kr, vr);
            gl = len > gl ? len : gl;
#ifdef CPU_HAVE_X86
            /* the group's query heads ATTN_GROUP at a time over the
             * gathered rows (one block of maxlen positions, row p at p),
             * as for float32 pools (attend_group: the same bits) */
            if (j->wide) {
                for (size_t g0 = 0; g0 < group; g0 += ATTN_GROUP) {
                    const size_t h = kvh * group + g0;
                    attend_group_at(j->wide, j->q + (i * nh + h) * hd,
                                    j->out + (i * nh + h) * hd, kr, vr, &zero, maxlen, hd, 0,
                                    first, len, hd, j->scale, kv->sinks ? kv->sinks + h : NULL,
                                    sc, maxlen, 0, NULL,
                                    (int)(group - g0 < ATTN_GROUP ? group - g0 : ATTN_GROUP));
                }
                continue;
            }
#endif
            for (size_t g = 0; g < group; g++) {
                size_t h = kvh * group + g;
                attend_head(j->q + (i * nh + h) * hd, j->out + (i * nh + h) * hd, kr, vr,
                            &zero, maxlen, hd, 0, first, len, hd, j->scale,
                            kv->sinks ? kv->sinks + h : NULL, sc);
            }
        }
    }
}

static void attn_range(void *arg, size_t it0, size_t it1, int slot)
{
    const attn_job *j = arg;
    const nvfp4_kv_pages *kv = j->kv;
    const size_t nh = j->nh, nkv = j->nkv, hd = j->hd, kvw = nkv * hd, group = nh / nkv;
    const size_t bs = kv->block;

    for (size_t it = it0; it < it1; it++) {
        size_t i = it / nh, h = it % nh, kvh = h / group, len = (size_t)kv->pos[i] + 1;
        /* a sliding window: positions first .. pos[i] */
        size_t first = kv->window && len > kv->window ? len - kv->window : 0;
        const int32_t *tab = kv->tables + (size_t)kv->seq[i] * kv->max_blocks;
        float *sc = j->scores + (size_t)slot * j->per;

        attend_head(j->q + it * hd, j->out + it * hd, kv->k_pool, kv->v_pool, tab, bs, kvw,
                    kvh * hd, first, len, hd, j->scale, kv->sinks ? kv->sinks + h : NULL, sc);
    }
}

#ifdef CPU_HAVE_X86
/* Row I's query heads G0 .. G0 + ATTN_GROUP - 1 (fewer at the end of the
 * group) of KV head KVH through attend_group, SC its scratch of ATTN_GROUP
 * score rows of STRIDE. */
static void attend_row_group(const attn_job *j, size_t i, size_t kvh, size_t g0, float *sc,
                             size_t stride)
{
    const nvfp4_kv_pages *kv = j->kv;
    const size_t nh = j->nh, nkv = j->nkv, hd = j->hd, group = nh / nkv;
    const size_t h = kvh * group + g0, len = (size_t)kv->pos[i] + 1;
    const size_t first = kv->window && len > kv->window ? len - kv->window : 0;
    const int32_t *tab = kv->tables + (size_t)kv->seq[i] * kv->max_blocks;
    /* prefetch for the first row of a sequence in the call (a decode row):
     * the next rows of a prefill find the same rows in the caches, and
     * their prefetches only cost (SmolLM2 shape, prompt 512: 5 % of the
     * prefill; 2048: 2 %) */
    const int pf = i == 0 || kv->seq[i - 1] != kv->seq[i];

    attend_group_at(j->wide, j->q + (i * nh + h) * hd, j->out + (i * nh + h) * hd, kv->k_pool,
                    kv->v_pool, tab, kv->block, nkv * hd, kvh * hd, first, len, hd, j->scale,
                    kv->sinks ? kv->sinks + h : NULL, sc, stride, pf, NULL,
                    (int)(group - g0 < ATTN_GROUP ? group - g0 : ATTN_GROUP));
}

/* Row I's units U0 .. U0 + NKH - 1 (NKH <= ATTN_HEADS_MAX) in one walk over
 * the positions, a unit being G query heads of one KV head: a KV head's
 * whole group (G = group <= ATTN_GROUP, unit u KV head u), or a quarter,
 * a half ... of it (G = ATTN_GROUP, SUB = group / G units a KV head, unit
 * u KV head u / SUB): per 16 positions the scores of every unit (scores16, as
 * attend_group_body), then each head's softmax, then the weighted sums
 * ATTN_HEADS_PVC positions at a time, every head over each stretch
 * (attend_pv, each sum carried in the output: the operations of one
 * pass; the values, read in order, left to the L2 streamer: asked for
 * ATTN_PREFETCH positions ahead they changed nothing).  So the same bits as attend_row_group head by head, but each
 * position's keys and values of these heads, adjacent in the pool's row,
 * are read together: the L2 streamer then fetches lines that are used
 * next, where head by head it fetched the other heads' lines of each row
 * long before their turn (or in vain).  SC: NKH x ATTN_GROUP score rows
 * of STRIDE. */
#define ATTN_HEADS_MAX 8
#define ATTN_HEADS_PVC 32
/* floats of a thread's score rows for attend_heads, at most (it runs
 * fewer heads together where more would pass it) */
#define ATTN_HEADS_SCRATCH ((size_t)1 << 20)

__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
attend_heads_body(const attn_job *j, size_t i, size_t u0, size_t nkh, float *sc, size_t stride,
                  const size_t hd, const int G)
{
    const nvfp4_kv_pages *kv = j->kv;
    const size_t nh = j->nh, nkv = j->nkv, kvw = nkv * hd, bs = kv->block;
    const size_t sub = nh / nkv / (size_t)G, kvh0 = u0 / sub;
    const size_t len = (size_t)kv->pos[i] + 1;
    const size_t first = kv->window && len > kv->window ? len - kv->window : 0;
    const int32_t *tab = kv->tables + (size_t)kv->seq[i] * kv->max_blocks;
    const float *kpool = kv->k_pool, *vpool = kv->v_pool;
    /* prefetch for a decode row, as attend_row_group */
    const int pf = i == 0 || kv->seq[i - 1] != kv->seq[i];
    page_walk wk = page_walk_at(tab, bs, first), wp = page_walk_at(tab, bs, first + ATTN_PREFETCH);
    __m512 mxv[ATTN_HEADS_MAX][ATTN_GROUP];

    for (size_t h = 0; h < nkh; h++)
        for (int g = 0; g < G; g++)
            mxv[h][g] = _mm512_set1_ps(-INFINITY);
    for (size_t p0 = first; p0 < len; p0 += 16) {
        const size_t c = len - p0 < 16 ? len - p0 : 16;
        const __mmask16 mk = lanes16(c);
        size_t row[16];

        for (size_t l = 0; l < c; l++) {
            row[l] = page_walk_next(&wk) * kvw + kvh0 * hd;
            /* the first 4 lines of the heads' keys ATTN_PREFETCH positions
             * on: the L2 streamer fetches the rest of the run of lines,
             * and more prefetches only hold fill buffers (Llama-3-8B, 8
             * heads of 128: 4 KB a position, 3.2 ms a layer at 4096
             * positions asking for all of them, 2.7 with none, 2.6-2.8
             * with 4 lines; SmolLM2's 768 B: 0.60, 0.65 and 0.60-0.63) */
            if (pf && p0 + l + ATTN_PREFETCH < len) {
                const char *kn = (const char *)(kpool + page_walk_next(&wp) * kvw + kvh0 * hd);
                for (size_t b = 0; b < nkh * hd * sizeof(float) && b < 256; b += 64)
                    _mm_prefetch(kn + b, _MM_HINT_T0);
            }
        }
        for (size_t h = 0; h < nkh; h++) {
            const float *kr[16];

            for (size_t l = 0; l < c; l++)
                kr[l] = kpool + row[l] + ((u0 + h) / sub - kvh0) * hd;
            scores16(j->q + (i * nh + (u0 + h) * (size_t)G) * hd, kr, c, mk, hd, j->scale,
                     sc + h * ATTN_GROUP * stride + p0, stride, G, mxv[h]);
        }
    }
    for (size_t h = 0; h < nkh; h++)
        attend_softmax(first, len, kv->sinks ? kv->sinks + (u0 + h) * (size_t)G : NULL,
                       sc + h * ATTN_GROUP * stride, stride, G, mxv[h]);
    for (size_t c0 = first; c0 < len; c0 += ATTN_HEADS_PVC) {
        const size_t e = len - c0 < ATTN_HEADS_PVC ? len : c0 + ATTN_HEADS_PVC;

        for (size_t h = 0; h < nkh; h++)
            attend_pv(j->out + (i * nh + (u0 + h) * (size_t)G) * hd, vpool, tab, bs, kvw,
                      (u0 + h) / sub * hd, c0, e, hd, sc + h * ATTN_GROUP * stride, stride, NULL, G,
                      c0 > first, 0);
    }
}

/* attend_heads_body for each group size and the common head sizes */
__attribute__((target("avx512f"))) static void attend_heads(const attn_job *j, size_t i,
                                                           size_t u0, size_t nkh, float *sc,
                                                           size_t stride)
{
    const int G = j->nh / j->nkv < ATTN_GROUP ? (int)(j->nh / j->nkv) : ATTN_GROUP;
#define HEADS_BODY(HD, G_) attend_heads_body(j, i, u0, nkh, sc, stride, HD, G_)
#define HEADS_BODY_HD(G_)                                                                         \
    do {                                                                                          \
        if (j->hd == 64)                                                                          \
            HEADS_BODY(64, G_);                                                                   \
        else if (j->hd == 128)                                                                    \
            HEADS_BODY(128, G_);                                                                  \
        else                                                                                      \
            HEADS_BODY(j->hd, G_);                                                                \
    } while (0)
    switch (G) {
    case 1:
        HEADS_BODY_HD(1);
        break;
    case 2:
        HEADS_BODY_HD(2);
        break;
    case 3:
        HEADS_BODY_HD(3);
        break;
    default:
        HEADS_BODY_HD(4);
        break;
    }
#undef HEADS_BODY_HD
#undef HEADS_BODY
}

/* Items of nvfp4k_cpu_attention_paged() for float32 pools with AVX-512: (row,
 * KV head, ATTN_GROUP of its query heads), the last row first: a prefill's
 * rows grow longer, and the pool's threads claim chunks in order, so the
 * chunks left for last are the short ones.  SLOT's scratch holds
 * ATTN_GROUP rows of max_len scores, or j->heads times that: then a run of
 * items of one row (at most j->heads of them, each a unit of
 * attend_heads_body) goes to attend_heads. */
static void attn_group_range(void *arg, size_t it0, size_t it1, int slot)
{
    const attn_job *j = arg;
    const size_t nkv = j->nkv, sub = (j->nh / nkv + ATTN_GROUP - 1) / ATTN_GROUP;
    const size_t items = j->m * nkv * sub;
    float *sc = j->scores + (size_t)slot * j->per;

    for (size_t rit = it0; rit < it1; rit++) {
        const size_t it = items - 1 - rit;

        if (j->heads > 1) {
            /* item it is row it / (nkv sub), unit it % (nkv sub); the next
             * items (rit + 1, ...) the same row's lower units */
            const size_t i = it / (nkv * sub), u = it % (nkv * sub);
            size_t n = 1;

            while (n < j->heads && n <= u && rit + n < it1)
                n++;
            attend_heads(j, i, u + 1 - n, n, sc, j->kv->max_len);
            rit += n - 1;
            continue;
        }
        attend_row_group(j, it / (nkv * sub), it / sub % nkv, it % sub * ATTN_GROUP, sc,
                         j->kv->max_len);
    }
}
#endif

/* Floats of a thread's score rows in the prefill path below, and of its
 * gathered value rows (with more the values stay in the pool) */
#define ATTN_ROWS_SCRATCH ((size_t)1 << 20)

/* A thread's transposed key tiles of positions f0 .. l1 - 1 of one
 * sequence and KV head, and their value rows (L1 0: none yet) */
typedef struct {
    int32_t seq;
    size_t kvh, f0, l1;
} rows_cache;

/* Floats of a thread's key tiles: every tile of a context of RSTRIDE
 * positions where its value rows fit the scratch (then kept from block
 * to block), else one. */
static inline size_t attn_rows_kfloats(size_t rstride, size_t hd)
{
    return rstride * hd <= ATTN_ROWS_SCRATCH ? (rstride + 15) / 16 * 16 * hd : 16 * hd;
}

#ifdef CPU_HAVE_X86
/* ---- prefill rows: keys transposed ---------------------------------------- */

/* A prefill's rows read the same keys: scores over keys transposed 16
 * positions at a time (position l of the tile in lane l) are the same sums
 * of the same products as attend_group_body's, with no reduction across
 * lanes: the 31 shuffles of each sum16x16 (a quarter of the scores'
 * vector operations) go, and the transposition (64 shuffles for 16
 * positions and 16 dimensions) is shared by every row and query head of
 * the block.  Head sizes that are multiples of 16 (attend_group_body's
 * accumulator with no masked tail). */
#define ATTN_ROWS 16    /* rows a block (an item, with one KV head) */
#define ATTN_ROWS_MIN 4 /* fewer rows of a sequence in the call: attend_group */

/* The keys of C <= 16 positions (WK walks them; KVW, OFF as in
 * attend_group) into KT: element d of the tile's position l at
 * KT[16 d + l], zero past C.  HD a multiple of 16. */
__attribute__((target("avx512f"))) static void kt_tile(float *kt, const float *kpool,
                                                      page_walk *wk, size_t kvw, size_t off,
                                                      size_t c, size_t hd)
{
    const float *kr[16];

    for (size_t l = 0; l < c; l++)
        kr[l] = kpool + page_walk_next(wk) * kvw + off;
    for (size_t d0 = 0; d0 < hd; d0 += 16) {
        __m512i r[16], t[16];

        for (size_t l = 0; l < 16; l++)
            r[l] = l < c ? _mm512_loadu_si512((const void *)(kr[l] + d0))
                         : _mm512_setzero_si512();
        tr16x16(r, t);
        for (int i = 0; i < 16; i++)
            _mm512_storeu_si512((void *)(kt + (d0 + (size_t)i) * 16), t[i]);
    }
}

/* The 16 scores (before SCALE) of NQ <= 4 queries Q[n] against a
 * transposed tile into OUT[n], each key row of the tile loaded once for
 * them: lane l is attend_group_body's sum for position l, term for term.
 * There the accumulator's lane j sums dimensions j, j + 16, j + 32, ...
 * in that order into u_j, and sum16x16 adds the 16 lanes as
 * (((u0+u8)+(u4+u12)) + ((u2+u10)+(u6+u14))) + (the same over u1, u9,
 * u5, u13, u3, u11, u7, u15); here u_j is a register of 16 positions,
 * made in that order and added as soon as its partner is there. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
qk_tile(const float *const *q, const float *kt, const size_t hd, const int NQ, __m512 *out)
{
    static const int ord[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
    __m512 x[4], pq[4], hq[4], h0[4];

#pragma GCC unroll 16
    for (int t = 0; t < 16; t++) {
        const size_t jj = (size_t)ord[t];
        __m512 s0[4];

#pragma GCC unroll 4
        for (int n = 0; n < NQ; n++)
            s0[n] = _mm512_setzero_ps();
        for (size_t i = 0; i < hd; i += 16) {
            const __m512 k0 = _mm512_loadu_ps(kt + (i + jj) * 16);
#pragma GCC unroll 4
            for (int n = 0; n < NQ; n++)
                s0[n] = _mm512_fmadd_ps(_mm512_set1_ps(q[n][i + jj]), k0, s0[n]);
        }
#pragma GCC unroll 4
        for (int n = 0; n < NQ; n++) {
            const __m512 u = s0[n];
            __m512 v;

            if (t % 2 == 0) {
                x[n] = u;
                continue;
            }
            v = _mm512_add_ps(x[n], u); /* a pair */
            if (t % 4 == 1) {
                pq[n] = v;
                continue;
            }
            v = _mm512_add_ps(pq[n], v); /* four */
            if (t % 8 == 3) {
                hq[n] = v;
                continue;
            }
            v = _mm512_add_ps(hq[n], v); /* eight */
            if (t == 7)
                h0[n] = v;
            else
                out[n] = _mm512_add_ps(h0[n], v);
        }
    }
}

/* Block B's rows (one sequence's, consecutive) with all query heads of KV
 * head KVH: the scores of every row and head, a key tile at a time over
 * the positions any row sees, into SC (row r, head g at (r * group + g) *
 * rstride, position p at p); then per row the maxima and attend_tail, as
 * attend_group would run them. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
attend_rows_body(const attn_job *j, size_t b, size_t kvh, float *kt, float *vr, float *sc,
                 rows_cache *rc, const size_t hd)
{
    const nvfp4_kv_pages *kv = j->kv;
    const size_t nh = j->nh, nkv = j->nkv, group = nh / nkv, kvw = nkv * hd, L = j->rstride;
    const size_t r0 = j->blk[b], r1 = j->blk[b + 1];
    const int32_t *tab = kv->tables + (size_t)kv->seq[r0] * kv->max_blocks;
    const float *vpool = kv->v_pool;
    const int32_t *vtab = tab;
    size_t vbs = kv->block, vkvw = kvw, voff = kvh * hd;
    const __m512 scale = _mm512_set1_ps(j->scale);
    /* positions a chunk of the weighted sums: 16 KB of values */
    const size_t pvc = hd <= 256 ? 4096 / hd / 16 * 16 : 16;
    size_t f0 = SIZE_MAX, l1 = 0;
    page_walk wk;
    int hit;

    for (size_t r = r0; r < r1; r++) {
        const size_t len = (size_t)kv->pos[r] + 1;
        const size_t first = kv->window && len > kv->window ? len - kv->window : 0;
        f0 = first < f0 ? first : f0;
        l1 = len > l1 ? len : l1;
    }
    /* what the scratch holds from this thread's previous block of the
     * item range: the same sequence, KV head and first position, and at
     * least these positions (the pools do not change during the call) */
    hit = rc && rc->l1 && rc->seq == kv->seq[r0] && rc->kvh == kvh && rc->f0 == f0 &&
          l1 <= rc->l1;
    if (vr) {
        /* the values of positions f0 .. l1 - 1 in a row (position p at
         * p, l1 <= rstride), read by every row of the block from L2 in
         * order */
        page_walk wv = page_walk_at(tab, kv->block, f0);
        for (size_t p = f0; p < l1 && !hit; p++)
            memcpy(vr + p * hd, (const float *)kv->v_pool + page_walk_next(&wv) * kvw + kvh * hd,
                   hd * sizeof(float));
        vpool = vr;
        vtab = NULL;
        vkvw = hd;
        voff = 0;
    }
    wk = page_walk_at(tab, kv->block, f0);
    for (size_t p0 = f0; p0 < l1; p0 += 16) {
        /* with RC every tile of the range kept (tile i at 16 i hd): a tile
         * made for a longer block holds keys past this block's rows, in
         * lanes whose scores are not stored */
        float *const ktp = rc ? kt + (p0 - f0) * hd : kt;

        if (!hit)
            kt_tile(ktp, kv->k_pool, &wk, kvw, kvh * hd, l1 - p0 < 16 ? l1 - p0 : 16, hd);
        for (size_t r = r0; r < r1; r++) {
            const size_t len = (size_t)kv->pos[r] + 1;
            const size_t first = kv->window && len > kv->window ? len - kv->window : 0;
            __mmask16 mk;

            if (len <= p0 || first >= p0 + 16)
                continue;
            mk = (__mmask16)(lanes16(len - p0) & ~lanes16(first > p0 ? first - p0 : 0));
            for (size_t g0 = 0; g0 < group; g0 += 4) {
                const size_t nq = group - g0 < 4 ? group - g0 : 4;
                const float *qs[4];
                __m512 sv[4];

                for (size_t n = 0; n < 4; n++)
                    qs[n] = j->q + (r * nh + kvh * group + g0 + (n < nq ? n : 0)) * hd;
                if (nq == 4)
                    qk_tile(qs, ktp, hd, 4, sv);
                else if (nq == 3)
                    qk_tile(qs, ktp, hd, 3, sv);
                else if (nq == 2)
                    qk_tile(qs, ktp, hd, 2, sv);
                else
                    qk_tile(qs, ktp, hd, 1, sv);
                for (size_t n = 0; n < nq; n++)
                    _mm512_mask_storeu_ps(sc + ((r - r0) * group + g0 + n) * L + p0, mk,
                                          _mm512_mul_ps(sv[n], scale));
            }
        }
    }
    if (rc && !hit)
        *rc = (rows_cache){kv->seq[r0], kvh, f0, l1};
    for (size_t r = r0; r < r1; r++) {
        const size_t len = (size_t)kv->pos[r] + 1;
        const size_t first = kv->window && len > kv->window ? len - kv->window : 0;

        for (size_t g0 = 0; g0 < group; g0 += ATTN_GROUP) {
            const int G = (int)(group - g0 < ATTN_GROUP ? group - g0 : ATTN_GROUP);
            const size_t h = kvh * group + g0;
            float *scg = sc + ((r - r0) * group + g0) * L;
            __m512 mxv[ATTN_GROUP];

            for (int g = 0; g < G; g++) {
                mxv[g] = _mm512_set1_ps(-INFINITY);
                for (size_t p0 = first; p0 < len; p0 += 16) {
                    const __mmask16 mk = lanes16(len - p0);
                    /* as attend_group_body: a NaN score leaves the max */
                    mxv[g] = _mm512_mask_max_ps(
                        mxv[g], mk, _mm512_maskz_loadu_ps(mk, scg + (size_t)g * L + p0),
                        mxv[g]);
                }
            }
            attend_softmax(first, len, kv->sinks ? kv->sinks + h : NULL, scg, L, G, mxv);
        }
    }
    /* the weighted sums a chunk of positions at a time, every row and
     * head of the block over the chunk's values (in L1) before the next
     * chunk; each sum in position order, carried in the output between
     * chunks: the operations of attend_tail's one pass */
    for (size_t c0 = f0; c0 < l1; c0 += pvc) {
        for (size_t r = r0; r < r1; r++) {
            const size_t len = (size_t)kv->pos[r] + 1;
            const size_t first = kv->window && len > kv->window ? len - kv->window : 0;
            const size_t a = first > c0 ? first : c0, e = len < c0 + pvc ? len : c0 + pvc;

            if (a >= e)
                continue;
            for (size_t g0 = 0; g0 < group; g0 += ATTN_GROUP) {
                const int G = (int)(group - g0 < ATTN_GROUP ? group - g0 : ATTN_GROUP);
                const size_t h = kvh * group + g0;
                /* G a constant, as attend_group runs it (the accumulators
                 * stay in registers) */
#define ROWS_PV(G_)                                                                            \
    attend_pv(j->out + (r * nh + h) * hd, vpool, vtab, vbs, vkvw, voff, a, e, hd,             \
              sc + ((r - r0) * group + g0) * L, L, NULL, G_, a > first, 0)
                switch (G) {
                case 1:
                    ROWS_PV(1);
                    break;
                case 2:
                    ROWS_PV(2);
                    break;
                case 3:
                    ROWS_PV(3);
                    break;
                default:
                    ROWS_PV(4);
                    break;
                }
#undef ROWS_PV
            }
        }
    }
}

/* attend_rows_body with the common head sizes' loops unrolled */
__attribute__((target("avx512f"))) static void attend_rows(const attn_job *j, size_t b,
                                                          size_t kvh, float *kt, float *vr,
                                                          float *sc, rows_cache *rc)
{
    if (j->hd == 64)
        attend_rows_body(j, b, kvh, kt, vr, sc, rc, 64);
    else if (j->hd == 128)
        attend_rows_body(j, b, kvh, kt, vr, sc, rc, 128);
    else
        attend_rows_body(j, b, kvh, kt, vr, sc, rc, j->hd);
}

/* Items of nvfp4k_cpu_attention_paged() when some sequence has ATTN_ROWS_MIN
 * rows or more in the call (a prefill): (block of rows, KV head), KV head
 * by KV head and each one's last block first.  A block of fewer rows runs
 * attend_group row by row.  SLOT's scratch: the key tiles (one, where the
 * value rows do not fit ATTN_ROWS_SCRATCH), the value rows, then the
 * block's score rows. */
static void attn_rows_range(void *arg, size_t it0, size_t it1, int slot)
{
    const attn_job *j = arg;
    const size_t nkv = j->nkv, hd = j->hd, group = j->nh / nkv;
    const int keep = j->rstride * hd <= ATTN_ROWS_SCRATCH;
    float *kt = j->scores + (size_t)slot * j->per, *sc = kt + attn_rows_kfloats(j->rstride, hd);
    float *vr = keep ? sc : NULL;
    rows_cache rc = {0, 0, 0, 0};

    if (vr)
        sc += j->rstride * hd;

    for (size_t rit = it0; rit < it1; rit++) {
        /* KV head by KV head, each one's blocks from the last (the longest
         * rows first, for the threads' balance): a thread's next block of
         * a KV head needs a part of what its scratch holds */
        const size_t kvh = rit / j->nblk, b = j->nblk - 1 - rit % j->nblk;

        if (j->blk[b + 1] - j->blk[b] >= ATTN_ROWS_MIN) {
            attend_rows(j, b, kvh, kt, vr, sc, keep ? &rc : NULL);
            continue;
        }
        for (size_t i = j->blk[b]; i < j->blk[b + 1]; i++)
            for (size_t g0 = 0; g0 < group; g0 += ATTN_GROUP)
                attend_row_group(j, i, kvh, g0, sc, j->rstride);
    }
}
#endif

/* Causal grouped-query attention through block tables, one (row, head) per
 * work item (one (row, KV head) for FP8 pools, whose rows are dequantized
 * once for the group), a numerically safe softmax (max subtracted) in
 * float32: the rows' k and v are stored in their slots first, then each
 * (row, head) runs over its own sequence's positions 0 .. pos[i] in position
 * order, so a row's output does not depend on the other rows of the call
 * (batch invariance) nor on the thread count.  FP8 pools give the same bits
 * as float32 pools holding the dequantized values: the same attend_group()
 * (AVX-512) or attend_head() over the same float32 numbers. */
nvfp4_status nvfp4k_cpu_attention_paged(void *ctx, const float *q, const float *k,
                                        const float *v, const nvfp4_kv_pages *kv, size_t m,
                                        size_t nh, size_t nkv, size_t hd, float scale,
                                        float *out, nvfp4_error *err)
{
    const size_t kvw = nkv * hd, bs = kv->block, maxlen = kv->max_len;
    const int nth = nvfp4k_cpu_nthreads(ctx);
    const int fp8 = kv->dtype == NVFP4_KV_ELEM_FP8_E4M3;
    /* per thread: maxlen scores (ATTN_GROUP rows with AVX-512); FP8: also
     * maxlen dequantized K and V rows, and with AVX-512 attn_fp8's 16 + 16 */
    size_t per, bytes;
    float *scores;
#ifdef CPU_HAVE_X86
    const cpu_isa isa = ((cpu_ctx *)ctx)->isa;
    const int wide = isa >= CPU_ISA_VNNI     ? 3
                     : isa >= CPU_ISA_AVX512 ? 2
                     : isa >= CPU_ISA_AVX2   ? 1
                                             : 0;
#else
    const int wide = 0;
#endif

    /* AVX-512: the query heads of a KV head in groups of ATTN_GROUP
     * (attend_group()) */
#ifdef CPU_HAVE_X86
    const size_t sub = (nh / nkv + ATTN_GROUP - 1) / ATTN_GROUP;
#endif

    /* a prefill's rows (ATTN_ROWS_MIN or more of one sequence) in blocks
     * of up to ATTN_ROWS (attn_rows_range), fewer where their score rows
     * would pass ATTN_ROWS_SCRATCH floats a thread */
    size_t *blk = NULL, nblk = 0, rstride = 0, rows = 0, heads = 0;

#ifdef CPU_HAVE_X86
    if (wide > 1 && !fp8 && hd % 16 == 0 && m >= ATTN_ROWS_MIN) {
        int found = 0;

        for (size_t i = 0; i < m; i++)
            if ((size_t)kv->pos[i] + 1 > rstride)
                rstride = (size_t)kv->pos[i] + 1;
        rows = ATTN_ROWS_SCRATCH / (nh / nkv * rstride);
        rows = rows > ATTN_ROWS ? ATTN_ROWS : rows;
        /* some sequence with ATTN_ROWS_MIN rows in a row */
        for (size_t i = 1, run = 1; i < m && !found; i++) {
            run = kv->seq[i] == kv->seq[i - 1] ? run + 1 : 1;
            found = run >= ATTN_ROWS_MIN;
        }
        if (!found)
            rows = 0;
        if (rows >= ATTN_ROWS_MIN) {
            if (!(blk = malloc((m + 1) * sizeof(*blk))))
                return nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", "attention_paged", -1,
                                       "out of memory for %zu rows", m);
            for (size_t i = 0; i < m; i++)
                if (i == 0 || kv->seq[i] != kv->seq[i - 1] || i - blk[nblk - 1] == rows)
                    blk[nblk++] = i;
            blk[nblk] = m;
        }
    }
#endif
    if (__builtin_mul_overflow(maxlen, (wide ? ATTN_GROUP : 1) + (fp8 ? 2 * hd : 0), &per) ||
        __builtin_add_overflow(per, fp8 && wide ? 16 * hd + 16 * 64 : 0, &per) ||
        __builtin_mul_overflow(per, (size_t)nth * sizeof(float), &bytes)) {
        free(blk);
        return nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", "attention_paged", -1,
                               "scratch of %zu positions of %zu is out of range", maxlen, hd);
    }
#ifdef CPU_HAVE_X86
    /* decode rows (float32, AVX-512, groups of query heads that are
     * ATTN_GROUP or fewer, or a multiple of it): runs of items in one walk
     * (attend_heads), as many as ATTN_HEADS_SCRATCH floats of score rows
     * allow */
    if (!blk && wide > 1 && !fp8 && (sub == 1 || (nh / nkv) % ATTN_GROUP == 0) &&
        nkv * sub > 1) {
        heads = ATTN_HEADS_SCRATCH / (ATTN_GROUP * (maxlen ? maxlen : 1));
        heads = heads > ATTN_HEADS_MAX ? ATTN_HEADS_MAX : heads;
        heads = heads > nkv * sub ? nkv * sub : heads;
        if (heads > 1)
            per = maxlen * ATTN_GROUP * heads;
        if (heads > 1 && __builtin_mul_overflow(per, (size_t)nth * sizeof(float), &bytes)) {
            free(blk);
            return nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", "attention_paged", -1,
                                   "scratch of %zu positions is out of range", maxlen);
        }
    }
#endif
    if (blk) {
        /* the key tiles, the value rows (when they fit ATTN_ROWS_SCRATCH
         * floats) and ROWS x group score rows (no more than that) */
        per = attn_rows_kfloats(rstride, hd) +
              (rstride * hd <= ATTN_ROWS_SCRATCH ? rstride * hd : 0) + rows * (nh / nkv) * rstride;
        bytes = per * (size_t)nth * sizeof(float);
    }
    scores = malloc(bytes);
    if (!scores) {
        free(blk);
        return nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", "attention_paged", -1,
                               "out of memory for %zu scores", maxlen);
    }
    if (fp8)
        pthread_once(&e4m3_lut_once, e4m3_lut_fill);
    for (size_t i = 0; i < m; i++) {
        const int32_t *tab = kv->tables + (size_t)kv->seq[i] * kv->max_blocks;
        const size_t p = (size_t)kv->pos[i];
        const size_t slot = (size_t)tab[p / bs] * bs + p % bs;
        if (fp8) {
            fp8_store((uint8_t *)kv->k_pool + slot * kvw, k + i * kvw, kvw, kv->k_scale);
            fp8_store((uint8_t *)kv->v_pool + slot * kvw, v + i * kvw, kvw, kv->v_scale);
        } else {
            memcpy((float *)kv->k_pool + slot * kvw, k + i * kvw, kvw * sizeof(float));
            memcpy((float *)kv->v_pool + slot * kvw, v + i * kvw, kvw * sizeof(float));
        }
    }
    {
        attn_job j = {q,    out,  kv,   nh,      nkv,  hd,   scale, scores, per,
                      m,    wide, blk,  nblk,    rstride, heads};
        /* a decode step of a short context is a few microseconds: one thread */
        const int t = m * nh * maxlen * hd >= 8 * CPU_PAR_MIN ? nth : 1;
#ifdef CPU_HAVE_X86
        if (blk)
            nvfp4k_cpu_par(ctx, nblk * nkv, t, attn_rows_range, &j);
        else if (wide && !fp8)
            nvfp4k_cpu_par(ctx, m * nkv * sub, t, attn_group_range, &j);
        else
#endif
            nvfp4k_cpu_par(ctx, m * (fp8 ? nkv : nh), t, fp8 ? attn_fp8_range : attn_range,
                           &j);
    }
    free(scores);
    free(blk);
    return NVFP4_OK;
}

/* The contiguous cache is the paged one over an identity block table: one
 * block of the whole context (position p at row p), the m rows at
 * positions pos0 .. pos0 + m - 1 of that one sequence.  One loop, so the two
 * ops give the same bits (test-kernels checks it). */
nvfp4_status nvfp4k_cpu_attention(void *ctx, const float *q, const float *k, const float *v,
                                  float *k_cache, float *v_cache, size_t max_ctx,
                                  size_t pos0, size_t m, size_t nh, size_t nkv, size_t hd,
                                  float scale, float *out, nvfp4_error *err)
{
    const size_t ctxlen = pos0 + m;
    const int32_t table = 0;
    int32_t *rows;
    nvfp4_kv_pages kv;
    nvfp4_status st;

    (void)max_ctx;
    if (ctxlen > (size_t)INT32_MAX)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "attention", -1,
                               "context of %zu positions; at most %d", ctxlen, INT32_MAX);
    rows = malloc(2 * m * sizeof(int32_t));
    if (!rows)
        return nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", "attention", -1,
                               "out of memory for %zu rows", m);
    for (size_t i = 0; i < m; i++) {
        rows[i] = (int32_t)(pos0 + i);
        rows[m + i] = 0;
    }
    memset(&kv, 0, sizeof(kv)); /* float32 pools (NVFP4_KV_ELEM_F32), no window, no sinks */
    kv.k_pool = k_cache;
    kv.v_pool = v_cache;
    kv.nblocks = 1;
    kv.block = ctxlen;
    kv.tables = &table;
    kv.ntables = 1;
    kv.max_blocks = 1;
    kv.pos = rows;
    kv.seq = rows + m;
    kv.max_len = ctxlen;
    st = nvfp4k_cpu_attention_paged(ctx, q, k, v, &kv, m, nh, nkv, hd, scale, out, err);
    free(rows);
    return st;
}
