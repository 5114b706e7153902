/* SPDX-License-Identifier: MIT */
/* The backend registry and the public front of every operation: argument
 * and shape checks live here, once, so that each backend (built-in CPU,
 * dlopen'ed GPU ones, see backend-impl.h) receives only consistent input. */
#include "config.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend-impl.h"

#ifndef NVFP4_BACKEND_DIR
#define NVFP4_BACKEND_DIR "/usr/local/lib/nvfp4/backends"
#endif

struct nvfp4_backend {
    const nvfp4_backend_iface *iface;
    void *ctx;
    nvfp4_backend_caps caps; /* get_caps(), once at open */
};
/* struct nvfp4_kweight: backend-impl.h (the MoE entry reads it) */

static nvfp4_op linear_op(const nvfp4_kweight *w);

/* ---- registry ------------------------------------------------------------ */

#define MAX_BACKENDS 8
/* GPU backends the loader looks for; a new one only needs its name here. */
static const char *const plugin_names[] = {"cuda", "hip"};

static const nvfp4_backend_iface *registry[MAX_BACKENDS];
/* the plug-ins' device communicators (backend-impl.h), NULL where none */
static const nvfp4_backend_comm_iface *registry_comm[MAX_BACKENDS];
static size_t registry_count;
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;

/* Why a plug-in file that exists was not registered (dlerror()'s text, a
 * missing entry point, a foreign ABI), per plugin_names[] entry: kept for
 * nvfp4_backend_open()'s error, where "not registered" alone would hide it.
 * Written once under registry_once, read after it. */
static char plugin_error[sizeof(plugin_names) / sizeof(plugin_names[0])][600];

/* A reason, cut to the buffer (paths may be long; the start says enough). */
static void set_why(char *why, size_t size, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, size, fmt, ap);
    va_end(ap);
}

/* Try DIR/nvfp4-backend-NAME.so: 1 when it was registered, 0 when there is
 * no such file, -1 when it exists but failed (the reason in WHY). */
static int try_plugin(const char *dir, size_t dirlen, const char *name, char *why,
                      size_t whysize)
{
    char path[4096];
    void *h;
    nvfp4_backend_entry_fn entry;
    const nvfp4_backend_iface *iface;
    const char *dl;
    int len = snprintf(path, sizeof(path), "%.*s/nvfp4-backend-%s.so", (int)dirlen, dir,
                       name);

    if (len < 0 || (size_t)len >= sizeof(path) || access(path, R_OK) != 0)
        return 0;
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        dl = dlerror();
        if (!dl)
            dl = "dlopen failed";
        /* glibc's text usually starts with the path already */
        if (strstr(dl, path))
            set_why(why, whysize, "%s", dl);
        else
            set_why(why, whysize, "%s: %s", path, dl);
        return -1;
    }
    *(void **)&entry = dlsym(h, NVFP4_BACKEND_ENTRY_SYMBOL);
    iface = entry ? entry(NVFP4_BACKEND_ABI_VERSION) : NULL;
    if (entry && !iface) {
        /* which ABI the plug-in was built for: it answers only its own */
        uint32_t v = 0;
        for (uint32_t t = 1; t <= 64 && !v; t++)
            if (t != NVFP4_BACKEND_ABI_VERSION && entry(t))
                v = t;
        if (v)
            set_why(why, whysize,
                    "%s: built for backend ABI version %u, this libnvfp4-kernels needs "
                    "version %u: rebuild the plug-in with this library",
                    path, v, NVFP4_BACKEND_ABI_VERSION);
        else
            set_why(why, whysize, "%s: not a backend of ABI version %u (nor of any other "
                    "version up to 64)", path, NVFP4_BACKEND_ABI_VERSION);
        dlclose(h);
        return -1;
    }
    if (!iface || iface->abi_version != NVFP4_BACKEND_ABI_VERSION || !iface->name ||
        strcmp(iface->name, name) != 0 || registry_count >= MAX_BACKENDS) {
        if (!entry)
            set_why(why, whysize, "%s: no %s symbol", path, NVFP4_BACKEND_ENTRY_SYMBOL);
        else if (iface->abi_version != NVFP4_BACKEND_ABI_VERSION)
            set_why(why, whysize, "%s: answered for backend ABI version %u with a table of "
                    "version %u", path, NVFP4_BACKEND_ABI_VERSION, iface->abi_version);
        else if (!iface->name || strcmp(iface->name, name) != 0)
            set_why(why, whysize, "%s: calls itself \"%s\", not \"%s\"", path,
                     iface->name ? iface->name : "(null)", name);
        else
            set_why(why, whysize, "%s: more than %d backends", path, MAX_BACKENDS);
        dlclose(h);
        return -1;
    }
    {
        nvfp4_backend_comm_entry_fn centry;
        *(void **)&centry = dlsym(h, NVFP4_BACKEND_COMM_SYMBOL);
        registry_comm[registry_count] = centry ? centry(NVFP4_BACKEND_COMM_VERSION) : NULL;
    }
    registry[registry_count++] = iface; /* never unloaded: see backend-impl.h */
    return 1;
}

static void registry_init(void)
{
    const char *env = getenv("NVFP4_BACKEND_PATH");

    registry[registry_count++] = nvfp4k_cpu_iface();
    for (size_t i = 0; i < sizeof(plugin_names) / sizeof(plugin_names[0]); i++) {
        int found = 0;
        const char *p = env;
        char why[sizeof(plugin_error[0])];

        /* the first failure is the one reported: it is the file the user
         * meant, earlier in the search order */
        while (p && *p && found != 1) {
            const char *end = strchr(p, ':');
            size_t len = end ? (size_t)(end - p) : strlen(p);
            if (len > 0 && (found = try_plugin(p, len, plugin_names[i], why, sizeof(why))) < 0 &&
                !plugin_error[i][0])
                memcpy(plugin_error[i], why, sizeof(why));
            p = end ? end + 1 : NULL;
        }
        if (found != 1 && (found = try_plugin(NVFP4_BACKEND_DIR, strlen(NVFP4_BACKEND_DIR),
                                              plugin_names[i], why, sizeof(why))) < 0 &&
            !plugin_error[i][0])
            memcpy(plugin_error[i], why, sizeof(why));
        if (found == 1)
            plugin_error[i][0] = '\0';
    }
}

