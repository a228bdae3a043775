/* test_fp8.c — FP32 <-> FP8 (OCP E4M3 and E5M2): exhaustive round trips over all 256 patterns,
 * RNE against the independent reference (fp_ref.h) on every halfway point, its neighbours and a
 * million random floats, E4M3 saturation (finite -> +-448, Inf -> NaN) and E5M2 overflow to Inf,
 * and the bulk conversions. All checks are exact.
 */
#include <math.h>
#include <stdlib.h>

#include "fp_ref.h"
#include "mpx/numerics.h"
#include "mpx/rng.h"
#include "testutil.h"

typedef struct {
    ref_format ref;
    mpx_dtype dtype;
    uint8_t (*enc)(float);
    float (*dec)(uint8_t);
} fp8;

static int check_one(const fp8 *f, float x) {
    uint8_t got = f->enc(x);
    if (isnan(x)) return ref_is_nan_code(&f->ref, got) && !!(got & 0x80) == !!signbit(x);
    int ovf;
    return got == ref_round(&f->ref, (double)x, &ovf);
}

static void test_format(const fp8 *f) {
    const ref_format *R = &f->ref;
    /* Decode agrees with the definition; every non-NaN pattern round-trips; NaN stays NaN. */
    long bad = 0, nan_bad = 0;
    for (uint32_t c = 0; c < 256; c++) {
        float v = f->dec((uint8_t)c);
        if (ref_is_nan_code(R, c)) {
            nan_bad += !isnan(v) || !ref_is_nan_code(R, f->enc(v)) || !!signbit(v) != !!(c & 0x80);
        } else {
            bad += v != (float)ref_value(R, c) || !!signbit(v) != !!(c & 0x80);
            bad += f->enc(v) != c;
        }
    }
    CHECK(bad == 0, "%s: %ld non-NaN patterns wrong in decode or round trip", R->name, bad);
    CHECK(nan_bad == 0, "%s: %ld NaN patterns mishandled", R->name, nan_bad);

    /* Halfway points (exact in FP32) and their neighbours, both signs. */
    bad = 0;
    for (uint32_t c = 0; c <= R->max_code; c++) {
        float mid = (float)((R->value[c] + R->value[c + 1]) / 2);
        float xs[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (int k = 0; k < 3; k++) bad += !check_one(f, xs[k]) + !check_one(f, -xs[k]);
    }
    CHECK(bad == 0, "%s: %ld halfway-point inputs wrong", R->name, bad);

    /* Random: log-uniform magnitudes from well below the smallest subnormal to well above the
     * largest finite value, plus arbitrary bit patterns. */
    bad = 0;
    const long N = 500000;
    for (long i = 0; i < N; i++) {
        uint32_t w[4];
        mpx_philox(31, MPX_RNG_TEST, (uint64_t)i, w);
        float x = (float)exp2(-24.0 + 44.0 * (double)w[0] / 4294967296.0);
        if (w[1] & 1) x = -x;
        bad += !check_one(f, x) + !check_one(f, ref_bits_f(w[2]));
    }
    CHECK(bad == 0, "%s: %ld of %ld random inputs wrong", R->name, bad, 2 * N);

    /* Bulk encode/decode equal the scalar functions. */
    const size_t n = 100003;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    uint8_t *c = malloc(n);
    NEED(x && y && c);
    for (size_t i = 0; i < n; i++)
        x[i] = ref_bits_f(mpx_rand_u32(32, MPX_RNG_TEST, i) & 0xc7ffffffu);
    mpx_encode(f->dtype, x, c, n);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += c[i] != f->enc(x[i]);
    CHECK(bad == 0, "%s: bulk encode differs in %ld places", R->name, bad);
    for (size_t i = 0; i < n; i++) c[i] = (uint8_t)i;
    mpx_decode(f->dtype, c, y, n);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += ref_f_bits(y[i]) != ref_f_bits(f->dec(c[i]));
    CHECK(bad == 0, "%s: bulk decode differs in %ld places", R->name, bad);
    free(x);
    free(y);
    free(c);
}

static void test_specials(void) {
    /* E4M3 (hand-derived): max 0x7e = 1.75 * 2^8 = 448; 464 is the tie between 448 (code 0x7e,
     * even) and the would-be 480 -> 448; anything finite beyond saturates to 448; Inf and NaN
     * -> NaN (0x7f / 0xff); smallest subnormal 2^-9 (code 1); 2^-10 is the tie with 0 -> 0. */
    CHECK(mpx_f32_to_e4m3(448.0f) == 0x7e, "e4m3 448");
    CHECK(mpx_f32_to_e4m3(464.0f) == 0x7e, "e4m3 464 (tie) -> 448");
    CHECK(mpx_f32_to_e4m3(1e9f) == 0x7e, "e4m3 saturates");
    CHECK(mpx_f32_to_e4m3(-1e9f) == 0xfe, "e4m3 saturates, negative");
    CHECK(mpx_f32_to_e4m3(INFINITY) == 0x7f, "e4m3 Inf -> NaN");
    CHECK(mpx_f32_to_e4m3(-INFINITY) == 0xff, "e4m3 -Inf -> -NaN");
    CHECK(mpx_f32_to_e4m3(NAN) == 0x7f, "e4m3 NaN");
    CHECK(mpx_f32_to_e4m3(0x1p-9f) == 0x01, "e4m3 2^-9");
    CHECK(mpx_f32_to_e4m3(0x1p-10f) == 0x00, "e4m3 2^-10 -> 0 (tie to even)");
    CHECK(mpx_f32_to_e4m3(1.5f * 0x1p-10f) == 0x01, "e4m3 1.5 * 2^-10 -> 2^-9");
    CHECK(isnan(mpx_e4m3_to_f32(0x7f)) && mpx_e4m3_to_f32(0x7e) == 448.0f, "e4m3 decode");
    /* E5M2: max 0x7b = 1.75 * 2^15 = 57344; 61440 is the tie with 2^16 (Inf, even) -> Inf. */
    CHECK(mpx_f32_to_e5m2(57344.0f) == 0x7b, "e5m2 max");
    CHECK(mpx_f32_to_e5m2(61439.0f) == 0x7b, "e5m2 below the tie");
    CHECK(mpx_f32_to_e5m2(61440.0f) == 0x7c, "e5m2 tie -> Inf");
    CHECK(mpx_f32_to_e5m2(-1e9f) == 0xfc, "e5m2 overflow -> -Inf");
    CHECK(mpx_f32_to_e5m2(0x1p-16f) == 0x01 && mpx_f32_to_e5m2(0x1p-17f) == 0x00,
          "e5m2 subnormals");
    CHECK((mpx_f32_to_e5m2(NAN) & 0x7f) > 0x7c, "e5m2 NaN");
    const mpx_format_info *a = mpx_format(MPX_F8_E4M3), *b = mpx_format(MPX_F8_E5M2);
    CHECK(a && a->max == 448 && a->min_subnormal == 0x1p-9 && a->min_normal == 0x1p-6 &&
              !a->has_inf,
          "mpx_format(E4M3)");
    CHECK(b && b->max == 57344 && b->min_subnormal == 0x1p-16 && b->min_normal == 0x1p-14 &&
              b->has_inf,
          "mpx_format(E5M2)");
    CHECK(mpx_round_to(MPX_F8_E4M3, 500.0f) == 448.0f && mpx_round_to(MPX_F8_E5M2, 1.1f) == 1.0f,
          "mpx_round_to FP8");
}

int main(void) {
    fp8 e4m3 = {ref_e4m3(), MPX_F8_E4M3, mpx_f32_to_e4m3, mpx_e4m3_to_f32};
    fp8 e5m2 = {ref_e5m2(), MPX_F8_E5M2, mpx_f32_to_e5m2, mpx_e5m2_to_f32};
    test_format(&e4m3);
    test_format(&e5m2);
    test_specials();
    ref_free(&e4m3.ref);
    ref_free(&e5m2.ref);
    return mpx_test_done(__FILE__);
}
