/* test_data_idx.c — the IDX reader on generated files (gzip and raw; MNIST/Fashion-MNIST
 * names), every malformed-input error, and the real Fashion-MNIST when it is installed
 * (/usr/share/datasets/fashion-mnist; that part is skipped with a message otherwise). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "data/fixtures.h"
#include "mpx/data.h"
#include "testutil.h"

enum { N = 7, ROWS = 4, COLS = 3 };

static uint8_t pixel(int i, int y, int x) { return (uint8_t)(i * 12 + y * 3 + x + 1); }
static uint8_t label(int i) { return (uint8_t)((i * 3) % 5); }

/* Build an IDX file in memory: magic 00 00 type ndim, big-endian dims, then the bytes. */
static size_t idx_bytes(uint8_t *out, uint8_t type, int ndim, const uint32_t *dims,
                        const uint8_t *data, size_t n) {
    size_t k = 0;
    out[k++] = 0;
    out[k++] = 0;
    out[k++] = type;
    out[k++] = (uint8_t)ndim;
    for (int d = 0; d < ndim; d++) {
        out[k++] = (uint8_t)(dims[d] >> 24);
        out[k++] = (uint8_t)(dims[d] >> 16);
        out[k++] = (uint8_t)(dims[d] >> 8);
        out[k++] = (uint8_t)dims[d];
    }
    memcpy(out + k, data, n);
    return k + n;
}

static void write_gz(const char *path, const void *data, size_t n) {
    gzFile gz = gzopen(path, "wb");
    gzwrite(gz, data, (unsigned)n);
    gzclose(gz);
}

typedef struct {
    uint8_t img[64 + N * ROWS * COLS], lab[64 + N];
    size_t nimg, nlab;
} idx_pair;

static void make_pair(idx_pair *p) {
    uint8_t pix[N * ROWS * COLS], labs[N];
    for (int i = 0; i < N; i++) {
        labs[i] = label(i);
        for (int y = 0; y < ROWS; y++)
            for (int x = 0; x < COLS; x++) pix[(i * ROWS + y) * COLS + x] = pixel(i, y, x);
    }
    uint32_t di[3] = {N, ROWS, COLS}, dl[1] = {N};
    p->nimg = idx_bytes(p->img, 0x08, 3, di, pix, sizeof pix);
    p->nlab = idx_bytes(p->lab, 0x08, 1, dl, labs, sizeof labs);
}

static void check_pair(const mpx_dataset *ds, int num_classes) {
    CHECK(ds->n == N && ds->h == ROWS && ds->w == COLS && ds->c == 1 &&
              ds->num_classes == num_classes,
          "shape n=%lld %dx%dx%d classes %d", (long long)ds->n, ds->h, ds->w, ds->c,
          ds->num_classes);
    if (ds->n != N) return;
    int bad = 0;
    for (int i = 0; i < N; i++) {
        bad += ds->labels[i] != label(i);
        for (int y = 0; y < ROWS; y++)
            for (int x = 0; x < COLS; x++)
                bad += mpx_dataset_image(ds, i)[y * COLS + x] != pixel(i, y, x);
    }
    CHECK(bad == 0, "%d values differ", bad);
}

static void expect_error(mpx_status st, const char *want1, const char *want2, const char *what) {
    const char *m = mpx_error_message();
    CHECK(st == MPX_ERR_INPUT && strstr(m, want1) && (!want2 || strstr(m, want2)),
          "%s: got %s '%s', want bad input naming '%s'%s%s", what, mpx_status_name(st), m, want1,
          want2 ? " / " : "", want2 ? want2 : "");
}

