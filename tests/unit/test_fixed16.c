/* test_fixed16.c — Q(16, f) fixed point (fixed.h), exact:
 *  - every one of the 65536 codes for f = 0, 8, 14, 24: its value encodes back to itself under
 *    both roundings, its halfway point to the next code rounds to the even one, one FP32 ulp
 *    either side of it to the nearer one;
 *  - a million random floats over 50 binades, both roundings, against the reference below (the
 *    two neighbours in double, the nearer chosen by distance, ties to the even code; stochastic:
 *    up iff r < floor(2^32 (a - lo)) with a measured in units of 2^-f);
 *  - saturation at both ends, Inf and NaN; stochastic rounding's mean (unbiased within 5 sigma);
 *  - the counted quantize: its values and counts on a constructed tensor, and on a large random
 *    tensor the scalar cast's values with the counter-drawn random words (so threads cannot
 *    change them) and counts that add up;
 *  - the quantize loop (written apart from the scalar cast, without libm) bit for bit against the
 *    scalar cast and ref_code, signs of zero included, at f = 0, 8, 14, 24 under both roundings,
 *    with and without counting, on values at every rounding and saturation edge (the stochastic
 *    test's 2^32 frac = r + 1, r and r + 1/2 among them) and 200,000 random ones; its counts against counts
 *    taken from ref_code.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/fixed.h"
#include "mpx/rng.h"
#include "testutil.h"

/* The reference code: nearest of the two neighbouring multiples of 2^-f, computed in double. */
static int32_t ref_code(float x, int f, int stochastic, uint32_t r, int *sat) {
    *sat = 0;
    if (isnan(x)) return 0;
    const double v = ldexp((double)x, f);
    const double lo = floor(v), hi = lo + 1.0; /* lo <= v < hi (Inf: lo = Inf) */
    double m;
    if (isinf(v)) {
        m = v;
    } else if (stochastic) {
        const double a = fabs(v), alo = floor(a);
        const double up = floor(ldexp(a - alo, 32));
        m = copysign(alo + ((double)r < up ? 1.0 : 0.0), v);
    } else {
        const double dlo = v - lo, dhi = hi - v;
        m = dlo < dhi ? lo : dhi < dlo ? hi : fmod(lo, 2.0) == 0.0 ? lo : hi;
    }
    if (m > 32767.0) {
        *sat = 1;
        return 32767;
    }
    if (m < -32768.0) {
        *sat = 1;
        return -32768;
    }
    return (int32_t)m;
}

static void check_one(float x, int f, int stochastic, uint32_t r, const char *what) {
    int sat, rsat;
    const int32_t q = mpx_f32_to_q16(x, f, stochastic, r, &sat);
    const int32_t e = ref_code(x, f, stochastic, r, &rsat);
    CHECK(q == e && sat == rsat, "%s: f=%d %s x=%a r=%u: code %d sat %d, reference %d sat %d", what,
          f, stochastic ? "sr" : "rne", x, r, q, sat, e, rsat);
}

static void test_codes(void) {
    static const int fs[] = {0, 8, 14, 24};
    for (size_t k = 0; k < sizeof fs / sizeof *fs; k++) {
        const int f = fs[k];
        long bad = 0;
        for (int32_t q = -32768; q <= 32767; q++) {
            const float x = mpx_q16_to_f32((int16_t)q, f);
            bad += x != ldexpf((float)q, -f);
            bad += mpx_f32_to_q16(x, f, 0, 0, NULL) != q;
            bad += mpx_f32_to_q16(x, f, 1, 0xffffffffu, NULL) != q;
            const float mid = ldexpf((float)q + 0.5f, -f); /* exact: 17 significant bits */
            check_one(mid, f, 0, 0, "halfway");
            check_one(nextafterf(mid, INFINITY), f, 0, 0, "above halfway");
            check_one(nextafterf(mid, -INFINITY), f, 0, 0, "below halfway");
            const int32_t even = (q % 2 == 0) ? q : q + 1;
            if (q < 32767) bad += mpx_f32_to_q16(mid, f, 0, 0, NULL) != even;
        }
        CHECK(bad == 0, "f=%d: %ld codes do not round-trip or halfway points not to even", f, bad);
    }
}

