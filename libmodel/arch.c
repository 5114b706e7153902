/* SPDX-License-Identifier: MIT */
/* The supported architectures and how config.json describes them. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- tensor names ----------------------------------------------------------- */

#define LAYER "model.layers.{L}."
#define BASE_NAMES                                                                       \
    [TR_EMBED] = "model.embed_tokens", [TR_FINAL_NORM] = "model.norm.weight",           \
    [TR_LM_HEAD] = "lm_head", [TR_ATTN_NORM] = LAYER "input_layernorm.weight",          \
    [TR_MLP_NORM] = LAYER "post_attention_layernorm.weight", [TR_O] = LAYER "self_attn.o_proj"
#define QKV_NAMES                                                                        \
    [TR_Q] = LAYER "self_attn.q_proj", [TR_K] = LAYER "self_attn.k_proj",                \
    [TR_V] = LAYER "self_attn.v_proj"
#define QK_NORM_NAMES                                                                    \
    [TR_Q_NORM] = LAYER "self_attn.q_norm.weight", [TR_K_NORM] = LAYER "self_attn.k_norm.weight"
#define MLP_NAMES                                                                        \
    [TR_GATE] = LAYER "mlp.gate_proj", [TR_UP] = LAYER "mlp.up_proj",                    \
    [TR_DOWN] = LAYER "mlp.down_proj"
/* Qwen-style MoE block (also Mixtral as transformers 5 exports it). */
#define MOE_NAMES(blk, g, u, d)                                                          \
    [TR_ROUTER] = LAYER blk ".gate", [TR_EXP_GATE] = LAYER blk ".experts.{E}." g,        \
    [TR_EXP_UP] = LAYER blk ".experts.{E}." u, [TR_EXP_DOWN] = LAYER blk ".experts.{E}." d, \
    [TR_EXP_GATE_UP_STACKED] = LAYER blk ".experts.gate_up_proj",                         \
    [TR_EXP_DOWN_STACKED] = LAYER blk ".experts.down_proj"
#define SHARED_NAMES                                                                     \
    [TR_SH_GATE] = LAYER "mlp.shared_expert.gate_proj",                                  \
    [TR_SH_UP] = LAYER "mlp.shared_expert.up_proj",                                      \
    [TR_SH_DOWN] = LAYER "mlp.shared_expert.down_proj",                                  \
    [TR_SH_EXPERT_GATE] = LAYER "mlp.shared_expert_gate"

static const char *const llama_names[TR_COUNT] = {BASE_NAMES, QKV_NAMES, MLP_NAMES};
/* Phi-3: q/k/v and gate/up each stored as one Linear */
static const char *const phi3_names[TR_COUNT] = {
    BASE_NAMES, [TR_QKV] = LAYER "self_attn.qkv_proj", [TR_GATE_UP] = LAYER "mlp.gate_up_proj",
    [TR_DOWN] = LAYER "mlp.down_proj"};
static const char *const qwen3_names[TR_COUNT] = {BASE_NAMES, QKV_NAMES, QK_NORM_NAMES,
                                                  MLP_NAMES};
/* MoE models: a layer listed in mlp_only_layers (or off decoder_sparse_step)
 * is a dense MLP under the llama names. */
/* Gemma 3: four norms a layer; the MLP's input norm is pre_feedforward_layernorm */
static const char *const gemma3_names[TR_COUNT] = {
    [TR_EMBED] = "model.embed_tokens", [TR_FINAL_NORM] = "model.norm.weight",
    [TR_LM_HEAD] = "lm_head", [TR_ATTN_NORM] = LAYER "input_layernorm.weight",
    [TR_POST_ATTN_NORM] = LAYER "post_attention_layernorm.weight",
    [TR_MLP_NORM] = LAYER "pre_feedforward_layernorm.weight",
    [TR_POST_MLP_NORM] = LAYER "post_feedforward_layernorm.weight",
    [TR_O] = LAYER "self_attn.o_proj", QKV_NAMES, QK_NORM_NAMES, MLP_NAMES};
static const char *const mixtral_names[TR_COUNT] = {
    BASE_NAMES, QKV_NAMES, MLP_NAMES,
    MOE_NAMES("block_sparse_moe", "w1", "w3", "w2")};
static const char *const mlp_moe_names[TR_COUNT] = {
    MOE_NAMES("mlp", "gate_proj", "up_proj", "down_proj")};
static const char *const qwen2_moe_names[TR_COUNT] = {
    BASE_NAMES, QKV_NAMES, MLP_NAMES, MOE_NAMES("mlp", "gate_proj", "up_proj", "down_proj"),
    SHARED_NAMES};
static const char *const qwen3_moe_names[TR_COUNT] = {
    BASE_NAMES, QKV_NAMES, QK_NORM_NAMES, MLP_NAMES,
    MOE_NAMES("mlp", "gate_proj", "up_proj", "down_proj")};

/* DeepSeek-V3 (R1, Kimi-K2): multi-head latent attention, a dense MLP in the
 * first first_k_dense_replace layers, then routed experts beside shared ones
 * (transformers 5 stacks the experts; Quark's export writes them per expert) */
#define DEEPSEEK_NAMES                                                                   \
    BASE_NAMES, MLP_NAMES, MOE_NAMES("mlp", "gate_proj", "up_proj", "down_proj"),        \
    [TR_Q] = LAYER "self_attn.q_proj", [TR_Q_A] = LAYER "self_attn.q_a_proj",            \
    [TR_Q_A_NORM] = LAYER "self_attn.q_a_layernorm.weight",                              \
    [TR_Q_B] = LAYER "self_attn.q_b_proj", [TR_KV_A] = LAYER "self_attn.kv_a_proj_with_mqa", \
    [TR_KV_A_NORM] = LAYER "self_attn.kv_a_layernorm.weight",                            \
    [TR_KV_B] = LAYER "self_attn.kv_b_proj",                                             \
    [TR_SH_GATE] = LAYER "mlp.shared_experts.gate_proj",                                 \
    [TR_SH_UP] = LAYER "mlp.shared_experts.up_proj",                                     \
    [TR_SH_DOWN] = LAYER "mlp.shared_experts.down_proj"
