/* SPDX-License-Identifier: MIT */
/*
 * nvfp4/quant.h - the numerics layer of nvfp4: FP4 E2M1 and FP8 E4M3 codecs,
 * NVFP4 (de)quantization exactly as Quark and vLLM compute it, Quark's
 * quantization_config and validated views of quantized Linear layers.
 *
 * Built on nvfp4/format.h; knows nothing about devices or models.
 * Section numbers (§) refer to docs/quark-nvfp4-spec.md.
 */
#ifndef NVFP4_QUANT_H
#define NVFP4_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include <nvfp4/format.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NVFP4_BLOCK 16          /* elements per block scale */
#define NVFP4_E4M3_MAX 448.0f
#define NVFP4_E2M1_MAX 6.0f

NVFP4_API const char *nvfp4_quant_version(void);

/* ---- codecs (§1) ---------------------------------------------------------- */

/* E2M1 nibble (low 4 bits used) -> float; 0x8 (-0) decodes to -0.0f == 0. */
NVFP4_API float nvfp4_fp4_decode(uint8_t nibble);
/* float -> E2M1 nibble, round to nearest even on the grid, saturating at 6;
 * a value that rounds to zero is +0 (0x0).  NaN encodes as 0. */
NVFP4_API uint8_t nvfp4_fp4_encode(float x);
/* E4M3FN byte -> float (subnormals; 0x7F/0xFF are NaN). */
NVFP4_API float nvfp4_fp8_e4m3_decode(uint8_t b);
/* float -> E4M3FN, clamped to +-448 then round to nearest even (PyTorch cast). */
NVFP4_API uint8_t nvfp4_fp8_e4m3_encode(float x);
/* bfloat16 and IEEE half, round to nearest even. */
NVFP4_API uint16_t nvfp4_bf16_encode(float x);
NVFP4_API float nvfp4_bf16_decode(uint16_t h);
NVFP4_API uint16_t nvfp4_f16_encode(float x);
NVFP4_API float nvfp4_f16_decode(uint16_t h);
/* Read element i of a F32/BF16/F16 tensor as float; -1 for other dtypes. */
NVFP4_API int nvfp4_quant_read_float(const nvfp4_tensor *t, uint64_t i, float *out);

/* ---- NVFP4 arithmetic (§2, §5, §7) --------------------------------------- */

/* Dequantize one row of K elements (K % 16 == 0): packed is K/2 bytes (element
 * 2i in the low nibble), scales K/16 E4M3 bytes, global = weight_scale_2.
 * W = E2M1 * (E4M3(scale) * global), block scale times global first (§2). */
NVFP4_API void nvfp4_quant_dequant_row(const uint8_t *packed, const uint8_t *scales,
                                       float global, size_t k, float *out);
/* The same to bf16 (round to nearest even from the float32 result). */
NVFP4_API void nvfp4_quant_dequant_row_bf16(const uint8_t *packed,
                                            const uint8_t *scales, float global,
                                            size_t k, uint16_t *out);

/* Activation quantize-dequantize of one row of K elements (K % 16 == 0),
 * exactly vLLM's emulation formula (§5) with gs = 1 / input_scale.
 * input_scale must be finite, > 0 and have a finite reciprocal, as
 * nvfp4_linear_load guarantees.  x' stays float32 (the caller casts to
 * bf16 when it emulates vLLM's bf16 activations).  In-place allowed. */
NVFP4_API void nvfp4_quant_qdq_row(const float *x, size_t k, float input_scale,
                                   float *out);
/* The same with the global activation scale GS given directly (what
 * compressed-tensors stores as input_global_scale, DIALECTS.md); finite, > 0. */
NVFP4_API void nvfp4_quant_qdq_row_gs(const float *x, size_t k, float gs, float *out);

/* Quark's weight quantizer (§7).  Global scale from the amax of the weight
 * (or of all siblings of a shared group): float32(amax) / 2688, 0 -> FLT_EPSILON. */
