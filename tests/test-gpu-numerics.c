/* SPDX-License-Identifier: MIT */
/* The GPU kernels' number formats and §5 activation quantize-dequantize
 * (libquant/numerics.h), compiled here as plain C - the very functions the CUDA
 * and HIP kernels call - and checked against PyTorch's fixtures under
 * tests/data/quant/ (written by torch, cross-checked with amd-quark; see
 * tests/data/quant/quant.json).  Runs on every machine: no GPU needed.
 *
 * Every comparison is bit-exact: these are roundings, not approximations,
 * and the GPU result must equal PyTorch's (and the CPU's) bit for bit. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "numerics.h"

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float *load_f32(const char *rel, size_t *n)
{
    size_t len;
    float *p = tload_file(rel, &len);
    *n = len / 4;
    return p;
}

START_TEST(test_e4m3_decode)
{
    size_t n;
    float *ref = load_f32("quant/e4m3_decode.f32", &n);

    ck_assert_uint_eq(n, 256);
    for (unsigned b = 0; b < 256; b++) {
        float v = num_e4m3_value(b);
        if (isnan(ref[b]))
            ck_assert_msg(isnan(v), "code 0x%02x: expected NaN, got %a", b, v);
        else
            ck_assert_msg(bits(v) == bits(ref[b]), "code 0x%02x: torch %a, gpu %a", b,
                          ref[b], v);
    }
    free(ref);
}
END_TEST

START_TEST(test_e4m3_encode)
{
    size_t n, nb;
    float *in = load_f32("quant/e4m3_encode_in.f32", &n);
    uint8_t *out = tload_file("quant/e4m3_encode_out.u8", &nb);

    ck_assert_uint_eq(n, nb);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(num_e4m3_encode(in[i]) == out[i], "x = %a: torch 0x%02x, gpu 0x%02x",
                      in[i], out[i], num_e4m3_encode(in[i]));
    free(in);
    free(out);
}
END_TEST

START_TEST(test_e2m1)
{
    /* §1: bit 3 sign, magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} */
    static const float mag[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    static const float table[16] = {NUM_E2M1_VALUES};
    size_t n, nb;
    float *in = load_f32("quant/e2m1_encode_in.f32", &n);
    uint8_t *out = tload_file("quant/e2m1_encode_out.u8", &nb);

    for (unsigned c = 0; c < 16; c++) {
        float v = num_e2m1_value(c);
        ck_assert_msg(fabsf(v) == mag[c & 7] && (c == 8 || !signbit(v) == !(c & 8)),
                      "nibble %u decodes to %g", c, v);
        /* the decode tables of libquant and the CPU kernels: the same bits */
        ck_assert_msg(bits(table[c]) == bits(v) && (c != 8 || signbit(table[c])),
                      "NUM_E2M1_VALUES[%u] = %g, num_e2m1_value %g", c, table[c], v);
    }
    ck_assert_uint_eq(n, nb);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(num_e2m1_encode(in[i]) == out[i], "x = %a: torch %u, gpu %u", in[i],
                      out[i], num_e2m1_encode(in[i]));
    free(in);
    free(out);
}
END_TEST

START_TEST(test_16bit)
{
    size_t n, nb, nh;
    float *in = load_f32("quant/round_in.f32", &n);
    uint16_t *bf = tload_file("quant/round_bf16.u16", &nb);
    uint16_t *hf = tload_file("quant/round_f16.u16", &nh);

    ck_assert_uint_eq(nb, 2 * n);
    ck_assert_uint_eq(nh, 2 * n);
    for (size_t i = 0; i < n; i++) {
        /* bf16: torch's RNE bits, and decoding is the upper half of a float */
        ck_assert_msg(num_bf16_encode(in[i]) == bf[i], "x = %a: torch 0x%04x, gpu 0x%04x",
                      in[i], bf[i], num_bf16_encode(in[i]));
        ck_assert(bits(num_bf16_value(bf[i])) == (uint32_t)bf[i] << 16);
        /* f16 decode against IEEE 754 binary16 written out in float64 */
        {
            uint16_t h = hf[i];
            int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
            double ref = e == 31 ? (m ? NAN : INFINITY)
                                 : e == 0 ? ldexp(m, -24) : ldexp(1.0 + m / 1024.0, e - 15);
            float v = num_f16_value(h);
            ref = s ? -ref : ref;
            if (isnan(ref))
                ck_assert(isnan(v));
            else
                ck_assert_msg((double)v == ref, "f16 0x%04x: %g vs %g", h, v, ref);
        }
    }
    free(in);
    free(bf);
    free(hf);
}
END_TEST

/* §5 on the torch fixture: 12 rows of 64, input_scale_2 from quant.json. */
START_TEST(test_qdq)
{
    size_t n, nout, ns;
    float *in = load_f32("quant/act_qdq_in.f32", &n);
    float *out = load_f32("quant/act_qdq_out.f32", &nout);
    uint8_t *sc = tload_file("quant/act_qdq_scale.u8", &ns);
    float in_scale, gs;

    in_scale = tact_qdq_scale();
    gs = 1.0f / in_scale; /* "float32(1) / float32(input_scale_2)" per quant.json */
    ck_assert_uint_eq(n, 12 * 64);
    ck_assert_uint_eq(nout, n);
    ck_assert_uint_eq(ns, n / 16);
    for (size_t b = 0; b < n / 16; b++) {
        float o[16], amax = 0;
        num_qdq_block(in + 16 * b, gs, o);
        for (int j = 0; j < 16; j++) {
            ck_assert_msg(bits(o[j]) == bits(out[16 * b + j]) ||
                              (o[j] == 0 && out[16 * b + j] == 0),
                          "block %zu elem %d: x %a torch %a gpu %a", b, j, in[16 * b + j],
                          out[16 * b + j], o[j]);
            amax = fmaxf(amax, fabsf(in[16 * b + j]));
        }
        /* the block scale torch chose is the one §5's formula gives */
        ck_assert_uint_eq(num_e4m3_encode(gs * (amax * (1.0f / 6.0f))), sc[b]);
    }
    /* an all-zero block gives zeros, never 0/0 (§8) */
    {
        float z[16] = {0}, o[16];
        num_qdq_block(z, gs, o);
        for (int j = 0; j < 16; j++)
            ck_assert(o[j] == 0 && !isnan(o[j]));
    }
    free(in);
    free(out);
    free(sc);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gpu-numerics");
    TCase *tc = tcase_create("formats");
    SRunner *sr;
    int failed;

    tcase_add_test(tc, test_e4m3_decode);
    tcase_add_test(tc, test_e4m3_encode);
    tcase_add_test(tc, test_e2m1);
    tcase_add_test(tc, test_16bit);
    tcase_add_test(tc, test_qdq);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
