/* test_text_mlm.c — MLM examples and their loader on synthetic token streams: the sequence
 * layout ([CLS] A [SEP] B [SEP] [PAD]..., attention mask, segment ids, only the last sequence
 * short, a one-token sequence without B), the held-out
 * split (every 20th), labels exactly at predicted positions and the original token there,
 * specials ([UNK] included) never predicted; masking statistics (15% predicted, 80/10/10)
 * within stated binomial bounds and random replacements uniform over ordinary tokens;
 * reproducibility per (seed, epoch, sequence); the loader's batches equal to the examples,
 * every sequence at most once per epoch, independent of prefetch depth, resumable at a
 * position, and its eval mode (held-out order, fixed masks, partial last batch). */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/rng.h"
#include "mpx/text.h"
#include "testutil.h"

enum { V = 1000, NORD = V - MPX_TOK_NSPECIAL, T = 128, L = T - 3 };

/* [PAD] [UNK] [CLS] [SEP] [MASK] w0 .. w994 */
static mpx_tokenizer *make_tokenizer(void) {
    static char names[V][8];
    const char *tokens[V];
    for (int i = 0; i < V; i++) {
        if (i < MPX_TOK_NSPECIAL)
            snprintf(names[i], sizeof names[i], "%s", mpx_text_special_tokens[i]);
        else
            snprintf(names[i], sizeof names[i], "w%d", i - MPX_TOK_NSPECIAL);
        tokens[i] = names[i];
    }
    mpx_tokenizer *t = NULL;
    CHECK_OK(mpx_tokenizer_create(tokens, V, &t));
    return t;
}

/* A stream of nseq - 1 full sequences and a last one of `tail` tokens. The first token of
 * sequence s is id 5 + s % 995 (so a batch row names its sequence when nseq <= 995); every
 * 50th token is [UNK]; the rest are uniform ordinary ids. */
static int32_t *make_stream(int64_t nseq, int tail, int64_t *n) {
    *n = (nseq - 1) * L + tail;
    int32_t *ids = malloc((size_t)*n * sizeof *ids);
    for (int64_t i = 0; i < *n; i++) {
        if (i % L == 0)
            ids[i] = (int32_t)(MPX_TOK_NSPECIAL + (i / L) % NORD);
        else if (i % 50 == 0)
            ids[i] = MPX_TOK_UNK;
        else
            ids[i] = MPX_TOK_NSPECIAL + (int32_t)(mpx_rand_u32(5, MPX_RNG_TEST, (uint64_t)i) % NORD);
    }
    return ids;
}

typedef struct {
    int32_t ids[T], labels[T], attn[T], segments[T];
    int n_predict;
} example;

static void get(const mpx_mlm *m, mpx_split split, int64_t i, uint64_t seed, int64_t epoch,
                example *e) {
    mpx_status st = mpx_mlm_example(m, split, i, seed, epoch, e->ids, e->labels, e->attn,
                                    e->segments, &e->n_predict);
    CHECK(st == MPX_OK, "example %lld: %s", (long long)i, mpx_error_message());
}

/* The stream offset (within its sequence of len tokens) at position p of [CLS] A [SEP] B [SEP],
 * A the first ceil(len/2); -1 at [CLS], the [SEP]s and padding. */
static int offset_at(int len, int p) {
    int len_a = (len + 1) / 2;
    if (p >= 1 && p <= len_a) return p - 1;
    if (p >= len_a + 2 && p <= len + 1) return p - 2;
    return -1;
}

/* ---- layout, split, labels ---- */

