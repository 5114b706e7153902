/* SPDX-License-Identifier: MIT */
/*
 * The communicator of tensor and expert parallelism (libmodel/parallel.c):
 * all-reduce (sum), all-gather and broadcast over the ranks of one job.
 * The process alone is rank 0 of 1 and every collective is the identity;
 * under mpirun, in a build with MPI, the transport is MPI (comm-mpi.c).
 * The all-reduce is an all-gather and a sum in rank order, so that every
 * rank holds the same bits (MPI_Allreduce promises neither the order nor
 * that all ranks agree) and the logits of a split run are reproducible.
 */
#include "config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm-impl.h"

static nvfp4_comm world;
static pthread_once_t world_once = PTHREAD_ONCE_INIT;
static nvfp4_status world_status;
static nvfp4_error world_err;

/* Launched by mpirun (Open MPI sets OMPI_COMM_WORLD_SIZE; PMIx and PMI
 * launchers their rank variables). */
static int under_launcher(void)
{
    const char *force = getenv("NVFP4_COMM");

    if (force && strcmp(force, "single") == 0)
        return 0;
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

static void world_init(void)
{
    world.name = "single";
    world.rank = 0;
    world.size = 1;
    pthread_mutex_init(&world.lock, NULL);
    world_status = NVFP4_OK;
#ifdef HAVE_MPI
    if (under_launcher())
        world_status = nvfp4k_comm_mpi_init(&world, &world_err);
#else
    (void)under_launcher;
#endif
    if (world_status == NVFP4_OK && world.size > 1) {
        world.counts = calloc((size_t)world.size, sizeof(int));
        world.displs = calloc((size_t)world.size, sizeof(int));
        if (!world.counts || !world.displs)
            world_status = nvfp4_error_set(&world_err, NVFP4_ERR_NOMEM, NULL, NULL, -1,
                                           "out of memory");
    }
}

nvfp4_comm *nvfp4_comm_world(nvfp4_error *err)
{
    nvfp4_error_clear(err);
    pthread_once(&world_once, world_init);
    if (world_status != NVFP4_OK) {
        if (err)
            *err = world_err;
        return NULL;
    }
    return &world;
}

const char *nvfp4_comm_name(const nvfp4_comm *c)
{
    return c ? c->name : "single";
}

int nvfp4_comm_rank(const nvfp4_comm *c)
{
    return c ? c->rank : 0;
}

int nvfp4_comm_size(const nvfp4_comm *c)
{
    return c ? c->size : 1;
}

uint64_t nvfp4_comm_bytes_sent(const nvfp4_comm *c)
{
    return c ? c->sent : 0;
}

void nvfp4_comm_abort(nvfp4_comm *c, int code)
{
    if (c && c->host)
        c = c->host;
    if (c && c->ops)
        c->ops->abort(c, code);
}

static nvfp4_status too_big(size_t bytes, nvfp4_error *err)
{
    return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                           "a collective of %zu bytes is beyond MPI's count limit of %d",
                           bytes, INT_MAX);
}

/* counts/displs for the ranks' byte counts; the total into *total. */
static nvfp4_status layout(nvfp4_comm *c, size_t bytes, const size_t *counts, size_t *total,
                           nvfp4_error *err)
{
    size_t off = 0;

    for (int r = 0; r < c->size; r++) {
        size_t b = counts ? counts[r] : bytes;
        if (b > INT_MAX || off > (size_t)INT_MAX - b)
            return too_big(off + b, err);
        c->counts[r] = (int)b;
        c->displs[r] = (int)off;
        off += b;
    }
    *total = off;
    return NVFP4_OK;
}

