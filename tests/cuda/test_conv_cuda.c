/* test_conv_cuda.c — the CUDA backend's conv2d (cuDNN, lib/cuda/conv.cu) against the CPU backend:
 * forward (with and without bias), backward-data and backward-weights (with and without the
 * bias gradient) on 1x1, 1x1 stride 2, 3x3 stride 1 and 2 with padding, an asymmetric 5x3
 * kernel with different strides and pads per axis, odd channel counts and batch > 1, in F32,
 * F16 and BF16 storage and a mixed configuration; backward-data's scaled form too, and on the
 * all-16-bit path the ends of F16's range (test_f16_extremes).
 *
 * Tolerances (ops_cuda_util.h has the comparison rule). A convolution output is a sum of K
 * products: K = C KH KW for the forward pass, K KH KW (at most) for backward-data, N OH OW for
 * backward-weights and the bias gradient (a sum of N OH OW values of dy). cuDNN (FP32, FMA
 * math: no TF32, no tensor cores; FFT and Winograd excluded, see conv.cu) and oneDNN add the
 * same products in different orders; each result is within K u sum|a b| of the exact value
 * (u = 2^-24, the standard bound for FP32 summation), so they differ by at most 2 K u sum|a b|;
 * the test allows (K + 2) 2^-22 sum|a b| (a factor 2 for accumulators that truncate, + 2 for
 * the bias addition), plus one ulp of the output format for F16/BF16 (each side rounds once).
 * sum|a b| per element is the same CPU op run on |inputs|. TF32 inputs (2^-11 relative per
 * product) would exceed this bound on these shapes, so the test also catches a reduced-precision
 * algorithm — except where F32 data hold F16/BF16 values and say so (the "tf32"
 * configurations, mpx_cuda_set_operand_format): TF32 holds those exactly, the products are
 * exact, and the same bound applies to the tensor-core algorithms cuDNN may then choose; so it
 * does to 16-bit storage declared in its own format with F32 input gradients (the "direct"
 * configurations: what an executor that hands its storage to the ops asks for).
 * Inputs are uniform in [-1, 1), rounded to their storage format (or the declared one).
 * Skipped (77) without a device.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mpx/ops.h"
#include "ops_cuda_util.h"

/* The CPU and CUDA operators' contexts the ops under test run on (made in main). */
static mpx_cpu_ctx *ctx;
static mpx_cuda_ctx *cctx;

/* Storage dtypes of one configuration: x (and dx), w, b, y (and dy), dw (and db). */
typedef struct {
    mpx_dtype x, w, b, y, dw;
    const char *name;
    /* F16/BF16: the F32 data hold values of that format, declared to the backend
     * (mpx_cuda_set_operand_format), which may then use TF32 tensor cores; F32: nothing declared */
    mpx_dtype exact;
    /* 1: the input gradients are F32 whatever the operands' storage, as the executor asks for
     * them from a backend that reads 16-bit storage directly (backend.h: direct_io) */
    int f32_grads;
} conv_cfg;

static const conv_cfg CFGS[] = {
    {MPX_F32, MPX_F32, MPX_F32, MPX_F32, MPX_F32, "f32", MPX_F32, 0},
    {MPX_F16, MPX_F16, MPX_F16, MPX_F16, MPX_F32, "f16", MPX_F32, 0},
    {MPX_BF16, MPX_BF16, MPX_BF16, MPX_BF16, MPX_F32, "bf16", MPX_F32, 0},
    {MPX_F16, MPX_F32, MPX_BF16, MPX_BF16, MPX_BF16, "mixed", MPX_F32, 0},
    /* F32 tensors holding 16-bit values, declared (an executor in a 16-bit mode): TF32 tensor
     * cores, exact on these operands, so the FP32 bound above still holds */
    {MPX_F32, MPX_F32, MPX_F32, MPX_F32, MPX_F32, "f32 holding f16, tf32", MPX_F16, 0},
    {MPX_F32, MPX_F32, MPX_F32, MPX_F32, MPX_F32, "f32 holding bf16, tf32", MPX_BF16, 0},
    /* The executor's direct 16-bit mode: operands as stored, declared, so 16-bit tensor cores
     * (exact products, FP32 accumulation: the FP32 bound above holds); input gradients in F32,
     * the forward output and the weight gradient as the executor asks for them */
    {MPX_F16, MPX_F16, MPX_F16, MPX_F16, MPX_F32, "f16 direct, tensor cores", MPX_F16, 1},
    {MPX_BF16, MPX_BF16, MPX_BF16, MPX_BF16, MPX_F32, "bf16 direct, tensor cores", MPX_BF16, 1},
    /* ... and every gradient in the 16-bit format too (the executor's non-statistics steps):
     * each pass runs on 16-bit data, each output rounded once from FP32 sums */
    {MPX_F16, MPX_F16, MPX_F16, MPX_F16, MPX_F16, "f16 all 16-bit, tensor cores", MPX_F16, 0},
    {MPX_BF16, MPX_BF16, MPX_BF16, MPX_BF16, MPX_BF16, "bf16 all 16-bit, tensor cores", MPX_BF16,
     0},
};

