/* conv2d_ref.c — the reference 2D convolution: plain loops in double precision.
 *
 * x [N,H,W,C], wt [KH,KW,C,K], b [K] or NULL, y [N,OH,OW,K]; zero padding, no groups or
 * dilation. Slow on purpose: it is what the oneDNN path and the tests are checked against.
 */
#include "mpx/ops.h"

void mpx_conv2d_reference(const mpx_conv2d_attr *a, int n, int h, int w, int c, int k, int kh,
                          int kw, const double *x, const double *wt, const double *b, double *y) {
    int oh = (h + 2 * a->pad_h - kh) / a->stride_h + 1;
    int ow = (w + 2 * a->pad_w - kw) / a->stride_w + 1;
    for (int in = 0; in < n; in++)
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++) {
                double *out = y + (((size_t)in * oh + oy) * ow + ox) * k;
                for (int ok = 0; ok < k; ok++) out[ok] = b ? b[ok] : 0.0;
                for (int ky = 0; ky < kh; ky++) {
                    int iy = oy * a->stride_h - a->pad_h + ky;
                    if (iy < 0 || iy >= h) continue;
                    for (int kx = 0; kx < kw; kx++) {
                        int ix = ox * a->stride_w - a->pad_w + kx;
                        if (ix < 0 || ix >= w) continue;
                        const double *xin = x + (((size_t)in * h + iy) * w + ix) * c;
                        const double *wk = wt + ((size_t)ky * kw + kx) * c * k;
                        for (int ic = 0; ic < c; ic++)
                            for (int ok = 0; ok < k; ok++) out[ok] += xin[ic] * wk[ic * k + ok];
                    }
                }
            }
}
