/* SPDX-License-Identifier: MIT */
/*
 * Tokenizer tests (libmodel/tokenizer*.c).  The references are independent
 * of the code under test:
 *  - tests/data/tokenizer: SmolLM2's tokenizer.json and, for a corpus of
 *    texts, the ids, tokens and decoded text that the real `tokenizers`
 *    package gives (scripts/fixtures/gen_tokenizer.py);
 *  - properties of tokenizers' algorithm written out below (an added token
 *    splits the text before pre-tokenization, so ids of texts joined by one
 *    are the joined ids);
 *  - for rejections, variants of the fixture written here: the assertion is
 *    on our error (status, key and message), not on values.
 */
#include "config.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nvfp4/model.h>

#include "testutil.h"

#define TOK_JSON "tokenizer/tokenizer.json"
#define EXPECTED "tokenizer/expected.json"
/* SentencePiece-style BPE (Gemma, Llama 2, Phi-3, Metaspace): two models
 * trained by tokenizers with byte_fallback, one family's pipeline per file
 * (scripts/fixtures/gen_tokenizer_spm.py); the variant checks plus
 * decode_cases, hand-picked token sequences decoded by tokenizers. */
#define SPM "tokenizer/spm"

static void assert_contains(const char *text, const char *want)
{
    ck_assert_msg(strstr(text, want) != NULL, "message \"%s\" lacks \"%s\"", text, want);
}

static nvfp4_tokenizer *load_fixture(void)
{
    nvfp4_error err;
    nvfp4_tokenizer *tok;

    nvfp4_error_clear(&err);
    tok = nvfp4_tokenizer_load(tdata(TOK_JSON), &err);
    ck_assert_msg(tok != NULL, "load: %s", err.text);
    return tok;
}

/* Every id list of the corpus, as the tokenizers package gave them. */
static void expected_ids(const json_t *c, int32_t **ids, size_t *n)
{
    const json_t *arr = json_object_get(c, "ids");
    *n = json_array_size(arr);
    *ids = malloc((*n + 1) * sizeof(int32_t));
    ck_assert_ptr_nonnull(*ids);
    for (size_t i = 0; i < *n; i++)
        (*ids)[i] = (int32_t)json_integer_value(json_array_get(arr, i));
}

START_TEST(test_encode_corpus)
{
    nvfp4_tokenizer *tok = load_fixture();
    json_t *exp = tload_json(EXPECTED);
    const json_t *cases = json_object_get(exp, "cases");
    size_t i;
    json_t *c;

    ck_assert_uint_ge(json_array_size(cases), 20);
    json_array_foreach(cases, i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t len = json_string_length(json_object_get(c, "text")), n, nexp;
        int32_t *ids = NULL, *want;
        nvfp4_error err;

        nvfp4_error_clear(&err);
        ck_assert_int_eq(nvfp4_tokenizer_encode(tok, text, len, &ids, &n, &err), NVFP4_OK);
        expected_ids(c, &want, &nexp);
        ck_assert_msg(n == nexp, "case %zu: %zu ids, tokenizers gives %zu", i, n, nexp);
        for (size_t k = 0; k < n; k++)
            ck_assert_msg(ids[k] == want[k], "case %zu id %zu: %d, tokenizers gives %d", i, k,
                          ids[k], want[k]);
        free(ids);
        free(want);
    }
    json_decref(exp);
    nvfp4_tokenizer_free(tok);
}
END_TEST

START_TEST(test_decode_corpus)
{
    nvfp4_tokenizer *tok = load_fixture();
    json_t *exp = tload_json(EXPECTED);
    const json_t *cases = json_object_get(exp, "cases");
    size_t i;
    json_t *c;

    json_array_foreach(cases, i, c) {
        const json_t *dec = json_object_get(c, "decoded");
        const json_t *text = json_object_get(c, "text");
        int32_t *want;
        size_t nexp;
        nvfp4_error err;
        char *s;

        expected_ids(c, &want, &nexp);
        nvfp4_error_clear(&err);
        s = nvfp4_tokenizer_decode(tok, want, nexp, 0, &err);
        ck_assert_msg(s != NULL, "case %zu: %s", i, err.text);
        /* Tokenizer.decode's text, and with this tokenizer the original. */
        ck_assert_msg(strlen(s) == json_string_length(dec) && !strcmp(s, json_string_value(dec)),
                      "case %zu: decoded \"%s\", tokenizers gives \"%s\"", i, s,
                      json_string_value(dec));
        ck_assert_str_eq(s, json_string_value(text));
        free(s);
        free(want);
    }
    json_decref(exp);
    nvfp4_tokenizer_free(tok);
}
END_TEST

/* token_bytes: the tokens of a byte-level BPE cover the text byte for byte
 * (every corpus text decodes to itself, and none needs byte fallback). */
START_TEST(test_token_bytes)
{
    nvfp4_tokenizer *tok = load_fixture();
    json_t *exp = tload_json(EXPECTED);
    const json_t *cases = json_object_get(exp, "cases");
    size_t i;
    json_t *c;

    json_array_foreach(cases, i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t len = json_string_length(json_object_get(c, "text")), nexp, o = 0;
        int32_t *want;

        expected_ids(c, &want, &nexp);
        for (size_t k = 0; k < nexp; k++) {
            size_t bl = 0;
            const char *b = nvfp4_tokenizer_token_bytes(tok, want[k], &bl);
            ck_assert_ptr_nonnull(b);
            ck_assert_msg(o + bl <= len && !memcmp(text + o, b, bl),
                          "case %zu token %zu (id %d) does not cover the text at byte %zu", i,
                          k, want[k], o);
            o += bl;
        }
        ck_assert_uint_eq(o, len);
        free(want);
    }
    ck_assert_ptr_null(nvfp4_tokenizer_token_bytes(tok, -1, NULL));
    ck_assert_ptr_null(nvfp4_tokenizer_token_bytes(
        tok, (int32_t)json_integer_value(json_object_get(exp, "vocab_size")), NULL));
    json_decref(exp);
    nvfp4_tokenizer_free(tok);
}
END_TEST

START_TEST(test_vocab_and_special)
{
    nvfp4_tokenizer *tok = load_fixture();
    json_t *exp = tload_json(EXPECTED);
    const json_t *added = json_object_get(exp, "added_tokens");
    size_t i;
    json_t *a;

    ck_assert_uint_eq(nvfp4_tokenizer_vocab_size(tok),
                      (size_t)json_integer_value(json_object_get(exp, "vocab_size")));
    ck_assert_uint_ge(json_array_size(added), 1);
    json_array_foreach(added, i, a) {
        const char *content = json_string_value(json_object_get(a, "content"));
        int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
        ck_assert_int_eq(nvfp4_tokenizer_token_id(tok, content), id);
        ck_assert_int_eq(nvfp4_tokenizer_is_special(tok, id),
                         json_is_true(json_object_get(a, "special")));
    }
    ck_assert_int_eq(nvfp4_tokenizer_token_id(tok,
                                              json_string_value(json_object_get(exp, "bos_token"))),
                     json_integer_value(json_object_get(exp, "bos_token_id")));
    /* the second token of the first case ("ell" of "Hello", a merge's
     * result) is not special */
    {
        const json_t *c0 = json_array_get(json_object_get(exp, "cases"), 0);
        int32_t id = (int32_t)json_integer_value(json_array_get(json_object_get(c0, "ids"), 1));

        ck_assert_int_eq(
            nvfp4_tokenizer_token_id(
                tok, json_string_value(json_array_get(json_object_get(c0, "tokens"), 1))),
            id);
        ck_assert_int_eq(nvfp4_tokenizer_is_special(tok, id), 0);
    }
    ck_assert_int_eq(nvfp4_tokenizer_token_id(tok, "no such token, surely"), -1);
    ck_assert_int_eq(nvfp4_tokenizer_is_special(tok, -5), 0);
    json_decref(exp);
    nvfp4_tokenizer_free(tok);
}
END_TEST

