/* test_direct_io_cuda.c — the CUDA backend with direct 16-bit I/O (backend.h: direct_io) trains
 * exactly as with the executor's FP32 views: the same few steps of a ResNet (max-pool stem),
 * a BERT layer and an SSD (train_trace.h), once with precision.direct_io = false (16-bit storage
 * decoded into FP32 scratch, results rounded back by the executor) and once with it on (the
 * operators take 16-bit tensors and mixed dtypes: F16 dy with F32 dx, F16 x with F32 bias...),
 * must give the same bits in every loss, non-finite count, gradient norm, statistics row and
 * final weight.
 *
 * Why exactly: the kernels load 16-bit values exactly and round their FP32 results once to
 * nearest, which is what the executor's decode and cast do. The convolutions and GEMMs run with
 * precision.tensor_cores = false here, so both runs use FP32 FMA math on the same FP32 values
 * (with tensor cores, 16-bit operands would meet 16-bit tensor cores and F32 views TF32 ones:
 * exact products both, but FP32 sums in another order). fp16 with adaptive and dynamic scaling,
 * bf16, stochastic rounding (the executor keeps the value commit), the 2019 reference ALS and
 * training without master weights. On the direct path the
 * operators also write the gradients of non-statistics steps into 16-bit storage, and the
 * conv/linear backward-data passes apply the layers' adaptive factors themselves (cuDNN's and
 * cuBLAS's alpha; train_trace.h picks a u_min that gives factors above 1). Skipped (77) without
 * a device.
 */
#include <stdio.h>
#include <string.h>

#include "mpx/cuda.h"
#include "train_trace.h"

int main(void) {
    if (mpx_cuda_device_count() == 0) {
        printf("no CUDA device (%s): skipped\n", mpx_cuda_last_error());
        return MPX_TEST_SKIP;
    }
    printf("device: %s\n", mpx_cuda_device_name(0));
    const mpx_backend *gpu = mpx_backend_cuda();
    static const variant vs[] = {
        {"resnet", "fp16", "adaptive", "rne", 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "bf16", "dynamic", "rne", 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "fp16", "dynamic", "stochastic", 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
        {"bert", "fp16", "adaptive", "rne", 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
        {"ssd", "fp16", "adaptive", "rne", 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
        {"resnet", "fp16", "adaptive", "rne", 0, 1, 0, 0, 0, 0, 0, 0, 1, 0},
        {"resnet", "fp16", "dynamic", "rne", 0, 1, 0, 0, 0, 0, 0, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) {
        variant decoded = vs[i];
        decoded.decoded = 1;
        trace a, b;
        run(&decoded, gpu, &a);
        run(&vs[i], gpu, &b);
        char what[96];
        snprintf(what, sizeof what, "cuda %s %s %s %s", vs[i].model, vs[i].mode, vs[i].scaling,
                 vs[i].rounding);
        printf("%s: loss %.6f -> %.6f\n", what, (double)b.loss[0], (double)b.loss[STEPS - 1]);
        compare_traces(what, &a, &b);
        trace_free(&a);
        trace_free(&b);
    }
    CHECK(mpx_backend_cuda_error() == MPX_OK, "the CUDA backend reported %s",
          mpx_error_message());
    /* Leaves nothing behind for compute-sanitizer's leak check. */
    CHECK(mpx_cuda_release() == MPX_OK, "mpx_cuda_release: %s", mpx_error_message());
    return mpx_test_done(__FILE__);
}
