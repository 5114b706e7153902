/* SPDX-License-Identifier: MIT */
/* A validated view of one Linear layer of a checkpoint (§2, §8), its
 * dequantization, and the global-scale rule for fused shards (§4).
 *
 * Loading never copies weights: the view points into the checkpoint's
 * mapping.  The loader checks the tensors it reads against the file (dtypes,
 * shapes against config.json, scale bytes with their file offsets);
 * nvfp4_linear_validate() is the one check of a view's invariants (shape,
 * data present, block-scale bytes, finite positive scales, dense/bias
 * tensors), run by the loader on what it built and by libkernels on every
 * part it is given to upload. */
#include "config.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Look up PREFIX.SUFFIX; *t = NULL and OK when absent and OPTIONAL. */
static nvfp4_status get_tensor(nvfp4_checkpoint *ck, const char *prefix, const char *suffix,
                               int optional, const nvfp4_tensor **t, nvfp4_error *err)
{
    char name[NVFP4_ERROR_FIELD_LENGTH + 32];
    nvfp4_status st;

    *t = NULL;
    snprintf(name, sizeof(name), "%s.%s", prefix, suffix);
    if (optional && !nvfp4_checkpoint_has(ck, name))
        return NVFP4_OK;
    st = nvfp4_checkpoint_get(ck, name, t, err);
    if (st == NVFP4_ERR_NOT_FOUND && !optional)
        return nvfp4_error_set(err, st, nvfp4_checkpoint_dir(ck), name, -1,
                               "tensor is missing (needed by the Linear layer %s)", prefix);
    return st;
}

static nvfp4_status bad_dtype(const nvfp4_tensor *t, const char *want, nvfp4_error *err)
{
    return nvfp4_error_set(err, NVFP4_ERR_BAD_DTYPE, t->file, t->name, -1,
                           "dtype is %s; expected %s", nvfp4_dtype_name(t->dtype), want);
}

/* A 2-D tensor of the given dtype and shape [rows, cols]; expected values of
 * -1 are taken from the tensor.  WHY explains where the expectation comes
 * from ("from config.json", "from the weight"). */
static nvfp4_status check_2d(const nvfp4_tensor *t, int64_t rows, int64_t cols,
                             const char *why, nvfp4_error *err)
{
    char shp[128];

    nvfp4_tensor_shape_text(t, shp, sizeof(shp));
    if (t->ndim != 2)
        return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, t->file, t->name, -1,
                               "shape is %s; expected 2 dimensions", shp);
    if ((rows >= 0 && t->shape[0] != rows) || (cols >= 0 && t->shape[1] != cols))
        return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, t->file, t->name, -1,
                               "shape is %s; expected [%" PRId64 ", %" PRId64 "] (%s)", shp,
                               rows >= 0 ? rows : t->shape[0], cols >= 0 ? cols : t->shape[1],
                               why);
    return NVFP4_OK;
}

/* A per-tensor scale (§2): F32 or BF16, shape [] or [1], finite and > 0.
 * A zero global scale makes other engines emit NaN (§8), so it is refused.
 * An activation scale is inverted (gs = 1 / input_scale, §5): INVERTED
 * also refuses one so small that its reciprocal overflows to infinity. */
