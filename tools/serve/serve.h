/* SPDX-License-Identifier: MIT */
/* nvfp4 serve: the pieces of the OpenAI-compatible server (tools/serve/). */
#ifndef NVFP4_SERVE_H
#define NVFP4_SERVE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <nvfp4/model.h>

/* ---- requests (request.c): body bytes -> srv_request, nothing else -------- */

typedef enum { SRV_COMPLETION, SRV_CHAT } srv_kind;

typedef struct {
    char *role;
    char *content;
} srv_message;

#define SRV_MAX_STOP 16          /* stop strings per request */
#define SRV_MAX_STOP_LEN 256     /* bytes per stop string */
#define SRV_MAX_TOP_LOGPROBS 20

typedef struct {
    srv_kind kind;
    char *model;                 /* NULL when absent */
    char *prompt;                /* completion text prompt (NUL-terminated), or NULL */
    size_t prompt_len;
    int32_t *prompt_ids;         /* completion prompt given as token ids, or NULL */
    size_t n_prompt_ids;
    srv_message *messages;       /* chat */
    size_t n_messages;
    long max_tokens;             /* -1: not given */
    double temperature;          /* default 1 */
    double top_p;                /* default 1 */
    long top_k;                  /* <= 0: off */
    double min_p;                /* default 0 */
    double presence_penalty, frequency_penalty;
    int has_seed;
    uint64_t seed;
    char *stop[SRV_MAX_STOP];
    size_t n_stop;
    int logprobs;                /* 0: none; 1: chosen token's logprob */
    int top_logprobs;            /* alternatives per token, 0..SRV_MAX_TOP_LOGPROBS */
    int stream;
    int include_usage;           /* stream_options.include_usage */
    int ignore_eos;              /* generate past EOS / end of turn (benchmarks) */
} srv_request;

/* An OpenAI-style error: HTTP status, message, offending field. */
typedef struct {
    int status;
    const char *type;            /* "invalid_request_error", ... */
    char message[320];
    char param[64];
} srv_error;

