/* SPDX-License-Identifier: MIT */
/*
 * chat-template-internal.h - the Jinja2 subset behind nvfp4_chat_template:
 * an arena, the syntax tree (chat-template-parse.c builds it) and the entry
 * of the evaluator (chat-template-eval.c).
 */
#ifndef NVFP4_CHAT_TEMPLATE_INTERNAL_H
#define NVFP4_CHAT_TEMPLATE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <nvfp4/model.h>

/* ---- arena: every node, string and value lives in one, freed at once ---- */

typedef struct ctchunk ctchunk;
typedef struct {
    ctchunk *head;
    size_t used;              /* bytes handed out, all chunks */
    size_t cap;               /* refuse beyond this (0: unbounded) */
    int over;                 /* a request was refused for the cap */
} ctarena;

void *nvfp4m_ct_alloc(ctarena *a, size_t n);      /* zeroed; NULL when over cap */
char *nvfp4m_ct_strdup(ctarena *a, const char *s, size_t n);
void nvfp4m_ct_arena_free(ctarena *a);

/* ---- syntax tree ---- */

typedef enum {
    /* statements */
    N_TEXT, N_OUTPUT, N_FOR, N_IF, N_SET, N_SETBLOCK, N_MACRO, N_BREAK, N_CONTINUE,
    N_WITH,
    /* expressions */
    E_STR, E_INT, E_FLOAT, E_BOOL, E_NONE, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL,
    E_FILTER, E_TEST, E_BIN, E_NEG, E_POS, E_NOT, E_AND, E_OR, E_COND, E_LIST,
    E_TUPLE, E_DICT, E_CMP
} ctkind;

/* Operators (tokens and E_BIN / E_CMP nodes): one-character ones are the
 * character itself. */
enum {
    OP_FLOORDIV = 256, OP_POW, OP_EQ, OP_NE, OP_LE, OP_GE, OP_IN, OP_NOTIN
};

typedef struct ctnode ctnode;
struct ctnode {
    ctkind kind;
    size_t off;               /* byte offset in the (normalised) source */
    int op;                   /* E_BIN/E_CMP operator; E_TEST: 1 = negated */
    const char *s;            /* text, string constant, name, attribute, filter, test */
    size_t n;
    long long i;
    double f;
    ctnode *a, *b, *c;        /* operands / for: target, iter, filter / if: cond */
    ctnode **args;            /* items, call arguments, macro defaults, targets */
    const char **names;       /* keyword names parallel to args (NULL: positional) */
    size_t nargs;
    ctnode **body, **ebody;   /* statement lists (ebody: else branch) */
    size_t nbody, nebody;
};

struct nvfp4_chat_template {
    ctarena arena;
    char *src;                /* normalised source (newlines \n, no trailing one) */
    size_t len;
    char *name;               /* for error messages, may be NULL */
    ctnode **body;
    size_t nbody;
    char *defaults_json;      /* variables from tokenizer_config.json, may be NULL */
};

/* Parse into T (src/len/name set); 0 or an error. */
nvfp4_status nvfp4m_ct_parse(nvfp4_chat_template *t, nvfp4_error *err);

/* Render with the variables of the JSON object VARS (a json_t *). */
char *nvfp4m_ct_render(const nvfp4_chat_template *t, void *vars,
                       const nvfp4_chat_options *opt, size_t *len, nvfp4_error *err);

/* "NAME: line L, column C: " prefix in err (file = name). */
nvfp4_status nvfp4m_ct_error(nvfp4_error *err, nvfp4_status st, const char *name,
                             const char *src, size_t off, const char *fmt, ...)
    NVFP4_PRINTF(6, 7);

/* ---- lexer -> parser (chat-template-lex.c, chat-template-parse.c) ---- */

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

void *nvfp4m_ct_pfail(parser *P, nvfp4_status st, size_t off, const char *fmt, ...)
    NVFP4_PRINTF(4, 5);
void *nvfp4m_ct_poom(parser *P);
int nvfp4m_ct_lex(parser *P);

/* ---- values (chat-template-eval.c, chat-template-builtins.c) ---- */

typedef enum {
    CV_UNDEF, CV_NONE, CV_BOOL, CV_INT, CV_FLOAT, CV_STR, CV_LIST, CV_DICT, CV_NS,
    CV_LOOP, CV_MACRO, CV_METHOD, CV_FUNC
} cvtype;

typedef struct cval cval;
typedef struct clist clist;
typedef struct cdict cdict;
typedef struct cloop cloop;
typedef struct cmethod cmethod;
typedef struct ctframe ctframe;

struct cval {
    unsigned char t;
    unsigned char tuple;      /* CV_LIST: a Python tuple */
    union {
        long long i;          /* BOOL, INT */
        double f;
        struct {
            const char *p;    /* STR text; UNDEF: the missing name */
            size_t n;
        } s;
        clist *l;
        cdict *d;             /* DICT, NS (mutable) */
        cloop *loop;
        struct cmacro *mac;   /* MACRO */
        cmethod *bm;
        int fn;               /* FUNC */
    } u;
};
struct clist {
    size_t n;
    cval *v;
};
struct cdict {
    size_t n, cap;
    cval *k, *v;              /* keys are strings */
};
struct cloop {
    const clist *items;
    size_t i;
};
struct cmacro {
    const ctnode *m;          /* the macro statement */
    ctframe *closure;         /* the scope it was defined in */
};
struct cmethod {
    cval self;
    int id;
};

typedef struct {
    char *p;
    size_t n, cap;
} cbuf;

typedef struct {
    const nvfp4_chat_template *t;
    nvfp4_error *err;
    ctarena ar;
    size_t steps, max_steps, max_output;
    int depth, max_depth, ctl, failed;
    int edepth;               /* nesting of expression evaluation */
    int64_t now;
    ctframe *root;
} ctctx;

