/* test_median_ci.c — the median and its distribution-free 95% interval that `mpx bench` puts on
 * every overhead: the order-statistic ranks against binomial tables worked out by hand, the
 * too-few-rounds case, and the coverage claim checked by simulation. */
#include <math.h>
#include <stdlib.h>

#include "mpx/rng.h"
#include "mpx/run.h"
#include "testutil.h"

/* v = n, n-1, ..., 1 (unsorted on purpose): x_(i) = i, so lo and hi are the ranks themselves. */
static void check_ranks(int n, double want_lo, double want_hi, double want_median) {
    double v[64], lo, hi;
    for (int i = 0; i < n; i++) v[i] = n - i;
    double m = mpx_median_ci(v, n, &lo, &hi);
    CHECK(m == want_median, "n %d: median %g, want %g", n, m, want_median);
    CHECK(lo == want_lo && hi == want_hi, "n %d: interval [%g, %g], want [%g, %g]", n, lo, hi,
          want_lo, want_hi);
}

int main(void) {
    /* n = 5: P(B < 1) = 1/32 = 0.031 > 0.025, so no interval at 95%. */
    check_ranks(5, -INFINITY, INFINITY, 3);
    /* n = 6: P(B < 1) = 1/64 = 0.016 <= 0.025, P(B < 2) = 7/64 = 0.11: k = 1, [x_1, x_6]. */
    check_ranks(6, 1, 6, 3.5);
    /* n = 10: P(B < 2) = 11/1024 = 0.011, P(B < 3) = 56/1024 = 0.055: k = 2, [x_2, x_9]. */
    check_ranks(10, 2, 9, 5.5);
    /* n = 20: P(B < 6) = 21700/2^20 = 0.0207, P(B < 7) = 0.0577: k = 6, [x_6, x_15]. */
    check_ranks(20, 6, 15, 10.5);

    /* Coverage: samples of 15 from an exponential distribution (skewed, median ln 2); the
     * interval must contain ln 2 in at least 95% of 4000 trials (n = 15: k = 4, exact coverage
     * 1 - 2 P(B < 4) = 0.9648; 4000 trials put the observed rate within +-0.9% of it, 3 sigma). */
    mpx_rng rng = mpx_rng_make(7, 0, 0);
    int hit = 0;
    const int trials = 4000;
    for (int t = 0; t < trials; t++) {
        double v[15], lo, hi;
        for (int i = 0; i < 15; i++) v[i] = -log(1.0 - mpx_rng_uniform(&rng));
        mpx_median_ci(v, 15, &lo, &hi);
        hit += lo <= log(2.0) && log(2.0) <= hi;
    }
    double cover = (double)hit / trials;
    printf("coverage of the 95%% interval, n = 15: %.4f (exact 0.9648)\n", cover);
    CHECK(fabs(cover - 0.9648) < 0.009, "coverage %.4f, exact 0.9648", cover);
    return mpx_test_done(__FILE__);
}
