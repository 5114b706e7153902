/* SPDX-License-Identifier: MIT */
/*
 * Tensor parallelism over the ranks of the world communicator (Megatron-LM's
 * split, as vLLM runs it):
 *   - q/k/v and gate/up are column-parallel: each rank holds the output rows
 *     of its attention heads (KV heads: of its query heads' groups, so a KV
 *     head is replicated when there are fewer KV heads than ranks) and of
 *     its stretch of the intermediate rows;
 *   - o_proj and down_proj are row-parallel: each rank holds the input
 *     columns of its heads / intermediate stretch, cut at 16-element block
 *     boundaries (an NVFP4 block and its E4M3 scale stay whole, and the
 *     activations' §5 qdq, per block, is unchanged), and the partial sums
 *     are all-reduced;
 *   - the embedding and the lm_head are vocab-parallel: a rank embeds the
 *     tokens of its rows (the others contribute zeros to an all-reduce) and
 *     computes its rows' logits, which are all-gathered;
 *   - the KV cache holds this rank's KV heads only;
 *   - MoE layers are expert-parallel: each rank holds a contiguous stretch
 *     of the experts, the router (and a shared expert) is replicated, each
 *     rank runs the tokens routed to its experts and the outputs are
 *     all-reduced.  The CPU MoE adds the experts' weighted outputs in expert
 *     order, and the all-reduce adds the ranks' sums in rank order, so the
 *     MoE block is the same bits as in one process (adding a zero is exact).
 * Row slices are views into the mapping, so a rank faults in only its rows;
 * column slices are copied out (the mapped rows are strided), and the pages
 * of every split tensor are given back, so that after loading a rank holds
 * about 1/N of the weights.  The column-parallel products are the same
 * bits as the unsplit ones (one accumulator per output); the row-parallel
 * ones add N partial sums, which reorders float32 additions: logits agree
 * with the single-process run to summation error, not bit for bit (the
 * all-reduce itself sums in rank order, so every rank and every run gets
 * the same bits).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model-internal.h"

static nvfp4_status nomem(nvfp4_error *err)
{
    return nvfp4_error_set(err, NVFP4_ERR_NOMEM, NULL, NULL, -1, "out of memory");
}

nvfp4_status nvfp4m_par_open(nvfp4_model *m, nvfp4_error *err)
{
    const hparams *hp = &m->hp;
    nvfp4m_par *p;
    nvfp4_comm *w;
    int64_t N, g, blocks;

    w = nvfp4_comm_world(err);
    if (!w)
        return err ? err->status : NVFP4_ERR_BACKEND;
    p = calloc(1, sizeof(*p));
    if (!p)
        return nomem(err);
    m->par = p;
    p->comm = w;
    p->rank = nvfp4_comm_rank(w);
    p->size = nvfp4_comm_size(w);
    N = p->size;
    p->vstart = calloc((size_t)N + 1, sizeof(int64_t));
    p->counts = calloc((size_t)N, sizeof(size_t));
    if (!p->vstart || !p->counts)
        return nomem(err);
    for (int64_t r = 0; r <= N; r++)
        p->vstart[r] = hp->vocab * r / N;
    p->v0 = p->vstart[p->rank];
    p->vocab = p->vstart[p->rank + 1] - p->v0;
    p->heads = hp->heads;
    p->kv_heads = hp->kv_heads;
    p->e0 = hp->experts * p->rank / N;
    p->experts = hp->experts * (p->rank + 1) / N - p->e0;
    p->inter = hp->inter;
    if (N == 1)
        return NVFP4_OK;
    /* Heads: an equal share each, and each rank's query heads either whole
     * GQA groups or inside one group (so that its KV heads serve them with
     * one group size). */
    g = hp->heads / hp->kv_heads;
    if (hp->heads % N || hp->heads % hp->kv_heads)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, nvfp4_config_path(m->cfg),
                               "num_attention_heads", -1,
                               "tensor parallelism over %lld ranks needs the %lld "
                               "attention heads to divide by it",
                               (long long)N, (long long)hp->heads);
    p->heads = hp->heads / N;
    p->h0 = p->heads * p->rank;
    if (p->heads % g && g % p->heads)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, nvfp4_config_path(m->cfg),
                               "num_key_value_heads", -1,
                               "%lld heads per rank do not split the GQA groups of %lld "
                               "heads (%lld KV heads over %lld ranks)",
                               (long long)p->heads, (long long)g, (long long)hp->kv_heads,
                               (long long)N);
    p->kv0 = p->h0 / g;
    p->kv_heads = (p->h0 + p->heads - 1) / g + 1 - p->kv0;
    if ((p->heads * hp->head_dim) % NVFP4_BLOCK)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, nvfp4_config_path(m->cfg),
                               "head_dim", -1,
                               "o_proj splits at %lld columns per rank, not a multiple of "
                               "the %d-element block",
                               (long long)(p->heads * hp->head_dim), NVFP4_BLOCK);
    /* Intermediate rows: in 16-element blocks (down_proj's columns), as
     * evenly as they go. */
    blocks = hp->inter / NVFP4_BLOCK;
    if (hp->inter % NVFP4_BLOCK || blocks < N)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, nvfp4_config_path(m->cfg),
                               "intermediate_size", -1,
                               "intermediate_size %lld does not split into %d-element "
                               "blocks over %lld ranks",
                               (long long)hp->inter, NVFP4_BLOCK, (long long)N);
    p->i0 = blocks * p->rank / N * NVFP4_BLOCK;
    p->inter = blocks * (p->rank + 1) / N * NVFP4_BLOCK - p->i0;
    if (hp->experts && hp->topk > 64)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, nvfp4_config_path(m->cfg),
                               "num_experts_per_tok", -1,
                               "expert parallelism takes at most 64 experts per token; "
                               "the model routes to %lld", (long long)hp->topk);
    if (hp->experts && hp->experts < N)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, nvfp4_config_path(m->cfg),
                               "num_experts", -1,
                               "expert parallelism over %lld ranks needs at least as many "
                               "experts; the model has %lld",
                               (long long)N, (long long)hp->experts);
    if (hp->vocab < N)
        return nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, nvfp4_config_path(m->cfg),
                               "vocab_size", -1, "a vocabulary of %lld over %lld ranks",
                               (long long)hp->vocab, (long long)N);
    return NVFP4_OK;
}

