/* SPDX-License-Identifier: MIT */
/*
 * chat-template-eval.c - values and evaluation of the Jinja2 subset: Python
 * semantics for str(), ==, <, truthiness, + - * / // % ** and ~, jinja2's
 * default Undefined (prints empty, is falsy and iterates as empty; any other
 * use is an error) and its lookup rules (obj.x tries the attribute, then the
 * item; obj[x] the item, then the attribute; a missing one is undefined),
 * scopes as jinja2 has them (a for loop, a macro call and a with block get
 * their own; if does not), and the bounds of nvfp4_chat_options.
 */
#include "config.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat-template-internal.h"

struct ctframe {
    ctframe *parent;
    size_t n, cap;
    const char **names;
    size_t *lens;
    cval *vals;
};

/* ---- errors, budget, buffers ---------------------------------------------- */

int nvfp4m_ct_fail(ctctx *C, const ctnode *at, nvfp4_status st, const char *fmt, ...)
{
    char msg[400];
    va_list ap;

    if (C->failed)
        return -1;
    C->failed = 1;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    nvfp4m_ct_error(C->err, st, C->t->name, C->t->src, at ? at->off : 0, "%s", msg);
    return -1;
}

static int nomem(ctctx *C, const ctnode *at)
{
    if (C->ar.cap && C->ar.used + 4096 > C->ar.cap / 2)
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID,
                              "the template needs more than %zu bytes of memory (limit)",
                              C->ar.cap);
    return nvfp4m_ct_fail(C, at, NVFP4_ERR_NOMEM, "out of memory rendering the template");
}

/* Loop iterations, macro calls and items processed by filters share one
 * budget, so that no template runs for long. */
int nvfp4m_ct_step(ctctx *C, const ctnode *at, size_t n)
{
    C->steps += n;
    if (C->steps > C->max_steps)
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID,
                              "more than %zu loop iterations / items processed (limit)",
                              C->max_steps);
    return 0;
}

int nvfp4m_ct_put(ctctx *C, const ctnode *at, cbuf *b, const char *s, size_t n)
{
    if (n > C->max_output || b->n > C->max_output - n)
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID,
                              "the rendered text exceeds %zu bytes (limit)", C->max_output);
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        char *np;
        while (nc < b->n + n + 1)
            nc *= 2;
        if (!(np = realloc(b->p, nc)))
            return nomem(C, at);
        b->p = np;
        b->cap = nc;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static void *alloc(ctctx *C, const ctnode *at, size_t n)
{
    void *p = nvfp4m_ct_alloc(&C->ar, n);
    if (!p)
        nomem(C, at);
    return p;
}

int nvfp4m_ct_str(ctctx *C, const char *p, size_t n, cval *out)
{
    char *s = nvfp4m_ct_strdup(&C->ar, p, n);
    if (!s)
        return nomem(C, NULL);
    out->t = CV_STR;
    out->tuple = 0;
    out->u.s.p = s;
    out->u.s.n = n;
    return 0;
}

/* a buffer's contents as a string value; frees the buffer */
static int buf_value(ctctx *C, cbuf *b, cval *out)
{
    int r = nvfp4m_ct_str(C, b->p ? b->p : "", b->n, out);
    free(b->p);
    memset(b, 0, sizeof *b);
    return r;
}

const char *nvfp4m_ct_type(const cval *v)
{
    static const char *const names[] = {
        "Undefined", "NoneType", "bool", "int", "float", "str", "list", "dict", "Namespace",
        "LoopContext", "Macro", "builtin_function_or_method", "function"};
    if (v->t == CV_LIST && v->tuple)
        return "tuple";
    return names[v->t];
}

int nvfp4m_ct_undef_error(ctctx *C, const ctnode *at, const cval *v)
{
    return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "'%.*s' is undefined",
                          (int)(v->u.s.n > 100 ? 100 : v->u.s.n), v->u.s.p ? v->u.s.p : "");
}

static cval undef(const char *name, size_t n)
{
    cval v = {0};
    v.t = CV_UNDEF;
    v.u.s.p = name;
    v.u.s.n = n;
    return v;
}

/* ---- dicts and frames ----------------------------------------------------- */

const cval *nvfp4m_ct_dict_get(const cdict *d, const char *k, size_t n)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].u.s.n == n && !memcmp(d->k[i].u.s.p, k, n))
            return &d->v[i];
    return NULL;
}

int nvfp4m_ct_dict_set(ctctx *C, cdict *d, const cval *k, const cval *v)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].u.s.n == k->u.s.n && !memcmp(d->k[i].u.s.p, k->u.s.p, k->u.s.n)) {
            d->v[i] = *v;
            return 0;
        }
    if (d->n == d->cap) {
        size_t nc = d->cap ? 2 * d->cap : 8;
        cval *nk = alloc(C, NULL, nc * sizeof *nk), *nv = alloc(C, NULL, nc * sizeof *nv);
        if (!nk || !nv)
            return -1;
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk;
        d->v = nv;
        d->cap = nc;
    }
    d->k[d->n] = *k;
    d->v[d->n++] = *v;
    return 0;
}

static ctframe *frame_new(ctctx *C, const ctnode *at, ctframe *parent)
{
    ctframe *f = alloc(C, at, sizeof *f);
    if (f)
        f->parent = parent;
    return f;
}

static int frame_set(ctctx *C, const ctnode *at, ctframe *f, const char *name, size_t n,
                     const cval *v)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->lens[i] == n && !memcmp(f->names[i], name, n)) {
            f->vals[i] = *v;
            return 0;
        }
    if (f->n == f->cap) {
        size_t nc = f->cap ? 2 * f->cap : 8;
        const char **nn = alloc(C, at, nc * sizeof *nn);
        size_t *nl = alloc(C, at, nc * sizeof *nl);
        cval *nv = alloc(C, at, nc * sizeof *nv);
        if (!nn || !nl || !nv)
            return -1;
        if (f->n) {
            memcpy(nn, f->names, f->n * sizeof *nn);
            memcpy(nl, f->lens, f->n * sizeof *nl);
            memcpy(nv, f->vals, f->n * sizeof *nv);
        }
        f->names = nn;
        f->lens = nl;
        f->vals = nv;
        f->cap = nc;
    }
    f->names[f->n] = name;
    f->lens[f->n] = n;
    f->vals[f->n++] = *v;
    return 0;
}

