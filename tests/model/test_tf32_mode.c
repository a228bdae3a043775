/* test_tf32_mode.c — precision.mode = tf32 through the executor: FP32 storage, and every operand
 * of a convolution or linear layer rounded to TF32 (RNE) before the operator reads it, forward
 * and backward, as TF32 tensor cores read FP32 data.
 *
 * A small graph (conv 3x3 with bias -> reshape -> linear with bias -> softmax cross-entropy) is
 * compiled in tf32 mode on the CPU, and each GEMM-family result is compared with the CPU
 * operator run by hand on TF32-rounded operands: the conv and linear outputs, the gradient the
 * linear layer passes back, and both weight gradients must have the same bits (the operators are
 * deterministic, and the executor must feed them exactly those operands; the bias is added
 * unrounded, as tensor-core GEMMs add it in FP32). The same graph in fp32 mode must differ (the
 * inputs are not TF32 values), so the rounding is really there; and a ResNet in tf32 mode
 * trains (tests/model/test_resnet.c covers its loss falling). Also: loss scaling is refused in
 * tf32 mode by the config (it stores FP32), which tests/integration covers with the fp32 rule.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/graph.h"
#include "mpx/numerics.h"
#include "mpx/ops.h"
#include "mpx/rng.h"
#include "testutil.h"

/* The CPU operators' context the ops under test run on (made in main). */
static mpx_cpu_ctx *ctx;

enum { N = 2, S = 5, C = 3, K = 4, OUT = 5 };

typedef struct {
    mpx_graph *g;
    int image, conv, flat, fc;
} net;

static net build(const char *mode) {
    net t = {mpx_graph_new(), 0, 0, 0, 0};
    int64_t xs[4] = {N, S, S, C}, ls[1] = {N}, fs[2] = {N, S * S * K};
    t.image = mpx_g_input(t.g, "image", MPX_INPUT_DATA, 4, xs);
    int labels = mpx_g_input(t.g, "labels", MPX_INPUT_I32, 1, ls);
    t.conv = mpx_g_conv2d(t.g, "c", t.image, K, 3, 3, 1, 1, 1);
    t.flat = mpx_g_reshape(t.g, "flat", t.conv, 2, fs);
    t.fc = mpx_g_linear(t.g, "fc", t.flat, OUT, 1);
    mpx_g_softmax_ce(t.g, "loss", t.fc, labels);
    mpx_graph_keep_grads(t.g, 1);
    mpx_precision p;
    CHECK(mpx_precision_init(&p, mode, "rne", 0) == 0, "mode %s", mode);
    CHECK_OK(mpx_graph_compile(t.g, &p, MPX_DEV_CPU, 9));
    float x[N * S * S * C];
    mpx_test_normal(x, N * S * S * C, 0, 1, 3);
    const int32_t y[N] = {1, 4};
    CHECK_OK(mpx_graph_set_input(t.g, t.image, x, MPX_F32, N * S * S * C));
    CHECK_OK(mpx_graph_set_input(t.g, labels, y, MPX_I32, N));
    return t;
}

static const mpx_param *param(mpx_graph *g, const char *name) {
    for (int i = 0; i < mpx_graph_n_params(g); i++)
        if (strcmp(mpx_graph_param(g, i)->name, name) == 0) return mpx_graph_param(g, i);
    CHECK(0, "no parameter %s", name);
    return NULL;
}

/* A host tensor over a copy of `src` (n floats), rounded to TF32 when `tf32`. */
static mpx_tensor host(int ndim, const int64_t *shape, const float *src, int tf32) {
    mpx_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = MPX_F32;
    t.device = MPX_DEV_CPU;
    t.ndim = ndim;
    memcpy(t.shape, shape, (size_t)ndim * sizeof *shape);
    const int64_t n = mpx_shape_numel(ndim, shape);
    float *d = malloc((size_t)n * sizeof *d);
    for (int64_t i = 0; i < n; i++) d[i] = tf32 ? mpx_round_tf32(src[i]) : src[i];
    t.data = d;
    return t;
}

static mpx_tensor empty(int ndim, const int64_t *shape) {
    float zero = 0;
    mpx_tensor t = host(1, (int64_t[]){1}, &zero, 0);
    free(t.data);
    t.ndim = ndim;
    memcpy(t.shape, shape, (size_t)ndim * sizeof *shape);
    t.data = calloc((size_t)mpx_shape_numel(ndim, shape), sizeof(float));
    return t;
}

static void expect_same(const char *what, const float *got, const mpx_tensor *want) {
    const int64_t n = mpx_tensor_numel(want);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &((const float *)want->data)[i], sizeof(float)) != 0 && bad++ == 0)
            first = i;
    CHECK(bad == 0, "%s: %lld of %lld elements differ (first [%lld]: %.9g vs %.9g)", what,
          (long long)bad, (long long)n, (long long)first, first >= 0 ? (double)got[first] : 0.0,
          first >= 0 ? (double)((const float *)want->data)[first] : 0.0);
}

