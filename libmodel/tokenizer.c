/* SPDX-License-Identifier: MIT */
/* The BPE tokenizer of a Hugging Face tokenizer.json: byte-level BPE
 * (GPT-2, Llama 3, Qwen, SmolLM) and SentencePiece-style BPE with byte
 * fallback (Llama 2, Mistral, Phi-3, Gemma): loading, the BPE model, encode
 * and decode.
 *
 * Encoding reproduces `tokenizers` Tokenizer.encode(text,
 * add_special_tokens=False).ids step by step:
 *   1. added tokens with normalized=false are cut out of the raw text
 *      (AddedVocabulary::extract_and_normalize, leftmost-longest);
 *   2. the rest is normalized (the normalizer chain: NFC through ICU,
 *      Prepend, Replace) and tokens with normalized=true are cut out of it;
 *   3. the pre-tokenizer steps split what is left (tokenizer-split.c):
 *      Split, Digits, Metaspace, and for byte-level BPE a last ByteLevel,
 *      which maps every byte to one character;
 *   4. each piece goes through BPE (models/bpe/model.rs merge_word and
 *      word.rs merge_all: lowest merge rank first, leftmost on ties).  Its
 *      symbols are the characters of the piece: with ByteLevel one per
 *      byte; without, the UTF-8 characters themselves, an unknown one
 *      becoming its <0xNN> byte tokens (byte_fallback) or the unk token.
 * post_processor is not consulted: with add_special_tokens=False neither
 * TemplateProcessing nor the ByteLevel post-processor changes the ids.
 * Decoding runs the decoder chain (ByteFallback, Fuse, Replace, ByteLevel,
 * Metaspace, Strip) over the token strings as Tokenizer::decode does.
 *
 * A loaded tokenizer is read-only: encode and decode keep their state on
 * the call, so threads may share one. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tokenizer-internal.h"

/* Ids index dense tables; real vocabularies stay below 2^18. */
#define MAX_TOKEN_ID (1 << 24)

/* ---- hash maps ----------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;    /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

/* Slots hold 1 + the index of a vocab entry; 0 is empty. */
typedef struct {
    uint32_t *slot;
    size_t mask;
} strmap;

typedef struct {
    uint64_t *key;          /* (left id << 32) | right id; EMPTY when free */
    uint32_t *rank;
    int32_t *new_id;
    size_t mask;
} pairmap;
#define PAIR_EMPTY UINT64_MAX

static size_t table_size(size_t n)
{
    size_t s = 16;
    while (s < n * 2 && s < ((size_t)1 << 40))
        s *= 2;
    return s;
}

/* ---- the tokenizer --------------------------------------------------------- */

typedef struct {
    size_t off;             /* into pool */
    uint32_t len;
    int32_t id;
} vocab_entry;

/* One decoder of the chain (the crate's decoders directory, Replace,
 * Metaspace). */
typedef enum {
    DEC_BYTE_LEVEL = 0,
    DEC_BYTE_FALLBACK,
    DEC_FUSE,
    DEC_REPLACE,
    DEC_STRIP,
    DEC_METASPACE
} dec_kind;

typedef struct {
    dec_kind kind;
    char *pattern, *content;    /* Replace: literal pattern -> content */
    size_t pattern_len, content_len;
    char strip[4];              /* Strip: the character, its UTF-8 length;
                                 * Metaspace: the replacement */
    size_t strip_len, start, stop;
    int prepend;                /* Metaspace: prepend_scheme is not "never" */
} dec_step;

/* One normalizer of the chain (normalizers/{unicode,prepend,replace}.rs). */
typedef enum { NORM_NFC = 0, NORM_PREPEND, NORM_REPLACE } norm_kind;

typedef struct {
    norm_kind kind;
    char *a, *b;                /* Prepend: a; Replace: literal a -> b */
    size_t alen, blen;
    char where[96];             /* its JSON path */
} norm_step;

/* Replace steps (normalizer or decoder) may grow the text; a chain of them
 * could grow it exponentially.  Refused beyond GROWTH_MAX times the text
 * the chain started from, plus GROWTH_SLACK bytes (real chains stay within
 * 3x: " " -> "\xe2\x96\x81"). */
#define GROWTH_MAX 8
#define GROWTH_SLACK 4096

static size_t growth_limit(size_t n)
{
    return n > (SIZE_MAX - GROWTH_SLACK) / GROWTH_MAX ? SIZE_MAX
                                                       : n * GROWTH_MAX + GROWTH_SLACK;
}

struct nvfp4_tokenizer {
    char *path;
    char *pool;             /* all token strings */
    size_t pool_len, pool_cap;

    vocab_entry *vocab;     /* the model's vocab */
    size_t n_vocab;
    strmap vmap;
    pairmap merges;
    int byte_fallback, ignore_merges, fuse_unk;
    int32_t unk_id;         /* -1: none */

    size_t n_ids;           /* max id + 1 */
    size_t *id_str;         /* pool offset + 1 of the token string, 0: hole */
    uint32_t *id_str_len;
    size_t *id_bytes;       /* pool offset of the decoded bytes */
    uint32_t *id_bytes_len;
    unsigned char *special;

    tk_added *added;        /* every added token, file order */
    size_t n_added;
    tk_added_set added_raw, added_norm;

    norm_step *norm;        /* the normalizer chain (none: the identity) */
    size_t n_norm;
    tk_pretok *pretok;
    size_t n_pretok;
    int byte_level;         /* the pre-tokenizer ends with ByteLevel */

    dec_step *dec;          /* the decoder chain */
    size_t n_dec;

    /* ByteLevel: byte -> character (UTF-8) and its vocab id. */
    char byte_char[256][2];
    unsigned char byte_char_len[256];
    int32_t byte_id[256];
    int32_t byte_fb[256][2];   /* byte_fallback ids of the character's bytes */
    /* Without ByteLevel: the id of <0xNN> for byte NN, or -1; the id of
     * each ASCII character (a lookup saved per character), or -1. */
    int32_t byte_tok[256];
    int32_t ascii_id[128];
};

static int pool_add(nvfp4_tokenizer *t, const char *s, size_t n, size_t *off)
{
    if (t->pool_cap - t->pool_len < n + 1) {
        size_t cap = t->pool_cap ? t->pool_cap : 1 << 20;
        char *p;
        while (cap - t->pool_len < n + 1) {
            if (cap > SIZE_MAX / 2)
                return -1;
            cap *= 2;
        }
        p = realloc(t->pool, cap);
        if (!p)
            return -1;
        t->pool = p;
        t->pool_cap = cap;
    }
    memcpy(t->pool + t->pool_len, s, n);
    t->pool[t->pool_len + n] = '\0';
    *off = t->pool_len;
    t->pool_len += n + 1;
    return 0;
}

static int32_t vocab_find(const nvfp4_tokenizer *t, const char *s, size_t n)
{
    size_t i;
    if (!t->vmap.slot)
        return -1;
    i = hash_bytes(s, n) & t->vmap.mask;
    for (;; i = (i + 1) & t->vmap.mask) {
        uint32_t e = t->vmap.slot[i];
        const vocab_entry *v;
        if (!e)
            return -1;
        v = &t->vocab[e - 1];
        if (v->len == n && memcmp(t->pool + v->off, s, n) == 0)
            return v->id;
    }
}

/* 1 when S was already present (its entry then keeps the first id). */
static int vocab_insert(nvfp4_tokenizer *t, size_t entry)
{
    const vocab_entry *ne = &t->vocab[entry];
    const char *s = t->pool + ne->off;
    size_t i = hash_bytes(s, ne->len) & t->vmap.mask;
    for (;; i = (i + 1) & t->vmap.mask) {
        uint32_t e = t->vmap.slot[i];
        if (!e) {
            t->vmap.slot[i] = (uint32_t)entry + 1;
            return 0;
        }
        if (t->vocab[e - 1].len == ne->len && memcmp(t->pool + t->vocab[e - 1].off, s, ne->len) == 0)
            return 1;
    }
}

static int pair_find(const pairmap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id)
{
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t i;
    if (!m->key)
        return 0;
    i = hash_u64(k) & m->mask;
    for (;; i = (i + 1) & m->mask) {
        if (m->key[i] == PAIR_EMPTY)
            return 0;
        if (m->key[i] == k) {
            *rank = m->rank[i];
            *new_id = m->new_id[i];
            return 1;
        }
    }
}

/* A later duplicate overwrites an earlier one, as collecting the merges into
 * the crate's HashMap does. */
static void pair_insert(pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t new_id)
{
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t i = hash_u64(k) & m->mask;
    for (;; i = (i + 1) & m->mask) {
        if (m->key[i] == PAIR_EMPTY || m->key[i] == k) {
            m->key[i] = k;
            m->rank[i] = rank;
            m->new_id[i] = new_id;
            return;
        }
    }
}

/* ---- byte-level alphabet ------------------------------------------------------ */

/* bytes_char() of byte_level.rs (GPT-2's bytes_to_unicode): printable
 * Latin-1 bytes stand for themselves, the other 68 bytes for U+0100.. in
 * byte order. */
static void byte_level_init(nvfp4_tokenizer *t)
{
    unsigned n = 0;
    for (unsigned b = 0; b < 256; b++) {
        unsigned cp;
        if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))
            cp = b;
        else
            cp = 256 + n++;
        if (cp < 0x80) {
            t->byte_char[b][0] = (char)cp;
            t->byte_char_len[b] = 1;
        } else {
            t->byte_char[b][0] = (char)(0xC0 | (cp >> 6));
            t->byte_char[b][1] = (char)(0x80 | (cp & 0x3F));
            t->byte_char_len[b] = 2;
        }
    }
}

/* CHAR_BYTES lookup: the byte a code point stands for, or -1. */
static int char_byte(const nvfp4_tokenizer *t, unsigned cp)
{
    if (cp < 256) {
        if ((cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || cp >= 0xAE)
            return (int)cp;
        return -1;
    }
    if (cp < 256 + 68) {
        unsigned n = 0;
        for (unsigned b = 0; b < 256; b++) {
            if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)
                continue;
            if (n++ == cp - 256)
                return (int)b;
        }
    }
    return -1;
}

/* The ByteLevel decoder on one token: the bytes its characters stand for,
 * or the token's own UTF-8 when any character is outside the alphabet. */
