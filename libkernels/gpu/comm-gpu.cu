/* SPDX-License-Identifier: MIT */
/*
 * libkernels/gpu/comm-gpu.cu - the device communicator of the GPU plug-ins
 * (libkernels/backend-impl.h's nvfp4_backend_comm_iface): NCCL in the CUDA
 * one, RCCL in the HIP one, when configure found the header (HAVE_NCCL,
 * HAVE_RCCL); otherwise the plug-in exports no table.  The library is
 * dlopen()ed at the first unique id or communicator, so that the plug-in
 * loads, and runs on one device, where it is absent.  The collectives run
 * on the backend's stream and return once it is synced; every failure is
 * NVFP4_ERR_BACKEND naming the library, the call, the rank and the
 * library's error string.  Not built into the emulator (gpu-emu.test).
 */
#include "config.h"

#include "gpu.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "../backend-impl.h"

/* backend-gpu.cu: the device and stream of an opened backend */
gpu_stream_t nvfp4k_gpu_stream(void *ctx, int *device);

#ifdef GPU_COMM_NAME

/* The entry points used, resolved from GPU_COMM_LIBRARY. */
static struct {
    ncclResult_t (*get_unique_id)(ncclUniqueId *id);
    ncclResult_t (*comm_init_rank)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
    ncclResult_t (*comm_destroy)(ncclComm_t comm);
    ncclResult_t (*all_reduce)(const void *send, void *recv, size_t count,
                               ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                               gpu_stream_t stream);
    ncclResult_t (*all_gather)(const void *send, void *recv, size_t count,
                               ncclDataType_t type, ncclComm_t comm, gpu_stream_t stream);
    ncclResult_t (*broadcast)(const void *send, void *recv, size_t count,
                              ncclDataType_t type, int root, ncclComm_t comm,
                              gpu_stream_t stream);
    const char *(*error_string)(ncclResult_t r);
    char why[256]; /* empty when loaded */
} lib;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;

static void lib_load(void)
{
    void *h = dlopen(GPU_COMM_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    const char *dl;

    if (!h) {
        dl = dlerror();
        snprintf(lib.why, sizeof lib.why, "%s", dl ? dl : "dlopen failed");
        return;
    }
    *(void **)&lib.get_unique_id = dlsym(h, "ncclGetUniqueId");
    *(void **)&lib.comm_init_rank = dlsym(h, "ncclCommInitRank");
    *(void **)&lib.comm_destroy = dlsym(h, "ncclCommDestroy");
    *(void **)&lib.all_reduce = dlsym(h, "ncclAllReduce");
    *(void **)&lib.all_gather = dlsym(h, "ncclAllGather");
    *(void **)&lib.broadcast = dlsym(h, "ncclBroadcast");
    *(void **)&lib.error_string = dlsym(h, "ncclGetErrorString");
    if (!lib.get_unique_id || !lib.comm_init_rank || !lib.comm_destroy || !lib.all_reduce ||
        !lib.all_gather || !lib.broadcast || !lib.error_string)
        snprintf(lib.why, sizeof lib.why, "%s lacks an nccl* entry point it should have",
                 GPU_COMM_LIBRARY);
    /* never closed: the communicators may outlive any one backend */
}

static nvfp4_status lib_ready(int rank, nvfp4_error *err)
{
    pthread_once(&lib_once, lib_load);
    if (!lib.why[0])
        return NVFP4_OK;
    return nvfp4_error_set(err, NVFP4_ERR_BACKEND, NULL, NULL, -1,
                           "%s on rank %d: cannot load %s: %s", GPU_COMM_NAME, rank,
                           GPU_COMM_LIBRARY, lib.why);
}

static nvfp4_status comm_fail(nvfp4_error *err, const char *call, int rank, ncclResult_t r)
{
    return nvfp4_error_set(err, NVFP4_ERR_BACKEND, NULL, NULL, -1, "%s: %s failed on rank %d: %s",
                           GPU_COMM_NAME, call, rank, lib.error_string(r));
}

static nvfp4_status gpu_fail(nvfp4_error *err, const char *call, int rank, gpu_error_t e)
{
    (void)gpu_last_error();
    return nvfp4_error_set(err, NVFP4_ERR_BACKEND, NULL, NULL, -1, "%s: %s failed on rank %d: %s",
                           GPU_COMM_NAME, call, rank, gpu_error_string(e));
}

typedef struct {
    ncclComm_t comm;
    gpu_stream_t stream;
    int device, rank;
} gcomm;

static nvfp4_status c_make_id(void *ctx, int rank, void *id, size_t cap, size_t *len,
                              nvfp4_error *err)
{
    ncclUniqueId u;
    ncclResult_t r;

    (void)ctx;
    *len = 0;
    if (lib_ready(rank, err) != NVFP4_OK)
        return NVFP4_ERR_BACKEND;
    if (cap < sizeof u)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "%s: a unique id of %zu bytes does not fit %zu", GPU_COMM_NAME,
                               sizeof u, cap);
    if ((r = lib.get_unique_id(&u)) != ncclSuccess)
        return comm_fail(err, "ncclGetUniqueId", rank, r);
    memcpy(id, &u, sizeof u);
    *len = sizeof u;
    return NVFP4_OK;
}

