/* SPDX-License-Identifier: MIT */
/* The HTTP side of nvfp4 serve (libmicrohttpd, a thread per connection):
 * routes, authentication, body limits, OpenAI response objects and
 * server-sent event streams.  Generation itself is the scheduler's. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "../cli.h"
#include "serve.h"

enum { R_COMPLETIONS, R_CHAT, R_MODELS, R_TOKENIZE, R_DETOKENIZE, R_OTHER, R_HEALTH,
       R_METRICS, R_NOTFOUND };

typedef struct {
    srv_server *srv;
    int route;
    char *body;
    size_t len, cap;
    int too_large;
    size_t discarded;
} conn_ctx;

static uint64_t id_counter;

/* ---- JSON helpers ---------------------------------------------------------- */

/* BYTES as a JSON string: invalid UTF-8 (a token may be a piece of a
 * character) becomes U+FFFD, one for each maximal subpart of an ill-formed
 * sequence (Unicode's recommended practice, as Rust's from_utf8_lossy in
 * the tokenizers library and Python's "replace" do). */
static json_t *json_bytes(const char *s, size_t n)
{
    char *o = malloc(n * 3 + 1);
    size_t k = 0, i = 0;
    json_t *j;

    if (!o)
        return NULL;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                      : c >= 0xF0 && c <= 0xF4 ? 4 : 1;
        size_t got = 1;
        if (c >= 0x80 && need == 1) {           /* not a lead byte */
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i++;
            continue;
        }
        while (got < need && i + got < n) {
            unsigned char d = (unsigned char)s[i + got];
            unsigned char lo = 0x80, hi = 0xBF;
            if (got == 1) {
                if (c == 0xE0) lo = 0xA0;
                else if (c == 0xED) hi = 0x9F;
                else if (c == 0xF0) lo = 0x90;
                else if (c == 0xF4) hi = 0x8F;
            }
            if (d < lo || d > hi)
                break;
            got++;
        }
        if (got == need) {
            memcpy(o + k, s + i, got);
            k += got;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
        }
        i += got;
    }
    j = json_stringn(o, k);
    free(o);
    return j;
}

static json_t *error_object(const srv_error *e)
{
    return json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", e->message, "type",
                     e->type ? e->type : "invalid_request_error", "param",
                     e->param[0] ? json_string(e->param) : json_null(), "code",
                     e->status == 404 && !strcmp(e->param, "model")
                         ? json_string("model_not_found") : json_null());
}

static void count_response(srv_server *srv, int status)
{
    pthread_mutex_lock(&srv->met.lock);
    if (status >= 100 && status < 600)
        srv->met.responses_by_class[status / 100]++;
    pthread_mutex_unlock(&srv->met.lock);
}

static enum MHD_Result send_text(srv_server *srv, struct MHD_Connection *c, int status,
                                 const char *type, char *text)
{
    struct MHD_Response *r;
    enum MHD_Result ok;

    if (!text)
        return MHD_NO;
    r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    count_response(srv, status);
    return ok;
}

static enum MHD_Result send_json(srv_server *srv, struct MHD_Connection *c, int status,
                                 json_t *j)
{
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return send_text(srv, c, status, "application/json", text);
}

static enum MHD_Result send_error(srv_server *srv, struct MHD_Connection *c,
                                  const srv_error *e)
{
    return send_json(srv, c, e->status, error_object(e));
}

static enum MHD_Result send_errorf(srv_server *srv, struct MHD_Connection *c, int status,
                                   const char *type, const char *param, const char *msg)
{
    srv_error e;
    srv_error_set(&e, status, type, param, "%s", msg);
    return send_error(srv, c, &e);
}

/* ---- simple routes ------------------------------------------------------- */

static enum MHD_Result route_models(srv_server *srv, struct MHD_Connection *c)
{
    return send_json(srv, c, 200,
                     json_pack("{s:s,s:[{s:s,s:s,s:I,s:s,s:i}]}", "object", "list", "data",
                               "id", srv->model_name, "object", "model", "created",
                               (json_int_t)srv->created, "owned_by", "nvfp4", "max_model_len",
                               srv->max_ctx));
}

