/* test_f16.c — FP32 <-> FP16: exhaustive round trips, RNE against an independent reference
 * (fp_ref.h) on the docs/papers.md §1 anchors, every halfway point and its neighbours, and two
 * million random floats; and the bulk (vector) conversions against the scalar ones.
 * Every check is exact (bit equality): conversions have one right answer.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp_ref.h"
#include "mpx/numerics.h"
#include "mpx/rng.h"
#include "testutil.h"

static ref_format F;

/* One input against the reference; returns 1 when it matches. */
static int check_one(float x) {
    uint16_t got = mpx_f32_to_f16(x);
    if (isnan(x))
        return (got & 0x7c00) == 0x7c00 && (got & 0x03ff) && !!(got & 0x8000) == !!signbit(x);
    int ovf;
    return got == ref_round(&F, (double)x, &ovf);
}

static void test_decode_table(void) {
    /* Every finite code decodes to the value the format definition gives. */
    long bad = 0;
    for (uint32_t c = 0; c <= F.max_code; c++) {
        bad += mpx_f16_to_f32((uint16_t)c) != (float)F.value[c];
        bad += mpx_f16_to_f32((uint16_t)(c | 0x8000)) != -(float)F.value[c];
    }
    CHECK(bad == 0, "decode: %ld codes differ from the definition", bad);
    CHECK(signbit(mpx_f16_to_f32(0x8000)) && mpx_f16_to_f32(0x8000) == 0.0f, "-0 decodes to -0");
    CHECK(isinf(mpx_f16_to_f32(0x7c00)) && mpx_f16_to_f32(0xfc00) < 0, "+-Inf");
}

static void test_round_trip_exhaustive(void) {
    long bad = 0, nan_bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mpx_f16_to_f32((uint16_t)h);
        int is_nan_pattern = (h & 0x7c00) == 0x7c00 && (h & 0x03ff);
        if (is_nan_pattern) {
            /* NaN decodes to NaN with its sign, and comes back a quiet NaN with the same payload.
             */
            uint16_t back = mpx_f32_to_f16(f);
            nan_bad += !isnan(f) || !!signbit(f) != !!(h & 0x8000) || back != (h | 0x0200);
        } else {
            bad += mpx_f32_to_f16(f) != h;
        }
    }
    CHECK(bad == 0, "round trip: %ld non-NaN patterns do not come back", bad);
    CHECK(nan_bad == 0, "round trip: %ld NaN patterns mishandled", nan_bad);
}

static void test_anchors(void) {
    /* docs/papers.md §1, with the expected codes derived by hand:
     * 2^-24 is the smallest subnormal (code 1); 2^-25 is the tie between 0 and 2^-24 -> even (0);
     * 1.5*2^-25 and everything in (2^-25, 2^-24) is nearer 2^-24; 65504 is the max (0x7bff);
     * 65520 is the tie between 65504 (odd code) and 65536 (=Inf, even) -> Inf; 65519.99 -> 65504.
     */
    struct {
        float x;
        uint16_t want;
    } a[] = {
        {0x1p-24f, 0x0001},
        {0x1p-25f, 0x0000},
        {1.5f * 0x1p-25f, 0x0001},
        {65504.0f, 0x7bff},
        {65520.0f, 0x7c00},
        {65519.99f, 0x7bff},
        {0x1.000002p-25f, 0x0001}, /* just above 2^-25 */
        {0x1.fffffep-25f, 0x0001}, /* just below 2^-24 */
        {0x1p-14f, 0x0400},        /* smallest normal */
        {0x1.ff8p-15f, 0x03ff},    /* largest subnormal, 1023 * 2^-24 */
        {0x1.ffcp-15f, 0x0400},    /* tie between it (odd) and 2^-14 (even) */
        {1.0f, 0x3c00},
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {1e30f, 0x7c00},
        {-65520.0f, 0xfc00},
        {1.0f + 0x1p-11f, 0x3c00},     /* tie, even mantissa below */
        {1.0f + 3 * 0x1p-11f, 0x3c02}, /* tie, odd mantissa below: up */
        {0x1p-26f, 0x0000},
    };
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) {
        uint16_t got = mpx_f32_to_f16(a[i].x);
        CHECK(got == a[i].want, "anchor %a -> 0x%04x, want 0x%04x", (double)a[i].x, got, a[i].want);
        CHECK(check_one(a[i].x), "anchor %a disagrees with the reference", (double)a[i].x);
        CHECK(check_one(-a[i].x), "anchor -%a disagrees with the reference", (double)a[i].x);
    }
    CHECK(mpx_f16_to_f32(mpx_f32_to_f16(0x1p-24f)) == 0x1p-24f, "2^-24 survives");
    CHECK(mpx_f16_to_f32(mpx_f32_to_f16(65504.0f)) == 65504.0f, "65504 survives");
    /* NaN: quiet, sign kept, top payload bits kept (as F16C does). */
    CHECK(mpx_f32_to_f16(ref_bits_f(0x7fc00000u)) == 0x7e00, "qNaN");
    CHECK(mpx_f32_to_f16(ref_bits_f(0xffc00000u)) == 0xfe00, "-qNaN keeps its sign");
    CHECK(mpx_f32_to_f16(ref_bits_f(0x7f800001u)) == 0x7e00, "sNaN with low payload -> quiet");
    CHECK(mpx_f32_to_f16(ref_bits_f(0x7fa00000u)) == 0x7f00,
          "sNaN with high payload -> quiet, payload kept");
    /* mpx_round_to and the format facts. */
    CHECK(mpx_round_to(MPX_F16, 1.5f * 0x1p-25f) == 0x1p-24f, "mpx_round_to");
    CHECK(mpx_round_to(MPX_F32, 0.1f) == 0.1f, "mpx_round_to F32 is the identity");
    const mpx_format_info *fi = mpx_format(MPX_F16);
    CHECK(fi && fi->max == 65504.0 && fi->min_normal == 0x1p-14 && fi->min_subnormal == 0x1p-24 &&
              fi->exp_bits == 5 && fi->man_bits == 10 && fi->has_inf,
          "mpx_format(F16)");
    CHECK(mpx_format(MPX_I32) == NULL, "mpx_format of a non-floating dtype is NULL");
}

