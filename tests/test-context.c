/* SPDX-License-Identifier: MIT */
/*
 * Contexts on the CPU backend: many sequences on one model.
 *
 *   batches      random batches (1..16 entries, prefill chunks and decode
 *                tokens mixed, random interleavings, fixed seed) give every
 *                sequence logits bit-identical (memcmp) to the sequence run
 *                alone in one prefill, at 1 and 2 threads, and the fixture
 *                sequences match the PyTorch reference at test-model's 1e-4
 *   fork         a fork continues exactly as a fresh sequence fed the same
 *                prefix (both sides of a shared partial block written)
 *   truncate     truncate then re-feed equals never having fed
 *   kv full      a batch the pool cannot hold is NVFP4_ERR_KV_FULL, changes
 *                nothing, and the context stays usable
 *   tools        nvfp4 bench --batch (JSON, aggregate decode rate, usage
 *                errors), nvfp4 logits against the reference
 *   kv dtype     FP8 / float32 KV pools (auto, fp8, f32): bytes per token
 *                against config.json, logits against the reference, bench's
 *                report and --kv-cache-dtype
 *   threads      two threads with a context each on one shared model equal
 *                the sequential run (also under ThreadSanitizer in
 *                scripts/test.sh: CK_RUN_CASE=threads)
 */
#include "config.h"

#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nvfp4/model.h>

#include "modelref.h"
#include "testutil.h"
#include "toolrun.h"

#define LOGIT_TOL 1e-4

static nvfp4_model *open_cpu(const char *name, int threads)
{
    char rel[256];
    nvfp4_model_options o;
    nvfp4_error err;
    nvfp4_model *m;

    nvfp4_model_options_init(&o);
    o.backend = "cpu";
    o.quiet = 1;
    o.max_ctx = 64;
    o.threads = threads;
    snprintf(rel, sizeof(rel), "models/%s", name);
    m = nvfp4_model_open(tdata(rel), &o, &err);
    ck_assert_msg(m != NULL, "%s: %s", name, err.text);
    return m;
}

static nvfp4_context *new_ctx(nvfp4_model *m, size_t kv_tokens, size_t max_batch)
{
    nvfp4_context_options o;
    nvfp4_error err;
    nvfp4_context *c;

    nvfp4_context_options_init(&o);
    o.kv_tokens = kv_tokens;
    o.max_batch_tokens = max_batch;
    c = nvfp4_context_create(m, &o, &err);
    ck_assert_msg(c != NULL, "%s", err.text);
    return c;
}

/* TOKS[0..n) alone in one prefill, every row's logits into OUT. */
static void run_alone(nvfp4_context *c, const int32_t *toks, size_t n, float *out)
{
    nvfp4_batch_entry b = {0};
    nvfp4_error err;

    ck_assert_int_eq(nvfp4_seq_create(c, &b.seq, &err), NVFP4_OK);
    b.tokens = toks;
    b.n_tokens = n;
    b.logits = NVFP4_LOGITS_ALL;
    b.out = out;
    ck_assert_msg(nvfp4_context_run(c, &b, 1, &err) == NVFP4_OK, "%s", err.text);
    nvfp4_seq_free(c, b.seq);
}

/* Feed TOKS to SEQ as one entry; logits of all rows into OUT (or none). */
static void feed(nvfp4_context *c, nvfp4_seq s, const int32_t *toks, size_t n, float *out)
{
    nvfp4_batch_entry b = {0};
    nvfp4_error err;

    b.seq = s;
    b.tokens = toks;
    b.n_tokens = n;
    b.logits = out ? NVFP4_LOGITS_ALL : NVFP4_LOGITS_NONE;
    b.out = out;
    ck_assert_msg(nvfp4_context_run(c, &b, 1, &err) == NVFP4_OK, "%s", err.text);
}

/* Rows of J that came back, against the solo run, bit for bit. */
static void assert_rows_equal(const char *what, const batch_job *j, const float *want,
                              size_t V)
{
    for (size_t t = 0; t < j->n; t++)
        if (j->have[t])
            ck_assert_msg(memcmp(j->got + t * V, want + t * V, V * sizeof(float)) == 0,
                          "%s: row %zu differs from the sequence run alone", what, t);
}

#define NSEQ 12

/* ISA: NVFP4_CPU_ISA for the backend (NULL: the best this CPU has, where the
 * fixtures also match the reference; the scalar path flips one E2M1 tie in
 * qwen2_moe, as test-model shows under NVFP4_CPU_ISA=scalar). */
