/* test_scaling.c — every loss-scaling method as a state machine, on constructed inputs with
 * hand-derived answers (docs/design.md §10 rung 4):
 *   dynamic: growth after exactly growth_interval finite steps, backoff + skip, hysteresis,
 *            min/max bounds, GradScaler defaults;
 *   fixed / none: constant scale, skip on non-finite;
 *   adaptive: threshold T, closed form on Gaussian data, underflow fraction, each bound,
 *            power of two, zero sigma, branch-merge targets; adaptive-quantile likewise;
 *   als = reference (the 2019 code): the float32 power of two (point f) and the merge target
 *            on stored magnitudes with the code's error (point b), on cases where the two
 *            versions differ, the expected values derived from the code's rule by hand.
 */
#include <math.h>
#include <stdlib.h>

#include "mpx/numerics.h"
#include "mpx/rng.h"
#include "mpx/scaling.h"
#include "testutil.h"

static void test_dynamic_growth_and_backoff(void) {
    mpx_scaling_cfg c;
    mpx_scaling_defaults(&c);
    c.method = MPX_SCALING_DYNAMIC;
    c.init_scale = 8;
    c.growth_interval = 3;
    mpx_scaler s;
    CHECK_OK(mpx_scaler_init(&s, &c));
    /* finite x3 -> x2 exactly at the third; finite x3 -> x2 again; then an overflow halves and
     * skips, and resets the growth counter (two finite steps later no growth yet). */
    const int nonfinite[] = {0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
    const double expect_scale[] = {8, 8, 16, 16, 16, 32, 16, 16, 16, 32};
    const int expect_skip[] = {0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
    for (int i = 0; i < 10; i++) {
        int skip = mpx_scaler_update(&s, nonfinite[i]);
        CHECK(skip == expect_skip[i], "step %d: skip %d, expected %d", i, skip, expect_skip[i]);
        CHECK(s.scale == expect_scale[i], "step %d: scale %g, expected %g", i, s.scale,
              expect_scale[i]);
    }
    CHECK(s.steps == 10 && s.skipped == 1, "steps %lld skipped %lld", (long long)s.steps,
          (long long)s.skipped);
}

static void test_dynamic_defaults_are_gradscaler(void) {
    mpx_scaling_cfg c;
    mpx_scaling_defaults(&c);
    c.method = MPX_SCALING_DYNAMIC;
    mpx_scaler s;
    CHECK_OK(mpx_scaler_init(&s, &c));
    CHECK(s.scale == 65536.0, "init scale %g", s.scale);
    for (int i = 0; i < 1999; i++) mpx_scaler_update(&s, 0);
    CHECK(s.scale == 65536.0, "grew before 2000 finite steps: %g", s.scale);
    mpx_scaler_update(&s, 0);
    CHECK(s.scale == 131072.0, "no growth at exactly 2000 finite steps: %g", s.scale);
    /* GradScaler has no floor: 40 overflows in a row reach 131072 * 2^-40. */
    for (int i = 0; i < 40; i++) CHECK(mpx_scaler_update(&s, 1) == 1, "overflow not skipped");
    CHECK(s.scale == ldexp(131072.0, -40), "backoff without floor: %g", s.scale);
}

static void test_dynamic_hysteresis(void) {
    mpx_scaling_cfg c;
    mpx_scaling_defaults(&c);
    c.method = MPX_SCALING_DYNAMIC;
    c.init_scale = 1024;
    c.hysteresis = 2;
    c.growth_interval = 4;
    mpx_scaler s;
    CHECK_OK(mpx_scaler_init(&s, &c));
    /* Every overflow is skipped; the scale backs off on every second overflow since the last
     * change. A growth resets the count. */
    const int nonfinite[] = {1, 1, 1, 0, 1, 0, 0, 0, 0, 1, 1};
    const double expect[] = {1024, 512, 512, 512, 256, 256, 256, 256, 512, 512, 256};
    for (int i = 0; i < 11; i++) {
        int skip = mpx_scaler_update(&s, nonfinite[i]);
        CHECK(skip == nonfinite[i], "step %d: skip %d", i, skip);
        CHECK(s.scale == expect[i], "step %d: scale %g, expected %g", i, s.scale, expect[i]);
    }
}

static void test_dynamic_bounds(void) {
    mpx_scaling_cfg c;
    mpx_scaling_defaults(&c);
    c.method = MPX_SCALING_DYNAMIC;
    c.init_scale = 4;
    c.growth_interval = 1;
    c.min_scale = 1;
    c.max_scale = 16;
    mpx_scaler s;
    CHECK_OK(mpx_scaler_init(&s, &c));
    for (int i = 0; i < 5; i++) mpx_scaler_update(&s, 0);
    CHECK(s.scale == 16, "max_scale not applied: %g", s.scale);
    for (int i = 0; i < 8; i++) mpx_scaler_update(&s, 1);
    CHECK(s.scale == 1, "min_scale not applied: %g", s.scale);
    c.min_scale = 32;
    CHECK(mpx_scaler_init(&s, &c) == MPX_ERR_INPUT, "min_scale > max_scale accepted");
}

static void test_fixed_and_none(void) {
    mpx_scaling_cfg c;
    mpx_scaling_defaults(&c);
    mpx_scaler s;
    c.method = MPX_SCALING_FIXED;
    c.loss_scale = 128;
    CHECK_OK(mpx_scaler_init(&s, &c));
    for (int i = 0; i < 50; i++) {
        int nf = i % 7 == 3;
        CHECK(mpx_scaler_update(&s, nf) == nf, "fixed: skip must follow non-finite");
        CHECK(s.scale == 128, "fixed scale changed to %g", s.scale);
    }
    c.method = MPX_SCALING_NONE;
    CHECK_OK(mpx_scaler_init(&s, &c));
    CHECK(s.scale == 1, "none: scale %g", s.scale);
    CHECK(mpx_scaler_update(&s, 1) == 1 && s.scale == 1, "none: skip on non-finite");
    c.method = MPX_SCALING_FIXED;
    c.loss_scale = -1;
    CHECK(mpx_scaler_init(&s, &c) == MPX_ERR_INPUT, "negative fixed scale accepted");
}

static mpx_scaling_cfg adaptive_unbounded(void) {
    mpx_scaling_cfg c;
    mpx_scaling_defaults(&c);
    c.method = MPX_SCALING_ADAPTIVE;
    c.scale_bound = 1e30;
    c.accum_bound = 1e30;
    return c;
}

static void inputs_from(const float *g, size_t ng, const float *w, size_t nw, int64_t fan_in,
                        mpx_als_inputs *in) {
    mpx_moments mg, mw;
    mpx_moments_f32(g, ng, &mg);
    mpx_moments_f32(w, nw, &mw);
    *in = (mpx_als_inputs){mg.mean, mg.std, mw.mean, mw.std, mg.min, mg.max, mw.min, mw.max, fan_in, 0};
}

/* P(|XY| < t) for independent X, Y ~ N(0,1): (2/pi) int_0^t K0(z) dz, and for small t
 * K0(z) = -ln(z/2) - gamma + O(z^2 ln z), so the integral is t (1 - gamma - ln(t/2)). */
static double product_small_tail(double t) {
    const double euler_gamma = 0.5772156649015329;
    return 2.0 / M_PI * t * (1.0 - euler_gamma - log(t / 2.0));
}

static void test_adaptive_closed_form_and_underflow(void) {
    mpx_scaling_cfg c = adaptive_unbounded();
    /* T = sqrt(2) erfinv(1e-3) = 1.2533e-3 (docs/papers.md §3 step 3). */
    double T = mpx_als_threshold(1e-3);
    CHECK(fabs(T - 1.2533141e-3) < 1e-9, "T = %.9g", T);
    CHECK(fabs(6e-8 / T - 4.787e-5) < 1e-8, "u_min / T = %.6g", 6e-8 / T);

    enum { N = 200000 };
    float *g = malloc(N * sizeof *g), *w = malloc(N * sizeof *w);
    mpx_test_normal(g, N, 0, 1e-4f, 11);
    mpx_test_normal(w, N, 0, 2e-2f, 12);
    mpx_als_inputs in;
    inputs_from(g, N, w, N, 64, &in);
    /* Closed form, computed here in double from the same moments. */
    double so = sqrt((in.sigma_g * in.sigma_g + in.mu_g * in.mu_g) *
                     (in.sigma_w * in.sigma_w + in.mu_w * in.mu_w));
    double expect = fmax(1.0, 6e-8 / (T * so));
    double s = mpx_als_unbound(&c, &in);
    CHECK(fabs(s - expect) <= 1e-12 * expect, "unbound %.12g vs closed form %.12g", s, expect);
    CHECK(s > 1 && s < 1e3, "test data should need a factor, got %g", s);

    /* The method's model: products ~ N(0, sigma_o^2). Draws from exactly that model underflow
     * (|s z| < u_min) with probability n_uf; check within 4 binomial sigmas. */
    long below = 0;
    for (int i = 0; i < N; i++) {
        double z = so * mpx_rand_normal(99, MPX_RNG_TEST, (uint64_t)i);
        below += fabs(s * z) < 6e-8;
    }
    double frac = (double)below / N, sd = sqrt(1e-3 * (1 - 1e-3) / N);
    CHECK(fabs(frac - 1e-3) < 4 * sd, "Gaussian-model underflow fraction %.5f, expected 1e-3", frac);

    /* Element-wise products of two Gaussians have a heavier small tail than the model (density
     * K0(z)/pi): measured against that closed form instead (about 6x n_uf). */
    below = 0;
    for (int i = 0; i < N; i++) below += fabs(s * (double)g[i] * (double)w[(i * 7919) % N]) < 6e-8;
    frac = (double)below / N;
    double p = product_small_tail(6e-8 / (s * in.sigma_g * in.sigma_w));
    sd = sqrt(p * (1 - p) / N);
    CHECK(fabs(frac - p) < 4 * sd, "product underflow fraction %.5f vs K0 closed form %.5f", frac, p);
    printf("adaptive: s = %.3f, products below u_min: %.4f (model n_uf 1e-3, K0 form %.4f)\n", s,
           frac, p);

    /* What the factor is for: the data gradient dx = (s g) W^T, a sum of fan_in products, must
     * underflow far less than n_uf. fan_in = 64 rows of W per output element. */
    long dx_below = 0, dx_n = 0;
    for (int i = 0; i + 64 <= N && dx_n < 3000; i += 64, dx_n++) {
        double acc = 0;
        for (int k = 0; k < 64; k++) acc += s * (double)g[i + k] * (double)w[(i * 31 + k) % N];
        dx_below += fabs(acc) < 6e-8;
    }
    CHECK((double)dx_below / (double)dx_n <= 1e-3, "data-gradient underflow %ld / %ld", dx_below,
          dx_n);
    free(g);
    free(w);
}

static void test_adaptive_bounds(void) {
    mpx_scaling_cfg c;
    mpx_scaling_defaults(&c);
    c.method = MPX_SCALING_ADAPTIVE;
    /* sigma_o = 1e-6 -> unbound 6e-8 / (T 1e-6) = 47.87 (extremes small: no overflow cap). */
    mpx_als_inputs in = {0, 1e-4, 0, 1e-2, -4e-4, 4e-4, -4e-2, 4e-2, 64, 0};
    double u = mpx_als_unbound(&c, &in);
    CHECK(fabs(u - 47.8731) < 1e-3, "unbound %g", u);
    /* scale_bound 16 binds. */
    CHECK(mpx_als_bound(&c, u, 1.0) == 16, "scale bound: %g", mpx_als_bound(&c, u, 1.0));
    /* accum_bound 1024 / S_prev 256 = 4 binds. */
    CHECK(mpx_als_bound(&c, u, 256.0) == 4, "accum bound: %g", mpx_als_bound(&c, u, 256.0));
    /* S_prev above accum_bound: the factor goes below 1 (a power of two). */
    CHECK(mpx_als_bound(&c, u, 4096.0) == 0.25, "accum bound below 1: %g",
          mpx_als_bound(&c, u, 4096.0));
    /* No bound binds: power of two below 47.87 is 32. */
    mpx_scaling_cfg wide = adaptive_unbounded();
    CHECK(mpx_als_bound(&wide, u, 1.0) == 32, "power of two: %g", mpx_als_bound(&wide, u, 1.0));
    /* Overflow cap: o_max = |g_min w_min| = 2 * 50 = 100 (the largest |product| of the
     * extremes, sign ignored as the 2019 code does); cap = (65504 / 64) / 100 = 10.235. */
    mpx_als_inputs big = {0, 1e-4, 0, 1e-2, -2, 0.5, -50, 1, 64, 0};
    double capped = mpx_als_unbound(&wide, &big);
    CHECK(fabs(capped - 65504.0 / 64 / 100) < 1e-9, "overflow cap %g", capped);
    CHECK(mpx_als_bound(&wide, capped, 1.0) == 8, "cap then power of two: %g",
          mpx_als_bound(&wide, capped, 1.0));
    /* The cap can push the factor below 1. */
    mpx_als_inputs huge = {0, 1e-4, 0, 1e-2, -2000, 10, -50, 1, 1024, 0};
    double below1 = mpx_als_unbound(&wide, &huge);
    CHECK(below1 < 1 && mpx_als_bound(&wide, below1, 1.0) == exp2(floor(log2(below1))),
          "cap below 1: %g", below1);
    /* All-zero gradient (sigma_o = 0): factor 1, as the 2019 code returns. */
    mpx_als_inputs zero = {0, 0, 0, 1e-2, 0, 0, -1, 1, 64, 0};
    CHECK(mpx_als_unbound(&c, &zero) == 1, "zero sigma: %g", mpx_als_unbound(&c, &zero));
    /* A gradient that needs nothing (sigma_o large) gets 1, never less from the underflow term. */
    mpx_als_inputs loud = {0, 1e-1, 0, 1e-1, -0.3, 0.3, -0.3, 0.3, 64, 0};
    CHECK(mpx_als_unbound(&c, &loud) == 1, "loud gradient: %g", mpx_als_unbound(&c, &loud));
}

static void test_quantile_variant(void) {
    mpx_scaling_cfg c = adaptive_unbounded();
    c.method = MPX_SCALING_ADAPTIVE_QUANTILE;
    /* q = 1e-9: 2^-24 / 1e-9 = 59.6 -> power of two 32. */
    mpx_als_inputs in = {0, 1e-4, 0, 1e-2, -4e-4, 4e-4, -4e-2, 4e-2, 64, 1e-9};
    double u = mpx_als_quantile_unbound(&c, &in);
    CHECK(fabs(u - ldexp(1.0, -24) / 1e-9) < 1e-9, "quantile unbound %g", u);
    CHECK(mpx_als_bound(&c, u, 1.0) == 32, "quantile pow2 %g", mpx_als_bound(&c, u, 1.0));
    /* q above 2^-24: nothing to rescue, factor 1. */
    in.q_abs_g = 1e-3;
    CHECK(mpx_als_quantile_unbound(&c, &in) == 1, "large quantile");
    /* Same overflow cap as the main method. */
    mpx_als_inputs big = {0, 1e-4, 0, 1e-2, -2, 0.5, -50, 1, 64, 1e-12};
    CHECK(fabs(mpx_als_quantile_unbound(&c, &big) - 65504.0 / 64 / 100) < 1e-9, "quantile cap");

    /* The quantile itself: on 1000 values 1..1000 (and zeros that must be ignored), the 1%
     * quantile is the 10th smallest nonzero magnitude, 10, reported as the power of two above
     * it, 16; the factor from it equals the factor from the exact 10 (2^-28 both). */
    float x[1500];
    for (int i = 0; i < 1000; i++) x[i] = (float)((i % 2 ? -1 : 1) * (1000 - i));
    for (int i = 1000; i < 1500; i++) x[i] = 0;
    float q = mpx_abs_quantile_ceil_pow2(x, 1500, 0.01, 1.0f);
    CHECK(q == 16.0f, "1%% quantile of 1..1000 = %g, want 16", q);
    mpx_als_inputs exact = in, rounded = in;
    exact.q_abs_g = 10;
    rounded.q_abs_g = q;
    CHECK(mpx_als_bound(&c, mpx_als_quantile_unbound(&c, &exact), 1.0) ==
              mpx_als_bound(&c, mpx_als_quantile_unbound(&c, &rounded), 1.0),
          "rounded quantile gives the exact quantile's factor");
}

static void test_merge_target(void) {
    mpx_scaling_cfg c;
    mpx_scaling_defaults(&c);
    c.method = MPX_SCALING_ADAPTIVE;
    /* Unscaled magnitudes 1 and 2: target must satisfy 2 * t < 65504 -> the largest S fits. */
    double S1[] = {64, 1024}, A1[] = {64 * 1.0, 1024 * 2.0};
    CHECK(mpx_als_merge_target(&c, 2, S1, A1) == 1024, "largest fitting scale");
    /* Unscaled max 100: 100 * 1024 >= 65504, 100 * 64 < 65504 -> 64. */
    double A2[] = {64 * 100.0, 1024 * 1.0};
    CHECK(mpx_als_merge_target(&c, 2, S1, A2) == 64, "next scale down");
    /* Unscaled max 3000 with scales 64, 1024: none fits; halve from 64: 16 is the first with
     * 3000 * t < 65504. */
    double A3[] = {64 * 3000.0, 1024 * 1.0};
    CHECK(mpx_als_merge_target(&c, 2, S1, A3) == 16, "halving: %g", mpx_als_merge_target(&c, 2, S1, A3));
    /* Nothing fits even at 1/8: the 2019 code stops at 1/16. */
    double A4[] = {INFINITY, 1.0};
    CHECK(mpx_als_merge_target(&c, 2, S1, A4) == 1.0 / 16, "no fit: %g", mpx_als_merge_target(&c, 2, S1, A4));
    /* The chosen target never overflows when one exists. */
    for (int trial = 0; trial < 200; trial++) {
        double S[3], A[3], m = 0;
        for (int i = 0; i < 3; i++) {
            S[i] = ldexp(1.0, (int)(mpx_rand_u32(5, MPX_RNG_TEST, (uint64_t)(trial * 3 + i)) % 12));
            A[i] = S[i] * 10.0 * mpx_rand_uniform(6, MPX_RNG_TEST, (uint64_t)(trial * 3 + i));
            m = fmax(m, A[i] / S[i]);
        }
        double t = mpx_als_merge_target(&c, 3, S, A);
        CHECK(m * t < 65504, "trial %d: target %g overflows (max unscaled %g)", trial, t, m);
    }
}

/* Point (f): ada_loss.py get_power_of_two_scale takes np.log2 of the float32 bounded scale, a
 * float32 result, then floor. Just below 2^k that log2 rounds to k itself. */
static void test_reference_power_of_two(void) {
    mpx_scaling_cfg ref = adaptive_unbounded(), mpx = ref;
    ref.als = MPX_ALS_REFERENCE;
    /* 8 - 2^-21, the float32 below 8: log2 = 3 + log2(1 - 2^-24) = 3 - 8.6e-8, and the float32
     * spacing below 3 is 2^-22 = 2.4e-7, so log2f gives 3.0f: the code takes 2^3 = 8; the exact
     * floor is 2 (mpx: 4). */
    const double below8 = (double)nextafterf(8.0f, 0.0f);
    CHECK(mpx_als_bound(&ref, below8, 1.0) == 8, "reference, 8 - 2^-21: %g", mpx_als_bound(&ref, below8, 1.0));
    CHECK(mpx_als_bound(&mpx, below8, 1.0) == 4, "mpx, 8 - 2^-21: %g", mpx_als_bound(&mpx, below8, 1.0));
    /* A double just below 8 rounds to the float32 8 before the log: 8 in the code, 4 in mpx. */
    CHECK(mpx_als_bound(&ref, 8.0 - 1e-12, 1.0) == 8, "reference, 8 - 1e-12");
    CHECK(mpx_als_bound(&mpx, 8.0 - 1e-12, 1.0) == 4, "mpx, 8 - 1e-12");
    /* Far enough below (7.99: log2f = 2.998) both take 4; exact powers of two are kept. */
    CHECK(mpx_als_bound(&ref, 7.99, 1.0) == 4 && mpx_als_bound(&mpx, 7.99, 1.0) == 4, "7.99");
    CHECK(mpx_als_bound(&ref, 16.0, 1.0) == 16 && mpx_als_bound(&mpx, 16.0, 1.0) == 16, "16");
    /* The accumulation bound feeds the same rounding: 1024 / 3 = 341.33 -> 256 in both. With
     * S_prev = 4 + 2^-22 the bound is 256 / (1 + 2^-24), whose float32 is 256 - 2^-16; its
     * log2 is 8 - 8.6e-8, which rounds to 8.0f (spacing 4.8e-7 below 8): 256 in the code, 128
     * in mpx. (With 4 + 2^-20 the log2 is 8 - 3.4e-7, past half a spacing: 128 in both.) */
    ref.accum_bound = mpx.accum_bound = 1024;
    CHECK(mpx_als_bound(&ref, 1e9, 3.0) == 256 && mpx_als_bound(&mpx, 1e9, 3.0) == 256, "1024/3");
    CHECK(mpx_als_bound(&ref, 1e9, 4.0 + ldexp(1.0, -20)) == 128, "reference, 4 + 2^-20");
    const double s_prev = 4.0 + ldexp(1.0, -22);
    CHECK(mpx_als_bound(&ref, 1e9, s_prev) == 256, "reference accum: %g", mpx_als_bound(&ref, 1e9, s_prev));
    CHECK(mpx_als_bound(&mpx, 1e9, s_prev) == 128, "mpx accum: %g", mpx_als_bound(&mpx, 1e9, s_prev));
}

/* Point (b): ada_loss.py rescaling tests max(max_gs) * scale < u_max with the STORED (already
 * scaled) magnitudes, over the scales from the largest down; then from min(scales) halving
 * while >= 1/8; then raises if even that does not fit. u_max = 6e4 there. */
static void test_reference_merge_target(void) {
    mpx_scaling_cfg ref, mpx;
    mpx_scaling_defaults(&ref);
    ref.method = MPX_SCALING_ADAPTIVE;
    mpx = ref;
    ref.als = MPX_ALS_REFERENCE;
    ref.u_max = mpx.u_max = 6e4;
    double S[] = {64, 1024};
    /* Stored magnitudes 64 and 2048 (unscaled 1 and 2). mpx: 2 * 1024 < 6e4 -> 1024. The code:
     * m = 2048; 2048 * 1024 and 2048 * 64 = 131072 are >= 6e4; halving from 64: 32 -> 65536 is
     * not below 6e4, 16 -> 32768 is: 16. */
    double A1[] = {64, 2048};
    CHECK(mpx_als_merge_target(&mpx, 2, S, A1) == 1024, "mpx target %g", mpx_als_merge_target(&mpx, 2, S, A1));
    CHECK(mpx_als_merge_target(&ref, 2, S, A1) == 16, "reference target %g", mpx_als_merge_target(&ref, 2, S, A1));
    /* Stored magnitudes 10 and 40: 40 * 1024 = 40960 < 6e4 -> 1024 in both. */
    double A2[] = {10, 40};
    CHECK(mpx_als_merge_target(&ref, 2, S, A2) == 1024, "reference, fits: %g", mpx_als_merge_target(&ref, 2, S, A2));
    /* m = 6e5: 64 ... 1/8 all fail (6e5 / 8 = 75000), the loop leaves 1/16, and 6e5 / 16 =
     * 37500 fits: the code takes 1/16 without raising. */
    double A3[] = {6e5, 1};
    CHECK(mpx_als_merge_target(&ref, 2, S, A3) == 1.0 / 16, "reference 1/16: %g", mpx_als_merge_target(&ref, 2, S, A3));
    /* m = 1e6: 1e6 / 16 = 62500 >= 6e4: the code raises; mpx_als_merge_target says 0. mpx tests
     * the unscaled 1e6 / 64 = 15625, which fits below 6e4 from 2 = 64 / 2^5 on. */
    double A4[] = {1e6, 1};
    CHECK(mpx_als_merge_target(&ref, 2, S, A4) == 0, "reference must refuse: %g", mpx_als_merge_target(&ref, 2, S, A4));
    CHECK(mpx_als_merge_target(&mpx, 2, S, A4) == 2, "mpx goes on: %g", mpx_als_merge_target(&mpx, 2, S, A4));
    double A5[] = {INFINITY, 1};
    CHECK(mpx_als_merge_target(&ref, 2, S, A5) == 0, "reference, Inf: %g", mpx_als_merge_target(&ref, 2, S, A5));
    CHECK(mpx_als_parse("reference") == MPX_ALS_REFERENCE && mpx_als_parse("mpx") == MPX_ALS_MPX &&
              mpx_als_parse("2019") == -1,
          "als names");
}

int main(void) {
    test_reference_power_of_two();
    test_reference_merge_target();
    test_dynamic_growth_and_backoff();
    test_dynamic_defaults_are_gradscaler();
    test_dynamic_hysteresis();
    test_dynamic_bounds();
    test_fixed_and_none();
    test_adaptive_closed_form_and_underflow();
    test_adaptive_bounds();
    test_quantile_variant();
    test_merge_target();
    return mpx_test_done(__FILE__);
}
