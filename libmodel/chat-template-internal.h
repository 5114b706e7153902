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
        const ctnode *m;      /* MACRO */
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
struct cmethod {
    cval self;
    int id;
};

typedef struct {
    char *p;
    size_t n, cap;
} cbuf;

typedef struct ctframe ctframe;
typedef struct {
    const nvfp4_chat_template *t;
    nvfp4_error *err;
    ctarena ar;
    size_t steps, max_steps, max_output;
    int depth, max_depth, ctl, failed;
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
int nvfp4m_ct_call_macro(ctctx *C, const ctnode *at, const ctnode *m, const cargs *a, cval *out);
const char *nvfp4m_ct_type(const cval *v);
int nvfp4m_ct_undef_error(ctctx *C, const ctnode *at, const cval *v);

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

#endif
