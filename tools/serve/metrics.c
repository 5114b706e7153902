/* SPDX-License-Identifier: MIT */
/* /metrics: counters, gauges and latency histograms in the Prometheus text
 * exposition format (version 0.0.4). */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

/* Bucket upper bounds in seconds, shared by time-to-first-token and
 * inter-token latency. */
static const double bounds[SRV_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                0.25,  0.5,    1,     2.5,  5,     10,   30};

static const char *const routes[6] = {"completions", "chat_completions", "models",
                                      "tokenize", "detokenize", "other"};

void srv_metrics_init(srv_metrics *m)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->lock, NULL);
}

void srv_hist_add(srv_hist *h, double s)
{
    int b = 0;
    while (b < SRV_HIST_BUCKETS && s > bounds[b])
        b++;
    h->count[b]++;
    h->sum += s;
    h->n++;
}

typedef struct {
    char *buf;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (b->oom)
        return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        {
            size_t cap = b->cap * 2 + (size_t)n + 256;
            char *nb = realloc(b->buf, cap);
            if (!nb) {
                b->oom = 1;
                return;
            }
            b->buf = nb;
            b->cap = cap;
        }
    }
}

static void hist(sbuf *b, const char *name, const char *help, const srv_hist *h)
{
    uint64_t acc = 0;

    put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int i = 0; i < SRV_HIST_BUCKETS; i++) {
        acc += h->count[i];
        put(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)acc);
    }
    acc += h->count[SRV_HIST_BUCKETS];
    put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
        (unsigned long long)acc, name, h->sum, name, (unsigned long long)h->n);
}

char *srv_metrics_render(srv_metrics *m)
{
    sbuf b = {malloc(4096), 0, 4096, 0};

    if (!b.buf)
        return NULL;
    b.buf[0] = 0;
    pthread_mutex_lock(&m->lock);
    put(&b, "# HELP nvfp4_requests_total HTTP requests received, by route.\n"
            "# TYPE nvfp4_requests_total counter\n");
    for (int i = 0; i < 6; i++)
        put(&b, "nvfp4_requests_total{route=\"%s\"} %llu\n", routes[i],
            (unsigned long long)m->requests[i]);
    put(&b, "# HELP nvfp4_responses_total HTTP responses sent, by status class.\n"
            "# TYPE nvfp4_responses_total counter\n");
    for (int i = 1; i <= 5; i++)
        put(&b, "nvfp4_responses_total{code=\"%dxx\"} %llu\n", i,
            (unsigned long long)m->responses_by_class[i]);
    put(&b,
        "# HELP nvfp4_prompt_tokens_total Prompt tokens prefilled.\n"
        "# TYPE nvfp4_prompt_tokens_total counter\n"
        "nvfp4_prompt_tokens_total %llu\n"
        "# HELP nvfp4_prefix_cached_tokens_total Prompt tokens whose KV was shared from a "
        "running sequence or the prefix cache.\n"
        "# TYPE nvfp4_prefix_cached_tokens_total counter\n"
        "nvfp4_prefix_cached_tokens_total %llu\n"
        "# HELP nvfp4_generation_tokens_total Tokens generated.\n"
        "# TYPE nvfp4_generation_tokens_total counter\n"
        "nvfp4_generation_tokens_total %llu\n"
        "# HELP nvfp4_sequences_running Sequences in the running batch.\n"
        "# TYPE nvfp4_sequences_running gauge\n"
        "nvfp4_sequences_running %d\n"
        "# HELP nvfp4_sequences_queued Requests waiting for room in the batch.\n"
        "# TYPE nvfp4_sequences_queued gauge\n"
        "nvfp4_sequences_queued %d\n"
        "# HELP nvfp4_kv_blocks_used KV cache blocks held by sequences.\n"
        "# TYPE nvfp4_kv_blocks_used gauge\n"
        "nvfp4_kv_blocks_used %zu\n"
        "# HELP nvfp4_kv_blocks_total KV cache blocks in the pool.\n"
        "# TYPE nvfp4_kv_blocks_total gauge\n"
        "nvfp4_kv_blocks_total %zu\n"
        "# HELP nvfp4_kv_cache_bytes_per_token KV cache bytes one token takes (K and V, "
        "all layers; 1 byte an element for an FP8 cache, 4 for float32).\n"
        "# TYPE nvfp4_kv_cache_bytes_per_token gauge\n"
        "nvfp4_kv_cache_bytes_per_token %zu\n"
        "# HELP nvfp4_prefix_cache_sequences Finished requests' sequences kept for their "
        "prefixes.\n"
        "# TYPE nvfp4_prefix_cache_sequences gauge\n"
        "nvfp4_prefix_cache_sequences %d\n"
        "# HELP nvfp4_prefix_cache_blocks KV blocks of the prefix cache (a block shared by "
        "two counts twice).\n"
        "# TYPE nvfp4_prefix_cache_blocks gauge\n"
        "nvfp4_prefix_cache_blocks %zu\n",
        (unsigned long long)m->prompt_tokens, (unsigned long long)m->prefix_cached_tokens,
        (unsigned long long)m->generation_tokens,
        m->running, m->queued, m->kv_used, m->kv_total, m->kv_bytes_per_token, m->pc_seqs,
        m->pc_blocks);
    hist(&b, "nvfp4_time_to_first_token_seconds",
         "Time from a request's arrival to its first generated token.", &m->ttft);
    hist(&b, "nvfp4_inter_token_latency_seconds",
         "Time between consecutive generated tokens of a request.", &m->itl);
    pthread_mutex_unlock(&m->lock);
    if (b.oom) {
        free(b.buf);
        return NULL;
    }
    return b.buf;
}
