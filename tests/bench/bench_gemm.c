/* bench_gemm.c — OpenBLAS vs oneDNN sgemm on the GEMM shapes mpx's ops produce.
 *
 * Shapes: every 1x1 convolution of ResNet-50 v1.5 as a GEMM (forward NN [M,C]x[C,K],
 * backward-data NT [M,K]x[K,C]^T, backward-weights TN [C,M]^T x [M,K], M = batch*OH*OW) at
 * 224x224 (batch 8) and at 32x32 CIFAR resolution (batch 32 and 128; width 1 and 0.25), the
 * BERT-like linear layers ([B*T,C]x[C,4C], [B*T,4C]x[4C,C], [B*T,C]x[C,C] and their backward
 * GEMMs) and the classifier heads. Prints GFLOP/s per library, the faster one and what
 * mpx_sgemm's AUTO rule picks, then totals per pass type. The routing rule in lib/ops/gemm.c
 * is read off this table. Usage: bench_gemm [threads] [min_seconds_per_shape]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/ops.h"
#include "mpx/runtime.h"
#include "testutil.h"

/* The CPU operators' context the ops under test run on (made in main). */
static mpx_cpu_ctx *ctx;

typedef struct {
    const char *tag;
    int ta, tb, m, n, k;
} shape;

static double g_min_time = 0.25;

/* Runs the GEMM `reps` times through `impl`, lowering *best to the fastest call. */
static void time_gemm(mpx_gemm_impl impl, const shape *s, const float *a, const float *b, float *c,
                      int reps, double *best) {
    mpx_sgemm_force(ctx, impl);
    int lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    for (int r = 0; r < reps; r++) {
        double t0 = mpx_now();
        mpx_sgemm(ctx, s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c, s->n);
        double dt = mpx_now() - t0;
        if (dt < *best) *best = dt;
    }
    mpx_sgemm_force(ctx, MPX_GEMM_AUTO);
}

/* Best times of both libraries: the machine is shared, so they take turns over ROUNDS rounds
 * (after one untimed warm-up call each) and each keeps its fastest call. */
enum { ROUNDS = 3 };
static void time_both(const shape *s, const float *a, const float *b, float *c, double *t_ob,
                      double *t_dn) {
    double flop = 2.0 * s->m * s->n * s->k, junk = INFINITY;
    int reps = (int)(g_min_time / ROUNDS / (flop / 300e9)) + 1;
    time_gemm(MPX_GEMM_OPENBLAS, s, a, b, c, 1, &junk);
    time_gemm(MPX_GEMM_ONEDNN, s, a, b, c, 1, &junk);
    *t_ob = *t_dn = INFINITY;
    for (int r = 0; r < ROUNDS; r++) {
        time_gemm(MPX_GEMM_OPENBLAS, s, a, b, c, reps, t_ob);
        time_gemm(MPX_GEMM_ONEDNN, s, a, b, c, reps, t_dn);
    }
}

static float *alloc_fill(size_t n, uint64_t seed) {
    float *p = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
    if (p) mpx_test_uniform(p, n, -1.0f, 1.0f, seed);
    return p;
}

enum { MAX_SHAPES = 512 };
static shape g_shapes[MAX_SHAPES];
static int g_n;

static void add(const char *tag, int ta, int tb, int m, int n, int k) {
    for (int i = 0; i < g_n; i++) {
        const shape *s = &g_shapes[i];
        if (s->ta == ta && s->tb == tb && s->m == m && s->n == n && s->k == k) return;
    }
    if (g_n < MAX_SHAPES) g_shapes[g_n++] = (shape){tag, ta, tb, m, n, k};
}

/* The three GEMMs of a layer y[M,OUT] = x[M,IN] @ w[IN,OUT]. */
static void add_layer(const char *tag, int m, int in, int out) {
    add(tag, 0, 0, m, out, in);  /* forward */
    add(tag, 0, 1, m, in, out);  /* backward data: dy @ w^T */
    add(tag, 1, 0, in, out, m);  /* backward weights: x^T @ dy */
}

/* ResNet-50 v1.5 1x1 convolutions (C_in, C_out, output side relative to the stage-1 side). */
static void add_resnet(const char *tag, int batch, int side1, double width) {
    static const int conv[][3] = {
        {64, 64, 1},     {64, 256, 1},    {256, 64, 1},   {256, 128, 1},  {128, 512, 2},
        {512, 128, 2},   {256, 512, 2},   {512, 256, 2},  {256, 1024, 4}, {1024, 256, 4},
        {512, 1024, 4},  {1024, 512, 4},  {512, 2048, 8}, {2048, 512, 8}, {1024, 2048, 8},
    };
    for (size_t i = 0; i < sizeof conv / sizeof conv[0]; i++) {
        int side = side1 / conv[i][2];
        int cin = (int)(conv[i][0] * width), cout = (int)(conv[i][1] * width);
        add_layer(tag, batch * side * side, cin, cout);
    }
}