static void test_random(void) {
    mpx_rng g = mpx_rng_make(7, 1, 0);
    static const int fs[] = {8, 14};
    for (int i = 0; i < 1000000; i++) {
        const int e = (int)mpx_rng_below(&g, 50) - 35; /* binades 2^-35 .. 2^14 */
        const float x = ldexpf(1.0f + mpx_rng_uniform(&g), e) * (mpx_rng_u32(&g) & 1 ? -1 : 1);
        const uint32_t r = mpx_rng_u32(&g);
        const int f = fs[i & 1];
        check_one(x, f, 0, 0, "random");
        check_one(x, f, 1, r, "random");
    }
}

static void test_edges(void) {
    int sat;
    CHECK(mpx_f32_to_q16(2.0f, 14, 0, 0, &sat) == 32767 && sat, "2.0 saturates at f=14");
    CHECK(mpx_f32_to_q16(-2.0f, 14, 0, 0, &sat) == -32768 && !sat, "-2.0 is the smallest code");
    CHECK(mpx_f32_to_q16(nextafterf(-2.0f, -3.0f), 14, 0, 0, &sat) == -32768 && !sat,
          "just below -2 rounds to -2");
    CHECK(mpx_f32_to_q16(-2.0001f, 14, 0, 0, &sat) == -32768 && sat, "-2.0001 saturates");
    CHECK(mpx_f32_to_q16(ldexpf(32767.5f, -14), 14, 0, 0, &sat) == 32767 && sat,
          "halfway past the largest code rounds to even (32768) and saturates");
    CHECK(mpx_f32_to_q16(INFINITY, 14, 0, 0, &sat) == 32767 && sat, "+Inf saturates");
    CHECK(mpx_f32_to_q16(-INFINITY, 14, 1, 5, &sat) == -32768 && sat, "-Inf saturates");
    CHECK(mpx_f32_to_q16(NAN, 14, 0, 0, &sat) == 0 && !sat, "NaN casts to 0");
    CHECK(mpx_f32_to_q16(ldexpf(1.0f, -16), 14, 0, 0, NULL) == 0, "2^-16 flushes at f=14 (RNE)");
    CHECK(mpx_f32_to_q16(ldexpf(1.0f, -16), 14, 1, 0x3fffffffu, NULL) == 1,
          "2^-16 rounds up with a word below 2^30 (probability 1/4)");
    CHECK(mpx_f32_to_q16(ldexpf(1.0f, -16), 14, 1, 0x40000000u, NULL) == 0,
          "2^-16 rounds down with a word of 2^30");
    CHECK(mpx_f32_to_q16(-ldexpf(1.0f, -16), 14, 1, 0x3fffffffu, NULL) == -1,
          "-2^-16 rounds away from zero with the same probability");

    /* Stochastic rounding is unbiased: the mean of n draws of 0.3 2^-14 (p = 0.3 of code 1). */
    const int n = 200000;
    mpx_rng g = mpx_rng_make(3, 2, 0);
    const float x = 0.3f * ldexpf(1.0f, -14);
    double s = 0;
    for (int i = 0; i < n; i++) s += mpx_f32_to_q16(x, 14, 1, mpx_rng_u32(&g), NULL);
    const double p = (double)x * 16384.0, mean = s / n, sigma = sqrt(p * (1 - p) / n);
    CHECK(fabs(mean - p) < 5 * sigma, "stochastic mean %.5f, expected %.5f (sigma %.5f)", mean, p,
          sigma);
}

