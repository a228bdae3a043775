/* test_ssd_match.c — IoU on hand cases, encoding/decoding against the double formulas and
 * their round trip, and prior-to-GT matching on constructed cases: the IoU threshold (0.5
 * exactly is a match), the forced best prior of a GT below the threshold, two GTs wanting the
 * same prior, ties, padding, and the input errors.
 *
 * Encoding tolerance, u = 2^-24, from the FP32 operations on the (exact) FP32 inputs:
 *   t0 = ((x0 + x1) / 2 - cx_p) / (v w_p): the sum rounds (u |cx|), the difference (u |cx -
 *   cx_p|), the product v w_p and the division (u |t0| each):
 *     |err t0| <= u (|cx| + |cx - cx_p|) / (v w_p) + 2u |t0|;
 *   t2 = logf(w / w_p) / v_wh: w = x1 - x0 rounds (u relative), the ratio (u), logf (<= 1 ulp
 *   = 2u |log|), the division (u |t2|):  |err t2| <= (2u + 2u |log(w / w_p)|) / v_wh + u |t2|.
 * We allow twice these first-order bounds (second-order terms, libm's last ulp).
 * Decoding is checked as a round trip: decode(encode(b)) reproduces b to within 32u
 * absolute (coordinates in [0, 1]; about ten FP32 operations, each <= 2u on values <= 2,
 * with the relative errors of exp(log(w / w_p)) scaled back by w_p <= 1).
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "mpx/ssd.h"
#include "testutil.h"

static const double U = 1.0 / 16777216.0;

static void check_iou(void) {
    const struct {
        float a[4], b[4];
        double want;
        const char *what;
    } cases[] = {
        {{0, 0, 1, 1}, {0, 0, 1, 1}, 1.0, "identical"},
        {{0, 0, 1, 1}, {2, 2, 3, 3}, 0.0, "disjoint"},
        {{0, 0, 1, 1}, {1, 0, 2, 1}, 0.0, "sharing an edge"},
        /* inter 0.5 x 1, union 1 + 1 - 0.5 = 1.5 */
        {{0, 0, 1, 1}, {0.5f, 0, 1.5f, 1}, 1.0 / 3, "half shifted"},
        /* inner 0.5 x 0.5 = 0.25 of the outer 1 */
        {{0, 0, 1, 1}, {0.25f, 0.25f, 0.75f, 0.75f}, 0.25, "contained"},
        /* inter = the half box 0.5, union 1: exactly 0.5 */
        {{0, 0, 1, 1}, {0, 0, 1, 0.5f}, 0.5, "half height"},
        /* inter 0.5 x 0.5, union 0.5 + 0.5 - 0.25 */
        {{0, 0, 1, 0.5f}, {0.5f, 0, 1.5f, 0.5f}, 0.25 / 0.75, "wide boxes"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double got = mpx_ssd_iou(cases[i].a, cases[i].b), rev = mpx_ssd_iou(cases[i].b, cases[i].a);
        /* a few double operations on exact FP32 inputs: 4 double ulps relative */
        CHECK(fabs(got - cases[i].want) <= 4 * DBL_EPSILON * cases[i].want && got == rev,
              "iou %s: %.9g (reversed %.9g), want %.9g", cases[i].what, got, rev, cases[i].want);
    }
    /* The half-height case must be exact: the matching threshold test relies on it. */
    CHECK(mpx_ssd_iou(cases[5].a, cases[5].b) == 0.5, "iou of the half box is not exactly 0.5");
}

