/* test_text_tokenizer.c — the WordPiece tokenizer: UTF-8 and BERT's character classes on
 * hand-picked code points; the vocabulary learned from a tiny corpus, derived by hand merge by
 * merge (both tie-breaks, the min_frequency stop, a size limit); encodings with "##"
 * continuations, punctuation, lower-casing and accent stripping, unknown characters, long
 * words and the special tokens; decode and the round trip decode(encode(s)) == normalize(s); the trainer against an
 * independent brute-force reference (recounting every pair each step) on synthetic text;
 * determinism; vocab.txt load/save and its errors. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "data/text_fixtures.h"
#include "data/text_internal.h"
#include "mpx/text.h"
#include "testutil.h"

static char g_tmp[1024];

/* ---- characters ---- */

static void test_utf8_and_classes(void) {
    static const struct {
        const char *bytes;
        int len;
        uint32_t cp;
    } ok[] = {{"A", 1, 0x41}, {"\xC3\xA9", 2, 0xE9}, {"\xE2\x82\xAC", 3, 0x20AC},
              {"\xF0\x9D\x84\x9E", 4, 0x1D11E}, {"\xF4\x8F\xBF\xBF", 4, 0x10FFFF}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint32_t cp = 0;
        int k = mpx_utf8_decode((const uint8_t *)ok[i].bytes, (size_t)ok[i].len, &cp);
        CHECK(k == ok[i].len && cp == ok[i].cp, "decode %zu: len %d cp %X", i, k, cp);
        char enc[4];
        CHECK(mpx_utf8_encode(cp, enc) == ok[i].len && memcmp(enc, ok[i].bytes, (size_t)k) == 0,
              "encode U+%X", cp);
    }
    /* overlong, surrogate, above U+10FFFF, stray continuation, truncated, C0/F5 lead bytes */
    static const char *bad[] = {"\xC0\x80", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                                "\x80", "\xE2\x82", "\xC1\xBF", "\xF5\x80\x80\x80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint32_t cp;
        CHECK(mpx_utf8_decode((const uint8_t *)bad[i], strlen(bad[i]), &cp) == 0,
              "invalid sequence %zu accepted", i);
    }
    const char *mixed = "ab\xC3\xA9z\xED\xA0\x80";
    CHECK(mpx_utf8_check((const uint8_t *)mixed, strlen(mixed)) == 5, "first bad byte at 5");

    static const struct {
        uint32_t cp;
        mpx_char_class cls;
    } cls[] = {
        {' ', MPX_CH_SPACE},    {'\t', MPX_CH_SPACE},   {'\n', MPX_CH_SPACE},
        {0xA0, MPX_CH_SPACE},   {0x3000, MPX_CH_SPACE}, {0x2028, MPX_CH_SPACE},
        {0x00, MPX_CH_DROP},    {0x07, MPX_CH_DROP},    {0x0B, MPX_CH_DROP},
        {0x85, MPX_CH_DROP},    {0xAD, MPX_CH_DROP},    {0x200B, MPX_CH_DROP},
        {0xFEFF, MPX_CH_DROP},  {0xFFFD, MPX_CH_DROP},  {'a', MPX_CH_WORD},
        {'7', MPX_CH_WORD},     {0xE9, MPX_CH_WORD},    {0xB0, MPX_CH_WORD},
        {0x3042, MPX_CH_WORD},  {0x2603, MPX_CH_WORD},  {'$', MPX_CH_PUNCT},
        {'+', MPX_CH_PUNCT},    {'`', MPX_CH_PUNCT},    {'~', MPX_CH_PUNCT},
        {'\'', MPX_CH_PUNCT},   {0x2019, MPX_CH_PUNCT}, {0x201C, MPX_CH_PUNCT},
        {0x2014, MPX_CH_PUNCT}, {0xBF, MPX_CH_PUNCT},   {0x3002, MPX_CH_PUNCT},
        {0x4E2D, MPX_CH_PUNCT}, {0x20000, MPX_CH_PUNCT}};
    for (size_t i = 0; i < sizeof cls / sizeof cls[0]; i++)
        CHECK(mpx_text_char_class(cls[i].cp) == cls[i].cls, "class of U+%04X: %d, want %d",
              cls[i].cp, mpx_text_char_class(cls[i].cp), cls[i].cls);

    /* simple (one-to-one) case mapping; U+0130 to i (Python's str.lower() gives i + U+0307,
     * whose mark BERT uncased then strips: the same word), sharp s stays */
    static const uint32_t low[][2] = {{'A', 'a'},       {'z', 'z'},       {'1', '1'},
                                      {0xC0, 0xE0},     {0xDE, 0xFE},     {0xD7, 0xD7},
                                      {0x178, 0xFF},    {0x100, 0x101},   {0x101, 0x101},
                                      {0x394, 0x3B4},   {0x416, 0x436},   {0x401, 0x451},
                                      {0x212A, 'k'},    {0x130, 'i'},     {0xDF, 0xDF},
                                      {0xFF21, 0xFF41}, {0x10400, 0x10428}};
    for (size_t i = 0; i < sizeof low / sizeof low[0]; i++)
        CHECK(mpx_text_lower(low[i][0]) == low[i][1], "lower(U+%04X) = U+%04X, want U+%04X",
              low[i][0], mpx_text_lower(low[i][0]), low[i][1]);

    /* BERT uncased's accent stripping: lower-case, NFD, drop the nonspacing marks (Mn):
     * É -> e, ñ -> n, ǖ (u with diaeresis and macron) -> u, a lone combining acute -> nothing,
     * ß and ø stay (no decomposition), 가 -> its two jamo (Lo, kept as NFD gives them) */
    static const struct {
        uint32_t cp;
        int n;
        uint32_t out[3];
    } fold[] = {{0xC9, 1, {'e'}},   {0xF1, 1, {'n'}},   {0x1D6, 1, {'u'}}, {0x301, 0, {0}},
                {0xDF, 1, {0xDF}},  {0xF8, 1, {0xF8}},  {0xAC00, 2, {0x1100, 0x1161}},
                {'Q', 1, {'q'}},    {0x130, 1, {'i'}}};
    for (size_t i = 0; i < sizeof fold / sizeof fold[0]; i++) {
        uint32_t got[MPX_FOLD_MAX];
        const int n = mpx_text_fold(fold[i].cp, got);
        CHECK(n == fold[i].n && memcmp(got, fold[i].out, (size_t)n * sizeof *got) == 0,
              "fold(U+%04X): %d code points (U+%04X...), want %d (U+%04X...)", fold[i].cp, n,
              n ? got[0] : 0, fold[i].n, fold[i].out[0]);
    }
    /* The classes and mappings are utf8proc's tables for this Unicode version; another version
     * may change a vocabulary learned from the same corpus: then bump text_cache.c's
     * TRAINER_VERSION (cached vocabularies are keyed by it) and this pin. */
    CHECK(strcmp(mpx_text_unicode_version(), "15.0.0") == 0, "Unicode %s, the tokenizer was "
          "checked with 15.0.0", mpx_text_unicode_version());
}