typedef struct {
    int n, h, w, c, k, kh, kw, sh, sw, ph, pw;
} conv_shape;

static const conv_shape SHAPES[] = {
    {2, 5, 5, 3, 4, 1, 1, 1, 1, 0, 0},     /* 1x1 */
    {1, 7, 6, 5, 3, 1, 1, 2, 2, 0, 0},     /* 1x1 stride 2 */
    {2, 6, 7, 3, 5, 3, 3, 1, 1, 1, 1},     /* 3x3 same */
    {3, 9, 8, 7, 6, 3, 3, 2, 2, 1, 1},     /* 3x3 stride 2 pad 1, odd C */
    {1, 10, 9, 4, 2, 5, 3, 1, 2, 2, 1},    /* asymmetric kernel, strides and pads */
    {2, 8, 8, 16, 33, 3, 3, 1, 1, 1, 1},   /* wider, odd K */
    {1, 3, 3, 1, 1, 3, 3, 1, 1, 0, 0},     /* one output */
};

static double conv_rel(int64_t k) { return (double)(k + 2) * ldexp(1.0, -22); }

static void test_case(const conv_cfg *cf, const conv_shape *s, int bias, uint64_t seed) {
    const mpx_conv2d_attr at = {s->sh, s->sw, s->ph, s->pw};
    const int oh = (s->h + 2 * s->ph - s->kh) / s->sh + 1, ow = (s->w + 2 * s->pw - s->kw) / s->sw + 1;
    const int64_t xs[4] = {s->n, s->h, s->w, s->c}, ws[4] = {s->kh, s->kw, s->c, s->k};
    const int64_t ys[4] = {s->n, oh, ow, s->k}, bs[1] = {s->k};
    const size_t nx = numel_of(4, xs), nw = numel_of(4, ws), ny = numel_of(4, ys);
    const size_t nb = (size_t)s->k, nmax = nx > nw ? (nx > ny ? nx : ny) : (nw > ny ? nw : ny);
    float *x = rand_in(data_format(cf->x, cf->exact), nx, -1, 1, seed);
    float *w = rand_in(data_format(cf->w, cf->exact), nw, -1, 1, seed + 1);
    float *b = rand_in(data_format(cf->b, cf->exact), nb, -1, 1, seed + 2);
    float *dy = rand_in(data_format(cf->y, cf->exact), ny, -1, 1, seed + 3);
    float *ax = abs_copy(x, nx), *aw = abs_copy(w, nw), *ab = abs_copy(b, nb);
    float *ady = abs_copy(dy, ny);
    float *ref = hbuf(nmax), *mag = hbuf(nmax), *ref_db = hbuf(nb), *mag_db = hbuf(nb);

    mpx_tensor hx = host_t(4, xs, x), hw = host_t(4, ws, w), hb = host_t(1, bs, b);
    mpx_tensor hdy = host_t(4, ys, dy);
    mpx_tensor hax = host_t(4, xs, ax), haw = host_t(4, ws, aw), hab = host_t(1, bs, ab);
    mpx_tensor hady = host_t(4, ys, ady);
    mpx_tensor gx = dev_tensor(cf->x, 4, xs, x), gw = dev_tensor(cf->w, 4, ws, w);
    mpx_tensor gb = dev_tensor(cf->b, 1, bs, b), gdy = dev_tensor(cf->y, 4, ys, dy);
    mpx_tensor gy = dev_tensor(cf->y, 4, ys, NULL),
               gdx = dev_tensor(cf->f32_grads ? MPX_F32 : cf->x, 4, xs, NULL);
    mpx_tensor gdw = dev_tensor(cf->dw, 4, ws, NULL), gdb = dev_tensor(cf->dw, 1, bs, NULL);
    char what[200];
    snprintf(what, sizeof what, "x [%d,%d,%d,%d] w [%d,%d,%d,%d] stride %dx%d pad %dx%d bias %d",
             s->n, s->h, s->w, s->c, s->kh, s->kw, s->c, s->k, s->sh, s->sw, s->ph, s->pw, bias);
    char msg[300];

    /* forward: K = C KH KW */
    {
        mpx_tensor hy = host_t(4, ys, ref), hm = host_t(4, ys, mag);
        CHECK_OK(mpx_conv2d_forward_cpu(ctx, &at, &hx, &hw, bias ? &hb : NULL, &hy));
        CHECK_OK(mpx_conv2d_forward_cpu(ctx, &at, &hax, &haw, bias ? &hab : NULL, &hm));
        CHECK_OK(mpx_conv2d_forward_cuda(cctx, &at, &gx, &gw, bias ? &gb : NULL, &gy));
        float *got = dev_read(&gy);
        snprintf(msg, sizeof msg, "conv2d forward %s %s", cf->name, what);
        check_close(msg, cf->y, got, ref, mag, ny, conv_rel((int64_t)s->c * s->kh * s->kw), 0);
        free(got);
    }
    /* backward-data: K KH KW */
    {
        mpx_tensor hdx = host_t(4, xs, ref), hm = host_t(4, xs, mag);
        CHECK_OK(mpx_conv2d_backward_data_cpu(ctx, &at, &hdy, &hw, &hdx));
        CHECK_OK(mpx_conv2d_backward_data_cpu(ctx, &at, &hady, &haw, &hm));
        CHECK_OK(mpx_conv2d_backward_data_cuda(cctx, &at, &gdy, &gw, &gdx));
        float *got = dev_read(&gdx);
        snprintf(msg, sizeof msg, "conv2d backward-data %s %s", cf->name, what);
        check_close(msg, cf->f32_grads ? MPX_F32 : cf->x, got, ref, mag, nx,
                    conv_rel((int64_t)s->k * s->kh * s->kw), 0);
        free(got);
        /* the scaled form (an adaptive factor, a power of two): the same result times it,
         * exactly, so the same bound on the scaled reference */
        const float factor = 8.0f;
        CHECK_OK(mpx_conv2d_backward_data_scaled_cuda(cctx, &at, factor, &gdy, &gw, &gdx));
        got = dev_read(&gdx);
        for (size_t i = 0; i < nx; i++) ref[i] *= factor, mag[i] *= factor;
        snprintf(msg, sizeof msg, "conv2d backward-data scaled by %g %s %s", (double)factor,
                 cf->name, what);
        check_close(msg, cf->f32_grads ? MPX_F32 : cf->x, got, ref, mag, nx,
                    conv_rel((int64_t)s->k * s->kh * s->kw), 0);
        free(got);
    }
    /* backward-weights and the bias gradient: N OH OW */
    {
        mpx_tensor hdw = host_t(4, ws, ref), hm = host_t(4, ws, mag);
        mpx_tensor hdb = host_t(1, bs, ref_db), hmb = host_t(1, bs, mag_db);
        CHECK_OK(mpx_conv2d_backward_weights_cpu(ctx, &at, &hdy, &hx, &hdw, bias ? &hdb : NULL));
        CHECK_OK(mpx_conv2d_backward_weights_cpu(ctx, &at, &hady, &hax, &hm, bias ? &hmb : NULL));
        CHECK_OK(mpx_conv2d_backward_weights_cuda(cctx, &at, &gdy, &gx, &gdw, bias ? &gdb : NULL));
        const int64_t m = (int64_t)s->n * oh * ow;
        float *got = dev_read(&gdw);
        snprintf(msg, sizeof msg, "conv2d backward-weights %s %s", cf->name, what);
        check_close(msg, cf->dw, got, ref, mag, nw, conv_rel(m), 0);
        free(got);
        if (bias) {
            got = dev_read(&gdb);
            snprintf(msg, sizeof msg, "conv2d bias gradient %s %s", cf->name, what);
            check_close(msg, cf->dw, got, ref_db, mag_db, nb, conv_rel(m), 0);
            free(got);
        }
    }
    check_device_clean(what);
    mpx_tensor *dev[] = {&gx, &gw, &gb, &gdy, &gy, &gdx, &gdw, &gdb};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        dev_free(dev[i]);
    float *host[] = {x, w, b, dy, ax, aw, ab, ady, ref, mag, ref_db, mag_db};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
}

