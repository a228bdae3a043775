/* dropout.cu — seeded dropout on the GPU with the CPU's mask (lib/ops/dropout.c).
 *
 * Element i (row-major) is kept iff u_i >= t, u_i = mpx_rand_u32(seed, MPX_RNG_DROPOUT ^ stream,
 * offset + i) and t = round(p * 2^32), and kept values are multiplied by (float)(1 / (1 - p)).
 * u_i comes from a device port of Philox4x32-10 (lib/core/rng.c: word (c & 3) of block c >> 2,
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
#include "mpx/cuda.h"
#include "mpx/rng.h"

namespace {

/* mpx_rand_u32 of lib/core/rng.c. */
__device__ __forceinline__ uint32_t philox_u32(uint64_t seed, uint64_t stream, uint64_t counter) {
    const uint64_t block = counter >> 2;
    uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        const uint32_t lo0 = 0xD2511F53u * c0, hi0 = __umulhi(0xD2511F53u, c0);
        const uint32_t lo1 = 0xCD9E8D57u * c2, hi1 = __umulhi(0xCD9E8D57u, c2);
        const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    switch (counter & 3) {
    case 0: return c0;
    case 1: return c1;
    case 2: return c2;
    default: return c3;
    }
}

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
            r = (uint64_t)philox_u32(k.seed, k.stream, k.offset + (uint64_t)i) >= k.thr
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
