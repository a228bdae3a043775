/* test_ssd_detect.c — non-maximum suppression on hand-made overlapping boxes, the detection
 * post-processing on a hand-worked batch (decode, threshold, per-class NMS, ranking, top-k,
 * image numbering), the same against a plain reference on random data, and the errors.
 *
 * The random comparison is exact: the reference takes its probabilities from
 * mpx_softmax_ce_forward_cpu and its boxes from mpx_ssd_decode (the same FP32 formulas the
 * detector uses, computed by other code), so everything downstream — threshold, ranking,
 * NMS, top-k — must select and order identically, bit for bit.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "mpx/ssd.h"
#include "testutil.h"

static const double U = 1.0 / 16777216.0;

/* NMS of n boxes with the given scores; compares the kept indices with want[0..nw). */
static void expect_nms(const float *boxes, const float *scores, int n, float thr,
                       const int32_t *want, int nw, const char *what) {
    int32_t keep[16];
    int64_t kept = -1;
    mpx_tensor tb = {MPX_F32, MPX_DEV_CPU, 2, {n, 4}, (void *)boxes};
    mpx_tensor ts = {MPX_F32, MPX_DEV_CPU, 1, {n}, (void *)scores};
    mpx_tensor tk = {MPX_I32, MPX_DEV_CPU, 1, {n}, keep};
    CHECK_OK(mpx_ssd_nms(&tb, &ts, thr, &tk, &kept));
    int same = kept == nw;
    for (int i = 0; same && i < nw; i++) same = keep[i] == want[i];
    char got[96] = "", *w = got;
    for (int i = 0; i < kept && i < 8; i++) w += sprintf(w, " %d", keep[i]);
    CHECK(same, "%s: kept%s (%lld), want %d boxes starting %d", what, got, (long long)kept, nw,
          nw ? want[0] : -1);
}

static void check_nms(void) {
    /* Visiting order by score: A .9, E .85, B .8, C .7, D .6.
     *   B = [.1,0,1.1,1]: IoU(A,B) = .9 / 1.1 = .818 > .45  -> suppressed by A
     *   E = [.5,0,1.5,1]: IoU(A,E) = .5 / 1.5 = .333        -> kept
     *   C = [2,2,3,3]: overlaps nothing                      -> kept
     *   D = [0,0,1,.5]: IoU(A,D) = .5 / 1 = .5 > .45         -> suppressed
     * Kept in visiting order: A(0), E(4), C(2). At threshold 0.5, D's IoU .5 is not > .5, and
     * IoU(E,D) = .25 / 1.25 = .2, so D survives too: A, E, C, D. */
    const float boxes[] = {0, 0, 1, 1, 0.1f, 0,    1.1f, 1, 2,    2,
                           3, 3, 0, 0, 1,    0.5f, 0.5f, 0, 1.5f, 1};
    const float scores[] = {0.9f, 0.8f, 0.7f, 0.6f, 0.85f};
    expect_nms(boxes, scores, 5, 0.45f, (const int32_t[]){0, 4, 2}, 3, "five boxes, 0.45");
    expect_nms(boxes, scores, 5, 0.5f, (const int32_t[]){0, 4, 2, 3}, 4, "five boxes, 0.5");

    /* A suppressed box suppresses nothing: A .9, B = [.3,0,1.3,1] .8, F = [.6,0,1.6,1] .7.
     * IoU(A,B) = .7 / 1.3 = .538 -> B suppressed; IoU(A,F) = .4 / 1.6 = .25 -> F kept, although
     * IoU(B,F) = .538 would have removed it had B been kept. */
    const float chain[] = {0, 0, 1, 1, 0.3f, 0, 1.3f, 1, 0.6f, 0, 1.6f, 1};
    const float chain_s[] = {0.9f, 0.8f, 0.7f};
    expect_nms(chain, chain_s, 3, 0.45f, (const int32_t[]){0, 2}, 2, "chain");

    /* Equal scores: the lower index is visited first and wins; a higher score wins anyway. */
    const float same[] = {0, 0, 1, 1, 0, 0, 1, 1};
    expect_nms(same, (const float[]){0.5f, 0.5f}, 2, 0.45f, (const int32_t[]){0}, 1, "tie");
    expect_nms(same, (const float[]){0.5f, 0.6f}, 2, 0.45f, (const int32_t[]){1}, 1, "no tie");
}

