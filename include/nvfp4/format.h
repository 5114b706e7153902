/* SPDX-License-Identifier: MIT */
/*
 * nvfp4/format.h - the file layer of nvfp4: safetensors files, sharded
 * checkpoints (model.safetensors.index.json) and Hugging Face config.json.
 *
 * This layer knows nothing about quantization.  Everything it opens is
 * memory-mapped; opening a checkpoint reads headers only, never tensor data.
 *
 * Errors: every fallible call returns NULL or a non-zero nvfp4_status and, when
 * the caller passes one, fills an nvfp4_error that names the file, the tensor
 * or JSON key and, where it makes sense, the byte offset of the problem.
 */
#ifndef NVFP4_FORMAT_H
#define NVFP4_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(NVFP4_BUILDING) && defined(__GNUC__)
#define NVFP4_API __attribute__((visibility("default")))
#else
#define NVFP4_API
#endif

#if defined(__GNUC__)
#define NVFP4_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define NVFP4_PRINTF(a, b)
#endif

#define NVFP4_VERSION_STRING "0.1.0"

/* ---- status and errors ------------------------------------------------ */

typedef enum {
    NVFP4_OK = 0,
    NVFP4_ERR_IO,              /* open/stat/mmap/read failed */
    NVFP4_ERR_NOMEM,           /* allocation failed */
    NVFP4_ERR_TRUNCATED,       /* file shorter than its header says */
    NVFP4_ERR_HEADER_TOO_LARGE,/* header length absurd or beyond the file */
    NVFP4_ERR_BAD_JSON,        /* not valid JSON, or not the expected JSON type */
    NVFP4_ERR_BAD_ENTRY,       /* a header entry is not an object / lacks keys */
    NVFP4_ERR_BAD_DTYPE,       /* unknown or unexpected dtype */
    NVFP4_ERR_BAD_SHAPE,       /* negative, non-integer or unexpected dims */
    NVFP4_ERR_OVERFLOW,        /* a size computation overflows 64 bits */
    NVFP4_ERR_BAD_SIZE,        /* byte range length != prod(shape)*itemsize */
    NVFP4_ERR_OUT_OF_RANGE,    /* byte range outside the data region */
    NVFP4_ERR_OVERLAP,         /* two tensors share bytes */
    NVFP4_ERR_DUPLICATE,       /* the same name twice */
    NVFP4_ERR_NOT_FOUND,       /* a tensor, key, shard or file is missing */
    NVFP4_ERR_TYPE,            /* a JSON value has the wrong type */
    NVFP4_ERR_INVALID,         /* an invalid value or argument */
    NVFP4_ERR_UNSUPPORTED,     /* recognised but not supported */
    NVFP4_ERR_SCALE_MISMATCH,  /* fused shards with differing global scales */
    NVFP4_ERR_BACKEND,         /* a compute backend failed or is unavailable */
    NVFP4_ERR_DEVICE_OOM,      /* a device ran out of memory */
    NVFP4_ERR_NONFINITE,       /* a result (logit) is NaN or infinite */
    NVFP4_ERR_KV_FULL,         /* a context's KV cache has too few free blocks */
    NVFP4_ERR_CANCELLED,       /* the caller's progress callback asked to stop */
    NVFP4_STATUS_COUNT
} nvfp4_status;

#define NVFP4_ERROR_TEXT_LENGTH 512
#define NVFP4_ERROR_FIELD_LENGTH 256

/* Caller-owned error description (cf. jansson's json_error_t). */
typedef struct {
    nvfp4_status status;
    char text[NVFP4_ERROR_TEXT_LENGTH];  /* full human-readable message */
    char file[NVFP4_ERROR_FIELD_LENGTH]; /* path of the file, "" if none */
    char key[NVFP4_ERROR_FIELD_LENGTH];  /* tensor name or JSON key, "" if none */
    int64_t offset;                      /* byte offset in file, -1 if none */
} nvfp4_error;

NVFP4_API const char *nvfp4_strerror(nvfp4_status status);

/* Fill *err (if not NULL) and return status.  The message becomes
 * "FILE: KEY: text" with the parts that are set.  Used by every layer. */
NVFP4_API nvfp4_status nvfp4_error_set(nvfp4_error *err, nvfp4_status status,
                                       const char *file, const char *key,
                                       int64_t offset, const char *fmt, ...)
    NVFP4_PRINTF(6, 7);
NVFP4_API void nvfp4_error_clear(nvfp4_error *err);

NVFP4_API const char *nvfp4_format_version(void);

/* ---- dtypes ------------------------------------------------------------ */