static void test_quantize_counts(void) {
    const float x[] = {0.0f, -0.0f, ldexpf(1.0f, -16), 3 * ldexpf(1.0f, -15), 5.0f, NAN,
                       INFINITY, 1.0f, -ldexpf(1.0f, -15), -3.0f};
    const size_t n = sizeof x / sizeof *x;
    float y[sizeof x / sizeof *x];
    mpx_cast_stats st;
    memset(&st, 0, sizeof st);
    mpx_fixed_spec s = {14, MPX_ROUND_RNE, 0, 0, 0};
    mpx_fixed_quantize(&s, x, y, n, &st);
    const float q = ldexpf(1.0f, -14);
    CHECK(y[0] == 0 && y[1] == 0, "zeros stay zero");
    CHECK(y[2] == 0, "2^-16 flushed");
    CHECK(y[3] == 2 * q, "1.5 units rounds to 2 (even)");
    CHECK(y[4] == 32767 * q, "5 saturates to the largest value");
    CHECK(isnan(y[5]) && isinf(y[6]) && y[6] > 0, "NaN and Inf kept");
    CHECK(y[7] == 1.0f, "1 exact");
    CHECK(y[8] == 0, "-2^-15 (half a unit) rounds to even 0");
    CHECK(y[9] == -2.0f, "-3 saturates to -2");
    CHECK(st.count == n && st.nonzero == 8 && st.nonfinite == 2, "count %llu nonzero %llu "
          "nonfinite %llu", (unsigned long long)st.count, (unsigned long long)st.nonzero,
          (unsigned long long)st.nonfinite);
    CHECK(st.flushed == 2 && st.below_min == 2 && st.overflow == 2 && st.subnormal == 0,
          "flushed %llu below_min %llu overflow %llu", (unsigned long long)st.flushed,
          (unsigned long long)st.below_min, (unsigned long long)st.overflow);
    uint64_t h = 0;
    for (int k = 0; k < MPX_HIST_BINS; k++) h += st.hist[k];
    CHECK(h == n && st.hist[MPX_HIST_ZERO] == 2 && st.hist[MPX_HIST_NAN] == 1 &&
              st.hist[MPX_HIST_INF] == 1,
          "histogram of the pre-cast values");

    /* A large tensor: the scalar cast with the counter-drawn words, in parallel chunks. */
    const size_t big = 300001;
    float *a = malloc(big * sizeof *a), *b = malloc(big * sizeof *b);
    REQUIRE_VOID(a && b, "out of memory");
    mpx_rng g = mpx_rng_make(11, 4, 0);
    for (size_t i = 0; i < big; i++)
        a[i] = ldexpf(mpx_rng_uniform(&g) - 0.5f, (int)mpx_rng_below(&g, 24) - 20);
    mpx_fixed_spec sr = {12, MPX_ROUND_STOCHASTIC, 99, 5, 1000};
    memset(&st, 0, sizeof st);
    mpx_fixed_quantize(&sr, a, b, big, &st);
    size_t bad = 0, flushed = 0;
    for (size_t i = 0; i < big; i++) {
        const uint32_t r = mpx_rand_u32(99, (uint64_t)MPX_RNG_ROUNDING ^ 5, 1000 + i);
        const int16_t c = mpx_f32_to_q16(a[i], 12, 1, r, NULL);
        bad += b[i] != mpx_q16_to_f32(c, 12);
        flushed += a[i] != 0 && c == 0;
    }
    CHECK(bad == 0, "%zu of %zu quantized values differ from the scalar cast", bad, big);
    CHECK(st.count == big && st.flushed == flushed, "counts: %llu flushed, expected %zu",
          (unsigned long long)st.flushed, flushed);
    free(a);
    free(b);
}

/* The quantize loop against the scalar cast, bit for bit (a code 0 is +0), and against ref_code;
 * with and without counting, which must not change a value; counts derived from ref_code. */
