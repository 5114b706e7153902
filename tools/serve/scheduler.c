/* SPDX-License-Identifier: MIT */
/* Continuous batching: one thread owns one nvfp4_context.  Each step it
 * admits queued requests (FIFO) while the batch has a free sequence slot
 * and the KV pool the blocks the request may ever need (so a running
 * sequence never meets NVFP4_ERR_KV_FULL), then runs one batch: a decode
 * token of every sequence that has one, and prompt chunks of the others
 * within the per-step token budget, so a long prompt never stalls the
 * decoders.  Sampled tokens become released text at once; text that may
 * still turn into a stop string (or ends inside a UTF-8 sequence) is held
 * back until it cannot. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve.h"

struct srv_sched {
    nvfp4_model *m;
    nvfp4_context *ctx;
    const nvfp4_tokenizer *tok;
    size_t V, blocks_total, reserved;
    int32_t eos;
    srv_sched_options o;
    srv_metrics *met;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    srv_job *qhead, *qtail;
    int n_queued;
    srv_job **run;
    int n_run;
    int stopping;
    double stop_deadline;
    pthread_t th;

    /* Prefix cache: finished requests' sequences cut to their full blocks,
     * kept (least recently used first out) so that a later prompt that
     * begins the same way forks them.  Their blocks count against the pool
     * like reservations (pc_blocks; shared blocks counted again, which only
     * errs on the safe side) and are given back when a reservation needs
     * them. */
    struct pc_entry {
        nvfp4_seq seq;
        int32_t *toks;           /* the cached tokens, n of them (whole blocks) */
        size_t n;
        uint64_t used;           /* LRU stamp */
    } *pc;
    int n_pc;
    size_t pc_blocks;
    uint64_t pc_clock;

    float *logits;               /* max_seqs rows of V */
    nvfp4_batch_entry *ent;
    srv_job **ent_job;
    void *scratch;
};

double srv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

srv_job *srv_job_new(void)
{
    srv_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->cond, NULL);
    j->refs = 1;
    j->seq = -1;
    j->pending = -1;
    for (int k = 0; k < 4; k++)
        j->extra_eos[k] = -1;
    return j;
}

void srv_job_unref(srv_job *j)
{
    int last;

    if (!j)
        return;
    pthread_mutex_lock(&j->lock);
    last = --j->refs == 0;
    pthread_mutex_unlock(&j->lock);
    if (!last)
        return;
    srv_request_free(&j->req);
    free(j->prompt);
    free(j->text);
    free(j->toks);
    free(j->counts);
    free(j->raw);
    pthread_mutex_destroy(&j->lock);
    pthread_cond_destroy(&j->cond);
    free(j);
}

void srv_job_cancel(srv_job *j)
{
    pthread_mutex_lock(&j->lock);
    j->cancelled = 1;
    pthread_mutex_unlock(&j->lock);
}

/* Finish J (caller holds j->lock): wake the HTTP side. */
static void job_finish_locked(srv_job *j, srv_finish f)
{
    if (!j->done) {
        j->done = 1;
        if (!j->finish)
            j->finish = f;
    }
    pthread_cond_broadcast(&j->cond);
}

static void job_fail(srv_job *j, int status, const char *type, const char *msg)
{
    pthread_mutex_lock(&j->lock);
    if (!j->done) {
        srv_error_set(&j->error, status, type, NULL, "%s", msg);
        job_finish_locked(j, SRV_FINISH_NONE);
    }
    pthread_mutex_unlock(&j->lock);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    size_t nc;
    void *np;

    if (need <= *cap)
        return 0;
    nc = *cap ? *cap : 64;
    while (nc < need)
        nc *= 2;
    np = realloc(*p, nc * elem);
    if (!np)
        return -1;
    *p = np;
    *cap = nc;
    return 0;
}

size_t srv_sched_kv_blocks(const srv_sched *s) { return s->blocks_total; }