int main(int argc, char **argv) {
    ctx = mpx_cpu_ctx_create();
    if (!ctx) {
        fprintf(stderr, "FAIL: %s\n", mpx_error_message());
        return 1;
    }
    mpx_threads_set(argc > 1 ? atoi(argv[1]) : 0);
    if (argc > 2) g_min_time = atof(argv[2]);
    printf("# %s\n# %s\n# threads %d\n", mpx_blas_info(), mpx_dnnl_info(), mpx_threads_get());

    /* 224x224: after the stem and max-pool stage 1 runs at 56x56. */
    add_resnet("r50-224-b8", 8, 56, 1.0);
    /* CIFAR stem keeps 32x32 at stage 1. */
    add_resnet("r50-32-b32", 32, 32, 1.0);
    add_resnet("r50-32-b128", 128, 32, 1.0);
    add_resnet("r50-32-w.25-b128", 128, 32, 0.25);
    static const int bert_c[] = {256, 768}, bert_m[] = {1024, 4096};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            int c = bert_c[i], m = bert_m[j];
            add_layer("bert", m, c, 4 * c);
            add_layer("bert", m, 4 * c, c);
            add_layer("bert", m, c, c);
        }
    add_layer("head", 128, 2048, 1000);
    add_layer("head", 128, 2048, 10);
    add_layer("head", 128, 512, 10);
    add_layer("head", 64, 256, 10);

    size_t max_a = 0, max_b = 0, max_c = 0;
    for (int i = 0; i < g_n; i++) {
        const shape *s = &g_shapes[i];
        size_t a = (size_t)s->m * s->k, b = (size_t)s->k * s->n, c = (size_t)s->m * s->n;
        if (a > max_a) max_a = a;
        if (b > max_b) max_b = b;
        if (c > max_c) max_c = c;
    }
    const size_t big = 2048;
    if (big * big > max_a) max_a = big * big;
    if (big * big > max_b) max_b = big * big;
    if (big * big > max_c) max_c = big * big;
    float *a = alloc_fill(max_a, 1), *b = alloc_fill(max_b, 2), *c = alloc_fill(max_c, 3);
    if (!a || !b || !c) {
        fprintf(stderr, "bench_gemm: out of memory\n");
        return 1;
    }

    shape ref = {"ref", 0, 0, (int)big, (int)big, (int)big};
    double t_ref = INFINITY;
    time_gemm(MPX_GEMM_OPENBLAS, &ref, a, b, c, 4, &t_ref);
    double ref_gf = 2.0 * big * big * big / t_ref * 1e-9;
    printf("# reference sgemm 2048^3 OpenBLAS: %.1f GFLOP/s\n", ref_gf);
    printf("%-17s %2s %7s %6s %7s | %9s %9s | %6s %-8s %-8s\n", "layer", "op", "M", "N", "K",
           "openblas", "onednn", "dnn/ob", "faster", "auto");

    /* Totals per pass type (NN, NT, TN): seconds for each library, and for the AUTO choice. */
    double tot[3][3] = {{0}};
    for (int i = 0; i < g_n; i++) {
        const shape *s = &g_shapes[i];
        double flop = 2.0 * s->m * s->n * s->k;
        double t_ob, t_dn;
        time_both(s, a, b, c, &t_ob, &t_dn);
        const char *pick = mpx_sgemm_choice(ctx, s->ta, s->tb, s->m, s->n, s->k);
        int kind = s->ta ? 2 : s->tb ? 1 : 0;
        tot[kind][0] += t_ob;
        tot[kind][1] += t_dn;
        tot[kind][2] += strcmp(pick, "onednn") == 0 ? t_dn : t_ob;
        printf("%-17s %c%c %7d %6d %7d | %9.1f %9.1f | %6.2f %-8s %-8s\n", s->tag,
               s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->m, s->n, s->k, flop / t_ob * 1e-9,
               flop / t_dn * 1e-9, t_ob / t_dn, t_dn < t_ob ? "onednn" : "openblas", pick);
        fflush(stdout);
    }
    static const char *kinds[3] = {"NN (forward)", "NT (backward data)", "TN (backward weights)"};
    printf("# total seconds over all %d shapes: openblas / onednn / auto\n", g_n);
    for (int k = 0; k < 3; k++)
        printf("#   %-22s %8.4f %8.4f %8.4f\n", kinds[k], tot[k][0], tot[k][1], tot[k][2]);
    t_ref = INFINITY;
    time_gemm(MPX_GEMM_OPENBLAS, &ref, a, b, c, 4, &t_ref);
    ref_gf = 2.0 * big * big * big / t_ref * 1e-9;
    printf("# reference sgemm 2048^3 OpenBLAS (end of run): %.1f GFLOP/s\n", ref_gf);
    free(a);
    free(b);
    free(c);
    return 0;
}
