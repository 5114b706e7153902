/* SPDX-License-Identifier: MIT */
/*
 * libformat tests.  Every expectation comes from files written by the real
 * Python safetensors package and listings Python made of them
 * (scripts/fixtures/gen_format.py -> tests/data/format/).
 */
#include "config.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nvfp4/format.h>

#include "sha256.h"
#include "testutil.h"
#include "toolrun.h"

static const char *const status_names[] = {
    [NVFP4_ERR_TRUNCATED] = "TRUNCATED",
    [NVFP4_ERR_HEADER_TOO_LARGE] = "HEADER_TOO_LARGE",
    [NVFP4_ERR_BAD_JSON] = "BAD_JSON",
    [NVFP4_ERR_BAD_ENTRY] = "BAD_ENTRY",
    [NVFP4_ERR_BAD_DTYPE] = "BAD_DTYPE",
    [NVFP4_ERR_BAD_SHAPE] = "BAD_SHAPE",
    [NVFP4_ERR_OVERFLOW] = "OVERFLOW",
    [NVFP4_ERR_BAD_SIZE] = "BAD_SIZE",
    [NVFP4_ERR_OUT_OF_RANGE] = "OUT_OF_RANGE",
    [NVFP4_ERR_OVERLAP] = "OVERLAP",
    [NVFP4_ERR_DUPLICATE] = "DUPLICATE",
};

static const char *status_name(nvfp4_status s)
{
    if ((size_t)s < sizeof(status_names) / sizeof(status_names[0]) && status_names[s])
        return status_names[s];
    return nvfp4_strerror(s);
}

/* Compare one tensor with its entry in a Python listing. */
static void check_tensor(const nvfp4_tensor *t, json_t *want, uint64_t data_start)
{
    json_t *shape = json_object_get(want, "shape");
    json_t *offs = json_object_get(want, "data_offsets");
    char hex[65];

    ck_assert_str_eq(t->name, json_string_value(json_object_get(want, "name")));
    ck_assert_str_eq(nvfp4_dtype_name(t->dtype),
                     json_string_value(json_object_get(want, "dtype")));
    ck_assert_int_eq(t->ndim, (int)json_array_size(shape));
    for (int d = 0; d < t->ndim; d++)
        ck_assert_int_eq(t->shape[d], tnum(json_array_get(shape, (size_t)d)));
    ck_assert_uint_eq(t->nbytes,
                      (uint64_t)tnum(json_object_get(want, "nbytes")));
    if (data_start)
        ck_assert_uint_eq(t->offset,
                          data_start + (uint64_t)tnum(json_array_get(offs, 0)));
    sha256_hex(t->data, t->nbytes, hex);
    ck_assert_str_eq(hex, json_string_value(json_object_get(want, "sha256")));
}

START_TEST(test_all_dtypes)
{
    json_t *want = tload_json_real("format/all_dtypes.json");
    json_t *tensors = json_object_get(want, "tensors");
    json_t *meta = json_object_get(want, "metadata");
    uint64_t data_start = (uint64_t)tnum(json_object_get(want, "data_start"));
    nvfp4_error err;
    nvfp4_safetensors *st = nvfp4_safetensors_open(tdata("format/all_dtypes.safetensors"), &err);
    const char *k;
    json_t *v;

    ck_assert_msg(st != NULL, "%s", err.text);
    ck_assert_uint_eq(nvfp4_safetensors_count(st), json_array_size(tensors));
    for (size_t i = 0; i < json_array_size(tensors); i++) {
        json_t *w = json_array_get(tensors, i);
        const nvfp4_tensor *t =
            nvfp4_safetensors_find(st, json_string_value(json_object_get(w, "name")));
        ck_assert_ptr_nonnull(t);
        check_tensor(t, w, data_start);
    }
    ck_assert_uint_eq(nvfp4_safetensors_metadata_count(st), json_object_size(meta));
    json_object_foreach(meta, k, v) {
        const char *got = nvfp4_safetensors_metadata_get(st, k);
        ck_assert_ptr_nonnull(got);
        ck_assert_str_eq(got, json_string_value(v));
    }
    ck_assert_ptr_null(nvfp4_safetensors_find(st, "no.such.tensor"));
    nvfp4_safetensors_free(st);
    nvfp4_safetensors_free(NULL);
    json_decref(want);
}
END_TEST

