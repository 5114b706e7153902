/* SPDX-License-Identifier: MIT */
/*
 * Weight assembly: the tensor plan (plan.c) loaded, fused and uploaded.
 *
 * Weights stay memory-mapped; each Linear is validated by libquant and
 * uploaded once to the backend.  Fused groups (spec §4): q/k/v, gate/up and
 * each expert's gate/up must share weight_scale_2 (nvfp4_linear_fuse_check);
 * q, k and v are kept as three kweights that share the group's (max) input
 * scale, gate/up are uploaded as one fused kweight.  A q/k/v group stored as
 * one Linear (Phi-3's qkv_proj) becomes three row views of it; a gate/up
 * stored as one is already the fused kweight's layout.  MoE input scales are
 * the max over all experts of a layer (§5, §6).
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model-internal.h"

/* ---- small helpers ---------------------------------------------------------- */

static nvfp4_status nomem(nvfp4_error *err)
{
    return nvfp4_error_set(err, NVFP4_ERR_NOMEM, NULL, NULL, -1, "out of memory");
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    void *p;
    size_t c = *cap ? *cap : 16;

    if (need <= *cap)
        return 0;
    while (c < need)
        c *= 2;
    p = realloc(*arr, c * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = c;
    return 0;
}

static float *upload_floats(nvfp4_model *m, const float *src, size_t n, nvfp4_error *err)
{
    float *d = nvfp4_backend_alloc(m->be, n * sizeof(float), err);

    if (!d)
        return NULL;
    if (nvfp4_backend_upload(m->be, d, src, n * sizeof(float), err)) {
        nvfp4_backend_release(m->be, d);
        return NULL;
    }
    return d;
}

/* A 1-D float vector (norm weights) of length n, converted to float32. */
static nvfp4_status load_vector(nvfp4_model *m, const char *name, int64_t n, float **out,
                                nvfp4_error *err)
{
    const nvfp4_tensor *t;
    float *host;

    *out = NULL;
    TRY(nvfp4_checkpoint_get(m->ck, name, &t, err));
    if (t->ndim != 1 || t->shape[0] != n)
        return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, t->file, name, -1,
                               "expected shape [%lld] from config.json, found %d "
                               "dimension(s) [%lld%s]",
                               (long long)n, t->ndim,
                               (long long)(t->ndim ? t->shape[0] : 0),
                               t->ndim > 1 ? ", ..." : "");
    host = malloc((size_t)n * sizeof(float));
    if (!host)
        return nomem(err);
    for (int64_t i = 0; i < n; i++) {
        if (nvfp4_quant_read_float(t, (uint64_t)i, &host[i])) {
            free(host);
            return nvfp4_error_set(err, NVFP4_ERR_BAD_DTYPE, t->file, name, -1,
                                   "dtype is %s; expected F32, BF16 or F16",
                                   nvfp4_dtype_name(t->dtype));
        }
    }
    if (m->arch->norm == NORM_RMS_PLUS1) /* Gemma: x * (1 + w), 1 + w in float32 */
        for (int64_t i = 0; i < n; i++)
            host[i] = 1.0f + host[i];
    *out = upload_floats(m, host, (size_t)n, err);
    free(host);
    if (!*out)
        return err ? err->status : NVFP4_ERR_NOMEM;
    return NVFP4_OK;
}

/* Load one Linear view.  FORCE_NONE: never quantized whatever the config
 * says (embeddings, routers, gates: modules that are not nn.Linear for
 * Quark, or that vLLM never quantizes). */
static nvfp4_status load_linear(nvfp4_model *m, const char *prefix, int64_t n, int64_t k,
                                int force_none, nvfp4_linear **out, nvfp4_error *err)
{
    nvfp4_scheme scheme = NVFP4_SCHEME_NONE;
    nvfp4_linear *lin;
    nvfp4_status rc;

    *out = NULL;
    if (!force_none)
        TRY(nvfp4_qconfig_resolve(m->qc, prefix, &scheme, err));
    if (grow((void **)&m->lins, &m->caplins, m->nlins + 1, sizeof(*m->lins)))
        return nomem(err);
    lin = calloc(1, sizeof(*lin));
    if (!lin)
        return nomem(err);
    rc = nvfp4_linear_load_dialect(m->ck, prefix, scheme, nvfp4_qconfig_dialect(m->qc), n, k,
                                   lin, err);
    if (rc) {
        free(lin);
        return rc;
    }
    m->lins[m->nlins++] = lin;
    *out = lin;
    return NVFP4_OK;
}

/* PARTS as one kweight, with nvfp4_kweight_upload_ex()'s FLAGS. */
static nvfp4_status upload_ex(nvfp4_model *m, nvfp4_linear *parts, size_t n, unsigned flags,
                              nvfp4_kweight **out, nvfp4_error *err)
{
    *out = nvfp4_kweight_upload_ex(m->be, parts, n, flags, err);
    if (!*out)
        return err && err->status ? err->status : NVFP4_ERR_BACKEND;
    /* A backend that made its own copy no longer reads the mapping: give
     * those pages back so that the weights are resident once, not twice. */
    if (nvfp4_kweight_holds_copy(*out)) {
        for (size_t i = 0; i < n; i++) {
            const nvfp4_linear *p = &parts[i];
            if (p->scheme != NVFP4_SCHEME_NONE) {
                nvfp4_checkpoint_release_pages(m->ck, p->weight, (size_t)(p->n * p->k / 2));
                if (!p->owned_scales)
                    nvfp4_checkpoint_release_pages(m->ck, p->scales,
                                                   (size_t)(p->n * p->k / NVFP4_BLOCK));
            } else if (p->dense) {
                nvfp4_checkpoint_release_pages(m->ck, p->dense->data, p->dense->nbytes);
            }
        }
        nvfp4m_par_uploaded(m, parts, n);
    }
    return NVFP4_OK;
}

