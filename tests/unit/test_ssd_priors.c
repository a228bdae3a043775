/* test_ssd_priors.c — SSD default boxes: count and every coordinate of a small configuration
 * worked out by hand, with and without clipping; the SSD300 layout's well-known 8732 priors;
 * the configuration errors.
 *
 * Tolerance: a prior is its double formula rounded once to FP32, but the formula starts from
 * the FP32 s_min / s_max (0.2f is 0.2 (1 + ~1.5e-8)), so the value differs from the exact
 * hand formula by <= u (the scales) + u (the rounding), u = 2^-24: we allow 3u |value|.
 */
#include <math.h>
#include <string.h>

#include "mpx/ssd.h"
#include "testutil.h"

static const double U = 1.0 / 16777216.0;

/* One expected prior. */
typedef struct {
    double cx, cy, w, h;
} box;

static void check_priors(const mpx_ssd_priors_cfg *cfg, const box *want, int n, const char *tag) {
    int64_t count = -1;
    CHECK_OK(mpx_ssd_prior_count(cfg, &count));
    REQUIRE_VOID(count == n, "%s: %lld priors, want %d", tag, (long long)count, n);
    float out[64 * 4];
    memset(out, 0xff, sizeof out); /* NaN: every value must be written */
    mpx_tensor t = {MPX_F32, MPX_DEV_CPU, 2, {n, 4}, out};
    CHECK_OK(mpx_ssd_priors(cfg, &t));
    for (int i = 0; i < n; i++) {
        const double w[4] = {want[i].cx, want[i].cy, want[i].w, want[i].h};
        for (int k = 0; k < 4; k++)
            CHECK(fabs(out[4 * i + k] - w[k]) <= 3 * U * fabs(w[k]),
                  "%s: prior %d coord %d = %.9g, want %.9g", tag, i, k, out[4 * i + k], w[k]);
    }
}

/* Two maps: 2x2 with ratios {1, 2, 1/2}, 1x1 adding {3, 1/3}. m = 2, so
 *   step = (0.9 - 0.2) / (2 - 1) = 0.7, s_0 = 0.2, s_1 = 0.9, s_2 = 1.6 (extrapolated).
 * Map 0 (f = 2): centres (j + 0.5) / 2 in (row, col) order: (.25,.25) (.75,.25) (.25,.75)
 *   (.75,.75); per cell: 0.2 x 0.2; extra sqrt(0.2 * 0.9) = sqrt(0.18) = 0.424264;
 *   ratio 2: 0.2 sqrt2 x 0.2 / sqrt2 = 0.282843 x 0.141421; ratio 1/2: 0.141421 x 0.282843.
 * Map 1 (f = 1): centre (.5, .5): 0.9 x 0.9; extra sqrt(0.9 * 1.6) = sqrt(1.44) = 1.2;
 *   ratio 2: 1.272792 x 0.636396; 1/2: 0.636396 x 1.272792; ratio 3: 0.9 sqrt3 = 1.558846 x
 *   0.9 / sqrt3 = 0.519615; 1/3: 0.519615 x 1.558846.
 * P = 4 cells * 4 + 1 * 6 = 22.
 * Clipped: every map-0 box lies inside [0, 1] (the widest, 0.424 at centre 0.25, spans
 * [0.038, 0.462]) and so does 0.9 x 0.9 at 0.5; the larger map-1 sides become 1 (centred at
 * 0.5, clipping both sides keeps the centre): 1.2 -> 1, 1.272792 -> 1, 1.558846 -> 1. */
static void check_hand_config(void) {
    mpx_ssd_priors_cfg cfg = {
        .n_maps = 2, .size = {2, 1}, .ratio3 = {0, 1}, .s_min = 0.2f, .s_max = 0.9f, .clip = 0};
    const double r2 = sqrt(2.0), r3 = sqrt(3.0), e0 = sqrt(0.18);
    box want[22], clipped[22];
    int n = 0;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            double cx = 0.25 + 0.5 * j, cy = 0.25 + 0.5 * i;
            want[n++] = (box){cx, cy, 0.2, 0.2};
            want[n++] = (box){cx, cy, e0, e0};
            want[n++] = (box){cx, cy, 0.2 * r2, 0.2 / r2};
            want[n++] = (box){cx, cy, 0.2 / r2, 0.2 * r2};
        }
    want[n++] = (box){0.5, 0.5, 0.9, 0.9};
    want[n++] = (box){0.5, 0.5, 1.2, 1.2};
    want[n++] = (box){0.5, 0.5, 0.9 * r2, 0.9 / r2};
    want[n++] = (box){0.5, 0.5, 0.9 / r2, 0.9 * r2};
    want[n++] = (box){0.5, 0.5, 0.9 * r3, 0.9 / r3};
    want[n++] = (box){0.5, 0.5, 0.9 / r3, 0.9 * r3};
    check_priors(&cfg, want, n, "2x2 + 1x1");

    memcpy(clipped, want, sizeof want);
    for (int i = 16; i < 22; i++)
        clipped[i].w = fmin(clipped[i].w, 1), clipped[i].h = fmin(clipped[i].h, 1);
    cfg.clip = 1;
    check_priors(&cfg, clipped, n, "2x2 + 1x1 clipped");

    /* Clipping one side moves the centre. One 2x2 map with s_min = s_max = 0.8 (m = 1: step =
     * s_max - s_min = 0, so the extra box is sqrt(0.8 * 0.8) = 0.8 too): cell (0, 0) at 0.25
     * spans x in [0.25 - 0.4, 0.25 + 0.4] = [-0.15, 0.65] -> [0, 0.65]: w = 0.65, cx = 0.325. */
    mpx_ssd_priors_cfg one = {.n_maps = 1, .size = {2}, .s_min = 0.8f, .s_max = 0.8f, .clip = 1};
    float out[16 * 4];
    mpx_tensor t = {MPX_F32, MPX_DEV_CPU, 2, {16, 4}, out};
    CHECK_OK(mpx_ssd_priors(&one, &t));
    CHECK(fabs(out[0] - 0.325) <= 3 * U && fabs(out[2] - 0.65) <= 3 * U &&
              fabs(out[4 + 0] - 0.325) <= 3 * U && fabs(out[4 + 2] - 0.65) <= 3 * U,
          "one-sided clip: (%.9g, %.9g) and extra (%.9g, %.9g), want (0.325, 0.65)", out[0], out[2],
          out[4], out[6]);
}

