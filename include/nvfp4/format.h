/* SPDX-License-Identifier: MIT */
/**
 * @file nvfp4/format.h
 * @brief The file layer: safetensors files, sharded checkpoints and
 * Hugging Face config.json (link with @c pkg-config @c nvfp4-format).
 *
 * This layer knows nothing about quantization.  Everything it opens is
 * memory-mapped read-only; opening a checkpoint reads and validates headers
 * only, never tensor data.
 *
 * @par Errors
 * Every fallible call returns NULL, -1 or a non-zero ::nvfp4_status and, when
 * the caller passes one, fills an ::nvfp4_error that names the file, the
 * tensor or JSON key and, where it makes sense, the byte offset of the
 * problem.  The @c err argument may always be NULL.
 * nvfp4_safetensors_open(), nvfp4_checkpoint_open() and nvfp4_config_load()
 * clear @c *err first (status ::NVFP4_OK, offset -1); other calls leave it
 * untouched on success.
 *
 * @par Objects, ownership, threads
 * Each object (::nvfp4_safetensors, ::nvfp4_checkpoint, ::nvfp4_config,
 * ::nvfp4_safetensors_writer) is opaque, has one owner and one @c _free,
 * and @c _free(NULL) does nothing.  Strings and ::nvfp4_tensor pointers it
 * returns are borrowed: they stay valid until the object is freed and must
 * not be freed by the caller.  The library keeps no global state, so
 * different objects may be used from different threads freely.  One
 * ::nvfp4_safetensors or ::nvfp4_config may be shared read-only between
 * threads: their functions taking a @c const pointer never modify them.
 * An ::nvfp4_checkpoint opens its shards lazily in nvfp4_checkpoint_get()
 * and nvfp4_checkpoint_shard(), which therefore need external locking when
 * called on one checkpoint from several threads (or every shard opened
 * first, after which they only read).  A writer is used by one thread at a
 * time.
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
/** Marks a declaration as part of the public API (exported from the shared
 *  library and listed in the library's version script). */
#define NVFP4_API
#endif

#if defined(__GNUC__)
#define NVFP4_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
/** printf-style format checking of argument @p a with arguments from @p b. */
#define NVFP4_PRINTF(a, b)
#endif

/** Version of the headers; compare nvfp4_format_version() (the library). */
#define NVFP4_VERSION_STRING "0.1.0"

/* ---- status and errors ------------------------------------------------ */

/** Result of every fallible call; nvfp4_strerror() names it. */
typedef enum {
    NVFP4_OK = 0,              /**< success */
    NVFP4_ERR_IO,              /**< open/stat/mmap/read/write failed */
    NVFP4_ERR_NOMEM,           /**< allocation failed */
    NVFP4_ERR_TRUNCATED,       /**< file shorter than its header says */
    NVFP4_ERR_HEADER_TOO_LARGE,/**< header length absurd or beyond the file */
    NVFP4_ERR_BAD_JSON,        /**< not valid JSON, or not the expected JSON type */
    NVFP4_ERR_BAD_ENTRY,       /**< a header entry is not an object / lacks keys */
    NVFP4_ERR_BAD_DTYPE,       /**< unknown or unexpected dtype */
    NVFP4_ERR_BAD_SHAPE,       /**< negative, non-integer or unexpected dims */
    NVFP4_ERR_OVERFLOW,        /**< a size computation overflows 64 bits */
    NVFP4_ERR_BAD_SIZE,        /**< byte range length != prod(shape)*itemsize */
    NVFP4_ERR_OUT_OF_RANGE,    /**< byte range outside the data region */
    NVFP4_ERR_OVERLAP,         /**< two tensors share bytes */
    NVFP4_ERR_DUPLICATE,       /**< the same name twice */
    NVFP4_ERR_NOT_FOUND,       /**< a tensor, key, shard or file is missing */
    NVFP4_ERR_TYPE,            /**< a JSON value has the wrong type */
    NVFP4_ERR_INVALID,         /**< an invalid value or argument */
    NVFP4_ERR_UNSUPPORTED,     /**< recognised but not supported */
    NVFP4_ERR_SCALE_MISMATCH,  /**< fused shards with differing global scales */
    NVFP4_ERR_BACKEND,         /**< a compute backend failed or is unavailable */
    NVFP4_ERR_DEVICE_OOM,      /**< a device ran out of memory */
    NVFP4_ERR_NONFINITE,       /**< a result (logit) is NaN or infinite */
    NVFP4_ERR_KV_FULL,         /**< a context's KV cache has too few free blocks */
    NVFP4_ERR_CANCELLED,       /**< the caller's progress callback asked to stop */
    NVFP4_STATUS_COUNT         /**< number of statuses (not a status) */
} nvfp4_status;

