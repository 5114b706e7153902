/* SPDX-License-Identifier: MIT */
/*
 * chat-template-methods.c - the methods of str, dict and loop values and the
 * global functions (range with jinja2's sandbox limit, namespace, dict,
 * raise_exception, strftime_now) of the Jinja2 subset, as Python and
 * transformers' apply_chat_template define them.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat-template-internal.h"

/* ---- methods -------------------------------------------------------------- */

enum {
    M_STARTSWITH, M_ENDSWITH, M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_UPPER, M_LOWER,
    M_REPLACE, M_TITLE, M_CAPITALIZE, M_FORMAT, M_JOIN, M_FIND, M_COUNT, M_REMOVEPREFIX,
    M_REMOVESUFFIX, M_ISDIGIT, M_ISALPHA, M_ISSPACE, M_SPLITLINES, M_STR_END,
    M_GET = 100, M_ITEMS, M_KEYS, M_VALUES, M_CYCLE = 200
};

static const char *const str_methods[] = {
    "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit", "upper", "lower",
    "replace", "title", "capitalize", "format", "join", "find", "count", "removeprefix",
    "removesuffix", "isdigit", "isalpha", "isspace", "splitlines"};
static const char *const dict_methods[] = {"get", "items", "keys", "values"};

static int name_is(const char *name, size_t n, const char *s)
{
    return strlen(s) == n && !memcmp(name, s, n);
}

int nvfp4m_ct_method_id(const cval *self, const char *name, size_t n)
{
    if (self->t == CV_STR) {
        for (int i = 0; i < M_STR_END; i++)
            if (name_is(name, n, str_methods[i]))
                return i;
    } else if (self->t == CV_DICT) {
        for (int i = 0; i < 4; i++)
            if (name_is(name, n, dict_methods[i]))
                return M_GET + i;
    } else if (self->t == CV_LOOP && name_is(name, n, "cycle")) {
        return M_CYCLE;
    }
    return -1;
}

static int affix(const cval *s, const cval *p, int end)
{
    if (p->t != CV_STR || p->u.s.n > s->u.s.n)
        return 0;
    return !memcmp(s->u.s.p + (end ? s->u.s.n - p->u.s.n : 0), p->u.s.p, p->u.s.n);
}

/* str.format with {} / {0} / {name} fields, no format specs */
static int str_format(ctctx *C, const ctnode *at, const cval *fmt, const cargs *a, cval *out)
{
    cbuf b = {0};
    size_t auto_i = 0, i = 0;
    const char *p = fmt->u.s.p;
    size_t n = fmt->u.s.n;
    int r = 0;

    while (i < n && !r) {
        if (p[i] == '{' && i + 1 < n && p[i + 1] == '{') {
            r = nvfp4m_ct_put(C, at, &b, "{", 1);
            i += 2;
        } else if (p[i] == '}' && i + 1 < n && p[i + 1] == '}') {
            r = nvfp4m_ct_put(C, at, &b, "}", 1);
            i += 2;
        } else if (p[i] == '{') {
            size_t e = i + 1;
            const cval *v = NULL;
            char key[64];
            while (e < n && p[e] != '}')
                e++;
            if (e >= n || e - i - 1 >= sizeof key) {
                r = nvfp4m_ct_fail_arg(C, at, "format", "unmatched '{' in format string");
                break;
            }
            snprintf(key, sizeof key, "%.*s", (int)(e - i - 1), p + i + 1);
            if (strpbrk(key, ":!.[")) {
                r = nvfp4m_ct_fail(C, at, NVFP4_ERR_UNSUPPORTED,
                                   "format: field specs ('{%s}') are not supported", key);
                break;
            }
            if (!key[0])
                v = nvfp4m_ct_arg(a, auto_i++, NULL);
            else if (key[0] >= '0' && key[0] <= '9')
                v = nvfp4m_ct_arg(a, (size_t)atoi(key), NULL);
            else
                v = nvfp4m_ct_arg(a, 999999, key);
            if (!v) {
                r = nvfp4m_ct_fail_arg(C, at, "format", "missing argument for a replacement field");
                break;
            }
            r = nvfp4m_ct_write(C, at, &b, v, 0, 0);
            i = e + 1;
        } else {
            size_t st = i;
            while (i < n && p[i] != '{' && p[i] != '}')
                i++;
            if (i == st) {
                r = nvfp4m_ct_fail_arg(C, at, "format", "single '}' in format string");
                break;
            }
            r = nvfp4m_ct_put(C, at, &b, p + st, i - st);
        }
    }
    if (!r)
        r = nvfp4m_ct_str(C, b.p ? b.p : "", b.n, out);
    free(b.p);
    return r;
}

