/* test_op_dropout.c — seeded dropout: the mask against an independent draw of the documented
 * rule (mpx_rand_u32 per element), the keep fraction, p = 0 as the identity, backward
 * recomputing the forward's mask bit for bit, backward against central finite differences in
 * double, unaligned offsets, determinism across thread counts, and the error paths.
 *
 * Tolerances: kept values are x * fl(1 / (1 - p)), one product: compared bit for bit with that
 * formula, and within 2u |x / (1 - p)| (u = 2^-24: the rounded scale and the product) of the
 * exact x / (1 - p). The keep fraction of n draws must lie within 5 standard deviations,
 * 5 sqrt(p (1 - p) / n), of 1 - p (a false alarm once in ~3.5 million runs; the data are fixed,
 * so the outcome is in fact deterministic). Finite differences: f = sum r * dropout(x) is linear
 * in x, so the central difference (step 0.5) is exact up to the rounding of f, here taken per
 * element (dropout is element-wise): <= 4 2^-53 |r x / (1 - p)| / h, added to the tolerance.
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

/* The documented rule, element by element. */
static int kept(const mpx_dropout_attr *a, int64_t i) {
    uint32_t u =
        mpx_rand_u32(a->seed, (uint64_t)MPX_RNG_DROPOUT ^ a->stream, a->offset + (uint64_t)i);
    return (double)u >= round((double)a->p * 4294967296.0);
}

static void check_case(int64_t n, float p, uint64_t seed, uint64_t stream, uint64_t offset) {
    char tag[112];
    snprintf(tag, sizeof tag, "n %lld p %g seed %llu stream %llu offset %llu", (long long)n, p,
             (unsigned long long)seed, (unsigned long long)stream, (unsigned long long)offset);
    float *x = fbuf(n), *y = fbuf(n), *r = fbuf(n), *dx = fbuf(n), *dxx = fbuf(n);
    mpx_test_normal(x, n, 0.0f, 2.0f, seed + 100);
    mpx_test_uniform(r, n, -1, 1, seed + 101);
    for (int64_t i = 0; i < n; i++)
        if (x[i] == 0.0f) x[i] = 1.0f;   /* nonzero, so a zero in y means dropped */
    if (n > 2) x[1] = -0.0f, x[2] = NAN; /* identity at p = 0 keeps these bits too */
    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, 2, {1, n}, x}, ty = tx, tr = tx, tdx = tx, tdxx = tx;
    ty.data = y, tr.data = r, tdx.data = dx, tdxx.data = dxx;
    mpx_dropout_attr at = {p, seed, stream, offset};
    for (int64_t i = 0; i < n; i++) y[i] = dx[i] = dxx[i] = 12345.0f;
    CHECK_OK(mpx_dropout_forward_cpu(&at, &tx, &ty));
    CHECK_OK(mpx_dropout_backward_cpu(&at, &tr, &tdx));
    CHECK_OK(mpx_dropout_backward_cpu(&at, &tx, &tdxx)); /* dy = x: must reproduce y */

    const float scale = (float)(1.0 / (1.0 - (double)p));
    const double exact = 1.0 / (1.0 - (double)p);
    int64_t nkept = 0, bad_rule = 0, bad_val = 0;
    double wdx = 0;
    for (int64_t i = 0; i < n; i++) {
        int k = kept(&at, i);
        nkept += k;
        float want = k ? x[i] * scale : 0.0f;
        if (memcmp(&y[i], &want, 4)) bad_rule++;
        if (k && !isnan(x[i]) && fabs(y[i] - x[i] * exact) > 2 * U * fabs(x[i] * exact)) bad_val++;
        /* finite differences on the double reference, element by element */
        const double h = 0.5;
        double ref_p = k ? (x[i] + h) * exact : 0, ref_m = k ? (x[i] - h) * exact : 0;
        if (isnan(x[i])) continue;
        double fd = (double)r[i] * (ref_p - ref_m) / (2 * h);
        double tol =
            2 * U * fabs(r[i] * exact) + 4 * E53 * fabs(r[i] * (fabs(x[i]) + h) * exact) / h;
        double e = fabs(dx[i] - fd) / tol;
        if (!(e <= wdx)) wdx = e;
    }
    CHECK(bad_rule == 0, "%s: %lld elements differ from the documented rule", tag,
          (long long)bad_rule);
    CHECK(bad_val == 0, "%s: %lld kept values off x / (1 - p) by more than 2u", tag,
          (long long)bad_val);
    CHECK(wdx <= 1, "%s: dx vs finite differences %.3g x tolerance", tag, wdx);
    CHECK(!memcmp(dxx, y, (size_t)n * 4), "%s: backward does not recompute the forward mask", tag);
    double frac = (double)nkept / n, sd = sqrt((double)p * (1 - p) / n);
    CHECK(fabs(frac - (1 - p)) <= 5 * sd, "%s: kept fraction %.5f, expected %.5f +- %.5f", tag,
          frac, 1 - p, 5 * sd);
    if (p == 0.0f)
        CHECK(!memcmp(x, y, (size_t)n * 4) && !memcmp(r, dx, (size_t)n * 4),
              "%s: p = 0 is not the identity", tag);

    float *y1 = fbuf(n);
    mpx_tensor ty1 = ty;
    ty1.data = y1;
    mpx_threads_set(1);
    CHECK_OK(mpx_dropout_forward_cpu(&at, &tx, &ty1));
    mpx_threads_set(2);
    CHECK(!memcmp(y1, y, (size_t)n * 4), "%s: results differ between 1 and 2 threads", tag);

    /* Offset + 3 over x[3..] gives y[3..]: the counter is the element's offset + index. */
    if (n > 3) {
        mpx_dropout_attr sh = at;
        sh.offset += 3;
        mpx_tensor txs = {MPX_F32, MPX_DEV_CPU, 1, {n - 3}, x + 3}, tys = txs;
        tys.data = y1;
        CHECK_OK(mpx_dropout_forward_cpu(&sh, &txs, &tys));
        CHECK(!memcmp(y1, y + 3, (size_t)(n - 3) * 4), "%s: offset + 3 is not a shift by 3", tag);
    }
    free(x), free(y), free(r), free(dx), free(dxx), free(y1);
}

