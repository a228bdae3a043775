/* test_moments.c — mpx_moments_f32, mpx_absmax_f32, mpx_abs_quantile_ceil_pow2, and the CPU
 * backend's accumulate_absmax (a branch merge's sum and magnitudes in one pass); the vector
 * (AVX2) and portable versions of the magnitude loops against each other, bit for bit.
 *
 * Moments against a long-double two-pass loop, bit-identical with 1 and 2 threads; extremes and
 * the finite flag exactly; the quantile against sorting (then rounding up to a power of two).
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "fp_ref.h"
#include "mpx/backend.h"
#include "mpx/numerics.h"
#include "mpx/rng.h"
#include "mpx/runtime.h"
#include "testutil.h"

/* Reference: long double, two passes. */
static void ref_moments(const float *x, size_t n, long double *mean, long double *std) {
    long double s = 0, q = 0;
    for (size_t i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (size_t i = 0; i < n; i++) q += (x[i] - *mean) * (x[i] - *mean);
    *std = sqrtl(q / n);
}

static void test_moments_values(size_t n, float mean, float std, uint64_t seed) {
    float *x = malloc(n * sizeof *x);
    NEED(x);
    mpx_test_normal(x, n, mean, std, seed);
    x[n / 3] = 0.0f;
    mpx_moments m1, m2;
    omp_set_num_threads(2);
    mpx_moments_f32(x, n, &m1);
    omp_set_num_threads(1);
    mpx_moments_f32(x, n, &m2);
    omp_set_num_threads(2);
    long double rm, rs;
    ref_moments(x, n, &rm, &rs);
    /* Tolerance: block sums of <= 4096 terms in double and a merge over n/4096 blocks: the
     * relative error of the mean is ~ (4096 + n/4096) * 2^-53 * (sum |x| / |sum x|) and of the
     * std similar; with |mean| >= std / 10 here sum|x| / |sum x| <= ~10, so 1e-11 relative (of
     * the larger of |mean| and std) is far above what correct code produces and far below any
     * real bug (a lost element changes the mean by ~1/n = 1e-6). */
    double scale = fmax(fabs((double)rm), (double)rs);
    CHECK(fabs(m1.mean - (double)rm) <= 1e-11 * scale, "n=%zu mean %.17g vs %.17Lg", n, m1.mean,
          rm);
    CHECK(fabs(m1.std - (double)rs) <= 1e-11 * scale, "n=%zu std %.17g vs %.17Lg", n, m1.std, rs);
    CHECK(memcmp(&m1.mean, &m2.mean, sizeof(double)) == 0 &&
              memcmp(&m1.std, &m2.std, sizeof(double)) == 0,
          "n=%zu: 1 and 2 threads give different bits", n);
    float mn = x[0], mx = x[0], am = 0;
    for (size_t i = 0; i < n; i++) {
        mn = fminf(mn, x[i]);
        mx = fmaxf(mx, x[i]);
        am = fmaxf(am, fabsf(x[i]));
    }
    CHECK(m1.min == mn && m1.max == mx && m1.absmax == am && m1.all_finite && m1.n == n,
          "n=%zu: extremes or flags wrong", n);
    free(x);
}

static void test_moments_special(void) {
    float x[6] = {1.0f, -3.0f, NAN, 2.0f, 0.0f, 5.0f};
    mpx_moments m;
    mpx_moments_f32(x, 6, &m);
    CHECK(!m.all_finite && isnan(m.mean) && m.min == -3.0f && m.max == 5.0f && m.absmax == 5.0f,
          "NaN: not finite, mean NaN, extremes ignore it (min %g max %g)", (double)m.min,
          (double)m.max);
    x[2] = -INFINITY;
    mpx_moments_f32(x, 6, &m);
    CHECK(!m.all_finite && m.min == -INFINITY && m.absmax == INFINITY, "Inf");
    /* The same in the vectorised body of a block and across blocks: a NaN at element 8203
     * (block 2, body), then -Inf at 19; a whole block of NaN beside finite blocks; -0 only. */
    enum { NB = 3 * 4096 + 21 };
    static float zb[NB];
    for (int i = 0; i < NB; i++) zb[i] = (float)(i % 7) - 3.0f;
    zb[8203] = NAN;
    mpx_moments_f32(zb, NB, &m);
    CHECK(!m.all_finite && isnan(m.mean) && m.min == -3.0f && m.max == 3.0f && m.absmax == 3.0f,
          "NaN in a block's body: min %g max %g absmax %g", (double)m.min, (double)m.max,
          (double)m.absmax);
    zb[19] = -INFINITY;
    mpx_moments_f32(zb, NB, &m);
    CHECK(!m.all_finite && m.min == -INFINITY && m.max == 3.0f && m.absmax == INFINITY,
          "-Inf in a block's body");
    for (int i = 0; i < NB; i++) zb[i] = i < 4096 ? NAN : 0.5f;
    mpx_moments_f32(zb, NB, &m);
    CHECK(!m.all_finite && m.min == 0.5f && m.max == 0.5f && m.absmax == 0.5f,
          "a block of NaN beside finite ones: min %g max %g absmax %g", (double)m.min,
          (double)m.max, (double)m.absmax);
    for (int i = 0; i < NB; i++) zb[i] = -0.0f;
    mpx_moments_f32(zb, NB, &m);
    CHECK(m.all_finite && m.mean == 0 && m.std == 0 && m.absmax == 0 && !signbit(m.absmax),
          "-0 only: absmax %g", (double)m.absmax);
    /* Hand-computed: {1, 2, 3, 4}: mean 2.5, population variance 1.25. */
    float y[4] = {1, 2, 3, 4};
    mpx_moments_f32(y, 4, &m);
    CHECK(m.mean == 2.5 && fabs(m.std - sqrt(1.25)) < 1e-15 && m.all_finite, "{1,2,3,4}");
    mpx_moments_f32(y, 0, &m);
    CHECK(m.n == 0 && m.mean == 0 && m.std == 0 && m.all_finite, "empty");
    /* Large offset, tiny spread: naive E[x^2] - E[x]^2 would lose every digit. 1e4 + {0, 1}
     * alternating: mean 1e4 + 0.5, std 0.5 exactly. */
    size_t n = 100000;
    float *z = malloc(n * sizeof *z);
    NEED(z);
    for (size_t i = 0; i < n; i++) z[i] = 1e4f + (float)(i & 1);
    mpx_moments_f32(z, n, &m);
    CHECK(fabs(m.mean - 10000.5) < 1e-9 && fabs(m.std - 0.5) < 1e-9, "offset: mean %.12g std %.12g",
          m.mean, m.std);
    free(z);
}

static int cmpf(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The reference: the power of two at or above v > 0 (Inf stays Inf). */
static float ceil_pow2(float v) {
    if (isinf(v)) return v;
    int e;
    float f = frexpf(v, &e); /* v = f 2^e, f in [0.5, 1) */
    return f == 0.5f ? v : ldexpf(1.0f, e);
}

static void test_quantile(void) {
    const size_t n = 200001;
    float *x = malloc(n * sizeof *x), *sorted = malloc(n * sizeof *x);
    NEED(x && sorted);
    /* Many zeros (excluded), many duplicates and exact powers of two (FP16-rounded values), a
     * few NaN (ignored), FP32 subnormals and an Inf. */
    for (size_t i = 0; i < n; i++) {
        uint32_t w[4];
        mpx_philox(71, MPX_RNG_TEST, i, w);
        float v = mpx_round_to(MPX_F16, (float)exp2(-20.0 + 20.0 * (double)w[0] / 4294967296.0));
        if (w[1] % 16 == 1) v = ldexpf(1.0f, -(int)(w[2] % 40)); /* exact powers down to 2^-39 */
        if (w[1] % 64 == 2) v = ldexpf((float)(1 + w[2] % 1000), -149); /* FP32 subnormals */
        x[i] = w[1] % 4 == 0 ? 0.0f : (w[2] & 1 ? -v : v);
        if (w[3] % 10007 == 0) x[i] = NAN;
    }
    x[5] = -INFINITY;
    const float scales[] = {1.0f, 1024.0f, 0.75f};
    const double qs[] = {0.0, 0.001, 0.01, 0.25, 0.5, 0.99, 1.0};
    for (int si = 0; si < 3; si++) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            float a = fabsf(x[i] * scales[si]);
            if (a != 0 && !isnan(a)) sorted[m++] = a;
        }
        qsort(sorted, m, sizeof *sorted, cmpf);
        /* Definition: the smallest v with at least a fraction q of the nonzero |s x| <= v, i.e.
         * the element of rank ceil(q m) (1-based); q = 0 gives the minimum. */
        for (int k = 0; k < 7; k++) {
            double r = ceil(qs[k] * (double)m);
            size_t idx = r < 1 ? 0 : (size_t)r - 1;
            float want = ceil_pow2(sorted[idx]);
            float got = mpx_abs_quantile_ceil_pow2(x, n, qs[k], scales[si]);
            CHECK(got == want, "scale %g q=%g: %g, want %g (quantile %g)", (double)scales[si],
                  qs[k], (double)got, (double)want, (double)sorted[idx]);
        }
    }
    /* Hand-made: |x| nonzero = {1, 2, 3, 4} (zeros ignored): q=0.5 -> rank 2 -> 2 (exact);
     * q=0.51 -> 3 -> 4; q=0.26 -> rank 2 -> 2; q = 0.25 -> rank 1 -> 1. */
    float y[7] = {0, -4, 3, 0, -1, 2, 0};
    CHECK(mpx_abs_quantile_ceil_pow2(y, 7, 0.5, 1.0f) == 2.0f, "q=0.5 of {1,2,3,4}");
    CHECK(mpx_abs_quantile_ceil_pow2(y, 7, 0.51, 1.0f) == 4.0f, "q=0.51 of {1,2,3,4}");
    CHECK(mpx_abs_quantile_ceil_pow2(y, 7, 0.25, 1.0f) == 1.0f, "q=0.25 of {1,2,3,4}");
    CHECK(mpx_abs_quantile_ceil_pow2(y, 7, 1.0, 1.0f) == 4.0f, "q=1 of {1,2,3,4}");
    /* Within one binade the exact power sorts first: {2, 2.5, 3}: rank 1 -> 2, rank 2 -> 4. */
    float z[3] = {3, 2.5f, 2};
    CHECK(mpx_abs_quantile_ceil_pow2(z, 3, 0.3, 1.0f) == 2.0f, "exact power first");
    CHECK(mpx_abs_quantile_ceil_pow2(z, 3, 0.6, 1.0f) == 4.0f, "inside the binade");
    float zeros[3] = {0, -0.0f, 0};
    CHECK(mpx_abs_quantile_ceil_pow2(zeros, 3, 0.01, 1.0f) == 0.0f, "all zero -> 0");
    float nans[2] = {NAN, 0};
    CHECK(mpx_abs_quantile_ceil_pow2(nans, 2, 0.01, 1.0f) == 0.0f, "NaN ignored");
    free(x);
    free(sorted);
}

