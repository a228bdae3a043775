/* test_op_pool.c — max-pool 2D and global average pool against double references and central
 * finite differences; tie-breaking, NaN and padding semantics; error paths.
 *
 * Max-pool forward selects a value, so it must equal the reference exactly. Its backward sums
 * at most n = ceil(kernel/stride)^2 window contributions per input in FP32: tolerance
 * gamma_n * sum |r| <= n^2 u max|r| with u = 2^-24 (|r| <= 1). Finite differences: f(x) =
 * sum(r * maxpool(x)) in double on inputs whose values are distinct multiples of 1/64, with
 * step h = 1e-3 (no two values within 2h: the argmax never changes, f is linear there, and
 * the central difference is exact up to ~1e-13).
 * Global average pool: forward is a double sum rounded once (tolerance 2u |y|); its backward
 * dy / (H*W) is one correctly rounded division (u |dx|); FD (step 0.5, linear) is exact.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "mpx/rng.h"
#include "mpx/runtime.h"
#include "testutil.h"

static const double U = 1.0 / 16777216.0;

typedef struct {
    int n, h, w, c;
    mpx_pool2d_attr a;
    int fd; /* check against finite differences (else against ref_maxpool_backward only) */
} pgeom;

static int p_out(int size, const mpx_pool2d_attr *a) {
    return (size + 2 * a->pad - a->kernel) / a->stride + 1;
}

/* Double max-pool: padded cells skipped; the first maximum in row-major order. */
static void ref_maxpool(const pgeom *g, const double *x, double *y) {
    int oh = p_out(g->h, &g->a), ow = p_out(g->w, &g->a);
    for (int n = 0; n < g->n; n++)
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++)
                for (int c = 0; c < g->c; c++) {
                    double m = -INFINITY;
                    for (int ky = 0; ky < g->a.kernel; ky++)
                        for (int kx = 0; kx < g->a.kernel; kx++) {
                            int iy = oy * g->a.stride - g->a.pad + ky;
                            int ix = ox * g->a.stride - g->a.pad + kx;
                            if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) continue;
                            double v = x[(((size_t)n * g->h + iy) * g->w + ix) * g->c + c];
                            if (v > m) m = v;
                        }
                    y[(((size_t)n * oh + oy) * ow + ox) * g->c + c] = m;
                }
}

/* Double max-pool backward: dy of each window to its first maximum in row-major order. */
static void ref_maxpool_backward(const pgeom *g, const double *x, const double *dy, double *dx) {
    int oh = p_out(g->h, &g->a), ow = p_out(g->w, &g->a);
    memset(dx, 0, sizeof(double) * g->n * g->h * g->w * g->c);
    for (int n = 0; n < g->n; n++)
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++)
                for (int c = 0; c < g->c; c++) {
                    double m = -INFINITY;
                    size_t at = 0;
                    for (int ky = 0; ky < g->a.kernel; ky++)
                        for (int kx = 0; kx < g->a.kernel; kx++) {
                            int iy = oy * g->a.stride - g->a.pad + ky;
                            int ix = ox * g->a.stride - g->a.pad + kx;
                            if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w) continue;
                            size_t i = (((size_t)n * g->h + iy) * g->w + ix) * g->c + c;
                            if (x[i] > m) m = x[i], at = i;
                        }
                    dx[at] += dy[(((size_t)n * oh + oy) * ow + ox) * g->c + c];
                }
}

static double objective(const pgeom *g, const double *x, const double *r, double *y) {
    ref_maxpool(g, x, y);
    size_t ny = (size_t)g->n * p_out(g->h, &g->a) * p_out(g->w, &g->a) * g->c;
    double s = 0;
    for (size_t i = 0; i < ny; i++) s += r[i] * y[i];
    return s;
}