static void registry_ready(void)
{
    pthread_once(&registry_once, registry_init);
}

const char *nvfp4_kernels_version(void)
{
    return NVFP4_VERSION_STRING;
}

const char *nvfp4_op_name(nvfp4_op op)
{
    static const char *const names[NVFP4_OP_COUNT] = {
        "linear_w4a4", "linear_w4a16", "linear_dense", "embed",   "rmsnorm",
        "rope",        "attention",    "silu_mul",     "softmax", "topk",
        "moe",         "add",          "logsoftmax",   "argmax",  "gate_add",
        "attention_paged", "glu", "scale",
    };
    return (unsigned)op < NVFP4_OP_COUNT ? names[op] : "unknown";
}

size_t nvfp4_backend_count(void)
{
    registry_ready();
    return registry_count;
}

const char *nvfp4_backend_name_at(size_t i)
{
    registry_ready();
    return i < registry_count ? registry[i]->name : NULL;
}

static const nvfp4_backend_iface *registry_find(const char *name)
{
    registry_ready();
    for (size_t i = 0; i < registry_count; i++)
        if (strcmp(registry[i]->name, name) == 0)
            return registry[i];
    return NULL;
}

int nvfp4_backend_available(const char *name)
{
    const nvfp4_backend_iface *b = name ? registry_find(name) : NULL;
    return b && b->available();
}

/* "cpu, cuda (no device)" - for error messages. */
static void describe_backends(char *buf, size_t size)
{
    size_t used = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < registry_count && used < size; i++) {
        int n = snprintf(buf + used, size - used, "%s%s%s", i ? ", " : "",
                         registry[i]->name, registry[i]->available() ? "" : " (no device)");
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

nvfp4_backend *nvfp4_backend_open(const char *name, nvfp4_error *err)
{
    return nvfp4_backend_open_with(name, NULL, err);
}

nvfp4_backend *nvfp4_backend_open_with(const char *name, const char *params,
                                       nvfp4_error *err)
{
    const nvfp4_backend_iface *iface;
    const char *origin = "requested";
    char list[256];
    nvfp4_backend *be;

    if (!name || !*name) {
        name = getenv("NVFP4_BACKEND");
        origin = "NVFP4_BACKEND";
        if (!name || !*name) {
            name = "cpu";
            origin = "default";
        }
    }
    iface = registry_find(name);
    describe_backends(list, sizeof(list));
    if (!iface) {
        for (size_t i = 0; i < sizeof(plugin_names) / sizeof(plugin_names[0]); i++)
            if (strcmp(name, plugin_names[i]) == 0 && plugin_error[i][0]) {
                nvfp4_error_set(err, NVFP4_ERR_BACKEND, "", name, -1,
                                "backend \"%s\" (%s) is not registered: its plug-in failed to "
                                "load: %s; registered backends: %s",
                                name, origin, plugin_error[i], list);
                return NULL;
            }
        nvfp4_error_set(err, NVFP4_ERR_BACKEND, "", name, -1,
                        "backend \"%s\" (%s) is not registered; registered backends: %s "
                        "(GPU backends are loaded from NVFP4_BACKEND_PATH or %s)",
                        name, origin, list, NVFP4_BACKEND_DIR);
        return NULL;
    }
    if (!iface->available()) {
        nvfp4_error_set(err, NVFP4_ERR_BACKEND, "", name, -1,
                        "backend \"%s\" (%s) has no usable device on this machine; "
                        "backends: %s",
                        name, origin, list);
        return NULL;
    }
    be = calloc(1, sizeof(*be));
    if (!be) {
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", name, -1, "out of memory");
        return NULL;
    }
    be->iface = iface;
    be->ctx = iface->open(params && *params ? params : NULL, err);
    if (!be->ctx) {
        free(be);
        return NULL;
    }
    if (iface->get_caps)
        iface->get_caps(be->ctx, &be->caps);
    return be;
}

void nvfp4_backend_free(nvfp4_backend *be)
{
    if (!be)
        return;
    be->iface->close(be->ctx);
    free(be);
}

const char *nvfp4_backend_name(const nvfp4_backend *be)
{
    return be ? be->iface->name : NULL;
}

static int iface_has(const nvfp4_backend_iface *f, nvfp4_op op)
{
    switch (op) {
    case NVFP4_OP_LINEAR_W4A4:
    case NVFP4_OP_LINEAR_W4A16:
    case NVFP4_OP_LINEAR_DENSE: return f->linear != NULL;
    case NVFP4_OP_EMBED: return f->embed != NULL;
    case NVFP4_OP_RMSNORM: return f->rmsnorm != NULL;
    case NVFP4_OP_ROPE: return f->rope != NULL;
    case NVFP4_OP_ATTENTION: return f->attention != NULL;
    case NVFP4_OP_SILU_MUL: return f->silu_mul != NULL;
    case NVFP4_OP_SOFTMAX: return f->softmax != NULL;
    case NVFP4_OP_TOPK: return f->topk != NULL;
    case NVFP4_OP_MOE: return f->moe != NULL;
    case NVFP4_OP_ADD: return f->add != NULL;
    case NVFP4_OP_LOGSOFTMAX: return f->logsoftmax != NULL;
    case NVFP4_OP_ARGMAX: return f->argmax != NULL;
    case NVFP4_OP_GATE_ADD: return f->gate_add != NULL;
    case NVFP4_OP_ATTENTION_PAGED: return f->attention_paged != NULL;
    case NVFP4_OP_GLU: return f->glu != NULL;
    case NVFP4_OP_SCALE: return f->scale != NULL;
    default: return 0;
    }
}

/* The op's entry exists and the backend runs it on weights like W (NULL:
 * no weight, or some weight format). */
static int be_supports(const nvfp4_backend *be, nvfp4_op op, const nvfp4_kweight_desc *w)
{
    if (!iface_has(be->iface, op))
        return 0;
    return be->iface->supports ? be->iface->supports(be->ctx, op, w) != 0 : 1;
}

int nvfp4_backend_supports(const nvfp4_backend *be, nvfp4_op op)
{
    return be && be_supports(be, op, NULL);
}

/* The scheme a weight op takes; -2: any scheme; -1: an op without a weight. */
static int op_scheme(nvfp4_op op)
{
    switch (op) {
    case NVFP4_OP_LINEAR_W4A4: return NVFP4_SCHEME_W4A4;
    case NVFP4_OP_LINEAR_W4A16: return NVFP4_SCHEME_W4A16;
    case NVFP4_OP_LINEAR_DENSE: return NVFP4_SCHEME_NONE;
    case NVFP4_OP_EMBED:
    case NVFP4_OP_MOE: return -2; /* any scheme */
    default: return -1;
    }
}

int nvfp4_backend_supports_format(const nvfp4_backend *be, nvfp4_op op, nvfp4_scheme scheme,
                                  nvfp4_dtype dtype)
{
    nvfp4_kweight_desc d;
    int want = op_scheme(op);

    if (!be || (unsigned)op >= NVFP4_OP_COUNT)
        return 0;
    if (want == -1)
        return be_supports(be, op, NULL);
    if ((want >= 0 && (int)scheme != want) ||
        (scheme != NVFP4_SCHEME_NONE && scheme != NVFP4_SCHEME_W4A4 &&
         scheme != NVFP4_SCHEME_W4A16))
        return 0;
    if (scheme == NVFP4_SCHEME_NONE && dtype != NVFP4_DTYPE_F32 &&
        dtype != NVFP4_DTYPE_BF16 && dtype != NVFP4_DTYPE_F16)
        return 0;
    memset(&d, 0, sizeof(d));
    d.scheme = scheme;
    d.dtype = scheme == NVFP4_SCHEME_NONE ? dtype : NVFP4_DTYPE_U8;
    d.input_scale = scheme == NVFP4_SCHEME_W4A4 ? 1.0f : 0.0f;
    d.input_gs = d.input_scale;
    d.weight_scale_2 = scheme == NVFP4_SCHEME_NONE ? 0.0f : 1.0f;
    return be_supports(be, op, &d);
}

/* "BF16", "NVFP4 w4a4", "F32 with NVFP4 activations": for messages. */
static const char *format_name(const nvfp4_kweight_desc *d, char *buf, size_t size)
{
    if (d->scheme != NVFP4_SCHEME_NONE)
        snprintf(buf, size, "NVFP4 %s", nvfp4_scheme_name(d->scheme));
    else
        snprintf(buf, size, "%s%s",
                 d->dtype == NVFP4_DTYPE_COUNT ? "mixed-dtype" : nvfp4_dtype_name(d->dtype),
                 d->input_scale > 0.0f ? " with NVFP4 activations" : "");
    return buf;
}

void nvfp4_backend_set_threads(nvfp4_backend *be, int threads)
{
    if (be && be->iface->set_threads)
        be->iface->set_threads(be->ctx, threads < 0 ? 0 : threads);
}

int nvfp4_backend_threads(const nvfp4_backend *be)
{
    return be && be->iface->threads ? be->iface->threads(be->ctx) : 1;
}

/* ---- argument checks shared by all operations --------------------------- */

#define CHECK_BE(be, err, opname)                                                     \
    do {                                                                              \
        if (!(be))                                                                    \
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", opname, -1,            \
                                   "no backend given");                               \
    } while (0)

static nvfp4_status unsupported(nvfp4_backend *be, nvfp4_op op, nvfp4_error *err)
{
    return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, "", nvfp4_op_name(op), -1,
                           "backend \"%s\" does not implement %s", be->iface->name,
                           nvfp4_op_name(op));
}

/* OP is implemented, but not for this weight's format (supports()). */
static nvfp4_status unsupported_w(nvfp4_backend *be, nvfp4_op op, const nvfp4_kweight *w,
                                  nvfp4_error *err)
{
    char f[64];

    if (!iface_has(be->iface, op))
        return unsupported(be, op, err);
    return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, "", nvfp4_op_name(op), -1,
                           "backend \"%s\" does not run %s on %s weights", be->iface->name,
                           nvfp4_op_name(op), format_name(&w->desc, f, sizeof(f)));
}

