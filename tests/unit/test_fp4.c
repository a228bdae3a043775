/* test_fp4.c — E2M1, MXFP4 and NVFP4 (fp4.h), exact:
 *  - all 16 codes against the format's definition (value = (1 + m/2) 2^(e-1), subnormal m/2),
 *    every code encoding back to itself (-0 included);
 *  - every value's neighbourhood (itself, one FP32 ulp either side, the halfway points and one
 *    ulp either side of them) and a million random floats over 24 binades against a reference
 *    built from the definition in double (nearest, ties to the even code, a virtual value 8 past
 *    6 deciding saturation), Inf and NaN;
 *  - MXFP4 blocks under both scale rules on constructed amaxes (exactly 6 2^k, 7 2^k: saturation
 *    under floor, a tie rounding up under ceil), an all-zero and a NaN block, a row ending
 *    mid-block, the counts, and random rows against the reference;
 *  - NVFP4 on a constructed tensor (a block at the tensor amax, an unscaled block, a block whose
 *    E4M3 scale underflows) and random tensors against the reference.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/fp4.h"
#include "mpx/rng.h"
#include "testutil.h"

/* The definition: code c = sign(1) exp(2) man(1), bias 1. c = 8 (magnitude) is the virtual
 * value past the largest, 2^3. */
static double def_value(unsigned c) {
    const unsigned e = c >> 1, m = c & 1u;
    return e == 0 ? 0.5 * m : ldexp(1.0 + 0.5 * m, (int)e - 1);
}

/* Reference code of x (not NaN) and whether it saturated. */
static unsigned ref_code(double x, int *sat) {
    const double a = fabs(x);
    unsigned c = 0;
    *sat = 0;
    if (isinf(a)) {
        c = 8;
    } else {
        while (c < 8 && def_value(c + 1) <= a) c++;
        if (c < 8 && def_value(c) != a) {
            const double down = a - def_value(c), up = def_value(c + 1) - a;
            if (up < down || (up == down && (c & 1u))) c++;
        }
    }
    if (c > 7) {
        c = 7;
        *sat = 1;
    }
    return c | (signbit(x) ? 8u : 0u);
}

static void check_one(float x, const char *what) {
    int sat, rsat;
    const unsigned c = mpx_f32_to_e2m1(x, &sat), r = ref_code(x, &rsat);
    CHECK(c == r && sat == rsat, "%s: x=%a: code %u sat %d, reference %u sat %d", what, x, c, sat,
          r, rsat);
}

static void test_codes(void) {
    for (unsigned c = 0; c < 16; c++) {
        const double v = (c & 8u ? -1.0 : 1.0) * def_value(c & 7u);
        const float f = mpx_e2m1_to_f32((uint8_t)c);
        CHECK(f == (float)v && (signbit(f) != 0) == ((c & 8u) != 0),
              "code %u decodes to %g, want %g", c, f, v);
        CHECK(mpx_f32_to_e2m1(f, NULL) == c, "code %u does not encode back", c);
    }
    for (unsigned c = 0; c < 8; c++) {
        const float v = (float)def_value(c), next = (float)def_value(c + 1);
        const float mid = 0.5f * (v + next);
        const float xs[] = {v, nextafterf(v, 0), nextafterf(v, INFINITY), mid, nextafterf(mid, 0),
                            nextafterf(mid, INFINITY)};
        for (size_t k = 0; k < sizeof xs / sizeof *xs; k++) {
            check_one(xs[k], "neighbourhood");
            check_one(-xs[k], "neighbourhood (negative)");
        }
    }
    int sat;
    CHECK(mpx_f32_to_e2m1(7.0f, &sat) == 7 && sat, "7 ties to the virtual 8: saturates to 6");
    CHECK(mpx_f32_to_e2m1(nextafterf(7.0f, 0), &sat) == 7 && !sat, "just below 7 is 6");
    CHECK(mpx_f32_to_e2m1(-INFINITY, &sat) == 15 && sat, "-Inf saturates to -6");
    CHECK(mpx_f32_to_e2m1(NAN, &sat) == 0 && !sat, "NaN has no code: +0");
    CHECK(mpx_f32_to_e2m1(0.25f, NULL) == 0, "0.25 ties to even 0");
    CHECK(mpx_f32_to_e2m1(2.5f, NULL) == 4, "2.5 ties to even 2 (code 4)");
    CHECK(mpx_f32_to_e2m1(5.0f, NULL) == 6, "5 ties to even 4 (code 6)");

    mpx_rng g = mpx_rng_make(5, 9, 0);
    for (int i = 0; i < 1000000; i++) {
        const int e = (int)mpx_rng_below(&g, 24) - 16;
        const float x = ldexpf(1.0f + mpx_rng_uniform(&g), e) * (mpx_rng_u32(&g) & 1 ? -1 : 1);
        check_one(x, "random");
    }
}

