/* optim.cu — the optimizer updates of the CUDA backend on FP32 masters: SGD with momentum,
 * AdamW, the LAMB direction and the LAMB step w -= a u (the rules of backend_cpu.c / optim.h).
 *
 * Bits: each element is computed with the CPU's operations in the CPU's order, every one a
 * separately rounded IEEE operation (__fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn, __fsqrt_rn):
 * the CPU library is compiled without FMA contraction, and nvcc would otherwise fuse multiplies
 * into adds. The results are therefore the CPU's bits for every finite input (NaN payloads may
 * differ; a non-finite gradient never reaches these, the optimizer refuses it first).
 * Element-wise, so independent of the launch geometry; asynchronous.
 */
#include <cuda_runtime.h>

#include "lib/cuda/check.cuh"
#include "lib/cuda/launch.cuh"
#include "mpx/cuda.h"

namespace {

/* SGD (PyTorch semantics): g' = clip g + wd w; v = m v + g'; w -= lr (nesterov ? g' + m v : v). */
__global__ void sgd_kernel(float *w, const float *g, float *v, size_t n, mpx_sgd_step s) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride) {
        const float wk = w[k];
        const float gk = __fadd_rn(__fmul_rn(g[k], s.clip), __fmul_rn(s.wd, wk));
        const float vk = __fadd_rn(__fmul_rn(s.momentum, v[k]), gk);
        v[k] = vk;
        const float step = s.nesterov ? __fadd_rn(gk, __fmul_rn(s.momentum, vk)) : vk;
        const float d = __fmul_rn(s.lr, step);
        w[k] = __fsub_rn(wk, d);
        if (s.delta) s.delta[k] = d;
    }
}

/* backend_cpu.c's adam_direction: updates m and v, returns m^ / (sqrt(v^) + eps) + wd w. */
__device__ __forceinline__ float adam_direction(float w, float g, float *m, float *v,
                                                const mpx_adamw_step &s) {
    const float gk = __fmul_rn(g, s.clip);
    const float mk = __fadd_rn(__fmul_rn(s.beta1, *m), __fmul_rn(s.one_minus_beta1, gk));
    const float vk =
        __fadd_rn(__fmul_rn(s.beta2, *v), __fmul_rn(__fmul_rn(s.one_minus_beta2, gk), gk));
    *m = mk;
    *v = vk;
    const float mhat = __fdiv_rn(mk, s.bias_corr1), vhat = __fdiv_rn(vk, s.bias_corr2);
    return __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), s.eps)), __fmul_rn(s.wd, w));
}

__global__ void adamw_kernel(float *w, const float *g, float *m, float *v, size_t n,
                             mpx_adamw_step s) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride) {
        const float wk = w[k];
        const float d = __fmul_rn(s.lr, adam_direction(wk, g[k], &m[k], &v[k], s));
        w[k] = __fsub_rn(wk, d);
        if (s.delta) s.delta[k] = d;
    }
}

/* LAMB's first pass: the AdamW direction overwrites the gradient. */
__global__ void lamb_kernel(const float *w, float *g, float *m, float *v, size_t n,
                            mpx_adamw_step s) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride)
        g[k] = adam_direction(w[k], g[k], &m[k], &v[k], s);
}

__global__ void scaled_sub_kernel(float *w, const float *u, size_t n, float a, float *delta) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride) {
        const float d = __fmul_rn(a, u[k]);
        w[k] = __fsub_rn(w[k], d);
        if (delta) delta[k] = d;
    }
}

} // namespace

extern "C" mpx_status mpx_sgd_update_cuda(float *w, const float *g, float *v, size_t n,
                                          const mpx_sgd_step *s) {
    if (n == 0) return MPX_OK;
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    sgd_kernel<<<grid, kLaunchThreads>>>(w, g, v, n, *s);
    MPX_CUDA_TRY(cudaGetLastError());
    return MPX_OK;
}

extern "C" mpx_status mpx_adamw_update_cuda(float *w, const float *g, float *m, float *v,
                                            size_t n, const mpx_adamw_step *s) {
    if (n == 0) return MPX_OK;
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    adamw_kernel<<<grid, kLaunchThreads>>>(w, g, m, v, n, *s);
    MPX_CUDA_TRY(cudaGetLastError());
    return MPX_OK;
}

extern "C" mpx_status mpx_lamb_direction_cuda(const float *w, float *g, float *m, float *v,
                                              size_t n, const mpx_adamw_step *s) {
    if (n == 0) return MPX_OK;
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    lamb_kernel<<<grid, kLaunchThreads>>>(w, g, m, v, n, *s);
    MPX_CUDA_TRY(cudaGetLastError());
    return MPX_OK;
}

extern "C" mpx_status mpx_scaled_sub_cuda(float *w, const float *u, size_t n, float a,
                                           float *delta) {
    if (n == 0) return MPX_OK;
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    scaled_sub_kernel<<<grid, kLaunchThreads>>>(w, u, n, a, delta);
    MPX_CUDA_TRY(cudaGetLastError());
    return MPX_OK;
}
