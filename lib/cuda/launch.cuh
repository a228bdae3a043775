/* launch.cuh — what the numerics and optimizer kernels of lib/cuda share (private to lib/cuda):
 * grid sizes for grid-stride loops, stream-ordered scratch memory for reductions, and the
 * NaN rule that keeps an operand's NaN (payload included) where the CPU keeps it.
 *
 * Everything runs on the legacy default stream, like mpx_cast_cuda.
 */
#ifndef MPX_CUDA_LAUNCH_CUH
#define MPX_CUDA_LAUNCH_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/cuda/check.cuh"
#include "lib/numerics/fp_bits.h"

constexpr int kLaunchThreads = 256;

/* Blocks for a grid-stride loop over n >= 1 elements: enough to fill the device (8 per SM),
 * fewer when n is small, and never so few that one block sees 2^30 elements (kernels keep
 * 32-bit per-block counters). The results of every kernel here are independent of the grid. */
static inline mpx_status mpx_cuda_grid(size_t n, unsigned *grid) {
    int dev = 0, sms = 0;
    MPX_CUDA_TRY(cudaGetDevice(&dev));
    MPX_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    size_t want = (n + kLaunchThreads - 1) / kLaunchThreads, cap = (size_t)sms * 8;
    size_t g = want < cap ? want : cap, min_g = (n >> 30) + 1;
    *grid = (unsigned)(g < min_g ? min_g : g);
    return MPX_OK;
}

/* Release scratch from mpx_cuda_scratch (stream-ordered: after the work queued before it). */
static inline mpx_status mpx_cuda_scratch_free(void *p) {
    if (!p) return MPX_OK;
    cudaError_t err = cudaFreeAsync(p, 0);
    if (err == cudaErrorNotSupported) {
        cudaGetLastError();
        MPX_CUDA_TRY(cudaFree(p));
    } else {
        MPX_CUDA_TRY(err);
    }
    return MPX_OK;
}

/* Device scratch for one call, zeroed: stream-ordered (no synchronisation, pooled by the
 * driver) where the device supports memory pools, plain cudaMalloc otherwise. */
static inline mpx_status mpx_cuda_scratch(size_t bytes, void **p) {
    *p = nullptr;
    cudaError_t err = cudaMallocAsync(p, bytes, 0);
    if (err == cudaErrorNotSupported) {
        cudaGetLastError();
        MPX_CUDA_TRY(cudaMalloc(p, bytes));
    } else {
        MPX_CUDA_TRY(err);
    }
    err = cudaMemsetAsync(*p, 0, bytes, 0);
    if (err != cudaSuccess) {
        mpx_cuda_scratch_free(*p);
        *p = nullptr;
        MPX_CUDA_TRY(err);
    }
    return MPX_OK;
}

/* The channel c of a grid-stride loop's element i (i mod channels, for the per-channel vectors
 * of a [..., C] tensor), carried along with i: one division per thread rather than a 64-bit
 * remainder per element, which costs more instructions than the element's own arithmetic
 * in a memory-bound pass over 16-bit data.
 *   for (size_t i = first; i < n; i += stride, ch.next()) { ... ch.c ... } */
struct ChannelCursor {
    size_t c, step, channels;
    __device__ ChannelCursor(size_t first, size_t stride, size_t n_channels)
        : c(n_channels ? first % n_channels : 0), step(n_channels ? stride % n_channels : 0),
          channels(n_channels) {} /* 0 channels: an empty loop, no division by 0 */
    __device__ void next() {
        c += step;
        if (c >= channels) c -= channels;
    }
};

/* Grid-stride loop over [0, n) that keeps kIlp elements' loads in flight per thread: an
 * element-wise pass over 16-bit data is bound by the latency of its loads, not by bandwidth,
 * when each thread waits for one element at a time (a store may alias a later load, so the
 * compiler cannot hoist the next loads above it). ld(i) loads element i's operands as stored
 * (raw bits: cuop_raw; decoding them there would make the next load wait for this one, the
 * GPU issuing in order), st(i, v) decodes, computes and stores. The thread's elements are
 * i, i + stride, ..., visited in that order as in a plain loop, each computed the same way:
 * the results do not change, only how many loads wait at once. */
