/* test_ops_cuda_gemm.c — the CUDA backend's GEMM family (cuBLAS, lib/cuda/gemm.cu) against the
 * CPU backend: linear and linear_t forward, backward-data (and its scaled form) and
 * backward-weights (with and without bias), and bmm forward and backward (every transpose combination, 0..2 batch dims, alpha),
 * on several shapes including odd sizes and 1x1x1, in F32, F16 and BF16 storage and in mixed
 * dtypes (an input of another dtype than its partner, outputs cuBLAS cannot write directly, a
 * bias of another dtype than the output).
 *
 * Tolerances (ops_cuda_util.h has the comparison rule):
 *  - the GEMM result, per element: |gpu - cpu| <= (K + 2) 2^-22 sum_k |a_ik b_kj| plus one ulp of
 *    the output format (2^-10 F16, 2^-7 BF16, 0 F32). Why: cuBLAS and the CPU's sgemm add the K
 *    products in different orders; each is within K u sum|a b| of the exact value (u = 2^-24,
 *    the standard bound for FP32 summation), so they differ by at most 2 K u; a factor 2 more
 *    covers tensor cores that truncate instead of rounding while accumulating, and + 2 the bias
 *    addition and alpha. sum|a b| is the same op run on the CPU with |inputs|. On the shorter
 *    reductions here (K up to a few dozen) TF32 inputs (2^-11 relative per product) or FP16
 *    accumulation would exceed the bound, so the test also catches reduced-precision GEMMs —
 *    except where F32 data hold F16/BF16 values and say so (the "tf32" configurations,
 *    mpx_cuda_set_operand_format): TF32 holds those exactly, the products are exact, and the
 *    same bound applies; so do 16-bit operands declared in their own format (the "direct"
 *    configurations, an executor handing its storage over): tensor cores, exact products,
 *    FP32 accumulation, with the input gradients in F32 as the executor asks for them.
 *    K is IN for forward, OUT for backward-data, M (the rows) for backward-weights, and the
 *    reduced dim of each bmm product.
 *  - the bias gradient: exact (a column sum in double in row order on both sides).
 * Inputs are uniform in [-1, 1), rounded to their storage format. Skipped (77) without a device.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops_cuda_util.h"

/* The CPU and CUDA operators' contexts the ops under test run on (made in main). */
static mpx_cpu_ctx *ctx;
static mpx_cuda_ctx *cctx;

/* Storage dtypes of one configuration: x (and dx), w, b, y (and dy), dw and db. */
typedef struct {
    mpx_dtype x, w, b, y, dw;
    const char *name;
    /* F16/BF16: the F32 data hold values of that format, declared to the backend
     * (mpx_cuda_set_operand_format), which may then use TF32 tensor cores; F32: nothing declared */
    mpx_dtype exact;
    /* 1: the input gradients are F32 whatever the operands' storage, as the executor asks for
     * them from a backend that reads 16-bit storage directly (backend.h: direct_io) */
    int f32_grads;
} gemm_cfg;

static const gemm_cfg CFGS[] = {
    {MPX_F32, MPX_F32, MPX_F32, MPX_F32, MPX_F32, "f32", MPX_F32, 0},
    {MPX_F16, MPX_F16, MPX_F16, MPX_F16, MPX_F32, "f16", MPX_F32, 0},
    {MPX_BF16, MPX_BF16, MPX_BF16, MPX_BF16, MPX_F32, "bf16", MPX_F32, 0},
    /* F16 inputs written to F32 (a fan-out branch's FP32 gradient) */
    {MPX_F16, MPX_F16, MPX_F16, MPX_F32, MPX_F32, "f16->f32", MPX_F32, 0},
    /* mixed inputs (x decoded to F32 for cuBLAS), output through F32 scratch, bias in the
     * rounding kernel, weight gradients in BF16 */
    {MPX_F16, MPX_F32, MPX_BF16, MPX_BF16, MPX_BF16, "mixed", MPX_F32, 0},
    /* F32 inputs, F16 output: cuBLAS cannot write it, staged */
    {MPX_F32, MPX_F32, MPX_F32, MPX_F16, MPX_F32, "f32->f16", MPX_F32, 0},
    /* BF16 GEMM with an F32 bias: staged so the bias is added before the one rounding */
    {MPX_BF16, MPX_BF16, MPX_F32, MPX_BF16, MPX_F32, "bf16+f32 bias", MPX_F32, 0},
    /* F32 tensors holding 16-bit values, declared (an executor in a 16-bit mode): TF32 tensor
     * cores, exact on these operands, so the FP32 bound above still holds */
    {MPX_F32, MPX_F32, MPX_F32, MPX_F32, MPX_F32, "f32 holding f16, tf32", MPX_F16, 0},
    {MPX_F32, MPX_F32, MPX_F32, MPX_F32, MPX_F32, "f32 holding bf16, tf32", MPX_BF16, 0},
    /* The executor's direct 16-bit mode: operands as stored, declared, so 16-bit tensor cores
     * (exact products, FP32 accumulation: the FP32 bound above holds); input gradients in F32,
     * the forward output and the weight gradient as the executor asks for them */
    {MPX_F16, MPX_F16, MPX_F16, MPX_F16, MPX_F32, "f16 direct, tensor cores", MPX_F16, 1},
    {MPX_BF16, MPX_BF16, MPX_BF16, MPX_BF16, MPX_F32, "bf16 direct, tensor cores", MPX_BF16, 1},
};