/* ---- the hand-derived vocabulary ---- */

/* Words: hug x2, hugs x2, pug, pun, bun, ox x2, oy x2, and , ! . once each.
 * Alphabet (bytes order): ! , . b g h n o p s u x y -> ids 5..17; "##" forms of the 10
 * letters -> 18..27. Pair counts: (h,##u) 4, (##u,##g) 5, (##g,##s) 2, (p,##u) 2,
 * (##u,##n) 2, (b,##u) 1, (o,##x) 2, (o,##y) 2. Merges:
 *   1 ##u+##g (5) -> ##ug   now (h,##ug) 4, (##ug,##s) 2, (p,##ug) 1, (p,##u) 1
 *   2 h+##ug (4)  -> hug    now (hug,##s) 2
 *   3 ##u+##n (2) -> ##un   tie at 2 with hug+##s, o+##x, o+##y: "##u" < "hug" < "o"
 *   4 hug+##s (2) -> hugs
 *   5 o+##x (2)   -> ox     same left token as o+##y: "##x" < "##y"
 *   6 o+##y (2)   -> oy
 * then every pair is seen once (< min_frequency 2): 34 tokens. */
static const char *const HAND_TEXT = "Hug hug hugs, PUG pun! bun hugs.\nox OX oy oy\n";
static const char *const HAND_VOCAB[] = {
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "!",   ",",   ".",   "b",    "g",    "h",   "n",
    "o",     "p",     "s",     "u",     "x",      "y",   "##b", "##g", "##h",  "##n",  "##o", "##p",
    "##s",   "##u",   "##x",   "##y",   "##ug",   "hug", "##un", "hugs", "ox", "oy"};
