/* test_resnet.c — the ResNet family end to end (docs/design.md §10 rung 5):
 *   parameter counts equal torchvision's (ResNet-50 with 1000 classes: 25,557,032);
 *   a small CIFAR-style ResNet's loss falls on a fixed batch in every precision mode and
 *   scaling method (fp32; fp16 none, dynamic, adaptive, adaptive-quantile; bf16; tf32);
 *   the same seed and thread count give a bit-identical loss trajectory;
 *   a training step makes the host wait for the backend once (the skip decision: loss,
 *   non-finite count and gradient norm in one download), the batch upload and the update
 *   included; adaptive scaling adds one wait per branch merge (the magnitudes that choose the
 *   merge's scale), statistics steps more. The CPU backend counts the entries a device would
 *   wait on, so this holds the executor to it without a GPU.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/models.h"
#include "mpx/optim.h"
#include "mpx/rng.h"
#include "testutil.h"

static void test_param_counts(void) {
    static const struct {
        const char *arch;
        long long params;
    } expect[] = {{"resnet18", 11689512}, {"resnet34", 21797672}, {"resnet50", 25557032},
                  {"resnet101", 44549160}};
    for (size_t i = 0; i < sizeof expect / sizeof *expect; i++) {
        mpx_resnet_cfg c;
        CHECK(mpx_resnet_preset(expect[i].arch, &c) == 0, "preset %s", expect[i].arch);
        mpx_graph *g = mpx_graph_new();
        CHECK_OK(mpx_resnet_build(g, &c, 2, 224, 224, 3, NULL, NULL, NULL));
        CHECK(mpx_graph_param_count(g) == expect[i].params, "%s: %lld parameters, expected %lld",
              expect[i].arch, (long long)mpx_graph_param_count(g), expect[i].params);
        mpx_graph_free(g);
    }
    mpx_resnet_cfg c;
    CHECK(mpx_resnet_preset("resnet51", &c) < 0, "unknown preset accepted");
}

enum { BATCH = 16, HW = 8, STEPS = 40 };

typedef struct {
    const char *mode, *scaling;
} variant;

/* A CIFAR-style resnet20 of the given width for `batch` HW x HW images and 10 classes, compiled
 * for the CPU in `mode`. */
static mpx_graph *small_resnet(double width, int batch, const char *mode, int *image,
                               int *labels) {
    mpx_resnet_cfg c;
    mpx_resnet_preset("resnet20", &c);
    c.width_mult = width;
    c.num_classes = 10;
    mpx_graph *g = mpx_graph_new();
    CHECK_OK(mpx_resnet_build(g, &c, batch, HW, HW, 3, image, labels, NULL));
    mpx_precision p;
    mpx_precision_init(&p, mode, "rne", 1);
    CHECK_OK(mpx_graph_compile(g, &p, MPX_DEV_CPU, 42));
    return g;
}

/* Train a fixed batch for STEPS steps; fills losses[STEPS]. Returns the number of skipped steps. */
static int train_fixed_batch(const variant *v, float *losses) {
    int image, labels;
    mpx_graph *g = small_resnet(0.5, BATCH, v->mode, &image, &labels);
    mpx_scaling_cfg sc;
    mpx_scaling_defaults(&sc);
    sc.method = mpx_scaling_parse(v->scaling);
    sc.update_every = 10;
    mpx_scaler scaler;
    CHECK_OK(mpx_scaler_init(&scaler, &sc));
    mpx_optim_cfg oc = {MPX_OPT_SGD, 0.9, 0, 0, 0, 0, 0, 0};
    mpx_optimizer *opt;
    CHECK_OK(mpx_optimizer_create(g, &oc, &opt));

    float x[BATCH * HW * HW * 3];
    int32_t y[BATCH];
    mpx_test_normal(x, BATCH * HW * HW * 3, 0, 1, 5);
    for (int i = 0; i < BATCH; i++) y[i] = (int32_t)(mpx_rand_u32(6, MPX_RNG_TEST, (uint64_t)i) % 10);
    CHECK_OK(mpx_graph_set_input(g, image, x, MPX_F32, BATCH * HW * HW * 3));
    CHECK_OK(mpx_graph_set_input(g, labels, y, MPX_I32, BATCH));
    for (int s = 0; s < STEPS; s++) {
        CHECK_OK(mpx_graph_forward(g, 1));
        losses[s] = mpx_graph_loss(g);
        mpx_backward_opts bo = {&sc, mpx_scaler_loss_scale(&scaler), s, NULL};
        int64_t nonfinite = 0;
        CHECK_OK(mpx_graph_backward(g, &bo, &nonfinite));
        if (!mpx_scaler_update(&scaler, nonfinite > 0)) {
            CHECK_OK(mpx_optimizer_step(opt, 0.05, NULL));
            CHECK_OK(mpx_graph_sync_weights(g, s + 1));
        }
    }
    int skipped = (int)scaler.skipped;
    mpx_optimizer_free(opt);
    mpx_graph_free(g);
    return skipped;
}

static void test_loss_falls(void) {
    static const variant vs[] = {{"fp32", "none"},     {"fp16", "none"},
                                 {"fp16", "dynamic"},  {"fp16", "adaptive"},
                                 {"fp16", "adaptive-quantile"}, {"bf16", "none"},
                                 {"tf32", "none"}};
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) {
        float losses[STEPS];
        int skipped = train_fixed_batch(&vs[i], losses);
        printf("%s/%s: loss %.4f -> %.4f, %d skipped\n", vs[i].mode, vs[i].scaling, losses[0],
               losses[STEPS - 1], skipped);
        CHECK(isfinite(losses[0]) && losses[0] > 1.5f, "%s/%s: initial loss %g", vs[i].mode,
              vs[i].scaling, losses[0]);
        /* Memorising 16 random labels: a working backward pass takes the loss far down. */
        CHECK(losses[STEPS - 1] < 0.3f * losses[0], "%s/%s: loss %g -> %g did not fall",
              vs[i].mode, vs[i].scaling, losses[0], losses[STEPS - 1]);
    }
}

