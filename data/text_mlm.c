/* text_mlm.c — masked-language-model examples over a token stream.
 *
 * Sequence s takes the stream tokens ids[s L .. min(n, (s+1) L)) with L = T - 3, cut into
 * two halves A (the first ceil(len / 2)) and B, laid out as BERT's sentence pairs:
 * [CLS] A [SEP] B [SEP], then [PAD] up to T (only the last sequence can be short; when it has
 * a single token, B is empty and so is its [SEP]). Segment ids: 0 for [CLS], A and the first
 * [SEP], 1 for B and its [SEP], 0 for padding. B is A's continuation in the text (BERT's
 * "IsNext" pairs; there is no next-sentence objective). Sequences with s % k == k - 1 (k = heldout_every)
 * form the held-out split, the others the training split, both in stream order.
 * Masking (BERT): each ordinary token (not a special one; [UNK] included among the specials)
 * is predicted with probability mask_prob; a predicted token becomes [MASK] with probability
 * mask_token_frac, a uniformly drawn ordinary token with probability random_token_frac, and
 * stays otherwise; its label is the original id. Position p of sequence s in epoch e uses
 * Philox block (seed, MPX_RNG_MASKING, e << 44 | s << 20 | p) and nothing else, so an
 * example is a pure function of (seed, epoch, s) whatever the order or the thread. */
#include <stdlib.h>
#include <string.h>

#include "data/text_internal.h"
#include "mpx/rng.h"
#include "mpx/text.h"

enum { SEQ_BITS = 24, POS_BITS = 20, EPOCH_BITS = 64 - SEQ_BITS - POS_BITS };

struct mpx_mlm {
    mpx_mlm_config cfg;
    const mpx_tokenizer *tok;
    const int32_t *ids;
    int64_t n, nseq;
    int32_t special_sorted[MPX_TOK_NSPECIAL];
    int32_t n_ordinary; /* vocabulary size minus the specials */
    uint64_t thr_predict, thr_mask, thr_random; /* probabilities as thresholds on a u32 */
};

mpx_mlm_config mpx_mlm_config_default(void) {
    mpx_mlm_config c = {128, 20, 0.15, 0.8, 0.1};
    return c;
}

static uint64_t threshold(double p) { return (uint64_t)(p * 4294967296.0); }

mpx_status mpx_mlm_create(const mpx_tokenizer *t, const int32_t *ids, int64_t n,
                          const mpx_mlm_config *cfg, mpx_mlm **out) {
    *out = NULL;
    mpx_mlm_config c = cfg ? *cfg : mpx_mlm_config_default();
    if (c.seq_len < 4 || c.seq_len > (1 << POS_BITS))
        return mpx_fail(MPX_ERR_INPUT, "MLM: seq_len %d outside [4, %d]", c.seq_len, 1 << POS_BITS);
    if (c.heldout_every < 0 || c.heldout_every == 1)
        return mpx_fail(MPX_ERR_INPUT,
                        "MLM: heldout_every %d must be 0 (nothing held out) or >= 2",
                        c.heldout_every);
    if (!(c.mask_prob >= 0 && c.mask_prob <= 1) || !(c.mask_token_frac >= 0) ||
        !(c.random_token_frac >= 0) || !(c.mask_token_frac + c.random_token_frac <= 1))
        return mpx_fail(MPX_ERR_INPUT,
                        "MLM: mask_prob %g must be in [0, 1] and mask_token_frac %g + "
                        "random_token_frac %g non-negative with sum <= 1",
                        c.mask_prob, c.mask_token_frac, c.random_token_frac);
    if (n < 1) return mpx_fail(MPX_ERR_INPUT, "MLM: the token stream is empty");
    int V = mpx_tokenizer_size(t);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return mpx_fail(MPX_ERR_INPUT,
                            "MLM: token %lld of the stream is id %d, outside the vocabulary of %d",
                            (long long)i, ids[i], V);
    int64_t L = c.seq_len - 3, nseq = (n + L - 1) / L;
    if (nseq >= ((int64_t)1 << SEQ_BITS))
        return mpx_fail(MPX_ERR_INPUT,
                        "MLM: %lld sequences of %d exceed the 2^%d the masking key supports",
                        (long long)nseq, c.seq_len, SEQ_BITS);
    if (c.heldout_every && nseq < c.heldout_every)
        return mpx_fail(MPX_ERR_INPUT,
                        "MLM: %lld sequences of %d tokens hold no held-out sequence (every %dth); "
                        "use a longer stream or heldout_every 0",
                        (long long)nseq, c.seq_len, c.heldout_every);
    mpx_mlm *m = calloc(1, sizeof *m);
    if (!m) return mpx_fail(MPX_ERR_NOMEM, "out of memory for the MLM examples");
    m->cfg = c;
    m->tok = t;
    m->ids = ids;
    m->n = n;
    m->nseq = nseq;
    for (int s = 0; s < MPX_TOK_NSPECIAL; s++) m->special_sorted[s] = t->special[s];
    for (int i = 1; i < MPX_TOK_NSPECIAL; i++) /* insertion sort of 5 */
        for (int j = i; j > 0 && m->special_sorted[j - 1] > m->special_sorted[j]; j--) {
            int32_t x = m->special_sorted[j];
            m->special_sorted[j] = m->special_sorted[j - 1];
            m->special_sorted[j - 1] = x;
        }
    m->n_ordinary = V - MPX_TOK_NSPECIAL;
    m->thr_predict = threshold(c.mask_prob);
    m->thr_mask = threshold(c.mask_token_frac);
    m->thr_random = threshold(c.mask_token_frac + c.random_token_frac);
    *out = m;
    return MPX_OK;
}