/** Size of nvfp4_error::text, including the terminating NUL. */
#define NVFP4_ERROR_TEXT_LENGTH 512
/** Size of nvfp4_error::file and nvfp4_error::key; longer values are cut. */
#define NVFP4_ERROR_FIELD_LENGTH 256

/** Caller-owned description of the last error of a call (cf. jansson's
 *  json_error_t).  Every string member is NUL-terminated, truncated to fit. */
typedef struct {
    nvfp4_status status;                 /**< what went wrong */
    char text[NVFP4_ERROR_TEXT_LENGTH];  /**< full message: "FILE: KEY: text" */
    char file[NVFP4_ERROR_FIELD_LENGTH]; /**< path of the file, "" if none */
    char key[NVFP4_ERROR_FIELD_LENGTH];  /**< tensor name or JSON key, "" if none */
    int64_t offset;                      /**< byte offset in the file, -1 if none */
} nvfp4_error;

/**
 * A short English description of a status.
 * @param status any value, also out of range
 * @return a static string (never NULL; "unknown status" when out of range);
 *         thread-safe
 */
NVFP4_API const char *nvfp4_strerror(nvfp4_status status);

/**
 * Fill an error and return its status; used by every layer.
 * The message becomes "FILE: KEY: text" with the parts that are set.
 * @param err the error to fill, or NULL (then only @p status is returned)
 * @param status the status to store and return
 * @param file path of the file concerned, or NULL / "" for none (copied)
 * @param key tensor name or JSON key, or NULL / "" for none (copied)
 * @param offset byte offset in the file, or -1
 * @param fmt printf-style format of the message, followed by its arguments
 * @return @p status
 */
NVFP4_API nvfp4_status nvfp4_error_set(nvfp4_error *err, nvfp4_status status,
                                       const char *file, const char *key,
                                       int64_t offset, const char *fmt, ...)
    NVFP4_PRINTF(6, 7);
/**
 * Reset an error to ::NVFP4_OK, empty strings and offset -1.
 * @param err the error, or NULL (nothing is done)
 */
NVFP4_API void nvfp4_error_clear(nvfp4_error *err);

/**
 * The version of the libnvfp4-format library in use.
 * @return a static string such as "0.1.0"
 */
NVFP4_API const char *nvfp4_format_version(void);

/* ---- dtypes ------------------------------------------------------------ */

/** The element types of the safetensors format. */
typedef enum {
    NVFP4_DTYPE_BOOL = 0,   /**< BOOL, one byte */
    NVFP4_DTYPE_U8,         /**< U8 (also packed FP4: two E2M1 codes a byte) */
    NVFP4_DTYPE_I8,         /**< I8 */
    NVFP4_DTYPE_F8_E4M3,    /**< F8_E4M3 (OCP FP8, the NVFP4 block scales) */
    NVFP4_DTYPE_F8_E5M2,    /**< F8_E5M2 */
    NVFP4_DTYPE_I16,        /**< I16 */
    NVFP4_DTYPE_U16,        /**< U16 */
    NVFP4_DTYPE_F16,        /**< F16 (IEEE half) */
    NVFP4_DTYPE_BF16,       /**< BF16 */
    NVFP4_DTYPE_I32,        /**< I32 */
    NVFP4_DTYPE_U32,        /**< U32 */
    NVFP4_DTYPE_F32,        /**< F32 */
    NVFP4_DTYPE_I64,        /**< I64 */
    NVFP4_DTYPE_U64,        /**< U64 */
    NVFP4_DTYPE_F64,        /**< F64 */
    NVFP4_DTYPE_COUNT       /**< number of dtypes (not a dtype) */
} nvfp4_dtype;

