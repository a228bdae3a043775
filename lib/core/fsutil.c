/* fsutil.c — see fsutil.h. */
#include "mpx/fsutil.h"
#include "mpx/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int64_t mpx_fs_file_size(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return -1;
    return (int64_t)st.st_size;
}

int mpx_fs_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

mpx_status mpx_fs_mkdirs(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return mpx_fail(MPX_ERR_INPUT, "bad directory path '%s'", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return mpx_fail(MPX_ERR_IO, "cannot create directory '%s': %s", buf, strerror(errno));
        if (!mpx_fs_is_dir(buf))
            return mpx_fail(MPX_ERR_IO, "'%s' exists and is not a directory", buf);
        buf[i] = saved;
    }
    return MPX_OK;
}

mpx_status mpx_fs_write_synced(const char *path, const void *data, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return mpx_fail(MPX_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
    const uint8_t *p = data;
    size_t left = n;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(path);
            return mpx_fail(MPX_ERR_IO, "cannot write '%s': %s", path, strerror(e));
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(path);
        return mpx_fail(MPX_ERR_IO, "cannot sync '%s': %s", path, strerror(e));
    }
    return MPX_OK;
}

mpx_status mpx_fs_rename(const char *from, const char *to) {
    if (rename(from, to) != 0)
        return mpx_fail(MPX_ERR_IO, "cannot rename '%s' to '%s': %s", from, to, strerror(errno));
    return MPX_OK;
}

mpx_status mpx_fs_write_atomic(const char *path, const void *data, size_t n) {
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return mpx_fail(MPX_ERR_INPUT, "path too long: '%s'", path);
    MPX_TRY(mpx_fs_write_synced(tmp, data, n));
    mpx_status st = mpx_fs_rename(tmp, path);
    if (st != MPX_OK) unlink(tmp);
    return st;
}

mpx_status mpx_fs_read_all(const char *path, char **data, size_t *n) {
    *data = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return mpx_fail(MPX_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        len += fread(buf + len, 1, cap - 1 - len, f);
        if (len < cap - 1) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf) return mpx_fail(MPX_ERR_NOMEM, "out of memory reading '%s'", path);
    if (err) {
        free(buf);
        return mpx_fail(MPX_ERR_IO, "cannot read '%s'", path);
    }
    buf[len] = '\0';
    *data = buf;
    *n = len;
    return MPX_OK;
}

mpx_status mpx_fs_lock(const char *path, int *fd) {
    *fd = open(path, O_RDWR | O_CREAT, 0644);
    if (*fd < 0) return mpx_fail(MPX_ERR_IO, "cannot create lock '%s': %s", path, strerror(errno));
    while (flock(*fd, LOCK_EX) != 0)
        if (errno != EINTR) {
            int e = errno;
            close(*fd);
            *fd = -1;
            return mpx_fail(MPX_ERR_IO, "cannot lock '%s': %s", path, strerror(e));
        }
    return MPX_OK;
}

mpx_status mpx_fs_trylock(const char *path, const char *what, int *fd) {
    *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (*fd < 0) return mpx_fail(MPX_ERR_IO, "cannot create lock '%s': %s", path, strerror(errno));
    int rc;
    while ((rc = flock(*fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {}
    if (rc != 0) {
        const int e = errno;
        char note[256] = "";
        ssize_t k = pread(*fd, note, sizeof note - 1, 0);
        note[k > 0 ? k : 0] = '\0';
        note[strcspn(note, "\n")] = '\0';
        close(*fd);
        *fd = -1;
        if (e == EWOULDBLOCK)
            return mpx_fail(MPX_ERR_INPUT, "%s is in use by another process (%s; lock '%s'): "
                            "nothing was touched", what, note[0] ? note : "holder unknown", path);
        return mpx_fail(MPX_ERR_IO, "cannot lock '%s': %s", path, strerror(e));
    }
    char host[128] = "?", note[256];
    gethostname(host, sizeof host - 1);
    const time_t now = time(NULL);
    struct tm tm;
    char when[32] = "";
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    int n = snprintf(note, sizeof note, "pid %ld on %s since %s\n", (long)getpid(), host, when);
    if (ftruncate(*fd, 0) != 0 || pwrite(*fd, note, (size_t)n, 0) != n) {
        /* the lock holds without its note; a second process then names no holder */
    }
    return MPX_OK;
}

void mpx_fs_unlock(int fd) {
    flock(fd, LOCK_UN);
    close(fd);
}

mpx_status mpx_fs_join(char *buf, size_t cap, const char *a, const char *b) {
    int k = snprintf(buf, cap, "%s/%s", a, b);
    if (k < 0 || (size_t)k >= cap) return mpx_fail(MPX_ERR_INPUT, "path too long: '%s/%s'", a, b);
    return MPX_OK;
}

mpx_status mpx_fs_mkdirs_for(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return mpx_fail(MPX_ERR_INPUT, "path too long: '%s'", path);
    char *slash = strrchr(buf, '/');
    if (!slash || slash == buf) return MPX_OK;
    *slash = '\0';
    return mpx_fs_mkdirs(buf);
}

mpx_status mpx_fs_atomic_open(mpx_fs_atomic *a, const char *path) {
    memset(a, 0, sizeof *a);
    if (snprintf(a->path, sizeof a->path, "%s", path) >= (int)sizeof a->path ||
        snprintf(a->tmp, sizeof a->tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof a->tmp)
        return mpx_fail(MPX_ERR_INPUT, "path too long: '%s'", path);
    if (!(a->f = fopen(a->tmp, "wb")))
        return mpx_fail(MPX_ERR_IO, "cannot create '%s': %s", a->tmp, strerror(errno));
    return MPX_OK;
}

mpx_status mpx_fs_atomic_commit(mpx_fs_atomic *a) {
    int err = ferror(a->f) ? EIO : 0;
    if (!err && fflush(a->f) != 0) err = errno;
    if (!err && fsync(fileno(a->f)) != 0) err = errno;
    if (fclose(a->f) != 0 && !err) err = errno;
    a->f = NULL;
    if (!err && rename(a->tmp, a->path) != 0) err = errno;
    if (!err) return MPX_OK;
    unlink(a->tmp);
    return mpx_fail(MPX_ERR_IO, "cannot write '%s': %s (what was there is intact)", a->path,
                    strerror(err));
}

void mpx_fs_atomic_abort(mpx_fs_atomic *a) {
    if (a->f) fclose(a->f);
    a->f = NULL;
    if (a->tmp[0]) unlink(a->tmp);
}

static const char *data_dir(char *buf, size_t cap, const char *env, const char *rel) {
    if (!buf[0]) {
        const char *e = getenv(env);
        if (e && e[0])
            snprintf(buf, cap, "%s", e);
        else
            snprintf(buf, cap, "%s/%s", mpx_source_dir(), rel);
    }
    return buf;
}

const char *mpx_data_cache_dir(void) {
    static char buf[4096];
    return data_dir(buf, sizeof buf, "MPX_CACHE_DIR", "data/cache");
}

const char *mpx_data_shared_dir(void) {
    static char buf[4096];
    return data_dir(buf, sizeof buf, "MPX_SHARED_DATA", "../shared/data");
}