static nvfp4_status null_arg(const char *op, const char *arg, nvfp4_error *err)
{
    return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", op, -1, "%s is NULL", arg);
}

#define NEED(p, op, err)                                                              \
    do {                                                                              \
        if (!(p))                                                                     \
            return null_arg(op, #p, err);                                             \
    } while (0)

/* a * b * c elements: no overflow, and at most 2^48 so that backends can
 * add padding and multiply by an element size without checking again. */
static int count_ok(size_t a, size_t b, size_t c)
{
    size_t t;
    return !__builtin_mul_overflow(a, b, &t) && !__builtin_mul_overflow(t, c, &t) &&
           (uint64_t)t <= ((uint64_t)1 << 48);
}

static nvfp4_status too_big(const char *op, nvfp4_error *err)
{
    return nvfp4_error_set(err, NVFP4_ERR_OVERFLOW, "", op, -1,
                           "element count overflows the address space");
}

nvfp4_status nvfp4_backend_sync(nvfp4_backend *be, nvfp4_error *err)
{
    CHECK_BE(be, err, "sync");
    return be->iface->sync ? be->iface->sync(be->ctx, err) : NVFP4_OK;
}

/* ---- memory -------------------------------------------------------------- */

void *nvfp4_backend_alloc(nvfp4_backend *be, size_t bytes, nvfp4_error *err)
{
    if (!be) {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "alloc", -1, "no backend given");
        return NULL;
    }
    return be->iface->alloc(be->ctx, bytes ? bytes : 1, err);
}

void nvfp4_backend_release(nvfp4_backend *be, void *ptr)
{
    if (be && ptr)
        be->iface->release(be->ctx, ptr);
}

nvfp4_status nvfp4_backend_upload(nvfp4_backend *be, void *dst, const void *src,
                                  size_t bytes, nvfp4_error *err)
{
    CHECK_BE(be, err, "upload");
    if (bytes == 0)
        return NVFP4_OK;
    NEED(dst, "upload", err);
    NEED(src, "upload", err);
    return be->iface->upload(be->ctx, dst, src, bytes, err);
}

