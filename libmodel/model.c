/* SPDX-License-Identifier: MIT */
/*
 * Weight assembly and the forward pass of every supported decoder.
 *
 * One generic pre-norm decoder (embed -> [RMSNorm, attention, residual,
 * RMSNorm, MLP or MoE, residual] x L -> RMSNorm -> lm_head), specialised by
 * an arch_desc (arch.c).  Weights stay memory-mapped; each Linear is
 * validated by libquant and uploaded once to the backend.
 *
 * Fused groups (spec §4): q/k/v, gate/up and each expert's gate/up must share
 * weight_scale_2 (nvfp4_linear_fuse_check); q, k and v are kept as three
 * kweights that share the group's (max) input scale, gate/up are uploaded as
 * one fused kweight.  MoE input scales are the max over all experts of a layer
 * (§5, §6).
 */
#include "config.h"

#include <math.h>
#include <stdarg.h>
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

static nvfp4_status add_prefix(nvfp4_model *m, const char *prefix, nvfp4_error *err)
{
    if (grow((void **)&m->prefixes, &m->capprefixes, m->nprefixes + 1, sizeof(char *)))
        return nomem(err);
    if (!(m->prefixes[m->nprefixes] = strdup(prefix)))
        return nomem(err);
    m->nprefixes++;
    return NVFP4_OK;
}

/* Dry run: remember NAME as missing; the first MISSING_NAMED are named,
 * the rest only counted (a config.json asking for 10^7 layers must not
 * build a gigabyte list). */
#define MISSING_NAMED 8
static void note_missing(nvfp4_model *m, const char *name)
{
    size_t n = strlen(name);
    char *p;

    if (m->nmissing++ >= MISSING_NAMED)
        return;
    p = realloc(m->missing, m->missing_len + n + 3);
    if (!p)
        return;
    m->missing = p;
    if (m->missing_len) {
        memcpy(m->missing + m->missing_len, ", ", 2);
        m->missing_len += 2;
    }
    memcpy(m->missing + m->missing_len, name, n + 1);
    m->missing_len += n;
}

static int check_present(nvfp4_model *m, const char *prefix, const char *suffix)
{
    char name[512];

    snprintf(name, sizeof(name), "%s.%s", prefix, suffix);
    if (nvfp4_checkpoint_has(m->ck, name))
        return 1;
    note_missing(m, name);
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
    nvfp4_status rc;

    *out = NULL;
    if (m->dry) {
        if (!nvfp4_checkpoint_has(m->ck, name))
            note_missing(m, name);
        return NVFP4_OK;
    }
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
    *out = upload_floats(m, host, (size_t)n, err);
    free(host);
    {
        /* The name minus ".weight" is the consumed prefix. */
        char pre[512];
        char *dot;
        snprintf(pre, sizeof(pre), "%s", name);
        dot = strrchr(pre, '.');
        if (dot)
            *dot = '\0';
        rc = add_prefix(m, pre, err);
    }
    if (!*out)
        return err ? err->status : NVFP4_ERR_NOMEM;
    return rc;
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
    if (m->dry) {
        char packed[512]; /* compressed-tensors names a quantized weight weight_packed */
        snprintf(packed, sizeof(packed), "%s.weight_packed", prefix);
        if (!nvfp4_checkpoint_has(m->ck, packed))
            check_present(m, prefix, "weight");
        return NVFP4_OK;
    }
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
    TRY(add_prefix(m, prefix, err));
    *out = lin;
    return NVFP4_OK;
}

static nvfp4_status upload(nvfp4_model *m, nvfp4_linear *parts, size_t n,
                           nvfp4_kweight **out, nvfp4_error *err)
{
    *out = nvfp4_kweight_upload(m->be, parts, n, err);
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
    }
    return NVFP4_OK;
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

/* ---- assembly ------------------------------------------------------------- */