/* argument list of a call */
typedef struct {
    size_t n;
    cval *v;
    const char **names;       /* NULL entries: positional */
} cargs;

int nvfp4m_ct_fail(ctctx *C, const ctnode *at, nvfp4_status st, const char *fmt, ...)
    NVFP4_PRINTF(4, 5);
int nvfp4m_ct_step(ctctx *C, const ctnode *at, size_t n);
int nvfp4m_ct_nomem(ctctx *C, const ctnode *at);
int nvfp4m_ct_put(ctctx *C, const ctnode *at, cbuf *b, const char *s, size_t n);
int nvfp4m_ct_write(ctctx *C, const ctnode *at, cbuf *b, const cval *v, int repr, int depth);
int nvfp4m_ct_to_str(ctctx *C, const ctnode *at, const cval *v, cval *out);
int nvfp4m_ct_truthy(const cval *v);
int nvfp4m_ct_eq(ctctx *C, const ctnode *at, const cval *a, const cval *b, int *res);
int nvfp4m_ct_cmp(ctctx *C, const ctnode *at, int op, const cval *a, const cval *b, cval *out);
int nvfp4m_ct_getattr(ctctx *C, const ctnode *at, const cval *obj, const char *name, size_t n,
                      cval *out);
int nvfp4m_ct_getitem(ctctx *C, const ctnode *at, const cval *obj, const cval *key, cval *out);
int nvfp4m_ct_iter(ctctx *C, const ctnode *at, const cval *v, clist **out);
int nvfp4m_ct_str(ctctx *C, const char *p, size_t n, cval *out);   /* copies */
int nvfp4m_ct_dict_set(ctctx *C, cdict *d, const cval *k, const cval *v);
const cval *nvfp4m_ct_dict_get(const cdict *d, const char *k, size_t n);
int nvfp4m_ct_call_macro(ctctx *C, const ctnode *at, const struct cmacro *mac, const cargs *a,
                         cval *out);
const char *nvfp4m_ct_type(const cval *v);
int nvfp4m_ct_undef_error(ctctx *C, const ctnode *at, const cval *v);

/* shared by chat-template-value.c and chat-template-eval.c */
struct ctframe {
    ctframe *parent;
    size_t n, cap;
    const char **names;
    size_t *lens;
    cval *vals;
};

void *nvfp4m_ct_new(ctctx *C, const ctnode *at, size_t n);
int nvfp4m_ct_buf_value(ctctx *C, cbuf *b, cval *out);
cval nvfp4m_ct_undef(const char *name, size_t n);
ctframe *nvfp4m_ct_frame_new(ctctx *C, const ctnode *at, ctframe *parent);
int nvfp4m_ct_frame_set(ctctx *C, const ctnode *at, ctframe *f, const char *name, size_t n,
                        const cval *v);
const cval *nvfp4m_ct_frame_get(const ctframe *f, const char *name, size_t n);
int nvfp4m_ct_is_num(const cval *v);
double nvfp4m_ct_num(const cval *v);
int nvfp4m_ct_do_slice(ctctx *C, const ctnode *at, const cval *obj, const cval *sv, cval *out);

/* builtins (chat-template-builtins.c) */
int nvfp4m_ct_filter(ctctx *C, const ctnode *at, const char *name, const cval *v,
                     const cargs *a, cval *out);
int nvfp4m_ct_test(ctctx *C, const ctnode *at, const char *name, const cval *v,
                   const cargs *a, int *res);
int nvfp4m_ct_method(ctctx *C, const ctnode *at, const cmethod *m, const cargs *a, cval *out);
int nvfp4m_ct_method_id(const cval *self, const char *name, size_t n);   /* -1: none */
int nvfp4m_ct_global(const char *name, size_t n);                       /* -1: none */
int nvfp4m_ct_call_global(ctctx *C, const ctnode *at, int fn, const cargs *a, cval *out);
int nvfp4m_ct_known_filter(const char *name);
int nvfp4m_ct_known_test(const char *name);
/* helpers shared by chat-template-builtins.c and chat-template-methods.c */
int nvfp4m_ct_fail_arg(ctctx *C, const ctnode *at, const char *fn, const char *what);
const cval *nvfp4m_ct_arg(const cargs *a, size_t pos, const char *name);
size_t nvfp4m_ct_npositional(const cargs *a);
cval nvfp4m_ct_mkint(long long i);
cval nvfp4m_ct_mkbool(int b);
cval nvfp4m_ct_mkstrv(const char *p, size_t n);
clist *nvfp4m_ct_list_new(ctctx *C, const ctnode *at, size_t n);
cval nvfp4m_ct_listv(clist *l, int tuple);
int nvfp4m_ct_need_str(ctctx *C, const ctnode *at, const cval *v, const char *fn);
size_t nvfp4m_ct_ws_len(const char *s, size_t n);
cval nvfp4m_ct_do_strip(const cval *s, const cval *chars, int left, int right);
int nvfp4m_ct_is_cased(char c);
int nvfp4m_ct_case_map(ctctx *C, const ctnode *at, const cval *s, int mode, cval *out);
long long nvfp4m_ct_find_ll(const cval *hay, const cval *needle, size_t from);
int nvfp4m_ct_replace(ctctx *C, const ctnode *at, const cval *s, const cval *old, const cval *new,
                      long long count, cval *out);
int nvfp4m_ct_list_push(ctctx *C, const ctnode *at, clist *l, size_t *cap, const cval *v);
int nvfp4m_ct_split(ctctx *C, const ctnode *at, const cval *s, const cval *sep, long long maxsplit,
                    cval *out);

#endif
