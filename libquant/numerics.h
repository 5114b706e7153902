/* SPDX-License-Identifier: MIT */
/*
 * libquant/numerics.h - THE definition of the number formats of §1 (E2M1,
 * E4M3FN, bfloat16, IEEE half) and of the activation quantize-dequantize of
 * §5, header-only (static inline) so that every layer compiles the very same
 * code: libquant (codec.c, nvfp4.c: the public nvfp4_fp4_encode(),
 * nvfp4_quant_qdq_row() ...), the CPU kernels (libkernels/cpu-linear.c and
 * cpu-linear.h; cpu-nvfp4.c, whose AVX-512 activation quantizer uses the
 * E2M1 edges and the §5 scale from here) and the GPU kernels of both
 * vendors and their CPU emulator (gpu/kernels.cu, gpu/emu.cc).  It lives in
 * the lowest layer that owns the codecs; every build of those files has
 * -I$(top_srcdir)/libquant (NUMERICS_CPPFLAGS in Makefile.am) and includes
 * it as "numerics.h".
 * tests/test-gpu-numerics.c checks it, compiled as plain C, against the
 * PyTorch fixtures.
 *
 * Everything is integer bit manipulation or single float32 operations
 * spelled gpu_mul_rn/gpu_div_rn, in the reference's order: a GPU result is
 * bit-identical to the CPU's.  A file that includes this header outside the
 * GPU build (GPU_HD undefined) gets plain C and must not contract
 * multiply-adds (-ffp-contract=off, as libquant and libkernels are built).
 */
#ifndef NVFP4_NUMERICS_H
#define NVFP4_NUMERICS_H

#include <stdint.h>
#include <string.h>

#ifndef GPU_HD
/* Plain C (the host test): no vendor header included. */
#define GPU_HD static inline
static inline float gpu_mul_rn(float a, float b) { return a * b; }
static inline float gpu_div_rn(float a, float b) { return a / b; }
#endif

#define NUM_BLOCK 16

/* The 16 E2M1 values by code (§1; 0x8 is -0): the initializer of every
 * decode table (libquant's, the CPU kernels' vpermps tables).  A macro, not
 * an array, so that the header defines no object: num_e2m1_value() is the
 * table-free decoder the GPU uses (a per-thread table would live in slow
 * local memory), and tests/test-gpu-numerics.c checks the two agree. */
#define NUM_E2M1_VALUES                                                              \
    0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, \
        -3.0f, -4.0f, -6.0f

/* §1's E2M1 rounding on a magnitude a: the magnitude code (0..7) is the
 * number of these edges that a has passed.  An edge is the midpoint of two
 * neighbours, a tie that goes to the even code: GT edges are passed only
 * when exceeded (0.25 -> 0, 1.25 -> 1, 2.5 -> 2, 5 -> 4), GE edges when
 * reached (0.75 -> 1, 1.75 -> 2, 3.5 -> 4); past 5 saturates at 6.
 * X(edge, GT or GE) for each, in order; the scalar num_e2m1_encode() and the
 * CPU's AVX-512 quantizer both expand it. */
#define NUM_E2M1_EDGES(X) \
    X(0.25f, GT) X(0.75f, GE) X(1.25f, GT) X(1.75f, GE) X(2.5f, GT) X(3.5f, GE) X(5.0f, GT)
#define NUM_CMP_GT(a, e) ((a) > (e))
#define NUM_CMP_GE(a, e) ((a) >= (e))

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

/* float -> E2M1 nibble: the §1 table (NUM_E2M1_EDGES), ties to even,
 * saturating at 6 (infinities too); a value that rounds to zero (and NaN,
 * which passes no edge) is +0, as Quark stores it. */
GPU_HD uint32_t num_e2m1_encode(float x)
{
    uint32_t u = num_f32_bits(x);
    float a = num_f32_from_bits(u & 0x7FFFFFFFu);
    uint32_t mag = 0;

#define NUM_E2M1_PASS(e, cmp) mag += NUM_CMP_##cmp(a, e) ? 1u : 0u;
    NUM_E2M1_EDGES(NUM_E2M1_PASS)
#undef NUM_E2M1_PASS
    return mag ? mag | ((u >> 28) & 8u) : 0u;
}

/* True for an E4M3FN byte that a block-scale tensor may not hold (§8): NaN
 * (0x7F, 0xFF) or a negative non-zero value.  0x80 (-0) is a zero scale. */
