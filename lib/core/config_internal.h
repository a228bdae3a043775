/* config_internal.h — the entry store shared by config.c (set, validate, getters, resolved
 * text) and config_parse.c (the INI reader). Not a public header.
 *
 * Entries live in one array, found through an open-addressing hash of (section, key), so a
 * hostile file with a million distinct keys costs linear, not quadratic, time. An entry with
 * key NULL records a `[section]` header, so validation can name an unknown section even when
 * it holds no keys.
 */
#ifndef MPX_CONFIG_INTERNAL_H
#define MPX_CONFIG_INTERNAL_H

#include "mpx/config.h"

typedef struct {
    char *section;
    char *key;    /* NULL: a `[section]` header (first occurrence) */
    char *value;  /* NULL for a header */
    char *origin; /* "path:line", "command line", or the origin given to mpx_config_set */
    uint64_t
        seq; /* when it was (last) assigned: validation reports the first error in this order */
} mpx_cfg_entry;

struct mpx_config {
    mpx_cfg_entry *entries;
    size_t n, cap;
    size_t *index;    /* hash slots holding entry index + 1; 0 = empty */
    size_t index_cap; /* power of two, at least twice n */
    uint64_t next_seq;
    const mpx_cfg_key *schema; /* remembered by a successful mpx_config_validate */
    size_t n_keys;
};

/* 1 when s is a valid section or key name: [a-z0-9_]+. */
int mpx_cfg_name_ok(const char *s);

/* Store section.key = value from `origin`, replacing an earlier value (the later wins).
 * key NULL records a section header; only its first occurrence is kept. No checks here:
 * callers have validated names and value. */
mpx_status mpx_cfg_store(mpx_config *cfg, const char *section, const char *key, const char *value,
                         const char *origin);

/* s shortened for a message (at most 60 bytes, then "..."; control characters as '?'), so a
 * megabyte-long value or key cannot push the useful part of a message past the message buffer
 * and a message stays on one line. */
enum { MPX_CFG_CLIP_CAP = 72 };
const char *mpx_cfg_clip(const char *s, char buf[MPX_CFG_CLIP_CAP]);

#endif