static nvfp4_status read_global(const nvfp4_tensor *t, int inverted, float *out,
                                nvfp4_error *err)
{
    char shp[128];
    float v;

    if (t->dtype != NVFP4_DTYPE_F32 && t->dtype != NVFP4_DTYPE_BF16)
        return bad_dtype(t, "F32 (or BF16) per-tensor scale", err);
    if (!(t->ndim == 0 || (t->ndim == 1 && t->shape[0] == 1))) {
        nvfp4_tensor_shape_text(t, shp, sizeof(shp));
        return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, t->file, t->name, -1,
                               "shape is %s; expected a scalar ([] or [1])", shp);
    }
    nvfp4_quant_read_float(t, 0, &v);
    if (!(isfinite(v) && v > 0.0f))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, t->file, t->name,
                               (int64_t)t->offset,
                               "per-tensor scale is %g; expected a finite value > 0 "
                               "(it is a multiplier: %s)",
                               (double)v, v == 0.0f ? "zero would turn every output into 0 or NaN"
                                        : isnan(v) ? "NaN poisons every output"
                                        : isinf(v) ? "infinity poisons every output"
                                                   : "a negative scale flips every sign");
    /* The largest dequantized value is 6 (E2M1) * 448 (E4M3) * scale, for a
     * weight (§2) as for a quantize-dequantized activation (x' = q * s *
     * input_scale, §5): a scale above FLT_MAX / 2688 makes it infinite and
     * every logit NaN. */
    if ((double)v * 6.0 * 448.0 > (double)FLT_MAX)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, t->file, t->name, (int64_t)t->offset,
                               "per-tensor scale is %g; 6 * 448 * scale (the largest "
                               "dequantized value, §2) overflows float32 (at most %g)",
                               (double)v, (double)FLT_MAX / 2688.0);
    if (inverted && isinf(1.0f / v))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, t->file, t->name, (int64_t)t->offset,
                               "activation scale is %g; its reciprocal (the global "
                               "activation scale of §5) overflows float32", (double)v);
    *out = v;
    return NVFP4_OK;
}

static nvfp4_status check_bias(const nvfp4_tensor *b, int64_t n, nvfp4_error *err)
{
    char shp[128];

    if (b->dtype != NVFP4_DTYPE_F32 && b->dtype != NVFP4_DTYPE_BF16 &&
        b->dtype != NVFP4_DTYPE_F16)
        return bad_dtype(b, "F32, BF16 or F16 (the bias is stored unquantized, §2)", err);
    if (b->ndim != 1 || b->shape[0] != n) {
        nvfp4_tensor_shape_text(b, shp, sizeof(shp));
        return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, b->file, b->name, -1,
                               "shape is %s; expected [%" PRId64 "]", shp, n);
    }
    return NVFP4_OK;
}

static nvfp4_status load_dense(nvfp4_checkpoint *ck, const char *prefix, int64_t n,
                               int64_t k, nvfp4_linear *out, nvfp4_error *err)
{
    const nvfp4_tensor *w, *sc;
    nvfp4_status st;

    if ((st = get_tensor(ck, prefix, "weight_packed", 1, &w, err)))
        return st;
    if (w) /* compressed-tensors' packed FP4 where the config says unquantized */
        return nvfp4_error_set(err, NVFP4_ERR_BAD_DTYPE, w->file, w->name, -1,
                               "layer %s is stored packed (weight_packed, %s) but "
                               "quantization_config leaves it unquantized", prefix,
                               nvfp4_dtype_name(w->dtype));
    if ((st = get_tensor(ck, prefix, "weight", 0, &w, err)))
        return st;
    if (w->dtype == NVFP4_DTYPE_U8) {
        /* packed FP4 where the config says unquantized: refusing beats
         * reading 4-bit codes as bytes */
        get_tensor(ck, prefix, "weight_scale", 1, &sc, NULL);
        return nvfp4_error_set(err, NVFP4_ERR_BAD_DTYPE, w->file, w->name, -1,
                               "dtype is U8%s but quantization_config leaves this layer "
                               "unquantized; expected F32, BF16 or F16",
                               sc ? " with a weight_scale (an NVFP4 layer)" : "");
    }
    if (w->dtype != NVFP4_DTYPE_F32 && w->dtype != NVFP4_DTYPE_BF16 &&
        w->dtype != NVFP4_DTYPE_F16)
        return bad_dtype(w, "F32, BF16 or F16 (unquantized layer)", err);
    if ((st = check_2d(w, n, k, "from the model config", err)))
        return st;
    out->n = w->shape[0];
    out->k = w->shape[1];
    out->dense = w;
    return NVFP4_OK;
}