nvfp4_status nvfp4_backend_download(nvfp4_backend *be, void *dst, const void *src,
                                    size_t bytes, nvfp4_error *err)
{
    CHECK_BE(be, err, "download");
    if (bytes == 0)
        return NVFP4_OK;
    NEED(dst, "download", err);
    NEED(src, "download", err);
    return be->iface->download(be->ctx, dst, src, bytes, err);
}

/* ---- weights ------------------------------------------------------------- */

nvfp4_kweight *nvfp4_kweight_upload(nvfp4_backend *be, const nvfp4_linear *parts,
                                    size_t nparts, nvfp4_error *err)
{
    return nvfp4_kweight_upload_ex(be, parts, nparts, 0, err);
}

nvfp4_kweight *nvfp4_kweight_upload_ex(nvfp4_backend *be, const nvfp4_linear *parts,
                                       size_t nparts, unsigned flags, nvfp4_error *err)
{
    nvfp4_kweight_desc d;
    nvfp4_kweight *w;
    uint64_t nk;

    if (!be || !parts || nparts == 0) {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "kweight_upload", -1,
                        "%s", !be ? "no backend given" : "no parts given");
        return NULL;
    }
    if (flags & ~NVFP4_KWEIGHT_COPY) {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "kweight_upload", -1,
                        "unknown flags 0x%x (known: NVFP4_KWEIGHT_COPY 0x%x)",
                        flags & ~NVFP4_KWEIGHT_COPY, NVFP4_KWEIGHT_COPY);
        return NULL;
    }
    memset(&d, 0, sizeof(d));
    d.flags = flags;
    d.scheme = parts[0].scheme;
    d.k = parts[0].k;
    d.weight_scale_2 = parts[0].weight_scale_2;
    for (size_t i = 0; i < nparts; i++) {
        const nvfp4_linear *p = &parts[i];

        if (p->scheme != d.scheme) {
            nvfp4_error_set(err, NVFP4_ERR_INVALID, "", p->prefix, -1,
                            "fused part %zu has scheme %s, part 0 (%s) has %s", i,
                            nvfp4_scheme_name(p->scheme), parts[0].prefix,
                            nvfp4_scheme_name(d.scheme));
            return NULL;
        }
        if (p->k != d.k || p->n <= 0 || p->k <= 0) {
            nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, "", p->prefix, -1,
                            "fused part %zu is [%lld, %lld]; expected k = %lld and n > 0",
                            i, (long long)p->n, (long long)p->k, (long long)d.k);
            return NULL;
        }
        if (__builtin_add_overflow(d.n, p->n, &d.n) ||
            __builtin_mul_overflow((uint64_t)d.n, (uint64_t)d.k, &nk) ||
            nk > ((uint64_t)1 << 48)) {
            nvfp4_error_set(err, NVFP4_ERR_OVERFLOW, "", p->prefix, -1,
                            "fused weight size overflows");
            return NULL;
        }
        /* the part's own invariants: libquant's one check of a Linear
         * (shape, data, block-scale bytes, finite positive scales, dense and
         * bias tensors); what follows is about fusing the parts */
        if (nvfp4_linear_validate(p, err) != NVFP4_OK)
            return NULL;
        if (d.scheme == NVFP4_SCHEME_NONE) {
            /* dequantized NVFP4 shards of an exact fused group (libmodel,
             * DIALECTS.md) keep their W4A4 activation scale: §5 runs before
             * the float product.  All parts or none; the CPU backend only. */
            if ((p->input_scale > 0.0f) != (parts[0].input_scale > 0.0f)) {
                nvfp4_error_set(err, NVFP4_ERR_INVALID, "", p->prefix, -1,
                                "dense part %zu has input scale %g, part 0 (%s) %g", i,
                                p->input_scale, parts[0].prefix, parts[0].input_scale);
                return NULL;
            }
            if (p->input_scale > 0.0f && p->k % NVFP4_BLOCK != 0) {
                nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, "", p->prefix, -1,
                                "NVFP4 activations need k %% 16 == 0, found k = %lld",
                                (long long)p->k);
                return NULL;
            }
            if (p->input_scale > d.input_scale) {
                d.input_scale = p->input_scale;
                d.input_gs = p->input_gs > 0.0f ? p->input_gs : 1.0f / p->input_scale;
            }
        } else {
            /* §4: one fused weight carries one global scale */
            if (p->weight_scale_2 != d.weight_scale_2) {
                nvfp4_error_set(err, NVFP4_ERR_SCALE_MISMATCH, "", p->prefix, -1,
                                "weight_scale_2 %.9g differs from %.9g of %s; run "
                                "nvfp4_linear_fuse_check first (§4)",
                                p->weight_scale_2, d.weight_scale_2, parts[0].prefix);
                return NULL;
            }
            if (p->input_scale > d.input_scale) { /* §4: max over shards */
                d.input_scale = p->input_scale;
                d.input_gs = p->input_gs > 0.0f ? p->input_gs : 1.0f / p->input_scale;
            }
        }
        if (p->bias)
            d.has_bias = 1;
    }
    if (d.scheme == NVFP4_SCHEME_W4A16)
        d.input_scale = d.input_gs = 0.0f;
    d.dtype = NVFP4_DTYPE_U8;
    if (d.scheme == NVFP4_SCHEME_NONE) {
        d.dtype = parts[0].dense->dtype;
        for (size_t i = 1; i < nparts; i++)
            if (parts[i].dense->dtype != d.dtype)
                d.dtype = NVFP4_DTYPE_COUNT;
    }
    /* float weights with NVFP4 activations exist only as a Linear */
    if (d.scheme == NVFP4_SCHEME_NONE && d.input_scale > 0.0f &&
        !be_supports(be, NVFP4_OP_LINEAR_DENSE, &d)) {
        nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, "", parts[0].prefix, -1,
                        "float weights with NVFP4 activations (an exact fused group of "
                        "shards with their own global scales) are not supported by backend "
                        "\"%s\"", be->iface->name);
        return NULL;
    }

    w = calloc(1, sizeof(*w));
    if (!w) {
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, "", parts[0].prefix, -1, "out of memory");
        return NULL;
    }
    w->be = be;
    w->desc = d;
    w->runs_linear = (unsigned char)be_supports(be, linear_op(w), &w->desc);
    w->runs_embed = (unsigned char)be_supports(be, NVFP4_OP_EMBED, &w->desc);
    w->runs_moe = (unsigned char)be_supports(be, NVFP4_OP_MOE, &w->desc);
    w->impl = be->iface->kweight_upload(be->ctx, parts, nparts, &w->desc, err);
    if (!w->impl) {
        free(w);
        return NULL;
    }
    return w;
}

