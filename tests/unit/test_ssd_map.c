/* test_ssd_map.c — Pascal VOC AP and mAP on hand-worked cases, one per class of a single
 * evaluation (so classes and images must also be kept apart), each with both APs worked out
 * below; the result does not depend on the order of the inputs; the errors.
 *
 * Notation: a detection sequence in score order, T = true positive, F = false positive,
 * npos = non-difficult GT; points (recall, precision) after each counted detection.
 * AP11 = mean over t = 0, .1, ..., 1 of max{precision at recall >= t};
 * area = sum over recall steps of the step times the precision envelope.
 * The APs are a handful of double operations: compared to 1e-12.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ssd.h"
#include "testutil.h"

#define BOX(a, b, c, d)                                                                            \
    { (a), (b), (c), (d) }

/* Class 1 — detections exactly equal to the GT, score 1.0: 3 objects in images 0 and 1,
 *   T T T: points (1/3, 1), (2/3, 1), (1, 1): AP11 = 1, area = 1.
 * Class 2 — a false positive ranked first: 2 objects, F .9, T .8, T .7:
 *   points (0, 0), (.5, .5), (1, 2/3). Every t has the point (1, 2/3) at recall >= t, so
 *   AP11 = 2/3; envelope 2/3 everywhere: area = .5 * 2/3 + .5 * 2/3 = 2/3.
 * Class 3 — a missed object: 3 objects, T .9, T .8: points (1/3, 1), (2/3, 1).
 *   t = 0 .. .6 (7 values) find precision 1, t = .7 .. 1 none: AP11 = 7/11;
 *   area = 1/3 * 1 + 1/3 * 1 + (nothing after 2/3) = 2/3.
 * Class 4 — difficult GT: objects N (normal) and D (difficult) in image 0; F .95 elsewhere,
 *   a detection on D .9 (ignored), T on N .8: npos = 1, points (0, 0), (1, .5):
 *   AP11 = .5, area = .5. (Counting D as a normal object would give 2/3, counting the
 *   detection on D as a false positive 1/3.)
 * Class 5 — a duplicate: objects A, B; T on A .9, again on A .8 (F), T on B .7:
 *   points (.5, 1), (.5, .5), (1, 2/3). AP11: t = 0 .. .5 (6 values) -> 1, t = .6 .. 1 (5)
 *   -> 2/3: (6 + 10/3) / 11 = 28/33; area: envelope 1 up to .5, 2/3 after: .5 + 1/3 = 5/6.
 * Class 6 — the devkit's rule: A = [0,0,1,1], B = [.4,0,1.4,1]; T = A exactly .9, then
 *   X = [.15,0,1.15,1] .8 with IoU(X, A) = .85 / 1.15 = .739 and IoU(X, B) = .75 / 1.25 =
 *   .6: its best GT is A, already claimed, so X is F (B is not tried):
 *   points (.5, 1), (.5, .5): AP11 = 6/11, area = .5. (Trying B would give 1.)
 * Class 7 — detections but no GT: AP NaN, left out of mAP.
 * Class 8 — IoU exactly 0.5 counts; other images do not: one object [0,0,1,1] in image 2;
 *   F .9 = the same box in image 1, T .8 = [0,0,1,.5] in image 2 (IoU .5):
 *   points (0, 0), (1, .5): AP11 = .5, area = .5.
 * Class 0 has nothing: NaN. mAP over the 7 classes with GT. */
static const mpx_voc_gt GT[] = {
    {0, 1, BOX(0, 0, .5f, .5f), 0},     {0, 1, BOX(.5f, .5f, 1, 1), 0},
    {1, 1, BOX(.2f, .1f, .7f, .9f), 0}, {0, 2, BOX(0, 0, .5f, .5f), 0},
    {1, 2, BOX(.2f, .2f, .6f, .6f), 0}, {0, 3, BOX(0, 0, .3f, .3f), 0},
    {0, 3, BOX(.4f, .4f, .7f, .7f), 0}, {1, 3, BOX(.1f, .1f, .9f, .9f), 0},
    {0, 4, BOX(0, 0, .5f, .5f), 0},     {0, 4, BOX(.5f, .5f, 1, 1), 1},
    {0, 5, BOX(0, 0, .4f, .4f), 0},     {0, 5, BOX(.6f, .6f, 1, 1), 0},
    {2, 6, BOX(0, 0, 1, 1), 0},         {2, 6, BOX(.4f, 0, 1.4f, 1), 0},
    {2, 8, BOX(0, 0, 1, 1), 0},
};

static const mpx_detection DETS[] = {
    {1, 1, 1.0f, BOX(.2f, .1f, .7f, .9f)}, {0, 1, 1.0f, BOX(0, 0, .5f, .5f)},
    {0, 1, 1.0f, BOX(.5f, .5f, 1, 1)},     {0, 2, .9f, BOX(.6f, .6f, .9f, .9f)},
    {0, 2, .8f, BOX(0, 0, .5f, .5f)},      {1, 2, .7f, BOX(.2f, .2f, .6f, .6f)},
    {0, 3, .9f, BOX(0, 0, .3f, .3f)},      {1, 3, .8f, BOX(.1f, .1f, .9f, .9f)},
    {1, 4, .95f, BOX(0, 0, .5f, .5f)},     {0, 4, .9f, BOX(.5f, .5f, 1, 1)},
    {0, 4, .8f, BOX(0, 0, .5f, .5f)},      {0, 5, .9f, BOX(0, 0, .4f, .4f)},
    {0, 5, .8f, BOX(0, 0, .4f, .4f)},      {0, 5, .7f, BOX(.6f, .6f, 1, 1)},
    {2, 6, .9f, BOX(0, 0, 1, 1)},          {2, 6, .8f, BOX(.15f, 0, 1.15f, 1)},
    {0, 7, .9f, BOX(0, 0, 1, 1)},          {3, 7, .5f, BOX(0, 0, .2f, .2f)},
    {1, 8, .9f, BOX(0, 0, 1, 1)},          {2, 8, .8f, BOX(0, 0, 1, .5f)},
};

