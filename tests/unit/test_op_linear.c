/* test_op_linear.c — linear forward/backward (every GEMM implementation) against a double
 * reference and central finite differences in double; error paths.
 *
 * Finite differences: f(x, w, b) = sum(r * (x @ w + b)) is linear in each argument, so the
 * central difference (step 0.5, exact in binary) has no truncation error.
 * Tolerance for every FP32 result: the dot-product bound gamma_R * S, gamma_R = R u / (1 - R u),
 * u = 2^-24, R the number of terms (forward IN + 1 with the bias, dx OUT, dw and db M rows),
 * S the same sums over absolute values (double references run on |x|, |w|, |b|, |r|).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "testutil.h"

/* The CPU operators' context the ops under test run on (made in main). */
static mpx_cpu_ctx *ctx;

static const double U = 1.0 / 16777216.0;

/* y[M,OUT] = x[M,IN] @ w[IN,OUT] + b */
static void ref_forward(const double *x, const double *w, const double *b, int m, int in,
                        int out, double *y) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < out; j++) {
            double s = b ? b[j] : 0;
            for (int p = 0; p < in; p++) s += x[i * in + p] * w[p * out + j];
            y[i * out + j] = s;
        }
}

typedef struct {
    double *x, *w, *b, *r, *y;
    int m, in, out;
} fd_ctx;

static double objective(fd_ctx *f) {
    ref_forward(f->x, f->w, f->b, f->m, f->in, f->out, f->y);
    double s = 0;
    for (int i = 0; i < f->m * f->out; i++) s += f->r[i] * f->y[i];
    return s;
}

static void fd_grad(fd_ctx *f, double *v, int n, double *grad) {
    const double h = 0.5;
    for (int i = 0; i < n; i++) {
        double save = v[i];
        v[i] = save + h;
        double fp = objective(f);
        v[i] = save - h;
        double fm = objective(f);
        v[i] = save;
        grad[i] = (fp - fm) / (2 * h);
    }
}

/* Gradients over |.| inputs: the S of each gradient's bound. */
static void abs_grads(const double *ax, const double *aw, const double *ar, int m, int in,
                      int out, double *sdx, double *sdw, double *sdb) {
    for (int i = 0; i < m; i++)
        for (int p = 0; p < in; p++) {
            double s = 0;
            for (int j = 0; j < out; j++) s += ar[i * out + j] * aw[p * out + j];
            sdx[i * in + p] = s;
        }
    for (int p = 0; p < in; p++)
        for (int j = 0; j < out; j++) {
            double s = 0;
            for (int i = 0; i < m; i++) s += ax[i * in + p] * ar[i * out + j];
            sdw[p * out + j] = s;
        }
    for (int j = 0; j < out; j++) {
        double s = 0;
        for (int i = 0; i < m; i++) s += ar[i * out + j];
        sdb[j] = s;
    }
}