/* Every rank says whether it wants a device communicator, and only when all
 * do does any open one (nvfp4_comm_open_device agrees over the ranks
 * itself, and every rank gets the same outcome): a collective on the device
 * on some ranks and on the host on others would never meet.  The CPU
 * backend is not asked.  A plug-in without a device communicator
 * (UNSUPPORTED) means host staging, quietly; a library that some rank
 * cannot load (NOT_FOUND) the same with a warning; any other failure (a
 * rank's init failed or did not finish in time) fails the load on every
 * rank, naming the rank. */
nvfp4_status nvfp4m_par_open_device(nvfp4_model *m, nvfp4_error *err)
{
    nvfp4m_par *p = m->par;
    const char *env = getenv("NVFP4_DEVICE_COMM");
    uint8_t mine, *all;
    int want = 1;
    nvfp4_status st;
    nvfp4_error e;

    if (!p || p->size == 1 || !strcmp(nvfp4_backend_name(m->be), "cpu"))
        return NVFP4_OK;
    if (env && strcmp(env, "0") && strcmp(env, "1"))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, "NVFP4_DEVICE_COMM", -1,
                               "NVFP4_DEVICE_COMM is \"%s\"; expected 0 (collectives "
                               "through host memory) or 1 (NCCL/RCCL, the default)", env);
    all = malloc((size_t)p->size);
    if (!all)
        return nomem(err);
    mine = !(env && !strcmp(env, "0"));
    st = nvfp4_comm_allgather(p->comm, &mine, 1, NULL, all, err);
    for (int r = 0; st == NVFP4_OK && r < p->size; r++)
        want &= all[r];
    free(all);
    if (st != NVFP4_OK || !want)
        return st;
    nvfp4_error_clear(&e);
    p->dcomm = nvfp4_comm_open_device(m->be, p->comm, &e);
    if (p->dcomm || e.status == NVFP4_ERR_UNSUPPORTED)
        return NVFP4_OK;
    if (e.status == NVFP4_ERR_NOT_FOUND) {
        if (!m->opt.quiet)
            fprintf(stderr, "nvfp4: warning: %s; the collectives go through host "
                    "memory\n", e.text);
        return NVFP4_OK;
    }
    if (err)
        *err = e;
    return e.status;
}

