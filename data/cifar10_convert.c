/* cifar10_convert.c — the one-time conversion of the CIFAR-10 JPEG archive
 * (train/<class>/NNNN.jpg, test/<class>/NNNN.jpg) into the official binary batches.
 *
 * The archive is streamed (zlib + tar parser, nothing extracted); every JPEG is kept in
 * memory (~60 MB for CIFAR-10), the entries are sorted by (split, class, file name) and
 * interleaved class by class: record k of a split is the (k / 10)-th file of class k % 10.
 * Training records 0..N/5-1 go to data_batch_1.bin, and so on. JPEGs are decoded in parallel
 * (OpenMP) straight into their record slot, so the output does not depend on thread timing.
 * Files are written under temporary names, the manifest (SHA256SUMS) and batches.meta.txt
 * next, and the batch files renamed into place last: all six final names exist only after
 * the manifest describing them does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
/* jpeglib.h needs stdio.h (FILE, size_t) first */
#include <jpeglib.h>

#include "data/cifar10.h"
#include "mpx/fsutil.h"
#include "data/jpeg_io.h"
#include "data/sha256.h"
#include "data/archive.h"
#include "mpx/data.h"
#include "mpx/runtime.h"

enum { MAX_JPEG_BYTES = 1 << 20 }; /* a 32x32 JPEG is ~1 KB; anything huge is not CIFAR */

typedef struct {
    int split, label;
    char *name; /* file name within its class folder */
    size_t off, size;
} entry;

typedef struct {
    entry *e;
    size_t n, cap;
    uint8_t *blob;
    size_t blob_n, blob_cap;
} collection;

static void collection_free(collection *c) {
    for (size_t i = 0; i < c->n; i++) free(c->e[i].name);
    free(c->e);
    free(c->blob);
}

static int entry_cmp(const void *pa, const void *pb) {
    const entry *a = pa, *b = pb;
    if (a->split != b->split) return a->split - b->split;
    if (a->label != b->label) return a->label - b->label;
    return strcmp(a->name, b->name);
}

static int has_jpeg_ext(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot && (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0);
}

/* Classify "<train|test>/<class>/<file>"; 0 when the entry is outside train/ and test/. */
static mpx_status classify(const char *archive, const char *path, int *split, int *label,
                           const char **file, int *keep) {
    *keep = 0;
    const char *s1 = strchr(path, '/');
    if (!s1) return MPX_OK;
    size_t top = (size_t)(s1 - path);
    if (top == 5 && memcmp(path, "train", 5) == 0)
        *split = MPX_SPLIT_TRAIN;
    else if (top == 4 && memcmp(path, "test", 4) == 0)
        *split = MPX_SPLIT_TEST;
    else
        return MPX_OK;
    const char *s2 = strchr(s1 + 1, '/');
    if (!s2 || strchr(s2 + 1, '/') || !s2[1] || !has_jpeg_ext(s2 + 1))
        return mpx_fail(MPX_ERR_INPUT,
                        "archive '%s': unexpected file '%s' (expected train/<class>/NNNN.jpg or "
                        "test/<class>/NNNN.jpg)",
                        archive, path);
    size_t clen = (size_t)(s2 - s1 - 1);
    for (int k = 0; k < 10; k++)
        if (strlen(mpx_cifar10_class_names[k]) == clen &&
            memcmp(s1 + 1, mpx_cifar10_class_names[k], clen) == 0) {
            *label = k;
            *file = s2 + 1;
            *keep = 1;
            return MPX_OK;
        }
    return mpx_fail(MPX_ERR_INPUT, "archive '%s': entry '%s' is in an unknown class folder '%.*s'",
                    archive, path, (int)clen, s1 + 1);
}

