/* SPDX-License-Identifier: MIT */
/*
 * chat-template-parse.c - lexer and parser of the Jinja2 subset of chat
 * templates.  The lexer reproduces jinja2 3.1's rules under the settings of
 * transformers' apply_chat_template (trim_blocks, lstrip_blocks): "{%-" and
 * "{{-" strip all whitespace before the tag, "-%}" / "-}}" all after it,
 * "{%+" keeps it; a block or comment tag alone on its line loses the
 * indentation before it and "%}" / "#}" eat one newline after it.  The parser
 * follows jinja2's grammar and operator precedence (parser.py:
 * condexpr < or < and < not < compare < + - < ~ < * / // % < ** < unary <
 * postfix, filters and tests).
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat-template-internal.h"

/* ---- arena ---------------------------------------------------------------- */

struct ctchunk {
    ctchunk *next;
    size_t size, used;
};
#define CT_ALIGN ((size_t)16)
#define CT_HDR ((sizeof(ctchunk) + CT_ALIGN - 1) & ~(CT_ALIGN - 1))
#define CT_CHUNK ((size_t)65536)

void *nvfp4m_ct_alloc(ctarena *a, size_t n)
{
    ctchunk *c = a->head;
    void *p;

    if (n > SIZE_MAX / 4)
        return NULL;
    n = n ? (n + CT_ALIGN - 1) & ~(CT_ALIGN - 1) : CT_ALIGN;
    if (a->cap && (n > a->cap || a->used > a->cap - n))
        return NULL;
    if (!c || c->size - c->used < n) {
        size_t sz = n > CT_CHUNK / 4 ? n : CT_CHUNK;
        ctchunk *nc = malloc(CT_HDR + sz);
        if (!nc)
            return NULL;
        nc->size = sz;
        nc->used = 0;
        if (c && n > CT_CHUNK / 4) {      /* a big block: keep filling the current chunk */
            nc->next = c->next;
            c->next = nc;
        } else {
            nc->next = c;
            a->head = nc;
        }
        c = nc;
    }
    p = (char *)c + CT_HDR + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

char *nvfp4m_ct_strdup(ctarena *a, const char *s, size_t n)
{
    char *p = n == SIZE_MAX ? NULL : nvfp4m_ct_alloc(a, n + 1);

    if (p && n)
        memcpy(p, s, n);
    return p;
}

void nvfp4m_ct_arena_free(ctarena *a)
{
    while (a->head) {
        ctchunk *n = a->head->next;
        free(a->head);
        a->head = n;
    }
    a->used = 0;
}

nvfp4_status nvfp4m_ct_error(nvfp4_error *err, nvfp4_status st, const char *name,
                             const char *src, size_t off, const char *fmt, ...)
{
    char msg[NVFP4_ERROR_TEXT_LENGTH];
    va_list ap;
    int line = 1;
    size_t ls = 0;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (size_t i = 0; src && i < off && src[i]; i++)
        if (src[i] == '\n') {
            line++;
            ls = i + 1;
        }
    return nvfp4_error_set(err, st, name, NULL, (int64_t)off, "line %d, column %zu: %s", line,
                           off - ls + 1, msg);
}

/* ---- lexer ---------------------------------------------------------------- */

enum { T_EOF, T_DATA, T_VBEGIN, T_VEND, T_BBEGIN, T_BEND, T_NAME, T_STR, T_INT, T_FLOAT, T_OP };

typedef struct {
    int t;
    size_t off;
    const char *p;            /* data, name, decoded string */
    size_t n;
    long long i;
    double f;
    int op;
} ctok;

typedef struct {
    nvfp4_chat_template *t;
    nvfp4_error *err;
    ctarena *ar;
    ctok *toks;
    size_t ntoks, cap, pos;
    int depth, loops, failed;
    nvfp4_status st;
} parser;

#define MAX_PARSE_DEPTH 200

static void *fail(parser *P, nvfp4_status st, size_t off, const char *fmt, ...) NVFP4_PRINTF(4, 5);
static void *fail(parser *P, nvfp4_status st, size_t off, const char *fmt, ...)
{
    char msg[400];
    va_list ap;

    if (P->failed)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    P->failed = 1;
    P->st = st;
    nvfp4m_ct_error(P->err, st, P->t->name, P->t->src, off, "%s", msg);
    return NULL;
}

static void *oom(parser *P)
{
    return fail(P, NVFP4_ERR_NOMEM, 0, "out of memory parsing the template");
}

static int push(parser *P, int type, size_t off, const char *p, size_t n)
{
    ctok *k;

    if (P->ntoks == P->cap) {
        size_t nc = P->cap ? 2 * P->cap : 256;
        ctok *nt = nc > SIZE_MAX / sizeof *nt ? NULL : realloc(P->toks, nc * sizeof *nt);
        if (!nt) {
            oom(P);
            return -1;
        }
        P->toks = nt;
        P->cap = nc;
    }
    k = &P->toks[P->ntoks++];
    memset(k, 0, sizeof *k);
    k->t = type;
    k->off = off;
    k->p = p;
    k->n = n;
    return 0;
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
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

static size_t put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string literal from s[i] (the quote) to its closing quote; escapes as
 * Python's "unicode-escape" codec decodes them (jinja2 lexer.py). */
static int lex_string(parser *P, size_t *ip)
{
    const char *s = P->t->src;
    size_t len = P->t->len, i = *ip, start = i;
    char q = s[i++], *o, *out;

    while (i < len && s[i] != q) {
        if (s[i] == '\\' && i + 1 < len)
            i++;
        i++;
    }
    if (i >= len) {
        fail(P, NVFP4_ERR_INVALID, start, "unterminated string literal");
        return -1;
    }
    out = o = nvfp4m_ct_alloc(P->ar, i - start + 1);
    if (!out) {
        oom(P);
        return -1;
    }
    for (size_t j = start + 1; j < i; j++) {
        char c = s[j];
        uint32_t cp = 0;
        int nd = 0;

        if (c != '\\') {
            *o++ = c;
            continue;
        }
        c = s[++j];
        switch (c) {
        case '\n': continue;
        case '\\': *o++ = '\\'; continue;
        case '\'': *o++ = '\''; continue;
        case '"': *o++ = '"'; continue;
        case 'a': *o++ = '\a'; continue;
        case 'b': *o++ = '\b'; continue;
        case 'f': *o++ = '\f'; continue;
        case 'n': *o++ = '\n'; continue;
        case 'r': *o++ = '\r'; continue;
        case 't': *o++ = '\t'; continue;
        case 'v': *o++ = '\v'; continue;
        case 'x': nd = 2; break;
        case 'u': nd = 4; break;
        case 'U': nd = 8; break;
        case 'N':
            fail(P, NVFP4_ERR_UNSUPPORTED, j - 1, "the \\N{...} string escape is not supported");
            return -1;
        default:
            if (c >= '0' && c <= '7') {
                int k = 0;
                while (k < 3 && s[j] >= '0' && s[j] <= '7') {
                    cp = cp * 8 + (uint32_t)(s[j] - '0');
                    j++;
                    k++;
                }
                j--;
                o += put_utf8(o, cp);
                continue;
            }
            *o++ = '\\';
            *o++ = c;
            continue;
        }
        for (int k = 0; k < nd; k++) {
            int h = j + 1 < i ? hexval(s[j + 1]) : -1;
            if (h < 0) {
                fail(P, NVFP4_ERR_INVALID, j - 1, "truncated \\%c escape in a string literal", c);
                return -1;
            }
            cp = cp * 16 + (uint32_t)h;
            j++;
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            fail(P, NVFP4_ERR_INVALID, start, "string escape of an invalid code point U+%X", cp);
            return -1;
        }
        o += put_utf8(o, cp);
    }
    if (push(P, T_STR, start, out, (size_t)(o - out)))
        return -1;
    *ip = i + 1;
    return 0;
}

static int lex_number(parser *P, size_t *ip)
{
    const char *s = P->t->src;
    size_t len = P->t->len, i = *ip, start = i, k = 0;
    char buf[128];
    int isf = 0;

    while (i < len && (is_digit(s[i]) || (s[i] == '_' && i + 1 < len && is_digit(s[i + 1]))))
        i++;
    if (i + 1 < len && s[i] == '.' && is_digit(s[i + 1])) {
        isf = 1;
        i++;
        while (i < len && (is_digit(s[i]) || (s[i] == '_' && i + 1 < len && is_digit(s[i + 1]))))
            i++;
    }
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        size_t e = i + 1;
        if (e < len && (s[e] == '+' || s[e] == '-'))
            e++;
        if (e < len && is_digit(s[e])) {
            isf = 1;
            i = e;
            while (i < len && is_digit(s[i]))
                i++;
        }
    }
    for (size_t j = start; j < i && k < sizeof buf - 1; j++)
        if (s[j] != '_')
            buf[k++] = s[j];
    buf[k] = 0;
    if (i - start >= sizeof buf - 1) {
        fail(P, NVFP4_ERR_UNSUPPORTED, start, "number literal too long");
        return -1;
    }
    if (push(P, isf ? T_FLOAT : T_INT, start, s + start, i - start))
        return -1;
    errno = 0;
    if (isf) {
        P->toks[P->ntoks - 1].f = strtod(buf, NULL);
    } else {
        P->toks[P->ntoks - 1].i = strtoll(buf, NULL, 10);
        if (errno) {
            fail(P, NVFP4_ERR_UNSUPPORTED, start,
                 "integer literal beyond 64 bits (Python's unbounded ints are not supported)");
            return -1;
        }
    }
    *ip = i;
    return 0;
}

/* Tokens of one tag from *ip to its end; KIND '{' or '%'.  Returns 0 and
 * sets *ip past the end (and the whitespace control), *nl = the end consumed
 * a newline last. */
static int lex_tag(parser *P, size_t tag, char kind, size_t *ip, int *nl)
{
    const char *s = P->t->src;
    size_t len = P->t->len, i = *ip;
    char close = kind == '%' ? '%' : '}';
    int depth = 0;

    for (;;) {
        while (i < len && is_ws(s[i]))
            i++;
        if (i >= len) {
            fail(P, NVFP4_ERR_INVALID, tag, "unexpected end of template: this %s is not closed",
                 kind == '%' ? "'{%' tag" : "'{{' expression");
            return -1;
        }
        if (depth == 0) {
            int end = 0, strip = 0, trim = 0;
            if (s[i] == '-' && i + 2 < len && s[i + 1] == close && s[i + 2] == '}') {
                end = 3;
                strip = 1;
            } else if (kind == '%' && s[i] == '+' && i + 2 < len && s[i + 1] == '%' &&
                       s[i + 2] == '}') {
                end = 3;
            } else if (s[i] == close && i + 1 < len && s[i + 1] == '}') {
                end = 2;
                trim = kind == '%';
            }
            if (end) {
                if (push(P, kind == '%' ? T_BEND : T_VEND, i, NULL, 0))
                    return -1;
                i += (size_t)end;
                if (strip)
                    while (i < len && is_ws(s[i]))
                        i++;
                else if (trim && i < len && s[i] == '\n')
                    i++;
                *nl = s[i - 1] == '\n';
                *ip = i;
                return 0;
            }
        }
        if (is_alpha(s[i])) {
            size_t st = i;
            while (i < len && (is_alpha(s[i]) || is_digit(s[i])))
                i++;
            if (push(P, T_NAME, st, s + st, i - st))
                return -1;
        } else if (is_digit(s[i])) {
            if (lex_number(P, &i))
                return -1;
        } else if (s[i] == '\'' || s[i] == '"') {
            if (lex_string(P, &i))
                return -1;
        } else {
            static const struct { const char *s; int op; } two[] = {
                {"//", OP_FLOORDIV}, {"**", OP_POW}, {"==", OP_EQ},
                {"!=", OP_NE},       {"<=", OP_LE},  {">=", OP_GE}};
            int op = 0, w = 1;
            for (size_t k = 0; k < sizeof two / sizeof two[0]; k++)
                if (i + 1 < len && s[i] == two[k].s[0] && s[i + 1] == two[k].s[1]) {
                    op = two[k].op;
                    w = 2;
                }
            if (!op && s[i] && strchr("+-*/%~()[]{}.:|,=<>;", s[i]))
                op = (unsigned char)s[i];
            if (!op) {
                fail(P, NVFP4_ERR_INVALID, i, "unexpected character '%c' in a tag", s[i]);
                return -1;
            }
            if (op == '(' || op == '[' || op == '{')
                depth++;
            else if (op == ')' || op == ']' || op == '}') {
                if (depth == 0) {
                    fail(P, NVFP4_ERR_INVALID, i, "unexpected '%c'", s[i]);
                    return -1;
                }
                depth--;
            }
            if (push(P, T_OP, i, s + i, (size_t)w))
                return -1;
            P->toks[P->ntoks - 1].op = op;
            i += (size_t)w;
        }
    }
}

static int lex(parser *P)
{
    const char *s = P->t->src;
    size_t len = P->t->len, pos = 0;
    int line_starting = 1;

    while (pos < len) {
        size_t q = pos, dend, p;
        char kind, sign;

        while (q + 1 < len && !(s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' ||
                                                s[q + 1] == '#')))
            q++;
        if (q + 1 >= len) {
            if (push(P, T_DATA, pos, s + pos, len - pos))
                return -1;
            break;
        }
        kind = s[q + 1];
        sign = q + 2 < len && (s[q + 2] == '-' || s[q + 2] == '+') ? s[q + 2] : 0;
        dend = q;
        if (sign == '-') {
            while (dend > pos && is_ws(s[dend - 1]))
                dend--;
        } else if (sign != '+' && kind != '{') {
            /* lstrip_blocks: only whitespace between the line start and the tag */
            size_t l = dend, k;
            while (l > pos && s[l - 1] != '\n')
                l--;
            if (l > pos || line_starting) {
                for (k = l; k < dend && is_ws(s[k]); k++)
                    ;
                if (k == dend)
                    dend = l;
            }
        }
        if (dend > pos && push(P, T_DATA, pos, s + pos, dend - pos))
            return -1;
        p = q + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            const char *e = NULL;
            size_t after;
            for (size_t k = p; k + 1 < len; k++)
                if (s[k] == '#' && s[k + 1] == '}') {
                    e = s + k;
                    break;
                }
            if (!e) {
                fail(P, NVFP4_ERR_INVALID, q, "unterminated comment: no '#}' after this '{#'");
                return -1;
            }
            after = (size_t)(e - s) + 2;
            if ((size_t)(e - s) > p && e[-1] == '-') {
                while (after < len && is_ws(s[after]))
                    after++;
            } else if (!((size_t)(e - s) > p && e[-1] == '+') && after < len &&
                       s[after] == '\n') {
                after++;
            }
            line_starting = s[after - 1] == '\n';
            pos = after;
            continue;
        }
        if (push(P, kind == '%' ? T_BBEGIN : T_VBEGIN, q, NULL, 0))
            return -1;
        if (lex_tag(P, q, kind, &p, &line_starting))
            return -1;
        pos = p;
    }
    return push(P, T_EOF, len, NULL, 0);
}