enum { HAND_N = 34 };

static mpx_tokenizer *train_text(const char *name, const char *text, int vocab_size,
                                 int max_alphabet, mpx_wordpiece_stats *stats) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, name);
    tf_file f = {"a.txt", text};
    if (!tf_write_dir(dir, &f, 1)) return NULL;
    mpx_text_corpus c;
    mpx_status st = mpx_text_corpus_read(dir, &c);
    CHECK(st == MPX_OK, "read %s: %s", dir, mpx_error_message());
    if (st != MPX_OK) return NULL;
    mpx_wordpiece_opts o = {vocab_size, max_alphabet, 0};
    mpx_tokenizer *t = NULL;
    st = mpx_wordpiece_train(&c, &o, &t, stats);
    CHECK(st == MPX_OK, "train %s: %s", name, mpx_error_message());
    mpx_text_corpus_free(&c);
    return t;
}

static void test_hand_vocab(void) {
    mpx_wordpiece_stats s;
    mpx_tokenizer *t = train_text("hand", HAND_TEXT, 100, 0, &s);
    REQUIRE_VOID(t, "training the hand corpus failed");
    CHECK(mpx_tokenizer_size(t) == HAND_N && s.vocab_size == HAND_N, "%d tokens, want %d",
          mpx_tokenizer_size(t), HAND_N);
    for (int i = 0; i < HAND_N && i < mpx_tokenizer_size(t); i++)
        CHECK(strcmp(mpx_tokenizer_token(t, i), HAND_VOCAB[i]) == 0, "token %d '%s', want '%s'",
              i, mpx_tokenizer_token(t, i), HAND_VOCAB[i]);
    CHECK(s.words == 14 && s.unique_words == 10 && s.alphabet == 13 && s.merges == 6,
          "stats: words %lld unique %lld alphabet %d merges %lld (want 14 10 13 6)",
          (long long)s.words, (long long)s.unique_words, s.alphabet, (long long)s.merges);
    for (int k = 0; k < MPX_TOK_NSPECIAL; k++)
        CHECK(mpx_tokenizer_special(t, k) == k && mpx_tokenizer_is_special(t, k),
              "special %d has id %d", k, mpx_tokenizer_special(t, k));
    CHECK(!mpx_tokenizer_is_special(t, 5) && mpx_tokenizer_id(t, "##un") == 30 &&
              mpx_tokenizer_id(t, "zz") == -1 && mpx_tokenizer_token(t, HAND_N) == NULL,
          "lookups");
    mpx_tokenizer_free(t);

    /* a size limit stops after merge 3 */
    t = train_text("hand31", HAND_TEXT, 31, 0, &s);
    REQUIRE_VOID(t, "training to 31 failed");
    CHECK(mpx_tokenizer_size(t) == 31 && strcmp(mpx_tokenizer_token(t, 30), "##un") == 0,
          "size 31: %d tokens, last '%s'", mpx_tokenizer_size(t),
          mpx_tokenizer_token(t, mpx_tokenizer_size(t) - 1));
    mpx_tokenizer_free(t);

    /* too small for the alphabet: an error that says so */
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/hand", g_tmp);
    mpx_text_corpus c;
    CHECK_OK(mpx_text_corpus_read(dir, &c));
    mpx_wordpiece_opts small = {20, 0, 0};
    mpx_tokenizer *none = NULL;
    CHECK(mpx_wordpiece_train(&c, &small, &none, NULL) == MPX_ERR_INPUT && !none &&
              strstr(mpx_error_message(), "vocabulary size 20 is too small"),
          "vocab_size 20 < 28 base tokens: %s", mpx_error_message());
    mpx_text_corpus_free(&c);
}

/* ---- encoding ---- */

