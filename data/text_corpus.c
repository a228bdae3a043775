/* text_corpus.c — reading a text corpus: the .txt/.raw files of a directory tree or of a
 * .tar.gz (streamed with data/archive.c, nothing extracted), sorted by path, validated as UTF-8
 * and checksummed with SHA-256 (data/sha256.c). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mpx/fsutil.h"
#include "data/sha256.h"
#include "data/archive.h"
#include "data/text_internal.h"
#include "mpx/text.h"

enum { MAX_DEPTH = 64 }; /* deeper trees are taken for a symlink loop */

typedef struct {
    char *name;
    char *data;
    size_t len;
} doc;

typedef struct {
    doc *d;
    int64_t n, cap;
} doclist;

static void doclist_free(doclist *l) {
    for (int64_t i = 0; i < l->n; i++) {
        free(l->d[i].name);
        free(l->d[i].data);
    }
    free(l->d);
    memset(l, 0, sizeof *l);
}

/* Takes ownership of data. */
static mpx_status doclist_add(doclist *l, const char *name, char *data, size_t len) {
    if (l->n == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 64;
        doc *d = realloc(l->d, (size_t)cap * sizeof *d);
        if (!d) {
            free(data);
            return mpx_fail(MPX_ERR_NOMEM, "out of memory listing the corpus");
        }
        l->d = d;
        l->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy) {
        free(data);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory listing the corpus");
    }
    l->d[l->n++] = (doc){copy, data, len};
    return MPX_OK;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int is_document(const char *name) {
    return ends_with(name, ".txt") || ends_with(name, ".raw");
}

/* A path with a component starting with '.' (hidden files, macOS "._x" resource forks). */
static int is_hidden(const char *path) {
    for (const char *p = path; *p; p++)
        if (*p == '.' && (p == path || p[-1] == '/')) return 1;
    return 0;
}

static mpx_status walk(const char *root, const char *rel, int depth, doclist *l) {
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s%s%s", root, rel[0] ? "/" : "", rel) >= (int)sizeof dir)
        return mpx_fail(MPX_ERR_INPUT, "corpus path too long: '%s/%s'", root, rel);
    if (depth > MAX_DEPTH)
        return mpx_fail(MPX_ERR_INPUT, "corpus '%s': directories nested deeper than %d at '%s' "
                        "(a symbolic-link loop?)", root, MAX_DEPTH, dir);
    DIR *d = opendir(dir);
    if (!d) return mpx_fail(MPX_ERR_IO, "cannot open directory '%s': %s", dir, strerror(errno));
    mpx_status st = MPX_OK;
    struct dirent *e;
    while (st == MPX_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char sub[4096], full[4200];
        if (snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name) >=
            (int)sizeof sub) {
            st = mpx_fail(MPX_ERR_INPUT, "corpus path too long below '%s'", dir);
            break;
        }
        snprintf(full, sizeof full, "%s/%s", root, sub);
        struct stat sb;
        if (stat(full, &sb) != 0) continue; /* a dangling link */
        if (S_ISDIR(sb.st_mode)) {
            st = walk(root, sub, depth + 1, l);
        } else if (S_ISREG(sb.st_mode) && is_document(e->d_name)) {
            char *data;
            size_t n;
            st = mpx_fs_read_all(full, &data, &n);
            if (st == MPX_OK) st = doclist_add(l, sub, data, n);
        }
    }
    closedir(d);
    return st;
}

static mpx_status read_archive(const char *path, doclist *l) {
    mpx_archive *t;
    MPX_TRY(mpx_archive_open(path, &t));
    mpx_status st = MPX_OK;
    for (;;) {
        mpx_archive_entry e;
        int done;
        st = mpx_archive_next(t, &e, &done);
        if (st != MPX_OK || done) break;
        if (e.type != '0' || !is_document(e.name) || is_hidden(e.name)) continue;
        if ((uint64_t)e.size >= SIZE_MAX / 2) {
            st = mpx_fail(MPX_ERR_INPUT, "archive '%s': entry '%s' is too large", path, e.name);
            break;
        }
        char *data = malloc((size_t)e.size + 1);
        if (!data) {
            st = mpx_fail(MPX_ERR_NOMEM, "out of memory reading '%s' from '%s'", e.name, path);
            break;
        }
        st = mpx_archive_read(t, data, (size_t)e.size);
        if (st == MPX_OK) st = doclist_add(l, e.name, data, (size_t)e.size);
        else free(data);
        if (st != MPX_OK) break;
    }
    mpx_archive_close(t);
    return st;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const doc *)a)->name, ((const doc *)b)->name);
}

