/* test_graph_gradcheck.c — the whole graph's backward against finite differences (docs/design.md §10
 * rung 5), in fp32, on a tiny residual network that exercises every op of the ResNet family:
 * conv (with and without bias), batch-norm, ReLU, max-pool, a fan-out merged by add, SSD's
 * L2-norm, global average pool, linear and softmax cross-entropy.
 *
 * The graph runs in FP32, so the finite differences are taken of an FP32 loss: central
 * differences with h = 1e-2 on parameters of magnitude ~0.3 have truncation error O(h^2) ~ 1e-4
 * relative and rounding noise ~ 1e-7 * |L| / h ~ 1e-5 absolute; the difference at h/4 is
 * compared, with |fd - g| <= 2e-3 + 3e-2 |g|, which covers both with margin while a wrong
 * gradient (a missing term, a transposed index, a wrong scale) is off by O(|g|). Elements whose
 * interval straddles a ReLU or max-pool kink would break any tolerance; they are detected (the
 * differences at h and h/4 disagree) and skipped, and the test requires that almost all
 * sampled elements were checked.
 * A second graph fans one tensor out to 24 consumers (BERT-base's attention mask feeds 12
 * layers, BERT-large's 24): the merged gradient against finite differences, and the 33rd
 * consumer refused with a message.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/graph.h"
#include "mpx/rng.h"
#include "testutil.h"

enum { B = 4, H = 6, W = 6, C = 3, K = 5 };

static mpx_graph *build(int *image, int *labels) {
    mpx_graph *g = mpx_graph_new();
    int64_t xs[4] = {B, H, W, C}, ls[1] = {B};
    *image = mpx_g_input(g, "image", MPX_INPUT_DATA, 4, xs);
    *labels = mpx_g_input(g, "labels", MPX_INPUT_LABELS, 1, ls);
    int x = mpx_g_conv2d(g, "conv1", *image, 6, 3, 3, 1, 1, 1);
    x = mpx_g_batchnorm(g, "bn1", x, 1e-5f, 0.1f, 1.0f);
    int r = mpx_g_relu(g, "relu1", x); /* fans out to conv2 and the shortcut */
    int y = mpx_g_conv2d(g, "conv2", r, 6, 3, 3, 1, 1, 0);
    y = mpx_g_batchnorm(g, "bn2", y, 1e-5f, 0.1f, 0.5f);
    /* (its rows, 6 batch-normalised channels, have norms ~1: no curvature the differences
     * could not follow) */
    y = mpx_g_l2norm(g, "l2norm", y, 1e-10f, 1.0f);
    y = mpx_g_add(g, "add", y, r);
    y = mpx_g_relu(g, "relu2", y);
    y = mpx_g_maxpool2d(g, "pool", y, 2, 2, 0);
    y = mpx_g_conv2d(g, "conv3", y, 4, 1, 1, 1, 0, 0);
    y = mpx_g_avgpool_global(g, "gap", y);
    y = mpx_g_linear(g, "fc", y, K, 1);
    mpx_g_softmax_ce(g, "loss", y, *labels);
    return g;
}

static float loss_at(mpx_graph *g) {
    CHECK_OK(mpx_graph_forward(g, 1));
    return mpx_graph_loss(g);
}

/* image [B, 6] -> stem linear [B, 6] -> FANOUT relus (stem's output has FANOUT consumers), each
 * scaled differently by its own linear, summed by a chain of adds -> linear [B, K] -> loss. */
enum { FANOUT = 24 };
static void fanout_gradcheck(void) {
    mpx_graph *g = mpx_graph_new();
    int64_t xs[2] = {B, 6}, ls[1] = {B};
    int image = mpx_g_input(g, "image", MPX_INPUT_DATA, 2, xs);
    int labels = mpx_g_input(g, "labels", MPX_INPUT_LABELS, 1, ls);
    int stem = mpx_g_linear(g, "stem", image, 6, 1);
    int sum = -1;
    for (int i = 0; i < FANOUT; i++) {
        char name[32], relu[40];
        snprintf(name, sizeof name, "branch%d", i);
        snprintf(relu, sizeof relu, "branch%d.relu", i);
        int b = mpx_g_linear(g, name, mpx_g_relu(g, relu, stem), 6, 0);
        snprintf(name, sizeof name, "sum%d", i);
        sum = sum < 0 ? b : mpx_g_add(g, name, sum, b);
    }
    mpx_g_softmax_ce(g, "loss", mpx_g_linear(g, "fc", sum, K, 1), labels);
    REQUIRE_VOID(mpx_graph_status(g) == MPX_OK, "fan-out build: %s", mpx_error_message());
    mpx_precision p;
    mpx_precision_init(&p, "fp32", "rne", 0);
    REQUIRE_VOID(mpx_graph_compile(g, &p, MPX_DEV_CPU, 11) == MPX_OK, "compile: %s", mpx_error_message());
    float x[B * 6];
    int32_t y[B] = {1, 0, 4, 2};
    mpx_test_normal(x, B * 6, 0, 1, 5);
    CHECK_OK(mpx_graph_set_input(g, image, x, MPX_F32, B * 6));
    CHECK_OK(mpx_graph_set_input(g, labels, y, MPX_I32, B));
    CHECK_OK(mpx_graph_forward(g, 1));
    mpx_backward_opts bo = {NULL, 1.0, 0, NULL};
    int64_t nonfinite = -1;
    CHECK_OK(mpx_graph_backward(g, &bo, &nonfinite));
    mpx_param *w = mpx_graph_param(g, 0); /* stem.weight: its gradient sums all 24 branches */
    REQUIRE_VOID(strcmp(w->name, "stem.weight") == 0, "first parameter is %s", w->name);
    float grad[36];
    memcpy(grad, w->grad, sizeof grad);
    int checked = 0;
    for (int k = 0; k < 36; k++) {
        const float h = 2.5e-3f, w0 = w->master[k];
        w->master[k] = w0 + h;
        float lp = loss_at(g);
        w->master[k] = w0 - h;
        float lm = loss_at(g);
        w->master[k] = w0;
        double fd = ((double)lp - lm) / (2.0 * h);
        checked++;
        CHECK(fabs(fd - grad[k]) <= 2e-3 + 3e-2 * fabs(grad[k]),
              "fan-out: stem.weight[%d]: backward %.6g, finite differences %.6g", k, grad[k], fd);
    }
    printf("fan-out to %d consumers: %d gradient elements checked\n", FANOUT, checked);
    mpx_graph_free(g);

    /* One consumer too many: refused, naming the tensor. */
    g = mpx_graph_new();
    int in = mpx_g_input(g, "image", MPX_INPUT_DATA, 2, xs);
    for (int i = 0; i < 33; i++) {
        char name[16];
        snprintf(name, sizeof name, "r%d", i);
        mpx_g_relu(g, name, in);
    }
    CHECK(mpx_graph_status(g) != MPX_OK && strstr(mpx_error_message(), "more than 32 consumers") &&
              strstr(mpx_error_message(), "'image'"),
          "33 consumers: status %d, message '%s'", mpx_graph_status(g), mpx_error_message());
    mpx_graph_free(g);
}

