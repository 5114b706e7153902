/* SPDX-License-Identifier: MIT */
/* nvfp4 dequant: write one Linear layer's weight as raw float32 [N, K]. */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvfp4/quant.h>

#include "cli.h"

static void help(FILE *out)
{
    fprintf(out,
            "Usage: nvfp4 dequant PATH PREFIX --out FILE\n"
            "Validate the Linear layer PREFIX (e.g. model.layers.0.self_attn.q_proj)\n"
            "of the checkpoint at PATH and write its weight, dequantized to float32,\n"
            "to FILE as raw little-endian [N, K] row-major data.\n"
            "The scheme comes from config.json's quantization_config; without a\n"
            "config.json, a layer with a weight_scale is read as NVFP4.\n\n"
            "  -o, --out FILE  output file (required)\n"
            "  -h, --help      show this help\n");
}

/* Without config.json the tensors say what the layer is. */
static nvfp4_scheme scheme_from_tensors(nvfp4_checkpoint *ck, const char *prefix)
{
    char name[NVFP4_ERROR_FIELD_LENGTH + 32];

    snprintf(name, sizeof(name), "%s.weight_scale", prefix);
    if (!nvfp4_checkpoint_has(ck, name))
        return NVFP4_SCHEME_NONE;
    snprintf(name, sizeof(name), "%s.input_scale_2", prefix);
    if (nvfp4_checkpoint_has(ck, name))
        return NVFP4_SCHEME_W4A4;
    snprintf(name, sizeof(name), "%s.input_scale", prefix);
    return nvfp4_checkpoint_has(ck, name) ? NVFP4_SCHEME_W4A4 : NVFP4_SCHEME_W4A16;
}

static int run(int argc, char **argv)
{
    static const struct option opts[] = {{"out", required_argument, NULL, 'o'},
                                         {NULL, 0, NULL, 0}};
    const char *outpath = NULL, *path, *prefix;
    nvfp4_checkpoint *ck = NULL;
    nvfp4_qconfig *qc = NULL;
    nvfp4_linear lin;
    nvfp4_scheme scheme;
    nvfp4_error err;
    float *w = NULL;
    FILE *f = NULL;
    uint64_t count;
    int c, rc = CLI_INVALID;

    memset(&lin, 0, sizeof(lin));
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
        if (c == 'o')
            outpath = optarg;
        else if (optopt)
            return cli_usage(&cli_dequant, "option '-%c' needs an argument", optopt);
        else
            return cli_usage(&cli_dequant, "unknown option '%s'", argv[optind - 1]);
    }
    if (argc - optind != 2)
        return cli_usage(&cli_dequant, argc - optind < 2 ? "missing PATH or PREFIX"
                                                         : "too many arguments");
    if (!outpath)
        return cli_usage(&cli_dequant, "missing --out FILE");
    path = argv[optind];
    prefix = argv[optind + 1];

    if (!(ck = nvfp4_checkpoint_open(path, &err)))
        return cli_fail_error(&err);
    if (nvfp4_checkpoint_config(ck)) {
        if (!(qc = nvfp4_qconfig_parse(nvfp4_checkpoint_config(ck), &err)) ||
            nvfp4_qconfig_resolve(qc, prefix, &scheme, &err)) {
            rc = cli_fail_error(&err);
            goto out;
        }
    } else {
        scheme = scheme_from_tensors(ck, prefix);
    }
    if (nvfp4_linear_load(ck, prefix, scheme, -1, -1, &lin, &err)) {
        rc = cli_fail_error(&err);
        goto out;
    }
    /* n * k fits: the weight tensor of n * k / 2 (or n * k * 2) bytes is mapped */
    count = (uint64_t)lin.n * (uint64_t)lin.k;
    if (count > SIZE_MAX / sizeof(float) || !(w = malloc((size_t)count * sizeof(float)))) {
        rc = cli_fail("%s: cannot allocate %" PRIu64 " floats", prefix, count);
        goto out;
    }
    if (nvfp4_linear_dequant(&lin, w, &err)) {
        rc = cli_fail_error(&err);
        goto out;
    }
    if (!(f = fopen(outpath, "wb"))) {
        rc = cli_fail("%s: cannot open for writing", outpath);
        goto out;
    }
    if (fwrite(w, sizeof(float), (size_t)count, f) != (size_t)count) {
        fclose(f);
        rc = cli_fail("%s: write failed", outpath);
        goto out;
    }
    if (fclose(f)) {
        rc = cli_fail("%s: write failed", outpath);
        goto out;
    }
    fprintf(stderr, "%s: %s [%" PRId64 ", %" PRId64 "] -> %s\n", prefix,
            nvfp4_scheme_name(scheme), lin.n, lin.k, outpath);
    rc = CLI_OK;
out:
    free(w);
    nvfp4_linear_release(&lin);
    nvfp4_qconfig_free(qc);
    nvfp4_checkpoint_free(ck);
    return rc;
}

const cli_command cli_dequant = {
    "dequant", "write one Linear layer's weight dequantized to float32", run, help,
};
