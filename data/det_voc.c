/* det_voc.c — loading one split of a Pascal VOC-layout source into memory.
 *
 * 1. Collect the files that matter, from a directory tree (up to 6 levels) or a tar.gz stream
 *    (data/archive.c): <root>/{Annotations,annotations}/ *.xml, <root>/{JPEGImages,images}/ *.jpg,
 *    <root>/{train,test}_labels.csv and <root>/ImageSets/Main/{trainval,train,test,val}.txt.
 *    The dataset root is the one folder holding annotations. Annotations, CSVs and split lists
 *    are read into memory; JPEGs too from an archive, from disk when decoded otherwise.
 * 2. Parse every annotation (det_voc_parse.c), sorted by id (the file stem), and map classes.
 * 3. Choose the split's images (see split_* below), then decode and resize them in parallel,
 *    each into its own slot, so the result does not depend on the thread count.
 */
#include "data/det_voc.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mpx/fsutil.h"
#include "data/jpeg_io.h"
#include "data/resample.h"
#include "data/sha256.h"
#include "data/archive.h"
#include "mpx/runtime.h"

enum { MAX_TEXT_FILE = 16 << 20, MAX_JPEG = 64 << 20, MAX_WALK_DEPTH = 6 };

static const char *const set_names[4] = {"trainval.txt", "train.txt", "test.txt", "val.txt"};

void mpx_voc_files_free(mpx_voc_files *f) {
    for (size_t i = 0; i < f->n; i++) {
        free(f->e[i].root);
        free(f->e[i].name);
        free(f->e[i].path);
        free(f->e[i].data);
    }
    free(f->e);
    memset(f, 0, sizeof *f);
}

static int has_ext(const char *name, const char *a, const char *b) {
    const char *dot = strrchr(name, '.');
    return dot && (strcasecmp(dot, a) == 0 || (b && strcasecmp(dot, b) == 0));
}

/* Classify a path relative to the source; 0 when it is not a file we use. */
static int classify(const char *rel, mpx_voc_kind *kind, mpx_voc_layout *layout, size_t *root_len,
                    const char **base) {
    const char *slash = strrchr(rel, '/');
    const char *b = slash ? slash + 1 : rel;
    size_t dir_end = slash ? (size_t)(slash - rel) : 0;
    if (!b[0] || b[0] == '.') return 0; /* hidden files (macOS "._x.xml" resource forks) */
    *base = b;
    if (strcmp(b, "train_labels.csv") == 0 || strcmp(b, "test_labels.csv") == 0) {
        *kind = strcmp(b, "train_labels.csv") == 0 ? MPX_VOC_CSV_TRAIN : MPX_VOC_CSV_TEST;
        *layout = MPX_VOC_LAYOUT_RACCOON;
        *root_len = dir_end;
        return 1;
    }
    if (!slash) return 0;
    /* the folder holding the file and where it starts */
    size_t ds = dir_end;
    while (ds > 0 && rel[ds - 1] != '/') ds--;
    const char *dir = rel + ds;
    size_t dlen = dir_end - ds;
    size_t root = ds ? ds - 1 : 0;
#define DIR_IS(s) (dlen == strlen(s) && memcmp(dir, s, dlen) == 0)
    if ((DIR_IS("Annotations") || DIR_IS("annotations")) && has_ext(b, ".xml", NULL)) {
        *kind = MPX_VOC_XML;
        *layout = DIR_IS("Annotations") ? MPX_VOC_LAYOUT_VOC : MPX_VOC_LAYOUT_RACCOON;
    } else if ((DIR_IS("JPEGImages") || DIR_IS("images")) && has_ext(b, ".jpg", ".jpeg")) {
        *kind = MPX_VOC_JPEG;
        *layout = DIR_IS("JPEGImages") ? MPX_VOC_LAYOUT_VOC : MPX_VOC_LAYOUT_RACCOON;
    } else if (DIR_IS("Main") && ds >= 10 && memcmp(rel + ds - 10, "ImageSets/", 10) == 0 &&
               (ds == 10 || rel[ds - 11] == '/')) {
        int known = 0;
        for (int s = 0; s < 4; s++) known |= strcmp(b, set_names[s]) == 0;
        if (!known) return 0;
        *kind = MPX_VOC_SET;
        *layout = MPX_VOC_LAYOUT_VOC;
        root = ds >= 11 ? ds - 11 : 0;
    } else {
        return 0;
    }
#undef DIR_IS
    *root_len = root;
    return 1;
}

