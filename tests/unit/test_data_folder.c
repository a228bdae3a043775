/* test_data_folder.c — the ImageNet-style image folder on a generated tree of small JPEGs:
 * listing (sorted classes and files, shared train/val labels, ignored files), decoding
 * (RGB, grayscale expanded), eval resize + center crop and random-resized-crop geometry, the
 * loader over the folder (decode threads do not change batches), and a corrupt JPEG
 * reaching the caller as MPX_ERR_INPUT naming the file. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/fixtures.h"
#include "mpx/data.h"
#include "testutil.h"

/* Flat colour of image (class k, index i): the resampler keeps flat images flat. */
static void colour(int k, int i, uint8_t rgb[3]) {
    rgb[0] = (uint8_t)(40 + 60 * k);
    rgb[1] = (uint8_t)(200 - 50 * i);
    rgb[2] = (uint8_t)(90 + 20 * k + 10 * i);
}

static void write_flat(const char *path, int h, int w, int k, int i) {
    uint8_t *img = malloc((size_t)h * w * 3), rgb[3];
    colour(k, i, rgb);
    for (int p = 0; p < h * w; p++) memcpy(img + 3 * p, rgb, 3);
    fx_write_jpeg(path, img, h, w, 3, 95);
    free(img);
}

static const char *CLS[3] = {"ant", "cat", "dog"};
/* train: ant 2 images, cat 3, dog 1 (sizes vary); val: cat 1, dog 1 (no ant). */
static const int NTRAIN[3] = {2, 3, 1};
static const int SIZES[3][3][2] = {
    {{40, 30}, {24, 50}}, {{33, 33}, {20, 64}, {48, 20}}, {{30, 40}}};

static void make_tree(const char *root) {
    char p[1400];
    for (int s = 0; s < 2; s++) {
        snprintf(p, sizeof p, "%s/%s", root, s ? "val" : "train");
        mkdir(root, 0755);
        mkdir(p, 0755);
        for (int k = 0; k < 3; k++) {
            if (s == 1 && k == 0) continue;
            snprintf(p, sizeof p, "%s/%s/%s", root, s ? "val" : "train", CLS[k]);
            mkdir(p, 0755);
            int n = s ? 1 : NTRAIN[k];
            /* file names written in reverse so listing must sort; extensions vary in case */
            for (int i = n - 1; i >= 0; i--) {
                snprintf(p, sizeof p, "%s/%s/%s/img_%d.%s", root, s ? "val" : "train", CLS[k], i,
                         i == 1 ? "JPEG" : "jpg");
                write_flat(p, SIZES[k][i][0], SIZES[k][i][1], k, i);
            }
        }
    }
    /* ignored: a text file, a hidden file, a stray file at class level */
    snprintf(p, sizeof p, "%s/train/cat/notes.txt", root);
    fx_write_file(p, "x", 1);
    snprintf(p, sizeof p, "%s/train/cat/.hidden.jpg", root);
    fx_write_file(p, "x", 1);
    snprintf(p, sizeof p, "%s/train/README", root);
    fx_write_file(p, "x", 1);
    /* a grayscale image in val/dog replaces the colour one */
    uint8_t gray[12 * 16];
    memset(gray, 99, sizeof gray);
    snprintf(p, sizeof p, "%s/val/dog/img_0.jpg", root);
    fx_write_jpeg(p, gray, 12, 16, 1, 95);
}

