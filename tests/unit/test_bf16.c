/* test_bf16.c — FP32 <-> BF16: exhaustive round trips, RNE against the independent reference
 * (fp_ref.h) on edge cases, every halfway point and its neighbours, and two million random
 * floats; and the bulk (vector) conversions against the scalar ones. All checks are exact.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp_ref.h"
#include "mpx/numerics.h"
#include "mpx/rng.h"
#include "testutil.h"

static ref_format F;

static int check_one(float x) {
    uint16_t got = mpx_f32_to_bf16(x);
    if (isnan(x))
        return (got & 0x7f80) == 0x7f80 && (got & 0x007f) && !!(got & 0x8000) == !!signbit(x);
    int ovf;
    return got == ref_round(&F, (double)x, &ovf);
}

static void test_decode_and_round_trip(void) {
    long bad = 0, nan_bad = 0;
    for (uint32_t c = 0; c <= F.max_code; c++) {
        bad += mpx_bf16_to_f32((uint16_t)c) != (float)F.value[c];
        bad += mpx_bf16_to_f32((uint16_t)(c | 0x8000)) != -(float)F.value[c];
    }
    CHECK(bad == 0, "decode: %ld codes differ from the definition", bad);
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = mpx_bf16_to_f32((uint16_t)h);
        if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) {
            /* NaN: decodes to a quiet NaN with its sign; re-encodes to the quiet pattern. */
            uint16_t back = mpx_f32_to_bf16(f);
            nan_bad += !isnan(f) || !!signbit(f) != !!(h & 0x8000) || back != (h | 0x0040);
        } else {
            bad += mpx_f32_to_bf16(f) != h;
        }
    }
    CHECK(bad == 0, "round trip: %ld non-NaN patterns do not come back", bad);
    CHECK(nan_bad == 0, "round trip: %ld NaN patterns mishandled", nan_bad);
}

static void test_edges(void) {
    /* Hand-derived: BF16 keeps the top 16 bits of FP32, rounding the low 16 to nearest even.
     * 1 + 2^-8 is the tie between 1 (even) and 1 + 2^-7 -> 1; 1 + 3*2^-8 -> 1 + 2^-6 (even);
     * the largest finite is 0x7f7f = (2 - 2^-7) 2^127; FP32 max 0x7f7fffff is beyond the tie
     * with 2^128 -> Inf; FP32 subnormals become BF16 subnormals (2^-133 is code 1). */
    struct {
        uint32_t x;
        uint16_t want;
    } a[] = {
        {0x3f800000u, 0x3f80}, {0x3f808000u, 0x3f80}, {0x3f818000u, 0x3f82}, {0x3f808001u, 0x3f81},
        {0x7f7f0000u, 0x7f7f}, {0x7f7f7fffu, 0x7f7f}, {0x7f7f8000u, 0x7f80}, {0x7f7fffffu, 0x7f80},
        {0x00010000u, 0x0001}, {0x00008000u, 0x0000}, {0x00008001u, 0x0001}, {0x00018000u, 0x0002},
        {0x007fffffu, 0x0080}, {0x00000001u, 0x0000}, {0x80000000u, 0x8000}, {0x7f800000u, 0x7f80},
        {0xff800000u, 0xff80}, {0x7fc00000u, 0x7fc0}, {0xff800001u, 0xffc0}, {0x7fa12345u, 0x7fe1},
    };
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) {
        float x = ref_bits_f(a[i].x);
        uint16_t got = mpx_f32_to_bf16(x);
        CHECK(got == a[i].want, "0x%08x -> 0x%04x, want 0x%04x", a[i].x, got, a[i].want);
        CHECK(check_one(x), "0x%08x disagrees with the reference", a[i].x);
    }
    const mpx_format_info *fi = mpx_format(MPX_BF16);
    CHECK(fi && fi->max == (double)ref_bits_f(0x7f7f0000u) && fi->min_subnormal == 0x1p-133 &&
              fi->min_normal == 0x1p-126 && fi->exp_bits == 8 && fi->man_bits == 7,
          "mpx_format(BF16)");
}

static void test_halfway_and_random(void) {
    long bad = 0, n = 0;
    for (uint32_t c = 0; c <= F.max_code; c++) {
        float mid = (float)((F.value[c] + F.value[c + 1]) / 2); /* 9 significant bits: exact */
        float xs[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (int k = 0; k < 3; k++, n += 2) bad += !check_one(xs[k]) + !check_one(-xs[k]);
    }
    CHECK(bad == 0, "halfway points: %ld of %ld wrong", bad, n);
    const long N = 2000000; /* uniformly random bit patterns cover BF16's whole range */
    bad = 0;
    for (long i = 0; i < N; i++)
        bad += !check_one(ref_bits_f(mpx_rand_u32(21, MPX_RNG_TEST, (uint64_t)i)));
    CHECK(bad == 0, "random bit patterns: %ld of %ld wrong", bad, N);
}

static void test_bulk(void) {
    const size_t n = (1u << 20) + 7;
    float *x = malloc(n * sizeof *x), *back = malloc(n * sizeof *back);
    uint16_t *h = malloc(n * 2), *pat = malloc(n * 2);
    NEED(x && back && h && pat);
    for (size_t i = 0; i < n; i++) {
        uint32_t w[4];
        mpx_philox(22, MPX_RNG_TEST, i, w);
        /* Half arbitrary patterns, half exact ties (low 16 bits 0x8000), which RNE must split. */
        x[i] = ref_bits_f(w[0] & 1 ? w[1] : (w[1] & 0xffff0000u) | 0x8000u);
        pat[i] = (uint16_t)(i * 40503u);
    }
    const char *impls[] = {"c", "f16c", "avx512"};
    const char *bf16_loops[] = {"c", "avx2", "avx512"}; /* F16C has no BF16: its tier's are AVX2 */
    for (int k = 0; k < 3; k++) {
        if (!mpx_convert_limit(impls[k])) {
            printf("  %s: not available on this CPU, skipped\n", impls[k]);
            continue;
        }
        CHECK(strcmp(mpx_convert_impl_bf16(), bf16_loops[k]) == 0,
              "tier %s: BF16 loops named %s, expected %s", impls[k], mpx_convert_impl_bf16(),
              bf16_loops[k]);
        mpx_encode(MPX_BF16, x, h, n);
        long bad = 0;
        for (size_t i = 0; i < n; i++) bad += h[i] != mpx_f32_to_bf16(x[i]);
        CHECK(bad == 0, "%s encode: %ld of %zu differ from the scalar conversion", impls[k], bad,
              n);
        mpx_decode(MPX_BF16, pat, back, n);
        bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += ref_f_bits(back[i]) != ref_f_bits(mpx_bf16_to_f32(pat[i]));
        CHECK(bad == 0, "%s decode: %ld of %zu differ from the scalar conversion", impls[k], bad,
              n);
        printf("  %s (bf16 loops: %s): encode and decode match the scalar conversion\n", impls[k],
               bf16_loops[k]);
    }
    mpx_convert_limit(NULL);
    free(x);
    free(back);
    free(h);
    free(pat);
}

int main(void) {
    F = ref_bf16();
    test_decode_and_round_trip();
    test_edges();
    test_halfway_and_random();
    test_bulk();
    ref_free(&F);
    return mpx_test_done(__FILE__);
}
