/* tensor.c — dtype tables and shape helpers. */
#include "mpx/tensor.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
    int low_precision;
} g_dtypes[MPX_DTYPE_COUNT] = {
    [MPX_F32] = {"f32", 4, 0},         [MPX_F16] = {"f16", 2, 1},
    [MPX_BF16] = {"bf16", 2, 1},       [MPX_F8_E4M3] = {"f8_e4m3", 1, 1},
    [MPX_F8_E5M2] = {"f8_e5m2", 1, 1}, [MPX_I32] = {"i32", 4, 0},
    [MPX_U8] = {"u8", 1, 0},           [MPX_TF32] = {"tf32", 4, 0},
};

size_t mpx_dtype_size(mpx_dtype t) { return (unsigned)t < MPX_DTYPE_COUNT ? g_dtypes[t].size : 0; }

const char *mpx_dtype_name(mpx_dtype t) {
    return (unsigned)t < MPX_DTYPE_COUNT ? g_dtypes[t].name : "?";
}

int mpx_dtype_parse(const char *name) {
    for (int i = 0; i < MPX_DTYPE_COUNT; i++)
        if (strcmp(name, g_dtypes[i].name) == 0) return i;
    return -1;
}

int mpx_dtype_is_low_precision(mpx_dtype t) {
    return (unsigned)t < MPX_DTYPE_COUNT && g_dtypes[t].low_precision;
}

int64_t mpx_shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

int64_t mpx_tensor_numel(const mpx_tensor *t) { return mpx_shape_numel(t->ndim, t->shape); }

size_t mpx_tensor_bytes(const mpx_tensor *t) {
    return (size_t)mpx_tensor_numel(t) * mpx_dtype_size(t->dtype);
}

const char *mpx_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t used = 0;
    used += (size_t)snprintf(buf + used, cap - used, "[");
    for (int i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
    return buf;
}
