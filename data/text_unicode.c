/* text_unicode.c — UTF-8 decoding and BERT's basic tokenizer (uncased): what separates words,
 * what is removed, what is punctuation, lower-casing. The Unicode tables are generated from
 * Python's unicodedata (text_unicode_gen.py) so the classes are BERT's:
 *   removed   NUL, U+FFFD, control/format characters (Cc, Cf) other than \t \n \r
 *   space     ' ', \t, \n, \r, Zs; also Zl/Zp (U+2028/9), which BERT would keep inside words
 *             and which would break a line-based vocab.txt
 *   one-char  punctuation (ASCII non-alphanumeric symbols and Unicode P*) and CJK ideographs
 *   word      everything else, lower-cased with str.lower()'s one-to-one mappings
 * Not done: BERT uncased also strips accents (NFD, drop Mn), which needs decomposition tables;
 * accented letters stay as they are here. */
#include <stddef.h>
#include <stdint.h>

#include "data/text_internal.h"
#include "data/text_unicode_tables.h"

int mpx_utf8_decode(const uint8_t *p, size_t n, uint32_t *cp) {
    uint8_t b0 = p[0];
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    int len;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        len = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3;
        if (b0 == 0xE0) lo = 0xA0; /* overlong */
        if (b0 == 0xED) hi = 0x9F; /* surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4;
        if (b0 == 0xF0) lo = 0x90; /* overlong */
        if (b0 == 0xF4) hi = 0x8F; /* above U+10FFFF */
    } else {
        return 0; /* continuation byte, overlong C0/C1, or F5..FF */
    }
    if (n < (size_t)len || p[1] < lo || p[1] > hi) return 0;
    uint32_t v = b0 & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (p[i] & 0x3F);
    }
    *cp = v;
    return len;
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
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
    size_t lo = 0, hi = n; /* first range with last >= cp */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r[mid][1] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && r[lo][0] <= cp;
}

#define IN(table, cp) in_ranges(table, sizeof table / sizeof table[0], cp)

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
    if (cp == 0xFFFD || IN(control_ranges, cp)) return MPX_CH_DROP;
    if (IN(space_ranges, cp)) return MPX_CH_SPACE;
    if (IN(punct_ranges, cp) || is_cjk(cp)) return MPX_CH_PUNCT;
    return MPX_CH_WORD;
}

uint32_t mpx_text_lower(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    size_t lo = 0, hi = sizeof lower_runs / sizeof lower_runs[0]; /* first run with last >= cp */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((uint32_t)lower_runs[mid][1] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == sizeof lower_runs / sizeof lower_runs[0]) return cp;
    const int32_t *r = lower_runs[lo];
    if (cp < (uint32_t)r[0] || (cp - (uint32_t)r[0]) % (uint32_t)r[3] != 0) return cp;
    return (uint32_t)((int32_t)cp + r[2]);
}

static void word_append(mpx_word *w, uint32_t cp) {
    w->chars++;
    if (w->chars <= MPX_WORD_MAX_CHARS) w->len += (size_t)mpx_utf8_encode(cp, w->bytes + w->len);
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
        word_append(w, mpx_text_lower(cp));
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
        if (cls == MPX_CH_WORD) word_append(w, mpx_text_lower(cp)); /* MPX_CH_DROP: removed */
    }
    w->src_end = it->p;
    if (w->chars > MPX_WORD_MAX_CHARS) {
        w->len = 0;
        w->chars = MPX_WORD_MAX_CHARS + 1;
    }
    w->bytes[w->len] = '\0';
    return 1;
}
