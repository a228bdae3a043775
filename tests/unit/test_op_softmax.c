/* test_op_softmax.c — attention softmax (scale, key mask) forward against a double reference,
 * backward against central finite differences in double; I32 and F32 masks, fully masked rows,
 * huge logits, determinism across thread counts, and the error paths.
 *
 * FP32 tolerances, u = 2^-24, per row with z = scale * x over the kept keys, m = max z and
 * R_j = |z_j| + |m|:
 *  - y_j: z_j and z_j - m rounded (absolute 2u R_j in the exponent, i.e. relative in exp),
 *    expf (<= 1 ulp = 2u), the double normaliser (relative <= max_k of its terms' errors),
 *    1/sum and the product (u each): |err y_j| <= eps_j y_j,
 *    eps_j = u (8 + 2 R_j + 2 max_k R_k). Masked keys and fully masked rows: exactly 0.
 *  - dx_j = scale y_j (dy_j - S), S = sum_k dy_k y_k, from the op's own y: its error
 *    (eps_j y_j in y_j, sum_k eps_k y_k |dy_k| in S) plus the op's roundings (S rounded,
 *    subtraction, two products: 3u |dy_j - S| + 2u |S|):
 *    |err| <= |scale| y_j (eps_j (|dy_j| + A) + sum_k eps_k y_k |dy_k| + u (3 |dy_j| + 5 A)),
 *    A = sum_k y_k |dy_k| >= |S|.
 * Finite differences: per row (a row's x affects only its y), central step h = 1e-4 / |scale|.
 * The third derivative of sum_k r_k y_k in x_j is bounded by scale^3 y_j (|r_j| + sum_k y_k
 * |r_k|) <= 2 scale^3 y_j max|r| (derivatives of softmax), so truncation h^2 |f'''| / 6 is
 * added with a factor 2 for f''' elsewhere in [x - h, x + h], and rounding 4 T_k 2^-53
 * sum |r y| / h as well. Masked keys do not enter the reference: their FD gradient is exactly 0.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "mpx/rng.h"
#include "mpx/runtime.h"
#include "testutil.h"

static const double U = 1.0 / 16777216.0;
static const double E53 = 1.0 / 9007199254740992.0;

static float *fbuf(int64_t n) { return malloc((size_t)n * sizeof(float)); }

/* One row of the double reference; keep[j] = 0 masks key j. Fully masked: zeros. */
static void ref_row(const double *x, const int *keep, int64_t tk, double scale, double *y) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < tk; j++)
        if (keep[j]) mx = fmax(mx, scale * x[j]);
    for (int64_t j = 0; j < tk; j++) {
        y[j] = keep[j] && mx > -INFINITY ? exp(scale * x[j] - mx) : 0;
        s += y[j];
    }
    for (int64_t j = 0; j < tk; j++) y[j] = s > 0 ? y[j] / s : 0;
}

static double row_obj(const double *x, const int *keep, const double *r, int64_t tk, double scale,
                      double *y, double *abs_sum) {
    ref_row(x, keep, tk, scale, y);
    double s = 0, a = 0;
    for (int64_t j = 0; j < tk; j++) s += r[j] * y[j], a += fabs(r[j] * y[j]);
    *abs_sum = a;
    return s;
}

static void upd(double *worst, double e) {
    if (!(e <= *worst)) *worst = e;
}

typedef enum { NO_MASK = 0, MASK_I32, MASK_F32 } mask_kind;

/* shape: x's shape (4-d when masked); mask rows keep 3 in 4 keys at random, except that with
 * `full_row` batch 0 masks every key, and with B > 2 the last batch keeps a single key. */