static int encode(srv_server *srv, const char *text, size_t len, int32_t **ids, size_t *n,
                  srv_error *e)
{
    nvfp4_error err;
    nvfp4_status st;

    pthread_mutex_lock(&srv->tok_lock);
    st = nvfp4_tokenizer_encode(srv->tok, text, len, ids, n, &err);
    pthread_mutex_unlock(&srv->tok_lock);
    if (st) {
        srv_error_set(e, 400, "invalid_request_error", NULL, "cannot tokenize: %s",
                      err.text[0] ? err.text : nvfp4_strerror(st));
        return -1;
    }
    return 0;
}

/* The chat prompt: the model's chat template (add_generation_prompt true),
 * or without one ChatML turns ("<|im_start|>role\ncontent<|im_end|>\n")
 * and an open assistant turn. */
static char *render_chat(srv_server *srv, const srv_request *r, size_t *len, srv_error *e)
{
    size_t n = 32, at = 0;
    char *s;

    if (srv->chat_error[0]) {
        srv_error_set(e, 500, "server_error", NULL, "%s", srv->chat_error);
        return NULL;
    }
    if (srv->chat) {
        json_t *ms = json_array();
        char *mj;
        nvfp4_error err;
        for (size_t i = 0; i < r->n_messages; i++)
            json_array_append_new(ms, json_pack("{s:s,s:s}", "role", r->messages[i].role,
                                                "content", r->messages[i].content));
        mj = json_dumps(ms, JSON_COMPACT);
        json_decref(ms);
        if (!mj) {
            srv_error_set(e, 500, "server_error", NULL, "out of memory");
            return NULL;
        }
        s = nvfp4_chat_template_render(srv->chat, mj, "{\"add_generation_prompt\": true}",
                                       NULL, len, &err);
        free(mj);
        if (!s)
            srv_error_set(e, 400, "invalid_request_error", "messages",
                          "the chat template refused the messages: %.250s", err.text);
        return s;
    }
    for (size_t i = 0; i < r->n_messages; i++)
        n += strlen(r->messages[i].role) + strlen(r->messages[i].content) + 32;
    if (!(s = malloc(n))) {
        srv_error_set(e, 500, "server_error", NULL, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < r->n_messages; i++)
        at += (size_t)sprintf(s + at, "<|im_start|>%s\n%s<|im_end|>\n",
                              !strcmp(r->messages[i].role, "developer") ? "system"
                                                                        : r->messages[i].role,
                              r->messages[i].content);
    at += (size_t)sprintf(s + at, "<|im_start|>assistant\n");
    *len = at;
    return s;
}

static enum MHD_Result route_tokenize(srv_server *srv, struct MHD_Connection *c,
                                      const conn_ctx *cx)
{
    json_error_t je;
    json_t *o = json_loadb(cx->body ? cx->body : "", cx->len, JSON_REJECT_DUPLICATES, &je), *p,
           *arr;
    int32_t *ids = NULL;
    size_t n = 0;
    srv_error e;
    char *text = NULL;
    size_t tlen = 0;

    if (!o || !json_is_object(o)) {
        json_decref(o);
        return send_errorf(srv, c, 400, "invalid_request_error", NULL,
                           "the body must be a JSON object with 'prompt' or 'messages'");
    }
    p = json_object_get(o, "prompt");
    if (json_is_string(p)) {
        if (encode(srv, json_string_value(p), json_string_length(p), &ids, &n, &e))
            goto fail;
    } else if (json_object_get(o, "messages")) {
        srv_request r;
        char *body = json_dumps(o, JSON_COMPACT);
        if (!body || srv_request_parse(SRV_CHAT, body, strlen(body), &r, &e)) {
            free(body);
            if (!body)
                srv_error_set(&e, 500, "server_error", NULL, "out of memory");
            goto fail;
        }
        free(body);
        text = render_chat(srv, &r, &tlen, &e);
        srv_request_free(&r);
        if (!text || encode(srv, text, tlen, &ids, &n, &e))
            goto fail;
    } else {
        srv_error_set(&e, 400, "invalid_request_error", "prompt",
                      "'prompt' must be a string (or give 'messages')");
        goto fail;
    }
    arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_integer(ids[i]));
    free(ids);
    free(text);
    json_decref(o);
    return send_json(srv, c, 200,
                     json_pack("{s:o,s:I,s:i}", "tokens", arr, "count", (json_int_t)n,
                               "max_model_len", srv->max_ctx));
fail:
    free(ids);
    free(text);
    json_decref(o);
    return send_error(srv, c, &e);
}