/**
 * The name of a dtype as safetensors spells it ("F8_E4M3", "BF16", ...).
 * @param dtype any value
 * @return a static string; "?" when @p dtype is out of range
 */
NVFP4_API const char *nvfp4_dtype_name(nvfp4_dtype dtype);
/**
 * Bytes per element.
 * @param dtype any value
 * @return 1, 2, 4 or 8; 0 when @p dtype is out of range
 */
NVFP4_API size_t nvfp4_dtype_size(nvfp4_dtype dtype);
/**
 * Look a dtype up by its safetensors name (exact, case-sensitive).
 * @param name the name, or NULL
 * @param out where to store the dtype (may be NULL)
 * @return 0 and @p *out set when @p name is a safetensors dtype, -1 otherwise
 */
NVFP4_API int nvfp4_dtype_from_name(const char *name, nvfp4_dtype *out);

/* ---- one tensor -------------------------------------------------------- */

/** Largest rank of a tensor. */
#define NVFP4_MAX_DIMS 8

/** One tensor of an open safetensors file, as its header describes it.
 *  Owned by that file: valid, with every pointer in it, until the
 *  ::nvfp4_safetensors (or the ::nvfp4_checkpoint holding it) is freed. */
typedef struct {
    const char *name;        /**< tensor name */
    const char *file;        /**< path of the file holding it */
    nvfp4_dtype dtype;       /**< element type */
    int ndim;                /**< rank, 0 for a scalar */
    int64_t shape[NVFP4_MAX_DIMS]; /**< the first @c ndim dimensions */
    uint64_t numel;          /**< product of shape (1 for a scalar) */
    uint64_t nbytes;         /**< numel * dtype size */
    uint64_t offset;         /**< absolute byte offset of the data in the file */
    const void *data;        /**< the data in the read-only mapping; not
                                  necessarily aligned to the dtype's size */
} nvfp4_tensor;

/**
 * Write a tensor's shape as "[4096, 14336]" ("[]" for rank 0).
 * @param t the tensor (NULL writes "[]")
 * @param buf the buffer, NUL-terminated and truncated to fit
 * @param n size of @p buf in bytes; 0 writes nothing
 * @return @p buf
 */
NVFP4_API const char *nvfp4_tensor_shape_text(const nvfp4_tensor *t, char *buf, size_t n);

/* ---- a single safetensors file ----------------------------------------- */

/** An open safetensors file (opaque): the mapping and its parsed header. */
typedef struct nvfp4_safetensors nvfp4_safetensors;

/**
 * Map a safetensors file and validate its header completely: names,
 * dtypes, shapes, sizes, byte ranges, overlaps, 64-bit overflow, header
 * length (at most 100 MB).  Tensor data is mapped, not read.
 * @param path the file
 * @param err filled on failure (cleared first), or NULL
 * @return the file, to be freed with nvfp4_safetensors_free(); NULL on
 *         failure (::NVFP4_ERR_NOT_FOUND, ::NVFP4_ERR_IO, ::NVFP4_ERR_TRUNCATED,
 *         ::NVFP4_ERR_BAD_JSON, ... in @p err, naming the file, the tensor and
 *         the offset)
 */
NVFP4_API nvfp4_safetensors *nvfp4_safetensors_open(const char *path,
                                                    nvfp4_error *err);
/**
 * Unmap and free a file; every pointer obtained from it becomes invalid.
 * @param st the file, or NULL (nothing is done)
 */
NVFP4_API void nvfp4_safetensors_free(nvfp4_safetensors *st);
/**
 * The path the file was opened with.
 * @param st the file
 * @return a string owned by @p st; NULL when @p st is NULL
 */
NVFP4_API const char *nvfp4_safetensors_path(const nvfp4_safetensors *st);
/**
 * Number of tensors.
 * @param st the file
 * @return the count; 0 when @p st is NULL
 */
