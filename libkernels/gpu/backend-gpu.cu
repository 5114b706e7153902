/* SPDX-License-Identifier: MIT */
/*
 * libkernels/gpu/backend-gpu.cu - the "cuda" / "hip" backend: the function table of
 * libkernels/backend-impl.h over the launchers of libkernels/gpu/kernels.cu.  Built
 * once per vendor into the loadable module nvfp4-backend-<vendor>.so, which
 * libnvfp4-kernels dlopen()s, so the CPU-only core never links a GPU
 * runtime.
 *
 * All work goes onto one non-blocking stream per opened backend, in call
 * order; alloc/release/upload/download and sync are the points where the
 * host waits.  Runtime failures become NVFP4_ERR_BACKEND (or
 * NVFP4_ERR_DEVICE_OOM) carrying the runtime's own message; nothing here
 * aborts.
 */
#include "config.h"

#include "gpu.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "../backend-impl.h"

typedef struct {
    int device;
    gpu_device_info info;
    gk_device dev;
    gpu_stream_t stream;
    int *flag;              /* device: an id/index was out of range */
    void *scratch;          /* device, grow-only, stream-ordered reuse */
    size_t scratch_size;
    struct moe_set *moe_sets; /* device descriptor arrays, one per MoE layer */
    int force;              /* linear path pinned at open: 0 auto, 1 gemv, 2 tiled,
                               3 mma, 4 fp4 (option linear=, NVFP4_GPU_LINEAR) */
} gctx;

/* The options of open(), each from PARAMS or else its environment
 * variable, parsed once. */
typedef struct {
    int device;             /* device=N, NVFP4_GPU_DEVICE; 0 */
    int force;              /* linear=..., NVFP4_GPU_LINEAR */
    int gemv_rows;          /* gemv_rows=1|2|4, NVFP4_GPU_GEMV_ROWS; 0 = the kernels' choice */
    int mma, fp4mma;        /* mma=0|1, fp4mma=0|1; NVFP4_GPU_NO_(W)MMA, NVFP4_GPU_NO_FP4MMA */
} gopts;

/* The experts of one MoE layer as the grouped kernels read them: a device
 * array [w13 of each expert, w2 of each expert].  Built on the first call
 * and reused while the host-side descriptors compare equal byte for byte,
 * so a decode step uploads nothing and never waits for the device here. */
struct moe_set {
    struct moe_set *next;
    size_t count;           /* 2 * experts */
    gk_weight *host;        /* what DEV holds */
    gk_weight *dev;
};

typedef struct {
    gk_weight w;            /* device view */
    void *mem[4];           /* allocations: packed, scales, dense, bias */
} gkw;

/* ---- errors ------------------------------------------------------------------- */

static nvfp4_status gerr(gpu_error_t e, const char *what, nvfp4_error *err)
{
    if (e == GPU_SUCCESS)
        return NVFP4_OK;
    return nvfp4_error_set(err, gpu_is_oom(e) ? NVFP4_ERR_DEVICE_OOM : NVFP4_ERR_BACKEND, "",
                           what, -1, "%s runtime: %s (%s)", GPU_VENDOR_NAME,
                           gpu_error_string(e), gpu_error_name(e));
}

static void *dev_alloc(size_t bytes, const char *what, nvfp4_error *err)
{
    void *p = NULL;
    gpu_error_t e = gpu_malloc(&p, bytes ? bytes : 1);

    if (e != GPU_SUCCESS) {
        (void)gpu_last_error(); /* clear the sticky copy of a failed allocation */
        nvfp4_error_set(err, gpu_is_oom(e) ? NVFP4_ERR_DEVICE_OOM : NVFP4_ERR_BACKEND, "",
                        what, -1, "%s: allocating %zu bytes of device memory failed: %s",
                        GPU_VENDOR_NAME, bytes, gpu_error_string(e));
        return NULL;
    }
    return p;
}

/* a * b without wrapping, or 0 on overflow. */
static int mul_ok(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

/* ---- backend state ------------------------------------------------------------ */

/* A non-negative decimal at most MAX, or -1. */
static int small_int(const char *s, long max)
{
    char *end;
    long v;

    if (!s || !*s)
        return -1;
    v = strtol(s, &end, 10);
    return (*end || v < 0 || v > max) ? -1 : (int)v;
}

static int linear_path(const char *f)
{
    return !strcmp(f, "") || !strcmp(f, "auto") ? 0 : !strcmp(f, "gemv") ? 1
           : !strcmp(f, "tiled") ? 2 : !strcmp(f, "mma") || !strcmp(f, "wmma") ? 3
           : !strcmp(f, "fp4") ? 4 : -1;
}

/* One option KEY=VAL into O; 0, or -1 with ERR naming it (ORIGIN: where it
 * came from, the option string or an environment variable). */
static int set_opt(gopts *o, const char *key, const char *val, const char *origin,
                   nvfp4_error *err)
{
    int v = -1;

    if (!strcmp(key, "device")) {
        if ((v = small_int(val, 1024)) >= 0)
            o->device = v;
    } else if (!strcmp(key, "linear")) {
        if ((v = linear_path(val)) >= 0)
            o->force = v;
    } else if (!strcmp(key, "gemv_rows")) {
        if ((v = small_int(val, 4)) >= 0 && (v == 1 || v == 2 || v == 4))
            o->gemv_rows = v;
        else
            v = -1;
    } else if (!strcmp(key, "mma") || !strcmp(key, "fp4mma")) {
        if ((v = small_int(val, 1)) >= 0)
            *(!strcmp(key, "mma") ? &o->mma : &o->fp4mma) = v;
    } else {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, "", GPU_VENDOR_NAME, -1,
                        "%s: unknown backend option \"%s\" (%s); the keys are device, "
                        "linear, gemv_rows, mma and fp4mma",
                        GPU_VENDOR_NAME, key, origin);
        return -1;
    }
    if (v < 0) {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, "", key, -1,
                        "%s: backend option %s=\"%s\" (%s): expected device=0..1024, "
                        "linear=auto|gemv|tiled|mma|fp4, gemv_rows=1|2|4, mma=0|1 or "
                        "fp4mma=0|1",
                        GPU_VENDOR_NAME, key, val, origin);
        return -1;
    }
    return 0;
}

