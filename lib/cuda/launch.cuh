/* launch.cuh — what the numerics and optimizer kernels of lib/cuda share (private to lib/cuda):
 * grid sizes for grid-stride loops, stream-ordered scratch memory for reductions, and the
 * NaN rule that keeps an operand's NaN (payload included) where the CPU keeps it.
 *
 * Everything runs on the legacy default stream, like mpx_cast_cuda.
 */
#ifndef MPX_CUDA_LAUNCH_CUH
#define MPX_CUDA_LAUNCH_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#include "lib/cuda/check.cuh"

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
