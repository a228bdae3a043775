/* test_det_augment.c — SSD augmentation with box transforms, on constructed images:
 *   - a bright rectangle on a dark image stays inside its transformed box (and fills it)
 *     after expand + crop + flip + resize, for many draws, down- and upscaling; the canvas
 *     around the expanded source has the mean colour; boxes equal the documented formula;
 *   - the crop honours its IoU constraint and keeps a box centre; every mode, flips and
 *     expansions occur; draws are deterministic per (epoch, example);
 *   - flip alone mirrors pixels and boxes exactly; photometric jitter matches a reference
 *     computed from the drawn parameters and leaves boxes alone;
 *   - malformed calls are errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/detect.h"
#include "testutil.h"

enum { S = 96, DARK = 20, BRIGHT = 250 };

/* A dark S x S image with two bright rectangles r[k] = [x0, x1) x [y0, y1) and their boxes. */
static void make_image(uint8_t *img, const int r[2][4], mpx_det_box b[2]) {
    for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++) {
            int in = 0;
            for (int k = 0; k < 2; k++)
                in |= x >= r[k][0] && x < r[k][2] && y >= r[k][1] && y < r[k][3];
            for (int c = 0; c < 3; c++) img[(y * S + x) * 3 + c] = in ? BRIGHT : DARK;
        }
    for (int k = 0; k < 2; k++)
        b[k] = (mpx_det_box){(float)r[k][0] / S,
                             (float)r[k][1] / S,
                             (float)r[k][2] / S,
                             (float)r[k][3] / S,
                             3 + k,
                             1 - k};
}

/* Where box b lands on the output (not clipped, whether kept or not), as fractions. */
static void landing(const mpx_det_augment *a, const mpx_det_box *b, double out[4]) {
    out[0] = (b->xmin * (double)S + a->left - a->crop_x) / a->crop_w;
    out[2] = (b->xmax * (double)S + a->left - a->crop_x) / a->crop_w;
    out[1] = (b->ymin * (double)S + a->top - a->crop_y) / a->crop_h;
    out[3] = (b->ymax * (double)S + a->top - a->crop_y) / a->crop_h;
    if (a->flip) {
        double t = 1 - out[2];
        out[2] = 1 - out[0];
        out[0] = t;
    }
}

/* The documented box transform, in double: source pixels -> canvas -> crop -> flip. */
static int expected_box(const mpx_det_augment *a, const mpx_det_box *b, double out[4]) {
    double x0 = b->xmin * (double)S + a->left - a->crop_x,
           x1 = b->xmax * (double)S + a->left - a->crop_x;
    double y0 = b->ymin * (double)S + a->top - a->crop_y,
           y1 = b->ymax * (double)S + a->top - a->crop_y;
    double mx = (x0 + x1) / 2, my = (y0 + y1) / 2;
    if (!(mx > 0 && mx < a->crop_w && my > 0 && my < a->crop_h)) return 0;
    out[0] = fmax(x0, 0) / a->crop_w;
    out[2] = fmin(x1, a->crop_w) / a->crop_w;
    out[1] = fmax(y0, 0) / a->crop_h;
    out[3] = fmin(y1, a->crop_h) / a->crop_h;
    if (a->flip) {
        double t = 1 - out[2];
        out[2] = 1 - out[0];
        out[0] = t;
    }
    return 1;
}

