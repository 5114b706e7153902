/* SPDX-License-Identifier: MIT */
/* The splitting half of the tokenizer: added tokens, pre-tokenizer regexes
 * (PCRE2 standing in for the Oniguruma engine `tokenizers` uses), UTF-8. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer-internal.h"

#ifdef HAVE_ICU
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#endif

/* ---- small containers ---------------------------------------------------- */

int nvfp4m_tk_pieces_push(tk_pieces *ps, const char *p, size_t n, int32_t id)
{
    if (ps->n == ps->cap) {
        size_t cap = ps->cap ? ps->cap * 2 : 64;
        tk_piece *v;
        if (cap > SIZE_MAX / sizeof(*v))
            return -1;
        v = realloc(ps->v, cap * sizeof(*v));
        if (!v)
            return -1;
        ps->v = v;
        ps->cap = cap;
    }
    ps->v[ps->n].p = p;
    ps->v[ps->n].n = n;
    ps->v[ps->n].id = id;
    ps->v[ps->n].first = 0;
    ps->n++;
    return 0;
}

struct tk_block {
    tk_block *next;
    size_t used, size;
    char data[];
};

char *nvfp4m_tk_arena_alloc(tk_arena *a, size_t n)
{
    tk_block *b = a->head;
    if (!b || b->size - b->used < n) {
        size_t size = n > 65536 ? n : 65536;
        if (size > SIZE_MAX - sizeof(*b))
            return NULL;
        b = malloc(sizeof(*b) + size);
        if (!b)
            return NULL;
        b->next = a->head;
        b->used = 0;
        b->size = size;
        a->head = b;
    }
    b->used += n;
    return b->data + b->used - n;
}

void nvfp4m_tk_arena_free(tk_arena *a)
{
    while (a->head) {
        tk_block *next = a->head->next;
        free(a->head);
        a->head = next;
    }
}

/* ---- UTF-8 ---------------------------------------------------------------- */

/* Length of the valid prefix of the sequence at s (1..4 when it is a whole
 * character, else the length of the maximal valid subpart, 0 for a byte that
 * cannot start one), following the Unicode table that Rust's str and
 * String::from_utf8_lossy implement.  *whole is set when it is complete. */
static size_t utf8_seq(const unsigned char *s, size_t len, int *whole)
{
    unsigned c = s[0];
    size_t need, k;
    unsigned lo = 0x80, hi = 0xBF;

    *whole = 0;
    if (c < 0x80) {
        *whole = 1;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0;      /* overlong */
        else if (c == 0xED)
            hi = 0x9F;      /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90;      /* overlong */
        else if (c == 0xF4)
            hi = 0x8F;      /* beyond U+10FFFF */
    } else
        return 0;
    for (k = 1; k < need; k++) {
        if (k >= len)
            return k;
        if (s[k] < lo || s[k] > hi)
            return k;
        lo = 0x80;
        hi = 0xBF;
    }
    *whole = 1;
    return need;
}

size_t nvfp4m_tk_utf8_check(const unsigned char *s, size_t len)
{
    size_t i = 0;
    int whole;

    while (i < len) {
        size_t k;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        k = utf8_seq(s + i, len - i, &whole);
        if (!whole)
            return i;
        i += k;
    }
    return len;
}

size_t nvfp4m_tk_utf8_lossy(const unsigned char *s, size_t len, char *dst)
{
    size_t i = 0, o = 0;
    int whole;

    while (i < len) {
        size_t k = utf8_seq(s + i, len - i, &whole);
        if (whole) {
            memcpy(dst + o, s + i, k);
            o += k;
        } else {
            /* One U+FFFD per maximal subpart, at least one byte consumed. */
            memcpy(dst + o, "\xEF\xBF\xBD", 3);
            o += 3;
            k = k ? k : 1;
        }
        i += k;
    }
    return o;
}

/* Bytes of the character starting at s[i] (1 for a stray byte). */
static size_t char_len(const char *s, size_t n, size_t i)
{
    int whole;
    size_t k = utf8_seq((const unsigned char *)s + i, n - i, &whole);
    return whole ? k : 1;
}

/* Start of the character that ends at s[i] (i > 0). */
static size_t char_before(const char *s, size_t i)
{
    i--;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    return i;
}

/* ---- NFC -------------------------------------------------------------------- */

