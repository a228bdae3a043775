/* test_data_cifar.c — CIFAR-10: the binary reader on generated batches (HWC order, labels,
 * manifest), corrupt and truncated inputs (MPX_ERR_INPUT naming the file and record), and the
 * one-time conversion of a generated tar.gz of JPEGs (record order, pixels equal to an
 * independent libjpeg decode, converting once, concurrent callers, every failure path). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/fixtures.h"
#include "data/sha256.h"
#include "mpx/data.h"
#include "testutil.h"

enum { REC = 3073 };
static const char *const CLASSES[10] = {"airplane", "automobile", "bird",  "cat",  "deer",
                                        "dog",      "frog",       "horse", "ship", "truck"};

static void sh(const char *fmt, const char *a) {
    char cmd[2400];
    snprintf(cmd, sizeof cmd, fmt, a, a);
    if (system(cmd) != 0) fprintf(stderr, "command failed: %s\n", cmd);
}

/* ---- binary reader ---- */

/* Pixel (file f, record r, channel ch, y, x) of the generated batches. */
static uint8_t pix_of(int f, int r, int ch, int y, int x) {
    return (uint8_t)(f * 53 + r * 29 + ch * 101 + y * 7 + x * 3);
}
static uint8_t label_of(int f, int r) { return (uint8_t)((f * 3 + r) % 10); }

static const char *file_name(int f) {
    static const char *const n[6] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                     "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};
    return n[f];
}

/* 5 training files of 2 records and a test file of 10, written record by record in the
 * official layout: label, then the R, G, B planes, each 32x32 row-major. */
static void write_batches(const char *dir, char manifest_out[1024]) {
    mkdir(dir, 0755);
    manifest_out[0] = '\0';
    for (int f = 0; f < 6; f++) {
        int nrec = f < 5 ? 2 : 10;
        uint8_t *buf = malloc((size_t)nrec * REC);
        for (int r = 0; r < nrec; r++) {
            uint8_t *rec = buf + (size_t)r * REC;
            rec[0] = label_of(f, r);
            for (int ch = 0; ch < 3; ch++)
                for (int y = 0; y < 32; y++)
                    for (int x = 0; x < 32; x++)
                        rec[1 + ch * 1024 + y * 32 + x] = pix_of(f, r, ch, y, x);
        }
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, file_name(f));
        fx_write_file(path, buf, (size_t)nrec * REC);
        mpx_sha256 s;
        char hex[65];
        mpx_sha256_init(&s);
        mpx_sha256_update(&s, buf, (size_t)nrec * REC);
        mpx_sha256_final_hex(&s, hex);
        size_t len = strlen(manifest_out);
        snprintf(manifest_out + len, 1024 - len, "%s  %s\n", hex, file_name(f));
        free(buf);
    }
}

static void check_split(const mpx_dataset *ds, int train) {
    CHECK(ds->n == 10 && ds->h == 32 && ds->w == 32 && ds->c == 3 && ds->num_classes == 10,
          "split shape n=%lld %dx%dx%d classes %d", (long long)ds->n, ds->h, ds->w, ds->c,
          ds->num_classes);
    if (ds->n != 10) return;
    int bad_pix = 0, bad_lab = 0;
    for (int i = 0; i < 10; i++) {
        int f = train ? i / 2 : 5, r = train ? i % 2 : i;
        bad_lab += ds->labels[i] != label_of(f, r);
        const uint8_t *img = mpx_dataset_image(ds, i);
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++)
                for (int ch = 0; ch < 3; ch++)
                    bad_pix += img[(y * 32 + x) * 3 + ch] != pix_of(f, r, ch, y, x);
    }
    CHECK(bad_lab == 0, "%d labels differ", bad_lab);
    CHECK(bad_pix == 0, "%d pixels differ from the CHW -> HWC mapping", bad_pix);
    CHECK(strcmp(ds->class_names[3], "cat") == 0, "class name 3 = %s", ds->class_names[3]);
}

