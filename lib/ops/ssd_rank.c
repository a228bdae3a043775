/* ssd_rank.c — the one ranking order of the SSD code (value descending, index ascending):
 * a qsort comparator and top-k selection with a heap (hard-negative mining, NMS candidates).
 * Because ties fall to the lower index the order is total, so every selection is unique and
 * independent of the sort algorithm.
 */
#include "ssd_internal.h"

int ssd_pair_cmp(const void *a, const void *b) {
    const ssd_pair *x = a, *y = b;
    if (ssd_pair_before(x, y)) return -1;
    return ssd_pair_before(y, x) ? 1 : 0;
}

/* Restores the heap order below h[i]: every parent ranks after its children, so h[0] is the
 * lowest-ranked element kept (the one a better candidate replaces). */
static void sift_down(ssd_pair *h, int64_t n, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && ssd_pair_before(&h[w], &h[l])) w = l;
        if (r < n && ssd_pair_before(&h[w], &h[r])) w = r;
        if (w == i) return;
        ssd_pair t = h[i];
        h[i] = h[w], h[w] = t;
        i = w;
    }
}

void ssd_keep_best(ssd_pair *c, int64_t n, int64_t k) {
    if (k <= 0 || k >= n) return;
    for (int64_t i = k / 2 - 1; i >= 0; i--) sift_down(c, k, i);
    for (int64_t i = k; i < n; i++)
        if (ssd_pair_before(&c[i], &c[0])) {
            c[0] = c[i];
            sift_down(c, k, 0);
        }
}
