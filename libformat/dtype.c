/* SPDX-License-Identifier: MIT */
/* The dtypes of the safetensors format, spelled as safetensors spells them. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <nvfp4/format.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[NVFP4_DTYPE_COUNT] = {
    [NVFP4_DTYPE_BOOL] = {"BOOL", 1},     [NVFP4_DTYPE_U8] = {"U8", 1},
    [NVFP4_DTYPE_I8] = {"I8", 1},         [NVFP4_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [NVFP4_DTYPE_F8_E5M2] = {"F8_E5M2", 1}, [NVFP4_DTYPE_I16] = {"I16", 2},
    [NVFP4_DTYPE_U16] = {"U16", 2},       [NVFP4_DTYPE_F16] = {"F16", 2},
    [NVFP4_DTYPE_BF16] = {"BF16", 2},     [NVFP4_DTYPE_I32] = {"I32", 4},
    [NVFP4_DTYPE_U32] = {"U32", 4},       [NVFP4_DTYPE_F32] = {"F32", 4},
    [NVFP4_DTYPE_I64] = {"I64", 8},       [NVFP4_DTYPE_U64] = {"U64", 8},
    [NVFP4_DTYPE_F64] = {"F64", 8},
};

const char *nvfp4_dtype_name(nvfp4_dtype dtype)
{
    if ((unsigned)dtype >= NVFP4_DTYPE_COUNT)
        return "?";
    return dtypes[dtype].name;
}

size_t nvfp4_dtype_size(nvfp4_dtype dtype)
{
    if ((unsigned)dtype >= NVFP4_DTYPE_COUNT)
        return 0;
    return dtypes[dtype].size;
}

int nvfp4_dtype_from_name(const char *name, nvfp4_dtype *out)
{
    if (!name)
        return -1;
    for (int i = 0; i < NVFP4_DTYPE_COUNT; i++) {
        if (strcmp(name, dtypes[i].name) == 0) {
            if (out)
                *out = (nvfp4_dtype)i;
            return 0;
        }
    }
    return -1;
}

const char *nvfp4_tensor_shape_text(const nvfp4_tensor *t, char *buf, size_t n)
{
    size_t k;

    if (!buf || n == 0)
        return buf;
    k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; t && d < t->ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, d ? ", " : "", t->shape[d]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
    return buf;
}
