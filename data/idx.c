/* idx.c — IDX files (MNIST, Fashion-MNIST): magic 00 00 08 <ndim>, big-endian int32 dims,
 * then unsigned bytes. Read through zlib's gzopen, which reads gzip and raw files alike. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "mpx/fsutil.h"
#include "mpx/data.h"

static const char *const fashion_names[10] = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                              "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                              "Bag",         "Ankle boot"};
static const char *const digit_names[10] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};

static mpx_status gz_read_exact(gzFile gz, const char *path, void *buf, size_t n,
                                const char *what) {
    size_t got = 0;
    while (got < n) {
        unsigned chunk = n - got > (1u << 30) ? (1u << 30) : (unsigned)(n - got);
        int k = gzread(gz, (char *)buf + got, chunk);
        if (k < 0) {
            int e;
            return mpx_fail(MPX_ERR_INPUT, "IDX file '%s' is corrupt reading %s: %s", path, what,
                            gzerror(gz, &e));
        }
        if (k == 0)
            return mpx_fail(MPX_ERR_INPUT, "IDX file '%s' is truncated: %s has %zu of %zu bytes",
                            path, what, got, n);
        got += (size_t)k;
    }
    return MPX_OK;
}

/* Open and read the header: dims[0..ndim). Rejects non-ubyte types and ndim outside [lo, hi]. */
static mpx_status open_idx(const char *path, int lo, int hi, gzFile *out, int *ndim,
                           int64_t dims[4]) {
    *out = NULL;
    gzFile gz = gzopen(path, "rb");
    if (!gz) return mpx_fail(MPX_ERR_INPUT, "cannot open IDX file '%s': %s", path, strerror(errno));
    gzbuffer(gz, 1 << 17);
    uint8_t m[4];
    mpx_status st = gz_read_exact(gz, path, m, 4, "the magic number");
    if (st == MPX_OK && (m[0] != 0 || m[1] != 0))
        st = mpx_fail(MPX_ERR_INPUT, "'%s' is not an IDX file (magic %02x %02x %02x %02x)", path,
                      m[0], m[1], m[2], m[3]);
    if (st == MPX_OK && m[2] != 0x08)
        st = mpx_fail(MPX_ERR_INPUT,
                      "IDX file '%s' has element type 0x%02x; only unsigned bytes (0x08) "
                      "are supported",
                      path, m[2]);
    if (st == MPX_OK && (m[3] < lo || m[3] > hi))
        st = mpx_fail(MPX_ERR_INPUT, "IDX file '%s' has %d dimensions, expected %d%s%d", path, m[3],
                      lo, lo == hi ? "" : " to ", hi);
    for (int i = 0; st == MPX_OK && i < m[3]; i++) {
        uint8_t b[4];
        st = gz_read_exact(gz, path, b, 4, "the dimensions");
        dims[i] = (int64_t)b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3];
        if (st == MPX_OK && (dims[i] <= 0 || dims[i] > (1 << 30)))
            st = mpx_fail(MPX_ERR_INPUT, "IDX file '%s': dimension %d is %lld", path, i,
                          (long long)dims[i]);
    }
    if (st != MPX_OK) {
        gzclose(gz);
        return st;
    }
    *ndim = m[3];
    *out = gz;
    return MPX_OK;
}

/* Read exactly n bytes of data and require the end of the file right after them. */
static mpx_status read_body(gzFile gz, const char *path, void *buf, size_t n) {
    MPX_TRY(gz_read_exact(gz, path, buf, n, "the data"));
    char extra;
    int k = gzread(gz, &extra, 1);
    if (k < 0) {
        int e;
        return mpx_fail(MPX_ERR_INPUT, "IDX file '%s' is corrupt at its end: %s", path,
                        gzerror(gz, &e));
    }
    if (k > 0)
        return mpx_fail(MPX_ERR_INPUT,
                        "IDX file '%s' has data after the %zu bytes its header declares", path, n);
    return MPX_OK;
}

/* A header may declare more data than the file can hold (a corrupt or hostile file): refuse
 * before allocating. Raw files must hold at least the declared bytes (read_body rejects more),
 * gzip files at most 1032 bytes per compressed byte (deflate's largest ratio). Dimensions are
 * below 2^30 each, so the product is computed in long double without overflow. */
static mpx_status check_declared_size(gzFile gz, const char *path, int ndim, const int64_t *d) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return mpx_fail(MPX_ERR_IO, "IDX file '%s': %s", path, strerror(errno));
    long double declared = (long double)d[0] * d[1] * d[2] * d[3];
    long double header = 4.0L + 4.0L * ndim, size = (long double)sb.st_size;
    int raw = gzdirect(gz);
    if ((raw && declared > size - header) || (!raw && declared > 1032.0L * size))
        return mpx_fail(MPX_ERR_INPUT,
                        "IDX file '%s': its header declares %.0Lf bytes of data but the file %s "
                        "%lld bytes: truncated or corrupt",
                        path, declared, raw ? "holds" : "(gzip) is", (long long)sb.st_size);
    return MPX_OK;
}

