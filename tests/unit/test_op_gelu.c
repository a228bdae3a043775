/* test_op_gelu.c — exact (erf) GELU forward against a double reference, backward against
 * central finite differences in double, special values, determinism across thread counts, and
 * the error paths.
 *
 * FP32 tolerances, u = 2^-24, Phi / phi the normal CDF / density. glibc 2.36's erfcf measured
 * here at <= 3.09 ulp (every 7th float in [-10, 10]) and expf at <= 0.51 ulp: we allow 4 ulp
 * (8u relative) and 1 ulp (2u). The op computes Phi = erfcf(-x * fl(1/sqrt 2)) / 2: the
 * argument carries 2u relative error, which Phi amplifies by its condition number
 * |x| phi / Phi (~x^2 for x << 0): an absolute error 2u |x| phi in Phi.
 *  - y = x * Phi: erfcf (8u |y|), the argument (2u x^2 phi), the product (u |y|):
 *    |err| <= 10u |y| + 3u x^2 phi + a subnormal floor 8 * 2^-149 max(1, |x|).
 *  - dx = dy (Phi + x phi): Phi as above (8u Phi + 2u |x| phi); phi = c expf(-x^2/2) with the
 *    argument rounded (u x^2 / 2 relative), expf, the constant and two products (5u); the sum
 *    and the product by dy (u |Phi + x phi| each, <= u (Phi + |x| phi)):
 *    |err| <= u |dy| (12 Phi + |x| phi (9 + x^2 / 2)) + |dy| 8 * 2^-149 max(1, |x|) (Phi and
 *    phi each off by a few subnormal steps once they underflow, phi multiplied by x).
 * Finite differences: per element (GELU is element-wise) on r * gelu(x) in double, step
 * h = 1e-4. Truncation h^2 |f'''| / 6 with gelu''' = phi (x^3 - 4x) (bounded with a factor 2
 * for f''' elsewhere in [x - h, x + h]) and rounding 4 2^-53 |r gelu(x)| / h are added to the
 * tolerance; both stay below 0.06 of the FP32 bound.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "mpx/runtime.h"
#include "testutil.h"

static const double U = 1.0 / 16777216.0;
static const double E53 = 1.0 / 9007199254740992.0;
static const double SUB = 1.4012984643248171e-45; /* 2^-149, the smallest subnormal float */

static double cdf(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }
static double pdf(double x) { return exp(-0.5 * x * x) / sqrt(2.0 * M_PI); }
static double ref_gelu(double x) { return x * cdf(x); }

static void upd(double *worst, double e) {
    if (!(e <= *worst)) *worst = e;
}

/* Normal values with std `spread`, then the special points that matter. */
static void fill_x(float *x, int64_t n, float spread, uint64_t seed) {
    static const float special[] = {0.0f,  -0.0f,  1e-30f, -1e-30f, 0.5f,  -0.5f, -0.7517916f,
                                    1.0f,  -1.0f,  3.0f,   -3.0f,   5.0f,  -5.0f, 8.0f,
                                    -8.0f, -10.0f, -13.0f, -20.0f,  20.0f, 1e4f,  -1e4f};
    mpx_test_normal(x, n, 0.0f, spread, seed);
    int64_t ns = (int64_t)(sizeof special / sizeof special[0]);
    for (int64_t i = 0; i < ns && i * 3 < n; i++) x[i * 3] = special[i];
}