/* ---- parser --------------------------------------------------------------- */

typedef struct {
    ctnode **v;
    const char **names;
    size_t n, cap;
} nvec;

static int nvec_push(parser *P, nvec *v, ctnode *x, const char *name)
{
    if (v->n == v->cap) {
        size_t nc = v->cap ? 2 * v->cap : 4;
        ctnode **nv = nvfp4m_ct_alloc(P->ar, nc * sizeof *nv);
        const char **nn = nvfp4m_ct_alloc(P->ar, nc * sizeof *nn);
        if (!nv || !nn) {
            oom(P);
            return -1;
        }
        if (v->n) {
            memcpy(nv, v->v, v->n * sizeof *nv);
            memcpy(nn, v->names, v->n * sizeof *nn);
        }
        v->v = nv;
        v->names = nn;
        v->cap = nc;
    }
    v->names[v->n] = name;
    v->v[v->n++] = x;
    return 0;
}

static ctok *cur(parser *P)
{
    return &P->toks[P->pos];
}

static ctok *peek(parser *P, size_t k)
{
    return P->pos + k < P->ntoks ? &P->toks[P->pos + k] : &P->toks[P->ntoks - 1];
}

static void next(parser *P)
{
    if (P->pos + 1 < P->ntoks)
        P->pos++;
}

