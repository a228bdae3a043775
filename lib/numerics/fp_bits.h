/* fp_bits.h — the bit-level rounding rules shared by the C library and the CUDA kernels.
 *
 * Private to lib/numerics and lib/cuda. One generic routine rounds the magnitude of an FP32
 * value to a narrower binary format (m mantissa bits, exponent bias b) under round-to-nearest-even
 * or stochastic rounding, working on integer bits only, so the CPU and the GPU produce the same
 * bits. Formats are described by small constant tables; the compiler folds the constants when a
 * caller names the format, which makes the scalar conversions as fast as hand-written ones.
 */
#ifndef MPX_FP_BITS_H
#define MPX_FP_BITS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define MPX_HD __host__ __device__ __forceinline__
#else
#define MPX_HD static inline
#endif

/* Magnitude codes (sign bit cleared) of one format. */
typedef struct {
    int man_bits;      /* stored mantissa bits */
    int bias;          /* exponent bias */
    uint32_t max_code; /* largest finite magnitude code */
    uint32_t inf_code; /* code of +Inf; 0 when the format has none (it saturates) */
    uint32_t nan_code; /* the quiet NaN produced for NaN input (payload added separately) */
    uint32_t sign_bit; /* sign bit of the code */
} mpx_fp_fmt;

/* (Functions rather than compound literals, which C++/CUDA lack.) */
MPX_HD mpx_fp_fmt mpx_fp_fmt_make(int man, int bias, uint32_t max, uint32_t inf, uint32_t nan,
                                  uint32_t sign) {
    mpx_fp_fmt f = {man, bias, max, inf, nan, sign};
    return f;
}
#define MPX_FP_F16 mpx_fp_fmt_make(10, 15, 0x7bffu, 0x7c00u, 0x7e00u, 0x8000u)
#define MPX_FP_BF16 mpx_fp_fmt_make(7, 127, 0x7f7fu, 0x7f80u, 0x7fc0u, 0x8000u)
#define MPX_FP_E4M3 mpx_fp_fmt_make(3, 7, 0x7eu, 0u, 0x7fu, 0x80u)
#define MPX_FP_E5M2 mpx_fp_fmt_make(2, 15, 0x7bu, 0x7cu, 0x7eu, 0x80u)
/* TF32: FP32's exponent, 10 mantissa bits; codes of 19 bits (decoded, they are FP32 values). */
#define MPX_FP_TF32 mpx_fp_fmt_make(10, 127, 0x3fbffu, 0x3fc00u, 0x3fe00u, 0x40000u)

MPX_HD uint32_t mpx_fp_bits(float x) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

