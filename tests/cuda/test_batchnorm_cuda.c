/* test_batchnorm_cuda.c — the CUDA backend's batch-norm (lib/cuda/batchnorm.cu) against the CPU
 * backend: training forward (y, saved mean and inverse std, running mean and variance updated
 * with momentum), inference forward, and backward (dx, dgamma, dbeta), for row counts that give
 * one chunk, a few chunks with a short last one, several groups of 64 chunks with a short last
 * group, and the CPU's maximum of 4096 chunks (64 full groups, a short last chunk), odd
 * channel counts, in F32, F16 and BF16 storage of x / y / dy / dx / gamma / beta (statistics and
 * parameter gradients F32, and one configuration with BF16 running statistics).
 *
 * Tolerance: none — every comparison is exact (check_exact: the CPU's FP32 bits, rounded once
 * into the output's storage dtype). The GPU reproduces the CPU's arithmetic: the same fixed
 * chunks of rows (a function of M only), double sums in row order within a chunk, chunk order
 * within a group of 64 chunks and group order across groups, the same double formulas for the statistics (IEEE division and sqrt, correctly
 * rounded on both), and the same FP32 element-wise operations without FMA contraction (the CPU
 * build targets baseline x86-64, which has no FMA; the kernels use _rn intrinsics).
 * Inputs are uniform, offset from zero (x in [2, 5), so the shifted-moment formula matters).
 * Skipped (77) without a device.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mpx/ops.h"
#include "ops_cuda_util.h"

typedef struct {
    mpx_dtype act, param, stats, grad;
    const char *name;
} bn_cfg;

static const bn_cfg CFGS[] = {
    {MPX_F32, MPX_F32, MPX_F32, MPX_F32, "f32"},
    {MPX_F16, MPX_F16, MPX_F32, MPX_F32, "f16"},
    {MPX_BF16, MPX_BF16, MPX_F32, MPX_F32, "bf16"},
    {MPX_F16, MPX_F32, MPX_BF16, MPX_F32, "f16, bf16 stats"},
};

typedef struct {
    int ndim;
    int64_t shape[4];
} bn_shape;

static const bn_shape SHAPES[] = {
    {2, {2, 1}},        /* M = 2, C = 1 */
    {3, {4, 5, 3}},     /* one chunk */
    {3, {2, 40, 7}},    /* M = 80: chunks of 64, the last short */
    {2, {300, 33}},     /* 5 chunks */
    {4, {9, 10, 100, 5}}, /* M = 9000: 141 chunks of 64, in groups of 64, 64 and 13 */
    {3, {5, 57343, 3}}, /* M = 286715: 4096 chunks of 70 (the last of 65), 64 groups */
    {2, {131101, 24}},  /* 3.1M elements: the apply passes' 4-element iterations (cuop_each) */
};

/* A device output and the CPU's FP32 result it must equal once rounded into dt. */
typedef struct {
    const char *name;
    mpx_tensor *t;
    mpx_dtype dt;
    const float *ref;
    size_t n;
} dev_ref;

static void check_refs(const char *pass, const bn_cfg *cf, const char *shp, const dev_ref *r,
                       size_t k) {
    char what[160];
    for (size_t i = 0; i < k; i++) {
        float *got = dev_read(r[i].t);
        snprintf(what, sizeof what, "%s %s %s x%s", pass, r[i].name, cf->name, shp);
        check_exact(what, r[i].dt, got, r[i].ref, r[i].n);
        free(got);
    }
}

