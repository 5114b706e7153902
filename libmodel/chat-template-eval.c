/* SPDX-License-Identifier: MIT */
/*
 * chat-template-eval.c - evaluation of the Jinja2 subset: Python's
 * arithmetic (+ - * / // % ** and '...' % x) and ~, expressions, and the
 * statements with jinja2's scopes (a for loop iteration, a macro call and a
 * with block get their own; if does not; a macro closes over the scope it
 * is defined in), then the render entry.
 */
#include "config.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat-template-internal.h"

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
        return nvfp4m_ct_nomem(C, at);
    total = unit * (size_t)k;
    if (nvfp4m_ct_step(C, at, total / 64 + 1))
        return -1;
    *out = *s;
    if (s->t == CV_STR) {
        char *p = nvfp4m_ct_new(C, at, total + 1);
        if (!p)
            return -1;
        /* an empty string copies nothing (its pointer may be NULL) */
        for (long long i = 0; unit && i < k; i++)
            memcpy(p + (size_t)i * unit, s->u.s.p, unit);
        out->u.s.p = p;
        out->u.s.n = total;
    } else {
        clist *l = nvfp4m_ct_new(C, at, sizeof *l);
        if (!l || (total && !(l->v = nvfp4m_ct_new(C, at, total))))
            return -1;
        /* an empty list, k times, is empty: l->v stays NULL (UBSan in CI's
         * fuzz stage: applying zero offset to null pointer) */
        for (long long i = 0; unit && i < k; i++)
            memcpy(l->v + (size_t)i * s->u.l->n, s->u.l->v, unit);
        l->n = s->u.l->n * (size_t)k;
        out->u.l = l;
    }
    return 0;
}

/* '...' % x with %s, %r, %d / %i and %%, no flags or widths (Python's
 * printf-style formatting, the part templates use) */
static int percent_format(ctctx *C, const ctnode *at, const cval *fmt, const cval *x, cval *out)
{
    const cval *args = x;
    size_t nargs = 1, k = 0;
    cbuf b = {0};
    const char *p = fmt->u.s.p;
    size_t n = fmt->u.s.n, st = 0;

    if (x->t == CV_LIST && x->tuple) {
        args = x->u.l->v;
        nargs = x->u.l->n;
    }
    for (size_t i = 0; i < n; i++) {
        char c, num[32];
        const cval *v;
        if (p[i] != '%')
            continue;
        if (nvfp4m_ct_put(C, at, &b, p + st, i - st))
            goto fail;
        c = i + 1 < n ? p[i + 1] : 0;
        st = i + 2;
        i++;
        if (c == '%') {
            if (nvfp4m_ct_put(C, at, &b, "%", 1))
                goto fail;
            continue;
        }
        if (c != 's' && c != 'r' && c != 'd' && c != 'i') {
            nvfp4m_ct_fail(
                C, at, NVFP4_ERR_UNSUPPORTED,
                "'%%%c' in '...' %% x formatting is not supported (only %%s %%r %%d %%i)",
                c ? c : ' ');
            goto fail;
        }
        if (k >= nargs) {
            nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "not enough arguments for format string");
            goto fail;
        }
        v = &args[k++];
        if (c == 'd' || c == 'i') {
            if (!nvfp4m_ct_is_num(v)) {
                nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID,
                               "%%%c format: a real number is required, not %s", c,
                               nvfp4m_ct_type(v));
                goto fail;
            }
            if (v->t == CV_FLOAT && !(fabs(v->u.f) < 9.2e18)) {
                nvfp4m_ct_fail(C, at, NVFP4_ERR_UNSUPPORTED, "%%d of %g", v->u.f);
                goto fail;
            }
            snprintf(num, sizeof num, "%lld", v->t == CV_FLOAT ? (long long)v->u.f : v->u.i);
            if (nvfp4m_ct_put(C, at, &b, num, strlen(num)))
                goto fail;
        } else if (nvfp4m_ct_write(C, at, &b, v, c == 'r', 0)) {
            goto fail;
        }
    }
    if (k < nargs) {
        nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID,
                       "not all arguments converted during string formatting");
        goto fail;
    }
    if (st < n && nvfp4m_ct_put(C, at, &b, p + st, n - st))
        goto fail;
    return nvfp4m_ct_buf_value(C, &b, out);
