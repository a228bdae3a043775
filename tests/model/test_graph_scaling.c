/* test_graph_scaling.c — loss scaling and statistics through the executor (docs/design.md §10
 * rungs 2 and 4, at the graph level):
 *   - power-of-two scaling commutes exactly with FP32 arithmetic, so in FP32 storage the
 *     unscaled weight gradients of fixed, dynamic and adaptive scaling equal the unscaled run's
 *     bit for bit (through conv, batch-norm, ReLU, add, pools, linear and a branch merge);
 *   - the cumulative scale is the product of the factors along the path; batch-norm and
 *     parameter-free ops pass it through; a branch merge gives one common scale;
 *   - every op in fp16 and bf16 storage against fp32, within tolerances derived from the formats;
 *   - the counted underflow of an fp16 run without scaling equals an independent recount in
 *     double precision, and adaptive scaling lowers it;
 *   - adaptive-quantile takes its quantile from the gradient before rounding (closed form);
 *   - a branch merge whose branches do not all fit under u_max picks the target the rule of
 *     docs/papers.md §3 step 10 gives from every branch's magnitude, and the merged gradient fits;
 *   - the in-place clock of the scaling work (for `mpx bench`) counts only when on and changes
 *     no gradient.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/graph.h"
#include "mpx/rng.h"
#include "testutil.h"

enum { B = 4, H = 6, W = 6, C = 3, K = 5 };

/* conv -> bn -> relu (fan-out) -> conv -> bn -> add -> relu -> [max-pool] -> conv -> gap -> fc
 * -> CE. Without the max-pool, conv3 strides by 2 instead. */
static mpx_graph *residual_net(int *image, int *labels, int maxpool) {
    mpx_graph *g = mpx_graph_new();
    int64_t xs[4] = {B, H, W, C}, ls[1] = {B};
    *image = mpx_g_input(g, "image", MPX_INPUT_DATA, 4, xs);
    *labels = mpx_g_input(g, "labels", MPX_INPUT_LABELS, 1, ls);
    int x = mpx_g_conv2d(g, "conv1", *image, 6, 3, 3, 1, 1, 0);
    x = mpx_g_batchnorm(g, "bn1", x, 1e-5f, 0.1f, 1.0f);
    int r = mpx_g_relu(g, "relu1", x);
    int y = mpx_g_conv2d(g, "conv2", r, 6, 3, 3, 1, 1, 0);
    y = mpx_g_batchnorm(g, "bn2", y, 1e-5f, 0.1f, 1.0f);
    y = mpx_g_add(g, "add", y, r);
    y = mpx_g_relu(g, "relu2", y);
    if (maxpool) y = mpx_g_maxpool2d(g, "pool", y, 2, 2, 0);
    y = mpx_g_conv2d(g, "conv3", y, 4, 1, 1, maxpool ? 1 : 2, 0, 1);
    y = mpx_g_avgpool_global(g, "gap", y);
    y = mpx_g_linear(g, "fc", y, K, 1);
    mpx_g_softmax_ce(g, "loss", y, *labels);
    return g;
}

static mpx_graph *compiled(const char *mode, int maxpool, int *image, int *labels) {
    mpx_graph *g = residual_net(image, labels, maxpool);
    mpx_precision p;
    mpx_precision_init(&p, mode, "rne", 0);
    CHECK_OK(mpx_graph_compile(g, &p, MPX_DEV_CPU, 11));
    float x[B * H * W * C];
    int32_t y[B] = {1, 0, 4, 2};
    mpx_test_normal(x, B * H * W * C, 0, 1, 4);
    CHECK_OK(mpx_graph_set_input(g, *image, x, MPX_F32, B * H * W * C));
    CHECK_OK(mpx_graph_set_input(g, *labels, y, MPX_I32, B));
    return g;
}

