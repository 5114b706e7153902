/* SPDX-License-Identifier: MIT */
/*
 * nvfp4 synth: write a checkpoint in Quark's NVFP4 export format with random
 * weights, for benchmarks at the shapes of real models (Llama-3-8B, ...)
 * without downloading them.
 *
 * The layout is the one amd-quark 0.13 exports (tests/data/models, checked
 * by test-model against those exports): per quantized Linear PREFIX
 *   PREFIX.weight          U8      [n, k/2]   two E2M1 codes a byte, low first
 *   PREFIX.weight_scale    F8_E4M3 [n, k/16]
 *   PREFIX.weight_scale_2  F32     []         global weight scale (multiplier)
 *   PREFIX.input_scale_2   F32     []         W4A4 only: activation scale
 * and BF16 embeddings, norms, routers, biases and lm_head (excluded, as
 * Quark's recipes leave it).  The weights are quantized from random float
 * weights by the project's own Quark quantizer (libquant, spec §7): an
 * Irwin-Hall approximation of N(0, sigma^2) (sum of four uniforms, bounded
 * by 2*sqrt(3)*sigma), whose bound is the amax of every global scale, so
 * that fused siblings (q/k/v, gate/up, all experts) share their global
 * scales as §4 requires.  Every row has its own seeded generator: the output
 * depends on the seed only, not on the number of threads.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include <nvfp4/quant.h>

#include "cli.h"

#define SIGMA 0.02f               /* weights ~ N(0, SIGMA^2), Llama's init range */
#define BOUND_K 3.4641016f        /* 2 * sqrt(3): bound of the Irwin-Hall variate */
#define ACT_AMAX 4.5              /* calibration max of a unit-variance activation */

typedef struct {
    const char *name;
    const char *json;             /* config.json without quantization_config */
} preset;

/* gpt-oss-20b's 24 layers: sliding, full, sliding, ... */
#define GPT_OSS_PAIR "\"sliding_attention\", \"full_attention\""
#define GPT_OSS_LAYER_TYPES \
    GPT_OSS_PAIR ", " GPT_OSS_PAIR ", " GPT_OSS_PAIR ", " GPT_OSS_PAIR ", " GPT_OSS_PAIR ", " \
    GPT_OSS_PAIR ", " GPT_OSS_PAIR ", " GPT_OSS_PAIR ", " GPT_OSS_PAIR ", " GPT_OSS_PAIR ", " \
    GPT_OSS_PAIR ", " GPT_OSS_PAIR