static void check_sharded(const char *path)
{
    json_t *want = tload_json_real("format/sharded.json");
    json_t *tensors = json_object_get(want, "tensors");
    nvfp4_error err;
    nvfp4_checkpoint *ck = nvfp4_checkpoint_open(path, &err);

    ck_assert_msg(ck != NULL, "%s", err.text);
    ck_assert_uint_eq(nvfp4_checkpoint_count(ck), json_array_size(tensors));
    ck_assert_uint_eq(nvfp4_checkpoint_shard_count(ck),
                      json_object_size(json_object_get(want, "shards")));
    for (size_t i = 0; i < json_array_size(tensors); i++) {
        json_t *w = json_array_get(tensors, i);
        const char *name = json_string_value(json_object_get(w, "name"));
        const char *shard = json_string_value(json_object_get(w, "shard"));
        const nvfp4_tensor *t;
        ck_assert_int_eq(nvfp4_checkpoint_get(ck, name, &t, &err), NVFP4_OK);
        check_tensor(t, w, 0);
        if (shard)
            ck_assert_str_eq(nvfp4_checkpoint_shard_of(ck, name), shard);
    }
    ck_assert_ptr_nonnull(nvfp4_checkpoint_config(ck));
    {
        const nvfp4_tensor *t;
        ck_assert_int_eq(nvfp4_checkpoint_get(ck, "missing.weight", &t, &err),
                         NVFP4_ERR_NOT_FOUND);
        ck_assert_ptr_nonnull(strstr(err.text, "missing.weight"));
    }
    nvfp4_checkpoint_free(ck);
    json_decref(want);
}

START_TEST(test_sharded_dir) { check_sharded(tdata("format/sharded")); }
END_TEST

START_TEST(test_sharded_index)
{
    check_sharded(tdata("format/sharded/model.safetensors.index.json"));
}
END_TEST

START_TEST(test_single_file_checkpoint)
{
    nvfp4_error err;
    nvfp4_checkpoint *ck = nvfp4_checkpoint_open(tdata("format/all_dtypes.safetensors"), &err);
    json_t *want = tload_json_real("format/all_dtypes.json");

    ck_assert_msg(ck != NULL, "%s", err.text);
    ck_assert_uint_eq(nvfp4_checkpoint_count(ck),
                      json_array_size(json_object_get(want, "tensors")));
    /* Names come back sorted. */
    for (size_t i = 1; i < nvfp4_checkpoint_count(ck); i++)
        ck_assert_int_lt(strcmp(nvfp4_checkpoint_name(ck, i - 1), nvfp4_checkpoint_name(ck, i)), 0);
    nvfp4_checkpoint_free(ck);
    json_decref(want);
}
END_TEST

/* Each malformed file: its own error category, the file named, no crash. */
START_TEST(test_malformed_corpus)
{
    json_t *root = tload_json("format/malformed.json");
    json_t *cases = json_object_get(root, "cases");

    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        const char *file = json_string_value(json_object_get(c, "file"));
        const char *expected = json_string_value(json_object_get(c, "expected"));
        json_t *also = json_object_get(c, "also_acceptable");
        char rel[512];
        nvfp4_error err;
        nvfp4_safetensors *st;
        const char *got;
        int ok;

        snprintf(rel, sizeof(rel), "format/malformed/%s", file);
        st = nvfp4_safetensors_open(tdata(rel), &err);
        if (st) {
            int accept = 0;
            for (size_t a = 0; a < json_array_size(also); a++)
                accept |= !strcmp(json_string_value(json_array_get(also, a)), "ACCEPT");
            ck_assert_msg(accept, "%s was accepted, expected %s", file, expected);
            nvfp4_safetensors_free(st);
            continue;
        }
        got = status_name(err.status);
        ok = !strcmp(got, expected);
        for (size_t a = 0; a < json_array_size(also); a++)
            ok |= !strcmp(got, json_string_value(json_array_get(also, a)));
        ck_assert_msg(ok, "%s: got %s (%s), expected %s", file, got, err.text, expected);
        ck_assert_msg(strstr(err.text, file) != NULL, "message does not name the file: %s",
                      err.text);
        ck_assert_msg(strstr(err.file, file) != NULL, "error file field: %s", err.file);
    }
    json_decref(root);
}
END_TEST

