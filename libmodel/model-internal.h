/* SPDX-License-Identifier: MIT */
/* The loaded model as model.c (assembly) builds it and context.c (the
 * forward pass over contexts) reads it; not exported. */
#ifndef NVFP4_MODEL_MODEL_INTERNAL_H
#define NVFP4_MODEL_MODEL_INTERNAL_H

#include <pthread.h>

#include "internal.h"
#include "parallel.h"

/* ---- the tensor plan (plan.c) ------------------------------------------------
 * Every tensor a checkpoint must (or may) hold for its architecture and
 * config.json, built once from the arch_desc tables before anything is
 * loaded: one list that the missing-tensor check, the unexpected-tensor
 * warning and the loading (model-load.c) all walk. */
typedef enum {
    PE_LINEAR,   /* a Linear prefix: PREFIX.weight (or .weight_packed) and its scales */
    PE_VECTOR,   /* a 1-D float tensor [n] (norm weights) */
    PE_STACKED,  /* a 3-D float tensor [e, n, k] of all experts */
} plan_kind;

typedef struct {
    char *name;                  /* Linear prefix, or the tensor's full name */
    tensor_role role;
    int64_t layer, expert;       /* -1 where none */
    plan_kind kind;
    int64_t n, k, e;             /* expected shape: [n, k], [n], [e, n, k] */
    int force_none;              /* PE_LINEAR never quantized (embeddings, routers, gates) */
    int optional;                /* absence is no error (the loader skips it) */
    /* filled by the loader; owned by the model's lists or moved into layer_t */
    nvfp4_linear *lin;
    float *vec;
    const nvfp4_tensor *t;
} plan_entry;

typedef struct {
    int moe;                     /* a MoE layer */
    int stacked;                 /* its experts are PE_STACKED tensors */
    size_t first, count;         /* its entries */
    int32_t at[TR_COUNT];        /* entry of each role (expert 0), -1 when absent */
    size_t exp_stride;           /* entries from one expert's role to the next's */
} plan_layer;

typedef struct {
    plan_entry *e;
    size_t n, cap;
    int32_t at[TR_COUNT];        /* the once-per-model roles */
    plan_layer *layers;          /* [hp.layers] */
    int64_t nlayers;
    const char **owners;         /* sorted names that own tensors (warn_unexpected) */
    size_t nowners;
} tensor_plan;

/* Build the plan of M's checkpoint (reads m->ck, m->arch, m->hp). */
nvfp4_status nvfp4m_plan_build(tensor_plan *p, nvfp4_checkpoint *ck, const arch_desc *arch,
                               const hparams *hp, nvfp4_error *err);
/* NVFP4_ERR_NOT_FOUND naming the first missing tensors (and counting the
 * rest) when any non-optional entry is absent. */
nvfp4_status nvfp4m_plan_check_missing(const tensor_plan *p, nvfp4_checkpoint *ck,
                                       const char *arch_name, nvfp4_error *err);
/* Warn (stderr, unless QUIET) about checkpoint tensors no entry owns. */
nvfp4_status nvfp4m_plan_warn_unexpected(tensor_plan *p, nvfp4_checkpoint *ck, int quiet,
                                         nvfp4_error *err);
void nvfp4m_plan_free(tensor_plan *p);
/* The entry of ROLE in layer L (expert E, or 0), or NULL. */
static inline plan_entry *nvfp4m_plan_get(const tensor_plan *p, int64_t l, tensor_role role,
                                          int64_t e)
{
    const plan_layer *pl;

    if (l < 0)
        return p->at[role] >= 0 ? &p->e[p->at[role]] : NULL;
    pl = &p->layers[l];
    if (pl->at[role] < 0)
        return NULL;
    return &p->e[(size_t)pl->at[role] + (size_t)e * pl->exp_stride];
}

typedef struct {
    nvfp4_kweight *q, *k, *v, *o;
    float *ln1, *ln2, *q_norm, *k_norm;      /* backend buffers */
    float *post_attn_norm, *post_mlp_norm;   /* Gemma's sandwich norms, or NULL */
    size_t window;                           /* sliding window of this layer, 0 none */
    nvfp4_kweight *gu, *down;                /* dense MLP */
    nvfp4_kweight *gu_split[2];              /* gate, up as separate layers, gu NULL */
    int moe;
    nvfp4_kweight *router;
    nvfp4_kweight **w13, **w2;               /* [experts] */
    nvfp4_kweight *sh_gu, *sh_down, *sh_gate;
    float k_scale, v_scale;                  /* FP8 KV cache (kvcache.c); 0: off */
    float *sinks;                            /* backend buffer [this rank's heads]
                                              * (gpt-oss), or NULL */
    /* multi-head latent attention (mla.c) */
    nvfp4_kweight *q_a, *q_b, *kv_a;         /* q_a/q_b NULL without q_lora_rank (q is q) */
    float *q_a_norm;                         /* backend buffer [q_lora] */
    float *kv_a_norm_h;                      /* host [kv_lora] */
    float *kv_b_h;                           /* host [heads * (nope + v), kv_lora] */
    float *router_bias_h;                    /* host [experts]: e_score_correction_bias */
} layer_t;

