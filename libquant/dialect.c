/* SPDX-License-Identifier: MIT */
/* The NVFP4 checkpoint dialects beside Quark's (docs/DIALECTS.md):
 *
 *  - NVIDIA ModelOpt: quantization_config {quant_method: "modelopt", quant_algo,
 *    exclude_modules, ...} in config.json and/or hf_quant_config.json
 *    {producer: {name, version}, quantization: {quant_algo, exclude_modules, ...}};
 *  - compressed-tensors (llm-compressor): quantization_config {quant_method:
 *    "compressed-tensors", format, config_groups: {NAME: {targets, weights,
 *    input_activations}}, ignore, version}.
 *
 * Both are parsed into one small description that answers, per Linear, the
 * scheme (none / w4a4 / w4a16) the same way vLLM decides it, or refuses a
 * scheme the library does not run (FP8, INT4, MXFP4, ...) naming the layer
 * and what was found.  Tensor names and scale directions are linear.c's. */
#include "config.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fnmatch.h>
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct nvfp4q_dialect {
    nvfp4_dialect kind;
    char *file;             /* the file the description came from */
    char key[48];           /* its JSON path, for messages */
    char producer[128];     /* "modelopt 0.47.0", "compressed-tensors 0.13.0" */
    char kv_cache[64];      /* kv-cache quantization named by the config, "" if none */
    json_t *obj;            /* the quantization object (a reference) */
    /* ModelOpt */
    nvfp4_scheme global;    /* quant_algo of the whole model */
    int mixed;              /* quant_algo MIXED_PRECISION: per-layer quantized_layers */
    json_t *exclude;        /* exclude_modules (ModelOpt) / ignore (compressed-tensors) */
};

const char *nvfp4_dialect_name(nvfp4_dialect d)
{
    switch (d) {
    case NVFP4_DIALECT_NONE:
        return "none";
    case NVFP4_DIALECT_QUARK:
        return "quark";
    case NVFP4_DIALECT_MODELOPT:
        return "modelopt";
    case NVFP4_DIALECT_COMPRESSED_TENSORS:
        return "compressed-tensors";
    }
    return "unknown";
}

