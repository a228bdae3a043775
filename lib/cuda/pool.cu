/* pool.cu — max-pool 2D and global average pool on the GPU, NHWC, forward and backward
 * (lib/ops/pool.c).
 *
 * Max-pool: one thread per output element scans its window in row-major order, skipping padded
 * cells; the maximum is the first largest value, and a NaN, once met, stays the maximum. The
 * backward first finds each window's argmax once (its first position with x == y, NaN matching
 * NaN; one thread per output element, into int32 scratch), then gathers, one thread per input
 * element: it visits the windows that contain it in the CPU's (oy, ox) order and adds dy for
 * each window whose argmax is itself — the CPU's additions in the CPU's order, without atomics,
 * so dx has the CPU's bits. (Finding the argmax inside the gather rescanned every window once
 * per input it covers: 4 scans per input for ResNet's 3x3 / 2 pool.) Global average pool: one
 * thread per (image, channel) sums the H*W values in double in order and divides by H*W (the
 * CPU's bits); backward dx = dy / (H*W) in FP32. Every result is rounded once into its
 * tensor's dtype (F32, F16 or BF16); selections are exact.
 * Asynchronous; independent of the launch.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "lib/cuda/ops.cuh"
#include "mpx/cuda.h"

namespace {

struct PoolDims {
    int64_t n, h, w, c, oh, ow;
    int kernel, stride, pad;
};

/* Flat NHWC index e of an [n, h, w, c] array -> (image, row, col, channel). */
template <typename I>
__device__ __forceinline__ void unflatten(I e, I h, I w, I c, I *in, I *y, I *x, I *ch) {
    *ch = e % c;
    e /= c;
    *x = e % w;
    e /= w;
    *y = e % h;
    *in = e / h;
}

/* The window's valid rows/cols: [*lo, *hi) in input coordinates. */
__device__ __forceinline__ void window(int64_t o, const PoolDims &d, int64_t size, int64_t *lo,
                                       int64_t *hi) {
    const int64_t s = o * d.stride - d.pad, e = s + d.kernel;
    *lo = s < 0 ? 0 : s;
    *hi = e > size ? size : e;
}

__global__ void maxpool_fwd(PoolDims d, const void *x, mpx_dtype xdt, void *y, mpx_dtype ydt) {
    const size_t total = (size_t)(d.n * d.oh * d.ow * d.c), stride = (size_t)gridDim.x * blockDim.x;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        int64_t in, oy, ox, c;
        unflatten<int64_t>((int64_t)e, d.oh, d.ow, d.c, &in, &oy, &ox, &c);
        int64_t y0, y1, x0, x1;
        window(oy, d, d.h, &y0, &y1);
        window(ox, d, d.w, &x0, &x1);
        float out = cuop_ld(x, xdt, (size_t)(((in * d.h + y0) * d.w + x0) * d.c + c));
        for (int64_t iy = y0; iy < y1; iy++)
            for (int64_t ix = (iy == y0 ? x0 + 1 : x0); ix < x1; ix++) {
                const float v = cuop_ld(x, xdt, (size_t)(((in * d.h + iy) * d.w + ix) * d.c + c));
                if (v > out || (isnan(v) && !isnan(out))) out = v;
            }
        cuop_st(y, ydt, e, out);
    }
}

/* Output o's argmax: the first position of its window, in row-major order, whose x equals y[o]
 * (NaN matching NaN), as iy * W + ix; -1 when there is none. One thread per output element.
 * I: the index type, 32-bit when every index fits (integer division is much cheaper). */
template <typename I>
__global__ void maxpool_argmax(PoolDims d, const void *x, mpx_dtype xdt, const void *y,
                               mpx_dtype ydt, int32_t *arg) {
    const I C = (I)d.c, OW = (I)d.ow, OH = (I)d.oh, H = (I)d.h, W = (I)d.w;
    const size_t total = (size_t)(d.n * d.oh * d.ow * d.c), stride = (size_t)gridDim.x * blockDim.x;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        I in, oy, ox, c;
        unflatten<I>((I)e, OH, OW, C, &in, &oy, &ox, &c);
        int64_t y0, y1, x0, x1;
        window(oy, d, d.h, &y0, &y1);
        window(ox, d, d.w, &x0, &x1);
        const float m = cuop_ld(y, ydt, e);
        int32_t found = -1;
        for (I wy = (I)y0; wy < (I)y1 && found < 0; wy++)
            for (I wx = (I)x0; wx < (I)x1; wx++) {
                const float v = cuop_ld(x, xdt, (size_t)(((in * H + wy) * W + wx) * C + c));
                if (v == m || (isnan(v) && isnan(m))) {
                    found = (int32_t)(wy * W + wx);
                    break;
                }
            }
        arg[e] = found;
    }
}

struct MaxBwdArgs {
    PoolDims d = {};
    const void *dy;
    const int32_t *arg;
    mpx_dtype dydt;
    void *dx;
    mpx_dtype dxdt;
};

/* dx at (iy, ix): the sum of dy over the windows whose argmax it is, in (oy, ox) order. One
 * thread per input element. */
