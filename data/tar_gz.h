/* tar_gz.h — streaming reader for .tar.gz archives (internal to data/).
 *
 * Reads the gzip stream with zlib (gzread; a raw .tar works too) and parses tar headers in
 * place: nothing is extracted to disk. Understands POSIX ustar (name + prefix), GNU tar
 * (the "ustar  " magic and 'L' long names) and pax 'x' records carrying a long path.
 * Every header checksum is verified and the stream is read to its end, so gzip's CRC check
 * runs; truncation and corruption are MPX_ERR_INPUT naming the archive (and the entry).
 */
#ifndef MPX_DATA_TAR_GZ_H
#define MPX_DATA_TAR_GZ_H

#include <stddef.h>
#include <stdint.h>

#include "mpx/error.h"

typedef struct mpx_tar mpx_tar;

typedef struct {
    char name[1024]; /* path inside the archive, leading "./" removed */
    int64_t size;    /* bytes of data */
    char type;       /* '0' regular file (also '\0' and '7'), '5' directory, others as in tar */
} mpx_tar_entry;

mpx_status mpx_tar_open(const char *path, mpx_tar **out);
/* Advance to the next entry (skipping the unread data of the current one). *done = 1 at the
 * end of the archive; then the stream has been read to its end and checked. */
mpx_status mpx_tar_next(mpx_tar *t, mpx_tar_entry *e, int *done);
/* Read the current entry's data (exactly e->size bytes) into buf. */
mpx_status mpx_tar_read(mpx_tar *t, void *buf, size_t n);
void mpx_tar_close(mpx_tar *t);

#endif
