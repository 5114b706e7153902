/* SPDX-License-Identifier: MIT */
/* Built against the INSTALLED libraries with only
 * `pkg-config --cflags --static --libs nvfp4-model`, our archives linked
 * statically (tests/local.mk installcheck-local): the .pc files' Requires,
 * Requires.private and Libs.private must carry everything a static link
 * needs.  Runs the fixture model MODELDIR (tests/data/models/tiny) over its
 * reference tokens and compares every logit with the PyTorch emulation
 * written by scripts/fixtures/gen_models.py (logits_emul.f32). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <nvfp4/model.h>

#define TOL 1e-4 /* as tests/test-model.c's LOGIT_TOL */

int main(int argc, char **argv)
{
    char path[4096];
    nvfp4_error err;
    nvfp4_model_options opt;
    nvfp4_model *m;
    json_error_t jerr;
    json_t *ref, *toks;
    int32_t *ids;
    float *logits, *want;
    size_t T, V, i;
    double maxdiff = 0;
    FILE *f;
    int rc = 1;

    if (argc != 2)
        return 2;
    printf("consumer-model: libnvfp4-model %s, libnvfp4-format %s\n", nvfp4_model_version(),
           nvfp4_format_version());
    snprintf(path, sizeof path, "%s/reference.json", argv[1]);
    ref = json_load_file(path, 0, &jerr);
    toks = ref ? json_object_get(ref, "tokens") : NULL;
    if (!json_is_array(toks)) {
        fprintf(stderr, "consumer-model: %s: no \"tokens\" array\n", path);
        return 1;
    }
    T = json_array_size(toks);
    nvfp4_model_options_init(&opt);
    opt.backend = "cpu";
    opt.quiet = 1;
    m = nvfp4_model_open(argv[1], &opt, &err);
    if (!m) {
        fprintf(stderr, "consumer-model: %s\n", err.text);
        return 1;
    }
    V = (size_t)nvfp4_model_vocab_size(m);
    ids = calloc(T, sizeof *ids);
    logits = calloc(T * V, sizeof *logits);
    want = calloc(T * V, sizeof *want);
    if (!ids || !logits || !want)
        goto out;
    for (i = 0; i < T; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(toks, i));
    snprintf(path, sizeof path, "%s/logits_emul.f32", argv[1]);
    f = fopen(path, "rb");
    if (!f || fread(want, sizeof *want, T * V, f) != T * V) {
        fprintf(stderr, "consumer-model: %s: cannot read %zu floats\n", path, T * V);
        if (f)
            fclose(f);
        goto out;
    }
    fclose(f);
    if (nvfp4_model_forward(m, ids, T, 0, logits, 0, &err) != NVFP4_OK) {
        fprintf(stderr, "consumer-model: forward: %s\n", err.text);
        goto out;
    }
    for (i = 0; i < T * V; i++) {
        double d = fabs((double)logits[i] - want[i]);
        if (!(d <= maxdiff))
            maxdiff = d; /* NaN sticks */
    }
    printf("consumer-model: %s (%s), %zu tokens x %zu logits, max |diff| vs PyTorch %.3g\n",
           argv[1], nvfp4_model_arch(m), T, V, maxdiff);
    rc = maxdiff <= TOL ? 0 : 1;
out:
    free(ids);
    free(logits);
    free(want);
    nvfp4_model_free(m);
    json_decref(ref);
    return rc;
}
