/* text_train.c — learning a WordPiece vocabulary from a corpus (the recipe of HuggingFace's
 * WordPiece trainer: BPE merges over words whose non-initial pieces carry "##").
 *
 * 1. Count the words of the corpus (basic tokenizer) in a hash table: the merges then run over
 *    the unique words weighted by their counts, never over the 3.4 M word occurrences.
 * 2. Alphabet: characters by frequency (ties: code point), the max_alphabet most frequent kept;
 *    words with another character are left out (they encode as [UNK]).
 * 3. Every word starts as characters: first plain, the rest "##c". Counts of adjacent pairs
 *    live in a hash table; each pair keeps the list of words it occurs in, and a max-heap
 *    (with lazy deletion of outdated entries) finds the best pair: highest count, ties to the
 *    smaller left token, then the smaller right token (bytes). Merging rewrites only the words
 *    on the pair's list, subtracting their old pairs and adding their new ones.
 * 4. A merge whose concatenation is already a token adds nothing (two different pairs can
 *    spell the same string); merging stops at vocab_size tokens or when the best pair is seen
 *    fewer than min_frequency times.
 * Every decision depends only on counts and bytes, never on hash or thread order. */
#include <stdlib.h>
#include <string.h>

#include "data/text_internal.h"
#include "mpx/runtime.h"
#include "mpx/text.h"

typedef struct {
    int32_t *sym; /* token ids; shrinks as pairs merge */
    int32_t len;
    int64_t count;
} tword;

typedef struct {
    int32_t a, b;
    int64_t count;  /* occurrences over the corpus (word counts summed) */
    int32_t *words; /* words it has occurred in (may repeat, may be outdated) */
    int32_t nw, cw;
    uint32_t stamp; /* == trainer.stamp: already in `changed` during this merge */
} tpair;

typedef struct {
    int64_t count;
    int32_t pair;
} hentry;

typedef struct {
    mpx_tokenizer *t;
    tword *words;
    int32_t nwords;
    tpair *pairs;
    int32_t npairs, cpairs;
    int32_t *map; /* open addressing over (a, b) -> pair index, -1 empty */
    size_t nmap;
    hentry *heap;
    int64_t nheap, cheap;
    uint32_t *visit; /* [nwords] stamp of the last merge that rewrote the word */
    int32_t *changed;
    int32_t nchanged, cchanged;
    uint32_t stamp;
} trainer;

static mpx_status grow(void **p, size_t elem, size_t cap, const char *what) {
    void *q = realloc(*p, cap * elem);
    if (!q) return mpx_fail(MPX_ERR_NOMEM, "WordPiece training: out of memory for %s", what);
    *p = q;
    return MPX_OK;
}

/* ---- step 1-2: words and alphabet ---- */

typedef struct {
    mpx_strtab tab;
    int64_t *count;
    int64_t cap;
} counter;

static mpx_status counter_add(counter *c, const char *s, size_t len, int64_t k) {
    int32_t id;
    MPX_TRY(mpx_strtab_add(&c->tab, s, len, &id, NULL));
    if (id >= c->cap) {
        int64_t cap = c->cap ? 2 * c->cap : 4096;
        MPX_TRY(grow((void **)&c->count, sizeof *c->count, (size_t)cap, "counts"));
        memset(c->count + c->cap, 0, (size_t)(cap - c->cap) * sizeof *c->count);
        c->cap = cap;
    }
    c->count[id] += k;
    return MPX_OK;
}

static void counter_free(counter *c) {
    mpx_strtab_free(&c->tab);
    free(c->count);
}

static mpx_status count_words(const mpx_text_corpus *c, counter *words, int64_t *total) {
    *total = 0;
    for (int64_t d = 0; d < c->n_docs; d++) {
        mpx_word_iter it = mpx_word_iter_make(c->text + c->offsets[d],
                                              (size_t)(c->offsets[d + 1] - c->offsets[d]));
        mpx_word w;
        while (mpx_word_next(&it, &w)) {
            if (w.chars > MPX_WORD_MAX_CHARS) continue; /* always [UNK] */
            MPX_TRY(counter_add(words, w.bytes, w.len, 1));
            ++*total;
        }
    }
    return MPX_OK;
}

