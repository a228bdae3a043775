/* test_op_bmm.c — batched matmul forward and backward, all four transpose combinations, against
 * a double reference and central finite differences in double; 2-, 3- and 4-d shapes; one of
 * da / db NULL; determinism across thread counts; the error paths.
 *
 * Tolerance for every FP32 result: the dot-product bound gamma_R * S, gamma_R = R u / (1 - R u),
 * u = 2^-24, R the number of terms plus one for the alpha scaling (forward K + 1, da N + 1,
 * db M + 1) and S the same expression over absolute values (|alpha|, |a|, |b|, |dc|).
 * Finite differences: f(a, b) = sum(r * c) is linear in a and in b, so the central difference
 * (step 0.5, exact in binary) has no truncation error; the rounding of the two objective
 * values, 4 n 2^-53 sum |r c| / h for the n products of f, is added to the tolerance.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "mpx/runtime.h"
#include "testutil.h"

/* The CPU operators' context the ops under test run on (made in main). */
static mpx_cpu_ctx *ctx;

static const double U = 1.0 / 16777216.0;
static const double E53 = 1.0 / 9007199254740992.0;

static float *fbuf(int64_t n) { return malloc((size_t)n * sizeof(float)); }
static double *dbuf(int64_t n) { return malloc((size_t)n * sizeof(double)); }

typedef struct {
    int ta, tb;
    int64_t batch, m, n, k;
    double alpha;
} prob;

/* op(A)[i, p] and op(B)[p, j] of one batch. */
static double opa(const prob *P, const double *a, int64_t i, int64_t p) {
    return P->ta ? a[p * P->m + i] : a[i * P->k + p];
}
static double opb(const prob *P, const double *b, int64_t p, int64_t j) {
    return P->tb ? b[j * P->k + p] : b[p * P->n + j];
}
static int64_t idx_a(const prob *P, int64_t i, int64_t p) {
    return P->ta ? p * P->m + i : i * P->k + p;
}
static int64_t idx_b(const prob *P, int64_t p, int64_t j) {
    return P->tb ? j * P->k + p : p * P->n + j;
}

/* c = alpha op(a) op(b) per batch. */
static void ref_fwd(const prob *P, double alpha, const double *a, const double *b, double *c) {
    int64_t sa = P->m * P->k, sb = P->k * P->n, sc = P->m * P->n;
    for (int64_t q = 0; q < P->batch; q++)
        for (int64_t i = 0; i < P->m; i++)
            for (int64_t j = 0; j < P->n; j++) {
                double s = 0;
                for (int64_t p = 0; p < P->k; p++)
                    s += opa(P, a + q * sa, i, p) * opb(P, b + q * sb, p, j);
                c[q * sc + i * P->n + j] = alpha * s;
            }
}

/* Analytic gradients of sum(dc * c) in a's and b's layouts (S bounds when given |.|). */
static void ref_grads(const prob *P, double alpha, const double *a, const double *b,
                      const double *dc, double *ga, double *gb) {
    int64_t sa = P->m * P->k, sb = P->k * P->n, sc = P->m * P->n;
    for (int64_t q = 0; q < P->batch; q++) {
        const double *aq = a + q * sa, *bq = b + q * sb, *cq = dc + q * sc;
        for (int64_t i = 0; i < P->m; i++)
            for (int64_t p = 0; p < P->k; p++) {
                double s = 0;
                for (int64_t j = 0; j < P->n; j++) s += cq[i * P->n + j] * opb(P, bq, p, j);
                ga[q * sa + idx_a(P, i, p)] = alpha * s;
            }
        for (int64_t p = 0; p < P->k; p++)
            for (int64_t j = 0; j < P->n; j++) {
                double s = 0;
                for (int64_t i = 0; i < P->m; i++) s += opa(P, aq, i, p) * cq[i * P->n + j];
                gb[q * sb + idx_b(P, p, j)] = alpha * s;
            }
    }
}