/* The environment's defaults, then PARAMS over them. */
static int parse_opts(gopts *o, const char *params, nvfp4_error *err)
{
    char key[32], val[64];
    const char *p = params, *e;
    int r;

    memset(o, 0, sizeof(*o));
    o->mma = o->fp4mma = 1;
    if ((e = getenv("NVFP4_GPU_DEVICE")) && *e && set_opt(o, "device", e, "NVFP4_GPU_DEVICE", err))
        return -1;
    if ((e = getenv("NVFP4_GPU_LINEAR")) && set_opt(o, "linear", e, "NVFP4_GPU_LINEAR", err))
        return -1;
    /* as before: a value atoi() reads as 0 leaves the kernels' choice */
    if ((e = getenv("NVFP4_GPU_GEMV_ROWS")) && (r = atoi(e)) != 0)
        o->gemv_rows = r;
    if (getenv("NVFP4_GPU_NO_WMMA") || getenv("NVFP4_GPU_NO_MMA"))
        o->mma = 0;
    if (getenv("NVFP4_GPU_NO_FP4MMA"))
        o->fp4mma = 0;
    while (p && (r = nvfp4_backend_param_next(&p, key, sizeof key, val, sizeof val)) != 0) {
        if (r < 0) {
            nvfp4_error_set(err, NVFP4_ERR_INVALID, "", GPU_VENDOR_NAME, -1,
                            "%s: backend option \"%.40s\" is not key=value", GPU_VENDOR_NAME,
                            p);
            return -1;
        }
        if (set_opt(o, key, val, "option", err))
            return -1;
    }
    return 0;
}

/* comm-gpu.cu's view of an opened backend: its stream and device. */
gpu_stream_t nvfp4k_gpu_stream(void *c, int *device)
{
    gctx *ctx = (gctx *)c;

    *device = ctx->device;
    return ctx->stream;
}

/* Any device: which one is an option of open(), checked there. */
static int g_available(void)
{
    int n = 0;

    if (gpu_device_count(&n) != GPU_SUCCESS) {
        (void)gpu_last_error();
        return 0;
    }
    return n > 0;
}

static void g_close(void *c)
{
    gctx *ctx = (gctx *)c;

    if (!ctx)
        return;
    (void)gpu_set_device(ctx->device);
    if (ctx->stream)
        (void)gpu_stream_sync(ctx->stream);
    (void)gpu_free(ctx->scratch);
    while (ctx->moe_sets) {
        struct moe_set *ms = ctx->moe_sets;
        ctx->moe_sets = ms->next;
        (void)gpu_free(ms->dev);
        free(ms->host);
        free(ms);
    }
    (void)gpu_free(ctx->flag);
    if (ctx->stream)
        (void)gpu_stream_destroy(ctx->stream);
    free(ctx);
}