MPX_HD float mpx_fp_float(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

/* Round the finite magnitude a (FP32 bits, sign cleared) to the format with `man` mantissa bits
 * and exponent bias `bias`, as if its exponent range had no upper end; returns the magnitude
 * code, which may exceed the format's largest finite code (the caller decides: Inf or saturate).
 * stochastic = 0: round to nearest, ties to even. stochastic = 1: round up with probability equal
 * to the discarded fraction, decided by the 32 random bits r (exact for up to 32 discarded bits;
 * below that the probability is truncated to 32 bits, a bias under 2^-32 of one code step). */
MPX_HD uint32_t mpx_fp_round_mag(uint32_t a, int man, int bias, int stochastic, uint32_t r) {
    const int e = (int)(a >> 23); /* FP32 biased exponent, 0..254 */
    const int e_min = 128 - bias; /* FP32 biased exponent of the format's smallest normal */
    const int normal = e >= e_min;
    /* Normal in the target: rebias the exponent (the rounding carry may ripple into it).
     * Subnormal: the full significand, in units of the FP32 ulp at e, shifted further right.
     * Written as selections so that the compiler need not branch on data. */
    const uint32_t v =
        normal ? a - ((uint32_t)(127 - bias) << 23) : (a & 0x7fffffu) | (e ? 0x800000u : 0u);
    const int shift = normal ? 23 - man : 23 - man + e_min - (e ? e : 1);
    if (stochastic) {
        if (shift >= 32) {
            /* v < 2^24: rounds up (to the smallest subnormal) with probability v / 2^shift. */
            uint32_t frac32 = shift - 32 < 32 ? v >> (shift - 32) : 0u;
            return r < frac32 ? 1u : 0u;
        }
        uint32_t low = v & ((1u << shift) - 1u);
        return (v >> shift) + (r < (low << (32 - shift)) ? 1u : 0u);
    }
    /* RNE: adding half - 1 carries exactly when the discarded part exceeds half, and the kept
     * part's lowest bit tips an exact half up when it is odd. A shift beyond 24 only occurs for
     * v < 2^24 <= half, which rounds to 0 with any shift from 25 to 31: clamp it to 31. No
     * overflow: v is below 2^31 and half at most 2^30. */
    const int sh = shift < 31 ? shift : 31;
    return (v + ((1u << (sh - 1)) - 1u) + ((v >> sh) & 1u)) >> sh;
}

/* FP32 -> format code. *overflowed (may be NULL) is set to 1 when a finite x rounded beyond the
 * largest finite value (to Inf, or clamped to max when the format has no Inf). NaN -> quiet NaN
 * keeping the sign and the top payload bits; Inf -> Inf, or NaN when the format has none. */
MPX_HD uint32_t mpx_fp_encode(mpx_fp_fmt f, float x, int stochastic, uint32_t r, int *overflowed) {
    uint32_t u = mpx_fp_bits(x);
    uint32_t sign = (u >> 31) ? f.sign_bit : 0u;
    uint32_t a = u & 0x7fffffffu;
    if (overflowed) *overflowed = 0;
    if (a > 0x7f800000u) {
        /* The top payload bits survive where the format has room (E4M3 has one NaN only). */
        uint32_t payload = f.inf_code ? (a >> (23 - f.man_bits)) & ((1u << f.man_bits) - 1u) : 0u;
        return sign | f.nan_code | payload;
    }
    if (a == 0x7f800000u) return sign | (f.inf_code ? f.inf_code : f.nan_code);
    uint32_t q = mpx_fp_round_mag(a, f.man_bits, f.bias, stochastic, r);
    if (q > f.max_code) {
        if (overflowed) *overflowed = 1;
        q = f.inf_code ? f.inf_code : f.max_code;
    }
    return sign | q;
}

/* x's FP32 bits rounded to TF32 under RNE: the bits of mpx_fp_decode(MPX_FP_TF32,
 * mpx_fp_encode(MPX_FP_TF32, x, 0, 0, 0)), without branches so that loops vectorise. TF32 shares
 * FP32's exponent field and subnormal encoding, so RNE to 10 mantissa bits is rounding the
 * encoding at bit 13: the carry walks into the exponent as it should, up to Inf for magnitudes
 * from halfway past the largest TF32 value, and never into the sign. A NaN is quieted and keeps
 * its sign and top 10 payload bits, as the generic rule does. */
MPX_HD uint32_t mpx_fp_tf32_rne_bits(uint32_t u) {
    const uint32_t rounded = (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u;
    const uint32_t nan = (u & 0x807fe000u) | 0x7fc00000u;
    return (u & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
}

/* Format code -> FP32 (exact: every value of these formats is an FP32 value). NaN codes decode
 * to a quiet NaN with the sign and payload kept. */
MPX_HD float mpx_fp_decode(mpx_fp_fmt f, uint32_t c) {
    uint32_t sign = (c & f.sign_bit) ? 0x80000000u : 0u;
    uint32_t mag = c & (f.sign_bit - 1u);
    uint32_t man_mask = (1u << f.man_bits) - 1u;
    uint32_t e = mag >> f.man_bits, m = mag & man_mask;
    uint32_t e_all = (f.sign_bit - 1u) >> f.man_bits; /* the all-ones exponent */
    if (f.inf_code ? e == e_all : mag == f.nan_code) {
        if (m == 0) return mpx_fp_float(sign | 0x7f800000u);
        return mpx_fp_float(sign | 0x7fc00000u | (m << (23 - f.man_bits)));
    }
    if (e == 0) {
        if (m == 0) return mpx_fp_float(sign);
        /* BF16 shares FP32's exponent range: its subnormals are FP32 subnormals. */
        if (f.bias >= 127) return mpx_fp_float(sign | (m << (23 - f.man_bits)));
        /* Subnormal: m * 2^(1 - bias - man); normalise into an FP32 normal. */
        int sh = 0;
        while (!(m & (1u << f.man_bits))) {
            m <<= 1;
            sh++;
        }
        uint32_t fe = (uint32_t)(127 + 1 - f.bias - sh);
        return mpx_fp_float(sign | (fe << 23) | ((m & man_mask) << (23 - f.man_bits)));
    }
    return mpx_fp_float(sign | ((e + 127u - (uint32_t)f.bias) << 23) | (m << (23 - f.man_bits)));
}

/* Histogram bin of an FP32 value from its bits (docs/design.md §5): binade k = floor(log2|x|) maps to
 * bin k + 64 clamped into [0, 79] (FP32 subnormals land in bin 0); then zero, Inf, NaN. */
MPX_HD int mpx_fp_hist_bin(uint32_t u) {
    uint32_t a = u & 0x7fffffffu;
    if (a == 0) return 80;
    if (a >= 0x7f800000u) return a == 0x7f800000u ? 81 : 82;
    int b = (int)(a >> 23) - 63;
    return b < 0 ? 0 : (b > 79 ? 79 : b);
}

/* The shared exponent e of an MX block (fp8.h) whose largest |x| is amax, for elements whose
 * largest value is max: floor rule e = floor(log2 amax) - floor(log2 max) (the OCP spec's), or
 * the round-up rule e = ceil(log2(amax / max)); clamped to E8M0's [-127, 127]; -127 for an
 * all-zero block, `nan_exp` for a non-finite amax. frexp and ldexp are exact in double. */
MPX_HD int mpx_fp_mx_exponent(double max, int round_up, float amax, int nan_exp) {
    if (!(fabsf(amax) < INFINITY)) return nan_exp;
    if (!(amax > 0)) return -127;
    int e, em;
    if (!round_up) {
        frexp((double)amax, &e);
        frexp(max, &em);
        e -= em; /* (e - 1) - (em - 1) */
    } else {
        const double r = (double)amax / max; /* exact enough: only its binade */
        frexp(r, &e);
        e -= 1;                     /* floor(log2 r) */
        if (ldexp(1.0, e) < r) e++; /* ceil(log2 r) */
    }
    return e < -127 ? -127 : e > 127 ? 127 : e;
}

/* The Q(16, frac) code of x (fixed.h): x * 2^frac rounded to an integer (to nearest even, or
 * up with probability equal to the discarded fraction against the random word r), saturated
 * to the int16 range; NaN -> 0. *saturated (may be NULL) = 1 when a finite x or +-Inf left the
 * range. */
MPX_HD int32_t mpx_fp_q16(float x, int frac, int stochastic, uint32_t r, int *saturated) {
    int sat = 0;
    int32_t q;
    if (isnan(x)) {
        q = 0;
    } else {
        const float v = x * ldexpf(1.0f, frac); /* exact: a power of two (Inf past FP32's range) */
        const float a = fabsf(v);
        float m; /* |v| rounded to an integer */
        if (!(a < 0x1p23f)) {
            m = a; /* already an integer (or Inf): saturates below */
        } else if (stochastic) {
            const float lo = floorf(a);
            const double up = floor(0x1p32 * (double)(a - lo)); /* a - lo is exact */
            m = lo + ((double)r < up ? 1.0f : 0.0f);
        } else {
            m = rintf(a); /* to nearest even */
        }
        const float s = copysignf(m, v);
        if (s > 32767.0f) {
            q = 32767;
            sat = 1;
        } else if (s < -32768.0f) {
            q = -32768;
            sat = 1;
        } else {
            q = (int32_t)s;
        }
    }
    if (saturated) *saturated = sat;
    return q;
}

#endif
