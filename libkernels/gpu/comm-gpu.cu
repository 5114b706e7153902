/* SPDX-License-Identifier: MIT */
/*
 * libkernels/gpu/comm-gpu.cu - the device communicator of the GPU plug-ins
 * (libkernels/backend-impl.h's nvfp4_backend_comm_iface): NCCL in the CUDA
 * one, RCCL in the HIP one.  The library is dlopen()ed at the first use
 * (GPU_COMM_LIBRARY: libnccl.so.2, librccl.so.1) and called through the ABI
 * that comm-abi.h declares, so that the plug-in builds without the
 * library's header and loads, and runs on one device, where the library is
 * absent.  Where the header is present at build time (configure:
 * HAVE_NCCL_H, HAVE_RCCL_H) our declarations are checked against it here.
 *
 * A communicator is made non-blocking (ncclCommInitRankConfig with
 * blocking = 0) and its init polled with ncclCommGetAsyncError until it
 * completes or the caller's deadline passes, then aborted (ncclCommAbort):
 * a rank that never joins cannot keep the others inside the init.  A
 * library older than 2.14 (no ncclCommInitRankConfig) gets the blocking
 * ncclCommInitRank, and open says so.  The collectives run on the
 * backend's stream and return once it is synced (a call that answers
 * ncclInProgress is polled first); every failure is NVFP4_ERR_BACKEND
 * naming the library, the call, the rank and the library's error string.
 * The emulator builds this file too (scripts/gpu-emu-check.sh, against
 * tests/nccl-emu.c's stand-in library).
 */
#include "config.h"

#include "gpu.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../backend-impl.h"
#include "comm-abi.h"

/* backend-gpu.cu: the device and stream of an opened backend */
gpu_stream_t nvfp4k_gpu_stream(void *ctx, int *device);

/* Our declarations against the vendor's header, where configure found it. */
#if (defined(NVFP4_GPU_CUDA) && defined(HAVE_NCCL_H)) || \
    (defined(NVFP4_GPU_HIP) && defined(HAVE_RCCL_H))
#ifdef NVFP4_GPU_CUDA
#include <nccl.h>
#else
#include <rccl/rccl.h>
#endif
static_assert(sizeof(ncclResult_t) == sizeof(gcomm_result), "ncclResult_t");
static_assert((int)ncclSuccess == GCOMM_SUCCESS &&
                  (int)ncclUnhandledCudaError == GCOMM_UNHANDLED_CUDA_ERROR &&
                  (int)ncclSystemError == GCOMM_SYSTEM_ERROR &&
                  (int)ncclInternalError == GCOMM_INTERNAL_ERROR &&
                  (int)ncclInvalidArgument == GCOMM_INVALID_ARGUMENT &&
                  (int)ncclInvalidUsage == GCOMM_INVALID_USAGE &&
                  (int)ncclRemoteError == GCOMM_REMOTE_ERROR &&
                  (int)ncclInProgress == GCOMM_IN_PROGRESS,
              "ncclResult_t values");
static_assert(sizeof(ncclDataType_t) == sizeof(gcomm_datatype) &&
                  (int)ncclUint8 == GCOMM_UINT8 && (int)ncclFloat32 == GCOMM_FLOAT32,
              "ncclDataType_t");
static_assert(sizeof(ncclRedOp_t) == sizeof(gcomm_redop) && (int)ncclSum == GCOMM_SUM,
              "ncclRedOp_t");
static_assert(NCCL_UNIQUE_ID_BYTES == GCOMM_UNIQUE_ID_BYTES &&
                  sizeof(ncclUniqueId) == sizeof(gcomm_unique_id),
              "ncclUniqueId");
static_assert(sizeof(ncclComm_t) == sizeof(gcomm_t), "ncclComm_t");
static_assert(sizeof(gpu_stream_t) == sizeof(void *), "the stream is a pointer");
static_assert(offsetof(ncclConfig_t, size) == offsetof(gcomm_config, size) &&
                  offsetof(ncclConfig_t, magic) == offsetof(gcomm_config, magic) &&
                  offsetof(ncclConfig_t, version) == offsetof(gcomm_config, version) &&
                  offsetof(ncclConfig_t, blocking) == offsetof(gcomm_config, blocking) &&
                  offsetof(ncclConfig_t, cgaClusterSize) ==
                      offsetof(gcomm_config, cga_cluster_size) &&
                  offsetof(ncclConfig_t, minCTAs) == offsetof(gcomm_config, min_ctas) &&
                  offsetof(ncclConfig_t, maxCTAs) == offsetof(gcomm_config, max_ctas) &&
                  offsetof(ncclConfig_t, netName) == offsetof(gcomm_config, net_name) &&
                  sizeof(ncclConfig_t) >= sizeof(gcomm_config),
              "ncclConfig_t's 2.14 prefix");