typedef struct {
    int64_t count;
    const char *s; /* the character's UTF-8 bytes, NUL-terminated */
    int32_t id;
} charinfo;

static int by_freq(const void *x, const void *y) {
    const charinfo *a = x, *b = y;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    return strcmp(a->s, b->s);
}

static int by_bytes(const void *x, const void *y) {
    return strcmp(((const charinfo *)x)->s, ((const charinfo *)y)->s);
}

static int char_len(uint8_t b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

/* The alphabet into the vocabulary after the specials: kept characters plain, then "##c".
 * keep[char id] = 1 for kept characters. */
static mpx_status alphabet(trainer *tr, const counter *words, counter *chars, int max_alphabet,
                           int vocab_size, uint8_t **keep, int *kept) {
    for (int32_t w = 0; w < words->tab.n; w++) {
        const char *s = mpx_strtab_str(&words->tab, w);
        for (size_t i = 0, n = words->tab.len[w]; i < n;) {
            int k = char_len((uint8_t)s[i]);
            MPX_TRY(counter_add(chars, s + i, (size_t)k, words->count[w]));
            i += (size_t)k;
        }
    }
    int32_t n = chars->tab.n;
    charinfo *order = malloc((size_t)n * sizeof *order);
    *keep = calloc((size_t)n, 1);
    if (!order || !*keep) {
        free(order);
        return mpx_fail(MPX_ERR_NOMEM, "WordPiece training: out of memory for the alphabet");
    }
    for (int32_t i = 0; i < n; i++)
        order[i] = (charinfo){chars->count[i], mpx_strtab_str(&chars->tab, i), i};
    qsort(order, (size_t)n, sizeof *order, by_freq);
    *kept = n < max_alphabet ? n : max_alphabet;
    qsort(order, (size_t)*kept, sizeof *order, by_bytes);
    mpx_status st = MPX_OK;
    int continuations = 0;
    for (int pass = 0; pass < 2 && st == MPX_OK; pass++)
        for (int i = 0; i < *kept && st == MPX_OK; i++) {
            const char *s = order[i].s;
            size_t len = strlen(s);
            (*keep)[order[i].id] = 1;
            uint32_t cp;
            mpx_utf8_decode((const uint8_t *)s, len, &cp);
            char tok[8] = "##";
            memcpy(tok + 2, s, len);
            int32_t id;
            if (pass == 0) {
                st = mpx_strtab_add(&tr->t->tok, s, len, &id, NULL);
            } else if (mpx_text_char_class(cp) != MPX_CH_PUNCT) { /* never inside a word */
                st = mpx_strtab_add(&tr->t->tok, tok, len + 2, &id, NULL);
                continuations++;
            }
        }
    free(order);
    MPX_TRY(st);
    if (tr->t->tok.n > vocab_size)
        return mpx_fail(MPX_ERR_INPUT,
                        "WordPiece: vocabulary size %d is too small for the 5 special tokens and "
                        "the alphabet of %d characters (%d tokens with %d \"##\" forms): raise "
                        "vocab_size or lower max_alphabet",
                        vocab_size, *kept, tr->t->tok.n, continuations);
    return MPX_OK;
}

/* Words over the kept alphabet as symbol sequences. */
static mpx_status make_words(trainer *tr, const counter *words, const counter *chars,
                             const uint8_t *keep, int32_t **arena) {
    size_t total = 0;
    for (int32_t w = 0; w < words->tab.n; w++) total += words->tab.len[w];
    *arena = malloc((total ? total : 1) * sizeof **arena);
    tr->words = calloc((size_t)words->tab.n + 1, sizeof *tr->words);
    if (!*arena || !tr->words) return mpx_fail(MPX_ERR_NOMEM, "WordPiece training: out of memory");
    size_t used = 0;
    for (int32_t w = 0; w < words->tab.n; w++) {
        const char *s = mpx_strtab_str(&words->tab, w);
        int32_t *sym = *arena + used, len = 0;
        int ok = 1;
        for (size_t i = 0, n = words->tab.len[w]; i < n && ok;) {
            int k = char_len((uint8_t)s[i]);
            ok = keep[mpx_strtab_find(&chars->tab, s + i, (size_t)k)];
            char tok[8] = "##";
            memcpy(tok + 2, s + i, (size_t)k);
            sym[len++] = i == 0 ? mpx_strtab_find(&tr->t->tok, s, (size_t)k)
                                : mpx_strtab_find(&tr->t->tok, tok, (size_t)k + 2);
            i += (size_t)k;
        }
        if (!ok) continue;
        used += (size_t)len;
        tr->words[tr->nwords++] = (tword){sym, len, words->count[w]};
    }
    tr->visit = calloc((size_t)tr->nwords + 1, sizeof *tr->visit);
    if (!tr->visit) return mpx_fail(MPX_ERR_NOMEM, "WordPiece training: out of memory");
    return MPX_OK;
}

/* ---- step 3: pairs, heap, merges ---- */

static size_t map_slot(const trainer *tr, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t mask = tr->nmap - 1;
    for (size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;; i = (i + 1) & mask) {
        int32_t p = tr->map[i];
        if (p < 0 || (tr->pairs[p].a == a && tr->pairs[p].b == b)) return i;
    }
}

static mpx_status map_resize(trainer *tr, size_t n) {
    free(tr->map);
    tr->map = malloc(n * sizeof *tr->map);
    if (!tr->map) return mpx_fail(MPX_ERR_NOMEM, "WordPiece training: out of memory for pairs");
    memset(tr->map, 0xFF, n * sizeof *tr->map);
    tr->nmap = n;
    for (int32_t p = 0; p < tr->npairs; p++)
        tr->map[map_slot(tr, tr->pairs[p].a, tr->pairs[p].b)] = p;
    return MPX_OK;
}

/* Change the count of pair (a, b) by delta in word w (delta > 0: remember w). */
static mpx_status pair_add(trainer *tr, int32_t a, int32_t b, int64_t delta, int32_t w) {
    size_t slot = map_slot(tr, a, b);
    int32_t p = tr->map[slot];
    if (p < 0) {
        if (tr->npairs == tr->cpairs) {
            tr->cpairs = tr->cpairs ? 2 * tr->cpairs : 65536;
            MPX_TRY(grow((void **)&tr->pairs, sizeof *tr->pairs, (size_t)tr->cpairs, "pairs"));
        }
        p = tr->npairs++;
        tr->pairs[p] = (tpair){a, b, 0, NULL, 0, 0, 0};
        tr->map[slot] = p;
        if ((size_t)tr->npairs * 2 > tr->nmap) MPX_TRY(map_resize(tr, tr->nmap * 2));
    }
    tpair *q = &tr->pairs[p];
    q->count += delta;
    if (delta > 0 && (q->nw == 0 || q->words[q->nw - 1] != w)) {
        if (q->nw == q->cw) {
            q->cw = q->cw ? 2 * q->cw : 4;
            MPX_TRY(grow((void **)&q->words, sizeof *q->words, (size_t)q->cw, "pair lists"));
        }
        q->words[q->nw++] = w;
    }
    if (q->stamp != tr->stamp) {
        q->stamp = tr->stamp;
        if (tr->nchanged == tr->cchanged) {
            tr->cchanged = tr->cchanged ? 2 * tr->cchanged : 4096;
            MPX_TRY(grow((void **)&tr->changed, sizeof *tr->changed, (size_t)tr->cchanged,
                         "changed pairs"));
        }
        tr->changed[tr->nchanged++] = p;
    }
    return MPX_OK;
}

/* Heap order: x before y. */
static int better(const trainer *tr, hentry x, hentry y) {
    if (x.count != y.count) return x.count > y.count;
    const tpair *px = &tr->pairs[x.pair], *py = &tr->pairs[y.pair];
    const mpx_strtab *tok = &tr->t->tok;
    int c = strcmp(mpx_strtab_str(tok, px->a), mpx_strtab_str(tok, py->a));
    if (c == 0) c = strcmp(mpx_strtab_str(tok, px->b), mpx_strtab_str(tok, py->b));
    return c < 0;
}

static mpx_status heap_push(trainer *tr, int32_t p) {
    if (tr->nheap == tr->cheap) {
        tr->cheap = tr->cheap ? 2 * tr->cheap : 65536;
        MPX_TRY(grow((void **)&tr->heap, sizeof *tr->heap, (size_t)tr->cheap, "the heap"));
    }
    hentry e = {tr->pairs[p].count, p};
    int64_t i = tr->nheap++;
    while (i > 0 && better(tr, e, tr->heap[(i - 1) / 2])) {
        tr->heap[i] = tr->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    tr->heap[i] = e;
    return MPX_OK;
}

static hentry heap_pop(trainer *tr) {
    hentry top = tr->heap[0], e = tr->heap[--tr->nheap];
    int64_t i = 0, n = tr->nheap;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && better(tr, tr->heap[c + 1], tr->heap[c])) c++;
        if (!better(tr, tr->heap[c], e)) break;
        tr->heap[i] = tr->heap[c];
        i = c;
    }
    tr->heap[i] = e;
    return top;
}