static void test_layout(const mpx_tokenizer *tok) {
    int64_t n;
    int32_t *ids = make_stream(401, 37, &n);
    mpx_mlm *m = NULL;
    mpx_mlm_config cfg = mpx_mlm_config_default();
    CHECK(cfg.seq_len == T && cfg.heldout_every == 20 && cfg.mask_prob == 0.15 &&
              cfg.mask_token_frac == 0.8 && cfg.random_token_frac == 0.1,
          "defaults");
    CHECK_OK(mpx_mlm_create(tok, ids, n, &cfg, &m));
    REQUIRE_VOID(m, "create failed");
    /* 401 sequences: s = 19, 39, .., 399 held out (20), the other 381 for training */
    CHECK(mpx_mlm_count(m, MPX_SPLIT_TRAIN) == 381 && mpx_mlm_count(m, MPX_SPLIT_TEST) == 20,
          "split sizes %lld / %lld", (long long)mpx_mlm_count(m, MPX_SPLIT_TRAIN),
          (long long)mpx_mlm_count(m, MPX_SPLIT_TEST));
    int seen[401] = {0}, split_ok = 1;
    for (int sp = 0; sp < 2; sp++)
        for (int64_t i = 0; i < mpx_mlm_count(m, (mpx_split)sp); i++) {
            int64_t s = mpx_mlm_sequence(m, (mpx_split)sp, i);
            split_ok &= s >= 0 && s < 401 && !seen[s] && ((s % 20 == 19) == (sp == MPX_SPLIT_TEST));
            if (s >= 0 && s < 401) seen[s] = 1;
        }
    CHECK(split_ok, "every sequence in exactly one split, held out iff s %% 20 == 19");

    int layout_ok = 1, label_ok = 1, special_ok = 1, short_seen = 0;
    for (int sp = 0; sp < 2; sp++)
        for (int64_t i = 0; i < mpx_mlm_count(m, (mpx_split)sp); i++) {
            int64_t s = mpx_mlm_sequence(m, (mpx_split)sp, i);
            int len = s == 400 ? 37 : L, predicted = 0;
            /* [CLS] A [SEP] B [SEP]: A = the first ceil(len/2) stream tokens, B the rest. */
            int len_a = (len + 1) / 2, sep1 = len_a + 1, end = len + 3; /* end: first pad */
            example e;
            get(m, (mpx_split)sp, i, 11, 3, &e);
            short_seen += len < L;
            layout_ok &= e.ids[0] == MPX_TOK_CLS && e.ids[sep1] == MPX_TOK_SEP &&
                         e.ids[end - 1] == MPX_TOK_SEP && e.labels[0] == -1 &&
                         e.labels[sep1] == -1 && e.labels[end - 1] == -1;
            for (int p = 0; p < T; p++) {
                layout_ok &= e.attn[p] == (p < end);
                layout_ok &= e.segments[p] == (p > sep1 && p < end);
                if (p >= end) layout_ok &= e.ids[p] == MPX_TOK_PAD && e.labels[p] == -1;
                if (offset_at(len, p) < 0) continue;
                int32_t orig = ids[s * L + offset_at(len, p)];
                if (e.labels[p] == -1) {
                    label_ok &= e.ids[p] == orig; /* not predicted: unchanged */
                } else {
                    predicted++;
                    label_ok &= e.labels[p] == orig; /* predicted: the original id */
                    special_ok &= orig >= MPX_TOK_NSPECIAL;
                    special_ok &= e.ids[p] == MPX_TOK_MASK || e.ids[p] >= MPX_TOK_NSPECIAL;
                }
                if (orig == MPX_TOK_UNK) special_ok &= e.ids[p] == MPX_TOK_UNK && e.labels[p] == -1;
            }
            label_ok &= predicted == e.n_predict;
        }
    CHECK(layout_ok, "[CLS] A [SEP] B [SEP] [PAD].., the attention mask and the segment ids");
    CHECK(short_seen == 1, "%d short sequences, want 1", short_seen);
    CHECK(label_ok, "labels = the original id exactly where predicted, ids unchanged elsewhere");
    CHECK(special_ok, "a special token was predicted, or a special token put in");

    example e;
    CHECK(mpx_mlm_example(m, MPX_SPLIT_TEST, 20, 1, 0, e.ids, e.labels, e.attn, e.segments, NULL) ==
              MPX_ERR_INPUT,
          "example 20 of 20 accepted");
    mpx_mlm_free(m);

    /* A last sequence of one token has no B: [CLS] t [SEP] [PAD].., all segment 0. */
    int64_t n1;
    int32_t *ids1 = make_stream(3, 1, &n1);
    mpx_mlm_config c1 = cfg;
    c1.heldout_every = 0;
    CHECK_OK(mpx_mlm_create(tok, ids1, n1, &c1, &m));
    REQUIRE_VOID(m, "create failed");
    get(m, MPX_SPLIT_TRAIN, 2, 1, 0, &e);
    int one_ok = e.ids[0] == MPX_TOK_CLS && e.ids[2] == MPX_TOK_SEP && e.attn[2] == 1 && e.attn[3] == 0;
    for (int p = 0; p < T; p++) one_ok &= e.segments[p] == 0 && (p < 3 || e.ids[p] == MPX_TOK_PAD);
    CHECK(one_ok, "one-token sequence: [CLS] t [SEP] [PAD].., segment 0");
    mpx_mlm_free(m);
    free(ids1);

    /* errors: no held-out sequence, a bad id, bad probabilities */
    cfg.heldout_every = 20;
    CHECK(mpx_mlm_create(tok, ids, 10 * L, &cfg, &m) == MPX_ERR_INPUT, "10 sequences, every 20th");
    ids[7] = V;
    CHECK(mpx_mlm_create(tok, ids, n, &cfg, &m) == MPX_ERR_INPUT &&
              strstr(mpx_error_message(), "token 7"),
          "id %d accepted: %s", V, mpx_error_message());
    ids[7] = 5;
    cfg.mask_token_frac = 0.95;
    CHECK(mpx_mlm_create(tok, ids, n, &cfg, &m) == MPX_ERR_INPUT, "0.95 + 0.1 > 1 accepted");
    free(ids);
}