static void *g_open(const char *params, nvfp4_error *err)
{
    gctx *ctx;
    gopts o;
    int n = 0;
    gpu_error_t e;

    if (parse_opts(&o, params, err))
        return NULL;
    ctx = (gctx *)calloc(1, sizeof(*ctx));
    if (!ctx) {
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", GPU_VENDOR_NAME, -1,
                        "out of host memory opening the backend");
        return NULL;
    }
    ctx->device = o.device;
    ctx->force = o.force;
    if ((e = gpu_device_count(&n)) != GPU_SUCCESS) {
        gerr(e, GPU_VENDOR_NAME, err);
        free(ctx);
        return NULL;
    }
    if (ctx->device >= n) {
        nvfp4_error_set(err, NVFP4_ERR_BACKEND, "", "device", -1,
                        "%s: device %d requested (option device= or NVFP4_GPU_DEVICE), %d "
                        "device(s) present",
                        GPU_VENDOR_NAME, ctx->device, n);
        free(ctx);
        return NULL;
    }
    if ((e = gpu_set_device(ctx->device)) != GPU_SUCCESS ||
        (e = gpu_get_device_info(ctx->device, &ctx->info)) != GPU_SUCCESS ||
        (e = gpu_stream_create(&ctx->stream)) != GPU_SUCCESS) {
        gerr(e, GPU_VENDOR_NAME, err);
        g_close(ctx);
        return NULL;
    }
    ctx->dev.warp_size = ctx->info.warp_size;
    /* tests and tuning: NVFP4 GEMV rows per warp (1, 2 or 4) */
    ctx->dev.gemv_rows = o.gemv_rows;
    /* The kernels assume whole warps of 32 or 64 lanes. */
    if (ctx->dev.warp_size != 32 && ctx->dev.warp_size != 64) {
        nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, "", GPU_VENDOR_NAME, -1,
                        "%s: device %s has warp size %d (expected 32 or 64)", GPU_VENDOR_NAME,
                        ctx->info.name, ctx->dev.warp_size);
        g_close(ctx);
        return NULL;
    }
    ctx->flag = (int *)dev_alloc(sizeof(int), GPU_VENDOR_NAME, err);
    if (!ctx->flag) {
        g_close(ctx);
        return NULL;
    }
    /* Tensor-core paths: what the device's code image holds.  The FP4 GEMM
     * (block-scaled mma.sync) exists on compute capability 12.x only, and
     * only in an sm_120a/sm_121a image; a 12.x device running PTX of an
     * older target reports no FP4 and takes the BF16 tensor-core path. */
    {
        int caps = 0;
        if ((e = gk_caps(ctx->flag, ctx->stream)) != GPU_SUCCESS ||
            (e = gpu_copy_d2h(&caps, ctx->flag, sizeof caps, ctx->stream)) != GPU_SUCCESS ||
            (e = gpu_stream_sync(ctx->stream)) != GPU_SUCCESS) {
            gerr(e, GPU_VENDOR_NAME, err);
            g_close(ctx);
            return NULL;
        }
        ctx->dev.mma = (caps & GK_CAP_MMA) != 0;
        ctx->dev.fp4mma = (caps & GK_CAP_FP4_MMA) != 0;
#if defined(GPU_VENDOR_CUDA)
        ctx->dev.fp4mma = ctx->dev.fp4mma && ctx->info.major == 12;
#endif
    }
    /* tuning and comparisons: switch the tensor-core paths off */
    if (!o.mma)
        ctx->dev.mma = 0;
    if (!o.fp4mma)
        ctx->dev.fp4mma = 0;
    if ((e = gpu_memset(ctx->flag, 0, sizeof(int), ctx->stream)) != GPU_SUCCESS ||
        (e = gpu_stream_sync(ctx->stream)) != GPU_SUCCESS) {
        gerr(e, GPU_VENDOR_NAME, err);
        g_close(ctx);
        return NULL;
    }
    return ctx;
}

static void g_get_caps(void *c, nvfp4_backend_caps *caps)
{
    (void)c;
    caps->host_memory = 0;     /* device memory: ids and indices checked on the device */
    caps->async = 1;           /* one stream; sync() waits */
    caps->float_weights_in_place = 0; /* every weight is copied to the device */
    caps->threads = 0;
}

/* Every op and format, except float weights with NVFP4 activations (the
 * kernels have no §5 step before a float product). */
static int g_supports(void *c, nvfp4_op op, const nvfp4_kweight_desc *w)
{
    (void)c;
    if ((unsigned)op >= NVFP4_OP_COUNT)
        return 0;
    if (w && (op == NVFP4_OP_LINEAR_DENSE || op == NVFP4_OP_MOE) &&
        w->scheme == NVFP4_SCHEME_NONE && w->input_scale > 0.0f)
        return 0;
    return 1;
}

static void g_set_threads(void *c, int threads)
{
    (void)c;
    (void)threads; /* one stream; host threads play no part */
}

static int g_threads(void *c)
{
    (void)c;
    return 1;
}

/* Waits for the stream, then reports (once) an out-of-range index the
 * kernels met and skipped. */
static nvfp4_status g_sync(void *c, nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    int flag = 0;
    gpu_error_t e;

    (void)gpu_set_device(ctx->device);
    if ((e = gpu_copy_d2h(&flag, ctx->flag, sizeof flag, ctx->stream)) != GPU_SUCCESS ||
        (e = gpu_stream_sync(ctx->stream)) != GPU_SUCCESS)
        return gerr(e, "sync", err);
    if (flag) {
        if ((e = gpu_memset(ctx->flag, 0, sizeof(int), ctx->stream)) != GPU_SUCCESS)
            return gerr(e, "sync", err);
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "sync", -1,
                               "%s: an embedding id, expert index or KV position, block "
                               "table or block id in device memory was out of range; the "
                               "rows it selected were left zero",
                               GPU_VENDOR_NAME);
    }
    return NVFP4_OK;
}

/* ---- memory --------------------------------------------------------------------- */

static void *g_alloc(void *c, size_t bytes, nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    (void)gpu_set_device(ctx->device);
    return dev_alloc(bytes, "alloc", err);
}

static void g_release(void *c, void *ptr)
{
    gctx *ctx = (gctx *)c;
    (void)gpu_set_device(ctx->device);
    (void)gpu_free(ptr); /* waits for the device: no kernel can still use it */
}

/* Synchronous both ways: the caller may reuse SRC (upload) or read DST
 * (download) as soon as this returns. */
static nvfp4_status g_upload(void *c, void *dst, const void *src, size_t bytes,
                             nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    gpu_error_t e;

    (void)gpu_set_device(ctx->device);
    if ((e = gpu_copy_h2d(dst, src, bytes, ctx->stream)) != GPU_SUCCESS ||
        (e = gpu_stream_sync(ctx->stream)) != GPU_SUCCESS)
        return gerr(e, "upload", err);
    return NVFP4_OK;
}

