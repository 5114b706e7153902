/* SPDX-License-Identifier: MIT */
/* nvfp4 ppl: rolling-window perplexity, as lm-eval's wikitext task. */
#include "config.h"

#include <ctype.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli-model.h"
#include "cli-tokens.h"

static void help(FILE *out)
{
    fprintf(out,
            "Usage: nvfp4 ppl MODEL (--text FILE | --tokens IDS) [OPTIONS]\n"
            "Perplexity with lm-eval's rolling windows (loglikelihood_rolling): the text\n"
            "is tokenized without special tokens, the first window starts with BOS (EOS\n"
            "when there is none), and every token is scored once with up to CTX tokens\n"
            "of context.  Prints token perplexity and, for --text, word perplexity\n"
            "(words = whitespace-separated runs, as lm-eval's wikitext) and bits per byte.\n\n"
            "  --text FILE      UTF-8 text to score\n"
            "  --tokens IDS     score these token ids instead (comma list or @FILE)\n"
            "  --ctx N          window length, 2 to 1048576 (default 512; at most\n"
            "                   the model's max_position_embeddings)\n"
            "  --prefix ID      token that starts the first window (default: BOS, else EOS)\n"
            "  --json           print one JSON object on stdout\n"
            "%s"
            "  -h, --help       show this help\n"
            "A progress bar goes to stderr when it is a terminal.  SIGINT (Ctrl-C)\n"
            "stops after the current window: the result of the tokens scored so far is\n"
            "printed (--json adds \"interrupted\": true) and the exit status is 130.\n",
            cli_model_options_help);
}

typedef struct {
    double t0;
    int tty;
} progress_state;

/* SIGINT stops the run at the next window: what was scored so far is
 * printed (JSON: "interrupted": true) and the exit status is 130, as for a
 * shell's interrupted command.  SA_RESETHAND: a second SIGINT kills. */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int progress(size_t done, size_t total, void *user)
{
    progress_state *ps = user;
    double el = now() - ps->t0, frac = (double)done / (double)total;
    int w = 30, filled = (int)(frac * w);

    if (interrupted && ps->tty)
        fputc('\n', stderr);
    if (interrupted || !ps->tty)
        return interrupted;
    fprintf(stderr, "\r[%.*s%*s] %5.1f%% %zu/%zu tokens, %.0f tok/s, eta %.0f s ",
            filled, "##############################", w - filled, "", 100 * frac, done,
            total, (double)done / (el > 0 ? el : 1), frac > 0 ? el / frac - el : 0);
    if (done == total)
        fputc('\n', stderr);
    return 0;
}

/* Words as lm-eval counts them for wikitext: len(re.split(r"\s+", doc)). */
static size_t count_words(const char *s, size_t n)
{
    size_t words = 1;
    for (size_t i = 0; i < n;) {
        if (isspace((unsigned char)s[i])) {
            words++;
            while (i < n && isspace((unsigned char)s[i]))
                i++;
        } else {
            i++;
        }
    }
    return words;
}

