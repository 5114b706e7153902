/* SPDX-License-Identifier: MIT */
/* libFuzzer: nvfp4_model_open of the tiny fixture model (its real
 * model.safetensors) under a fuzzed config.json, then a forward pass of two
 * tokens when it opens: every config value reaches assembly and the kernels. */
#include "config.h"

#include <nvfp4/model.h>

#include "fuzzutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_tiny_link("model.safetensors");
    fz_write("config.json", data, size);
    fz_open_and_forward();
    return 0;
}