static void check_maxpool(const pgeom *g, uint64_t seed) {
    int oh = p_out(g->h, &g->a), ow = p_out(g->w, &g->a);
    size_t nx = (size_t)g->n * g->h * g->w * g->c, ny = (size_t)g->n * oh * ow * g->c;
    float *x = malloc(nx * sizeof(float)), *y = malloc(ny * sizeof(float));
    float *r = malloc(ny * sizeof(float)), *dx = malloc(nx * sizeof(float));
    double *xd = malloc(nx * sizeof(double)), *rd = malloc(ny * sizeof(double));
    double *yd = malloc(ny * sizeof(double));
    /* Distinct values: a shuffled ramp of multiples of 1/64 (exact in FP32), centred on 0. */
    for (size_t i = 0; i < nx; i++) x[i] = (float)((double)i - nx / 2) / 64.0f;
    mpx_rng rng = mpx_rng_make(seed, MPX_RNG_TEST, 0);
    for (size_t i = nx - 1; i > 0; i--) {
        size_t j = mpx_rng_below(&rng, (uint32_t)(i + 1));
        float t = x[i];
        x[i] = x[j], x[j] = t;
    }
    mpx_test_uniform(r, ny, -1, 1, seed + 1);
    for (size_t i = 0; i < nx; i++) xd[i] = x[i];
    for (size_t i = 0; i < ny; i++) rd[i] = r[i];

    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, 4, {g->n, g->h, g->w, g->c}, x}, tdx = tx;
    mpx_tensor ty = {MPX_F32, MPX_DEV_CPU, 4, {g->n, oh, ow, g->c}, y}, tr = ty;
    tdx.data = dx, tr.data = r;
    for (size_t i = 0; i < ny; i++) y[i] = NAN;
    for (size_t i = 0; i < nx; i++) dx[i] = NAN;
    CHECK_OK(mpx_maxpool2d_forward_cpu(&g->a, &tx, &ty));
    CHECK_OK(mpx_maxpool2d_backward_cpu(&g->a, &tr, &tx, &ty, &tdx));
    ref_maxpool(g, xd, yd);
    size_t bad = 0;
    for (size_t i = 0; i < ny; i++) bad += y[i] != yd[i];
    char tag[96];
    snprintf(tag, sizeof tag, "x[%d,%d,%d,%d] k%d s%d p%d", g->n, g->h, g->w, g->c, g->a.kernel,
             g->a.stride, g->a.pad);
    CHECK(bad == 0, "maxpool forward %s: %zu values differ from the reference", tag, bad);

    int per = (g->a.kernel + g->a.stride - 1) / g->a.stride;
    double tol = (double)per * per * per * per * U + 1e-12;
    double *gref = malloc(nx * sizeof(double));
    ref_maxpool_backward(g, xd, rd, gref);
    double worst = 0, wfd = 0;
    const double h = 1e-3;
    for (size_t i = 0; i < nx; i++) {
        double e = fabs(dx[i] - gref[i]) / tol;
        if (!(e <= worst)) worst = e;
        if (!g->fd) continue;
        double save = xd[i];
        xd[i] = save + h;
        double fp = objective(g, xd, rd, yd);
        xd[i] = save - h;
        double fm = objective(g, xd, rd, yd);
        xd[i] = save;
        e = fabs(dx[i] - (fp - fm) / (2 * h)) / tol;
        if (!(e <= wfd)) wfd = e;
    }
    CHECK(worst <= 1, "maxpool backward %s: %.3g x tolerance vs the reference backward", tag,
          worst);
    CHECK(wfd <= 1, "maxpool backward %s: %.3g x tolerance vs finite differences", tag, wfd);
    free(gref);

    /* Same bits with 1 and 2 threads. */
    float *dx1 = malloc(nx * sizeof(float));
    mpx_tensor tdx1 = tdx;
    tdx1.data = dx1;
    mpx_threads_set(1);
    CHECK_OK(mpx_maxpool2d_backward_cpu(&g->a, &tr, &tx, &ty, &tdx1));
    mpx_threads_set(2);
    CHECK(!memcmp(dx, dx1, nx * sizeof(float)), "maxpool backward %s: 1 vs 2 threads differ",
          tag);
    free(x), free(y), free(r), free(dx), free(xd), free(rd), free(yd), free(dx1);
}

/* Ties go to the first position of the window in row-major order; NaN wins and is routed to
 * the first NaN; padded cells never win, even against negative values. */