static void test_listing(const char *root) {
    mpx_image_folder *f;
    CHECK_OK(mpx_image_folder_open(root, "train", &f));
    if (!f) return;
    CHECK(mpx_image_folder_count(f) == 6 && mpx_image_folder_num_classes(f) == 3,
          "train: %lld images, %d classes", (long long)mpx_image_folder_count(f),
          mpx_image_folder_num_classes(f));
    for (int k = 0; k < 3; k++)
        CHECK(strcmp(mpx_image_folder_class_name(f, k), CLS[k]) == 0, "class %d = %s", k,
              mpx_image_folder_class_name(f, k));
    const char *want[6] = {"ant/img_0.jpg",  "ant/img_1.JPEG", "cat/img_0.jpg",
                           "cat/img_1.JPEG", "cat/img_2.jpg",  "dog/img_0.jpg"};
    const int wl[6] = {0, 0, 1, 1, 1, 2};
    uint8_t *buf = NULL;
    size_t cap = 0;
    for (int i = 0; i < 6 && i < mpx_image_folder_count(f); i++) {
        char path[2300], tail[200];
        mpx_image_folder_path(f, i, path, sizeof path);
        snprintf(tail, sizeof tail, "/train/%s", want[i]);
        CHECK(strlen(path) > strlen(tail) && strcmp(path + strlen(path) - strlen(tail), tail) == 0,
              "file %d is %s, want ...%s", i, path, tail);
        CHECK(mpx_image_folder_label(f, i) == wl[i], "file %d label %d", i,
              mpx_image_folder_label(f, i));
        /* decoded size and colour (quality-95 JPEG of a flat image: within 3 levels) */
        int h, w, k = wl[i], idx = want[i][8] - '0';
        CHECK_OK(mpx_image_folder_decode(f, i, &buf, &cap, &h, &w));
        CHECK(h == SIZES[k][idx][0] && w == SIZES[k][idx][1], "file %d decoded %dx%d", i, h, w);
        uint8_t rgb[3];
        colour(k, idx, rgb);
        int off = 0;
        for (int p = 0; p < h * w; p++)
            for (int c = 0; c < 3; c++) off += abs(buf[3 * p + c] - rgb[c]) > 3;
        CHECK(off == 0, "file %d: %d values off its colour", i, off);
    }
    mpx_image_folder_free(f);

    CHECK_OK(mpx_image_folder_open(root, "val", &f));
    if (f) {
        CHECK(mpx_image_folder_count(f) == 2 && mpx_image_folder_num_classes(f) == 3,
              "val: %lld images", (long long)mpx_image_folder_count(f));
        CHECK(mpx_image_folder_label(f, 0) == 1 && mpx_image_folder_label(f, 1) == 2,
              "val labels follow train's classes: %d %d", mpx_image_folder_label(f, 0),
              mpx_image_folder_label(f, 1));
        int h, w;
        CHECK_OK(mpx_image_folder_decode(f, 1, &buf, &cap, &h, &w));
        int off = 0;
        for (int p = 0; p < h * w * 3; p++) off += abs(buf[p] - 99) > 2;
        CHECK(h == 12 && w == 16 && off == 0, "grayscale decoded as RGB 99s: %dx%d, %d off", h, w,
              off);
        mpx_image_folder_free(f);
    }
    free(buf);

    char p[1400];
    snprintf(p, sizeof p, "%s/val/zebra", root);
    mkdir(p, 0755);
    CHECK(mpx_image_folder_open(root, "val", &f) == MPX_ERR_INPUT &&
              strstr(mpx_error_message(), "zebra"),
          "a val class unknown to train: %s", mpx_error_message());
    rmdir(p);
    CHECK(mpx_image_folder_open(root, "test", &f) == MPX_ERR_INPUT &&
              strstr(mpx_error_message(), "test"),
          "missing split: %s", mpx_error_message());
}

static void test_geometry(void) {
    /* Eval: shorter side to resize (default out * 8/7), centred out x out window. */
    mpx_loader_config cfg = mpx_loader_config_eval(2);
    cfg.out_h = cfg.out_w = 14; /* resize 16 */
    mpx_augment a;
    CHECK_OK(mpx_loader_augment(&cfg, 40, 80, 0, 0, &a));
    /* scale 16/40 = 0.4: the window is 14/0.4 = 35 source pixels, centred */
    CHECK(a.resample && !a.flip && fabs(a.box_w - 35) < 1e-9 && fabs(a.box_h - 35) < 1e-9 &&
              fabs(a.box_x - 22.5) < 1e-9 && fabs(a.box_y - 2.5) < 1e-9,
          "eval box %g %g %g %g", a.box_x, a.box_y, a.box_w, a.box_h);

    /* Random-resized-crop: inside the image, area fraction in [0.08, 1] and aspect in
     * [3/4, 4/3] up to the rounding of the box sides to whole pixels. */
    cfg = mpx_loader_config_train(2, 5);
    cfg.out_h = cfg.out_w = 16;
    cfg.random_resized_crop = 1;
    cfg.flip = 1;
    int bad = 0, flips = 0;
    for (int i = 0; i < 3000; i++) {
        int h = 20 + i % 37, w = 15 + (i * 7) % 53;
        CHECK_OK(mpx_loader_augment(&cfg, h, w, i / 100, i, &a));
        flips += a.flip;
        double frac = a.box_w * a.box_h / ((double)h * w), ratio = a.box_w / a.box_h;
        /* sides are rounded to whole pixels: relative error up to 0.5/w + 0.5/h, doubled */
        double tol = 1.0 / a.box_w + 1.0 / a.box_h;
        bad += a.box_x < 0 || a.box_y < 0 || a.box_x + a.box_w > w || a.box_y + a.box_h > h;
        bad += frac > 1 + 1e-9 || frac < 0.08 * (1 - tol);
        bad += ratio < 0.75 * (1 - tol) || ratio > 4.0 / 3 * (1 + tol);
    }
    CHECK(bad == 0, "%d random-resized-crop boxes outside their constraints", bad);
    CHECK(abs(flips - 1500) < 6 * 28, "%d flips in 3000 draws", flips);
    /* A 4x100 strip: no attempt fits, the fallback is a centred box with aspect 4/3 at most. */
    CHECK_OK(mpx_loader_augment(&cfg, 4, 100, 0, 0, &a));
    CHECK(a.box_h == 4 && a.box_w == 5 && a.box_x == 47 && a.box_y == 0, "fallback box %g %g %g %g",
          a.box_x, a.box_y, a.box_w, a.box_h);
}

