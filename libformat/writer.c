/* SPDX-License-Identifier: MIT */
/*
 * Safetensors writer: the layout the reader (safetensors.c) and the
 * reference implementation read, for files far larger than memory.
 *
 * Every tensor is declared first (name, dtype, shape), so that the header -
 * which holds every byte range - can be written before any data; the data
 * then streams in declaration order in pieces of any size.  Ranges are
 * packed back to back from offset 0; the header is padded with spaces to a
 * multiple of 8 bytes so that every tensor of an 8-byte-aligned mapping is
 * aligned as its dtype needs (the reference implementation does the same).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "internal.h"

struct nvfp4_safetensors_writer {
    json_t *header;         /* the header object, in declaration order */
    json_t *metadata;       /* "__metadata__", or NULL */
    uint64_t *sizes;        /* byte size of each declared tensor */
    char **names;
    size_t count, cap;
    uint64_t total;         /* sum of sizes */
    FILE *f;
    char *path;
    size_t current;         /* tensor being written */
    uint64_t written;       /* bytes of it written so far */
};

static nvfp4_status nomem(nvfp4_error *err, const char *path)
{
    return nvfp4_error_set(err, NVFP4_ERR_NOMEM, path, NULL, -1, "out of memory");
}

nvfp4_safetensors_writer *nvfp4_safetensors_writer_new(nvfp4_error *err)
{
    nvfp4_safetensors_writer *w = calloc(1, sizeof(*w));

    if (!w || !(w->header = json_object())) {
        free(w);
        nomem(err, NULL);
        return NULL;
    }
    return w;
}

void nvfp4_safetensors_writer_free(nvfp4_safetensors_writer *w)
{
    if (!w)
        return;
    if (w->f) {
        /* abandoned half-way: leave no file that looks complete */
        fclose(w->f);
        unlink(w->path);
    }
    for (size_t i = 0; i < w->count; i++)
        free(w->names[i]);
    free(w->names);
    free(w->sizes);
    free(w->path);
    json_decref(w->metadata);
    json_decref(w->header);
    free(w);
}

nvfp4_status nvfp4_safetensors_writer_metadata(nvfp4_safetensors_writer *w, const char *key,
                                               const char *value, nvfp4_error *err)
{
    if (!key || !value)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, key, -1,
                               "metadata key and value must be strings");
    if (w->f)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, w->path, key, -1,
                               "metadata added after the header was written");
    if (!w->metadata && !(w->metadata = json_object()))
        return nomem(err, NULL);
    if (json_object_set_new(w->metadata, key, json_string(value)))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, key, -1,
                               "metadata key or value is not valid UTF-8");
    return NVFP4_OK;
}

nvfp4_status nvfp4_safetensors_writer_declare(nvfp4_safetensors_writer *w, const char *name,
                                              nvfp4_dtype dtype, int ndim,
                                              const int64_t *shape, nvfp4_error *err)
{
    json_t *entry, *dims;
    uint64_t bytes;

    if (w->f)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, w->path, name, -1,
                               "tensor declared after the header was written");
    if (!name || !*name || !strcmp(name, "__metadata__"))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, name, -1,
                               "a tensor needs a name other than \"\" and __metadata__");
    if ((unsigned)dtype >= NVFP4_DTYPE_COUNT)
        return nvfp4_error_set(err, NVFP4_ERR_BAD_DTYPE, NULL, name, -1,
                               "unknown dtype %d", (int)dtype);
    if (ndim < 0 || ndim > NVFP4_MAX_DIMS)
        return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, NULL, name, -1,
                               "rank %d is outside 0..%d", ndim, NVFP4_MAX_DIMS);
    if (json_object_get(w->header, name))
        return nvfp4_error_set(err, NVFP4_ERR_DUPLICATE, NULL, name, -1,
                               "tensor declared twice");
    bytes = nvfp4_dtype_size(dtype);
    if (!(dims = json_array()))
        return nomem(err, NULL);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || mul_u64(bytes, (uint64_t)shape[i], &bytes)) {
            json_decref(dims);
            return nvfp4_error_set(err, shape[i] < 0 ? NVFP4_ERR_BAD_SHAPE
                                                     : NVFP4_ERR_OVERFLOW,
                                   NULL, name, -1, "dimension %d (%" PRId64 ") %s", i,
                                   shape[i], shape[i] < 0 ? "is negative" : "overflows");
        }
        json_array_append_new(dims, json_integer(shape[i]));
    }
    if (w->total + bytes < w->total || w->total + bytes > (uint64_t)INT64_MAX) {
        json_decref(dims);
        return nvfp4_error_set(err, NVFP4_ERR_OVERFLOW, NULL, name, -1,
                               "the file would exceed 2^63 bytes");
    }
    if (w->count == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        uint64_t *s = realloc(w->sizes, cap * sizeof(*s));
        char **n = s ? realloc(w->names, cap * sizeof(*n)) : NULL;
        if (s)
            w->sizes = s;
        if (!n) {
            json_decref(dims);
            return nomem(err, NULL);
        }
        w->names = n;
        w->cap = cap;
    }
    /* "o" hands dims over to the entry (released with it, or on failure) */
    entry = json_pack("{s:s, s:o, s:[I, I]}", "dtype", nvfp4_dtype_name(dtype), "shape", dims,
                      "data_offsets", (json_int_t)w->total, (json_int_t)(w->total + bytes));
    if (!entry)
        return nomem(err, NULL);
    if (!(w->names[w->count] = strdup(name))) {
        json_decref(entry);
        return nomem(err, NULL);
    }
    if (json_object_set_new(w->header, name, entry)) {
        free(w->names[w->count]);
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, name, -1,
                               "tensor name is not valid UTF-8");
    }
    w->sizes[w->count++] = bytes;
    w->total += bytes;
    return NVFP4_OK;
}

