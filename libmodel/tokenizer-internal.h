/* SPDX-License-Identifier: MIT */
/* Pieces of the tokenizer shared by tokenizer.c (loading, BPE, the public
 * API) and tokenizer-split.c (the pre-tokenizer: PCRE2 regex splits, added
 * token matching, UTF-8).  Not exported.
 *
 * The reference behaviour throughout is the Hugging Face `tokenizers` crate
 * (tokenizer/added_vocabulary.rs, tokenizer/normalizer.rs split behaviours,
 * pre_tokenizers/{byte_level,split,digits}.rs, models/bpe/{model,word}.rs);
 * comments name the function whose semantics a piece of code reproduces. */
#ifndef NVFP4_TOKENIZER_INTERNAL_H
#define NVFP4_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nvfp4/model.h>

/* A byte range of text that lives at least as long as the encode call. */
typedef struct {
    const char *p;
    size_t n;
    int32_t id;       /* an added token's id, or -1 for text still to split */
    int first;        /* it starts where the text starts (offsets_original().0
                       * == 0, which Metaspace's prepend_scheme "first" asks) */
} tk_piece;

typedef struct {
    tk_piece *v;
    size_t n, cap;
} tk_pieces;

/* Appends a piece with first = 0. */
int nvfp4m_tk_pieces_push(tk_pieces *ps, const char *p, size_t n, int32_t id);

/* Bump allocator for strings made during one encode (prefix spaces);
 * blocks never move, so pieces may point into them. */
typedef struct tk_block tk_block;
typedef struct {
    tk_block *head;
} tk_arena;

char *nvfp4m_tk_arena_alloc(tk_arena *a, size_t n);
void nvfp4m_tk_arena_free(tk_arena *a);

/* The NFC normalizer (normalizers/unicode.rs) through ICU: S itself when it
 * is already NFC, else a normalized copy in ARENA.  0, or -1 with msg set
 * (also when the library was built without ICU). */
int nvfp4m_tk_nfc(const char *s, size_t n, tk_arena *arena, const char **out, size_t *outn,
           char *msg, size_t msgsize);

/* tokenizers' SplitDelimiterBehavior. */
typedef enum {
    TK_REMOVED = 0,
    TK_ISOLATED,
    TK_MERGED_WITH_PREVIOUS,
    TK_MERGED_WITH_NEXT,
    TK_CONTIGUOUS,
} tk_behavior;

typedef enum { TK_PT_SPLIT = 0, TK_PT_BYTELEVEL, TK_PT_METASPACE } tk_pt_kind;

/* Metaspace's PrependScheme. */
typedef enum { TK_PREPEND_ALWAYS = 0, TK_PREPEND_FIRST, TK_PREPEND_NEVER } tk_prepend;

/* One pre-tokenizer step.  Digits is a Split on \p{N} (Isolated when
 * individual_digits, else Contiguous), which is what digits.rs does with
 * char::is_numeric (general categories Nd, Nl, No = \p{N}).  Metaspace
 * (pre_tokenizers/metaspace.rs) replaces every ' ' by its replacement
 * character, prepends one per its scheme and, when split, splits before
 * each replacement character (MergedWithNext on the literal RE). */
typedef struct {
    tk_pt_kind kind;
    pcre2_code *re;       /* Split pattern, the GPT-2 regex of ByteLevel, or
                           * Metaspace's replacement as a literal (split) */
    tk_behavior behavior;
    int invert;
    int add_prefix_space; /* ByteLevel */
    int use_regex;        /* ByteLevel */
    char repl[4];         /* Metaspace: the replacement character (UTF-8) */
    size_t repl_len;
    tk_prepend prepend;
    int split;
    char where[160];      /* its JSON path, to name it in errors */
} tk_pretok;

/* The regex work one encode may do (tokenizer-split.c): a pattern that
 * backtracks catastrophically stays under PCRE2's per-call limit yet can
 * take minutes over a long text, so the calls of one encode share a total,
 * TK_BUDGET_BASE + TK_BUDGET_PER_BYTE steps per byte of text, and each call
 * is held to TK_CALL_MAX.  PCRE2 reports no step count, so a call runs
 * under a limit of TK_PROBE first, then four times more until it is done,
 * and is charged the limits it ran under (at most 4/3 of its true cost
 * above the probe). */
#define TK_PROBE 128u
#define TK_CALL_MAX 10000000u
#define TK_BUDGET_BASE (UINT64_C(1) << 22)
#define TK_BUDGET_PER_BYTE UINT64_C(2048)
typedef struct {
    pcre2_match_context *mc;
    uint64_t total, left;
    int exhausted;
} tk_budget;

/* Compile a tokenizers (Oniguruma syntax) pattern for PCRE2; LITERAL for
 * SplitPattern::String.  NULL with *msg set on error (msg: static or buf). */
pcre2_code *nvfp4m_tk_regex_compile(const char *pattern, size_t len, int literal,
                             char *buf, size_t bufsize);

/* Split every piece of IN (id < 0 only; added tokens pass through) by one
 * pre-tokenizer step, appending to OUT.  0 or -1 (out of memory, or a PCRE2
 * failure described in msg). */
int nvfp4m_tk_pretok_apply(const tk_pretok *pt, const tk_pieces *in, tk_pieces *out,
                    tk_arena *arena, pcre2_match_data *md, tk_budget *bud, char *msg,
                    size_t msgsize);

/* Added tokens of one kind (normalized or not), for leftmost-longest matching
 * (the daachorse MatchKind::LeftmostLongest automaton of added_vocabulary.rs). */
typedef struct {
    const char *content;
    size_t len;
    int32_t id;
    int single_word, lstrip, rstrip;
    int special, normalized;
    size_t off;          /* of content in the tokenizer's string pool */
    size_t match_off, match_len;  /* what is matched: content, normalized
                                   * when the token is (normalized_cache) */
} tk_added;

typedef struct {
    tk_added *v;         /* sorted by first byte, then longest first */
    size_t n;
    size_t first[257];   /* v[first[b] .. first[b+1]) start with byte b */
    pcre2_code *word_re; /* one char of Rust regex \w (single_word) */
    pcre2_code *space_re;/* one char of Rust regex \s (lstrip, rstrip) */
} tk_added_set;

/* Takes ownership of TOKENS (malloc'ed); 0, or -1 with msg set. */
int nvfp4m_tk_added_set_build(tk_added_set *set, tk_added *tokens, size_t n, char *msg,
                       size_t msgsize);
void nvfp4m_tk_added_set_free(tk_added_set *set);

/* AddedVocabulary::find_matches on one piece: append token pieces (id >= 0)
 * and the text between them (id -1) to OUT; the text piece at offset 0 of
 * S gets the flag FIRST. */
int nvfp4m_tk_added_split(const tk_added_set *set, const char *s, size_t n, int first,
                          tk_pieces *out, pcre2_match_data *md);

/* Offset of the first invalid UTF-8 byte (Rust str rules), or len if valid. */
size_t nvfp4m_tk_utf8_check(const unsigned char *s, size_t len);
/* Append the bytes of S as String::from_utf8_lossy would (U+FFFD for each
 * maximal invalid subpart).  dst must hold 3 * len bytes. Returns length. */
size_t nvfp4m_tk_utf8_lossy(const unsigned char *s, size_t len, char *dst);

#endif