static enum MHD_Result route_detokenize(srv_server *srv, struct MHD_Connection *c,
                                        const conn_ctx *cx)
{
    json_error_t je;
    json_t *o = json_loadb(cx->body ? cx->body : "", cx->len, JSON_REJECT_DUPLICATES, &je), *a,
           *v;
    int32_t *ids;
    size_t i;
    char *text;
    nvfp4_error err;
    json_t *res;

    if (!o || !json_is_object(o) || !json_is_array(a = json_object_get(o, "tokens"))) {
        json_decref(o);
        return send_errorf(srv, c, 400, "invalid_request_error", "tokens",
                           "the body must be a JSON object with 'tokens', an array of ids");
    }
    ids = malloc((json_array_size(a) + 1) * sizeof *ids);
    if (!ids) {
        json_decref(o);
        return send_errorf(srv, c, 500, "server_error", NULL, "out of memory");
    }
    json_array_foreach(a, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= (json_int_t)srv->vocab) {
            char msg[128];
            snprintf(msg, sizeof msg, "'tokens[%zu]' must be a token id from 0 to %zu", i,
                     srv->vocab - 1);
            free(ids);
            json_decref(o);
            return send_errorf(srv, c, 400, "invalid_request_error", "tokens", msg);
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    text = nvfp4_tokenizer_decode(srv->tok, ids, json_array_size(a), 0, &err);
    free(ids);
    json_decref(o);
    if (!text)
        return send_errorf(srv, c, 400, "invalid_request_error", "tokens", err.text);
    res = json_object();
    json_object_set_new(res, "prompt", json_bytes(text, strlen(text)));
    free(text);
    return send_json(srv, c, 200, res);
}

/* ---- generation ---------------------------------------------------------- */

static void make_id(char *out, size_t n, const char *prefix)
{
    uint64_t k = __atomic_add_fetch(&id_counter, 1, __ATOMIC_RELAXED);
    snprintf(out, n, "%s-%016llx", prefix,
             (unsigned long long)cli_splitmix64(k ^ (uint64_t)time(NULL) << 20));
}

static json_t *token_string(srv_server *srv, int32_t id)
{
    size_t len = 0;
    const char *b = nvfp4_tokenizer_token_bytes(srv->tok, id, &len);
    return json_bytes(b ? b : "", b ? len : 0);
}

static json_t *token_byte_list(srv_server *srv, int32_t id)
{
    size_t len = 0;
    const char *b = nvfp4_tokenizer_token_bytes(srv->tok, id, &len);
    json_t *a = json_array();
    for (size_t i = 0; b && i < len; i++)
        json_array_append_new(a, json_integer((unsigned char)b[i]));
    return a;
}

/* Completions' logprobs object over tokens [from, to). */
static json_t *completion_logprobs(srv_server *srv, const srv_job *j, size_t from, size_t to)
{
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(),
           *offs = json_array();

    for (size_t i = from; i < to; i++) {
        const srv_token *t = &j->toks[i];
        json_t *top;
        if (t->id < 0)
            continue;
        json_array_append_new(toks, token_string(srv, t->id));
        json_array_append_new(lps, json_real(t->logprob));
        json_array_append_new(offs, json_integer((json_int_t)t->text_off));
        top = json_object();
        for (int k = 0; k < t->n_top; k++) {
            json_t *s = token_string(srv, t->top[k].id);
            if (s && !json_object_get(top, json_string_value(s)))
                json_object_set_new(top, json_string_value(s), json_real(t->top[k].logprob));
            json_decref(s);
        }
        json_array_append_new(tops, top);
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", offs);
}

static json_t *chat_logprobs(srv_server *srv, const srv_job *j, size_t from, size_t to)
{
    json_t *content = json_array();

    for (size_t i = from; i < to; i++) {
        const srv_token *t = &j->toks[i];
        json_t *top = json_array();
        if (t->id < 0) {
            json_decref(top);
            continue;
        }
        for (int k = 0; k < t->n_top; k++)
            json_array_append_new(top, json_pack("{s:o,s:f,s:o}", "token",
                                                 token_string(srv, t->top[k].id), "logprob",
                                                 (double)t->top[k].logprob, "bytes",
                                                 token_byte_list(srv, t->top[k].id)));
        json_array_append_new(content,
                              json_pack("{s:o,s:f,s:o,s:o}", "token", token_string(srv, t->id),
                                        "logprob", (double)t->logprob, "bytes",
                                        token_byte_list(srv, t->id), "top_logprobs", top));
    }
    return json_pack("{s:o}", "content", content);
}

static const char *finish_name(srv_finish f)
{
    return f == SRV_FINISH_STOP ? "stop" : f == SRV_FINISH_LENGTH ? "length" : NULL;
}

static json_t *usage_object(const srv_job *j)
{
    return json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)j->n_prompt,
                     "completion_tokens", (json_int_t)j->n_generated, "total_tokens",
                     (json_int_t)(j->n_prompt + j->n_generated));
}