static const preset presets[] = {
    {"llama3-8b",
     "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\","
     " \"hidden_size\": 4096, \"intermediate_size\": 14336, \"num_hidden_layers\": 32,"
     " \"num_attention_heads\": 32, \"num_key_value_heads\": 8, \"head_dim\": 128,"
     " \"vocab_size\": 128256, \"max_position_embeddings\": 131072,"
     " \"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0,"
     " \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0,"
     " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192,"
     " \"rope_type\": \"llama3\"}, \"bos_token_id\": 128000, \"eos_token_id\": 128001,"
     " \"hidden_act\": \"silu\", \"tie_word_embeddings\": false, \"dtype\": \"bfloat16\"}"},
    {"smollm2-135m",
     "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\","
     " \"hidden_size\": 576, \"intermediate_size\": 1536, \"num_hidden_layers\": 30,"
     " \"num_attention_heads\": 9, \"num_key_value_heads\": 3, \"head_dim\": 64,"
     " \"vocab_size\": 49152, \"max_position_embeddings\": 8192, \"rms_norm_eps\": 1e-05,"
     " \"rope_theta\": 100000, \"bos_token_id\": 1, \"eos_token_id\": 2,"
     " \"hidden_act\": \"silu\", \"tie_word_embeddings\": true, \"dtype\": \"bfloat16\"}"},
    {"qwen3-30b-a3b",
     "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"model_type\": \"qwen3_moe\","
     " \"hidden_size\": 2048, \"intermediate_size\": 6144, \"moe_intermediate_size\": 768,"
     " \"num_experts\": 128, \"num_experts_per_tok\": 8, \"norm_topk_prob\": true,"
     " \"decoder_sparse_step\": 1, \"mlp_only_layers\": [], \"num_hidden_layers\": 48,"
     " \"num_attention_heads\": 32, \"num_key_value_heads\": 4, \"head_dim\": 128,"
     " \"vocab_size\": 151936, \"max_position_embeddings\": 40960, \"rms_norm_eps\": 1e-06,"
     " \"rope_theta\": 1000000.0, \"bos_token_id\": 151643, \"eos_token_id\": 151645,"
     " \"hidden_act\": \"silu\", \"tie_word_embeddings\": false, \"dtype\": \"bfloat16\"}"},
    /* DeepSeek-V3 (671B; R1 and Kimi-K2 share the architecture): give --layers,
     * the first 3 layers are dense, the MoE ones ~5.6 GB each */
    {"deepseek-v3",
     "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"model_type\": \"deepseek_v3\","
     " \"hidden_size\": 7168, \"intermediate_size\": 18432, \"moe_intermediate_size\": 2048,"
     " \"n_routed_experts\": 256, \"n_shared_experts\": 1, \"num_experts_per_tok\": 8,"
     " \"n_group\": 8, \"topk_group\": 4, \"norm_topk_prob\": true,"
     " \"routed_scaling_factor\": 2.5, \"scoring_func\": \"sigmoid\","
     " \"topk_method\": \"noaux_tc\", \"first_k_dense_replace\": 3, \"moe_layer_freq\": 1,"
     " \"num_hidden_layers\": 61, \"num_attention_heads\": 128, \"num_key_value_heads\": 128,"
     " \"q_lora_rank\": 1536, \"kv_lora_rank\": 512, \"qk_rope_head_dim\": 64,"
     " \"qk_nope_head_dim\": 128, \"v_head_dim\": 128, \"head_dim\": 64,"
     " \"vocab_size\": 129280, \"max_position_embeddings\": 163840, \"rms_norm_eps\": 1e-06,"
     " \"rope_theta\": 10000, \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1,"
     " \"factor\": 40, \"mscale\": 1.0, \"mscale_all_dim\": 1.0,"
     " \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"},"
     " \"bos_token_id\": 0, \"eos_token_id\": 1, \"hidden_act\": \"silu\","
     " \"tie_word_embeddings\": false, \"dtype\": \"bfloat16\"}"},
    /* DeepSeek-V2-Lite (16B, 2.4B active): q_proj, softmax greedy routing */
    {"deepseek-v2-lite",
     "{\"architectures\": [\"DeepseekV2ForCausalLM\"], \"model_type\": \"deepseek_v2\","
     " \"hidden_size\": 2048, \"intermediate_size\": 10944, \"moe_intermediate_size\": 1408,"
     " \"n_routed_experts\": 64, \"n_shared_experts\": 2, \"num_experts_per_tok\": 6,"
     " \"n_group\": 1, \"topk_group\": 1, \"topk_method\": \"greedy\","
     " \"norm_topk_prob\": false, \"routed_scaling_factor\": 1.0,"
     " \"scoring_func\": \"softmax\", \"first_k_dense_replace\": 1, \"moe_layer_freq\": 1,"
     " \"num_hidden_layers\": 27, \"num_attention_heads\": 16, \"num_key_value_heads\": 16,"
     " \"q_lora_rank\": null, \"kv_lora_rank\": 512, \"qk_rope_head_dim\": 64,"
     " \"qk_nope_head_dim\": 128, \"v_head_dim\": 128, \"head_dim\": 64,"
     " \"vocab_size\": 102400, \"max_position_embeddings\": 163840, \"rms_norm_eps\": 1e-06,"
     " \"rope_theta\": 10000, \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1,"
     " \"factor\": 40, \"mscale\": 0.707, \"mscale_all_dim\": 0.707,"
     " \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"},"
     " \"bos_token_id\": 100000, \"eos_token_id\": 100001, \"hidden_act\": \"silu\","
     " \"tie_word_embeddings\": false, \"dtype\": \"bfloat16\"}"},
    /* Gemma-3-4B (the text part of google/gemma-3-4b-it): five sliding
     * layers (window 1024, local base 10000) to one global (base 1e6,
     * linear scaling 8), GeGLU, four norms a layer, tied embeddings */
    {"gemma-3-4b",
     "{\"architectures\": [\"Gemma3ForCausalLM\"], \"model_type\": \"gemma3_text\","
     " \"hidden_size\": 2560, \"intermediate_size\": 10240, \"num_hidden_layers\": 34,"
     " \"num_attention_heads\": 8, \"num_key_value_heads\": 4, \"head_dim\": 256,"
     " \"query_pre_attn_scalar\": 256, \"sliding_window\": 1024,"
     " \"sliding_window_pattern\": 6, \"rope_theta\": 1000000.0,"
     " \"rope_local_base_freq\": 10000.0,"
     " \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"},"
     " \"final_logit_softcapping\": null, \"attn_logit_softcapping\": null,"
     " \"vocab_size\": 262208, \"max_position_embeddings\": 131072, \"rms_norm_eps\": 1e-06,"
     " \"bos_token_id\": 2, \"eos_token_id\": [1, 106],"
     " \"hidden_activation\": \"gelu_pytorch_tanh\", \"tie_word_embeddings\": true,"
     " \"dtype\": \"bfloat16\"}"},
    /* gpt-oss-20b (21B, 3.6B active): sliding (128) and full layers
     * alternating, attention sinks, 32 biased experts (top 4) with the clamped
     * SwiGLU, YaRN */
    {"gpt-oss-20b",
     "{\"architectures\": [\"GptOssForCausalLM\"], \"model_type\": \"gpt_oss\","
     " \"hidden_size\": 2880, \"intermediate_size\": 2880, \"num_hidden_layers\": 24,"
     " \"num_attention_heads\": 64, \"num_key_value_heads\": 8, \"head_dim\": 64,"
     " \"num_local_experts\": 32, \"num_experts_per_tok\": 4, \"experts_per_token\": 4,"
     " \"swiglu_limit\": 7.0, \"attention_bias\": true, \"sliding_window\": 128,"
     " \"layer_types\": [" GPT_OSS_LAYER_TYPES "],"
     " \"vocab_size\": 201088, \"max_position_embeddings\": 131072, \"rms_norm_eps\": 1e-05,"
     " \"rope_theta\": 150000, \"rope_scaling\": {\"beta_fast\": 32.0, \"beta_slow\": 1.0,"
     " \"factor\": 32.0, \"original_max_position_embeddings\": 4096,"
     " \"rope_type\": \"yarn\", \"truncate\": false}, \"initial_context_length\": 4096,"
     " \"eos_token_id\": 200002, \"pad_token_id\": 199999, \"hidden_act\": \"silu\","
     " \"tie_word_embeddings\": false, \"dtype\": \"bfloat16\"}"},
};
#define NPRESETS (sizeof(presets) / sizeof(presets[0]))

/* One fp4 / fp8_e4m3 quantizer spec pair as Quark 0.13 writes it. */
#define QSPEC(DYN)                                                 \
    "{\"block_size\": null, \"ch_axis\": -1, \"dtype\": \"fp4\","                        \
    " \"enable_buffer_reuse\": false, \"group_size\": 16, \"is_dynamic\": " DYN ","      \
    " \"is_scale_quant\": false, \"max_input_numel\": 4194304,"                          \
    " \"mx_element_dtype\": null, \"observer_cls\": \"PerBlockMXObserver\","             \
    " \"qscheme\": \"per_group\", \"round_method\": \"half_even\","                      \
    " \"scale_calculation_mode\": null, \"scale_format\": \"float32\","                  \
    " \"scale_type\": \"float32\", \"symmetric\": null, \"zero_point_type\": \"int32\"},"  \
    "{\"block_size\": null, \"ch_axis\": null, \"dtype\": \"fp8_e4m3\","                 \
    " \"enable_buffer_reuse\": false, \"group_size\": null, \"is_dynamic\": false,"      \
    " \"is_scale_quant\": true, \"max_input_numel\": 4194304,"                           \
    " \"mx_element_dtype\": null, \"observer_cls\": \"PerTensorMinMaxObserver\","        \
    " \"qscheme\": \"per_tensor\", \"round_method\": \"half_even\","                     \
    " \"scale_calculation_mode\": null, \"scale_format\": null,"                         \
    " \"scale_type\": \"float32\", \"symmetric\": true, \"zero_point_type\": \"int32\"}"

