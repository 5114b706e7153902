/* SPDX-License-Identifier: MIT */
/*
 * Checks of a checkpoint against hostile or broken input, done at open so
 * that a bad checkpoint fails in bounded time with a message naming the key
 * or tensor, never by silent NaN logits or by work proportional to a number
 * someone wrote into config.json.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* The fewest tensors one decoder layer can have: two norms, four attention
 * projections and at least one MLP or MoE tensor; plus the embeddings and
 * the final norm once. */
#define MIN_TENSORS_PER_LAYER 7
/* A per-expert (unstacked) MoE layer holds at least gate, up and down of
 * every expert (gpt-oss: gate_up and down). */
#define MIN_TENSORS_PER_EXPERT(arch) ((arch)->names[TR_EXP_GATE_UP] ? 2 : 3)

static int64_t moe_layer_count(const hparams *hp, const arch_desc *arch, int64_t *first)
{
    int64_t n = 0;

    *first = -1;
    for (int64_t l = 0; l < hp->layers; l++)
        if (nvfp4m_hparams_layer_is_moe(hp, arch, l)) {
            if (*first < 0)
                *first = l;
            n++;
        }
    return n;
}

nvfp4_status nvfp4m_check_counts(nvfp4_checkpoint *ck, const nvfp4_config *cfg,
                                 const arch_desc *arch, const hparams *hp, nvfp4_error *err)
{
    const char *path = nvfp4_config_path(cfg);
    uint64_t count = nvfp4_checkpoint_count(ck);
    int64_t first, nmoe;
    char name[160];

    /* hp->layers <= NVFP4M_DIM_MAX (arch.c): no overflow in uint64. */
    if ((uint64_t)hp->layers * MIN_TENSORS_PER_LAYER + 2 > count)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, path, "num_hidden_layers", -1,
                               "%lld layers need at least %" PRIu64 " tensors (%d per "
                               "layer, embeddings, final norm); %s holds %" PRIu64,
                               (long long)hp->layers,
                               (uint64_t)hp->layers * MIN_TENSORS_PER_LAYER + 2,
                               MIN_TENSORS_PER_LAYER, nvfp4_checkpoint_dir(ck), count);
    if (arch->moe == MOE_NONE || hp->experts <= 0)
        return NVFP4_OK;
    nmoe = moe_layer_count(hp, arch, &first);
    if (nmoe == 0)
        return NVFP4_OK;
    /* Stacked experts (transformers >= 5): one [E, 2I, H] tensor per layer,
     * whose first dimension is the expert count (under either name table). */
    for (int b = 0; b < 2; b++) {
        const char *const *names = b ? arch->moe_alt : arch->names;
        const nvfp4_tensor *t;
        if (!names || !names[TR_EXP_GATE_UP_STACKED] ||
            nvfp4m_name(name, sizeof(name), names[TR_EXP_GATE_UP_STACKED], first, 0) < 0 ||
            !nvfp4_checkpoint_has(ck, name))
            continue;
        if (nvfp4_checkpoint_get(ck, name, &t, err))
            return err ? err->status : NVFP4_ERR_IO;
        if (t->ndim != 3 || t->shape[0] != hp->experts) {
            char shp[128];
            nvfp4_tensor_shape_text(t, shp, sizeof(shp));
            return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, t->file, name, -1,
                                   "stacked experts have shape %s; config.json's %lld "
                                   "experts need [%lld, 2 * moe_intermediate_size, "
                                   "hidden_size]", shp, (long long)hp->experts,
                                   (long long)hp->experts);
        }
        return NVFP4_OK;
    }
    /* experts <= NVFP4M_DIM_MAX, nmoe <= layers <= count / 7. */
    if ((uint64_t)hp->experts > count / (uint64_t)MIN_TENSORS_PER_EXPERT(arch) / (uint64_t)nmoe)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, path,
                               /* arch.c's order of the three names */
                               nvfp4_config_has(cfg, "num_experts")         ? "num_experts"
                               : nvfp4_config_has(cfg, "num_local_experts") ? "num_local_experts"
                               : nvfp4_config_has(cfg, "n_routed_experts")  ? "n_routed_experts"
                                                                            : "num_experts",
                               -1,
                               "%lld experts in %lld MoE layer(s) need at least %d "
                               "tensors each; %s holds %" PRIu64 " tensors",
                               (long long)hp->experts, (long long)nmoe,
                               MIN_TENSORS_PER_EXPERT(arch), nvfp4_checkpoint_dir(ck), count);
    return NVFP4_OK;
}

