/* SPDX-License-Identifier: MIT */
/*
 * libkernels/backend-impl.h - the internal ABI between libnvfp4-kernels and
 * its backends (after ggml's backend interface: a table of function pointers
 * per backend, a registry, a per-operation "supported?" query).
 *
 * The CPU backend is compiled into the library.  GPU backends ("cuda",
 * "hip") are separate shared objects, loaded at run time with dlopen(3) from
 * each directory of $NVFP4_BACKEND_PATH (colon-separated) and then from
 * $(pkglibdir)/backends.  A backend NAME lives in the file
 *     nvfp4-backend-NAME.so
 * and exports one function
 *     const nvfp4_backend_iface *nvfp4_backend_entry(uint32_t abi_version);
 * that returns its table when it implements ABI_VERSION, or NULL.  The
 * library never calls dlclose on a loaded backend (kernels may still be
 * queued, and unloading a CUDA runtime is not reliably possible).
 *
 * What the registry (libkernels/registry.c) guarantees before it calls a
 * backend, so that a backend needs no argument checks of its own:
 *   - every pointer argument is non-NULL and m, n, k and friends are > 0
 *     (an op with m == 0 returns NVFP4_OK without calling the backend);
 *   - shapes are consistent: rot_dim <= head_dim and even, nh % nkv == 0,
 *     pos0 + m <= max_ctx, 1 <= k <= e for topk, every kweight belongs to
 *     this backend; for the CPU backend only (host memory), embedding ids
 *     in range and MoE idx in [0, experts) - a GPU backend receives device
 *     pointers the registry cannot read, checks ids and indices itself and
 *     reports a bad one as NVFP4_ERR_INVALID at the next sync;
 *   - kweight_upload receives validated parts (same k and scheme, equal
 *     weight_scale_2, k % 16 == 0 for NVFP4, tensors of the right size
 *     and dtype) and the fused geometry in nvfp4_kweight_desc;
 *   - the element counts the registry multiplies were checked for overflow.
 * A backend fills ERR on any failure of its own (allocation, device) with
 * NVFP4_ERR_BACKEND, NVFP4_ERR_NOMEM or NVFP4_ERR_DEVICE_OOM and must not
 * abort the process.  An operation whose pointer is NULL is unsupported, and
 * so is one the backend's supports() refuses for a weight's format: the
 * registry returns NVFP4_ERR_UNSUPPORTED naming the backend, the op and the
 * format (nvfp4_backend_supports(), nvfp4_backend_supports_format()).
 *
 * As in ggml's device interface, the registry never asks which backend it
 * talks to: what it needs to know comes from the backend's capabilities
 * (get_caps(), read once at open: may the registry read its memory, are
 * operations queued, does it read float weights in place) and from
 * supports(op, weight format); the options of a backend (device, kernel
 * paths) are a "key=value,..." string given to open() and parsed there,
 * once (nvfp4_backend_open_with()); a backend's environment variables are
 * defaults read at the same time, never on the way of an operation.
 *
 * Determinism contract: for a given backend and input, results must not
 * depend on the number of threads (or blocks): partition outputs, never
 * split one reduction across workers.
 */
#ifndef NVFP4_BACKEND_IMPL_H
#define NVFP4_BACKEND_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <nvfp4/kernels.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bump on any incompatible change of the structs below.  4: get_caps,
 * supports, open(params), the weight format in the descriptor, MoE given
 * the registry's weights (struct nvfp4_kweight) instead of copied arrays.
 * 5: attention_paged's nvfp4_kv_pages carries the element type of the pools
 * (float32 or FP8 E4M3 bytes, which the backend encodes on store and
 * decodes on read), the K/V scales and the attention sinks; glu (gated
 * activations by kind) and scale at the end of the table, moe given the
 * activation kind.  6: linear_multi at the end of the table; the
 * descriptor's flags (NVFP4_KWEIGHT_COPY). */
#define NVFP4_BACKEND_ABI_VERSION 6u