static size_t token_decode(const nvfp4_tokenizer *t, const char *s, size_t n, char *dst)
{
    size_t i = 0, o = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        unsigned cp;
        int b;
        if (c < 0x80) {
            cp = c;
            i++;
        } else if ((c & 0xE0) == 0xC0 && i + 1 < n) {
            cp = ((unsigned)(c & 0x1F) << 6) | ((unsigned char)s[i + 1] & 0x3F);
            i += 2;
        } else {
            cp = 0x10000;   /* 3/4-byte characters are never in the alphabet */
            i = n;
        }
        b = char_byte(t, cp);
        if (b < 0) {
            memcpy(dst, s, n);
            return n;
        }
        dst[o++] = (char)b;
    }
    return o;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Replace's decode_chain on one token with a literal pattern: every
 * non-overlapping occurrence, left to right.  malloc'ed; NULL when out of
 * memory, or with *outn = SIZE_MAX when the result would exceed LIMIT. */
static char *replace_all(const char *s, size_t n, const char *pat, size_t plen,
                         const char *content, size_t clen, size_t limit, size_t *outn)
{
    size_t k, o = 0, hits = 0, keep;
    char *b;

    for (k = 0; k + plen <= n;)
        if (!memcmp(s + k, pat, plen)) {
            hits++;
            k += plen;
        } else
            k++;
    keep = n - hits * plen;
    if (keep > limit || (clen && hits > (limit - keep) / clen)) {
        *outn = SIZE_MAX;
        return NULL;
    }
    if (!(b = malloc(keep + hits * clen + 1)))
        return NULL;
    for (k = 0; k < n;)
        if (k + plen <= n && !memcmp(s + k, pat, plen)) {
            memcpy(b + o, content, clen);
            o += clen;
            k += plen;
        } else
            b[o++] = s[k++];
    *outn = o;
    return b;
}

/* ---- loading ------------------------------------------------------------------- */

typedef struct {
    nvfp4_tokenizer *t;
    const char *path;
    nvfp4_error *err;
} loader;

static nvfp4_status fail_nomem(loader *L)
{
    return nvfp4_error_set(L->err, NVFP4_ERR_NOMEM, L->path, NULL, -1,
                           "out of memory while loading the tokenizer");
}

static const char *json_kind(const json_t *v)
{
    if (!v)
        return "nothing";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* Optional boolean: absent or null -> DEF. */
static nvfp4_status get_bool(loader *L, const json_t *obj, const char *name, const char *path,
                             int def, int *out)
{
    const json_t *v = json_object_get(obj, name);
    char key[256];
    *out = def;
    if (!v || json_is_null(v))
        return NVFP4_OK;
    if (!json_is_boolean(v)) {
        snprintf(key, sizeof(key), "%s.%s", path, name);
        return nvfp4_error_set(L->err, NVFP4_ERR_TYPE, L->path, key, -1,
                               "expected a boolean, found %s", json_kind(v));
    }
    *out = json_is_true(v);
    return NVFP4_OK;
}

static nvfp4_status get_id(loader *L, const json_t *v, const char *key, int32_t *out)
{
    json_int_t x;
    if (!json_is_integer(v))
        return nvfp4_error_set(L->err, NVFP4_ERR_TYPE, L->path, key, -1,
                               "expected an integer token id, found %s", json_kind(v));
    x = json_integer_value(v);
    if (x < 0 || x >= MAX_TOKEN_ID)
        return nvfp4_error_set(L->err, NVFP4_ERR_INVALID, L->path, key, -1,
                               "token id %lld outside [0, %d)", (long long)x, MAX_TOKEN_ID);
    *out = (int32_t)x;
    return NVFP4_OK;
}

/* The type string of a component object. */
static nvfp4_status get_type(loader *L, const json_t *obj, const char *path, const char **type)
{
    const json_t *ty;
    char key[256];
    snprintf(key, sizeof(key), "%s.type", path);
    if (!json_is_object(obj))
        return nvfp4_error_set(L->err, NVFP4_ERR_TYPE, L->path, path, -1,
                               "expected an object, found %s", json_kind(obj));
    ty = json_object_get(obj, "type");
    if (!json_is_string(ty))
        return nvfp4_error_set(L->err, NVFP4_ERR_BAD_ENTRY, L->path, key, -1,
                               "expected a type string, found %s", json_kind(ty));
    *type = json_string_value(ty);
    return NVFP4_OK;
}

static nvfp4_status load_model(loader *L, const json_t *root)
{
    nvfp4_tokenizer *t = L->t;
    const json_t *model = json_object_get(root, "model"), *vocab, *merges, *v;
    const char *type, *key;
    json_t *val;
    nvfp4_status st;
    size_t i, n;

    if (!model)
        return nvfp4_error_set(L->err, NVFP4_ERR_NOT_FOUND, L->path, "model", -1,
                               "no model object");
    if (!json_is_object(model))
        return nvfp4_error_set(L->err, NVFP4_ERR_TYPE, L->path, "model", -1,
                               "expected an object, found %s", json_kind(model));
    v = json_object_get(model, "type");
    if (v && !json_is_string(v))
        return nvfp4_error_set(L->err, NVFP4_ERR_TYPE, L->path, "model.type", -1,
                               "expected a string, found %s", json_kind(v));
    /* The crate infers an untagged model from its fields; merges mean BPE. */
    type = v ? json_string_value(v) : json_object_get(model, "merges") ? "BPE" : "(none)";
    if (strcmp(type, "BPE") != 0)
        return nvfp4_error_set(L->err, NVFP4_ERR_UNSUPPORTED, L->path, "model.type", -1,
                               "model type \"%s\" is not supported (expected \"BPE\")", type);

    v = json_object_get(model, "dropout");
    if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0.0))
        return nvfp4_error_set(L->err, NVFP4_ERR_UNSUPPORTED, L->path, "model.dropout", -1,
                               "BPE dropout (random merges) is not supported; expected null");
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (i = 0; i < 2; i++) {
        char k[64];
        v = json_object_get(model, affixes[i]);
        snprintf(k, sizeof(k), "model.%s", affixes[i]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
            return nvfp4_error_set(L->err, NVFP4_ERR_UNSUPPORTED, L->path, k, -1,
                                   "a non-empty %s (WordPiece-style BPE) is not supported; "
                                   "expected null or \"\"",
                                   affixes[i]);
    }
    if ((st = get_bool(L, model, "byte_fallback", "model", 0, &t->byte_fallback)) ||
        (st = get_bool(L, model, "ignore_merges", "model", 0, &t->ignore_merges)) ||
        (st = get_bool(L, model, "fuse_unk", "model", 0, &t->fuse_unk)))
        return st;

    vocab = json_object_get(model, "vocab");
    if (!vocab)
        return nvfp4_error_set(L->err, NVFP4_ERR_NOT_FOUND, L->path, "model.vocab", -1,
                               "no vocab");
    if (!json_is_object(vocab))
        return nvfp4_error_set(L->err, NVFP4_ERR_TYPE, L->path, "model.vocab", -1,
                               "expected an object of token -> id, found %s", json_kind(vocab));
    n = json_object_size(vocab);
    t->vocab = calloc(n ? n : 1, sizeof(*t->vocab));
    t->vmap.mask = table_size(n) - 1;
    t->vmap.slot = calloc(t->vmap.mask + 1, sizeof(uint32_t));
    if (!t->vocab || !t->vmap.slot || n > UINT32_MAX - 1)
        return fail_nomem(L);
    json_object_foreach((json_t *)vocab, key, val) {
        char k[NVFP4_ERROR_FIELD_LENGTH];
        size_t klen = strlen(key);
        vocab_entry *e = &t->vocab[t->n_vocab];
        snprintf(k, sizeof(k), "model.vocab.%s", key);
        if ((st = get_id(L, val, k, &e->id)))
            return st;
        if (klen > UINT32_MAX || pool_add(t, key, klen, &e->off))
            return fail_nomem(L);
        e->len = (uint32_t)klen;
        if (vocab_insert(t, t->n_vocab) == 0)
            t->n_vocab++;
    }

    v = json_object_get(model, "unk_token");
    t->unk_id = -1;
    if (v && !json_is_null(v)) {
        if (!json_is_string(v))
            return nvfp4_error_set(L->err, NVFP4_ERR_TYPE, L->path, "model.unk_token", -1,
                                   "expected a string or null, found %s", json_kind(v));
        t->unk_id = vocab_find(t, json_string_value(v), json_string_length(v));
        if (t->unk_id < 0)
            return nvfp4_error_set(L->err, NVFP4_ERR_NOT_FOUND, L->path, "model.unk_token", -1,
                                   "unk token \"%s\" is not in the vocab",
                                   json_string_value(v));
    }

    merges = json_object_get(model, "merges");
    if (!merges)
        return nvfp4_error_set(L->err, NVFP4_ERR_NOT_FOUND, L->path, "model.merges", -1,
                               "no merges");
    if (!json_is_array(merges))
        return nvfp4_error_set(L->err, NVFP4_ERR_TYPE, L->path, "model.merges", -1,
                               "expected an array, found %s", json_kind(merges));
    n = json_array_size(merges);
    if (n > UINT32_MAX)
        return fail_nomem(L);
    t->merges.mask = table_size(n) - 1;
    t->merges.key = malloc((t->merges.mask + 1) * sizeof(uint64_t));
    t->merges.rank = malloc((t->merges.mask + 1) * sizeof(uint32_t));
    t->merges.new_id = malloc((t->merges.mask + 1) * sizeof(int32_t));
    if (!t->merges.key || !t->merges.rank || !t->merges.new_id)
        return fail_nomem(L);
    memset(t->merges.key, 0xFF, (t->merges.mask + 1) * sizeof(uint64_t));

    char *buf = NULL;
    size_t bufcap = 0;
    for (i = 0; i < n; i++) {
        const json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t alen, blen;
        int32_t ida, idb, idab;
        char k[64];

        snprintf(k, sizeof(k), "model.merges[%zu]", i);
        if (json_is_string(m)) {
            /* convert_merges_to_hashmap: exactly two parts split on ' ' */
            const char *s = json_string_value(m), *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' ') || json_string_length(m) != strlen(s)) {
                free(buf);
                return nvfp4_error_set(L->err, NVFP4_ERR_BAD_ENTRY, L->path, k, -1,
                                       "expected \"left right\" (one space), found \"%s\"", s);
            }
            a = s;
            alen = (size_t)(sp - s);
            b = sp + 1;
            blen = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            alen = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            blen = json_string_length(json_array_get(m, 1));
        } else {
            free(buf);
            return nvfp4_error_set(L->err, NVFP4_ERR_BAD_ENTRY, L->path, k, -1,
                                   "expected \"left right\" or [left, right], found %s%s",
                                   json_kind(m),
                                   json_is_array(m) ? " of other than two strings" : "");
        }
        ida = vocab_find(t, a, alen);
        idb = vocab_find(t, b, blen);
        if (alen + blen + 1 > bufcap) {
            char *nb = realloc(buf, alen + blen + 1);
            if (!nb) {
                free(buf);
                return fail_nomem(L);
            }
            buf = nb;
            bufcap = alen + blen + 1;
        }
        memcpy(buf, a, alen);
        memcpy(buf + alen, b, blen);
        idab = vocab_find(t, buf, alen + blen);
        if (ida < 0 || idb < 0 || idab < 0) {
            const char *which = ida < 0 ? a : idb < 0 ? b : buf;
            int wlen = (int)(ida < 0 ? alen : idb < 0 ? blen : alen + blen);
            nvfp4_error_set(L->err, NVFP4_ERR_NOT_FOUND, L->path, k, -1,
                            "merge token \"%.*s\" is not in the vocab", wlen, which);
            free(buf);
            return NVFP4_ERR_NOT_FOUND;
        }
        pair_insert(&t->merges, ida, idb, (uint32_t)i, idab);
    }
    free(buf);
    return NVFP4_OK;
}

