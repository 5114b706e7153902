/* SPDX-License-Identifier: MIT */
/* Options shared by the subcommands that run a model. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cli-model.h"

static const char *model_error = "";

const char *cli_model_error(void)
{
    return model_error;
}

int cli_model_option(cli_model_opts *o, int c, const char *arg)
{
    const char *msg;
    long v;

    switch (c) {
    case CLI_OPT_BACKEND:
        o->backend = arg;
        return 1;
    case CLI_OPT_THREADS:
        if ((msg = cli_int_arg("--threads", arg, 0, CLI_MAX_THREADS, &v))) {
            model_error = msg;
            return -1;
        }
        o->threads = (int)v;
        return 1;
    case CLI_OPT_RESCALE:
        o->rescale = 1;
        return 1;
    case CLI_OPT_CTX:
        if ((msg = cli_int_arg("--ctx", arg, 2, CLI_MAX_CTX, &v))) {
            model_error = msg;
            return -1;
        }
        o->ctx = (int)v;
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
    "  --threads N      CPU threads, 0 to 4096 (default and 0: $OMP_NUM_THREADS,\n"
    "                   else all cores)\n"
    "  --rescale-fused  accept fused q/k/v or gate/up layers whose global scales\n"
    "                   differ by rescaling their block scales (lossy; spec 4)\n";
