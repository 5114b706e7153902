/* SPDX-License-Identifier: MIT */
/* libFuzzer: nvfp4_model_open of the tiny fixture model (its real
 * model.safetensors) under a fuzzed config.json, then a forward pass of two
 * tokens when it opens: every config value reaches assembly and the kernels. */
#include "config.h"

#include <nvfp4/model.h>

#include "fuzzutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nvfp4_model_options opt;
    nvfp4_error err;
    nvfp4_model *m;

    fz_link("model.safetensors", TEST_DATA_DIR "/models/tiny/model.safetensors");
    fz_write("config.json", data, size);
    nvfp4_model_options_init(&opt);
    opt.quiet = 1;
    opt.threads = 1;
    opt.max_ctx = 8;
    m = nvfp4_model_open(fz_dir(), &opt, &err);
    if (m) {
        int32_t ids[2] = {1, 2};
        size_t v = (size_t)nvfp4_model_vocab_size(m);
        float *logits = malloc(2 * v * sizeof(float));
        if (logits)
            (void)nvfp4_model_forward(m, ids, 2, 0, logits, 0, &err);
        free(logits);
    }
    nvfp4_model_free(m);
    return 0;
}
