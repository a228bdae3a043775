/* test_mx_blocks.c — precision.mode = fp8 with the MXFP8 recipe through the executor: every
 * GEMM reads its operands in 32-element blocks along that GEMM's reduction dimension (the OCP
 * spec; Transformer Engine's rowwise and columnwise copies), so one tensor is blocked one way
 * where one GEMM reads it and another way where the next does.
 *
 * Two small graphs are compiled for the CPU: conv 3x3 -> reshape -> linear -> softmax
 * cross-entropy (the weights [IN, OUT] and HWIO reduce over their leading dims in the forward,
 * over OUT in backward-data; inputs and output gradients over positions in backward-weights),
 * and embedding -> three linears q, k, v -> bmm(q, k^T) -> bmm(s, v) -> the tied decoder
 * (weights [OUT, IN]) -> cross-entropy (both bmm transposes, both backward outputs). Each GEMM
 * result is compared, bit for bit, with the CPU operator run by hand on operands quantized here
 * along the dimension that GEMM reduces (mpx_mx_quantize on a transposed copy where that is
 * not the last dimension; the quantizer itself is checked against an independent reference in
 * tests/unit/test_fp8_recipes.c), both rounded to the BF16 the mode stores. Every block
 * direction is also shown to matter: the other direction gives other bits. A statistics step's
 * range of block scales per operand (stats.h: operand_scale_lo, _hi) is checked against the
 * blocks of the backward pass's casts.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/fp8.h"
#include "mpx/graph.h"
#include "mpx/numerics.h"
#include "mpx/ops.h"
#include "testutil.h"

static mpx_cpu_ctx *ctx;

enum { LAST, ROWS, BATCH_ROWS }; /* where the GEMM reduces (graph_ops.h: gemm_k) */

static float bf16(float x) { return mpx_bf16_to_f32(mpx_f32_to_bf16(x)); }

/* A host tensor of n floats (zeros when src is NULL). */
static mpx_tensor host(int ndim, const int64_t *shape, const float *src) {
    mpx_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = MPX_F32;
    t.device = MPX_DEV_CPU;
    t.ndim = ndim;
    memcpy(t.shape, shape, (size_t)ndim * sizeof *shape);
    const int64_t n = mpx_shape_numel(ndim, shape);
    t.data = calloc((size_t)n, sizeof(float));
    if (src) memcpy(t.data, src, (size_t)n * sizeof(float));
    return t;
}

/* t's values as MXFP8 (fmt, floor rule) in blocks along k of t's [B, R, C] view; the block
 * scales into *sc when not NULL. */
static mpx_tensor mx_scales(const mpx_tensor *t, mpx_dtype fmt, int k, mpx_mx_scales *sc) {
    mpx_tensor q = host(t->ndim, t->shape, t->data);
    float *d = q.data;
    const int64_t n = mpx_tensor_numel(t), c = t->shape[t->ndim - 1];
    if (k == LAST) {
        mpx_mx_quantize(fmt, MPX_MX_FLOOR, d, d, (size_t)n, (size_t)c, NULL, sc);
        return q;
    }
    const int64_t b = k == ROWS ? 1 : n / (t->shape[t->ndim - 2] * c), r = n / (b * c);
    float *tr = malloc((size_t)n * sizeof *tr);
    for (int64_t i = 0; i < b; i++)
        for (int64_t j = 0; j < r; j++)
            for (int64_t l = 0; l < c; l++) tr[(i * c + l) * r + j] = d[(i * r + j) * c + l];
    mpx_mx_quantize(fmt, MPX_MX_FLOOR, tr, tr, (size_t)n, (size_t)r, NULL, sc);
    for (int64_t i = 0; i < b; i++)
        for (int64_t j = 0; j < r; j++)
            for (int64_t l = 0; l < c; l++) d[(i * r + j) * c + l] = tr[(i * c + l) * r + j];
    free(tr);
    return q;
}

static mpx_tensor e4(const mpx_tensor *t, int k) { return mx_scales(t, MPX_F8_E4M3, k, NULL); }
static mpx_tensor e5(const mpx_tensor *t, int k) { return mx_scales(t, MPX_F8_E5M2, k, NULL); }

/* The statistics row's range of an operand's block scales (stats.h: operand_scale_lo, _hi)
 * against the blocks of its casts in the backward pass: t blocked along each of ks[0..nk). */
