/* SPDX-License-Identifier: MIT */
/* Helpers shared by the files of libquant; not exported. */
#ifndef NVFP4_QUANT_INTERNAL_H
#define NVFP4_QUANT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <nvfp4/quant.h>

/* The codecs of §1 and §5's quantize-dequantize: libquant/numerics.h is
 * their one definition (static inline), shared with libkernels and the GPU
 * kernels. */
#include "numerics.h"

/* Decoded value of every E2M1 nibble (§1; 0x8 is -0): the table the SIMD
 * dequantizer permutes, filled from NUM_E2M1_VALUES. */
extern const float nvfp4q_e2m1_table[16];

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
