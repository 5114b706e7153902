/* SPDX-License-Identifier: MIT */
/* Options shared by the subcommands that run a model. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli-model.h"

static const char *model_error = "";

const char *cli_model_error(void)
{
    return model_error;
}

int cli_check_positions(const char *model, size_t n, const char *what)
{
    struct stat sb;
    nvfp4_config *cfg;
    char *dir, *path;
    int64_t max = 4096;
    int rc = 0;

    if (stat(model, &sb) != 0)
        return 0;  /* nvfp4_model_open names the problem */
    dir = S_ISDIR(sb.st_mode) ? strdup(model) : NULL;
    if (!dir) {
        const char *slash = strrchr(model, '/');
        dir = slash ? strndup(model, (size_t)(slash - model)) : strdup(".");
    }
    path = dir ? malloc(strlen(dir) + sizeof("/config.json")) : NULL;
    if (!path) {
        free(dir);
        return cli_fail("out of memory");
    }
    sprintf(path, "%s/config.json", dir);
    free(dir);
    cfg = nvfp4_config_load(path, NULL);
    /* The library's default when the key is absent; a bad value is named at open. */
    if (cfg && (nvfp4_config_get_int(cfg, "max_position_embeddings", 4096, &max, NULL) ||
                max <= 0))
        max = -1;
    if (cfg && max > 0 && n > (uint64_t)max)
        rc = cli_fail("%s: %zu tokens exceed %s's max_position_embeddings of %lld", what, n,
                      path, (long long)max);
    nvfp4_config_free(cfg);
    free(path);
    return rc;
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
    case CLI_OPT_KV_DTYPE:
        if (!strcmp(arg, "auto")) {
            o->kv_dtype = NVFP4_KV_CACHE_AUTO;
        } else if (!strcmp(arg, "fp8")) {
            o->kv_dtype = NVFP4_KV_CACHE_FP8;
        } else if (!strcmp(arg, "f32")) {
            o->kv_dtype = NVFP4_KV_CACHE_F32;
        } else {
            model_error = "--kv-cache-dtype must be auto, fp8 or f32";
            return -1;
        }
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
    "  --exact-fused    run fused q/k/v or gate/up layers whose global scales\n"
    "                   differ with each shard's own scale (exact: as separate\n"
    "                   layers; such gate/up weights are kept as float32, W4A4\n"
    "                   ones on the cpu backend only); --rescale-fused is the\n"
    "                   old name of this option\n";

const char *cli_kv_options_help =
    "  --kv-cache-dtype auto|fp8|f32\n"
    "                   KV cache elements: auto (default) what the checkpoint\n"
    "                   says (FP8 E4M3 for a Quark export with kv_cache_scheme\n"
    "                   fp8, with its k/v scales; else f32); fp8: 1 byte each, a\n"
    "                   quarter of f32 (a checkpoint without KV scales gets\n"
    "                   scale 1.0, as vLLM does); f32: 4 bytes, the checkpoint's\n"
    "                   FP8 KV scheme ignored\n";

const char *cli_kv_describe(const nvfp4_context *c)
{
    if (nvfp4_context_kv_cache_dtype(c) != NVFP4_KV_CACHE_FP8)
        return "f32 (4 bytes)";
    return nvfp4_model_kv_cache_dtype(nvfp4_context_model(c)) == NVFP4_KV_CACHE_FP8
               ? "fp8 (1 byte)"
               : "fp8 (1 byte, scale 1.0)";
}

nvfp4_context *cli_context_one(nvfp4_model *m, size_t kv_tokens, size_t batch,
                               nvfp4_kv_cache_dtype kv_dtype, nvfp4_seq *seq)
{
    nvfp4_context_options o;
    nvfp4_context *c;
    nvfp4_error err;

    nvfp4_context_options_init(&o);
    o.kv_tokens = kv_tokens ? kv_tokens : 1;
    o.max_batch_tokens = batch ? batch : 1;
    o.max_seqs = 1;
    o.kv_cache_dtype = kv_dtype;
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