static void batches_case(const char *name, int threads, uint64_t seed, const char *isa,
                         int rounds)
{
    const int ref = isa == NULL;
    fixture f;
    nvfp4_model *m;
    nvfp4_context *c;
    int32_t toks[NSEQ][32];
    size_t len[NSEQ];
    float *alone[NSEQ];
    batch_job jobs[NSEQ];
    uint64_t rng = seed;
    size_t steps = 0;
    char what[96];

    fixture_load(name, &f);
    ck_assert_uint_eq(f.T, 32);
    if (isa)
        setenv("NVFP4_CPU_ISA", isa, 1);
    else
        unsetenv("NVFP4_CPU_ISA");
    m = open_cpu(name, threads);
    c = new_ctx(m, NSEQ * 32, 256);
    /* even jobs: the fixture's tokens (reference logits); odd: random ids */
    for (size_t s = 0; s < NSEQ; s++) {
        len[s] = s % 2 == 0 ? f.T : 1 + (size_t)(mr_next(&rng) % f.T);
        for (size_t i = 0; i < len[s]; i++)
            toks[s][i] = s % 2 == 0 ? f.tokens[i] : (int32_t)(mr_next(&rng) % f.V);
        alone[s] = malloc(len[s] * f.V * sizeof(float));
        run_alone(c, toks[s], len[s], alone[s]);
        if (ref && s % 2 == 0) {
            snprintf(what, sizeof(what), "%s alone (threads %d)", name, threads);
            compare_logits(what, alone[s], f.logits, f.T * f.V, LOGIT_TOL);
        }
    }
    ck_assert_uint_eq(nvfp4_context_kv_free_blocks(c), nvfp4_context_kv_blocks(c));
    for (int round = 0; round < rounds; round++) {
        size_t maxb = 1 + (size_t)(mr_next(&rng) % 16);
        for (size_t s = 0; s < NSEQ; s++)
            batch_job_init(&jobs[s], toks[s], len[s], f.V);
        steps += run_random_batches(c, jobs, NSEQ, maxb, f.V, &rng);
        for (size_t s = 0; s < NSEQ; s++) {
            snprintf(what, sizeof(what), "%s round %d seq %zu", name, round, s);
            assert_rows_equal(what, &jobs[s], alone[s], f.V);
            if (ref && s % 2 == 0)
                ck_assert_double_le(batch_job_max_diff(&jobs[s], f.logits, f.V), LOGIT_TOL);
            batch_job_free(&jobs[s]);
        }
    }
    fprintf(stderr, "%-34s %zu random batches bit-identical to solo runs (threads %d, %s)\n",
            name, steps, threads, isa ? isa : "best ISA");
    ck_assert_uint_eq(nvfp4_context_kv_free_blocks(c), nvfp4_context_kv_blocks(c));
    for (size_t s = 0; s < NSEQ; s++)
        free(alone[s]);
    nvfp4_context_free(c);
    nvfp4_model_free(m);
    fixture_free(&f);
}

/* Under valgrind (scripts/test.sh sets NVFP4_TEST_QUICK=1) the loops over
 * every fixture model run the first four - dense, Qwen3 and both MoE kinds -
 * which reach every code path of a context; the plain and sanitizer passes
 * run them all. */
static int quick_skip(int i)
{
    return i >= 4 && getenv("NVFP4_TEST_QUICK") != NULL;
}

START_TEST(test_batches)
{
    static const char *const isas[] = {"avx512", "avx2", "scalar"};

    /* Under valgrind (NVFP4_TEST_QUICK) one round at 1 thread, and of the
     * ISA caps scalar only: valgrind's CPU has no AVX-512, so there the
     * avx512 and avx2 caps would run the best-ISA code once more. */
    const int quick = getenv("NVFP4_TEST_QUICK") != NULL;

    if (quick_skip(_i))
        return;

    batches_case(ok_models[_i], 1, 0x1234u + (uint64_t)_i, NULL, quick ? 1 : 3);
    batches_case(ok_models[_i], 2, 0x1234u + (uint64_t)_i, NULL, 1);
    for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++)
        if (!quick || strcmp(isas[i], "scalar") == 0)
            batches_case(ok_models[_i], 2, 0x5678u + (uint64_t)_i, isas[i], 1);
    unsetenv("NVFP4_CPU_ISA");
}
END_TEST

/* Batch-invariance across thread counts: solo logits at 1 and 2 threads. */
START_TEST(test_threads_invariant)
{
    const char *name = ok_models[_i];
    fixture f;
    nvfp4_model *m1, *m2;
    nvfp4_context *c1, *c2;
    float *a, *b;

    if (quick_skip(_i))
        return;
    fixture_load(name, &f);
    m1 = open_cpu(name, 1);
    m2 = open_cpu(name, 2);
    c1 = new_ctx(m1, 64, 64);
    c2 = new_ctx(m2, 64, 64);
    a = malloc(f.T * f.V * sizeof(float));
    b = malloc(f.T * f.V * sizeof(float));
    run_alone(c1, f.tokens, f.T, a);
    run_alone(c2, f.tokens, f.T, b);
    ck_assert_msg(memcmp(a, b, f.T * f.V * sizeof(float)) == 0, "%s: 1 vs 2 threads", name);
    free(a);
    free(b);
    nvfp4_context_free(c1);
    nvfp4_context_free(c2);
    nvfp4_model_free(m1);
    nvfp4_model_free(m2);
    fixture_free(&f);
}
END_TEST

