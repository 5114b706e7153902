/* SPDX-License-Identifier: MIT */
/**
 * @file nvfp4/quant.h
 * @brief The numerics layer: FP4 E2M1 and FP8 E4M3 codecs, NVFP4
 * (de)quantization exactly as Quark and vLLM compute it, Quark's
 * quantization_config and validated views of quantized Linear layers
 * (link with @c pkg-config @c nvfp4-quant).
 *
 * Built on nvfp4/format.h; knows nothing about devices or models.
 * Section numbers (§) refer to the project's NVFP4 specification
 * (quark-nvfp4-spec.md), cited by the code as well.
 *
 * @par Threads
 * The codecs and row functions are pure: they may be called from any
 * number of threads at once.  An ::nvfp4_qconfig is read-only after
 * nvfp4_qconfig_parse() and may be shared between threads.  An
 * ::nvfp4_linear is a plain struct: concurrent readers are fine, but
 * nvfp4_linear_load() reads the checkpoint through nvfp4_checkpoint_get(),
 * which needs external locking on a shared checkpoint, and
 * nvfp4_linear_fuse_check() may modify the shards it is given.
 *
 * @par Errors
 * As in nvfp4/format.h: a non-zero ::nvfp4_status, and the optional
 * ::nvfp4_error names the file, the tensor or JSON key and what was
 * expected against what was found.
 */
#ifndef NVFP4_QUANT_H
#define NVFP4_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include <nvfp4/format.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Elements per NVFP4 block (one E4M3 block scale each). */
#define NVFP4_BLOCK 16
/** Largest finite E4M3 (FN) value. */
#define NVFP4_E4M3_MAX 448.0f
/** Largest E2M1 value. */
#define NVFP4_E2M1_MAX 6.0f

/**
 * The version of the libnvfp4-quant library in use.
 * @return a static string such as "0.1.0"
 */
NVFP4_API const char *nvfp4_quant_version(void);

/* ---- codecs (§1) ---------------------------------------------------------- */

/**
 * Decode an E2M1 (FP4) code.
 * @param nibble the code in the low 4 bits (the high bits are ignored)
 * @return its value, one of 0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6; code 0x8
 *         (-0) decodes to -0.0f
 */
NVFP4_API float nvfp4_fp4_decode(uint8_t nibble);
/**
 * Encode a float as E2M1: round to nearest, ties to even, on the E2M1
 * grid, saturating at ±6.
 * @param x the value
 * @return the code (0 to 15); a value that rounds to zero, and NaN, give
 *         +0 (0x0)
 */
NVFP4_API uint8_t nvfp4_fp4_encode(float x);
/**
 * Decode an E4M3FN (FP8) byte, subnormals included.
 * @param b the byte
 * @return its value; 0x7F and 0xFF are NaN
 */
NVFP4_API float nvfp4_fp8_e4m3_decode(uint8_t b);
/**
 * Encode a float as E4M3FN as PyTorch's x.clamp(-448, 448).to(float8_e4m3fn)
 * does: clamped to ±448 (infinities too), then rounded to nearest even.
 * @param x the value
 * @return the byte; NaN gives the NaN code 0x7F with its sign, the sign of
 *         zero is kept
 */
NVFP4_API uint8_t nvfp4_fp8_e4m3_encode(float x);
/**
 * Encode a float as bfloat16, round to nearest even (overflow gives
 * infinity, NaN a quiet NaN, as PyTorch).
 * @param x the value
 * @return the bfloat16 bits
 */
NVFP4_API uint16_t nvfp4_bf16_encode(float x);
/**
 * Decode bfloat16 (exact).
 * @param h the bfloat16 bits
 * @return the value
 */
NVFP4_API float nvfp4_bf16_decode(uint16_t h);
/**
 * Encode a float as IEEE binary16, round to nearest even (subnormals;
 * overflow gives infinity).
 * @param x the value
 * @return the half-precision bits
 */
NVFP4_API uint16_t nvfp4_f16_encode(float x);
/**
 * Decode IEEE binary16 (exact).
 * @param h the half-precision bits
 * @return the value
 */
NVFP4_API float nvfp4_f16_decode(uint16_t h);
/**
 * Read one element of an F32, BF16 or F16 tensor as float.
 * @param t the tensor (its data is read)
 * @param i element index, below t->numel
 * @param out where to store the value
 * @return 0; -1 for another dtype, an index out of range or a NULL
 *         argument (nothing stored)
 */
