/* test_direct_io.c — the executor handing 16-bit storage to the operators (backend.h:
 * direct_io) computes what its FP32-view emulation computes, bit for bit.
 *
 * The test builds a backend that does what a direct-I/O backend (CUDA) does inside its kernels
 * (with the CPU GEMM family's native 16-bit kernels off, as the FP32 ops they are compared with
 * sum in another order): every operator decodes its F16/BF16 tensors exactly
 * into FP32 copies, runs the CPU operator on them, and rounds its 16-bit outputs once to nearest
 * even. The same graph trained on it and on the plain CPU backend (which gets FP32 views) must
 * then agree in every bit: the loss, the non-finite count and the gradient norm of each step,
 * every layer's statistics (the cast counts and histograms included) on statistics steps, and
 * the weights at the end — for a ResNet with an ImageNet stem (max-pool), a one-layer BERT
 * (embeddings, attention, dropout, GELU, layer-norm, a tied decoder) and an SSD (concat, the
 * MultiBox loss), in fp16 without scaling, with dynamic, adaptive and adaptive-quantile scaling,
 * in bf16, and with stochastic rounding; adaptive factors are applied by the backward-data
 * entries that take them (conv2d_backward_data_scaled...), or by the executor's commit on a
 * backend without them. Only exact agreement is accepted: both runs do the same
 * FP32 arithmetic on the same values; only where the decoding and the rounding happen differs.
 *
 * The plain CPU backend's batch-norm, ReLU and add take 16-bit storage themselves (op_direct_io,
 * lib/ops/tile.h); the same variants trained on it and on the emulation must agree in every bit
 * too.
 *
 * The instrumented backend counts the 16-bit tensors it was handed (and of the outputs, the
 * gradients), so the test also fails if the executor stops using the direct path for values or
 * for gradients (or lets operators round under stochastic rounding, whose streams only the
 * executor's cast has, or uses it with precision.direct_io off). Statistics steps (every odd
 * step of the trace) keep the gradients' FP32 commit: a gradient an op rounded itself could no
 * longer be counted, so there the traces would differ.
 */
#include <stdlib.h>
#include <string.h>

#include "mpx/backend.h"
#include "mpx/ops.h"
#include "testutil.h"
#include "train_trace.h"

/* The CPU backend's operators' context (its switches and counters). */
static mpx_cpu_ctx *cpu_ctx(void) { return mpx_backend_cpu_ctx(mpx_backend_cpu()); }

/* ---- the instrumented backend: the CPU's, with 16-bit storage decoded and rounded per op ---- */

static const mpx_backend *cpu;
static mpx_backend emulated, direct;
static long long g_in16, g_out16; /* 16-bit tensors handed in to be read / to be written */
static long long g_grad16;        /* of those written: gradients (a backward pass's outputs) */
static long long g_scaled;        /* backward-data calls that applied a factor other than 1 */

enum { MAX_IO = 12 };
typedef struct {
    int n;
    const mpx_tensor *orig[MAX_IO];
    mpx_tensor view[MAX_IO];
    int out[MAX_IO]; /* 0: read; 1: written; 2: a gradient written */
    float scale;     /* the scaled backward-data entries: the factor applied before rounding */
} io;

static int is16(mpx_dtype t) { return t == MPX_F16 || t == MPX_BF16; }

/* The tensor as the CPU operator takes it: itself, or an FP32 copy of its 16-bit storage
 * (outputs too: some operators read what they update). */
static mpx_tensor *take(io *s, const mpx_tensor *t, int out) {
    if (!t || !t->data || !is16(t->dtype)) return (mpx_tensor *)t;
    CHECK(s->n < MAX_IO, "too many 16-bit tensors in one call");
    const int k = s->n++;
    const size_t n = (size_t)mpx_tensor_numel(t);
    s->orig[k] = t;
    s->out[k] = out;
    s->view[k] = *t;
    s->view[k].dtype = MPX_F32;
    s->view[k].data = malloc(n * sizeof(float) + 1);
    cpu->decode(cpu, t->dtype, t->data, s->view[k].data, n);
    if (out)
        g_out16++;
    else
        g_in16++;
    if (out == 2) g_grad16++;
    return &s->view[k];
}