/* Push the pairs whose count changed since the last call. */
static mpx_status push_changed(trainer *tr) {
    for (int32_t i = 0; i < tr->nchanged; i++)
        if (tr->pairs[tr->changed[i]].count > 0) MPX_TRY(heap_push(tr, tr->changed[i]));
    tr->nchanged = 0;
    tr->stamp++;
    return MPX_OK;
}

static mpx_status word_pairs(trainer *tr, int32_t w, int sign) {
    const tword *W = &tr->words[w];
    for (int32_t i = 0; i + 1 < W->len; i++)
        MPX_TRY(pair_add(tr, W->sym[i], W->sym[i + 1], sign * W->count, w));
    return MPX_OK;
}

/* Merge pair p into token c in every word that holds it. */
static mpx_status merge(trainer *tr, int32_t p, int32_t c) {
    int32_t a = tr->pairs[p].a, b = tr->pairs[p].b;
    int32_t *list = tr->pairs[p].words, nw = tr->pairs[p].nw;
    for (int32_t k = 0; k < nw; k++) {
        int32_t w = list[k];
        if (tr->visit[w] == tr->stamp) continue;
        tr->visit[w] = tr->stamp;
        tword *W = &tr->words[w];
        int has = 0;
        for (int32_t i = 0; i + 1 < W->len && !has; i++) has = W->sym[i] == a && W->sym[i + 1] == b;
        if (!has) continue; /* an outdated list entry */
        MPX_TRY(word_pairs(tr, w, -1));
        int32_t j = 0;
        for (int32_t i = 0; i < W->len;) { /* left to right, non-overlapping (a == b too) */
            if (i + 1 < W->len && W->sym[i] == a && W->sym[i + 1] == b) {
                W->sym[j++] = c;
                i += 2;
            } else {
                W->sym[j++] = W->sym[i++];
            }
        }
        W->len = j;
        MPX_TRY(word_pairs(tr, w, +1));
    }
    /* c differs from a and b (it is longer), so no word holds (a, b) any more */
    tr->pairs[p].nw = 0;
    return push_changed(tr);
}

