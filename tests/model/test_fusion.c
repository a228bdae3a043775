/* test_fusion.c — fusion (graph_compile.c: plan_fusion) changes nothing that training computes:
 * ReLUs fused into the batch-norm or residual add before them, and add inputs that take the
 * add's output gradient as their own (plan_shared_grads) instead of a copy.
 *
 * 1. Whole trainings (train_trace.h: a ResNet-20 with the ImageNet stem, an SSD with a ResNet-18
 *    trunk and a one-layer BERT, 4 steps, statistics on odd steps) with and without fusion
 *    agree in every bit — each step's loss, non-finite count and gradient norm, every
 *    statistics row, the final weights — in fp32, fp16 (no scaling, dynamic, adaptive,
 *    adaptive-quantile, stochastic rounding), bf16 and tf32. With fusion the known
 *    architecture's ReLUs are fused (the ResNet-20: its stem and two per basic block, 19) and
 *    its add inputs share (each block's last batch-norm, and the 2 downsampling shortcuts: 11;
 *    the identity shortcuts are read by the next block too); the activation memory shrinks by
 *    the fused-away values and the gradient memory does not grow.
 * 2. The values themselves: a conv -> batch-norm -> ReLU and an add -> ReLU graph, training and
 *    eval forward, fp32 and fp16: the ReLU outputs of the fused graph equal the unfused ones as
 *    numbers (bits, but for the sign of a zero: a negative result that FP16 rounds to -0 passes
 *    the unfused ReLU as -0 and is stored as +0 fused, see plan_fusion), and reading a
 *    fused-away value is refused with a message that names it.
 */
#include <stdlib.h>
#include <string.h>

#include "mpx/backend.h"
#include "testutil.h"
#include "train_trace.h"

/* expect_fused / expect_shared: the exact count, or -1 for "at least one". */
static void compare_fusion(const variant *v, int expect_fused, int expect_shared) {
    variant u = *v;
    u.unfused = 1;
    trace a, b;
    run(&u, mpx_backend_cpu(), &a);
    run(v, mpx_backend_cpu(), &b);
    char what[128];
    snprintf(what, sizeof what, "%s %s %s %s: unfused vs fused", v->model, v->mode, v->scaling,
             v->rounding);
    printf("%s: loss %.6f -> %.6f; %d ReLUs fused, %d add inputs share the gradient; values "
           "%.1f -> %.1f KiB, gradients %.1f -> %.1f KiB\n", what, (double)b.loss[0],
           (double)b.loss[STEPS - 1], b.n_fused, b.n_shared, a.value_bytes / 1024.0,
           b.value_bytes / 1024.0, a.grad_bytes / 1024.0, b.grad_bytes / 1024.0);
    CHECK(a.n_fused == 0 && a.n_shared == 0, "%s: with fusion off %d ReLUs fused, %d shared",
          what, a.n_fused, a.n_shared);
    CHECK(expect_fused < 0 ? b.n_fused > 0 : b.n_fused == expect_fused,
          "%s: %d ReLUs fused, expected %d", what, b.n_fused, expect_fused);
    CHECK(expect_shared < 0 ? b.n_shared > 0 : b.n_shared == expect_shared,
          "%s: %d add inputs share the gradient, expected %d", what, b.n_shared, expect_shared);
    CHECK(b.n_fused ? b.value_bytes < a.value_bytes : b.value_bytes == a.value_bytes,
          "%s: activation values %zu bytes fused, %zu unfused", what, b.value_bytes,
          a.value_bytes);
    CHECK(b.grad_bytes <= a.grad_bytes, "%s: gradients %zu bytes fused, %zu unfused", what,
          b.grad_bytes, a.grad_bytes);
    compare_traces(what, &a, &b);
    trace_free(&a);
    trace_free(&b);
}

/* image [2,6,6,3] -> conv 3x3 (8) -> bn -> relu -> (+ conv 1x1 (8) of the image) -> relu ->
 * avgpool -> linear -> loss. Returns the graph compiled in `mode`; tensor ids by name. */
