/* SPDX-License-Identifier: MIT */
/* Tensor parallelism (parallel.c): what part of the model this rank holds,
 * and the hooks model.c (assembly) and context.c (forward) call.  With one
 * rank every hook is the plain operation.  Not exported. */
#ifndef NVFP4_MODEL_PARALLEL_H
#define NVFP4_MODEL_PARALLEL_H

#include <nvfp4/model.h>

struct nvfp4_model;

typedef struct nvfp4m_par {
    nvfp4_comm *comm;
    nvfp4_comm *dcomm;         /* NCCL/RCCL over the same ranks, or NULL */
    int rank, size;
    int64_t heads, h0;         /* attention heads of this rank, the first one */
    int64_t kv_heads, kv0;     /* KV heads it caches (replicated below one per rank) */
    int64_t inter, i0;         /* dense MLP intermediate rows */
    int64_t vocab, v0;         /* embedding / lm_head rows */
    int64_t experts, e0;       /* MoE experts of this rank (expert parallelism) */
    int64_t *vstart;           /* [size + 1] first vocab row of each rank */
    size_t *counts;            /* [size] staging of all-gathers */
    void **owned;              /* column slices copied out of the mapping */
    size_t nowned, capowned;
    float *ha, *hb;            /* host staging, hcap floats each */
    size_t hcap;
    int32_t *hid;              /* local token ids, idcap */
    size_t idcap;
    float *dgather;            /* device all-gather of the logits (dcomm), dgcap floats */
    size_t dgcap;
    struct nvfp4m_par_range {  /* mapped ranges of split views: the whole */
        const uint8_t *lo, *hi; /* tensor and this rank's rows of it */
        const uint8_t *mine_lo, *mine_hi;
    } *others;
    size_t nothers, capothers;
} nvfp4m_par;

/* After config.json is read: the split of m->hp over the world communicator
 * (an error naming what does not divide). */
nvfp4_status nvfp4m_par_open(struct nvfp4_model *m, nvfp4_error *err);
void nvfp4m_par_free(struct nvfp4_model *m);
/* After the backend is open: the backend's device communicator, when every
 * rank has one and none turned it off (NVFP4_DEVICE_COMM=0); else the
 * forward pass stages its collectives through host memory. */
nvfp4_status nvfp4m_par_open_device(struct nvfp4_model *m, nvfp4_error *err);

/* Assembly: cut loaded views to this rank's rows or columns. */
nvfp4_status nvfp4m_par_split_attention(struct nvfp4_model *m, nvfp4_linear *q,
                                        nvfp4_linear *k, nvfp4_linear *v, nvfp4_linear *o,
                                        nvfp4_error *err);
nvfp4_status nvfp4m_par_split_mlp(struct nvfp4_model *m, const char *pre, nvfp4_linear *gate,
                                  nvfp4_linear *up, nvfp4_linear *down, nvfp4_error *err);
nvfp4_status nvfp4m_par_split_vocab(struct nvfp4_model *m, nvfp4_linear *embed,
                                    nvfp4_linear *head, nvfp4_error *err);

/* Does this rank hold expert E? (load_moe uploads only those.) */
int nvfp4m_par_owns_expert(const struct nvfp4_model *m, int64_t e);
/* Give back the mapped pages of a view this rank does not upload. */
void nvfp4m_par_drop(struct nvfp4_model *m, const nvfp4_linear *lin);

/* After upload() of PARTS to a backend that holds its own copy: free the
 * column slices copied out for it (the kweight is the copy now). */
void nvfp4m_par_uploaded(struct nvfp4_model *m, nvfp4_linear *parts, size_t n);
/* After the whole model is loaded: give back the mapped pages of the other
 * ranks' rows of the row-split tensors (the kernel maps page-cache
 * neighbours of the pages this rank reads, large folios whole). */
void nvfp4m_par_loaded(struct nvfp4_model *m);

/* Forward pass. */
nvfp4_status nvfp4m_par_check_batch(struct nvfp4_model *m, const nvfp4_batch_entry *ent,
                                    size_t nent, nvfp4_error *err);
nvfp4_status nvfp4m_par_embed(struct nvfp4_model *m, int32_t *ids, const int32_t *h_ids,
                              size_t n, float *x, nvfp4_error *err);
nvfp4_status nvfp4m_par_reduce(struct nvfp4_model *m, float *y, size_t count,
                               nvfp4_error *err);
/* The MoE block over this rank's experts, all-reduced (TOPI/TOPW: the
 * router's choice, on the backend; overwritten). */
nvfp4_status nvfp4m_par_moe(struct nvfp4_model *m, nvfp4_kweight *const *w13,
                            nvfp4_kweight *const *w2, const float *x, size_t n, int32_t *topi,
                            float *topw, float *y, nvfp4_error *err);
nvfp4_status nvfp4m_par_lm_head(struct nvfp4_model *m, const float *h, size_t rows,
                                float *logits, nvfp4_error *err);

#endif