enum { NC = 9, NG = sizeof GT / sizeof GT[0], ND = sizeof DETS / sizeof DETS[0] };

static void expect_aps(const mpx_detection *dets, const mpx_voc_gt *gt, const char *what) {
    const double want11[NC] = {NAN, 1, 2.0 / 3, 7.0 / 11, 0.5, 28.0 / 33, 6.0 / 11, NAN, 0.5};
    const double wantA[NC] = {NAN, 1, 2.0 / 3, 2.0 / 3, 0.5, 5.0 / 6, 0.5, NAN, 0.5};
    double ap11[NC], apA[NC], m11 = 0, mA = 0;
    mpx_voc_summary s = {-1, -1, -1};
    CHECK_OK(mpx_voc_map(dets, ND, gt, NG, NC, 0.5f, ap11, apA, &s));
    for (int c = 0; c < NC; c++) {
        if (isnan(want11[c])) {
            CHECK(isnan(ap11[c]) && isnan(apA[c]), "%s: class %d has no GT: APs %g %g, want NaN",
                  what, c, ap11[c], apA[c]);
            continue;
        }
        m11 += want11[c] / 7, mA += wantA[c] / 7;
        CHECK(fabs(ap11[c] - want11[c]) <= 1e-12, "%s: class %d AP11 %.12g, want %.12g", what, c,
              ap11[c], want11[c]);
        CHECK(fabs(apA[c] - wantA[c]) <= 1e-12, "%s: class %d area AP %.12g, want %.12g", what, c,
              apA[c], wantA[c]);
    }
    CHECK(s.classes_with_gt == 7 && fabs(s.map_11pt - m11) <= 1e-12 &&
              fabs(s.map_area - mA) <= 1e-12,
          "%s: mAP %.12g / %.12g over %d classes, want %.12g / %.12g over 7", what, s.map_11pt,
          s.map_area, s.classes_with_gt, m11, mA);
}

static void check_cases(void) {
    expect_aps(DETS, GT, "hand cases");
    /* Reversed input order: the same APs (scores decide the order, no ties across TP / FP). */
    mpx_detection d[ND];
    mpx_voc_gt g[NG];
    for (int i = 0; i < ND; i++) d[i] = DETS[ND - 1 - i];
    for (int i = 0; i < NG; i++) g[i] = GT[NG - 1 - i];
    expect_aps(d, g, "reversed inputs");

    /* Class 1 alone: mAP exactly 1 for both definitions. */
    mpx_voc_summary s;
    CHECK_OK(mpx_voc_map(DETS, 3, GT, 3, 2, 0.5f, NULL, NULL, &s));
    CHECK(s.map_11pt == 1 && s.map_area == 1 && s.classes_with_gt == 1,
          "perfect detections: mAP %.17g / %.17g over %d classes, want exactly 1", s.map_11pt,
          s.map_area, s.classes_with_gt);
    /* No detections at all: AP 0 for the class with GT, NaN for the other. */
    double a11[2], aA[2];
    CHECK_OK(mpx_voc_map(NULL, 0, GT, 1, 2, 0.5f, a11, aA, &s));
    CHECK(isnan(a11[0]) && isnan(aA[0]) && a11[1] == 0 && aA[1] == 0 && s.map_11pt == 0 &&
              s.map_area == 0 && s.classes_with_gt == 1,
          "no detections: APs %g %g / %g %g, mAP %g over %d classes", a11[0], a11[1], aA[0], aA[1],
          s.map_11pt, s.classes_with_gt);
}

static void expect_input_error(mpx_status s, const char *needle, const char *what) {
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), needle),
          "%s: expected MPX_ERR_INPUT mentioning '%s', got %s: %s", what, needle,
          mpx_status_name(s), mpx_error_message());
}

static void check_errors(void) {
    mpx_voc_summary s;
    expect_input_error(mpx_voc_map(DETS, ND, GT, NG, 8, 0.5f, NULL, NULL, &s),
                       "dets[18] has class 8", "detection class out of range");
    expect_input_error(mpx_voc_map(DETS, ND - 2, GT, NG, 8, 0.5f, NULL, NULL, &s),
                       "gt[14] has class 8", "GT class out of range");
    mpx_detection d = DETS[0];
    d.score = NAN;
    expect_input_error(mpx_voc_map(&d, 1, GT, NG, NC, 0.5f, NULL, NULL, &s), "dets[0]",
                       "NaN score");
    expect_input_error(mpx_voc_map(DETS, ND, GT, NG, NC, 0.0f, NULL, NULL, &s), "iou_threshold = 0",
                       "threshold 0");
    expect_input_error(mpx_voc_map(DETS, ND, GT, NG, NC, 0.5f, NULL, NULL, NULL), "out NULL",
                       "no output");
}

int main(void) {
    check_cases();
    check_errors();
    return mpx_test_done(__FILE__);
}
