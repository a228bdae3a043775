/* config.h — the INI configuration: parsing, includes, overrides, schema validation.
 *
 * Files are INI: `[section]` headers, `key = value`, `;` or `#` comments (whole line, or after
 * whitespace at the end of a line), `include = other.cfg` (resolved relative to the including
 * file, processed in place, loops are errors). Later assignments override earlier ones.
 * Command-line overrides `section.key=value` apply after all files.
 * Every entry remembers where it was set ("path:line" or "command line"), so every error and
 * every contradiction found later can name the file, line and key at fault.
 *
 * The set of valid keys is a schema (mpx_cfg_key table); validation rejects unknown sections,
 * unknown keys and values that do not parse or fall outside their range or choices.
 * Getters return the configured value or the schema default.
 */
#ifndef MPX_CONFIG_H
#define MPX_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "mpx/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MPX_CFG_INT, MPX_CFG_FLOAT, MPX_CFG_BOOL, MPX_CFG_STRING, MPX_CFG_ENUM } mpx_cfg_type;

typedef struct {
    const char *section;  /* "model", "data", "train", "precision", "log" */
    const char *key;
    mpx_cfg_type type;
    const char *def;      /* default value as text ("" allowed for strings) */
    const char *choices;  /* ENUM: "a|b|c" */
    double min, max;      /* INT/FLOAT inclusive range; ignored when min > max */
    const char *help;     /* one line, shown by `mpx train --help-config` */
} mpx_cfg_key;

typedef struct mpx_config mpx_config;

/* Parse a file (with includes). On error: MPX_ERR_INPUT with "path:line: message". */
mpx_status mpx_config_load(const char *path, mpx_config **out);
/* Parse text; `name` stands in for the path in messages, includes resolve against `base_dir`. */
mpx_status mpx_config_parse_string(const char *text, const char *name, const char *base_dir,
                                   mpx_config **out);
/* An empty configuration (every key at its default). */
mpx_status mpx_config_new(mpx_config **out);
void mpx_config_free(mpx_config *cfg);

/* Apply "section.key=value" (source "command line"). */
mpx_status mpx_config_override(mpx_config *cfg, const char *assignment);
/* Set a value programmatically (source `origin`, e.g. "default for scale smoke"). */
mpx_status mpx_config_set(mpx_config *cfg, const char *section, const char *key, const char *value,
                          const char *origin);

/* Check every entry against the schema and remember the schema for the getters.
 * Errors name "path:line: [section] key = value: why" (unknown key, bad value, out of range). */
mpx_status mpx_config_validate(mpx_config *cfg, const mpx_cfg_key *schema, size_t n_keys);

/* Getters for "section.key" (after validate). A key missing from the schema is a bug:
 * the getters then return 0 / "" and mpx_config_validate's schema must be fixed. */
int64_t mpx_cfg_int(const mpx_config *cfg, const char *dotted);
double mpx_cfg_float(const mpx_config *cfg, const char *dotted);
int mpx_cfg_bool(const mpx_config *cfg, const char *dotted);
const char *mpx_cfg_str(const mpx_config *cfg, const char *dotted); /* STRING and ENUM */
/* The value as text, whatever the type (set or default); "" for keys not in the schema. */
const char *mpx_cfg_raw(const mpx_config *cfg, const char *dotted);
/* 1 when the key was set by a file or override (not a default). */
int mpx_cfg_is_set(const mpx_config *cfg, const char *dotted);
/* "path:line" or "command line" or "default" — for error messages about contradictions. */
const char *mpx_cfg_where(const mpx_config *cfg, const char *dotted);

/* The resolved configuration as INI text: every schema key with its final value, grouped by
 * section in schema order, each line commented with where it was set. Caller frees. */
char *mpx_config_resolved_text(const mpx_config *cfg);

#ifdef __cplusplus
}
#endif

#endif
