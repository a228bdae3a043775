/* testutil.c — see testutil.h. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpx/rng.h"

long mpx_test_checks;
long mpx_test_failures;

int mpx_test_done(const char *name) {
    const char *base = strrchr(name, '/');
    printf("%s: %ld checks, %ld failed\n", base ? base + 1 : name, mpx_test_checks,
           mpx_test_failures);
    return mpx_test_failures ? 1 : 0;
}

void mpx_test_uniform(float *x, size_t n, float lo, float hi, uint64_t seed) {
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * mpx_rand_uniform(seed, MPX_RNG_TEST, i);
}

void mpx_test_normal(float *x, size_t n, float mean, float std, uint64_t seed) {
    for (size_t i = 0; i < n; i++) x[i] = mean + std * mpx_rand_normal(seed, MPX_RNG_TEST, i);
}

void mpx_test_uniform_d(double *x, size_t n, double lo, double hi, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        uint32_t w[4];
        mpx_philox(seed, MPX_RNG_TEST, i, w);
        double u = ((double)w[0] * 4294967296.0 + (double)w[1]) / 18446744073709551616.0;
        x[i] = lo + (hi - lo) * u;
    }
}

double mpx_test_err_ratio(const float *a, const double *b, size_t n, double atol, double rtol) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / (atol + rtol * fabs(b[i]));
        if (!(e <= worst)) worst = e; /* NaN propagates as failure */
    }
    return worst;
}

double mpx_test_rel_l2(const float *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

const char *mpx_test_source_path(const char *rel, char *buf, size_t cap) {
    const char *root = getenv("MPX_SOURCE_DIR");
    if (!root || !*root) root = MPX_SOURCE_DIR;
    snprintf(buf, cap, "%s/%s", root, rel);
    return buf;
}

const char *mpx_test_tmpdir(const char *name, char *buf, size_t cap) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    snprintf(buf, cap, "%s/mpx-test-%s-%d", tmp, name, (int)getpid());
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", buf, buf);
    if (system(cmd) != 0) buf[0] = '\0';
    return buf;
}