static const char *jstr(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

void nvfp4q_dialect_free(nvfp4q_dialect *d)
{
    if (!d)
        return;
    json_decref(d->obj);
    free(d->file);
    free(d);
}

nvfp4_dialect nvfp4q_dialect_kind(const nvfp4q_dialect *d)
{
    return d ? d->kind : NVFP4_DIALECT_NONE;
}

const char *nvfp4q_dialect_producer(const nvfp4q_dialect *d)
{
    return d ? d->producer : "";
}

const char *nvfp4q_dialect_kv_cache(const nvfp4q_dialect *d)
{
    return d ? d->kv_cache : "";
}

/* A list of strings at OBJ.KEY (absent or null: empty). */
static nvfp4_status string_list(const nvfp4q_dialect *d, json_t *obj, const char *key,
                                nvfp4_error *err)
{
    json_t *v = json_object_get(obj, key);
    char path[NVFP4_ERROR_FIELD_LENGTH];

    snprintf(path, sizeof(path), "%s.%s", d->key, key);
    if (!v || json_is_null(v))
        return NVFP4_OK;
    if (!json_is_array(v))
        return nvfp4_error_set(err, NVFP4_ERR_TYPE, d->file, path, -1,
                               "expected a list of module names or patterns");
    for (size_t i = 0; i < json_array_size(v); i++)
        if (!json_is_string(json_array_get(v, i)))
            return nvfp4_error_set(err, NVFP4_ERR_TYPE, d->file, path, -1,
                                   "entry %zu is not a string", i);
    return NVFP4_OK;
}

/* ---- ModelOpt --------------------------------------------------------------- */

/* quant_algo -> scheme; *what names an algorithm that is not NVFP4. */
static int modelopt_algo(const char *algo, nvfp4_scheme *out, const char **what)
{
    *what = NULL;
    if (!strcmp(algo, "NVFP4")) {
        *out = NVFP4_SCHEME_W4A4;
        return 1;
    }
    if (!strcmp(algo, "W4A16_NVFP4") || !strcmp(algo, "NVFP4_W4A16")) {
        *out = NVFP4_SCHEME_W4A16;
        return 1;
    }
    if (!strncmp(algo, "FP8", 3))
        *what = "FP8";
    else if (!strcmp(algo, "NVFP4_AWQ"))
        *what = "NVFP4 with AWQ pre-quantization scales";
    else if (!strcmp(algo, "NVFP4_SVD"))
        *what = "NVFP4 with SVDQuant pre-quantization scales and a low-rank residual";
    else if (strstr(algo, "AWQ") || !strncmp(algo, "INT4", 4) || !strncmp(algo, "W4A16", 5))
        *what = "INT4";
    else if (!strncmp(algo, "INT8", 4) || !strncmp(algo, "W8A8", 4))
        *what = "INT8";
    else if (!strncmp(algo, "MXFP4", 5))
        *what = "MXFP4";
    else if (!strncmp(algo, "MXFP8", 5))
        *what = "MXFP8";
    else if (!strncmp(algo, "W4A8", 4))
        *what = "W4A8 (FP4 weights, FP8 activations)";
    else
        *what = "an unrecognised algorithm";
    return 0;
}

static const char modelopt_supported[] =
    "supported: quant_algo \"NVFP4\" (W4A4) and \"W4A16_NVFP4\" (weight-only), group_size 16";

static nvfp4_status modelopt_parse(nvfp4q_dialect *d, nvfp4_error *err)
{
    json_t *o = d->obj, *gs;
    const char *algo = jstr(o, "quant_algo"), *kv = jstr(o, "kv_cache_quant_algo"), *what;
    char path[NVFP4_ERROR_FIELD_LENGTH];
    nvfp4_status st;

    snprintf(path, sizeof(path), "%s.quant_algo", d->key);
    if (!algo)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, d->file, path, -1,
                               "missing or not a string; %s", modelopt_supported);
    if (!strcmp(algo, "MIXED_PRECISION")) {
        json_t *ql = json_object_get(o, "quantized_layers");
        d->mixed = 1;
        snprintf(path, sizeof(path), "%s.quantized_layers", d->key);
        if (!json_is_object(ql))
            return nvfp4_error_set(err, NVFP4_ERR_TYPE, d->file, path, -1,
                                   "quant_algo MIXED_PRECISION needs an object of layer "
                                   "name -> {\"quant_algo\": ...}");
    } else if (!modelopt_algo(algo, &d->global, &what)) {
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, d->file, path, -1,
                               "found \"%s\" (%s); %s", algo, what, modelopt_supported);
    }
    gs = json_object_get(o, "group_size");
    if (gs && !json_is_null(gs) &&
        !(json_is_integer(gs) && json_integer_value(gs) == NVFP4_BLOCK)) {
        char *s = json_dumps(gs, JSON_ENCODE_ANY | JSON_COMPACT);
        snprintf(path, sizeof(path), "%s.group_size", d->key);
        nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, d->file, path, -1,
                        "found %s; NVFP4 blocks are %d elements", s ? s : "?", NVFP4_BLOCK);
        free(s);
        return NVFP4_ERR_UNSUPPORTED;
    }
    if ((st = string_list(d, o, "exclude_modules", err)))
        return st;
    d->exclude = json_object_get(o, "exclude_modules");
    if (!kv) /* config.json's flat form: "kv_cache_scheme": "FP8" */
        kv = jstr(o, "kv_cache_scheme");
    if (kv)
        snprintf(d->kv_cache, sizeof(d->kv_cache), "%s", kv);
    return NVFP4_OK;
}

/* ModelOpt's exclude_modules are fnmatch patterns over module names; a
 * module excluded also excludes what is inside it (a whole block). */