/* Round the outputs into their storage (once, to nearest even) and free the copies. */
static mpx_status done(io *s, mpx_status st) {
    for (int k = 0; k < s->n; k++) {
        if (st == MPX_OK && s->out[k]) {
            mpx_cast_spec c = mpx_cast_plain(s->orig[k]->dtype);
            if (s->out[k] == 2 && s->scale != 0) c.scale = s->scale;
            cpu->cast(cpu, &c, s->view[k].data, s->orig[k]->data,
                      (size_t)mpx_tensor_numel(s->orig[k]));
        }
        free(s->view[k].data);
    }
    return st;
}

#define IN(t) take(&s, (t), 0)
#define OUT(t) take(&s, (t), 1)
#define GRAD(t) take(&s, (t), 2)
#define CALL(fn, ...)                                                                              \
    io s = {0};                                                                                    \
    (void)be_;                                                                                     \
    return done(&s, cpu->fn(cpu, __VA_ARGS__))

typedef const mpx_tensor ct;
typedef mpx_tensor mt;

/* The scaled backward-data entries: the CPU's result times `factor` before the one rounding into
 * the 16-bit dx, as a device applies it in its GEMM epilogue. The executor calls them only for
 * a gradient it lets the op write into 16-bit storage (checked). */
#define CALL_SCALED(factor, dx, fn, ...)                                                           \
    CHECK(is16((dx)->dtype), "a scaled backward-data call with a %s dx",                           \
          mpx_dtype_name((dx)->dtype));                                                            \
    io s = {0};                                                                                    \
    s.scale = (factor);                                                                            \
    if ((factor) != 1.0f) g_scaled++;                                                              \
    (void)be_;                                                                                     \
    return done(&s, cpu->fn(cpu, __VA_ARGS__))