void mpx_mlm_free(mpx_mlm *m) { free(m); }

int mpx_mlm_seq_len(const mpx_mlm *m) { return m->cfg.seq_len; }

const mpx_tokenizer *mpx_mlm_tokenizer(const mpx_mlm *m) { return m->tok; }

int64_t mpx_mlm_count(const mpx_mlm *m, mpx_split split) {
    int64_t held = m->cfg.heldout_every ? m->nseq / m->cfg.heldout_every : 0;
    return split == MPX_SPLIT_TEST ? held : m->nseq - held;
}

int64_t mpx_mlm_sequence(const mpx_mlm *m, mpx_split split, int64_t i) {
    int64_t k = m->cfg.heldout_every;
    if (k == 0) return i;
    return split == MPX_SPLIT_TEST ? i * k + k - 1 : i + i / (k - 1);
}

/* The r-th ordinary id (r < n_ordinary): skip the specials at or below it. */
static int32_t ordinary(const mpx_mlm *m, uint32_t r) {
    int32_t id = (int32_t)r;
    for (int s = 0; s < MPX_TOK_NSPECIAL; s++)
        if (m->special_sorted[s] <= id) id++;
    return id;
}

/* Mask position p (holding stream token orig) of a sequence: ids[p] and labels[p]. */
static int mask_position(const mpx_mlm *m, uint64_t seed, uint64_t base, int p, int32_t orig,
                         int32_t *ids, int32_t *labels) {
    const mpx_tokenizer *t = m->tok;
    ids[p] = orig;
    labels[p] = -1;
    if (mpx_tokenizer_is_special(t, orig)) return 0;
    uint32_t w[4];
    mpx_philox(seed, MPX_RNG_MASKING, base | (uint64_t)p, w);
    if (w[0] >= m->thr_predict) return 0;
    labels[p] = orig;
    if (w[1] < m->thr_mask)
        ids[p] = t->special[MPX_TOK_MASK];
    else if (w[1] < m->thr_random && m->n_ordinary > 0)
        /* multiply-shift: bias below n_ordinary / 2^32 */
        ids[p] = ordinary(m, (uint32_t)(((uint64_t)w[2] * (uint64_t)m->n_ordinary) >> 32));
    return 1;
}

static void special_at(int32_t *ids, int32_t *labels, int32_t *segments, int p, int32_t id,
                       int32_t segment) {
    ids[p] = id;
    labels[p] = -1;
    segments[p] = segment;
}

mpx_status mpx_mlm_example(const mpx_mlm *m, mpx_split split, int64_t i, uint64_t seed,
                           int64_t epoch, int32_t *ids, int32_t *labels, int32_t *attn,
                           int32_t *segments, int *n_predict) {
    if (i < 0 || i >= mpx_mlm_count(m, split))
        return mpx_fail(MPX_ERR_INPUT, "MLM: example %lld outside the %s split of %lld",
                        (long long)i, split == MPX_SPLIT_TEST ? "held-out" : "training",
                        (long long)mpx_mlm_count(m, split));
    if (epoch < 0 || epoch >= ((int64_t)1 << EPOCH_BITS))
        return mpx_fail(MPX_ERR_INPUT, "MLM: epoch %lld outside [0, 2^%d)", (long long)epoch,
                        EPOCH_BITS);
    const mpx_tokenizer *t = m->tok;
    int T = m->cfg.seq_len;
    int64_t s = mpx_mlm_sequence(m, split, i), L = T - 3, first = s * L;
    int len = (int)(m->n - first < L ? m->n - first : L);
    int len_a = (len + 1) / 2, len_b = len - len_a;
    uint64_t base = ((uint64_t)epoch << (SEQ_BITS + POS_BITS)) | ((uint64_t)s << POS_BITS);
    int predicted = 0, p = 0;
    special_at(ids, labels, segments, p++, t->special[MPX_TOK_CLS], 0);
    for (int k = 0; k < len_a; k++, p++) {
        predicted += mask_position(m, seed, base, p, m->ids[first + k], ids, labels);
        segments[p] = 0;
    }
    special_at(ids, labels, segments, p++, t->special[MPX_TOK_SEP], 0);
    if (len_b > 0) {
        for (int k = 0; k < len_b; k++, p++) {
            predicted += mask_position(m, seed, base, p, m->ids[first + len_a + k], ids, labels);
            segments[p] = 1;
        }
        special_at(ids, labels, segments, p++, t->special[MPX_TOK_SEP], 1);
    }
    for (int q = 0; q < T; q++) attn[q] = q < p;
    for (; p < T; p++) special_at(ids, labels, segments, p, t->special[MPX_TOK_PAD], 0);
    if (n_predict) *n_predict = predicted;
    return MPX_OK;
}