static void test_case(const bn_cfg *cf, const bn_shape *s, uint64_t seed) {
    const int64_t c = s->shape[s->ndim - 1];
    const int64_t cs[1] = {c};
    const size_t n = numel_of(s->ndim, s->shape), nc = (size_t)c;
    char shp[64], what[200];
    mpx_shape_str(s->ndim, s->shape, shp, sizeof shp);
    float *x = rand_in(cf->act, n, 2, 5, seed), *dy = rand_in(cf->act, n, -1, 1, seed + 1);
    float *g = rand_in(cf->param, nc, 0.5f, 1.5f, seed + 2);
    float *b = rand_in(cf->param, nc, -1, 1, seed + 3);
    float *rm = rand_in(cf->stats, nc, 0, 1, seed + 4);
    float *rv = rand_in(cf->stats, nc, 0.5f, 2, seed + 5);
    float *y = hbuf(n), *dx = hbuf(n), *sm = hbuf(nc), *si = hbuf(nc), *dg = hbuf(nc),
          *db = hbuf(nc);
    float *rm_c = hbuf(nc), *rv_c = hbuf(nc);
    memcpy(rm_c, rm, nc * sizeof *rm);
    memcpy(rv_c, rv, nc * sizeof *rv);

    mpx_tensor hx = host_t(s->ndim, s->shape, x), hdy = host_t(s->ndim, s->shape, dy);
    mpx_tensor hy = host_t(s->ndim, s->shape, y), hdx = host_t(s->ndim, s->shape, dx);
    mpx_tensor hg = host_t(1, cs, g), hb = host_t(1, cs, b), hrm = host_t(1, cs, rm_c),
               hrv = host_t(1, cs, rv_c), hsm = host_t(1, cs, sm), hsi = host_t(1, cs, si),
               hdg = host_t(1, cs, dg), hdb = host_t(1, cs, db);
    mpx_tensor gx = dev_tensor(cf->act, s->ndim, s->shape, x);
    mpx_tensor gdy = dev_tensor(cf->act, s->ndim, s->shape, dy);
    mpx_tensor gy = dev_tensor(cf->act, s->ndim, s->shape, NULL);
    mpx_tensor gdx = dev_tensor(cf->act, s->ndim, s->shape, NULL);
    mpx_tensor gg = dev_tensor(cf->param, 1, cs, g), gb = dev_tensor(cf->param, 1, cs, b);
    mpx_tensor grm = dev_tensor(cf->stats, 1, cs, rm), grv = dev_tensor(cf->stats, 1, cs, rv);
    mpx_tensor gsm = dev_tensor(MPX_F32, 1, cs, NULL), gsi = dev_tensor(MPX_F32, 1, cs, NULL);
    mpx_tensor gdg = dev_tensor(cf->grad, 1, cs, NULL), gdb = dev_tensor(cf->grad, 1, cs, NULL);
    const mpx_batchnorm_attr tr = {1e-5f, 0.1f, 1, 0, 0, MPX_F32, NULL, NULL, 0};
    const mpx_batchnorm_attr ev = {1e-3f, 0.1f, 0, 0, 0, MPX_F32, NULL, NULL, 0};

    /* training forward */
    CHECK_OK(mpx_batchnorm_forward_cpu(&tr, &hx, &hg, &hb, &hrm, &hrv, &hsm, &hsi, &hy));
    CHECK_OK(mpx_batchnorm_forward_cuda(&tr, &gx, &gg, &gb, &grm, &grv, &gsm, &gsi, &gy));
    const dev_ref outs[] = {
        {"y", &gy, cf->act, y, n},          {"save_mean", &gsm, MPX_F32, sm, nc},
        {"save_invstd", &gsi, MPX_F32, si, nc}, {"running_mean", &grm, cf->stats, rm_c, nc},
        {"running_var", &grv, cf->stats, rv_c, nc},
    };
    check_refs("batchnorm training forward", cf, shp, outs, sizeof outs / sizeof outs[0]);

    /* backward from the saved statistics (the CPU's and the GPU's are identical above), plain
     * and with the fused ReLU's backward inside (relu_dy, the ReLU output stored as the
     * activations are; it reads beta) */
    mpx_batchnorm_attr fr = tr;
    fr.relu = 1, fr.relu_dy = 1, fr.relu_store = cf->act;
    for (int fused = 0; fused < 2; fused++) {
        const mpx_batchnorm_attr *ba = fused ? &fr : &tr;
        CHECK_OK(mpx_batchnorm_backward_cpu(ba, &hdy, &hx, &hg, fused ? &hb : NULL, &hsm, &hsi,
                                            &hdx, &hdg, &hdb));
        CHECK_OK(mpx_batchnorm_backward_cuda(ba, &gdy, &gx, &gg, fused ? &gb : NULL, &gsm, &gsi,
                                             &gdx, &gdg, &gdb));
        const dev_ref gr[] = {{"dx", &gdx, cf->act, dx, n},
                              {"dgamma", &gdg, cf->grad, dg, nc},
                              {"dbeta", &gdb, cf->grad, db, nc}};
        check_refs(fused ? "batchnorm backward (relu_dy)" : "batchnorm backward", cf, shp, gr,
                   sizeof gr / sizeof gr[0]);
    }
    {
        /* relu_dy in place, as the executor runs it (graph_compile.c: plan_bn_inplace_grads):
         * dx written over dy */
        mpx_tensor gio = dev_tensor(cf->act, s->ndim, s->shape, dy);
        CHECK_OK(mpx_batchnorm_backward_cuda(&fr, &gio, &gx, &gg, &gb, &gsm, &gsi, &gio, &gdg,
                                             &gdb));
        float *got = dev_read(&gio);
        snprintf(what, sizeof what, "batchnorm backward (relu_dy, in place) dx %s x%s", cf->name,
                 shp);
        check_exact(what, cf->act, got, dx, n);
        free(got);
        dev_free(&gio);
    }

    /* inference forward from the (updated, identical) running statistics; the CPU op reads
     * them as F32, so hand it the values the device holds */
    {
        float *rmd = dev_read(&grm), *rvd = dev_read(&grv);
        mpx_tensor erm = host_t(1, cs, rmd), erv = host_t(1, cs, rvd);
        dev_poison(&gy);
        CHECK_OK(mpx_batchnorm_forward_cpu(&ev, &hx, &hg, &hb, &erm, &erv, NULL, NULL, &hy));
        CHECK_OK(mpx_batchnorm_forward_cuda(&ev, &gx, &gg, &gb, &grm, &grv, NULL, NULL, &gy));
        float *got = dev_read(&gy);
        snprintf(what, sizeof what, "batchnorm inference forward %s x%s", cf->name, shp);
        check_exact(what, cf->act, got, y, n);
        /* with the fused ReLU, inference and training (the running statistics each side
         * updates start from the device's values). The updated running mean lies below x's
         * range [2, 5] and every output would be positive, so inference reads another: 16 in
         * the even channels, where every output is negative (x - 16 <= -11, |gamma| >= 0.5,
         * running var <= 2.3, |beta| <= 1) and the ReLU zeroes it, and a mean inside x's range
         * in the odd ones, where outputs of both signs meet it. */
        float *cm = rand_in(cf->stats, nc, 3, 4, seed + 6);
        for (size_t k = 0; k < nc; k += 2) cm[k] = 16.0f;
        mpx_tensor hcm = host_t(1, cs, cm), gcm = dev_tensor(cf->stats, 1, cs, cm);
        for (int training = 0; training < 2; training++) {
            mpx_batchnorm_attr fr = training ? tr : ev;
            fr.relu = 1;
            dev_poison(&gy);
            CHECK_OK(mpx_batchnorm_forward_cpu(&fr, &hx, &hg, &hb, training ? &erm : &hcm, &erv,
                                               &hsm, &hsi, &hy));
            CHECK_OK(mpx_batchnorm_forward_cuda(&fr, &gx, &gg, &gb, training ? &grm : &gcm, &grv,
                                                &gsm, &gsi, &gy));
            free(got);
            got = dev_read(&gy);
            snprintf(what, sizeof what, "batchnorm %s forward + relu %s x%s",
                     training ? "training" : "inference", cf->name, shp);
            check_exact(what, cf->act, got, y, n);
            int zeros = 0;
            for (size_t i = 0; i < n; i++) zeros += y[i] == 0.0f;
            CHECK(zeros > 0, "%s: the ReLU zeroed nothing", what);
        }
        free(got);
        free(rmd);
        free(rvd);
        free(cm);
        dev_free(&gcm);
    }
    check_device_clean(what);
    mpx_tensor *dev[] = {&gx, &gdy, &gy, &gdx, &gg, &gb, &grm, &grv, &gsm, &gsi, &gdg, &gdb};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        dev_free(dev[i]);
    float *host[] = {x, dy, g, b, rm, rv, y, dx, sm, si, dg, db, rm_c, rv_c};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
}

