/* als_merge.h — the test behind a speculative branch merge under adaptive scaling (docs/papers.md
 * §3 step 10), one source for the CPU backend (backend_cpu.c: merge_check) and the CUDA kernel
 * (lib/cuda/moments.cu), so that both decide on the same double operations.
 *
 * A merge rescales its branches to the largest scale S_i under which the largest unscaled
 * magnitude m stays below u_max (mpx_als_merge_target). The executor may assume that the largest
 * S_i of all fits and go on without waiting for the magnitudes; this says whether it did.
 */
#ifndef MPX_ALS_MERGE_H
#define MPX_ALS_MERGE_H

#include <math.h>

#include "lib/numerics/fp_bits.h" /* MPX_HD */

/* m = max over i < k of ((double)absmax[i] * pending[i]) / S[i]: branch i's largest stored
 * magnitude absmax[i] (a NaN or Inf there is +Inf), times the factor not yet applied to it, over
 * the scale it will carry (graph_exec.c: merge_branches computes the same for
 * mpx_als_merge_target). */
MPX_HD double mpx_als_merge_peak(const float *absmax, int k, const double *pending,
                                 const double *S) {
    double m = 0;
    for (int i = 0; i < k; i++) m = fmax(m, ((double)absmax[i] * pending[i]) / S[i]);
    return m;
}

/* Whether `target` keeps the merged gradient below u_max: mpx_als_merge_target's test of a
 * candidate scale, which then picks the largest candidate that passes. */
MPX_HD int mpx_als_merge_keeps(const float *absmax, int k, const double *pending, const double *S,
                               double target, double u_max) {
    return mpx_als_merge_peak(absmax, k, pending, S) * target < u_max;
}

#endif
