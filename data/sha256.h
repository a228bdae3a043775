/* sha256.h — SHA-256 (FIPS 180-4) for dataset manifests (internal to data/).
 *
 * Cache manifests are written in `sha256sum` format, so a user can check a cache with
 * `sha256sum -c SHA256SUMS` and compare an archive with the published SHA256SUMS.
 */
#ifndef MPX_DATA_SHA256_H
#define MPX_DATA_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "mpx/error.h"

typedef struct {
    uint32_t h[8];
    uint64_t bytes;
    uint8_t block[64];
    size_t fill;
} mpx_sha256;

void mpx_sha256_init(mpx_sha256 *s);
void mpx_sha256_update(mpx_sha256 *s, const void *data, size_t n);
/* 64 lowercase hex digits + NUL into hex[65]. */
void mpx_sha256_final_hex(mpx_sha256 *s, char hex[65]);
/* Hash a whole file. */
mpx_status mpx_sha256_file(const char *path, char hex[65]);
/* Look up `name` in a sha256sum-format manifest (lines "<hex>  name" or "<hex> *name");
 * 1 and hex filled when listed, 0 when not. */
int mpx_sha256_manifest_lookup(const char *manifest_text, const char *name, char hex[65]);
/* Hash the file at `path`; when a SHA256SUMS beside it lists its base name, the two must agree
 * (MPX_ERR_INPUT naming both otherwise). *listed (may be NULL): 1 when it was listed. */
mpx_status mpx_sha256_check_beside(const char *path, char hex[65], int *listed);

#endif
