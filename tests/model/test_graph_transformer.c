/* test_graph_transformer.c — the transformer and detection nodes through the executor:
 * a whole-graph gradient check (fp32, finite differences of the loss, as in
 * test_graph_gradcheck.c) of a one-layer BERT-style encoder with every transformer node —
 * embedding (token + position), layer-norm, Q/K/V linear, reshape, permute, bmm, masked
 * softmax, dropout, GELU, residual adds, and an MLM decoder tied to the token embedding — and
 * of a two-map SSD-style detector (conv heads, concat, the MultiBox loss); plus power-of-two
 * loss scaling being exact in FP32 through all of them (adaptive factors on every linear,
 * branch merges at the Q/K/V fan-out and the residuals).
 *
 * Tolerance: as in test_graph_gradcheck.c, central differences at h/4 with h = 1e-2 against
 * |fd - g| <= 2e-3 + 3e-2 |g|; elements whose interval straddles a kink (ReLU, max, the
 * MultiBox hard-negative selection) are detected by h vs h/4 disagreement and skipped.
 * The fp16/bf16 loss of the same encoder must land within 1e-2 / 5e-2 relative of fp32: about
 * twenty unit roundoffs of each format over its dozen stored tensors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/graph.h"
#include "mpx/rng.h"
#include "mpx/ssd.h"
#include "testutil.h"

enum { B = 2, T = 5, H = 8, A = 2, V = 11 };

typedef struct {
    mpx_graph *g;
    int inputs[4];
    int n_inputs;
} net;

static net bert(const char *mode, float dropout) {
    net n = {mpx_graph_new(), {0}, 4};
    mpx_graph *g = n.g;
    int64_t bt[2] = {B, T};
    int ids = mpx_g_input(g, "ids", MPX_INPUT_I32, 2, bt);
    int pos = mpx_g_input(g, "positions", MPX_INPUT_I32, 2, bt);
    int mask = mpx_g_input(g, "mask", MPX_INPUT_I32, 2, bt);
    int labels = mpx_g_input(g, "labels", MPX_INPUT_I32, 2, bt);
    n.inputs[0] = ids, n.inputs[1] = pos, n.inputs[2] = mask, n.inputs[3] = labels;
    mpx_init emb = {MPX_INIT_NORMAL, 0.5f};
    int x = mpx_g_add(g, "embed", mpx_g_embedding(g, "tok", ids, V, H, emb),
                      mpx_g_embedding(g, "pos", pos, T, H, emb));
    x = mpx_g_layernorm(g, "ln0", x, 1e-5f);
    int64_t split[4] = {B, T, A, H / A}, merged[3] = {B, T, H};
    const int heads[4] = {0, 2, 1, 3};
    int q = mpx_g_permute(g, "q.heads", mpx_g_reshape(g, "q.split", mpx_g_linear(g, "q", x, H, 1), 4, split), heads);
    int k = mpx_g_permute(g, "k.heads", mpx_g_reshape(g, "k.split", mpx_g_linear(g, "k", x, H, 1), 4, split), heads);
    int v = mpx_g_permute(g, "v.heads", mpx_g_reshape(g, "v.split", mpx_g_linear(g, "v", x, H, 1), 4, split), heads);
    int s = mpx_g_bmm(g, "scores", q, k, 0, 1, 1.0f / sqrtf((float)(H / A)));
    int p = mpx_g_dropout(g, "attn.drop", mpx_g_softmax(g, "attn", s, mask, 1.0f), dropout);
    int c = mpx_g_bmm(g, "context", p, v, 0, 0, 1.0f);
    c = mpx_g_reshape(g, "merge", mpx_g_permute(g, "c.heads", c, heads), 3, merged);
    x = mpx_g_layernorm(g, "ln1", mpx_g_add(g, "res1", mpx_g_linear(g, "o", c, H, 1), x), 1e-5f);
    int f = mpx_g_linear(g, "ffn2", mpx_g_gelu(g, "gelu", mpx_g_linear(g, "ffn1", x, 2 * H, 1)), H, 1);
    x = mpx_g_layernorm(g, "ln2", mpx_g_add(g, "res2", mpx_g_dropout(g, "ffn.drop", f, dropout), x), 1e-5f);
    int logits = mpx_g_linear_tied(g, "decoder", x, "tok.weight", 1);
    mpx_g_softmax_ce(g, "loss", logits, labels);
    mpx_precision pr;
    mpx_precision_init(&pr, mode, "rne", 0);
    CHECK_OK(mpx_graph_status(g));
    CHECK_OK(mpx_graph_compile(g, &pr, MPX_DEV_CPU, 5));
    int32_t idv[B * T], pv[B * T], mv[B * T] = {1, 1, 1, 1, 0, 1, 1, 1, 1, 1}, lv[B * T];
    for (int i = 0; i < B * T; i++) {
        idv[i] = (int32_t)(mpx_rand_u32(1, MPX_RNG_TEST, (uint64_t)i) % V);
        pv[i] = i % T;
        lv[i] = i % 3 == 0 ? -1 : (int32_t)(mpx_rand_u32(2, MPX_RNG_TEST, (uint64_t)i) % V);
    }
    CHECK_OK(mpx_graph_set_input(g, ids, idv, MPX_I32, B * T));
    CHECK_OK(mpx_graph_set_input(g, pos, pv, MPX_I32, B * T));
    CHECK_OK(mpx_graph_set_input(g, mask, mv, MPX_I32, B * T));
    CHECK_OK(mpx_graph_set_input(g, labels, lv, MPX_I32, B * T));
    return n;
}

enum { NB = 2, S = 8, C = 3, G = 2 };

static net ssd(const char *mode) {
    net n = {mpx_graph_new(), {0}, 3};
    mpx_graph *g = n.g;
    int64_t xs[4] = {NB, S, S, 3}, bs[3] = {NB, G, 4}, ls[2] = {NB, G};
    int img = mpx_g_input(g, "image", MPX_INPUT_DATA, 4, xs);
    int boxes = mpx_g_input(g, "gt_boxes", MPX_INPUT_F32, 3, bs);
    int labels = mpx_g_input(g, "gt_labels", MPX_INPUT_I32, 2, ls);
    n.inputs[0] = img, n.inputs[1] = boxes, n.inputs[2] = labels;
    mpx_ssd_priors_cfg pc = {2, {8, 4}, {0, 0}, 0.2f, 0.9f, 1};
    int64_t P;
    mpx_ssd_prior_count(&pc, &P);
    int per_cell = (int)(P / (64 + 16));
    float *pri = malloc((size_t)P * 4 * sizeof *pri);
    mpx_tensor pt = {MPX_F32, MPX_DEV_CPU, 2, {P, 4}, pri};
    CHECK_OK(mpx_ssd_priors(&pc, &pt));
    int f1 = mpx_g_relu(g, "r1", mpx_g_conv2d(g, "c1", img, 6, 3, 3, 1, 1, 1));
    int f2 = mpx_g_relu(g, "r2", mpx_g_conv2d(g, "c2", f1, 6, 3, 3, 2, 1, 1));
    int confs[2] = {mpx_g_conv2d(g, "conf1", f1, per_cell * C, 3, 3, 1, 1, 1),
                    mpx_g_conv2d(g, "conf2", f2, per_cell * C, 3, 3, 1, 1, 1)};
    int locs[2] = {mpx_g_conv2d(g, "loc1", f1, per_cell * 4, 3, 3, 1, 1, 1),
                   mpx_g_conv2d(g, "loc2", f2, per_cell * 4, 3, 3, 1, 1, 1)};
    int conf = mpx_g_concat(g, "conf", 2, confs, C), loc = mpx_g_concat(g, "loc", 2, locs, 4);
    mpx_g_multibox(g, "loss", conf, loc, boxes, labels, pri, P, 0.5f, 3.0f);
    free(pri);
    mpx_precision pr;
    mpx_precision_init(&pr, mode, "rne", 0);
    CHECK_OK(mpx_graph_status(g));
    CHECK_OK(mpx_graph_compile(g, &pr, MPX_DEV_CPU, 6));
    float x[NB * S * S * 3], bx[NB * G * 4] = {0.1f, 0.1f, 0.5f, 0.6f, 0.4f, 0.3f, 0.9f, 0.8f,
                                               0.2f, 0.5f, 0.7f, 0.95f, 0, 0, 0, 0};
    int32_t lb[NB * G] = {1, 2, 2, -1};
    mpx_test_normal(x, NB * S * S * 3, 0, 1, 7);
    CHECK_OK(mpx_graph_set_input(g, img, x, MPX_F32, NB * S * S * 3));
    CHECK_OK(mpx_graph_set_input(g, boxes, bx, MPX_F32, NB * G * 4));
    CHECK_OK(mpx_graph_set_input(g, labels, lb, MPX_I32, NB * G));
    return n;
}

static float loss_at(mpx_graph *g) {
    CHECK_OK(mpx_graph_forward(g, 1));
    return mpx_graph_loss(g);
}

static void gradcheck(const char *what, mpx_graph *g) {
    mpx_graph_set_step(g, 3);
    CHECK_OK(mpx_graph_forward(g, 1));
    mpx_backward_opts bo = {NULL, 1.0, 3, NULL};
    int64_t nf = -1;
    CHECK_OK(mpx_graph_backward(g, &bo, &nf));
    CHECK(nf == 0, "%s: non-finite gradients", what);
    int checked = 0, skipped = 0, nonzero = 0;
    const float h = 1e-2f;
    for (int i = 0; i < mpx_graph_n_params(g); i++) {
        mpx_param *p = mpx_graph_param(g, i);
        float *grad = malloc((size_t)p->numel * sizeof *grad);
        memcpy(grad, p->grad, (size_t)p->numel * sizeof *grad);
        int samples = p->numel < 6 ? (int)p->numel : 6;
        for (int s = 0; s < samples; s++) {
            int64_t k = (int64_t)(mpx_rand_u32(31, MPX_RNG_TEST, (uint64_t)(i * 50 + s)) % (uint32_t)p->numel);
            float w0 = p->master[k];
            double fd[2];
            for (int r = 0; r < 2; r++) {
                float hr = r == 0 ? h : h / 4;
                p->master[k] = w0 + hr;
                float lp = loss_at(g);
                p->master[k] = w0 - hr;
                float lm = loss_at(g);
                p->master[k] = w0;
                fd[r] = ((double)lp - lm) / (2.0 * hr);
            }
            if (fabs(fd[0] - fd[1]) > 1e-3 + 1e-2 * fabs(fd[1])) {
                skipped++;
                continue;
            }
            checked++;
            nonzero += fabs(fd[1]) > 1e-3;
            CHECK(fabs(fd[1] - grad[k]) <= 2e-3 + 3e-2 * fabs(grad[k]),
                  "%s: %s[%lld]: backward %.6g, finite differences %.6g / %.6g", what, p->name,
                  (long long)k, grad[k], fd[0], fd[1]);
        }
        free(grad);
    }
    printf("%s gradcheck: %d elements checked, %d skipped at kinks\n", what, checked, skipped);
    CHECK(checked >= 40 && skipped * 5 <= checked, "%s: too few elements checked (%d, %d skipped)",
          what, checked, skipped);
    CHECK(nonzero * 2 >= checked, "%s: only %d of %d gradients are nonzero: a vacuous check", what,
          nonzero, checked);
}

/* Power-of-two scaling commutes with FP32 arithmetic: adaptive scaling's unscaled gradients
 * equal the unscaled run's bit for bit. */