START_TEST(test_malformed_dirs)
{
    nvfp4_error err;
    nvfp4_checkpoint *ck;
    const nvfp4_tensor *t;
    int64_t v;

    ck = nvfp4_checkpoint_open(tdata("format/malformed_sharded/missing_shard"), &err);
    ck_assert_ptr_null(ck);
    ck_assert_int_eq(err.status, NVFP4_ERR_NOT_FOUND);
    ck_assert_msg(strstr(err.text, "model-00003-of-00003.safetensors"), "%s", err.text);

    ck = nvfp4_checkpoint_open(tdata("format/malformed_sharded/missing_tensor"), &err);
    ck_assert_msg(ck != NULL, "%s", err.text);
    ck_assert_int_eq(nvfp4_checkpoint_get(ck, "model.norm.weight", &t, &err),
                     NVFP4_ERR_NOT_FOUND);
    ck_assert_msg(strstr(err.text, "model.norm.weight") &&
                      strstr(err.text, "model-00002-of-00002.safetensors"),
                  "%s", err.text);
    nvfp4_checkpoint_free(ck);

    ck = nvfp4_checkpoint_open(tdata("format/malformed_sharded/bad_index_json"), &err);
    ck_assert_ptr_null(ck);
    ck_assert_int_eq(err.status, NVFP4_ERR_BAD_JSON);
    ck_assert_msg(strstr(err.text, "model.safetensors.index.json"), "%s", err.text);

    ck = nvfp4_checkpoint_open(tdata("format/malformed_sharded/bad_config_type"), &err);
    ck_assert_msg(ck != NULL, "%s", err.text);
    ck_assert_int_eq(nvfp4_config_get_int(nvfp4_checkpoint_config(ck), "hidden_size", 0,
                                          &v, &err),
                     NVFP4_ERR_TYPE);
    ck_assert_msg(strstr(err.text, "hidden_size") && strstr(err.text, "config.json") &&
                      strstr(err.text, "integer"),
                  "%s", err.text);
    nvfp4_checkpoint_free(ck);

    ck = nvfp4_checkpoint_open(tdata("format/no-such-dir"), &err);
    ck_assert_ptr_null(ck);
    ck_assert_int_eq(err.status, NVFP4_ERR_NOT_FOUND);
}
END_TEST

/* Released pages read back unchanged (they fault in from the file again);
 * memory that is not a shard mapping is refused, never madvised. */
START_TEST(test_release_pages)
{
    json_t *want = tload_json_real("format/sharded.json");
    json_t *w = json_array_get(json_object_get(want, "tensors"), 0);
    const char *name = json_string_value(json_object_get(w, "name"));
    nvfp4_error err;
    nvfp4_checkpoint *ck = nvfp4_checkpoint_open(tdata("format/sharded"), &err);
    const nvfp4_tensor *t;
    char heap[8192];

    ck_assert_msg(ck != NULL, "%s", err.text);
    ck_assert_int_eq(nvfp4_checkpoint_get(ck, name, &t, &err), NVFP4_OK);
    ck_assert_int_eq(nvfp4_checkpoint_release_pages(ck, t->data, t->nbytes), 0);
    check_tensor(t, w, 0);
    ck_assert_int_eq(nvfp4_checkpoint_release_pages(ck, heap, sizeof(heap)), -1);
    ck_assert_int_eq(nvfp4_checkpoint_release_pages(ck, t->data, (size_t)1 << 40), -1);
    nvfp4_checkpoint_free(ck);
    json_decref(want);
}
END_TEST

