/* SPDX-License-Identifier: MIT */
/* nvfp4 serve: an OpenAI-compatible HTTP server with continuous batching
 * (tools/serve/: http.c, scheduler.c, sample.c, request.c, metrics.c). */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli-model.h"
#include "serve/serve.h"

static void help(FILE *out)
{
    fprintf(out,
            "Usage: nvfp4 serve MODEL [OPTIONS]\n"
            "Serve MODEL (a directory with tokenizer.json) over HTTP with the OpenAI API:\n"
            "POST /v1/completions, POST /v1/chat/completions (both with \"stream\": true as\n"
            "server-sent events), GET /v1/models, POST /tokenize, POST /detokenize,\n"
            "GET /health (503 while loading, 200 ready) and GET /metrics (Prometheus).\n"
            "Requests join the running batch at the next step (continuous batching); a\n"
            "prompt that begins with a block or more of a running sequence's prompt, or\n"
            "of a finished request's prompt and output, shares its cached KV (prefix\n"
            "caching).\n"
            "Chat prompts are rendered with the model's chat template (chat_template.jinja\n"
            "or tokenizer_config.json), ChatML when it has none.\n"
            "SIGINT or SIGTERM stops accepting connections, lets running requests finish\n"
            "for the grace period and cancels the rest (a stream ends with an error event\n"
            "and [DONE]); the responses get up to 5 s more to be written out.\n\n"
            "  --host ADDR             numeric IPv4/IPv6 address to listen on\n"
            "                          (default 127.0.0.1)\n"
            "  --port N                TCP port (default 8000; 0: any free port)\n"
            "  --api-key KEY           require 'Authorization: Bearer KEY' on every route\n"
            "                          but /health\n"
            "  --api-key-file FILE     the same, the key read from FILE's first line\n"
            "  --served-model-name NAME  the model id of the API (default: MODEL's\n"
            "                          directory name)\n"
            "  --ctx N                 longest sequence, prompt and output (default: the\n"
            "                          model's, at most 4096)\n"
            "  --max-seqs N            sequences in the running batch at most (default 32)\n"
            "  --max-queue N           requests waiting for room at most; more get 429\n"
            "                          (default 64)\n"
            "  --max-batch-tokens N    tokens per batch step: decode tokens plus prompt\n"
            "                          chunks (default 256)\n"
            "  --kv-tokens N           KV cache pool in tokens (default: 4 x --ctx)\n"
            "  --prefix-cache N        finished requests whose KV blocks are kept for\n"
            "                          later prompts that begin the same way, while no\n"
            "                          request needs the room (default 32; 0: none)\n"
            "  --max-body BYTES        largest request body; larger gets 413 (default 1048576)\n"
            "  --timeout SECONDS       per-request limit, then 504 (default 600; 0: none)\n"
            "  --grace SECONDS         on SIGINT/SIGTERM, time running requests get to\n"
            "                          finish (default 10)\n"
            "  --max-connections N     open connections at most (default 256)\n"
            "%s%s"
            "  -h, --help              show this help\n"
            "The listening address is printed on stderr as 'listening on http://ADDR:PORT'\n"
            "and 'ready' once the model is loaded.\n",
            cli_model_options_help, cli_kv_options_help);
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= 0) || v > 1e9)
        return -1;
    *out = v;
    return 0;
}

static char *read_key_file(const char *path)
{
    FILE *f = fopen(path, "r");
    char buf[1024];
    size_t n;

    if (!f)
        return NULL;
    if (!fgets(buf, sizeof buf, f)) {
        fclose(f);
        return NULL;
    }
    fclose(f);
    n = strcspn(buf, "\r\n");
    buf[n] = 0;
    return n ? strdup(buf) : NULL;
}

static const char *base_name(const char *path, char *buf, size_t n)
{
    size_t len = strlen(path);
    const char *b;

    while (len > 1 && path[len - 1] == '/')
        len--;
    snprintf(buf, n, "%.*s", (int)len, path);
    b = strrchr(buf, '/');
    return b && b[1] ? b + 1 : buf;
}

/* After the grace period, how long the finished responses get to be
 * written out before the connections are closed. */
enum { SERVE_DRAIN_SECONDS = 5 };

