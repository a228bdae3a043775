/* test_fp8_recipes.c — the FP8 training recipes' numerics (fp8.h), exact:
 *  - per-tensor quantization: every result against the independent reference (fp_ref.h: the
 *    nearest-even FP8 value of x * scale in double, saturating, then / scale in FP32) for both
 *    formats and several scales, on every FP8 value's neighbourhood (the value, its halfway
 *    points, one FP32 ulp either side) and a million random floats over 40 binades; the fast
 *    path (no counting) and the counted path the same bits; the counts of a constructed tensor;
 *  - the scale rule (margin, power of two, amax 0 / Inf / NaN keep the previous scale);
 *  - delayed scaling's history as a state machine, hand-derived sequences for max and most
 *    recent;
 *  - MX block exponents under both rules on constructed amaxes (exactly a power of two, just
 *    above one, the format's max, beyond E8M0's range) and MX quantization on constructed
 *    blocks (saturation under the floor rule, none under ceil, an all-zero block, NaN and Inf
 *    blocks, FP32-subnormal-only blocks, rows that end inside a block) against the reference;
 *    on a large random tensor in both formats and rules, the fast path in place the counted
 *    path's bits (per-tensor quantization in place too); column blocks the same bits, counts
 *    and scales as row blocks of the transposed matrices.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp_ref.h"
#include "mpx/fp8.h"
#include "mpx/rng.h"
#include "testutil.h"

/* The reference quantization of x under a per-tensor scale: nearest even, saturating. */
static float ref_quant(const ref_format *R, float x, float scale) {
    const float v = x * scale; /* the cast's own FP32 product */
    if (isnan(v)) return NAN;
    int ovf;
    uint32_t c = ref_round(R, (double)v, &ovf);
    if (ovf && isfinite(v)) c = (signbit(v) ? R->sign_bit : 0u) | R->max_code; /* saturate */
    const double r = ref_value(R, c);
    return isnan(r) ? NAN : (float)r / scale;
}

static int same(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

static void check_quantize(mpx_dtype fmt, ref_format *R) {
    static const float scales[] = {1.0f, 3.7f, 1024.0f, 1e-3f, 0x1p-20f};
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof *x), *fast = malloc(N * sizeof *x), *cnt = malloc(N * sizeof *x);
    for (int si = 0; si < 5; si++) {
        const float s = scales[si];
        size_t n = 0;
        for (uint32_t c = 0; c <= R->max_code && n + 8 < N; c++) { /* neighbourhoods */
            const double v = R->value[c], up = R->value[c + 1];
            const float pts[4] = {(float)(v / s), (float)((v + up) / 2 / s), 0, 0};
            for (int k = 0; k < 2; k++) {
                x[n++] = pts[k];
                x[n++] = nextafterf(pts[k], INFINITY);
                x[n++] = -nextafterf(pts[k], 0);
            }
        }
        mpx_rng r = mpx_rng_make(77 + (uint64_t)si, MPX_RNG_TEST, 0);
        while (n < N - 4) {
            const float m = mpx_rng_uniform(&r) + 0.5f;
            const int e = (int)mpx_rng_below(&r, 40) - 30;
            x[n++] = (mpx_rng_u32(&r) & 1 ? -1 : 1) * ldexpf(m, e) / s;
        }
        x[n++] = INFINITY, x[n++] = -INFINITY, x[n++] = NAN, x[n++] = -0.0f;
        mpx_cast_stats st;
        memset(&st, 0, sizeof st);
        mpx_fp8_quantize(fmt, s, x, fast, n, NULL);
        memcpy(cnt, x, n * sizeof *x); /* in place, as the graph calls it */
        mpx_fp8_quantize(fmt, s, cnt, cnt, n, NULL);
        long bad_inplace = 0;
        for (size_t i = 0; i < n; i++) bad_inplace += !same(fast[i], cnt[i]);
        CHECK(bad_inplace == 0, "%s scale %g: in place and out of place differ in %ld", R->name, s,
              bad_inplace);
        mpx_fp8_quantize(fmt, s, x, cnt, n, &st);
        long bad_ref = 0, bad_paths = 0;
        size_t first = n;
        for (size_t i = 0; i < n; i++) {
            const int ok = isinf(x[i]) ? 1 : same(fast[i], ref_quant(R, x[i], s));
            if (!ok && first == n) first = i;
            bad_ref += !ok;
            bad_paths += !same(fast[i], cnt[i]);
        }
        CHECK(bad_ref == 0, "%s scale %g: %ld of %zu differ from the reference (first x = %a: %a, "
              "want %a)", R->name, s, bad_ref, n, first < n ? x[first] : 0,
              first < n ? fast[first] : 0, first < n ? ref_quant(R, x[first], s) : 0);
        CHECK(bad_paths == 0, "%s scale %g: the counted and the fast path differ in %ld", R->name,
              s, bad_paths);
        CHECK(st.count == n, "%s: %llu counted of %zu", R->name, (unsigned long long)st.count, n);
        /* Infinite x: E5M2 keeps Inf, E4M3 (no Inf) reads back NaN, on both paths. */
        CHECK(fmt == MPX_F8_E5M2 ? isinf(fast[n - 4]) && isinf(cnt[n - 4])
                                 : isnan(fast[n - 4]) && isnan(cnt[n - 4]),
              "%s: Inf reads back as %g / %g", R->name, fast[n - 4], cnt[n - 4]);
    }
    /* Counts of a constructed tensor at scale 1: one value flushed, one saturated. */
    const float t[4] = {fmt == MPX_F8_E5M2 ? 7e4f : 500.0f, 1e-7f, 1.0f, 0.0f};
    float out[4];
    mpx_cast_stats st;
    memset(&st, 0, sizeof st);
    mpx_fp8_quantize(fmt, 1.0f, t, out, 4, &st);
    CHECK(st.nonzero == 3 && st.flushed == 1 && st.overflow == 1 && out[0] == (float)R->value[R->max_code],
          "%s counts: nonzero %llu flushed %llu overflow %llu, saturated to %g", R->name,
          (unsigned long long)st.nonzero, (unsigned long long)st.flushed,
          (unsigned long long)st.overflow, out[0]);
    free(x), free(fast), free(cnt);
}

