/* resample.c — see resample.h. Two passes: horizontal over the source rows the vertical
 * filter needs ([rows, ow, c]), then vertical into dst. */
#include "data/resample.h"

#include <math.h>
#include <stdlib.h>

void mpx_resample_scratch_free(mpx_resample_scratch *s) {
    free(s->f);
    free(s->i);
    s->f = NULL;
    s->i = NULL;
    s->fcap = s->icap = 0;
}

static int grow(mpx_resample_scratch *s, size_t nf, size_t ni) {
    if (nf > s->fcap) {
        float *p = realloc(s->f, nf * sizeof *p);
        if (!p) return 0;
        s->f = p;
        s->fcap = nf;
    }
    if (ni > s->icap) {
        int *p = realloc(s->i, ni * sizeof *p);
        if (!p) return 0;
        s->i = p;
        s->icap = ni;
    }
    return 1;
}

static int taps_max(double scale) { return 2 * (int)ceil(scale > 1 ? scale : 1) + 1; }

/* For each output i: first source index lo[i], tap count cnt[i], weights wt[i * k ..]. */
static void filter_1d(int n_in, double b0, double blen, int n_out, int k, int *lo, int *cnt,
                      float *wt) {
    double scale = blen / n_out;
    double fs = scale > 1 ? scale : 1; /* filter stretch: antialias when downscaling */
    for (int i = 0; i < n_out; i++) {
        double center = b0 + (i + 0.5) * scale;
        int a = (int)ceil(center - fs - 0.5), b = (int)floor(center + fs - 0.5);
        if (a < 0) a = 0;
        if (b > n_in - 1) b = n_in - 1;
        if (b - a + 1 > k) b = a + k - 1;
        double total = 0;
        float *w = wt + (size_t)i * k;
        for (int x = a; x <= b; x++) {
            double t = fabs(x + 0.5 - center) / fs;
            w[x - a] = (float)(t < 1 ? 1 - t : 0);
            total += w[x - a];
        }
        if (a > b || total <= 0) { /* the footprint misses the image: nearest pixel */
            a = b = center <= 0 ? 0 : center >= n_in ? n_in - 1 : (int)center;
            w[0] = 1;
            total = 1;
        }
        for (int x = 0; x <= b - a; x++) w[x] = (float)(w[x] / total);
        lo[i] = a;
        cnt[i] = b - a + 1;
    }
}

mpx_status mpx_resample_box(const uint8_t *src, int h, int w, int c, double bx, double by,
                            double bw, double bh, float *dst, int oh, int ow, int flip,
                            mpx_resample_scratch *s) {
    if (h <= 0 || w <= 0 || oh <= 0 || ow <= 0 || !(bw > 0) || !(bh > 0))
        return mpx_fail(MPX_ERR_INTERNAL, "resample: bad sizes (%dx%d box %gx%g -> %dx%d)", h, w,
                        bw, bh, oh, ow);
    int kx = taps_max(bw / ow), ky = taps_max(bh / oh);
    size_t nwx = (size_t)kx * ow, nwy = (size_t)ky * oh;
    if (!grow(s, nwx + nwy, 2 * (size_t)(ow + oh)))
        return mpx_fail(MPX_ERR_NOMEM, "out of memory resampling %dx%d -> %dx%d", h, w, oh, ow);
    int *xlo = s->i, *xcnt = xlo + ow, *ylo = xcnt + ow, *ycnt = ylo + oh;
    filter_1d(w, bx, bw, ow, kx, xlo, xcnt, s->f);
    filter_1d(h, by, bh, oh, ky, ylo, ycnt, s->f + nwx);
    int r0 = ylo[0], r1 = ylo[0] + ycnt[0];
    for (int i = 1; i < oh; i++) {
        if (ylo[i] < r0) r0 = ylo[i];
        if (ylo[i] + ycnt[i] > r1) r1 = ylo[i] + ycnt[i];
    }
    size_t rows = (size_t)(r1 - r0);
    if (!grow(s, nwx + nwy + rows * ow * c, 2 * (size_t)(ow + oh)))
        return mpx_fail(MPX_ERR_NOMEM, "out of memory resampling %dx%d -> %dx%d", h, w, oh, ow);
    const float *wx = s->f, *wy = s->f + nwx;
    xlo = s->i;
    xcnt = xlo + ow;
    ylo = xcnt + ow;
    ycnt = ylo + oh;
    float *tmp = s->f + nwx + nwy; /* [rows, ow, c] */
    for (int r = r0; r < r1; r++) {
        const uint8_t *row = src + (size_t)r * w * c;
        float *t = tmp + (size_t)(r - r0) * ow * c;
        for (int j = 0; j < ow; j++) {
            const float *wj = wx + (size_t)j * kx;
            for (int ch = 0; ch < c; ch++) {
                float acc = 0;
                for (int q = 0; q < xcnt[j]; q++) acc += wj[q] * row[(size_t)(xlo[j] + q) * c + ch];
                t[(size_t)j * c + ch] = acc;
            }
        }
    }
    for (int i = 0; i < oh; i++) {
        const float *wi = wy + (size_t)i * ky;
        for (int j = 0; j < ow; j++) {
            int jo = flip ? ow - 1 - j : j;
            float *d = dst + ((size_t)i * ow + jo) * c;
            for (int ch = 0; ch < c; ch++) {
                float acc = 0;
                for (int q = 0; q < ycnt[i]; q++)
                    acc += wi[q] * tmp[((size_t)(ylo[i] + q - r0) * ow + j) * c + ch];
                d[ch] = acc;
            }
        }
    }
    return MPX_OK;
}
