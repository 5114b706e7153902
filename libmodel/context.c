/* SPDX-License-Identifier: MIT */
/*
 * Contexts: many sequences on one loaded model.
 *
 * A context owns a paged KV cache (after vLLM's PagedAttention): per layer
 * one K and one V pool of nblocks blocks of NVFP4_KV_BLOCK tokens; each
 * sequence is a table of block ids.  Blocks carry reference counts so that
 * a fork shares its parent's blocks; a block is copied before a sequence
 * writes into it while another holds it too (copy-on-write).  The forward
 * pass runs one batch of rows from any sequences: every operation but
 * attention is row-wise, so the rows can be put in any order; the rows
 * whose logits are asked for go last, so that the final norm and the
 * lm_head run over one contiguous stretch.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model-internal.h"


/* The lm_head runs over at most this many rows at a time, so the backend
 * never holds [n, vocab] logits beside the caller's buffer (100 MB each for
 * 512 tokens of a 49k vocabulary). */
#define LOGIT_ROWS 64

typedef struct {
    int live;
    size_t len;             /* tokens cached */
    size_t nblk;            /* blocks held (>= ceil(len / block)) */
    int32_t *blocks;        /* [max_blocks] */
} seq_t;

struct nvfp4_context {
    nvfp4_model *m;
    nvfp4_backend *be;
    int locked_backend;     /* GPU backend: serialise on m->lock */
    size_t block, nblocks, max_blocks, max_batch;
    size_t block_bytes;                   /* one block of every layer's pools */
    void **k_pool, **v_pool;              /* [layers] backend buffers */
    int kv_fp8;                           /* pools of FP8 E4M3 bytes, else float32 */
    size_t kv_esize;                      /* bytes per pool element: 1 or 4 */
    int32_t *refs;                        /* [nblocks] holders per block */
    int32_t *free_ids;                    /* stack of free block ids */
    size_t nfree;
    int32_t *pend;                        /* [nblocks] writers of a shared block */
    int32_t *touched;                     /* [nblocks] shared blocks a batch writes */
    seq_t *seqs;
    size_t max_seqs;

    /* scratch for max_batch rows */
    void *sbuf[32];
    size_t nsbuf;
    float *x, *h, *q, *k, *v, *att, *o, *gu, *act, *mlp, *router, *topw, *sh, *shg, *logits;
    int32_t *ids, *pos, *rseq, *topi, *tables;
    float *host_a, *host_b, *host_g;
    /* host staging of one batch */
    int32_t *h_ids, *h_pos, *h_rseq, *h_tables;
    void *h_block;                        /* one block of one pool, for copies */
    float *h_gu;                          /* split gate/up: [4, n, inter] */
    /* multi-head latent attention (mla.c): device q_a, q, kv_a outputs and
     * the expanded attention; their host staging; host routing (DeepSeek) */
    float *mqa, *mq, *mkva, *matt;
    float *hm_q, *hm_kva, *hm_qabs, *hm_krow, *hm_att, *hm_o;
    float *hr_logits, *hr_topw;
    int32_t *hr_topi;
};

static nvfp4_status nomem(nvfp4_error *err)
{
    return nvfp4_error_set(err, NVFP4_ERR_NOMEM, NULL, NULL, -1, "out of memory");
}

static void lock(nvfp4_context *c)
{
    if (c->locked_backend)
        pthread_mutex_lock(&c->m->lock);
}

static void unlock(nvfp4_context *c)
{
    if (c->locked_backend)
        pthread_mutex_unlock(&c->m->lock);
}

/* this rank's KV heads (parallel.c) */
static size_t kv_row(const nvfp4_model *m)
{
    return (size_t)m->par->kv_heads * (size_t)m->hp.head_dim;
}

/* ---- create / free ---------------------------------------------------------- */

void nvfp4_context_options_init(nvfp4_context_options *opt)
{
    memset(opt, 0, sizeof(*opt));
}

static void *salloc(nvfp4_context *c, size_t bytes, nvfp4_error *err)
{
    void *p;

    if (c->nsbuf >= sizeof(c->sbuf) / sizeof(c->sbuf[0]))
        return NULL;
    p = nvfp4_backend_alloc(c->be, bytes ? bytes : 4, err);
    if (p)
        c->sbuf[c->nsbuf++] = p;
    return p;
}

