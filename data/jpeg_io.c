/* jpeg_io.c — see jpeg_io.h. */
#include "data/jpeg_io.h"

#include <jpeglib.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
    char warning[JMSG_LENGTH_MAX];
    int warnings;
} err_mgr;

static void on_error(j_common_ptr c) {
    err_mgr *e = (err_mgr *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jump, 1);
}

/* level -1: a warning (corrupt data patched over); >= 0: trace messages, ignored. */
static void on_message(j_common_ptr c, int level) {
    err_mgr *e = (err_mgr *)c->err;
    if (level >= 0) return;
    if (e->warnings++ == 0) (*c->err->format_message)(c, e->warning);
}

/* Read the scanlines into buf as RGB; CMYK rows go through `row` first. */
static void read_pixels(struct jpeg_decompress_struct *d, uint8_t *out, int cmyk, int inverted) {
    int w = (int)d->output_width;
    JSAMPARRAY row = NULL;
    if (cmyk) row = (*d->mem->alloc_sarray)((j_common_ptr)d, JPOOL_IMAGE, (JDIMENSION)w * 4, 1);
    while (d->output_scanline < d->output_height) {
        uint8_t *dst = out + (size_t)d->output_scanline * (size_t)w * 3;
        if (!cmyk) {
            JSAMPROW r = dst;
            jpeg_read_scanlines(d, &r, 1);
            continue;
        }
        jpeg_read_scanlines(d, row, 1);
        for (int x = 0; x < w; x++) {
            /* Adobe stores inverted CMYK: the stored values are already 255 - ink. */
            int cc = row[0][4 * x], m = row[0][4 * x + 1], yy = row[0][4 * x + 2],
                k = row[0][4 * x + 3];
            if (!inverted) {
                cc = 255 - cc;
                m = 255 - m;
                yy = 255 - yy;
                k = 255 - k;
            }
            dst[3 * x] = (uint8_t)((cc * k + 127) / 255);
            dst[3 * x + 1] = (uint8_t)((m * k + 127) / 255);
            dst[3 * x + 2] = (uint8_t)((yy * k + 127) / 255);
        }
    }
}

#define MPX_JPEG_MAX_PIXELS ((uint64_t)1 << 26) /* 64 M pixels: 192 MB of RGB */

mpx_status mpx_jpeg_decode(const uint8_t *data, size_t n, FILE *file, const char *name, int strict,
                           uint8_t **buf, size_t *cap, mpx_jpeg_info *info) {
    struct jpeg_decompress_struct d;
    err_mgr e;
    memset(info, 0, sizeof *info);
    d.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = on_error;
    e.pub.emit_message = on_message;
    e.warnings = 0;
    e.warning[0] = '\0';
    if (setjmp(e.jump)) {
        jpeg_destroy_decompress(&d);
        return mpx_fail(MPX_ERR_INPUT, "cannot decode JPEG '%s': %s", name, e.msg);
    }
    jpeg_create_decompress(&d);
    if (file)
        jpeg_stdio_src(&d, file);
    else
        jpeg_mem_src(&d, data, (unsigned long)n);
    jpeg_read_header(&d, TRUE);
    /* A corrupt or hostile header can declare up to 65500 x 65500 pixels (12 GB of RGB); no
     * training image comes near MPX_JPEG_MAX_PIXELS, so refuse before allocating (fuzz_jpeg). */
    if ((uint64_t)d.image_width * d.image_height > MPX_JPEG_MAX_PIXELS) {
        mpx_status st = mpx_fail(MPX_ERR_INPUT, "JPEG '%s' declares %ux%u pixels (more than %d M): "
                                 "corrupt or not a training image", name, d.image_width,
                                 d.image_height, (int)(MPX_JPEG_MAX_PIXELS >> 20));
        jpeg_destroy_decompress(&d);
        return st;
    }
    int cmyk = d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK;
    int inverted = d.saw_Adobe_marker;
    info->components = d.num_components;
    d.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    d.dct_method = JDCT_ISLOW;
    jpeg_start_decompress(&d);
    size_t need = (size_t)d.output_width * d.output_height * 3;
    if (need > *cap) {
        uint8_t *nb = realloc(*buf, need);
        if (!nb) {
            jpeg_destroy_decompress(&d);
            return mpx_fail(MPX_ERR_NOMEM, "out of memory decoding '%s' (%ux%u)", name,
                            d.output_width, d.output_height);
        }
        *buf = nb;
        *cap = need;
    }
    read_pixels(&d, *buf, cmyk, inverted);
    jpeg_finish_decompress(&d);
    info->h = (int)d.output_height;
    info->w = (int)d.output_width;
    info->warnings = e.warnings;
    jpeg_destroy_decompress(&d);
    if (strict && e.warnings)
        return mpx_fail(MPX_ERR_INPUT, "corrupt JPEG '%s': %s", name, e.warning);
    return MPX_OK;
}