NVFP4_API float nvfp4_quant_global_scale(float amax);
/* Quantize an [n, k] float32 row-major weight with the given global scale
 * into packed [n, k/2] and scales [n, k/16].  k % 16 == 0. */
NVFP4_API void nvfp4_quant_weight(const float *w, size_t n, size_t k, float global,
                                  uint8_t *packed, uint8_t *scales);

/* ---- Quark quantization_config (§3) ------------------------------------- */

typedef enum {
    NVFP4_SCHEME_NONE = 0,   /* unquantized (excluded, or no config) */
    NVFP4_SCHEME_W4A4,       /* NVFP4 weights and activations */
    NVFP4_SCHEME_W4A16,      /* NVFP4 weights only */
} nvfp4_scheme;

NVFP4_API const char *nvfp4_scheme_name(nvfp4_scheme s);  /* "none", "w4a4", "w4a16" */

typedef struct nvfp4_qconfig nvfp4_qconfig;

/* Parses config.json's quantization_config.  A config without one yields a
 * qconfig under which every layer is NVFP4_SCHEME_NONE.  quant_method other
 * than "quark", export.weight_format other than "real_quantized", and layer
 * configs that are not NVFP4 are refused here only when they are reachable
 * (global config) - per-layer ones are refused when resolved. */
NVFP4_API nvfp4_qconfig *nvfp4_qconfig_parse(const nvfp4_config *cfg, nvfp4_error *err);
NVFP4_API void nvfp4_qconfig_free(nvfp4_qconfig *qc);
/* Resolve the scheme of the Linear named LAYER (e.g.
 * "model.layers.0.self_attn.q_proj"): exclude -> layer_quant_config ->
 * layer_type_quant_config["Linear"] -> global_quant_config.  A layer whose
 * config is MXFP4, FP8, ... is NVFP4_ERR_UNSUPPORTED naming what was found. */
NVFP4_API nvfp4_status nvfp4_qconfig_resolve(const nvfp4_qconfig *qc, const char *layer,
                                             nvfp4_scheme *out, nvfp4_error *err);

/* ---- checkpoint dialects (docs/DIALECTS.md) --------------------------------
 * Besides Quark, nvfp4_qconfig_parse reads NVIDIA ModelOpt (quant_method
 * "modelopt" in config.json, or hf_quant_config.json beside it) and
 * compressed-tensors / llm-compressor (quant_method "compressed-tensors",
 * format "nvfp4-pack-quantized") configs; nvfp4_qconfig_resolve answers for
 * each the way vLLM decides (ModelOpt: exclude_modules globs; compressed-
 * tensors: ignore, then config_groups targets by exact name > "re:" regex >
 * class name "Linear"). */
typedef enum {
    NVFP4_DIALECT_NONE = 0,            /* no quantization_config */
    NVFP4_DIALECT_QUARK,
    NVFP4_DIALECT_MODELOPT,
    NVFP4_DIALECT_COMPRESSED_TENSORS,
} nvfp4_dialect;

/* "none", "quark", "modelopt", "compressed-tensors" */
NVFP4_API const char *nvfp4_dialect_name(nvfp4_dialect d);
NVFP4_API nvfp4_dialect nvfp4_qconfig_dialect(const nvfp4_qconfig *qc);
/* Producer and version as the files name them ("quark 0.13", "modelopt
 * 0.47.0", "compressed-tensors 0.13.0"; "" when unknown); never NULL. */
NVFP4_API const char *nvfp4_qconfig_producer(const nvfp4_qconfig *qc);
/* KV-cache quantization the config asks for ("FP8", ...) or "" (none).
 * The library keeps the KV cache in float32, as vLLM does with its default
 * kv_cache_dtype "auto". */
NVFP4_API const char *nvfp4_qconfig_kv_cache(const nvfp4_qconfig *qc);

/* ---- a validated quantized (or plain) Linear ------------------------------- */

