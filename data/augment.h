/* augment.h — applying one example's augmentation (internal to data/; the draw itself is
 * the public mpx_loader_augment). */
#ifndef MPX_DATA_AUGMENT_H
#define MPX_DATA_AUGMENT_H

#include <stdint.h>

#include "data/resample.h"
#include "mpx/data.h"

/* Check a loader configuration against a source: images of src_h x src_w (0 when they vary,
 * as in an image folder) with c channels. Fills *oh, *ow with the output size. */
mpx_status mpx_augment_check_config(const mpx_loader_config *cfg, int src_h, int src_w, int c,
                                    int *oh, int *ow);
/* mpx_loader_augment without the checks (the loader checked the configuration). */
void mpx_augment_draw(const mpx_loader_config *cfg, int src_h, int src_w, int64_t epoch,
                      int64_t example, mpx_augment *out);
/* dst[oh, ow, c] = normalise(augment(src[h, w, c])). */
mpx_status mpx_augment_apply(const mpx_loader_config *cfg, const mpx_augment *a, const uint8_t *src,
                             int h, int w, int c, int oh, int ow, float *dst,
                             mpx_resample_scratch *s);

#endif