/* Run forward + backward with the given scaling; copy all parameter gradients out. */
static float *grads_with(const char *mode, const mpx_scaling_cfg *sc, double s0, mpx_layer_stats *stats,
                         mpx_graph **keep) {
    int image, labels;
    mpx_graph *g = compiled(mode, 1, &image, &labels);
    CHECK_OK(mpx_graph_forward(g, 1));
    mpx_backward_opts bo = {sc, s0, 0, stats};
    int64_t nonfinite = -1;
    CHECK_OK(mpx_graph_backward(g, &bo, &nonfinite));
    CHECK(nonfinite == 0, "non-finite gradients");
    int64_t total = mpx_graph_param_count(g), off = 0;
    float *out = malloc((size_t)total * sizeof *out);
    for (int i = 0; i < mpx_graph_n_params(g); i++) {
        mpx_param *p = mpx_graph_param(g, i);
        memcpy(out + off, p->grad, (size_t)p->numel * sizeof *out);
        off += p->numel;
    }
    if (keep)
        *keep = g;
    else
        mpx_graph_free(g);
    return out;
}

static int layer_index(const mpx_graph *g, const char *name) {
    for (int i = 0; i < mpx_graph_n_layers(g); i++) {
        mpx_layer_info li;
        mpx_graph_layer(g, i, &li);
        if (strcmp(li.name, name) == 0) return i;
    }
    return -1;
}

static void test_power_of_two_scaling_is_exact(void) {
    mpx_scaling_cfg none, fixed, adaptive;
    mpx_scaling_defaults(&none);
    fixed = none;
    fixed.method = MPX_SCALING_FIXED;
    adaptive = none;
    adaptive.method = MPX_SCALING_ADAPTIVE;
    adaptive.update_every = 1;
    /* Force visible factors: data far from any bound, fan_in caps loose. */
    adaptive.u_min = 1e-3;
    int image, labels;
    mpx_graph *ref_g = compiled("fp32", 1, &image, &labels);
    int64_t total = mpx_graph_param_count(ref_g);
    mpx_graph_free(ref_g);

    float *ref = grads_with("fp32", &none, 1.0, NULL, NULL);
    float *fx = grads_with("fp32", &fixed, 1024.0, NULL, NULL);
    mpx_graph *ga;
    float *ad = grads_with("fp32", &adaptive, 8.0, NULL, &ga);
    CHECK(memcmp(ref, fx, (size_t)total * sizeof(float)) == 0,
          "fixed scale 1024: unscaled FP32 gradients differ from the unscaled run");
    CHECK(memcmp(ref, ad, (size_t)total * sizeof(float)) == 0,
          "adaptive scaling: unscaled FP32 gradients differ from the unscaled run");

    /* The factors really were > 1 somewhere, and the cumulative scale is the product along the
     * path: conv3's S_prev = fc's S_prev * s_fc (through gap, a parameter-free op);
     * bn2's S_prev = the merged scale at relu2/add ... ; bn1 gets its output's merged scale and
     * passes it to conv1 unchanged (s_bn = 1). */
    double sp[16], s[16];
    const char *names[] = {"conv1", "bn1", "conv2", "bn2", "conv3", "fc", "loss"};
    int idx[7];
    for (int i = 0; i < 7; i++) {
        idx[i] = layer_index(ga, names[i]);
        REQUIRE_VOID(idx[i] >= 0, names[i]);
        mpx_graph_layer_scale(ga, idx[i], &sp[i], &s[i]);
    }
    CHECK(sp[6] == 8.0 && s[6] == 1.0, "loss: S %g, s %g", sp[6], s[6]);
    CHECK(sp[5] == 8.0, "fc receives the loss scale: %g", sp[5]);
    CHECK(sp[4] == sp[5] * s[5], "conv3 S %g != fc S %g * s %g", sp[4], sp[5], s[5]);
    CHECK(s[1] == 1.0 && s[3] == 1.0, "batch-norm has no factor of its own (%g, %g)", s[1], s[3]);
    CHECK(sp[0] == sp[1] * s[1], "conv1 S %g != bn1 S %g (batch-norm passes S through)", sp[0], sp[1]);
    CHECK(sp[2] == sp[3], "conv2 S %g != bn2 S %g", sp[2], sp[3]);
    int some_factor = 0;
    for (int i = 0; i < 7; i++) some_factor |= s[i] > 1.0;
    CHECK(some_factor, "no layer got a factor > 1: the test does not exercise adaptive scaling");
    /* The merge at relu1 (conv2's data gradient, carrying S_conv2 * s_conv2, and the shortcut,
     * carrying the merged scale of relu2/add) yields ONE scale: bn1's S_prev is one of the
     * incoming scales or a power of two below them. */
    double in_a = sp[2] * s[2], in_b = sp[3];
    CHECK(sp[1] == in_a || sp[1] == in_b || (sp[1] < fmin(in_a, in_b) && sp[1] == exp2(round(log2(sp[1])))),
          "merge target %g from branch scales %g and %g", sp[1], in_a, in_b);
    printf("adaptive: S conv1 %g bn1 %g conv2 %g (s %g) bn2 %g conv3 %g (s %g) fc %g (s %g) loss %g\n",
           sp[0], sp[1], sp[2], s[2], sp[3], sp[4], s[4], sp[5], s[5], sp[6]);
    mpx_graph_free(ga);
    free(ref);
    free(fx);
    free(ad);
}

