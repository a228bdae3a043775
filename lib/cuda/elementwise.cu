/* elementwise.cu — the element-wise numerics of the CUDA backend: decoding storage formats to
 * FP32, acc += scale x (branch merges), and the unscale-and-accumulate of weight gradients.
 *
 * Same bits as the CPU backend: decoding goes through the integer rules of fp_bits.h (so NaN
 * payloads, FP16/FP8 subnormals and E4M3's single NaN decode as on the CPU); products and sums
 * are separate IEEE operations (__fmul_rn, __fadd_rn), because the CPU library is compiled
 * without FMA contraction and nvcc would otherwise fuse them; operand NaNs are kept as the CPU
 * keeps them (launch.cuh). Grid-stride loops: the result of every element is independent of
 * the launch, and the only reduction (the non-finite count) is an integer sum.
 *
 * unscale_accumulate adds its count into a counter in device memory (the graph's step status),
 * so it never waits: the host reads one total per step, with the loss.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "lib/cuda/check.cuh"
#include "lib/cuda/launch.cuh"
#include "lib/numerics/fp_bits.h"
#include "mpx/cuda.h"

namespace {

/* Element i of an array stored as F, as stored (FP32 bits or the code), and such bits decoded
 * exactly. */
template <int F> __device__ uint32_t load_raw(const void *p, size_t i) {
    if constexpr (F == MPX_F32)
        return __float_as_uint(((const float *)p)[i]);
    else if constexpr (F == MPX_F16 || F == MPX_BF16)
        return ((const uint16_t *)p)[i];
    else
        return ((const uint8_t *)p)[i];
}
template <int F> __device__ float decoded(uint32_t r) {
    if constexpr (F == MPX_F32)
        return __uint_as_float(r);
    else if constexpr (F == MPX_F16)
        return cuop_f16_decode((uint16_t)r);
    else if constexpr (F == MPX_BF16)
        return cuop_bf16_decode((uint16_t)r);
    else if constexpr (F == MPX_F8_E4M3)
        return mpx_fp_decode(MPX_FP_E4M3, r);
    else
        return mpx_fp_decode(MPX_FP_E5M2, r);
}
template <int F> __device__ float load_decoded(const void *p, size_t i) {
    return decoded<F>(load_raw<F>(p, i));
}

/* mpx_round_to: x through format F under RNE (F32 returns x). */
template <int F> __device__ float round_to(float x) {
    if constexpr (F == MPX_F32)
        return x;
    else if constexpr (F == MPX_F16)
        return mpx_fp_decode(MPX_FP_F16, mpx_fp_encode(MPX_FP_F16, x, 0, 0u, 0));
    else if constexpr (F == MPX_BF16)
        return mpx_fp_decode(MPX_FP_BF16, mpx_fp_encode(MPX_FP_BF16, x, 0, 0u, 0));
    else if constexpr (F == MPX_F8_E4M3)
        return mpx_fp_decode(MPX_FP_E4M3, mpx_fp_encode(MPX_FP_E4M3, x, 0, 0u, 0));
    else
        return mpx_fp_decode(MPX_FP_E5M2, mpx_fp_encode(MPX_FP_E5M2, x, 0, 0u, 0));
}

template <int F> __global__ void decode_kernel(const void *src, float *dst, size_t n) {
    cuop_each(
        n, [&](size_t i) { return load_raw<F>(src, i); },
        [&](size_t i, uint32_t r) { dst[i] = decoded<F>(r); });
}

struct AccX {
    float acc, x;
};

__global__ void accumulate_kernel(float *acc, const float *x, size_t n, float scale) {
    cuop_each(
        n, [&](size_t i) { return AccX{acc[i], x[i]}; },
        [&](size_t i, AccX v) { acc[i] = mpx_add_nan(v.acc, mpx_mul_nan(scale, v.x)); });
}

/* backend_cpu.c's unscale_accumulate: v = decode(g) * inv, optionally rounded back to the
 * storage format, counted when not finite, added to acc. The count: a 32-bit register per
 * thread (the grid keeps a thread under 2^32 elements), a warp sum, one 64-bit shared atomic per
 * warp and one global atomic per block; integer sums, so the count is exact in any order. */