/* PARTS as one kweight that Linear layers multiply: float parts that
 * the checkpoint's mapping holds are copied by a backend that would read
 * them in place (2 MiB pages on the CPU, which a GEMV streams faster than
 * the mapping's 4 KiB ones), and the mapped pages given back after; the
 * model's own float arrays (file "": densified shards, column slices) are
 * read where they are.  The flag changes nothing for NVFP4 parts. */
static nvfp4_status upload(nvfp4_model *m, nvfp4_linear *parts, size_t n,
                           nvfp4_kweight **out, nvfp4_error *err)
{
    unsigned flags = NVFP4_KWEIGHT_COPY;

    for (size_t i = 0; i < n; i++)
        if (parts[i].scheme == NVFP4_SCHEME_NONE && parts[i].dense &&
            (!parts[i].dense->file || !parts[i].dense->file[0]))
            flags = 0;
    return upload_ex(m, parts, n, flags, out, err);
}

/* A per-expert view [rows, cols] into a 3-D float tensor [E, rows, cols]
 * (transformers >= 5 stores unquantized experts this way). */
static nvfp4_status slice_linear(nvfp4_model *m, const nvfp4_tensor *t, int64_t e,
                                 int64_t rows, int64_t cols, nvfp4_linear **out,
                                 nvfp4_error *err)
{
    nvfp4_tensor *s;
    nvfp4_linear *lin;
    size_t isz = nvfp4_dtype_size(t->dtype);

    if (t->dtype != NVFP4_DTYPE_BF16 && t->dtype != NVFP4_DTYPE_F16 &&
        t->dtype != NVFP4_DTYPE_F32)
        return nvfp4_error_set(err, NVFP4_ERR_BAD_DTYPE, t->file, t->name, -1,
                               "dtype is %s; expected BF16, F16 or F32 stacked experts",
                               nvfp4_dtype_name(t->dtype));
    if (grow((void **)&m->lins, &m->caplins, m->nlins + 1, sizeof(*m->lins)))
        return nomem(err);
    s = calloc(1, sizeof(*s));
    lin = calloc(1, sizeof(*lin));
    if (!s || !lin) {
        free(s);
        free(lin);
        return nomem(err);
    }
    *s = *t;
    s->ndim = 2;
    s->shape[0] = rows;
    s->shape[1] = cols;
    s->numel = (uint64_t)rows * (uint64_t)cols;
    s->nbytes = s->numel * isz;
    s->data = (const uint8_t *)t->data + (size_t)e * s->nbytes;
    s->offset = t->offset + (uint64_t)e * s->nbytes;
    snprintf(lin->prefix, sizeof(lin->prefix), "%s[%lld]", t->name, (long long)e);
    lin->scheme = NVFP4_SCHEME_NONE;
    lin->n = rows;
    lin->k = cols;
    lin->dense = s;
    if (grow((void **)&m->slices, &m->capslices, m->nslices + 1, sizeof(nvfp4_tensor *))) {
        free(s);
        free(lin);
        return nomem(err);
    }
    m->slices[m->nslices++] = s;
    m->lins[m->nlins++] = lin;
    *out = lin;
    return NVFP4_OK;
}

/* LIN (NVFP4) dequantized exactly (§2, float32) into a dense float32 view
 * owned by the model, for a fused group whose shards cannot share one NVFP4
 * kweight (DIALECTS.md): a weight-only shard beside an unquantized one, or
 * shards with their own global scales under opt.rescale_fused.  A W4A4
 * shard keeps INPUT_SCALE: the CPU backend quantize-dequantizes the
 * activations of such a dense kweight (§5) before the float product, which
 * is what vLLM's emulation computes (dequantized weights times qdq(x)). */
static nvfp4_status densify(nvfp4_model *m, nvfp4_linear *lin, float input_scale,
                            float input_gs, nvfp4_error *err)
{
    struct owned {
        nvfp4_tensor t;
        float data[];
    } *o;
    size_t n = (size_t)lin->n * (size_t)lin->k;

    if (grow((void **)&m->slices, &m->capslices, m->nslices + 1, sizeof(nvfp4_tensor *)))
        return nomem(err);
    if (n > (SIZE_MAX - sizeof(*o)) / sizeof(float) ||
        !(o = malloc(sizeof(*o) + n * sizeof(float))))
        return nomem(err);
    memset(&o->t, 0, sizeof(o->t));
    if (nvfp4_linear_dequant(lin, o->data, err)) {
        free(o);
        return err ? err->status : NVFP4_ERR_INVALID;
    }
    o->t.name = lin->prefix;
    o->t.file = "";
    o->t.dtype = NVFP4_DTYPE_F32;
    o->t.ndim = 2;
    o->t.shape[0] = lin->n;
    o->t.shape[1] = lin->k;
    o->t.numel = n;
    o->t.nbytes = n * sizeof(float);
    o->t.data = o->data;
    m->slices[m->nslices++] = &o->t;
    lin->dense = &o->t;
    lin->weight = lin->scales = NULL;
    lin->input_scale = lin->scheme == NVFP4_SCHEME_W4A4 ? input_scale : 0.0f;
    lin->input_gs = lin->scheme == NVFP4_SCHEME_W4A4 ? input_gs : 0.0f;
    lin->scheme = NVFP4_SCHEME_NONE;
    return NVFP4_OK;
}

