/* cuda.h — the CUDA backend's C API (built when a CUDA toolkit is found; see MPX_HAVE_CUDA).
 *
 * Device pointers are plain pointers from cudaMalloc. Work is queued on the default stream and
 * no function here waits for the device, except the reductions that hand a value back to the
 * host (below): errors from a kernel's execution surface at the caller's next synchronisation.
 */
#ifndef MPX_CUDA_H
#define MPX_CUDA_H

#include <stddef.h>

#include "mpx/backend.h"
#include "mpx/error.h"
#include "mpx/numerics.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when there is none or no driver. */
int mpx_cuda_device_count(void);
/* Why mpx_cuda_device_count() found nothing ("no CUDA-capable device is detected", ...). */
const char *mpx_cuda_last_error(void);
/* The CUDA backend (backend.h). So far it has memory, the counted cast, and the numerics and
 * optimizer entries (the functions below); its operators are NULL, and the executor reports each
 * as not implemented on cuda. */
const struct mpx_backend *mpx_backend_cuda(void);
/* The table's entries cannot return a status: a failing entry sets the message and returns a
 * poisoned value (NaN for a reduction, n for the non-finite count of unscale_accumulate). This
 * returns the first such failure on this thread since the last call (MPX_OK when none) and
 * forgets it. */
mpx_status mpx_backend_cuda_error(void);
/* "NVIDIA H100 80GB HBM3"; "" for an invalid index. The buffer is per thread and is reused by
 * the next call on the same thread. */
const char *mpx_cuda_device_name(int device);

/* mpx_cast on the device (numerics.h), with the same semantics and the same bits: src and dst
 * are device pointers; spec is host memory and spec->stats, when not NULL, points to an
 * mpx_cast_stats in DEVICE memory to which the counts are added atomically. Supported: dst F32,
 * F16 or BF16; stats_format F16 or BF16 (others: MPX_ERR_UNSUPPORTED). Asynchronous. */
mpx_status mpx_cast_cuda(const mpx_cast_spec *spec, const float *src, void *dst, size_t n);

/* ---- numerics and optimizer updates on the device ----
 * The backend entries of backend.h with the CPU backend's semantics. Array arguments are device
 * pointers; `out`, returned values and the step structs are host memory. Element-wise functions
 * are asynchronous. The reductions (moments, absmax, abs_quantile, sumsq, unscale_accumulate)
 * wait for their result: each ends with one small device-to-host copy, a synchronisation.
 * Bits: every function gives the CPU backend's bits, Inf included (moments and sumsq keep the
 * CPU's block order, see moments.cu), except the payloads of NaN results: a NaN result is NaN;
 * decode and the accumulations keep an operand's payload as the CPU does (launch.cuh). */

/* mpx_decode: any floating src dtype (F32 copies); MPX_ERR_UNSUPPORTED for the others. */
mpx_status mpx_decode_cuda(mpx_dtype src_dtype, const void *src, float *dst, size_t n);
/* mpx_moments_f32. */
mpx_status mpx_moments_cuda(const float *x, size_t n, mpx_moments *out);
/* mpx_absmax_f32. */
mpx_status mpx_absmax_cuda(const float *x, size_t n, float *out);
/* mpx_abs_quantile_ceil_pow2. */
mpx_status mpx_abs_quantile_cuda(const float *x, size_t n, double q, float scale, float *out);
/* acc[i] += scale * x[i] (FP32, no fused multiply-add, as on the CPU). */
mpx_status mpx_accumulate_cuda(float *acc, const float *x, size_t n, float scale);
/* acc[i] += decode(g[i]) * (float)inv_scale, rounded back to g_dtype first when
 * round_to_storage; *nonfinite = how many of those addends are Inf or NaN. Any floating g_dtype. */
mpx_status mpx_unscale_accumulate_cuda(mpx_dtype g_dtype, const void *g, size_t n,
                                       double inv_scale, int round_to_storage, float *acc,
                                       int64_t *nonfinite);
/* Sum of squares in double over fixed blocks of 4096, in block order (the CPU's sumsq). */
mpx_status mpx_sumsq_cuda(const float *x, size_t n, double *out);
/* The optimizer rules of backend_cpu.c (optim.h): SGD, AdamW, the LAMB direction, w -= a u. */
mpx_status mpx_sgd_update_cuda(float *w, const float *g, float *v, size_t n,
                               const mpx_sgd_step *s);
mpx_status mpx_adamw_update_cuda(float *w, const float *g, float *m, float *v, size_t n,
                                 const mpx_adamw_step *s);
mpx_status mpx_lamb_direction_cuda(const float *w, float *g, float *m, float *v, size_t n,
                                   const mpx_adamw_step *s);
mpx_status mpx_scaled_sub_cuda(float *w, const float *u, size_t n, float a);

#ifdef __cplusplus
}
#endif

#endif
