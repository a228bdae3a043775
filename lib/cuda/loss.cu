/* loss.cu — softmax cross-entropy on the GPU, forward and backward (lib/ops/softmax_ce.c).
 *
 * logits [M, K] (F32, F16 or BF16), labels I32 [M] (label < 0: row ignored), loss [1] (FP32 in
 * the executor) = mean over the counted rows of -log softmax(logits)[label], probs [M, K] saved
 * for backward; dlogits = (probs - onehot) / count, zero rows for ignored labels.
 * Forward: one CUDA block per row subtracts the row maximum, sums exp in double (a block
 * reduction), writes probs = exp(x - max) * (float)(1 / sum) and the row's loss
 * log(sum) - (x[label] - max) in double; an ignored row's probs are zeros, as on the CPU. The
 * mean follows the CPU's order exactly: the rows fall into the CPU's 64 fixed blocks, one thread
 * sums a block's rows in row order, and one thread adds the 64 partials in order, so the loss
 * differs from the CPU's only through expf (CUDA's is within 2 ulp, glibc's within 1) and the
 * double log, never through summation order.
 * Labels >= K are an input error naming the row and the value, as on the CPU: a kernel finds
 * the first one and counts the rows that are not ignored (the kernels skip bad labels). The
 * verdict is read at the backend's next wait (cuop_check_defer: after the step's status
 * download, or a sync) and reported through its last_error, so the check costs no wait of its
 * own. The mean and the backward read the count from device memory.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>

#include "lib/cuda/ops.cuh"
#include "mpx/cuda.h"

namespace {

constexpr int NB = 64; /* softmax_ce.c's fixed blocks of rows */

/* First label >= K; count of labels >= 0. */
__global__ void labels_check(const int32_t *lab, size_t m, int64_t k, CuopCheck *chk) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned long long cnt = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += stride) {
        if (lab[i] >= k) atomicMin(&chk->first_bad, (unsigned long long)i);
        cnt += lab[i] >= 0;
    }
    if (cnt) atomicAdd(&chk->count, cnt);
}

struct CeFwdArgs {
    const void *x;
    mpx_dtype xdt;
    const int32_t *lab;
    void *probs;
    mpx_dtype pdt;
    double *row_loss; /* [M]; 0 for ignored rows */
    int64_t m, k;
};

__global__ void ce_rows(CeFwdArgs a) {
    __shared__ double shd[32];
    __shared__ float shf[32];
    for (int64_t r = blockIdx.x; r < a.m; r += gridDim.x) {
        const size_t base = (size_t)r * a.k;
        if (a.lab[r] < 0) { /* ignored: zero probs, no loss (the whole block takes this branch) */
            for (int64_t j = threadIdx.x; j < a.k; j += blockDim.x)
                cuop_st(a.probs, a.pdt, base + j, 0.0f);
            if (threadIdx.x == 0) a.row_loss[r] = 0;
            continue;
        }
        float mx = -INFINITY;
        for (int64_t j = threadIdx.x; j < a.k; j += blockDim.x) {
            const float v = cuop_ld(a.x, a.xdt, base + j);
            if (v > mx) mx = v;
        }
        mx = cuop_block_max(mx, shf);
        double s = 0;
        for (int64_t j = threadIdx.x; j < a.k; j += blockDim.x)
            s = __dadd_rn(s, (double)expf(__fsub_rn(cuop_ld(a.x, a.xdt, base + j), mx)));
        s = cuop_block_sum(s, shd);
        const float inv = (float)__ddiv_rn(1.0, s);
        for (int64_t j = threadIdx.x; j < a.k; j += blockDim.x)
            cuop_st(a.probs, a.pdt, base + j,
                    __fmul_rn(expf(__fsub_rn(cuop_ld(a.x, a.xdt, base + j), mx)), inv));
        if (threadIdx.x == 0) {
            const int32_t l = a.lab[r];
            double rl = 0;
            if (l >= 0 && l < a.k)
                rl = __dsub_rn(log(s), (double)__fsub_rn(cuop_ld(a.x, a.xdt, base + l), mx));
            a.row_loss[r] = rl;
        }
    }
}

/* One block of NB threads: the CPU's block partials, then their sum in order, then the mean. */
__global__ void ce_mean(const double *row_loss, const int32_t *lab, int64_t m, int64_t k,
                        const CuopCheck *chk, void *loss, mpx_dtype ldt) {
    __shared__ double partial[NB];
    const int b = threadIdx.x;
    double acc = 0;
    for (int64_t i = m * b / NB; i < m * (b + 1) / NB; i++)
        if (lab[i] >= 0 && lab[i] < k) acc = __dadd_rn(acc, row_loss[i]);
    partial[b] = acc;
    __syncthreads();
    if (b == 0) {
        double total = 0;
        for (int i = 0; i < NB; i++)
            total = __dadd_rn(total, partial[i]);
        const unsigned long long count = chk->count;
        cuop_st(loss, ldt, 0, count ? (float)__ddiv_rn(total, (double)count) : 0.0f);
    }
}