/* The ids the crate gives added tokens (AddedVocabulary::add_tokens, called
 * once while deserializing): the "id" written in the file is only compared,
 * with a warning; the id is the model's id of the content, or the next free
 * one counting from the model's vocabulary size.  Empty contents are
 * skipped; a repeated content keeps its id and takes the later flags. */
static nvfp4_status assign_added_ids(loader *L)
{
    nvfp4_tokenizer *t = L->t;
    int32_t next_id = (int32_t)t->n_vocab;
    size_t w = 0;

    for (size_t i = 0; i < t->n_added; i++) {
        tk_added a = t->added[i];
        const char *c = t->pool + a.off;
        size_t k;
        int32_t id;

        if (a.len == 0)
            continue;
        for (k = 0; k < w; k++)
            if (t->added[k].len == a.len && !memcmp(t->pool + t->added[k].off, c, a.len))
                break;
        if (k < w) {
            a.id = t->added[k].id;
            t->added[k] = a;
            continue;
        }
        id = vocab_find(t, c, a.len);
        if (id < 0) {
            if (next_id >= MAX_TOKEN_ID)
                return nvfp4_error_set(L->err, NVFP4_ERR_INVALID, L->path, "added_tokens", -1,
                                       "more than %d token ids", MAX_TOKEN_ID);
            id = next_id++;
        }
        a.id = id;
        /* one token per id: a later content for the same id replaces it */
        for (k = 0; k < w && t->added[k].id != id; k++)
            ;
        if (k < w)
            t->added[k] = a;
        else
            t->added[w++] = a;
    }
    t->n_added = w;
    return NVFP4_OK;
}

static nvfp4_status load_added(loader *L, const json_t *root)
{
    nvfp4_tokenizer *t = L->t;
    const json_t *arr = json_object_get(root, "added_tokens");
    nvfp4_status st;
    size_t n;

    if (!arr || json_is_null(arr))
        return NVFP4_OK;
    if (!json_is_array(arr))
        return nvfp4_error_set(L->err, NVFP4_ERR_TYPE, L->path, "added_tokens", -1,
                               "expected an array, found %s", json_kind(arr));
    n = json_array_size(arr);
    t->added = calloc(n ? n : 1, sizeof(*t->added));
    if (!t->added)
        return fail_nomem(L);
    for (size_t i = 0; i < n; i++) {
        const json_t *o = json_array_get(arr, i), *c;
        tk_added *a = &t->added[i];
        char k[64], kk[80];
        int special, normalized;

        snprintf(k, sizeof(k), "added_tokens[%zu]", i);
        if (!json_is_object(o))
            return nvfp4_error_set(L->err, NVFP4_ERR_TYPE, L->path, k, -1,
                                   "expected an object, found %s", json_kind(o));
        c = json_object_get(o, "content");
        snprintf(kk, sizeof(kk), "%s.content", k);
        if (!json_is_string(c))
            return nvfp4_error_set(L->err, NVFP4_ERR_BAD_ENTRY, L->path, kk, -1,
                                   "expected a string, found %s", c ? json_kind(c) : "nothing");
        snprintf(kk, sizeof(kk), "%s.id", k);
        if (!json_object_get(o, "id"))
            return nvfp4_error_set(L->err, NVFP4_ERR_BAD_ENTRY, L->path, kk, -1, "no id");
        if ((st = get_id(L, json_object_get(o, "id"), kk, &a->id)) ||
            (st = get_bool(L, o, "special", k, 0, &special)) ||
            (st = get_bool(L, o, "normalized", k, !special, &normalized)) ||
            (st = get_bool(L, o, "single_word", k, 0, &a->single_word)) ||
            (st = get_bool(L, o, "lstrip", k, 0, &a->lstrip)) ||
            (st = get_bool(L, o, "rstrip", k, 0, &a->rstrip)))
            return st;
        /* content points into the pool once loading is over (it may move) */
        if (pool_add(t, json_string_value(c), json_string_length(c), &a->off))
            return fail_nomem(L);
        a->len = json_string_length(c);
        a->special = special;
        a->normalized = normalized;
    }
    t->n_added = n;
    return assign_added_ids(L);
}

static nvfp4_status push_norm(loader *L, const norm_step *n)
{
    nvfp4_tokenizer *t = L->t;
    norm_step *v = realloc(t->norm, (t->n_norm + 1) * sizeof(*v));
    if (!v)
        return fail_nomem(L);
    t->norm = v;
    t->norm[t->n_norm++] = *n;
    return NVFP4_OK;
}

/* A copy of a JSON string (NUL-terminated, its length in *len). */
static char *dup_json_string(const json_t *v, size_t *len)
{
    char *c = malloc(json_string_length(v) + 1);
    if (c) {
        *len = json_string_length(v);
        memcpy(c, json_string_value(v), *len + 1);
    }
    return c;
}

/* A Replace step, normalizer or decoder: {"pattern": {"String": PAT},
 * "content": CONTENT}, both copied (PAT non-empty; regex patterns are not
 * supported).  On failure nothing is allocated. */
static nvfp4_status parse_replace(loader *L, const json_t *node, const char *path, char **pat,
                                  size_t *patlen, char **content, size_t *contentlen)
{
    const json_t *p = json_object_get(node, "pattern"), *c = json_object_get(node, "content");
    const json_t *ps = json_is_object(p) ? json_object_get(p, "String") : NULL;
    char key[300];

    snprintf(key, sizeof(key), "%s.pattern", path);
    if (!json_is_string(ps) || json_string_length(ps) == 0)
        return nvfp4_error_set(L->err, NVFP4_ERR_UNSUPPORTED, L->path, key, -1,
                               "expected {\"String\": non-empty string} (regex "
                               "replacements are not supported)");
    snprintf(key, sizeof(key), "%s.content", path);
    if (!json_is_string(c))
        return nvfp4_error_set(L->err, NVFP4_ERR_BAD_ENTRY, L->path, key, -1,
                               "expected a string, found %s", c ? json_kind(c) : "nothing");
    if (!(*pat = dup_json_string(ps, patlen)))
        return fail_nomem(L);
    if (!(*content = dup_json_string(c, contentlen))) {
        free(*pat);
        *pat = NULL;
        return fail_nomem(L);
    }
    return NVFP4_OK;
}

/* One normalizer: NFC, Prepend or Replace (a literal String pattern). */
static nvfp4_status add_normalizer(loader *L, const json_t *n, const char *path)
{
    const char *type = NULL;
    char key[128];
    norm_step step;
    nvfp4_status st;

    memset(&step, 0, sizeof(step));
    snprintf(step.where, sizeof(step.where), "%s", path);
    if ((st = get_type(L, n, path, &type)))
        return st;
    snprintf(key, sizeof(key), "%s.type", path);
    if (!strcmp(type, "NFC")) {
#ifndef HAVE_ICU
        return nvfp4_error_set(L->err, NVFP4_ERR_UNSUPPORTED, L->path, key, -1,
                               "normalizer \"NFC\" needs ICU, which this build of nvfp4 lacks");
#else
        step.kind = NORM_NFC;
        return push_norm(L, &step);
#endif
    }
    if (!strcmp(type, "Prepend")) {
        const json_t *v = json_object_get(n, "prepend");
        snprintf(key, sizeof(key), "%s.prepend", path);
        if (!json_is_string(v))
            return nvfp4_error_set(L->err, NVFP4_ERR_BAD_ENTRY, L->path, key, -1,
                                   "expected a string, found %s", json_kind(v));
        if (json_string_length(v) == 0)
            return NVFP4_OK;   /* prepending nothing is the identity */
        step.kind = NORM_PREPEND;
        if (!(step.a = dup_json_string(v, &step.alen)))
            return fail_nomem(L);
    } else if (!strcmp(type, "Replace")) {
        if ((st = parse_replace(L, n, path, &step.a, &step.alen, &step.b, &step.blen)))
            return st;
        step.kind = NORM_REPLACE;
    } else
        return nvfp4_error_set(L->err, NVFP4_ERR_UNSUPPORTED, L->path, key, -1,
                               "normalizer \"%s\" is not supported (expected NFC, Prepend, "
                               "Replace or a Sequence of them)",
                               type);
    if ((st = push_norm(L, &step))) {
        free(step.a);
        free(step.b);
    }
    return st;
}

/* normalizer: null, one normalizer, or a Sequence of them. */
static nvfp4_status load_normalizer(loader *L, const json_t *root)
{
    const json_t *n = json_object_get(root, "normalizer");
    const char *type;
    nvfp4_status st;

    if (!n || json_is_null(n))
        return NVFP4_OK;
    if ((st = get_type(L, n, "normalizer", &type)))
        return st;
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list))
            return nvfp4_error_set(L->err, NVFP4_ERR_BAD_ENTRY, L->path,
                                   "normalizer.normalizers", -1,
                                   "expected an array of normalizers");
        for (size_t i = 0; i < json_array_size(list); i++) {
            char k[64];
            snprintf(k, sizeof(k), "normalizer.normalizers[%zu]", i);
            if ((st = add_normalizer(L, json_array_get(list, i), k)))
                return st;
        }
        return NVFP4_OK;
    }
    return add_normalizer(L, n, "normalizer");
}

