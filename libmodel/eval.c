/* SPDX-License-Identifier: MIT */
/* Perplexity (lm-eval's rolling windows) and sampling. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "lse.h"

/* The log-probability of each scored row's target: row[target] - max -
 * log(sum(exp(row - max))), the sum in double (lse.h: eight partial sums
 * in a fixed order, the same bits on every CPU).  Rows are independent,
 * so threads take contiguous shares and the caller adds the results in
 * row order: the same bits at any thread count. */
typedef struct {
    const float *logits; /* the first scored row */
    const int32_t *targets;
    size_t V, r0, r1;
    double *lp;
} score_job;

static void *score_rows(void *arg)
{
    const score_job *j = arg;

    for (size_t i = j->r0; i < j->r1; i++) {
        const float *row = j->logits + i * j->V;
        const double mx = lse_max(row, j->V);
        j->lp[i] = (double)row[j->targets[i]] - mx - log(lse_sum(row, j->V, mx));
    }
    return NULL;
}

/* The rows on up to THREADS threads (the backend's count: its workers are
 * idle while the scores run); one thread, or a thread that cannot start,
 * runs its share itself.  Scoring had been a fifth of a perplexity run
 * on two threads. */
#define SCORE_THREADS_MAX 64
static void score_all(const float *logits, const int32_t *targets, size_t V, size_t count,
                      int threads, double *lp)
{
    score_job jobs[SCORE_THREADS_MAX];
    pthread_t tid[SCORE_THREADS_MAX];
    int started[SCORE_THREADS_MAX];
    size_t nt = threads < 1 ? 1 : (size_t)threads;

    if (nt > SCORE_THREADS_MAX)
        nt = SCORE_THREADS_MAX;
    if (nt > count)
        nt = count;
    for (size_t t = 0; t < nt; t++) {
        jobs[t] = (score_job){logits, targets, V, count * t / nt, count * (t + 1) / nt, lp};
        started[t] = t > 0 && pthread_create(&tid[t], NULL, score_rows, &jobs[t]) == 0;
    }
    for (size_t t = 0; t < nt; t++)
        if (!started[t])
            score_rows(&jobs[t]);
    for (size_t t = 1; t < nt; t++)
        if (started[t])
            pthread_join(tid[t], NULL);
}

/*
 * lm-eval's loglikelihood_rolling with context_len 1: the first window is
 * [prefix] + tokens[0 : ctx-1] scoring tokens[0 : ctx]; every later window
 * scores the next (up to) ctx tokens, conditioned on the ctx tokens before
 * each (so windows are disjoint in what they score and overlap in context).
 * The prefix defaults to BOS, or EOS when the model has no BOS.
 */