static nvfp4_status alloc_scratch(nvfp4_context *c, nvfp4_error *err)
{
    const hparams *hp = &c->m->hp;
    const size_t n = c->max_batch;
    /* (multi-head latent attention: every rank runs all heads) */
    size_t H = (size_t)hp->hidden,
           qd = (size_t)((c->m->arch->attn == ATTN_MLA ? hp->heads : c->m->par->heads) *
                         hp->head_dim);
    size_t kd = kv_row(c->m), V = (size_t)hp->vocab;
    size_t inter = (size_t)c->m->par->inter, E = (size_t)hp->experts, K = (size_t)hp->topk;
    size_t ntab = n < c->max_seqs ? n : c->max_seqs;

    if ((size_t)hp->shared_inter > inter)
        inter = (size_t)hp->shared_inter;
    if ((size_t)hp->moe_inter > inter)
        inter = (size_t)hp->moe_inter;
    if (!(c->x = salloc(c, n * H * 4, err)) || !(c->h = salloc(c, n * H * 4, err)) ||
        !(c->q = salloc(c, n * qd * 4, err)) || !(c->k = salloc(c, n * kd * 4, err)) ||
        !(c->v = salloc(c, n * kd * 4, err)) || !(c->att = salloc(c, n * qd * 4, err)) ||
        !(c->o = salloc(c, n * H * 4, err)) || !(c->gu = salloc(c, n * 2 * inter * 4, err)) ||
        !(c->act = salloc(c, n * inter * 4, err)) || !(c->mlp = salloc(c, n * H * 4, err)) ||
        !(c->router = salloc(c, n * (E ? E : 1) * 4, err)) ||
        !(c->topw = salloc(c, n * (K ? K : 1) * 4, err)) ||
        !(c->topi = salloc(c, n * (K ? K : 1) * 4, err)) ||
        !(c->sh = salloc(c, n * H * 4, err)) || !(c->shg = salloc(c, n * 4, err)) ||
        !(c->logits = salloc(c, (n < LOGIT_ROWS ? n : LOGIT_ROWS) * V * 4, err)) ||
        !(c->ids = salloc(c, n * 4, err)) || !(c->pos = salloc(c, n * 4, err)) ||
        !(c->rseq = salloc(c, n * 4, err)) ||
        !(c->tables = salloc(c, ntab * c->max_blocks * 4, err)))
        return err && err->status ? err->status : NVFP4_ERR_NOMEM;
    if (nvfp4m_arch_has(c->m->arch, TR_SH_EXPERT_GATE)) {
        c->host_a = malloc(n * H * 4);
        c->host_b = malloc(n * H * 4);
        c->host_g = malloc(n * 4);
        if (!c->host_a || !c->host_b || !c->host_g)
            return nomem(err);
    }
    c->h_ids = malloc(n * 4);
    c->h_pos = malloc(n * 4);
    c->h_rseq = malloc(n * 4);
    c->h_tables = malloc(ntab * c->max_blocks * 4);
    c->h_block = malloc(c->block * kd * c->kv_esize);
    if (!c->h_ids || !c->h_pos || !c->h_rseq || !c->h_tables || !c->h_block)
        return nomem(err);
    if (c->m->split_gu && !(c->h_gu = malloc(4 * n * (size_t)hp->inter * 4)))
        return nomem(err);
    if (c->m->arch->attn == ATTN_MLA) {
        size_t nh = (size_t)hp->heads, qk = (size_t)(hp->nope_hd + hp->rope_hd);
        size_t la = (size_t)(hp->kv_lora + hp->rope_hd), vd = (size_t)hp->v_hd;
        if (!(c->mqa = salloc(c, n * (size_t)(hp->q_lora ? hp->q_lora : 1) * 4, err)) ||
            !(c->mq = salloc(c, n * nh * qk * 4, err)) ||
            !(c->mkva = salloc(c, n * la * 4, err)) ||
            !(c->matt = salloc(c, n * nh * vd * 4, err)))
            return err && err->status ? err->status : NVFP4_ERR_NOMEM;
        c->hm_q = malloc(n * nh * qk * 4);
        c->hm_kva = malloc(n * la * 4);
        c->hm_qabs = malloc(n * qd * 4);
        c->hm_krow = malloc(n * kd * 4);
        c->hm_att = malloc(n * qd * 4);
        c->hm_o = malloc(n * nh * vd * 4);
        if (!c->hm_q || !c->hm_kva || !c->hm_qabs || !c->hm_krow || !c->hm_att || !c->hm_o)
            return nomem(err);
    }
    if (c->m->arch->moe == MOE_SIGMOID_GROUPED || c->m->arch->moe == MOE_SOFTMAX_GREEDY) {
        c->hr_logits = malloc(n * (E ? E : 1) * 4);
        c->hr_topw = malloc(n * (K ? K : 1) * 4);
        c->hr_topi = malloc(n * (K ? K : 1) * 4);
        if (!c->hr_logits || !c->hr_topw || !c->hr_topi)
            return nomem(err);
    }
    return NVFP4_OK;
}

static void context_free_locked(nvfp4_context *c)
{
    for (size_t i = 0; i < c->nsbuf; i++)
        nvfp4_backend_release(c->be, c->sbuf[i]);
    for (int64_t l = 0; l < c->m->hp.layers; l++) {
        if (c->k_pool)
            nvfp4_backend_release(c->be, c->k_pool[l]);
        if (c->v_pool && (!c->k_pool || c->v_pool[l] != c->k_pool[l]))
            nvfp4_backend_release(c->be, c->v_pool[l]);
    }
}

void nvfp4_context_free(nvfp4_context *c)
{
    if (!c)
        return;
    lock(c);
    context_free_locked(c);
    unlock(c);
    free(c->k_pool);
    free(c->v_pool);
    free(c->refs);
    free(c->free_ids);
    free(c->pend);
    free(c->touched);
    for (size_t i = 0; c->seqs && i < c->max_seqs; i++)
        free(c->seqs[i].blocks);
    free(c->seqs);
    free(c->host_a);
    free(c->host_b);
    free(c->host_g);
    free(c->h_ids);
    free(c->h_pos);
    free(c->h_rseq);
    free(c->h_tables);
    free(c->h_block);
    free(c->h_gu);
    free(c->hm_q);
    free(c->hm_kva);
    free(c->hm_qabs);
    free(c->hm_krow);
    free(c->hm_att);
    free(c->hm_o);
    free(c->hr_logits);
    free(c->hr_topw);
    free(c->hr_topi);
    free(c);
}

