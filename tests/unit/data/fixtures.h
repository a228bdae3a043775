/* fixtures.h — writers for the data tests' generated fixtures (header-only, static).
 *
 * JPEGs are encoded with libjpeg, tar archives are written block by block in POSIX ustar
 * format (independently of the reader, libarchive in data/archive.c) and gzipped with zlib's gzopen "wb",
 * so every fixture is made in a temporary directory at test time.
 */
#ifndef MPX_TEST_DATA_FIXTURES_H
#define MPX_TEST_DATA_FIXTURES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
/* jpeglib.h needs stdio.h first */
#include <jpeglib.h>

/* Encode rgb[h, w, c] (c 1 or 3) as a JPEG in memory; caller frees *out. */
static inline void fx_jpeg_encode(const uint8_t *pix, int h, int w, int c, int quality,
                                  unsigned char **out, unsigned long *n) {
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr err;
    ci.err = jpeg_std_error(&err);
    jpeg_create_compress(&ci);
    *out = NULL;
    *n = 0;
    jpeg_mem_dest(&ci, out, n);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = c;
    ci.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, quality, TRUE);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(pix + (size_t)ci.next_scanline * w * c);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
}

/* Decode with plain libjpeg defaults (the reference the converter must match); caller frees. */
static inline uint8_t *fx_jpeg_decode(const unsigned char *data, unsigned long n, int *h, int *w) {
    struct jpeg_decompress_struct d;
    struct jpeg_error_mgr err;
    d.err = jpeg_std_error(&err);
    jpeg_create_decompress(&d);
    jpeg_mem_src(&d, data, n);
    jpeg_read_header(&d, TRUE);
    d.out_color_space = JCS_RGB;
    jpeg_start_decompress(&d);
    *h = (int)d.output_height;
    *w = (int)d.output_width;
    uint8_t *pix = malloc((size_t)*h * *w * 3);
    while (d.output_scanline < d.output_height) {
        JSAMPROW row = pix + (size_t)d.output_scanline * *w * 3;
        jpeg_read_scanlines(&d, &row, 1);
    }
    jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    return pix;
}

static inline int fx_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    size_t k = fwrite(data, 1, n, f);
    return fclose(f) == 0 && k == n;
}

static inline int fx_write_jpeg(const char *path, const uint8_t *pix, int h, int w, int c,
                                int quality) {
    unsigned char *jpg;
    unsigned long n;
    fx_jpeg_encode(pix, h, w, c, quality, &jpg, &n);
    int ok = fx_write_file(path, jpg, n);
    free(jpg);
    return ok;
}

/* ---- tar.gz writer ---- */

static inline void fx_octal(char *field, int len, uint64_t v) {
    /* len-1 octal digits then NUL */
    for (int i = len - 2; i >= 0; i--, v >>= 3) field[i] = (char)('0' + (v & 7));
    field[len - 1] = '\0';
}

/* One header (+ data padded to 512). Names over 100 bytes use the ustar prefix field. */
static inline void fx_tar_add(gzFile gz, const char *name, char type, const void *data, size_t n) {
    char h[512];
    memset(h, 0, sizeof h);
    size_t len = strlen(name);
    if (len <= 100) {
        memcpy(h, name, len);
    } else {
        const char *slash = strchr(name + len - 100, '/'); /* split so the tail fits in 100 */
        size_t plen = (size_t)(slash - name);
        memcpy(h + 345, name, plen);
        memcpy(h, slash + 1, len - plen - 1);
    }
    fx_octal(h + 100, 8, type == '5' ? 0755 : 0644);
    fx_octal(h + 108, 8, 0);
    fx_octal(h + 116, 8, 0);
    fx_octal(h + 124, 12, n);
    fx_octal(h + 136, 12, 1700000000);
    h[156] = type;
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++) sum += (unsigned char)h[i];
    snprintf(h + 148, 7, "%06o", sum);
    h[154] = '\0';
    h[155] = ' ';
    gzwrite(gz, h, 512);
    if (n) {
        gzwrite(gz, data, (unsigned)n);
        char zero[512] = {0};
        if (n % 512) gzwrite(gz, zero, (unsigned)(512 - n % 512));
    }
}

static inline void fx_tar_end(gzFile gz) {
    char zero[1024] = {0};
    gzwrite(gz, zero, sizeof zero);
}

#endif
