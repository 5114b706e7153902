/* SPDX-License-Identifier: MIT */
/*
 * libmodel tests: every fixture model exported by the real amd-quark package
 * against the PyTorch emulation of the spec (tests/data/models/NAME, made by
 * scripts/fixtures/gen_models.py), the refusals of spec §4, and hostile
 * model directories.
 *
 * Tolerance for logits: 1e-4 absolute on logits of magnitude ~3.  The
 * reference runs the same float32 arithmetic (dequantized weights, §5 qdq,
 * float32 activations) in PyTorch; what differs is only the summation order
 * of float32 dot products (our SIMD blocks vs PyTorch's GEMM), worth a few
 * ulp per sum (observed max 3e-6).  A single flipped E2M1/E4M3 rounding in an
 * activation would move logits by ~1e-2, so the bound still catches any
 * numerical-semantics error (wrong scale order, wrong input scale, missing
 * qdq, wrong rope, ...).
 */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nvfp4/model.h>

#include "modelref.h"
#include "testutil.h"
#include "toolrun.h"

#define LOGIT_TOL 1e-4

static const char *const refused_models[] = {"llama_unshared", "mixtral_refused"};
#define NREF (sizeof(refused_models) / sizeof(refused_models[0]))

static nvfp4_model *open_model(const char *name, int rescale, nvfp4_error *err)
{
    return fixture_open(name, "cpu", rescale, err);
}

/* Prefill of all tokens, against the PyTorch emulation. */
START_TEST(test_logits_prefill)
{
    const char *name = ok_models[_i];
    nvfp4_error err;
    fixture f;
    nvfp4_model *m;
    float *logits;

    fixture_load(name, &f);
    m = open_model(name, 0, &err);
    ck_assert_msg(m != NULL, "%s: %s", name, err.text);
    ck_assert_int_eq(nvfp4_model_vocab_size(m), (int)f.V);
    logits = malloc(f.T * f.V * sizeof(float));
    ck_assert_int_eq(nvfp4_model_forward(m, f.tokens, f.T, 0, logits, 0, &err), NVFP4_OK);
    compare_logits(name, logits, f.logits, f.T * f.V, LOGIT_TOL);
    free(logits);
    nvfp4_model_free(m);
    fixture_free(&f);
}
END_TEST

/* Half prefill, then one token at a time through the KV cache. */
START_TEST(test_logits_decode)
{
    const char *name = ok_models[_i];
    nvfp4_error err;
    fixture f;
    nvfp4_model *m;
    float *logits;
    size_t half;
    char what[64];

    fixture_load(name, &f);
    half = f.T / 2;
    m = open_model(name, 0, &err);
    ck_assert_msg(m != NULL, "%s: %s", name, err.text);
    logits = malloc(f.T * f.V * sizeof(float));
    ck_assert_int_eq(nvfp4_model_forward(m, f.tokens, half, 0, logits, 0, &err), NVFP4_OK);
    snprintf(what, sizeof(what), "%s (decode)", name);
    fixture_decode_rest(m, &f, what, half, logits, LOGIT_TOL);
    free(logits);
    nvfp4_model_free(m);
    fixture_free(&f);
}
END_TEST

/* Greedy continuation with the KV cache equals the reference's, which
 * recomputed the whole sequence for every new token. */
START_TEST(test_greedy)
{
    const char *name = ok_models[_i];
    nvfp4_error err;
    fixture f;
    nvfp4_model *m;
    float *logits;

    fixture_load(name, &f);
    m = open_model(name, 0, &err);
    ck_assert_msg(m != NULL, "%s: %s", name, err.text);
    logits = malloc(f.V * sizeof(float));
    ck_assert_int_eq(nvfp4_model_forward(m, f.tokens, f.T, 0, logits, 1, &err), NVFP4_OK);
    fixture_check_greedy(m, &f, name, logits);
    free(logits);
    nvfp4_model_free(m);
    fixture_free(&f);
}
END_TEST

/* Phi-3's longrope takes its long factors when the context is longer than
 * original_max_position_embeddings (64 in the fixture): a 128-token context
 * against the PyTorch emulation run with the long factors
 * (logits_emul_long.f32), prefill and decode. */
START_TEST(test_longrope_long)
{
    nvfp4_model_options o;
    nvfp4_model *m;
    nvfp4_error err;
    fixture f;
    float *want, *logits;
    size_t len, half;

    fixture_load("phi3", &f);
    want = tload_file("models/phi3/logits_emul_long.f32", &len);
    ck_assert_uint_eq(len, f.T * f.V * sizeof(float));
    nvfp4_model_options_init(&o);
    o.backend = "cpu";
    o.quiet = 1;
    o.max_ctx = 128;
    m = nvfp4_model_open(tdata("models/phi3"), &o, &err);
    ck_assert_msg(m != NULL, "%s", err.text);
    logits = malloc(f.T * f.V * sizeof(float));
    ck_assert_int_eq(nvfp4_model_forward(m, f.tokens, f.T, 0, logits, 0, &err), NVFP4_OK);
    compare_logits("phi3 (long factors)", logits, want, f.T * f.V, LOGIT_TOL);
    /* the short factors' reference is far from it: the test can fail */
    ck_assert(logits_max_diff("phi3 long vs short", logits, f.logits, f.T * f.V, NULL) > 1e-2);
    half = f.T / 2;
    nvfp4_model_reset(m);
    ck_assert_int_eq(nvfp4_model_forward(m, f.tokens, half, 0, logits, 0, &err), NVFP4_OK);
    for (size_t t = half; t < f.T; t++)
        ck_assert_int_eq(nvfp4_model_forward(m, f.tokens + t, 1, t, logits + t * f.V, 0, &err),
                         NVFP4_OK);
    compare_logits("phi3 (long factors, decode)", logits, want, f.T * f.V, LOGIT_TOL);
    free(logits);
    free(want);
    nvfp4_model_free(m);
    fixture_free(&f);
}
END_TEST

/* Perplexity of the fixture tokens after BOS in one window equals the
 * log-likelihood computed here from the reference logits. */
