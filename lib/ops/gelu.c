/* gelu.c — GELU in the exact erf form BERT uses, forward and backward (element-wise, any shape).
 *
 * y = x * Phi(x) with Phi(x) = erfc(-x / sqrt(2)) / 2, the standard normal CDF. The erfc form
 * keeps Phi accurate to a few ulps *relative* for negative x, where (1 + erf(x / sqrt(2))) / 2
 * would cancel down to nothing (at x = -5 it has no correct digit left). Backward recomputes
 * from the saved input: dx = dy * (Phi(x) + x * phi(x)), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
 * FP32 throughout (glibc erfcf / expf); NaN and Inf propagate.
 */
#include <math.h>

#include "mpx/ops.h"
#include "ops_internal.h"

static const float RSQRT2 = 0.70710678118654752f;   /* 1 / sqrt(2) */
static const float RSQRT2PI = 0.39894228040143268f; /* 1 / sqrt(2 pi) */

static inline float cdf(float x) { return 0.5f * erfcf(-x * RSQRT2); }

mpx_status mpx_gelu_forward_cpu(const mpx_tensor *x, mpx_tensor *y) {
    static const char *op = "gelu forward";
    MPX_TRY(ops_expect(op, "x", x, MPX_F32, -1));
    MPX_TRY(ops_expect(op, "y", y, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(op, "x", x, "y", y));
    const float *xd = x->data;
    float *yd = y->data;
    int64_t n = mpx_tensor_numel(x);
#pragma omp parallel for schedule(static) if (n >= OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) yd[i] = xd[i] * cdf(xd[i]);
    return MPX_OK;
}

mpx_status mpx_gelu_backward_cpu(const mpx_tensor *dy, const mpx_tensor *x, mpx_tensor *dx) {
    static const char *op = "gelu backward";
    MPX_TRY(ops_expect(op, "dy", dy, MPX_F32, -1));
    MPX_TRY(ops_expect(op, "x", x, MPX_F32, -1));
    MPX_TRY(ops_expect(op, "dx", dx, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(op, "x", x, "dy", dy));
    MPX_TRY(ops_expect_same_shape(op, "x", x, "dx", dx));
    const float *dyd = dy->data, *xd = x->data;
    float *dxd = dx->data;
    int64_t n = mpx_tensor_numel(x);
#pragma omp parallel for schedule(static) if (n >= OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float v = xd[i], pdf = RSQRT2PI * expf(-0.5f * v * v);
        dxd[i] = dyd[i] * (cdf(v) + v * pdf);
    }
    return MPX_OK;
}
