/* runtime.c — CPU feature detection, thread control, clocks, build facts. */
#include "mpx/runtime.h"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>

/* OpenBLAS extensions (declared in its cblas.h on Debian, repeated here for other builds). */
extern void openblas_set_num_threads(int num_threads);
extern char *openblas_get_config(void);
extern char *openblas_get_corename(void);

static mpx_cpu_features g_cpu;
static int g_cpu_done;
static int g_cpu_avx2_only;
static mpx_cpu_features g_host; /* what the CPU has, kept when mpx_cpu_limit hides features */

const mpx_cpu_features *mpx_cpu(void) {
    if (!g_cpu_done) {
        __builtin_cpu_init();
        g_cpu.avx2 = __builtin_cpu_supports("avx2");
        g_cpu.fma = __builtin_cpu_supports("fma");
        g_cpu.avx512f = __builtin_cpu_supports("avx512f");
        g_cpu.avx512bw = __builtin_cpu_supports("avx512bw");
        g_cpu.avx512vl = __builtin_cpu_supports("avx512vl");
        g_cpu.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
        /* gcc 12 has no "f16c"/"avx512fp16" names for __builtin_cpu_supports: ask cpuid. */
        unsigned a, b, c, d;
        __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
        g_cpu.f16c = (c >> 29) & 1;
        __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
        g_cpu.avx512_fp16 = (d >> 23) & 1;
        g_cpu_done = 1;
    }
    return &g_cpu;
}

mpx_status mpx_cpu_limit(const char *isa) {
    if (strcmp(isa, "native") == 0) {
        if (g_cpu_avx2_only)
            return mpx_fail(MPX_ERR_INPUT, "isa 'native': this process already runs the avx2 "
                                           "reference path");
        return MPX_OK;
    }
    if (strcmp(isa, "avx2") != 0)
        return mpx_fail(MPX_ERR_INPUT, "isa '%s': expected native or avx2", isa);
    mpx_cpu_features *f = (mpx_cpu_features *)mpx_cpu();
    if (!f->avx2 || !f->fma || !f->f16c)
        return mpx_fail(MPX_ERR_INPUT, "isa 'avx2': this CPU lacks AVX2, FMA or F16C");
    if (dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2) != dnnl_success &&
        dnnl_get_effective_cpu_isa() != dnnl_cpu_isa_avx2)
        return mpx_fail(MPX_ERR_INPUT, "isa 'avx2': oneDNN has already fixed its ISA (%s)",
                        mpx_dnnl_info());
    if (!g_cpu_avx2_only) g_host = *f;
    f->avx512f = f->avx512bw = f->avx512vl = f->avx512_bf16 = f->avx512_fp16 = 0;
    g_cpu_avx2_only = 1;
    return MPX_OK;
}

const char *mpx_cpu_limit_name(void) { return g_cpu_avx2_only ? "avx2" : "native"; }

const char *mpx_cpu_features_str(void) {
    static char buf[128];
    const mpx_cpu_features *f = g_cpu_avx2_only ? &g_host : mpx_cpu();
    snprintf(buf, sizeof buf, "%s%s%s%s%s%s%s", f->avx2 ? "avx2 " : "", f->fma ? "fma " : "",
             f->f16c ? "f16c " : "", f->avx512f ? "avx512f " : "", f->avx512bw ? "avx512bw " : "",
             f->avx512_bf16 ? "avx512_bf16 " : "", f->avx512_fp16 ? "avx512_fp16 " : "");
    size_t n = strlen(buf);
    if (n) buf[n - 1] = '\0';
    return buf;
}

const char *mpx_host_str(void) {
    static char buf[320];
    if (buf[0]) return buf;
    char name[160] = "unknown CPU", line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        const char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon) continue;
        snprintf(name, sizeof name, "%s", colon + 1 + (colon[1] == ' '));
        name[strcspn(name, "\n")] = '\0';
        break;
    }
    if (f) fclose(f);
    snprintf(buf, sizeof buf, "%s [%s]", name, mpx_cpu_features_str());
    return buf;
}

static int g_threads;

void mpx_threads_set(int n) {
    if (n <= 0) n = omp_get_num_procs();
    g_threads = n;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int mpx_threads_get(void) {
    if (!g_threads) mpx_threads_set(0);
    return g_threads;
}

void mpx_memcpy_parallel(void *dst, const void *src, size_t bytes) {
    enum { PIECE = 1 << 20, MIN_PAR = 4 << 20 };
    if (bytes < MIN_PAR) {
        memcpy(dst, src, bytes);
        return;
    }
    const long pieces = (long)((bytes + PIECE - 1) / PIECE);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < pieces; i++) {
        const size_t off = (size_t)i * PIECE, len = bytes - off < PIECE ? bytes - off : PIECE;
        memcpy((char *)dst + off, (const char *)src + off, len);
    }
}

double mpx_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t mpx_peak_rss(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024;
}

const char *mpx_version(void) { return MPX_VERSION; }
const char *mpx_source_dir(void) { return MPX_SOURCE_DIR; }

const char *mpx_blas_info(void) {
    static char buf[256];
    snprintf(buf, sizeof buf, "%s; kernel %s%s", openblas_get_config(), openblas_get_corename(),
             getenv("OPENBLAS_CORETYPE") ? " (forced by OPENBLAS_CORETYPE)" : "");
    return buf;
}

const char *mpx_blas_warning(void) {
    static const char *const vector[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake",
                                         "SapphireRapids"}; /* kernels with AVX2 or AVX-512 */
    static char buf[256];
    const char *core = openblas_get_corename();
    if (!mpx_cpu()->avx2 || !core) return NULL;
    for (size_t i = 0; i < sizeof vector / sizeof *vector; i++)
        if (strcasecmp(core, vector[i]) == 0) return NULL;
    snprintf(buf, sizeof buf,
             "OpenBLAS runs its %s kernel, without the AVX2 this CPU has (set OPENBLAS_CORETYPE="
             "Haswell, or SkylakeX with AVX-512); mpx's GEMMs run on oneDNN either way",
             core);
    return buf;
}

const char *mpx_dnnl_info(void) {
    static char buf[128];
    const dnnl_version_t *v = dnnl_version();
    const char *isa = "?";
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: isa = "sse41"; break;
    case dnnl_cpu_isa_avx: isa = "avx"; break;
    case dnnl_cpu_isa_avx2: isa = "avx2"; break;
    case dnnl_cpu_isa_avx512_core: isa = "avx512_core"; break;
    case dnnl_cpu_isa_avx512_core_vnni: isa = "avx512_core_vnni"; break;
    case dnnl_cpu_isa_avx512_core_bf16: isa = "avx512_core_bf16"; break;
    case dnnl_cpu_isa_avx512_core_amx: isa = "avx512_core_amx"; break;
    default: break;
    }
    snprintf(buf, sizeof buf, "oneDNN %d.%d.%d (isa %s)", v->major, v->minor, v->patch, isa);
    return buf;
}
