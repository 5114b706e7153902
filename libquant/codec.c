/* SPDX-License-Identifier: MIT */
/* The number formats of §1 and the 16-bit float roundings, bit-exact with
 * PyTorch's casts.  Every encoder works on the float32 bit pattern with
 * integer round-to-nearest-even, so the result never depends on the FPU's
 * rounding mode or on the compiler contracting operations. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "internal.h"

const float nvfp4q_e2m1_table[16] = {
    0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f,
};

const char *nvfp4_quant_version(void)
{
    return PACKAGE_VERSION;
}

float nvfp4_fp4_decode(uint8_t nibble)
{
    return nvfp4q_e2m1_table[nibble & 0xF];
}

/* The E2M1 table of §1: the interval ends are the ties, and each tie goes
 * to the neighbour with an even mantissa (0.25->0, 0.75->1, 1.25->1,
 * 1.75->2, 2.5->2, 3.5->4, 5->4).  Written as comparisons rather than
 * arithmetic so every tie is visibly where the spec puts it. */
uint8_t nvfp4_fp4_encode(float x)
{
    float a = fabsf(x);
    uint8_t mag;

    if (isnan(x) || a <= 0.25f)
        return 0; /* zero is stored as +0 (0x0) by Quark, §1 */
    if (a < 0.75f)
        mag = 1;
    else if (a <= 1.25f)
        mag = 2;
    else if (a < 1.75f)
        mag = 3;
    else if (a <= 2.5f)
        mag = 4;
    else if (a < 3.5f)
        mag = 5;
    else if (a <= 5.0f)
        mag = 6;
    else
        mag = 7; /* saturate at 6, infinities included */
    return (uint8_t)(mag | (signbit(x) ? 8 : 0));
}

float nvfp4_fp8_e4m3_decode(uint8_t b)
{
    return quant_e4m3_value(b);
}

/* Round the integer SIG * 2^-SHIFT to nearest, ties to even. */
static uint32_t rne_shift(uint32_t sig, unsigned shift)
{
    uint32_t q, rem, half;

    if (shift == 0)
        return sig;
    if (shift > 31)
        return 0;
    q = sig >> shift;
    rem = sig & ((1u << shift) - 1);
    half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return q;
}

/* PyTorch: x.clamp(-448, 448).to(float8_e4m3fn).  NaN survives clamp and
 * becomes the NaN code 0x7F with its sign; the sign of zero is kept. */
uint8_t nvfp4_fp8_e4m3_encode(float x)
{
    uint32_t u = f32_bits(x);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    uint32_t a = u & 0x7FFFFFFFu;
    int exp;

    if (a > 0x7F800000u)
        return sign | 0x7F;
    if (a >= 0x43E00000u) /* |x| >= 448 (infinity too): clamp, §1 */
        return sign | 0x7E;
    exp = (int)(a >> 23) - 127;
    if (exp >= -6) {
        /* normal: keep 3 of 23 mantissa bits; a carry out of the mantissa
         * bumps the exponent, which is right (1.111b+ulp/2 -> 2.0).  448 is
         * the largest input left, so no carry can reach the NaN code. */
        uint32_t code = ((uint32_t)(exp + 7) << 3) | ((a >> 20) & 7);
        uint32_t rem = a & 0xFFFFFu;
        if (rem > 0x80000u || (rem == 0x80000u && (code & 1)))
            code++;
        return (uint8_t)(sign | code);
    }
    /* subnormal range: the value in units of 2^-9, rounded; 8 units is the
     * smallest normal (code 0x08), which the same integer also spells. */
    if ((a >> 23) == 0)
        return sign; /* float32 subnormals are far below 2^-10 */
    return (uint8_t)(sign | rne_shift((a & 0x7FFFFFu) | 0x800000u,
                                      (unsigned)(141 - (int)(a >> 23))));
}

uint16_t nvfp4_bf16_encode(float x)
{
    uint32_t u = f32_bits(x);

    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN, as PyTorch does */
    u += 0x7FFFu + ((u >> 16) & 1);           /* overflow rounds to infinity */
    return (uint16_t)(u >> 16);
}

float nvfp4_bf16_decode(uint16_t h)
{
    return f32_from_bits((uint32_t)h << 16);
}

uint16_t nvfp4_f16_encode(float x)
{
    uint32_t u = f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7FFFFFFFu, e = a >> 23;

    if (a > 0x7F800000u)
        return sign | 0x7E00 | (uint16_t)((a >> 13) & 0x3FF);
    if (e >= 143) /* >= 2^16, infinity included */
        return sign | 0x7C00;
    if (e >= 113) {
        /* normal half: rebias, keep 10 mantissa bits; a carry into the
         * exponent is right, and one past 0x7BFF is infinity (65520). */
        uint32_t h = ((e - 112) << 10) | ((a >> 13) & 0x3FF);
        uint32_t rem = a & 0x1FFFu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    if (e == 0)
        return sign;
    /* subnormal half: units of 2^-24 */
    return (uint16_t)(sign | rne_shift((a & 0x7FFFFFu) | 0x800000u, 126 - e));
}

float nvfp4_f16_decode(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;

    if (e == 31)
        return f32_from_bits(sign | 0x7F800000u | (m << 13));
    if (e == 0) /* zero and subnormals: m * 2^-24, exact in float32 */
        return f32_from_bits(sign | f32_bits((float)m * 0x1p-24f));
    return f32_from_bits(sign | ((e - 15 + 127) << 23) | (m << 13));
}

int nvfp4_quant_read_float(const nvfp4_tensor *t, uint64_t i, float *out)
{
    const unsigned char *p;

    if (!t || !out || !t->data || i >= t->numel)
        return -1;
    p = t->data;
    switch (t->dtype) {
    case NVFP4_DTYPE_F32: {
        float v;
        memcpy(&v, p + i * 4, 4);
        *out = v;
        return 0;
    }
    case NVFP4_DTYPE_BF16:
    case NVFP4_DTYPE_F16: {
        uint16_t h; /* safetensors data is little-endian, as is every target */
        memcpy(&h, p + i * 2, 2);
        *out = t->dtype == NVFP4_DTYPE_BF16 ? nvfp4_bf16_decode(h) : nvfp4_f16_decode(h);
        return 0;
    }
    default:
        return -1;
    }
}
