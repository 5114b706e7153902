/* SPDX-License-Identifier: MIT */
/*
 * Chat-template tests (libmodel/chat-template*.c).  The reference is jinja2
 * itself: tests/data/templates/manifest.json lists templates (SmolLM2's from
 * its GGUF, and templates written to cover the constructs of the Llama 3,
 * Qwen 2.5/3, Mistral, DeepSeek-V3, Gemma 3 and Phi-3 templates), message
 * lists and the text jinja2 3.1.6 renders in transformers' environment
 * (scripts/fixtures/gen_templates.py); every case must match byte for byte.
 * Its error list gives templates we must reject, with the status and the
 * message parts (the template line) expected.
 */
#include "config.h"

#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nvfp4/model.h>

#include "testutil.h"

#define MANIFEST "templates/manifest.json"

static void assert_contains(const char *text, const char *want)
{
    ck_assert_msg(strstr(text, want) != NULL, "message \"%s\" lacks \"%s\"", text, want);
}

static nvfp4_status status_of(const char *name)
{
    if (!strcmp(name, "UNSUPPORTED"))
        return NVFP4_ERR_UNSUPPORTED;
    if (!strcmp(name, "INVALID"))
        return NVFP4_ERR_INVALID;
    return NVFP4_STATUS_COUNT;
}

/* a fixture file as a NUL-terminated string */
static char *load_text(const char *rel, size_t *len)
{
    size_t n;
    char *p = tload_file(rel, &n);
    p[n] = 0;
    if (len)
        *len = n;
    return p;
}

/* a manifest path (relative to tests/data/templates) */
static char *trel(const char *rel)
{
    static char buf[4][1024];
    static int slot;
    char *b = buf[slot++ & 3];
    snprintf(b, 1024, "templates/%s", rel);
    return b;
}

static nvfp4_chat_template *parse_file(const char *rel, nvfp4_error *err)
{
    size_t len;
    char *src = load_text(trel(rel), &len);
    nvfp4_chat_template *t = nvfp4_chat_template_parse(src, len, trel(rel), err);
    free(src);
    return t;
}

/* render case I of the manifest; returns the text or NULL with *err */
static char *render_case(json_t *c, int64_t now, nvfp4_error *err, size_t *len)
{
    nvfp4_chat_options opt;
    nvfp4_chat_template *t = parse_file(json_string_value(json_object_get(c, "template")), err);
    char *msgs, *vars, *out = NULL;

    if (!t)
        return NULL;
    nvfp4_chat_options_init(&opt);
    opt.now = now;
    msgs = load_text(trel(json_string_value(json_object_get(c, "messages"))), NULL);
    vars = json_dumps(json_object_get(c, "vars"), JSON_COMPACT);
    out = nvfp4_chat_template_render(t, msgs, vars, &opt, len, err);
    free(msgs);
    free(vars);
    nvfp4_chat_template_free(t);
    return out;
}

START_TEST(test_manifest_cases)
{
    json_t *m = tload_json(MANIFEST), *cases = json_object_get(m, "cases"), *c;
    int64_t now = json_integer_value(json_object_get(m, "now"));
    size_t i, bad = 0, ok = 0;

    ck_assert_uint_ge(json_array_size(cases), 80);
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        json_t *experr = json_object_get(c, "error");
        nvfp4_error err;
        size_t len = 0, elen;
        char *out = render_case(c, now, &err, &len);

        if (experr) {
            /* raise_exception: the message is jinja2's TemplateError text */
            if (out || err.status != NVFP4_ERR_INVALID || strcmp(err.key, "raise_exception") ||
                strcmp(err.text, json_string_value(experr))) {
                fprintf(stderr, "%s: expected raise_exception(\"%s\"), got %s\n", name,
                        json_string_value(experr), out ? "a text" : err.text);
                bad++;
            } else {
                ok++;
            }
            free(out);
            continue;
        }
        if (!out) {
            fprintf(stderr, "%s: %s\n", name, err.text);
            bad++;
            continue;
        }
        char *exp = load_text(trel(json_string_value(json_object_get(c, "expected"))), &elen);
        if (len != elen || memcmp(out, exp, len)) {
            size_t k = 0;
            while (k < len && k < elen && out[k] == exp[k])
                k++;
            fprintf(stderr, "%s: differs from jinja2 at byte %zu (lengths %zu vs %zu)\n"
                    "  ours:   \"%.60s\"\n  jinja2: \"%.60s\"\n", name, k, len, elen,
                    out + k, exp + k);
            bad++;
        } else {
            ok++;
        }
        free(exp);
        free(out);
    }
    ck_assert_msg(bad == 0, "%zu of %zu cases differ from jinja2", bad, bad + ok);
    json_decref(m);
}
END_TEST