GPU_HD int num_e4m3_bad_scale(uint32_t b)
{
    return (b & 0x7Fu) == 0x7Fu || (b & 0xFFu) > 0x80u;
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

/* Round the integer SIG * 2^-SHIFT to nearest, ties to even. */
GPU_HD uint32_t num_rne_shift(uint32_t sig, uint32_t shift)
{
    uint32_t q, rem, half;

    if (shift == 0u)
        return sig;
    if (shift > 31u)
        return 0u;
    q = sig >> shift;
    rem = sig & ((1u << shift) - 1u);
    half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return q;
}

/* float -> IEEE half bits as PyTorch's .to(float16): round to nearest even,
 * overflow to infinity, NaN keeps its payload's top bits, quiet. */
GPU_HD uint32_t num_f16_encode(float x)
{
    uint32_t u = num_f32_bits(x);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7FFFFFFFu, e = a >> 23;

    if (a > 0x7F800000u)
        return sign | 0x7E00u | ((a >> 13) & 0x3FFu);
    if (e >= 143u) /* >= 2^16, infinity included */
        return sign | 0x7C00u;
    if (e >= 113u) {
        /* normal half: rebias, keep 10 mantissa bits; a carry into the
         * exponent is right, and one past 0x7BFF is infinity (65520). */
        uint32_t h = ((e - 112u) << 10) | ((a >> 13) & 0x3FFu);
        uint32_t rem = a & 0x1FFFu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
            h++;
        return sign | h;
    }
    if (e == 0u)
        return sign;
    /* subnormal half: units of 2^-24 */
    return sign | num_rne_shift((a & 0x7FFFFFu) | 0x800000u, 126u - e);
}

/* §5, vLLM's emulation, in its float32 order, in three steps that every
 * implementation (scalar, AVX-512, GPU, tensor-core operand packing) shares:
 *   s   = e4m3(clamp(gs * (amax * (1/6)), -448, 448))     num_qdq_scale
 *   osc = s == 0 ? 0 : gs / s,  back = s / gs              num_qdq_scale
 *   q   = e2m1(clamp(x * osc, -6, 6))                      num_qdq_code
 *   x'  = q * back                                         num_qdq_block
 * gs is the global activation scale, computed once by the caller in float32
 * (1.0f / input_scale, or compressed-tensors' input_global_scale as it is:
 * docs/DIALECTS.md).  An all-zero block gives s = 0, osc = 0, x' = 0 (never
 * 0/0). */

/* The block's E4M3 scale code from its amax; *OSC and *BACK as above. */
GPU_HD uint32_t num_qdq_scale(float amax, float gs, float *osc, float *back)
{
    const float sixth = 1.0f / 6.0f; /* float32(1/6), folded at compile time */
    /* the encoder clamps to 448 (§1) */
    const uint32_t sc = num_e4m3_encode(gpu_mul_rn(gs, gpu_mul_rn(amax, sixth)));
    const float s = num_e4m3_value(sc);

    *osc = s == 0.0f ? 0.0f : gpu_div_rn(gs, s);
    *back = gpu_div_rn(s, gs);
    return sc;
}

/* The E2M1 code of one element. */
GPU_HD uint32_t num_qdq_code(float x, float osc)
{
    float y = gpu_mul_rn(x, osc);
    y = y < -6.0f ? -6.0f : y > 6.0f ? 6.0f : y;
    return num_e2m1_encode(y);
}

/* amax of one block of 16.  "Greater than" skips NaN, as fmaxf does, where
 * torch would propagate it: a block holding NaN has unspecified values, but
 * nothing traps. */
GPU_HD float num_qdq_amax(const float *x)
{
    float amax = 0.0f;
    int j;

    for (j = 0; j < NUM_BLOCK; j++) {
        float a = num_f32_from_bits(num_f32_bits(x[j]) & 0x7FFFFFFFu);
        if (a > amax)
            amax = a;
    }
    return amax;
}

/* One block up to the codes: the 16 E2M1 codes into C, *BACK = s / gs, the
 * E4M3 scale code returned (the operands of the FP4 tensor-core GEMM). */
GPU_HD uint32_t num_qdq_block_codes(const float *x, float gs, uint32_t *c, float *back)
{
    float osc;
    const uint32_t sc = num_qdq_scale(num_qdq_amax(x), gs, &osc, back);
    int j;

    for (j = 0; j < NUM_BLOCK; j++)
        c[j] = num_qdq_code(x[j], osc);
    return sc;
}

/* One block of 16 quantize-dequantized: OUT may be X. */
GPU_HD void num_qdq_block(const float *x, float gs, float *out)
{
    uint32_t c[NUM_BLOCK];
    float back;
    int j;

    (void)num_qdq_block_codes(x, gs, c, &back);
    for (j = 0; j < NUM_BLOCK; j++)
        out[j] = gpu_mul_rn(num_e2m1_value(c[j]), back);
}

#endif /* NVFP4_NUMERICS_H */
