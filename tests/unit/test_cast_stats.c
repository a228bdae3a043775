/* test_cast_stats.c — mpx_cast with accounting (docs/design.md §5).
 *
 * 1. Constructed tensors whose counts are derived by hand (comments give the derivation).
 * 2. Scale multiplies before the cast and before counting; F32 destinations count against
 *    stats_format; counts are ADDED to the stats passed in.
 * 3. A brute-force recount with scalar loops on a large random log-uniform tensor, for every
 *    destination format, RNE and stochastic rounding; the vector and portable implementations and
 *    1 vs 2 threads give identical bits and counts.
 * Counts are integers: every comparison is exact.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "fp_ref.h"
#include "mpx/numerics.h"
#include "mpx/rng.h"
#include "testutil.h"

typedef struct {
    uint64_t count, nonzero, flushed, below_min, subnormal, overflow, nonfinite;
} counts;

static void check_counts(const char *what, const mpx_cast_stats *s, counts want) {
    CHECK(s->count == want.count, "%s: count %llu, want %llu", what, (unsigned long long)s->count,
          (unsigned long long)want.count);
    CHECK(s->nonzero == want.nonzero, "%s: nonzero %llu, want %llu", what,
          (unsigned long long)s->nonzero, (unsigned long long)want.nonzero);
    CHECK(s->flushed == want.flushed, "%s: flushed %llu, want %llu", what,
          (unsigned long long)s->flushed, (unsigned long long)want.flushed);
    CHECK(s->below_min == want.below_min, "%s: below_min %llu, want %llu", what,
          (unsigned long long)s->below_min, (unsigned long long)want.below_min);
    CHECK(s->subnormal == want.subnormal, "%s: subnormal %llu, want %llu", what,
          (unsigned long long)s->subnormal, (unsigned long long)want.subnormal);
    CHECK(s->overflow == want.overflow, "%s: overflow %llu, want %llu", what,
          (unsigned long long)s->overflow, (unsigned long long)want.overflow);
    CHECK(s->nonfinite == want.nonfinite, "%s: nonfinite %llu, want %llu", what,
          (unsigned long long)s->nonfinite, (unsigned long long)want.nonfinite);
}

/* The hand-built tensor: (value, multiplicity). */
static const struct {
    float x;
    int k;
} g_items[] = {
    {0.0f, 4},
    {-0.0f, 1},           /* zeros */
    {0x1p-26f, 3},        /* FP16: < 2^-25 -> 0: flushed, below_min; bin -26 */
    {0x1p-25f, 2},        /* FP16: tie 0 / 2^-24 -> 0 (even): flushed, below_min; bin -25 */
    {1.5f * 0x1p-25f, 4}, /* FP16: -> 2^-24: subnormal, below_min, not flushed; bin -25 */
    {0x1p-24f, 2},        /* FP16: smallest subnormal; bin -24 */
    {0x1p-20f, 3},        /* FP16: subnormal; bin -20 */
    {-1.0f, 2},           /* bin 0 */
    {7e4f, 2},            /* FP16: overflow to Inf; binade 16 clamps into the top bin 15 */
    {65519.99f, 1},       /* FP16: -> 65504, no overflow; bin 15 */
    {-INFINITY, 1},       /* nonfinite, not overflow (x is not finite); bin inf */
    {NAN, 1},             /* nonfinite; nonzero (NaN != 0); bin nan */
    {1e-30f, 1},          /* FP16: flushed, below_min; binade -100 clamps into bin -64 */
    {1e-45f, 1},          /* FP32 subnormal 2^-149: flushed, below_min; bin -64 */
};

static size_t build(float *x) {
    size_t n = 0;
    for (size_t i = 0; i < sizeof g_items / sizeof g_items[0]; i++)
        for (int k = 0; k < g_items[i].k; k++) x[n++] = g_items[i].x;
    return n;
}

