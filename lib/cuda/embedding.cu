/* embedding.cu — table lookup on the GPU, forward and backward (lib/ops/embedding.c).
 *
 * ids I32 [...] (N positions), table [V, H], y [..., H]: y[n] = table[ids[n]] (a converting copy:
 * exact, or one rounding when y's dtype is narrower than the table's).
 * Backward: dtable[v] = the sum of dy[n] over the positions n with ids[n] = v, duplicates added in
 * position order, zero rows for unused ids. Deterministic without float atomics: the (id,
 * position) pairs are sorted by id with CUB's radix sort, which is stable, so each id's positions
 * stay in increasing order; then one CUDA block per run of equal ids owns that table row and adds
 * the dy rows in that order, in FP32 from 0 — the CPU's additions in the CPU's order, so dtable
 * has the CPU's bits. The row is written once, rounded into dtable's dtype (F32 in the executor).
 *
 * Every id must lie in [0, V): a kernel finds the first offending position on the device (the
 * kernels skip bad ids, so nothing is read or written out of bounds even then), and the verdict
 * is read at the backend's next wait (cuop_check_defer), costing no wait of its own; the error,
 * reported through the backend's last_error, names the position and the value, as the CPU op's.
 */
#include <cuda_runtime.h>
#include <limits.h>
#include <stdio.h>

#include <cub/device/device_radix_sort.cuh>

#include "lib/cuda/ops.cuh"
#include "mpx/cuda.h"

namespace {

__global__ void ids_check(const int32_t *ids, size_t n, int64_t v, CuopCheck *chk) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        if (ids[i] < 0 || ids[i] >= v) atomicMin(&chk->first_bad, (unsigned long long)i);
}

__global__ void gather(const int32_t *ids, size_t n, int64_t v, size_t h, const void *table,
                       mpx_dtype tdt, void *y, mpx_dtype ydt) {
    const size_t total = n * h, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const int32_t id = ids[e / h];
        if (id >= 0 && id < v) cuop_st(y, ydt, e, cuop_ld(table, tdt, (size_t)id * h + e % h));
    }
}

__global__ void iota(uint32_t *p, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = (uint32_t)i;
}

/* Block per sorted index i that starts a run of equal ids: dtable[id] = sum of the run's dy rows,
 * in position order. */
__global__ void run_sums(const uint32_t *keys, const uint32_t *pos, size_t n, int64_t v, size_t h,
                         const void *dy, mpx_dtype dydt, void *dtable, mpx_dtype tdt) {
    for (size_t i = blockIdx.x; i < n; i += gridDim.x) {
        const uint32_t key = keys[i];
        if ((i > 0 && keys[i - 1] == key) || (int64_t)key >= v) continue; /* not a run start */
        for (size_t j = threadIdx.x; j < h; j += blockDim.x) {
            float acc = 0.0f;
            for (size_t e = i; e < n && keys[e] == key; e++)
                acc = __fadd_rn(acc, cuop_ld(dy, dydt, (size_t)pos[e] * h + j));
            cuop_st(dtable, tdt, (size_t)key * h + j, acc);
        }
    }
}

/* embedding.c's emb_check, shapes only (the ids' range is checked on the device). */
mpx_status emb_shapes(const char *op, const mpx_tensor *ids, const char *tn,
                      const mpx_tensor *table, const char *yn, const mpx_tensor *y) {
    MPX_TRY(cuop_expect(op, "ids", ids, MPX_I32, -1));
    if (ids->ndim >= MPX_MAX_DIMS)
        return mpx_fail(MPX_ERR_INPUT, "%s: ids has %d dims, expected 1..%d (%s adds H)", op,
                        ids->ndim, MPX_MAX_DIMS - 1, yn);
    MPX_TRY(cuop_expect_float(op, tn, table, 2));
    MPX_TRY(cuop_expect_float(op, yn, y, ids->ndim + 1));
    for (int i = 0; i < ids->ndim; i++)
        MPX_TRY(cuop_expect_dim(op, yn, y, i, ids->shape[i], "the dims of ids"));
    return cuop_expect_dim(op, yn, y, ids->ndim, table->shape[1], "H, dim 1 of the table");
}

/* Queues the range check of the ids. */
mpx_status check_ids(const char *op, const mpx_tensor *ids, int64_t v, CuopCheck **chk) {
    const size_t n = (size_t)mpx_tensor_numel(ids);
    unsigned grid = 1;
    MPX_TRY(mpx_cuda_grid(n, &grid));
    MPX_TRY(cuop_check_begin(chk));
    ids_check<<<grid, kLaunchThreads>>>((const int32_t *)ids->data, n, v, *chk);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
        mpx_cuda_scratch_free(*chk);
        *chk = nullptr;
        return cuop_launch_fail(op, "ids check", ids, err);
    }
    return MPX_OK;
}

