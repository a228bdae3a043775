/* add.c — element-wise y = a + b over tensors of identical shape (residual connections).
 * The backward is two copies of dy, done by the graph executor. */
#include "mpx/ops.h"
#include "ops_internal.h"

mpx_status mpx_add_forward_cpu(const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *y) {
    static const char *op = "add forward";
    MPX_TRY(ops_expect(op, "a", a, MPX_F32, -1));
    MPX_TRY(ops_expect(op, "b", b, MPX_F32, -1));
    MPX_TRY(ops_expect(op, "y", y, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(op, "a", a, "b", b));
    MPX_TRY(ops_expect_same_shape(op, "a", a, "y", y));
    const float *ad = a->data, *bd = b->data;
    float *yd = y->data;
    int64_t n = mpx_tensor_numel(a);
#pragma omp parallel for schedule(static) if (n >= OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) yd[i] = ad[i] + bd[i];
    return MPX_OK;
}
