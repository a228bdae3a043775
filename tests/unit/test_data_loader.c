/* test_data_loader.c — the batch loader on in-memory datasets: determinism (same seed ->
 * identical batches whatever the prefetch depth; another seed -> other batches), every
 * example exactly once per epoch, resume at a saved position == uninterrupted, pad-crop and
 * flip moving known pixels where the drawn offsets say, normalisation, eval mode with its
 * partial last batch, and configuration errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/data.h"
#include "mpx/runtime.h"
#include "testutil.h"

enum { N = 10, H = 6, W = 5, C = 2 };

/* labels[i] = i, so a batch's labels name its examples. */
static void make_dataset(mpx_dataset *ds) {
    mpx_dataset_alloc(ds, N, H, W, C, N);
    for (int i = 0; i < N; i++) {
        ds->labels[i] = i;
        for (int p = 0; p < H * W * C; p++)
            ds->images[(size_t)i * H * W * C + p] = (uint8_t)(i * 37 + p * 11 + 5);
    }
}

typedef struct {
    float x[16 * H * W * C];
    int32_t y[16];
    int n;
    mpx_loader_pos pos;
} saved;

/* Run `count` batches from `start`, copying them out. */
static int run(const mpx_dataset *ds, const mpx_loader_config *cfg, mpx_loader_pos start, int count,
               saved *out) {
    mpx_loader *L;
    mpx_status st = mpx_loader_create(ds, cfg, start, &L);
    CHECK(st == MPX_OK, "create: %s", mpx_error_message());
    if (st != MPX_OK) return 0;
    for (int b = 0; b < count; b++) {
        mpx_batch batch;
        st = mpx_loader_next(L, &batch);
        CHECK(st == MPX_OK, "next: %s", mpx_error_message());
        if (st != MPX_OK) break;
        memcpy(out[b].x, batch.x, (size_t)batch.batch_size * H * W * C * sizeof(float));
        memcpy(out[b].y, batch.y, (size_t)batch.batch_size * sizeof(int32_t));
        out[b].n = batch.n;
        out[b].pos = batch.pos;
    }
    mpx_loader_free(L);
    return st == MPX_OK;
}

static int same(const saved *a, const saved *b, int count, int B) {
    for (int i = 0; i < count; i++)
        if (a[i].n != b[i].n || memcmp(a[i].x, b[i].x, (size_t)B * H * W * C * sizeof(float)) ||
            memcmp(a[i].y, b[i].y, (size_t)B * sizeof(int32_t)) ||
            a[i].pos.epoch != b[i].pos.epoch || a[i].pos.batch != b[i].pos.batch)
            return 0;
    return 1;
}

/* The expected augmented, normalised pixel computed from the draw, in double:
 * out(y, x) = src(y + cy - P, x' + cx - P) (0 outside), x' = flip ? W-1-x : x. */
static double expected(const mpx_dataset *ds, const mpx_loader_config *cfg, const mpx_augment *a,
                       int ex, int y, int x, int c) {
    int sx = (a->flip ? W - 1 - x : x) + a->crop_x - cfg->pad, sy = y + a->crop_y - cfg->pad;
    double v = (sy >= 0 && sy < H && sx >= 0 && sx < W)
                   ? mpx_dataset_image(ds, ex)[(sy * W + sx) * C + c]
                   : 0;
    return (v / 255.0 - cfg->mean[c]) / cfg->std[c];
}

/* Tolerance for normalised values: the loader computes p * (1/(255 std)) + (-mean/std) in
 * float; |x| < 5 here, so a few float ulps are < 1e-5 absolute. */
static double batch_error(const mpx_dataset *ds, const mpx_loader_config *cfg, const saved *s) {
    double worst = 0;
    for (int j = 0; j < s->n; j++) {
        mpx_augment a;
        mpx_loader_augment(cfg, H, W, s->pos.epoch, s->y[j], &a);
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                for (int c = 0; c < C; c++) {
                    double e = fabs(s->x[((size_t)j * H * W + y * W + x) * C + c] -
                                    expected(ds, cfg, &a, s->y[j], y, x, c));
                    worst = e > worst ? e : worst;
                }
    }
    return worst;
}