/* GPT-2's split regex, which ByteLevel applies when use_regex is true
 * (byte_level.rs RE). */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static nvfp4_status add_pretok(loader *L, const json_t *pt, const char *path, int depth);

static nvfp4_status push_pretok(loader *L, const tk_pretok *p)
{
    nvfp4_tokenizer *t = L->t;
    tk_pretok *v = realloc(t->pretok, (t->n_pretok + 1) * sizeof(*v));
    if (!v)
        return fail_nomem(L);
    t->pretok = v;
    t->pretok[t->n_pretok++] = *p;
    return NVFP4_OK;
}

static nvfp4_status compile_or_fail(loader *L, const char *pat, size_t len, int literal,
                                    const char *key, pcre2_code **out)
{
    char msg[400];
    *out = nvfp4m_tk_regex_compile(pat, len, literal, msg, sizeof(msg));
    if (!*out)
        return nvfp4_error_set(L->err, NVFP4_ERR_INVALID, L->path, key, -1, "%s", msg);
    return NVFP4_OK;
}

static size_t count_chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* Is V a string of exactly one character?  Its UTF-8 into out[4]. */
static int one_char(const json_t *v, char *out, size_t *len)
{
    const char *c;
    size_t n;
    if (!json_is_string(v))
        return 0;
    c = json_string_value(v);
    n = json_string_length(v);
    if (n == 0 || n > 4 || nvfp4m_tk_utf8_check((const unsigned char *)c, n) != n ||
        count_chars(c, n) != 1)
        return 0;
    memcpy(out, c, n);
    *len = n;
    return 1;
}

/* The fields of Metaspace, pre-tokenizer and decoder alike, as the crate's
 * deserializer reads them: "replacement" (one character), "prepend_scheme"
 * ("always" when absent), "split" (true when absent or null) and the older
 * "add_prefix_space", which must be true unless the scheme is "never". */
static nvfp4_status parse_metaspace(loader *L, const json_t *o, const char *path, char *repl,
                                    size_t *repl_len, tk_prepend *prepend, int *split)
{
    static const char *const schemes[] = {"always", "first", "never"};
    const json_t *v = json_object_get(o, "prepend_scheme");
    char key[256];
    int aps;
    nvfp4_status st;

    snprintf(key, sizeof(key), "%s.replacement", path);
    if (!one_char(json_object_get(o, "replacement"), repl, repl_len))
        return nvfp4_error_set(L->err, NVFP4_ERR_BAD_ENTRY, L->path, key, -1,
                               "expected one character, found %s",
                               json_kind(json_object_get(o, "replacement")));
    *prepend = TK_PREPEND_ALWAYS;
    snprintf(key, sizeof(key), "%s.prepend_scheme", path);
    if (v) {
        int found = 0;
        for (int i = 0; i < 3; i++)
            if (json_is_string(v) && !strcmp(json_string_value(v), schemes[i])) {
                *prepend = (tk_prepend)i;
                found = 1;
            }
        if (!found)
            return nvfp4_error_set(L->err, NVFP4_ERR_BAD_ENTRY, L->path, key, -1,
                                   "expected \"always\", \"first\" or \"never\", found %s%s%s",
                                   json_is_string(v) ? "\"" : json_kind(v),
                                   json_is_string(v) ? json_string_value(v) : "",
                                   json_is_string(v) ? "\"" : "");
    }
    if ((st = get_bool(L, o, "add_prefix_space", path, 1, &aps)))
        return st;
    if (!aps && *prepend != TK_PREPEND_NEVER) {
        snprintf(key, sizeof(key), "%s.add_prefix_space", path);
        return nvfp4_error_set(L->err, NVFP4_ERR_BAD_ENTRY, L->path, key, -1,
                               "add_prefix_space false does not match prepend_scheme \"%s\"",
                               schemes[*prepend]);
    }
    return split ? get_bool(L, o, "split", path, 1, split) : NVFP4_OK;
}

static nvfp4_status add_pretok(loader *L, const json_t *pt, const char *path, int depth)
{
    tk_pretok p;
    const char *type = NULL;
    char key[256];
    nvfp4_status st;

    memset(&p, 0, sizeof(p));
    snprintf(p.where, sizeof(p.where), "%s", path);
    if ((st = get_type(L, pt, path, &type)))
        return st;
    if (!strcmp(type, "Sequence") && depth == 0) {
        const json_t *list = json_object_get(pt, "pretokenizers");
        snprintf(key, sizeof(key), "%s.pretokenizers", path);
        if (!json_is_array(list))
            return nvfp4_error_set(L->err, NVFP4_ERR_BAD_ENTRY, L->path, key, -1,
                                   "expected an array of pre-tokenizers");
        for (size_t i = 0; i < json_array_size(list); i++) {
            char k[300];
            snprintf(k, sizeof(k), "%s[%zu]", key, i);
            if ((st = add_pretok(L, json_array_get(list, i), k, depth + 1)))
                return st;
        }
        return NVFP4_OK;
    }
    if (!strcmp(type, "ByteLevel")) {
        p.kind = TK_PT_BYTELEVEL;
        if ((st = get_bool(L, pt, "add_prefix_space", path, 1, &p.add_prefix_space)) ||
            (st = get_bool(L, pt, "use_regex", path, 1, &p.use_regex)))
            return st;
        snprintf(key, sizeof(key), "%s.use_regex", path);
        if (p.use_regex &&
            (st = compile_or_fail(L, GPT2_PATTERN, sizeof(GPT2_PATTERN) - 1, 0, key, &p.re)))
            return st;
        return push_pretok(L, &p);
    }
    if (!strcmp(type, "Metaspace")) {
        p.kind = TK_PT_METASPACE;
        if ((st = parse_metaspace(L, pt, path, p.repl, &p.repl_len, &p.prepend, &p.split)))
            return st;
        snprintf(key, sizeof(key), "%s.replacement", path);
        if (p.split && (st = compile_or_fail(L, p.repl, p.repl_len, 1, key, &p.re)))
            return st;
        return push_pretok(L, &p);
    }
    if (!strcmp(type, "Digits")) {
        int individual;
        static const char digit[] = "\\p{N}";
        if ((st = get_bool(L, pt, "individual_digits", path, 0, &individual)))
            return st;
        p.kind = TK_PT_SPLIT;
        p.behavior = individual ? TK_ISOLATED : TK_CONTIGUOUS;
        if ((st = compile_or_fail(L, digit, sizeof(digit) - 1, 0, path, &p.re)))
            return st;
        return push_pretok(L, &p);
    }
    if (!strcmp(type, "Split")) {
        static const struct {
            const char *name;
            tk_behavior b;
        } behaviors[] = {{"Removed", TK_REMOVED},
                         {"Isolated", TK_ISOLATED},
                         {"MergedWithPrevious", TK_MERGED_WITH_PREVIOUS},
                         {"MergedWithNext", TK_MERGED_WITH_NEXT},
                         {"Contiguous", TK_CONTIGUOUS}};
        const json_t *pat = json_object_get(pt, "pattern"), *b = json_object_get(pt, "behavior");
        const json_t *s = json_is_object(pat) ? json_object_get(pat, "Regex") : NULL;
        int literal = 0, found = 0;

        p.kind = TK_PT_SPLIT;
        if (!s && json_is_object(pat) && (s = json_object_get(pat, "String")))
            literal = 1;
        snprintf(key, sizeof(key), "%s.pattern", path);
        if (!json_is_string(s))
            return nvfp4_error_set(L->err, NVFP4_ERR_BAD_ENTRY, L->path, key, -1,
                                   "expected {\"Regex\": string} or {\"String\": string}");
        snprintf(key, sizeof(key), "%s.behavior", path);
        if (!json_is_string(b))
            return nvfp4_error_set(L->err, NVFP4_ERR_BAD_ENTRY, L->path, key, -1,
                                   "expected a behavior string, found %s",
                                   b ? json_kind(b) : "nothing");
        for (size_t i = 0; i < sizeof(behaviors) / sizeof(behaviors[0]); i++)
            if (!strcmp(json_string_value(b), behaviors[i].name)) {
                p.behavior = behaviors[i].b;
                found = 1;
            }
        if (!found)
            return nvfp4_error_set(L->err, NVFP4_ERR_UNSUPPORTED, L->path, key, -1,
                                   "split behavior \"%s\" is not supported (expected Removed, "
                                   "Isolated, MergedWithPrevious, MergedWithNext or Contiguous)",
                                   json_string_value(b));
        if ((st = get_bool(L, pt, "invert", path, 0, &p.invert)))
            return st;
        snprintf(key, sizeof(key), "%s.pattern", path);
        if ((st = compile_or_fail(L, json_string_value(s), json_string_length(s), literal, key,
                                  &p.re)))
            return st;
        return push_pretok(L, &p);
    }
    snprintf(key, sizeof(key), "%s.type", path);
    return nvfp4_error_set(L->err, NVFP4_ERR_UNSUPPORTED, L->path, key, -1,
                           "pre-tokenizer \"%s\" is not supported (expected ByteLevel, "
                           "Metaspace, Split, Digits or a Sequence of them)", type);
}

static nvfp4_status load_pretok(loader *L, const json_t *root)
{
    const json_t *pt = json_object_get(root, "pre_tokenizer");
    nvfp4_tokenizer *t = L->t;
    nvfp4_status st;

    /* none: the normalized text is one word (Gemma, Llama 2) */
    if (!pt || json_is_null(pt))
        return NVFP4_OK;
    if ((st = add_pretok(L, pt, "pre_tokenizer", 0)))
        return st;
    for (size_t i = 0; i < t->n_pretok; i++)
        t->byte_level |= t->pretok[i].kind == TK_PT_BYTELEVEL;
    /* The byte mapping happens once, after every split (our pieces stay raw
     * bytes until BPE), which equals tokenizers only when ByteLevel is last:
     * a split after it would see the mapped characters. */
    for (size_t i = 0; t->byte_level && i < t->n_pretok; i++)
        if ((t->pretok[i].kind == TK_PT_BYTELEVEL) != (i + 1 == t->n_pretok))
            return nvfp4_error_set(L->err, NVFP4_ERR_UNSUPPORTED, L->path, "pre_tokenizer", -1,
                                   "expected exactly one ByteLevel pre-tokenizer, as the last "
                                   "step; found %s at step %zu",
                                   t->pretok[i].kind == TK_PT_BYTELEVEL ? "ByteLevel"
                                                                        : "a split",
                                   i);
    return NVFP4_OK;
}

