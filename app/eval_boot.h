/* eval_boot.h — the evaluation set's own sampling noise (internal to the app layer).
 *
 * `mpx eval --bootstrap N` resamples the evaluation units (images for classify and detect,
 * sequences for mlm) with replacement N times and recomputes the metric on each resample; its
 * spread says how much the finite held-out set alone moves a run's number. `--units FILE`
 * writes each unit's loss and hits, so that two runs evaluated on the same set can be
 * bootstrapped as a pair (experiments/eval_noise.py): the noise of their difference, which is
 * what a comparison of two methods sees. The resamples come from a fixed Philox stream, so the
 * numbers repeat exactly.
 */
#ifndef MPX_EVAL_BOOT_H
#define MPX_EVAL_BOOT_H

#include <stdint.h>
#include <stdio.h>

#include "mpx/error.h"

typedef struct {
    int64_t units;
    double sd, lo, hi; /* sd over resamples; 5th and 95th percentiles (a 90% interval) */
} eval_boot;

/* stat(ctx, idx, n, &value): the statistic on the resample idx[0..n) of unit indices. */
typedef mpx_status (*eval_boot_stat)(void *ctx, const int64_t *idx, int64_t n, double *value);

/* `resamples` resamples of n units through stat; out->units = n. n < 2 or resamples < 2: NaNs. */
mpx_status eval_bootstrap(int64_t n, int resamples, eval_boot_stat stat, void *ctx, eval_boot *out);

/* Per-unit results: loss summed over the unit's predictions (nats), correct predictions, and
 * predictions (1 per image; the masked tokens of a sequence). */
typedef struct {
    double *loss, *correct, *count;
    int64_t n, cap;
} eval_units;

mpx_status eval_units_add(eval_units *u, double loss, double correct, double count);
void eval_units_free(eval_units *u);
/* Natural-log cross-entropy of one row of logits [classes] against `label`, in double. */
double eval_row_xent(const float *row, int64_t classes, int64_t label);
/* With resamples > 0: the bootstrap of the metric (100 correct / count) into *metric and of
 * the mean loss (loss / count) into *loss, over the same resamples. With out: the units as
 * TSV (unit, loss, correct, count). */
mpx_status eval_units_report(const eval_units *u, int resamples, FILE *out, eval_boot *metric,
                             eval_boot *loss);

#endif