/* Softmax rows with given probabilities: logits log(p) (the softmax of log p is p). */
static void set_row(float *x, const double *p, int c) {
    for (int j = 0; j < c; j++) x[j] = (float)log(p[j]);
}

typedef struct {
    int32_t image, cls;
    double score;
    double box[4];
} want_det;

static void expect_dets(const mpx_detection *got, int64_t n, const want_det *want, int nw,
                        const char *what) {
    CHECK(n == nw, "%s: %lld detections, want %d", what, (long long)n, nw);
    for (int i = 0; i < nw && i < n; i++) {
        const mpx_detection *d = &got[i];
        const want_det *w = &want[i];
        /* Scores: the FP32 softmax bound u p (6 + |x - max| + R) of test_op_softmax_ce.c with
         * |x - max|, R <= log(.8 / .1) = 2.08 here: 10.2u p; plus the logits log p rounded to
         * FP32 (<= 2u each for |log p| < 4), which moves p by <= 4u p: 16u relative.
         * Boxes: a few FP32 operations on values <= 1.05: 4u absolute. */
        int ok = d->image == w->image && d->cls == w->cls &&
                 fabs(d->score - w->score) <= 16 * U * w->score;
        for (int k = 0; k < 4; k++) ok &= fabs(d->box[k] - w->box[k]) <= 4 * U;
        CHECK(ok,
              "%s: detection %d = image %d class %d score %.7g box (%g %g %g %g), want image "
              "%d class %d score %.7g box (%g %g %g %g)",
              what, i, d->image, d->cls, d->score, d->box[0], d->box[1], d->box[2], d->box[3],
              w->image, w->cls, w->score, w->box[0], w->box[1], w->box[2], w->box[3]);
    }
}

/* Four priors, three classes (0 background), two images.
 *   p0 [0,0,.5,.5]; p1 [.05,0,.55,.5] (IoU with p0 = .225 / .275 = .818); p2 [.5,.5,1,1];
 *   p3 [0,0,1,1] (IoU .25 with p0 and p1).
 * Image 0 (offsets 0: boxes = priors), probabilities (background, class 1, class 2):
 *   p0 (.1, .3, .6), p1 (.1, .6, .3), p2 (.99, .005, .005), p3 (.5, .2, .3).
 *   class 1: p1 .6, p0 .3 (suppressed by p1: .818), p3 .2 (kept: .25)  -> p1 .6, p3 .2
 *   class 2: p0 .6, p1 .3 (suppressed by p0), p3 .3 (kept)             -> p0 .6, p3 .3
 *   p2's .005 are below the 0.01 threshold. Ranked (score, then class): (.6, 1, p1),
 *   (.6, 2, p0) — equal scores, same probabilities in another order — (.3, 2, p3), (.2, 1, p3);
 *   top_k = 3 drops the last.
 * Image 1: p2 (.1, .1, .8) with offsets (1, 0, 0, 0): cx = .75 + 1 * 0.1 * .5 = .8, so box
 *   [.55, .5, 1.05, 1]; the others (.99, .005, .005). -> (.8, 2, p2), (.1, 1, p2).
 * first_image = 10 numbers the images 10 and 11. */