static void test_determinism_and_epochs(const mpx_dataset *ds) {
    mpx_loader_config cfg = mpx_loader_config_train(4, 42);
    cfg.drop_last = 0; /* 3 batches per epoch: 4, 4, 2 */
    cfg.pad = 2;
    cfg.flip = 1;
    cfg.mean[0] = 0.5f;
    cfg.std[0] = 0.25f;
    cfg.mean[1] = 0.1f;
    cfg.std[1] = 2.0f;
    enum { NB = 12 }; /* 4 epochs */
    static saved a[NB], b[NB], c[NB], d[NB];
    mpx_loader_pos zero = {0, 0};
    run(ds, &cfg, zero, NB, a);
    cfg.prefetch = 1;
    run(ds, &cfg, zero, NB, b);
    cfg.prefetch = 5;
    run(ds, &cfg, zero, NB, c);
    CHECK(same(a, b, NB, 4) && same(a, c, NB, 4), "prefetch depth changed the batches");

    /* Every example exactly once per epoch; epochs in different orders. */
    int orders_equal = 0;
    for (int e = 0; e < 4; e++) {
        int seen[N] = {0}, total = 0;
        for (int k = 0; k < 3; k++) {
            const saved *s = &a[3 * e + k];
            CHECK(s->pos.epoch == e && s->pos.batch == k, "batch %d has position (%lld, %lld)",
                  3 * e + k, (long long)s->pos.epoch, (long long)s->pos.batch);
            CHECK(s->n == (k < 2 ? 4 : 2), "epoch %d batch %d has %d examples", e, k, s->n);
            for (int j = 0; j < s->n; j++) seen[s->y[j]]++, total++;
            for (int j = s->n; j < 4; j++) CHECK(s->y[j] == -1, "padding label %d", s->y[j]);
        }
        int once = 1;
        for (int i = 0; i < N; i++) once &= seen[i] == 1;
        CHECK(once && total == N, "epoch %d does not hold every example once", e);
        if (e > 0)
            orders_equal += memcmp(a[3 * e].y, a[0].y, sizeof a[0].y) == 0 &&
                            memcmp(a[3 * e + 1].y, a[1].y, sizeof a[1].y) == 0;
    }
    CHECK(orders_equal == 0, "%d later epochs repeat the order of epoch 0", orders_equal);
    int shuffled = 0;
    for (int j = 0; j < 4; j++) shuffled += a[0].y[j] != j;
    CHECK(shuffled > 0, "epoch 0 is in dataset order despite shuffle");

    /* Every batch matches the documented augmentation of its examples. */
    double worst = 0;
    for (int k = 0; k < NB; k++) worst = fmax(worst, batch_error(ds, &cfg, &a[k]));
    CHECK(worst < 1e-5, "batches differ from the reference augmentation by %g", worst);

    /* Another seed: another order and other augmentations. */
    cfg.seed = 43;
    run(ds, &cfg, zero, NB, d);
    int differ = 0;
    for (int k = 0; k < NB; k++) differ += memcmp(a[k].y, d[k].y, sizeof a[k].y) != 0;
    CHECK(differ >= NB / 2, "seed 43 repeats the order of seed 42 in %d of %d batches", NB - differ,
          NB);

    /* Resume: a loader created at the position after 5 batches continues exactly. */
    cfg.seed = 42;
    cfg.prefetch = 2;
    mpx_loader *L;
    CHECK_OK(mpx_loader_create(ds, &cfg, zero, &L));
    mpx_loader_pos saved_pos = {-1, -1};
    for (int k = 0; L && k < 5; k++) {
        mpx_batch batch;
        CHECK_OK(mpx_loader_next(L, &batch));
        saved_pos = mpx_loader_position(L);
    }
    mpx_loader_free(L);
    CHECK(saved_pos.epoch == 1 && saved_pos.batch == 2, "position after 5 batches: (%lld, %lld)",
          (long long)saved_pos.epoch, (long long)saved_pos.batch);
    run(ds, &cfg, saved_pos, NB - 5, b);
    CHECK(same(a + 5, b, NB - 5, 4), "resumed batches differ from the uninterrupted run");

    /* drop_last: 2 full batches per epoch, 8 distinct examples. */
    cfg.drop_last = 1;
    run(ds, &cfg, zero, 4, b);
    for (int e = 0; e < 2; e++) {
        int seen[N] = {0}, dup = 0;
        for (int k = 0; k < 2; k++) {
            CHECK(b[2 * e + k].n == 4 && b[2 * e + k].pos.epoch == e, "drop_last batch (%d, %d)", e,
                  k);
            for (int j = 0; j < 4; j++) dup += seen[b[2 * e + k].y[j]]++ > 0;
        }
        CHECK(dup == 0, "drop_last epoch %d repeats %d examples", e, dup);
    }
}