static int tok_is_op(const ctok *k, int op)
{
    return k->t == T_OP && k->op == op;
}

static int tok_is_name(const ctok *k, const char *name)
{
    return k->t == T_NAME && k->n == strlen(name) && !memcmp(k->p, name, k->n);
}

static int is_op(parser *P, int op)
{
    return tok_is_op(cur(P), op);
}

static int is_name(parser *P, const char *name)
{
    return tok_is_name(cur(P), name);
}

static const char *tok_desc(const ctok *k, char *buf, size_t n)
{
    switch (k->t) {
    case T_EOF: return "end of template";
    case T_DATA: return "template text";
    case T_VBEGIN: return "'{{'";
    case T_VEND: return "'}}'";
    case T_BBEGIN: return "'{%'";
    case T_BEND: return "'%}'";
    case T_STR: return "a string";
    case T_INT: case T_FLOAT: return "a number";
    default:
        snprintf(buf, n, "'%.*s'", (int)(k->n > 40 ? 40 : k->n), k->p);
        return buf;
    }
}

static void *unexpected(parser *P, const char *expected)
{
    char buf[64];
    return fail(P, NVFP4_ERR_INVALID, cur(P)->off, "expected %s, found %s", expected,
                tok_desc(cur(P), buf, sizeof buf));
}