/* Forward output and parameter gradients in low-precision storage vs fp32.
 * Tolerance per dtype from the storage format's unit roundoff u (FP16 2^-11, BF16 2^-8): every
 * stored tensor carries one rounding of relative size <= u, and each of the ~10 layers adds
 * its own rounded inputs and outputs; errors accumulate roughly as a random walk through the
 * depth, so the relative L2 error of the logits and gradients stays below ~8u (a wrong cast,
 * a missed scale or a lost term gives O(1)). The network here has no max-pool: rounding makes
 * ties in a pooling window (at BF16's 8 bits, often), and a tie sends the whole gradient of
 * that window to another position — a discrete change the smooth bound does not describe. */
static void test_low_precision_vs_fp32(const char *mode, double u) {
    mpx_scaling_cfg none;
    mpx_scaling_defaults(&none);
    int image, labels;
    mpx_graph *g32 = compiled("fp32", 0, &image, &labels), *glp = compiled(mode, 0, &image, &labels);
    CHECK_OK(mpx_graph_forward(g32, 1));
    CHECK_OK(mpx_graph_forward(glp, 1));
    int logits = mpx_graph_find_tensor(g32, "fc");
    float a[B * K], bb[B * K];
    double ad[B * K];
    CHECK_OK(mpx_graph_read(g32, logits, a));
    CHECK_OK(mpx_graph_read(glp, logits, bb));
    for (int i = 0; i < B * K; i++) ad[i] = a[i];
    double e = mpx_test_rel_l2(bb, ad, B * K);
    CHECK(e < 8 * u, "%s logits: relative L2 error %.3g > 8u = %.3g", mode, e, 8 * u);
    mpx_backward_opts bo = {&none, 1.0, 0, NULL};
    int64_t nf;
    CHECK_OK(mpx_graph_backward(g32, &bo, &nf));
    CHECK_OK(mpx_graph_backward(glp, &bo, &nf));
    double worst = 0;
    for (int i = 0; i < mpx_graph_n_params(g32); i++) {
        mpx_param *p = mpx_graph_param(g32, i), *q = mpx_graph_param(glp, i);
        double *ref = malloc((size_t)p->numel * sizeof *ref);
        for (int64_t k = 0; k < p->numel; k++) ref[k] = p->grad[k];
        double err = mpx_test_rel_l2(q->grad, ref, (size_t)p->numel);
        if (err > worst) worst = err;
        CHECK(err < 8 * u, "%s gradient of %s: relative L2 error %.3g > %.3g", mode, p->name, err, 8 * u);
        free(ref);
    }
    printf("%s vs fp32: logits %.3g, worst parameter gradient %.3g (u = %.3g)\n", mode, e, worst, u);
    mpx_graph_free(g32);
    mpx_graph_free(glp);
}

/* x [N,16] -> linear1 (16->16) -> relu -> linear2 (16->4) -> CE, with tiny weights so that
 * linear2's data gradient (the gradient at relu1's output, counted for linear1's row) underflows
 * FP16 without scaling. */
enum { N = 64, D = 16, O = 4 };