static void check_hist_handbuilt(const char *what, const mpx_cast_stats *s) {
    /* bin index = binade + 64; zero 80, inf 81, nan 82. */
    uint64_t want[MPX_HIST_BINS] = {0};
    want[0] = 2; /* 1e-30, 1e-45 */
    want[-26 + 64] = 3;
    want[-25 + 64] = 6; /* 2^-25 (2) and 1.5 * 2^-25 (4) */
    want[-24 + 64] = 2;
    want[-20 + 64] = 3;
    want[0 + 64] = 2;
    want[15 + 64] = 3; /* 7e4 (2, clamped) and 65519.99 */
    want[MPX_HIST_ZERO] = 5;
    want[MPX_HIST_INF] = 1;
    want[MPX_HIST_NAN] = 1;
    int bad = 0;
    for (int k = 0; k < MPX_HIST_BINS; k++) bad += s->hist[k] != want[k];
    CHECK(bad == 0, "%s: %d histogram bins differ from the hand-derived ones", what, bad);
}

static void test_handbuilt(void) {
    float x[64], y32[64], xs[64];
    uint16_t h[64], h2[64];
    size_t n = build(x);
    CHECK(n == 28, "hand-built tensor has 28 elements");

    /* FP16, RNE, scale 1. Totals of the items above:
     * nonzero 28 - 5 zeros = 23; flushed 3 + 2 + 1 + 1 = 7; below_min 3 + 2 + 4 + 1 + 1 = 11;
     * subnormal 4 + 2 + 3 = 9; overflow 2 (7e4); nonfinite 2. */
    counts f16 = {28, 23, 7, 11, 9, 2, 2};
    mpx_cast_stats s = {0};
    mpx_cast_spec spec = mpx_cast_plain(MPX_F16);
    spec.stats = &s;
    mpx_cast(&spec, x, h, n);
    check_counts("f16", &s, f16);
    check_hist_handbuilt("f16", &s);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != mpx_f32_to_f16(x[i]);
    CHECK(bad == 0, "f16: cast bits differ from mpx_f32_to_f16 in %d places", bad);

    /* Counts are added: a second cast doubles every count. */
    mpx_cast(&spec, x, h, n);
    counts twice = {56, 46, 14, 22, 18, 4, 4};
    check_counts("f16 twice", &s, twice);
    CHECK(s.hist[MPX_HIST_ZERO] == 10, "histogram adds too");

    /* Scale multiplies before counting: x * 2^-10 cast with scale 2^10 gives the same x. */
    for (size_t i = 0; i < n; i++) xs[i] = x[i] * 0x1p-10f;
    mpx_cast_stats s2 = {0};
    spec.scale = 0x1p10f;
    spec.stats = &s2;
    mpx_cast(&spec, xs, h2, n);
    /* 1e-45 * 2^-10 is 0 in FP32: that element becomes a zero (one more zero, one less flushed
     * and below_min, bin -64 loses one). Everything else is as before. */
    counts f16s = {28, 22, 6, 10, 9, 2, 2};
    check_counts("f16 scaled", &s2, f16s);
    CHECK(s2.hist[0] == 1 && s2.hist[MPX_HIST_ZERO] == 6, "scaled histogram");
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += x[i] != 1e-45f && h2[i] != h[i];
    CHECK(bad == 0, "scaled cast bits differ in %d places", bad);

    /* All 2^-30 (flushed unscaled) with scale 2^10: 2^-20, FP16 subnormal, nothing flushed. */
    float tiny[10];
    for (int i = 0; i < 10; i++) tiny[i] = 0x1p-30f;
    mpx_cast_stats s3 = {0};
    spec.stats = &s3;
    mpx_cast(&spec, tiny, h2, 10);
    counts tiny_c = {10, 10, 0, 0, 10, 0, 0};
    check_counts("scale before counting", &s3, tiny_c);
    CHECK(s3.hist[-20 + 64] == 10 && h2[0] == 0x0010, "2^-30 * 2^10 = 2^-20 -> code 0x10, bin -20");

    /* F32 destination counting against FP16: a scaled copy, same counts as the FP16 cast. */
    mpx_cast_stats s4 = {0};
    mpx_cast_spec sp32 = mpx_cast_plain(MPX_F32);
    sp32.stats_format = MPX_F16;
    sp32.stats = &s4;
    mpx_cast(&sp32, x, y32, n);
    check_counts("f32 dst, f16 stats", &s4, f16);
    check_hist_handbuilt("f32 dst, f16 stats", &s4);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += ref_f_bits(y32[i]) != ref_f_bits(x[i]) && !isnan(x[i]);
    CHECK(bad == 0, "f32 dst is a copy");
    /* ... in place, with a scale: counts are of the scaled values, exactly once. */
    for (size_t i = 0; i < n; i++) y32[i] = xs[i];
    mpx_cast_stats s5 = {0};
    sp32.scale = 0x1p10f;
    sp32.stats = &s5;
    mpx_cast(&sp32, y32, y32, n);
    check_counts("f32 in place, scaled", &s5, f16s);

    /* BF16 (min subnormal 2^-133, min normal 2^-126, max ~3.4e38): only 1e-45 (FP32 subnormal
     * 2^-149) is below BF16's range: flushed 1, below_min 1; nothing subnormal or overflowing. */
    counts bf16 = {28, 23, 1, 1, 0, 0, 2};
    mpx_cast_stats s6 = {0};
    mpx_cast_spec spb = mpx_cast_plain(MPX_BF16);
    spb.stats = &s6;
    mpx_cast(&spb, x, h, n);
    check_counts("bf16", &s6, bf16);
    check_hist_handbuilt("bf16", &s6);
    /* An F16 destination counted against BF16 (RNE into BF16). */
    mpx_cast_stats s7 = {0};
    spec = mpx_cast_plain(MPX_F16);
    spec.stats_format = MPX_BF16;
    spec.stats = &s7;
    mpx_cast(&spec, x, h, n);
    check_counts("f16 dst, bf16 stats", &s7, bf16);
}