NVFP4_API int nvfp4_quant_read_float(const nvfp4_tensor *t, uint64_t i, float *out);

/* ---- NVFP4 arithmetic (§2, §5, §7) --------------------------------------- */

/**
 * Dequantize one row of NVFP4 weights (§2):
 * W = E2M1 × (E4M3(block scale) × global), block scale times global first.
 * @param packed @p k / 2 bytes, element 2i in the low nibble of byte i
 * @param scales @p k / 16 E4M3 block scales
 * @param global the global weight scale (weight_scale_2, a multiplier)
 * @param k elements in the row, a multiple of 16 (not checked)
 * @param out @p k floats
 */
NVFP4_API void nvfp4_quant_dequant_row(const uint8_t *packed, const uint8_t *scales,
                                       float global, size_t k, float *out);
/**
 * The same as nvfp4_quant_dequant_row(), rounded to bfloat16 (to nearest
 * even, once, from the float32 result).
 * @param packed @p k / 2 bytes of E2M1 codes
 * @param scales @p k / 16 E4M3 block scales
 * @param global the global weight scale
 * @param k elements in the row, a multiple of 16 (not checked)
 * @param out @p k bfloat16 values
 */
NVFP4_API void nvfp4_quant_dequant_row_bf16(const uint8_t *packed,
                                            const uint8_t *scales, float global,
                                            size_t k, uint16_t *out);

/**
 * Quantize-dequantize one row of activations exactly as vLLM's emulation
 * formula does (§5), with gs = 1 / input_scale, in float32 and in its order.
 * The result stays float32 (the caller casts to bf16 when it emulates
 * vLLM's bf16 activations).  An all-zero block gives zeros; a block
 * holding NaN gives unspecified values (nothing traps).
 * @param x @p k floats
 * @param k elements, a multiple of 16 (not checked)
 * @param input_scale the activation scale: finite, > 0, with a finite
 *        reciprocal, as nvfp4_linear_load() guarantees (not checked here)
 * @param out @p k floats; may be @p x (in place)
 */
NVFP4_API void nvfp4_quant_qdq_row(const float *x, size_t k, float input_scale,
                                   float *out);
/**
 * nvfp4_quant_qdq_row() with the global activation scale given directly
 * (what compressed-tensors stores as input_global_scale, docs/DIALECTS.md).
 * @param x @p k floats
 * @param k elements, a multiple of 16 (not checked)
 * @param gs the global scale, a divisor: finite, > 0 (not checked)
 * @param out @p k floats; may be @p x (in place)
 */
NVFP4_API void nvfp4_quant_qdq_row_gs(const float *x, size_t k, float gs, float *out);

/**
 * Quark's global weight scale (§7): float32(amax) / 2688 (448 × 6).
 * @param amax the largest magnitude of the weight, or of all members of a
 *        group that shares one scale
 * @return the scale; FLT_EPSILON where the quotient is 0
 */
NVFP4_API float nvfp4_quant_global_scale(float amax);
/**
 * Quark's weight quantizer (§7): per block the E4M3 scale of amax / (6 ×
 * global) (a zero scale becomes 1.0), then the E2M1 codes of W / (scale ×
 * global).
 * @param w the [@p n, @p k] float32 weight, row-major
 * @param n rows
 * @param k columns, a multiple of 16 (not checked)
 * @param global the global scale (nvfp4_quant_global_scale())
 * @param packed [@p n, @p k / 2] bytes of codes, element 2i in the low nibble
 * @param scales [@p n, @p k / 16] E4M3 block scales
 */
NVFP4_API void nvfp4_quant_weight(const float *w, size_t n, size_t k, float global,
                                  uint8_t *packed, uint8_t *scales);

/* ---- Quark quantization_config (§3) ------------------------------------- */

/** How one Linear layer is stored and run. */
typedef enum {
    NVFP4_SCHEME_NONE = 0,   /**< unquantized (excluded, or no config) */
    NVFP4_SCHEME_W4A4,       /**< NVFP4 weights and activations */
    NVFP4_SCHEME_W4A16,      /**< NVFP4 weights only */
} nvfp4_scheme;

/**
 * The name of a scheme.
 * @param s the scheme
 * @return "none", "w4a4", "w4a16", or "unknown" for another value (static)
 */
NVFP4_API const char *nvfp4_scheme_name(nvfp4_scheme s);

/** A parsed Quark quantization_config (opaque).  It keeps its own
 *  reference to the JSON, so it stays valid after the ::nvfp4_config it
 *  came from is freed. */