static void test_errors(void) {
    const int64_t xs[2] = {1, 3}, cs[1] = {3};
    mpx_tensor x = dev_tensor(MPX_F32, 2, xs, NULL), y = dev_tensor(MPX_F32, 2, xs, NULL);
    mpx_tensor v[6];
    for (int i = 0; i < 6; i++)
        v[i] = dev_tensor(MPX_F32, 1, cs, NULL);
    const mpx_batchnorm_attr tr = {1e-5f, 0.1f, 1, 0, 0, MPX_F32, NULL, NULL, 0};
    const mpx_batchnorm_attr ev = {1e-5f, 0.1f, 0, 0, 0, MPX_F32, NULL, NULL, 0};
    CHECK(mpx_batchnorm_forward_cuda(&tr, &x, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &y) ==
              MPX_ERR_INPUT,
          "batchnorm forward: training with one row accepted");
    CHECK(mpx_batchnorm_backward_cuda(&ev, &y, &x, &v[0], NULL, &v[1], &v[2], &y, &v[3], &v[4]) ==
              MPX_ERR_UNSUPPORTED,
          "batchnorm backward: inference mode accepted");
    dev_free(&x);
    dev_free(&y);
    for (int i = 0; i < 6; i++)
        dev_free(&v[i]);
}

int main(void) {
    if (!ops_test_setup()) return MPX_TEST_SKIP;
    uint64_t seed = 5000;
    for (size_t c = 0; c < sizeof CFGS / sizeof CFGS[0]; c++)
        for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++, seed += 10)
            test_case(&CFGS[c], &SHAPES[s], seed);
    test_errors();
    check_device_clean("end");
    /* Leaves nothing behind for compute-sanitizer's leak check. */
    CHECK(mpx_cuda_release() == MPX_OK, "mpx_cuda_release: %s", mpx_error_message());
    return mpx_test_done(__FILE__);
}