static double ratio(const float *got, const double *ref, const double *s, int n, int terms) {
    double gam = terms * U / (1 - terms * U), worst = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs(got[i] - ref[i]) / (gam * s[i] + 1e-30);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

static void fill_nan(float *p, int n) {
    for (int i = 0; i < n; i++) p[i] = NAN;
}

/* x has shape lead[0..nlead) x IN; fd: also finite differences (small sizes). */
static void check_shape(int nlead, const int64_t *lead, int in, int out, int fd, uint64_t seed) {
    int m = (int)mpx_shape_numel(nlead, lead);
    int nxe = m * in, nwe = in * out, nye = m * out;
    float *xf = malloc(nxe * 4), *wf = malloc(nwe * 4), *bf = malloc(out * 4), *rf = malloc(nye * 4);
    float *yf = malloc(nye * 4), *dxf = malloc(nxe * 4), *dwf = malloc(nwe * 4), *dbf = malloc(out * 4);
    mpx_test_uniform(xf, nxe, -1, 1, seed);
    mpx_test_uniform(wf, nwe, -1, 1, seed + 1);
    mpx_test_uniform(bf, out, -1, 1, seed + 2);
    mpx_test_uniform(rf, nye, -1, 1, seed + 3);
    double *x = malloc(nxe * 8), *w = malloc(nwe * 8), *b = malloc(out * 8), *r = malloc(nye * 8);
    double *ax = malloc(nxe * 8), *aw = malloc(nwe * 8), *ab = malloc(out * 8), *ar = malloc(nye * 8);
    for (int i = 0; i < nxe; i++) x[i] = xf[i], ax[i] = fabs(x[i]);
    for (int i = 0; i < nwe; i++) w[i] = wf[i], aw[i] = fabs(w[i]);
    for (int i = 0; i < out; i++) b[i] = bf[i], ab[i] = fabs(b[i]);
    for (int i = 0; i < nye; i++) r[i] = rf[i], ar[i] = fabs(r[i]);
    double *y = malloc(nye * 8), *y0 = malloc(nye * 8), *sy = malloc(nye * 8);
    double *gx = malloc(nxe * 8), *gw = malloc(nwe * 8), *gb = malloc(out * 8);
    double *sdx = malloc(nxe * 8), *sdw = malloc(nwe * 8), *sdb = malloc(out * 8);
    ref_forward(x, w, b, m, in, out, y);
    ref_forward(x, w, NULL, m, in, out, y0);
    ref_forward(ax, aw, ab, m, in, out, sy);
    abs_grads(ax, aw, ar, m, in, out, sdx, sdw, sdb);
    if (fd) {
        fd_ctx f = {x, w, b, r, malloc(nye * 8), m, in, out};
        fd_grad(&f, x, nxe, gx);
        fd_grad(&f, w, nwe, gw);
        fd_grad(&f, b, out, gb);
        free(f.y);
    } else { /* analytic gradients, the formulas the FD cases confirm */
        for (int i = 0; i < m; i++)
            for (int p = 0; p < in; p++) {
                double s = 0;
                for (int j = 0; j < out; j++) s += r[i * out + j] * w[p * out + j];
                gx[i * in + p] = s;
            }
        for (int p = 0; p < in; p++)
            for (int j = 0; j < out; j++) {
                double s = 0;
                for (int i = 0; i < m; i++) s += x[i * in + p] * r[i * out + j];
                gw[p * out + j] = s;
            }
        for (int j = 0; j < out; j++) {
            double s = 0;
            for (int i = 0; i < m; i++) s += r[i * out + j];
            gb[j] = s;
        }
    }

    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, nlead + 1, {0}, xf};
    memcpy(tx.shape, lead, nlead * sizeof(int64_t));
    tx.shape[nlead] = in;
    mpx_tensor ty = tx, tr = tx, tdx = tx;
    ty.shape[nlead] = tr.shape[nlead] = out;
    ty.data = yf, tr.data = rf, tdx.data = dxf;
    mpx_tensor tw = {MPX_F32, MPX_DEV_CPU, 2, {in, out}, wf}, tdw = tw;
    mpx_tensor tb = {MPX_F32, MPX_DEV_CPU, 1, {out}, bf}, tdb = tb;
    tdw.data = dwf, tdb.data = dbf;
    char tag[96];
    snprintf(tag, sizeof tag, "x[M=%d,%d] w[%d,%d]", m, in, in, out);
    static const char *names[] = {"auto", "openblas", "onednn"};
    for (int impl = MPX_GEMM_AUTO; impl <= MPX_GEMM_ONEDNN; impl++) {
        mpx_sgemm_force(ctx, (mpx_gemm_impl)impl);
        fill_nan(yf, nye);
        CHECK_OK(mpx_linear_forward_cpu(ctx, &tx, &tw, &tb, &ty));
        double e = ratio(yf, y, sy, nye, in + 1);
        CHECK(e <= 1, "%s %s: forward %.3g x bound", names[impl], tag, e);
        fill_nan(yf, nye);
        CHECK_OK(mpx_linear_forward_cpu(ctx, &tx, &tw, NULL, &ty));
        e = ratio(yf, y0, sy, nye, in + 1);
        CHECK(e <= 1, "%s %s: forward without bias %.3g x bound", names[impl], tag, e);
        fill_nan(dxf, nxe);
        CHECK_OK(mpx_linear_backward_data_cpu(ctx, &tr, &tw, &tdx));
        e = ratio(dxf, gx, sdx, nxe, out);
        CHECK(e <= 1, "%s %s: dx %.3g x bound", names[impl], tag, e);
        fill_nan(dwf, nwe), fill_nan(dbf, out);
        CHECK_OK(mpx_linear_backward_weights_cpu(ctx, &tr, &tx, &tdw, &tdb));
        e = ratio(dwf, gw, sdw, nwe, m);
        CHECK(e <= 1, "%s %s: dw %.3g x bound", names[impl], tag, e);
        e = ratio(dbf, gb, sdb, out, m);
        CHECK(e <= 1, "%s %s: db %.3g x bound", names[impl], tag, e);
        fill_nan(dwf, nwe);
        CHECK_OK(mpx_linear_backward_weights_cpu(ctx, &tr, &tx, &tdw, NULL));
        e = ratio(dwf, gw, sdw, nwe, m);
        CHECK(e <= 1, "%s %s: dw without db %.3g x bound", names[impl], tag, e);
    }
    mpx_sgemm_force(ctx, MPX_GEMM_AUTO);
    free(xf), free(wf), free(bf), free(rf), free(yf), free(dxf), free(dwf), free(dbf);
    free(x), free(w), free(b), free(r), free(ax), free(aw), free(ab), free(ar);
    free(y), free(y0), free(sy), free(gx), free(gw), free(gb), free(sdx), free(sdw), free(sdb);
}