#ifdef HAVE_ICU
int nvfp4m_tk_nfc(const char *s, size_t n, tk_arena *arena, const char **out, size_t *outn,
           char *msg, size_t msgsize)
{
    UErrorCode e = U_ZERO_ERROR;
    const UNormalizer2 *nfc = unorm2_getNFCInstance(&e);
    UChar *u = NULL, *v = NULL;
    int32_t ulen = 0, vlen, olen = 0;
    size_t i;
    char *o;

    *out = s;
    *outn = n;
    /* ASCII is NFC-invariant: most text never reaches ICU. */
    for (i = 0; i < n && (unsigned char)s[i] < 0x80; i++)
        ;
    if (i == n)
        return 0;
    if (U_FAILURE(e) || n > INT32_MAX / 4)
        goto fail;
    /* UTF-8 -> UTF-16 needs at most n code units; NFC at most 3x that. */
    u = malloc(((size_t)n + 1) * sizeof(UChar));
    v = malloc(((size_t)n * 3 + 1) * sizeof(UChar));
    if (!u || !v)
        goto fail;
    u_strFromUTF8(u, (int32_t)n + 1, &ulen, s, (int32_t)n, &e);
    if (U_FAILURE(e))
        goto fail;
    if (unorm2_quickCheck(nfc, u, ulen, &e) == UNORM_YES && U_SUCCESS(e)) {
        free(u);
        free(v);
        return 0;
    }
    e = U_ZERO_ERROR;
    vlen = unorm2_normalize(nfc, u, ulen, v, (int32_t)n * 3 + 1, &e);
    if (U_FAILURE(e))
        goto fail;
    /* UTF-16 -> UTF-8: at most 3 bytes per code unit */
    if (!(o = nvfp4m_tk_arena_alloc(arena, (size_t)vlen * 3 + 1)))
        goto fail;
    u_strToUTF8(o, vlen * 3 + 1, &olen, v, vlen, &e);
    if (U_FAILURE(e))
        goto fail;
    free(u);
    free(v);
    *out = o;
    *outn = (size_t)olen;
    return 0;
fail:
    free(u);
    free(v);
    snprintf(msg, msgsize, "NFC normalization failed: %s", u_errorName(e));
    return -1;
}
#else
int nvfp4m_tk_nfc(const char *s, size_t n, tk_arena *arena, const char **out, size_t *outn,
           char *msg, size_t msgsize)
{
    (void)arena;
    *out = s;
    *outn = n;
    snprintf(msg, msgsize, "NFC normalization needs ICU, which this build lacks");
    return -1;
}
#endif

/* ---- regexes -------------------------------------------------------------- */

static int buf_put(char **b, size_t *n, size_t *cap, const char *s, size_t k)
{
    if (*cap - *n < k + 1) {
        size_t c = (*cap + k + 1) * 2;
        char *nb = realloc(*b, c);
        if (!nb)
            return -1;
        *b = nb;
        *cap = c;
    }
    memcpy(*b + *n, s, k);
    *n += k;
    (*b)[*n] = '\0';
    return 0;
}

/* Unicode's White_Space property, written out because \p{White_Space}
 * needs PCRE2 10.40 and the set is small and stable (U+180E left it in
 * Unicode 6.3). */
#define WS_ITEMS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
                 "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* Oniguruma (tokenizers' engine, UTF-8, Ruby syntax) and PCRE2 with UCP agree
 * on \p{..}, classes, lookarounds and (?i:); they differ on the shorthand
 * classes.  Onig's \s is White_Space (PCRE2's UCP \s misses U+0085 NEL) and
 * its \w is Letter|Mark|Decimal_Number|Connector_Punctuation (PCRE2 10.42's
 * UCP \w is L, N and '_').  Spell those out so both engines see the same
 * sets.  (\S and \W inside a class stay PCRE2's: a class cannot hold a
 * negated set; they differ from Onig on U+0085 only, and on marks.) */
