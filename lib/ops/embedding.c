/* embedding.c — table lookup, forward and backward.
 *
 * ids I32 [...] (N positions), table [V, H], y [..., H]: y[n] = table[ids[n]].
 * Backward: dtable[v] = sum of dy[n] over the positions n with ids[n] = v, zero for unused rows.
 * Determinism without atomics or sorting: each thread owns a fixed range of table rows, zeroes
 * it, then scans all ids in position order and adds the dy rows that land in its range. Every
 * table row therefore sums its duplicates in position order, whatever the thread count; the
 * repeated scan of the ids is cheap next to the H-wide row additions.
 */
#include <string.h>

#include <omp.h>

#include "mpx/ops.h"
#include "ops_internal.h"

/* The multi-index of flat element i of t, into idx; returns idx. */
static const int64_t *index_of(const mpx_tensor *t, int64_t i, int64_t *idx) {
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = i % t->shape[d];
        i /= t->shape[d];
    }
    return idx;
}

/* ids is I32 with at most 3 dims (y adds H); table is [V, H]; y (dy) is [..ids.., H].
 * Every id lies in [0, V): the first one outside names its position and value. */
static mpx_status emb_check(const char *op, const mpx_tensor *ids, const char *tn,
                            const mpx_tensor *table, const char *yn, const mpx_tensor *y) {
    MPX_TRY(ops_expect(op, "ids", ids, MPX_I32, -1));
    if (ids->ndim >= MPX_MAX_DIMS)
        return mpx_fail(MPX_ERR_INPUT, "%s: ids has %d dims, expected 1..%d (%s adds H)", op,
                        ids->ndim, MPX_MAX_DIMS - 1, yn);
    MPX_TRY(ops_expect(op, tn, table, MPX_F32, 2));
    MPX_TRY(ops_expect(op, yn, y, MPX_F32, ids->ndim + 1));
    for (int i = 0; i < ids->ndim; i++)
        MPX_TRY(ops_expect_dim(op, yn, y, i, ids->shape[i], "the dims of ids"));
    MPX_TRY(ops_expect_dim(op, yn, y, ids->ndim, table->shape[1], "H, dim 1 of the table"));
    const int32_t *id = ids->data;
    int64_t n = mpx_tensor_numel(ids), v = table->shape[0];
    for (int64_t i = 0; i < n; i++)
        if (id[i] < 0 || id[i] >= v) {
            int64_t idx[MPX_MAX_DIMS];
            char pos[96];
            mpx_shape_str(ids->ndim, index_of(ids, i, idx), pos, sizeof pos);
            return mpx_fail(MPX_ERR_INPUT,
                            "%s: ids%s = %d is out of range: must be in [0, V = %lld), V the rows "
                            "of %s",
                            op, pos, (int)id[i], (long long)v, tn);
        }
    return MPX_OK;
}

mpx_status mpx_embedding_forward_cpu(const mpx_tensor *ids, const mpx_tensor *table,
                                     mpx_tensor *y) {
    static const char *op = "embedding forward";
    MPX_TRY(emb_check(op, ids, "table", table, "y", y));
    const int32_t *id = ids->data;
    const float *tab = table->data;
    float *yd = y->data;
    int64_t n = mpx_tensor_numel(ids), h = table->shape[1];
#pragma omp parallel for schedule(static) if (n * h >= OPS_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        memcpy(yd + i * h, tab + (int64_t)id[i] * h, (size_t)h * sizeof *yd);
    return MPX_OK;
}

mpx_status mpx_embedding_backward_cpu(const mpx_tensor *dy, const mpx_tensor *ids,
                                      mpx_tensor *dtable) {
    static const char *op = "embedding backward";
    MPX_TRY(emb_check(op, ids, "dtable", dtable, "dy", dy));
    const int32_t *id = ids->data;
    const float *dyd = dy->data;
    float *dt = dtable->data;
    int64_t n = mpx_tensor_numel(ids), v = dtable->shape[0], h = dtable->shape[1];
#pragma omp parallel if (v * h >= OPS_PAR_MIN)
    {
        int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
        int64_t v0 = v * t / nt, v1 = v * (t + 1) / nt;
        memset(dt + v0 * h, 0, (size_t)((v1 - v0) * h) * sizeof *dt);
        for (int64_t i = 0; i < n; i++) {
            if (id[i] < v0 || id[i] >= v1) continue;
            float *row = dt + (int64_t)id[i] * h;
            const float *src = dyd + i * h;
            for (int64_t j = 0; j < h; j++) row[j] += src[j];
        }
    }
    return MPX_OK;
}