NVFP4_API size_t nvfp4_safetensors_count(const nvfp4_safetensors *st);
/**
 * The @p i th tensor, in the order of their data offsets.
 * @param st the file
 * @param i index, 0 to nvfp4_safetensors_count() - 1
 * @return a tensor owned by @p st; NULL when @p i is out of range
 */
NVFP4_API const nvfp4_tensor *nvfp4_safetensors_tensor(const nvfp4_safetensors *st,
                                                       size_t i);
/**
 * Find a tensor by name (binary search).
 * @param st the file
 * @param name the tensor name
 * @return a tensor owned by @p st; NULL when absent or an argument is NULL
 */
NVFP4_API const nvfp4_tensor *nvfp4_safetensors_find(const nvfp4_safetensors *st,
                                                     const char *name);
/**
 * Number of "__metadata__" entries (string to string).
 * @param st the file
 * @return the count; 0 when @p st is NULL or the header has none
 */
NVFP4_API size_t nvfp4_safetensors_metadata_count(const nvfp4_safetensors *st);
/**
 * The @p i th "__metadata__" entry, in the header's order.
 * @param st the file
 * @param i index, 0 to nvfp4_safetensors_metadata_count() - 1
 * @param key where to store the key (owned by @p st), or NULL
 * @param value where to store the value (owned by @p st), or NULL
 * @return 0; -1 when @p i is out of range (nothing stored)
 */
NVFP4_API int nvfp4_safetensors_metadata(const nvfp4_safetensors *st, size_t i,
                                         const char **key, const char **value);
/**
 * Look a "__metadata__" value up by key.
 * @param st the file
 * @param key the key
 * @return the value, owned by @p st; NULL when absent
 */
NVFP4_API const char *nvfp4_safetensors_metadata_get(const nvfp4_safetensors *st,
                                                     const char *key);

/* ---- writing a safetensors file ------------------------------------------ */

/**
 * A safetensors file being written (opaque), for files larger than memory.
 *
 * Declare every tensor (the header holds all byte ranges), then open the
 * file, which writes the header, stream the data of the tensors in
 * declaration order in pieces of any size, and close.  Tensors are packed
 * back to back and the header is padded with spaces to a multiple of 8
 * bytes.  Closing checks that every declared byte was written; a writer
 * freed, or closed, before that removes its file, so that no file that
 * looks complete is left behind.  Errors name the file and the tensor.
 */
typedef struct nvfp4_safetensors_writer nvfp4_safetensors_writer;

/**
 * A new writer with no tensors.
 * @param err filled on failure, or NULL
 * @return the writer, to be freed with nvfp4_safetensors_writer_free();
 *         NULL when out of memory (::NVFP4_ERR_NOMEM)
 */
NVFP4_API nvfp4_safetensors_writer *nvfp4_safetensors_writer_new(nvfp4_error *err);
/**
 * Free a writer.  A file opened and not successfully closed is removed.
 * @param w the writer, or NULL (nothing is done)
 */
NVFP4_API void nvfp4_safetensors_writer_free(nvfp4_safetensors_writer *w);
/**
 * Add a string entry of "__metadata__" (e.g. "format" = "pt"); a key given
 * again replaces its value.  Only before nvfp4_safetensors_writer_open().
 * @param w the writer
 * @param key the key (UTF-8, copied)
 * @param value the value (UTF-8, copied)
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_INVALID for a NULL or non-UTF-8 string or
 *         after the header was written; ::NVFP4_ERR_NOMEM
 */
NVFP4_API nvfp4_status nvfp4_safetensors_writer_metadata(nvfp4_safetensors_writer *w,
                                                         const char *key, const char *value,
                                                         nvfp4_error *err);
/**
 * Declare the next tensor; its bytes follow those of the tensor declared
 * before.  Only before nvfp4_safetensors_writer_open().
 * @param w the writer
 * @param name the tensor name (UTF-8, not "" or "__metadata__"; copied)
 * @param dtype its element type
 * @param ndim its rank, 0 to ::NVFP4_MAX_DIMS
 * @param shape its @p ndim dimensions (copied; may be NULL when @p ndim is 0)
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_DUPLICATE for a name declared before,
 *         ::NVFP4_ERR_BAD_DTYPE, ::NVFP4_ERR_BAD_SHAPE (bad rank or a negative
 *         dimension), ::NVFP4_ERR_OVERFLOW (the file would exceed 2^63 bytes),
 *         ::NVFP4_ERR_INVALID (bad name, or after the header was written),
 *         ::NVFP4_ERR_NOMEM; the writer is unchanged on failure
 */