static void test_rectangles(int N) {
    static uint8_t img[S * S * 3];
    float *dst = malloc((size_t)N * N * 3 * sizeof *dst);
    mpx_det_loader_config cfg = mpx_det_loader_config_train(1, 11);
    cfg.size = N;
    const float mean = 0.4f; /* canvas 102: between DARK and BRIGHT, distinct from both */
    for (int c = 0; c < 3; c++) cfg.mean[c] = mean;
    const int rects[3][2][4] = {{{30, 20, 61, 71}, {70, 75, 90, 92}},
                                {{0, 0, 40, 25}, {60, 10, 96, 50}},
                                {{50, 60, 96, 96}, {5, 40, 30, 80}}};
    int kept = 0, dropped = 0, wrong_in = 0, wrong_out = 0, wrong_canvas = 0, wrong_box = 0;
    int canvas_px = 0;
    for (int ex = 0; ex < 300; ex++) {
        mpx_det_box box[2], out[MPX_DET_MAX_BOXES];
        make_image(img, rects[ex % 3], box);
        mpx_det_augment a;
        int n;
        CHECK_OK(mpx_det_augment_draw(&cfg, S, box, 2, 3, ex, &a));
        CHECK_OK(mpx_det_augment_apply(&cfg, &a, img, S, box, 2, dst, out, &n));
        double want[2][4], land[2][4];
        int keep[2], k_out = 0;
        for (int k = 0; k < 2; k++) {
            keep[k] = expected_box(&a, &box[k], want[k]);
            landing(&a, &box[k], land[k]);
            kept += keep[k];
            dropped += !keep[k];
        }
        CHECK(n == keep[0] + keep[1] && n >= 1, "example %d: %d boxes kept, expected %d", ex, n,
              keep[0] + keep[1]);
        for (int k = 0; k < 2 && n == keep[0] + keep[1]; k++) {
            if (!keep[k]) continue;
            const mpx_det_box *o = &out[k_out++];
            /* float of the double formula: the library computes the same in double */
            wrong_box += o->xmin != (float)want[k][0] || o->ymin != (float)want[k][1] ||
                         o->xmax != (float)want[k][2] || o->ymax != (float)want[k][3] ||
                         o->label != 3 + k || o->difficult != 1 - k;
        }
        /* margin (output px): 1 for the downscaling filter's reach, plus half a source pixel
         * magnified by the upscale factor N / crop side */
        double mx = 1.0 + 0.5 * N / a.crop_w, my = 1.0 + 0.5 * N / a.crop_h;
        /* the source square on the output (not clipped), for the canvas check */
        mpx_det_box whole = {0, 0, 1, 1, 0, 0};
        double src[4];
        landing(&a, &whole, src);
        for (int y = 0; y < N; y++)
            for (int x = 0; x < N; x++) {
                double cx = (x + 0.5) / N, cy = (y + 0.5) / N, ex_ = mx / N, ey = my / N;
                double v = dst[((size_t)y * N + x) * 3 + 1] * 255.0 + 255.0 * mean; /* std 1 */
                int inside = 0, near = 0;
                for (int k = 0; k < 2; k++) {
                    inside |= keep[k] && cx > want[k][0] + ex_ && cx < want[k][2] - ex_ &&
                              cy > want[k][1] + ey && cy < want[k][3] - ey;
                    near |= cx > land[k][0] - ex_ && cx < land[k][2] + ex_ &&
                            cy > land[k][1] - ey && cy < land[k][3] + ey;
                }
                if (inside && v < BRIGHT - 1) wrong_in++;
                if (!near && v > 110) wrong_out++;
                int in_src =
                    cx > src[0] - ex_ && cx < src[2] + ex_ && cy > src[1] - ey && cy < src[3] + ey;
                if (a.canvas_w > S && !in_src) {
                    canvas_px++;
                    wrong_canvas += fabs(v - 102) > 0.01;
                }
            }
    }
    CHECK(wrong_box == 0, "N=%d: %d boxes differ from the documented transform", N, wrong_box);
    CHECK(wrong_in == 0, "N=%d: %d pixels inside transformed boxes are not bright", N, wrong_in);
    CHECK(wrong_out == 0, "N=%d: %d bright pixels away from every box", N, wrong_out);
    CHECK(wrong_canvas == 0 && canvas_px > 10000,
          "N=%d: %d of %d canvas pixels not the mean colour", N, wrong_canvas, canvas_px);
    CHECK(kept > 300 && dropped > 20, "N=%d: %d boxes kept, %d dropped", N, kept, dropped);
    free(dst);
}