void nvfp4_kweight_free(nvfp4_kweight *w)
{
    if (!w)
        return;
    w->be->iface->kweight_free(w->be->ctx, w->impl);
    free(w);
}

int nvfp4_kweight_holds_copy(const nvfp4_kweight *w)
{
    if (!w)
        return 0;
    /* NVFP4 weights are always repacked or copied; float ones where the
     * backend says so (the CPU reads them in place unless asked for a
     * copy, GPUs copy them). */
    if (w->be->caps.float_weights_in_place)
        return w->desc.scheme != NVFP4_SCHEME_NONE || (w->desc.flags & NVFP4_KWEIGHT_COPY);
    return 1;
}

int64_t nvfp4_kweight_rows(const nvfp4_kweight *w)
{
    return w ? w->desc.n : 0;
}

int64_t nvfp4_kweight_cols(const nvfp4_kweight *w)
{
    return w ? w->desc.k : 0;
}

static nvfp4_status check_weight(nvfp4_backend *be, const nvfp4_kweight *w,
                                 const char *op, nvfp4_error *err)
{
    NEED(w, op, err);
    if (w->be != be)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", op, -1,
                               "weight was uploaded to backend \"%s\", used with \"%s\"",
                               w->be->iface->name, be->iface->name);
    return NVFP4_OK;
}

static nvfp4_op linear_op(const nvfp4_kweight *w)
{
    switch (w->desc.scheme) {
    case NVFP4_SCHEME_W4A4: return NVFP4_OP_LINEAR_W4A4;
    case NVFP4_SCHEME_W4A16: return NVFP4_OP_LINEAR_W4A16;
    default: return NVFP4_OP_LINEAR_DENSE;
    }
}

/* ---- operations ---------------------------------------------------------- */

nvfp4_status nvfp4_k_linear(nvfp4_backend *be, const nvfp4_kweight *w, const float *x,
                            size_t m, float *y, nvfp4_error *err)
{
    nvfp4_status st;

    CHECK_BE(be, err, "linear");
    if ((st = check_weight(be, w, "linear", err)) != NVFP4_OK)
        return st;
    if (m == 0)
        return NVFP4_OK;
    NEED(x, "linear", err);
    NEED(y, "linear", err);
    if (!count_ok(m, (size_t)w->desc.n, 1) || !count_ok(m, (size_t)w->desc.k, 1))
        return too_big("linear", err);
    if (!w->runs_linear)
        return unsupported_w(be, linear_op(w), w, err);
    return be->iface->linear(be->ctx, w->impl, &w->desc, x, m, y, err);
}

nvfp4_status nvfp4_k_linear_multi(nvfp4_backend *be, const nvfp4_kweight *const *w,
                                  size_t count, const float *x, size_t m, float *const *y,
                                  nvfp4_error *err)
{
    nvfp4_status st;

    CHECK_BE(be, err, "linear_multi");
    if (count == 0)
        return NVFP4_OK;
    NEED(w, "linear_multi", err);
    NEED(y, "linear_multi", err);
    for (size_t i = 0; i < count; i++) {
        if ((st = check_weight(be, w[i], "linear_multi", err)) != NVFP4_OK)
            return st;
        if (w[i]->desc.k != w[0]->desc.k)
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "linear_multi", -1,
                                   "weight %zu has k = %lld, weight 0 k = %lld: one input "
                                   "feeds them all",
                                   i, (long long)w[i]->desc.k, (long long)w[0]->desc.k);
        if (m > 0 && !y[i])
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "linear_multi", -1,
                                   "output %zu is NULL", i);
        if (!count_ok(m, (size_t)w[i]->desc.n, 1) || !count_ok(m, (size_t)w[i]->desc.k, 1))
            return too_big("linear_multi", err);
        if (!w[i]->runs_linear)
            return unsupported_w(be, linear_op(w[i]), w[i], err);
    }
    if (m == 0)
        return NVFP4_OK;
    NEED(x, "linear_multi", err);
    if (count > 1 && be->iface->linear_multi)
        return be->iface->linear_multi(be->ctx, w, count, x, m, y, err);
    for (size_t i = 0; i < count; i++)
        if ((st = be->iface->linear(be->ctx, w[i]->impl, &w[i]->desc, x, m, y[i], err)) !=
            NVFP4_OK)
            return st;
    return NVFP4_OK;
}

/* May the registry read the backend's memory (ids, indices, tables)? */
static int host_memory(const nvfp4_backend *be)
{
    return be->caps.host_memory;
}

nvfp4_status nvfp4_k_embed(nvfp4_backend *be, const nvfp4_kweight *w, const int32_t *ids,
                           size_t m, float *y, nvfp4_error *err)
{
    nvfp4_status st;

    CHECK_BE(be, err, "embed");
    if ((st = check_weight(be, w, "embed", err)) != NVFP4_OK)
        return st;
    if (m == 0)
        return NVFP4_OK;
    NEED(ids, "embed", err);
    NEED(y, "embed", err);
    if (!count_ok(m, (size_t)w->desc.k, 1))
        return too_big("embed", err);
    /* Only host memory can be read here; a GPU backend checks the ids on
     * the device and reports them at the next sync (backend-impl.h). */
    for (size_t i = 0; host_memory(be) && i < m; i++)
        if (ids[i] < 0 || ids[i] >= w->desc.n)
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "embed", -1,
                                   "token id %ld at position %zu is outside the table "
                                   "of %lld rows",
                                   (long)ids[i], i, (long long)w->desc.n);
    if (!w->runs_embed)
        return unsupported_w(be, NVFP4_OP_EMBED, w, err);
    return be->iface->embed(be->ctx, w->impl, &w->desc, ids, m, y, err);
}