START_TEST(test_perplexity_one_window)
{
    nvfp4_error err;
    fixture f;
    nvfp4_model *m;
    nvfp4_ppl_result r;
    double want = 0, nll0 = 0;

    fixture_load("llama", &f);
    ck_assert_int_eq(f.tokens[0], 1);  /* the fixture starts with BOS = 1 */
    m = open_model("llama", 0, &err);
    ck_assert_msg(m != NULL, "%s", err.text);
    ck_assert_int_eq(nvfp4_model_bos(m), 1);
    for (size_t i = 0; i + 1 < f.T; i++) {
        const float *row = f.logits + i * f.V;
        double mx = row[0], s = 0;
        for (size_t j = 0; j < f.V; j++)
            mx = row[j] > mx ? row[j] : mx;
        for (size_t j = 0; j < f.V; j++)
            s += exp(row[j] - mx);
        want -= row[f.tokens[i + 1]] - mx - log(s);
    }
    /* the rows are scored on the backend's threads: every count (one, a
     * share of several rows each, more threads than cores) gives the
     * reference, and the same double (the forward pass and each row's sum
     * do not depend on the count, and the rows are added in order) */
    for (int ti = 0; ti < 4; ti++) {
        static const int counts[] = {1, 2, 3, 40};

        nvfp4_backend_set_threads(nvfp4_model_backend(m), counts[ti]);
        ck_assert_int_eq(nvfp4_model_perplexity(m, f.tokens + 1, f.T - 1, f.T - 1, -1, NULL,
                                                NULL, &r, &err),
                         NVFP4_OK);
        ck_assert_uint_eq(r.tokens, f.T - 1);
        ck_assert_msg(fabs(r.nll - want) < 1e-3, "%d threads: nll %g, reference %g",
                      counts[ti], r.nll, want);
        ck_assert(fabs(r.token_ppl - exp(want / (double)(f.T - 1))) < 1e-3 * r.token_ppl);
        if (ti == 0)
            nll0 = r.nll;
        else
            ck_assert_msg(memcmp(&r.nll, &nll0, sizeof nll0) == 0,
                          "%d threads: nll %.17g, 1 thread %.17g", counts[ti], r.nll, nll0);
    }
    /* a context above the cache is refused, not silently clipped */
    ck_assert_int_eq(nvfp4_model_perplexity(m, f.tokens, f.T, 1000, -1, NULL, NULL, &r, &err),
                     NVFP4_ERR_INVALID);
    nvfp4_model_free(m);
    fixture_free(&f);
}
END_TEST

/* A progress callback that returns nonzero stops the run after that window:
 * NVFP4_ERR_CANCELLED, and the result covers the tokens scored so far.  With
 * ctx 16 the first window is [BOS, t1 .. t15] scoring t1 .. t16, whose
 * log-probabilities are rows 0 .. 15 of the PyTorch logits (causal). */
static int stop_at_first(size_t done, size_t total, void *user)
{
    int *calls = user;
    (*calls)++;
    return 1;
}

START_TEST(test_perplexity_cancel)
{
    fixture f;
    nvfp4_model *m;
    nvfp4_error err;
    nvfp4_ppl_result r;
    double want = 0;
    int calls = 0;

    fixture_load("llama", &f);
    m = open_model("llama", 0, &err);
    ck_assert_msg(m != NULL, "%s", err.text);
    for (size_t i = 0; i < 16; i++) {
        const float *row = f.logits + i * f.V;
        double mx = row[0], s = 0;
        for (size_t j = 0; j < f.V; j++)
            mx = row[j] > mx ? row[j] : mx;
        for (size_t j = 0; j < f.V; j++)
            s += exp(row[j] - mx);
        want -= row[f.tokens[i + 1]] - mx - log(s);
    }
    ck_assert_int_eq(nvfp4_model_perplexity(m, f.tokens + 1, f.T - 1, 16, -1, stop_at_first,
                                            &calls, &r, &err),
                     NVFP4_ERR_CANCELLED);
    ck_assert_int_eq(calls, 1);
    ck_assert_uint_eq(r.tokens, 16);
    ck_assert_msg(fabs(r.nll - want) < 1e-3, "nll %g, reference %g", r.nll, want);
    ck_assert_msg(strstr(err.text, "16 of 31"), "%s", err.text);
    nvfp4_model_free(m);
    fixture_free(&f);
}
END_TEST

/* §4: fused shards whose weight global scales differ are refused, naming the
 * layer, every shard and its scale; the exact opt-in (rescale_fused,
 * --exact-fused) runs each shard with its own scale, which is what the
 * reference computed (gen_models.py keeps per-shard scales), so it must
 * match at the usual tolerance - the lossy rescale it replaced drifted by
 * 0.7 and 0.9 on these two models. */
START_TEST(test_refused)
{
    const char *name = refused_models[_i];
    nvfp4_error err;
    nvfp4_model *m;
    fixture f;
    float *logits;
    char what[64];

    m = open_model(name, 0, &err);
    ck_assert_msg(m == NULL, "%s loaded; it must be refused", name);
    ck_assert_int_eq(err.status, NVFP4_ERR_SCALE_MISMATCH);
    ck_assert_msg(strstr(err.text, "model.layers.0.") && strstr(err.text, "weight_scale_2"),
                  "%s", err.text);
    /* every shard is named with its scale */
    ck_assert_msg(strstr(err.text, "_proj =") || strstr(err.text, "w1 ="), "%s", err.text);

    m = open_model(name, 1, &err);
    ck_assert_msg(m != NULL, "%s with the exact opt-in: %s", name, err.text);
    fixture_load(name, &f);
    logits = malloc(f.T * f.V * sizeof(float));
    ck_assert_int_eq(nvfp4_model_forward(m, f.tokens, f.T, 0, logits, 0, &err), NVFP4_OK);
    snprintf(what, sizeof(what), "%s (exact fused)", name);
    compare_logits(what, logits, f.logits, f.T * f.V, LOGIT_TOL);
    free(logits);
    nvfp4_model_free(m);
    fixture_free(&f);
}
END_TEST

/* Checkpoints with a layer the library does not run (an FP8 layer beside
 * NVFP4 ones) are refused naming the layer and what was found
 * (reference.json refuse_words). */