static const char qconfig_json[] =
    "{\"algo_config\": null, \"exclude\": [],"
    " \"export\": {\"kv_cache_group\": [], \"min_kv_scale\": 0.0, \"pack_method\": \"reorder\","
    " \"weight_format\": \"real_quantized\", \"weight_merge_groups\": null},"
    " \"global_quant_config\": {\"bias\": null,"
    " \"input_tensors\": [" QSPEC("true") "],"
    " \"output_tensors\": null, \"target_device\": null,"
    " \"weight\": [" QSPEC("false") "]},"
    " \"kv_cache_post_rope\": false, \"kv_cache_quant_config\": {},"
    " \"layer_quant_config\": {}, \"layer_type_quant_config\": {},"
    " \"quant_method\": \"quark\", \"quant_mode\": \"eager_mode\","
    " \"softmax_quant_spec\": null, \"version\": \"0.13\"}";

enum { T_LINEAR, T_BF16_RANDOM, T_BF16_ONES, T_BF16_ZEROS, T_F32_SCALAR };

/* One tensor of the plan. */
typedef struct {
    char *name;
    int kind;
    nvfp4_dtype dtype;
    int ndim;
    int64_t shape[2];
    float sigma;                  /* T_BF16_RANDOM; T_LINEAR: of the float weight */
    float value;                  /* T_F32_SCALAR */
    uint64_t bytes;
    int shard;
} plan_t;

typedef struct {
    plan_t *t;
    size_t n, cap;
    int w4a4;
    uint64_t seed;
    json_t *exclude;
} plan;

static int add(plan *p, int kind, nvfp4_dtype dt, int ndim, int64_t d0, int64_t d1, float sigma,
               float value, const char *fmt, ...) __attribute__((format(printf, 9, 10)));

static int add(plan *p, int kind, nvfp4_dtype dt, int ndim, int64_t d0, int64_t d1, float sigma,
               float value, const char *fmt, ...)
{
    va_list ap;
    plan_t *e;
    char buf[512];

    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 256;
        plan_t *t = realloc(p->t, cap * sizeof(*t));
        if (!t)
            return -1;
        p->t = t;
        p->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    e = &p->t[p->n];
    memset(e, 0, sizeof(*e));
    if (!(e->name = strdup(buf)))
        return -1;
    e->kind = kind;
    e->dtype = dt;
    e->ndim = ndim;
    e->shape[0] = d0;
    e->shape[1] = d1;
    e->sigma = sigma;
    e->value = value;
    e->bytes = nvfp4_dtype_size(dt);
    for (int i = 0; i < ndim; i++)
        e->bytes *= (uint64_t)e->shape[i];
    p->n++;
    return 0;
}

/* A quantized Linear [n, k]: its four (W4A16: three) tensors.  AMAX_IN is the
 * calibration max of its input (W4A4). */
static int add_linear(plan *p, const char *prefix, int64_t n, int64_t k, double amax_in)
{
    float global = nvfp4_quant_global_scale(BOUND_K * SIGMA);

    if (add(p, T_LINEAR, NVFP4_DTYPE_U8, 2, n, k / 2, SIGMA, global, "%s.weight", prefix) ||
        add(p, -1, NVFP4_DTYPE_F8_E4M3, 2, n, k / 16, 0, 0, "%s.weight_scale", prefix) ||
        add(p, T_F32_SCALAR, NVFP4_DTYPE_F32, 0, 0, 0, 0, global, "%s.weight_scale_2", prefix))
        return -1;
    if (p->w4a4)
        return add(p, T_F32_SCALAR, NVFP4_DTYPE_F32, 0, 0, 0, 0,
                   nvfp4_quant_global_scale((float)amax_in), "%s.input_scale_2", prefix);
    return 0;
}

typedef struct {
    const char *arch;
    int64_t hidden, inter, layers, heads, kv, hd, vocab, experts, moe_inter;
    int64_t shared_inter;         /* Qwen2-MoE shared expert; DeepSeek's shared experts */
    int tie, qkv_bias, qk_norm, moe; /* moe: 0 dense, 1 mixtral, 2 qwen3-moe, 3 qwen2-moe,
                                        4 deepseek-v3 or -v2 */
    int ds_bias;                  /* DeepSeek-V3's e_score_correction_bias (not V2) */
    int gemma;                    /* Gemma 3: four norms a layer, weights as 1 + w */
    int gptoss;                   /* gpt-oss: biases everywhere, sinks, router.bias */
    /* DeepSeek's multi-head latent attention; its first dense layers */
    int64_t q_lora, kv_lora, rope, nope, vd, first_dense;
} shape_t;

/* SRC names the configuration in messages: the --like file or the preset. */
static int get_int(const char *src, json_t *cfg, const char *key, int64_t def, int64_t *out)
{
    json_t *v = json_object_get(cfg, key);

    if (!v || json_is_null(v)) {
        if (def < 0)
            return cli_fail("%s: required key \"%s\" is missing", src, key);
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) <= 0)
        return cli_fail("%s: \"%s\": expected a positive integer", src, key);
    *out = json_integer_value(v);
    return 0;
}

