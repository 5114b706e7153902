/* SPDX-License-Identifier: MIT */
/*
 * tests/nccl-emu.c - a stand-in for libnccl.so.2 under the GPU emulator
 * (scripts/gpu-emu-check.sh builds it as libnccl-emu.so and points
 * NVFP4_COMM_LIBRARY at it), so that libkernels/gpu/comm-gpu.cu's logic -
 * loading the library, the non-blocking init and its deadline, the abort,
 * the collectives on the backend's "device" buffers - runs on the CPU.  It
 * implements the entry points comm-gpu.cu calls, with the behaviour NCCL's
 * documentation gives them, between the processes of one machine: the
 * unique id names a POSIX shared-memory region that every rank maps.
 *   - ncclCommInitRankConfig checks the config as NCCL does (magic,
 *     version >= 2.14, size); non-blocking (blocking = 0), it returns
 *     ncclInProgress and ncclCommGetAsyncError says ncclInProgress until
 *     every rank has joined; blocking, it waits for them (for ever, as
 *     NCCL's does).
 *   - the collectives copy through a slot per rank between two barriers;
 *     the sum adds the ranks' values in rank order.
 *   - ncclCommAbort leaves at once and removes the region if not every
 *     rank joined.
 * The emulator's device memory is host memory and its streams are
 * synchronous, so every collective is complete when it returns.  Built
 * with -DNCCL_EMU_BEFORE_2_14 it lacks what NCCL 2.14 added
 * (ncclCommInitRankConfig; ncclCommGetAsyncError and ncclCommAbort are
 * older, but comm-gpu.cu needs all three for the non-blocking init), as
 * an older library would.  With
 * NVFP4_NCCL_EMU_TRACE=1 each call says so on stderr (the tests check that
 * the collectives ran here).  Not a transport for real use.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../libkernels/gpu/comm-abi.h"

#define EMU_API __attribute__((visibility("default")))
#define MAGIC "nvfp4-nccl-emu"
#define SLOT ((size_t)1 << 20) /* bytes per rank and round */
#define MAX_RANKS 64

typedef struct {
    int32_t nranks;
    int32_t attached;
    int32_t aborted;
    int32_t count;
    uint32_t gen;
} shared_hdr;

struct gcomm_opaque {
    shared_hdr *h;
    unsigned char *slots;
    size_t bytes;
    int rank, nranks;
    char name[GCOMM_UNIQUE_ID_BYTES];
};

static int trace(void)
{
    const char *s = getenv("NVFP4_NCCL_EMU_TRACE");
    return s && !strcmp(s, "1");
}

EMU_API const char *ncclGetErrorString(gcomm_result r)
{
    switch (r) {
    case GCOMM_SUCCESS: return "no error (nccl-emu)";
    case GCOMM_SYSTEM_ERROR: return "unhandled system error (nccl-emu)";
    case GCOMM_INTERNAL_ERROR: return "internal error (nccl-emu)";
    case GCOMM_INVALID_ARGUMENT: return "invalid argument (nccl-emu)";
    case GCOMM_INVALID_USAGE: return "invalid usage (nccl-emu)";
    case GCOMM_REMOTE_ERROR: return "remote process exited or there was a network error "
                                    "(nccl-emu)";
    case GCOMM_IN_PROGRESS: return "NCCL operation in progress (nccl-emu)";
    default: return "unknown result code (nccl-emu)";
    }
}

EMU_API gcomm_result ncclGetVersion(int *version)
{
    if (!version)
        return GCOMM_INVALID_ARGUMENT;
    *version = GCOMM_VERSION(2, 14, 0);
    return GCOMM_SUCCESS;
}

EMU_API gcomm_result ncclGetUniqueId(gcomm_unique_id *id)
{
    static unsigned counter;
    struct timespec ts;

    if (!id)
        return GCOMM_INVALID_ARGUMENT;
    clock_gettime(CLOCK_REALTIME, &ts);
    memset(id, 0, sizeof(*id));
    memcpy(id->internal, MAGIC, sizeof(MAGIC));
    snprintf(id->internal + sizeof(MAGIC), 64, "/nvfp4-nccl-emu-%ld-%u-%lx", (long)getpid(),
             __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED),
             (unsigned long)ts.tv_nsec ^ (unsigned long)ts.tv_sec);
    return GCOMM_SUCCESS;
}

static int all_joined(const struct gcomm_opaque *c)
{
    return __atomic_load_n(&c->h->attached, __ATOMIC_ACQUIRE) >= c->nranks;
}