START_TEST(test_refused_layers)
{
    static const char *const names[] = {"ct_fp8_refused"};
    nvfp4_error err;
    nvfp4_model *m;
    char rel[256];
    json_t *ref, *words;

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(rel, sizeof(rel), "models/%s/reference.json", names[i]);
        ref = tload_json(rel);
        ck_assert_str_eq(json_string_value(json_object_get(ref, "expect_load")), "refuse");
        m = open_model(names[i], 0, &err);
        ck_assert_msg(m == NULL, "%s loaded; it must be refused", names[i]);
        ck_assert_int_eq(err.status, NVFP4_ERR_UNSUPPORTED);
        words = json_object_get(ref, "refuse_words");
        ck_assert_uint_gt(json_array_size(words), 0);
        for (size_t w = 0; w < json_array_size(words); w++)
            ck_assert_msg(strstr(err.text, json_string_value(json_array_get(words, w))),
                          "%s: '%s' not in: %s", names[i],
                          json_string_value(json_array_get(words, w)), err.text);
        json_decref(ref);
    }
}
END_TEST

/* ---- hostile model directories ---------------------------------------------- */

static char tmpdir[256];

static void copy_file(const char *from, const char *to, long truncate_to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    char buf[65536];
    size_t r;
    long n = 0;

    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    while ((r = fread(buf, 1, sizeof(buf), a)) > 0) {
        if (truncate_to >= 0 && n + (long)r > truncate_to)
            r = (size_t)(truncate_to - n);
        fwrite(buf, 1, r, b);
        n += (long)r;
        if (truncate_to >= 0 && n >= truncate_to)
            break;
    }
    fclose(a);
    fclose(b);
}

/* A copy of models/MODEL in a temp dir; returns its path. */
static const char *make_dir_of(const char *model, const char *tag)
{
    static char dir[512];
    char p[600], rel[128];

    snprintf(dir, sizeof(dir), "%s/%s", tmpdir, tag);
    mkdir(dir, 0700);
    snprintf(p, sizeof(p), "%s/config.json", dir);
    snprintf(rel, sizeof(rel), "models/%s/config.json", model);
    copy_file(tdata(rel), p, -1);
    snprintf(p, sizeof(p), "%s/model.safetensors", dir);
    snprintf(rel, sizeof(rel), "models/%s/model.safetensors", model);
    copy_file(tdata(rel), p, -1);
    return dir;
}

static const char *make_dir(const char *tag)
{
    return make_dir_of("llama", tag);
}

/* Rewrite DIR/model.safetensors without the named tensors (the header is
 * edited with jansson; the data region stays, leaving holes the format
 * allows). */
static void drop_tensors(const char *dir, const char *const *names)
{
    char p[600];
    size_t len;
    uint8_t *buf;
    uint64_t hl = 0;
    json_t *h;
    char *nh;
    FILE *f;

    snprintf(p, sizeof(p), "%s/model.safetensors", dir);
    f = fopen(p, "rb");
    fseek(f, 0, SEEK_END);
    len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc(len);
    ck_assert_uint_eq(fread(buf, 1, len, f), len);
    fclose(f);
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | buf[i];
    h = json_loadb((char *)buf + 8, hl, 0, NULL);
    ck_assert_ptr_nonnull(h);
    for (; *names; names++)
        ck_assert_int_eq(json_object_del(h, *names), 0);
    nh = json_dumps(h, JSON_COMPACT);
    {
        size_t nl = strlen(nh);
        size_t pad = hl - nl;  /* keep the data offset: pad with spaces */
        ck_assert(nl <= hl);
        memcpy(buf + 8, nh, nl);
        memset(buf + 8 + nl, ' ', pad);
    }
    f = fopen(p, "wb");
    fwrite(buf, 1, len, f);
    fclose(f);
    free(nh);
    free(buf);
    json_decref(h);
}

/* Overwrite the bytes of tensor NAME in DIR/model.safetensors with the N
 * bytes at DATA (the header stays as it is). */
static void poke_tensor(const char *dir, const char *name, const void *data, size_t n)
{
    char p[600];
    uint8_t hb[8];
    uint64_t hl = 0;
    char *hdr;
    json_t *h, *off;
    FILE *f;

    snprintf(p, sizeof(p), "%s/model.safetensors", dir);
    ck_assert_ptr_nonnull(f = fopen(p, "r+b"));
    ck_assert_uint_eq(fread(hb, 1, 8, f), 8);
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | hb[i];
    hdr = malloc(hl);
    ck_assert_uint_eq(fread(hdr, 1, hl, f), hl);
    h = json_loadb(hdr, hl, 0, NULL);
    ck_assert_ptr_nonnull(h);
    off = json_object_get(json_object_get(h, name), "data_offsets");
    ck_assert_msg(json_array_size(off) == 2, "%s not in %s", name, p);
    ck_assert_uint_eq((uint64_t)(json_integer_value(json_array_get(off, 1)) -
                                 json_integer_value(json_array_get(off, 0))), n);
    fseek(f, (long)(8 + hl + (uint64_t)json_integer_value(json_array_get(off, 0))), SEEK_SET);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
    json_decref(h);
    free(hdr);
}

static void set_config(const char *dir, const char *key, json_t *value)
{
    char p[600];
    json_t *c;

    snprintf(p, sizeof(p), "%s/config.json", dir);
    c = json_load_file(p, 0, NULL);
    ck_assert_ptr_nonnull(c);
    if (value)
        json_object_set_new(c, key, value);
    else
        json_object_del(c, key);
    ck_assert_int_eq(json_dump_file(c, p, JSON_INDENT(1)), 0);
    json_decref(c);
}

static nvfp4_status open_dir(const char *dir, nvfp4_error *err)
{
    nvfp4_model_options o;
    nvfp4_model *m;

    nvfp4_model_options_init(&o);
    o.backend = "cpu";
    o.quiet = 1;
    m = nvfp4_model_open(dir, &o, err);
    if (m) {
        nvfp4_model_free(m);
        return NVFP4_OK;
    }
    return err->status;
}

START_TEST(test_hostile_missing_tensors)
{
    static const char *const drop[] = {"model.layers.1.self_attn.k_proj.weight",
                                       "model.layers.0.post_attention_layernorm.weight",
                                       "model.norm.weight", NULL};
    const char *dir = make_dir("missing");
    nvfp4_error err;

    drop_tensors(dir, drop);
    ck_assert_int_eq(open_dir(dir, &err), NVFP4_ERR_NOT_FOUND);
    /* every missing tensor is named at once */
    for (int i = 0; drop[i]; i++)
        ck_assert_msg(strstr(err.text, drop[i]), "%s not named: %s", drop[i], err.text);
    ck_assert_msg(strstr(err.text, "3 tensor"), "%s", err.text);
}
END_TEST

