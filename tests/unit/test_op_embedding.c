/* test_op_embedding.c — embedding lookup forward (exact copies), backward against central
 * finite differences in double (duplicate and unused ids), overwrite of dtable, determinism
 * across thread counts, and the error paths (ids out of range name position and value).
 *
 * Forward copies rows: compared bit for bit. Backward: dtable[v] is an FP32 sum, in position
 * order, of the d positions holding id v: |err| <= gamma_(d-1) sum |dy| with gamma_k =
 * k u / (1 - k u), u = 2^-24 (exactly 0 for d <= 1). The objective f = sum r * y is linear in
 * the table, so the central difference (step 0.5, exact in binary) has no truncation error;
 * its rounding, 4 n 2^-53 sum |r y| / h for the n products of the objective, is added.
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

typedef struct {
    const int32_t *ids;
    double *table;
    const double *r;
    int64_t n, h;
} fd_ctx;

/* f = sum_n sum_j r[n, j] * table[ids[n], j]; *abs_sum = sum |r * table|. */
static double objective(const fd_ctx *f, double *abs_sum) {
    double s = 0, a = 0;
    for (int64_t i = 0; i < f->n; i++)
        for (int64_t j = 0; j < f->h; j++) {
            double p = f->r[i * f->h + j] * f->table[(int64_t)f->ids[i] * f->h + j];
            s += p, a += fabs(p);
        }
    *abs_sum = a;
    return s;
}

/* ids of the given shape drawn from [0, used) (duplicates when used < N; rows >= used unused). */
static void check_case(int ndim, const int64_t *shape, int64_t v, int64_t h, int64_t used, int fd,
                       uint64_t seed) {
    int64_t n = mpx_shape_numel(ndim, shape);
    char tag[96], sb[64];
    snprintf(tag, sizeof tag, "ids %s V %lld H %lld", mpx_shape_str(ndim, shape, sb, sizeof sb),
             (long long)v, (long long)h);
    int32_t *ids = malloc(n * sizeof(int32_t));
    float *tab = malloc(v * h * 4), *y = malloc(n * h * 4), *r = malloc(n * h * 4);
    float *dt = malloc(v * h * 4);
    mpx_rng rng = mpx_rng_make(seed, MPX_RNG_TEST, 0);
    for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)mpx_rng_below(&rng, (uint32_t)used);
    /* Rows at the edges of the per-thread row ranges (2, 3 and 4 threads), each used twice. */
    const int64_t edge[] = {0, used / 2 - 1, used / 2, used / 3, used / 4, 3 * used / 4, used - 1};
    for (int64_t e = 0; e < 7 && 2 * e + 1 < n && used >= 8; e++)
        ids[2 * e] = ids[2 * e + 1] = (int32_t)edge[e];
    mpx_test_uniform(tab, v * h, -1, 1, seed + 1);
    mpx_test_uniform(r, n * h, -1, 1, seed + 2);
    mpx_tensor ti = {MPX_I32, MPX_DEV_CPU, ndim, {0}, ids};
    memcpy(ti.shape, shape, ndim * sizeof(int64_t));
    mpx_tensor ty = {MPX_F32, MPX_DEV_CPU, ndim + 1, {0}, y};
    memcpy(ty.shape, shape, ndim * sizeof(int64_t));
    ty.shape[ndim] = h;
    mpx_tensor tr = ty, tt = {MPX_F32, MPX_DEV_CPU, 2, {v, h}, tab}, tdt = tt;
    tr.data = r, tdt.data = dt;

    for (int64_t i = 0; i < n * h; i++) y[i] = NAN;
    CHECK_OK(mpx_embedding_forward_cpu(&ti, &tt, &ty));
    int same = 1;
    for (int64_t i = 0; i < n; i++) same &= !memcmp(y + i * h, tab + (int64_t)ids[i] * h, h * 4);
    CHECK(same, "%s: forward rows are not exact copies of the table rows", tag);

    for (int64_t i = 0; i < v * h; i++) dt[i] = NAN; /* backward must overwrite everything */
    CHECK_OK(mpx_embedding_backward_cpu(&tr, &ti, &tdt));
    /* gd: the reference gradient; sabs: sum |dy| per entry; fde: FD rounding (0 without FD). */
    double *gd = calloc(v * h, 8), *sabs = calloc(v * h, 8), *fde = calloc(v * h, 8);
    double *rd = malloc(n * h * 8);
    int64_t *count = calloc(v, sizeof(int64_t));
    for (int64_t i = 0; i < n * h; i++) rd[i] = r[i];
    for (int64_t i = 0; i < n; i++) {
        count[ids[i]]++;
        for (int64_t j = 0; j < h; j++) sabs[(int64_t)ids[i] * h + j] += fabs(r[i * h + j]);
    }
    if (fd) {
        double *td = malloc(v * h * 8);
        for (int64_t i = 0; i < v * h; i++) td[i] = tab[i];
        fd_ctx f = {ids, td, rd, n, h};
        const double step = 0.5;
        for (int64_t k = 0; k < v * h; k++) {
            double save = td[k], a1, a2;
            td[k] = save + step;
            double fp = objective(&f, &a1);
            td[k] = save - step;
            double fm = objective(&f, &a2);
            td[k] = save;
            gd[k] = (fp - fm) / (2 * step);
            fde[k] = 4 * (double)(n * h) * E53 * (a1 + a2) / (2 * step);
        }
        free(td);
    } else { /* the sums the FD cases confirm, in double */
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < h; j++) gd[(int64_t)ids[i] * h + j] += r[i * h + j];
    }
    double worst = 0;
    int64_t dup_rows = 0, unused_rows = 0;
    int zero_ok = 1;
    for (int64_t vv = 0; vv < v; vv++) {
        dup_rows += count[vv] > 1;
        unused_rows += count[vv] == 0;
        double d = (double)(count[vv] > 1 ? count[vv] - 1 : 0);
        double gam = d * U / (1 - d * U);
        for (int64_t j = 0; j < h; j++) {
            int64_t k = vv * h + j;
            if (count[vv] == 0) zero_ok &= dt[k] == 0.0f && !signbit(dt[k]);
            double err = fabs(dt[k] - gd[k]), tol = gam * sabs[k] + fde[k];
            double e = err == 0 ? 0 : err / tol; /* one term or none: exact up to the FD */
            if (!(e <= worst)) worst = e;
        }
    }
    CHECK(worst <= 1, "%s: dtable vs %s %.3g x tolerance", tag, fd ? "finite differences" : "sums",
          worst);
    CHECK(zero_ok, "%s: rows of unused ids are not +0", tag);
    CHECK(dup_rows > 0 && (used == v || unused_rows > 0),
          "%s: test data lacks duplicates (%lld) or unused rows (%lld)", tag, (long long)dup_rows,
          (long long)unused_rows);

    float *dt1 = malloc(v * h * 4);
    mpx_tensor tdt1 = tdt;
    tdt1.data = dt1;
    mpx_threads_set(1);
    CHECK_OK(mpx_embedding_backward_cpu(&tr, &ti, &tdt1));
    mpx_threads_set(2);
    CHECK(!memcmp(dt, dt1, v * h * 4), "%s: dtable differs between 1 and 2 threads", tag);
    free(ids), free(tab), free(y), free(r), free(dt), free(gd), free(sabs), free(fde), free(rd);
    free(count), free(dt1);
}