static nvfp4_status load_attention(nvfp4_model *m, int64_t l, layer_t *L, nvfp4_error *err)
{
    const hparams *hp = &m->hp;
    char pre[256], name[320];
    nvfp4_linear *q, *k, *v, *o, group[3];
    float in_scale;
    int64_t H = hp->hidden, hd = hp->head_dim;

    snprintf(pre, sizeof(pre), "model.layers.%lld.self_attn", (long long)l);
#define P(s) (snprintf(name, sizeof(name), "%s.%s", pre, s), name)
    TRY(load_linear(m, P("q_proj"), hp->heads * hd, H, 0, &q, err));
    TRY(load_linear(m, P("k_proj"), hp->kv_heads * hd, H, 0, &k, err));
    TRY(load_linear(m, P("v_proj"), hp->kv_heads * hd, H, 0, &v, err));
    TRY(load_linear(m, P("o_proj"), H, hp->heads * hd, 0, &o, err));
    if (m->arch->qk_norm) {
        TRY(load_vector(m, P("q_norm.weight"), hd, &L->q_norm, err));
        TRY(load_vector(m, P("k_norm.weight"), hd, &L->k_norm, err));
    }
    if (m->dry)
        return NVFP4_OK;
    if (m->arch->qkv_bias && (!q->bias || !k->bias || !v->bias))
        return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, nvfp4_checkpoint_dir(m->ck),
                               P(!q->bias ? "q_proj.bias" : !k->bias ? "k_proj.bias"
                                                                     : "v_proj.bias"),
                               -1, "%s has biases on q/k/v; this one is missing",
                               m->arch_name);
