/* graph_dist.c — what the executor reduces over the ranks of a data-parallel run (comm.h), so
 * that every rank takes the same decisions and keeps the same weights. Every function is the
 * identity with one rank, so a single process computes exactly what it did without them.
 *
 * Each rank's loss is the mean over its slice of the global batch, so the global loss is the
 * mean of the ranks' losses and its gradient the mean of theirs: parameter gradients are
 * summed and divided by the number of ranks, after the backward pass (not overlapped with it),
 * one all-reduce per parameter on the CPU or over NCCL (the backend's allreduce_sum), else one
 * bucket through host memory. They are reduced as the executor keeps them, in
 * FP32 and unscaled: a layer's weight gradient is unscaled by the scale it carried as it is
 * accumulated (graph_views.c: commit_param_grad), and under adaptive scaling every layer
 * carries its own, so the unscaled value is the one all methods share, and FP32 holds the sum
 * of the ranks' values without overflow. Then the step's status: the loss (the mean), the
 * non-finite count (the sum: one rank's overflow makes every rank skip) and the speculative
 * merges' misses (the sum: every rank runs the pass again). Adaptive scaling's decisions read
 * statistics of the global batch: a layer's gradient moments (count, sum, sum of squares,
 * extremes) and a merge's branch magnitudes (the maximum) are reduced before the factor or
 * target is chosen; the weights' moments need nothing (the weights are the same everywhere).
 * Statistics steps sum the cast counts and histograms, so the run file describes the global
 * batch. After every pass the ranks' factors are compared: a difference is a bug, reported.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"
#include "mpx/comm.h"
#include "mpx/runtime.h"

int dist_ranks(void) { return mpx_comm_size(); }

/* The parameter gradients, summed over the ranks and divided by their number: in place where
 * the backend's memory is the host's (the CPU), else in one bucket copied to the host, reduced
 * with one call and copied back. */
mpx_status dist_reduce_grads(mpx_graph *g) {
    const int ranks = mpx_comm_size();
    if (ranks == 1) return MPX_OK;
    const double t0 = mpx_now();
    const float inv = 1.0f / (float)ranks;
    size_t total = 0;
    for (int i = 0; i < g->n_params; i++) total += (size_t)g->params[i].numel;
    mpx_status st = MPX_OK;
    if (g->be->allreduce_sum) { /* the devices' own links (CUDA: NCCL) */
        for (int i = 0; i < g->n_params && st == MPX_OK; i++)
            st = g->be->allreduce_sum(g->be, g->params[i].grad, (size_t)g->params[i].numel, inv);
    } else if (g->be->device == MPX_DEV_CPU) {
        for (int i = 0; i < g->n_params && st == MPX_OK; i++) {
            float *p = g->params[i].grad;
            const size_t n = (size_t)g->params[i].numel;
            st = mpx_comm_allreduce(p, n, MPX_COMM_F32, MPX_COMM_SUM);
            for (size_t k = 0; st == MPX_OK && k < n; k++) p[k] *= inv;
        }
    } else {
        float *bucket = malloc(total * sizeof *bucket);
        if (!bucket) return mpx_fail(MPX_ERR_NOMEM, "out of memory for the gradient all-reduce");
        size_t off = 0;
        for (int i = 0; i < g->n_params; i++) {
            g->be->download(g->be, bucket + off, g->params[i].grad,
                            (size_t)g->params[i].numel * sizeof(float));
            off += (size_t)g->params[i].numel;
        }
        st = mpx_comm_allreduce(bucket, total, MPX_COMM_F32, MPX_COMM_SUM);
        if (st == MPX_OK) {
            for (size_t k = 0; k < total; k++) bucket[k] *= inv;
            off = 0;
            for (int i = 0; i < g->n_params; i++) {
                g->be->upload(g->be, g->params[i].grad, bucket + off,
                              (size_t)g->params[i].numel * sizeof(float));
                off += (size_t)g->params[i].numel;
            }
            g->be->sync(g->be); /* the upload may be queued: the bucket is freed below */
            st = g->be->last_error(g->be);
        }
        free(bucket);
    }
    g->dist_s += mpx_now() - t0;
    g->dist_bytes += (double)total * sizeof(float);
    return st == MPX_OK ? MPX_OK : mpx_fail_context(st, "the gradient all-reduce");
}

/* The step's status read from the backend: the ranks' mean loss, summed non-finite count and
 * merge misses. */
mpx_status dist_reduce_status(mpx_graph *g) {
    const int ranks = mpx_comm_size();
    if (ranks == 1) return MPX_OK;
    step_status *s = g->host_status;
    double loss = s->loss;
    uint64_t counts[2] = {s->nonfinite, s->merge_misses};
    MPX_TRY(mpx_comm_allreduce(&loss, 1, MPX_COMM_F64, MPX_COMM_SUM));
    MPX_TRY(mpx_comm_allreduce(counts, 2, MPX_COMM_U64, MPX_COMM_SUM));
    s->loss = (float)(loss / ranks);
    s->nonfinite = counts[0];
    s->merge_misses = (uint32_t)counts[1];
    return MPX_OK;
}

/* The moments of the gradient of the global batch from each rank's (count, mean, population
 * std, extremes) of its slice. */
