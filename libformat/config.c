/* SPDX-License-Identifier: MIT */
/* Hugging Face config.json: typed getters over dotted key paths. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <nvfp4/format.h>
#include "internal.h"

#define MAX_CONFIG_BYTES (64u * 1024u * 1024u)

struct nvfp4_config {
    char *path;
    json_t *root;
};

nvfp4_config *nvfp4_config_load(const char *path, nvfp4_error *err)
{
    nvfp4_config *cfg;
    json_error_t jerr;
    size_t len;
    char *text;

    nvfp4_error_clear(err);
    text = nvfp4f_read_file(path, MAX_CONFIG_BYTES, &len, err);
    if (!text)
        return NULL;
    cfg = calloc(1, sizeof(*cfg));
    if (!cfg || !(cfg->path = strdup(path))) {
        free(cfg);
        free(text);
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, path, NULL, -1, "out of memory");
        return NULL;
    }
    cfg->root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!cfg->root) {
        nvfp4_error_set(err, NVFP4_ERR_BAD_JSON, path, NULL, jerr.position,
                        "not valid JSON: %s (line %d, column %d)", jerr.text,
                        jerr.line, jerr.column);
        nvfp4_config_free(cfg);
        return NULL;
    }
    if (!json_is_object(cfg->root)) {
        nvfp4_error_set(err, NVFP4_ERR_BAD_JSON, path, NULL, 0,
                        "top level is not a JSON object");
        nvfp4_config_free(cfg);
        return NULL;
    }
    return cfg;
}

void nvfp4_config_free(nvfp4_config *cfg)
{
    if (!cfg)
        return;
    json_decref(cfg->root);
    free(cfg->path);
    free(cfg);
}

const char *nvfp4_config_path(const nvfp4_config *cfg)
{
    return cfg ? cfg->path : NULL;
}

json_t *nvfp4_config_json(const nvfp4_config *cfg, const char *key)
{
    json_t *cur;
    const char *p;

    if (!cfg || !key)
        return NULL;
    cur = cfg->root;
    p = key;
    while (*p && cur) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        char part[256];

        if (n >= sizeof(part) || !json_is_object(cur))
            return NULL;
        memcpy(part, p, n);
        part[n] = '\0';
        cur = json_object_get(cur, part);
        p = dot ? dot + 1 : p + n;
    }
    return cur;
}

int nvfp4_config_has(const nvfp4_config *cfg, const char *key)
{
    json_t *v = nvfp4_config_json(cfg, key);
    return v && !json_is_null(v);
}

static nvfp4_status type_error(const nvfp4_config *cfg, const char *key,
                               const char *want, nvfp4_error *err)
{
    return nvfp4_error_set(err, NVFP4_ERR_TYPE, cfg->path, key, -1,
                           "expected %s", want);
}

nvfp4_status nvfp4_config_get_int(const nvfp4_config *cfg, const char *key,
                                  int64_t def, int64_t *out, nvfp4_error *err)
{
    json_t *v = nvfp4_config_json(cfg, key);

    if (!v || json_is_null(v)) {
        *out = def;
        return NVFP4_OK;
    }
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return NVFP4_OK;
    }
    /* 4096.0 is written by some exporters; accept integral reals (the range
     * tested first: converting a double past int64_t's is undefined).  No
     * floor(): the format layer does not link libm, and at -O0 gcc and
     * clang call it instead of expanding it inline. */
    if (json_is_real(v)) {
        const double d = json_real_value(v);

        if (d > -9.0e15 && d < 9.0e15 && d == (double)(int64_t)d) {
            *out = (int64_t)d;
            return NVFP4_OK;
        }
    }
    return type_error(cfg, key, "an integer", err);
}

nvfp4_status nvfp4_config_get_double(const nvfp4_config *cfg, const char *key,
                                     double def, double *out, nvfp4_error *err)
{
    json_t *v = nvfp4_config_json(cfg, key);

    if (!v || json_is_null(v)) {
        *out = def;
        return NVFP4_OK;
    }
    if (!json_is_number(v))
        return type_error(cfg, key, "a number", err);
    *out = json_number_value(v);
    return NVFP4_OK;
}

nvfp4_status nvfp4_config_get_bool(const nvfp4_config *cfg, const char *key, int def,
                                   int *out, nvfp4_error *err)
{
    json_t *v = nvfp4_config_json(cfg, key);

    if (!v || json_is_null(v)) {
        *out = def;
        return NVFP4_OK;
    }
    if (!json_is_boolean(v))
        return type_error(cfg, key, "true or false", err);
    *out = json_is_true(v);
    return NVFP4_OK;
}

nvfp4_status nvfp4_config_get_string(const nvfp4_config *cfg, const char *key,
                                     const char *def, const char **out,
                                     nvfp4_error *err)
{
    json_t *v = nvfp4_config_json(cfg, key);

    if (!v || json_is_null(v)) {
        *out = def;
        return NVFP4_OK;
    }
    if (!json_is_string(v))
        return type_error(cfg, key, "a string", err);
    *out = json_string_value(v);
    return NVFP4_OK;
}