static void check_scales(void) {
    CHECK(mpx_fp8_scale(MPX_F8_E4M3, 2.0f, 0, 0, 7) == 224.0, "448 / 2");
    CHECK(mpx_fp8_scale(MPX_F8_E4M3, 2.0f, 1, 0, 7) == 112.0, "margin 1");
    CHECK(mpx_fp8_scale(MPX_F8_E4M3, 2.0f, 0, 1, 7) == 128.0, "power of two below 224");
    CHECK(mpx_fp8_scale(MPX_F8_E5M2, 0.5f, 0, 1, 7) == 65536.0, "57344 / 0.5 = 114688 -> 2^16");
    CHECK(mpx_fp8_scale(MPX_F8_E4M3, 0.0f, 0, 0, 7) == 7.0, "amax 0 keeps the scale");
    CHECK(mpx_fp8_scale(MPX_F8_E4M3, INFINITY, 0, 0, 7) == 7.0, "amax Inf keeps the scale");
    CHECK(mpx_fp8_scale(MPX_F8_E4M3, NAN, 0, 0, 7) == 7.0, "amax NaN keeps the scale");
    /* Delayed: history of 3, the maximum. */
    mpx_fp8_history h;
    mpx_fp8_history_init(&h, 3, 0);
    CHECK(h.scale == 1.0, "initial scale 1");
    static const float am[] = {1, 4, 2, 0.5f, 0.25f, 0};
    static const double want_max[] = {448, 112, 112, 112, 224, 896};
    for (int i = 0; i < 6; i++) {
        mpx_fp8_history_push(&h, MPX_F8_E4M3, am[i], 0, 0);
        CHECK(h.scale == want_max[i], "max history after push %d: scale %g, want %g", i, h.scale,
              want_max[i]);
    }
    /* A NaN amax in the history keeps the scale while it is in the window. */
    mpx_fp8_history_init(&h, 2, 0);
    mpx_fp8_history_push(&h, MPX_F8_E4M3, 2.0f, 0, 0);
    mpx_fp8_history_push(&h, MPX_F8_E4M3, NAN, 0, 0);
    mpx_fp8_history_push(&h, MPX_F8_E4M3, 4.0f, 0, 0);
    CHECK(h.scale == 224.0, "a NaN in the window keeps the scale: %g", h.scale);
    mpx_fp8_history_push(&h, MPX_F8_E4M3, 1.0f, 0, 0);
    CHECK(h.scale == 112.0, "the NaN left the window: %g", h.scale);
    /* Most recent: the newest amax, a zero one keeping the previous scale. */
    mpx_fp8_history_init(&h, 3, 1);
    static const double want_recent[] = {448, 112, 224, 896, 1792, 1792};
    for (int i = 0; i < 6; i++) {
        mpx_fp8_history_push(&h, MPX_F8_E4M3, am[i], 0, 0);
        CHECK(h.scale == want_recent[i], "most-recent history after push %d: scale %g, want %g",
              i, h.scale, want_recent[i]);
    }
}

