/* SPDX-License-Identifier: MIT */
/*
 * Safetensors reader.  Layout: 8-byte little-endian header length N, N bytes
 * of JSON, then the data region.  Each JSON entry maps a tensor name to
 * {"dtype", "shape", "data_offsets": [begin, end]} with offsets relative to
 * the data region; "__metadata__" maps strings to strings.
 *
 * The header is validated completely at open; the data is only mapped.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nvfp4/format.h>
#include "internal.h"

/* The reference implementation refuses headers over 100 MB; so do we. */
#define MAX_HEADER_BYTES (100u * 1024u * 1024u)

struct nvfp4_safetensors {
    char *path;
    const uint8_t *map;
    size_t map_size;
    uint64_t data_start;      /* 8 + header length */
    nvfp4_tensor *tensors;    /* sorted by offset */
    size_t count;
    size_t *by_name;          /* indices sorted by name */
    char **meta_keys;
    char **meta_values;
    size_t meta_count;
};

const char *nvfp4_safetensors_path(const nvfp4_safetensors *st)
{
    return st ? st->path : NULL;
}

size_t nvfp4_safetensors_count(const nvfp4_safetensors *st)
{
    return st ? st->count : 0;
}

const nvfp4_tensor *nvfp4_safetensors_tensor(const nvfp4_safetensors *st, size_t i)
{
    if (!st || i >= st->count)
        return NULL;
    return &st->tensors[i];
}

const nvfp4_tensor *nvfp4_safetensors_find(const nvfp4_safetensors *st,
                                           const char *name)
{
    size_t lo = 0, hi;

    if (!st || !name)
        return NULL;
    hi = st->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const nvfp4_tensor *t = &st->tensors[st->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0)
            return t;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

size_t nvfp4_safetensors_metadata_count(const nvfp4_safetensors *st)
{
    return st ? st->meta_count : 0;
}

int nvfp4_safetensors_metadata(const nvfp4_safetensors *st, size_t i,
                               const char **key, const char **value)
{
    if (!st || i >= st->meta_count)
        return -1;
    if (key)
        *key = st->meta_keys[i];
    if (value)
        *value = st->meta_values[i];
    return 0;
}

const char *nvfp4_safetensors_metadata_get(const nvfp4_safetensors *st,
                                           const char *key)
{
    if (!st || !key)
        return NULL;
    for (size_t i = 0; i < st->meta_count; i++)
        if (strcmp(st->meta_keys[i], key) == 0)
            return st->meta_values[i];
    return NULL;
}

int nvfp4f_safetensors_release(const nvfp4_safetensors *st, const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p, lo, hi, base = (uintptr_t)st->map;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);

    if (!st->map || a < base || n > st->map_size || a - base > st->map_size - n)
        return -1;
    /* whole pages inside the range only: neighbours may still be in use */
    lo = (a + page - 1) & ~(page - 1);
    hi = (a + n) & ~(page - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
    return 0;
}

void nvfp4_safetensors_free(nvfp4_safetensors *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->count; i++)
        free((char *)st->tensors[i].name);
    for (size_t i = 0; i < st->meta_count; i++) {
        free(st->meta_keys[i]);
        free(st->meta_values[i]);
    }
    free(st->meta_keys);
    free(st->meta_values);
    free(st->tensors);
    free(st->by_name);
    if (st->map && st->map_size)
        munmap((void *)st->map, st->map_size);
    free(st->path);
    free(st);
}