static mpx_status add_entry(mpx_voc_files *f, const char *rel, mpx_voc_kind kind,
                            mpx_voc_layout layout, size_t root_len, const char *base,
                            mpx_voc_entry **out) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 256;
        mpx_voc_entry *ne = realloc(f->e, cap * sizeof *ne);
        if (!ne) return mpx_fail(MPX_ERR_NOMEM, "out of memory listing '%s'", rel);
        f->e = ne;
        f->cap = cap;
    }
    mpx_voc_entry *e = &f->e[f->n];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->layout = layout;
    e->root = strndup(rel, root_len);
    e->name = strdup(base);
    if (!e->root || !e->name) {
        free(e->root);
        free(e->name);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory listing '%s'", rel);
    }
    f->n++;
    *out = e;
    return MPX_OK;
}

static mpx_status collect_archive(const char *archive, mpx_voc_files *f) {
    mpx_archive *t;
    MPX_TRY(mpx_archive_open(archive, &t));
    mpx_status st = MPX_OK;
    for (;;) {
        mpx_archive_entry te;
        int done;
        if ((st = mpx_archive_next(t, &te, &done)) != MPX_OK || done) break;
        mpx_voc_kind kind;
        mpx_voc_layout layout;
        size_t root_len;
        const char *base;
        if (te.type != '0' || !classify(te.name, &kind, &layout, &root_len, &base)) continue;
        int64_t limit = kind == MPX_VOC_JPEG ? MAX_JPEG : MAX_TEXT_FILE;
        if (te.size <= 0 || te.size > limit) {
            st =
                mpx_fail(MPX_ERR_INPUT, "archive '%s': entry '%s' has %lld bytes (1..%lld allowed)",
                         archive, te.name, (long long)te.size, (long long)limit);
            break;
        }
        mpx_voc_entry *e;
        if ((st = add_entry(f, te.name, kind, layout, root_len, base, &e)) != MPX_OK) break;
        if (!(e->data = malloc((size_t)te.size + 1))) {
            st = mpx_fail(MPX_ERR_NOMEM, "out of memory reading '%s' from '%s'", te.name, archive);
            break;
        }
        e->size = (size_t)te.size;
        e->data[e->size] = 0;
        if ((st = mpx_archive_read(t, e->data, e->size)) != MPX_OK) break;
    }
    mpx_archive_close(t);
    return st;
}

static mpx_status walk(const char *source, const char *rel, int depth, mpx_voc_files *f) {
    char dir[2048];
    if (snprintf(dir, sizeof dir, "%s%s%s", source, rel[0] ? "/" : "", rel) >= (int)sizeof dir)
        return mpx_fail(MPX_ERR_INPUT, "path too long under '%s'", source);
    DIR *d = opendir(dir);
    if (!d) return mpx_fail(MPX_ERR_IO, "cannot list '%s': %s", dir, strerror(errno));
    mpx_status st = MPX_OK;
    struct dirent *de;
    while (st == MPX_OK && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        char sub[2048], full[4200];
        if (snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) >=
            (int)sizeof sub) {
            st = mpx_fail(MPX_ERR_INPUT, "path too long under '%s'", source);
            break;
        }
        snprintf(full, sizeof full, "%s/%s", source, sub);
        if (mpx_fs_is_dir(full)) {
            if (depth + 1 < MAX_WALK_DEPTH) st = walk(source, sub, depth + 1, f);
            continue;
        }
        mpx_voc_kind kind;
        mpx_voc_layout layout;
        size_t root_len;
        const char *base;
        if (!classify(sub, &kind, &layout, &root_len, &base)) continue;
        mpx_voc_entry *e;
        if ((st = add_entry(f, sub, kind, layout, root_len, base, &e)) != MPX_OK) break;
        if (!(e->path = strdup(full))) {
            st = mpx_fail(MPX_ERR_NOMEM, "out of memory listing '%s'", full);
            break;
        }
        if (kind == MPX_VOC_JPEG) continue; /* decoded from disk later */
        int64_t size = mpx_fs_file_size(full);
        if (size <= 0 || size > MAX_TEXT_FILE) {
            st = mpx_fail(MPX_ERR_INPUT, "'%s' has %lld bytes (1..%d allowed)", full,
                          (long long)size, MAX_TEXT_FILE);
            break;
        }
        char *text;
        if ((st = mpx_fs_read_all(full, &text, &e->size)) != MPX_OK) break;
        e->data = (uint8_t *)text;
    }
    closedir(d);
    return st;
}