static mpx_graph *mlp(const char *mode, int *x, int *y, int *h) {
    mpx_graph *g = mpx_graph_new();
    int64_t xs[2] = {N, D}, ys[1] = {N};
    *x = mpx_g_input(g, "x", MPX_INPUT_DATA, 2, xs);
    *y = mpx_g_input(g, "y", MPX_INPUT_LABELS, 1, ys);
    int a = mpx_g_linear(g, "linear1", *x, D, 0);
    *h = mpx_g_relu(g, "relu1", a);
    int b = mpx_g_linear(g, "linear2", *h, O, 0);
    mpx_g_softmax_ce(g, "loss", b, *y);
    mpx_graph_keep_grads(g, 1);
    mpx_precision p;
    mpx_precision_init(&p, mode, "rne", 0);
    CHECK_OK(mpx_graph_compile(g, &p, MPX_DEV_CPU, 3));
    /* linear2 weights ~ 1e-5: dlogits (~1/N) times W2 lands around 2^-24 and below. */
    mpx_param *w2 = mpx_graph_param(g, 1);
    for (int64_t k = 0; k < w2->numel; k++) w2->master[k] *= 4e-5f;
    CHECK_OK(mpx_graph_sync_weights(g, 0));
    float xv[N * D];
    int32_t yv[N];
    mpx_test_normal(xv, N * D, 0, 1, 8);
    for (int i = 0; i < N; i++) yv[i] = i % O;
    CHECK_OK(mpx_graph_set_input(g, *x, xv, MPX_F32, N * D));
    CHECK_OK(mpx_graph_set_input(g, *y, yv, MPX_I32, N));
    return g;
}

