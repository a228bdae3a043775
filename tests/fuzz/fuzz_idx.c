/* fuzz_idx.c — libFuzzer target: the IDX (MNIST / Fashion-MNIST) reader, raw and gzip.
 * The input is split at its first byte's position into an image file and a label file. */
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "mpx/data.h"

static int write_file(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t cut = 1 + (size - 1) * data[0] / 255;
    char img[64], lab[64];
    snprintf(img, sizeof img, "/tmp/mpx-fuzz-idx-%d-images", (int)getpid());
    snprintf(lab, sizeof lab, "/tmp/mpx-fuzz-idx-%d-labels", (int)getpid());
    if (write_file(img, data + 1, cut - 1) || write_file(lab, data + cut, size - cut)) return 0;
    mpx_dataset ds = {0};
    if (mpx_idx_read(img, lab, 0, &ds) == MPX_OK) mpx_dataset_free(&ds);
    remove(img);
    remove(lab);
    return 0;
}