void nvfp4m_par_free(nvfp4_model *m)
{
    nvfp4m_par *p = m->par;

    if (!p)
        return;
    if (p->dgather)
        nvfp4_backend_release(m->be, p->dgather);
    nvfp4_comm_free(p->dcomm);
    for (size_t i = 0; i < p->nowned; i++)
        free(p->owned[i]);
    free(p->owned);
    free(p->vstart);
    free(p->counts);
    free(p->ha);
    free(p->hb);
    free(p->hid);
    free(p->others);
    free(p);
    m->par = NULL;
}

static void *own(nvfp4m_par *p, size_t bytes)
{
    void *x;

    if (p->nowned == p->capowned) {
        size_t cap = p->capowned ? 2 * p->capowned : 64;
        void **a = realloc(p->owned, cap * sizeof(*a));
        if (!a)
            return NULL;
        p->owned = a;
        p->capowned = cap;
    }
    x = malloc(bytes ? bytes : 1);
    if (x)
        p->owned[p->nowned++] = x;
    return x;
}

/* Give back the mapped pages of a whole view (its rows are faulted in again
 * where this rank reads them): the open's checks read every scale and float
 * tensor. */
static void release_view(nvfp4_model *m, const nvfp4_linear *lin)
{
    if (lin->scheme != NVFP4_SCHEME_NONE) {
        nvfp4_checkpoint_release_pages(m->ck, lin->weight, (size_t)(lin->n * lin->k / 2));
        if (!lin->owned_scales)
            nvfp4_checkpoint_release_pages(m->ck, lin->scales,
                                           (size_t)(lin->n * lin->k / NVFP4_BLOCK));
    } else if (lin->dense) {
        nvfp4_checkpoint_release_pages(m->ck, lin->dense->data, lin->dense->nbytes);
    }
}

/* A copy of tensor T's header for rows [r0, r0 + nr) of its first dimension
 * (a view into the same data). */
static const nvfp4_tensor *tensor_rows(nvfp4m_par *p, const nvfp4_tensor *t, int64_t r0,
                                       int64_t nr)
{
    nvfp4_tensor *s = own(p, sizeof(*s));
    uint64_t row;

    if (!s)
        return NULL;
    *s = *t;
    row = t->shape[0] ? t->nbytes / (uint64_t)t->shape[0] : 0;
    s->shape[0] = nr;
    s->numel = t->shape[0] ? t->numel / (uint64_t)t->shape[0] * (uint64_t)nr : 0;
    s->nbytes = row * (uint64_t)nr;
    s->data = (const uint8_t *)t->data + row * (uint64_t)r0;
    s->offset = t->offset + row * (uint64_t)r0;
    return s;
}

/* Remember that of the mapped BYTES at BASE, [OFF, OFF + LEN) are this
 * rank's (nvfp4m_par_loaded gives back the rest). */
static nvfp4_status note_others(nvfp4m_par *p, const void *base, size_t bytes, size_t off,
                                size_t len, nvfp4_error *err)
{
    const uint8_t *b = base;

    if (p->nothers == p->capothers) {
        size_t cap = p->capothers ? 2 * p->capothers : 64;
        struct nvfp4m_par_range *a = realloc(p->others, cap * sizeof(*a));
        if (!a)
            return nomem(err);
        p->others = a;
        p->capothers = cap;
    }
    p->others[p->nothers++] = (struct nvfp4m_par_range){b, b + bytes, b + off, b + off + len};
    return NVFP4_OK;
}

