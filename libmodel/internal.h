/* SPDX-License-Identifier: MIT */
/* Internal structures of libmodel shared by its files; not exported. */
#ifndef NVFP4_MODEL_INTERNAL_H
#define NVFP4_MODEL_INTERNAL_H

#include <nvfp4/model.h>

/* Architectures as data (arch.c).  An architecture is a table of tensor
 * names by role plus a few kinds (norm, activation, attention, MoE routing);
 * libmodel/plan.c turns it and the hyper-parameters into one tensor plan that
 * drives the missing-tensor check, the unexpected-tensor warning and the
 * loading (model-load.c).  Adding an architecture that the generic decoder
 * can run is adding a table entry, not a code path.
 *
 * Which layers fuse is in the table too: a role present among TR_Q, TR_K,
 * TR_V is a q/k/v group sharing weight_scale_2 (spec §4); TR_QKV is the same
 * group stored as one Linear (Phi-3), split into row views at load.  Likewise
 * TR_GATE + TR_UP (fused into one kweight after the §4 check) or TR_GATE_UP
 * stored fused; experts always fuse gate/up. */
typedef enum {
    /* once per model */
    TR_EMBED,          /* Linear prefix, never quantized */
    TR_FINAL_NORM,     /* vector [hidden] */
    TR_LM_HEAD,        /* Linear prefix; tied to TR_EMBED when absent and config says so */
    /* per layer */
    TR_ATTN_NORM,      /* vector [hidden] before attention */
    TR_MLP_NORM,       /* vector [hidden] before the MLP/MoE */
    TR_Q, TR_K, TR_V,  /* Linear prefixes, a §4 group */
    TR_QKV,            /* Linear prefix: q, k, v rows stored as one Linear */
    TR_O,
    TR_Q_NORM, TR_K_NORM, /* vector [head_dim]: per-head RMSNorm of q and k */
    TR_GATE, TR_UP,    /* dense MLP, a §4 group */
    TR_GATE_UP,        /* dense MLP gate rows then up rows stored as one Linear */
    TR_DOWN,
    /* MoE layers ({E} = expert) */
    TR_ROUTER,         /* Linear prefix, never quantized */
    TR_EXP_GATE, TR_EXP_UP, TR_EXP_DOWN,          /* per expert */
    TR_EXP_GATE_UP_STACKED, TR_EXP_DOWN_STACKED,  /* [E, 2I, H], [E, H, I] (transformers >= 5) */
    TR_SH_GATE, TR_SH_UP, TR_SH_DOWN,             /* shared expert (Qwen2-MoE) */
    TR_SH_EXPERT_GATE,                            /* its sigmoid gate, [1, H], never quantized */
    /* sandwich norms (Gemma): on the attention output and the MLP output */
    TR_POST_ATTN_NORM, TR_POST_MLP_NORM,
    /* multi-head latent attention (DeepSeek-V2/V3, ATTN_MLA): q_a/q_a_norm/q_b
     * (q_lora_rank) or TR_Q, the latent kv_a (with the rope key), its norm,
     * kv_b (k_nope and v per head); the router's selection bias */
    TR_Q_A, TR_Q_A_NORM, TR_Q_B, TR_KV_A, TR_KV_A_NORM, TR_KV_B,
    TR_ROUTER_BIAS,    /* vector [experts]: e_score_correction_bias */
    /* gpt-oss: the attention sinks, one logit per head; each expert's gate
     * and up rows stored as one (biased) Linear, INTERLEAVED (2j gate, 2j+1 up) */
    TR_SINKS,          /* vector [heads] */
    TR_EXP_GATE_UP,    /* per expert [2I, H] */
    TR_COUNT
} tensor_role;

typedef enum {
    MOE_NONE = 0, MOE_SOFTMAX_TOPK, MOE_MIXTRAL,
    MOE_SIGMOID_GROUPED,  /* DeepSeek-V3: sigmoid scores, + bias for the choice only,
                             grouped top-k, times routed_scaling_factor (mla.c) */
    MOE_SOFTMAX_GREEDY,   /* DeepSeek-V2: softmax scores, top-k (greedy, or within the
                             topk_group groups of the best maxima), times
                             routed_scaling_factor, never renormalised (mla.c) */
} moe_style; /* routing kind */
typedef enum {
    NORM_RMS = 0,      /* x / sqrt(mean(x^2) + eps) * w */
    NORM_RMS_PLUS1,    /* the same times (1 + w) (Gemma), w + 1 formed in float32 at load */
} norm_kind;
typedef enum {
    ACT_SILU = 0,      /* gated: silu(gate) * up */
    ACT_GELU_TANH,     /* gated: gelu_tanh(gate) * up (GeGLU, Gemma) */
    ACT_SWIGLU_OAI,    /* the experts' clamped SwiGLU, gate/up interleaved (gpt-oss:
                          NVFP4_GLU_SWIGLU_OAI, alpha 1.702, limit 7) */
} act_kind;
typedef enum {
    ATTN_GQA = 0,      /* causal grouped-query, rotate-half RoPE */
    ATTN_GQA_SLIDING,  /* the same, sliding_window on every layer when set (Phi-3) */
    ATTN_GQA_INTERLEAVED, /* sliding-window and global layers (layer_types, or every
                             sliding_window_pattern-th global), each its own RoPE base (Gemma 3) */
    ATTN_MLA,          /* multi-head latent attention, latent KV cache (DeepSeek, mla.c) */
} attn_kind;

