/* cifar10.c — CIFAR-10 binary batches: reading (CHW records -> HWC images), finding the data
 * (cache, else one-time conversion of the JPEG archive, else a clear error). The conversion
 * itself is in cifar10_convert.c. */
#include "data/cifar10.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "mpx/fsutil.h"
#include "data/sha256.h"
#include "mpx/data.h"
#include "mpx/runtime.h"

static int split_files(mpx_split split) {
    return split == MPX_SPLIT_TRAIN ? MPX_CIFAR10_TRAIN_FILES : 1;
}

/* Records [first, first + count) of one file into ds (HWC), hashing the bytes read. */
static mpx_status read_file(const char *path, FILE *f, int64_t count, int64_t first,
                            mpx_dataset *ds, mpx_sha256 *sha) {
    enum { CHUNK = 1000 };
    uint8_t *buf = malloc((size_t)CHUNK * MPX_CIFAR10_RECORD);
    if (!buf) return mpx_fail(MPX_ERR_NOMEM, "out of memory reading '%s'", path);
    mpx_status st = MPX_OK;
    for (int64_t r0 = 0; r0 < count && st == MPX_OK; r0 += CHUNK) {
        int64_t k = count - r0 < CHUNK ? count - r0 : CHUNK;
        size_t bytes = (size_t)k * MPX_CIFAR10_RECORD;
        if (fread(buf, 1, bytes, f) != bytes) {
            st = mpx_fail(MPX_ERR_INPUT, "'%s': short read at record %lld (file changed?)", path,
                          (long long)r0);
            break;
        }
        mpx_sha256_update(sha, buf, bytes);
        for (int64_t r = 0; r < k; r++) {
            const uint8_t *rec = buf + (size_t)r * MPX_CIFAR10_RECORD;
            if (rec[0] > 9) {
                st = mpx_fail(MPX_ERR_INPUT,
                              "'%s' record %lld: label %d is not in 0..9 (corrupt file)", path,
                              (long long)(r0 + r), rec[0]);
                break;
            }
            int64_t i = first + r0 + r;
            ds->labels[i] = rec[0];
            uint8_t *img = ds->images + (size_t)i * 3 * MPX_CIFAR10_PLANE;
            /* record: planes R, G, B of 32x32 row-major; image: HWC */
            for (int p = 0; p < MPX_CIFAR10_PLANE; p++)
                for (int ch = 0; ch < 3; ch++)
                    img[3 * p + ch] = rec[1 + ch * MPX_CIFAR10_PLANE + p];
        }
    }
    free(buf);
    return st;
}

mpx_status mpx_cifar10_read_dir(const char *dir, mpx_split split, mpx_dataset *out,
                                int *checksummed) {
    memset(out, 0, sizeof *out);
    if (checksummed) *checksummed = 0;
    int nfiles = split_files(split);
    char paths[MPX_CIFAR10_TRAIN_FILES][1100];
    int64_t counts[MPX_CIFAR10_TRAIN_FILES], total = 0;
    for (int i = 0; i < nfiles; i++) {
        MPX_TRY(mpx_fs_join(paths[i], sizeof paths[i], dir, mpx_cifar10_file_name(split, i)));
        int64_t size = mpx_fs_file_size(paths[i]);
        if (size < 0) return mpx_fail(MPX_ERR_INPUT, "CIFAR-10 file '%s' is missing", paths[i]);
        if (size == 0 || size % MPX_CIFAR10_RECORD != 0)
            return mpx_fail(MPX_ERR_INPUT,
                            "CIFAR-10 file '%s' has %lld bytes, not a whole number of %d-byte "
                            "records (truncated or not CIFAR-10 binary)",
                            paths[i], (long long)size, MPX_CIFAR10_RECORD);
        counts[i] = size / MPX_CIFAR10_RECORD;
        total += counts[i];
    }
    char manifest_path[1100], *manifest = NULL;
    size_t mlen;
    MPX_TRY(mpx_fs_join(manifest_path, sizeof manifest_path, dir, MPX_CIFAR10_MANIFEST));
    if (mpx_fs_file_size(manifest_path) >= 0)
        MPX_TRY(mpx_fs_read_all(manifest_path, &manifest, &mlen));

    mpx_status st = mpx_dataset_alloc(out, total, MPX_CIFAR10_SIDE, MPX_CIFAR10_SIDE, 3, 10);
    if (st == MPX_OK) st = mpx_dataset_set_class_names(out, mpx_cifar10_class_names);
    int64_t first = 0;
    for (int i = 0; i < nfiles && st == MPX_OK; first += counts[i], i++) {
        FILE *f = fopen(paths[i], "rb");
        if (!f) {
            st = mpx_fail(MPX_ERR_IO, "cannot open '%s': %s", paths[i], strerror(errno));
            break;
        }
        mpx_sha256 sha;
        mpx_sha256_init(&sha);
        st = read_file(paths[i], f, counts[i], first, out, &sha);
        fclose(f);
        if (st != MPX_OK || !manifest) continue;
        char want[65], got[65];
        mpx_sha256_final_hex(&sha, got);
        if (!mpx_sha256_manifest_lookup(manifest, mpx_cifar10_file_name(split, i), want))
            st = mpx_fail(MPX_ERR_INPUT,
                          "manifest '%s' does not list '%s' (corrupt cache: delete '%s' "
                          "to rebuild it)",
                          manifest_path, mpx_cifar10_file_name(split, i), dir);
        else if (strcmp(want, got) != 0)
            st = mpx_fail(MPX_ERR_INPUT,
                          "CIFAR-10 file '%s' does not match its checksum in '%s' (sha256 %s, "
                          "expected %s): the cache is corrupt; delete '%s' to rebuild it",
                          paths[i], manifest_path, got, want, dir);
    }
    free(manifest);
    if (st != MPX_OK) {
        mpx_dataset_free(out);
        return st;
    }
    if (checksummed) *checksummed = manifest != NULL;
    return MPX_OK;
}

