/* moments.c — mean / std / extremes of an FP32 array and the quantile of its nonzero magnitudes,
 * the statistics adaptive loss scaling and the run log use.
 *
 * Determinism: the array is cut into fixed blocks of MBLOCK elements whatever the thread count;
 * each block is reduced in double on its own (two passes: sum, then squared deviations from the
 * block mean), and the block partials are merged strictly in block order (Chan et al.'s pairwise
 * update). The result therefore depends on n and the data only, never on the threads.
 */
#include <math.h>
#include <stdlib.h>

#include "mpx/numerics.h"

enum {
    MBLOCK = 4096, /* elements per block partial */
    GROUP = 256,   /* block partials computed in parallel, then merged, per round */
    PAR_MIN = 1 << 16
};

typedef struct {
    double n, mean, m2; /* m2: sum of squared deviations from mean */
    float min, max, absmax;
    int all_finite;
} partial;

static void block_partial(const float *x, size_t m, partial *p) {
    double sum = 0;
    float mn = INFINITY, mx = -INFINITY, amax = 0;
    int finite = 1;
    for (size_t i = 0; i < m; i++) {
        float v = x[i];
        sum += v;
        if (v < mn) mn = v; /* comparisons with NaN are false: NaN is ignored */
        if (v > mx) mx = v;
        if (fabsf(v) > amax) amax = fabsf(v);
        finite &= isfinite(v) != 0;
    }
    double mean = sum / (double)m, m2 = 0;
    for (size_t i = 0; i < m; i++) {
        double d = (double)x[i] - mean;
        m2 += d * d;
    }
    p->n = (double)m;
    p->mean = mean;
    p->m2 = m2;
    p->min = mn;
    p->max = mx;
    p->absmax = amax;
    p->all_finite = finite;
}

/* acc <- acc merged with p (acc->n may be 0). */
static void merge(partial *acc, const partial *p) {
    double n = acc->n + p->n;
    double delta = p->mean - acc->mean;
    acc->mean += delta * (p->n / n);
    acc->m2 += p->m2 + delta * delta * (acc->n * p->n / n);
    acc->n = n;
    if (p->min < acc->min) acc->min = p->min;
    if (p->max > acc->max) acc->max = p->max;
    if (p->absmax > acc->absmax) acc->absmax = p->absmax;
    acc->all_finite &= p->all_finite;
}

void mpx_moments_f32(const float *x, size_t n, mpx_moments *out) {
    partial acc = {0, 0, 0, INFINITY, -INFINITY, 0, 1};
    partial parts[GROUP];
    const size_t nblocks = (n + MBLOCK - 1) / MBLOCK;
    for (size_t g0 = 0; g0 < nblocks; g0 += GROUP) {
        const long ng = (long)(nblocks - g0 < GROUP ? nblocks - g0 : GROUP);
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
        for (long b = 0; b < ng; b++) {
            size_t i0 = (g0 + (size_t)b) * MBLOCK;
            block_partial(x + i0, n - i0 < MBLOCK ? n - i0 : MBLOCK, &parts[b]);
        }
        for (long b = 0; b < ng; b++) merge(&acc, &parts[b]);
    }
    out->n = n;
    out->mean = n ? acc.mean : 0.0;
    out->std = n ? sqrt(acc.m2 / (double)n) : 0.0;
    out->all_finite = acc.all_finite;
    out->absmax = acc.absmax;
    if (n == 0) {
        out->min = out->max = 0.0f;
    } else if (acc.min > acc.max) { /* every element is NaN */
        out->min = out->max = out->absmax = NAN;
    } else {
        out->min = acc.min;
        out->max = acc.max;
    }
}

/* ---- selection ---- */

static void swapf(float *a, float *b) {
    float t = *a;
    *a = *b;
    *b = t;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The k-th smallest (0-based) of v[0..m) (no NaN), reordering v. Quickselect with a
 * median-of-three pivot and a three-way partition (gradients hold many equal values); after
 * 2 log2(m) + 8 rounds without converging it sorts what is left, so the worst case stays
 * O(m log m). */
static float select_kth(float *v, size_t m, size_t k) {
    size_t lo = 0, hi = m; /* the answer is in v[lo..hi) */
    int budget = 8;
    for (size_t t = m; t > 1; t >>= 1) budget += 2;
    while (hi - lo > 1) {
        if (budget-- == 0) {
            qsort(v + lo, hi - lo, sizeof(float), cmp_float);
            return v[k];
        }
        size_t mid = lo + (hi - lo) / 2;
        float a = v[lo], b = v[mid], c = v[hi - 1];
        float pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        /* v[lo..lt) < pivot, v[lt..i) == pivot, v[gt..hi) > pivot */
        size_t lt = lo, i = lo, gt = hi;
        while (i < gt) {
            if (v[i] < pivot)
                swapf(&v[lt++], &v[i++]);
            else if (v[i] > pivot)
                swapf(&v[i], &v[--gt]);
            else
                i++;
        }
        if (k < lt)
            hi = lt;
        else if (k >= gt)
            lo = gt;
        else
            return pivot;
    }
    return v[lo];
}

float mpx_abs_quantile_nonzero(const float *x, size_t n, double q, float *scratch) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a != 0 && !isnan(a)) scratch[m++] = a;
    }
    if (m == 0) return 0.0f;
    /* The smallest value v with at least a fraction q of the elements <= v: rank ceil(q m). */
    double r = ceil(q * (double)m);
    size_t k = r <= 1 ? 0 : (r >= (double)m ? m - 1 : (size_t)r - 1);
    return select_kth(scratch, m, k);
}
