/* SPDX-License-Identifier: MIT */
/* Float64 references and synthetic NVFP4 layers shared by the kernel tests
 * (test-kernels: the CPU backend; test-gpu: the GPU backends).  Independent
 * of the code under test: plain formulas of spec sections 1 and 2. */
#ifndef NVFP4_KREF_H
#define NVFP4_KREF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvfp4/kernels.h>
#include <nvfp4/quant.h>

/* Each test program seeds its own stream (KREF_SEED) before including this. */
static uint64_t rng_state = KREF_SEED;

static inline double ref_e2m1(unsigned nib)
{
    static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    return (nib & 8) ? -mag[nib & 7] : mag[nib & 7];
}

static inline double ref_e4m3(uint8_t b)
{
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    double v = e == 0 ? ldexp(m, -9) : ldexp(1.0 + m / 8.0, e - 7);
    return s ? -v : v;
}

static inline float ref_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline double gamma_n(size_t n)
{
    double nu = (double)(n + 8) * ldexp(1.0, -24);
    return nu / (1.0 - nu);
}

static inline uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static inline float frand(float lo, float hi)
{
    return lo + (hi - lo) * (float)(rnd() % 1000003) / 1000003.0f;
}

/* Synthetic NVFP4 Linear: random nibbles and positive E4M3 block scales
 * (including zero and subnormal ones, §8: zero scales are legal). */
typedef struct {
    nvfp4_linear lin;
    uint8_t *packed, *scales;
} syn_linear;

static inline void syn_make(syn_linear *s, const char *name, nvfp4_scheme scheme, int64_t n,
                     int64_t k, float s2, float in_scale)
{
    memset(s, 0, sizeof(*s));
    s->packed = malloc((size_t)(n * k / 2));
    s->scales = malloc((size_t)(n * k / 16));
    for (int64_t i = 0; i < n * k / 2; i++)
        s->packed[i] = (uint8_t)rnd();
    for (int64_t i = 0; i < n * k / 16; i++) {
        uint32_t r = rnd() % 100;
        /* mostly normal scales 2^-3..2^5, some subnormal, a few zero */
        s->scales[i] = r < 3 ? 0 : r < 8 ? (uint8_t)(1 + rnd() % 7)
                                         : (uint8_t)(0x20 + rnd() % 0x40);
    }
    snprintf(s->lin.prefix, sizeof(s->lin.prefix), "%s", name);
    s->lin.scheme = scheme;
    s->lin.n = n;
    s->lin.k = k;
    s->lin.weight = s->packed;
    s->lin.scales = s->scales;
    s->lin.weight_scale_2 = s2;
    s->lin.input_scale = in_scale;
}

static inline void syn_free(syn_linear *s)
{
    free(s->packed);
    free(s->scales);
}

/* W[r][c] of a synthetic linear, float32 exactly as §2 orders it. */
static inline float syn_w(const nvfp4_linear *l, int64_t r, int64_t c)
{
    uint8_t byte = l->weight[(size_t)(r * l->k / 2 + c / 2)];
    unsigned nib = (c & 1) ? byte >> 4 : byte & 15;
    float bs = (float)ref_e4m3(l->scales[(size_t)(r * l->k / 16 + c / 16)]) * l->weight_scale_2;
    return (float)ref_e2m1(nib) * bs;
}

/* A 1-D (d1 == 0) or 2-D tensor view over DATA, as libformat would make. */
static inline void make_tensor(nvfp4_tensor *t, const char *name, nvfp4_dtype dt, int64_t d0,
                        int64_t d1, const void *data)
{
    memset(t, 0, sizeof(*t));
    t->name = name;
    t->file = "synthetic";
    t->dtype = dt;
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->numel = (uint64_t)d0 * (uint64_t)(d1 ? d1 : 1);
    t->nbytes = t->numel * nvfp4_dtype_size(dt);
    t->data = data;
}

/* nvfp4_k_glu's formulas in float64 (gelu_tanh(g) * u; gpt-oss's clamped
 * SwiGLU) and a bound on the float32 error (TOL): the float32 results are a
 * few roundings of each product, plus the cancellation of 1 + tanh (an
 * error of tanh's argument times its derivative, at most |inner|) and of
 * up + 1. */
static inline double glu_ref(int kind, double g, double up, double alpha, double limit, double *tol)
{
    const double u = ldexp(1.0, -24);

    if (kind == NVFP4_GLU_GELU_TANH) {
        double inner = sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g);
        *tol = 16 * u * fabs(g) * fabs(up) * (1 + fabs(inner)) + 1e-30;
        return 0.5 * g * (1 + tanh(inner)) * up;
    }
    g = g > limit ? limit : g;
    up = up > limit ? limit : up < -limit ? -limit : up;
    {
        double gl = g / (1 + exp(-alpha * g));
        *tol = 16 * u * (fabs(up) + 1) * (fabs(gl) + fabs(g * alpha * g) * 0.25) + 1e-30;
        return (up + 1) * gl;
    }
}


/* Causal GQA attention of one query row in float64: the softmax of
 * scale * q.k over positions first .. len - 1 (first = len - window when
 * a window > 0 is shorter than len, else 0), with a sink logit (gpt-oss:
 * it joins the maximum and the denominator and weighs no value) when SINK
 * is not NULL, weighting the values.  Q: the head's HD floats; K, V: the
 * key/value head's entries at position 0, positions STRIDE floats apart;
 * OUT: HD doubles (NaN when out of memory, so the caller's check fails). */
static inline void ref_attention(const float *q, const float *k, const float *v, size_t len,
                                 size_t stride, int hd, double scale, size_t window,
                                 const float *sink, double *out)
{
    const size_t first = window && len > window ? len - window : 0;
    double *p = malloc((len ? len : 1) * sizeof *p), mx = sink ? *sink : -INFINITY, sum = 0;

    if (!p) {
        for (int c = 0; c < hd; c++)
            out[c] = NAN;
        return;
    }
    for (size_t j = first; j < len; j++) {
        double d = 0;
        for (int c = 0; c < hd; c++)
            d += (double)q[c] * k[j * stride + c];
        p[j] = d * scale;
        mx = fmax(mx, p[j]);
    }
    for (size_t j = first; j < len; j++)
        sum += (p[j] = exp(p[j] - mx));
    if (sink)
        sum += exp(*sink - mx);
    for (int c = 0; c < hd; c++) {
        double o = 0;
        for (size_t j = first; j < len; j++)
            o += p[j] / sum * v[j * stride + c];
        out[c] = o;
    }
    free(p);
}

/* A paged KV cache description (pools, sinks and window left to the
 * caller): NTABLES block tables of MAX_BLOCKS ids into NBLOCKS blocks of
 * BLOCK tokens, rows at POS of sequences SEQ; DTYPE's scales KS, VS (FP8
 * pools; ignored for float32). */
static inline void kv_pages_init(nvfp4_kv_pages *kv, size_t nblocks, size_t block,
                                 const int32_t *tables, size_t ntables, size_t max_blocks,
                                 const int32_t *pos, const int32_t *seq, size_t max_len,
                                 nvfp4_kv_elem dtype, float ks, float vs)
{
    memset(kv, 0, sizeof *kv);
    kv->nblocks = nblocks;
    kv->block = block;
    kv->tables = tables;
    kv->ntables = ntables;
    kv->max_blocks = max_blocks;
    kv->pos = pos;
    kv->seq = seq;
    kv->max_len = max_len;
    kv->dtype = dtype;
    if (dtype != NVFP4_KV_ELEM_F32) {
        kv->k_scale = ks;
        kv->v_scale = vs;
    }
}

#endif