static void expect_scale_range(const char *what, const mpx_layer_stats *row, int slot,
                               const mpx_tensor *t, mpx_dtype fmt, const int *ks, int nk) {
    int lo = 0, hi = 0;
    for (int i = 0; i < nk; i++) {
        mpx_mx_scales sc;
        mpx_tensor q = mx_scales(t, fmt, ks[i], &sc);
        free(q.data);
        if (i == 0 || sc.min_exp < lo) lo = sc.min_exp;
        if (i == 0 || sc.max_exp > hi) hi = sc.max_exp;
    }
    CHECK(hi > lo, "%s: one block exponent (%d) over the whole tensor: a weak test", what, lo);
    CHECK(row->operand_scale_lo[slot] == ldexp(1.0, -hi) &&
              row->operand_scale_hi[slot] == ldexp(1.0, -lo) &&
              row->operand_scale[slot] == ldexp(1.0, -(lo + hi) / 2),
          "%s: block scales %g..%g (midpoint %g), want 2^%d..2^%d", what,
          row->operand_scale_lo[slot], row->operand_scale_hi[slot], row->operand_scale[slot],
          -hi, -lo);
}

/* The number of elements where got and want (n floats) differ once both are rounded to BF16. */
static int64_t differ(const float *got, const mpx_tensor *want) {
    int64_t bad = 0;
    const float *w = want->data;
    for (int64_t i = 0; i < mpx_tensor_numel(want); i++) {
        const float a = bf16(got[i]), b = bf16(w[i]);
        bad += memcmp(&a, &b, sizeof a) != 0;
    }
    return bad;
}

static void expect_same(const char *what, const float *got, const mpx_tensor *want) {
    const int64_t bad = differ(got, want);
    CHECK(bad == 0, "%s: %lld of %lld elements differ from the operator on operands blocked along "
                    "its reduction", what, (long long)bad, (long long)mpx_tensor_numel(want));
}

/* The other blocking must change the result, or the comparison above could not fail. */
static void expect_other(const char *what, const float *got, const mpx_tensor *other) {
    CHECK(differ(got, other) > 0, "%s: operands blocked the other way give the same bits", what);
}

static mpx_graph *compile(mpx_graph *g) {
    mpx_graph_keep_grads(g, 1);
    mpx_precision p;
    CHECK(mpx_precision_init(&p, "fp8", "rne", 0) == 0, "fp8 mode");
    p.fp8.recipe = MPX_FP8_MXFP8;
    CHECK_OK(mpx_graph_compile(g, &p, MPX_DEV_CPU, 5));
    return g;
}

static void run(mpx_graph *g, mpx_layer_stats *stats) {
    CHECK_OK(mpx_graph_forward(g, 1));
    mpx_backward_opts bo = {NULL, 1.0, 0, stats};
    int64_t nf = -1;
    CHECK_OK(mpx_graph_backward(g, &bo, &nf));
    CHECK(nf == 0, "non-finite gradients");
}

static mpx_param *param(mpx_graph *g, const char *name) {
    for (int i = 0; i < mpx_graph_n_params(g); i++)
        if (strcmp(mpx_graph_param(g, i)->name, name) == 0) return mpx_graph_param(g, i);
    CHECK(0, "no parameter %s", name);
    return NULL;
}

/* A parameter's working copy (what the ops read) as a host FP32 tensor. */
static mpx_tensor work(mpx_graph *g, const char *name) {
    const mpx_param *p = param(g, name);
    mpx_tensor t = host(p->ndim, p->shape, NULL);
    float *d = t.data;
    for (int64_t i = 0; i < p->numel; i++)
        d[i] = p->work_dtype == MPX_BF16 ? mpx_bf16_to_f32(((const uint16_t *)p->work)[i])
                                         : p->master[i];
    return t;
}

static mpx_tensor value(mpx_graph *g, int id, int ndim, const int64_t *shape, int grad) {
    mpx_tensor t = host(ndim, shape, NULL);
    CHECK_OK(grad ? mpx_graph_read_grad(g, id, t.data) : mpx_graph_read(g, id, t.data));
    return t;
}

static void release(mpx_tensor *t) { free(t->data); }

enum { N = 2, S = 4, C = 3, K = 40, OUT = 36 };