static void check_case(int ndim, const int64_t *shape, float scale, float spread, mask_kind mk,
                       int full_row, uint64_t seed) {
    int64_t n = mpx_shape_numel(ndim, shape), tk = shape[ndim - 1], rows = n / tk;
    char tag[112], sb[64];
    snprintf(tag, sizeof tag, "x %s scale %g spread %g mask %s",
             mpx_shape_str(ndim, shape, sb, sizeof sb), scale, spread,
             mk == NO_MASK    ? "none"
             : mk == MASK_I32 ? "i32"
                              : "f32");
    float *x = fbuf(n), *y = fbuf(n), *r = fbuf(n), *dx = fbuf(n);
    mpx_test_normal(x, n, 0.0f, spread, seed);
    mpx_test_uniform(r, n, -1, 1, seed + 1);
    int64_t bsz = mk ? shape[0] : 1, per_mask = mk ? shape[1] * shape[2] : rows;
    int *keep = malloc((size_t)(bsz * tk) * sizeof(int));
    int32_t *mi = malloc((size_t)(bsz * tk) * sizeof(int32_t));
    float *mf = fbuf(bsz * tk);
    mpx_rng rng = mpx_rng_make(seed + 2, MPX_RNG_TEST, 0);
    for (int64_t i = 0; i < bsz * tk; i++) {
        keep[i] = !mk || mpx_rng_below(&rng, 4) != 0; /* 3 in 4 keys kept */
        if (mk && full_row && i < tk) keep[i] = 0;
        if (mk && bsz > 2 && i >= (bsz - 1) * tk) keep[i] = i == (bsz - 1) * tk + tk / 2;
        mi[i] = keep[i], mf[i] = (float)keep[i];
    }
    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, ndim, {0}, x};
    memcpy(tx.shape, shape, ndim * sizeof(int64_t));
    mpx_tensor ty = tx, tr = tx, tdx = tx;
    ty.data = y, tr.data = r, tdx.data = dx;
    mpx_tensor tm = {mk == MASK_F32 ? MPX_F32 : MPX_I32,
                     MPX_DEV_CPU,
                     2,
                     {bsz, tk},
                     mk == MASK_F32 ? (void *)mf : (void *)mi};
    const mpx_tensor *mask = mk ? &tm : NULL;

    for (int64_t i = 0; i < n; i++) y[i] = dx[i] = NAN;
    CHECK_OK(mpx_softmax_forward_cpu(scale, &tx, mask, &ty));
    CHECK_OK(mpx_softmax_backward_cpu(scale, &tr, &ty, &tdx));

    double *xd = malloc((size_t)tk * 8), *rd = malloc((size_t)tk * 8), *yd = malloc((size_t)tk * 8);
    double *eps = malloc((size_t)tk * 8), *tmp = malloc((size_t)tk * 8);
    double wy = 0, wdx = 0, sc = fabs((double)scale), h = 1e-4 / sc;
    int exact_zero = 1;
    for (int64_t q = 0; q < rows; q++) {
        const int *kr = keep + (q / per_mask) * tk;
        const float *xr = x + q * tk, *rr = r + q * tk, *yr = y + q * tk, *dr = dx + q * tk;
        double m = -INFINITY, maxr = 0, A = 0, B = 0, maxR = 0;
        for (int64_t j = 0; j < tk; j++) {
            xd[j] = xr[j], rd[j] = rr[j];
            if (kr[j]) m = fmax(m, (double)scale * xd[j]);
            maxr = fmax(maxr, fabs(rd[j]));
        }
        for (int64_t j = 0; j < tk; j++)
            if (kr[j]) maxR = fmax(maxR, fabs(scale * xd[j]) + fabs(m));
        ref_row(xd, kr, tk, scale, yd);
        for (int64_t j = 0; j < tk; j++) {
            eps[j] = U * (8 + 2 * (fabs(scale * xd[j]) + fabs(m)) + 2 * maxR);
            if (!kr[j]) {
                exact_zero &= yr[j] == 0.0f && dr[j] == 0.0f;
                continue;
            }
            upd(&wy, fabs(yr[j] - yd[j]) / (eps[j] * yd[j] + 1e-300));
            A += yd[j] * fabs(rd[j]);
            B += eps[j] * yd[j] * fabs(rd[j]);
        }
        for (int64_t j = 0; j < tk; j++) {
            if (!kr[j]) continue;
            double save = xd[j], a1, a2;
            xd[j] = save + h;
            double fp = row_obj(xd, kr, rd, tk, scale, tmp, &a1);
            xd[j] = save - h;
            double fm = row_obj(xd, kr, rd, tk, scale, tmp, &a2);
            xd[j] = save;
            double fd = (fp - fm) / (2 * h);
            double fd_err = 2 * h * h / 6 * sc * sc * sc * 2 * yd[j] * maxr +
                            4 * (double)tk * E53 * (a1 + a2) / (2 * h);
            double tol =
                sc * yd[j] * (eps[j] * (fabs(rd[j]) + A) + B + U * (3 * fabs(rd[j]) + 5 * A)) +
                fd_err;
            upd(&wdx, fabs(dr[j] - fd) / (tol + 1e-300));
        }
    }
    CHECK(wy <= 1, "%s: forward error %.3g x tolerance", tag, wy);
    CHECK(wdx <= 1, "%s: dx vs finite differences %.3g x tolerance", tag, wdx);
    CHECK(exact_zero, "%s: masked keys (or fully masked rows) are not exactly 0 in y and dx", tag);

    float *y1 = fbuf(n), *dx1 = fbuf(n);
    mpx_tensor ty1 = ty, tdx1 = tdx;
    ty1.data = y1, tdx1.data = dx1;
    mpx_threads_set(1);
    CHECK_OK(mpx_softmax_forward_cpu(scale, &tx, mask, &ty1));
    CHECK_OK(mpx_softmax_backward_cpu(scale, &tr, &ty1, &tdx1));
    mpx_threads_set(2);
    CHECK(!memcmp(y1, y, (size_t)n * 4) && !memcmp(dx1, dx, (size_t)n * 4),
          "%s: results differ between 1 and 2 threads", tag);
    free(x), free(y), free(r), free(dx), free(keep), free(mi), free(mf), free(xd), free(rd);
    free(yd), free(eps), free(tmp), free(y1), free(dx1);
}