int srv_sched_submit(srv_sched *s, srv_job *j)
{
    int rc = 0;

    pthread_mutex_lock(&s->lock);
    if (s->stopping) {
        srv_error_set(&j->error, 503, "server_error", NULL, "the server is shutting down");
        rc = -1;
    } else if (j->reserve_blocks > s->blocks_total) {
        srv_error_set(&j->error, 400, "invalid_request_error", "max_tokens",
                      "the prompt (%zu tokens) plus max_tokens (%zu) need %zu KV blocks of %d "
                      "tokens; the server's KV cache holds %zu",
                      j->n_prompt, j->max_tokens, j->reserve_blocks, NVFP4_KV_BLOCK,
                      s->blocks_total);
        rc = -1;
    } else if (s->n_queued >= s->o.max_queue + (s->o.max_seqs - s->n_run)) {
        /* Jobs about to take a free slot pass through the queue without
         * counting against --max-queue. */
        srv_error_set(&j->error, 429, "rate_limit_error", NULL,
                      "the server is busy: %d requests are waiting; retry later", s->n_queued);
        rc = -1;
    } else {
        pthread_mutex_lock(&j->lock);
        j->refs++;
        pthread_mutex_unlock(&j->lock);
        j->next = NULL;
        if (s->qtail)
            s->qtail->next = j;
        else
            s->qhead = j;
        s->qtail = j;
        s->n_queued++;
        pthread_cond_signal(&s->cond);
    }
    pthread_mutex_lock(&s->met->lock);
    s->met->queued = s->n_queued;
    pthread_mutex_unlock(&s->met->lock);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Bytes at the end of RAW that might begin a stop string: held back. */
static size_t stop_holdback(const srv_job *j)
{
    size_t hold = 0;

    for (size_t k = 0; k < j->req.n_stop; k++) {
        const char *st = j->req.stop[k];
        size_t sl = strlen(st);
        for (size_t n = sl - 1; n > hold; n--)
            if (n <= j->raw_len - j->released &&
                !memcmp(j->raw + j->raw_len - n, st, n)) {
                hold = n;
                break;
            }
    }
    return hold;
}

/* Length of the longest prefix of S[0..n) that ends on a UTF-8 character
 * boundary (an incomplete last sequence is held back). */
static size_t utf8_boundary(const char *s, size_t n)
{
    size_t i = n, back = 0;

    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
        i--;
        back++;
    }
    if (i > 0) {
        unsigned char c = (unsigned char)s[i - 1];
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (c >= 0xC0 && back + 1 < need)
            return i - 1;
    }
    return n;
}

/* Release raw bytes up to UPTO into the client-visible text, as part of the
 * token event EV (or a text-only event when EV is NULL).  Under j->lock. */
static int release_locked(srv_job *j, size_t upto, srv_token *ev)
{
    size_t n = upto > j->released ? upto - j->released : 0;

    if (grow((void **)&j->text, &j->text_cap, j->text_len + n + 1, 1))
        return -1;
    memcpy(j->text + j->text_len, j->raw + j->released, n);
    if (ev) {
        if (!ev->text_len)
            ev->text_off = j->text_len;
        ev->text_len += n;
    }
    j->text_len += n;
    j->text[j->text_len] = 0;
    j->released += n;
    return 0;
}