#undef P
    TRY(nvfp4m_par_split_attention(m, q, k, v, o, err));
    /* §4: one fused q/k/v GEMM in vLLM; shared weight_scale_2, max input scale.
     * q, k and v are three kweights here, so a group the exclusions split
     * (one shard unquantized, or schemes differ) runs as three separate
     * layers with their own scales, and opt.rescale_fused keeps each
     * shard's own weight_scale_2 exactly (DIALECTS.md). */
    if (q->scheme != NVFP4_SCHEME_NONE && q->scheme == k->scheme && k->scheme == v->scheme) {
        group[0] = *q;
        group[1] = *k;
        group[2] = *v;
        TRY(nvfp4_linear_fuse_check(pre, group, 3, m->opt.rescale_fused ? NVFP4_FUSE_KEEP_SCALES : 0,
                                    &in_scale,
                                    err));
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

/* gate/up fused as one kweight after the §4 check. */
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

/* SPLIT (dense layers' MLP; NULL elsewhere): where a W4A4 gate or up sits
 * beside a sibling of another scheme, which one fused layer cannot run
 * (fuse_gate_up), the two are kept as separate layers here, each with its
 * own scales, and *GU stays NULL (context.c runs them one after the other). */
static nvfp4_status load_dense_mlp(nvfp4_model *m, const char *pre, int64_t inter,
                                   nvfp4_kweight **gu, nvfp4_kweight **down,
                                   nvfp4_kweight **split, nvfp4_error *err)
{
    char name[320];
    nvfp4_linear *g, *u, *d;
    int64_t H = m->hp.hidden;

#define P(s) (snprintf(name, sizeof(name), "%s.%s", pre, s), name)
    TRY(load_linear(m, P("gate_proj"), inter, H, 0, &g, err));
    TRY(load_linear(m, P("up_proj"), inter, H, 0, &u, err));
    TRY(load_linear(m, P("down_proj"), H, inter, 0, &d, err));
#undef P
    if (m->dry)
        return NVFP4_OK;
    TRY(nvfp4m_par_split_mlp(m, pre, g, u, d, err));
    if (split && g->scheme != u->scheme &&
        (g->scheme == NVFP4_SCHEME_W4A4 || u->scheme == NVFP4_SCHEME_W4A4)) {
        TRY(upload(m, g, 1, &split[0], err));
        TRY(upload(m, u, 1, &split[1], err));
        m->split_gu = 1;
    } else {
        TRY(fuse_gate_up(m, pre, g, u, 0, gu, err));
    }
    return upload(m, d, 1, down, err);
}

static nvfp4_status load_moe(nvfp4_model *m, int64_t l, layer_t *L, nvfp4_error *err)
{
    const hparams *hp = &m->hp;
    int mixtral = m->arch->moe == MOE_MIXTRAL;
    const char *blk = "mlp";
    char pre[256], name[400], ex[320];
    int64_t E = hp->experts, H = hp->hidden, I = hp->moe_inter;
    nvfp4_linear *router, **g, **u, **d;
    float in13 = 0, in2 = 0;
    nvfp4_status rc = NVFP4_OK;
    int stacked;

    /* Mixtral checkpoints use block_sparse_moe.experts.E.{w1,w3,w2}; newer
     * exports (transformers >= 5) use mlp.experts.* like Qwen. */
    snprintf(name, sizeof(name), "model.layers.%lld.block_sparse_moe.gate.weight",
             (long long)l);
    if (mixtral && nvfp4_checkpoint_has(m->ck, name))
        blk = "block_sparse_moe";
    snprintf(pre, sizeof(pre), "model.layers.%lld.%s", (long long)l, blk);
    snprintf(name, sizeof(name), "%s.gate", pre);
    TRY(load_linear(m, name, E, H, 1, &router, err));
    snprintf(name, sizeof(name), "%s.experts.gate_up_proj", pre);
    stacked = nvfp4_checkpoint_has(m->ck, name);

    L->w13 = calloc((size_t)E, sizeof(*L->w13));
    L->w2 = calloc((size_t)E, sizeof(*L->w2));
    g = calloc((size_t)E, sizeof(*g));
    u = calloc((size_t)E, sizeof(*u));
    d = calloc((size_t)E, sizeof(*d));
    if (!L->w13 || !L->w2 || !g || !u || !d) {
        rc = nomem(err);
        goto out;
    }
    if (stacked) {
        /* [E, 2I, H] gate rows then up rows; [E, H, I] down. Unquantized. */
        const nvfp4_tensor *tgu, *td;
        snprintf(ex, sizeof(ex), "%s.experts.down_proj", pre);
        if (m->dry) {
            if (!nvfp4_checkpoint_has(m->ck, ex))
                note_missing(m, ex);
            goto out;
        }
        if ((rc = nvfp4_checkpoint_get(m->ck, name, &tgu, err)) ||
            (rc = nvfp4_checkpoint_get(m->ck, ex, &td, err)))
            goto out;
        if (tgu->ndim != 3 || tgu->shape[0] != E || tgu->shape[1] != 2 * I ||
            tgu->shape[2] != H || td->ndim != 3 || td->shape[0] != E ||
            td->shape[1] != H || td->shape[2] != I) {
            const nvfp4_tensor *bad = (tgu->ndim != 3 || tgu->shape[0] != E ||
                                       tgu->shape[1] != 2 * I || tgu->shape[2] != H)
                                          ? tgu
                                          : td;
            rc = nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, bad->file, bad->name, -1,
                                 "stacked experts do not match config.json: expected "
                                 "gate_up_proj [%lld, %lld, %lld] and down_proj "
                                 "[%lld, %lld, %lld]",
                                 (long long)E, (long long)(2 * I), (long long)H,
                                 (long long)E, (long long)H, (long long)I);
            goto out;
        }
        for (int64_t e = 0; e < E; e++) {
            nvfp4_linear *a, *b;
            if (!nvfp4m_par_owns_expert(m, e)) /* expert parallelism */
                continue;
            if ((rc = slice_linear(m, tgu, e, 2 * I, H, &a, err)) ||
                (rc = slice_linear(m, td, e, H, I, &b, err)) ||
                (rc = upload(m, a, 1, &L->w13[e], err)) ||
                (rc = upload(m, b, 1, &L->w2[e], err)))
                goto out;
        }
        if ((rc = add_prefix(m, name, err)) || (rc = add_prefix(m, ex, err)))
            goto out;
        goto out;
    }
    for (int64_t e = 0; e < E; e++) {
        char en[360];
        snprintf(ex, sizeof(ex), "%s.experts.%lld", pre, (long long)e);
#define P(a, b) (snprintf(en, sizeof(en), "%s.%s", ex, mixtral && !strcmp(blk, "block_sparse_moe") ? a : b), en)
        if ((rc = load_linear(m, P("w1", "gate_proj"), I, H, 0, &g[e], err)) ||
            (rc = load_linear(m, P("w3", "up_proj"), I, H, 0, &u[e], err)) ||
            (rc = load_linear(m, P("w2", "down_proj"), H, I, 0, &d[e], err)))
            goto out;
#undef P
        if (m->dry)
            continue;
        /* §5/§6: one input scale for all experts' w13 and one for w2. */
        if (g[e]->input_scale > in13)
            in13 = g[e]->input_scale;
        if (u[e]->input_scale > in13)
            in13 = u[e]->input_scale;
        if (d[e]->input_scale > in2)
            in2 = d[e]->input_scale;
    }
    if (m->dry)
        goto out;
    for (int64_t e = 0; e < E; e++) {
        if (!nvfp4m_par_owns_expert(m, e)) { /* another rank's expert */
            nvfp4m_par_drop(m, g[e]);
            nvfp4m_par_drop(m, u[e]);
            nvfp4m_par_drop(m, d[e]);
            continue;
        }
        snprintf(ex, sizeof(ex), "%s.experts.%lld", pre, (long long)e);
        if ((rc = fuse_gate_up(m, ex, g[e], u[e], in13, &L->w13[e], err)))
            goto out;
        if (d[e]->scheme == NVFP4_SCHEME_W4A4) {
            d[e]->input_scale = in2;
            d[e]->input_gs = 0.0f; /* §5: gs = 1 / in2 */
        }
        if ((rc = upload(m, d[e], 1, &L->w2[e], err)))
            goto out;
    }
out:
    free(g);
    free(u);
    free(d);
    if (rc)
        return rc;
    if (!m->dry)
        TRY(upload(m, router, 1, &L->router, err));
    if (m->arch->shared_expert) {
        nvfp4_linear *sg;
        snprintf(name, sizeof(name), "%s.shared_expert", pre);
        TRY(load_dense_mlp(m, name, hp->shared_inter, &L->sh_gu, &L->sh_down, NULL, err));
        snprintf(name, sizeof(name), "%s.shared_expert_gate", pre);
        TRY(load_linear(m, name, 1, H, 1, &sg, err));
        if (!m->dry)
            TRY(upload(m, sg, 1, &L->sh_gate, err));
    }
    return NVFP4_OK;
}