static void check_encode_decode(void) {
    enum { P = 200, B = 2 };
    float pri[P * 4], boxes[B * P * 4], deltas[B * P * 4], back[B * P * 4], r[8];
    const float vxy = 0.1f, vwh = 0.2f;
    for (int i = 0; i < P; i++) {
        mpx_test_uniform(r, 4, 0, 1, 100 + i);
        pri[4 * i] = r[0], pri[4 * i + 1] = r[1];
        pri[4 * i + 2] = 0.05f + 0.9f * r[2], pri[4 * i + 3] = 0.05f + 0.9f * r[3];
    }
    for (int i = 0; i < B * P; i++) {
        mpx_test_uniform(r, 4, 0, 1, 1000 + i);
        float x0 = fminf(r[0], r[1]), x1 = fmaxf(r[0], r[1]) + 0.01f;
        float y0 = fminf(r[2], r[3]), y1 = fmaxf(r[2], r[3]) + 0.01f;
        boxes[4 * i] = x0, boxes[4 * i + 1] = y0, boxes[4 * i + 2] = x1, boxes[4 * i + 3] = y1;
    }
    mpx_tensor tp = {MPX_F32, MPX_DEV_CPU, 2, {P, 4}, pri};
    mpx_tensor tb = {MPX_F32, MPX_DEV_CPU, 3, {B, P, 4}, boxes}, td = tb, tk = tb;
    td.data = deltas, tk.data = back;
    CHECK_OK(mpx_ssd_encode(&tp, &tb, vxy, vwh, &td));
    CHECK_OK(mpx_ssd_decode(&tp, &td, vxy, vwh, &tk));
    double we = 0, wr = 0;
    for (int i = 0; i < B * P; i++) {
        const float *p = pri + 4 * (i % P), *b = boxes + 4 * i;
        double cx = ((double)b[0] + b[2]) / 2, cy = ((double)b[1] + b[3]) / 2;
        double w = (double)b[2] - b[0], h = (double)b[3] - b[1];
        double t[4] = {(cx - p[0]) / (vxy * (double)p[2]), (cy - p[1]) / (vxy * (double)p[3]),
                       log(w / p[2]) / vwh, log(h / p[3]) / vwh};
        double tol[4] = {
            2 * (U * (fabs(cx) + fabs(cx - p[0])) / (vxy * (double)p[2]) + 2 * U * fabs(t[0])),
            2 * (U * (fabs(cy) + fabs(cy - p[1])) / (vxy * (double)p[3]) + 2 * U * fabs(t[1])),
            2 * ((2 * U + 2 * U * fabs(log(w / p[2]))) / vwh + U * fabs(t[2])),
            2 * ((2 * U + 2 * U * fabs(log(h / p[3]))) / vwh + U * fabs(t[3]))};
        for (int k = 0; k < 4; k++) {
            double e = fabs(deltas[4 * i + k] - t[k]) / tol[k];
            if (!(e <= we)) we = e;
            e = fabs(back[4 * i + k] - b[k]) / (32 * U);
            if (!(e <= wr)) wr = e;
        }
    }
    CHECK(we <= 1, "encode vs the double formula: %.3g x tolerance", we);
    CHECK(wr <= 1, "decode(encode(b)) vs b: %.3g x tolerance", wr);

    /* Zero offsets decode to the prior itself (in corner form). */
    float z[4] = {0, 0, 0, 0}, one[4];
    mpx_tensor t1 = {MPX_F32, MPX_DEV_CPU, 2, {1, 4}, pri}, tz = t1, to = t1;
    tz.data = z, to.data = one;
    CHECK_OK(mpx_ssd_decode(&t1, &tz, vxy, vwh, &to));
    CHECK(one[0] == pri[0] - pri[2] / 2 && one[3] == pri[1] + pri[3] / 2,
          "zero offsets: (%g, %g, %g, %g)", one[0], one[1], one[2], one[3]);
}