/* One sampled token of J.  Returns 1 when J is finished. */
static int take_token(srv_sched *s, srv_job *j, float *logits, double t)
{
    srv_token ev;
    int32_t id;
    int fin = 0;
    const char *bytes = NULL;
    size_t blen = 0;

    memset(&ev, 0, sizeof ev);
    id = srv_sample(&j->sampler, logits, s->V, j->counts, j->req.logprobs ? ev.top : NULL,
                    j->req.logprobs ? j->req.top_logprobs : 0,
                    j->req.logprobs ? &ev.logprob : NULL, s->scratch);
    ev.id = id;
    ev.n_top = j->req.logprobs ? j->req.top_logprobs : 0;
    if (j->counts && j->counts[id] < UINT32_MAX)
        j->counts[id]++;

    pthread_mutex_lock(&s->met->lock);
    s->met->generation_tokens++;
    if (j->n_generated == 0)
        srv_hist_add(&s->met->ttft, t - j->t_submit);
    else
        srv_hist_add(&s->met->itl, t - j->t_last);
    pthread_mutex_unlock(&s->met->lock);
    j->t_last = t;

    pthread_mutex_lock(&j->lock);
    j->n_generated++;
    if (!j->req.ignore_eos &&
        (id == s->eos || id == j->extra_eos[0] || id == j->extra_eos[1] ||
         id == j->extra_eos[2] || id == j->extra_eos[3])) {
        /* The end token is not part of the output; text held back for a stop
         * string that never came is released. */
        if (j->raw_len > j->released) {
            memset(&ev, 0, sizeof ev);
            ev.id = -1;
            if (release_locked(j, j->raw_len, &ev) ||
                grow((void **)&j->toks, &j->toks_cap, j->n_toks + 1, sizeof ev))
                goto oom;
            j->toks[j->n_toks++] = ev;
        }
        job_finish_locked(j, SRV_FINISH_STOP);
        pthread_mutex_unlock(&j->lock);
        return 1;
    }
    if (!nvfp4_tokenizer_is_special(s->tok, id))
        bytes = nvfp4_tokenizer_token_bytes(s->tok, id, &blen);
    if (grow((void **)&j->raw, &j->raw_cap, j->raw_len + blen + 1, 1))
        goto oom;
    if (bytes)
        memcpy(j->raw + j->raw_len, bytes, blen);
    j->raw_len += blen;
    {
        /* A stop string may straddle tokens: search from where the longest
         * one could begin among the bytes not released yet. */
        size_t from = j->released, cut = (size_t)-1;
        for (size_t k = 0; k < j->req.n_stop; k++) {
            const char *st = j->req.stop[k];
            size_t sl = strlen(st);
            for (size_t p = from; p + sl <= j->raw_len && p < cut; p++)
                if (!memcmp(j->raw + p, st, sl)) {
                    cut = p;
                    break;
                }
        }
        if (cut != (size_t)-1) {
            if (release_locked(j, cut, &ev))
                goto oom;
            j->released = j->raw_len;
            fin = SRV_FINISH_STOP;
        } else if (j->n_generated >= j->max_tokens) {
            if (release_locked(j, j->raw_len, &ev))
                goto oom;
            fin = SRV_FINISH_LENGTH;
        } else {
            size_t safe = j->raw_len - stop_holdback(j);
            safe = j->released + utf8_boundary(j->raw + j->released, safe - j->released);
            if (release_locked(j, safe, &ev))
                goto oom;
        }
    }
    if (grow((void **)&j->toks, &j->toks_cap, j->n_toks + 1, sizeof ev))
        goto oom;
    j->toks[j->n_toks++] = ev;
    if (fin)
        job_finish_locked(j, (srv_finish)fin);
    else
        pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->lock);
    if (!fin)
        j->pending = id;
    return fin != 0;
oom:
    srv_error_set(&j->error, 500, "server_error", NULL, "out of memory");
    job_finish_locked(j, SRV_FINISH_NONE);
    pthread_mutex_unlock(&j->lock);
    return 1;
}

static void pc_evict(srv_sched *s, int k)
{
    nvfp4_seq_free(s->ctx, s->pc[k].seq);
    free(s->pc[k].toks);
    s->pc_blocks -= s->pc[k].n / NVFP4_KV_BLOCK;
    s->pc[k] = s->pc[--s->n_pc];
}

static void pc_evict_lru(srv_sched *s, int keep)
{
    int lru = -1;

    for (int k = 0; k < s->n_pc; k++)
        if (k != keep && (lru < 0 || s->pc[k].used < s->pc[lru].used))
            lru = k;
    if (lru < 0)
        lru = keep;
    pc_evict(s, lru);
}

/* Keep J's sequence (its whole blocks: the prompt and the generated tokens
 * it has cached) in the prefix cache.  0 when it took the sequence. */
static int pc_insert(srv_sched *s, srv_job *j)
{
    size_t len = nvfp4_seq_length(s->ctx, j->seq), n, g = 0;
    int32_t *toks;
    nvfp4_error err;

    if (s->o.prefix_cache <= 0 || len == (size_t)-1 || j->error.status == 500)
        return -1;
    n = len / NVFP4_KV_BLOCK * NVFP4_KV_BLOCK;
    if (n == 0 || n > j->n_fed + (j->n_fed == j->n_prompt ? j->n_toks : 0))
        return -1;
    if (!(toks = malloc(n * sizeof *toks)))
        return -1;
    memcpy(toks, j->prompt, (n < j->n_fed ? n : j->n_fed) * sizeof *toks);
    /* generated tokens that were fed: every sampled one but the end token
     * (which ends the request unfed) is a token event with its id */
    for (size_t e = 0; j->n_fed + g < n && e < j->n_toks; e++)
        if (j->toks[e].id >= 0)
            toks[j->n_fed + g++] = j->toks[e].id;
    if (j->n_fed + g < n && n > j->n_fed) {
        free(toks);
        return -1;
    }
    for (int k = 0; k < s->n_pc;) {
        struct pc_entry *p = &s->pc[k];
        if (p->n >= n && !memcmp(p->toks, toks, n * sizeof *toks)) {
            p->used = ++s->pc_clock;     /* already cached */
            free(toks);
            return -1;
        }
        if (p->n < n && !memcmp(p->toks, toks, p->n * sizeof *toks))
            pc_evict(s, k);              /* the new one covers it */
        else
            k++;
    }
    /* J's blocks (at most its reservation) change from reserved to cached */
    if (s->reserved - j->reserve_blocks + s->pc_blocks + n / NVFP4_KV_BLOCK > s->blocks_total ||
        nvfp4_seq_truncate(s->ctx, j->seq, n, &err)) {
        free(toks);
        return -1;
    }
    if (s->n_pc >= s->o.prefix_cache)
        pc_evict_lru(s, -1);
    s->pc[s->n_pc++] = (struct pc_entry){j->seq, toks, n, ++s->pc_clock};
    s->pc_blocks += n / NVFP4_KV_BLOCK;
    return 0;
}