START_TEST(test_hostile_missing_scale)
{
    static const char *const drop[] = {"model.layers.0.mlp.up_proj.weight_scale_2", NULL};
    const char *dir = make_dir("noscale");
    nvfp4_error err;

    drop_tensors(dir, drop);
    ck_assert_int_ne(open_dir(dir, &err), NVFP4_OK);
    ck_assert_msg(strstr(err.text, "model.layers.0.mlp.up_proj.weight_scale_2"), "%s",
                  err.text);
}
END_TEST

START_TEST(test_hostile_config_disagrees)
{
    const char *dir = make_dir("disagree");
    nvfp4_error err;

    set_config(dir, "intermediate_size", json_integer(512));
    ck_assert_int_eq(open_dir(dir, &err), NVFP4_ERR_BAD_SHAPE);
    /* names the tensor, what it holds and what config.json implies */
    ck_assert_msg(strstr(err.text, "model.layers.0.mlp.gate_proj") && strstr(err.text, "512"),
                  "%s", err.text);
}
END_TEST

START_TEST(test_hostile_truncated)
{
    const char *dir = make_dir("truncated");
    char p[600];
    nvfp4_error err;

    snprintf(p, sizeof(p), "%s/model.safetensors", dir);
    copy_file(tdata("models/llama/model.safetensors"), p, 100000);
    ck_assert_int_ne(open_dir(dir, &err), NVFP4_OK);
    ck_assert_msg(strstr(err.text, "model.safetensors"), "%s", err.text);
}
END_TEST

START_TEST(test_hostile_files)
{
    const char *dir = make_dir("nofiles");
    char p[600];
    nvfp4_error err;

    snprintf(p, sizeof(p), "%s/model.safetensors", dir);
    unlink(p);
    ck_assert_int_eq(open_dir(dir, &err), NVFP4_ERR_NOT_FOUND);
    ck_assert_msg(strstr(err.text, ".safetensors"), "%s", err.text);

    dir = make_dir("noconfig");
    snprintf(p, sizeof(p), "%s/config.json", dir);
    unlink(p);
    ck_assert_int_eq(open_dir(dir, &err), NVFP4_ERR_NOT_FOUND);
    ck_assert_msg(strstr(err.text, "config.json"), "%s", err.text);

    dir = make_dir("arch");
    set_config(dir, "architectures", json_pack("[s]", "GPT2LMHeadModel"));
    ck_assert_int_eq(open_dir(dir, &err), NVFP4_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.text, "GPT2LMHeadModel") && strstr(err.text, "LlamaForCausalLM"),
                  "%s", err.text);

    dir = make_dir("nolayers");
    set_config(dir, "num_hidden_layers", NULL);
    ck_assert_int_eq(open_dir(dir, &err), NVFP4_ERR_NOT_FOUND);
    ck_assert_msg(strstr(err.text, "num_hidden_layers"), "%s", err.text);

    dir = make_dir("badtype");
    set_config(dir, "hidden_size", json_string("big"));
    ck_assert_int_eq(open_dir(dir, &err), NVFP4_ERR_TYPE);
    ck_assert_msg(strstr(err.text, "hidden_size"), "%s", err.text);

    ck_assert_int_eq(open_dir(tdata("format/malformed_sharded/shape_vs_config"), &err),
                     NVFP4_ERR_BAD_SHAPE);
    ck_assert_msg(strstr(err.text, "model.embed_tokens.weight"), "%s", err.text);
}
END_TEST

/* The spec §8 hazard corpus (tests/data/hazards: edited copies of a real
 * Quark export): each must load and run, or fail naming the tensor. */
START_TEST(test_hazards)
{
    json_t *root = tload_json("hazards.json");
    json_t *cases = json_object_get(root, "cases");
    size_t i;
    json_t *c;

    ck_assert_uint_gt(json_array_size(cases), 0);
    json_array_foreach(cases, i, c) {
        const char *dir = json_string_value(json_object_get(c, "dir"));
        const char *expected = json_string_value(json_object_get(c, "expected"));
        const char *tensor = json_string_value(json_object_get(c, "tensor"));
        char rel[256];
        nvfp4_error err;
        nvfp4_status st;

        snprintf(rel, sizeof(rel), "hazards/%s", dir);
        st = open_dir(tdata(rel), &err);
        if (!strcmp(expected, "ok")) {
            ck_assert_msg(st == NVFP4_OK, "%s must load: %s", dir, err.text);
            continue;
        }
        ck_assert_msg(st != NVFP4_OK, "%s (%s) loaded", dir, expected);
        if (!strcmp(expected, "FUSE_SCALE_MISMATCH"))
            ck_assert_int_eq(st, NVFP4_ERR_SCALE_MISMATCH);
        else if (!strcmp(expected, "MISSING_TENSOR"))
            ck_assert_int_eq(st, NVFP4_ERR_NOT_FOUND);
        else if (!strcmp(expected, "BAD_DTYPE"))
            ck_assert_int_eq(st, NVFP4_ERR_BAD_DTYPE);
        else if (!strcmp(expected, "BAD_SHAPE"))
            ck_assert_int_eq(st, NVFP4_ERR_BAD_SHAPE);
        if (tensor && strcmp(expected, "FUSE_SCALE_MISMATCH") != 0) {
            /* the message names the tensor (for a missing one: its name or its layer) */
            char layer[256];
            char *dot;
            snprintf(layer, sizeof(layer), "%s", tensor);
            dot = strrchr(layer, '.');
            if (dot)
                *dot = '\0';
            ck_assert_msg(strstr(err.text, tensor) || strstr(err.text, layer),
                          "%s: message does not name %s: %s", dir, tensor, err.text);
        }
    }
    json_decref(root);
}
END_TEST

/* Spec §8 "missing expert scales in MoE checkpoints": the real Qwen3-MoE
 * export with one expert's up_proj weight_scale_2 removed
 * (hazards/moe_missing_expert_ws2, gen_hazards.py) must be refused as
 * NOT_FOUND, naming that exact tensor (not just its layer or expert). */
