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

/* Bounds on config.json values (arch.c): a size fits int32 (token ids and
 * positions are int32); a product of two sizes, the element count of one
 * tensor, is at most 2^40. */
#define NVFP4M_DIM_MAX INT64_C(2147483647)
#define NVFP4M_PRODUCT_MAX (INT64_C(1) << 40)

/* validate.c: checks of the checkpoint against its config before anything is
 * allocated from config values (layer and expert counts the tensor count
 * cannot hold), of every unquantized float tensor for NaN/Inf, and of a
 * tokenizer's ids against the model's vocabulary. */
nvfp4_status nvfp4m_check_counts(nvfp4_checkpoint *ck, const nvfp4_config *cfg,
                                 const arch_desc *arch, const hparams *hp, nvfp4_error *err);
nvfp4_status nvfp4m_check_finite(nvfp4_checkpoint *ck, nvfp4_error *err);
nvfp4_status nvfp4m_check_tokenizer(const nvfp4_tokenizer *tok, const char *path,
                                    int64_t vocab, nvfp4_error *err);
/* After the forward pass: the first non-finite logit is an error naming its
 * position (ROWS rows of VOCAB logits, the first one at position POS0). */
nvfp4_status nvfp4m_check_logits(const float *logits, size_t rows, size_t vocab,
                                 size_t pos0, nvfp4_error *err);

/* Return the status of a failed call (the call has filled the error). */
#define TRY(x)                                                                           \
    do {                                                                                 \
        nvfp4_status rc_ = (x);                                                          \
        if (rc_ != NVFP4_OK)                                                             \
            return rc_;                                                                  \
    } while (0)

#endif
