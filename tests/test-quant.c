/* SPDX-License-Identifier: MIT */
/*
 * libquant tests.  The references are independent of the code under test:
 *  - tests/data/quant: torch's own casts (E4M3, bf16, f16), the spec's E2M1
 *    table cross-checked with Quark's FP4 routine, and the §5 activation qdq
 *    computed by torch (scripts/fixtures/gen_quant.py);
 *  - tests/data/models: checkpoints exported by the real amd-quark package
 *    with PyTorch's dequantized weight and act-qdq of one Linear;
 *  - float64 computations written out plainly below;
 *  - for rejections, tiny malformed safetensors files written here: the
 *    assertion there is on our error (status and message), not on values.
 */
#include "config.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nvfp4/quant.h>

#include "testutil.h"
#include "toolrun.h"

static uint32_t fbits(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

/* Same value, or both NaN.  Used where a reference is a float result. */
static int same_float(float a, float b)
{
    return (isnan(a) && isnan(b)) || fbits(a) == fbits(b);
}

/* Same value with the sign of zero ignored (the fixtures' writers compare
 * values; -0 and +0 of a zero block are the same number). */
static int same_value(float a, float b)
{
    return same_float(a, b) || (a == 0.0f && b == 0.0f);
}

static void assert_contains(const char *text, const char *want)
{
    ck_assert_msg(strstr(text, want) != NULL, "message \"%s\" lacks \"%s\"", text, want);
}

/* The E2M1 magnitudes of spec §1, written out. */
static const double e2m1_mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

static double e2m1_ref(unsigned c)
{
    return (c & 8 ? -1.0 : 1.0) * e2m1_mag[c & 7];
}

/* E4M3FN by its definition (§1), in float64. */
static double e4m3_ref(unsigned b)
{
    int e = (b >> 3) & 15, m = b & 7;
    double s = b & 0x80 ? -1.0 : 1.0;
    if (e == 15 && m == 7)
        return NAN;
    if (e == 0)
        return s * ldexp(m, -9);
    return s * ldexp(1.0 + m / 8.0, e - 7);
}

/* ---- codecs against torch ---------------------------------------------- */

START_TEST(test_e4m3_decode_all_codes)
{
    size_t len;
    float *want = tload_file("quant/e4m3_decode.f32", &len);

    ck_assert_uint_eq(len, 256 * 4);
    for (unsigned b = 0; b < 256; b++) {
        float got = nvfp4_fp8_e4m3_decode((uint8_t)b);
        ck_assert_msg(same_float(got, want[b]), "code 0x%02X: got %a, torch %a", b,
                      (double)got, (double)want[b]);
        /* and the definition in float64 agrees with torch (sanity of both) */
        ck_assert(same_float((float)e4m3_ref(b), want[b]));
    }
    ck_assert(isnan(nvfp4_fp8_e4m3_decode(0x7F)) && isnan(nvfp4_fp8_e4m3_decode(0xFF)));
    free(want);
}
END_TEST

START_TEST(test_e4m3_encode_torch)
{
    size_t len, len2;
    float *in = tload_file("quant/e4m3_encode_in.f32", &len);
    uint8_t *want = tload_file("quant/e4m3_encode_out.u8", &len2);

    ck_assert_uint_eq(len / 4, len2);
    for (size_t i = 0; i < len2; i++) {
        uint8_t got = nvfp4_fp8_e4m3_encode(in[i]);
        ck_assert_msg(got == want[i], "x = %a (%g): got 0x%02X, torch 0x%02X",
                      (double)in[i], (double)in[i], got, want[i]);
    }
    free(in);
    free(want);
}
END_TEST

START_TEST(test_bf16_f16_round_torch)
{
    size_t len, lb, lh;
    float *in = tload_file("quant/round_in.f32", &len);
    uint16_t *bf = tload_file("quant/round_bf16.u16", &lb);
    uint16_t *hf = tload_file("quant/round_f16.u16", &lh);

    ck_assert_uint_eq(len / 4, lb / 2);
    ck_assert_uint_eq(len / 4, lh / 2);
    for (size_t i = 0; i < len / 4; i++) {
        ck_assert_msg(nvfp4_bf16_encode(in[i]) == bf[i], "bf16(%a): got 0x%04X, torch 0x%04X",
                      (double)in[i], nvfp4_bf16_encode(in[i]), bf[i]);
        ck_assert_msg(nvfp4_f16_encode(in[i]) == hf[i], "f16(%a): got 0x%04X, torch 0x%04X",
                      (double)in[i], nvfp4_f16_encode(in[i]), hf[i]);
    }
    free(in);
    free(bf);
    free(hf);
}
END_TEST

/* Decoders of every 16-bit pattern against the IEEE definitions in float64. */
START_TEST(test_bf16_f16_decode_all)
{
    for (uint32_t h = 0; h < 65536; h++) {
        int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
        double want;
        if (e == 31)
            want = m ? NAN : (s ? -INFINITY : INFINITY);
        else if (e == 0)
            want = (s ? -1 : 1) * ldexp(m, -24);
        else
            want = (s ? -1 : 1) * ldexp(1.0 + m / 1024.0, e - 15);
        ck_assert_msg(same_float(nvfp4_f16_decode((uint16_t)h), (float)want) ||
                          (h == 0x8000 && nvfp4_f16_decode(0x8000) == 0.0f),
                      "f16 0x%04X", h);

        e = (h >> 7) & 255;
        m = h & 127;
        if (e == 255)
            want = m ? NAN : (s ? -INFINITY : INFINITY);
        else if (e == 0)
            want = (s ? -1 : 1) * ldexp(m, -133);
        else
            want = (s ? -1 : 1) * ldexp(1.0 + m / 128.0, e - 127);
        ck_assert_msg(same_value(nvfp4_bf16_decode((uint16_t)h), (float)want), "bf16 0x%04X",
                      h);
    }
}
END_TEST

START_TEST(test_e2m1_encode_table)
{
    size_t len, len2;
    float *in = tload_file("quant/e2m1_encode_in.f32", &len);
    uint8_t *want = tload_file("quant/e2m1_encode_out.u8", &len2);

    ck_assert_uint_eq(len / 4, len2);
    for (size_t i = 0; i < len2; i++) {
        uint8_t got = nvfp4_fp4_encode(in[i]);
        ck_assert_msg(got == want[i], "x = %a: got 0x%X, expected 0x%X", (double)in[i], got,
                      want[i]);
    }
    /* rounding to zero gives +0 whatever the sign (§1), NaN gives 0 */
    ck_assert_uint_eq(nvfp4_fp4_encode(-0.0f), 0);
    ck_assert_uint_eq(nvfp4_fp4_encode(-0.25f), 0);
    ck_assert_uint_eq(nvfp4_fp4_encode(NAN), 0);
    ck_assert_uint_eq(nvfp4_fp4_encode(-INFINITY), 0xF);
    free(in);
    free(want);
}
END_TEST

START_TEST(test_e2m1_decode)
{
    for (unsigned c = 0; c < 16; c++) {
        ck_assert(same_value(nvfp4_fp4_decode((uint8_t)c), (float)e2m1_ref(c)));
        ck_assert(same_value(nvfp4_fp4_decode((uint8_t)(c | 0xF0)), (float)e2m1_ref(c)));
    }
    ck_assert(nvfp4_fp4_decode(0x8) == 0.0f); /* -0 decodes to zero (§1) */
}
END_TEST

/* Nibble order: element 2i low, 2i+1 high (§2), on the fixture's packing. */
START_TEST(test_pack_order)
{
    size_t lc, lp;
    uint8_t *codes = tload_file("quant/e2m1_pack_codes.u8", &lc);
    uint8_t *packed = tload_file("quant/e2m1_pack_packed.u8", &lp);
    uint8_t scales[2] = {0x38, 0x38}; /* E4M3 1.0 */
    float out[32];

    ck_assert_uint_eq(lc, 32);
    ck_assert_uint_eq(lp, 16);
    nvfp4_quant_dequant_row(packed, scales, 1.0f, 32, out);
    for (int i = 0; i < 32; i++)
        ck_assert_msg(same_value(out[i], (float)e2m1_ref(codes[i])), "element %d", i);
    free(codes);
    free(packed);
}
END_TEST

/* ---- dequantization against float64 ------------------------------------ */

static uint32_t rng_state = 12345;
static uint32_t rnd(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return rng_state >> 8;
}

/* §2 in float64: (E4M3 * global) rounded once to float32, then times the
 * code and rounded again.  A product of two floats is exact in double, so
 * each cast is exactly one float32 rounding. */
static float dequant_ref(uint8_t byte, int high, uint8_t scale, float global)
{
    float s = (float)(e4m3_ref(scale) * (double)global);
    return (float)(e2m1_ref(high ? byte >> 4 : byte & 15) * (double)s);
}

static uint8_t random_scale(void)
{
    uint8_t b;
    do
        b = (uint8_t)(rnd() & 0x7F);
    while (b == 0x7F);
    return b;
}

START_TEST(test_dequant_row_reference)
{
    /* K values covering one block, odd numbers of blocks and a long row */
    static const size_t ks[] = {16, 48, 80, 4096};
    static const float globals[] = {1.0f, 3.0e-4f, 0.0123f, 7.5e-7f, 1.0e30f};

    for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
        size_t k = ks[ki];
        uint8_t *p = malloc(k / 2), *s = malloc(k / 16);
        float *out = malloc(k * 4);
        uint16_t *ob = malloc(k * 2);
        for (size_t gi = 0; gi < sizeof(globals) / sizeof(globals[0]); gi++) {
            float g = globals[gi];
            for (size_t i = 0; i < k / 2; i++)
                p[i] = (uint8_t)rnd();
            for (size_t i = 0; i < k / 16; i++)
                s[i] = random_scale();
            s[0] = 0x00; /* a zero block scale is legal and gives zeros (§8) */
            nvfp4_quant_dequant_row(p, s, g, k, out);
            nvfp4_quant_dequant_row_bf16(p, s, g, k, ob);
            for (size_t i = 0; i < k; i++) {
                float want = dequant_ref(p[i / 2], (int)(i & 1), s[i / 16], g);
                ck_assert_msg(same_value(out[i], want), "k=%zu g=%g i=%zu: %a vs %a", k,
                              (double)g, i, (double)out[i], (double)want);
                /* bf16: the float32 result rounded once; the encoder is
                 * checked against torch above */
                ck_assert_uint_eq(ob[i] & 0x7FFF, nvfp4_bf16_encode(want) & 0x7FFF);
            }
            for (size_t i = 0; i < 16; i++)
                ck_assert(out[i] == 0.0f);
        }
        free(p);
        free(s);
        free(out);
        free(ob);
    }
}
END_TEST

/* ---- activation qdq (§5) against torch ----------------------------------- */

START_TEST(test_act_qdq_torch)
{
    size_t lin, lout;
    float *x = tload_file("quant/act_qdq_in.f32", &lin);
    float *want = tload_file("quant/act_qdq_out.f32", &lout);
    float out[64];
    float scale = tact_qdq_scale();

    ck_assert_uint_eq(lin, 12 * 64 * 4);
    ck_assert_uint_eq(lout, lin);
    for (int r = 0; r < 12; r++) {
        nvfp4_quant_qdq_row(x + r * 64, 64, scale, out);
        for (int i = 0; i < 64; i++)
            ck_assert_msg(same_value(out[i], want[r * 64 + i]), "row %d col %d: %a vs torch %a",
                          r, i, (double)out[i], (double)want[r * 64 + i]);
    }
    /* in place, as the header allows */
    nvfp4_quant_qdq_row(x + 64, 64, scale, x + 64);
    for (int i = 0; i < 64; i++)
        ck_assert(same_value(x[64 + i], want[64 + i]));
    /* the all-zero row (row 6) is zeros, not NaN (§8) */
    for (int i = 0; i < 64; i++)
        ck_assert(want[6 * 64 + i] == 0.0f);
    free(x);
    free(want);
}
END_TEST

/* ---- Quark's weight quantizer (§7) --------------------------------------- */