/* The reference MX quantization of n elements in rows of `row`: per 32-element block of a row
 * (the last one of a row may be short) the shared exponent from the block's amax (NaN if any
 * element is NaN), then each element the reference's nearest value of x 2^-e, times 2^e. */
static void ref_mx_quantize(const ref_format *R, mpx_dtype fmt, mpx_mx_rule rule, const float *x,
                            float *want, int n, int row) {
    for (int b = 0; b < n;) {
        const int r = b / row, b1 = b + 32 < (r + 1) * row ? b + 32 : (r + 1) * row;
        float amax = 0;
        for (int i = b; i < b1; i++) amax = isnan(amax) || isnan(x[i]) ? NAN : fmaxf(amax, fabsf(x[i]));
        const int e = mpx_mx_exponent(fmt, rule, isnan(amax) ? INFINITY : amax);
        for (int i = b; i < b1; i++)
            want[i] = e == MPX_MX_NAN_EXP ? NAN : ldexpf(ref_quant(R, ldexpf(x[i], -e), 1.0f), e);
        b = b1;
    }
}

static void check_mx(void) {
    /* Exponents. E4M3: emax 8 (448 = 1.75 2^8); E5M2: emax 15. */
    CHECK(mpx_mx_exponent(MPX_F8_E4M3, MPX_MX_FLOOR, 448.0f) == 0, "floor 448");
    CHECK(mpx_mx_exponent(MPX_F8_E4M3, MPX_MX_FLOOR, 1.0f) == -8, "floor 1");
    CHECK(mpx_mx_exponent(MPX_F8_E4M3, MPX_MX_FLOOR, 511.0f) == 0, "floor 511");
    CHECK(mpx_mx_exponent(MPX_F8_E4M3, MPX_MX_FLOOR, 512.0f) == 1, "floor 512");
    CHECK(mpx_mx_exponent(MPX_F8_E5M2, MPX_MX_FLOOR, 1.0f) == -15, "E5M2 floor 1");
    CHECK(mpx_mx_exponent(MPX_F8_E4M3, MPX_MX_CEIL, 448.0f) == 0, "ceil 448");
    CHECK(mpx_mx_exponent(MPX_F8_E4M3, MPX_MX_CEIL, 449.0f) == 1, "ceil 449");
    CHECK(mpx_mx_exponent(MPX_F8_E4M3, MPX_MX_CEIL, 1.0f) == -8, "ceil 1: ceil(log2(1/448))");
    CHECK(mpx_mx_exponent(MPX_F8_E4M3, MPX_MX_CEIL, 0x1p-126f) == -127, "ceil clamps at -127");
    CHECK(mpx_mx_exponent(MPX_F8_E4M3, MPX_MX_FLOOR, 0x1p-140f) == -127, "floor clamps at -127");
    CHECK(mpx_mx_exponent(MPX_F8_E4M3, MPX_MX_FLOOR, 0.0f) == -127, "zero block");
    CHECK(mpx_mx_exponent(MPX_F8_E4M3, MPX_MX_FLOOR, INFINITY) == MPX_MX_NAN_EXP, "Inf block");

    ref_format R = ref_e4m3();
    enum { ROW = 70, ROWS = 6, N = ROW * ROWS }; /* rows end inside a block */
    float x[N], y[N];
    mpx_rng r = mpx_rng_make(5, MPX_RNG_TEST, 0);
    for (int i = 0; i < N; i++) x[i] = (mpx_rng_uniform(&r) - 0.5f) * ldexpf(1.0f, (i / ROW) * 7 - 20);
    x[0] = 500.0f;                                              /* row 0: saturates under floor */
    for (int i = ROW; i < ROW + 32; i++) x[i] = 0.0f;           /* row 1, block 0: zeros */
    x[2 * ROW + 3] = NAN;                                       /* row 2, block 0: NaN */
    x[3 * ROW + 40] = -INFINITY;                                /* row 3, block 1: Inf */
    for (int i = 4 * ROW; i < 4 * ROW + 32; i++) x[i] = 0x1p-140f * (float)(i % 5); /* subnormal */
    for (int rule = 0; rule < 2; rule++) {
        mpx_mx_scales sc;
        mpx_cast_stats st;
        memset(&st, 0, sizeof st);
        mpx_mx_quantize(MPX_F8_E4M3, (mpx_mx_rule)rule, x, y, N, ROW, &st, &sc);
        float want[N];
        ref_mx_quantize(&R, MPX_F8_E4M3, (mpx_mx_rule)rule, x, want, N, ROW);
        long bad = 0;
        for (int i = 0; i < N; i++) bad += !same(y[i], want[i]);
        CHECK(bad == 0, "mx %s: %ld elements differ from the reference", rule ? "ceil" : "floor", bad);
        CHECK(sc.zero_blocks == 1 && sc.nan_blocks == 2 && sc.blocks == ROWS * 3,
              "mx %s: %llu blocks, %llu zero, %llu NaN", rule ? "ceil" : "floor",
              (unsigned long long)sc.blocks, (unsigned long long)sc.zero_blocks,
              (unsigned long long)sc.nan_blocks);
        CHECK(rule == MPX_MX_FLOOR ? y[0] == 448.0f && st.overflow >= 1 : y[0] == 512.0f,
              "mx %s: 500 quantizes to %g", rule ? "ceil" : "floor", y[0]);
    }
    ref_free(&R);
}

