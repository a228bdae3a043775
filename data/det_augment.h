/* det_augment.h — the detection augmentation with caller-owned scratch (internal to data/;
 * the draw and a one-shot apply are public in mpx/detect.h). */
#ifndef MPX_DATA_DET_AUGMENT_H
#define MPX_DATA_DET_AUGMENT_H

#include <stdint.h>

#include "data/resample.h"
#include "mpx/detect.h"

typedef struct {
    uint8_t *jitter; /* photometric copy of the source [S, S, 3] */
    size_t jitter_cap;
    uint8_t *cut; /* the cut-out canvas rectangle [crop_h, crop_w, 3] */
    size_t cut_cap;
    mpx_resample_scratch rs;
} mpx_det_aug_scratch;

void mpx_det_aug_scratch_free(mpx_det_aug_scratch *s);
/* Check a configuration for a src_size source; *out_size receives the output side. */
mpx_status mpx_det_augment_check_config(const mpx_det_loader_config *cfg, int src_size,
                                        int *out_size);
/* mpx_det_augment_draw without the checks. */
void mpx_det_augment_draw_unchecked(const mpx_det_loader_config *cfg, int src_size,
                                    const mpx_det_box *boxes, int count, int64_t epoch,
                                    int64_t example, mpx_det_augment *a);
/* mpx_det_augment_apply with scratch that only grows; out_size is the output side. */
mpx_status mpx_det_augment_apply_with(const mpx_det_loader_config *cfg, const mpx_det_augment *a,
                                      const uint8_t *src, int src_size, const mpx_det_box *boxes,
                                      int count, int out_size, float *dst, mpx_det_box *out_boxes,
                                      int *out_count, mpx_det_aug_scratch *s);

#endif