nvfp4_context *nvfp4_context_create(nvfp4_model *m, const nvfp4_context_options *opt,
                                    nvfp4_error *err)
{
    nvfp4_context_options o;
    nvfp4_context *c;
    size_t L, kd, block_bytes, esize;
    nvfp4_status st;

    nvfp4_error_clear(err);
    if (!m) {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1, "no model given");
        return NULL;
    }
    nvfp4_context_options_init(&o);
    if (opt)
        o = *opt;
    L = (size_t)m->hp.layers;
    kd = kv_row(m);
    if (o.kv_cache_dtype != NVFP4_KV_CACHE_AUTO && o.kv_cache_dtype != NVFP4_KV_CACHE_F32 &&
        o.kv_cache_dtype != NVFP4_KV_CACHE_FP8) {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, "kv_cache_dtype", -1,
                        "kv_cache_dtype %d; expected NVFP4_KV_CACHE_AUTO, _F32 or _FP8",
                        (int)o.kv_cache_dtype);
        return NULL;
    }
    if (o.kv_cache_dtype == NVFP4_KV_CACHE_FP8 && m->arch->attn == ATTN_MLA) {
        nvfp4_error_set(err, NVFP4_ERR_UNSUPPORTED, NULL, "kv_cache_dtype", -1,
                        "an FP8 KV cache is not supported for multi-head latent attention "
                        "(%s keeps its latent rows in float32)",
                        m->arch_name);
        return NULL;
    }
    /* auto: FP8 where the checkpoint has the scales (kvcache.c) */
    esize = o.kv_cache_dtype == NVFP4_KV_CACHE_FP8 ||
                    (o.kv_cache_dtype == NVFP4_KV_CACHE_AUTO && m->kv_fp8)
                ? 1
                : sizeof(float);
    /* (multi-head latent attention: one latent row a token, key and value) */
    block_bytes = (m->arch->attn == ATTN_MLA ? 1 : 2) * L * NVFP4_KV_BLOCK * kd * esize;
    if (o.max_seqs < 0) {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, "max_seqs", -1,
                        "max_seqs must be >= 0, found %d", o.max_seqs);
        return NULL;
    }
    c = calloc(1, sizeof(*c));
    if (!c) {
        nomem(err);
        return NULL;
    }
    c->m = m;
    c->be = m->be;
    c->kv_esize = esize;
    c->kv_fp8 = esize == 1;
    c->block_bytes = block_bytes;
    /* (ranks of a split model run their collectives one batch at a time) */
    c->locked_backend = strcmp(nvfp4_backend_name(m->be), "cpu") != 0 || m->par->size > 1;
    c->block = NVFP4_KV_BLOCK;
    c->max_blocks = ((size_t)m->max_ctx + c->block - 1) / c->block;
    c->max_batch = o.max_batch_tokens ? o.max_batch_tokens : 512;
    c->max_seqs = o.max_seqs ? (size_t)o.max_seqs : 256;
    if (o.kv_tokens)
        c->nblocks = (o.kv_tokens + c->block - 1) / c->block;
    else if (o.kv_bytes)
        c->nblocks = o.kv_bytes / block_bytes;
    else
        c->nblocks = c->max_blocks;
    if (c->nblocks == 0 || c->nblocks > INT32_MAX || c->max_batch > INT32_MAX ||
        c->max_seqs > INT32_MAX || c->nblocks > SIZE_MAX / block_bytes) {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, o.kv_tokens ? "kv_tokens" : "kv_bytes",
                        -1,
                        "a KV pool of %zu blocks of %d tokens (%zu bytes each) with "
                        "batches of %zu tokens is out of range",
                        c->nblocks, NVFP4_KV_BLOCK, block_bytes, c->max_batch);
        free(c);
        return NULL;
    }
    c->k_pool = calloc(L, sizeof(void *));
    c->v_pool = calloc(L, sizeof(void *));
    c->refs = calloc(c->nblocks, sizeof(int32_t));
    c->free_ids = malloc(c->nblocks * sizeof(int32_t));
    c->seqs = calloc(c->max_seqs, sizeof(seq_t));
    c->pend = calloc(c->nblocks, sizeof(int32_t));
    c->touched = malloc(c->nblocks * sizeof(int32_t));
    if (!c->k_pool || !c->v_pool || !c->refs || !c->free_ids || !c->seqs || !c->pend ||
        !c->touched) {
        nomem(err);
        nvfp4_context_free(c);
        return NULL;
    }
    /* lowest ids first off the stack */
    for (size_t i = 0; i < c->nblocks; i++)
        c->free_ids[i] = (int32_t)(c->nblocks - 1 - i);
    c->nfree = c->nblocks;
    lock(c);
    st = NVFP4_OK;
    for (size_t l = 0; l < L && st == NVFP4_OK; l++) {
        size_t bytes = c->nblocks * c->block * kd * esize;
        if (!(c->k_pool[l] = nvfp4_backend_alloc(c->be, bytes, err)) ||
            (m->arch->attn == ATTN_MLA ? !(c->v_pool[l] = c->k_pool[l])
                                       : !(c->v_pool[l] = nvfp4_backend_alloc(c->be, bytes,
                                                                              err))))
            st = err && err->status ? err->status : NVFP4_ERR_NOMEM;
    }
    if (st == NVFP4_OK)
        st = alloc_scratch(c, err);
    unlock(c);
    if (st != NVFP4_OK) {
        nvfp4_context_free(c);
        return NULL;
    }
    return c;
}

const nvfp4_model *nvfp4_context_model(const nvfp4_context *c)
{
    return c ? c->m : NULL;
}

size_t nvfp4_context_kv_blocks(const nvfp4_context *c)
{
    return c ? c->nblocks : 0;
}

size_t nvfp4_context_kv_free_blocks(const nvfp4_context *c)
{
    return c ? c->nfree : 0;
}

nvfp4_kv_cache_dtype nvfp4_context_kv_cache_dtype(const nvfp4_context *c)
{
    if (!c)
        return NVFP4_KV_CACHE_AUTO;
    return c->kv_fp8 ? NVFP4_KV_CACHE_FP8 : NVFP4_KV_CACHE_F32;
}

size_t nvfp4_context_kv_bytes_per_token(const nvfp4_context *c)
{
    return c ? c->block_bytes / c->block : 0;
}

nvfp4_kv_cache_dtype nvfp4_model_kv_cache_dtype(const nvfp4_model *m)
{
    if (!m)
        return NVFP4_KV_CACHE_AUTO;
    return m->kv_fp8 ? NVFP4_KV_CACHE_FP8 : NVFP4_KV_CACHE_F32;
}

/* ---- sequences ---------------------------------------------------------------- */

static seq_t *get_seq(const nvfp4_context *c, nvfp4_seq id)
{
    if (!c || id < 0 || (size_t)id >= c->max_seqs || !c->seqs[id].live)
        return NULL;
    return &c->seqs[id];
}

static nvfp4_status bad_seq(nvfp4_seq id, nvfp4_error *err)
{
    return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                           "sequence %d is not a live sequence of this context", (int)id);
}

static void block_unref(nvfp4_context *c, int32_t b)
{
    if (--c->refs[b] == 0)
        c->free_ids[c->nfree++] = b;
}

static int32_t block_take(nvfp4_context *c)
{
    int32_t b = c->free_ids[--c->nfree];
    c->refs[b] = 1;
    return b;
}