static nvfp4_status load_nvfp4(nvfp4_checkpoint *ck, const char *prefix, int64_t n,
                               int64_t k, int ct, nvfp4_linear *out, nvfp4_error *err)
{
    const nvfp4_tensor *w, *sc, *g, *in;
    const uint8_t *bytes;
    nvfp4_status st;
    int64_t kk, nb;

    if ((st = get_tensor(ck, prefix, ct ? "weight_packed" : "weight", 0, &w, err)))
        return st;
    if (w->dtype != NVFP4_DTYPE_U8)
        return bad_dtype(w, "U8 (packed E2M1, two per byte, §2)", err);
    if ((st = check_2d(w, n, k >= 0 ? k / 2 : -1, "[N, K/2] from the model config", err)))
        return st;
    kk = w->shape[1] * 2; /* shape[1] < 2^62: libformat bounds it by the file size */
    if (k >= 0 && (k % 2 || kk != k))
        return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, w->file, w->name, -1,
                               "holds K = %" PRId64 " inputs; the model config says %" PRId64,
                               kk, k);
    if (kk % NVFP4_BLOCK)
        return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, w->file, w->name, -1,
                               "K = %" PRId64 " inputs is not a multiple of %d (the NVFP4 "
                               "block size, §2)", kk, NVFP4_BLOCK);
    nb = kk / NVFP4_BLOCK;

    if ((st = get_tensor(ck, prefix, "weight_scale", 0, &sc, err)))
        return st;
    if (sc->dtype != NVFP4_DTYPE_F8_E4M3)
        return bad_dtype(sc, "F8_E4M3 block scales (§2)", err);
    if ((st = check_2d(sc, w->shape[0], nb, "[N, K/16] from the weight", err)))
        return st;
    /* §8: NaN or negative block scales would poison or flip whole blocks. */
    bytes = sc->data;
    for (uint64_t i = 0; i < sc->nbytes; i++) {
        if (num_e4m3_bad_scale(bytes[i]))
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, sc->file, sc->name,
                                   (int64_t)(sc->offset + i),
                                   "block scale [%" PRIu64 ", %" PRIu64 "] is byte 0x%02X (%s);"
                                   " expected a finite E4M3 value >= 0",
                                   i / (uint64_t)nb, i % (uint64_t)nb, bytes[i],
                                   (bytes[i] & 0x7F) == 0x7F ? "NaN" : "negative");
    }

    if (ct) {
        /* compressed-tensors stores divisors (quantization direction):
         * vLLM's weight multiplier is 1.0 / weight_global_scale in float32,
         * its activation gs the input_global_scale itself (DIALECTS.md). */
        float v;
        if ((st = get_tensor(ck, prefix, "weight_global_scale", 0, &g, err)) ||
            (st = read_global(g, 1, &v, err)))
            return st;
        out->weight_scale_2 = 1.0f / v;
        if (out->scheme == NVFP4_SCHEME_W4A4) {
            if ((st = get_tensor(ck, prefix, "input_global_scale", 0, &in, err)) ||
                (st = read_global(in, 1, &v, err)))
                return st;
            out->input_gs = v;
            out->input_scale = nvfp4q_inverse_preimage(v);
            if (!(out->input_scale > 0.0f) || isinf(out->input_scale))
                return nvfp4_error_set(err, NVFP4_ERR_INVALID, in->file, in->name,
                                       (int64_t)in->offset,
                                       "input_global_scale %g has no finite float32 "
                                       "reciprocal > 0", (double)v);
        }
    } else if ((st = get_tensor(ck, prefix, "weight_scale_2", 0, &g, err)) ||
               (st = read_global(g, 0, &out->weight_scale_2, err))) {
        return st;
    }

    if (!ct && out->scheme == NVFP4_SCHEME_W4A4) {
        /* file-to-file exports write input_scale instead of input_scale_2 */
        if ((st = get_tensor(ck, prefix, "input_scale_2", 1, &in, err)))
            return st;
        if (!in && (st = get_tensor(ck, prefix, "input_scale", 1, &in, err)))
            return st;
        if (!in)
            return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, w->file, prefix, -1,
                                   "W4A4 layer has neither %s.input_scale_2 nor "
                                   "%s.input_scale (the static activation scale, §2)",
                                   prefix, prefix);
        if ((st = read_global(in, 1, &out->input_scale, err)))
            return st;
    }
    out->n = w->shape[0];
    out->k = kk;
    out->weight = w->data;
    out->scales = sc->data;
    return NVFP4_OK;
}