static mpx_status collect(const char *archive, collection *c) {
    mpx_archive *t;
    MPX_TRY(mpx_archive_open(archive, &t));
    mpx_status st = MPX_OK;
    for (;;) {
        mpx_archive_entry te;
        int done, keep, split = 0, label = 0;
        const char *file = NULL;
        if ((st = mpx_archive_next(t, &te, &done)) != MPX_OK || done) break;
        if (te.type != '0') continue;
        if ((st = classify(archive, te.name, &split, &label, &file, &keep)) != MPX_OK) break;
        if (!keep) continue;
        if (te.size <= 0 || te.size > MAX_JPEG_BYTES) {
            st = mpx_fail(MPX_ERR_INPUT,
                          "archive '%s': entry '%s' has %lld bytes (not a CIFAR JPEG)", archive,
                          te.name, (long long)te.size);
            break;
        }
        if (c->n == c->cap) {
            size_t cap = c->cap ? 2 * c->cap : 4096;
            entry *ne = realloc(c->e, cap * sizeof *ne);
            if (!ne) {
                st = mpx_fail(MPX_ERR_NOMEM, "out of memory listing '%s'", archive);
                break;
            }
            c->e = ne;
            c->cap = cap;
        }
        if (c->blob_n + (size_t)te.size > c->blob_cap) {
            size_t cap = c->blob_cap ? 2 * c->blob_cap : (size_t)1 << 24;
            while (cap < c->blob_n + (size_t)te.size) cap *= 2;
            uint8_t *nb = realloc(c->blob, cap);
            if (!nb) {
                st = mpx_fail(MPX_ERR_NOMEM, "out of memory reading '%s'", archive);
                break;
            }
            c->blob = nb;
            c->blob_cap = cap;
        }
        entry *e = &c->e[c->n];
        e->split = split;
        e->label = label;
        e->off = c->blob_n;
        e->size = (size_t)te.size;
        if (!(e->name = strdup(file))) {
            st = mpx_fail(MPX_ERR_NOMEM, "out of memory");
            break;
        }
        c->n++;
        if ((st = mpx_archive_read(t, c->blob + c->blob_n, e->size)) != MPX_OK) break;
        c->blob_n += e->size;
    }
    mpx_archive_close(t);
    return st;
}

/* Every class of a split must hold n_split / 10 images; names must be unique in a class. */
static mpx_status check_counts(const char *archive, const collection *c, const int64_t n[2]) {
    int64_t count[2][10] = {{0}};
    for (size_t i = 0; i < c->n; i++) count[c->e[i].split][c->e[i].label]++;
    for (int s = 0; s < 2; s++) {
        char list[400] = "";
        int bad = 0;
        for (int k = 0; k < 10; k++) {
            size_t len = strlen(list);
            snprintf(list + len, sizeof list - len, "%s%s %lld", k ? ", " : "",
                     mpx_cifar10_class_names[k], (long long)count[s][k]);
            bad |= count[s][k] != n[s] / 10;
        }
        if (bad)
            return mpx_fail(MPX_ERR_INPUT,
                            "archive '%s': %s split must hold %lld images per class (%lld in all), "
                            "found: %s",
                            archive, s ? "test" : "train", (long long)(n[s] / 10), (long long)n[s],
                            list);
    }
    for (size_t i = 1; i < c->n; i++)
        if (entry_cmp(&c->e[i - 1], &c->e[i]) == 0)
            return mpx_fail(MPX_ERR_INPUT, "archive '%s': duplicate entry %s/%s/%s", archive,
                            c->e[i].split ? "test" : "train",
                            mpx_cifar10_class_names[c->e[i].label], c->e[i].name);
    return MPX_OK;
}

/* Decode `count` records starting at record `first` of a split (entries from `base`, sorted,
 * n_split / 10 per class) into out (count * 3073 bytes). */
static mpx_status decode_records(const char *archive, const collection *c, size_t base,
                                 int64_t per_class, int64_t first, int64_t count, uint8_t *out) {
    mpx_status st = MPX_OK;
    int failed = 0;
    char msg[1024] = "";
#pragma omp parallel
    {
        uint8_t *pix = NULL;
        size_t cap = 0;
#pragma omp for schedule(dynamic, 64)
        for (int64_t r = 0; r < count; r++) {
            int stop;
#pragma omp atomic read
            stop = failed;
            if (stop) continue;
            int64_t k = first + r;
            const entry *e = &c->e[base + (size_t)((k % 10) * per_class + k / 10)];
            char name[1200];
            snprintf(name, sizeof name, "%s/%s/%s/%s", archive, e->split ? "test" : "train",
                     mpx_cifar10_class_names[e->label], e->name);
            mpx_jpeg_info info;
            mpx_status s =
                mpx_jpeg_decode(c->blob + e->off, e->size, NULL, name, 1, &pix, &cap, &info);
            if (s == MPX_OK && (info.h != 32 || info.w != 32 || info.components != 3))
                s = mpx_fail(MPX_ERR_INPUT, "'%s' is %dx%dx%d, expected 32x32x3 (not CIFAR-10)",
                             name, info.h, info.w, info.components);
            if (s != MPX_OK) {
#pragma omp critical(mpx_cifar10_convert_error)
                if (!failed) {
                    snprintf(msg, sizeof msg, "%s", mpx_error_message());
                    st = s;
#pragma omp atomic write
                    failed = 1;
                }
                continue;
            }
            uint8_t *rec = out + (size_t)r * MPX_CIFAR10_RECORD;
            rec[0] = (uint8_t)e->label;
            for (int p = 0; p < MPX_CIFAR10_PLANE; p++)
                for (int ch = 0; ch < 3; ch++)
                    rec[1 + ch * MPX_CIFAR10_PLANE + p] = pix[3 * p + ch];
        }
        free(pix);
    }
    if (failed) return mpx_fail(st, "%s", msg);
    return MPX_OK;
}