template <typename I>
__global__ void maxpool_bwd(MaxBwdArgs a) {
    const PoolDims &d = a.d;
    const I C = (I)d.c, OW = (I)d.ow, OH = (I)d.oh, H = (I)d.h, W = (I)d.w;
    const I K = (I)d.kernel, S = (I)d.stride, P = (I)d.pad;
    const size_t total = (size_t)(d.n * d.h * d.w * d.c), stride = (size_t)gridDim.x * blockDim.x;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        I in, iy, ix, c;
        unflatten<I>((I)e, H, W, C, &in, &iy, &ix, &c);
        /* Windows containing (iy, ix): o * stride - pad <= i < o * stride - pad + kernel. */
        const I ny = iy + P - K + 1, nx = ix + P - K + 1;
        const I oy_lo = ny <= 0 ? 0 : (ny + S - 1) / S;
        const I ox_lo = nx <= 0 ? 0 : (nx + S - 1) / S;
        const I oy_hi = (iy + P) / S < OH - 1 ? (iy + P) / S : OH - 1;
        const I ox_hi = (ix + P) / S < OW - 1 ? (ix + P) / S : OW - 1;
        const int32_t self = (int32_t)(iy * W + ix);
        float acc = 0.0f;
        for (I oy = oy_lo; oy <= oy_hi; oy++)
            for (I ox = ox_lo; ox <= ox_hi; ox++) {
                const size_t o = (size_t)(((in * OH + oy) * OW + ox) * C + c);
                if (a.arg[o] == self) acc = __fadd_rn(acc, cuop_ld(a.dy, a.dydt, o));
            }
        cuop_st(a.dx, a.dxdt, e, acc);
    }
}

/* y[n, c] = (sum over the H*W positions of x[n, p, c], in double, in order) / (H*W). */
__global__ void avgpool_fwd(const void *x, mpx_dtype xdt, int64_t n, int64_t hw, int64_t c, void *y,
                            mpx_dtype ydt) {
    const size_t total = (size_t)(n * c), stride = (size_t)gridDim.x * blockDim.x;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const int64_t in = (int64_t)e / c, j = (int64_t)e % c;
        double s = 0;
        for (int64_t p = 0; p < hw; p++)
            s = __dadd_rn(s, (double)cuop_ld(x, xdt, (size_t)((in * hw + p) * c + j)));
        cuop_st(y, ydt, e, (float)__ddiv_rn(s, (double)hw));
    }
}

/* dx[n, p, c] = dy[n, c] / (H*W) */
__global__ void avgpool_bwd(const void *dy, mpx_dtype dydt, int64_t hw, int64_t c, float fhw,
                            void *dx, mpx_dtype dxdt, size_t total) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const int64_t j = (int64_t)(e % (size_t)c), in = (int64_t)(e / (size_t)(hw * c));
        cuop_st(dx, dxdt, e, __fdiv_rn(cuop_ld(dy, dydt, (size_t)(in * c + j)), fhw));
    }
}

/* pool.c's maxpool_check: attr and the x / y pair; fills d. */
mpx_status maxpool_check(const char *op, const mpx_pool2d_attr *a, const mpx_tensor *x,
                         const char *yn, const mpx_tensor *y, PoolDims *d) {
    if (!a) return mpx_fail(MPX_ERR_INPUT, "%s: attr is NULL", op);
    if (a->kernel < 1 || a->stride < 1 || a->pad < 0 || a->pad >= a->kernel)
        return mpx_fail(MPX_ERR_INPUT,
                        "%s: kernel %d and stride %d must be >= 1 and pad %d in [0, kernel)", op,
                        a->kernel, a->stride, a->pad);
    MPX_TRY(cuop_expect_float(op, "x", x, 4));
    MPX_TRY(cuop_expect_float(op, yn, y, 4));
    const int64_t h = x->shape[1], w = x->shape[2];
    if (h + 2 * a->pad < a->kernel || w + 2 * a->pad < a->kernel)
        return mpx_fail(MPX_ERR_INPUT, "%s: x is %lldx%lld, smaller than kernel %d with pad %d", op,
                        (long long)h, (long long)w, a->kernel, a->pad);
    d->n = x->shape[0], d->h = h, d->w = w, d->c = x->shape[3];
    d->oh = (h + 2 * a->pad - a->kernel) / a->stride + 1;
    d->ow = (w + 2 * a->pad - a->kernel) / a->stride + 1;
    d->kernel = a->kernel, d->stride = a->stride, d->pad = a->pad;
    MPX_TRY(cuop_expect_dim(op, yn, y, 0, x->shape[0], "N of x"));
    MPX_TRY(cuop_expect_dim(op, yn, y, 1, d->oh, "OH = (H + 2*pad - kernel) / stride + 1"));
    MPX_TRY(cuop_expect_dim(op, yn, y, 2, d->ow, "OW = (W + 2*pad - kernel) / stride + 1"));
    return cuop_expect_dim(op, yn, y, 3, x->shape[3], "C of x");
}

} // namespace

