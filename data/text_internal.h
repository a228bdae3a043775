/* text_internal.h — pieces shared by the text files of data/ (not installed): UTF-8, the
 * character classes and the basic tokenizer (text_unicode.c), a string table (text_strtab.c),
 * and the tokenizer's private struct.
 */
#ifndef MPX_DATA_TEXT_INTERNAL_H
#define MPX_DATA_TEXT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "mpx/error.h"
#include "mpx/text.h"

/* ---- UTF-8 (text_unicode.c) ---- */

/* Decode one code point from p[0..n) (n >= 1). Strict: no overlong forms, no surrogates,
 * nothing above U+10FFFF. Returns its length in bytes, or 0 when p does not start a valid
 * sequence. */
int mpx_utf8_decode(const uint8_t *p, size_t n, uint32_t *cp);
/* Offset of the first byte that does not start a valid sequence, or n when all is valid. */
size_t mpx_utf8_check(const uint8_t *p, size_t n);
/* Encode cp (valid) into out; returns the length (1..4). */
int mpx_utf8_encode(uint32_t cp, char out[4]);

/* ---- the basic tokenizer (BERT's BasicTokenizer, uncased) ---- */

typedef enum {
    MPX_CH_WORD,  /* part of a word */
    MPX_CH_SPACE, /* separates words (removed) */
    MPX_CH_DROP,  /* removed without separating: NUL, U+FFFD, control and format characters */
    MPX_CH_PUNCT, /* a one-character word: punctuation, and each CJK ideograph */
} mpx_char_class;

mpx_char_class mpx_text_char_class(uint32_t cp);
/* Simple (one code point to one) lower-case mapping. */
uint32_t mpx_text_lower(uint32_t cp);
/* cp as a word of BERT uncased holds it: lower-cased, canonically decomposed, nonspacing marks
 * (Mn) dropped; returns the number of code points written to out (0: cp was only a mark). */
enum { MPX_FOLD_MAX = 8 };
int mpx_text_fold(uint32_t cp, uint32_t out[MPX_FOLD_MAX]);
/* The Unicode version of the character classes and mappings (utf8proc's). */
const char *mpx_text_unicode_version(void);

/* Longer words are [UNK], as BERT's max_input_chars_per_word. */
enum { MPX_WORD_MAX_CHARS = 100, MPX_WORD_BUF = 4 * MPX_WORD_MAX_CHARS + 8 };

typedef struct {
    char bytes[MPX_WORD_BUF]; /* lower-cased UTF-8, NUL-terminated (empty when too long) */
    size_t len;               /* bytes */
    int chars;                /* code points (MPX_WORD_MAX_CHARS + 1 when too long) */
    int punct;                /* 1: a single punctuation / CJK character */
    const uint8_t *src, *src_end; /* the word in the text (before lower-casing) */
} mpx_word;

/* Iterates over the words of valid UTF-8 text. */
typedef struct {
    const uint8_t *p, *end;
} mpx_word_iter;

static inline mpx_word_iter mpx_word_iter_make(const char *text, size_t len) {
    mpx_word_iter it = {(const uint8_t *)text, (const uint8_t *)text + len};
    return it;
}
/* Next word into *w; 0 at the end of the text. The text must be valid UTF-8. */
int mpx_word_next(mpx_word_iter *it, mpx_word *w);

/* ---- string table: strings <-> dense ids 0..n-1 (text_strtab.c) ---- */

typedef struct {
    char *bytes; /* every string NUL-terminated, back to back */
    size_t nbytes, capbytes;
    size_t *off;     /* [n] offset of string id in bytes */
    uint32_t *len;   /* [n] */
    uint32_t *hash;  /* [n] */
    int32_t n, cap;
    int32_t *slots;  /* open addressing: id or -1; nslots is a power of two > 2n */
    size_t nslots;
} mpx_strtab;

void mpx_strtab_free(mpx_strtab *t);
/* The id of s[0..len), or -1. */
int32_t mpx_strtab_find(const mpx_strtab *t, const char *s, size_t len);
/* The id of s[0..len), added when new (*added = 1, may be NULL). */
mpx_status mpx_strtab_add(mpx_strtab *t, const char *s, size_t len, int32_t *id, int *added);
static inline const char *mpx_strtab_str(const mpx_strtab *t, int32_t id) {
    return t->bytes + t->off[id];
}

/* ---- the tokenizer (text_tokenizer.c) ---- */

struct mpx_tokenizer {
    mpx_strtab tok;                    /* id <-> token */
    int32_t special[MPX_TOK_NSPECIAL]; /* ids of [PAD] [UNK] [CLS] [SEP] [MASK] */
    size_t max_len;                    /* longest token in bytes, "##" not counted */
};

/* An empty tokenizer (no tokens, specials unset), for the trainer to fill. */
mpx_status mpx_tokenizer_alloc(mpx_tokenizer **out);
/* After the tokens are in: find the special tokens' ids (MPX_ERR_INPUT naming `what` when
 * one is missing) and the longest token. */
mpx_status mpx_tokenizer_finish(mpx_tokenizer *t, const char *what);
/* WordPiece of one word (greedy longest match first, "##" continuations) appended to out;
 * one [UNK] when the word is too long or cannot be covered. */
mpx_status mpx_tokenizer_encode_word(const mpx_tokenizer *t, const mpx_word *w,
                                     mpx_token_buf *out);
mpx_status mpx_token_buf_push(mpx_token_buf *b, int32_t id);

#endif
