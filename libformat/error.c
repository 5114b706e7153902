/* SPDX-License-Identifier: MIT */
/* Status codes and the caller-owned error struct (house style: jansson). */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <nvfp4/format.h>

static const char *const status_text[NVFP4_STATUS_COUNT] = {
    [NVFP4_OK] = "success",
    [NVFP4_ERR_IO] = "input/output error",
    [NVFP4_ERR_NOMEM] = "out of memory",
    [NVFP4_ERR_TRUNCATED] = "file is truncated",
    [NVFP4_ERR_HEADER_TOO_LARGE] = "header length is too large",
    [NVFP4_ERR_BAD_JSON] = "invalid JSON",
    [NVFP4_ERR_BAD_ENTRY] = "invalid header entry",
    [NVFP4_ERR_BAD_DTYPE] = "invalid dtype",
    [NVFP4_ERR_BAD_SHAPE] = "invalid shape",
    [NVFP4_ERR_OVERFLOW] = "size overflow",
    [NVFP4_ERR_BAD_SIZE] = "byte range does not match shape and dtype",
    [NVFP4_ERR_OUT_OF_RANGE] = "byte range outside the data region",
    [NVFP4_ERR_OVERLAP] = "overlapping tensors",
    [NVFP4_ERR_DUPLICATE] = "duplicate name",
    [NVFP4_ERR_NOT_FOUND] = "not found",
    [NVFP4_ERR_TYPE] = "wrong JSON type",
    [NVFP4_ERR_INVALID] = "invalid value",
    [NVFP4_ERR_UNSUPPORTED] = "unsupported",
    [NVFP4_ERR_SCALE_MISMATCH] = "fused layers have different global scales",
    [NVFP4_ERR_BACKEND] = "backend error",
    [NVFP4_ERR_DEVICE_OOM] = "device out of memory",
    [NVFP4_ERR_NONFINITE] = "non-finite result",
    [NVFP4_ERR_KV_FULL] = "KV cache full",
    [NVFP4_ERR_CANCELLED] = "cancelled",
};

const char *nvfp4_strerror(nvfp4_status status)
{
    if ((unsigned)status >= NVFP4_STATUS_COUNT)
        return "unknown status";
    return status_text[status];
}

const char *nvfp4_format_version(void)
{
    return PACKAGE_VERSION;
}

void nvfp4_error_clear(nvfp4_error *err)
{
    if (!err)
        return;
    memset(err, 0, sizeof(*err));
    err->offset = -1;
}

static void copy_field(char *dst, const char *src)
{
    if (!src) {
        dst[0] = '\0';
        return;
    }
    snprintf(dst, NVFP4_ERROR_FIELD_LENGTH, "%s", src);
}

nvfp4_status nvfp4_error_set(nvfp4_error *err, nvfp4_status status,
                             const char *file, const char *key, int64_t offset,
                             const char *fmt, ...)
{
    char msg[NVFP4_ERROR_TEXT_LENGTH];
    va_list ap;
    size_t n = 0;

    if (!err)
        return status;
    err->status = status;
    copy_field(err->file, file);
    copy_field(err->key, key);
    err->offset = offset;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    err->text[0] = '\0';
    if (file && *file)
        n += (size_t)snprintf(err->text + n, sizeof(err->text) - n, "%s: ", file);
    if (n < sizeof(err->text) && key && *key)
        n += (size_t)snprintf(err->text + n, sizeof(err->text) - n, "%s: ", key);
    if (n < sizeof(err->text))
        snprintf(err->text + n, sizeof(err->text) - n, "%s", msg);
    return status;
}