static int run(int argc, char **argv)
{
    enum { OPT_HOST = CLI_OPT_OTHER, OPT_PORT, OPT_KEY, OPT_KEYFILE, OPT_NAME, OPT_CTX, OPT_SEQS,
           OPT_QUEUE, OPT_BATCH, OPT_KV, OPT_PC, OPT_BODY, OPT_TIMEOUT, OPT_GRACE, OPT_CONNS };
    static const struct option opts[] = {CLI_MODEL_LONG_OPTIONS, CLI_KV_LONG_OPTION,
                                         {"host", required_argument, NULL, OPT_HOST},
                                         {"port", required_argument, NULL, OPT_PORT},
                                         {"api-key", required_argument, NULL, OPT_KEY},
                                         {"api-key-file", required_argument, NULL, OPT_KEYFILE},
                                         {"served-model-name", required_argument, NULL, OPT_NAME},
                                         {"ctx", required_argument, NULL, OPT_CTX},
                                         {"max-seqs", required_argument, NULL, OPT_SEQS},
                                         {"max-queue", required_argument, NULL, OPT_QUEUE},
                                         {"max-batch-tokens", required_argument, NULL, OPT_BATCH},
                                         {"kv-tokens", required_argument, NULL, OPT_KV},
                                         {"prefix-cache", required_argument, NULL, OPT_PC},
                                         {"max-body", required_argument, NULL, OPT_BODY},
                                         {"timeout", required_argument, NULL, OPT_TIMEOUT},
                                         {"grace", required_argument, NULL, OPT_GRACE},
                                         {"max-connections", required_argument, NULL, OPT_CONNS},
                                         {NULL, 0, NULL, 0}};
    cli_model_opts mo = {0};
    srv_server srv;
    srv_sched_options so = {256, 0, 32, 64, 32, NVFP4_KV_CACHE_AUTO};
    long v, ctx = 0, kv = 0;
    double grace = 10;
    const char *key_file = NULL;
    char *key = NULL, namebuf[512], msg[600];
    nvfp4_error err;
    sigset_t sigs;
    int c, sig, n, rc = CLI_OK;
    srv_sched *sched;
    nvfp4_chat_template *chat = NULL;

    memset(&srv, 0, sizeof srv);
    srv.host = "127.0.0.1";
    srv.port = 8000;
    srv.max_body = 1 << 20;
    srv.timeout = 600;
    srv.max_connections = 256;
    for (int k = 0; k < 4; k++)
        srv.chat_end[k] = -1;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int r = cli_model_option(&mo, c, optarg);
        if (r == 1)
            continue;
        if (r < 0)
            return cli_usage(&cli_serve, "bad value '%s' for %s", optarg, argv[optind - 1]);
#define NUM(lo, hi)                                                                        \
    if (parse_long(optarg, lo, hi, &v))                                                    \
        return cli_usage(&cli_serve, "%s: expected an integer from %ld to %ld, got '%s'", \
                         argv[optind - 1], (long)(lo), (long)(hi), optarg)
        switch (c) {
        case OPT_HOST: srv.host = optarg; break;
        case OPT_PORT: NUM(0, 65535); srv.port = (int)v; break;
        case OPT_KEY: free(key); key = strdup(optarg); break;
        case OPT_KEYFILE: key_file = optarg; break;
        case OPT_NAME:
            if (!*optarg)
                return cli_usage(&cli_serve, "--served-model-name: empty name");
            srv.model_name = optarg;
            break;
        case OPT_CTX: NUM(1, 1 << 24); ctx = v; break;
        case OPT_SEQS: NUM(1, 1024); so.max_seqs = (int)v; break;
        case OPT_QUEUE: NUM(0, 1 << 20); so.max_queue = (int)v; break;
        case OPT_BATCH: NUM(1, 1 << 20); so.max_batch_tokens = (size_t)v; break;
        case OPT_KV: NUM(NVFP4_KV_BLOCK, 1L << 30); kv = v; break;
        case OPT_PC: NUM(0, 1024); so.prefix_cache = (int)v; break;
        case OPT_BODY: NUM(64, 1L << 30); srv.max_body = (size_t)v; break;
        case OPT_CONNS: NUM(1, 65536); srv.max_connections = (int)v; break;
        case OPT_TIMEOUT:
            if (parse_double(optarg, &srv.timeout))
                return cli_usage(&cli_serve, "--timeout: expected seconds, got '%s'", optarg);
            break;
        case OPT_GRACE:
            if (parse_double(optarg, &grace))
                return cli_usage(&cli_serve, "--grace: expected seconds, got '%s'", optarg);
            break;
        default:
            free(key);
            return cli_usage(&cli_serve, "unknown option '%s'", argv[optind - 1]);
        }
#undef NUM
    }
    if (optind + 1 != argc) {
        free(key);
        return cli_usage(&cli_serve, optind == argc ? "missing MODEL" : "too many arguments");
    }
    if (so.max_batch_tokens < (size_t)so.max_seqs) {
        free(key);
        return cli_usage(&cli_serve, "--max-batch-tokens (%zu) must be at least --max-seqs "
                                     "(%d): each running sequence decodes a token per step",
                         so.max_batch_tokens, so.max_seqs);
    }
    if (key_file) {
        free(key);
        if (!(key = read_key_file(key_file)))
            return cli_fail("--api-key-file %s: cannot read a key from its first line",
                            key_file);
    }
    srv.api_key = key;
    if (!srv.model_name)
        srv.model_name = base_name(argv[optind], namebuf, sizeof namebuf);
    srv.created = (long long)time(NULL);
    pthread_mutex_init(&srv.lock, NULL);
    pthread_mutex_init(&srv.tok_lock, NULL);
    {
        /* srv_http_drain's deadline is on srv_now()'s clock */
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&srv.idle, &ca);
        pthread_condattr_destroy(&ca);
    }
    srv_metrics_init(&srv.met);

    /* Every thread is made with these blocked; the main thread takes them
     * with sigwait. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (srv_http_start(&srv, msg, sizeof msg)) {
        free(key);
        return cli_fail("%s", msg);
    }
    fprintf(stderr, "nvfp4 serve: listening on http://%s%s%s:%d\n",
            strchr(srv.host, ':') ? "[" : "", srv.host, strchr(srv.host, ':') ? "]" : "",
            srv_http_port(&srv));
    fflush(stderr);

    srv.model = cli_model_open(argv[optind], &mo, (int)ctx);
    if (!srv.model) {
        rc = CLI_INVALID;
        goto out;
    }
    srv.tok = nvfp4_model_tokenizer(srv.model);
    if (!srv.tok) {
        rc = cli_fail("%s: no tokenizer.json beside the model; the server needs one",
                      argv[optind]);
        goto out;
    }
    srv.vocab = (size_t)nvfp4_model_vocab_size(srv.model);
    srv.max_ctx = nvfp4_model_max_ctx(srv.model);
    {
        /* Chat turns end at the template's end-of-turn token as well as at
         * the model's EOS: those of ChatML, Llama 3, Phi-3 and Gemma. */
        static const char *const ends[] = {"<|im_end|>", "<|eot_id|>", "<|end|>",
                                           "<end_of_turn>"};
        int k = 0;
        for (size_t i = 0; i < sizeof ends / sizeof ends[0] && k < 4; i++) {
            int32_t id = nvfp4_tokenizer_token_id(srv.tok, ends[i]);
            if (id >= 0)
                srv.chat_end[k++] = id;
        }
    }
    chat = nvfp4_chat_template_load(argv[optind], &err);
    if (!chat && err.status != NVFP4_ERR_NOT_FOUND) {
        snprintf(srv.chat_error, sizeof srv.chat_error,
                 "the model's chat template is unusable: %.300s", err.text);
        fprintf(stderr, "nvfp4 serve: warning: %s; /v1/chat/completions will fail\n",
                srv.chat_error);
    }
    srv.chat = chat;
    so.kv_tokens = kv ? (size_t)kv : (size_t)srv.max_ctx * 4;
    so.kv_cache_dtype = mo.kv_dtype;
    sched = srv_sched_start(srv.model, &so, &srv.met, &err);
    if (!sched) {
        rc = cli_fail_error(&err);
        goto out;
    }
    pthread_mutex_lock(&srv.lock);
    srv.sched = sched;
    pthread_mutex_unlock(&srv.lock);
    fprintf(stderr, "nvfp4 serve: ready: model '%s', context %d, KV cache %zu blocks of %d "
                    "tokens, %d sequences\n",
            srv.model_name, srv.max_ctx, srv_sched_kv_blocks(sched), NVFP4_KV_BLOCK,
            so.max_seqs);
    fflush(stderr);

    do {
        if (sigwait(&sigs, &sig))
            sig = SIGTERM;
    } while (sig != SIGINT && sig != SIGTERM);
    fprintf(stderr, "nvfp4 serve: %s: stopping (grace %g s)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", grace);
    srv_http_quiesce(&srv);
    pthread_mutex_lock(&srv.lock);
    srv.stopping = 1;
    pthread_mutex_unlock(&srv.lock);
    srv_sched_stop(sched, grace);
    pthread_mutex_lock(&srv.lock);
    srv.sched = NULL;
    pthread_mutex_unlock(&srv.lock);
    /* Every job has ended now; their responses (streams' final events and
     * [DONE]) get written out before the connections close. */
    if ((n = srv_http_drain(&srv, SERVE_DRAIN_SECONDS)) > 0)
        fprintf(stderr, "nvfp4 serve: %d response%s not written out in %d s: cut\n", n,
                n == 1 ? "" : "s", SERVE_DRAIN_SECONDS);
out:
    srv_http_stop(&srv);
    nvfp4_chat_template_free(chat);
    nvfp4_model_free(srv.model);
    pthread_mutex_destroy(&srv.lock);
    pthread_mutex_destroy(&srv.tok_lock);
    pthread_cond_destroy(&srv.idle);
    pthread_mutex_destroy(&srv.met.lock);
    free(key);
    if (rc == CLI_OK)
        fprintf(stderr, "nvfp4 serve: stopped\n");
    return rc;
}

const cli_command cli_serve = {
    "serve", "serve the model over HTTP (OpenAI API, continuous batching)", run, help,
};
