/* SPDX-License-Identifier: MIT */
/*
 * libkernels/gpu/numerics.h - the number formats of §1 and the activation
 * quantize-dequantize of §5 as functions that compile for the GPU (both
 * vendors) AND as plain C, so that tests/test-gpu-numerics.c checks the very
 * code the kernels run against the PyTorch fixtures on a machine without a
 * GPU.
 *
 * Everything is integer bit manipulation or single float32 operations
 * spelled gpu_mul_rn/gpu_div_rn, in the reference's order (libquant's
 * nvfp4_quant_qdq_row): a GPU result is bit-identical to the CPU's.
 */
#ifndef NVFP4_GPU_NUMERICS_H
#define NVFP4_GPU_NUMERICS_H

#include <stdint.h>
#include <string.h>

#ifndef GPU_HD
/* Plain C (the host test): no vendor header included. */
#define GPU_HD static inline
static inline float gpu_mul_rn(float a, float b) { return a * b; }
static inline float gpu_div_rn(float a, float b) { return a / b; }
#endif

#define NUM_BLOCK 16

GPU_HD uint32_t num_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

GPU_HD float num_f32_from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* E2M1 nibble -> float (§1): bits 1-2 exponent (bias 1), bit 0 mantissa,
 * bit 3 sign.  Built as a float32 bit pattern: exact and table-free (a
 * per-thread table would live in slow local memory). */
GPU_HD float num_e2m1_value(uint32_t nib)
{
    uint32_t e = (nib >> 1) & 3u, m = nib & 1u;
    uint32_t mag = e ? ((e + 126u) << 23) | (m << 22) : (m ? 0x3F000000u : 0u);
    return num_f32_from_bits(mag | ((nib & 8u) << 28));
}

/* E4M3FN byte -> float (§1): subnormal m * 2^-9, 0x7F/0xFF NaN. */
GPU_HD float num_e4m3_value(uint32_t b)
{
    uint32_t e = (b >> 3) & 15u, m = b & 7u, sign = (b & 0x80u) << 24;
    if (e == 15u && m == 7u)
        return num_f32_from_bits(sign | 0x7FC00000u);
    if (e == 0u)
        return num_f32_from_bits(sign | num_f32_bits((float)m * 0.001953125f));
    return num_f32_from_bits(sign | ((e + 120u) << 23) | (m << 20));
}

/* float -> E4M3FN as PyTorch's x.clamp(-448, 448).to(float8_e4m3fn): clamp,
 * then round to nearest even; the same integer algorithm as libquant. */
GPU_HD uint32_t num_e4m3_encode(float x)
{
    uint32_t u = num_f32_bits(x);
    uint32_t sign = (u >> 24) & 0x80u;
    uint32_t a = u & 0x7FFFFFFFu;
    int exp;

    if (a > 0x7F800000u)
        return sign | 0x7Fu;
    if (a >= 0x43E00000u)
        return sign | 0x7Eu;
    exp = (int)(a >> 23) - 127;
    if (exp >= -6) {
        uint32_t code = ((uint32_t)(exp + 7) << 3) | ((a >> 20) & 7u);
        uint32_t rem = a & 0xFFFFFu;
        if (rem > 0x80000u || (rem == 0x80000u && (code & 1u)))
            code++;
        return sign | code;
    }
    if ((a >> 23) == 0)
        return sign;
    {
        /* subnormal: the value in units of 2^-9, rounded to nearest even */
        uint32_t sig = (a & 0x7FFFFFu) | 0x800000u;
        uint32_t shift = (uint32_t)(141 - (int)(a >> 23));
        uint32_t q, rem, half;
        if (shift > 31u)
            return sign;
        q = sig >> shift;
        rem = sig & ((1u << shift) - 1u);
        half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return sign | q;
    }
}

/* float -> E2M1 nibble: the §1 table, ties to even, saturating at 6; a
 * value that rounds to zero (and NaN) is +0. */
GPU_HD uint32_t num_e2m1_encode(float x)
{
    uint32_t u = num_f32_bits(x);
    float a = num_f32_from_bits(u & 0x7FFFFFFFu);
    uint32_t mag;

    if (!(a > 0.25f)) /* also NaN */
        return 0;
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
        mag = 7;
    return mag | ((u >> 28) & 8u);
}

GPU_HD float num_bf16_value(uint32_t h)
{
    return num_f32_from_bits((h & 0xFFFFu) << 16);
}

/* float -> bfloat16 bits, round to nearest even; NaN stays a quiet NaN. */
GPU_HD uint32_t num_bf16_encode(float x)
{
    uint32_t u = num_f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return ((u >> 16) | 0x40u) & 0xFFFFu;
    u += 0x7FFFu + ((u >> 16) & 1u);
    return u >> 16;
}

/* IEEE half bits -> float, exactly (subnormals, inf, NaN). */
GPU_HD float num_f16_value(uint32_t h)
{
    uint32_t sign = (h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3FFu;
    if (e == 31u)
        return num_f32_from_bits(sign | 0x7F800000u | (m << 13));
    if (e == 0u)
        return num_f32_from_bits(sign | num_f32_bits((float)m * 5.9604644775390625e-8f));
    return num_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

/* §5 for one block of 16, vLLM's emulation in its float32 order (the same
 * as libquant's nvfp4_quant_qdq_row):
 *   s = e4m3(clamp(gs * (amax * (1/6)))), osc = s == 0 ? 0 : gs / s,
 *   x' = e2m1(clamp(x * osc, -6, 6)) * (s / gs).
 * gs = 1 / input_scale is computed once by the caller, in float32.
 * amax uses "greater than" so NaN is skipped, as fmaxf does on the CPU. */
GPU_HD void num_qdq_block(const float *x, float gs, float *out)
{
    const float sixth = 1.0f / 6.0f; /* float32(1/6), folded at compile time */
    float amax = 0.0f, s, osc, back;
    int j;

    for (j = 0; j < NUM_BLOCK; j++) {
        float a = num_f32_from_bits(num_f32_bits(x[j]) & 0x7FFFFFFFu);
        if (a > amax)
            amax = a;
    }
    s = num_e4m3_value(num_e4m3_encode(gpu_mul_rn(gs, gpu_mul_rn(amax, sixth))));
    osc = s == 0.0f ? 0.0f : gpu_div_rn(gs, s);
    back = gpu_div_rn(s, gs);
    for (j = 0; j < NUM_BLOCK; j++) {
        float y = gpu_mul_rn(x[j], osc);
        y = y < -6.0f ? -6.0f : y > 6.0f ? 6.0f : y;
        out[j] = gpu_mul_rn(num_e2m1_value(num_e2m1_encode(y)), back);
    }
}

#endif /* NVFP4_GPU_NUMERICS_H */
