/* text_tokenizer.c — the WordPiece tokenizer: vocabulary (create, BERT vocab.txt load/save),
 * encoding (basic tokenizer, then greedy longest-match-first subwords with "##"
 * continuations, as BERT's WordpieceTokenizer), decoding and normalised text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/fsutil.h"
#include "data/text_internal.h"
#include "mpx/text.h"

const char *const mpx_text_special_tokens[MPX_TOK_NSPECIAL] = {"[PAD]", "[UNK]", "[CLS]",
                                                               "[SEP]", "[MASK]"};

mpx_status mpx_token_buf_push(mpx_token_buf *b, int32_t id) {
    if (b->n == b->cap) {
        int64_t cap = b->cap ? 2 * b->cap : 4096;
        int32_t *ids = realloc(b->ids, (size_t)cap * sizeof *ids);
        if (!ids) return mpx_fail(MPX_ERR_NOMEM, "out of memory for %lld token ids", (long long)cap);
        b->ids = ids;
        b->cap = cap;
    }
    b->ids[b->n++] = id;
    return MPX_OK;
}

void mpx_token_buf_free(mpx_token_buf *b) {
    free(b->ids);
    memset(b, 0, sizeof *b);
}

mpx_status mpx_tokenizer_alloc(mpx_tokenizer **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return mpx_fail(MPX_ERR_NOMEM, "out of memory for a tokenizer");
    return MPX_OK;
}

void mpx_tokenizer_free(mpx_tokenizer *t) {
    if (!t) return;
    mpx_strtab_free(&t->tok);
    free(t);
}

mpx_status mpx_tokenizer_finish(mpx_tokenizer *t, const char *what) {
    for (int s = 0; s < MPX_TOK_NSPECIAL; s++) {
        const char *name = mpx_text_special_tokens[s];
        t->special[s] = mpx_strtab_find(&t->tok, name, strlen(name));
        if (t->special[s] < 0)
            return mpx_fail(MPX_ERR_INPUT, "%s lacks the special token %s", what, name);
    }
    t->max_len = 0;
    for (int32_t id = 0; id < t->tok.n; id++) {
        size_t len = t->tok.len[id];
        if (len > 2 && memcmp(mpx_strtab_str(&t->tok, id), "##", 2) == 0) len -= 2;
        if (len > t->max_len) t->max_len = len;
    }
    return MPX_OK;
}

/* Add one vocabulary entry; errors name it as "<what>: <unit> <index>". */
static mpx_status add_token(mpx_tokenizer *t, const char *s, size_t len, const char *what,
                            const char *unit, long index) {
    if (len == 0) return mpx_fail(MPX_ERR_INPUT, "%s: %s %ld is empty", what, unit, index);
    size_t bad = mpx_utf8_check((const uint8_t *)s, len);
    if (bad < len)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s %ld is not valid UTF-8 (byte %zu)", what, unit,
                        index, bad);
    for (size_t i = 0; i < len; i++)
        if (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')
            return mpx_fail(MPX_ERR_INPUT, "%s: %s %ld '%.*s' contains whitespace", what, unit,
                            index, (int)len, s);
    int32_t id;
    int added;
    MPX_TRY(mpx_strtab_add(&t->tok, s, len, &id, &added));
    if (!added)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s %ld '%.*s' repeats token %d", what, unit, index,
                        (int)len, s, id);
    return MPX_OK;
}

mpx_status mpx_tokenizer_create(const char *const *tokens, int n, mpx_tokenizer **out) {
    *out = NULL;
    mpx_tokenizer *t;
    MPX_TRY(mpx_tokenizer_alloc(&t));
    mpx_status st = MPX_OK;
    for (int i = 0; i < n && st == MPX_OK; i++)
        st = add_token(t, tokens[i], strlen(tokens[i]), "vocabulary", "token", i);
    if (st == MPX_OK) st = mpx_tokenizer_finish(t, "the vocabulary");
    if (st != MPX_OK) {
        mpx_tokenizer_free(t);
        return st;
    }
    *out = t;
    return MPX_OK;
}