NVFP4_API nvfp4_status nvfp4_safetensors_writer_declare(nvfp4_safetensors_writer *w,
                                                        const char *name, nvfp4_dtype dtype,
                                                        int ndim, const int64_t *shape,
                                                        nvfp4_error *err);
/**
 * Bytes of tensor data declared so far (the file is that plus the header).
 * @param w the writer
 * @return the sum of the declared tensors' sizes
 */
NVFP4_API uint64_t nvfp4_safetensors_writer_data_size(const nvfp4_safetensors_writer *w);
/**
 * Create (or truncate) the file and write the header.  Once per writer.
 * @param w the writer, with every tensor declared
 * @param path the file to write
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_IO (the file cannot be created or
 *         written), ::NVFP4_ERR_INVALID (called a second time),
 *         ::NVFP4_ERR_NOMEM
 */
NVFP4_API nvfp4_status nvfp4_safetensors_writer_open(nvfp4_safetensors_writer *w,
                                                     const char *path, nvfp4_error *err);
/**
 * Append data: the next @p n bytes of the tensors, in declaration order;
 * a piece may end inside a tensor or span several.
 * @param w the writer, opened
 * @param data @p n bytes
 * @param n number of bytes
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_BAD_SIZE when this is more than was
 *         declared, ::NVFP4_ERR_INVALID before nvfp4_safetensors_writer_open(),
 *         ::NVFP4_ERR_IO
 */
NVFP4_API nvfp4_status nvfp4_safetensors_writer_write(nvfp4_safetensors_writer *w,
                                                      const void *data, size_t n,
                                                      nvfp4_error *err);
/**
 * The tensor the next written byte belongs to.
 * @param w the writer
 * @return its name, owned by @p w; NULL when every declared byte is written
 */
NVFP4_API const char *nvfp4_safetensors_writer_next(const nvfp4_safetensors_writer *w);
/**
 * Finish the file: check that every declared byte was written, flush and
 * fsync it.  On failure the file is removed.  Free the writer afterwards.
 * @param w the writer, opened
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_TRUNCATED naming the first tensor not
 *         fully written, ::NVFP4_ERR_IO, ::NVFP4_ERR_INVALID when the writer
 *         was not opened (or is already closed)
 */
NVFP4_API nvfp4_status nvfp4_safetensors_writer_close(nvfp4_safetensors_writer *w,
                                                      nvfp4_error *err);

/* ---- config.json --------------------------------------------------------- */

/**
 * A parsed config.json (opaque): a JSON object of at most 64 MiB, duplicate
 * keys refused.
 *
 * Keys are dotted paths into nested objects ("rope_scaling.factor"; each
 * part under 256 bytes).  In the typed getters a missing key (or JSON null)
 * yields the default and ::NVFP4_OK; a present key of the wrong type is
 * ::NVFP4_ERR_TYPE naming the file and the key, @c *out unchanged.
 */
typedef struct nvfp4_config nvfp4_config;

/**
 * Read and parse a config.json.
 * @param path the file
 * @param err filled on failure (cleared first), or NULL
 * @return the config, to be freed with nvfp4_config_free(); NULL on
 *         failure: ::NVFP4_ERR_NOT_FOUND, ::NVFP4_ERR_IO, ::NVFP4_ERR_INVALID
 *         (larger than 64 MiB), ::NVFP4_ERR_BAD_JSON (not JSON, with line and
 *         column, or not an object), ::NVFP4_ERR_NOMEM
 */
NVFP4_API nvfp4_config *nvfp4_config_load(const char *path, nvfp4_error *err);
/**
 * Free a config; strings and JSON values obtained from it become invalid.
 * @param cfg the config, or NULL (nothing is done)
 */
NVFP4_API void nvfp4_config_free(nvfp4_config *cfg);
/**
 * The path the config was loaded from.
 * @param cfg the config
 * @return a string owned by @p cfg; NULL when @p cfg is NULL
 */
