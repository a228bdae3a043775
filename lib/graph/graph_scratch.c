/* graph_scratch.c — the executor's scratch (graph_internal.h): a bump allocator over the arena
 * the memory plan sized, reset per node, for the FP32 views, decoded operands and staged
 * gradients of one node. Below the views and the what-if counts, which both take from it. */
#include "graph_internal.h"

float *scratch_take(mpx_graph *g, int64_t numel) {
    size_t need = ((size_t)numel + 15) & ~(size_t)15;
    if (g->scratch_used + need > g->scratch_floats) return NULL;
    float *p = g->scratch + g->scratch_used;
    g->scratch_used += need;
    return p;
}

void scratch_reset(mpx_graph *g) { g->scratch_used = 0; }

/* Scratch for `numel` elements of dtype dt (the plan counts FP32 elements, the most any holds). */
void *scratch_take_dtype(mpx_graph *g, int64_t numel, mpx_dtype dt) {
    return scratch_take(g, (numel * (int64_t)mpx_dtype_size(dt) + 3) / 4);
}

mpx_status scratch_fail(const mpx_graph *g, const char *what) {
    return mpx_fail(MPX_ERR_INTERNAL, "scratch plan too small for %s (%zu floats)", what,
                    g->scratch_floats);
}