START_TEST(test_moe_missing_expert_scale)
{
    json_t *root = tload_json("hazards.json"), *c, *found = NULL;
    size_t i;
    const char *tensor;
    nvfp4_model_options o;
    nvfp4_model *m;
    nvfp4_error err;

    json_array_foreach(json_object_get(root, "cases"), i, c)
        if (!strcmp(json_string_value(json_object_get(c, "dir")), "moe_missing_expert_ws2"))
            found = c;
    ck_assert_msg(found != NULL, "hazards.json lacks moe_missing_expert_ws2");
    tensor = json_string_value(json_object_get(found, "tensor"));
    ck_assert_str_eq(tensor, "model.layers.1.mlp.experts.5.up_proj.weight_scale_2");
    nvfp4_model_options_init(&o);
    o.backend = "cpu";
    o.quiet = 1;
    for (int rescale = 0; rescale <= 1; rescale++) {    /* the opt-in rescale must not paper over it */
        o.rescale_fused = rescale;
        nvfp4_error_clear(&err);
        m = nvfp4_model_open(tdata("hazards/moe_missing_expert_ws2"), &o, &err);
        ck_assert_msg(m == NULL, "loaded a MoE checkpoint without %s (rescale %d)", tensor, rescale);
        ck_assert_int_eq(err.status, NVFP4_ERR_NOT_FOUND);
        ck_assert_msg(strstr(err.text, tensor) != NULL, "message does not name %s: %s", tensor, err.text);
    }
    json_decref(root);
}
END_TEST

/* A real Quark MXFP4 export is recognised and refused, saying what it is. */
START_TEST(test_mxfp4_refused)
{
    nvfp4_error err;
    nvfp4_model *m = open_model("llama_mxfp4", 0, &err);

    ck_assert_ptr_null(m);
    ck_assert_int_eq(err.status, NVFP4_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.text, "MXFP4") && strstr(err.text, "NVFP4"), "%s", err.text);
}
END_TEST

START_TEST(test_bad_tokens)
{
    nvfp4_error err;
    nvfp4_model *m = open_model("llama", 0, &err);
    int32_t bad[2] = {1, 100000};
    float *logits = malloc(2 * 320 * sizeof(float));

    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(nvfp4_model_forward(m, bad, 2, 0, logits, 0, &err), NVFP4_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "100000"), "%s", err.text);
    ck_assert_int_eq(nvfp4_model_forward(m, bad, 1, 64, logits, 0, &err), NVFP4_ERR_INVALID);
    free(logits);
    nvfp4_model_free(m);
}
END_TEST

/* The command line: refused models and hostile input exit 1, never a signal. */
/* FP8 KV cache (Quark kv_cache_scheme "fp8"), and gpt-oss (its sliding
 * window moving past the prompt): after the prompt, the decode tokens one
 * at a time through the paged cache, against the reference's logits
 * through transformers' DynamicCache (logits_decode.f32). */
static const char *const kv_models[] = {"llama_kvfp8", "qwen3_kvfp8", "gpt_oss"};
#define N_KV_FP8 2 /* the first N_KV_FP8 have an FP8 KV cache */

START_TEST(test_kvfp8_decode)
{
    const char *name = kv_models[_i];
    json_t *toks;
    nvfp4_error err;
    fixture f;
    nvfp4_model *m;
    float *want, *got;
    size_t len, S;
    char rel[128], what[64];

    fixture_load(name, &f);
    toks = json_object_get(json_object_get(f.ref, "kv_cache"), "decode_tokens");
    if (!toks) /* a decode reference without a KV scheme */
        toks = json_object_get(json_object_get(f.ref, "decode"), "decode_tokens");
    S = json_array_size(toks);
    ck_assert_uint_ge(S, 4);
    snprintf(rel, sizeof(rel), "models/%s/logits_decode.f32", name);
    want = tload_file(rel, &len);
    ck_assert_uint_eq(len, S * f.V * sizeof(float));
    got = malloc(S * f.V * sizeof(float));
    m = open_model(name, 0, &err);
    ck_assert_msg(m != NULL, "%s: %s", name, err.text);
    ck_assert_int_eq(nvfp4_model_forward(m, f.tokens, f.T, 0, got, 1, &err), NVFP4_OK);
    for (size_t i = 0; i < S; i++) {
        int32_t t = (int32_t)json_integer_value(json_array_get(toks, i));
        ck_assert_msg(nvfp4_model_forward(m, &t, 1, f.T + i, got + i * f.V, 1, &err) ==
                          NVFP4_OK, "%s: decode %zu: %s", name, i, err.text);
    }
    snprintf(what, sizeof(what), "%s (paged decode)", name);
    compare_logits(what, got, want, S * f.V, LOGIT_TOL);
    free(got);
    free(want);
    nvfp4_model_free(m);
    fixture_free(&f);
}
END_TEST

/* The reference without the KV quantization is far from it: the fixture
 * tests above would fail if the scales were not applied. */
START_TEST(test_kvfp8_matters)
{
    for (size_t i = 0; i < N_KV_FP8; i++) {
        fixture f;
        double d;
        fixture_load(kv_models[i], &f);
        d = json_real_value(json_object_get(json_object_get(f.ref, "kv_cache"),
                                            "emul_without_kv_qdq_max_abs_diff"));
        ck_assert_msg(d > 100 * LOGIT_TOL, "%s: the KV quantization moves logits by %g only",
                      kv_models[i], d);
        fixture_free(&f);
    }
}
END_TEST

/* A NaN or infinity deep in a large unquantized tensor (the finiteness scan
 * reads stretches of elements whole, then the one with a hit element by
 * element): the error names the tensor and the first bad element's index,
 * the index poked here, at a stretch's first element and further on with
 * an infinity after it. */
