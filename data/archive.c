/* archive.c — see archive.h: libarchive's tar reader behind the four calls the datasets use. */
#include "data/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mpx_archive {
    struct archive *ar;
    char path[1024];
    char current[1024]; /* the current entry's name, for messages */
    int64_t entries;
};

static mpx_status fail(const mpx_archive *a, const char *doing) {
    const char *why = archive_error_string(a->ar);
    return mpx_fail(MPX_ERR_INPUT,
                    "archive '%s' is damaged or truncated (%s%s%s, after %lld entries): %s",
                    a->path, doing, a->current[0] ? " after entry " : "", a->current,
                    (long long)a->entries, why ? why : "unknown error");
}

mpx_status mpx_archive_open(const char *path, mpx_archive **out) {
    *out = NULL;
    mpx_archive *a = calloc(1, sizeof *a);
    if (!a || !(a->ar = archive_read_new())) {
        free(a);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory opening '%s'", path);
    }
    snprintf(a->path, sizeof a->path, "%s", path);
    archive_read_support_filter_gzip(a->ar);
    archive_read_support_format_tar(a->ar);
    if (archive_read_open_filename(a->ar, path, 1 << 17) != ARCHIVE_OK) {
        /* libarchive reads ahead as it opens: a damaged stream can fail here already */
        const int e = archive_errno(a->ar);
        mpx_status st = e == ENOENT || e == EACCES || e == EISDIR
                            ? mpx_fail(MPX_ERR_IO, "cannot open archive '%s': %s", path,
                                       archive_error_string(a->ar))
                            : fail(a, "opening it");
        mpx_archive_close(a);
        return st;
    }
    *out = a;
    return MPX_OK;
}

void mpx_archive_close(mpx_archive *a) {
    if (!a) return;
    archive_read_free(a->ar);
    free(a);
}

mpx_status mpx_archive_next(mpx_archive *a, mpx_archive_entry *e, int *done) {
    struct archive_entry *ae;
    *done = 0;
    memset(e, 0, sizeof *e);
    const int r = archive_read_next_header(a->ar, &ae);
    if (r == ARCHIVE_EOF) {
        *done = 1;
        return MPX_OK;
    }
    /* (a warning names a harmless oddity, such as a name in another character set) */
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
        return fail(a, a->entries ? "reading a header" : "reading the first header");
    const char *name = archive_entry_pathname(ae);
    if (!name) name = "";
    while (name[0] == '.' && name[1] == '/') name += 2;
    if (strlen(name) >= sizeof e->name)
        return mpx_fail(MPX_ERR_INPUT, "archive '%s': entry name longer than %zu bytes: '%.60s...'",
                        a->path, sizeof e->name - 1, name);
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(a->current, sizeof a->current, "%s", name);
    const mode_t type = archive_entry_filetype(ae);
    e->type = type == AE_IFREG ? '0' : type == AE_IFDIR ? '5' : type == AE_IFLNK ? 'l' : '?';
    e->size = archive_entry_size_is_set(ae) ? archive_entry_size(ae) : 0;
    a->entries++;
    return MPX_OK;
}

mpx_status mpx_archive_read(mpx_archive *a, void *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        la_ssize_t k = archive_read_data(a->ar, (char *)buf + got, n - got);
        if (k < 0) return fail(a, "reading the data");
        if (k == 0)
            return mpx_fail(MPX_ERR_INPUT, "archive '%s': entry '%s' holds fewer than the %zu bytes "
                            "asked for", a->path, a->current, n);
        got += (size_t)k;
    }
    return MPX_OK;
}