typedef struct nvfp4_qconfig nvfp4_qconfig;

/**
 * Parse config.json's quantization_config.  A config without one (or a
 * NULL @p cfg) yields a qconfig under which every layer is
 * ::NVFP4_SCHEME_NONE.  A quant_method other than "quark", an
 * export.weight_format other than "real_quantized" and a global config that
 * is not NVFP4 are refused here; per-layer configs are checked when a layer
 * resolves to them.
 * @param cfg the config, or NULL
 * @param err filled on failure, or NULL
 * @return the qconfig, to be freed with nvfp4_qconfig_free(); NULL on
 *         failure: ::NVFP4_ERR_UNSUPPORTED (what was found), ::NVFP4_ERR_INVALID
 *         (a missing key), ::NVFP4_ERR_TYPE, ::NVFP4_ERR_NOMEM, naming the
 *         config file and the key
 */
NVFP4_API nvfp4_qconfig *nvfp4_qconfig_parse(const nvfp4_config *cfg, nvfp4_error *err);
/**
 * Free a qconfig.
 * @param qc the qconfig, or NULL (nothing is done)
 */
NVFP4_API void nvfp4_qconfig_free(nvfp4_qconfig *qc);
/**
 * Resolve the scheme of a Linear layer, first match wins: exclude (names,
 * fnmatch patterns, "re:" regular expressions anchored at the start) ->
 * layer_quant_config (fnmatch patterns with '*', else substrings) ->
 * layer_type_quant_config["Linear"] -> global_quant_config.
 * @param qc the qconfig
 * @param layer the layer's name, e.g. "model.layers.0.self_attn.q_proj"
 * @param out where to store the scheme (::NVFP4_SCHEME_NONE on failure)
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_UNSUPPORTED for a layer whose config is
 *         MXFP4, FP8, ..., naming what was found and the config key;
 *         ::NVFP4_ERR_TYPE; ::NVFP4_ERR_INVALID for a NULL argument
 */
NVFP4_API nvfp4_status nvfp4_qconfig_resolve(const nvfp4_qconfig *qc, const char *layer,
                                             nvfp4_scheme *out, nvfp4_error *err);

/* ---- checkpoint dialects (docs/DIALECTS.md) -------------------------------- */

/**
 * Who wrote a checkpoint's quantization config.  Besides Quark,
 * nvfp4_qconfig_parse() reads NVIDIA ModelOpt (quant_method "modelopt" in
 * config.json, or hf_quant_config.json beside it) and compressed-tensors /
 * llm-compressor (quant_method "compressed-tensors", format
 * "nvfp4-pack-quantized") configs; nvfp4_qconfig_resolve() answers for each
 * the way vLLM decides (ModelOpt: exclude_modules globs; compressed-tensors:
 * ignore, then config_groups targets by exact name > "re:" regex > class
 * name "Linear").
 */
typedef enum {
    NVFP4_DIALECT_NONE = 0,            /**< no quantization_config */
    NVFP4_DIALECT_QUARK,               /**< AMD Quark */
    NVFP4_DIALECT_MODELOPT,            /**< NVIDIA ModelOpt */
    NVFP4_DIALECT_COMPRESSED_TENSORS,  /**< compressed-tensors (llm-compressor) */
} nvfp4_dialect;

/**
 * @param d a dialect
 * @return "none", "quark", "modelopt" or "compressed-tensors": a static
 *         string, never NULL
 */
NVFP4_API const char *nvfp4_dialect_name(nvfp4_dialect d);
/**
 * @param qc a parsed config
 * @return its dialect
 */
NVFP4_API nvfp4_dialect nvfp4_qconfig_dialect(const nvfp4_qconfig *qc);
/**
 * @param qc a parsed config
 * @return producer and version as the files name them ("quark 0.13",
 *         "modelopt 0.47.0", "compressed-tensors 0.13.0"; "" when unknown);
 *         never NULL, valid until @p qc is freed
 */
NVFP4_API const char *nvfp4_qconfig_producer(const nvfp4_qconfig *qc);
/**
 * @param qc a parsed config
 * @return the KV-cache quantization the config asks for ("FP8", ...) or ""
 *         (none); valid until @p qc is freed.  libmodel runs a Quark FP8
 *         KV cache (quantize-dequantize of every K/V write with the
 *         per-layer scales, as vLLM's kv_cache_dtype "fp8"); ModelOpt's and
 *         compressed-tensors' KV caches stay float32, as vLLM runs them
 *         with its default kv_cache_dtype "auto".
 */
