/* test_memcpy_parallel.c — mpx_memcpy_parallel copies every byte: sizes below, at and around the
 * 4 MiB threshold where it goes parallel and around its 1 MiB pieces (a short last piece),
 * at an odd offset, compared byte for byte with the source; nothing past the end is written.
 */
#include <stdlib.h>
#include <string.h>

#include "mpx/rng.h"
#include "mpx/runtime.h"
#include "testutil.h"

int main(void) {
    const size_t sizes[] = {0, 1, 4095, (4u << 20) - 1, 4u << 20, (4u << 20) + 3, (9u << 20) + 7};
    const size_t cap = (9u << 20) + 64;
    unsigned char *src = malloc(cap), *dst = malloc(cap);
    REQUIRE(src && dst, "out of memory");
    for (size_t i = 0; i < cap; i++) src[i] = (unsigned char)mpx_rand_u32(5, MPX_RNG_TEST, i);
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        memset(dst, 0xa5, cap);
        mpx_memcpy_parallel(dst + 1, src + 3, sizes[k]);
        CHECK(memcmp(dst + 1, src + 3, sizes[k]) == 0, "%zu bytes: the copy differs", sizes[k]);
        CHECK(dst[0] == 0xa5 && dst[1 + sizes[k]] == 0xa5, "%zu bytes: wrote outside the copy",
              sizes[k]);
    }
    free(src);
    free(dst);
    return mpx_test_done(__FILE__);
}