START_TEST(test_manifest_errors)
{
    json_t *m = tload_json(MANIFEST), *errors = json_object_get(m, "errors"), *e;
    size_t i;

    ck_assert_uint_ge(json_array_size(errors), 20);
    json_array_foreach(errors, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        json_t *want = json_object_get(e, "contains"), *w;
        nvfp4_error err;
        nvfp4_chat_template *t;
        char *out = NULL;
        size_t k;

        memset(&err, 0, sizeof err);
        t = parse_file(json_string_value(json_object_get(e, "template")), &err);
        if (t) {
            out = nvfp4_chat_template_render(t, "[{\"role\": \"user\", \"content\": \"Hello!\"}]",
                                             NULL, NULL, NULL, &err);
            nvfp4_chat_template_free(t);
        }
        ck_assert_msg(out == NULL, "%s: rendered instead of failing", name);
        ck_assert_msg(err.status == status_of(json_string_value(json_object_get(e, "status"))),
                      "%s: status %s (%s)", name, nvfp4_strerror(err.status), err.text);
        json_array_foreach(want, k, w)
            assert_contains(err.text, json_string_value(w));
        if (strcmp(name, "raise") != 0)
            assert_contains(err.text, "templates/errors/");
    }
    json_decref(m);
}
END_TEST

/* the options bound what they say, not only at their defaults */
START_TEST(test_options)
{
    nvfp4_chat_options opt;
    nvfp4_error err;
    const char *src = "{% for m in messages %}{{ m.content }}{% endfor %}";
    const char *msgs = "[{\"role\":\"user\",\"content\":\"0123456789\"},"
                       "{\"role\":\"user\",\"content\":\"abc\"}]";
    nvfp4_chat_template *t = nvfp4_chat_template_parse(src, strlen(src), NULL, &err);
    char *out;
    size_t len;

    ck_assert_ptr_nonnull(t);
    nvfp4_chat_options_init(&opt);
    out = nvfp4_chat_template_render(t, msgs, NULL, &opt, &len, &err);
    ck_assert_ptr_nonnull(out);
    ck_assert_str_eq(out, "0123456789abc");
    ck_assert_uint_eq(len, 13);
    free(out);
    opt.max_output = 12;
    ck_assert_ptr_null(nvfp4_chat_template_render(t, msgs, NULL, &opt, NULL, &err));
    assert_contains(err.text, "exceeds 12 bytes");
    nvfp4_chat_options_init(&opt);
    opt.max_iterations = 1;
    ck_assert_ptr_null(nvfp4_chat_template_render(t, msgs, NULL, &opt, NULL, &err));
    assert_contains(err.text, "more than 1 loop iterations");
    /* bad inputs name what was wrong */
    ck_assert_ptr_null(nvfp4_chat_template_render(t, "{\"role\": 1}", NULL, NULL, NULL, &err));
    ck_assert_int_eq(err.status, NVFP4_ERR_BAD_JSON);
    assert_contains(err.text, "messages");
    ck_assert_ptr_null(nvfp4_chat_template_render(t, "[]", "[1]", NULL, NULL, &err));
    ck_assert_int_eq(err.status, NVFP4_ERR_BAD_JSON);
    assert_contains(err.text, "extra");
    ck_assert_ptr_null(nvfp4_chat_template_render(t, "[", NULL, NULL, NULL, &err));
    ck_assert_int_eq(err.status, NVFP4_ERR_BAD_JSON);
    nvfp4_chat_template_free(t);
    nvfp4_chat_template_free(NULL);
}
END_TEST

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* tokenizer_config.json's chat_template (string and list forms), its special
 * tokens as defaults, chat_template.jinja before it */