static void expect_input_error(mpx_status s, const char *needle, const char *what) {
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), needle),
          "%s: expected MPX_ERR_INPUT mentioning '%s', got %s: %s", what, needle,
          mpx_status_name(s), mpx_error_message());
}

static void check_errors(void) {
    static float xb[2 * 3 * 4], wb[4 * 5], bb[5], yb[2 * 3 * 5];
    mpx_tensor x = {MPX_F32, MPX_DEV_CPU, 3, {2, 3, 4}, xb};
    mpx_tensor w = {MPX_F32, MPX_DEV_CPU, 2, {4, 5}, wb};
    mpx_tensor b = {MPX_F32, MPX_DEV_CPU, 1, {5}, bb};
    mpx_tensor y = {MPX_F32, MPX_DEV_CPU, 3, {2, 3, 5}, yb};
    CHECK_OK(mpx_linear_forward_cpu(ctx, &x, &w, &b, &y));
    mpx_tensor t = w;
    t.shape[0] = 3, t.shape[1] = 5;
    expect_input_error(mpx_linear_forward_cpu(ctx, &x, &t, &b, &y), "x has shape [2,3,4]",
                       "IN mismatch");
    t = y;
    t.shape[1] = 2;
    expect_input_error(mpx_linear_forward_cpu(ctx, &x, &w, &b, &t), "y has shape [2,2,5]",
                       "leading dims mismatch");
    t = y;
    t.shape[2] = 6;
    expect_input_error(mpx_linear_backward_data_cpu(ctx, &t, &w, &x), "dy has shape [2,3,6]",
                       "dy OUT mismatch");
    t = b;
    t.shape[0] = 4;
    expect_input_error(mpx_linear_backward_weights_cpu(ctx, &y, &x, &w, &t), "db has shape [4]",
                       "db mismatch");
    t = w;
    t.dtype = MPX_I32; /* (16-bit floats are taken: the native path's test covers them) */
    expect_input_error(mpx_linear_forward_cpu(ctx, &x, &t, &b, &y), "w has dtype i32", "i32 w");
    t = x;
    t.ndim = 2, t.shape[0] = 6, t.shape[1] = 4;
    expect_input_error(mpx_linear_forward_cpu(ctx, &t, &w, &b, &y), "y has 3 dims, expected 2",
                       "y with another rank than x");
    t = w;
    t.ndim = 3;
    t.shape[2] = 1;
    expect_input_error(mpx_linear_backward_weights_cpu(ctx, &y, &x, &t, NULL), "dw has 3 dims",
                       "3-d dw");
}

int main(void) {
    ctx = mpx_cpu_ctx_create();
    if (!ctx) {
        fprintf(stderr, "FAIL: %s\n", mpx_error_message());
        return 1;
    }
    static const int64_t l1[] = {3, 5}, l2[] = {4}, l3[] = {1}, l4[] = {2, 64};
    check_shape(2, l1, 7, 11, 1, 10);  /* [B,T,C] with flattened leading dims */
    check_shape(1, l2, 16, 3, 1, 20);
    check_shape(1, l3, 5, 1, 1, 30);   /* single row, single output */
    check_shape(2, l4, 96, 130, 0, 40); /* larger: analytic gradients instead of FD */
    check_errors();
    return mpx_test_done(__FILE__);
}