/* Many draws: IoU constraint and a kept centre for every accepted crop; expand ratio and
 * position in range; coin flips near 1/2 (binomial, 2000 draws: 1000 +- 5 sigma = 112). */
static void test_draws(void) {
    mpx_det_loader_config cfg = mpx_det_loader_config_train(1, 5);
    mpx_det_box boxes[2] = {{0.1f, 0.2f, 0.5f, 0.6f, 0, 0}, {0.6f, 0.65f, 0.9f, 0.95f, 1, 0}};
    int flips = 0, expands = 0, crops = 0, bad = 0, modes[7] = {0};
    for (int ex = 0; ex < 2000; ex++) {
        mpx_det_augment a, b;
        CHECK_OK(mpx_det_augment_draw(&cfg, S, boxes, 2, 0, ex, &a));
        CHECK_OK(mpx_det_augment_draw(&cfg, S, boxes, 2, 0, ex, &b));
        bad += memcmp(&a, &b, sizeof a) != 0;
        flips += a.flip;
        for (int m = 0; m < 7; m++)
            modes[m] += fabsf(a.min_iou - (m == 0 ? -1 : m == 6 ? 0 : 0.2f * m - 0.1f)) < 1e-6f;
        if (a.canvas_w > S) {
            expands++;
            bad += a.canvas_w > 4 * S || a.canvas_h != a.canvas_w || a.left < 0 || a.top < 0 ||
                   a.left + S > a.canvas_w || a.top + S > a.canvas_h;
        }
        if (a.crop_w != a.canvas_w || a.crop_h != a.canvas_h) {
            crops++;
            bad += a.min_iou < 0;
            double best = 0;
            int centre = 0;
            mpx_det_box crop = {(float)a.crop_x,
                                (float)a.crop_y,
                                (float)(a.crop_x + a.crop_w),
                                (float)(a.crop_y + a.crop_h),
                                0,
                                0};
            for (int k = 0; k < 2; k++) {
                mpx_det_box c = {boxes[k].xmin * S + a.left,
                                 boxes[k].ymin * S + a.top,
                                 boxes[k].xmax * S + a.left,
                                 boxes[k].ymax * S + a.top,
                                 0,
                                 0};
                best = fmax(best, mpx_det_iou(&crop, &c));
                double mx = (c.xmin + c.xmax) / 2, my = (c.ymin + c.ymax) / 2;
                centre |= mx > crop.xmin && mx < crop.xmax && my > crop.ymin && my < crop.ymax;
            }
            bad += best < a.min_iou || !centre;
            bad += a.crop_w < (int)(0.3 * a.canvas_w) || a.crop_h < (int)(0.3 * a.canvas_h) ||
                   2 * a.crop_h < a.crop_w || a.crop_h > 2 * a.crop_w;
        }
    }
    CHECK(bad == 0, "%d draws break a rule or are not reproducible", bad);
    CHECK(abs(flips - 1000) < 112 && abs(expands - 1000) < 112, "flips %d, expansions %d of 2000",
          flips, expands);
    CHECK(crops > 1400, "only %d of 2000 draws crop", crops);
    /* "none" is 1/7 of the mode draws, and it also ends the redraws of modes whose trials
     * failed (high IoU constraints on expanded canvases mostly fail), so it is at least
     * 2000 / 7 = 286 (minus 5 sigma = 78) */
    CHECK(modes[0] > 286 - 78 && modes[0] < 1000, "%d of 2000 draws without a crop", modes[0]);
    for (int m = 1; m < 7; m++)
        if (m != 5) CHECK(modes[m] > 10, "crop mode %d accepted %d times of 2000", m, modes[m]);
    printf("crop modes (none, 0.1, 0.3, 0.5, 0.7, 0.9, any) in 2000 draws: %d %d %d %d %d %d %d\n",
           modes[0], modes[1], modes[2], modes[3], modes[4], modes[5], modes[6]);
    /* a large box without expansion: even min IoU 0.9 is met now and then */
    mpx_det_loader_config big = cfg;
    big.expand = 0;
    mpx_det_box large = {0.1f, 0.1f, 0.9f, 0.9f, 0, 0};
    int strict = 0;
    for (int ex = 0; ex < 2000; ex++) {
        mpx_det_augment a;
        CHECK_OK(mpx_det_augment_draw(&big, S, &large, 1, 0, ex, &a));
        strict += a.min_iou > 0.85f;
    }
    CHECK(strict > 10, "min IoU 0.9 accepted %d times of 2000 on a large box", strict);
    mpx_det_augment a, b;
    CHECK_OK(mpx_det_augment_draw(&cfg, S, boxes, 2, 1, 7, &a));
    CHECK_OK(mpx_det_augment_draw(&cfg, S, boxes, 2, 2, 7, &b));
    int differ = memcmp(&a, &b, sizeof a) != 0;
    CHECK_OK(mpx_det_augment_draw(&cfg, S, boxes, 2, 1, 8, &b));
    differ &= memcmp(&a, &b, sizeof a) != 0;
    CHECK(differ, "another epoch or example repeats the draw");
}

