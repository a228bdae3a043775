/* device.cu — CUDA devices: how many, their names, and the error reporting used by lib/cuda. */
#include <atomic>
#include <cstdio>

#include "lib/cuda/check.cuh"
#include "mpx/cuda.h"

mpx_status mpx_cuda_fail(cudaError_t err, const char *file, int line, const char *expr) {
    return mpx_fail(MPX_ERR_BACKEND, "%s:%d: %s: %s (%s)", file, line, expr,
                    cudaGetErrorString(err), cudaGetErrorName(err));
}

/* Relaxed: only the total matters (the executor drives the device from one thread). */
static std::atomic<int64_t> g_waits{0};
void mpx_cuda_count_wait(void) { g_waits.fetch_add(1, std::memory_order_relaxed); }
extern "C" int64_t mpx_cuda_host_waits(void) { return g_waits.load(std::memory_order_relaxed); }

static thread_local char g_last_error[256] = "";

extern "C" int mpx_cuda_device_count(void) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        snprintf(g_last_error, sizeof g_last_error, "%s", cudaGetErrorString(err));
        cudaGetLastError(); /* no driver / no device: clear the error, report none */
        return 0;
    }
    return n;
}

extern "C" const char *mpx_cuda_last_error(void) { return g_last_error; }

extern "C" mpx_status mpx_cuda_use_device(int device) {
    cudaError_t err = cudaSetDevice(device);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return mpx_fail(MPX_ERR_BACKEND, "cannot use CUDA device %d: %s", device,
                        cudaGetErrorString(err));
    }
    return MPX_OK;
}

extern "C" const char *mpx_cuda_device_name(int device) {
    static thread_local char name[256];
    cudaDeviceProp prop;
    name[0] = '\0';
    if (device < 0 || device >= mpx_cuda_device_count() ||
        cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        cudaGetLastError();
        return name;
    }
    snprintf(name, sizeof name, "%s", prop.name);
    return name;
}