int nvfp4m_ct_method(ctctx *C, const ctnode *at, const cmethod *m, const cargs *a, cval *out)
{
    const cval *self = &m->self, *x = nvfp4m_ct_arg(a, 0, NULL), *y = nvfp4m_ct_arg(a, 1, NULL);

    if (m->id == M_CYCLE) {
        size_t k = nvfp4m_ct_npositional(a);
        if (!k)
            return nvfp4m_ct_fail_arg(C, at, "loop.cycle", "no items to cycle");
        *out = *nvfp4m_ct_arg(a, self->u.loop->i % k, NULL);
        return 0;
    }
    if (m->id >= M_GET) {
        const cdict *d = self->u.d;
        clist *l;
        if (m->id == M_GET) {
            const cval *v;
            if (!x)
                return nvfp4m_ct_fail_arg(C, at, "get", "expected a key");
            v = x->t == CV_STR ? nvfp4m_ct_dict_get(d, x->u.s.p, x->u.s.n) : NULL;
            if (v)
                *out = *v;
            else if (y)
                *out = *y;
            else {
                memset(out, 0, sizeof *out);
                out->t = CV_NONE;
            }
            return 0;
        }
        if (!(l = nvfp4m_ct_list_new(C, at, d->n)) || nvfp4m_ct_step(C, at, d->n))
            return -1;
        for (size_t i = 0; i < d->n; i++) {
            if (m->id == M_ITEMS) {
                clist *p = nvfp4m_ct_list_new(C, at, 2);
                if (!p)
                    return -1;
                p->v[0] = d->k[i];
                p->v[1] = d->v[i];
                p->n = 2;
                l->v[i] = nvfp4m_ct_listv(p, 1);
            } else {
                l->v[i] = m->id == M_KEYS ? d->k[i] : d->v[i];
            }
        }
        l->n = d->n;
        *out = nvfp4m_ct_listv(l, 0);
        return 0;
    }
    switch (m->id) {
    case M_STARTSWITH: case M_ENDSWITH: {
        int end = m->id == M_ENDSWITH, r = 0;
        if (!x)
            return nvfp4m_ct_fail_arg(C, at, str_methods[m->id], "expected a prefix");
        if (x->t == CV_LIST && x->tuple) {
            for (size_t i = 0; i < x->u.l->n && !r; i++)
                r = affix(self, &x->u.l->v[i], end);
        } else if (x->t == CV_STR) {
            r = affix(self, x, end);
        } else {
            return nvfp4m_ct_fail_arg(C, at, str_methods[m->id],
                                      "expected a string or a tuple of strings");
        }
        *out = nvfp4m_ct_mkbool(r);
        return 0;
    }
    case M_STRIP: case M_LSTRIP: case M_RSTRIP:
        if (x && x->t != CV_STR && x->t != CV_NONE)
            return nvfp4m_ct_need_str(C, at, x, str_methods[m->id]);
        *out = nvfp4m_ct_do_strip(self, x && x->t == CV_STR ? x : NULL, m->id != M_RSTRIP,
                                  m->id != M_LSTRIP);
        return 0;
    case M_SPLIT: case M_RSPLIT: {
        const cval *sep = nvfp4m_ct_arg(a, 0, "sep"), *ms = nvfp4m_ct_arg(a, 1, "maxsplit");
        long long maxs = ms && ms->t == CV_INT ? ms->u.i : -1;
        if (m->id == M_RSPLIT && maxs >= 0)
            return nvfp4m_ct_fail(C, at, NVFP4_ERR_UNSUPPORTED,
                                  "rsplit with maxsplit is not supported");
        return nvfp4m_ct_split(C, at, self, sep, maxs, out);
    }
    case M_UPPER: return nvfp4m_ct_case_map(C, at, self, 'u', out);
    case M_LOWER: return nvfp4m_ct_case_map(C, at, self, 'l', out);
    case M_TITLE: return nvfp4m_ct_case_map(C, at, self, 't', out);
    case M_CAPITALIZE: return nvfp4m_ct_case_map(C, at, self, 'c', out);
    case M_REPLACE: {
        const cval *cnt = nvfp4m_ct_arg(a, 2, "count");
        if (!x || !y || x->t != CV_STR || y->t != CV_STR)
            return nvfp4m_ct_fail_arg(C, at, "replace", "expected two string arguments");
        return nvfp4m_ct_replace(C, at, self, x, y, cnt && cnt->t == CV_INT ? cnt->u.i : -1, out);
    }
    case M_FORMAT: return str_format(C, at, self, a, out);
    case M_JOIN: {
        clist *items;
        cbuf b = {0};
        int r = 0;
        if (!x || nvfp4m_ct_iter(C, at, x, &items) || nvfp4m_ct_step(C, at, items->n))
            return x ? -1 : nvfp4m_ct_fail_arg(C, at, "join", "expected an iterable");
        for (size_t i = 0; i < items->n && !r; i++) {
            if (items->v[i].t != CV_STR) {
                r = nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID,
                                   "join: sequence item %zu: expected str instance, %s found", i,
                                   nvfp4m_ct_type(&items->v[i]));
                break;
            }
            if (i)
                r = nvfp4m_ct_put(C, at, &b, self->u.s.p, self->u.s.n);
            if (!r)
                r = nvfp4m_ct_put(C, at, &b, items->v[i].u.s.p, items->v[i].u.s.n);
        }
        if (!r)
            r = nvfp4m_ct_str(C, b.p ? b.p : "", b.n, out);
        free(b.p);
        return r;
    }
    case M_FIND: case M_COUNT: {
        long long j, cnt = 0;
        size_t from = 0;
        if (!x || x->t != CV_STR)
            return nvfp4m_ct_need_str(C, at, x ? x : self, str_methods[m->id]);
        if (nvfp4m_ct_step(C, at, self->u.s.n / 64 + 1))
            return -1;
        if (m->id == M_FIND) {
            j = nvfp4m_ct_find_ll(self, x, 0);
            if (j > 0) {                /* code points before the match */
                long long k = 0;
                for (long long i = 0; i < j; i++)
                    k += ((unsigned char)self->u.s.p[i] & 0xC0) != 0x80;
                j = k;
            }
            *out = nvfp4m_ct_mkint(j);
            return 0;
        }
        if (x->u.s.n == 0) {
            long long k = 1;
            for (size_t i = 0; i < self->u.s.n; i++)
                k += ((unsigned char)self->u.s.p[i] & 0xC0) != 0x80;
            *out = nvfp4m_ct_mkint(k);
            return 0;
        }
        while ((j = nvfp4m_ct_find_ll(self, x, from)) >= 0) {
            cnt++;
            from = (size_t)j + x->u.s.n;
        }
        *out = nvfp4m_ct_mkint(cnt);
        return 0;
    }
    case M_REMOVEPREFIX: case M_REMOVESUFFIX:
        if (!x || x->t != CV_STR)
            return nvfp4m_ct_need_str(C, at, x ? x : self, str_methods[m->id]);
        *out = *self;
        if (affix(self, x, m->id == M_REMOVESUFFIX)) {
            out->u.s.n -= x->u.s.n;
            if (m->id == M_REMOVEPREFIX)
                out->u.s.p += x->u.s.n;
        }
        return 0;
    case M_ISDIGIT: case M_ISALPHA: case M_ISSPACE: {
        int ok = self->u.s.n > 0;
        for (size_t i = 0; i < self->u.s.n && ok; i++) {
            char c = self->u.s.p[i];
            ok = m->id == M_ISDIGIT   ? (c >= '0' && c <= '9')
                 : m->id == M_ISALPHA ? nvfp4m_ct_is_cased(c)
                                      : nvfp4m_ct_ws_len(self->u.s.p + i, 1) == 1;
        }
        *out = nvfp4m_ct_mkbool(ok);
        return 0;
    }
    case M_SPLITLINES: {
        clist *l = nvfp4m_ct_list_new(C, at, 0);
        size_t cap = 0, i = 0, n = self->u.s.n;
        const char *p = self->u.s.p;
        if (!l)
            return -1;
        while (i < n) {
            size_t st = i;
            cval v;
            while (i < n && !strchr("\n\r\v\f\x1c\x1d\x1e", p[i]))
                i++;
            v = nvfp4m_ct_mkstrv(p + st, i - st);
            if (nvfp4m_ct_list_push(C, at, l, &cap, &v))
                return -1;
            if (i < n)
                i += p[i] == '\r' && i + 1 < n && p[i + 1] == '\n' ? 2 : 1;
        }
        *out = nvfp4m_ct_listv(l, 0);
        return 0;
    }
    default:
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "internal: unknown method");
    }
}