static const cval *frame_get(const ctframe *f, const char *name, size_t n)
{
    for (; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (f->lens[i] == n && !memcmp(f->names[i], name, n))
                return &f->vals[i];
    return NULL;
}

/* ---- str() and repr() ----------------------------------------------------- */

/* Python's repr of a float: the shortest digits that read back, fixed
 * notation for exponents -4 .. 15, else d.ddde+XX. */
static void fmt_float(double d, char *out, size_t cap)
{
    char tmp[40], dig[24];
    int nd = 0, exp, prec;
    const char *e;
    size_t o = 0;

    if (isnan(d)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(d)) {
        snprintf(out, cap, d < 0 ? "-inf" : "inf");
        return;
    }
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    for (const char *p = tmp; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            dig[nd++] = *p;
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    e = strchr(tmp, 'e');
    exp = e ? atoi(e + 1) : 0;
    if (tmp[0] == '-')
        out[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -exp - 1; i++)
                out[o++] = '0';
            for (int i = 0; i < nd; i++)
                out[o++] = dig[i];
        } else {
            for (int i = 0; i <= exp; i++)
                out[o++] = i < nd ? dig[i] : '0';
            out[o++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++)
                    out[o++] = dig[i];
            else
                out[o++] = '0';
        }
        out[o] = 0;
    } else {
        out[o++] = dig[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++)
                out[o++] = dig[i];
        }
        snprintf(out + o, cap - o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

static int write_repr_str(ctctx *C, const ctnode *at, cbuf *b, const char *s, size_t n)
{
    char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    size_t i = 0, st = 0;

    if (nvfp4m_ct_put(C, at, b, &q, 1))
        return -1;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        const char *e = NULL;
        if (c == '\\')
            e = "\\\\";
        else if (c == (unsigned char)q)
            e = q == '\'' ? "\\'" : "\\\"";
        else if (c == '\n')
            e = "\\n";
        else if (c == '\r')
            e = "\\r";
        else if (c == '\t')
            e = "\\t";
        else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", c);
            e = esc;
        }
        if (e) {
            if (nvfp4m_ct_put(C, at, b, s + st, i - st) || nvfp4m_ct_put(C, at, b, e, strlen(e)))
                return -1;
            st = i + 1;
        }
    }
    if (nvfp4m_ct_put(C, at, b, s + st, n - st))
        return -1;
    return nvfp4m_ct_put(C, at, b, &q, 1);
}

#define MAX_NEST 200

/* str(v) (repr = 0) or repr(v) into b */
int nvfp4m_ct_write(ctctx *C, const ctnode *at, cbuf *b, const cval *v, int repr, int depth)
{
    char num[64];

    if (depth > MAX_NEST)
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "value nested deeper than %d", MAX_NEST);
    switch (v->t) {
    case CV_UNDEF: return 0;
    case CV_NONE: return nvfp4m_ct_put(C, at, b, "None", 4);
    case CV_BOOL: return v->u.i ? nvfp4m_ct_put(C, at, b, "True", 4)
                                : nvfp4m_ct_put(C, at, b, "False", 5);
    case CV_INT:
        snprintf(num, sizeof num, "%lld", v->u.i);
        return nvfp4m_ct_put(C, at, b, num, strlen(num));
    case CV_FLOAT:
        fmt_float(v->u.f, num, sizeof num);
        return nvfp4m_ct_put(C, at, b, num, strlen(num));
    case CV_STR:
        if (repr)
            return write_repr_str(C, at, b, v->u.s.p, v->u.s.n);
        return nvfp4m_ct_put(C, at, b, v->u.s.p, v->u.s.n);
    case CV_LIST: {
        const char *o = v->tuple ? "(" : "[", *c = v->tuple ? ")" : "]";
        if (nvfp4m_ct_put(C, at, b, o, 1))
            return -1;
        for (size_t i = 0; i < v->u.l->n; i++)
            if ((i && nvfp4m_ct_put(C, at, b, ", ", 2)) ||
                nvfp4m_ct_write(C, at, b, &v->u.l->v[i], 1, depth + 1))
                return -1;
        if (v->tuple && v->u.l->n == 1 && nvfp4m_ct_put(C, at, b, ",", 1))
            return -1;
        return nvfp4m_ct_put(C, at, b, c, 1);
    }
    case CV_NS:
        if (nvfp4m_ct_put(C, at, b, "<Namespace ", 11))
            return -1;
        /* fall through */
    case CV_DICT:
        if (nvfp4m_ct_put(C, at, b, "{", 1))
            return -1;
        for (size_t i = 0; i < v->u.d->n; i++)
            if ((i && nvfp4m_ct_put(C, at, b, ", ", 2)) ||
                nvfp4m_ct_write(C, at, b, &v->u.d->k[i], 1, depth + 1) ||
                nvfp4m_ct_put(C, at, b, ": ", 2) ||
                nvfp4m_ct_write(C, at, b, &v->u.d->v[i], 1, depth + 1))
                return -1;
        if (nvfp4m_ct_put(C, at, b, "}", 1))
            return -1;
        return v->t == CV_NS ? nvfp4m_ct_put(C, at, b, ">", 1) : 0;
    case CV_LOOP:
        snprintf(num, sizeof num, "<LoopContext %zu/%zu>", v->u.loop->i + 1,
                 v->u.loop->items->n);
        return nvfp4m_ct_put(C, at, b, num, strlen(num));
    case CV_MACRO:
        return nvfp4m_ct_put(C, at, b, "<Macro '", 8) ||
               nvfp4m_ct_put(C, at, b, v->u.m->s, v->u.m->n) ||
               nvfp4m_ct_put(C, at, b, "'>", 2);
    default:
        return nvfp4m_ct_put(C, at, b, "<built-in function>", 19);
    }
}

int nvfp4m_ct_to_str(ctctx *C, const ctnode *at, const cval *v, cval *out)
{
    cbuf b = {0};
    if (v->t == CV_STR) {
        *out = *v;
        return 0;
    }
    if (nvfp4m_ct_write(C, at, &b, v, 0, 0)) {
        free(b.p);
        return -1;
    }
    return buf_value(C, &b, out);
}

/* ---- truth, equality, order ----------------------------------------------- */

int nvfp4m_ct_truthy(const cval *v)
{
    switch (v->t) {
    case CV_UNDEF: case CV_NONE: return 0;
    case CV_BOOL: case CV_INT: return v->u.i != 0;
    case CV_FLOAT: return v->u.f != 0;
    case CV_STR: return v->u.s.n != 0;
    case CV_LIST: return v->u.l->n != 0;
    case CV_DICT: return v->u.d->n != 0;
    default: return 1;
    }
}

static int is_num(const cval *v)
{
    return v->t == CV_BOOL || v->t == CV_INT || v->t == CV_FLOAT;
}

static double num(const cval *v)
{
    return v->t == CV_FLOAT ? v->u.f : (double)v->u.i;
}