/* A view of rows [R0, R0 + ROWS) of SRC (a Linear stored fused: Phi-3's
 * qkv_proj): the rows of an NVFP4 weight and of its block scales are
 * contiguous, so the view shares the mapping, the global and input scales;
 * its product with any activation row is that of the fused Linear. */
static nvfp4_status row_view(nvfp4_model *m, const nvfp4_linear *src, int64_t r0,
                             int64_t rows, char tag, nvfp4_linear **out,
                             nvfp4_error *err)
{
    nvfp4_tensor *ts[2] = {NULL, NULL};
    const nvfp4_tensor *from[2] = {src->scheme == NVFP4_SCHEME_NONE ? src->dense : NULL,
                                   src->bias};
    nvfp4_linear *lin;

    if (grow((void **)&m->lins, &m->caplins, m->nlins + 1, sizeof(*m->lins)) ||
        grow((void **)&m->slices, &m->capslices, m->nslices + 2, sizeof(nvfp4_tensor *)))
        return nomem(err);
    if (!(lin = calloc(1, sizeof(*lin))))
        return nomem(err);
    *lin = *src;
    lin->owned_scales = NULL;
    lin->n = rows;
    snprintf(lin->prefix, sizeof(lin->prefix), "%.*s[%c]", (int)sizeof(lin->prefix) - 4,
             src->prefix, tag);
    if (src->scheme != NVFP4_SCHEME_NONE) {
        lin->weight = src->weight + (size_t)r0 * (size_t)(src->k / 2);
        lin->scales = src->scales + (size_t)r0 * (size_t)(src->k / NVFP4_BLOCK);
    }
    /* the dense weight [n, k] and the bias [n]: row slices of the tensors */
    for (int i = 0; i < 2; i++) {
        const nvfp4_tensor *t = from[i];
        size_t isz, per;

        if (!t)
            continue;
        isz = nvfp4_dtype_size(t->dtype);
        per = (i == 0 ? (size_t)src->k : 1) * isz;
        if (!(ts[i] = calloc(1, sizeof(*ts[i])))) {
            free(lin); /* ts[0], if any, is the model's already (m->slices) */
            return nomem(err);
        }
        *ts[i] = *t;
        ts[i]->shape[0] = rows;
        ts[i]->numel = (uint64_t)rows * (i == 0 ? (uint64_t)src->k : 1);
        ts[i]->nbytes = (uint64_t)rows * per;
        ts[i]->data = (const uint8_t *)t->data + (size_t)r0 * per;
        ts[i]->offset = t->offset + (uint64_t)r0 * per;
        m->slices[m->nslices++] = ts[i];
    }
    if (ts[0])
        lin->dense = ts[0];
    if (ts[1])
        lin->bias = ts[1];
    m->lins[m->nlins++] = lin;
    *out = lin;
    return NVFP4_OK;
}

/* The parent module of a Linear prefix (a.b.q_proj -> a.b), for messages. */
static const char *parent_of(const char *prefix, char *buf, size_t cap)
{
    char *dot;

    snprintf(buf, cap, "%s", prefix);
    dot = strrchr(buf, '.');
    if (dot)
        *dot = '\0';
    return buf;
}

/* Load every entry of plan entries [FIRST, FIRST + COUNT). */
static nvfp4_status load_entries(nvfp4_model *m, size_t first, size_t count,
                                 nvfp4_error *err)
{
    for (size_t i = first; i < first + count; i++) {
        plan_entry *pe = &m->plan.e[i];

        switch (pe->kind) {
        case PE_LINEAR:
            TRY(load_linear(m, pe->name, pe->n, pe->k, pe->force_none, &pe->lin, err));
            break;
        case PE_VECTOR:
            TRY(load_vector(m, pe->name, pe->n, &pe->vec, err));
            break;
        case PE_STACKED:
            TRY(nvfp4_checkpoint_get(m->ck, pe->name, &pe->t, err));
            break;
        }
    }
    return NVFP4_OK;
}

/* The vector of ROLE in layer L, moved out of the plan (its owner now). */
static float *take_vec(nvfp4_model *m, int64_t l, tensor_role role)
{
    plan_entry *pe = nvfp4m_plan_get(&m->plan, l, role, 0);
    float *v;

    if (!pe)
        return NULL;
    v = pe->vec;
    pe->vec = NULL;
    return v;
}

static nvfp4_linear *lin_of(nvfp4_model *m, int64_t l, tensor_role role, int64_t e)
{
    plan_entry *pe = nvfp4m_plan_get(&m->plan, l, role, e);
    return pe ? pe->lin : NULL;
}

