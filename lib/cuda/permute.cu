/* permute.cu — dimension permutation on the GPU (attention's head split and merge), forward and
 * backward (lib/ops/permute.c).
 *
 * y.shape[i] = x.shape[perm[i]], y[j0, .., jn] = x at the index whose dim perm[i] is j_i; fewer
 * than 4 dims are handled as 4-D with leading 1s. One thread per element of y (coalesced writes),
 * a strided read of x. Backward is the forward with the inverse permutation. Pure data movement
 * with one conversion into y's dtype: exact when x and y share a dtype, the executor's rounding
 * otherwise. Asynchronous; independent of the launch.
 */
#include <cuda_runtime.h>

#include "lib/cuda/ops.cuh"
#include "mpx/cuda.h"

namespace {

struct PermDims {
    int64_t ys[MPX_MAX_DIMS]; /* y's shape, padded to 4 dims */
    int64_t xs[MPX_MAX_DIMS]; /* stride in x of y's dim i */
};

__global__ void permute_kernel(PermDims d, const void *x, mpx_dtype xdt, void *y, mpx_dtype ydt,
                               size_t total) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t o = (size_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += stride) {
        int64_t rest = (int64_t)o, src = 0;
        for (int i = MPX_MAX_DIMS - 1; i >= 0; i--) {
            src += (rest % d.ys[i]) * d.xs[i];
            rest /= d.ys[i];
        }
        cuop_st(y, ydt, o, cuop_ld(x, xdt, (size_t)src));
    }
}

/* perm is a permutation of 0..ndim-1. */
mpx_status perm_check(const char *op, const int *perm, int ndim) {
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
mpx_status permute(const char *op, const int *perm, const char *xn, const mpx_tensor *x,
                   const char *yn, mpx_tensor *y, const char *why) {
    MPX_TRY(cuop_expect_float(op, xn, x, -1));
    MPX_TRY(perm_check(op, perm, x->ndim));
    MPX_TRY(cuop_expect_float(op, yn, y, x->ndim));
    for (int i = 0; i < x->ndim; i++)
        MPX_TRY(cuop_expect_dim(op, yn, y, i, x->shape[perm[i]], why));
    const int pad = MPX_MAX_DIMS - x->ndim;
    int64_t xstride[MPX_MAX_DIMS];
    int64_t s = 1;
    for (int dd = x->ndim - 1; dd >= 0; dd--)
        xstride[dd] = s, s *= x->shape[dd];
    PermDims d;
    for (int i = 0; i < MPX_MAX_DIMS; i++) {
        d.ys[i] = i < pad ? 1 : y->shape[i - pad];
        d.xs[i] = i < pad ? 0 : xstride[perm[i - pad]];
    }
    const size_t total = (size_t)mpx_tensor_numel(x);
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(total, &grid));
    permute_kernel<<<grid, kLaunchThreads>>>(d, x->data, x->dtype, y->data, y->dtype, total);
    CUOP_LAUNCHED(op, "permute", x);
    return MPX_OK;
}

} // namespace

extern "C" mpx_status mpx_permute_forward_cuda(const int *perm, const mpx_tensor *x,
                                               mpx_tensor *y) {
    return permute("permute forward", perm, "x", x, "y", y, "x.shape[perm[i]] for dim i");
}

extern "C" mpx_status mpx_permute_backward_cuda(const int *perm, const mpx_tensor *dy,
                                                mpx_tensor *dx) {
    static const char *op = "permute backward";
    MPX_TRY(cuop_expect_float(op, "dy", dy, -1));
    MPX_TRY(perm_check(op, perm, dy->ndim));
    int inv[MPX_MAX_DIMS];
    for (int i = 0; i < dy->ndim; i++)
        inv[perm[i]] = i;
    return permute(op, inv, "dy", dy, "dx", dx, "the dim of dy that perm sends dim i to");
}
