/* SPDX-License-Identifier: MIT */
/*
 * DeepSeek-V2/V3's multi-head latent attention (MLA) and their routing (V3:
 * sigmoid, grouped top-k; V2: softmax, greedy), as transformers'
 * modeling_deepseek_v3 / _v2 compute them.
 *
 * transformers expands the latent: per head, k = [kv_b_k(c) | k_pe] and
 * v = kv_b_v(c), with c = kv_a_layernorm(latent).  Here the KV cache keeps
 * the latent itself, one row per token [k_pe | c] of qk_rope_head_dim +
 * kv_lora_rank floats (what makes the model servable: 576 floats a token
 * and layer for DeepSeek-V3 instead of 128 heads x (192 + 128)), and the
 * query is absorbed into it: for head h, q_nope . kv_b_k,h(c) =
 * (kv_b_k,h^T q_nope) . c, so the absorbed query [q_pe | kv_b_k,h^T q_nope]
 * against the row [k_pe | c] gives the same score.  The row is both key and
 * value of one KV head shared by all query heads; the attention's output per
 * head is the weighted latent, and o_h = kv_b_v,h(latent) is the same as
 * weighting the expanded values (the map is linear).
 *
 * DeepSeek interleaves the rotary pairs (x0, x1), (x2, x3), ...; taking the
 * even then the odd dimensions turns that into the rotate-half layout the
 * RoPE kernel applies, in q and k alike, so the score is unchanged.
 *
 * The absorption and the expansion run on the host in float32: kv_b_proj is
 * unquantized in Quark's deepseek templates (self_attn is excluded); a
 * weight-only NVFP4 kv_b_proj is dequantized exactly at load.  Under
 * tensor parallelism every rank runs the whole attention (replicated: the
 * latent cache is small; the MLP and the experts are split as elsewhere).
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model-internal.h"

static nvfp4_status nomem(nvfp4_error *err)
{
    return nvfp4_error_set(err, NVFP4_ERR_NOMEM, NULL, NULL, -1, "out of memory");
}

static nvfp4_status up(nvfp4_model *m, int64_t l, tensor_role role, nvfp4_kweight **out,
                       nvfp4_error *err)
{
    plan_entry *pe = nvfp4m_plan_get(&m->plan, l, role, 0);

    *out = nvfp4_kweight_upload(m->be, pe->lin, 1, err);
    if (!*out)
        return err && err->status ? err->status : NVFP4_ERR_BACKEND;
    return NVFP4_OK;
}

/* The vector of ROLE in layer L as a new host array (the backend copy the
 * loader made is released). */
static nvfp4_status host_vec(nvfp4_model *m, int64_t l, tensor_role role, float **out,
                             nvfp4_error *err)
{
    plan_entry *pe = nvfp4m_plan_get(&m->plan, l, role, 0);
    size_t n = (size_t)pe->n;

    if (!(*out = malloc(n * sizeof(float))))
        return nomem(err);
    TRY(nvfp4_backend_download(m->be, *out, pe->vec, n * sizeof(float), err));
    nvfp4_backend_release(m->be, pe->vec);
    pe->vec = NULL;
    return NVFP4_OK;
}