/* A chunk (or the whole response) of J for tokens [from, to) and TEXT. */
static json_t *choice_object(srv_server *srv, const srv_job *j, const char *text, size_t tlen,
                             size_t from, size_t to, const char *finish, int stream, int first)
{
    json_t *ch = json_object();
    json_object_set_new(ch, "index", json_integer(0));
    if (j->req.kind == SRV_COMPLETION) {
        json_object_set_new(ch, "text", json_bytes(text, tlen));
        json_object_set_new(ch, "logprobs", j->req.logprobs && to > from
                                                ? completion_logprobs(srv, j, from, to)
                                                : json_null());
    } else {
        json_t *msg = json_object();
        if (!stream || first)
            json_object_set_new(msg, "role", json_string("assistant"));
        if (!stream || tlen || first)
            json_object_set_new(msg, "content", json_bytes(text, tlen));
        json_object_set_new(ch, stream ? "delta" : "message", msg);
        json_object_set_new(ch, "logprobs", j->req.logprobs && to > from
                                                ? chat_logprobs(srv, j, from, to)
                                                : json_null());
    }
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    return ch;
}

static json_t *envelope(srv_server *srv, const srv_job *j, const char *id, long long created,
                        int stream)
{
    const char *obj = j->req.kind == SRV_COMPLETION ? "text_completion"
                      : stream                      ? "chat.completion.chunk"
                                                    : "chat.completion";
    return json_pack("{s:s,s:s,s:I,s:s}", "id", id, "object", obj, "created",
                     (json_int_t)created, "model", srv->model_name);
}

/* Build the job of a parsed request: tokens, limits, sampler.  0 or -1 with E. */
static int prepare_job(srv_server *srv, srv_job *j, srv_error *e)
{
    size_t room;
    uint64_t seed;

    if (j->req.model && strcmp(j->req.model, srv->model_name)) {
        srv_error_set(e, 404, "invalid_request_error", "model",
                      "the model '%.100s' does not exist; this server has '%.100s'",
                      j->req.model, srv->model_name);
        return -1;
    }
    if (j->req.kind == SRV_CHAT) {
        size_t len;
        char *text = render_chat(srv, &j->req, &len, e);
        int rc;
        if (!text)
            return -1;
        rc = encode(srv, text, len, &j->prompt, &j->n_prompt, e);
        free(text);
        if (rc)
            return -1;
        memcpy(j->extra_eos, srv->chat_end, sizeof j->extra_eos);
    } else if (j->req.prompt_ids) {
        for (size_t i = 0; i < j->req.n_prompt_ids; i++)
            if ((size_t)j->req.prompt_ids[i] >= srv->vocab) {
                srv_error_set(e, 400, "invalid_request_error", "prompt",
                              "'prompt[%zu]' = %d is not a token id (vocabulary of %zu)", i,
                              j->req.prompt_ids[i], srv->vocab);
                return -1;
            }
        j->prompt = j->req.prompt_ids;
        j->n_prompt = j->req.n_prompt_ids;
        j->req.prompt_ids = NULL;
    } else if (encode(srv, j->req.prompt, j->req.prompt_len, &j->prompt, &j->n_prompt, e)) {
        return -1;
    }
    if (j->n_prompt == 0) {
        srv_error_set(e, 400, "invalid_request_error",
                      j->req.kind == SRV_CHAT ? "messages" : "prompt", "the prompt is empty");
        return -1;
    }
    if (j->n_prompt >= (size_t)srv->max_ctx) {
        srv_error_set(e, 400, "invalid_request_error",
                      j->req.kind == SRV_CHAT ? "messages" : "prompt",
                      "the prompt has %zu tokens; this model's context holds %d",
                      j->n_prompt, srv->max_ctx);
        return -1;
    }
    room = (size_t)srv->max_ctx - j->n_prompt;
    if (j->req.max_tokens > 0) {
        if ((size_t)j->req.max_tokens > room) {
            srv_error_set(e, 400, "invalid_request_error", "max_tokens",
                          "max_tokens %ld plus the prompt's %zu tokens exceed this model's "
                          "context of %d tokens", j->req.max_tokens, j->n_prompt, srv->max_ctx);
            return -1;
        }
        j->max_tokens = (size_t)j->req.max_tokens;
    } else {
        j->max_tokens = j->req.kind == SRV_COMPLETION ? (room < 16 ? room : 16) : room;
    }
    j->reserve_blocks = (j->n_prompt + j->max_tokens + NVFP4_KV_BLOCK - 1) / NVFP4_KV_BLOCK;
    seed = j->req.has_seed ? j->req.seed
                           : cli_splitmix64((uint64_t)time(NULL) ^
                                            __atomic_add_fetch(&id_counter, 1, __ATOMIC_RELAXED)
                                                << 32);
    srv_sampler_init(&j->sampler, &j->req, seed);
    j->t_submit = srv_now();
    j->deadline = srv->timeout > 0 ? j->t_submit + srv->timeout : 0;
    return 0;
}