/* The reference MXFP4 value of element x in a block with amax (finite). */
static float ref_mx(mpx_mx_rule rule, float amax, float x) {
    if (amax == 0) return 0.0f * x;
    int e = (int)floor(log2((double)amax)) - 2;
    if (rule == MPX_MX_CEIL) e = (int)ceil(log2((double)amax / 6.0));
    int sat;
    const unsigned c = ref_code(ldexp((double)x, -e), &sat);
    return (float)ldexp((c & 8u ? -1.0 : 1.0) * def_value(c & 7u), e);
}

static void test_mxfp4(void) {
    float x[72], y[72];
    mpx_cast_stats st;
    mpx_mx_scales sc;
    /* block 0: amax 6 2^-3, block 1: amax 7 2^5 (floor: saturates; ceil: 3.5 -> 4) */
    for (int i = 0; i < 32; i++) x[i] = ldexpf((float)def_value((unsigned)(i % 8)), -3) * (i & 1 ? -1 : 1);
    for (int i = 32; i < 64; i++) x[i] = ldexpf(1.0f, 5) * (i == 40 ? 7.0f : 1.0f);
    for (int i = 64; i < 72; i++) x[i] = 0;
    memset(&st, 0, sizeof st);
    mpx_mxfp4_quantize(MPX_MX_FLOOR, x, y, 72, 72, &st, &sc);
    for (int i = 0; i < 32; i++) CHECK(y[i] == x[i], "block 0 exact at %d: %g -> %g", i, x[i], y[i]);
    CHECK(y[40] == 6.0f * 32.0f, "floor rule: 7 2^5 saturates to 6 2^5, got %g", y[40]);
    CHECK(y[33] == 32.0f, "floor rule: 2^5 exact");
    CHECK(st.overflow == 1 && st.count == 72, "one saturated of 72 (%llu, %llu)",
          (unsigned long long)st.overflow, (unsigned long long)st.count);
    CHECK(sc.blocks == 3 && sc.zero_blocks == 1 && sc.min_exp == -3 && sc.max_exp == 5,
          "scales: %llu blocks, %llu zero, exponents %d..%d", (unsigned long long)sc.blocks,
          (unsigned long long)sc.zero_blocks, sc.min_exp, sc.max_exp);
    mpx_mxfp4_quantize(MPX_MX_CEIL, x, y, 72, 72, NULL, &sc);
    CHECK(y[40] == 8.0f * 32.0f, "ceil rule: 7 2^5 / 2^6 = 3.5 ties to 4: 2^8, got %g", y[40]);
    CHECK(y[33] == 32.0f, "ceil rule: 2^5 / 2^6 = 0.5 exact");
    CHECK(y[0] == 0 && y[1] == x[1] && y[5] == x[5] && y[7] == x[7],
          "ceil rule, block 0: 0.75 / 6 = 2^-3 exactly, e = -3 as under floor: exact");
    /* A NaN block, and a row of 40 (blocks of 32 and 8). */
    x[3] = NAN;
    mpx_mxfp4_quantize(MPX_MX_FLOOR, x, y, 72, 40, NULL, &sc);
    CHECK(isnan(y[0]) && isnan(y[31]) && !isnan(y[32]), "a NaN block reads back NaN");
    CHECK(sc.nan_blocks == 1 && sc.blocks == 3, "rows of 40 and 32: blocks 32+8, 32 (%llu blocks)",
          (unsigned long long)sc.blocks);
    /* The second row (40..71) starts a block at 40: amax 7 2^5 alone with 2^5 values. */
    CHECK(y[40] == 6.0f * 32.0f && y[39] == 32.0f, "blocks restart at the row");

    /* Random rows against the reference. */
    mpx_rng g = mpx_rng_make(8, 3, 0);
    enum { N = 96 * 50, ROW = 96 };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    REQUIRE_VOID(a && b, "out of memory");
    for (int i = 0; i < N; i++)
        a[i] = ldexpf(mpx_rng_uniform(&g) - 0.5f, (int)mpx_rng_below(&g, 30) - 20);
    for (int rule = 0; rule < 2; rule++) {
        mpx_mxfp4_quantize((mpx_mx_rule)rule, a, b, N, ROW, NULL, NULL);
        long bad = 0;
        for (int r = 0; r < N; r += ROW)
            for (int b0 = r; b0 < r + ROW; b0 += 32) {
                float amax = 0;
                for (int i = b0; i < b0 + 32; i++) amax = fmaxf(amax, fabsf(a[i]));
                for (int i = b0; i < b0 + 32; i++) bad += b[i] != ref_mx((mpx_mx_rule)rule, amax, a[i]);
            }
        CHECK(bad == 0, "MXFP4 rule %d: %ld values differ from the reference", rule, bad);
    }
    free(a);
    free(b);
}

