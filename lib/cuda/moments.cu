/* moments.cu — the reductions of the CUDA backend: moments (mean, std, extremes), absmax, the
 * binade-counted abs quantile, and the sum of squares of the optimizer's gradient norm.
 *
 * Bits: each result equals the CPU's (lib/numerics/moments.c, backend_cpu.c's sumsq).
 *  - moments and sumsq are double sums whose rounding depends on the order of the additions.
 *    The GPU keeps the CPU's order: the array is cut into the CPU's blocks of MBLOCK elements,
 *    ONE thread reduces one block in the CPU's order (moments over kernels.h's MPX_K_LANES
 *    interleaved accumulators, added up in lane order; sumsq in index order; a warp stages 32
 *    blocks through shared memory so that the global loads stay coalesced), and one thread
 *    merges the block partials strictly in block order with the CPU's formulas (Chan's update
 *    for moments, a plain running sum for sumsq). Every multiply and add is a separate IEEE
 *    operation (__dmul_rn, __dadd_rn, ...): nvcc would otherwise fuse them, the CPU library does
 *    not.
 *    The serial merge costs one dependent step per 4096 elements, like the CPU's.
 *  - absmax is an integer max on the bits, order-free; the quantile counts per binade with
 *    integer atomics, and the rank is picked on the host from the counts as on the CPU.
 *
 * Synchronisation: moments, absmax and the quantile hand a value to the host, so each ends with
 * one small device-to-host cudaMemcpy (a few bytes; 4.4 KB of binade counts for the quantile),
 * a wait (counted: mpx_cuda_count_wait). The executor calls them on the adaptive factors'
 * update steps. sumsq, moments_to, absmax_to and the speculative merge check (adaptive
 * scaling's branch merges) write their results to device memory and never wait: the graph
 * reads every parameter's sum and the merges' misses with the step's status, and a
 * statistics step's moments with its counts, each in one download.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "lib/cuda/check.cuh"
#include "lib/cuda/launch.cuh"
#include "lib/graph/als_merge.h"
#include "lib/numerics/kernels.h"
#include "mpx/cuda.h"

namespace {

constexpr size_t MBLOCK = 4096; /* = MBLOCK of lib/numerics/moments.c and sumsq's BLOCK */
constexpr int kWarps = 4;       /* warps per CUDA block in the block-partial kernels */

static_assert(MBLOCK % 32 == 0, "a tile row must not straddle two blocks");
static_assert(32 % MPX_K_LANES == 0, "a tile row must start on lane 0");

/* One block's partial: moments.c's `partial`, field for field. */
struct Partial {
    double n, mean, m2;
    float min, max, absmax;
    int all_finite;
};

/* Calls f(v, k) on the elements of the calling lane's block (block index first + lane) in index
 * order, k = the element's index in the block % MPX_K_LANES (a constant once unrolled, so lane
 * arrays indexed by it stay in registers). Elements travel through the warp's tile [32 blocks]
 * [32 elements] (+1 column against bank conflicts): row r is loaded by the whole warp, 32
 * consecutive floats, and lane r then reads it along. Must be called by all 32 lanes (first is
 * warp-uniform). */
template <class F>
__device__ void for_own_block(const float *x, size_t n, size_t first, float (*tile)[33], F f) {
    const int lane = threadIdx.x & 31;
    const size_t base = first * MBLOCK;
    const size_t own_lo = base + (size_t)lane * MBLOCK;
    const size_t own_m = own_lo < n ? (n - own_lo < MBLOCK ? n - own_lo : MBLOCK) : 0;
    const size_t span_m = n - base < MBLOCK ? n - base : MBLOCK; /* lane 0's block is the longest */
    for (size_t j = 0; j < span_m; j += 32) {
        for (int r = 0; r < 32; r++) {
            const size_t idx = base + (size_t)r * MBLOCK + j + lane;
            tile[r][lane] = idx < n ? x[idx] : 0.0f;
        }
        __syncwarp();
        const size_t cnt = own_m > j ? (own_m - j < 32 ? own_m - j : 32) : 0;
#pragma unroll
        for (int t = 0; t < 32; t++)
            if ((size_t)t < cnt) f(tile[lane][t], t % MPX_K_LANES);
        __syncwarp();
    }
}