/* MX quantization of a large tensor in both formats and both rules: the fast path (no counts,
 * the one training takes between statistics steps) gives the counted path's bits, and the
 * counted path the reference's, block by block. Rows of 1000 (blocks end inside rows), 64 rows
 * (past the size at which the quantizer goes parallel); per block a random binade over 60, and
 * blocks of zeros, of FP32 subnormals, with a NaN, with an Inf. */
static void check_mx_paths(void) {
    enum { ROW = 1000, ROWS = 64, N = ROW * ROWS };
    float *x = malloc(N * sizeof *x), *fast = malloc(N * sizeof *x), *cnt = malloc(N * sizeof *x),
          *want = malloc(N * sizeof *x);
    mpx_rng r = mpx_rng_make(11, MPX_RNG_TEST, 0);
    for (int b = 0; b < N; b += 32) {
        const int kind = (int)mpx_rng_below(&r, 20), e = (int)mpx_rng_below(&r, 60) - 40;
        for (int i = b; i < b + 32 && i < N; i++) {
            const float m = (mpx_rng_uniform(&r) - 0.5f) * 2;
            x[i] = kind == 0 ? 0.0f : kind == 1 ? 0x1p-140f * m : ldexpf(m, e);
        }
        if (kind == 2) x[b + 5] = NAN;
        if (kind == 3) x[b + 7] = -INFINITY;
    }
    for (int f = 0; f < 2; f++) {
        const mpx_dtype fmt = f ? MPX_F8_E5M2 : MPX_F8_E4M3;
        ref_format R = f ? ref_e5m2() : ref_e4m3();
        for (int rule = 0; rule < 2; rule++) {
            mpx_cast_stats st;
            memset(&st, 0, sizeof st);
            memcpy(fast, x, N * sizeof *x); /* in place, as the graph calls it */
            mpx_mx_quantize(fmt, (mpx_mx_rule)rule, fast, fast, N, ROW, NULL, NULL);
            mpx_mx_quantize(fmt, (mpx_mx_rule)rule, x, cnt, N, ROW, &st, NULL);
            ref_mx_quantize(&R, fmt, (mpx_mx_rule)rule, x, want, N, ROW);
            long paths = 0, bad = 0;
            for (int i = 0; i < N; i++) {
                bad += !same(cnt[i], want[i]);
                paths += !same(fast[i], cnt[i]);
            }
            CHECK(bad == 0, "mx %s %s: %ld of %d elements differ from the reference", R.name,
                  rule ? "ceil" : "floor", bad, N);
            CHECK(paths == 0, "mx %s %s: the fast and the counted path differ in %ld elements",
                  R.name, rule ? "ceil" : "floor", paths);
            CHECK(st.count == N, "mx %s: %llu counted of %d", R.name, (unsigned long long)st.count, N);
        }
        ref_free(&R);
    }
    free(x), free(fast), free(cnt), free(want);
}

/* Column blocks (mpx_mx_quantize_cols) against row blocks of the transposed matrices: the same
 * bits, counts and scales, counted and fast, on batches of matrices with ragged edges (rows and
 * columns not multiples of 32 or of the 128-column tiles) whose blocks are zero, NaN, Inf,
 * FP32-subnormal or spread over 60 binades. */