/* The 16- or 32-bit element at Q, in the host's order. */
static inline uint32_t elem_at(const unsigned char *q, size_t esz)
{
    uint16_t h;
    uint32_t w;

    if (esz == 2) {
        memcpy(&h, q, 2);
        return h;
    }
    memcpy(&w, q, 4);
    return w;
}

/* Whether elements I0 .. I1-1 of ESZ (2 or 4, a constant at each call)
 * bytes at P hold one with MASK's bits all set: no early exit, so that the
 * compiler runs it in vector lanes. */
static inline int any_masked(const unsigned char *p, uint64_t i0, uint64_t i1, size_t esz,
                             uint32_t mask)
{
    unsigned any = 0;
    uint64_t i = i0;

#if defined(__GNUC__)
    /* 16 bytes at a time, twice an iteration, in GCC's generic vectors
     * (SSE2, NEON; a wider vector type is split element by element where
     * the target's vectors are 16 bytes): -O2 leaves the scalar loop below
     * scalar */
    if (esz == 4) {
        typedef uint32_t v4u __attribute__((vector_size(16)));
        typedef int32_t v4i __attribute__((vector_size(16)));
        const v4u m = {mask, mask, mask, mask};
        v4i acc = {0};

        for (; i + 8 <= i1; i += 8) {
            v4u x, y;
            memcpy(&x, p + 4 * i, sizeof(x));
            memcpy(&y, p + 4 * i + 16, sizeof(y));
            acc |= ((x & m) == m) | ((y & m) == m);
        }
        for (int l = 0; l < 4; l++)
            any |= acc[l] != 0;
    } else if (esz == 2) {
        typedef uint16_t v8u __attribute__((vector_size(16)));
        typedef int16_t v8i __attribute__((vector_size(16)));
        const uint16_t h = (uint16_t)mask;
        const v8u m = {h, h, h, h, h, h, h, h};
        v8i acc = {0};

        for (; i + 16 <= i1; i += 16) {
            v8u x, y;
            memcpy(&x, p + 2 * i, sizeof(x));
            memcpy(&y, p + 2 * i + 16, sizeof(y));
            acc |= ((x & m) == m) | ((y & m) == m);
        }
        for (int l = 0; l < 8; l++)
            any |= acc[l] != 0;
    }
#endif
    for (; i < i1; i++)
        any |= (elem_at(p + esz * i, esz) & mask) == mask;
    return any != 0;
}

/* Index of the first of N elements of ESZ (2 or 4, a constant at each
 * call) bytes at P with MASK's bits all set, or UINT64_MAX: stretches of
 * FINITE_STRETCH elements scanned whole (any_masked), the one that holds a
 * hit then element by element (one element at a time, the bf16 embeddings
 * and head of a Llama-3-8B-shaped checkpoint took 0.7 s of its 7 s load). */
#define FINITE_STRETCH 4096
static inline uint64_t first_masked(const unsigned char *p, uint64_t n, size_t esz,
                                    uint32_t mask)
{
    for (uint64_t i0 = 0; i0 < n; i0 += FINITE_STRETCH) {
        const uint64_t i1 = n - i0 < FINITE_STRETCH ? n : i0 + FINITE_STRETCH;

        if (!any_masked(p, i0, i1, esz, mask))
            continue;
        for (uint64_t i = i0; i < i1; i++)
            if ((elem_at(p + esz * i, esz) & mask) == mask)
                return i;
    }
    return UINT64_MAX;
}