static int eq_depth(ctctx *C, const ctnode *at, const cval *a, const cval *b, int *res, int depth)
{
    *res = 0;
    if (depth > MAX_NEST)
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "value nested deeper than %d", MAX_NEST);
    if (is_num(a) && is_num(b)) {
        if (a->t != CV_FLOAT && b->t != CV_FLOAT)
            *res = a->u.i == b->u.i;
        else
            *res = num(a) == num(b);
        return 0;
    }
    if (a->t != b->t)
        return 0;
    switch (a->t) {
    case CV_UNDEF: case CV_NONE: *res = 1; return 0;
    case CV_STR:
        *res = a->u.s.n == b->u.s.n && !memcmp(a->u.s.p, b->u.s.p, a->u.s.n);
        return 0;
    case CV_LIST:
        if (a->tuple != b->tuple || a->u.l->n != b->u.l->n)
            return 0;
        if (nvfp4m_ct_step(C, at, a->u.l->n))
            return -1;
        for (size_t i = 0; i < a->u.l->n; i++) {
            if (eq_depth(C, at, &a->u.l->v[i], &b->u.l->v[i], res, depth + 1))
                return -1;
            if (!*res)
                return 0;
        }
        *res = 1;
        return 0;
    case CV_DICT:
        if (a->u.d->n != b->u.d->n)
            return 0;
        if (nvfp4m_ct_step(C, at, a->u.d->n))
            return -1;
        for (size_t i = 0; i < a->u.d->n; i++) {
            const cval *o = nvfp4m_ct_dict_get(b->u.d, a->u.d->k[i].u.s.p, a->u.d->k[i].u.s.n);
            if (!o)
                return 0;
            if (eq_depth(C, at, &a->u.d->v[i], o, res, depth + 1))
                return -1;
            if (!*res)
                return 0;
        }
        *res = 1;
        return 0;
    case CV_NS: *res = a->u.d == b->u.d; return 0;
    case CV_MACRO: *res = a->u.m == b->u.m; return 0;
    default: *res = 0; return 0;
    }
}

int nvfp4m_ct_eq(ctctx *C, const ctnode *at, const cval *a, const cval *b, int *res)
{
    return eq_depth(C, at, a, b, res, 0);
}

/* <0, 0, >0 as Python orders numbers, strings and sequences */
static int order(ctctx *C, const ctnode *at, const char *opname, const cval *a, const cval *b,
                 int *res, int depth)
{
    if (a->t == CV_UNDEF)
        return nvfp4m_ct_undef_error(C, at, a);
    if (b->t == CV_UNDEF)
        return nvfp4m_ct_undef_error(C, at, b);
    if (depth > MAX_NEST)
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "value nested deeper than %d", MAX_NEST);
    if (is_num(a) && is_num(b)) {
        if (a->t != CV_FLOAT && b->t != CV_FLOAT)
            *res = (a->u.i > b->u.i) - (a->u.i < b->u.i);
        else
            *res = (num(a) > num(b)) - (num(a) < num(b));
        return 0;
    }
    if (a->t == CV_STR && b->t == CV_STR) {
        size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
        int c = memcmp(a->u.s.p, b->u.s.p, n);
        *res = c ? c : (a->u.s.n > b->u.s.n) - (a->u.s.n < b->u.s.n);
        return 0;
    }
    if (a->t == CV_LIST && b->t == CV_LIST && a->tuple == b->tuple) {
        size_t n = a->u.l->n < b->u.l->n ? a->u.l->n : b->u.l->n;
        for (size_t i = 0; i < n; i++) {
            int e;
            if (eq_depth(C, at, &a->u.l->v[i], &b->u.l->v[i], &e, depth + 1))
                return -1;
            if (!e)
                return order(C, at, opname, &a->u.l->v[i], &b->u.l->v[i], res, depth + 1);
        }
        *res = (a->u.l->n > b->u.l->n) - (a->u.l->n < b->u.l->n);
        return 0;
    }
    return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID,
                          "'%s' not supported between instances of '%s' and '%s'", opname,
                          nvfp4m_ct_type(a), nvfp4m_ct_type(b));
}

static int contains(ctctx *C, const ctnode *at, const cval *hay, const cval *needle, int *res)
{
    *res = 0;
    switch (hay->t) {
    case CV_UNDEF: return 0;
    case CV_STR:
        if (needle->t != CV_STR)
            return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID,
                                  "'in <string>' requires string as left operand, not %s",
                                  nvfp4m_ct_type(needle));
        if (nvfp4m_ct_step(C, at, hay->u.s.n / 64 + 1))
            return -1;
        if (needle->u.s.n == 0) {
            *res = 1;
            return 0;
        }
        for (size_t i = 0; i + needle->u.s.n <= hay->u.s.n; i++)
            if (!memcmp(hay->u.s.p + i, needle->u.s.p, needle->u.s.n)) {
                *res = 1;
                return 0;
            }
        return 0;
    case CV_LIST:
        if (nvfp4m_ct_step(C, at, hay->u.l->n))
            return -1;
        for (size_t i = 0; i < hay->u.l->n; i++) {
            if (nvfp4m_ct_eq(C, at, &hay->u.l->v[i], needle, res))
                return -1;
            if (*res)
                return 0;
        }
        return 0;
    case CV_DICT:
        *res = needle->t == CV_STR &&
               nvfp4m_ct_dict_get(hay->u.d, needle->u.s.p, needle->u.s.n) != NULL;
        return 0;
    default:
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "argument of type '%s' is not iterable",
                              nvfp4m_ct_type(hay));
    }
}

int nvfp4m_ct_cmp(ctctx *C, const ctnode *at, int op, const cval *a, const cval *b, cval *out)
{
    int r = 0;
    out->t = CV_BOOL;
    out->tuple = 0;
    switch (op) {
    case OP_EQ: case OP_NE:
        if (nvfp4m_ct_eq(C, at, a, b, &r))
            return -1;
        out->u.i = op == OP_EQ ? r : !r;
        return 0;
    case OP_IN: case OP_NOTIN:
        if (contains(C, at, b, a, &r))
            return -1;
        out->u.i = op == OP_IN ? r : !r;
        return 0;
    default: {
        const char *name = op == '<' ? "<" : op == '>' ? ">" : op == OP_LE ? "<=" : ">=";
        if (order(C, at, name, a, b, &r, 0))
            return -1;
        out->u.i = op == '<' ? r < 0 : op == '>' ? r > 0 : op == OP_LE ? r <= 0 : r >= 0;
        return 0;
    }
    }
}

/* ---- lookups -------------------------------------------------------------- */

static size_t cp_len(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* byte offset of code point K (K <= number of code points) */
static size_t cp_off(const char *s, size_t n, size_t k)
{
    size_t i = 0;
    while (k && i < n) {
        i++;
        while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80)
            i++;
        k--;
    }
    return i;
}

