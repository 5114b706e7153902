/* SPDX-License-Identifier: MIT */
/* Request bodies of /v1/completions and /v1/chat/completions: a pure
 * function from bytes to a validated srv_request or an OpenAI-style error
 * naming the field (fuzzed by tests/fuzz/fuzz-request.c). */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "serve.h"

void srv_error_set(srv_error *e, int status, const char *type, const char *param,
                   const char *fmt, ...)
{
    va_list ap;

    e->status = status;
    e->type = type ? type : "invalid_request_error";
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

#define BAD(param, ...) \
    (srv_error_set(err, 400, "invalid_request_error", param, __VA_ARGS__), -1)

void srv_request_free(srv_request *r)
{
    if (!r)
        return;
    free(r->model);
    free(r->prompt);
    free(r->prompt_ids);
    for (size_t i = 0; i < r->n_messages; i++) {
        free(r->messages[i].role);
        free(r->messages[i].content);
    }
    free(r->messages);
    for (size_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

static char *dupn(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

static int nomem(srv_error *err)
{
    srv_error_set(err, 500, "server_error", NULL, "out of memory");
    return -1;
}

/* A JSON number as a double; -1 when V is not a number. */
static int get_number(const json_t *v, double *out)
{
    if (!json_is_number(v))
        return -1;
    *out = json_number_value(v);
    return isfinite(*out) ? 0 : -1;
}

/* An integer (a real with an integral value counts, as JSON has no types). */
static int get_integer(const json_t *v, long long *out)
{
    if (json_is_integer(v)) {
        *out = (long long)json_integer_value(v);
        return 0;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (isfinite(d) && d == floor(d) && fabs(d) < 9e15) {
            *out = (long long)d;
            return 0;
        }
    }
    return -1;
}

/* Optional number KEY of OBJ in [lo, hi] (null or absent: unchanged). */
static int opt_range(const json_t *obj, const char *key, double lo, double hi, double *out,
                     srv_error *err)
{
    const json_t *v = json_object_get(obj, key);
    double d;

    if (!v || json_is_null(v))
        return 0;
    if (get_number(v, &d))
        return BAD(key, "'%s' must be a number", key);
    if (d < lo || d > hi)
        return BAD(key, "'%s' must be between %g and %g, got %g", key, lo, hi, d);
    *out = d;
    return 0;
}

static int opt_bool(const json_t *obj, const char *key, int *out, srv_error *err)
{
    const json_t *v = json_object_get(obj, key);

    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return BAD(key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

/* Fields we recognise and refuse: naming them beats silently ignoring them. */
static int refuse_unsupported(const json_t *o, srv_kind kind, srv_error *err)
{
    static const char *const never[] = {"tools", "functions", "tool_choice", "function_call",
                                        "logit_bias", "suffix"};
    const json_t *v;
    long long n;

    v = json_object_get(o, "n");
    if (v && !json_is_null(v)) {
        if (get_integer(v, &n) || n < 1)
            return BAD("n", "'n' must be a positive integer");
        if (n != 1)
            return BAD("n", "'n' > 1 is not supported (got %lld)", n);
    }
    v = json_object_get(o, "best_of");
    if (v && !json_is_null(v) && (get_integer(v, &n) || n != 1))
        return BAD("best_of", "'best_of' other than 1 is not supported");
    v = json_object_get(o, "echo");
    if (v && json_is_true(v))
        return BAD("echo", "'echo' is not supported");
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) {
        v = json_object_get(o, never[i]);
        if (!v || json_is_null(v))
            continue;
        if ((json_is_array(v) && json_array_size(v) == 0) ||
            (json_is_object(v) && json_object_size(v) == 0) ||
            (json_is_string(v) && (!strcmp(json_string_value(v), "none") ||
                                   !json_string_length(v))))
            continue;
        return BAD(never[i], "'%s' is not supported", never[i]);
    }
    v = json_object_get(o, "response_format");
    if (kind == SRV_CHAT && v && !json_is_null(v)) {
        const json_t *t = json_object_get(v, "type");
        if (!json_is_string(t) || strcmp(json_string_value(t), "text"))
            return BAD("response_format", "only 'response_format' {\"type\": \"text\"} is "
                                          "supported");
    }
    return 0;
}

static int parse_stop(const json_t *o, srv_request *r, srv_error *err)
{
    const json_t *v = json_object_get(o, "stop"), *e;
    size_t i;

    if (!v || json_is_null(v))
        return 0;
    if (json_is_string(v)) {
        if (json_string_length(v) == 0)
            return 0;
        if (json_string_length(v) > SRV_MAX_STOP_LEN)
            return BAD("stop", "'stop' strings are at most %d bytes", SRV_MAX_STOP_LEN);
        if (!(r->stop[0] = dupn(json_string_value(v), json_string_length(v))))
            return nomem(err);
        r->n_stop = 1;
        return 0;
    }
    if (!json_is_array(v))
        return BAD("stop", "'stop' must be a string or an array of strings");
    if (json_array_size(v) > SRV_MAX_STOP)
        return BAD("stop", "'stop' has at most %d strings, got %zu", SRV_MAX_STOP,
                   json_array_size(v));
    json_array_foreach(v, i, e) {
        if (!json_is_string(e))
            return BAD("stop", "'stop[%zu]' must be a string", i);
        if (json_string_length(e) > SRV_MAX_STOP_LEN)
            return BAD("stop", "'stop' strings are at most %d bytes", SRV_MAX_STOP_LEN);
        if (json_string_length(e) == 0)
            continue;
        if (!(r->stop[r->n_stop] = dupn(json_string_value(e), json_string_length(e))))
            return nomem(err);
        r->n_stop++;
    }
    return 0;
}

static int parse_ids(const json_t *a, srv_request *r, srv_error *err)
{
    size_t i;
    const json_t *e;

    if (json_array_size(a) == 0)
        return BAD("prompt", "'prompt' is empty");
    if (!(r->prompt_ids = malloc(json_array_size(a) * sizeof(int32_t))))
        return nomem(err);
    json_array_foreach(a, i, e) {
        long long id;
        if (get_integer(e, &id) || id < 0 || id > INT32_MAX)
            return BAD("prompt", "'prompt[%zu]' must be a token id (a non-negative integer)",
                       i);
        r->prompt_ids[i] = (int32_t)id;
    }
    r->n_prompt_ids = json_array_size(a);
    return 0;
}

static int parse_prompt(const json_t *o, srv_request *r, srv_error *err)
{
    const json_t *p = json_object_get(o, "prompt"), *e;

    if (!p || json_is_null(p))
        return BAD("prompt", "'prompt' is required");
    if (json_is_string(p)) {
        r->prompt_len = json_string_length(p);
        if (!(r->prompt = dupn(json_string_value(p), r->prompt_len)))
            return nomem(err);
        return 0;
    }
    if (!json_is_array(p))
        return BAD("prompt", "'prompt' must be a string, an array of token ids, or an "
                             "array holding one of these");
    if (json_array_size(p) == 0)
        return BAD("prompt", "'prompt' is empty");
    e = json_array_get(p, 0);
    if (json_is_string(e) || json_is_array(e)) {
        if (json_array_size(p) != 1)
            return BAD("prompt", "more than one prompt per request is not supported "
                                 "(got %zu)", json_array_size(p));
        if (json_is_string(e)) {
            r->prompt_len = json_string_length(e);
            if (!(r->prompt = dupn(json_string_value(e), r->prompt_len)))
                return nomem(err);
            return 0;
        }
        return parse_ids(e, r, err);
    }
    return parse_ids(p, r, err);
}

/* Message content: a string, or an array of {"type": "text", "text": ...} parts. */
static int parse_content(const json_t *c, size_t i, char **out, srv_error *err)
{
    size_t k, total = 0, at = 0;
    const json_t *part;

    if (!c || json_is_null(c)) {
        *out = dupn("", 0);
        return *out ? 0 : nomem(err);
    }
    if (json_is_string(c)) {
        *out = dupn(json_string_value(c), json_string_length(c));
        return *out ? 0 : nomem(err);
    }
    if (!json_is_array(c))
        return BAD("messages", "'messages[%zu].content' must be a string or an array of "
                               "text parts", i);
    json_array_foreach(c, k, part) {
        const json_t *t = json_object_get(part, "type"), *x = json_object_get(part, "text");
        if (!json_is_string(t) || strcmp(json_string_value(t), "text") || !json_is_string(x))
            return BAD("messages", "'messages[%zu].content[%zu]': only text parts "
                                   "({\"type\": \"text\", \"text\": ...}) are supported",
                       i, k);
        total += json_string_length(x);
    }
    if (!(*out = malloc(total + 1)))
        return nomem(err);
    json_array_foreach(c, k, part) {
        const json_t *x = json_object_get(part, "text");
        memcpy(*out + at, json_string_value(x), json_string_length(x));
        at += json_string_length(x);
    }
    (*out)[at] = 0;
    return 0;
}

static int parse_messages(const json_t *o, srv_request *r, srv_error *err)
{
    const json_t *ms = json_object_get(o, "messages"), *m;
    size_t i;

    if (!json_is_array(ms))
        return BAD("messages", "'messages' must be an array of messages");
    if (json_array_size(ms) == 0)
        return BAD("messages", "'messages' is empty");
    if (!(r->messages = calloc(json_array_size(ms), sizeof *r->messages)))
        return nomem(err);
    json_array_foreach(ms, i, m) {
        const json_t *role = json_object_get(m, "role");
        const char *rs;
        if (!json_is_object(m))
            return BAD("messages", "'messages[%zu]' must be an object", i);
        if (!json_is_string(role))
            return BAD("messages", "'messages[%zu].role' must be a string", i);
        rs = json_string_value(role);
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") &&
            strcmp(rs, "developer"))
            return BAD("messages", "'messages[%zu].role' '%.32s' is not supported "
                                   "(system, developer, user, assistant)", i, rs);
        if (json_object_get(m, "tool_calls") && !json_is_null(json_object_get(m, "tool_calls")))
            return BAD("messages", "'messages[%zu].tool_calls' is not supported", i);
        r->n_messages = i + 1;
        if (!(r->messages[i].role = dupn(rs, strlen(rs))))
            return nomem(err);
        if (parse_content(json_object_get(m, "content"), i, &r->messages[i].content, err))
            return -1;
    }
    return 0;
}

static int parse_fields(const json_t *o, srv_kind kind, srv_request *r, srv_error *err)
{
    const json_t *v;
    long long n;
    double d;

    if (refuse_unsupported(o, kind, err))
        return -1;
    v = json_object_get(o, "model");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v))
            return BAD("model", "'model' must be a string");
        if (!(r->model = dupn(json_string_value(v), json_string_length(v))))
            return nomem(err);
    }
    if (kind == SRV_COMPLETION ? parse_prompt(o, r, err) : parse_messages(o, r, err))
        return -1;
    {
        const char *keys[2] = {"max_tokens", "max_completion_tokens"};
        for (int k = 0; k < 2; k++) {
            v = json_object_get(o, keys[k]);
            if (!v || json_is_null(v))
                continue;
            if (get_integer(v, &n) || n < 1 || n > 1000000000)
                return BAD(keys[k], "'%s' must be a positive integer", keys[k]);
            r->max_tokens = (long)n;
        }
    }
    if (opt_range(o, "temperature", 0, 2, &r->temperature, err) ||
        opt_range(o, "top_p", 0, 1, &r->top_p, err) ||
        opt_range(o, "min_p", 0, 1, &r->min_p, err) ||
        opt_range(o, "presence_penalty", -2, 2, &r->presence_penalty, err) ||
        opt_range(o, "frequency_penalty", -2, 2, &r->frequency_penalty, err))
        return -1;
    if (json_object_get(o, "top_p") && !json_is_null(json_object_get(o, "top_p")) &&
        r->top_p <= 0)
        return BAD("top_p", "'top_p' must be in (0, 1]");
    v = json_object_get(o, "top_k");
    if (v && !json_is_null(v)) {
        if (get_integer(v, &n) || n < -1 || n > INT32_MAX)
            return BAD("top_k", "'top_k' must be -1 (off), 0 (off) or a positive integer");
        r->top_k = n > 0 ? (long)n : 0;
    }
    v = json_object_get(o, "seed");
    if (v && !json_is_null(v)) {
        if (get_integer(v, &n))
            return BAD("seed", "'seed' must be an integer");
        r->has_seed = 1;
        r->seed = (uint64_t)n;
    }
    if (parse_stop(o, r, err))
        return -1;
    if (opt_bool(o, "stream", &r->stream, err) ||
        opt_bool(o, "ignore_eos", &r->ignore_eos, err))
        return -1;
    v = json_object_get(o, "stream_options");
    if (v && !json_is_null(v)) {
        if (!json_is_object(v))
            return BAD("stream_options", "'stream_options' must be an object");
        if (opt_bool(v, "include_usage", &r->include_usage, err))
            return -1;
    }
    v = json_object_get(o, "logprobs");
    if (kind == SRV_COMPLETION) {
        if (v && !json_is_null(v)) {
            if (get_integer(v, &n) || n < 0 || n > SRV_MAX_TOP_LOGPROBS)
                return BAD("logprobs", "'logprobs' must be an integer from 0 to %d",
                           SRV_MAX_TOP_LOGPROBS);
            r->logprobs = 1;
            r->top_logprobs = (int)n;
        }
    } else {
        if (opt_bool(o, "logprobs", &r->logprobs, err))
            return -1;
        v = json_object_get(o, "top_logprobs");
        if (v && !json_is_null(v)) {
            if (get_integer(v, &n) || n < 0 || n > SRV_MAX_TOP_LOGPROBS)
                return BAD("top_logprobs", "'top_logprobs' must be an integer from 0 to %d",
                           SRV_MAX_TOP_LOGPROBS);
            if (!r->logprobs && n > 0)
                return BAD("top_logprobs", "'top_logprobs' needs 'logprobs': true");
            r->top_logprobs = (int)n;
        }
    }
    (void)d;
    return 0;
}

int srv_request_parse(srv_kind kind, const char *body, size_t len, srv_request *out,
                      srv_error *err)
{
    json_error_t je;
    json_t *o;
    int rc;

    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->max_tokens = -1;
    out->temperature = 1;
    out->top_p = 1;
    o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!o) {
        srv_error_set(err, 400, "invalid_request_error", NULL,
                      "malformed JSON at line %d, column %d: %s", je.line, je.column, je.text);
        return -1;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        srv_error_set(err, 400, "invalid_request_error", NULL,
                      "the request body must be a JSON object");
        return -1;
    }
    rc = parse_fields(o, kind, out, err);
    json_decref(o);
    if (rc)
        srv_request_free(out);
    return rc;
}