nvfp4_status nvfp4_comm_allgather(nvfp4_comm *c, const void *send, size_t bytes,
                                  const size_t *counts, void *recv, nvfp4_error *err)
{
    nvfp4_status st;
    size_t total, mine;

    nvfp4_error_clear(err);
    if (!c || (!send && (counts ? counts[c->rank] : bytes)) || !recv)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "nvfp4_comm_allgather needs a communicator and buffers");
    mine = counts ? counts[c->rank] : bytes;
    if (c->dev) {
        for (int r = 0; counts && r < c->size; r++)
            if (counts[r] != counts[0])
                return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, NULL, NULL, -1,
                                       "a %s communicator gathers equal counts only",
                                       c->name);
        pthread_mutex_lock(&c->lock);
        st = c->dev->allgather(c->dc, send, mine, recv, err);
        pthread_mutex_unlock(&c->lock);
        if (st == NVFP4_OK)
            c->sent += (uint64_t)mine * (uint64_t)(c->size - 1);
        return st;
    }
    if (!c->ops) {
        memmove(recv, send, mine);
        return NVFP4_OK;
    }
    pthread_mutex_lock(&c->lock);
    st = layout(c, bytes, counts, &total, err);
    if (st == NVFP4_OK)
        st = c->ops->allgatherv(c, send, c->counts, c->displs, recv, err);
    if (st == NVFP4_OK)
        c->sent += (uint64_t)mine * (uint64_t)(c->size - 1);
    pthread_mutex_unlock(&c->lock);
    return st;
}

nvfp4_status nvfp4_comm_allreduce_sum(nvfp4_comm *c, float *buf, size_t n, nvfp4_error *err)
{
    nvfp4_status st;
    size_t total, size;

    nvfp4_error_clear(err);
    if (!c || (n && !buf))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "nvfp4_comm_allreduce_sum needs a communicator and a buffer");
    if (c->dev && n) {
        /* the library's own order (NCCL/RCCL: ring or tree, the same
         * result on every rank for one job's topology) */
        pthread_mutex_lock(&c->lock);
        st = c->dev->allreduce_sum(c->dc, buf, n, err);
        pthread_mutex_unlock(&c->lock);
        if (st == NVFP4_OK)
            c->sent += (uint64_t)n * sizeof(float) * (uint64_t)(c->size - 1);
        return st;
    }
    if (!c->ops || n == 0)
        return NVFP4_OK;
    size = (size_t)c->size;
    if (n > SIZE_MAX / sizeof(float) / size)
        return too_big(SIZE_MAX, err);
    pthread_mutex_lock(&c->lock);
    st = NVFP4_OK;
    if (c->nred < n) {
        float *p = realloc(c->red, n * size * sizeof(float));
        if (!p) {
            st = nvfp4_error_set(err, NVFP4_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        } else {
            c->red = p;
            c->nred = n;
        }
    }
    if (st == NVFP4_OK)
        st = layout(c, n * sizeof(float), NULL, &total, err);
    if (st == NVFP4_OK)
        st = c->ops->allgatherv(c, buf, c->counts, c->displs, c->red, err);
    if (st == NVFP4_OK) {
        /* rank order: ((b0 + b1) + b2) + ..., the same on every rank */
        memcpy(buf, c->red, n * sizeof(float));
        for (size_t r = 1; r < size; r++) {
            const float *src = c->red + r * n;
            for (size_t i = 0; i < n; i++)
                buf[i] += src[i];
        }
        c->sent += (uint64_t)n * sizeof(float) * (uint64_t)(size - 1);
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}

nvfp4_status nvfp4_comm_broadcast(nvfp4_comm *c, void *buf, size_t bytes, int root,
                                  nvfp4_error *err)
{
    nvfp4_status st;

    nvfp4_error_clear(err);
    if (!c || (bytes && !buf) || root < 0 || root >= c->size)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "nvfp4_comm_broadcast needs a communicator, a buffer and "
                               "a root rank below %d", c ? c->size : 1);
    if (c->dev && bytes) {
        pthread_mutex_lock(&c->lock);
        st = c->dev->broadcast(c->dc, buf, bytes, root, err);
        pthread_mutex_unlock(&c->lock);
        if (st == NVFP4_OK && c->rank == root)
            c->sent += (uint64_t)bytes * (uint64_t)(c->size - 1);
        return st;
    }
    if (!c->ops || bytes == 0)
        return NVFP4_OK;
    if (bytes > INT_MAX)
        return too_big(bytes, err);
    pthread_mutex_lock(&c->lock);
    st = c->ops->bcast(c, buf, (int)bytes, root, err);
    if (st == NVFP4_OK && c->rank == root)
        c->sent += (uint64_t)bytes * (uint64_t)(c->size - 1);
    pthread_mutex_unlock(&c->lock);
    return st;
}

