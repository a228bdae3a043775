/* test_ops_lowprec.c — every op of the ResNet family in fp16 and bf16 storage against fp32
 * (docs/design.md §10 rung 2), one op at a time, through the executor (which is where the low
 * precision lives: ops compute in FP32 on decoded values, results are rounded on write).
 *
 * Each op sits between a linear "pre" layer (so its input has a gradient) and a linear "post"
 * layer feeding the loss. Compared with the fp32 run, as relative L2 errors:
 *   the op's output value — its input was rounded once (relative error <= u, the unit
 *   roundoff: FP16 2^-11, BF16 2^-8) and its output once more, so for ops with a condition
 *   number ~1 the error is ~sqrt(2) u; the bound is 4u;
 *   the gradient at the op's input and its parameter gradients — the gradient arriving from
 *   `post` was rounded, the op's result is rounded, and the forward values it uses carry their
 *   own rounding: ~2u, bound 8u.
 * Max-pool is tested on inputs without ties (a tie changes which position receives the
 * gradient — a discrete effect, not a rounding error). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/graph.h"
#include "testutil.h"

enum { B = 4, H = 6, W = 6, C = 8 };

typedef enum { T_CONV, T_BN, T_RELU, T_MAXPOOL, T_AVGPOOL, T_LINEAR, T_ADD, T_CE, T_COUNT } op_t;
static const char *const g_names[T_COUNT] = {"conv2d", "batchnorm", "relu", "maxpool2d",
                                             "avgpool", "linear", "add", "softmax_ce"};

/* x [B,H,W,C] -> pre (1x1 conv) -> OP -> gap/flatten -> post (linear) -> CE. For softmax_ce
 * the op is the loss itself. Returns the graph; *op_in, *op_out are the op's tensors. */
static mpx_graph *build(op_t op, const char *mode, int *image, int *labels, int *op_in, int *op_out) {
    mpx_graph *g = mpx_graph_new();
    int64_t xs[4] = {B, H, W, C}, ls[1] = {B};
    *image = mpx_g_input(g, "image", MPX_INPUT_DATA, 4, xs);
    *labels = mpx_g_input(g, "labels", MPX_INPUT_LABELS, 1, ls);
    int x = mpx_g_conv2d(g, "pre", *image, C, 1, 1, 1, 0, 1);
    *op_in = x;
    int y = x;
    switch (op) {
    case T_CONV: y = mpx_g_conv2d(g, "op", x, C, 3, 3, 1, 1, 1); break;
    case T_BN: y = mpx_g_batchnorm(g, "op", x, 1e-5f, 0.1f, 1.0f); break;
    case T_RELU: y = mpx_g_relu(g, "op", x); break;
    case T_MAXPOOL: y = mpx_g_maxpool2d(g, "op", x, 3, 2, 1); break;
    case T_AVGPOOL: y = mpx_g_avgpool_global(g, "op", x); break;
    case T_LINEAR: y = mpx_g_linear(g, "op", x, C, 1); break;
    case T_ADD: {
        int z = mpx_g_conv2d(g, "pre2", *image, C, 1, 1, 1, 0, 0);
        y = mpx_g_add(g, "op", x, z);
        break;
    }
    case T_CE:
    case T_COUNT: break;
    }
    *op_out = y;
    if (op == T_CE) {
        int f = mpx_g_avgpool_global(g, "gap", x);
        int z = mpx_g_linear(g, "post", f, 5, 1);
        *op_in = z;
        *op_out = mpx_g_softmax_ce(g, "loss", z, *labels);
    } else {
        if (op != T_AVGPOOL) y = mpx_g_avgpool_global(g, "gap", y);
        y = mpx_g_linear(g, "post", y, 5, 1);
        mpx_g_softmax_ce(g, "loss", y, *labels);
    }
    mpx_graph_keep_grads(g, 1);
    mpx_precision p;
    mpx_precision_init(&p, mode, "rne", 0);
    CHECK_OK(mpx_graph_compile(g, &p, MPX_DEV_CPU, 21));
    return g;
}