START_TEST(test_nonfinite_far)
{
    static const char *const name = "model.embed_tokens.weight";
    static const struct {
        uint64_t at, also;
    } cases[] = {{4096, 4096}, {30001, 30007}, {40959, 40959}};
    nvfp4_error err;

    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char tag[32], want[64];
        const char *dir;
        nvfp4_checkpoint *ck;
        const nvfp4_tensor *t;
        size_t nbytes;
        uint8_t *b;

        snprintf(tag, sizeof(tag), "nanfar%zu", c);
        dir = make_dir_of("llama", tag);
        ck = nvfp4_checkpoint_open(dir, &err);
        ck_assert_msg(ck != NULL, "%s", err.text);
        ck_assert_int_eq(nvfp4_checkpoint_get(ck, name, &t, &err), NVFP4_OK);
        ck_assert_int_eq(t->dtype, NVFP4_DTYPE_BF16);
        ck_assert_uint_gt(t->numel, cases[c].at);
        nbytes = (size_t)t->nbytes;
        b = malloc(nbytes);
        memcpy(b, t->data, nbytes);
        nvfp4_checkpoint_free(ck);
        b[2 * cases[c].also] = 0x80; /* +inf: 0x7F80 */
        b[2 * cases[c].also + 1] = 0x7F;
        b[2 * cases[c].at] = 0xC0; /* NaN: 0x7FC0 */
        b[2 * cases[c].at + 1] = 0x7F;
        poke_tensor(dir, name, b, nbytes);
        free(b);
        ck_assert_int_eq(open_dir(dir, &err), NVFP4_ERR_INVALID);
        snprintf(want, sizeof(want), "element %llu of", (unsigned long long)cases[c].at);
        ck_assert_msg(strstr(err.text, want) && strstr(err.text, name), "%s", err.text);
    }
}
END_TEST

/* Finite weights whose products overflow float32: row 77 of lm_head set to
 * the largest finite bf16 (3.39e38; the checks at open pass it), so that
 * token 77's logit is an infinity or NaN wherever the final hidden state is
 * not zero; token 3's embedding set to zeros, so that at position 0 (token
 * 3) every layer's input and output, and so every logit, is 0.  A call
 * fails with NVFP4_ERR_NONFINITE naming token 77 and the first position
 * past 0 whose logits were asked for (16 tokens: 16 x 320 logits, more than
 * one stretch of the scan), and leaves the sequence as it was. */
START_TEST(test_nonfinite_logits)
{
    static const char *const name = "lm_head.weight";
    const char *dir = make_dir_of("llama", "nanlogit");
    nvfp4_model_options o;
    nvfp4_checkpoint *ck;
    const nvfp4_tensor *t;
    nvfp4_error err;
    nvfp4_model *m;
    int32_t tokens[16];
    float *logits;
    size_t nbytes, vocab;
    uint8_t *b;

    ck = nvfp4_checkpoint_open(dir, &err);
    ck_assert_msg(ck != NULL, "%s", err.text);
    ck_assert_int_eq(nvfp4_checkpoint_get(ck, name, &t, &err), NVFP4_OK);
    ck_assert_int_eq(t->dtype, NVFP4_DTYPE_BF16);
    ck_assert_int_eq(t->ndim, 2);
    ck_assert_int_gt(t->shape[0], 77);
    vocab = (size_t)t->shape[0];
    nbytes = (size_t)t->nbytes;
    b = malloc(nbytes);
    memcpy(b, t->data, nbytes);
    for (int64_t i = 0; i < t->shape[1]; i++) {
        b[2 * (77 * (size_t)t->shape[1] + (size_t)i)] = 0x7F; /* bf16 0x7F7F */
        b[2 * (77 * (size_t)t->shape[1] + (size_t)i) + 1] = 0x7F;
    }
    poke_tensor(dir, name, b, nbytes);
    free(b);
    ck_assert_int_eq(nvfp4_checkpoint_get(ck, "model.embed_tokens.weight", &t, &err), NVFP4_OK);
    ck_assert_int_eq(t->dtype, NVFP4_DTYPE_BF16);
    nbytes = (size_t)t->nbytes;
    b = malloc(nbytes);
    memcpy(b, t->data, nbytes);
    memset(b + 2 * 3 * (size_t)t->shape[1], 0, 2 * (size_t)t->shape[1]);
    nvfp4_checkpoint_free(ck);
    poke_tensor(dir, "model.embed_tokens.weight", b, nbytes);
    free(b);

    nvfp4_model_options_init(&o);
    o.backend = "cpu";
    o.quiet = 1;
    m = nvfp4_model_open(dir, &o, &err);
    ck_assert_msg(m != NULL, "%s", err.text);
    for (int i = 0; i < 16; i++)
        tokens[i] = 3 + 7 * i;
    logits = malloc(16 * vocab * sizeof(float));
    ck_assert_int_eq(nvfp4_model_forward(m, tokens, 16, 0, logits, 0, &err),
                     NVFP4_ERR_NONFINITE);
    ck_assert_msg(strstr(err.text, "the logit of token 77 at position 1 is "), "%s", err.text);
    /* the failed call kept no token: position 0 again, the last one's only */
    ck_assert_int_eq(nvfp4_model_forward(m, tokens, 16, 0, logits, 1, &err),
                     NVFP4_ERR_NONFINITE);
    ck_assert_msg(strstr(err.text, "the logit of token 77 at position 15 is "), "%s", err.text);
    /* no logits asked for: nothing to check, the tokens are kept */
    ck_assert_int_eq(nvfp4_model_forward(m, tokens, 4, 0, NULL, 0, &err), NVFP4_OK);
    ck_assert_int_eq(nvfp4_model_forward(m, tokens + 4, 2, 4, logits, 0, &err),
                     NVFP4_ERR_NONFINITE);
    ck_assert_msg(strstr(err.text, "the logit of token 77 at position 4 is "), "%s", err.text);
    free(logits);
    nvfp4_model_free(m);
}
END_TEST

/* Bad KV-cache scales: missing, zero, negative, NaN, infinite, not a
 * scalar, and a kv_cache_quant_config that is not static fp8 per-tensor:
 * each refused naming the tensor or the key. */
