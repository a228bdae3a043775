/* archive.h — streaming reader for the datasets' .tar.gz archives (internal to data/), on
 * libarchive: entries one after another, nothing extracted to disk.
 *
 * Tar in its POSIX ustar, GNU and pax forms, gzip-compressed or plain. A damaged header, a
 * truncated or corrupt stream is MPX_ERR_INPUT naming the archive, the entry and libarchive's
 * reason; a header libarchive would skip to resynchronise is refused too (a dataset archive is
 * whole or it is not used).
 */
#ifndef MPX_DATA_ARCHIVE_H
#define MPX_DATA_ARCHIVE_H

#include <stddef.h>
#include <stdint.h>

#include "mpx/error.h"

typedef struct mpx_archive mpx_archive;

typedef struct {
    char name[1024]; /* path inside the archive, leading "./" removed */
    int64_t size;    /* bytes of data */
    char type;       /* '0' regular file, '5' directory, 'l' symbolic link, '?' anything else */
} mpx_archive_entry;

mpx_status mpx_archive_open(const char *path, mpx_archive **out);
/* Advance to the next entry (skipping the unread data of the current one). *done = 1 at the
 * end of the archive. */
mpx_status mpx_archive_next(mpx_archive *a, mpx_archive_entry *e, int *done);
/* Read exactly n bytes of the current entry's data into buf. */
mpx_status mpx_archive_read(mpx_archive *a, void *buf, size_t n);
void mpx_archive_close(mpx_archive *a);

#endif