static int read_shape(const char *src, json_t *cfg, shape_t *s)
{
    static const char *const dense[] = {"LlamaForCausalLM", "MistralForCausalLM",
                                        "Qwen2ForCausalLM", "Qwen3ForCausalLM"};
    json_t *a = json_object_get(cfg, "architectures"), *v;

    memset(s, 0, sizeof(*s));
    s->arch = json_string_value(json_array_get(a, 0));
    if (!s->arch)
        return cli_fail("%s: \"architectures\": expected a list of one string", src);
    for (size_t i = 0; i < sizeof(dense) / sizeof(dense[0]); i++)
        if (!strcmp(s->arch, dense[i]))
            s->moe = -1;
    if (!strcmp(s->arch, "MixtralForCausalLM"))
        s->moe = 1;
    else if (!strcmp(s->arch, "Qwen3MoeForCausalLM"))
        s->moe = 2;
    else if (!strcmp(s->arch, "Qwen2MoeForCausalLM"))
        s->moe = 3;
    else if (!strcmp(s->arch, "DeepseekV3ForCausalLM") ||
             !strcmp(s->arch, "DeepseekV2ForCausalLM"))
        s->moe = 4;
    else if (!strcmp(s->arch, "GptOssForCausalLM"))
        s->moe = 1, s->gptoss = 1;
    else if (!strcmp(s->arch, "Gemma3ForCausalLM"))
        s->moe = 0, s->gemma = 1;
    else if (s->moe == -1)
        s->moe = 0;
    else
        return cli_fail("%s: architecture %s is not one synth writes (Llama, Mistral, "
                        "Qwen2, Qwen3, Gemma 3, Mixtral, Qwen2-MoE, Qwen3-MoE, gpt-oss, "
                        "DeepSeek-V2/V3)", src, s->arch);
    s->ds_bias = !strcmp(s->arch, "DeepseekV3ForCausalLM");
    s->qkv_bias = !strcmp(s->arch, "Qwen2ForCausalLM") || s->moe == 3 || s->gptoss;
    s->qk_norm = !strcmp(s->arch, "Qwen3ForCausalLM") || s->moe == 2 || s->gemma;
    if (get_int(src, cfg, "hidden_size", -1, &s->hidden) ||
        get_int(src, cfg, "intermediate_size", -1, &s->inter) ||
        get_int(src, cfg, "num_hidden_layers", -1, &s->layers) ||
        get_int(src, cfg, "num_attention_heads", -1, &s->heads) ||
        get_int(src, cfg, "num_key_value_heads", s->heads, &s->kv) ||
        get_int(src, cfg, "head_dim", s->hidden / s->heads, &s->hd) ||
        get_int(src, cfg, "vocab_size", -1, &s->vocab))
        return CLI_INVALID;
    v = json_object_get(cfg, "tie_word_embeddings");
    s->tie = v && json_is_true(v);
    if (s->moe == 1 && (get_int(src, cfg, "num_local_experts", -1, &s->experts) ||
                        get_int(src, cfg, "intermediate_size", -1, &s->moe_inter)))
        return CLI_INVALID;
    if (s->moe == 4) {
        int64_t nshared = 0;
        json_t *ql = json_object_get(cfg, "q_lora_rank"), *fd, *ns;
        if (get_int(src, cfg, "n_routed_experts", -1, &s->experts) ||
            get_int(src, cfg, "moe_intermediate_size", -1, &s->moe_inter) ||
            get_int(src, cfg, "kv_lora_rank", -1, &s->kv_lora) ||
            get_int(src, cfg, "qk_rope_head_dim", -1, &s->rope) ||
            get_int(src, cfg, "qk_nope_head_dim", -1, &s->nope) ||
            get_int(src, cfg, "v_head_dim", -1, &s->vd) ||
            (ql && !json_is_null(ql) && get_int(src, cfg, "q_lora_rank", -1, &s->q_lora)))
            return CLI_INVALID;
        fd = json_object_get(cfg, "first_k_dense_replace");
        if (fd && (!json_is_integer(fd) || json_integer_value(fd) < 0))
            return cli_fail("%s: \"first_k_dense_replace\": expected an integer >= 0", src);
        s->first_dense = fd ? json_integer_value(fd) : 0;
        ns = json_object_get(cfg, "n_shared_experts");
        if (ns && !json_is_null(ns) && get_int(src, cfg, "n_shared_experts", -1, &nshared))
            return CLI_INVALID;
        s->shared_inter = nshared * s->moe_inter;
        /* (its attention projections are BF16: no multiple-of-32 rule) */
        s->hd = 32;
        s->kv = s->heads;
    }
    if (s->moe >= 2 && s->moe != 4) {
        int64_t step;
        /* transformers 5 spells num_experts num_local_experts */
        const char *ne = json_object_get(cfg, "num_experts") ? "num_experts" : "num_local_experts";
        if (get_int(src, cfg, ne, -1, &s->experts) ||
            get_int(src, cfg, "moe_intermediate_size", -1, &s->moe_inter) ||
            get_int(src, cfg, "decoder_sparse_step", 1, &step) ||
            (s->moe == 3 &&
             get_int(src, cfg, "shared_expert_intermediate_size", -1, &s->shared_inter)))
            return CLI_INVALID;
        if (step != 1 || json_array_size(json_object_get(cfg, "mlp_only_layers")))
            return cli_fail("%s: dense layers inside a Qwen-MoE model "
                            "(decoder_sparse_step, mlp_only_layers) are not written by synth", src);
    }
    if (s->hidden % 32 || s->inter % 32 || (s->heads * s->hd) % 32 || (s->kv * s->hd) % 32 ||
        (s->moe && s->moe_inter % 32) || s->shared_inter % 32)
        return cli_fail("%s: every Linear dimension must be a multiple of 32", src);
    return 0;
}

/* A BF16 Linear that Quark's deepseek_v3 template leaves unquantized
 * (self_attn): its weight, and its name in the exclusions. */
static int add_excluded(plan *p, const char *prefix, int64_t n, int64_t k)
{
    if (add(p, T_BF16_RANDOM, NVFP4_DTYPE_BF16, 2, n, k, SIGMA, 0, "%s.weight", prefix))
        return -1;
    return json_array_append_new(p->exclude, json_string(prefix));
}

/* DeepSeek-V3's layers: multi-head latent attention (BF16), a dense MLP in
 * the first first_k_dense_replace layers, then a router with its selection
 * bias, the routed experts and the shared experts (NVFP4). */