static nvfp4_status seq_new(nvfp4_context *c, nvfp4_seq *out, nvfp4_error *err)
{
    for (size_t i = 0; i < c->max_seqs; i++) {
        seq_t *s = &c->seqs[i];
        if (s->live)
            continue;
        if (!s->blocks && !(s->blocks = malloc(c->max_blocks * sizeof(int32_t))))
            return nomem(err);
        s->live = 1;
        s->len = 0;
        s->nblk = 0;
        *out = (nvfp4_seq)i;
        return NVFP4_OK;
    }
    return nvfp4_error_set(err, NVFP4_ERR_KV_FULL, NULL, "max_seqs", -1,
                           "all %zu sequences of the context are in use", c->max_seqs);
}

nvfp4_status nvfp4_seq_create(nvfp4_context *c, nvfp4_seq *seq, nvfp4_error *err)
{
    nvfp4_error_clear(err);
    if (!c || !seq)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "nvfp4_seq_create needs a context and an id to fill");
    *seq = -1;
    return seq_new(c, seq, err);
}

static void seq_drop_blocks(nvfp4_context *c, seq_t *s, size_t keep)
{
    while (s->nblk > keep)
        block_unref(c, s->blocks[--s->nblk]);
}

void nvfp4_seq_free(nvfp4_context *c, nvfp4_seq id)
{
    seq_t *s = get_seq(c, id);

    if (!s)
        return;
    seq_drop_blocks(c, s, 0);
    s->live = 0;
    s->len = 0;
}

nvfp4_status nvfp4_seq_truncate(nvfp4_context *c, nvfp4_seq id, size_t len, nvfp4_error *err)
{
    seq_t *s = get_seq(c, id);

    nvfp4_error_clear(err);
    if (!s)
        return bad_seq(id, err);
    if (len > s->len)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "cannot truncate sequence %d of %zu tokens to %zu", (int)id,
                               s->len, len);
    s->len = len;
    seq_drop_blocks(c, s, (len + c->block - 1) / c->block);
    return NVFP4_OK;
}

nvfp4_status nvfp4_seq_fork(nvfp4_context *c, nvfp4_seq parent, nvfp4_seq *child,
                            nvfp4_error *err)
{
    seq_t *p = get_seq(c, parent), *s;
    size_t used;
    nvfp4_seq id = -1; /* (set by seq_new; gcc -O3 cannot tell) */

    nvfp4_error_clear(err);
    if (!p)
        return bad_seq(parent, err);
    if (!child)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "nvfp4_seq_fork needs an id to fill");
    TRY(seq_new(c, &id, err));
    p = &c->seqs[parent];
    s = &c->seqs[id];
    used = (p->len + c->block - 1) / c->block;
    for (size_t i = 0; i < used; i++) {
        s->blocks[i] = p->blocks[i];
        c->refs[p->blocks[i]]++;
    }
    s->nblk = used;
    s->len = p->len;
    *child = id;
    return NVFP4_OK;
}

size_t nvfp4_seq_length(const nvfp4_context *c, nvfp4_seq id)
{
    const seq_t *s = get_seq(c, id);
    return s ? s->len : (size_t)-1;
}

/* Copy block SRC to DST in every layer's pools (through the host, so that
 * it needs no device-to-device op of the backend). */
static nvfp4_status copy_block(nvfp4_context *c, int32_t src, int32_t dst, nvfp4_error *err)
{
    const size_t bytes = c->block * kv_row(c->m) * c->kv_esize;

    for (int64_t l = 0; l < c->m->hp.layers; l++) {
        void *pools[2] = {c->k_pool[l], c->v_pool[l]};
        for (int i = 0; i < (pools[1] == pools[0] ? 1 : 2); i++) {
            TRY(nvfp4_backend_download(c->be, c->h_block,
                                       (char *)pools[i] + (size_t)src * bytes, bytes, err));
            TRY(nvfp4_backend_upload(c->be, (char *)pools[i] + (size_t)dst * bytes,
                                     c->h_block, bytes, err));
        }
    }
    return NVFP4_OK;
}

/* ---- forward ------------------------------------------------------------------ */

/* Qwen2-MoE: y += sigmoid(gate(x)) * shared_expert(x), on the device; on the
 * host (same float32 formula) for a backend without the gate_add op. */
static nvfp4_status shared_expert(nvfp4_context *c, layer_t *L, size_t n, nvfp4_error *err)
{
    const nvfp4_model *m = c->m;
    size_t H = (size_t)m->hp.hidden, I = (size_t)m->hp.shared_inter;

    {
        /* gate/up and the gate read one input */
        const nvfp4_kweight *w[2] = {L->sh_gu, L->sh_gate};
        float *out[2] = {c->gu, c->shg};
        TRY(nvfp4_k_linear_multi(c->be, w, 2, c->h, n, out, err));
    }
    TRY(nvfp4_k_silu_mul(c->be, c->gu, n, I, c->act, err));
    TRY(nvfp4_k_linear(c->be, L->sh_down, c->act, n, c->sh, err));
    if (nvfp4_backend_supports(c->be, NVFP4_OP_GATE_ADD))
        return nvfp4_k_gate_add(c->be, c->sh, c->shg, n, H, c->mlp, err);
    TRY(nvfp4_backend_download(c->be, c->host_a, c->mlp, n * H * 4, err));
    TRY(nvfp4_backend_download(c->be, c->host_b, c->sh, n * H * 4, err));
    TRY(nvfp4_backend_download(c->be, c->host_g, c->shg, n * 4, err));
    for (size_t t = 0; t < n; t++) {
        float g = 1.0f / (1.0f + expf(-c->host_g[t]));
        for (size_t i = 0; i < H; i++)
            c->host_a[t * H + i] += g * c->host_b[t * H + i];
    }
    return nvfp4_backend_upload(c->be, c->mlp, c->host_a, n * H * 4, err);
}

/* A gate and an up kept as separate layers (model.c's load_dense_mlp): gate
 * into c->act, up into the second half of c->gu, then laid out as the fused
 * layer's rows [gate | up] in c->gu, through the host. */