int nvfp4m_ct_getattr(ctctx *C, const ctnode *at, const cval *obj, const char *name, size_t n,
                      cval *out)
{
    int id;
    const cval *v;

    if (obj->t == CV_UNDEF)
        return nvfp4m_ct_undef_error(C, at, obj);
    if ((id = nvfp4m_ct_method_id(obj, name, n)) >= 0) {
        cmethod *m = alloc(C, at, sizeof *m);
        if (!m)
            return -1;
        m->self = *obj;
        m->id = id;
        memset(out, 0, sizeof *out);
        out->t = CV_METHOD;
        out->u.bm = m;
        return 0;
    }
    if ((obj->t == CV_DICT || obj->t == CV_NS) && (v = nvfp4m_ct_dict_get(obj->u.d, name, n))) {
        *out = *v;
        return 0;
    }
    if (obj->t == CV_LOOP) {
        const cloop *L = obj->u.loop;
        size_t N = L->items->n, i = L->i;
        long long r = -1;
        memset(out, 0, sizeof *out);
        out->t = CV_INT;
        if (n == 5 && !memcmp(name, "index", 5))
            r = (long long)i + 1;
        else if (n == 6 && !memcmp(name, "index0", 6))
            r = (long long)i;
        else if (n == 8 && !memcmp(name, "revindex", 8))
            r = (long long)(N - i);
        else if (n == 9 && !memcmp(name, "revindex0", 9))
            r = (long long)(N - i - 1);
        else if (n == 6 && !memcmp(name, "length", 6))
            r = (long long)N;
        else if (n == 5 && !memcmp(name, "depth", 5))
            r = 1;
        else if (n == 6 && !memcmp(name, "depth0", 6))
            r = 0;
        if (r >= 0) {
            out->u.i = r;
            return 0;
        }
        out->t = CV_BOOL;
        if (n == 5 && !memcmp(name, "first", 5)) {
            out->u.i = i == 0;
            return 0;
        }
        if (n == 4 && !memcmp(name, "last", 4)) {
            out->u.i = i + 1 == N;
            return 0;
        }
        if (n == 8 && !memcmp(name, "previtem", 8)) {
            *out = i > 0 ? L->items->v[i - 1] : undef("previtem", 8);
            return 0;
        }
        if (n == 8 && !memcmp(name, "nextitem", 8)) {
            *out = i + 1 < N ? L->items->v[i + 1] : undef("nextitem", 8);
            return 0;
        }
    }
    *out = undef(name, n);
    return 0;
}

int nvfp4m_ct_getitem(ctctx *C, const ctnode *at, const cval *obj, const cval *key, cval *out)
{
    if (obj->t == CV_UNDEF)
        return nvfp4m_ct_undef_error(C, at, obj);
    if ((key->t == CV_INT || key->t == CV_BOOL) && (obj->t == CV_LIST || obj->t == CV_STR)) {
        long long i = key->u.i;
        size_t len = obj->t == CV_LIST ? obj->u.l->n : cp_len(obj->u.s.p, obj->u.s.n);
        if (i < 0)
            i += (long long)len;
        if (i < 0 || (size_t)i >= len) {
            *out = undef("index out of range", 18);
            return 0;
        }
        if (obj->t == CV_LIST) {
            *out = obj->u.l->v[i];
        } else {
            size_t a = cp_off(obj->u.s.p, obj->u.s.n, (size_t)i);
            size_t b = cp_off(obj->u.s.p, obj->u.s.n, (size_t)i + 1);
            memset(out, 0, sizeof *out);
            out->t = CV_STR;
            out->u.s.p = obj->u.s.p + a;
            out->u.s.n = b - a;
        }
        return 0;
    }
    if (key->t == CV_STR) {
        const cval *v;
        if ((obj->t == CV_DICT || obj->t == CV_NS) &&
            (v = nvfp4m_ct_dict_get(obj->u.d, key->u.s.p, key->u.s.n))) {
            *out = *v;
            return 0;
        }
        return nvfp4m_ct_getattr(C, at, obj, key->u.s.p, key->u.s.n, out);
    }
    *out = undef("item", 4);
    return 0;
}

static int slice_index(ctctx *C, const ctnode *at, const cval *v, long long *out)
{
    if (v->t == CV_NONE || v->t == CV_UNDEF)
        return 1;
    if (v->t != CV_INT && v->t != CV_BOOL)
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID,
                              "slice indices must be integers or None, not %s",
                              nvfp4m_ct_type(v));
    *out = v->u.i;
    return 0;
}

/* Python's obj[start:stop:step] for lists and strings */
static int do_slice(ctctx *C, const ctnode *at, const cval *obj, const cval *sv, cval *out)
{
    long long len, start = 0, stop = 0, step = 1, cnt = 0;
    int r;

    if (obj->t == CV_UNDEF)
        return nvfp4m_ct_undef_error(C, at, obj);
    if (obj->t != CV_LIST && obj->t != CV_STR) {
        *out = undef("slice", 5);
        return 0;
    }
    len = (long long)(obj->t == CV_LIST ? obj->u.l->n : cp_len(obj->u.s.p, obj->u.s.n));
    if ((r = slice_index(C, at, &sv[2], &step)) < 0)
        return -1;
    if (step == 0)
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "slice step cannot be zero");
    if ((r = slice_index(C, at, &sv[0], &start)) < 0)
        return -1;
    if (r) {
        start = step < 0 ? len - 1 : 0;
    } else {
        if (start < 0)
            start += len;
        if (start < 0)
            start = step < 0 ? -1 : 0;
        if (start >= len)
            start = step < 0 ? len - 1 : len;
    }
    if ((r = slice_index(C, at, &sv[1], &stop)) < 0)
        return -1;
    if (r) {
        stop = step < 0 ? -1 : len;
    } else {
        if (stop < 0)
            stop += len;
        if (stop < 0)
            stop = step < 0 ? -1 : 0;
        if (stop >= len)
            stop = step < 0 ? len - 1 : len;
    }
    if (step > 0 && stop > start)
        cnt = (stop - start + step - 1) / step;
    else if (step < 0 && start > stop)
        cnt = (start - stop - step - 1) / -step;
    if (nvfp4m_ct_step(C, at, (size_t)cnt))
        return -1;
    if (obj->t == CV_LIST) {
        clist *l = alloc(C, at, sizeof *l);
        if (!l || (cnt && !(l->v = alloc(C, at, (size_t)cnt * sizeof *l->v))))
            return -1;
        for (long long k = 0; k < cnt; k++)
            l->v[k] = obj->u.l->v[start + k * step];
        l->n = (size_t)cnt;
        memset(out, 0, sizeof *out);
        out->t = CV_LIST;
        out->tuple = obj->tuple;
        out->u.l = l;
        return 0;
    } else {
        const char *s = obj->u.s.p;
        size_t n = obj->u.s.n, o = 0;
        size_t *offs = alloc(C, at, ((size_t)len + 1) * sizeof *offs);
        char *dst = alloc(C, at, n + 1);
        if (!offs || !dst)
            return -1;
        for (long long k = 0, i = 0; k <= len; k++) {
            offs[k] = (size_t)i;
            if (k < len) {
                i++;
                while ((size_t)i < n && ((unsigned char)s[i] & 0xC0) == 0x80)
                    i++;
            }
        }
        for (long long k = 0; k < cnt; k++) {
            long long c = start + k * step;
            memcpy(dst + o, s + offs[c], offs[c + 1] - offs[c]);
            o += offs[c + 1] - offs[c];
        }
        memset(out, 0, sizeof *out);
        out->t = CV_STR;
        out->u.s.p = dst;
        out->u.s.n = o;
        return 0;
    }
}