static void check_detect_hand(void) {
    enum { B = 2, P = 4, C = 3 };
    const float pri[P * 4] = {0.25f, 0.25f, 0.5f, 0.5f, 0.3f, 0.25f, 0.5f, 0.5f,
                              0.75f, 0.75f, 0.5f, 0.5f, 0.5f, 0.5f,  1,    1};
    float conf[B * P * C], loc[B * P * 4] = {0};
    const double bg[3] = {0.99, 0.005, 0.005};
    set_row(conf + 0 * C, (const double[]){0.1, 0.3, 0.6}, C);
    set_row(conf + 1 * C, (const double[]){0.1, 0.6, 0.3}, C);
    set_row(conf + 2 * C, bg, C);
    set_row(conf + 3 * C, (const double[]){0.5, 0.2, 0.3}, C);
    for (int i = 4; i < 8; i++) set_row(conf + i * C, bg, C);
    set_row(conf + 6 * C, (const double[]){0.1, 0.1, 0.8}, C);
    loc[6 * 4] = 1;
    mpx_tensor tc = {MPX_F32, MPX_DEV_CPU, 3, {B, P, C}, conf};
    mpx_tensor tl = {MPX_F32, MPX_DEV_CPU, 3, {B, P, 4}, loc};
    mpx_tensor tp = {MPX_F32, MPX_DEV_CPU, 2, {P, 4}, (void *)pri};
    mpx_ssd_detect_attr a = mpx_ssd_detect_defaults();
    a.top_k = 3;
    mpx_detection out[B * 200];
    int64_t n = -1;
    CHECK_OK(mpx_ssd_detect(&a, &tc, &tl, &tp, 10, out, B * 200, &n));
    const want_det all[] = {{10, 1, 0.6, {0.05, 0, 0.55, 0.5}},
                            {10, 2, 0.6, {0, 0, 0.5, 0.5}},
                            {10, 2, 0.3, {0, 0, 1, 1}},
                            {11, 2, 0.8, {0.55, 0.5, 1.05, 1}},
                            {11, 1, 0.1, {0.55, 0.5, 1.05, 1}}};
    expect_dets(out, n, all, 5, "hand batch");
    CHECK(n == 5 && out[0].score == out[1].score,
          "hand batch: the two .6 scores differ (%.9g, "
          "%.9g), the class tie rule was not exercised",
          out[0].score, out[1].score);

    /* Threshold 0.25 removes (.2, 1, p3) — now image 0 has only three — and (.1, 1, p2). */
    a.score_threshold = 0.25f;
    CHECK_OK(mpx_ssd_detect(&a, &tc, &tl, &tp, 10, out, B * 200, &n));
    const want_det thr[] = {all[0], all[1], all[2], all[3]};
    expect_dets(out, n, thr, 4, "threshold 0.25");

    /* nms_top_k = 1: one candidate per class enters NMS: p1 for class 1, p0 for class 2. */
    a = mpx_ssd_detect_defaults();
    a.nms_top_k = 1;
    CHECK_OK(mpx_ssd_detect(&a, &tc, &tl, &tp, 10, out, B * 200, &n));
    const want_det top1[] = {all[0], all[1], all[3], all[4]};
    expect_dets(out, n, top1, 4, "nms_top_k 1");
}

/* The plain reference: per image and class, candidates above the threshold by insertion
 * sort, the best nms_top_k, greedy NMS, then all survivors by (score, class, prior) and the
 * best top_k. Probabilities and boxes come from other library code (see the header). */
