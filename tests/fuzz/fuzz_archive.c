/* fuzz_archive.c — libFuzzer target: the datasets' archive reader (data/archive.c, libarchive's
 * tar with gzip): every entry of the input read, names, sizes and data. */
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "data/archive.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/mpx-fuzz-archive-%d.tar.gz", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    size_t w = fwrite(data, 1, size, f);
    if (fclose(f) != 0 || w != size) return 0;
    mpx_archive *a = NULL;
    if (mpx_archive_open(path, &a) == MPX_OK) {
        static char buf[1 << 16];
        for (int k = 0; k < 1000; k++) {
            mpx_archive_entry e;
            int done = 0;
            if (mpx_archive_next(a, &e, &done) != MPX_OK || done) break;
            if (k % 2 == 0 && e.size > 0 && e.size <= (int64_t)sizeof buf &&
                mpx_archive_read(a, buf, (size_t)e.size) != MPX_OK)
                break;
        }
        mpx_archive_close(a);
    }
    remove(path);
    return 0;
}