static_assert(NCCL_CONFIG_UNDEF_INT == GCOMM_CONFIG_UNDEF_INT, "NCCL_CONFIG_UNDEF_INT");
static_assert(NCCL_VERSION(2, 14, 0) == GCOMM_VERSION(2, 14, 0), "NCCL_VERSION");
#endif

/* The entry points used, resolved from GPU_COMM_LIBRARY (the three of 2.14
 * and 2.4 optional). */
static struct {
    gcomm_get_unique_id_fn get_unique_id;
    gcomm_get_version_fn get_version;
    gcomm_comm_init_rank_fn comm_init_rank;
    gcomm_comm_init_rank_config_fn comm_init_rank_config;
    gcomm_comm_get_async_error_fn get_async_error;
    gcomm_comm_abort_fn comm_abort;
    gcomm_comm_destroy_fn comm_destroy;
    gcomm_all_reduce_fn all_reduce;
    gcomm_all_gather_fn all_gather;
    gcomm_broadcast_fn broadcast;
    gcomm_get_error_string_fn error_string;
    int version;   /* ncclGetVersion's, 0 when unknown */
    char why[512]; /* empty when loaded */
} lib;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;

/* NVFP4_COMM_LIBRARY: another file name or path for the library (the
 * emulator's stand-in; a vendor build in a private directory). */
static const char *lib_name(void)
{
    const char *s = getenv("NVFP4_COMM_LIBRARY");
    return s && *s ? s : GPU_COMM_LIBRARY;
}

static void lib_load(void)
{
    const char *name = lib_name();
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    const char *dl;

    if (!h) {
        dl = dlerror();
        snprintf(lib.why, sizeof lib.why, "%s", dl ? dl : "dlopen failed");
        return;
    }
    *(void **)&lib.get_unique_id = dlsym(h, "ncclGetUniqueId");
    *(void **)&lib.get_version = dlsym(h, "ncclGetVersion");
    *(void **)&lib.comm_init_rank = dlsym(h, "ncclCommInitRank");
    *(void **)&lib.comm_init_rank_config = dlsym(h, "ncclCommInitRankConfig");
    *(void **)&lib.get_async_error = dlsym(h, "ncclCommGetAsyncError");
    *(void **)&lib.comm_abort = dlsym(h, "ncclCommAbort");
    *(void **)&lib.comm_destroy = dlsym(h, "ncclCommDestroy");
    *(void **)&lib.all_reduce = dlsym(h, "ncclAllReduce");
    *(void **)&lib.all_gather = dlsym(h, "ncclAllGather");
    *(void **)&lib.broadcast = dlsym(h, "ncclBroadcast");
    *(void **)&lib.error_string = dlsym(h, "ncclGetErrorString");
    if (!lib.get_unique_id || !lib.comm_init_rank || !lib.comm_destroy || !lib.all_reduce ||
        !lib.all_gather || !lib.broadcast || !lib.error_string) {
        snprintf(lib.why, sizeof lib.why, "%s lacks an nccl* entry point it should have", name);
        return;
    }
    /* the non-blocking init needs all three */
    if (!lib.comm_init_rank_config || !lib.get_async_error || !lib.comm_abort)
        lib.comm_init_rank_config = NULL;
    if (!lib.get_version || lib.get_version(&lib.version) != GCOMM_SUCCESS)
        lib.version = 0;
    /* never closed: the communicators may outlive any one backend */
}

static nvfp4_status lib_ready(int rank, nvfp4_error *err)
{
    pthread_once(&lib_once, lib_load);
    if (!lib.why[0])
        return NVFP4_OK;
    return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, NULL, NULL, -1,
                           "%s on rank %d: cannot load %s: %s", GPU_COMM_NAME, rank,
                           lib_name(), lib.why);
}

static nvfp4_status comm_fail(nvfp4_error *err, const char *call, int rank, gcomm_result r)
{
    const char *s = lib.error_string(r);
    return nvfp4_error_set(err, NVFP4_ERR_BACKEND, NULL, NULL, -1, "%s: %s failed on rank %d: %s",
                           GPU_COMM_NAME, call, rank, s ? s : "unknown error");
}