static mpx_status conv_f(const mpx_backend *be_, const mpx_conv2d_attr *a, ct *x, ct *w, ct *b,
                         mt *y) {
    CALL(conv2d_forward, a, IN(x), IN(w), IN(b), OUT(y));
}
static mpx_status conv_bd(const mpx_backend *be_, const mpx_conv2d_attr *a, ct *dy, ct *w, mt *dx) {
    CALL(conv2d_backward_data, a, IN(dy), IN(w), GRAD(dx));
}
static mpx_status conv_bds(const mpx_backend *be_, const mpx_conv2d_attr *a, float sc, ct *dy,
                           ct *w, mt *dx) {
    CALL_SCALED(sc, dx, conv2d_backward_data, a, IN(dy), IN(w), GRAD(dx));
}
static mpx_status conv_bw(const mpx_backend *be_, const mpx_conv2d_attr *a, ct *dy, ct *x, mt *dw,
                          mt *db) {
    CALL(conv2d_backward_weights, a, IN(dy), IN(x), GRAD(dw), GRAD(db));
}
static mpx_status bn_f(const mpx_backend *be_, const mpx_batchnorm_attr *a, ct *x, ct *g, ct *b,
                       mt *y, mt *rm, mt *rv, mt *sm, mt *si) {
    CALL(batchnorm_forward, a, IN(x), IN(g), IN(b), OUT(y), OUT(rm), OUT(rv), OUT(sm), OUT(si));
}
static mpx_status bn_b(const mpx_backend *be_, const mpx_batchnorm_attr *a, ct *dy, ct *x, ct *g,
                       ct *b, ct *sm, ct *si, mt *dx, mt *dg, mt *db) {
    CALL(batchnorm_backward, a, IN(dy), IN(x), IN(g), IN(b), IN(sm), IN(si), GRAD(dx), GRAD(dg),
         GRAD(db));
}
static mpx_status relu_f(const mpx_backend *be_, ct *x, mt *y) {
    CALL(relu_forward, IN(x), OUT(y));
}
static mpx_status relu_b(const mpx_backend *be_, ct *dy, ct *y, mt *dx) {
    CALL(relu_backward, IN(dy), IN(y), GRAD(dx));
}
static mpx_status pool_f(const mpx_backend *be_, const mpx_pool2d_attr *a, ct *x, mt *y) {
    CALL(maxpool2d_forward, a, IN(x), OUT(y));
}
static mpx_status pool_b(const mpx_backend *be_, const mpx_pool2d_attr *a, ct *dy, ct *x, ct *y,
                         mt *dx) {
    CALL(maxpool2d_backward, a, IN(dy), IN(x), IN(y), GRAD(dx));
}
static mpx_status gap_f(const mpx_backend *be_, ct *x, mt *y) {
    CALL(avgpool_global_forward, IN(x), OUT(y));
}
static mpx_status gap_b(const mpx_backend *be_, ct *dy, mt *dx) {
    CALL(avgpool_global_backward, IN(dy), GRAD(dx));
}
static mpx_status lin_f(const mpx_backend *be_, ct *x, ct *w, ct *b, mt *y) {
    CALL(linear_forward, IN(x), IN(w), IN(b), OUT(y));
}
static mpx_status lin_fr(const mpx_backend *be_, ct *x, ct *w, ct *b, ct *mask, mt *y) {
    CALL(linear_forward_rows, IN(x), IN(w), IN(b), IN(mask), OUT(y));
}
static mpx_status lin_bd(const mpx_backend *be_, ct *dy, ct *w, mt *dx) {
    CALL(linear_backward_data, IN(dy), IN(w), GRAD(dx));
}
static mpx_status lin_bds(const mpx_backend *be_, float sc, ct *dy, ct *w, mt *dx) {
    CALL_SCALED(sc, dx, linear_backward_data, IN(dy), IN(w), GRAD(dx));
}
static mpx_status lin_bw(const mpx_backend *be_, ct *dy, ct *x, mt *dw, mt *db) {
    CALL(linear_backward_weights, IN(dy), IN(x), GRAD(dw), GRAD(db));
}
static mpx_status add_f(const mpx_backend *be_, ct *a, ct *b, mt *y) {
    CALL(add_forward, IN(a), IN(b), OUT(y));
}
static mpx_status add_relu_f(const mpx_backend *be_, ct *a, ct *b, mt *y) {
    CALL(add_relu_forward, IN(a), IN(b), OUT(y));
}
static mpx_status ce_f(const mpx_backend *be_, ct *x, ct *lab, mt *loss, mt *p) {
    CALL(softmax_ce_forward, IN(x), IN(lab), OUT(loss), OUT(p));
}
static mpx_status ce_b(const mpx_backend *be_, ct *p, ct *lab, mt *dx) {
    CALL(softmax_ce_backward, IN(p), IN(lab), GRAD(dx));
}
static mpx_status lint_f(const mpx_backend *be_, ct *x, ct *w, ct *b, mt *y) {
    CALL(linear_t_forward, IN(x), IN(w), IN(b), OUT(y));
}
static mpx_status lint_fr(const mpx_backend *be_, ct *x, ct *w, ct *b, ct *mask, mt *y) {
    CALL(linear_t_forward_rows, IN(x), IN(w), IN(b), IN(mask), OUT(y));
}
static mpx_status lint_bd(const mpx_backend *be_, ct *dy, ct *w, mt *dx) {
    CALL(linear_t_backward_data, IN(dy), IN(w), GRAD(dx));
}
static mpx_status lint_bds(const mpx_backend *be_, float sc, ct *dy, ct *w, mt *dx) {
    CALL_SCALED(sc, dx, linear_t_backward_data, IN(dy), IN(w), GRAD(dx));
}
static mpx_status lint_bw(const mpx_backend *be_, ct *dy, ct *x, mt *dw, mt *db) {
    CALL(linear_t_backward_weights, IN(dy), IN(x), GRAD(dw), GRAD(db));
}
static mpx_status ln_f(const mpx_backend *be_, float eps, ct *x, ct *g, ct *b, mt *y, mt *m,
                       mt *is) {
    CALL(layernorm_forward, eps, IN(x), IN(g), IN(b), OUT(y), OUT(m), OUT(is));
}
static mpx_status ln_b(const mpx_backend *be_, ct *dy, ct *x, ct *g, ct *m, ct *is, mt *dx, mt *dg,
                       mt *db) {
    CALL(layernorm_backward, IN(dy), IN(x), IN(g), IN(m), IN(is), GRAD(dx), GRAD(dg), GRAD(db));
}
static mpx_status gelu_f(const mpx_backend *be_, ct *x, mt *y) {
    CALL(gelu_forward, IN(x), OUT(y));
}
static mpx_status gelu_b(const mpx_backend *be_, ct *dy, ct *x, mt *dx) {
    CALL(gelu_backward, IN(dy), IN(x), GRAD(dx));
}
static mpx_status emb_f(const mpx_backend *be_, ct *ids, ct *w, mt *y) {
    CALL(embedding_forward, IN(ids), IN(w), OUT(y));
}
static mpx_status emb_b(const mpx_backend *be_, ct *dy, ct *ids, mt *dw) {
    CALL(embedding_backward, IN(dy), IN(ids), GRAD(dw));
}
static mpx_status bmm_f(const mpx_backend *be_, const mpx_bmm_attr *a, ct *x, ct *y, mt *z) {
    CALL(bmm_forward, a, IN(x), IN(y), OUT(z));
}
static mpx_status bmm_b(const mpx_backend *be_, const mpx_bmm_attr *a, ct *dz, ct *x, ct *y, mt *dx,
                        mt *dy) {
    CALL(bmm_backward, a, IN(dz), IN(x), IN(y), GRAD(dx), GRAD(dy));
}
static mpx_status sm_f(const mpx_backend *be_, float sc, ct *x, ct *mask, mt *y) {
    CALL(softmax_forward, sc, IN(x), IN(mask), OUT(y));
}
static mpx_status sm_b(const mpx_backend *be_, float sc, ct *dy, ct *y, mt *dx) {
    CALL(softmax_backward, sc, IN(dy), IN(y), GRAD(dx));
}
static mpx_status drop_f(const mpx_backend *be_, const mpx_dropout_attr *a, ct *x, mt *y) {
    CALL(dropout_forward, a, IN(x), OUT(y));
}
static mpx_status drop_b(const mpx_backend *be_, const mpx_dropout_attr *a, ct *dy, mt *dx) {
    CALL(dropout_backward, a, IN(dy), GRAD(dx));
}
static mpx_status perm_f(const mpx_backend *be_, const int *p, ct *x, mt *y) {
    CALL(permute_forward, p, IN(x), OUT(y));
}
static mpx_status perm_b(const mpx_backend *be_, const int *p, ct *dy, mt *dx) {
    CALL(permute_backward, p, IN(dy), GRAD(dx));
}
static mpx_status mb_f(const mpx_backend *be_, const mpx_multibox_attr *a, ct *conf, ct *loc,
                       ct *pri, ct *boxes, ct *labels, mt *ws, mt *loss, mt *probs, mt *tgt,
                       mt *lt) {
    CALL(multibox_forward, a, IN(conf), IN(loc), IN(pri), IN(boxes), IN(labels), OUT(ws), OUT(loss),
         OUT(probs), OUT(tgt), OUT(lt));
}
static mpx_status mb_b(const mpx_backend *be_, const mpx_multibox_attr *a, ct *probs, ct *tgt,
                       ct *loc, ct *lt, mt *dconf, mt *dloc) {
    CALL(multibox_backward, a, IN(probs), IN(tgt), IN(loc), IN(lt), GRAD(dconf), GRAD(dloc));
}