/* The dtype of the gradient of an operand stored as `operand`. */
static mpx_dtype grad_dtype(const gemm_cfg *cf, mpx_dtype operand) {
    return cf->f32_grads ? MPX_F32 : operand;
}

/* (K + 2) 2^-22: see the header comment. */
static double gemm_rel(int64_t k) { return (double)(k + 2) * ldexp(1.0, -22); }

typedef struct {
    int ndim;        /* of x: 2 or 3 */
    int64_t lead[2]; /* x's leading dims (ndim - 1 of them) */
    int64_t in, out;
} lin_shape;

static const lin_shape LIN_SHAPES[] = {
    {2, {1}, 1, 1}, {2, {7}, 13, 5}, {2, {33}, 64, 17}, {3, {2, 5}, 24, 10}, {2, {128}, 96, 160},
};

/* One linear layer (transposed: weights [OUT, IN]) in one configuration: all three passes. */
static void test_linear_case(const gemm_cfg *cf, const lin_shape *s, int transposed, int bias,
                             uint64_t seed) {
    char what[160];
    int64_t xs[3], ys[3], m = 1;
    for (int i = 0; i + 1 < s->ndim; i++)
        xs[i] = ys[i] = s->lead[i], m *= s->lead[i];
    xs[s->ndim - 1] = s->in;
    ys[s->ndim - 1] = s->out;
    const int64_t ws[2] = {transposed ? s->out : s->in, transposed ? s->in : s->out};
    const int64_t bs[1] = {s->out};
    const size_t nx = (size_t)(m * s->in), ny = (size_t)(m * s->out), nw = (size_t)(s->in * s->out);
    float *x = rand_in(data_format(cf->x, cf->exact), nx, -1, 1, seed);
    float *w = rand_in(data_format(cf->w, cf->exact), nw, -1, 1, seed + 1);
    float *b = rand_in(data_format(cf->b, cf->exact), (size_t)s->out, -1, 1, seed + 2);
    float *dy = rand_in(data_format(cf->y, cf->exact), ny, -1, 1, seed + 3);
    float *ax = abs_copy(x, nx), *aw = abs_copy(w, nw), *ab = abs_copy(b, (size_t)s->out);
    float *ady = abs_copy(dy, ny);
    float *ref = hbuf(ny > nx ? (ny > nw ? ny : nw) : (nx > nw ? nx : nw)),
          *mag = hbuf(nx + ny + nw);
    float *ref_db = hbuf((size_t)s->out), *mag_db = hbuf((size_t)s->out);

    mpx_tensor hx = host_t(s->ndim, xs, x), hw = host_t(2, ws, w), hb = host_t(1, bs, b);
    mpx_tensor hdy = host_t(s->ndim, ys, dy);
    mpx_tensor hax = host_t(s->ndim, xs, ax), haw = host_t(2, ws, aw), hab = host_t(1, bs, ab);
    mpx_tensor hady = host_t(s->ndim, ys, ady);
    mpx_tensor dx_ = dev_tensor(cf->x, s->ndim, xs, x), dw_ = dev_tensor(cf->w, 2, ws, w);
    mpx_tensor db_ = dev_tensor(cf->b, 1, bs, b), ddy = dev_tensor(cf->y, s->ndim, ys, dy);
    mpx_tensor dy_out = dev_tensor(cf->y, s->ndim, ys, NULL),
               dgx = dev_tensor(grad_dtype(cf, cf->x), s->ndim, xs, NULL);
    mpx_tensor dgw = dev_tensor(cf->dw, 2, ws, NULL), dgb = dev_tensor(cf->dw, 1, bs, NULL);
    const char *name = transposed ? "linear_t" : "linear";
    char shp[64];
    mpx_shape_str(s->ndim, xs, shp, sizeof shp);

    /* forward: K = IN */
    {
        mpx_tensor hy = host_t(s->ndim, ys, ref), hm = host_t(s->ndim, ys, mag);
        if (transposed) {
            CHECK_OK(mpx_linear_t_forward_cpu(ctx, &hx, &hw, bias ? &hb : NULL, &hy));
            CHECK_OK(mpx_linear_t_forward_cpu(ctx, &hax, &haw, bias ? &hab : NULL, &hm));
            CHECK_OK(mpx_linear_t_forward_cuda(cctx, &dx_, &dw_, bias ? &db_ : NULL, &dy_out));
        } else {
            CHECK_OK(mpx_linear_forward_cpu(ctx, &hx, &hw, bias ? &hb : NULL, &hy));
            CHECK_OK(mpx_linear_forward_cpu(ctx, &hax, &haw, bias ? &hab : NULL, &hm));
            CHECK_OK(mpx_linear_forward_cuda(cctx, &dx_, &dw_, bias ? &db_ : NULL, &dy_out));
        }
        float *got = dev_read(&dy_out);
        snprintf(what, sizeof what, "%s forward %s x%s out %lld bias %d", name, cf->name, shp,
                 (long long)s->out, bias);
        check_close(what, cf->y, got, ref, mag, ny, gemm_rel(s->in), 0);
        free(got);
    }
    /* backward-data: K = OUT */
    {
        mpx_tensor hdx = host_t(s->ndim, xs, ref), hm = host_t(s->ndim, xs, mag);
        if (transposed) {
            CHECK_OK(mpx_linear_t_backward_data_cpu(ctx, &hdy, &hw, &hdx));
            CHECK_OK(mpx_linear_t_backward_data_cpu(ctx, &hady, &haw, &hm));
            CHECK_OK(mpx_linear_t_backward_data_cuda(cctx, &ddy, &dw_, &dgx));
        } else {
            CHECK_OK(mpx_linear_backward_data_cpu(ctx, &hdy, &hw, &hdx));
            CHECK_OK(mpx_linear_backward_data_cpu(ctx, &hady, &haw, &hm));
            CHECK_OK(mpx_linear_backward_data_cuda(cctx, &ddy, &dw_, &dgx));
        }
        float *got = dev_read(&dgx);
        snprintf(what, sizeof what, "%s backward-data %s x%s out %lld", name, cf->name, shp,
                 (long long)s->out);
        check_close(what, grad_dtype(cf, cf->x), got, ref, mag, nx, gemm_rel(s->out), 0);
        free(got);
        /* the scaled form (an adaptive factor, a power of two): the result times it, exactly,
         * so the same bound on the scaled reference */
        const float factor = 0.25f;
        if (transposed)
            CHECK_OK(mpx_linear_t_backward_data_scaled_cuda(cctx, factor, &ddy, &dw_, &dgx));
        else
            CHECK_OK(mpx_linear_backward_data_scaled_cuda(cctx, factor, &ddy, &dw_, &dgx));
        got = dev_read(&dgx);
        for (size_t i = 0; i < nx; i++) ref[i] *= factor, mag[i] *= factor;
        snprintf(what, sizeof what, "%s backward-data scaled by %g %s x%s out %lld", name,
                 (double)factor, cf->name, shp, (long long)s->out);
        check_close(what, grad_dtype(cf, cf->x), got, ref, mag, nx, gemm_rel(s->out), 0);
        free(got);
    }
    /* backward-weights: K = M; db exact */
    {
        mpx_tensor hdw = host_t(2, ws, ref), hm = host_t(2, ws, mag);
        mpx_tensor hdb = host_t(1, bs, ref_db), hmb = host_t(1, bs, mag_db);
        if (transposed) {
            CHECK_OK(mpx_linear_t_backward_weights_cpu(ctx, &hdy, &hx, &hdw, bias ? &hdb : NULL));
            CHECK_OK(mpx_linear_t_backward_weights_cpu(ctx, &hady, &hax, &hm, bias ? &hmb : NULL));
            CHECK_OK(
                mpx_linear_t_backward_weights_cuda(cctx, &ddy, &dx_, &dgw, bias ? &dgb : NULL));
        } else {
            CHECK_OK(mpx_linear_backward_weights_cpu(ctx, &hdy, &hx, &hdw, bias ? &hdb : NULL));
            CHECK_OK(mpx_linear_backward_weights_cpu(ctx, &hady, &hax, &hm, bias ? &hmb : NULL));
            CHECK_OK(mpx_linear_backward_weights_cuda(cctx, &ddy, &dx_, &dgw, bias ? &dgb : NULL));
        }
        float *got = dev_read(&dgw);
        snprintf(what, sizeof what, "%s backward-weights dw %s x%s out %lld", name, cf->name, shp,
                 (long long)s->out);
        check_close(what, cf->dw, got, ref, mag, nw, gemm_rel(m), 0);
        free(got);
        if (bias) {
            got = dev_read(&dgb);
            snprintf(what, sizeof what, "%s backward-weights db %s x%s out %lld", name, cf->name,
                     shp, (long long)s->out);
            check_exact(what, cf->dw, got, ref_db, (size_t)s->out);
            free(got);
        }
    }
    dev_free(&dx_), dev_free(&dw_), dev_free(&db_), dev_free(&ddy), dev_free(&dy_out);
    dev_free(&dgx), dev_free(&dgw), dev_free(&dgb);
    free(x), free(w), free(b), free(dy), free(ax), free(aw), free(ab), free(ady);
    free(ref), free(mag), free(ref_db), free(mag_db);
}