static nvfp4_status gpu_fail(nvfp4_error *err, const char *call, int rank, gpu_error_t e)
{
    (void)gpu_last_error();
    return nvfp4_error_set(err, NVFP4_ERR_BACKEND, NULL, NULL, -1, "%s: %s failed on rank %d: %s",
                           GPU_COMM_NAME, call, rank, gpu_error_string(e));
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    gcomm_t comm;
    gpu_stream_t stream;
    int device, rank;
    int nonblocking;
    double timeout_s; /* the collectives' NVFP4_COMM_TIMEOUT; <= 0: none */
} gcomm;

/* Poll a non-blocking communicator until its pending call completes, or
 * until TIMEOUT_S (> 0) seconds pass: GCOMM_IN_PROGRESS then.  Yielding
 * for the first millisecond (a collective's enqueue), then sleeping 1 ms
 * between polls (an init, which may wait for minutes). */
static gcomm_result settle(gcomm_t comm, double timeout_s)
{
    const struct timespec ms = {0, 1000000L};
    double t0 = now(), t;
    gcomm_result r, async;

    for (;;) {
        if ((r = lib.get_async_error(comm, &async)) != GCOMM_SUCCESS)
            return r;
        if (async != GCOMM_IN_PROGRESS)
            return async;
        t = now() - t0;
        if (timeout_s > 0 && t > timeout_s)
            return GCOMM_IN_PROGRESS;
        if (t < 1e-3)
            sched_yield();
        else
            nanosleep(&ms, NULL);
    }
}

static nvfp4_status c_ready(void *ctx, int rank, nvfp4_error *err)
{
    int device;
    gpu_error_t e;

    if (lib_ready(rank, err) != NVFP4_OK)
        return NVFP4_ERR_NOT_FOUND;
    (void)nvfp4k_gpu_stream(ctx, &device);
    if ((e = gpu_set_device(device)) != GPU_SUCCESS)
        return gpu_fail(err, "set device", rank, e);
    return NVFP4_OK;
}

static nvfp4_status c_make_id(void *ctx, int rank, void *id, size_t cap, size_t *len,
                              nvfp4_error *err)
{
    gcomm_unique_id u;
    gcomm_result r;

    (void)ctx;
    *len = 0;
    if (lib_ready(rank, err) != NVFP4_OK)
        return NVFP4_ERR_NOT_FOUND;
    if (cap < sizeof u)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "%s: a unique id of %zu bytes does not fit %zu", GPU_COMM_NAME,
                               sizeof u, cap);
    if ((r = lib.get_unique_id(&u)) != GCOMM_SUCCESS)
        return comm_fail(err, "ncclGetUniqueId", rank, r);
    memcpy(id, &u, sizeof u);
    *len = sizeof u;
    return NVFP4_OK;
}

static void *c_open(void *ctx, const void *id, size_t len, int rank, int size,
                    double init_timeout_s, double timeout_s, const char **note,
                    int *timed_out, nvfp4_error *err)
{
    gcomm_unique_id u;
    gcomm_result r;
    gpu_error_t e;
    gcomm *g;

    *note = NULL;
    *timed_out = 0;
    if (lib_ready(rank, err) != NVFP4_OK)
        return NULL;
    if (len != sizeof u) {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                        "%s on rank %d: a unique id of %zu bytes, expected %zu", GPU_COMM_NAME,
                        rank, len, sizeof u);
        return NULL;
    }
    g = (gcomm *)calloc(1, sizeof *g);
    if (!g) {
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        return NULL;
    }
    g->rank = rank;
    g->timeout_s = timeout_s;
    g->stream = nvfp4k_gpu_stream(ctx, &g->device);
    memcpy(&u, id, sizeof u);
    /* NCCL binds the communicator to the current device */
    if ((e = gpu_set_device(g->device)) != GPU_SUCCESS) {
        gpu_fail(err, "set device", rank, e);
        free(g);
        return NULL;
    }
    if (!lib.comm_init_rank_config) {
        *note = "the library has no ncclCommInitRankConfig (NCCL/RCCL before 2.14): its "
                "init blocks until every rank joins";
        if ((r = lib.comm_init_rank(&g->comm, size, u, rank)) != GCOMM_SUCCESS) {
            comm_fail(err, "ncclCommInitRank", rank, r);
            free(g);
            return NULL;
        }
        return g;
    }
    {
        gcomm_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.size = sizeof cfg;
        cfg.magic = GCOMM_CONFIG_MAGIC;
        cfg.version = GCOMM_VERSION(2, 14, 0);
        cfg.blocking = 0;
        cfg.cga_cluster_size = cfg.min_ctas = cfg.max_ctas = GCOMM_CONFIG_UNDEF_INT;
        cfg.net_name = NULL;
        g->nonblocking = 1;
        r = lib.comm_init_rank_config(&g->comm, size, u, rank, &cfg);
        if ((r == GCOMM_SUCCESS || r == GCOMM_IN_PROGRESS) && g->comm)
            r = settle(g->comm, init_timeout_s);
        if (r == GCOMM_SUCCESS)
            return g;
        *timed_out = r == GCOMM_IN_PROGRESS;
        if (r == GCOMM_IN_PROGRESS)
            nvfp4_error_set(err, NVFP4_ERR_BACKEND, NULL, NULL, -1,
                            "%s: ncclCommInitRankConfig on rank %d of %d: not every rank "
                            "joined within %g s (NVFP4_COMM_TIMEOUT)", GPU_COMM_NAME, rank,
                            size, init_timeout_s);
        else
            comm_fail(err, "ncclCommInitRankConfig", rank, r);
        if (g->comm)
            (void)lib.comm_abort(g->comm);
        free(g);
        return NULL;
    }
}