/* moments.c's block_partial for every block: two passes over the lane's block (sum, then the
 * squared deviations from the block mean), each over MPX_K_LANES interleaved accumulators added
 * up in lane order as the CPU's, with the extremes and the finite flag on the way. */
__global__ void moment_partials(const float *x, size_t n, size_t nblocks, Partial *parts) {
    __shared__ float tile[kWarps][32][33];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const size_t first = ((size_t)blockIdx.x * kWarps + warp) * 32;
    if (first >= nblocks) return; /* warp-uniform */
    double s[MPX_K_LANES] = {0};
    float mn = INFINITY, mx = -INFINITY, amax = 0;
    int finite = 1;
    for_own_block(x, n, first, tile[warp], [&](float v, int k) {
        s[k] = __dadd_rn(s[k], (double)v);
        if (v < mn) mn = v; /* comparisons with NaN are false: NaN is ignored */
        if (v > mx) mx = v;
        if (fabsf(v) > amax) amax = fabsf(v);
        finite &= isfinite(v) != 0;
    });
    const size_t b = first + lane;
    const size_t m = b < nblocks ? (n - b * MBLOCK < MBLOCK ? n - b * MBLOCK : MBLOCK) : 1;
    double sum = 0;
    for (int k = 0; k < MPX_K_LANES; k++) sum = __dadd_rn(sum, s[k]);
    const double mean = __ddiv_rn(sum, (double)m);
    double q[MPX_K_LANES] = {0};
    for_own_block(x, n, first, tile[warp], [&](float v, int k) {
        const double d = __dsub_rn((double)v, mean);
        q[k] = __dadd_rn(q[k], __dmul_rn(d, d));
    });
    double m2 = 0;
    for (int k = 0; k < MPX_K_LANES; k++) m2 = __dadd_rn(m2, q[k]);
    if (b < nblocks) parts[b] = Partial{(double)m, mean, m2, mn, mx, amax, finite};
}

/* moments.c's merge of every partial, in block order, by one thread; the result goes to
 * parts[nblocks]. */
__global__ void moment_merge(Partial *parts, size_t nblocks) {
    Partial acc = {0, 0, 0, INFINITY, -INFINITY, 0, 1};
    for (size_t b = 0; b < nblocks; b++) {
        const Partial p = parts[b];
        const double n = __dadd_rn(acc.n, p.n);
        const double delta = __dsub_rn(p.mean, acc.mean);
        acc.mean = __dadd_rn(acc.mean, __dmul_rn(delta, __ddiv_rn(p.n, n)));
        /* acc->m2 += p->m2 + delta * delta * (acc->n * p->n / n), with the old acc->n */
        const double w = __ddiv_rn(__dmul_rn(acc.n, p.n), n);
        acc.m2 = __dadd_rn(acc.m2, __dadd_rn(p.m2, __dmul_rn(__dmul_rn(delta, delta), w)));
        acc.n = n;
        if (p.min < acc.min) acc.min = p.min;
        if (p.max > acc.max) acc.max = p.max;
        if (p.absmax > acc.absmax) acc.absmax = p.absmax;
        acc.all_finite &= p.all_finite;
    }
    parts[nblocks] = acc;
}

/* mpx_moments_f32's result from the merged partial (NULL: n = 0), written to device memory:
 * population std = sqrt(m2 / n) (IEEE division and square root, as the CPU), NaN extremes
 * when every element is NaN. */