/* absmax: exact against a plain loop, over sizes that exercise the threaded path; any NaN or
 * Inf gives Inf; n = 0 gives 0. */
static void test_absmax(void) {
    const size_t n = 300007;
    float *x = malloc(n * sizeof *x);
    NEED(x);
    mpx_test_normal(x, n, 0, 1e-3f, 19);
    float want = 0;
    for (size_t i = 0; i < n; i++) want = fabsf(x[i]) > want ? fabsf(x[i]) : want;
    CHECK(mpx_absmax_f32(x, n) == want, "absmax %g, want %g", (double)mpx_absmax_f32(x, n), (double)want);
    x[n / 3] = -7.5f;
    CHECK(mpx_absmax_f32(x, n) == 7.5f, "negative extreme");
    x[n - 1] = NAN;
    CHECK(isinf(mpx_absmax_f32(x, n)), "NaN gives Inf");
    x[n - 1] = -INFINITY;
    CHECK(isinf(mpx_absmax_f32(x, n)), "-Inf gives Inf");
    CHECK(mpx_absmax_f32(x, 0) == 0.0f, "empty");
    free(x);
}

/* The fused entry equals absmax of both inputs (before the sum) and accumulate's bits. */
static void test_accumulate_absmax(void) {
    const mpx_backend *be = mpx_backend_cpu();
    const size_t n = 200003; /* above the threading threshold */
    float *x = malloc(n * sizeof *x), *acc = malloc(n * sizeof *acc), *ref = malloc(n * sizeof *ref);
    NEED(x && acc && ref);
    const float scales[] = {1.0f, 0x1p-7f, 1024.0f};
    for (int k = 0; k < 3; k++) {
        mpx_test_normal(x, n, 0, 3.0f, 40 + (uint64_t)k);
        mpx_test_normal(acc, n, 0, 1e-2f, 50 + (uint64_t)k);
        if (k == 2) x[n / 2] = NAN, acc[7] = -INFINITY;
        float want_a = mpx_absmax_f32(acc, n), want_x = mpx_absmax_f32(x, n);
        memcpy(ref, acc, n * sizeof *ref);
        be->accumulate(be, ref, x, n, scales[k]);
        float got_a = -1, got_x = -1;
        be->accumulate_absmax(be, acc, x, n, scales[k], &got_a, &got_x);
        CHECK(got_a == want_a && got_x == want_x, "scale %g: absmax %g %g, want %g %g",
              (double)scales[k], (double)got_a, (double)got_x, (double)want_a, (double)want_x);
        CHECK(memcmp(acc, ref, n * sizeof *acc) == 0, "scale %g: sum differs from accumulate",
              (double)scales[k]);
    }
    float one = 2.0f, y = -3.0f, gx = 0;
    be->accumulate_absmax(be, &one, &y, 1, 0.5f, NULL, &gx);
    CHECK(one == 0.5f && gx == 3.0f, "NULL acc_absmax: sum %g, x absmax %g", (double)one, (double)gx);
    free(x);
    free(acc);
    free(ref);
}