static void check_semantics(void) {
    /* 1 image, 4x4, 1 channel, kernel 2 stride 2: four windows. */
    float x[16] = {1, 5, 5, 0,   /* window (0,0): 1 5 / 2 5 -> first 5 at (0,1) */
                   2, 5, 3, 3,   /* window (0,1): 5 0 / 3 3 -> 5 at (0,2) */
                   7, 7, NAN, 1, /* window (1,0): 7 7 / 7 6 -> first 7 at (2,0) */
                   7, 6, 4, NAN}; /* window (1,1): NaN 1 / 4 NaN -> first NaN at (2,2) */
    float y[4], dy[4] = {1, 2, 3, 4}, dx[16];
    mpx_pool2d_attr a = {2, 2, 0};
    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, 4, {1, 4, 4, 1}, x}, tdx = tx;
    mpx_tensor ty = {MPX_F32, MPX_DEV_CPU, 4, {1, 2, 2, 1}, y}, tdy = ty;
    tdx.data = dx, tdy.data = dy;
    CHECK_OK(mpx_maxpool2d_forward_cpu(&a, &tx, &ty));
    CHECK(y[0] == 5 && y[1] == 5 && y[2] == 7 && isnan(y[3]), "maxpool ties/NaN forward: %g %g %g %g",
          y[0], y[1], y[2], y[3]);
    CHECK_OK(mpx_maxpool2d_backward_cpu(&a, &tdy, &tx, &ty, &tdx));
    float want[16] = {0, 1, 2, 0, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0, 0};
    CHECK(!memcmp(dx, want, sizeof want), "maxpool ties/NaN backward routes to the first match");

    /* Overlapping windows (kernel 3, stride 1, pad 1) on all-negative input: the padding must
     * not win, and the gradient of the single maximum sums over all 9 windows covering it. */
    float xn[9] = {-9, -8, -7, -6, -1, -5, -4, -3, -2}, yn[9], dyn[9], dxn[9];
    for (int i = 0; i < 9; i++) dyn[i] = 1;
    mpx_pool2d_attr a3 = {3, 1, 1};
    mpx_tensor t3 = {MPX_F32, MPX_DEV_CPU, 4, {1, 3, 3, 1}, xn}, t3y = t3, t3dy = t3, t3dx = t3;
    t3y.data = yn, t3dy.data = dyn, t3dx.data = dxn;
    CHECK_OK(mpx_maxpool2d_forward_cpu(&a3, &t3, &t3y));
    int all_max = 1;
    for (int i = 0; i < 9; i++) all_max &= yn[i] == -1;
    CHECK(all_max, "maxpool with padding: padded cells won over negative values");
    CHECK_OK(mpx_maxpool2d_backward_cpu(&a3, &t3dy, &t3, &t3y, &t3dx));
    CHECK(dxn[4] == 9 && dxn[0] == 0, "maxpool overlapping windows: dx at the max %g (want 9)",
          dxn[4]);
}

static void check_avgpool(int n, int h, int w, int c, uint64_t seed) {
    size_t nx = (size_t)n * h * w * c, ny = (size_t)n * c;
    float *x = malloc(nx * sizeof(float)), *y = malloc(ny * sizeof(float));
    float *dy = malloc(ny * sizeof(float)), *dx = malloc(nx * sizeof(float));
    mpx_test_uniform(x, nx, -1, 3, seed);
    mpx_test_uniform(dy, ny, -1, 1, seed + 1);
    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, 4, {n, h, w, c}, x}, tdx = tx;
    mpx_tensor ty = {MPX_F32, MPX_DEV_CPU, 2, {n, c}, y}, tdy = ty;
    tdx.data = dx, tdy.data = dy;
    for (size_t i = 0; i < ny; i++) y[i] = NAN;
    for (size_t i = 0; i < nx; i++) dx[i] = NAN;
    CHECK_OK(mpx_avgpool_global_forward_cpu(&tx, &ty));
    CHECK_OK(mpx_avgpool_global_backward_cpu(&tdy, &tdx));
    double wy = 0, wdx = 0;
    for (int in = 0; in < n; in++)
        for (int j = 0; j < c; j++) {
            double s = 0;
            for (int p = 0; p < h * w; p++) s += x[((size_t)in * h * w + p) * c + j];
            double ref = s / (h * w), e = fabs(y[in * c + j] - ref) / (2 * U * fabs(ref) + 1e-30);
            if (!(e <= wy)) wy = e;
            /* f(x) = sum(dy * avgpool(x)) is linear in x, so the central difference with step
             * hs (applied to any one x of this window) is the exact derivative. */
            const double hs = 0.5;
            double g = dy[in * c + j] * ((s + hs) / (h * w) - (s - hs) / (h * w)) / (2 * hs);
            for (int p = 0; p < h * w; p++) {
                double d = dx[((size_t)in * h * w + p) * c + j];
                e = fabs(d - g) / (U * fabs(g) + 1e-15);
                if (!(e <= wdx)) wdx = e;
            }
        }
    CHECK(wy <= 1, "avgpool forward [%d,%d,%d,%d]: %.3g x tolerance", n, h, w, c, wy);
    CHECK(wdx <= 1, "avgpool backward [%d,%d,%d,%d]: %.3g x tolerance", n, h, w, c, wdx);
    free(x), free(y), free(dy), free(dx);
}