static int expect_op(parser *P, int op, const char *what)
{
    if (!is_op(P, op)) {
        unexpected(P, what);
        return -1;
    }
    next(P);
    return 0;
}

static int expect_bend(parser *P)
{
    if (cur(P)->t != T_BEND) {
        unexpected(P, "'%}'");
        return -1;
    }
    next(P);
    return 0;
}

static ctnode *mk(parser *P, ctkind k, size_t off)
{
    ctnode *n = nvfp4m_ct_alloc(P->ar, sizeof *n);
    if (!n)
        return oom(P);
    n->kind = k;
    n->off = off;
    return n;
}

static ctnode *mk2(parser *P, ctkind k, size_t off, int op, ctnode *a, ctnode *b)
{
    ctnode *n;
    if (!a || !b)
        return NULL;
    n = mk(P, k, off);
    if (n) {
        n->op = op;
        n->a = a;
        n->b = b;
    }
    return n;
}

static ctnode *parse_expression(parser *P);
static ctnode *parse_or(parser *P);
static ctnode *parse_unary(parser *P, int with_filter);
static ctnode *parse_primary(parser *P);

static int enter(parser *P)
{
    if (++P->depth > MAX_PARSE_DEPTH) {
        fail(P, NVFP4_ERR_INVALID, cur(P)->off, "expression nested deeper than %d",
             MAX_PARSE_DEPTH);
        return -1;
    }
    return 0;
}

/* '(' args ')' into n->args / n->names; the current token is '('. */
static int parse_args(parser *P, ctnode *n)
{
    nvec v = {0};
    int kw = 0;

    next(P);
    while (!is_op(P, ')')) {
        const char *name = NULL;
        ctnode *e;
        if (v.n && expect_op(P, ',', "',' or ')'"))
            return -1;
        if (is_op(P, ')'))
            break;
        if (is_op(P, '*') || is_op(P, OP_POW)) {
            fail(P, NVFP4_ERR_UNSUPPORTED, cur(P)->off, "*args / **kwargs in a call are not supported");
            return -1;
        }
        if (cur(P)->t == T_NAME && tok_is_op(peek(P, 1), '=')) {
            name = nvfp4m_ct_strdup(P->ar, cur(P)->p, cur(P)->n);
            if (!name) {
                oom(P);
                return -1;
            }
            next(P);
            next(P);
            kw = 1;
        } else if (kw) {
            fail(P, NVFP4_ERR_INVALID, cur(P)->off, "positional argument after a keyword argument");
            return -1;
        }
        e = parse_expression(P);
        if (!e || nvec_push(P, &v, e, name))
            return -1;
    }
    next(P);
    n->args = v.v;
    n->names = v.names;
    n->nargs = v.n;
    return 0;
}

static char *tok_name(parser *P)
{
    char *s;
    if (cur(P)->t != T_NAME) {
        unexpected(P, "a name");
        return NULL;
    }
    s = nvfp4m_ct_strdup(P->ar, cur(P)->p, cur(P)->n);
    if (!s)
        return oom(P);
    next(P);
    return s;
}

static ctnode *parse_postfix(parser *P, ctnode *e)
{
    while (e) {
        size_t off = cur(P)->off;
        if (is_op(P, '.')) {
            next(P);
            if (cur(P)->t == T_INT) {
                ctnode *k = mk(P, E_INT, cur(P)->off);
                if (!k)
                    return NULL;
                k->i = cur(P)->i;
                next(P);
                e = mk2(P, E_ITEM, off, 0, e, k);
            } else {
                ctnode *n = mk(P, E_ATTR, off);
                if (!n)
                    return NULL;
                n->a = e;
                if (!(n->s = tok_name(P)))
                    return NULL;
                n->n = strlen(n->s);
                e = n;
            }
        } else if (is_op(P, '[')) {
            ctnode *a = NULL, *b = NULL, *c = NULL, *n;
            int slice = 0;
            next(P);
            if (!is_op(P, ':') && !(a = parse_expression(P)))
                return NULL;
            if (is_op(P, ':')) {
                slice = 1;
                next(P);
                if (!is_op(P, ']') && !is_op(P, ':') && !(b = parse_expression(P)))
                    return NULL;
                if (is_op(P, ':')) {
                    next(P);
                    if (!is_op(P, ']') && !(c = parse_expression(P)))
                        return NULL;
                }
            }
            if (expect_op(P, ']', "']'"))
                return NULL;
            if (!(n = mk(P, slice ? E_SLICE : E_ITEM, off)))
                return NULL;
            n->a = e;
            if (slice) {
                n->args = nvfp4m_ct_alloc(P->ar, 3 * sizeof *n->args);
                if (!n->args)
                    return oom(P);
                n->args[0] = a;
                n->args[1] = b;
                n->args[2] = c;
                n->nargs = 3;
            } else {
                n->b = a;
            }
            e = n;
        } else if (is_op(P, '(')) {
            ctnode *n = mk(P, E_CALL, off);
            if (!n)
                return NULL;
            n->a = e;
            if (parse_args(P, n))
                return NULL;
            e = n;
        } else {
            break;
        }
    }
    return e;
}