/* ---- assembly ------------------------------------------------------------- */

/* Gemma's embedding multiplier sqrt(HIDDEN), rounded to the dtype of the
 * embedding weight EMB as transformers does (the buffer is cast to the
 * weights' dtype on use, transformers PR 29402; vLLM casts its normalizer
 * alike): bf16(sqrt(2048)) = 45.25, not 45.2548.  The product itself stays
 * float32 like every activation here. */
static float embed_multiplier(int64_t hidden, const nvfp4_linear *emb)
{
    const float s = (float)sqrt((double)hidden);
    const nvfp4_dtype dt = emb && emb->dense ? emb->dense->dtype : NVFP4_DTYPE_F32;

    if (dt == NVFP4_DTYPE_BF16)
        return nvfp4_bf16_decode(nvfp4_bf16_encode(s));
    if (dt == NVFP4_DTYPE_F16)
        return nvfp4_f16_decode(nvfp4_f16_encode(s));
    return s;
}

static nvfp4_status fuse_gate_up(nvfp4_model *m, const char *layer, nvfp4_linear *g,
                                 nvfp4_linear *u, float force_input, nvfp4_kweight **out,
                                 nvfp4_error *err)
{
    nvfp4_linear pair[2];
    float in_scale = 0.0f, in_gs = 0.0f;

    /* A group the exclusions split, or (opt.rescale_fused) shards with their
     * own global scales: the NVFP4 shards are dequantized exactly to float32
     * so that one dense kweight holds both, each with its own scale.  A W4A4
     * shard beside an unquantized one cannot be: one fused layer cannot
     * quantize the activations of one shard only. */
    if (g->scheme != u->scheme ||
        (m->opt.rescale_fused && g->scheme != NVFP4_SCHEME_NONE &&
         g->weight_scale_2 != u->weight_scale_2)) {
        nvfp4_linear *sh[2] = {g, u};
        for (int i = 0; i < 2; i++)
            if (sh[i]->scheme == NVFP4_SCHEME_W4A4 && sh[1 - i]->scheme != NVFP4_SCHEME_W4A4)
                return nvfp4_error_set(
                    err, NVFP4_ERR_UNSUPPORTED, nvfp4_checkpoint_dir(m->ck), layer, -1,
                    "%s is W4A4 but its fused sibling %s is %s; gate and up run as one "
                    "fused layer, which cannot quantize the activations of one shard only",
                    sh[i]->prefix, sh[1 - i]->prefix, nvfp4_scheme_name(sh[1 - i]->scheme));
        if (g->scheme == NVFP4_SCHEME_W4A4) {
            pair[0] = *g;
            pair[1] = *u;
            TRY(nvfp4_linear_fuse_check(layer, pair, 2, NVFP4_FUSE_KEEP_SCALES, &in_scale,
                                        err));
            in_gs = pair[0].input_gs;
            if (force_input > 0) {
                in_scale = force_input;
                in_gs = 0.0f;
            }
        }
        for (int i = 0; i < 2; i++)
            if (sh[i]->scheme != NVFP4_SCHEME_NONE)
                TRY(densify(m, sh[i], in_scale, in_gs, err));
    }
    pair[0] = *g;
    pair[1] = *u;
    if (g->scheme == NVFP4_SCHEME_NONE) /* both unquantized: nothing to share */
        return upload(m, pair, 2, out, err);
    TRY(nvfp4_linear_fuse_check(layer, pair, 2, 0, &in_scale, err));
    *g = pair[0];
    *u = pair[1];
    if (pair[0].scheme == NVFP4_SCHEME_W4A4 && force_input > 0) { /* MoE: §6 */
        pair[0].input_scale = pair[1].input_scale = force_input;
        pair[0].input_gs = pair[1].input_gs = 0.0f;
    } else if (pair[0].scheme == NVFP4_SCHEME_W4A4) { /* the group's (§4, DIALECTS.md) */
        pair[0].input_scale = pair[1].input_scale = in_scale;
    }
    return upload(m, pair, 2, out, err);
}

/* The RoPE inverse frequencies of the rot_dim / 2 rotated pairs.  Longrope
 * takes its long factors when the context (MAX_CTX) is longer than the
 * original one, as transformers does for a sequence that long; a context
 * within it runs exactly as transformers on every sequence it holds. */