/* sum r * c and sum |r * c| for the current a, b. */
static double objective(const prob *P, const double *a, const double *b, const double *r, double *c,
                        double *abs_sum) {
    ref_fwd(P, P->alpha, a, b, c);
    double s = 0, t = 0;
    for (int64_t i = 0; i < P->batch * P->m * P->n; i++) s += r[i] * c[i], t += fabs(r[i] * c[i]);
    *abs_sum = t;
    return s;
}

/* Central differences of the objective in every element of v; err: their rounding. */
static void fd_grad(const prob *P, double *a, double *b, const double *r, double *v, int64_t nv,
                    double *grad, double *err) {
    const double h = 0.5;
    double *c = dbuf(P->batch * P->m * P->n);
    double terms = (double)(P->batch * P->m * P->n * (P->k + 1));
    for (int64_t i = 0; i < nv; i++) {
        double save = v[i], a1, a2;
        v[i] = save + h;
        double fp = objective(P, a, b, r, c, &a1);
        v[i] = save - h;
        double fm = objective(P, a, b, r, c, &a2);
        v[i] = save;
        grad[i] = (fp - fm) / (2 * h);
        err[i] = 4 * terms * E53 * (a1 + a2) / (2 * h);
    }
    free(c);
}

static double ratio(const float *got, const double *ref, const double *s, const double *extra,
                    int64_t n, int64_t terms) {
    double gam = terms * U / (1 - terms * U), worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - ref[i]) / (gam * s[i] + (extra ? extra[i] : 0) + 1e-300);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

static double *to_d(const float *f, int64_t n, int absval) {
    double *d = dbuf(n);
    for (int64_t i = 0; i < n; i++) d[i] = absval ? fabs(f[i]) : f[i];
    return d;
}

static void fill_nan(float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[i] = NAN;
}

