/* ops_check.c — shape/dtype validation and the column-sum helper shared by the CPU ops. */
#include "ops_internal.h"

#include <stdio.h>

/* ops_expect with the dtype checked by the caller. */
static mpx_status expect_shape(const char *op, const char *name, const mpx_tensor *t, int ndim) {
    char buf[96];
    if (ndim >= 0 && t->ndim != ndim)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s has %d dims, expected %d", op, name, t->ndim,
                        ndim);
    if (t->ndim < 1 || t->ndim > MPX_MAX_DIMS)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s has %d dims, expected 1..%d", op, name, t->ndim,
                        MPX_MAX_DIMS);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] <= 0)
            return mpx_fail(MPX_ERR_INPUT, "%s: %s has shape %s with an empty dimension", op,
                            name, mpx_shape_str(t->ndim, t->shape, buf, sizeof buf));
    if (!t->data) return mpx_fail(MPX_ERR_INPUT, "%s: %s has no data", op, name);
    return MPX_OK;
}

static mpx_status expect_cpu(const char *op, const char *name, const mpx_tensor *t) {
    if (!t) return mpx_fail(MPX_ERR_INPUT, "%s: %s is NULL", op, name);
    if (t->device != MPX_DEV_CPU)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s is not a CPU tensor", op, name);
    return MPX_OK;
}

mpx_status ops_expect(const char *op, const char *name, const mpx_tensor *t, mpx_dtype dt,
                      int ndim) {
    MPX_TRY(expect_cpu(op, name, t));
    if (t->dtype != dt)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s has dtype %s, expected %s", op, name,
                        mpx_dtype_name(t->dtype), mpx_dtype_name(dt));
    return expect_shape(op, name, t, ndim);
}

mpx_status ops_expect_float(const char *op, const char *name, const mpx_tensor *t, int ndim) {
    MPX_TRY(expect_cpu(op, name, t));
    if (t->dtype != MPX_F32 && t->dtype != MPX_BF16 && t->dtype != MPX_F16)
        return mpx_fail(MPX_ERR_INPUT, "%s: %s has dtype %s, expected f32, bf16 or f16", op, name,
                        mpx_dtype_name(t->dtype));
    return expect_shape(op, name, t, ndim);
}

mpx_status ops_expect_dim(const char *op, const char *name, const mpx_tensor *t, int dim,
                          int64_t want, const char *why) {
    if (t->shape[dim] == want) return MPX_OK;
    char buf[96];
    return mpx_fail(MPX_ERR_INPUT, "%s: %s has shape %s, dim %d must be %lld (%s)", op, name,
                    mpx_shape_str(t->ndim, t->shape, buf, sizeof buf), dim, (long long)want, why);
}

mpx_status ops_expect_same_shape(const char *op, const char *name_a, const mpx_tensor *a,
                                 const char *name_b, const mpx_tensor *b) {
    int same = a->ndim == b->ndim;
    for (int i = 0; same && i < a->ndim; i++) same = a->shape[i] == b->shape[i];
    if (same) return MPX_OK;
    char ba[96], bb[96];
    return mpx_fail(MPX_ERR_INPUT, "%s: %s has shape %s but %s has shape %s (must match)", op,
                    name_b, mpx_shape_str(b->ndim, b->shape, bb, sizeof bb), name_a,
                    mpx_shape_str(a->ndim, a->shape, ba, sizeof ba));
}

void ops_column_sums(const float *x, int64_t m, int64_t n, float *out) {
    /* Blocks of 16 columns (one cache line of floats) per task; each block runs down all rows. */
    enum { CB = 16 };
    int64_t nblocks = (n + CB - 1) / CB;
#pragma omp parallel for schedule(static) if (m * n >= OPS_PAR_MIN && nblocks > 1)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        int64_t c0 = blk * CB, c1 = c0 + CB < n ? c0 + CB : n;
        double acc[CB] = {0};
        for (int64_t i = 0; i < m; i++) {
            const float *row = x + i * n;
            for (int64_t c = c0; c < c1; c++) acc[c - c0] += row[c];
        }
        for (int64_t c = c0; c < c1; c++) out[c] = (float)acc[c - c0];
    }
}