static char *translate_onig(const char *pat, size_t len)
{
    static const char W[] = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
    char *b = NULL;
    size_t n = 0, cap = 0;
    int in_class = 0;

    if (buf_put(&b, &n, &cap, "", 0))
        return NULL;
    for (size_t i = 0; i < len; i++) {
        char c = pat[i];
        int rc = 0;
        if (c == '\\' && i + 1 < len) {
            char e = pat[++i];
            if (e == 's' && in_class)
                rc = buf_put(&b, &n, &cap, WS_ITEMS, sizeof(WS_ITEMS) - 1);
            else if (e == 's')
                rc = buf_put(&b, &n, &cap, "[" WS_ITEMS "]", sizeof(WS_ITEMS) + 1);
            else if (e == 'S' && !in_class)
                rc = buf_put(&b, &n, &cap, "[^" WS_ITEMS "]", sizeof(WS_ITEMS) + 2);
            else if (e == 'w' && in_class)
                rc = buf_put(&b, &n, &cap, W, sizeof(W) - 1);
            else if (e == 'w')
                rc = buf_put(&b, &n, &cap, "[", 1) ||
                     buf_put(&b, &n, &cap, W, sizeof(W) - 1) ||
                     buf_put(&b, &n, &cap, "]", 1);
            else if (e == 'W' && !in_class)
                rc = buf_put(&b, &n, &cap, "[^", 2) ||
                     buf_put(&b, &n, &cap, W, sizeof(W) - 1) ||
                     buf_put(&b, &n, &cap, "]", 1);
            else {
                char two[2] = {'\\', e};
                rc = buf_put(&b, &n, &cap, two, 2);
            }
        } else {
            if (c == '[') {
                if (!in_class && i + 1 < len && pat[i + 1] == ']') {
                    /* "[]...]": a leading ']' is a literal in both engines */
                    rc = buf_put(&b, &n, &cap, "[]", 2);
                    i++;
                    in_class = 1;
                    if (rc)
                        break;
                    continue;
                }
                in_class++;
            } else if (c == ']' && in_class)
                in_class--;
            rc = buf_put(&b, &n, &cap, &c, 1);
        }
        if (rc) {
            free(b);
            return NULL;
        }
    }
    return b;
}

