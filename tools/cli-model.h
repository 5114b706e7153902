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
    CLI_OPT_KV_DTYPE,
    CLI_OPT_OTHER,   /* subcommands number their own options from here */
};

#define CLI_MODEL_LONG_OPTIONS                                                           \
    {"backend", required_argument, NULL, CLI_OPT_BACKEND},                               \
        {"threads", required_argument, NULL, CLI_OPT_THREADS},                           \
        {"exact-fused", no_argument, NULL, CLI_OPT_RESCALE},                             \
        {"rescale-fused", no_argument, NULL, CLI_OPT_RESCALE}

/* --kv-cache-dtype, for the subcommands that run a context of their own
 * (generate, logits, bench, serve); cli_kv_options_help is its help. */
#define CLI_KV_LONG_OPTION {"kv-cache-dtype", required_argument, NULL, CLI_OPT_KV_DTYPE}

typedef struct {
    const char *backend;
    int threads;
    int rescale;
    int ctx;
    nvfp4_kv_cache_dtype kv_dtype; /* --kv-cache-dtype; 0: auto */
} cli_model_opts;

/* Bounds of --threads (0: the default) and --ctx. */
#define CLI_MAX_THREADS 4096
#define CLI_MAX_CTX (1L << 20)

/* N positions (WHAT: the option giving them) must fit the model's
 * max_position_embeddings, read from its config.json before the model (and
 * its cache of N positions) is opened; 0, or prints the error and returns
 * CLI_INVALID. */
int cli_check_positions(const char *model, size_t n, const char *what);

/* 1 when C was one of the shared options, -1 when its argument is bad (the
 * message, naming the option and its range, from cli_model_error()), 0
 * otherwise. */
int cli_model_option(cli_model_opts *o, int c, const char *arg);
const char *cli_model_error(void);
/* Open the model or print the error; NULL on failure. */
nvfp4_model *cli_model_open(const char *path, const cli_model_opts *o, int max_ctx);
/* A context of KV_TOKENS for one sequence fed up to BATCH tokens a run, and
 * that sequence in *SEQ; NULL after printing the error. */
nvfp4_context *cli_context_one(nvfp4_model *m, size_t kv_tokens, size_t batch,
                               nvfp4_kv_cache_dtype kv_dtype, nvfp4_seq *seq);
/* "fp8 (1 byte)" or "f32 (4 bytes)": the element type of C's KV cache, and
 * "scale 1.0" when FP8 was asked of a checkpoint that has no KV scales. */
const char *cli_kv_describe(const nvfp4_context *c);
/* Feed N tokens to SEQ; the last token's (LAST) or every token's logits into
 * OUT.  0, or the tool's exit status after printing the error. */
int cli_feed(nvfp4_context *c, nvfp4_seq seq, const int32_t *toks, size_t n, int last,
             float *out);
extern const char *cli_model_options_help;
extern const char *cli_kv_options_help;

#endif