nvfp4_status nvfp4m_mla_load(nvfp4_model *m, int64_t l, layer_t *L, nvfp4_error *err)
{
    const hparams *hp = &m->hp;
    plan_entry *pe;
    nvfp4_linear *kvb;
    size_t nk;

    if (hp->q_lora) {
        TRY(up(m, l, TR_Q_A, &L->q_a, err));
        pe = nvfp4m_plan_get(&m->plan, l, TR_Q_A_NORM, 0);
        L->q_a_norm = pe->vec;
        pe->vec = NULL;
        TRY(up(m, l, TR_Q_B, &L->q_b, err));
    } else {
        TRY(up(m, l, TR_Q, &L->q, err));
    }
    TRY(up(m, l, TR_KV_A, &L->kv_a, err));
    TRY(up(m, l, TR_O, &L->o, err));
    TRY(host_vec(m, l, TR_KV_A_NORM, &L->kv_a_norm_h, err));
    pe = nvfp4m_plan_get(&m->plan, l, TR_KV_B, 0);
    kvb = pe->lin;
    if (kvb->scheme == NVFP4_SCHEME_W4A4)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, nvfp4_checkpoint_dir(m->ck),
                               kvb->prefix, -1,
                               "a kv_b_proj with quantized activations is not supported "
                               "(the latent KV cache absorbs it; expected unquantized or "
                               "weight-only, as Quark's deepseek templates leave self_attn)");
    nk = (size_t)kvb->n * (size_t)kvb->k;
    if (!(L->kv_b_h = malloc(nk * sizeof(float))))
        return nomem(err);
    return nvfp4_linear_dequant(kvb, L->kv_b_h, err);
}

void nvfp4m_mla_unload(nvfp4_model *m, layer_t *L)
{
    nvfp4_kweight_free(L->q_a);
    nvfp4_kweight_free(L->q_b);
    nvfp4_kweight_free(L->kv_a);
    nvfp4_backend_release(m->be, L->q_a_norm);
    free(L->kv_a_norm_h);
    free(L->kv_b_h);
    free(L->router_bias_h);
    L->q_a = L->q_b = L->kv_a = NULL;
    L->q_a_norm = L->kv_a_norm_h = L->kv_b_h = L->router_bias_h = NULL;
}

/* The R rotary dimensions of SRC into DST: the interleaved pairs as even
 * dimensions then odd ones (rotate-half layout), or as they are. */
static void rope_dims(const float *src, size_t r, int interleave, float *dst)
{
    if (!interleave) {
        memcpy(dst, src, r * sizeof(float));
        return;
    }
    for (size_t i = 0; i < r / 2; i++) {
        dst[i] = src[2 * i];
        dst[r / 2 + i] = src[2 * i + 1];
    }
}

void nvfp4m_mla_absorb(const nvfp4_model *m, const layer_t *L, const float *q,
                       const float *kva, size_t n, float *qabs, float *krow)
{
    const hparams *hp = &m->hp;
    const size_t nh = (size_t)hp->heads, R = (size_t)hp->kv_lora, rope = (size_t)hp->rope_hd;
    const size_t nope = (size_t)hp->nope_hd, vd = (size_t)hp->v_hd, D = rope + R;
    const size_t qk = nope + rope;
    const float eps = 1e-6f; /* kv_a_layernorm: DeepseekV3RMSNorm's default, not rms_norm_eps */

    for (size_t t = 0; t < n; t++) {
        const float *a = kva + t * (R + rope);
        float *kr = krow + t * D;
        float ss = 0.0f, inv;

        /* [k_pe | kv_a_layernorm(c)]: RMSNorm in float32 as transformers */
        rope_dims(a + R, rope, hp->rope_interleave, kr);
        for (size_t i = 0; i < R; i++)
            ss += a[i] * a[i];
        inv = 1.0f / sqrtf(ss / (float)R + eps);
        for (size_t i = 0; i < R; i++)
            kr[rope + i] = L->kv_a_norm_h[i] * (a[i] * inv);
        for (size_t h = 0; h < nh; h++) {
            const float *qh = q + (t * nh + h) * qk;
            const float *wk = L->kv_b_h + h * (nope + vd) * R; /* [nope, R] */
            float *o = qabs + (t * nh + h) * D;

            rope_dims(qh + nope, rope, hp->rope_interleave, o);
            memset(o + rope, 0, R * sizeof(float));
            for (size_t i = 0; i < nope; i++) {
                const float qi = qh[i], *w = wk + i * R;
                for (size_t r = 0; r < R; r++)
                    o[rope + r] += qi * w[r];
            }
        }
    }
}