static int64_t ref_detect(const mpx_ssd_detect_attr *a, const float *probs, const float *boxes,
                          int b, int p, int c, int32_t first, mpx_detection *out) {
    int64_t total = 0;
    int *cand = malloc(sizeof(int) * p), *surv_p = malloc(sizeof(int) * p * c);
    int *surv_c = malloc(sizeof(int) * p * c);
    for (int bi = 0; bi < b; bi++) {
        const float *pr = probs + (size_t)bi * p * c, *bx = boxes + (size_t)bi * p * 4;
        int ns = 0;
        for (int cls = 1; cls < c; cls++) {
            int n = 0;
            for (int i = 0; i < p; i++) {
                if (!(pr[i * c + cls] > a->score_threshold)) continue;
                int k = n++;
                while (k > 0 && pr[cand[k - 1] * c + cls] < pr[i * c + cls])
                    cand[k] = cand[k - 1], k--;
                cand[k] = i;
            }
            if (a->nms_top_k > 0 && n > a->nms_top_k) n = a->nms_top_k;
            int first_kept = ns;
            for (int k = 0; k < n; k++) {
                int keep = 1;
                for (int q = first_kept; q < ns && keep; q++)
                    keep = mpx_ssd_iou(bx + 4 * surv_p[q], bx + 4 * cand[k]) <= a->nms_iou;
                if (keep) surv_p[ns] = cand[k], surv_c[ns] = cls, ns++;
            }
        }
        /* selection sort of the survivors by (score desc, class asc, prior asc) */
        for (int k = 0; k < ns && k < a->top_k; k++) {
            int best = k;
            for (int q = k + 1; q < ns; q++) {
                float sq = pr[surv_p[q] * c + surv_c[q]], sb = pr[surv_p[best] * c + surv_c[best]];
                if (sq > sb ||
                    (sq == sb && (surv_c[q] < surv_c[best] ||
                                  (surv_c[q] == surv_c[best] && surv_p[q] < surv_p[best]))))
                    best = q;
            }
            int tp = surv_p[k], tc = surv_c[k];
            surv_p[k] = surv_p[best], surv_c[k] = surv_c[best], surv_p[best] = tp,
            surv_c[best] = tc;
            mpx_detection *d = &out[total++];
            d->image = first + bi, d->cls = surv_c[k], d->score = pr[surv_p[k] * c + surv_c[k]];
            memcpy(d->box, bx + 4 * surv_p[k], sizeof d->box);
        }
    }
    free(cand), free(surv_p), free(surv_c);
    return total;
}

static void check_detect_random(int b, int c, float conf_std, int nms_top_k, int top_k,
                                uint64_t seed) {
    const mpx_ssd_priors_cfg cfg = {
        .n_maps = 3, .size = {6, 3, 1}, .ratio3 = {0, 1, 0}, .s_min = 0.2f, .s_max = 0.9f};
    int64_t p = 0;
    CHECK_OK(mpx_ssd_prior_count(&cfg, &p));
    float *pri = malloc(sizeof(float) * p * 4), *conf = malloc(sizeof(float) * b * p * c);
    float *loc = malloc(sizeof(float) * b * p * 4), *probs = malloc(sizeof(float) * b * p * c);
    float *boxes = malloc(sizeof(float) * b * p * 4), loss;
    int32_t *lab = calloc((size_t)(b * p), sizeof(int32_t));
    mpx_tensor tp = {MPX_F32, MPX_DEV_CPU, 2, {p, 4}, pri};
    CHECK_OK(mpx_ssd_priors(&cfg, &tp));
    mpx_test_normal(conf, (size_t)(b * p * c), 0, conf_std, seed);
    mpx_test_normal(loc, (size_t)(b * p * 4), 0, 1, seed + 1);
    mpx_ssd_detect_attr a = mpx_ssd_detect_defaults();
    a.nms_top_k = nms_top_k, a.top_k = top_k;
    /* the reference's inputs, from other library code */
    mpx_tensor c2 = {MPX_F32, MPX_DEV_CPU, 2, {b * p, c}, conf}, p2 = c2;
    p2.data = probs;
    mpx_tensor tlab = {MPX_I32, MPX_DEV_CPU, 1, {b * p}, lab};
    mpx_tensor tloss = {MPX_F32, MPX_DEV_CPU, 1, {1}, &loss};
    CHECK_OK(mpx_softmax_ce_forward_cpu(&c2, &tlab, &tloss, &p2));
    mpx_tensor tl = {MPX_F32, MPX_DEV_CPU, 3, {b, p, 4}, loc}, tb = tl;
    tb.data = boxes;
    CHECK_OK(mpx_ssd_decode(&tp, &tl, a.var_xy, a.var_wh, &tb));

    const int64_t cap = (int64_t)b * top_k;
    mpx_detection *got = malloc(sizeof *got * cap), *want = malloc(sizeof *want * cap);
    memset(got, 0, sizeof *got * cap), memset(want, 0, sizeof *want * cap);
    int64_t n = -1, nw = ref_detect(&a, probs, boxes, b, (int)p, c, 3, want);
    mpx_tensor tc = {MPX_F32, MPX_DEV_CPU, 3, {b, p, c}, conf};
    CHECK_OK(mpx_ssd_detect(&a, &tc, &tl, &tp, 3, got, cap, &n));
    int64_t first_bad = -1;
    for (int64_t i = 0; i < n && i < nw && first_bad < 0; i++)
        if (memcmp(&got[i], &want[i], sizeof got[i])) first_bad = i;
    CHECK(n == nw && first_bad < 0,
          "random B %d C %d nms_top_k %d top_k %d: %lld detections vs reference %lld, first "
          "difference at %lld",
          b, c, nms_top_k, top_k, (long long)n, (long long)nw, (long long)first_bad);
    CHECK(nw > 0, "random: the reference found nothing (the case must have detections)");
    free(pri), free(conf), free(loc), free(probs), free(boxes), free(lab), free(got), free(want);
}