static int glob_excludes(json_t *list, const char *layer)
{
    char name[NVFP4_ERROR_FIELD_LENGTH];

    snprintf(name, sizeof(name), "%s", layer);
    for (;;) {
        for (size_t i = 0; i < json_array_size(list); i++) {
            const char *p = json_string_value(json_array_get(list, i));
            if (p && (!strcmp(p, name) || !fnmatch(p, name, 0)))
                return 1;
        }
        char *dot = strrchr(name, '.');
        if (!dot)
            return 0;
        *dot = '\0';
    }
}

static nvfp4_status modelopt_resolve(const nvfp4q_dialect *d, const char *layer,
                                     nvfp4_scheme *out, nvfp4_error *err)
{
    json_t *ql, *lc;
    const char *algo, *what;
    char path[NVFP4_ERROR_FIELD_LENGTH];

    *out = NVFP4_SCHEME_NONE;
    if (glob_excludes(d->exclude, layer))
        return NVFP4_OK;
    if (!d->mixed) {
        *out = d->global;
        return NVFP4_OK;
    }
    ql = json_object_get(d->obj, "quantized_layers");
    lc = json_object_get(ql, layer);
    if (!lc)
        return NVFP4_OK; /* not listed: left unquantized by the producer */
    algo = jstr(lc, "quant_algo");
    snprintf(path, sizeof(path), "%s.quantized_layers[\"%s\"].quant_algo", d->key, layer);
    if (!algo)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, d->file, path, -1,
                               "layer %s: missing or not a string; %s", layer,
                               modelopt_supported);
    if (!modelopt_algo(algo, out, &what))
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, d->file, path, -1,
                               "layer %s: found \"%s\" (%s); %s", layer, algo, what,
                               modelopt_supported);
    return NVFP4_OK;
}

/* ---- compressed-tensors ----------------------------------------------------- */

/* vLLM and compressed-tensors match "re:PATTERN" with Python's re.match:
 * anchored at the start, not at the end.  PCRE2 is close to Python's syntax.
 * A pattern that does not compile is an error naming it. */
static int re_match(const char *pat, const char *s, int *bad)
{
    pcre2_code *re;
    pcre2_match_data *md;
    int ec, hit;
    PCRE2_SIZE eo;

    *bad = 0;
    re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_ANCHORED | PCRE2_UTF,
                       &ec, &eo, NULL);
    if (!re) {
        *bad = 1;
        return 0;
    }
    md = pcre2_match_data_create_from_pattern(re, NULL);
    hit = md && pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL) >= 0;
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return hit;
}

/* How TARGET matches LAYER: 3 exact name, 2 "re:" regex, 1 class name
 * (Linear), 0 not at all; -1 when the regex does not compile. */
static int ct_match(const char *target, const char *layer)
{
    static const char *const linear[] = {"Linear", "nn.Linear", "torch.nn.Linear",
                                         "LinearBase"};
    int bad;

    if (!strcmp(target, layer))
        return 3;
    if (!strncmp(target, "re:", 3)) {
        int hit = re_match(target + 3, layer, &bad);
        return bad ? -1 : hit ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof(linear) / sizeof(linear[0]); i++)
        if (!strcmp(target, linear[i]))
            return 1;
    return 0;
}

static nvfp4_status bad_regex(const nvfp4q_dialect *d, const char *where, const char *pat,
                              nvfp4_error *err)
{
    char path[NVFP4_ERROR_FIELD_LENGTH];

    snprintf(path, sizeof(path), "%s.%s", d->key, where);
    return nvfp4_error_set(err, NVFP4_ERR_INVALID, d->file, path, -1,
                           "\"%s\" is not a valid regular expression", pat);
}

/* Check every "re:" entry compiles, so resolving never meets a bad one. */
static nvfp4_status ct_check_list(const nvfp4q_dialect *d, json_t *list, const char *where,
                                  nvfp4_error *err)
{
    for (size_t i = 0; i < json_array_size(list); i++) {
        const char *p = json_string_value(json_array_get(list, i));
        if (p && ct_match(p, "") < 0)
            return bad_regex(d, where, p, err);
    }
    return NVFP4_OK;
}

