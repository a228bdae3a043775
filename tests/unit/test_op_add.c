/* test_op_add.c — element-wise add (and add with the ReLU fused) against a double reference;
 * error paths.
 *
 * The sum of two floats computed in double is exact, and rounding it to float gives the
 * correctly rounded FP32 sum, which is what FP32 addition returns: results must match
 * exactly (tolerance 0). The backward (da = db = dy) is two copies made by the graph executor;
 * there is no library function to check against finite differences.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "testutil.h"

static void check_size(int ndim, const int64_t *shape, uint64_t seed) {
    size_t n = (size_t)mpx_shape_numel(ndim, shape);
    float *a = malloc(n * 4), *b = malloc(n * 4), *y = malloc(n * 4);
    mpx_test_normal(a, n, 0, 100, seed);
    mpx_test_normal(b, n, 0, 1e-3f, seed + 1); /* very different magnitudes: rounding matters */
    for (size_t i = 0; i < n; i++) y[i] = NAN;
    mpx_tensor ta = {MPX_F32, MPX_DEV_CPU, ndim, {0}, a};
    memcpy(ta.shape, shape, ndim * sizeof(int64_t));
    mpx_tensor tb = ta, ty = ta;
    tb.data = b, ty.data = y;
    CHECK_OK(mpx_add_forward_cpu(&ta, &tb, &ty));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += y[i] != (float)((double)a[i] + (double)b[i]);
    CHECK(bad == 0, "add: %zu of %zu sums differ from the correctly rounded sum", bad, n);
    /* In place (y aliasing a), as residual connections may use it. */
    CHECK_OK(mpx_add_forward_cpu(&ta, &tb, &ta));
    CHECK(!memcmp(a, y, n * 4), "add in place differs");
    /* With the ReLU fused: relu.c's select on the same rounded sum, bit for bit (a NaN passes,
     * so does -0 + -0 = -0, and an exact cancellation's +0 stays +0). */
    mpx_test_normal(a, n, 0, 100, seed + 2);
    a[0] = NAN;
    if (n > 2) b[1] = -a[1], a[2] = -0.0f, b[2] = -0.0f;
    CHECK_OK(mpx_add_relu_forward_cpu(&ta, &tb, &ty));
    size_t zeroed = 0;
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float s = (float)((double)a[i] + (double)b[i]), want = s < 0.0f ? 0.0f : s;
        bad += memcmp(&y[i], &want, 4) != 0;
        zeroed += y[i] == 0.0f;
    }
    CHECK(bad == 0, "add+relu: %zu of %zu results differ from relu of the rounded sum", bad, n);
    CHECK(zeroed > n / 4 && isnan(y[0]), "add+relu: %zu of %zu zeroed, NaN %s", zeroed, n,
          isnan(y[0]) ? "kept" : "lost");
    free(a), free(b), free(y);
}

static void check_errors(void) {
    static float a[24], b[24], y[24];
    mpx_tensor ta = {MPX_F32, MPX_DEV_CPU, 3, {2, 3, 4}, a}, tb = ta, ty = ta;
    tb.data = b, ty.data = y;
    mpx_tensor t = tb;
    t.ndim = 2, t.shape[0] = 6, t.shape[1] = 4; /* same count, another shape */
    mpx_status s = mpx_add_forward_cpu(&ta, &t, &ty);
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), "b has shape [6,4]"),
          "add shape mismatch: %s", mpx_error_message());
    s = mpx_add_relu_forward_cpu(&ta, &t, &ty);
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), "add+relu forward: b has shape [6,4]"),
          "add+relu shape mismatch: %s", mpx_error_message());
    t = ty;
    t.shape[2] = 3;
    s = mpx_add_forward_cpu(&ta, &tb, &t);
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), "y has shape [2,3,3]"),
          "add y mismatch: %s", mpx_error_message());
    t = tb;
    t.dtype = MPX_I32;
    s = mpx_add_forward_cpu(&ta, &t, &ty);
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), "b has dtype i32"), "add i32: %s",
          mpx_error_message());
    t = ta;
    t.device = MPX_DEV_CUDA;
    s = mpx_add_forward_cpu(&t, &tb, &ty);
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), "a is not a CPU tensor"),
          "add cuda tensor: %s", mpx_error_message());
}

int main(void) {
    static const int64_t s1[] = {5}, s2[] = {2, 3, 7}, s3[] = {8, 32, 32, 16};
    check_size(1, s1, 1);
    check_size(3, s2, 2);
    check_size(4, s3, 3); /* the OpenMP path */
    check_errors();
    return mpx_test_done(__FILE__);
}