static nvfp4_status g_download(void *c, void *dst, const void *src, size_t bytes,
                               nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    gpu_error_t e;

    (void)gpu_set_device(ctx->device);
    if ((e = gpu_copy_d2h(dst, src, bytes, ctx->stream)) != GPU_SUCCESS ||
        (e = gpu_stream_sync(ctx->stream)) != GPU_SUCCESS)
        return gerr(e, "download", err);
    return NVFP4_OK;
}

/* Grow-only scratch; freeing the old one waits for the kernels using it. */
static void *scratch(gctx *ctx, size_t bytes, const char *op, nvfp4_error *err)
{
    if (bytes <= ctx->scratch_size)
        return ctx->scratch;
    (void)gpu_free(ctx->scratch);
    ctx->scratch = NULL;
    ctx->scratch_size = 0;
    ctx->scratch = dev_alloc(bytes, op, err);
    if (ctx->scratch)
        ctx->scratch_size = bytes;
    return ctx->scratch;
}

/* ---- weights ---------------------------------------------------------------------- */

static int dense_format(nvfp4_dtype dt)
{
    switch (dt) {
    case NVFP4_DTYPE_F32: return GK_F32;
    case NVFP4_DTYPE_BF16: return GK_BF16;
    case NVFP4_DTYPE_F16: return GK_F16;
    default: return -1;
    }
}

static void g_kweight_free(void *c, void *p)
{
    gctx *ctx = (gctx *)c;
    gkw *kw = (gkw *)p;

    if (!kw)
        return;
    (void)gpu_set_device(ctx->device);
    for (int i = 0; i < 4; i++)
        (void)gpu_free(kw->mem[i]);
    free(kw);
}

/* Copies PARTS row block after row block into one device weight: NVFP4
 * bytes as they are in the file (kernels read the §2 layout directly),
 * dense tensors in their own dtype when all parts share it (decoded in the
 * kernels, so every value is exactly the file's), else converted to F32 on
 * the host.  A bias becomes float32 (a part without one contributes 0). */
static void *g_kweight_upload(void *c, const nvfp4_linear *parts, size_t nparts,
                              const nvfp4_kweight_desc *desc, nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    gkw *kw;
    gpu_error_t e = GPU_SUCCESS;
    float *host = NULL;
    const size_t n = (size_t)desc->n, k = (size_t)desc->k;
    size_t bytes, row0;
    const char *name = nparts ? parts[0].prefix : "kweight";

    (void)gpu_set_device(ctx->device);
    kw = (gkw *)calloc(1, sizeof(*kw));
    if (!kw) {
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", name, -1, "out of host memory");
        return NULL;
    }
    kw->w.n = desc->n;
    kw->w.k = desc->k;
    if (desc->scheme != NVFP4_SCHEME_NONE) {
        size_t pb, sb;
        kw->w.format = GK_NVFP4;
        kw->w.global = desc->weight_scale_2;
        kw->w.input_scale = desc->scheme == NVFP4_SCHEME_W4A4 ? desc->input_scale : 0.0f;
        /* §5's gs exactly as the CPU backend takes it: the descriptor's
         * input_gs (compressed-tensors' divisor as stored, else 1.0f /
         * input_scale: libkernels/registry.c) */
        kw->w.input_gs = kw->w.input_scale > 0.0f
                             ? (desc->input_gs > 0.0f ? desc->input_gs : 1.0f / desc->input_scale)
                             : 0.0f;
        if (!mul_ok(n, k / 2, &pb) || !mul_ok(n, k / 16, &sb)) {
            nvfp4_error_set(err, NVFP4_ERR_OVERFLOW, "", name, -1,
                            "weight of %zu x %zu overflows", n, k);
            goto fail;
        }
        if (!(kw->mem[0] = dev_alloc(pb, name, err)) || !(kw->mem[1] = dev_alloc(sb, name, err)))
            goto fail;
        row0 = 0;
        for (size_t i = 0; i < nparts && e == GPU_SUCCESS; i++) {
            const size_t pn = (size_t)parts[i].n;
            e = gpu_copy_h2d((uint8_t *)kw->mem[0] + row0 * (k / 2), parts[i].weight,
                             pn * (k / 2), ctx->stream);
            if (e == GPU_SUCCESS)
                e = gpu_copy_h2d((uint8_t *)kw->mem[1] + row0 * (k / 16), parts[i].scales,
                                 pn * (k / 16), ctx->stream);
            row0 += pn;
        }
        kw->w.packed = (const uint8_t *)kw->mem[0];
        kw->w.scales = (const uint8_t *)kw->mem[1];
    } else {
        int fmt = parts[0].dense ? dense_format(parts[0].dense->dtype) : -1;
        size_t item;
        for (size_t i = 1; i < nparts; i++)
            if (!parts[i].dense || dense_format(parts[i].dense->dtype) != fmt)
                fmt = GK_F32; /* mixed dtypes: convert everything */
        if (fmt < 0) {
            nvfp4_error_set(err, NVFP4_ERR_BAD_DTYPE, "", name, -1,
                            "%s: unquantized weight must be F32, BF16 or F16", GPU_VENDOR_NAME);
            goto fail;
        }
        item = fmt == GK_F32 ? 4 : 2;
        if (!mul_ok(n, k, &bytes) || !mul_ok(bytes, item, &bytes)) {
            nvfp4_error_set(err, NVFP4_ERR_OVERFLOW, "", name, -1,
                            "weight of %zu x %zu overflows", n, k);
            goto fail;
        }
        if (!(kw->mem[2] = dev_alloc(bytes, name, err)))
            goto fail;
        kw->w.format = fmt;
        row0 = 0;
        for (size_t i = 0; i < nparts && e == GPU_SUCCESS; i++) {
            const nvfp4_tensor *t = parts[i].dense;
            const size_t pn = (size_t)parts[i].n;
            uint8_t *dst = (uint8_t *)kw->mem[2] + row0 * k * item;
            if (dense_format(t->dtype) == fmt) {
                e = gpu_copy_h2d(dst, t->data, pn * k * item, ctx->stream);
            } else {
                /* this part's rows converted to float32, exactly */
                float *tmp = (float *)malloc(pn * k * sizeof(float));
                if (!tmp) {
                    nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", t->name, -1,
                                    "out of host memory converting to float32");
                    goto fail;
                }
                for (size_t j = 0; j < pn * k; j++)
                    nvfp4_quant_read_float(t, j, &tmp[j]);
                e = gpu_copy_h2d(dst, tmp, pn * k * sizeof(float), ctx->stream);
                if (e == GPU_SUCCESS)
                    e = gpu_stream_sync(ctx->stream);
                free(tmp);
            }
            row0 += pn;
        }
        kw->w.dense = kw->mem[2];
    }
    if (e == GPU_SUCCESS && desc->has_bias) {
        host = (float *)calloc(n, sizeof(float));
        if (!host) {
            nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", name, -1, "out of host memory");
            goto fail;
        }
        row0 = 0;
        for (size_t i = 0; i < nparts; i++) {
            if (parts[i].bias)
                for (size_t j = 0; j < (size_t)parts[i].n; j++)
                    nvfp4_quant_read_float(parts[i].bias, j, &host[row0 + j]);
            row0 += (size_t)parts[i].n;
        }
        if (!(kw->mem[3] = dev_alloc(n * sizeof(float), name, err)))
            goto fail;
        e = gpu_copy_h2d(kw->mem[3], host, n * sizeof(float), ctx->stream);
        kw->w.bias = (const float *)kw->mem[3];
    }
    /* wait: the copies read the mapped file and HOST */
    if (e == GPU_SUCCESS)
        e = gpu_stream_sync(ctx->stream);
    if (e != GPU_SUCCESS) {
        gerr(e, name, err);
        goto fail;
    }
    free(host);
    return kw;