static void test_linear(void) {
    uint64_t seed = 100;
    for (size_t c = 0; c < sizeof CFGS / sizeof CFGS[0]; c++) {
        CHECK_OK(mpx_cuda_set_operand_format(cctx, CFGS[c].exact));
        for (size_t s = 0; s < sizeof LIN_SHAPES / sizeof LIN_SHAPES[0]; s++)
            for (int t = 0; t < 2; t++)
                for (int bias = 0; bias < 2; bias++)
                    test_linear_case(&CFGS[c], &LIN_SHAPES[s], t, bias, seed += 10);
    }
    CHECK_OK(mpx_cuda_set_operand_format(cctx, MPX_F32));
    check_device_clean("linear");
}

/* The ends of F16's range with every tensor in F16, declared (the executor's non-statistics
 * steps: cuBLAS on the stored data, rounding its outputs itself), x [64, 48], w [48, 32]:
 *  - the factor is applied before the rounding: dy of magnitude about 2^-20 (F16 subnormals)
 *    gives backward-data sums of about 2^-18, F16 subnormals with a few bits; scaled by 2^10
 *    they must meet the test bound against the CPU's FP32 result times the factor;
 *  - an overflow is Inf, not a saturated 65504 (the executor's non-finite count only sees Inf
 *    and NaN): w = 1 and dy = +-(512 + small) (one sign per row) give backward-data sums of 32
 *    such terms (2^14), times 2^8; x = +-2^8 with the sign of its row's dy gives weight
 *    gradients summing 64 products of 2^17. */