static ctnode *parse_filter_expr(parser *P, ctnode *e)
{
    while (e) {
        size_t off = cur(P)->off;
        if (is_op(P, '|')) {
            ctnode *n = mk(P, E_FILTER, off);
            if (!n)
                return NULL;
            next(P);
            n->a = e;
            if (!(n->s = tok_name(P)))
                return NULL;
            n->n = strlen(n->s);
            if (!nvfp4m_ct_known_filter(n->s))
                return fail(P, NVFP4_ERR_UNSUPPORTED, P->toks[P->pos - 1].off, "filter '%s' is not supported",
                            n->s);
            if (is_op(P, '.')) {
                fail(P, NVFP4_ERR_UNSUPPORTED, cur(P)->off, "dotted filter names are not supported");
                return NULL;
            }
            if (is_op(P, '(') && parse_args(P, n))
                return NULL;
            e = n;
        } else if (is_name(P, "is")) {
            ctnode *n = mk(P, E_TEST, off);
            ctok *k;
            if (!n)
                return NULL;
            next(P);
            n->a = e;
            if (is_name(P, "not")) {
                n->op = 1;
                next(P);
            }
            if (!(n->s = tok_name(P)))
                return NULL;
            n->n = strlen(n->s);
            if (!nvfp4m_ct_known_test(n->s))
                return fail(P, NVFP4_ERR_UNSUPPORTED, P->toks[P->pos - 1].off,
                            "test '%s' is not supported", n->s);
            k = cur(P);
            if (is_op(P, '(')) {
                if (parse_args(P, n))
                    return NULL;
            } else if ((k->t == T_NAME && !tok_is_name(k, "else") && !tok_is_name(k, "or") &&
                        !tok_is_name(k, "and")) ||
                       k->t == T_STR || k->t == T_INT || k->t == T_FLOAT || is_op(P, '[') ||
                       is_op(P, '{')) {
                ctnode *a = parse_postfix(P, parse_primary(P));
                if (!a)
                    return NULL;
                n->args = nvfp4m_ct_alloc(P->ar, sizeof *n->args);
                n->names = nvfp4m_ct_alloc(P->ar, sizeof *n->names);
                if (!n->args || !n->names)
                    return oom(P);
                n->args[0] = a;
                n->nargs = 1;
            }
            e = n;
        } else if (is_op(P, '(')) {
            ctnode *n = mk(P, E_CALL, off);
            if (!n)
                return NULL;
            n->a = e;
            if (parse_args(P, n))
                return NULL;
            e = n;
        } else {
            break;
        }
    }
    return e;
}

/* A comma-separated expression list; a tuple when there is a comma. */
static ctnode *parse_tuple(parser *P, int no_condexpr, int parens)
{
    nvec v = {0};
    size_t off = cur(P)->off;
    int tuple = 0;
    ctnode *n;

    for (;;) {
        ctnode *e;
        if (v.n) {
            ctok *k = cur(P);
            if (k->t == T_BEND || k->t == T_VEND || (parens && tok_is_op(k, ')')))
                break;
        }
        e = no_condexpr ? parse_or(P) : parse_expression(P);
        if (!e || nvec_push(P, &v, e, NULL))
            return NULL;
        if (!is_op(P, ','))
            break;
        tuple = 1;
        next(P);
    }
    if (!tuple)
        return v.v[0];
    if (!(n = mk(P, E_TUPLE, off)))
        return NULL;
    n->args = v.v;
    n->names = v.names;
    n->nargs = v.n;
    return n;
}

static ctnode *parse_primary(parser *P)
{
    ctok *k = cur(P);
    ctnode *n;

    if (enter(P))
        return NULL;
    P->depth--;
    if (k->t == T_NAME) {
        static const struct { const char *s; ctkind k; int v; } consts[] = {
            {"true", E_BOOL, 1}, {"True", E_BOOL, 1}, {"false", E_BOOL, 0},
            {"False", E_BOOL, 0}, {"none", E_NONE, 0}, {"None", E_NONE, 0}};
        for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++)
            if (tok_is_name(k, consts[i].s)) {
                if (!(n = mk(P, consts[i].k, k->off)))
                    return NULL;
                n->i = consts[i].v;
                next(P);
                return n;
            }
        if (!(n = mk(P, E_NAME, k->off)))
            return NULL;
        if (!(n->s = tok_name(P)))
            return NULL;
        n->n = strlen(n->s);
        return n;
    }
    if (k->t == T_STR) {
        size_t total = 0, i = P->pos;
        char *s;
        while (P->toks[i].t == T_STR)
            total += P->toks[i++].n;
        if (!(n = mk(P, E_STR, k->off)) || !(s = nvfp4m_ct_alloc(P->ar, total + 1)))
            return oom(P);
        n->s = s;
        n->n = total;
        while (cur(P)->t == T_STR) {
            memcpy(s, cur(P)->p, cur(P)->n);
            s += cur(P)->n;
            next(P);
        }
        return n;
    }
    if (k->t == T_INT || k->t == T_FLOAT) {
        if (!(n = mk(P, k->t == T_INT ? E_INT : E_FLOAT, k->off)))
            return NULL;
        n->i = k->i;
        n->f = k->f;
        next(P);
        return n;
    }
    if (is_op(P, '(')) {
        next(P);
        if (is_op(P, ')')) {
            next(P);
            return mk(P, E_TUPLE, k->off);
        }
        n = parse_tuple(P, 0, 1);
        if (!n || expect_op(P, ')', "')'"))
            return NULL;
        return n;
    }
    if (is_op(P, '[') || is_op(P, '{')) {
        int dict = is_op(P, '{');
        int close = dict ? '}' : ']';
        nvec v = {0};
        if (!(n = mk(P, dict ? E_DICT : E_LIST, k->off)))
            return NULL;
        next(P);
        while (!is_op(P, close)) {
            ctnode *e;
            if (v.n && expect_op(P, ',', dict ? "',' or '}'" : "',' or ']'"))
                return NULL;
            if (is_op(P, close))
                break;
            if (!(e = parse_expression(P)) || nvec_push(P, &v, e, NULL))
                return NULL;
            if (dict) {
                if (expect_op(P, ':', "':'") || !(e = parse_expression(P)) ||
                    nvec_push(P, &v, e, NULL))
                    return NULL;
            }
        }
        next(P);
        n->args = v.v;
        n->nargs = v.n;
        return n;
    }
    return unexpected(P, "an expression");
}