static void compute_inv_freq(const hparams *hp, float *inv)
{
    int64_t half = hp->head_dim / 2;

    for (int64_t i = 0; i < half; i++) {
        /* As transformers: float32(base ** (2i/d)) then 1/x, in float32. */
        float e = (float)(2 * i) / (float)hp->head_dim;
        float f = 1.0f / powf((float)hp->rope_theta, e);
        if (hp->rope_llama3) {
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

static nvfp4_status assemble(nvfp4_model *m, nvfp4_error *err)
{
    const hparams *hp = &m->hp;
    char name[256];
    nvfp4_linear *emb, *head;
    int64_t H = hp->hidden;

    TRY(load_linear(m, "model.embed_tokens", hp->vocab, H, 1, &emb, err));
    TRY(load_vector(m, "model.norm.weight", H, &m->final_norm, err));
    if (!hp->tie || nvfp4_checkpoint_has(m->ck, "lm_head.weight"))
        TRY(load_linear(m, "lm_head", hp->vocab, H, 0, &head, err));
    else
        head = emb;
    for (int64_t l = 0; l < hp->layers; l++) {
        layer_t *L = &m->layers[l];
        snprintf(name, sizeof(name), "model.layers.%lld.input_layernorm.weight",
                 (long long)l);
        TRY(load_vector(m, name, H, &L->ln1, err));
        snprintf(name, sizeof(name), "model.layers.%lld.post_attention_layernorm.weight",
                 (long long)l);
        TRY(load_vector(m, name, H, &L->ln2, err));
        TRY(load_attention(m, l, L, err));
        L->moe = nvfp4m_hparams_layer_is_moe(hp, m->arch, l);
        if (L->moe) {
            TRY(load_moe(m, l, L, err));
        } else {
            snprintf(name, sizeof(name), "model.layers.%lld.mlp", (long long)l);
            TRY(load_dense_mlp(m, name, hp->inter, &L->gu, &L->down, L->gu_split, err));
        }
    }
    if (m->dry)
        return NVFP4_OK;
    TRY(nvfp4m_par_split_vocab(m, emb, head, err));
    TRY(nvfp4m_kv_load(m, err));
    TRY(upload(m, emb, 1, &m->embed, err));
    if (head == emb)
        m->lm_head = m->embed;
    else
        TRY(upload(m, head, 1, &m->lm_head, err));
    return NVFP4_OK;
}

static int has_prefix(const nvfp4_model *m, const char *tensor)
{
    for (size_t i = 0; i < m->nprefixes; i++) {
        size_t n = strlen(m->prefixes[i]);
        if (strncmp(tensor, m->prefixes[i], n) == 0 &&
            (tensor[n] == '\0' || (tensor[n] == '.' && !strchr(tensor + n + 1, '.'))))
            return 1;
    }
    return 0;
}

static void warn_unexpected(nvfp4_model *m)
{
    size_t n = 0;

    for (size_t i = 0; i < nvfp4_checkpoint_count(m->ck); i++) {
        const char *t = nvfp4_checkpoint_name(m->ck, i);
        if (has_prefix(m, t))
            continue;
        if (!m->opt.quiet && n < 8)
            fprintf(stderr, "nvfp4: warning: %s: unexpected tensor %s is ignored\n",
                    nvfp4_checkpoint_dir(m->ck), t);
        n++;
    }
    if (!m->opt.quiet && n > 8)
        fprintf(stderr, "nvfp4: warning: ... and %zu more unexpected tensors\n", n - 8);
}

/* ---- public: open / free ---------------------------------------------------- */

void nvfp4_model_options_init(nvfp4_model_options *opt)
{
    memset(opt, 0, sizeof(*opt));
}

const char *nvfp4_model_version(void)
{
    return PACKAGE_VERSION;
}

nvfp4_model *nvfp4_model_open(const char *path, const nvfp4_model_options *opt,
                              nvfp4_error *err)
{
    nvfp4_model *m;
    json_t *archs;
    const char *an;
    char *tokpath;

    nvfp4_error_clear(err);
    m = calloc(1, sizeof(*m));
    if (!m) {
        nomem(err);
        return NULL;
    }
    pthread_mutex_init(&m->lock, NULL);
    if (opt)
        m->opt = *opt;
    m->ck = nvfp4_checkpoint_open(path, err);
    if (!m->ck)
        goto fail;
    m->cfg = nvfp4_checkpoint_config(m->ck);
    if (!m->cfg) {
        nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, nvfp4_checkpoint_dir(m->ck),
                        "config.json", -1, "a model directory needs a config.json");
        goto fail;
    }
    archs = nvfp4_config_json(m->cfg, "architectures");
    an = json_is_array(archs) ? json_string_value(json_array_get(archs, 0)) : NULL;
    m->arch = nvfp4m_arch_find(an);
    if (!m->arch) {
        nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, nvfp4_config_path(m->cfg),
                        "architectures", -1,
                        "architecture %s%s%s is not supported; supported: %s",
                        an ? "\"" : "", an ? an : "(none given)", an ? "\"" : "",
                        nvfp4m_arch_supported_list());
        goto fail;
    }
    snprintf(m->arch_name, sizeof(m->arch_name), "%s", an);
    if (nvfp4m_hparams_read(m->cfg, m->arch, &m->hp, err) ||
        nvfp4m_check_counts(m->ck, m->cfg, m->arch, &m->hp, err))
        goto fail;
    m->qc = nvfp4_qconfig_parse(m->cfg, err);
    if (!m->qc || nvfp4m_par_open(m, err))
        goto fail;

    /* Dry run first so that every missing tensor is named at once. */
    m->layers = calloc((size_t)m->hp.layers, sizeof(layer_t));
    if (!m->layers) {
        nomem(err);
        goto fail;
    }
    m->dry = 1;
    if (assemble(m, err))
        goto fail;
    m->dry = 0;
    if (m->nmissing) {
        nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, nvfp4_checkpoint_dir(m->ck), NULL, -1,
                        "%zu tensor(s) that %s needs are missing: %s%s", m->nmissing,
                        m->arch_name, m->missing ? m->missing : "?",
                        m->nmissing > MISSING_NAMED ? ", ..." : "");
        goto fail;
    }
    if (nvfp4m_check_finite(m->ck, err))
        goto fail;
    for (size_t i = 0; i < m->nprefixes; i++)
        free(m->prefixes[i]);
    m->nprefixes = 0;

    m->be = nvfp4_backend_open(m->opt.backend, err);
    if (!m->be)
        goto fail;
    if (m->opt.threads > 0)
        nvfp4_backend_set_threads(m->be, m->opt.threads);
    m->max_ctx = m->opt.max_ctx > 0 ? m->opt.max_ctx
                                    : (m->hp.max_pos < 4096 ? m->hp.max_pos : 4096);

    for (int64_t l = 0; l < m->hp.layers; l++) {
        free(m->layers[l].w13);
        free(m->layers[l].w2);
    }
    memset(m->layers, 0, (size_t)m->hp.layers * sizeof(layer_t));
    if (assemble(m, err))
        goto fail;
    warn_unexpected(m);
    {
        float *inv = malloc((size_t)m->hp.head_dim / 2 * sizeof(float));
        if (!inv) {
            nomem(err);
            goto fail;
        }
        compute_inv_freq(&m->hp, inv);
        m->inv_freq = upload_floats(m, inv, (size_t)m->hp.head_dim / 2, err);
        free(inv);
        if (!m->inv_freq)
            goto fail;
    }

    tokpath = malloc(strlen(nvfp4_checkpoint_dir(m->ck)) + 32);
    if (!tokpath) {
        nomem(err);
        goto fail;
    }
    sprintf(tokpath, "%s/tokenizer.json", nvfp4_checkpoint_dir(m->ck));
    {
        FILE *f = fopen(tokpath, "rb");
        if (f) {
            fclose(f);
            m->tok = nvfp4_tokenizer_load(tokpath, err);
            if (!m->tok || nvfp4m_check_tokenizer(m->tok, tokpath, m->hp.vocab, err)) {
                free(tokpath);
                goto fail;
            }
        }
    }
    free(tokpath);
    return m;
fail:
    nvfp4_model_free(m);
    return NULL;
}

