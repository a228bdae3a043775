/* h5util.h — HDF5 helpers shared by the run-file writer and reader (private to lib/io).
 *
 * Every HDF5 call whose result matters goes through H5_TRY, which stays on in release builds:
 * a negative return records an mpx error (the caller's text plus the innermost HDF5 message,
 * e.g. "No space left on device") and jumps to the function's `fail:` label. HDF5 clears its
 * error stack at the next API call, so the message is captured inside the macro, before any
 * cleanup runs — which is why these helpers return mpx_status rather than herr_t.
 */
#ifndef MPX_IO_H5UTIL_H
#define MPX_IO_H5UTIL_H

#include <hdf5.h>
#include <stdint.h>

#include "mpx/error.h"

/* Needs `mpx_status st` in scope and a `fail:` label. */
#define H5_TRY(expr, code, ...)                                                                    \
    do {                                                                                           \
        if ((expr) < 0) {                                                                          \
            st = mpx_h5_fail((code), __VA_ARGS__);                                                 \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* Propagate a failed mpx_status through the `fail:` label (needs `st`). */
#define MPX_TRY_FAIL(expr)                                                                         \
    do {                                                                                           \
        if ((st = (expr)) != MPX_OK) goto fail;                                                    \
    } while (0)

/* Turn off HDF5's automatic error printing on this thread (library code never prints). */
void mpx_h5_quiet(void);
/* mpx_fail with "<printf text>: <innermost HDF5 message>". */
mpx_status mpx_h5_fail(mpx_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Close an identifier of any kind if it is valid; errors are ignored (cleanup paths). */
void mpx_h5_close(hid_t id);

/* Variable-length UTF-8 string type (caller closes it). */
hid_t mpx_h5_vlen_str(void);

/* Scalar attributes on `obj` (replaced when present); `where` names the file in errors
 * (MPX_ERR_IO). A NULL string is written as "". */
mpx_status mpx_h5_attr_str(hid_t obj, const char *name, const char *value, const char *where);
mpx_status mpx_h5_attr_i64(hid_t obj, const char *name, int64_t value, const char *where);
mpx_status mpx_h5_attr_i32(hid_t obj, const char *name, int32_t value, const char *where);
/* Read a scalar attribute as text (strings as stored, integers in decimal, floats %.17g) into
 * a malloc'ed string. A missing attribute is MPX_ERR_INPUT. */
mpx_status mpx_h5_attr_read_text(hid_t obj, const char *name, char **value, const char *where);

/* Read the 1-D string dataset `name` (variable- or fixed-length strings) into n malloc'ed
 * strings, n = its length; free with mpx_h5_free_strings. */
mpx_status mpx_h5_read_strings(hid_t file, const char *name, int64_t *n, char ***out,
                               const char *where);
void mpx_h5_free_strings(char **s, int64_t n);

#endif
