/* SPDX-License-Identifier: MIT */
/* A stand-in GPU backend for test-kernels: a shared object with the plugin
 * entry point of libkernels/backend-impl.h, built as nvfp4-backend-cuda.so
 * (available, implements "add" and a dense-only "linear" that runs F32
 * weights alone, takes the option marker=N), nvfp4-backend-hip.so (reports
 * no device) and, with FAKE_ABI set, a cuda plug-in of another ABI version
 * (tests/backend-load.test), so that the registry's dlopen path, the
 * capabilities, supports() per op and weight format, open options and the
 * "unsupported", "no device" and ABI errors are tested without a GPU. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "backend-impl.h"

#ifndef FAKE_ABI
#define FAKE_ABI NVFP4_BACKEND_ABI_VERSION
#endif

typedef struct {
    float marker;   /* what add() and linear() add: 1000, or marker=N */
} fake_ctx;

static int fake_available(void)
{
    return FAKE_AVAILABLE;
}

static void *fake_open(const char *params, nvfp4_error *err)
{
    fake_ctx *c = calloc(1, sizeof(*c));
    char key[16], val[16], *end;
    const char *p = params;
    int r;

    if (!c)
        return NULL;
    c->marker = 1000.0f;
    while (p && (r = nvfp4_backend_param_next(&p, key, sizeof key, val, sizeof val)) != 0) {
        if (r > 0 && !strcmp(key, "marker")) {
            c->marker = strtof(val, &end);
            if (*val && !*end)
                continue;
        }
        if (r < 0)
            nvfp4_error_set(err, NVFP4_ERR_INVALID, "", FAKE_NAME, -1,
                            "fake: backend option \"%s\" is not key=value", p);
        else
            nvfp4_error_set(err, NVFP4_ERR_INVALID, "", FAKE_NAME, -1,
                            "fake: bad backend option %s=%s (the key is marker)", key, val);
        free(c);
        return NULL;
    }
    return c;
}

static void fake_close(void *ctx)
{
    free(ctx);
}

static void fake_get_caps(void *ctx, nvfp4_backend_caps *caps)
{
    (void)ctx;
    caps->host_memory = 1;
}

/* linear on F32 dense weights only: a format the op refuses */
static int fake_supports(void *ctx, nvfp4_op op, const nvfp4_kweight_desc *w)
{
    (void)ctx;
    if (op == NVFP4_OP_LINEAR_DENSE)
        return !w || (w->dtype == NVFP4_DTYPE_F32 && !(w->input_scale > 0.0f));
    return op == NVFP4_OP_ADD;
}

static void *fake_alloc(void *ctx, size_t bytes, nvfp4_error *err)
{
    (void)ctx;
    (void)err;
    return malloc(bytes);
}

static void fake_release(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static nvfp4_status fake_copy(void *ctx, void *dst, const void *src, size_t bytes,
                              nvfp4_error *err)
{
    (void)ctx;
    (void)err;
    memcpy(dst, src, bytes);
    return NVFP4_OK;
}

static void *fake_kweight_upload(void *ctx, const nvfp4_linear *parts, size_t nparts,
                                 const nvfp4_kweight_desc *desc, nvfp4_error *err)
{
    static int kw;
    (void)ctx;
    (void)parts;
    (void)nparts;
    (void)desc;
    (void)err;
    return &kw;
}

static void fake_kweight_free(void *ctx, void *kw)
{
    (void)ctx;
    (void)kw;
}

/* y = a + b + 1000 (the marker): distinguishable from the CPU's result */
static nvfp4_status fake_add(void *ctx, const float *a, const float *b, size_t n, float *y,
                             nvfp4_error *err)
{
    const float marker = ((const fake_ctx *)ctx)->marker;
    (void)err;
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] + b[i] + marker;
    return NVFP4_OK;
}

/* y = the marker everywhere: proof that this backend ran the Linear */
static nvfp4_status fake_linear(void *ctx, void *kw, const nvfp4_kweight_desc *desc,
                                const float *x, size_t m, float *y, nvfp4_error *err)
{
    (void)kw;
    (void)x;
    (void)err;
    for (size_t i = 0; i < m * (size_t)desc->n; i++)
        y[i] = ((const fake_ctx *)ctx)->marker;
    return NVFP4_OK;
}

static const nvfp4_backend_iface fake_iface = {
    .abi_version = FAKE_ABI,
    .name = FAKE_NAME,
    .available = fake_available,
    .open = fake_open,
    .close = fake_close,
    .get_caps = fake_get_caps,
    .supports = fake_supports,
    .alloc = fake_alloc,
    .release = fake_release,
    .upload = fake_copy,
    .download = fake_copy,
    .kweight_upload = fake_kweight_upload,
    .kweight_free = fake_kweight_free,
    .linear = fake_linear,
    .add = fake_add,
};

__attribute__((visibility("default"))) const nvfp4_backend_iface *
nvfp4_backend_entry(uint32_t abi_version)
{
    return abi_version == FAKE_ABI ? &fake_iface : NULL;
}