nvfp4_status nvfp4_k_rmsnorm(nvfp4_backend *be, const float *x, const float *weight,
                             size_t m, size_t d, float eps, float *y, nvfp4_error *err)
{
    CHECK_BE(be, err, "rmsnorm");
    if (m == 0)
        return NVFP4_OK;
    NEED(x, "rmsnorm", err);
    NEED(weight, "rmsnorm", err);
    NEED(y, "rmsnorm", err);
    if (d == 0 || !count_ok(m, d, 1))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "rmsnorm", -1,
                               "row length d = %zu (m = %zu) is invalid", d, m);
    if (!(eps >= 0.0f))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "rmsnorm", -1,
                               "eps must be >= 0, found %g", eps);
    if (!be->iface->rmsnorm)
        return unsupported(be, NVFP4_OP_RMSNORM, err);
    return be->iface->rmsnorm(be->ctx, x, weight, m, d, eps, y, err);
}

nvfp4_status nvfp4_k_rope(nvfp4_backend *be, float *x, const int32_t *positions, size_t m,
                          size_t heads, size_t head_dim, size_t rot_dim,
                          const float *inv_freq, float attn_factor, nvfp4_error *err)
{
    CHECK_BE(be, err, "rope");
    if (m == 0)
        return NVFP4_OK;
    NEED(x, "rope", err);
    NEED(positions, "rope", err);
    NEED(inv_freq, "rope", err);
    if (heads == 0 || head_dim == 0 || rot_dim == 0 || rot_dim > head_dim ||
        rot_dim % 2 != 0)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "rope", -1,
                               "need heads > 0 and an even 0 < rot_dim <= head_dim; "
                               "found heads %zu, head_dim %zu, rot_dim %zu",
                               heads, head_dim, rot_dim);
    if (!count_ok(m, heads, head_dim))
        return too_big("rope", err);
    if (!be->iface->rope)
        return unsupported(be, NVFP4_OP_ROPE, err);
    return be->iface->rope(be->ctx, x, positions, m, heads, head_dim, rot_dim, inv_freq,
                           attn_factor, err);
}

nvfp4_status nvfp4_k_attention(nvfp4_backend *be, const float *q, const float *k,
                               const float *v, float *k_cache, float *v_cache,
                               size_t max_ctx, size_t pos0, size_t m, size_t nh, size_t nkv,
                               size_t hd, float scale, float *out, nvfp4_error *err)
{
    CHECK_BE(be, err, "attention");
    if (m == 0)
        return NVFP4_OK;
    NEED(q, "attention", err);
    NEED(k, "attention", err);
    NEED(v, "attention", err);
    NEED(k_cache, "attention", err);
    NEED(v_cache, "attention", err);
    NEED(out, "attention", err);
    if (nh == 0 || nkv == 0 || hd == 0 || nh % nkv != 0)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "attention", -1,
                               "need nh a positive multiple of nkv > 0 and hd > 0; found "
                               "nh %zu, nkv %zu, hd %zu",
                               nh, nkv, hd);
    if (pos0 > max_ctx || m > max_ctx - pos0)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "attention", -1,
                               "positions %zu..%zu exceed the KV cache of %zu", pos0,
                               pos0 + m - 1, max_ctx);
    if (!count_ok(max_ctx, nkv, hd) || !count_ok(m, nh, hd))
        return too_big("attention", err);
    if (!be->iface->attention)
        return unsupported(be, NVFP4_OP_ATTENTION, err);
    return be->iface->attention(be->ctx, q, k, v, k_cache, v_cache, max_ctx, pos0, m, nh,
                                nkv, hd, scale, out, err);
}

nvfp4_status nvfp4_k_attention_paged(nvfp4_backend *be, const float *q, const float *k,
                                     const float *v, const nvfp4_kv_pages *kv, size_t m,
                                     size_t nh, size_t nkv, size_t hd, float scale,
                                     float *out, nvfp4_error *err)
{
    CHECK_BE(be, err, "attention_paged");
    if (m == 0)
        return NVFP4_OK;
    NEED(q, "attention_paged", err);
    NEED(k, "attention_paged", err);
    NEED(v, "attention_paged", err);
    NEED(kv, "attention_paged", err);
    NEED(kv->k_pool, "attention_paged", err);
    NEED(kv->v_pool, "attention_paged", err);
    NEED(kv->tables, "attention_paged", err);
    NEED(kv->pos, "attention_paged", err);
    NEED(kv->seq, "attention_paged", err);
    NEED(out, "attention_paged", err);
    if (nh == 0 || nkv == 0 || hd == 0 || nh % nkv != 0)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "attention_paged", -1,
                               "need nh a positive multiple of nkv > 0 and hd > 0; found "
                               "nh %zu, nkv %zu, hd %zu",
                               nh, nkv, hd);
    if (kv->nblocks == 0 || kv->block == 0 || kv->ntables == 0 || kv->max_blocks == 0 ||
        kv->max_len == 0 || kv->nblocks > INT32_MAX || kv->ntables > INT32_MAX ||
        kv->max_len > INT32_MAX)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "attention_paged", -1,
                               "need a non-empty pool, tables and max_len below 2^31; found "
                               "%zu blocks of %zu, %zu tables of %zu, max_len %zu",
                               kv->nblocks, kv->block, kv->ntables, kv->max_blocks,
                               kv->max_len);
    if (!count_ok(kv->nblocks, kv->block, nkv) || !count_ok(kv->nblocks * kv->block, nkv, hd) ||
        !count_ok(kv->ntables, kv->max_blocks, 1) || !count_ok(m, nh, hd) ||
        !count_ok(kv->max_blocks, kv->block, 1))
        return too_big("attention_paged", err);
    if (kv->max_len > kv->max_blocks * kv->block)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "attention_paged", -1,
                               "max_len %zu exceeds the %zu blocks of %zu of a table",
                               kv->max_len, kv->max_blocks, kv->block);
    if (kv->dtype != NVFP4_KV_ELEM_F32 && kv->dtype != NVFP4_KV_ELEM_FP8_E4M3)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "attention_paged", -1,
                               "KV element type %d; expected NVFP4_KV_ELEM_F32 (0) or "
                               "NVFP4_KV_ELEM_FP8_E4M3 (1)",
                               (int)kv->dtype);
    if (kv->dtype == NVFP4_KV_ELEM_FP8_E4M3 &&
        (!isfinite(kv->k_scale) || !(kv->k_scale > 0.0f) || !isfinite(kv->v_scale) ||
         !(kv->v_scale > 0.0f)))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "attention_paged", -1,
                               "FP8 KV pools need finite scales > 0; found k_scale %g, "
                               "v_scale %g",
                               (double)kv->k_scale, (double)kv->v_scale);
    for (size_t i = 0; host_memory(be) && i < m; i++) {
        int32_t p = kv->pos[i], s = kv->seq[i];
        if (p < 0 || (size_t)p >= kv->max_len || s < 0 || (size_t)s >= kv->ntables)
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "attention_paged", -1,
                                   "row %zu: position %d (max_len %zu) or table %d (of %zu) "
                                   "out of range",
                                   i, p, kv->max_len, s, kv->ntables);
        for (size_t b = 0; b <= (size_t)p / kv->block; b++) {
            int32_t id = kv->tables[(size_t)s * kv->max_blocks + b];
            if (id < 0 || (size_t)id >= kv->nblocks)
                return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "attention_paged", -1,
                                       "row %zu: block %zu of table %d is %d; the pool has "
                                       "%zu blocks",
                                       i, b, s, id, kv->nblocks);
        }
    }
    if (!be->iface->attention_paged)
        return unsupported(be, NVFP4_OP_ATTENTION_PAGED, err);
    return be->iface->attention_paged(be->ctx, q, k, v, kv, m, nh, nkv, hd, scale, out, err);
}

