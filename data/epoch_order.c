/* epoch_order.c — batches per epoch, start positions and each epoch's permutation for the batch
 * loaders (the rule is in epoch_order.h). */
#include <stdlib.h>

#include "data/epoch_order.h"
#include "mpx/rng.h"

mpx_status mpx_epoch_order_init(mpx_epoch_order *o, const char *who, const char *what, int64_t n,
                                int batch, int drop_last, int shuffle, uint64_t seed,
                                mpx_loader_pos start, int max_epochs_log2) {
    *o = (mpx_epoch_order){.n = n, .batch = batch, .shuffle = shuffle, .seed = seed,
                           .perm_epoch = -1};
    if (n < 1 || batch < 1)
        return mpx_fail(MPX_ERR_INPUT, "%s: %lld %s in batches of %d (both must be >= 1)", who,
                        (long long)n, what, batch);
    o->bpe = drop_last ? n / batch : (n + batch - 1) / batch;
    if (o->bpe == 0)
        return mpx_fail(MPX_ERR_INPUT, "%s: %lld %s make no full batch of %d (drop_last)", who,
                        (long long)n, what, batch);
    if (start.epoch < 0 || start.epoch >= ((int64_t)1 << max_epochs_log2) || start.batch < 0 ||
        start.batch >= o->bpe)
        return mpx_fail(MPX_ERR_INPUT,
                        "%s: start position epoch %lld batch %lld is outside epochs [0, 2^%d) "
                        "and batches [0, %lld)",
                        who, (long long)start.epoch, (long long)start.batch, max_epochs_log2,
                        (long long)o->bpe);
    o->start_g = start.epoch * o->bpe + start.batch;
    if (shuffle && !(o->perm = malloc((size_t)n * sizeof *o->perm)))
        return mpx_fail(MPX_ERR_NOMEM, "%s: out of memory for the order of %lld %s", who,
                        (long long)n, what);
    return MPX_OK;
}

static void shuffle_epoch(mpx_epoch_order *o, int64_t epoch) {
    for (int64_t i = 0; i < o->n; i++) o->perm[i] = i;
    mpx_rng r = mpx_rng_make(o->seed, MPX_RNG_DATA_ORDER, (uint64_t)epoch << 40);
    for (int64_t i = o->n - 1; i > 0; i--) {
        int64_t j = mpx_rng_below(&r, (uint32_t)(i + 1));
        int64_t t = o->perm[i];
        o->perm[i] = o->perm[j];
        o->perm[j] = t;
    }
    o->perm_epoch = epoch;
}

int mpx_epoch_order_batch(mpx_epoch_order *o, int64_t g, int64_t *epoch) {
    *epoch = g / o->bpe;
    if (o->shuffle && o->perm_epoch != *epoch) shuffle_epoch(o, *epoch);
    int64_t first = (g % o->bpe) * o->batch;
    return (int)(o->n - first < o->batch ? o->n - first : o->batch);
}

int64_t mpx_epoch_order_example(const mpx_epoch_order *o, int64_t g, int j) {
    int64_t i = (g % o->bpe) * o->batch + j;
    return o->shuffle ? o->perm[i] : i;
}

mpx_loader_pos mpx_epoch_order_pos(const mpx_epoch_order *o, int64_t g) {
    mpx_loader_pos p = {g / o->bpe, g % o->bpe};
    return p;
}

void mpx_epoch_order_free(mpx_epoch_order *o) {
    free(o->perm);
    o->perm = NULL;
}
