/* tar_gz.c — see tar_gz.h. Tar is a sequence of 512-byte blocks: a header block, then the
 * data padded to a whole block; two zero blocks end the archive. */
#include "data/tar_gz.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

enum { BLOCK = 512 };

struct mpx_tar {
    gzFile gz;
    char path[1024];
    char current[1024]; /* name of the current entry, for messages */
    int64_t left;       /* unread data bytes of the current entry */
    int64_t pad;        /* padding after it */
    int64_t entries;
};

mpx_status mpx_tar_open(const char *path, mpx_tar **out) {
    *out = NULL;
    gzFile gz = gzopen(path, "rb");
    if (!gz) return mpx_fail(MPX_ERR_IO, "cannot open archive '%s': %s", path, strerror(errno));
    gzbuffer(gz, 1 << 17);
    mpx_tar *t = calloc(1, sizeof *t);
    if (!t) {
        gzclose(gz);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory opening '%s'", path);
    }
    t->gz = gz;
    snprintf(t->path, sizeof t->path, "%s", path);
    *out = t;
    return MPX_OK;
}

void mpx_tar_close(mpx_tar *t) {
    if (!t) return;
    gzclose(t->gz);
    free(t);
}

/* Read exactly n bytes; a short read is a truncated or corrupt archive. */
static mpx_status read_exact(mpx_tar *t, void *buf, size_t n, const char *what) {
    size_t got = 0;
    while (got < n) {
        unsigned chunk = n - got > (1u << 30) ? (1u << 30) : (unsigned)(n - got);
        int k = gzread(t->gz, (char *)buf + got, chunk);
        if (k < 0) {
            int errnum;
            const char *msg = gzerror(t->gz, &errnum);
            return mpx_fail(MPX_ERR_INPUT, "archive '%s' is corrupt (%s, reading %s): %s", t->path,
                            what, t->current[0] ? t->current : "the first header", msg);
        }
        if (k == 0)
            return mpx_fail(MPX_ERR_INPUT,
                            "archive '%s' is truncated: it ends inside %s of entry '%s' "
                            "(after %lld entries)",
                            t->path, what, t->current[0] ? t->current : "(first)",
                            (long long)t->entries);
        got += (size_t)k;
    }
    return MPX_OK;
}

static mpx_status skip(mpx_tar *t, int64_t n, const char *what) {
    char buf[4096];
    while (n > 0) {
        size_t k = n > (int64_t)sizeof buf ? sizeof buf : (size_t)n;
        MPX_TRY(read_exact(t, buf, k, what));
        n -= (int64_t)k;
    }
    return MPX_OK;
}

/* Octal numeric field (NUL/space terminated); GNU base-256 when the high bit is set. */
static int parse_num(const uint8_t *f, int len, int64_t *out) {
    int64_t v = 0;
    if (f[0] & 0x80) {
        for (int i = 1; i < len; i++) {
            if (v > (INT64_MAX >> 8)) return 0;
            v = (v << 8) | f[i];
        }
        *out = v;
        return 1;
    }
    int i = 0;
    while (i < len && f[i] == ' ') i++;
    int digits = 0;
    for (; i < len && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
        if (v > (INT64_MAX >> 3)) return 0;
        v = v * 8 + (f[i] - '0');
    }
    if (i < len && f[i] != '\0' && f[i] != ' ') return 0;
    *out = v;
    return digits > 0;
}

static void set_name(mpx_tar_entry *e, const char *s, size_t len) {
    if (len >= sizeof e->name) len = sizeof e->name - 1;
    memcpy(e->name, s, len);
    e->name[len] = '\0';
    while (e->name[0] == '.' && e->name[1] == '/')
        memmove(e->name, e->name + 2, strlen(e->name + 2) + 1);
}

/* Drain the stream after the end-of-archive blocks so zlib verifies the gzip CRC/length. */
static mpx_status drain(mpx_tar *t) {
    char buf[4096];
    for (;;) {
        int k = gzread(t->gz, buf, sizeof buf);
        if (k == 0) return MPX_OK;
        if (k < 0) {
            int errnum;
            const char *msg = gzerror(t->gz, &errnum);
            return mpx_fail(MPX_ERR_INPUT, "archive '%s' is corrupt at its end: %s", t->path, msg);
        }
    }
}