/* lead: the leading dims (nlead of them); fd: finite differences (small problems). */
static void check_case(int nlead, const int64_t *lead, int64_t m, int64_t n, int64_t k, int ta,
                       int tb, float alpha, int fd, uint64_t seed) {
    int64_t batch = mpx_shape_numel(nlead, lead);
    prob P = {ta, tb, batch, m, n, k, alpha};
    int64_t na = batch * m * k, nb = batch * k * n, nc = batch * m * n;
    char tag[128];
    snprintf(tag, sizeof tag, "batch %lld M %lld N %lld K %lld trans_a %d trans_b %d alpha %g",
             (long long)batch, (long long)m, (long long)n, (long long)k, ta, tb, alpha);
    float *af = fbuf(na), *bf = fbuf(nb), *cf = fbuf(nc), *rf = fbuf(nc);
    float *daf = fbuf(na), *dbf = fbuf(nb);
    mpx_test_uniform(af, na, -1, 1, seed);
    mpx_test_uniform(bf, nb, -1, 1, seed + 1);
    mpx_test_uniform(rf, nc, -1, 1, seed + 2);
    double *a = to_d(af, na, 0), *b = to_d(bf, nb, 0), *r = to_d(rf, nc, 0);
    double *aa = to_d(af, na, 1), *ab = to_d(bf, nb, 1), *ar = to_d(rf, nc, 1);
    double *c = dbuf(nc), *sc = dbuf(nc), *ga = dbuf(na), *gb = dbuf(nb);
    double *sa = dbuf(na), *sb = dbuf(nb), *ea = NULL, *eb = NULL;
    ref_fwd(&P, alpha, a, b, c);
    ref_fwd(&P, fabs(alpha), aa, ab, sc);
    ref_grads(&P, fabs(alpha), aa, ab, ar, sa, sb);
    if (fd) {
        ea = dbuf(na), eb = dbuf(nb);
        fd_grad(&P, a, b, r, a, na, ga, ea);
        fd_grad(&P, a, b, r, b, nb, gb, eb);
    } else {
        ref_grads(&P, alpha, a, b, r, ga, gb);
    }

    mpx_tensor ta_ = {MPX_F32, MPX_DEV_CPU, nlead + 2, {0}, af};
    memcpy(ta_.shape, lead, nlead * sizeof(int64_t));
    mpx_tensor tb_ = ta_, tc = ta_, tr, tda, tdb;
    ta_.shape[nlead] = ta ? k : m, ta_.shape[nlead + 1] = ta ? m : k;
    tb_.shape[nlead] = tb ? n : k, tb_.shape[nlead + 1] = tb ? k : n;
    tc.shape[nlead] = m, tc.shape[nlead + 1] = n;
    tb_.data = bf, tc.data = cf;
    tr = tc, tda = ta_, tdb = tb_;
    tr.data = rf, tda.data = daf, tdb.data = dbf;
    mpx_bmm_attr at = {ta, tb, alpha};

    fill_nan(cf, nc);
    CHECK_OK(mpx_bmm_forward_cpu(ctx, &at, &ta_, &tb_, &tc));
    double e = ratio(cf, c, sc, NULL, nc, k + 1);
    CHECK(e <= 1, "%s: forward %.3g x bound", tag, e);
    fill_nan(daf, na), fill_nan(dbf, nb);
    CHECK_OK(mpx_bmm_backward_cpu(ctx, &at, &tr, &ta_, &tb_, &tda, &tdb));
    e = ratio(daf, ga, sa, ea, na, n + 1);
    CHECK(e <= 1, "%s: da vs %s %.3g x bound", tag, fd ? "finite differences" : "reference", e);
    e = ratio(dbf, gb, sb, eb, nb, m + 1);
    CHECK(e <= 1, "%s: db vs %s %.3g x bound", tag, fd ? "finite differences" : "reference", e);

    /* One gradient at a time (the other NULL) gives the same bits. */
    float *da2 = fbuf(na), *db2 = fbuf(nb);
    mpx_tensor tda2 = tda, tdb2 = tdb;
    tda2.data = da2, tdb2.data = db2;
    CHECK_OK(mpx_bmm_backward_cpu(ctx, &at, &tr, &ta_, &tb_, &tda2, NULL));
    CHECK_OK(mpx_bmm_backward_cpu(ctx, &at, &tr, &ta_, &tb_, NULL, &tdb2));
    CHECK(!memcmp(da2, daf, na * 4) && !memcmp(db2, dbf, nb * 4),
          "%s: da or db alone differ from both together", tag);

    /* Same bits with 1 and 2 threads. */
    float *c1 = fbuf(nc);
    mpx_tensor tc1 = tc;
    tc1.data = c1;
    mpx_threads_set(1);
    CHECK_OK(mpx_bmm_forward_cpu(ctx, &at, &ta_, &tb_, &tc1));
    CHECK_OK(mpx_bmm_backward_cpu(ctx, &at, &tr, &ta_, &tb_, &tda2, &tdb2));
    mpx_threads_set(2);
    CHECK(!memcmp(c1, cf, nc * 4) && !memcmp(da2, daf, na * 4) && !memcmp(db2, dbf, nb * 4),
          "%s: results differ between 1 and 2 threads", tag);

    free(af), free(bf), free(cf), free(rf), free(daf), free(dbf), free(a), free(b), free(r);
    free(aa), free(ab), free(ar), free(c), free(sc), free(ga), free(gb), free(sa), free(sb);
    free(ea), free(eb), free(da2), free(db2), free(c1);
}

static void expect_input_error(mpx_status s, const char *needle, const char *what) {
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), needle),
          "%s: expected MPX_ERR_INPUT mentioning '%s', got %s: %s", what, needle,
          mpx_status_name(s), mpx_error_message());
}

