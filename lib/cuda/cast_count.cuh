/* cast_count.cuh — counting a cast into an mpx_cast_stats on the GPU (private to lib/cuda),
 * shared by every counted kernel (cast.cu, quantize.cu) so that all reduce the same way.
 *
 * A thread keeps its counters in registers (32-bit: a thread sees fewer than 2^32 elements) and
 * adds each element to the block's shared histogram with one warp-aggregated atomic per distinct
 * bin; at the end the counters are reduced per warp, then per block in shared memory, then added
 * with one 64-bit atomic per counter per block into the mpx_cast_stats in device memory. The
 * counts are sums, so they do not depend on the grid.
 */
#ifndef MPX_CUDA_CAST_COUNT_CUH
#define MPX_CUDA_CAST_COUNT_CUH

#include <stdint.h>

#include "lib/numerics/fp_bits.h"
#include "mpx/numerics.h"

/* The six counters of mpx_cast_stats besides count and the histogram, in this order. */
enum { kCntNonzero, kCntFlushed, kCntBelowMin, kCntSubnormal, kCntOverflow, kCntNonfinite, kCnt };

/* A block's shared counters. */
struct CastCountShared {
    unsigned int hist[MPX_HIST_BINS];
    unsigned long long cnt[kCnt];
};

/* Zero the block's shared counters (every thread of the block calls it). */
__device__ __forceinline__ void cast_count_begin(CastCountShared *s) {
    for (int k = threadIdx.x; k < MPX_HIST_BINS; k += blockDim.x) s->hist[k] = 0;
    if (threadIdx.x < kCnt) s->cnt[threadIdx.x] = 0;
    __syncthreads();
}

/* One element: x's FP32 bits u into the histogram (called by the threads that hold an
 * element; the others may have left the loop). */
__device__ __forceinline__ void cast_count_hist(CastCountShared *s, uint32_t u) {
    const int bin = mpx_fp_hist_bin(u);
    const unsigned peers = __match_any_sync(__activemask(), bin);
    if ((threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&s->hist[bin], __popc(peers));
}

/* *dst += v for a uint64_t counter in device memory (skipped when v is 0). */
__device__ __forceinline__ void cast_count_add_u64(uint64_t *dst, unsigned long long v) {
    if (v) atomicAdd((unsigned long long *)dst, v);
}

/* The block's counts into *st; n elements in all (block 0 adds them to st->count). Every thread
 * of the block calls it, with all 32 lanes of each warp present. */
__device__ __forceinline__ void cast_count_end(CastCountShared *s, const uint32_t c[kCnt],
                                               mpx_cast_stats *st, size_t n) {
    for (int k = 0; k < kCnt; k++) {
        const unsigned w = __reduce_add_sync(0xffffffffu, c[k]);
        if ((threadIdx.x & 31) == 0 && w) atomicAdd(&s->cnt[k], (unsigned long long)w);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        cast_count_add_u64(&st->nonzero, s->cnt[kCntNonzero]);
        cast_count_add_u64(&st->flushed, s->cnt[kCntFlushed]);
        cast_count_add_u64(&st->below_min, s->cnt[kCntBelowMin]);
        cast_count_add_u64(&st->subnormal, s->cnt[kCntSubnormal]);
        cast_count_add_u64(&st->overflow, s->cnt[kCntOverflow]);
        cast_count_add_u64(&st->nonfinite, s->cnt[kCntNonfinite]);
        if (blockIdx.x == 0) cast_count_add_u64(&st->count, n);
    }
    for (int k = threadIdx.x; k < MPX_HIST_BINS; k += blockDim.x)
        cast_count_add_u64(&st->hist[k], s->hist[k]);
}

#endif
