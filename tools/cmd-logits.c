/* SPDX-License-Identifier: MIT */
/* nvfp4 logits: raw float32 logits [tokens, vocab] for given token ids. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-model.h"
#include "cli-tokens.h"

static void help(FILE *out)
{
    fprintf(out,
            "Usage: nvfp4 logits MODEL --tokens IDS --out FILE [OPTIONS]\n"
            "Run the model on token ids (no tokenizer involved) and write the logits of\n"
            "every position as raw little-endian float32, row-major [tokens, vocab].\n\n"
            "  --tokens IDS     comma-separated ids, or @FILE holding them (at most the\n"
            "                   model's max_position_embeddings)\n"
            "  --out FILE       where to write the logits\n"
            "%s%s"
            "  -h, --help       show this help\n",
            cli_model_options_help, cli_kv_options_help);
}

static int run(int argc, char **argv)
{
    enum { OPT_TOKENS = CLI_OPT_OTHER, OPT_OUT };
    static const struct option opts[] = {CLI_MODEL_LONG_OPTIONS, CLI_KV_LONG_OPTION,
                                         {"tokens", required_argument, NULL, OPT_TOKENS},
                                         {"out", required_argument, NULL, OPT_OUT},
                                         {NULL, 0, NULL, 0}};
    cli_model_opts mo = {0};
    const char *tokens = NULL, *outp = NULL;
    int32_t *ids = NULL;
    size_t n = 0, V;
    nvfp4_model *m;
    nvfp4_context *ctx = NULL;
    nvfp4_seq seq;
    float *logits;
    FILE *f;
    int c, rc = CLI_OK;

    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int r = cli_model_option(&mo, c, optarg);
        if (r == 1)
            continue;
        if (r < 0)
            return cli_usage(&cli_logits, "%s", cli_model_error());
        if (c == OPT_TOKENS)
            tokens = optarg;
        else if (c == OPT_OUT)
            outp = optarg;
        else
            return cli_usage(&cli_logits, "unknown option '%s'", argv[optind - 1]);
    }
    if (optind + 1 != argc)
        return cli_usage(&cli_logits, optind == argc ? "missing MODEL" : "too many arguments");
    if (!tokens || !outp)
        return cli_usage(&cli_logits, "--tokens and --out are required");
    if (cli_parse_tokens(tokens, &ids, &n))
        return CLI_INVALID;
    if (cli_check_positions(argv[optind], n, "--tokens")) {
        free(ids);
        return CLI_INVALID;
    }
    m = cli_model_open(argv[optind], &mo, (int)n);
    if (!m) {
        free(ids);
        return CLI_INVALID;
    }
    V = (size_t)nvfp4_model_vocab_size(m);
    logits = malloc(n * V * sizeof(float));
    if (!logits) {
        rc = cli_fail("out of memory for %zu x %zu logits", n, V);
    } else if (!(ctx = cli_context_one(m, n, n, mo.kv_dtype, &seq))) {
        rc = CLI_INVALID;
    } else if ((rc = cli_feed(ctx, seq, ids, n, 0, logits)) != 0) {
        /* reported */
    } else if (cli_rank != 0) {
        /* under mpirun rank 0 writes the file */
    } else if (!(f = fopen(outp, "wb"))) {
        rc = cli_fail("%s: cannot create", outp);
    } else {
        if (fwrite(logits, sizeof(float), n * V, f) != n * V)
            rc = cli_fail("%s: write failed", outp);
        if (fclose(f) != 0 && rc == CLI_OK)
            rc = cli_fail("%s: write failed", outp);
    }
    free(logits);
    free(ids);
    nvfp4_context_free(ctx);
    nvfp4_model_free(m);
    return rc;
}

const cli_command cli_logits = {
    "logits", "write raw float32 logits for given token ids", run, help,
};
