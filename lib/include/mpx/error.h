/* error.h — status codes and the thread-local error message.
 *
 * Every library function that can fail returns an mpx_status and, on failure, sets a
 * message naming the tensor, layer, file or key at fault. Library code never exits;
 * the `mpx` command maps MPX_ERR_INPUT (bad user input: config, data, run files) to
 * exit code 2 and everything else to 1.
 */
#ifndef MPX_ERROR_H
#define MPX_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MPX_OK = 0,
    MPX_ERR_INPUT,       /* bad user input: config key/value, dataset file, run file, CLI argument */
    MPX_ERR_IO,          /* the system refused: open/read/write/rename failed, disk full */
    MPX_ERR_NOMEM,       /* allocation failed */
    MPX_ERR_BACKEND,     /* oneDNN, BLAS, CUDA, cuBLAS, cuDNN or HDF5 reported an error */
    MPX_ERR_NUMERIC,     /* non-finite values where they are not allowed (divergence) */
    MPX_ERR_UNSUPPORTED, /* valid request this build or device cannot do */
    MPX_ERR_INTERNAL     /* a broken invariant: a bug in mpx */
} mpx_status;

/* Set the message (printf-style) and return `code`, so `return mpx_fail(...)` reads naturally. */
mpx_status mpx_fail(mpx_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefix the current message with context ("layer conv1: ") while propagating `code`. */
mpx_status mpx_fail_context(mpx_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The last message set on this thread ("" when none). */
const char *mpx_error_message(void);
const char *mpx_status_name(mpx_status s);

/* Propagate a failure unchanged. */
#define MPX_TRY(expr)                                                                              \
    do {                                                                                           \
        mpx_status mpx_try_status_ = (expr);                                                       \
        if (mpx_try_status_ != MPX_OK) return mpx_try_status_;                                    \
    } while (0)

/* Allocation helper used everywhere: checked, zeroed, and the failure named. */
void *mpx_calloc(size_t count, size_t size);
#define MPX_ALLOC(ptr, count, what)                                                                \
    do {                                                                                           \
        (ptr) = mpx_calloc((size_t)(count), sizeof(*(ptr)));                                       \
        if (!(ptr)) return mpx_fail(MPX_ERR_NOMEM, "out of memory allocating %s", (what));         \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif
