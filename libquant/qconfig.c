/* SPDX-License-Identifier: MIT */
/* Quark's quantization_config (§3): which Linear layers are NVFP4, which are
 * weight-only, which stay unquantized, and a clear refusal for everything
 * else Quark can export (MXFP4, FP8, INT4, ...).
 *
 * Only the fields §3 names are looked at (dtype, qscheme, group_size,
 * is_dynamic, is_scale_quant, scale_format): observer classes, rounding
 * names and the like change between Quark versions without changing the
 * numbers in the file. */
#include "config.h"

#include <fnmatch.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct nvfp4_qconfig {
    json_t *qc;          /* quantization_config, NULL when there is none */
    char *file;          /* config.json, for messages */
    nvfp4_scheme global; /* global_quant_config, classified at parse time */
    nvfp4q_dialect *dl;  /* ModelOpt / compressed-tensors (dialect.c); NULL for Quark */
    char producer[64];   /* Quark's "quark VERSION" (parse time), "" otherwise */
};

static const char supported_text[] =
    "supported: NVFP4 weights (fp4 per_group group_size 16 + fp8_e4m3 per_tensor "
    "scale) with dynamic NVFP4 activations (W4A4) or unquantized activations (W4A16)";

const char *nvfp4_scheme_name(nvfp4_scheme s)
{
    switch (s) {
    case NVFP4_SCHEME_NONE:
        return "none";
    case NVFP4_SCHEME_W4A4:
        return "w4a4";
    case NVFP4_SCHEME_W4A16:
        return "w4a16";
    }
    return "unknown";
}

/* ---- one tensor spec (a JSON object) ------------------------------------- */

