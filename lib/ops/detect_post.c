/* detect_post.c — SSD post-processing: decode the offsets, softmax the confidences, per-class
 * score threshold and greedy NMS, and the per-image top-k over all classes.
 *
 * Evaluation-time code: it allocates its scratch per call (one set per thread; images run in
 * parallel, each into its own slot of the output). Per class the candidates above the
 * threshold are cut to the best nms_top_k with a heap before they are sorted, so an untrained
 * network (every score near 1/C, above a 0.01 threshold) costs O(P log k) per class, not a
 * sort of all P priors. Every ranking is (score descending, index ascending): deterministic.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ssd.h"
#include "ops_internal.h"
#include "ssd_internal.h"

mpx_ssd_detect_attr mpx_ssd_detect_defaults(void) {
    return (mpx_ssd_detect_attr){.score_threshold = 0.01f,
                                 .nms_iou = 0.45f,
                                 .nms_top_k = 400,
                                 .top_k = 200,
                                 .var_xy = 0.1f,
                                 .var_wh = 0.2f};
}

int64_t ssd_nms_sorted(const float *boxes, int32_t *cand, int64_t n, float iou_threshold) {
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *b = boxes + 4 * (int64_t)cand[i];
        int keep = 1;
        for (int64_t j = 0; j < kept && keep; j++)
            keep = !(mpx_ssd_iou(boxes + 4 * (int64_t)cand[j], b) > iou_threshold);
        if (keep) cand[kept++] = cand[i];
    }
    return kept;
}

static mpx_status check_nms_iou(const char *op, float iou) {
    if (iou > 0 && iou <= 1) return MPX_OK;
    return mpx_fail(MPX_ERR_INPUT, "%s: nms iou threshold = %g, expected (0, 1]", op, iou);
}

mpx_status mpx_ssd_nms(const mpx_tensor *boxes, const mpx_tensor *scores, float iou_threshold,
                       mpx_tensor *keep, int64_t *kept) {
    static const char *op = "ssd nms";
    MPX_TRY(check_nms_iou(op, iou_threshold));
    MPX_TRY(ops_expect(op, "boxes", boxes, MPX_F32, 2));
    MPX_TRY(ops_expect_dim(op, "boxes", boxes, 1, 4, "(x0, y0, x1, y1)"));
    const int64_t n = boxes->shape[0];
    if (n > INT32_MAX)
        return mpx_fail(MPX_ERR_INPUT, "%s: %lld boxes, more than an I32 index holds", op,
                        (long long)n);
    MPX_TRY(ops_expect(op, "scores", scores, MPX_F32, 1));
    MPX_TRY(ops_expect_dim(op, "scores", scores, 0, n, "N, the rows of boxes"));
    MPX_TRY(ops_expect(op, "keep", keep, MPX_I32, 1));
    MPX_TRY(ops_expect_dim(op, "keep", keep, 0, n, "N, the rows of boxes"));
    if (!kept) return mpx_fail(MPX_ERR_INPUT, "%s: kept is NULL", op);
    const float *s = scores->data;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(s[i]))
            return mpx_fail(MPX_ERR_INPUT, "%s: scores[%lld] = %g is not finite", op, (long long)i,
                            s[i]);
    ssd_pair *order;
    MPX_ALLOC(order, n, "ssd nms order");
    for (int64_t i = 0; i < n; i++) order[i] = (ssd_pair){s[i], (int32_t)i};
    qsort(order, (size_t)n, sizeof *order, ssd_pair_cmp);
    int32_t *k = keep->data;
    for (int64_t i = 0; i < n; i++) k[i] = order[i].i;
    free(order);
    *kept = ssd_nms_sorted(boxes->data, k, n, iou_threshold);
    return MPX_OK;
}

/* A survivor of one image's per-class NMS. */
typedef struct {
    float score;
    int32_t cls, prior;
} survivor;

