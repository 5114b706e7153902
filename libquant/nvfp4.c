/* SPDX-License-Identifier: MIT */
/* NVFP4 arithmetic: weight dequantization (§2), the activation
 * quantize-dequantize of vLLM's emulation (§5) and Quark's weight quantizer
 * (§7).  Every formula keeps the reference's float32 operation order; the
 * library is built with -ffp-contract=off so no multiply-add is fused. */
#include "config.h"

#include <float.h>
#include <math.h>

#include "internal.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define QUANT_HAVE_AVX512 1
#endif

/* One block of 16: the E2M1 value times (block scale * global), as §2 orders
 * it: vLLM's emulation dequantizes with `codes * (scale_fp8.float() * global)`. */
static void dequant_row_scalar(const uint8_t *packed, const uint8_t *scales,
                               float global, size_t k, float *out)
{
    for (size_t b = 0; b < k / NVFP4_BLOCK; b++) {
        float s = num_e4m3_value(scales[b]) * global;
        const uint8_t *p = packed + b * (NVFP4_BLOCK / 2);
        float *o = out + b * NVFP4_BLOCK;
        for (int j = 0; j < NVFP4_BLOCK / 2; j++) {
            o[2 * j] = nvfp4q_e2m1_table[p[j] & 0xF] * s;
            o[2 * j + 1] = nvfp4q_e2m1_table[p[j] >> 4] * s;
        }
    }
}

#ifdef QUANT_HAVE_AVX512
/* The same arithmetic, one block per iteration: the 16 E2M1 values are
 * exactly one zmm register, so the nibbles index it with a permute and one
 * multiply per block rounds exactly as the scalar loop does. */
__attribute__((target("avx512f"))) static void
dequant_row_avx512(const uint8_t *packed, const uint8_t *scales, float global,
                   size_t k, float *out)
{
    const __m512 lut = _mm512_loadu_ps(nvfp4q_e2m1_table);
    const __m512i low = _mm512_set1_epi32(0xF);
    /* lane 2j takes bits 0-3 of byte j, lane 2j+1 bits 4-7 */
    const __m512i shifts = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);

    for (size_t b = 0; b < k / NVFP4_BLOCK; b++) {
        float s = num_e4m3_value(scales[b]) * global;
        uint64_t w;
        __m128i bytes;
        __m512i idx;

        memcpy(&w, packed + b * 8, 8);
        bytes = _mm_cvtsi64_si128((long long)w);
        /* byte j to lanes 2j and 2j+1 */
        bytes = _mm_unpacklo_epi8(bytes, bytes);
        idx = _mm512_cvtepu8_epi32(bytes);
        idx = _mm512_and_si512(_mm512_srlv_epi32(idx, shifts), low);
        _mm512_storeu_ps(out + b * NVFP4_BLOCK,
                         _mm512_mul_ps(_mm512_permutexvar_ps(idx, lut), _mm512_set1_ps(s)));
    }
}

static int have_avx512(void)
{
    static int cached = -1;
    if (cached < 0)
        cached = __builtin_cpu_supports("avx512f") ? 1 : 0;
    return cached;
}
#endif

void nvfp4_quant_dequant_row(const uint8_t *packed, const uint8_t *scales, float global,
                             size_t k, float *out)
{
#ifdef QUANT_HAVE_AVX512
    if (have_avx512()) {
        dequant_row_avx512(packed, scales, global, k, out);
        return;
    }
#endif
    dequant_row_scalar(packed, scales, global, k, out);
}

void nvfp4_quant_dequant_row_bf16(const uint8_t *packed, const uint8_t *scales,
                                  float global, size_t k, uint16_t *out)
{
    float tmp[NVFP4_BLOCK];

    /* one block at a time: the float32 result of §2, then one RNE rounding */
    for (size_t b = 0; b < k / NVFP4_BLOCK; b++) {
        dequant_row_scalar(packed + b * (NVFP4_BLOCK / 2), scales + b, global,
                           NVFP4_BLOCK, tmp);
        for (int j = 0; j < NVFP4_BLOCK; j++)
            out[b * NVFP4_BLOCK + j] = nvfp4_bf16_encode(tmp[j]);
    }
}

/* §5, vLLM's emulation (libquant/numerics.h: num_qdq_block is the one
 * definition, the GPU kernels run it too), gs = 1 / input_scale. */
void nvfp4_quant_qdq_row(const float *x, size_t k, float input_scale, float *out)
{
    nvfp4_quant_qdq_row_gs(x, k, 1.0f / input_scale, out);
}

void nvfp4_quant_qdq_row_gs(const float *x, size_t k, float gs, float *out)
{
    for (size_t b = 0; b < k / NVFP4_BLOCK; b++)
        num_qdq_block(x + b * NVFP4_BLOCK, gs, out + b * NVFP4_BLOCK);
}

/* §7: float32(amax) / 2688 with 2688 = 448 * 6, one division; a zero result
 * (all-zero weight, or underflow) becomes FLT_EPSILON as in Quark. */
float nvfp4_quant_global_scale(float amax)
{
    float s = amax / 2688.0f;
    return s == 0.0f ? FLT_EPSILON : s;
}

/* §7: per block, sb = e4m3(A / (s2 * 6)) with 0 -> 1.0 (0x38); then
 * codes = e2m1(W / (e4m3(sb) * s2)). */
void nvfp4_quant_weight(const float *w, size_t n, size_t k, float global,
                        uint8_t *packed, uint8_t *scales)
{
    const float denom6 = global * 6.0f;

    for (size_t r = 0; r < n; r++) {
        for (size_t b = 0; b < k / NVFP4_BLOCK; b++) {
            const float *wb = w + r * k + b * NVFP4_BLOCK;
            uint8_t *pb = packed + (r * k + b * NVFP4_BLOCK) / 2;
            float amax = 0.0f, d;
            uint8_t sb;

            for (int j = 0; j < NVFP4_BLOCK; j++)
                amax = fmaxf(amax, fabsf(wb[j]));
            sb = nvfp4_fp8_e4m3_encode(amax / denom6);
            if (num_e4m3_value(sb) == 0.0f)
                sb = 0x38;
            scales[r * (k / NVFP4_BLOCK) + b] = sb;
            d = num_e4m3_value(sb) * global;
            for (int j = 0; j < NVFP4_BLOCK / 2; j++)
                pb[j] = (uint8_t)(nvfp4_fp4_encode(wb[2 * j] / d) |
                                  nvfp4_fp4_encode(wb[2 * j + 1] / d) << 4);
        }
    }
}