START_TEST(test_global_scale)
{
    /* float32(amax) / 2688 rounded once: the float64 quotient of two floats
     * rounds to the same float32 (double rounding is innocuous here, since
     * 53 >= 2 * 24 + 2). */
    static const float amax[] = {1.0f, 0.37f, 12.5f, 2688.0f, 3.0e-3f};
    for (size_t i = 0; i < sizeof(amax) / sizeof(amax[0]); i++)
        ck_assert(same_float(nvfp4_quant_global_scale(amax[i]),
                             (float)((double)amax[i] / 2688.0)));
    ck_assert(nvfp4_quant_global_scale(0.0f) == FLT_EPSILON);
    ck_assert(nvfp4_quant_global_scale(1e-45f) == FLT_EPSILON); /* underflows to 0 */
}
END_TEST

/* Nearest E4M3 code to a non-negative double, ties to the even code, found
 * by scanning every finite code: an encoder written without bit tricks. */
static uint8_t e4m3_nearest(double v)
{
    uint8_t best = 0;
    double bd = INFINITY;
    if (v > 448)
        v = 448;
    for (unsigned c = 0; c < 0x7F; c++) {
        double d = fabs(e4m3_ref(c) - v);
        if (d < bd || (d == bd && !(c & 1))) {
            bd = d;
            best = (uint8_t)c;
        }
    }
    return best;
}

/* Nearest E2M1 code, ties to the even magnitude index, saturating; zero is
 * +0 (§1). */
static uint8_t e2m1_nearest(double v)
{
    unsigned best = 0;
    double bd = INFINITY, a = fabs(v);
    for (unsigned c = 0; c < 8; c++) {
        double d = fabs(e2m1_mag[c] - a);
        if (d < bd || (d == bd && !(c & 1))) {
            bd = d;
            best = c;
        }
    }
    return (uint8_t)(best && v < 0 ? best | 8 : best);
}

/* §7 evaluated in float64 with one float32 rounding per float32 operation
 * of the spec, and encoders by exhaustive search. */
START_TEST(test_quant_weight_reference)
{
    enum { N = 5, K = 64 };
    float w[N * K], amax = 0;
    uint8_t packed[N * K / 2], scales[N * K / 16];
    float g;

    for (int i = 0; i < N * K; i++) {
        w[i] = (float)((int)(rnd() % 20001) - 10000) * 1e-4f * (float)(1 + i % 7);
        amax = fmaxf(amax, fabsf(w[i]));
    }
    for (int i = 0; i < 16; i++)
        w[16 + i] = 0.0f; /* an all-zero block: scale 0 -> 1.0 (0x38) */
    for (int i = 0; i < 16; i++)
        w[48 + i] = 1e-12f * (float)(i - 8); /* rounds to scale 0 too */
    w[64 + 3] = 0.25f * amax / 448.0f / 6.0f; /* a tie in a block's codes */
    g = nvfp4_quant_global_scale(amax);
    nvfp4_quant_weight(w, N, K, g, packed, scales);
    for (int r = 0; r < N; r++) {
        for (int b = 0; b < K / 16; b++) {
            const float *wb = w + r * K + b * 16;
            float a = 0, denom6 = (float)((double)g * 6.0), d;
            uint8_t sb;
            for (int j = 0; j < 16; j++)
                a = fmaxf(a, fabsf(wb[j]));
            sb = e4m3_nearest((double)(float)((double)a / denom6));
            if (sb == 0)
                sb = 0x38;
            ck_assert_msg(scales[r * (K / 16) + b] == sb, "row %d block %d: 0x%02X vs 0x%02X",
                          r, b, scales[r * (K / 16) + b], sb);
            d = (float)(e4m3_ref(sb) * (double)g);
            for (int j = 0; j < 16; j++) {
                uint8_t byte = packed[(r * K + b * 16 + j) / 2];
                uint8_t got = j & 1 ? byte >> 4 : byte & 15;
                uint8_t want = e2m1_nearest((double)(float)((double)wb[j] / d));
                ck_assert_msg(got == want, "row %d block %d elem %d: 0x%X vs 0x%X", r, b, j,
                              got, want);
            }
        }
    }
    ck_assert_uint_eq(scales[1], 0x38);
    ck_assert_uint_eq(scales[3], 0x38);
}
END_TEST

/* ---- quantization_config (§3) -------------------------------------------- */

static char tmpdir[64];