fail:
    (void)gpu_stream_sync(ctx->stream);
    free(host);
    g_kweight_free(ctx, kw);
    return NULL;
}

/* ---- operations --------------------------------------------------------------------- */

static nvfp4_status g_linear(void *c, void *p, const nvfp4_kweight_desc *desc, const float *x,
                             size_t m, float *y, nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    gkw *kw = (gkw *)p;
    float *xq = NULL;
    size_t bytes;
    const int force = ctx->force;
    static const char *const path_names[] = {"auto", "gemv", "tiled", "mma", "fp4"};

    (void)desc;
    (void)gpu_set_device(ctx->device);
    /* benchmarks and tests pin a path at open: gemv, tiled, mma (BF16
     * tensor cores; "wmma" is its old name) or fp4 (W4A4 on FP4 tensor
     * cores) */
    if ((force == 3 && !ctx->dev.mma) ||
        (force == 4 && (!ctx->dev.fp4mma || kw->w.format != GK_NVFP4 ||
                        !(kw->w.input_scale > 0.0f))))
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, "", "linear", -1,
                               "%s: linear path \"%s\" (option linear= or NVFP4_GPU_LINEAR) "
                               "is not available for this %s weight on device %s (%s)",
                               GPU_VENDOR_NAME, path_names[force],
                               kw->w.format == GK_NVFP4 && kw->w.input_scale > 0.0f ? "W4A4"
                                                                                  : "non-W4A4",
                               ctx->info.name, ctx->info.arch);
    if (kw->w.format == GK_NVFP4 && kw->w.input_scale > 0.0f) {
        if (!mul_ok(m, (size_t)kw->w.k, &bytes) || !mul_ok(bytes, sizeof(float), &bytes))
            return nvfp4_error_set(err, NVFP4_ERR_OVERFLOW, "", "linear", -1,
                                   "activation of %zu x %lld overflows", m,
                                   (long long)kw->w.k);
        /* the FP4 tensor-core path puts the activations' scales after the
         * codes at the next 256-byte boundary (kernels.cu fp4_scales_offset):
         * m k / 2 + 255 + m k / 16 bytes, within 4 m k + 256 */
        if (bytes > SIZE_MAX - 256)
            return nvfp4_error_set(err, NVFP4_ERR_OVERFLOW, "", "linear", -1,
                                   "activation of %zu x %lld overflows", m,
                                   (long long)kw->w.k);
        bytes += 256;
        if (!(xq = (float *)scratch(ctx, bytes, "linear", err)))
            return err ? err->status : NVFP4_ERR_DEVICE_OOM;
    }
    return gerr(gk_linear(&ctx->dev, &kw->w, x, (int64_t)m, y, xq, force, ctx->stream),
                "linear", err);
}