static void test_conv_linear(void) {
    mpx_graph *g = mpx_graph_new();
    const int64_t xs[4] = {N, S, S, C}, ys[4] = {N, S, S, K}, fs[2] = {N, S * S * K},
                  os[2] = {N, OUT};
    const int image = mpx_g_input(g, "image", MPX_INPUT_DATA, 4, xs);
    const int labels = mpx_g_input(g, "labels", MPX_INPUT_I32, 1, (int64_t[]){N});
    const int conv = mpx_g_conv2d(g, "c", image, K, 3, 3, 1, 1, 1);
    const int flat = mpx_g_reshape(g, "flat", conv, 2, fs);
    const int fc = mpx_g_linear(g, "fc", flat, OUT, 1);
    mpx_g_softmax_ce(g, "loss", fc, labels);
    compile(g);
    float x0[N * S * S * C];
    mpx_test_normal(x0, N * S * S * C, 0, 1, 3);
    const int32_t y0[N] = {1, 30};
    CHECK_OK(mpx_graph_set_input(g, image, x0, MPX_F32, N * S * S * C));
    CHECK_OK(mpx_graph_set_input(g, labels, y0, MPX_I32, N));
    const int nl = mpx_graph_n_layers(g);
    mpx_layer_stats *stats = calloc((size_t)nl, sizeof *stats);
    run(g, stats);

    mpx_tensor x = value(g, image, 4, xs, 0), yc = value(g, conv, 4, ys, 0);
    mpx_tensor f = value(g, flat, 2, fs, 0), yf = value(g, fc, 2, os, 0);
    mpx_tensor dyf = value(g, fc, 2, os, 1), dyc = value(g, conv, 4, ys, 1);
    mpx_tensor cw = work(g, "c.weight"), cb = work(g, "c.bias");
    mpx_tensor fw = work(g, "fc.weight"), fb = work(g, "fc.bias");
    const mpx_param *cwp = param(g, "c.weight"), *fwp = param(g, "fc.weight");
    mpx_conv2d_attr at = {1, 1, 1, 1};

    /* forward: inputs along C (last), weights along IN / KH KW C (rows) */
    mpx_tensor qx = e4(&x, LAST), qcw = e4(&cw, ROWS), qcw_o = e4(&cw, LAST);
    mpx_tensor want = host(4, ys, NULL);
    CHECK_OK(mpx_conv2d_forward_cpu(ctx, &at, &qx, &qcw, &cb, &want));
    expect_same("conv forward", yc.data, &want);
    CHECK_OK(mpx_conv2d_forward_cpu(ctx, &at, &qx, &qcw_o, &cb, &want));
    expect_other("conv forward (weight blocked along OUT)", yc.data, &want);
    mpx_tensor qf = e4(&f, LAST), qfw = e4(&fw, ROWS), qfw_o = e4(&fw, LAST);
    mpx_tensor wf = host(2, os, NULL);
    CHECK_OK(mpx_linear_forward_cpu(ctx, &qf, &qfw, &fb, &wf));
    expect_same("linear forward", yf.data, &wf);
    CHECK_OK(mpx_linear_forward_cpu(ctx, &qf, &qfw_o, &fb, &wf));
    expect_other("linear forward (weight blocked along OUT)", yf.data, &wf);

    /* backward-data: the output gradient and the weight along OUT (last) */
    mpx_tensor qdy = e5(&dyf, LAST), wdx = host(2, fs, NULL);
    CHECK_OK(mpx_linear_backward_data_cpu(ctx, &qdy, &qfw_o, &wdx));
    expect_same("linear backward-data", dyc.data, &wdx);
    CHECK_OK(mpx_linear_backward_data_cpu(ctx, &qdy, &qfw, &wdx));
    expect_other("linear backward-data (weight blocked along IN)", dyc.data, &wdx);

    /* backward-weights: input and output gradient along positions (rows) */
    mpx_tensor qdy_r = e5(&dyf, ROWS), qf_r = e4(&f, ROWS), wdw = host(2, fwp->shape, NULL),
               wdb = host(1, (int64_t[]){OUT}, NULL);
    CHECK_OK(mpx_linear_backward_weights_cpu(ctx, &qdy_r, &qf_r, &wdw, &wdb));
    expect_same("linear weight gradient", fwp->grad, &wdw);
    CHECK_OK(mpx_linear_backward_weights_cpu(ctx, &qdy, &qf, &wdw, &wdb));
    expect_other("linear weight gradient (operands blocked along their rows)", fwp->grad, &wdw);
    mpx_tensor qdyc = e5(&dyc, ROWS), qx_r = e4(&x, ROWS), wcw = host(4, cwp->shape, NULL),
               wcb = host(1, (int64_t[]){K}, NULL);
    CHECK_OK(mpx_conv2d_backward_weights_cpu(ctx, &at, &qdyc, &qx_r, &wcw, &wcb));
    expect_same("conv weight gradient", cwp->grad, &wcw);
    mpx_tensor qdyc_l = e5(&dyc, LAST);
    CHECK_OK(mpx_conv2d_backward_weights_cpu(ctx, &at, &qdyc_l, &qx, &wcw, &wcb));
    expect_other("conv weight gradient (operands blocked along C)", cwp->grad, &wcw);

    /* the statistics step's scale ranges of the linear layer: the weight as backward-data read
     * it, the input as backward-weights did, the output gradient as both did */
    int lf = -1;
    for (int l = 0; l < nl; l++) {
        mpx_layer_info li;
        mpx_graph_layer(g, l, &li);
        if (strcmp(li.name, "fc") == 0) lf = l;
    }
    CHECK(lf >= 0, "no layer fc");
    if (lf >= 0) {
        expect_scale_range("fc weight", &stats[lf], MPX_OPERAND_W, &fw, MPX_F8_E4M3,
                           (int[]){LAST}, 1);
        expect_scale_range("fc input", &stats[lf], MPX_OPERAND_X, &f, MPX_F8_E4M3,
                           (int[]){ROWS}, 1);
        expect_scale_range("fc output gradient", &stats[lf], MPX_OPERAND_DY, &dyf, MPX_F8_E5M2,
                           (int[]){LAST, ROWS}, 2);
    }
    free(stats);

    mpx_tensor *all[] = {&x,   &yc,  &f,    &yf,  &dyf, &dyc,   &cw,  &cb,    &fw,  &fb,
                         &qx,  &qcw, &qcw_o, &want, &qf, &qfw,  &qfw_o, &wf,  &qdy,  &wdx,
                         &qdy_r, &qf_r, &wdw, &wdb, &qdyc, &qx_r, &wcw, &wcb, &qdyc_l};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(all[i]);
    mpx_graph_free(g);
}

