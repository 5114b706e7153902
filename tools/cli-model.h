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

/* Bounds of --threads (0: the default) and --ctx. */
#define CLI_MAX_THREADS 4096
#define CLI_MAX_CTX (1L << 20)

/* 1 when C was one of the shared options, -1 when its argument is bad (the
 * message, naming the option and its range, from cli_model_error()), 0
 * otherwise. */
int cli_model_option(cli_model_opts *o, int c, const char *arg);
const char *cli_model_error(void);
/* Open the model or print the error; NULL on failure. */
nvfp4_model *cli_model_open(const char *path, const cli_model_opts *o, int max_ctx);
extern const char *cli_model_options_help;

#endif