/* ---- statistics and reproducibility ---- */

static void test_statistics(const mpx_tokenizer *tok) {
    int64_t n;
    int32_t *ids = make_stream(2000, L, &n);
    mpx_mlm_config cfg = mpx_mlm_config_default();
    cfg.heldout_every = 0;
    mpx_mlm *m = NULL;
    CHECK_OK(mpx_mlm_create(tok, ids, n, &cfg, &m));
    REQUIRE_VOID(m, "create failed");
    int64_t ordinary = 0, predicted = 0, masked = 0, same = 0, random = 0, bins[10] = {0};
    for (int epoch = 0; epoch < 3; epoch++)
        for (int64_t i = 0; i < mpx_mlm_count(m, MPX_SPLIT_TRAIN); i++) {
            example e;
            get(m, MPX_SPLIT_TRAIN, i, 2024, epoch, &e);
            for (int p = 1; p < T; p++) {
                if (offset_at(L, p) < 0) continue;
                int32_t orig = ids[i * L + offset_at(L, p)];
                ordinary += orig >= MPX_TOK_NSPECIAL;
                if (e.labels[p] < 0) continue;
                predicted++;
                if (e.ids[p] == MPX_TOK_MASK) {
                    masked++;
                } else if (e.ids[p] == orig) {
                    same++;
                } else {
                    random++;
                    bins[(e.ids[p] - MPX_TOK_NSPECIAL) * 10 / NORD]++;
                }
            }
        }
    /* Each ordinary position is predicted independently with p = 0.15: the count is
     * Binomial(N, p). Bounds are 6 standard deviations (two-sided false alarm ~2e-9; the
     * draws are seeded, so the outcome is fixed, and the bound says what is acceptable). A
     * random replacement equals the original with probability 1/995, so "unchanged" is
     * expected at 0.1 + 0.1/995 and "random other" at 0.1 * 994/995. */
    double N = (double)ordinary, K = (double)predicted;
    double fp = K / N, sp = 6 * sqrt(0.15 * 0.85 / N);
    printf("masking: %lld of %lld ordinary positions predicted (%.4f); of those %.4f [MASK], "
           "%.4f unchanged, %.4f random\n",
           (long long)predicted, (long long)ordinary, fp, masked / K, same / K, random / K);
    CHECK(fabs(fp - 0.15) <= sp, "predicted fraction %.5f, want 0.15 +- %.5f (N %.0f)", fp, sp, N);
    struct {
        const char *what;
        double got, want;
    } parts[] = {{"[MASK]", masked / K, 0.8},
                 {"unchanged", same / K, 0.1 + 0.1 / NORD},
                 {"random", random / K, 0.1 * (NORD - 1) / NORD}};
    for (int k = 0; k < 3; k++) {
        double bound = 6 * sqrt(parts[k].want * (1 - parts[k].want) / K);
        CHECK(fabs(parts[k].got - parts[k].want) <= bound, "%s fraction %.5f, want %.5f +- %.5f",
              parts[k].what, parts[k].got, parts[k].want, bound);
    }
    /* random replacements uniform over the ordinary ids: chi-square over 10 equal bins with 9
     * degrees of freedom; 40 is beyond its 99.999th percentile (~35.9) */
    double chi2 = 0;
    for (int b = 0; b < 10; b++) {
        double want = random / 10.0;
        chi2 += (bins[b] - want) * (bins[b] - want) / want;
    }
    CHECK(chi2 < 40, "random replacements not uniform: chi2 %.1f over 10 bins", chi2);

    /* reproducible per (seed, epoch, sequence); other epochs and seeds mask differently */
    example a, b, c, d;
    get(m, MPX_SPLIT_TRAIN, 77, 2024, 1, &a);
    get(m, MPX_SPLIT_TRAIN, 78, 2024, 1, &c); /* another example in between */
    get(m, MPX_SPLIT_TRAIN, 77, 2024, 1, &b);
    CHECK(memcmp(&a, &b, sizeof a) == 0, "the same example twice differs");
    get(m, MPX_SPLIT_TRAIN, 77, 2024, 2, &c);
    get(m, MPX_SPLIT_TRAIN, 77, 2025, 1, &d);
    CHECK(memcmp(a.labels, c.labels, sizeof a.labels) != 0 &&
              memcmp(a.labels, d.labels, sizeof a.labels) != 0,
          "masks do not change with the epoch or the seed");
    mpx_mlm_free(m);
    free(ids);
}

