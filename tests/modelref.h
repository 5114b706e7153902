/* SPDX-License-Identifier: MIT */
/*
 * tests/modelref.h - the fixture models of tests/data/models (Quark exports
 * with PyTorch-emulation logits, scripts/fixtures/gen_models.py) as the
 * model tests read them: test-model (CPU backend) and test-gpu-model (GPU
 * backends) share it.
 */
#ifndef NVFP4_TEST_MODELREF_H
#define NVFP4_TEST_MODELREF_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvfp4/model.h>

#include "testutil.h"

/* The exports every backend must run (test-model also checks refusals):
 * Quark's (gen_models.py), ModelOpt's and llm-compressor's (gen_dialects.py). */
static const char *const ok_models[] = {"llama", "qwen3", "qwen3_moe", "qwen2_moe",
                                        "mixtral", "llama_w4a16",
                                        /* the other dialects (gen_dialects.py) */
                                        "modelopt_nvfp4", "modelopt_w4a16", "ct_nvfp4",
                                        "ct_nvfp4a16", "ct_mixed",
                                        /* their MoE exports (Qwen3-MoE, Mixtral; 4 experts) */
                                        "modelopt_moe", "ct_moe", "ct_moe_a16",
                                        "modelopt_mixtral",
                                        /* Quark exclusions that split fused groups */
                                        "llama_excl_k", "llama_excl_block",
                                        "llama_w4a16_excl_gate", "llama_excl_gate",
                                        "llama_excl_up",
                                        /* Quark FP8 KV cache (kv_cache_scheme fp8) */
                                        "llama_kvfp8", "qwen3_kvfp8",
                                        /* more architectures (gen_models.py) */
                                        "phi3", "gemma3", "deepseek_v3", "deepseek_v2", "gpt_oss"};
#define NOK (sizeof(ok_models) / sizeof(ok_models[0]))
#define NOK_QUARK 6 /* the first NOK_QUARK are Quark's exports */

typedef struct {
    json_t *ref;
    int32_t *tokens;
    size_t T, V;
    float *logits;   /* reference logits_emul [T, V] */
} fixture;

static inline void fixture_load(const char *name, fixture *f)
{
    char rel[256];
    json_t *toks;
    size_t len;

    snprintf(rel, sizeof(rel), "models/%s/reference.json", name);
    f->ref = tload_json(rel);
    toks = json_object_get(f->ref, "tokens");
    f->T = json_array_size(toks);
    f->V = (size_t)json_integer_value(json_object_get(f->ref, "vocab_size"));
    f->tokens = malloc(f->T * sizeof(int32_t));
    for (size_t i = 0; i < f->T; i++)
        f->tokens[i] = (int32_t)json_integer_value(json_array_get(toks, i));
    snprintf(rel, sizeof(rel), "models/%s/logits_emul.f32", name);
    f->logits = tload_file(rel, &len);
    ck_assert_uint_eq(len, f->T * f->V * sizeof(float));
}

static inline void fixture_free(fixture *f)
{
    json_decref(f->ref);
    free(f->tokens);
    free(f->logits);
}

/* Open tests/data/models/NAME on BACKEND with a 64-token KV cache. */
static inline nvfp4_model *fixture_open(const char *name, const char *backend, int rescale,
                                        nvfp4_error *err)
{
    char rel[256];
    nvfp4_model_options o;

    nvfp4_model_options_init(&o);
    o.backend = backend;
    o.rescale_fused = rescale;
    o.quiet = 1;
    o.max_ctx = 64;
    snprintf(rel, sizeof(rel), "models/%s", name);
    return nvfp4_model_open(tdata(rel), &o, err);
}

/* Largest |got - want| over N logits (every logit finite), printed with
 * WHAT; returns it so callers can apply their own bound. */
static inline double logits_max_diff(const char *what, const float *got, const float *want,
                                     size_t n, size_t *at)
{
    double mx = 0, mean = 0;
    size_t where = 0;

    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        ck_assert_msg(isfinite(got[i]), "%s: logit %zu is not finite", what, i);
        if (d > mx) {
            mx = d;
            where = i;
        }
        mean += d;
    }
    mean /= (double)n;
    fprintf(stderr, "%-34s max |diff| %.3g (at %zu), mean %.3g\n", what, mx, where, mean);
    if (at)
        *at = where;
    return mx;
}

static inline void compare_logits(const char *what, const float *got, const float *want,
                                  size_t n, double tol)
{
    size_t where;
    double mx = logits_max_diff(what, got, want, n, &where);

    ck_assert_msg(mx <= tol, "%s: max |diff| %g at %zu exceeds %g (got %g, want %g)", what,
                  mx, where, tol, got[where], want[where]);
}

/* Decode steps of positions HALF..T-1 on M, whose cache holds the first HALF
 * tokens already, each step's logits into LOGITS + t * V; compared with the
 * reference at TOL. */
static inline void fixture_decode_rest(nvfp4_model *m, const fixture *f, const char *what,
                                       size_t half, float *logits, double tol)
{
    nvfp4_error err;

    for (size_t t = half; t < f->T; t++)
        ck_assert_msg(nvfp4_model_forward(m, &f->tokens[t], 1, t, logits + t * f->V, 1, &err) ==
                          NVFP4_OK,
                      "%s: token %zu: %s", what, t, err.text);
    compare_logits(what, logits, f->logits, f->T * f->V, tol);
}

/* Greedy continuation on M, whose last logits (after the whole fixture)
 * are in LOGITS (V floats), equals the reference's - which recomputed the
 * whole sequence for every new token. */