static void test_halfway_points(void) {
    /* Midpoints between consecutive codes (exact in FP32: 12 significant bits), the floats on
     * either side of each, both signs; including the midpoint between 65504 and 2^16. */
    long bad = 0, n = 0;
    for (uint32_t c = 0; c <= F.max_code; c++) {
        float mid = (float)((F.value[c] + F.value[c + 1]) / 2);
        float xs[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (int k = 0; k < 3; k++) {
            bad += !check_one(xs[k]) + !check_one(-xs[k]);
            n += 2;
        }
    }
    CHECK(bad == 0, "halfway points: %ld of %ld wrong", bad, n);
}

static void test_random(void) {
    /* 1e6 uniformly random bit patterns (every exponent, NaN and Inf included) and 1e6
     * log-uniform magnitudes in [2^-30, 2^17) (the FP16 range and its edges), random signs. */
    long bad = 0;
    const long N = 1000000;
    for (long i = 0; i < N; i++) {
        float x = ref_bits_f(mpx_rand_u32(11, MPX_RNG_TEST, (uint64_t)i));
        bad += !check_one(x);
    }
    CHECK(bad == 0, "random bit patterns: %ld of %ld wrong", bad, N);
    bad = 0;
    for (long i = 0; i < N; i++) {
        uint32_t w[4];
        mpx_philox(12, MPX_RNG_TEST, (uint64_t)i, w);
        double l = -30.0 + 47.0 * ((double)w[0] / 4294967296.0);
        float x = (float)exp2(l);
        if (w[1] & 1) x = -x;
        bad += !check_one(x);
    }
    CHECK(bad == 0, "log-uniform floats: %ld of %ld wrong", bad, N);
}

/* Inputs that exercise every path: specials, subnormals, ties, overflow. */
static void fill_hard(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        uint32_t w[4];
        mpx_philox(seed, MPX_RNG_TEST, i, w);
        switch (w[0] % 6) {
        case 0: x[i] = ref_bits_f(w[1]); break; /* any pattern */
        case 1: x[i] = (float)F.value[w[1] % (F.max_code + 1)]; break;
        case 2: { /* a halfway point */
            uint32_t c = w[1] % (F.max_code + 1);
            x[i] = (float)((F.value[c] + F.value[c + 1]) / 2);
            break;
        }
        case 3: x[i] = ldexpf((float)(w[1] >> 8) / 16777216.0f, -(int)(w[2] % 40)); break;
        case 4: {
            const float sp[] = {0.0f, INFINITY, NAN, 65520.0f, 65519.99f, 0x1p-25f, 1e-45f, 3e38f};
            x[i] = sp[w[1] % 8];
            break;
        }
        default: x[i] = (float)exp2(-30.0 + 47.0 * (double)w[1] / 4294967296.0); break;
        }
        if (w[3] & 1) x[i] = -x[i];
    }
}

static void test_bulk(void) {
    /* Each implementation this CPU has (portable C, F16C, AVX-512) against the scalar conversion,
     * bit for bit, on an odd length (vector tails) large enough to be split across threads. */
    const size_t n = (1u << 20) + 13;
    float *x = malloc(n * sizeof *x), *back = malloc(n * sizeof *back);
    uint16_t *h = malloc(n * 2), *pat = malloc(n * 2);
    NEED(x && back && h && pat);
    fill_hard(x, n, 5);
    for (size_t i = 0; i < n; i++) pat[i] = (uint16_t)(i * 40503u); /* every pattern, shuffled */
    const char *impls[] = {"c", "f16c", "avx512"};
    for (int k = 0; k < 3; k++) {
        if (!mpx_convert_limit(impls[k])) {
            printf("  %s: not available on this CPU, skipped\n", impls[k]);
            continue;
        }
        mpx_encode(MPX_F16, x, h, n);
        long bad = 0;
        for (size_t i = 0; i < n; i++) bad += h[i] != mpx_f32_to_f16(x[i]);
        CHECK(bad == 0, "%s encode: %ld of %zu differ from the scalar conversion", impls[k], bad,
              n);
        mpx_decode(MPX_F16, pat, back, n);
        bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += ref_f_bits(back[i]) != ref_f_bits(mpx_f16_to_f32(pat[i]));
        CHECK(bad == 0, "%s decode: %ld of %zu differ from the scalar conversion", impls[k], bad,
              n);
        printf("  %s: encode and decode match the scalar conversion\n", impls[k]);
    }
    mpx_convert_limit(NULL);

    /* F32 "encode" is a copy, in place allowed. */
    mpx_encode(MPX_F32, x, back, n);
    CHECK(memcmp(x, back, n * sizeof *x) == 0, "F32 encode copies");
    mpx_encode(MPX_F32, back, back, n);
    CHECK(memcmp(x, back, n * sizeof *x) == 0, "F32 encode in place");
    free(x);
    free(back);
    free(h);
    free(pat);
}

int main(void) {
    F = ref_f16();
    printf("f16 conversions, vector implementation: %s\n", mpx_convert_impl());
    test_decode_table();
    test_round_trip_exhaustive();
    test_anchors();
    test_halfway_points();
    test_random();
    test_bulk();
    ref_free(&F);
    return mpx_test_done(__FILE__);
}