static const char *spec_str(json_t *spec, const char *key)
{
    json_t *v = json_object_get(spec, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int str_is(const char *s, const char *want)
{
    return s && !strcmp(s, want);
}

/* scale_format of a plain float scale: absent, null or "float32". */
static int float_scale_format(json_t *spec)
{
    json_t *v = json_object_get(spec, "scale_format");
    return !v || json_is_null(v) || str_is(spec_str(spec, "scale_format"), "float32");
}

/* Entry 0 of an NVFP4 pair: fp4 per_group 16, is_dynamic == DYNAMIC. */
static int is_fp4_group16(json_t *spec, int dynamic)
{
    json_t *gs = json_object_get(spec, "group_size");
    json_t *dyn = json_object_get(spec, "is_dynamic");
    return json_is_object(spec) && str_is(spec_str(spec, "dtype"), "fp4") &&
           str_is(spec_str(spec, "qscheme"), "per_group") && json_is_integer(gs) &&
           json_integer_value(gs) == NVFP4_BLOCK && json_is_boolean(dyn) &&
           json_is_true(dyn) == dynamic && !json_is_true(json_object_get(spec, "is_scale_quant")) &&
           float_scale_format(spec);
}

/* Entry 1: the static fp8_e4m3 per-tensor quantization of the scales.  An
 * older export may lack is_scale_quant; when present it must be true. */
static int is_fp8_scale_quant(json_t *spec)
{
    json_t *sq = json_object_get(spec, "is_scale_quant");
    return json_is_object(spec) && str_is(spec_str(spec, "dtype"), "fp8_e4m3") &&
           str_is(spec_str(spec, "qscheme"), "per_tensor") &&
           json_is_false(json_object_get(spec, "is_dynamic")) &&
           (!sq || json_is_null(sq) || json_is_true(sq)) && float_scale_format(spec);
}

static int is_nvfp4_pair(json_t *v, int dynamic)
{
    return json_is_array(v) && json_array_size(v) == 2 &&
           is_fp4_group16(json_array_get(v, 0), dynamic) &&
           is_fp8_scale_quant(json_array_get(v, 1));
}

/* A name for what a spec (object, or list of objects) is, for messages. */
static const char *spec_family(json_t *v)
{
    json_t *first = json_is_array(v) ? json_array_get(v, 0) : v;
    const char *dtype = spec_str(first, "dtype");
    const char *sf = spec_str(first, "scale_format");
    json_t *gs = json_object_get(first, "group_size");

    if (!dtype)
        return "an unrecognised quantization";
    if (!strcmp(dtype, "fp4")) {
        if (str_is(sf, "e8m0"))
            return "MXFP4";
        if (str_is(sf, "e5m3") ||
            (json_is_array(v) && str_is(spec_str(json_array_get(v, 1), "dtype"), "fp8_e5m3")))
            return "FP4 with E5M3 scales";
        if (json_is_array(v) && json_is_integer(gs) && json_integer_value(gs) == NVFP4_BLOCK)
            return "an NVFP4 variant";
        return "FP4";
    }
    if (!strncmp(dtype, "fp8", 3))
        return "FP8";
    if (!strncmp(dtype, "fp6", 3))
        return "FP6";
    if (!strcmp(dtype, "int4") || !strcmp(dtype, "uint4"))
        return "INT4";
    if (!strcmp(dtype, "int8") || !strcmp(dtype, "uint8"))
        return "INT8";
    if (!strncmp(dtype, "mx", 2))
        return "an MX format";
    return "an unsupported data type";
}

/* "dtype=fp4 qscheme=per_group group_size=32 is_dynamic=false scale_format=e8m0"
 * for each entry of V, separated by " + ". */
static void spec_describe(json_t *v, char *buf, size_t n)
{
    static const char *const keys[] = {"dtype", "qscheme", "group_size", "is_dynamic",
                                       "is_scale_quant", "scale_format"};
    size_t count = json_is_array(v) ? json_array_size(v) : 1, used = 0;

    buf[0] = '\0';
    if (!json_is_array(v) && !json_is_object(v)) {
        char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        snprintf(buf, n, "%s", s ? s : "?");
        free(s);
        return;
    }
    for (size_t i = 0; i < count && used < n; i++) {
        json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
        if (i)
            used += (size_t)snprintf(buf + used, n - used, " + ");
        if (!json_is_object(e)) {
            if (used < n)
                used += (size_t)snprintf(buf + used, n - used, "(not an object)");
            continue;
        }
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]) && used < n; k++) {
            json_t *f = json_object_get(e, keys[k]);
            char *s;
            if (!f || json_is_null(f))
                continue;
            s = json_dumps(f, JSON_ENCODE_ANY | JSON_COMPACT);
            used += (size_t)snprintf(buf + used, n - used, "%s%s=%s",
                                     used && buf[used - 1] != ' ' ? " " : "", keys[k],
                                     s ? s : "?");
            free(s);
        }
    }
}

/* ---- a layer config: {weight, input_tensors, output_tensors, bias} -------- */

static nvfp4_status unsupported_spec(const nvfp4_qconfig *q, const char *path,
                                     const char *field, const char *layer, json_t *v,
                                     nvfp4_error *err)
{
    char desc[300], key[NVFP4_ERROR_FIELD_LENGTH];

    spec_describe(v, desc, sizeof(desc));
    snprintf(key, sizeof(key), "%s.%s", path, field);
    return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, q->file, key, -1,
                           "%s%s%sfound %s (%s); %s", layer ? "layer " : "",
                           layer ? layer : "", layer ? ": " : "", spec_family(v), desc,
                           supported_text);
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = s ? strlen(s) : 0, b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

/* The output_tensors of a k_proj / v_proj that Quark's kv_cache_scheme
 * "fp8" export merged into layer_quant_config: the KV-cache quantizer
 * (static per-tensor fp8_e4m3), which libmodel applies to the cache
 * (kvcache.c, docs/DIALECTS.md), not to the layer's output. */
static int is_kv_output(const nvfp4_qconfig *q, const char *path, const char *layer, json_t *o)
{
    json_t *kv = json_object_get(q->qc, "kv_cache_quant_config");
    const char *dt = json_string_value(json_object_get(o, "dtype"));
    const char *qs = json_string_value(json_object_get(o, "qscheme"));

    if (!json_is_object(kv) || json_object_size(kv) == 0 || !json_is_object(o) || !dt || !qs ||
        strcmp(dt, "fp8_e4m3") != 0 || strcmp(qs, "per_tensor") != 0 ||
        json_is_true(json_object_get(o, "is_dynamic")))
        return 0;
    if (layer)
        return ends_with(layer, ".k_proj") || ends_with(layer, ".v_proj");
    return ends_with(path, "k_proj\"]") || ends_with(path, "v_proj\"]");
}

