/* SPDX-License-Identifier: MIT */
/*
 * MPI transport of the communicator (comm.c).  MPI_COMM_WORLD with
 * MPI_ERRORS_RETURN, so that a failed call is an nvfp4 error naming it
 * rather than the process dying inside MPI; a rank that dies is noticed by
 * the launcher (Open MPI's mpirun ends the job and names the rank), and a
 * rank that fails calls nvfp4_comm_abort().  A rank that neither fails nor
 * dies but stops answering (stuck, stopped) is caught by the watchdog:
 * with NVFP4_COMM_TIMEOUT=S (seconds, > 0) every collective is a
 * nonblocking one polled until it completes or S seconds pass, and then
 * fails naming this rank, the call and the wait.  Off by default: the
 * first collective waits for every rank's load, which may take minutes.
 */
#include "config.h"

#include <stdlib.h>
#include <time.h>

#include <mpi.h>

#include "comm-impl.h"

static nvfp4_status mpi_fail(int rc, const char *call, nvfp4_comm *c, nvfp4_error *err)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;

    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        len = 0;
    msg[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
    return nvfp4_error_set(err, NVFP4_ERR_BACKEND, NULL, NULL, -1, "%s failed on rank %d: %s",
                           call, c ? c->rank : -1, len ? msg : "unknown MPI error");
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The watchdog: poll REQ until it completes or C's timeout_s pass. */
static nvfp4_status wait_bounded(nvfp4_comm *c, MPI_Request *req, const char *call,
                                 nvfp4_error *err)
{
    double t0 = now();
    int done = 0, rc;

    for (;;) {
        if ((rc = MPI_Test(req, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
            return mpi_fail(rc, call, c, err);
        if (done)
            return NVFP4_OK;
        if (now() - t0 > c->timeout_s)
            /* the request stays pending: the job is to end (nvfp4_comm_abort) */
            return nvfp4_error_set(err, NVFP4_ERR_BACKEND, NULL, NULL, -1,
                                   "%s on rank %d of %d: not every rank took part within "
                                   "%g s (NVFP4_COMM_TIMEOUT); a rank is stuck or has "
                                   "failed", call, c->rank, c->size, c->timeout_s);
    }
}

static nvfp4_status m_allgatherv(nvfp4_comm *c, const void *send, const int *counts,
                                 const int *displs, void *recv, nvfp4_error *err)
{
    MPI_Request req;
    int rc;

    if (c->timeout_s <= 0) {
        rc = MPI_Allgatherv(send, counts[c->rank], MPI_BYTE, recv, counts, displs, MPI_BYTE,
                            MPI_COMM_WORLD);
        return rc == MPI_SUCCESS ? NVFP4_OK : mpi_fail(rc, "MPI_Allgatherv", c, err);
    }
    rc = MPI_Iallgatherv(send, counts[c->rank], MPI_BYTE, recv, counts, displs, MPI_BYTE,
                         MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS)
        return mpi_fail(rc, "MPI_Iallgatherv", c, err);
    return wait_bounded(c, &req, "MPI_Iallgatherv", err);
}

static nvfp4_status m_bcast(nvfp4_comm *c, void *buf, int bytes, int root, nvfp4_error *err)
{
    MPI_Request req;
    int rc;

    if (c->timeout_s <= 0) {
        rc = MPI_Bcast(buf, bytes, MPI_BYTE, root, MPI_COMM_WORLD);
        return rc == MPI_SUCCESS ? NVFP4_OK : mpi_fail(rc, "MPI_Bcast", c, err);
    }
    rc = MPI_Ibcast(buf, bytes, MPI_BYTE, root, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS)
        return mpi_fail(rc, "MPI_Ibcast", c, err);
    return wait_bounded(c, &req, "MPI_Ibcast", err);
}

static void m_abort(nvfp4_comm *c, int code)
{
    (void)c;
    MPI_Abort(MPI_COMM_WORLD, code);
}

static const nvfp4k_comm_ops mpi_ops = {m_allgatherv, m_bcast, m_abort};

static void finalize(void)
{
    int done = 0;

    if (MPI_Finalized(&done) == MPI_SUCCESS && !done)
        MPI_Finalize();
}

nvfp4_status nvfp4k_comm_mpi_init(nvfp4_comm *c, nvfp4_error *err)
{
    int provided = 0, inited = 0, rc;
    const char *t = getenv("NVFP4_COMM_TIMEOUT");

    if (t && *t) {
        char *end;
        double v = strtod(t, &end);
        if (*end || !(v >= 0 && v <= 1e9))
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, "NVFP4_COMM_TIMEOUT", -1,
                                   "expected seconds from 0 (no limit) to 1e9, got '%s'", t);
        c->timeout_s = v;
        c->timeout_set = 1;
    }
    if (MPI_Initialized(&inited) != MPI_SUCCESS)
        inited = 0;
    /* SERIALIZED: comm.c's lock keeps one thread in MPI at a time.  An
     * application that started MPI itself keeps its own settings. */
    if (!inited) {
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS)
            return mpi_fail(rc, "MPI_Init_thread", NULL, err);
        atexit(finalize);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if ((rc = MPI_Comm_rank(MPI_COMM_WORLD, &c->rank)) != MPI_SUCCESS)
        return mpi_fail(rc, "MPI_Comm_rank", NULL, err);
    if ((rc = MPI_Comm_size(MPI_COMM_WORLD, &c->size)) != MPI_SUCCESS)
        return mpi_fail(rc, "MPI_Comm_size", NULL, err);
    c->name = "mpi";
    c->ops = &mpi_ops;
    return NVFP4_OK;
}