static const char *const deepseek_v3_names[TR_COUNT] = {
    DEEPSEEK_NAMES, [TR_ROUTER_BIAS] = LAYER "mlp.gate.e_score_correction_bias"};
/* DeepSeek-V2 (V2-Lite): the same without the router's selection bias */
static const char *const deepseek_v2_names[TR_COUNT] = {DEEPSEEK_NAMES};

/* gpt-oss: biased q/k/v/o, attention sinks, a biased router, each expert's
 * gate_up_proj (interleaved rows) and down_proj as Quark exports them */
static const char *const gpt_oss_names[TR_COUNT] = {
    BASE_NAMES, QKV_NAMES, [TR_SINKS] = LAYER "self_attn.sinks",
    [TR_ROUTER] = LAYER "mlp.router", [TR_EXP_GATE_UP] = LAYER "mlp.experts.{E}.gate_up_proj",
    [TR_EXP_DOWN] = LAYER "mlp.experts.{E}.down_proj"};

/* ---- the architectures --------------------------------------------------------- */

static const arch_desc archs[] = {
    {.hf_name = "LlamaForCausalLM", .names = llama_names},
    {.hf_name = "MistralForCausalLM", .names = llama_names},
    {.hf_name = "Qwen2ForCausalLM", .names = llama_names, .qkv_bias = 1},
    {.hf_name = "Qwen3ForCausalLM", .names = qwen3_names},
    {.hf_name = "Phi3ForCausalLM", .names = phi3_names, .attn = ATTN_GQA_SLIDING},
    {.hf_name = "Gemma3ForCausalLM", .names = gemma3_names, .norm = NORM_RMS_PLUS1,
     .act = ACT_GELU_TANH, .attn = ATTN_GQA_INTERLEAVED, .embed_scale = 1},
    {.hf_name = "MixtralForCausalLM", .names = mixtral_names, .moe_alt = mlp_moe_names,
     .moe = MOE_MIXTRAL},
    {.hf_name = "Qwen2MoeForCausalLM", .names = qwen2_moe_names, .qkv_bias = 1,
     .moe = MOE_SOFTMAX_TOPK},
    {.hf_name = "Qwen3MoeForCausalLM", .names = qwen3_moe_names, .moe = MOE_SOFTMAX_TOPK},
    {.hf_name = "DeepseekV3ForCausalLM", .names = deepseek_v3_names, .attn = ATTN_MLA,
     .moe = MOE_SIGMOID_GROUPED, .mla_mscale = 1},
    {.hf_name = "DeepseekV2ForCausalLM", .names = deepseek_v2_names, .attn = ATTN_MLA,
     .moe = MOE_SOFTMAX_GREEDY},
    /* top-k of the router logits, softmax over the chosen (as Mixtral) */
    {.hf_name = "GptOssForCausalLM", .names = gpt_oss_names, .qkv_bias = 1,
     .act = ACT_SWIGLU_OAI, .attn = ATTN_GQA_INTERLEAVED, .moe = MOE_MIXTRAL, .yarn = 1,
     .one_rope_base = 1},
};

#define NARCHS (sizeof(archs) / sizeof(archs[0]))

const arch_desc *nvfp4m_arch_find(const char *hf_name)
{
    for (size_t i = 0; i < NARCHS; i++)
        if (hf_name && strcmp(archs[i].hf_name, hf_name) == 0)
            return &archs[i];
    return NULL;
}

static char supported[512];

static void build_list(void)
{
    size_t n = 0;

    for (size_t i = 0; i < NARCHS; i++) {
        int w = snprintf(supported + n, sizeof(supported) - n, "%s%s", i ? ", " : "",
                         archs[i].hf_name);
        if (w < 0 || (size_t)w >= sizeof(supported) - n)
            break;
        n += (size_t)w;
    }
}

const char *nvfp4m_arch_supported_list(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, build_list);
    return supported;
}

int nvfp4m_name(char *out, size_t cap, const char *tmpl, int64_t l, int64_t e)
{
    size_t n = 0;

    for (const char *p = tmpl; *p; p++) {
        char num[24];
        const char *add = NULL;
        size_t len;

        if (p[0] == '{' && (p[1] == 'L' || p[1] == 'E') && p[2] == '}') {
            snprintf(num, sizeof(num), "%lld", (long long)(p[1] == 'L' ? l : e));
            add = num;
            p += 2;
        }
        len = add ? strlen(add) : 1;
        if (n + len >= cap)
            return -1;
        memcpy(out + n, add ? add : p, len);
        n += len;
    }
    out[n] = '\0';
    return (int)n;
}

static nvfp4_status need_int(const nvfp4_config *cfg, const char *key, int64_t *out,
                             nvfp4_error *err)
{
    nvfp4_status rc;

    if (!nvfp4_config_has(cfg, key))
        return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, nvfp4_config_path(cfg), key, -1,
                               "required key is missing");
    rc = nvfp4_config_get_int(cfg, key, 0, out, err);
    if (rc)
        return rc;
    if (*out <= 0)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, nvfp4_config_path(cfg), key, -1,
                               "expected a positive integer, found %lld", (long long)*out);
    return NVFP4_OK;
}

/* An optional count: DEF when absent, else a positive integer (a zero or
 * negative size is a broken config.json, not a missing key). */
static nvfp4_status opt_pos_int(const nvfp4_config *cfg, const char *key, int64_t def,
                                int64_t *out, nvfp4_error *err)
{
    nvfp4_status rc;

    if (!nvfp4_config_has(cfg, key)) {
        *out = def;
        return NVFP4_OK;
    }
    if ((rc = nvfp4_config_get_int(cfg, key, def, out, err)))
        return rc;
    if (*out <= 0)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, nvfp4_config_path(cfg), key, -1,
                               "expected a positive integer, found %lld", (long long)*out);
    return NVFP4_OK;
}

/* First present key of a list (transformers renamed several over time);
 * *USED names it (the first key when none is present). */
static nvfp4_status get_int_any(const nvfp4_config *cfg, const char *const *keys,
                                int64_t def, int64_t *out, const char **used,
                                nvfp4_error *err)
{
    *used = keys[0];
    for (; *keys; keys++)
        if (nvfp4_config_has(cfg, *keys)) {
            *used = *keys;
            return opt_pos_int(cfg, *keys, def, out, err);
        }
    *out = def;
    return NVFP4_OK;
}