static nvfp4_status gate_up_split(nvfp4_context *c, const layer_t *L, size_t n,
                                  nvfp4_error *err)
{
    const size_t I = (size_t)c->m->par->inter;
    float *hg = c->h_gu, *hu = c->h_gu + n * I, *dst = c->h_gu + 2 * n * I;

    {
        const nvfp4_kweight *w[2] = {L->gu_split[0], L->gu_split[1]};
        float *out[2] = {c->act, c->gu + n * I};
        TRY(nvfp4_k_linear_multi(c->be, w, 2, c->h, n, out, err));
    }
    TRY(nvfp4_backend_download(c->be, hg, c->act, n * I * sizeof(float), err));
    TRY(nvfp4_backend_download(c->be, hu, c->gu + n * I, n * I * sizeof(float), err));
    for (size_t t = 0; t < n; t++) {
        memcpy(dst + t * 2 * I, hg + t * I, I * sizeof(float));
        memcpy(dst + t * 2 * I + I, hu + t * I, I * sizeof(float));
    }
    return nvfp4_backend_upload(c->be, c->gu, dst, 2 * n * I * sizeof(float), err);
}

/* Gemma's embeddings times sqrt(hidden_size) in the embeddings' dtype
 * (m->embed_mult), on the backend. */
static nvfp4_status embed_scale(nvfp4_context *c, size_t n, nvfp4_error *err)
{
    size_t H = (size_t)c->m->hp.hidden;

    return nvfp4_k_scale(c->be, c->x, n * H, c->m->embed_mult, c->x, err);
}

/* Multi-head latent attention of layer L (mla.c) into c->o (all heads on
 * every rank under tensor parallelism: replicated, no reduction): the
 * projections on the device, absorption and expansion on the host, RoPE
 * and the paged attention over the latent cache on the device (one KV
 * head, the latent row both key and value). */
static nvfp4_status mla_attention(nvfp4_context *c, const layer_t *L, int64_t l, size_t n,
                                  nvfp4_kv_pages *kv, float scale, nvfp4_error *err)
{
    const nvfp4_model *m = c->m;
    const hparams *hp = &m->hp;
    nvfp4_backend *be = c->be;
    size_t nh = (size_t)hp->heads, qk = (size_t)(hp->nope_hd + hp->rope_hd);
    size_t D = (size_t)hp->head_dim, la = (size_t)(hp->kv_lora + hp->rope_hd);
    size_t vd = (size_t)hp->v_hd;

    {
        /* the query's first product and kv_a read one input */
        const nvfp4_kweight *w[2] = {L->q_a ? L->q_a : L->q, L->kv_a};
        float *out[2] = {L->q_a ? c->mqa : c->mq, c->mkva};
        TRY(nvfp4_k_linear_multi(be, w, 2, c->h, n, out, err));
    }
    if (L->q_a) {
        /* q_a_layernorm: DeepseekV3RMSNorm's default eps 1e-6 */
        TRY(nvfp4_k_rmsnorm(be, c->mqa, L->q_a_norm, n, (size_t)hp->q_lora, 1e-6f, c->mqa,
                            err));
        TRY(nvfp4_k_linear(be, L->q_b, c->mqa, n, c->mq, err));
    }
    TRY(nvfp4_backend_download(be, c->hm_q, c->mq, n * nh * qk * 4, err));
    TRY(nvfp4_backend_download(be, c->hm_kva, c->mkva, n * la * 4, err));
    nvfp4m_mla_absorb(m, L, c->hm_q, c->hm_kva, n, c->hm_qabs, c->hm_krow);
    TRY(nvfp4_backend_upload(be, c->q, c->hm_qabs, n * nh * D * 4, err));
    TRY(nvfp4_backend_upload(be, c->k, c->hm_krow, n * D * 4, err));
    TRY(nvfp4_k_rope(be, c->q, c->pos, n, nh, D, (size_t)hp->rot_dim, m->inv_freq,
                     (float)hp->rope_attn, err));
    TRY(nvfp4_k_rope(be, c->k, c->pos, n, 1, D, (size_t)hp->rot_dim, m->inv_freq,
                     (float)hp->rope_attn, err));
    kv->k_pool = kv->v_pool = c->k_pool[l];
    kv->window = 0;
    TRY(nvfp4_k_attention_paged(be, c->q, c->k, c->k, kv, n, nh, 1, D, scale, c->att, err));
    TRY(nvfp4_backend_download(be, c->hm_att, c->att, n * nh * D * 4, err));
    nvfp4m_mla_expand(m, L, c->hm_att, n, c->hm_o);
    TRY(nvfp4_backend_upload(be, c->matt, c->hm_o, n * nh * vd * 4, err));
    return nvfp4_k_linear(be, L->o, c->matt, n, c->o, err);
}

/* DeepSeek's routing (mla.c) on the host, from the router logits in
 * c->router into c->topi / c->topw. */
static nvfp4_status route_grouped(nvfp4_context *c, const layer_t *L, size_t n,
                                  nvfp4_error *err)
{
    const hparams *hp = &c->m->hp;
    size_t E = (size_t)hp->experts, K = (size_t)hp->topk;

    TRY(nvfp4_backend_download(c->be, c->hr_logits, c->router, n * E * 4, err));
    TRY(nvfp4m_route_deepseek(hp, L->router_bias_h, c->hr_logits, n, c->hr_topi,
                                     c->hr_topw, err));
    TRY(nvfp4_backend_upload(c->be, c->topi, c->hr_topi, n * K * 4, err));
    return nvfp4_backend_upload(c->be, c->topw, c->hr_topw, n * K * 4, err);
}

/* Shared experts without a gate (DeepSeek): y += shared_experts(x). */
static nvfp4_status shared_plain(nvfp4_context *c, const layer_t *L, size_t n,
                                 nvfp4_error *err)
{
    size_t H = (size_t)c->m->hp.hidden, I = (size_t)c->m->hp.shared_inter;

    TRY(nvfp4_k_linear(c->be, L->sh_gu, c->h, n, c->gu, err));
    TRY(nvfp4_k_silu_mul(c->be, c->gu, n, I, c->act, err));
    TRY(nvfp4_k_linear(c->be, L->sh_down, c->act, n, c->sh, err));
    return nvfp4_k_add(c->be, c->mlp, c->sh, n * H, c->mlp, err);
}

