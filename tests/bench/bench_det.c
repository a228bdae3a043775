/* bench_det.c — detection data speed: procedural scene generation with the real CIFAR-10
 * training images as objects (1 and all threads), the scene loader with SSD augmentation,
 * and the raccoon VOC load. With an argument, also writes a 4 x 4 grid of augmented
 * training examples with their boxes drawn (binary PPM) to that path, for a look. */
#include <stdlib.h>
#include <string.h>

#include "mpx/detect.h"
#include "mpx/runtime.h"
#include "testutil.h"

/* Draw a box outline (colour by class) into a [S, S, 3] image. */
static void draw_box(uint8_t *img, int S, const float *b, int label) {
    int x0 = (int)(b[0] * S), y0 = (int)(b[1] * S), x1 = (int)(b[2] * S) - 1,
        y1 = (int)(b[3] * S) - 1;
    uint8_t c[3] = {(uint8_t)(255 * (label % 2)), (uint8_t)(255 * (label / 2 % 2)), 255};
    for (int x = x0; x <= x1; x++)
        for (int e = 0; e < 2; e++) {
            int y = e ? y1 : y0;
            if (x >= 0 && x < S && y >= 0 && y < S) memcpy(img + (y * S + x) * 3, c, 3);
        }
    for (int y = y0; y <= y1; y++)
        for (int e = 0; e < 2; e++) {
            int x = e ? x1 : x0;
            if (x >= 0 && x < S && y >= 0 && y < S) memcpy(img + (y * S + x) * 3, c, 3);
        }
}

static void write_grid(const char *path, const mpx_det_batch *b) {
    int S = b->size, G = 4;
    uint8_t *grid = calloc((size_t)G * S * G * S * 3, 1), *tile = malloc((size_t)S * S * 3);
    for (int t = 0; t < G * G && t < b->n; t++) {
        for (int p = 0; p < S * S * 3; p++) {
            float v = b->x[(size_t)t * S * S * 3 + p] * 255.0f + 0.5f;
            tile[p] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
        for (int k = 0; k < b->counts[t]; k++)
            draw_box(tile, S, b->boxes + ((size_t)t * MPX_DET_MAX_BOXES + k) * 4,
                     b->labels[t * MPX_DET_MAX_BOXES + k]);
        for (int y = 0; y < S; y++)
            memcpy(grid + (((size_t)(t / G) * S + y) * G * S + (size_t)(t % G) * S) * 3,
                   tile + (size_t)y * S * 3, (size_t)S * 3);
    }
    FILE *f = fopen(path, "wb");
    if (f) {
        fprintf(f, "P6\n%d %d\n255\n", G * S, G * S);
        fwrite(grid, 1, (size_t)G * S * G * S * 3, f);
        fclose(f);
    }
    free(grid);
    free(tile);
}

int main(int argc, char **argv) {
    mpx_cifar10_opts co = {.progress = 1};
    mpx_dataset cifar;
    REQUIRE(mpx_cifar10_load(&co, MPX_SPLIT_TRAIN, &cifar, NULL) == MPX_OK, "CIFAR-10: %s",
            mpx_error_message());
    mpx_scene_config cfg = mpx_scene_config_default(MPX_SPLIT_TRAIN, 4000);
    mpx_scenes *sc;
    REQUIRE(mpx_scenes_create(&cifar, &cfg, &sc) == MPX_OK, "%s", mpx_error_message());
    int threads = mpx_threads_get();
    uint8_t *img = malloc((size_t)cfg.size * cfg.size * 3);
    mpx_det_box boxes[MPX_DET_MAX_BOXES];
    int64_t objects = 0;
    double t0 = mpx_now();
    for (int64_t i = 0; i < 1000; i++) {
        int n;
        mpx_scenes_render(sc, i, img, boxes, &n, NULL);
        objects += n;
    }
    double one = 1000 / (mpx_now() - t0);
    mpx_det_dataset all;
    t0 = mpx_now();
    CHECK_OK(mpx_scenes_render_dataset(sc, &all));
    double many = cfg.n / (mpx_now() - t0);
    printf(
        "scenes %dx%d (CIFAR-10 train objects, %.2f per scene): %.0f scenes/s on 1 thread, "
        "%.0f scenes/s on %d threads\n",
        cfg.size, cfg.size, objects / 1000.0, one, many, threads);
    mpx_det_dataset_free(&all);

    mpx_det_loader_config lc = mpx_det_loader_config_train(32, 1);
    lc.photometric = 1;
    lc.threads = threads;
    for (int c = 0; c < 3; c++) lc.std[c] = 1;
    mpx_det_loader *L;
    mpx_loader_pos zero = {0, 0};
    REQUIRE(mpx_det_loader_create_scenes(sc, &lc, zero, &L) == MPX_OK, "%s", mpx_error_message());
    mpx_det_batch b;
    CHECK_OK(mpx_det_loader_next(L, &b));
    if (argc > 1) write_grid(argv[1], &b);
    t0 = mpx_now();
    for (int k = 0; k < 40; k++) CHECK_OK(mpx_det_loader_next(L, &b));
    printf(
        "scene loader B=32 %dx%d, photometric + expand + crop + flip, %d threads: %.0f "
        "examples/s\n",
        b.size, b.size, threads, 40 * 32 / (mpx_now() - t0));
    mpx_det_loader_free(L);

    char archive[1200];
    mpx_test_source_path("../shared/data/raccoon-voc.tar.gz", archive, sizeof archive);
    mpx_voc_opts vo = {.size = 300};
    mpx_voc_info info;
    mpx_det_dataset rac;
    if (mpx_voc_load(archive, MPX_SPLIT_TRAIN, &vo, &rac, &info) == MPX_OK) {
        printf(
            "raccoon train split (%lld JPEGs decoded and resized to 300x300): %.2f s on %d "
            "threads\n",
            (long long)rac.n, info.load_s, threads);
        mpx_det_dataset_free(&rac);
    }
    free(img);
    mpx_scenes_free(sc);
    mpx_dataset_free(&cifar);
    return mpx_test_done("bench_det");
}