static nvfp4_status push_dec(loader *L, const dec_step *d)
{
    nvfp4_tokenizer *t = L->t;
    dec_step *v = realloc(t->dec, (t->n_dec + 1) * sizeof(*v));
    if (!v)
        return fail_nomem(L);
    t->dec = v;
    t->dec[t->n_dec++] = *d;
    return NVFP4_OK;
}

static nvfp4_status add_decoder(loader *L, const json_t *d, const char *path, int depth)
{
    const char *type = NULL;
    char key[256];
    dec_step step;
    nvfp4_status st;

    memset(&step, 0, sizeof(step));
    if ((st = get_type(L, d, path, &type)))
        return st;
    if (!strcmp(type, "Sequence") && depth == 0) {
        const json_t *list = json_object_get(d, "decoders");
        snprintf(key, sizeof(key), "%s.decoders", path);
        if (!json_is_array(list))
            return nvfp4_error_set(L->err, NVFP4_ERR_BAD_ENTRY, L->path, key, -1,
                                   "expected an array of decoders");
        for (size_t i = 0; i < json_array_size(list); i++) {
            char k[300];
            snprintf(k, sizeof(k), "%s[%zu]", key, i);
            if ((st = add_decoder(L, json_array_get(list, i), k, depth + 1)))
                return st;
        }
        return NVFP4_OK;
    }
    if (!strcmp(type, "ByteLevel"))
        step.kind = DEC_BYTE_LEVEL;
    else if (!strcmp(type, "ByteFallback"))
        step.kind = DEC_BYTE_FALLBACK;
    else if (!strcmp(type, "Fuse"))
        step.kind = DEC_FUSE;
    else if (!strcmp(type, "Replace")) {
        if ((st = parse_replace(L, d, path, &step.pattern, &step.pattern_len, &step.content,
                                &step.content_len)))
            return st;
        step.kind = DEC_REPLACE;
        if ((st = push_dec(L, &step))) {
            free(step.pattern);
            free(step.content);
        }
        return st;
    } else if (!strcmp(type, "Metaspace")) {
        tk_prepend pre;
        step.kind = DEC_METASPACE;
        if ((st = parse_metaspace(L, d, path, step.strip, &step.strip_len, &pre, NULL)))
            return st;
        step.prepend = pre != TK_PREPEND_NEVER;
    } else if (!strcmp(type, "Strip")) {
        const json_t *c = json_object_get(d, "content"), *a = json_object_get(d, "start"),
                     *b = json_object_get(d, "stop");
        snprintf(key, sizeof(key), "%s.content", path);
        if (!json_is_string(c) || json_string_length(c) == 0 || json_string_length(c) > 4 ||
            nvfp4m_tk_utf8_check((const unsigned char *)json_string_value(c), json_string_length(c)) !=
                json_string_length(c) ||
            count_chars(json_string_value(c), json_string_length(c)) != 1)
            return nvfp4_error_set(L->err, NVFP4_ERR_BAD_ENTRY, L->path, key, -1,
                                   "expected one character");
        snprintf(key, sizeof(key), "%s.start", path);
        if (!json_is_integer(a) || json_integer_value(a) < 0 || !json_is_integer(b) ||
            json_integer_value(b) < 0)
            return nvfp4_error_set(L->err, NVFP4_ERR_BAD_ENTRY, L->path, key, -1,
                                   "expected non-negative integers start and stop");
        step.kind = DEC_STRIP;
        step.strip_len = json_string_length(c);
        memcpy(step.strip, json_string_value(c), step.strip_len);
        step.start = (size_t)json_integer_value(a);
        step.stop = (size_t)json_integer_value(b);
    } else {
        snprintf(key, sizeof(key), "%s.type", path);
        return nvfp4_error_set(L->err, NVFP4_ERR_UNSUPPORTED, L->path, key, -1,
                               "decoder \"%s\" is not supported (expected ByteLevel, "
                               "Metaspace, ByteFallback, Fuse, Replace, Strip or a Sequence "
                               "of them)",
                               type);
    }
    return push_dec(L, &step);
}

static nvfp4_status load_rest(loader *L, const json_t *root)
{
    const json_t *d = json_object_get(root, "decoder");
    static const char *const off[] = {"truncation", "padding"};
    nvfp4_tokenizer *t = L->t;
    nvfp4_status st;
    size_t i;

    for (i = 0; i < 2; i++) {
        const json_t *v = json_object_get(root, off[i]);
        if (v && !json_is_null(v))
            return nvfp4_error_set(L->err, NVFP4_ERR_UNSUPPORTED, L->path, off[i], -1,
                                   "%s changes the ids of encode; expected null", off[i]);
    }
    /* Without a decoder Tokenizer::decode joins the token strings with
     * spaces, which no real tokenizer relies on: refused. */
    if (!d || json_is_null(d))
        return nvfp4_error_set(L->err, NVFP4_ERR_UNSUPPORTED, L->path, "decoder", -1,
                               "no decoder; expected ByteLevel, Metaspace or a Sequence of "
                               "decoders");
    if ((st = add_decoder(L, d, "decoder", 0)))
        return st;
    for (i = 0; i < t->n_dec && t->dec[i].kind != DEC_BYTE_LEVEL; i++)
        ;
    if (i == t->n_dec && t->byte_level)
        return nvfp4_error_set(L->err, NVFP4_ERR_UNSUPPORTED, L->path, "decoder", -1,
                               "the decoder has no ByteLevel step, which the ByteLevel "
                               "pre-tokenizer needs");
    return NVFP4_OK;
}

/* The bytes one token stands for, for streaming: the decoder chain up to
 * its ByteLevel step applied to the token alone, except that a <0xXX> token
 * of ByteFallback is its raw byte (not U+FFFD when it is a partial UTF-8
 * sequence) and nothing is made lossy; Fuse is a no-op on one token, Strip
 * and the first-token rule of Metaspace concern the start of the whole
 * text (a streamed token follows a prompt: U+2581 "a" streams as " a").
 * malloc'ed; NULL with *outn = SIZE_MAX when Replace steps grow the token
 * beyond growth_limit(). */
static char *stream_bytes(const nvfp4_tokenizer *t, const char *s, size_t n, size_t *outn)
{
    char *cur = malloc(n + 1), *next;
    size_t len = n;

    if (!cur)
        return NULL;
    memcpy(cur, s, n);
    for (size_t k = 0; k < t->n_dec; k++) {
        const dec_step *d = &t->dec[k];
        if (d->kind == DEC_BYTE_FALLBACK && len == 6 && !memcmp(cur, "<0x", 3) &&
            cur[5] == '>' && hexval(cur[3]) >= 0 && hexval(cur[4]) >= 0) {
            cur[0] = (char)(hexval(cur[3]) * 16 + hexval(cur[4]));
            *outn = 1;
            return cur;
        }
        if (d->kind == DEC_REPLACE || d->kind == DEC_METASPACE) {
            /* Metaspace as on a token after the first: replacement -> ' ' */
            next = d->kind == DEC_REPLACE
                       ? replace_all(cur, len, d->pattern, d->pattern_len, d->content,
                                     d->content_len, growth_limit(n), &len)
                       : replace_all(cur, len, d->strip, d->strip_len, " ", 1, SIZE_MAX, &len);
            free(cur);
            if (!(cur = next)) {
                *outn = len;    /* SIZE_MAX: too long */
                return NULL;
            }
        }
        if (d->kind == DEC_BYTE_LEVEL) {
            /* decoding never grows a token */
            if (!(next = malloc(len + 1))) {
                free(cur);
                return NULL;
            }
            len = token_decode(t, cur, len, next);
            free(cur);
            cur = next;
            break;
        }
    }
    *outn = len;
    return cur;
}

/* The normalizer chain on S (NormalizedString's transformations; only the
 * text matters here, not the alignments): S itself or a string in ARENA.
 * 0, or -1 with msg set ("out of memory", or ICU's failure). */
static int normalize(const nvfp4_tokenizer *t, const char *s, size_t n, tk_arena *arena,
                     const char **out, size_t *outn, char *msg, size_t msgsize)
{
    size_t limit = growth_limit(n), n0 = n;
    const norm_step *bad = NULL;

    for (size_t k = 0; k < t->n_norm; k++) {
        const norm_step *d = &t->norm[k];
        size_t hits = 0, i, o = 0, keep;
        char *q;

        switch (d->kind) {
        case NORM_NFC:
            if (nvfp4m_tk_nfc(s, n, arena, &s, &n, msg, msgsize))
                return -1;
            continue;
        case NORM_PREPEND:
            /* prepend.rs: nothing happens to an empty string */
            if (n == 0)
                continue;
            if (n > limit || d->alen > limit - n) {
                bad = d;
                goto toolong;
            }
            if (!(q = nvfp4m_tk_arena_alloc(arena, n + d->alen)))
                goto nomem;
            memcpy(q, d->a, d->alen);
            memcpy(q + d->alen, s, n);
            s = q;
            n += d->alen;
            continue;
        case NORM_REPLACE:
            /* every non-overlapping occurrence, left to right (a match of
             * valid UTF-8 in valid UTF-8 is on character boundaries) */
            for (i = 0; i + d->alen <= n;)
                if (!memcmp(s + i, d->a, d->alen)) {
                    hits++;
                    i += d->alen;
                } else
                    i++;
            if (!hits)
                continue;
            keep = n - hits * d->alen;
            if (keep > limit || (d->blen && hits > (limit - keep) / d->blen)) {
                bad = d;
                goto toolong;
            }
            if (!(q = nvfp4m_tk_arena_alloc(arena, keep + hits * d->blen + 1)))
                goto nomem;
            for (i = 0; i < n;)
                if (i + d->alen <= n && !memcmp(s + i, d->a, d->alen)) {
                    memcpy(q + o, d->b, d->blen);
                    o += d->blen;
                    i += d->alen;
                } else
                    q[o++] = s[i++];
            s = q;
            n = o;
            continue;
        }
    }
    *out = s;
    *outn = n;
    return 0;
toolong:
    snprintf(msg, msgsize,
             "%s would make a piece of %zu bytes longer than %d times that plus %d bytes",
             bad->where, n0, GROWTH_MAX, GROWTH_SLACK);
    return -1;
nomem:
    snprintf(msg, msgsize, "out of memory");
    return -1;
}