static void compute_inv_freq(const hparams *hp, int64_t max_ctx, int local, float *inv)
{
    int64_t half = hp->rot_dim / 2;
    const double *ext = !hp->rope_longrope || local ? NULL
                        : (double)max_ctx > hp->rs_orig ? hp->lr_long : hp->lr_short;
    float theta = (float)(local ? hp->rope_local_theta : hp->rope_theta);

    for (int64_t i = 0; i < half; i++) {
        /* As transformers: float32(base ** (2i/d)) then 1/x, in float32. */
        float e = (float)(2 * i) / (float)hp->rot_dim;
        float f = 1.0f / powf(theta, e);
        if (ext) /* 1 / (factor * base ** (2i/d)), float32 */
            f = 1.0f / ((float)ext[i] * powf(theta, e));
        if (!local && hp->rope_linear != 1.0)
            f = (float)(f / hp->rope_linear); /* inv_freq / factor */
        if (!local && hp->rope_yarn) {
            /* YaRN (transformers' _compute_yarn_parameters, float32):
             * interpolation 1 / (factor * base^e) and extrapolation 1 / base^e
             * mixed by 1 - clamp((i - low) / (high - low), 0, 1) */
            float pf = powf(theta, e), ramp;
            float extra = 1.0f / pf, inter = 1.0f / ((float)hp->yarn_factor * pf);
            ramp = ((float)i - (float)hp->yarn_low) / (float)(hp->yarn_high - hp->yarn_low);
            ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
            ramp = 1.0f - ramp;
            f = inter * (1.0f - ramp) + extra * ramp;
        }
        if (!local && hp->rope_llama3) {
            /* Llama 3 frequency-dependent scaling. */
            double lo_wl = hp->rs_orig / hp->rs_low, hi_wl = hp->rs_orig / hp->rs_high;
            double wl = 2.0 * M_PI / f;
            if (wl > lo_wl) {
                f = (float)(f / hp->rs_factor);
            } else if (wl >= hi_wl) {
                double s = (hp->rs_orig / wl - hp->rs_low) / (hp->rs_high - hp->rs_low);
                f = (float)((1.0 - s) * f / hp->rs_factor + s * f);
            }
        }
        inv[i] = f;
    }
}

/* gpt-oss biases every Linear: q/k/v (checked in load_attention with
 * qkv_bias), o_proj, the router and each expert's gate_up_proj and
 * down_proj.  A missing one would silently run as
 * zero, so it is refused, named. */
static nvfp4_status need_oai_bias(nvfp4_model *m, const nvfp4_linear *lin, nvfp4_error *err)
{
    char bias[NVFP4_ERROR_FIELD_LENGTH + 8];

    if (m->arch->act != ACT_SWIGLU_OAI || !lin || lin->bias)
        return NVFP4_OK;
    snprintf(bias, sizeof(bias), "%s.bias", lin->prefix);
    return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, nvfp4_checkpoint_dir(m->ck), bias, -1,
                           "%s has a bias on every Linear; this one is missing",
                           m->arch_name);
}

static nvfp4_status load_attention(nvfp4_model *m, int64_t l, layer_t *L, nvfp4_error *err)
{
    const hparams *hp = &m->hp;
    char pre[NVFP4_ERROR_FIELD_LENGTH], bias[NVFP4_ERROR_FIELD_LENGTH + 8];
    nvfp4_linear *q, *k, *v, *o, *qkv, group[3];
    float in_scale;

    if ((qkv = lin_of(m, l, TR_QKV, 0))) {
        int64_t qd = hp->heads * hp->head_dim, kd = hp->kv_heads * hp->head_dim;
        TRY(row_view(m, qkv, 0, qd, 'q', &q, err));
        TRY(row_view(m, qkv, qd, kd, 'k', &k, err));
        TRY(row_view(m, qkv, qd + kd, kd, 'v', &v, err));
    } else {
        q = lin_of(m, l, TR_Q, 0);
        k = lin_of(m, l, TR_K, 0);
        v = lin_of(m, l, TR_V, 0);
    }
    o = lin_of(m, l, TR_O, 0);
    L->q_norm = take_vec(m, l, TR_Q_NORM);
    L->k_norm = take_vec(m, l, TR_K_NORM);
    parent_of(q->prefix, pre, sizeof(pre));
    if (m->arch->qkv_bias && (!q->bias || !k->bias || !v->bias)) {
        snprintf(bias, sizeof(bias), "%s.bias", !q->bias ? q->prefix : !k->bias ? k->prefix
                                                                              : v->prefix);
        return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, nvfp4_checkpoint_dir(m->ck), bias,
                               -1, "%s has biases on q/k/v; this one is missing",
                               m->arch_name);
    }
    TRY(need_oai_bias(m, o, err));
    TRY(nvfp4m_par_split_attention(m, q, k, v, o, err));
    if ((L->sinks = take_vec(m, l, TR_SINKS)) && m->par->size > 1) {
        /* this rank's heads of the sinks, as of q */
        float *h = malloc((size_t)hp->heads * sizeof(float)), *d;
        nvfp4_status rc;
        if (!h)
            return nomem(err);
        rc = nvfp4_backend_download(m->be, h, L->sinks, (size_t)hp->heads * sizeof(float), err);
        d = rc ? NULL : upload_floats(m, h + m->par->h0, (size_t)m->par->heads, err);
        free(h);
        if (!d)
            return err && err->status ? err->status : NVFP4_ERR_BACKEND;
        nvfp4_backend_release(m->be, L->sinks);
        L->sinks = d;
    }
    /* §4: one fused q/k/v GEMM in vLLM; shared weight_scale_2, max input scale.
     * q, k and v are three kweights here, so a group the exclusions split
     * (one shard unquantized, or schemes differ) runs as three separate
     * layers with their own scales, and opt.rescale_fused keeps each
     * shard's own weight_scale_2 exactly (DIALECTS.md). */
    if (q->scheme != NVFP4_SCHEME_NONE && q->scheme == k->scheme && k->scheme == v->scheme) {
        group[0] = *q;
        group[1] = *k;
        group[2] = *v;
        TRY(nvfp4_linear_fuse_check(pre, group, 3,
                                    m->opt.rescale_fused ? NVFP4_FUSE_KEEP_SCALES : 0,
                                    &in_scale, err));
        if (q->scheme == NVFP4_SCHEME_W4A4) {
            q->input_scale = k->input_scale = v->input_scale = in_scale;
            q->input_gs = k->input_gs = v->input_gs = group[0].input_gs;
        }
    }
    TRY(upload(m, q, 1, &L->q, err));
    TRY(upload(m, k, 1, &L->k, err));
    TRY(upload(m, v, 1, &L->v, err));
    TRY(upload(m, o, 1, &L->o, err));
    return NVFP4_OK;
}

