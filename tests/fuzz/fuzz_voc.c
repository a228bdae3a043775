/* fuzz_voc.c — libFuzzer target: the Pascal VOC annotation (XML) parser. */
#include <stdint.h>

#include "mpx/detect.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mpx_voc_annotation a;
    (void)mpx_voc_parse((const char *)data, size, "fuzz.xml", size % 2, &a);
    return 0;
}