static gcomm_result init(gcomm_t *comm, int nranks, gcomm_unique_id id, int rank,
                         const gcomm_config *cfg)
{
    struct gcomm_opaque *c;
    int fd, blocking = 1;
    void *p;

    if (!comm || nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks ||
        memcmp(id.internal, MAGIC, sizeof(MAGIC)))
        return GCOMM_INVALID_ARGUMENT;
    *comm = NULL;
    if (cfg) {
        /* NCCL refuses a config not made by NCCL_CONFIG_INITIALIZER */
        if (cfg->magic != GCOMM_CONFIG_MAGIC || cfg->version < GCOMM_VERSION(2, 14, 0) ||
            cfg->size < offsetof(gcomm_config, blocking) + sizeof(int))
            return GCOMM_INVALID_ARGUMENT;
        if (cfg->blocking != GCOMM_CONFIG_UNDEF_INT)
            blocking = cfg->blocking != 0;
    }
    c = calloc(1, sizeof(*c));
    if (!c)
        return GCOMM_SYSTEM_ERROR;
    snprintf(c->name, sizeof(c->name), "%s", id.internal + sizeof(MAGIC));
    c->rank = rank;
    c->nranks = nranks;
    c->bytes = 4096 + (size_t)nranks * SLOT;
    fd = shm_open(c->name, O_RDWR | O_CREAT, 0600);
    if (fd < 0) {
        free(c);
        return GCOMM_SYSTEM_ERROR;
    }
    if (ftruncate(fd, (off_t)c->bytes) != 0 ||
        (p = mmap(NULL, c->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        close(fd);
        free(c);
        return GCOMM_SYSTEM_ERROR;
    }
    close(fd);
    c->h = p;
    c->slots = (unsigned char *)p + 4096;
    __atomic_store_n(&c->h->nranks, nranks, __ATOMIC_RELEASE);
    /* the last to join removes the name (the mappings stay) */
    if (__atomic_add_fetch(&c->h->attached, 1, __ATOMIC_ACQ_REL) == nranks)
        shm_unlink(c->name);
    *comm = c;
    if (trace())
        fprintf(stderr, "nccl-emu: rank %d of %d: init (%s)\n", rank, nranks,
                blocking ? "blocking" : "non-blocking");
    if (!blocking)
        return GCOMM_IN_PROGRESS;
    while (!all_joined(c))
        sched_yield();
    return GCOMM_SUCCESS;
}

#ifndef NCCL_EMU_BEFORE_2_14
EMU_API gcomm_result ncclCommInitRankConfig(gcomm_t *comm, int nranks, gcomm_unique_id id,
                                            int rank, gcomm_config *config)
{
    return init(comm, nranks, id, rank, config);
}
#endif

EMU_API gcomm_result ncclCommInitRank(gcomm_t *comm, int nranks, gcomm_unique_id id, int rank)
{
    return init(comm, nranks, id, rank, NULL);
}

EMU_API gcomm_result ncclCommGetAsyncError(gcomm_t c, gcomm_result *async)
{
    if (!c || !async)
        return GCOMM_INVALID_ARGUMENT;
    *async = __atomic_load_n(&c->h->aborted, __ATOMIC_ACQUIRE) ? GCOMM_REMOTE_ERROR
             : all_joined(c)                                  ? GCOMM_SUCCESS
                                                              : GCOMM_IN_PROGRESS;
    return GCOMM_SUCCESS;
}

static void leave(gcomm_t c)
{
    munmap(c->h, c->bytes);
    free(c);
}

EMU_API gcomm_result ncclCommAbort(gcomm_t c)
{
    if (!c)
        return GCOMM_SUCCESS;
    if (trace())
        fprintf(stderr, "nccl-emu: rank %d: abort\n", c->rank);
    __atomic_store_n(&c->h->aborted, 1, __ATOMIC_RELEASE);
    if (!all_joined(c))
        shm_unlink(c->name);
    leave(c);
    return GCOMM_SUCCESS;
}

EMU_API gcomm_result ncclCommDestroy(gcomm_t c)
{
    if (c)
        leave(c);
    return GCOMM_SUCCESS;
}

/* Every rank here, or GCOMM_REMOTE_ERROR when one aborted. */
static gcomm_result barrier(gcomm_t c)
{
    shared_hdr *h = c->h;
    uint32_t g = __atomic_load_n(&h->gen, __ATOMIC_ACQUIRE);

    if (__atomic_add_fetch(&h->count, 1, __ATOMIC_ACQ_REL) == c->nranks) {
        __atomic_store_n(&h->count, 0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&h->gen, 1, __ATOMIC_RELEASE);
        return GCOMM_SUCCESS;
    }
    while (__atomic_load_n(&h->gen, __ATOMIC_ACQUIRE) == g) {
        if (__atomic_load_n(&h->aborted, __ATOMIC_ACQUIRE))
            return GCOMM_REMOTE_ERROR;
        sched_yield();
    }
    return GCOMM_SUCCESS;
}

static unsigned char *slot(gcomm_t c, int r)
{
    return c->slots + (size_t)r * SLOT;
}

static size_t type_size(gcomm_datatype t)
{
    return t == GCOMM_UINT8 ? 1 : t == GCOMM_FLOAT32 ? 4 : 0;
}

static gcomm_result ready(gcomm_t c)
{
    return !c ? GCOMM_INVALID_ARGUMENT : all_joined(c) ? GCOMM_SUCCESS : GCOMM_INVALID_USAGE;
}

EMU_API gcomm_result ncclAllReduce(const void *send, void *recv, size_t count,
                                   gcomm_datatype type, gcomm_redop op, gcomm_t c, void *stream)
{
    const size_t per = SLOT / sizeof(float);
    gcomm_result r;

    (void)stream;
    if ((r = ready(c)) != GCOMM_SUCCESS)
        return r;
    if (type != GCOMM_FLOAT32 || op != GCOMM_SUM || (count && (!send || !recv)))
        return GCOMM_INVALID_ARGUMENT;
    if (trace())
        fprintf(stderr, "nccl-emu: rank %d: all-reduce of %zu floats\n", c->rank, count);
    for (size_t off = 0; off < count; off += per) {
        size_t n = count - off < per ? count - off : per;
        float *out = (float *)recv + off;
        memcpy(slot(c, c->rank), (const float *)send + off, n * sizeof(float));
        if ((r = barrier(c)) != GCOMM_SUCCESS)
            return r;
        for (size_t i = 0; i < n; i++) {
            float acc = ((const float *)slot(c, 0))[i];
            for (int k = 1; k < c->nranks; k++)
                acc += ((const float *)slot(c, k))[i];
            out[i] = acc;
        }
        if ((r = barrier(c)) != GCOMM_SUCCESS)
            return r;
    }
    return GCOMM_SUCCESS;
}

EMU_API gcomm_result ncclAllGather(const void *send, void *recv, size_t sendcount,
                                   gcomm_datatype type, gcomm_t c, void *stream)
{
    size_t bytes = sendcount * type_size(type);
    gcomm_result r;

    (void)stream;
    if ((r = ready(c)) != GCOMM_SUCCESS)
        return r;
    if (!type_size(type) || (bytes && (!send || !recv)))
        return GCOMM_INVALID_ARGUMENT;
    if (trace())
        fprintf(stderr, "nccl-emu: rank %d: all-gather of %zu bytes\n", c->rank, bytes);
    for (size_t off = 0; off < bytes; off += SLOT) {
        size_t n = bytes - off < SLOT ? bytes - off : SLOT;
        memcpy(slot(c, c->rank), (const unsigned char *)send + off, n);
        if ((r = barrier(c)) != GCOMM_SUCCESS)
            return r;
        for (int k = 0; k < c->nranks; k++)
            memcpy((unsigned char *)recv + (size_t)k * bytes + off, slot(c, k), n);
        if ((r = barrier(c)) != GCOMM_SUCCESS)
            return r;
    }
    return GCOMM_SUCCESS;
}

EMU_API gcomm_result ncclBroadcast(const void *send, void *recv, size_t count,
                                   gcomm_datatype type, int root, gcomm_t c, void *stream)
{
    size_t bytes = count * type_size(type);
    gcomm_result r;

    (void)stream;
    if ((r = ready(c)) != GCOMM_SUCCESS)
        return r;
    if (!type_size(type) || root < 0 || root >= c->nranks || (bytes && (!send || !recv)))
        return GCOMM_INVALID_ARGUMENT;
    if (trace())
        fprintf(stderr, "nccl-emu: rank %d: broadcast of %zu bytes from %d\n", c->rank, bytes,
                root);
    for (size_t off = 0; off < bytes; off += SLOT) {
        size_t n = bytes - off < SLOT ? bytes - off : SLOT;
        if (c->rank == root)
            memcpy(slot(c, root), (const unsigned char *)send + off, n);
        if ((r = barrier(c)) != GCOMM_SUCCESS)
            return r;
        memmove((unsigned char *)recv + off, slot(c, root), n);
        if ((r = barrier(c)) != GCOMM_SUCCESS)
            return r;
    }
    return GCOMM_SUCCESS;
}
