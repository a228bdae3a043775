/* test_op_gemm.c — mpx_sgemm (both libraries and the routing) against a double reference.
 *
 * Every transpose combination, odd sizes, leading dimensions larger than the rows, and
 * alpha/beta != 1/0, for OpenBLAS, oneDNN and AUTO. Tolerance: the standard bound for a
 * floating-point dot product of K terms, whatever the summation order (FMA included):
 *   |c - c_exact| <= gamma_{K+2} * (|alpha| * sum_k |a_ik b_kj| + |beta c_ij|),
 *   gamma_n = n u / (1 - n u), u = 2^-24,
 * where the +2 covers the alpha and beta products. The inputs are exact in double, so the
 * reference is exact to ~1e-16 and any indexing or transpose error (O(1)) fails.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "testutil.h"

/* The CPU operators' context the ops under test run on (made in main). */
static mpx_cpu_ctx *ctx;

static const double U = 1.0 / 16777216.0; /* 2^-24 */

static double gamma_n(int n) { return n * U / (1 - n * U); }

static void check_gemm(mpx_gemm_impl impl, int ta, int tb, int m, int n, int k, float alpha,
                       float beta, uint64_t seed) {
    /* Leading dimensions padded by 3 so that a wrong ld shows up. */
    int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 3, ldc = n + 3;
    int rows_a = ta ? k : m, rows_b = tb ? n : k;
    float *a = malloc(sizeof(float) * rows_a * lda), *b = malloc(sizeof(float) * rows_b * ldb);
    float *c = malloc(sizeof(float) * m * ldc), *c0 = malloc(sizeof(float) * m * ldc);
    mpx_test_uniform(a, (size_t)rows_a * lda, -1, 1, seed);
    mpx_test_uniform(b, (size_t)rows_b * ldb, -1, 1, seed + 1);
    mpx_test_uniform(c0, (size_t)m * ldc, -1, 1, seed + 2);
    memcpy(c, c0, sizeof(float) * m * ldc);
    mpx_sgemm_force(ctx, impl);
    mpx_sgemm(ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    mpx_sgemm_force(ctx, MPX_GEMM_AUTO);
    double worst = 0;
    int pad_ok = 1;
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double s = 0, sa = 0;
            for (int p = 0; p < k; p++) {
                double av = ta ? a[p * lda + i] : a[i * lda + p];
                double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
                s += av * bv;
                sa += fabs(av * bv);
            }
            double ref = alpha * s + beta * (double)c0[i * ldc + j];
            double tol = gamma_n(k + 2) * (fabs(alpha) * sa + fabs(beta * c0[i * ldc + j]));
            double e = fabs(c[i * ldc + j] - ref) / tol;
            if (!(e <= worst)) worst = e;
        }
        for (int j = n; j < ldc; j++) pad_ok &= c[i * ldc + j] == c0[i * ldc + j];
    }
    const char *names[] = {"auto", "openblas", "onednn"};
    CHECK(worst <= 1, "sgemm %s %c%c m=%d n=%d k=%d alpha=%g beta=%g: error %.3g x tolerance",
          names[impl], ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, beta, worst);
    CHECK(pad_ok, "sgemm %s %c%c m=%d n=%d k=%d wrote past column n into the ldc padding",
          names[impl], ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k);
    free(a);
    free(b);
    free(c);
    free(c0);
}

int main(void) {
    ctx = mpx_cpu_ctx_create();
    if (!ctx) {
        fprintf(stderr, "FAIL: %s\n", mpx_error_message());
        return 1;
    }
    static const int sizes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 10, 300}, {5, 129, 31}};
    uint64_t seed = 100;
    for (int impl = MPX_GEMM_AUTO; impl <= MPX_GEMM_ONEDNN; impl++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++) {
                    check_gemm((mpx_gemm_impl)impl, ta, tb, sizes[s][0], sizes[s][1], sizes[s][2],
                               1.0f, 0.0f, seed++);
                    check_gemm((mpx_gemm_impl)impl, ta, tb, sizes[s][0], sizes[s][1], sizes[s][2],
                               -0.75f, 0.5f, seed++);
                }
    /* AUTO is oneDNN for every shape (gemm.c); forcing changes the choice, AUTO restores it. */
    static const int shapes[][5] = {{1, 0, 1024, 512, 2048}, {0, 1, 4096, 512, 1024},
                                    {0, 1, 4096, 768, 3072}, {0, 0, 1024, 512, 2048}};
    for (int i = 0; i < 4; i++)
        CHECK(strcmp(mpx_sgemm_choice(ctx, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3],
                                      shapes[i][4]),
                     "onednn") == 0,
              "shape %d should run on onednn", i);
    check_gemm(MPX_GEMM_AUTO, 1, 0, 1024, 256, 1024, 1.0f, 0.0f, seed++);
    mpx_sgemm_force(ctx, MPX_GEMM_OPENBLAS);
    CHECK(strcmp(mpx_sgemm_choice(ctx, 0, 0, 8, 8, 8), "openblas") == 0, "force openblas ignored");
    mpx_sgemm_force(ctx, MPX_GEMM_AUTO);
    CHECK(strcmp(mpx_sgemm_choice(ctx, 0, 0, 8, 8, 8), "onednn") == 0, "AUTO not restored");
    return mpx_test_done(__FILE__);
}
