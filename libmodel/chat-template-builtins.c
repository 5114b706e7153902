/* SPDX-License-Identifier: MIT */
/*
 * chat-template-builtins.c - the filters, tests, string and dict methods and
 * global functions chat templates call, each as jinja2 3.1 (filters.py,
 * tests.py), Python's str/dict and transformers' apply_chat_template
 * (tojson = json.dumps(x, ensure_ascii=False, indent=..., separators=...,
 * sort_keys=...), raise_exception, strftime_now) define them.  Case
 * mapping is ASCII-only; whitespace is Python's str.isspace() set.
 */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat-template-internal.h"

/* ---- helpers -------------------------------------------------------------- */

int nvfp4m_ct_fail_arg(ctctx *C, const ctnode *at, const char *fn, const char *what)
{
    return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "%s: %s", fn, what);
}

/* argument POS or keyword NAME; 1 if present */
const cval *nvfp4m_ct_arg(const cargs *a, size_t pos, const char *name)
{
    size_t npos = 0;
    for (size_t i = 0; i < a->n; i++) {
        if (!a->names[i]) {
            if (npos++ == pos)
                return &a->v[i];
        } else if (name && !strcmp(a->names[i], name)) {
            return &a->v[i];
        }
    }
    return NULL;
}

size_t nvfp4m_ct_npositional(const cargs *a)
{
    size_t n = 0;
    for (size_t i = 0; i < a->n; i++)
        n += !a->names[i];
    return n;
}

cval nvfp4m_ct_mkint(long long i)
{
    cval v = {0};
    v.t = CV_INT;
    v.u.i = i;
    return v;
}

cval nvfp4m_ct_mkbool(int b)
{
    cval v = {0};
    v.t = CV_BOOL;
    v.u.i = b != 0;
    return v;
}

cval nvfp4m_ct_mkstrv(const char *p, size_t n)
{
    cval v = {0};
    v.t = CV_STR;
    v.u.s.p = p;
    v.u.s.n = n;
    return v;
}

clist *nvfp4m_ct_list_new(ctctx *C, const ctnode *at, size_t n)
{
    clist *l = nvfp4m_ct_new(C, at, sizeof *l);
    if (!l || (n && !(l->v = nvfp4m_ct_new(C, at, n * sizeof *l->v))))
        return NULL;
    return l;
}

cval nvfp4m_ct_listv(clist *l, int tuple)
{
    cval v = {0};
    v.t = CV_LIST;
    v.tuple = (unsigned char)tuple;
    v.u.l = l;
    return v;
}

int nvfp4m_ct_need_str(ctctx *C, const ctnode *at, const cval *v, const char *fn)
{
    if (v->t == CV_STR)
        return 0;
    if (v->t == CV_UNDEF)
        return nvfp4m_ct_undef_error(C, at, v);
    return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "%s: expected a string, got '%s'", fn,
                          nvfp4m_ct_type(v));
}

/* bytes of the whitespace code point at s (Python str.isspace), or 0 */
size_t nvfp4m_ct_ws_len(const char *s, size_t n)
{
    unsigned char c = (unsigned char)s[0];
    if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f))
        return 1;
    if (n >= 2 && c == 0xC2 && ((unsigned char)s[1] == 0x85 || (unsigned char)s[1] == 0xA0))
        return 2;
    if (n >= 3 && c == 0xE1 && (unsigned char)s[1] == 0x9A && (unsigned char)s[2] == 0x80)
        return 3;
    if (n >= 3 && c == 0xE2 && (unsigned char)s[1] == 0x80) {
        unsigned char d = (unsigned char)s[2];
        if (d <= 0x8A || d == 0xA8 || d == 0xA9 || d == 0xAF)
            return 3;
    }
    if (n >= 3 && c == 0xE2 && (unsigned char)s[1] == 0x81 && (unsigned char)s[2] == 0x9F)
        return 3;
    if (n >= 3 && c == 0xE3 && (unsigned char)s[1] == 0x80 && (unsigned char)s[2] == 0x80)
        return 3;
    return 0;
}

static size_t u8len(const char *s, size_t n)
{
    size_t k = 1;
    while (k < n && ((unsigned char)s[k] & 0xC0) == 0x80)
        k++;
    return k;
}

/* length of the code point at s if it is one of CHARS (NULL: whitespace), else 0 */
static size_t strip_match(const char *s, size_t n, const cval *chars)
{
    size_t k;
    if (!chars)
        return nvfp4m_ct_ws_len(s, n);
    k = u8len(s, n);
    for (size_t i = 0; i < chars->u.s.n;) {
        size_t m = u8len(chars->u.s.p + i, chars->u.s.n - i);
        if (m == k && !memcmp(chars->u.s.p + i, s, k))
            return k;
        i += m;
    }
    return 0;
}

/* the start of the code point that ends at s[end] (exclusive) */
static size_t prev_cp(const char *s, size_t end)
{
    size_t i = end - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    return i;
}

cval nvfp4m_ct_do_strip(const cval *s, const cval *chars, int left, int right)
{
    size_t a = 0, b = s->u.s.n, k;
    const char *p = s->u.s.p;
    if (chars && chars->t != CV_STR)
        chars = NULL;
    while (left && a < b && (k = strip_match(p + a, b - a, chars)))
        a += k;
    while (right && b > a) {
        size_t st = prev_cp(p, b);
        if (st < a || !strip_match(p + st, b - st, chars))
            break;
        b = st;
    }
    return nvfp4m_ct_mkstrv(p + a, b - a);
}

