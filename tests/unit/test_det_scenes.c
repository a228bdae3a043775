/* test_det_scenes.c — procedural scenes.
 *   - Exactness with a pool of constant-colour objects: every visible pixel of object k (the
 *     owner map is rebuilt here from the layout, in paint order) has exactly k's colour, the
 *     background just outside each box edge does not, and each box is the pasted rectangle
 *     clipped to the scene; the IoU, visibility, count, scale, aspect and order rules hold.
 *   - Pixels come from the pasted image: with random-noise objects (RGB) and real
 *     Fashion-MNIST items (grey), upscaled pastes match an independent bilinear reference.
 *   - Determinism: a scene renders the same alone, after others, in a parallel batch
 *     (mpx_scenes_render_dataset); another seed renders another scene.
 *   - Configuration errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/detect.h"
#include "mpx/rng.h"
#include "testutil.h"

static void colour_of(int i, uint8_t c[3]) {
    c[0] = (uint8_t)(20 + 23 * i);
    c[1] = (uint8_t)(250 - 19 * i);
    c[2] = (uint8_t)(61 + 17 * i);
}

static void make_constant_pool(mpx_dataset *pool) {
    mpx_dataset_alloc(pool, 10, 32, 32, 3, 10);
    for (int i = 0; i < 10; i++) {
        uint8_t c[3];
        colour_of(i, c);
        pool->labels[i] = 9 - i;
        for (int p = 0; p < 32 * 32; p++) memcpy(pool->images + ((size_t)i * 1024 + p) * 3, c, 3);
    }
}

/* owner[y * S + x]: index (paint order) of the topmost object, -1 for background. */
static void owners(const mpx_scene_layout *L, int S, int *owner) {
    for (int p = 0; p < S * S; p++) owner[p] = -1;
    for (int k = 0; k < L->count; k++) {
        const mpx_scene_object *o = &L->objects[k];
        for (int y = o->y; y < o->y + o->h; y++)
            for (int x = o->x; x < o->x + o->w; x++)
                if (x >= 0 && y >= 0 && x < S && y < S) owner[y * S + x] = k;
    }
}