static nvfp4_status slice_rows(nvfp4_model *m, nvfp4_linear *lin, int64_t r0, int64_t nr,
                               nvfp4_error *err)
{
    nvfp4m_par *p = m->par;

    if (r0 < 0 || nr <= 0 || r0 + nr > lin->n)
        return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, NULL, lin->prefix, -1,
                               "rows [%lld, %lld) of rank %d are outside the %lld rows",
                               (long long)r0, (long long)(r0 + nr), p->rank,
                               (long long)lin->n);
    release_view(m, lin);
    if (lin->scheme != NVFP4_SCHEME_NONE) {
        size_t wrow = (size_t)lin->k / 2, srow = (size_t)lin->k / NVFP4_BLOCK;
        TRY(note_others(p, lin->weight, (size_t)lin->n * wrow, (size_t)r0 * wrow,
                        (size_t)nr * wrow, err));
        if (!lin->owned_scales)
            TRY(note_others(p, lin->scales, (size_t)lin->n * srow, (size_t)r0 * srow,
                            (size_t)nr * srow, err));
        lin->weight += (size_t)r0 * (size_t)lin->k / 2;
        lin->scales += (size_t)r0 * (size_t)lin->k / NVFP4_BLOCK;
    } else {
        size_t row = lin->dense->shape[0] ? lin->dense->nbytes / (size_t)lin->dense->shape[0]
                                          : 0;
        if (lin->dense->file && *lin->dense->file)
            TRY(note_others(p, lin->dense->data, lin->dense->nbytes, (size_t)r0 * row,
                            (size_t)nr * row, err));
        if (!(lin->dense = tensor_rows(p, lin->dense, r0, nr)))
            return nomem(err);
    }
    if (lin->bias) {
        nvfp4_checkpoint_release_pages(m->ck, lin->bias->data, lin->bias->nbytes);
        if (!(lin->bias = tensor_rows(p, lin->bias, r0, nr)))
            return nomem(err);
    }
    lin->n = nr;
    return NVFP4_OK;
}

/* Columns [c0, c0 + nc) into memory the model owns; the bias stays with
 * rank 0 (the partial sums are added up). */
static nvfp4_status slice_cols(nvfp4_model *m, nvfp4_linear *lin, int64_t c0, int64_t nc,
                               nvfp4_error *err)
{
    nvfp4m_par *p = m->par;
    size_t n = (size_t)lin->n, k = (size_t)lin->k;

    if (c0 < 0 || nc <= 0 || c0 + nc > lin->k ||
        (lin->scheme != NVFP4_SCHEME_NONE && (c0 % NVFP4_BLOCK || nc % NVFP4_BLOCK)))
        return nvfp4_error_set(err, NVFP4_ERR_BAD_SHAPE, NULL, lin->prefix, -1,
                               "columns [%lld, %lld) of rank %d are not whole blocks of "
                               "the %lld columns",
                               (long long)c0, (long long)(c0 + nc), p->rank,
                               (long long)lin->k);
    if (lin->scheme != NVFP4_SCHEME_NONE) {
        size_t wb = (size_t)nc / 2, sb = (size_t)nc / NVFP4_BLOCK;
        uint8_t *w = own(p, n * wb), *s = own(p, n * sb);
        if (!w || !s)
            return nomem(err);
        for (size_t r = 0; r < n; r++) {
            memcpy(w + r * wb, lin->weight + r * (k / 2) + (size_t)c0 / 2, wb);
            memcpy(s + r * sb, lin->scales + r * (k / NVFP4_BLOCK) + (size_t)c0 / NVFP4_BLOCK,
                   sb);
        }
        release_view(m, lin);
        lin->weight = w;
        lin->scales = s;
    } else {
        const nvfp4_tensor *t = lin->dense;
        size_t isz = nvfp4_dtype_size(t->dtype);
        nvfp4_tensor *d = own(p, sizeof(*d));
        uint8_t *data = own(p, n * (size_t)nc * isz);
        if (!d || !data)
            return nomem(err);
        for (size_t r = 0; r < n; r++)
            memcpy(data + r * (size_t)nc * isz,
                   (const uint8_t *)t->data + (r * k + (size_t)c0) * isz, (size_t)nc * isz);
        release_view(m, lin);
        *d = *t;
        d->file = "";
        d->shape[1] = nc;
        d->numel = (uint64_t)n * (uint64_t)nc;
        d->nbytes = d->numel * isz;
        d->offset = 0;
        d->data = data;
        lin->dense = d;
    }
    if (p->rank != 0)
        lin->bias = NULL;
    lin->k = nc;
    return NVFP4_OK;
}