static void test_operands_rounded(void) {
    net t = build("tf32");
    CHECK_OK(mpx_graph_forward(t.g, 1));
    mpx_backward_opts bo = {NULL, 1.0, 0, NULL};
    int64_t nf = -1;
    CHECK_OK(mpx_graph_backward(t.g, &bo, &nf));
    CHECK(nf == 0, "non-finite gradients");

    const int64_t xs[4] = {N, S, S, C}, ws[4] = {3, 3, C, K}, bs[1] = {K}, ys[4] = {N, S, S, K};
    const int64_t fs[2] = {N, S * S * K}, fws[2] = {S * S * K, OUT}, fbs[1] = {OUT},
                  os[2] = {N, OUT};
    float *x = malloc(sizeof(float) * N * S * S * C), *yc = malloc(sizeof(float) * N * S * S * K);
    float *yf = malloc(sizeof(float) * N * OUT), *dyf = malloc(sizeof(float) * N * OUT);
    float *dyc = malloc(sizeof(float) * N * S * S * K);
    CHECK_OK(mpx_graph_read(t.g, t.image, x));
    CHECK_OK(mpx_graph_read(t.g, t.conv, yc));
    CHECK_OK(mpx_graph_read(t.g, t.fc, yf));
    CHECK_OK(mpx_graph_read_grad(t.g, t.fc, dyf));
    CHECK_OK(mpx_graph_read_grad(t.g, t.conv, dyc));
    const mpx_param *cw = param(t.g, "c.weight"), *cb = param(t.g, "c.bias");
    const mpx_param *fw = param(t.g, "fc.weight"), *fb = param(t.g, "fc.bias");

    /* forward: conv and linear on rounded operands, the bias as it is */
    mpx_conv2d_attr at = {1, 1, 1, 1};
    mpx_tensor hx = host(4, xs, x, 1), hw = host(4, ws, cw->master, 1),
               hb = host(1, bs, cb->master, 0), hy = empty(4, ys);
    CHECK_OK(mpx_conv2d_forward_cpu(ctx, &at, &hx, &hw, &hb, &hy));
    expect_same("conv forward", yc, &hy);
    mpx_tensor hf = host(2, fs, yc, 1), hfw = host(2, fws, fw->master, 1),
               hfb = host(1, fbs, fb->master, 0), hyf = empty(2, os);
    CHECK_OK(mpx_linear_forward_cpu(ctx, &hf, &hfw, &hfb, &hyf));
    expect_same("linear forward", yf, &hyf);

    /* backward: dy and the weight rounded for backward-data, dy and x for backward-weights */
    mpx_tensor hdyf = host(2, os, dyf, 1), hdx = empty(2, fs), hdw = empty(2, fws),
               hdb = empty(1, fbs);
    CHECK_OK(mpx_linear_backward_data_cpu(ctx, &hdyf, &hfw, &hdx));
    expect_same("linear backward-data", dyc, &hdx);
    CHECK_OK(mpx_linear_backward_weights_cpu(ctx, &hdyf, &hf, &hdw, &hdb));
    expect_same("linear weight gradient", fw->grad, &hdw);
    mpx_tensor hdyc = host(4, ys, dyc, 1), hcw = empty(4, ws), hcb = empty(1, bs);
    CHECK_OK(mpx_conv2d_backward_weights_cpu(ctx, &at, &hdyc, &hx, &hcw, &hcb));
    expect_same("conv weight gradient", cw->grad, &hcw);

    /* fp32 mode: the same graph and seed, unrounded operands, other bits */
    net u = build("fp32");
    CHECK_OK(mpx_graph_forward(u.g, 1));
    float *yc32 = malloc(sizeof(float) * N * S * S * K);
    CHECK_OK(mpx_graph_read(u.g, u.conv, yc32));
    int differ = 0;
    for (int i = 0; i < N * S * S * K; i++) differ += yc32[i] != yc[i];
    CHECK(differ > 0, "fp32 and tf32 conv outputs are identical: no rounding happened");
    printf("tf32 vs fp32: %d of %d conv outputs differ\n", differ, N * S * S * K);

    mpx_tensor *all[] = {&hx, &hw, &hb, &hy, &hf, &hfw, &hfb, &hyf, &hdyf, &hdx, &hdw, &hdb,
                         &hdyc, &hcw, &hcb};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->data);
    free(x), free(yc), free(yf), free(dyf), free(dyc), free(yc32);
    mpx_graph_free(t.g);
    mpx_graph_free(u.g);
}

int main(void) {
    ctx = mpx_cpu_ctx_create();
    if (!ctx) {
        fprintf(stderr, "FAIL: %s\n", mpx_error_message());
        return 1;
    }
    test_operands_rounded();
    return mpx_test_done(__FILE__);
}
