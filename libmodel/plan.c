/* SPDX-License-Identifier: MIT */
/*
 * The tensor plan: every tensor an architecture (arch.c's name tables) and
 * its config.json ask of a checkpoint, listed once before anything is
 * loaded.  The same list names the missing tensors (all at once, before any
 * allocation from config values beyond the list itself, which
 * nvfp4m_check_counts has bounded by the checkpoint's tensor count), warns
 * about the tensors nothing owns, and is what model-load.c loads.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model-internal.h"

/* The missing-tensor message names this many and counts the rest (a
 * config.json asking for 10^7 layers must not build a gigabyte message). */
#define MISSING_NAMED 8

static nvfp4_status nomem(nvfp4_error *err)
{
    return nvfp4_error_set(err, NVFP4_ERR_NOMEM, NULL, NULL, -1, "out of memory");
}

static int has_linear(nvfp4_checkpoint *ck, const char *prefix)
{
    char name[512];

    snprintf(name, sizeof(name), "%s.weight", prefix);
    if (nvfp4_checkpoint_has(ck, name))
        return 1;
    /* compressed-tensors names a quantized weight weight_packed */
    snprintf(name, sizeof(name), "%s.weight_packed", prefix);
    return nvfp4_checkpoint_has(ck, name);
}

typedef struct {
    tensor_plan *p;
    plan_layer *pl;              /* NULL for the once-per-model roles */
    int64_t l;
    nvfp4_error *err;
} builder;

/* Append ROLE (template TMPL of layer b->l, expert E) with its shape. */
static nvfp4_status add(builder *b, const char *tmpl, tensor_role role, int64_t e,
                        plan_kind kind, int64_t n, int64_t k, int64_t ne, int force_none)
{
    tensor_plan *p = b->p;
    plan_entry *pe;
    int32_t *at = b->pl ? b->pl->at : p->at;
    char name[NVFP4_ERROR_FIELD_LENGTH];

    if (nvfp4m_name(name, sizeof(name), tmpl, b->l, e) < 0)
        return nvfp4_error_set(b->err, NVFP4_ERR_INVALID, NULL, tmpl, -1,
                               "tensor name of layer %lld too long", (long long)b->l);
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        plan_entry *ne2 = realloc(p->e, cap * sizeof(*p->e));
        if (!ne2)
            return nomem(b->err);
        p->e = ne2;
        p->cap = cap;
    }
    pe = &p->e[p->n];
    memset(pe, 0, sizeof(*pe));
    if (!(pe->name = strdup(name)))
        return nomem(b->err);
    pe->role = role;
    pe->layer = b->l;
    pe->expert = e;
    pe->kind = kind;
    pe->n = n;
    pe->k = k;
    pe->e = ne;
    pe->force_none = force_none;
    if (at[role] < 0)
        at[role] = (int32_t)p->n;
    p->n++;
    if (b->pl)
        b->pl->count++;
    return NVFP4_OK;
}

#define LIN(tab, role, n, k, fn) add(&b, (tab)[role], role, -1, PE_LINEAR, n, k, 0, fn)
#define VEC(tab, role, n) add(&b, (tab)[role], role, -1, PE_VECTOR, n, 0, 0, 0)

static nvfp4_status build_moe(builder *bp, nvfp4_checkpoint *ck, const arch_desc *arch,
                              const hparams *hp)
{
    builder b = *bp;
    const char *const *t = arch->names;
    int64_t E = hp->experts, H = hp->hidden, I = hp->moe_inter, S = hp->shared_inter;
    char name[NVFP4_ERROR_FIELD_LENGTH];

    /* the block's names: the main table's when its router is there */
    if (arch->moe_alt && nvfp4m_name(name, sizeof(name), t[TR_ROUTER], b.l, 0) >= 0 &&
        !has_linear(ck, name))
        t = arch->moe_alt;
    TRY(LIN(t, TR_ROUTER, E, H, 1));
    if (t[TR_ROUTER_BIAS])
        TRY(VEC(t, TR_ROUTER_BIAS, E));
    b.pl->stacked = t[TR_EXP_GATE_UP_STACKED] &&
                    nvfp4m_name(name, sizeof(name), t[TR_EXP_GATE_UP_STACKED], b.l, 0) >= 0 &&
                    nvfp4_checkpoint_has(ck, name);
    if (b.pl->stacked) {
        TRY(add(&b, t[TR_EXP_GATE_UP_STACKED], TR_EXP_GATE_UP_STACKED, -1, PE_STACKED, 2 * I,
                H, E, 1));
        TRY(add(&b, t[TR_EXP_DOWN_STACKED], TR_EXP_DOWN_STACKED, -1, PE_STACKED, H, I, E, 1));
    } else if (t[TR_EXP_GATE_UP]) { /* gpt-oss: gate/up as one Linear per expert */
        b.pl->exp_stride = 2;
        for (int64_t e = 0; e < E; e++) {
            TRY(add(&b, t[TR_EXP_GATE_UP], TR_EXP_GATE_UP, e, PE_LINEAR, 2 * I, H, 0, 0));
            TRY(add(&b, t[TR_EXP_DOWN], TR_EXP_DOWN, e, PE_LINEAR, H, I, 0, 0));
        }
    } else {
        b.pl->exp_stride = 3;
        for (int64_t e = 0; e < E; e++) {
            TRY(add(&b, t[TR_EXP_GATE], TR_EXP_GATE, e, PE_LINEAR, I, H, 0, 0));
            TRY(add(&b, t[TR_EXP_UP], TR_EXP_UP, e, PE_LINEAR, I, H, 0, 0));
            TRY(add(&b, t[TR_EXP_DOWN], TR_EXP_DOWN, e, PE_LINEAR, H, I, 0, 0));
        }
    }
    t = arch->names;
    if (t[TR_SH_GATE] && S > 0) { /* gated (Qwen2-MoE) or not (DeepSeek) */
        TRY(LIN(t, TR_SH_GATE, S, H, 0));
        TRY(LIN(t, TR_SH_UP, S, H, 0));
        TRY(LIN(t, TR_SH_DOWN, H, S, 0));
        if (t[TR_SH_EXPERT_GATE])
            TRY(LIN(t, TR_SH_EXPERT_GATE, 1, H, 1));
    }
    return NVFP4_OK;
}