nvfp4_status nvfp4m_par_split_attention(nvfp4_model *m, nvfp4_linear *q, nvfp4_linear *k,
                                        nvfp4_linear *v, nvfp4_linear *o, nvfp4_error *err)
{
    const nvfp4m_par *p = m->par;
    int64_t hd = m->hp.head_dim;

    if (p->size == 1)
        return NVFP4_OK;
    TRY(slice_rows(m, q, p->h0 * hd, p->heads * hd, err));
    TRY(slice_rows(m, k, p->kv0 * hd, p->kv_heads * hd, err));
    TRY(slice_rows(m, v, p->kv0 * hd, p->kv_heads * hd, err));
    return slice_cols(m, o, p->h0 * hd, p->heads * hd, err);
}

nvfp4_status nvfp4m_par_split_mlp(nvfp4_model *m, const char *pre, nvfp4_linear *gate,
                                  nvfp4_linear *up, nvfp4_linear *down, nvfp4_error *err)
{
    const nvfp4m_par *p = m->par;
    size_t len = strlen(pre);

    /* the dense MLP ("model.layers.L.mlp"); a shared expert is replicated */
    if (p->size == 1 || len < 4 || strcmp(pre + len - 4, ".mlp") != 0)
        return NVFP4_OK;
    TRY(slice_rows(m, gate, p->i0, p->inter, err));
    TRY(slice_rows(m, up, p->i0, p->inter, err));
    return slice_cols(m, down, p->i0, p->inter, err);
}

nvfp4_status nvfp4m_par_split_vocab(nvfp4_model *m, nvfp4_linear *embed, nvfp4_linear *head,
                                    nvfp4_error *err)
{
    const nvfp4m_par *p = m->par;

    if (p->size == 1)
        return NVFP4_OK;
    TRY(slice_rows(m, embed, p->v0, p->vocab, err));
    if (head != embed)
        TRY(slice_rows(m, head, p->v0, p->vocab, err));
    return NVFP4_OK;
}

/* Free (and forget) the column slice P, if it is one. */
static void disown(nvfp4m_par *p, const void *x)
{
    for (size_t i = 0; x && i < p->nowned; i++)
        if (p->owned[i] == x) {
            free(p->owned[i]);
            p->owned[i] = p->owned[--p->nowned];
            return;
        }
}

static int is_owned(const nvfp4m_par *p, const void *x)
{
    for (size_t i = 0; x && i < p->nowned; i++)
        if (p->owned[i] == x)
            return 1;
    return 0;
}

void nvfp4m_par_uploaded(nvfp4_model *m, nvfp4_linear *parts, size_t n)
{
    nvfp4m_par *p = m->par;

    if (!p || p->size == 1)
        return;
    for (size_t i = 0; i < n; i++) {
        nvfp4_linear *lin = &parts[i];
        /* only NVFP4 column slices: a float one may be read in place */
        if (lin->scheme == NVFP4_SCHEME_NONE || !is_owned(p, lin->weight))
            continue;
        disown(p, lin->weight);
        lin->weight = NULL;
        if (is_owned(p, lin->scales)) {
            disown(p, lin->scales);
            lin->scales = NULL;
        }
    }
}

void nvfp4m_par_loaded(nvfp4_model *m)
{
    nvfp4m_par *p = m->par;

    if (!p)
        return;
    for (size_t i = 0; i < p->nothers; i++) {
        const struct nvfp4m_par_range *r = &p->others[i];
        if (r->mine_lo > r->lo)
            nvfp4_checkpoint_release_pages(m->ck, r->lo, (size_t)(r->mine_lo - r->lo));
        if (r->hi > r->mine_hi)
            nvfp4_checkpoint_release_pages(m->ck, r->mine_hi, (size_t)(r->hi - r->mine_hi));
    }
    free(p->others);
    p->others = NULL;
    p->nothers = p->capothers = 0;
}

void nvfp4m_par_drop(nvfp4_model *m, const nvfp4_linear *lin)
{
    release_view(m, lin);
    if (lin->bias)
        nvfp4_checkpoint_release_pages(m->ck, lin->bias->data, lin->bias->nbytes);
}