static void test_loader(const char *root) {
    mpx_image_folder *f;
    CHECK_OK(mpx_image_folder_open(root, "train", &f));
    if (!f) return;
    /* Eval over flat images: every output pixel is the image colour (within 3 levels of
     * JPEG error), normalised; order = folder order; the last batch holds 2 of 4. */
    mpx_loader_config cfg = mpx_loader_config_eval(4);
    cfg.out_h = cfg.out_w = 8;
    for (int c = 0; c < 3; c++) {
        cfg.mean[c] = 0.5f;
        cfg.std[c] = 0.25f;
    }
    mpx_loader *L;
    mpx_loader_pos zero = {0, 0};
    CHECK_OK(mpx_loader_create_folder(f, &cfg, zero, &L));
    const int wl[6] = {0, 0, 1, 1, 1, 2}, wi[6] = {0, 1, 0, 1, 2, 0};
    for (int b = 0; L && b < 2; b++) {
        mpx_batch batch;
        CHECK_OK(mpx_loader_next(L, &batch));
        CHECK(batch.n == (b ? 2 : 4) && batch.h == 8 && batch.w == 8 && batch.c == 3,
              "folder batch %d: n %d", b, batch.n);
        double worst = 0;
        for (int j = 0; j < batch.n; j++) {
            int e = 4 * b + j;
            CHECK(batch.y[j] == wl[e], "folder batch %d row %d label %d", b, j, batch.y[j]);
            uint8_t rgb[3];
            colour(wl[e], wi[e], rgb);
            for (int p = 0; p < 64; p++)
                for (int c = 0; c < 3; c++) {
                    double want = (rgb[c] / 255.0 - 0.5) / 0.25;
                    worst = fmax(worst, fabs(batch.x[((size_t)j * 64 + p) * 3 + c] - want));
                }
        }
        CHECK(worst < 3.0 / 255 / 0.25 + 1e-5, "folder batch %d off its colours by %g", b, worst);
    }
    mpx_loader_free(L);

    /* Training with random-resized-crop + flip: 1 vs 3 decode threads give identical batches. */
    cfg = mpx_loader_config_train(3, 9);
    cfg.out_h = cfg.out_w = 12;
    cfg.random_resized_crop = 1;
    cfg.flip = 1;
    float *x1 = malloc(4 * 3 * 12 * 12 * 3 * sizeof(float)),
          *x3 = malloc(4 * 3 * 12 * 12 * 3 * sizeof(float));
    int32_t y1[12], y3[12];
    for (int t = 1; t <= 3; t += 2) {
        cfg.threads = t;
        CHECK_OK(mpx_loader_create_folder(f, &cfg, zero, &L));
        for (int b = 0; L && b < 4; b++) {
            mpx_batch batch;
            CHECK_OK(mpx_loader_next(L, &batch));
            memcpy((t == 1 ? x1 : x3) + (size_t)b * 3 * 432, batch.x, 3 * 432 * sizeof(float));
            memcpy((t == 1 ? y1 : y3) + b * 3, batch.y, 3 * sizeof(int32_t));
        }
        mpx_loader_free(L);
    }
    CHECK(memcmp(x1, x3, 4 * 3 * 432 * sizeof(float)) == 0 && memcmp(y1, y3, sizeof y1) == 0,
          "decode threads changed the batches");
    free(x1);
    free(x3);

    /* A corrupt JPEG: the batch holding it fails with the file named, and keeps failing. */
    char p[1400];
    snprintf(p, sizeof p, "%s/train/dog/img_0.jpg", root);
    fx_write_file(p, "\xff\xd8\xff\xe0 not really a jpeg", 22);
    cfg = mpx_loader_config_eval(4);
    cfg.out_h = cfg.out_w = 8;
    CHECK_OK(mpx_loader_create_folder(f, &cfg, zero, &L));
    if (L) {
        mpx_batch batch;
        CHECK_OK(mpx_loader_next(L, &batch));
        for (int k = 0; k < 2; k++) {
            mpx_status st = mpx_loader_next(L, &batch);
            CHECK(st == MPX_ERR_INPUT && strstr(mpx_error_message(), "dog/img_0.jpg") &&
                      strstr(mpx_error_message(), "epoch 0 batch 1"),
                  "corrupt JPEG, call %d: %s %s", k, mpx_status_name(st), mpx_error_message());
        }
        mpx_loader_free(L);
    }
    /* Image folders need an output size and cannot pad-crop (sizes vary). */
    cfg = mpx_loader_config_train(2, 1);
    CHECK(mpx_loader_create_folder(f, &cfg, zero, &L) == MPX_ERR_INPUT,
          "folder without output size accepted");
    cfg.out_h = cfg.out_w = 8;
    cfg.pad = 2;
    CHECK(mpx_loader_create_folder(f, &cfg, zero, &L) == MPX_ERR_INPUT,
          "folder with pad-crop accepted");
    mpx_image_folder_free(f);
}

int main(void) {
    char tmp[1024], root[1100];
    REQUIRE(mpx_test_tmpdir("data_folder", tmp, sizeof tmp)[0], "no temp dir");
    snprintf(root, sizeof root, "%s/imagenet", tmp);
    make_tree(root);
    test_listing(root);
    test_geometry();
    test_loader(root);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return mpx_test_done(__FILE__);
}