static void expect_ids(const mpx_tokenizer *t, const char *text, const int32_t *want, int n) {
    mpx_token_buf b = {0};
    mpx_status st = mpx_tokenizer_encode(t, text, strlen(text), &b);
    int same = st == MPX_OK && b.n == n && (n == 0 || memcmp(b.ids, want, (size_t)n * 4) == 0);
    char got[256] = "";
    for (int64_t i = 0; i < b.n && strlen(got) < 200; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", b.ids[i]);
    CHECK(same, "encode '%s': got [%s] (%s)", text, got, st ? mpx_error_message() : "ok");
    mpx_token_buf_free(&b);
}

static void test_encode_decode(void) {
    mpx_tokenizer *t;
    CHECK_OK(mpx_tokenizer_create(HAND_VOCAB, HAND_N, &t));
    REQUIRE_VOID(t, "create failed");
    /* longest match first with "##" continuations */
    expect_ids(t, "Hugs", (int32_t[]){31}, 1);
    expect_ids(t, "bug", (int32_t[]){8, 28}, 2);          /* b ##ug */
    expect_ids(t, "pugs", (int32_t[]){13, 28, 24}, 3);    /* p ##ug ##s */
    expect_ids(t, "shun", (int32_t[]){14, 20, 30}, 3);    /* s ##h ##un */
    expect_ids(t, "hugshug", (int32_t[]){31, 20, 28}, 3); /* hugs ##h ##ug */
    /* punctuation split off, lower-casing, whitespace of every kind */
    expect_ids(t, "OX, oy!", (int32_t[]){32, 6, 33, 5}, 4);
    expect_ids(t, "\tHUG\xC2\xA0hugs\r\n.", (int32_t[]){29, 31, 7}, 3);
    expect_ids(t, "hu\xE2\x80\x8Bg", (int32_t[]){29}, 1); /* a zero-width space is removed */
    /* unknown characters: the whole word is [UNK] (BERT); unknown punctuation alone */
    expect_ids(t, "hugging", (int32_t[]){1}, 1);
    expect_ids(t, "hu\xE2\x98\x83g ox", (int32_t[]){1, 32}, 2);
    expect_ids(t, "hug\xE2\x80\x99s", (int32_t[]){29, 1, 14}, 3); /* hug ' s */
    expect_ids(t, "ox\xE4\xB8\xADoy", (int32_t[]){32, 1, 33}, 3);  /* CJK alone */
    expect_ids(t, "   \n", NULL, 0);
    /* more than 100 characters: [UNK]; exactly 100: encoded */
    char longw[400] = "";
    for (int i = 0; i < 34; i++) strcat(longw, "hug");
    expect_ids(t, longw, (int32_t[]){1}, 1);
    longw[100] = '\0'; /* 33 x hug + 'h': hug, then (##h ##ug) x 32, then ##h */
    mpx_token_buf b = {0};
    CHECK_OK(mpx_tokenizer_encode(t, longw, 100, &b));
    CHECK(b.n == 66 && b.ids[0] == 29 && b.ids[1] == 20 && b.ids[2] == 28 && b.ids[64] == 28 &&
              b.ids[65] == 20,
          "100-character word: %lld ids", (long long)b.n);
    mpx_token_buf_free(&b);
    /* invalid UTF-8 names the offset */
    mpx_status st = mpx_tokenizer_encode(t, "ok \xFF", 4, &b);
    CHECK(st == MPX_ERR_INPUT && strstr(mpx_error_message(), "offset 3"),
          "invalid UTF-8: %s", mpx_error_message());
    mpx_token_buf_free(&b);

    /* decode: specials written or skipped, "##" glued, a leading "##" kept */
    char *s;
    int32_t ids[] = {2, 13, 28, 24, 6, 32, 3, 0};
    CHECK_OK(mpx_tokenizer_decode(t, ids, 8, 0, &s));
    CHECK(s && strcmp(s, "[CLS] pugs , ox [SEP] [PAD]") == 0, "decode: '%s'", s);
    free(s);
    CHECK_OK(mpx_tokenizer_decode(t, ids, 8, 1, &s));
    CHECK(s && strcmp(s, "pugs , ox") == 0, "decode skipping specials: '%s'", s);
    free(s);
    CHECK_OK(mpx_tokenizer_decode(t, (int32_t[]){28, 24}, 2, 0, &s));
    CHECK(s && strcmp(s, "##ugs") == 0, "decode of a leading continuation: '%s'", s);
    free(s);
    CHECK(mpx_tokenizer_decode(t, (int32_t[]){34}, 1, 0, &s) == MPX_ERR_INPUT,
          "id 34 decoded");

    /* normalize */
    CHECK_OK(mpx_text_normalize("Hello,  W\xC3\x96RLD!\n(\xCE\x94x)", 22, &s));
    CHECK(s && strcmp(s, "hello , world ! ( \xCE\xB4x )") == 0, "normalize: '%s'", s);
    free(s);

    /* round trip over generated text with every letter and punctuation of the vocabulary,
     * mixed case, and long runs */
    static const char pieces[] = "bghnopsuxyBGHNOPSUXY!,.";
    char text[4000];
    size_t k = 0;
    for (uint64_t i = 0; k < sizeof text - 4; i++) {
        uint32_t r = mpx_rand_u32(99, MPX_RNG_TEST, i);
        text[k++] = r % 5 == 0 ? ' ' : r % 17 == 1 ? '\n' : pieces[(r >> 8) % (sizeof pieces - 1)];
    }
    text[k] = '\0';
    char *norm, *dec;
    b = (mpx_token_buf){0};
    CHECK_OK(mpx_tokenizer_encode(t, text, k, &b));
    CHECK_OK(mpx_text_normalize(text, k, &norm));
    CHECK_OK(mpx_tokenizer_decode(t, b.ids, b.n, 0, &dec));
    int unk = 0;
    for (int64_t i = 0; i < b.n; i++) unk += b.ids[i] == 1;
    CHECK(unk == 0 && norm && dec && strcmp(norm, dec) == 0,
          "round trip: %d [UNK], normalised and decoded differ", unk);
    free(norm);
    free(dec);
    mpx_token_buf_free(&b);
    mpx_tokenizer_free(t);
}

/* ---- an independent reference trainer (ASCII text only) ---- */

enum { RV = 512, RW = 4096 };

typedef struct {
    char *tok[RV];
    int n;
    char *word[RW];
    long count[RW];
    int nw;
    int sym[RW][16], len[RW];
} ref;

static int ref_tok(ref *r, const char *s) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->tok[i], s) == 0) return i;
    return -1;
}

