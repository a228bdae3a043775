/* convert.c — bulk mpx_encode / mpx_decode and the run-time choice of vector implementation.
 *
 * Arrays are cut into fixed chunks shared out statically over the OpenMP threads when they are
 * large enough to pay for the fork; each chunk runs the best loop the CPU has (kernels.h).
 */
#include <string.h>

#include "lib/numerics/kernels.h"
#include "mpx/runtime.h"

enum {
    PAR_MIN = 1 << 16, /* below this many elements one thread is faster than forking */
    CHUNK = 1 << 14    /* elements per work item: a multiple of every vector width */
};

/* The best implementation allowed: MPX_IMPL_AVX512 means no cap. */
static mpx_impl g_cap = MPX_IMPL_AVX512;

void mpx_convert_force_portable(int on) { g_cap = on ? MPX_IMPL_C : MPX_IMPL_AVX512; }

static mpx_impl best_available(void) {
    const mpx_cpu_features *f = mpx_cpu();
    if (f->avx512f && f->avx512bw && f->f16c) return MPX_IMPL_AVX512;
    if (f->f16c && f->avx2) return MPX_IMPL_F16C;
    return MPX_IMPL_C;
}

int mpx_convert_limit(const char *impl) {
    mpx_impl want = MPX_IMPL_AVX512;
    if (impl && strcmp(impl, "c") == 0)
        want = MPX_IMPL_C;
    else if (impl && strcmp(impl, "f16c") == 0)
        want = MPX_IMPL_F16C;
    else if (impl && strcmp(impl, "avx512") != 0)
        return 0;
    g_cap = want;
    return best_available() >= want;
}

mpx_impl mpx_impl_current(void) {
    mpx_impl best = best_available();
    return best < g_cap ? best : g_cap;
}

int mpx_impl_avx2(void) { return mpx_cpu()->avx2 && mpx_impl_current() != MPX_IMPL_C; }

const char *mpx_convert_impl(void) {
    switch (mpx_impl_current()) {
    case MPX_IMPL_AVX512: return "avx512";
    case MPX_IMPL_F16C: return "f16c";
    default: return "c";
    }
}

const char *mpx_convert_impl_bf16(void) {
    switch (mpx_impl_current()) {
    case MPX_IMPL_AVX512: return "avx512";
    case MPX_IMPL_F16C: return "avx2";
    default: return "c";
    }
}

mpx_encode16_fn mpx_k_encoder16(mpx_dtype t, mpx_impl impl) {
    if (t == MPX_F16) {
        if (impl == MPX_IMPL_AVX512) return mpx_k_encode_f16_avx512;
        if (impl == MPX_IMPL_F16C) return mpx_k_encode_f16_f16c;
        return mpx_k_encode_f16_c;
    }
    if (impl == MPX_IMPL_AVX512) return mpx_k_encode_bf16_avx512;
    if (impl == MPX_IMPL_F16C) return mpx_k_encode_bf16_avx2;
    return mpx_k_encode_bf16_c;
}

mpx_decode16_fn mpx_k_decoder16(mpx_dtype t, mpx_impl impl) {
    if (t == MPX_F16) {
        if (impl == MPX_IMPL_AVX512) return mpx_k_decode_f16_avx512;
        if (impl == MPX_IMPL_F16C) return mpx_k_decode_f16_f16c;
        return mpx_k_decode_f16_c;
    }
    if (impl == MPX_IMPL_AVX512) return mpx_k_decode_bf16_avx512;
    if (impl == MPX_IMPL_F16C) return mpx_k_decode_bf16_avx2;
    return mpx_k_decode_bf16_c;
}

/* The stochastic-rounding loops' AVX2 tier: the F16C tier, whose CPUs have AVX2. */
static int sr_avx2(mpx_impl impl) { return impl == MPX_IMPL_F16C && mpx_cpu()->avx2; }

const char *mpx_stochastic_impl(void) {
    const mpx_impl impl = mpx_impl_current();
    return impl == MPX_IMPL_AVX512 ? "avx512" : sr_avx2(impl) ? "avx2" : "c";
}