/* Index of the first NaN or Inf element, or UINT64_MAX: the exponent field
 * all ones is both.  The data need not be aligned, hence memcpy. */
static uint64_t first_nonfinite(const nvfp4_tensor *t)
{
    const unsigned char *p = t->data;

    switch (t->dtype) {
    case NVFP4_DTYPE_F32:
        return first_masked(p, t->numel, 4, 0x7F800000u);
    case NVFP4_DTYPE_BF16:
        return first_masked(p, t->numel, 2, 0x7F80u);
    case NVFP4_DTYPE_F16:
        return first_masked(p, t->numel, 2, 0x7C00u);
    case NVFP4_DTYPE_F64: /* rare: element by element */
        for (uint64_t i = 0; i < t->numel; i++) {
            uint64_t v;
            memcpy(&v, p + 8 * i, 8);
            if ((v & UINT64_C(0x7FF0000000000000)) == UINT64_C(0x7FF0000000000000))
                return i;
        }
        return UINT64_MAX;
    default:
        return UINT64_MAX;
    }
}

nvfp4_status nvfp4m_check_finite(nvfp4_checkpoint *ck, nvfp4_error *err)
{
    for (size_t i = 0; i < nvfp4_checkpoint_count(ck); i++) {
        const char *name = nvfp4_checkpoint_name(ck, i);
        const nvfp4_tensor *t;
        uint64_t bad;

        /* libquant's Linear loader checks the scales itself (finite and
         * > 0, §8, with a message about scales) */
        if (nvfp4_linear_is_scale_tensor(name))
            continue;
        if (nvfp4_checkpoint_get(ck, name, &t, err))
            return err ? err->status : NVFP4_ERR_IO;
        bad = first_nonfinite(t);
        /* the scan faulted the whole tensor in: give the pages back, so that
         * only what the model reads stays resident (a rank of a split model
         * reads its rows of an embedding, not all of them) */
        nvfp4_checkpoint_release_pages(ck, t->data, (size_t)t->nbytes);
        if (bad != UINT64_MAX) {
            size_t es = nvfp4_dtype_size(t->dtype);
            float v = 0;
            nvfp4_quant_read_float(t, bad, &v);
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, t->file, name,
                                   (int64_t)(t->offset + bad * es),
                                   "element %" PRIu64 " of this unquantized %s tensor is %g; "
                                   "expected finite weights (a NaN or infinity here turns "
                                   "every logit into NaN)",
                                   bad, nvfp4_dtype_name(t->dtype), (double)v);
        }
    }
    return NVFP4_OK;
}

nvfp4_status nvfp4m_check_tokenizer(const nvfp4_tokenizer *tok, const char *path,
                                    int64_t vocab, nvfp4_error *err)
{
    size_t n = nvfp4_tokenizer_vocab_size(tok);

    if (n > (uint64_t)vocab)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, path, NULL, -1,
                               "token id %zu does not fit the model's vocabulary of %lld "
                               "(config.json vocab_size): its tokens would be dropped",
                               n - 1, (long long)vocab);
    return NVFP4_OK;
}

nvfp4_status nvfp4m_check_logits(const float *logits, size_t rows, size_t vocab,
                                 size_t pos0, nvfp4_error *err)
{
    /* in stretches, as the checkpoint's tensors (an element at a time it
     * was 1.6 % of a perplexity run) */
    const uint64_t bad =
        first_masked((const unsigned char *)logits, (uint64_t)rows * vocab, 4, 0x7F800000u);
    uint32_t v;

    if (bad == UINT64_MAX)
        return NVFP4_OK;
    memcpy(&v, &logits[bad], 4);
    return nvfp4_error_set(err, NVFP4_ERR_NONFINITE, NULL, NULL, -1,
                           "the logit of token %zu at position %zu is %s: the "
                           "forward pass overflowed float32 (check the "
                           "checkpoint's scales and weights)",
                           (size_t)(bad % vocab), pos0 + (size_t)(bad / vocab),
                           (v & 0x7FFFFFu) ? "NaN" : "infinite");
}