static void expect_error(mpx_status st, const char *want1, const char *want2, const char *what) {
    const char *m = mpx_error_message();
    CHECK(st == MPX_ERR_INPUT && strstr(m, want1) && (!want2 || strstr(m, want2)),
          "%s: got %s '%s', want bad input naming '%s'%s%s", what, mpx_status_name(st), m, want1,
          want2 ? " and " : "", want2 ? want2 : "");
}

static void test_binary_reader(const char *tmp) {
    char dir[1100], manifest[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/bin", tmp);
    write_batches(dir, manifest);
    mpx_dataset ds;
    int sum = -1;
    CHECK_OK(mpx_cifar10_read_dir(dir, MPX_SPLIT_TRAIN, &ds, &sum));
    check_split(&ds, 1);
    CHECK(sum == 0, "no manifest, yet checksummed = %d", sum);
    mpx_dataset_free(&ds);
    CHECK_OK(mpx_cifar10_read_dir(dir, MPX_SPLIT_TEST, &ds, &sum));
    check_split(&ds, 0);
    mpx_dataset_free(&ds);

    /* Through the source order: a cache holding the batches needs no archive. */
    char cache[1100], nowhere[1100];
    snprintf(cache, sizeof cache, "%s/cache", tmp);
    snprintf(nowhere, sizeof nowhere, "%s/no-such-dir", tmp);
    mkdir(cache, 0755);
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s/cifar-10-batches-bin'", dir, cache);
    CHECK(system(cmd) == 0, "copy");
    mpx_cifar10_opts o = {.cache_dir = cache, .shared_dir = nowhere, .n_train = 10, .n_test = 10};
    mpx_cifar10_info info;
    CHECK_OK(mpx_cifar10_load(&o, MPX_SPLIT_TRAIN, &ds, &info));
    check_split(&ds, 1);
    CHECK(!info.converted, "a complete cache was converted again");
    mpx_dataset_free(&ds);
    /* ...but the default expected counts (50000/10000) reject it. */
    mpx_cifar10_opts o_official = {.cache_dir = cache, .shared_dir = nowhere};
    expect_error(mpx_cifar10_load(&o_official, MPX_SPLIT_TRAIN, &ds, NULL), "expected 153650000",
                 NULL, "tiny cache under the official counts");

    /* With the manifest every file is checked; one flipped pixel byte is caught. */
    snprintf(path, sizeof path, "%s/SHA256SUMS", dir);
    fx_write_file(path, manifest, strlen(manifest));
    CHECK_OK(mpx_cifar10_read_dir(dir, MPX_SPLIT_TRAIN, &ds, &sum));
    CHECK(sum == 1, "manifest present, yet checksummed = %d", sum);
    mpx_dataset_free(&ds);
    snprintf(path, sizeof path, "%s/data_batch_3.bin", dir);
    FILE *f = fopen(path, "r+b");
    fseek(f, REC + 500, SEEK_SET);
    fputc(0x5a ^ pix_of(2, 1, 0, 15, 9), f); /* some pixel of record 1 */
    fclose(f);
    expect_error(mpx_cifar10_read_dir(dir, MPX_SPLIT_TRAIN, &ds, NULL), "data_batch_3.bin",
                 "checksum", "corrupted pixel");
    CHECK(ds.images == NULL && ds.n == 0, "dataset not cleared after a failure");
    CHECK_OK(mpx_cifar10_read_dir(dir, MPX_SPLIT_TEST, &ds, NULL)); /* the test file is intact */
    mpx_dataset_free(&ds);
    snprintf(path, sizeof path, "%s/SHA256SUMS", dir);
    remove(path);

    /* Label 12 in record 4 of data_batch_2.bin (2 records per file: rewrite as 6 records). */
    uint8_t *buf = calloc(6, REC);
    for (int r = 0; r < 6; r++) buf[(size_t)r * REC] = (uint8_t)r;
    buf[4 * REC] = 12;
    snprintf(path, sizeof path, "%s/data_batch_2.bin", dir);
    fx_write_file(path, buf, 6 * REC);
    expect_error(mpx_cifar10_read_dir(dir, MPX_SPLIT_TRAIN, &ds, NULL), "data_batch_2.bin",
                 "record 4", "label 12");
    /* Truncated file: not a whole number of records. */
    fx_write_file(path, buf, 6 * REC - 100);
    expect_error(mpx_cifar10_read_dir(dir, MPX_SPLIT_TRAIN, &ds, NULL), "data_batch_2.bin",
                 "18338 bytes", "truncated file");
    fx_write_file(path, buf, 0);
    expect_error(mpx_cifar10_read_dir(dir, MPX_SPLIT_TRAIN, &ds, NULL), "data_batch_2.bin", NULL,
                 "empty file");
    remove(path);
    expect_error(mpx_cifar10_read_dir(dir, MPX_SPLIT_TRAIN, &ds, NULL), "data_batch_2.bin",
                 "missing", "missing file");
    free(buf);
}

/* ---- conversion ---- */

enum { PER_TRAIN = 2, PER_TEST = 1 };

/* The colour of image (split, class, index): flat, so a JPEG keeps it within a few levels. */
static void colour_of(int split, int cls, int idx, uint8_t rgb[3]) {
    rgb[0] = (uint8_t)(10 + 24 * cls);
    rgb[1] = (uint8_t)(30 + 90 * idx + 40 * split);
    rgb[2] = (uint8_t)(200 - 15 * cls);
}

typedef struct {
    unsigned char *jpg[2][10][PER_TRAIN];
    unsigned long n[2][10][PER_TRAIN];
} jpegs;

/* A 32x32 JPEG: the flat colour plus a white 16x16 block in the top-right corner, aligned to
 * the 16x16 MCU so 4:2:0 chroma subsampling does not blend it with the background. */
static void make_jpegs(jpegs *J) {
    memset(J, 0, sizeof *J);
    uint8_t img[32 * 32 * 3];
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 10; k++)
            for (int i = 0; i < (s ? PER_TEST : PER_TRAIN); i++) {
                uint8_t rgb[3];
                colour_of(s, k, i, rgb);
                for (int p = 0; p < 32 * 32; p++) memcpy(img + 3 * p, rgb, 3);
                for (int y = 0; y < 16; y++)
                    for (int x = 16; x < 32; x++) memset(img + (y * 32 + x) * 3, 255, 3);
                fx_jpeg_encode(img, 32, 32, 3, 95, &J->jpg[s][k][i], &J->n[s][k][i]);
            }
}