NVFP4_API const char *nvfp4_config_path(const nvfp4_config *cfg);

/**
 * Whether a key is present with a value other than null.
 * @param cfg the config (NULL: no key is present)
 * @param key dotted path
 * @return 1 or 0
 */
NVFP4_API int nvfp4_config_has(const nvfp4_config *cfg, const char *key);
/**
 * An integer value; an integral JSON real (4096.0) is accepted.
 * @param cfg the config (NULL: every key is missing)
 * @param key dotted path
 * @param def the value of a missing key
 * @param out where to store the value
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK or ::NVFP4_ERR_TYPE
 */
NVFP4_API nvfp4_status nvfp4_config_get_int(const nvfp4_config *cfg, const char *key,
                                            int64_t def, int64_t *out,
                                            nvfp4_error *err);
/**
 * A number (integer or real).
 * @param cfg the config (NULL: every key is missing)
 * @param key dotted path
 * @param def the value of a missing key
 * @param out where to store the value
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK or ::NVFP4_ERR_TYPE
 */
NVFP4_API nvfp4_status nvfp4_config_get_double(const nvfp4_config *cfg,
                                               const char *key, double def,
                                               double *out, nvfp4_error *err);
/**
 * A boolean (JSON true or false only).
 * @param cfg the config (NULL: every key is missing)
 * @param key dotted path
 * @param def the value of a missing key
 * @param out where to store 1 or 0
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK or ::NVFP4_ERR_TYPE
 */
NVFP4_API nvfp4_status nvfp4_config_get_bool(const nvfp4_config *cfg, const char *key,
                                             int def, int *out, nvfp4_error *err);
/**
 * A string.
 * @param cfg the config (NULL: every key is missing)
 * @param key dotted path
 * @param def the value of a missing key (stored as given)
 * @param out where to store the string, owned by @p cfg and valid until
 *        nvfp4_config_free()
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK or ::NVFP4_ERR_TYPE
 */
NVFP4_API nvfp4_status nvfp4_config_get_string(const nvfp4_config *cfg,
                                               const char *key, const char *def,
                                               const char **out, nvfp4_error *err);
/**
 * Raw access to a JSON value.
 * @param cfg the config
 * @param key dotted path; "" is the root object
 * @return a borrowed reference owned by @p cfg (do not json_decref() it,
 *         do not modify it; valid until nvfp4_config_free()); NULL when
 *         absent or an argument is NULL
 */
NVFP4_API json_t *nvfp4_config_json(const nvfp4_config *cfg, const char *key);

/* ---- a checkpoint: directory, single file or index --------------------- */

/** A checkpoint (opaque): one safetensors file or the shards of an index,
 *  and the directory's config.json. */
typedef struct nvfp4_checkpoint nvfp4_checkpoint;

/**
 * Open a checkpoint.  A directory is read through its
 * model.safetensors.index.json, else its model.safetensors, else the one
 * *.safetensors file it holds; a .json path is an index; any other path a
 * single safetensors file.  config.json of the directory is loaded when
 * present.  An index's shards must exist and be plain file names inside
 * the directory; they are mapped lazily, on first use, and their headers
 * validated then.
 * @param path directory, .safetensors file or index .json
 * @param err filled on failure (cleared first), or NULL
 * @return the checkpoint, to be freed with nvfp4_checkpoint_free(); NULL on
 *         failure (the file, shard or key is named in @p err)
 */
NVFP4_API nvfp4_checkpoint *nvfp4_checkpoint_open(const char *path,
                                                  nvfp4_error *err);
/**
 * Free a checkpoint: unmap every shard and free its config.  Every tensor,
 * tensor data pointer, string, ::nvfp4_safetensors and ::nvfp4_config
 * obtained from it becomes invalid.
 * @param ck the checkpoint, or NULL (nothing is done)
 */
NVFP4_API void nvfp4_checkpoint_free(nvfp4_checkpoint *ck);
/**
 * The directory the checkpoint lives in.
 * @param ck the checkpoint
 * @return a string owned by @p ck; NULL when @p ck is NULL
 */
