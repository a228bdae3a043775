/* test_det_loader.c — the detection batch loader over an in-memory dataset and over scenes:
 * batches are identical whatever the prefetch depth and thread count; every example appears
 * once per epoch; each row equals mpx_det_augment_draw + mpx_det_augment_apply of its example
 * (eval rows: the plain normalised image); resuming at a saved position continues exactly;
 * padding rows of a partial batch are empty; configuration errors are reported. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/detect.h"
#include "testutil.h"

enum { N = 10, S = 32, MAXB = MPX_DET_MAX_BOXES };

typedef struct {
    float *x, *boxes;
    int32_t labels[8 * MAXB], counts[8];
    uint8_t difficult[8 * MAXB];
    int64_t index[8];
    int n, size;
    mpx_loader_pos pos;
} saved;

static void make_dataset(mpx_det_dataset *ds) {
    const char *names[3] = {"a", "b", "c"};
    mpx_det_dataset_alloc(ds, N, S, 3, names);
    for (int i = 0; i < N; i++) {
        uint8_t *img = ds->images + (size_t)i * S * S * 3;
        for (int p = 0; p < S * S * 3; p++) img[p] = (uint8_t)(i * 41 + p * 13 + p / 97);
        ds->counts[i] = 1 + i % 3;
        for (int k = 0; k < ds->counts[i]; k++)
            ds->boxes[i * MAXB + k] = (mpx_det_box){0.1f * k,         0.05f * i,   0.1f * k + 0.3f,
                                                    0.05f * i + 0.5f, (i + k) % 3, k == 1};
    }
}

static void copy_batch(const mpx_det_batch *b, saved *s) {
    size_t per = (size_t)b->size * b->size * 3;
    s->x = malloc((size_t)b->batch_size * per * sizeof(float));
    s->boxes = malloc((size_t)b->batch_size * MAXB * 4 * sizeof(float));
    memcpy(s->x, b->x, (size_t)b->batch_size * per * sizeof(float));
    memcpy(s->boxes, b->boxes, (size_t)b->batch_size * MAXB * 4 * sizeof(float));
    memcpy(s->labels, b->labels, (size_t)b->batch_size * MAXB * sizeof(int32_t));
    memcpy(s->difficult, b->difficult, (size_t)b->batch_size * MAXB);
    memcpy(s->counts, b->counts, (size_t)b->batch_size * sizeof(int32_t));
    memcpy(s->index, b->index, (size_t)b->batch_size * sizeof(int64_t));
    s->n = b->n;
    s->size = b->size;
    s->pos = b->pos;
}

static void free_saved(saved *s, int count) {
    for (int i = 0; i < count; i++) {
        free(s[i].x);
        free(s[i].boxes);
    }
}

/* `count` batches from `start` over ds (or scenes when ds is NULL). */
static int run(const mpx_det_dataset *ds, const mpx_scenes *sc, const mpx_det_loader_config *cfg,
               mpx_loader_pos start, int count, saved *out) {
    mpx_det_loader *L;
    mpx_status st = ds ? mpx_det_loader_create(ds, cfg, start, &L)
                       : mpx_det_loader_create_scenes(sc, cfg, start, &L);
    CHECK(st == MPX_OK, "create: %s", mpx_error_message());
    if (st != MPX_OK) return 0;
    for (int b = 0; b < count; b++) {
        mpx_det_batch batch;
        st = mpx_det_loader_next(L, &batch);
        CHECK(st == MPX_OK, "next: %s", mpx_error_message());
        if (st != MPX_OK) {
            for (int r = b; r < count; r++) memset(&out[r], 0, sizeof out[r]);
            break;
        }
        copy_batch(&batch, &out[b]);
    }
    mpx_det_loader_free(L);
    return st == MPX_OK;
}

