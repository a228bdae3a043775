/* staging.cu — host-to-device uploads through pinned staging buffers, queued instead of waited
 * for.
 *
 * cudaMemcpy from the caller's pageable memory returns only once the copy is done, behind all
 * queued work, so each batch upload made the host wait for the device (2 to 5 inputs per
 * training step). Here the bytes are copied on the host into a pinned buffer (on the OpenMP
 * threads for large batches; the caller may reuse its memory at once) and cudaMemcpyAsync from
 * it is queued on the legacy default stream, where every lib/cuda kernel, cuBLAS and cuDNN call
 * runs, so the copy keeps its place among them.
 *
 * A buffer can be refilled once its copy is done. Every wait the backend counts (backend.h:
 * host_waits) is a synchronous call that drains that stream — a download, a reduction that
 * returns a value, a device synchronisation — so a buffer whose copy was queued before the last
 * counted wait has been read; that needs no query or event, and the count stays a property of
 * the call sequence, not of timing. A training step ends with the status download, so its
 * uploads find every buffer free. Within one step each further input takes another buffer (up
 * to kSlots); only beyond that does the host drain the stream (a counted wait). Buffers grow to
 * the largest upload they carried and live until mpx_cuda_release.
 *
 * One host thread drives the backend (as everywhere in lib/cuda); the mutex only keeps two
 * threads that break that rule from sharing a buffer.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include <mutex>

#include "lib/cuda/check.cuh"
#include "lib/cuda/ops.cuh"
#include "mpx/cuda.h"
#include "mpx/runtime.h"

namespace {

constexpr int kSlots = 8;

struct Slot {
    void *host = nullptr; /* pinned */
    size_t cap = 0;
    int64_t waits_at_copy = -1; /* the wait count when the copy was queued; -1: never used */
};

std::mutex g_mutex;
Slot g_slots[kSlots];

/* Whether the slot's last copy has certainly been read: none yet, or a counted wait since. */
bool slot_free(const Slot &s) {
    return s.waits_at_copy < 0 || mpx_cuda_host_waits() > s.waits_at_copy;
}

/* The slot to fill with `bytes`: the smallest free one that is large enough, else the largest
 * free one (grown). When every buffer is in flight the host drains the stream first (a counted
 * wait: the whole stream, not one copy, so that slot_free stays true of every slot), which frees
 * them all. */
mpx_status pick_slot(size_t bytes, Slot **out) {
    Slot *fit = nullptr, *largest = nullptr;
    for (int drained = 0; !largest; drained = 1) {
        if (drained) {
            mpx_cuda_count_wait();
            MPX_CUDA_TRY(cudaStreamSynchronize(0));
        }
        for (Slot &s : g_slots)
            if (slot_free(s)) {
                if (s.cap >= bytes && (!fit || s.cap < fit->cap)) fit = &s;
                if (!largest || s.cap > largest->cap) largest = &s;
            }
    }
    Slot *s = fit ? fit : largest;
    if (s->cap < bytes) {
        if (s->host) MPX_CUDA_TRY(cudaFreeHost(s->host));
        s->host = nullptr;
        s->cap = 0;
        MPX_CUDA_TRY(cudaHostAlloc(&s->host, bytes, cudaHostAllocDefault));
        s->cap = bytes;
    }
    *out = s;
    return MPX_OK;
}

} // namespace

mpx_status cuop_upload(void *dst, const void *host, size_t bytes) {
    if (bytes == 0) return MPX_OK;
    std::lock_guard<std::mutex> lock(g_mutex);
    Slot *s = nullptr;
    MPX_TRY(pick_slot(bytes, &s));
    mpx_memcpy_parallel(s->host, host, bytes);
    MPX_CUDA_TRY(cudaMemcpyAsync(dst, s->host, bytes, cudaMemcpyHostToDevice, 0));
    s->waits_at_copy = mpx_cuda_host_waits();
    return MPX_OK;
}

mpx_status cuop_staging_release(void) {
    std::lock_guard<std::mutex> lock(g_mutex);
    mpx_status st = MPX_OK;
    for (Slot &s : g_slots) {
        cudaError_t err = s.host ? cudaFreeHost(s.host) : cudaSuccess;
        if (st == MPX_OK && err != cudaSuccess)
            st = mpx_cuda_fail(err, __FILE__, __LINE__, "cudaFreeHost");
        s = Slot();
    }
    return st;
}