static void test_exactness(void) {
    mpx_dataset pool;
    make_constant_pool(&pool);
    mpx_scene_config cfg = mpx_scene_config_default(MPX_SPLIT_TRAIN, 300);
    mpx_scenes *sc;
    CHECK_OK(mpx_scenes_create(&pool, &cfg, &sc));
    enum { S = 128 };
    static uint8_t img[S * S * 3];
    static int owner[S * S];
    mpx_det_box boxes[MPX_DET_MAX_BOXES];
    mpx_scene_layout L;
    int kinds[4] = {0}, counts[MPX_DET_MAX_BOXES + 1] = {0}, classes[10] = {0};
    int bad_pixels = 0, loose_edges = 0, bad_boxes = 0, bad_rules = 0, clipped = 0;
    for (int64_t s = 0; s < cfg.n; s++) {
        int n;
        CHECK_OK(mpx_scenes_render(sc, s, img, boxes, &n, &L));
        kinds[L.background]++;
        counts[n]++;
        bad_rules += n != L.count || n < 1 || n > 6;
        owners(&L, S, owner);
        for (int k = 0; k < n; k++) {
            const mpx_scene_object *o = &L.objects[k];
            int x0 = o->x < 0 ? 0 : o->x, y0 = o->y < 0 ? 0 : o->y;
            int x1 = o->x + o->w > S ? S : o->x + o->w, y1 = o->y + o->h > S ? S : o->y + o->h;
            clipped += x0 != o->x || y0 != o->y || x1 != o->x + o->w || y1 != o->y + o->h;
            classes[boxes[k].label]++;
            bad_boxes += boxes[k].xmin != (float)x0 / S || boxes[k].ymin != (float)y0 / S ||
                         boxes[k].xmax != (float)x1 / S || boxes[k].ymax != (float)y1 / S ||
                         boxes[k].label != pool.labels[o->source] || o->label != boxes[k].label ||
                         boxes[k].difficult != 0;
            /* rules: scale, aspect (rounding to whole pixels allowed), paint order, IoU */
            double side = sqrt((double)o->w * o->h) / S, aspect = (double)o->w / o->h;
            bad_rules += side < 0.15 - 1.0 / S || side > 0.6 + 1.0 / S;
            bad_rules += aspect < 0.5 * (1 - 2.0 / o->h) || aspect > 2 * (1 + 2.0 / o->h);
            if (k > 0)
                bad_rules +=
                    (int64_t)o->w * o->h > (int64_t)L.objects[k - 1].w * L.objects[k - 1].h;
            for (int j = 0; j < k; j++) bad_rules += mpx_det_iou(&boxes[j], &boxes[k]) >= 0.5;
            /* pixels: visible ones exactly the object's colour; at least min_visible of them */
            uint8_t c[3];
            colour_of((int)o->source, c);
            int visible = 0;
            for (int y = y0; y < y1; y++)
                for (int x = x0; x < x1; x++)
                    if (owner[y * S + x] == k) {
                        visible++;
                        bad_pixels += memcmp(img + (y * S + x) * 3, c, 3) != 0;
                    }
            bad_rules += visible < 0.5 * (x1 - x0) * (y1 - y0);
            /* tightness: the background line just outside each edge is not all this colour
             * (except on magnified-crop backgrounds: with this pool they are pool colours) */
            int lines[4][4] = {{x0, y0 - 1, x1, y0},
                               {x0, y1, x1, y1 + 1},
                               {x0 - 1, y0, x0, y1},
                               {x1, y0, x1 + 1, y1}};
            for (int e = 0; e < 4; e++) {
                int bg = 0, same = 0;
                for (int y = lines[e][1]; y < lines[e][3]; y++)
                    for (int x = lines[e][0]; x < lines[e][2]; x++) {
                        if (x < 0 || y < 0 || x >= S || y >= S || owner[y * S + x] != -1) continue;
                        bg++;
                        same += memcmp(img + (y * S + x) * 3, c, 3) == 0;
                    }
                loose_edges += L.background != 3 && bg > 2 && same == bg;
            }
        }
    }
    CHECK(bad_pixels == 0, "%d visible object pixels differ from the pasted colour", bad_pixels);
    CHECK(loose_edges == 0, "%d box edges have the object's colour just outside", loose_edges);
    CHECK(bad_boxes == 0, "%d boxes are not the clipped pasted rectangle", bad_boxes);
    CHECK(bad_rules == 0, "%d violations of the count/scale/aspect/order/IoU/visibility rules",
          bad_rules);
    for (int k = 0; k < 4; k++)
        CHECK(kinds[k] > 30, "background kind %d in %d of 300 scenes", k, kinds[k]);
    for (int k = 1; k <= 6; k++) CHECK(counts[k] > 5, "%d scenes with %d objects", counts[k], k);
    for (int k = 0; k < 10; k++) CHECK(classes[k] > 20, "class %d has %d boxes", k, classes[k]);
    CHECK(clipped > 20, "only %d objects reach past the scene edge", clipped);
    printf("300 scenes: objects per scene 1..6: %d %d %d %d %d %d; %d clipped objects\n", counts[1],
           counts[2], counts[3], counts[4], counts[5], counts[6], clipped);

    /* determinism: alone, after others, in a parallel batch; another seed differs */
    static uint8_t again[S * S * 3];
    mpx_det_box b2[MPX_DET_MAX_BOXES];
    int n1, n2;
    CHECK_OK(mpx_scenes_render(sc, 17, img, boxes, &n1, NULL));
    CHECK_OK(mpx_scenes_render(sc, 290, again, b2, &n2, NULL));
    CHECK_OK(mpx_scenes_render(sc, 17, again, b2, &n2, NULL));
    CHECK(n1 == n2 && memcmp(img, again, sizeof img) == 0 &&
              memcmp(boxes, b2, (size_t)n1 * sizeof *boxes) == 0,
          "scene 17 renders differently the second time");
    mpx_det_dataset all;
    CHECK_OK(mpx_scenes_render_dataset(sc, &all));
    CHECK(all.n == cfg.n && all.size == S && all.num_classes == 10 &&
              strcmp(all.ids[17], "scene-17") == 0 && strcmp(all.class_names[3], "3") == 0,
          "rendered dataset shape");
    CHECK(memcmp(mpx_det_dataset_image(&all, 17), img, sizeof img) == 0 && all.counts[17] == n1 &&
              memcmp(all.boxes + 17 * MPX_DET_MAX_BOXES, boxes, (size_t)n1 * sizeof *boxes) == 0,
          "the parallel rendering of scene 17 differs");
    CHECK_OK(mpx_det_dataset_validate(&all, "scenes"));
    mpx_det_dataset_free(&all);
    mpx_scenes *other;
    cfg.seed = 99;
    CHECK_OK(mpx_scenes_create(&pool, &cfg, &other));
    CHECK_OK(mpx_scenes_render(other, 17, again, b2, &n2, NULL));
    CHECK(memcmp(img, again, sizeof img) != 0, "seed 99 renders the same scene 17 as seed 1");
    mpx_scenes_free(other);

    /* errors */
    CHECK(mpx_scenes_render(sc, cfg.n, img, boxes, &n1, NULL) == MPX_ERR_INPUT, "index n accepted");
    CHECK(mpx_scenes_render(sc, -1, img, boxes, &n1, NULL) == MPX_ERR_INPUT, "index -1 accepted");
    mpx_scene_config bad = mpx_scene_config_default(MPX_SPLIT_TEST, 10);
    bad.max_objects = MPX_DET_MAX_BOXES + 1;
    CHECK(mpx_scenes_create(&pool, &bad, &other) == MPX_ERR_INPUT, "65 objects accepted");
    bad = mpx_scene_config_default(MPX_SPLIT_TEST, 10);
    bad.scale_min = 0;
    CHECK(mpx_scenes_create(&pool, &bad, &other) == MPX_ERR_INPUT, "scale 0 accepted");
    bad = mpx_scene_config_default(MPX_SPLIT_TEST, 0);
    CHECK(mpx_scenes_create(&pool, &bad, &other) == MPX_ERR_INPUT, "0 scenes accepted");
    mpx_dataset two;
    mpx_dataset_alloc(&two, 3, 8, 8, 2, 2);
    bad = mpx_scene_config_default(MPX_SPLIT_TEST, 10);
    CHECK(mpx_scenes_create(&two, &bad, &other) == MPX_ERR_INPUT, "2-channel pool accepted");
    mpx_dataset_free(&two);
    mpx_scenes_free(sc);
    mpx_dataset_free(&pool);
}