static int cmp_offset(const void *a, const void *b)
{
    const nvfp4_tensor *x = a, *y = b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes)
        return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_name(const void *a, const void *b, void *base)
{
    const nvfp4_tensor *t = base;
    return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

static int json_u64(json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* Parse one tensor entry into *t (name already set). */
static nvfp4_status parse_entry(nvfp4_safetensors *st, const char *name,
                                json_t *entry, nvfp4_tensor *t, nvfp4_error *err)
{
    const char *p = st->path;
    json_t *jd, *js, *jo;
    uint64_t numel = 1, nbytes, begin, end, data_size;

    if (!json_is_object(entry))
        return nvfp4_error_set(err, NVFP4_ERR_BAD_ENTRY, p, name, 8,
                               "header entry is not a JSON object");
    jd = json_object_get(entry, "dtype");
    js = json_object_get(entry, "shape");
    jo = json_object_get(entry, "data_offsets");
    if (!jd || !js || !jo)
        return nvfp4_error_set(err, NVFP4_ERR_BAD_ENTRY, p, name, 8,
                               "header entry lacks \"%s\"",
                               !jd ? "dtype" : !js ? "shape" : "data_offsets");
    if (!json_is_string(jd) || nvfp4_dtype_from_name(json_string_value(jd), &t->dtype))
        return nvfp4_error_set(err, NVFP4_ERR_BAD_DTYPE, p, name, 8,
                               "unknown dtype %s%s%s (expected one of BOOL, U8, I8, "
                               "F8_E4M3, F8_E5M2, I16, U16, F16, BF16, I32, U32, F32, "
                               "I64, U64, F64)",
                               json_is_string(jd) ? "\"" : "",
                               json_is_string(jd) ? json_string_value(jd) : "(not a string)",
                               json_is_string(jd) ? "\"" : "");
    if (!json_is_array(js))
        return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, p, name, 8,
                               "\"shape\" is not an array");
    if (json_array_size(js) > NVFP4_MAX_DIMS)
        return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, p, name, 8,
                               "rank %zu exceeds the supported maximum of %d",
                               json_array_size(js), NVFP4_MAX_DIMS);
    t->ndim = (int)json_array_size(js);
    for (int d = 0; d < t->ndim; d++) {
        uint64_t dim;
        if (json_u64(json_array_get(js, (size_t)d), &dim))
            return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, p, name, 8,
                                   "dimension %d is not a non-negative integer", d);
        t->shape[d] = (int64_t)dim;
        if (mul_u64(numel, dim, &numel))
            return nvfp4_error_set(err, NVFP4_ERR_OVERFLOW, p, name, 8,
                                   "element count of the shape overflows 64 bits");
    }
    if (mul_u64(numel, nvfp4_dtype_size(t->dtype), &nbytes))
        return nvfp4_error_set(err, NVFP4_ERR_OVERFLOW, p, name, 8,
                               "byte size of the shape overflows 64 bits");
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return nvfp4_error_set(err, NVFP4_ERR_BAD_ENTRY, p, name, 8,
                               "\"data_offsets\" is not an array of two integers");
    if (json_u64(json_array_get(jo, 0), &begin) || json_u64(json_array_get(jo, 1), &end))
        return nvfp4_error_set(err, NVFP4_ERR_OUT_OF_RANGE, p, name, 8,
                               "\"data_offsets\" must be non-negative integers");
    if (end < begin)
        return nvfp4_error_set(err, NVFP4_ERR_BAD_SIZE, p, name, 8,
                               "data_offsets [%llu, %llu] end before they begin",
                               (unsigned long long)begin, (unsigned long long)end);
    if (end - begin != nbytes)
        return nvfp4_error_set(err, NVFP4_ERR_BAD_SIZE, p, name, 8,
                               "data_offsets [%llu, %llu] span %llu bytes, but %s "
                               "with %llu elements needs %llu",
                               (unsigned long long)begin, (unsigned long long)end,
                               (unsigned long long)(end - begin),
                               nvfp4_dtype_name(t->dtype), (unsigned long long)numel,
                               (unsigned long long)nbytes);
    data_size = st->map_size - st->data_start;
    if (end > data_size)
        return nvfp4_error_set(err, NVFP4_ERR_OUT_OF_RANGE, p, name,
                               (int64_t)st->data_start,
                               "data_offsets [%llu, %llu] lie outside the data region "
                               "of %llu bytes",
                               (unsigned long long)begin, (unsigned long long)end,
                               (unsigned long long)data_size);
    t->numel = numel;
    t->nbytes = nbytes;
    t->offset = st->data_start + begin;
    t->data = st->map + t->offset;
    t->file = st->path;
    return NVFP4_OK;
}