void nvfp4m_mla_expand(const nvfp4_model *m, const layer_t *L, const float *att, size_t n,
                       float *out)
{
    const hparams *hp = &m->hp;
    const size_t nh = (size_t)hp->heads, R = (size_t)hp->kv_lora, rope = (size_t)hp->rope_hd;
    const size_t nope = (size_t)hp->nope_hd, vd = (size_t)hp->v_hd, D = rope + R;

    for (size_t t = 0; t < n; t++)
        for (size_t h = 0; h < nh; h++) {
            const float *c = att + (t * nh + h) * D + rope;
            const float *wv = L->kv_b_h + (h * (nope + vd) + nope) * R; /* [vd, R] */
            float *o = out + (t * nh + h) * vd;
            for (size_t j = 0; j < vd; j++) {
                const float *w = wv + j * R;
                float s = 0.0f;
                for (size_t r = 0; r < R; r++)
                    s += c[r] * w[r];
                o[j] = s;
            }
        }
}

nvfp4_status nvfp4m_route_deepseek(const hparams *hp, const float *bias,
                                          const float *logits, size_t n, int32_t *topi,
                                          float *topw, nvfp4_error *err)
{
    const size_t E = (size_t)hp->experts, G = (size_t)hp->n_group, per = E / G;
    const size_t K = (size_t)hp->topk, KG = (size_t)hp->topk_group;
    const int softmax = hp->score_softmax;
    float *sc = malloc((2 * E + G) * sizeof(float)), *choice = sc + E, *gs = choice + E;
    unsigned char *gsel = malloc(G + E), *taken = gsel + G;

    if (!sc || !gsel) {
        free(sc);
        free(gsel);
        return nomem(err);
    }

    for (size_t t = 0; t < n; t++) {
        const float *lg = logits + t * E;
        float sum = 0.0f;

        if (softmax) { /* DeepSeek-V2: softmax in float32 */
            float mx = -INFINITY, tot = 0.0f;
            for (size_t e = 0; e < E; e++)
                mx = lg[e] > mx ? lg[e] : mx;
            for (size_t e = 0; e < E; e++)
                tot += (sc[e] = expf(lg[e] - mx));
            for (size_t e = 0; e < E; e++)
                sc[e] /= tot;
        } else {
            for (size_t e = 0; e < E; e++)
                sc[e] = 1.0f / (1.0f + expf(-lg[e]));
        }
        for (size_t e = 0; e < E; e++) {
            choice[e] = sc[e] + (bias ? bias[e] : 0.0f);
            taken[e] = 0;
        }
        /* a group's score: the sum of its two best choice scores (V3), its
         * best one (V2's group_limited_greedy) */
        for (size_t g = 0; g < G; g++) {
            float b1 = -INFINITY, b2 = -INFINITY;
            for (size_t e = g * per; e < (g + 1) * per; e++) {
                if (choice[e] > b1) {
                    b2 = b1;
                    b1 = choice[e];
                } else if (choice[e] > b2) {
                    b2 = choice[e];
                }
            }
            gs[g] = softmax ? b1 : b1 + b2;
            gsel[g] = 0;
        }
        for (size_t k = 0; k < KG; k++) {
            size_t best = G;
            for (size_t g = 0; g < G; g++)
                if (!gsel[g] && (best == G || gs[g] > gs[best]))
                    best = g;
            gsel[best] = 1;
        }
        for (size_t k = 0; k < K; k++) {
            size_t best = E;
            for (size_t e = 0; e < E; e++)
                if (gsel[e / per] && !taken[e] && (best == E || choice[e] > choice[best]))
                    best = e;
            taken[best] = 1;
            topi[t * K + k] = (int32_t)best;
            topw[t * K + k] = sc[best];
            sum += sc[best];
        }
        for (size_t k = 0; k < K; k++) {
            if (hp->norm_topk)
                topw[t * K + k] /= sum + 1e-20f;
            topw[t * K + k] *= (float)hp->routed_scale;
        }
    }
    free(sc);
    free(gsel);
    return NVFP4_OK;
}
