/* SPDX-License-Identifier: MIT */
/*
 * libkernels/gpu/comm-abi.h - the few items of NCCL's C ABI that
 * libkernels/gpu/comm-gpu.cu uses, declared here from NVIDIA's NCCL
 * documentation (the "Types" and "Communicator Creation and Management"
 * pages of the NCCL user guide); RCCL keeps NCCL's API, names and values
 * (AMD's RCCL documentation), so one declaration serves both vendors.  The
 * library itself is dlopen()ed (libnccl.so.2, librccl.so.1), so a plug-in
 * needs neither its header nor its library to build: both vendors' paths
 * compile everywhere.  Where the real header is found at configure time
 * (HAVE_NCCL_H: nccl.h; HAVE_RCCL_H: rccl/rccl.h), comm-gpu.cu checks every
 * value, size and offset below against it at compile time.
 *
 * Our own names (gcomm_*), so that the real header may be included beside
 * this one for those checks.
 */
#ifndef NVFP4_GPU_COMM_ABI_H
#define NVFP4_GPU_COMM_ABI_H

#include <limits.h>
#include <stddef.h>

/* ncclResult_t (an int-sized enum) */
typedef int gcomm_result;
enum {
    GCOMM_SUCCESS = 0,           /* ncclSuccess */
    GCOMM_UNHANDLED_CUDA_ERROR = 1,
    GCOMM_SYSTEM_ERROR = 2,
    GCOMM_INTERNAL_ERROR = 3,
    GCOMM_INVALID_ARGUMENT = 4,
    GCOMM_INVALID_USAGE = 5,
    GCOMM_REMOTE_ERROR = 6,
    GCOMM_IN_PROGRESS = 7        /* ncclInProgress (NCCL 2.14: non-blocking communicators) */
};

/* ncclDataType_t and ncclRedOp_t: the values used */
typedef int gcomm_datatype;
enum { GCOMM_UINT8 = 1 /* ncclUint8 */, GCOMM_FLOAT32 = 7 /* ncclFloat32 */ };
typedef int gcomm_redop;
enum { GCOMM_SUM = 0 /* ncclSum */ };

/* ncclUniqueId: NCCL_UNIQUE_ID_BYTES opaque bytes, passed by value */
#define GCOMM_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[GCOMM_UNIQUE_ID_BYTES];
} gcomm_unique_id;

/* ncclComm_t: a pointer to an opaque struct */
typedef struct gcomm_opaque *gcomm_t;

/* ncclConfig_t as NCCL 2.14 introduced it (ncclCommInitRankConfig).  Later
 * versions append fields; the library reads SIZE bytes (the fields after
 * them keep its defaults) after checking MAGIC and that VERSION is at least
 * 2.14.0, so this prefix with its own size and version is a valid config
 * for every later library.  Unset fields are GCOMM_CONFIG_UNDEF_INT
 * (NCCL_CONFIG_UNDEF_INT) or NULL. */
typedef struct {
    size_t size;
    unsigned int magic;   /* GCOMM_CONFIG_MAGIC */
    unsigned int version; /* GCOMM_VERSION(2, 14, 0) */
    int blocking;         /* 0: every call may return GCOMM_IN_PROGRESS */
    int cga_cluster_size;
    int min_ctas;
    int max_ctas;
    const char *net_name;
} gcomm_config;
#define GCOMM_CONFIG_MAGIC 0xcafebeefu
#define GCOMM_CONFIG_UNDEF_INT INT_MIN
/* NCCL_VERSION for 2.9 and later */
#define GCOMM_VERSION(x, y, z) ((x) * 10000 + (y) * 100 + (z))

/* The entry points (their NCCL names in the comments); the stream is the
 * runtime's (cudaStream_t / hipStream_t), passed as the pointer it is. */
typedef gcomm_result (*gcomm_get_unique_id_fn)(gcomm_unique_id *id);   /* ncclGetUniqueId */
typedef gcomm_result (*gcomm_get_version_fn)(int *version);            /* ncclGetVersion */
typedef gcomm_result (*gcomm_comm_init_rank_fn)(gcomm_t *comm, int nranks, gcomm_unique_id id,
                                                int rank);             /* ncclCommInitRank */
typedef gcomm_result (*gcomm_comm_init_rank_config_fn)(gcomm_t *comm, int nranks,
                                                       gcomm_unique_id id, int rank,
                                                       gcomm_config *config);
                                                       /* ncclCommInitRankConfig (2.14) */
typedef gcomm_result (*gcomm_comm_get_async_error_fn)(gcomm_t comm, gcomm_result *async);
                                                       /* ncclCommGetAsyncError (2.4) */
typedef gcomm_result (*gcomm_comm_abort_fn)(gcomm_t comm);            /* ncclCommAbort (2.4) */
typedef gcomm_result (*gcomm_comm_destroy_fn)(gcomm_t comm);          /* ncclCommDestroy */
typedef gcomm_result (*gcomm_all_reduce_fn)(const void *send, void *recv, size_t count,
                                            gcomm_datatype type, gcomm_redop op, gcomm_t comm,
                                            void *stream);            /* ncclAllReduce */
typedef gcomm_result (*gcomm_all_gather_fn)(const void *send, void *recv, size_t sendcount,
                                            gcomm_datatype type, gcomm_t comm,
                                            void *stream);            /* ncclAllGather */
typedef gcomm_result (*gcomm_broadcast_fn)(const void *send, void *recv, size_t count,
                                           gcomm_datatype type, int root, gcomm_t comm,
                                           void *stream);             /* ncclBroadcast */
typedef const char *(*gcomm_get_error_string_fn)(gcomm_result r);     /* ncclGetErrorString */

#endif