static int cmpf(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The fp16 MLP after one unscaled statistics step into stats[3]; *waits: the backward's. */
static mpx_graph *mlp_stats_step(int *x, int *y, int *h, mpx_layer_stats *stats,
                                 int64_t *waits) {
    mpx_graph *g = mlp("fp16", x, y, h);
    mpx_scaling_cfg none;
    mpx_scaling_defaults(&none);
    CHECK_OK(mpx_graph_forward(g, 1));
    mpx_backward_opts bo = {&none, 1.0, 0, stats};
    int64_t nf;
    const int64_t w0 = mpx_graph_host_waits(g);
    CHECK_OK(mpx_graph_backward(g, &bo, &nf));
    *waits = mpx_graph_host_waits(g) - w0;
    return g;
}

static void test_underflow_recount(void) {
    int x, y, h;
    mpx_layer_stats stats[3];
    int64_t waits;
    mpx_graph *g = mlp_stats_step(&x, &y, &h, stats, &waits);
    mpx_backward_opts bo = {NULL, 1.0, 0, stats};
    int64_t nf;
    int l1 = layer_index(g, "linear1");
    REQUIRE_VOID(l1 >= 0, "linear1");

    /* Independent recount. linear1's row describes the gradient of its output: ReLU's backward
     * of linear2's data gradient, whose value before rounding is
     * mask[n][j] * sum_k dlogits[n][k] * W2[j][k] over the STORED (fp16) dlogits and W2 and
     * the stored ReLU output (mask = h > 0), computed in double and rounded once to FP32; it
     * flushes iff |value| <= 2^-25 (RNE). ReLU's zeros count as zeros. */
    float dl[N * O], w2[D * O], hv[N * D];
    CHECK_OK(mpx_graph_read(g, h, hv));
    CHECK_OK(mpx_graph_read_grad(g, mpx_graph_find_tensor(g, "linear2"), dl));
    mpx_param *p2 = mpx_graph_param(g, 1);
    for (int64_t k = 0; k < p2->numel; k++) w2[k] = mpx_f16_to_f32(((const uint16_t *)p2->work)[k]);
    mpx_cast_stats re;
    memset(&re, 0, sizeof re);
    int near_boundary = 0, n_pre = 0;
    static float pre[N * D]; /* the nonzero |values| before rounding, for the quantile below */
    for (int n = 0; n < N; n++)
        for (int j = 0; j < D; j++) {
            double acc = 0;
            for (int k = 0; k < O; k++) acc += (double)dl[n * O + k] * w2[j * O + k];
            float v = hv[n * D + j] > 0 ? (float)acc : 0.0f;
            if (v != 0) pre[n_pre++] = fabsf(v);
            near_boundary += fabs(fabs(acc) / ldexp(1.0, -25) - 1.0) < 1e-4;
            re.count++;
            if (v != 0) re.nonzero++;
            if (v != 0 && (mpx_f32_to_f16(v) & 0x7fff) == 0) re.flushed++; /* +0 or -0 */
            if (v != 0 && fabsf(v) < ldexpf(1.0f, -24)) re.below_min++;
            re.hist[mpx_hist_bin(v)]++;
        }
    CHECK(near_boundary == 0, "test data has %d values at the flush boundary; pick other data",
          near_boundary);
    const mpx_cast_stats *got = &stats[l1].act;
    CHECK(got->count == re.count && got->nonzero == re.nonzero && got->flushed == re.flushed &&
              got->below_min == re.below_min,
          "counted (n %llu nz %llu flushed %llu below %llu) != recount (%llu %llu %llu %llu)",
          (unsigned long long)got->count, (unsigned long long)got->nonzero,
          (unsigned long long)got->flushed, (unsigned long long)got->below_min,
          (unsigned long long)re.count, (unsigned long long)re.nonzero,
          (unsigned long long)re.flushed, (unsigned long long)re.below_min);
    CHECK(memcmp(got->hist, re.hist, sizeof re.hist) == 0, "histogram differs from the recount");
    double rate_none = mpx_underflow_rate(got);
    CHECK(rate_none > 0.05, "the test network should underflow without scaling: rate %g", rate_none);
    CHECK(got->hist[MPX_HIST_ZERO] > 0, "ReLU's zeros are part of the gradient entering linear1");
    mpx_graph_free(g);

    /* Adaptive scaling gives linear2 a factor and lowers linear1's underflow. */
    g = mlp("fp16", &x, &y, &h);
    mpx_scaling_cfg ad;
    mpx_scaling_defaults(&ad);
    ad.method = MPX_SCALING_ADAPTIVE;
    CHECK_OK(mpx_graph_forward(g, 1));
    bo.scaling = &ad;
    CHECK_OK(mpx_graph_backward(g, &bo, &nf));
    double rate_ad = mpx_underflow_rate(&stats[l1].act);
    printf("underflow at linear1: none %.4f (recount %.4f), adaptive %.4f (s = %g)\n", rate_none,
           mpx_underflow_rate(&re), rate_ad, stats[layer_index(g, "linear2")].layer_scale);
    CHECK(rate_ad < rate_none / 4, "adaptive did not lower underflow: %g vs %g", rate_ad, rate_none);
    mpx_graph_free(g);

    /* adaptive-quantile: linear1's factor comes from the 1% quantile of the nonzero magnitudes
     * of its output gradient BEFORE rounding (the recount's values, times the factor linear2
     * applied; a power of two, so exact). In storage no nonzero value is below 2^-24 and the
     * factor would always be 1; here most of the gradient underflows, so it must be > 1 and
     * equal the closed form from an independent quantile (sorting). Bounds opened so that the
     * quantile decides. */
    g = mlp("fp16", &x, &y, &h);
    mpx_scaling_cfg aq;
    mpx_scaling_defaults(&aq);
    aq.method = MPX_SCALING_ADAPTIVE_QUANTILE;
    aq.scale_bound = ldexp(1.0, 40);
    aq.accum_bound = ldexp(1.0, 60);
    CHECK_OK(mpx_graph_forward(g, 1));
    bo.scaling = &aq;
    CHECK_OK(mpx_graph_backward(g, &bo, &nf));
    const mpx_layer_stats *s1 = &stats[l1];
    double s2 = stats[layer_index(g, "linear2")].layer_scale;
    qsort(pre, (size_t)n_pre, sizeof *pre, cmpf);
    double r = ceil(aq.quantile * n_pre);
    double q = s2 * pre[r < 1 ? 0 : (size_t)r - 1];
    mpx_als_inputs in = {s1->g_mean, s1->g_std, s1->w_mean, s1->w_std, s1->g_min, s1->g_max,
                         s1->w_min,  s1->w_max, D, q};
    double want = mpx_als_bound(&aq, mpx_als_quantile_unbound(&aq, &in), s1->scale);
    printf("adaptive-quantile: linear1 factor %g (closed form %g from quantile %g), linear2 %g\n",
           s1->layer_scale, want, q, s2);
    CHECK(s1->layer_scale == want, "linear1 factor %g, closed form %g", s1->layer_scale, want);
    CHECK(s1->layer_scale > 1, "adaptive-quantile gave linear1 no factor (quantile %g)", q);
    mpx_graph_free(g);
}

/* A statistics row's moments (computed on the backend and read with the step's counts) are
 * those of the layer's stored output gradient and weight, and the loss row's those of the
 * gradient the loss emitted: every layer's row against mpx_moments_f32 of the values read back,
 * and the step waited once for them beyond its status. */
static void test_stats_moments(void) {
    int x, y, h;
    mpx_layer_stats stats[3];
    int64_t waits;
    mpx_graph *g = mlp_stats_step(&x, &y, &h, stats, &waits);
    CHECK(waits == 2, "statistics step waited %lld times, want 2", (long long)waits);
    static const struct {
        const char *row, *grad_of; /* the row, and the tensor whose gradient it describes */
        int param;                 /* its weight, -1: none */
    } rows[] = {{"linear1", "linear1", 0}, {"linear2", "linear2", 1}, {"loss", "linear2", -1}};
    for (int r = 0; r < 3; r++) {
        const int l = layer_index(g, rows[r].row);
        REQUIRE_VOID(l >= 0, "%s", rows[r].row);
        const int t = mpx_graph_find_tensor(g, rows[r].grad_of);
        int64_t shape[4];
        const int nd = mpx_graph_tensor_shape(g, t, shape);
        size_t n = 1;
        for (int d = 0; d < nd; d++) n *= (size_t)shape[d];
        float *v = malloc(n * sizeof *v);
        CHECK_OK(mpx_graph_read_grad(g, t, v));
        mpx_moments m;
        mpx_moments_f32(v, n, &m);
        const mpx_layer_stats *s = &stats[l];
        CHECK(s->g_mean == (float)m.mean && s->g_std == (float)m.std && s->g_min == m.min &&
                  s->g_max == m.max,
              "%s: gradient moments %g %g %g %g, of the values read back %g %g %g %g",
              rows[r].row, (double)s->g_mean, (double)s->g_std, (double)s->g_min,
              (double)s->g_max, m.mean, m.std, (double)m.min, (double)m.max);
        free(v);
        if (rows[r].param < 0) continue;
        const mpx_param *p = mpx_graph_param(g, rows[r].param);
        float *w = malloc((size_t)p->numel * sizeof *w);
        mpx_decode(p->work_dtype, p->work, w, (size_t)p->numel);
        mpx_moments_f32(w, (size_t)p->numel, &m);
        CHECK(s->w_mean == (float)m.mean && s->w_std == (float)m.std && s->w_min == m.min &&
                  s->w_max == m.max,
              "%s: weight moments %g %g %g %g, of the stored weight %g %g %g %g", rows[r].row,
              (double)s->w_mean, (double)s->w_std, (double)s->w_min, (double)s->w_max, m.mean,
              m.std, (double)m.min, (double)m.max);
        free(w);
    }
    mpx_graph_free(g);
}

/* Largest magnitude of n values. */
static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

/* docs/papers.md §3 step 10, written out here independently of mpx_als_merge_target: the
 * largest incoming scale under which every branch's unscaled magnitude (largest m) stays below
 * u_max; if none fits, the smallest scale halved while >= 1/8. */
static double merge_rule(double m, double s_a, double s_b, double u_max) {
    double best = 0;
    if (m * s_a < u_max) best = s_a;
    if (m * s_b < u_max && s_b > best) best = s_b;
    if (best > 0) return best;
    double t = fmin(s_a, s_b);
    while (t >= 0.125 && !(m * t < u_max)) t *= 0.5;
    return t;
}

/* residual_net keeping its gradients, with bn2's gamma at 2^-10: the residual branch then
 * carries a ~700x smaller gradient into the merge at relu1 than the shortcut does, so conv2
 * takes a large factor and the two branches reach the merge at very different scales. */
static mpx_graph *shortcut_heavy_net(void) {
    int image, labels;
    mpx_graph *g = residual_net(&image, &labels, 1);
    CHECK_OK(mpx_g_set_init(g, "bn2.gamma", (mpx_init){MPX_INIT_CONST, 0x1p-10f}));
    mpx_graph_keep_grads(g, 1);
    mpx_precision p;
    mpx_precision_init(&p, "fp32", "rne", 0);
    CHECK_OK(mpx_graph_compile(g, &p, MPX_DEV_CPU, 11));
    float x[B * H * W * C];
    int32_t y[B] = {1, 0, 4, 2};
    mpx_test_normal(x, B * H * W * C, 0, 1, 4);
    CHECK_OK(mpx_graph_set_input(g, image, x, MPX_F32, B * H * W * C));
    CHECK_OK(mpx_graph_set_input(g, labels, y, MPX_I32, B));
    CHECK_OK(mpx_graph_forward(g, 1));
    return g;
}

/* The merge at relu1 under an overflow limit u_max that some branch scales break. Its branches:
 * conv2's data gradient (consumer 0, scale S_conv2 * s_conv2) and the shortcut (consumer 1,
 * scale S_bn2, = the gradient at add's output). Their unscaled magnitudes come from an
 * unscaled FP32 run (power-of-two scales commute with FP32 rounding, so they are the same
 * numbers); u_max is put at 1.5 times a power of two times the larger one, so no m * S_i (S_i
 * a power of two) lies near it and the margin absorbs the one rounding of recovering branch 0
 * as merged - shortcut. Every candidate must give exactly the rule's target and a merged
 * gradient that fits; at least one must force the target below the larger branch scale with
 * the shortcut's magnitude deciding, so that a merge that ignored any branch after the first
 * would pick a target too large and fail. */
static void test_merge_target_with_overflowing_branch(void) {
    enum { NR = B * H * W * 6 };
    float merged[NR], shortcut[NR], conv_branch[NR];
    mpx_scaling_cfg none;
    mpx_scaling_defaults(&none);
    mpx_graph *g = shortcut_heavy_net();
    mpx_backward_opts bo = {&none, 1.0, 0, NULL};
    int64_t nf = -1;
    CHECK_OK(mpx_graph_backward(g, &bo, &nf));
    const int relu1 = mpx_graph_find_tensor(g, "relu1"), add = mpx_graph_find_tensor(g, "add");
    REQUIRE_VOID(relu1 >= 0 && add >= 0, "tensors relu1 and add");
    CHECK_OK(mpx_graph_read_grad(g, relu1, merged));
    CHECK_OK(mpx_graph_read_grad(g, add, shortcut));
    mpx_graph_free(g);
    for (int i = 0; i < NR; i++) conv_branch[i] = merged[i] - shortcut[i];
    const double m_conv = max_abs(conv_branch, NR), m_short = max_abs(shortcut, NR);
    const double m = fmax(m_conv, m_short);
    printf("merge at relu1: unscaled max |g| conv2 branch %g, shortcut %g\n", m_conv, m_short);
    REQUIRE_VOID(m_short > 2 * m_conv,
                 "the shortcut (%g) does not dominate conv2's branch (%g): the test cannot tell a "
                 "merge that ignores later branches", m_short, m_conv);

    mpx_scaling_cfg ad;
    mpx_scaling_defaults(&ad);
    ad.method = MPX_SCALING_ADAPTIVE;
    ad.update_every = 1;
    ad.u_min = 1e-3; /* visible factors, so the branch scales differ */
    int forced = 0, tried = 0;
    ad.accum_bound = 1e30; /* let conv2's factor reach scale_bound: its branch then carries a
                              * scale (S_bn2 * 16) at which the shortcut does not fit */
    for (int j = 0; j < 20; j++, tried++) {
        ad.u_max = 1.5 * ldexp(m, j);
        g = shortcut_heavy_net();
        bo = (mpx_backward_opts){&ad, 1.0, 0, NULL};
        CHECK_OK(mpx_graph_backward(g, &bo, &nf));
        double sp[3], s[3];
        const char *names[] = {"bn1", "conv2", "bn2"};
        for (int i = 0; i < 3; i++) {
            int li = layer_index(g, names[i]);
            REQUIRE_VOID(li >= 0, names[i]);
            mpx_graph_layer_scale(g, li, &sp[i], &s[i]);
        }
        const double s_conv = sp[1] * s[1], s_short = sp[2], target = sp[0];
        const double want = merge_rule(m, s_conv, s_short, ad.u_max);
        float mg[NR];
        CHECK_OK(mpx_graph_read_grad(g, relu1, mg));
        const double stored = max_abs(mg, NR) * target;
        CHECK(target == want, "u_max %g: merge target %g, rule gives %g (branch scales %g, %g)",
              ad.u_max, target, want, s_conv, s_short);
        CHECK(want < 0.125 || stored < ad.u_max,
              "u_max %g: merged gradient reaches %g at target %g", ad.u_max, stored, target);
        /* Forced down by the shortcut: the larger scale fits conv2's branch but not the shortcut. */
        const double s_hi = fmax(s_conv, s_short);
        if (target < s_hi && m_conv * s_hi < ad.u_max) forced++;
        mpx_graph_free(g);
    }
    printf("merge at relu1: %d of %d u_max values forced the target down because of the shortcut\n",
           forced, tried);
    CHECK(forced > 0, "no u_max forced the merge target down: the test does not exercise the rule");
}

/* mpx_graph_time_scaling: nothing is counted while off; once on, an adaptive backward (one
 * merge at relu1, four conv/linear factors) counts time; the clock changes no gradient. */
static void test_scaling_clock(void) {
    mpx_scaling_cfg ad;
    mpx_scaling_defaults(&ad);
    ad.method = MPX_SCALING_ADAPTIVE;
    mpx_graph *off = NULL, *on = NULL;
    float *g_off = grads_with("fp16", &ad, 1.0, NULL, &off);
    CHECK(mpx_graph_scaling_seconds(off) == 0, "scaling clock off, yet %g s counted",
          mpx_graph_scaling_seconds(off));
    int image, labels;
    on = compiled("fp16", 1, &image, &labels);
    mpx_graph_time_scaling(on, 1);
    CHECK_OK(mpx_graph_forward(on, 1));
    mpx_backward_opts bo = {&ad, 1.0, 0, NULL};
    int64_t nf = -1;
    CHECK_OK(mpx_graph_backward(on, &bo, &nf));
    const double t1 = mpx_graph_scaling_seconds(on);
    CHECK(t1 > 0, "scaling clock on, yet nothing counted");
    int64_t off_at = 0;
    for (int i = 0; i < mpx_graph_n_params(on); i++) {
        mpx_param *p = mpx_graph_param(on, i);
        CHECK(memcmp(p->grad, g_off + off_at, (size_t)p->numel * sizeof(float)) == 0,
              "gradient of %s differs with the scaling clock on", p->name);
        off_at += p->numel;
    }
    mpx_graph_time_scaling(on, 0);
    CHECK_OK(mpx_graph_forward(on, 1));
    CHECK_OK(mpx_graph_backward(on, &bo, &nf));
    CHECK(mpx_graph_scaling_seconds(on) == t1, "the clock ran on after it was switched off");
    free(g_off);
    mpx_graph_free(off);
    mpx_graph_free(on);
}

int main(void) {
    test_power_of_two_scaling_is_exact();
    test_low_precision_vs_fp32("fp16", ldexp(1.0, -11));
    test_low_precision_vs_fp32("bf16", ldexp(1.0, -8));
    test_underflow_recount();
    test_stats_moments();
    test_merge_target_with_overflowing_branch();
    test_scaling_clock();
    return mpx_test_done(__FILE__);
}