/* The AVX2 and portable loops (absmax, accumulate_absmax, accumulate on top, then the moments
 * of the sum) give the same bits: every length 0..40 (vector bodies
 * and tails) and one long threaded one, with NaN, +-Inf, -0, subnormals and the largest finite
 * value placed in the vector part and in the tail. On a CPU without AVX2 both runs take the
 * portable path and the check says so. */
static void test_vector_matches_portable(void) {
    enum { BIG = 70001 };
    const float specials[] = {NAN, INFINITY, -INFINITY, -0.0f, 0x1p-149f, -0x1p-140f, 0x1.fffffep127f};
    float *x = malloc(BIG * sizeof *x), *acc0 = malloc(BIG * sizeof *acc0);
    float *acc_v = malloc(BIG * sizeof *acc_v), *acc_c = malloc(BIG * sizeof *acc_c);
    NEED(x && acc0 && acc_v && acc_c);
    int cases = 0;
    for (size_t len = 0; len <= 41; len++) {
        const size_t n = len <= 40 ? len : BIG;
        for (int sp = -1; sp < (int)(sizeof specials / sizeof *specials); sp++) {
            mpx_test_normal(x, n ? n : 1, 0, 2.0f, 60 + n);
            mpx_test_normal(acc0, n ? n : 1, 0, 0.5f, 70 + n);
            if (sp >= 0 && n > 0) {
                x[(n * 5) / 7] = specials[sp];          /* vector body for most n */
                acc0[n - 1] = -specials[sp];            /* the tail */
            }
            float va = -1, vx = -1, ca = -2, cx = -2;
            memcpy(acc_v, acc0, n * sizeof *acc0);
            memcpy(acc_c, acc0, n * sizeof *acc0);
            float v_abs = mpx_absmax_f32(x, n);
            mpx_accumulate_absmax_f32(acc_v, x, n, 0x1p-3f, &va, &vx);
            mpx_accumulate_f32(acc_v, x, n, 3.0f);
            mpx_moments mv, mc;
            memset(&mv, 0, sizeof mv);
            memset(&mc, 0, sizeof mc);
            mpx_moments_f32(acc_v, n, &mv);
            mpx_convert_force_portable(1);
            float c_abs = mpx_absmax_f32(x, n);
            mpx_accumulate_absmax_f32(acc_c, x, n, 0x1p-3f, &ca, &cx);
            mpx_accumulate_f32(acc_c, x, n, 3.0f);
            mpx_moments_f32(acc_c, n, &mc);
            mpx_convert_force_portable(0);
            CHECK(memcmp(&mv, &mc, sizeof mv) == 0,
                  "n %zu special %d: moments differ (mean %.17g vs %.17g, std %.17g vs %.17g)", n, sp,
                  mv.mean, mc.mean, mv.std, mc.std);
            CHECK(memcmp(&v_abs, &c_abs, sizeof v_abs) == 0, "n %zu special %d: absmax %g vs %g", n,
                  sp, (double)v_abs, (double)c_abs);
            CHECK(memcmp(&va, &ca, sizeof va) == 0 && memcmp(&vx, &cx, sizeof vx) == 0,
                  "n %zu special %d: accumulate_absmax maxima %g %g vs %g %g", n, sp, (double)va,
                  (double)vx, (double)ca, (double)cx);
            CHECK(memcmp(acc_v, acc_c, n * sizeof *acc_v) == 0, "n %zu special %d: sums differ", n, sp);
            cases++;
        }
    }
    printf("vector vs portable magnitude loops: %d cases (this CPU %s AVX2)\n", cases,
           mpx_cpu()->avx2 ? "has" : "has no");
    free(x);
    free(acc0);
    free(acc_v);
    free(acc_c);
}

int main(void) {
    test_absmax();
    test_vector_matches_portable();
    test_accumulate_absmax();
    test_moments_values(10, 1.0f, 2.0f, 1);
    test_moments_values(4097, -3.0f, 0.5f, 2);
    test_moments_values(1000003, 0.1f, 1.0f, 3);
    test_moments_values(2500000, 1e-3f, 1e-2f, 4); /* spans several merge groups */
    test_moments_special();
    test_quantile();
    return mpx_test_done(__FILE__);
}
