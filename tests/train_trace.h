/* train_trace.h — a few training steps of small ResNet / BERT / SSD graphs on a given backend,
 * recorded bit for bit, for tests that require two ways of running the same training to agree
 * exactly (tests/model/test_direct_io.c: an instrumented CPU backend; tests/cuda/
 * test_direct_io_cuda.c: the CUDA backend with and without direct 16-bit I/O; tests/model/
 * test_fusion.c: with and without fusion: ReLUs in their producers, add inputs sharing the
 * add's gradient; tests/model/test_loss_rows.c: BERT's decoder on the rows its loss reads, or on
 * all; tests/model/test_speculative_merges.c: adaptive merges that assume their target, or
 * wait).
 *
 * Header-only (static functions): each test is its own executable. The models: a ResNet-20 at
 * width 0.25 with the ImageNet stem (7x7 / 2 conv and max-pool) on 16x16 images, a one-layer
 * BERT (H 32, 2 heads, dropout, a tied decoder) on 8 tokens, an SSD (ResNet-18 trunk at width
 * 0.125, 64 px, concat and MultiBox); batch 2, STEPS steps of SGD with momentum, weight decay
 * and clipping, loss scaling as the variant says (adaptive factors updated every 2 steps, with
 * a u_min that gives them factors above 1), and statistics on every odd step (with the
 * optimizer's lost-update statistics of that step's update).
 */
#ifndef MPX_TEST_TRAIN_TRACE_H
#define MPX_TEST_TRAIN_TRACE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/models.h"
#include "mpx/backend.h"
#include "mpx/optim.h"
#include "mpx/rng.h"
#include "testutil.h"

enum { STEPS = 4, BATCH = 2 };

typedef struct {
    const char *model, *mode, *scaling, *rounding;
    int decoded; /* precision.direct_io = false: the executor must not use the direct path */
    int fma;     /* precision.tensor_cores = false (a device then computes as with FP32 views) */
    int unfused; /* mpx_graph_fuse(g, 0): every ReLU on its own */
    int all_rows; /* mpx_graph_loss_rows(g, 0): the decoder computes the rows the loss ignores */
    int mlm;     /* BERT: labels as masked-LM batches have them, 15% predicted, the rest -1 */
    int exact_merges; /* mpx_graph_speculative_merges(g, 0): adaptive merges wait */
    double u_max;     /* adaptive scaling's u_max when > 0 (a small one makes merges miss) */
    int step0;        /* the first step's number (1: as a run resumed between factor updates) */
    int als_ref;      /* adaptive scaling as the 2019 code (precision.als = reference) */
    int pure;         /* 1: no FP32 master weights; 2: and the optimizer state in storage */
} variant;

/* What a run produced, step by step. */
typedef struct {
    float loss[STEPS];
    int64_t nonfinite[STEPS];
    double norm[STEPS];
    mpx_layer_stats *stats[STEPS]; /* NULL on steps without statistics */
    int n_layers;
    float *weights; /* every master weight at the end, concatenated */
    size_t n_weights;
    int n_fused;          /* ReLUs fused into their producers */
    int n_shared;         /* add inputs sharing the add's output gradient */
    size_t value_bytes;   /* the memory plan's activation values */
    size_t grad_bytes;    /* ... and gradients */
    int64_t merge_redos;  /* backward passes run again after a speculative merge missed */
} trace;

static void set_i32(mpx_graph *g, int t, int64_t n, uint32_t mod, int32_t offset, uint64_t seed) {
    int32_t *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = (int32_t)(mpx_rand_u32(seed, MPX_RNG_TEST, (uint64_t)i) % mod) + offset;
    CHECK_OK(mpx_graph_set_input(g, t, v, MPX_I32, n));
    free(v);
}

static void set_f32(mpx_graph *g, int t, int64_t n, uint64_t seed) {
    float *v = malloc((size_t)n * sizeof *v);
    mpx_test_normal(v, (size_t)n, 0, 1, seed);
    CHECK_OK(mpx_graph_set_input(g, t, v, MPX_F32, n));
    free(v);
}

/* The variant `mlm`'s BERT label of position i: 3 of the 16 predicted (i % 5 == 2), the rest
 * ignored (-1), as in a masked-LM batch. */
static int32_t mlm_label(int i) { return i % 5 == 2 ? 1 + i % 39 : -1; }