static void c_close(void *dc)
{
    gcomm *g = (gcomm *)dc;

    if (!g)
        return;
    (void)gpu_set_device(g->device);
    (void)gpu_stream_sync(g->stream);
    (void)lib.comm_destroy(g->comm);
    free(g);
}

static void c_abort(void *dc)
{
    gcomm *g = (gcomm *)dc;

    if (!g)
        return;
    (void)gpu_set_device(g->device);
    (void)(lib.comm_abort ? lib.comm_abort(g->comm) : lib.comm_destroy(g->comm));
    free(g);
}

/* Enqueued R (on a non-blocking communicator: once it settles): wait for
 * the stream. */
static nvfp4_status done(gcomm *g, const char *call, gcomm_result r, nvfp4_error *err)
{
    gpu_error_t e;

    if (r == GCOMM_IN_PROGRESS && g->nonblocking) {
        r = settle(g->comm, g->timeout_s);
        if (r == GCOMM_IN_PROGRESS)
            return nvfp4_error_set(err, NVFP4_ERR_BACKEND, NULL, NULL, -1,
                                   "%s: %s on rank %d: not enqueued within %g s "
                                   "(NVFP4_COMM_TIMEOUT)", GPU_COMM_NAME, call, g->rank,
                                   g->timeout_s);
    }
    if (r != GCOMM_SUCCESS)
        return comm_fail(err, call, g->rank, r);
    if ((e = gpu_stream_sync(g->stream)) != GPU_SUCCESS)
        return gpu_fail(err, call, g->rank, e);
    return NVFP4_OK;
}

static nvfp4_status c_allreduce_sum(void *dc, float *buf, size_t n, nvfp4_error *err)
{
    gcomm *g = (gcomm *)dc;

    (void)gpu_set_device(g->device);
    return done(g, "ncclAllReduce",
                lib.all_reduce(buf, buf, n, GCOMM_FLOAT32, GCOMM_SUM, g->comm,
                               (void *)g->stream),
                err);
}

static nvfp4_status c_allgather(void *dc, const void *send, size_t bytes, void *recv,
                                nvfp4_error *err)
{
    gcomm *g = (gcomm *)dc;

    (void)gpu_set_device(g->device);
    return done(g, "ncclAllGather",
                lib.all_gather(send, recv, bytes, GCOMM_UINT8, g->comm, (void *)g->stream),
                err);
}

static nvfp4_status c_broadcast(void *dc, void *buf, size_t bytes, int root, nvfp4_error *err)
{
    gcomm *g = (gcomm *)dc;

    (void)gpu_set_device(g->device);
    return done(g, "ncclBroadcast",
                lib.broadcast(buf, buf, bytes, GCOMM_UINT8, root, g->comm, (void *)g->stream),
                err);
}

static const nvfp4_backend_comm_iface c_iface = {
    NVFP4_BACKEND_COMM_VERSION,
    GPU_COMM_NAME,
    c_ready,
    c_make_id,
    c_open,
    c_close,
    c_abort,
    c_allreduce_sum,
    c_allgather,
    c_broadcast,
};

extern "C" NVFP4_API const nvfp4_backend_comm_iface *nvfp4_backend_comm_entry(uint32_t version)
{
    return version == NVFP4_BACKEND_COMM_VERSION ? &c_iface : NULL;
}