START_TEST(test_kvfp8_bad_scales)
{
    static const uint16_t bad[] = {0x0000, 0xBC00 /* -0.0078 */, 0x7FC0 /* NaN */,
                                   0x7F80 /* inf */};
    const char *ks = "model.layers.1.self_attn.k_proj.output_scale";
    const char *vs = "model.layers.0.self_attn.v_proj.output_scale";
    const char *dir;
    nvfp4_error err;
    char tag[32];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t b[2] = {(uint8_t)(bad[i] & 0xFF), (uint8_t)(bad[i] >> 8)};
        snprintf(tag, sizeof(tag), "kvbad%zu", i);
        dir = make_dir_of("llama_kvfp8", tag);
        poke_tensor(dir, i % 2 ? vs : ks, b, 2);
        ck_assert_int_eq(open_dir(dir, &err), NVFP4_ERR_INVALID);
        /* (NaN and infinity are caught first by the finiteness check of
         * every unquantized tensor, naming it too) */
        ck_assert_msg(strstr(err.text, i % 2 ? vs : ks) &&
                          (i >= 2 || strstr(err.text, "finite value > 0")),
                      "%s", err.text);
    }
    {
        static const char *const drop[] = {"model.layers.1.self_attn.v_proj.output_scale",
                                           NULL};
        dir = make_dir_of("llama_kvfp8", "kvmissing");
        drop_tensors(dir, drop);
        ck_assert_int_eq(open_dir(dir, &err), NVFP4_ERR_NOT_FOUND);
        ck_assert_msg(strstr(err.text, drop[0]), "%s", err.text);
    }
    {   /* an int8 KV cache is refused naming the config key */
        char p[600];
        json_t *c, *ot;
        dir = make_dir_of("llama_kvfp8", "kvint8");
        snprintf(p, sizeof(p), "%s/config.json", dir);
        ck_assert_ptr_nonnull(c = json_load_file(p, 0, NULL));
        ot = json_object_get(json_object_get(json_object_get(json_object_get(
                                 c, "quantization_config"), "kv_cache_quant_config"),
                                 "*v_proj"), "output_tensors");
        ck_assert_ptr_nonnull(ot);
        json_object_set_new(ot, "dtype", json_string("int8"));
        ck_assert_int_eq(json_dump_file(c, p, JSON_INDENT(1)), 0);
        json_decref(c);
        ck_assert_int_eq(open_dir(dir, &err), NVFP4_ERR_UNSUPPORTED);
        ck_assert_msg(strstr(err.text, "kv_cache_quant_config.*v_proj") &&
                          strstr(err.text, "int8"), "%s", err.text);
    }
}
END_TEST

START_TEST(test_tool)
{
    char args[1024];
    char out[600];

    snprintf(out, sizeof(out), "%s/logits.f32", tmpdir);
    for (size_t i = 0; i < NREF; i++) {
        snprintf(args, sizeof(args), "logits '%s/models/%s' --tokens 1,2,3 --out '%s'",
                 TEST_DATA_DIR, refused_models[i], out);
        ck_assert_int_eq(trun_status(args), 1);
    }
    snprintf(args, sizeof(args), "logits '%s/models/llama' --tokens 1,2,3 --out '%s'",
             TEST_DATA_DIR, out);
    ck_assert_int_eq(trun_status(args), 0);
    snprintf(args, sizeof(args), "logits '%s/models/llama' --tokens 1,x --out '%s'",
             TEST_DATA_DIR, out);
    ck_assert_int_eq(trun_status(args), 1);
    snprintf(args, sizeof(args), "logits '%s/models/llama' --tokens 1,99999 --out '%s'",
             TEST_DATA_DIR, out);
    ck_assert_int_eq(trun_status(args), 1);
    snprintf(args, sizeof(args), "generate '%s/models/llama' --prompt hi", TEST_DATA_DIR);
    ck_assert_int_eq(trun_status(args), 1);  /* no tokenizer.json: a clear error */
    ck_assert_int_eq(trun_status("ppl"), 2);
    ck_assert_int_eq(trun_status("generate --bogus"), 2);
    ck_assert_int_eq(trun_status("logits /nonexistent --tokens 1 --out /dev/null"), 1);
    ck_assert_int_eq(trun_status("ppl --help"), 0);
    unlink(out);
}
END_TEST

/* The tensors (name, dtype, shape) of a checkpoint, as one JSON object. */
static json_t *tensor_listing(const char *path)
{
    nvfp4_error err;
    nvfp4_checkpoint *ck = nvfp4_checkpoint_open(path, &err);
    json_t *o = json_object();

    ck_assert_msg(ck != NULL, "%s", err.text);
    for (size_t i = 0; i < nvfp4_checkpoint_count(ck); i++) {
        const char *name = nvfp4_checkpoint_name(ck, i);
        const nvfp4_tensor *t;
        json_t *shape = json_array();

        ck_assert_int_eq(nvfp4_checkpoint_get(ck, name, &t, &err), NVFP4_OK);
        for (int d = 0; d < t->ndim; d++)
            json_array_append_new(shape, json_integer(t->shape[d]));
        json_object_set_new(o, name, json_pack("{s:s, s:o}", "dtype",
                                               nvfp4_dtype_name(t->dtype), "shape", shape));
    }
    nvfp4_checkpoint_free(ck);
    return o;
}

/* `nvfp4 synth --like` writes what amd-quark exports for the same
 * architecture: the same tensors with the same dtypes and shapes, and the
 * same quantization_config; the model it writes loads and runs.  Sharded
 * output (an index and several files) loads the same. */
static void synth_like_case(const char *name, int sharded)
{
    char args[2048], dir[600], rel[256];
    json_t *want, *got, *qwant, *qgot;
    nvfp4_model *m;
    nvfp4_error err;
    fixture f;
    float *logits;
    nvfp4_model_options o;

    snprintf(dir, sizeof(dir), "%s/synth-%s", tmpdir, name);
    snprintf(args, sizeof(args), "synth --like '%s/models/%s/config.json' --scheme %s -o '%s' %s",
             TEST_DATA_DIR, name, strstr(name, "w4a16") ? "w4a16" : "w4a4", dir,
             sharded ? "--shard-size 40KB" : "");
    ck_assert_int_eq(trun_status(args), 0);
    snprintf(rel, sizeof(rel), "models/%s", name);
    want = tensor_listing(tdata(rel));
    got = tensor_listing(dir);
    ck_assert_msg(json_equal(want, got), "%s: synth's tensors differ from Quark's export", name);
    snprintf(rel, sizeof(rel), "models/%s/config.json", name);
    qwant = tload_json(rel);
    snprintf(args, sizeof(args), "%s/config.json", dir);
    qgot = json_load_file(args, 0, NULL);
    ck_assert_ptr_nonnull(qgot);
    ck_assert_msg(json_equal(json_object_get(qwant, "quantization_config"),
                             json_object_get(qgot, "quantization_config")),
                  "%s: synth's quantization_config differs from Quark's", name);
    if (sharded) {
        snprintf(args, sizeof(args), "%s/model.safetensors.index.json", dir);
        ck_assert_msg(access(args, F_OK) == 0, "%s: no index for a sharded synth", name);
    }
    /* it runs: finite logits */
    fixture_load(name, &f);
    nvfp4_model_options_init(&o);
    o.backend = "cpu";
    o.quiet = 1;
    o.max_ctx = 64;
    ck_assert_msg((m = nvfp4_model_open(dir, &o, &err)) != NULL, "%s: %s", name, err.text);
    logits = malloc(f.T * f.V * sizeof(float));
    ck_assert_int_eq(nvfp4_model_forward(m, f.tokens, f.T, 0, logits, 0, &err), NVFP4_OK);
    for (size_t i = 0; i < f.T * f.V; i++)
        ck_assert_msg(isfinite(logits[i]), "%s: synth model logit %zu not finite", name, i);
    free(logits);
    nvfp4_model_free(m);
    fixture_free(&f);
    json_decref(want);
    json_decref(got);
    json_decref(qwant);
    json_decref(qgot);
}

