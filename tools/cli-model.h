/* SPDX-License-Identifier: MIT */
/* Options shared by the subcommands that run a model. */
#ifndef NVFP4_CLI_MODEL_H
#define NVFP4_CLI_MODEL_H

#include <getopt.h>

#include <nvfp4/model.h>

#include "cli.h"

enum {
    CLI_OPT_BACKEND = 1000,
    CLI_OPT_THREADS,
    CLI_OPT_RESCALE,
    CLI_OPT_CTX,
    CLI_OPT_JSON,
    CLI_OPT_OTHER,   /* subcommands number their own options from here */
};

#define CLI_MODEL_LONG_OPTIONS                                                           \
    {"backend", required_argument, NULL, CLI_OPT_BACKEND},                               \
        {"threads", required_argument, NULL, CLI_OPT_THREADS},                           \
        {"rescale-fused", no_argument, NULL, CLI_OPT_RESCALE}

typedef struct {
    const char *backend;
    int threads;
    int rescale;
    int ctx;
} cli_model_opts;

/* 1 when C was one of the shared options, -1 when its argument is bad, 0 otherwise. */
int cli_model_option(cli_model_opts *o, int c, const char *arg);
/* Open the model or print the error; NULL on failure. */
nvfp4_model *cli_model_open(const char *path, const cli_model_opts *o, int max_ctx);
/* A context of KV_TOKENS for one sequence fed up to BATCH tokens a run, and
 * that sequence in *SEQ; NULL after printing the error. */
nvfp4_context *cli_context_one(nvfp4_model *m, size_t kv_tokens, size_t batch, nvfp4_seq *seq);
/* Feed N tokens to SEQ; the last token's (LAST) or every token's logits into
 * OUT.  0, or the tool's exit status after printing the error. */
int cli_feed(nvfp4_context *c, nvfp4_seq seq, const int32_t *toks, size_t n, int last,
             float *out);
extern const char *cli_model_options_help;

#endif