static void test_quantize_bits(void) {
    static const float edges[] = {0.0f, -0.0f, 0.5f, -0.5f, 1.5f, -1.5f, 2.5f, -2.5f, 0.49999997f,
                                  -0.49999997f, 32766.5f, 32767.0f, 32767.25f, 32767.5f,
                                  -32767.5f, -32768.0f, -32768.25f, -32768.5f, 32768.0f, 65535.0f,
                                  65536.0f, -65537.0f, 8388607.5f, 8388608.0f, 1e30f, -1e30f,
                                  3.4028235e38f, 1e-45f, -1e-45f, 1.1754944e-38f, INFINITY,
                                  -INFINITY, NAN};
    const size_t ne = sizeof edges / sizeof *edges, nr = 200000, n = 4 * ne + nr;
    float *x = malloc(n * sizeof *x), *y0 = malloc(n * sizeof *y0), *y1 = malloc(n * sizeof *y1);
    REQUIRE_VOID(x && y0 && y1, "out of memory");
    static const int fracs[] = {0, 8, 14, 24};
    for (int fi = 0; fi < 4; fi++) {
        const int f = fracs[fi];
        /* the edges in units of 2^-f, and as they are (huge and tiny at every f) */
        for (size_t i = 0; i < ne; i++) {
            x[i] = ldexpf(edges[i], -f);
            x[ne + i] = edges[i];
            x[2 * ne + i] = nextafterf(ldexpf(edges[i], -f), INFINITY);
            x[3 * ne + i] = nextafterf(ldexpf(edges[i], -f), -INFINITY);
        }
        mpx_rng g = mpx_rng_make(21, (uint64_t)f, 0);
        for (size_t i = 4 * ne; i < n; i++)
            x[i] = ldexpf(mpx_rng_uniform(&g) - 0.5f, (int)mpx_rng_below(&g, 40) - 20 - f / 2);
        /* The stochastic rule's edges: where element i's word r has 2^32 frac = r + 1 or = r
         * exactly (a multiple of 2^8, so that frac fits a float), r < floor(2^32 frac) rounds
         * up and does not; where r < 2^22, 2^32 frac = r + 1/2 does not (floor, not nearest). */
        size_t edge = 0;
        for (size_t i = 4 * ne; i < n; i++) {
            const uint32_t r = mpx_rand_u32(7, (uint64_t)MPX_RNG_ROUNDING ^ 3, 500 + i);
            const double k = (((uint64_t)r + 1) & 0xff) == 0 ? (double)r + 1.0
                             : (r & 0xff) == 0 && r ? (double)r
                             : r < (1u << 22) ? (double)r + 0.5 : 0.0;
            if (k != 0.0) {
                x[i] = ldexpf((float)ldexp(k, -32), -f) * (i & 1 ? -1.0f : 1.0f);
                edge++;
            }
        }
        CHECK(edge > 200, "f=%d: %zu elements on the stochastic edge", f, edge);
        for (int sr = 0; sr < 2; sr++) {
            const mpx_fixed_spec s = {f, sr ? MPX_ROUND_STOCHASTIC : MPX_ROUND_RNE, 7, 3, 500};
            mpx_cast_stats st, want;
            memset(&st, 0, sizeof st);
            memset(&want, 0, sizeof want);
            mpx_fixed_quantize(&s, x, y0, n, NULL);
            mpx_fixed_quantize(&s, x, y1, n, &st);
            size_t bad = 0, badref = 0, first = n;
            for (size_t i = 0; i < n; i++) {
                const uint32_t r = sr ? mpx_rand_u32(7, (uint64_t)MPX_RNG_ROUNDING ^ 3, 500 + i) : 0;
                const int fin = isfinite(x[i]);
                const int16_t c = mpx_f32_to_q16(x[i], f, sr, r, NULL);
                int rsat;
                const int32_t rc = ref_code(x[i], f, sr, r, &rsat);
                const float w = fin ? mpx_q16_to_f32(c, f) : x[i];
                uint32_t b0, b1, bw;
                memcpy(&b0, &y0[i], 4);
                memcpy(&b1, &y1[i], 4);
                memcpy(&bw, &w, 4);
                if (b0 != bw || b1 != bw) {
                    bad++;
                    if (first == n) first = i;
                }
                badref += fin && rc != c;
                const int nz = x[i] != 0.0f;
                want.nonzero += nz;
                want.nonfinite += !fin;
                want.flushed += nz && fin && rc == 0;
                want.overflow += fin && rsat;
                want.below_min += nz && fin && fabsf(x[i]) < ldexpf(1.0f, -f);
            }
            CHECK(bad == 0, "f=%d %s: %zu of %zu values differ from the scalar cast in their bits "
                  "(first: x=%a -> %a, counting %a)", f, sr ? "stochastic" : "rne", bad, n,
                  first < n ? x[first] : 0.0f, first < n ? y0[first] : 0.0f,
                  first < n ? y1[first] : 0.0f);
            CHECK(badref == 0, "f=%d %s: %zu codes differ from ref_code", f,
                  sr ? "stochastic" : "rne", badref);
            CHECK(st.count == n && st.nonzero == want.nonzero && st.nonfinite == want.nonfinite &&
                      st.flushed == want.flushed && st.overflow == want.overflow &&
                      st.below_min == want.below_min && st.subnormal == 0,
                  "f=%d %s: counts nonzero %llu/%llu flushed %llu/%llu overflow %llu/%llu "
                  "below_min %llu/%llu", f, sr ? "stochastic" : "rne",
                  (unsigned long long)st.nonzero, (unsigned long long)want.nonzero,
                  (unsigned long long)st.flushed, (unsigned long long)want.flushed,
                  (unsigned long long)st.overflow, (unsigned long long)want.overflow,
                  (unsigned long long)st.below_min, (unsigned long long)want.below_min);
        }
    }
    free(x);
    free(y0);
    free(y1);
}

int main(void) {
    test_codes();
    test_random();
    test_edges();
    test_quantize_counts();
    test_quantize_bits();
    return mpx_test_done("test_fixed16");
}