/* The fused geometry of a weight, computed by the registry. */
typedef struct {
    nvfp4_scheme scheme;
    int64_t n, k;              /* n = sum of the parts' n */
    float weight_scale_2;      /* shared by all NVFP4 parts (§4) */
    float input_scale;         /* max of the parts' (§4); 0 for W4A16/dense */
    float input_gs;            /* §5's gs of that part: its input_gs (compressed-tensors)
                                  or 1.0f / input_scale; 0 when input_scale is 0 */
    int has_bias;              /* some part has a bias (others count as 0) */
    /* The storage format, what supports() judges: for NVFP4 schemes
     * NVFP4_DTYPE_U8 (packed E2M1 with E4M3 block scales); for
     * NVFP4_SCHEME_NONE the parts' dtype (F32, BF16 or F16), or
     * NVFP4_DTYPE_COUNT when the parts differ. */
    nvfp4_dtype dtype;
    /* nvfp4_kweight_upload_ex()'s flags (NVFP4_KWEIGHT_COPY: a backend
     * with float_weights_in_place copies unquantized parts instead) */
    unsigned flags;
} nvfp4_kweight_desc;

/* A weight as the registry keeps it.  Backends read IMPL (their own object)
 * and DESC; the MoE entry receives arrays of these as the caller gave them,
 * so that no call copies or allocates. */
struct nvfp4_kweight {
    struct nvfp4_backend *be;
    void *impl;
    nvfp4_kweight_desc desc;
    unsigned char runs_linear, runs_embed, runs_moe; /* supports(), asked at upload */
};

/* What a backend is, as far as the registry cares (after ggml's device
 * caps).  Filled by get_caps() once, right after open(); NULL get_caps
 * means all zero. */
typedef struct {
    /* alloc() returns host memory the registry may read: it checks token
     * ids, expert indices and KV block tables before the call.  Else the
     * backend checks them itself and reports a bad one at the next sync. */
    int host_memory;
    /* Operations may be queued and return before they finish; sync() waits
     * and reports what the device found. */
    int async;
    /* kweight_upload() keeps pointers into unquantized (float) parts rather
     * than a copy, unless desc->flags has NVFP4_KWEIGHT_COPY: the caller
     * must keep their memory (the mapped file). */
    int float_weights_in_place;
    /* Host worker threads: set_threads() / threads() mean something. */
    int threads;
} nvfp4_backend_caps;