/* A float32 parameter that must be finite and > 0 (MIN_EXCL: and above that
 * value): a zero or negative rope_theta, eps or scaling factor turns every
 * logit into NaN in the forward pass, so it is refused here, naming the key. */
static nvfp4_status check_pos_real(const nvfp4_config *cfg, const char *key, double v,
                                   const char *why, nvfp4_error *err)
{
    float f = (float)v;

    if (!(isfinite(f) && f > 0.0f))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, nvfp4_config_path(cfg), key, -1,
                               "expected a finite number > 0 (as float32), found %g (%s)",
                               v, why);
    return NVFP4_OK;
}

/* The limits of NVFP4M_DIM_MAX and NVFP4M_PRODUCT_MAX: sizes are int32
 * (token ids, positions) and every product of two config values is an
 * element count of one tensor, so neither can be larger than this without
 * the checkpoint being absurd; bounding them here keeps every later size
 * computation (times 4 bytes, times a few tokens) far from overflow. */
static nvfp4_status check_dim(const nvfp4_config *cfg, const char *key, int64_t v,
                              nvfp4_error *err)
{
    if (v > NVFP4M_DIM_MAX)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, nvfp4_config_path(cfg), key, -1,
                               "%lld is larger than the supported %lld", (long long)v,
                               (long long)NVFP4M_DIM_MAX);
    return NVFP4_OK;
}

/* A * B (A from key KA, B from key KB) must stay <= NVFP4M_PRODUCT_MAX. */
static nvfp4_status check_product(const nvfp4_config *cfg, const char *ka, int64_t a,
                                  const char *kb, int64_t b, nvfp4_error *err)
{
    int64_t p;

    if (__builtin_mul_overflow(a, b, &p) || p > NVFP4M_PRODUCT_MAX)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, nvfp4_config_path(cfg), ka, -1,
                               "%s %lld times %s %lld exceeds the supported tensor size of "
                               "%lld elements", ka, (long long)a, kb, (long long)b,
                               (long long)NVFP4M_PRODUCT_MAX);
    return NVFP4_OK;
}

/* KEY: a list of exactly N finite numbers > 0 (longrope's factors divide
 * the frequencies) into a new array *OUT. */
static nvfp4_status factor_list(const nvfp4_config *cfg, const char *key, int64_t n,
                                double **out, nvfp4_error *err)
{
    json_t *v = nvfp4_config_json(cfg, key);

    if (!v)
        return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, nvfp4_config_path(cfg), key, -1,
                               "required key is missing (longrope RoPE scaling)");
    if (!json_is_array(v) || (int64_t)json_array_size(v) != n)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, nvfp4_config_path(cfg), key, -1,
                               "expected a list of %lld numbers (rotary dimensions / 2)",
                               (long long)n);
    if (!(*out = malloc((size_t)n * sizeof(double))))
        return nvfp4_error_set(err, NVFP4_ERR_NOMEM, nvfp4_config_path(cfg), key, -1,
                               "out of memory");
    for (int64_t i = 0; i < n; i++) {
        json_t *x = json_array_get(v, (size_t)i);
        float f = (float)json_number_value(x);
        if (!json_is_number(x) || !(isfinite(f) && f > 0.0f))
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, nvfp4_config_path(cfg), key, -1,
                                   "element %lld: expected a finite number > 0 (as float32)",
                                   (long long)i);
        (*out)[i] = json_number_value(x);
    }
    return NVFP4_OK;
}

/* Phi-3's longrope (transformers' _compute_longrope_parameters): per
 * frequency short and long factors, the original context length, and the
 * attention factor on cos and sin (given, or sqrt(1 + ln f / ln orig) with
 * f = factor or max_position_embeddings / original). */
static nvfp4_status read_longrope(const nvfp4_config *cfg, const char *rp, hparams *hp,
                                  nvfp4_error *err)
{
    char key[96];
    double factor, orig;

    snprintf(key, sizeof(key), "%s.short_factor", rp);
    TRY(factor_list(cfg, key, hp->rot_dim / 2, &hp->lr_short, err));
    snprintf(key, sizeof(key), "%s.long_factor", rp);
    TRY(factor_list(cfg, key, hp->rot_dim / 2, &hp->lr_long, err));
    snprintf(key, sizeof(key), "%s.original_max_position_embeddings", rp);
    if (!nvfp4_config_has(cfg, key))
        snprintf(key, sizeof(key), "original_max_position_embeddings");
    if (!nvfp4_config_has(cfg, key))
        return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, nvfp4_config_path(cfg), key, -1,
                               "required key is missing (longrope RoPE scaling)");
    TRY(nvfp4_config_get_double(cfg, key, 0.0, &orig, err));
    TRY(check_pos_real(cfg, key, orig, "longrope's original context", err));
    hp->rs_orig = orig;
    snprintf(key, sizeof(key), "%s.factor", rp);
    TRY(nvfp4_config_get_double(cfg, key, (double)hp->max_pos / orig, &factor, err));
    TRY(check_pos_real(cfg, key, factor, "longrope scaling", err));
    snprintf(key, sizeof(key), "%s.attention_factor", rp);
    if (nvfp4_config_has(cfg, key)) {
        TRY(nvfp4_config_get_double(cfg, key, 1.0, &hp->rope_attn, err));
        TRY(check_pos_real(cfg, key, hp->rope_attn, "the factor on cos and sin", err));
    } else if (factor > 1.0 && orig > 1.0) {
        hp->rope_attn = sqrt(1.0 + log(factor) / log(orig));
    }
    return NVFP4_OK;
}

/* An optional number under RP (0 when absent or null). */
static nvfp4_status rp_num(const nvfp4_config *cfg, const char *rp, const char *name,
                           double *out, nvfp4_error *err)
{
    char key[96];
    json_t *v;

    snprintf(key, sizeof(key), "%s.%s", rp, name);
    v = nvfp4_config_json(cfg, key);
    *out = 0.0;
    if (!v || json_is_null(v))
        return NVFP4_OK;
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, nvfp4_config_path(cfg), key, -1,
                               "expected a finite number >= 0");
    *out = json_number_value(v);
    return NVFP4_OK;
}

