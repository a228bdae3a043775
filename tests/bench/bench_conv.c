/* bench_conv.c — conv2d forward / backward-data / backward-weights GFLOP/s on ResNet-50 shapes.
 *
 * Shapes: every distinct (C, K, kernel, stride, H) of ResNet-50 v1.5 at 224x224 (batch 8) and
 * with the CIFAR stem (3x3/1, no max-pool, stage 1 at 32x32) at width 1 and 0.25 (batch 64).
 * Each pass is timed for every implementation (oneDNN on plain HWIO weights, oneDNN with the
 * weights layout it prefers plus the reorders, and one sgemm for 1x1 stride-1 convs) and for
 * AUTO, the rule in lib/ops/conv2d.c; speeds are also given as a ratio to an OpenBLAS 2048^3
 * sgemm measured in the same run. The oneDNN implementation name and weights layout are
 * printed per shape. Usage: bench_conv [threads] [224|cifar|cifar-w.25|all] [seconds per pass]
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
    const char *set;
    int n, h, c, k, ks, stride;
} conv_shape;

static double g_min_time = 0.2;

static float *alloc_fill(size_t n, uint64_t seed) {
    float *p = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
    if (p) mpx_test_uniform(p, n, -1.0f, 1.0f, seed);
    return p;
}

static double sgemm_reference_gflops(void) {
    const int n = 2048;
    float *a = alloc_fill((size_t)n * n, 1), *b = alloc_fill((size_t)n * n, 2);
    float *c = alloc_fill((size_t)n * n, 3);
    mpx_sgemm_force(ctx, MPX_GEMM_OPENBLAS);
    double best = INFINITY;
    for (int r = 0; r < 4; r++) {
        double t0 = mpx_now();
        mpx_sgemm(ctx, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double dt = mpx_now() - t0;
        if (r > 0 && dt < best) best = dt;
    }
    mpx_sgemm_force(ctx, MPX_GEMM_AUTO);
    free(a);
    free(b);
    free(c);
    return 2.0 * n * n * (double)n / best * 1e-9;
}

enum { MAX_SHAPES = 128, ROUNDS = 3 };
static conv_shape g_shapes[MAX_SHAPES];
static int g_n;

static void add(const char *set, int n, int h, int c, int k, int ks, int stride) {
    for (int i = 0; i < g_n; i++) {
        const conv_shape *s = &g_shapes[i];
        if (strcmp(s->set, set) == 0 && s->h == h && s->c == c && s->k == k && s->ks == ks &&
            s->stride == stride)
            return;
    }
    if (g_n < MAX_SHAPES) g_shapes[g_n++] = (conv_shape){set, n, h, c, k, ks, stride};
}

/* ResNet-50 v1.5 bottleneck convolutions: per stage the first block (1x1 reduce at the input
 * side, 3x3 with the stage's stride, 1x1 expand, 1x1 projection with the stride) and the
 * repeated blocks. side1 is the stage-1 spatial size; width scales every channel count. */
static void add_resnet(const char *set, int n, int side1, double width, int cifar_stem) {
    if (cifar_stem)
        add(set, n, side1, 3, (int)(64 * width), 3, 1);
    else
        add(set, n, 4 * side1, 3, (int)(64 * width), 7, 2);
    int in = (int)(64 * width), side = side1;
    for (int stage = 0; stage < 4; stage++) {
        int mid = (int)((64 << stage) * width), out = 4 * mid, stride = stage ? 2 : 1;
        int oside = side / stride;
        add(set, n, side, in, mid, 1, 1);         /* reduce */
        add(set, n, side, mid, mid, 3, stride);   /* 3x3, carries the stride (v1.5) */
        add(set, n, oside, mid, out, 1, 1);       /* expand */
        add(set, n, side, in, out, 1, stride);    /* projection shortcut */
        add(set, n, oside, out, mid, 1, 1);       /* reduce, later blocks */
        add(set, n, oside, mid, mid, 3, 1);       /* 3x3, later blocks */
        in = out;
        side = oside;
    }
}