START_TEST(test_load)
{
    char dir[] = "/tmp/nvfp4-tpl-XXXXXX", p1[256], p2[256];
    nvfp4_chat_template *t;
    nvfp4_error err;
    char *out;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(p1, sizeof p1, "%s/tokenizer_config.json", dir);
    snprintf(p2, sizeof p2, "%s/chat_template.jinja", dir);
    ck_assert_ptr_null(nvfp4_chat_template_load(dir, &err));
    ck_assert_int_eq(err.status, NVFP4_ERR_NOT_FOUND);

    write_file(p1,
               "{\"bos_token\": {\"content\": \"<s>\", \"lstrip\": false}, \"eos_token\": \"</s>\","
               " \"chat_template\": \"{{ bos_token }}{% for m in messages %}[{{ m.role }}]"
               "{% endfor %}{{ eos_token }}{{ add_generation_prompt }}\"}");
    t = nvfp4_chat_template_load(dir, &err);
    ck_assert_msg(t != NULL, "%s", err.text);
    out = nvfp4_chat_template_render(t, "[{\"role\":\"user\",\"content\":\"x\"}]", NULL, NULL,
                                     NULL, &err);
    ck_assert_str_eq(out, "<s>[user]</s>False");
    free(out);
    out = nvfp4_chat_template_render(
        t, "[]", "{\"eos_token\": \"E\", \"add_generation_prompt\": true}", NULL, NULL, &err);
    ck_assert_str_eq(out, "<s>ETrue");
    free(out);
    nvfp4_chat_template_free(t);

    write_file(p1, "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"},"
                   " {\"name\": \"default\", \"template\": \"D{{ messages | length }}\"}]}");
    t = nvfp4_chat_template_load(dir, &err);
    ck_assert_ptr_nonnull(t);
    out = nvfp4_chat_template_render(t, "[{}, {}]", NULL, NULL, NULL, &err);
    ck_assert_str_eq(out, "D2");
    free(out);
    nvfp4_chat_template_free(t);

    write_file(p1, "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}]}");
    ck_assert_ptr_null(nvfp4_chat_template_load(dir, &err));
    assert_contains(err.text, "\"default\"");
    write_file(p1, "{\"chat_template\": 7}");
    ck_assert_ptr_null(nvfp4_chat_template_load(dir, &err));
    ck_assert_int_eq(err.status, NVFP4_ERR_TYPE);
    assert_contains(err.text, "chat_template");
    write_file(p1, "{\"chat_template\": ");
    ck_assert_ptr_null(nvfp4_chat_template_load(dir, &err));
    ck_assert_int_eq(err.status, NVFP4_ERR_BAD_JSON);
    assert_contains(err.text, "tokenizer_config.json");

    write_file(p1, "{\"eos_token\": \"</s>\", \"chat_template\": \"unused\"}");
    write_file(p2, "J{{ eos_token }}\n{% if x %}\n");
    ck_assert_ptr_null(nvfp4_chat_template_load(dir, &err));
    assert_contains(err.text, "chat_template.jinja");
    assert_contains(err.text, "line 2");
    write_file(p2, "J{{ eos_token }}\n");
    t = nvfp4_chat_template_load(dir, &err);
    ck_assert_ptr_nonnull(t);
    out = nvfp4_chat_template_render(t, "[]", NULL, NULL, NULL, &err);
    ck_assert_str_eq(out, "J</s>");          /* and the trailing newline dropped, as jinja2 */
    free(out);
    nvfp4_chat_template_free(t);
    unlink(p1);
    unlink(p2);
    rmdir(dir);
}
END_TEST

/* one parsed template rendered by several threads at once */
typedef struct {
    const nvfp4_chat_template *t;
    const char *msgs, *vars, *expect;
    size_t elen;
    int64_t now;
    int ok;
} job;

static void *worker(void *arg)
{
    job *j = arg;
    nvfp4_chat_options opt;
    nvfp4_error err;

    nvfp4_chat_options_init(&opt);
    opt.now = j->now;
    j->ok = 1;
    for (int r = 0; r < 50; r++) {
        size_t len;
        char *out = nvfp4_chat_template_render(j->t, j->msgs, j->vars, &opt, &len, &err);
        if (!out || len != j->elen || memcmp(out, j->expect, len))
            j->ok = 0;
        free(out);
    }
    return NULL;
}

START_TEST(test_threads)
{
    json_t *m = tload_json(MANIFEST), *cases = json_object_get(m, "cases"), *c, *pick = NULL;
    size_t i, elen;
    nvfp4_error err;
    pthread_t th[4];
    job jobs[4];
    nvfp4_chat_template *t;
    char *msgs, *vars, *exp;

    json_array_foreach(cases, i, c)
        if (!strcmp(json_string_value(json_object_get(c, "name")), "constructs-multiturn-gen"))
            pick = c;
    ck_assert_ptr_nonnull(pick);
    t = parse_file(json_string_value(json_object_get(pick, "template")), &err);
    ck_assert_ptr_nonnull(t);
    msgs = load_text(trel(json_string_value(json_object_get(pick, "messages"))), NULL);
    vars = json_dumps(json_object_get(pick, "vars"), JSON_COMPACT);
    exp = load_text(trel(json_string_value(json_object_get(pick, "expected"))), &elen);
    for (int k = 0; k < 4; k++) {
        jobs[k] = (job){t, msgs, vars, exp, elen, json_integer_value(json_object_get(m, "now")), 0};
        ck_assert_int_eq(pthread_create(&th[k], NULL, worker, &jobs[k]), 0);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        ck_assert_msg(jobs[k].ok, "thread %d rendered something else", k);
    }
    free(msgs);
    free(vars);
    free(exp);
    nvfp4_chat_template_free(t);
    json_decref(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("template");
    TCase *tc = tcase_create("jinja2");
    SRunner *sr;
    int nf;

    tcase_add_test(tc, test_manifest_cases);
    tcase_add_test(tc, test_manifest_errors);
    tcase_add_test(tc, test_options);
    tcase_add_test(tc, test_load);
    tcase_add_test(tc, test_threads);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