static nvfp4_status classify(const nvfp4_qconfig *q, json_t *lc, const char *path,
                             const char *layer, nvfp4_scheme *out, nvfp4_error *err)
{
    json_t *w, *in, *o, *b;

    *out = NVFP4_SCHEME_NONE;
    if (!lc || json_is_null(lc))
        return NVFP4_OK;
    if (!json_is_object(lc))
        return nvfp4_error_set(err, NVFP4_ERR_TYPE, q->file, path, -1,
                               "expected a layer quantization config (object)");
    w = json_object_get(lc, "weight");
    in = json_object_get(lc, "input_tensors");
    o = json_object_get(lc, "output_tensors");
    b = json_object_get(lc, "bias");
    if (o && !json_is_null(o) && !is_kv_output(q, path, layer, o))
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, q->file, path, -1,
                               "%s%squantized output_tensors are not supported (found %s)",
                               layer ? layer : "", layer ? ": " : "", spec_family(o));
    if (b && !json_is_null(b))
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, q->file, path, -1,
                               "%s%sa quantized bias is not supported (found %s); "
                               "NVFP4 exports keep the bias unquantized",
                               layer ? layer : "", layer ? ": " : "", spec_family(b));
    if (!w || json_is_null(w)) {
        if (in && !json_is_null(in))
            return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, q->file, path, -1,
                                   "%s%sactivation-only quantization is not supported "
                                   "(weight is null, input_tensors is %s)",
                                   layer ? layer : "", layer ? ": " : "", spec_family(in));
        return NVFP4_OK;
    }
    if (!is_nvfp4_pair(w, 0))
        return unsupported_spec(q, path, "weight", layer, w, err);
    if (!in || json_is_null(in)) {
        *out = NVFP4_SCHEME_W4A16;
        return NVFP4_OK;
    }
    if (!is_nvfp4_pair(in, 1))
        return unsupported_spec(q, path, "input_tensors", layer, in, err);
    *out = NVFP4_SCHEME_W4A4;
    return NVFP4_OK;
}

/* ---- parse ---------------------------------------------------------------- */

void nvfp4_qconfig_free(nvfp4_qconfig *q)
{
    if (!q)
        return;
    json_decref(q->qc);
    nvfp4q_dialect_free(q->dl);
    free(q->file);
    free(q);
}

static nvfp4_status check_type(const nvfp4_qconfig *q, const char *key, int want_array,
                               nvfp4_error *err)
{
    json_t *v = json_object_get(q->qc, key);
    char path[NVFP4_ERROR_FIELD_LENGTH];

    if (!v || json_is_null(v) || (want_array ? json_is_array(v) : json_is_object(v)))
        return NVFP4_OK;
    snprintf(path, sizeof(path), "quantization_config.%s", key);
    return nvfp4_error_set(err, NVFP4_ERR_TYPE, q->file, path, -1, "expected %s",
                           want_array ? "a list of module names or patterns" : "an object");
}

static nvfp4_status check_exclude_regex(const char *file, size_t i, const char *pat,
                                        nvfp4_error *err);

