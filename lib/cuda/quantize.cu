/* quantize.cu — the quantizing modes' operand casts on the GPU (precision.mode = fp8, fixed16):
 * FP8 under a per-tensor scale, MX blocks, Q(16, f) fixed point, each read back in FP32.
 *
 * Same values and counts as lib/numerics/fp8.c and fixed.c: the element casts use fp_bits.h's
 * encode, decode, MX exponent and Q(16, f) rules, which the CPU uses too; products and
 * quotients are single FP32 roundings (__fmul_rn, __fdiv_rn), as the CPU's; stochastic rounding
 * takes element i's word from Philox at offset + i. Counting: cast_count.cuh. An MX block along
 * a row is one warp (32 lanes, one element each): its amax is a warp reduction of the magnitudes'
 * bits, which order as the values do, a NaN above Inf; a block down a column is one thread, whose
 * warp reads 32 neighbouring columns at once.
 */
#include "lib/cuda/cast_count.cuh"
#include "lib/cuda/check.cuh"
#include "lib/cuda/launch.cuh"
#include "lib/cuda/philox.cuh"
#include "lib/numerics/fp_bits.h"
#include "mpx/cuda.h"
#include "mpx/rng.h"

namespace {

static_assert(MPX_MX_BLOCK == 32, "an MX block is one warp");

/* FP8 format constants (fp8.h, numerics.h). */
template <bool E5> struct F8 {
    static __device__ mpx_fp_fmt fmt() { return E5 ? MPX_FP_E5M2 : MPX_FP_E4M3; }
    static constexpr uint32_t min_sub = E5 ? 0x37800000u : 0x3b000000u; /* 2^-16, 2^-9 */
    static constexpr float max = E5 ? 57344.0f : 448.0f;
    static constexpr double max_d = E5 ? 57344.0 : 448.0;
};

/* x cast into the FP8 format (RNE) and decoded: mpx_fp8_saturate's clamp of E5M2 first (from
 * 61440 on RNE would reach Inf; E4M3's cast saturates by itself), counted into c when asked. */
template <bool E5, bool STATS>
__device__ float fp8_value(float x, uint32_t c[kCnt], CastCountShared *shared) {
    int clamped = 0;
    if (E5) {
        const float a = fabsf(x);
        if (a >= 61440.0f && a < INFINITY) {
            x = copysignf(F8<E5>::max, x);
            clamped = 1;
        }
    }
    const mpx_fp_fmt f = F8<E5>::fmt();
    int ovf = 0;
    const uint32_t code = mpx_fp_encode(f, x, 0, 0u, &ovf);
    if (STATS) {
        const uint32_t u = mpx_fp_bits(x), a = u & 0x7fffffffu, mag = code & (f.sign_bit - 1u);
        const bool nz = a != 0, fin = a < 0x7f800000u;
        c[kCntNonzero] += nz;
        c[kCntNonfinite] += !fin;
        c[kCntBelowMin] += nz && a < F8<E5>::min_sub;
        c[kCntFlushed] += nz && fin && mag == 0;
        c[kCntSubnormal] += mag != 0 && mag < (1u << f.man_bits);
        c[kCntOverflow] += ovf + clamped;
        cast_count_hist(shared, u);
    }
    return mpx_fp_decode(f, code);
}

/* A CPU multiply passes a NaN operand through, quieted; keep it so (the GPU's would be
 * canonical). */
__device__ __forceinline__ float mul_cpu(float s, float k) {
    return isnan(s) ? __uint_as_float(__float_as_uint(s) | 0x00400000u) : __fmul_rn(s, k);
}

/* dst[i] = fp8(src[i] * scale) / scale (fp8.h: mpx_fp8_quantize). */
template <bool E5, bool STATS>
__global__ void fp8_kernel(const float *src, float *dst, size_t n, float scale,
                           mpx_cast_stats *stats) {
    __shared__ CastCountShared shared;
    if (STATS) cast_count_begin(&shared);
    uint32_t c[kCnt] = {0, 0, 0, 0, 0, 0};
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = __fdiv_rn(fp8_value<E5, STATS>(mul_cpu(src[i], scale), c, &shared), scale);
    if (STATS) cast_count_end(&shared, c, stats, n);
}

/* The block scales' summary in device memory (mpx_mx_scales, built from it on the host). */
struct MxScalesDev {
    unsigned long long blocks, zero_blocks, nan_blocks;
    int min_exp, max_exp;
};

/* One thread's (or warp's) share of the block scales' summary, added to *sc once. */
struct MxScalesLocal {
    unsigned blocks = 0, zero_blocks = 0, nan_blocks = 0;
    int min_exp = 127, max_exp = -127;