/* ---- the one check of a Linear view ------------------------------------- */

/* A tensor of NUMEL elements in F32/BF16/F16 with data, as the kernels read
 * the unquantized weights and biases. */
static nvfp4_status check_float_part(const char *prefix, const char *what,
                                     const nvfp4_tensor *t, uint64_t numel, nvfp4_error *err)
{
    if (t->dtype != NVFP4_DTYPE_F32 && t->dtype != NVFP4_DTYPE_BF16 &&
        t->dtype != NVFP4_DTYPE_F16)
        return nvfp4_error_set(err, NVFP4_ERR_BAD_DTYPE, t->file, t->name, -1,
                               "%s of %s: expected F32, BF16 or F16, found %s", what, prefix,
                               nvfp4_dtype_name(t->dtype));
    if (t->numel != numel || !t->data)
        return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, t->file, t->name, -1,
                               "%s of %s: expected %" PRIu64 " elements, found %" PRIu64, what,
                               prefix, numel, t->numel);
    return NVFP4_OK;
}

/* An activation scale (§5): INPUT_SCALE a finite multiplier > 0 whose
 * reciprocal is finite when it is the gs (INPUT_GS 0), else INPUT_GS
 * finite and > 0. */
static nvfp4_status check_input_scale(const nvfp4_linear *lin, nvfp4_error *err)
{
    if (!(lin->input_scale > 0.0f) || isinf(lin->input_scale))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, lin->prefix, -1,
                               "W4A4 input scale must be finite and > 0, found %g",
                               (double)lin->input_scale);
    if (lin->input_gs != 0.0f && (!(lin->input_gs > 0.0f) || isinf(lin->input_gs)))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, lin->prefix, -1,
                               "W4A4 input_gs (the global activation scale of §5) must be "
                               "finite and > 0, or 0 for 1 / input scale; found %g",
                               (double)lin->input_gs);
    if (lin->input_gs == 0.0f && isinf(1.0f / lin->input_scale))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, lin->prefix, -1,
                               "W4A4 input scale %g: its reciprocal (the global activation "
                               "scale of §5) overflows float32", (double)lin->input_scale);
    return NVFP4_OK;
}

/* nvfp4_linear_validate(); SCAN_SCALES 0 skips the block-scale bytes (the
 * loader checked them itself, naming their file offsets). */