pcre2_code *nvfp4m_tk_regex_compile(const char *pattern, size_t len, int literal, char *buf,
                             size_t bufsize)
{
    int errcode;
    PCRE2_SIZE erroff;
    pcre2_code *re;
    char *pat = literal ? NULL : translate_onig(pattern, len);
    uint32_t opts = PCRE2_UTF | PCRE2_UCP;

    if (literal)
        opts = PCRE2_UTF | PCRE2_LITERAL;   /* UCP is refused with LITERAL */
    else if (!pat) {
        snprintf(buf, bufsize, "out of memory");
        return NULL;
    }
    re = pcre2_compile((PCRE2_SPTR)(literal ? pattern : pat),
                       literal ? len : PCRE2_ZERO_TERMINATED, opts, &errcode, &erroff,
                       NULL);
    if (!re) {
        char m[256];
        pcre2_get_error_message(errcode, (PCRE2_UCHAR *)m, sizeof(m));
        snprintf(buf, bufsize, "regex /%.*s/ does not compile at offset %zu: %s",
                 (int)(len > 200 ? 200 : len), pattern, (size_t)erroff, m);
        free(pat);
        return NULL;
    }
    free(pat);
    /* JIT is an optimisation only: on failure the interpreter runs.
     * NVFP4_NO_JIT=1 keeps to the interpreter (valgrind cannot see through
     * JIT code and reports its reads as uninitialised). */
    if (!getenv("NVFP4_NO_JIT") || strcmp(getenv("NVFP4_NO_JIT"), "1") != 0)
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

/* One match at or after START; 1 found, 0 none, -1 error (msg set). */
static int re_find(const pcre2_code *re, const char *s, size_t n, size_t start,
                   pcre2_match_data *md, tk_budget *bud, size_t *ms, size_t *me, char *msg,
                   size_t msgsize)
{
    uint32_t lim = TK_PROBE;
    int rc;

    for (;;) {
        uint32_t use = bud->left < lim ? (uint32_t)bud->left : lim;
        if (use == 0) {
            bud->exhausted = 1;
            snprintf(msg, msgsize, "match budget exhausted");
            return -1;
        }
        pcre2_set_match_limit(bud->mc, use);
        rc = pcre2_match(re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, md, bud->mc);
        bud->left -= use;
        if (rc != PCRE2_ERROR_MATCHLIMIT)
            break;
        if (use < lim || lim >= TK_CALL_MAX) {
            bud->exhausted = 1;
            snprintf(msg, msgsize, "match budget exhausted");
            return -1;
        }
        lim = lim > TK_CALL_MAX / 4 ? TK_CALL_MAX : lim * 4;
    }
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0) {
        char m[256];
        pcre2_get_error_message(rc, (PCRE2_UCHAR *)m, sizeof(m));
        snprintf(msg, msgsize, "regex match failed: %s", m);
        return -1;
    }
    /* rc == 0 only says the ovector is too small for the groups; the whole
     * match (pair 0) is always there. */
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

/* ---- splitting by a pattern ------------------------------------------------ */

typedef struct {
    size_t s, e;
    int m;          /* is a match (find_matches); "remove" after the fold */
} span;

typedef struct {
    span *v;
    size_t n, cap;
} spans;

static int spans_push(spans *sp, size_t s, size_t e, int m)
{
    if (sp->n == sp->cap) {
        size_t cap = sp->cap ? sp->cap * 2 : 64;
        span *v;
        if (cap > SIZE_MAX / sizeof(*v))
            return -1;
        v = realloc(sp->v, cap * sizeof(*v));
        if (!v)
            return -1;
        sp->v = v;
        sp->cap = cap;
    }
    sp->v[sp->n++] = (span){s, e, m};
    return 0;
}

/* Pattern::find_matches for a SysRegex: matches and the gaps between them,
 * with onig::FindMatches' iteration (an empty match right where the previous
 * one ended is skipped by one character). */
static int find_matches(const pcre2_code *re, const char *s, size_t n, spans *out,
                        pcre2_match_data *md, tk_budget *bud, char *msg, size_t msgsize)
{
    size_t last_end = 0, prev = 0, last_match_end = 0;
    int have_last = 0;

    out->n = 0;
    if (n == 0)
        return spans_push(out, 0, 0, 0);
    while (last_end <= n) {
        size_t ms, me;
        int rc = re_find(re, s, n, last_end, md, bud, &ms, &me, msg, msgsize);
        if (rc < 0)
            return -1;
        if (rc == 0)
            break;
        if (ms == me && have_last && last_match_end == me) {
            last_end += last_end < n ? char_len(s, n, last_end) : 1;
            continue;
        }
        last_end = me;
        last_match_end = me;
        have_last = 1;
        if (prev != ms && spans_push(out, prev, ms, 0))
            return -1;
        if (spans_push(out, ms, me, 1))
            return -1;
        prev = me;
    }
    if (prev != n && spans_push(out, prev, n, 0))
        return -1;
    return 0;
}

/* NormalizedString::split: fold (offsets, is_match) into (offsets, remove)
 * by the delimiter behaviour, in place. */
static void apply_behavior(spans *sp, tk_behavior b)
{
    size_t w = 0;
    int prev_match = 0;

    switch (b) {
    case TK_ISOLATED:
        for (size_t i = 0; i < sp->n; i++)
            sp->v[i].m = 0;
        return;
    case TK_REMOVED:
        return;
    case TK_CONTIGUOUS:
        for (size_t i = 0; i < sp->n; i++) {
            span x = sp->v[i];
            if (x.m == prev_match && w > 0)
                sp->v[w - 1].e = x.e;
            else
                sp->v[w++] = (span){x.s, x.e, 0};
            prev_match = x.m;
        }
        break;
    case TK_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < sp->n; i++) {
            span x = sp->v[i];
            if (x.m && !prev_match && w > 0)
                sp->v[w - 1].e = x.e;
            else
                sp->v[w++] = (span){x.s, x.e, 0};
            prev_match = x.m;
        }
        break;
    case TK_MERGED_WITH_NEXT: {
        /* Walk backwards, writing from the end; then slide to the front. */
        size_t r = sp->n;
        for (size_t i = sp->n; i-- > 0;) {
            span x = sp->v[i];
            if (x.m && !prev_match && r < sp->n)
                sp->v[r].s = x.s;
            else
                sp->v[--r] = (span){x.s, x.e, 0};
            prev_match = x.m;
        }
        memmove(sp->v, sp->v + r, (sp->n - r) * sizeof(span));
        w = sp->n - r;
        break;
    }
    }
    sp->n = w;
}