void mpx_text_corpus_free(mpx_text_corpus *c) {
    for (int64_t i = 0; c->names && i < c->n_docs; i++) free(c->names[i]);
    free(c->names);
    free(c->offsets);
    free(c->text);
    memset(c, 0, sizeof *c);
}

/* Sorted, validated documents -> the corpus (takes the names; frees the data). */
static mpx_status assemble(doclist *l, int archive, mpx_text_corpus *c) {
    qsort(l->d, (size_t)l->n, sizeof *l->d, by_name);
    size_t total = 0;
    for (int64_t i = 0; i < l->n; i++) {
        doc *d = &l->d[i];
        if (i > 0 && strcmp(d->name, l->d[i - 1].name) == 0)
            return mpx_fail(MPX_ERR_INPUT, "corpus '%s': the archive holds '%s' twice", c->path,
                            d->name);
        size_t bad = mpx_utf8_check((const uint8_t *)d->data, d->len);
        if (bad < d->len)
            return mpx_fail(MPX_ERR_INPUT,
                            "corpus '%s': %s '%s' is not valid UTF-8 at byte offset %zu "
                            "(byte 0x%02X)",
                            c->path, archive ? "entry" : "file", d->name, bad,
                            (unsigned)(uint8_t)d->data[bad]);
        total += d->len;
    }
    c->names = calloc((size_t)l->n, sizeof *c->names);
    c->offsets = calloc((size_t)l->n + 1, sizeof *c->offsets);
    c->text = malloc(total + 1);
    if (!c->names || !c->offsets || !c->text)
        return mpx_fail(MPX_ERR_NOMEM, "out of memory for a corpus of %zu bytes", total);
    mpx_sha256 sha;
    mpx_sha256_init(&sha);
    size_t k = 0;
    for (int64_t i = 0; i < l->n; i++) {
        doc *d = &l->d[i];
        char size[32];
        int sl = snprintf(size, sizeof size, "%zu", d->len);
        mpx_sha256_update(&sha, d->name, strlen(d->name) + 1);
        mpx_sha256_update(&sha, size, (size_t)sl + 1);
        mpx_sha256_update(&sha, d->data, d->len);
        memcpy(c->text + k, d->data, d->len);
        c->offsets[i] = (int64_t)k;
        k += d->len;
        c->names[i] = d->name;
        d->name = NULL;
        free(d->data);
        d->data = NULL;
        c->n_docs = i + 1;
    }
    c->offsets[l->n] = (int64_t)k;
    c->text[k] = '\0';
    mpx_sha256_final_hex(&sha, c->sha256);
    return MPX_OK;
}

mpx_status mpx_text_corpus_read(const char *path, mpx_text_corpus *out) {
    memset(out, 0, sizeof *out);
    if (snprintf(out->path, sizeof out->path, "%s", path) >= (int)sizeof out->path)
        return mpx_fail(MPX_ERR_INPUT, "corpus path too long: '%s'", path);
    int archive = ends_with(path, ".tar.gz") || ends_with(path, ".tgz") || ends_with(path, ".tar");
    doclist l = {0};
    mpx_status st;
    if (archive && mpx_fs_file_size(path) >= 0) {
        st = read_archive(path, &l);
    } else if (!archive && mpx_fs_is_dir(path)) {
        st = walk(path, "", 0, &l);
    } else {
        int exists = mpx_fs_file_size(path) >= 0 || mpx_fs_is_dir(path);
        return mpx_fail(MPX_ERR_INPUT,
                        "text corpus '%s' %s: give a directory of UTF-8 .txt files or a "
                        ".tar.gz / .tgz / .tar holding them",
                        path, exists ? "is neither a directory nor a tar archive" : "not found");
    }
    if (st == MPX_OK && l.n == 0)
        st = mpx_fail(MPX_ERR_INPUT, "text corpus '%s' is empty: it holds no .txt or .raw files",
                      path);
    if (st == MPX_OK) st = assemble(&l, archive, out);
    doclist_free(&l);
    if (st == MPX_OK) {
        mpx_word_iter it = mpx_word_iter_make(out->text, (size_t)out->offsets[out->n_docs]);
        mpx_word w;
        if (!mpx_word_next(&it, &w))
            st = mpx_fail(MPX_ERR_INPUT,
                          "text corpus '%s' is empty: its %lld files hold no words", path,
                          (long long)out->n_docs);
    }
    if (st != MPX_OK) mpx_text_corpus_free(out);
    return st;
}