/* Score descending, then class, then prior ascending. */
static int survivor_cmp(const void *a, const void *b) {
    const survivor *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->cls != y->cls) return x->cls < y->cls ? -1 : 1;
    return (x->prior > y->prior) - (x->prior < y->prior);
}

typedef struct {
    float *boxes, *scores; /* [P, 4] decoded, [P, C] softmax */
    ssd_pair *cand;        /* [P] */
    int32_t *idx;          /* [P] */
    survivor *surv;        /* [(C - 1) * per_class] */
} detect_scratch;

/* Returns 1 when every buffer was allocated (scratch_free is safe either way). */
static int scratch_alloc(detect_scratch *s, int64_t p, int64_t c, int64_t per_class) {
    s->boxes = malloc(sizeof(float) * 4 * p);
    s->scores = malloc(sizeof(float) * p * c);
    s->cand = malloc(sizeof(ssd_pair) * p);
    s->idx = malloc(sizeof(int32_t) * p);
    s->surv = malloc(sizeof(survivor) * (c - 1) * per_class);
    return s->boxes && s->scores && s->cand && s->idx && s->surv;
}

static void scratch_free(detect_scratch *s) {
    free(s->boxes), free(s->scores), free(s->cand), free(s->idx), free(s->surv);
}

/* One image: the survivors of per-class NMS, ranked; returns their number. */
static int64_t image_detect(const mpx_ssd_detect_attr *a, const float *conf, const float *loc,
                            const float *priors, int64_t p, int64_t c, int64_t per_class,
                            detect_scratch *s) {
    for (int64_t i = 0; i < p; i++) {
        ssd_decode_one(priors + 4 * i, loc + 4 * i, a->var_xy, a->var_wh, s->boxes + 4 * i);
        ssd_softmax_row(conf + i * c, c, s->scores + i * c);
    }
    int64_t ns = 0;
    for (int64_t cls = 1; cls < c; cls++) {
        int64_t n = 0;
        for (int64_t i = 0; i < p; i++) {
            float v = s->scores[i * c + cls];
            if (v > a->score_threshold) s->cand[n++] = (ssd_pair){v, (int32_t)i};
        }
        if (n > per_class) {
            ssd_keep_best(s->cand, n, per_class);
            n = per_class;
        }
        qsort(s->cand, (size_t)n, sizeof *s->cand, ssd_pair_cmp);
        for (int64_t i = 0; i < n; i++) s->idx[i] = s->cand[i].i;
        int64_t kept = ssd_nms_sorted(s->boxes, s->idx, n, a->nms_iou);
        for (int64_t i = 0; i < kept; i++)
            s->surv[ns++] = (survivor){s->scores[s->idx[i] * c + cls], (int32_t)cls, s->idx[i]};
    }
    qsort(s->surv, (size_t)ns, sizeof *s->surv, survivor_cmp);
    return ns;
}