/* ---- globals -------------------------------------------------------------- */

enum { G_RANGE, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME, G_END };
static const char *const global_names[] = {"range", "namespace", "dict", "raise_exception",
                                           "strftime_now"};

int nvfp4m_ct_global(const char *name, size_t n)
{
    for (int i = 0; i < G_END; i++)
        if (name_is(name, n, global_names[i]))
            return i;
    return -1;
}

#define MAX_RANGE 100000   /* jinja2's sandbox refuses longer ranges */

int nvfp4m_ct_call_global(ctctx *C, const ctnode *at, int fn, const cargs *a, cval *out)
{
    switch (fn) {
    case G_RANGE: {
        long long v[3] = {0, 0, 1}, cnt = 0;
        size_t k = nvfp4m_ct_npositional(a);
        clist *l;
        if (k < 1 || k > 3 || k != a->n)
            return nvfp4m_ct_fail_arg(C, at, "range", "expected 1 to 3 integer arguments");
        for (size_t i = 0; i < k; i++) {
            if (a->v[i].t != CV_INT && a->v[i].t != CV_BOOL)
                return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID,
                                      "range: '%s' object cannot be interpreted as an integer",
                                      nvfp4m_ct_type(&a->v[i]));
            v[k == 1 ? 1 : i] = a->v[i].u.i;
        }
        if (v[2] == 0)
            return nvfp4m_ct_fail_arg(C, at, "range", "arg 3 must not be zero");
        if (v[2] > 0 && v[1] > v[0])
            cnt = (long long)(((__int128)v[1] - v[0] - 1) / v[2] + 1);
        else if (v[2] < 0 && v[0] > v[1])
            cnt = (long long)(((__int128)v[0] - v[1] - 1) / -(__int128)v[2] + 1);
        if (cnt > MAX_RANGE || cnt < 0)
            return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID,
                                  "range too big: the sandbox blocks ranges larger than %d",
                                  MAX_RANGE);
        if (!(l = nvfp4m_ct_list_new(C, at, (size_t)cnt)) || nvfp4m_ct_step(C, at, (size_t)cnt))
            return -1;
        for (long long i = 0; i < cnt; i++)
            l->v[i] = nvfp4m_ct_mkint(v[0] + i * v[2]);
        l->n = (size_t)cnt;
        *out = nvfp4m_ct_listv(l, 0);
        return 0;
    }
    case G_NAMESPACE: case G_DICT: {
        cdict *d = nvfp4m_ct_new(C, at, sizeof *d);
        if (!d)
            return -1;
        for (size_t i = 0; i < a->n; i++) {
            if (a->names[i]) {
                cval k;
                if (nvfp4m_ct_str(C, a->names[i], strlen(a->names[i]), &k) ||
                    nvfp4m_ct_dict_set(C, d, &k, &a->v[i]))
                    return -1;
            } else if (a->v[i].t == CV_DICT && i == 0) {
                for (size_t j = 0; j < a->v[i].u.d->n; j++)
                    if (nvfp4m_ct_dict_set(C, d, &a->v[i].u.d->k[j], &a->v[i].u.d->v[j]))
                        return -1;
            } else {
                return nvfp4m_ct_fail_arg(C, at, global_names[fn],
                                          "expected keyword arguments or a dict");
            }
        }
        memset(out, 0, sizeof *out);
        out->t = fn == G_NAMESPACE ? CV_NS : CV_DICT;
        out->u.d = d;
        return 0;
    }
    case G_RAISE: {
        cval s;
        const cval *msg = nvfp4m_ct_arg(a, 0, NULL);
        if (!msg || nvfp4m_ct_to_str(C, at, msg, &s))
            return msg ? -1 : nvfp4m_ct_fail_arg(C, at, "raise_exception", "expected a message");
        if (!C->failed) {
            C->failed = 1;
            nvfp4_error_set(C->err, NVFP4_ERR_INVALID, NULL, NULL, (int64_t)at->off, "%.*s",
                            (int)(s.u.s.n > 500 ? 500 : s.u.s.n), s.u.s.p);
            if (C->err)
                snprintf(C->err->key, sizeof C->err->key, "raise_exception");
        }
        return -1;
    }
    case G_STRFTIME: {
        const cval *f = nvfp4m_ct_arg(a, 0, NULL);
        char fmt[256], res[512];
        struct tm tm;
        time_t now = C->now >= 0 ? (time_t)C->now : time(NULL);
        size_t n;
        if (!f || f->t != CV_STR || f->u.s.n >= sizeof fmt)
            return nvfp4m_ct_fail_arg(C, at, "strftime_now", "expected a format string");
        memcpy(fmt, f->u.s.p, f->u.s.n);
        fmt[f->u.s.n] = 0;
        if (C->now >= 0 ? !gmtime_r(&now, &tm) : !localtime_r(&now, &tm))
            return nvfp4m_ct_fail_arg(C, at, "strftime_now", "the time cannot be represented");
        n = f->u.s.n ? strftime(res, sizeof res, fmt, &tm) : 0;
        if (f->u.s.n && n == 0)
            return nvfp4m_ct_fail_arg(C, at, "strftime_now",
                                      "result longer than 511 bytes or empty");
        return nvfp4m_ct_str(C, res, n, out);
    }
    default:
        return nvfp4m_ct_fail(C, at, NVFP4_ERR_INVALID, "internal: unknown function");
    }
}