static char lower_c(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static char upper_c(char c)
{
    return c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c;
}

int nvfp4m_ct_is_cased(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* mode: 'l' lower, 'u' upper, 't' str.title, 'c' capitalize, 'j' jinja's title filter */
int nvfp4m_ct_case_map(ctctx *C, const ctnode *at, const cval *s, int mode, cval *out)
{
    char *p = nvfp4m_ct_new(C, at, s->u.s.n + 1);
    int prev_cased = 0, word_start = 1;

    if (!p || nvfp4m_ct_step(C, at, s->u.s.n / 64))
        return -1;
    for (size_t i = 0; i < s->u.s.n; i++) {
        char c = s->u.s.p[i];
        switch (mode) {
        case 'l': p[i] = lower_c(c); break;
        case 'u': p[i] = upper_c(c); break;
        case 'c': p[i] = i == 0 ? upper_c(c) : lower_c(c); break;
        case 't':
            p[i] = prev_cased ? lower_c(c) : upper_c(c);
            prev_cased = nvfp4m_ct_is_cased(c);
            break;
        default:                       /* words start after - whitespace ( { [ < */
            p[i] = word_start ? upper_c(c) : lower_c(c);
            if (((unsigned char)c & 0xC0) != 0x80)
                word_start =
                    strchr("-({[<", c) != NULL || nvfp4m_ct_ws_len(s->u.s.p + i, s->u.s.n - i);
            break;
        }
    }
    *out = nvfp4m_ct_mkstrv(p, s->u.s.n);
    return 0;
}

long long nvfp4m_ct_find_ll(const cval *hay, const cval *needle, size_t from)
{
    if (needle->u.s.n == 0)
        return (long long)from;
    for (size_t i = from; i + needle->u.s.n <= hay->u.s.n; i++)
        if (!memcmp(hay->u.s.p + i, needle->u.s.p, needle->u.s.n))
            return (long long)i;
    return -1;
}

int nvfp4m_ct_replace(ctctx *C, const ctnode *at, const cval *s, const cval *old, const cval *new,
                   long long count, cval *out)
{
    cbuf b = {0};
    size_t i = 0;
    long long done = 0;

    if (nvfp4m_ct_step(C, at, s->u.s.n / 64 + 1))
        return -1;
    while (i <= s->u.s.n && (count < 0 || done < count)) {
        long long j = nvfp4m_ct_find_ll(s, old, i);
        if (j < 0)
            break;
        if (nvfp4m_ct_put(C, at, &b, s->u.s.p + i, (size_t)j - i) ||
            nvfp4m_ct_put(C, at, &b, new->u.s.p, new->u.s.n))
            goto fail;
        done++;
        if (old->u.s.n == 0) {         /* Python inserts NEW between code points */
            size_t k = (size_t)j < s->u.s.n ? u8len(s->u.s.p + j, s->u.s.n - (size_t)j) : 1;
            if ((size_t)j < s->u.s.n && nvfp4m_ct_put(C, at, &b, s->u.s.p + j, k))
                goto fail;
            i = (size_t)j + k;
        } else {
            i = (size_t)j + old->u.s.n;
        }
    }
    if (i < s->u.s.n && nvfp4m_ct_put(C, at, &b, s->u.s.p + i, s->u.s.n - i))
        goto fail;
    {
        int r = nvfp4m_ct_str(C, b.p ? b.p : "", b.n, out);
        free(b.p);
        return r;
    }
fail:
    free(b.p);
    return -1;
}

int nvfp4m_ct_list_push(ctctx *C, const ctnode *at, clist *l, size_t *cap, const cval *v)
{
    if (l->n == *cap) {
        size_t nc = *cap ? 2 * *cap : 8;
        cval *nv = nvfp4m_ct_new(C, at, nc * sizeof *nv);
        if (!nv)
            return -1;
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        *cap = nc;
    }
    l->v[l->n++] = *v;
    return 0;
}

/* str.split / rsplit (rsplit only differs with maxsplit) */
int nvfp4m_ct_split(ctctx *C, const ctnode *at, const cval *s, const cval *sep, long long maxsplit,
                 cval *out)
{
    clist *l = nvfp4m_ct_list_new(C, at, 0);
    size_t cap = 0, i = 0, n = s->u.s.n;
    const char *p = s->u.s.p;
    long long done = 0;

    if (!l || nvfp4m_ct_step(C, at, n / 64 + 1))
        return -1;
    if (!sep || sep->t == CV_NONE) {
        for (;;) {
            size_t k, st;
            while (i < n && (k = nvfp4m_ct_ws_len(p + i, n - i)))
                i += k;
            if (i >= n)
                break;
            st = i;
            if (maxsplit >= 0 && done >= maxsplit) {
                size_t e = n;
                while (e > st) {
                    size_t q = prev_cp(p, e);
                    if (!nvfp4m_ct_ws_len(p + q, e - q))
                        break;
                    e = q;
                }
                cval v = nvfp4m_ct_mkstrv(p + st, e - st);
                if (nvfp4m_ct_list_push(C, at, l, &cap, &v))
                    return -1;
                break;
            }
            while (i < n && !nvfp4m_ct_ws_len(p + i, n - i))
                i += u8len(p + i, n - i);
            cval v = nvfp4m_ct_mkstrv(p + st, i - st);
            if (nvfp4m_ct_list_push(C, at, l, &cap, &v))
                return -1;
            done++;
        }
    } else {
        if (sep->t != CV_STR)
            return nvfp4m_ct_need_str(C, at, sep, "split");
        if (sep->u.s.n == 0)
            return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "split: empty separator");
        for (;;) {
            long long j = maxsplit >= 0 && done >= maxsplit ? -1 : nvfp4m_ct_find_ll(s, sep, i);
            cval v = nvfp4m_ct_mkstrv(p + i, (j < 0 ? n : (size_t)j) - i);
            if (nvfp4m_ct_list_push(C, at, l, &cap, &v))
                return -1;
            if (j < 0)
                break;
            i = (size_t)j + sep->u.s.n;
            done++;
        }
    }
    *out = nvfp4m_ct_listv(l, 0);
    return 0;
}

/* ---- tojson: Python's json.dumps ------------------------------------------ */

typedef struct {
    const char *indent;       /* NULL: no newlines */
    size_t nindent;
    const char *isep, *ksep;
    size_t nisep, nksep;
    int sort, ascii;
} jsonopt;

static int json_str(ctctx *C, const ctnode *at, cbuf *b, const char *s, size_t n, int ascii)
{
    size_t st = 0;
    if (nvfp4m_ct_put(C, at, b, "\"", 1))
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[16];
        const char *e = NULL;
        size_t skip = 0;
        if (c == '"')
            e = "\\\"";
        else if (c == '\\')
            e = "\\\\";
        else if (c == '\n')
            e = "\\n";
        else if (c == '\r')
            e = "\\r";
        else if (c == '\t')
            e = "\\t";
        else if (c == '\b')
            e = "\\b";
        else if (c == '\f')
            e = "\\f";
        else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            e = esc;
        } else if (c >= 0x80 && ascii) {
            size_t k = u8len(s + i, n - i);
            unsigned cp = k == 2 ? c & 0x1F : k == 3 ? c & 0x0F : c & 0x07;
            for (size_t j = 1; j < k; j++)
                cp = (cp << 6) | ((unsigned char)s[i + j] & 0x3F);
            if (cp >= 0x10000)
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10),
                         0xDC00 + ((cp - 0x10000) & 0x3FF));
            else
                snprintf(esc, sizeof esc, "\\u%04x", cp);
            e = esc;
            skip = k - 1;
        }
        if (e) {
            if (nvfp4m_ct_put(C, at, b, s + st, i - st) || nvfp4m_ct_put(C, at, b, e, strlen(e)))
                return -1;
            i += skip;
            st = i + 1;
        }
    }
    if (nvfp4m_ct_put(C, at, b, s + st, n - st))
        return -1;
    return nvfp4m_ct_put(C, at, b, "\"", 1);
}

