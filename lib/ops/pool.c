/* pool.c — max-pool 2D and global average pool, NHWC, forward and backward.
 *
 * Max-pool: window kernel x kernel, stride, zero-based padding that never wins (padded cells
 * are skipped, not read as 0 or -inf). The maximum is the first largest value in row-major
 * window order, and a NaN, once met, stays the maximum (it propagates, as a diverging run
 * must show). Backward routes dy to the first window position whose x equals y (NaN matching
 * NaN), which is exactly the position the forward picked.
 */
#include <string.h>

#include "mpx/ops.h"
#include "ops_internal.h"

enum { CB = 16 };

/* Checks attr and the x / y pair of a max-pool; fills the sizes. */
static mpx_status maxpool_check(const char *op, const mpx_pool2d_attr *a, const mpx_tensor *x,
                                const char *yn, const mpx_tensor *y, int64_t *oh, int64_t *ow) {
    if (!a) return mpx_fail(MPX_ERR_INPUT, "%s: attr is NULL", op);
    if (a->kernel < 1 || a->stride < 1 || a->pad < 0 || a->pad >= a->kernel)
        return mpx_fail(MPX_ERR_INPUT,
                        "%s: kernel %d and stride %d must be >= 1 and pad %d in [0, kernel)", op,
                        a->kernel, a->stride, a->pad);
    MPX_TRY(ops_expect(op, "x", x, MPX_F32, 4));
    MPX_TRY(ops_expect(op, yn, y, MPX_F32, 4));
    int64_t h = x->shape[1], w = x->shape[2];
    if (h + 2 * a->pad < a->kernel || w + 2 * a->pad < a->kernel)
        return mpx_fail(MPX_ERR_INPUT, "%s: x is %lldx%lld, smaller than kernel %d with pad %d",
                        op, (long long)h, (long long)w, a->kernel, a->pad);
    *oh = (h + 2 * a->pad - a->kernel) / a->stride + 1;
    *ow = (w + 2 * a->pad - a->kernel) / a->stride + 1;
    MPX_TRY(ops_expect_dim(op, yn, y, 0, x->shape[0], "N of x"));
    MPX_TRY(ops_expect_dim(op, yn, y, 1, *oh, "OH = (H + 2*pad - kernel) / stride + 1"));
    MPX_TRY(ops_expect_dim(op, yn, y, 2, *ow, "OW = (W + 2*pad - kernel) / stride + 1"));
    return ops_expect_dim(op, yn, y, 3, x->shape[3], "C of x");
}

/* The window's valid rows/cols: [*lo, *hi) in input coordinates. */
static void window(int64_t o, const mpx_pool2d_attr *a, int64_t size, int64_t *lo, int64_t *hi) {
    int64_t s = o * a->stride - a->pad, e = s + a->kernel;
    *lo = s < 0 ? 0 : s;
    *hi = e > size ? size : e;
}

mpx_status mpx_maxpool2d_forward_cpu(const mpx_pool2d_attr *a, const mpx_tensor *x, mpx_tensor *y) {
    static const char *op = "maxpool2d forward";
    int64_t oh, ow;
    MPX_TRY(maxpool_check(op, a, x, "y", y, &oh, &ow));
    int64_t n = x->shape[0], h = x->shape[1], w = x->shape[2], c = x->shape[3];
    const float *xd = x->data;
    float *yd = y->data;
#pragma omp parallel for collapse(2) schedule(static) if (n * oh * ow * c >= OPS_PAR_MIN)
    for (int64_t in = 0; in < n; in++)
        for (int64_t oy = 0; oy < oh; oy++) {
            int64_t y0, y1;
            window(oy, a, h, &y0, &y1);
            for (int64_t ox = 0; ox < ow; ox++) {
                int64_t x0, x1;
                window(ox, a, w, &x0, &x1);
                float *out = yd + ((in * oh + oy) * ow + ox) * c;
                memcpy(out, xd + ((in * h + y0) * w + x0) * c, (size_t)c * sizeof(float));
                for (int64_t iy = y0; iy < y1; iy++)
                    for (int64_t ix = (iy == y0 ? x0 + 1 : x0); ix < x1; ix++) {
                        const float *v = xd + ((in * h + iy) * w + ix) * c;
                        /* a select, not a conditional store, so that it vectorises */
                        for (int64_t j = 0; j < c; j++) {
                            const float o = out[j], u = v[j];
                            out[j] = u > o || (u != u && o == o) ? u : o;
                        }
                    }
            }
        }
    return MPX_OK;
}

