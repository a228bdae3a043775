/* text_loader.c — the MLM batch loader, built like data/loader.c: the prefetch ring's worker
 * (prefetch.c) fills prefetch + 1 preallocated batches (the caller holds one, the worker the
 * others).
 *
 * Which sequence of the split fills which row of batch g is epoch_order.h's rule (the image
 * loader's); it is masked for its epoch (or 0 with fixed_masks) by mpx_mlm_example. A
 * batch is therefore a pure function of (seed, g): thread timing, prefetch depth and
 * restarts cannot change it. Nothing is allocated per batch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/epoch_order.h"
#include "data/prefetch.h"
#include "mpx/text.h"

typedef struct {
    int32_t *ids, *labels, *attn, *segments; /* [B, T] each */
    int n;
    int64_t n_predict;
} slot;

struct mpx_mlm_loader {
    mpx_mlm_loader_config cfg;
    const mpx_mlm *m;
    int T;
    int32_t pad;
    mpx_epoch_order order; /* its permutation is the worker's */
    int nslots;
    slot *slots;
    mpx_prefetch *ring;
};

mpx_mlm_loader_config mpx_mlm_loader_config_train(int batch_size, uint64_t seed) {
    mpx_mlm_loader_config c;
    memset(&c, 0, sizeof c);
    c.batch_size = batch_size;
    c.seed = seed;
    c.split = MPX_SPLIT_TRAIN;
    c.shuffle = 1;
    c.drop_last = 1;
    c.fixed_masks = 0;
    c.prefetch = 2;
    return c;
}

mpx_mlm_loader_config mpx_mlm_loader_config_eval(int batch_size, uint64_t seed) {
    mpx_mlm_loader_config c = mpx_mlm_loader_config_train(batch_size, seed);
    c.split = MPX_SPLIT_TEST;
    c.shuffle = 0;
    c.drop_last = 0;
    c.fixed_masks = 1;
    return c;
}

/* The ring's fill (prefetch.h): batch g into slot k. */
static mpx_status fill(void *owner, int k, int64_t g) {
    mpx_mlm_loader *L = owner;
    slot *sl = &L->slots[k];
    int64_t epoch;
    int B = L->cfg.batch_size, T = L->T, count = mpx_epoch_order_batch(&L->order, g, &epoch);
    sl->n = count;
    sl->n_predict = 0;
    for (int j = 0; j < count; j++) {
        int64_t ex = mpx_epoch_order_example(&L->order, g, j);
        size_t o = (size_t)j * T;
        int k;
        mpx_status st = mpx_mlm_example(L->m, L->cfg.split, ex, L->cfg.seed,
                                        L->cfg.fixed_masks ? 0 : epoch, sl->ids + o,
                                        sl->labels + o, sl->attn + o, sl->segments + o, &k);
        if (st != MPX_OK)
            return mpx_fail(st, "epoch %lld batch %lld: %s", (long long)epoch,
                            (long long)(g % L->order.bpe), mpx_error_message());
        sl->n_predict += k;
    }
    for (size_t p = (size_t)count * T; p < (size_t)B * T; p++) {
        sl->ids[p] = L->pad;
        sl->labels[p] = -1;
        sl->attn[p] = 0;
        sl->segments[p] = 0;
    }
    return MPX_OK;
}

mpx_status mpx_mlm_loader_create(const mpx_mlm *m, const mpx_mlm_loader_config *cfg,
                                 mpx_loader_pos start, mpx_mlm_loader **out) {
    *out = NULL;
    if (cfg->batch_size < 1 || cfg->prefetch < 1)
        return mpx_fail(MPX_ERR_INPUT, "MLM loader: batch_size %d and prefetch %d must be >= 1",
                        cfg->batch_size, cfg->prefetch);
    if (cfg->split != MPX_SPLIT_TRAIN && cfg->split != MPX_SPLIT_TEST)
        return mpx_fail(MPX_ERR_INPUT, "MLM loader: unknown split %d", (int)cfg->split);
    int64_t n = mpx_mlm_count(m, cfg->split);
    if (n < 1 || n >= ((int64_t)1 << 32))
        return mpx_fail(MPX_ERR_INPUT, "MLM loader: the %s split has %lld sequences (1 .. 2^32 - 1 "
                        "supported)", cfg->split == MPX_SPLIT_TEST ? "held-out" : "training",
                        (long long)n);
    int64_t B = cfg->batch_size;
    mpx_epoch_order order;
    MPX_TRY(mpx_epoch_order_init(&order, "MLM loader", "sequences", n, cfg->batch_size,
                                 cfg->drop_last, cfg->shuffle, cfg->seed, start, 20));
    mpx_mlm_loader *L = calloc(1, sizeof *L);
    if (!L) {
        mpx_epoch_order_free(&order);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory creating the MLM loader");
    }
    L->cfg = *cfg;
    L->m = m;
    L->T = mpx_mlm_seq_len(m);
    L->pad = mpx_tokenizer_special(mpx_mlm_tokenizer(m), MPX_TOK_PAD);
    L->order = order;
    L->nslots = cfg->prefetch + 1;
    size_t per = (size_t)B * L->T;
    L->slots = calloc((size_t)L->nslots, sizeof *L->slots);
    int ok = L->slots != NULL;
    for (int i = 0; ok && i < L->nslots; i++) {
        L->slots[i].ids = calloc(per, sizeof(int32_t));
        L->slots[i].labels = calloc(per, sizeof(int32_t));
        L->slots[i].attn = calloc(per, sizeof(int32_t));
        L->slots[i].segments = calloc(per, sizeof(int32_t));
        ok = L->slots[i].ids && L->slots[i].labels && L->slots[i].attn && L->slots[i].segments;
    }
    if (!ok) {
        mpx_mlm_loader_free(L);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory for %d MLM batches of [%lld, %d]",
                        cfg->prefetch + 1, (long long)B, mpx_mlm_seq_len(m));
    }
    mpx_status st = mpx_prefetch_start(L->nslots, L->order.start_g, fill, L, &L->ring);
    if (st != MPX_OK) {
        mpx_mlm_loader_free(L);
        return st;
    }
    *out = L;
    return MPX_OK;
}

mpx_status mpx_mlm_loader_next(mpx_mlm_loader *L, mpx_mlm_batch *out) {
    int k;
    int64_t g;
    MPX_TRY(mpx_prefetch_next(L->ring, &k, &g));
    const slot *sl = &L->slots[k];
    out->ids = sl->ids;
    out->labels = sl->labels;
    out->attn = sl->attn;
    out->segments = sl->segments;
    out->n = sl->n;
    out->batch_size = L->cfg.batch_size;
    out->seq_len = L->T;
    out->n_predict = sl->n_predict;
    out->pos = mpx_epoch_order_pos(&L->order, g);
    return MPX_OK;
}

mpx_loader_pos mpx_mlm_loader_position(const mpx_mlm_loader *L) {
    return mpx_epoch_order_pos(&L->order, L->order.start_g + mpx_prefetch_consumed(L->ring));
}

int64_t mpx_mlm_loader_batches_per_epoch(const mpx_mlm_loader *L) { return L->order.bpe; }

void mpx_mlm_loader_free(mpx_mlm_loader *L) {
    if (!L) return;
    mpx_prefetch_stop(L->ring);
    for (int i = 0; L->slots && i < L->nslots; i++) {
        free(L->slots[i].ids);
        free(L->slots[i].labels);
        free(L->slots[i].attn);
        free(L->slots[i].segments);
    }
    free(L->slots);
    mpx_epoch_order_free(&L->order);
    free(L);
}
