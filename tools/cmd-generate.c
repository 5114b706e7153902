/* SPDX-License-Identifier: MIT */
/* nvfp4 generate: stream a continuation of a prompt. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "cli-model.h"

static void help(FILE *out)
{
    fprintf(out,
            "Usage: nvfp4 generate MODEL --prompt TEXT [OPTIONS]\n"
            "Continue TEXT with the model, streaming tokens to stdout as they come.\n"
            "Greedy by default; stops at the end-of-sequence token or after N tokens.\n\n"
            "  --prompt TEXT       the prompt (tokenized with MODEL/tokenizer.json)\n"
            "  -n, --tokens N      tokens to generate, 0 to 16777216 (default 64)\n"
            "  --temperature T     sample with temperature T (default 0: greedy)\n"
            "  --top-p P           nucleus sampling mass (default 1)\n"
            "  --seed S            random seed for sampling (default 0)\n"
            "  --bos               start the prompt with the model's BOS token\n"
            "  --chat              put the prompt through MODEL's chat template as one user\n"
            "                      message, with the generation prompt; print the reply only\n"
            "  --stats             print speed statistics on stderr\n"
            "%s%s"
            "  -h, --help          show this help\n",
            cli_model_options_help, cli_kv_options_help);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* PROMPT as one user message through MODEL's chat template, as
 * apply_chat_template(add_generation_prompt=True) makes it. */
static char *chat_prompt(const char *model, const char *prompt, nvfp4_error *err)
{
    nvfp4_chat_template *t = nvfp4_chat_template_load(model, err);
    json_t *msgs = t ? json_pack("[{s:s, s:s}]", "role", "user", "content", prompt) : NULL;
    char *js = msgs ? json_dumps(msgs, JSON_COMPACT) : NULL, *out = NULL;

    if (js)
        out = nvfp4_chat_template_render(t, js, "{\"add_generation_prompt\": true}", NULL, NULL,
                                         err);
    else if (t)
        nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, "--prompt", -1, "not valid UTF-8");
    free(js);
    json_decref(msgs);
    nvfp4_chat_template_free(t);
    return out;
}