int nvfp4m_par_owns_expert(const nvfp4_model *m, int64_t e)
{
    const nvfp4m_par *p = m->par;
    return p->size == 1 || (e >= p->e0 && e < p->e0 + p->experts);
}

/* ---- forward ------------------------------------------------------------------ */

static nvfp4_status staging(nvfp4m_par *p, size_t floats, nvfp4_error *err)
{
    float *a, *b;

    if (floats <= p->hcap)
        return NVFP4_OK;
    a = realloc(p->ha, floats * sizeof(float));
    if (a)
        p->ha = a;
    b = realloc(p->hb, floats * sizeof(float));
    if (b)
        p->hb = b;
    if (!a || !b)
        return nomem(err);
    p->hcap = floats;
    return NVFP4_OK;
}

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *s = data;

    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * UINT64_C(1099511628211);
    return h;
}

/* Every rank must run the same batch (the contexts API is SPMD under
 * tensor parallelism): a digest of each rank's entries is all-gathered and
 * every rank refuses a batch that differs anywhere, so that none is left
 * waiting in a collective the others skip. */
nvfp4_status nvfp4m_par_check_batch(nvfp4_model *m, const nvfp4_batch_entry *ent, size_t nent,
                                    nvfp4_error *err)
{
    nvfp4m_par *p = m->par;
    uint64_t h = UINT64_C(1469598103934665603), *all;
    nvfp4_status st;

    if (p->size == 1)
        return NVFP4_OK;
    h = fnv(h, &nent, sizeof(nent));
    for (size_t e = 0; ent && e < nent; e++) {
        int32_t mode = (int32_t)ent[e].logits;
        h = fnv(h, &ent[e].seq, sizeof(ent[e].seq));
        h = fnv(h, &ent[e].n_tokens, sizeof(ent[e].n_tokens));
        h = fnv(h, &mode, sizeof(mode));
        if (ent[e].tokens)
            h = fnv(h, ent[e].tokens, ent[e].n_tokens * sizeof(int32_t));
    }
    all = malloc((size_t)p->size * sizeof(uint64_t));
    if (!all)
        return nomem(err);
    st = nvfp4_comm_allgather(p->comm, &h, sizeof(h), NULL, all, err);
    for (int r = 1; st == NVFP4_OK && r < p->size; r++)
        if (all[r] != all[0])
            st = nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                                 "rank %d runs another batch than rank 0 (under tensor "
                                 "parallelism every rank runs the same batches)", r);
    free(all);
    return st;
}

nvfp4_status nvfp4m_par_embed(nvfp4_model *m, int32_t *ids, const int32_t *h_ids, size_t n,
                              float *x, nvfp4_error *err)
{
    nvfp4m_par *p = m->par;
    size_t H = (size_t)m->hp.hidden;

    if (p->size == 1)
        return nvfp4_k_embed(m->be, m->embed, ids, n, x, err);
    if (p->idcap < n) {
        int32_t *a = realloc(p->hid, n * sizeof(int32_t));
        if (!a)
            return nomem(err);
        p->hid = a;
        p->idcap = n;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t id = h_ids[i] - p->v0;
        p->hid[i] = id >= 0 && id < p->vocab ? (int32_t)id : 0;
    }
    TRY(nvfp4_backend_upload(m->be, ids, p->hid, n * sizeof(int32_t), err));
    TRY(nvfp4_k_embed(m->be, m->embed, ids, n, x, err));
    if (p->dcomm && nvfp4_backend_supports(m->be, NVFP4_OP_SCALE)) {
        /* on the device: the rows of other ranks' tokens times 0 (a run of
         * them at a time; 0 x a finite value is a zero, and the owner's
         * value plus zeros is that value, as below), then the all-reduce */
        for (size_t i = 0; i < n;) {
            size_t j = i;
            while (j < n && (h_ids[j] < p->v0 || h_ids[j] >= p->v0 + p->vocab))
                j++;
            if (j > i)
                TRY(nvfp4_k_scale(m->be, x + i * H, (j - i) * H, 0.0f, x + i * H, err));
            i = j + 1;
        }
        return nvfp4_comm_allreduce_sum(p->dcomm, x, n * H, err);
    }
    TRY(staging(p, n * H, err));
    TRY(nvfp4_backend_download(m->be, p->ha, x, n * H * sizeof(float), err));
    for (size_t i = 0; i < n; i++)
        if (h_ids[i] < p->v0 || h_ids[i] >= p->v0 + p->vocab)
            memset(p->ha + i * H, 0, H * sizeof(float));
    TRY(nvfp4_comm_allreduce_sum(p->comm, p->ha, n * H, err));
    return nvfp4_backend_upload(m->be, x, p->ha, n * H * sizeof(float), err);
}