typedef struct nvfp4_backend_iface {
    uint32_t abi_version;      /* NVFP4_BACKEND_ABI_VERSION */
    const char *name;          /* "cpu", "cuda", "hip" */

    /* 1 when a usable device exists; must be cheap and must not fail loudly. */
    int (*available)(void);
    /* Create / destroy the backend's state (device context, streams, ...).
     * PARAMS is NULL or "key=value,key=value" (no spaces), the backend's own
     * options, parsed here once; an unknown key or a bad value is
     * NVFP4_ERR_INVALID naming it and the keys the backend knows.  Options
     * not given take the backend's environment defaults, read here too. */
    void *(*open)(const char *params, nvfp4_error *err);
    void (*close)(void *ctx);
    void (*get_caps)(void *ctx, nvfp4_backend_caps *caps);
    /* Whether OP runs here; W is the weight's descriptor for linear, embed
     * and moe (the experts' w13), NULL for the other ops and for "with some
     * weight format".  Asked at upload (for every op a weight may feed) and
     * by nvfp4_backend_supports*(), never per call.  NULL: every op whose pointer is set, any format. */
    int (*supports)(void *ctx, nvfp4_op op, const nvfp4_kweight_desc *w);
    void (*set_threads)(void *ctx, int threads);
    int (*threads)(void *ctx);
    nvfp4_status (*sync)(void *ctx, nvfp4_error *err);

    void *(*alloc)(void *ctx, size_t bytes, nvfp4_error *err);
    void (*release)(void *ctx, void *ptr);
    nvfp4_status (*upload)(void *ctx, void *dst, const void *src, size_t bytes,
                           nvfp4_error *err);
    nvfp4_status (*download)(void *ctx, void *dst, const void *src, size_t bytes,
                             nvfp4_error *err);

    /* Returns the backend's private weight object, or NULL and ERR. */
    void *(*kweight_upload)(void *ctx, const nvfp4_linear *parts, size_t nparts,
                            const nvfp4_kweight_desc *desc, nvfp4_error *err);
    void (*kweight_free)(void *ctx, void *kw);

    /* The operations of nvfp4/kernels.h, with the backend's own state and
     * weight objects in place of the public handles.  NULL = unsupported. */
    nvfp4_status (*linear)(void *ctx, void *kw, const nvfp4_kweight_desc *desc,
                           const float *x, size_t m, float *y, nvfp4_error *err);
    nvfp4_status (*embed)(void *ctx, void *kw, const nvfp4_kweight_desc *desc,
                          const int32_t *ids, size_t m, float *y, nvfp4_error *err);
    nvfp4_status (*rmsnorm)(void *ctx, const float *x, const float *weight, size_t m,
                            size_t d, float eps, float *y, nvfp4_error *err);
    nvfp4_status (*rope)(void *ctx, float *x, const int32_t *positions, size_t m,
                         size_t heads, size_t head_dim, size_t rot_dim,
                         const float *inv_freq, float attn_factor, nvfp4_error *err);
    nvfp4_status (*attention)(void *ctx, const float *q, const float *k, const float *v,
                              float *k_cache, float *v_cache, size_t max_ctx,
                              size_t pos0, size_t m, size_t nh, size_t nkv, size_t hd,
                              float scale, float *out, nvfp4_error *err);
    nvfp4_status (*silu_mul)(void *ctx, const float *gu, size_t m, size_t inter,
                             float *out, nvfp4_error *err);
    nvfp4_status (*softmax)(void *ctx, const float *x, size_t m, size_t n, float *y,
                            nvfp4_error *err);
    nvfp4_status (*topk)(void *ctx, const float *logits, size_t m, size_t e, size_t k,
                         int renorm, int32_t *idx, float *weights, nvfp4_error *err);
    /* w13/w2: the caller's arrays, one weight per expert (impl, desc).
     * ABI 5: the activation between them, as glu() takes it (the registry
     * checked KIND, ALPHA and LIMIT). */
    nvfp4_status (*moe)(void *ctx, nvfp4_kweight *const *w13, nvfp4_kweight *const *w2,
                        size_t experts, const float *x, size_t m, const int32_t *idx,
                        const float *weights, size_t k, nvfp4_glu_kind kind, float alpha,
                        float limit, float *y, nvfp4_error *err);
    nvfp4_status (*add)(void *ctx, const float *a, const float *b, size_t n, float *y,
                        nvfp4_error *err);
    nvfp4_status (*logsoftmax)(void *ctx, const float *x, size_t m, size_t n, float *y,
                               nvfp4_error *err);
    nvfp4_status (*argmax)(void *ctx, const float *x, size_t m, size_t n, int32_t *out,
                           nvfp4_error *err);
    /* ABI 2 */
    nvfp4_status (*gate_add)(void *ctx, const float *x, const float *gate, size_t m,
                             size_t n, float *y, nvfp4_error *err);
    /* ABI 3: the registry checked the shapes; on the CPU backend also every
     * pos (< max_len, pos / block < max_blocks), seq (< ntables) and the
     * table entries the rows reach (< nblocks).  A GPU backend checks them on
     * the device, skips a bad row and reports it at the next sync. */
    /* ABI 5: kv->dtype NVFP4_KV_ELEM_FP8_E4M3 (one-byte pools) must be run too. */
    nvfp4_status (*attention_paged)(void *ctx, const float *q, const float *k, const float *v,
                                    const nvfp4_kv_pages *kv, size_t m, size_t nh, size_t nkv,
                                    size_t hd, float scale, float *out, nvfp4_error *err);
    /* ABI 5: KIND < NVFP4_GLU_COUNT; for NVFP4_GLU_SWIGLU_OAI alpha finite and
     * limit finite > 0 (the registry checked) */
    nvfp4_status (*glu)(void *ctx, nvfp4_glu_kind kind, const float *gu, size_t m,
                        size_t inter, float alpha, float limit, float *out, nvfp4_error *err);
    nvfp4_status (*scale)(void *ctx, const float *x, size_t n, float s, float *y,
                          nvfp4_error *err);
    /* ABI 6: COUNT >= 1 weights of this backend that run linear, all of
     * the same k (the registry checked); the same bits as COUNT linear
     * calls.  NULL: the registry makes those calls. */
    nvfp4_status (*linear_multi)(void *ctx, const struct nvfp4_kweight *const *w,
                                 size_t count, const float *x, size_t m, float *const *y,
                                 nvfp4_error *err);
} nvfp4_backend_iface;

/* One "key=value" of an open() PARAMS string: copies the next key and value
 * (NUL-terminated) into KEY and VAL, advances *P past it and its comma, and
 * returns 1; 0 at the end; -1 for a malformed pair (no '=', an empty key,
 * or a key or value that does not fit), *P then pointing at it.  Static:
 * plug-ins link nothing of the core beyond its public symbols. */
