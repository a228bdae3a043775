/* backend.c — the backend registry: which backends this build has. */
#include "mpx/backend.h"
#include "mpx/comm.h"

#ifdef MPX_HAVE_CUDA
#include "mpx/cuda.h"
#endif

int mpx_backend_cuda_built(void) {
#ifdef MPX_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

const mpx_backend *mpx_backend_get(mpx_device device) {
    if (device == MPX_DEV_CPU) return mpx_backend_cpu();
#ifdef MPX_HAVE_CUDA
    if (mpx_cuda_device_count() <= 0) {
        mpx_fail(MPX_ERR_UNSUPPORTED, "device = cuda: no CUDA device found (%s)",
                 mpx_cuda_last_error());
        return NULL;
    }
    /* One GPU per process: a rank of a data-parallel run takes its machine's local rank's. */
    if (mpx_comm_size() > 1 &&
        mpx_cuda_use_device(mpx_comm_local_rank() % mpx_cuda_device_count()) != MPX_OK)
        return NULL;
    return mpx_backend_cuda();
#else
    mpx_fail(MPX_ERR_UNSUPPORTED, "device = cuda: this build has no CUDA backend "
                                  "(no CUDA toolkit was found at configure time)");
    return NULL;
#endif
}