static void make_tmpdir(void)
{
    strcpy(tmpdir, "/tmp/test-quant-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static char *tmppath(const char *name)
{
    static char buf[4][512];
    static int slot;
    char *b = buf[slot++ & 3];
    snprintf(b, 512, "%s/%s", tmpdir, name);
    return b;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* The NVFP4 tensor specs exactly as amd-quark 0.13 writes them (copied from
 * tests/data/models/llama/config.json, trimmed of fields §3 ignores). */
#define FP4_W "{\"dtype\":\"fp4\",\"qscheme\":\"per_group\",\"group_size\":16," \
              "\"is_dynamic\":false,\"is_scale_quant\":false,\"scale_format\":\"float32\"," \
              "\"observer_cls\":\"PerBlockMXObserver\",\"ch_axis\":-1}"
#define FP4_A "{\"dtype\":\"fp4\",\"qscheme\":\"per_group\",\"group_size\":16," \
              "\"is_dynamic\":true,\"is_scale_quant\":false,\"scale_format\":\"float32\"}"
#define FP8_S "{\"dtype\":\"fp8_e4m3\",\"qscheme\":\"per_tensor\",\"group_size\":null," \
              "\"is_dynamic\":false,\"is_scale_quant\":true,\"scale_format\":null}"
#define W4A4 "{\"weight\":[" FP4_W "," FP8_S "],\"input_tensors\":[" FP4_A "," FP8_S "]," \
             "\"output_tensors\":null,\"bias\":null}"
#define W4A16 "{\"weight\":[" FP4_W "," FP8_S "],\"input_tensors\":null," \
              "\"output_tensors\":null,\"bias\":null}"
#define MXFP4_SPEC "{\"dtype\":\"fp4\",\"qscheme\":\"per_group\",\"group_size\":32," \
                   "\"is_dynamic\":false,\"scale_format\":\"e8m0\"}"
#define MXFP4 "{\"weight\":" MXFP4_SPEC ",\"input_tensors\":null}"
#define FP8 "{\"weight\":{\"dtype\":\"fp8_e4m3\",\"qscheme\":\"per_channel\",\"is_dynamic\":false}," \
            "\"input_tensors\":null}"
#define EXPORT "\"export\":{\"weight_format\":\"real_quantized\",\"pack_method\":\"reorder\"}"

/* Writes config.json {"quantization_config": {QC}} and parses it. */
static nvfp4_qconfig *qc_from(const char *qc, nvfp4_config **cfg, nvfp4_error *err)
{
    char *text = malloc(strlen(qc) + 64);
    nvfp4_qconfig *q;

    sprintf(text, "{\"model_type\":\"llama\",\"quantization_config\":%s}", qc);
    write_text(tmppath("config.json"), text);
    free(text);
    *cfg = nvfp4_config_load(tmppath("config.json"), err);
    ck_assert_msg(*cfg != NULL, "%s", err->text);
    q = nvfp4_qconfig_parse(*cfg, err);
    return q;
}

static nvfp4_scheme resolve_ok(const nvfp4_qconfig *q, const char *layer)
{
    nvfp4_scheme s;
    nvfp4_error err;
    nvfp4_status st = nvfp4_qconfig_resolve(q, layer, &s, &err);
    ck_assert_msg(st == NVFP4_OK, "%s: %s", layer, err.text);
    return s;
}

START_TEST(test_qconfig_fixture_models)
{
    /* configs written by amd-quark itself */
    nvfp4_error err;
    nvfp4_config *cfg = nvfp4_config_load(tdata("models/llama/config.json"), &err);
    nvfp4_qconfig *q;

    ck_assert_msg(cfg != NULL, "%s", err.text);
    q = nvfp4_qconfig_parse(cfg, &err);
    ck_assert_msg(q != NULL, "%s", err.text);
    ck_assert_int_eq(resolve_ok(q, "model.layers.0.self_attn.q_proj"), NVFP4_SCHEME_W4A4);
    ck_assert_int_eq(resolve_ok(q, "model.layers.1.mlp.down_proj"), NVFP4_SCHEME_W4A4);
    ck_assert_int_eq(resolve_ok(q, "lm_head"), NVFP4_SCHEME_NONE);
    nvfp4_qconfig_free(q);
    nvfp4_config_free(cfg);

    cfg = nvfp4_config_load(tdata("models/llama_w4a16/config.json"), &err);
    ck_assert_msg(cfg != NULL, "%s", err.text);
    q = nvfp4_qconfig_parse(cfg, &err);
    ck_assert_msg(q != NULL, "%s", err.text);
    ck_assert_int_eq(resolve_ok(q, "model.layers.0.self_attn.q_proj"), NVFP4_SCHEME_W4A16);
    ck_assert_int_eq(resolve_ok(q, "lm_head"), NVFP4_SCHEME_NONE);
    nvfp4_qconfig_free(q);
    nvfp4_config_free(cfg);

    ck_assert_str_eq(nvfp4_scheme_name(NVFP4_SCHEME_NONE), "none");
    ck_assert_str_eq(nvfp4_scheme_name(NVFP4_SCHEME_W4A4), "w4a4");
    ck_assert_str_eq(nvfp4_scheme_name(NVFP4_SCHEME_W4A16), "w4a16");
}
END_TEST

START_TEST(test_qconfig_resolution_order)
{
    nvfp4_error err;
    nvfp4_config *cfg;
    nvfp4_qconfig *q;

    make_tmpdir();
    /* no quantization_config: everything unquantized */
    write_text(tmppath("config.json"), "{\"model_type\":\"llama\"}");
    cfg = nvfp4_config_load(tmppath("config.json"), &err);
    q = nvfp4_qconfig_parse(cfg, &err);
    ck_assert_ptr_nonnull(q);
    ck_assert_int_eq(resolve_ok(q, "model.layers.0.self_attn.q_proj"), NVFP4_SCHEME_NONE);
    nvfp4_qconfig_free(q);
    nvfp4_config_free(cfg);

    /* exclude (exact, fnmatch, re:) > layer_quant_config (first match in
     * order; substring without '*', fnmatch with) > layer_type > global */
    q = qc_from("{\"quant_method\":\"quark\"," EXPORT ",\"global_quant_config\":" W4A4 ","
                "\"exclude\":[\"lm_head\",\"*.mlp.gate\",\"re:model\\\\.layers\\\\.[0-9]+\\\\.router\"],"
                "\"layer_quant_config\":{\"down_proj\":" W4A16 ",\"*layers.1.*\":" MXFP4 ","
                "\"*layers.2.*\":{\"weight\":null,\"input_tensors\":null}},"
                "\"layer_type_quant_config\":{}}",
                &cfg, &err);
    ck_assert_msg(q != NULL, "%s", err.text);
    ck_assert_int_eq(resolve_ok(q, "lm_head"), NVFP4_SCHEME_NONE);
    ck_assert_int_eq(resolve_ok(q, "model.lm_head"), NVFP4_SCHEME_W4A4); /* exact only */
    ck_assert_int_eq(resolve_ok(q, "model.layers.3.mlp.gate"), NVFP4_SCHEME_NONE);
    ck_assert_int_eq(resolve_ok(q, "model.layers.3.mlp.gate_proj"), NVFP4_SCHEME_W4A4);
    ck_assert_int_eq(resolve_ok(q, "model.layers.12.router"), NVFP4_SCHEME_NONE);
    ck_assert_int_eq(resolve_ok(q, "xmodel.layers.12.router"), NVFP4_SCHEME_W4A4);
    ck_assert_int_eq(resolve_ok(q, "model.layers.0.mlp.down_proj"), NVFP4_SCHEME_W4A16);
    /* down_proj comes first in the object, so it wins over *layers.1.* */
    ck_assert_int_eq(resolve_ok(q, "model.layers.1.mlp.down_proj"), NVFP4_SCHEME_W4A16);
    ck_assert_int_eq(resolve_ok(q, "model.layers.2.mlp.up_proj"), NVFP4_SCHEME_NONE);
    ck_assert_int_eq(resolve_ok(q, "model.layers.0.self_attn.q_proj"), NVFP4_SCHEME_W4A4);
    {
        /* a reachable MXFP4 layer config is refused when resolved, naming
         * the layer, what was found and what is supported */
        nvfp4_scheme s;
        ck_assert_int_eq(nvfp4_qconfig_resolve(q, "model.layers.1.mlp.up_proj", &s, &err),
                         NVFP4_ERR_UNSUPPORTED);
        assert_contains(err.text, "model.layers.1.mlp.up_proj");
        assert_contains(err.text, "MXFP4");
        assert_contains(err.text, "\"e8m0\"");
        assert_contains(err.text, "supported: NVFP4");
        assert_contains(err.key, "layer_quant_config[\"*layers.1.*\"].weight");
        assert_contains(err.file, "config.json");
    }
    nvfp4_qconfig_free(q);
    nvfp4_config_free(cfg);

    /* layer_type_quant_config["Linear"] beats global */
    q = qc_from("{\"quant_method\":\"quark\"," EXPORT ",\"global_quant_config\":" W4A4 ","
                "\"layer_type_quant_config\":{\"Linear\":" W4A16 "}}",
                &cfg, &err);
    ck_assert_msg(q != NULL, "%s", err.text);
    ck_assert_int_eq(resolve_ok(q, "model.layers.0.self_attn.q_proj"), NVFP4_SCHEME_W4A16);
    nvfp4_qconfig_free(q);
    nvfp4_config_free(cfg);

    /* a global MXFP4 config with every layer overridden: refused at parse */
    q = qc_from("{\"quant_method\":\"quark\"," EXPORT ",\"global_quant_config\":" MXFP4 "}",
                &cfg, &err);
    ck_assert_ptr_null(q);
    ck_assert_int_eq(err.status, NVFP4_ERR_UNSUPPORTED);
    assert_contains(err.text, "MXFP4");
    assert_contains(err.text, "group_size=32");
    assert_contains(err.key, "global_quant_config.weight");
    nvfp4_config_free(cfg);
}
END_TEST

/* Each malformed or unsupported quantization_config and the words its error
 * must contain. */
static const struct {
    const char *qc;
    nvfp4_status status;
    const char *words[3];
} bad_qconfigs[] = {
    {"[1]", NVFP4_ERR_TYPE, {"quantization_config", "expected an object"}},
    {"{" EXPORT ",\"global_quant_config\":" W4A4 "}", NVFP4_ERR_INVALID,
     {"quant_method", "expected \"quark\""}},
    {"{\"quant_method\":\"gptq\"," EXPORT "}", NVFP4_ERR_UNSUPPORTED,
     {"\"gptq\"", "supported: \"quark\"", "\"modelopt\""}},
    /* ModelOpt and compressed-tensors (docs/DIALECTS.md) */
    {"{\"quant_method\":\"modelopt\"}", NVFP4_ERR_INVALID,
     {"quant_algo", "missing", "\"NVFP4\""}},
    {"{\"quant_method\":\"modelopt\",\"quant_algo\":\"FP8\"}", NVFP4_ERR_UNSUPPORTED,
     {"quantization_config.quant_algo", "\"FP8\" (FP8)", "supported"}},
    {"{\"quant_method\":\"modelopt\",\"quant_algo\":\"W4A16_AWQ\"}", NVFP4_ERR_UNSUPPORTED,
     {"INT4"}},
    {"{\"quant_method\":\"modelopt\",\"quant_algo\":\"NVFP4_SVD\"}", NVFP4_ERR_UNSUPPORTED,
     {"\"NVFP4_SVD\"", "SVDQuant"}},
    {"{\"quant_method\":\"modelopt\",\"quant_algo\":\"NVFP4\",\"group_size\":32}",
     NVFP4_ERR_UNSUPPORTED, {"group_size", "found 32"}},
    {"{\"quant_method\":\"modelopt\",\"quant_algo\":\"NVFP4\",\"exclude_modules\":\"lm_head\"}",
     NVFP4_ERR_TYPE, {"exclude_modules", "list"}},
    {"{\"quant_method\":\"modelopt\",\"quant_algo\":\"MIXED_PRECISION\"}", NVFP4_ERR_TYPE,
     {"quantized_layers"}},
    {"{\"quant_method\":\"compressed-tensors\"}", NVFP4_ERR_TYPE,
     {"quantization_config.config_groups", "object"}},
    {"{\"quant_method\":\"compressed-tensors\",\"quantization_status\":\"frozen\","
     "\"config_groups\":{}}", NVFP4_ERR_UNSUPPORTED, {"quantization_status", "\"frozen\""}},
    {"{\"quant_method\":\"compressed-tensors\",\"config_groups\":{\"g\":{\"targets\":\"Linear\"}}}",
     NVFP4_ERR_TYPE, {"config_groups.g.targets", "list"}},
    {"{\"quant_method\":\"compressed-tensors\",\"config_groups\":{},\"ignore\":[\"re:(\"]}",
     NVFP4_ERR_INVALID, {"quantization_config.ignore", "re:(", "regular expression"}},
    {"{\"quant_method\":\"quark\",\"global_quant_config\":" W4A4 "}", NVFP4_ERR_INVALID,
     {"export.weight_format", "missing", "real_quantized"}},
    {"{\"quant_method\":\"quark\",\"export\":{\"weight_format\":\"fake_quantized\"},"
     "\"global_quant_config\":" W4A4 "}",
     NVFP4_ERR_UNSUPPORTED, {"\"fake_quantized\"", "\"real_quantized\""}},
    {"{\"quant_method\":\"quark\"," EXPORT ",\"global_quant_config\":" FP8 "}",
     NVFP4_ERR_UNSUPPORTED, {"found FP8", "per_channel", "supported: NVFP4"}},
    {"{\"quant_method\":\"quark\"," EXPORT ",\"global_quant_config\":{\"weight\":[" FP4_W ","
     FP8_S "],\"input_tensors\":null,\"output_tensors\":[" FP4_A "," FP8_S "]}}",
     NVFP4_ERR_UNSUPPORTED, {"output_tensors", "not supported"}},
    {"{\"quant_method\":\"quark\"," EXPORT ",\"global_quant_config\":{\"weight\":[" FP4_W ","
     FP8_S "],\"input_tensors\":null,\"bias\":" FP8_S "}}",
     NVFP4_ERR_UNSUPPORTED, {"bias", "not supported"}},
    {"{\"quant_method\":\"quark\"," EXPORT ",\"global_quant_config\":{\"weight\":null,"
     "\"input_tensors\":[" FP4_A "," FP8_S "]}}",
     NVFP4_ERR_UNSUPPORTED, {"activation-only"}},
    /* NVFP4-looking but with a dynamic weight, or static activations */
    {"{\"quant_method\":\"quark\"," EXPORT ",\"global_quant_config\":{\"weight\":[" FP4_A ","
     FP8_S "]}}",
     NVFP4_ERR_UNSUPPORTED, {"NVFP4 variant", "is_dynamic=true"}},
    {"{\"quant_method\":\"quark\"," EXPORT ",\"global_quant_config\":{\"weight\":[" FP4_W ","
     FP8_S "],\"input_tensors\":[" FP4_W "," FP8_S "]}}",
     NVFP4_ERR_UNSUPPORTED, {"input_tensors", "NVFP4 variant"}},
    {"{\"quant_method\":\"quark\"," EXPORT ",\"global_quant_config\":{\"weight\":[" FP4_W
     ",{\"dtype\":\"fp8_e5m3\",\"qscheme\":\"per_tensor\",\"is_dynamic\":false}]}}",
     NVFP4_ERR_UNSUPPORTED, {"E5M3"}},
    {"{\"quant_method\":\"quark\"," EXPORT ",\"global_quant_config\":{\"weight\":"
     "{\"dtype\":\"uint4\",\"qscheme\":\"per_group\",\"group_size\":128}}}",
     NVFP4_ERR_UNSUPPORTED, {"INT4", "group_size=128"}},
    {"{\"quant_method\":\"quark\"," EXPORT ",\"global_quant_config\":[1]}", NVFP4_ERR_TYPE,
     {"global_quant_config", "object"}},
    {"{\"quant_method\":\"quark\"," EXPORT ",\"exclude\":\"lm_head\"}", NVFP4_ERR_TYPE,
     {"exclude", "list"}},
    {"{\"quant_method\":\"quark\"," EXPORT ",\"exclude\":[\"lm_head\",3]}", NVFP4_ERR_TYPE,
     {"exclude", "entry 1"}},
    {"{\"quant_method\":\"quark\"," EXPORT ",\"layer_quant_config\":[]}", NVFP4_ERR_TYPE,
     {"layer_quant_config", "object"}},
    {"{\"quant_method\":\"quark\"," EXPORT ",\"layer_type_quant_config\":3}", NVFP4_ERR_TYPE,
     {"layer_type_quant_config", "object"}},
};


/* ModelOpt and compressed-tensors configs resolve the way vLLM decides
 * (docs/DIALECTS.md); refusals name the layer and what was found. */
#define CT_NVFP4_W "{\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\"," \
                   "\"group_size\":16,\"symmetric\":true,\"dynamic\":false}"
#define CT_NVFP4_A "{\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\"," \
                   "\"group_size\":16,\"symmetric\":true,\"dynamic\":\"local\"}"
#define CT_FP8_W "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\",\"dynamic\":false}"
#define CT_INT4_W "{\"num_bits\":4,\"type\":\"int\",\"strategy\":\"group\",\"group_size\":128}"

static void resolve_fails(const nvfp4_qconfig *q, const char *layer, nvfp4_status want,
                          const char *w1, const char *w2)
{
    nvfp4_scheme s;
    nvfp4_error err;
    nvfp4_status st = nvfp4_qconfig_resolve(q, layer, &s, &err);

    ck_assert_msg(st == want, "%s: status %s (%s)", layer, nvfp4_strerror(st), err.text);
    assert_contains(err.text, layer);
    if (w1)
        assert_contains(err.text, w1);
    if (w2)
        assert_contains(err.text, w2);
}

START_TEST(test_qconfig_dialects)
{
    nvfp4_config *cfg;
    nvfp4_qconfig *q;
    nvfp4_error err;

    make_tmpdir();
    /* ModelOpt, flat form in config.json */
    q = qc_from("{\"quant_method\":\"modelopt\",\"quant_algo\":\"NVFP4\",\"group_size\":16,"
                "\"exclude_modules\":[\"lm_head\",\"model.layers.1.self_attn*\","
                "\"model.layers.0.mlp\",\"*.k_proj\"],\"kv_cache_scheme\":\"FP8\","
                "\"producer\":{\"name\":\"modelopt\",\"version\":\"0.47.0\"}}", &cfg, &err);
    ck_assert_msg(q != NULL, "%s", err.text);
    ck_assert_int_eq(nvfp4_qconfig_dialect(q), NVFP4_DIALECT_MODELOPT);
    ck_assert_str_eq(nvfp4_dialect_name(nvfp4_qconfig_dialect(q)), "modelopt");
    ck_assert_str_eq(nvfp4_qconfig_producer(q), "modelopt 0.47.0");
    ck_assert_str_eq(nvfp4_qconfig_kv_cache(q), "FP8");
    ck_assert_int_eq(resolve_ok(q, "model.layers.0.self_attn.q_proj"), NVFP4_SCHEME_W4A4);
    ck_assert_int_eq(resolve_ok(q, "model.layers.0.self_attn.k_proj"), NVFP4_SCHEME_NONE);
    ck_assert_int_eq(resolve_ok(q, "model.layers.1.self_attn.o_proj"), NVFP4_SCHEME_NONE);
    ck_assert_int_eq(resolve_ok(q, "model.layers.0.mlp.up_proj"), NVFP4_SCHEME_NONE);
    ck_assert_int_eq(resolve_ok(q, "model.layers.1.mlp.up_proj"), NVFP4_SCHEME_W4A4);
    ck_assert_int_eq(resolve_ok(q, "lm_head"), NVFP4_SCHEME_NONE);
    nvfp4_qconfig_free(q);
    nvfp4_config_free(cfg);

    /* ModelOpt weight-only, and per-layer MIXED_PRECISION */
    q = qc_from("{\"quant_method\":\"modelopt\",\"quant_algo\":\"W4A16_NVFP4\"}", &cfg, &err);
    ck_assert_msg(q != NULL, "%s", err.text);
    ck_assert_int_eq(resolve_ok(q, "model.layers.0.mlp.up_proj"), NVFP4_SCHEME_W4A16);
    nvfp4_qconfig_free(q);
    nvfp4_config_free(cfg);
    q = qc_from("{\"quant_method\":\"modelopt\",\"quant_algo\":\"MIXED_PRECISION\","
                "\"quantized_layers\":{\"model.layers.0.mlp.up_proj\":{\"quant_algo\":\"NVFP4\"},"
                "\"model.layers.0.mlp.down_proj\":{\"quant_algo\":\"FP8\"}}}", &cfg, &err);
    ck_assert_msg(q != NULL, "%s", err.text);
    ck_assert_int_eq(resolve_ok(q, "model.layers.0.mlp.up_proj"), NVFP4_SCHEME_W4A4);
    ck_assert_int_eq(resolve_ok(q, "model.layers.0.mlp.gate_proj"), NVFP4_SCHEME_NONE);
    resolve_fails(q, "model.layers.0.mlp.down_proj", NVFP4_ERR_UNSUPPORTED, "\"FP8\" (FP8)",
                  "supported");
    nvfp4_qconfig_free(q);
    nvfp4_config_free(cfg);

    /* ModelOpt's hf_quant_config.json when config.json has no quantization_config */
    write_text(tmppath("hf_quant_config.json"),
               "{\"producer\":{\"name\":\"modelopt\",\"version\":\"0.47.0\"},\"quantization\":"
               "{\"quant_algo\":\"NVFP4\",\"kv_cache_quant_algo\":\"FP8\",\"group_size\":16,"
               "\"exclude_modules\":[\"lm_head\"]}}");
    write_text(tmppath("config.json"), "{\"model_type\":\"llama\"}");
    cfg = nvfp4_config_load(tmppath("config.json"), &err);
    ck_assert_msg(cfg != NULL, "%s", err.text);
    q = nvfp4_qconfig_parse(cfg, &err);
    ck_assert_msg(q != NULL, "%s", err.text);
    ck_assert_int_eq(nvfp4_qconfig_dialect(q), NVFP4_DIALECT_MODELOPT);
    ck_assert_str_eq(nvfp4_qconfig_producer(q), "modelopt 0.47.0");
    ck_assert_str_eq(nvfp4_qconfig_kv_cache(q), "FP8");
    ck_assert_int_eq(resolve_ok(q, "model.layers.0.mlp.up_proj"), NVFP4_SCHEME_W4A4);
    ck_assert_int_eq(resolve_ok(q, "lm_head"), NVFP4_SCHEME_NONE);
    nvfp4_qconfig_free(q);
    nvfp4_config_free(cfg);
    write_text(tmppath("hf_quant_config.json"), "{\"quantization\":[]}");
    cfg = nvfp4_config_load(tmppath("config.json"), &err);
    ck_assert_ptr_null(nvfp4_qconfig_parse(cfg, &err));
    assert_contains(err.text, "hf_quant_config.json");
    nvfp4_config_free(cfg);
    unlink(tmppath("hf_quant_config.json"));

    /* compressed-tensors: ignore first, then exact name > regex > class name */
    q = qc_from("{\"quant_method\":\"compressed-tensors\",\"format\":\"nvfp4-pack-quantized\","
                "\"quantization_status\":\"compressed\",\"version\":\"0.19.0\","
                "\"ignore\":[\"lm_head\",\"re:.*layers\\\\.1\\\\.self_attn\\\\.[kv]_proj$\"],"
                "\"config_groups\":{"
                "\"a\":{\"targets\":[\"Linear\"],\"weights\":" CT_NVFP4_W ",\"input_activations\":"
                CT_NVFP4_A "},"
                "\"b\":{\"targets\":[\"re:.*down_proj$\"],\"weights\":" CT_NVFP4_W
                ",\"input_activations\":null},"
                "\"c\":{\"targets\":[\"model.layers.1.mlp.down_proj\"],\"weights\":" CT_FP8_W "},"
                "\"d\":{\"targets\":[\"re:.*o_proj\"],\"weights\":" CT_INT4_W "}}}", &cfg, &err);
    ck_assert_msg(q != NULL, "%s", err.text);
    ck_assert_int_eq(nvfp4_qconfig_dialect(q), NVFP4_DIALECT_COMPRESSED_TENSORS);
    ck_assert_str_eq(nvfp4_qconfig_producer(q), "compressed-tensors 0.19.0");
    ck_assert_str_eq(nvfp4_qconfig_kv_cache(q), "");
    ck_assert_int_eq(resolve_ok(q, "model.layers.0.self_attn.k_proj"), NVFP4_SCHEME_W4A4);
    ck_assert_int_eq(resolve_ok(q, "model.layers.1.self_attn.k_proj"), NVFP4_SCHEME_NONE);
    ck_assert_int_eq(resolve_ok(q, "model.layers.1.self_attn.q_proj"), NVFP4_SCHEME_W4A4);
    ck_assert_int_eq(resolve_ok(q, "model.layers.0.mlp.down_proj"), NVFP4_SCHEME_W4A16);
    ck_assert_int_eq(resolve_ok(q, "lm_head"), NVFP4_SCHEME_NONE);
    resolve_fails(q, "model.layers.1.mlp.down_proj", NVFP4_ERR_UNSUPPORTED, "FP8",
                  "config_groups.c.weights");
    resolve_fails(q, "model.layers.0.self_attn.o_proj", NVFP4_ERR_UNSUPPORTED, "INT4",
                  "group_size=128");
    nvfp4_qconfig_free(q);
    nvfp4_config_free(cfg);

    /* NVFP4 scheme in a format other than nvfp4-pack-quantized; MXFP4 */
    q = qc_from("{\"quant_method\":\"compressed-tensors\",\"format\":\"float-quantized\","
                "\"config_groups\":{\"a\":{\"targets\":[\"Linear\"],\"weights\":" CT_NVFP4_W
                "},\"m\":{\"targets\":[\"re:.*gate_proj\"],\"weights\":{\"num_bits\":4,"
                "\"type\":\"float\",\"strategy\":\"group\",\"group_size\":32}}}}", &cfg, &err);
    ck_assert_msg(q != NULL, "%s", err.text);
    resolve_fails(q, "model.layers.0.mlp.up_proj", NVFP4_ERR_UNSUPPORTED, "float-quantized",
                  "nvfp4-pack-quantized");
    resolve_fails(q, "model.layers.0.mlp.gate_proj", NVFP4_ERR_UNSUPPORTED, "MXFP4", NULL);
    nvfp4_qconfig_free(q);
    nvfp4_config_free(cfg);
}
END_TEST

START_TEST(test_qconfig_rejections)
{
    nvfp4_error err;
    nvfp4_config *cfg;
    nvfp4_qconfig *q;

    make_tmpdir();
    for (size_t i = 0; i < sizeof(bad_qconfigs) / sizeof(bad_qconfigs[0]); i++) {
        q = qc_from(bad_qconfigs[i].qc, &cfg, &err);
        ck_assert_msg(q == NULL, "case %zu was accepted", i);
        ck_assert_msg(err.status == bad_qconfigs[i].status, "case %zu: status %s: %s", i,
                      nvfp4_strerror(err.status), err.text);
        assert_contains(err.text, "config.json");
        for (int w = 0; w < 3 && bad_qconfigs[i].words[w]; w++)
            assert_contains(err.text, bad_qconfigs[i].words[w]);
        nvfp4_config_free(cfg);
    }
}
END_TEST

/* ---- tiny safetensors files for the Linear checks ------------------------ */

typedef struct {
    const char *name;
    const char *dtype;
    int ndim;
    int64_t shape[2];
    size_t nbytes;
    unsigned char data[512];
} ttensor;

/* Writes a safetensors file of COUNT tensors (data back to back). */
static void write_safetensors(const char *path, const ttensor *t, size_t count)
{
    json_t *h = json_object();
    size_t off = 0, hlen;
    char *hs;
    uint64_t le;
    FILE *f;

    for (size_t i = 0; i < count; i++) {
        json_t *e = json_object(), *shape = json_array(), *offs = json_array();
        for (int d = 0; d < t[i].ndim; d++)
            json_array_append_new(shape, json_integer(t[i].shape[d]));
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + t[i].nbytes)));
        off += t[i].nbytes;
        json_object_set_new(e, "dtype", json_string(t[i].dtype));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", offs);
        json_object_set_new(h, t[i].name, e);
    }
    hs = json_dumps(h, JSON_COMPACT);
    hlen = strlen(hs);
    f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    le = (uint64_t)hlen; /* little-endian host */
    fwrite(&le, 8, 1, f);
    fwrite(hs, 1, hlen, f);
    for (size_t i = 0; i < count; i++)
        fwrite(t[i].data, 1, t[i].nbytes, f);
    fclose(f);
    free(hs);
    json_decref(h);
}

