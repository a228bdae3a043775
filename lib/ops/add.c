/* add.c — element-wise y = a + b over tensors of identical shape (residual connections), and
 * y = max(a + b, 0), the add with the ReLU that follows it in a ResNet block fused (one pass
 * instead of two, and the sum never stored). The backward is two copies of dy, done by the
 * graph executor (after ReLU's backward, which the fusion leaves alone). */
#include "mpx/ops.h"
#include "ops_internal.h"

/* y = a + b, or with relu: relu.c's select on the sum (NaN passes: s < 0 is false for NaN). */
static mpx_status add_op(const char *op, const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *y,
                         int relu) {
    MPX_TRY(ops_expect(op, "a", a, MPX_F32, -1));
    MPX_TRY(ops_expect(op, "b", b, MPX_F32, -1));
    MPX_TRY(ops_expect(op, "y", y, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(op, "a", a, "b", b));
    MPX_TRY(ops_expect_same_shape(op, "a", a, "y", y));
    const float *ad = a->data, *bd = b->data;
    float *yd = y->data;
    int64_t n = mpx_tensor_numel(a);
    if (relu) {
#pragma omp parallel for schedule(static) if (n >= OPS_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            const float s = ad[i] + bd[i];
            yd[i] = s < 0.0f ? 0.0f : s;
        }
    } else {
#pragma omp parallel for schedule(static) if (n >= OPS_PAR_MIN)
        for (int64_t i = 0; i < n; i++) yd[i] = ad[i] + bd[i];
    }
    return MPX_OK;
}

mpx_status mpx_add_forward_cpu(const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *y) {
    return add_op("add forward", a, b, y, 0);
}

mpx_status mpx_add_relu_forward_cpu(const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *y) {
    return add_op("add+relu forward", a, b, y, 1);
}