/* Id tables, decoded bytes and the per-byte symbols of BPE. */
static nvfp4_status build_tables(loader *L)
{
    nvfp4_tokenizer *t = L->t;
    size_t n_ids = 0, i;
    tk_added *raw, *norm;
    size_t n_raw = 0, n_norm = 0;
    char msg[400];

    for (i = 0; i < t->n_vocab; i++)
        if ((size_t)t->vocab[i].id + 1 > n_ids)
            n_ids = (size_t)t->vocab[i].id + 1;
    for (i = 0; i < t->n_added; i++)
        if ((size_t)t->added[i].id + 1 > n_ids)
            n_ids = (size_t)t->added[i].id + 1;
    t->n_ids = n_ids;
    t->id_str = calloc(n_ids + 1, sizeof(size_t));
    t->id_str_len = calloc(n_ids + 1, sizeof(uint32_t));
    t->id_bytes = calloc(n_ids + 1, sizeof(size_t));
    t->id_bytes_len = calloc(n_ids + 1, sizeof(uint32_t));
    t->special = calloc(n_ids + 1, 1);
    if (!t->id_str || !t->id_str_len || !t->id_bytes || !t->id_bytes_len || !t->special)
        return fail_nomem(L);
    for (i = 0; i < t->n_vocab; i++) {
        int32_t id = t->vocab[i].id;
        /* With duplicate ids the crate's vocab_r keeps one; keep the first. */
        if (!t->id_str[id]) {
            t->id_str[id] = t->vocab[i].off + 1;
            t->id_str_len[id] = t->vocab[i].len;
        }
    }
    /* Added tokens win: Tokenizer::decode asks the added vocabulary first. */
    for (i = 0; i < t->n_added; i++) {
        tk_added *a = &t->added[i];
        t->id_str[a->id] = a->off + 1;
        t->id_str_len[a->id] = (uint32_t)a->len;
        t->special[a->id] = (unsigned char)a->special;
    }
    for (i = 0; i < n_ids; i++) {
        size_t off, len;
        char *tmp;
        if (!t->id_str[i])
            continue;
        len = 0;
        if (!(tmp = stream_bytes(t, t->pool + t->id_str[i] - 1, t->id_str_len[i], &len)) &&
            len == SIZE_MAX)
            return nvfp4_error_set(L->err, NVFP4_ERR_INVALID, L->path, "decoder", -1,
                                   "its Replace steps make token %zu (%u bytes) longer than %d "
                                   "times that plus %d bytes",
                                   i, (unsigned)t->id_str_len[i], GROWTH_MAX, GROWTH_SLACK);
        if (!tmp || pool_add(t, tmp, len, &off)) {
            free(tmp);
            return fail_nomem(L);
        }
        free(tmp);
        t->id_bytes[i] = off;
        t->id_bytes_len[i] = (uint32_t)len;
    }

    /* Tokens with normalized=true are looked for in normalized text, so
     * in their normalized form (AddedVocabulary::refresh_added_tokens). */
    for (i = 0; i < t->n_added; i++) {
        tk_added *a = &t->added[i];
        a->match_off = a->off;
        a->match_len = a->len;
        if (a->normalized && t->n_norm) {
            tk_arena arena = {0};
            const char *s;
            size_t n;
            if (normalize(t, t->pool + a->off, a->len, &arena, &s, &n, msg, sizeof(msg))) {
                nvfp4m_tk_arena_free(&arena);
                if (!strcmp(msg, "out of memory"))
                    return fail_nomem(L);
                return nvfp4_error_set(L->err, NVFP4_ERR_INVALID, L->path, "added_tokens", -1,
                                       "%s", msg);
            }
            if (s != t->pool + a->off && pool_add(t, s, n, &a->match_off)) {
                nvfp4m_tk_arena_free(&arena);
                return fail_nomem(L);
            }
            a->match_len = n;
            nvfp4m_tk_arena_free(&arena);
        }
    }

    /* The pool is final: turn added token offsets into pointers and split
     * them by where they match (raw text or normalized text). */
    raw = calloc(t->n_added + 1, sizeof(*raw));
    norm = calloc(t->n_added + 1, sizeof(*norm));
    if (!raw || !norm) {
        free(raw);
        free(norm);
        return fail_nomem(L);
    }
    for (i = 0; i < t->n_added; i++) {
        tk_added a = t->added[i];
        a.content = t->pool + a.off;
        t->added[i] = a;
        a.content = t->pool + a.match_off;
        a.len = a.match_len;
        if (a.normalized)
            norm[n_norm++] = a;
        else
            raw[n_raw++] = a;
    }
    if (nvfp4m_tk_added_set_build(&t->added_raw, raw, n_raw, msg, sizeof(msg)) ||
        nvfp4m_tk_added_set_build(&t->added_norm, norm, n_norm, msg, sizeof(msg))) {
        if (!t->added_raw.v)
            free(raw);
        if (!t->added_norm.v)
            free(norm);
        return nvfp4_error_set(L->err, NVFP4_ERR_INVALID, L->path, "added_tokens", -1, "%s",
                               msg);
    }

    byte_level_init(t);
    for (unsigned b = 0; b < 256; b++) {
        char fb[8];
        snprintf(fb, sizeof(fb), "<0x%02X>", b);
        t->byte_tok[b] = vocab_find(t, fb, strlen(fb));
        if (b < 128) {
            fb[0] = (char)b;
            t->ascii_id[b] = vocab_find(t, fb, 1);
        }
        t->byte_id[b] = vocab_find(t, t->byte_char[b], t->byte_char_len[b]);
        t->byte_fb[b][0] = t->byte_fb[b][1] = -1;
        for (unsigned k = 0; k < t->byte_char_len[b]; k++) {
            snprintf(fb, sizeof(fb), "<0x%02X>", (unsigned char)t->byte_char[b][k]);
            t->byte_fb[b][k] = vocab_find(t, fb, strlen(fb));
        }
    }
    return NVFP4_OK;
}

nvfp4_tokenizer *nvfp4_tokenizer_load(const char *path, nvfp4_error *err)
{
    nvfp4_tokenizer *t;
    json_error_t je;
    json_t *root;
    loader L;
    FILE *f;

    if (!path) {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1, "no tokenizer path");
        return NULL;
    }
    /* Open it ourselves: jansson's message would not tell ENOENT apart. */
    f = fopen(path, "rb");
    if (!f) {
        nvfp4_error_set(err, errno == ENOENT ? NVFP4_ERR_NOT_FOUND : NVFP4_ERR_IO, path, NULL,
                        -1, "cannot open: %s", strerror(errno));
        return NULL;
    }
    root = json_loadf(f, 0, &je);
    fclose(f);
    if (!root) {
        nvfp4_error_set(err, NVFP4_ERR_BAD_JSON, path, NULL, je.position,
                        "not valid JSON at line %d, column %d: %s", je.line, je.column, je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        nvfp4_error_set(err, NVFP4_ERR_BAD_JSON, path, NULL, -1,
                        "expected a JSON object, found %s", json_kind(root));
        json_decref(root);
        return NULL;
    }
    t = calloc(1, sizeof(*t));
    L.t = t;
    L.path = path;
    L.err = err;
    if (!t || !(t->path = strdup(path))) {
        fail_nomem(&L);
        free(t);
        json_decref(root);
        return NULL;
    }
    if (load_model(&L, root) || load_added(&L, root) || load_normalizer(&L, root) ||
        load_pretok(&L, root) || load_rest(&L, root) || build_tables(&L)) {
        json_decref(root);
        nvfp4_tokenizer_free(t);
        return NULL;
    }
    json_decref(root);
    return t;
}

void nvfp4_tokenizer_free(nvfp4_tokenizer *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_pretok; i++)
        pcre2_code_free(t->pretok[i].re);
    free(t->pretok);
    for (size_t i = 0; i < t->n_norm; i++) {
        free(t->norm[i].a);
        free(t->norm[i].b);
    }
    free(t->norm);
    for (size_t i = 0; i < t->n_dec; i++) {
        free(t->dec[i].pattern);
        free(t->dec[i].content);
    }
    free(t->dec);
    nvfp4m_tk_added_set_free(&t->added_raw);
    nvfp4m_tk_added_set_free(&t->added_norm);
    free(t->added);
    free(t->id_str);
    free(t->id_str_len);
    free(t->id_bytes);
    free(t->id_bytes_len);
    free(t->special);
    free(t->merges.key);
    free(t->merges.rank);
    free(t->merges.new_id);
    free(t->vmap.slot);
    free(t->vocab);
    free(t->pool);
    free(t->path);
    free(t);
}

size_t nvfp4_tokenizer_vocab_size(const nvfp4_tokenizer *t)
{
    return t ? t->n_ids : 0;
}

/* ---- BPE ------------------------------------------------------------------------ */

typedef struct {
    uint32_t rank;
    int32_t new_id;
    size_t pos;
} merge_item;

typedef struct {
    int32_t *ids;
    size_t n, cap;
    /* scratch for one word */
    int32_t *c;
    size_t *prev, *next;
    unsigned char *alive;
    size_t wcap;
    merge_item *heap;
    size_t hn, hcap;
    char *mapped;
    size_t mcap;
} bpe_state;

static int ids_push(bpe_state *S, int32_t id)
{
    if (S->n == S->cap) {
        size_t cap = S->cap ? S->cap * 2 : 256;
        int32_t *v;
        if (cap > SIZE_MAX / sizeof(*v) || !(v = realloc(S->ids, cap * sizeof(*v))))
            return -1;
        S->ids = v;
        S->cap = cap;
    }
    S->ids[S->n++] = id;
    return 0;
}