/* Immutable once nvfp4_model_open returns, except for the default context
 * of the single-sequence wrappers and the lock (see nvfp4/model.h). */
struct nvfp4_model {
    nvfp4_checkpoint *ck;
    const nvfp4_config *cfg;
    const arch_desc *arch;
    char arch_name[96];
    hparams hp;
    nvfp4_qconfig *qc;
    nvfp4_backend *be;
    nvfp4_tokenizer *tok;
    nvfp4_model_options opt;
    int64_t max_ctx;

    nvfp4_linear **lins;                     /* every view, for release */
    size_t nlins, caplins;
    nvfp4_tensor **slices;                   /* per-expert views of 3-D tensors */
    size_t nslices, capslices;
    tensor_plan plan;                        /* what the checkpoint holds for us */

    nvfp4_kweight *embed, *lm_head;
    float *final_norm, *inv_freq;
    float *inv_freq_local;                   /* sliding layers' (Gemma 3), or NULL */
    layer_t *layers;
    int split_gu;                            /* some layer has gu_split */
    int kv_fp8;                              /* checkpoint has FP8 KV scales (kvcache.c) */
    float embed_mult;                        /* arch->embed_scale: sqrt(hidden) in the
                                              * embeddings' dtype (model-load.c) */

    /* Serialises the contexts' device work on a backend other than the
     * CPU one (one queue and scratch per GPU backend). */
    pthread_mutex_t lock;
    /* nvfp4_model_forward's context and sequence, created at first use. */
    nvfp4_context *dflt;
    nvfp4_seq dflt_seq;
    /* This rank's part under tensor parallelism (parallel.c); always set. */
    nvfp4m_par *par;
};

/* kvcache.c: read the Quark kv_cache_quant_config and every layer's k/v
 * scales (after the layers are loaded); the contexts' FP8 pools use them. */
nvfp4_status nvfp4m_kv_load(nvfp4_model *m, nvfp4_error *err);
/* model-load.c: load the plan's tensors, fuse, upload into m->layers and
 * the model's embed / final_norm / lm_head / inv_freq (m->be is open). */
nvfp4_status nvfp4m_model_load(nvfp4_model *m, nvfp4_error *err);
/* Release what nvfp4m_model_load made (nvfp4_model_free). */
void nvfp4m_model_unload(nvfp4_model *m);

/* mla.c: DeepSeek's multi-head latent attention and sigmoid grouped routing.
 * The KV cache row of a token is [k_pe roped (rope_hd) | normalised c_kv
 * (kv_lora)], one "KV head" that is both key and value; the queries are
 * absorbed into it (q_nope times each head's kv_b k-rows), the attention
 * output per head is the latent, expanded by the kv_b v-rows. */
nvfp4_status nvfp4m_mla_load(nvfp4_model *m, int64_t l, layer_t *L, nvfp4_error *err);
void nvfp4m_mla_unload(nvfp4_model *m, layer_t *L);
/* Host: Q [n, heads * (nope + rope)] and KVA [n, kv_lora + rope] (the
 * projections' outputs) into QABS [n, heads, head_dim] and KROW
 * [n, head_dim], RoPE not yet applied (the rope dims de-interleaved). */
void nvfp4m_mla_absorb(const nvfp4_model *m, const layer_t *L, const float *q,
                       const float *kva, size_t n, float *qabs, float *krow);
/* Host: the attention's latent ATT [n, heads, head_dim] into OUT
 * [n, heads * v_head_dim]. */
void nvfp4m_mla_expand(const nvfp4_model *m, const layer_t *L, const float *att, size_t n,
                       float *out);
/* Host: router logits [n, experts] into the chosen experts and weights
 * [n, topk] (MOE_SIGMOID_GROUPED, MOE_SOFTMAX_GREEDY). */
nvfp4_status nvfp4m_route_deepseek(const hparams *hp, const float *bias,
                                          const float *logits, size_t n, int32_t *topi,
                                          float *topw, nvfp4_error *err);

/* Free the default context (nvfp4_model_free). */
void nvfp4m_default_free(nvfp4_model *m);

#endif
