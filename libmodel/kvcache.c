/* SPDX-License-Identifier: MIT */
/*
 * FP8 E4M3 KV cache of AMD Quark exports made with kv_cache_scheme "fp8"
 * (docs/DIALECTS.md, "KV cache").
 *
 * Quark's export keeps one per-tensor scale per layer for K and one for V,
 * stored as model.layers.L.self_attn.k_proj.output_scale and
 * .v_proj.output_scale (vLLM's QuarkConfig.get_cache_scale maps them to
 * attn.k_scale / attn.v_scale).  vLLM with kv_cache_dtype fp8 stores each
 * key/value element as e4m3(x / scale) (saturated to +-448) and reads it
 * back as e4m3 * scale; the keys are the ones after RoPE (and after the
 * Qwen3 k_norm), what the cache holds.  Here this file loads the scales;
 * a context (context.c) then keeps one-byte pools (NVFP4_KV_CACHE_AUTO or
 * _FP8) and the backend's attention_paged encodes each new K/V row as it
 * stores it and decodes the cached ones as it reads them
 * (NVFP4_KV_ELEM_FP8_E4M3 in nvfp4/kernels.h): the values vLLM's fp8 cache
 * reads back, at a quarter of float32's bytes.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model-internal.h"

/* The output_tensors spec of one kv_cache_quant_config entry, checked:
 * static per-tensor fp8_e4m3 is what vLLM runs. */
static nvfp4_status check_spec(const nvfp4_config *cfg, const char *pattern, json_t *spec,
                               nvfp4_error *err)
{
    json_t *ot = json_object_get(spec, "output_tensors");
    const char *dt, *qs;
    char key[256];

    snprintf(key, sizeof(key), "quantization_config.kv_cache_quant_config.%s.output_tensors",
             pattern);
    if (json_is_array(ot) && json_array_size(ot) == 1)
        ot = json_array_get(ot, 0);
    if (!json_is_object(ot))
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, nvfp4_config_path(cfg), key, -1,
                               "expected one output_tensors spec (the KV-cache quantizer) "
                               "for %s", pattern);
    dt = json_string_value(json_object_get(ot, "dtype"));
    qs = json_string_value(json_object_get(ot, "qscheme"));
    if (!dt || strcmp(dt, "fp8_e4m3") != 0 || !qs || strcmp(qs, "per_tensor") != 0 ||
        json_is_true(json_object_get(ot, "is_dynamic")))
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, nvfp4_config_path(cfg), key, -1,
                               "KV-cache quantization %s %s%s is not supported; only a "
                               "static per_tensor fp8_e4m3 KV cache is",
                               dt ? dt : "(no dtype)", qs ? qs : "(no qscheme)",
                               json_is_true(json_object_get(ot, "is_dynamic")) ? " dynamic"
                                                                              : "");
    return NVFP4_OK;
}

/* One scale tensor: a single finite positive F32/BF16/F16 value. */
static nvfp4_status load_scale(nvfp4_model *m, const char *name, float *out, nvfp4_error *err)
{
    const nvfp4_tensor *t;
    uint64_t numel = 1;

    if (!nvfp4_checkpoint_has(m->ck, name))
        return nvfp4_error_set(err, NVFP4_ERR_NOT_FOUND, nvfp4_checkpoint_dir(m->ck), name, -1,
                               "config.json's kv_cache_quant_config asks for an FP8 KV cache "
                               "but this layer's scale tensor is missing");
    TRY(nvfp4_checkpoint_get(m->ck, name, &t, err));
    for (int d = 0; d < t->ndim; d++)
        numel *= (uint64_t)t->shape[d];
    if (numel != 1)
        return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, t->file, name, -1,
                               "expected one per-tensor KV-cache scale, found %d "
                               "dimension(s) holding %llu values",
                               t->ndim, (unsigned long long)numel);
    if (nvfp4_quant_read_float(t, 0, out))
        return nvfp4_error_set(err, NVFP4_ERR_BAD_DTYPE, t->file, name, -1,
                               "dtype is %s; expected F32, BF16 or F16",
                               nvfp4_dtype_name(t->dtype));
    if (!isfinite(*out) || !(*out > 0.0f))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, t->file, name, -1,
                               "KV-cache scale is %g; expected a finite value > 0",
                               (double)*out);
    return NVFP4_OK;
}

nvfp4_status nvfp4m_kv_load(nvfp4_model *m, nvfp4_error *err)
{
    json_t *qc, *kv, *spec;
    const char *pattern;
    char name[320];

    m->kv_fp8 = 0;
    if (nvfp4_qconfig_dialect(m->qc) != NVFP4_DIALECT_QUARK)
        return NVFP4_OK; /* ModelOpt / compressed-tensors: float32, vLLM's "auto" */
    qc = nvfp4_config_json(m->cfg, "quantization_config");
    kv = json_object_get(qc, "kv_cache_quant_config");
    if (!json_is_object(kv) || json_object_size(kv) == 0)
        return NVFP4_OK;
    json_object_foreach(kv, pattern, spec)
        TRY(check_spec(m->cfg, pattern, spec, err));
    for (int64_t l = 0; l < m->hp.layers; l++) {
        layer_t *L = &m->layers[l];
        snprintf(name, sizeof(name), "model.layers.%lld.self_attn.k_proj.output_scale",
                 (long long)l);
        TRY(load_scale(m, name, &L->k_scale, err));
        snprintf(name, sizeof(name), "model.layers.%lld.self_attn.v_proj.output_scale",
                 (long long)l);
        TRY(load_scale(m, name, &L->v_scale, err));
    }
    m->kv_fp8 = 1;
    return NVFP4_OK;
}