/* Remove running job I (seq freed or cached, its reservation returned).
 * Under s->lock. */
static void drop_running(srv_sched *s, int i)
{
    srv_job *j = s->run[i];

    if (pc_insert(s, j))
        nvfp4_seq_free(s->ctx, j->seq);
    j->seq = -1;
    s->reserved -= j->reserve_blocks;
    memmove(&s->run[i], &s->run[i + 1], (size_t)(s->n_run - 1 - i) * sizeof *s->run);
    s->n_run--;
    srv_job_unref(j);
}

static void update_gauges(srv_sched *s)
{
    pthread_mutex_lock(&s->met->lock);
    s->met->running = s->n_run;
    s->met->queued = s->n_queued;
    s->met->kv_total = s->blocks_total;
    s->met->kv_bytes_per_token = nvfp4_context_kv_bytes_per_token(s->ctx);
    s->met->kv_used = s->blocks_total - nvfp4_context_kv_free_blocks(s->ctx);
    s->met->pc_seqs = s->n_pc;
    s->met->pc_blocks = s->pc_blocks;
    pthread_mutex_unlock(&s->met->lock);
}

/* Prefix caching: when a running sequence has already cached at least a
 * block of J's prompt, J forks it (the blocks are shared, copy-on-write)
 * and cuts the fork to the common prefix, so only the rest is prefilled.
 * Its reservation stays whole, so the pool still cannot run out.  Returns
 * the tokens reused (J's sequence made), or 0 (nothing made). */
/* The prefix cache entry that holds most of J's prompt (at least a block,
 * never the whole prompt: its last token must be run for logits), or -1. */
static int pc_match(const srv_sched *s, const srv_job *j, size_t *len)
{
    int best = -1;

    *len = 0;
    for (int k = 0; k < s->n_pc; k++) {
        const struct pc_entry *p = &s->pc[k];
        size_t n = p->n < j->n_prompt - 1 ? p->n : j->n_prompt - 1, m = 0;
        while (m < n && p->toks[m] == j->prompt[m])
            m++;
        if (m >= NVFP4_KV_BLOCK && m > *len) {
            *len = m;
            best = k;
        }
    }
    return best;
}

static size_t share_prefix(srv_sched *s, srv_job *j)
{
    nvfp4_seq from = -1;
    size_t best_len = 0;
    nvfp4_error err;
    int k = pc_match(s, j, &best_len);

    if (k >= 0) {
        from = s->pc[k].seq;
        s->pc[k].used = ++s->pc_clock;
    }
    for (int i = 0; i < s->n_run; i++) {
        srv_job *p = s->run[i];
        size_t n = p->n_fed < j->n_prompt - 1 ? p->n_fed : j->n_prompt - 1, m = 0;
        while (m < n && p->prompt[m] == j->prompt[m])
            m++;
        if (m > best_len) {
            best_len = m;
            from = p->seq;
        }
    }
    if (from < 0 || best_len < NVFP4_KV_BLOCK)
        return 0;
    if (nvfp4_seq_fork(s->ctx, from, &j->seq, &err))
        return 0;
    if (nvfp4_seq_truncate(s->ctx, j->seq, best_len, &err)) {
        nvfp4_seq_free(s->ctx, j->seq);
        j->seq = -1;
        return 0;
    }
    return best_len;
}