/* Fork at PREFIX (a partial block when prefix % 16 != 0): parent and child
 * continue differently; each equals a fresh sequence fed the same tokens. */
static void fork_case(nvfp4_model *m, const fixture *f, size_t prefix)
{
    nvfp4_context *c = new_ctx(m, 8 * 64, 64);
    int32_t x[32], y[32];
    size_t nx = f->T - prefix, V = f->V;
    float *got = malloc(64 * V * sizeof(float)), *want = malloc(64 * V * sizeof(float));
    nvfp4_seq p, ch;
    nvfp4_error err;
    size_t free0;

    for (size_t i = 0; i < nx; i++) {
        x[i] = f->tokens[prefix + i];
        y[i] = (int32_t)((f->tokens[prefix + i] * 7 + 3) % (int32_t)V);
    }
    ck_assert_int_eq(nvfp4_seq_create(c, &p, &err), NVFP4_OK);
    feed(c, p, f->tokens, prefix, NULL);
    free0 = nvfp4_context_kv_free_blocks(c);
    ck_assert_int_eq(nvfp4_seq_fork(c, p, &ch, &err), NVFP4_OK);
    ck_assert_uint_eq(nvfp4_seq_length(c, ch), prefix);
    /* sharing costs no block */
    ck_assert_uint_eq(nvfp4_context_kv_free_blocks(c), free0);
    /* the child writes first into the shared partial block, then the parent */
    feed(c, ch, y, nx, got);
    {
        int32_t all[64];
        memcpy(all, f->tokens, prefix * sizeof(int32_t));
        memcpy(all + prefix, y, nx * sizeof(int32_t));
        run_alone(c, all, f->T, want);
        ck_assert_msg(memcmp(got, want + prefix * V, nx * V * sizeof(float)) == 0,
                      "fork at %zu: the child differs from a fresh sequence", prefix);
    }
    feed(c, p, x, nx, got);
    run_alone(c, f->tokens, f->T, want);
    ck_assert_msg(memcmp(got, want + prefix * V, nx * V * sizeof(float)) == 0,
                  "fork at %zu: the parent differs from a fresh sequence", prefix);
    ck_assert_double_le(logits_max_diff("fork parent", got, f->logits + prefix * V, nx * V,
                                        NULL),
                        LOGIT_TOL);
    /* fork of a fork, both decoding in one batch */
    {
        nvfp4_seq g;
        nvfp4_batch_entry b[2] = {{0}};
        float *g1 = malloc(V * sizeof(float)), *g2 = malloc(V * sizeof(float));
        ck_assert_int_eq(nvfp4_seq_truncate(c, ch, prefix, &err), NVFP4_OK);
        ck_assert_int_eq(nvfp4_seq_fork(c, ch, &g, &err), NVFP4_OK);
        b[0].seq = ch;
        b[1].seq = g;
        b[0].tokens = b[1].tokens = x;
        b[0].n_tokens = b[1].n_tokens = 1;
        b[0].logits = b[1].logits = NVFP4_LOGITS_LAST;
        b[0].out = g1;
        b[1].out = g2;
        ck_assert_int_eq(nvfp4_context_run(c, b, 2, &err), NVFP4_OK);
        run_alone(c, f->tokens, prefix + 1, want);
        ck_assert(memcmp(g1, want + prefix * V, V * sizeof(float)) == 0);
        ck_assert(memcmp(g2, want + prefix * V, V * sizeof(float)) == 0);
        nvfp4_seq_free(c, g);
        free(g1);
        free(g2);
    }
    nvfp4_seq_free(c, p);
    nvfp4_seq_free(c, ch);
    ck_assert_uint_eq(nvfp4_context_kv_free_blocks(c), nvfp4_context_kv_blocks(c));
    free(got);
    free(want);
    nvfp4_context_free(c);
}

START_TEST(test_fork)
{
    const char *name = ok_models[_i];
    fixture f;
    nvfp4_model *m;

    if (quick_skip(_i))
        return;
    fixture_load(name, &f);
    m = open_cpu(name, 1);
    fork_case(m, &f, 5);
    fork_case(m, &f, 16);
    fork_case(m, &f, 21);
    nvfp4_model_free(m);
    fixture_free(&f);
}
END_TEST