START_TEST(test_config_getters)
{
    nvfp4_error err;
    nvfp4_config *cfg = nvfp4_config_load(tdata("format/sharded/config.json"), &err);
    json_t *raw = tload_json("format/sharded/config.json");
    int64_t iv;
    double dv;
    const char *sv;
    int bv;

    ck_assert_msg(cfg != NULL, "%s", err.text);
    ck_assert_int_eq(nvfp4_config_get_int(cfg, "hidden_size", -1, &iv, &err), NVFP4_OK);
    ck_assert_int_eq(iv, json_integer_value(json_object_get(raw, "hidden_size")));
    ck_assert_int_eq(nvfp4_config_get_int(cfg, "no_such_key", 42, &iv, &err), NVFP4_OK);
    ck_assert_int_eq(iv, 42);
    ck_assert_int_eq(nvfp4_config_get_double(cfg, "no.such.nested", 0.5, &dv, &err), NVFP4_OK);
    ck_assert(dv == 0.5);
    ck_assert_int_eq(nvfp4_config_get_string(cfg, "model_type", NULL, &sv, &err), NVFP4_OK);
    ck_assert_str_eq(sv, json_string_value(json_object_get(raw, "model_type")));
    ck_assert_int_eq(nvfp4_config_get_bool(cfg, "model_type", 0, &bv, &err), NVFP4_ERR_TYPE);
    ck_assert_msg(strstr(err.text, "model_type"), "%s", err.text);
    ck_assert_int_eq(nvfp4_config_get_string(cfg, "hidden_size", NULL, &sv, &err),
                     NVFP4_ERR_TYPE);
    ck_assert_ptr_nonnull(nvfp4_config_json(cfg, "architectures"));
    nvfp4_config_free(cfg);
    nvfp4_config_free(NULL);
    json_decref(raw);
}
END_TEST

/* Integral reals (4096.0, written by some exporters) read as integers;
 * fractions, values past 2^53's neighbourhood (9e15) and out-of-range
 * magnitudes are type errors naming the key.  Without libm: the format
 * layer does not link it (an -O0 build calls floor() instead of expanding
 * it, and failed to link). */
START_TEST(test_config_integral_reals)
{
    static const char text[] = "{\"a\": 4096.0, \"b\": -3.0, \"c\": -0.0, \"d\": 4096.5,"
                               " \"e\": 1e300, \"f\": -9.5e15, \"g\": 8.9e15}";
    static const struct {
        const char *key;
        int ok;
        int64_t want;
    } cases[] = {{"a", 1, 4096}, {"b", 1, -3}, {"c", 1, 0}, {"d", 0, 0},
                 {"e", 0, 0},    {"f", 0, 0},  {"g", 1, 8900000000000000LL}};
    char path[] = "/tmp/nvfp4-config-XXXXXX";
    nvfp4_config *cfg;
    nvfp4_error err;
    int fd;

    ck_assert_int_ge(fd = mkstemp(path), 0);
    ck_assert_int_eq(write(fd, text, sizeof(text) - 1), (ssize_t)(sizeof(text) - 1));
    close(fd);
    cfg = nvfp4_config_load(path, &err);
    ck_assert_msg(cfg != NULL, "%s", err.text);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t iv = -1;
        nvfp4_status st = nvfp4_config_get_int(cfg, cases[i].key, 7, &iv, &err);

        if (cases[i].ok) {
            ck_assert_msg(st == NVFP4_OK, "%s: %s", cases[i].key, err.text);
            ck_assert_msg(iv == cases[i].want, "%s: %lld, want %lld", cases[i].key,
                          (long long)iv, (long long)cases[i].want);
        } else {
            ck_assert_msg(st == NVFP4_ERR_TYPE, "%s: status %d", cases[i].key, (int)st);
            ck_assert_msg(strstr(err.text, cases[i].key) && strstr(err.text, "an integer"),
                          "%s", err.text);
        }
    }
    nvfp4_config_free(cfg);
    unlink(path);
}
END_TEST