/* The layers over the N rows staged in c->ids / pos / rseq / tables, then
 * the logits of the last R rows into the entries' buffers. */
static nvfp4_status forward(nvfp4_context *c, size_t n, size_t ntab, size_t max_len,
                            size_t r_rows, const nvfp4_batch_entry *ent, size_t nent,
                            nvfp4_error *err)
{
    const nvfp4_model *m = c->m;
    const hparams *hp = &m->hp;
    nvfp4_backend *be = c->be;
    size_t H = (size_t)hp->hidden, nh = (size_t)m->par->heads, nkv = (size_t)m->par->kv_heads;
    size_t hd = (size_t)hp->head_dim, V = (size_t)hp->vocab;
    float eps = (float)hp->eps, scale = 1.0f / sqrtf((float)hd);
    size_t rot = (size_t)hp->rot_dim;
    float rope_attn = (float)hp->rope_attn;

    if (hp->attn_scalar > 0) /* query_pre_attn_scalar ** -0.5 (Gemma) */
        scale = (float)pow(hp->attn_scalar, -0.5);
    if (hp->attn_scale > 0) /* qk_head_dim ** -0.5 (multi-head latent attention) */
        scale = (float)hp->attn_scale;
    nvfp4_kv_pages kv;

    TRY(nvfp4_backend_upload(be, c->ids, c->h_ids, n * 4, err));
    TRY(nvfp4_backend_upload(be, c->pos, c->h_pos, n * 4, err));
    TRY(nvfp4_backend_upload(be, c->rseq, c->h_rseq, n * 4, err));
    TRY(nvfp4_backend_upload(be, c->tables, c->h_tables, ntab * c->max_blocks * 4, err));
    memset(&kv, 0, sizeof(kv));
    kv.nblocks = c->nblocks;
    kv.block = c->block;
    kv.tables = c->tables;
    kv.ntables = ntab;
    kv.max_blocks = c->max_blocks;
    kv.pos = c->pos;
    kv.seq = c->rseq;
    kv.max_len = max_len;
    /* FP8 pools: attention_paged quantizes the new rows as it stores them */
    kv.dtype = c->kv_fp8 ? NVFP4_KV_ELEM_FP8_E4M3 : NVFP4_KV_ELEM_F32;
    TRY(nvfp4m_par_embed(c->m, c->ids, c->h_ids, n, c->x, err));
    if (m->arch->embed_scale)
        TRY(embed_scale(c, n, err));

    for (int64_t l = 0; l < hp->layers; l++) {
        layer_t *L = &m->layers[l];

        TRY(nvfp4_k_rmsnorm(be, c->x, L->ln1, n, H, eps, c->h, err));
        if (m->arch->attn == ATTN_MLA) {
            TRY(mla_attention(c, L, l, n, &kv, scale, err));
            goto attn_out;
        }
        {
            /* one input: the backend prepares it once (same bits) */
            const nvfp4_kweight *qkv[3] = {L->q, L->k, L->v};
            float *out[3] = {c->q, c->k, c->v};
            TRY(nvfp4_k_linear_multi(be, qkv, 3, c->h, n, out, err));
        }
        if (L->q_norm) {
            TRY(nvfp4_k_rmsnorm(be, c->q, L->q_norm, n * nh, hd, eps, c->q, err));
            TRY(nvfp4_k_rmsnorm(be, c->k, L->k_norm, n * nkv, hd, eps, c->k, err));
        }
        {
            /* sliding layers: their own RoPE base (Gemma 3) */
            const float *inv = L->window && m->inv_freq_local ? m->inv_freq_local
                                                               : m->inv_freq;
            TRY(nvfp4_k_rope(be, c->q, c->pos, n, nh, hd, rot, inv, rope_attn, err));
            TRY(nvfp4_k_rope(be, c->k, c->pos, n, nkv, hd, rot, inv, rope_attn, err));
        }
        if (c->kv_fp8) {
            /* the checkpoint's scales; 1.0 when FP8 was asked of one without */
            kv.k_scale = m->kv_fp8 ? L->k_scale : 1.0f;
            kv.v_scale = m->kv_fp8 ? L->v_scale : 1.0f;
        }
        kv.k_pool = c->k_pool[l];
        kv.v_pool = c->v_pool[l];
        kv.window = L->window;
        kv.sinks = L->sinks;
        TRY(nvfp4_k_attention_paged(be, c->q, c->k, c->v, &kv, n, nh, nkv, hd, scale, c->att,
                                    err));
        TRY(nvfp4_k_linear(be, L->o, c->att, n, c->o, err));
        TRY(nvfp4m_par_reduce(c->m, c->o, n * H, err));
    attn_out:
        if (L->post_attn_norm)
            TRY(nvfp4_k_rmsnorm(be, c->o, L->post_attn_norm, n, H, eps, c->o, err));
        TRY(nvfp4_k_add(be, c->x, c->o, n * H, c->x, err));

        TRY(nvfp4_k_rmsnorm(be, c->x, L->ln2, n, H, eps, c->h, err));
        if (L->moe) {
            size_t E = (size_t)hp->experts, K = (size_t)hp->topk;
            TRY(nvfp4_k_linear(be, L->router, c->h, n, c->router, err));
            if (m->arch->moe == MOE_SIGMOID_GROUPED || m->arch->moe == MOE_SOFTMAX_GREEDY)
                TRY(route_grouped(c, L, n, err));
            else
                TRY(nvfp4_k_topk(be, c->router, n, E, K, hp->norm_topk, c->topi, c->topw,
                                 err));
            TRY(nvfp4m_par_moe(c->m, L->w13, L->w2, c->h, n, c->topi, c->topw, c->mlp, err));
            if (L->sh_gate)
                TRY(shared_expert(c, L, n, err));
            else if (L->sh_gu)
                TRY(shared_plain(c, L, n, err));
        } else {
            if (L->gu_split[0]) /* gate and up as separate layers */
                TRY(gate_up_split(c, L, n, err));
            else
                TRY(nvfp4_k_linear(be, L->gu, c->h, n, c->gu, err));
            if (m->arch->act == ACT_GELU_TANH) /* GeGLU (Gemma) */
                TRY(nvfp4_k_glu(be, NVFP4_GLU_GELU_TANH, c->gu, n, (size_t)m->par->inter,
                                0.0f, 0.0f, c->act, err));
            else
                TRY(nvfp4_k_silu_mul(be, c->gu, n, (size_t)m->par->inter, c->act, err));
            TRY(nvfp4_k_linear(be, L->down, c->act, n, c->mlp, err));
            TRY(nvfp4m_par_reduce(c->m, c->mlp, n * H, err));
        }
        if (L->post_mlp_norm)
            TRY(nvfp4_k_rmsnorm(be, c->mlp, L->post_mlp_norm, n, H, eps, c->mlp, err));
        TRY(nvfp4_k_add(be, c->x, c->mlp, n * H, c->x, err));
    }
    if (r_rows > 0) {
        /* logit rows are the last r_rows, entry by entry */
        size_t e = 0, done_in_e = 0;

        TRY(nvfp4_k_rmsnorm(be, c->x + (n - r_rows) * H, m->final_norm, r_rows, H, eps, c->h,
                            err));
        for (size_t r = 0; r < r_rows; r += LOGIT_ROWS) {
            size_t cnt = r_rows - r < LOGIT_ROWS ? r_rows - r : LOGIT_ROWS, got = 0;
            TRY(nvfp4m_par_lm_head(c->m, c->h + r * H, cnt, c->logits, err));
            while (got < cnt) {
                size_t want, take;
                while (e < nent && (ent[e].logits == NVFP4_LOGITS_NONE ||
                                    ent[e].n_tokens == 0 ||
                                    done_in_e == (ent[e].logits == NVFP4_LOGITS_ALL
                                                      ? ent[e].n_tokens
                                                      : 1))) {
                    e++;
                    done_in_e = 0;
                }
                want = ent[e].logits == NVFP4_LOGITS_ALL ? ent[e].n_tokens : 1;
                take = want - done_in_e < cnt - got ? want - done_in_e : cnt - got;
                TRY(nvfp4_backend_download(be, ent[e].out + done_in_e * V,
                                           c->logits + got * V, take * V * sizeof(float),
                                           err));
                got += take;
                done_in_e += take;
            }
        }
    }
    /* GPU backends report errors found on the device at a sync. */
    return nvfp4_backend_sync(be, err);
}

