/* fsutil.h — small file-system helpers for every layer, and where the data lives.
 *
 * Atomic writes (temp file + fsync + rename) so a crash never leaves a half-written file under
 * its final name (dataset caches, checkpoints); every failure is an mpx_status naming the path.
 */
#ifndef MPX_FSUTIL_H
#define MPX_FSUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mpx/error.h"

/* Size of a regular file in bytes, or -1 when it does not exist / is not a regular file. */
int64_t mpx_fs_file_size(const char *path);
int mpx_fs_is_dir(const char *path);
/* mkdir -p (MPX_ERR_IO naming the directory that could not be created). */
mpx_status mpx_fs_mkdirs(const char *path);
/* Write `n` bytes to `path` and fsync it (not atomic: for temporary files renamed later). */
mpx_status mpx_fs_write_synced(const char *path, const void *data, size_t n);
/* Write `n` bytes to `path` atomically: <path>.tmp.<pid> is written, synced and renamed. */
mpx_status mpx_fs_write_atomic(const char *path, const void *data, size_t n);
/* rename(2) with the failure named. */
mpx_status mpx_fs_rename(const char *from, const char *to);
/* Read a whole (small) file, NUL-terminated; caller frees *data. */
mpx_status mpx_fs_read_all(const char *path, char **data, size_t *n);
/* Take an exclusive flock(2) on `path` (created when missing), waiting for other holders;
 * *fd is the descriptor to give to mpx_fs_unlock. */
mpx_status mpx_fs_lock(const char *path, int *fd);
void mpx_fs_unlock(int fd);
/* The same without waiting: when another process holds the lock, MPX_ERR_INPUT naming `what`
 * and the holder (the note it wrote: its pid, host and start time), and nothing else is done.
 * Taken, the lock file holds this process's note. The file stays when the lock is released (a
 * lock file removed while another process waits on it would let two hold it). */
mpx_status mpx_fs_trylock(const char *path, const char *what, int *fd);
/* snprintf into buf; MPX_ERR_INPUT when the path does not fit. */
mpx_status mpx_fs_join(char *buf, size_t cap, const char *a, const char *b);
/* mkdir -p of the directory part of `path` (nothing for a bare file name). */
mpx_status mpx_fs_mkdirs_for(const char *path);

/* A file written under a temporary name and renamed into place when complete: open, write to
 * f, then commit (flush, fsync, rename; the file at `path` before stays intact on any failure)
 * or abort (remove the temporary file). */
typedef struct {
    FILE *f;
    char path[4096], tmp[4200];
} mpx_fs_atomic;
mpx_status mpx_fs_atomic_open(mpx_fs_atomic *a, const char *path);
mpx_status mpx_fs_atomic_commit(mpx_fs_atomic *a);
void mpx_fs_atomic_abort(mpx_fs_atomic *a);

/* Where datasets are found, resolved in this one place: the cache (converted datasets,
 * vocabularies) is $MPX_CACHE_DIR, else <source>/data/cache; the shared datasets (the archives
 * that cannot be downloaded here) are $MPX_SHARED_DATA, else <source>/../shared/data, where
 * <source> is the source tree the binary was built from. */
const char *mpx_data_cache_dir(void);
const char *mpx_data_shared_dir(void);

#endif