void nvfp4_model_free(nvfp4_model *m)
{
    if (!m)
        return;
    nvfp4m_default_free(m);
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
        }
        if (m->lm_head != m->embed)
            nvfp4_kweight_free(m->lm_head);
        nvfp4_kweight_free(m->embed);
        nvfp4_backend_release(m->be, m->final_norm);
        nvfp4_backend_release(m->be, m->inv_freq);
    }
    for (int64_t l = 0; m->layers && l < m->hp.layers; l++) {
        free(m->layers[l].w13);
        free(m->layers[l].w2);
    }
    free(m->layers);
    for (size_t i = 0; i < m->nlins; i++) {
        nvfp4_linear_release(m->lins[i]);
        free(m->lins[i]);
    }
    free(m->lins);
    for (size_t i = 0; i < m->nslices; i++)
        free(m->slices[i]);
    free(m->slices);
    nvfp4m_par_free(m);
    for (size_t i = 0; i < m->nprefixes; i++)
        free(m->prefixes[i]);
    free(m->prefixes);
    free(m->missing);
    nvfp4_backend_free(m->be);
    nvfp4_tokenizer_free(m->tok);
    nvfp4_qconfig_free(m->qc);
    nvfp4m_hparams_free(&m->hp);
    nvfp4_checkpoint_free(m->ck);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

const char *nvfp4_model_arch(const nvfp4_model *m) { return m->arch_name; }
int nvfp4_model_vocab_size(const nvfp4_model *m) { return (int)m->hp.vocab; }
int nvfp4_model_max_ctx(const nvfp4_model *m) { return (int)m->max_ctx; }
nvfp4_backend *nvfp4_model_backend(nvfp4_model *m) { return m->be; }
const nvfp4_tokenizer *nvfp4_model_tokenizer(const nvfp4_model *m) { return m->tok; }
int32_t nvfp4_model_bos(const nvfp4_model *m) { return (int32_t)m->hp.bos; }
int32_t nvfp4_model_eos(const nvfp4_model *m) { return (int32_t)m->hp.eos; }