static int json_nl(ctctx *C, const ctnode *at, cbuf *b, const jsonopt *o, int level)
{
    if (!o->indent)
        return 0;
    if (nvfp4m_ct_put(C, at, b, "\n", 1))
        return -1;
    for (int i = 0; i < level; i++)
        if (nvfp4m_ct_put(C, at, b, o->indent, o->nindent))
            return -1;
    return 0;
}

static int keycmp(const void *x, const void *y)
{
    const cval *a = *(const cval *const *)x, *b = *(const cval *const *)y;
    size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
    int c = memcmp(a->u.s.p, b->u.s.p, n);
    return c ? c : (a->u.s.n > b->u.s.n) - (a->u.s.n < b->u.s.n);
}

static int json_val(ctctx *C, const ctnode *at, cbuf *b, const cval *v, const jsonopt *o,
                    int level)
{
    if (level > 200)
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "tojson: value nested deeper than 200");
    switch (v->t) {
    case CV_NONE: return nvfp4m_ct_put(C, at, b, "null", 4);
    case CV_BOOL: return v->u.i ? nvfp4m_ct_put(C, at, b, "true", 4)
                                : nvfp4m_ct_put(C, at, b, "false", 5);
    case CV_INT: case CV_FLOAT:
        if (v->t == CV_FLOAT && (isnan(v->u.f) || isinf(v->u.f))) {
            const char *s = isnan(v->u.f) ? "NaN" : v->u.f < 0 ? "-Infinity" : "Infinity";
            return nvfp4m_ct_put(C, at, b, s, strlen(s));
        }
        return nvfp4m_ct_write(C, at, b, v, 0, 0);
    case CV_STR: return json_str(C, at, b, v->u.s.p, v->u.s.n, o->ascii);
    case CV_LIST:
        if (nvfp4m_ct_step(C, at, v->u.l->n))
            return -1;
        if (v->u.l->n == 0)
            return nvfp4m_ct_put(C, at, b, "[]", 2);
        if (nvfp4m_ct_put(C, at, b, "[", 1))
            return -1;
        for (size_t i = 0; i < v->u.l->n; i++)
            if ((i && nvfp4m_ct_put(C, at, b, o->isep, o->nisep)) ||
                json_nl(C, at, b, o, level + 1) || json_val(C, at, b, &v->u.l->v[i], o, level + 1))
                return -1;
        if (json_nl(C, at, b, o, level))
            return -1;
        return nvfp4m_ct_put(C, at, b, "]", 1);
    case CV_DICT: {
        size_t n = v->u.d->n;
        const cval **keys;
        if (nvfp4m_ct_step(C, at, n))
            return -1;
        if (n == 0)
            return nvfp4m_ct_put(C, at, b, "{}", 2);
        if (!(keys = nvfp4m_ct_new(C, at, n * sizeof *keys)))
            return -1;
        for (size_t i = 0; i < n; i++)
            keys[i] = &v->u.d->k[i];
        if (o->sort)
            qsort(keys, n, sizeof *keys, keycmp);
        if (nvfp4m_ct_put(C, at, b, "{", 1))
            return -1;
        for (size_t i = 0; i < n; i++) {
            const cval *val = &v->u.d->v[keys[i] - v->u.d->k];
            if ((i && nvfp4m_ct_put(C, at, b, o->isep, o->nisep)) ||
                json_nl(C, at, b, o, level + 1) ||
                json_str(C, at, b, keys[i]->u.s.p, keys[i]->u.s.n, o->ascii) ||
                nvfp4m_ct_put(C, at, b, o->ksep, o->nksep) || json_val(C, at, b, val, o, level + 1))
                return -1;
        }
        if (json_nl(C, at, b, o, level))
            return -1;
        return nvfp4m_ct_put(C, at, b, "}", 1);
    }
    default:
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID,
                              "tojson: Object of type %s is not JSON serializable",
                              nvfp4m_ct_type(v));
    }
}

