/* cuda_check.h — the CUDA runtime checks the cuda tests share: a failed runtime call ends the
 * test (CUDA_OK, in main) or the helper (CUDA_OK_VOID) with the call and CUDA's message, since
 * nothing after it can be checked.
 */
#ifndef MPX_TEST_CUDA_CHECK_H
#define MPX_TEST_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#include "testutil.h"

#define CUDA_OK(expr)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (expr);                                                                   \
        REQUIRE(e_ == cudaSuccess, "%s: %s", #expr, cudaGetErrorString(e_));                       \
    } while (0)

#define CUDA_OK_VOID(expr)                                                                         \
    do {                                                                                           \
        cudaError_t e_ = (expr);                                                                   \
        REQUIRE_VOID(e_ == cudaSuccess, "%s: %s", #expr, cudaGetErrorString(e_));                  \
    } while (0)

#endif