static void expect_input_error(mpx_status s, const char *needle, const char *what) {
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), needle),
          "%s: expected MPX_ERR_INPUT mentioning '%s', got %s: %s", what, needle,
          mpx_status_name(s), mpx_error_message());
}

static void check_errors(void) {
    static float xb[2 * 6 * 6 * 3], yb[2 * 3 * 3 * 3], gb[2 * 3];
    mpx_pool2d_attr a = {3, 2, 1};
    mpx_tensor x = {MPX_F32, MPX_DEV_CPU, 4, {2, 6, 6, 3}, xb};
    mpx_tensor y = {MPX_F32, MPX_DEV_CPU, 4, {2, 3, 3, 3}, yb};
    CHECK_OK(mpx_maxpool2d_forward_cpu(&a, &x, &y));
    mpx_tensor t = y;
    t.shape[2] = 4;
    expect_input_error(mpx_maxpool2d_forward_cpu(&a, &x, &t), "OW", "maxpool y wrong OW");
    t = y;
    t.shape[3] = 4;
    expect_input_error(mpx_maxpool2d_backward_cpu(&a, &t, &x, &y, &x), "dy has shape [2,3,3,4]",
                       "maxpool dy wrong C");
    t = x;
    t.dtype = MPX_F16;
    expect_input_error(mpx_maxpool2d_forward_cpu(&a, &t, &y), "x has dtype f16", "maxpool f16");
    mpx_pool2d_attr bad = {2, 2, 2};
    expect_input_error(mpx_maxpool2d_forward_cpu(&bad, &x, &y), "pad 2", "maxpool pad >= kernel");
    mpx_tensor g = {MPX_F32, MPX_DEV_CPU, 2, {2, 3}, gb};
    CHECK_OK(mpx_avgpool_global_forward_cpu(&x, &g));
    t = g;
    t.shape[1] = 2;
    expect_input_error(mpx_avgpool_global_forward_cpu(&x, &t), "y has shape [2,2]",
                       "avgpool y wrong C");
    expect_input_error(mpx_avgpool_global_backward_cpu(&t, &x), "dy has shape [2,2]",
                       "avgpool dy wrong C");
    t = g;
    t.ndim = 4;
    t.shape[2] = t.shape[3] = 1;
    expect_input_error(mpx_avgpool_global_forward_cpu(&x, &t), "y has 4 dims", "avgpool 4-d y");
}

int main(void) {
    mpx_threads_set(2);
    static const pgeom shapes[] = {
        {2, 9, 9, 5, {3, 2, 1}, 1},  /* the ResNet stem max-pool, odd sizes */
        {2, 8, 6, 3, {2, 2, 0}, 1},  /* non-overlapping */
        {1, 5, 7, 20, {3, 1, 1}, 1}, /* overlapping windows, two channel blocks */
        {2, 7, 7, 4, {3, 3, 0}, 1},  /* floor: the last row/column unused */
        {3, 6, 6, 17, {2, 1, 1}, 1}, /* pad on an even kernel */
        {4, 32, 32, 24, {3, 2, 1}, 0}, /* the OpenMP path (too large for finite differences) */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_maxpool(&shapes[i], 100 + 10 * i);
    check_semantics();
    check_avgpool(2, 3, 3, 5, 7);
    check_avgpool(4, 7, 7, 40, 8);
    check_avgpool(8, 16, 16, 24, 9); /* OpenMP path */
    check_errors();
    return mpx_test_done(__FILE__);
}
