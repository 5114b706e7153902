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
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli-model.h"

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
            "an empty cache.  Decode: N greedy tokens one at a time after a prefill of P.\n\n"
            "  -p, --prompt N   prompt tokens (default 512)\n"
            "  -n, --tokens N   decoded tokens (default 128)\n"
            "  -r, --reps R     timed prefill passes (default 3)\n"
            "  --seed S         seed of the prompt's token ids (default 0)\n"
            "  --json           one JSON object on stdout instead of text\n"
            "%s"
            "  -h, --help       show this help\n",
            cli_model_options_help);
}


static int run(int argc, char **argv)
{
    enum { OPT_SEED = CLI_OPT_OTHER };
    static const struct option opts[] = {CLI_MODEL_LONG_OPTIONS,
                                         {"prompt", required_argument, NULL, 'p'},
                                         {"tokens", required_argument, NULL, 'n'},
                                         {"reps", required_argument, NULL, 'r'},
                                         {"seed", required_argument, NULL, OPT_SEED},
                                         {"json", no_argument, NULL, CLI_OPT_JSON},
                                         {NULL, 0, NULL, 0}};
    cli_model_opts mo = {0};
    long P = 512, N = 128, R = 3;
    unsigned long long seed = 0;
    int json = 0, c, rc = CLI_INVALID;
    nvfp4_model *m = NULL;
    nvfp4_error err;
    int32_t *ids = NULL, tok;
    float *logits = NULL;
    double t0, load_s, best = INFINITY, sum = 0, dec_s = 0;
    size_t V;
    struct rusage ru;
    const char *msg;

    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "p:n:r:", opts, NULL)) != -1) {
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

    t0 = now();
    if (!(m = cli_model_open(argv[optind], &mo, (int)(P + N))))
        return CLI_INVALID;
    load_s = now() - t0;
    V = (size_t)nvfp4_model_vocab_size(m);
    ids = malloc((size_t)P * sizeof(*ids));
    logits = malloc(V * sizeof(float));
    if (!ids || !logits) {
        rc = cli_fail("out of memory");
        goto out;
    }
    for (long i = 0; i < P; i++) /* any token, no special meaning */
        ids[i] = (int32_t)(cli_splitmix64(seed + (uint64_t)i * 0x9e3779b97f4a7c15ull) % V);
    if (!json)
        fprintf(stderr, "bench: %s, %s backend, loaded in %.2f s; prefill %ld tokens x %ld, "
                "decode %ld tokens\n", nvfp4_model_arch(m),
                nvfp4_backend_name(nvfp4_model_backend(m)), load_s, P, R, N);
    for (long r = -1; r < R; r++) {
        double t;
        nvfp4_model_reset(m);
        t = now();
        if (nvfp4_model_forward(m, ids, (size_t)P, 0, logits, 1, &err)) {
            rc = cli_fail_error(&err);
            goto out;
        }
        t = now() - t;
        if (r < 0)
            continue; /* warm-up */
        sum += t;
        if (t < best)
            best = t;
    }
    /* the cache holds the prompt: decode greedily from its last logits */
    t0 = now();
    for (long i = 0; i < N; i++) {
        tok = 0;
        for (size_t v = 1; v < V; v++)
            if (logits[v] > logits[tok])
                tok = (int32_t)v;
        if (nvfp4_model_forward(m, &tok, 1, (size_t)(P + i), logits, 1, &err)) {
            rc = cli_fail_error(&err);
            goto out;
        }
    }
    dec_s = now() - t0;
    getrusage(RUSAGE_SELF, &ru);
    if (json)
        printf("{\"model\": \"%s\", \"arch\": \"%s\", \"backend\": \"%s\", \"load_s\": %.4f, "
               "\"prompt_tokens\": %ld, \"prefill_best_s\": %.6f, \"prefill_mean_s\": %.6f, "
               "\"prefill_tok_s\": %.2f, \"decode_tokens\": %ld, \"decode_s\": %.6f, "
               "\"decode_tok_s\": %.2f, \"max_rss_kb\": %ld}\n",
               argv[optind], nvfp4_model_arch(m), nvfp4_backend_name(nvfp4_model_backend(m)),
               load_s, P, best, sum / R, P / best, N, dec_s, N / dec_s, ru.ru_maxrss);
    else
        printf("prefill %ld tokens: %.2f tok/s (best %.4f s, mean %.4f s)\n"
               "decode  %ld tokens: %.2f tok/s (%.2f ms/token)\n"
               "peak RSS %.1f MB\n",
               P, P / best, best, sum / R, N, N / dec_s, 1e3 * dec_s / N, ru.ru_maxrss / 1024.0);
    rc = CLI_OK;
out:
    free(ids);
    free(logits);
    nvfp4_model_free(m);
    return rc;
}

const cli_command cli_bench = {
    "bench", "measure prefill and decode tokens/s on token ids (no tokenizer needed)", run,
    help,
};