static const char ct_supported[] =
    "supported: NVFP4 weights (num_bits 4, type float, strategy tensor_group, group_size "
    "16) with NVFP4 activations (the same, dynamic \"local\") or none (NVFP4A16), format "
    "nvfp4-pack-quantized";

/* "num_bits=8 type=float strategy=tensor" of a quantization args object. */
static void ct_describe(json_t *a, char *buf, size_t n)
{
    static const char *const keys[] = {"num_bits", "type", "strategy", "group_size",
                                       "dynamic", "scale_dtype"};
    size_t used = 0;

    buf[0] = '\0';
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]) && used < n; k++) {
        json_t *f = json_object_get(a, keys[k]);
        char *s;
        if (!f || json_is_null(f))
            continue;
        s = json_dumps(f, JSON_ENCODE_ANY | JSON_COMPACT);
        used += (size_t)snprintf(buf + used, n - used, "%s%s=%s", used ? " " : "", keys[k],
                                 s ? s : "?");
        free(s);
    }
}

static const char *ct_family(json_t *a)
{
    json_t *nb = json_object_get(a, "num_bits"), *gs = json_object_get(a, "group_size");
    const char *type = jstr(a, "type"), *strat = jstr(a, "strategy");
    json_int_t bits = json_is_integer(nb) ? json_integer_value(nb) : 0;

    if (type && !strcmp(type, "int"))
        return bits == 4 ? "INT4" : bits == 8 ? "INT8" : "integer quantization";
    if (type && !strcmp(type, "float")) {
        if (bits == 8)
            return "FP8";
        if (bits == 4) {
            if ((json_is_integer(gs) && json_integer_value(gs) == 32) ||
                (strat && !strcmp(strat, "group")))
                return "MXFP4";
            return "an FP4 variant";
        }
    }
    return "an unrecognised quantization";
}

/* NVFP4 args: 4-bit float, tensor_group strategy, blocks of 16; for
 * activations dynamic "local" (per-block scales computed at run time
 * under a static global scale). */
static int ct_is_nvfp4(json_t *a, int activation)
{
    json_t *nb = json_object_get(a, "num_bits"), *gs = json_object_get(a, "group_size");
    json_t *dyn = json_object_get(a, "dynamic");
    const char *type = jstr(a, "type"), *strat = jstr(a, "strategy");

    if (!json_is_object(a) || !json_is_integer(nb) || json_integer_value(nb) != 4 ||
        !type || strcmp(type, "float") || !strat || strcmp(strat, "tensor_group") ||
        !json_is_integer(gs) || json_integer_value(gs) != NVFP4_BLOCK)
        return 0;
    if (activation)
        return json_is_string(dyn) && !strcmp(json_string_value(dyn), "local");
    return !dyn || json_is_false(dyn);
}