/* Multi-head latent attention's projections (DeepSeek): q through the
 * q_lora_rank bottleneck or one q_proj, the latent kv_a with the rope key,
 * the latent's norm, kv_b (k_nope and v rows of each head). */
static nvfp4_status build_mla(builder *bp, const arch_desc *arch, const hparams *hp)
{
    builder b = *bp;
    const char *const *t = arch->names;
    int64_t H = hp->hidden, qd = hp->heads * (hp->nope_hd + hp->rope_hd);

    if (hp->q_lora) {
        TRY(LIN(t, TR_Q_A, hp->q_lora, H, 0));
        TRY(VEC(t, TR_Q_A_NORM, hp->q_lora));
        TRY(LIN(t, TR_Q_B, qd, hp->q_lora, 0));
    } else {
        TRY(LIN(t, TR_Q, qd, H, 0));
    }
    TRY(LIN(t, TR_KV_A, hp->kv_lora + hp->rope_hd, H, 0));
    TRY(VEC(t, TR_KV_A_NORM, hp->kv_lora));
    TRY(LIN(t, TR_KV_B, hp->heads * (hp->nope_hd + hp->v_hd), hp->kv_lora, 0));
    return LIN(t, TR_O, H, hp->heads * hp->v_hd, 0);
}

nvfp4_status nvfp4m_plan_build(tensor_plan *p, nvfp4_checkpoint *ck, const arch_desc *arch,
                               const hparams *hp, nvfp4_error *err)
{
    const char *const *t = arch->names;
    int64_t H = hp->hidden, hd = hp->head_dim, qd = hp->heads * hp->head_dim;
    int64_t kd = hp->kv_heads * hp->head_dim;
    builder b = {p, NULL, -1, err};
    char name[NVFP4_ERROR_FIELD_LENGTH];

    memset(p, 0, sizeof(*p));
    for (int r = 0; r < TR_COUNT; r++)
        p->at[r] = -1;
    p->layers = calloc((size_t)hp->layers, sizeof(*p->layers));
    if (!p->layers)
        return nomem(err);
    p->nlayers = hp->layers;

    TRY(LIN(t, TR_EMBED, hp->vocab, H, 1));
    TRY(VEC(t, TR_FINAL_NORM, H));
    snprintf(name, sizeof(name), "%s", t[TR_LM_HEAD]);
    if (!hp->tie || has_linear(ck, name))
        TRY(LIN(t, TR_LM_HEAD, hp->vocab, H, 0));
    for (int64_t l = 0; l < hp->layers; l++) {
        plan_layer *pl = &p->layers[l];

        for (int r = 0; r < TR_COUNT; r++)
            pl->at[r] = -1;
        pl->first = p->n;
        b.pl = pl;
        b.l = l;
        TRY(VEC(t, TR_ATTN_NORM, H));
        TRY(VEC(t, TR_MLP_NORM, H));
        if (t[TR_POST_ATTN_NORM]) {
            TRY(VEC(t, TR_POST_ATTN_NORM, H));
            TRY(VEC(t, TR_POST_MLP_NORM, H));
        }
        if (arch->attn == ATTN_MLA) {
            TRY(build_mla(&b, arch, hp));
        } else if (t[TR_QKV]) {
            TRY(LIN(t, TR_QKV, qd + 2 * kd, H, 0));
        } else {
            TRY(LIN(t, TR_Q, qd, H, 0));
            TRY(LIN(t, TR_K, kd, H, 0));
            TRY(LIN(t, TR_V, kd, H, 0));
        }
        if (arch->attn != ATTN_MLA)
            TRY(LIN(t, TR_O, H, qd, 0));
        if (t[TR_SINKS])
            TRY(VEC(t, TR_SINKS, hp->heads));
        if (t[TR_Q_NORM]) {
            TRY(VEC(t, TR_Q_NORM, hd));
            TRY(VEC(t, TR_K_NORM, hd));
        }
        pl->moe = nvfp4m_hparams_layer_is_moe(hp, arch, l);
        if (pl->moe) {
            TRY(build_moe(&b, ck, arch, hp));
        } else if (t[TR_GATE_UP]) {
            TRY(LIN(t, TR_GATE_UP, 2 * hp->inter, H, 0));
            TRY(LIN(t, TR_DOWN, H, hp->inter, 0));
        } else {
            TRY(LIN(t, TR_GATE, hp->inter, H, 0));
            TRY(LIN(t, TR_UP, hp->inter, H, 0));
            TRY(LIN(t, TR_DOWN, H, hp->inter, 0));
        }
    }
    return NVFP4_OK;
}