static void expect_input_error(mpx_status s, const char *needle, const char *what) {
    CHECK(s == MPX_ERR_INPUT && strstr(mpx_error_message(), needle),
          "%s: expected MPX_ERR_INPUT mentioning '%s', got %s: %s", what, needle,
          mpx_status_name(s), mpx_error_message());
}

static void check_errors(void) {
    static int32_t ib[6] = {0, 1, 2, 3, 4, 0};
    static float tb[5 * 3], yb[6 * 3];
    mpx_tensor ids = {MPX_I32, MPX_DEV_CPU, 2, {2, 3}, ib};
    mpx_tensor tab = {MPX_F32, MPX_DEV_CPU, 2, {5, 3}, tb};
    mpx_tensor y = {MPX_F32, MPX_DEV_CPU, 3, {2, 3, 3}, yb};
    CHECK_OK(mpx_embedding_forward_cpu(&ids, &tab, &y));
    ib[4] = 5;
    expect_input_error(mpx_embedding_forward_cpu(&ids, &tab, &y),
                       "ids[1,1] = 5 is out of range: must be in [0, V = 5)", "id = V");
    expect_input_error(mpx_embedding_backward_cpu(&y, &ids, &tab),
                       "ids[1,1] = 5 is out of range: must be in [0, V = 5)", "id = V in backward");
    ib[4] = 4, ib[1] = -1;
    expect_input_error(mpx_embedding_forward_cpu(&ids, &tab, &y), "ids[0,1] = -1 is out of range",
                       "negative id");
    ib[1] = 1;
    mpx_tensor t = y;
    t.shape[2] = 4;
    expect_input_error(mpx_embedding_forward_cpu(&ids, &tab, &t), "y has shape [2,3,4]",
                       "y with another H");
    expect_input_error(mpx_embedding_backward_cpu(&t, &ids, &tab), "dy has shape [2,3,4]",
                       "dy with another H");
    t = y;
    t.shape[1] = 2;
    expect_input_error(mpx_embedding_forward_cpu(&ids, &tab, &t), "y has shape [2,2,3]",
                       "y with other leading dims");
    t = ids;
    t.dtype = MPX_F32;
    expect_input_error(mpx_embedding_forward_cpu(&t, &tab, &y), "ids has dtype f32", "f32 ids");
    t = ids;
    t.ndim = 4, t.shape[0] = 1, t.shape[1] = 1, t.shape[2] = 2, t.shape[3] = 3;
    expect_input_error(mpx_embedding_forward_cpu(&t, &tab, &y), "ids has 4 dims", "4-d ids");
    t = tab;
    t.ndim = 1;
    expect_input_error(mpx_embedding_backward_cpu(&y, &ids, &t), "dtable has 1 dims", "1-d dtable");
}

int main(void) {
    mpx_threads_set(2);
    static const int64_t s1[] = {20}, s2[] = {3, 7}, s3[] = {2, 3, 4}, s4[] = {4, 75};
    check_case(1, s1, 11, 5, 6, 1, 10);       /* many duplicates, ids 6..10 unused */
    check_case(2, s2, 13, 3, 13, 1, 20);      /* [B, T] ids, every row may be used */
    check_case(3, s3, 9, 17, 4, 1, 30);       /* 3-d ids, y 4-d; heavy duplicates */
    check_case(2, s4, 1000, 33, 1000, 0, 40); /* V * H >= the OpenMP threshold */
    check_errors();
    return mpx_test_done(__FILE__);
}