static ctnode *parse_unary(parser *P, int with_filter)
{
    size_t off = cur(P)->off;
    ctnode *e;

    if (enter(P))
        return NULL;
    if (is_op(P, '-') || is_op(P, '+')) {
        ctkind k = is_op(P, '-') ? E_NEG : E_POS;
        next(P);
        e = parse_unary(P, 0);
        if (e) {
            ctnode *n = mk(P, k, off);
            if (n)
                n->a = e;
            e = n;
        }
    } else {
        e = parse_primary(P);
    }
    e = parse_postfix(P, e);
    if (with_filter)
        e = parse_filter_expr(P, e);
    P->depth--;
    return e;
}

static ctnode *parse_pow(parser *P)
{
    ctnode *e = parse_unary(P, 1);
    while (e && is_op(P, OP_POW)) {
        size_t off = cur(P)->off;
        next(P);
        e = mk2(P, E_BIN, off, OP_POW, e, parse_unary(P, 1));
    }
    return e;
}

static ctnode *parse_math2(parser *P)
{
    ctnode *e = parse_pow(P);
    while (e && (is_op(P, '*') || is_op(P, '/') || is_op(P, OP_FLOORDIV) || is_op(P, '%'))) {
        int op = cur(P)->op;
        size_t off = cur(P)->off;
        next(P);
        e = mk2(P, E_BIN, off, op, e, parse_pow(P));
    }
    return e;
}

static ctnode *parse_concat(parser *P)
{
    ctnode *e = parse_math2(P);
    while (e && is_op(P, '~')) {
        size_t off = cur(P)->off;
        next(P);
        e = mk2(P, E_BIN, off, '~', e, parse_math2(P));
    }
    return e;
}

static ctnode *parse_math1(parser *P)
{
    ctnode *e = parse_concat(P);
    while (e && (is_op(P, '+') || is_op(P, '-'))) {
        int op = cur(P)->op;
        size_t off = cur(P)->off;
        next(P);
        e = mk2(P, E_BIN, off, op, e, parse_concat(P));
    }
    return e;
}

/* a < b < c is (a < b) and (b < c), as in Python (b is evaluated twice:
 * expressions have no side effects here). */
static ctnode *parse_compare(parser *P)
{
    ctnode *e = parse_math1(P), *left = e, *chain = NULL;

    for (;;) {
        ctok *k = cur(P);
        size_t off = k->off;
        int op = 0;
        ctnode *right, *c;
        if (!left)
            return NULL;
        if (k->t == T_OP && (k->op == OP_EQ || k->op == OP_NE || k->op == '<' || k->op == '>' ||
                             k->op == OP_LE || k->op == OP_GE)) {
            op = k->op;
            next(P);
        } else if (tok_is_name(k, "in")) {
            op = OP_IN;
            next(P);
        } else if (tok_is_name(k, "not") && tok_is_name(peek(P, 1), "in")) {
            op = OP_NOTIN;
            next(P);
            next(P);
        } else {
            break;
        }
        right = parse_math1(P);
        c = mk2(P, E_CMP, off, op, left, right);
        if (!c)
            return NULL;
        chain = chain ? mk2(P, E_AND, off, 0, chain, c) : c;
        if (!chain)
            return NULL;
        left = right;
    }
    return chain ? chain : e;
}

static ctnode *parse_not(parser *P)
{
    if (is_name(P, "not")) {
        size_t off = cur(P)->off;
        ctnode *e, *n;
        if (enter(P))
            return NULL;
        next(P);
        e = parse_not(P);
        P->depth--;
        if (!e || !(n = mk(P, E_NOT, off)))
            return NULL;
        n->a = e;
        return n;
    }
    return parse_compare(P);
}

static ctnode *parse_and(parser *P)
{
    ctnode *e = parse_not(P);
    while (e && is_name(P, "and")) {
        size_t off = cur(P)->off;
        next(P);
        e = mk2(P, E_AND, off, 0, e, parse_not(P));
    }
    return e;
}

static ctnode *parse_or(parser *P)
{
    ctnode *e = parse_and(P);
    while (e && is_name(P, "or")) {
        size_t off = cur(P)->off;
        next(P);
        e = mk2(P, E_OR, off, 0, e, parse_and(P));
    }
    return e;
}

/* a if cond [else b] (jinja2 parse_condexpr) */
static ctnode *parse_expression(parser *P)
{
    ctnode *e;

    if (enter(P))
        return NULL;
    e = parse_or(P);
    while (e && is_name(P, "if")) {
        ctnode *n = mk(P, E_COND, cur(P)->off);
        if (!n)
            return NULL;
        next(P);
        n->a = e;
        if (!(n->b = parse_or(P)))
            return NULL;
        if (is_name(P, "else")) {
            next(P);
            if (!(n->c = parse_expression(P)))
                return NULL;
        }
        e = n;
    }
    P->depth--;
    return e;
}