static void test_generated(const char *tmp) {
    idx_pair p;
    make_pair(&p);
    char ig[1200], lg[1200], ir[1200], lr[1200], bad[1200];
    snprintf(ig, sizeof ig, "%s/img.idx.gz", tmp);
    snprintf(lg, sizeof lg, "%s/lab.idx.gz", tmp);
    snprintf(ir, sizeof ir, "%s/img.idx", tmp);
    snprintf(lr, sizeof lr, "%s/lab.idx", tmp);
    snprintf(bad, sizeof bad, "%s/bad.idx", tmp);
    write_gz(ig, p.img, p.nimg);
    write_gz(lg, p.lab, p.nlab);
    fx_write_file(ir, p.img, p.nimg);
    fx_write_file(lr, p.lab, p.nlab);
    mpx_dataset ds;
    CHECK_OK(mpx_idx_read(ig, lg, 0, &ds));
    check_pair(&ds, 5); /* labels 0..4 -> max + 1 */
    mpx_dataset_free(&ds);
    CHECK_OK(mpx_idx_read(ir, lr, 10, &ds));
    check_pair(&ds, 10);
    mpx_dataset_free(&ds);
    CHECK_OK(mpx_idx_read(ir, lg, 0, &ds)); /* raw images, gzip labels */
    check_pair(&ds, 5);
    mpx_dataset_free(&ds);

    /* A 4-d IDX [n, h, w, c] is read as HWC. */
    uint8_t four[256], pix4[2 * 2 * 3 * 2];
    for (int i = 0; i < (int)sizeof pix4; i++) pix4[i] = (uint8_t)(i * 5);
    uint32_t d4[4] = {2, 2, 3, 2}, dl2[1] = {2};
    fx_write_file(bad, four, idx_bytes(four, 0x08, 4, d4, pix4, sizeof pix4));
    char l2[1200];
    snprintf(l2, sizeof l2, "%s/lab2.idx", tmp);
    uint8_t labs2[2] = {1, 0}, lab2[64];
    fx_write_file(l2, lab2, idx_bytes(lab2, 0x08, 1, dl2, labs2, 2));
    CHECK_OK(mpx_idx_read(bad, l2, 0, &ds));
    CHECK(ds.n == 2 && ds.h == 2 && ds.w == 3 && ds.c == 2 && ds.images &&
              memcmp(ds.images, pix4, sizeof pix4) == 0,
          "4-d IDX read as [2,2,3,2]");
    mpx_dataset_free(&ds);

    /* Errors, each naming the file at fault. */
    uint8_t buf[512];
    memcpy(buf, p.img, p.nimg);
    buf[0] = 1;
    fx_write_file(bad, buf, p.nimg);
    expect_error(mpx_idx_read(bad, lr, 0, &ds), "bad.idx", "not an IDX file", "bad magic");
    memcpy(buf, p.img, p.nimg);
    buf[2] = 0x0D; /* float elements */
    fx_write_file(bad, buf, p.nimg);
    expect_error(mpx_idx_read(bad, lr, 0, &ds), "bad.idx", "0x0d", "float IDX");
    expect_error(mpx_idx_read(lr, lr, 0, &ds), "lab.idx", "1 dimensions", "labels given as images");
    fx_write_file(bad, p.img, p.nimg - 5);
    expect_error(mpx_idx_read(bad, lr, 0, &ds), "bad.idx", "truncated", "truncated images");
    fx_write_file(bad, p.img, 10);
    expect_error(mpx_idx_read(bad, lr, 0, &ds), "bad.idx", "truncated", "truncated header");
    memcpy(buf, p.img, p.nimg);
    buf[p.nimg] = 9;
    fx_write_file(bad, buf, p.nimg + 1);
    expect_error(mpx_idx_read(bad, lr, 0, &ds), "bad.idx", "data after", "trailing data");
    /* A header declaring ~2^34 bytes in a tiny file (found by fuzz_idx): refused before any
     * allocation. */
    memcpy(buf, p.img, p.nimg);
    buf[9] = 0xFE; /* rows: 0x00fe0000 + ROWS, under the 2^30 dimension limit */
    fx_write_file(bad, buf, p.nimg);
    expect_error(mpx_idx_read(bad, lr, 0, &ds), "bad.idx", "header declares", "huge header, raw");
    uint8_t lab6[64], labs[N];
    uint32_t d6[1] = {N - 1};
    for (int i = 0; i < N; i++) labs[i] = label(i);
    fx_write_file(bad, lab6, idx_bytes(lab6, 0x08, 1, d6, labs, N - 1));
    expect_error(mpx_idx_read(ir, bad, 0, &ds), "7 images", "6 labels", "count mismatch");
    expect_error(mpx_idx_read(ir, lr, 3, &ds), "lab.idx", "label 3 of example 1",
                 "label >= num_classes");
    char missing[1200];
    snprintf(missing, sizeof missing, "%s/nope.idx", tmp);
    expect_error(mpx_idx_read(missing, lr, 0, &ds), "nope.idx", NULL, "missing file");
    /* A gzip stream with damaged compressed bytes: zlib reports it (or the CRC does). */
    FILE *f = fopen(ig, "rb");
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    for (size_t i = 12; i < n - 8; i++) buf[i] ^= 0x55;
    fx_write_file(bad, buf, n);
    expect_error(mpx_idx_read(bad, lr, 0, &ds), "bad.idx", NULL, "corrupt gzip");
    CHECK(ds.images == NULL && ds.n == 0, "dataset not cleared after a failure");

    /* The standard file names: train gzip, t10k raw. */
    char dir[1200], path[1400];
    snprintf(dir, sizeof dir, "%s/fmnist", tmp);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    write_gz(path, p.img, p.nimg);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", dir);
    write_gz(path, p.lab, p.nlab);
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte", dir);
    fx_write_file(path, p.img, p.nimg);
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte", dir);
    fx_write_file(path, p.lab, p.nlab);
    CHECK_OK(mpx_fashion_mnist_load(dir, MPX_SPLIT_TRAIN, &ds));
    check_pair(&ds, 10);
    CHECK(ds.class_names && strcmp(ds.class_names[9], "Ankle boot") == 0,
          "Fashion-MNIST class names");
    mpx_dataset_free(&ds);
    CHECK_OK(mpx_mnist_load(dir, MPX_SPLIT_TEST, &ds));
    check_pair(&ds, 10);
    CHECK(ds.class_names && strcmp(ds.class_names[7], "7") == 0, "MNIST class names");
    mpx_dataset_free(&ds);
    expect_error(mpx_fashion_mnist_load(tmp, MPX_SPLIT_TRAIN, &ds), "train-images-idx3-ubyte.gz",
                 "dataset-fashion-mnist", "Fashion-MNIST missing");
}