enum { T_W, T_S, T_G, T_IN2, T_IN, T_B, T_COUNT };
enum { LN = 3, LK = 32 }; /* odd N on purpose (§8) */

typedef struct {
    ttensor t[T_COUNT];
    int present[T_COUNT];
} tlayer;

static void set_f32(ttensor *t, float v)
{
    t->dtype = "F32";
    t->ndim = 0;
    t->nbytes = 4;
    memcpy(t->data, &v, 4);
}

/* A valid W4A4 layer "L" with N = 3, K = 32. */
static void layer_default(tlayer *L)
{
    memset(L, 0, sizeof(*L));
    L->t[T_W] = (ttensor){"L.weight", "U8", 2, {LN, LK / 2}, LN * LK / 2, {0}};
    for (int i = 0; i < LN * LK / 2; i++)
        L->t[T_W].data[i] = (unsigned char)rnd();
    L->t[T_S] = (ttensor){"L.weight_scale", "F8_E4M3", 2, {LN, LK / 16}, LN * LK / 16, {0}};
    for (int i = 0; i < LN * LK / 16; i++)
        L->t[T_S].data[i] = random_scale();
    L->t[T_S].data[1] = 0x00; /* zero block scales are legal (§8) */
    L->t[T_S].data[2] = 0x80; /* and so is -0 */
    L->t[T_G].name = "L.weight_scale_2";
    set_f32(&L->t[T_G], 0.00123f);
    L->t[T_IN2].name = "L.input_scale_2";
    set_f32(&L->t[T_IN2], 0.0031f);
    L->t[T_IN].name = "L.input_scale";
    set_f32(&L->t[T_IN], 0.5f);
    L->t[T_B] = (ttensor){"L.bias", "F32", 1, {LN}, LN * 4, {0}};
    for (int i = 0; i < LN; i++) {
        float v = (float)i - 1.5f;
        memcpy(L->t[T_B].data + 4 * i, &v, 4);
    }
    for (int i = 0; i < T_COUNT; i++)
        L->present[i] = i != T_IN && i != T_B;
}

static nvfp4_checkpoint *layer_open(const tlayer *L)
{
    ttensor t[T_COUNT];
    size_t n = 0;
    nvfp4_error err;
    nvfp4_checkpoint *ck;

    for (int i = 0; i < T_COUNT; i++)
        if (L->present[i])
            t[n++] = L->t[i];
    write_safetensors(tmppath("model.safetensors"), t, n);
    ck = nvfp4_checkpoint_open(tmppath("model.safetensors"), &err);
    ck_assert_msg(ck != NULL, "%s", err.text);
    return ck;
}

/* Load L and expect STATUS with the given words in the message. */
static void expect_load_error(const tlayer *L, nvfp4_scheme scheme, int64_t n, int64_t k,
                              nvfp4_status status, const char *w1, const char *w2,
                              const char *w3)
{
    nvfp4_checkpoint *ck = layer_open(L);
    nvfp4_linear lin;
    nvfp4_error err;
    nvfp4_status st = nvfp4_linear_load(ck, "L", scheme, n, k, &lin, &err);

    ck_assert_msg(st == status, "got %s (%s), expected %s", nvfp4_strerror(st),
                  st ? err.text : "", nvfp4_strerror(status));
    if (w1)
        assert_contains(err.text, w1);
    if (w2)
        assert_contains(err.text, w2);
    if (w3)
        assert_contains(err.text, w3);
    ck_assert_ptr_null(lin.weight);
    nvfp4_linear_release(&lin);
    nvfp4_checkpoint_free(ck);
}