/* The value of "path=" in a pax extended header ("<len> path=<value>\n" records). */
static int pax_path(const char *rec, size_t n, char *out, size_t cap) {
    size_t i = 0;
    while (i < n) {
        size_t len = 0, j = i;
        while (j < n && rec[j] >= '0' && rec[j] <= '9') len = len * 10 + (size_t)(rec[j++] - '0');
        if (len == 0 || i + len > n || j >= n || rec[j] != ' ') return 0;
        const char *kv = rec + j + 1;
        size_t kvlen = i + len - (j + 1);
        if (kvlen > 5 && memcmp(kv, "path=", 5) == 0) {
            size_t vlen = kvlen - 5 - (kv[kvlen - 1] == '\n');
            if (vlen >= cap) vlen = cap - 1;
            memcpy(out, kv + 5, vlen);
            out[vlen] = '\0';
            return 1;
        }
        i += len;
    }
    return 0;
}

mpx_status mpx_tar_next(mpx_tar *t, mpx_tar_entry *e, int *done) {
    *done = 0;
    MPX_TRY(skip(t, t->left + t->pad, "the data"));
    t->left = t->pad = 0;
    char long_name[1024] = "";
    for (;;) {
        uint8_t h[BLOCK];
        MPX_TRY(read_exact(t, h, BLOCK, "a header"));
        int zero = 1;
        for (int i = 0; i < BLOCK && zero; i++) zero = h[i] == 0;
        if (zero) {
            /* End of archive: a second zero block should follow (tolerate its absence). */
            *done = 1;
            return drain(t);
        }
        int64_t stored, sum = 0;
        if (!parse_num(h + 148, 8, &stored))
            return mpx_fail(MPX_ERR_INPUT, "archive '%s': bad header after entry '%s' (not a tar?)",
                            t->path, t->current[0] ? t->current : "(none)");
        for (int i = 0; i < BLOCK; i++) sum += (i >= 148 && i < 156) ? ' ' : h[i];
        if (sum != stored)
            return mpx_fail(MPX_ERR_INPUT,
                            "archive '%s': header checksum mismatch after entry '%s' (corrupt)",
                            t->path, t->current[0] ? t->current : "(none)");
        int64_t size;
        if (!parse_num(h + 124, 12, &size) || size < 0)
            return mpx_fail(MPX_ERR_INPUT, "archive '%s': bad size field after entry '%s'", t->path,
                            t->current[0] ? t->current : "(none)");
        char type = (char)h[156];
        int64_t pad = (BLOCK - size % BLOCK) % BLOCK;
        if (type == 'L' || type == 'x') {
            /* GNU long name / pax record: its data describes the next entry. */
            if (size > 1 << 20)
                return mpx_fail(MPX_ERR_INPUT, "archive '%s': oversized '%c' header", t->path,
                                type);
            char *rec = malloc((size_t)size + 1);
            if (!rec) return mpx_fail(MPX_ERR_NOMEM, "out of memory reading '%s'", t->path);
            mpx_status st = read_exact(t, rec, (size_t)size, "a long-name record");
            if (st == MPX_OK) st = skip(t, pad, "padding");
            if (st == MPX_OK) {
                rec[size] = '\0';
                if (type == 'L') {
                    snprintf(long_name, sizeof long_name, "%s", rec);
                } else {
                    pax_path(rec, (size_t)size, long_name, sizeof long_name);
                }
            }
            free(rec);
            MPX_TRY(st);
            continue;
        }
        if (type == 'g') { /* pax global header: nothing we use */
            MPX_TRY(skip(t, size + pad, "a pax global header"));
            continue;
        }
        if (long_name[0]) {
            set_name(e, long_name, strlen(long_name));
        } else {
            char full[300];
            size_t nlen = strnlen((const char *)h, 100);
            /* POSIX ustar splits long paths into prefix (offset 345) + name; GNU's "ustar  "
             * uses that area for other fields. */
            if (memcmp(h + 257, "ustar", 6) == 0 && h[345]) {
                size_t plen = strnlen((const char *)h + 345, 155);
                memcpy(full, h + 345, plen);
                full[plen] = '/';
                memcpy(full + plen + 1, h, nlen);
                set_name(e, full, plen + 1 + nlen);
            } else {
                set_name(e, (const char *)h, nlen);
            }
        }
        if (type == '\0' || type == '7') type = '0';
        e->type = type;
        e->size = (type == '0') ? size : 0;
        /* Hard/sym links, directories etc. have no data; others keep theirs (skipped). */
        t->left = size;
        t->pad = pad;
        if (type == '1' || type == '2' || type == '5') t->left = t->pad = 0;
        snprintf(t->current, sizeof t->current, "%s", e->name);
        t->entries++;
        return MPX_OK;
    }
}

mpx_status mpx_tar_read(mpx_tar *t, void *buf, size_t n) {
    if ((int64_t)n != t->left)
        return mpx_fail(MPX_ERR_INTERNAL, "tar entry '%s': asked for %zu of %lld bytes", t->current,
                        n, (long long)t->left);
    MPX_TRY(read_exact(t, buf, n, "the data"));
    t->left = 0;
    return MPX_OK;
}