static int ref_add(ref *r, const char *s) {
    int i = ref_tok(r, s);
    if (i >= 0) return i;
    r->tok[r->n] = strdup(s);
    return r->n++;
}

static void ref_count_word(ref *r, const char *w) {
    for (int i = 0; i < r->nw; i++)
        if (strcmp(r->word[i], w) == 0) {
            r->count[i]++;
            return;
        }
    r->word[r->nw] = strdup(w);
    r->count[r->nw++] = 1;
}

/* Spec, stated independently: words = maximal runs of ASCII letters/digits (lower-cased) and
 * single other printable characters; alphabet = the max_alphabet most frequent characters
 * (ties: byte value), in byte order, then "##" forms of the alphanumeric ones; each step
 * merges the pair with the highest total count (ties: left token, then right token by strcmp)
 * while it is seen >= 2 times. Recounts every pair from scratch each step. */
static void ref_train(ref *r, const char *text, int vocab_size, int max_alphabet) {
    memset(r, 0, sizeof *r);
    char w[64];
    int wl = 0;
    for (const char *p = text;; p++) {
        if (*p && isalnum((unsigned char)*p)) {
            w[wl++] = (char)tolower((unsigned char)*p);
            continue;
        }
        if (wl) {
            w[wl] = '\0';
            ref_count_word(r, w);
            wl = 0;
        }
        if (!*p) break;
        if (!isspace((unsigned char)*p)) ref_count_word(r, (char[]){*p, 0});
    }
    long ccount[256] = {0};
    for (int i = 0; i < r->nw; i++)
        for (const char *p = r->word[i]; *p; p++) ccount[(unsigned char)*p] += r->count[i];
    int keep[256] = {0};
    for (int k = 0; k < max_alphabet; k++) { /* pick the most frequent remaining */
        int best = -1;
        for (int c = 1; c < 256; c++)
            if (ccount[c] && !keep[c] && (best < 0 || ccount[c] > ccount[best])) best = c;
        if (best < 0) break;
        keep[best] = 1;
    }
    for (int s = 0; s < MPX_TOK_NSPECIAL; s++) ref_add(r, mpx_text_special_tokens[s]);
    for (int c = 1; c < 256; c++)
        if (keep[c]) ref_add(r, (char[]){(char)c, 0});
    for (int c = 1; c < 256; c++)
        if (keep[c] && isalnum(c)) ref_add(r, (char[]){'#', '#', (char)c, 0});
    int nw = 0;
    for (int i = 0; i < r->nw; i++) {
        int ok = 1;
        for (const char *p = r->word[i]; *p; p++) ok &= keep[(unsigned char)*p];
        if (!ok) continue;
        r->len[nw] = 0;
        for (const char *p = r->word[i]; *p; p++) {
            char piece[4] = {'#', '#', *p, 0};
            r->sym[nw][r->len[nw]++] = ref_tok(r, p == r->word[i] ? piece + 2 : piece);
        }
        r->count[nw++] = r->count[i];
    }
    static long pc[RV][RV];
    while (r->n < vocab_size) {
        memset(pc, 0, sizeof pc);
        for (int i = 0; i < nw; i++)
            for (int j = 0; j + 1 < r->len[i]; j++) pc[r->sym[i][j]][r->sym[i][j + 1]] += r->count[i];
        int ba = -1, bb = -1;
        for (int a = 0; a < r->n; a++)
            for (int b = 0; b < r->n; b++) {
                if (!pc[a][b]) continue;
                int better = ba < 0 || pc[a][b] > pc[ba][bb];
                if (!better && pc[a][b] == pc[ba][bb]) {
                    int c = strcmp(r->tok[a], r->tok[ba]);
                    better = c < 0 || (c == 0 && strcmp(r->tok[b], r->tok[bb]) < 0);
                }
                if (better) ba = a, bb = b;
            }
        if (ba < 0 || pc[ba][bb] < 2) break;
        char merged[64];
        snprintf(merged, sizeof merged, "%s%s", r->tok[ba], r->tok[bb] + 2);
        int c = ref_add(r, merged);
        for (int i = 0; i < nw; i++) {
            int k = 0;
            for (int j = 0; j < r->len[i];) {
                if (j + 1 < r->len[i] && r->sym[i][j] == ba && r->sym[i][j + 1] == bb) {
                    r->sym[i][k++] = c;
                    j += 2;
                } else {
                    r->sym[i][k++] = r->sym[i][j++];
                }
            }
            r->len[i] = k;
        }
    }
}

