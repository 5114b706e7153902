/* SPDX-License-Identifier: MIT */
/* Options shared by the subcommands that run a model. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cli-model.h"

int cli_model_option(cli_model_opts *o, int c, const char *arg)
{
    char *end;

    switch (c) {
    case CLI_OPT_BACKEND:
        o->backend = arg;
        return 1;
    case CLI_OPT_THREADS:
        o->threads = (int)strtol(arg, &end, 10);
        if (*end || o->threads < 0)
            return -1;
        return 1;
    case CLI_OPT_RESCALE:
        o->rescale = 1;
        return 1;
    case CLI_OPT_CTX:
        o->ctx = (int)strtol(arg, &end, 10);
        if (*end || o->ctx <= 0)
            return -1;
        return 1;
    default:
        return 0;
    }
}

nvfp4_model *cli_model_open(const char *path, const cli_model_opts *o, int max_ctx)
{
    nvfp4_model_options mo;
    nvfp4_error err;
    nvfp4_model *m;

    nvfp4_model_options_init(&mo);
    mo.backend = o->backend;
    mo.threads = o->threads;
    mo.rescale_fused = o->rescale;
    mo.max_ctx = max_ctx;
    m = nvfp4_model_open(path, &mo, &err);
    if (!m)
        cli_fail_error(&err);
    return m;
}

const char *cli_model_options_help =
    "  --backend NAME   cpu, cuda or hip (default: $NVFP4_BACKEND, else cpu)\n"
    "  --threads N      CPU threads (default: $OMP_NUM_THREADS, else all cores)\n"
    "  --exact-fused    run fused q/k/v or gate/up layers whose global scales\n"
    "                   differ with each shard's own scale (exact: as separate\n"
    "                   layers; such gate/up weights are kept as float32, W4A4\n"
    "                   ones on the cpu backend only); --rescale-fused is the\n"
    "                   old name of this option\n";