/* ---- the loader ---- */

enum { B = 16, EPOCH_BATCHES = 381 / B };

typedef struct {
    int32_t ids[B * T], labels[B * T], attn[B * T], segments[B * T];
    int n;
    int64_t n_predict;
    mpx_loader_pos pos;
} saved;

static int run(const mpx_mlm *m, const mpx_mlm_loader_config *cfg, mpx_loader_pos start, int count,
               saved *out) {
    mpx_mlm_loader *Ld = NULL;
    mpx_status st = mpx_mlm_loader_create(m, cfg, start, &Ld);
    CHECK(st == MPX_OK, "loader: %s", mpx_error_message());
    if (st != MPX_OK) return 0;
    for (int k = 0; k < count && st == MPX_OK; k++) {
        mpx_mlm_batch b;
        st = mpx_mlm_loader_next(Ld, &b);
        CHECK(st == MPX_OK && b.batch_size == B && b.seq_len == T, "next: %s",
              mpx_error_message());
        if (st != MPX_OK) break;
        memcpy(out[k].ids, b.ids, sizeof out[k].ids);
        memcpy(out[k].labels, b.labels, sizeof out[k].labels);
        memcpy(out[k].attn, b.attn, sizeof out[k].attn);
        memcpy(out[k].segments, b.segments, sizeof out[k].segments);
        out[k].n = b.n;
        out[k].n_predict = b.n_predict;
        out[k].pos = b.pos;
    }
    mpx_mlm_loader_free(Ld);
    return st == MPX_OK;
}