int main(void) {
    fanout_gradcheck();
    int image, labels;
    mpx_graph *g = build(&image, &labels);
    REQUIRE(mpx_graph_status(g) == MPX_OK, "build: %s", mpx_error_message());
    mpx_precision p;
    mpx_precision_init(&p, "fp32", "rne", 0);
    REQUIRE(mpx_graph_compile(g, &p, MPX_DEV_CPU, 7) == MPX_OK, "compile: %s", mpx_error_message());

    float x[B * H * W * C];
    int32_t y[B] = {0, 3, 1, 4};
    mpx_test_normal(x, B * H * W * C, 0, 1, 3);
    CHECK_OK(mpx_graph_set_input(g, image, x, MPX_F32, B * H * W * C));
    CHECK_OK(mpx_graph_set_input(g, labels, y, MPX_I32, B));
    /* Non-trivial batch-norm parameters so their gradients are tested at a generic point. */
    for (int i = 0; i < mpx_graph_n_params(g); i++) {
        mpx_param *pp = mpx_graph_param(g, i);
        if (pp->role == MPX_ROLE_NORM_PARAM)
            for (int64_t k = 0; k < pp->numel; k++) pp->master[k] += 0.2f * mpx_rand_normal(9, MPX_RNG_TEST, (uint64_t)(i * 100 + k));
    }
    CHECK_OK(mpx_graph_sync_weights(g, 0));

    CHECK_OK(mpx_graph_forward(g, 1));
    mpx_backward_opts bo = {NULL, 1.0, 0, NULL};
    int64_t nonfinite = -1;
    CHECK_OK(mpx_graph_backward(g, &bo, &nonfinite));
    CHECK(nonfinite == 0, "non-finite gradients: %lld", (long long)nonfinite);

    int checked = 0, skipped = 0;
    const float h = 1e-2f;
    for (int i = 0; i < mpx_graph_n_params(g); i++) {
        mpx_param *pp = mpx_graph_param(g, i);
        float *grad = malloc((size_t)pp->numel * sizeof *grad);
        memcpy(grad, pp->grad, (size_t)pp->numel * sizeof *grad);
        int samples = pp->numel < 12 ? (int)pp->numel : 12;
        for (int s = 0; s < samples; s++) {
            int64_t k = pp->numel <= 12 ? s : (int64_t)(mpx_rand_u32(21, MPX_RNG_TEST, (uint64_t)(i * 50 + s)) % (uint32_t)pp->numel);
            float w0 = pp->master[k];
            double fd[2];
            for (int r = 0; r < 2; r++) {
                float hr = r == 0 ? h : h / 4;
                pp->master[k] = w0 + hr;
                float lp = loss_at(g);
                pp->master[k] = w0 - hr;
                float lm = loss_at(g);
                pp->master[k] = w0;
                fd[r] = ((double)lp - lm) / (2.0 * hr);
            }
            /* Smooth: the two central differences agree to O(h^2). A ReLU / max-pool kink
             * inside the interval makes them disagree; skip those. */
            if (fabs(fd[0] - fd[1]) > 1e-3 + 1e-2 * fabs(fd[1])) {
                skipped++;
                continue;
            }
            checked++;
            CHECK(fabs(fd[1] - grad[k]) <= 2e-3 + 3e-2 * fabs(grad[k]),
                  "%s[%lld]: backward %.6g, finite differences %.6g (h) %.6g (h/4)", pp->name,
                  (long long)k, grad[k], fd[0], fd[1]);
        }
        free(grad);
    }
    printf("gradcheck: %d elements checked, %d skipped at kinks\n", checked, skipped);
    CHECK(checked >= 60 && skipped * 10 <= checked, "too few elements checked (%d, %d skipped)",
          checked, skipped);
    mpx_graph_free(g);
    return mpx_test_done(__FILE__);
}