/* Word::merge_all orders merges by rank, then by position. */
static int item_less(const merge_item *a, const merge_item *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static int heap_push(bpe_state *S, merge_item it)
{
    size_t i;
    if (S->hn == S->hcap) {
        size_t cap = S->hcap ? S->hcap * 2 : 64;
        merge_item *v;
        if (cap > SIZE_MAX / sizeof(*v) || !(v = realloc(S->heap, cap * sizeof(*v))))
            return -1;
        S->heap = v;
        S->hcap = cap;
    }
    i = S->hn++;
    while (i > 0 && item_less(&it, &S->heap[(i - 1) / 2])) {
        S->heap[i] = S->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    S->heap[i] = it;
    return 0;
}

static merge_item heap_pop(bpe_state *S)
{
    merge_item top = S->heap[0], last = S->heap[--S->hn];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const merge_item *best = &last;
        if (l < S->hn && item_less(&S->heap[l], best)) {
            m = l;
            best = &S->heap[l];
        }
        if (l + 1 < S->hn && item_less(&S->heap[l + 1], best))
            m = l + 1;
        if (m == i)
            break;
        S->heap[i] = S->heap[m];
        i = m;
    }
    if (S->hn)
        S->heap[i] = last;
    return top;
}

static int word_reserve(bpe_state *S, size_t n)
{
    if (n <= S->wcap)
        return 0;
    size_t cap = n < 64 ? 64 : n;
    if (cap > SIZE_MAX / 2 / sizeof(size_t))
        return -1;
    int32_t *c = realloc(S->c, cap * 2 * sizeof(*c));
    if (c)
        S->c = c;
    size_t *p = realloc(S->prev, cap * 2 * sizeof(*p));
    if (p)
        S->prev = p;
    size_t *nx = realloc(S->next, cap * 2 * sizeof(*nx));
    if (nx)
        S->next = nx;
    unsigned char *al = realloc(S->alive, cap * 2);
    if (al)
        S->alive = al;
    char *mp = realloc(S->mapped, cap * 2);
    if (mp)
        S->mapped = mp;
    if (!c || !p || !nx || !al || !mp)
        return -1;
    S->wcap = cap;
    return 0;
}

#define NO_SYM SIZE_MAX

/* merge_word's symbols without ByteLevel: one per UTF-8 character of the
 * piece (valid UTF-8), its vocab id; else, with byte_fallback and every
 * byte's <0xNN> in the vocab, those; else the unk token, fused over a run
 * of unknowns when fuse_unk; else nothing.  Returns the symbol count. */
static size_t char_symbols(const nvfp4_tokenizer *t, bpe_state *S, const unsigned char *s,
                           size_t n)
{
    size_t ns = 0, i = 0;
    int32_t unk = -1;

    while (i < n) {
        size_t k = 1, j;
        int32_t id;
        if (s[i] >= 0xF0)
            k = 4;
        else if (s[i] >= 0xE0)
            k = 3;
        else if (s[i] >= 0xC0)
            k = 2;
        if (k > n - i)
            k = n - i;
        id = k == 1 && s[i] < 0x80 ? t->ascii_id[s[i]] : vocab_find(t, (const char *)s + i, k);
        if (id >= 0) {
            if (unk >= 0) {
                S->c[ns++] = unk;
                unk = -1;
            }
            S->c[ns++] = id;
            i += k;
            continue;
        }
        for (j = 0; t->byte_fallback && j < k && t->byte_tok[s[i + j]] >= 0; j++)
            ;
        if (t->byte_fallback && j == k) {
            /* as the crate does, a pending unk is not flushed first: the
             * byte tokens come before it (merge_word's `continue`) */
            for (j = 0; j < k; j++)
                S->c[ns++] = t->byte_tok[s[i + j]];
            i += k;
            continue;
        }
        if (t->unk_id >= 0) {
            if (unk >= 0 && !t->fuse_unk)
                S->c[ns++] = unk;
            unk = t->unk_id;
        }
        i += k;
    }
    if (unk >= 0)
        S->c[ns++] = unk;
    return ns;
}

/* merge_word + merge_all on the bytes of one piece. */
static int bpe_word(const nvfp4_tokenizer *t, bpe_state *S, const unsigned char *s, size_t n)
{
    size_t ns = 0, i;
    int32_t unk = -1;       /* pending (fused) unknown */

    if (n == 0)
        return 0;
    if (word_reserve(S, n))
        return -1;
    if (t->ignore_merges && !t->byte_level) {
        int32_t id = vocab_find(t, (const char *)s, n);
        if (id >= 0)
            return ids_push(S, id);
    } else if (t->ignore_merges) {
        size_t m = 0;
        int32_t id;
        for (i = 0; i < n; i++) {
            memcpy(S->mapped + m, t->byte_char[s[i]], t->byte_char_len[s[i]]);
            m += t->byte_char_len[s[i]];
        }
        if ((id = vocab_find(t, S->mapped, m)) >= 0)
            return ids_push(S, id);
    }
    /* Symbols: one per character of the mapped word, i.e. one per byte; a
     * byte up to two byte_fallback tokens. */
    if (!t->byte_level)
        ns = char_symbols(t, S, s, n);
    for (i = 0; t->byte_level && i < n; i++) {
        int32_t id = t->byte_id[s[i]];
        if (id >= 0) {
            if (unk >= 0) {
                S->c[ns++] = unk;
                unk = -1;
            }
            S->c[ns++] = id;
            continue;
        }
        if (t->byte_fallback && t->byte_fb[s[i]][0] >= 0 &&
            (t->byte_char_len[s[i]] == 1 || t->byte_fb[s[i]][1] >= 0)) {
            for (unsigned k = 0; k < t->byte_char_len[s[i]]; k++)
                S->c[ns++] = t->byte_fb[s[i]][k];
            continue;
        }
        if (t->unk_id >= 0) {
            if (unk >= 0 && !t->fuse_unk)
                S->c[ns++] = unk;
            unk = t->unk_id;
        }
        /* else: the character is dropped, as merge_word does */
    }
    if (unk >= 0)
        S->c[ns++] = unk;

    S->hn = 0;
    for (i = 0; i < ns; i++) {
        uint32_t rank;
        int32_t nid;
        S->prev[i] = i ? i - 1 : NO_SYM;
        S->next[i] = i + 1 < ns ? i + 1 : NO_SYM;
        S->alive[i] = 1;
        if (i + 1 < ns && pair_find(&t->merges, S->c[i], S->c[i + 1], &rank, &nid) &&
            heap_push(S, (merge_item){rank, nid, i}))
            return -1;
    }
    while (S->hn) {
        merge_item top = heap_pop(S);
        size_t pos = top.pos, nx, pv;
        uint32_t rank;
        int32_t nid;

        if (!S->alive[pos] || S->next[pos] == NO_SYM)
            continue;
        nx = S->next[pos];
        /* a stale entry: the pair changed since it was queued */
        if (!pair_find(&t->merges, S->c[pos], S->c[nx], &rank, &nid) || nid != top.new_id)
            continue;
        S->c[pos] = top.new_id;
        S->alive[nx] = 0;
        S->next[pos] = S->next[nx];
        if (S->next[nx] != NO_SYM)
            S->prev[S->next[nx]] = pos;
        pv = S->prev[pos];
        if (pv != NO_SYM && pair_find(&t->merges, S->c[pv], S->c[pos], &rank, &nid) &&
            heap_push(S, (merge_item){rank, nid, pv}))
            return -1;
        if (S->next[pos] != NO_SYM &&
            pair_find(&t->merges, S->c[pos], S->c[S->next[pos]], &rank, &nid) &&
            heap_push(S, (merge_item){rank, nid, pos}))
            return -1;
    }
    for (i = 0; i < ns; i++)
        if (S->alive[i] && ids_push(S, S->c[i]))
            return -1;
    return 0;
}

nvfp4_status nvfp4_tokenizer_encode(const nvfp4_tokenizer *t, const char *text, size_t len,
                                    int32_t **ids, size_t *n_ids, nvfp4_error *err)
{
    tk_pieces a = {0}, b = {0};
    tk_arena arena = {0};
    bpe_state S;
    pcre2_match_data *md = NULL;
    nvfp4_status st = NVFP4_ERR_NOMEM;
    char msg[400];
    size_t bad;
    tk_budget bud = {0};

    memset(&S, 0, sizeof(S));
    if (!t || !ids || !n_ids || (!text && len))
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                               "tokenizer, text and outputs must not be NULL");
    *ids = NULL;
    *n_ids = 0;
    /* tokenizers takes a Rust str: the text must be valid UTF-8. */
    if ((bad = nvfp4m_tk_utf8_check((const unsigned char *)text, len)) != len)
        return nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, "text", (int64_t)bad,
                               "text is not valid UTF-8 at byte %zu", bad);
    snprintf(msg, sizeof(msg), "out of memory");
    if (!(md = pcre2_match_data_create(1, NULL)) ||
        !(bud.mc = pcre2_match_context_create(NULL)))
        goto fail;
    bud.total = len > (UINT64_MAX - TK_BUDGET_BASE) / TK_BUDGET_PER_BYTE
                    ? UINT64_MAX
                    : TK_BUDGET_BASE + TK_BUDGET_PER_BYTE * (uint64_t)len;
    bud.left = bud.total;
    /* Interpreter only (JIT ignores these): bounded recursion and heap. */
    pcre2_set_depth_limit(bud.mc, 100000);
    pcre2_set_heap_limit(bud.mc, 65536); /* KiB */
    /* 1-2: added tokens, raw then normalized */
    if (nvfp4m_tk_added_split(&t->added_raw, text, len, 1, &a, md))
        goto fail;
    for (size_t i = 0; i < a.n; i++) {
        const char *p = a.v[i].p;
        size_t pn = a.v[i].n;
        if (a.v[i].id >= 0) {
            if (nvfp4m_tk_pieces_push(&b, p, pn, a.v[i].id))
                goto fail;
            continue;
        }
        if (normalize(t, p, pn, &arena, &p, &pn, msg, sizeof(msg))) {
            st = strcmp(msg, "out of memory") ? NVFP4_ERR_INVALID : NVFP4_ERR_NOMEM;
            goto fail;
        }
        if (nvfp4m_tk_added_split(&t->added_norm, p, pn, a.v[i].first, &b, md))
            goto fail;
    }
    /* 3: pre-tokenizer steps */
    for (size_t k = 0; k < t->n_pretok; k++) {
        tk_pieces tmp;
        a.n = 0;
        if (nvfp4m_tk_pretok_apply(&t->pretok[k], &b, &a, &arena, md, &bud, msg,
                                   sizeof(msg))) {
            st = strcmp(msg, "out of memory") ? NVFP4_ERR_INVALID : NVFP4_ERR_NOMEM;
            goto fail;
        }
        tmp = a;
        a = b;
        b = tmp;
    }
    /* 4: BPE */
    for (size_t i = 0; i < b.n; i++) {
        if (b.v[i].id >= 0 ? ids_push(&S, b.v[i].id)
                           : bpe_word(t, &S, (const unsigned char *)b.v[i].p, b.v[i].n))
            goto fail;
    }
    *ids = S.ids;
    *n_ids = S.n;
    S.ids = NULL;
    st = NVFP4_OK;
