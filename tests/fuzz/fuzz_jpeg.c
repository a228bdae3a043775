/* fuzz_jpeg.c — libFuzzer target: JPEG decoding through the image-folder reader (libjpeg with
 * our error manager: a corrupt file must be an error, never a longjmp into freed state). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mpx/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char root[64], dir[96], path[128];
    snprintf(root, sizeof root, "/tmp/mpx-fuzz-jpeg-%d", (int)getpid());
    snprintf(dir, sizeof dir, "%s/train", root);
    mkdir(root, 0700);
    mkdir(dir, 0700);
    snprintf(dir, sizeof dir, "%s/train/a", root);
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/x.jpg", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    mpx_image_folder *fo = NULL;
    if (mpx_image_folder_open(root, "train", &fo) == MPX_OK) {
        uint8_t *buf = NULL;
        size_t cap = 0;
        int h, w;
        (void)mpx_image_folder_decode(fo, 0, &buf, &cap, &h, &w);
        free(buf);
        mpx_image_folder_free(fo);
    }
    remove(path);
    return 0;
}