/* A constructed image with one marker pixel: after the drawn crop and flip the marker must
 * sit at (my - cy + P, mx - cx + P), mirrored when flipped, or have left the window. */
static void test_marker_moves(void) {
    enum { S = 8, P = 3 };
    mpx_dataset ds;
    mpx_dataset_alloc(&ds, 64, S, S, 1, 1);
    const int my = 2, mx = 6;
    for (int i = 0; i < 64; i++) ds.images[(size_t)i * S * S + my * S + mx] = 255;
    mpx_loader_config cfg = mpx_loader_config_eval(64);
    cfg.pad = P;
    cfg.flip = 1;
    mpx_loader *L;
    mpx_loader_pos zero = {0, 0};
    CHECK_OK(mpx_loader_create(&ds, &cfg, zero, &L));
    mpx_batch b;
    CHECK_OK(mpx_loader_next(L, &b));
    int wrong = 0, flips = 0, inside = 0, offsets[2 * P + 1] = {0};
    for (int j = 0; j < 64; j++) {
        mpx_augment a;
        mpx_loader_augment(&cfg, S, S, 0, j, &a);
        flips += a.flip;
        offsets[a.crop_x]++;
        int ty = my - a.crop_y + P, tx = mx - a.crop_x + P;
        if (a.flip) tx = S - 1 - tx;
        int in = ty >= 0 && ty < S && tx >= 0 && tx < S;
        inside += in;
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                float want = (in && y == ty && x == tx) ? 1.0f : 0.0f;
                wrong += fabsf(b.x[(size_t)j * S * S + y * S + x] - want) > 1e-6f;
            }
    }
    mpx_loader_free(L);
    CHECK(wrong == 0, "%d pixels not where the crop/flip puts them", wrong);
    CHECK(flips > 10 && flips < 54 && inside > 10, "64 draws: %d flips, marker inside %d times",
          flips, inside);
    int all = 1;
    for (int k = 0; k <= 2 * P; k++) all &= offsets[k] > 0;
    CHECK(all, "64 draws did not cover every crop offset 0..%d", 2 * P);

    /* Over many draws: offsets uniform on [0, 2P] (each 1/7, 4000 draws: sd ~22, allow 6 sd),
     * flips at rate 1/2 (sd 32, allow 6 sd). */
    int cnt[2 * P + 1] = {0}, nflip = 0;
    for (int i = 0; i < 4000; i++) {
        mpx_augment a;
        mpx_loader_augment(&cfg, S, S, i / 64, i % 64, &a);
        cnt[a.crop_y]++;
        nflip += a.flip;
    }
    for (int k = 0; k <= 2 * P; k++)
        CHECK(fabs(cnt[k] - 4000.0 / 7) < 6 * 22, "offset %d drawn %d times", k, cnt[k]);
    CHECK(abs(nflip - 2000) < 6 * 32, "%d flips in 4000 draws", nflip);
    mpx_dataset_free(&ds);
}

static void test_eval_and_normalisation(const mpx_dataset *ds) {
    mpx_loader_config cfg = mpx_loader_config_eval(4);
    cfg.mean[0] = 0.2f;
    cfg.std[0] = 0.5f;
    cfg.mean[1] = 0.7f;
    cfg.std[1] = 0.1f;
    saved s[6];
    mpx_loader_pos zero = {0, 0};
    run(ds, &cfg, zero, 6, s); /* two epochs: eval repeats the same pass */
    for (int k = 0; k < 6; k++) {
        int want_n = k % 3 < 2 ? 4 : 2;
        CHECK(s[k].n == want_n && s[k].pos.epoch == k / 3 && s[k].pos.batch == k % 3,
              "eval batch %d: n %d pos (%lld, %lld)", k, s[k].n, (long long)s[k].pos.epoch,
              (long long)s[k].pos.batch);
        for (int j = 0; j < s[k].n; j++)
            CHECK(s[k].y[j] == (k % 3) * 4 + j, "eval order: label %d", s[k].y[j]);
    }
    /* x = (p/255 - mean) / std exactly as computed in double (tolerance: float rounding). */
    double worst = 0;
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < s[k].n; j++)
            for (int p = 0; p < H * W * C; p++) {
                double v = mpx_dataset_image(ds, s[k].y[j])[p];
                double want = (v / 255.0 - cfg.mean[p % C]) / cfg.std[p % C];
                worst = fmax(worst, fabs(s[k].x[(size_t)j * H * W * C + p] - want));
            }
    CHECK(worst < 1e-5, "eval normalisation off by %g", worst);
    int zero_pad = 1;
    for (size_t p = 2 * (size_t)H * W * C; p < 4 * (size_t)H * W * C; p++)
        zero_pad &= s[2].x[p] == 0;
    CHECK(zero_pad && s[2].y[2] == -1 && s[2].y[3] == -1, "partial batch padding not zero / -1");

    /* Channel statistics: channel 0 alternates 0 and 255 (mean 0.5, std 0.5), channel 1 is 51. */
    mpx_dataset d2;
    mpx_dataset_alloc(&d2, 2, 1, 2, 2, 1);
    uint8_t px[8] = {0, 51, 255, 51, 255, 51, 0, 51};
    memcpy(d2.images, px, 8);
    float mean[2], std[2];
    mpx_dataset_channel_stats(&d2, mean, std);
    CHECK(fabsf(mean[0] - 0.5f) < 1e-6f && fabsf(std[0] - 0.5f) < 1e-6f &&
              fabsf(mean[1] - 0.2f) < 1e-6f && fabsf(std[1]) < 1e-6f,
          "channel stats %g %g / %g %g", mean[0], std[0], mean[1], std[1]);
    mpx_dataset_free(&d2);
}