static int make_deepseek(plan *p, const shape_t *s)
{
    const int64_t H = s->hidden, nh = s->heads, qk = s->nope + s->rope;
    const double wsd = SIGMA * sqrt((double)H);
    char pre[256], base[192];

    for (int64_t l = 0; l < s->layers; l++) {
        const int moe = l >= s->first_dense;

#define L_(fmt) "model.layers.%" PRId64 "." fmt
#define PRE(fmt, ...) snprintf(pre, sizeof(pre), L_(fmt), l, ##__VA_ARGS__)
        if (add(p, T_BF16_ONES, NVFP4_DTYPE_BF16, 1, H, 0, 0, 0, L_("input_layernorm.weight"),
                l))
            return -1;
        if (s->q_lora) {
            PRE("self_attn.q_a_proj");
            if (add_excluded(p, pre, s->q_lora, H) ||
                add(p, T_BF16_ONES, NVFP4_DTYPE_BF16, 1, s->q_lora, 0, 0, 0,
                    L_("self_attn.q_a_layernorm.weight"), l))
                return -1;
            PRE("self_attn.q_b_proj");
            if (add_excluded(p, pre, nh * qk, s->q_lora))
                return -1;
        } else {
            PRE("self_attn.q_proj");
            if (add_excluded(p, pre, nh * qk, H))
                return -1;
        }
        PRE("self_attn.kv_a_proj_with_mqa");
        if (add_excluded(p, pre, s->kv_lora + s->rope, H) ||
            add(p, T_BF16_ONES, NVFP4_DTYPE_BF16, 1, s->kv_lora, 0, 0, 0,
                L_("self_attn.kv_a_layernorm.weight"), l))
            return -1;
        PRE("self_attn.kv_b_proj");
        if (add_excluded(p, pre, nh * (s->nope + s->vd), s->kv_lora))
            return -1;
        PRE("self_attn.o_proj");
        if (add_excluded(p, pre, H, nh * s->vd) ||
            add(p, T_BF16_ONES, NVFP4_DTYPE_BF16, 1, H, 0, 0, 0,
                L_("post_attention_layernorm.weight"), l))
            return -1;
        if (moe) {
            /* BF16 but not listed in exclude: transformers' router is no
             * nn.Linear, so Quark's export leaves it out of the list */
            if (add(p, T_BF16_RANDOM, NVFP4_DTYPE_BF16, 2, s->experts, H, SIGMA, 0,
                    L_("mlp.gate.weight"), l) ||
                (s->ds_bias && add(p, T_BF16_RANDOM, NVFP4_DTYPE_BF16, 1, s->experts, 0, SIGMA,
                                   0, L_("mlp.gate.e_score_correction_bias"), l)))
                return -1;
        }
        for (int64_t e = moe ? -1 : 0; e < (moe ? s->experts : 1); e++) {
            /* a MoE layer: its shared experts (e = -1), then each routed one */
            int64_t I = !moe ? s->inter : e < 0 ? s->shared_inter : s->moe_inter;
            if (moe && e < 0 && !s->shared_inter)
                continue;
            if (!moe)
                snprintf(base, sizeof(base), L_("mlp"), l);
            else if (e < 0)
                snprintf(base, sizeof(base), L_("mlp.shared_experts"), l);
            else
                snprintf(base, sizeof(base), L_("mlp.experts.%" PRId64), l, e);
            snprintf(pre, sizeof(pre), "%s.down_proj", base);
            if (add_linear(p, pre, H, I, ACT_AMAX * wsd * wsd))
                return -1;
            snprintf(pre, sizeof(pre), "%s.gate_proj", base);
            if (add_linear(p, pre, I, H, ACT_AMAX))
                return -1;
            snprintf(pre, sizeof(pre), "%s.up_proj", base);
            if (add_linear(p, pre, I, H, ACT_AMAX))
                return -1;
        }
#undef PRE
#undef L_
    }
    return 0;
}

