/* resample.h — crop-and-resize of uint8 HWC images to float (internal to data/).
 *
 * A box of the source (pixel-edge coordinates: pixel x covers [x, x+1)) is resampled to
 * oh x ow with a separable triangle (bilinear) filter whose support widens by the
 * downscaling factor, like PIL's antialiased BILINEAR resize: upscaling is plain bilinear
 * interpolation, downscaling averages every source pixel under the footprint instead of
 * aliasing. Taps outside the image are dropped and the remaining weights renormalised.
 * All buffers live in a scratch that only grows (no allocation once it is large enough).
 */
#ifndef MPX_DATA_RESAMPLE_H
#define MPX_DATA_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "mpx/error.h"

typedef struct {
    float *f;
    size_t fcap;
    int *i;
    size_t icap;
} mpx_resample_scratch;

/* dst[oh, ow, c] (values 0..255) = the box (bx, by, bw, bh) of src[h, w, c], mirrored in x
 * when `flip`. */
mpx_status mpx_resample_box(const uint8_t *src, int h, int w, int c, double bx, double by,
                            double bw, double bh, float *dst, int oh, int ow, int flip,
                            mpx_resample_scratch *s);
void mpx_resample_scratch_free(mpx_resample_scratch *s);

#endif