START_TEST(test_linear_load_valid)
{
    tlayer L;
    nvfp4_checkpoint *ck;
    nvfp4_linear lin;
    nvfp4_error err;
    float out[LN * LK];

    make_tmpdir();
    layer_default(&L);
    L.present[T_B] = 1;
    ck = layer_open(&L);
    ck_assert_msg(!nvfp4_linear_load(ck, "L", NVFP4_SCHEME_W4A4, LN, LK, &lin, &err), "%s",
                  err.text);
    ck_assert_int_eq(lin.n, LN);
    ck_assert_int_eq(lin.k, LK);
    ck_assert_str_eq(lin.prefix, "L");
    ck_assert(lin.weight_scale_2 == 0.00123f);
    ck_assert(lin.input_scale == 0.0031f); /* input_scale_2 preferred */
    ck_assert_ptr_nonnull(lin.bias);
    ck_assert_ptr_null(lin.dense);
    ck_assert_msg(!nvfp4_linear_dequant(&lin, out, &err), "%s", err.text);
    for (int r = 0; r < LN; r++)
        for (int i = 0; i < LK; i++) {
            float want = dequant_ref(L.t[T_W].data[(r * LK + i) / 2], i & 1,
                                     L.t[T_S].data[r * (LK / 16) + i / 16], 0.00123f);
            ck_assert(same_value(out[r * LK + i], want));
        }
    for (int i = 16; i < 48; i++) /* blocks with scale 0x00 and 0x80 */
        ck_assert(out[i] == 0.0f);
    nvfp4_linear_release(&lin);
    nvfp4_linear_release(&lin); /* twice is harmless */
    nvfp4_linear_release(NULL);
    /* -1: shape from the tensors */
    ck_assert(!nvfp4_linear_load(ck, "L", NVFP4_SCHEME_W4A4, -1, -1, &lin, &err));
    ck_assert_int_eq(lin.n, LN);
    ck_assert_int_eq(lin.k, LK);
    nvfp4_checkpoint_free(ck);

    /* input_scale instead of input_scale_2 (file-to-file exports, §2) */
    layer_default(&L);
    L.present[T_IN2] = 0;
    L.present[T_IN] = 1;
    ck = layer_open(&L);
    ck_assert(!nvfp4_linear_load(ck, "L", NVFP4_SCHEME_W4A4, LN, LK, &lin, &err));
    ck_assert(lin.input_scale == 0.5f);
    nvfp4_checkpoint_free(ck);

    /* W4A16 needs no input scale; BF16 [1] global scale is accepted */
    layer_default(&L);
    L.present[T_IN2] = 0;
    L.t[T_G].dtype = "BF16";
    L.t[T_G].ndim = 1;
    L.t[T_G].shape[0] = 1;
    L.t[T_G].nbytes = 2;
    L.t[T_G].data[0] = 0x20; /* bf16 0x3A20 = 2^-11 * 1.25 */
    L.t[T_G].data[1] = 0x3A;
    ck = layer_open(&L);
    ck_assert_msg(!nvfp4_linear_load(ck, "L", NVFP4_SCHEME_W4A16, LN, LK, &lin, &err), "%s",
                  err.text);
    ck_assert(lin.weight_scale_2 == (float)ldexp(1.25, -11));
    ck_assert(lin.input_scale == 0.0f);
    nvfp4_checkpoint_free(ck);
}
END_TEST

/* nvfp4_linear_validate(): the invariants §2/§8 state, on hand-made views
 * (no checkpoint), each refusal naming the layer and what was expected. */
static void expect_invalid(const nvfp4_linear *lin, nvfp4_status st, const char *a,
                           const char *b)
{
    nvfp4_error err;

    memset(&err, 0, sizeof(err));
    ck_assert_int_eq(nvfp4_linear_validate(lin, &err), st);
    ck_assert_msg(strstr(err.text, lin->prefix), "%s", err.text);
    ck_assert_msg(strstr(err.text, a), "want \"%s\": %s", a, err.text);
    if (b)
        ck_assert_msg(strstr(err.text, b), "want \"%s\": %s", b, err.text);
}

START_TEST(test_linear_validate)
{
    uint8_t w[4 * 16], s[4 * 2];
    nvfp4_linear good, lin;
    nvfp4_error err;

    memset(w, 0x21, sizeof(w));
    memset(s, 0x38, sizeof(s)); /* 1.0 */
    s[3] = 0x00;                /* zero and -0 block scales are legal (§8) */
    s[4] = 0x80;
    memset(&good, 0, sizeof(good));
    strcpy(good.prefix, "layers.3.mlp.up_proj");
    good.scheme = NVFP4_SCHEME_W4A4;
    good.n = 4;
    good.k = 32;
    good.weight = w;
    good.scales = s;
    good.weight_scale_2 = 0.002f;
    good.input_scale = 0.01f;
    ck_assert_msg(nvfp4_linear_validate(&good, &err) == NVFP4_OK, "%s", err.text);
    lin = good;
    lin.input_gs = 448.0f; /* compressed-tensors: the divisor as stored */
    ck_assert_msg(nvfp4_linear_validate(&lin, &err) == NVFP4_OK, "%s", err.text);
    lin = good;
    lin.scheme = NVFP4_SCHEME_W4A16;
    lin.input_scale = 0.0f;
    ck_assert_msg(nvfp4_linear_validate(&lin, &err) == NVFP4_OK, "%s", err.text);

    lin = good;
    lin.k = 24;
    expect_invalid(&lin, NVFP4_ERR_BAD_SHAPE, "k % 16 == 0", "24");
    lin = good;
    lin.n = 0;
    expect_invalid(&lin, NVFP4_ERR_BAD_SHAPE, "n > 0", NULL);
    lin = good;
    lin.scales = NULL;
    expect_invalid(&lin, NVFP4_ERR_INVALID, "weight_scale", NULL);
    lin = good;
    lin.scheme = (nvfp4_scheme)9;
    expect_invalid(&lin, NVFP4_ERR_INVALID, "unknown scheme 9", NULL);
    /* §8: NaN and negative non-zero block-scale bytes, with their place */
    s[5] = 0xFF; /* row 2, block 1 */
    expect_invalid(&good, NVFP4_ERR_INVALID, "row 2, block 1 is 0xFF (NaN)", NULL);
    s[5] = 0x81;
    expect_invalid(&good, NVFP4_ERR_INVALID, "row 2, block 1 is 0x81 (negative)", NULL);
    s[5] = 0x38;
    /* §8: zero, NaN, infinite and overflowing global scales */
    lin = good;
    lin.weight_scale_2 = 0.0f;
    expect_invalid(&lin, NVFP4_ERR_INVALID, "weight_scale_2 must be finite and > 0", NULL);
    lin.weight_scale_2 = NAN;
    expect_invalid(&lin, NVFP4_ERR_INVALID, "weight_scale_2 must be finite and > 0", NULL);
    lin.weight_scale_2 = 1e36f; /* 6 * 448 * 1e36 > FLT_MAX */
    expect_invalid(&lin, NVFP4_ERR_INVALID, "overflows float32", NULL);
    lin = good;
    lin.input_scale = -1.0f;
    expect_invalid(&lin, NVFP4_ERR_INVALID, "W4A4 input scale must be finite and > 0", NULL);
    lin.input_scale = INFINITY;
    expect_invalid(&lin, NVFP4_ERR_INVALID, "W4A4 input scale must be finite and > 0", NULL);
    lin.input_scale = 1e-39f; /* its reciprocal, §5's gs, is infinite */
    expect_invalid(&lin, NVFP4_ERR_INVALID, "reciprocal", "overflows");
    lin.input_scale = 1e-39f;
    lin.input_gs = 1e38f; /* a stored gs needs no reciprocal */
    ck_assert_msg(nvfp4_linear_validate(&lin, &err) == NVFP4_OK, "%s", err.text);
    lin.input_gs = -2.0f;
    expect_invalid(&lin, NVFP4_ERR_INVALID, "input_gs", "found -2");
    ck_assert_int_eq(nvfp4_linear_validate(NULL, &err), NVFP4_ERR_INVALID);

    /* the per-tensor scales of every dialect (Quark, ModelOpt, compressed-tensors) */
    ck_assert(nvfp4_linear_is_scale_tensor("model.layers.0.mlp.up_proj.weight_scale_2"));
    ck_assert(nvfp4_linear_is_scale_tensor("a.input_scale"));
    ck_assert(nvfp4_linear_is_scale_tensor("a.input_scale_2"));
    ck_assert(nvfp4_linear_is_scale_tensor("a.weight_global_scale"));
    ck_assert(nvfp4_linear_is_scale_tensor("a.input_global_scale"));
    ck_assert(!nvfp4_linear_is_scale_tensor("a.weight_scale")); /* block scales: F8 */
    ck_assert(!nvfp4_linear_is_scale_tensor("a.weight"));
    ck_assert(!nvfp4_linear_is_scale_tensor("input_scale")); /* no layer */
    ck_assert(!nvfp4_linear_is_scale_tensor(NULL));
}
END_TEST

START_TEST(test_linear_load_dense)
{
    ttensor t[2] = {{"D.weight", "BF16", 2, {2, 3}, 12, {0}}, {"D.bias", "F16", 1, {2}, 4, {0}}};
    /* bf16 1, -2, 0.5, 3, 0, -0.25 ; f16 bias 1, -1 */
    static const uint16_t w[6] = {0x3F80, 0xC000, 0x3F00, 0x4040, 0x0000, 0xBE80};
    static const uint16_t b[2] = {0x3C00, 0xBC00};
    static const float want[6] = {1, -2, 0.5f, 3, 0, -0.25f};
    nvfp4_checkpoint *ck;
    nvfp4_linear lin;
    nvfp4_error err;
    float out[6], v;

    make_tmpdir();
    memcpy(t[0].data, w, 12);
    memcpy(t[1].data, b, 4);
    write_safetensors(tmppath("d.safetensors"), t, 2);
    ck = nvfp4_checkpoint_open(tmppath("d.safetensors"), &err);
    ck_assert_ptr_nonnull(ck);
    ck_assert_msg(!nvfp4_linear_load(ck, "D", NVFP4_SCHEME_NONE, 2, 3, &lin, &err), "%s",
                  err.text);
    ck_assert_ptr_nonnull(lin.dense);
    ck_assert_ptr_null(lin.weight);
    ck_assert(!nvfp4_linear_dequant(&lin, out, &err));
    for (int i = 0; i < 6; i++)
        ck_assert(out[i] == want[i]);
    ck_assert_int_eq(nvfp4_quant_read_float(lin.bias, 1, &v), 0);
    ck_assert(v == -1.0f);
    ck_assert_int_eq(nvfp4_quant_read_float(lin.bias, 2, &v), -1); /* out of range */
    /* wrong expected shape */
    ck_assert_int_eq(nvfp4_linear_load(ck, "D", NVFP4_SCHEME_NONE, 3, 3, &lin, &err),
                     NVFP4_ERR_BAD_SHAPE);
    assert_contains(err.text, "D.weight");
    assert_contains(err.text, "expected [3, 3]");
    nvfp4_checkpoint_free(ck);
}
END_TEST