    __device__ void note(int e, float amax) {
        blocks++;
        if (e == MPX_MX_NAN_EXP) {
            nan_blocks++;
        } else if (amax == 0.0f) {
            zero_blocks++;
        } else {
            min_exp = e < min_exp ? e : min_exp;
            max_exp = e > max_exp ? e : max_exp;
        }
    }
    __device__ void add_to(MxScalesDev *sc) const {
        if (!sc || !blocks) return;
        atomicAdd(&sc->blocks, (unsigned long long)blocks);
        atomicAdd(&sc->zero_blocks, (unsigned long long)zero_blocks);
        atomicAdd(&sc->nan_blocks, (unsigned long long)nan_blocks);
        atomicMin(&sc->min_exp, min_exp);
        atomicMax(&sc->max_exp, max_exp);
    }
};

/* Element v of a block with shared exponent e, cast and read back (a NaN block is all NaN). */
template <bool E5, bool STATS>
__device__ float mx_value(float v, int e, uint32_t c[kCnt], CastCountShared *shared) {
    const bool nan_block = e == MPX_MX_NAN_EXP;
    const float down = nan_block ? 1.0f : ldexpf(1.0f, -e); /* exact products */
    const float q = fp8_value<E5, STATS>(__fmul_rn(v, down), c, shared);
    return nan_block ? __int_as_float(0x7fc00000) : __fmul_rn(q, ldexpf(1.0f, e));
}

/* MX blocks along rows of `row` elements (fp8.h: mpx_mx_quantize), one warp per block. */
template <bool E5, bool STATS>
__global__ void mx_kernel(const float *src, float *dst, size_t n, size_t row, int round_up,
                          mpx_cast_stats *stats, MxScalesDev *sc) {
    __shared__ CastCountShared shared;
    if (STATS) cast_count_begin(&shared);
    uint32_t c[kCnt] = {0, 0, 0, 0, 0, 0};
    MxScalesLocal scales;
    const int lane = threadIdx.x & 31;
    const size_t per_row = (row + MPX_MX_BLOCK - 1) / MPX_MX_BLOCK;
    const size_t total = (n + row - 1) / row * per_row;
    const size_t warps = (size_t)gridDim.x * (blockDim.x / 32);
    for (size_t b = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; b < total; b += warps) {
        const size_t r0 = b / per_row * row, r1 = r0 + row < n ? r0 + row : n;
        const size_t i0 = r0 + b % per_row * MPX_MX_BLOCK; /* warp-uniform */
        if (i0 >= r1) continue;                            /* past a short last row */
        const size_t i = i0 + (size_t)lane;
        const bool mine = i < r1;
        const float v = mine ? src[i] : 0.0f;
        const float amax =
            __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(v) & 0x7fffffffu));
        const int e = mpx_fp_mx_exponent(F8<E5>::max_d, round_up, amax, MPX_MX_NAN_EXP);
        scales.note(e, amax);
        if (mine) dst[i] = mx_value<E5, STATS>(v, e, c, &shared);
    }
    if (STATS) cast_count_end(&shared, c, stats, n);
    if (lane == 0) scales.add_to(sc);
}

/* MX blocks down the columns of `batches` [rows, cols] matrices (fp8.h:
 * mpx_mx_quantize_cols), one thread per block: neighbouring threads hold neighbouring columns,
 * so each of a block's 32 rows is one coalesced read across the warp. */
template <bool E5, bool STATS>
__global__ void mx_cols_kernel(const float *src, float *dst, size_t batches, size_t rows,
                               size_t cols, int round_up, mpx_cast_stats *stats,
                               MxScalesDev *sc) {
    __shared__ CastCountShared shared;
    if (STATS) cast_count_begin(&shared);
    uint32_t c[kCnt] = {0, 0, 0, 0, 0, 0};
    MxScalesLocal scales;
    const size_t rb = (rows + MPX_MX_BLOCK - 1) / MPX_MX_BLOCK, total = batches * rb * cols;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        const size_t col = t % cols, r0 = t / cols % rb * MPX_MX_BLOCK, batch = t / (cols * rb);
        const size_t h = rows - r0 < MPX_MX_BLOCK ? rows - r0 : MPX_MX_BLOCK;
        const size_t base = (batch * rows + r0) * cols + col;
        uint32_t abits = 0;
        for (size_t r = 0; r < h; r++) {
            const uint32_t a = __float_as_uint(src[base + r * cols]) & 0x7fffffffu;
            abits = a > abits ? a : abits;
        }
        const float amax = __uint_as_float(abits);
        const int e = mpx_fp_mx_exponent(F8<E5>::max_d, round_up, amax, MPX_MX_NAN_EXP);
        scales.note(e, amax);
        for (size_t r = 0; r < h; r++)
            dst[base + r * cols] = mx_value<E5, STATS>(src[base + r * cols], e, c, &shared);
    }
    if (STATS) cast_count_end(&shared, c, stats, batches * rows * cols);
    scales.add_to(sc);
}

