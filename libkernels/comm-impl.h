/* SPDX-License-Identifier: MIT */
/* The communicator's transports (comm.c: the process alone; comm-mpi.c:
 * MPI, built when configure finds it).  Not exported. */
#ifndef NVFP4_KERNELS_COMM_IMPL_H
#define NVFP4_KERNELS_COMM_IMPL_H

#include <pthread.h>

#include <nvfp4/kernels.h>

#include "backend-impl.h"

typedef struct {
    /* Every rank's counts[r] bytes at displs[r] of recv, in rank order. */
    nvfp4_status (*allgatherv)(nvfp4_comm *c, const void *send, const int *counts,
                               const int *displs, void *recv, nvfp4_error *err);
    nvfp4_status (*bcast)(nvfp4_comm *c, void *buf, int bytes, int root, nvfp4_error *err);
    void (*abort)(nvfp4_comm *c, int code);
} nvfp4k_comm_ops;

struct nvfp4_comm {
    const char *name;
    int rank, size;
    const nvfp4k_comm_ops *ops;   /* NULL: the process alone */
    pthread_mutex_t lock;         /* one collective at a time */
    uint64_t sent;
    float *red;                   /* all-reduce staging, [size * nred] */
    size_t nred;
    int *counts, *displs;         /* [size] */
    double timeout_s;             /* NVFP4_COMM_TIMEOUT (comm-mpi.c); 0: none */
    int timeout_set;              /* whether it was set */
    /* a device communicator (nvfp4_comm_open_device): the plug-in's table
     * and object, and the host communicator it was made over */
    const nvfp4_backend_comm_iface *dev;
    void *dc;
    nvfp4_comm *host;
};

/* comm-mpi.c: start MPI and fill C (rank, size, ops); NVFP4_ERR_BACKEND
 * naming the MPI call on failure. */
nvfp4_status nvfp4k_comm_mpi_init(nvfp4_comm *c, nvfp4_error *err);

#endif