constexpr int kIlp = 4;

template <class Ld, class St>
__device__ __forceinline__ void cuop_each(size_t n, Ld ld, St st) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (kIlp - 1) * stride < n; i += kIlp * stride) {
        decltype(ld(i)) v[kIlp];
#pragma unroll
        for (int u = 0; u < kIlp; u++) v[u] = ld(i + u * stride);
#pragma unroll
        for (int u = 0; u < kIlp; u++) st(i + u * stride, v[u]);
    }
    for (; i < n; i += stride) st(i, ld(i));
}

/* The same over a [..., C] tensor, with element i's channel j: ld(i, j), st(i, j, v). */
template <class Ld, class St>
__device__ __forceinline__ void cuop_each_channel(size_t n, size_t channels, Ld ld, St st) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    ChannelCursor ch(i, stride, channels);
    for (; i + (kIlp - 1) * stride < n; i += kIlp * stride) {
        size_t j[kIlp];
        decltype(ld(i, j[0])) v[kIlp];
#pragma unroll
        for (int u = 0; u < kIlp; u++) {
            j[u] = ch.c;
            ch.next();
            v[u] = ld(i + u * stride, j[u]);
        }
#pragma unroll
        for (int u = 0; u < kIlp; u++) st(i + u * stride, j[u], v[u]);
    }
    for (; i < n; i += stride, ch.next()) st(i, ch.c, ld(i, ch.c));
}

/* F16 and BF16 conversions at the conversion unit's speed with fp_bits.h's bits. Decoding is
 * exact for every code; rounding is IEEE round-to-nearest-even (subnormals, overflow to Inf).
 * NaN takes fp_bits.h's rule (quieted, sign and top payload bits kept), where the hardware
 * would give its canonical NaN. */
__device__ __forceinline__ float cuop_f16_decode(uint16_t c) {
    const bool nan = (c & 0x7c00u) == 0x7c00u && (c & 0x03ffu);
    const uint32_t nan_bits = ((uint32_t)(c & 0x8000u) << 16) | 0x7fc00000u |
                              ((uint32_t)(c & 0x03ffu) << 13); /* mpx_fp_decode's NaN */
    const float h = __half2float(__ushort_as_half(c));
    return nan ? __uint_as_float(nan_bits) : h;
}
__device__ __forceinline__ float cuop_bf16_decode(uint16_t c) {
    const uint32_t u = (uint32_t)c << 16; /* BF16 is FP32's top half */
    return __uint_as_float((u & 0x7fffffffu) > 0x7f800000u ? u | 0x00400000u : u);
}
__device__ __forceinline__ uint16_t cuop_f16_rne(float x) {
    if (isnan(x)) return (uint16_t)mpx_fp_encode(MPX_FP_F16, x, 0, 0u, nullptr);
    return __half_as_ushort(__float2half_rn(x));
}
__device__ __forceinline__ uint16_t cuop_bf16_rne(float x) {
    if (isnan(x)) return (uint16_t)mpx_fp_encode(MPX_FP_BF16, x, 0, 0u, nullptr);
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

/* x86 and ARM pass a NaN operand through quieted, payload kept; the GPU returns its canonical
 * NaN instead. These keep the operand's NaN (the first operand's when both are NaN) so that
 * NaN gradients carry the CPU's bits. A NaN made from non-NaN operands (Inf - Inf, 0 * Inf) is
 * the GPU's canonical NaN, where the CPU gives its ISA's default NaN. */
__device__ __forceinline__ float mpx_quiet(float a) {
    return __uint_as_float(__float_as_uint(a) | 0x00400000u);
}
__device__ __forceinline__ float mpx_mul_nan(float a, float b) {
    return isnan(a) ? mpx_quiet(a) : isnan(b) ? mpx_quiet(b) : __fmul_rn(a, b);
}
__device__ __forceinline__ float mpx_add_nan(float a, float b) {
    return isnan(a) ? mpx_quiet(a) : isnan(b) ? mpx_quiet(b) : __fadd_rn(a, b);
}

#endif
