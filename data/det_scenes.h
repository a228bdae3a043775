/* det_scenes.h — rendering a procedural scene with caller-owned scratch (internal to data/:
 * the loader keeps one scratch per thread so it allocates nothing per batch). */
#ifndef MPX_DATA_DET_SCENES_H
#define MPX_DATA_DET_SCENES_H

#include <stdint.h>

#include "data/resample.h"
#include "mpx/detect.h"

typedef struct {
    uint8_t *owner; /* [size * size]: index of the topmost object, 0xFF for background */
    size_t owner_cap;
    float *patch; /* resampled object or background texture */
    size_t patch_cap;
    mpx_resample_scratch rs;
} mpx_scene_scratch;

void mpx_scene_scratch_free(mpx_scene_scratch *s);
/* mpx_scenes_render with scratch that only grows. */
mpx_status mpx_scenes_render_with(const mpx_scenes *s, int64_t index, uint8_t *image,
                                  mpx_det_box *boxes, int *count, mpx_scene_layout *layout,
                                  mpx_scene_scratch *scr);

#endif
