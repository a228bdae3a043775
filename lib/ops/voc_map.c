/* voc_map.c — Pascal VOC average precision per class and mAP (the devkit protocol; see
 * mpx/ssd.h for the matching rule and the two AP definitions).
 *
 * GT objects are indexed by (class, image) after one sort, so each detection looks only at
 * the GT of its own image and class (a binary search, then a scan of those few objects).
 * Precision and recall are kept in double; ignored detections (on difficult GT) leave no
 * point, which the devkit's repeated point does not change either.
 */
#include <math.h>
#include <stdlib.h>

#include "mpx/ssd.h"

typedef struct {
    int32_t cls, image;
    int64_t index;
} gt_key;

typedef struct {
    int32_t cls;
    float score;
    int64_t index;
} det_key;

static int gt_key_cmp(const void *a, const void *b) {
    const gt_key *x = a, *y = b;
    if (x->cls != y->cls) return x->cls < y->cls ? -1 : 1;
    if (x->image != y->image) return x->image < y->image ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* Class ascending, then score descending, then input order. */
static int det_key_cmp(const void *a, const void *b) {
    const det_key *x = a, *y = b;
    if (x->cls != y->cls) return x->cls < y->cls ? -1 : 1;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* First position in k[lo, hi) whose (cls, image) is >= (cls, image). */
static int64_t gt_lower_bound(const gt_key *k, int64_t lo, int64_t hi, int32_t cls, int32_t image) {
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (k[mid].cls < cls || (k[mid].cls == cls && k[mid].image < image))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* 11-point and area AP of n (recall, precision) points, recall non-decreasing. */
static void average_precision(const double *rec, double *prec, int64_t n, double *ap11,
                              double *area) {
    double s = 0;
    for (int k = 0; k <= 10; k++) {
        double t = k / 10.0, best = 0;
        for (int64_t i = 0; i < n; i++)
            if (rec[i] >= t && prec[i] > best) best = prec[i];
        s += best;
    }
    *ap11 = s / 11;
    /* The envelope (precision non-increasing from the right), then the area over recall steps. */
    for (int64_t i = n - 2; i >= 0; i--)
        if (prec[i + 1] > prec[i]) prec[i] = prec[i + 1];
    double a = 0, prev = 0;
    for (int64_t i = 0; i < n; i++) {
        a += (rec[i] - prev) * prec[i];
        prev = rec[i];
    }
    *area = a;
}

typedef struct {
    gt_key *g;
    det_key *d;
    char *claimed;
    double *rec, *prec;
} map_scratch;

static void scratch_free(map_scratch *s) {
    free(s->g), free(s->d), free(s->claimed), free(s->rec), free(s->prec);
}

static mpx_status check_inputs(const mpx_detection *dets, int64_t n_dets, const mpx_voc_gt *gt,
                               int64_t n_gt, int n_classes, float iou_threshold,
                               const mpx_voc_summary *out) {
    static const char *op = "voc map";
    if (n_classes < 1 || n_dets < 0 || n_gt < 0 || !out || (n_dets && !dets) || (n_gt && !gt))
        return mpx_fail(MPX_ERR_INPUT,
                        "%s: n_classes = %d, n_dets = %lld, n_gt = %lld, out %s: expected "
                        "n_classes >= 1, counts >= 0 with their arrays, and an output",
                        op, n_classes, (long long)n_dets, (long long)n_gt, out ? "set" : "NULL");
    if (!(iou_threshold > 0 && iou_threshold <= 1))
        return mpx_fail(MPX_ERR_INPUT, "%s: iou_threshold = %g, expected (0, 1]", op,
                        iou_threshold);
    for (int64_t i = 0; i < n_dets; i++)
        if (dets[i].cls < 0 || dets[i].cls >= n_classes || !isfinite(dets[i].score))
            return mpx_fail(MPX_ERR_INPUT,
                            "%s: dets[%lld] has class %d and score %g: expected a class in 0..%d "
                            "and a finite score",
                            op, (long long)i, (int)dets[i].cls, dets[i].score, n_classes - 1);
    for (int64_t i = 0; i < n_gt; i++)
        if (gt[i].cls < 0 || gt[i].cls >= n_classes)
            return mpx_fail(MPX_ERR_INPUT, "%s: gt[%lld] has class %d, expected 0..%d", op,
                            (long long)i, (int)gt[i].cls, n_classes - 1);
    return MPX_OK;
}

mpx_status mpx_voc_map(const mpx_detection *dets, int64_t n_dets, const mpx_voc_gt *gt,
                       int64_t n_gt, int n_classes, float iou_threshold, double *ap_11pt,
                       double *ap_area, mpx_voc_summary *out) {
    MPX_TRY(check_inputs(dets, n_dets, gt, n_gt, n_classes, iou_threshold, out));
    map_scratch s = {malloc(sizeof(gt_key) * (size_t)(n_gt + 1)),
                     malloc(sizeof(det_key) * (size_t)(n_dets + 1)), calloc((size_t)n_gt + 1, 1),
                     malloc(sizeof(double) * (size_t)(n_dets + 1)),
                     malloc(sizeof(double) * (size_t)(n_dets + 1))};
    if (!s.g || !s.d || !s.claimed || !s.rec || !s.prec) {
        scratch_free(&s);
        return mpx_fail(MPX_ERR_NOMEM,
                        "out of memory allocating voc map scratch (%lld "
                        "detections, %lld objects)",
                        (long long)n_dets, (long long)n_gt);
    }
    for (int64_t i = 0; i < n_gt; i++) s.g[i] = (gt_key){gt[i].cls, gt[i].image, i};
    for (int64_t i = 0; i < n_dets; i++) s.d[i] = (det_key){dets[i].cls, dets[i].score, i};
    qsort(s.g, (size_t)n_gt, sizeof *s.g, gt_key_cmp);
    qsort(s.d, (size_t)n_dets, sizeof *s.d, det_key_cmp);

    double sum11 = 0, sum_area = 0;
    int with_gt = 0;
    int64_t g0 = 0, d0 = 0;
    for (int32_t c = 0; c < n_classes; c++) {
        int64_t g1 = g0, d1 = d0, npos = 0;
        while (g1 < n_gt && s.g[g1].cls == c) npos += !gt[s.g[g1++].index].difficult;
        while (d1 < n_dets && s.d[d1].cls == c) d1++;
        double ap11 = NAN, area = NAN;
        if (npos > 0) {
            int64_t tp = 0, fp = 0, n = 0;
            for (int64_t k = d0; k < d1; k++) {
                const mpx_detection *d = &dets[s.d[k].index];
                int64_t best = -1;
                double ovmax = 0;
                for (int64_t j = gt_lower_bound(s.g, g0, g1, c, d->image);
                     j < g1 && s.g[j].image == d->image; j++) {
                    double iou = mpx_ssd_iou(d->box, gt[s.g[j].index].box);
                    if (best < 0 || iou > ovmax) ovmax = iou, best = s.g[j].index;
                }
                if (best >= 0 && ovmax >= iou_threshold) {
                    if (gt[best].difficult) continue; /* ignored: no point */
                    if (s.claimed[best])
                        fp++;
                    else
                        tp++, s.claimed[best] = 1;
                } else {
                    fp++;
                }
                s.rec[n] = (double)tp / (double)npos;
                s.prec[n] = (double)tp / (double)(tp + fp);
                n++;
            }
            average_precision(s.rec, s.prec, n, &ap11, &area);
            sum11 += ap11, sum_area += area, with_gt++;
        }
        if (ap_11pt) ap_11pt[c] = ap11;
        if (ap_area) ap_area[c] = area;
        g0 = g1, d0 = d1;
    }
    scratch_free(&s);
    out->map_11pt = with_gt ? sum11 / with_gt : 0;
    out->map_area = with_gt ? sum_area / with_gt : 0;
    out->classes_with_gt = with_gt;
    return MPX_OK;
}