typedef struct {
    const char *hf_name;          /* config.json "architectures"[0] */
    /* [TR_COUNT] name templates ({L} layer, {E} expert); NULL: no such tensor */
    const char *const *names;
    /* MoE roles under other names, used for a layer whose TR_ROUTER under
     * names is absent (Mixtral re-exported by transformers 5: mlp.experts.*
     * instead of block_sparse_moe.experts.*.w1/w3/w2); NULL if none */
    const char *const *moe_alt;
    int qkv_bias;                 /* q/k/v must carry a bias (Qwen2) */
    norm_kind norm;
    act_kind act;
    attn_kind attn;
    moe_style moe;
    int embed_scale;              /* embeddings times sqrt(hidden_size) (Gemma) */
    int mla_mscale;               /* YaRN: the softmax scale times mscale(factor,
                                     mscale_all_dim)^2 (DeepseekV3Attention; V2 not) */
    int yarn;                     /* rope_type yarn is accepted (besides ATTN_MLA) */
    int one_rope_base;            /* ATTN_GQA_INTERLEAVED: the sliding layers use
                                     rope_theta too (gpt-oss) */
} arch_desc;

/* Does the architecture have a tensor of ROLE (in its main table)? */
static inline int nvfp4m_arch_has(const arch_desc *a, tensor_role role)
{
    return a->names[role] != NULL;
}
/* TMPL with {L} replaced by L and {E} by E into OUT (CAP bytes); -1 when it
 * does not fit, else the length. */
int nvfp4m_name(char *out, size_t cap, const char *tmpl, int64_t l, int64_t e);

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
    int64_t rot_dim;              /* rotated dims per head (partial_rotary_factor) */
    int rope_llama3;
    double rs_factor, rs_low, rs_high, rs_orig;
    int rope_longrope;            /* Phi-3 longrope: per-frequency factors */
    double *lr_short, *lr_long;   /* [rot_dim / 2] each */
    double rope_attn;             /* factor on cos and sin (longrope), else 1 */
    double rope_linear;           /* rope_type linear: positions / factor (else 1) */
    double rope_local_theta;      /* sliding layers' RoPE base (Gemma 3) */
    int64_t window;               /* sliding_window (tokens a query sees), 0 none */
    unsigned char *sliding;       /* [layers]: layer uses the window (NULL: none) */
    double attn_scalar;           /* query_pre_attn_scalar (scores / sqrt), 0: head_dim */
    double softcap;               /* final_logit_softcapping, 0 none */
    /* moe */
    int64_t experts, topk, moe_inter, shared_inter, sparse_step;
    int norm_topk;
    double swiglu_limit;          /* ACT_SWIGLU_OAI's clamp (gpt-oss: 7) */
    int64_t *mlp_only;            /* layers that stay dense */
    size_t n_mlp_only;
    int64_t bos, eos;
    /* multi-head latent attention (ATTN_MLA).  The cache row and the
     * attention head are the absorbed form's: head_dim = rope + kv_lora,
     * kv_heads = 1, rot_dim = rope (mla.c) */
    int64_t q_lora, kv_lora, rope_hd, nope_hd, v_hd;
    int rope_interleave;
    double attn_scale;            /* softmax scale, 0: 1 / sqrt(head_dim) */
    int rope_yarn;                /* YaRN (DeepSeek): ramp between interpolated and
                                     extrapolated frequencies; rope_attn its mscale */
    double yarn_factor, yarn_low, yarn_high; /* factor, the ramp's correction range */
    /* MOE_SIGMOID_GROUPED */
    int64_t n_group, topk_group, first_dense;
    int group_limited;            /* MOE_SOFTMAX_GREEDY: topk_method group_limited_greedy */
    int score_softmax;            /* MOE_SOFTMAX_GREEDY: softmax scores, else sigmoid */
    double routed_scale;
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