static nvfp4_status parse_metadata(nvfp4_safetensors *st, json_t *meta,
                                   nvfp4_error *err)
{
    const char *k;
    json_t *v;
    size_t n;

    if (!json_is_object(meta))
        return nvfp4_error_set(err, NVFP4_ERR_BAD_ENTRY, st->path, "__metadata__", 8,
                               "__metadata__ is not a JSON object");
    n = json_object_size(meta);
    st->meta_keys = calloc(n ? n : 1, sizeof(char *));
    st->meta_values = calloc(n ? n : 1, sizeof(char *));
    if (!st->meta_keys || !st->meta_values)
        return nvfp4_error_set(err, NVFP4_ERR_NOMEM, st->path, NULL, -1, "out of memory");
    json_object_foreach(meta, k, v) {
        if (!json_is_string(v))
            return nvfp4_error_set(err, NVFP4_ERR_BAD_ENTRY, st->path, "__metadata__",
                                   8, "metadata value of \"%s\" is not a string", k);
        st->meta_keys[st->meta_count] = strdup(k);
        st->meta_values[st->meta_count] = strdup(json_string_value(v));
        st->meta_count++;
        if (!st->meta_keys[st->meta_count - 1] || !st->meta_values[st->meta_count - 1])
            return nvfp4_error_set(err, NVFP4_ERR_NOMEM, st->path, NULL, -1,
                                   "out of memory");
    }
    return NVFP4_OK;
}

static nvfp4_status parse_header(nvfp4_safetensors *st, nvfp4_error *err)
{
    const char *p = st->path;
    uint64_t hlen = 0;
    json_error_t jerr;
    json_t *root, *v;
    const char *k;
    nvfp4_status rc = NVFP4_OK;
    size_t n;

    /* GGUF (llama.cpp) starts with its magic where safetensors has the
     * header length: say what the file is rather than that the "length" is
     * absurd. */
    if (memcmp(st->map, "GGUF", 4) == 0)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, p, NULL, 0,
                               "is a GGUF file, not safetensors (nvfp4 reads the "
                               "safetensors export of a Quark model)");
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | st->map[i];
    if (hlen > MAX_HEADER_BYTES || hlen > st->map_size - 8) {
        /* Without the '{' that opens every safetensors header the file is
         * something else altogether; with it, only the length is wrong. */
        if (st->map_size < 9 || st->map[8] != '{')
            return nvfp4_error_set(err, NVFP4_ERR_HEADER_TOO_LARGE, p, NULL, 0,
                                   "is not a safetensors file (it does not start with an "
                                   "8-byte header length and a JSON header)");
        if (hlen > MAX_HEADER_BYTES)
            return nvfp4_error_set(err, NVFP4_ERR_HEADER_TOO_LARGE, p, NULL, 0,
                                   "header length %llu exceeds the limit of %u bytes",
                                   (unsigned long long)hlen, MAX_HEADER_BYTES);
        return nvfp4_error_set(err, NVFP4_ERR_HEADER_TOO_LARGE, p, NULL, 0,
                               "header length %llu runs past the end of the %zu-byte file",
                               (unsigned long long)hlen, st->map_size);
    }
    st->data_start = 8 + hlen;

    root = json_loadb((const char *)st->map + 8, hlen,
                      JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (json_error_code(&jerr) == json_error_duplicate_key)
            return nvfp4_error_set(err, NVFP4_ERR_DUPLICATE, p, NULL,
                                   8 + jerr.position, "header: %s", jerr.text);
        /* Integers beyond int64 (offsets past 2^63) cannot be a valid size. */
        if (json_error_code(&jerr) == json_error_numeric_overflow)
            return nvfp4_error_set(err, NVFP4_ERR_OVERFLOW, p, NULL,
                                   8 + jerr.position,
                                   "header holds an integer that does not fit in "
                                   "64 bits (line %d, column %d)", jerr.line,
                                   jerr.column);
        return nvfp4_error_set(err, NVFP4_ERR_BAD_JSON, p, NULL, 8 + jerr.position,
                               "header is not valid JSON: %s (line %d, column %d)",
                               jerr.text, jerr.line, jerr.column);
    }
    if (!json_is_object(root)) {
        json_decref(root);
        return nvfp4_error_set(err, NVFP4_ERR_BAD_JSON, p, NULL, 8,
                               "header is not a JSON object");
    }

    n = json_object_size(root);
    st->tensors = calloc(n ? n : 1, sizeof(*st->tensors));
    st->by_name = calloc(n ? n : 1, sizeof(size_t));
    if (!st->tensors || !st->by_name) {
        json_decref(root);
        return nvfp4_error_set(err, NVFP4_ERR_NOMEM, p, NULL, -1, "out of memory");
    }
    json_object_foreach(root, k, v) {
        nvfp4_tensor *t;
        if (strcmp(k, "__metadata__") == 0) {
            rc = parse_metadata(st, v, err);
            if (rc)
                break;
            continue;
        }
        t = &st->tensors[st->count];
        t->name = strdup(k);
        if (!t->name) {
            rc = nvfp4_error_set(err, NVFP4_ERR_NOMEM, p, NULL, -1, "out of memory");
            break;
        }
        st->count++;
        rc = parse_entry(st, k, v, t, err);
        if (rc)
            break;
    }
    json_decref(root);
    if (rc)
        return rc;

    qsort(st->tensors, st->count, sizeof(*st->tensors), cmp_offset);
    for (size_t i = 1; i < st->count; i++) {
        const nvfp4_tensor *a = &st->tensors[i - 1], *b = &st->tensors[i];
        if (a->nbytes && b->nbytes && a->offset + a->nbytes > b->offset)
            return nvfp4_error_set(err, NVFP4_ERR_OVERLAP, p, b->name,
                                   (int64_t)b->offset,
                                   "bytes [%llu, %llu) overlap tensor \"%s\"",
                                   (unsigned long long)(b->offset - st->data_start),
                                   (unsigned long long)(b->offset - st->data_start +
                                                        b->nbytes),
                                   a->name);
    }
    for (size_t i = 0; i < st->count; i++)
        st->by_name[i] = i;
    qsort_r(st->by_name, st->count, sizeof(size_t), cmp_name, st->tensors);
    return NVFP4_OK;
}