static void exact_scaling(const char *what, net (*make)(const char *)) {
    mpx_scaling_cfg none, ad;
    mpx_scaling_defaults(&none);
    ad = none;
    ad.method = MPX_SCALING_ADAPTIVE;
    ad.update_every = 1;
    ad.u_min = 1e-3; /* visible factors on this tiny net */
    net a = make("fp32"), b = make("fp32");
    mpx_graph_set_step(a.g, 1);
    mpx_graph_set_step(b.g, 1);
    CHECK_OK(mpx_graph_forward(a.g, 1));
    CHECK_OK(mpx_graph_forward(b.g, 1));
    mpx_backward_opts ba = {&none, 1.0, 1, NULL}, bb = {&ad, 4.0, 1, NULL};
    int64_t nf;
    CHECK_OK(mpx_graph_backward(a.g, &ba, &nf));
    CHECK_OK(mpx_graph_backward(b.g, &bb, &nf));
    int differ = 0, factors = 0;
    for (int i = 0; i < mpx_graph_n_params(a.g); i++) {
        mpx_param *p = mpx_graph_param(a.g, i), *q = mpx_graph_param(b.g, i);
        differ += memcmp(p->grad, q->grad, (size_t)p->numel * sizeof(float)) != 0;
    }
    for (int l = 0; l < mpx_graph_n_layers(b.g); l++) {
        double sp, s;
        mpx_graph_layer_scale(b.g, l, &sp, &s);
        factors += s > 1;
    }
    CHECK(differ == 0, "%s: %d parameter gradients differ under adaptive scaling", what, differ);
    CHECK(factors > 0, "%s: no layer got a factor: the test does not exercise adaptive scaling", what);
    mpx_graph_free(a.g);
    mpx_graph_free(b.g);
}

static net bert_plain(const char *mode) { return bert(mode, 0.1f); }

int main(void) {
    net b = bert("fp32", 0.1f);
    gradcheck("bert", b.g);
    mpx_graph_free(b.g);
    net d = ssd("fp32");
    gradcheck("ssd", d.g);
    mpx_graph_free(d.g);
    exact_scaling("bert", bert_plain);
    exact_scaling("ssd", ssd);
    /* Low precision runs end to end and lands near fp32. */
    const char *modes[2] = {"fp16", "bf16"};
    for (int m = 0; m < 2; m++) {
        net x = bert("fp32", 0.0f), y = bert(modes[m], 0.0f);
        float lx = loss_at(x.g), ly = loss_at(y.g);
        CHECK(fabs(lx - ly) < (m ? 5e-2 : 1e-2) * fabs(lx), "bert %s loss %g vs fp32 %g", modes[m], ly, lx);
        mpx_graph_free(x.g);
        mpx_graph_free(y.g);
    }
    return mpx_test_done(__FILE__);
}