mpx_status mpx_tokenizer_load(const char *path, mpx_tokenizer **out) {
    *out = NULL;
    char *data;
    size_t n;
    MPX_TRY(mpx_fs_read_all(path, &data, &n));
    mpx_tokenizer *t;
    mpx_status st = mpx_tokenizer_alloc(&t);
    char what[1100];
    snprintf(what, sizeof what, "vocabulary '%s'", path);
    long line = 0;
    for (size_t i = 0; i < n && st == MPX_OK; line++) {
        size_t j = i;
        while (j < n && data[j] != '\n') j++;
        size_t len = j - i;
        if (len > 0 && data[i + len - 1] == '\r') len--; /* a vocab.txt saved on Windows */
        st = add_token(t, data + i, len, what, "line", line + 1);
        i = j + 1;
    }
    free(data);
    if (st == MPX_OK) st = mpx_tokenizer_finish(t, what);
    if (st != MPX_OK) {
        mpx_tokenizer_free(t);
        return st;
    }
    *out = t;
    return MPX_OK;
}

mpx_status mpx_tokenizer_save(const mpx_tokenizer *t, const char *path) {
    size_t bytes = t->tok.nbytes; /* every token + its NUL, which becomes '\n' */
    char *buf = malloc(bytes ? bytes : 1);
    if (!buf) return mpx_fail(MPX_ERR_NOMEM, "out of memory writing '%s'", path);
    size_t k = 0;
    for (int32_t id = 0; id < t->tok.n; id++) {
        memcpy(buf + k, mpx_strtab_str(&t->tok, id), t->tok.len[id]);
        k += t->tok.len[id];
        buf[k++] = '\n';
    }
    mpx_status st = mpx_fs_write_atomic(path, buf, k);
    free(buf);
    return st;
}

int mpx_tokenizer_size(const mpx_tokenizer *t) { return t->tok.n; }

const char *mpx_tokenizer_token(const mpx_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->tok.n ? mpx_strtab_str(&t->tok, id) : NULL;
}

int32_t mpx_tokenizer_id(const mpx_tokenizer *t, const char *token) {
    return mpx_strtab_find(&t->tok, token, strlen(token));
}

int32_t mpx_tokenizer_special(const mpx_tokenizer *t, int which) {
    return which >= 0 && which < MPX_TOK_NSPECIAL ? t->special[which] : -1;
}

int mpx_tokenizer_is_special(const mpx_tokenizer *t, int32_t id) {
    for (int s = 0; s < MPX_TOK_NSPECIAL; s++)
        if (t->special[s] == id) return 1;
    return 0;
}

mpx_status mpx_tokenizer_encode_word(const mpx_tokenizer *t, const mpx_word *w,
                                     mpx_token_buf *out) {
    int32_t unk = t->special[MPX_TOK_UNK];
    if (w->chars > MPX_WORD_MAX_CHARS) return mpx_token_buf_push(out, unk);
    size_t bound[MPX_WORD_MAX_CHARS + 1]; /* byte offset of each character, then the end */
    int nc = 0;
    for (size_t i = 0; i < w->len; i++)
        if (((uint8_t)w->bytes[i] & 0xC0) != 0x80) bound[nc++] = i;
    bound[nc] = w->len;
    char key[2 + MPX_WORD_BUF] = "##";
    int64_t mark = out->n;
    for (int start = 0; start < nc;) {
        int end = nc;
        while (end > start && bound[end] - bound[start] > t->max_len) end--;
        int32_t id = -1;
        for (; end > start; end--) {
            size_t b0 = bound[start], len = bound[end] - b0;
            if (start == 0) {
                id = mpx_strtab_find(&t->tok, w->bytes, len);
            } else {
                memcpy(key + 2, w->bytes + b0, len);
                id = mpx_strtab_find(&t->tok, key, len + 2);
            }
            if (id >= 0) break;
        }
        if (id < 0) { /* no piece covers this position: the whole word is [UNK] (BERT) */
            out->n = mark;
            return mpx_token_buf_push(out, unk);
        }
        MPX_TRY(mpx_token_buf_push(out, id));
        start = end;
    }
    return MPX_OK;
}