static inline int nvfp4_backend_param_next(const char **p, char *key, size_t keysize,
                                           char *val, size_t valsize)
{
    const char *s = *p, *eq, *end;
    size_t kl, vl;

    while (*s == ',')
        s++;
    *p = s;
    if (!*s)
        return 0;
    for (end = s; *end && *end != ','; end++)
        ;
    for (eq = s; eq < end && *eq != '='; eq++)
        ;
    if (eq == end || eq == s)
        return -1;
    kl = (size_t)(eq - s);
    vl = (size_t)(end - eq - 1);
    if (kl >= keysize || vl >= valsize)
        return -1;
    memcpy(key, s, kl);
    key[kl] = '\0';
    memcpy(val, eq + 1, vl);
    val[vl] = '\0';
    *p = end;
    return 1;
}

/* A device communicator of a GPU plug-in (NCCL in the CUDA one, RCCL in
 * the HIP one), optional and versioned apart from the table above: the
 * plug-in exports NVFP4_BACKEND_COMM_SYMBOL, which returns this table for
 * NVFP4_BACKEND_COMM_VERSION, else NULL.  Buffers are device memory of CTX
 * (alloc()); every collective is collective over the ranks and returns
 * when this rank's part is done (the stream synced).  The host side
 * (comm.c) has every rank check ready(), agrees over the host communicator
 * that all are, makes the unique id on rank 0 and broadcasts it, opens,
 * and agrees again that every open succeeded: plug-ins know no MPI.
 * Errors name the rank and the library's own error string. */
#define NVFP4_BACKEND_COMM_VERSION 2u
#define NVFP4_BACKEND_COMM_SYMBOL "nvfp4_backend_comm_entry"
typedef struct {
    uint32_t version;          /* NVFP4_BACKEND_COMM_VERSION */
    const char *name;          /* "nccl", "rccl" */
    /* Whether this rank can join a communicator (its library loads, CTX's
     * device can be selected); local, no communication. */
    nvfp4_status (*ready)(void *ctx, int rank, nvfp4_error *err);
    /* The unique id of a new communicator into ID (at most CAP bytes;
     * *LEN its size).  Rank 0 only. */
    nvfp4_status (*make_id)(void *ctx, int rank, void *id, size_t cap, size_t *len,
                            nvfp4_error *err);
    /* Join the communicator of ID as RANK of SIZE on CTX's device, waiting
     * at most INIT_TIMEOUT_S seconds (<= 0: no limit) for the others, then
     * aborting it (*TIMED_OUT 1); TIMEOUT_S bounds each collective's wait
     * likewise.  *NOTE: NULL, or a remark for the user (that the library's
     * init blocks). */
    void *(*open)(void *ctx, const void *id, size_t len, int rank, int size,
                  double init_timeout_s, double timeout_s, const char **note, int *timed_out,
                  nvfp4_error *err);
    void (*close)(void *dc);
    /* Tear down without waiting for the other ranks (ncclCommAbort). */
    void (*abort)(void *dc);
    nvfp4_status (*allreduce_sum)(void *dc, float *buf, size_t n, nvfp4_error *err);
    /* BYTES from every rank, in rank order, into RECV (size x BYTES). */
    nvfp4_status (*allgather)(void *dc, const void *send, size_t bytes, void *recv,
                              nvfp4_error *err);
    nvfp4_status (*broadcast)(void *dc, void *buf, size_t bytes, int root, nvfp4_error *err);
} nvfp4_backend_comm_iface;
typedef const nvfp4_backend_comm_iface *(*nvfp4_backend_comm_entry_fn)(uint32_t version);

/* registry.c: the device communicator table of BE's plug-in (NULL: none)
 * and the backend's state to call it with. */
const nvfp4_backend_comm_iface *nvfp4k_backend_comm(nvfp4_backend *be, void **ctx);

/* The symbol a backend shared object exports (see above). */
#define NVFP4_BACKEND_ENTRY_SYMBOL "nvfp4_backend_entry"
typedef const nvfp4_backend_iface *(*nvfp4_backend_entry_fn)(uint32_t abi_version);

/* The built-in CPU backend (libkernels/cpu.c). */
const nvfp4_backend_iface *nvfp4k_cpu_iface(void);

#ifdef __cplusplus
}
#endif

#endif /* NVFP4_BACKEND_IMPL_H */