START_TEST(test_linear_load_rejections)
{
    tlayer L;
    float bad[] = {0.0f, -0.5f, NAN, INFINITY};
    const char *bad_text[] = {"scale is 0", "scale is -0.5", "scale is nan", "scale is inf"};
    uint8_t bad_bytes[] = {0x7F, 0xFF, 0x81, 0xB8};

    make_tmpdir();

    /* a missing weight / scale names the tensor */
    layer_default(&L);
    L.present[T_W] = 0;
    expect_load_error(&L, NVFP4_SCHEME_W4A4, LN, LK, NVFP4_ERR_NOT_FOUND, "L.weight",
                      "missing", NULL);
    layer_default(&L);
    L.present[T_S] = 0;
    expect_load_error(&L, NVFP4_SCHEME_W4A4, LN, LK, NVFP4_ERR_NOT_FOUND, "L.weight_scale",
                      "missing", NULL);
    layer_default(&L);
    L.present[T_G] = 0;
    expect_load_error(&L, NVFP4_SCHEME_W4A16, LN, LK, NVFP4_ERR_NOT_FOUND,
                      "L.weight_scale_2", "missing", NULL);
    layer_default(&L);
    L.present[T_IN2] = 0;
    expect_load_error(&L, NVFP4_SCHEME_W4A4, LN, LK, NVFP4_ERR_NOT_FOUND, "input_scale_2",
                      "L.input_scale", NULL);

    /* dtypes */
    layer_default(&L);
    L.t[T_W].dtype = "I8";
    expect_load_error(&L, NVFP4_SCHEME_W4A4, LN, LK, NVFP4_ERR_BAD_DTYPE, "L.weight",
                      "dtype is I8", "expected U8");
    layer_default(&L);
    L.t[T_S].dtype = "U8";
    expect_load_error(&L, NVFP4_SCHEME_W4A4, LN, LK, NVFP4_ERR_BAD_DTYPE, "L.weight_scale",
                      "dtype is U8", "F8_E4M3");
    layer_default(&L);
    L.t[T_G].dtype = "F16";
    L.t[T_G].nbytes = 2;
    expect_load_error(&L, NVFP4_SCHEME_W4A4, LN, LK, NVFP4_ERR_BAD_DTYPE,
                      "L.weight_scale_2", "dtype is F16", "F32");
    layer_default(&L);
    expect_load_error(&L, NVFP4_SCHEME_NONE, LN, LK, NVFP4_ERR_BAD_DTYPE, "L.weight",
                      "U8 with a weight_scale", "unquantized");

    /* shapes: disagreement with the model config, K % 16, scale shapes */
    layer_default(&L);
    expect_load_error(&L, NVFP4_SCHEME_W4A4, 4, LK, NVFP4_ERR_BAD_SHAPE, "L.weight",
                      "shape is [3, 16]", "expected [4, 16]");
    layer_default(&L);
    expect_load_error(&L, NVFP4_SCHEME_W4A4, LN, 64, NVFP4_ERR_BAD_SHAPE, "L.weight",
                      "expected [3, 32]", NULL);
    layer_default(&L);
    L.t[T_W].shape[1] = 4; /* K = 8 */
    L.t[T_W].nbytes = LN * 4;
    L.t[T_S].shape[1] = 1;
    L.t[T_S].nbytes = LN;
    expect_load_error(&L, NVFP4_SCHEME_W4A4, -1, -1, NVFP4_ERR_BAD_SHAPE, "L.weight",
                      "K = 8", "multiple of 16");
    layer_default(&L);
    L.t[T_S].shape[1] = 1;
    L.t[T_S].nbytes = LN;
    expect_load_error(&L, NVFP4_SCHEME_W4A4, -1, -1, NVFP4_ERR_BAD_SHAPE, "L.weight_scale",
                      "shape is [3, 1]", "expected [3, 2]");
    layer_default(&L);
    L.t[T_W].ndim = 1;
    L.t[T_W].shape[0] = LN * LK / 2;
    expect_load_error(&L, NVFP4_SCHEME_W4A4, -1, -1, NVFP4_ERR_BAD_SHAPE, "L.weight",
                      "expected 2 dimensions", NULL);
    layer_default(&L);
    L.t[T_G].ndim = 1;
    L.t[T_G].shape[0] = 2;
    L.t[T_G].nbytes = 8;
    expect_load_error(&L, NVFP4_SCHEME_W4A4, LN, LK, NVFP4_ERR_BAD_SHAPE,
                      "L.weight_scale_2", "shape is [2]", "scalar");
    layer_default(&L);
    L.present[T_B] = 1;
    L.t[T_B].shape[0] = 2;
    L.t[T_B].nbytes = 8;
    expect_load_error(&L, NVFP4_SCHEME_W4A4, LN, LK, NVFP4_ERR_BAD_SHAPE, "L.bias",
                      "expected [3]", NULL);
    layer_default(&L);
    L.present[T_B] = 1;
    L.t[T_B].dtype = "I32";
    expect_load_error(&L, NVFP4_SCHEME_W4A4, LN, LK, NVFP4_ERR_BAD_DTYPE, "L.bias",
                      "dtype is I32", NULL);

    /* zero, negative, NaN, infinite global and input scales (§8) */
    for (int i = 0; i < 4; i++) {
        layer_default(&L);
        set_f32(&L.t[T_G], bad[i]);
        expect_load_error(&L, NVFP4_SCHEME_W4A4, LN, LK, NVFP4_ERR_INVALID,
                          "L.weight_scale_2", bad_text[i], "finite value > 0");
        layer_default(&L);
        set_f32(&L.t[T_IN2], bad[i]);
        expect_load_error(&L, NVFP4_SCHEME_W4A4, LN, LK, NVFP4_ERR_INVALID,
                          "L.input_scale_2", bad_text[i], NULL);
    }

    /* an activation scale whose reciprocal (§5's gs) overflows */
    layer_default(&L);
    set_f32(&L.t[T_IN2], 1e-39f);
    expect_load_error(&L, NVFP4_SCHEME_W4A4, LN, LK, NVFP4_ERR_INVALID, "L.input_scale_2",
                      "reciprocal", "overflows");
    layer_default(&L);
    set_f32(&L.t[T_G], 1e-39f); /* fine as a weight multiplier */
    {
        nvfp4_checkpoint *ck = layer_open(&L);
        nvfp4_linear lin;
        nvfp4_error err;
        ck_assert_msg(!nvfp4_linear_load(ck, "L", NVFP4_SCHEME_W4A4, LN, LK, &lin, &err), "%s",
                      err.text);
        nvfp4_checkpoint_free(ck);
    }

    /* NaN and negative block-scale bytes, with their position */
    for (int i = 0; i < 4; i++) {
        layer_default(&L);
        L.t[T_S].data[5] = bad_bytes[i]; /* row 2, block 1 */
        char want[32];
        snprintf(want, sizeof(want), "byte 0x%02X", bad_bytes[i]);
        expect_load_error(&L, NVFP4_SCHEME_W4A4, LN, LK, NVFP4_ERR_INVALID, "L.weight_scale",
                          "block scale [2, 1]", want);
    }

    /* bad arguments */
    layer_default(&L);
    expect_load_error(&L, NVFP4_SCHEME_W4A4, 0, LK, NVFP4_ERR_INVALID, "not valid", NULL, NULL);
    expect_load_error(&L, (nvfp4_scheme)7, LN, LK, NVFP4_ERR_INVALID, "unknown scheme", NULL,
                      NULL);
    {
        char longname[300];
        nvfp4_checkpoint *ck = layer_open(&L);
        nvfp4_linear lin;
        nvfp4_error err;
        memset(longname, 'a', sizeof(longname) - 1);
        longname[sizeof(longname) - 1] = '\0';
        ck_assert_int_eq(nvfp4_linear_load(ck, longname, NVFP4_SCHEME_W4A4, -1, -1, &lin, &err),
                         NVFP4_ERR_INVALID);
        assert_contains(err.text, "299 bytes");
        ck_assert_int_eq(nvfp4_linear_load(ck, "nope", NVFP4_SCHEME_W4A4, -1, -1, &lin, &err),
                         NVFP4_ERR_NOT_FOUND);
        assert_contains(err.text, "nope.weight");
        nvfp4_checkpoint_free(ck);
    }
}
END_TEST

/* ---- fused shards (§4) ----------------------------------------------------- */

static void load_fixture_shards(const char *model, const char *layer, nvfp4_checkpoint **ck,
                                nvfp4_linear sh[3])
{
    static const char *const proj[3] = {"q_proj", "k_proj", "v_proj"};
    char path[256], prefix[256];
    nvfp4_error err;

    snprintf(path, sizeof(path), "models/%s", model);
    *ck = nvfp4_checkpoint_open(tdata(path), &err);
    ck_assert_msg(*ck != NULL, "%s", err.text);
    for (int i = 0; i < 3; i++) {
        snprintf(prefix, sizeof(prefix), "%s.self_attn.%s", layer, proj[i]);
        ck_assert_msg(!nvfp4_linear_load(*ck, prefix, NVFP4_SCHEME_W4A4, -1, -1, &sh[i], &err),
                      "%s", err.text);
    }
}

/* The scale_groups entry of reference.json for MEMBER. */
static json_t *scale_group(json_t *ref, const char *member)
{
    json_t *groups = json_object_get(ref, "scale_groups");
    for (size_t i = 0; i < json_array_size(groups); i++) {
        json_t *m = json_object_get(json_array_get(groups, i), "members");
        for (size_t j = 0; j < json_array_size(m); j++)
            if (!strcmp(json_string_value(json_array_get(m, j)), member))
                return json_array_get(groups, i);
    }
    return NULL;
}

START_TEST(test_fuse_shared_scales)
{
    nvfp4_checkpoint *ck;
    nvfp4_linear sh[3];
    nvfp4_error err;
    float in;
    json_t *ref = tload_json("models/llama/reference.json");
    json_t *g = scale_group(ref, "model.layers.1.self_attn.q_proj");

    ck_assert_ptr_nonnull(g);
    load_fixture_shards("llama", "model.layers.1", &ck, sh);
    ck_assert_msg(!nvfp4_linear_fuse_check("model.layers.1.self_attn.qkv_proj", sh, 3, 0, &in,
                                           &err),
                  "%s", err.text);
    /* the max of the shards' input scales, as the fixture's writer used it */
    ck_assert(in == (float)json_number_value(json_object_get(g, "input_scale_used")));
    for (int i = 0; i < 3; i++) {
        ck_assert_ptr_null(sh[i].owned_scales);
        nvfp4_linear_release(&sh[i]);
    }
    nvfp4_checkpoint_free(ck);
    json_decref(ref);
}
END_TEST

START_TEST(test_fuse_unshared_scales)
{
    nvfp4_checkpoint *ck;
    nvfp4_linear sh[3], orig[3];
    nvfp4_error err;
    float in, gmax = 0;
    char want[1024];
    json_t *ref = tload_json("models/llama_unshared/reference.json");
    json_t *g = scale_group(ref, "model.layers.1.self_attn.q_proj");

    ck_assert_ptr_nonnull(g);
    ck_assert(json_is_false(json_object_get(g, "weight_scale_2_equal")));
    load_fixture_shards("llama_unshared", "model.layers.1", &ck, sh);
    memcpy(orig, sh, sizeof(sh));
    /* default: the error names the layer, each shard and its scale */
    ck_assert_int_eq(nvfp4_linear_fuse_check("model.layers.1.self_attn.qkv_proj", sh, 3, 0,
                                             &in, &err),
                     NVFP4_ERR_SCALE_MISMATCH);
    assert_contains(err.text, "model.layers.1.self_attn.qkv_proj");
    for (int i = 0; i < 3; i++) {
        assert_contains(err.text, sh[i].prefix);
        snprintf(want, sizeof(want), "%.*s = %.9g", (int)sizeof(sh[i].prefix) - 1, sh[i].prefix,
                 (double)sh[i].weight_scale_2);
        assert_contains(err.text, want);
        ck_assert(sh[i].scales == orig[i].scales); /* untouched */
        if (sh[i].weight_scale_2 > gmax)
            gmax = sh[i].weight_scale_2;
    }

    /* opt-in: every shard on the largest scale, block scales re-rounded to
     * the nearest E4M3 of own/max times the old one (checked against the
     * exhaustive-search encoder) */
    ck_assert_msg(!nvfp4_linear_fuse_check("qkv", sh, 3, 1, &in, &err), "%s", err.text);
    ck_assert(in == (float)json_number_value(json_object_get(g, "input_scale_used")));
    for (int i = 0; i < 3; i++) {
        size_t nsc = (size_t)sh[i].n * (size_t)(sh[i].k / 16);
        float ratio = orig[i].weight_scale_2 / gmax;
        ck_assert(sh[i].weight_scale_2 == gmax);
        if (orig[i].weight_scale_2 == gmax) {
            ck_assert_ptr_null(sh[i].owned_scales);
            continue;
        }
        ck_assert_ptr_nonnull(sh[i].owned_scales);
        ck_assert(sh[i].scales == sh[i].owned_scales);
        for (size_t j = 0; j < nsc; j++) {
            double exact = e4m3_ref(orig[i].scales[j]) * (double)ratio;
            ck_assert_uint_eq(sh[i].scales[j] & 0x7F, e4m3_nearest(fabs((float)exact)));
        }
        nvfp4_linear_release(&sh[i]);
        ck_assert_ptr_null(sh[i].owned_scales);
    }
    nvfp4_checkpoint_free(ck);
    json_decref(ref);
}
END_TEST