static int same(const saved *a, const saved *b, int count, int B) {
    for (int i = 0; i < count; i++) {
        size_t per = (size_t)a[i].size * a[i].size * 3;
        if (!a[i].x || !b[i].x || a[i].n != b[i].n || a[i].pos.epoch != b[i].pos.epoch ||
            a[i].pos.batch != b[i].pos.batch ||
            memcmp(a[i].x, b[i].x, (size_t)B * per * sizeof(float)) ||
            memcmp(a[i].boxes, b[i].boxes, (size_t)B * MAXB * 4 * sizeof(float)) ||
            memcmp(a[i].labels, b[i].labels, (size_t)B * MAXB * sizeof(int32_t)) ||
            memcmp(a[i].difficult, b[i].difficult, (size_t)B * MAXB) ||
            memcmp(a[i].counts, b[i].counts, (size_t)B * sizeof(int32_t)) ||
            memcmp(a[i].index, b[i].index, (size_t)B * sizeof(int64_t)))
            return 0;
    }
    return 1;
}

/* Every row against the public draw + apply of its example (bitwise: same code path, same
 * inputs), and padding rows empty. */
static void check_rows(const mpx_det_dataset *ds, const mpx_scenes *sc,
                       const mpx_det_loader_config *cfg, const saved *s, int B) {
    int src = ds ? ds->size : mpx_scenes_config(sc)->size;
    size_t per = (size_t)s->size * s->size * 3;
    float *ref = malloc(per * sizeof *ref);
    uint8_t *img = malloc((size_t)src * src * 3);
    int bad = 0;
    for (int j = 0; j < B; j++) {
        const float *x = s->x + j * per;
        const float *bx = s->boxes + (size_t)j * MAXB * 4;
        const int32_t *lab = s->labels + j * MAXB;
        if (j >= s->n) {
            int empty = s->index[j] == -1 && s->counts[j] == 0;
            for (size_t p = 0; p < per; p++) empty &= x[p] == 0;
            for (int k = 0; k < MAXB; k++) empty &= lab[k] == -1 && bx[4 * k] == 0;
            bad += !empty;
            continue;
        }
        int64_t ex = s->index[j];
        mpx_det_box boxes[MAXB], out[MAXB];
        int count, kept;
        if (ds) {
            memcpy(img, mpx_det_dataset_image(ds, ex), (size_t)src * src * 3);
            count = ds->counts[ex];
            memcpy(boxes, ds->boxes + ex * MAXB, (size_t)count * sizeof *boxes);
        } else {
            CHECK_OK(mpx_scenes_render(sc, ex, img, boxes, &count, NULL));
        }
        mpx_det_augment a;
        CHECK_OK(mpx_det_augment_draw(cfg, src, boxes, count, s->pos.epoch, ex, &a));
        CHECK_OK(mpx_det_augment_apply(cfg, &a, img, src, boxes, count, ref, out, &kept));
        bad += memcmp(ref, x, per * sizeof *ref) != 0 || kept != s->counts[j];
        for (int k = 0; k < MAXB; k++) {
            int on = k < kept;
            bad += lab[k] != (on ? out[k].label : -1) ||
                   s->difficult[j * MAXB + k] != (on ? out[k].difficult : 0) ||
                   bx[4 * k] != (on ? out[k].xmin : 0) || bx[4 * k + 1] != (on ? out[k].ymin : 0) ||
                   bx[4 * k + 2] != (on ? out[k].xmax : 0) ||
                   bx[4 * k + 3] != (on ? out[k].ymax : 0);
        }
    }
    CHECK(bad == 0, "batch (%lld, %lld): %d rows differ from draw + apply", (long long)s->pos.epoch,
          (long long)s->pos.batch, bad);
    free(ref);
    free(img);
}