/* ---- finding the data ---- */

typedef struct {
    char cache[1000], shared[1000], batches[1024], archive[1024];
    int64_t n[2]; /* expected train, test */
} sources;

static mpx_status resolve(const mpx_cifar10_opts *o, sources *s) {
    static const mpx_cifar10_opts defaults = {0};
    if (!o) o = &defaults;
    int k1 = snprintf(s->cache, sizeof s->cache, "%s",
                      o->cache_dir ? o->cache_dir : mpx_data_cache_dir());
    int k2 = snprintf(s->shared, sizeof s->shared, "%s",
                      o->shared_dir ? o->shared_dir : mpx_data_shared_dir());
    if (k1 < 0 || k1 >= (int)sizeof s->cache || k2 < 0 || k2 >= (int)sizeof s->shared)
        return mpx_fail(MPX_ERR_INPUT, "CIFAR-10: cache or shared directory path too long");
    MPX_TRY(mpx_fs_join(s->batches, sizeof s->batches, s->cache, MPX_CIFAR10_DIRNAME));
    MPX_TRY(mpx_fs_join(s->archive, sizeof s->archive, s->shared, MPX_CIFAR10_ARCHIVE));
    s->n[0] = o->n_train ? o->n_train : MPX_CIFAR10_OFFICIAL_TRAIN;
    s->n[1] = o->n_test ? o->n_test : MPX_CIFAR10_OFFICIAL_TEST;
    if (s->n[0] < 0 || s->n[1] < 0 || s->n[0] % 10 || s->n[1] % 10)
        return mpx_fail(MPX_ERR_INPUT,
                        "CIFAR-10: expected counts %lld / %lld must be multiples of 10",
                        (long long)s->n[0], (long long)s->n[1]);
    return MPX_OK;
}

/* Names of missing batch files into `missing` (empty when all six are there). */
static void find_missing(const char *batches, char *missing, size_t cap) {
    missing[0] = '\0';
    for (int split = 0; split < 2; split++)
        for (int i = 0; i < split_files(split); i++) {
            char p[1200];
            snprintf(p, sizeof p, "%s/%s", batches, mpx_cifar10_file_name(split, i));
            if (mpx_fs_file_size(p) < 0) {
                size_t len = strlen(missing);
                snprintf(missing + len, cap - len, "%s%s", len ? ", " : "",
                         mpx_cifar10_file_name(split, i));
            }
        }
}