static void free_jpegs(jpegs *J) {
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 10; k++)
            for (int i = 0; i < PER_TRAIN; i++) free(J->jpg[s][k][i]);
}

typedef enum { ARCH_GOOD, ARCH_MISSING_ONE, ARCH_SMALL_IMAGE, ARCH_UNKNOWN_CLASS } arch_kind;

/* train/<class>/000i.jpg and test/<class>/000i.jpg, classes in reverse order and files in
 * reverse name order inside the archive (the converter must sort), plus directories and a
 * README that the converter ignores. */
static void write_archive(const char *path, const jpegs *J, arch_kind kind) {
    gzFile gz = gzopen(path, "wb");
    fx_tar_add(gz, "README.txt", '0', "CIFAR-10 as JPEG\n", 17);
    for (int s = 1; s >= 0; s--) {
        fx_tar_add(gz, s ? "test/" : "train/", '5', NULL, 0);
        for (int k = 9; k >= 0; k--) {
            char name[200];
            snprintf(name, sizeof name, "%s/%s/", s ? "test" : "train", CLASSES[k]);
            fx_tar_add(gz, name, '5', NULL, 0);
            for (int i = (s ? PER_TEST : PER_TRAIN) - 1; i >= 0; i--) {
                if (kind == ARCH_MISSING_ONE && s == 0 && k == 6 && i == 1) continue;
                snprintf(name, sizeof name, "./%s/%s/%04d.jpg", s ? "test" : "train",
                         kind == ARCH_UNKNOWN_CLASS && k == 2 ? "birb" : CLASSES[k], i);
                if (kind == ARCH_SMALL_IMAGE && s == 1 && k == 4) {
                    uint8_t small[16 * 16 * 3] = {0};
                    unsigned char *jpg;
                    unsigned long n;
                    fx_jpeg_encode(small, 16, 16, 3, 90, &jpg, &n);
                    fx_tar_add(gz, name, '0', jpg, n);
                    free(jpg);
                    continue;
                }
                fx_tar_add(gz, name, '0', J->jpg[s][k][i], J->n[s][k][i]);
            }
        }
    }
    fx_tar_end(gz);
    gzclose(gz);
}

