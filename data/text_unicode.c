/* text_unicode.c — UTF-8 and BERT's basic tokenizer (uncased) on utf8proc: what separates words,
 * what is removed, what is punctuation, lower-casing and accent stripping, with the classes of
 * BERT's BasicTokenizer taken from utf8proc's Unicode tables (their version:
 * mpx_text_unicode_version, pinned by tests/unit/test_text_tokenizer.c):
 *   removed   NUL, U+FFFD, control/format characters (Cc, Cf) other than \t \n \r
 *   space     ' ', \t, \n, \r, Zs; also Zl/Zp (U+2028/9), which BERT would keep inside words
 *             and which would break a line-based vocab.txt
 *   one-char  punctuation (ASCII non-alphanumeric symbols and Unicode P*) and CJK ideographs
 *   word      everything else, lower-cased (simple case mapping) and with accents stripped as
 *             BERT uncased does: each character's canonical decomposition (NFD) without its
 *             nonspacing marks (Mn). */
#include <stddef.h>
#include <stdint.h>
#include <utf8proc.h>

#include "data/text_internal.h"

int mpx_utf8_decode(const uint8_t *p, size_t n, uint32_t *cp) {
    if (p[0] < 0x80) { /* the common case */
        *cp = p[0];
        return 1;
    }
    utf8proc_int32_t c;
    const utf8proc_ssize_t k = utf8proc_iterate(p, n > 4 ? 4 : (utf8proc_ssize_t)n, &c);
    if (k <= 0) return 0;
    *cp = (uint32_t)c;
    return (int)k;
}

size_t mpx_utf8_check(const uint8_t *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) { /* ASCII runs are the common case */
            i++;
            continue;
        }
        uint32_t cp;
        int k = mpx_utf8_decode(p + i, n - i, &cp);
        if (k == 0) return i;
        i += (size_t)k;
    }
    return n;
}

int mpx_utf8_encode(uint32_t cp, char out[4]) {
    return (int)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)out);
}

const char *mpx_text_unicode_version(void) { return utf8proc_unicode_version(); }

/* BERT's _is_chinese_char: the CJK Unified Ideographs blocks (not Hiragana/Katakana/Hangul). */
static int is_cjk(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

mpx_char_class mpx_text_char_class(uint32_t cp) {
    if (cp < 0x80) {
        if (cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r') return MPX_CH_SPACE;
        if (cp < 0x20 || cp == 0x7F) return MPX_CH_DROP;
        int alnum = (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
        return alnum ? MPX_CH_WORD : MPX_CH_PUNCT; /* BERT: every ASCII symbol is punctuation */
    }
    if (cp == 0xFFFD) return MPX_CH_DROP;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF: return MPX_CH_DROP;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: return MPX_CH_SPACE;
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: return MPX_CH_PUNCT;
    default: return is_cjk(cp) ? MPX_CH_PUNCT : MPX_CH_WORD;
    }
}

uint32_t mpx_text_lower(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    return (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
}

int mpx_text_fold(uint32_t cp, uint32_t out[MPX_FOLD_MAX]) {
    const uint32_t low = mpx_text_lower(cp);
    if (low < 0x80) {
        out[0] = low;
        return 1;
    }
    utf8proc_int32_t d[MPX_FOLD_MAX];
    int last = 0;
    const utf8proc_ssize_t k =
        utf8proc_decompose_char((utf8proc_int32_t)low, d, MPX_FOLD_MAX, UTF8PROC_DECOMPOSE, &last);
    if (k <= 0 || k > MPX_FOLD_MAX) { /* (no canonical decomposition is that long) */
        out[0] = low;
        return utf8proc_category((utf8proc_int32_t)low) == UTF8PROC_CATEGORY_MN ? 0 : 1;
    }
    int n = 0;
    for (utf8proc_ssize_t i = 0; i < k; i++)
        if (utf8proc_category(d[i]) != UTF8PROC_CATEGORY_MN) out[n++] = (uint32_t)d[i];
    return n;
}

/* Append cp to the word as BERT uncased stores it: lower-cased, accents stripped. */
static void word_append(mpx_word *w, uint32_t cp) {
    uint32_t f[MPX_FOLD_MAX];
    const int n = mpx_text_fold(cp, f);
    for (int i = 0; i < n; i++) {
        w->chars++;
        if (w->chars <= MPX_WORD_MAX_CHARS) w->len += (size_t)mpx_utf8_encode(f[i], w->bytes + w->len);
    }
}

int mpx_word_next(mpx_word_iter *it, mpx_word *w) {
    w->len = 0;
    w->chars = 0;
    w->punct = 0;
    uint32_t cp = 0;
    int k = 0;
    mpx_char_class cls = MPX_CH_SPACE;
    for (; it->p < it->end; it->p += k) { /* skip separators */
        k = mpx_utf8_decode(it->p, (size_t)(it->end - it->p), &cp);
        if (k == 0) { /* not reached for validated text; drop the byte */
            k = 1;
            continue;
        }
        cls = mpx_text_char_class(cp);
        if (cls == MPX_CH_WORD || cls == MPX_CH_PUNCT) break;
    }
    if (it->p >= it->end) return 0;
    w->src = it->p;
    if (cls == MPX_CH_PUNCT) {
        it->p += k;
        word_append(w, cp);
        w->bytes[w->len] = '\0';
        w->punct = 1;
        w->src_end = it->p;
        return 1;
    }
    for (; it->p < it->end; it->p += k) {
        k = mpx_utf8_decode(it->p, (size_t)(it->end - it->p), &cp);
        if (k == 0) {
            k = 1;
            continue;
        }
        cls = mpx_text_char_class(cp);
        if (cls == MPX_CH_SPACE || cls == MPX_CH_PUNCT) break;
        if (cls == MPX_CH_WORD) word_append(w, cp); /* MPX_CH_DROP: removed */
    }
    w->src_end = it->p;
    if (w->chars > MPX_WORD_MAX_CHARS) {
        w->len = 0;
        w->chars = MPX_WORD_MAX_CHARS + 1;
    }
    w->bytes[w->len] = '\0';
    return 1;
}
