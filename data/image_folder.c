/* image_folder.c — an ImageNet-style folder (root/<split>/<class>/<file>.JPEG) listed once,
 * sorted, and decoded on demand. Paths are kept as "class/file" in one string pool
 * (ImageNet's 1.28M files take ~45 MB). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "mpx/fsutil.h"
#include "data/jpeg_io.h"
#include "mpx/data.h"

struct mpx_image_folder {
    char dir[1024]; /* root/<split> */
    int num_classes;
    char **classes;
    int64_t n;
    int64_t *name_off; /* [n] offsets of "class/file" in pool */
    int32_t *labels;   /* [n] */
    size_t idx_cap;
    char *pool;
    size_t pool_n, pool_cap;
};

typedef struct {
    char **v;
    size_t n, cap;
} strlist;

static void strlist_free(strlist *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int strlist_push(strlist *l, const char *s) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        char **nv = realloc(l->v, cap * sizeof *nv);
        if (!nv) return 0;
        l->v = nv;
        l->cap = cap;
    }
    if (!(l->v[l->n] = strdup(s))) return 0;
    l->n++;
    return 1;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_jpeg_name(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot && (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0);
}

/* Sorted names in `dir`: subdirectories (want_dirs) or JPEG files; hidden entries skipped. */
static mpx_status list_dir(const char *dir, int want_dirs, strlist *out) {
    DIR *d = opendir(dir);
    if (!d)
        return mpx_fail(MPX_ERR_INPUT, "cannot open image folder '%s': %s", dir, strerror(errno));
    struct dirent *de;
    mpx_status st = MPX_OK;
    while (st == MPX_OK && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        char p[2200];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat sb;
        if (stat(p, &sb) != 0) continue; /* a dangling link: not an image */
        int keep =
            want_dirs ? S_ISDIR(sb.st_mode) : (S_ISREG(sb.st_mode) && is_jpeg_name(de->d_name));
        if (keep && !strlist_push(out, de->d_name))
            st = mpx_fail(MPX_ERR_NOMEM, "out of memory listing '%s'", dir);
    }
    closedir(d);
    if (st == MPX_OK) qsort(out->v, out->n, sizeof *out->v, cmp_str);
    return st;
}

static mpx_status pool_add(mpx_image_folder *f, const char *cls, const char *file, int32_t label) {
    size_t len = strlen(cls) + 1 + strlen(file) + 1;
    if (f->pool_n + len > f->pool_cap) {
        size_t cap = f->pool_cap ? 2 * f->pool_cap : 1 << 16;
        while (cap < f->pool_n + len) cap *= 2;
        char *np = realloc(f->pool, cap);
        if (!np) return mpx_fail(MPX_ERR_NOMEM, "out of memory listing '%s'", f->dir);
        f->pool = np;
        f->pool_cap = cap;
    }
    if ((size_t)f->n == f->idx_cap) {
        size_t cap = f->idx_cap ? 2 * f->idx_cap : 1024;
        int64_t *no = realloc(f->name_off, cap * sizeof *no);
        if (no) f->name_off = no;
        int32_t *nl = no ? realloc(f->labels, cap * sizeof *nl) : NULL;
        if (nl) f->labels = nl;
        if (!no || !nl) return mpx_fail(MPX_ERR_NOMEM, "out of memory listing '%s'", f->dir);
        f->idx_cap = cap;
    }
    f->name_off[f->n] = (int64_t)f->pool_n;
    f->labels[f->n] = label;
    snprintf(f->pool + f->pool_n, len, "%s/%s", cls, file);
    f->pool_n += len;
    f->n++;
    return MPX_OK;
}