nvfp4_status nvfp4_k_silu_mul(nvfp4_backend *be, const float *gu, size_t m, size_t inter,
                              float *out, nvfp4_error *err)
{
    CHECK_BE(be, err, "silu_mul");
    if (m == 0)
        return NVFP4_OK;
    NEED(gu, "silu_mul", err);
    NEED(out, "silu_mul", err);
    if (inter == 0 || !count_ok(m, inter, 2))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "silu_mul", -1,
                               "invalid size inter = %zu", inter);
    if (!be->iface->silu_mul)
        return unsupported(be, NVFP4_OP_SILU_MUL, err);
    return be->iface->silu_mul(be->ctx, gu, m, inter, out, err);
}

nvfp4_status nvfp4_k_glu(nvfp4_backend *be, nvfp4_glu_kind kind, const float *gu, size_t m,
                         size_t inter, float alpha, float limit, float *out, nvfp4_error *err)
{
    CHECK_BE(be, err, "glu");
    if ((unsigned)kind >= NVFP4_GLU_COUNT)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "glu", -1,
                               "unknown activation kind %d (0..%d)", (int)kind,
                               NVFP4_GLU_COUNT - 1);
    if (kind == NVFP4_GLU_SWIGLU_OAI && !(isfinite(alpha) && isfinite(limit) && limit > 0.0f))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "glu", -1,
                               "clamped SwiGLU needs a finite alpha and a finite limit > 0, "
                               "found alpha %g, limit %g", (double)alpha, (double)limit);
    if (m == 0)
        return NVFP4_OK;
    NEED(gu, "glu", err);
    NEED(out, "glu", err);
    if (inter == 0 || !count_ok(m, inter, 2))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "glu", -1,
                               "invalid size inter = %zu", inter);
    if (!be->iface->glu)
        return unsupported(be, NVFP4_OP_GLU, err);
    return be->iface->glu(be->ctx, kind, gu, m, inter, alpha, limit, out, err);
}

nvfp4_status nvfp4_k_scale(nvfp4_backend *be, const float *x, size_t n, float s, float *y,
                           nvfp4_error *err)
{
    CHECK_BE(be, err, "scale");
    if (!isfinite(s))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "scale", -1,
                               "the factor must be finite, found %g", (double)s);
    if (n == 0)
        return NVFP4_OK;
    NEED(x, "scale", err);
    NEED(y, "scale", err);
    if (!be->iface->scale)
        return unsupported(be, NVFP4_OP_SCALE, err);
    return be->iface->scale(be->ctx, x, n, s, y, err);
}

static nvfp4_status check_rows(const char *op, const void *x, const void *y, size_t m,
                               size_t n, nvfp4_error *err)
{
    NEED(x, op, err);
    NEED(y, op, err);
    if (n == 0 || !count_ok(m, n, 1))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", op, -1,
                               "invalid row length n = %zu (m = %zu)", n, m);
    return NVFP4_OK;
}

nvfp4_status nvfp4_k_softmax(nvfp4_backend *be, const float *x, size_t m, size_t n,
                             float *y, nvfp4_error *err)
{
    nvfp4_status st;

    CHECK_BE(be, err, "softmax");
    if (m == 0)
        return NVFP4_OK;
    if ((st = check_rows("softmax", x, y, m, n, err)) != NVFP4_OK)
        return st;
    if (!be->iface->softmax)
        return unsupported(be, NVFP4_OP_SOFTMAX, err);
    return be->iface->softmax(be->ctx, x, m, n, y, err);
}

nvfp4_status nvfp4_k_logsoftmax(nvfp4_backend *be, const float *x, size_t m, size_t n,
                                float *y, nvfp4_error *err)
{
    nvfp4_status st;

    CHECK_BE(be, err, "logsoftmax");
    if (m == 0)
        return NVFP4_OK;
    if ((st = check_rows("logsoftmax", x, y, m, n, err)) != NVFP4_OK)
        return st;
    if (!be->iface->logsoftmax)
        return unsupported(be, NVFP4_OP_LOGSOFTMAX, err);
    return be->iface->logsoftmax(be->ctx, x, m, n, y, err);
}

nvfp4_status nvfp4_k_argmax(nvfp4_backend *be, const float *x, size_t m, size_t n,
                            int32_t *out, nvfp4_error *err)
{
    nvfp4_status st;

    CHECK_BE(be, err, "argmax");
    if (m == 0)
        return NVFP4_OK;
    if ((st = check_rows("argmax", x, out, m, n, err)) != NVFP4_OK)
        return st;
    if (n > INT32_MAX)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "argmax", -1,
                               "row length %zu does not fit an int32 index", n);
    if (!be->iface->argmax)
        return unsupported(be, NVFP4_OP_ARGMAX, err);
    return be->iface->argmax(be->ctx, x, m, n, out, err);
}