/* the items a for loop or a filter iterates over */
int nvfp4m_ct_iter(ctctx *C, const ctnode *at, const cval *v, clist **out)
{
    clist *l;

    switch (v->t) {
    case CV_LIST: *out = v->u.l; return 0;
    case CV_UNDEF:
        if (!(l = alloc(C, at, sizeof *l)))
            return -1;
        *out = l;
        return 0;
    case CV_DICT:
        if (!(l = alloc(C, at, sizeof *l)))
            return -1;
        l->v = v->u.d->k;
        l->n = v->u.d->n;
        *out = l;
        return 0;
    case CV_STR: {
        size_t n = cp_len(v->u.s.p, v->u.s.n), i = 0;
        if (!(l = alloc(C, at, sizeof *l)) || (n && !(l->v = alloc(C, at, n * sizeof *l->v))))
            return -1;
        for (size_t k = 0; k < n; k++) {
            size_t j = i + 1;
            while (j < v->u.s.n && ((unsigned char)v->u.s.p[j] & 0xC0) == 0x80)
                j++;
            l->v[k].t = CV_STR;
            l->v[k].u.s.p = v->u.s.p + i;
            l->v[k].u.s.n = j - i;
            i = j;
        }
        l->n = n;
        *out = l;
        return 0;
    }
    default:
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "'%s' object is not iterable",
                              nvfp4m_ct_type(v));
    }
}

/* ---- arithmetic ----------------------------------------------------------- */

static int arith_error(ctctx *C, const ctnode *at, const char *op, const cval *a, const cval *b)
{
    if (a->t == CV_UNDEF)
        return nvfp4m_ct_undef_error(C, at, a);
    if (b->t == CV_UNDEF)
        return nvfp4m_ct_undef_error(C, at, b);
    return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID,
                          "unsupported operand type(s) for %s: '%s' and '%s'", op,
                          nvfp4m_ct_type(a), nvfp4m_ct_type(b));
}

static int repeat(ctctx *C, const ctnode *at, const cval *s, long long k, cval *out)
{
    size_t unit = s->t == CV_STR ? s->u.s.n : s->u.l->n * sizeof(cval), total;
    if (k < 0)
        k = 0;
    if ((unsigned long long)k > SIZE_MAX / (unit + 1))
        return nomem(C, at);
    total = unit * (size_t)k;
    if (nvfp4m_ct_step(C, at, total / 64 + 1))
        return -1;
    *out = *s;
    if (s->t == CV_STR) {
        char *p = alloc(C, at, total + 1);
        if (!p)
            return -1;
        for (long long i = 0; i < k; i++)
            memcpy(p + (size_t)i * unit, s->u.s.p, unit);
        out->u.s.p = p;
        out->u.s.n = total;
    } else {
        clist *l = alloc(C, at, sizeof *l);
        if (!l || (total && !(l->v = alloc(C, at, total))))
            return -1;
        for (long long i = 0; i < k; i++)
            memcpy(l->v + (size_t)i * s->u.l->n, s->u.l->v, unit);
        l->n = s->u.l->n * (size_t)k;
        out->u.l = l;
    }
    return 0;
}

static int binop(ctctx *C, const ctnode *at, int op, const cval *a, const cval *b, cval *out)
{
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
    const char *opn = op == '+' ? names[0] : op == '-' ? names[1] : op == '*' ? names[2]
                    : op == '/' ? names[3] : op == OP_FLOORDIV ? names[4]
                    : op == '%' ? names[5] : names[6];

    memset(out, 0, sizeof *out);
    if (op == '~') {
        cval x, y;
        cbuf buf = {0};
        if (nvfp4m_ct_to_str(C, at, a, &x) || nvfp4m_ct_to_str(C, at, b, &y))
            return -1;
        if (nvfp4m_ct_step(C, at, (x.u.s.n + y.u.s.n) / 256) ||
            nvfp4m_ct_put(C, at, &buf, x.u.s.p, x.u.s.n) ||
            nvfp4m_ct_put(C, at, &buf, y.u.s.p, y.u.s.n)) {
            free(buf.p);
            return -1;
        }
        return buf_value(C, &buf, out);
    }
    if (is_num(a) && is_num(b)) {
        int ints = a->t != CV_FLOAT && b->t != CV_FLOAT;
        long long x = a->u.i, y = b->u.i, r = 0;
        double fx = num(a), fy = num(b), fr = 0;
        if (ints) {
            int ovf = 0;
            out->t = CV_INT;
            switch (op) {
            case '+': ovf = __builtin_add_overflow(x, y, &r); break;
            case '-': ovf = __builtin_sub_overflow(x, y, &r); break;
            case '*': ovf = __builtin_mul_overflow(x, y, &r); break;
            case '/': ints = 0; break;
            case OP_FLOORDIV:
            case '%':
                if (y == 0)
                    return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "integer division or modulo by zero");
                if (x == LLONG_MIN && y == -1) {
                    ovf = 1;
                    break;
                }
                r = op == '%' ? x % y : x / y;
                if (op == '%' && r && ((r < 0) != (y < 0)))
                    r += y;
                else if (op == OP_FLOORDIV && (x % y) && ((x < 0) != (y < 0)))
                    r--;
                break;
            default:                  /* ** */
                if (y < 0) {
                    ints = 0;
                    break;
                }
                r = 1;
                for (long long k = 0; k < y && !ovf; k++) {
                    ovf = __builtin_mul_overflow(r, x, &r);
                    if (r == 0 || r == 1)
                        break;
                }
                break;
            }
            if (ovf)
                return nvfp4m_ct_fail(C, at, NVFP4_ERR_UNSUPPORTED,
                                      "integer result beyond 64 bits (Python's unbounded ints are not supported)");
            if (ints) {
                out->u.i = r;
                return 0;
            }
        }
        out->t = CV_FLOAT;
        switch (op) {
        case '+': fr = fx + fy; break;
        case '-': fr = fx - fy; break;
        case '*': fr = fx * fy; break;
        case '/':
        case OP_FLOORDIV:
        case '%':
            if (fy == 0)
                return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "float division by zero");
            if (op == '/')
                fr = fx / fy;
            else if (op == OP_FLOORDIV)
                fr = floor(fx / fy);
            else {
                fr = fmod(fx, fy);
                if (fr && ((fr < 0) != (fy < 0)))
                    fr += fy;
            }
            break;
        default: fr = pow(fx, fy); break;
        }
        out->u.f = fr;
        return 0;
    }
    if (op == '+' && a->t == b->t && (a->t == CV_STR || (a->t == CV_LIST && a->tuple == b->tuple))) {
        if (a->t == CV_STR) {
            cbuf buf = {0};
            if (nvfp4m_ct_step(C, at, (a->u.s.n + b->u.s.n) / 256) ||
                nvfp4m_ct_put(C, at, &buf, a->u.s.p, a->u.s.n) ||
                nvfp4m_ct_put(C, at, &buf, b->u.s.p, b->u.s.n)) {
                free(buf.p);
                return -1;
            }
            return buf_value(C, &buf, out);
        } else {
            clist *l = alloc(C, at, sizeof *l);
            size_t n = a->u.l->n + b->u.l->n;
            if (!l || nvfp4m_ct_step(C, at, n) || (n && !(l->v = alloc(C, at, n * sizeof *l->v))))
                return -1;
            if (a->u.l->n)
                memcpy(l->v, a->u.l->v, a->u.l->n * sizeof *l->v);
            if (b->u.l->n)
                memcpy(l->v + a->u.l->n, b->u.l->v, b->u.l->n * sizeof *l->v);
            l->n = n;
            *out = *a;
            out->u.l = l;
            return 0;
        }
    }
    if (op == '*' && (a->t == CV_STR || a->t == CV_LIST) && (b->t == CV_INT || b->t == CV_BOOL))
        return repeat(C, at, a, b->u.i, out);
    if (op == '*' && (b->t == CV_STR || b->t == CV_LIST) && (a->t == CV_INT || a->t == CV_BOOL))
        return repeat(C, at, b, a->u.i, out);
    if (op == '%' && a->t == CV_STR)
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_UNSUPPORTED,
                              "printf-style string formatting ('...' %% x) is not supported");
    return arith_error(C, at, opn, a, b);
}