__global__ void moments_finish(const Partial *merged, size_t n, mpx_moments *out) {
    mpx_moments m;
    m.n = n;
    m.mean = 0.0;
    m.std = 0.0;
    m.min = m.max = m.absmax = 0.0f;
    m.all_finite = 1;
    if (n > 0) {
        const Partial acc = *merged;
        m.mean = acc.mean;
        m.std = __dsqrt_rn(__ddiv_rn(acc.m2, (double)n));
        m.all_finite = acc.all_finite;
        m.absmax = acc.absmax;
        if (acc.min > acc.max) { /* every element is NaN */
            m.min = m.max = m.absmax = __int_as_float(0x7fc00000);
        } else {
            m.min = acc.min;
            m.max = acc.max;
        }
    }
    *out = m;
}

/* backend_cpu.c's sumsq per block: s += (double)x * x in index order (the product of two
 * floats is exact in double, so only the additions round). */
__global__ void sumsq_partials(const float *x, size_t n, size_t nblocks, double *parts) {
    __shared__ float tile[kWarps][32][33];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const size_t first = ((size_t)blockIdx.x * kWarps + warp) * 32;
    if (first >= nblocks) return;
    double s = 0;
    for_own_block(x, n, first, tile[warp], [&](float v, int) {
        const double d = (double)v;
        s = __dadd_rn(s, __dmul_rn(d, d));
    });
    if (first + lane < nblocks) parts[first + lane] = s;
}

/* The block sums added in block order by one thread; the total goes to parts[nblocks]. */
__global__ void sumsq_merge(double *parts, size_t nblocks) {
    double total = 0;
    for (size_t b = 0; b < nblocks; b++) total = __dadd_rn(total, parts[b]);
    parts[nblocks] = total;
}

/* Integer max of |x| on the bits with the sign cleared (moments.c's absmax): per thread, per
 * warp, one atomicMax per block into *out (zeroed before). NaN is clamped to Inf's bits, so
 * *out holds the float absmax itself: NaN and Inf give +Inf, as on the CPU. */
__global__ void absmax_kernel(const float *x, size_t n, unsigned *out) {
    __shared__ unsigned s_max;
    if (threadIdx.x == 0) s_max = 0;
    __syncthreads();
    unsigned m = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        unsigned a = __float_as_uint(x[i]) & 0x7fffffffu;
        a = a > 0x7f800000u ? 0x7f800000u : a;
        m = a > m ? a : m;
    }
    m = __reduce_max_sync(0xffffffffu, m);
    if ((threadIdx.x & 31) == 0) atomicMax(&s_max, m);
    __syncthreads();
    if (threadIdx.x == 0) atomicMax(out, s_max);
}

/* The branches' scales and pending factors of one merge (kernel arguments by value). */
struct MergeArgs {
    double pending[32], S[32];
};

/* als_merge.h's test of a speculative merge's target; one thread. */
__global__ void merge_check_kernel(const float *absmax, int k, MergeArgs a, double target,
                                   double u_max, uint32_t *misses) {
    if (!mpx_als_merge_keeps(absmax, k, a.pending, a.S, target, u_max)) *misses += 1;
}

/* Binades as in moments.c: bin e + QBIAS holds |x| in [2^e, 2^(e+1)), e from -149 to 127, and
 * bin 128 + QBIAS holds Inf; `exact` counts the values equal to 2^e. */
constexpr int QBIAS = 149, QBINS = 149 + 129;

__device__ void binade_of(float a, int *e, int *exact) {
    const uint32_t u = __float_as_uint(a), field = u >> 23, mant = u & 0x7fffffu;
    if (field == 0xff) { /* Inf (NaN is filtered by the caller) */
        *e = 128;
        *exact = 1;
    } else if (field == 0) { /* subnormal: 2^-149 * mant, mant in [1, 2^23) */
        *e = (31 - __clz(mant)) - 149;
        *exact = (mant & (mant - 1)) == 0;
    } else {
        *e = (int)field - 127;
        *exact = mant == 0;
    }
}

/* Counts of nonzero, non-NaN |x * scale| per binade (counts[0..QBINS)) and of exact powers of two
 * (counts[QBINS..2 QBINS)). Per block in shared memory with warp-aggregated increments (one
 * shared atomic per distinct (binade, exact) key in a warp), then one global atomic per bin.
 * The loop bound is uniform across the block, so every lane takes part in each match. */