/* Truncate then re-feed equals never having fed the cut tokens. */
START_TEST(test_truncate)
{
    const char *name = ok_models[_i];
    fixture f;
    nvfp4_model *m = NULL;
    nvfp4_context *c;
    int32_t junk[20];
    float *got, *want;
    nvfp4_seq s;
    nvfp4_error err;
    const size_t cuts[] = {0, 7, 16, 19};

    if (quick_skip(_i))
        return;
    fixture_load(name, &f);
    m = open_cpu(name, 1);
    c = new_ctx(m, 64, 64);
    got = malloc(f.T * f.V * sizeof(float));
    want = malloc(f.T * f.V * sizeof(float));
    run_alone(c, f.tokens, f.T, want);
    for (size_t i = 0; i < 20; i++)
        junk[i] = (int32_t)((i * 37 + 11) % f.V);
    for (size_t k = 0; k < sizeof(cuts) / sizeof(cuts[0]); k++) {
        size_t cut = cuts[k];
        ck_assert_int_eq(nvfp4_seq_create(c, &s, &err), NVFP4_OK);
        feed(c, s, f.tokens, cut, NULL);
        feed(c, s, junk, 20, NULL);
        ck_assert_int_eq(nvfp4_seq_truncate(c, s, cut, &err), NVFP4_OK);
        ck_assert_uint_eq(nvfp4_seq_length(c, s), cut);
        ck_assert_int_eq(nvfp4_seq_truncate(c, s, cut + 1, &err), NVFP4_ERR_INVALID);
        feed(c, s, f.tokens + cut, f.T - cut, got);
        ck_assert_msg(memcmp(got, want + cut * f.V, (f.T - cut) * f.V * sizeof(float)) == 0,
                      "%s: truncate to %zu then re-feed differs", name, cut);
        nvfp4_seq_free(c, s);
    }
    ck_assert_uint_eq(nvfp4_context_kv_free_blocks(c), nvfp4_context_kv_blocks(c));
    free(got);
    free(want);
    nvfp4_context_free(c);
    nvfp4_model_free(m);
    fixture_free(&f);
}
END_TEST

/* A 3-block pool: what does not fit is refused whole, and nothing moves. */
START_TEST(test_kv_full)
{
    fixture f;
    nvfp4_model *m;
    nvfp4_context *c;
    nvfp4_seq a, b, k;
    nvfp4_batch_entry e[2] = {{0}};
    nvfp4_error err;
    float *got, *want;

    fixture_load("llama", &f);
    m = open_cpu("llama", 1);
    c = new_ctx(m, 48, 64);
    ck_assert_uint_eq(nvfp4_context_kv_blocks(c), 3);
    got = malloc(f.T * f.V * sizeof(float));
    want = malloc(f.T * f.V * sizeof(float));
    run_alone(c, f.tokens, f.T, want);
    ck_assert_int_eq(nvfp4_seq_create(c, &a, &err), NVFP4_OK);
    ck_assert_int_eq(nvfp4_seq_create(c, &b, &err), NVFP4_OK);
    feed(c, a, f.tokens, 20, NULL); /* 2 blocks, the second partial */
    /* b needs 2 blocks, 1 is free: refused, nothing changes */
    e[0].seq = b;
    e[0].tokens = f.tokens;
    e[0].n_tokens = 17;
    e[0].logits = NVFP4_LOGITS_ALL;
    e[0].out = got;
    ck_assert_int_eq(nvfp4_context_run(c, e, 1, &err), NVFP4_ERR_KV_FULL);
    ck_assert_int_eq(err.status, NVFP4_ERR_KV_FULL);
    ck_assert_ptr_nonnull(strstr(err.text, "KV blocks"));
    ck_assert_str_eq(nvfp4_strerror(NVFP4_ERR_KV_FULL), "KV cache full");
    ck_assert_uint_eq(nvfp4_seq_length(c, b), 0);
    ck_assert_uint_eq(nvfp4_context_kv_free_blocks(c), 1);
    /* a fork shares a's blocks for free; b's new block and the fork's
     * copy-on-write of the shared partial block each fit alone, not
     * together: the whole batch is refused */
    ck_assert_int_eq(nvfp4_seq_fork(c, a, &k, &err), NVFP4_OK);
    ck_assert_uint_eq(nvfp4_context_kv_free_blocks(c), 1);
    e[0].n_tokens = 16;
    e[1].seq = k;
    e[1].tokens = f.tokens + 20;
    e[1].n_tokens = 1;
    e[1].logits = NVFP4_LOGITS_LAST;
    e[1].out = got + 20 * f.V;
    ck_assert_int_eq(nvfp4_context_run(c, e, 2, &err), NVFP4_ERR_KV_FULL);
    ck_assert_uint_eq(nvfp4_seq_length(c, b), 0);
    ck_assert_uint_eq(nvfp4_seq_length(c, k), 20);
    ck_assert_uint_eq(nvfp4_context_kv_free_blocks(c), 1);
    /* the fork and its parent both write the shared block: one copy, the
     * last free block, is all it takes (the other writes in place) */
    e[0].seq = a;
    e[0].tokens = f.tokens + 20;
    e[0].n_tokens = 1;
    e[0].logits = NVFP4_LOGITS_LAST;
    e[0].out = got + 21 * f.V;
    ck_assert_msg(nvfp4_context_run(c, e, 2, &err) == NVFP4_OK, "%s", err.text);
    ck_assert(memcmp(got + 20 * f.V, want + 20 * f.V, f.V * sizeof(float)) == 0);
    ck_assert(memcmp(got + 21 * f.V, want + 20 * f.V, f.V * sizeof(float)) == 0);
    ck_assert_uint_eq(nvfp4_context_kv_free_blocks(c), 0);
    /* each owns its partial block now: a continues in place */
    feed(c, a, f.tokens + 21, 11, got + 21 * f.V);
    ck_assert(memcmp(got + 21 * f.V, want + 21 * f.V, 11 * f.V * sizeof(float)) == 0);
    e[0].seq = b;
    e[0].tokens = f.tokens;
    e[0].n_tokens = 16;
    e[0].logits = NVFP4_LOGITS_ALL;
    e[0].out = got;
    /* full: b is refused until the fork goes; then it runs as if alone */
    ck_assert_int_eq(nvfp4_context_run(c, e, 1, &err), NVFP4_ERR_KV_FULL);
    nvfp4_seq_free(c, k);
    ck_assert_uint_eq(nvfp4_context_kv_free_blocks(c), 1);
    ck_assert_int_eq(nvfp4_context_run(c, e, 1, &err), NVFP4_OK);
    ck_assert(memcmp(got, want, 16 * f.V * sizeof(float)) == 0);
    nvfp4_seq_free(c, a);
    /* other refusals: unknown sequence, duplicate entries, too long */
    e[0].seq = 99;
    ck_assert_int_eq(nvfp4_context_run(c, e, 1, &err), NVFP4_ERR_INVALID);
    e[0].seq = b;
    e[1].seq = b;
    ck_assert_int_eq(nvfp4_context_run(c, e, 2, &err), NVFP4_ERR_INVALID);
    ck_assert_uint_eq(nvfp4_seq_length(c, b), 16);
    nvfp4_seq_free(c, b);
    free(got);
    free(want);
    nvfp4_context_free(c);
    nvfp4_model_free(m);
    fixture_free(&f);
}
END_TEST

