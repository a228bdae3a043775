/* test_arena.c — the lifetime planner: buffers live together never overlap, buffers with
 * disjoint lifetimes share memory, offsets are aligned, and the plan is never larger than
 * allocating everything separately. Random plans are checked exhaustively pair by pair. */
#include <stdlib.h>

#include "mpx/arena.h"
#include "mpx/rng.h"
#include "testutil.h"

static int overlap_ok(const mpx_arena_block *b, int n) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            int live_together = !(b[i].last < b[j].first || b[j].last < b[i].first);
            int mem_overlap = b[i].size && b[j].size && b[i].offset < b[j].offset + b[j].size &&
                              b[j].offset < b[i].offset + b[i].size;
            if (live_together && mem_overlap) return 0;
        }
    return 1;
}

int main(void) {
    /* A chain: each buffer lives for two consecutive steps; alternating slots suffice. */
    mpx_arena_block chain[6];
    for (int i = 0; i < 6; i++) chain[i] = (mpx_arena_block){1000, i, i + 1, 0};
    size_t total = mpx_arena_plan(chain, 6, 64);
    CHECK(overlap_ok(chain, 6), "chain: live buffers overlap");
    CHECK(total == 2 * 1024, "chain needs two 1024-byte slots, planned %zu", total);
    for (int i = 0; i < 6; i++) CHECK(chain[i].offset % 64 == 0, "offset %zu not aligned", chain[i].offset);

    /* All live at once: no sharing. */
    mpx_arena_block all[4];
    for (int i = 0; i < 4; i++) all[i] = (mpx_arena_block){100 * (i + 1), 0, 10, 0};
    total = mpx_arena_plan(all, 4, 64);
    CHECK(overlap_ok(all, 4) && total == 128 + 256 + 320 + 448, "all live: total %zu", total);

    /* Random plans. */
    enum { N = 60 };
    for (int trial = 0; trial < 200; trial++) {
        mpx_arena_block b[N];
        mpx_rng r = mpx_rng_make((uint64_t)trial, MPX_RNG_TEST, 0);
        size_t sum = 0;
        for (int i = 0; i < N; i++) {
            int first = (int)mpx_rng_below(&r, 50), len = (int)mpx_rng_below(&r, 10);
            size_t size = mpx_rng_below(&r, 5) == 0 ? 0 : 1 + mpx_rng_below(&r, 5000);
            b[i] = (mpx_arena_block){size, first, first + len, 0};
            sum += (size + 63) & ~(size_t)63;
        }
        total = mpx_arena_plan(b, N, 64);
        CHECK(overlap_ok(b, N), "trial %d: live buffers overlap", trial);
        CHECK(total <= sum, "trial %d: plan %zu larger than separate buffers %zu", trial, total, sum);
        for (int i = 0; i < N; i++) CHECK(b[i].offset + b[i].size <= total, "trial %d: block %d past the end", trial, i);
    }
    return mpx_test_done(__FILE__);
}