/* A dense gated MLP of layer L: GATE + UP fused after the §4 check, or
 * GATE_UP stored fused (already the fused kweight's layout); DOWN. */
/* SPLIT (dense layers' MLP; NULL elsewhere): where a W4A4 gate or up sits
 * beside a sibling of another scheme, which one fused layer cannot run
 * (fuse_gate_up), the two are kept as separate layers here, each with its
 * own scales, and *GU stays NULL (context.c runs them one after the other). */
static nvfp4_status load_dense_mlp(nvfp4_model *m, int64_t l, tensor_role gate,
                                   tensor_role up, tensor_role gate_up, tensor_role down,
                                   nvfp4_kweight **gu, nvfp4_kweight **dn,
                                   nvfp4_kweight **split, nvfp4_error *err)
{
    char pre[NVFP4_ERROR_FIELD_LENGTH];
    nvfp4_linear *g, *u, *d = lin_of(m, l, down, 0);

    if (gate_up != TR_COUNT && (g = lin_of(m, l, gate_up, 0)) && m->par->size == 1) {
        TRY(upload(m, g, 1, gu, err));
    } else {
        if (gate_up != TR_COUNT && g) {
            /* a stored gate_up_proj [gate rows | up rows] under tensor
             * parallelism: two row views, split and fused again below */
            nvfp4_linear *gu2 = g;
            TRY(row_view(m, gu2, 0, gu2->n / 2, 'g', &g, err));
            TRY(row_view(m, gu2, gu2->n / 2, gu2->n / 2, 'u', &u, err));
        } else {
            g = lin_of(m, l, gate, 0);
            u = lin_of(m, l, up, 0);
        }
        parent_of(g->prefix, pre, sizeof(pre));
        TRY(nvfp4m_par_split_mlp(m, pre, g, u, d, err));
        if (split && g->scheme != u->scheme &&
            (g->scheme == NVFP4_SCHEME_W4A4 || u->scheme == NVFP4_SCHEME_W4A4)) {
            TRY(upload(m, g, 1, &split[0], err));
            TRY(upload(m, u, 1, &split[1], err));
            m->split_gu = 1;
        } else {
            TRY(fuse_gate_up(m, pre, g, u, 0, gu, err));
        }
    }
    return upload(m, d, 1, dn, err);
}

/* An expert's activation scale as vLLM's NVFP4 MoE reduces it (DIALECTS.md,
 * "MoE experts"): the multiplier direction in every dialect, so for
 * compressed-tensors 1.0f / input_global_scale (one float32 division), not
 * the multiplier whose reciprocal is input_global_scale; the layer's gs is
 * then 1.0f / the max of these over all experts (input_gs 0). */
static float moe_act_mult(const nvfp4_linear *lin)
{
    return lin->input_gs != 0.0f ? 1.0f / lin->input_gs : lin->input_scale;
}