/* nvfp4 bench --batch: B sequences prefilled and decoded together; JSON
 * with the batch and an aggregate rate; bad counts are usage errors. */
START_TEST(test_bench_batch)
{
    char args[1024], *out;
    json_t *j;
    json_error_t je;

    snprintf(args, sizeof(args), "bench '%s/models/qwen3' -p 9 -n 5 -r 1 --batch 3 --json",
             TEST_DATA_DIR);
    ck_assert_int_eq(trun_tool(args, 0, &out), 0);
    j = json_loads(out, 0, &je);
    ck_assert_msg(j != NULL, "bench --json: %s: %s", je.text, out);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "batch")), 3);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "decode_tokens")), 5);
    ck_assert(json_real_value(json_object_get(j, "decode_tok_s")) > 0);
    ck_assert(json_real_value(json_object_get(j, "prefill_tok_s")) > 0);
    json_decref(j);
    free(out);
    snprintf(args, sizeof(args), "bench '%s/models/qwen3' -p 9 -n 5 -r 1 -b 2", TEST_DATA_DIR);
    ck_assert_int_eq(trun_tool(args, 0, &out), 0);
    ck_assert_msg(strstr(out, "decode  2 x 5 tokens"), "%s", out);
    free(out);
    snprintf(args, sizeof(args), "bench '%s/models/qwen3' --batch 0", TEST_DATA_DIR);
    ck_assert_int_eq(trun_status(args), 2);
    snprintf(args, sizeof(args), "bench '%s/models/qwen3' --batch x", TEST_DATA_DIR);
    ck_assert_int_eq(trun_status(args), 2);
    ck_assert_int_eq(trun_status("bench --help"), 0);
    ck_assert_int_eq(trun_tool("bench --help", 0, &out), 0);
    ck_assert_ptr_nonnull(strstr(out, "--batch"));
    free(out);
}
END_TEST

