/* SPDX-License-Identifier: MIT */
/* The public codecs of §1 and the 16-bit float roundings, bit-exact with
 * PyTorch's casts: thin wrappers of libquant/numerics.h, the one definition
 * that the CPU and GPU kernels compile too.  Every encoder works on the
 * float32 bit pattern with integer round-to-nearest-even, so the result
 * never depends on the FPU's rounding mode or on the compiler contracting
 * operations. */
#include "config.h"

#include <string.h>

#include "internal.h"

const float nvfp4q_e2m1_table[16] = {NUM_E2M1_VALUES};

const char *nvfp4_quant_version(void)
{
    return PACKAGE_VERSION;
}

float nvfp4_fp4_decode(uint8_t nibble)
{
    return nvfp4q_e2m1_table[nibble & 0xF];
}

uint8_t nvfp4_fp4_encode(float x)
{
    return (uint8_t)num_e2m1_encode(x);
}

float nvfp4_fp8_e4m3_decode(uint8_t b)
{
    return num_e4m3_value(b);
}

/* PyTorch: x.clamp(-448, 448).to(float8_e4m3fn).  NaN survives clamp and
 * becomes the NaN code 0x7F with its sign; the sign of zero is kept. */
uint8_t nvfp4_fp8_e4m3_encode(float x)
{
    return (uint8_t)num_e4m3_encode(x);
}

uint16_t nvfp4_bf16_encode(float x)
{
    return (uint16_t)num_bf16_encode(x);
}

float nvfp4_bf16_decode(uint16_t h)
{
    return num_bf16_value(h);
}

uint16_t nvfp4_f16_encode(float x)
{
    return (uint16_t)num_f16_encode(x);
}

float nvfp4_f16_decode(uint16_t h)
{
    return num_f16_value(h);
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