typedef struct {
    char prefix[NVFP4_ERROR_FIELD_LENGTH];
    nvfp4_scheme scheme;
    int64_t n, k;                 /* outputs, inputs */
    /* NVFP4 (scheme != NONE): */
    const uint8_t *weight;        /* [n, k/2] packed E2M1 */
    const uint8_t *scales;        /* [n, k/16] E4M3 (owned_scales when rescaled) */
    float weight_scale_2;         /* global weight scale, a multiplier */
    float input_scale;            /* activation scale (multiplier); 0 for W4A16 */
    /* Unquantized (scheme == NONE): the F32/BF16/F16 [n, k] weight tensor. */
    const nvfp4_tensor *dense;
    /* Optional bias [n], F32/BF16/F16, unquantized. */
    const nvfp4_tensor *bias;
    uint8_t *owned_scales;        /* non-NULL after a lossy rescale; freed by release */
    /* compressed-tensors: the checkpoint's input_global_scale (a divisor, §5's
     * gs itself, which the CPU backend uses as it is); input_scale is then the
     * float32 multiplier whose reciprocal is nearest it.  0 for the other
     * dialects (gs = 1 / input_scale).  Fused groups take the max gs. */
    float input_gs;
} nvfp4_linear;

/* Load and validate PREFIX.{weight,weight_scale,weight_scale_2,input_scale_2 |
 * input_scale,bias} from CK for SCHEME.  n, k: the expected shape from the
 * model config, or -1 to take it from the tensors.  Rejects every hazard of
 * §8 with an error naming the tensor and the value found. */
NVFP4_API nvfp4_status nvfp4_linear_load(nvfp4_checkpoint *ck, const char *prefix,
                                         nvfp4_scheme scheme, int64_t n, int64_t k,
                                         nvfp4_linear *out, nvfp4_error *err);
/* The same for the tensor names and scale directions of DIALECT:
 * Quark and ModelOpt: weight, weight_scale, weight_scale_2 and input_scale(_2),
 * multipliers; compressed-tensors: weight_packed, weight_scale,
 * weight_global_scale and input_global_scale, divisors (weight_scale_2 =
 * 1.0f / weight_global_scale, as vLLM computes it). */
NVFP4_API nvfp4_status nvfp4_linear_load_dialect(nvfp4_checkpoint *ck, const char *prefix,
                                                 nvfp4_scheme scheme, nvfp4_dialect dialect,
                                                 int64_t n, int64_t k, nvfp4_linear *out,
                                                 nvfp4_error *err);
NVFP4_API void nvfp4_linear_release(nvfp4_linear *lin);
/* Dequantize the whole [n, k] weight to float32 (any scheme). */
NVFP4_API nvfp4_status nvfp4_linear_dequant(const nvfp4_linear *lin, float *out,
                                            nvfp4_error *err);

/* Fused groups (§4): SHARDS (q/k/v, gate/up, an expert's w1/w3) must carry
 * identical weight_scale_2.  When they differ: with rescale == 0, fail with
 * NVFP4_ERR_SCALE_MISMATCH naming LAYER, each shard and its scale; with
 * rescale == NVFP4_FUSE_KEEP_SCALES, leave every shard's own scale (exact:
 * for callers that then run the shards as separate layers); with any other
 * rescale != 0, rescale each shard's block scales by own/max (re-rounded to
 * E4M3, lossy) so all share the maximum.  *input_scale receives the group's
 * activation scale: the max of the shards' input scales, or for
 * compressed-tensors shards the one whose input_gs is the largest (vLLM;
 * DIALECTS.md); 0 when weight-only. */
#define NVFP4_FUSE_KEEP_SCALES 2
NVFP4_API nvfp4_status nvfp4_linear_fuse_check(const char *layer, nvfp4_linear *shards,
                                               size_t count, int rescale,
                                               float *input_scale, nvfp4_error *err);

#ifdef __cplusplus
}
#endif

#endif /* NVFP4_QUANT_H */