static nvfp4_status load_moe(nvfp4_model *m, int64_t l, layer_t *L, nvfp4_error *err)
{
    const hparams *hp = &m->hp;
    const plan_layer *pl = &m->plan.layers[l];
    char ex[NVFP4_ERROR_FIELD_LENGTH];
    int64_t E = hp->experts, H = hp->hidden, I = hp->moe_inter;
    float in13 = 0, in2 = 0;

    L->w13 = calloc((size_t)E, sizeof(*L->w13));
    L->w2 = calloc((size_t)E, sizeof(*L->w2));
    if (!L->w13 || !L->w2)
        return nomem(err);
    if (pl->stacked) {
        /* [E, 2I, H] gate rows then up rows; [E, H, I] down. Unquantized. */
        const nvfp4_tensor *tgu = nvfp4m_plan_get(&m->plan, l, TR_EXP_GATE_UP_STACKED, 0)->t;
        const nvfp4_tensor *td = nvfp4m_plan_get(&m->plan, l, TR_EXP_DOWN_STACKED, 0)->t;
        int bad_gu = tgu->ndim != 3 || tgu->shape[0] != E || tgu->shape[1] != 2 * I ||
                     tgu->shape[2] != H;
        if (bad_gu || td->ndim != 3 || td->shape[0] != E || td->shape[1] != H ||
            td->shape[2] != I) {
            const nvfp4_tensor *bad = bad_gu ? tgu : td;
            return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, bad->file, bad->name, -1,
                                   "stacked experts do not match config.json: expected "
                                   "gate_up_proj [%lld, %lld, %lld] and down_proj "
                                   "[%lld, %lld, %lld]",
                                   (long long)E, (long long)(2 * I), (long long)H,
                                   (long long)E, (long long)H, (long long)I);
        }
        for (int64_t e = 0; e < E; e++) {
            nvfp4_linear *a, *b;
            if (!nvfp4m_par_owns_expert(m, e)) /* expert parallelism */
                continue;
            TRY(slice_linear(m, tgu, e, 2 * I, H, &a, err));
            TRY(slice_linear(m, td, e, H, I, &b, err));
            TRY(upload(m, a, 1, &L->w13[e], err));
            TRY(upload(m, b, 1, &L->w2[e], err));
        }
    } else {
        /* §5/§6: one input scale for all experts' w13 and one for w2.  An
         * expert's w13 members: its stored gate_up_proj (gpt-oss: rows
         * interleaved, biased, already the fused w13) or its gate and up
         * (fused here). */
        static const tensor_role w13_roles[2][2] = {{TR_EXP_GATE, TR_EXP_UP},
                                                    {TR_EXP_GATE_UP, TR_COUNT}};
        const int stored = pl->exp_stride == 2, n13 = stored ? 1 : 2;
        for (int64_t e = 0; e < E; e++) {
            nvfp4_linear *d = lin_of(m, l, TR_EXP_DOWN, e);
            for (int k = 0; k < n13; k++) {
                const nvfp4_linear *w = lin_of(m, l, w13_roles[stored][k], e);
                TRY(need_oai_bias(m, w, err));
                if (moe_act_mult(w) > in13)
                    in13 = moe_act_mult(w);
            }
            TRY(need_oai_bias(m, d, err));
            if (moe_act_mult(d) > in2)
                in2 = moe_act_mult(d);
        }
        for (int64_t e = 0; e < E; e++) {
            nvfp4_linear *w[2] = {NULL, NULL}, *d = lin_of(m, l, TR_EXP_DOWN, e);
            for (int k = 0; k < n13; k++)
                w[k] = lin_of(m, l, w13_roles[stored][k], e);
            if (!nvfp4m_par_owns_expert(m, e)) { /* another rank's expert */
                for (int k = 0; k < n13; k++)
                    nvfp4m_par_drop(m, w[k]);
                nvfp4m_par_drop(m, d);
                continue;
            }
            if (stored) {
                if (w[0]->scheme == NVFP4_SCHEME_W4A4) {
                    w[0]->input_scale = in13;
                    w[0]->input_gs = 0.0f;
                }
                TRY(upload(m, w[0], 1, &L->w13[e], err));
            } else {
                TRY(fuse_gate_up(m, parent_of(w[0]->prefix, ex, sizeof(ex)), w[0], w[1], in13,
                                 &L->w13[e], err));
            }
            if (d->scheme == NVFP4_SCHEME_W4A4) {
                d->input_scale = in2;
                d->input_gs = 0.0f; /* §5: gs = 1 / in2 */
            }
            TRY(upload(m, d, 1, &L->w2[e], err));
        }
    }
    TRY(need_oai_bias(m, lin_of(m, l, TR_ROUTER, 0), err));
    TRY(upload(m, lin_of(m, l, TR_ROUTER, 0), 1, &L->router, err));
    if (lin_of(m, l, TR_SH_GATE, 0)) {
        TRY(load_dense_mlp(m, l, TR_SH_GATE, TR_SH_UP, TR_COUNT, TR_SH_DOWN, &L->sh_gu,
                           &L->sh_down, NULL, err));
        if (lin_of(m, l, TR_SH_EXPERT_GATE, 0)) /* Qwen2-MoE's sigmoid gate */
            TRY(upload(m, lin_of(m, l, TR_SH_EXPERT_GATE, 0), 1, &L->sh_gate, err));
    }
    if (nvfp4m_plan_get(&m->plan, l, TR_ROUTER_BIAS, 0)) {
        /* DeepSeek's e_score_correction_bias: routing runs on the host */
        float *dv = take_vec(m, l, TR_ROUTER_BIAS);
        if (!(L->router_bias_h = malloc((size_t)E * sizeof(float)))) {
            nvfp4_backend_release(m->be, dv);
            return nomem(err);
        }
        if (nvfp4_backend_download(m->be, L->router_bias_h, dv, (size_t)E * sizeof(float),
                                   err)) {
            nvfp4_backend_release(m->be, dv);
            return err ? err->status : NVFP4_ERR_BACKEND;
        }
        nvfp4_backend_release(m->be, dv);
    }
    return NVFP4_OK;
}