static void test_determinism(void) {
    variant v = {"fp16", "adaptive"};
    float a[STEPS], b[STEPS];
    train_fixed_batch(&v, a);
    train_fixed_batch(&v, b);
    CHECK(memcmp(a, b, sizeof a) == 0, "same seed, different loss trajectory");
}

/* The host's waits per training step, by scaling method (no statistics; then a statistics
 * step): one, the skip decision's, and one more for a statistics step's rows. resnet20 has 9 residual blocks, so 9 tensors feed two
 * consumers (a block's first conv and its shortcut) and adaptive scaling merges 9 pairs of
 * branches per backward pass: speculatively, without a wait (tests/model/
 * test_speculative_merges.c); with merges that wait, one more per merge. */
static void test_host_waits(void) {
    static const struct {
        const char *mode, *scaling;
        int per_step; /* waits of a step whose adaptive factors are cached */
        int exact;    /* merges that wait (mpx_graph_speculative_merges(g, 0)) */
    } want[] = {{"fp32", "none", 1, 0}, {"fp16", "dynamic", 1, 0}, {"bf16", "none", 1, 0},
                {"fp16", "adaptive", 1, 0}, {"fp16", "adaptive", 1 + 9, 1}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        int image, labels;
        mpx_graph *g = small_resnet(0.25, 4, want[i].mode, &image, &labels);
        mpx_graph_speculative_merges(g, !want[i].exact);
        mpx_scaling_cfg sc;
        mpx_scaling_defaults(&sc);
        sc.method = mpx_scaling_parse(want[i].scaling);
        sc.update_every = 100; /* step 0 computes the factors, steps 1.. reuse them */
        mpx_optim_cfg oc = {MPX_OPT_SGD, 0.9, 0, 0, 0, 0, 0, 1.0};
        mpx_optimizer *opt;
        CHECK_OK(mpx_optimizer_create(g, &oc, &opt));
        mpx_layer_stats *ls = calloc((size_t)mpx_graph_n_layers(g), sizeof *ls);
        float x[4 * HW * HW * 3];
        int32_t y[4] = {1, 7, 3, 0};
        mpx_test_normal(x, 4 * HW * HW * 3, 0, 1, 8);
        int64_t waits[4];
        for (int s = 0; s < 4; s++) {
            const int64_t w0 = mpx_graph_host_waits(g);
            CHECK_OK(mpx_graph_set_input(g, image, x, MPX_F32, 4 * HW * HW * 3));
            CHECK_OK(mpx_graph_set_input(g, labels, y, MPX_I32, 4));
            CHECK_OK(mpx_graph_forward(g, 1));
            /* step 3 is a statistics step */
            mpx_backward_opts bo = {&sc, sc.method == MPX_SCALING_NONE ? 1.0 : 1024.0, s,
                                    s == 3 ? ls : NULL};
            int64_t nonfinite = -1;
            CHECK_OK(mpx_graph_backward(g, &bo, &nonfinite));
            float loss = mpx_graph_loss(g);
            double norm = mpx_graph_grad_norm(g);
            CHECK(nonfinite == 0 && isfinite(loss) && isfinite(norm) && norm > 0,
                  "%s/%s step %d: non-finite %lld, loss %g, norm %g", want[i].mode,
                  want[i].scaling, s, (long long)nonfinite, loss, norm);
            CHECK_OK(mpx_optimizer_step_norm(opt, 0.01, norm));
            CHECK_OK(mpx_graph_sync_weights(g, s + 1));
            waits[s] = mpx_graph_host_waits(g) - w0;
        }
        printf("%s/%s: host waits per step %lld %lld %lld, statistics step %lld\n", want[i].mode,
               want[i].scaling, (long long)waits[0], (long long)waits[1], (long long)waits[2],
               (long long)waits[3]);
        CHECK(waits[1] == want[i].per_step && waits[2] == want[i].per_step,
              "%s/%s: %lld and %lld waits per step, want %d", want[i].mode, want[i].scaling,
              (long long)waits[1], (long long)waits[2], want[i].per_step);
        /* step 0 computes every adaptive factor (moments of dy and w per conv/linear) */
        CHECK(strcmp(want[i].scaling, "adaptive") == 0 ? waits[0] > waits[1] : waits[0] == 1,
              "%s/%s: step 0 waited %lld times", want[i].mode, want[i].scaling,
              (long long)waits[0]);
        /* statistics (not an update step): every layer's counts and moments in one download */
        CHECK(waits[3] == waits[1] + 1, "%s/%s: statistics step waited %lld times, want %lld",
              want[i].mode, want[i].scaling, (long long)waits[3], (long long)waits[1] + 1);
        /* mpx_optimizer_step reduces the norm itself: one more wait */
        const int64_t w0 = mpx_graph_host_waits(g);
        double own = 0;
        CHECK_OK(mpx_optimizer_step(opt, 0.0, &own));
        CHECK(mpx_graph_host_waits(g) - w0 == 1, "mpx_optimizer_step waited %lld times",
              (long long)(mpx_graph_host_waits(g) - w0));
        free(ls);
        mpx_optimizer_free(opt);
        mpx_graph_free(g);
    }
}

int main(void) {
    test_param_counts();
    test_loss_falls();
    test_determinism();
    test_host_waits();
    return mpx_test_done(__FILE__);
}
