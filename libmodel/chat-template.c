/* SPDX-License-Identifier: MIT */
/*
 * chat-template.c - public entry points of the chat-template renderer:
 * parse (after jinja2's newline normalisation), load from a model directory
 * (chat_template.jinja, else tokenizer_config.json's chat_template), and
 * render with the variables transformers' apply_chat_template passes.
 */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chat-template-internal.h"

#define MAX_TEMPLATE ((size_t)16 << 20)

void nvfp4_chat_options_init(nvfp4_chat_options *opt)
{
    if (!opt)
        return;
    memset(opt, 0, sizeof *opt);
    opt->now = -1;
    opt->max_output = (size_t)16 << 20;
    opt->max_iterations = 10000000;
    opt->max_memory = (size_t)256 << 20;
    opt->max_depth = 64;
}

void nvfp4_chat_template_free(nvfp4_chat_template *t)
{
    if (!t)
        return;
    nvfp4m_ct_arena_free(&t->arena);
    free(t->src);
    free(t->name);
    free(t->defaults_json);
    free(t);
}

nvfp4_chat_template *nvfp4_chat_template_parse(const char *src, size_t len, const char *name,
                                               nvfp4_error *err)
{
    nvfp4_chat_template *t;
    size_t o = 0;

    if (!src && len)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, name, NULL, -1, "no template text"), NULL;
    if (len > MAX_TEMPLATE) {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, name, NULL, -1,
                        "chat template of %zu bytes (more than %zu)", len, MAX_TEMPLATE);
        return NULL;
    }
    if (!(t = calloc(1, sizeof *t)) || !(t->src = malloc(len + 1)) ||
        (name && !(t->name = strdup(name)))) {
        nvfp4_chat_template_free(t);
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, name, NULL, -1, "out of memory");
        return NULL;
    }
    /* jinja2 turns \r\n and \r into \n and drops one trailing newline
     * (keep_trailing_newline=False) */
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            t->src[o++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            t->src[o++] = src[i];
        }
    }
    if (o && t->src[o - 1] == '\n')
        o--;
    t->src[o] = 0;
    t->len = o;
    if (memchr(t->src, 0, o)) {
        nvfp4m_ct_error(err, NVFP4_ERR_INVALID, name, t->src, strlen(t->src),
                        "NUL byte in the template");
        nvfp4_chat_template_free(t);
        return NULL;
    }
    if (nvfp4m_ct_parse(t, err)) {
        nvfp4_chat_template_free(t);
        return NULL;
    }
    return t;
}