mpx_status mpx_maxpool2d_backward_cpu(const mpx_pool2d_attr *a, const mpx_tensor *dy,
                                      const mpx_tensor *x, const mpx_tensor *y, mpx_tensor *dx) {
    static const char *op = "maxpool2d backward";
    int64_t oh, ow;
    MPX_TRY(maxpool_check(op, a, x, "y", y, &oh, &ow));
    MPX_TRY(ops_expect(op, "dy", dy, MPX_F32, 4));
    MPX_TRY(ops_expect_same_shape(op, "y", y, "dy", dy));
    MPX_TRY(ops_expect(op, "dx", dx, MPX_F32, 4));
    MPX_TRY(ops_expect_same_shape(op, "x", x, "dx", dx));
    int64_t n = x->shape[0], h = x->shape[1], w = x->shape[2], c = x->shape[3];
    const float *xd = x->data, *yd = y->data, *dyd = dy->data;
    float *dxd = dx->data;
    int64_t nblocks = (c + CB - 1) / CB;
    /* Tasks own (image, channel block) slices of dx, so overlapping windows (stride < kernel)
     * accumulate in the same order whatever the thread count. */
#pragma omp parallel for collapse(2) schedule(static) if (n * h * w * c >= OPS_PAR_MIN)
    for (int64_t in = 0; in < n; in++)
        for (int64_t blk = 0; blk < nblocks; blk++) {
            int64_t c0 = blk * CB, c1 = c0 + CB < c ? c0 + CB : c;
            for (int64_t p = 0; p < h * w; p++)
                for (int64_t j = c0; j < c1; j++) dxd[(in * h * w + p) * c + j] = 0.0f;
            for (int64_t oy = 0; oy < oh; oy++) {
                int64_t y0, y1;
                window(oy, a, h, &y0, &y1);
                for (int64_t ox = 0; ox < ow; ox++) {
                    int64_t x0, x1;
                    window(ox, a, w, &x0, &x1);
                    const int64_t o = ((in * oh + oy) * ow + ox) * c + c0, nc = c1 - c0;
                    const int64_t wide = x1 - x0;
                    const float *m = yd + o;
                    /* Per channel of the block, the first window position (row-major) whose
                     * x matches y: a pass over the window's positions for all the block's
                     * channels at once (compares and selects, which vectorise, instead of a
                     * search per channel), then one add per channel. */
                    int at[CB], found[CB] = {0};
                    for (int64_t iy = y0, p = 0; iy < y1; iy++)
                        for (int64_t ix = x0; ix < x1; ix++, p++) {
                            const float *xv = xd + ((in * h + iy) * w + ix) * c + c0;
                            for (int64_t j = 0; j < nc; j++) {
                                const int match =
                                    (xv[j] == m[j]) | ((xv[j] != xv[j]) & (m[j] != m[j]));
                                const int hit = match & (found[j] ^ 1);
                                at[j] = hit ? (int)p : at[j];
                                found[j] |= hit;
                            }
                        }
                    for (int64_t j = 0; j < nc; j++)
                        if (found[j]) {
                            const int64_t iy = y0 + at[j] / wide, ix = x0 + at[j] % wide;
                            dxd[((in * h + iy) * w + ix) * c + c0 + j] += dyd[o + j];
                        }
                }
            }
        }
    return MPX_OK;
}

mpx_status mpx_avgpool_global_forward_cpu(const mpx_tensor *x, mpx_tensor *y) {
    static const char *op = "avgpool_global forward";
    MPX_TRY(ops_expect(op, "x", x, MPX_F32, 4));
    MPX_TRY(ops_expect(op, "y", y, MPX_F32, 2));
    MPX_TRY(ops_expect_dim(op, "y", y, 0, x->shape[0], "N of x"));
    MPX_TRY(ops_expect_dim(op, "y", y, 1, x->shape[3], "C of x"));
    int64_t n = x->shape[0], hw = x->shape[1] * x->shape[2], c = x->shape[3];
    int64_t nblocks = (c + CB - 1) / CB;
    const float *xd = x->data;
    float *yd = y->data;
#pragma omp parallel for collapse(2) schedule(static) if (n * hw * c >= OPS_PAR_MIN)
    for (int64_t in = 0; in < n; in++)
        for (int64_t blk = 0; blk < nblocks; blk++) {
            int64_t c0 = blk * CB, nc = c0 + CB < c ? CB : c - c0;
            double s[CB] = {0};
            for (int64_t p = 0; p < hw; p++) {
                const float *row = xd + (in * hw + p) * c + c0;
                for (int64_t j = 0; j < nc; j++) s[j] += row[j];
            }
            for (int64_t j = 0; j < nc; j++) yd[in * c + c0 + j] = (float)(s[j] / (double)hw);
        }
    return MPX_OK;
}

mpx_status mpx_avgpool_global_backward_cpu(const mpx_tensor *dy, mpx_tensor *dx) {
    static const char *op = "avgpool_global backward";
    MPX_TRY(ops_expect(op, "dx", dx, MPX_F32, 4));
    MPX_TRY(ops_expect(op, "dy", dy, MPX_F32, 2));
    MPX_TRY(ops_expect_dim(op, "dy", dy, 0, dx->shape[0], "N of dx"));
    MPX_TRY(ops_expect_dim(op, "dy", dy, 1, dx->shape[3], "C of dx"));
    int64_t n = dx->shape[0], hw = dx->shape[1] * dx->shape[2], c = dx->shape[3];
    const float *dyd = dy->data;
    float *dxd = dx->data;
    const float fhw = (float)hw; /* exact: hw < 2^24 for any image */
#pragma omp parallel for collapse(2) schedule(static) if (n * hw * c >= OPS_PAR_MIN)
    for (int64_t in = 0; in < n; in++)
        for (int64_t p = 0; p < hw; p++) {
            float *row = dxd + (in * hw + p) * c;
            for (int64_t j = 0; j < c; j++) row[j] = dyd[in * c + j] / fhw;
        }
    return MPX_OK;
}