static int direct16(const mpx_backend *be_, mpx_dtype t) {
    (void)be_;
    return is16(t);
}

static void make_direct_backend(void) {
    /* The reference: the CPU backend emulating every 16-bit op through FP32 views (its batch-norm,
     * ReLU and add otherwise take 16-bit storage themselves: op_direct_io, compared below). */
    emulated = *mpx_backend_cpu();
    emulated.op_direct_io = NULL;
    cpu = &emulated;
    direct = *cpu;
    direct.name = "cpu (direct 16-bit I/O)";
    direct.direct_io = direct16;
    direct.conv2d_forward = conv_f, direct.conv2d_backward_data = conv_bd;
    direct.conv2d_backward_weights = conv_bw;
    direct.batchnorm_forward = bn_f, direct.batchnorm_backward = bn_b;
    direct.relu_forward = relu_f, direct.relu_backward = relu_b;
    direct.maxpool2d_forward = pool_f, direct.maxpool2d_backward = pool_b;
    direct.avgpool_global_forward = gap_f, direct.avgpool_global_backward = gap_b;
    direct.linear_forward = lin_f, direct.linear_backward_data = lin_bd;
    direct.linear_backward_weights = lin_bw, direct.linear_forward_rows = lin_fr;
    direct.add_forward = add_f, direct.add_relu_forward = add_relu_f;
    direct.softmax_ce_forward = ce_f, direct.softmax_ce_backward = ce_b;
    direct.linear_t_forward = lint_f, direct.linear_t_backward_data = lint_bd;
    direct.linear_t_backward_weights = lint_bw, direct.linear_t_forward_rows = lint_fr;
    direct.layernorm_forward = ln_f, direct.layernorm_backward = ln_b;
    direct.gelu_forward = gelu_f, direct.gelu_backward = gelu_b;
    direct.embedding_forward = emb_f, direct.embedding_backward = emb_b;
    direct.bmm_forward = bmm_f, direct.bmm_backward = bmm_b;
    direct.softmax_forward = sm_f, direct.softmax_backward = sm_b;
    direct.dropout_forward = drop_f, direct.dropout_backward = drop_b;
    direct.permute_forward = perm_f, direct.permute_backward = perm_b;
    direct.multibox_forward = mb_f, direct.multibox_backward = mb_b;
    direct.conv2d_backward_data_scaled = conv_bds;
    direct.linear_backward_data_scaled = lin_bds;
    direct.linear_t_backward_data_scaled = lint_bds;
}