nvfp4_status nvfp4_context_run(nvfp4_context *c, const nvfp4_batch_entry *ent, size_t nent,
                               nvfp4_error *err)
{
    const size_t V = c ? (size_t)c->m->hp.vocab : 0;
    size_t total = 0, need = 0, r_rows = 0, max_len = 0, row, lrow, ntab, ntouched = 0;
    nvfp4_status st = NVFP4_OK;

    nvfp4_error_clear(err);
    if (!c || (nent && !ent))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "nvfp4_context_run needs a context and entries");
    TRY(nvfp4m_par_check_batch(c->m, ent, nent, err));
    /* 1. check the whole batch; nothing changes before it passes */
    for (size_t e = 0; e < nent; e++) {
        const nvfp4_batch_entry *b = &ent[e];
        seq_t *s = get_seq(c, b->seq);

        if (!s)
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                                   "entry %zu: sequence %d is not a live sequence of this "
                                   "context", e, (int)b->seq);
        for (size_t f = 0; f < e; f++)
            if (ent[f].seq == b->seq)
                return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                                       "entries %zu and %zu both name sequence %d", f, e,
                                       (int)b->seq);
        if (b->n_tokens == 0)
            continue;
        if (!b->tokens)
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                                   "entry %zu: %zu tokens but no token array", e,
                                   b->n_tokens);
        if ((unsigned)b->logits > NVFP4_LOGITS_ALL ||
            (b->logits != NVFP4_LOGITS_NONE && !b->out))
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                                   "entry %zu: logits mode %d needs an output buffer", e,
                                   (int)b->logits);
        if (b->n_tokens > (size_t)c->m->max_ctx - s->len)
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                                   "entry %zu: context of %zu tokens exceeds the model's "
                                   "max_ctx of %lld", e, s->len + b->n_tokens,
                                   (long long)c->m->max_ctx);
        for (size_t i = 0; i < b->n_tokens; i++)
            if (b->tokens[i] < 0 || (size_t)b->tokens[i] >= V)
                return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                                       "entry %zu: token id %d at index %zu is outside the "
                                       "vocabulary of %zu", e, b->tokens[i], i, V);
        total += b->n_tokens;
        if (total > c->max_batch)
            return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, "max_batch_tokens", -1,
                                   "the batch has more than the context's %zu tokens per "
                                   "run", c->max_batch);
        r_rows += b->logits == NVFP4_LOGITS_ALL ? b->n_tokens
                  : b->logits == NVFP4_LOGITS_LAST ? 1 : 0;
        if (s->len + b->n_tokens > max_len)
            max_len = s->len + b->n_tokens;
    }
    /* 2. the blocks the batch writes: new ones, and copies of shared ones */
    for (size_t e = 0; e < nent; e++) {
        const seq_t *s = &c->seqs[ent[e].seq];
        size_t first, last;

        if (ent[e].n_tokens == 0)
            continue;
        first = s->len / c->block;
        last = (s->len + ent[e].n_tokens - 1) / c->block;
        for (size_t j = first; j <= last; j++) {
            if (j >= s->nblk) {
                need++;
            } else if (c->refs[s->blocks[j]] > 1) {
                /* only the block at the end can be shared (truncate gives the
                 * rest back), so at most one per entry */
                if (c->pend[s->blocks[j]]++ == 0)
                    c->touched[ntouched++] = s->blocks[j];
            }
        }
    }
    /* a shared block written by k of its r holders: k copies, or r - 1 when
     * all write (the last one writes in place) */
    for (size_t i = 0; i < ntouched; i++) {
        int32_t b = c->touched[i];
        need += (size_t)(c->pend[b] >= c->refs[b] ? c->refs[b] - 1 : c->pend[b]);
        c->pend[b] = 0;
    }
    if (total == 0)
        return NVFP4_OK;
    if (need > c->nfree)
        return nvfp4_error_set(err, NVFP4_ERR_KV_FULL, NULL, NULL, -1,
                               "the batch needs %zu free KV blocks of %zu tokens and the "
                               "context has %zu of %zu; free, truncate or wait for "
                               "sequences", need, c->block, c->nfree, c->nblocks);

    lock(c);
    /* 3. give every entry the blocks it writes (copy-on-write of shared ones) */
    for (size_t e = 0; e < nent && st == NVFP4_OK; e++) {
        seq_t *s = &c->seqs[ent[e].seq];
        size_t first, last;

        if (ent[e].n_tokens == 0)
            continue;
        first = s->len / c->block;
        last = (s->len + ent[e].n_tokens - 1) / c->block;
        for (size_t j = first; j <= last && st == NVFP4_OK; j++) {
            if (j >= s->nblk) {
                s->blocks[s->nblk++] = block_take(c);
            } else if (c->refs[s->blocks[j]] > 1) {
                int32_t nb = block_take(c);
                st = copy_block(c, s->blocks[j], nb, err);
                block_unref(c, s->blocks[j]);
                s->blocks[j] = nb;
            }
        }
    }
    if (st != NVFP4_OK)
        goto out;

    /* 4. stage the rows: those without logits first, then the logit rows in
     * entry order; each entry's table as row e of the tables */
    row = 0;
    lrow = total - r_rows;
    ntab = 0;
    for (size_t e = 0; e < nent; e++) {
        const nvfp4_batch_entry *b = &ent[e];
        const seq_t *s = &c->seqs[b->seq];

        if (b->n_tokens == 0)
            continue;
        memset(c->h_tables + ntab * c->max_blocks, 0, c->max_blocks * sizeof(int32_t));
        memcpy(c->h_tables + ntab * c->max_blocks, s->blocks, s->nblk * sizeof(int32_t));
        for (size_t i = 0; i < b->n_tokens; i++) {
            int logit = b->logits == NVFP4_LOGITS_ALL ||
                        (b->logits == NVFP4_LOGITS_LAST && i + 1 == b->n_tokens);
            size_t r = logit ? lrow++ : row++;
            c->h_ids[r] = b->tokens[i];
            c->h_pos[r] = (int32_t)(s->len + i);
            c->h_rseq[r] = (int32_t)ntab;
        }
        ntab++;
    }
    st = forward(c, total, ntab, max_len, r_rows, ent, nent, err);
    /* Gemma's final soft-capping: tanh(x / cap) * cap, float32 */
    if (st == NVFP4_OK && c->m->hp.softcap > 0) {
        const float cap = (float)c->m->hp.softcap;
        for (size_t e = 0; e < nent; e++) {
            size_t rows = ent[e].logits == NVFP4_LOGITS_ALL ? ent[e].n_tokens
                          : ent[e].logits == NVFP4_LOGITS_LAST && ent[e].n_tokens ? 1 : 0;
            for (size_t i = 0; i < rows * V; i++)
                ent[e].out[i] = tanhf(ent[e].out[i] / cap) * cap;
        }
    }
    /* Non-finite logits are an error, never a result (a damaged checkpoint
     * that passed the checks at open); the sequences keep their lengths. */
    for (size_t e = 0; st == NVFP4_OK && e < nent; e++) {
        size_t rows = ent[e].logits == NVFP4_LOGITS_ALL ? ent[e].n_tokens
                      : ent[e].logits == NVFP4_LOGITS_LAST && ent[e].n_tokens ? 1 : 0;
        size_t pos0 = c->seqs[ent[e].seq].len + ent[e].n_tokens - rows;
        st = nvfp4m_check_logits(ent[e].out, rows, V, pos0, err);
    }
    if (st == NVFP4_OK)
        for (size_t e = 0; e < nent; e++)
            c->seqs[ent[e].seq].len += ent[e].n_tokens;