mpx_status mpx_voc_collect(const char *source, mpx_voc_files *f, int *checksummed) {
    memset(f, 0, sizeof *f);
    *checksummed = 0;
    mpx_status st;
    if (mpx_fs_is_dir(source)) {
        st = walk(source, "", 0, f);
    } else if (mpx_fs_file_size(source) >= 0) {
        char hex[65];
        f->archive = 1;
        st = mpx_sha256_check_beside(source, hex, checksummed);
        if (st == MPX_OK) st = collect_archive(source, f);
    } else {
        return mpx_fail(MPX_ERR_INPUT,
                        "VOC source '%s' is neither a directory nor an archive file (no download "
                        "is attempted)",
                        source);
    }
    if (st != MPX_OK) mpx_voc_files_free(f);
    return st;
}

/* ---- the dataset root and its files ---- */

static int cmp_entry(const void *pa, const void *pb) {
    const mpx_voc_entry *a = *(mpx_voc_entry *const *)pa, *b = *(mpx_voc_entry *const *)pb;
    return strcmp(a->name, b->name);
}

mpx_status mpx_voc_select_root(const char *source, mpx_voc_files *f, mpx_voc_tree *t) {
    memset(t, 0, sizeof *t);
    const mpx_voc_entry *first = NULL;
    for (size_t i = 0; i < f->n; i++) {
        const mpx_voc_entry *e = &f->e[i];
        if (e->kind != MPX_VOC_XML) continue;
        if (!first) {
            first = e;
        } else if (strcmp(e->root, first->root) != 0 || e->layout != first->layout) {
            return mpx_fail(
                MPX_ERR_INPUT,
                "VOC source '%s' holds annotations in more than one folder ('%s/%s' and "
                "'%s/%s'): point it at one dataset",
                source, first->root,
                first->layout == MPX_VOC_LAYOUT_VOC ? "Annotations" : "annotations", e->root,
                e->layout == MPX_VOC_LAYOUT_VOC ? "Annotations" : "annotations");
        }
    }
    if (!first)
        return mpx_fail(MPX_ERR_INPUT,
                        "VOC source '%s' has no annotations: expected Annotations/*.xml (VOC) or "
                        "annotations/*.xml (raccoon layout) in it or in a folder inside it",
                        source);
    t->layout = first->layout;
    t->archive = f->archive;
    snprintf(t->root, sizeof t->root, "%s", first->root);
    mpx_voc_entry **lists[3] = {NULL, NULL, NULL};
    size_t counts[3] = {0, 0, 0};
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < f->n; i++) {
            mpx_voc_entry *e = &f->e[i];
            if (strcmp(e->root, t->root) != 0) continue;
            if (e->kind == MPX_VOC_CSV_TRAIN || e->kind == MPX_VOC_CSV_TEST) {
                if (pass == 0) t->csv[e->kind == MPX_VOC_CSV_TEST] = e;
                continue;
            }
            if (e->kind == MPX_VOC_SET) {
                for (int s = 0; s < 4 && pass == 0; s++)
                    if (strcmp(e->name, set_names[s]) == 0) t->sets[s] = e;
                continue;
            }
            if (e->layout != t->layout) continue;
            int l = e->kind == MPX_VOC_XML ? 0 : 1;
            if (pass == 1) lists[l][counts[l]] = e;
            counts[l]++;
        }
        if (pass == 0) {
            lists[0] = malloc((counts[0] + 1) * sizeof *lists[0]);
            lists[1] = malloc((counts[1] + 1) * sizeof *lists[1]);
            if (!lists[0] || !lists[1]) {
                free(lists[0]);
                free(lists[1]);
                return mpx_fail(MPX_ERR_NOMEM, "out of memory indexing '%s'", source);
            }
            counts[0] = counts[1] = 0;
        }
    }
    qsort(lists[0], counts[0], sizeof *lists[0], cmp_entry);
    qsort(lists[1], counts[1], sizeof *lists[1], cmp_entry);
    t->xml = lists[0];
    t->n_xml = counts[0];
    t->jpeg = lists[1];
    t->n_jpeg = counts[1];
    for (int l = 0; l < 2; l++)
        for (size_t i = 1; i < counts[l]; i++)
            if (strcmp(lists[l][i - 1]->name, lists[l][i]->name) == 0) {
                mpx_fail(MPX_ERR_INPUT, "VOC source '%s': '%s' appears twice in '%s'", source,
                         lists[l][i]->name, t->root);
                mpx_voc_tree_free(t);
                return MPX_ERR_INPUT;
            }
    return MPX_OK;
}