/* ---- statements ----------------------------------------------------------- */

static int parse_body(parser *P, nvec *body, const char *const *ends, size_t open_off,
                      const char *opener, int *which);

static ctnode *parse_target(parser *P, int allow_attr)
{
    size_t off = cur(P)->off;
    ctnode *n = mk(P, E_NAME, off);
    nvec v = {0};

    if (!n || !(n->s = tok_name(P)))
        return NULL;
    n->n = strlen(n->s);
    if (allow_attr && is_op(P, '.')) {
        ctnode *a = mk(P, E_ATTR, cur(P)->off);
        if (!a)
            return NULL;
        next(P);
        a->a = n;
        if (!(a->s = tok_name(P)))
            return NULL;
        a->n = strlen(a->s);
        return a;
    }
    if (!is_op(P, ','))
        return n;
    if (nvec_push(P, &v, n, NULL))
        return NULL;
    while (is_op(P, ',')) {
        ctnode *m;
        next(P);
        if (cur(P)->t != T_NAME || is_name(P, "in"))
            break;
        if (!(m = mk(P, E_NAME, cur(P)->off)) || !(m->s = tok_name(P)))
            return NULL;
        m->n = strlen(m->s);
        if (nvec_push(P, &v, m, NULL))
            return NULL;
    }
    if (!(n = mk(P, E_TUPLE, off)))
        return NULL;
    n->args = v.v;
    n->nargs = v.n;
    return n;
}

static int set_body(ctnode *n, const nvec *v, int els)
{
    if (els) {
        n->ebody = v->v;
        n->nebody = v->n;
    } else {
        n->body = v->v;
        n->nbody = v->n;
    }
    return 0;
}

static ctnode *parse_for(parser *P, size_t off)
{
    static const char *const ends1[] = {"endfor", "else", NULL};
    static const char *const ends2[] = {"endfor", NULL};
    ctnode *n = mk(P, N_FOR, off);
    nvec body = {0}, ebody = {0};
    int which;

    if (!n || !(n->a = parse_target(P, 0)))
        return NULL;
    if (!is_name(P, "in"))
        return unexpected(P, "'in'");
    next(P);
    if (!(n->b = parse_or(P)))
        return NULL;
    if (is_name(P, "if")) {
        next(P);
        if (!(n->c = parse_expression(P)))
            return NULL;
    }
    if (is_name(P, "recursive"))
        return fail(P, NVFP4_ERR_UNSUPPORTED, cur(P)->off, "recursive for loops are not supported");
    if (expect_bend(P))
        return NULL;
    P->loops++;
    if (parse_body(P, &body, ends1, off, "for", &which))
        return NULL;
    P->loops--;
    set_body(n, &body, 0);
    if (expect_bend(P))
        return NULL;
    if (which == 1) {
        if (parse_body(P, &ebody, ends2, off, "for", &which) || expect_bend(P))
            return NULL;
        set_body(n, &ebody, 1);
    }
    return n;
}

static ctnode *parse_if(parser *P, size_t off)
{
    static const char *const ends1[] = {"endif", "elif", "else", NULL};
    static const char *const ends2[] = {"endif", NULL};
    ctnode *n = mk(P, N_IF, off);
    nvec body = {0}, ebody = {0};
    int which;

    if (!n || enter(P) || !(n->a = parse_tuple(P, 1, 0)) || expect_bend(P))
        return NULL;
    if (parse_body(P, &body, ends1, off, "if", &which))
        return NULL;
    set_body(n, &body, 0);
    if (which == 1) {
        ctnode *e = parse_if(P, P->toks[P->pos - 1].off);
        if (!e || nvec_push(P, &ebody, e, NULL))
            return NULL;
        set_body(n, &ebody, 1);
    } else {
        if (expect_bend(P))
            return NULL;
        if (which == 2) {
            if (parse_body(P, &ebody, ends2, off, "if", &which) || expect_bend(P))
                return NULL;
            set_body(n, &ebody, 1);
        }
    }
    P->depth--;
    return n;
}

static ctnode *parse_set(parser *P, size_t off)
{
    static const char *const ends[] = {"endset", NULL};
    ctnode *n = mk(P, N_SET, off);
    nvec body = {0};
    int which;

    if (!n || !(n->a = parse_target(P, 1)))
        return NULL;
    if (is_op(P, '=')) {
        next(P);
        if (!(n->b = parse_tuple(P, 0, 0)) || expect_bend(P))
            return NULL;
        return n;
    }
    if (is_op(P, '|'))
        return fail(P, NVFP4_ERR_UNSUPPORTED, cur(P)->off, "filtered block set is not supported");
    if (n->a->kind != E_NAME)
        return unexpected(P, "'='");
    if (expect_bend(P) || parse_body(P, &body, ends, off, "set", &which) || expect_bend(P))
        return NULL;
    n->kind = N_SETBLOCK;
    set_body(n, &body, 0);
    return n;
}

static ctnode *parse_macro(parser *P, size_t off)
{
    static const char *const ends[] = {"endmacro", NULL};
    ctnode *n = mk(P, N_MACRO, off);
    nvec params = {0}, body = {0};
    int which, loops = P->loops;

    if (!n || !(n->s = tok_name(P)))
        return NULL;
    n->n = strlen(n->s);
    if (expect_op(P, '(', "'('"))
        return NULL;
    while (!is_op(P, ')')) {
        char *name;
        ctnode *def = NULL;
        if (params.n && expect_op(P, ',', "',' or ')'"))
            return NULL;
        if (is_op(P, ')'))
            break;
        if (!(name = tok_name(P)))
            return NULL;
        if (is_op(P, '=')) {
            next(P);
            if (!(def = parse_expression(P)))
                return NULL;
        }
        if (nvec_push(P, &params, def, name))
            return NULL;
    }
    next(P);
    if (expect_bend(P))
        return NULL;
    P->loops = 0;
    if (parse_body(P, &body, ends, off, "macro", &which) || expect_bend(P))
        return NULL;
    P->loops = loops;
    n->args = params.v;
    n->names = params.names;
    n->nargs = params.n;
    set_body(n, &body, 0);
    return n;
}

