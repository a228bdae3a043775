/* check.cuh — turning CUDA runtime errors into mpx_status (private to lib/cuda). */
#ifndef MPX_CUDA_CHECK_CUH
#define MPX_CUDA_CHECK_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "mpx/error.h"

/* Sets the message "file:line: expr: <cudaGetErrorString>" and returns MPX_ERR_BACKEND. */
mpx_status mpx_cuda_fail(cudaError_t err, const char *file, int line, const char *expr);

/* Count one wait of the host for the device (before the blocking call): mpx_cuda_host_waits. */
void mpx_cuda_count_wait(void);

/* Evaluate a CUDA runtime call; on failure return its error as an mpx_status. */
#define MPX_CUDA_TRY(expr)                                                                         \
    do {                                                                                           \
        cudaError_t mpx_cuda_err_ = (expr);                                                        \
        if (mpx_cuda_err_ != cudaSuccess)                                                          \
            return mpx_cuda_fail(mpx_cuda_err_, __FILE__, __LINE__, #expr);                        \
    } while (0)

#endif