nvfp4_qconfig *nvfp4_qconfig_parse(const nvfp4_config *cfg, nvfp4_error *err)
{
    nvfp4_qconfig *q = calloc(1, sizeof(*q));
    json_t *qc, *exp, *ex;
    const char *method, *wf;

    if (!q || !(q->file = strdup(cfg ? nvfp4_config_path(cfg) : ""))) {
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, cfg ? nvfp4_config_path(cfg) : NULL,
                        "quantization_config", -1, "out of memory for the parsed config");
        goto fail;
    }
    qc = cfg ? nvfp4_config_json(cfg, "quantization_config") : NULL;
    if (cfg && nvfp4q_dialect_from_files(cfg, qc, &q->dl, err))
        goto fail;
    if (q->dl)
        return q; /* ModelOpt or compressed-tensors (dialect.c) */
    if (!qc || json_is_null(qc))
        return q; /* no quantization: every layer is NONE */
    if (!json_is_object(qc)) {
        nvfp4_error_set(err, NVFP4_ERR_TYPE, q->file, "quantization_config", -1,
                        "expected an object");
        goto fail;
    }
    q->qc = json_incref(qc);
    {
        json_t *v = json_object_get(qc, "version");
        snprintf(q->producer, sizeof(q->producer), "quark%s%.40s",
                 json_is_string(v) ? " " : "", json_is_string(v) ? json_string_value(v) : "");
    }

    method = spec_str(qc, "quant_method");
    if (!method) {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, q->file, "quantization_config.quant_method",
                        -1, "missing or not a string; expected \"quark\", \"modelopt\" or "
                        "\"compressed-tensors\"");
        goto fail;
    }
    if (strcmp(method, "quark") != 0) {
        nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, q->file,
                        "quantization_config.quant_method", -1,
                        "quant_method \"%s\" is not supported; supported: \"quark\" "
                        "(AMD Quark), \"modelopt\" (NVIDIA ModelOpt) and "
                        "\"compressed-tensors\" (llm-compressor) NVFP4 exports", method);
        goto fail;
    }
    /* vLLM requires export.weight_format "real_quantized": "fake_quantized"
     * exports hold float weights that merely went through the quantizer. */
    exp = json_object_get(qc, "export");
    ex = json_object_get(exp, "weight_format");
    wf = json_is_string(ex) ? json_string_value(ex) : NULL;
    if (!wf) {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, q->file,
                        "quantization_config.export.weight_format", -1,
                        "missing; expected \"real_quantized\"");
        goto fail;
    }
    if (strcmp(wf, "real_quantized") != 0) {
        nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, q->file,
                        "quantization_config.export.weight_format", -1,
                        "found \"%s\"; expected \"real_quantized\"", wf);
        goto fail;
    }
    if (check_type(q, "exclude", 1, err) || check_type(q, "layer_quant_config", 0, err) ||
        check_type(q, "layer_type_quant_config", 0, err))
        goto fail;
    ex = json_object_get(qc, "exclude");
    for (size_t i = 0; i < json_array_size(ex); i++) {
        if (!json_is_string(json_array_get(ex, i))) {
            nvfp4_error_set(err, NVFP4_ERR_TYPE, q->file, "quantization_config.exclude",
                            -1, "entry %zu is not a string", i);
            goto fail;
        }
        if (check_exclude_regex(q->file, i, json_string_value(json_array_get(ex, i)), err))
            goto fail;
    }
    if (classify(q, json_object_get(qc, "global_quant_config"),
                 "quantization_config.global_quant_config", NULL, &q->global, err))
        goto fail;
    return q;
fail:
    nvfp4_qconfig_free(q);
    return NULL;
}

/* ---- resolve -------------------------------------------------------------- */

/* "^" + the REGEX of a "re:REGEX" exclude entry (Python's re.match anchors
 * at the start only); NULL when out of memory. */
static char *anchored_regex(const char *pat)
{
    size_t len = strlen(pat + 3);
    char *a = malloc(len + 2);

    if (a) {
        a[0] = '^';
        memcpy(a + 1, pat + 3, len + 1);
    }
    return a;
}

/* glibc's regcomp copies the operand of every bounded repetition ("+" once,
 * "{m,n}" n times), so nested repetitions grow exponentially: "l.+++...+*"
 * (60 "+") asked for gigabytes (found by fuzz-qconfig).  An estimate of the
 * compiled size by that rule, saturating at RE_SIZE_MAX + 1; P advances
 * over one alternation at nesting DEPTH. */
#define RE_SIZE_MAX 10000u
#define RE_DEPTH_MAX 32
static unsigned long re_size_alt(const char **p, int depth);

static unsigned long re_sat(unsigned long long v)
{
    return v > RE_SIZE_MAX ? RE_SIZE_MAX + 1 : (unsigned long)v;
}

