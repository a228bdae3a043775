/* moments.c — mean / std / extremes of an FP32 array and the quantile of its nonzero magnitudes
 * (to the power of two above it),
 * the statistics adaptive loss scaling and the run log use.
 *
 * Determinism: the array is cut into fixed blocks of MBLOCK elements whatever the thread count;
 * each block is reduced in double on its own (two passes: sum, then squared deviations from the
 * block mean, each over MPX_K_LANES fixed interleaved accumulators), and the block partials are
 * merged strictly in block order (Chan et al.'s pairwise update). The result therefore depends on n
 * and the data only, never on the threads.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "lib/numerics/kernels.h"
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

/* One block: sum and squared deviations in double over MPX_K_LANES interleaved accumulators
 * (fixed lanes, so the order, and the result, depend on the data only; independent chains, so
 * no add waits on the previous one), extremes per lane too (kernels.h; the AVX2 loops give the
 * same bits). max |x| and the finite flag need no work of their own: a NaN fails every
 * comparison, so min/max ignore it as absmax must, and max |x| = max(-min, max); a sum of
 * finite floats cannot overflow a double, so the block is all finite exactly when its sum is. */
static void block_partial(const float *x, size_t m, int avx2, partial *p) {
    double s[MPX_K_LANES] = {0}, q[MPX_K_LANES] = {0};
    float mn[MPX_K_LANES], mx[MPX_K_LANES];
    for (int j = 0; j < MPX_K_LANES; j++) mn[j] = INFINITY, mx[j] = -INFINITY;
    (avx2 ? mpx_k_lane_sums_avx2 : mpx_k_lane_sums_c)(x, m, s, mn, mx);
    double sum = 0;
    float lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < MPX_K_LANES; j++) {
        sum += s[j];
        lo = mn[j] < lo ? mn[j] : lo;
        hi = mx[j] > hi ? mx[j] : hi;
    }
    const double mean = sum / (double)m;
    (avx2 ? mpx_k_lane_sqdev_avx2 : mpx_k_lane_sqdev_c)(x, m, mean, q);
    double m2 = 0;
    for (int j = 0; j < MPX_K_LANES; j++) m2 += q[j];
    p->n = (double)m;
    p->mean = mean;
    p->m2 = m2;
    p->min = lo;
    p->max = hi;
    p->absmax = lo > hi ? 0.0f : fabsf(fmaxf(-lo, hi)); /* lo > hi: every element NaN */
    p->all_finite = isfinite(sum) != 0;
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
    const int avx2 = mpx_impl_avx2();
    partial acc = {0, 0, 0, INFINITY, -INFINITY, 0, 1};
    partial parts[GROUP];
    const size_t nblocks = (n + MBLOCK - 1) / MBLOCK;
    for (size_t g0 = 0; g0 < nblocks; g0 += GROUP) {
        const long ng = (long)(nblocks - g0 < GROUP ? nblocks - g0 : GROUP);
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
        for (long b = 0; b < ng; b++) {
            size_t i0 = (g0 + (size_t)b) * MBLOCK;
            block_partial(x + i0, n - i0 < MBLOCK ? n - i0 : MBLOCK, avx2, &parts[b]);
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

/* Counts per binade: bin e + BIAS holds |x| in [2^e, 2^(e+1)), e from -149 (the smallest FP32
 * subnormal) to 127, and bin 128 + BIAS holds Inf; `exact` counts the values equal to 2^e. */
enum { QBIAS = 149, QBINS = 149 + 129 };

static void binade_of(float a, int *e, int *exact) {
    union { float f; uint32_t u; } b = {a};
    uint32_t field = b.u >> 23, mant = b.u & 0x7fffffu;
    if (field == 0xff) { /* Inf (NaN is filtered by the caller) */
        *e = 128;
        *exact = 1;
    } else if (field == 0) { /* subnormal: 2^-149 * mant, mant in [1, 2^23) */
        int top = 31 - __builtin_clz(mant);
        *e = top - 149;
        *exact = (mant & (mant - 1)) == 0;
    } else {
        *e = (int)field - 127;
        *exact = mant == 0;
    }
}

float mpx_abs_quantile_ceil_pow2(const float *x, size_t n, double q, float scale) {
    size_t cnt[QBINS] = {0}, exact[QBINS] = {0}, m = 0;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i] * scale);
        if (a == 0 || isnan(a)) continue;
        int e, ex;
        binade_of(a, &e, &ex);
        cnt[e + QBIAS]++;
        exact[e + QBIAS] += (size_t)ex;
        m++;
    }
    if (m == 0) return 0.0f;
    /* The element of rank ceil(q m) (1-based; q = 0 gives the minimum). Within a binade the
     * exact power 2^e is the smallest value, so the rank lands on it when it is among the
     * first exact[e] of the bin; any other value of the bin rounds up to 2^(e+1). */
    double r = ceil(q * (double)m);
    size_t k = r <= 1 ? 1 : (r >= (double)m ? m : (size_t)r);
    for (int b = 0; b < QBINS; b++) {
        if (k > cnt[b]) {
            k -= cnt[b];
            continue;
        }
        int e = b - QBIAS;
        if (e == 128) return INFINITY;
        return ldexpf(1.0f, k <= exact[b] ? e : e + 1);
    }
    return INFINITY; /* not reached: the counts sum to m */
}
