/* permute.c — dimension permutation (attention's head split and merge), forward and backward.
 *
 * y.shape[i] = x.shape[perm[i]] and y[j0, .., jn] = x at the index whose dim perm[i] is j_i.
 * Tensors of fewer than 4 dims are handled as 4-D with leading 1s. y is written in order, one
 * innermost row at a time: a straight copy when the innermost dim stays innermost (the head
 * split/merge, perm {0, 2, 1, 3}, copies rows of D floats); a transpose of the last two dims
 * (x's innermost becomes y's second-to-last: MXFP8's column blocks) in 32 x 32 tiles, which
 * keep the strided reads in cache; a strided gather otherwise.
 * Backward is the forward with the inverse permutation. Pure data movement: exact, and
 * independent of the thread count.
 */
#include <string.h>

#include "mpx/ops.h"
#include "ops_internal.h"

/* perm is a permutation of 0..ndim-1. */
static mpx_status perm_check(const char *op, const int *perm, int ndim) {
    if (!perm) return mpx_fail(MPX_ERR_INPUT, "%s: perm is NULL", op);
    int seen[MPX_MAX_DIMS] = {0};
    for (int i = 0; i < ndim; i++) {
        if (perm[i] < 0 || perm[i] >= ndim || seen[perm[i]]++)
            return mpx_fail(MPX_ERR_INPUT,
                            "%s: perm[%d] = %d: perm must be a permutation of 0..%d (x has %d "
                            "dims)",
                            op, i, perm[i], ndim - 1, ndim);
    }
    return MPX_OK;
}

/* y = x permuted by perm; `why` names where y's expected dims come from. */
static mpx_status permute(const char *op, const int *perm, const char *xn, const mpx_tensor *x,
                          const char *yn, mpx_tensor *y, const char *why) {
    MPX_TRY(ops_expect(op, xn, x, MPX_F32, -1));
    MPX_TRY(perm_check(op, perm, x->ndim));
    MPX_TRY(ops_expect(op, yn, y, MPX_F32, x->ndim));
    for (int i = 0; i < x->ndim; i++) MPX_TRY(ops_expect_dim(op, yn, y, i, x->shape[perm[i]], why));
    /* 4-D view: ys the shape of y, xs[i] the stride in x of y's dim i. */
    const int pad = MPX_MAX_DIMS - x->ndim;
    int64_t xstride[MPX_MAX_DIMS], ys[MPX_MAX_DIMS], xs[MPX_MAX_DIMS];
    int64_t s = 1;
    for (int d = x->ndim - 1; d >= 0; d--) xstride[d] = s, s *= x->shape[d];
    for (int i = 0; i < MPX_MAX_DIMS; i++) {
        ys[i] = i < pad ? 1 : y->shape[i - pad];
        xs[i] = i < pad ? 0 : xstride[perm[i - pad]];
    }
    const float *xd = x->data;
    float *yd = y->data;
    const int64_t inner = ys[3], outer = ys[0] * ys[1] * ys[2];
    const int contiguous = xs[3] == 1;
    if (!contiguous && xs[2] == 1) { /* a transpose of y's last two dims: in tiles */
        enum { TILE = 32 };
        const int64_t ta = (ys[2] + TILE - 1) / TILE, tiles = ys[0] * ys[1] * ta;
#pragma omp parallel for schedule(static) if (outer * inner >= OPS_PAR_MIN)
        for (int64_t t = 0; t < tiles; t++) {
            const int64_t a0 = (t % ta) * TILE, j1 = (t / ta) % ys[1], j0 = t / (ta * ys[1]);
            const int64_t a1 = a0 + TILE < ys[2] ? a0 + TILE : ys[2];
            const float *src = xd + j0 * xs[0] + j1 * xs[1];
            float *dst = yd + (j0 * ys[1] + j1) * ys[2] * inner;
            for (int64_t b0 = 0; b0 < inner; b0 += TILE) {
                const int64_t b1 = b0 + TILE < inner ? b0 + TILE : inner;
                for (int64_t a = a0; a < a1; a++)
                    for (int64_t b = b0; b < b1; b++) dst[a * inner + b] = src[a + b * xs[3]];
            }
        }
        return MPX_OK;
    }
#pragma omp parallel for schedule(static) if (outer * inner >= OPS_PAR_MIN)
    for (int64_t o = 0; o < outer; o++) {
        int64_t j2 = o % ys[2], j1 = (o / ys[2]) % ys[1], j0 = o / (ys[2] * ys[1]);
        const float *src = xd + j0 * xs[0] + j1 * xs[1] + j2 * xs[2];
        float *dst = yd + o * inner;
        if (contiguous)
            memcpy(dst, src, (size_t)inner * sizeof *dst);
        else
            for (int64_t j = 0; j < inner; j++) dst[j] = src[j * xs[3]];
    }
    return MPX_OK;
}

mpx_status mpx_permute_forward_cpu(const int *perm, const mpx_tensor *x, mpx_tensor *y) {
    return permute("permute forward", perm, "x", x, "y", y, "x.shape[perm[i]] for dim i");
}

mpx_status mpx_permute_backward_cpu(const int *perm, const mpx_tensor *dy, mpx_tensor *dx) {
    static const char *op = "permute backward";
    MPX_TRY(ops_expect(op, "dy", dy, MPX_F32, -1));
    MPX_TRY(perm_check(op, perm, dy->ndim));
    int inv[MPX_MAX_DIMS];
    for (int i = 0; i < dy->ndim; i++) inv[perm[i]] = i;
    return permute(op, inv, "dy", dy, "dx", dx, "the dim of dy that perm sends dim i to");
}