/* Batch rows equal the examples they name (first token = 5 + sequence), each sequence at most
 * once per epoch; returns 1 when all holds. */
static int check_epoch(const mpx_mlm *m, const saved *bat, int nb, mpx_split split,
                       uint64_t seed, int64_t mask_epoch, int *order) {
    static int used[401];
    memset(used, 0, sizeof used);
    int ok = 1, k = 0;
    for (int b = 0; b < nb; b++) {
        int64_t labels = 0;
        for (int j = 0; j < bat[b].n; j++) {
            const int32_t *row = bat[b].ids + j * T, *lab = bat[b].labels + j * T;
            int64_t s = (lab[1] >= 0 ? lab[1] : row[1]) - MPX_TOK_NSPECIAL;
            int64_t i = -1;
            for (int64_t x = 0; x < mpx_mlm_count(m, split); x++)
                if (mpx_mlm_sequence(m, split, x) == s) i = x;
            if (i < 0 || used[s]) return 0;
            used[s] = 1;
            if (order) order[k++] = (int)i;
            example e;
            get(m, split, i, seed, mask_epoch, &e);
            ok &= memcmp(row, e.ids, sizeof e.ids) == 0 && memcmp(lab, e.labels, sizeof e.labels) == 0 &&
                  memcmp(bat[b].attn + j * T, e.attn, sizeof e.attn) == 0 &&
                  memcmp(bat[b].segments + j * T, e.segments, sizeof e.segments) == 0;
        }
        for (int p = 0; p < B * T; p++) labels += bat[b].labels[p] >= 0;
        ok &= labels == bat[b].n_predict;
        for (int p = bat[b].n * T; p < B * T; p++)
            ok &= bat[b].ids[p] == MPX_TOK_PAD && bat[b].labels[p] == -1 && bat[b].attn[p] == 0 &&
                  bat[b].segments[p] == 0;
    }
    return ok;
}