static void check_mx_cols(void) {
    enum { B = 3, R = 70, C = 150, N = B * R * C };
    float *x = malloc(N * sizeof *x), *t = malloc(N * sizeof *t), *cols = malloc(N * sizeof *x);
    float *fast = malloc(N * sizeof *x), *back = malloc(N * sizeof *x);
    mpx_rng r = mpx_rng_make(13, MPX_RNG_TEST, 0);
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            const int kind = (int)mpx_rng_below(&r, 20), e = (int)mpx_rng_below(&r, 60) - 40;
            for (int i = 0; i < R; i++) {
                const float m = (mpx_rng_uniform(&r) - 0.5f) * 2;
                x[(b * R + i) * C + c] = kind == 0 ? 0.0f : kind == 1 ? 0x1p-140f * m : ldexpf(m, e);
            }
            if (kind == 2) x[(b * R + 33) * C + c] = NAN;
            if (kind == 3) x[(b * R + 69) * C + c] = -INFINITY;
        }
    for (int b = 0; b < B; b++) /* t: each matrix transposed, [C, R] */
        for (int i = 0; i < R; i++)
            for (int c = 0; c < C; c++) t[(b * C + c) * R + i] = x[(b * R + i) * C + c];
    for (int f = 0; f < 2; f++) {
        const mpx_dtype fmt = f ? MPX_F8_E5M2 : MPX_F8_E4M3;
        for (int rule = 0; rule < 2; rule++) {
            mpx_cast_stats sc_cols, sc_rows;
            mpx_mx_scales k_cols, k_rows;
            memset(&sc_cols, 0, sizeof sc_cols);
            memset(&sc_rows, 0, sizeof sc_rows);
            mpx_mx_quantize_cols(fmt, (mpx_mx_rule)rule, x, cols, B, R, C, &sc_cols, &k_cols);
            memcpy(fast, x, N * sizeof *x);
            mpx_mx_quantize_cols(fmt, (mpx_mx_rule)rule, fast, fast, B, R, C, NULL, NULL);
            mpx_mx_quantize(fmt, (mpx_mx_rule)rule, t, back, N, R, &sc_rows, &k_rows);
            long bad = 0, paths = 0;
            for (int b = 0; b < B; b++)
                for (int i = 0; i < R; i++)
                    for (int c = 0; c < C; c++) {
                        const int k = (b * R + i) * C + c;
                        bad += !same(cols[k], back[(b * C + c) * R + i]);
                        paths += !same(fast[k], cols[k]);
                    }
            const char *name = f ? "e5m2" : "e4m3", *rn = rule ? "ceil" : "floor";
            CHECK(bad == 0, "mx cols %s %s: %ld of %d elements differ from the transposed rows",
                  name, rn, bad, N);
            CHECK(paths == 0, "mx cols %s %s: fast and counted paths differ in %ld elements",
                  name, rn, paths);
            CHECK(memcmp(&sc_cols, &sc_rows, sizeof sc_cols) == 0,
                  "mx cols %s %s: counts differ from the transposed rows' (%llu vs %llu flushed)",
                  name, rn, (unsigned long long)sc_cols.flushed, (unsigned long long)sc_rows.flushed);
            CHECK(k_cols.blocks == k_rows.blocks && k_cols.zero_blocks == k_rows.zero_blocks &&
                      k_cols.nan_blocks == k_rows.nan_blocks && k_cols.min_exp == k_rows.min_exp &&
                      k_cols.max_exp == k_rows.max_exp && k_cols.blocks == B * C * 3 &&
                      k_cols.nan_blocks > 0 && k_cols.zero_blocks > 0,
                  "mx cols %s %s: block scales differ (%llu blocks, 2^%d..2^%d vs %llu, 2^%d..2^%d)",
                  name, rn, (unsigned long long)k_cols.blocks, k_cols.min_exp, k_cols.max_exp,
                  (unsigned long long)k_rows.blocks, k_rows.min_exp, k_rows.max_exp);
        }
    }
    free(x), free(t), free(cols), free(fast), free(back);
}

int main(void) {
    ref_format e4 = ref_e4m3(), e5 = ref_e5m2();
    check_quantize(MPX_F8_E4M3, &e4);
    check_quantize(MPX_F8_E5M2, &e5);
    ref_free(&e4);
    ref_free(&e5);
    check_scales();
    check_mx();
    check_mx_paths();
    check_mx_cols();
    return mpx_test_done(__FILE__);
}