/* Hands the check to the backend's next wait (after the queued work, whose status is `st`). */
mpx_status finish(const char *op, mpx_status st, CuopCheck *chk, const mpx_tensor *ids,
                  const char *tn, int64_t v) {
    if (st != MPX_OK) {
        mpx_cuda_scratch_free(chk);
        return st;
    }
    char rule[160];
    snprintf(rule, sizeof rule, " is out of range: must be in [0, V = %lld), V the rows of %s",
             (long long)v, tn);
    return cuop_check_defer(chk, ids, op, "ids", rule);
}

size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

} // namespace

extern "C" mpx_status mpx_embedding_forward_cuda(const mpx_tensor *ids, const mpx_tensor *table,
                                                 mpx_tensor *y) {
    static const char *op = "embedding forward";
    MPX_TRY(emb_shapes(op, ids, "table", table, "y", y));
    const size_t n = (size_t)mpx_tensor_numel(ids), h = (size_t)table->shape[1];
    const int64_t v = table->shape[0];
    CuopCheck *chk = nullptr;
    MPX_TRY(check_ids(op, ids, v, &chk));
    unsigned grid = 1;
    mpx_status st = mpx_cuda_grid(n * h, &grid);
    if (st == MPX_OK) {
        gather<<<grid, kLaunchThreads>>>((const int32_t *)ids->data, n, v, h, table->data,
                                         table->dtype, y->data, y->dtype);
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) st = cuop_launch_fail(op, "gather", y, err);
    }
    return finish(op, st, chk, ids, "table", v);
}

extern "C" mpx_status mpx_embedding_backward_cuda(const mpx_tensor *dy, const mpx_tensor *ids,
                                                  mpx_tensor *dtable) {
    static const char *op = "embedding backward";
    MPX_TRY(emb_shapes(op, ids, "dtable", dtable, "dy", dy));
    const size_t n = (size_t)mpx_tensor_numel(ids), h = (size_t)dtable->shape[1];
    const int64_t v = dtable->shape[0];
    if (n > INT_MAX)
        return mpx_fail(MPX_ERR_INPUT, "%s: ids has %zu positions, more than the sort takes (%d)",
                        op, n, INT_MAX);
    CuopCheck *chk = nullptr;
    MPX_TRY(check_ids(op, ids, v, &chk));
    /* Scratch: sorted keys, positions in and out, CUB's temporary storage. */
    const uint32_t *keys_in = (const uint32_t *)ids->data; /* valid ids are >= 0 */
    size_t temp_bytes = 0;
    mpx_status st = MPX_OK;
    cudaError_t err = cub::DeviceRadixSort::SortPairs(
        nullptr, temp_bytes, keys_in, (uint32_t *)nullptr, (const uint32_t *)nullptr,
        (uint32_t *)nullptr, (int)n, 0, 32, 0);
    if (err != cudaSuccess) st = cuop_launch_fail(op, "radix sort (size query)", ids, err);
    const size_t arr = align256(n * sizeof(uint32_t));
    void *scratch = nullptr;
    if (st == MPX_OK) st = cuop_scratch(3 * arr + temp_bytes, &scratch);
    uint32_t *keys = (uint32_t *)scratch;
    uint32_t *pos_in = (uint32_t *)((char *)scratch + arr);
    uint32_t *pos = (uint32_t *)((char *)scratch + 2 * arr);
    void *temp = (char *)scratch + 3 * arr;
    unsigned grid = 1;
    if (st == MPX_OK) st = mpx_cuda_grid(n, &grid);
    if (st == MPX_OK) {
        err = cudaMemsetAsync(dtable->data, 0, mpx_tensor_bytes(dtable), 0);
        if (err != cudaSuccess)
            st = mpx_cuda_fail(err, __FILE__, __LINE__, "cudaMemsetAsync(dtable)");
    }
    if (st == MPX_OK) {
        iota<<<grid, kLaunchThreads>>>(pos_in, n);
        err = cudaGetLastError();
        if (err != cudaSuccess) st = cuop_launch_fail(op, "positions", ids, err);
    }
    if (st == MPX_OK) {
        err = cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys, pos_in, pos, (int)n,
                                              0, 32, 0);
        if (err != cudaSuccess) st = cuop_launch_fail(op, "radix sort", ids, err);
    }
    if (st == MPX_OK) {
        run_sums<<<cuop_row_grid((int64_t)n), kLaunchThreads>>>(
            keys, pos, n, v, h, dy->data, dy->dtype, dtable->data, dtable->dtype);
        err = cudaGetLastError();
        if (err != cudaSuccess) st = cuop_launch_fail(op, "row sums", dtable, err);
    }
    mpx_status freed = mpx_cuda_scratch_free(scratch);
    if (st == MPX_OK) st = freed;
    return finish(op, st, chk, ids, "dtable", v);
}