static mpx_status run_merges(trainer *tr, int vocab_size, int min_frequency, int64_t *merges) {
    size_t nmap = 1024;
    while (nmap < (size_t)tr->nwords * 8) nmap *= 2;
    MPX_TRY(map_resize(tr, nmap));
    tr->stamp = 1;
    for (int32_t w = 0; w < tr->nwords; w++) MPX_TRY(word_pairs(tr, w, +1));
    MPX_TRY(push_changed(tr));
    mpx_strtab *tok = &tr->t->tok;
    char buf[2 * MPX_WORD_BUF + 4];
    while (tok->n < vocab_size && tr->nheap > 0) {
        hentry e = heap_pop(tr);
        tpair *q = &tr->pairs[e.pair];
        if (e.count != q->count) continue; /* outdated entry */
        if (q->count < min_frequency) break;
        size_t la = tok->len[q->a], lb = tok->len[q->b];
        memcpy(buf, mpx_strtab_str(tok, q->a), la); /* b is always a "##" piece */
        memcpy(buf + la, mpx_strtab_str(tok, q->b) + 2, lb - 2);
        int32_t c;
        MPX_TRY(mpx_strtab_add(tok, buf, la + lb - 2, &c, NULL));
        MPX_TRY(merge(tr, e.pair, c));
        ++*merges;
    }
    return MPX_OK;
}