extern "C" mpx_status mpx_maxpool2d_forward_cuda(const mpx_pool2d_attr *a, const mpx_tensor *x,
                                                 mpx_tensor *y) {
    static const char *op = "maxpool2d forward";
    PoolDims d = {};
    MPX_TRY(maxpool_check(op, a, x, "y", y, &d));
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid((size_t)mpx_tensor_numel(y), &grid));
    maxpool_fwd<<<grid, kLaunchThreads>>>(d, x->data, x->dtype, y->data, y->dtype);
    CUOP_LAUNCHED(op, "maxpool", x);
    return MPX_OK;
}

extern "C" mpx_status mpx_maxpool2d_backward_cuda(const mpx_pool2d_attr *a, const mpx_tensor *dy,
                                                  const mpx_tensor *x, const mpx_tensor *y,
                                                  mpx_tensor *dx) {
    static const char *op = "maxpool2d backward";
    PoolDims d = {};
    MPX_TRY(maxpool_check(op, a, x, "y", y, &d));
    MPX_TRY(cuop_expect_float(op, "dy", dy, 4));
    MPX_TRY(cuop_expect_same_shape(op, "y", y, "dy", dy));
    MPX_TRY(cuop_expect_float(op, "dx", dx, 4));
    MPX_TRY(cuop_expect_same_shape(op, "x", x, "dx", dx));
    if (d.h * d.w > INT32_MAX)
        return mpx_fail(MPX_ERR_UNSUPPORTED, "%s: x has %lldx%lld positions per image, more than "
                        "the argmax index holds", op, (long long)d.h, (long long)d.w);
    const size_t ny = (size_t)mpx_tensor_numel(y), nx = (size_t)mpx_tensor_numel(x);
    const bool narrow = (nx > ny ? nx : ny) < (size_t)INT32_MAX; /* every index fits 32 bits */
    void *arg = nullptr;
    MPX_TRY(cuop_scratch(ny * sizeof(int32_t), &arg));
    unsigned grid_y = 1, grid_x = 1;
    mpx_status st = mpx_cuda_grid(ny, &grid_y);
    if (st == MPX_OK) st = mpx_cuda_grid(nx, &grid_x);
    if (st == MPX_OK) {
        if (narrow)
            maxpool_argmax<int32_t><<<grid_y, kLaunchThreads>>>(d, x->data, x->dtype, y->data,
                                                                y->dtype, (int32_t *)arg);
        else
            maxpool_argmax<int64_t><<<grid_y, kLaunchThreads>>>(d, x->data, x->dtype, y->data,
                                                                y->dtype, (int32_t *)arg);
        cudaError_t err = cudaGetLastError();
        MaxBwdArgs args;
        args.d = d;
        args.dy = dy->data, args.dydt = dy->dtype;
        args.arg = (const int32_t *)arg;
        args.dx = dx->data, args.dxdt = dx->dtype;
        if (err == cudaSuccess) {
            if (narrow) maxpool_bwd<int32_t><<<grid_x, kLaunchThreads>>>(args);
            else maxpool_bwd<int64_t><<<grid_x, kLaunchThreads>>>(args);
            err = cudaGetLastError();
        }
        if (err != cudaSuccess) st = cuop_launch_fail(op, "maxpool", x, err);
    }
    mpx_status freed = mpx_cuda_scratch_free(arg);
    return st != MPX_OK ? st : freed;
}

extern "C" mpx_status mpx_avgpool_global_forward_cuda(const mpx_tensor *x, mpx_tensor *y) {
    static const char *op = "avgpool_global forward";
    MPX_TRY(cuop_expect_float(op, "x", x, 4));
    MPX_TRY(cuop_expect_float(op, "y", y, 2));
    MPX_TRY(cuop_expect_dim(op, "y", y, 0, x->shape[0], "N of x"));
    MPX_TRY(cuop_expect_dim(op, "y", y, 1, x->shape[3], "C of x"));
    const int64_t n = x->shape[0], hw = x->shape[1] * x->shape[2], c = x->shape[3];
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid((size_t)(n * c), &grid));
    avgpool_fwd<<<grid, kLaunchThreads>>>(x->data, x->dtype, n, hw, c, y->data, y->dtype);
    CUOP_LAUNCHED(op, "avgpool", x);
    return MPX_OK;
}

extern "C" mpx_status mpx_avgpool_global_backward_cuda(const mpx_tensor *dy, mpx_tensor *dx) {
    static const char *op = "avgpool_global backward";
    MPX_TRY(cuop_expect_float(op, "dx", dx, 4));
    MPX_TRY(cuop_expect_float(op, "dy", dy, 2));
    MPX_TRY(cuop_expect_dim(op, "dy", dy, 0, dx->shape[0], "N of dx"));
    MPX_TRY(cuop_expect_dim(op, "dy", dy, 1, dx->shape[3], "C of dx"));
    const int64_t hw = dx->shape[1] * dx->shape[2], c = dx->shape[3];
    const size_t total = (size_t)mpx_tensor_numel(dx);
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(total, &grid));
    avgpool_bwd<<<grid, kLaunchThreads>>>(dy->data, dy->dtype, hw, c, (float)hw, dx->data,
                                          dx->dtype, total);
    CUOP_LAUNCHED(op, "avgpool", dx);
    return MPX_OK;
}
