/* jpeg_io.h — JPEG decoding with libjpeg (internal to data/).
 *
 * libjpeg's default error handler calls exit(); here errors longjmp back and become
 * MPX_ERR_INPUT naming the image. Output is always RGB uint8 HWC: grayscale is expanded
 * and CMYK/YCCK (Adobe, as in a few ImageNet files) is converted. The DCT method is fixed
 * (JDCT_ISLOW, libjpeg-turbo's accurate integer IDCT) so decoded pixels are reproducible.
 */
#ifndef MPX_DATA_JPEG_IO_H
#define MPX_DATA_JPEG_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mpx/error.h"

typedef struct {
    int h, w;
    int components; /* colour components stored in the file (1 gray, 3 YCbCr/RGB, 4 CMYK) */
    int warnings;   /* libjpeg warnings (e.g. premature end of data) */
} mpx_jpeg_info;

/* Decode from memory (`file` NULL) or from an open FILE (`data` NULL) into *buf (grown with
 * realloc when too small; *cap in bytes) as RGB [h, w, 3]. `name` labels errors. With
 * `strict`, libjpeg warnings (truncated or corrupt data that libjpeg would patch over) are
 * errors too. */
mpx_status mpx_jpeg_decode(const uint8_t *data, size_t n, FILE *file, const char *name, int strict,
                           uint8_t **buf, size_t *cap, mpx_jpeg_info *info);

#endif
