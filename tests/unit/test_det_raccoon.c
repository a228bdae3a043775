/* test_det_raccoon.c — the real ../shared/data/raccoon-voc.tar.gz: 200 images, 217 boxes, one
 * class; train 160 images / 173 boxes and test 40 / 44 per the CSVs. Every loaded box is
 * compared with the CSV rows read independently (the archive extracted with tar(1) and the
 * CSV parsed here), the directory and the archive must load identically, and decoded pixels
 * are checked against libjpeg directly. Skipped (77) when the archive is not there. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/fixtures.h"
#include "mpx/detect.h"
#include "mpx/runtime.h"
#include "testutil.h"

/* Every row of `csv` (filename,width,height,class,xmin,ymin,xmax,ymax) must be a box of the
 * image with that stem: ((xmin - 1) / w, (ymin - 1) / h, xmax / w, ymax / h) in VOC's 1-based
 * convention. Returns the number of rows. Tolerance: the loader divides in double and rounds
 * to float, so the two agree to float rounding (< 1e-7 for values <= 1). */
static int check_csv(const char *csv, const mpx_det_dataset *ds) {
    FILE *f = fopen(csv, "r");
    if (!f) {
        CHECK(0, "cannot open %s", csv);
        return 0;
    }
    char line[512];
    int rows = 0, matched = 0;
    int *used = calloc((size_t)ds->n * MPX_DET_MAX_BOXES, sizeof *used);
    CHECK(fgets(line, sizeof line, f) != NULL, "empty %s", csv);
    while (fgets(line, sizeof line, f)) {
        char name[256], cls[64];
        int w, h, x0, y0, x1, y1;
        if (sscanf(line, "%255[^,],%d,%d,%63[^,],%d,%d,%d,%d", name, &w, &h, cls, &x0, &y0, &x1,
                   &y1) != 8)
            continue;
        rows++;
        char *dot = strrchr(name, '.');
        if (dot) *dot = '\0';
        for (int64_t i = 0; i < ds->n; i++) {
            if (strcmp(ds->ids[i], name) != 0) continue;
            for (int k = 0; k < ds->counts[i]; k++) {
                const mpx_det_box *b = &ds->boxes[i * MPX_DET_MAX_BOXES + k];
                if (used[i * MPX_DET_MAX_BOXES + k] || b->label != 0) continue;
                if (fabs(b->xmin - (x0 - 1.0) / w) < 1e-7 &&
                    fabs(b->ymin - (y0 - 1.0) / h) < 1e-7 &&
                    fabs(b->xmax - (double)x1 / w) < 1e-7 &&
                    fabs(b->ymax - (double)y1 / h) < 1e-7) {
                    used[i * MPX_DET_MAX_BOXES + k] = 1;
                    matched++;
                    break;
                }
            }
        }
    }
    fclose(f);
    free(used);
    CHECK(matched == rows, "%s: %d of %d rows match a loaded box", csv, matched, rows);
    return rows;
}

static int64_t total_boxes(const mpx_det_dataset *ds) {
    int64_t t = 0;
    for (int64_t i = 0; i < ds->n; i++) t += ds->counts[i];
    return t;
}

/* Decode the image straight with libjpeg and compare channel means with the loaded (resized)
 * image: resampling with normalised filter weights preserves the mean up to edge effects
 * and rounding, well under 1.5 grey levels on these photos. */