/* g compiled on `be` in the variant's precision. */
static void compile_variant(mpx_graph *g, const variant *v, const mpx_backend *be, uint64_t seed) {
    mpx_precision p;
    mpx_precision_init(&p, v->mode, v->rounding, 3);
    p.direct_io = !v->decoded;
    p.tensor_cores = !v->fma;
    mpx_graph_fuse(g, !v->unfused);
    mpx_graph_loss_rows(g, !v->all_rows);
    mpx_graph_speculative_merges(g, !v->exact_merges);
    if (v->pure) CHECK(mpx_precision_set_masters(&p, 0, v->pure == 2) == 0, "no masters in %s", v->mode);
    CHECK_OK(mpx_graph_compile_backend(g, &p, be, seed));
}

/* The model of `v`, compiled on `be`, with its inputs set. */
static mpx_graph *build(const variant *v, const mpx_backend *be) {
    mpx_graph *g = mpx_graph_new();
    int64_t n_img = 0;
    int image = -1;
    if (strcmp(v->model, "resnet") == 0) {
        mpx_resnet_cfg c;
        mpx_resnet_preset("resnet20", &c);
        c.stem = MPX_STEM_IMAGENET; /* conv 7x7 / 2 and max-pool */
        c.width_mult = 0.25;
        c.num_classes = 10;
        int labels;
        CHECK_OK(mpx_resnet_build(g, &c, BATCH, 16, 16, 3, &image, &labels, NULL));
        n_img = BATCH * 16 * 16 * 3;
        compile_variant(g, v, be, 11);
        set_i32(g, labels, BATCH, 10, 0, 1);
    } else if (strcmp(v->model, "bert") == 0) {
        mpx_bert_cfg c;
        mpx_bert_preset("bert_tiny", &c);
        c.layers = 1, c.hidden = 32, c.heads = 2, c.ffn = 64, c.vocab = 40, c.max_len = 8;
        c.init_std = 0.2f; /* larger weights: more of the gradients near FP16's small end */
        mpx_bert_io io;
        const int T = 8;
        CHECK_OK(mpx_bert_build(g, &c, BATCH, T, &io));
        compile_variant(g, v, be, 12);
        int32_t pos[BATCH * 8], mask[BATCH * 8];
        for (int i = 0; i < BATCH * T; i++) pos[i] = i % T, mask[i] = i % T < T - 1 || i < T;
        set_i32(g, io.ids, BATCH * T, 40, 0, 2);
        CHECK_OK(mpx_graph_set_input(g, io.positions, pos, MPX_I32, BATCH * T));
        set_i32(g, io.segments, BATCH * T, 2, 0, 3);
        CHECK_OK(mpx_graph_set_input(g, io.mask, mask, MPX_I32, BATCH * T));
        if (v->mlm) { /* 15% predicted (3 of the 16 positions), the rest ignored */
            int32_t lab[BATCH * 8];
            for (int i = 0; i < BATCH * T; i++) lab[i] = mlm_label(i);
            CHECK_OK(mpx_graph_set_input(g, io.labels, lab, MPX_I32, BATCH * T));
        } else {
            set_i32(g, io.labels, BATCH * T, 41, -1, 4); /* -1: not predicted */
        }
    } else {
        mpx_ssd_cfg c;
        mpx_ssd_defaults(&c);
        c.width_mult = 0.125;
        c.num_classes = 3;
        c.image_size = 64;
        int boxes, labels, conf, loc;
        int64_t P;
        CHECK_OK(mpx_ssd_build(g, &c, BATCH, 2, &image, &boxes, &labels, &conf, &loc, &P, NULL, 0));
        n_img = BATCH * 64 * 64 * 3;
        compile_variant(g, v, be, 13);
        const float bx[BATCH * 2 * 4] = {0.1f, 0.1f, 0.5f, 0.6f, 0.4f, 0.3f, 0.9f, 0.8f,
                                         0.2f, 0.5f, 0.7f, 0.95f, 0,    0,    0,    0};
        const int32_t lb[BATCH * 2] = {1, 3, 2, -1};
        CHECK_OK(mpx_graph_set_input(g, boxes, bx, MPX_F32, BATCH * 2 * 4));
        CHECK_OK(mpx_graph_set_input(g, labels, lb, MPX_I32, BATCH * 2));
    }
    if (image >= 0) set_f32(g, image, n_img, 5);
    return g;
}