/* skip_special drops exactly the special tokens: the fixture's case
 * "text<|im_end|>more text<|endoftext|>" then reads "textmore text". */
START_TEST(test_decode_skip_special)
{
    nvfp4_tokenizer *tok = load_fixture();
    json_t *exp = tload_json(EXPECTED);
    const json_t *cases = json_object_get(exp, "cases");
    int found = 0;
    size_t i;
    json_t *c;

    json_array_foreach(cases, i, c) {
        int32_t *want;
        size_t nexp;
        char *s;
        if (strcmp(json_string_value(json_object_get(c, "text")),
                   "text<|im_end|>more text<|endoftext|>") != 0)
            continue;
        found = 1;
        expected_ids(c, &want, &nexp);
        s = nvfp4_tokenizer_decode(tok, want, nexp, 1, NULL);
        ck_assert_ptr_nonnull(s);
        ck_assert_str_eq(s, "textmore text");
        free(s);
        free(want);
    }
    ck_assert_int_eq(found, 1);
    json_decref(exp);
    nvfp4_tokenizer_free(tok);
}
END_TEST

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ~100 KB: the corpus texts joined by <|endoftext|>, over and over.  The
 * special token is cut out before pre-tokenization, so the ids are the
 * cases' ids joined by its id (0).  The time is printed, not asserted:
 * speed belongs to benchmarks, and this test also runs under valgrind and
 * the sanitizers (a plain -O2 build takes a few milliseconds). */
START_TEST(test_encode_100k)
{
    nvfp4_tokenizer *tok = load_fixture();
    json_t *exp = tload_json(EXPECTED);
    const json_t *cases = json_object_get(exp, "cases");
    const char *sep = "<|endoftext|>";
    int32_t sep_id = nvfp4_tokenizer_token_id(tok, sep);
    size_t cap = 200000, len = 0, nwant = 0, n = 0;
    char *text = malloc(cap);
    int32_t *want = malloc(cap * sizeof(int32_t)), *ids = NULL;
    nvfp4_error err;
    double t0, t1;

    ck_assert_ptr_nonnull(text);
    ck_assert_ptr_nonnull(want);
    ck_assert_int_eq(sep_id, 0);
    while (len < 100000) {
        size_t i;
        json_t *c;
        json_array_foreach(cases, i, c) {
            const json_t *t = json_object_get(c, "text"), *arr = json_object_get(c, "ids");
            size_t tl = json_string_length(t);
            ck_assert_uint_lt(len + tl + strlen(sep), cap);
            memcpy(text + len, json_string_value(t), tl);
            len += tl;
            memcpy(text + len, sep, strlen(sep));
            len += strlen(sep);
            for (size_t k = 0; k < json_array_size(arr); k++)
                want[nwant++] = (int32_t)json_integer_value(json_array_get(arr, k));
            want[nwant++] = sep_id;
        }
    }
    nvfp4_error_clear(&err);
    t0 = now();
    ck_assert_int_eq(nvfp4_tokenizer_encode(tok, text, len, &ids, &n, &err), NVFP4_OK);
    t1 = now();
    fprintf(stderr, "encode: %zu bytes -> %zu ids in %.2f ms\n", len, n, (t1 - t0) * 1e3);
    ck_assert_uint_eq(n, nwant);
    for (size_t k = 0; k < n; k++)
        ck_assert_msg(ids[k] == want[k], "id %zu: %d, expected %d", k, ids[k], want[k]);
    free(ids);
    free(want);
    free(text);
    json_decref(exp);
    nvfp4_tokenizer_free(tok);
}
END_TEST

#ifdef HAVE_ICU
/* With an NFC normalizer (Qwen's), decomposed input is composed before
 * anything else, so the NFD spelling of the fixture's precomposed case must
 * give the ids tokenizers gave for it (unicodedata.normalize agrees: NFC of
 * the string below is the case's text).  Precomposed text is unchanged. */
START_TEST(test_nfc)
{
    static const char nfd[] = "Cafe\xcc\x81 nai\xcc\x88ve re\xcc\x81sume\xcc\x81 "
                              "A\xcc\x8angstro\xcc\x88m fac\xcc\xa7" "ade Sa\xcc\x83o Paulo "
                              "Zu\xcc\x88rich";
    const char *path = "/tmp/test-tokenizer-nfc.json";
    json_t *j = tload_json(TOK_JSON), *exp = tload_json(EXPECTED), *c;
    const json_t *cases = json_object_get(exp, "cases");
    nvfp4_tokenizer *tok, *plain = load_fixture();
    int32_t *want = NULL, *ids, *ids2;
    size_t nexp = 0, n, n2, i;
    nvfp4_error err;

    json_object_set_new(j, "normalizer", json_pack("{ss}", "type", "NFC"));
    ck_assert_int_eq(json_dump_file(j, path, JSON_COMPACT), 0);
    nvfp4_error_clear(&err);
    tok = nvfp4_tokenizer_load(path, &err);
    unlink(path);
    ck_assert_msg(tok != NULL, "%s", err.text);
    json_array_foreach(cases, i, c) {
        if (!strcmp(json_string_value(json_object_get(c, "text")),
                    "Caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9 \xc3\x85ngstr\xc3\xb6m "
                    "fa\xc3\xa7" "ade S\xc3\xa3o Paulo Z\xc3\xbcrich"))
            expected_ids(c, &want, &nexp);
    }
    ck_assert_ptr_nonnull(want);
    ck_assert_int_eq(nvfp4_tokenizer_encode(tok, nfd, strlen(nfd), &ids, &n, &err), NVFP4_OK);
    ck_assert_uint_eq(n, nexp);
    for (size_t k = 0; k < n; k++)
        ck_assert_int_eq(ids[k], want[k]);
    free(ids);
    /* without the normalizer the decomposed spelling tokenizes differently */
    ck_assert_int_eq(nvfp4_tokenizer_encode(plain, nfd, strlen(nfd), &ids2, &n2, &err), NVFP4_OK);
    ck_assert(n2 != nexp || memcmp(ids2, want, n2 * sizeof(int32_t)) != 0);
    free(ids2);
    /* the corpus is NFC already, but for the case that spells an e with a
     * combining accent on purpose: same ids as without the normalizer */
    json_array_foreach(cases, i, c) {
        const json_t *t = json_object_get(c, "text");
        int32_t *w;
        size_t nw;
        if (strstr(json_string_value(t), "(combining acute)"))
            continue;
        expected_ids(c, &w, &nw);
        ck_assert_int_eq(nvfp4_tokenizer_encode(tok, json_string_value(t), json_string_length(t),
                                                &ids, &n, &err), NVFP4_OK);
        ck_assert_uint_eq(n, nw);
        for (size_t k = 0; k < n; k++)
            ck_assert_int_eq(ids[k], w[k]);
        free(ids);
        free(w);
    }
    free(want);
    json_decref(j);
    json_decref(exp);
    nvfp4_tokenizer_free(tok);
    nvfp4_tokenizer_free(plain);
}
END_TEST
#endif

/* ---- nvfp4 tokenize --------------------------------------------------------- */