static double yarn_mscale(double scale, double mscale)
{
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

/* YaRN as transformers' _compute_yarn_parameters: the correction range of
 * beta_fast / beta_slow rotations over original_max_position_embeddings
 * (floored / ceiled unless truncate is false), and the factor on cos and
 * sin: attention_factor, or mscale(factor, mscale) / mscale(factor,
 * mscale_all_dim) when both are set, else mscale(factor, 1).  The frequency
 * ramp itself is compute_inv_freq's (model-load.c). */
static nvfp4_status read_yarn(const nvfp4_config *cfg, const char *rp, hparams *hp,
                              nvfp4_error *err)
{
    char key[96];
    double orig, af, ms, msa, bf, bs, d = (double)hp->rot_dim, base = hp->rope_theta;
    int truncate;

    snprintf(key, sizeof(key), "%s.original_max_position_embeddings", rp);
    if (!nvfp4_config_has(cfg, key))
        return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, nvfp4_config_path(cfg), key, -1,
                               "required key is missing (YaRN RoPE scaling)");
    TRY(nvfp4_config_get_double(cfg, key, 0.0, &orig, err));
    TRY(check_pos_real(cfg, key, orig, "YaRN's original context", err));
    TRY(rp_num(cfg, rp, "factor", &hp->yarn_factor, err));
    if (hp->yarn_factor == 0.0)
        hp->yarn_factor = (double)hp->max_pos / orig;
    snprintf(key, sizeof(key), "%s.factor", rp);
    TRY(check_pos_real(cfg, key, hp->yarn_factor, "YaRN scaling", err));
    TRY(rp_num(cfg, rp, "attention_factor", &af, err));
    TRY(rp_num(cfg, rp, "mscale", &ms, err));
    TRY(rp_num(cfg, rp, "mscale_all_dim", &msa, err));
    TRY(rp_num(cfg, rp, "beta_fast", &bf, err));
    TRY(rp_num(cfg, rp, "beta_slow", &bs, err));
    if (bf == 0.0)
        bf = 32.0;
    if (bs == 0.0)
        bs = 1.0;
    snprintf(key, sizeof(key), "%s.truncate", rp);
    TRY(nvfp4_config_get_bool(cfg, key, 1, &truncate, err));
    if (af > 0.0)
        hp->rope_attn = af;
    else if (ms > 0.0 && msa > 0.0)
        hp->rope_attn = yarn_mscale(hp->yarn_factor, ms) / yarn_mscale(hp->yarn_factor, msa);
    else
        hp->rope_attn = yarn_mscale(hp->yarn_factor, 1.0);
    /* dim * ln(orig / (rotations * 2 pi)) / (2 ln base) */
    hp->yarn_low = d * log(orig / (bf * 2.0 * M_PI)) / (2.0 * log(base));
    hp->yarn_high = d * log(orig / (bs * 2.0 * M_PI)) / (2.0 * log(base));
    if (truncate) {
        hp->yarn_low = floor(hp->yarn_low);
        hp->yarn_high = ceil(hp->yarn_high);
    }
    if (hp->yarn_low < 0.0)
        hp->yarn_low = 0.0;
    if (hp->yarn_high > d - 1.0)
        hp->yarn_high = d - 1.0;
    if (hp->yarn_low == hp->yarn_high)
        hp->yarn_high += 0.001; /* (transformers: prevent singularity) */
    return NVFP4_OK;
}

/* Sliding windows, the local RoPE base, the score scale and the logit cap.
 * Gemma 3: layer_types ("sliding_attention" / "full_attention") or, in older
 * configs, every sliding_window_pattern-th layer global (default 6); the
 * local base is rope_parameters.sliding_attention.rope_theta or
 * rope_local_base_freq.  ATTN_GQA_SLIDING: sliding_window, when set,
 * applies to every layer (transformers' Phi-3).  ATTN_GQA reads none of
 * these keys (Qwen's sliding_window goes with use_sliding_window false). */
static nvfp4_status read_attention(const nvfp4_config *cfg, const arch_desc *arch,
                                   hparams *hp, nvfp4_error *err)
{
    const char *path = nvfp4_config_path(cfg);
    json_t *v;

    hp->rope_local_theta = hp->rope_theta;
    if (arch->attn == ATTN_GQA || arch->attn == ATTN_MLA)
        return NVFP4_OK;
    if (nvfp4_config_has(cfg, "query_pre_attn_scalar")) {
        TRY(nvfp4_config_get_double(cfg, "query_pre_attn_scalar", 0.0, &hp->attn_scalar, err));
        TRY(check_pos_real(cfg, "query_pre_attn_scalar", hp->attn_scalar,
                           "the scores are divided by its square root", err));
    }
    v = nvfp4_config_json(cfg, "final_logit_softcapping");
    if (v && !json_is_null(v)) {
        TRY(nvfp4_config_get_double(cfg, "final_logit_softcapping", 0.0, &hp->softcap, err));
        TRY(check_pos_real(cfg, "final_logit_softcapping", hp->softcap,
                           "logits become tanh(x / cap) * cap", err));
    }
    v = nvfp4_config_json(cfg, "attn_logit_softcapping");
    if (v && !json_is_null(v))
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, path, "attn_logit_softcapping", -1,
                               "soft-capping of attention scores is not supported");
    v = nvfp4_config_json(cfg, "sliding_window");
    if (!v || json_is_null(v))
        return NVFP4_OK;
    TRY(opt_pos_int(cfg, "sliding_window", 0, &hp->window, err));
    TRY(check_dim(cfg, "sliding_window", hp->window, err));
    if (!(hp->sliding = calloc((size_t)hp->layers, 1)))
        return nvfp4_error_set(err, NVFP4_ERR_NOMEM, path, "sliding_window", -1,
                               "out of memory for %lld layers", (long long)hp->layers);
    if (arch->attn != ATTN_GQA_INTERLEAVED) {
        memset(hp->sliding, 1, (size_t)hp->layers);
        return NVFP4_OK;
    }
    if (!arch->one_rope_base) {
        char key[96];
        snprintf(key, sizeof(key), "rope_parameters.sliding_attention.rope_theta");
        if (!nvfp4_config_has(cfg, key))
            snprintf(key, sizeof(key), "rope_local_base_freq");
        TRY(nvfp4_config_get_double(cfg, key, 10000.0, &hp->rope_local_theta, err));
        TRY(check_pos_real(cfg, key, hp->rope_local_theta, "the local RoPE base", err));
        snprintf(key, sizeof(key), "rope_parameters.sliding_attention.rope_type");
        if (nvfp4_config_has(cfg, key)) {
            const char *t;
            TRY(nvfp4_config_get_string(cfg, key, "default", &t, err));
            if (strcmp(t, "default") != 0)
                return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, path, key, -1,
                                       "RoPE type \"%s\" of the sliding layers is not "
                                       "supported (supported: default)", t);
        }
    }
    v = nvfp4_config_json(cfg, "layer_types");
    if (v) {
        if (!json_is_array(v) || (int64_t)json_array_size(v) != hp->layers)
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, path, "layer_types", -1,
                                   "expected a list of %lld layer types (num_hidden_layers)",
                                   (long long)hp->layers);
        for (int64_t l = 0; l < hp->layers; l++) {
            const char *t = json_string_value(json_array_get(v, (size_t)l));
            if (t && !strcmp(t, "sliding_attention"))
                hp->sliding[l] = 1;
            else if (!t || strcmp(t, "full_attention") != 0)
                return nvfp4_error_set(err, NVFP4_ERR_INVALID, path, "layer_types", -1,
                                       "element %lld: expected \"sliding_attention\" or "
                                       "\"full_attention\"", (long long)l);
        }
    } else {
        int64_t pat;
        TRY(opt_pos_int(cfg, "sliding_window_pattern", 6, &pat, err));
        for (int64_t l = 0; l < hp->layers; l++)
            hp->sliding[l] = (l + 1) % pat != 0;
    }
    return NVFP4_OK;
}