/* A complete cache must hold the expected number of records per split. */
static mpx_status check_sizes(const sources *s) {
    for (int split = 0; split < 2; split++) {
        int64_t bytes = 0;
        for (int i = 0; i < split_files(split); i++) {
            char p[1200];
            snprintf(p, sizeof p, "%s/%s", s->batches, mpx_cifar10_file_name(split, i));
            bytes += mpx_fs_file_size(p);
        }
        if (bytes != s->n[split] * MPX_CIFAR10_RECORD)
            return mpx_fail(
                MPX_ERR_INPUT,
                "CIFAR-10 cache '%s': the %s files hold %lld bytes, expected %lld "
                "(%lld records of %d bytes): incomplete or corrupt; delete it to rebuild "
                "it from '%s'",
                s->batches, split ? "test" : "training", (long long)bytes,
                (long long)(s->n[split] * MPX_CIFAR10_RECORD), (long long)s->n[split],
                MPX_CIFAR10_RECORD, s->archive);
    }
    return MPX_OK;
}

/* Convert under an exclusive lock so concurrent processes convert once. */
static mpx_status convert_locked(const sources *s, const mpx_cifar10_opts *o,
                                 mpx_cifar10_info *info) {
    MPX_TRY(mpx_fs_mkdirs(s->batches));
    char lock_path[1200];
    snprintf(lock_path, sizeof lock_path, "%s/.cifar10.lock", s->cache);
    int fd = open(lock_path, O_RDWR | O_CREAT, 0644);
    if (fd < 0)
        return mpx_fail(MPX_ERR_IO, "cannot create lock '%s': %s", lock_path, strerror(errno));
    while (flock(fd, LOCK_EX) != 0)
        if (errno != EINTR) {
            close(fd);
            return mpx_fail(MPX_ERR_IO, "cannot lock '%s': %s", lock_path, strerror(errno));
        }
    char missing[256];
    find_missing(s->batches, missing, sizeof missing);
    mpx_status st = MPX_OK;
    if (missing[0]) { /* still missing: nobody converted while we waited */
        if (o && o->progress)
            fprintf(stderr, "mpx: converting %s into %s (one time)\n", s->archive, s->batches);
        double t0 = mpx_now();
        st = mpx_cifar10_convert(s->archive, s->batches, s->n[0], s->n[1]);
        info->converted = st == MPX_OK;
        info->convert_s = mpx_now() - t0;
        if (o && o->progress && st == MPX_OK)
            fprintf(stderr, "mpx: converted %lld images in %.1f s\n",
                    (long long)(s->n[0] + s->n[1]), info->convert_s);
    }
    flock(fd, LOCK_UN);
    close(fd);
    return st;
}

mpx_status mpx_cifar10_prepare(const mpx_cifar10_opts *o, mpx_cifar10_info *info) {
    mpx_cifar10_info scratch;
    if (!info) info = &scratch;
    memset(info, 0, sizeof *info);
    sources s;
    MPX_TRY(resolve(o, &s));
    snprintf(info->batches_dir, sizeof info->batches_dir, "%s", s.batches);
    char missing[256];
    find_missing(s.batches, missing, sizeof missing);
    if (missing[0]) {
        if (mpx_fs_file_size(s.archive) < 0)
            return mpx_fail(
                MPX_ERR_INPUT,
                "CIFAR-10 not found. Tried, in order: (1) the binary batches in '%s' "
                "(missing: %s); (2) the JPEG archive '%s' (not found); (3) download: not "
                "attempted (no network access). Provide the data by extracting the "
                "official cifar-10-binary.tar.gz (https://www.cs.toronto.edu/~kriz/"
                "cifar.html) so that '%s/data_batch_1.bin' exists, or by placing "
                "cifar10-jpg.tar.gz (train/<class>/*.jpg, test/<class>/*.jpg) in '%s'",
                s.batches, missing, s.archive, s.batches, s.shared);
        MPX_TRY(convert_locked(&s, o, info));
    }
    return check_sizes(&s);
}

mpx_status mpx_cifar10_load(const mpx_cifar10_opts *o, mpx_split split, mpx_dataset *out,
                            mpx_cifar10_info *info) {
    mpx_cifar10_info scratch;
    if (!info) info = &scratch;
    memset(out, 0, sizeof *out);
    MPX_TRY(mpx_cifar10_prepare(o, info));
    return mpx_cifar10_read_dir(info->batches_dir, split, out, &info->checksummed);
}