/* ---- expressions ---------------------------------------------------------- */

static int eval(ctctx *C, ctframe *F, const ctnode *e, cval *out);

static int eval_args(ctctx *C, ctframe *F, const ctnode *e, cargs *a)
{
    a->n = e->nargs;
    a->names = e->names;
    a->v = NULL;
    if (!e->nargs)
        return 0;
    if (!(a->v = alloc(C, e, e->nargs * sizeof *a->v)))
        return -1;
    for (size_t i = 0; i < e->nargs; i++)
        if (eval(C, F, e->args[i], &a->v[i]))
            return -1;
    return 0;
}

static int eval_call(ctctx *C, ctframe *F, const ctnode *e, cval *out)
{
    cval f;
    cargs a;

    if (eval(C, F, e->a, &f) || eval_args(C, F, e, &a))
        return -1;
    switch (f.t) {
    case CV_MACRO: return nvfp4m_ct_call_macro(C, e, f.u.m, &a, out);
    case CV_METHOD: return nvfp4m_ct_method(C, e, f.u.bm, &a, out);
    case CV_FUNC: return nvfp4m_ct_call_global(C, e, f.u.fn, &a, out);
    case CV_UNDEF: return nvfp4m_ct_undef_error(C, e, &f);
    default:
        return nvfp4m_ct_fail(C, e, NVFP4_ERR_INVALID, "'%s' object is not callable",
                              nvfp4m_ct_type(&f));
    }
}