/* Run the tool through the shell; stdout (and stderr when ERR) into OUT. */
static int run_tool(const char *args, int with_err, char *out, size_t cap)
{
    char cmd[2048];
    size_t n = 0, r;
    FILE *p;
    int st;

    snprintf(cmd, sizeof(cmd), "%s tokenize %s%s", NVFP4_TOOL, args,
             with_err ? " 2>&1" : " 2>/dev/null");
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    while (n + 1 < cap && (r = fread(out + n, 1, cap - n - 1, p)) > 0)
        n += r;
    out[n] = '\0';
    st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(test_cli)
{
    json_t *exp = tload_json(EXPECTED), *c = json_array_get(json_object_get(exp, "cases"), 0);
    json_t *j, *ids;
    char args[1024], out[4096], want[1024];
    size_t k, w = 0;
    json_error_t je;

    /* case 0 is "Hello, world!": ids printed space-separated */
    ck_assert_str_eq(json_string_value(json_object_get(c, "text")), "Hello, world!");
    for (k = 0; k < json_array_size(json_object_get(c, "ids")); k++)
        w += (size_t)snprintf(want + w, sizeof(want) - w, "%s%lld", k ? " " : "",
                              json_integer_value(json_array_get(json_object_get(c, "ids"), k)));
    snprintf(want + w, sizeof(want) - w, "\n");
    snprintf(args, sizeof(args), "'%s' --text 'Hello, world!'", tdata(TOK_JSON));
    ck_assert_int_eq(run_tool(args, 0, out, sizeof(out)), 0);
    ck_assert_str_eq(out, want);

    /* --json, and a model directory in place of the file */
    snprintf(args, sizeof(args), "'%s' --text 'Hello, world!' --json", tdata("tokenizer"));
    ck_assert_int_eq(run_tool(args, 0, out, sizeof(out)), 0);
    j = json_loads(out, 0, &je);
    ck_assert_msg(j != NULL, "not JSON: %s", out);
    ids = json_object_get(j, "ids");
    ck_assert(json_equal(ids, json_object_get(c, "ids")));
    ck_assert_str_eq(json_string_value(json_object_get(j, "decoded")), "Hello, world!");
    json_decref(j);

    /* a SentencePiece-style tokenizer through the same command: Gemma's
     * text 0 of tokenizer/spm ("Hello world") and a refused component */
    {
        json_t *spm = tload_json(SPM "/expected.json"), *v;
        v = json_array_get(json_object_get(spm, "variants"), 0);
        ck_assert_str_eq(json_string_value(json_object_get(v, "name")), "gemma");
        ck_assert_str_eq(json_string_value(json_array_get(json_object_get(spm, "texts"), 0)),
                         "Hello world");
        snprintf(args, sizeof(args), "'%s' --text 'Hello world' --json", tdata(SPM "/gemma.json"));
        ck_assert_int_eq(run_tool(args, 0, out, sizeof(out)), 0);
        j = json_loads(out, 0, &je);
        ck_assert_msg(j != NULL, "not JSON: %s", out);
        ck_assert(json_equal(json_object_get(j, "ids"),
                             json_array_get(json_object_get(v, "ids"), 0)));
        ck_assert_str_eq(json_string_value(json_object_get(j, "decoded")), "Hello world");
        json_decref(j);
        json_decref(spm);
    }

    /* wrong usage exits 2, bad input 1 with the library's message */
    snprintf(args, sizeof(args), "'%s'", tdata(TOK_JSON));
    ck_assert_int_eq(run_tool(args, 1, out, sizeof(out)), 2);
    assert_contains(out, "give exactly one of --text and --file");
    ck_assert_int_eq(run_tool("/nonexistent/tokenizer.json --text x", 1, out, sizeof(out)), 1);
    assert_contains(out, "/nonexistent/tokenizer.json: cannot open");
    json_decref(exp);
}
END_TEST

/* ---- rejections ------------------------------------------------------------ */

static char tmpdir[64];

static void make_tmpdir(void)
{
    strcpy(tmpdir, "/tmp/test-tokenizer-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static const char *tmp_path(const char *name)
{
    static char b[512];
    snprintf(b, sizeof(b), "%s/%s", tmpdir, name);
    return b;
}

/* Write J to a file and load it; the load must fail with STATUS, the key
 * KEY (when given) and a message that contains WANT. */
static void expect_reject(json_t *j, nvfp4_status status, const char *key, const char *want)
{
    const char *p = tmp_path("tokenizer.json");
    nvfp4_error err;
    nvfp4_tokenizer *tok;

    ck_assert_int_eq(json_dump_file(j, p, JSON_COMPACT), 0);
    nvfp4_error_clear(&err);
    tok = nvfp4_tokenizer_load(p, &err);
    ck_assert_msg(tok == NULL, "accepted a tokenizer that should fail with \"%s\"", want);
    ck_assert_msg(err.status == status, "status %d (%s), expected %d; %s", err.status,
                  nvfp4_strerror(err.status), status, err.text);
    if (key)
        ck_assert_str_eq(err.key, key);
    ck_assert_str_eq(err.file, p);
    assert_contains(err.text, want);
    unlink(p);
}

static json_t *fixture_json(void)
{
    return tload_json(TOK_JSON);
}

START_TEST(test_reject_files)
{
    const char *p;
    nvfp4_error err;
    FILE *f;

    make_tmpdir();
    nvfp4_error_clear(&err);
    p = tmp_path("missing.json");
    ck_assert_ptr_null(nvfp4_tokenizer_load(p, &err));
    ck_assert_int_eq(err.status, NVFP4_ERR_NOT_FOUND);
    ck_assert_str_eq(err.file, p);
    assert_contains(err.text, "cannot open");

    p = tmp_path("garbage.json");
    f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"model\": {\"type\": \"BPE\",\n  \"vocab\": {\"a\": 0,,}", f);
    fclose(f);
    nvfp4_error_clear(&err);
    ck_assert_ptr_null(nvfp4_tokenizer_load(p, &err));
    ck_assert_int_eq(err.status, NVFP4_ERR_BAD_JSON);
    assert_contains(err.text, "not valid JSON at line 2");
    unlink(p);

    p = tmp_path("array.json");
    f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs("[1, 2]", f);
    fclose(f);
    nvfp4_error_clear(&err);
    ck_assert_ptr_null(nvfp4_tokenizer_load(p, &err));
    ck_assert_int_eq(err.status, NVFP4_ERR_BAD_JSON);
    assert_contains(err.text, "expected a JSON object, found an array");
    unlink(p);
    rmdir(tmpdir);
}
END_TEST

START_TEST(test_reject_model)
{
    json_t *j;

    make_tmpdir();
    static const char *const others[] = {"WordPiece", "Unigram", "WordLevel"};
    for (int i = 0; i < 3; i++) {
        char want[64];
        j = fixture_json();
        json_object_set_new(json_object_get(j, "model"), "type", json_string(others[i]));
        snprintf(want, sizeof(want), "model type \"%s\" is not supported", others[i]);
        expect_reject(j, NVFP4_ERR_UNSUPPORTED, "model.type", want);
        json_decref(j);
    }

    j = fixture_json();
    json_object_del(json_object_get(j, "model"), "vocab");
    expect_reject(j, NVFP4_ERR_NOT_FOUND, "model.vocab", "no vocab");
    json_decref(j);

    j = fixture_json();
    json_object_set_new(json_object_get(j, "model"), "vocab", json_array());
    expect_reject(j, NVFP4_ERR_TYPE, "model.vocab", "expected an object of token -> id, found an array");
    json_decref(j);

    j = fixture_json();
    json_object_set_new(json_object_get(json_object_get(j, "model"), "vocab"), "zz",
                        json_string("7"));
    expect_reject(j, NVFP4_ERR_TYPE, "model.vocab.zz", "expected an integer token id, found a string");
    json_decref(j);

    j = fixture_json();
    json_object_set_new(json_object_get(json_object_get(j, "model"), "vocab"), "zz",
                        json_integer(-3));
    expect_reject(j, NVFP4_ERR_INVALID, "model.vocab.zz", "token id -3 outside");
    json_decref(j);

    j = fixture_json();
    json_object_del(json_object_get(j, "model"), "merges");
    expect_reject(j, NVFP4_ERR_NOT_FOUND, "model.merges", "no merges");
    json_decref(j);

    j = fixture_json();
    json_object_set_new(json_object_get(j, "model"), "dropout", json_real(0.1));
    expect_reject(j, NVFP4_ERR_UNSUPPORTED, "model.dropout", "dropout");
    json_decref(j);

    j = fixture_json();
    json_object_set_new(json_object_get(j, "model"), "continuing_subword_prefix",
                        json_string("##"));
    expect_reject(j, NVFP4_ERR_UNSUPPORTED, "model.continuing_subword_prefix",
                  "continuing_subword_prefix (WordPiece-style BPE) is not supported");
    json_decref(j);
    rmdir(tmpdir);
}
END_TEST

START_TEST(test_reject_merges)
{
    json_t *j, *m;

    make_tmpdir();
    j = fixture_json();
    m = json_object_get(json_object_get(j, "model"), "merges");
    json_array_set_new(m, 3, json_string("abc"));
    expect_reject(j, NVFP4_ERR_BAD_ENTRY, "model.merges[3]",
                  "expected \"left right\" (one space), found \"abc\"");
    json_decref(j);

    j = fixture_json();
    m = json_object_get(json_object_get(j, "model"), "merges");
    json_array_set_new(m, 0, json_string("a b c"));
    expect_reject(j, NVFP4_ERR_BAD_ENTRY, "model.merges[0]", "found \"a b c\"");
    json_decref(j);

    j = fixture_json();
    m = json_object_get(json_object_get(j, "model"), "merges");
    json_array_set_new(m, 1, json_integer(5));
    expect_reject(j, NVFP4_ERR_BAD_ENTRY, "model.merges[1]",
                  "expected \"left right\" or [left, right], found an integer");
    json_decref(j);

    j = fixture_json();
    m = json_object_get(json_object_get(j, "model"), "merges");
    json_array_set_new(m, 2, json_pack("[s]", "a"));
    expect_reject(j, NVFP4_ERR_BAD_ENTRY, "model.merges[2]", "of other than two strings");
    json_decref(j);

    j = fixture_json();
    m = json_object_get(json_object_get(j, "model"), "merges");
    json_array_set_new(m, 4, json_pack("[ss]", "qqzzqq", "e"));
    expect_reject(j, NVFP4_ERR_NOT_FOUND, "model.merges[4]",
                  "merge token \"qqzzqq\" is not in the vocab");
    json_decref(j);
    rmdir(tmpdir);
}
END_TEST

START_TEST(test_reject_pipeline)
{
    json_t *j;

    make_tmpdir();
    j = fixture_json();
    json_object_set_new(j, "normalizer", json_pack("{ss}", "type", "NFKC"));
    expect_reject(j, NVFP4_ERR_UNSUPPORTED, "normalizer.type",
                  "normalizer \"NFKC\" is not supported (expected NFC, Prepend, Replace or a "
                  "Sequence of them)");
    json_decref(j);
#ifndef HAVE_ICU
    j = fixture_json();
    json_object_set_new(j, "normalizer", json_pack("{ss}", "type", "NFC"));
    expect_reject(j, NVFP4_ERR_UNSUPPORTED, "normalizer.type", "needs ICU");
    json_decref(j);
#endif

    j = fixture_json();
    json_object_set_new(j, "normalizer",
                        json_pack("{ss s[{ss}]}", "type", "Sequence", "normalizers", "type",
                                  "Lowercase"));
    expect_reject(j, NVFP4_ERR_UNSUPPORTED, "normalizer.normalizers[0].type",
                  "normalizer \"Lowercase\" is not supported");
    json_decref(j);

    j = fixture_json();
    json_object_set_new(j, "pre_tokenizer", json_pack("{ss}", "type", "Whitespace"));
    expect_reject(j, NVFP4_ERR_UNSUPPORTED, "pre_tokenizer.type",
                  "pre-tokenizer \"Whitespace\" is not supported (expected ByteLevel, "
                  "Metaspace, Split, Digits or a Sequence of them)");
    json_decref(j);

    /* ByteLevel must come last: a split after it would see mapped bytes */
    j = fixture_json();
    json_object_set_new(j, "pre_tokenizer",
                        json_pack("{ss s[{ss sb sb sb} {ss sb}]}", "type", "Sequence",
                                  "pretokenizers", "type", "ByteLevel", "add_prefix_space", 0,
                                  "trim_offsets", 0, "use_regex", 1, "type", "Digits",
                                  "individual_digits", 1));
    expect_reject(j, NVFP4_ERR_UNSUPPORTED, "pre_tokenizer",
                  "expected exactly one ByteLevel pre-tokenizer, as the last step");
    json_decref(j);

    j = fixture_json();
    json_object_set_new(j, "pre_tokenizer",
                        json_pack("{ss s[{ss s{ss} ss sb} {ss sb sb sb}]}", "type", "Sequence",
                                  "pretokenizers", "type", "Split", "pattern", "Regex", "(\\p{L}+",
                                  "behavior", "Isolated", "invert", 0, "type", "ByteLevel",
                                  "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0));
    expect_reject(j, NVFP4_ERR_INVALID, "pre_tokenizer.pretokenizers[0].pattern",
                  "does not compile");
    json_decref(j);

    j = fixture_json();
    json_object_set_new(j, "pre_tokenizer",
                        json_pack("{ss s[{ss s{ss} ss sb} {ss sb sb sb}]}", "type", "Sequence",
                                  "pretokenizers", "type", "Split", "pattern", "Regex", "\\s+",
                                  "behavior", "Sideways", "invert", 0, "type", "ByteLevel",
                                  "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0));
    expect_reject(j, NVFP4_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[0].behavior",
                  "split behavior \"Sideways\" is not supported");
    json_decref(j);

    j = fixture_json();
    json_object_set_new(j, "decoder", json_pack("{ss ss}", "type", "WordPiece", "prefix", "##"));
    expect_reject(j, NVFP4_ERR_UNSUPPORTED, "decoder.type", "decoder \"WordPiece\" is not supported");
    json_decref(j);

    j = fixture_json();
    json_object_set_new(j, "decoder", json_pack("{ss s[{ss}]}", "type", "Sequence", "decoders",
                                                "type", "Fuse"));
    expect_reject(j, NVFP4_ERR_UNSUPPORTED, "decoder",
                  "no ByteLevel step, which the ByteLevel pre-tokenizer needs");
    json_decref(j);

    j = fixture_json();
    json_object_set_new(j, "decoder", json_null());
    expect_reject(j, NVFP4_ERR_UNSUPPORTED, "decoder", "no decoder");
    json_decref(j);

    j = fixture_json();
    json_object_set_new(j, "truncation", json_pack("{si}", "max_length", 8));
    expect_reject(j, NVFP4_ERR_UNSUPPORTED, "truncation", "changes the ids of encode");
    json_decref(j);

    j = fixture_json();
    json_object_set_new(j, "pre_tokenizer", json_string("ByteLevel"));
    expect_reject(j, NVFP4_ERR_TYPE, "pre_tokenizer", "expected an object, found a string");
    json_decref(j);

    j = fixture_json();
    json_object_set_new(j, "decoder", json_object());
    expect_reject(j, NVFP4_ERR_BAD_ENTRY, "decoder.type", "expected a type string, found nothing");
    json_decref(j);

    j = fixture_json();
    json_object_set_new(json_array_get(json_object_get(j, "added_tokens"), 1), "special",
                        json_string("yes"));
    expect_reject(j, NVFP4_ERR_TYPE, "added_tokens[1].special",
                  "expected a boolean, found a string");
    json_decref(j);

    j = fixture_json();
    json_array_set_new(json_object_get(j, "added_tokens"), 0,
                       json_pack("{si si}", "id", 0, "content", 5));
    expect_reject(j, NVFP4_ERR_BAD_ENTRY, "added_tokens[0].content",
                  "expected a string, found an integer");
    json_decref(j);
    rmdir(tmpdir);
}
END_TEST

/* SentencePiece-style files (tests/data/tokenizer/spm/llama2.json) with
 * components we cannot run or malformed Metaspace / Prepend / Replace: the
 * error names the component and its JSON path. */
static json_t *spm_json(void)
{
    return tload_json("tokenizer/spm/llama2.json");
}

static json_t *metaspace(const char *scheme, int split)
{
    json_t *m = json_pack("{ss ss}", "type", "Metaspace", "replacement", "\xe2\x96\x81");
    if (scheme)
        json_object_set_new(m, "prepend_scheme", json_string(scheme));
    if (split >= 0)
        json_object_set_new(m, "split", json_boolean(split));
    return m;
}

START_TEST(test_reject_spm)
{
    static const char *const models[] = {"Unigram", "WordPiece", "WordLevel"};
    json_t *j, *m;

    make_tmpdir();
    /* the fixture itself loads */
    j = spm_json();
    ck_assert_int_eq(json_dump_file(j, tmp_path("ok.json"), JSON_COMPACT), 0);
    {
        nvfp4_tokenizer *tok = nvfp4_tokenizer_load(tmp_path("ok.json"), NULL);
        ck_assert_ptr_nonnull(tok);
        nvfp4_tokenizer_free(tok);
    }
    unlink(tmp_path("ok.json"));
    json_decref(j);

    for (int i = 0; i < 3; i++) {
        char want[64];
        j = spm_json();
        json_object_set_new(json_object_get(j, "model"), "type", json_string(models[i]));
        snprintf(want, sizeof(want), "model type \"%s\" is not supported", models[i]);
        expect_reject(j, NVFP4_ERR_UNSUPPORTED, "model.type", want);
        json_decref(j);
    }

    /* normalizers: SentencePiece's precompiled charsmap, regex Replace */
    j = spm_json();
    json_array_insert_new(json_object_get(json_object_get(j, "normalizer"), "normalizers"), 0,
                          json_pack("{ss ss}", "type", "Precompiled", "precompiled_charsmap", "AA=="));
    expect_reject(j, NVFP4_ERR_UNSUPPORTED, "normalizer.normalizers[0].type",
                  "normalizer \"Precompiled\" is not supported");
    json_decref(j);

    j = spm_json();
    json_object_set_new(j, "normalizer", json_pack("{ss s{ss} ss}", "type", "Replace", "pattern",
                                                   "Regex", " {2,}", "content", " "));
    expect_reject(j, NVFP4_ERR_UNSUPPORTED, "normalizer.pattern",
                  "regex replacements are not supported");
    json_decref(j);

    j = spm_json();
    json_object_set_new(j, "normalizer", json_pack("{ss s{ss}}", "type", "Replace", "pattern",
                                                   "String", " "));
    expect_reject(j, NVFP4_ERR_BAD_ENTRY, "normalizer.content", "expected a string, found nothing");
    json_decref(j);

    j = spm_json();
    json_object_del(json_array_get(json_object_get(json_object_get(j, "normalizer"), "normalizers"),
                                   0), "prepend");
    expect_reject(j, NVFP4_ERR_BAD_ENTRY, "normalizer.normalizers[0].prepend",
                  "expected a string, found nothing");
    json_decref(j);

    /* pre-tokenizers */
    j = spm_json();
    json_object_set_new(j, "pre_tokenizer",
                        json_pack("{ss s[o {ss}]}", "type", "Sequence", "pretokenizers",
                                  metaspace("first", 1), "type", "UnicodeScripts"));
    expect_reject(j, NVFP4_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[1].type",
                  "pre-tokenizer \"UnicodeScripts\" is not supported");
    json_decref(j);

    j = spm_json();
    m = metaspace("first", 0);
    json_object_set_new(m, "replacement", json_string("ab"));
    json_object_set_new(j, "pre_tokenizer", m);
    expect_reject(j, NVFP4_ERR_BAD_ENTRY, "pre_tokenizer.replacement",
                  "expected one character, found a string");
    json_decref(j);

    j = spm_json();
    m = metaspace("first", 0);
    json_object_del(m, "replacement");
    json_object_set_new(j, "pre_tokenizer", m);
    expect_reject(j, NVFP4_ERR_BAD_ENTRY, "pre_tokenizer.replacement",
                  "expected one character, found nothing");
    json_decref(j);

    j = spm_json();
    json_object_set_new(j, "pre_tokenizer", metaspace("First", 1));
    expect_reject(j, NVFP4_ERR_BAD_ENTRY, "pre_tokenizer.prepend_scheme",
                  "expected \"always\", \"first\" or \"never\", found \"First\"");
    json_decref(j);

    j = spm_json();
    m = metaspace(NULL, -1);
    json_object_set_new(m, "prepend_scheme", json_null());
    json_object_set_new(j, "pre_tokenizer", m);
    expect_reject(j, NVFP4_ERR_BAD_ENTRY, "pre_tokenizer.prepend_scheme", "found null");
    json_decref(j);

    /* tokenizers refuses this pair too ("add_prefix_space does not match
     * declared prepend_scheme"); the scheme defaults to always */
    j = spm_json();
    m = metaspace(NULL, -1);
    json_object_set_new(m, "add_prefix_space", json_false());
    json_object_set_new(j, "pre_tokenizer", m);
    expect_reject(j, NVFP4_ERR_BAD_ENTRY, "pre_tokenizer.add_prefix_space",
                  "add_prefix_space false does not match prepend_scheme \"always\"");
    json_decref(j);

    j = spm_json();
    json_object_set_new(j, "pre_tokenizer", metaspace("never", 1));
    json_object_set_new(json_object_get(j, "pre_tokenizer"), "split", json_integer(1));
    expect_reject(j, NVFP4_ERR_TYPE, "pre_tokenizer.split", "expected a boolean, found an integer");
    json_decref(j);

    /* decoders */
    j = spm_json();
    json_array_set_new(json_object_get(json_object_get(j, "decoder"), "decoders"), 1,
                       json_pack("{ss ss}", "type", "WordPiece", "prefix", "##"));
    expect_reject(j, NVFP4_ERR_UNSUPPORTED, "decoder.decoders[1].type",
                  "decoder \"WordPiece\" is not supported (expected ByteLevel, Metaspace, "
                  "ByteFallback, Fuse, Replace, Strip or a Sequence of them)");
    json_decref(j);

    j = spm_json();
    json_object_set_new(j, "decoder", json_pack("{ss ss}", "type", "CTC", "pad_token", "<pad>"));
    expect_reject(j, NVFP4_ERR_UNSUPPORTED, "decoder.type", "decoder \"CTC\" is not supported");
    json_decref(j);

    j = spm_json();
    m = metaspace("always", 1);
    json_object_set_new(m, "replacement", json_integer(95));
    json_object_set_new(j, "decoder", m);
    expect_reject(j, NVFP4_ERR_BAD_ENTRY, "decoder.replacement",
                  "expected one character, found an integer");
    json_decref(j);

    j = spm_json();
    json_object_set_new(j, "decoder", json_null());
    expect_reject(j, NVFP4_ERR_UNSUPPORTED, "decoder", "no decoder");
    json_decref(j);

    /* the model: an unk token outside the vocabulary, a bad merge pair */
    j = spm_json();
    json_object_set_new(json_object_get(j, "model"), "unk_token", json_string("<nope>"));
    expect_reject(j, NVFP4_ERR_NOT_FOUND, "model.unk_token", "unk token \"<nope>\" is not in the vocab");
    json_decref(j);

    j = spm_json();
    json_array_set_new(json_object_get(json_object_get(j, "model"), "merges"), 2,
                       json_string("\xe2\x96\x81 t h"));
    expect_reject(j, NVFP4_ERR_BAD_ENTRY, "model.merges[2]", "expected \"left right\" (one space)");
    json_decref(j);
    rmdir(tmpdir);
}
END_TEST

/* Hostile SentencePiece-style files: text that grows without bound under
 * a chain of Replace steps, and vocabularies that are not valid UTF-8. */
static void write_raw(const char *path, const char *a, const char *b, const char *c)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fputs(a, f);
    fputs(b, f);
    fputs(c, f);
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_reject_spm_hostile)
{
    static const char *const bad_keys[] = {"\"\xff\xfe\"", "\"a\\u0000b\"", "\"\\ud800\""};
    char big[2100], text[101];
    json_t *j, *seq;
    nvfp4_tokenizer *tok;
    nvfp4_error err;
    int32_t *ids = NULL, many[100];
    size_t n = 0;
    char *s;

    make_tmpdir();
    /* six Replace("a", "aaaa") normalizers after Prepend and Replace(" "):
     * 100 bytes become 103, 403, 1603, then 6403, past 8 * 100 + 4096 */
    j = spm_json();
    seq = json_object_get(json_object_get(j, "normalizer"), "normalizers");
    for (int i = 0; i < 6; i++)
        json_array_append_new(seq, json_pack("{ss s{ss} ss}", "type", "Replace", "pattern", "String",
                                             "a", "content", "aaaa"));
    ck_assert_int_eq(json_dump_file(j, tmp_path("grow.json"), JSON_COMPACT), 0);
    json_decref(j);
    nvfp4_error_clear(&err);
    tok = nvfp4_tokenizer_load(tmp_path("grow.json"), &err);
    ck_assert_msg(tok != NULL, "%s", err.text);
    memset(text, 'a', 100);
    text[100] = '\0';
    ck_assert_int_eq(nvfp4_tokenizer_encode(tok, text, 100, &ids, &n, &err), NVFP4_ERR_INVALID);
    ck_assert_ptr_null(ids);
    assert_contains(err.text, "normalizer.normalizers[4] would make a piece of 100 bytes longer "
                              "than 8 times that plus 4096 bytes");
    /* a short text stays within the slack */
    ck_assert_int_eq(nvfp4_tokenizer_encode(tok, "a", 1, &ids, &n, &err), NVFP4_OK);
    free(ids);
    nvfp4_tokenizer_free(tok);
    unlink(tmp_path("grow.json"));

    /* decoder Replace steps: three of 'a' -> 64 'a's grow a token 2^18 times
     * (refused at load); one "\xe2\x96\x81" -> 2000 bytes passes per token
     * but not on a decode of 100 of them */
    memset(big, 'a', 64);
    big[64] = '\0';
    j = spm_json();
    seq = json_object_get(json_object_get(j, "decoder"), "decoders");
    for (int i = 0; i < 3; i++)
        json_array_insert_new(seq, 0, json_pack("{ss s{ss} ss}", "type", "Replace", "pattern",
                                                "String", "a", "content", big));
    expect_reject(j, NVFP4_ERR_INVALID, "decoder", "its Replace steps make token");
    json_decref(j);

    memset(big, 'x', 2000);
    big[2000] = '\0';
    j = spm_json();
    seq = json_object_get(json_object_get(j, "decoder"), "decoders");
    json_array_insert_new(seq, 0, json_pack("{ss s{ss} ss}", "type", "Replace", "pattern", "String",
                                            "\xe2\x96\x81", "content", big));
    ck_assert_int_eq(json_dump_file(j, tmp_path("grow.json"), JSON_COMPACT), 0);
    json_decref(j);
    tok = nvfp4_tokenizer_load(tmp_path("grow.json"), &err);
    ck_assert_msg(tok != NULL, "%s", err.text);
    for (int i = 0; i < 100; i++)
        many[i] = nvfp4_tokenizer_token_id(tok, "\xe2\x96\x81");
    ck_assert_int_ge(many[0], 0);
    s = nvfp4_tokenizer_decode(tok, many, 2, 0, &err);
    ck_assert_ptr_nonnull(s);
    free(s);
    nvfp4_error_clear(&err);
    ck_assert_ptr_null(nvfp4_tokenizer_decode(tok, many, 100, 0, &err));
    ck_assert_int_eq(err.status, NVFP4_ERR_INVALID);
    assert_contains(err.text, "decoder step 0 (Replace) would make the text of 300 bytes longer");
    nvfp4_tokenizer_free(tok);
    unlink(tmp_path("grow.json"));

    /* vocab keys that are not UTF-8, hold a NUL or a lone surrogate: the
     * JSON reader refuses them (tokenizers' serde_json does as well) */
    for (int i = 0; i < 3; i++) {
        const char *p = tmp_path("bad-vocab.json");
        write_raw(p, "{\"model\": {\"type\": \"BPE\", \"vocab\": {", bad_keys[i],
                  ": 0}, \"merges\": []}, \"decoder\": {\"type\": \"Fuse\"}}");
        nvfp4_error_clear(&err);
        ck_assert_ptr_null(nvfp4_tokenizer_load(p, &err));
        ck_assert_int_eq(err.status, NVFP4_ERR_BAD_JSON);
        unlink(p);
    }
    rmdir(tmpdir);
}
END_TEST

START_TEST(test_reject_encode_decode)
{
    nvfp4_tokenizer *tok = load_fixture();
    json_t *exp = tload_json(EXPECTED);
    /* one past the last id of the fixture, as tokenizers counts it */
    const int32_t vocab = (int32_t)json_integer_value(json_object_get(exp, "vocab_size"));
    int32_t *ids = (int32_t *)1, bad[3] = {vocab - 1, vocab, 17};
    size_t n = 7;
    nvfp4_error err;
    char want[64];

    ck_assert_int_gt(vocab, 17);
    json_decref(exp);

    /* a stray continuation byte, and a UTF-16 surrogate encoded in UTF-8 */
    nvfp4_error_clear(&err);
    ck_assert_int_eq(nvfp4_tokenizer_encode(tok, "ab\x80", 3, &ids, &n, &err), NVFP4_ERR_INVALID);
    ck_assert_ptr_null(ids);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(err.offset, 2);
    assert_contains(err.text, "not valid UTF-8 at byte 2");
    nvfp4_error_clear(&err);
    ck_assert_int_eq(nvfp4_tokenizer_encode(tok, "x\xed\xa0\x80", 4, &ids, &n, &err),
                     NVFP4_ERR_INVALID);
    assert_contains(err.text, "at byte 1");

    nvfp4_error_clear(&err);
    ck_assert_ptr_null(nvfp4_tokenizer_decode(tok, bad, 3, 0, &err));
    ck_assert_int_eq(err.status, NVFP4_ERR_OUT_OF_RANGE);
    snprintf(want, sizeof(want), "ids[1] = %d is not a token id", (int)vocab);
    assert_contains(err.text, want);

    /* the empty text is no tokens, not an error */
    ck_assert_int_eq(nvfp4_tokenizer_encode(tok, "", 0, &ids, &n, &err), NVFP4_OK);
    ck_assert_uint_eq(n, 0);
    free(ids);
    nvfp4_tokenizer_free(tok);
    nvfp4_tokenizer_free(NULL);
}
END_TEST

/* ---- pipeline variants (tests/data/tokenizer/variants) ---------------------
 * Small tokenizer.json files (SmolLM2 cut to 1000 merges, each with one
 * feature of the tokenizers pipeline edited in) and, for a shared corpus, the
 * ids and decoded strings of the real tokenizers package
 * (scripts/fixtures/gen_tokenizer_variants.py).  Exact equality: the
 * tokenizer is a deterministic algorithm with no numerical freedom. */
#define VARIANTS "tokenizer/variants"

static int variant_count(const char *dir)
{
    char rel[256];
    json_t *exp;
    int n;
    snprintf(rel, sizeof(rel), "%s/expected.json", dir);
    exp = tload_json(rel);
    n = (int)json_array_size(json_object_get(exp, "variants"));
    json_decref(exp);
    return n;
}

static int same_string(const char *got, const json_t *want)
{
    return got && strlen(got) == json_string_length(want) && !memcmp(got, json_string_value(want),
                                                                     strlen(got));
}

/* Under valgrind (scripts/test.sh sets NVFP4_TEST_QUICK=1) the
 * SentencePiece-style tests take their hand-written texts only. */
static int quick(void)
{
    return getenv("NVFP4_TEST_QUICK") != NULL;
}

static void check_variant(const char *dir, size_t index, size_t max_texts)
{
    char rel[256];
    json_t *exp = (snprintf(rel, sizeof(rel), "%s/expected.json", dir), tload_json(rel));
    const json_t *texts = json_object_get(exp, "texts");
    json_t *v = json_array_get(json_object_get(exp, "variants"), index);
    const json_t *cases = json_object_get(v, "decode_cases"), *c;
    const char *name = json_string_value(json_object_get(v, "name"));
    const json_t *all_ids = json_object_get(v, "ids"), *dec = json_object_get(v, "decoded"),
                 *decs = json_object_get(v, "decoded_skip");
    nvfp4_tokenizer *tok;
    nvfp4_error err;
    size_t i, bad_enc = 0, bad_dec = 0;

    ck_assert_ptr_nonnull(v);
#ifndef HAVE_ICU
    if (json_is_true(json_object_get(v, "needs_nfc"))) {
        json_decref(exp);
        return;     /* NFC needs ICU; the load refusal itself is tested elsewhere */
    }
#endif
    snprintf(rel, sizeof(rel), "%s/%s", dir, json_string_value(json_object_get(v, "file")));
    nvfp4_error_clear(&err);
    tok = nvfp4_tokenizer_load(tdata(rel), &err);
    ck_assert_msg(tok != NULL, "%s: load: %s", name, err.text);
    ck_assert_uint_eq(json_array_size(all_ids), json_array_size(texts));
    for (i = 0; i < json_array_size(texts) && i < max_texts; i++) {
        const json_t *t = json_array_get(texts, i), *w = json_array_get(all_ids, i);
        int32_t *ids = NULL, *want;
        size_t n = 0, nw;
        char *s, *ss;
        int ok;

        nvfp4_error_clear(&err);
        ok = nvfp4_tokenizer_encode(tok, json_string_value(t), json_string_length(t), &ids, &n,
                                    &err) == NVFP4_OK;
        nw = json_array_size(w);
        want = malloc((nw + 1) * sizeof(int32_t));
        ck_assert_ptr_nonnull(want);
        for (size_t k = 0; k < nw; k++)
            want[k] = (int32_t)json_integer_value(json_array_get(w, k));
        if (!ok || n != nw || (n && memcmp(ids, want, n * sizeof(int32_t)) != 0)) {
            if (bad_enc++ < 3) {
                fprintf(stderr, "%s: text %zu \"%s\": encode %s, %zu ids (tokenizers %zu):", name, i,
                        json_string_value(t), ok ? "differs" : err.text, n, nw);
                for (size_t k = 0; k < n && k < 16; k++)
                    fprintf(stderr, " %d", ids[k]);
                fprintf(stderr, " | want");
                for (size_t k = 0; k < nw && k < 16; k++)
                    fprintf(stderr, " %d", want[k]);
                fprintf(stderr, "\n");
            }
        }
        /* decode tokenizers' own ids, with and without special tokens */
        s = nvfp4_tokenizer_decode(tok, want, nw, 0, &err);
        ss = nvfp4_tokenizer_decode(tok, want, nw, 1, &err);
        if (!same_string(s, json_array_get(dec, i)) ||
            !same_string(ss, json_is_null(json_array_get(decs, i)) ? json_array_get(dec, i)
                                                                  : json_array_get(decs, i))) {
            if (bad_dec++ < 3)
                fprintf(stderr, "%s: text %zu \"%s\": decode \"%s\" / skip \"%s\", tokenizers \"%s\"\n",
                        name, i, json_string_value(t), s ? s : "(null)", ss ? ss : "(null)",
                        json_string_value(json_array_get(dec, i)));
        }
        free(s);
        free(ss);
        free(ids);
        free(want);
    }
    /* [ids, Tokenizer.decode(ids)] of token sequences tokenizers never
     * produces from text (lone bytes, runs of the replacement character) */
    json_array_foreach(cases, i, c) {
        const json_t *w = json_array_get(c, 0);
        size_t nw = json_array_size(w);
        int32_t want[16];
        char *s;
        ck_assert_uint_le(nw, 16);
        for (size_t k = 0; k < nw; k++)
            want[k] = (int32_t)json_integer_value(json_array_get(w, k));
        s = nvfp4_tokenizer_decode(tok, want, nw, 0, &err);
        if (!same_string(s, json_array_get(c, 1)) && bad_dec++ < 6)
            fprintf(stderr, "%s: decode case %zu: \"%s\", tokenizers \"%s\"\n", name, i,
                    s ? s : err.text, json_string_value(json_array_get(c, 1)));
        free(s);
    }
    /* one more than the largest id (tokenizers' vocab_size counts the ids
     * in use, fewer when the vocabulary has holes) */
    if (json_object_get(v, "id_count"))
        ck_assert_uint_eq(nvfp4_tokenizer_vocab_size(tok),
                          (size_t)json_integer_value(json_object_get(v, "id_count")));
    nvfp4_tokenizer_free(tok);
    ck_assert_msg(bad_enc == 0 && bad_dec == 0, "%s: %zu encode and %zu decode mismatches of %zu texts",
                  name, bad_enc, bad_dec, json_array_size(texts));
    json_decref(exp);
}

START_TEST(test_variants)
{
    check_variant(VARIANTS, (size_t)_i, SIZE_MAX);
}
END_TEST

START_TEST(test_spm)
{
    check_variant(SPM, (size_t)_i, quick() ? 50 : SIZE_MAX);
}
END_TEST

/* ~100 KB for SentencePiece-style pipelines without a pre-tokenizer, where
 * everything between two added tokens is ONE BPE word (Gemma) or one word
 * with U+2581 prepended (Llama 2, Metaspace "always"; not "first", which
 * prepends at the start of the text only): the texts of tokenizer/spm
 * joined by a special token, over and over; each segment is normalized on its own, so
 * the ids are tokenizers' ids of the texts joined by the token's id.  The
 * time is printed, not asserted (as test_encode_100k). */
START_TEST(test_spm_encode_long)
{
    static const struct {
        const char *name, *sep;
    } runs[] = {{"gemma", "<eos>"}, {"llama2", "</s>"}, {"metaspace_always_split", "<s>"}};
    json_t *exp = tload_json(SPM "/expected.json");
    const json_t *texts = json_object_get(exp, "texts"), *v = NULL;
    size_t cap = 200000, i;

    for (size_t r = 0; r < (quick() ? 1 : sizeof(runs) / sizeof(runs[0])); r++) {
        char *text = malloc(cap), rel[256];
        int32_t *want = malloc(cap * sizeof(int32_t)), *ids = NULL, sep_id;
        size_t len = 0, nwant = 0, n = 0, sl = strlen(runs[r].sep);
        nvfp4_tokenizer *tok;
        nvfp4_error err;
        const json_t *all;
        double t0, t1;

        json_array_foreach(json_object_get(exp, "variants"), i, v)
            if (!strcmp(json_string_value(json_object_get(v, "name")), runs[r].name))
                break;
        ck_assert_ptr_nonnull(v);
        all = json_object_get(v, "ids");
        snprintf(rel, sizeof(rel), SPM "/%s.json", runs[r].name);
        tok = nvfp4_tokenizer_load(tdata(rel), NULL);
        ck_assert_ptr_nonnull(tok);
        ck_assert_ptr_nonnull(text);
        ck_assert_ptr_nonnull(want);
        sep_id = nvfp4_tokenizer_token_id(tok, runs[r].sep);
        ck_assert_int_ge(sep_id, 0);
        while (len < 100000) {
            for (i = 0; i < json_array_size(texts); i++) {
                const json_t *t = json_array_get(texts, i), *arr = json_array_get(all, i);
                size_t tl = json_string_length(t);
                /* a text with the separator in it would be cut there */
                if (strstr(json_string_value(t), runs[r].sep))
                    continue;
                ck_assert_uint_lt(len + tl + sl, cap);
                ck_assert_uint_lt(nwant + json_array_size(arr) + 1, cap);
                memcpy(text + len, json_string_value(t), tl);
                len += tl;
                memcpy(text + len, runs[r].sep, sl);
                len += sl;
                for (size_t k = 0; k < json_array_size(arr); k++)
                    want[nwant++] = (int32_t)json_integer_value(json_array_get(arr, k));
                want[nwant++] = sep_id;
            }
        }
        nvfp4_error_clear(&err);
        t0 = now();
        ck_assert_int_eq(nvfp4_tokenizer_encode(tok, text, len, &ids, &n, &err), NVFP4_OK);
        t1 = now();
        fprintf(stderr, "encode %s: %zu bytes -> %zu ids in %.2f ms\n", runs[r].name, len, n,
                (t1 - t0) * 1e3);
        ck_assert_uint_eq(n, nwant);
        for (size_t k = 0; k < n; k++)
            ck_assert_msg(ids[k] == want[k], "%s id %zu: %d, expected %d", runs[r].name, k,
                          ids[k], want[k]);
        free(ids);
        free(want);
        free(text);
        nvfp4_tokenizer_free(tok);
    }
    json_decref(exp);
}
END_TEST

/* token_bytes on SentencePiece-style tokens: where the decoder chain has
 * no step that looks at the whole text (Gemma's Replace/ByteFallback/Fuse,
 * Metaspace with prepend_scheme never), the streamed bytes of tokenizers'
 * ids joined are tokenizers' decoded text, whenever that has no U+FFFD (a
 * byte run that is not UTF-8, which decode makes lossy and streaming keeps
 * raw). */
START_TEST(test_spm_token_bytes)
{
    static const char *const names[] = {"gemma", "gemma_split", "metaspace_never_split"};
    json_t *exp = tload_json(SPM "/expected.json");
    const json_t *texts = json_object_get(exp, "texts"), *v;
    size_t i, checked = 0;

    json_array_foreach(json_object_get(exp, "variants"), i, v) {
        const char *name = json_string_value(json_object_get(v, "name"));
        char rel[256];
        nvfp4_tokenizer *tok;
        int want_it = 0;

        for (size_t k = 0; k < 3; k++)
            want_it |= !strcmp(name, names[k]);
        if (!want_it)
            continue;
        snprintf(rel, sizeof(rel), SPM "/%s", json_string_value(json_object_get(v, "file")));
        tok = nvfp4_tokenizer_load(tdata(rel), NULL);
        ck_assert_ptr_nonnull(tok);
        for (size_t t = 0; t < json_array_size(texts); t++) {
            const json_t *ids = json_array_get(json_object_get(v, "ids"), t);
            const json_t *dec = json_array_get(json_object_get(v, "decoded"), t);
            size_t o = 0, cap = 16;
            char *buf;

            if (strstr(json_string_value(dec), "\xef\xbf\xbd"))
                continue;
            buf = malloc(cap);
            ck_assert_ptr_nonnull(buf);
            for (size_t k = 0; k < json_array_size(ids); k++) {
                size_t bl = 0;
                const char *b = nvfp4_tokenizer_token_bytes(
                    tok, (int32_t)json_integer_value(json_array_get(ids, k)), &bl);
                ck_assert_ptr_nonnull(b);
                while (o + bl > cap)
                    ck_assert_ptr_nonnull(buf = realloc(buf, cap *= 2));
                memcpy(buf + o, b, bl);
                o += bl;
            }
            ck_assert_msg(o == json_string_length(dec) && !memcmp(buf, json_string_value(dec), o),
                          "%s text %zu: streamed \"%.*s\", tokenizers decodes \"%s\"", name, t,
                          (int)o, buf, json_string_value(dec));
            free(buf);
            checked++;
        }
        nvfp4_tokenizer_free(tok);
    }
    ck_assert_uint_ge(checked, 300);
    json_decref(exp);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("fixture");
    TCase *rej = tcase_create("reject");
    SRunner *sr;
    int nf;

    tcase_add_test(tc, test_encode_corpus);
    tcase_add_test(tc, test_decode_corpus);
    tcase_add_test(tc, test_token_bytes);
    tcase_add_test(tc, test_vocab_and_special);
    tcase_add_test(tc, test_decode_skip_special);
    tcase_add_test(tc, test_encode_100k);
#ifdef HAVE_ICU
    tcase_add_test(tc, test_nfc);
#endif
    tcase_add_test(tc, test_cli);
    tcase_add_loop_test(tc, test_variants, 0, variant_count(VARIANTS));
    tcase_add_loop_test(tc, test_spm, 0, variant_count(SPM));
    tcase_add_test(tc, test_spm_token_bytes);
    tcase_add_test(tc, test_spm_encode_long);
    tcase_set_timeout(tc, 60);
    tcase_add_test(rej, test_reject_files);
    tcase_add_test(rej, test_reject_model);
    tcase_add_test(rej, test_reject_merges);
    tcase_add_test(rej, test_reject_pipeline);
    tcase_add_test(rej, test_reject_spm);
    tcase_add_test(rej, test_reject_spm_hostile);
    tcase_add_test(rej, test_reject_encode_decode);
    tcase_set_timeout(rej, 120);
    suite_add_tcase(s, tc);
    suite_add_tcase(s, rej);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