static nvfp4_status g_embed(void *c, void *p, const nvfp4_kweight_desc *desc,
                            const int32_t *ids, size_t m, float *y, nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    (void)desc;
    (void)gpu_set_device(ctx->device);
    if (m > 65535)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, "", "embed", -1,
                               "%s: at most 65535 tokens per call (%zu given)",
                               GPU_VENDOR_NAME, m);
    return gerr(gk_embed(&((gkw *)p)->w, ids, (int64_t)m, y, ctx->flag, ctx->stream),
                "embed", err);
}

/* Kernels that put one row per block take at most 2^31 - 1 rows. */
static nvfp4_status rows_ok(size_t m, const char *op, nvfp4_error *err)
{
    if (m > 0x7FFFFFFFu)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, "", op, -1,
                               "%s: %zu rows exceed the grid limit", GPU_VENDOR_NAME, m);
    return NVFP4_OK;
}

static nvfp4_status g_rmsnorm(void *c, const float *x, const float *weight, size_t m,
                              size_t d, float eps, float *y, nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    nvfp4_status st = rows_ok(m, "rmsnorm", err);
    if (st != NVFP4_OK)
        return st;
    (void)gpu_set_device(ctx->device);
    return gerr(gk_rmsnorm(x, weight, (int64_t)m, (int64_t)d, eps, y, ctx->stream), "rmsnorm",
                err);
}

static nvfp4_status g_rope(void *c, float *x, const int32_t *positions, size_t m,
                           size_t heads, size_t head_dim, size_t rot_dim,
                           const float *inv_freq, float attn_factor, nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    (void)gpu_set_device(ctx->device);
    return gerr(gk_rope(x, positions, (int64_t)m, (int64_t)heads, (int64_t)head_dim,
                        (int64_t)rot_dim, inv_freq, attn_factor, ctx->stream),
                "rope", err);
}

static nvfp4_status g_attention(void *c, const float *q, const float *k, const float *v,
                                float *k_cache, float *v_cache, size_t max_ctx, size_t pos0,
                                size_t m, size_t nh, size_t nkv, size_t hd, float scale,
                                float *out, nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    float *part = NULL;
    size_t need;

    if (hd > GK_ATTN_MAX_HD || nh > 0x7FFFFFFFu || m > 65535)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, "", "attention", -1,
                               "%s: head_dim %zu (max %d), %zu heads, %zu tokens (max 65535 "
                               "per call)",
                               GPU_VENDOR_NAME, hd, GK_ATTN_MAX_HD, nh, m);
    (void)gpu_set_device(ctx->device);
    need = gk_attention_scratch((int64_t)pos0, (int64_t)m, (int64_t)nh, (int64_t)hd);
    if (need && !(part = (float *)scratch(ctx, need, "attention", err)))
        return err ? err->status : NVFP4_ERR_DEVICE_OOM;
    return gerr(gk_attention(q, k, v, k_cache, v_cache, (int64_t)max_ctx, (int64_t)pos0,
                             (int64_t)m, (int64_t)nh, (int64_t)nkv, (int64_t)hd, scale, out,
                             part, ctx->stream),
                "attention", err);
}

static nvfp4_status g_attention_paged(void *c, const float *q, const float *k, const float *v,
                                      const nvfp4_kv_pages *kv, size_t m, size_t nh,
                                      size_t nkv, size_t hd, float scale, float *out,
                                      nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    void *scr;
    size_t need;

    if (hd > GK_ATTN_MAX_HD || nh > 0x7FFFFFFFu || m > 65535)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, "", "attention_paged", -1,
                               "%s: head_dim %zu (max %d), %zu heads, %zu tokens (max 65535 "
                               "per call)",
                               GPU_VENDOR_NAME, hd, GK_ATTN_MAX_HD, nh, m);
    (void)gpu_set_device(ctx->device);
    need = gk_attention_paged_scratch((int64_t)kv->max_len, (int64_t)m, (int64_t)nh,
                                      (int64_t)hd);
    if (!(scr = scratch(ctx, need, "attention_paged", err)))
        return err ? err->status : NVFP4_ERR_DEVICE_OOM;
    return gerr(gk_attention_paged(q, k, v, kv->k_pool, kv->v_pool,
                                   kv->dtype == NVFP4_KV_ELEM_FP8_E4M3, kv->k_scale,
                                   kv->v_scale, (int64_t)kv->nblocks,
                                   (int64_t)kv->block, kv->tables, (int64_t)kv->ntables,
                                   (int64_t)kv->max_blocks, kv->pos, kv->seq,
                                   (int64_t)kv->max_len, (int64_t)kv->window, kv->sinks,
                                   (int64_t)m,
                                   (int64_t)nh,
                                   (int64_t)nkv, (int64_t)hd, scale, out, scr, ctx->flag,
                                   ctx->stream),
                "attention_paged", err);
}

static nvfp4_status g_silu_mul(void *c, const float *gu, size_t m, size_t inter, float *out,
                               nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    (void)gpu_set_device(ctx->device);
    return gerr(gk_silu_mul(gu, (int64_t)m, (int64_t)inter, out, ctx->stream), "silu_mul",
                err);
}