typedef enum {
    NVFP4_DTYPE_BOOL = 0,
    NVFP4_DTYPE_U8,
    NVFP4_DTYPE_I8,
    NVFP4_DTYPE_F8_E4M3,
    NVFP4_DTYPE_F8_E5M2,
    NVFP4_DTYPE_I16,
    NVFP4_DTYPE_U16,
    NVFP4_DTYPE_F16,
    NVFP4_DTYPE_BF16,
    NVFP4_DTYPE_I32,
    NVFP4_DTYPE_U32,
    NVFP4_DTYPE_F32,
    NVFP4_DTYPE_I64,
    NVFP4_DTYPE_U64,
    NVFP4_DTYPE_F64,
    NVFP4_DTYPE_COUNT
} nvfp4_dtype;

/* The name as safetensors spells it ("F8_E4M3", "BF16", ...). */
NVFP4_API const char *nvfp4_dtype_name(nvfp4_dtype dtype);
/* Bytes per element. */
NVFP4_API size_t nvfp4_dtype_size(nvfp4_dtype dtype);
/* 0 and *out set when name is a safetensors dtype, -1 otherwise. */
NVFP4_API int nvfp4_dtype_from_name(const char *name, nvfp4_dtype *out);

/* ---- one tensor -------------------------------------------------------- */

#define NVFP4_MAX_DIMS 8

typedef struct {
    const char *name;        /* tensor name */
    const char *file;        /* path of the file holding it */
    nvfp4_dtype dtype;
    int ndim;                /* 0 for a scalar */
    int64_t shape[NVFP4_MAX_DIMS];
    uint64_t numel;          /* product of shape (1 for a scalar) */
    uint64_t nbytes;         /* numel * dtype size */
    uint64_t offset;         /* absolute byte offset of the data in file */
    const void *data;        /* into the read-only mapping */
} nvfp4_tensor;

/* "[4096, 14336]" (rank 0: "[]") into BUF of N bytes; returns BUF. */
NVFP4_API const char *nvfp4_tensor_shape_text(const nvfp4_tensor *t, char *buf, size_t n);

/* ---- a single safetensors file ----------------------------------------- */

typedef struct nvfp4_safetensors nvfp4_safetensors;

/* Maps the file and validates its header completely (names, dtypes, shapes,
 * sizes, ranges, overlaps).  Tensor data is not touched. */
NVFP4_API nvfp4_safetensors *nvfp4_safetensors_open(const char *path,
                                                    nvfp4_error *err);
NVFP4_API void nvfp4_safetensors_free(nvfp4_safetensors *st);
NVFP4_API const char *nvfp4_safetensors_path(const nvfp4_safetensors *st);
/* Tensors in header order of their data offsets. */
NVFP4_API size_t nvfp4_safetensors_count(const nvfp4_safetensors *st);
NVFP4_API const nvfp4_tensor *nvfp4_safetensors_tensor(const nvfp4_safetensors *st,
                                                       size_t i);
NVFP4_API const nvfp4_tensor *nvfp4_safetensors_find(const nvfp4_safetensors *st,
                                                     const char *name);
/* __metadata__ entries (string -> string), in the header's order. */
NVFP4_API size_t nvfp4_safetensors_metadata_count(const nvfp4_safetensors *st);
NVFP4_API int nvfp4_safetensors_metadata(const nvfp4_safetensors *st, size_t i,
                                         const char **key, const char **value);
NVFP4_API const char *nvfp4_safetensors_metadata_get(const nvfp4_safetensors *st,
                                                     const char *key);

/* ---- writing a safetensors file ------------------------------------------
 * Declare every tensor (the header holds all byte ranges), then open the
 * file, which writes the header, stream the data of the tensors in
 * declaration order in pieces of any size, and close.  Closing checks that
 * every declared byte was written; a writer freed or closed before that
 * removes its file.  Errors name the file and the tensor. */
typedef struct nvfp4_safetensors_writer nvfp4_safetensors_writer;

NVFP4_API nvfp4_safetensors_writer *nvfp4_safetensors_writer_new(nvfp4_error *err);
NVFP4_API void nvfp4_safetensors_writer_free(nvfp4_safetensors_writer *w);
/* A string entry of "__metadata__" (e.g. "format" = "pt"). */
NVFP4_API nvfp4_status nvfp4_safetensors_writer_metadata(nvfp4_safetensors_writer *w,
                                                         const char *key, const char *value,
                                                         nvfp4_error *err);
NVFP4_API nvfp4_status nvfp4_safetensors_writer_declare(nvfp4_safetensors_writer *w,
                                                        const char *name, nvfp4_dtype dtype,
                                                        int ndim, const int64_t *shape,
                                                        nvfp4_error *err);
/* Bytes of data declared so far (the file is that plus the header). */
NVFP4_API uint64_t nvfp4_safetensors_writer_data_size(const nvfp4_safetensors_writer *w);
NVFP4_API nvfp4_status nvfp4_safetensors_writer_open(nvfp4_safetensors_writer *w,
                                                     const char *path, nvfp4_error *err);
NVFP4_API nvfp4_status nvfp4_safetensors_writer_write(nvfp4_safetensors_writer *w,
                                                      const void *data, size_t n,
                                                      nvfp4_error *err);