uint64_t nvfp4_safetensors_writer_data_size(const nvfp4_safetensors_writer *w)
{
    return w->total;
}

static nvfp4_status io_error(nvfp4_safetensors_writer *w, const char *what, nvfp4_error *err)
{
    return nvfp4_error_set(err, NVFP4_ERR_IO, w->path, NULL, -1, "%s: %s", what,
                           strerror(errno));
}

nvfp4_status nvfp4_safetensors_writer_open(nvfp4_safetensors_writer *w, const char *path,
                                           nvfp4_error *err)
{
    json_t *all;
    char *text;
    size_t len, padded;
    uint8_t le[8];
    nvfp4_status rc = NVFP4_OK;

    if (w->f || w->path)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, path, NULL, -1,
                               "the writer already wrote a header");
    /* __metadata__ first, then the tensors in declaration order */
    if (!(all = json_object()))
        return nomem(err, path);
    if (w->metadata)
        json_object_set(all, "__metadata__", w->metadata);
    json_object_update(all, w->header);
    text = json_dumps(all, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(all);
    if (!text)
        return nomem(err, path);
    len = strlen(text);
    padded = (len + 7) / 8 * 8;
    if (!(w->path = strdup(path))) {
        free(text);
        return nomem(err, path);
    }
    if (!(w->f = fopen(path, "wb"))) {
        rc = io_error(w, "cannot create", err);
        free(w->path);
        w->path = NULL;
        free(text);
        return rc;
    }
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    if (fwrite(le, 1, 8, w->f) != 8 || fwrite(text, 1, len, w->f) != len)
        rc = io_error(w, "write failed", err);
    for (size_t i = len; i < padded && !rc; i++)
        if (fputc(' ', w->f) == EOF)
            rc = io_error(w, "write failed", err);
    free(text);
    w->current = 0;
    w->written = 0;
    return rc;
}

nvfp4_status nvfp4_safetensors_writer_write(nvfp4_safetensors_writer *w, const void *data,
                                            size_t n, nvfp4_error *err)
{
    const uint8_t *p = data;

    if (!w->f)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, w->path, NULL, -1,
                               "data written before the header");
    while (n) {
        uint64_t room;
        size_t chunk;

        while (w->current < w->count && w->written == w->sizes[w->current]) {
            w->current++;
            w->written = 0;
        }
        if (w->current == w->count)
            return nvfp4_error_set(err, NVFP4_ERR_BAD_SIZE, w->path, NULL, -1,
                                   "%zu bytes more than the %" PRIu64 " declared", n,
                                   w->total);
        room = w->sizes[w->current] - w->written;
        chunk = room < n ? (size_t)room : n;
        if (fwrite(p, 1, chunk, w->f) != chunk)
            return io_error(w, "write failed", err);
        w->written += chunk;
        p += chunk;
        n -= chunk;
    }
    return NVFP4_OK;
}

const char *nvfp4_safetensors_writer_next(const nvfp4_safetensors_writer *w)
{
    size_t i = w->current;
    uint64_t done = w->written;

    while (i < w->count && done == w->sizes[i]) {
        i++;
        done = 0;
    }
    return i < w->count ? w->names[i] : NULL;
}

nvfp4_status nvfp4_safetensors_writer_close(nvfp4_safetensors_writer *w, nvfp4_error *err)
{
    const char *missing = nvfp4_safetensors_writer_next(w);
    nvfp4_status rc;

    if (!w->f)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, w->path, NULL, -1,
                               "close without a header written");
    if (missing) {
        rc = nvfp4_error_set(err, NVFP4_ERR_TRUNCATED, w->path, missing, -1,
                             "closed before all bytes of this tensor were written");
        fclose(w->f);
        w->f = NULL;
        unlink(w->path);
        return rc;
    }
    if (fflush(w->f) || fsync(fileno(w->f))) {
        rc = io_error(w, "write failed", err);
        fclose(w->f);
        w->f = NULL;
        unlink(w->path);
        return rc;
    }
    if (fclose(w->f)) {
        w->f = NULL;
        rc = io_error(w, "write failed", err);
        unlink(w->path);
        return rc;
    }
    w->f = NULL;
    return NVFP4_OK;
}
