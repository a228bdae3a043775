/* test_op_permute.c — permute forward and backward: every permutation of 1- to 4-d shapes
 * against an index-by-index reference, the attention head split and merge, backward against
 * central finite differences in double, determinism across thread counts, the error paths.
 *
 * Permuting moves values: forward and backward are compared bit for bit. Finite differences:
 * f = sum r * permute(x) is linear in x, so the central difference (step 0.5) is exact up to
 * the rounding of f, 4 n 2^-53 sum |r y| / h for its n terms: the tolerance.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "mpx/runtime.h"
#include "testutil.h"

static const double E53 = 1.0 / 9007199254740992.0;

static float *fbuf(int64_t n) { return malloc((size_t)n * sizeof(float)); }

/* Flat index in x of y's flat index `iy`, for y.shape[i] = x.shape[perm[i]]. */
static int64_t src_index(int ndim, const int64_t *xshape, const int *perm, int64_t iy) {
    int64_t yidx[MPX_MAX_DIMS], xidx[MPX_MAX_DIMS];
    for (int i = ndim - 1; i >= 0; i--) {
        int64_t d = xshape[perm[i]];
        yidx[i] = iy % d;
        iy /= d;
    }
    for (int i = 0; i < ndim; i++) xidx[perm[i]] = yidx[i];
    int64_t k = 0;
    for (int d = 0; d < ndim; d++) k = k * xshape[d] + xidx[d];
    return k;
}

/* fd: finite differences as well (small sizes). */
static void check_perm(int ndim, const int64_t *shape, const int *perm, int fd, uint64_t seed) {
    int64_t n = mpx_shape_numel(ndim, shape);
    char tag[96], sb[64];
    int len = snprintf(tag, sizeof tag, "x %s perm", mpx_shape_str(ndim, shape, sb, sizeof sb));
    for (int i = 0; i < ndim; i++) len += snprintf(tag + len, sizeof tag - len, " %d", perm[i]);
    float *x = fbuf(n), *y = fbuf(n), *r = fbuf(n), *dx = fbuf(n), *back = fbuf(n);
    mpx_test_uniform(x, n, -1, 1, seed);
    mpx_test_uniform(r, n, -1, 1, seed + 1);
    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, ndim, {0}, x}, ty = tx, tr, tdx = tx, tb = tx;
    memcpy(tx.shape, shape, ndim * sizeof(int64_t));
    tdx = tb = tx;
    ty = tx;
    for (int i = 0; i < ndim; i++) ty.shape[i] = shape[perm[i]];
    tr = ty;
    ty.data = y, tr.data = r, tdx.data = dx, tb.data = back;
    for (int64_t i = 0; i < n; i++) y[i] = dx[i] = NAN;
    CHECK_OK(mpx_permute_forward_cpu(perm, &tx, &ty));
    CHECK_OK(mpx_permute_backward_cpu(perm, &tr, &tdx));
    CHECK_OK(mpx_permute_backward_cpu(perm, &ty, &tb));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += memcmp(&y[i], &x[src_index(ndim, shape, perm, i)], 4) != 0;
    CHECK(bad == 0, "%s: %lld elements misplaced", tag, (long long)bad);
    CHECK(!memcmp(back, x, (size_t)n * 4), "%s: backward of the output does not restore x", tag);

    double worst = 0;
    if (fd) {
        double *xd = malloc((size_t)n * 8);
        for (int64_t i = 0; i < n; i++) xd[i] = x[i];
        for (int64_t k = 0; k < n; k++) {
            double f[2], a[2], save = xd[k];
            for (int s = 0; s < 2; s++) {
                xd[k] = save + (s ? -0.5 : 0.5);
                f[s] = a[s] = 0;
                for (int64_t i = 0; i < n; i++) {
                    double t = (double)r[i] * xd[src_index(ndim, shape, perm, i)];
                    f[s] += t, a[s] += fabs(t);
                }
            }
            xd[k] = save;
            double g = f[0] - f[1], tol = 4 * (double)n * E53 * (a[0] + a[1]) + 1e-300;
            double e = fabs(dx[k] - g) / tol;
            if (!(e <= worst)) worst = e;
        }
        free(xd);
    } else { /* dx[src(i)] = r[i]: the gradient the FD cases confirm */
        for (int64_t i = 0; i < n; i++)
            if (dx[src_index(ndim, shape, perm, i)] != r[i]) worst = INFINITY;
    }
    CHECK(worst <= 1, "%s: dx vs %s %.3g x tolerance", tag, fd ? "finite differences" : "r", worst);

    float *y1 = fbuf(n);
    mpx_tensor ty1 = ty;
    ty1.data = y1;
    mpx_threads_set(1);
    CHECK_OK(mpx_permute_forward_cpu(perm, &tx, &ty1));
    mpx_threads_set(2);
    CHECK(!memcmp(y1, y, (size_t)n * 4), "%s: results differ between 1 and 2 threads", tag);
    free(x), free(y), free(r), free(dx), free(back), free(y1);
}