/* The ends of F16's range on the all-16-bit path (F16 storage declared, so cuDNN runs on the
 * 16-bit data and rounds its outputs itself), 3x3 convolutions of C = K = 8 channels:
 *  - a factor applied before the rounding: dy of magnitude about 2^-20 (F16 subnormals, as
 *    they are stored) times w in [-1, 1): backward-data's unscaled sums (about 2^-18) would be
 *    F16 subnormals with a few bits; scaled by 2^10 they are normal, and must meet the test
 *    bound against the CPU's FP32 result times the factor (a rounding before the scaling
 *    would miss it by up to 2^-4 relative);
 *  - an overflow is Inf, not a saturated 65504 (the executor's non-finite count, which makes a
 *    loss scaler skip the step, only sees Inf and NaN): w = 1 and dy of +-[2^9, 2^10), one
 *    sign per image, give backward-data sums of 32 to 72 such terms, times 2^8 beyond 2^22;
 *    and the weight gradient of x = +-2^8 (the sign of the image's dy) sums up to 72 positive
 *    products of 2^17 (FP32 holds the sum; F16 cannot). */
static void test_f16_extremes(void) {
    CHECK_OK(mpx_cuda_set_operand_format(cctx, MPX_F16));
    const conv_shape sh = {2, 6, 6, 8, 8, 3, 3, 1, 1, 1, 1};
    const mpx_conv2d_attr at = {1, 1, 1, 1};
    const int64_t xs[4] = {2, 6, 6, 8}, ws[4] = {3, 3, 8, 8}, ys[4] = {2, 6, 6, 8};
    const size_t nx = numel_of(4, xs), nw = numel_of(4, ws), ny = numel_of(4, ys);
    float *w = rand_in(MPX_F16, nw, -1, 1, 71), *dy = rand_in(MPX_F32, ny, -1, 1, 72);
    for (size_t i = 0; i < ny; i++) dy[i] = mpx_round_to(MPX_F16, ldexpf(dy[i], -20));
    float *aw = abs_copy(w, nw), *ady = abs_copy(dy, ny), *ref = hbuf(nx), *mag = hbuf(nx);
    mpx_tensor hw = host_t(4, ws, w), hdy = host_t(4, ys, dy), haw = host_t(4, ws, aw),
               hady = host_t(4, ys, ady), hdx = host_t(4, xs, ref), hm = host_t(4, xs, mag);
    mpx_tensor gw = dev_tensor(MPX_F16, 4, ws, w), gdy = dev_tensor(MPX_F16, 4, ys, dy);
    mpx_tensor gdx = dev_tensor(MPX_F16, 4, xs, NULL);
    CHECK_OK(mpx_conv2d_backward_data_cpu(ctx, &at, &hdy, &hw, &hdx));
    CHECK_OK(mpx_conv2d_backward_data_cpu(ctx, &at, &hady, &haw, &hm));
    const float factor = 1024.0f;
    CHECK_OK(mpx_conv2d_backward_data_scaled_cuda(cctx, &at, factor, &gdy, &gw, &gdx));
    float *got = dev_read(&gdx);
    for (size_t i = 0; i < nx; i++) ref[i] *= factor, mag[i] *= factor;
    check_close("conv2d backward-data of F16 subnormals scaled by 2^10", MPX_F16, got, ref, mag,
                nx, conv_rel((int64_t)sh.k * sh.kh * sh.kw), 0);
    free(got);

    /* overflow */
    for (size_t i = 0; i < nw; i++) w[i] = 1.0f;
    for (size_t i = 0; i < ny; i++)
        dy[i] = mpx_round_to(MPX_F16, (i < ny / 2 ? 1.0f : -1.0f) * (512.0f + fabsf(dy[i]) * 0x1p20f));
    float *x = hbuf(nx);
    for (size_t i = 0; i < nx; i++) x[i] = i < nx / 2 ? 256.0f : -256.0f; /* x dy > 0 */
    mpx_tensor gw1 = dev_tensor(MPX_F16, 4, ws, w), gdy1 = dev_tensor(MPX_F16, 4, ys, dy);
    mpx_tensor gx = dev_tensor(MPX_F16, 4, xs, x), gdw = dev_tensor(MPX_F16, 4, ws, NULL);
    CHECK_OK(mpx_conv2d_backward_data_scaled_cuda(cctx, &at, 256.0f, &gdy1, &gw1, &gdx));
    got = dev_read(&gdx);
    size_t bad = 0;
    for (size_t i = 0; i < nx; i++) bad += !(isinf(got[i]) && (got[i] > 0) == (i < nx / 2));
    CHECK(bad == 0, "conv2d backward-data overflowing F16: %zu of %zu not the signed Inf "
          "(first: %g)", bad, nx, (double)got[0]);
    free(got);
    CHECK_OK(mpx_conv2d_backward_weights_cuda(cctx, &at, &gdy1, &gx, &gdw, NULL));
    got = dev_read(&gdw);
    bad = 0;
    for (size_t i = 0; i < nw; i++) bad += !isinf(got[i]);
    CHECK(bad == 0, "conv2d backward-weights overflowing F16: %zu of %zu not Inf (first: %g)",
          bad, nw, (double)got[0]);
    free(got);
    check_device_clean("f16 extremes");
    mpx_tensor *dev[] = {&gw, &gdy, &gdx, &gw1, &gdy1, &gx, &gdw};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        dev_free(dev[i]);
    free(w), free(dy), free(aw), free(ady), free(ref), free(mag), free(x);
}