/* An integer key that may be null (DeepSeek's q_lora_rank, n_shared_experts):
 * 0 when absent or null, else a positive integer. */
static nvfp4_status opt_int_or_null(const nvfp4_config *cfg, const char *key, int64_t *out,
                                    nvfp4_error *err)
{
    json_t *v = nvfp4_config_json(cfg, key);

    *out = 0;
    if (!v || json_is_null(v))
        return NVFP4_OK;
    TRY(opt_pos_int(cfg, key, 0, out, err));
    return check_dim(cfg, key, *out, err);
}

/* DeepSeek-V3's routing (transformers' DeepseekV3TopkRouter): sigmoid
 * scores, e_score_correction_bias added for the choice only, the experts in
 * n_group groups of which the topk_group with the largest sums of their two
 * best scores compete, the chosen scores renormalised (norm_topk_prob) and
 * times routed_scaling_factor; first_k_dense_replace dense layers, then
 * every layer MoE; n_shared_experts shared experts of moe_intermediate_size
 * each, run as one MLP. */
static nvfp4_status read_grouped_moe(const nvfp4_config *cfg, const arch_desc *arch,
                                     hparams *hp, nvfp4_error *err)
{
    const char *path = nvfp4_config_path(cfg);
    const int v2 = arch->moe == MOE_SOFTMAX_GREEDY;
    int64_t nshared, freq, per;
    const char *s;

    TRY(opt_int_or_null(cfg, "n_group", &hp->n_group, err));
    TRY(opt_int_or_null(cfg, "topk_group", &hp->topk_group, err));
    if (!hp->n_group)
        hp->n_group = 1;
    if (!hp->topk_group)
        hp->topk_group = 1;
    TRY(opt_pos_int(cfg, "moe_layer_freq", 1, &freq, err));
    TRY(nvfp4_config_get_int(cfg, "first_k_dense_replace", 0, &hp->first_dense, err));
    TRY(nvfp4_config_get_double(cfg, "routed_scaling_factor", 1.0, &hp->routed_scale, err));
    TRY(check_pos_real(cfg, "routed_scaling_factor", hp->routed_scale,
                       "the routed experts' weights are multiplied by it", err));
    TRY(nvfp4_config_get_bool(cfg, "norm_topk_prob", 1, &hp->norm_topk, err));
    TRY(opt_int_or_null(cfg, "n_shared_experts", &nshared, err));
    TRY(nvfp4_config_get_string(cfg, "scoring_func", v2 ? "softmax" : "sigmoid", &s, err));
    if (strcmp(s, v2 ? "softmax" : "sigmoid") != 0)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, path, "scoring_func", -1,
                               "\"%s\" is not supported (supported: %s)", s,
                               v2 ? "softmax" : "sigmoid");
    TRY(nvfp4_config_get_string(cfg, "topk_method", v2 ? "greedy" : "noaux_tc", &s, err));
    if (v2 && !strcmp(s, "group_limited_greedy"))
        hp->group_limited = 1;
    else if (strcmp(s, v2 ? "greedy" : "noaux_tc") != 0)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, path, "topk_method", -1,
                               "\"%s\" is not supported (supported: %s)", s,
                               v2 ? "greedy, group_limited_greedy" : "noaux_tc");
    if (v2) {
        /* transformers' DeepseekV2TopkRouter never renormalises; greedy
         * top-k ignores the groups */
        hp->norm_topk = 0;
        hp->score_softmax = 1;
        if (!hp->group_limited)
            hp->n_group = hp->topk_group = 1;
    }
    if (freq != 1)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, path, "moe_layer_freq", -1,
                               "%lld is not supported (supported: 1)", (long long)freq);
    /* (more than num_hidden_layers: every layer dense, as transformers) */
    if (hp->first_dense < 0)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, path, "first_k_dense_replace", -1,
                               "expected an integer >= 0, found %lld",
                               (long long)hp->first_dense);
    if (hp->experts % hp->n_group != 0 || hp->experts / hp->n_group < (v2 ? 1 : 2))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, path, "n_group", -1,
                               "%lld does not split %lld experts into groups of at least 2",
                               (long long)hp->n_group, (long long)hp->experts);
    per = hp->experts / hp->n_group;
    if (hp->topk_group > hp->n_group || hp->topk > hp->topk_group * per)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, path, "topk_group", -1,
                               "%lld of %lld groups of %lld experts cannot give "
                               "num_experts_per_tok %lld", (long long)hp->topk_group,
                               (long long)hp->n_group, (long long)per, (long long)hp->topk);
    if (hp->first_dense > 0 && hp->inter <= 0)
        return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, path, "intermediate_size", -1,
                               "required key is missing (first_k_dense_replace dense layers)");
    TRY(check_product(cfg, "n_shared_experts", nshared, "moe_intermediate_size", hp->moe_inter,
                      err));
    hp->shared_inter = nshared * hp->moe_inter;
    TRY(check_dim(cfg, "n_shared_experts", hp->shared_inter, err));
    return check_product(cfg, "n_shared_experts", 2 * hp->shared_inter, "hidden_size",
                         hp->hidden, err);
}