static int64_t numel(const mpx_graph *g, int t) {
    int64_t s[4];
    int nd = mpx_graph_tensor_shape(g, t, s);
    return mpx_shape_numel(nd, s);
}

static double rel_err(const float *a, const float *ref, int64_t n) {
    double *d = malloc((size_t)n * sizeof *d);
    for (int64_t i = 0; i < n; i++) d[i] = ref[i];
    double e = mpx_test_rel_l2(a, d, (size_t)n);
    free(d);
    return e;
}

static void compare(op_t op, const char *mode, double u) {
    int image, labels, in32, out32, inlp, outlp;
    mpx_graph *a = build(op, "fp32", &image, &labels, &in32, &out32);
    mpx_graph *b = build(op, mode, &image, &labels, &inlp, &outlp);
    float x[B * H * W * C];
    int32_t y[B] = {0, 3, 1, 4};
    /* Distinct values on a grid of 1/64 plus noise: no max-pool ties after rounding. */
    mpx_test_normal(x, B * H * W * C, 0, 1, 31);
    for (int i = 0; i < B * H * W * C; i++) x[i] += (float)((i * 37) % 101) / 64.0f;
    mpx_graph *gs[2] = {a, b};
    mpx_scaling_cfg none;
    mpx_scaling_defaults(&none);
    mpx_backward_opts bo = {&none, 1.0, 0, NULL};
    for (int k = 0; k < 2; k++) {
        CHECK_OK(mpx_graph_set_input(gs[k], image, x, MPX_F32, B * H * W * C));
        CHECK_OK(mpx_graph_set_input(gs[k], labels, y, MPX_I32, B));
        CHECK_OK(mpx_graph_forward(gs[k], 1));
        int64_t nf;
        CHECK_OK(mpx_graph_backward(gs[k], &bo, &nf));
    }
    int64_t n = numel(a, out32), ni = numel(a, in32);
    float *va = malloc((size_t)n * sizeof *va), *vb = malloc((size_t)n * sizeof *vb);
    float *ga = malloc((size_t)ni * sizeof *ga), *gb = malloc((size_t)ni * sizeof *gb);
    CHECK_OK(mpx_graph_read(a, out32, va));
    CHECK_OK(mpx_graph_read(b, outlp, vb));
    double ev = rel_err(vb, va, n);
    CHECK_OK(mpx_graph_read_grad(a, in32, ga));
    CHECK_OK(mpx_graph_read_grad(b, inlp, gb));
    double eg = rel_err(gb, ga, ni), ep = 0;
    for (int i = 0; i < mpx_graph_n_params(a); i++) {
        mpx_param *p = mpx_graph_param(a, i), *q = mpx_graph_param(b, i);
        if (strncmp(p->name, "op.", 3) != 0) continue;
        double e = rel_err(q->grad, p->grad, p->numel);
        if (e > ep) ep = e;
    }
    printf("%-5s %-10s value %.2fu  input gradient %.2fu  parameter gradients %.2fu\n", mode,
           g_names[op], ev / u, eg / u, ep / u);
    CHECK(ev <= 4 * u, "%s %s: output relative error %.3g > 4u", mode, g_names[op], ev);
    /* And the storage really is low precision: rounding the input alone moves the output. */
    CHECK(ev >= 0.1 * u, "%s %s: output equals fp32 (%.3g): nothing was rounded", mode, g_names[op], ev);
    CHECK(eg <= 8 * u, "%s %s: input-gradient relative error %.3g > 8u", mode, g_names[op], eg);
    CHECK(ep <= 8 * u, "%s %s: parameter-gradient relative error %.3g > 8u", mode, g_names[op], ep);
    free(va);
    free(vb);
    free(ga);
    free(gb);
    mpx_graph_free(a);
    mpx_graph_free(b);
}

int main(void) {
    for (int op = 0; op < T_COUNT; op++) {
        compare((op_t)op, "fp16", ldexp(1.0, -11));
        compare((op_t)op, "bf16", ldexp(1.0, -8));
    }
    return mpx_test_done(__FILE__);
}
