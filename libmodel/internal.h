/* SPDX-License-Identifier: MIT */
/* Internal structures of libmodel shared by its files; not exported. */
#ifndef NVFP4_MODEL_INTERNAL_H
#define NVFP4_MODEL_INTERNAL_H

#include <nvfp4/model.h>

/* How an architecture names and wires its layers.  Adding an architecture is
 * adding one of these (arch.c), not a forward pass. */
typedef enum { MOE_NONE = 0, MOE_QWEN, MOE_MIXTRAL } moe_style;

typedef struct {
    const char *hf_name;          /* config.json "architectures"[0] */
    int qkv_bias;                 /* q/k/v carry a bias (Qwen2) */
    int qk_norm;                  /* per-head RMSNorm of q and k (Qwen3) */
    moe_style moe;
    int shared_expert;            /* Qwen2-MoE shared expert + its sigmoid gate */
    const char *default_act;      /* "silu" for all of them */
} arch_desc;

const arch_desc *nvfp4m_arch_find(const char *hf_name);
/* "A, B, C" list of supported architectures, static storage. */
const char *nvfp4m_arch_supported_list(void);

/* Hyper-parameters read from config.json. */
typedef struct {
    int64_t hidden, layers, heads, kv_heads, head_dim, inter, vocab;
    int64_t max_pos;
    double eps;
    int tie;
    /* rope */
    double rope_theta;
    int rope_llama3;
    double rs_factor, rs_low, rs_high, rs_orig;
    /* moe */
    int64_t experts, topk, moe_inter, shared_inter, sparse_step;
    int norm_topk;
    int64_t *mlp_only;            /* layers that stay dense */
    size_t n_mlp_only;
    int64_t bos, eos;
} hparams;

nvfp4_status nvfp4m_hparams_read(const nvfp4_config *cfg, const arch_desc *arch, hparams *hp,
                          nvfp4_error *err);
void nvfp4m_hparams_free(hparams *hp);
/* Does layer L use the mixture of experts? */
int nvfp4m_hparams_layer_is_moe(const hparams *hp, const arch_desc *arch, int64_t l);

#endif