static void test_dataset(void) {
    mpx_det_dataset ds;
    make_dataset(&ds);
    /* channel statistics against a direct double-precision sum (float results: 1e-6) */
    float mean[3], std[3];
    mpx_det_dataset_channel_stats(&ds, mean, std);
    for (int c = 0; c < 3; c++) {
        double sum = 0, sq = 0, cnt = (double)N * S * S;
        for (size_t p = c; p < (size_t)N * S * S * 3; p += 3) {
            sum += ds.images[p] / 255.0;
            sq += (ds.images[p] / 255.0) * (ds.images[p] / 255.0);
        }
        double m = sum / cnt, sd = sqrt(sq / cnt - m * m);
        CHECK(fabs(mean[c] - m) < 1e-6 && fabs(std[c] - sd) < 1e-6,
              "channel %d stats %g %g, expected %g %g", c, mean[c], std[c], m, sd);
    }
    mpx_det_loader_config cfg = mpx_det_loader_config_train(4, 42);
    cfg.drop_last = 0; /* 3 batches per epoch: 4, 4, 2 */
    cfg.size = 48;
    cfg.photometric = 1;
    cfg.mean[0] = 0.5f;
    cfg.std[0] = 0.25f;
    cfg.mean[2] = 0.2f;
    cfg.std[2] = 2.0f;
    enum { NB = 12 };
    static saved a[NB], b[NB], c[NB], d[NB], r[NB];
    mpx_loader_pos zero = {0, 0};
    run(&ds, NULL, &cfg, zero, NB, a);
    cfg.prefetch = 1;
    run(&ds, NULL, &cfg, zero, NB, b);
    cfg.prefetch = 5;
    cfg.threads = 3;
    run(&ds, NULL, &cfg, zero, NB, c);
    CHECK(same(a, b, NB, 4) && same(a, c, NB, 4), "prefetch depth or threads changed the batches");
    for (int e = 0; e < 4; e++) {
        int seen[N] = {0};
        for (int k = 0; k < 3; k++) {
            const saved *s = &a[3 * e + k];
            CHECK(s->pos.epoch == e && s->pos.batch == k && s->n == (k < 2 ? 4 : 2),
                  "batch %d: position (%lld, %lld), %d examples", 3 * e + k,
                  (long long)s->pos.epoch, (long long)s->pos.batch, s->n);
            for (int j = 0; j < s->n; j++)
                if (s->index[j] >= 0 && s->index[j] < N) seen[s->index[j]]++;
        }
        int once = 1;
        for (int i = 0; i < N; i++) once &= seen[i] == 1;
        CHECK(once, "epoch %d does not hold every example once", e);
    }
    for (int k = 0; k < NB; k++) check_rows(&ds, NULL, &cfg, &a[k], 4);
    int moved = 0;
    for (int k = 0; k < NB; k++)
        for (int j = 0; j < a[k].n; j++)
            moved += a[k].boxes[j * MAXB * 4] != ds.boxes[a[k].index[j] * MAXB].xmin;
    CHECK(moved > 10, "augmentation moved only %d first boxes in 12 batches", moved);

    /* resume after 5 batches */
    mpx_loader_pos at = a[5].pos;
    run(&ds, NULL, &cfg, at, NB - 5, r);
    CHECK(same(a + 5, r, NB - 5, 4), "a loader resumed at (%lld, %lld) differs",
          (long long)at.epoch, (long long)at.batch);
    /* another seed: another order */
    cfg.seed = 43;
    run(&ds, NULL, &cfg, zero, NB, d);
    int differ = 0;
    for (int k = 0; k < NB; k++) differ += memcmp(a[k].index, d[k].index, sizeof a[k].index) != 0;
    CHECK(differ >= NB / 2, "seed 43 repeats the order of seed 42 in %d of %d batches", NB - differ,
          NB);
    free_saved(a, NB);
    free_saved(b, NB);
    free_saved(c, NB);
    free_saved(d, NB);
    free_saved(r, NB - 5);

    /* eval: dataset order, plain normalised images, original boxes, partial last batch */
    mpx_det_loader_config ev = mpx_det_loader_config_eval(4);
    static saved e[3];
    run(&ds, NULL, &ev, zero, 3, e);
    int bad = 0;
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < e[k].n; j++) {
            int64_t i = e[k].index[j];
            bad += i != 4 * k + j || e[k].counts[j] != ds.counts[i];
            for (int p = 0; p < S * S * 3; p++)
                bad += fabsf(e[k].x[(size_t)j * S * S * 3 + p] -
                             ds.images[i * S * S * 3 + p] / 255.0f) > 1e-6f;
            for (int q = 0; q < ds.counts[i]; q++)
                bad += e[k].boxes[(j * MAXB + q) * 4 + 2] != ds.boxes[i * MAXB + q].xmax ||
                       e[k].labels[j * MAXB + q] != ds.boxes[i * MAXB + q].label;
        }
    CHECK(bad == 0 && e[2].n == 2, "eval batches: %d mismatches, last batch %d", bad, e[2].n);
    for (int k = 0; k < 3; k++) check_rows(&ds, NULL, &ev, &e[k], 4);
    free_saved(e, 3);

    /* errors */
    mpx_det_loader *L;
    mpx_det_loader_config bc = mpx_det_loader_config_train(0, 1);
    CHECK(mpx_det_loader_create(&ds, &bc, zero, &L) == MPX_ERR_INPUT, "batch size 0 accepted");
    bc = mpx_det_loader_config_train(11, 1);
    CHECK(mpx_det_loader_create(&ds, &bc, zero, &L) == MPX_ERR_INPUT,
          "drop_last with 10 examples and B = 11 accepted");
    bc = mpx_det_loader_config_train(4, 1);
    mpx_loader_pos past = {0, 2};
    CHECK(mpx_det_loader_create(&ds, &bc, past, &L) == MPX_ERR_INPUT,
          "start batch 2 of 2 accepted");
    bc.size = -1;
    CHECK(mpx_det_loader_create(&ds, &bc, zero, &L) == MPX_ERR_INPUT, "size -1 accepted");
    ds.boxes[3 * MAXB].xmax = 1.5f;
    bc = mpx_det_loader_config_train(4, 1);
    CHECK(mpx_det_loader_create(&ds, &bc, zero, &L) == MPX_ERR_INPUT,
          "a dataset with a box past 1 accepted");
    mpx_det_dataset_free(&ds);
}