/* dst[i] = the Q(16, frac) value of src[i], non-finite values kept (fixed.h). */
template <bool SR, bool STATS>
__global__ void fixed_kernel(const float *src, float *dst, size_t n, int frac, uint64_t seed,
                             uint64_t stream, uint64_t offset, mpx_cast_stats *stats) {
    __shared__ CastCountShared shared;
    if (STATS) cast_count_begin(&shared);
    uint32_t c[kCnt] = {0, 0, 0, 0, 0, 0};
    const float min = ldexpf(1.0f, -frac);
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float x = src[i];
        const uint32_t r = SR ? mpx_philox_u32_dev(seed, stream, offset + i) : 0u;
        int sat = 0;
        const int32_t q = mpx_fp_q16(x, frac, SR, r, &sat);
        const uint32_t u = mpx_fp_bits(x), a = u & 0x7fffffffu;
        const bool fin = a < 0x7f800000u;
        dst[i] = fin ? ldexpf((float)q, -frac) : x;
        if (STATS) {
            const bool nz = a != 0;
            c[kCntNonzero] += nz;
            c[kCntNonfinite] += !fin;
            c[kCntBelowMin] += nz && fin && fabsf(x) < min;
            c[kCntFlushed] += nz && fin && q == 0;
            c[kCntOverflow] += fin && sat;
            cast_count_hist(&shared, u);
        }
    }
    if (STATS) cast_count_end(&shared, c, stats, n);
}

mpx_status check_fp8(const char *fn, mpx_dtype fmt) {
    if (fmt == MPX_F8_E4M3 || fmt == MPX_F8_E5M2) return MPX_OK;
    return mpx_fail(MPX_ERR_UNSUPPORTED, "%s: format %s is not FP8 (f8_e4m3, f8_e5m2)", fn,
                    mpx_dtype_name(fmt));
}

} // namespace

extern "C" mpx_status mpx_fp8_quantize_cuda(mpx_dtype fmt, float scale, const float *src,
                                            float *dst, size_t n, mpx_cast_stats *stats) {
    MPX_TRY(check_fp8("mpx_fp8_quantize_cuda", fmt));
    if (n == 0) return MPX_OK;
    unsigned g = 1;
    MPX_TRY(mpx_cuda_grid(n, &g));
    const bool e5 = fmt == MPX_F8_E5M2;
    if (e5 && stats)
        fp8_kernel<true, true><<<g, kLaunchThreads>>>(src, dst, n, scale, stats);
    else if (e5)
        fp8_kernel<true, false><<<g, kLaunchThreads>>>(src, dst, n, scale, stats);
    else if (stats)
        fp8_kernel<false, true><<<g, kLaunchThreads>>>(src, dst, n, scale, stats);
    else
        fp8_kernel<false, false><<<g, kLaunchThreads>>>(src, dst, n, scale, stats);
    MPX_CUDA_TRY(cudaGetLastError());
    return MPX_OK;
}