mpx_status dist_reduce_moments(mpx_moments *m) {
    if (mpx_comm_size() == 1) return MPX_OK;
    const double n = (double)m->n;
    double sums[3] = {n, n * m->mean, n * (m->std * m->std + m->mean * m->mean)};
    float ext[3] = {m->max, m->absmax, -m->min};
    int32_t fin = m->all_finite;
    MPX_TRY(mpx_comm_allreduce(sums, 3, MPX_COMM_F64, MPX_COMM_SUM));
    MPX_TRY(mpx_comm_allreduce(ext, 3, MPX_COMM_F32, MPX_COMM_MAX));
    MPX_TRY(mpx_comm_allreduce(&fin, 1, MPX_COMM_U32, MPX_COMM_MIN));
    m->n = (uint64_t)sums[0];
    m->mean = sums[0] > 0 ? sums[1] / sums[0] : 0;
    const double var = sums[0] > 0 ? sums[2] / sums[0] - m->mean * m->mean : 0;
    m->std = var > 0 ? sqrt(var) : 0;
    m->max = ext[0];
    m->absmax = ext[1];
    m->min = -ext[2];
    m->all_finite = fin;
    return MPX_OK;
}

/* A merge's branch magnitudes (k of them): the maximum over the ranks. */
mpx_status dist_max_magnitudes(float *a, int k) {
    return mpx_comm_allreduce(a, (size_t)k, MPX_COMM_F32, MPX_COMM_MAX);
}

/* A statistics step's counts (every layer's cast statistics: 64-bit integers only) summed, and
 * the gradient moments it recorded combined. */
mpx_status dist_reduce_stats(mpx_graph *g) {
    if (mpx_comm_size() == 1) return MPX_OK;
    MPX_TRY(mpx_comm_allreduce(
        g->host_stats, (size_t)g->n_layers * STATS_ROW * sizeof(mpx_cast_stats) / sizeof(uint64_t),
        MPX_COMM_U64, MPX_COMM_SUM));
    for (int l = 0; l < g->n_layers; l++) /* every rank records the same layers */
        if (g->moments_due[2 * l]) MPX_TRY(dist_reduce_moments(&g->host_moments[2 * l]));
    if (g->whatif) /* the what-if counts (graph_whatif.c) */
        for (int l = 0; l < g->n_layers; l++)
            MPX_TRY(mpx_comm_allreduce(g->pass->bw->stats[l].whatif,
                                       MPX_WHATIF_N * (sizeof(mpx_cast_stats) / sizeof(uint64_t)),
                                       MPX_COMM_U64, MPX_COMM_SUM));
    return MPX_OK;
}

/* Batch-norm's totals over the ranks (mpx_batchnorm_attr.reduce). Forward: each rank's sums are
 * about its own shift a_r (its first row), so they are first moved to rank 0's shift a:
 * sum (x - a) = S1 + m d and sum (x - a)^2 = S2 + 2 d S1 + m d^2 with d = a_r - a. */
mpx_status dist_bn_reduce(void *ctx, double *tot, float *shift, int64_t c, int64_t m) {
    (void)ctx;
    if (shift) {
        float *a = malloc((size_t)c * sizeof *a);
        if (!a) return mpx_fail(MPX_ERR_NOMEM, "out of memory for a synchronised batch-norm");
        memcpy(a, shift, (size_t)c * sizeof *a);
        mpx_status st = mpx_comm_bcast(a, (size_t)c * sizeof *a, 0);
        for (int64_t j = 0; st == MPX_OK && j < c; j++) {
            const double d = (double)shift[j] - (double)a[j], s1 = tot[j];
            tot[c + j] += 2 * d * s1 + (double)m * d * d;
            tot[j] = s1 + (double)m * d;
            shift[j] = a[j];
        }
        free(a);
        MPX_TRY(st);
    }
    return mpx_comm_allreduce(tot, (size_t)(2 * c), MPX_COMM_F64, MPX_COMM_SUM);
}

mpx_status dist_bn_attr(const mpx_graph *g, mpx_batchnorm_attr *a) {
    if (!g->sync_bn || mpx_comm_size() == 1) return MPX_OK;
    if (g->be->device != MPX_DEV_CPU)
        return mpx_fail(MPX_ERR_UNSUPPORTED,
                        "train.sync_bn: synchronised batch-norm runs on the CPU backend only");
    a->reduce = dist_bn_reduce;
    a->reduce_ctx = NULL;
    a->replicas = mpx_comm_size();
    return MPX_OK;
}

/* Every rank's layer factors of this pass must be the same: compared, a difference reported
 * with the first layer at fault. */
mpx_status dist_check_factors(const mpx_graph *g) {
    if (mpx_comm_size() == 1) return MPX_OK;
    double *f = malloc((size_t)(2 * g->n_nodes + 1) * sizeof *f);
    if (!f) return mpx_fail(MPX_ERR_NOMEM, "out of memory comparing the ranks' factors");
    for (int i = 0; i < g->n_nodes; i++) f[i] = f[g->n_nodes + i] = g->nodes[i].sc.layer_scale;
    mpx_status st = mpx_comm_allreduce(f, (size_t)g->n_nodes, MPX_COMM_F64, MPX_COMM_MAX);
    if (st == MPX_OK)
        st = mpx_comm_allreduce(f + g->n_nodes, (size_t)g->n_nodes, MPX_COMM_F64, MPX_COMM_MIN);
    for (int i = 0; st == MPX_OK && i < g->n_nodes; i++)
        if (f[i] != f[g->n_nodes + i])
            st = mpx_fail(MPX_ERR_INTERNAL,
                          "the ranks chose different factors for '%s' (%g to %g): their "
                          "statistics were not reduced alike",
                          g->nodes[i].name, f[g->n_nodes + i], f[i]);
    free(f);
    return st;
}

void mpx_graph_allreduce_stats(const mpx_graph *g, double *seconds, double *bytes) {
    *seconds = g->dist_s;
    *bytes = g->dist_bytes;
}