static void test_scenes(void) {
    mpx_dataset pool;
    mpx_dataset_alloc(&pool, 20, 16, 16, 3, 4);
    for (int i = 0; i < 20; i++) {
        pool.labels[i] = i % 4;
        for (int p = 0; p < 16 * 16 * 3; p++)
            pool.images[(size_t)i * 768 + p] = (uint8_t)(i * 12 + p);
    }
    mpx_scene_config sc_cfg = mpx_scene_config_default(MPX_SPLIT_TRAIN, 20);
    sc_cfg.size = 64;
    mpx_scenes *sc;
    REQUIRE_VOID(mpx_scenes_create(&pool, &sc_cfg, &sc) == MPX_OK, "%s", mpx_error_message());
    mpx_det_loader_config cfg = mpx_det_loader_config_train(8, 3);
    cfg.size = 40;
    enum { NB = 6 }; /* 2 per epoch */
    static saved a[NB], b[NB], r[NB];
    mpx_loader_pos zero = {0, 0};
    run(NULL, sc, &cfg, zero, NB, a);
    cfg.threads = 2;
    cfg.prefetch = 4;
    run(NULL, sc, &cfg, zero, NB, b);
    CHECK(same(a, b, NB, 8), "scene batches depend on threads / prefetch");
    for (int k = 0; k < NB; k++) check_rows(NULL, sc, &cfg, &a[k], 8);
    run(NULL, sc, &cfg, a[3].pos, NB - 3, r);
    CHECK(same(a + 3, r, NB - 3, 8), "scene loader resumed at (%lld, %lld) differs",
          (long long)a[3].pos.epoch, (long long)a[3].pos.batch);
    free_saved(a, NB);
    free_saved(b, NB);
    free_saved(r, NB - 3);

    mpx_det_loader_config ev = mpx_det_loader_config_eval(8);
    static saved e[3];
    run(NULL, sc, &ev, zero, 3, e);
    CHECK(e[2].n == 4 && e[0].size == 64, "scene eval: last batch %d, size %d", e[2].n, e[0].size);
    for (int k = 0; k < 3; k++) check_rows(NULL, sc, &ev, &e[k], 8);
    free_saved(e, 3);
    mpx_scenes_free(sc);
    mpx_dataset_free(&pool);
}

int main(void) {
    test_dataset();
    test_scenes();
    return mpx_test_done("test_det_loader");
}