static unsigned long re_size_atom(const char **p, int depth)
{
    const char *s = *p;
    unsigned long n = 1;

    if (*s == '(') {
        s++;
        n = depth >= RE_DEPTH_MAX ? RE_SIZE_MAX + 1 : re_size_alt(&s, depth + 1);
        if (*s == ')')
            s++;
    } else if (*s == '[') {
        s++;
        if (*s == '^')
            s++;
        if (*s == ']')
            s++;
        while (*s && *s != ']') {
            if (s[0] == '[' && (s[1] == ':' || s[1] == '.' || s[1] == '=')) {
                char close = s[1];
                s += 2;
                while (*s && !(s[0] == close && s[1] == ']'))
                    s++;
                if (*s)
                    s += 2;
            } else {
                s++;
            }
        }
        if (*s)
            s++;
    } else if (*s == '\\' && s[1]) {
        s += 2;
    } else {
        s++;
    }
    *p = s;
    return n;
}

static unsigned long re_size_alt(const char **p, int depth)
{
    unsigned long long total = 0, branch = 0;
    const char *s = *p;

    while (*s && *s != ')') {
        unsigned long long a;
        if (*s == '|') {
            total += branch;
            branch = 0;
            s++;
            continue;
        }
        int reps = 0;
        a = re_size_atom(&s, depth);
        while (*s == '*' || *s == '+' || *s == '?' || *s == '{') {
            /* Stacked repetitions ("a+*", "a?++") make regcomp's epsilon
             * closures explode even when the copies stay few (fuzz-qconfig:
             * 15 s in calc_eclosure_iter); no layer name needs them. */
            if (++reps > 1)
                a = RE_SIZE_MAX + 1;
            if (*s == '{') {
                unsigned long long m = 0, n;
                s++;
                for (; *s >= '0' && *s <= '9'; s++)
                    m = m < 100000 ? m * 10 + (unsigned)(*s - '0') : m;
                n = m;
                if (*s == ',') {
                    s++;
                    n = 0;
                    for (; *s >= '0' && *s <= '9'; s++)
                        n = n < 100000 ? n * 10 + (unsigned)(*s - '0') : n;
                    if (n < m)
                        n = m + 1; /* "{m,}": one copy more, then a star */
                }
                if (*s == '}')
                    s++;
                a = a * (n ? n : 1) + 1;
            } else {
                a = a * (*s == '+' ? 2 : 1) + 1;
                s++;
            }
            a = re_sat(a);
        }
        branch = re_sat(branch + a);
    }
    *p = s;
    return re_sat(total + branch);
}

/* A "re:" exclude entry that POSIX regcomp refuses would silently match
 * nothing, quantizing a layer the export left unquantized: refuse it at
 * parse, with regcomp's reason. */
static nvfp4_status check_exclude_regex(const char *file, size_t i, const char *pat,
                                        nvfp4_error *err)
{
    char key[64], why[160];
    regex_t re;
    char *a;
    int rc;

    if (strncmp(pat, "re:", 3))
        return NVFP4_OK;
    snprintf(key, sizeof(key), "quantization_config.exclude[%zu]", i);
    {
        const char *q = pat + 3;
        unsigned long size = 0;
        while (size <= RE_SIZE_MAX && *q) {
            size = re_sat((unsigned long long)size + re_size_alt(&q, 0));
            if (*q == ')')
                q++; /* unbalanced: regcomp says so below */
        }
        if (size > RE_SIZE_MAX)
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, file, key, -1,
                                   "pattern \"%.64s%s\" nests repetitions beyond %u "
                                   "compiled nodes (POSIX regcomp copies each repeated "
                                   "operand)", pat + 3, strlen(pat + 3) > 64 ? "..." : "",
                                   RE_SIZE_MAX);
    }
    if (!(a = anchored_regex(pat)))
        return nvfp4_error_set(err, NVFP4_ERR_NOMEM, file, key, -1,
                               "out of memory compiling the pattern");
    rc = regcomp(&re, a, REG_EXTENDED | REG_NOSUB);
    free(a);
    if (rc == 0) {
        regfree(&re);
        return NVFP4_OK;
    }
    regerror(rc, &re, why, sizeof(why));
    return nvfp4_error_set(err, NVFP4_ERR_INVALID, file, key, -1,
                           "pattern \"%s\" is not a valid POSIX extended regular "
                           "expression: %s", pat + 3, why);
}