/* Multi-head latent attention (transformers' DeepseekV3Attention).  The
 * cache row is the absorbed form's single KV head: rope + kv_lora wide. */
static nvfp4_status read_mla(const nvfp4_config *cfg, const arch_desc *arch, hparams *hp,
                             nvfp4_error *err)
{
    const char *path = nvfp4_config_path(cfg);
    int64_t qk, in;

    TRY(opt_int_or_null(cfg, "q_lora_rank", &hp->q_lora, err));
    TRY(need_int(cfg, "kv_lora_rank", &hp->kv_lora, err));
    TRY(need_int(cfg, "qk_rope_head_dim", &hp->rope_hd, err));
    TRY(need_int(cfg, "qk_nope_head_dim", &hp->nope_hd, err));
    TRY(need_int(cfg, "v_head_dim", &hp->v_hd, err));
    TRY(check_dim(cfg, "kv_lora_rank", hp->kv_lora, err));
    TRY(check_dim(cfg, "qk_rope_head_dim", hp->rope_hd, err));
    TRY(check_dim(cfg, "qk_nope_head_dim", hp->nope_hd, err));
    TRY(check_dim(cfg, "v_head_dim", hp->v_hd, err));
    TRY(nvfp4_config_get_bool(cfg, "rope_interleave", 1, &hp->rope_interleave, err));
    if (hp->rope_hd % 2)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, path, "qk_rope_head_dim", -1,
                               "expected an even number of rotary dimensions, found %lld",
                               (long long)hp->rope_hd);
    qk = hp->nope_hd + hp->rope_hd;
    in = hp->q_lora ? hp->q_lora : hp->hidden;
    TRY(check_product(cfg, "num_attention_heads", hp->heads, "qk_head_dim", qk, err));
    TRY(check_product(cfg, "num_attention_heads", hp->heads * qk, "q_lora_rank", in, err));
    TRY(check_product(cfg, "num_attention_heads", hp->heads * (hp->nope_hd + hp->v_hd),
                      "kv_lora_rank", hp->kv_lora, err));
    TRY(check_product(cfg, "num_attention_heads", hp->heads * hp->v_hd, "hidden_size",
                      hp->hidden, err));
    TRY(check_product(cfg, "kv_lora_rank", hp->kv_lora + hp->rope_hd, "hidden_size",
                      hp->hidden, err));
    TRY(check_product(cfg, "num_attention_heads", hp->heads, "kv_lora_rank",
                      hp->kv_lora + hp->rope_hd, err));
    hp->head_dim = hp->rope_hd + hp->kv_lora;
    hp->kv_heads = 1;
    hp->rot_dim = hp->rope_hd;
    if (hp->rope_longrope || hp->rope_llama3 || hp->rope_linear != 1.0)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, path, "rope_scaling", -1,
                               "multi-head latent attention runs default or YaRN RoPE only");
    hp->attn_scale = 1.0 / sqrt((double)qk);
    if (hp->rope_yarn && arch->mla_mscale) {
        /* DeepseekV3Attention: times mscale(factor, mscale_all_dim)^2 when set
         * (transformers' DeepseekV2Attention does not) */
        const char *rp = nvfp4_config_has(cfg, "rope_parameters") ? "rope_parameters"
                                                                  : "rope_scaling";
        double msa;
        TRY(rp_num(cfg, rp, "mscale_all_dim", &msa, err));
        if (msa > 0.0) {
            double s = yarn_mscale(hp->yarn_factor, msa);
            hp->attn_scale *= s * s;
        }
    }
    return NVFP4_OK;
}