static int make_plan(plan *p, const shape_t *s)
{
    const int64_t H = s->hidden, q = s->heads * s->hd, kvd = s->kv * s->hd;
    const double wsd = SIGMA * sqrt((double)H); /* std of a projection of unit inputs */
    const int nk = s->gemma ? T_BF16_ZEROS : T_BF16_ONES; /* a norm of scale 1 */
    char pre[256];

#define A(x)                                                                             \
    do {                                                                                 \
        if (x)                                                                           \
            return cli_fail("out of memory");                                            \
    } while (0)
    A(add(p, T_BF16_RANDOM, NVFP4_DTYPE_BF16, 2, s->vocab, H, 1.0f, 0,
          "model.embed_tokens.weight"));
    if (s->moe == 4) {
        A(make_deepseek(p, s));
        goto tail;
    }
    for (int64_t l = 0; l < s->layers; l++) {
        const char *proj[3] = {"q_proj", "k_proj", "v_proj"};
        const int64_t out[3] = {q, kvd, kvd};

        A(add(p, nk, NVFP4_DTYPE_BF16, 1, H, 0, 0, 0,
              "model.layers.%" PRId64 ".input_layernorm.weight", l));
        for (int i = 0; i < 3; i++) {
            snprintf(pre, sizeof(pre), "model.layers.%" PRId64 ".self_attn.%s", l, proj[i]);
            A(add_linear(p, pre, out[i], H, ACT_AMAX));
            if (s->qkv_bias)
                A(add(p, T_BF16_RANDOM, NVFP4_DTYPE_BF16, 1, out[i], 0, SIGMA, 0, "%s.bias",
                      pre));
        }
        if (s->qk_norm) {
            A(add(p, nk, NVFP4_DTYPE_BF16, 1, s->hd, 0, 0, 0,
                  "model.layers.%" PRId64 ".self_attn.q_norm.weight", l));
            A(add(p, nk, NVFP4_DTYPE_BF16, 1, s->hd, 0, 0, 0,
                  "model.layers.%" PRId64 ".self_attn.k_norm.weight", l));
        }
        snprintf(pre, sizeof(pre), "model.layers.%" PRId64 ".self_attn.o_proj", l);
        A(add_linear(p, pre, H, q, ACT_AMAX * wsd));
        if (s->gptoss) {
            A(add(p, T_BF16_RANDOM, NVFP4_DTYPE_BF16, 1, H, 0, SIGMA, 0, "%s.bias", pre));
            A(add(p, T_BF16_RANDOM, NVFP4_DTYPE_BF16, 1, s->heads, 0, 1.0f, 0,
                  "model.layers.%" PRId64 ".self_attn.sinks", l));
        }
        A(add(p, nk, NVFP4_DTYPE_BF16, 1, H, 0, 0, 0,
              "model.layers.%" PRId64 ".post_attention_layernorm.weight", l));
        if (s->gemma)
            A(add(p, nk, NVFP4_DTYPE_BF16, 1, H, 0, 0, 0,
                  "model.layers.%" PRId64 ".pre_feedforward_layernorm.weight", l));
        if (s->gptoss) { /* a biased router, each expert's fused gate_up_proj */
            A(add(p, T_BF16_RANDOM, NVFP4_DTYPE_BF16, 2, s->experts, H, SIGMA, 0,
                  "model.layers.%" PRId64 ".mlp.router.weight", l));
            A(add(p, T_BF16_RANDOM, NVFP4_DTYPE_BF16, 1, s->experts, 0, SIGMA, 0,
                  "model.layers.%" PRId64 ".mlp.router.bias", l));
            snprintf(pre, sizeof(pre), "model.layers.%" PRId64 ".mlp.router", l);
            A(json_array_append_new(p->exclude, json_string(pre)));
            for (int64_t e = 0; e < s->experts; e++) {
                snprintf(pre, sizeof(pre), "model.layers.%" PRId64 ".mlp.experts.%" PRId64
                         ".down_proj", l, e);
                A(add_linear(p, pre, H, s->moe_inter, ACT_AMAX * wsd * wsd));
                A(add(p, T_BF16_RANDOM, NVFP4_DTYPE_BF16, 1, H, 0, SIGMA, 0, "%s.bias", pre));
                snprintf(pre, sizeof(pre), "model.layers.%" PRId64 ".mlp.experts.%" PRId64
                         ".gate_up_proj", l, e);
                A(add_linear(p, pre, 2 * s->moe_inter, H, ACT_AMAX));
                A(add(p, T_BF16_RANDOM, NVFP4_DTYPE_BF16, 1, 2 * s->moe_inter, 0, SIGMA, 0,
                      "%s.bias", pre));
            }
            continue;
        }
        if (s->moe) {
            A(add(p, T_BF16_RANDOM, NVFP4_DTYPE_BF16, 2, s->experts, H, SIGMA, 0,
                  "model.layers.%" PRId64 ".mlp.gate.weight", l));
            if (s->moe == 2) {
                snprintf(pre, sizeof(pre), "model.layers.%" PRId64 ".mlp.gate", l);
                A(json_array_append_new(p->exclude, json_string(pre)));
            }
        }
        for (int64_t e = 0; e < (s->moe ? s->experts : 1); e++) {
            int64_t I = s->moe ? s->moe_inter : s->inter;
            char base[192];

            if (s->moe)
                snprintf(base, sizeof(base), "model.layers.%" PRId64 ".mlp.experts.%" PRId64,
                         l, e);
            else
                snprintf(base, sizeof(base), "model.layers.%" PRId64 ".mlp", l);
            snprintf(pre, sizeof(pre), "%s.down_proj", base);
            A(add_linear(p, pre, H, I, ACT_AMAX * wsd * wsd));
            snprintf(pre, sizeof(pre), "%s.gate_proj", base);
            A(add_linear(p, pre, I, H, ACT_AMAX));
            snprintf(pre, sizeof(pre), "%s.up_proj", base);
            A(add_linear(p, pre, I, H, ACT_AMAX));
        }
        if (s->gemma)
            A(add(p, nk, NVFP4_DTYPE_BF16, 1, H, 0, 0, 0,
                  "model.layers.%" PRId64 ".post_feedforward_layernorm.weight", l));
        if (s->moe == 3) { /* Qwen2-MoE: a shared expert behind a sigmoid gate */
            const char *part[3] = {"down_proj", "gate_proj", "up_proj"};
            for (int i = 0; i < 3; i++) {
                snprintf(pre, sizeof(pre), "model.layers.%" PRId64 ".mlp.shared_expert.%s", l,
                         part[i]);
                A(i ? add_linear(p, pre, s->shared_inter, H, ACT_AMAX)
                    : add_linear(p, pre, H, s->shared_inter, ACT_AMAX * wsd * wsd));
            }
            A(add(p, T_BF16_RANDOM, NVFP4_DTYPE_BF16, 2, 1, H, SIGMA, 0,
                  "model.layers.%" PRId64 ".mlp.shared_expert_gate.weight", l));
            snprintf(pre, sizeof(pre), "model.layers.%" PRId64 ".mlp.shared_expert_gate", l);
            A(json_array_append_new(p->exclude, json_string(pre)));
        }
    }
tail:
    A(add(p, nk, NVFP4_DTYPE_BF16, 1, H, 0, 0, 0, "model.norm.weight"));
    if (!s->tie)
        A(add(p, T_BF16_RANDOM, NVFP4_DTYPE_BF16, 2, s->vocab, H, SIGMA, 0, "lm_head.weight"));
    A(json_array_append_new(p->exclude, json_string("lm_head")));
#undef A
    return 0;
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* K values ~ N(0, sigma^2) (Irwin-Hall of four uniforms), bounded by
 * BOUND_K * sigma. */
static void random_row(uint64_t seed, float sigma, float *out, int64_t k)
{
    const float unit = 1.0f / 65536.0f, scale = sigma * 1.7320508f; /* sqrt(3) */
    uint64_t st = cli_splitmix64(seed);

    for (int64_t i = 0; i < k; i++) {
        uint64_t r = cli_splitmix64(st += 0x9e3779b97f4a7c15ull);
        float s = 0;
        for (int j = 0; j < 4; j++)
            s += (float)((r >> (16 * j)) & 0xffff) * unit - 0.5f;
        out[i] = s * scale;
    }
}

#define CHUNK_ROWS 256

/* Write tensor T (and, for a Linear, its weight_scale declared right after). */
static int write_tensor(nvfp4_safetensors_writer *w, const plan *p, const plan_t *t)
{
    nvfp4_error err;
    uint64_t seed = p->seed ^ name_hash(t->name);
    int rc = 0;

    if (t->kind == T_F32_SCALAR) {
        if (nvfp4_safetensors_writer_write(w, &t->value, 4, &err))
            return cli_fail_error(&err);
        return 0;
    }
    if (t->kind == T_BF16_ONES || t->kind == T_BF16_ZEROS || t->kind == T_BF16_RANDOM) {
        int64_t rows = t->ndim == 2 ? t->shape[0] : 1, k = t->ndim == 2 ? t->shape[1] : t->shape[0];
        uint16_t *buf = malloc((size_t)k * CHUNK_ROWS * 2);
        float *f = malloc((size_t)k * CHUNK_ROWS * sizeof(float));

        if (!buf || !f) {
            free(buf);
            free(f);
            return cli_fail("out of memory");
        }
        for (int64_t r0 = 0; r0 < rows && !rc; r0 += CHUNK_ROWS) {
            int64_t nr = rows - r0 < CHUNK_ROWS ? rows - r0 : CHUNK_ROWS;
#pragma omp parallel for schedule(static)
            for (int64_t r = 0; r < nr; r++) {
                if (t->kind == T_BF16_RANDOM)
                    random_row(seed + (uint64_t)(r0 + r), t->sigma, f + r * k, k);
                for (int64_t i = 0; i < k; i++)
                    buf[r * k + i] = t->kind == T_BF16_ONES    ? 0x3f80
                                     : t->kind == T_BF16_ZEROS ? 0x0000
                                                               : nvfp4_bf16_encode(f[r * k + i]);
            }
            if (nvfp4_safetensors_writer_write(w, buf, (size_t)(nr * k * 2), &err))
                rc = cli_fail_error(&err);
        }
        free(buf);
        free(f);
        return rc;
    }
    /* T_LINEAR: the packed weight, then (next in the plan) its block scales,
     * quantized together a chunk of rows at a time. */
    {
        const int64_t n = t->shape[0], k = t->shape[1] * 2;
        float *f = malloc((size_t)k * CHUNK_ROWS * sizeof(float));
        uint8_t *packed = malloc((size_t)n * (size_t)(k / 2));
        uint8_t *scales = malloc((size_t)n * (size_t)(k / 16));

        if (!f || !packed || !scales) {
            rc = cli_fail("%s: out of memory for [%" PRId64 ", %" PRId64 "]", t->name, n, k);
            goto lin_out;
        }
        for (int64_t r0 = 0; r0 < n; r0 += CHUNK_ROWS) {
            int64_t nr = n - r0 < CHUNK_ROWS ? n - r0 : CHUNK_ROWS;
#pragma omp parallel for schedule(static)
            for (int64_t r = 0; r < nr; r++) {
                random_row(seed + (uint64_t)(r0 + r), t->sigma, f + r * k, k);
                nvfp4_quant_weight(f + r * k, 1, (size_t)k, t->value,
                                   packed + (size_t)(r0 + r) * (size_t)(k / 2),
                                   scales + (size_t)(r0 + r) * (size_t)(k / 16));
            }
        }
        if (nvfp4_safetensors_writer_write(w, packed, (size_t)n * (size_t)(k / 2), &err) ||
            nvfp4_safetensors_writer_write(w, scales, (size_t)n * (size_t)(k / 16), &err))
            rc = cli_fail_error(&err);
    lin_out:
        free(f);
        free(packed);
        free(scales);
        return rc;
    }
}

/* mkdir -p DIR: each missing directory on the way made in turn.  0, or -1
 * with errno set and *FAILED the prefix that could not be made. */
static int mkdir_parents(const char *dir, char *failed, size_t cap)
{
    size_t len = strlen(dir);

    if (len >= cap) {
        errno = ENAMETOOLONG;
        snprintf(failed, cap, "%s", dir);
        return -1;
    }
    memcpy(failed, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        struct stat st;

        if (failed[i] != '/' && failed[i] != '\0')
            continue;
        failed[i] = '\0';
        if (mkdir(failed, 0777) && errno != EEXIST)
            return -1;
        /* something that exists but is not a directory: say so here, not
         * at the first file written into it */
        if (stat(failed, &st) == 0 && !S_ISDIR(st.st_mode)) {
            errno = ENOTDIR;
            return -1;
        }
        if (i < len)
            failed[i] = '/';
    }
    return 0;
}

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    double v = strtod(s, &end);
    uint64_t mul = 1;

    if (end == s || v <= 0)
        return -1;
    if (*end == 'K' || *end == 'k')
        mul = 1000, end++;
    else if (*end == 'M')
        mul = 1000000, end++;
    else if (*end == 'G')
        mul = 1000000000, end++;
    if (*end == 'B')
        end++;
    if (*end)
        return -1;
    *out = (uint64_t)(v * (double)mul);
    return 0;
}

