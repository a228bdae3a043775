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

mpx_status eval_units_add(eval_units *u, double loss, double correct, double count) {
    if (u->n == u->cap) {
        int64_t cap = u->cap ? 2 * u->cap : 1024;
        double *l = realloc(u->loss, (size_t)cap * sizeof *l);
        if (l) u->loss = l;
        double *c = realloc(u->correct, (size_t)cap * sizeof *c);
        if (c) u->correct = c;
        double *k = realloc(u->count, (size_t)cap * sizeof *k);
        if (k) u->count = k;
        if (!l || !c || !k) return mpx_fail(MPX_ERR_NOMEM, "out of memory");
        u->cap = cap;
    }
    u->loss[u->n] = loss;
    u->correct[u->n] = correct;
    u->count[u->n++] = count;
    return MPX_OK;
}

void eval_units_free(eval_units *u) {
    free(u->loss);
    free(u->correct);
    free(u->count);
    *u = (eval_units){0};
}

double eval_row_xent(const float *row, int64_t classes, int64_t label) {
    double m = row[0], s = 0;
    for (int64_t k = 1; k < classes; k++)
        if (row[k] > m) m = row[k];
    for (int64_t k = 0; k < classes; k++) s += exp((double)row[k] - m);
    return m + log(s) - (double)row[label];
}

typedef struct {
    const double *num, *den;
    double scale;
} ratio;

/* scale * sum(num[idx]) / sum(den[idx]) */
static mpx_status ratio_stat(void *ctx, const int64_t *idx, int64_t n, double *value) {
    const ratio *r = ctx;
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += r->num[idx[i]];
        den += r->den[idx[i]];
    }
    *value = den > 0 ? r->scale * num / den : NAN;
    return MPX_OK;
}

mpx_status eval_units_report(const eval_units *u, int resamples, FILE *out, eval_boot *metric,
                             eval_boot *loss) {
    if (resamples > 0) {
        ratio acc = {u->correct, u->count, 100.0}, nats = {u->loss, u->count, 1.0};
        MPX_TRY(eval_bootstrap(u->n, resamples, ratio_stat, &acc, metric));
        MPX_TRY(eval_bootstrap(u->n, resamples, ratio_stat, &nats, loss));
    }
    if (out) {
        fprintf(out, "unit\tloss\tcorrect\tcount\n");
        for (int64_t i = 0; i < u->n; i++)
            fprintf(out, "%lld\t%.17g\t%.17g\t%.17g\n", (long long)i, u->loss[i], u->correct[i],
                    u->count[i]);
        if (ferror(out)) return mpx_fail(MPX_ERR_IO, "writing the evaluation units failed");
    }
    return MPX_OK;
}