/* ---- device communicators (NCCL, RCCL: backend-impl.h) ---------------------- */

/* The init deadline of a device communicator without NVFP4_COMM_TIMEOUT:
 * generous (a large job's first init may take minutes), yet bounded. */
#define DEV_INIT_TIMEOUT_S 300.0

/* Each rank's word in the agreements of nvfp4_comm_open_device. */
enum { VOTE_OK, VOTE_NONE, VOTE_FAILED, VOTE_WAITED };
typedef struct {
    int32_t code;   /* VOTE_* */
    int32_t status; /* its nvfp4_status */
    char text[NVFP4_ERROR_TEXT_LENGTH]; /* its error */
} dev_vote;

/* All-gather MINE; the lowest rank whose code is FIRST, else SECOND (-1:
 * none) into *WHO. */
static nvfp4_status agree(nvfp4_comm *host, const dev_vote *mine, dev_vote *all, int first,
                          int second, int *who, nvfp4_error *err)
{
    nvfp4_status st = nvfp4_comm_allgather(host, mine, sizeof(*mine), NULL, all, err);

    *who = -1;
    if (st != NVFP4_OK)
        return st;
    for (int r = 0; r < host->size && *who < 0; r++)
        if (all[r].code == first)
            *who = r;
    for (int r = 0; r < host->size && *who < 0 && second >= 0; r++)
        if (all[r].code == second)
            *who = r;
    return NVFP4_OK;
}

static void vote(dev_vote *v, int code, const nvfp4_error *e)
{
    memset(v, 0, sizeof(*v));
    v->code = code;
    v->status = e ? (int32_t)e->status : NVFP4_OK;
    if (e)
        snprintf(v->text, sizeof(v->text), "%s", e->text);
}

/* NVFP4_TEST_DEVICE_COMM_FAIL=R: rank R's open fails before it joins (what
 * a rank that dies or errs between the id's broadcast and the library's
 * init looks like to the others; scripts/gpu-emu-check.sh). */
static int test_fail_rank(void)
{
    const char *s = getenv("NVFP4_TEST_DEVICE_COMM_FAIL");
    char *end;
    long r;

    if (!s || !*s)
        return -1;
    r = strtol(s, &end, 10);
    return *end || r < 0 || r > INT_MAX ? -1 : (int)r;
}

/* What rank 0 broadcasts: whether it made an id, and the id. */
typedef struct {
    int32_t ok;
    uint32_t len;
    unsigned char id[1024];
    char text[NVFP4_ERROR_TEXT_LENGTH]; /* why not */
} dev_id;