NVFP4_API const char *nvfp4_checkpoint_dir(const nvfp4_checkpoint *ck);
/**
 * The config.json of the checkpoint's directory.
 * @param ck the checkpoint
 * @return the config, owned by @p ck (do not free it); NULL when there is none
 */
NVFP4_API const nvfp4_config *nvfp4_checkpoint_config(const nvfp4_checkpoint *ck);
/**
 * Number of tensors (of every shard, from the index).
 * @param ck the checkpoint
 * @return the count; 0 when @p ck is NULL
 */
NVFP4_API size_t nvfp4_checkpoint_count(const nvfp4_checkpoint *ck);
/**
 * The @p i th tensor name, in sorted (strcmp) order.
 * @param ck the checkpoint
 * @param i index, 0 to nvfp4_checkpoint_count() - 1
 * @return a string owned by @p ck; NULL when @p i is out of range
 */
NVFP4_API const char *nvfp4_checkpoint_name(const nvfp4_checkpoint *ck, size_t i);
/**
 * Whether the checkpoint lists a tensor (opens no shard).
 * @param ck the checkpoint
 * @param name the tensor name
 * @return 1 or 0
 */
NVFP4_API int nvfp4_checkpoint_has(const nvfp4_checkpoint *ck, const char *name);
/**
 * The shard file holding a tensor (opens no shard).
 * @param ck the checkpoint
 * @param name the tensor name
 * @return the shard's file name as the index spells it (for a single file,
 *         its name), owned by @p ck; NULL when the tensor is absent
 */
NVFP4_API const char *nvfp4_checkpoint_shard_of(const nvfp4_checkpoint *ck,
                                                const char *name);
/**
 * Look a tensor up, opening (mapping and validating) its shard if needed.
 * Not thread-safe on one checkpoint while shards are still unopened.
 * @param ck the checkpoint
 * @param name the tensor name
 * @param out where to store the tensor (must not be NULL; set to NULL on
 *        failure); owned by @p ck, it and its data stay valid until
 *        nvfp4_checkpoint_free()
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_NOT_FOUND when the tensor is absent, or
 *         the shard's error (missing, malformed, lacks the tensor) naming
 *         the shard
 */
NVFP4_API nvfp4_status nvfp4_checkpoint_get(nvfp4_checkpoint *ck, const char *name,
                                            const nvfp4_tensor **out,
                                            nvfp4_error *err);
/**
 * Tell the kernel that the mapped bytes [@p p, @p p + @p n) of one of the
 * checkpoint's shards will not be read again soon (madvise MADV_DONTNEED
 * on the whole pages inside the range): their memory is given back, and a
 * later read faults them in from the file again, unchanged.  For callers
 * that copied tensor data elsewhere (a backend that repacked weights).
 * @param ck the checkpoint
 * @param p start of the range, inside a tensor's data
 * @param n length in bytes
 * @return 0; -1 when the range is not inside an open shard (nothing is done)
 */
NVFP4_API int nvfp4_checkpoint_release_pages(nvfp4_checkpoint *ck, const void *p, size_t n);
/**
 * Number of shard files (opens none).
 * @param ck the checkpoint
 * @return the count (1 for a single file); 0 when @p ck is NULL
 */
NVFP4_API size_t nvfp4_checkpoint_shard_count(const nvfp4_checkpoint *ck);
/**
 * One shard file, opened if needed (for its metadata, say).  Not
 * thread-safe on one checkpoint while shards are still unopened.
 * @param ck the checkpoint
 * @param i index, 0 to nvfp4_checkpoint_shard_count() - 1
 * @param out where to store the file (must not be NULL; set to NULL on
 *        failure); owned by @p ck (do not free it), valid until
 *        nvfp4_checkpoint_free()
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_INVALID when @p i is out of range; the
 *         shard's open error
 */
NVFP4_API nvfp4_status nvfp4_checkpoint_shard(nvfp4_checkpoint *ck, size_t i,
                                              const nvfp4_safetensors **out,
                                              nvfp4_error *err);

#ifdef __cplusplus
}
#endif

#endif /* NVFP4_FORMAT_H */
