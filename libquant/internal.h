/* SPDX-License-Identifier: MIT */
/* Helpers shared by the files of libquant; not exported. */
#ifndef NVFP4_QUANT_INTERNAL_H
#define NVFP4_QUANT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <nvfp4/quant.h>

/* Decoded value of every E2M1 nibble (§1); 0x8 is -0. */
extern const float nvfp4q_e2m1_table[16];

static inline uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

static inline float f32_from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

/* E4M3FN byte -> float32 (§1), built from the bits so it is exact: the
 * library's hot loops inline this instead of calling the exported wrapper. */
static inline float quant_e4m3_value(uint8_t b)
{
    uint32_t sign = (uint32_t)(b & 0x80) << 24;
    uint32_t e = (b >> 3) & 0xF, m = b & 7;

    if (e == 15 && m == 7)
        return f32_from_bits(sign | 0x7FC00000u);
    if (e == 0) /* subnormal: m * 2^-9, exact in float32 */
        return f32_from_bits(sign | f32_bits((float)m * 0x1p-9f));
    return f32_from_bits(sign | ((e - 7 + 127) << 23) | (m << 20));
}

/* True for an E4M3FN byte that a block-scale tensor may not hold: NaN (0x7F,
 * 0xFF) or a negative non-zero value (§8).  0x80 (-0) is a zero scale. */
static inline int quant_bad_scale_byte(uint8_t b)
{
    return (b & 0x7F) == 0x7F || (b > 0x80);
}

/* ---- dialects (dialect.c): ModelOpt and compressed-tensors configs ---- */
#include <jansson.h>

typedef struct nvfp4q_dialect nvfp4q_dialect;

/* METHOD "modelopt" or "compressed-tensors"; OBJ the quantization object
 * found at KEY of FILE (for messages). */
nvfp4q_dialect *nvfp4q_dialect_parse(const char *method, json_t *obj, const char *file,
                                     const char *key, nvfp4_error *err);
void nvfp4q_dialect_free(nvfp4q_dialect *d);
/* From config.json's quantization_config QC (NULL when absent) and, for
 * ModelOpt, hf_quant_config.json beside it: *OUT = NULL for Quark or
 * unquantized checkpoints. */
nvfp4_status nvfp4q_dialect_from_files(const nvfp4_config *cfg, json_t *qc,
                                       nvfp4q_dialect **out, nvfp4_error *err);
void nvfp4q_dialect_set_producer(nvfp4q_dialect *d, const char *name, const char *version);
nvfp4_dialect nvfp4q_dialect_kind(const nvfp4q_dialect *d);
const char *nvfp4q_dialect_producer(const nvfp4q_dialect *d);
const char *nvfp4q_dialect_kv_cache(const nvfp4q_dialect *d);
nvfp4_status nvfp4q_dialect_resolve(const nvfp4q_dialect *d, const char *layer,
                                    nvfp4_scheme *out, nvfp4_error *err);
/* The float32 x with 1.0f / x == GS (or nearest): see dialect.c. */
float nvfp4q_inverse_preimage(float gs);

#endif
