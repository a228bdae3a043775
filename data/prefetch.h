/* prefetch.h — the worker thread and ring of batch slots behind every batch loader (internal
 * to data/): the image, detection and masked-LM loaders differ only in what a slot holds and
 * how it is filled.
 *
 * A loader keeps its slots; the ring decides which slot gets which global batch number g and
 * when. The worker fills g = start, start + 1, ... into slots 0, 1, ... in turn, at most
 * nslots - 1 batches ahead of the caller, who holds the slot of the batch it was last given.
 * A fill that fails stops the worker; its status and message (the worker's error message when
 * the fill returned) reach the caller's next mpx_prefetch_next, and every later one.
 */
#ifndef MPX_DATA_PREFETCH_H
#define MPX_DATA_PREFETCH_H

#include <stdint.h>

#include "mpx/error.h"

/* Fill slot `slot` with global batch `g`; MPX_OK, or a failure with its message set. */
typedef mpx_status (*mpx_prefetch_fill)(void *owner, int slot, int64_t g);

typedef struct mpx_prefetch mpx_prefetch;

/* nslots >= 2 (the caller holds one). */
mpx_status mpx_prefetch_start(int nslots, int64_t start, mpx_prefetch_fill fill, void *owner,
                              mpx_prefetch **out);
/* Release the slot the caller holds and wait for the next batch: its slot and g. */
mpx_status mpx_prefetch_next(mpx_prefetch *p, int *slot, int64_t *g);
/* Batches handed to the caller so far. */
int64_t mpx_prefetch_consumed(const mpx_prefetch *p);
/* Stop the worker (it finishes the fill it is in) and free everything. NULL is fine. */
void mpx_prefetch_stop(mpx_prefetch *p);

#endif