static void test_handbuilt_fp8(void) {
    /* E4M3 (max 448, min normal 2^-6, min subnormal 2^-9, no Inf):
     *   500, 465: beyond the 448/480 tie at 464 -> saturated: overflow (2)
     *   450, 464: round to 448 (464 is the tie, 448 is even): not overflow
     *   2^-10: tie between 0 and 2^-9 -> 0: flushed, below_min
     *   1.5 * 2^-10 -> 2^-9: subnormal, below_min
     *   2^-7: subnormal;  1.0: normal;  Inf: nonfinite (-> NaN)
     * count 9, nonzero 9, flushed 1, below_min 2, subnormal 2, overflow 2, nonfinite 1. */
    float a[] = {500.0f,          465.0f,  450.0f, 464.0f,  0x1p-10f,
                 1.5f * 0x1p-10f, 0x1p-7f, 1.0f,   INFINITY};
    uint8_t c[9];
    mpx_cast_stats s = {0};
    mpx_cast_spec spec = mpx_cast_plain(MPX_F8_E4M3);
    spec.stats = &s;
    mpx_cast(&spec, a, c, 9);
    counts e4m3 = {9, 9, 1, 2, 2, 2, 1};
    check_counts("e4m3", &s, e4m3);
    CHECK(c[0] == 0x7e && c[1] == 0x7e && c[2] == 0x7e && c[8] == 0x7f, "e4m3 saturation bits");
    /* E5M2 (max 57344, min normal 2^-14, min subnormal 2^-16):
     *   57344: max, fine;  61440: tie with 2^16 -> Inf: overflow;  1e5: overflow
     *   2^-17: tie with 0 -> 0: flushed, below_min;  2^-16, 2^-15: subnormal;  2^-14: normal
     *   -0: zero;  NaN: nonfinite, nonzero
     * count 9, nonzero 8, flushed 1, below_min 1, subnormal 2, overflow 2, nonfinite 1. */
    float b[] = {57344.0f, 61440.0f, 1e5f, 0x1p-17f, 0x1p-16f, 0x1p-15f, 0x1p-14f, -0.0f, NAN};
    mpx_cast_stats s2 = {0};
    spec = mpx_cast_plain(MPX_F8_E5M2);
    spec.stats = &s2;
    mpx_cast(&spec, b, c, 9);
    counts e5m2 = {9, 8, 1, 1, 2, 2, 1};
    check_counts("e5m2", &s2, e5m2);
    CHECK(mpx_hist_bin(b[0]) == 15 + 64 && mpx_hist_bin(b[2]) == 79 && mpx_hist_bin(b[7]) == 80 &&
              mpx_hist_bin(b[8]) == 82 && mpx_hist_bin(-INFINITY) == 81 &&
              mpx_hist_bin(0x1p-64f) == 0 && mpx_hist_bin(0x1.fffffep-64f) == 0 &&
              mpx_hist_bin(0x1p-63f) == 1,
          "mpx_hist_bin");
}

/* ---- brute force ---- */

