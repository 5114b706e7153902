/* SPDX-License-Identifier: MIT */
/* The server's sampler: OpenAI's presence/frequency penalties, then
 * temperature, top-k, min-p and top-p (vLLM's order), from a splitmix64
 * stream per request.  Temperature 0 is argmax, first index on ties, the
 * same pick as nvfp4_sampler_sample and so `nvfp4 generate`. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../cli.h"
#include "serve.h"

typedef struct {
    float p;
    int32_t id;
} cand;

void srv_sampler_init(srv_sampler *s, const srv_request *r, uint64_t seed)
{
    s->temperature = (float)r->temperature;
    s->top_p = (float)r->top_p;
    s->min_p = (float)r->min_p;
    s->presence = (float)r->presence_penalty;
    s->frequency = (float)r->frequency_penalty;
    s->top_k = r->top_k > 0 ? (int)r->top_k : 0;
    s->rng = seed;
}

size_t srv_sample_scratch(size_t vocab) { return vocab * sizeof(cand); }

static int cmp_cand(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->p != y->p)
        return x->p < y->p ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The N best entries of LOGITS as log-probabilities (LSE: log-sum-exp). */
static void top_logprobs(const float *logits, size_t vocab, double lse, srv_toplp *top, int n)
{
    int have = 0;

    for (size_t i = 0; i < vocab; i++) {
        float l = logits[i];
        int at;
        if (have == n && !(l > logits[top[n - 1].id]))
            continue;
        at = have < n ? have++ : n - 1;
        while (at > 0 && l > logits[top[at - 1].id]) {
            top[at] = top[at - 1];
            at--;
        }
        top[at].id = (int32_t)i;
    }
    for (int k = 0; k < have; k++)
        top[k].logprob = (float)((double)logits[top[k].id] - lse);
}

int32_t srv_sample(srv_sampler *s, float *logits, size_t vocab, const uint32_t *counts,
                   srv_toplp *top, int n_top, float *chosen_lp, void *scratch)
{
    size_t best = 0, keep;
    double lse = 0, mx, sum = 0, mass, r;
    cand *c = scratch;
    int32_t pick;
    float raw_pick_logit;

    if (top || chosen_lp) {
        mx = logits[0];
        for (size_t i = 1; i < vocab; i++)
            if (logits[i] > mx)
                mx = logits[i];
        for (size_t i = 0; i < vocab; i++)
            lse += exp((double)logits[i] - mx);
        lse = mx + log(lse);
        if (top && n_top > 0)
            top_logprobs(logits, vocab, lse, top, n_top);
    }
    if (s->temperature <= 0 && !(counts && (s->presence != 0 || s->frequency != 0))) {
        /* greedy without penalties: argmax of the logits themselves */
        for (size_t i = 1; i < vocab; i++)
            if (logits[i] > logits[best])
                best = i;
        pick = (int32_t)best;
        goto out;
    }
    if (counts && (s->presence != 0 || s->frequency != 0)) {
        /* Penalised logits are worked on in the scratch copy so the log-probs
         * of the pick come from the model's own distribution. */
        for (size_t i = 0; i < vocab; i++)
            c[i].p = logits[i] - (counts[i] ? s->presence + s->frequency * (float)counts[i] : 0);
    } else {
        for (size_t i = 0; i < vocab; i++)
            c[i].p = logits[i];
    }
    for (size_t i = 1; i < vocab; i++)
        if (c[i].p > c[best].p)
            best = i;
    if (s->temperature <= 0 || vocab < 2) {
        pick = (int32_t)best;
        goto out;
    }
    mx = c[best].p;
    for (size_t i = 0; i < vocab; i++) {
        c[i].p = (float)exp(((double)c[i].p - mx) / s->temperature);
        c[i].id = (int32_t)i;
    }
    qsort(c, vocab, sizeof *c, cmp_cand);
    keep = vocab;
    if (s->top_k > 0 && (size_t)s->top_k < keep)
        keep = (size_t)s->top_k;
    if (s->min_p > 0) {
        size_t k = 1;
        while (k < keep && c[k].p >= s->min_p * c[0].p)
            k++;
        keep = k;
    }
    for (size_t i = 0; i < keep; i++)
        sum += c[i].p;
    if (s->top_p < 1) {
        mass = 0;
        for (size_t i = 0; i < keep; i++) {
            mass += c[i].p / sum;
            if (mass >= s->top_p) {
                keep = i + 1;
                break;
            }
        }
        sum = 0;
        for (size_t i = 0; i < keep; i++)
            sum += c[i].p;
    }
    s->rng += 0x9e3779b97f4a7c15ull;
    r = (double)(cli_splitmix64(s->rng) >> 11) * 0x1.0p-53 * sum;
    pick = c[keep - 1].id;
    mass = 0;
    for (size_t i = 0; i < keep; i++) {
        mass += c[i].p;
        if (r < mass) {
            pick = c[i].id;
            break;
        }
    }
out:
    raw_pick_logit = logits[pick];
    if (chosen_lp)
        *chosen_lp = (float)((double)raw_pick_logit - lse);
    return pick;
}
