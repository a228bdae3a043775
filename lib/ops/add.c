/* add.c — element-wise y = a + b over tensors of identical shape (residual connections), and
 * y = max(a + b, 0), the add with the ReLU that follows it in a ResNet block fused (one pass
 * instead of two, and the sum never stored). The backward is two copies of dy, done by the
 * graph executor (after ReLU's backward, which the fusion leaves alone). Tensors may be stored as
 * F32, F16 or BF16 each (tile.h). */
#include "mpx/ops.h"
#include "ops_internal.h"
#include "tile.h"

OPS_VECTOR_CLONES static void add_run(const float *a, const float *b, float *y, int64_t n,
                                       int relu) {
    if (relu)
        for (int64_t i = 0; i < n; i++) {
            const float s = a[i] + b[i];
            y[i] = s < 0.0f ? 0.0f : s;
        }
    else
        for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

/* y = a + b, or with relu: relu.c's select on the sum (NaN passes: s < 0 is false for NaN). */
static mpx_status add_op(const char *op, const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *y,
                         int relu) {
    MPX_TRY(ops_expect_float(op, "a", a, -1));
    MPX_TRY(ops_expect_float(op, "b", b, -1));
    MPX_TRY(ops_expect_float(op, "y", y, -1));
    MPX_TRY(ops_expect_same_shape(op, "a", a, "b", b));
    MPX_TRY(ops_expect_same_shape(op, "a", a, "y", y));
    const int64_t n = mpx_tensor_numel(a), nt = tile_count(0, 1, n);
#pragma omp parallel for schedule(static) if (n >= OPS_PAR_MIN)
    for (int64_t k = 0; k < nt; k++) {
        float ba[TILE], bb[TILE], by[TILE];
        const tile_run t = tile_at(k, 0, 1, n);
        const int64_t off = tile_offset(&t, n), len = tile_len(&t);
        const float *ad = tile_load(a, off, len, ba), *bd = tile_load(b, off, len, bb);
        float *yd = tile_dst(y, off, by);
        add_run(ad, bd, yd, len, relu);
        tile_store(y, off, len, yd);
    }
    return MPX_OK;
}

mpx_status mpx_add_forward_cpu(const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *y) {
    return add_op("add forward", a, b, y, 0);
}

mpx_status mpx_add_relu_forward_cpu(const mpx_tensor *a, const mpx_tensor *b, mpx_tensor *y) {
    return add_op("add+relu forward", a, b, y, 1);
}