static ref_format R[MPX_DTYPE_COUNT];

static uint32_t scalar_rne(mpx_dtype t, float x) {
    switch (t) {
    case MPX_F16: return mpx_f32_to_f16(x);
    case MPX_BF16: return mpx_f32_to_bf16(x);
    case MPX_F8_E4M3: return mpx_f32_to_e4m3(x);
    default: return mpx_f32_to_e5m2(x);
    }
}

static float scalar_decode(mpx_dtype t, uint32_t c) {
    switch (t) {
    case MPX_F16: return mpx_f16_to_f32((uint16_t)c);
    case MPX_BF16: return mpx_bf16_to_f32((uint16_t)c);
    case MPX_F8_E4M3: return mpx_e4m3_to_f32((uint8_t)c);
    default: return mpx_e5m2_to_f32((uint8_t)c);
    }
}

static uint32_t load_code(mpx_dtype t, const void *p, size_t i) {
    return mpx_dtype_size(t) == 2 ? ((const uint16_t *)p)[i] : ((const uint8_t *)p)[i];
}

static int ref_bin(float x) {
    if (x == 0) return MPX_HIST_ZERO;
    if (isinf(x)) return MPX_HIST_INF;
    if (isnan(x)) return MPX_HIST_NAN;
    int e;
    frexp(fabs((double)x), &e); /* |x| = m 2^e, m in [0.5, 1): binade e - 1 */
    int b = e - 1 + 64;
    return b < 0 ? 0 : (b > 79 ? 79 : b);
}

/* Recount with plain scalar code. y codes: the dst (when dst == sf) or RNE into sf. */
static void brute(const mpx_cast_spec *sp, const float *src, const void *dst, size_t n,
                  mpx_cast_stats *out) {
    mpx_dtype sf = sp->stats_format;
    const mpx_format_info *fi = mpx_format(sf);
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < n; i++) {
        float x = sp->scale * src[i];
        uint32_t code = sp->dst == sf ? load_code(sf, dst, i) : scalar_rne(sf, x);
        float y = scalar_decode(sf, code);
        out->count++;
        out->nonzero += x != 0;
        out->nonfinite += !isfinite(x);
        out->below_min += x != 0 && fabs((double)x) < fi->min_subnormal;
        out->flushed += x != 0 && isfinite(x) && y == 0;
        out->subnormal += y != 0 && fabs((double)y) < fi->min_normal;
        if (sf != MPX_F8_E4M3) {
            out->overflow += isfinite(x) && isinf(y);
        } else if (isfinite(x)) {
            /* E4M3 overflow = saturation: the unbounded rounding passed 448. */
            int ovf;
            if (sp->dst == sf && sp->rounding == MPX_ROUND_STOCHASTIC)
                ref_round_sr(&R[sf], x,
                             mpx_rand_u32(sp->seed, MPX_RNG_ROUNDING ^ sp->stream, sp->offset + i),
                             &ovf);
            else
                ref_round(&R[sf], x, &ovf);
            out->overflow += ovf;
        }
        out->hist[ref_bin(x)]++;
    }
}

static int stats_equal(const mpx_cast_stats *a, const mpx_cast_stats *b) {
    return memcmp(a, b, sizeof *a) == 0;
}

static void fill_random(float *x, size_t n) {
    /* Log-uniform magnitudes 2^U(-70, 20) (all bins, every format's underflow and overflow),
     * random signs; 2% zeros, 0.5% Inf, 0.5% NaN, 2% exact FP16 ties. */
    for (size_t i = 0; i < n; i++) {
        uint32_t w[4];
        mpx_philox(41, MPX_RNG_TEST, i, w);
        unsigned cat = w[0] % 200;
        if (cat < 4)
            x[i] = 0.0f;
        else if (cat < 5)
            x[i] = INFINITY;
        else if (cat < 6)
            x[i] = NAN;
        else if (cat < 10)
            x[i] = ldexpf(1.0f + ldexpf(2.0f * (float)(w[2] % 1024) + 1.0f, -11),
                          (int)(w[3] % 40) - 25);
        else
            x[i] = (float)exp2(-70.0 + 90.0 * (double)w[1] / 4294967296.0);
        if (w[3] & 0x100) x[i] = -x[i];
    }
}