static int run(int argc, char **argv)
{
    enum { OPT_PROMPT = CLI_OPT_OTHER, OPT_TEMP, OPT_TOPP, OPT_SEED, OPT_BOS, OPT_STATS, OPT_CHAT };
    static const struct option opts[] = {CLI_MODEL_LONG_OPTIONS, CLI_KV_LONG_OPTION,
                                         {"prompt", required_argument, NULL, OPT_PROMPT},
                                         {"tokens", required_argument, NULL, 'n'},
                                         {"temperature", required_argument, NULL, OPT_TEMP},
                                         {"top-p", required_argument, NULL, OPT_TOPP},
                                         {"seed", required_argument, NULL, OPT_SEED},
                                         {"bos", no_argument, NULL, OPT_BOS},
                                         {"stats", no_argument, NULL, OPT_STATS},
                                         {"chat", no_argument, NULL, OPT_CHAT},
                                         {NULL, 0, NULL, 0}};
    cli_model_opts mo = {0};
    const char *prompt = NULL;
    long ntok = 64;
    double temp = 0, topp = 1, t0, t1, t2;
    unsigned long long seed = 0;
    int bos = 0, stats = 0, chat = 0, c, rc = CLI_OK;
    char *chat_text = NULL;
    const nvfp4_tokenizer *tok;
    nvfp4_model *m = NULL;
    nvfp4_context *ctx = NULL;
    nvfp4_seq seq;
    nvfp4_error err;
    nvfp4_sampler smp;
    int32_t *ids = NULL, *all = NULL, next;
    size_t n = 0, V, pos;
    float *logits = NULL;
    long produced = 0;
    char *end;
    const char *msg;

    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "n:", opts, NULL)) != -1) {
        int r = cli_model_option(&mo, c, optarg);
        if (r == 1)
            continue;
        if (r < 0)
            return cli_usage(&cli_generate, "%s", cli_model_error());
        switch (c) {
        case OPT_PROMPT: prompt = optarg; break;
        case 'n':
            if ((msg = cli_int_arg("--tokens", optarg, 0, 1L << 24, &ntok)))
                return cli_usage(&cli_generate, "%s", msg);
            break;
        case OPT_TEMP:
            temp = strtod(optarg, &end);
            if (*end || end == optarg || !(temp >= 0 && temp <= 1e6))
                return cli_usage(&cli_generate, "bad temperature '%s'", optarg);
            break;
        case OPT_TOPP:
            topp = strtod(optarg, &end);
            if (*end || end == optarg || !(topp > 0 && topp <= 1))
                return cli_usage(&cli_generate, "bad top-p '%s' (expected 0 < P <= 1)", optarg);
            break;
        case OPT_SEED:
            errno = 0;
            seed = strtoull(optarg, &end, 10);
            if (*end || end == optarg || errno)
                return cli_usage(&cli_generate, "bad seed '%s'", optarg);
            break;
        case OPT_BOS: bos = 1; break;
        case OPT_STATS: stats = 1; break;
        case OPT_CHAT: chat = 1; break;
        default:
            return cli_usage(&cli_generate, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind + 1 != argc)
        return cli_usage(&cli_generate, optind == argc ? "missing MODEL" : "too many arguments");
    if (!prompt)
        return cli_usage(&cli_generate, "--prompt is required");

    t0 = now();
    m = cli_model_open(argv[optind], &mo, 0);
    if (!m)
        return CLI_INVALID;
    tok = nvfp4_model_tokenizer(m);
    if (!tok) {
        rc = cli_fail("%s: no tokenizer.json beside the model; use 'nvfp4 logits' with "
                      "token ids instead", argv[optind]);
        goto out;
    }
    if (chat && !(prompt = chat_text = chat_prompt(argv[optind], prompt, &err))) {
        rc = cli_fail_error(&err);
        goto out;
    }
    if (nvfp4_tokenizer_encode(tok, prompt, strlen(prompt), &ids, &n, &err)) {
        rc = cli_fail_error(&err);
        goto out;
    }
    V = (size_t)nvfp4_model_vocab_size(m);
    all = malloc((n + 1 + (size_t)ntok) * sizeof(int32_t));
    logits = malloc(V * sizeof(float));
    if (!all || !logits) {
        rc = cli_fail("out of memory");
        goto out;
    }
    pos = 0;
    if (bos && nvfp4_model_bos(m) >= 0)
        all[pos++] = nvfp4_model_bos(m);
    memcpy(all + pos, ids, n * sizeof(int32_t));
    pos += n;
    if (pos == 0) {
        rc = cli_fail("the prompt is empty");
        goto out;
    }
    if (pos + (size_t)ntok > (size_t)nvfp4_model_max_ctx(m)) {
        rc = cli_fail("prompt (%zu tokens) plus %ld new tokens exceed the context of %d",
                      pos, ntok, nvfp4_model_max_ctx(m));
        goto out;
    }
    nvfp4_sampler_init(&smp, (float)temp, (float)topp, seed);
    if (!chat)
        fputs(prompt, stdout);
    fflush(stdout);
    t1 = now();
    if (!(ctx = cli_context_one(m, pos + (size_t)ntok, pos, mo.kv_dtype, &seq))) {
        rc = CLI_INVALID;
        goto out;
    }
    if ((rc = cli_feed(ctx, seq, all, pos, 1, logits)) != 0)
        goto out;
    t2 = now();
    for (produced = 0; produced < ntok; produced++) {
        const char *bytes;
        size_t len;
        next = nvfp4_sampler_sample(&smp, logits, V);
        if (next == nvfp4_model_eos(m))
            break;
        bytes = nvfp4_tokenizer_token_bytes(tok, next, &len);
        if (bytes && !nvfp4_tokenizer_is_special(tok, next))
            fwrite(bytes, 1, len, stdout);
        fflush(stdout);
        all[pos] = next;
        if (produced + 1 < ntok && (rc = cli_feed(ctx, seq, &all[pos], 1, 1, logits)) != 0)
            goto out;
        pos++;
    }
    fputc('\n', stdout);
    fflush(stdout);
    if (stats) {
        double t3 = now();
        fprintf(stderr,
                "nvfp4: load %.2f s; prefill %zu tokens %.1f tok/s; decode %ld tokens "
                "%.1f tok/s; KV cache %s, %zu bytes per token\n",
                t1 - t0, pos - (size_t)produced, (double)(pos - (size_t)produced) / (t2 - t1),
                produced, produced > 1 ? (double)(produced - 1) / (t3 - t2) : 0.0,
                cli_kv_describe(ctx), nvfp4_context_kv_bytes_per_token(ctx));
    }
out:
    free(chat_text);
    free(ids);
    free(all);
    free(logits);
    nvfp4_context_free(ctx);
    nvfp4_model_free(m);
    return rc;
}

const cli_command cli_generate = {
    "generate", "continue a prompt with the model (streaming)", run, help,
};
