/* test_op_relu.c — ReLU forward/backward against double references and finite differences.
 *
 * ReLU and its gradient involve no arithmetic rounding (a select), so forward and backward
 * must match the double reference exactly. Finite differences: f(x) = sum(r * relu(x)) in
 * double with step h = 1e-3 at points |x| >= 1e-2 (kinks are avoided): f is linear on each
 * side, so the central difference is exact up to ~1e-13 rounding; tolerance 1e-9.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "testutil.h"

static double objective(const double *x, const double *r, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += r[i] * (x[i] > 0 ? x[i] : 0);
    return s;
}

static void check_size(int ndim, const int64_t *shape, uint64_t seed) {
    size_t n = (size_t)mpx_shape_numel(ndim, shape);
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    float *r = malloc(n * sizeof(float)), *dx = malloc(n * sizeof(float));
    mpx_test_uniform(x, n, -1, 1, seed);
    mpx_test_uniform(r, n, -1, 1, seed + 1);
    for (size_t i = 0; i < n; i++)
        if (fabsf(x[i]) < 1e-2f) x[i] = x[i] < 0 ? -1e-2f : 1e-2f; /* away from the kink */
    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, ndim, {0}, x};
    memcpy(tx.shape, shape, ndim * sizeof(int64_t));
    mpx_tensor ty = tx, tr = tx, tdx = tx;
    ty.data = y, tr.data = r, tdx.data = dx;
    for (size_t i = 0; i < n; i++) y[i] = dx[i] = NAN;
    CHECK_OK(mpx_relu_forward_cpu(&tx, &ty));
    CHECK_OK(mpx_relu_backward_cpu(&tr, &ty, &tdx));
    size_t bad_y = 0, bad_dx = 0;
    double *xd = malloc(n * sizeof(double)), *rd = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) xd[i] = x[i], rd[i] = r[i];
    /* Finite differences on a sample (every 997th element) for large sizes: each
     * objective evaluation is O(n). */
    size_t every = n > 5000 ? 997 : 1;
    for (size_t i = 0; i < n; i++) {
        double ref = x[i] > 0 ? x[i] : 0;
        if (y[i] != ref) bad_y++;
        if (i % every) continue;
        const double h = 1e-3;
        double save = xd[i];
        xd[i] = save + h;
        double fp = objective(xd, rd, n);
        xd[i] = save - h;
        double fm = objective(xd, rd, n);
        xd[i] = save;
        if (fabs(dx[i] - (fp - fm) / (2 * h)) > 1e-9) bad_dx++;
    }
    char tag[64];
    mpx_shape_str(ndim, shape, tag, sizeof tag);
    CHECK(bad_y == 0, "relu forward %s: %zu of %zu values differ from max(x, 0)", tag, bad_y, n);
    CHECK(bad_dx == 0, "relu backward %s: %zu values differ from finite differences", tag, bad_dx);
    free(x), free(y), free(r), free(dx), free(xd), free(rd);
}

static void check_special(void) {
    /* NaN propagates forward; -0 stays -0 (sign kept, compares equal to 0); backward blocks
     * Inf gradients where the unit is off instead of producing Inf * 0 = NaN. */
    float x[5] = {NAN, -0.0f, -2.0f, 3.0f, INFINITY}, y[5];
    float dy[5] = {1.0f, INFINITY, INFINITY, 2.0f, -1.0f}, dx[5];
    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, 1, {5}, x}, ty = tx, tdy = tx, tdx = tx;
    ty.data = y, tdy.data = dy, tdx.data = dx;
    CHECK_OK(mpx_relu_forward_cpu(&tx, &ty));
    CHECK(isnan(y[0]) && y[1] == 0 && y[2] == 0 && y[3] == 3 && isinf(y[4]),
          "relu special values: got %g %g %g %g %g", y[0], y[1], y[2], y[3], y[4]);
    CHECK_OK(mpx_relu_backward_cpu(&tdy, &ty, &tdx));
    CHECK(dx[0] == 0 && dx[1] == 0 && dx[2] == 0 && dx[3] == 2 && dx[4] == -1,
          "relu backward special values: got %g %g %g %g %g", dx[0], dx[1], dx[2], dx[3], dx[4]);
    /* In place (y aliasing x) is allowed for an element-wise op. */
    CHECK_OK(mpx_relu_forward_cpu(&tx, &tx));
    CHECK(x[2] == 0 && x[3] == 3, "relu in place");
}

static void check_errors(void) {
    static float a[12], b[12];
    mpx_tensor x = {MPX_F32, MPX_DEV_CPU, 2, {3, 4}, a}, y = x;
    y.data = b;
    mpx_tensor t = y;
    t.shape[1] = 5;
    mpx_status s = mpx_relu_forward_cpu(&x, &t);
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), "y has shape [3,5]"),
          "relu shape mismatch: %s", mpx_error_message());
    t = x;
    t.dtype = MPX_I32;
    s = mpx_relu_forward_cpu(&t, &y);
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), "x has dtype i32"),
          "relu i32: %s", mpx_error_message());
    t = x;
    t.dtype = MPX_I32;
    s = mpx_relu_backward_cpu(&t, &y, &x);
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), "dy has dtype i32"),
          "relu backward i32 dy: %s", mpx_error_message());
    s = mpx_relu_backward_cpu(&x, NULL, &y);
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), "y is NULL"), "relu NULL y: %s",
          mpx_error_message());
}

int main(void) {
    static const int64_t s1[] = {7}, s2[] = {3, 5, 2, 9}, s3[] = {4, 32, 32, 16};
    check_size(1, s1, 1);
    check_size(4, s2, 2);
    check_size(4, s3, 3); /* 65536 elements: the OpenMP path */
    check_special();
    check_errors();
    return mpx_test_done(__FILE__);
}