/* Under s->lock: cancelled and timed-out jobs leave, queued ones come in. */
static void housekeeping(srv_sched *s, double t)
{
    for (int i = 0; i < s->n_run;) {
        srv_job *j = s->run[i];
        int gone;
        pthread_mutex_lock(&j->lock);
        gone = j->cancelled || j->done;
        pthread_mutex_unlock(&j->lock);
        if (!gone && j->deadline > 0 && t > j->deadline) {
            job_fail(j, 504, "timeout_error", "the request timed out");
            gone = 1;
        }
        if (!gone && s->stopping && t > s->stop_deadline) {
            job_fail(j, 503, "server_error", "the server shut down before the request finished");
            gone = 1;
        }
        if (gone)
            drop_running(s, i);
        else
            i++;
    }
    /* queued jobs that were cancelled or timed out */
    for (srv_job **pp = &s->qhead; *pp;) {
        srv_job *j = *pp;
        int gone;
        pthread_mutex_lock(&j->lock);
        gone = j->cancelled;
        pthread_mutex_unlock(&j->lock);
        if (!gone && j->deadline > 0 && t > j->deadline) {
            job_fail(j, 504, "timeout_error", "the request timed out while queued");
            gone = 1;
        }
        if (!gone && s->stopping) {
            job_fail(j, 503, "server_error", "the server is shutting down");
            gone = 1;
        }
        if (gone) {
            *pp = j->next;
            if (s->qtail == j) {
                s->qtail = NULL;
                for (srv_job *q = s->qhead; q; q = q->next)
                    s->qtail = q;
            }
            s->n_queued--;
            srv_job_unref(j);
        } else {
            pp = &j->next;
        }
    }
    while (s->qhead && s->n_run < s->o.max_seqs) {
        srv_job *j = s->qhead;
        nvfp4_error err;
        size_t reuse, len;
        /* cached prefixes give their blocks back to a reservation that
         * needs them, the one this request would fork last */
        int keep = pc_match(s, j, &len);
        while (s->n_pc > 0 && s->reserved + s->pc_blocks + j->reserve_blocks > s->blocks_total) {
            pc_evict_lru(s, keep);
            keep = pc_match(s, j, &len);
        }
        if (s->reserved + s->pc_blocks + j->reserve_blocks > s->blocks_total)
            break;
        reuse = share_prefix(s, j);
        if (!reuse && nvfp4_seq_create(s->ctx, &j->seq, &err))
            break;
        s->qhead = j->next;
        if (!s->qhead)
            s->qtail = NULL;
        s->n_queued--;
        s->reserved += j->reserve_blocks;
        j->n_fed = reuse;
        if (reuse) {
            pthread_mutex_lock(&s->met->lock);
            s->met->prefix_cached_tokens += reuse;
            pthread_mutex_unlock(&s->met->lock);
        }
        if (j->req.presence_penalty != 0 || j->req.frequency_penalty != 0) {
            j->counts = calloc(s->V, sizeof *j->counts);
            if (!j->counts) {
                job_fail(j, 500, "server_error", "out of memory");
            }
        }
        s->run[s->n_run++] = j;
    }
    update_gauges(s);
}