static void test_loader(const mpx_tokenizer *tok) {
    int64_t n;
    int32_t *ids = make_stream(401, 37, &n);
    mpx_mlm *m = NULL;
    CHECK_OK(mpx_mlm_create(tok, ids, n, NULL, &m));
    REQUIRE_VOID(m, "create failed");
    static saved a[2 * EPOCH_BATCHES + 3], b[2 * EPOCH_BATCHES + 3];
    mpx_mlm_loader_config cfg = mpx_mlm_loader_config_train(B, 42);
    CHECK(cfg.shuffle && cfg.drop_last && !cfg.fixed_masks && cfg.split == MPX_SPLIT_TRAIN &&
              cfg.prefetch == 2,
          "training defaults");
    int total = 2 * EPOCH_BATCHES + 3; /* two epochs and three batches of the third */
    REQUIRE_VOID(run(m, &cfg, (mpx_loader_pos){0, 0}, total, a), "training run failed");
    int order0[381], order1[381];
    CHECK(check_epoch(m, a, EPOCH_BATCHES, MPX_SPLIT_TRAIN, 42, 0, order0),
          "epoch 0: rows differ from their examples or repeat a sequence");
    CHECK(check_epoch(m, a + EPOCH_BATCHES, EPOCH_BATCHES, MPX_SPLIT_TRAIN, 42, 1, order1),
          "epoch 1: rows differ from their examples (masked for epoch 1) or repeat");
    CHECK(memcmp(order0, order1, sizeof(int) * EPOCH_BATCHES * B) != 0, "epochs in the same order");
    CHECK(a[EPOCH_BATCHES].pos.epoch == 1 && a[EPOCH_BATCHES].pos.batch == 0 &&
              a[total - 1].pos.epoch == 2 && a[total - 1].pos.batch == 2,
          "positions");

    /* prefetch depth changes nothing; resume at a position continues exactly */
    cfg.prefetch = 1;
    REQUIRE_VOID(run(m, &cfg, (mpx_loader_pos){0, 0}, total, b), "prefetch 1 run failed");
    CHECK(memcmp(a, b, sizeof(saved) * (size_t)total) == 0, "prefetch 1 gives other batches");
    int from = EPOCH_BATCHES + 5;
    REQUIRE_VOID(run(m, &cfg, (mpx_loader_pos){1, 5}, total - from, b), "resumed run failed");
    CHECK(memcmp(a + from, b, sizeof(saved) * (size_t)(total - from)) == 0,
          "resuming at (1, 5) differs from the uninterrupted run");
    mpx_mlm_loader *Ld = NULL;
    CHECK_OK(mpx_mlm_loader_create(m, &cfg, (mpx_loader_pos){1, EPOCH_BATCHES - 1}, &Ld));
    if (Ld) {
        mpx_mlm_batch bt;
        CHECK_OK(mpx_mlm_loader_next(Ld, &bt));
        mpx_loader_pos p = mpx_mlm_loader_position(Ld);
        CHECK(p.epoch == 2 && p.batch == 0 && mpx_mlm_loader_batches_per_epoch(Ld) == EPOCH_BATCHES,
              "position after the last batch of epoch 1: (%lld, %lld)", (long long)p.epoch,
              (long long)p.batch);
        mpx_mlm_loader_free(Ld);
    }
    /* another seed: another order */
    cfg = mpx_mlm_loader_config_train(B, 43);
    REQUIRE_VOID(run(m, &cfg, (mpx_loader_pos){0, 0}, 1, b), "seed 43 run failed");
    CHECK(memcmp(a[0].ids, b[0].ids, sizeof a[0].ids) != 0, "seed 43 gives seed 42's batch");

    /* eval: the 20 held-out sequences in order, a partial last batch, the same masks on
     * every pass */
    cfg = mpx_mlm_loader_config_eval(B, 42);
    CHECK(cfg.split == MPX_SPLIT_TEST && !cfg.shuffle && !cfg.drop_last && cfg.fixed_masks,
          "eval defaults");
    REQUIRE_VOID(run(m, &cfg, (mpx_loader_pos){0, 0}, 4, b), "eval run failed");
    int order[20];
    CHECK(b[0].n == B && b[1].n == 4 && b[2].n == B && b[2].pos.epoch == 1,
          "eval batches of %d and %d rows", b[0].n, b[1].n);
    CHECK(check_epoch(m, b, 2, MPX_SPLIT_TEST, 42, 0, order), "eval rows differ from examples");
    int in_order = 1;
    for (int i = 0; i < 20; i++) in_order &= order[i] == i;
    CHECK(in_order, "eval not in sequence order");
    CHECK(memcmp(&b[0], &b[2], offsetof(saved, n)) == 0 && memcmp(&b[1], &b[3], offsetof(saved, n)) == 0,
          "eval masks change between passes");

    /* errors */
    CHECK(mpx_mlm_loader_create(m, &cfg, (mpx_loader_pos){0, 2}, &Ld) == MPX_ERR_INPUT && !Ld,
          "start batch 2 of 2 accepted");
    cfg = mpx_mlm_loader_config_train(64, 1);
    cfg.split = MPX_SPLIT_TEST;
    CHECK(mpx_mlm_loader_create(m, &cfg, (mpx_loader_pos){0, 0}, &Ld) == MPX_ERR_INPUT,
          "20 sequences make a full batch of 64: %s", mpx_error_message());
    mpx_mlm_free(m);
    free(ids);
}

int main(void) {
    mpx_tokenizer *tok = make_tokenizer();
    REQUIRE(tok, "no tokenizer");
    test_layout(tok);
    test_statistics(tok);
    test_loader(tok);
    mpx_tokenizer_free(tok);
    return mpx_test_done(__FILE__);
}
