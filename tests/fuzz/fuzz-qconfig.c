/* SPDX-License-Identifier: MIT */
/* libFuzzer: a quantization_config object (the input is its JSON text,
 * wrapped into a config.json) through nvfp4_qconfig_parse and the scheme
 * resolution of every Linear name a model asks about (exclude patterns,
 * layer and layer-type configs). */
#include "config.h"

#include <nvfp4/quant.h>

#include "fuzzutil.h"

static const char *const layers[] = {
    "lm_head", "model.embed_tokens", "model.layers.0.self_attn.q_proj",
    "model.layers.0.self_attn.o_proj", "model.layers.1.mlp.gate_proj",
    "model.layers.0.mlp.experts.3.down_proj", "model.layers.0.block_sparse_moe.gate",
    "model.layers.10.mlp.shared_expert.up_proj", "", NULL};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char pre[] = "{\"architectures\": [\"LlamaForCausalLM\"], "
                              "\"quantization_config\": ";
    nvfp4_error err;
    nvfp4_config *cfg;
    nvfp4_qconfig *q;

    cfg = nvfp4_config_load(fz_write3("config.json", pre, sizeof(pre) - 1, data, size, "}", 1),
                            &err);
    if (!cfg)
        return 0;
    q = nvfp4_qconfig_parse(cfg, &err);
    if (q) {
        for (const char *const *l = layers; *l; l++) {
            nvfp4_scheme s;
            (void)nvfp4_qconfig_resolve(q, *l, &s, &err);
        }
    }
    nvfp4_qconfig_free(q);
    nvfp4_config_free(cfg);
    return 0;
}
