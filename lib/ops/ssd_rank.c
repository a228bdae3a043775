/* ssd_rank.c — the one ranking order of the SSD code (value descending, index ascending):
 * a qsort comparator (the top-k heap of hard-negative mining and NMS is ssd_box.h's ssd_keep_best).
 * Because ties fall to the lower index the order is total, so every selection is unique and
 * independent of the sort algorithm.
 */
#include "ssd_internal.h"

int ssd_pair_cmp(const void *a, const void *b) {
    const ssd_pair *x = a, *y = b;
    if (ssd_pair_before(x, y)) return -1;
    return ssd_pair_before(y, x) ? 1 : 0;
}
