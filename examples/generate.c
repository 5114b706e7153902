/* SPDX-License-Identifier: MIT */
/*
 * examples/generate.c - greedy generation with the context API of
 * nvfp4/model.h: open a model once, make a context (its paged KV cache),
 * feed the prompt as one prefill entry, then one decode entry per token.
 *
 *   generate MODEL [-n N] --ids 1,2,3     token ids in, token ids out
 *   generate MODEL [-n N] --prompt TEXT   text (MODEL/tokenizer.json)
 *
 * Prints the N new token ids, comma-separated, on stdout (and the text they
 * decode to on stderr when the model has a tokenizer).  Built by make
 * check; tests/example-generate.test runs it on a fixture model.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvfp4/model.h>

static int fail(const nvfp4_error *err)
{
    fprintf(stderr, "generate: %s\n", err->text);
    return 1;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *ids_arg = NULL, *prompt = NULL;
    long n_new = 8;
    int32_t *toks = NULL, *out_ids = NULL;
    size_t n = 0, V;
    nvfp4_error err;
    nvfp4_model *m;
    nvfp4_context *ctx;
    nvfp4_context_options co;
    nvfp4_batch_entry b;
    nvfp4_sampler greedy;
    float *logits;
    int rc = 0;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc)
            n_new = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--ids") && i + 1 < argc)
            ids_arg = argv[++i];
        else if (!strcmp(argv[i], "--prompt") && i + 1 < argc)
            prompt = argv[++i];
        else if (!model)
            model = argv[i];
        else
            model = NULL, i = argc;
    }
    if (!model || (!ids_arg == !prompt) || n_new < 1) {
        fprintf(stderr, "usage: generate MODEL [-n N] (--ids 1,2,3 | --prompt TEXT)\n");
        return 2;
    }

    /* The model: weights only, immutable, shareable between threads. */
    if (!(m = nvfp4_model_open(model, NULL, &err)))
        return fail(&err);
    V = (size_t)nvfp4_model_vocab_size(m);
    if (ids_arg) {
        const char *p = ids_arg;
        toks = malloc((strlen(ids_arg) / 2 + 1) * sizeof(int32_t));
        while (toks) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p || (*end && *end != ',')) {
                fprintf(stderr, "generate: --ids: expected numbers separated by commas\n");
                free(toks);
                nvfp4_model_free(m);
                return 2;
            }
            toks[n++] = (int32_t)v;
            if (!*end)
                break;
            p = end + 1;
        }
    } else if (!nvfp4_model_tokenizer(m)) {
        fprintf(stderr, "generate: %s has no tokenizer.json; use --ids\n", model);
        nvfp4_model_free(m);
        return 1;
    } else if (nvfp4_tokenizer_encode(nvfp4_model_tokenizer(m), prompt, strlen(prompt), &toks,
                                      &n, &err)) {
        nvfp4_model_free(m);
        return fail(&err);
    }

    if (n == 0) {
        fprintf(stderr, "generate: the prompt is empty\n");
        free(toks);
        nvfp4_model_free(m);
        return 1;
    }
    /* A context: the KV cache of the prompt and the new tokens. */
    nvfp4_context_options_init(&co);
    co.kv_tokens = n + (size_t)n_new;
    co.max_batch_tokens = n;
    logits = malloc(V * sizeof(float));
    out_ids = malloc((size_t)n_new * sizeof(int32_t));
    if (!(ctx = nvfp4_context_create(m, &co, &err)) || nvfp4_seq_create(ctx, &b.seq, &err)) {
        rc = fail(&err);
        goto out;
    }
    nvfp4_sampler_init(&greedy, 0.0f, 1.0f, 0);
    b.tokens = toks;            /* the prompt: one prefill entry */
    b.n_tokens = n;
    b.logits = NVFP4_LOGITS_LAST;
    b.out = logits;
    for (long i = 0; i < n_new; i++) {
        if (nvfp4_context_run(ctx, &b, 1, &err)) {
            rc = fail(&err);
            goto out;
        }
        out_ids[i] = nvfp4_sampler_sample(&greedy, logits, V);
        printf("%s%d", i ? "," : "", out_ids[i]);
        b.tokens = &out_ids[i]; /* then one decode entry per new token */
        b.n_tokens = 1;
    }
    printf("\n");
    if (nvfp4_model_tokenizer(m)) {
        char *text = nvfp4_tokenizer_decode(nvfp4_model_tokenizer(m), out_ids, (size_t)n_new,
                                            1, &err);
        if (text)
            fprintf(stderr, "%s\n", text);
        free(text);
    }
out:
    nvfp4_context_free(ctx);
    free(logits);
    free(out_ids);
    free(toks);
    nvfp4_model_free(m);
    return rc;
}