START_TEST(test_synth_like_quark)
{
    synth_like_case(ok_models[_i], _i % 2);
}
END_TEST

/* The same for the architectures whose layers synth writes beside the
 * Llama ones: Gemma 3 (four norms, q/k norms, tied embeddings), gpt-oss
 * (biases, sinks, the biased router, fused gate_up_proj per expert) and
 * DeepSeek-V3/V2 (BF16 latent attention, routers), against gen_models.py's
 * Quark exports. */
static const char *const synth_arch_models[] = {"gemma3", "gpt_oss", "deepseek_v3",
                                                "deepseek_v2"};

START_TEST(test_synth_like_quark_arch)
{
    synth_like_case(synth_arch_models[_i], _i % 2);
}
END_TEST

/* synth and bench on bad input: usage errors exit 2, bad files exit 1. */
START_TEST(test_synth_bench_errors)
{
    char args[2048], cfg[600];
    FILE *f;

    ck_assert_int_eq(trun_status("synth --preset nope -o /tmp/x"), 2);
    {   /* the usage error lists the presets, the new ones too */
        char *out;
        ck_assert_int_eq(trun_tool("synth --preset nope -o /tmp/x", 1, &out), 2);
        ck_assert_msg(strstr(out, "deepseek-v2-lite") && strstr(out, "gemma-3-4b") &&
                      strstr(out, "gpt-oss-20b"), "%s", out);
        free(out);
    }
    ck_assert_int_eq(trun_status("synth -o /tmp/x"), 2);
    ck_assert_int_eq(trun_status("synth --preset smollm2-135m"), 2);
    ck_assert_int_eq(trun_status("synth --preset smollm2-135m --scheme w8 -o /tmp/x"), 2);
    ck_assert_int_eq(trun_status("synth --like /nonexistent/config.json -o /tmp/x"), 1);
    snprintf(cfg, sizeof(cfg), "%s/gpt2.json", tmpdir);
    ck_assert_ptr_nonnull(f = fopen(cfg, "w"));
    fputs("{\"architectures\": [\"GPT2LMHeadModel\"], \"hidden_size\": 64}", f);
    fclose(f);
    snprintf(args, sizeof(args), "synth --like '%s' -o '%s/gpt2'", cfg, tmpdir);
    ck_assert_int_eq(trun_status(args), 1);
    ck_assert_ptr_nonnull(f = fopen(cfg, "w"));
    fputs("{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64}", f);
    fclose(f);
    {   /* intermediate_size missing: the message names the file and the key */
        char *out;
        ck_assert_int_eq(trun_tool(args, 1, &out), 1);
        ck_assert_msg(strstr(out, cfg) && strstr(out, "intermediate_size"), "%s", out);
        free(out);
    }
    ck_assert_int_eq(trun_status("bench /nonexistent"), 1);
    ck_assert_int_eq(trun_status("bench"), 2);
    snprintf(args, sizeof(args), "bench '%s/models/llama' -p 0", TEST_DATA_DIR);
    ck_assert_int_eq(trun_status(args), 2);
    snprintf(args, sizeof(args), "bench '%s/models/llama' -p 8 -n 4 -r 1 --json", TEST_DATA_DIR);
    ck_assert_int_eq(trun_status(args), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("fixtures"), *th = tcase_create("hostile");
    SRunner *sr;
    int nf;
    char cmd[300];

    snprintf(tmpdir, sizeof(tmpdir), "/tmp/nvfp4-test-model-XXXXXX");
    if (!mkdtemp(tmpdir))
        return 99;
    tcase_set_timeout(tc, 120);
    tcase_set_timeout(th, 120);
    tcase_add_loop_test(tc, test_logits_prefill, 0, (int)NOK);
    tcase_add_loop_test(tc, test_logits_decode, 0, (int)NOK);
    tcase_add_loop_test(tc, test_greedy, 0, (int)NOK);
    tcase_add_test(tc, test_longrope_long);
    tcase_add_test(tc, test_perplexity_one_window);
    tcase_add_test(tc, test_perplexity_cancel);
    tcase_add_loop_test(tc, test_refused, 0, (int)NREF);
    tcase_add_test(tc, test_refused_layers);
    tcase_add_test(th, test_hostile_missing_tensors);
    tcase_add_test(th, test_hostile_missing_scale);
    tcase_add_test(th, test_hostile_config_disagrees);
    tcase_add_test(th, test_hostile_truncated);
    tcase_add_test(th, test_hostile_files);
    tcase_add_test(th, test_bad_tokens);
    tcase_add_test(th, test_hazards);
    tcase_add_test(th, test_moe_missing_expert_scale);
    tcase_add_test(th, test_mxfp4_refused);
    tcase_add_test(th, test_tool);
    tcase_add_loop_test(tc, test_kvfp8_decode, 0,
                        (int)(sizeof(kv_models) / sizeof(kv_models[0])));
    tcase_add_test(tc, test_kvfp8_matters);
    tcase_add_test(th, test_kvfp8_bad_scales);
    tcase_add_test(th, test_nonfinite_far);
    tcase_add_test(th, test_nonfinite_logits);
    tcase_add_loop_test(tc, test_synth_like_quark, 0, (int)NOK_QUARK);
    tcase_add_loop_test(tc, test_synth_like_quark_arch, 0,
                        (int)(sizeof(synth_arch_models) / sizeof(synth_arch_models[0])));
    tcase_add_test(th, test_synth_bench_errors);
    suite_add_tcase(s, tc);
    suite_add_tcase(s, th);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return nf ? 1 : 0;
}