mpx_status mpx_cifar10_convert(const char *archive, const char *batches_dir, int64_t n_train,
                               int64_t n_test) {
    if (n_train <= 0 || n_test <= 0 || n_train % 10 || n_test % 10)
        return mpx_fail(MPX_ERR_INPUT,
                        "CIFAR-10 conversion: counts %lld / %lld must be positive "
                        "multiples of 10",
                        (long long)n_train, (long long)n_test);
    char archive_sha[65];
    MPX_TRY(mpx_sha256_check_beside(archive, archive_sha, NULL));
    MPX_TRY(mpx_fs_mkdirs(batches_dir));
    collection c = {0};
    const int64_t n[2] = {n_train, n_test};
    mpx_status st = collect(archive, &c);
    if (st == MPX_OK) {
        qsort(c.e, c.n, sizeof *c.e, entry_cmp);
        st = check_counts(archive, &c, n);
    }
    /* Six files: 5 x (n_train / 5) training records, then the test split. */
    int64_t per_file = n_train / MPX_CIFAR10_TRAIN_FILES;
    int64_t max_records = per_file > n_test ? per_file : n_test;
    uint8_t *buf = st == MPX_OK ? malloc((size_t)max_records * MPX_CIFAR10_RECORD) : NULL;
    if (st == MPX_OK && !buf)
        st = mpx_fail(MPX_ERR_NOMEM, "out of memory converting '%s'", archive);
    char manifest[1024] = "", tmp[6][1200], final[6][1100];
    int written = 0;
    for (int f = 0; f < 6 && st == MPX_OK; f++) {
        int split = f < 5 ? MPX_SPLIT_TRAIN : MPX_SPLIT_TEST;
        int64_t first = f < 5 ? f * per_file : 0, count = f < 5 ? per_file : n_test;
        size_t base = split == MPX_SPLIT_TRAIN ? 0 : (size_t)n_train;
        const char *name = mpx_cifar10_file_name(split, f < 5 ? f : 0);
        st = decode_records(archive, &c, base, n[split] / 10, first, count, buf);
        if (st != MPX_OK) break;
        if ((st = mpx_fs_join(final[f], sizeof final[f], batches_dir, name)) != MPX_OK) break;
        snprintf(tmp[f], sizeof tmp[f], "%.1090s.tmp.%ld", final[f], (long)getpid());
        st = mpx_fs_write_synced(tmp[f], buf, (size_t)count * MPX_CIFAR10_RECORD);
        if (st != MPX_OK) break;
        written = f + 1;
        mpx_sha256 sha;
        char hex[65];
        mpx_sha256_init(&sha);
        mpx_sha256_update(&sha, buf, (size_t)count * MPX_CIFAR10_RECORD);
        mpx_sha256_final_hex(&sha, hex);
        size_t len = strlen(manifest);
        snprintf(manifest + len, sizeof manifest - len, "%s  %s\n", hex, name);
    }
    free(buf);
    collection_free(&c);
    char path[1200], meta[256] = "", source[2600];
    if (st == MPX_OK) {
        for (int k = 0; k < 10; k++) {
            size_t len = strlen(meta);
            snprintf(meta + len, sizeof meta - len, "%s\n", mpx_cifar10_class_names[k]);
        }
        snprintf(path, sizeof path, "%s/batches.meta.txt", batches_dir);
        st = mpx_fs_write_atomic(path, meta, strlen(meta));
    }
    if (st == MPX_OK) {
        snprintf(
            source, sizeof source,
            "CIFAR-10 binary batches converted by mpx %s from %s (sha256 %s), libjpeg %d "
            "(JDCT_ISLOW).\nRecord order per split: files sorted by (class, name), interleaved "
            "class by class (record k = file k/10 of class k%%10); training records split "
            "into 5 files of %lld.\n",
            mpx_version(), archive, archive_sha, JPEG_LIB_VERSION, (long long)per_file);
        snprintf(path, sizeof path, "%s/SOURCE.txt", batches_dir);
        st = mpx_fs_write_atomic(path, source, strlen(source));
    }
    if (st == MPX_OK) {
        snprintf(path, sizeof path, "%s/" MPX_CIFAR10_MANIFEST, batches_dir);
        st = mpx_fs_write_atomic(path, manifest, strlen(manifest));
    }
    for (int f = 0; f < written; f++) {
        if (st == MPX_OK) st = mpx_fs_rename(tmp[f], final[f]);
        if (st != MPX_OK) unlink(tmp[f]);
    }
    return st;
}