nvfp4_status nvfp4m_plan_check_missing(const tensor_plan *p, nvfp4_checkpoint *ck,
                                       const char *arch_name, nvfp4_error *err)
{
    char list[MISSING_NAMED * (NVFP4_ERROR_FIELD_LENGTH + 16)];
    size_t nmissing = 0, len = 0;

    list[0] = '\0';
    for (size_t i = 0; i < p->n; i++) {
        const plan_entry *pe = &p->e[i];
        int w;

        if (pe->optional ||
            (pe->kind == PE_LINEAR ? has_linear(ck, pe->name)
                                   : nvfp4_checkpoint_has(ck, pe->name)))
            continue;
        if (nmissing++ >= MISSING_NAMED)
            continue;
        w = snprintf(list + len, sizeof(list) - len, "%s%s%s", len ? ", " : "", pe->name,
                     pe->kind == PE_LINEAR ? ".weight" : "");
        if (w > 0 && (size_t)w < sizeof(list) - len)
            len += (size_t)w;
    }
    if (!nmissing)
        return NVFP4_OK;
    return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, nvfp4_checkpoint_dir(ck), NULL, -1,
                           "%zu tensor(s) that %s needs are missing: %s%s", nmissing,
                           arch_name, list, nmissing > MISSING_NAMED ? ", ..." : "");
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A name that owns tensors: a Linear prefix owns PREFIX.*; a vector
 * (A.B.weight) owns A.B.* (its bias, say); a stacked tensor owns itself. */
static int owned(const tensor_plan *p, const char *tensor)
{
    char parent[512];
    const char *key = tensor;
    char *dot;

    if (bsearch(&key, p->owners, p->nowners, sizeof(*p->owners), cmp_str))
        return 1;
    snprintf(parent, sizeof(parent), "%s", tensor);
    dot = strrchr(parent, '.');
    if (!dot)
        return 0;
    *dot = '\0';
    key = parent;
    return bsearch(&key, p->owners, p->nowners, sizeof(*p->owners), cmp_str) != NULL;
}

nvfp4_status nvfp4m_plan_warn_unexpected(tensor_plan *p, nvfp4_checkpoint *ck, int quiet,
                                         nvfp4_error *err)
{
    size_t n = 0;

    free(p->owners);
    p->nowners = 0;
    p->owners = malloc((p->n ? p->n : 1) * sizeof(*p->owners));
    if (!p->owners)
        return nomem(err);
    for (size_t i = 0; i < p->n; i++) {
        plan_entry *pe = &p->e[i];
        char *dot;

        if (pe->kind == PE_VECTOR && (dot = strrchr(pe->name, '.'))) {
            /* the vector's parent: cut in place, restored below */
            *dot = '\0';
            p->owners[p->nowners++] = strdup(pe->name);
            *dot = '.';
            if (!p->owners[p->nowners - 1])
                return nomem(err);
        } else {
            p->owners[p->nowners++] = strdup(pe->name);
            if (!p->owners[p->nowners - 1])
                return nomem(err);
        }
    }
    qsort(p->owners, p->nowners, sizeof(*p->owners), cmp_str);
    for (size_t i = 0; i < nvfp4_checkpoint_count(ck); i++) {
        const char *t = nvfp4_checkpoint_name(ck, i);
        if (owned(p, t))
            continue;
        if (!quiet && n < 8)
            fprintf(stderr, "nvfp4: warning: %s: unexpected tensor %s is ignored\n",
                    nvfp4_checkpoint_dir(ck), t);
        n++;
    }
    if (!quiet && n > 8)
        fprintf(stderr, "nvfp4: warning: ... and %zu more unexpected tensors\n", n - 8);
    return NVFP4_OK;
}

void nvfp4m_plan_free(tensor_plan *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->e[i].name);
    free(p->e);
    for (size_t i = 0; i < p->nowners; i++)
        free((char *)p->owners[i]);
    free(p->owners);
    free(p->layers);
    memset(p, 0, sizeof(*p));
}