int nvfp4m_tk_pretok_apply(const tk_pretok *pt, const tk_pieces *in, tk_pieces *out,
                    tk_arena *arena, pcre2_match_data *md, tk_budget *bud, char *msg,
                    size_t msgsize)
{
    spans sp = {0};
    int rc = -1;

    snprintf(msg, msgsize, "out of memory");
    for (size_t i = 0; i < in->n; i++) {
        tk_piece pc = in->v[i];
        const pcre2_code *re = pt->re;
        tk_behavior behavior = pt->behavior;
        int invert = pt->invert;

        /* PreTokenizedString::split leaves pieces that are tokens alone. */
        if (pc.id >= 0) {
            if (nvfp4m_tk_pieces_push(out, pc.p, pc.n, pc.id))
                goto out;
            continue;
        }
        if (pt->kind == TK_PT_METASPACE) {
            /* metaspace.rs: ' ' -> the replacement, then one more in front
             * (always, or on the piece at the start of the text) unless the
             * piece already starts with it; an empty piece stays empty. */
            size_t spaces = 0, o = 0, rl = pt->repl_len;
            int pre;
            char *q;
            for (size_t k = 0; k < pc.n; k++)
                spaces += pc.p[k] == ' ';
            pre = pc.n > 0 &&
                  (pt->prepend == TK_PREPEND_ALWAYS ||
                   (pt->prepend == TK_PREPEND_FIRST && pc.first)) &&
                  !(pc.p[0] == ' ' || (pc.n >= rl && !memcmp(pc.p, pt->repl, rl)));
            if (spaces || pre) {
                if (spaces + pre > (SIZE_MAX - pc.n) / rl ||
                    !(q = nvfp4m_tk_arena_alloc(arena, pc.n + (spaces + pre) * rl)))
                    goto out;
                if (pre) {
                    memcpy(q, pt->repl, rl);
                    o = rl;
                }
                for (size_t k = 0; k < pc.n; k++)
                    if (pc.p[k] == ' ') {
                        memcpy(q + o, pt->repl, rl);
                        o += rl;
                    } else
                        q[o++] = pc.p[k];
                pc.p = q;
                pc.n = o;
            }
            if (!pt->split) {
                if (pc.n) {
                    if (nvfp4m_tk_pieces_push(out, pc.p, pc.n, -1))
                        goto out;
                    out->v[out->n - 1].first = pc.first;
                }
                continue;
            }
            behavior = TK_MERGED_WITH_NEXT;
            invert = 0;
        }
        if (pt->kind == TK_PT_BYTELEVEL) {
            /* byte_level.rs: prefix every piece that lacks a leading space. */
            if (pt->add_prefix_space && (pc.n == 0 || pc.p[0] != ' ')) {
                char *q;
                if (pc.n == SIZE_MAX || !(q = nvfp4m_tk_arena_alloc(arena, pc.n + 1)))
                    goto out;
                q[0] = ' ';
                memcpy(q + 1, pc.p, pc.n);
                pc.p = q;
                pc.n++;
            }
            if (!pt->use_regex) {
                if (pc.n) {
                    if (nvfp4m_tk_pieces_push(out, pc.p, pc.n, -1))
                        goto out;
                    out->v[out->n - 1].first = pc.first;
                }
                continue;
            }
            behavior = TK_ISOLATED;
            invert = 0;
        }
        if (find_matches(re, pc.p, pc.n, &sp, md, bud, msg, msgsize)) {
            if (bud->exhausted)
                snprintf(msg, msgsize,
                         "the regex of %s exhausted the match budget of %" PRIu64 " steps "
                         "for this text (%" PRIu64 " per byte; at most %u per match): it "
                         "backtracks without bound", pt->where, bud->total,
                         TK_BUDGET_PER_BYTE, TK_CALL_MAX);
            goto out;
        }
        if (invert)
            for (size_t k = 0; k < sp.n; k++)
                sp.v[k].m = !sp.v[k].m;
        apply_behavior(&sp, behavior);
        for (size_t k = 0; k < sp.n; k++) {
            /* Empty splits are dropped (PreTokenizedString::split). */
            if (sp.v[k].m || sp.v[k].e <= sp.v[k].s)
                continue;
            if (nvfp4m_tk_pieces_push(out, pc.p + sp.v[k].s, sp.v[k].e - sp.v[k].s, -1)) {
                snprintf(msg, msgsize, "out of memory");
                goto out;
            }
            out->v[out->n - 1].first = pc.first && sp.v[k].s == 0;
        }
    }
    rc = 0;
out:
    free(sp.v);
    return rc;
}

/* ---- added tokens ------------------------------------------------------------ */

static int cmp_added(const void *a, const void *b)
{
    const tk_added *x = a, *y = b;
    unsigned char bx = (unsigned char)x->content[0], by = (unsigned char)y->content[0];
    if (bx != by)
        return bx < by ? -1 : 1;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;   /* longest first */
    return x->id < y->id ? -1 : x->id > y->id;
}

