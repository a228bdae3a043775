/* ops_cuda_util.h — what the CUDA operator tests (test_ops_cuda*.c) share: device tensors in a
 * storage dtype made from host values, read-back, and the comparisons against the CPU backend.
 *
 * Header-only (static functions): every .c file in tests/cuda is a test of its own.
 *
 * How a comparison works. Host inputs are FP32 values rounded through their storage dtype, so
 * the CPU op (FP32 only) and the CUDA op (the stored F16/BF16 bits) see the same numbers. The
 * CPU result is then rounded into the output's storage dtype, as the executor does when it
 * commits an FP32 result into F16/BF16 storage, and compared with the GPU's output:
 *  - check_exact: the same bits (any NaN matching any NaN) — for ops the GPU computes with the
 *    CPU's FP32 operations in the CPU's order;
 *  - check_close: |gpu - cpu| <= rel * mag + abs + ulp(dt) |cpu| + min(dt), mag a per-element
 *    magnitude (|cpu| by default). rel/abs bound the FP32 difference between the two backends
 *    (each op states why); ulp(dt) |cpu| + min(dt) is one unit in the last place of the output
 *    format, 2^-10 relative for F16 and 2^-7 for BF16 (plus F16's subnormal spacing 2^-24):
 *    two values that differ by e before rounding differ by at most e + 1 ulp after each is
 *    rounded to nearest once.
 */
#ifndef MPX_TEST_OPS_CUDA_UTIL_H
#define MPX_TEST_OPS_CUDA_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/backend.h"
#include "mpx/cuda.h"
#include "mpx/numerics.h"
#include "testutil.h"

static const mpx_backend *cpu __attribute__((unused)), *gpu;

/* The storage dtypes every op is tested in. */
__attribute__((unused)) static const mpx_dtype STORAGE[] = {MPX_F32, MPX_F16, MPX_BF16};
__attribute__((unused)) static int n_storage = 3;

static inline void *xalloc(size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}
static inline float *hbuf(size_t n) { return xalloc(n * sizeof(float)); }

static inline size_t numel_of(int ndim, const int64_t *shape) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)shape[i];
    return n;
}

/* x[i] = the nearest value of dt (RNE), in place. */
static inline void round_through(mpx_dtype dt, float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = mpx_round_to(dt, x[i]);
}

/* Uniform in [lo, hi), representable in dt. */
static inline float *rand_in(mpx_dtype dt, size_t n, float lo, float hi, uint64_t seed) {
    float *x = hbuf(n);
    mpx_test_uniform(x, n, lo, hi, seed);
    round_through(dt, x, n);
    return x;
}

/* The format test data of a tensor stored as `storage` are rounded to: its own, or for F32
 * storage the 16-bit format the data are declared exact in (mpx_cuda_set_operand_format; F32
 * when none is). */
static inline mpx_dtype data_format(mpx_dtype storage, mpx_dtype declared) {
    return storage == MPX_F32 ? declared : storage;
}

static inline float *abs_copy(const float *x, size_t n) {
    float *y = hbuf(n);
    for (size_t i = 0; i < n; i++)
        y[i] = fabsf(x[i]);
    return y;
}

static inline mpx_tensor view(mpx_dtype dt, mpx_device dev, int ndim, const int64_t *shape,
                              void *data) {
    mpx_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.device = dev;
    t.ndim = ndim;
    memcpy(t.shape, shape, (size_t)ndim * sizeof *shape);
    t.data = data;
    return t;
}

/* An F32 CPU tensor over host data. */
static inline mpx_tensor host_t(int ndim, const int64_t *shape, float *data) {
    return view(MPX_F32, MPX_DEV_CPU, ndim, shape, data);
}

/* A device tensor of dtype dt holding `values` (encoded; NULL: poisoned with all-ones bytes, a
 * NaN in every float format, so an element the op fails to write shows up). */
static inline mpx_tensor dev_tensor(mpx_dtype dt, int ndim, const int64_t *shape,
                                    const float *values) {
    const size_t n = numel_of(ndim, shape), bytes = n * mpx_dtype_size(dt);
    void *raw = xalloc(bytes);
    if (values)
        mpx_encode(dt, values, raw, n);
    else
        memset(raw, 0xff, bytes);
    void *d = gpu->alloc(gpu, bytes);
    if (!d) {
        fprintf(stderr, "device allocation of %zu bytes failed\n", bytes);
        exit(1);
    }
    gpu->upload(gpu, d, raw, bytes);
    free(raw);
    return view(dt, gpu->device, ndim, shape, d);
}

static inline mpx_tensor dev_i32(int ndim, const int64_t *shape, const int32_t *values) {
    const size_t bytes = numel_of(ndim, shape) * sizeof(int32_t);
    void *d = gpu->alloc(gpu, bytes);
    if (!d) {
        fprintf(stderr, "device allocation of %zu bytes failed\n", bytes);
        exit(1);
    }
    gpu->upload(gpu, d, values, bytes);
    return view(MPX_I32, gpu->device, ndim, shape, d);
}