static void *sched_main(void *arg)
{
    srv_sched *s = arg;

    pthread_mutex_lock(&s->lock);
    for (;;) {
        size_t n = 0, budget = s->o.max_batch_tokens, nrow = 0;
        nvfp4_error err;
        nvfp4_status st;
        double t;

        housekeeping(s, srv_now());
        if (s->stopping && s->n_run == 0 && !s->qhead)
            break;
        if (s->n_run == 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&s->cond, &s->lock, &ts);
            continue;
        }
        /* Decode tokens first (one each), then prompt chunks in arrival
         * order with what the budget leaves. */
        for (int i = 0; i < s->n_run && budget > 0; i++) {
            srv_job *j = s->run[i];
            if (j->pending < 0)
                continue;
            s->ent[n] = (nvfp4_batch_entry){j->seq, &j->pending, 1, NVFP4_LOGITS_LAST,
                                            s->logits + nrow * s->V};
            s->ent_job[n++] = j;
            nrow++;
            budget--;
        }
        for (int i = 0; i < s->n_run && budget > 0; i++) {
            srv_job *j = s->run[i];
            size_t left = j->n_prompt - j->n_fed, take;
            if (j->pending >= 0 || left == 0)
                continue;
            take = left < budget ? left : budget;
            s->ent[n] = (nvfp4_batch_entry){j->seq, j->prompt + j->n_fed, take,
                                            take == left ? NVFP4_LOGITS_LAST : NVFP4_LOGITS_NONE,
                                            take == left ? s->logits + nrow * s->V : NULL};
            if (take == left)
                nrow++;
            s->ent_job[n++] = j;
            budget -= take;
        }
        pthread_mutex_unlock(&s->lock);
        st = n ? nvfp4_context_run(s->ctx, s->ent, n, &err) : NVFP4_OK;
        t = srv_now();
        pthread_mutex_lock(&s->lock);
        if (st != NVFP4_OK) {
            /* Reservations make KV_FULL impossible; anything else is the
             * backend's: the batch's requests fail, the server goes on. */
            char msg[600];
            snprintf(msg, sizeof msg, "inference failed: %s",
                     err.text[0] ? err.text : nvfp4_strerror(st));
            fprintf(stderr, "nvfp4 serve: %s\n", msg);
            for (size_t e = 0; e < n; e++)
                job_fail(s->ent_job[e], 500, "server_error", msg);
            continue;
        }
        for (size_t e = 0; e < n; e++) {
            srv_job *j = s->ent_job[e];
            if (s->ent[e].tokens != &j->pending) {
                j->n_fed += s->ent[e].n_tokens;
                pthread_mutex_lock(&s->met->lock);
                s->met->prompt_tokens += s->ent[e].n_tokens;
                pthread_mutex_unlock(&s->met->lock);
            }
            if (s->ent[e].logits == NVFP4_LOGITS_LAST)
                take_token(s, j, s->ent[e].out, t);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

srv_sched *srv_sched_start(nvfp4_model *m, const srv_sched_options *o, srv_metrics *met,
                           nvfp4_error *err)
{
    srv_sched *s = calloc(1, sizeof *s);
    nvfp4_context_options co;

    if (!s)
        goto nomem;
    s->m = m;
    s->o = *o;
    s->met = met;
    s->tok = nvfp4_model_tokenizer(m);
    s->V = (size_t)nvfp4_model_vocab_size(m);
    s->eos = nvfp4_model_eos(m);
    nvfp4_context_options_init(&co);
    co.kv_tokens = o->kv_tokens;
    co.max_batch_tokens = o->max_batch_tokens;
    co.max_seqs = o->max_seqs + (o->prefix_cache > 0 ? o->prefix_cache : 0);
    co.kv_cache_dtype = o->kv_cache_dtype;
    s->ctx = nvfp4_context_create(m, &co, err);
    if (!s->ctx) {
        free(s);
        return NULL;
    }
    s->blocks_total = nvfp4_context_kv_blocks(s->ctx);
    s->logits = malloc((size_t)o->max_seqs * s->V * sizeof(float));
    s->ent = calloc((size_t)o->max_seqs, sizeof *s->ent);
    s->ent_job = calloc((size_t)o->max_seqs, sizeof *s->ent_job);
    s->run = calloc((size_t)o->max_seqs, sizeof *s->run);
    s->scratch = malloc(srv_sample_scratch(s->V));
    s->pc = calloc((size_t)(o->prefix_cache > 0 ? o->prefix_cache : 1), sizeof *s->pc);
    if (!s->logits || !s->ent || !s->ent_job || !s->run || !s->scratch || !s->pc)
        goto nomem;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    if (pthread_create(&s->th, NULL, sched_main, s)) {
        nvfp4_context_free(s->ctx);
        s->ctx = NULL;
        goto nomem;
    }
    update_gauges(s);
    return s;
nomem:
    if (s) {
        nvfp4_context_free(s->ctx);
        free(s->logits);
        free(s->ent);
        free(s->ent_job);
        free(s->run);
        free(s->scratch);
        free(s->pc);
        free(s);
    }
    memset(err, 0, sizeof *err);
    err->status = NVFP4_ERR_NOMEM;
    snprintf(err->text, sizeof err->text, "out of memory starting the scheduler");
    return NULL;
}

void srv_sched_stop(srv_sched *s, double grace)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    s->stop_deadline = srv_now() + grace;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->th, NULL);
    while (s->n_pc > 0)
        pc_evict(s, s->n_pc - 1);
    nvfp4_context_free(s->ctx);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s->logits);
    free(s->ent);
    free(s->ent_job);
    free(s->run);
    free(s->scratch);
    free(s->pc);
    free(s);
}