/* The CPU op's argument checks, on device tensors. */
static void test_errors(void) {
    const int64_t xs[4] = {1, 4, 4, 3}, ws[4] = {3, 3, 2, 5}, ys[4] = {1, 2, 2, 5};
    mpx_tensor x = dev_tensor(MPX_F32, 4, xs, NULL), w = dev_tensor(MPX_F32, 4, ws, NULL);
    mpx_tensor y = dev_tensor(MPX_F32, 4, ys, NULL);
    const mpx_conv2d_attr at = {1, 1, 0, 0};
    CHECK(mpx_conv2d_forward_cuda(cctx, &at, &x, &w, NULL, &y) == MPX_ERR_INPUT,
          "conv2d forward: C mismatch accepted");
    const mpx_conv2d_attr bad = {0, 1, 0, 0};
    CHECK(mpx_conv2d_forward_cuda(cctx, &bad, &x, &w, NULL, &y) == MPX_ERR_INPUT,
          "conv2d forward: stride 0 accepted");
    CHECK(mpx_conv2d_backward_data_scaled_cuda(cctx, &at, NAN, &y, &w, &x) == MPX_ERR_INPUT,
          "conv2d backward-data: NaN scale accepted");
    CHECK(mpx_conv2d_backward_data_scaled_cuda(cctx, &at, 0.0f, &y, &w, &x) == MPX_ERR_INPUT,
          "conv2d backward-data: scale 0 accepted");
    dev_free(&x);
    dev_free(&w);
    dev_free(&y);
}