/* nvfp4 logits (now on a context) writes the fixture's logits. */
START_TEST(test_logits_tool)
{
    fixture f;
    char args[4096], path[128], *out;
    size_t len = 0;
    float *got;
    FILE *fp;
    int n = 0;

    fixture_load("llama", &f);
    snprintf(path, sizeof(path), "/tmp/nvfp4-test-context-%d.f32", (int)getpid());
    n = snprintf(args, sizeof(args), "logits '%s/models/llama' --out '%s' --tokens ",
                 TEST_DATA_DIR, path);
    for (size_t i = 0; i < f.T; i++)
        n += snprintf(args + n, sizeof(args) - (size_t)n, "%s%d", i ? "," : "", f.tokens[i]);
    ck_assert_int_eq(trun_tool(args, 1, &out), 0);
    free(out);
    got = malloc(f.T * f.V * sizeof(float));
    ck_assert_ptr_nonnull(fp = fopen(path, "rb"));
    len = fread(got, sizeof(float), f.T * f.V, fp);
    fclose(fp);
    unlink(path);
    ck_assert_uint_eq(len, f.T * f.V);
    compare_logits("nvfp4 logits", got, f.logits, f.T * f.V, LOGIT_TOL);
    free(got);
    fixture_free(&f);
}
END_TEST

/* KV element types (issue 14): the bytes a token takes, from the fixture's
 * config.json (layers x 2 x kv_heads x head_dim x element size). */
static size_t config_kv_bytes(const char *name, size_t esize)
{
    char rel[256];
    json_t *c;
    size_t b;

    snprintf(rel, sizeof(rel), "models/%s/config.json", name);
    c = tload_json(rel);
    b = 2 * (size_t)json_integer_value(json_object_get(c, "num_hidden_layers")) *
        (size_t)json_integer_value(json_object_get(c, "num_key_value_heads")) *
        (size_t)json_integer_value(json_object_get(c, "head_dim")) * esize;
    json_decref(c);
    ck_assert_uint_gt(b, 0);
    return b;
}

static nvfp4_context *kv_ctx(nvfp4_model *m, nvfp4_kv_cache_dtype dt, size_t kv_bytes)
{
    nvfp4_context_options o;
    nvfp4_error err;
    nvfp4_context *c;

    nvfp4_context_options_init(&o);
    o.kv_tokens = kv_bytes ? 0 : 64;
    o.kv_bytes = kv_bytes;
    o.max_batch_tokens = 64;
    o.kv_cache_dtype = dt;
    c = nvfp4_context_create(m, &o, &err);
    ck_assert_msg(c != NULL, "%s", err.text);
    return c;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        ck_assert_msg(isfinite(a[i]), "logit %zu is %g", i, (double)a[i]);
        if (e > d)
            d = e;
    }
    return d;
}

/* Quark FP8 KV checkpoints: auto keeps one-byte pools (a quarter of
 * float32's bytes per token, also in a pool given in bytes) and matches the
 * reference (vLLM's fp8 cache semantics, gen_models.py); fp8 is the same
 * bits; f32 ignores the scheme: its distance to the reference is the
 * reference's own distance between with and without the KV quantization
 * (emul_without_kv_qdq_max_abs_diff, to within LOGIT_TOL by the triangle
 * inequality).  A checkpoint without scales: auto is float32, fp8 uses
 * scale 1.0 (and moves the logits).  A bad kv_cache_dtype is refused. */
