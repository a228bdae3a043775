/* dropout.c — seeded dropout whose mask is recomputed, never stored.
 *
 * Element i (row-major) is kept iff u_i >= t with u_i = mpx_rand_u32(seed, MPX_RNG_DROPOUT ^
 * stream, offset + i) and t = round(p * 2^32), so P(keep) = 1 - t / 2^32 = 1 - p to within
 * 2^-33; kept values are multiplied by (float)(1 / (1 - p)) (inverted dropout: the expectation
 * is unchanged). u_i is a pure function of (seed, stream, offset + i), so backward with the same
 * attr recomputes the very same mask: dx = dy * keep * scale. Counter-based draws also make
 * the result independent of the thread count. p = 0 keeps everything with scale 1 (identity).
 *
 * mpx_rand_u32 returns word (c & 3) of the Philox block c >> 2; the loop draws each block once
 * and uses all four words (the same values, a quarter of the Philox calls).
 */
#include <math.h>
#include <string.h>

#include "mpx/ops.h"
#include "mpx/rng.h"
#include "ops_internal.h"

static mpx_status attr_check(const char *op, const mpx_dropout_attr *a) {
    if (!a) return mpx_fail(MPX_ERR_INPUT, "%s: attr is NULL", op);
    if (!(a->p >= 0.0f && a->p < 1.0f))
        return mpx_fail(MPX_ERR_INPUT, "%s: p = %g must be in [0, 1)", op, a->p);
    return MPX_OK;
}

/* out[i] = in[i] * scale where element i is kept, 0 elsewhere, for i in [0, n). */
static void apply(const mpx_dropout_attr *a, const float *in, float *out, int64_t n) {
    if (a->p == 0.0f) { /* the identity: no draws needed */
        if (out != in) memcpy(out, in, (size_t)n * sizeof *out);
        return;
    }
    const uint64_t thr = (uint64_t)llround((double)a->p * 4294967296.0);
    const float scale = (float)(1.0 / (1.0 - (double)a->p));
    const uint64_t stream = (uint64_t)MPX_RNG_DROPOUT ^ a->stream;
    enum { BLOCK = 1024 }; /* elements per parallel task: a multiple of 4 */
    const int64_t ntask = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n >= OPS_PAR_MIN)
    for (int64_t t = 0; t < ntask; t++) {
        int64_t i0 = t * BLOCK, i1 = i0 + BLOCK < n ? i0 + BLOCK : n;
        uint32_t w[4];
        for (int64_t i = i0; i < i1; i++) {
            uint64_t c = a->offset + (uint64_t)i;
            if (i == i0 || (c & 3) == 0) mpx_philox(a->seed, stream, c >> 2, w);
            out[i] = w[c & 3] >= thr ? in[i] * scale : 0.0f;
        }
    }
}

mpx_status mpx_dropout_forward_cpu(const mpx_dropout_attr *a, const mpx_tensor *x, mpx_tensor *y) {
    static const char *op = "dropout forward";
    MPX_TRY(attr_check(op, a));
    MPX_TRY(ops_expect(op, "x", x, MPX_F32, -1));
    MPX_TRY(ops_expect(op, "y", y, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(op, "x", x, "y", y));
    apply(a, x->data, y->data, mpx_tensor_numel(x));
    return MPX_OK;
}

mpx_status mpx_dropout_backward_cpu(const mpx_dropout_attr *a, const mpx_tensor *dy,
                                    mpx_tensor *dx) {
    static const char *op = "dropout backward";
    MPX_TRY(attr_check(op, a));
    MPX_TRY(ops_expect(op, "dy", dy, MPX_F32, -1));
    MPX_TRY(ops_expect(op, "dx", dx, MPX_F32, -1));
    MPX_TRY(ops_expect_same_shape(op, "dy", dy, "dx", dx));
    apply(a, dy->data, dx->data, mpx_tensor_numel(dy));
    return MPX_OK;
}