static nvfp4_status linear_check(const nvfp4_linear *lin, int scan_scales, nvfp4_error *err)
{
    const char *p = lin->prefix;
    uint64_t nk;

    if (lin->scheme != NVFP4_SCHEME_NONE && lin->scheme != NVFP4_SCHEME_W4A4 &&
        lin->scheme != NVFP4_SCHEME_W4A16)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, p, -1, "unknown scheme %d",
                               (int)lin->scheme);
    if (lin->n <= 0 || lin->k <= 0 ||
        __builtin_mul_overflow((uint64_t)lin->n, (uint64_t)lin->k, &nk) ||
        nk > ((uint64_t)1 << 48))
        return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, NULL, p, -1,
                               "shape [%" PRId64 ", %" PRId64 "]; expected n > 0, k > 0 and "
                               "n * k <= 2^48", lin->n, lin->k);
    if (lin->scheme == NVFP4_SCHEME_NONE) {
        nvfp4_status st;
        if (!lin->dense)
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, p, -1,
                                   "unquantized Linear without a weight tensor");
        if ((st = check_float_part(p, "weight", lin->dense, nk, err)))
            return st;
        /* dequantized W4A4 shards of an exact fused group keep their
         * activation scale: §5 runs before the float product */
        if (lin->input_scale != 0.0f) {
            if (lin->k % NVFP4_BLOCK != 0)
                return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, NULL, p, -1,
                                       "NVFP4 activations need k %% 16 == 0, found k = %" PRId64,
                                       lin->k);
            if ((st = check_input_scale(lin, err)))
                return st;
        }
    } else {
        if (lin->k % NVFP4_BLOCK != 0)
            return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, NULL, p, -1,
                                   "NVFP4 weight needs k %% 16 == 0, found k = %" PRId64, lin->k);
        if (!lin->weight || !lin->scales)
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, p, -1,
                                   "NVFP4 Linear without weight or weight_scale data");
        if (!(lin->weight_scale_2 > 0.0f) || isinf(lin->weight_scale_2))
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, p, -1,
                                   "weight_scale_2 must be finite and > 0, found %g",
                                   (double)lin->weight_scale_2);
        if ((double)lin->weight_scale_2 * 6.0 * 448.0 > (double)FLT_MAX)
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, p, -1,
                                   "weight_scale_2 is %g; 6 * 448 * scale (the largest "
                                   "dequantized value, §2) overflows float32",
                                   (double)lin->weight_scale_2);
        if (lin->scheme == NVFP4_SCHEME_W4A4) {
            nvfp4_status st = check_input_scale(lin, err);
            if (st)
                return st;
        }
        if (scan_scales) {
            const uint64_t nb = (uint64_t)lin->k / NVFP4_BLOCK, nsc = (uint64_t)lin->n * nb;
            for (uint64_t j = 0; j < nsc; j++) {
                uint8_t b = lin->scales[j];
                if (num_e4m3_bad_scale(b))
                    return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, p, -1,
                                           "weight_scale of row %" PRIu64 ", block %" PRIu64
                                           " is 0x%02X (%s); expected a finite non-negative "
                                           "E4M3 value",
                                           j / nb, j % nb, b,
                                           (b & 0x7F) == 0x7F ? "NaN" : "negative");
            }
        }
    }
    if (lin->bias)
        return check_float_part(p, "bias", lin->bias, (uint64_t)lin->n, err);
    return NVFP4_OK;
}

nvfp4_status nvfp4_linear_validate(const nvfp4_linear *lin, nvfp4_error *err)
{
    if (!lin)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "nvfp4_linear_validate: NULL argument");
    return linear_check(lin, 1, err);
}

int nvfp4_linear_is_scale_tensor(const char *name)
{
    /* every dialect's per-tensor scales (§2, docs/DIALECTS.md) */
    static const char *const sfx[] = {".weight_scale_2", ".input_scale", ".input_scale_2",
                                      ".output_scale", ".weight_global_scale",
                                      ".input_global_scale"};
    size_t n = name ? strlen(name) : 0;

    for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
        size_t k = strlen(sfx[i]);
        if (n >= k && !strcmp(name + n - k, sfx[i]))
            return 1;
    }
    return 0;
}

nvfp4_status nvfp4_linear_load(nvfp4_checkpoint *ck, const char *prefix,
                               nvfp4_scheme scheme, int64_t n, int64_t k,
                               nvfp4_linear *out, nvfp4_error *err)
{
    return nvfp4_linear_load_dialect(ck, prefix, scheme, NVFP4_DIALECT_QUARK, n, k, out, err);
}

