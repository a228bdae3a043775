/* arena.c — greedy interval placement (see arena.h). */
#include "mpx/arena.h"

#include <stdlib.h>

static size_t align_up(size_t v, size_t a) { return (v + a - 1) & ~(a - 1); }

size_t mpx_arena_plan(mpx_arena_block *b, int n, size_t align) {
    /* Order: largest first (ties by index, so the plan is deterministic). O(n^2) is fine for
     * graphs of a few thousand buffers. */
    int *order = malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    int *placed = malloc((size_t)(n > 0 ? n : 1) * sizeof *placed);
    if (!order || !placed) {
        free(order);
        free(placed);
        /* Fall back to no sharing at all: still correct, only larger. */
        size_t off = 0;
        for (int i = 0; i < n; i++) {
            b[i].offset = off;
            off += align_up(b[i].size, align);
        }
        return off;
    }
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) {
        int v = order[i], j = i - 1;
        while (j >= 0 && (b[order[j]].size < b[v].size ||
                          (b[order[j]].size == b[v].size && order[j] > v))) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = v;
    }
    size_t total = 0;
    int n_placed = 0;
    for (int oi = 0; oi < n; oi++) {
        mpx_arena_block *x = &b[order[oi]];
        x->offset = 0;
        if (x->size == 0) continue;
        size_t size = align_up(x->size, align);
        /* Try candidate offsets: 0 and the end of every live-overlapping placed block. */
        size_t best = (size_t)-1;
        for (int ci = -1; ci < n_placed; ci++) {
            size_t cand = ci < 0 ? 0 : align_up(b[placed[ci]].offset + b[placed[ci]].size, align);
            if (ci >= 0 && (b[placed[ci]].last < x->first || b[placed[ci]].first > x->last))
                continue;
            int ok = 1;
            for (int pj = 0; pj < n_placed && ok; pj++) {
                const mpx_arena_block *y = &b[placed[pj]];
                if (y->last < x->first || y->first > x->last) continue; /* not live together */
                if (cand < y->offset + y->size && y->offset < cand + size) ok = 0;
            }
            if (ok && cand < best) best = cand;
        }
        x->offset = best;
        if (best + size > total) total = best + size;
        placed[n_placed++] = order[oi];
    }
    free(order);
    free(placed);
    return total;
}