/* Every permutation of ndim dims, recursively. */
static void all_perms(int ndim, const int64_t *shape, int *perm, int depth, int used, int fd,
                      uint64_t *seed) {
    if (depth == ndim) {
        check_perm(ndim, shape, perm, fd, (*seed)++);
        return;
    }
    for (int d = 0; d < ndim; d++) {
        if (used & (1 << d)) continue;
        perm[depth] = d;
        all_perms(ndim, shape, perm, depth + 1, used | (1 << d), fd, seed);
    }
}

/* The attention head split [B, T, H*D] -> [B, H, T, D] and its merge back. */
static void check_heads(void) {
    enum { B = 2, T = 5, H = 3, D = 4, N = B * T * H * D };
    float x[N], s[N], m[N];
    mpx_test_uniform(x, N, -1, 1, 7);
    static const int perm[4] = {0, 2, 1, 3};
    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, 4, {B, T, H, D}, x}; /* [B, T, H*D] viewed 4-d */
    mpx_tensor ts = {MPX_F32, MPX_DEV_CPU, 4, {B, H, T, D}, s}, tm = tx;
    tm.data = m;
    CHECK_OK(mpx_permute_forward_cpu(perm, &tx, &ts));
    int bad = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++)
                for (int d = 0; d < D; d++)
                    bad += s[((b * H + h) * T + t) * D + d] != x[(b * T + t) * (H * D) + h * D + d];
    CHECK(bad == 0, "head split: %d elements misplaced", bad);
    CHECK_OK(mpx_permute_forward_cpu(perm, &ts, &tm));
    CHECK(!memcmp(m, x, sizeof x), "head merge does not restore [B, T, H*D]");
}

static void expect_input_error(mpx_status s, const char *needle, const char *what) {
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), needle),
          "%s: expected MPX_ERR_INPUT mentioning '%s', got %s: %s", what, needle,
          mpx_status_name(s), mpx_error_message());
}

static void check_errors(void) {
    static float a[24], b[24];
    mpx_tensor x = {MPX_F32, MPX_DEV_CPU, 3, {2, 3, 4}, a};
    mpx_tensor y = {MPX_F32, MPX_DEV_CPU, 3, {4, 2, 3}, b};
    int ok[3] = {2, 0, 1}, dup[3] = {2, 1, 1}, big[3] = {3, 0, 1};
    CHECK_OK(mpx_permute_forward_cpu(ok, &x, &y));
    CHECK_OK(mpx_permute_backward_cpu(ok, &y, &x));
    expect_input_error(mpx_permute_forward_cpu(dup, &x, &y), "perm[2] = 1", "repeated dim");
    expect_input_error(mpx_permute_forward_cpu(big, &x, &y), "perm[0] = 3", "dim out of range");
    expect_input_error(mpx_permute_backward_cpu(dup, &y, &x), "perm[2] = 1",
                       "repeated dim in backward");
    expect_input_error(mpx_permute_forward_cpu(NULL, &x, &y), "perm is NULL", "no perm");
    mpx_tensor t = y;
    t.shape[0] = 2, t.shape[1] = 4;
    expect_input_error(mpx_permute_forward_cpu(ok, &x, &t), "y has shape [2,4,3], dim 0 must be 4",
                       "y shaped for another perm");
    expect_input_error(mpx_permute_backward_cpu(ok, &t, &x),
                       "dx has shape [2,3,4], dim 0 must be 4", "dy shaped for another perm");
    t = y;
    t.ndim = 2, t.shape[0] = 8, t.shape[1] = 3;
    expect_input_error(mpx_permute_forward_cpu(ok, &x, &t), "y has 2 dims, expected 3",
                       "y of another rank");
}

int main(void) {
    mpx_threads_set(2);
    uint64_t seed = 10;
    int perm[4];
    static const int64_t s1[] = {7}, s2[] = {7, 9}, s3[] = {3, 4, 5}, s4[] = {2, 3, 4, 5},
                         s5[] = {2, 64, 12, 32}, s6[] = {1, 5, 1, 3}, s7[] = {3, 70, 45};
    all_perms(1, s1, perm, 0, 0, 1, &seed);
    all_perms(2, s2, perm, 0, 0, 1, &seed);
    all_perms(3, s3, perm, 0, 0, 1, &seed);
    all_perms(4, s4, perm, 0, 0, 1, &seed);
    all_perms(4, s6, perm, 0, 0, 1, &seed); /* unit dims */
    all_perms(4, s5, perm, 0, 0, 0, &seed); /* 49152 elements: the OpenMP path */
    all_perms(3, s7, perm, 0, 0, 0, &seed); /* transposes in tiles with ragged edges */
    check_heads();
    check_errors();
    return mpx_test_done(__FILE__);
}