/* dlogits = probs / count, minus 1 / count at the label; zero rows for ignored labels. */
__global__ void ce_bwd(const void *probs, mpx_dtype pdt, const int32_t *lab, int64_t m, int64_t k,
                       const CuopCheck *chk, void *dx, mpx_dtype dxdt) {
    const size_t total = (size_t)m * k, stride = (size_t)gridDim.x * blockDim.x;
    const float fc = (float)(int64_t)chk->count;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const int64_t r = (int64_t)(e / (size_t)k), j = (int64_t)(e % (size_t)k);
        const int32_t l = lab[r];
        float v = 0.0f;
        if (l >= 0 && l < k) {
            const float p = cuop_ld(probs, pdt, e);
            v = j == l ? __fdiv_rn(__fsub_rn(p, 1.0f), fc) : __fdiv_rn(p, fc);
        }
        cuop_st(dx, dxdt, e, v);
    }
}

mpx_status ce_shapes(const char *op, const char *xn, const mpx_tensor *x, const mpx_tensor *labels,
                     const char *yn, const mpx_tensor *y) {
    MPX_TRY(cuop_expect_float(op, xn, x, 2));
    MPX_TRY(cuop_expect(op, "labels", labels, MPX_I32, 1));
    MPX_TRY(cuop_expect_dim(op, "labels", labels, 0, x->shape[0], "M, the rows of the logits"));
    MPX_TRY(cuop_expect_float(op, yn, y, 2));
    return cuop_expect_same_shape(op, xn, x, yn, y);
}

/* Queues the label check. */
mpx_status check_labels(const char *op, const mpx_tensor *labels, int64_t k, CuopCheck **chk) {
    const size_t m = (size_t)labels->shape[0];
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(m, &grid));
    MPX_TRY(cuop_check_begin(chk));
    labels_check<<<grid, kLaunchThreads>>>((const int32_t *)labels->data, m, k, *chk);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
        mpx_cuda_scratch_free(*chk);
        *chk = nullptr;
        return cuop_launch_fail(op, "labels check", labels, err);
    }
    return MPX_OK;
}

/* Hands the check to the backend's next wait (after the queued work, whose status is `st`). */
mpx_status finish(const char *op, mpx_status st, CuopCheck *chk, const mpx_tensor *labels,
                  int64_t k) {
    if (st != MPX_OK) {
        mpx_cuda_scratch_free(chk);
        return st;
    }
    char rule[160];
    snprintf(rule, sizeof rule,
             " is out of range: must be < K = %lld (dim 1 of the logits) or < 0 to ignore the row",
             (long long)k);
    return cuop_check_defer(chk, labels, op, "labels", rule);
}

} // namespace

extern "C" mpx_status mpx_softmax_ce_forward_cuda(const mpx_tensor *logits,
                                                  const mpx_tensor *labels, mpx_tensor *loss,
                                                  mpx_tensor *probs) {
    static const char *op = "softmax_ce forward";
    MPX_TRY(ce_shapes(op, "logits", logits, labels, "probs", probs));
    MPX_TRY(cuop_expect_float(op, "loss", loss, -1));
    if (mpx_tensor_numel(loss) != 1) {
        char buf[64];
        return mpx_fail(MPX_ERR_INPUT, "%s: loss has shape %s, expected one element", op,
                        mpx_shape_str(loss->ndim, loss->shape, buf, sizeof buf));
    }
    const int64_t m = logits->shape[0], k = logits->shape[1];
    CuopCheck *chk = nullptr;
    MPX_TRY(check_labels(op, labels, k, &chk));
    void *row_loss = nullptr;
    mpx_status st = cuop_scratch((size_t)m * sizeof(double), &row_loss);
    if (st == MPX_OK) {
        CeFwdArgs a;
        a.x = logits->data, a.xdt = logits->dtype;
        a.lab = (const int32_t *)labels->data;
        a.probs = probs->data, a.pdt = probs->dtype;
        a.row_loss = (double *)row_loss;
        a.m = m, a.k = k;
        ce_rows<<<cuop_row_grid(m), kRowThreads>>>(a);
        cudaError_t err = cudaGetLastError();
        if (err == cudaSuccess) {
            ce_mean<<<1, NB>>>((const double *)row_loss, a.lab, m, k, chk, loss->data, loss->dtype);
            err = cudaGetLastError();
        }
        if (err != cudaSuccess) st = cuop_launch_fail(op, "softmax cross-entropy", logits, err);
        mpx_status freed = mpx_cuda_scratch_free(row_loss);
        if (st == MPX_OK) st = freed;
    }
    return finish(op, st, chk, labels, k);
}

extern "C" mpx_status mpx_softmax_ce_backward_cuda(const mpx_tensor *probs,
                                                   const mpx_tensor *labels, mpx_tensor *dlogits) {
    static const char *op = "softmax_ce backward";
    MPX_TRY(ce_shapes(op, "probs", probs, labels, "dlogits", dlogits));
    const int64_t m = probs->shape[0], k = probs->shape[1];
    CuopCheck *chk = nullptr;
    MPX_TRY(check_labels(op, labels, k, &chk));
    unsigned grid = 1;
    mpx_status st = mpx_cuda_grid((size_t)(m * k), &grid);
    if (st == MPX_OK) {
        ce_bwd<<<grid, kLaunchThreads>>>(probs->data, probs->dtype, (const int32_t *)labels->data,
                                         m, k, chk, dlogits->data, dlogits->dtype);
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) st = cuop_launch_fail(op, "softmax cross-entropy", probs, err);
    }
    return finish(op, st, chk, labels, k);
}