START_TEST(test_fuse_bad_arguments)
{
    nvfp4_linear sh[2];
    nvfp4_error err;
    float in;

    memset(sh, 0, sizeof(sh));
    ck_assert_int_eq(nvfp4_linear_fuse_check("x", sh, 0, 0, &in, &err), NVFP4_ERR_INVALID);
    assert_contains(err.text, "no shards");
    strcpy(sh[0].prefix, "a");
    ck_assert_int_eq(nvfp4_linear_fuse_check("x", sh, 1, 0, &in, &err), NVFP4_ERR_INVALID);
    assert_contains(err.text, "shard a is not a loaded NVFP4 layer");
    {
        static const uint8_t w[8], s[1] = {0x38};
        for (int i = 0; i < 2; i++) {
            sh[i].scheme = NVFP4_SCHEME_W4A4;
            sh[i].n = 1;
            sh[i].k = 16;
            sh[i].weight = w;
            sh[i].scales = s;
            sh[i].weight_scale_2 = 1;
        }
        strcpy(sh[1].prefix, "b");
        sh[1].scheme = NVFP4_SCHEME_W4A16;
        ck_assert_int_eq(nvfp4_linear_fuse_check("x", sh, 2, 0, &in, &err), NVFP4_ERR_INVALID);
        assert_contains(err.text, "cannot be fused");
    }
}
END_TEST

/* ---- the real Quark exports ---------------------------------------------- */

/* Quark's quantizer (spec section 7) on the float weight it consumed for a
 * Linear outside any shared-scale group (gen_models.py saves it as
 * linear_orig_weight.f32): our global scale from its amax and our weight
 * quantizer must reproduce the exported weight, weight_scale and
 * weight_scale_2 bytes exactly.  No tolerance: both sides are the same
 * deterministic float32/RNE arithmetic, so any difference is a bug (or a
 * fixture that saved the wrong tensor). */
START_TEST(test_quant_weight_quark_export)
{
    json_t *ref = tload_json("models/llama/reference.json"), *lo;
    const char *prefix;
    nvfp4_checkpoint *ck;
    nvfp4_linear lin;
    nvfp4_error err;
    int64_t n, k;
    size_t len, bad_w = 0, bad_s = 0;
    float *w, amax = 0.0f, global;
    uint8_t *packed, *scales;

    lo = json_object_get(ref, "linear_orig");
    ck_assert_msg(lo != NULL, "models/llama/reference.json has no linear_orig");
    prefix = json_string_value(json_object_get(lo, "prefix"));
    n = tnum(json_object_get(lo, "N"));
    k = tnum(json_object_get(lo, "K"));
    w = tload_file("models/llama/linear_orig_weight.f32", &len);
    ck_assert_uint_eq(len, (size_t)(n * k * 4));
    for (int64_t i = 0; i < n * k; i++) {
        /* the tensor Quark consumed is bf16: the low 16 bits must be zero */
        ck_assert_msg((fbits(w[i]) & 0xFFFFu) == 0, "[%lld] %a is not a bf16 value", (long long)i,
                      (double)w[i]);
        amax = fmaxf(amax, fabsf(w[i]));
    }
    ck_assert(amax == (float)json_number_value(json_object_get(lo, "amax")));

    ck = nvfp4_checkpoint_open(tdata("models/llama"), &err);
    ck_assert_msg(ck != NULL, "%s", err.text);
    ck_assert_msg(!nvfp4_linear_load(ck, prefix, NVFP4_SCHEME_W4A4, n, k, &lin, &err), "%s",
                  err.text);

    global = nvfp4_quant_global_scale(amax);
    ck_assert_msg(fbits(global) == fbits(lin.weight_scale_2), "%s weight_scale_2: ours %a, Quark %a",
                  prefix, (double)global, (double)lin.weight_scale_2);
    packed = malloc((size_t)(n * k / 2));
    scales = malloc((size_t)(n * k / 16));
    nvfp4_quant_weight(w, (size_t)n, (size_t)k, global, packed, scales);
    for (int64_t i = 0; i < n * k / 16; i++)
        if (scales[i] != lin.scales[i] && bad_s++ < 5)
            fprintf(stderr, "%s weight_scale[%lld]: ours 0x%02x, Quark 0x%02x\n", prefix, (long long)i,
                    scales[i], lin.scales[i]);
    for (int64_t i = 0; i < n * k / 2; i++)
        if (packed[i] != lin.weight[i] && bad_w++ < 5)
            fprintf(stderr, "%s weight byte [%lld]: ours 0x%02x, Quark 0x%02x\n", prefix, (long long)i,
                    packed[i], lin.weight[i]);
    ck_assert_msg(bad_s == 0 && bad_w == 0, "%s: %zu of %lld block scales and %zu of %lld weight bytes "
                  "differ from Quark's export", prefix, bad_s, (long long)(n * k / 16), bad_w,
                  (long long)(n * k / 2));
    free(packed);
    free(scales);
    free(w);
    nvfp4_linear_release(&lin);
    nvfp4_checkpoint_free(ck);
    json_decref(ref);
}
END_TEST

static const char *const fixture_models[] = {"llama",     "llama_w4a16", "qwen3",
                                             "qwen3_moe", "qwen2_moe",   "mixtral"};

/* One Linear per model: our view and dequantization of the exported bytes
 * must equal PyTorch's dequantized weight bit for bit, and our §5 qdq of
 * the recorded input rows must equal the fixture's. */
START_TEST(test_models_linear)
{
    const char *model = fixture_models[_i];
    char rel[256];
    json_t *ref, *lj;
    nvfp4_checkpoint *ck;
    nvfp4_qconfig *qc;
    nvfp4_linear lin;
    nvfp4_error err;
    nvfp4_scheme scheme;
    const char *prefix;
    int64_t n, k, rows;
    size_t len;
    float *want, *got, *x, *xq, in_used;

    snprintf(rel, sizeof(rel), "models/%s/reference.json", model);
    ref = tload_json(rel);
    lj = json_object_get(ref, "linear");
    prefix = json_string_value(json_object_get(lj, "prefix"));
    n = tnum(json_object_get(lj, "N"));
    k = tnum(json_object_get(lj, "K"));
    rows = tnum(json_object_get(lj, "rows"));

    snprintf(rel, sizeof(rel), "models/%s", model);
    ck = nvfp4_checkpoint_open(tdata(rel), &err);
    ck_assert_msg(ck != NULL, "%s", err.text);
    qc = nvfp4_qconfig_parse(nvfp4_checkpoint_config(ck), &err);
    ck_assert_msg(qc != NULL, "%s", err.text);
    ck_assert(!nvfp4_qconfig_resolve(qc, prefix, &scheme, &err));
    ck_assert_int_eq(scheme, json_is_true(json_object_get(ref, "w4a16")) ? NVFP4_SCHEME_W4A16
                                                                         : NVFP4_SCHEME_W4A4);
    ck_assert_msg(!nvfp4_linear_load(ck, prefix, scheme, n, k, &lin, &err), "%s", err.text);
    ck_assert(lin.weight_scale_2 ==
              (float)json_number_value(json_object_get(lj, "weight_scale_2")));

    snprintf(rel, sizeof(rel), "models/%s/linear_weight.f32", model);
    want = tload_file(rel, &len);
    ck_assert_uint_eq(len, (size_t)(n * k * 4));
    got = malloc(len);
    ck_assert(!nvfp4_linear_dequant(&lin, got, &err));
    for (int64_t i = 0; i < n * k; i++)
        ck_assert_msg(same_value(got[i], want[i]), "%s %s [%lld]: %a vs torch %a", model, prefix,
                      (long long)i, (double)got[i], (double)want[i]);

    if (scheme == NVFP4_SCHEME_W4A4) {
        in_used = (float)json_number_value(json_object_get(lj, "input_scale_used"));
        snprintf(rel, sizeof(rel), "models/%s/linear_x.f32", model);
        x = tload_file(rel, &len);
        ck_assert_uint_eq(len, (size_t)(rows * k * 4));
        snprintf(rel, sizeof(rel), "models/%s/linear_xq.f32", model);
        xq = tload_file(rel, &len);
        for (int64_t r = 0; r < rows; r++) {
            nvfp4_quant_qdq_row(x + r * k, (size_t)k, in_used, x + r * k);
            for (int64_t i = 0; i < k; i++)
                ck_assert_msg(same_value(x[r * k + i], xq[r * k + i]), "%s row %lld col %lld",
                              model, (long long)r, (long long)i);
        }
        free(x);
        free(xq);
    }
    free(want);
    free(got);
    nvfp4_linear_release(&lin);
    nvfp4_qconfig_free(qc);
    nvfp4_checkpoint_free(ck);
    json_decref(ref);
}
END_TEST

/* Every quantized Linear of every model loads and validates under the
 * scheme its config resolves to. */
START_TEST(test_models_all_layers_load)
{
    const char *model = fixture_models[_i];
    char rel[128], prefix[512];
    nvfp4_checkpoint *ck;
    nvfp4_qconfig *qc;
    nvfp4_error err;
    size_t quantized = 0;
    json_t *ref;

    snprintf(rel, sizeof(rel), "models/%s", model);
    ck = nvfp4_checkpoint_open(tdata(rel), &err);
    ck_assert_msg(ck != NULL, "%s", err.text);
    qc = nvfp4_qconfig_parse(nvfp4_checkpoint_config(ck), &err);
    ck_assert_msg(qc != NULL, "%s", err.text);
    for (size_t i = 0; i < nvfp4_checkpoint_count(ck); i++) {
        const char *name = nvfp4_checkpoint_name(ck, i);
        size_t len = strlen(name);
        nvfp4_scheme s;
        nvfp4_linear lin;
        if (len < 13 || strcmp(name + len - 13, ".weight_scale") != 0)
            continue;
        snprintf(prefix, sizeof(prefix), "%.*s", (int)(len - 13), name);
        ck_assert_msg(!nvfp4_qconfig_resolve(qc, prefix, &s, &err), "%s", err.text);
        ck_assert_msg(s != NVFP4_SCHEME_NONE, "%s: config says unquantized", prefix);
        ck_assert_msg(!nvfp4_linear_load(ck, prefix, s, -1, -1, &lin, &err), "%s", err.text);
        quantized++;
    }
    snprintf(rel, sizeof(rel), "models/%s/reference.json", model);
    ref = tload_json(rel);
    if (json_object_get(ref, "quantized_prefixes"))
        ck_assert_uint_eq(quantized, (size_t)tnum(json_object_get(ref, "quantized_prefixes")));
    json_decref(ref);
    nvfp4_qconfig_free(qc);
    nvfp4_checkpoint_free(ck);
}
END_TEST

/* ---- the tool ------------------------------------------------------------ */