static mpx_status open_folder(mpx_image_folder *f, const char *root, const char *split) {
    char train[1100];
    MPX_TRY(mpx_fs_join(f->dir, sizeof f->dir, root, split));
    MPX_TRY(mpx_fs_join(train, sizeof train, root, "train"));
    if (!mpx_fs_is_dir(f->dir))
        return mpx_fail(MPX_ERR_INPUT,
                        "image folder '%s' does not exist (expected %s/<split>/<class>/*.JPEG)",
                        f->dir, root);
    strlist classes = {0}, here = {0};
    mpx_status st = list_dir(mpx_fs_is_dir(train) ? train : f->dir, 1, &classes);
    if (st == MPX_OK) st = list_dir(f->dir, 1, &here);
    if (st == MPX_OK && classes.n == 0)
        st = mpx_fail(MPX_ERR_INPUT, "image folder '%s' has no class subdirectories",
                      mpx_fs_is_dir(train) ? train : f->dir);
    /* Both lists are sorted: walk them together so labels follow the class list. */
    size_t k = 0;
    for (size_t j = 0; st == MPX_OK && j < here.n; j++) {
        while (k < classes.n && strcmp(classes.v[k], here.v[j]) < 0) k++;
        if (k == classes.n || strcmp(classes.v[k], here.v[j]) != 0) {
            st = mpx_fail(MPX_ERR_INPUT, "image folder '%s': class '%s' is not a class of '%s'",
                          f->dir, here.v[j], train);
            break;
        }
        char cdir[2200];
        snprintf(cdir, sizeof cdir, "%s/%s", f->dir, here.v[j]);
        strlist files = {0};
        st = list_dir(cdir, 0, &files);
        for (size_t i = 0; st == MPX_OK && i < files.n; i++)
            st = pool_add(f, here.v[j], files.v[i], (int32_t)k);
        strlist_free(&files);
    }
    strlist_free(&here);
    if (st == MPX_OK && f->n == 0)
        st = mpx_fail(MPX_ERR_INPUT, "image folder '%s' holds no .jpg/.jpeg files", f->dir);
    f->num_classes = (int)classes.n;
    f->classes = classes.v; /* ownership moves to f */
    return st;
}

mpx_status mpx_image_folder_open(const char *root, const char *split, mpx_image_folder **out) {
    *out = NULL;
    mpx_image_folder *f = calloc(1, sizeof *f);
    if (!f) return mpx_fail(MPX_ERR_NOMEM, "out of memory opening image folder '%s'", root);
    mpx_status st = open_folder(f, root, split);
    if (st != MPX_OK) {
        mpx_image_folder_free(f);
        return st;
    }
    *out = f;
    return MPX_OK;
}

void mpx_image_folder_free(mpx_image_folder *f) {
    if (!f) return;
    for (int k = 0; k < f->num_classes; k++) free(f->classes[k]);
    free(f->classes);
    free(f->name_off);
    free(f->labels);
    free(f->pool);
    free(f);
}

int64_t mpx_image_folder_count(const mpx_image_folder *f) { return f->n; }
int mpx_image_folder_num_classes(const mpx_image_folder *f) { return f->num_classes; }
const char *mpx_image_folder_class_name(const mpx_image_folder *f, int k) { return f->classes[k]; }
int32_t mpx_image_folder_label(const mpx_image_folder *f, int64_t i) { return f->labels[i]; }

const char *mpx_image_folder_path(const mpx_image_folder *f, int64_t i, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", f->dir, f->pool + f->name_off[i]);
    return buf;
}

mpx_status mpx_image_folder_decode(const mpx_image_folder *f, int64_t i, uint8_t **buf, size_t *cap,
                                   int *h, int *w) {
    if (i < 0 || i >= f->n)
        return mpx_fail(MPX_ERR_INTERNAL, "image folder '%s': example %lld of %lld", f->dir,
                        (long long)i, (long long)f->n);
    char path[2200];
    mpx_image_folder_path(f, i, path, sizeof path);
    FILE *fp = fopen(path, "rb");
    if (!fp) return mpx_fail(MPX_ERR_INPUT, "cannot open image '%s': %s", path, strerror(errno));
    mpx_jpeg_info info;
    mpx_status st = mpx_jpeg_decode(NULL, 0, fp, path, 0, buf, cap, &info);
    fclose(fp);
    *h = info.h;
    *w = info.w;
    return st;
}
