/* SPDX-License-Identifier: MIT */
/*
 * chat-template-value.c - the values of the Jinja2 subset with Python's
 * semantics for str(), repr(), ==, <, `in` and truthiness, jinja2's default
 * Undefined (prints empty, is falsy and iterates as empty; any other use is
 * an error) and its lookup rules (obj.x tries the attribute, then the item;
 * obj[x] the item, then the attribute; a missing one is undefined), slices,
 * scopes (frames), and the render bounds (steps, output, memory).
 */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat-template-internal.h"

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

int nvfp4m_ct_nomem(ctctx *C, const ctnode *at)
{
    if (C->ar.over)
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
                              "the rendered text (or a string in it) exceeds %zu bytes (limit)",
                              C->max_output);
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        char *np;
        while (nc < b->n + n + 1)
            nc *= 2;
        if (!(np = realloc(b->p, nc)))
            return nvfp4m_ct_nomem(C, at);
        b->p = np;
        b->cap = nc;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

void *nvfp4m_ct_new(ctctx *C, const ctnode *at, size_t n)
{
    void *p = nvfp4m_ct_alloc(&C->ar, n);
    if (!p)
        nvfp4m_ct_nomem(C, at);
    return p;
}

int nvfp4m_ct_str(ctctx *C, const char *p, size_t n, cval *out)
{
    char *s = nvfp4m_ct_strdup(&C->ar, p, n);
    if (!s)
        return nvfp4m_ct_nomem(C, NULL);
    out->t = CV_STR;
    out->tuple = 0;
    out->u.s.p = s;
    out->u.s.n = n;
    return 0;
}

/* a buffer's contents as a string value; frees the buffer */
int nvfp4m_ct_buf_value(ctctx *C, cbuf *b, cval *out)
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
    if (v->tuple) {
        cval o = {0};
        o.t = (unsigned char)(v->tuple - 1);
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "'%s object' has no attribute '%.*s'",
                              nvfp4m_ct_type(&o), (int)(v->u.s.n > 100 ? 100 : v->u.s.n),
                              v->u.s.p ? v->u.s.p : "");
    }
    return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "'%.*s' is undefined",
                          (int)(v->u.s.n > 100 ? 100 : v->u.s.n), v->u.s.p ? v->u.s.p : "");
}

cval nvfp4m_ct_undef(const char *name, size_t n)
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
        cval *nk = nvfp4m_ct_new(C, NULL, nc * sizeof *nk),
             *nv = nvfp4m_ct_new(C, NULL, nc * sizeof *nv);
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

ctframe *nvfp4m_ct_frame_new(ctctx *C, const ctnode *at, ctframe *parent)
{
    ctframe *f = nvfp4m_ct_new(C, at, sizeof *f);
    if (f)
        f->parent = parent;
    return f;
}

int nvfp4m_ct_frame_set(ctctx *C, const ctnode *at, ctframe *f, const char *name, size_t n,
                     const cval *v)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->lens[i] == n && !memcmp(f->names[i], name, n)) {
            f->vals[i] = *v;
            return 0;
        }
    if (f->n == f->cap) {
        size_t nc = f->cap ? 2 * f->cap : 8;
        const char **nn = nvfp4m_ct_new(C, at, nc * sizeof *nn);
        size_t *nl = nvfp4m_ct_new(C, at, nc * sizeof *nl);
        cval *nv = nvfp4m_ct_new(C, at, nc * sizeof *nv);
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

const cval *nvfp4m_ct_frame_get(const ctframe *f, const char *name, size_t n)
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
               nvfp4m_ct_put(C, at, b, v->u.mac->m->s, v->u.mac->m->n) ||
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
    return nvfp4m_ct_buf_value(C, &b, out);
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

int nvfp4m_ct_is_num(const cval *v)
{
    return v->t == CV_BOOL || v->t == CV_INT || v->t == CV_FLOAT;
}

double nvfp4m_ct_num(const cval *v)
{
    return v->t == CV_FLOAT ? v->u.f : (double)v->u.i;
}

static int eq_depth(ctctx *C, const ctnode *at, const cval *a, const cval *b, int *res, int depth)
{
    *res = 0;
    if (depth > MAX_NEST)
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "value nested deeper than %d", MAX_NEST);
    if (nvfp4m_ct_is_num(a) && nvfp4m_ct_is_num(b)) {
        if (a->t != CV_FLOAT && b->t != CV_FLOAT)
            *res = a->u.i == b->u.i;
        else
            *res = nvfp4m_ct_num(a) == nvfp4m_ct_num(b);
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
    case CV_MACRO: *res = a->u.mac == b->u.mac; return 0;
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
    if (nvfp4m_ct_is_num(a) && nvfp4m_ct_is_num(b)) {
        if (a->t != CV_FLOAT && b->t != CV_FLOAT)
            *res = (a->u.i > b->u.i) - (a->u.i < b->u.i);
        else
            *res = (nvfp4m_ct_num(a) > nvfp4m_ct_num(b)) - (nvfp4m_ct_num(a) < nvfp4m_ct_num(b));
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
        cmethod *m = nvfp4m_ct_new(C, at, sizeof *m);
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
            *out = i > 0 ? L->items->v[i - 1] : nvfp4m_ct_undef("previtem", 8);
            return 0;
        }
        if (n == 8 && !memcmp(name, "nextitem", 8)) {
            *out = i + 1 < N ? L->items->v[i + 1] : nvfp4m_ct_undef("nextitem", 8);
            return 0;
        }
    }
    *out = nvfp4m_ct_undef(name, n);
    out->tuple = (unsigned char)(obj->t + 1);
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
            *out = nvfp4m_ct_undef("index out of range", 18);
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
    *out = nvfp4m_ct_undef("item", 4);
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
int nvfp4m_ct_do_slice(ctctx *C, const ctnode *at, const cval *obj, const cval *sv, cval *out)
{
    long long len, start = 0, stop = 0, step = 1, cnt = 0;
    int r;

    if (obj->t == CV_UNDEF)
        return nvfp4m_ct_undef_error(C, at, obj);
    if (obj->t != CV_LIST && obj->t != CV_STR) {
        *out = nvfp4m_ct_undef("slice", 5);
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
        clist *l = nvfp4m_ct_new(C, at, sizeof *l);
        if (!l || (cnt && !(l->v = nvfp4m_ct_new(C, at, (size_t)cnt * sizeof *l->v))))
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
        size_t *offs = nvfp4m_ct_new(C, at, ((size_t)len + 1) * sizeof *offs);
        char *dst = nvfp4m_ct_new(C, at, n + 1);
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
        if (!(l = nvfp4m_ct_new(C, at, sizeof *l)))
            return -1;
        *out = l;
        return 0;
    case CV_DICT:
        if (!(l = nvfp4m_ct_new(C, at, sizeof *l)))
            return -1;
        l->v = v->u.d->k;
        l->n = v->u.d->n;
        *out = l;
        return 0;
    case CV_STR: {
        size_t n = cp_len(v->u.s.p, v->u.s.n), i = 0;
        if (!(l = nvfp4m_ct_new(C, at, sizeof *l)) ||
            (n && !(l->v = nvfp4m_ct_new(C, at, n * sizeof *l->v))))
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
