/* tensor.h — dtypes, devices and the tensor descriptor.
 *
 * A tensor is a view: dtype, device, up to 4 dims and a data pointer into an arena owned
 * by someone else (a graph's memory plan). Images are NHWC, sequences [B, T, C]; shape[0]
 * is the outermost dimension and the last dimension is contiguous.
 */
#ifndef MPX_TENSOR_H
#define MPX_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MPX_F32 = 0,
    MPX_F16,       /* IEEE binary16 */
    MPX_BF16,      /* bfloat16 */
    MPX_F8_E4M3,   /* OCP FP8 E4M3 (max 448, no inf) — emulated storage */
    MPX_F8_E5M2,   /* OCP FP8 E5M2 (max 57344) — emulated storage */
    MPX_I32,       /* labels, indices */
    MPX_U8,        /* raw pixels, masks */
    MPX_TF32,      /* TF32 values (FP32's 8-bit exponent, a 10-bit mantissa) held in FP32: what
                      tensor cores read of FP32 operands; a rounding target (4 bytes) */
    MPX_DTYPE_COUNT
} mpx_dtype;

typedef enum { MPX_DEV_CPU = 0, MPX_DEV_CUDA } mpx_device;

enum { MPX_MAX_DIMS = 4 };

typedef struct {
    mpx_dtype dtype;
    mpx_device device;
    int ndim;
    int64_t shape[MPX_MAX_DIMS];
    void *data;
} mpx_tensor;

size_t mpx_dtype_size(mpx_dtype t);
const char *mpx_dtype_name(mpx_dtype t);
/* Parses "f32", "f16", "bf16", "f8_e4m3", "f8_e5m2", "i32", "u8", "tf32"; -1 when unknown. */
int mpx_dtype_parse(const char *name);
/* True for the floating formats stored in fewer than 32 bits. */
int mpx_dtype_is_low_precision(mpx_dtype t);

int64_t mpx_shape_numel(int ndim, const int64_t *shape);
int64_t mpx_tensor_numel(const mpx_tensor *t);
size_t mpx_tensor_bytes(const mpx_tensor *t);
/* "[8,32,32,3]" into buf; returns buf. */
const char *mpx_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