static nvfp4_status ct_parse(nvfp4q_dialect *d, nvfp4_error *err)
{
    json_t *o = d->obj, *groups = json_object_get(o, "config_groups"), *g, *kv;
    const char *name, *status = jstr(o, "quantization_status"), *ver = jstr(o, "version");
    char path[NVFP4_ERROR_FIELD_LENGTH];
    nvfp4_status st;

    snprintf(d->producer, sizeof(d->producer), "compressed-tensors%s%s", ver ? " " : "",
             ver ? ver : "");
    if (status && strcmp(status, "compressed") != 0) {
        snprintf(path, sizeof(path), "%s.quantization_status", d->key);
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, d->file, path, -1,
                               "found \"%s\"; expected \"compressed\" (the weights of a "
                               "\"%s\" export are not packed NVFP4)", status, status);
    }
    snprintf(path, sizeof(path), "%s.config_groups", d->key);
    if (!json_is_object(groups))
        return nvfp4_error_set(err, NVFP4_ERR_TYPE, d->file, path, -1,
                               "expected an object of scheme groups");
    if ((st = string_list(d, o, "ignore", err)))
        return st;
    d->exclude = json_object_get(o, "ignore");
    if ((st = ct_check_list(d, d->exclude, "ignore", err)))
        return st;
    json_object_foreach(groups, name, g) {
        char where[NVFP4_ERROR_FIELD_LENGTH];
        snprintf(where, sizeof(where), "config_groups.%s", name);
        snprintf(path, sizeof(path), "%s.config_groups.%s", d->key, name);
        if (!json_is_object(g))
            return nvfp4_error_set(err, NVFP4_ERR_TYPE, d->file, path, -1,
                                   "expected a scheme object");
        {
            json_t *t = json_object_get(g, "targets");
            snprintf(path, sizeof(path), "%s.config_groups.%s.targets", d->key, name);
            if (!json_is_array(t))
                return nvfp4_error_set(err, NVFP4_ERR_TYPE, d->file, path, -1,
                                       "expected a list of module names, \"re:\" patterns "
                                       "or class names");
            for (size_t i = 0; i < json_array_size(t); i++)
                if (!json_is_string(json_array_get(t, i)))
                    return nvfp4_error_set(err, NVFP4_ERR_TYPE, d->file, path, -1,
                                           "entry %zu is not a string", i);
        }
        snprintf(where, sizeof(where), "config_groups.%s.targets", name);
        if ((st = ct_check_list(d, json_object_get(g, "targets"), where, err)))
            return st;
    }
    kv = json_object_get(o, "kv_cache_scheme");
    if (json_is_object(kv)) {
        json_t *nb = json_object_get(kv, "num_bits");
        const char *type = jstr(kv, "type");
        snprintf(d->kv_cache, sizeof(d->kv_cache), "%s%lld",
                 type && !strcmp(type, "float") ? "FP" : "INT",
                 (long long)(json_is_integer(nb) ? json_integer_value(nb) : 0));
    }
    return NVFP4_OK;
}

static nvfp4_status ct_resolve(const nvfp4q_dialect *d, const char *layer, nvfp4_scheme *out,
                               nvfp4_error *err)
{
    json_t *groups = json_object_get(d->obj, "config_groups"), *g, *best = NULL, *w, *in, *oa;
    const char *name, *best_name = NULL, *fmt;
    int best_rank = 0;
    char path[NVFP4_ERROR_FIELD_LENGTH], desc[256];

    *out = NVFP4_SCHEME_NONE;
    for (size_t i = 0; i < json_array_size(d->exclude); i++)
        if (ct_match(json_string_value(json_array_get(d->exclude, i)), layer) > 0)
            return NVFP4_OK;
    /* vLLM's find_matched_target: an exact name beats a regex beats a class name */
    json_object_foreach(groups, name, g) {
        json_t *targets = json_object_get(g, "targets");
        for (size_t i = 0; i < json_array_size(targets); i++) {
            int r = ct_match(json_string_value(json_array_get(targets, i)), layer);
            if (r > best_rank) {
                best_rank = r;
                best = g;
                best_name = name;
            }
        }
    }
    if (!best)
        return NVFP4_OK; /* no scheme targets it: unquantized */
    w = json_object_get(best, "weights");
    in = json_object_get(best, "input_activations");
    oa = json_object_get(best, "output_activations");
    fmt = jstr(best, "format");
    if (!fmt)
        fmt = jstr(d->obj, "format");
    if (!w || json_is_null(w)) {
        snprintf(path, sizeof(path), "%s.config_groups.%s.weights", d->key, best_name);
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, d->file, path, -1,
                               "layer %s: activation-only quantization is not supported; %s",
                               layer, ct_supported);
    }
    if (!ct_is_nvfp4(w, 0)) {
        snprintf(path, sizeof(path), "%s.config_groups.%s.weights", d->key, best_name);
        ct_describe(w, desc, sizeof(desc));
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, d->file, path, -1,
                               "layer %s: found %s (%s); %s", layer, ct_family(w), desc,
                               ct_supported);
    }
    if (oa && !json_is_null(oa)) {
        snprintf(path, sizeof(path), "%s.config_groups.%s.output_activations", d->key,
                 best_name);
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, d->file, path, -1,
                               "layer %s: quantized output activations are not supported",
                               layer);
    }
    if (in && !json_is_null(in) && !ct_is_nvfp4(in, 1)) {
        snprintf(path, sizeof(path), "%s.config_groups.%s.input_activations", d->key,
                 best_name);
        ct_describe(in, desc, sizeof(desc));
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, d->file, path, -1,
                               "layer %s: found %s activations (%s); %s", layer,
                               ct_family(in), desc, ct_supported);
    }
    if (!fmt || strcmp(fmt, "nvfp4-pack-quantized") != 0) {
        snprintf(path, sizeof(path), "%s.format", d->key);
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, d->file, path, -1,
                               "layer %s: NVFP4 scheme stored as format \"%s\"; expected "
                               "\"nvfp4-pack-quantized\"", layer, fmt ? fmt : "(none)");
    }
    *out = in && !json_is_null(in) ? NVFP4_SCHEME_W4A4 : NVFP4_SCHEME_W4A16;
    return NVFP4_OK;
}