void mpx_voc_tree_free(mpx_voc_tree *t) {
    free(t->xml);
    free(t->jpeg);
    memset(t, 0, sizeof *t);
}

const mpx_voc_entry *mpx_voc_find_jpeg(const mpx_voc_tree *t, const char *filename) {
    size_t lo = 0, hi = t->n_jpeg;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(t->jpeg[mid]->name, filename);
        if (c == 0) return t->jpeg[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const char *mpx_voc_where(const char *source, const mpx_voc_tree *t, const char *folder,
                          const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s%s%s%s%s%s", source, t->archive ? ":" : "/", t->root,
             t->root[0] ? "/" : "", folder ? folder : "", folder ? "/" : "", name);
    return buf;
}

/* ---- decoding ---- */

mpx_status mpx_voc_decode(const char *source, const mpx_voc_tree *t, const mpx_voc_image *anns,
                          const int32_t *labels, const int64_t *which, int zero_based,
                          mpx_det_dataset *ds) {
    mpx_status st = MPX_OK;
    int failed = 0;
    char msg[1400] = "";
    int S = ds->size;
#pragma omp parallel
    {
        uint8_t *pix = NULL;
        size_t cap = 0;
        float *resized = malloc((size_t)S * S * 3 * sizeof *resized);
        mpx_resample_scratch rs = {0};
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < ds->n; i++) {
            int stop;
#pragma omp atomic read
            stop = failed;
            if (stop) continue;
            const mpx_voc_image *a = &anns[which[i]];
            const mpx_voc_entry *e = mpx_voc_find_jpeg(t, a->filename);
            char name[1400];
            mpx_voc_where(source, t, t->layout == MPX_VOC_LAYOUT_VOC ? "JPEGImages" : "images",
                          a->filename, name, sizeof name);
            mpx_status s = MPX_OK;
            mpx_jpeg_info info;
            FILE *fp = NULL;
            if (!resized) s = mpx_fail(MPX_ERR_NOMEM, "out of memory decoding '%s'", name);
            if (s == MPX_OK && !e)
                s = mpx_fail(MPX_ERR_INPUT,
                             "annotation '%s.xml' names image '%s', which is missing", ds->ids[i],
                             name);
            if (s == MPX_OK && e->path && !(fp = fopen(e->path, "rb")))
                s = mpx_fail(MPX_ERR_IO, "cannot open '%s': %s", e->path, strerror(errno));
            if (s == MPX_OK) s = mpx_jpeg_decode(e->data, e->size, fp, name, 1, &pix, &cap, &info);
            if (fp) fclose(fp);
            if (s == MPX_OK && (info.w != a->width || info.h != a->height))
                s = mpx_fail(MPX_ERR_INPUT,
                             "image '%s' is %dx%d but its annotation '%s.xml' says %dx%d (boxes "
                             "would not match)",
                             name, info.w, info.h, ds->ids[i], a->width, a->height);
            if (s == MPX_OK)
                s = mpx_resample_box(pix, info.h, info.w, 3, 0, 0, info.w, info.h, resized, S, S, 0,
                                     &rs);
            if (s == MPX_OK) {
                uint8_t *dst = ds->images + (size_t)i * S * S * 3;
                for (size_t p = 0; p < (size_t)S * S * 3; p++) {
                    float v = resized[p] + 0.5f;
                    dst[p] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
                }
                ds->counts[i] = a->n_objects;
                for (int k = 0; k < a->n_objects; k++) {
                    mpx_det_box *b = &ds->boxes[i * MPX_DET_MAX_BOXES + k];
                    *b = mpx_voc_object_box(&a->objects[k], a->width, a->height, zero_based);
                    b->label = labels[which[i] * MPX_DET_MAX_BOXES + k];
                    b->difficult = a->objects[k].difficult;
                }
            }
            if (s != MPX_OK) {
#pragma omp critical(mpx_voc_decode_error)
                if (!failed) {
                    snprintf(msg, sizeof msg, "%s", mpx_error_message());
                    st = s;
#pragma omp atomic write
                    failed = 1;
                }
            }
        }
        free(pix);
        free(resized);
        mpx_resample_scratch_free(&rs);
    }
    if (failed) return mpx_fail(st, "%s", msg);
    return MPX_OK;
}