START_TEST(test_tool_inspect_json)
{
    json_t *want = tload_json_real("format/all_dtypes.json");
    json_t *wt = json_object_get(want, "tensors");
    char args[4200], *out;
    json_error_t je;
    json_t *got, *gt;

    snprintf(args, sizeof(args), "inspect --json '%s'", tdata("format/all_dtypes.safetensors"));
    ck_assert_int_eq(trun_tool(args, 0, &out), 0);
    got = json_loads(out, 0, &je);
    ck_assert_msg(got != NULL, "inspect --json printed invalid JSON: %s", je.text);
    gt = json_object_get(got, "tensors");
    ck_assert_uint_eq(json_array_size(gt), json_array_size(wt));
    for (size_t i = 0; i < json_array_size(wt); i++) {
        json_t *w = json_array_get(wt, i), *g = NULL;
        for (size_t j = 0; j < json_array_size(gt); j++)
            if (json_equal(json_object_get(json_array_get(gt, j), "name"),
                           json_object_get(w, "name")))
                g = json_array_get(gt, j);
        ck_assert_ptr_nonnull(g);
        json_t *gs = json_object_get(g, "shape"), *ws = json_object_get(w, "shape");
        ck_assert(json_equal(json_object_get(g, "dtype"), json_object_get(w, "dtype")));
        ck_assert_uint_eq(json_array_size(gs), json_array_size(ws));
        for (size_t d = 0; d < json_array_size(ws); d++)
            ck_assert_int_eq(tnum(json_array_get(gs, d)), tnum(json_array_get(ws, d)));
        ck_assert_int_eq(tnum(json_object_get(g, "bytes")), tnum(json_object_get(w, "nbytes")));
    }
    json_decref(got);
    json_decref(want);
    free(out);
}
END_TEST

START_TEST(test_tool_exit_codes)
{
    json_t *root = tload_json("format/malformed.json");
    json_t *cases = json_object_get(root, "cases");
    char args[4200], *out;

    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *also = json_object_get(c, "also_acceptable");
        char rel[512];
        int accept = 0;
        for (size_t a = 0; a < json_array_size(also); a++)
            accept |= !strcmp(json_string_value(json_array_get(also, a)), "ACCEPT");
        if (accept)
            continue;
        snprintf(rel, sizeof(rel), "format/malformed/%s",
                 json_string_value(json_object_get(c, "file")));
        snprintf(args, sizeof(args), "inspect '%s'", tdata(rel));
        ck_assert_msg(trun_tool(args, 0, &out) == 1, "%s did not exit 1", rel);
        free(out);
    }
    ck_assert_int_eq(trun_tool("inspect", 0, &out), 2);
    free(out);
    ck_assert_int_eq(trun_tool("inspect --bogus x", 0, &out), 2);
    free(out);
    ck_assert_int_eq(trun_tool("--version", 0, &out), 0);
    ck_assert_ptr_nonnull(strstr(out, PACKAGE_VERSION));
    free(out);
    ck_assert_int_eq(trun_tool("no-such-command", 0, &out), 2);
    free(out);
    json_decref(root);
}
END_TEST

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int by_offset(const void *a, const void *b)
{
    json_int_t x = json_integer_value(
        json_array_get(json_object_get(*(json_t *const *)a, "data_offsets"), 0));
    json_int_t y = json_integer_value(
        json_array_get(json_object_get(*(json_t *const *)b, "data_offsets"), 0));
    return x < y ? -1 : x > y;
}

/* The writer re-creates a file written by the real safetensors package: the
 * same tensors declared in its data order, the data streamed in 7-byte pieces
 * (so that pieces straddle tensors); the data region must be byte-identical
 * and the header the same JSON as the reference's. */