static void *c_open(void *ctx, const void *id, size_t len, int rank, int size,
                    nvfp4_error *err)
{
    ncclUniqueId u;
    ncclResult_t r;
    gpu_error_t e;
    gcomm *g;

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
    g->stream = nvfp4k_gpu_stream(ctx, &g->device);
    memcpy(&u, id, sizeof u);
    /* NCCL binds the communicator to the current device */
    if ((e = gpu_set_device(g->device)) != GPU_SUCCESS) {
        gpu_fail(err, "set device", rank, e);
        free(g);
        return NULL;
    }
    if ((r = lib.comm_init_rank(&g->comm, size, u, rank)) != ncclSuccess) {
        comm_fail(err, "ncclCommInitRank", rank, r);
        free(g);
        return NULL;
    }
    return g;
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

/* Enqueued R: wait for the stream. */
static nvfp4_status done(gcomm *g, const char *call, ncclResult_t r, nvfp4_error *err)
{
    gpu_error_t e;

    if (r != ncclSuccess)
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
                lib.all_reduce(buf, buf, n, ncclFloat32, ncclSum, g->comm, g->stream), err);
}

static nvfp4_status c_allgather(void *dc, const void *send, size_t bytes, void *recv,
                                nvfp4_error *err)
{
    gcomm *g = (gcomm *)dc;

    (void)gpu_set_device(g->device);
    return done(g, "ncclAllGather",
                lib.all_gather(send, recv, bytes, ncclUint8, g->comm, g->stream), err);
}

static nvfp4_status c_broadcast(void *dc, void *buf, size_t bytes, int root, nvfp4_error *err)
{
    gcomm *g = (gcomm *)dc;

    (void)gpu_set_device(g->device);
    return done(g, "ncclBroadcast",
                lib.broadcast(buf, buf, bytes, ncclUint8, root, g->comm, g->stream), err);
}

static const nvfp4_backend_comm_iface c_iface = {
    NVFP4_BACKEND_COMM_VERSION,
    GPU_COMM_NAME,
    c_make_id,
    c_open,
    c_close,
    c_allreduce_sum,
    c_allgather,
    c_broadcast,
};

extern "C" NVFP4_API const nvfp4_backend_comm_iface *nvfp4_backend_comm_entry(uint32_t version)
{
    return version == NVFP4_BACKEND_COMM_VERSION ? &c_iface : NULL;
}

#else /* no NCCL/RCCL header at build time */

extern "C" NVFP4_API const nvfp4_backend_comm_iface *nvfp4_backend_comm_entry(uint32_t version)
{
    (void)version;
    (void)nvfp4k_gpu_stream;
    return NULL;
}

#endif