fail:
    free(b.p);
    return -1;
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
        return nvfp4m_ct_buf_value(C, &buf, out);
    }
    if (nvfp4m_ct_is_num(a) && nvfp4m_ct_is_num(b)) {
        int ints = a->t != CV_FLOAT && b->t != CV_FLOAT;
        long long x = a->u.i, y = b->u.i, r = 0;
        double fx = nvfp4m_ct_num(a), fy = nvfp4m_ct_num(b), fr = 0;
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
                    return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID,
                                          "integer division or modulo by zero");
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
                return nvfp4m_ct_fail(
                    C, at, NVFP4_ERR_UNSUPPORTED,
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
    if (op == '+' && a->t == b->t &&
        (a->t == CV_STR || (a->t == CV_LIST && a->tuple == b->tuple))) {
        if (a->t == CV_STR) {
            cbuf buf = {0};
            if (nvfp4m_ct_step(C, at, (a->u.s.n + b->u.s.n) / 256) ||
                nvfp4m_ct_put(C, at, &buf, a->u.s.p, a->u.s.n) ||
                nvfp4m_ct_put(C, at, &buf, b->u.s.p, b->u.s.n)) {
                free(buf.p);
                return -1;
            }
            return nvfp4m_ct_buf_value(C, &buf, out);
        } else {
            clist *l = nvfp4m_ct_new(C, at, sizeof *l);
            size_t n = a->u.l->n + b->u.l->n;
            if (!l || nvfp4m_ct_step(C, at, n) ||
                (n && !(l->v = nvfp4m_ct_new(C, at, n * sizeof *l->v))))
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
        return percent_format(C, at, a, b, out);
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
    if (!(a->v = nvfp4m_ct_new(C, e, e->nargs * sizeof *a->v)))
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
    case CV_MACRO: return nvfp4m_ct_call_macro(C, e, f.u.mac, &a, out);
    case CV_METHOD: return nvfp4m_ct_method(C, e, f.u.bm, &a, out);
    case CV_FUNC: return nvfp4m_ct_call_global(C, e, f.u.fn, &a, out);
    case CV_UNDEF: return nvfp4m_ct_undef_error(C, e, &f);
    default:
        return nvfp4m_ct_fail(C, e, NVFP4_ERR_INVALID, "'%s' object is not callable",
                              nvfp4m_ct_type(&f));
    }
}

static int eval_node(ctctx *C, ctframe *F, const ctnode *e, cval *out)
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
        const cval *v = nvfp4m_ct_frame_get(F, e->s, e->n);
        int fn;
        if (v)
            *out = *v;
        else if ((fn = nvfp4m_ct_global(e->s, e->n)) >= 0) {
            out->t = CV_FUNC;
            out->u.fn = fn;
        } else
            *out = nvfp4m_ct_undef(e->s, e->n);
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
        return nvfp4m_ct_do_slice(C, e, &a, sv, out);
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
        if (!nvfp4m_ct_is_num(&a))
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
        *out = nvfp4m_ct_undef("else", 4);
        return 0;
    case E_CMP:
        if (eval(C, F, e->a, &a) || eval(C, F, e->b, &b))
            return -1;
        return nvfp4m_ct_cmp(C, e, e->op, &a, &b, out);
    case E_LIST: case E_TUPLE: {
        clist *l = nvfp4m_ct_new(C, e, sizeof *l);
        if (!l || (e->nargs && !(l->v = nvfp4m_ct_new(C, e, e->nargs * sizeof *l->v))))
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
        cdict *d = nvfp4m_ct_new(C, e, sizeof *d);
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

/* A left-leaning chain (1 + 1 + ... or x|trim|trim...) parses without
 * recursion but evaluates with it: bound the depth so that no template
 * exhausts the stack. */
#define MAX_EVAL_DEPTH 2000

static int eval(ctctx *C, ctframe *F, const ctnode *e, cval *out)
{
    int r;

    if (C->edepth >= MAX_EVAL_DEPTH)
        return nvfp4m_ct_fail(C, e, NVFP4_ERR_INVALID, "expression nested deeper than %d (limit)",
                              MAX_EVAL_DEPTH);
    C->edepth++;
    r = eval_node(C, F, e, out);
    C->edepth--;
    return r;
}

/* ---- statements ----------------------------------------------------------- */

static int exec_body(ctctx *C, ctframe *F, ctnode *const *body, size_t n, cbuf *out);

static int assign(ctctx *C, ctframe *F, const ctnode *target, const cval *v)
{
    if (target->kind == E_NAME)
        return nvfp4m_ct_frame_set(C, target, F, target->s, target->n, v);
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
            if (nvfp4m_ct_frame_set(C, target, F, target->args[i]->s, target->args[i]->n, &l->v[i]))
                return -1;
    }
    return 0;
}

static int exec_for(ctctx *C, ctframe *F, const ctnode *s, cbuf *out)
{
    cval it, lv = {0};
    clist *items;
    ctframe *L = nvfp4m_ct_frame_new(C, s, F);
    cloop *loop = nvfp4m_ct_new(C, s, sizeof *loop);

    if (!L || !loop || eval(C, F, s->b, &it) || nvfp4m_ct_iter(C, s->b, &it, &items))
        return -1;
    if (s->c) {                       /* {% for x in xs if cond %}: filter first (loop.length) */
        clist *f = nvfp4m_ct_new(C, s, sizeof *f);
        if (!f || (items->n && !(f->v = nvfp4m_ct_new(C, s, items->n * sizeof *f->v))))
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
    for (size_t i = 0; i < items->n; i++) {
        /* each iteration starts from the loop's own scope: a set in the body
         * lasts to the end of that iteration only (jinja2) */
        L->n = 0;
        loop->i = i;
        if (nvfp4m_ct_step(C, s, 1) || nvfp4m_ct_frame_set(C, s, L, "loop", 4, &lv) ||
            assign(C, L, s->a, &items->v[i]) || exec_body(C, L, s->body, s->nbody, out))
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
        if (exec_body(C, F, s->body, s->nbody, &b) || nvfp4m_ct_buf_value(C, &b, &v)) {
            free(b.p);
            return -1;
        }
        return assign(C, F, s->a, &v);
    }
    case N_MACRO:
        memset(&v, 0, sizeof v);
        v.t = CV_MACRO;
        if (!(v.u.mac = nvfp4m_ct_new(C, s, sizeof *v.u.mac)))
            return -1;
        v.u.mac->m = s;
        v.u.mac->closure = F;
        return nvfp4m_ct_frame_set(C, s, F, s->s, s->n, &v);
    case N_WITH: {
        ctframe *W = nvfp4m_ct_frame_new(C, s, F);
        if (!W)
            return -1;
        for (size_t i = 0; i < s->nargs; i++)
            if (eval(C, F, s->args[i], &v) ||
                nvfp4m_ct_frame_set(C, s, W, s->names[i], strlen(s->names[i]), &v))
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

int nvfp4m_ct_call_macro(ctctx *C, const ctnode *at, const struct cmacro *mac, const cargs *a,
                         cval *out)
{
    const ctnode *m = mac->m;
    ctframe *M;
    cbuf b = {0};
    int ctl = C->ctl, r;

    if (C->depth >= C->max_depth)
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "macro calls nested deeper than %d (limit)",
                              C->max_depth);
    if (nvfp4m_ct_step(C, at, 1) || !(M = nvfp4m_ct_frame_new(C, at, mac->closure)))
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
        cval v = nvfp4m_ct_undef(m->names[k], strlen(m->names[k]));
        int found = 0;
        for (size_t i = 0; i < a->n && !found; i++)
            if ((!a->names[i] && i == k) || (a->names[i] && !strcmp(a->names[i], m->names[k]))) {
                v = a->v[i];
                found = 1;
            }
        if (!found && m->args[k] && eval(C, M, m->args[k], &v))
            return -1;
        if (nvfp4m_ct_frame_set(C, at, M, m->names[k], strlen(m->names[k]), &v))
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
    return nvfp4m_ct_buf_value(C, &b, out);
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
        clist *l = nvfp4m_ct_new(C, NULL, sizeof *l);
        size_t n = json_array_size(j);
        if (!l || (n && !(l->v = nvfp4m_ct_new(C, NULL, n * sizeof *l->v))))
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
        cdict *d = nvfp4m_ct_new(C, NULL, sizeof *d);
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
    if ((C.root = nvfp4m_ct_frame_new(&C, NULL, NULL))) {
        json_object_foreach((json_t *)vars, k, v) {
            cval val;
            if (from_json(&C, v, &val) || nvfp4m_ct_frame_set(&C, NULL, C.root, k, strlen(k), &val))
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