mpx_status mpx_ssd_detect(const mpx_ssd_detect_attr *a, const mpx_tensor *conf,
                          const mpx_tensor *loc, const mpx_tensor *priors, int32_t first_image,
                          mpx_detection *out, int64_t cap, int64_t *count) {
    static const char *op = "ssd detect";
    if (!a) return mpx_fail(MPX_ERR_INPUT, "%s: attributes are NULL", op);
    if (!(a->score_threshold >= 0 && a->score_threshold < 1))
        return mpx_fail(MPX_ERR_INPUT, "%s: score_threshold = %g, expected [0, 1)", op,
                        a->score_threshold);
    MPX_TRY(check_nms_iou(op, a->nms_iou));
    if (a->nms_top_k < 0 || a->top_k < 1)
        return mpx_fail(MPX_ERR_INPUT, "%s: nms_top_k = %d must be >= 0 and top_k = %d >= 1", op,
                        a->nms_top_k, a->top_k);
    if (!(a->var_xy > 0 && a->var_wh > 0 && isfinite(a->var_xy) && isfinite(a->var_wh)))
        return mpx_fail(MPX_ERR_INPUT, "%s: variances (%g, %g) must be finite and > 0", op,
                        a->var_xy, a->var_wh);
    MPX_TRY(ops_expect(op, "conf", conf, MPX_F32, 3));
    const int64_t nb = conf->shape[0], p = conf->shape[1], c = conf->shape[2];
    if (c < 2)
        return mpx_fail(MPX_ERR_INPUT, "%s: conf has C = %lld classes, expected >= 2", op,
                        (long long)c);
    if (p > INT32_MAX)
        return mpx_fail(MPX_ERR_INPUT, "%s: %lld priors, more than an I32 index holds", op,
                        (long long)p);
    MPX_TRY(ops_expect(op, "loc", loc, MPX_F32, 3));
    MPX_TRY(ops_expect_dim(op, "loc", loc, 0, nb, "B, dim 0 of conf"));
    MPX_TRY(ops_expect_dim(op, "loc", loc, 1, p, "P, dim 1 of conf"));
    MPX_TRY(ops_expect_dim(op, "loc", loc, 2, 4, "4 offsets"));
    MPX_TRY(ops_expect(op, "priors", priors, MPX_F32, 2));
    MPX_TRY(ops_expect_dim(op, "priors", priors, 0, p, "P, dim 1 of conf"));
    MPX_TRY(ops_expect_dim(op, "priors", priors, 1, 4, "(cx, cy, w, h)"));
    if (!out || !count) return mpx_fail(MPX_ERR_INPUT, "%s: out or count is NULL", op);
    if (cap < nb * a->top_k)
        return mpx_fail(MPX_ERR_INPUT,
                        "%s: out has room for %lld detections, needs B * top_k = %lld", op,
                        (long long)cap, (long long)(nb * a->top_k));
    if (first_image < 0 || (int64_t)first_image + nb - 1 > INT32_MAX)
        return mpx_fail(MPX_ERR_INPUT, "%s: first_image = %d with B = %lld leaves 0..INT32_MAX", op,
                        (int)first_image, (long long)nb);

    /* Images run in parallel, each thread with its own scratch; image b first writes its
     * detections to out[b * top_k ...], then the slots are compacted in image order. */
    const int64_t per_class = a->nms_top_k > 0 && a->nms_top_k < p ? a->nms_top_k : p;
    int64_t *found;
    MPX_ALLOC(found, nb, "ssd detect counts");
    int failed = 0;
#pragma omp parallel if (nb > 1)
    {
        detect_scratch s;
        int ok = scratch_alloc(&s, p, c, per_class);
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t b = 0; b < nb; b++) {
            if (!ok) continue;
            int64_t ns = image_detect(a, (const float *)conf->data + b * p * c,
                                      (const float *)loc->data + b * p * 4, priors->data, p, c,
                                      per_class, &s);
            if (ns > a->top_k) ns = a->top_k;
            for (int64_t i = 0; i < ns; i++) {
                mpx_detection *d = &out[b * a->top_k + i];
                const survivor *v = &s.surv[i];
                d->image = first_image + (int32_t)b, d->cls = v->cls, d->score = v->score;
                for (int k = 0; k < 4; k++) d->box[k] = s.boxes[4 * (int64_t)v->prior + k];
            }
            found[b] = ns;
        }
        scratch_free(&s);
    }
    int64_t total = 0;
    for (int64_t b = 0; b < nb && !failed; b++) {
        memmove(&out[total], &out[b * a->top_k], sizeof *out * (size_t)found[b]);
        total += found[b];
    }
    free(found);
    if (failed)
        return mpx_fail(MPX_ERR_NOMEM,
                        "out of memory allocating ssd detect scratch (P = %lld, C = %lld)",
                        (long long)p, (long long)c);
    *count = total;
    return MPX_OK;
}