static int eval(ctctx *C, ctframe *F, const ctnode *e, cval *out)
{
    cval a, b;

    memset(out, 0, sizeof *out);
    switch (e->kind) {
    case E_STR:
        out->t = CV_STR;
        out->u.s.p = e->s;
        out->u.s.n = e->n;
        return 0;
    case E_INT: out->t = CV_INT; out->u.i = e->i; return 0;
    case E_FLOAT: out->t = CV_FLOAT; out->u.f = e->f; return 0;
    case E_BOOL: out->t = CV_BOOL; out->u.i = e->i; return 0;
    case E_NONE: out->t = CV_NONE; return 0;
    case E_NAME: {
        const cval *v = frame_get(F, e->s, e->n);
        int fn;
        if (v)
            *out = *v;
        else if ((fn = nvfp4m_ct_global(e->s, e->n)) >= 0) {
            out->t = CV_FUNC;
            out->u.fn = fn;
        } else
            *out = undef(e->s, e->n);
        return 0;
    }
    case E_ATTR:
        if (eval(C, F, e->a, &a))
            return -1;
        return nvfp4m_ct_getattr(C, e, &a, e->s, e->n, out);
    case E_ITEM:
        if (eval(C, F, e->a, &a) || eval(C, F, e->b, &b))
            return -1;
        return nvfp4m_ct_getitem(C, e, &a, &b, out);
    case E_SLICE: {
        cval sv[3] = {{0}};
        if (eval(C, F, e->a, &a))
            return -1;
        for (int i = 0; i < 3; i++) {
            sv[i].t = CV_NONE;
            if (e->args[i] && eval(C, F, e->args[i], &sv[i]))
                return -1;
        }
        return do_slice(C, e, &a, sv, out);
    }
    case E_CALL: return eval_call(C, F, e, out);
    case E_FILTER: {
        cargs args;
        if (eval(C, F, e->a, &a) || eval_args(C, F, e, &args))
            return -1;
        return nvfp4m_ct_filter(C, e, e->s, &a, &args, out);
    }
    case E_TEST: {
        cargs args;
        int r;
        if (eval(C, F, e->a, &a) || eval_args(C, F, e, &args) ||
            nvfp4m_ct_test(C, e, e->s, &a, &args, &r))
            return -1;
        out->t = CV_BOOL;
        out->u.i = e->op ? !r : r;
        return 0;
    }
    case E_BIN:
        if (eval(C, F, e->a, &a) || eval(C, F, e->b, &b))
            return -1;
        return binop(C, e, e->op, &a, &b, out);
    case E_NEG: case E_POS:
        if (eval(C, F, e->a, &a))
            return -1;
        if (a.t == CV_UNDEF)
            return nvfp4m_ct_undef_error(C, e, &a);
        if (!is_num(&a))
            return nvfp4m_ct_fail(C, e, NVFP4_ERR_INVALID, "bad operand type for unary %c: '%s'",
                                  e->kind == E_NEG ? '-' : '+', nvfp4m_ct_type(&a));
        *out = a;
        if (a.t == CV_BOOL)
            out->t = CV_INT;
        if (e->kind == E_NEG) {
            if (a.t == CV_FLOAT)
                out->u.f = -a.u.f;
            else if (a.u.i == LLONG_MIN)
                return nvfp4m_ct_fail(C, e, NVFP4_ERR_UNSUPPORTED, "integer result beyond 64 bits");
            else
                out->u.i = -a.u.i;
        }
        return 0;
    case E_NOT:
        if (eval(C, F, e->a, &a))
            return -1;
        out->t = CV_BOOL;
        out->u.i = !nvfp4m_ct_truthy(&a);
        return 0;
    case E_AND: case E_OR:
        if (eval(C, F, e->a, out))
            return -1;
        if (nvfp4m_ct_truthy(out) == (e->kind == E_OR))
            return 0;
        return eval(C, F, e->b, out);
    case E_COND:
        if (eval(C, F, e->b, &a))
            return -1;
        if (nvfp4m_ct_truthy(&a))
            return eval(C, F, e->a, out);
        if (e->c)
            return eval(C, F, e->c, out);
        *out = undef("else", 4);
        return 0;
    case E_CMP:
        if (eval(C, F, e->a, &a) || eval(C, F, e->b, &b))
            return -1;
        return nvfp4m_ct_cmp(C, e, e->op, &a, &b, out);
    case E_LIST: case E_TUPLE: {
        clist *l = alloc(C, e, sizeof *l);
        if (!l || (e->nargs && !(l->v = alloc(C, e, e->nargs * sizeof *l->v))))
            return -1;
        for (size_t i = 0; i < e->nargs; i++)
            if (eval(C, F, e->args[i], &l->v[i]))
                return -1;
        l->n = e->nargs;
        out->t = CV_LIST;
        out->tuple = e->kind == E_TUPLE;
        out->u.l = l;
        return 0;
    }
    case E_DICT: {
        cdict *d = alloc(C, e, sizeof *d);
        if (!d)
            return -1;
        for (size_t i = 0; i + 1 < e->nargs; i += 2) {
            if (eval(C, F, e->args[i], &a) || eval(C, F, e->args[i + 1], &b))
                return -1;
            if (a.t != CV_STR)
                return nvfp4m_ct_fail(C, e->args[i], NVFP4_ERR_UNSUPPORTED,
                                      "dict keys other than strings are not supported");
            if (nvfp4m_ct_dict_set(C, d, &a, &b))
                return -1;
        }
        out->t = CV_DICT;
        out->u.d = d;
        return 0;
    }
    default:
        return nvfp4m_ct_fail(C, e, NVFP4_ERR_INVALID, "internal: not an expression");
    }
}

/* ---- statements ----------------------------------------------------------- */

static int exec_body(ctctx *C, ctframe *F, ctnode *const *body, size_t n, cbuf *out);

static int assign(ctctx *C, ctframe *F, const ctnode *target, const cval *v)
{
    if (target->kind == E_NAME)
        return frame_set(C, target, F, target->s, target->n, v);
    if (target->kind == E_ATTR) {
        cval ns, key;
        if (eval(C, F, target->a, &ns))
            return -1;
        if (ns.t != CV_NS)
            return nvfp4m_ct_fail(C, target, NVFP4_ERR_INVALID,
                                  "cannot assign attribute on non-namespace object");
        key.t = CV_STR;
        key.tuple = 0;
        key.u.s.p = target->s;
        key.u.s.n = target->n;
        return nvfp4m_ct_dict_set(C, ns.u.d, &key, v);
    }
    /* tuple unpacking */
    if (v->t != CV_LIST && v->t != CV_STR && v->t != CV_DICT)
        return nvfp4m_ct_fail(C, target, NVFP4_ERR_INVALID, "cannot unpack non-iterable %s object",
                              nvfp4m_ct_type(v));
    {
        clist *l;
        if (nvfp4m_ct_iter(C, target, v, &l))
            return -1;
        if (l->n != target->nargs)
            return nvfp4m_ct_fail(C, target, NVFP4_ERR_INVALID,
                                  "%s values to unpack (expected %zu, got %zu)",
                                  l->n > target->nargs ? "too many" : "not enough",
                                  target->nargs, l->n);
        for (size_t i = 0; i < l->n; i++)
            if (frame_set(C, target, F, target->args[i]->s, target->args[i]->n, &l->v[i]))
                return -1;
    }
    return 0;
}

static int exec_for(ctctx *C, ctframe *F, const ctnode *s, cbuf *out)
{
    cval it, lv = {0};
    clist *items;
    ctframe *L = frame_new(C, s, F);
    cloop *loop = alloc(C, s, sizeof *loop);

    if (!L || !loop || eval(C, F, s->b, &it) || nvfp4m_ct_iter(C, s->b, &it, &items))
        return -1;
    if (s->c) {                       /* {% for x in xs if cond %}: filter first (loop.length) */
        clist *f = alloc(C, s, sizeof *f);
        if (!f || (items->n && !(f->v = alloc(C, s, items->n * sizeof *f->v))))
            return -1;
        for (size_t i = 0; i < items->n; i++) {
            cval c;
            if (nvfp4m_ct_step(C, s, 1) || assign(C, L, s->a, &items->v[i]) ||
                eval(C, L, s->c, &c))
                return -1;
            if (nvfp4m_ct_truthy(&c))
                f->v[f->n++] = items->v[i];
        }
        items = f;
    }
    loop->items = items;
    lv.t = CV_LOOP;
    lv.u.loop = loop;
    if (frame_set(C, s, L, "loop", 4, &lv))
        return -1;
    for (size_t i = 0; i < items->n; i++) {
        loop->i = i;
        if (nvfp4m_ct_step(C, s, 1) || assign(C, L, s->a, &items->v[i]) ||
            exec_body(C, L, s->body, s->nbody, out))
            return -1;
        if (C->ctl) {
            int brk = C->ctl == 1;
            C->ctl = 0;
            if (brk)
                break;
        }
    }
    if (items->n == 0)
        return exec_body(C, F, s->ebody, s->nebody, out);
    return 0;
}