static mpx_graph *small_graph(const char *mode, int fuse, int *image, int *labels) {
    mpx_graph *g = mpx_graph_new();
    const int64_t xs[4] = {2, 6, 6, 3}, ls[1] = {2};
    *image = mpx_g_input(g, "image", MPX_INPUT_DATA, 4, xs);
    *labels = mpx_g_input(g, "labels", MPX_INPUT_LABELS, 1, ls);
    int c = mpx_g_conv2d(g, "conv", *image, 8, 3, 3, 1, 1, 0);
    int y = mpx_g_relu(g, "relu", mpx_g_batchnorm(g, "bn", c, 1e-5f, 0.1f, 1.0f));
    int s = mpx_g_conv2d(g, "short", *image, 8, 1, 1, 1, 0, 0);
    y = mpx_g_relu(g, "relu2", mpx_g_add(g, "add", y, s));
    y = mpx_g_linear(g, "fc", mpx_g_avgpool_global(g, "gap", y), 4, 1);
    mpx_g_softmax_ce(g, "loss", y, *labels);
    mpx_graph_fuse(g, fuse);
    mpx_precision p;
    mpx_precision_init(&p, mode, "rne", 0);
    CHECK_OK(mpx_graph_compile(g, &p, MPX_DEV_CPU, 7));
    return g;
}

static void compare_values(const char *mode, int training) {
    mpx_graph *g[2];
    int image = -1, labels = -1;
    float x[2 * 6 * 6 * 3];
    const int32_t y[2] = {1, 3};
    /* Centred inputs: about half of every batch-norm and add result is negative. */
    mpx_test_normal(x, sizeof x / sizeof *x, 0, 1, 17);
    for (int k = 0; k < 2; k++) {
        g[k] = small_graph(mode, k, &image, &labels);
        CHECK_OK(mpx_graph_set_input(g[k], image, x, MPX_F32, (int64_t)(sizeof x / sizeof *x)));
        CHECK_OK(mpx_graph_set_input(g[k], labels, y, MPX_I32, 2));
        CHECK_OK(mpx_graph_forward(g[k], training));
    }
    CHECK(mpx_graph_n_fused(g[0]) == 0 && mpx_graph_n_fused(g[1]) == 2,
          "%s: %d and %d ReLUs fused (expected 0 and 2)", mode, mpx_graph_n_fused(g[0]),
          mpx_graph_n_fused(g[1]));
    static const char *const relus[] = {"relu", "relu2"}, *const elided[] = {"bn", "add"};
    float a[2 * 6 * 6 * 8], b[2 * 6 * 6 * 8];
    const int n = 2 * 6 * 6 * 8;
    for (int r = 0; r < 2; r++) {
        int t = mpx_graph_find_tensor(g[0], relus[r]);
        CHECK_OK(mpx_graph_read(g[0], t, a));
        CHECK_OK(mpx_graph_read(g[1], t, b));
        int differ = 0, zeros = 0, positive = 0;
        for (int i = 0; i < n; i++) {
            differ += !(a[i] == b[i]);
            zeros += a[i] == 0;
            positive += a[i] > 0;
        }
        CHECK(differ == 0, "%s %s: %d of %d %s values differ fused", mode,
              training ? "training" : "eval", differ, n, relus[r]);
        CHECK(zeros > n / 8 && positive > n / 8, "%s %s: the inputs exercise both sides of %s "
              "(%d zeros, %d positive)", mode, training ? "training" : "eval", relus[r], zeros,
              positive);
        /* The unfused graph stores the fused-away value; the fused one refuses to read it. */
        int e = mpx_graph_find_tensor(g[0], elided[r]);
        CHECK_OK(mpx_graph_read(g[0], e, a));
        CHECK(mpx_graph_read(g[1], e, b) == MPX_ERR_INPUT &&
                  strstr(mpx_error_message(), elided[r]) && strstr(mpx_error_message(), "fused"),
              "%s: reading the fused-away '%s': %s", mode, elided[r], mpx_error_message());
    }
    mpx_graph_free(g[0]);
    mpx_graph_free(g[1]);
}

int main(void) {
    static const variant vs[] = {
        {"resnet", "fp32", "none", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "fp16", "none", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "fp16", "dynamic", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "fp16", "adaptive", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "fp16", "adaptive-quantile", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "fp16", "adaptive", "stochastic", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "bf16", "none", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "tf32", "none", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"ssd", "fp16", "adaptive", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"ssd", "bf16", "dynamic", "stochastic", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"bert", "fp16", "adaptive-quantile", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"bert", "bf16", "dynamic", "stochastic", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "fp16", "adaptive", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 1, 0},
        {"resnet", "fp16", "dynamic", "stochastic", 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) {
        const int resnet = strcmp(vs[i].model, "resnet") == 0, bert = strcmp(vs[i].model, "bert") == 0;
        compare_fusion(&vs[i], resnet ? 19 : bert ? 0 : -1, resnet ? 11 : -1);
    }
    static const char *const modes[] = {"fp32", "fp16", "bf16"};
    for (int m = 0; m < 3; m++)
        for (int training = 0; training < 2; training++) compare_values(modes[m], training);
    return mpx_test_done(__FILE__);
}