/* Logits of 1e4 (exp would overflow without the max subtraction); a single kept key gives
 * exactly 1; a fully masked row is zeros, also in backward, never NaN. */
static void check_special(void) {
    float x[8] = {1e4f, 1e4f - 1, -1e4f, 0, 3, 1, 2, 5}, y[8], d[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float dx[8];
    int32_t mk[4] = {0, 0, 0, 0}, m1[4] = {0, 0, 1, 0};
    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, 4, {2, 1, 1, 4}, x}, ty = tx, td = tx, tdx = tx;
    ty.data = y, td.data = d, tdx.data = dx;
    CHECK_OK(mpx_softmax_forward_cpu(1.0f, &tx, NULL, &ty));
    double e1 = 1 / (1 + exp(-1.0));
    CHECK(fabs(y[0] - e1) <= 4 * U && fabs(y[1] - (1 - e1)) <= 4 * U && y[2] == 0 && y[3] == 0,
          "logits 1e4: y = %g %g %g %g, expected %g %g 0 0", y[0], y[1], y[2], y[3], e1, 1 - e1);
    mpx_tensor tm = {MPX_I32, MPX_DEV_CPU, 2, {2, 4}, NULL};
    int32_t both[8];
    memcpy(both, mk, sizeof mk), memcpy(both + 4, m1, sizeof m1);
    tm.data = both;
    CHECK_OK(mpx_softmax_forward_cpu(0.5f, &tx, &tm, &ty));
    CHECK_OK(mpx_softmax_backward_cpu(0.5f, &td, &ty, &tdx));
    int ok = 1;
    for (int j = 0; j < 4; j++) ok &= y[j] == 0.0f && dx[j] == 0.0f;
    CHECK(ok, "fully masked row: y %g %g %g %g dx %g %g %g %g, expected zeros", y[0], y[1], y[2],
          y[3], dx[0], dx[1], dx[2], dx[3]);
    CHECK(y[4] == 0 && y[5] == 0 && y[6] == 1.0f && y[7] == 0 && dx[6] == 0.0f,
          "single kept key: y %g %g %g %g dx[2] %g, expected 0 0 1 0 and 0", y[4], y[5], y[6], y[7],
          dx[6]);
}

static void expect_input_error(mpx_status s, const char *needle, const char *what) {
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), needle),
          "%s: expected MPX_ERR_INPUT mentioning '%s', got %s: %s", what, needle,
          mpx_status_name(s), mpx_error_message());
}