static mpx_status check_utf8(const char *text, size_t len) {
    size_t bad = mpx_utf8_check((const uint8_t *)text, len);
    if (bad < len)
        return mpx_fail(MPX_ERR_INPUT, "text is not valid UTF-8 at byte offset %zu (byte 0x%02X)",
                        bad, (unsigned)(uint8_t)text[bad]);
    return MPX_OK;
}

mpx_status mpx_tokenizer_encode(const mpx_tokenizer *t, const char *text, size_t len,
                                mpx_token_buf *out) {
    MPX_TRY(check_utf8(text, len));
    mpx_word_iter it = mpx_word_iter_make(text, len);
    mpx_word w;
    while (mpx_word_next(&it, &w)) MPX_TRY(mpx_tokenizer_encode_word(t, &w, out));
    return MPX_OK;
}

/* A growable string. */
typedef struct {
    char *s;
    size_t n, cap;
} strbuf;

static mpx_status sb_put(strbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) return mpx_fail(MPX_ERR_NOMEM, "out of memory for a string of %zu bytes", cap);
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
    return MPX_OK;
}

static mpx_status sb_finish(strbuf *b, mpx_status st, char **out) {
    if (st == MPX_OK && !b->s) st = sb_put(b, "", 0);
    if (st != MPX_OK) {
        free(b->s);
        return st;
    }
    *out = b->s;
    return MPX_OK;
}

mpx_status mpx_tokenizer_decode(const mpx_tokenizer *t, const int32_t *ids, int64_t n,
                                int skip_special, char **out) {
    *out = NULL;
    strbuf b = {0};
    mpx_status st = MPX_OK;
    for (int64_t i = 0; i < n && st == MPX_OK; i++) {
        if (ids[i] < 0 || ids[i] >= t->tok.n) {
            st = mpx_fail(MPX_ERR_INPUT, "decode: id %d at %lld is outside the vocabulary of %d",
                          ids[i], (long long)i, t->tok.n);
            break;
        }
        if (skip_special && mpx_tokenizer_is_special(t, ids[i])) continue;
        const char *tok = mpx_strtab_str(&t->tok, ids[i]);
        size_t len = t->tok.len[ids[i]];
        if (b.n > 0 && len > 2 && memcmp(tok, "##", 2) == 0) {
            st = sb_put(&b, tok + 2, len - 2);
        } else {
            if (b.n > 0) st = sb_put(&b, " ", 1);
            if (st == MPX_OK) st = sb_put(&b, tok, len);
        }
    }
    return sb_finish(&b, st, out);
}

mpx_status mpx_text_normalize(const char *text, size_t len, char **out) {
    *out = NULL;
    MPX_TRY(check_utf8(text, len));
    strbuf b = {0};
    mpx_status st = MPX_OK;
    mpx_word_iter it = mpx_word_iter_make(text, len);
    mpx_word w;
    while (st == MPX_OK && mpx_word_next(&it, &w)) {
        if (b.n > 0) st = sb_put(&b, " ", 1);
        if (w.chars <= MPX_WORD_MAX_CHARS) {
            if (st == MPX_OK) st = sb_put(&b, w.bytes, w.len);
            continue;
        }
        /* a long word is not kept in w.bytes: fold it again from the text */
        for (const uint8_t *p = w.src; p < w.src_end && st == MPX_OK;) {
            uint32_t cp, f[MPX_FOLD_MAX];
            int k = mpx_utf8_decode(p, (size_t)(w.src_end - p), &cp);
            p += k;
            if (mpx_text_char_class(cp) != MPX_CH_WORD) continue;
            const int nf = mpx_text_fold(cp, f);
            for (int i = 0; i < nf && st == MPX_OK; i++) {
                char enc[4];
                st = sb_put(&b, enc, (size_t)mpx_utf8_encode(f[i], enc));
            }
        }
    }
    return sb_finish(&b, st, out);
}