/* Poison an output again before the next call. */
static inline void dev_poison(mpx_tensor *t) {
    const size_t bytes = mpx_tensor_bytes(t);
    void *raw = xalloc(bytes);
    memset(raw, 0xff, bytes);
    gpu->upload(gpu, t->data, raw, bytes);
    free(raw);
}

/* The tensor's values, decoded to FP32 (waits for the device). */
static inline float *dev_read(const mpx_tensor *t) {
    const size_t n = (size_t)mpx_tensor_numel(t), bytes = mpx_tensor_bytes(t);
    void *raw = xalloc(bytes);
    gpu->download(gpu, raw, t->data, bytes);
    float *out = hbuf(n);
    mpx_decode(t->dtype, raw, out, n);
    free(raw);
    return out;
}

static inline void dev_free(mpx_tensor *t) {
    if (t->data) gpu->free(gpu, t->data);
    t->data = NULL;
}

static inline double out_ulp(mpx_dtype dt) {
    return dt == MPX_F16 ? ldexp(1.0, -10) : dt == MPX_BF16 ? ldexp(1.0, -7) : 0.0;
}
static inline double out_min(mpx_dtype dt) {
    return dt == MPX_F16 ? ldexp(1.0, -24) : dt == MPX_BF16 ? ldexp(1.0, -133) : 0.0;
}

static inline uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* got (decoded GPU output) against the CPU's FP32 result `cpu_ref` rounded into dt. */
static inline void check_close(const char *what, mpx_dtype dt, const float *got,
                               const float *cpu_ref, const float *mag, size_t n, double rel,
                               double abs_tol) {
    size_t bad = 0, first = n;
    double first_tol = 0;
    for (size_t i = 0; i < n; i++) {
        const double ref = mpx_round_to(dt, cpu_ref[i]);
        const double m = mag ? fabs((double)mag[i]) : fabs(ref);
        const double tol = rel * m + abs_tol + out_ulp(dt) * fabs(ref) + out_min(dt);
        if (!(fabs((double)got[i] - ref) <= tol) && !(isnan(got[i]) && isnan(ref))) {
            if (!bad) first = i, first_tol = tol;
            bad++;
        }
    }
    CHECK(bad == 0,
          "%s [%s]: %zu of %zu elements outside the tolerance; first [%zu]: gpu %.9g cpu %.9g (tol "
          "%.3g)",
          what, mpx_dtype_name(dt), bad, n, first, first < n ? (double)got[first] : 0.0,
          first < n ? (double)mpx_round_to(dt, cpu_ref[first]) : 0.0, first_tol);
}

/* The same bits as the CPU's result rounded into dt (any NaN matches any NaN). */
static inline void check_exact(const char *what, mpx_dtype dt, const float *got,
                               const float *cpu_ref, size_t n) {
    size_t bad = 0, first = n;
    for (size_t i = 0; i < n; i++) {
        const float ref = mpx_round_to(dt, cpu_ref[i]);
        if (bits_of(got[i]) != bits_of(ref) && !(isnan(got[i]) && isnan(ref))) {
            if (!bad) first = i;
            bad++;
        }
    }
    CHECK(bad == 0,
          "%s [%s]: %zu of %zu elements differ from the CPU; first [%zu]: gpu %.9g (%08x) cpu %.9g "
          "(%08x)",
          what, mpx_dtype_name(dt), bad, n, first, first < n ? (double)got[first] : 0.0,
          first < n ? bits_of(got[first]) : 0u,
          first < n ? (double)mpx_round_to(dt, cpu_ref[first]) : 0.0,
          first < n ? bits_of(mpx_round_to(dt, cpu_ref[first])) : 0u);
}

/* Setup shared by every test's main(): 1 when a device is there, else the skip message. */
static inline int ops_test_setup(void) {
    if (mpx_cuda_device_count() == 0) {
        printf("no CUDA device (%s): skipped\n", mpx_cuda_last_error());
        return 0;
    }
    cpu = mpx_backend_cpu();
    gpu = mpx_backend_cuda();
    printf("device: %s\n", mpx_cuda_device_name(0));
    return 1;
}

/* After each group: the GPU ran everything it was given without a sticky error. */
/* What an operator with a device-side index check (labels, ids, a mask) reports: its own
 * failure, else the check's, which the backend reads at its next wait (ops.cuh:
 * cuop_check_defer) and reports as its last error. */
static inline mpx_status after_wait(mpx_status st) {
    if (st != MPX_OK) return st;
    gpu->sync(gpu);
    return gpu->last_error(gpu);
}

static inline void check_device_clean(const char *what) {
    mpx_status st = mpx_backend_cuda_error();
    CHECK(st == MPX_OK, "%s: the CUDA backend reported %s: %s", what, mpx_status_name(st),
          mpx_error_message());
}

#endif