/* Trains v on the plain CPU backend and on `be` (the instrumented one, with or without the
 * scaled backward-data entries) and requires the same bits. */
static void compare(const variant *v, const mpx_backend *be) {
    trace a, b;
    run(v, cpu, &a);
    const long long in0 = g_in16, out0 = g_out16, grad0 = g_grad16, scaled0 = g_scaled;
    run(v, be, &b);
    const long long in16 = g_in16 - in0, out16 = g_out16 - out0, grad16 = g_grad16 - grad0;
    const long long scaled = g_scaled - scaled0;
    const int has_scaled = be->conv2d_backward_data_scaled != NULL;
    char what[128];
    snprintf(what, sizeof what, "%s %s %s%s %s%s%s%s", v->model, v->mode, v->scaling,
             v->als_ref ? " (reference)" : "", v->rounding, v->decoded ? " (direct_io off)" : "",
             has_scaled ? "" : " (no scaled entries)", v->pure ? " (no masters)" : "");
    printf("%s: loss %.6f -> %.6f; 16-bit tensors handed to ops: %lld read, %lld written "
           "(%lld gradients); %lld backward-data calls applied a factor\n",
           what, (double)a.loss[0], (double)a.loss[STEPS - 1], in16, out16, grad16, scaled);
    /* The path is taken when it should be: stored values, weights and gradients reach the ops
     * as they are, ops round forward values and the gradients whose commit is a plain rounding
     * (non-statistics steps) themselves exactly when the policy rounds to nearest — applying
     * a layer's adaptive factor themselves where the backend can — and nothing 16-bit reaches
     * them with precision.direct_io off. */
    if (v->decoded)
        CHECK(in16 == 0 && out16 == 0, "%s: %lld + %lld 16-bit tensors reached operators", what,
              in16, out16);
    else if (strcmp(v->rounding, "rne") == 0)
        CHECK(in16 > 0 && out16 > grad16 && grad16 > 0,
              "%s: 16-bit tensors read %lld, written %lld (%lld gradients)", what, in16, out16,
              grad16);
    else
        CHECK(in16 > 0 && out16 == 0,
              "%s: 16-bit tensors read %lld, written %lld under "
              "stochastic rounding",
              what, in16, out16);
    /* (adaptive-quantile updates its factors on every non-statistics step of the trace, and
     * those steps' gradients take the commit: their quantiles come from the FP32 values) */
    /* (als = reference multiplies the factor into dy before the GEMM instead) */
    const int factors = strcmp(v->scaling, "adaptive") == 0 && !v->decoded &&
                        strcmp(v->rounding, "rne") == 0 && has_scaled && !v->als_ref;
    if (factors)
        CHECK(scaled > 0, "%s: no backward-data call applied an adaptive factor", what);
    else
        CHECK(scaled == 0, "%s: %lld backward-data calls applied a factor", what, scaled);
    compare_traces(what, &a, &b);
    trace_free(&a);
    trace_free(&b);
}