/* Record k of a split is file k / 10 of class k % 10 (data/README.md). Pixels must equal an
 * independent libjpeg decode of the same bytes exactly (same library, default settings), and
 * the flat colour within 3 levels (quality-95 JPEG of a flat block: quantisation error ~1). */
static void check_converted(const mpx_dataset *ds, int split, const jpegs *J) {
    int per = split ? PER_TEST : PER_TRAIN;
    CHECK(ds->n == 10 * per, "converted split %d has %lld images", split, (long long)ds->n);
    if (ds->n != 10 * per) return;
    int bad_lab = 0, bad_exact = 0, bad_colour = 0, bad_marker = 0;
    for (int k = 0; k < ds->n; k++) {
        int cls = k % 10, idx = k / 10;
        bad_lab += ds->labels[k] != cls;
        int h, w;
        uint8_t *ref = fx_jpeg_decode(J->jpg[split][cls][idx], J->n[split][cls][idx], &h, &w);
        const uint8_t *img = mpx_dataset_image(ds, k);
        bad_exact += memcmp(ref, img, 32 * 32 * 3) != 0;
        free(ref);
        uint8_t rgb[3];
        colour_of(split, cls, idx, rgb);
        for (int ch = 0; ch < 3; ch++) {
            bad_colour += abs(img[(20 * 32 + 8) * 3 + ch] - rgb[ch]) > 3; /* row 20, col 8 */
            bad_marker += abs(img[(4 * 32 + 27) * 3 + ch] - 255) > 3;     /* top-right block */
        }
    }
    CHECK(bad_lab == 0, "split %d: %d labels out of the documented order", split, bad_lab);
    CHECK(bad_exact == 0, "split %d: %d images differ from the reference decode", split, bad_exact);
    CHECK(bad_colour == 0 && bad_marker == 0, "split %d: %d colour / %d marker values off", split,
          bad_colour, bad_marker);
}

typedef struct {
    mpx_cifar10_opts o;
    mpx_cifar10_info info;
    mpx_status st;
} load_job;

static void *load_thread(void *arg) {
    load_job *j = arg;
    mpx_dataset ds;
    j->st = mpx_cifar10_load(&j->o, MPX_SPLIT_TEST, &ds, &j->info);
    mpx_dataset_free(&ds);
    return NULL;
}

