/* eval_boot.c — bootstrap of an evaluation metric over its units (eval_boot.h). */
#include <math.h>
#include <stdlib.h>

#include "eval_boot.h"
#include "mpx/rng.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Linear interpolation between order statistics of sorted v[0..n) at quantile q. */
static double quantile(const double *v, int n, double q) {
    double pos = q * (n - 1);
    int i = (int)floor(pos);
    if (i >= n - 1) return v[n - 1];
    return v[i] + (pos - i) * (v[i + 1] - v[i]);
}

mpx_status eval_bootstrap(int64_t n, int resamples, eval_boot_stat stat, void *ctx, eval_boot *out) {
    out->units = n;
    out->sd = out->lo = out->hi = NAN;
    if (n < 2 || resamples < 2) return MPX_OK;
    if (n > UINT32_MAX) return mpx_fail(MPX_ERR_INPUT, "bootstrap: %lld units, too many", (long long)n);
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    double *v = malloc((size_t)resamples * sizeof *v);
    mpx_status st = idx && v ? MPX_OK : mpx_fail(MPX_ERR_NOMEM, "out of memory");
    mpx_rng r = mpx_rng_make(0, MPX_RNG_BOOTSTRAP, 0);
    double sum = 0;
    for (int b = 0; b < resamples && st == MPX_OK; b++) {
        for (int64_t i = 0; i < n; i++) idx[i] = mpx_rng_below(&r, (uint32_t)n);
        st = stat(ctx, idx, n, &v[b]);
        sum += v[b];
    }
    if (st == MPX_OK) {
        double mean = sum / resamples, ss = 0;
        for (int b = 0; b < resamples; b++) ss += (v[b] - mean) * (v[b] - mean);
        out->sd = sqrt(ss / (resamples - 1));
        qsort(v, (size_t)resamples, sizeof *v, cmp_double);
        out->lo = quantile(v, resamples, 0.05);
        out->hi = quantile(v, resamples, 0.95);
    }
    free(idx);
    free(v);
    return st;
}

mpx_status eval_ratio_stat(void *ctx, const int64_t *idx, int64_t n, double *value) {
    const eval_ratio *r = ctx;
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += r->num[idx[i]];
        den += r->den ? r->den[idx[i]] : 1.0;
    }
    *value = den > 0 ? r->scale * num / den : NAN;
    return MPX_OK;
}
