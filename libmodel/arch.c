/* SPDX-License-Identifier: MIT */
/* The supported architectures and how config.json describes them. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const arch_desc archs[] = {
    {"LlamaForCausalLM", 0, 0, MOE_NONE, 0, "silu"},
    {"MistralForCausalLM", 0, 0, MOE_NONE, 0, "silu"},
    {"Qwen2ForCausalLM", 1, 0, MOE_NONE, 0, "silu"},
    {"Qwen3ForCausalLM", 0, 1, MOE_NONE, 0, "silu"},
    {"MixtralForCausalLM", 0, 0, MOE_MIXTRAL, 0, "silu"},
    {"Qwen2MoeForCausalLM", 1, 0, MOE_QWEN, 1, "silu"},
    {"Qwen3MoeForCausalLM", 0, 1, MOE_QWEN, 0, "silu"},
};

const arch_desc *nvfp4m_arch_find(const char *hf_name)
{
    for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++)
        if (hf_name && strcmp(archs[i].hf_name, hf_name) == 0)
            return &archs[i];
    return NULL;
}

const char *nvfp4m_arch_supported_list(void)
{
    return "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
           "MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM";
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

/* First present key of a list (transformers renamed several over time). */
static nvfp4_status get_int_any(const nvfp4_config *cfg, const char *const *keys,
                                int64_t def, int64_t *out, nvfp4_error *err)
{
    for (; *keys; keys++)
        if (nvfp4_config_has(cfg, *keys))
            return nvfp4_config_get_int(cfg, *keys, def, out, err);
    *out = def;
    return NVFP4_OK;
}

nvfp4_status nvfp4m_hparams_read(const nvfp4_config *cfg, const arch_desc *arch, hparams *hp,
                          nvfp4_error *err)
{
    const char *path = nvfp4_config_path(cfg);
    const char *rope_type = NULL;
    const char *rp;
    nvfp4_status rc;
    json_t *v;

    memset(hp, 0, sizeof(*hp));
#define TRY(x)                                                                           \
    do {                                                                                 \
        if ((rc = (x)) != NVFP4_OK)                                                      \
            return rc;                                                                   \
    } while (0)
    TRY(need_int(cfg, "hidden_size", &hp->hidden, err));
    TRY(need_int(cfg, "num_hidden_layers", &hp->layers, err));
    TRY(need_int(cfg, "num_attention_heads", &hp->heads, err));
    TRY(need_int(cfg, "vocab_size", &hp->vocab, err));
    TRY(nvfp4_config_get_int(cfg, "num_key_value_heads", hp->heads, &hp->kv_heads, err));
    TRY(nvfp4_config_get_int(cfg, "head_dim", hp->hidden / hp->heads, &hp->head_dim, err));
    TRY(nvfp4_config_get_int(cfg, "intermediate_size", 0, &hp->inter, err));
    TRY(nvfp4_config_get_int(cfg, "max_position_embeddings", 4096, &hp->max_pos, err));
    TRY(nvfp4_config_get_double(cfg, "rms_norm_eps", 1e-6, &hp->eps, err));
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
    if (hp->head_dim <= 0 || hp->head_dim % 2)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, path, "head_dim", -1,
                               "expected a positive even head size, found %lld",
                               (long long)hp->head_dim);

    /* RoPE: transformers 5 writes rope_parameters, older ones rope_theta and
     * rope_scaling. */
    rp = nvfp4_config_has(cfg, "rope_parameters") ? "rope_parameters" : "rope_scaling";
    {
        char key[96];
        snprintf(key, sizeof(key), "%s.rope_theta", rp);
        if (nvfp4_config_has(cfg, key))
            TRY(nvfp4_config_get_double(cfg, key, 10000.0, &hp->rope_theta, err));
        else
            TRY(nvfp4_config_get_double(cfg, "rope_theta", 10000.0, &hp->rope_theta, err));
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
        } else if (strcmp(rope_type, "default") != 0) {
            return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, path, key, -1,
                                   "RoPE type \"%s\" is not supported (supported: "
                                   "default, llama3)", rope_type);
        }
    }

    if (arch->moe != MOE_NONE) {
        static const char *const ek[] = {"num_experts", "num_local_experts", NULL};
        static const char *const mk[] = {"moe_intermediate_size", NULL};
        TRY(get_int_any(cfg, ek, 0, &hp->experts, err));
        TRY(nvfp4_config_get_int(cfg, "num_experts_per_tok", 2, &hp->topk, err));
        TRY(get_int_any(cfg, mk, hp->inter, &hp->moe_inter, err));
        TRY(nvfp4_config_get_int(cfg, "shared_expert_intermediate_size", 0,
                                 &hp->shared_inter, err));
        TRY(nvfp4_config_get_int(cfg, "decoder_sparse_step", 1, &hp->sparse_step, err));
        /* Mixtral always renormalises (softmax over the chosen logits). */
        TRY(nvfp4_config_get_bool(cfg, "norm_topk_prob", arch->moe == MOE_MIXTRAL,
                                  &hp->norm_topk, err));
        if (arch->moe == MOE_MIXTRAL)
            hp->norm_topk = 1;
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
                return nvfp4_error_set(err, NVFP4_ERR_NOMEM, path, NULL, -1,
                                       "out of memory");
            for (size_t i = 0; i < json_array_size(v); i++)
                hp->mlp_only[hp->n_mlp_only++] = json_integer_value(json_array_get(v, i));
        }
        if (arch->shared_expert && hp->shared_inter <= 0)
            return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, path,
                                   "shared_expert_intermediate_size", -1,
                                   "required key is missing");
    }
    if (!nvfp4m_hparams_layer_is_moe(hp, arch, 0) && hp->inter <= 0 && arch->moe == MOE_NONE)
        return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, path, "intermediate_size", -1,
                               "required key is missing");
#undef TRY
    return NVFP4_OK;
}

void nvfp4m_hparams_free(hparams *hp)
{
    free(hp->mlp_only);
    hp->mlp_only = NULL;
}

int nvfp4m_hparams_layer_is_moe(const hparams *hp, const arch_desc *arch, int64_t l)
{
    if (arch->moe == MOE_NONE || hp->experts <= 0)
        return 0;
    for (size_t i = 0; i < hp->n_mlp_only; i++)
        if (hp->mlp_only[i] == l)
            return 0;
    return (l + 1) % hp->sparse_step == 0;
}