static void help(FILE *out)
{
    fprintf(out,
            "Usage: nvfp4 synth (--preset NAME | --like CONFIG) --out DIR [OPTIONS]\n"
            "Write a checkpoint in amd-quark's NVFP4 export format (config.json with its\n"
            "quantization_config, safetensors shards and their index) whose weights are\n"
            "random: float weights ~ N(0, 0.02^2) quantized by the project's own Quark\n"
            "quantizer.  For benchmarks at the shapes of real models; it has no tokenizer\n"
            "(run it with `nvfp4 bench`).  Same seed, same bytes.\n\n"
            "  --preset NAME      llama3-8b, smollm2-135m, qwen3-30b-a3b, deepseek-v3\n"
            "                     (671B: give --layers), deepseek-v2-lite, gemma-3-4b\n"
            "                     or gpt-oss-20b\n"
            "  --like CONFIG      take the architecture from a Hugging Face config.json\n"
            "                     (Llama, Mistral, Qwen2, Qwen3, Gemma 3, Mixtral,\n"
            "                     Qwen2-MoE, Qwen3-MoE, gpt-oss, DeepSeek-V2, DeepSeek-V3)\n"
            "  -o, --out DIR      output directory (created with its parents where missing;\n"
            "                     files in it are replaced)\n"
            "  --scheme S         w4a4 (default: NVFP4 weights and activations) or w4a16\n"
            "  --layers N         keep only the first N decoder layers (1 to 4096)\n"
            "  --seed S           random seed (default 0)\n"
            "  --shard-size SIZE  largest shard, e.g. 5GB (default), 500MB\n"
            "  -h, --help         show this help\n");
}