/* Has the client closed its end?  (A peek that reads 0 bytes.) */
static int client_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct pollfd p;
    char b;

    if (!ci)
        return 0;
    p.fd = ci->connect_fd;
    p.events = POLLIN;
    p.revents = 0;
    if (poll(&p, 1, 0) <= 0)
        return 0;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL))
        return 1;
    return recv(p.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static void timed_wait(srv_job *j, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    while (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&j->cond, &j->lock, &ts);
}

static enum MHD_Result respond_whole(srv_server *srv, struct MHD_Connection *c, srv_job *j)
{
    char id[48];
    json_t *res, *choices;
    enum MHD_Result ok;

    pthread_mutex_lock(&j->lock);
    while (!j->done) {
        timed_wait(j, 200);
        if (!j->done && client_gone(c)) {
            j->cancelled = 1;
            pthread_mutex_unlock(&j->lock);
            return MHD_NO;
        }
    }
    pthread_mutex_unlock(&j->lock);
    if (j->error.status)
        return send_error(srv, c, &j->error);
    make_id(id, sizeof id, j->req.kind == SRV_COMPLETION ? "cmpl" : "chatcmpl");
    res = envelope(srv, j, id, (long long)time(NULL), 0);
    choices = json_array();
    json_array_append_new(choices, choice_object(srv, j, j->text ? j->text : "", j->text_len,
                                                 0, j->n_toks, finish_name(j->finish), 0, 0));
    json_object_set_new(res, "choices", choices);
    json_object_set_new(res, "usage", usage_object(j));
    ok = send_json(srv, c, 200, res);
    return ok;
}

/* ---- server-sent events -------------------------------------------------- */

typedef struct {
    srv_server *srv;
    srv_job *job;
    char id[48];
    long long created;
    size_t sent;                 /* token events sent */
    int first;
    int ended;
    char *out;
    size_t out_len, out_off, out_cap;
    double last_write;
} sse_state;

static int sse_put(sse_state *st, const char *s, size_t n)
{
    if (st->out_len + n > st->out_cap) {
        size_t cap = (st->out_len + n) * 2 + 256;
        char *o = realloc(st->out, cap);
        if (!o)
            return -1;
        st->out = o;
        st->out_cap = cap;
    }
    memcpy(st->out + st->out_len, s, n);
    st->out_len += n;
    return 0;
}

static int sse_event(sse_state *st, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    int rc;

    json_decref(j);
    if (!s)
        return -1;
    rc = sse_put(st, "data: ", 6) || sse_put(st, s, strlen(s)) || sse_put(st, "\n\n", 2);
    free(s);
    return rc;
}

static int sse_chunk(sse_state *st, const char *text, size_t tlen, size_t from, size_t to,
                     const char *finish)
{
    json_t *e = envelope(st->srv, st->job, st->id, st->created, 1), *choices = json_array();
    json_array_append_new(choices, choice_object(st->srv, st->job, text, tlen, from, to, finish,
                                                 1, st->first));
    st->first = 0;
    json_object_set_new(e, "choices", choices);
    if (st->job->req.include_usage)
        json_object_set_new(e, "usage", json_null());
    return sse_event(st, e);
}

/* Fill st->out with what the job has produced since the last call.  Under
 * job->lock.  1 when there is nothing (yet). */
static int sse_produce(sse_state *st)
{
    srv_job *j = st->job;

    if (st->first && j->req.kind == SRV_CHAT && sse_chunk(st, "", 0, 0, 0, NULL))
        return -1;
    while (st->sent < j->n_toks) {
        const srv_token *t = &j->toks[st->sent];
        if ((t->text_len || (j->req.logprobs && t->id >= 0)) &&
            sse_chunk(st, j->text + t->text_off, t->text_len, st->sent, st->sent + 1, NULL))
            return -1;
        st->sent++;
    }
    if (j->done) {
        if (j->error.status) {
            if (sse_event(st, error_object(&j->error)))
                return -1;
        } else {
            if (sse_chunk(st, "", 0, 0, 0, finish_name(j->finish)))
                return -1;
            if (j->req.include_usage) {
                json_t *e = envelope(st->srv, j, st->id, st->created, 1);
                json_object_set_new(e, "choices", json_array());
                json_object_set_new(e, "usage", usage_object(j));
                if (sse_event(st, e))
                    return -1;
            }
        }
        if (sse_put(st, "data: [DONE]\n\n", 14))
            return -1;
        st->ended = 1;
    }
    return st->out_len == 0;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    sse_state *st = cls;
    srv_job *j = st->job;
    size_t n;

    (void)pos;
    if (st->out_off == st->out_len) {
        int rc;
        st->out_len = st->out_off = 0;
        if (st->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&j->lock);
        rc = sse_produce(st);
        if (rc == 1) {
            timed_wait(j, 250);
            rc = sse_produce(st);
        }
        pthread_mutex_unlock(&j->lock);
        if (rc < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (rc == 1) {
            /* An SSE comment now and then: a client gone during a long
             * prefill is noticed by the failed write. */
            if (srv_now() - st->last_write < 2)
                return 0;
            if (sse_put(st, ": keep-alive\n\n", 14))
                return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    n = st->out_len - st->out_off;
    if (n > max)
        n = max;
    memcpy(buf, st->out + st->out_off, n);
    st->out_off += n;
    st->last_write = srv_now();
    return (ssize_t)n;
}

/* The response is gone (sent, or the client left): the sequence is freed
 * at the scheduler's next step. */
static void sse_free(void *cls)
{
    sse_state *st = cls;
    srv_job_cancel(st->job);
    srv_job_unref(st->job);
    free(st->out);
    free(st);
}

static enum MHD_Result respond_stream(srv_server *srv, struct MHD_Connection *c, srv_job *j)
{
    sse_state *st = calloc(1, sizeof *st);
    struct MHD_Response *r;
    enum MHD_Result ok;

    if (!st) {
        srv_job_cancel(j);
        srv_job_unref(j);
        return send_errorf(srv, c, 500, "server_error", NULL, "out of memory");
    }
    st->srv = srv;
    st->job = j;
    st->first = 1;
    st->created = (long long)time(NULL);
    st->last_write = srv_now();
    make_id(st->id, sizeof st->id, j->req.kind == SRV_COMPLETION ? "cmpl" : "chatcmpl");
    r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, st, sse_free);
    if (!r) {
        sse_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    ok = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    count_response(srv, 200);
    return ok;
}

static enum MHD_Result route_generate(srv_server *srv, struct MHD_Connection *c,
                                      const conn_ctx *cx)
{
    srv_job *j = srv_job_new();
    srv_error e;
    enum MHD_Result ok;
    int rc;

    if (!j)
        return send_errorf(srv, c, 500, "server_error", NULL, "out of memory");
    if (srv_request_parse(cx->route == R_CHAT ? SRV_CHAT : SRV_COMPLETION,
                          cx->body ? cx->body : "", cx->len, &j->req, &e) ||
        prepare_job(srv, j, &e)) {
        srv_job_unref(j);
        return send_error(srv, c, &e);
    }
    pthread_mutex_lock(&srv->lock);
    if (srv->stopping || !srv->sched) {
        srv_error_set(&j->error, 503, "server_error", NULL, "the server is shutting down");
        rc = -1;
    } else {
        rc = srv_sched_submit(srv->sched, j);
    }
    pthread_mutex_unlock(&srv->lock);
    if (rc) {
        ok = send_error(srv, c, &j->error);
        srv_job_unref(j);
        return ok;
    }
    if (j->req.stream)
        return respond_stream(srv, c, j);    /* the stream owns our reference */
    ok = respond_whole(srv, c, j);
    srv_job_cancel(j);
    srv_job_unref(j);
    return ok;
}

/* ---- dispatch ------------------------------------------------------------ */

static int route_of(const char *url, const char *method, int *allowed)
{
    static const struct {
        const char *path, *method;
        int route;
    } table[] = {
        {"/v1/completions", "POST", R_COMPLETIONS}, {"/v1/chat/completions", "POST", R_CHAT},
        {"/v1/models", "GET", R_MODELS},            {"/tokenize", "POST", R_TOKENIZE},
        {"/detokenize", "POST", R_DETOKENIZE},      {"/health", "GET", R_HEALTH},
        {"/metrics", "GET", R_METRICS},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(url, table[i].path)) {
            *allowed = !strcmp(method, table[i].method) ||
                       (!strcmp(method, "HEAD") && !strcmp(table[i].method, "GET"));
            return table[i].route;
        }
    *allowed = 1;
    return R_NOTFOUND;
}

/* Constant-time comparison of the Bearer token with the key. */
static int authorized(const srv_server *srv, struct MHD_Connection *c)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    size_t kl, hl;
    unsigned diff = 0;

    if (!srv->api_key)
        return 1;
    if (!h || strncasecmp(h, "Bearer ", 7))
        return 0;
    h += 7;
    while (*h == ' ')
        h++;
    kl = strlen(srv->api_key);
    hl = strlen(h);
    diff = kl != hl;
    for (size_t i = 0; i < kl; i++)
        diff |= (unsigned char)srv->api_key[i] ^ (unsigned char)(i < hl ? h[i] : 0);
    return diff == 0;
}

/* 1: serving; 0: loading; -1: stopping. */
static int ready(srv_server *srv)
{
    int r;
    pthread_mutex_lock(&srv->lock);
    r = srv->stopping ? -1 : srv->sched != NULL;
    pthread_mutex_unlock(&srv->lock);
    return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls)
{
    srv_server *srv = cls;
    conn_ctx *cx = *con_cls;
    int allowed;

    (void)version;
    if (!cx) {
        const char *cl;
        if (!(cx = calloc(1, sizeof *cx)))
            return MHD_NO;
        cx->srv = srv;
        cx->route = route_of(url, method, &allowed);
        *con_cls = cx;
        pthread_mutex_lock(&srv->lock);
        srv->in_flight++;
        pthread_mutex_unlock(&srv->lock);
        if (cx->route < R_HEALTH) {
            pthread_mutex_lock(&srv->met.lock);
            srv->met.requests[cx->route]++;
            pthread_mutex_unlock(&srv->met.lock);
        }
        /* Everything that needs no body is answered before reading it. */
        if (cx->route == R_HEALTH) {
            int ok = ready(srv);
            return send_text(srv, c, ok > 0 ? 200 : 503, "application/json",
                             strdup(ok > 0   ? "{\"status\":\"ok\"}"
                                    : ok == 0 ? "{\"status\":\"loading\"}"
                                              : "{\"status\":\"stopping\"}"));
        }
        if (!authorized(srv, c))
            return send_errorf(srv, c, 401, "authentication_error", NULL,
                               "a valid API key is required (Authorization: Bearer KEY)");
        if (cx->route == R_NOTFOUND) {
            char msg[200];
            snprintf(msg, sizeof msg, "no route %.100s %.16s", url, method);
            return send_errorf(srv, c, 404, "not_found_error", NULL, msg);
        }
        if (!allowed)
            return send_errorf(srv, c, 405, "invalid_request_error", NULL,
                               "method not allowed on this route");
        if ((allowed = ready(srv)) <= 0)
            return send_errorf(srv, c, 503, "server_error", NULL,
                               allowed < 0 ? "the server is shutting down"
                                           : "the model is still loading");
        cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > srv->max_body) {
            char msg[128];
            snprintf(msg, sizeof msg, "the request body is larger than %zu bytes",
                     srv->max_body);
            return send_errorf(srv, c, 413, "invalid_request_error", NULL, msg);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (cx->too_large || cx->len + n > srv->max_body) {
            /* libmicrohttpd takes no response before the body has been
             * read: the rest is discarded and answered with 413, but a body
             * that goes on past 16 times the limit loses its connection. */
            cx->too_large = 1;
            cx->discarded += n;
            return cx->discarded / 16 > srv->max_body ? MHD_NO : MHD_YES;
        }
        if (cx->len + n + 1 > cx->cap) {
            size_t cap = (cx->len + n + 1) * 2;
            char *b;
            if (cap > srv->max_body + 1)
                cap = srv->max_body + 1;
            if (!(b = realloc(cx->body, cap)))
                return MHD_NO;
            cx->body = b;
            cx->cap = cap;
        }
        memcpy(cx->body + cx->len, upload, n);
        cx->len += n;
        return MHD_YES;
    }
    if (cx->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", srv->max_body);
        return send_errorf(srv, c, 413, "invalid_request_error", NULL, msg);
    }
    switch (cx->route) {
    case R_MODELS: return route_models(srv, c);
    case R_METRICS: {
        char *text = srv_metrics_render(&srv->met);
        return send_text(srv, c, 200, "text/plain; version=0.0.4", text);
    }
    case R_TOKENIZE: return route_tokenize(srv, c, cx);
    case R_DETOKENIZE: return route_detokenize(srv, c, cx);
    default: return route_generate(srv, c, cx);
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    srv_server *srv = cls;
    conn_ctx *cx = *con_cls;
    (void)c;
    (void)toe;
    if (cx) {
        /* The response has been written out in full (or the request
         * failed): srv_http_drain no longer waits for it. */
        pthread_mutex_lock(&srv->lock);
        if (--srv->in_flight == 0)
            pthread_cond_broadcast(&srv->idle);
        pthread_mutex_unlock(&srv->lock);
        free(cx->body);
        free(cx);
        *con_cls = NULL;
    }
}

int srv_http_start(srv_server *srv, char *msg, size_t msg_len)
{
    struct sockaddr_in6 a6;
    struct sockaddr_in a4;
    struct sockaddr *sa;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ITC;

    memset(&a4, 0, sizeof a4);
    memset(&a6, 0, sizeof a6);
    if (inet_pton(AF_INET, srv->host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)srv->port);
        sa = (struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, srv->host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)srv->port);
        sa = (struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(msg, msg_len, "--host: '%s' is not a numeric IPv4 or IPv6 address", srv->host);
        return -1;
    }
    srv->daemon = MHD_start_daemon(
        flags, (uint16_t)srv->port, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR, sa,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)srv->max_connections, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60,
        MHD_OPTION_END);
    if (!srv->daemon) {
        snprintf(msg, msg_len, "cannot listen on %s port %d: %s", srv->host, srv->port,
                 errno ? strerror(errno) : "libmicrohttpd refused");
        return -1;
    }
    return 0;
}

int srv_http_port(const srv_server *srv)
{
    const union MHD_DaemonInfo *i =
        MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    return i ? (int)i->port : srv->port;
}

void srv_http_quiesce(srv_server *srv)
{
    MHD_socket s = MHD_quiesce_daemon(srv->daemon);
    if (s != MHD_INVALID_SOCKET)
        close(s);
}

/* MHD_stop_daemon shuts every connection's socket down at once, so a
 * response still on its way (a stream's last events and [DONE], written by
 * its connection's thread after the scheduler failed the job at shutdown)
 * would be cut: the connections get to finish what they were answering
 * first. */
int srv_http_drain(srv_server *srv, double seconds)
{
    struct timespec end;
    int n;

    /* the deadline on CLOCK_MONOTONIC, srv->idle's clock (cmd-serve.c) */
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += (time_t)seconds;
    end.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
    if (end.tv_nsec >= 1000000000L) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&srv->lock);
    while (srv->in_flight > 0 &&
           pthread_cond_timedwait(&srv->idle, &srv->lock, &end) != ETIMEDOUT)
        ;
    n = srv->in_flight;
    pthread_mutex_unlock(&srv->lock);
    return n;
}

void srv_http_stop(srv_server *srv)
{
    if (srv->daemon)
        MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
}
