/* cast.cu — mpx_cast on the GPU: the FP32 -> F16 / BF16 (or scaled F32) cast with accounting,
 * and the uncounted rounding to TF32 (RNE) of tf32 mode's GEMM operands.
 *
 * Same semantics and bits as lib/numerics/cast.c: x = scale * src[i] in FP32 (a NaN src[i]
 * passes through quieted, as a CPU multiply does); RNE through
 * __float2half_rn / __float2bfloat16_rn (NaN handled by the shared rule of fp_bits.h, which keeps
 * the sign and payload where the hardware would return a canonical NaN); stochastic rounding by
 * the integer rule of fp_bits.h with element i's random word taken from Philox (a copy of
 * lib/core/rng.c) at counter offset + i. Counting: cast_count.cuh.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "lib/cuda/cast_count.cuh"
#include "lib/cuda/check.cuh"
#include "lib/cuda/launch.cuh"
#include "lib/cuda/philox.cuh"
#include "lib/numerics/fp_bits.h"
#include "mpx/cuda.h"
#include "mpx/rng.h"

namespace {

constexpr int kThreads = 256;

/* Format tags for the templates. */
enum Fmt { kF32 = MPX_F32, kF16 = MPX_F16, kBF16 = MPX_BF16 };

/* scale * s as the CPU computes it: a NaN operand passes through, quieted, where the GPU's
 * multiply would return its canonical NaN and lose the sign and payload bits. */
__device__ __forceinline__ float scaled_as_cpu(float scale, float s) {
    return isnan(s) ? __uint_as_float(__float_as_uint(s) | 0x00400000u) : __fmul_rn(scale, s);
}

template <int F> __device__ uint32_t rne(float x) {
    if constexpr (F == kF16)
        return cuop_f16_rne(x);
    else
        return cuop_bf16_rne(x);
}

template <int F> __device__ uint32_t stochastic(float x, uint32_t r) {
    return mpx_fp_encode(F == kF16 ? MPX_FP_F16 : MPX_FP_BF16, x, 1, r, 0);
}

struct Params {
    const float *src;
    void *dst;
    size_t n;
    float scale;
    uint64_t seed, stream, offset;
    mpx_cast_stats *stats;
};

template <int DST, int SF, bool SR, bool STATS> __global__ void cast_kernel(Params p) {
    __shared__ CastCountShared shared;
    if constexpr (STATS) cast_count_begin(&shared);
    uint32_t c[kCnt] = {0, 0, 0, 0, 0, 0};
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += stride) {
        const float s = p.src[i];
        const float x = scaled_as_cpu(p.scale, s);
        uint32_t code = 0;
        if constexpr (DST == kF32) {
            ((float *)p.dst)[i] = x;
        } else {
            code = SR ? stochastic<DST>(x, mpx_philox_u32_dev(p.seed, p.stream, p.offset + i)) : rne<DST>(x);
            ((uint16_t *)p.dst)[i] = (uint16_t)code;
        }
        if constexpr (STATS) {
            /* The code counted is the cast performed when dst is the stats format, else RNE. */
            uint32_t sc;
            if constexpr ((int)DST == SF)
                sc = code;
            else
                sc = rne<SF>(x);
            const uint32_t sub_end = SF == kF16 ? 0x0400u : 0x0080u;
            const uint32_t inf = SF == kF16 ? 0x7c00u : 0x7f80u;
            const uint32_t min_sub = SF == kF16 ? 0x33800000u : 0x00010000u; /* 2^-24, 2^-133 */
            const uint32_t u = mpx_fp_bits(x), a = u & 0x7fffffffu, mag = sc & 0x7fffu;
            const bool nz = a != 0, fin = a < 0x7f800000u;
            c[kCntNonzero] += nz;
            c[kCntNonfinite] += !fin;
            c[kCntBelowMin] += nz && a < min_sub;
            c[kCntFlushed] += nz && fin && mag == 0;
            c[kCntSubnormal] += mag != 0 && mag < sub_end;
            c[kCntOverflow] += fin && mag == inf;
            cast_count_hist(&shared, u);
        }
    }
    if constexpr (STATS) cast_count_end(&shared, c, p.stats, p.n);
}