template <int F>
__global__ void unscale_kernel(const void *g, size_t n, float inv, int round, float *acc,
                               unsigned long long *nonfinite) {
    __shared__ unsigned long long s_bad;
    if (threadIdx.x == 0) s_bad = 0;
    __syncthreads();
    unsigned bad = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = mpx_mul_nan(load_decoded<F>(g, i), inv);
        if (round) v = round_to<F>(v);
        bad += !isfinite(v);
        acc[i] = mpx_add_nan(acc[i], v);
    }
    bad = __reduce_add_sync(0xffffffffu, bad);
    if ((threadIdx.x & 31) == 0 && bad) atomicAdd(&s_bad, (unsigned long long)bad);
    __syncthreads();
    if (threadIdx.x == 0 && s_bad) atomicAdd(nonfinite, s_bad);
}

template <int F>
void launch_unscale(unsigned grid, const void *g, size_t n, float inv, int round, float *acc,
                    unsigned long long *nonfinite) {
    unscale_kernel<F><<<grid, kLaunchThreads>>>(g, n, inv, round, acc, nonfinite);
}

bool is_float_format(mpx_dtype t) {
    return t == MPX_F32 || t == MPX_F16 || t == MPX_BF16 || t == MPX_F8_E4M3 ||
           t == MPX_F8_E5M2 || t == MPX_TF32;
}

} // namespace

extern "C" mpx_status mpx_decode_cuda(mpx_dtype src_dtype, const void *src, float *dst,
                                      size_t n) {
    if (!is_float_format(src_dtype))
        return mpx_fail(MPX_ERR_UNSUPPORTED, "mpx_decode_cuda: %s is not a floating dtype",
                        mpx_dtype_name(src_dtype));
    if (n == 0) return MPX_OK;
    if (src_dtype == MPX_F32 || src_dtype == MPX_TF32) { /* TF32 values are FP32 values */
        if (src != (const void *)dst)
            MPX_CUDA_TRY(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice));
        return MPX_OK;
    }
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    switch (src_dtype) {
    case MPX_F16: decode_kernel<MPX_F16><<<grid, kLaunchThreads>>>(src, dst, n); break;
    case MPX_BF16: decode_kernel<MPX_BF16><<<grid, kLaunchThreads>>>(src, dst, n); break;
    case MPX_F8_E4M3: decode_kernel<MPX_F8_E4M3><<<grid, kLaunchThreads>>>(src, dst, n); break;
    default: decode_kernel<MPX_F8_E5M2><<<grid, kLaunchThreads>>>(src, dst, n); break;
    }
    MPX_CUDA_TRY(cudaGetLastError());
    return MPX_OK;
}

extern "C" mpx_status mpx_accumulate_cuda(float *acc, const float *x, size_t n, float scale) {
    if (n == 0) return MPX_OK;
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    accumulate_kernel<<<grid, kLaunchThreads>>>(acc, x, n, scale);
    MPX_CUDA_TRY(cudaGetLastError());
    return MPX_OK;
}

extern "C" mpx_status mpx_unscale_accumulate_cuda(mpx_dtype g_dtype, const void *g, size_t n,
                                                  double inv_scale, int round_to_storage,
                                                  float *acc, uint64_t *nonfinite) {
    if (!is_float_format(g_dtype))
        return mpx_fail(MPX_ERR_UNSUPPORTED,
                        "mpx_unscale_accumulate_cuda: %s is not a floating dtype",
                        mpx_dtype_name(g_dtype));
    if (n == 0) return MPX_OK;
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    static_assert(sizeof(uint64_t) == sizeof(unsigned long long), "the counter's atomics");
    unsigned long long *d_bad = (unsigned long long *)nonfinite;
    const float inv = (float)inv_scale;
    const int round = round_to_storage != 0;
    switch (g_dtype) {
    case MPX_F32: launch_unscale<MPX_F32>(grid, g, n, inv, round, acc, d_bad); break;
    case MPX_F16: launch_unscale<MPX_F16>(grid, g, n, inv, round, acc, d_bad); break;
    case MPX_BF16: launch_unscale<MPX_BF16>(grid, g, n, inv, round, acc, d_bad); break;
    case MPX_F8_E4M3: launch_unscale<MPX_F8_E4M3>(grid, g, n, inv, round, acc, d_bad); break;
    default: launch_unscale<MPX_F8_E5M2>(grid, g, n, inv, round, acc, d_bad); break;
    }
    MPX_CUDA_TRY(cudaGetLastError());
    return MPX_OK;
}