nvfp4_status nvfp4_linear_load_dialect(nvfp4_checkpoint *ck, const char *prefix,
                                       nvfp4_scheme scheme, nvfp4_dialect dialect,
                                       int64_t n, int64_t k, nvfp4_linear *out,
                                       nvfp4_error *err)
{
    nvfp4_status st;

    if (out)
        memset(out, 0, sizeof(*out));
    if (!ck || !prefix || !out)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "nvfp4_linear_load: NULL argument");
    if (strlen(prefix) >= sizeof(out->prefix))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "layer name is %zu bytes long; at most %zu are supported",
                               strlen(prefix), sizeof(out->prefix) - 1);
    if (scheme != NVFP4_SCHEME_NONE && scheme != NVFP4_SCHEME_W4A4 &&
        scheme != NVFP4_SCHEME_W4A16)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, prefix, -1,
                               "unknown scheme %d", (int)scheme);
    if (n < -1 || k < -1 || n == 0 || k == 0)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, prefix, -1,
                               "expected shape [%" PRId64 ", %" PRId64 "] is not valid; "
                               "give positive sizes or -1", n, k);
    strcpy(out->prefix, prefix);
    out->scheme = scheme;
    st = scheme == NVFP4_SCHEME_NONE ? load_dense(ck, prefix, n, k, out, err)
                                     : load_nvfp4(ck, prefix, n, k,
                                                  dialect == NVFP4_DIALECT_COMPRESSED_TENSORS,
                                                  out, err);
    if (!st && !(st = get_tensor(ck, prefix, "bias", 1, &out->bias, err)) && out->bias)
        st = check_bias(out->bias, out->n, err);
    /* the view's invariants, as every consumer checks them; the block
     * scales were scanned above, naming their offsets in the file */
    if (!st)
        st = linear_check(out, 0, err);
    if (st) {
        char keep[sizeof(out->prefix)];
        memcpy(keep, out->prefix, sizeof(keep));
        memset(out, 0, sizeof(*out));
        memcpy(out->prefix, keep, sizeof(keep));
    }
    return st;
}

void nvfp4_linear_release(nvfp4_linear *lin)
{
    if (!lin)
        return;
    free(lin->owned_scales);
    lin->owned_scales = NULL;
}

nvfp4_status nvfp4_linear_dequant(const nvfp4_linear *lin, float *out, nvfp4_error *err)
{
    if (!lin || !out)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "nvfp4_linear_dequant: NULL argument");
    if (lin->scheme == NVFP4_SCHEME_NONE) {
        const nvfp4_tensor *t = lin->dense;
        if (!t)
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, lin->prefix, -1,
                                   "layer was not loaded");
        for (uint64_t i = 0; i < t->numel; i++)
            nvfp4_quant_read_float(t, i, &out[i]);
        return NVFP4_OK;
    }
    if (!lin->weight || !lin->scales)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, lin->prefix, -1,
                               "layer was not loaded");
    {
        const size_t k = (size_t)lin->k;
        const int64_t n = lin->n;
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < n; r++)
            nvfp4_quant_dequant_row(lin->weight + (size_t)r * (k / 2),
                                    lin->scales + (size_t)r * (k / NVFP4_BLOCK),
                                    lin->weight_scale_2, k, out + (size_t)r * k);
    }
    return NVFP4_OK;
}

/* §4: the seed's rule is an error when fused shards' global scales differ;
 * the opt-in rescale moves each shard onto the largest scale, re-rounding
 * its block scales, which loses precision (hence opt-in). */