START_TEST(test_tool_dequant)
{
    char args[2048], *out;
    size_t len, len2;
    void *want, *got;
    const char *model = tdata("models/llama");

    make_tmpdir();
    snprintf(args, sizeof(args), "dequant %s model.layers.1.self_attn.q_proj --out %s", model,
             tmppath("w.f32"));
    ck_assert_int_eq(trun_tool(args, 1, &out), 0);
    free(out);
    want = tload_file("models/llama/linear_weight.f32", &len);
    {
        FILE *f = fopen(tmppath("w.f32"), "rb");
        ck_assert_ptr_nonnull(f);
        got = malloc(len + 1);
        len2 = fread(got, 1, len + 1, f);
        fclose(f);
    }
    ck_assert_uint_eq(len2, len);
    ck_assert(!memcmp(got, want, len));
    free(got);
    free(want);

    /* missing layer: exit 1 naming it */
    snprintf(args, sizeof(args), "dequant %s model.layers.9.self_attn.q_proj --out %s", model,
             tmppath("x.f32"));
    ck_assert_int_eq(trun_tool(args, 1, &out), 1);
    assert_contains(out, "model.layers.9.self_attn.q_proj.weight");
    free(out);
    ck_assert(access(tmppath("x.f32"), F_OK) != 0);
    /* usage errors: exit 2 */
    snprintf(args, sizeof(args), "dequant %s model.layers.1.self_attn.q_proj", model);
    ck_assert_int_eq(trun_tool(args, 1, &out), 2);
    assert_contains(out, "--out");
    free(out);
    ck_assert_int_eq(trun_tool("dequant", 1, &out), 2);
    free(out);
    snprintf(args, sizeof(args), "dequant %s a b c --out x", model);
    ck_assert_int_eq(trun_tool(args, 1, &out), 2);
    free(out);
    ck_assert_int_eq(trun_tool("dequant --bogus", 1, &out), 2);
    free(out);
    ck_assert_int_eq(trun_tool("dequant --help", 1, &out), 0);
    assert_contains(out, "Usage: nvfp4 dequant");
    free(out);
}
END_TEST

/* inspect's schemes section: the per-scheme counts against the number of
 * quantized prefixes the fixture writer counted in Quark's export. */
START_TEST(test_tool_inspect_schemes)
{
    const char *model = fixture_models[_i];
    char args[1024], rel[128], *out;
    json_t *got, *ref, *counts, *layers;
    json_error_t je;
    const char *want_scheme;
    int found_lm_head = 0;

    snprintf(rel, sizeof(rel), "models/%s/reference.json", model);
    ref = tload_json(rel);
    want_scheme = json_is_true(json_object_get(ref, "w4a16")) ? "w4a16" : "w4a4";
    snprintf(args, sizeof(args), "inspect --json %s/models/%s", TEST_DATA_DIR, model);
    ck_assert_int_eq(trun_tool(args, 1, &out), 0);
    got = json_loads(out, 0, &je);
    ck_assert_msg(got != NULL, "%s", je.text);
    counts = json_object_get(got, "scheme_counts");
    layers = json_object_get(got, "layers");
    ck_assert_int_eq(json_integer_value(json_object_get(counts, want_scheme)),
                     tnum(json_object_get(ref, "quantized_prefixes")));
    for (size_t i = 0; i < json_array_size(layers); i++) {
        json_t *o = json_array_get(layers, i);
        if (!strcmp(json_string_value(json_object_get(o, "name")), "lm_head")) {
            found_lm_head = 1; /* excluded by every fixture's config */
            ck_assert_str_eq(json_string_value(json_object_get(o, "scheme")), "none");
        }
    }
    ck_assert(found_lm_head);
    json_decref(got);
    free(out);
    snprintf(args, sizeof(args), "inspect %s/models/%s", TEST_DATA_DIR, model);
    ck_assert_int_eq(trun_tool(args, 1, &out), 0);
    snprintf(rel, sizeof(rel), "%s %lld", want_scheme,
             tnum(json_object_get(ref, "quantized_prefixes")));
    assert_contains(out, "scheme counts:");
    assert_contains(out, rel);
    free(out);
    json_decref(ref);
}
END_TEST


/* The ModelOpt / llm-compressor fixtures (gen_dialects.py): inspect names the
 * dialect and the producer's version, and every layer the producer stored
 * packed resolves to the fixture's scheme, every other one to none. */
static const char *const dialect_models[] = {"modelopt_nvfp4", "modelopt_w4a16", "ct_nvfp4",
                                             "ct_nvfp4a16", "ct_mixed", "modelopt_moe",
                                             "ct_moe", "ct_moe_a16", "modelopt_mixtral"};

START_TEST(test_tool_inspect_dialects)
{
    const char *model = dialect_models[_i];
    int ct = !strncmp(model, "ct_", 3), a16 = strstr(model, "a16") != NULL;
    char args[1024], rel[128], *out;
    json_t *got, *ref, *q, *layers;
    json_error_t je;
    const char *ver;
    long long nq = 0;

    snprintf(rel, sizeof(rel), "models/%s/reference.json", model);
    ref = tload_json(rel);
    ver = json_string_value(json_object_get(json_object_get(ref, "versions"),
                                            ct ? "compressed-tensors" : "nvidia-modelopt"));
    ck_assert_ptr_nonnull(ver);
    snprintf(args, sizeof(args), "inspect --json %s/models/%s", TEST_DATA_DIR, model);
    ck_assert_int_eq(trun_tool(args, 1, &out), 0);
    got = json_loads(out, 0, &je);
    ck_assert_msg(got != NULL, "%s", je.text);
    q = json_object_get(got, "quantization");
    ck_assert_str_eq(json_string_value(json_object_get(q, "dialect")),
                     json_string_value(json_object_get(ref, "dialect")));
    assert_contains(json_string_value(json_object_get(q, "producer")), ver);
    layers = json_object_get(got, "layers");
    for (size_t i = 0; i < json_array_size(layers); i++) {
        json_t *o = json_array_get(layers, i);
        const char *stored = json_string_value(json_object_get(o, "stored"));
        const char *scheme = json_string_value(json_object_get(o, "scheme"));
        if (!strcmp(stored, "nvfp4")) {
            ck_assert_str_eq(scheme, a16 ? "w4a16" : "w4a4");
            nq++;
        } else {
            ck_assert_msg(!strcmp(scheme, "none"), "%s: %s stored %s resolves to %s", model,
                          json_string_value(json_object_get(o, "name")), stored, scheme);
        }
    }
    ck_assert_int_eq(nq, tnum(json_object_get(ref, "quantized_prefixes")));
    json_decref(got);
    free(out);
    snprintf(args, sizeof(args), "inspect %s/models/%s", TEST_DATA_DIR, model);
    ck_assert_int_eq(trun_tool(args, 1, &out), 0);
    snprintf(rel, sizeof(rel), "dialect: %s (", ct ? "compressed-tensors" : "modelopt");
    assert_contains(out, rel);
    assert_contains(out, ver);
    free(out);
    json_decref(ref);
}
END_TEST

/* compressed-tensors' global scales are divisors: the weight multiplier is
 * 1.0f / weight_global_scale (vLLM, float32) and the activation gs handed to
 * the kernels (input_gs) is the file's input_global_scale bit for bit. */
START_TEST(test_ct_linear_scales)
{
    nvfp4_error err;
    nvfp4_checkpoint *ck = nvfp4_checkpoint_open(tdata("models/ct_nvfp4"), &err);
    int checked = 0;

    ck_assert_msg(ck != NULL, "%s", err.text);
    for (size_t i = 0; i < nvfp4_checkpoint_count(ck); i++) {
        const char *name = nvfp4_checkpoint_name(ck, i);
        size_t len = strlen(name);
        char prefix[256], tn[300];
        const nvfp4_tensor *wg, *ig;
        nvfp4_linear lin;
        float wgs, igs;

        if (len < 15 || strcmp(name + len - 14, ".weight_packed"))
            continue;
        snprintf(prefix, sizeof(prefix), "%.*s", (int)(len - 14), name);
        snprintf(tn, sizeof(tn), "%s.weight_global_scale", prefix);
        ck_assert_int_eq(nvfp4_checkpoint_get(ck, tn, &wg, &err), NVFP4_OK);
        snprintf(tn, sizeof(tn), "%s.input_global_scale", prefix);
        ck_assert_int_eq(nvfp4_checkpoint_get(ck, tn, &ig, &err), NVFP4_OK);
        ck_assert_int_eq(wg->dtype, NVFP4_DTYPE_F32);
        memcpy(&wgs, wg->data, 4);
        memcpy(&igs, ig->data, 4);
        ck_assert_msg(nvfp4_linear_load_dialect(ck, prefix, NVFP4_SCHEME_W4A4,
                                                NVFP4_DIALECT_COMPRESSED_TENSORS, -1, -1, &lin,
                                                &err) == NVFP4_OK,
                      "%s: %s", prefix, err.text);
        ck_assert(lin.weight_scale_2 == 1.0f / wgs);
        ck_assert(lin.input_gs == igs);
        /* input_scale is the multiplier nearest 1 / gs (float32 has no x with
         * 1.0f / x == 448, say); the kernels take input_gs itself */
        ck_assert_msg(fabsf(1.0f / lin.input_scale - igs) <= igs * 0x1p-22f,
                      "%s: 1/%.9g vs %.9g", prefix, (double)lin.input_scale, (double)igs);
        /* Quark's names are absent: loading it as Quark names what is missing */
        ck_assert_int_eq(nvfp4_linear_load(ck, prefix, NVFP4_SCHEME_W4A4, -1, -1, &lin, &err),
                         NVFP4_ERR_NOT_FOUND);
        assert_contains(err.text, "weight");
        /* a packed weight where the config says unquantized is refused */
        ck_assert_int_eq(nvfp4_linear_load_dialect(ck, prefix, NVFP4_SCHEME_NONE,
                                                   NVFP4_DIALECT_COMPRESSED_TENSORS, -1, -1,
                                                   &lin, &err),
                         NVFP4_ERR_BAD_DTYPE);
        assert_contains(err.text, "weight_packed");
        checked++;
    }
    ck_assert_int_eq(checked, 14);
    nvfp4_checkpoint_free(ck);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("quant");
    TCase *codec = tcase_create("codec"), *arith = tcase_create("arith"),
          *conf = tcase_create("qconfig"), *lin = tcase_create("linear"),
          *models = tcase_create("models");
    SRunner *sr;
    int nf;
    size_t nmodels = sizeof(fixture_models) / sizeof(fixture_models[0]);

    tcase_add_test(codec, test_e4m3_decode_all_codes);
    tcase_add_test(codec, test_e4m3_encode_torch);
    tcase_add_test(codec, test_bf16_f16_round_torch);
    tcase_add_test(codec, test_bf16_f16_decode_all);
    tcase_add_test(codec, test_e2m1_encode_table);
    tcase_add_test(codec, test_e2m1_decode);
    tcase_add_test(codec, test_pack_order);
    tcase_add_test(arith, test_dequant_row_reference);
    tcase_add_test(arith, test_act_qdq_torch);
    tcase_add_test(arith, test_global_scale);
    tcase_add_test(arith, test_quant_weight_reference);
    tcase_add_test(conf, test_qconfig_fixture_models);
    tcase_add_test(conf, test_qconfig_resolution_order);
    tcase_add_test(conf, test_qconfig_rejections);
    tcase_add_test(conf, test_qconfig_dialects);
    tcase_add_test(lin, test_linear_load_valid);
    tcase_add_test(lin, test_linear_validate);
    tcase_add_test(lin, test_linear_load_dense);
    tcase_add_test(lin, test_linear_load_rejections);
    tcase_add_test(lin, test_fuse_bad_arguments);
    tcase_add_test(models, test_quant_weight_quark_export);
    tcase_add_test(models, test_fuse_shared_scales);
    tcase_add_test(models, test_fuse_unshared_scales);
    tcase_add_loop_test(models, test_models_linear, 0, (int)nmodels);
    tcase_add_loop_test(models, test_models_all_layers_load, 0, (int)nmodels);
    tcase_add_test(models, test_tool_dequant);
    tcase_add_loop_test(models, test_tool_inspect_schemes, 0, (int)nmodels);
    tcase_add_loop_test(models, test_tool_inspect_dialects, 0,
                        (int)(sizeof(dialect_models) / sizeof(dialect_models[0])));
    tcase_add_test(models, test_ct_linear_scales);
    tcase_set_timeout(models, 60);
    suite_add_tcase(s, codec);
    suite_add_tcase(s, arith);
    suite_add_tcase(s, conf);
    suite_add_tcase(s, lin);
    suite_add_tcase(s, models);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