NVFP4_API const char *nvfp4_qconfig_kv_cache(const nvfp4_qconfig *qc);

/* ---- a validated quantized (or plain) Linear ------------------------------- */

/**
 * A validated view of one Linear layer of a checkpoint.  Its pointers
 * point into the checkpoint's mapping (nothing is copied), so the view is
 * valid until the ::nvfp4_checkpoint is freed; the caller owns the struct
 * and releases it with nvfp4_linear_release().
 */
typedef struct {
    char prefix[NVFP4_ERROR_FIELD_LENGTH]; /**< the layer's name */
    nvfp4_scheme scheme;          /**< how it is stored */
    int64_t n;                    /**< outputs (rows of the weight) */
    int64_t k;                    /**< inputs (columns), a multiple of 16 for NVFP4 */
    /* NVFP4 (scheme != NONE): */
    const uint8_t *weight;        /**< NVFP4: [n, k/2] packed E2M1 */
    const uint8_t *scales;        /**< NVFP4: [n, k/16] E4M3, finite and >= 0
                                       (owned_scales after a rescale) */
    float weight_scale_2;         /**< NVFP4: global weight scale, a multiplier */
    float input_scale;            /**< W4A4: activation scale (multiplier); 0 for W4A16 */
    const nvfp4_tensor *dense;    /**< NONE: the F32/BF16/F16 [n, k] weight tensor */
    const nvfp4_tensor *bias;     /**< optional bias [n], F32/BF16/F16, or NULL */
    uint8_t *owned_scales;        /**< non-NULL after a lossy rescale; freed by
                                       nvfp4_linear_release() */
    float input_gs;               /**< compressed-tensors: the checkpoint's
                                       input_global_scale (a divisor, §5's gs);
                                       input_scale is then the float32 multiplier
                                       whose reciprocal is nearest it.  0 for the
                                       other dialects (gs = 1 / input_scale).
                                       Fused groups take the max gs. */
} nvfp4_linear;

/**
 * Load and validate @p prefix .{weight, weight_scale, weight_scale_2,
 * input_scale_2 or input_scale, bias} from a checkpoint for a scheme,
 * refusing every hazard of §8 (wrong dtypes or shapes, K not a multiple of
 * 16, NaN or negative block scales, zero, negative, infinite or NaN global
 * scales, an activation scale whose reciprocal overflows, packed U8 data
 * where the config says unquantized).
 * @param ck the checkpoint (its shards may be opened: see
 *        nvfp4_checkpoint_get() on threads)
 * @param prefix the layer's name, shorter than ::NVFP4_ERROR_FIELD_LENGTH
 * @param scheme the layer's scheme (nvfp4_qconfig_resolve())
 * @param n expected outputs (from the model config), or -1 to take them
 *        from the tensors
 * @param k expected inputs, or -1
 * @param out the view; zeroed first, and on failure left zero but for
 *        its prefix
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_NOT_FOUND (a missing tensor),
 *         ::NVFP4_ERR_BAD_DTYPE, ::NVFP4_ERR_BAD_SHAPE, ::NVFP4_ERR_INVALID
 *         (a bad value, with its byte offset, or a bad argument), naming the
 *         tensor and the value found
 */
NVFP4_API nvfp4_status nvfp4_linear_load(nvfp4_checkpoint *ck, const char *prefix,
                                         nvfp4_scheme scheme, int64_t n, int64_t k,
                                         nvfp4_linear *out, nvfp4_error *err);
/**
 * nvfp4_linear_load() for the tensor names and scale directions of a
 * dialect.  Quark and ModelOpt: weight, weight_scale, weight_scale_2 and
 * input_scale(_2), multipliers; compressed-tensors: weight_packed,
 * weight_scale, weight_global_scale and input_global_scale, divisors
 * (weight_scale_2 = 1.0f / weight_global_scale, as vLLM computes it).
 * @param ck the checkpoint (must outlive the view)
 * @param prefix the layer's name
 * @param scheme the layer's scheme (nvfp4_qconfig_resolve())
 * @param dialect the config's dialect (nvfp4_qconfig_dialect())
 * @param n expected outputs
 * @param k expected inputs
 * @param out the view to fill
 * @param err filled on failure, or NULL
 * @return as nvfp4_linear_load()
 */