nvfp4_status nvfp4m_par_reduce(nvfp4_model *m, float *y, size_t count, nvfp4_error *err)
{
    nvfp4m_par *p = m->par;

    if (p->size == 1)
        return NVFP4_OK;
    if (p->dcomm)
        return nvfp4_comm_allreduce_sum(p->dcomm, y, count, err);
    TRY(staging(p, count, err));
    TRY(nvfp4_backend_download(m->be, p->ha, y, count * sizeof(float), err));
    TRY(nvfp4_comm_allreduce_sum(p->comm, p->ha, count, err));
    return nvfp4_backend_upload(m->be, y, p->ha, count * sizeof(float), err);
}

/* The MoE kernel of the architecture: gpt-oss's clamped SwiGLU over
 * interleaved gate/up rows (alpha 1.702 as transformers' GptOssExperts,
 * limit swiglu_limit), else silu(gate) * up. */
static nvfp4_status run_moe(nvfp4_model *m, nvfp4_kweight *const *w13,
                            nvfp4_kweight *const *w2, size_t E, const float *x, size_t n,
                            const int32_t *idx, const float *w, size_t K, float *y,
                            nvfp4_error *err)
{
    if (m->arch->act == ACT_SWIGLU_OAI)
        return nvfp4_k_moe_glu(m->be, w13, w2, E, x, n, idx, w, K, NVFP4_GLU_SWIGLU_OAI,
                               1.702f, (float)m->hp.swiglu_limit, y, err);
    return nvfp4_k_moe(m->be, w13, w2, E, x, n, idx, w, K, y, err);
}

nvfp4_status nvfp4m_par_moe(nvfp4_model *m, nvfp4_kweight *const *w13,
                            nvfp4_kweight *const *w2, const float *x, size_t n, int32_t *topi,
                            float *topw, float *y, nvfp4_error *err)
{
    nvfp4m_par *p = m->par;
    size_t E = (size_t)m->hp.experts, K = (size_t)m->hp.topk, H = (size_t)m->hp.hidden;
    size_t El = (size_t)p->experts, Kl = K < El ? K : El, busy = 0;
    int32_t *idx;
    float *w;

    if (p->size == 1)
        return run_moe(m, w13, w2, E, x, n, topi, topw, K, y, err);
    /* this rank's slots of each token: its experts renumbered from 0, first;
     * then padding that repeats one of them (or expert 0) with weight 0,
     * which the MoE merges with the real slot (adding 0.0f is exact) */
    TRY(staging(p, n * H > 2 * n * K ? n * H : 2 * n * K, err));
    idx = (int32_t *)p->hb;
    w = p->ha;
    TRY(nvfp4_backend_download(m->be, idx, topi, n * K * sizeof(int32_t), err));
    TRY(nvfp4_backend_download(m->be, w, topw, n * K * sizeof(float), err));
    for (size_t t = 0; t < n; t++) {
        size_t got = 0;
        int32_t li[64];
        float lw[64];
        for (size_t j = 0; j < K && got < 64; j++) {
            int64_t e = (int64_t)idx[t * K + j] - p->e0;
            if (e >= 0 && e < p->experts) {
                li[got] = (int32_t)e;
                lw[got++] = w[t * K + j];
            }
        }
        busy += got > 0;
        for (size_t j = 0; j < Kl; j++) {
            /* (write in place: slot j of the compacted rows never passes
             * slot j of the source rows) */
            idx[t * Kl + j] = j < got ? li[j] : got ? li[0] : 0;
            w[t * Kl + j] = j < got ? lw[j] : 0.0f;
        }
    }
    if (busy) {
        TRY(nvfp4_backend_upload(m->be, topi, idx, n * Kl * sizeof(int32_t), err));
        TRY(nvfp4_backend_upload(m->be, topw, w, n * Kl * sizeof(float), err));
        TRY(run_moe(m, w13 + p->e0, w2 + p->e0, El, x, n, topi, topw, Kl, y, err));
        TRY(nvfp4_backend_download(m->be, p->ha, y, n * H * sizeof(float), err));
    } else {
        memset(p->ha, 0, n * H * sizeof(float));
    }
    TRY(nvfp4_comm_allreduce_sum(p->comm, p->ha, n * H, err));
    return nvfp4_backend_upload(m->be, y, p->ha, n * H * sizeof(float), err);
}

