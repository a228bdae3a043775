/* graph_profile.c — per-node timing summed per op kind (mpx_graph_profile), and the in-place
 * timing of loss scaling's graph-level work (mpx_graph_time_scaling). The executor reads
 * the clock around each node after the backend's sync (a no-op on the CPU; on CUDA it waits for
 * the queued kernels), so a node's time is its own — at the cost of the overlap a profile
 * forgoes. */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

void mpx_graph_profile(mpx_graph *g, int on) { g->profile = on; }

void mpx_graph_time_scaling(mpx_graph *g, int on) { g->time_scaling = on; }

double mpx_graph_scaling_seconds(const mpx_graph *g) { return g->scaling_s; }

int mpx_graph_profile_ops(const mpx_graph *g, mpx_op_profile *out, int cap) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const gnode *nd = &g->nodes[i];
        if (nd->op == OP_INPUT) continue;
        int k = 0;
        while (k < n && strcmp(out[k].op, op_name(nd->op)) != 0) k++;
        if (k == n) {
            if (n == cap) continue;
            out[n++] = (mpx_op_profile){op_name(nd->op), 0, 0, 0, 0};
        }
        out[k].fwd_s += nd->prof.fwd;
        out[k].bwd_s += nd->prof.bwd;
        out[k].gflop += 1e-9 * (node_flops(g, nd, 1) * (double)nd->prof.calls - nd->prof.skipped);
        out[k].calls += nd->prof.calls;
    }
    return n;
}

static int by_time(const void *a, const void *b) {
    const gnode *x = *(const gnode *const *)a, *y = *(const gnode *const *)b;
    double tx = x->prof.fwd + x->prof.bwd, ty = y->prof.fwd + y->prof.bwd;
    return (tx < ty) - (tx > ty);
}

void mpx_graph_profile_print(const mpx_graph *g, FILE *f, int top_nodes) {
    mpx_op_profile ops[OP_COUNT];
    int n = mpx_graph_profile_ops(g, ops, OP_COUNT);
    double total = 0;
    for (int i = 0; i < n; i++) total += ops[i].fwd_s + ops[i].bwd_s;
    fprintf(f, "%-12s %10s %10s %7s %10s\n", "op", "forward_s", "backward_s", "share", "GFLOP/s");
    for (int i = 0; i < n; i++) {
        double t = ops[i].fwd_s + ops[i].bwd_s;
        fprintf(f, "%-12s %10.3f %10.3f %6.1f%% %10.1f\n", ops[i].op, ops[i].fwd_s, ops[i].bwd_s,
                total > 0 ? 100 * t / total : 0, t > 0 ? ops[i].gflop / t : 0);
    }
    if (top_nodes <= 0) return;
    const gnode **order = malloc((size_t)g->n_nodes * sizeof *order);
    if (!order) return;
    for (int i = 0; i < g->n_nodes; i++) order[i] = &g->nodes[i];
    qsort(order, (size_t)g->n_nodes, sizeof *order, by_time);
    fprintf(f, "slowest nodes:\n");
    for (int i = 0; i < top_nodes && i < g->n_nodes; i++) {
        const gnode *nd = order[i];
        double t = nd->prof.fwd + nd->prof.bwd;
        double gf = 1e-9 * (node_flops(g, nd, 1) * (double)nd->prof.calls - nd->prof.skipped);
        fprintf(f, "  %-28s %-10s fwd %8.4f s  bwd %8.4f s  %7.1f GFLOP/s\n", nd->name,
                op_name(nd->op), nd->prof.fwd, nd->prof.bwd, t > 0 ? gf / t : 0);
    }
    free(order);
}
