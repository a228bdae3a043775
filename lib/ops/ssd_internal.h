/* ssd_internal.h — box helpers shared by the SSD sources (lib/ops/ssd_*.c, multibox.c,
 * detect_post.c): raw-pointer forms of the public functions in mpx/ssd.h, without checks. What
 * the CUDA MultiBox shares with them as source is in ssd_box.h. */
#ifndef MPX_SSD_INTERNAL_H
#define MPX_SSD_INTERNAL_H

#include <stdint.h>

#include "mpx/error.h"
#include "ssd_box.h" /* the types and the arithmetic shared with the CUDA MultiBox */

/* qsort comparator for ssd_pair_before (a total order over distinct indices). */
int ssd_pair_cmp(const void *a, const void *b);

/* Corner box from centre-form `prior` and offsets `delta` (the inverse of ssd_encode_one). */
void ssd_decode_one(const float prior[4], const float delta[4], float var_xy, float var_wh,
                    float box[4]);

/* Matching of one image (see mpx_ssd_match): priors [P, 4] centre form, gt [G, 4], labels [G]
 * (< 0 skipped). Scratch: best [P], gts [G]. match [P]: GT index or -1. */
void ssd_match_image(const float *priors, int64_t p, const float *gt, const int32_t *labels,
                     int64_t g, float iou_threshold, ssd_pair *best, ssd_gt_state *gts,
                     int32_t *match);

/* Checks one image's ground truth: labels < 0 skipped, others in [1, n_classes) (n_classes 0:
 * any >= 1), boxes finite with x1 > x0 and y1 > y0. `image` < 0: not part of a batch (the
 * message then names gt_boxes[g] instead of gt_boxes[image,g]). */
mpx_status ssd_check_gt(const char *op, const float *gt, const int32_t *labels, int64_t g,
                        int64_t image, int64_t n_classes);

/* Softmax of one row of k logits into p (FP32 values, double normaliser); returns
 * log-sum-exp of the row in double. */
double ssd_softmax_row(const float *x, int64_t k, float *p);

/* Greedy NMS over the candidates cand[0..n) (indices into boxes [*, 4] corner form), already
 * ordered by rank; compacts the kept ones to the front of cand and returns their count. */
int64_t ssd_nms_sorted(const float *boxes, int32_t *cand, int64_t n, float iou_threshold);

#endif
