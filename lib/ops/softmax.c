/* softmax.c — the attention softmax over the last dimension, with scale and key mask.
 *
 * y = softmax(scale * x + mask_bias) row by row, FP32: z = scale * x, masked keys get
 * z = -inf, the row maximum is subtracted before expf (no overflow), the normaliser is a double
 * sum and y = exp(z - max) * (1 / sum). A masked key's probability is exactly 0 and a row with
 * every key masked (max = -inf) is all zeros rather than 0/0 = NaN. With a mask, x is
 * [B, H, T_q, T_k] and mask [B, T_k]: row r of the [B*H*T_q, T_k] view reads mask row
 * r / (H * T_q). Mask values must be 0 or 1 (a stray additive -10000 mask is an error, not a
 * silent "keep").
 *
 * Backward from y: dx = scale * y * (dy - sum_k dy_k y_k), the sum in double; masked keys have
 * y = 0 and so get dx = 0 without the mask. Rows are independent: results do not depend on the
 * thread count.
 */
#include <math.h>

#include "mpx/ops.h"
#include "ops_internal.h"

/* Validates the mask (shape [B, T_k] against x [B, H, T_q, T_k], every value 0 or 1). */
static mpx_status mask_check(const char *op, const mpx_tensor *x, const mpx_tensor *mask) {
    if (!mask) return MPX_OK;
    if (x->ndim != 4)
        return mpx_fail(MPX_ERR_INPUT, "%s: with a mask, x must be [B, H, T_q, T_k], has %d dims",
                        op, x->ndim);
    if (mask->dtype != MPX_I32 && mask->dtype != MPX_F32)
        return mpx_fail(MPX_ERR_INPUT, "%s: mask has dtype %s, expected i32 or f32", op,
                        mpx_dtype_name(mask->dtype));
    MPX_TRY(ops_expect(op, "mask", mask, mask->dtype, 2));
    MPX_TRY(ops_expect_dim(op, "mask", mask, 0, x->shape[0], "B, dim 0 of x"));
    MPX_TRY(ops_expect_dim(op, "mask", mask, 1, x->shape[3], "T_k, dim 3 of x"));
    int64_t n = mpx_tensor_numel(mask), tk = x->shape[3];
    for (int64_t i = 0; i < n; i++) {
        double v = mask->dtype == MPX_I32 ? (double)((const int32_t *)mask->data)[i]
                                          : (double)((const float *)mask->data)[i];
        if (v != 0 && v != 1)
            return mpx_fail(MPX_ERR_INPUT,
                            "%s: mask[%lld, %lld] = %g: mask values must be 1 (keep) or 0 (mask)",
                            op, (long long)(i / tk), (long long)(i % tk), v);
    }
    return MPX_OK;
}

/* Whether key j of the mask row starting at element `base` is kept (no mask: always). */
static inline int kept(const mpx_tensor *mask, int64_t base, int64_t j) {
    if (!mask) return 1;
    if (mask->dtype == MPX_I32) return ((const int32_t *)mask->data)[base + j] != 0;
    return ((const float *)mask->data)[base + j] != 0.0f;
}

mpx_status mpx_softmax_forward_cpu(float scale, const mpx_tensor *x, const mpx_tensor *mask,
                                   mpx_tensor *y) {
    static const char *op = "softmax forward";
    if (!isfinite(scale)) return mpx_fail(MPX_ERR_INPUT, "%s: scale %g is not finite", op, scale);
    MPX_TRY(ops_expect(op, "x", x, MPX_F32, -1));
    MPX_TRY(ops_expect(op, "y", y, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(op, "x", x, "y", y));
    MPX_TRY(mask_check(op, x, mask));
    const int64_t tk = x->shape[x->ndim - 1], rows = mpx_tensor_numel(x) / tk;
    /* rows per mask row: H * T_q */
    const int64_t per_mask = mask ? x->shape[1] * x->shape[2] : 1;
    const float *xd = x->data;
    float *yd = y->data;
#pragma omp parallel for schedule(static) if (rows * tk >= OPS_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = xd + r * tk;
        float *yr = yd + r * tk;
        const int64_t base = (r / per_mask) * tk;
        float mx = -INFINITY;
        for (int64_t j = 0; j < tk; j++) {
            yr[j] = kept(mask, base, j) ? scale * xr[j] : -INFINITY;
            mx = yr[j] > mx ? yr[j] : mx;
        }
        if (mx == -INFINITY) { /* every key masked */
            for (int64_t j = 0; j < tk; j++) yr[j] = 0.0f;
            continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < tk; j++) {
            yr[j] = expf(yr[j] - mx);
            sum += yr[j];
        }
        const float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < tk; j++) yr[j] *= inv;
    }
    return MPX_OK;
}

mpx_status mpx_softmax_backward_cpu(float scale, const mpx_tensor *dy, const mpx_tensor *y,
                                    mpx_tensor *dx) {
    static const char *op = "softmax backward";
    if (!isfinite(scale)) return mpx_fail(MPX_ERR_INPUT, "%s: scale %g is not finite", op, scale);
    MPX_TRY(ops_expect(op, "dy", dy, MPX_F32, -1));
    MPX_TRY(ops_expect(op, "y", y, MPX_F32, -1));
    MPX_TRY(ops_expect(op, "dx", dx, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(op, "y", y, "dy", dy));
    MPX_TRY(ops_expect_same_shape(op, "y", y, "dx", dx));
    const int64_t tk = y->shape[y->ndim - 1], rows = mpx_tensor_numel(y) / tk;
    const float *dyd = dy->data, *yd = y->data;
    float *dxd = dx->data;
#pragma omp parallel for schedule(static) if (rows * tk >= OPS_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *dr = dyd + r * tk, *yr = yd + r * tk;
        float *out = dxd + r * tk;
        double s = 0;
        for (int64_t j = 0; j < tk; j++) s += (double)dr[j] * yr[j];
        const float sf = (float)s;
        for (int64_t j = 0; j < tk; j++) out[j] = scale * yr[j] * (dr[j] - sf);
    }
    return MPX_OK;
}