__global__ void binade_kernel(const float *x, size_t n, float scale,
                              unsigned long long *counts) {
    __shared__ unsigned s_cnt[2 * QBINS];
    for (int k = threadIdx.x; k < 2 * QBINS; k += blockDim.x) s_cnt[k] = 0;
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t base = (size_t)blockIdx.x * blockDim.x; base < n; base += stride) {
        const size_t i = base + threadIdx.x;
        int key = -1;
        if (i < n) {
            /* fabsf(x * scale) as the CPU rounds it; no FTZ, so subnormal products stay. */
            const float a = fabsf(__fmul_rn(x[i], scale));
            if (a != 0 && !isnan(a)) {
                int e, ex;
                binade_of(a, &e, &ex);
                key = 2 * (e + QBIAS) + ex;
            }
        }
        const unsigned peers = __match_any_sync(0xffffffffu, key);
        if (key >= 0 && lane == __ffs(peers) - 1) {
            atomicAdd(&s_cnt[key >> 1], (unsigned)__popc(peers));
            if (key & 1) atomicAdd(&s_cnt[QBINS + (key >> 1)], (unsigned)__popc(peers));
        }
    }
    __syncthreads();
    for (int k = threadIdx.x; k < 2 * QBINS; k += blockDim.x)
        if (s_cnt[k]) atomicAdd(&counts[k], (unsigned long long)s_cnt[k]);
}

/* Launch geometry of the block-partial kernels: one lane per block of MBLOCK elements. */
unsigned partial_grid(size_t nblocks) {
    const size_t per = (size_t)kWarps * 32;
    return (unsigned)((nblocks + per - 1) / per);
}

/* Copy `bytes` of result from the device (the call's one synchronisation), free the scratch,
 * and report the first failure among the launch, the copy and the free. */
mpx_status finish(void *host, const void *dev, size_t bytes, void *scratch) {
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess) {
        mpx_cuda_count_wait();
        err = cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost);
    }
    mpx_status freed = mpx_cuda_scratch_free(scratch);
    MPX_CUDA_TRY(err);
    return freed;
}

/* A result the host waits for: `to_device` writes it into device scratch, then it is copied
 * back (the call's one synchronisation). */
template <class T, class F> mpx_status to_host(T *out, F to_device) {
    void *scratch = nullptr;
    MPX_TRY(mpx_cuda_scratch(sizeof(T), &scratch));
    mpx_status st = to_device((T *)scratch);
    if (st != MPX_OK) {
        mpx_cuda_scratch_free(scratch);
        return st;
    }
    return finish(out, scratch, sizeof(T), scratch);
}

} // namespace

extern "C" mpx_status mpx_moments_to_cuda(const float *x, size_t n, mpx_moments *out) {
    if (n == 0) {
        moments_finish<<<1, 1>>>(nullptr, 0, out);
        MPX_CUDA_TRY(cudaGetLastError());
        return MPX_OK;
    }
    const size_t nblocks = (n + MBLOCK - 1) / MBLOCK;
    void *scratch = nullptr;
    MPX_TRY(mpx_cuda_scratch((nblocks + 1) * sizeof(Partial), &scratch));
    Partial *parts = (Partial *)scratch;
    moment_partials<<<partial_grid(nblocks), kWarps * 32>>>(x, n, nblocks, parts);
    moment_merge<<<1, 1>>>(parts, nblocks);
    moments_finish<<<1, 1>>>(parts + nblocks, n, out);
    cudaError_t err = cudaGetLastError();
    mpx_status freed = mpx_cuda_scratch_free(scratch); /* stream-ordered: after the kernels */
    MPX_CUDA_TRY(err);
    return freed;
}

extern "C" mpx_status mpx_moments_cuda(const float *x, size_t n, mpx_moments *out) {
    return to_host(out, [&](mpx_moments *d) { return mpx_moments_to_cuda(x, n, d); });
}

