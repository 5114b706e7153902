/* SPDX-License-Identifier: MIT */
/* A stand-in GPU backend for test-kernels: a shared object with the plugin
 * entry point of libkernels/backend-impl.h, built twice as
 * nvfp4-backend-cuda.so (available, implements only "add") and
 * nvfp4-backend-hip.so (reports no device), so that the registry's
 * dlopen path, the per-op supports() query and the "unsupported" and
 * "no device" errors are tested on a machine without a GPU. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "backend-impl.h"

static int fake_available(void)
{
    return FAKE_AVAILABLE;
}

static void *fake_open(nvfp4_error *err)
{
    static int ctx;
    (void)err;
    return &ctx;
}

static void fake_close(void *ctx)
{
    (void)ctx;
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

/* y = a + b + 1000: distinguishable from the CPU's result */
static nvfp4_status fake_add(void *ctx, const float *a, const float *b, size_t n, float *y,
                             nvfp4_error *err)
{
    (void)ctx;
    (void)err;
    for (size_t i = 0; i < n; i++)
        y[i] = a[i] + b[i] + 1000.0f;
    return NVFP4_OK;
}

static const nvfp4_backend_iface fake_iface = {
    .abi_version = NVFP4_BACKEND_ABI_VERSION,
    .name = FAKE_NAME,
    .available = fake_available,
    .open = fake_open,
    .close = fake_close,
    .alloc = fake_alloc,
    .release = fake_release,
    .upload = fake_copy,
    .download = fake_copy,
    .kweight_upload = fake_kweight_upload,
    .kweight_free = fake_kweight_free,
    .add = fake_add,
};

__attribute__((visibility("default"))) const nvfp4_backend_iface *
nvfp4_backend_entry(uint32_t abi_version)
{
    return abi_version == NVFP4_BACKEND_ABI_VERSION ? &fake_iface : NULL;
}
