/* SPDX-License-Identifier: MIT */
/* Shared by the libFuzzer harnesses: the library reads files, so each input
 * is written to a per-process scratch directory first. */
#ifndef NVFP4_FUZZUTIL_H
#define NVFP4_FUZZUTIL_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The scratch directory, created once (removed by the OS's tmp cleaning;
 * libFuzzer has no exit hook we could rely on). */
static inline const char *fz_dir(void)
{
    static char dir[256];

    if (!dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof(dir), "%s/nvfp4-fuzz-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir))
            abort(); /* the harness cannot run at all: not an input path */
    }
    return dir;
}

/* DIR/NAME; static storage, one per call site pattern (copy it to keep). */
static inline const char *fz_path(const char *name)
{
    static char p[512];

    snprintf(p, sizeof(p), "%s/%s", fz_dir(), name);
    return p;
}

/* Write the parts to DIR/NAME (replacing it); returns the path (static). */
static inline const char *fz_write3(const char *name, const void *a, size_t na, const void *b,
                             size_t nb, const void *c, size_t nc)
{
    const char *p = fz_path(name);
    FILE *f = fopen(p, "wb");

    if (!f)
        abort();
    if ((na && fwrite(a, 1, na, f) != na) || (nb && fwrite(b, 1, nb, f) != nb) ||
        (nc && fwrite(c, 1, nc, f) != nc))
        abort();
    fclose(f);
    return p;
}

static inline const char *fz_write(const char *name, const void *d, size_t n)
{
    return fz_write3(name, d, n, NULL, 0, NULL, 0);
}

/* A symlink DIR/NAME -> TARGET (once). */
static inline void fz_link(const char *name, const char *target)
{
    const char *p = fz_path(name);

    if (access(p, F_OK) != 0 && symlink(target, p) != 0)
        abort();
}

/* A whole file into memory (the fixtures). */
static inline unsigned char *fz_slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    unsigned char *b;
    long len;

    if (!f || fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
        abort();
    b = malloc((size_t)len + 1);
    if (!b || fread(b, 1, (size_t)len, f) != (size_t)len)
        abort();
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* The harnesses that open a model fuzz one file of the tiny fixture model
 * (tests/data/models/tiny) and take the other from it. */
#define FZ_TINY TEST_DATA_DIR "/models/tiny/"

/* A symlink DIR/NAME -> the tiny fixture's file NAME. */
static inline void fz_tiny_link(const char *name)
{
    char target[512];

    snprintf(target, sizeof(target), FZ_TINY "%s", name);
    fz_link(name, target);
}

#ifdef NVFP4_MODEL_H
/* nvfp4_model_open of the scratch directory (quiet, one thread, 8
 * positions) and, when it opens, a forward pass of two tokens, so that every
 * value that got through the open reaches assembly and the kernels. */
static inline void fz_open_and_forward(void)
{
    nvfp4_model_options opt;
    nvfp4_error err;
    nvfp4_model *m;

    nvfp4_model_options_init(&opt);
    opt.quiet = 1;
    opt.threads = 1;
    opt.max_ctx = 8;
    m = nvfp4_model_open(fz_dir(), &opt, &err);
    if (m) {
        int32_t ids[2] = {1, 2};
        size_t v = (size_t)nvfp4_model_vocab_size(m);
        float *logits = malloc(2 * v * sizeof(float));
        if (logits)
            (void)nvfp4_model_forward(m, ids, 2, 0, logits, 0, &err);
        free(logits);
    }
    nvfp4_model_free(m);
}
#endif

#endif