static int tojson(ctctx *C, const ctnode *at, const cval *v, const cargs *a, cval *out)
{
    jsonopt o = {NULL, 0, ", ", ": ", 2, 2, 0, 0};
    const cval *ind = nvfp4m_ct_arg(a, 1, "indent"), *sep = nvfp4m_ct_arg(a, 2, "separators"),
               *sk = nvfp4m_ct_arg(a, 3, "sort_keys"), *ea = nvfp4m_ct_arg(a, 0, "ensure_ascii");
    char spaces[256];
    cbuf b = {0};
    int r;

    /* transformers' tojson(x, ensure_ascii=False, indent=None, separators=None,
     * sort_keys=False): positional arguments in that order */
    if (ea)
        o.ascii = nvfp4m_ct_truthy(ea);
    if (ind && ind->t != CV_NONE) {
        if (ind->t == CV_INT) {
            long long k = ind->u.i < 0 ? 0 : ind->u.i > 255 ? 255 : ind->u.i;
            memset(spaces, ' ', (size_t)k);
            o.indent = spaces;
            o.nindent = (size_t)k;
        } else if (ind->t == CV_STR) {
            o.indent = ind->u.s.p;
            o.nindent = ind->u.s.n;
        } else {
            return nvfp4m_ct_fail_arg(C, at, "tojson", "indent must be an int or a string");
        }
        o.isep = ",";
        o.nisep = 1;
    }
    if (sep && sep->t != CV_NONE) {
        if (sep->t != CV_LIST || sep->u.l->n != 2 || sep->u.l->v[0].t != CV_STR ||
            sep->u.l->v[1].t != CV_STR)
            return nvfp4m_ct_fail_arg(C, at, "tojson", "separators must be a pair of strings");
        o.isep = sep->u.l->v[0].u.s.p;
        o.nisep = sep->u.l->v[0].u.s.n;
        o.ksep = sep->u.l->v[1].u.s.p;
        o.nksep = sep->u.l->v[1].u.s.n;
    }
    if (sk)
        o.sort = nvfp4m_ct_truthy(sk);
    r = json_val(C, at, &b, v, &o, 0);
    if (!r)
        r = nvfp4m_ct_str(C, b.p ? b.p : "", b.n, out);
    free(b.p);
    return r;
}

/* ---- tests ---------------------------------------------------------------- */

static const char *const test_names[] = {
    "defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number",
    "integer", "float", "boolean", "true", "false", "eq", "equalto", "ne", "lt", "lessthan",
    "le", "gt", "greaterthan", "ge", "in", "odd", "even", "divisibleby", "lower", "upper",
    "callable", "sameas", NULL};

int nvfp4m_ct_known_test(const char *name)
{
    for (size_t i = 0; test_names[i]; i++)
        if (!strcmp(test_names[i], name))
            return 1;
    return 0;
}

int nvfp4m_ct_test(ctctx *C, const ctnode *at, const char *name, const cval *v,
                   const cargs *a, int *res)
{
    const cval *x = nvfp4m_ct_arg(a, 0, NULL);
    int t = v->t;

    *res = 0;
    if (!strcmp(name, "defined")) { *res = t != CV_UNDEF; return 0; }
    if (!strcmp(name, "undefined")) { *res = t == CV_UNDEF; return 0; }
    if (!strcmp(name, "none")) { *res = t == CV_NONE; return 0; }
    if (!strcmp(name, "string")) { *res = t == CV_STR; return 0; }
    if (!strcmp(name, "mapping")) { *res = t == CV_DICT; return 0; }
    if (!strcmp(name, "iterable")) {
        *res = t == CV_STR || t == CV_LIST || t == CV_DICT || t == CV_UNDEF || t == CV_LOOP;
        return 0;
    }
    if (!strcmp(name, "sequence")) {
        *res = t == CV_STR || t == CV_LIST || t == CV_DICT || t == CV_UNDEF;
        return 0;
    }
    if (!strcmp(name, "number")) { *res = t == CV_INT || t == CV_FLOAT || t == CV_BOOL; return 0; }
    if (!strcmp(name, "integer")) { *res = t == CV_INT; return 0; }
    if (!strcmp(name, "float")) { *res = t == CV_FLOAT; return 0; }
    if (!strcmp(name, "boolean")) { *res = t == CV_BOOL; return 0; }
    if (!strcmp(name, "true")) { *res = t == CV_BOOL && v->u.i; return 0; }
    if (!strcmp(name, "false")) { *res = t == CV_BOOL && !v->u.i; return 0; }
    if (!strcmp(name, "callable")) {
        *res = t == CV_MACRO || t == CV_METHOD || t == CV_FUNC;
        return 0;
    }
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        cval s;
        int cased = 0, ok = 1, up = name[0] == 'u';
        if (nvfp4m_ct_to_str(C, at, v, &s))
            return -1;
        for (size_t i = 0; i < s.u.s.n; i++) {
            char c = s.u.s.p[i];
            if (nvfp4m_ct_is_cased(c)) {
                cased = 1;
                if (up ? (c >= 'a' && c <= 'z') : (c >= 'A' && c <= 'Z'))
                    ok = 0;
            }
        }
        *res = cased && ok;
        return 0;
    }
    if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
        long long d = 2, m;
        if (t != CV_INT && t != CV_BOOL)
            return nvfp4m_ct_fail(C, at, NVFP4_ERR_UNSUPPORTED, "test '%s' of a %s", name,
                                  nvfp4m_ct_type(v));
        if (name[0] == 'd') {
            if (!x || (x->t != CV_INT && x->t != CV_BOOL))
                return nvfp4m_ct_fail_arg(C, at, "divisibleby", "expected an integer argument");
            d = x->u.i;
            if (d == 0)
                return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "divisibleby: modulo by zero");
        }
        m = d == -1 ? 0 : v->u.i % d;
        *res = name[0] == 'o' ? m != 0 : m == 0;
        return 0;
    }
    if (!x)
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "test '%s' needs an argument", name);
    if (!strcmp(name, "sameas")) {
        if (t != x->t)
            return 0;
        if (t == CV_NONE || t == CV_UNDEF)
            *res = 1;
        else if (t == CV_BOOL || t == CV_INT)
            *res = v->u.i == x->u.i;
        else if (t == CV_STR)
            *res = v->u.s.p == x->u.s.p && v->u.s.n == x->u.s.n;
        else
            *res = v->u.l == x->u.l;
        return 0;
    }
    {
        int op = !strcmp(name, "eq") || !strcmp(name, "equalto") ? OP_EQ
               : !strcmp(name, "ne") ? OP_NE
               : !strcmp(name, "lt") || !strcmp(name, "lessthan") ? '<'
               : !strcmp(name, "le") ? OP_LE
               : !strcmp(name, "gt") || !strcmp(name, "greaterthan") ? '>'
               : !strcmp(name, "ge") ? OP_GE : OP_IN;
        cval r;
        if (nvfp4m_ct_cmp(C, at, op, v, x, &r))
            return -1;
        *res = (int)r.u.i;
        return 0;
    }
}