static nvfp4_status g_softmax(void *c, const float *x, size_t m, size_t n, float *y,
                              nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    nvfp4_status st = rows_ok(m, "softmax", err);
    if (st != NVFP4_OK)
        return st;
    (void)gpu_set_device(ctx->device);
    return gerr(gk_softmax(x, (int64_t)m, (int64_t)n, y, 0, ctx->stream), "softmax", err);
}

static nvfp4_status g_logsoftmax(void *c, const float *x, size_t m, size_t n, float *y,
                                 nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    nvfp4_status st = rows_ok(m, "logsoftmax", err);
    if (st != NVFP4_OK)
        return st;
    (void)gpu_set_device(ctx->device);
    return gerr(gk_softmax(x, (int64_t)m, (int64_t)n, y, 1, ctx->stream), "logsoftmax", err);
}

static nvfp4_status g_topk(void *c, const float *logits, size_t m, size_t e, size_t k,
                           int renorm, int32_t *idx, float *weights, nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    nvfp4_status st = rows_ok(m, "topk", err);
    if (st != NVFP4_OK)
        return st;
    if (e > GK_TOPK_MAX_E)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, "", "topk", -1,
                               "%s: %zu experts (at most %d)", GPU_VENDOR_NAME, e,
                               GK_TOPK_MAX_E);
    (void)gpu_set_device(ctx->device);
    return gerr(gk_topk(logits, (int64_t)m, (int64_t)e, (int64_t)k, renorm, idx, weights,
                        ctx->stream),
                "topk", err);
}

static nvfp4_status g_add(void *c, const float *a, const float *b, size_t n, float *y,
                          nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    (void)gpu_set_device(ctx->device);
    return gerr(gk_add(a, b, (int64_t)n, y, ctx->stream), "add", err);
}

static nvfp4_status g_gate_add(void *c, const float *x, const float *gate, size_t m, size_t n,
                               float *y, nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    (void)gpu_set_device(ctx->device);
    return gerr(gk_gate_add(x, gate, (int64_t)m, (int64_t)n, y, ctx->stream), "gate_add", err);
}

static nvfp4_status g_glu(void *c, nvfp4_glu_kind kind, const float *gu, size_t m,
                          size_t inter, float alpha, float limit, float *out, nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    (void)gpu_set_device(ctx->device);
    return gerr(gk_glu((int)kind, gu, (int64_t)m, (int64_t)inter, alpha, limit, out,
                       ctx->stream),
                "glu", err);
}

static nvfp4_status g_scale(void *c, const float *x, size_t n, float s, float *y,
                            nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    (void)gpu_set_device(ctx->device);
    return gerr(gk_scale(x, (int64_t)n, s, y, ctx->stream), "scale", err);
}

static nvfp4_status g_argmax(void *c, const float *x, size_t m, size_t n, int32_t *out,
                             nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    nvfp4_status st = rows_ok(m, "argmax", err);
    if (st != NVFP4_OK)
        return st;
    if (n > 0x7FFFFFFFu)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, "", "argmax", -1,
                               "%s: rows of %zu exceed int32 indices", GPU_VENDOR_NAME, n);
    (void)gpu_set_device(ctx->device);
    return gerr(gk_argmax(x, (int64_t)m, (int64_t)n, out, ctx->stream), "argmax", err);
}

/* May the 16-byte GEMV loads run on W with inputs at X? (see linear_launch) */
static int vec_ok(const gk_weight *w, const void *x)
{
    if ((uintptr_t)x % 16)
        return 0;
    if (w->format == GK_NVFP4)
        return w->k % 32 == 0;
    return w->k % 8 == 0 && (uintptr_t)w->dense % 16 == 0;
}

/* The device view of expert I's projection in the registry's array KW. */
static const gk_weight *expert_w(nvfp4_kweight *const *kw, size_t i)
{
    return &((const gkw *)kw[i]->impl)->w;
}

/* Whether SET holds exactly these experts' views (no copy is made). */
static int moe_set_is(const struct moe_set *set, nvfp4_kweight *const *w13,
                      nvfp4_kweight *const *w2, size_t experts)
{
    if (set->count != 2 * experts)
        return 0;
    for (size_t i = 0; i < experts; i++)
        if (memcmp(&set->host[i], expert_w(w13, i), sizeof(gk_weight)) != 0 ||
            memcmp(&set->host[experts + i], expert_w(w2, i), sizeof(gk_weight)) != 0)
            return 0;
    return 1;
}