static void test_real_fashion_mnist(void) {
    const char *dir = "/usr/share/datasets/fashion-mnist";
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        printf("skipping the real Fashion-MNIST: %s not found (apt-get install "
               "dataset-fashion-mnist)\n",
               dir);
        return;
    }
    for (int s = 0; s < 2; s++) {
        mpx_dataset ds;
        mpx_status st = mpx_fashion_mnist_load(NULL, s ? MPX_SPLIT_TEST : MPX_SPLIT_TRAIN, &ds);
        CHECK(st == MPX_OK, "Fashion-MNIST %s: %s", s ? "test" : "train", mpx_error_message());
        if (st != MPX_OK) continue;
        int64_t want = s ? 10000 : 60000, count[10] = {0};
        CHECK(ds.n == want && ds.h == 28 && ds.w == 28 && ds.c == 1 && ds.num_classes == 10,
              "Fashion-MNIST %s: %lld images %dx%dx%d", s ? "test" : "train", (long long)ds.n, ds.h,
              ds.w, ds.c);
        for (int64_t i = 0; i < ds.n; i++) count[ds.labels[i]]++;
        /* The dataset is balanced: 6000 / 1000 per class. */
        for (int k = 0; k < 10; k++)
            CHECK(count[k] == want / 10, "class %d: %lld images", k, (long long)count[k]);
        float mean, std;
        mpx_dataset_channel_stats(&ds, &mean, &std);
        /* Published Fashion-MNIST statistics: mean 0.286, std 0.353 (train). */
        CHECK(mean > 0.27f && mean < 0.30f && std > 0.34f && std < 0.37f,
              "pixel mean %.4f std %.4f", mean, std);
        printf("Fashion-MNIST %s: %lld images, mean %.4f std %.4f\n", s ? "test" : "train",
               (long long)ds.n, mean, std);
        mpx_dataset_free(&ds);
    }
}

int main(void) {
    char tmp[1024];
    REQUIRE(mpx_test_tmpdir("data_idx", tmp, sizeof tmp)[0], "no temp dir");
    test_generated(tmp);
    test_real_fashion_mnist();
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return mpx_test_done(__FILE__);
}