int main(void) {
    ctx = mpx_cpu_ctx_create();
    cctx = mpx_cuda_ctx_create();
    if (!ctx || !cctx) {
        fprintf(stderr, "FAIL: %s\n", mpx_error_message());
        return 1;
    }
    if (!ops_test_setup()) return MPX_TEST_SKIP;
    uint64_t seed = 1000;
    for (size_t c = 0; c < sizeof CFGS / sizeof CFGS[0]; c++) {
        CHECK_OK(mpx_cuda_set_operand_format(cctx, CFGS[c].exact));
        for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
            for (int bias = 0; bias < 2; bias++, seed += 10)
                test_case(&CFGS[c], &SHAPES[s], bias, seed);
    }
    test_f16_extremes();
    CHECK_OK(mpx_cuda_set_operand_format(cctx, MPX_F32));
    test_errors();
    check_device_clean("end");
    /* (not a failure: a shape cuDNN cannot run on 16-bit data runs on FP32 data, within the
     * same bounds; the count says how often the fast path was not taken) */
    printf("cuDNN convolution plans on 16-bit data run on FP32 data instead: %lld\n",
           (long long)mpx_cuda_conv16_fallbacks(cctx));
    /* Leaves nothing behind for compute-sanitizer's leak check. */
    CHECK(mpx_cuda_ctx_free(cctx) == MPX_OK, "mpx_cuda_ctx_free: %s", mpx_error_message());
    mpx_cpu_ctx_free(ctx);
    CHECK(mpx_cuda_release() == MPX_OK, "mpx_cuda_release: %s", mpx_error_message());
    return mpx_test_done(__FILE__);
}