int main(void) {
    /* The CPU's native 16-bit GEMMs sum in another order than the FP32 ones the instrumented
     * backend runs (tests/model/test_native16_trace.c compares those paths); off here, so that
     * both runs do the same FP32 arithmetic on every host. */
    mpx_gemm_lowp_force(cpu_ctx(), 0);
    make_direct_backend();
    static const variant vs[] = {
        {"resnet", "fp16", "none", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "fp16", "dynamic", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "fp16", "adaptive", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "fp16", "adaptive-quantile", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "bf16", "none", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "fp16", "adaptive", "stochastic", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"bert", "fp16", "adaptive", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"bert", "bf16", "dynamic", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        /* masked-LM labels: the rows forward */
        {"bert", "fp16", "adaptive", "rne", 0, 0, 0, 0, 1, 0, 0, 0, 0, 0},
        {"ssd", "fp16", "adaptive", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"ssd", "fp16", "dynamic", "stochastic", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "fp16", "adaptive", "rne", 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        /* the 2019 reference ALS (factors into dy before the GEMM, FP16 merges and unscaling) */
        {"resnet", "fp16", "adaptive", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 1, 0},
        {"bert", "fp16", "adaptive", "rne", 0, 0, 0, 0, 1, 0, 0, 0, 1, 0},
        /* without master weights; BF16 also with its optimizer state in storage */
        {"resnet", "fp16", "dynamic", "rne", 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
        {"resnet", "bf16", "none", "stochastic", 0, 0, 0, 0, 0, 0, 0, 0, 0, 2},
    };
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) compare(&vs[i], &direct);
    /* A direct-I/O backend without the scaled entries: gradients with a factor other than 1
     * take the executor's commit, the others are still written by the ops. */
    mpx_backend unscaled = direct;
    unscaled.conv2d_backward_data_scaled = NULL;
    unscaled.linear_backward_data_scaled = NULL;
    unscaled.linear_t_backward_data_scaled = NULL;
    compare(&vs[2], &unscaled);
    compare(&vs[6], &unscaled);
    /* The plain CPU backend, whose batch-norm, ReLU and add take 16-bit storage (tile.h), against
     * the emulation: the same bits in every variant. */
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) {
        trace a, b;
        run(&vs[i], cpu, &a);
        run(&vs[i], mpx_backend_cpu(), &b);
        char what[128];
        snprintf(what, sizeof what, "cpu tiles: %s %s %s %s%s%s", vs[i].model, vs[i].mode,
                 vs[i].scaling, vs[i].rounding, vs[i].decoded ? " (direct_io off)" : "",
                 vs[i].pure ? " (no masters)" : "");
        compare_traces(what, &a, &b);
        trace_free(&a);
        trace_free(&b);
    }
    return mpx_test_done(__FILE__);
}