static void check_errors(void) {
    static float xb[2 * 2 * 3 * 5], yb[2 * 2 * 3 * 5], mfb[2 * 5];
    static int32_t mib[2 * 5] = {1, 1, 1, 1, 1, 1, 0, 1, 0, 1};
    static uint8_t mub[2 * 5];
    mpx_tensor x = {MPX_F32, MPX_DEV_CPU, 4, {2, 2, 3, 5}, xb}, y = x;
    y.data = yb;
    mpx_tensor mi = {MPX_I32, MPX_DEV_CPU, 2, {2, 5}, mib}, mf = mi, mu = mi;
    mf.dtype = MPX_F32, mf.data = mfb;
    mu.dtype = MPX_U8, mu.data = mub;
    for (int i = 0; i < 10; i++) mfb[i] = 1;
    CHECK_OK(mpx_softmax_forward_cpu(0.5f, &x, &mi, &y));
    CHECK_OK(mpx_softmax_forward_cpu(0.5f, &x, &mf, &y));
    mib[7] = 2;
    expect_input_error(mpx_softmax_forward_cpu(0.5f, &x, &mi, &y), "mask[1, 2] = 2",
                       "i32 mask value 2");
    mib[7] = 1;
    mfb[3] = -10000.0f;
    expect_input_error(mpx_softmax_forward_cpu(0.5f, &x, &mf, &y), "mask[0, 3] = -10000",
                       "additive f32 mask");
    expect_input_error(mpx_softmax_forward_cpu(0.5f, &x, &mu, &y), "mask has dtype u8", "u8 mask");
    mpx_tensor t = mi;
    t.shape[1] = 4;
    expect_input_error(mpx_softmax_forward_cpu(0.5f, &x, &t, &y),
                       "mask has shape [2,4], dim 1 must be 5", "mask of another T_k");
    t = mi;
    t.shape[0] = 1, t.shape[1] = 10;
    expect_input_error(mpx_softmax_forward_cpu(0.5f, &x, &t, &y),
                       "mask has shape [1,10], dim 0 must be 2", "mask of another B");
    t = x;
    t.ndim = 3, t.shape[0] = 4, t.shape[1] = 3, t.shape[2] = 5;
    mpx_tensor t2 = t;
    t2.data = yb;
    expect_input_error(mpx_softmax_forward_cpu(0.5f, &t, &mi, &t2), "x must be [B, H, T_q, T_k]",
                       "3-d x with a mask");
    CHECK_OK(mpx_softmax_forward_cpu(0.5f, &t, NULL, &t2));
    expect_input_error(mpx_softmax_forward_cpu(INFINITY, &x, NULL, &y), "scale inf",
                       "infinite scale");
    expect_input_error(mpx_softmax_backward_cpu(NAN, &y, &y, &x), "scale nan", "NaN scale");
    expect_input_error(mpx_softmax_forward_cpu(0.5f, &x, NULL, &t2), "y has shape [4,3,5]",
                       "y of another shape");
    expect_input_error(mpx_softmax_backward_cpu(0.5f, &y, &x, &t2), "dx has shape [4,3,5]",
                       "dx of another shape");
    expect_input_error(mpx_softmax_backward_cpu(0.5f, &t2, &y, &x), "dy has shape [4,3,5]",
                       "dy of another shape");
}

int main(void) {
    mpx_threads_set(2);
    static const int64_t s1[] = {7}, s2[] = {3, 5}, s3[] = {2, 3, 4, 9}, s4[] = {3, 2, 5, 11},
                         s5[] = {3, 4, 64, 64};
    check_case(1, s1, 1.0f, 1, NO_MASK, 0, 10);
    check_case(2, s2, -0.7f, 2, NO_MASK, 0, 20); /* negative scale: max of scale * x */
    check_case(4, s3, 0.125f, 8, NO_MASK, 0, 30);
    check_case(4, s3, 0.125f, 8, MASK_I32, 0, 40);
    check_case(4, s4, 1.0f, 3, MASK_F32, 1, 50);
    check_case(4, s4, 0.5f, 1, MASK_I32, 0, 60);
    /* 49152 elements: the OpenMP path, attention-sized rows */
    check_case(4, s5, 0.125f, 10, MASK_F32, 1, 70);
    check_special();
    check_errors();
    return mpx_test_done(__FILE__);
}
