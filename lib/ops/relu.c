/* relu.c — ReLU forward and backward (element-wise, any shape).
 *
 * Forward keeps NaN (x < 0 is false for NaN), so a diverging activation stays visible.
 * Backward selects instead of multiplying: dx = y > 0 ? dy : 0, so an Inf in dy is blocked
 * where the unit is off rather than turned into Inf * 0 = NaN. Tensors may be stored as F32,
 * F16 or BF16 each (tile.h: decoded as loaded, rounded to nearest as stored).
 */
#include "mpx/ops.h"
#include "ops_internal.h"
#include "tile.h"

OPS_VECTOR_CLONES static void relu_run(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

OPS_VECTOR_CLONES static void relu_back_run(const float *dy, const float *y, float *dx, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float d = dy[i]; /* loaded unconditionally, so the select vectorises */
        dx[i] = y[i] > 0.0f ? d : 0.0f;
    }
}

mpx_status mpx_relu_forward_cpu(const mpx_tensor *x, mpx_tensor *y) {
    static const char *op = "relu forward";
    MPX_TRY(ops_expect_float(op, "x", x, -1));
    MPX_TRY(ops_expect_float(op, "y", y, -1));
    MPX_TRY(ops_expect_same_shape(op, "x", x, "y", y));
    const int64_t n = mpx_tensor_numel(x), nt = tile_count(0, 1, n);
#pragma omp parallel for schedule(static) if (n >= OPS_PAR_MIN)
    for (int64_t k = 0; k < nt; k++) {
        float bx[TILE], by[TILE];
        const tile_run t = tile_at(k, 0, 1, n);
        const int64_t off = tile_offset(&t, n), len = tile_len(&t);
        const float *xd = tile_load(x, off, len, bx);
        float *yd = tile_dst(y, off, by);
        relu_run(xd, yd, len);
        tile_store(y, off, len, yd);
    }
    return MPX_OK;
}

mpx_status mpx_relu_backward_cpu(const mpx_tensor *dy, const mpx_tensor *y, mpx_tensor *dx) {
    static const char *op = "relu backward";
    MPX_TRY(ops_expect_float(op, "dy", dy, -1));
    MPX_TRY(ops_expect_float(op, "y", y, -1));
    MPX_TRY(ops_expect_float(op, "dx", dx, -1));
    MPX_TRY(ops_expect_same_shape(op, "y", y, "dy", dy));
    MPX_TRY(ops_expect_same_shape(op, "y", y, "dx", dx));
    const int64_t n = mpx_tensor_numel(y), nt = tile_count(0, 1, n);
#pragma omp parallel for schedule(static) if (n >= OPS_PAR_MIN)
    for (int64_t k = 0; k < nt; k++) {
        float bdy[TILE], by[TILE], bdx[TILE];
        const tile_run t = tile_at(k, 0, 1, n);
        const int64_t off = tile_offset(&t, n), len = tile_len(&t);
        const float *dyd = tile_load(dy, off, len, bdy), *yd = tile_load(y, off, len, by);
        float *dxd = tile_dst(dx, off, bdx);
        relu_back_run(dyd, yd, dxd, len);
        tile_store(dx, off, len, dxd);
    }
    return MPX_OK;
}
