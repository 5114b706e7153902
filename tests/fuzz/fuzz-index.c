/* SPDX-License-Identifier: MIT */
/* libFuzzer: model.safetensors.index.json beside a real shard (the tiny
 * fixture's model.safetensors) through nvfp4_checkpoint_open, then every
 * listed tensor looked up (which opens its shard). */
#include "config.h"

#include <nvfp4/format.h>

#include "fuzzutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nvfp4_error err;
    nvfp4_checkpoint *ck;

    fz_link("model.safetensors", TEST_DATA_DIR "/models/tiny/model.safetensors");
    fz_write("model.safetensors.index.json", data, size);
    ck = nvfp4_checkpoint_open(fz_dir(), &err);
    if (!ck)
        return 0;
    for (size_t i = 0; i < nvfp4_checkpoint_count(ck); i++) {
        const nvfp4_tensor *t;
        const char *name = nvfp4_checkpoint_name(ck, i);
        if (!nvfp4_checkpoint_has(ck, name))
            __builtin_trap();
        (void)nvfp4_checkpoint_shard_of(ck, name);
        (void)nvfp4_checkpoint_get(ck, name, &t, &err);
    }
    nvfp4_checkpoint_free(ck);
    return 0;
}