nvfp4_status nvfp4m_model_load(nvfp4_model *m, nvfp4_error *err)
{
    const hparams *hp = &m->hp;
    nvfp4_linear *emb, *head;
    float *inv;

    /* the once-per-model entries come first in the plan */
    TRY(load_entries(m, 0, hp->layers ? m->plan.layers[0].first : m->plan.n, err));
    emb = lin_of(m, -1, TR_EMBED, 0);
    head = lin_of(m, -1, TR_LM_HEAD, 0);
    m->final_norm = take_vec(m, -1, TR_FINAL_NORM);
    if (!head)
        head = emb; /* tied */
    if (m->arch->embed_scale)
        m->embed_mult = embed_multiplier(hp->hidden, emb);
    TRY(nvfp4m_par_split_vocab(m, emb, head, err));
    /* the head, read whole every token, copied as every Linear (upload();
     * a 16-bit head streamed from the mapping's 4 KiB pages ran at about
     * 0.78 of the read probe); an untied embedding table, a few rows a
     * token, stays in place.  Before the layers: the copy and the mapped
     * pages it read, given back after it, are both resident for a moment,
     * which then adds nothing to the peak */
    if (head == emb) {
        TRY(upload(m, emb, 1, &m->embed, err));
        m->lm_head = m->embed;
    } else {
        TRY(upload_ex(m, emb, 1, 0, &m->embed, err));
        TRY(upload(m, head, 1, &m->lm_head, err));
    }
    for (int64_t l = 0; l < hp->layers; l++) {
        layer_t *L = &m->layers[l];
        const plan_layer *pl = &m->plan.layers[l];

        TRY(load_entries(m, pl->first, pl->count, err));
        L->ln1 = take_vec(m, l, TR_ATTN_NORM);
        L->ln2 = take_vec(m, l, TR_MLP_NORM);
        L->post_attn_norm = take_vec(m, l, TR_POST_ATTN_NORM);
        L->post_mlp_norm = take_vec(m, l, TR_POST_MLP_NORM);
        L->window = hp->sliding && hp->sliding[l] ? (size_t)hp->window : 0;
        if (m->arch->attn == ATTN_MLA)
            TRY(nvfp4m_mla_load(m, l, L, err));
        else
            TRY(load_attention(m, l, L, err));
        L->moe = pl->moe;
        if (L->moe)
            TRY(load_moe(m, l, L, err));
        else
            TRY(load_dense_mlp(m, l, TR_GATE, TR_UP, TR_GATE_UP, TR_DOWN, &L->gu, &L->down,
                               L->gu_split, err));
    }
    TRY(nvfp4m_kv_load(m, err));

    if (!(inv = malloc((size_t)hp->rot_dim / 2 * sizeof(float))))
        return nomem(err);
    compute_inv_freq(hp, m->max_ctx, 0, inv);
    m->inv_freq = upload_floats(m, inv, (size_t)hp->rot_dim / 2, err);
    if (m->inv_freq && hp->sliding && hp->rope_local_theta != hp->rope_theta) {
        compute_inv_freq(hp, m->max_ctx, 1, inv);
        m->inv_freq_local = upload_floats(m, inv, (size_t)hp->rot_dim / 2, err);
    }
    free(inv);
    if (!m->inv_freq || (hp->sliding && hp->rope_local_theta != hp->rope_theta &&
                         !m->inv_freq_local))
        return err && err->status ? err->status : NVFP4_ERR_NOMEM;
    nvfp4m_par_loaded(m);
    return NVFP4_OK;
}

void nvfp4m_model_unload(nvfp4_model *m)
{
    if (m->be) {
        for (int64_t l = 0; m->layers && l < m->hp.layers; l++) {
            layer_t *L = &m->layers[l];
            nvfp4_kweight_free(L->q);
            nvfp4_kweight_free(L->k);
            nvfp4_kweight_free(L->v);
            nvfp4_kweight_free(L->o);
            nvfp4_kweight_free(L->gu);
            nvfp4_kweight_free(L->gu_split[0]);
            nvfp4_kweight_free(L->gu_split[1]);
            nvfp4_kweight_free(L->down);
            nvfp4_kweight_free(L->router);
            nvfp4_kweight_free(L->sh_gu);
            nvfp4_kweight_free(L->sh_down);
            nvfp4_kweight_free(L->sh_gate);
            for (int64_t e = 0; e < m->hp.experts && L->w13; e++) {
                nvfp4_kweight_free(L->w13[e]);
                nvfp4_kweight_free(L->w2[e]);
            }
            nvfp4_backend_release(m->be, L->ln1);
            nvfp4_backend_release(m->be, L->ln2);
            nvfp4_backend_release(m->be, L->q_norm);
            nvfp4_backend_release(m->be, L->k_norm);
            nvfp4_backend_release(m->be, L->post_attn_norm);
            nvfp4_backend_release(m->be, L->post_mlp_norm);
            nvfp4_backend_release(m->be, L->sinks);
            nvfp4m_mla_unload(m, L);
        }
        /* vectors loaded but not yet moved out of the plan (a failed open) */
        for (size_t i = 0; i < m->plan.n; i++)
            nvfp4_backend_release(m->be, m->plan.e[i].vec);
        if (m->lm_head != m->embed)
            nvfp4_kweight_free(m->lm_head);
        nvfp4_kweight_free(m->embed);
        nvfp4_backend_release(m->be, m->final_norm);
        nvfp4_backend_release(m->be, m->inv_freq);
        nvfp4_backend_release(m->be, m->inv_freq_local);
    }
    for (int64_t l = 0; m->layers && l < m->hp.layers; l++) {
        free(m->layers[l].w13);
        free(m->layers[l].w2);
    }
    free(m->layers);
    m->layers = NULL;
    for (size_t i = 0; i < m->nlins; i++) {
        nvfp4_linear_release(m->lins[i]);
        free(m->lins[i]);
    }
    free(m->lins);
    m->lins = NULL;
    m->nlins = 0;
    for (size_t i = 0; i < m->nslices; i++)
        free(m->slices[i]);
    free(m->slices);
    m->slices = NULL;
    m->nslices = 0;
    nvfp4m_plan_free(&m->plan);
}