/* ---- entry points ------------------------------------------------------------ */

nvfp4q_dialect *nvfp4q_dialect_parse(const char *method, json_t *obj, const char *file,
                                     const char *key, nvfp4_error *err)
{
    nvfp4q_dialect *d = calloc(1, sizeof(*d));
    nvfp4_status st;

    if (!d || !(d->file = strdup(file ? file : ""))) {
        free(d);
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        return NULL;
    }
    snprintf(d->key, sizeof(d->key), "%s", key);
    d->obj = json_incref(obj);
    if (!strcmp(method, "modelopt")) {
        d->kind = NVFP4_DIALECT_MODELOPT;
        snprintf(d->producer, sizeof(d->producer), "modelopt");
        st = modelopt_parse(d, err);
    } else {
        d->kind = NVFP4_DIALECT_COMPRESSED_TENSORS;
        st = ct_parse(d, err);
    }
    if (st) {
        nvfp4q_dialect_free(d);
        return NULL;
    }
    return d;
}

void nvfp4q_dialect_set_producer(nvfp4q_dialect *d, const char *name, const char *version)
{
    if (d && name)
        snprintf(d->producer, sizeof(d->producer), "%s%s%s", name, version ? " " : "",
                 version ? version : "");
}

nvfp4_status nvfp4q_dialect_resolve(const nvfp4q_dialect *d, const char *layer,
                                    nvfp4_scheme *out, nvfp4_error *err)
{
    if (d->kind == NVFP4_DIALECT_MODELOPT)
        return modelopt_resolve(d, layer, out, err);
    return ct_resolve(d, layer, out, err);
}

/* compressed-tensors' input_global_scale GS is a divisor (§5's gs itself).
 * The CPU kernels take it as it is (nvfp4_linear.input_gs); input_scale, the
 * multiplier the other code paths know (the GPU backends compute gs = 1 /
 * input_scale), is the float32 x nearest 1 / GS whose 1.0f / x is GS exactly,
 * or when float32 has none (1 / x skips values: there is no x with
 * 1.0f / x == 448) the x whose reciprocal is nearest GS. */
float nvfp4q_inverse_preimage(float gs)
{
    float x = 1.0f / gs, best = x, bestd = INFINITY;

    for (int i = 0; i < 8; i++) {
        float up = x, dn = x;
        for (int j = 0; j < i; j++) {
            up = nextafterf(up, INFINITY);
            dn = nextafterf(dn, 0.0f);
        }
        float cand[2] = {up, dn};
        for (int c = 0; c < 2; c++) {
            volatile float r = 1.0f / cand[c];
            float dd = fabsf(r - gs);
            if (dd == 0.0f)
                return cand[c];
            if (dd < bestd) {
                bestd = dd;
                best = cand[c];
            }
        }
    }
    return best;
}

