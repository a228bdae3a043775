/* cuda.h — the CUDA backend's C API (built when a CUDA toolkit is found; see MPX_HAVE_CUDA).
 *
 * Device pointers are plain pointers from cudaMalloc. Work is queued on the default stream and
 * no function here waits for the device: errors from a kernel's execution surface at the
 * caller's next synchronisation.
 */
#ifndef MPX_CUDA_H
#define MPX_CUDA_H

#include <stddef.h>

#include "mpx/error.h"
#include "mpx/numerics.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mpx_backend;

/* Number of usable CUDA devices; 0 when there is none or no driver. */
int mpx_cuda_device_count(void);
/* Why mpx_cuda_device_count() found nothing ("no CUDA-capable device is detected", ...). */
const char *mpx_cuda_last_error(void);
/* The CUDA backend (backend.h). So far it has memory, the counted cast and decoding; its
 * operators are NULL, and the executor reports each as not implemented on cuda. */
const struct mpx_backend *mpx_backend_cuda(void);
/* "NVIDIA H100 80GB HBM3"; "" for an invalid index. The buffer is per thread and is reused by
 * the next call on the same thread. */
const char *mpx_cuda_device_name(int device);

/* mpx_cast on the device (numerics.h), with the same semantics and the same bits: src and dst
 * are device pointers; spec is host memory and spec->stats, when not NULL, points to an
 * mpx_cast_stats in DEVICE memory to which the counts are added atomically. Supported: dst F32,
 * F16 or BF16; stats_format F16 or BF16 (others: MPX_ERR_UNSUPPORTED). Asynchronous. */
mpx_status mpx_cast_cuda(const mpx_cast_spec *spec, const float *src, void *dst, size_t n);

#ifdef __cplusplus
}
#endif

#endif