fail:
    if (st != NVFP4_OK)
        nvfp4_error_set(err, st, t->path, NULL, -1, "encode: %s", msg);
    free(S.ids);
    free(S.c);
    free(S.prev);
    free(S.next);
    free(S.alive);
    free(S.heap);
    free(S.mapped);
    free(a.v);
    free(b.v);
    nvfp4m_tk_arena_free(&arena);
    pcre2_match_data_free(md);
    pcre2_match_context_free(bud.mc);
    return st;
}

const char *nvfp4_tokenizer_token_bytes(const nvfp4_tokenizer *t, int32_t id, size_t *len)
{
    if (!t || id < 0 || (size_t)id >= t->n_ids || !t->id_str[id])
        return NULL;
    if (len)
        *len = t->id_bytes_len[id];
    return t->pool + t->id_bytes[id];
}

/* ---- decoding ---------------------------------------------------------------- */

typedef struct {
    char *s;
    size_t n;
} dstr;

typedef struct {
    dstr *v;
    size_t n, cap;
} dlist;

static int dl_push(dlist *l, const char *s, size_t n)
{
    char *c;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        dstr *v;
        if (cap > SIZE_MAX / sizeof(*v) || !(v = realloc(l->v, cap * sizeof(*v))))
            return -1;
        l->v = v;
        l->cap = cap;
    }
    if (n == SIZE_MAX || !(c = malloc(n + 1)))
        return -1;
    memcpy(c, s, n);
    c[n] = '\0';
    l->v[l->n].s = c;
    l->v[l->n].n = n;
    l->n++;
    return 0;
}

static void dl_free(dlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].s);
    free(l->v);
    memset(l, 0, sizeof(*l));
}

/* All strings of L joined, as one malloc'ed buffer; NULL on overflow/OOM. */
static char *dl_join(const dlist *l, size_t *len)
{
    size_t total = 0, o = 0;
    char *b;
    for (size_t i = 0; i < l->n; i++) {
        if (l->v[i].n > SIZE_MAX - 1 - total)
            return NULL;
        total += l->v[i].n;
    }
    if (!(b = malloc(total + 1)))
        return NULL;
    for (size_t i = 0; i < l->n; i++) {
        memcpy(b + o, l->v[i].s, l->v[i].n);
        o += l->v[i].n;
    }
    b[o] = '\0';
    *len = o;
    return b;
}

/* byte_fallback.rs: runs of <0xXX> tokens become their bytes when those
 * are valid UTF-8, else one U+FFFD per byte. */
static int flush_bytes(dlist *out, unsigned char *bytes, size_t *nb)
{
    if (!*nb)
        return 0;
    if (nvfp4m_tk_utf8_check(bytes, *nb) == *nb) {
        if (dl_push(out, (const char *)bytes, *nb))
            return -1;
    } else {
        for (size_t i = 0; i < *nb; i++)
            if (dl_push(out, "\xEF\xBF\xBD", 3))
                return -1;
    }
    *nb = 0;
    return 0;
}

/* One decoder: IN -> OUT (OUT empty on entry).  0; -1 out of memory; -2
 * when Replace would make the text longer than LIMIT bytes. */
static int dec_apply(const nvfp4_tokenizer *t, const dec_step *d, const dlist *in, dlist *out,
                     size_t limit)
{
    size_t len, i;
    char *b;

    switch (d->kind) {
    case DEC_FUSE:
        if (!(b = dl_join(in, &len)))
            return -1;
        i = (size_t)dl_push(out, b, len);
        free(b);
        return i ? -1 : 0;
    case DEC_BYTE_LEVEL: {
        /* byte_level.rs decode_chain: every token to bytes (its own UTF-8
         * when a character is outside the alphabet), all joined, then
         * String::from_utf8_lossy.  Decoding never grows a token. */
        char *lossy;
        size_t o = 0;
        if (!(b = dl_join(in, &len)))
            return -1;
        for (i = 0; i < in->n; i++)
            o += token_decode(t, in->v[i].s, in->v[i].n, b + o);
        lossy = o <= (SIZE_MAX - 1) / 3 ? malloc(o * 3 + 1) : NULL;
        if (!lossy) {
            free(b);
            return -1;
        }
        len = nvfp4m_tk_utf8_lossy((const unsigned char *)b, o, lossy);
        free(b);
        i = (size_t)dl_push(out, lossy, len);
        free(lossy);
        return i ? -1 : 0;
    }
    case DEC_BYTE_FALLBACK: {
        unsigned char *bytes = malloc(in->n + 1);
        size_t nb = 0;
        if (!bytes)
            return -1;
        for (i = 0; i < in->n; i++) {
            const char *s = in->v[i].s;
            int hi, lo;
            if (in->v[i].n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' &&
                (hi = hexval(s[3])) >= 0 && (lo = hexval(s[4])) >= 0) {
                bytes[nb++] = (unsigned char)(hi * 16 + lo);
                continue;
            }
            if (flush_bytes(out, bytes, &nb) || dl_push(out, s, in->v[i].n)) {
                free(bytes);
                return -1;
            }
        }
        i = (size_t)flush_bytes(out, bytes, &nb);
        free(bytes);
        return i ? -1 : 0;
    }
    case DEC_REPLACE:
        for (i = 0, len = 0; i < in->n; i++) {
            size_t o = 0, k;
            b = replace_all(in->v[i].s, in->v[i].n, d->pattern, d->pattern_len, d->content,
                            d->content_len, limit - len, &o);
            if (!b)
                return o == SIZE_MAX ? -2 : -1;
            len += o;
            k = (size_t)dl_push(out, b, o);
            free(b);
            if (k)
                return -1;
        }
        return 0;
    case DEC_METASPACE:
        /* metaspace.rs decode_chain: every replacement character becomes
         * ' ', except in the first token, where they all go (unless the
         * scheme is "never"). */
        for (i = 0; i < in->n; i++) {
            size_t o;
            int k;
            b = replace_all(in->v[i].s, in->v[i].n, d->strip, d->strip_len,
                            " ", i == 0 && d->prepend ? 0 : 1, SIZE_MAX, &o);
            if (!b)
                return -1;
            k = dl_push(out, b, o);
            free(b);
            if (k)
                return -1;
        }
        return 0;
    case DEC_STRIP:
        /* strip.rs: up to START leading and STOP trailing copies of the
         * character (counted in characters, the token is valid UTF-8). */
        for (i = 0; i < in->n; i++) {
            const char *s = in->v[i].s;
            size_t n = in->v[i].n, a = 0, e = n, k;
            for (k = 0; k < d->start && a + d->strip_len <= n &&
                        !memcmp(s + a, d->strip, d->strip_len);
                 k++)
                a += d->strip_len;
            for (k = 0; k < d->stop && e >= a + d->strip_len &&
                        !memcmp(s + e - d->strip_len, d->strip, d->strip_len);
                 k++)
                e -= d->strip_len;
            if (dl_push(out, s + a, e - a))
                return -1;
        }
        return 0;
    }
    return -1;
}

char *nvfp4_tokenizer_decode(const nvfp4_tokenizer *t, const int32_t *ids, size_t n,
                             int skip_special, nvfp4_error *err)
{
    dlist a = {0}, b = {0};
    char *out = NULL;
    size_t len, total = 0;
    int rc;

    if (!t || (!ids && n)) {
        nvfp4_error_set(err, NVFP4_ERR_INVALID, NULL, NULL, -1,
                        "tokenizer and ids must not be NULL");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (size_t)ids[i] >= t->n_ids || !t->id_str[ids[i]]) {
            nvfp4_error_set(err, NVFP4_ERR_OUT_OF_RANGE, t->path, NULL, -1,
                            "ids[%zu] = %d is not a token id (vocabulary of %zu)", i,
                            (int)ids[i], t->n_ids);
            dl_free(&a);
            return NULL;
        }
        /* Tokenizer::decode: token strings (added vocabulary first), minus
         * the special ones when asked, through the decoder chain, joined. */
        if (skip_special && t->special[ids[i]])
            continue;
        if (dl_push(&a, t->pool + t->id_str[ids[i]] - 1, t->id_str_len[ids[i]]))
            goto nomem;
        total += t->id_str_len[ids[i]];
    }
    for (size_t k = 0; k < t->n_dec; k++) {
        dlist tmp;
        if ((rc = dec_apply(t, &t->dec[k], &a, &b, growth_limit(total))) == -2) {
            dl_free(&a);
            dl_free(&b);
            nvfp4_error_set(err, NVFP4_ERR_INVALID, t->path, "decoder", -1,
                            "decoder step %zu (Replace) would make the text of %zu bytes "
                            "longer than %d times that plus %d bytes",
                            k, total, GROWTH_MAX, GROWTH_SLACK);
            return NULL;
        }
        if (rc)
            goto nomem;
        dl_free(&a);
        tmp = a;
        a = b;
        b = tmp;
    }
    if (!(out = dl_join(&a, &len)))
        goto nomem;
    dl_free(&a);
    return out;
nomem:
    dl_free(&a);
    dl_free(&b);
    nvfp4_error_set(err, NVFP4_ERR_NOMEM, t->path, NULL, -1,
                    "out of memory decoding %zu ids", n);
    return NULL;
}

int32_t nvfp4_tokenizer_token_id(const nvfp4_tokenizer *t, const char *token)
{
    size_t n;
    if (!t || !token)
        return -1;
    n = strlen(token);
    /* The added vocabulary answers first (AddedVocabulary::token_to_id). */
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && memcmp(t->added[i].content, token, n) == 0)
            return t->added[i].id;
    return vocab_find(t, token, n);
}

int nvfp4_tokenizer_is_special(const nvfp4_tokenizer *t, int32_t id)
{
    if (!t || id < 0 || (size_t)id >= t->n_ids)
        return 0;
    return t->special[id];
}