NVFP4_API nvfp4_status nvfp4_linear_load_dialect(nvfp4_checkpoint *ck, const char *prefix,
                                                 nvfp4_scheme scheme, nvfp4_dialect dialect,
                                                 int64_t n, int64_t k, nvfp4_linear *out,
                                                 nvfp4_error *err);
/**
 * Check a Linear view's invariants: the one validation of a layer, which
 * nvfp4_linear_load() runs on every view it builds and
 * nvfp4_kweight_upload() on every part it is given (so a hand-made view is
 * held to the same rules as a loaded one).  Checked: a known scheme; n > 0,
 * k > 0, n * k <= 2^48; unquantized: the weight tensor F32/BF16/F16 of n * k
 * elements (and, when @p lin->input_scale is set, k % 16 == 0 and a valid
 * activation scale); NVFP4: k % 16 == 0, weight and block scales present,
 * every block-scale byte finite and >= 0 (§8), weight_scale_2 finite, > 0
 * and 6 * 448 * weight_scale_2 finite; W4A4: input_scale finite and > 0,
 * input_gs 0 (then 1 / input_scale must be finite) or finite and > 0; a
 * bias F32/BF16/F16 of n elements.  Reads every block-scale byte.
 * @param lin the view
 * @param err filled on failure naming the layer (or the tensor) and what
 *        was expected, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_INVALID, ::NVFP4_ERR_BAD_SHAPE or
 *         ::NVFP4_ERR_BAD_DTYPE
 */
NVFP4_API nvfp4_status nvfp4_linear_validate(const nvfp4_linear *lin, nvfp4_error *err);
/**
 * Whether a tensor name is a per-tensor scale of a Linear in any dialect
 * (`weight_scale_2`, `input_scale`, `input_scale_2`, `output_scale`,
 * `weight_global_scale`, `input_global_scale`): the scalars that
 * nvfp4_linear_load() checks itself, with a message about scales.
 * @param name a tensor name, or NULL
 * @return 1 or 0
 */
NVFP4_API int nvfp4_linear_is_scale_tensor(const char *name);
/**
 * Free what a view owns (the rescaled block scales); the view must not be
 * used afterwards.  The checkpoint's data is not touched.
 * @param lin the view, or NULL (nothing is done); a zeroed or failed view
 *        is fine
 */
NVFP4_API void nvfp4_linear_release(nvfp4_linear *lin);
/**
 * Dequantize the whole weight to float32 (any scheme; OpenMP over rows).
 * @param lin a loaded view
 * @param out @p lin->n × @p lin->k floats, row-major
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_INVALID for a NULL argument or a view
 *         that was not loaded
 */
NVFP4_API nvfp4_status nvfp4_linear_dequant(const nvfp4_linear *lin, float *out,
                                            nvfp4_error *err);

/** nvfp4_linear_fuse_check()'s @p rescale that keeps every member's own scale. */
#define NVFP4_FUSE_KEEP_SCALES 2

/**
 * Check a fused group (§4): its members (q/k/v, gate/up, an expert's
 * w1/w3) must carry identical weight_scale_2.  When they differ: with
 * @p rescale == 0, fail; with @p rescale == ::NVFP4_FUSE_KEEP_SCALES, leave
 * every member's own scale (exact: for callers that then run the members as
 * separate layers); with any other @p rescale, rescale each member's block
 * scales by own / max (re-rounded to E4M3, lossy) into memory the member
 * then owns (nvfp4_linear::owned_scales), so that all share the maximum.
 * On failure no member is changed.
 * @param layer the fused layer's name, for messages
 * @param shards the loaded NVFP4 members, of one scheme and one K
 * @param count number of members, at least 1
 * @param rescale nonzero to allow the lossy rescale
 * @param input_scale receives the group's activation scale: the largest of
 *        the members' input scales, or for compressed-tensors members the one
 *        whose input_gs is the largest (vLLM; docs/DIALECTS.md); 0 when
 *        weight-only; may be NULL
 * @param err filled on failure, or NULL
 * @return ::NVFP4_OK; ::NVFP4_ERR_SCALE_MISMATCH naming @p layer, each member
 *         and its scale; ::NVFP4_ERR_INVALID (a member not loaded as NVFP4,
 *         or members of different schemes or K); ::NVFP4_ERR_NOMEM
 */
NVFP4_API nvfp4_status nvfp4_linear_fuse_check(const char *layer, nvfp4_linear *shards,
                                               size_t count, int rescale,
                                               float *input_scale, nvfp4_error *err);

#ifdef __cplusplus
}
#endif

#endif /* NVFP4_QUANT_H */