/* Runs mpx_ssd_match on n_pri centre-form priors and n_gt GT and compares the result. */
static void expect_match(const float *pri, int n_pri, const float *gt, const int32_t *lab, int n_gt,
                         float thr, const int32_t *want, const char *what) {
    int32_t got[16];
    mpx_tensor tp = {MPX_F32, MPX_DEV_CPU, 2, {n_pri, 4}, (void *)pri};
    mpx_tensor tg = {MPX_F32, MPX_DEV_CPU, 2, {n_gt, 4}, (void *)gt};
    mpx_tensor tl = {MPX_I32, MPX_DEV_CPU, 1, {n_gt}, (void *)lab};
    mpx_tensor tm = {MPX_I32, MPX_DEV_CPU, 1, {n_pri}, got};
    CHECK_OK(mpx_ssd_match(&tp, &tg, &tl, thr, &tm));
    for (int i = 0; i < n_pri; i++)
        CHECK(got[i] == want[i], "%s: prior %d matched %d, want %d", what, i, got[i], want[i]);
}

static void check_matching(void) {
    /* Threshold. GT A = [0, 0, .5, .5]. Priors (centre form):
     *   0: [0, 0, .5, .5]   IoU 1                                        -> A
     *   1: [0, 0, .5, .25]  IoU .125 / .25 = 0.5 exactly (>= threshold)  -> A
     *   2: [0, 0, .5, .2]   IoU .1 / .25 = 0.4                           -> -1
     *   3: [.6, .6, 1, 1]   IoU 0                                        -> -1
     * GT B = [.6, .6, .8, .8] overlaps only prior 3: IoU .04 / .16 = 0.25 < 0.5, yet prior 3
     * is B's best prior, so it is forced to B. */
    const float pri[] = {0.25f, 0.25f, 0.5f, 0.5f, 0.25f, 0.125f, 0.5f, 0.25f,
                         0.25f, 0.1f,  0.5f, 0.2f, 0.8f,  0.8f,   0.4f, 0.4f};
    const float gt[] = {0, 0, 0.5f, 0.5f, 0.6f, 0.6f, 0.8f, 0.8f};
    const int32_t lab[] = {3, 1};
    expect_match(pri, 4, gt, lab, 1, 0.5f, (const int32_t[]){0, 0, -1, -1}, "threshold, GT A");
    expect_match(pri, 4, gt, lab, 2, 0.5f, (const int32_t[]){0, 0, -1, 1}, "forced, GT A + B");
    /* Threshold 0.35 admits prior 2 (0.4); 0.55 drops prior 1 (0.5); prior 0 stays forced. */
    expect_match(pri, 4, gt, lab, 2, 0.35f, (const int32_t[]){0, 0, 0, 1}, "threshold 0.35");
    expect_match(pri, 4, gt, lab, 2, 0.55f, (const int32_t[]){0, -1, -1, 1}, "threshold 0.55");

    /* Two GTs want the same prior. Priors Q = [0,0,1,1], R = [0,0,.5,1], S = [2,2,3,3],
     * T = [.5,0,1,.5]. GT 0 = D = [.6,0,1,1], GT 1 = C = [0,0,.9,1]:
     *   IoU(C,Q) = .9, IoU(C,R) = .5/.9 = .556, IoU(C,T) = .2/.95 = .21;
     *   IoU(D,Q) = .4, IoU(D,R) = 0,            IoU(D,T) = .2/.45 = .444.
     * Both GTs' best prior is Q. The higher pair (C,Q) = .9 is matched first; D then takes its
     * best free prior T (.444, below the threshold: forced). R takes C by threshold (.556).
     * (Forcing GT by GT in index order, as some ports do, would give Q to C last and leave D
     * with no prior at all.) GT 2 is padding (label -1) and would otherwise take Q (IoU 1). */
    const float pri2[] = {0.5f, 0.5f, 1, 1, 0.25f, 0.5f,  0.5f, 1,
                          2.5f, 2.5f, 1, 1, 0.75f, 0.25f, 0.5f, 0.5f};
    const float gt2[] = {0.6f, 0, 1, 1, 0, 0, 0.9f, 1, 0, 0, 1, 1};
    const int32_t lab2[] = {2, 5, -1};
    expect_match(pri2, 4, gt2, lab2, 3, 0.5f, (const int32_t[]){1, 1, -1, 0}, "collision");

    /* Ties: two identical priors at IoU .25 with the GT: only the lower index is forced. */
    const float pri3[] = {0.5f, 0.5f, 1, 1, 0.5f, 0.5f, 1, 1};
    const float gt3[] = {0.25f, 0.25f, 0.75f, 0.75f};
    const int32_t lab3[] = {1};
    expect_match(pri3, 2, gt3, lab3, 1, 0.5f, (const int32_t[]){0, -1}, "tied priors");
    /* Two identical GTs, both best on prior 0 (IoU .25): the lower GT index takes it, the
     * other GT then takes the identical prior 1. */
    const float gt4[] = {0.25f, 0.25f, 0.75f, 0.75f, 0.25f, 0.25f, 0.75f, 0.75f};
    const int32_t lab4[] = {1, 1};
    expect_match(pri3, 2, gt4, lab4, 2, 0.5f, (const int32_t[]){0, 1}, "tied GTs");
    /* A GT overlapping no prior gets none, and nothing else changes. */
    const float gt5[] = {5, 5, 6, 6};
    expect_match(pri3, 2, gt5, lab3, 1, 0.5f, (const int32_t[]){-1, -1}, "GT off the priors");
    /* Only padding: all background. */
    const int32_t pad[] = {-1};
    expect_match(pri3, 2, gt3, pad, 1, 0.5f, (const int32_t[]){-1, -1}, "padding only");
}