static void test_nvfp4(void) {
    float x[48], y[48];
    mpx_cast_stats st;
    mpx_nvfp4_scales sc;
    for (int i = 0; i < 16; i++) x[i] = 2688.0f * (float)(i % 8) / 7.0f; /* amax 2688: s_t = 1 */
    for (int i = 16; i < 32; i++) x[i] = (float)def_value((unsigned)(i % 8)); /* amax 6: s_b = 1 */
    for (int i = 32; i < 48; i++) x[i] = i == 32 ? 1e-3f : 0.0f; /* s_b = E4M3(1.7e-4) = 0 */
    memset(&st, 0, sizeof st);
    mpx_nvfp4_quantize(x, y, 48, 48, &st, &sc);
    CHECK(sc.tensor_scale == 1.0f, "tensor scale 2688 / (6 448) = 1, got %g", sc.tensor_scale);
    CHECK(sc.max_block == 448.0f && sc.min_block == 0.0f && sc.zero_scale_blocks == 1 &&
              sc.blocks == 3,
          "block scales %g..%g, %llu zero of %llu", sc.min_block, sc.max_block,
          (unsigned long long)sc.zero_scale_blocks, (unsigned long long)sc.blocks);
    CHECK(y[7] == 2688.0f && y[15] == 2688.0f, "the tensor amax is exact");
    for (int i = 16; i < 32; i++) CHECK(y[i] == x[i], "unscaled block exact at %d", i);
    CHECK(y[32] == 0 && st.flushed >= 1, "a block whose scale underflows flushes");
    int sat;
    const unsigned c = ref_code(2688.0 / 7.0 / 448.0, &sat);
    CHECK(y[1] == (float)(def_value(c & 7u) * 448.0), "2688/7 on the 448 step: %g", y[1]);

    /* Random tensors against the reference (the E4M3 block scale by the tested E4M3 cast). */
    mpx_rng g = mpx_rng_make(12, 1, 0);
    enum { N = 64 * 40, ROW = 64 };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    REQUIRE_VOID(a && b, "out of memory");
    for (int i = 0; i < N; i++)
        a[i] = ldexpf(mpx_rng_uniform(&g) - 0.5f, (int)mpx_rng_below(&g, 16) - 8);
    mpx_nvfp4_quantize(a, b, N, ROW, NULL, &sc);
    float amax = 0;
    for (int i = 0; i < N; i++) amax = fmaxf(amax, fabsf(a[i]));
    const double s_t = (double)amax / 2688.0;
    long bad = 0;
    for (int b0 = 0; b0 < N; b0 += 16) {
        float bamax = 0;
        for (int i = b0; i < b0 + 16; i++) bamax = fmaxf(bamax, fabsf(a[i]));
        const double sb = mpx_round_to(MPX_F8_E4M3, (float)((double)bamax / 6.0 / s_t));
        for (int i = b0; i < b0 + 16; i++) {
            float want = 0.0f * a[i];
            if (sb > 0) {
                const unsigned cc = ref_code((float)((double)a[i] / (sb * s_t)), &sat);
                want = (float)((cc & 8u ? -1.0 : 1.0) * def_value(cc & 7u) * (sb * s_t));
            }
            bad += b[i] != want;
        }
    }
    CHECK(bad == 0, "NVFP4: %ld values differ from the reference", bad);
    CHECK(sc.tensor_scale == (float)s_t, "tensor scale");
    a[5] = INFINITY;
    mpx_nvfp4_quantize(a, b, N, ROW, NULL, &sc);
    CHECK(isnan(sc.tensor_scale) && isnan(b[0]) && isnan(b[N - 1]), "Inf makes everything NaN");
    free(a);
    free(b);
}

int main(void) {
    test_codes();
    test_mxfp4();
    test_nvfp4();
    return mpx_test_done("test_fp4");
}
