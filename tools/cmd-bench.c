/* SPDX-License-Identifier: MIT */
/*
 * nvfp4 bench: prefill and decode speed of a model on token ids, no
 * tokenizer involved (checkpoints from `nvfp4 synth` have none).
 *
 * Prefill: P tokens in one forward pass from an empty cache, after one
 * untimed warm-up pass (first-use costs: page faults of the mapping, GPU
 * module loading, workspace allocation); best and mean of R passes.
 * Decode: after a prefill of P tokens, N tokens one at a time, each the
 * greedy choice from the previous logits (the logits of every step come
 * back to the host, as they do for a real generation).
 * --batch B: B sequences in one context (prompts of different token ids),
 * prefilled together (as many whole prompts per pass as fit 2048 tokens)
 * and decoded together, one token of each per pass: aggregate tok/s.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <nvfp4/kernels.h>

#include "cli-model.h"

/* Resident set of this process now (kB; /proc/self/statm), 0 if unknown. */
static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;

    if (!f)
        return 0;
    if (fscanf(f, "%ld %ld", &size, &res) != 2)
        res = 0;
    fclose(f);
    return res * 4;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void help(FILE *out)
{
    fprintf(out,
            "Usage: nvfp4 bench MODEL [OPTIONS]\n"
            "Measure prefill and decode tokens per second on token ids (no tokenizer\n"
            "needed: works on checkpoints written by `nvfp4 synth`).  Prefill: one\n"
            "untimed warm-up pass, then the best and mean of R passes of P tokens from\n"
            "an empty cache.  Decode: N greedy tokens one at a time after a prefill of P.\n"
            "With --batch B, B sequences share one context: their prompts are prefilled\n"
            "together and each decode pass runs one token of every sequence; the rates\n"
            "are aggregates (tokens of all sequences per second).  Also printed: the\n"
            "peak resident set and the KV cache's bytes per token (all layers).\n\n"
            "  -p, --prompt N   prompt tokens (default 512)\n"
            "  -n, --tokens N   decoded tokens (default 128)\n"
            "  -r, --reps R     timed prefill passes (default 3)\n"
            "  -b, --batch B    sequences decoded together (default 1)\n"
            "  --seed S         seed of the prompt's token ids (default 0)\n"
            "  --json           one JSON object on stdout instead of text\n"
            "%s%s"
            "  -h, --help       show this help\n",
            cli_model_options_help, cli_kv_options_help);
}