static void expect_input_error(mpx_status s, const char *needle, const char *what) {
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), needle),
          "%s: expected MPX_ERR_INPUT mentioning '%s', got %s: %s", what, needle,
          mpx_status_name(s), mpx_error_message());
}

static void check_errors(void) {
    float pri[8] = {0.5f, 0.5f, 1, 1, 0.5f, 0.5f, 1, 1};
    float gt[8] = {0, 0, 1, 1, 0.2f, 0.2f, 0.1f, 0.9f};
    int32_t lab[2] = {1, 0}, m[2];
    mpx_tensor tp = {MPX_F32, MPX_DEV_CPU, 2, {2, 4}, pri}, tg = tp;
    tg.data = gt;
    mpx_tensor tl = {MPX_I32, MPX_DEV_CPU, 1, {2}, lab}, tm = tl;
    tm.data = m;
    expect_input_error(mpx_ssd_match(&tp, &tg, &tl, 0.5f, &tm), "gt_labels[1] = 0", "label 0");
    lab[1] = 2;
    expect_input_error(mpx_ssd_match(&tp, &tg, &tl, 0.5f, &tm), "gt_boxes[1] = (0.2, 0.2, 0.1",
                       "x1 < x0");
    lab[1] = -1; /* padding rows are not validated */
    CHECK_OK(mpx_ssd_match(&tp, &tg, &tl, 0.5f, &tm));
    expect_input_error(mpx_ssd_match(&tp, &tg, &tl, 0.0f, &tm), "iou_threshold = 0", "threshold 0");
    mpx_tensor bad = tm;
    bad.shape[0] = 1;
    expect_input_error(mpx_ssd_match(&tp, &tg, &tl, 0.5f, &bad), "match has shape [1]",
                       "short match");
    float d[8];
    mpx_tensor td = {MPX_F32, MPX_DEV_CPU, 2, {2, 4}, d};
    expect_input_error(mpx_ssd_encode(&tp, &tg, 0.1f, 0.2f, &td), "boxes row 1", "encode x1 < x0");
    expect_input_error(mpx_ssd_encode(&tp, &tp, 0.0f, 0.2f, &td), "variances (0, 0.2)",
                       "zero variance");
    bad = td;
    bad.shape[0] = 3;
    expect_input_error(mpx_ssd_decode(&tp, &td, 0.1f, 0.2f, &bad), "boxes has shape [3,4]",
                       "decode output shape");
}

int main(void) {
    check_iou();
    check_encode_decode();
    check_matching();
    check_errors();
    return mpx_test_done(__FILE__);
}