out:
    unlock(c);
    return st;
}

/* ---- the single-sequence wrappers ------------------------------------------------- */

void nvfp4m_default_free(nvfp4_model *m)
{
    nvfp4_context_free(m->dflt);
    m->dflt = NULL;
}

void nvfp4_model_reset(nvfp4_model *m)
{
    if (m && m->dflt)
        nvfp4_seq_truncate(m->dflt, m->dflt_seq, 0, NULL);
}

nvfp4_status nvfp4_model_forward(nvfp4_model *m, const int32_t *tokens, size_t n,
                                 size_t pos, float *logits, int last_only,
                                 nvfp4_error *err)
{
    nvfp4_batch_entry b;
    size_t len;

    nvfp4_error_clear(err);
    if (!m)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1, "no model given");
    if (n == 0)
        return NVFP4_OK;
    if (!m->dflt) {
        nvfp4_context_options o;
        nvfp4_context_options_init(&o);
        o.kv_tokens = (size_t)m->max_ctx;
        o.max_batch_tokens = (size_t)m->max_ctx;
        o.max_seqs = 1;
        if (!(m->dflt = nvfp4_context_create(m, &o, err)))
            return err ? err->status : NVFP4_ERR_NOMEM;
        TRY(nvfp4_seq_create(m->dflt, &m->dflt_seq, err));
    }
    len = nvfp4_seq_length(m->dflt, m->dflt_seq);
    if (pos > len)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "position %zu is past the %zu tokens cached", pos, len);
    if (n > (size_t)m->max_ctx || pos > (size_t)m->max_ctx - n)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "context of %zu tokens exceeds the model's cache of %lld "
                               "(max_ctx)", pos + n, (long long)m->max_ctx);
    TRY(nvfp4_seq_truncate(m->dflt, m->dflt_seq, pos, err));
    b.seq = m->dflt_seq;
    b.tokens = tokens;
    b.n_tokens = n;
    b.logits = !logits ? NVFP4_LOGITS_NONE : last_only ? NVFP4_LOGITS_LAST : NVFP4_LOGITS_ALL;
    b.out = logits;
    return nvfp4_context_run(m->dflt, &b, 1, err);
}