static ctnode *parse_with(parser *P, size_t off)
{
    static const char *const ends[] = {"endwith", NULL};
    ctnode *n = mk(P, N_WITH, off);
    nvec vals = {0}, body = {0};
    int which;

    if (!n)
        return NULL;
    while (cur(P)->t != T_BEND) {
        char *name;
        ctnode *e;
        if (vals.n && expect_op(P, ',', "',' or '%}'"))
            return NULL;
        if (!(name = tok_name(P)) || expect_op(P, '=', "'='") || !(e = parse_expression(P)) ||
            nvec_push(P, &vals, e, name))
            return NULL;
    }
    next(P);
    if (parse_body(P, &body, ends, off, "with", &which) || expect_bend(P))
        return NULL;
    n->args = vals.v;
    n->names = vals.names;
    n->nargs = vals.n;
    set_body(n, &body, 0);
    return n;
}

static ctnode *parse_statement(parser *P)
{
    static const char *const unsupported[] = {
        "call", "filter", "include", "import", "from", "extends", "block", "raw",
        "autoescape", "do", "trans", "print", "debug", "generation", NULL};
    static const char *const closers[] = {
        "endfor", "endif", "elif", "else", "endset", "endmacro", "endwith", "endcall",
        "endfilter", "endblock", "endraw", "endautoescape", "endtrans", "endgeneration", NULL};
    size_t off = cur(P)->off;
    ctnode *n;

    next(P);                          /* '{%' */
    if (cur(P)->t != T_NAME)
        return unexpected(P, "a statement name");
    if (is_name(P, "for")) {
        next(P);
        return parse_for(P, off);
    }
    if (is_name(P, "if")) {
        next(P);
        return parse_if(P, off);
    }
    if (is_name(P, "set")) {
        next(P);
        return parse_set(P, off);
    }
    if (is_name(P, "macro")) {
        next(P);
        return parse_macro(P, off);
    }
    if (is_name(P, "with")) {
        next(P);
        return parse_with(P, off);
    }
    if (is_name(P, "break") || is_name(P, "continue")) {
        int brk = is_name(P, "break");
        if (!P->loops)
            return fail(P, NVFP4_ERR_INVALID, cur(P)->off, "'%s' outside a for loop",
                        brk ? "break" : "continue");
        next(P);
        if (!(n = mk(P, brk ? N_BREAK : N_CONTINUE, off)) || expect_bend(P))
            return NULL;
        return n;
    }
    for (size_t i = 0; unsupported[i]; i++)
        if (is_name(P, unsupported[i]))
            return fail(P, NVFP4_ERR_UNSUPPORTED, cur(P)->off,
                        "the '%s' statement is not supported", unsupported[i]);
    for (size_t i = 0; closers[i]; i++)
        if (is_name(P, closers[i]))
            return fail(P, NVFP4_ERR_INVALID, cur(P)->off, "unexpected '%s'", closers[i]);
    return fail(P, NVFP4_ERR_INVALID, cur(P)->off, "unknown statement '%.*s'",
                (int)(cur(P)->n > 40 ? 40 : cur(P)->n), cur(P)->p);
}

/* Statements up to one of ENDS (NULL: the end of the template).  On return
 * the current token follows the end keyword; *which is its index. */
static int parse_body(parser *P, nvec *body, const char *const *ends, size_t open_off,
                      const char *opener, int *which)
{
    if (enter(P))
        return -1;
    for (;;) {
        ctok *k = cur(P);
        ctnode *n;
        if (k->t == T_EOF) {
            if (!ends)
                break;
            fail(P, NVFP4_ERR_INVALID, open_off, "this '%s' is not closed (no '%s')", opener,
                 ends[0]);
            return -1;
        }
        if (k->t == T_DATA) {
            if (!(n = mk(P, N_TEXT, k->off)))
                return -1;
            n->s = k->p;
            n->n = k->n;
            next(P);
        } else if (k->t == T_VBEGIN) {
            if (!(n = mk(P, N_OUTPUT, k->off)))
                return -1;
            next(P);
            if (!(n->a = parse_tuple(P, 0, 0)))
                return -1;
            if (cur(P)->t != T_VEND) {
                unexpected(P, "'}}'");
                return -1;
            }
            next(P);
        } else if (k->t == T_BBEGIN) {
            ctok *kw = peek(P, 1);
            for (int i = 0; ends && ends[i]; i++)
                if (tok_is_name(kw, ends[i])) {
                    next(P);
                    next(P);
                    *which = i;
                    P->depth--;
                    return 0;
                }
            if (!(n = parse_statement(P)))
                return -1;
        } else {
            unexpected(P, "template text or a tag");
            return -1;
        }
        if (nvec_push(P, body, n, NULL))
            return -1;
    }
    P->depth--;
    return 0;
}

nvfp4_status nvfp4m_ct_parse(nvfp4_chat_template *t, nvfp4_error *err)
{
    parser P = {0};
    nvec body = {0};
    int which;

    P.t = t;
    P.err = err;
    P.ar = &t->arena;
    if (lex(&P) == 0 && parse_body(&P, &body, NULL, 0, NULL, &which) == 0) {
        t->body = body.v;
        t->nbody = body.n;
    }
    free(P.toks);
    if (!P.failed)
        return NVFP4_OK;
    return P.st;
}