static void test_brute_force(void) {
    const size_t n = 300007; /* above the threading threshold, not a multiple of any block */
    float *src = malloc(n * sizeof *src);
    void *dst = malloc(n * 4), *dst2 = malloc(n * 4);
    NEED(src && dst && dst2);
    fill_random(src, n);
    const struct {
        mpx_dtype dst, sf;
    } combos[] = {
        {MPX_F16, MPX_F16},         {MPX_BF16, MPX_BF16}, {MPX_F8_E4M3, MPX_F8_E4M3},
        {MPX_F8_E5M2, MPX_F8_E5M2}, {MPX_F32, MPX_F16},   {MPX_F32, MPX_BF16},
        {MPX_F32, MPX_F8_E4M3},     {MPX_BF16, MPX_F16},  {MPX_F16, MPX_F8_E5M2},
    };
    const float scales[] = {1.0f, 0x1p-7f, 0.7f};
    for (size_t c = 0; c < sizeof combos / sizeof combos[0]; c++) {
        for (int rnd = 0; rnd < 2; rnd++) {
            for (int k = 0; k < 3; k++) {
                mpx_cast_stats got = {0}, want, again = {0};
                mpx_cast_spec sp = mpx_cast_plain(combos[c].dst);
                sp.stats_format = combos[c].sf;
                sp.rounding = rnd ? MPX_ROUND_STOCHASTIC : MPX_ROUND_RNE;
                sp.scale = scales[k];
                sp.seed = 99;
                sp.stream = 5;
                sp.offset = 1000003;
                char what[96];
                snprintf(what, sizeof what, "dst %s stats %s %s scale %g", mpx_dtype_name(sp.dst),
                         mpx_dtype_name(sp.stats_format), rnd ? "sr" : "rne", (double)sp.scale);
                /* Counts are added: start from a non-empty stats and subtract it afterwards. */
                got.count = 5;
                got.hist[3] = 7;
                sp.stats = &got;
                mpx_cast(&sp, src, dst, n);
                got.count -= 5;
                got.hist[3] -= 7;
                brute(&sp, src, dst, n, &want);
                CHECK(stats_equal(&got, &want), "%s: counts differ from the brute-force recount",
                      what);
                if (!stats_equal(&got, &want)) {
                    counts w = {want.count,     want.nonzero,  want.flushed,  want.below_min,
                                want.subnormal, want.overflow, want.nonfinite};
                    check_counts(what, &got, w);
                }
                /* RNE bits: equal to the scalar conversion. */
                size_t esz = mpx_dtype_size(sp.dst);
                if (!rnd) {
                    long bad = 0;
                    for (size_t i = 0; i < n; i++) {
                        float x = sp.scale * src[i];
                        if (sp.dst == MPX_F32)
                            bad += ref_f_bits(((float *)dst)[i]) != ref_f_bits(x) && !isnan(x);
                        else
                            bad += load_code(sp.dst, dst, i) != scalar_rne(sp.dst, x);
                    }
                    CHECK(bad == 0, "%s: %ld elements differ from the scalar cast", what, bad);
                }
                /* Portable implementation and one thread: same bits, same counts. */
                mpx_convert_force_portable(1);
                sp.stats = &again;
                mpx_cast(&sp, src, dst2, n);
                mpx_convert_force_portable(0);
                CHECK(memcmp(dst, dst2, n * esz) == 0 && stats_equal(&got, &again),
                      "%s: portable path differs from %s", what, mpx_convert_impl());
                memset(&again, 0, sizeof again);
                omp_set_num_threads(1);
                mpx_cast(&sp, src, dst2, n);
                omp_set_num_threads(2);
                CHECK(memcmp(dst, dst2, n * esz) == 0 && stats_equal(&got, &again),
                      "%s: 1 thread differs from 2", what);
            }
        }
    }
    free(src);
    free(dst);
    free(dst2);
}

int main(void) {
    R[MPX_F16] = ref_f16();
    R[MPX_BF16] = ref_bf16();
    R[MPX_F8_E4M3] = ref_e4m3();
    R[MPX_F8_E5M2] = ref_e5m2();
    omp_set_num_threads(2);
    test_handbuilt();
    test_handbuilt_fp8();
    test_brute_force();
    for (int t = MPX_F16; t <= MPX_F8_E5M2; t++) ref_free(&R[t]);
    return mpx_test_done(__FILE__);
}