static void run(const variant *v, const mpx_backend *be, trace *tr) {
    memset(tr, 0, sizeof *tr);
    mpx_graph *g = build(v, be);
    mpx_scaling_cfg sc;
    mpx_scaling_defaults(&sc);
    sc.method = mpx_scaling_parse(v->scaling);
    sc.update_every = 2;
    /* Adaptive factors: u_min well above FP16's smallest subnormal, so that these small
     * models' layers get factors above 1 (with the default, their gradients need none and
     * the paths that apply a factor would go untested). */
    sc.u_min = 1e-4;
    if (v->als_ref) sc.als = MPX_ALS_REFERENCE, sc.u_max = 6e4, sc.unscale_fp16 = 1;
    if (v->u_max > 0) sc.u_max = v->u_max;
    mpx_scaler scaler;
    CHECK_OK(mpx_scaler_init(&scaler, &sc));
    mpx_optim_cfg oc = {MPX_OPT_SGD, 0.9, 0, 1e-4, 0, 0, 0, 1.0};
    mpx_optimizer *opt;
    CHECK_OK(mpx_optimizer_create(g, &oc, &opt));
    tr->n_layers = mpx_graph_n_layers(g);
    tr->n_fused = mpx_graph_n_fused(g);
    tr->n_shared = mpx_graph_n_shared_grads(g);
    mpx_memory_plan plan;
    mpx_graph_memory(g, &plan);
    tr->value_bytes = plan.values;
    tr->grad_bytes = plan.grads;
    for (int s = 0; s < STEPS; s++) {
        mpx_graph_set_step(g, s + v->step0);
        CHECK_OK(mpx_graph_forward(g, 1));
        if (s % 2 == 1) tr->stats[s] = calloc((size_t)tr->n_layers, sizeof(mpx_layer_stats));
        mpx_backward_opts bo = {&sc, mpx_scaler_loss_scale(&scaler), s + v->step0, tr->stats[s]};
        CHECK_OK(mpx_graph_backward(g, &bo, &tr->nonfinite[s]));
        tr->loss[s] = mpx_graph_loss(g);
        tr->norm[s] = mpx_graph_grad_norm(g);
        if (tr->stats[s]) CHECK_OK(mpx_optimizer_watch(opt));
        if (!mpx_scaler_update(&scaler, tr->nonfinite[s] > 0)) {
            CHECK_OK(mpx_optimizer_step_norm(opt, 0.05, tr->norm[s]));
            CHECK_OK(mpx_graph_sync_weights(g, s + v->step0 + 1));
        }
        if (tr->stats[s]) CHECK_OK(mpx_optimizer_watched(opt, tr->stats[s]));
    }
    tr->merge_redos = mpx_graph_merge_redos(g);
    for (int i = 0; i < mpx_graph_n_params(g); i++)
        tr->n_weights += (size_t)mpx_graph_param(g, i)->numel;
    tr->weights = malloc(tr->n_weights * sizeof(float));
    size_t off = 0;
    for (int i = 0; i < mpx_graph_n_params(g); i++) {
        const mpx_param *p = mpx_graph_param(g, i);
        mpx_graph_download(g, tr->weights + off, p->master, (size_t)p->numel * sizeof(float));
        off += (size_t)p->numel;
    }
    mpx_optimizer_free(opt);
    mpx_graph_free(g);
}

static void trace_free(trace *tr) {
    for (int s = 0; s < STEPS; s++) free(tr->stats[s]);
    free(tr->weights);
}

/* a and b (e.g. FP32 views and direct, or unfused and fused) must agree in every bit: each step's loss, non-finite count and
 * gradient norm, every statistics row, and the final weights. */
static inline void compare_traces(const char *what, const trace *a, const trace *b) {
    for (int s = 0; s < STEPS; s++) {
        CHECK(isfinite(a->loss[s]), "%s step %d: loss %g", what, s, (double)a->loss[s]);
        CHECK(memcmp(&a->loss[s], &b->loss[s], sizeof(float)) == 0,
              "%s step %d: loss %.9g (a) vs %.9g (b)", what, s,
              (double)a->loss[s], (double)b->loss[s]);
        CHECK(a->nonfinite[s] == b->nonfinite[s], "%s step %d: non-finite %lld vs %lld", what, s,
              (long long)a->nonfinite[s], (long long)b->nonfinite[s]);
        CHECK(memcmp(&a->norm[s], &b->norm[s], sizeof(double)) == 0,
              "%s step %d: gradient norm %.17g vs %.17g", what, s, a->norm[s], b->norm[s]);
        if (a->stats[s])
            for (int l = 0; l < a->n_layers; l++)
                CHECK(memcmp(&a->stats[s][l], &b->stats[s][l], sizeof(mpx_layer_stats)) == 0,
                      "%s step %d: statistics of layer %d differ", what, s, l);
    }
    size_t first = a->n_weights;
    for (size_t i = 0; i < a->n_weights && first == a->n_weights; i++)
        if (memcmp(&a->weights[i], &b->weights[i], sizeof(float)) != 0) first = i;
    CHECK(first == a->n_weights, "%s: weight %zu is %.9g (a) vs %.9g (b)", what,
          first, first < a->n_weights ? (double)a->weights[first] : 0.0,
          first < a->n_weights ? (double)b->weights[first] : 0.0);
}

#endif