static char *read_file(const char *path, size_t *len, nvfp4_error *err)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, n = 0;

    if (!f) {
        nvfp4_error_set(err, errno == ENOENT ? NVFP4_ERR_NOT_FOUND : NVFP4_ERR_IO, path, NULL,
                        -1, "cannot open: %s", strerror(errno));
        return NULL;
    }
    for (;;) {
        size_t got;
        if (n + 65536 + 1 > cap) {
            char *nb;
            cap = cap ? 2 * cap : 131072;
            if (cap > (size_t)256 << 20 || !(nb = realloc(buf, cap))) {
                nvfp4_error_set(err, NVFP4_ERR_NOMEM, path, NULL, -1,
                                "file too large or out of memory");
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        got = fread(buf + n, 1, 65536, f);
        n += got;
        if (got < 65536)
            break;
    }
    if (ferror(f)) {
        nvfp4_error_set(err, NVFP4_ERR_IO, path, NULL, -1, "read error");
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    *len = n;
    return buf;
}

/* bos/eos/unk/pad tokens of tokenizer_config.json (strings or AddedToken
 * objects {"content": ...}) as a JSON object text */
static char *special_tokens(json_t *cfg)
{
    static const char *const keys[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    json_t *o = json_object();
    char *s;

    if (!o)
        return NULL;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        json_t *v = json_object_get(cfg, keys[i]);
        if (json_is_object(v))
            v = json_object_get(v, "content");
        if (json_is_string(v))
            json_object_set(o, keys[i], v);
    }
    s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

nvfp4_chat_template *nvfp4_chat_template_load(const char *model_dir, nvfp4_error *err)
{
    char path[4096], cfgpath[4096];
    char *text = NULL, *defaults = NULL;
    size_t len = 0;
    const char *name = path;
    json_t *cfg = NULL;
    json_error_t je;
    nvfp4_chat_template *t = NULL;
    struct stat st;

    if (!model_dir)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1, "no model directory"), NULL;
    snprintf(path, sizeof path, "%s/chat_template.jinja", model_dir);
    snprintf(cfgpath, sizeof cfgpath, "%s/tokenizer_config.json", model_dir);
    if (stat(cfgpath, &st) == 0) {
        cfg = json_load_file(cfgpath, 0, &je);
        if (!cfg || !json_is_object(cfg)) {
            nvfp4_error_set(err, NVFP4_ERR_BAD_JSON, cfgpath, NULL, cfg ? -1 : je.position,
                            cfg ? "expected a JSON object" : "line %d: %s", je.line, je.text);
            json_decref(cfg);
            return NULL;
        }
        defaults = special_tokens(cfg);
    }
    if (stat(path, &st) == 0) {
        text = read_file(path, &len, err);
        if (!text)
            goto out;
    } else if (cfg) {
        json_t *ct = json_object_get(cfg, "chat_template");
        name = cfgpath;
        if (json_is_array(ct)) {             /* [{"name": ..., "template": ...}] */
            json_t *e, *pick = NULL;
            size_t i;
            json_array_foreach(ct, i, e) {
                json_t *n = json_object_get(e, "name");
                if (json_is_string(n) && !strcmp(json_string_value(n), "default"))
                    pick = json_object_get(e, "template");
            }
            if (!pick) {
                nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, cfgpath, "chat_template", -1,
                                "a list of templates without one named \"default\"");
                goto out;
            }
            ct = pick;
        }
        if (!ct) {
            nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, cfgpath, "chat_template", -1,
                            "no chat template (and no chat_template.jinja beside it)");
            goto out;
        }
        if (!json_is_string(ct)) {
            nvfp4_error_set(err, NVFP4_ERR_TYPE, cfgpath, "chat_template", -1,
                            "expected a string or a list of {name, template}");
            goto out;
        }
        len = json_string_length(ct);
        if (!(text = malloc(len + 1))) {
            nvfp4_error_set(err, NVFP4_ERR_NOMEM, cfgpath, NULL, -1, "out of memory");
            goto out;
        }
        memcpy(text, json_string_value(ct), len + 1);
    } else {
        nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, model_dir, NULL, -1,
                        "no chat_template.jinja and no tokenizer_config.json");
        goto out;
    }
    t = nvfp4_chat_template_parse(text, len, name, err);
    if (t) {
        t->defaults_json = defaults;
        defaults = NULL;
    }
out:
    free(defaults);
    free(text);
    json_decref(cfg);
    return t;
}

char *nvfp4_chat_template_render(const nvfp4_chat_template *t, const char *messages_json,
                                 const char *extra_json, const nvfp4_chat_options *opt,
                                 size_t *len, nvfp4_error *err)
{
    nvfp4_chat_options dflt;
    json_error_t je;
    json_t *vars, *msgs = NULL, *j;
    char *res = NULL;

    if (len)
        *len = 0;
    if (!t) {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1, "no template");
        return NULL;
    }
    if (!opt) {
        nvfp4_chat_options_init(&dflt);
        opt = &dflt;
    }
    if (!(vars = json_object())) {
        nvfp4_error_set(err, NVFP4_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        return NULL;
    }
    msgs = json_loads(messages_json ? messages_json : "[]", 0, &je);
    if (!msgs || !json_is_array(msgs)) {
        nvfp4_error_set(err, NVFP4_ERR_BAD_JSON, NULL, "messages", msgs ? -1 : je.position,
                        msgs ? "expected a JSON array of messages" : "line %d: %s", je.line,
                        je.text);
        goto out;
    }
    /* what apply_chat_template passes: messages, tools=None, documents=None,
     * add_generation_prompt, the special tokens, then the caller's kwargs */
    json_object_set(vars, "messages", msgs);
    json_object_set_new(vars, "tools", json_null());
    json_object_set_new(vars, "documents", json_null());
    json_object_set_new(vars, "add_generation_prompt", json_false());
    if (t->defaults_json && (j = json_loads(t->defaults_json, 0, NULL))) {
        json_object_update(vars, j);
        json_decref(j);
    }
    if (extra_json) {
        j = json_loads(extra_json, 0, &je);
        if (!j || !json_is_object(j)) {
            nvfp4_error_set(err, NVFP4_ERR_BAD_JSON, NULL, "extra", j ? -1 : je.position,
                            j ? "expected a JSON object of variables" : "line %d: %s", je.line,
                            je.text);
            json_decref(j);
            goto out;
        }
        json_object_update(vars, j);
        json_decref(j);
    }
    res = nvfp4m_ct_render(t, vars, opt, len, err);
out:
    json_decref(msgs);
    json_decref(vars);
    return res;
}
