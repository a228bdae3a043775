/* test_tf32.c — rounding FP32 to TF32 (FP32's 8-bit exponent, 10 mantissa bits; tf32 mode's
 * GEMM operands): every TF32 value is kept, and RNE against the independent reference (fp_ref.h)
 * on every halfway point between neighbouring TF32 values and the floats either side of it,
 * every value of FP32's subnormal range at a stride, the overflow boundary, Inf and NaN, and two
 * million random floats, through both the branch-free rounding and the generic format rule;
 * then the one cast (mpx_cast, with a scale, in place and not), the bulk conversions and
 * mpx_round_to agree with the scalar rounding. All checks are exact.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp_ref.h"
#include "lib/numerics/fp_bits.h"
#include "mpx/numerics.h"
#include "mpx/rng.h"
#include "testutil.h"

static ref_format F;

static uint32_t bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The reference's TF32 value of x (an FP32 value: TF32 is a subset). */
static float ref_tf32(float x) {
    int ovf;
    uint32_t c = ref_round(&F, (double)x, &ovf);
    double v = (c & ~F.sign_bit) > F.max_code ? INFINITY : F.value[c & ~F.sign_bit];
    return (float)((c & F.sign_bit) ? -v : v);
}

/* 1 when mpx_round_tf32(x) is right: the reference's value, or for NaN a quiet NaN of x's sign;
 * and the generic format rule (fp_bits.h's encode/decode with MPX_FP_TF32, which stochastic
 * rounding and counting use) gives the same bits as the branch-free RNE. */
static int check_one(float x) {
    float got = mpx_round_tf32(x);
    if (bits(mpx_fp_decode(MPX_FP_TF32, mpx_fp_encode(MPX_FP_TF32, x, 0, 0, 0))) != bits(got))
        return 0;
    if (isnan(x)) return isnan(got) && !!signbit(got) == !!signbit(x) && (bits(got) & 0x400000u);
    return bits(got) == bits(ref_tf32(x));
}

static void test_values_kept(void) {
    long bad = 0;
    for (uint32_t c = 0; c <= F.max_code; c++) {
        float v = (float)F.value[c];
        bad += bits(mpx_round_tf32(v)) != bits(v);
        bad += bits(mpx_round_tf32(-v)) != bits(-v);
        /* TF32 values are the FP32 values whose low 13 mantissa bits are zero */
        bad += (bits(v) & 0x1fffu) != 0;
    }
    CHECK(bad == 0, "%ld TF32 values are not kept by the rounding", bad);
    CHECK(isinf(mpx_round_tf32(INFINITY)) && mpx_round_tf32(-INFINITY) < 0, "Inf kept");
}

static void test_halfway_points(void) {
    long bad = 0, n = 0;
    for (uint32_t c = 0; c <= F.max_code; c++) {
        /* the FP32 value halfway to the next TF32 value, and its FP32 neighbours */
        const uint32_t mid = bits((float)F.value[c]) + 0x1000u;
        for (int d = -1; d <= 1; d++) {
            float x = from_bits(mid + (uint32_t)d);
            bad += !check_one(x) + !check_one(-x);
            n += 2;
        }
    }
    CHECK(bad == 0, "%ld of %ld halfway points and neighbours differ from the reference", bad, n);
    /* the top: halfway between the largest TF32 value and 2^128 rounds to even, i.e. up: Inf */
    const float top = from_bits(0x7f7ff000u);
    CHECK(isinf(mpx_round_tf32(top)) && isinf(ref_tf32(top)), "halfway past the max -> Inf");
    CHECK(bits(mpx_round_tf32(from_bits(0x7f7fefffu))) == 0x7f7fe000u, "just below -> max");
    CHECK(bits(mpx_round_tf32(FLT_MAX)) == 0x7f800000u, "FLT_MAX rounds to Inf");
}