START_TEST(test_kv_dtype)
{
    static const char *const names[] = {"llama_kvfp8", "qwen3_kvfp8", "llama"};

    for (size_t n = 0; n < sizeof(names) / sizeof(names[0]); n++) {
        const char *name = names[n];
        const int scales = n < 2;
        size_t b1 = config_kv_bytes(name, 1), b4 = config_kv_bytes(name, 4);
        nvfp4_model *m = open_cpu(name, 1);
        nvfp4_context *c;
        float *got[3];
        fixture f;
        double d;

        fixture_load(name, &f);
        ck_assert_int_eq(nvfp4_model_kv_cache_dtype(m),
                         scales ? NVFP4_KV_CACHE_FP8 : NVFP4_KV_CACHE_F32);
        for (int k = 0; k < 3; k++) {
            static const nvfp4_kv_cache_dtype dts[3] = {NVFP4_KV_CACHE_AUTO, NVFP4_KV_CACHE_FP8,
                                                        NVFP4_KV_CACHE_F32};
            int fp8 = dts[k] == NVFP4_KV_CACHE_FP8 || (dts[k] == NVFP4_KV_CACHE_AUTO && scales);
            c = kv_ctx(m, dts[k], 0);
            ck_assert_int_eq(nvfp4_context_kv_cache_dtype(c),
                             fp8 ? NVFP4_KV_CACHE_FP8 : NVFP4_KV_CACHE_F32);
            ck_assert_uint_eq(nvfp4_context_kv_bytes_per_token(c), fp8 ? b1 : b4);
            got[k] = malloc(f.T * f.V * sizeof(float));
            run_alone(c, f.tokens, f.T, got[k]);
            nvfp4_context_free(c);
            /* 64 tokens' worth of bytes: 4 blocks of 16, or 1 of float32 */
            c = kv_ctx(m, dts[k], 64 * b1);
            ck_assert_uint_eq(nvfp4_context_kv_blocks(c), fp8 ? 4 : 1);
            nvfp4_context_free(c);
        }
        if (scales) {
            compare_logits(name, got[0], f.logits, f.T * f.V, LOGIT_TOL);
            ck_assert(memcmp(got[0], got[1], f.T * f.V * sizeof(float)) == 0);
            d = json_real_value(json_object_get(json_object_get(f.ref, "kv_cache"),
                                                "emul_without_kv_qdq_max_abs_diff"));
            ck_assert_msg(fabs(max_diff(got[2], f.logits, f.T * f.V) - d) <= LOGIT_TOL,
                          "%s f32: %g from the reference; without the KV QDQ it is %g", name,
                          max_diff(got[2], f.logits, f.T * f.V), d);
        } else {
            compare_logits(name, got[0], f.logits, f.T * f.V, LOGIT_TOL);
            ck_assert(memcmp(got[0], got[2], f.T * f.V * sizeof(float)) == 0);
            d = max_diff(got[1], f.logits, f.T * f.V);
            ck_assert_msg(d > 100 * LOGIT_TOL, "%s fp8 (scale 1.0): logits moved by %g only",
                          name, d);
        }
        for (int k = 0; k < 3; k++)
            free(got[k]);
        if (n == 0) {
            nvfp4_context_options o;
            nvfp4_error err;
            nvfp4_context_options_init(&o);
            o.kv_tokens = 16;
            o.kv_cache_dtype = (nvfp4_kv_cache_dtype)9;
            ck_assert_ptr_null(nvfp4_context_create(m, &o, &err));
            ck_assert_int_eq(err.status, NVFP4_ERR_INVALID);
            ck_assert_msg(strstr(err.text, "kv_cache_dtype 9"), "%s", err.text);
        }
        nvfp4_model_free(m);
        fixture_free(&f);
    }
}
END_TEST

/* nvfp4 bench reports the KV element type and bytes per token, and
 * --kv-cache-dtype changes them; a bad value is a usage error. */
START_TEST(test_kv_dtype_tool)
{
    static const char *const dts[] = {"", " --kv-cache-dtype auto", " --kv-cache-dtype f32",
                                      " --kv-cache-dtype fp8"};
    const size_t b1 = config_kv_bytes("llama_kvfp8", 1);
    char args[1024], *out;
    json_t *j;
    json_error_t je;

    for (int i = 0; i < 4; i++) {
        int f32 = i == 2;
        snprintf(args, sizeof(args), "bench '%s/models/llama_kvfp8' -p 9 -n 2 -r 1 --json%s",
                 TEST_DATA_DIR, dts[i]);
        ck_assert_int_eq(trun_tool(args, 0, &out), 0);
        j = json_loads(out, 0, &je);
        ck_assert_msg(j != NULL, "bench --json: %s: %s", je.text, out);
        ck_assert_str_eq(json_string_value(json_object_get(j, "kv_cache_dtype")),
                         f32 ? "f32" : "fp8");
        ck_assert_int_eq(json_integer_value(json_object_get(j, "kv_bytes_per_token")),
                         (json_int_t)(f32 ? 4 * b1 : b1));
        json_decref(j);
        free(out);
    }
    snprintf(args, sizeof(args), "bench '%s/models/llama' -p 9 -n 2 -r 1 --kv-cache-dtype fp8",
             TEST_DATA_DIR);
    ck_assert_int_eq(trun_tool(args, 0, &out), 0);
    ck_assert_msg(strstr(out, "KV cache fp8 (1 byte, scale 1.0)"), "%s", out);
    free(out);
    snprintf(args, sizeof(args), "bench '%s/models/llama' --kv-cache-dtype bf16", TEST_DATA_DIR);
    ck_assert_int_eq(trun_status(args), 2);
    ck_assert_int_eq(trun_tool("generate --help", 0, &out), 0);
    ck_assert_ptr_nonnull(strstr(out, "--kv-cache-dtype auto|fp8|f32"));
    free(out);
}
END_TEST

/* ---- threads ------------------------------------------------------------------- */

typedef struct {
    nvfp4_model *m;
    const fixture *f;
    uint64_t seed;
    float *out[4];
} thread_job;