void srv_error_set(srv_error *e, int status, const char *type, const char *param,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Parse a request body of LEN bytes (not NUL-terminated, any content) for
 * KIND.  0 and *out filled (srv_request_free it), or -1 and *err filled
 * (status 400 naming the field); *out is then empty. */
int srv_request_parse(srv_kind kind, const char *body, size_t len, srv_request *out,
                      srv_error *err);
void srv_request_free(srv_request *r);

/* ---- sampling (sample.c) ----------------------------------------------------- */

typedef struct {
    float temperature, top_p, min_p, presence, frequency;
    int top_k;
    uint64_t rng;                /* splitmix64 state */
} srv_sampler;

typedef struct {
    int32_t id;
    float logprob;
} srv_toplp;

void srv_sampler_init(srv_sampler *s, const srv_request *r, uint64_t seed);
/* Pick a token from LOGITS (VOCAB floats; modified: penalties are applied in
 * place).  COUNTS[i]: times token i was generated so far (NULL: none).  When
 * TOP is not NULL, its N_TOP best log-probabilities of the unmodified
 * distribution (log-softmax of the model's logits) are written there, and
 * *CHOSEN_LP gets the picked token's. */
int32_t srv_sample(srv_sampler *s, float *logits, size_t vocab, const uint32_t *counts,
                   srv_toplp *top, int n_top, float *chosen_lp, void *scratch);
/* Bytes of scratch srv_sample needs for VOCAB. */
size_t srv_sample_scratch(size_t vocab);

/* ---- metrics (metrics.c) -------------------------------------------------- */

#define SRV_HIST_BUCKETS 14
typedef struct {
    uint64_t count[SRV_HIST_BUCKETS + 1];  /* last: +Inf */
    double sum;
    uint64_t n;
} srv_hist;

typedef struct {
    pthread_mutex_t lock;
    uint64_t requests[6];        /* by route: completions, chat, models, tokenize, detokenize, other */
    uint64_t responses_by_class[6]; /* 1xx..5xx by first digit (index 1..5) */
    uint64_t prompt_tokens, generation_tokens;
    uint64_t prefix_cached_tokens;  /* prompt tokens taken from another sequence's KV */
    int running, queued;
    size_t kv_used, kv_total;
    size_t kv_bytes_per_token;   /* K and V of every layer, one token */
    int pc_seqs;                 /* prefix cache: sequences kept */
    size_t pc_blocks;            /* and their blocks (shared ones counted each time) */
    srv_hist ttft, itl;
} srv_metrics;

void srv_metrics_init(srv_metrics *m);
void srv_hist_add(srv_hist *h, double seconds);
/* Prometheus text exposition; malloc'ed. */
char *srv_metrics_render(srv_metrics *m);

/* ---- scheduler (scheduler.c) ---------------------------------------------- */

typedef enum { SRV_FINISH_NONE = 0, SRV_FINISH_STOP, SRV_FINISH_LENGTH } srv_finish;

/* One generated token as the client sees it. */
typedef struct {
    int32_t id;
    size_t text_off, text_len;   /* the text it released, in job->text */
    float logprob;
    int n_top;
    srv_toplp top[SRV_MAX_TOP_LOGPROBS];
} srv_token;

typedef struct srv_job srv_job;
struct srv_job {
    /* set before submission, read-only afterwards */
    srv_request req;
    int32_t *prompt;             /* token ids of the prompt */
    size_t n_prompt;
    size_t max_tokens;
    size_t reserve_blocks;       /* KV blocks it may take, at most */
    double t_submit, deadline;   /* monotonic seconds; deadline 0: none */
    int32_t extra_eos[4];        /* end-of-turn tokens (chat), -1: none */

    /* shared with the HTTP side, under lock */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int refs;                    /* HTTP side + scheduler */
    int cancelled;
    int done;
    srv_finish finish;
    srv_error error;             /* error.status != 0: failed */
    char *text;                  /* released text (what the client may see) */
    size_t text_len, text_cap;
    srv_token *toks;             /* generated tokens, in order */
    size_t n_toks, toks_cap;
    size_t n_generated;          /* tokens generated (incl. held back / stop) */

    /* scheduler-only */
    srv_job *next;
    nvfp4_seq seq;
    size_t n_fed;                /* prompt tokens prefilled */
    int32_t pending;             /* sampled token to feed next, -1: none */
    srv_sampler sampler;
    uint32_t *counts;            /* per-vocab generation counts (penalties) */
    char *raw;                   /* all generated bytes (before stop cut) */
    size_t raw_len, raw_cap;
    size_t released;             /* bytes of raw released to text */
    double t_last;               /* time of the previous token */
};

typedef struct srv_sched srv_sched;

typedef struct {
    size_t max_batch_tokens;     /* per step */
    size_t kv_tokens;            /* KV pool; 0: max_ctx * max_seqs bounded */
    int max_seqs;                /* running at most */
    int max_queue;               /* waiting at most (then 429) */
    int prefix_cache;            /* finished sequences kept for their prefixes; 0: none */
    nvfp4_kv_cache_dtype kv_cache_dtype; /* --kv-cache-dtype; 0: auto */
} srv_sched_options;

srv_sched *srv_sched_start(nvfp4_model *m, const srv_sched_options *o, srv_metrics *met,
                           nvfp4_error *err);
/* Stop taking jobs; let running ones finish until GRACE seconds have passed,
 * then cancel the rest; join the thread and free everything. */
void srv_sched_stop(srv_sched *s, double grace);
size_t srv_sched_kv_blocks(const srv_sched *s);
/* Queue JOB (refs must already count the HTTP side; the scheduler adds its
 * own).  0, or -1 with job->error set (429 when the queue is full, 400 when
 * it could never fit, 503 when stopping). */
int srv_sched_submit(srv_sched *s, srv_job *job);
void srv_job_cancel(srv_job *job);
/* Drop one reference; the last one frees the job. */
void srv_job_unref(srv_job *job);
srv_job *srv_job_new(void);

double srv_now(void);

/* ---- the server (http.c) ------------------------------------------------------ */

struct MHD_Daemon;

typedef struct {
    /* configuration */
    const char *host;
    int port;                    /* 0: any free port */
    const char *api_key;         /* NULL: no authentication */
    const char *model_name;
    size_t max_body;             /* bytes */
    double timeout;              /* seconds per request; 0: none */
    int max_connections;

    /* state */
    struct MHD_Daemon *daemon;
    pthread_mutex_t lock;        /* sched, stopping, in_flight */
    nvfp4_model *model;
    srv_sched *sched;            /* NULL while loading */
    int stopping;
    int in_flight;               /* requests begun and not yet completed */
    pthread_cond_t idle;         /* signalled when in_flight drops to 0 (CLOCK_MONOTONIC) */
    const nvfp4_tokenizer *tok;
    pthread_mutex_t tok_lock;    /* encoding */
    const nvfp4_chat_template *chat;  /* the model's template, or NULL: ChatML */
    char chat_error[400];        /* why the model's template is unusable, or "" */
    int32_t chat_end[4];         /* end-of-turn tokens the vocabulary has, -1: none */
    size_t vocab;
    int max_ctx;
    long long created;
    srv_metrics met;
} srv_server;

/* Listen on host:port (threads of its own).  0, or -1 with MSG filled. */
int srv_http_start(srv_server *srv, char *msg, size_t msg_len);
/* The port actually bound. */
int srv_http_port(const srv_server *srv);
/* Stop accepting connections (the listening socket closes). */
void srv_http_quiesce(srv_server *srv);
/* Wait until every request begun has been answered in full (its response,
 * a stream's [DONE] included, handed to the socket), at most SECONDS.  The
 * requests still unfinished then. */
int srv_http_drain(srv_server *srv, double seconds);
/* Close every connection and join the threads. */
void srv_http_stop(srv_server *srv);

#endif