/* Flip only, output at the source size: an exact mirror (the resample is the identity). */
static void test_flip(void) {
    static uint8_t img[S * S * 3];
    static float dst[S * S * 3];
    for (int i = 0; i < S * S * 3; i++) img[i] = (uint8_t)(i * 7 + i / 301);
    mpx_det_loader_config cfg = mpx_det_loader_config_eval(1);
    mpx_det_augment a;
    mpx_det_box box = {0.25f, 0.5f, 0.375f, 0.75f, 2, 0}, out[MPX_DET_MAX_BOXES];
    CHECK_OK(mpx_det_augment_draw(&cfg, S, &box, 1, 0, 0, &a));
    a.flip = 1;
    int n, wrong = 0;
    CHECK_OK(mpx_det_augment_apply(&cfg, &a, img, S, &box, 1, dst, out, &n));
    /* the resample of a same-size box has weights 1, 0, 0: an exact copy */
    for (int y = 0; y < S; y++)
        for (int x = 0; x < S; x++)
            for (int c = 0; c < 3; c++)
                wrong +=
                    fabsf(dst[(y * S + x) * 3 + c] - img[(y * S + (S - 1 - x)) * 3 + c] / 255.0f) >
                    1e-6f; /* p * (1/255) vs p / 255 in float: a few ulps */
    CHECK(wrong == 0, "flip: %d pixels are not the mirror image", wrong);
    CHECK(n == 1 && out[0].xmin == 0.625f && out[0].xmax == 0.75f && out[0].ymin == 0.5f &&
              out[0].ymax == 0.75f && out[0].label == 2,
          "flipped box %g %g %g %g", out[0].xmin, out[0].ymin, out[0].xmax, out[0].ymax);
}

/* Photometric jitter on a constant image against the formula of the draw (YIQ hue
 * rotation, luma-preserving saturation); the library rounds to bytes: tolerance 0.5 level
 * plus float error. */