/* SSD300: maps 38, 19, 10, 5, 3, 1 with 4, 6, 6, 6, 4, 4 boxes per cell:
 * 38^2*4 + 19^2*6 + 10^2*6 + 5^2*6 + 3^2*4 + 1*4 = 5776 + 2166 + 600 + 150 + 36 + 4 = 8732.
 * The last map's scale is s_max; its first box is 0.9 x 0.9 at (0.5, 0.5). */
static void check_ssd300(void) {
    mpx_ssd_priors_cfg cfg = {.n_maps = 6,
                              .size = {38, 19, 10, 5, 3, 1},
                              .ratio3 = {0, 1, 1, 1, 0, 0},
                              .s_min = 0.2f,
                              .s_max = 0.9f};
    int64_t count = 0;
    CHECK_OK(mpx_ssd_prior_count(&cfg, &count));
    CHECK(count == 8732, "SSD300 prior count %lld, want 8732", (long long)count);
    static float out[8732 * 4];
    mpx_tensor t = {MPX_F32, MPX_DEV_CPU, 2, {8732, 4}, out};
    CHECK_OK(mpx_ssd_priors(&cfg, &t));
    const float *last = out + 4 * (8732 - 4);
    CHECK(last[0] == 0.5f && last[1] == 0.5f && fabs(last[2] - 0.9) <= 3 * U * 0.9,
          "SSD300 last map first box (%g, %g, %g)", last[0], last[1], last[2]);
    /* Map 1 (19x19, scale 0.2 + 0.14 = 0.34) starts at 5776: cell (0, 0) centre 0.5 / 19. */
    const float *m1 = out + 4 * 5776;
    CHECK(fabs(m1[0] - 0.5 / 19) <= 3 * U * (0.5 / 19) && fabs(m1[2] - 0.34) <= 3 * U * 0.34,
          "SSD300 map 1 first box (%g, %g, %g), want (%g, ., 0.34)", m1[0], m1[1], m1[2], 0.5 / 19);
    /* Its second row starts 19 cells later: centre y 1.5 / 19. */
    CHECK(fabs(m1[4 * 6 * 19 + 1] - 1.5 / 19) <= 3 * U * (1.5 / 19), "SSD300 map 1 row 1 cy %g",
          m1[4 * 6 * 19 + 1]);
}

static void expect_input_error(mpx_status s, const char *needle, const char *what) {
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), needle),
          "%s: expected MPX_ERR_INPUT mentioning '%s', got %s: %s", what, needle,
          mpx_status_name(s), mpx_error_message());
}

static void check_errors(void) {
    int64_t n = 0;
    mpx_ssd_priors_cfg cfg = {.n_maps = 0, .size = {2}, .s_min = 0.2f, .s_max = 0.9f};
    expect_input_error(mpx_ssd_prior_count(&cfg, &n), "n_maps = 0", "no maps");
    cfg.n_maps = 2;
    expect_input_error(mpx_ssd_prior_count(&cfg, &n), "size[1] = 0", "empty second map");
    cfg.n_maps = 1, cfg.s_min = 0.95f;
    expect_input_error(mpx_ssd_prior_count(&cfg, &n), "s_min = 0.95", "s_min > s_max");
    cfg.s_min = 0.2f;
    float out[16 * 4];
    mpx_tensor t = {MPX_F32, MPX_DEV_CPU, 2, {15, 4}, out};
    expect_input_error(mpx_ssd_priors(&cfg, &t), "priors has shape [15,4]", "wrong P");
}

int main(void) {
    check_hand_config();
    check_ssd300();
    check_errors();
    return mpx_test_done(__FILE__);
}