/* Runs `pass` `reps` times and lowers *best to the fastest call; returns 0 on an error. */
static int time_pass(int pass, const mpx_conv2d_attr *a, const mpx_tensor *x, const mpx_tensor *w,
                     mpx_tensor *y, int reps, double *best) {
    for (int r = 0; r < reps; r++) {
        double t0 = mpx_now();
        mpx_status s = pass == 0 ? mpx_conv2d_forward_cpu(ctx, a, x, w, NULL, y)
                       : pass == 1
                           ? mpx_conv2d_backward_data_cpu(ctx, a, y, w, (mpx_tensor *)x)
                           : mpx_conv2d_backward_weights_cpu(ctx, a, y, x, (mpx_tensor *)w, NULL);
        double dt = mpx_now() - t0;
        if (s != MPX_OK) {
            fprintf(stderr, "bench_conv: %s\n", mpx_error_message());
            return 0;
        }
        if (dt < *best) *best = dt;
    }
    return 1;
}

static const char *const g_impl_name[] = {"auto", "hwio", "any", "sgemm"};

int main(int argc, char **argv) {
    ctx = mpx_cpu_ctx_create();
    if (!ctx) {
        fprintf(stderr, "FAIL: %s\n", mpx_error_message());
        return 1;
    }
    mpx_threads_set(argc > 1 ? atoi(argv[1]) : 0);
    const char *which = argc > 2 ? argv[2] : "all";
    if (argc > 3) g_min_time = atof(argv[3]);
    printf("# %s\n# %s\n# threads %d\n", mpx_blas_info(), mpx_dnnl_info(), mpx_threads_get());
    if (!strcmp(which, "all") || !strcmp(which, "224")) add_resnet("224-b8", 8, 56, 1.0, 0);
    if (!strcmp(which, "all") || !strcmp(which, "cifar")) add_resnet("32-b64", 64, 32, 1.0, 1);
    if (!strcmp(which, "all") || !strcmp(which, "cifar-w.25"))
        add_resnet("32-w.25-b64", 64, 32, 0.25, 1);
    double ref = sgemm_reference_gflops();
    printf("# reference sgemm 2048^3 OpenBLAS: %.1f GFLOP/s\n", ref);
    printf("# GFLOP/s per pass (fwd / bwd-data / bwd-weights); ratio = auto / reference sgemm\n");
    printf("%-12s %4s %3s %4s %4s %5s | %-23s %-23s %-23s | %-23s %-17s | %s\n", "set", "H", "C",
           "K", "k/s", "GFLOP", "hwio", "any", "sgemm", "auto", "auto/ref", "oneDNN (any): fwd | bwd-d | bwd-w");

    double tot[4][3] = {{0}}; /* seconds per implementation and pass, summed over shapes */
    for (int i = 0; i < g_n; i++) {
        const conv_shape *s = &g_shapes[i];
        int pad = s->ks / 2, oh = (s->h + 2 * pad - s->ks) / s->stride + 1;
        mpx_conv2d_attr at = {s->stride, s->stride, pad, pad};
        size_t nx = (size_t)s->n * s->h * s->h * s->c, nw = (size_t)s->ks * s->ks * s->c * s->k;
        size_t ny = (size_t)s->n * oh * oh * s->k;
        float *xd = alloc_fill(nx, 10), *wd = alloc_fill(nw, 11), *yd = alloc_fill(ny, 12);
        if (!xd || !wd || !yd) {
            fprintf(stderr, "bench_conv: out of memory\n");
            return 1;
        }
        mpx_tensor x = {MPX_F32, MPX_DEV_CPU, 4, {s->n, s->h, s->h, s->c}, xd};
        mpx_tensor w = {MPX_F32, MPX_DEV_CPU, 4, {s->ks, s->ks, s->c, s->k}, wd};
        mpx_tensor y = {MPX_F32, MPX_DEV_CPU, 4, {s->n, oh, oh, s->k}, yd};
        double gflop = 2.0 * s->n * oh * oh * (double)s->k * s->c * s->ks * s->ks * 1e-9;
        double gf[4][3], best[4][3];
        int gemm_shape = s->ks == 1 && s->stride == 1;
        /* The machine is shared: the implementations take turns over several rounds and each
         * keeps its fastest call, so a burst of outside load cannot favour one of them. The
         * first call of each (primitive creation, page faults) is not timed. */
        int reps = (int)(g_min_time / ROUNDS / (gflop / 300.0)) + 1;
        for (int round = -1; round < ROUNDS; round++)
            for (int impl = 0; impl < 4; impl++) {
                mpx_conv2d_force(ctx, (mpx_conv2d_impl)impl);
                for (int pass = 0; pass < 3; pass++) {
                    double t = INFINITY;
                    if (impl == MPX_CONV_SGEMM && !gemm_shape) continue;
                    if (!time_pass(pass, &at, &x, &w, &y, round < 0 ? 1 : reps, &t)) return 1;
                    if (round < 0) best[impl][pass] = INFINITY;
                    else if (t < best[impl][pass]) best[impl][pass] = t;
                }
            }
        for (int impl = 0; impl < 4; impl++)
            for (int pass = 0; pass < 3; pass++) {
                int skip = impl == MPX_CONV_SGEMM && !gemm_shape;
                gf[impl][pass] = skip ? NAN : gflop / best[impl][pass];
                if (!skip) tot[impl][pass] += best[impl][pass];
            }
        /* Shapes that cannot run as one GEMM count with their oneDNN time in the sgemm total. */
        if (!gemm_shape)
            for (int pass = 0; pass < 3; pass++)
                tot[MPX_CONV_SGEMM][pass] += gflop / gf[MPX_CONV_AUTO][pass];
        char names[3][160];
        mpx_conv2d_force(ctx, MPX_CONV_ONEDNN_ANY);
        for (int pass = 0; pass < 3; pass++)
            if (mpx_conv2d_describe(ctx, (mpx_conv2d_pass)pass, &at, &x, &w, 0, names[pass], 160) !=
                MPX_OK)
                snprintf(names[pass], 160, "? (%s)", mpx_error_message());
        mpx_conv2d_force(ctx, MPX_CONV_AUTO);
        char cols[4][32];
        for (int impl = 0; impl < 4; impl++)
            snprintf(cols[impl], 32, "%6.0f %6.0f %6.0f", gf[impl][0], gf[impl][1], gf[impl][2]);
        printf("%-12s %4d %3d %4d %2d/%d %5.2f | %-23s %-23s %-23s | %-23s %4.2f %4.2f %4.2f    | "
               "%s | %s | %s\n",
               s->set, s->h, s->c, s->k, s->ks, s->stride, gflop, cols[1], cols[2], cols[3],
               cols[0], gf[0][0] / ref, gf[0][1] / ref, gf[0][2] / ref, names[0],
               names[1], names[2]);
        fflush(stdout);
        free(xd);
        free(wd);
        free(yd);
        mpx_conv2d_cache_clear(ctx); /* keep memory bounded: each shape's buffers go */
    }
    printf("# total seconds over all %d shapes, fwd / bwd-data / bwd-weights / sum:\n", g_n);
    for (int impl = 0; impl < 4; impl++)
        printf("#   %-6s %8.4f %8.4f %8.4f %8.4f\n", g_impl_name[impl], tot[impl][0], tot[impl][1],
               tot[impl][2], tot[impl][0] + tot[impl][1] + tot[impl][2]);
    printf("# reference sgemm 2048^3 OpenBLAS (end of run): %.1f GFLOP/s\n",
           sgemm_reference_gflops());
    return 0;
}