/* ---- filters -------------------------------------------------------------- */

static const char *const filter_names[] = {
    "abs", "capitalize", "count", "d", "default", "e", "escape", "first", "float",
    "forceescape", "indent", "int", "items", "join", "last", "length", "list", "lower", "map",
    "reject", "rejectattr", "replace", "reverse", "safe", "select", "selectattr", "string",
    "sum", "title", "tojson", "trim", "upper", NULL};

int nvfp4m_ct_known_filter(const char *name)
{
    for (size_t i = 0; filter_names[i]; i++)
        if (!strcmp(filter_names[i], name))
            return 1;
    return 0;
}

/* attribute ("a.b" or "0") of an item, as jinja2's make_attrgetter */
static int get_path(ctctx *C, const ctnode *at, const cval *item, const cval *attr, cval *out)
{
    const char *p = attr->u.s.p, *end = p + attr->u.s.n;
    cval cur = *item;

    if (attr->t == CV_INT)
        return nvfp4m_ct_getitem(C, at, item, attr, out);
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t n = dot ? (size_t)(dot - p) : (size_t)(end - p);
        cval key = nvfp4m_ct_mkstrv(p, n), nx;
        int digits = n > 0;
        for (size_t i = 0; i < n; i++)
            digits &= p[i] >= '0' && p[i] <= '9';
        if (digits && n < 18)
            key = nvfp4m_ct_mkint(strtoll(p, NULL, 10));
        if (nvfp4m_ct_getitem(C, at, &cur, &key, &nx))
            return -1;
        cur = nx;
        if (!dot)
            break;
        p = dot + 1;
    }
    *out = cur;
    return 0;
}

/* select / reject / selectattr / rejectattr */
static int select_items(ctctx *C, const ctnode *at, const cval *seq, const cargs *a, int attr,
                        int keep, cval *out)
{
    clist *items, *l;
    const cval *attrv = attr ? nvfp4m_ct_arg(a, 0, NULL) : NULL;
    const cval *test = nvfp4m_ct_arg(a, attr ? 1 : 0, NULL);
    cargs rest = *a;
    size_t skip = (attr ? 1 : 0) + (test ? 1 : 0);

    if (attr && (!attrv || (attrv->t != CV_STR && attrv->t != CV_INT)))
        return nvfp4m_ct_fail_arg(C, at, attr ? "selectattr" : "select",
                                  "expected an attribute name");
    if (test && test->t != CV_STR)
        return nvfp4m_ct_fail_arg(C, at, "select", "the test must be named by a string");
    if (test) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)test->u.s.n, test->u.s.p);
        if (!nvfp4m_ct_known_test(name))
            return nvfp4m_ct_fail(C, at, NVFP4_ERR_UNSUPPORTED, "test '%s' is not supported",
                                  name);
    }
    if (skip > rest.n)
        skip = rest.n;
    if (skip) { /* no pointer arithmetic on absent (NULL) arrays */
        rest.v += skip;
        if (rest.names)
            rest.names += skip;
        rest.n -= skip;
    }
    if (nvfp4m_ct_iter(C, at, seq, &items) || !(l = nvfp4m_ct_list_new(C, at, items->n)) ||
        nvfp4m_ct_step(C, at, items->n))
        return -1;
    for (size_t i = 0; i < items->n; i++) {
        cval x = items->v[i];
        int r;
        if (attr && get_path(C, at, &items->v[i], attrv, &x))
            return -1;
        if (test) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)test->u.s.n, test->u.s.p);
            if (nvfp4m_ct_test(C, at, name, &x, &rest, &r))
                return -1;
        } else {
            r = nvfp4m_ct_truthy(&x);
        }
        if (r == keep)
            l->v[l->n++] = items->v[i];
    }
    *out = nvfp4m_ct_listv(l, 0);
    return 0;
}