static void test_conversion(const char *tmp) {
    jpegs J;
    make_jpegs(&J);
    char shared[1100], cache[1100], archive[1200], path[1400];
    snprintf(shared, sizeof shared, "%s/shared", tmp);
    snprintf(cache, sizeof cache, "%s/conv-cache", tmp);
    snprintf(archive, sizeof archive, "%s/cifar10-jpg.tar.gz", shared);
    mkdir(shared, 0755);
    write_archive(archive, &J, ARCH_GOOD);

    mpx_cifar10_opts o = {.cache_dir = cache, .shared_dir = shared, .n_train = 20, .n_test = 10};
    mpx_cifar10_info info;
    mpx_dataset train, test;
    CHECK_OK(mpx_cifar10_load(&o, MPX_SPLIT_TRAIN, &train, &info));
    CHECK(info.converted == 1 && info.checksummed == 1, "first load: converted %d checksummed %d",
          info.converted, info.checksummed);
    check_converted(&train, 0, &J);
    snprintf(path, sizeof path, "%s/cifar-10-batches-bin/data_batch_1.bin", cache);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && sb.st_size == 4 * REC, "data_batch_1.bin holds 4 records");
    const char *extra[] = {"SHA256SUMS", "batches.meta.txt", "SOURCE.txt"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/cifar-10-batches-bin/%s", cache, extra[i]);
        CHECK(stat(path, &sb) == 0, "%s not written", extra[i]);
    }
    CHECK_OK(mpx_cifar10_load(&o, MPX_SPLIT_TEST, &test, &info));
    CHECK(info.converted == 0 && info.checksummed == 1, "second load converted again (%d)",
          info.converted);
    check_converted(&test, 1, &J);
    mpx_dataset again;
    CHECK_OK(mpx_cifar10_load(&o, MPX_SPLIT_TRAIN, &again, &info));
    CHECK(info.converted == 0, "third load converted again");
    CHECK(again.n == train.n && memcmp(again.images, train.images, (size_t)train.n * 3072) == 0,
          "reloaded training split differs");
    mpx_dataset_free(&again);

    /* Deterministic: a second conversion elsewhere gives identical bytes (same manifest). */
    char cache2[1100], *m1 = NULL, *m2 = NULL;
    snprintf(cache2, sizeof cache2, "%s/conv-cache2", tmp);
    mpx_cifar10_opts o2 = o;
    o2.cache_dir = cache2;
    CHECK_OK(mpx_cifar10_prepare(&o2, &info));
    snprintf(path, sizeof path, "%s/cifar-10-batches-bin/SHA256SUMS", cache);
    FILE *f1 = fopen(path, "rb");
    snprintf(path, sizeof path, "%s/cifar-10-batches-bin/SHA256SUMS", cache2);
    FILE *f2 = fopen(path, "rb");
    size_t n1 = 0, n2 = 0;
    if (f1 && f2) {
        m1 = calloc(1, 2048);
        m2 = calloc(1, 2048);
        n1 = fread(m1, 1, 2047, f1);
        n2 = fread(m2, 1, 2047, f2);
    }
    CHECK(m1 && m2 && n1 > 0 && n1 == n2 && strcmp(m1, m2) == 0, "two conversions differ");
    if (f1) fclose(f1);
    if (f2) fclose(f2);
    free(m1);
    free(m2);

    /* Corrupt the cache: the next load names the file and says how to rebuild. */
    snprintf(path, sizeof path, "%s/cifar-10-batches-bin/data_batch_4.bin", cache);
    FILE *f = fopen(path, "r+b");
    fseek(f, 1000, SEEK_SET);
    int old = fgetc(f);
    fseek(f, 1000, SEEK_SET);
    fputc(old ^ 1, f);
    fclose(f);
    mpx_dataset bad;
    expect_error(mpx_cifar10_load(&o, MPX_SPLIT_TRAIN, &bad, &info), "data_batch_4.bin", "delete",
                 "corrupt cache");

    /* Concurrent first loads convert exactly once (flock on the cache). */
    char cache3[1100];
    snprintf(cache3, sizeof cache3, "%s/conv-cache3", tmp);
    load_job jobs[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].o = o;
        jobs[i].o.cache_dir = cache3;
        pthread_create(&th[i], NULL, load_thread, &jobs[i]);
    }
    int conversions = 0;
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].st == MPX_OK, "concurrent load %d failed", i);
        conversions += jobs[i].info.converted;
    }
    CHECK(conversions == 1, "3 concurrent loads converted %d times", conversions);

    /* ---- failures: each leaves no complete cache behind ---- */
    struct {
        arch_kind kind;
        int64_t n_train;
        const char *want1, *want2, *what;
    } cases[] = {
        {ARCH_GOOD, 30, "3 images per class", "airplane 2", "wrong expected count"},
        {ARCH_MISSING_ONE, 20, "frog 1", NULL, "a class short of images"},
        {ARCH_SMALL_IMAGE, 20, "test/deer/0000.jpg", "16x16x3, expected 32x32x3", "16x16 image"},
        {ARCH_UNKNOWN_CLASS, 20, "unknown class folder 'birb'", NULL, "unknown class"},
    };
    for (int c = 0; c < 4; c++) {
        char sdir[1100], cdir[1100];
        snprintf(sdir, sizeof sdir, "%s/shared-%d", tmp, c);
        snprintf(cdir, sizeof cdir, "%s/cache-%d", tmp, c);
        mkdir(sdir, 0755);
        snprintf(path, sizeof path, "%s/cifar10-jpg.tar.gz", sdir);
        write_archive(path, &J, cases[c].kind);
        mpx_cifar10_opts oc = {
            .cache_dir = cdir, .shared_dir = sdir, .n_train = cases[c].n_train, .n_test = 10};
        expect_error(mpx_cifar10_load(&oc, MPX_SPLIT_TRAIN, &bad, &info), cases[c].want1,
                     cases[c].want2, cases[c].what);
        snprintf(path, sizeof path, "%s/cifar-10-batches-bin/data_batch_1.bin", cdir);
        CHECK(stat(path, &sb) != 0, "%s: a failed conversion left data_batch_1.bin", cases[c].what);
    }

    /* Truncated archive, and an archive that contradicts the SHA256SUMS beside it. */
    char sdir[1100], cdir[1100];
    snprintf(sdir, sizeof sdir, "%s/shared-trunc", tmp);
    snprintf(cdir, sizeof cdir, "%s/cache-trunc", tmp);
    mkdir(sdir, 0755);
    snprintf(path, sizeof path, "%s/cifar10-jpg.tar.gz", sdir);
    stat(archive, &sb);
    char cmd[4000];
    snprintf(cmd, sizeof cmd, "head -c %lld '%s' > '%s'", (long long)sb.st_size * 2 / 3, archive,
             path);
    CHECK(system(cmd) == 0, "truncate");
    mpx_cifar10_opts ot = {.cache_dir = cdir, .shared_dir = sdir, .n_train = 20, .n_test = 10};
    expect_error(mpx_cifar10_load(&ot, MPX_SPLIT_TRAIN, &bad, &info),
                 "shared-trunc/cifar10-jpg.tar.gz", "truncated", "truncated archive");
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && echo '%064d  cifar10-jpg.tar.gz' > '%s/SHA256SUMS'",
             archive, path, 0, sdir);
    CHECK(system(cmd) == 0, "copy archive");
    expect_error(mpx_cifar10_load(&ot, MPX_SPLIT_TRAIN, &bad, &info), "SHA256SUMS", "corrupt copy",
                 "archive checksum mismatch");

    /* Nothing anywhere: one message naming every path tried. */
    char empty_cache[1100], empty_shared[1100];
    snprintf(empty_cache, sizeof empty_cache, "%s/empty-cache", tmp);
    snprintf(empty_shared, sizeof empty_shared, "%s/empty-shared", tmp);
    mpx_cifar10_opts oe = {.cache_dir = empty_cache, .shared_dir = empty_shared};
    mpx_status st = mpx_cifar10_load(&oe, MPX_SPLIT_TRAIN, &bad, &info);
    expect_error(st, "empty-cache/cifar-10-batches-bin", "empty-shared/cifar10-jpg.tar.gz",
                 "no data at all");
    CHECK(strstr(mpx_error_message(), "data_batch_1.bin") && strstr(mpx_error_message(), "network"),
          "the message lists the missing files and the download step: %s", mpx_error_message());

    mpx_dataset_free(&train);
    mpx_dataset_free(&test);
    free_jpegs(&J);
}

int main(void) {
    char tmp[1024];
    REQUIRE(mpx_test_tmpdir("data_cifar", tmp, sizeof tmp)[0], "no temp dir");
    test_binary_reader(tmp);
    test_conversion(tmp);
    sh("rm -rf '%s'", tmp);
    return mpx_test_done(__FILE__);
}