static void expect_input_error(mpx_status s, const char *needle, const char *what) {
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), needle),
          "%s: expected MPX_ERR_INPUT mentioning '%s', got %s: %s", what, needle,
          mpx_status_name(s), mpx_error_message());
}

static void check_errors(void) {
    float pri[8] = {0.5f, 0.5f, 1, 1, 0.5f, 0.5f, 1, 1}, conf[2 * 2 * 3] = {0},
          loc[2 * 2 * 4] = {0};
    mpx_tensor tp = {MPX_F32, MPX_DEV_CPU, 2, {2, 4}, pri};
    mpx_tensor tc = {MPX_F32, MPX_DEV_CPU, 3, {2, 2, 3}, conf};
    mpx_tensor tl = {MPX_F32, MPX_DEV_CPU, 3, {2, 2, 4}, loc};
    mpx_ssd_detect_attr a = mpx_ssd_detect_defaults();
    mpx_detection out[400];
    int64_t n;
    CHECK_OK(mpx_ssd_detect(&a, &tc, &tl, &tp, 0, out, 400, &n));
    expect_input_error(mpx_ssd_detect(&a, &tc, &tl, &tp, 0, out, 399, &n),
                       "room for 399 detections", "short output");
    a.nms_iou = 0;
    expect_input_error(mpx_ssd_detect(&a, &tc, &tl, &tp, 0, out, 400, &n), "nms iou threshold = 0",
                       "zero nms threshold");
    a = mpx_ssd_detect_defaults();
    mpx_tensor t = tl;
    t.shape[1] = 1;
    expect_input_error(mpx_ssd_detect(&a, &tc, &t, &tp, 0, out, 400, &n), "loc has shape [2,1,4]",
                       "loc of another P");
    t = tc;
    t.shape[2] = 1;
    expect_input_error(mpx_ssd_detect(&a, &t, &tl, &tp, 0, out, 400, &n), "C = 1", "one class");
    float sc[2] = {0.5f, NAN};
    int32_t keep[2];
    int64_t kept;
    mpx_tensor ts = {MPX_F32, MPX_DEV_CPU, 1, {2}, sc}, tk = {MPX_I32, MPX_DEV_CPU, 1, {2}, keep};
    expect_input_error(mpx_ssd_nms(&tp, &ts, 0.45f, &tk, &kept), "scores[1] = nan", "NaN score");
}

int main(void) {
    check_nms();
    check_detect_hand();
    /* scores spread (std 3: many candidates cut by the threshold) and flat (std 0.3: nearly
     * every prior above 0.01, so nms_top_k and top_k bind) */
    check_detect_random(3, 5, 3.0f, 400, 200, 21);
    check_detect_random(2, 4, 0.3f, 20, 15, 22);
    check_detect_random(2, 21, 1.0f, 0, 200, 23);
    check_errors();
    return mpx_test_done(__FILE__);
}
