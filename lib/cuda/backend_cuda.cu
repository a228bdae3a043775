/* backend_cuda.cu — the CUDA backend table: device memory, the counted cast, decoding.
 *
 * The operators (cuBLAS GEMMs, cuDNN convolutions and batch-norm, own kernels) are the CUDA
 * backend issue's work and are NULL here; the executor reports each as not implemented.
 * Memory functions cannot return errors through the table, so failures are remembered and
 * allocation returns NULL (which the graph reports with the arena it was planning).
 */
#include <cuda_runtime.h>

#include "lib/cuda/check.cuh"
#include "mpx/backend.h"
#include "mpx/cuda.h"

static int cuda_native(mpx_dtype t) {
    return t == MPX_F32 || t == MPX_F16 || t == MPX_BF16 || t == MPX_I32;
}

static void *cuda_alloc(size_t bytes) {
    void *p = nullptr;
    if (cudaMalloc(&p, bytes ? bytes : 64) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    if (cudaMemset(p, 0, bytes ? bytes : 64) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(p);
        return nullptr;
    }
    return p;
}

static void cuda_free(void *p) { cudaFree(p); }
static void cuda_zero(void *p, size_t bytes) { cudaMemsetAsync(p, 0, bytes); }
static void cuda_copy(void *dst, const void *src, size_t bytes) {
    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice);
}
static void cuda_upload(void *dst, const void *host, size_t bytes) {
    cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice);
}
static void cuda_download(void *host, const void *src, size_t bytes) {
    cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost);
}
static void cuda_cast(const mpx_cast_spec *spec, const float *src, void *dst, size_t n) {
    mpx_cast_cuda(spec, src, dst, n);
}

static mpx_backend make_backend(void) {
    mpx_backend b = {};
    b.name = "cuda";
    b.device = MPX_DEV_CUDA;
    b.native = cuda_native;
    b.alloc = cuda_alloc;
    b.free = cuda_free;
    b.zero = cuda_zero;
    b.copy = cuda_copy;
    b.upload = cuda_upload;
    b.download = cuda_download;
    b.cast = cuda_cast;
    return b;
}

static const mpx_backend g_cuda = make_backend();

extern "C" const mpx_backend *mpx_backend_cuda(void) { return &g_cuda; }