static int run(int argc, char **argv)
{
    enum { OPT_SEED = CLI_OPT_OTHER };
    static const struct option opts[] = {CLI_MODEL_LONG_OPTIONS, CLI_KV_LONG_OPTION,
                                         {"prompt", required_argument, NULL, 'p'},
                                         {"tokens", required_argument, NULL, 'n'},
                                         {"reps", required_argument, NULL, 'r'},
                                         {"batch", required_argument, NULL, 'b'},
                                         {"seed", required_argument, NULL, OPT_SEED},
                                         {"json", no_argument, NULL, CLI_OPT_JSON},
                                         {NULL, 0, NULL, 0}};
    cli_model_opts mo = {0};
    long P = 512, N = 128, R = 3, B = 1;
    unsigned long long seed = 0;
    int json = 0, c, rc = CLI_INVALID;
    nvfp4_model *m = NULL;
    nvfp4_error err;
    int32_t *ids = NULL, *toks = NULL, tok;
    float *logits = NULL;
    nvfp4_context *ctx = NULL;
    nvfp4_context_options co;
    nvfp4_batch_entry *ent = NULL;
    long per;
    long rss0, rss_load;
    uint64_t sent0, sent1;
    double t0, load_s, best = INFINITY, sum = 0, dec_s = 0;
    size_t V;
    struct rusage ru;
    const char *msg;

    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "p:n:r:b:", opts, NULL)) != -1) {
        int r = cli_model_option(&mo, c, optarg);
        if (r == 1)
            continue;
        if (r < 0)
            return cli_usage(&cli_bench, "%s", cli_model_error());
        switch (c) {
        case 'p':
            if ((msg = cli_int_arg("--prompt", optarg, 1, 1L << 24, &P)))
                return cli_usage(&cli_bench, "%s", msg);
            break;
        case 'n':
            if ((msg = cli_int_arg("--tokens", optarg, 1, 1L << 24, &N)))
                return cli_usage(&cli_bench, "%s", msg);
            break;
        case 'r':
            if ((msg = cli_int_arg("--reps", optarg, 1, 1L << 24, &R)))
                return cli_usage(&cli_bench, "%s", msg);
            break;
        case 'b':
            if ((msg = cli_int_arg("--batch", optarg, 1, 4096, &B)))
                return cli_usage(&cli_bench, "%s", msg);
            break;
        case OPT_SEED: {
            char *end;
            errno = 0;
            seed = strtoull(optarg, &end, 0);
            if (errno || *end || !*optarg)
                return cli_usage(&cli_bench, "--seed: expected an integer, got '%s'", optarg);
            break;
        }
        case CLI_OPT_JSON: json = 1; break;
        default:
            if (optopt)
                return cli_usage(&cli_bench, "option '%s' needs an argument", argv[optind - 1]);
            return cli_usage(&cli_bench, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind + 1 != argc)
        return cli_usage(&cli_bench, optind == argc ? "missing MODEL" : "too many arguments");

    rss0 = rss_kb();
    t0 = now();
    if (!(m = cli_model_open(argv[optind], &mo, (int)(P + N))))
        return CLI_INVALID;
    load_s = now() - t0;
    V = (size_t)nvfp4_model_vocab_size(m);
    per = P >= 2048 ? 1 : 2048 / P; /* whole prompts per prefill pass */
    if (per > B)
        per = B;
    nvfp4_context_options_init(&co);
    /* every sequence holds whole blocks */
    co.kv_tokens = (size_t)B * (((size_t)(P + N) + NVFP4_KV_BLOCK - 1) / NVFP4_KV_BLOCK) *
                   NVFP4_KV_BLOCK;
    co.max_batch_tokens = (size_t)(per * P > B ? per * P : B);
    co.max_seqs = (int)B;
    co.kv_cache_dtype = mo.kv_dtype;
    ids = malloc((size_t)B * (size_t)P * sizeof(*ids));
    logits = malloc((size_t)B * V * sizeof(float));
    ent = calloc((size_t)B, sizeof(*ent));
    toks = malloc((size_t)B * sizeof(*toks));
    if (!ids || !logits || !ent || !toks) {
        rc = cli_fail("out of memory");
        goto out;
    }
    if (!(ctx = nvfp4_context_create(m, &co, &err))) {
        rc = cli_fail_error(&err);
        goto out;
    }
    for (long i = 0; i < B * P; i++) /* any token, no special meaning */
        ids[i] = (int32_t)(cli_splitmix64(seed + (uint64_t)i * 0x9e3779b97f4a7c15ull) % V);
    for (long b = 0; b < B; b++) {
        if (nvfp4_seq_create(ctx, &ent[b].seq, &err)) {
            rc = cli_fail_error(&err);
            goto out;
        }
        ent[b].logits = NVFP4_LOGITS_LAST;
        ent[b].out = logits + (size_t)b * V;
    }
    rss_load = rss_kb();
    sent0 = nvfp4_comm_bytes_sent(nvfp4_comm_world(NULL));
    if (!json)
        fprintf(stderr, "bench: %s, %s backend, loaded in %.2f s; %ld sequence(s), prefill "
                "%ld tokens x %ld, decode %ld tokens\n", nvfp4_model_arch(m),
                nvfp4_backend_name(nvfp4_model_backend(m)), load_s, B, P, R, N);
    for (long r = -1; r < R; r++) {
        double t = now();
        for (long b0 = 0; b0 < B; b0 += per) {
            long nb = B - b0 < per ? B - b0 : per;
            for (long b = b0; b < b0 + nb; b++) {
                nvfp4_seq_truncate(ctx, ent[b].seq, 0, NULL);
                ent[b].tokens = ids + (size_t)b * (size_t)P;
                ent[b].n_tokens = (size_t)P;
            }
            if (nvfp4_context_run(ctx, ent + b0, (size_t)nb, &err)) {
                rc = cli_fail_error(&err);
                goto out;
            }
        }
        t = now() - t;
        if (r < 0)
            continue; /* warm-up */
        sum += t;
        if (t < best)
            best = t;
    }
    /* the cache holds the prompts: decode greedily from their last logits */
    sent1 = nvfp4_comm_bytes_sent(nvfp4_comm_world(NULL));
    t0 = now();
    for (long i = 0; i < N; i++) {
        for (long b = 0; b < B; b++) {
            const float *lg = logits + (size_t)b * V;
            tok = 0;
            for (size_t v = 1; v < V; v++)
                if (lg[v] > lg[tok])
                    tok = (int32_t)v;
            toks[b] = tok;
            ent[b].tokens = &toks[b];
            ent[b].n_tokens = 1;
        }
        if (nvfp4_context_run(ctx, ent, (size_t)B, &err)) {
            rc = cli_fail_error(&err);
            goto out;
        }
    }
    dec_s = now() - t0;
    /* resident memory (under mpirun: each rank's share of the weights, the
     * mapped pages it touched, and of the traffic) */
    if (cli_ranks > 1)
        fprintf(stderr, "bench: rank %d of %d: %.1f MB resident before loading, %.1f MB "
                "after loading, %.1f MB after the run; sent %.0f bytes per prefill token, "
                "%.0f per decode token\n", cli_rank, cli_ranks, rss0 / 1024.0,
                rss_load / 1024.0, rss_kb() / 1024.0,
                (double)(sent1 - sent0) / (double)((R + 1) * B * P),
                N ? (double)(nvfp4_comm_bytes_sent(nvfp4_comm_world(NULL)) - sent1) /
                        (double)(N * B) : 0.0);
    else if (!json)
        fprintf(stderr, "bench: %.1f MB resident before loading, %.1f MB after loading, "
                "%.1f MB after the run\n", rss0 / 1024.0, rss_load / 1024.0,
                rss_kb() / 1024.0);
    getrusage(RUSAGE_SELF, &ru);
    if (json)
        printf("{\"model\": \"%s\", \"arch\": \"%s\", \"backend\": \"%s\", \"threads\": %d, "
               "\"load_s\": %.4f, \"batch\": %ld, "
               "\"prompt_tokens\": %ld, \"prefill_best_s\": %.6f, \"prefill_mean_s\": %.6f, "
               "\"prefill_tok_s\": %.2f, \"decode_tokens\": %ld, \"decode_s\": %.6f, "
               "\"decode_tok_s\": %.2f, \"decode_step_ms\": %.3f, \"max_rss_kb\": %ld, "
               "\"kv_cache_dtype\": \"%s\", \"kv_bytes_per_token\": %zu}\n",
               argv[optind], nvfp4_model_arch(m), nvfp4_backend_name(nvfp4_model_backend(m)),
               nvfp4_backend_threads(nvfp4_model_backend(m)), load_s, B, P, best, sum / R,
               (double)(B * P) / best, N, dec_s, (double)(B * N) / dec_s, 1e3 * dec_s / N,
               ru.ru_maxrss,
               nvfp4_context_kv_cache_dtype(ctx) == NVFP4_KV_CACHE_FP8 ? "fp8" : "f32",
               nvfp4_context_kv_bytes_per_token(ctx));
    else
        printf("prefill %ld x %ld tokens: %.2f tok/s (best %.4f s, mean %.4f s)\n"
               "decode  %ld x %ld tokens: %.2f tok/s (%.2f ms per step of %ld)\n"
               "peak RSS %.1f MB\n"
               "KV cache %s: %zu bytes per token\n",
               B, P, (double)(B * P) / best, best, sum / R, B, N, (double)(B * N) / dec_s,
               1e3 * dec_s / N, B, ru.ru_maxrss / 1024.0, cli_kv_describe(ctx),
               nvfp4_context_kv_bytes_per_token(ctx));
    rc = CLI_OK;
out:
    free(ids);
    free(logits);
    free(ent);
    free(toks);
    nvfp4_context_free(ctx);
    nvfp4_model_free(m);
    return rc;
}

const cli_command cli_bench = {
    "bench", "measure prefill and decode tokens/s on token ids (no tokenizer needed)", run,
    help,
};