static void trainer_free(trainer *tr) {
    for (int32_t p = 0; p < tr->npairs; p++) free(tr->pairs[p].words);
    free(tr->pairs);
    free(tr->map);
    free(tr->heap);
    free(tr->visit);
    free(tr->changed);
    free(tr->words);
}

mpx_status mpx_wordpiece_train(const mpx_text_corpus *c, const mpx_wordpiece_opts *opts,
                               mpx_tokenizer **out, mpx_wordpiece_stats *stats) {
    *out = NULL;
    mpx_wordpiece_stats scratch;
    if (!stats) stats = &scratch;
    memset(stats, 0, sizeof *stats);
    int vocab_size = opts && opts->vocab_size ? opts->vocab_size : 8192;
    int max_alphabet = opts && opts->max_alphabet ? opts->max_alphabet : 1000;
    int min_frequency = opts && opts->min_frequency ? opts->min_frequency : 2;
    if (vocab_size < MPX_TOK_NSPECIAL + 1 || max_alphabet < 1 || min_frequency < 1)
        return mpx_fail(MPX_ERR_INPUT,
                        "WordPiece: vocab_size %d (> 5), max_alphabet %d and min_frequency %d "
                        "(>= 1) out of range",
                        vocab_size, max_alphabet, min_frequency);
    double t0 = mpx_now();
    trainer tr = {0};
    counter words = {0}, chars = {0};
    uint8_t *keep = NULL;
    int32_t *arena = NULL;
    mpx_status st = mpx_tokenizer_alloc(&tr.t);
    for (int s = 0; s < MPX_TOK_NSPECIAL && st == MPX_OK; s++) {
        int32_t id;
        st = mpx_strtab_add(&tr.t->tok, mpx_text_special_tokens[s],
                            strlen(mpx_text_special_tokens[s]), &id, NULL);
    }
    if (st == MPX_OK) st = count_words(c, &words, &stats->words);
    if (st == MPX_OK)
        st = alphabet(&tr, &words, &chars, max_alphabet, vocab_size, &keep, &stats->alphabet);
    if (st == MPX_OK) st = make_words(&tr, &words, &chars, keep, &arena);
    stats->unique_words = tr.nwords;
    counter_free(&words);
    counter_free(&chars);
    free(keep);
    double t1 = mpx_now();
    stats->count_s = t1 - t0;
    if (st == MPX_OK) st = run_merges(&tr, vocab_size, min_frequency, &stats->merges);
    if (st == MPX_OK) st = mpx_tokenizer_finish(tr.t, "the learned vocabulary");
    stats->merge_s = mpx_now() - t1;
    trainer_free(&tr);
    free(arena);
    if (st != MPX_OK) {
        mpx_tokenizer_free(tr.t);
        return st;
    }
    stats->vocab_size = tr.t->tok.n;
    *out = tr.t;
    return MPX_OK;
}