/* The logits' all-gather on the device communicator, which gathers equal
 * counts: every rank sends rows x vmax floats (its rows x vocab logits,
 * then padding when the vocabulary does not divide by the ranks) into
 * dgather, rank-major, and the [row][vocab] layout is put together on the
 * device by copies (nvfp4_k_scale by 1, exact), one per rank and row. */
static nvfp4_status lm_head_device(nvfp4_model *m, size_t rows, float *logits,
                                   nvfp4_error *err)
{
    nvfp4m_par *p = m->par;
    size_t V = (size_t)m->hp.vocab, vmax = 0, need;

    for (int r = 0; r < p->size; r++)
        if ((size_t)(p->vstart[r + 1] - p->vstart[r]) > vmax)
            vmax = (size_t)(p->vstart[r + 1] - p->vstart[r]);
    need = (size_t)p->size * rows * vmax;
    if (p->dgcap < need) {
        if (p->dgather)
            nvfp4_backend_release(m->be, p->dgather);
        p->dgcap = 0;
        if (!(p->dgather = nvfp4_backend_alloc(m->be, need * sizeof(float), err)))
            return err ? err->status : NVFP4_ERR_DEVICE_OOM;
        p->dgcap = need;
    }
    /* LOGITS holds rows x V >= rows x vmax floats: the padding is read, never used */
    TRY(nvfp4_comm_allgather(p->dcomm, logits, rows * vmax * sizeof(float), NULL, p->dgather,
                             err));
    for (int r = 0; r < p->size; r++) {
        size_t v0 = (size_t)p->vstart[r], n = (size_t)(p->vstart[r + 1] - p->vstart[r]);
        const float *src = p->dgather + (size_t)r * rows * vmax;
        for (size_t t = 0; t < rows; t++)
            TRY(nvfp4_k_scale(m->be, src + t * n, n, 1.0f, logits + t * V + v0, err));
    }
    return NVFP4_OK;
}

nvfp4_status nvfp4m_par_lm_head(nvfp4_model *m, const float *h, size_t rows, float *logits,
                                nvfp4_error *err)
{
    nvfp4m_par *p = m->par;
    size_t V = (size_t)m->hp.vocab, vn = (size_t)p->vocab;

    TRY(nvfp4_k_linear(m->be, m->lm_head, h, rows, logits, err));
    if (p->size == 1)
        return NVFP4_OK;
    if (p->dcomm && nvfp4_backend_supports(m->be, NVFP4_OP_SCALE))
        return lm_head_device(m, rows, logits, err);
    TRY(staging(p, rows * V, err));
    TRY(nvfp4_backend_download(m->be, p->ha, logits, rows * vn * sizeof(float), err));
    for (int r = 0; r < p->size; r++)
        p->counts[r] = rows * (size_t)(p->vstart[r + 1] - p->vstart[r]) * sizeof(float);
    TRY(nvfp4_comm_allgather(p->comm, p->ha, 0, p->counts, p->hb, err));
    /* rank-major [rank][row][its vocab] -> [row][vocab] */
    {
        const float *src = p->hb;
        for (int r = 0; r < p->size; r++) {
            size_t v0 = (size_t)p->vstart[r], n = (size_t)(p->vstart[r + 1] - p->vstart[r]);
            for (size_t t = 0; t < rows; t++)
                memcpy(p->ha + t * V + v0, src + t * n, n * sizeof(float));
            src += rows * n;
        }
    }
    return nvfp4_backend_upload(m->be, logits, p->ha, rows * V * sizeof(float), err);
}