nvfp4_status nvfp4m_hparams_read(const nvfp4_config *cfg, const arch_desc *arch, hparams *hp,
                          nvfp4_error *err)
{
    const char *path = nvfp4_config_path(cfg);
    const char *rope_type = NULL;
    const char *rp;
    json_t *v;

    memset(hp, 0, sizeof(*hp));
    TRY(need_int(cfg, "hidden_size", &hp->hidden, err));
    TRY(need_int(cfg, "num_hidden_layers", &hp->layers, err));
    TRY(need_int(cfg, "num_attention_heads", &hp->heads, err));
    TRY(need_int(cfg, "vocab_size", &hp->vocab, err));
    TRY(opt_pos_int(cfg, "num_key_value_heads", hp->heads, &hp->kv_heads, err));
    TRY(opt_pos_int(cfg, "head_dim", hp->hidden / hp->heads, &hp->head_dim, err));
    TRY(opt_pos_int(cfg, "intermediate_size", 0, &hp->inter, err));
    TRY(opt_pos_int(cfg, "max_position_embeddings", 4096, &hp->max_pos, err));
    TRY(nvfp4_config_get_double(cfg, "rms_norm_eps", 1e-6, &hp->eps, err));
    TRY(check_pos_real(cfg, "rms_norm_eps", hp->eps, "RMSNorm divides by sqrt(mean + eps)",
                       err));
    TRY(check_dim(cfg, "hidden_size", hp->hidden, err));
    TRY(check_dim(cfg, "num_attention_heads", hp->heads, err));
    TRY(check_dim(cfg, "num_key_value_heads", hp->kv_heads, err));
    TRY(check_dim(cfg, "head_dim", hp->head_dim, err));
    TRY(check_dim(cfg, "intermediate_size", hp->inter, err));
    TRY(check_dim(cfg, "vocab_size", hp->vocab, err));
    TRY(check_dim(cfg, "max_position_embeddings", hp->max_pos, err));
    TRY(check_dim(cfg, "num_hidden_layers", hp->layers, err));
    TRY(check_product(cfg, "num_attention_heads", hp->heads, "head_dim", hp->head_dim, err));
    TRY(check_product(cfg, "num_key_value_heads", hp->kv_heads, "head_dim", hp->head_dim,
                      err));
    TRY(check_product(cfg, "vocab_size", hp->vocab, "hidden_size", hp->hidden, err));
    TRY(check_product(cfg, "intermediate_size", 2 * hp->inter, "hidden_size", hp->hidden,
                      err));
    TRY(check_product(cfg, "num_attention_heads", hp->heads * hp->head_dim, "hidden_size",
                      hp->hidden, err));
    TRY(nvfp4_config_get_bool(cfg, "tie_word_embeddings", 0, &hp->tie, err));
    TRY(nvfp4_config_get_int(cfg, "bos_token_id", -1, &hp->bos, err));
    v = nvfp4_config_json(cfg, "eos_token_id");
    if (json_is_array(v) && json_array_size(v) > 0 &&
        json_is_integer(json_array_get(v, 0)))
        hp->eos = json_integer_value(json_array_get(v, 0));
    else
        TRY(nvfp4_config_get_int(cfg, "eos_token_id", -1, &hp->eos, err));

    if (hp->kv_heads <= 0 || hp->heads % hp->kv_heads != 0)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, path, "num_key_value_heads", -1,
                               "%lld does not divide num_attention_heads %lld",
                               (long long)hp->kv_heads, (long long)hp->heads);
    if (hp->head_dim <= 0 && !nvfp4_config_has(cfg, "head_dim"))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, path, "num_attention_heads", -1,
                               "hidden_size %lld / num_attention_heads %lld leaves no head "
                               "size (and config.json gives no head_dim)",
                               (long long)hp->hidden, (long long)hp->heads);
    if (hp->head_dim <= 0 || hp->head_dim % 2)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, path, "head_dim", -1,
                               "expected a positive even head size, found %lld",
                               (long long)hp->head_dim);

    /* RoPE: transformers 5 writes rope_parameters, older ones rope_theta and
     * rope_scaling. */
    rp = nvfp4_config_has(cfg, "rope_parameters") ? "rope_parameters" : "rope_scaling";
    /* Gemma 3 in transformers 5: one rope_parameters per attention kind */
    if (nvfp4_config_has(cfg, "rope_parameters.full_attention"))
        rp = "rope_parameters.full_attention";
    hp->rope_linear = 1.0;
    {
        char key[96];
        snprintf(key, sizeof(key), "%s.rope_theta", rp);
        if (!nvfp4_config_has(cfg, key))
            snprintf(key, sizeof(key), "rope_theta");
        TRY(nvfp4_config_get_double(cfg, key, 10000.0, &hp->rope_theta, err));
        TRY(check_pos_real(cfg, key, hp->rope_theta, "the RoPE base", err));
        snprintf(key, sizeof(key), "%s.rope_type", rp);
        TRY(nvfp4_config_get_string(cfg, key, NULL, &rope_type, err));
        if (!rope_type) {
            snprintf(key, sizeof(key), "%s.type", rp);
            TRY(nvfp4_config_get_string(cfg, key, "default", &rope_type, err));
        }
        if (strcmp(rope_type, "llama3") == 0) {
            hp->rope_llama3 = 1;
            snprintf(key, sizeof(key), "%s.factor", rp);
            TRY(nvfp4_config_get_double(cfg, key, 8.0, &hp->rs_factor, err));
            snprintf(key, sizeof(key), "%s.low_freq_factor", rp);
            TRY(nvfp4_config_get_double(cfg, key, 1.0, &hp->rs_low, err));
            snprintf(key, sizeof(key), "%s.high_freq_factor", rp);
            TRY(nvfp4_config_get_double(cfg, key, 4.0, &hp->rs_high, err));
            snprintf(key, sizeof(key), "%s.original_max_position_embeddings", rp);
            TRY(nvfp4_config_get_double(cfg, key, 8192.0, &hp->rs_orig, err));
            /* transformers' _validate_llama3_parameters: factor, both
             * frequency factors and the original length positive, and
             * low < high (the smoothing divides by their difference). */
            TRY(check_pos_real(cfg, key, hp->rs_orig, "Llama 3 RoPE scaling", err));
            snprintf(key, sizeof(key), "%s.factor", rp);
            TRY(check_pos_real(cfg, key, hp->rs_factor, "Llama 3 RoPE scaling", err));
            snprintf(key, sizeof(key), "%s.low_freq_factor", rp);
            TRY(check_pos_real(cfg, key, hp->rs_low, "Llama 3 RoPE scaling", err));
            snprintf(key, sizeof(key), "%s.high_freq_factor", rp);
            TRY(check_pos_real(cfg, key, hp->rs_high, "Llama 3 RoPE scaling", err));
            if (!(hp->rs_high > hp->rs_low))
                return nvfp4_error_set(err, NVFP4_ERR_INVALID, path, key, -1,
                                       "expected high_freq_factor %g > low_freq_factor %g "
                                       "(Llama 3 RoPE scaling divides by their difference)",
                                       hp->rs_high, hp->rs_low);
        } else if (strcmp(rope_type, "longrope") == 0) {
            hp->rope_longrope = 1;
        } else if (strcmp(rope_type, "linear") == 0) {
            /* positions / factor: inv_freq / factor (Gemma 3 4B and up) */
            snprintf(key, sizeof(key), "%s.factor", rp);
            TRY(nvfp4_config_get_double(cfg, key, 1.0, &hp->rope_linear, err));
            TRY(check_pos_real(cfg, key, hp->rope_linear, "linear RoPE scaling", err));
        } else if (strcmp(rope_type, "yarn") == 0 && (arch->attn == ATTN_MLA || arch->yarn)) {
            hp->rope_yarn = 1; /* read_yarn below */
        } else if (strcmp(rope_type, "default") != 0) {
            /* yarn only where the architecture's reference implements it */
            int yarn_ok = arch->attn == ATTN_MLA || arch->yarn;
            return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, path, key, -1,
                                   "RoPE type \"%s\" is not supported for %s (supported: "
                                   "default, linear, llama3, longrope%s)", rope_type,
                                   arch->hf_name, yarn_ok ? ", yarn" : "");
        }
        /* partial rotary (Phi-3, ...): transformers 5 keeps the factor in
         * rope_parameters, older configs at the top level; int() of the
         * product, as transformers computes the rotary dimension */
        {
            double prf;
            snprintf(key, sizeof(key), "%s.partial_rotary_factor", rp);
            if (!nvfp4_config_has(cfg, key))
                snprintf(key, sizeof(key), "partial_rotary_factor");
            TRY(nvfp4_config_get_double(cfg, key, 1.0, &prf, err));
            if (!(prf > 0.0 && prf <= 1.0))
                return nvfp4_error_set(err, NVFP4_ERR_INVALID, path, key, -1,
                                       "expected a factor in (0, 1], found %g", prf);
            hp->rot_dim = (int64_t)((double)hp->head_dim * prf);
            if (hp->rot_dim <= 0 || hp->rot_dim % 2)
                return nvfp4_error_set(err, NVFP4_ERR_INVALID, path, key, -1,
                                       "head_dim %lld times %g leaves %lld rotary dimensions; "
                                       "expected a positive even number",
                                       (long long)hp->head_dim, prf, (long long)hp->rot_dim);
        }
        hp->rope_attn = 1.0;
        if (hp->rope_longrope)
            TRY(read_longrope(cfg, rp, hp, err));
        if (hp->rope_yarn)
            TRY(read_yarn(cfg, rp, hp, err));
    }
    TRY(read_attention(cfg, arch, hp, err));

    if (arch->moe != MOE_NONE) {
        static const char *const ek[] = {"num_experts", "num_local_experts",
                                         "n_routed_experts", NULL};
        static const char *const mk[] = {"moe_intermediate_size", NULL};
        const char *ekey, *mkey;
        TRY(get_int_any(cfg, ek, 0, &hp->experts, &ekey, err));
        TRY(nvfp4_config_get_int(cfg, "num_experts_per_tok", 2, &hp->topk, err));
        TRY(get_int_any(cfg, mk, hp->inter, &hp->moe_inter, &mkey, err));
        TRY(opt_pos_int(cfg, "shared_expert_intermediate_size", 0, &hp->shared_inter, err));
        TRY(check_dim(cfg, ekey, hp->experts, err));
        TRY(check_dim(cfg, mkey, hp->moe_inter, err));
        TRY(check_dim(cfg, "shared_expert_intermediate_size", hp->shared_inter, err));
        TRY(check_product(cfg, mkey, 2 * hp->moe_inter, "hidden_size", hp->hidden, err));
        TRY(check_product(cfg, "shared_expert_intermediate_size", 2 * hp->shared_inter,
                          "hidden_size", hp->hidden, err));
        TRY(nvfp4_config_get_int(cfg, "decoder_sparse_step", 1, &hp->sparse_step, err));
        /* Mixtral always renormalises (softmax over the chosen logits). */
        TRY(nvfp4_config_get_bool(cfg, "norm_topk_prob", arch->moe == MOE_MIXTRAL,
                                  &hp->norm_topk, err));
        if (arch->moe == MOE_MIXTRAL)
            hp->norm_topk = 1;
        if (arch->act == ACT_SWIGLU_OAI) {
            TRY(nvfp4_config_get_double(cfg, "swiglu_limit", 7.0, &hp->swiglu_limit, err));
            TRY(check_pos_real(cfg, "swiglu_limit", hp->swiglu_limit,
                               "the experts' gate and up are clamped to it", err));
        }
        if (hp->experts <= 0)
            return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, path, "num_experts", -1,
                                   "a mixture-of-experts model needs num_experts or "
                                   "num_local_experts");
        if (hp->topk <= 0 || hp->topk > hp->experts)
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, path, "num_experts_per_tok",
                                   -1, "expected 1..%lld, found %lld",
                                   (long long)hp->experts, (long long)hp->topk);
        if (hp->sparse_step <= 0)
            hp->sparse_step = 1;
        v = nvfp4_config_json(cfg, "mlp_only_layers");
        if (json_is_array(v) && json_array_size(v)) {
            hp->mlp_only = calloc(json_array_size(v), sizeof(int64_t));
            if (!hp->mlp_only)
                return nvfp4_error_set(err, NVFP4_ERR_NOMEM, path, "mlp_only_layers", -1,
                                       "out of memory for %zu layer numbers",
                                       json_array_size(v));
            for (size_t i = 0; i < json_array_size(v); i++)
                hp->mlp_only[hp->n_mlp_only++] = json_integer_value(json_array_get(v, i));
        }
        if (nvfp4m_arch_has(arch, TR_SH_EXPERT_GATE) && hp->shared_inter <= 0)
            return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, path,
                                   "shared_expert_intermediate_size", -1,
                                   "required key is missing");
    }
    if (arch->moe == MOE_SIGMOID_GROUPED || arch->moe == MOE_SOFTMAX_GREEDY)
        TRY(read_grouped_moe(cfg, arch, hp, err));
    if (arch->attn == ATTN_MLA)
        TRY(read_mla(cfg, arch, hp, err));
    if (!nvfp4m_hparams_layer_is_moe(hp, arch, 0) && hp->inter <= 0 && arch->moe == MOE_NONE)
        return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, path, "intermediate_size", -1,
                               "required key is missing");
    return NVFP4_OK;
}

void nvfp4m_hparams_free(hparams *hp)
{
    free(hp->mlp_only);
    hp->mlp_only = NULL;
    free(hp->lr_short);
    free(hp->lr_long);
    free(hp->sliding);
    hp->sliding = NULL;
    hp->lr_short = hp->lr_long = NULL;
}

int nvfp4m_hparams_layer_is_moe(const hparams *hp, const arch_desc *arch, int64_t l)
{
    if (arch->moe == MOE_NONE || hp->experts <= 0 || l < hp->first_dense)
        return 0;
    for (size_t i = 0; i < hp->n_mlp_only; i++)
        if (hp->mlp_only[i] == l)
            return 0;
    return (l + 1) % hp->sparse_step == 0;
}