static void test_linear_f16_extremes(void) {
    CHECK_OK(mpx_cuda_set_operand_format(cctx, MPX_F16));
    enum { M = 64, IN = 48, OUT = 32 };
    const int64_t xs[2] = {M, IN}, ws[2] = {IN, OUT}, ys[2] = {M, OUT};
    float *w = rand_in(MPX_F16, IN * OUT, -1, 1, 81), *dy = rand_in(MPX_F32, M * OUT, -1, 1, 82);
    for (int i = 0; i < M * OUT; i++) dy[i] = mpx_round_to(MPX_F16, ldexpf(dy[i], -20));
    float *aw = abs_copy(w, IN * OUT), *ady = abs_copy(dy, M * OUT);
    float *ref = hbuf(M * IN), *mag = hbuf(M * IN), *x = hbuf(M * IN);
    mpx_tensor hw = host_t(2, ws, w), hdy = host_t(2, ys, dy), haw = host_t(2, ws, aw),
               hady = host_t(2, ys, ady), hdx = host_t(2, xs, ref), hm = host_t(2, xs, mag);
    mpx_tensor gw = dev_tensor(MPX_F16, 2, ws, w), gdy = dev_tensor(MPX_F16, 2, ys, dy);
    mpx_tensor gdx = dev_tensor(MPX_F16, 2, xs, NULL), gdw = dev_tensor(MPX_F16, 2, ws, NULL);
    CHECK_OK(mpx_linear_backward_data_cpu(ctx, &hdy, &hw, &hdx));
    CHECK_OK(mpx_linear_backward_data_cpu(ctx, &hady, &haw, &hm));
    CHECK_OK(mpx_linear_backward_data_scaled_cuda(cctx, 1024.0f, &gdy, &gw, &gdx));
    float *got = dev_read(&gdx);
    for (int i = 0; i < M * IN; i++) ref[i] *= 1024.0f, mag[i] *= 1024.0f;
    check_close("linear backward-data of F16 subnormals scaled by 2^10", MPX_F16, got, ref, mag,
                M * IN, gemm_rel(OUT), 0);
    free(got);

    for (int i = 0; i < IN * OUT; i++) w[i] = 1.0f;
    for (int i = 0; i < M * OUT; i++)
        dy[i] = mpx_round_to(MPX_F16, (i / OUT % 2 ? -1.0f : 1.0f) * (512.0f + fabsf(dy[i]) * 0x1p20f));
    for (int i = 0; i < M * IN; i++) x[i] = i / IN % 2 ? -256.0f : 256.0f;
    mpx_tensor gw1 = dev_tensor(MPX_F16, 2, ws, w), gdy1 = dev_tensor(MPX_F16, 2, ys, dy);
    mpx_tensor gx = dev_tensor(MPX_F16, 2, xs, x);
    CHECK_OK(mpx_linear_backward_data_scaled_cuda(cctx, 256.0f, &gdy1, &gw1, &gdx));
    got = dev_read(&gdx);
    int bad = 0;
    for (int i = 0; i < M * IN; i++) bad += !(isinf(got[i]) && (got[i] > 0) == (i / IN % 2 == 0));
    CHECK(bad == 0, "linear backward-data overflowing F16: %d of %d not the signed Inf (first: %g)",
          bad, M * IN, (double)got[0]);
    free(got);
    CHECK_OK(mpx_linear_backward_weights_cuda(cctx, &gdy1, &gx, &gdw, NULL));
    got = dev_read(&gdw);
    bad = 0;
    for (int i = 0; i < IN * OUT; i++) bad += !(isinf(got[i]) && got[i] > 0);
    CHECK(bad == 0, "linear backward-weights overflowing F16: %d of %d not +Inf (first: %g)", bad,
          IN * OUT, (double)got[0]);
    free(got);
    CHECK_OK(mpx_cuda_set_operand_format(cctx, MPX_F32));
    check_device_clean("linear f16 extremes");
    mpx_tensor *dev[] = {&gw, &gdy, &gdx, &gdw, &gw1, &gdy1, &gx};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        dev_free(dev[i]);
    free(w), free(dy), free(aw), free(ady), free(ref), free(mag), free(x);
}

