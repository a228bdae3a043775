/* runtime.h — CPU features, threads, clocks and build information.
 *
 * One place decides the thread count for our OpenMP loops, OpenBLAS and oneDNN (they share
 * the OpenMP pool), and reports what the build and the machine provide (`mpx info`).
 */
#ifndef MPX_RUNTIME_H
#define MPX_RUNTIME_H

#include <stddef.h>

#include "mpx/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512_bf16, avx512_fp16;
} mpx_cpu_features;

const mpx_cpu_features *mpx_cpu(void);
/* "avx512f f16c fma avx2" — the features our kernels use that this CPU has (all of them, also
 * under mpx_cpu_limit, which hides some from mpx_cpu()). */
const char *mpx_cpu_features_str(void);
/* The host kind, for run files and benchmarks: the CPU's model name and its features, e.g.
 * "AMD EPYC [avx2 fma f16c avx512f avx512bw avx512_bf16]" (machines of one model name differ in
 * their vector units). */
const char *mpx_host_str(void);

/* The reference path: "avx2" hides every feature above AVX2, FMA and F16C from our kernels
 * and caps oneDNN at its AVX2 kernels, the vector units every host kind here has, so that a
 * config and seed give the same bits on each of them; "native" (the default) uses what the CPU
 * has. Call it before the first oneDNN primitive or kernel dispatch; MPX_ERR_INPUT when the CPU
 * lacks AVX2 or oneDNN has already fixed its ISA. */
mpx_status mpx_cpu_limit(const char *isa);
/* "native" or "avx2": the limit in force (run files record it). */
const char *mpx_cpu_limit_name(void);

/* Threads for OpenMP loops, OpenBLAS and oneDNN; n <= 0 means all cores. */
void mpx_threads_set(int n);
int mpx_threads_get(void);

/* memcpy of large blocks on the OpenMP threads (one thread below 4 MiB): a batch copied into
 * pinned memory for a device upload (ImageNet batch 256: 154 MB) is memory-bound, and one core
 * reaches a fraction of the machine's bandwidth. */
void mpx_memcpy_parallel(void *dst, const void *src, size_t bytes);

/* Monotonic wall clock in seconds. */
double mpx_now(void);
/* Peak resident set size of this process in bytes (0 when unknown). */
size_t mpx_peak_rss(void);

/* Build facts. */
const char *mpx_version(void);
/* The commit the library was built from, "+dirty" when tracked files differed from it
 * (generated at build time by cmake/git_commit.cmake). */
const char *mpx_git_commit(void);
/* "OpenBLAS 0.3.21 ... USE_OPENMP; kernel SkylakeX" — with the kernel OpenBLAS chose at run
 * time. */
const char *mpx_blas_info(void);
/* NULL, or a sentence when OpenBLAS runs a kernel without the AVX2 this CPU has (a CPU its
 * release does not know gets a generic SSE kernel, several times slower). */
const char *mpx_blas_warning(void);
/* "oneDNN 2.6.3 (cpu runtime OMP, isa avx512_core)". */
const char *mpx_dnnl_info(void);
/* Source tree path compiled in (for data/ and configs when run from the build folder). */
const char *mpx_source_dir(void);

#ifdef __cplusplus
}
#endif

#endif