/* Different seeds, streams and offsets give different masks. */
static void check_streams(void) {
    enum { N = 4096 };
    float *x = fbuf(N), *y[4];
    for (int i = 0; i < N; i++) x[i] = 1.0f;
    mpx_dropout_attr at[4] = {{0.5f, 1, 0, 0}, {0.5f, 2, 0, 0}, {0.5f, 1, 1, 0}, {0.5f, 1, 0, N}};
    mpx_tensor tx = {MPX_F32, MPX_DEV_CPU, 1, {N}, x};
    for (int k = 0; k < 4; k++) {
        y[k] = fbuf(N);
        mpx_tensor ty = tx;
        ty.data = y[k];
        CHECK_OK(mpx_dropout_forward_cpu(&at[k], &tx, &ty));
    }
    for (int k = 1; k < 4; k++) {
        int same = 0;
        for (int i = 0; i < N; i++) same += y[k][i] == y[0][i];
        /* independent masks agree on about half the elements */
        CHECK(same > N / 2 - 5 * 32 && same < N / 2 + 5 * 32,
              "masks %d and 0 agree on %d of %d elements, expected about half", k, same, N);
    }
    free(x);
    for (int k = 0; k < 4; k++) free(y[k]);
}

static void expect_input_error(mpx_status s, const char *needle, const char *what) {
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), needle),
          "%s: expected MPX_ERR_INPUT mentioning '%s', got %s: %s", what, needle,
          mpx_status_name(s), mpx_error_message());
}

static void check_errors(void) {
    static float a[12], b[12];
    mpx_tensor x = {MPX_F32, MPX_DEV_CPU, 2, {3, 4}, a}, y = x;
    y.data = b;
    mpx_dropout_attr ok = {0.1f, 1, 0, 0}, one = {1.0f, 1, 0, 0}, neg = {-0.1f, 1, 0, 0};
    mpx_dropout_attr nan = {NAN, 1, 0, 0};
    CHECK_OK(mpx_dropout_forward_cpu(&ok, &x, &y));
    expect_input_error(mpx_dropout_forward_cpu(&one, &x, &y), "p = 1 must be in [0, 1)", "p = 1");
    expect_input_error(mpx_dropout_backward_cpu(&neg, &x, &y), "p = -0.1", "negative p");
    expect_input_error(mpx_dropout_forward_cpu(&nan, &x, &y), "p = nan", "NaN p");
    expect_input_error(mpx_dropout_forward_cpu(NULL, &x, &y), "attr is NULL", "no attr");
    mpx_tensor t = y;
    t.shape[0] = 4, t.shape[1] = 3;
    expect_input_error(mpx_dropout_forward_cpu(&ok, &x, &t), "y has shape [4,3]",
                       "y of another shape");
    expect_input_error(mpx_dropout_backward_cpu(&ok, &x, &t), "dx has shape [4,3]",
                       "dx of another shape");
    t = x;
    t.dtype = MPX_F16;
    expect_input_error(mpx_dropout_backward_cpu(&ok, &t, &y), "dy has dtype f16", "f16 dy");
}

int main(void) {
    mpx_threads_set(2);
    check_case(1, 0.5f, 1, 0, 0);
    check_case(37, 0.0f, 2, 0, 5);
    check_case(1000, 0.5f, 3, 7, 2);            /* unaligned offset */
    check_case(100003, 0.5f, 4, 3, 1ull << 40); /* OpenMP path, many 1024-element blocks */
    check_case(100003, 0.1f, 5, 11, 1);
    check_case(100003, 0.9f, 6, 12, 3);
    check_case(100003, 0.0f, 7, 0, 0);
    check_streams();
    check_errors();
    return mpx_test_done(__FILE__);
}
