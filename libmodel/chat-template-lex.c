/* SPDX-License-Identifier: MIT */
/*
 * chat-template-lex.c - the arena and the lexer of the Jinja2 subset.  The
 * lexer reproduces jinja2 3.1's rules under the settings of transformers'
 * apply_chat_template (trim_blocks, lstrip_blocks): "{%-" and "{{-" strip
 * all whitespace before the tag, "-%}" / "-}}" all after it, "{%+" keeps
 * it; a block or comment tag alone on its line loses the indentation before
 * it and "%}" / "#}" eat one newline after it.  String literals decode as
 * Python's unicode-escape codec does.
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
    if (a->cap && (n > a->cap || a->used > a->cap - n)) {
        a->over = 1;
        return NULL;
    }
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

void *nvfp4m_ct_pfail(parser *P, nvfp4_status st, size_t off, const char *fmt, ...)
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

void *nvfp4m_ct_poom(parser *P)
{
    return nvfp4m_ct_pfail(P, NVFP4_ERR_NOMEM, 0, "out of memory parsing the template");
}

static int push(parser *P, int type, size_t off, const char *p, size_t n)
{
    ctok *k;

    if (P->ntoks == P->cap) {
        size_t nc = P->cap ? 2 * P->cap : 256;
        ctok *nt = nc > SIZE_MAX / sizeof *nt ? NULL : realloc(P->toks, nc * sizeof *nt);
        if (!nt) {
            nvfp4m_ct_poom(P);
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
        nvfp4m_ct_pfail(P, NVFP4_ERR_INVALID, start, "unterminated string literal");
        return -1;
    }
    out = o = nvfp4m_ct_alloc(P->ar, i - start + 1);
    if (!out) {
        nvfp4m_ct_poom(P);
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
            nvfp4m_ct_pfail(P, NVFP4_ERR_UNSUPPORTED, j - 1,
                            "the \\N{...} string escape is not supported");
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
                nvfp4m_ct_pfail(P, NVFP4_ERR_INVALID, j - 1,
                                "truncated \\%c escape in a string literal", c);
                return -1;
            }
            cp = cp * 16 + (uint32_t)h;
            j++;
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            nvfp4m_ct_pfail(P, NVFP4_ERR_INVALID, start,
                            "string escape of an invalid code point U+%X", cp);
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
        nvfp4m_ct_pfail(P, NVFP4_ERR_UNSUPPORTED, start, "number literal too long");
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
            nvfp4m_ct_pfail(P, NVFP4_ERR_UNSUPPORTED, start,
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
            nvfp4m_ct_pfail(P, NVFP4_ERR_INVALID, tag,
                            "unexpected end of template: this %s is not closed",
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
                nvfp4m_ct_pfail(P, NVFP4_ERR_INVALID, i, "unexpected character '%c' in a tag",
                                s[i]);
                return -1;
            }
            if (op == '(' || op == '[' || op == '{')
                depth++;
            else if (op == ')' || op == ']' || op == '}') {
                if (depth == 0) {
                    nvfp4m_ct_pfail(P, NVFP4_ERR_INVALID, i, "unexpected '%c'", s[i]);
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

int nvfp4m_ct_lex(parser *P)
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
                nvfp4m_ct_pfail(P, NVFP4_ERR_INVALID, q,
                                "unterminated comment: no '#}' after this '{#'");
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