static int run(int argc, char **argv)
{
    enum { OPT_PRESET = 1, OPT_LIKE, OPT_SCHEME, OPT_LAYERS, OPT_SEED, OPT_SHARD };
    static const struct option opts[] = {{"preset", required_argument, NULL, OPT_PRESET},
                                         {"like", required_argument, NULL, OPT_LIKE},
                                         {"out", required_argument, NULL, 'o'},
                                         {"scheme", required_argument, NULL, OPT_SCHEME},
                                         {"layers", required_argument, NULL, OPT_LAYERS},
                                         {"seed", required_argument, NULL, OPT_SEED},
                                         {"shard-size", required_argument, NULL, OPT_SHARD},
                                         {NULL, 0, NULL, 0}};
    const char *preset_name = NULL, *like = NULL, *outdir = NULL, *scheme = "w4a4";
    long layers = 0;
    const char *msg;
    uint64_t shard_size = 5000000000ull, total = 0;
    plan p = {0};
    shape_t s;
    json_t *cfg = NULL, *qc = NULL, *index = NULL, *wmap = NULL;
    json_error_t jerr;
    nvfp4_error err;
    nvfp4_safetensors_writer *w = NULL;
    char path[4096], *end;
    int c, rc = CLI_INVALID, nshards = 1;
    int tty = isatty(2);

    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
        switch (c) {
        case OPT_PRESET: preset_name = optarg; break;
        case OPT_LIKE: like = optarg; break;
        case 'o': outdir = optarg; break;
        case OPT_SCHEME: scheme = optarg; break;
        case OPT_LAYERS:
            if ((msg = cli_int_arg("--layers", optarg, 1, 4096, &layers)))
                return cli_usage(&cli_synth, "%s", msg);
            break;
        case OPT_SEED:
            errno = 0;
            p.seed = strtoull(optarg, &end, 0);
            if (errno || *end || !*optarg)
                return cli_usage(&cli_synth, "--seed: expected an integer, got '%s'", optarg);
            break;
        case OPT_SHARD:
            if (parse_size(optarg, &shard_size))
                return cli_usage(&cli_synth, "--shard-size: expected a size such as 5GB, "
                                 "got '%s'", optarg);
            break;
        default:
            if (optopt)
                return cli_usage(&cli_synth, "option '%s' needs an argument", argv[optind - 1]);
            return cli_usage(&cli_synth, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind != argc)
        return cli_usage(&cli_synth, "unexpected argument '%s'", argv[optind]);
    if (!!preset_name == !!like)
        return cli_usage(&cli_synth, "give exactly one of --preset and --like");
    if (!outdir)
        return cli_usage(&cli_synth, "missing --out DIR");
    if (strcmp(scheme, "w4a4") && strcmp(scheme, "w4a16"))
        return cli_usage(&cli_synth, "--scheme: expected w4a4 or w4a16, got '%s'", scheme);
    p.w4a4 = !strcmp(scheme, "w4a4");

    if (preset_name) {
        for (size_t i = 0; i < NPRESETS; i++)
            if (!strcmp(presets[i].name, preset_name))
                cfg = json_loads(presets[i].json, 0, NULL);
        if (!cfg)
            return cli_usage(&cli_synth, "unknown preset '%s' (llama3-8b, smollm2-135m, "
                             "qwen3-30b-a3b, deepseek-v3, deepseek-v2-lite, gemma-3-4b, "
                             "gpt-oss-20b)", preset_name);
    } else if (!(cfg = json_load_file(like, 0, &jerr))) {
        return cli_fail("%s: %s (line %d)", like, jerr.text, jerr.line);
    } else if (!json_is_object(cfg)) {
        json_decref(cfg);
        return cli_fail("%s: expected a JSON object", like);
    }
    json_object_del(cfg, "quantization_config");
    if (layers) {
        json_t *lt = json_object_get(cfg, "layer_types");
        json_object_set_new(cfg, "num_hidden_layers", json_integer(layers));
        /* one entry a layer: keep the first N (gpt-oss, Gemma 3) */
        if (json_is_array(lt))
            while ((long)json_array_size(lt) > layers)
                json_array_remove(lt, json_array_size(lt) - 1);
    }
    if (read_shape(like ? like : preset_name, cfg, &s))
        goto out;
    if (!(qc = json_loads(qconfig_json, 0, &jerr))) {
        rc = cli_fail("internal: quantization_config template: %s", jerr.text);
        goto out;
    }
    p.exclude = json_object_get(qc, "exclude");
    if (!p.w4a4)
        json_object_set_new(json_object_get(qc, "global_quant_config"), "input_tensors",
                            json_null());
    if (make_plan(&p, &s))
        goto out;
    json_object_set(cfg, "quantization_config", qc);

    /* shards: in plan order, a Linear's weight and weight_scale together */
    for (size_t i = 0, in = 0; i < p.n; i++) {
        uint64_t b = p.t[i].bytes + (p.t[i].kind == T_LINEAR ? p.t[i + 1].bytes : 0);
        if (in && in + b > shard_size) {
            nshards++;
            in = 0;
        }
        p.t[i].shard = nshards - 1;
        if (p.t[i].kind == T_LINEAR)
            p.t[++i].shard = nshards - 1;
        in += b;
        total += b;
    }
    if (mkdir_parents(outdir, path, sizeof(path))) {
        rc = cli_fail("%s: cannot create directory %s: %s", outdir, path, strerror(errno));
        goto out;
    }
    snprintf(path, sizeof(path), "%s/config.json", outdir);
    if (json_dump_file(cfg, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER)) {
        rc = cli_fail("%s: cannot write", path);
        goto out;
    }
    if (nshards > 1) {
        index = json_pack("{s:{s:I}, s:{}}", "metadata", "total_size", (json_int_t)total,
                          "weight_map");
        wmap = json_object_get(index, "weight_map");
    }
    fprintf(stderr, "synth: %s, %" PRId64 " layers, %s, %zu tensors, %.2f GB in %d shard%s -> %s\n",
            s.arch, s.layers, scheme, p.n, total / 1e9, nshards, nshards > 1 ? "s" : "",
            outdir);
    {
        uint64_t done = 0;
        size_t i = 0;
        for (int sh = 0; sh < nshards; sh++) {
            char file[64];
            size_t first = i;

            if (nshards > 1)
                snprintf(file, sizeof(file), "model-%05d-of-%05d.safetensors", sh + 1, nshards);
            else
                snprintf(file, sizeof(file), "model.safetensors");
            snprintf(path, sizeof(path), "%s/%s", outdir, file);
            if (!(w = nvfp4_safetensors_writer_new(&err)) ||
                nvfp4_safetensors_writer_metadata(w, "format", "pt", &err)) {
                rc = cli_fail_error(&err);
                goto out;
            }
            for (; i < p.n && p.t[i].shard == sh; i++) {
                if (nvfp4_safetensors_writer_declare(w, p.t[i].name, p.t[i].dtype, p.t[i].ndim,
                                                     p.t[i].shape, &err)) {
                    rc = cli_fail_error(&err);
                    goto out;
                }
                if (wmap)
                    json_object_set_new(wmap, p.t[i].name, json_string(file));
            }
            if (nvfp4_safetensors_writer_open(w, path, &err)) {
                rc = cli_fail_error(&err);
                goto out;
            }
            for (size_t j = first; j < i; j++) {
                if (p.t[j].kind < 0)
                    continue; /* weight_scale: written with its weight */
                if (write_tensor(w, &p, &p.t[j]))
                    goto out;
                done += p.t[j].bytes + (p.t[j].kind == T_LINEAR ? p.t[j + 1].bytes : 0);
                if (tty)
                    fprintf(stderr, "\rsynth: %5.1f%% (%.2f of %.2f GB)", 100.0 * done / total,
                            done / 1e9, total / 1e9);
            }
            if (nvfp4_safetensors_writer_close(w, &err)) {
                rc = cli_fail_error(&err);
                goto out;
            }
            nvfp4_safetensors_writer_free(w);
            w = NULL;
            if (tty)
                fprintf(stderr, "\r");
            fprintf(stderr, "synth: wrote %s\n", path);
        }
    }
    if (index) {
        snprintf(path, sizeof(path), "%s/model.safetensors.index.json", outdir);
        if (json_dump_file(index, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER)) {
            rc = cli_fail("%s: cannot write", path);
            goto out;
        }
    }
    rc = CLI_OK;
out:
    nvfp4_safetensors_writer_free(w);
    for (size_t i = 0; i < p.n; i++)
        free(p.t[i].name);
    free(p.t);
    json_decref(index);
    json_decref(qc);
    json_decref(cfg);
    return rc;
}

const cli_command cli_synth = {
    "synth", "write a random-weight checkpoint in Quark's NVFP4 format (benchmarks)", run,
    help,
};