static void check_shape(int ndim, const int64_t *shape, float spread, uint64_t seed) {
    int64_t n = mpx_shape_numel(ndim, shape);
    char tag[80];
    mpx_shape_str(ndim, shape, tag, sizeof tag);
    float *x = malloc(n * 4), *r = malloc(n * 4), *y = malloc(n * 4), *dx = malloc(n * 4);
    fill_x(x, n, spread, seed);
    mpx_test_uniform(r, n, -2, 2, seed + 1);
    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, ndim, {0}, x};
    memcpy(tx.shape, shape, ndim * sizeof(int64_t));
    mpx_tensor ty = tx, tr = tx, tdx = tx;
    ty.data = y, tr.data = r, tdx.data = dx;
    for (int64_t i = 0; i < n; i++) y[i] = dx[i] = NAN;
    CHECK_OK(mpx_gelu_forward_cpu(&tx, &ty));
    CHECK_OK(mpx_gelu_backward_cpu(&tr, &tx, &tdx));
    double wy = 0, wdx = 0;
    const double h = 1e-4;
    for (int64_t i = 0; i < n; i++) {
        double xv = x[i], rv = r[i], ref = ref_gelu(xv), P = cdf(xv), p = pdf(xv);
        double tol = 10 * U * fabs(ref) + 3 * U * xv * xv * p + 8 * SUB * fmax(1, fabs(xv));
        upd(&wy, fabs(y[i] - ref) / tol);
        double fd = rv * (ref_gelu(xv + h) - ref_gelu(xv - h)) / (2 * h);
        double fd_err = 2 * h * h / 6 * fabs(rv) * p * fabs(xv * xv * xv - 4 * xv) +
                        4 * E53 * fabs(rv * ref) / h;
        double tdx_ = U * fabs(rv) * (12 * P + fabs(xv) * p * (9 + xv * xv / 2)) +
                      fabs(rv) * 8 * SUB * fmax(1, fabs(xv)) + fd_err;
        upd(&wdx, fabs(dx[i] - fd) / (tdx_ + 1e-300));
    }
    CHECK(wy <= 1, "%s: forward error %.3g x tolerance", tag, wy);
    CHECK(wdx <= 1, "%s: dx vs finite differences %.3g x tolerance", tag, wdx);

    float *y1 = malloc(n * 4), *dx1 = malloc(n * 4);
    mpx_tensor ty1 = ty, tdx1 = tdx;
    ty1.data = y1, tdx1.data = dx1;
    mpx_threads_set(1);
    CHECK_OK(mpx_gelu_forward_cpu(&tx, &ty1));
    CHECK_OK(mpx_gelu_backward_cpu(&tr, &tx, &tdx1));
    mpx_threads_set(2);
    CHECK(!memcmp(y, y1, n * 4) && !memcmp(dx, dx1, n * 4),
          "%s: results differ between 1 and 2 threads", tag);
    free(x), free(r), free(y), free(dx), free(y1), free(dx1);
}

/* NaN stays NaN, +Inf gives +Inf forward; large |x| saturates to x and 0. */
static void check_special(void) {
    float x[4] = {NAN, INFINITY, 50.0f, -50.0f}, y[4], d[4] = {1, 1, 1, 1}, dx[4];
    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, 1, {4}, x}, ty = tx, td = tx, tdx = tx;
    ty.data = y, td.data = d, tdx.data = dx;
    CHECK_OK(mpx_gelu_forward_cpu(&tx, &ty));
    CHECK_OK(mpx_gelu_backward_cpu(&td, &tx, &tdx));
    CHECK(isnan(y[0]) && isnan(dx[0]), "NaN input: y %g dx %g, expected NaN", y[0], dx[0]);
    CHECK(y[1] == INFINITY, "+Inf input: y %g, expected +Inf", y[1]);
    CHECK(y[2] == 50.0f && dx[2] == 1.0f, "x = 50: y %g dx %g, expected 50 and 1", y[2], dx[2]);
    CHECK(y[3] == 0.0f && dx[3] == 0.0f, "x = -50: y %g dx %g, expected 0 and 0", y[3], dx[3]);
}

static void expect_input_error(mpx_status s, const char *needle, const char *what) {
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), needle),
          "%s: expected MPX_ERR_INPUT mentioning '%s', got %s: %s", what, needle,
          mpx_status_name(s), mpx_error_message());
}

static void check_errors(void) {
    static float a[12], b[12], c[12];
    mpx_tensor x = {MPX_F32, MPX_DEV_CPU, 2, {3, 4}, a}, y = x, d = x;
    y.data = b, d.data = c;
    mpx_tensor t = y;
    t.shape[0] = 4, t.shape[1] = 3;
    expect_input_error(mpx_gelu_forward_cpu(&x, &t), "y has shape [4,3]", "y of another shape");
    expect_input_error(mpx_gelu_backward_cpu(&t, &x, &d), "dy has shape [4,3]",
                       "dy of another shape");
    expect_input_error(mpx_gelu_backward_cpu(&y, &x, &t), "dx has shape [4,3]",
                       "dx of another shape");
    t = x;
    t.dtype = MPX_BF16;
    expect_input_error(mpx_gelu_forward_cpu(&t, &y), "x has dtype bf16", "bf16 x");
    t = x;
    t.data = NULL;
    expect_input_error(mpx_gelu_backward_cpu(&y, &t, &d), "x has no data", "x without data");
}

int main(void) {
    mpx_threads_set(2);
    static const int64_t s1[] = {1}, s2[] = {3, 37}, s3[] = {2, 3, 5, 7}, s4[] = {4, 8192};
    check_shape(1, s1, 1, 10);
    check_shape(2, s2, 3, 20);
    check_shape(4, s3, 6, 30);
    check_shape(2, s4, 2, 40); /* 32768 elements: the OpenMP path */
    check_special();
    check_errors();
    return mpx_test_done(__FILE__);
}
