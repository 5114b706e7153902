/* SPDX-License-Identifier: MIT */
/* Helpers shared by the Check test programs. */
#ifndef NVFP4_TESTUTIL_H
#define NVFP4_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static inline char *tdata(const char *rel)
{
    static char buf[8][4096];
    static int slot;
    char *b = buf[slot++ & 7];
    snprintf(b, 4096, "%s/%s", TEST_DATA_DIR, rel);
    return b;
}

static inline json_t *tload_json_flags(const char *rel, size_t flags)
{
    json_error_t e;
    json_t *j = json_load_file(tdata(rel), flags, &e);
    if (!j) {
        fprintf(stderr, "cannot load fixture %s: %s\n", rel, e.text);
        abort();
    }
    return j;
}

static inline json_t *tload_json(const char *rel)
{
    return tload_json_flags(rel, 0);
}

/* For listings holding integers beyond int64 (U64 values): every number
 * becomes a double, read with json_number_value. */
static inline json_t *tload_json_real(const char *rel)
{
    return tload_json_flags(rel, JSON_DECODE_INT_AS_REAL);
}

/* Integer-valued JSON number (integer or real) as int64. */
static inline long long tnum(json_t *v)
{
    return (long long)json_number_value(v);
}

/* Read a whole file; aborts the test on failure. */
static inline void *tload_file_abs(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    long n;
    void *p;
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        abort();
    }
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    p = malloc((size_t)n + 1);
    if (!p || fread(p, 1, (size_t)n, f) != (size_t)n)
        abort();
    fclose(f);
    if (len)
        *len = (size_t)n;
    return p;
}

/* Read a whole fixture file (tests/data/REL). */
static inline void *tload_file(const char *rel, size_t *len)
{
    return tload_file_abs(tdata(rel), len);
}

/* The input_scale_2 of PyTorch's §5 fixture (tests/data/quant/act_qdq_*):
 * quant.json's notes.act_qdq.input_scale_2_hex, the float32's bytes in
 * little-endian hex, exactly. */
static inline float tact_qdq_scale(void)
{
    json_t *meta = tload_json("quant/quant.json");
    const char *hex = json_string_value(json_object_get(
        json_object_get(json_object_get(meta, "notes"), "act_qdq"), "input_scale_2_hex"));
    unsigned char raw[4];
    float v;

    if (!hex || strlen(hex) != 8) {
        fprintf(stderr, "quant/quant.json: notes.act_qdq.input_scale_2_hex: expected 8 hex "
                        "digits\n");
        abort();
    }
    for (int i = 0; i < 4; i++)
        if (sscanf(hex + 2 * i, "%2hhx", &raw[i]) != 1) {
            fprintf(stderr, "quant/quant.json: input_scale_2_hex: not hex: %s\n", hex);
            abort();
        }
    memcpy(&v, raw, 4);
    json_decref(meta);
    return v;
}

#endif
