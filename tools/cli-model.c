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
    "  --rescale-fused  accept fused q/k/v or gate/up layers whose global scales\n"
    "                   differ by rescaling their block scales (lossy; spec 4)\n";

nvfp4_context *cli_context_one(nvfp4_model *m, size_t kv_tokens, size_t batch, nvfp4_seq *seq)
{
    nvfp4_context_options o;
    nvfp4_context *c;
    nvfp4_error err;

    nvfp4_context_options_init(&o);
    o.kv_tokens = kv_tokens ? kv_tokens : 1;
    o.max_batch_tokens = batch ? batch : 1;
    o.max_seqs = 1;
    if (!(c = nvfp4_context_create(m, &o, &err)) || nvfp4_seq_create(c, seq, &err)) {
        cli_fail_error(&err);
        nvfp4_context_free(c);
        return NULL;
    }
    return c;
}

int cli_feed(nvfp4_context *c, nvfp4_seq seq, const int32_t *toks, size_t n, int last,
             float *out)
{
    nvfp4_batch_entry b;
    nvfp4_error err;

    b.seq = seq;
    b.tokens = toks;
    b.n_tokens = n;
    b.logits = !out ? NVFP4_LOGITS_NONE : last ? NVFP4_LOGITS_LAST : NVFP4_LOGITS_ALL;
    b.out = out;
    if (nvfp4_context_run(c, &b, 1, &err))
        return cli_fail_error(&err);
    return 0;
}