namespace {

/* Launch an MX kernel over n elements (launch(grid, scales_dev)) and, when sc is not NULL,
 * read its block scales' summary back into *sc. */
template <class Launch>
mpx_status mx_run(size_t n, mpx_mx_scales *sc, Launch launch) {
    mpx_mx_scales out = {0, 0, 0, 0, 0};
    if (n > 0) {
        unsigned g = 1;
        MPX_TRY(mpx_cuda_grid(n, &g));
        MxScalesDev *d = nullptr;
        if (sc) {
            MPX_TRY(mpx_cuda_scratch(sizeof *d, (void **)&d));
            const MxScalesDev init = {0, 0, 0, 127, -127};
            MPX_CUDA_TRY(cudaMemcpyAsync(d, &init, sizeof init, cudaMemcpyHostToDevice));
        }
        launch(g, d);
        MPX_CUDA_TRY(cudaGetLastError());
        if (sc) {
            MxScalesDev h;
            MPX_CUDA_TRY(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
            MPX_TRY(mpx_cuda_scratch_free(d));
            out.blocks = h.blocks;
            out.zero_blocks = h.zero_blocks;
            out.nan_blocks = h.nan_blocks;
            out.min_exp = h.min_exp;
            out.max_exp = h.max_exp;
            if (out.min_exp > out.max_exp) out.min_exp = out.max_exp = 0;
        }
    }
    if (sc) *sc = out;
    return MPX_OK;
}

} // namespace

extern "C" mpx_status mpx_mx_quantize_cuda(mpx_dtype fmt, mpx_mx_rule rule, const float *src,
                                           float *dst, size_t n, size_t row, mpx_cast_stats *stats,
                                           mpx_mx_scales *sc) {
    MPX_TRY(check_fp8("mpx_mx_quantize_cuda", fmt));
    if (row == 0 || row > n) row = n;
    const int up = rule == MPX_MX_CEIL;
    const bool e5 = fmt == MPX_F8_E5M2;
    /* one warp per block: as many threads as blocks times 32 */
    const size_t per_row = (row + MPX_MX_BLOCK - 1) / MPX_MX_BLOCK;
    const size_t threads = n ? (n + row - 1) / row * per_row * 32 : 0;
    return mx_run(threads, sc, [&](unsigned g, MxScalesDev *d) {
        if (e5 && stats)
            mx_kernel<true, true><<<g, kLaunchThreads>>>(src, dst, n, row, up, stats, d);
        else if (e5)
            mx_kernel<true, false><<<g, kLaunchThreads>>>(src, dst, n, row, up, stats, d);
        else if (stats)
            mx_kernel<false, true><<<g, kLaunchThreads>>>(src, dst, n, row, up, stats, d);
        else
            mx_kernel<false, false><<<g, kLaunchThreads>>>(src, dst, n, row, up, stats, d);
    });
}

extern "C" mpx_status mpx_mx_quantize_cols_cuda(mpx_dtype fmt, mpx_mx_rule rule, const float *src,
                                                float *dst, size_t batches, size_t rows,
                                                size_t cols, mpx_cast_stats *stats,
                                                mpx_mx_scales *sc) {
    MPX_TRY(check_fp8("mpx_mx_quantize_cols_cuda", fmt));
    const int up = rule == MPX_MX_CEIL;
    const bool e5 = fmt == MPX_F8_E5M2;
    const size_t b = batches, r = rows, c = cols;
    /* sized by elements: a block's thread handles up to 32 of them */
    return mx_run(b * r * c, sc, [&](unsigned g, MxScalesDev *d) {
        if (e5 && stats)
            mx_cols_kernel<true, true><<<g, kLaunchThreads>>>(src, dst, b, r, c, up, stats, d);
        else if (e5)
            mx_cols_kernel<true, false><<<g, kLaunchThreads>>>(src, dst, b, r, c, up, stats, d);
        else if (stats)
            mx_cols_kernel<false, true><<<g, kLaunchThreads>>>(src, dst, b, r, c, up, stats, d);
        else
            mx_cols_kernel<false, false><<<g, kLaunchThreads>>>(src, dst, b, r, c, up, stats, d);
    });
}

extern "C" mpx_status mpx_fixed_quantize_cuda(const mpx_fixed_spec *s, const float *src, float *dst,
                                              size_t n, mpx_cast_stats *stats) {
    if (s->frac < 0 || s->frac > MPX_FIXED_FRAC_MAX)
        return mpx_fail(MPX_ERR_UNSUPPORTED, "mpx_fixed_quantize_cuda: %d fraction bits (0..%d)",
                        s->frac, MPX_FIXED_FRAC_MAX);
    if (n == 0) return MPX_OK;
    unsigned g = 1;
    MPX_TRY(mpx_cuda_grid(n, &g));
    const uint64_t stream = (uint64_t)MPX_RNG_ROUNDING ^ s->stream;
    const bool sr = s->rounding == MPX_ROUND_STOCHASTIC;
    if (sr && stats)
        fixed_kernel<true, true>
            <<<g, kLaunchThreads>>>(src, dst, n, s->frac, s->seed, stream, s->offset, stats);
    else if (sr)
        fixed_kernel<true, false>
            <<<g, kLaunchThreads>>>(src, dst, n, s->frac, s->seed, stream, s->offset, stats);
    else if (stats)
        fixed_kernel<false, true>
            <<<g, kLaunchThreads>>>(src, dst, n, s->frac, s->seed, stream, s->offset, stats);
    else
        fixed_kernel<false, false>
            <<<g, kLaunchThreads>>>(src, dst, n, s->frac, s->seed, stream, s->offset, stats);
    MPX_CUDA_TRY(cudaGetLastError());
    return MPX_OK;
}