nvfp4_status nvfp4_k_topk(nvfp4_backend *be, const float *logits, size_t m, size_t e,
                          size_t k, int renorm, int32_t *idx, float *weights,
                          nvfp4_error *err)
{
    nvfp4_status st;

    CHECK_BE(be, err, "topk");
    if (m == 0)
        return NVFP4_OK;
    if ((st = check_rows("topk", logits, idx, m, e, err)) != NVFP4_OK)
        return st;
    NEED(weights, "topk", err);
    if (k == 0 || k > e || e > INT32_MAX)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "topk", -1,
                               "need 1 <= k <= experts, found k = %zu, experts = %zu", k,
                               e);
    if (!be->iface->topk)
        return unsupported(be, NVFP4_OP_TOPK, err);
    return be->iface->topk(be->ctx, logits, m, e, k, renorm, idx, weights, err);
}

nvfp4_status nvfp4_k_add(nvfp4_backend *be, const float *a, const float *b, size_t n,
                         float *y, nvfp4_error *err)
{
    CHECK_BE(be, err, "add");
    if (n == 0)
        return NVFP4_OK;
    NEED(a, "add", err);
    NEED(b, "add", err);
    NEED(y, "add", err);
    if (!be->iface->add)
        return unsupported(be, NVFP4_OP_ADD, err);
    return be->iface->add(be->ctx, a, b, n, y, err);
}

nvfp4_status nvfp4_k_gate_add(nvfp4_backend *be, const float *x, const float *gate, size_t m,
                              size_t n, float *y, nvfp4_error *err)
{
    nvfp4_status st;

    CHECK_BE(be, err, "gate_add");
    if (m == 0)
        return NVFP4_OK;
    if ((st = check_rows("gate_add", x, y, m, n, err)) != NVFP4_OK)
        return st;
    NEED(gate, "gate_add", err);
    if (!be->iface->gate_add)
        return unsupported(be, NVFP4_OP_GATE_ADD, err);
    return be->iface->gate_add(be->ctx, x, gate, m, n, y, err);
}

nvfp4_status nvfp4_k_moe(nvfp4_backend *be, nvfp4_kweight *const *w13,
                         nvfp4_kweight *const *w2, size_t experts, const float *x, size_t m,
                         const int32_t *idx, const float *weights, size_t k, float *y,
                         nvfp4_error *err)
{
    return nvfp4_k_moe_glu(be, w13, w2, experts, x, m, idx, weights, k, NVFP4_GLU_SILU, 0.0f,
                           0.0f, y, err);
}

nvfp4_status nvfp4_k_moe_glu(nvfp4_backend *be, nvfp4_kweight *const *w13,
                             nvfp4_kweight *const *w2, size_t experts, const float *x,
                             size_t m, const int32_t *idx, const float *weights, size_t k,
                             nvfp4_glu_kind kind, float alpha, float limit, float *y,
                             nvfp4_error *err)
{
    nvfp4_status st;
    int64_t hidden, inter;

    CHECK_BE(be, err, "moe");
    if ((unsigned)kind >= NVFP4_GLU_COUNT)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "moe", -1,
                               "unknown activation kind %d (0..%d)", (int)kind,
                               NVFP4_GLU_COUNT - 1);
    if (kind == NVFP4_GLU_SWIGLU_OAI && !(isfinite(alpha) && isfinite(limit) && limit > 0.0f))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "moe", -1,
                               "clamped SwiGLU needs a finite alpha and a finite limit > 0, "
                               "found alpha %g, limit %g", (double)alpha, (double)limit);
    if (m == 0)
        return NVFP4_OK;
    NEED(w13, "moe", err);
    NEED(w2, "moe", err);
    NEED(x, "moe", err);
    NEED(idx, "moe", err);
    NEED(weights, "moe", err);
    NEED(y, "moe", err);
    if (experts == 0 || k == 0 || k > experts || experts > INT32_MAX)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "moe", -1,
                               "need 1 <= k <= experts, found k = %zu, experts = %zu", k,
                               experts);
    if ((st = check_weight(be, w13[0], "moe", err)) != NVFP4_OK)
        return st;
    hidden = w13[0]->desc.k;
    inter = w13[0]->desc.n / 2;
    for (size_t e = 0; e < experts; e++) {
        if ((st = check_weight(be, w13[e], "moe", err)) != NVFP4_OK ||
            (st = check_weight(be, w2[e], "moe", err)) != NVFP4_OK)
            return st;
        if (w13[e]->desc.k != hidden || w13[e]->desc.n != 2 * inter ||
            w2[e]->desc.n != hidden || w2[e]->desc.k != inter || inter == 0)
            return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, "", "moe", -1,
                                   "expert %zu: w13 is [%lld, %lld] and w2 [%lld, %lld]; "
                                   "expected [2*I, H] and [H, I] with H = %lld, I = %lld",
                                   e, (long long)w13[e]->desc.n, (long long)w13[e]->desc.k,
                                   (long long)w2[e]->desc.n, (long long)w2[e]->desc.k,
                                   (long long)hidden, (long long)inter);
    }
    if (!count_ok(m, k, 1) || !count_ok(m, (size_t)hidden, 1) ||
        !count_ok(m, (size_t)inter, 2))
        return too_big("moe", err);
    for (size_t i = 0; host_memory(be) && i < m * k; i++)
        if (idx[i] < 0 || (size_t)idx[i] >= experts)
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, "", "moe", -1,
                                   "expert index %ld (token %zu, slot %zu) is outside "
                                   "0..%zu",
                                   (long)idx[i], i / k, i % k, experts - 1);
    if (!w13[0]->runs_moe)
        return unsupported_w(be, NVFP4_OP_MOE, w13[0], err);
    return be->iface->moe(be->ctx, w13, w2, experts, x, m, idx, weights, k, kind, alpha, limit,
                          y, err);
}

const nvfp4_backend_comm_iface *nvfp4k_backend_comm(nvfp4_backend *be, void **ctx)
{
    *ctx = NULL;
    if (!be)
        return NULL;
    for (size_t i = 0; i < registry_count; i++)
        if (registry[i] == be->iface) {
            *ctx = be->ctx;
            return registry_comm[i];
        }
    return NULL;
}