static void test_photometric(void) {
    static uint8_t img[S * S * 3];
    static float dst[S * S * 3];
    const double rgb[3] = {100, 150, 40};
    for (int p = 0; p < S * S; p++)
        for (int c = 0; c < 3; c++) img[p * 3 + c] = (uint8_t)rgb[c];
    mpx_det_loader_config cfg = mpx_det_loader_config_eval(1);
    cfg.photometric = 1;
    mpx_det_box box = {0.1f, 0.1f, 0.9f, 0.9f, 0, 0}, out[MPX_DET_MAX_BOXES];
    double worst = 0;
    int changed = 0, hue = 0, sat = 0, boxes_moved = 0;
    for (int ex = 0; ex < 64; ex++) {
        mpx_det_augment a;
        int n;
        CHECK_OK(mpx_det_augment_draw(&cfg, S, &box, 1, 0, ex, &a));
        CHECK_OK(mpx_det_augment_apply(&cfg, &a, img, S, &box, 1, dst, out, &n));
        boxes_moved += n != 1 || memcmp(&out[0], &box, sizeof box) != 0;
        double v[3];
        for (int c = 0; c < 3; c++)
            v[c] = (rgb[c] + a.brightness) * (a.contrast_last ? 1 : a.contrast);
        double g = 0.299 * v[0] + 0.587 * v[1] + 0.114 * v[2];
        for (int c = 0; c < 3; c++) v[c] = g + a.saturation * (v[c] - g);
        if (a.hue != 0) {
            double th = a.hue * M_PI / 180, Y = 0.299 * v[0] + 0.587 * v[1] + 0.114 * v[2];
            double I = 0.596 * v[0] - 0.274 * v[1] - 0.322 * v[2];
            double Q = 0.211 * v[0] - 0.523 * v[1] + 0.312 * v[2];
            double I2 = cos(th) * I - sin(th) * Q, Q2 = sin(th) * I + cos(th) * Q;
            v[0] = Y + 0.956 * I2 + 0.621 * Q2;
            v[1] = Y - 0.272 * I2 - 0.647 * Q2;
            v[2] = Y - 1.106 * I2 + 1.703 * Q2;
            hue++;
        }
        sat += a.saturation != 1;
        for (int c = 0; c < 3; c++) {
            double want = fmin(255, fmax(0, v[c] * (a.contrast_last ? a.contrast : 1)));
            worst = fmax(worst, fabs(dst[(S * 40 + 17) * 3 + c] * 255.0 - want));
            changed += fabs(want - rgb[c]) > 1;
        }
    }
    CHECK(worst <= 0.5 + 1e-3, "photometric jitter differs from its formula by %.4f levels", worst);
    CHECK(changed > 100 && hue > 10 && sat > 10,
          "jitter rarely changed anything (%d, hue %d, sat %d)", changed, hue, sat);
    CHECK(boxes_moved == 0, "photometric jitter moved %d boxes", boxes_moved);
}

static void test_errors(void) {
    static uint8_t img[S * S * 3];
    static float dst[S * S * 3];
    mpx_det_loader_config cfg = mpx_det_loader_config_train(1, 1);
    mpx_det_augment a;
    mpx_det_box box = {0.1f, 0.1f, 0.9f, 0.9f, 0, 0}, out[MPX_DET_MAX_BOXES];
    int n;
    CHECK(mpx_det_augment_draw(&cfg, S, &box, 1, (int64_t)1 << 24, 0, &a) == MPX_ERR_INPUT,
          "epoch 2^24 accepted");
    CHECK(mpx_det_augment_draw(&cfg, S, &box, MPX_DET_MAX_BOXES + 1, 0, 0, &a) == MPX_ERR_INPUT,
          "65 boxes accepted");
    cfg.std[1] = 0;
    CHECK(mpx_det_augment_draw(&cfg, S, &box, 1, 0, 0, &a) == MPX_ERR_INPUT, "std 0 accepted");
    cfg = mpx_det_loader_config_train(1, 1);
    cfg.expand_max = 0.5f;
    CHECK(mpx_det_augment_draw(&cfg, S, &box, 1, 0, 0, &a) == MPX_ERR_INPUT,
          "expand_max 0.5 accepted");
    cfg = mpx_det_loader_config_train(1, 1);
    CHECK_OK(mpx_det_augment_draw(&cfg, S, &box, 1, 0, 0, &a));
    a.crop_x = a.canvas_w - a.crop_w + 1;
    CHECK(mpx_det_augment_apply(&cfg, &a, img, S, &box, 1, dst, out, &n) == MPX_ERR_INPUT,
          "a crop outside the canvas accepted");
}

int main(void) {
    test_rectangles(64);
    test_rectangles(160);
    test_draws();
    test_flip();
    test_photometric();
    test_errors();
    return mpx_test_done("test_det_augment");
}