static nvfp4_status g_moe(void *c, nvfp4_kweight *const *w13, nvfp4_kweight *const *w2,
                          size_t experts, const float *x, size_t m, const int32_t *idx,
                          const float *weights, size_t k, nvfp4_glu_kind kind, float alpha,
                          float limit, float *y, nvfp4_error *err)
{
    gctx *ctx = (gctx *)c;
    const gk_weight *a0 = expert_w(w13, 0), *b0 = expert_w(w2, 0);
    const int64_t hidden = a0->k, inter = b0->k;
    const int qdq13 = a0->format == GK_NVFP4 && a0->input_scale > 0.0f;
    const int qdq2 = b0->format == GK_NVFP4 && b0->input_scale > 0.0f;
    int vec13 = 1, vec2 = 1;
    size_t need, pairs, ndesc;
    gk_weight *host;
    struct moe_set *set;
    void *scr;
    gpu_error_t e;

    (void)gpu_set_device(ctx->device);
    if (experts > 65535 || !mul_ok(m, k, &pairs) || pairs > 0x7FFFFFFFu)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, "", "moe", -1,
                               "%s: %zu experts (max 65535) and %zu x %zu routed pairs (max "
                               "2^31 - 1)",
                               GPU_VENDOR_NAME, experts, m, k);
    /* one kernel per projection serves every expert: they must agree */
    for (size_t i = 0; i < experts; i++) {
        const gk_weight *a = expert_w(w13, i), *b = expert_w(w2, i);
        if (a->format != a0->format || b->format != b0->format ||
            (a->format == GK_NVFP4 && (a->input_scale > 0.0f) != qdq13) ||
            (b->format == GK_NVFP4 && (b->input_scale > 0.0f) != qdq2))
            return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, "", "moe", -1,
                                   "%s: expert %zu is stored differently from expert 0 "
                                   "(format or W4A4/W4A16 mode)",
                                   GPU_VENDOR_NAME, i);
        if (a->k != hidden || a->n != 2 * inter || b->n != hidden || b->k != inter)
            return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, "", "moe", -1,
                                   "expert %zu: w13 is %lld x %lld and w2 %lld x %lld, "
                                   "expected [%lld, %lld] and [%lld, %lld]",
                                   i, (long long)a->n, (long long)a->k, (long long)b->n,
                                   (long long)b->k, (long long)(2 * inter), (long long)hidden,
                                   (long long)hidden, (long long)inter);
        /* W4A4 reads the qdq'd copy in (aligned) scratch, W4A16 x itself */
        vec13 &= vec_ok(a, qdq13 ? NULL : (const void *)x);
        vec2 &= vec_ok(b, NULL); /* the activations live in scratch */
    }
    if ((qdq13 && hidden % 16) || (qdq2 && inter % 16))
        return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, "", "moe", -1,
                               "hidden %lld and inter %lld must be multiples of 16 for W4A4",
                               (long long)hidden, (long long)inter);
    if (!mul_ok(experts, 2, &ndesc))
        return nvfp4_error_set(err, NVFP4_ERR_OVERFLOW, "", "moe", -1, "too many experts");
    need = gk_moe_scratch((int64_t)experts, (int64_t)m, (int64_t)k, hidden, inter);
    if (!(scr = scratch(ctx, need, "moe", err)))
        return err ? err->status : NVFP4_ERR_DEVICE_OOM;
    /* a decode step finds its layer's set and allocates nothing */
    for (set = ctx->moe_sets; set; set = set->next)
        if (moe_set_is(set, w13, w2, experts))
            break;
    if (!set) {
        host = (gk_weight *)malloc(ndesc * sizeof(gk_weight));
        if (!host)
            return nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", "moe", -1, "out of host memory");
        for (size_t i = 0; i < experts; i++) {
            host[i] = *expert_w(w13, i);
            host[experts + i] = *expert_w(w2, i);
        }
        set = (struct moe_set *)calloc(1, sizeof(*set));
        if (!set) {
            free(host);
            return nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", "moe", -1,
                                   "out of host memory");
        }
        set->count = ndesc;
        set->host = host;
        if (!(set->dev = (gk_weight *)dev_alloc(ndesc * sizeof(gk_weight), "moe", err))) {
            free(host);
            free(set);
            return err ? err->status : NVFP4_ERR_DEVICE_OOM;
        }
        /* synchronous: the copy must not outlive a failure path's free */
        e = gpu_copy_h2d(set->dev, host, ndesc * sizeof(gk_weight), ctx->stream);
        if (e == GPU_SUCCESS)
            e = gpu_stream_sync(ctx->stream);
        if (e != GPU_SUCCESS) {
            (void)gpu_free(set->dev);
            free(host);
            free(set);
            return gerr(e, "moe", err);
        }
        set->next = ctx->moe_sets;
        ctx->moe_sets = set;
    }
    e = gk_moe(&ctx->dev, set->dev, set->dev + experts, a0->format, b0->format, vec13, vec2,
               qdq13, qdq2, (int64_t)experts, x, (int64_t)m, idx, weights, (int64_t)k, hidden,
               inter, (int)kind, alpha, limit, y, scr, ctx->flag, ctx->stream);
    return gerr(e, "moe", err);
}

/* ---- the table ---------------------------------------------------------------------- */

static const nvfp4_backend_iface g_iface = {
    NVFP4_BACKEND_ABI_VERSION,
    GPU_VENDOR_NAME,
    g_available,
    g_open,
    g_close,
    g_get_caps,
    g_supports,
    g_set_threads,
    g_threads,
    g_sync,
    g_alloc,
    g_release,
    g_upload,
    g_download,
    g_kweight_upload,
    g_kweight_free,
    g_linear,
    g_embed,
    g_rmsnorm,
    g_rope,
    g_attention,
    g_silu_mul,
    g_softmax,
    g_topk,
    g_moe,
    g_add,
    g_logsoftmax,
    g_argmax,
    g_gate_add,
    g_attention_paged,
    g_glu,
    g_scale,
    NULL, /* linear_multi: the registry calls linear for each weight */
};

extern "C" NVFP4_API const nvfp4_backend_iface *nvfp4_backend_entry(uint32_t abi_version)
{
    return abi_version == NVFP4_BACKEND_ABI_VERSION ? &g_iface : NULL;
}