/* ---- bmm ---- */

typedef struct {
    int nlead;
    int64_t lead[2];
    int64_t m, n, k;
} bmm_shape;

static const bmm_shape BMM_SHAPES[] = {
    {0, {0}, 1, 1, 1},     {0, {0}, 5, 7, 3},      {1, {3}, 17, 33, 64},
    {2, {2, 3}, 9, 16, 8}, {2, {1, 4}, 31, 5, 20},
};

/* a [..., r, c] */
static void mat_shape(const bmm_shape *s, int64_t r, int64_t c, int64_t *shape) {
    for (int i = 0; i < s->nlead; i++)
        shape[i] = s->lead[i];
    shape[s->nlead] = r;
    shape[s->nlead + 1] = c;
}

static void test_bmm_case(const gemm_cfg *cf, const bmm_shape *s, int ta, int tb, float alpha,
                          uint64_t seed) {
    char what[160];
    const mpx_bmm_attr at = {ta, tb, alpha}, aat = {ta, tb, fabsf(alpha)};
    const int nd = s->nlead + 2;
    int64_t as[4], bs[4], cs[4], batch = 1;
    for (int i = 0; i < s->nlead; i++)
        batch *= s->lead[i];
    mat_shape(s, ta ? s->k : s->m, ta ? s->m : s->k, as);
    mat_shape(s, tb ? s->n : s->k, tb ? s->k : s->n, bs);
    mat_shape(s, s->m, s->n, cs);
    const size_t na = (size_t)(batch * s->m * s->k), nb = (size_t)(batch * s->k * s->n);
    const size_t nc = (size_t)(batch * s->m * s->n);
    /* a in x's dtype, b in w's, c in y's (dc too; da, db in their operands' dtypes) */
    float *a = rand_in(data_format(cf->x, cf->exact), na, -1, 1, seed);
    float *b = rand_in(data_format(cf->w, cf->exact), nb, -1, 1, seed + 1);
    float *dc = rand_in(data_format(cf->y, cf->exact), nc, -1, 1, seed + 2);
    float *aa = abs_copy(a, na), *ab = abs_copy(b, nb), *adc = abs_copy(dc, nc);
    float *ref = hbuf(na + nb + nc), *mag = hbuf(na + nb + nc);
    mpx_tensor ha = host_t(nd, as, a), hb = host_t(nd, bs, b), hdc = host_t(nd, cs, dc);
    mpx_tensor haa = host_t(nd, as, aa), hab = host_t(nd, bs, ab), hadc = host_t(nd, cs, adc);
    mpx_tensor da_in = dev_tensor(cf->x, nd, as, a), db_in = dev_tensor(cf->w, nd, bs, b);
    mpx_tensor ddc = dev_tensor(cf->y, nd, cs, dc), dcout = dev_tensor(cf->y, nd, cs, NULL);
    mpx_tensor dga = dev_tensor(grad_dtype(cf, cf->x), nd, as, NULL),
               dgb = dev_tensor(grad_dtype(cf, cf->w), nd, bs, NULL);
    char shp[64];
    snprintf(shp, sizeof shp, "batch %lld M %lld N %lld K %lld ta %d tb %d alpha %g",
             (long long)batch, (long long)s->m, (long long)s->n, (long long)s->k, ta, tb,
             (double)alpha);

    mpx_tensor hc = host_t(nd, cs, ref), hm = host_t(nd, cs, mag);
    CHECK_OK(mpx_bmm_forward_cpu(ctx, &at, &ha, &hb, &hc));
    CHECK_OK(mpx_bmm_forward_cpu(ctx, &aat, &haa, &hab, &hm));
    CHECK_OK(mpx_bmm_forward_cuda(cctx, &at, &da_in, &db_in, &dcout));
    float *got = dev_read(&dcout);
    snprintf(what, sizeof what, "bmm forward %s %s", cf->name, shp);
    check_close(what, cf->y, got, ref, mag, nc, gemm_rel(s->k), 0);
    free(got);

    /* backward: da reduces over N, db over M */
    mpx_tensor hda = host_t(nd, as, ref), hdb = host_t(nd, bs, ref + na);
    mpx_tensor hma = host_t(nd, as, mag), hmb = host_t(nd, bs, mag + na);
    CHECK_OK(mpx_bmm_backward_cpu(ctx, &at, &hdc, &ha, &hb, &hda, &hdb));
    CHECK_OK(mpx_bmm_backward_cpu(ctx, &aat, &hadc, &haa, &hab, &hma, &hmb));
    CHECK_OK(mpx_bmm_backward_cuda(cctx, &at, &ddc, &da_in, &db_in, &dga, &dgb));
    got = dev_read(&dga);
    snprintf(what, sizeof what, "bmm backward da %s %s", cf->name, shp);
    check_close(what, grad_dtype(cf, cf->x), got, ref, mag, na, gemm_rel(s->n), 0);
    free(got);
    got = dev_read(&dgb);
    snprintf(what, sizeof what, "bmm backward db %s %s", cf->name, shp);
    check_close(what, grad_dtype(cf, cf->w), got, ref + na, mag + na, nb, gemm_rel(s->m), 0);
    free(got);
    /* only db wanted */
    dev_poison(&dgb);
    CHECK_OK(mpx_bmm_backward_cuda(cctx, &at, &ddc, &da_in, &db_in, NULL, &dgb));
    got = dev_read(&dgb);
    snprintf(what, sizeof what, "bmm backward db only %s %s", cf->name, shp);
    check_close(what, grad_dtype(cf, cf->w), got, ref + na, mag + na, nb, gemm_rel(s->m), 0);
    free(got);

    dev_free(&da_in), dev_free(&db_in), dev_free(&ddc), dev_free(&dcout), dev_free(&dga);
    dev_free(&dgb);
    free(a), free(b), free(dc), free(aa), free(ab), free(adc), free(ref), free(mag);
}

