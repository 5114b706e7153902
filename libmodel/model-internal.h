/* SPDX-License-Identifier: MIT */
/* The loaded model as model.c (assembly) builds it and context.c (the
 * forward pass over contexts) reads it; not exported. */
#ifndef NVFP4_MODEL_MODEL_INTERNAL_H
#define NVFP4_MODEL_MODEL_INTERNAL_H

#include <pthread.h>

#include "internal.h"
#include "parallel.h"

typedef struct {
    nvfp4_kweight *q, *k, *v, *o;
    float *ln1, *ln2, *q_norm, *k_norm;      /* backend buffers */
    nvfp4_kweight *gu, *down;                /* dense MLP */
    nvfp4_kweight *gu_split[2];              /* gate, up as separate layers, gu NULL */
    int moe;
    nvfp4_kweight *router;
    nvfp4_kweight **w13, **w2;               /* [experts] */
    nvfp4_kweight *sh_gu, *sh_down, *sh_gate;
    float k_scale, v_scale;                  /* FP8 KV cache (kvcache.c); 0: off */
} layer_t;

/* Immutable once nvfp4_model_open returns, except for the default context
 * of the single-sequence wrappers and the lock (see nvfp4/model.h). */
struct nvfp4_model {
    nvfp4_checkpoint *ck;
    const nvfp4_config *cfg;
    const arch_desc *arch;
    char arch_name[96];
    hparams hp;
    nvfp4_qconfig *qc;
    nvfp4_backend *be;
    nvfp4_tokenizer *tok;
    nvfp4_model_options opt;
    int64_t max_ctx;

    nvfp4_linear **lins;                     /* every view, for release */
    size_t nlins, caplins;
    nvfp4_tensor **slices;                   /* per-expert views of 3-D tensors */
    size_t nslices, capslices;
    char **prefixes;                         /* consumed tensor prefixes */
    size_t nprefixes, capprefixes;

    /* dry run: collect missing tensor names instead of loading */
    int dry;
    char *missing;
    size_t nmissing, missing_len;

    nvfp4_kweight *embed, *lm_head;
    float *final_norm, *inv_freq;
    layer_t *layers;
    int split_gu;                            /* some layer has gu_split */
    int kv_fp8;                              /* K/V rows FP8 QDQ'd on write (kvcache.c) */

    /* Serialises the contexts' device work on a backend other than the
     * CPU one (one queue and scratch per GPU backend). */
    pthread_mutex_t lock;
    /* nvfp4_model_forward's context and sequence, created at first use. */
    nvfp4_context *dflt;
    nvfp4_seq dflt_seq;
    /* This rank's part under tensor parallelism (parallel.c); always set. */
    nvfp4m_par *par;
};

/* kvcache.c: read the Quark kv_cache_quant_config and every layer's k/v
 * scales (after the layers are loaded), and the FP8 E4M3 quantize-dequantize
 * of N floats with SCALE: e4m3(x / scale) * scale, in place. */
nvfp4_status nvfp4m_kv_load(nvfp4_model *m, nvfp4_error *err);
void nvfp4m_kv_qdq(float *x, size_t n, float scale);

/* Free the default context (nvfp4_model_free). */
void nvfp4m_default_free(nvfp4_model *m);

#endif