static int to_int(ctctx *C, const ctnode *at, const cval *v, const cval *def, cval *out)
{
    if (v->t == CV_INT || v->t == CV_BOOL) {
        *out = nvfp4m_ct_mkint(v->u.i);
        return 0;
    }
    if (v->t == CV_FLOAT) {
        if (!isfinite(v->u.f) || fabs(v->u.f) >= 9.2e18)
            return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "int: cannot convert %g", v->u.f);
        *out = nvfp4m_ct_mkint((long long)v->u.f);
        return 0;
    }
    if (v->t == CV_STR) {
        char buf[128], *end;
        cval s = nvfp4m_ct_do_strip(v, NULL, 1, 1);
        size_t k = 0;
        for (size_t i = 0; i < s.u.s.n && k < sizeof buf - 1; i++)
            if (s.u.s.p[i] != '_')
                buf[k++] = s.u.s.p[i];
        buf[k] = 0;
        if (k && s.u.s.n < sizeof buf) {
            long long r = strtoll(buf, &end, 10);
            double d;
            if (!*end) {
                *out = nvfp4m_ct_mkint(r);
                return 0;
            }
            d = strtod(buf, &end);
            if (!*end && isfinite(d) && fabs(d) < 9.2e18 &&
                strspn(buf, "0123456789+-.eE") == strlen(buf)) {
                *out = nvfp4m_ct_mkint((long long)d);
                return 0;
            }
        }
    }
    *out = def ? *def : nvfp4m_ct_mkint(0);
    return 0;
}

static int html_escape(ctctx *C, const ctnode *at, const cval *s, cval *out)
{
    cbuf b = {0};
    size_t st = 0;
    int r;
    for (size_t i = 0; i < s->u.s.n; i++) {
        const char *e = NULL;
        switch (s->u.s.p[i]) {
        case '&': e = "&amp;"; break;
        case '<': e = "&lt;"; break;
        case '>': e = "&gt;"; break;
        case '"': e = "&#34;"; break;
        case '\'': e = "&#39;"; break;
        default: break;
        }
        if (e) {
            if (nvfp4m_ct_put(C, at, &b, s->u.s.p + st, i - st) ||
                nvfp4m_ct_put(C, at, &b, e, strlen(e))) {
                free(b.p);
                return -1;
            }
            st = i + 1;
        }
    }
    r = nvfp4m_ct_put(C, at, &b, s->u.s.p + st, s->u.s.n - st);
    if (!r)
        r = nvfp4m_ct_str(C, b.p ? b.p : "", b.n, out);
    free(b.p);
    return r;
}

/* jinja2's indent: lines after the first (and the first if FIRST) get the
 * prefix; blank lines only if BLANK (do_indent, which appends a newline
 * before splitlines). */
static int indent(ctctx *C, const ctnode *at, const cval *s, const cargs *a, cval *out)
{
    const cval *w = nvfp4m_ct_arg(a, 0, "width"), *first = nvfp4m_ct_arg(a, 1, "first"),
               *blank = nvfp4m_ct_arg(a, 2, "blank");
    char spaces[256];
    const char *ind = spaces;
    size_t nind = 4, i = 0, line = 0;
    cbuf b = {0};
    int r = 0;

    memset(spaces, ' ', sizeof spaces);
    if (w && w->t == CV_STR) {
        ind = w->u.s.p;
        nind = w->u.s.n;
    } else if (w && (w->t == CV_INT || w->t == CV_BOOL)) {
        nind = w->u.i < 0 ? 0 : w->u.i > 255 ? 255 : (size_t)w->u.i;
    } else if (w) {
        return nvfp4m_ct_fail_arg(C, at, "indent", "width must be an int or a string");
    }
    if (first && nvfp4m_ct_truthy(first) && (r = nvfp4m_ct_put(C, at, &b, ind, nind)))
        goto out;
    /* the lines of s + "\n", as str.splitlines cuts them */
    {
        size_t n = s->u.s.n + 1;
        char *t = nvfp4m_ct_new(C, at, n + 1);
        if (!t) {
            r = -1;
            goto out;
        }
        memcpy(t, s->u.s.p, s->u.s.n);
        t[n - 1] = '\n';
        while (i < n) {
            size_t st = i, e;
            while (i < n && !strchr("\n\r\v\f\x1c\x1d\x1e", t[i]))
                i++;
            e = i;
            i += t[i] == '\r' && i + 1 < n && t[i + 1] == '\n' ? 2 : 1;
            if (line > 0) {
                if ((r = nvfp4m_ct_put(C, at, &b, "\n", 1)))
                    goto out;
                if ((e > st || (blank && nvfp4m_ct_truthy(blank))) &&
                    (r = nvfp4m_ct_put(C, at, &b, ind, nind)))
                    goto out;
            }
            if ((r = nvfp4m_ct_put(C, at, &b, t + st, e - st)))
                goto out;
            line++;
        }
    }
    r = nvfp4m_ct_str(C, b.p ? b.p : "", b.n, out);
out:
    free(b.p);
    return r;
}