nvfp4_status nvfp4_model_perplexity(nvfp4_model *m, const int32_t *tokens, size_t n,
                                    size_t ctx, int32_t prefix, nvfp4_progress_fn progress,
                                    void *user,
                                    nvfp4_ppl_result *out, nvfp4_error *err)
{
    size_t V = (size_t)nvfp4_model_vocab_size(m), predicted = 0;
    int32_t *win = NULL;
    float *logits = NULL;
    double nll = 0, *lp = NULL;
    const int threads = nvfp4_backend_threads(nvfp4_model_backend(m));
    nvfp4_status rc = NVFP4_OK;
    nvfp4_context *c = NULL;
    nvfp4_context_options co;
    nvfp4_seq seq = -1;

    memset(out, 0, sizeof(*out));
    if (prefix < 0)
        prefix = nvfp4_model_bos(m) >= 0 ? nvfp4_model_bos(m) : nvfp4_model_eos(m);
    if (prefix >= (int32_t)V)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "prefix token %d is outside the vocabulary of %zu", prefix, V);
    if (n == 0)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "no tokens to score");
    if (ctx < 2 || ctx > (size_t)nvfp4_model_max_ctx(m))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "context %zu must be between 2 and the model's cache "
                               "size %d", ctx, nvfp4_model_max_ctx(m));
    if (prefix < 0)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, "bos_token_id", -1,
                               "the model has neither bos_token_id nor eos_token_id to "
                               "start the first window with");
    win = malloc(ctx * sizeof(int32_t));
    logits = malloc(ctx * V * sizeof(float));
    lp = malloc(ctx * sizeof(double));
    if (!win || !logits || !lp) {
        rc = nvfp4_error_set(err, NVFP4_ERR_NOMEM, NULL, NULL, -1, "out of memory");
        goto out;
    }
    /* a context of its own: one window of ctx tokens at a time */
    nvfp4_context_options_init(&co);
    co.kv_tokens = ctx;
    co.max_batch_tokens = ctx;
    co.max_seqs = 1;
    if (!(c = nvfp4_context_create(m, &co, err))) {
        rc = err ? err->status : NVFP4_ERR_NOMEM;
        goto out;
    }
    if ((rc = nvfp4_seq_create(c, &seq, err)))
        goto out;
    while (predicted < n) {
        size_t len, score, start;
        if (predicted == 0) {
            len = n < ctx ? n : ctx;
            win[0] = prefix;
            memcpy(win + 1, tokens, (len - 1) * sizeof(int32_t));
            score = len;
            start = 0;  /* window position of the first scored prediction */
        } else {
            size_t end;
            score = n - predicted < ctx ? n - predicted : ctx;
            end = predicted + score;           /* exclusive, in target indices */
            /* inputs tokens[end-ctx-1 .. end-2] (clipped at 0) */
            if (end >= ctx + 1) {
                len = ctx;
                memcpy(win, tokens + end - ctx - 1, ctx * sizeof(int32_t));
            } else {
                len = end - 1;
                memcpy(win, tokens, len * sizeof(int32_t));
            }
            start = len - score;
        }
        {
            nvfp4_batch_entry b = {seq, win, len, NVFP4_LOGITS_ALL, logits};
            if ((rc = nvfp4_seq_truncate(c, seq, 0, err)) ||
                (rc = nvfp4_context_run(c, &b, 1, err)))
                goto out;
        }
        score_all(logits + start * V, tokens + predicted, V, score, threads, lp);
        for (size_t i = 0; i < score; i++)
            nll -= lp[i];
        predicted += score;
        if (progress && progress(predicted, n, user) && predicted < n) {
            rc = nvfp4_error_set(err, NVFP4_ERR_CANCELLED, NULL, NULL, -1,
                                 "cancelled after %zu of %zu tokens", predicted, n);
            break;
        }
    }
    out->nll = nll;
    out->tokens = predicted;
    out->token_ppl = exp(nll / (double)predicted);
out:
    nvfp4_context_free(c);
    free(win);
    free(logits);
    free(lp);
    return rc;
}

/* ---- sampling ---------------------------------------------------------------- */

void nvfp4_sampler_init(nvfp4_sampler *s, float temperature, float top_p, uint64_t seed)
{
    s->temperature = temperature;
    s->top_p = top_p > 0 && top_p <= 1 ? top_p : 1.0f;
    /* splitmix64 of the seed: never a zero xorshift state */
    seed += 0x9e3779b97f4a7c15ull;
    seed = (seed ^ (seed >> 30)) * 0xbf58476d1ce4e5b9ull;
    seed = (seed ^ (seed >> 27)) * 0x94d049bb133111ebull;
    s->state = (seed ^ (seed >> 31)) | 1;
}

static double next_uniform(nvfp4_sampler *s)
{
    uint64_t x = s->state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s->state = x;
    return (double)(x >> 11) / 9007199254740992.0;
}

typedef struct {
    float p;
    int32_t id;
} cand;

static int cmp_cand(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->p != y->p)
        return x->p > y->p ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int32_t nvfp4_sampler_sample(nvfp4_sampler *s, const float *logits, size_t vocab)
{
    size_t best = 0, keep;
    double mx, sum = 0, r, acc = 0, mass = 0;
    cand *c;

    for (size_t i = 1; i < vocab; i++)
        if (logits[i] > logits[best])
            best = i;
    if (s->temperature <= 0 || vocab < 2)
        return (int32_t)best;
    c = malloc(vocab * sizeof(*c));
    if (!c)
        return (int32_t)best;
    mx = logits[best];
    for (size_t i = 0; i < vocab; i++) {
        c[i].p = (float)exp(((double)logits[i] - mx) / s->temperature);
        c[i].id = (int32_t)i;
        sum += c[i].p;
    }
    qsort(c, vocab, sizeof(*c), cmp_cand);
    for (keep = 0; keep < vocab; keep++) {
        mass += c[keep].p / sum;
        if (mass >= s->top_p) {
            keep++;
            break;
        }
    }
    if (keep > vocab)
        keep = vocab;
    mass = 0;
    for (size_t i = 0; i < keep; i++)
        mass += c[i].p;
    r = next_uniform(s) * mass;
    best = (size_t)c[keep - 1].id;
    for (size_t i = 0; i < keep; i++) {
        acc += c[i].p;
        if (r < acc) {
            best = (size_t)c[i].id;
            break;
        }
    }
    free(c);
    return (int32_t)best;
}