int nvfp4m_tk_added_set_build(tk_added_set *set, tk_added *tokens, size_t n, char *msg,
                       size_t msgsize)
{
    size_t w = 0;

    memset(set, 0, sizeof(*set));
    /* An empty pattern can never be found by the automaton. */
    for (size_t i = 0; i < n; i++)
        if (tokens[i].len > 0)
            tokens[w++] = tokens[i];
    n = w;
    if (n)
        qsort(tokens, n, sizeof(*tokens), cmp_added);
    set->v = tokens;
    set->n = n;
    for (size_t b = 0, i = 0; b <= 256; b++) {
        while (i < n && (unsigned char)tokens[i].content[0] < b)
            i++;
        set->first[b] = i;
    }
    /* Rust regex \w and \s (added_vocabulary.rs), one character each. */
    /* \p{Alphabetic} (PCRE2 >= 10.40 only) is L, Nl and Other_Alphabetic,
     * which is marks (in \p{M}) and the circled/squared Latin letters. */
    static const char word[] = "[\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}"
                               "\\x{24B6}-\\x{24E9}\\x{1F130}-\\x{1F149}\\x{1F150}-\\x{1F169}"
                               "\\x{1F170}-\\x{1F189}]";
    static const char space[] = "[" WS_ITEMS "]";
    set->word_re = nvfp4m_tk_regex_compile(word, sizeof(word) - 1, 0, msg, msgsize);
    set->space_re = set->word_re ? nvfp4m_tk_regex_compile(space, sizeof(space) - 1, 0, msg, msgsize)
                                 : NULL;
    return set->word_re && set->space_re ? 0 : -1;
}

void nvfp4m_tk_added_set_free(tk_added_set *set)
{
    free(set->v);
    pcre2_code_free(set->word_re);
    pcre2_code_free(set->space_re);
    memset(set, 0, sizeof(*set));
}

/* Does the character at s[i] match the one-character class RE? */
static int char_is(const pcre2_code *re, const char *s, size_t n, size_t i,
                   pcre2_match_data *md)
{
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, i, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, md,
                         NULL);
    return rc >= 0;
}

int nvfp4m_tk_added_split(const tk_added_set *set, const char *s, size_t n, int first,
                          tk_pieces *out, pcre2_match_data *md)
{
    size_t start_offset = 0, i = 0;

    if (set->n == 0 || n == 0) {
        if (!n)
            return 0;
        if (nvfp4m_tk_pieces_push(out, s, n, -1))
            return -1;
        out->v[out->n - 1].first = first;
        return 0;
    }
    while (i < n) {
        unsigned char b = (unsigned char)s[i];
        const tk_added *m = NULL;
        size_t start, stop;

        for (size_t k = set->first[b]; k < set->first[b + 1]; k++) {
            const tk_added *t = &set->v[k];
            if (t->len <= n - i && memcmp(s + i, t->content, t->len) == 0) {
                m = t;      /* longest first: the leftmost-longest match */
                break;
            }
        }
        if (!m) {
            i++;
            continue;
        }
        start = i;
        stop = i + m->len;
        i = stop;   /* the automaton resumes after the match, kept or not */
        if (m->single_word) {
            int start_space = start == 0 || !char_is(set->word_re, s, n, char_before(s, start), md);
            int stop_space = stop == n || !char_is(set->word_re, s, n, stop, md);
            if (!start_space || !stop_space)
                continue;
        }
        if (m->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t c = char_before(s, ns);
                if (!char_is(set->space_re, s, n, c, md))
                    break;
                ns = c;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (m->rstrip) {
            while (stop < n && char_is(set->space_re, s, n, stop, md))
                stop += char_len(s, n, stop);
        }
        if (start_offset < start) {
            if (nvfp4m_tk_pieces_push(out, s + start_offset, start - start_offset, -1))
                return -1;
            out->v[out->n - 1].first = first && start_offset == 0;
        }
        if (nvfp4m_tk_pieces_push(out, s + start, stop - start, m->id))
            return -1;
        start_offset = stop;
    }
    if (start_offset < n) {
        if (nvfp4m_tk_pieces_push(out, s + start_offset, n - start_offset, -1))
            return -1;
        out->v[out->n - 1].first = first && start_offset == 0;
    }
    return 0;
}