static void check_pixels(const char *dir, const mpx_det_dataset *ds, int64_t i) {
    char path[1200];
    snprintf(path, sizeof path, "%s/raccoon/images/%s.jpg", dir, ds->ids[i]);
    FILE *f = fopen(path, "rb");
    REQUIRE_VOID(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *jpg = malloc((size_t)n);
    REQUIRE_VOID(fread(jpg, 1, (size_t)n, f) == (size_t)n, "short read %s", path);
    fclose(f);
    int h, w;
    uint8_t *ref = fx_jpeg_decode(jpg, (unsigned long)n, &h, &w);
    double want[3] = {0}, got[3] = {0};
    for (size_t p = 0; p < (size_t)h * w; p++)
        for (int c = 0; c < 3; c++) want[c] += ref[3 * p + c];
    const uint8_t *img = mpx_det_dataset_image(ds, i);
    for (size_t p = 0; p < (size_t)ds->size * ds->size; p++)
        for (int c = 0; c < 3; c++) got[c] += img[3 * p + c];
    for (int c = 0; c < 3; c++) {
        want[c] /= (double)h * w;
        got[c] /= (double)ds->size * ds->size;
        CHECK(fabs(want[c] - got[c]) < 1.5, "%s channel %d: mean %.2f after resize, %.2f decoded",
              ds->ids[i], c, got[c], want[c]);
    }
    free(ref);
    free(jpg);
}

int main(void) {
    char shared[1200], archive[1300], tmp[1024], cmd[3000], dir_src[1100];
    mpx_test_source_path("../shared/data", shared, sizeof shared);
    snprintf(archive, sizeof archive, "%s/raccoon-voc.tar.gz", shared);
    struct stat sb;
    if (stat(archive, &sb) != 0) {
        printf("skipped: %s not found\n", archive);
        return MPX_TEST_SKIP;
    }
    mpx_voc_opts o = {.size = 300};
    mpx_voc_info info;
    mpx_det_dataset train, test;
    CHECK_OK(mpx_voc_load(archive, MPX_SPLIT_TRAIN, &o, &train, &info));
    printf(
        "raccoon train from the archive: %lld images, %lld boxes, %.2f s (%d threads), rule %s\n",
        (long long)info.images, (long long)info.boxes, info.load_s, mpx_threads_get(),
        info.split_rule);
    CHECK(info.checksummed == 1, "the archive was not checked against SHA256SUMS");
    CHECK(info.layout == MPX_VOC_LAYOUT_RACCOON && strcmp(info.root, archive) != 0,
          "layout %d root %s", info.layout, info.root);
    CHECK(info.annotations == 200, "%lld annotations, expected 200", (long long)info.annotations);
    CHECK(strstr(info.split_rule, "train_labels.csv") != NULL, "rule %s", info.split_rule);
    CHECK_OK(mpx_voc_load(archive, MPX_SPLIT_TEST, &o, &test, &info));
    REQUIRE(train.n > 0 && test.n > 0, "nothing loaded");
    CHECK(train.n == 160 && total_boxes(&train) == 173, "train: %lld images, %lld boxes",
          (long long)train.n, (long long)total_boxes(&train));
    CHECK(test.n == 40 && total_boxes(&test) == 44, "test: %lld images, %lld boxes",
          (long long)test.n, (long long)total_boxes(&test));
    CHECK(train.n + test.n == 200 && total_boxes(&train) + total_boxes(&test) == 217,
          "all: %lld images, %lld boxes", (long long)(train.n + test.n),
          (long long)(total_boxes(&train) + total_boxes(&test)));
    CHECK(train.num_classes == 1 && strcmp(train.class_names[0], "raccoon") == 0,
          "%d classes, first '%s'", train.num_classes, train.class_names[0]);
    CHECK_OK(mpx_det_dataset_validate(&train, "raccoon train"));
    CHECK_OK(mpx_det_dataset_validate(&test, "raccoon test"));
    for (int64_t i = 0; i < train.n; i++)
        for (int64_t j = 0; j < test.n; j++)
            CHECK(strcmp(train.ids[i], test.ids[j]) != 0, "%s is in both splits", train.ids[i]);

    /* the CSVs, read independently from an extracted copy */
    REQUIRE(mpx_test_tmpdir("det_raccoon", tmp, sizeof tmp)[0], "no temp dir");
    snprintf(cmd, sizeof cmd, "tar xzf '%s' -C '%s'", archive, tmp);
    REQUIRE(system(cmd) == 0, "tar failed");
    char csv[1200];
    snprintf(csv, sizeof csv, "%s/raccoon/train_labels.csv", tmp);
    CHECK(check_csv(csv, &train) == 173, "train CSV rows");
    snprintf(csv, sizeof csv, "%s/raccoon/test_labels.csv", tmp);
    CHECK(check_csv(csv, &test) == 44, "test CSV rows");
    for (int64_t i = 0; i < train.n; i += 37) check_pixels(tmp, &train, i);

    /* the extracted directory (and its parent) loads exactly like the archive */
    snprintf(dir_src, sizeof dir_src, "%s/raccoon", tmp);
    const char *srcs[2] = {tmp, dir_src};
    for (int s = 0; s < 2; s++) {
        mpx_det_dataset d;
        CHECK_OK(mpx_voc_load(srcs[s], MPX_SPLIT_TEST, &o, &d, &info));
        CHECK(d.n == test.n && info.checksummed == 0, "directory %s: %lld images", srcs[s],
              (long long)d.n);
        if (d.n == test.n) {
            CHECK(memcmp(d.images, test.images, (size_t)d.n * 300 * 300 * 3) == 0 &&
                      memcmp(d.counts, test.counts, (size_t)d.n * sizeof *d.counts) == 0 &&
                      memcmp(d.boxes, test.boxes,
                             (size_t)d.n * MPX_DET_MAX_BOXES * sizeof *d.boxes) == 0,
                  "directory %s and archive load differently", srcs[s]);
            for (int64_t i = 0; i < d.n; i++)
                CHECK(strcmp(d.ids[i], test.ids[i]) == 0, "id %lld: %s vs %s", (long long)i,
                      d.ids[i], test.ids[i]);
        }
        mpx_det_dataset_free(&d);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0, "cleanup");
    mpx_det_dataset_free(&train);
    mpx_det_dataset_free(&test);
    return mpx_test_done("test_det_raccoon");
}