mpx_status mpx_idx_read(const char *images_path, const char *labels_path, int num_classes,
                        mpx_dataset *out) {
    memset(out, 0, sizeof *out);
    gzFile gi, gl;
    int ndi, ndl;
    int64_t di[4] = {0, 0, 0, 1}, dl[4];
    MPX_TRY(open_idx(images_path, 3, 4, &gi, &ndi, di));
    mpx_status st = open_idx(labels_path, 1, 1, &gl, &ndl, dl);
    if (st != MPX_OK) {
        gzclose(gi);
        return st;
    }
    if (dl[0] != di[0])
        st = mpx_fail(MPX_ERR_INPUT,
                      "IDX files disagree: '%s' has %lld images but '%s' has %lld labels",
                      images_path, (long long)di[0], labels_path, (long long)dl[0]);
    if (st == MPX_OK && di[3] > MPX_DATA_MAX_CHANNELS)
        st = mpx_fail(MPX_ERR_INPUT, "IDX file '%s': %lld channels (at most %d)", images_path,
                      (long long)di[3], MPX_DATA_MAX_CHANNELS);
    uint8_t *labels = NULL;
    if (st == MPX_OK && !(labels = malloc((size_t)dl[0])))
        st = mpx_fail(MPX_ERR_NOMEM, "out of memory reading '%s'", labels_path);
    if (st == MPX_OK) st = read_body(gl, labels_path, labels, (size_t)dl[0]);
    int maxl = 0;
    for (int64_t i = 0; st == MPX_OK && i < dl[0]; i++) maxl = labels[i] > maxl ? labels[i] : maxl;
    if (st == MPX_OK && num_classes > 0 && maxl >= num_classes) {
        int64_t i = 0;
        while (labels[i] < num_classes) i++;
        st = mpx_fail(MPX_ERR_INPUT, "IDX file '%s': label %d of example %lld is not below %d",
                      labels_path, labels[i], (long long)i, num_classes);
    }
    if (st == MPX_OK) st = check_declared_size(gi, images_path, ndi, di);
    if (st == MPX_OK)
        st = mpx_dataset_alloc(out, di[0], (int)di[1], (int)di[2], (int)di[3],
                               num_classes > 0 ? num_classes : maxl + 1);
    if (st == MPX_OK)
        st = read_body(gi, images_path, out->images,
                       (size_t)di[0] * (size_t)di[1] * (size_t)di[2] * (size_t)di[3]);
    for (int64_t i = 0; st == MPX_OK && i < dl[0]; i++) out->labels[i] = labels[i];
    free(labels);
    gzclose(gi);
    gzclose(gl);
    if (st != MPX_OK) mpx_dataset_free(out);
    return st;
}

/* "<dir>/<prefix>-<kind>-ubyte.gz", else without ".gz"; the .gz name when neither exists. */
static void idx_path(char *buf, size_t cap, const char *dir, const char *prefix, const char *kind) {
    snprintf(buf, cap, "%s/%s-%s-ubyte.gz", dir, prefix, kind);
    if (mpx_fs_file_size(buf) >= 0) return;
    snprintf(buf, cap, "%s/%s-%s-ubyte", dir, prefix, kind);
    if (mpx_fs_file_size(buf) < 0) snprintf(buf, cap, "%s/%s-%s-ubyte.gz", dir, prefix, kind);
}

static mpx_status load_dir(const char *dir, mpx_split split, const char *const *names,
                           const char *what, mpx_dataset *out) {
    memset(out, 0, sizeof *out);
    const char *prefix = split == MPX_SPLIT_TRAIN ? "train" : "t10k";
    char ip[1200], lp[1200];
    idx_path(ip, sizeof ip, dir, prefix, "images-idx3");
    idx_path(lp, sizeof lp, dir, prefix, "labels-idx1");
    if (mpx_fs_file_size(ip) < 0 || mpx_fs_file_size(lp) < 0)
        return mpx_fail(
            MPX_ERR_INPUT, "%s not found: need '%s' and '%s' (or the same names without .gz)%s",
            what, ip, lp,
            names == fashion_names ? "; on Debian: apt-get install dataset-fashion-mnist" : "");
    MPX_TRY(mpx_idx_read(ip, lp, 10, out));
    mpx_status st = mpx_dataset_set_class_names(out, names);
    if (st != MPX_OK) mpx_dataset_free(out);
    return st;
}

mpx_status mpx_fashion_mnist_load(const char *dir, mpx_split split, mpx_dataset *out) {
    return load_dir(dir ? dir : "/usr/share/datasets/fashion-mnist", split, fashion_names,
                    "Fashion-MNIST", out);
}

mpx_status mpx_mnist_load(const char *dir, mpx_split split, mpx_dataset *out) {
    if (!dir) {
        memset(out, 0, sizeof *out);
        return mpx_fail(MPX_ERR_INPUT, "MNIST: no directory given (it has no default location)");
    }
    return load_dir(dir, split, digit_names, "MNIST", out);
}