static void test_bmm(void) {
    uint64_t seed = 5000;
    for (size_t c = 0; c < sizeof CFGS / sizeof CFGS[0]; c++) {
        CHECK_OK(mpx_cuda_set_operand_format(cctx, CFGS[c].exact));
        for (size_t s = 0; s < sizeof BMM_SHAPES / sizeof BMM_SHAPES[0]; s++)
            for (int t = 0; t < 4; t++)
                test_bmm_case(&CFGS[c], &BMM_SHAPES[s], t & 1, t >> 1, (t & 1) ? 0.125f : 1.0f,
                              seed += 10);
    }
    CHECK_OK(mpx_cuda_set_operand_format(cctx, MPX_F32));
    check_device_clean("bmm");
}

/* ---- refusals: messages name the op and the tensor ---- */
static void test_errors(void) {
    const int64_t xs[2] = {4, 8}, ws[2] = {8, 3}, ys[2] = {4, 3}, bad_ws[2] = {7, 3};
    mpx_tensor x = dev_tensor(MPX_F32, 2, xs, NULL), w = dev_tensor(MPX_F32, 2, ws, NULL);
    mpx_tensor y = dev_tensor(MPX_F32, 2, ys, NULL), wb = dev_tensor(MPX_F32, 2, bad_ws, NULL);
    CHECK(mpx_linear_forward_cuda(cctx, &x, &wb, NULL, &y) == MPX_ERR_INPUT &&
              strstr(mpx_error_message(), "linear forward") && strstr(mpx_error_message(), "IN"),
          "IN mismatch refused: %s", mpx_error_message());
    mpx_tensor w8 = w;
    w8.dtype = MPX_F8_E4M3;
    CHECK(mpx_linear_forward_cuda(cctx, &x, &w8, NULL, &y) == MPX_ERR_UNSUPPORTED &&
              strstr(mpx_error_message(), "f8_e4m3"),
          "FP8 weights refused as unsupported: %s", mpx_error_message());
    mpx_tensor wi = w;
    wi.dtype = MPX_I32;
    CHECK(mpx_linear_forward_cuda(cctx, &x, &wi, NULL, &y) == MPX_ERR_INPUT &&
              strstr(mpx_error_message(), "i32"),
          "i32 weights refused: %s", mpx_error_message());
    mpx_tensor xh = x;
    xh.device = MPX_DEV_CPU;
    CHECK(mpx_linear_forward_cuda(cctx, &xh, &w, NULL, &y) == MPX_ERR_INPUT &&
              strstr(mpx_error_message(), "not a CUDA tensor"),
          "host tensor refused: %s", mpx_error_message());
    const mpx_bmm_attr inf_alpha = {0, 0, INFINITY};
    CHECK(mpx_bmm_forward_cuda(cctx, &inf_alpha, &x, &w, &y) == MPX_ERR_INPUT,
          "bmm alpha Inf refused");
    CHECK(mpx_linear_backward_data_scaled_cuda(cctx, -2.0f, &y, &w, &x) == MPX_ERR_INPUT &&
              strstr(mpx_error_message(), "scale"),
          "negative backward-data scale refused: %s", mpx_error_message());
    /* (the scale is checked before the shapes) */
    CHECK(mpx_linear_t_backward_data_scaled_cuda(cctx, INFINITY, &y, &wb, &x) == MPX_ERR_INPUT,
          "infinite backward-data scale refused");
    dev_free(&x), dev_free(&w), dev_free(&y), dev_free(&wb);
}

int main(void) {
    ctx = mpx_cpu_ctx_create();
    cctx = mpx_cuda_ctx_create();
    if (!ctx || !cctx) {
        fprintf(stderr, "FAIL: %s\n", mpx_error_message());
        return 1;
    }
    if (!ops_test_setup()) return MPX_TEST_SKIP;
    test_linear();
    test_linear_f16_extremes();
    test_bmm();
    test_errors();
    check_device_clean("end");
    /* Leaves nothing behind for compute-sanitizer's leak check. */
    CHECK(mpx_cuda_ctx_free(cctx) == MPX_OK, "mpx_cuda_ctx_free: %s", mpx_error_message());
    mpx_cpu_ctx_free(ctx);
    CHECK(mpx_cuda_release() == MPX_OK, "mpx_cuda_release: %s", mpx_error_message());
    return mpx_test_done(__FILE__);
}
