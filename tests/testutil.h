/* testutil.h — the tiny harness every C test uses.
 *
 * CHECK records a failure with file:line and a message and carries on, so one run shows every
 * failure; mpx_test_done prints "<name>: N checks, M failed" and returns the exit code
 * (0 pass, 1 fail). A test that cannot run here (no GPU) returns MPX_TEST_SKIP (77), which
 * ctest reports as skipped, not passed.
 */
#ifndef MPX_TESTUTIL_H
#define MPX_TESTUTIL_H

#include <stdint.h>
#include <stdio.h>

#include "mpx/error.h"

#define MPX_TEST_SKIP 77

extern long mpx_test_checks;
extern long mpx_test_failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        mpx_test_checks++;                                                                         \
        if (!(cond)) {                                                                             \
            mpx_test_failures++;                                                                   \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* Check an mpx_status is MPX_OK, printing the library's message otherwise. */
#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        mpx_status s_ = (expr);                                                                    \
        CHECK(s_ == MPX_OK, "%s -> %s: %s", #expr, mpx_status_name(s_), mpx_error_message());      \
    } while (0)

/* Abort the test right away (setup failed, nothing else can be checked). */
#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        int require_ok_ = (cond) ? 1 : 0;                                                          \
        CHECK(require_ok_, __VA_ARGS__);                                                           \
        if (!require_ok_) return mpx_test_done(__FILE__);                                          \
    } while (0)

/* REQUIRE for void helper functions: check, and return from the helper when it fails. */
#define REQUIRE_VOID(cond, ...)                                                                    \
    do {                                                                                           \
        int require_ok_ = (cond) ? 1 : 0;                                                          \
        CHECK(require_ok_, __VA_ARGS__);                                                           \
        if (!require_ok_) return;                                                                  \
    } while (0)

int mpx_test_done(const char *name);

/* Deterministic test data (Philox, stream MPX_RNG_TEST). */
void mpx_test_uniform(float *x, size_t n, float lo, float hi, uint64_t seed);
void mpx_test_normal(float *x, size_t n, float mean, float std, uint64_t seed);
void mpx_test_uniform_d(double *x, size_t n, double lo, double hi, uint64_t seed);

/* max_i |a_i - b_i| / (atol + rtol * |b_i|): <= 1 means within tolerance. */
double mpx_test_err_ratio(const float *a, const double *b, size_t n, double atol, double rtol);
/* Relative L2 error ||a - b|| / ||b|| (0 when both are zero). */
double mpx_test_rel_l2(const float *a, const double *b, size_t n);

/* Path of a file in the source tree ($MPX_SOURCE_DIR or the compiled-in path). */
const char *mpx_test_source_path(const char *rel, char *buf, size_t cap);
/* A fresh empty directory under $TMPDIR for this test; returns its path. */
const char *mpx_test_tmpdir(const char *name, char *buf, size_t cap);

#endif