static int exec_stmt(ctctx *C, ctframe *F, const ctnode *s, cbuf *out)
{
    cval v;

    switch (s->kind) {
    case N_TEXT: return nvfp4m_ct_put(C, s, out, s->s, s->n);
    case N_OUTPUT:
        if (eval(C, F, s->a, &v))
            return -1;
        if (v.t == CV_STR)
            return nvfp4m_ct_put(C, s, out, v.u.s.p, v.u.s.n);
        return nvfp4m_ct_write(C, s, out, &v, 0, 0);
    case N_IF:
        if (eval(C, F, s->a, &v))
            return -1;
        if (nvfp4m_ct_truthy(&v))
            return exec_body(C, F, s->body, s->nbody, out);
        return exec_body(C, F, s->ebody, s->nebody, out);
    case N_FOR: return exec_for(C, F, s, out);
    case N_SET:
        if (eval(C, F, s->b, &v))
            return -1;
        return assign(C, F, s->a, &v);
    case N_SETBLOCK: {
        cbuf b = {0};
        if (exec_body(C, F, s->body, s->nbody, &b) || buf_value(C, &b, &v)) {
            free(b.p);
            return -1;
        }
        return assign(C, F, s->a, &v);
    }
    case N_MACRO:
        memset(&v, 0, sizeof v);
        v.t = CV_MACRO;
        v.u.m = s;
        return frame_set(C, s, F, s->s, s->n, &v);
    case N_WITH: {
        ctframe *W = frame_new(C, s, F);
        if (!W)
            return -1;
        for (size_t i = 0; i < s->nargs; i++)
            if (eval(C, F, s->args[i], &v) ||
                frame_set(C, s, W, s->names[i], strlen(s->names[i]), &v))
                return -1;
        return exec_body(C, W, s->body, s->nbody, out);
    }
    case N_BREAK: C->ctl = 1; return 0;
    case N_CONTINUE: C->ctl = 2; return 0;
    default:
        return nvfp4m_ct_fail(C, s, NVFP4_ERR_INVALID, "internal: not a statement");
    }
}

static int exec_body(ctctx *C, ctframe *F, ctnode *const *body, size_t n, cbuf *out)
{
    for (size_t i = 0; i < n && !C->ctl; i++)
        if (exec_stmt(C, F, body[i], out))
            return -1;
    return 0;
}

int nvfp4m_ct_call_macro(ctctx *C, const ctnode *at, const ctnode *m, const cargs *a, cval *out)
{
    ctframe *M;
    cbuf b = {0};
    int ctl = C->ctl, r;

    if (C->depth >= C->max_depth)
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "macro calls nested deeper than %d (limit)",
                              C->max_depth);
    if (nvfp4m_ct_step(C, at, 1) || !(M = frame_new(C, at, C->root)))
        return -1;
    for (size_t i = 0; i < a->n; i++) {
        if (!a->names[i]) {
            if (i >= m->nargs)
                return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID,
                                      "macro '%s' takes not more than %zu argument(s)", m->s,
                                      m->nargs);
            continue;
        }
        size_t k;
        for (k = 0; k < m->nargs && strcmp(m->names[k], a->names[i]); k++)
            ;
        if (k == m->nargs)
            return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID,
                                  "macro '%s' takes no keyword argument '%s'", m->s, a->names[i]);
    }
    for (size_t k = 0; k < m->nargs; k++) {
        cval v = undef(m->names[k], strlen(m->names[k]));
        int found = 0;
        for (size_t i = 0; i < a->n && !found; i++)
            if ((!a->names[i] && i == k) || (a->names[i] && !strcmp(a->names[i], m->names[k]))) {
                v = a->v[i];
                found = 1;
            }
        if (!found && m->args[k] && eval(C, M, m->args[k], &v))
            return -1;
        if (frame_set(C, at, M, m->names[k], strlen(m->names[k]), &v))
            return -1;
    }
    C->depth++;
    C->ctl = 0;
    r = exec_body(C, M, m->body, m->nbody, &b);
    C->depth--;
    C->ctl = ctl;
    if (r) {
        free(b.p);
        return -1;
    }
    return buf_value(C, &b, out);
}

/* ---- JSON in, render ------------------------------------------------------ */

static int from_json(ctctx *C, json_t *j, cval *out)
{
    memset(out, 0, sizeof *out);
    switch (json_typeof(j)) {
    case JSON_NULL: out->t = CV_NONE; return 0;
    case JSON_TRUE: out->t = CV_BOOL; out->u.i = 1; return 0;
    case JSON_FALSE: out->t = CV_BOOL; return 0;
    case JSON_INTEGER: out->t = CV_INT; out->u.i = json_integer_value(j); return 0;
    case JSON_REAL: out->t = CV_FLOAT; out->u.f = json_real_value(j); return 0;
    case JSON_STRING: return nvfp4m_ct_str(C, json_string_value(j), json_string_length(j), out);
    case JSON_ARRAY: {
        clist *l = alloc(C, NULL, sizeof *l);
        size_t n = json_array_size(j);
        if (!l || (n && !(l->v = alloc(C, NULL, n * sizeof *l->v))))
            return -1;
        for (size_t i = 0; i < n; i++)
            if (from_json(C, json_array_get(j, i), &l->v[i]))
                return -1;
        l->n = n;
        out->t = CV_LIST;
        out->u.l = l;
        return 0;
    }
    default: {
        cdict *d = alloc(C, NULL, sizeof *d);
        const char *k;
        json_t *v;
        if (!d)
            return -1;
        json_object_foreach(j, k, v) {
            cval kv, vv;
            if (nvfp4m_ct_str(C, k, strlen(k), &kv) || from_json(C, v, &vv) ||
                nvfp4m_ct_dict_set(C, d, &kv, &vv))
                return -1;
        }
        out->t = CV_DICT;
        out->u.d = d;
        return 0;
    }
    }
}

char *nvfp4m_ct_render(const nvfp4_chat_template *t, void *vars, const nvfp4_chat_options *opt,
                       size_t *len, nvfp4_error *err)
{
    ctctx C;
    cbuf out = {0};
    const char *k;
    json_t *v;
    char *res = NULL;

    memset(&C, 0, sizeof C);
    C.t = t;
    C.err = err;
    C.ar.cap = opt->max_memory;
    C.max_steps = opt->max_iterations;
    C.max_output = opt->max_output;
    C.max_depth = opt->max_depth;
    C.now = opt->now;
    if ((C.root = frame_new(&C, NULL, NULL))) {
        json_object_foreach((json_t *)vars, k, v) {
            cval val;
            if (from_json(&C, v, &val) || frame_set(&C, NULL, C.root, k, strlen(k), &val))
                break;
        }
    }
    if (!C.failed && exec_body(&C, C.root, t->body, t->nbody, &out) == 0 &&
        nvfp4m_ct_put(&C, NULL, &out, "", 0) == 0) {
        res = out.p;
        out.p = NULL;
        if (len)
            *len = out.n;
    }
    free(out.p);
    nvfp4m_ct_arena_free(&C.ar);
    return res;
}