template <int DST, int SF, bool SR, bool STATS> void launch(const Params &p, unsigned grid) {
    cast_kernel<DST, SF, SR, STATS><<<grid, kThreads>>>(p);
}

/* Pick the instantiation for (dst, stats format, rounding, counting). */
template <int DST, int SF> void launch_sf(const Params &p, unsigned grid, bool sr) {
    if (p.stats) {
        if (sr)
            launch<DST, SF, true, true>(p, grid);
        else
            launch<DST, SF, false, true>(p, grid);
    } else {
        if (sr)
            launch<DST, SF, true, false>(p, grid);
        else
            launch<DST, SF, false, false>(p, grid);
    }
}

/* dst[i] = scale * src[i] rounded to TF32 (RNE), as FP32 values: the rounding of GEMM operands
 * in tf32 mode (never counted). */
__global__ void tf32_kernel(const float *src, float *dst, size_t n, float scale) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = mpx_fp_float(mpx_fp_tf32_rne_bits(mpx_fp_bits(scaled_as_cpu(scale, src[i]))));
}

template <int DST> void launch_dst(const Params &p, unsigned grid, bool sr, int sf) {
    if (sf == kF16)
        launch_sf<DST, kF16>(p, grid, sr);
    else
        launch_sf<DST, kBF16>(p, grid, sr);
}

} // namespace

extern "C" mpx_status mpx_cast_cuda(const mpx_cast_spec *spec, const float *src, void *dst,
                                    size_t n) {
    const mpx_dtype d = spec->dst;
    if (d == MPX_TF32) {
        if (spec->stats || spec->rounding != MPX_ROUND_RNE)
            return mpx_fail(MPX_ERR_UNSUPPORTED,
                            "mpx_cast_cuda: tf32 is cast to nearest and not counted");
        if (n == 0) return MPX_OK;
        unsigned g = 1;
        MPX_TRY(mpx_cuda_grid(n, &g));
        tf32_kernel<<<g, kLaunchThreads>>>(src, (float *)dst, n, spec->scale);
        MPX_CUDA_TRY(cudaGetLastError());
        return MPX_OK;
    }
    if (d != MPX_F32 && d != MPX_F16 && d != MPX_BF16)
        return mpx_fail(MPX_ERR_UNSUPPORTED,
                        "mpx_cast_cuda: destination %s not supported (f32, f16, bf16, tf32)",
                        mpx_dtype_name(d));
    /* Without stats the stats format plays no part: any value is accepted. */
    const int sf = spec->stats ? (int)spec->stats_format : (int)MPX_F16;
    if (sf != MPX_F16 && sf != MPX_BF16)
        return mpx_fail(MPX_ERR_UNSUPPORTED,
                        "mpx_cast_cuda: stats format %s not supported (f16, bf16)",
                        mpx_dtype_name(spec->stats_format));
    if (n == 0) return MPX_OK;
    int dev = 0, sms = 0;
    MPX_CUDA_TRY(cudaGetDevice(&dev));
    MPX_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    /* Enough blocks to fill the device (8 per SM), fewer when n is small; more when a block would
     * otherwise see 2^30 elements or more (its 32-bit shared histogram must not wrap). */
    size_t want = (n + kThreads - 1) / kThreads, cap = (size_t)sms * 8;
    size_t grid = want < cap ? want : cap;
    size_t min_grid = (n >> 30) + 1;
    if (grid < min_grid) grid = min_grid;
    Params p = {src,          dst,        n,
                spec->scale,  spec->seed, (uint64_t)MPX_RNG_ROUNDING ^ spec->stream,
                spec->offset, spec->stats};
    const bool sr = spec->rounding == MPX_ROUND_STOCHASTIC && d != MPX_F32;
    switch (d) {
    case MPX_F16: launch_dst<kF16>(p, (unsigned)grid, sr, sf); break;
    case MPX_BF16: launch_dst<kBF16>(p, (unsigned)grid, sr, sf); break;
    default: launch_dst<kF32>(p, (unsigned)grid, false, sf); break;
    }
    MPX_CUDA_TRY(cudaGetLastError());
    return MPX_OK;
}