static void ref_free(ref *r) {
    for (int i = 0; i < r->n; i++) free(r->tok[i]);
    for (int i = 0; i < r->nw; i++) free(r->word[i]);
}

static void test_against_reference(void) {
    static const struct {
        int vocab, alphabet, letters;
        uint64_t seed;
    } cfg[] = {{200, 0, 12, 1}, {150, 9, 12, 2}, {300, 0, 6, 3}};
    for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
        char *text = tf_synthetic(cfg[k].seed, 3000, 250, cfg[k].letters);
        static ref r;
        ref_train(&r, text, cfg[k].vocab, cfg[k].alphabet ? cfg[k].alphabet : 1000);
        char name[32];
        snprintf(name, sizeof name, "ref%zu", k);
        mpx_tokenizer *t = train_text(name, text, cfg[k].vocab, cfg[k].alphabet, NULL);
        int diff = 0, n = t ? mpx_tokenizer_size(t) : -1;
        while (t && diff < n && diff < r.n && strcmp(mpx_tokenizer_token(t, diff), r.tok[diff]) == 0)
            diff++;
        CHECK(n == r.n && diff == n, "config %zu: learned %d tokens, reference %d; first "
              "difference at %d ('%s' vs '%s')", k, n, r.n, diff,
              t && diff < n ? mpx_tokenizer_token(t, diff) : "", diff < r.n ? r.tok[diff] : "");
        CHECK(r.n > cfg[k].vocab / 2, "config %zu: the reference learned only %d tokens", k, r.n);
        mpx_tokenizer_free(t);
        ref_free(&r);
        free(text);
    }
}

