/* add.c — element-wise y = a + b over tensors of identical shape (residual connections), and
 * y = max(a + b, 0), the add with the ReLU that follows it in a ResNet block fused (one pass
 * instead of two, and the sum never stored). The backward is two copies of dy, done by the
 * graph executor (after ReLU's backward, which the fusion leaves alone). */
#include "mpx/ops.h"
#include "ops_internal.h"

/* Checks of an add's operands (F32, one shape). */
static mpx_status add_check(const char *op, const mpx_tensor *a, const mpx_tensor *b,
                            const mpx_tensor *y) {
    MPX_TRY(ops_expect(op, "a", a, MPX_F32, -1));
    MPX_TRY(ops_expect(op, "b", b, MPX_F32, -1));
    MPX_TRY(ops_expect(op, "y", y, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(op, "a", a, "b", b));
    return ops_expect_same_shape(op, "a", a, "y", y);
}

mpx_status mpx_add_forward_cpu(const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *y) {
    MPX_TRY(add_check("add forward", a, b, y));
    const float *ad = a->data, *bd = b->data;
    float *yd = y->data;
    int64_t n = mpx_tensor_numel(a);
#pragma omp parallel for schedule(static) if (n >= OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) yd[i] = ad[i] + bd[i];
    return MPX_OK;
}

/* relu.c's select on the sum: NaN passes (s < 0 is false for NaN). */
mpx_status mpx_add_relu_forward_cpu(const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *y) {
    MPX_TRY(add_check("add+relu forward", a, b, y));
    const float *ad = a->data, *bd = b->data;
    float *yd = y->data;
    int64_t n = mpx_tensor_numel(a);
#pragma omp parallel for schedule(static) if (n >= OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        const float s = ad[i] + bd[i];
        yd[i] = s < 0.0f ? 0.0f : s;
    }
    return MPX_OK;
}