/* hf_quant_config.json beside config.json, or NULL (absent or unreadable:
 * *ST says which). */
static nvfp4_config *hf_quant_config(const nvfp4_config *cfg, char *path, size_t n,
                                     nvfp4_status *st, nvfp4_error *err)
{
    const char *cp = nvfp4_config_path(cfg);
    const char *slash = cp ? strrchr(cp, '/') : NULL;
    FILE *f;

    *st = NVFP4_OK;
    if (slash)
        snprintf(path, n, "%.*s/hf_quant_config.json", (int)(slash - cp), cp);
    else
        snprintf(path, n, "hf_quant_config.json");
    if (!(f = fopen(path, "rb")))
        return NULL;
    fclose(f);
    {
        nvfp4_config *h = nvfp4_config_load(path, err);
        if (!h)
            *st = err ? err->status : NVFP4_ERR_INVALID;
        return h;
    }
}

nvfp4_status nvfp4q_dialect_from_files(const nvfp4_config *cfg, json_t *qc,
                                       nvfp4q_dialect **out, nvfp4_error *err)
{
    const char *method = json_is_object(qc) ? jstr(qc, "quant_method") : NULL;
    char hpath[4096];
    nvfp4_config *h = NULL;
    json_t *hq = NULL, *prod = NULL;
    nvfp4_status st;

    *out = NULL;
    if (method && strcmp(method, "modelopt") && strcmp(method, "compressed-tensors"))
        return NVFP4_OK; /* Quark, or refused by qconfig.c */
    if (!method && qc && !json_is_null(qc))
        return NVFP4_OK; /* qconfig.c names what is wrong */
    if (!method || !strcmp(method, "modelopt")) {
        h = hf_quant_config(cfg, hpath, sizeof(hpath), &st, err);
        if (st)
            return st;
        if (h) {
            hq = nvfp4_config_json(h, "quantization");
            prod = nvfp4_config_json(h, "producer");
            if (!json_is_object(hq)) {
                nvfp4_error_set(err, NVFP4_ERR_TYPE, hpath, "quantization", -1,
                                "expected an object (ModelOpt's hf_quant_config.json)");
                nvfp4_config_free(h);
                return NVFP4_ERR_TYPE;
            }
        }
    }
    if (!method && !h)
        return NVFP4_OK; /* not quantized */
    if (method && !strcmp(method, "compressed-tensors")) {
        *out = nvfp4q_dialect_parse(method, qc, nvfp4_config_path(cfg), "quantization_config",
                                    err);
    } else if (hq && !(method && jstr(qc, "quant_algo"))) {
        /* hf_quant_config.json is the whole description */
        *out = nvfp4q_dialect_parse("modelopt", hq, hpath, "quantization", err);
    } else {
        /* config.json's flat form; newer exports call exclude_modules "ignore" */
        json_t *flat = json_deep_copy(qc);
        if (flat && !json_object_get(flat, "exclude_modules") &&
            json_object_get(flat, "ignore"))
            json_object_set(flat, "exclude_modules", json_object_get(flat, "ignore"));
        if (flat && !json_object_get(flat, "exclude_modules") && hq &&
            json_object_get(hq, "exclude_modules"))
            json_object_set(flat, "exclude_modules", json_object_get(hq, "exclude_modules"));
        if (!flat)
            nvfp4_error_set(err, NVFP4_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        else
            *out = nvfp4q_dialect_parse("modelopt", flat, nvfp4_config_path(cfg),
                                        "quantization_config", err);
        json_decref(flat);
        if (!prod)
            prod = json_object_get(qc, "producer");
    }
    if (*out && json_is_object(prod))
        nvfp4q_dialect_set_producer(*out, jstr(prod, "name"), jstr(prod, "version"));
    nvfp4_config_free(h);
    return *out ? NVFP4_OK : (err && err->status ? err->status : NVFP4_ERR_INVALID);
}
