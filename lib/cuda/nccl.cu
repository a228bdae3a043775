/* nccl.cu — the gradient all-reduce of a data-parallel run on GPUs: NCCL over the devices' own
 * links (NVLink, InfiniBand), one process per GPU, the NCCL communicator's unique id made by rank
 * 0 and shared with MPI's broadcast (comm.h), as llm.c does. Compiled when CMake finds NCCL
 * beside the CUDA toolkit and an MPI library (MPX_HAVE_NCCL); otherwise the entry reports that
 * it is not built and the executor reduces through host memory.
 */
#include <cuda_runtime.h>

#include "lib/cuda/check.cuh"
#include "lib/cuda/launch.cuh"
#include "mpx/comm.h"
#include "mpx/cuda.h"

#ifdef MPX_HAVE_NCCL
#include <nccl.h>

namespace {

ncclComm_t g_comm = nullptr;

mpx_status nccl_fail(const char *what, ncclResult_t r) {
    return mpx_fail(MPX_ERR_BACKEND, "NCCL %s failed on rank %d: %s", what, mpx_comm_rank(),
                    ncclGetErrorString(r));
}

/* The communicator of every rank, made on first use (every rank reaches its first gradient
 * all-reduce at the same point of the same step). */
mpx_status comm_ready() {
    if (g_comm) return MPX_OK;
    ncclUniqueId id;
    if (mpx_comm_rank() == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) return nccl_fail("unique id", r);
    }
    MPX_TRY(mpx_comm_bcast(&id, sizeof id, 0));
    ncclResult_t r = ncclCommInitRank(&g_comm, mpx_comm_size(), id, mpx_comm_rank());
    if (r != ncclSuccess) {
        g_comm = nullptr;
        return nccl_fail("communicator", r);
    }
    return MPX_OK;
}

__global__ void scale_kernel(float *x, size_t n, float s) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

} // namespace

extern "C" mpx_status mpx_nccl_allreduce_sum(float *x, size_t n, float post_scale) {
    if (n == 0 || mpx_comm_size() == 1) return MPX_OK;
    MPX_TRY(comm_ready());
    ncclResult_t r = ncclAllReduce(x, x, n, ncclFloat, ncclSum, g_comm, 0);
    if (r != ncclSuccess) return nccl_fail("all-reduce", r);
    if (post_scale != 1.0f) {
        const unsigned blocks = (unsigned)((n + kLaunchThreads - 1) / kLaunchThreads);
        scale_kernel<<<blocks < 4096 ? blocks : 4096, kLaunchThreads>>>(x, n, post_scale);
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess)
            return mpx_fail(MPX_ERR_BACKEND, "scaling the all-reduced gradients: %s",
                            cudaGetErrorString(err));
    }
    return MPX_OK;
}

#else

extern "C" mpx_status mpx_nccl_allreduce_sum(float *x, size_t n, float post_scale) {
    (void)x, (void)n, (void)post_scale;
    return mpx_fail(MPX_ERR_UNSUPPORTED, "this build has no NCCL (CMake found none beside the "
                                         "CUDA toolkit, or no MPI library)");
}

#endif