/* Name of the tensor the next written byte belongs to, NULL when complete. */
NVFP4_API const char *nvfp4_safetensors_writer_next(const nvfp4_safetensors_writer *w);
NVFP4_API nvfp4_status nvfp4_safetensors_writer_close(nvfp4_safetensors_writer *w,
                                                      nvfp4_error *err);

/* ---- config.json --------------------------------------------------------- */

typedef struct nvfp4_config nvfp4_config;

NVFP4_API nvfp4_config *nvfp4_config_load(const char *path, nvfp4_error *err);
NVFP4_API void nvfp4_config_free(nvfp4_config *cfg);
NVFP4_API const char *nvfp4_config_path(const nvfp4_config *cfg);

/* Keys are dotted paths into nested objects ("rope_scaling.factor").
 * A missing key (or JSON null) yields the default and NVFP4_OK; a present
 * key of the wrong type is NVFP4_ERR_TYPE naming the file and key. */
NVFP4_API int nvfp4_config_has(const nvfp4_config *cfg, const char *key);
NVFP4_API nvfp4_status nvfp4_config_get_int(const nvfp4_config *cfg, const char *key,
                                            int64_t def, int64_t *out,
                                            nvfp4_error *err);
NVFP4_API nvfp4_status nvfp4_config_get_double(const nvfp4_config *cfg,
                                               const char *key, double def,
                                               double *out, nvfp4_error *err);
NVFP4_API nvfp4_status nvfp4_config_get_bool(const nvfp4_config *cfg, const char *key,
                                             int def, int *out, nvfp4_error *err);
/* *out points into the config; valid until nvfp4_config_free. */
NVFP4_API nvfp4_status nvfp4_config_get_string(const nvfp4_config *cfg,
                                               const char *key, const char *def,
                                               const char **out, nvfp4_error *err);
/* Raw access (borrowed reference, NULL if absent); key "" is the root. */
NVFP4_API json_t *nvfp4_config_json(const nvfp4_config *cfg, const char *key);

/* ---- a checkpoint: directory, single file or index --------------------- */

typedef struct nvfp4_checkpoint nvfp4_checkpoint;

/* PATH may be a directory (model.safetensors.index.json, else the single
 * model.safetensors, else the one *.safetensors it holds; config.json is
 * loaded when present), a .safetensors file, or an index .json file.
 * Shards of an index are opened lazily on first use. */
NVFP4_API nvfp4_checkpoint *nvfp4_checkpoint_open(const char *path,
                                                  nvfp4_error *err);
NVFP4_API void nvfp4_checkpoint_free(nvfp4_checkpoint *ck);
/* Directory the checkpoint lives in. */
NVFP4_API const char *nvfp4_checkpoint_dir(const nvfp4_checkpoint *ck);
/* config.json of the directory, or NULL when there is none. */
NVFP4_API const nvfp4_config *nvfp4_checkpoint_config(const nvfp4_checkpoint *ck);
/* Tensor names, sorted. */
NVFP4_API size_t nvfp4_checkpoint_count(const nvfp4_checkpoint *ck);
NVFP4_API const char *nvfp4_checkpoint_name(const nvfp4_checkpoint *ck, size_t i);
NVFP4_API int nvfp4_checkpoint_has(const nvfp4_checkpoint *ck, const char *name);
/* Shard file name holding NAME (from the index), or NULL. */
NVFP4_API const char *nvfp4_checkpoint_shard_of(const nvfp4_checkpoint *ck,
                                                const char *name);
/* Looks NAME up, opening its shard if needed.  NVFP4_ERR_NOT_FOUND when
 * absent; shard errors (missing, malformed, lacks the tensor) name the shard. */
NVFP4_API nvfp4_status nvfp4_checkpoint_get(nvfp4_checkpoint *ck, const char *name,
                                            const nvfp4_tensor **out,
                                            nvfp4_error *err);
/* Tell the kernel that the mapped bytes [P, P+N) of one of the checkpoint's
 * shards will not be read again soon (madvise MADV_DONTNEED on the whole
 * pages inside the range): their memory is given back, and a later read
 * faults them in from the file again, unchanged.  For callers that copied
 * tensor data elsewhere (a backend that repacked weights).  Returns 0, or
 * -1 when the range is not inside an open shard (nothing is done). */
NVFP4_API int nvfp4_checkpoint_release_pages(nvfp4_checkpoint *ck, const void *p, size_t n);
/* Number of shard files and their metadata (opens every shard). */
NVFP4_API size_t nvfp4_checkpoint_shard_count(const nvfp4_checkpoint *ck);
NVFP4_API nvfp4_status nvfp4_checkpoint_shard(nvfp4_checkpoint *ck, size_t i,
                                              const nvfp4_safetensors **out,
                                              nvfp4_error *err);

#ifdef __cplusplus
}
#endif

#endif /* NVFP4_FORMAT_H */
