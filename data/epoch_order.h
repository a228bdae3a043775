/* epoch_order.h — which example fills row j of global batch g (internal to data/): the order
 * the image, detection and masked-LM loaders share, so their batches follow one rule.
 *
 * Batch g (counted from epoch 0, batch 0) is epoch g / bpe, index g % bpe. With shuffle, epoch
 * e's order is a Fisher-Yates permutation drawn from stream MPX_RNG_DATA_ORDER starting at
 * counter e << 40; without, the dataset's order. A batch's examples are therefore a pure
 * function of (seed, g). The permutation belongs to the prefetch worker: only fills touch it.
 */
#ifndef MPX_DATA_EPOCH_ORDER_H
#define MPX_DATA_EPOCH_ORDER_H

#include <stdint.h>

#include "mpx/data.h"
#include "mpx/error.h"

typedef struct {
    int64_t n, batch, bpe; /* examples, batch size, batches per epoch */
    int64_t start_g;       /* the global batch the loader starts at */
    int shuffle;
    uint64_t seed;
    int64_t *perm, perm_epoch;
} mpx_epoch_order;

/* n >= 1 examples in batches of `batch` (drop_last: only full ones), starting at `start`, whose
 * epoch must lie below 2^max_epochs_log2. Refusals name the loader (`who`) and what it counts
 * (`what`, plural). On failure nothing is held. */
mpx_status mpx_epoch_order_init(mpx_epoch_order *o, const char *who, const char *what, int64_t n,
                                int batch, int drop_last, int shuffle, uint64_t seed,
                                mpx_loader_pos start, int max_epochs_log2);
/* Batch g: its epoch and its number of rows (the last batch of an epoch may be short);
 * draws the epoch's permutation when g starts a new one. Worker only. */
int mpx_epoch_order_batch(mpx_epoch_order *o, int64_t g, int64_t *epoch);
/* The example in row j of batch g (after mpx_epoch_order_batch for g). */
int64_t mpx_epoch_order_example(const mpx_epoch_order *o, int64_t g, int j);
mpx_loader_pos mpx_epoch_order_pos(const mpx_epoch_order *o, int64_t g);
void mpx_epoch_order_free(mpx_epoch_order *o);

#endif