nvfp4_status nvfp4_linear_fuse_check(const char *layer, nvfp4_linear *shards, size_t count,
                                     int rescale, float *input_scale, nvfp4_error *err)
{
    float gmax = 0.0f, imax = 0.0f, gsmax = 0.0f, gsmax_scale = 0.0f;
    int differ = 0;

    if (!shards || count == 0)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, layer, -1,
                               "nvfp4_linear_fuse_check: no shards");
    for (size_t i = 0; i < count; i++) {
        const nvfp4_linear *s = &shards[i];
        if (s->scheme == NVFP4_SCHEME_NONE || !s->weight || !s->scales)
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, layer, -1,
                                   "shard %s is not a loaded NVFP4 layer", s->prefix);
        if (s->scheme != shards[0].scheme || s->k != shards[0].k)
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, layer, -1,
                                   "shards %s (%s, K=%" PRId64 ") and %s (%s, K=%" PRId64
                                   ") cannot be fused",
                                   shards[0].prefix, nvfp4_scheme_name(shards[0].scheme),
                                   shards[0].k, s->prefix, nvfp4_scheme_name(s->scheme), s->k);
        if (s->weight_scale_2 != shards[0].weight_scale_2)
            differ = 1;
        if (s->weight_scale_2 > gmax)
            gmax = s->weight_scale_2;
        if (s->input_scale > imax)
            imax = s->input_scale;
        if (s->input_gs > gsmax) {
            gsmax = s->input_gs;
            gsmax_scale = s->input_scale;
        }
    }
    /* compressed-tensors: vLLM takes the max of the divisors (DIALECTS.md);
     * every shard gets the group's gs, so that the kernels use it bit for bit */
    if (gsmax > 0.0f) {
        imax = gsmax_scale;
        for (size_t i = 0; i < count; i++)
            shards[i].input_gs = gsmax;
    }
    if (differ && rescale == NVFP4_FUSE_KEEP_SCALES)
        differ = 0; /* each shard keeps its own weight_scale_2: the caller runs them apart */
    if (differ && !rescale) {
        char msg[NVFP4_ERROR_TEXT_LENGTH];
        size_t used = 0;
        for (size_t i = 0; i < count && used < sizeof(msg); i++)
            used += (size_t)snprintf(msg + used, sizeof(msg) - used, "%s%s = %.9g",
                                     i ? ", " : "", shards[i].prefix,
                                     (double)shards[i].weight_scale_2);
        return nvfp4_error_set(err, NVFP4_ERR_SCALE_MISMATCH, NULL, layer, -1,
                               "fused shards have different weight_scale_2 (%s); Quark's "
                               "nvfp4 recipe shares one scale per fused group (§4)",
                               msg);
    }
    if (differ) {
        /* all buffers first, so a failed allocation leaves every shard as
         * it was */
        uint8_t **fresh = calloc(count, sizeof(*fresh));
        if (!fresh)
            return nvfp4_error_set(err, NVFP4_ERR_NOMEM, NULL, layer, -1,
                                   "out of memory for %zu rescaled shard pointers", count);
        for (size_t i = 0; i < count; i++) {
            size_t nsc = (size_t)shards[i].n * (size_t)(shards[i].k / NVFP4_BLOCK);
            if (shards[i].weight_scale_2 != gmax && !(fresh[i] = malloc(nsc ? nsc : 1))) {
                for (size_t j = 0; j < i; j++)
                    free(fresh[j]);
                free(fresh);
                return nvfp4_error_set(err, NVFP4_ERR_NOMEM, NULL, shards[i].prefix, -1,
                                       "out of memory rescaling %zu block scales", nsc);
            }
        }
        for (size_t i = 0; i < count; i++) {
            nvfp4_linear *s = &shards[i];
            size_t nsc = (size_t)s->n * (size_t)(s->k / NVFP4_BLOCK);
            float ratio = s->weight_scale_2 / gmax;

            if (!fresh[i])
                continue;
            for (size_t j = 0; j < nsc; j++)
                fresh[i][j] = nvfp4_fp8_e4m3_encode(num_e4m3_value(s->scales[j]) * ratio);
            free(s->owned_scales);
            s->owned_scales = fresh[i];
            s->scales = fresh[i];
            s->weight_scale_2 = gmax;
        }
        free(fresh);
    }
    if (input_scale)
        *input_scale = imax;
    return NVFP4_OK;
}
