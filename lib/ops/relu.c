/* relu.c — ReLU forward and backward (element-wise, any shape).
 *
 * Forward keeps NaN (x < 0 is false for NaN), so a diverging activation stays visible.
 * Backward selects instead of multiplying: dx = y > 0 ? dy : 0, so an Inf in dy is blocked
 * where the unit is off rather than turned into Inf * 0 = NaN.
 */
#include "mpx/ops.h"
#include "ops_internal.h"

mpx_status mpx_relu_forward_cpu(const mpx_tensor *x, mpx_tensor *y) {
    static const char *op = "relu forward";
    MPX_TRY(ops_expect(op, "x", x, MPX_F32, -1));
    MPX_TRY(ops_expect(op, "y", y, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(op, "x", x, "y", y));
    const float *xd = x->data;
    float *yd = y->data;
    int64_t n = mpx_tensor_numel(x);
#pragma omp parallel for schedule(static) if (n >= OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) yd[i] = xd[i] < 0.0f ? 0.0f : xd[i];
    return MPX_OK;
}

mpx_status mpx_relu_backward_cpu(const mpx_tensor *dy, const mpx_tensor *y, mpx_tensor *dx) {
    static const char *op = "relu backward";
    MPX_TRY(ops_expect(op, "dy", dy, MPX_F32, -1));
    MPX_TRY(ops_expect(op, "y", y, MPX_F32, -1));
    MPX_TRY(ops_expect(op, "dx", dx, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(op, "y", y, "dy", dy));
    MPX_TRY(ops_expect_same_shape(op, "y", y, "dx", dx));
    const float *dyd = dy->data, *yd = y->data;
    float *dxd = dx->data;
    int64_t n = mpx_tensor_numel(y);
#pragma omp parallel for schedule(static) if (n >= OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float d = dyd[i]; /* loaded unconditionally, so the select vectorises */
        dxd[i] = yd[i] > 0.0f ? d : 0.0f;
    }
    return MPX_OK;
}