nvfp4_safetensors *nvfp4_safetensors_open(const char *path, nvfp4_error *err)
{
    nvfp4_safetensors *st;
    struct stat sb = {0};
    int fd;

    nvfp4_error_clear(err);
    if (!path) {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1, "no path given");
        return NULL;
    }
    st = calloc(1, sizeof(*st));
    if (!st || !(st->path = strdup(path))) {
        free(st);
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, path, NULL, -1, "out of memory");
        return NULL;
    }
    fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO must not block */
    if (fd < 0) {
        nvfp4_error_set(err, errno == ENOENT ? NVFP4_ERR_NOT_FOUND : NVFP4_ERR_IO,
                        path, NULL, -1, "cannot open: %s", strerror(errno));
        goto fail;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        nvfp4_error_set(err, NVFP4_ERR_IO, path, NULL, -1, "is %s, not a regular file",
                        nvfp4f_file_kind(sb.st_mode));
        close(fd);
        goto fail;
    }
    if (sb.st_size < 8) {
        nvfp4_error_set(err, NVFP4_ERR_TRUNCATED, path, NULL, 0,
                        "file has %lld bytes, fewer than the 8-byte header length",
                        (long long)sb.st_size);
        close(fd);
        goto fail;
    }
    st->map_size = (size_t)sb.st_size;
    st->map = mmap(NULL, st->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (st->map == MAP_FAILED) {
        st->map = NULL;
        nvfp4_error_set(err, NVFP4_ERR_IO, path, NULL, -1, "cannot map: %s",
                        strerror(errno));
        goto fail;
    }
    if (parse_header(st, err))
        goto fail;
    return st;
fail:
    nvfp4_safetensors_free(st);
    return NULL;
}