enum { B = 2, T = 8, D = 40, V = 12 };

static void test_attention(void) {
    mpx_graph *g = mpx_graph_new();
    const int64_t is[2] = {B, T}, hs[3] = {B, T, D}, ss[3] = {B, T, T}, rs[2] = {B * T, D},
                  ls[2] = {B * T, V};
    const int ids = mpx_g_input(g, "ids", MPX_INPUT_I32, 2, is);
    const int labels = mpx_g_input(g, "labels", MPX_INPUT_I32, 1, (int64_t[]){B * T});
    const int x = mpx_g_embedding(g, "emb", ids, V, D, (mpx_init){MPX_INIT_NORMAL, 1.0f});
    const int q = mpx_g_linear(g, "q", x, D, 0), k = mpx_g_linear(g, "k", x, D, 0),
              v = mpx_g_linear(g, "v", x, D, 0);
    const int s = mpx_g_bmm(g, "s", q, k, 0, 1, 1.0f);
    const int o = mpx_g_bmm(g, "o", s, v, 0, 0, 1.0f);
    const int o2 = mpx_g_reshape(g, "o2", o, 2, rs);
    const int logits = mpx_g_linear_tied(g, "dec", o2, "emb.weight", 0);
    mpx_g_softmax_ce(g, "loss", logits, labels);
    compile(g);
    int32_t id0[B * T], y0[B * T];
    for (int i = 0; i < B * T; i++) id0[i] = (i * 7 + 3) % V, y0[i] = (i * 5 + 1) % V;
    CHECK_OK(mpx_graph_set_input(g, ids, id0, MPX_I32, B * T));
    CHECK_OK(mpx_graph_set_input(g, labels, y0, MPX_I32, B * T));
    run(g, NULL);

    mpx_tensor tq = value(g, q, 3, hs, 0), tk = value(g, k, 3, hs, 0), tv = value(g, v, 3, hs, 0);
    mpx_tensor ts = value(g, s, 3, ss, 0), to = value(g, o, 3, hs, 0);
    mpx_tensor tl = value(g, logits, 2, ls, 0);
    mpx_tensor to2 = value(g, o2, 2, rs, 0), dl = value(g, logits, 2, ls, 1);
    mpx_tensor dov = value(g, o, 3, hs, 1), dsv = value(g, s, 3, ss, 1);
    mpx_tensor dq = value(g, q, 3, hs, 1), dk = value(g, k, 3, hs, 1), dv = value(g, v, 3, hs, 1);
    mpx_tensor emb = work(g, "emb.weight");
    mpx_bmm_attr qk = {0, 1, 1.0f}, sv = {0, 0, 1.0f};

    /* forward: s = q k^T (both along D, their last), o = s v (v along T), logits = o2 E^T */
    mpx_tensor qq = e4(&tq, LAST), qk_l = e4(&tk, LAST), ws = host(3, ss, NULL);
    CHECK_OK(mpx_bmm_forward_cpu(ctx, &qk, &qq, &qk_l, &ws));
    expect_same("bmm q k^T forward", ts.data, &ws);
    mpx_tensor qs = e4(&ts, LAST), qv = e4(&tv, BATCH_ROWS), qv_l = e4(&tv, LAST);
    mpx_tensor wo = host(3, hs, NULL);
    CHECK_OK(mpx_bmm_forward_cpu(ctx, &sv, &qs, &qv, &wo));
    expect_same("bmm s v forward", to.data, &wo);
    CHECK_OK(mpx_bmm_forward_cpu(ctx, &sv, &qs, &qv_l, &wo));
    expect_other("bmm s v forward (v blocked along D)", to.data, &wo);
    mpx_tensor qo2 = e4(&to2, LAST), qe = e4(&emb, LAST), qe_r = e4(&emb, ROWS);
    mpx_tensor wl = host(2, ls, NULL);
    CHECK_OK(mpx_linear_t_forward_cpu(ctx, &qo2, &qe, NULL, &wl));
    expect_same("tied decoder forward", tl.data, &wl);

    /* backward-data of the decoder: reduces over V, the weight's rows */
    mpx_tensor qdl = e5(&dl, LAST), wdo = host(2, rs, NULL);
    CHECK_OK(mpx_linear_t_backward_data_cpu(ctx, &qdl, &qe_r, &wdo));
    expect_same("tied decoder backward-data", dov.data, &wdo);
    CHECK_OK(mpx_linear_t_backward_data_cpu(ctx, &qdl, &qe, &wdo));
    expect_other("tied decoder backward-data (weight blocked along D)", dov.data, &wdo);

    /* bmm backward: da reduces over N (dy's last), db over M (dy's and a's rows per batch) */
    mpx_tensor qdo = e5(&dov, LAST), qdo_r = e5(&dov, BATCH_ROWS), qs_r = e4(&ts, BATCH_ROWS);
    mpx_tensor wds = host(3, ss, NULL), wdv = host(3, hs, NULL);
    CHECK_OK(mpx_bmm_backward_cpu(ctx, &sv, &qdo, &qs_r, &qv_l, &wds, NULL));
    expect_same("bmm s v: gradient of s", dsv.data, &wds);
    CHECK_OK(mpx_bmm_backward_cpu(ctx, &sv, &qdo_r, &qs_r, &qv_l, NULL, &wdv));
    expect_same("bmm s v: gradient of v", dv.data, &wdv);
    CHECK_OK(mpx_bmm_backward_cpu(ctx, &sv, &qdo, &qs, &qv_l, NULL, &wdv));
    expect_other("bmm s v: gradient of v (operands blocked along their last)", dv.data, &wdv);
    mpx_tensor qds = e5(&dsv, LAST), qds_r = e5(&dsv, BATCH_ROWS), qq_r = e4(&tq, BATCH_ROWS),
               qk_r = e4(&tk, BATCH_ROWS), wdq = host(3, hs, NULL), wdk = host(3, hs, NULL);
    CHECK_OK(mpx_bmm_backward_cpu(ctx, &qk, &qds, &qq_r, &qk_r, &wdq, NULL));
    expect_same("bmm q k^T: gradient of q", dq.data, &wdq);
    CHECK_OK(mpx_bmm_backward_cpu(ctx, &qk, &qds, &qq_r, &qk_l, &wdq, NULL));
    expect_other("bmm q k^T: gradient of q (k blocked along D)", dq.data, &wdq);
    CHECK_OK(mpx_bmm_backward_cpu(ctx, &qk, &qds_r, &qq_r, &qk_r, NULL, &wdk));
    expect_same("bmm q k^T: gradient of k", dk.data, &wdk);

    mpx_tensor *all[] = {&tq,  &tk,   &tv,   &ts,  &to,  &tl,   &to2, &dl,  &dov, &dsv,
                         &dq,  &dk,   &dv,   &emb, &qq,  &qk_l, &ws,  &qs,  &qv,  &qv_l,
                         &wo,  &qo2,  &qe,   &qe_r, &wl, &qdl,  &wdo, &qdo, &qdo_r, &qs_r,
                         &wds, &wdv,  &qds,  &qds_r, &qq_r, &qk_r, &wdq, &wdk};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) release(all[i]);
    mpx_graph_free(g);
}

int main(void) {
    ctx = mpx_cpu_ctx_create();
    if (!ctx) {
        fprintf(stderr, "FAIL: %s\n", mpx_error_message());
        return 1;
    }
    test_conv_linear();
    test_attention();
    mpx_cpu_ctx_free(ctx);
    return mpx_test_done(__FILE__);
}