nvfp4_comm *nvfp4_comm_open_device(nvfp4_backend *be, nvfp4_comm *host, nvfp4_error *err)
{
    const nvfp4_backend_comm_iface *ci;
    void *ctx, *dc = NULL;
    dev_id id;
    dev_vote mine, *all = NULL;
    nvfp4_comm *c = NULL;
    nvfp4_error e;
    size_t len = 0;
    const char *note = NULL;
    double init_s;
    int who, timed_out = 0;

    nvfp4_error_clear(err);
    nvfp4_error_clear(&e);
    if (!be || !host || host->dev) {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                        "nvfp4_comm_open_device needs a backend and a host communicator");
        return NULL;
    }
    all = calloc((size_t)host->size, sizeof(*all));
    if (!all) {
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        return NULL;
    }
    ci = nvfp4k_backend_comm(be, &ctx);
    /* 1. every rank can join (its library loads, its device is there), or
     * none enters the library's init: a rank that cannot would leave the
     * others waiting inside it */
    if (!ci)
        nvfp4_error_set(&e, NVFP4_ERR_UNSUPPORTED, NULL, NULL, -1,
                        "rank %d: the %s backend has no device communicator (a GPU "
                        "plug-in has one)", host->rank, nvfp4_backend_name(be));
    else
        (void)ci->ready(ctx, host->rank, &e);
    vote(&mine, !ci ? VOTE_NONE : e.status == NVFP4_OK ? VOTE_OK : VOTE_FAILED, &e);
    if (agree(host, &mine, all, VOTE_NONE, VOTE_FAILED, &who, err) != NVFP4_OK)
        goto out;
    if (who >= 0) {
        /* the ranks' own words (they name the rank) */
        nvfp4_error_set(err, (nvfp4_status)all[who].status, NULL, NULL, -1, "%s",
                        all[who].text);
        goto out;
    }
    /* 2. rank 0 makes the id; every rank takes part in the broadcast */
    memset(&id, 0, sizeof(id));
    if (host->rank == 0) {
        nvfp4_error_clear(&e);
        if (ci->make_id(ctx, 0, id.id, sizeof(id.id), &len, &e) == NVFP4_OK &&
            len <= sizeof(id.id)) {
            id.ok = 1;
            id.len = (uint32_t)len;
        } else {
            snprintf(id.text, sizeof(id.text), "%s", e.text);
        }
    }
    if (nvfp4_comm_broadcast(host, &id, sizeof(id), 0, err) != NVFP4_OK)
        goto out;
    if (!id.ok) {
        nvfp4_error_set(err, NVFP4_ERR_BACKEND, NULL, NULL, -1,
                        "rank %d: rank 0 could not make the %s communicator's id: %.*s",
                        host->rank, ci->name, (int)sizeof(id.text), id.text);
        goto out;
    }
    /* 3. join, within the deadline, and agree that every rank did */
    init_s = host->timeout_set ? host->timeout_s : DEV_INIT_TIMEOUT_S;
    nvfp4_error_clear(&e);
    if (host->rank == test_fail_rank())
        nvfp4_error_set(&e, NVFP4_ERR_BACKEND, NULL, NULL, -1,
                        "%s on rank %d: the open failed before the init "
                        "(NVFP4_TEST_DEVICE_COMM_FAIL)", ci->name, host->rank);
    else
        dc = ci->open(ctx, id.id, id.len, host->rank, host->size, init_s,
                      host->timeout_set ? host->timeout_s : 0, &note, &timed_out, &e);
    vote(&mine, dc ? VOTE_OK : timed_out ? VOTE_WAITED : VOTE_FAILED, &e);
    /* a rank that failed at once waits here for those still in the init,
     * up to their deadline: the watchdog allows for it */
    {
        double t = host->timeout_s;
        nvfp4_status st;
        if (t > 0)
            host->timeout_s = t + init_s;
        st = agree(host, &mine, all, VOTE_FAILED, VOTE_WAITED, &who, err);
        host->timeout_s = t;
        if (st != NVFP4_OK)
            who = -2;
    }
    if (who == -2) {
        if (dc)
            ci->abort(dc);
        goto out;
    }
    if (who >= 0) {
        if (dc)
            ci->abort(dc);
        nvfp4_error_set(err, NVFP4_ERR_BACKEND, NULL, NULL, -1,
                        "the %s communicator could not be set up: rank %d of %d failed: %.*s",
                        ci->name, who, host->size, (int)sizeof(all[who].text), all[who].text);
        goto out;
    }
    if (note && host->rank == 0)
        fprintf(stderr, "nvfp4: note: %s: %s\n", ci->name, note);
    c = calloc(1, sizeof(*c));
    if (!c) {
        /* every rank holds a communicator that the others' collectives
         * expect: the job cannot go on */
        ci->abort(dc);
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        goto out;
    }
    c->name = ci->name;
    c->rank = host->rank;
    c->size = host->size;
    c->host = host;
    c->dev = ci;
    c->dc = dc;
    pthread_mutex_init(&c->lock, NULL);
out:
    free(all);
    return c;
}

void nvfp4_comm_free(nvfp4_comm *c)
{
    if (!c || !c->dev)
        return; /* the world communicator lives as long as the process */
    c->dev->close(c->dc);
    pthread_mutex_destroy(&c->lock);
    free(c);
}