static void test_errors(const mpx_dataset *ds) {
    mpx_loader *L = NULL;
    mpx_loader_pos zero = {0, 0}, far = {0, 3};
    mpx_loader_config cfg = mpx_loader_config_train(4, 1);
    cfg.std[1] = 0;
    CHECK(mpx_loader_create(ds, &cfg, zero, &L) == MPX_ERR_INPUT &&
              strstr(mpx_error_message(), "channel 1"),
          "std 0 accepted: %s", mpx_error_message());
    cfg = mpx_loader_config_train(4, 1);
    CHECK(mpx_loader_create(ds, &cfg, far, &L) == MPX_ERR_INPUT,
          "batch 3 of a 2-batch epoch accepted");
    cfg = mpx_loader_config_train(11, 1);
    CHECK(mpx_loader_create(ds, &cfg, zero, &L) == MPX_ERR_INPUT &&
              strstr(mpx_error_message(), "no full batch"),
          "batch 11 > 10 examples with drop_last: %s", mpx_error_message());
    cfg = mpx_loader_config_train(4, 1);
    cfg.pad = 2;
    cfg.out_h = 4;
    cfg.out_w = 4;
    CHECK(mpx_loader_create(ds, &cfg, zero, &L) == MPX_ERR_INPUT &&
              strstr(mpx_error_message(), "pad"),
          "pad-crop with another output size accepted: %s", mpx_error_message());
    mpx_dataset bad = *ds;
    int32_t labels[N];
    memcpy(labels, ds->labels, sizeof labels);
    labels[3] = N;
    bad.labels = labels;
    cfg = mpx_loader_config_train(4, 1);
    CHECK(mpx_loader_create(&bad, &cfg, zero, &L) == MPX_ERR_INPUT &&
              strstr(mpx_error_message(), "example 3"),
          "label out of range accepted: %s", mpx_error_message());
    CHECK(L == NULL, "a failed create returned a loader");
}

/* Throughput of a CIFAR-shaped loader (informational; the slow test measures real CIFAR). */
static void bench_cifar_shape(void) {
    mpx_dataset ds;
    mpx_dataset_alloc(&ds, 5000, 32, 32, 3, 10);
    for (size_t i = 0; i < (size_t)5000 * 3072; i++)
        ds.images[i] = (uint8_t)(i * 2654435761u >> 24);
    mpx_loader_config cfg = mpx_loader_config_train(128, 7);
    cfg.pad = 4;
    cfg.flip = 1;
    mpx_loader *L;
    mpx_loader_pos zero = {0, 0};
    CHECK_OK(mpx_loader_create(&ds, &cfg, zero, &L));
    double t0 = mpx_now();
    int batches = 0;
    for (; L && batches < 78; batches++) {
        mpx_batch b;
        CHECK_OK(mpx_loader_next(L, &b));
    }
    double dt = mpx_now() - t0;
    printf("CIFAR-shaped loader (pad 4, flip, B=128): %.0f images/s\n", batches * 128 / dt);
    mpx_loader_free(L);
    mpx_dataset_free(&ds);
}

int main(void) {
    mpx_dataset ds;
    make_dataset(&ds);
    test_determinism_and_epochs(&ds);
    test_marker_moves();
    test_eval_and_normalisation(&ds);
    test_errors(&ds);
    bench_cifar_shape();
    mpx_dataset_free(&ds);
    return mpx_test_done(__FILE__);
}