START_TEST(test_writer_roundtrip)
{
    size_t len, wlen, n = 0;
    uint8_t *ref = tload_file("format/all_dtypes.safetensors", &len), *got;
    uint64_t hlen = le64(ref), ghlen;
    json_t *hdr = json_loadb((const char *)ref + 8, hlen, 0, NULL), *ghdr, *v, *meta;
    json_t *entries[256];
    const char *key;
    char path[] = "/tmp/nvfp4-writer-XXXXXX";
    nvfp4_safetensors_writer *w;
    nvfp4_safetensors *st;
    nvfp4_error err;
    int fd;

    ck_assert_ptr_nonnull(hdr);
    ck_assert_int_ge(fd = mkstemp(path), 0);
    close(fd);
    ck_assert_ptr_nonnull(w = nvfp4_safetensors_writer_new(&err));
    json_object_foreach(hdr, key, v) {
        if (!strcmp(key, "__metadata__"))
            continue;
        ck_assert_uint_lt(n, 256);
        entries[n++] = v;
    }
    qsort(entries, n, sizeof(entries[0]), by_offset);
    if ((meta = json_object_get(hdr, "__metadata__"))) {
        json_object_foreach(meta, key, v)
            ck_assert_int_eq(nvfp4_safetensors_writer_metadata(w, key, json_string_value(v),
                                                               &err), NVFP4_OK);
    }
    for (size_t i = 0; i < n; i++) {
        json_t *shape = json_object_get(entries[i], "shape");
        int64_t dims[NVFP4_MAX_DIMS];
        nvfp4_dtype dt;
        const char *name = NULL;

        json_object_foreach(hdr, key, v) if (v == entries[i]) name = key;
        ck_assert_int_eq(nvfp4_dtype_from_name(
                             json_string_value(json_object_get(entries[i], "dtype")), &dt),
                         0);
        for (size_t d = 0; d < json_array_size(shape); d++)
            dims[d] = json_integer_value(json_array_get(shape, d));
        ck_assert_msg(nvfp4_safetensors_writer_declare(w, name, dt, (int)json_array_size(shape),
                                                       dims, &err) == NVFP4_OK,
                      "%s", err.text);
    }
    ck_assert_uint_eq(nvfp4_safetensors_writer_data_size(w), len - 8 - hlen);
    ck_assert_msg(nvfp4_safetensors_writer_open(w, path, &err) == NVFP4_OK, "%s", err.text);
    for (size_t off = 8 + hlen; off < len; off += 7) {
        size_t piece = len - off < 7 ? len - off : 7;
        ck_assert_msg(nvfp4_safetensors_writer_write(w, ref + off, piece, &err) == NVFP4_OK,
                      "%s", err.text);
    }
    ck_assert_ptr_null(nvfp4_safetensors_writer_next(w));
    ck_assert_msg(nvfp4_safetensors_writer_close(w, &err) == NVFP4_OK, "%s", err.text);
    nvfp4_safetensors_writer_free(w);

    got = tload_file_abs(path, &wlen);
    ghlen = le64(got);
    ck_assert_uint_eq(ghlen % 8, 0);
    ck_assert_uint_eq(wlen - 8 - ghlen, len - 8 - hlen);
    ck_assert_msg(memcmp(got + 8 + ghlen, ref + 8 + hlen, len - 8 - hlen) == 0,
                  "data region differs from the safetensors package's");
    ghdr = json_loadb((const char *)got + 8, ghlen, 0, NULL);
    ck_assert_msg(ghdr && json_equal(ghdr, hdr), "header differs from the safetensors package's");
    ck_assert_msg((st = nvfp4_safetensors_open(path, &err)) != NULL, "%s", err.text);
    ck_assert_uint_eq(nvfp4_safetensors_count(st), n);
    nvfp4_safetensors_free(st);
    json_decref(ghdr);
    json_decref(hdr);
    free(got);
    free(ref);
    unlink(path);
}
END_TEST

/* Misuse and failures of the writer: each an error naming file or tensor,
 * and no half-written file left behind. */