/* Four sequences (the fixture, shifted token ids) in random batches. */
static void *thread_run(void *arg)
{
    thread_job *t = arg;
    nvfp4_context *c = new_ctx(t->m, 4 * 32, 128);
    int32_t toks[4][32];
    batch_job jobs[4];
    uint64_t rng = t->seed;

    for (int s = 0; s < 4; s++) {
        for (size_t i = 0; i < t->f->T; i++)
            toks[s][i] = (int32_t)((t->f->tokens[i] + s) % (int32_t)t->f->V);
        batch_job_init(&jobs[s], toks[s], t->f->T, t->f->V);
    }
    run_random_batches(c, jobs, 4, 4, t->f->V, &rng);
    for (int s = 0; s < 4; s++) {
        /* rows that did not come back: the solo run fills them below */
        t->out[s] = jobs[s].got;
        for (size_t i = 0; i < t->f->T; i++)
            if (!jobs[s].have[i])
                memset(t->out[s] + i * t->f->V, 0, t->f->V * sizeof(float));
        free(jobs[s].have);
    }
    nvfp4_context_free(c);
    return NULL;
}

START_TEST(test_threads)
{
    fixture f;
    nvfp4_model *m;
    thread_job seq[2], par[2];
    pthread_t th[2];

    fixture_load("qwen3_moe", &f);
    m = open_cpu("qwen3_moe", 1);
    for (int i = 0; i < 2; i++) {
        seq[i].m = par[i].m = m;
        seq[i].f = par[i].f = &f;
        seq[i].seed = par[i].seed = 77 + (uint64_t)i;
        thread_run(&seq[i]);
    }
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, thread_run, &par[i]), 0);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < 2; i++)
        for (int s = 0; s < 4; s++) {
            ck_assert_msg(memcmp(seq[i].out[s], par[i].out[s],
                                 f.T * f.V * sizeof(float)) == 0,
                          "thread %d sequence %d differs from the sequential run", i, s);
            free(seq[i].out[s]);
            free(par[i].out[s]);
        }
    nvfp4_model_free(m);
    fixture_free(&f);
}
END_TEST

/* The KV cache's bytes per token against the formula from config.json:
 * multi-head latent attention (DeepSeek) caches one latent row a layer,
 * kv_lora_rank + qk_rope_head_dim floats; grouped-query attention a K and a
 * V row of num_key_value_heads x head_dim floats.  A pool given in bytes
 * holds that many tokens, rounded down to blocks. */
static const char *const kv_formula_models[] = {"deepseek_v3", "llama"};

START_TEST(test_kv_token_bytes)
{
    const char *name = kv_formula_models[_i];
    char rel[256];
    json_t *cfg;
    nvfp4_context_options co;
    nvfp4_context *c;
    nvfp4_error err;
    nvfp4_model *m;
    size_t want, L;

    snprintf(rel, sizeof(rel), "models/%s/config.json", name);
    cfg = tload_json(rel);
    L = (size_t)json_integer_value(json_object_get(cfg, "num_hidden_layers"));
    if (json_object_get(cfg, "kv_lora_rank"))
        want = L * (size_t)(json_integer_value(json_object_get(cfg, "kv_lora_rank")) +
                            json_integer_value(json_object_get(cfg, "qk_rope_head_dim"))) * 4;
    else
        want = L * 2 * (size_t)(json_integer_value(json_object_get(cfg, "num_key_value_heads")) *
                                json_integer_value(json_object_get(cfg, "head_dim"))) * 4;
    json_decref(cfg);
    ck_assert_uint_gt(want, 0);
    m = open_cpu(name, 1);
    nvfp4_context_options_init(&co);
    co.kv_bytes = 5 * NVFP4_KV_BLOCK * want + want; /* 5 blocks and a token */
    c = nvfp4_context_create(m, &co, &err);
    ck_assert_msg(c != NULL, "%s: %s", name, err.text);
    ck_assert_uint_eq(nvfp4_context_kv_bytes_per_token(c), want);
    ck_assert_uint_eq(nvfp4_context_kv_blocks(c), 5);
    ck_assert_uint_eq(nvfp4_context_kv_bytes_per_token(NULL), 0);
    nvfp4_context_free(c);
    nvfp4_model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("context");
    TCase *tc = tcase_create("context");
    TCase *tt = tcase_create("threads");
    SRunner *sr;
    int failed;

    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_batches, 0, NOK);
    tcase_add_loop_test(tc, test_threads_invariant, 0, NOK);
    tcase_add_loop_test(tc, test_fork, 0, NOK);
    tcase_add_loop_test(tc, test_truncate, 0, NOK);
    tcase_add_test(tc, test_kv_full);
    tcase_add_loop_test(tc, test_kv_token_bytes, 0,
                        (int)(sizeof(kv_formula_models) / sizeof(kv_formula_models[0])));
    tcase_add_test(tc, test_bench_batch);
    tcase_add_test(tc, test_logits_tool);
    tcase_add_test(tc, test_kv_dtype);
    tcase_add_test(tc, test_kv_dtype_tool);
    suite_add_tcase(s, tc);
    tcase_set_timeout(tt, 300);
    tcase_add_test(tt, test_threads);
    suite_add_tcase(s, tt);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