/* Bilinear interpolation of src[h, w, c] channel ch at pixel-centre-aligned position
 * (u, v) in source pixels, edges clamped: the upscaling reference. */
static double bilinear(const uint8_t *src, int h, int w, int c, int ch, double u, double v) {
    double fx = u - 0.5, fy = v - 0.5;
    int x0 = (int)floor(fx), y0 = (int)floor(fy);
    double tx = fx - x0, ty = fy - y0, acc = 0;
    for (int dy = 0; dy < 2; dy++)
        for (int dx = 0; dx < 2; dx++) {
            int x = x0 + dx < 0 ? 0 : x0 + dx >= w ? w - 1 : x0 + dx;
            int y = y0 + dy < 0 ? 0 : y0 + dy >= h ? h - 1 : y0 + dy;
            acc += (dx ? tx : 1 - tx) * (dy ? ty : 1 - ty) * src[((size_t)y * w + x) * c + ch];
        }
    return acc;
}

/* Visible pixels of every object against the reference; objects are at least 36 px, so the
 * 32 / 28 px pool images are upscaled. Pixels are rounded to bytes, so they may be 0.5 from
 * the exact value, plus float accumulation (< 1e-3 for 4 taps of values <= 255). */
static void check_sources(const mpx_dataset *pool, const char *what) {
    enum { S = 256 };
    mpx_scene_config cfg = mpx_scene_config_default(MPX_SPLIT_TEST, 40);
    cfg.size = S;
    cfg.scale_min = 0.2f; /* sqrt(w h) >= 51 px, w, h >= 51 / sqrt(2) > 36 px */
    cfg.scale_max = 0.45f;
    mpx_scenes *sc;
    REQUIRE_VOID(mpx_scenes_create(pool, &cfg, &sc) == MPX_OK, "%s: %s", what, mpx_error_message());
    static uint8_t img[S * S * 3];
    static int owner[S * S];
    mpx_det_box boxes[MPX_DET_MAX_BOXES];
    mpx_scene_layout L;
    double worst = 0;
    int64_t checked = 0, grey_bad = 0;
    for (int64_t s = 0; s < cfg.n; s++) {
        int n;
        CHECK_OK(mpx_scenes_render(sc, s, img, boxes, &n, &L));
        owners(&L, S, owner);
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                int k = owner[y * S + x];
                if (k < 0) continue;
                const mpx_scene_object *o = &L.objects[k];
                const uint8_t *src = pool->images + (size_t)o->source * pool->h * pool->w * pool->c;
                double u = (x - o->x + 0.5) * pool->w / o->w, v = (y - o->y + 0.5) * pool->h / o->h;
                const uint8_t *p = img + ((size_t)y * S + x) * 3;
                for (int ch = 0; ch < 3; ch++) {
                    double want =
                        bilinear(src, pool->h, pool->w, pool->c, pool->c == 3 ? ch : 0, u, v);
                    worst = fmax(worst, fabs(p[ch] - want));
                }
                if (pool->c == 1) grey_bad += p[0] != p[1] || p[1] != p[2];
                checked++;
            }
    }
    CHECK(worst <= 0.501, "%s: pasted pixels differ from bilinear upscaling by %.3f levels", what,
          worst);
    CHECK(grey_bad == 0, "%s: %lld grey objects are not grey", what, (long long)grey_bad);
    CHECK(checked > 100000, "%s: only %lld object pixels checked", what, (long long)checked);
    printf("%s: %lld object pixels within %.3f levels of bilinear upscaling\n", what,
           (long long)checked, worst);
    mpx_scenes_free(sc);
}

int main(void) {
    test_exactness();
    mpx_dataset noise;
    mpx_dataset_alloc(&noise, 50, 32, 32, 3, 10);
    mpx_rng r = mpx_rng_make(5, MPX_RNG_TEST, 0);
    for (size_t i = 0; i < (size_t)50 * 32 * 32 * 3; i++)
        noise.images[i] = (uint8_t)mpx_rng_u32(&r);
    for (int i = 0; i < 50; i++) noise.labels[i] = i % 10;
    check_sources(&noise, "random RGB objects");
    mpx_dataset_free(&noise);
    mpx_dataset fashion;
    if (mpx_fashion_mnist_load(NULL, MPX_SPLIT_TEST, &fashion) == MPX_OK) {
        check_sources(&fashion, "Fashion-MNIST test items");
        mpx_dataset_free(&fashion);
    } else {
        printf("Fashion-MNIST not installed: grey pool check skipped (%s)\n", mpx_error_message());
    }
    return mpx_test_done("test_det_scenes");
}
