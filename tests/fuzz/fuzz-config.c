/* SPDX-License-Identifier: MIT */
/* libFuzzer: config.json through nvfp4_config_load and the typed getters of
 * the keys the models read (dotted paths included), then its
 * quantization_config through nvfp4_qconfig_parse. */
#include "config.h"

#include <nvfp4/quant.h>

#include "fuzzutil.h"

static const char *const keys[] = {
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
    "rms_norm_eps", "tie_word_embeddings", "rope_theta", "rope_parameters.rope_theta",
    "rope_parameters.rope_type", "rope_scaling.factor", "rope_scaling.type",
    "num_experts", "num_local_experts", "architectures", "eos_token_id",
    "quantization_config.exclude", "a.b.c.d", "", ".", "..", NULL};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nvfp4_error err;
    nvfp4_config *cfg = nvfp4_config_load(fz_write("config.json", data, size), &err);
    nvfp4_qconfig *q;

    if (!cfg)
        return 0;
    for (const char *const *k = keys; *k; k++) {
        int64_t i;
        double d;
        int b;
        const char *s;
        (void)nvfp4_config_has(cfg, *k);
        (void)nvfp4_config_get_int(cfg, *k, 0, &i, &err);
        (void)nvfp4_config_get_double(cfg, *k, 0, &d, &err);
        (void)nvfp4_config_get_bool(cfg, *k, 0, &b, &err);
        (void)nvfp4_config_get_string(cfg, *k, NULL, &s, &err);
        (void)nvfp4_config_json(cfg, *k);
    }
    q = nvfp4_qconfig_parse(cfg, &err);
    nvfp4_qconfig_free(q);
    nvfp4_config_free(cfg);
    return 0;
}