void mpx_k_sr16(mpx_impl impl, mpx_dtype fmt, const float *src, float scale, const uint32_t *rnd,
                uint16_t *dst, size_t n) {
    if (impl == MPX_IMPL_AVX512)
        mpx_k_sr16_avx512(fmt, src, scale, rnd, dst, n);
    else if (sr_avx2(impl))
        mpx_k_sr16_avx2(fmt, src, scale, rnd, dst, n);
    else
        mpx_k_sr16_c(fmt, src, scale, rnd, dst, n);
}

void mpx_k_rand(mpx_impl impl, uint64_t seed, uint64_t stream, uint64_t counter, uint32_t *out,
                size_t n) {
    if (impl == MPX_IMPL_AVX512)
        mpx_k_rand_avx512(seed, stream, counter, out, n);
    else if (sr_avx2(impl))
        mpx_k_rand_avx2(seed, stream, counter, out, n);
    else
        mpx_k_rand_c(seed, stream, counter, out, n);
}

/* One chunk [i0, i0 + m) of an encode into dtype t. */
static void encode_chunk(mpx_dtype t, mpx_encode16_fn enc16, const float *src, void *dst, size_t i0,
                         size_t m) {
    switch (t) {
    case MPX_F16:
    case MPX_BF16: enc16(src + i0, 1.0f, (uint16_t *)dst + i0, m); break;
    case MPX_F8_E4M3:
        for (size_t i = i0; i < i0 + m; i++) ((uint8_t *)dst)[i] = mpx_f32_to_e4m3(src[i]);
        break;
    case MPX_F8_E5M2:
        for (size_t i = i0; i < i0 + m; i++) ((uint8_t *)dst)[i] = mpx_f32_to_e5m2(src[i]);
        break;
    case MPX_TF32:
        for (size_t i = i0; i < i0 + m; i++) ((float *)dst)[i] = mpx_round_tf32(src[i]);
        break;
    default: break;
    }
}

static void decode_chunk(mpx_dtype t, mpx_decode16_fn dec16, const void *src, float *dst, size_t i0,
                         size_t m) {
    switch (t) {
    case MPX_F16:
    case MPX_BF16: dec16((const uint16_t *)src + i0, dst + i0, m); break;
    case MPX_F8_E4M3:
        for (size_t i = i0; i < i0 + m; i++) dst[i] = mpx_e4m3_to_f32(((const uint8_t *)src)[i]);
        break;
    case MPX_F8_E5M2:
        for (size_t i = i0; i < i0 + m; i++) dst[i] = mpx_e5m2_to_f32(((const uint8_t *)src)[i]);
        break;
    case MPX_TF32: memmove(dst + i0, (const float *)src + i0, m * sizeof(float)); break;
    default: break;
    }
}

void mpx_encode16_block(mpx_dtype t, const float *src, uint16_t *dst, size_t n) {
    mpx_k_encoder16(t, mpx_impl_current())(src, 1.0f, dst, n);
}

void mpx_decode16_block(mpx_dtype t, const uint16_t *src, float *dst, size_t n) {
    mpx_k_decoder16(t, mpx_impl_current())(src, dst, n);
}

void mpx_encode(mpx_dtype dst_dtype, const float *src, void *dst, size_t n) {
    if (dst_dtype == MPX_F32) {
        if ((const void *)src != dst) memmove(dst, src, n * sizeof(float));
        return;
    }
    if (!mpx_format(dst_dtype)) return;
    mpx_encode16_fn enc16 = mpx_k_encoder16(dst_dtype, mpx_impl_current());
    const long nchunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (long c = 0; c < nchunks; c++) {
        size_t i0 = (size_t)c * CHUNK;
        encode_chunk(dst_dtype, enc16, src, dst, i0, n - i0 < CHUNK ? n - i0 : CHUNK);
    }
}

void mpx_decode(mpx_dtype src_dtype, const void *src, float *dst, size_t n) {
    if (src_dtype == MPX_F32) {
        if (src != (const void *)dst) memmove(dst, src, n * sizeof(float));
        return;
    }
    if (!mpx_format(src_dtype)) return;
    mpx_decode16_fn dec16 = mpx_k_decoder16(src_dtype, mpx_impl_current());
    const long nchunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (long c = 0; c < nchunks; c++) {
        size_t i0 = (size_t)c * CHUNK;
        decode_chunk(src_dtype, dec16, src, dst, i0, n - i0 < CHUNK ? n - i0 : CHUNK);
    }
}