static inline void fixture_check_greedy(nvfp4_model *m, const fixture *f, const char *what,
                                        float *logits)
{
    json_t *want = json_object_get(f->ref, "greedy_continuation");
    nvfp4_sampler s;
    nvfp4_error err;
    size_t pos = f->T;
    int32_t tok;

    ck_assert_uint_gt(json_array_size(want), 0);
    nvfp4_sampler_init(&s, 0, 1, 0);
    for (size_t i = 0; i < json_array_size(want); i++) {
        tok = nvfp4_sampler_sample(&s, logits, f->V);
        ck_assert_msg(tok == json_integer_value(json_array_get(want, i)),
                      "%s: greedy token %zu is %d, reference %lld", what, i, tok,
                      json_integer_value(json_array_get(want, i)));
        ck_assert_int_eq(nvfp4_model_forward(m, &tok, 1, pos++, logits, 1, &err), NVFP4_OK);
    }
}

/* ---- random batches on a context ----------------------------------------------
 * Jobs are token sequences fed to sequences of one context in random
 * batches: each step takes a random subset of the unfinished jobs, each
 * with a random chunk (a decode token or a prefill stretch) and a random
 * logits mode; the rows whose logits came back are in GOT (n * V floats)
 * with HAVE[i] set.  Fixed seed: the same schedule every run. */
typedef struct {
    const int32_t *toks;
    size_t n, fed;
    nvfp4_seq id;
    float *got;
    unsigned char *have;
} batch_job;

static inline uint64_t mr_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void batch_job_init(batch_job *j, const int32_t *toks, size_t n, size_t V)
{
    j->toks = toks;
    j->n = n;
    j->fed = 0;
    j->id = -1;
    j->got = calloc(n * V, sizeof(float));
    j->have = calloc(n, 1);
}

static inline void batch_job_free(batch_job *j)
{
    free(j->got);
    free(j->have);
}

/* Run JOBS (sequences created here) to the end in random batches of at
 * most MAXB entries; returns the number of batches. */
static inline size_t run_random_batches(nvfp4_context *c, batch_job *jobs, size_t nj,
                                        size_t maxb, size_t V, uint64_t *rng)
{
    nvfp4_batch_entry *ent = calloc(nj, sizeof(*ent));
    size_t *who = calloc(nj, sizeof(size_t));
    float **tmp = calloc(nj, sizeof(float *));
    size_t steps = 0, left = nj;
    nvfp4_error err;

    for (size_t i = 0; i < nj; i++) {
        ck_assert_int_eq(nvfp4_seq_create(c, &jobs[i].id, &err), NVFP4_OK);
        tmp[i] = malloc(V * sizeof(float));
    }
    while (left > 0) {
        size_t ne = 0;
        for (size_t i = 0; i < nj && ne < maxb; i++) {
            batch_job *j = &jobs[i];
            size_t rest = j->n - j->fed, len;
            uint64_t r = mr_next(rng);
            if (rest == 0 || (r & 1))
                continue;
            /* half decode tokens, half prefill chunks of 1..rest */
            len = (r >> 1) & 1 ? 1 : 1 + (size_t)((r >> 8) % rest);
            ent[ne].seq = j->id;
            ent[ne].tokens = j->toks + j->fed;
            ent[ne].n_tokens = len;
            switch ((r >> 4) % 4) {
            case 0: ent[ne].logits = NVFP4_LOGITS_NONE; ent[ne].out = NULL; break;
            case 1: ent[ne].logits = NVFP4_LOGITS_LAST; ent[ne].out = tmp[i]; break;
            default: ent[ne].logits = NVFP4_LOGITS_ALL; ent[ne].out = j->got + j->fed * V; break;
            }
            who[ne++] = i;
        }
        if (ne == 0)
            continue;
        ck_assert_msg(nvfp4_context_run(c, ent, ne, &err) == NVFP4_OK, "batch %zu: %s", steps,
                      err.text);
        for (size_t e = 0; e < ne; e++) {
            batch_job *j = &jobs[who[e]];
            if (ent[e].logits == NVFP4_LOGITS_LAST) {
                memcpy(j->got + (j->fed + ent[e].n_tokens - 1) * V, tmp[who[e]],
                       V * sizeof(float));
                j->have[j->fed + ent[e].n_tokens - 1] = 1;
            } else if (ent[e].logits == NVFP4_LOGITS_ALL) {
                memset(j->have + j->fed, 1, ent[e].n_tokens);
            }
            j->fed += ent[e].n_tokens;
            ck_assert_uint_eq(nvfp4_seq_length(c, j->id), j->fed);
            if (j->fed == j->n)
                left--;
        }
        steps++;
    }
    for (size_t i = 0; i < nj; i++) {
        nvfp4_seq_free(c, jobs[i].id);
        free(tmp[i]);
    }
    free(tmp);
    free(ent);
    free(who);
    return steps;
}

/* Largest |got - want| over the rows of J that came back. */
static inline double batch_job_max_diff(const batch_job *j, const float *want, size_t V)
{
    double mx = 0;
    for (size_t t = 0; t < j->n; t++)
        for (size_t i = 0; j->have[t] && i < V; i++) {
            double d = fabs((double)j->got[t * V + i] - (double)want[t * V + i]);
            ck_assert_msg(isfinite(j->got[t * V + i]), "logit %zu of row %zu not finite", i, t);
            if (d > mx)
                mx = d;
        }
    return mx;
}

#endif /* NVFP4_TEST_MODELREF_H */