/* ---- vocab.txt ---- */

static mpx_status load_text(const char *name, const char *text, mpx_tokenizer **t) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", g_tmp, name);
    fx_write_file(path, text, strlen(text));
    return mpx_tokenizer_load(path, t);
}

static void expect_load_error(const char *name, const char *text, const char *what) {
    mpx_tokenizer *t = NULL;
    mpx_status st = load_text(name, text, &t);
    CHECK(st == MPX_ERR_INPUT && t == NULL && strstr(mpx_error_message(), what),
          "%s: %s (want '%s')", name, mpx_error_message(), what);
    mpx_tokenizer_free(t);
}

static void test_vocab_io(void) {
    mpx_tokenizer *t, *u;
    CHECK_OK(mpx_tokenizer_create(HAND_VOCAB, HAND_N, &t));
    REQUIRE_VOID(t, "create failed");
    char path[1200];
    snprintf(path, sizeof path, "%s/saved-vocab.txt", g_tmp);
    CHECK_OK(mpx_tokenizer_save(t, path));
    char *text;
    size_t n;
    FILE *f = fopen(path, "rb");
    REQUIRE_VOID(f, "saved vocabulary missing");
    text = calloc(1, 4096);
    n = fread(text, 1, 4095, f);
    fclose(f);
    CHECK(n > 0 && strncmp(text, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n!\n,\n", 35) == 0 &&
              text[n - 1] == '\n' && strstr(text, "\n##un\nhugs\nox\noy\n"),
          "vocab.txt is one token per line: '%.60s'", text);
    free(text);
    CHECK_OK(mpx_tokenizer_load(path, &u));
    int same = u && mpx_tokenizer_size(u) == HAND_N;
    for (int i = 0; same && i < HAND_N; i++)
        same = strcmp(mpx_tokenizer_token(u, i), HAND_VOCAB[i]) == 0;
    CHECK(same, "save + load changed the vocabulary");
    mpx_tokenizer_free(u);
    mpx_tokenizer_free(t);

    /* a BERT-style file: specials anywhere, [unused] entries, CRLF line ends */
    CHECK_OK(load_text("bert.txt",
                       "[unused0]\r\n[PAD]\r\na\r\n[UNK]\r\n##b\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\n",
                       &t));
    REQUIRE_VOID(t, "BERT-style vocabulary rejected");
    CHECK(mpx_tokenizer_special(t, MPX_TOK_PAD) == 1 && mpx_tokenizer_special(t, MPX_TOK_UNK) == 3 &&
              mpx_tokenizer_special(t, MPX_TOK_CLS) == 5 && mpx_tokenizer_special(t, MPX_TOK_MASK) == 7,
          "special ids %d %d %d %d", mpx_tokenizer_special(t, 0), mpx_tokenizer_special(t, 1),
          mpx_tokenizer_special(t, 2), mpx_tokenizer_special(t, 4));
    expect_ids(t, "AB c", (int32_t[]){2, 4, 3}, 3);
    mpx_tokenizer_free(t);

    expect_load_error("dup.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nab\nab\n",
                      "line 7 'ab' repeats token 5");
    expect_load_error("nomask.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nab\n", "[MASK]");
    expect_load_error("empty-line.txt", "[PAD]\n\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", "line 2 is empty");
    expect_load_error("space.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na b\n", "whitespace");
    expect_load_error("utf8.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\xC3\n", "UTF-8");
    CHECK(load_text("missing/none.txt", "", &t) == MPX_ERR_IO, "missing file: %s",
          mpx_error_message());
    const char *dup[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[PAD]"};
    CHECK(mpx_tokenizer_create(dup, 6, &t) == MPX_ERR_INPUT && t == NULL, "duplicate [PAD]");
}

int main(void) {
    mpx_test_tmpdir("text-tokenizer", g_tmp, sizeof g_tmp);
    REQUIRE(g_tmp[0], "no temporary directory");
    test_utf8_and_classes();
    test_hand_vocab();
    test_encode_decode();
    test_against_reference();
    test_vocab_io();
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    CHECK(system(cmd) == 0, "cannot remove %s", g_tmp);
    return mpx_test_done(__FILE__);
}