static int run(int argc, char **argv)
{
    enum { OPT_TEXT = CLI_OPT_OTHER, OPT_TOKENS, OPT_PREFIX };
    static const struct option opts[] = {CLI_MODEL_LONG_OPTIONS,
                                         {"text", required_argument, NULL, OPT_TEXT},
                                         {"tokens", required_argument, NULL, OPT_TOKENS},
                                         {"ctx", required_argument, NULL, CLI_OPT_CTX},
                                         {"json", no_argument, NULL, CLI_OPT_JSON},
                                         {"prefix", required_argument, NULL, OPT_PREFIX},
                                         {NULL, 0, NULL, 0}};
    cli_model_opts mo = {0};
    const char *textp = NULL, *tokspec = NULL;
    int as_json = 0, c, rc = CLI_OK;
    char *text = NULL;
    size_t tlen = 0, n = 0;
    int32_t *ids = NULL;
    nvfp4_model *m = NULL;
    nvfp4_error err;
    nvfp4_ppl_result res;
    progress_state ps;
    long prefix = -1;

    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int r = cli_model_option(&mo, c, optarg);
        if (r == 1)
            continue;
        if (r < 0)
            return cli_usage(&cli_ppl, "%s", cli_model_error());
        if (c == OPT_TEXT)
            textp = optarg;
        else if (c == OPT_TOKENS)
            tokspec = optarg;
        else if (c == CLI_OPT_JSON)
            as_json = 1;
        else if (c == OPT_PREFIX) {
            const char *msg = cli_int_arg("--prefix", optarg, 0, INT32_MAX, &prefix);
            if (msg)
                return cli_usage(&cli_ppl, "%s", msg);
        }
        else
            return cli_usage(&cli_ppl, "unknown option '%s'", argv[optind - 1]);
    }
    if (optind + 1 != argc)
        return cli_usage(&cli_ppl, optind == argc ? "missing MODEL" : "too many arguments");
    if (!textp == !tokspec)
        return cli_usage(&cli_ppl, "give exactly one of --text and --tokens");
    if (mo.ctx == 0)
        mo.ctx = 512;
    else if (cli_check_positions(argv[optind], (size_t)mo.ctx, "--ctx"))
        return CLI_INVALID;

    m = cli_model_open(argv[optind], &mo, mo.ctx);
    if (!m)
        return CLI_INVALID;
    if (textp) {
        const nvfp4_tokenizer *tok = nvfp4_model_tokenizer(m);
        if (!tok) {
            rc = cli_fail("%s: no tokenizer.json beside the model; use --tokens",
                          argv[optind]);
            goto out;
        }
        text = cli_read_file(textp, &tlen);
        if (!text) {
            rc = CLI_INVALID;
            goto out;
        }
        if (nvfp4_tokenizer_encode(tok, text, tlen, &ids, &n, &err)) {
            rc = cli_fail_error(&err);
            goto out;
        }
        if (n == 0) {
            rc = cli_fail("%s: the text has no tokens", textp);
            goto out;
        }
    } else if (cli_parse_tokens(tokspec, &ids, &n)) {
        rc = CLI_INVALID;
        goto out;
    }
    ps.t0 = now();
    ps.tty = isatty(2);
    {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_sigint;
        sa.sa_flags = SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
    }
    if (nvfp4_model_perplexity(m, ids, n, (size_t)mo.ctx, (int32_t)prefix, progress, &ps,
                               &res, &err)) {
        if (err.status != NVFP4_ERR_CANCELLED) {
            rc = cli_fail_error(&err);
            goto out;
        }
        fprintf(stderr, "nvfp4: interrupted: %s; the result covers those tokens only\n",
                err.text);
        rc = 130;
    }
    signal(SIGINT, SIG_DFL);
    {
        double secs = now() - ps.t0;
        /* words and bytes of the whole text: only for a complete run */
        size_t words = text && rc == CLI_OK ? count_words(text, tlen) : 0;
        double word_ppl = words ? exp(res.nll / (double)words) : 0;
        double bpb = tlen ? res.nll / (double)tlen / log(2.0) : 0;
        if (as_json) {
            printf("{\"tokens\": %zu, \"nll\": %.10g, \"token_perplexity\": %.10g", res.tokens,
                   res.nll, res.token_ppl);
            if (rc == 130)
                printf(", \"interrupted\": true, \"tokens_total\": %zu", n);
            if (words)
                printf(", \"words\": %zu, \"word_perplexity\": %.10g, \"bytes\": %zu, "
                       "\"bits_per_byte\": %.10g",
                       words, word_ppl, tlen, bpb);
            printf(", \"ctx\": %d, \"seconds\": %.3f, \"backend\": \"%s\"}\n", mo.ctx, secs,
                   nvfp4_backend_name(nvfp4_model_backend(m)));
        } else {
            if (rc == 130)
                printf("tokens:           %zu of %zu (interrupted)\n", res.tokens, n);
            else
                printf("tokens:           %zu\n", res.tokens);
            printf("token perplexity: %.4f\n", res.token_ppl);
            if (words) {
                printf("word perplexity:  %.4f (%zu words)\n", word_ppl, words);
                printf("bits per byte:    %.4f\n", bpb);
            }
            printf("context:          %d tokens, %.1f s (%.0f tokens/s)\n", mo.ctx, secs,
                   (double)res.tokens / secs);
        }
    }
out:
    free(text);
    free(ids);
    nvfp4_model_free(m);
    return rc;
}

const cli_command cli_ppl = {
    "ppl", "perplexity of a text (lm-eval rolling windows)", run, help,
};