static void test_subnormals_and_specials(void) {
    long bad = 0;
    for (uint32_t u = 0; u < 0x00800000u; u += 7)
        bad += !check_one(from_bits(u)) + !check_one(-from_bits(u));
    CHECK(bad == 0, "%ld FP32 subnormals differ from the reference", bad);
    CHECK(bits(mpx_round_tf32(from_bits(0x00001000u))) == 0,
          "half the smallest TF32 subnormal -> 0");
    CHECK(bits(mpx_round_tf32(from_bits(0x00001001u))) == 0x00002000u, "just above half -> 2^-136");
    const float nans[] = {NAN, -NAN, from_bits(0x7f800001u), from_bits(0xff812345u)};
    for (size_t i = 0; i < sizeof nans / sizeof *nans; i++)
        CHECK(check_one(nans[i]), "NaN %08x stays a NaN of its sign", bits(nans[i]));
}

static void test_random(void) {
    long bad = 0;
    for (uint64_t i = 0; i < 2000000; i++) {
        float x = from_bits(mpx_rand_u32(71, MPX_RNG_TEST, i));
        bad += !check_one(x);
    }
    CHECK(bad == 0, "%ld of 2M random floats differ from the reference", bad);
}

/* The cast, the bulk conversions and mpx_round_to against the scalar rounding. */
static void test_bulk(void) {
    enum { N = 100003 }; /* more than one parallel block, not a multiple of one */
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *z = malloc(N * sizeof *z);
    mpx_test_normal(x, N, 0, 1e-3f, 72);
    x[5] = NAN, x[6] = INFINITY, x[7] = 1e-42f, x[8] = from_bits(0x3f801000u);
    long bad = 0;
    mpx_cast_spec s = mpx_cast_plain(MPX_TF32);
    s.scale = 1024.0f;
    mpx_cast(&s, x, y, N);
    for (size_t i = 0; i < N; i++) {
        float want = mpx_round_tf32(1024.0f * x[i]);
        bad += isnan(want) ? !isnan(y[i]) : bits(y[i]) != bits(want);
    }
    CHECK(bad == 0, "mpx_cast to tf32 (scale 1024): %ld elements differ", bad);
    memcpy(z, x, N * sizeof *z);
    s.scale = 1.0f;
    mpx_cast(&s, z, z, N); /* in place */
    mpx_encode(MPX_TF32, x, y, N);
    bad = 0;
    for (size_t i = 0; i < N; i++) {
        float want = mpx_round_tf32(x[i]);
        if (isnan(want))
            bad += !isnan(z[i]) || !isnan(y[i]);
        else
            bad += bits(z[i]) != bits(want) || bits(y[i]) != bits(want) ||
                   bits(mpx_round_to(MPX_TF32, x[i])) != bits(want);
    }
    CHECK(bad == 0, "in-place cast, mpx_encode or mpx_round_to: %ld elements differ", bad);
    mpx_decode(MPX_TF32, y, z, N);
    CHECK(memcmp(y, z, N * sizeof *z) == 0, "mpx_decode of tf32 is the identity");
    const mpx_format_info *fi = mpx_format(MPX_TF32);
    CHECK(fi && fi->man_bits == 10 && fi->exp_bits == 8 &&
              fi->max == (double)F.value[F.max_code] && fi->min_subnormal == ldexp(1.0, -136) &&
              fi->min_normal == ldexp(1.0, -126),
          "mpx_format(TF32)");
    CHECK(mpx_dtype_size(MPX_TF32) == 4 && strcmp(mpx_dtype_name(MPX_TF32), "tf32") == 0 &&
              mpx_dtype_parse("tf32") == MPX_TF32 && !mpx_dtype_is_low_precision(MPX_TF32),
          "the tf32 dtype's facts");
    free(x), free(y), free(z);
}

int main(void) {
    F = ref_make("tf32", 8, 10, 1);
    test_values_kept();
    test_halfway_points();
    test_subnormals_and_specials();
    test_random();
    test_bulk();
    ref_free(&F);
    return mpx_test_done(__FILE__);
}