int nvfp4m_ct_filter(ctctx *C, const ctnode *at, const char *name, const cval *v,
                     const cargs *a, cval *out)
{
    const cval *x = nvfp4m_ct_arg(a, 0, NULL);
    cval s;
    clist *items;

    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        const cval *def = nvfp4m_ct_arg(a, 0, "default_value"),
                   *boolean = nvfp4m_ct_arg(a, 1, "boolean");
        int use =
            v->t == CV_UNDEF || (boolean && nvfp4m_ct_truthy(boolean) && !nvfp4m_ct_truthy(v));
        if (use)
            *out = def ? *def : nvfp4m_ct_mkstrv("", 0);
        else
            *out = *v;
        return 0;
    }
    if (!strcmp(name, "tojson"))
        return tojson(C, at, v, a, out);
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        switch (v->t) {
        case CV_UNDEF: *out = nvfp4m_ct_mkint(0); return 0;
        case CV_STR: {
            long long n = 0;
            for (size_t i = 0; i < v->u.s.n; i++)
                n += ((unsigned char)v->u.s.p[i] & 0xC0) != 0x80;
            *out = nvfp4m_ct_mkint(n);
            return 0;
        }
        case CV_LIST: *out = nvfp4m_ct_mkint((long long)v->u.l->n); return 0;
        case CV_DICT: *out = nvfp4m_ct_mkint((long long)v->u.d->n); return 0;
        default:
            return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "object of type '%s' has no len()",
                                  nvfp4m_ct_type(v));
        }
    }
    if (!strcmp(name, "safe") || !strcmp(name, "string"))
        return nvfp4m_ct_to_str(C, at, v, out);
    if (!strcmp(name, "trim")) {
        const cval *chars = nvfp4m_ct_arg(a, 0, "chars");
        if (nvfp4m_ct_to_str(C, at, v, &s))
            return -1;
        *out = nvfp4m_ct_do_strip(&s, chars && chars->t == CV_STR ? chars : NULL, 1, 1);
        return 0;
    }
    if (!strcmp(name, "lower") || !strcmp(name, "upper") || !strcmp(name, "title") ||
        !strcmp(name, "capitalize")) {
        if (nvfp4m_ct_to_str(C, at, v, &s))
            return -1;
        return nvfp4m_ct_case_map(C, at, &s, name[0] == 't' ? 'j' : name[0], out);
    }
    if (!strcmp(name, "escape") || !strcmp(name, "e") || !strcmp(name, "forceescape")) {
        if (nvfp4m_ct_to_str(C, at, v, &s))
            return -1;
        return html_escape(C, at, &s, out);
    }
    if (!strcmp(name, "replace")) {
        const cval *old = nvfp4m_ct_arg(a, 0, "old"), *new = nvfp4m_ct_arg(a, 1, "new"),
                   *cnt = nvfp4m_ct_arg(a, 2, "count");
        if (!old || !new || old->t != CV_STR || new->t != CV_STR)
            return nvfp4m_ct_fail_arg(C, at, "replace", "expected two string arguments");
        if (nvfp4m_ct_to_str(C, at, v, &s))
            return -1;
        return nvfp4m_ct_replace(C, at, &s, old, new, cnt && cnt->t == CV_INT ? cnt->u.i : -1, out);
    }
    if (!strcmp(name, "indent")) {
        if (nvfp4m_ct_to_str(C, at, v, &s))
            return -1;
        return indent(C, at, &s, a, out);
    }
    if (!strcmp(name, "int"))
        return to_int(C, at, v, nvfp4m_ct_arg(a, 0, "default"), out);
    if (!strcmp(name, "float")) {
        const cval *def = nvfp4m_ct_arg(a, 0, "default");
        memset(out, 0, sizeof *out);
        out->t = CV_FLOAT;
        if (v->t == CV_INT || v->t == CV_BOOL || v->t == CV_FLOAT) {
            out->u.f = v->t == CV_FLOAT ? v->u.f : (double)v->u.i;
            return 0;
        }
        if (v->t == CV_STR && v->u.s.n && v->u.s.n < 100) {
            char buf[101], *end;
            cval t = nvfp4m_ct_do_strip(v, NULL, 1, 1);
            memcpy(buf, t.u.s.p, t.u.s.n);
            buf[t.u.s.n] = 0;
            out->u.f = strtod(buf, &end);
            if (t.u.s.n && !*end)
                return 0;
        }
        if (def)
            *out = *def;
        else
            out->u.f = 0;
        return 0;
    }
    if (!strcmp(name, "abs")) {
        if (v->t == CV_FLOAT) {
            *out = *v;
            out->u.f = fabs(v->u.f);
            return 0;
        }
        if ((v->t == CV_INT || v->t == CV_BOOL) && v->u.i != LLONG_MIN) {
            *out = nvfp4m_ct_mkint(v->u.i < 0 ? -v->u.i : v->u.i);
            return 0;
        }
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "bad operand type for abs(): '%s'",
                              nvfp4m_ct_type(v));
    }
    if (!strcmp(name, "items")) {
        clist *l;
        if (v->t == CV_UNDEF) {
            if (!(l = nvfp4m_ct_list_new(C, at, 0)))
                return -1;
            *out = nvfp4m_ct_listv(l, 0);
            return 0;
        }
        if (v->t != CV_DICT)
            return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "items: expected a mapping, got '%s'",
                                  nvfp4m_ct_type(v));
        if (!(l = nvfp4m_ct_list_new(C, at, v->u.d->n)) || nvfp4m_ct_step(C, at, v->u.d->n))
            return -1;
        for (size_t i = 0; i < v->u.d->n; i++) {
            clist *p = nvfp4m_ct_list_new(C, at, 2);
            if (!p)
                return -1;
            p->v[0] = v->u.d->k[i];
            p->v[1] = v->u.d->v[i];
            p->n = 2;
            l->v[l->n++] = nvfp4m_ct_listv(p, 1);
        }
        *out = nvfp4m_ct_listv(l, 0);
        return 0;
    }
    if (!strcmp(name, "select") || !strcmp(name, "reject"))
        return select_items(C, at, v, a, 0, name[0] == 's', out);
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
        return select_items(C, at, v, a, 1, name[0] == 's', out);
    if (nvfp4m_ct_iter(C, at, v, &items))
        return -1;
    if (nvfp4m_ct_step(C, at, items->n))
        return -1;
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        if (!items->n) {
            memset(out, 0, sizeof *out);
            out->t = CV_UNDEF;
            out->u.s.p = name;
            out->u.s.n = strlen(name);
        } else {
            *out = items->v[name[0] == 'f' ? 0 : items->n - 1];
        }
        return 0;
    }
    if (!strcmp(name, "list") || !strcmp(name, "reverse")) {
        clist *l = nvfp4m_ct_list_new(C, at, items->n);
        if (!l)
            return -1;
        for (size_t i = 0; i < items->n; i++)
            l->v[i] = items->v[name[0] == 'l' ? i : items->n - 1 - i];
        l->n = items->n;
        if (name[0] == 'r' && v->t == CV_STR) {
            cbuf b = {0};
            int r = 0;
            for (size_t i = 0; i < l->n && !r; i++)
                r = nvfp4m_ct_put(C, at, &b, l->v[i].u.s.p, l->v[i].u.s.n);
            if (!r)
                r = nvfp4m_ct_str(C, b.p ? b.p : "", b.n, out);
            free(b.p);
            return r;
        }
        *out = nvfp4m_ct_listv(l, 0);
        return 0;
    }
    if (!strcmp(name, "join")) {
        const cval *sep = nvfp4m_ct_arg(a, 0, "d"), *attr = nvfp4m_ct_arg(a, 1, "attribute");
        cbuf b = {0};
        int r = 0;
        cval sepv = nvfp4m_ct_mkstrv("", 0);
        if (sep && nvfp4m_ct_to_str(C, at, sep, &sepv))
            return -1;
        for (size_t i = 0; i < items->n && !r; i++) {
            cval it = items->v[i];
            if (attr && (r = get_path(C, at, &items->v[i], attr, &it)))
                break;
            if (i)
                r = nvfp4m_ct_put(C, at, &b, sepv.u.s.p, sepv.u.s.n);
            if (!r)
                r = nvfp4m_ct_write(C, at, &b, &it, 0, 0);
        }
        if (!r)
            r = nvfp4m_ct_str(C, b.p ? b.p : "", b.n, out);
        free(b.p);
        return r;
    }
    if (!strcmp(name, "map")) {
        const cval *attr = nvfp4m_ct_arg(a, 99, "attribute"),
                   *def = nvfp4m_ct_arg(a, 99, "default");
        clist *l = nvfp4m_ct_list_new(C, at, items->n);
        char fname[64];
        cargs rest = *a;
        if (!l)
            return -1;
        if (!attr) {
            if (!x || x->t != CV_STR)
                return nvfp4m_ct_fail_arg(C, at, "map", "expected attribute= or a filter name");
            snprintf(fname, sizeof fname, "%.*s", (int)x->u.s.n, x->u.s.p);
            if (!nvfp4m_ct_known_filter(fname))
                return nvfp4m_ct_fail(C, at, NVFP4_ERR_UNSUPPORTED,
                                      "filter '%s' is not supported", fname);
            rest.v++;
            rest.names++;
            rest.n--;
        }
        for (size_t i = 0; i < items->n; i++) {
            if (attr) {
                if (get_path(C, at, &items->v[i], attr, &l->v[i]))
                    return -1;
                if (l->v[i].t == CV_UNDEF && def)
                    l->v[i] = *def;
            } else if (nvfp4m_ct_filter(C, at, fname, &items->v[i], &rest, &l->v[i])) {
                return -1;
            }
        }
        l->n = items->n;
        *out = nvfp4m_ct_listv(l, 0);
        return 0;
    }
    if (!strcmp(name, "sum")) {
        const cval *attr = nvfp4m_ct_arg(a, 99, "attribute"), *start = nvfp4m_ct_arg(a, 1, "start");
        cval acc = start ? *start : nvfp4m_ct_mkint(0);
        for (size_t i = 0; i < items->n; i++) {
            cval it = items->v[i], r;
            cargs none = {0};
            (void)none;
            if (attr && get_path(C, at, &items->v[i], attr, &it))
                return -1;
            if (acc.t == CV_STR || it.t == CV_STR)
                return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "sum: cannot add strings");
            if (acc.t == CV_FLOAT || it.t == CV_FLOAT) {
                double fa = acc.t == CV_FLOAT ? acc.u.f : (double)acc.u.i;
                double fb = it.t == CV_FLOAT ? it.u.f : (double)it.u.i;
                memset(&r, 0, sizeof r);
                r.t = CV_FLOAT;
                r.u.f = fa + fb;
            } else if ((it.t == CV_INT || it.t == CV_BOOL) &&
                       (acc.t == CV_INT || acc.t == CV_BOOL)) {
                long long z;
                if (__builtin_add_overflow(acc.u.i, it.u.i, &z))
                    return nvfp4m_ct_fail(C, at, NVFP4_ERR_UNSUPPORTED, "sum: beyond 64 bits");
                r = nvfp4m_ct_mkint(z);
            } else {
                return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "sum: unsupported item type '%s'",
                                      nvfp4m_ct_type(&it));
            }
            acc = r;
        }
        *out = acc;
        return 0;
    }
    return nvfp4m_ct_fail(C, at, NVFP4_ERR_UNSUPPORTED, "filter '%s' is not supported", name);
}