extern "C" mpx_status mpx_sumsq_cuda(const float *x, size_t n, double *out) {
    if (n == 0) {
        MPX_CUDA_TRY(cudaMemsetAsync(out, 0, sizeof *out, 0));
        return MPX_OK;
    }
    const size_t nblocks = (n + MBLOCK - 1) / MBLOCK;
    void *scratch = nullptr;
    MPX_TRY(mpx_cuda_scratch((nblocks + 1) * sizeof(double), &scratch));
    double *parts = (double *)scratch;
    sumsq_partials<<<partial_grid(nblocks), kWarps * 32>>>(x, n, nblocks, parts);
    sumsq_merge<<<1, 1>>>(parts, nblocks);
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess)
        err = cudaMemcpyAsync(out, parts + nblocks, sizeof *out, cudaMemcpyDeviceToDevice, 0);
    mpx_status freed = mpx_cuda_scratch_free(scratch);
    MPX_CUDA_TRY(err);
    return freed;
}

extern "C" mpx_status mpx_absmax_to_cuda(const float *x, size_t n, float *out) {
    MPX_CUDA_TRY(cudaMemsetAsync(out, 0, sizeof *out, 0));
    if (n == 0) return MPX_OK;
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    absmax_kernel<<<grid, kLaunchThreads>>>(x, n, (unsigned *)out);
    MPX_CUDA_TRY(cudaGetLastError());
    return MPX_OK;
}

extern "C" mpx_status mpx_absmax_cuda(const float *x, size_t n, float *out) {
    *out = 0.0f;
    if (n == 0) return MPX_OK;
    return to_host(out, [&](float *d) { return mpx_absmax_to_cuda(x, n, d); });
}

extern "C" mpx_status mpx_merge_check_cuda(const float *absmax, int k, const double *pending,
                                           const double *S, double target, double u_max,
                                           uint32_t *misses) {
    MergeArgs a;
    if (k < 1 || k > (int)(sizeof a.S / sizeof a.S[0]))
        return mpx_fail(MPX_ERR_INTERNAL, "merge check of %d branches (1..32)", k);
    memset(&a, 0, sizeof a);
    memcpy(a.pending, pending, (size_t)k * sizeof *pending);
    memcpy(a.S, S, (size_t)k * sizeof *S);
    merge_check_kernel<<<1, 1>>>(absmax, k, a, target, u_max, misses);
    MPX_CUDA_TRY(cudaGetLastError());
    return MPX_OK;
}

extern "C" mpx_status mpx_abs_quantile_cuda(const float *x, size_t n, double q, float scale,
                                            float *out) {
    *out = 0.0f;
    if (n == 0) return MPX_OK;
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    void *scratch = nullptr;
    MPX_TRY(mpx_cuda_scratch(2 * QBINS * sizeof(unsigned long long), &scratch));
    binade_kernel<<<grid, kLaunchThreads>>>(x, n, scale, (unsigned long long *)scratch);
    unsigned long long counts[2 * QBINS];
    MPX_TRY(finish(counts, scratch, sizeof counts, scratch));
    const unsigned long long *cnt = counts, *exact = counts + QBINS;
    /* From here on mpx_abs_quantile_ceil_pow2's selection: the element of rank ceil(q m). */
    unsigned long long m = 0;
    for (int b = 0; b < QBINS; b++) m += cnt[b];
    if (m == 0) return MPX_OK;
    const double r = ceil(q * (double)m);
    unsigned long long k = r <= 1 ? 1 : (r >= (double)m ? m : (unsigned long long)r);
    for (int b = 0; b < QBINS; b++) {
        if (k > cnt[b]) {
            k -= cnt[b];
            continue;
        }
        const int e = b - QBIAS;
        *out = e == 128 ? INFINITY : ldexpf(1.0f, k <= exact[b] ? e : e + 1);
        return MPX_OK;
    }
    *out = INFINITY; /* not reached: the counts sum to m */
    return MPX_OK;
}