START_TEST(test_writer_errors)
{
    char path[] = "/tmp/nvfp4-writer-XXXXXX";
    const int64_t shape[2] = {2, 3}, neg[1] = {-1};
    nvfp4_safetensors_writer *w;
    nvfp4_error err;
    float data[6] = {0};
    int fd;

    ck_assert_int_ge(fd = mkstemp(path), 0);
    close(fd);
    w = nvfp4_safetensors_writer_new(&err);
    ck_assert_int_eq(nvfp4_safetensors_writer_declare(w, "a", NVFP4_DTYPE_F32, 2, shape, &err),
                     NVFP4_OK);
    ck_assert_int_eq(nvfp4_safetensors_writer_declare(w, "a", NVFP4_DTYPE_F32, 2, shape, &err),
                     NVFP4_ERR_DUPLICATE);
    ck_assert_str_eq(err.key, "a");
    ck_assert_int_eq(nvfp4_safetensors_writer_declare(w, "b", NVFP4_DTYPE_F32, 1, neg, &err),
                     NVFP4_ERR_BAD_SHAPE);
    ck_assert_int_eq(nvfp4_safetensors_writer_declare(w, "__metadata__", NVFP4_DTYPE_F32, 0,
                                                      NULL, &err), NVFP4_ERR_INVALID);
    ck_assert_int_eq(nvfp4_safetensors_writer_write(w, data, 4, &err), NVFP4_ERR_INVALID);
    ck_assert_int_eq(nvfp4_safetensors_writer_declare(w, "c", NVFP4_DTYPE_BF16, 1, shape, &err),
                     NVFP4_OK);
    ck_assert_int_eq(nvfp4_safetensors_writer_open(w, "/nonexistent-dir/x.safetensors", &err),
                     NVFP4_ERR_IO);
    ck_assert_str_eq(err.file, "/nonexistent-dir/x.safetensors");
    ck_assert_int_eq(nvfp4_safetensors_writer_open(w, path, &err), NVFP4_OK);
    ck_assert_int_eq(nvfp4_safetensors_writer_declare(w, "d", NVFP4_DTYPE_F32, 2, shape, &err),
                     NVFP4_ERR_INVALID);
    ck_assert_int_eq(nvfp4_safetensors_writer_write(w, data, sizeof(data), &err), NVFP4_OK);
    ck_assert_str_eq(nvfp4_safetensors_writer_next(w), "c");
    /* closing with "c" unwritten: truncated, named, file removed */
    ck_assert_int_eq(nvfp4_safetensors_writer_close(w, &err), NVFP4_ERR_TRUNCATED);
    ck_assert_str_eq(err.key, "c");
    ck_assert_str_eq(err.file, path);
    ck_assert_int_ne(access(path, F_OK), 0);
    nvfp4_safetensors_writer_free(w);

    /* more bytes than declared */
    w = nvfp4_safetensors_writer_new(&err);
    ck_assert_int_eq(nvfp4_safetensors_writer_declare(w, "a", NVFP4_DTYPE_F32, 2, shape, &err),
                     NVFP4_OK);
    ck_assert_int_eq(nvfp4_safetensors_writer_open(w, path, &err), NVFP4_OK);
    ck_assert_int_eq(nvfp4_safetensors_writer_write(w, data, sizeof(data), &err), NVFP4_OK);
    ck_assert_int_eq(nvfp4_safetensors_writer_write(w, data, 1, &err), NVFP4_ERR_BAD_SIZE);
    ck_assert_str_eq(err.file, path);
    /* freed without close: no file that looks complete */
    nvfp4_safetensors_writer_free(w);
    ck_assert_int_ne(access(path, F_OK), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("format");
    TCase *tc = tcase_create("format");
    SRunner *sr;
    int nf;

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_all_dtypes);
    tcase_add_test(tc, test_sharded_dir);
    tcase_add_test(tc, test_sharded_index);
    tcase_add_test(tc, test_single_file_checkpoint);
    tcase_add_test(tc, test_malformed_corpus);
    tcase_add_test(tc, test_malformed_dirs);
    tcase_add_test(tc, test_config_getters);
    tcase_add_test(tc, test_config_integral_reals);
    tcase_add_test(tc, test_release_pages);
    tcase_add_test(tc, test_tool_inspect_json);
    tcase_add_test(tc, test_tool_exit_codes);
    tcase_add_test(tc, test_writer_roundtrip);
    tcase_add_test(tc, test_writer_errors);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
