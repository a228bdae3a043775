/* eval_boot.h — the evaluation set's own sampling noise (internal to the app layer).
 *
 * `mpx eval --bootstrap N` resamples the evaluation units (images for classify and detect,
 * batches for mlm, whose loss is only known per batch) with replacement N times and
 * recomputes the metric on each resample; its spread says how much of a difference between
 * two runs the finite held-out set alone can produce. The resamples are drawn from a fixed
 * Philox stream, so the numbers repeat exactly.
 */
#ifndef MPX_EVAL_BOOT_H
#define MPX_EVAL_BOOT_H

#include <stdint.h>

#include "mpx/error.h"

typedef struct {
    int64_t units;
    double sd, lo, hi; /* sd over resamples; 5th and 95th percentiles (a 90% interval) */
} eval_boot;

/* stat(ctx, idx, n, &value): the metric on the resample idx[0..n) of unit indices. */
typedef mpx_status (*eval_boot_stat)(void *ctx, const int64_t *idx, int64_t n, double *value);

/* `resamples` resamples of n units through stat; out->units = n. n < 2 or resamples < 2: NaNs. */
mpx_status eval_bootstrap(int64_t n, int resamples, eval_boot_stat stat, void *ctx, eval_boot *out);

/* scale * sum(num[idx]) / sum(den[idx]) (den NULL: 1 a unit): accuracy in percent over
 * images or batches (scale 100), mean loss over batches (scale 1). */
typedef struct {
    const double *num, *den;
    double scale;
} eval_ratio;
mpx_status eval_ratio_stat(void *ctx, const int64_t *idx, int64_t n, double *value);

#endif
