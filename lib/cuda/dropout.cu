/* dropout.cu — seeded dropout on the GPU with the CPU's mask (lib/ops/dropout.c).
 *
 * Element i (row-major) is kept iff u_i >= t, u_i = mpx_rand_u32(seed, MPX_RNG_DROPOUT ^ stream,
 * offset + i) and t = round(p * 2^32), and kept values are multiplied by (float)(1 / (1 - p)).
 * u_i comes from the device Philox4x32-10 of philox.cuh (lib/core/rng.c: word (c & 3) of block c >> 2,
 * the 64-bit products taken as __umulhi and a 32-bit multiply), so the mask is the CPU's bit for
 * bit; t and the scale are computed on the host with the CPU's expressions. The product is a
 * single IEEE multiply (__fmul_rn) and the result is rounded once into the output's dtype, so
 * forward and backward give the CPU backend's bits for every input and storage dtype.
 * One thread per element (a Philox block per element: compute is cheap next to the memory
 * traffic); independent of the launch; asynchronous. p = 0 is the identity (a converting copy).
 */
#include <cuda_runtime.h>
#include <math.h>

#include "lib/cuda/ops.cuh"
#include "lib/cuda/philox.cuh"
#include "mpx/cuda.h"
#include "mpx/rng.h"

namespace {

struct Mask {
    uint64_t seed, stream, offset, thr;
    float scale;
    int identity; /* p == 0 */
};

__global__ void dropout_kernel(Mask k, const void *in, mpx_dtype idt, void *out, mpx_dtype odt,
                               size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = cuop_ld(in, idt, i);
        float r = v;
        if (!k.identity)
            r = (uint64_t)mpx_philox_u32_dev(k.seed, k.stream, k.offset + (uint64_t)i) >= k.thr
                    ? __fmul_rn(v, k.scale)
                    : 0.0f;
        cuop_st(out, odt, i, r);
    }
}

mpx_status attr_check(const char *op, const mpx_dropout_attr *a) {
    if (!a) return mpx_fail(MPX_ERR_INPUT, "%s: attr is NULL", op);
    if (!(a->p >= 0.0f && a->p < 1.0f))
        return mpx_fail(MPX_ERR_INPUT, "%s: p = %g must be in [0, 1)", op, a->p);
    return MPX_OK;
}

mpx_status apply(const char *op, const mpx_dropout_attr *a, const char *xn, const mpx_tensor *x,
                 const char *yn, mpx_tensor *y) {
    MPX_TRY(attr_check(op, a));
    MPX_TRY(cuop_expect_float(op, xn, x, -1));
    MPX_TRY(cuop_expect_float(op, yn, y, -1));
    MPX_TRY(cuop_expect_same_shape(op, xn, x, yn, y));
    Mask k;
    k.seed = a->seed;
    k.stream = (uint64_t)MPX_RNG_DROPOUT ^ a->stream;
    k.offset = a->offset;
    k.identity = a->p == 0.0f;
    k.thr = k.identity ? 0 : (uint64_t)llround((double)a->p * 4294967296.0);
    k.scale = k.identity ? 1.0f : (float)(1.0 / (1.0 - (double)a->p));
    const size_t n = (size_t)mpx_tensor_numel(x);
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    dropout_kernel<<<grid, kLaunchThreads>>>(k, x->data, x->dtype, y->data, y->dtype, n);
    CUOP_LAUNCHED(op, "dropout", x);
    return MPX_OK;
}

} // namespace

extern "C" mpx_status mpx_dropout_forward_cuda(const mpx_dropout_attr *a, const mpx_tensor *x,
                                               mpx_tensor *y) {
    return apply("dropout forward", a, "x", x, "y", y);
}

extern "C" mpx_status mpx_dropout_backward_cuda(const mpx_dropout_attr *a, const mpx_tensor *dy,
                                                mpx_tensor *dx) {
    return apply("dropout backward", a, "dy", dy, "dx", dx);
}