/* An exclude entry: the module name itself, an fnmatch pattern, or "re:REGEX"
 * (vLLM's convention; Python's re.match anchors at the start only). */
static int exclude_matches(const char *pat, const char *layer)
{
    if (!strncmp(pat, "re:", 3)) {
        regex_t re;
        char *anchored;
        int hit = 0;
        if (!(anchored = anchored_regex(pat)))
            return 0;
        if (!regcomp(&re, anchored, REG_EXTENDED | REG_NOSUB)) {
            hit = !regexec(&re, layer, 0, NULL, 0);
            regfree(&re);
        }
        free(anchored);
        return hit;
    }
    if (strpbrk(pat, "*?["))
        return !fnmatch(pat, layer, 0);
    return !strcmp(pat, layer);
}

/* layer_quant_config keys: with '*' an fnmatch pattern, without one a
 * substring of the layer name (vLLM's _find_matched_config). */
static int layer_key_matches(const char *pat, const char *layer)
{
    if (strchr(pat, '*'))
        return !fnmatch(pat, layer, 0);
    return strstr(layer, pat) != NULL;
}

nvfp4_status nvfp4_qconfig_resolve(const nvfp4_qconfig *q, const char *layer,
                                   nvfp4_scheme *out, nvfp4_error *err)
{
    static const char *const linear_types[] = {"Linear", "nn.Linear", "torch.nn.Linear",
                                               "<class 'torch.nn.modules.linear.Linear'>"};
    json_t *ex, *lq, *lt, *v;
    const char *k;
    char path[NVFP4_ERROR_FIELD_LENGTH];

    if (!q || !layer || !out)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "nvfp4_qconfig_resolve: NULL argument");
    *out = NVFP4_SCHEME_NONE;
    if (q->dl)
        return nvfp4q_dialect_resolve(q->dl, layer, out, err);
    if (!q->qc)
        return NVFP4_OK;
    ex = json_object_get(q->qc, "exclude");
    for (size_t i = 0; i < json_array_size(ex); i++)
        if (exclude_matches(json_string_value(json_array_get(ex, i)), layer))
            return NVFP4_OK;
    lq = json_object_get(q->qc, "layer_quant_config");
    json_object_foreach(lq, k, v) {
        if (layer_key_matches(k, layer)) {
            snprintf(path, sizeof(path), "quantization_config.layer_quant_config[\"%s\"]", k);
            return classify(q, v, path, layer, out, err);
        }
    }
    lt = json_object_get(q->qc, "layer_type_quant_config");
    for (size_t i = 0; i < sizeof(linear_types) / sizeof(linear_types[0]); i++) {
        v = json_object_get(lt, linear_types[i]);
        if (v) {
            snprintf(path, sizeof(path), "quantization_config.layer_type_quant_config[\"%s\"]",
                     linear_types[i]);
            return classify(q, v, path, layer, out, err);
        }
    }
    *out = q->global;
    return NVFP4_OK;
}

nvfp4_dialect nvfp4_qconfig_dialect(const nvfp4_qconfig *q)
{
    if (!q)
        return NVFP4_DIALECT_NONE;
    if (q->dl)
        return nvfp4q_dialect_kind(q->dl);
    return q->qc ? NVFP4_DIALECT_QUARK : NVFP4_DIALECT_NONE;
}

const char *nvfp4_qconfig_producer(const nvfp4_qconfig *q)
{
    if (!q)
        return "";
    if (q->dl)
        return nvfp4q_dialect_producer(q->dl);
    return q->producer;
}

const char *nvfp4_qconfig_kv_cache(const nvfp4_qconfig *q)
{
    json_t *kv;

    if (!q)
        return "";
    if (q->dl)
        return nvfp4q_dialect_kv_cache(q->dl);
    kv = json_object_get(q->qc, "kv_cache_quant_config");
    return json_is_object(kv) && json_object_size(kv) ? "FP8" : "";
}
