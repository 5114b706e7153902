/* SPDX-License-Identifier: MIT */
/* libFuzzer: a safetensors file (header and data) through nvfp4_safetensors_open,
 * every tensor looked up by name and its first and last byte read. */
#include "config.h"

#include <nvfp4/format.h>

#include "fuzzutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nvfp4_error err;
    nvfp4_safetensors *st = nvfp4_safetensors_open(fz_write("x.safetensors", data, size), &err);
    volatile unsigned sum = 0;

    if (!st)
        return 0;
    for (size_t i = 0; i < nvfp4_safetensors_count(st); i++) {
        const nvfp4_tensor *t = nvfp4_safetensors_tensor(st, i);
        char shp[128];
        if (nvfp4_safetensors_find(st, t->name) != t)
            __builtin_trap(); /* the index must find what it lists */
        nvfp4_tensor_shape_text(t, shp, sizeof(shp));
        if (t->nbytes) {
            const unsigned char *p = t->data;
            sum += p[0] + p[t->nbytes - 1];
        }
    }
    nvfp4_safetensors_free(st);
    return (int)(sum & 0); /* the reads above are what counts */
}