static void check_errors(void) {
    static float ab[2 * 3 * 4], bb[2 * 4 * 5], cb[2 * 3 * 5];
    mpx_tensor a = {MPX_F32, MPX_DEV_CPU, 3, {2, 3, 4}, ab};
    mpx_tensor b = {MPX_F32, MPX_DEV_CPU, 3, {2, 4, 5}, bb};
    mpx_tensor c = {MPX_F32, MPX_DEV_CPU, 3, {2, 3, 5}, cb};
    mpx_bmm_attr at = {0, 0, 1.0f}, tt = {1, 0, 1.0f}, nanat = {0, 0, NAN};
    CHECK_OK(mpx_bmm_forward_cpu(ctx, &at, &a, &b, &c));
    expect_input_error(mpx_bmm_forward_cpu(ctx, &tt, &a, &b, &c),
                       "b has shape [2,4,5], dim 1 must be 3 (K of op(a))", "trans_a K mismatch");
    expect_input_error(mpx_bmm_forward_cpu(ctx, NULL, &a, &b, &c), "attr is NULL", "no attr");
    expect_input_error(mpx_bmm_forward_cpu(ctx, &nanat, &a, &b, &c), "alpha nan", "NaN alpha");
    mpx_tensor t = b;
    t.shape[0] = 3;
    expect_input_error(mpx_bmm_forward_cpu(ctx, &at, &a, &t, &c),
                       "b has shape [3,4,5], dim 0 must be 2", "batch mismatch");
    t = b;
    t.ndim = 2, t.shape[0] = 4, t.shape[1] = 5;
    expect_input_error(mpx_bmm_forward_cpu(ctx, &at, &a, &t, &c), "b has 2 dims, expected 3",
                       "rank mismatch");
    t = c;
    t.shape[2] = 4;
    expect_input_error(mpx_bmm_forward_cpu(ctx, &at, &a, &b, &t), "c has shape [2,3,4]",
                       "c of another shape");
    expect_input_error(mpx_bmm_backward_cpu(ctx, &at, &t, &a, &b, &a, &b), "dc has shape [2,3,4]",
                       "dc of another shape");
    expect_input_error(mpx_bmm_backward_cpu(ctx, &at, &c, &a, &b, &b, NULL), "da has shape [2,4,5]",
                       "da shaped like b");
    expect_input_error(mpx_bmm_backward_cpu(ctx, &at, &c, &a, &b, NULL, &a), "db has shape [2,3,4]",
                       "db shaped like a");
    t = a;
    t.ndim = 1;
    expect_input_error(mpx_bmm_forward_cpu(ctx, &at, &t, &b, &c), "a has 1 dim", "1-d a");
}

int main(void) {
    ctx = mpx_cpu_ctx_create();
    if (!ctx) {
        fprintf(stderr, "FAIL: %s\n", mpx_error_message());
        return 1;
    }
    mpx_threads_set(2);
    static const int64_t l3[] = {3}, l4[] = {2, 3}, l1[] = {2}, att[] = {2, 4}, none[] = {1};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_case(1, l3, 5, 4, 7, ta, tb, 0.125f, 1, 10 + ta * 2 + tb);
            check_case(2, l4, 5, 6, 9, ta, tb, -1.5f, 1, 20 + ta * 2 + tb);
            check_case(0, none, 4, 5, 3, ta, tb, 1.0f, 1, 30 + ta * 2 + tb); /* no batch dims */
            check_case(1, l1, 1, 1, 5, ta, tb, 2.0f, 1, 40 + ta * 2 + tb);   /* M = N = 1 */
        }
    /* Attention shapes [B, H, T, D], T = 37, D = 16: scores = Q K^T / sqrt(D), then P V. */
    check_case(2, att, 37, 37, 16, 0, 1, 0.25f, 0, 50);
    check_case(2, att, 37, 16, 37, 0, 0, 1.0f, 0, 60);
    check_errors();
    return mpx_test_done(__FILE__);
}
