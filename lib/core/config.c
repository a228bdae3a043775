/* config.c — the configuration store: entries with the place they were set, command-line
 * overrides, schema validation, typed getters and the resolved text. The INI reader is
 * config_parse.c.
 *
 * Value syntax (shared by files, overrides and mpx_config_set, so that the resolved text always
 * parses back to the same values): surrounding whitespace is trimmed, control characters are
 * refused, and a ';' or '#' that begins the value or follows whitespace starts a comment.
 * Once a schema is remembered (after a successful validate), mpx_config_set and
 * mpx_config_override check the new value against it at once, so the getters never see an
 * unchecked value.
 */
#include "mpx/config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"

/* ---- names, clipping ---- */

int mpx_cfg_name_ok(const char *s) {
    if (!s || !*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_')) return 0;
    return 1;
}

const char *mpx_cfg_clip(const char *s, char buf[MPX_CFG_CLIP_CAP]) {
    enum { KEEP = 60 };
    _Static_assert(KEEP + 4 <= MPX_CFG_CLIP_CAP, "room for the dots");
    size_t n = strlen(s), k = n;
    if (n > KEEP + 3) {
        k = KEEP;
        while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--; /* keep UTF-8 sequences whole */
    }
    /* Control characters become '?', so a message stays on one line. */
    for (size_t i = 0; i < k; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[i] = (c < 0x20 || c == 0x7f) ? '?' : s[i];
    }
    strcpy(buf + k, k < n ? "..." : "");
    return buf;
}

static int is_blank(char c) { return c == ' ' || c == '\t'; }

/* Why `v` (already trimmed) cannot be written as an INI value, or NULL when it can. */
static const char *ini_value_problem(const char *v) {
    for (size_t i = 0; v[i]; i++) {
        unsigned char c = (unsigned char)v[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f) return "contains a control character";
        if ((c == ';' || c == '#') && (i == 0 || is_blank(v[i - 1])))
            return "a ';' or '#' at the start or after whitespace would begin a comment";
    }
    return NULL;
}

/* ---- the hash index ---- */

static uint64_t hash_name(const char *section, size_t slen, const char *key, size_t klen) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < slen; i++) h = (h ^ (unsigned char)section[i]) * 1099511628211ull;
    h = (h ^ (key ? 0x100u : 0x200u)) * 1099511628211ull; /* separator no byte can equal */
    for (size_t i = 0; i < klen; i++) h = (h ^ (unsigned char)key[i]) * 1099511628211ull;
    return h;
}

static int name_eq(const char *a, const char *b, size_t blen) {
    return strlen(a) == blen && memcmp(a, b, blen) == 0;
}

static int entry_is(const mpx_cfg_entry *e, const char *section, size_t slen, const char *key,
                    size_t klen) {
    if (!name_eq(e->section, section, slen)) return 0;
    if (!key) return e->key == NULL;
    return e->key && name_eq(e->key, key, klen);
}

/* key NULL looks up a section header. */
static mpx_cfg_entry *lookup(const mpx_config *cfg, const char *section, size_t slen,
                             const char *key, size_t klen) {
    if (!cfg->index_cap) return NULL;
    size_t mask = cfg->index_cap - 1;
    for (size_t i = hash_name(section, slen, key, klen) & mask;; i = (i + 1) & mask) {
        size_t slot = cfg->index[i];
        if (!slot) return NULL;
        if (entry_is(&cfg->entries[slot - 1], section, slen, key, klen))
            return &cfg->entries[slot - 1];
    }
}

static void index_put(size_t *index, size_t cap, const mpx_cfg_entry *e, size_t at) {
    size_t mask = cap - 1;
    size_t i =
        hash_name(e->section, strlen(e->section), e->key, e->key ? strlen(e->key) : 0) & mask;
    while (index[i]) i = (i + 1) & mask;
    index[i] = at + 1;
}

static mpx_status index_grow(mpx_config *cfg) {
    size_t cap = cfg->index_cap ? cfg->index_cap * 2 : 64;
    size_t *index;
    MPX_ALLOC(index, cap, "config index");
    for (size_t j = 0; j < cfg->n; j++) index_put(index, cap, &cfg->entries[j], j);
    free(cfg->index);
    cfg->index = index;
    cfg->index_cap = cap;
    return MPX_OK;
}

/* ---- the store ---- */

mpx_status mpx_config_new(mpx_config **out) {
    MPX_ALLOC(*out, 1, "config");
    return MPX_OK;
}

static void entry_free(mpx_cfg_entry *e) {
    free(e->section);
    free(e->key);
    free(e->value);
    free(e->origin);
}

void mpx_config_free(mpx_config *cfg) {
    if (!cfg) return;
    for (size_t i = 0; i < cfg->n; i++) entry_free(&cfg->entries[i]);
    free(cfg->entries);
    free(cfg->index);
    free(cfg);
}

mpx_status mpx_cfg_store(mpx_config *cfg, const char *section, const char *key, const char *value,
                         const char *origin) {
    mpx_cfg_entry *e = lookup(cfg, section, strlen(section), key, key ? strlen(key) : 0);
    if (e && !key) return MPX_OK; /* a repeated header: the first one is the one to name */
    if (e) {
        char *v = strdup(value), *o = strdup(origin);
        if (!v || !o) {
            free(v);
            free(o);
            return mpx_fail(MPX_ERR_NOMEM, "out of memory storing [%s] %s", section, key);
        }
        free(e->value);
        free(e->origin);
        e->value = v;
        e->origin = o;
        e->seq = cfg->next_seq++;
        return MPX_OK;
    }
    if (2 * (cfg->n + 1) > cfg->index_cap) MPX_TRY(index_grow(cfg));
    if (cfg->n == cfg->cap) {
        size_t cap = cfg->cap ? cfg->cap * 2 : 32;
        mpx_cfg_entry *grown = realloc(cfg->entries, cap * sizeof *grown);
        if (!grown) return mpx_fail(MPX_ERR_NOMEM, "out of memory growing the config");
        cfg->entries = grown;
        cfg->cap = cap;
    }
    mpx_cfg_entry ne = {strdup(section), key ? strdup(key) : NULL, key ? strdup(value) : NULL,
                        strdup(origin), cfg->next_seq};
    if (!ne.section || !ne.origin || (key && (!ne.key || !ne.value))) {
        entry_free(&ne);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory storing [%s]", section);
    }
    cfg->next_seq++;
    cfg->entries[cfg->n] = ne;
    index_put(cfg->index, cfg->index_cap, &cfg->entries[cfg->n], cfg->n);
    cfg->n++;
    return MPX_OK;
}

/* ---- value parsing ---- */

/* Optional sign then decimal digits, nothing else. 0 ok, -1 not an integer, -2 overflow. */
static int parse_int(const char *s, int64_t *out) {
    int neg = (*s == '-');
    if (*s == '-' || *s == '+') s++;
    if (!*s) return -1;
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, x = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        unsigned d = (unsigned)(*s - '0');
        if (x > (limit - d) / 10) return -2;
        x = x * 10 + d;
    }
    *out = neg ? (int64_t)(0 - x) : (int64_t)x;
    return 0;
}

/* strtod over the whole string. 0 ok, -1 not a number, -2 not finite (inf, nan, overflow). */
static int parse_float(const char *s, double *out) {
    if (!*s || is_blank(*s)) return -1; /* strtod would skip leading whitespace */
    char *end;
    double x = strtod(s, &end);
    if (*end) return -1;
    if (!isfinite(x)) return -2;
    *out = x;
    return 0;
}

static int parse_bool(const char *s, int *out) {
    static const char *const spellings[] = {"true", "false", "yes", "no", "on", "off", "1", "0"};
    for (int i = 0; i < 8; i++) {
        if (strcmp(s, spellings[i]) == 0) {
            *out = (i % 2 == 0); /* even: a "true" spelling */
            return 0;
        }
    }
    return -1;
}

static int enum_has(const char *choices, const char *v) {
    size_t n = strlen(v);
    for (const char *c = choices;;) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && memcmp(c, v, n) == 0) return 1;
        if (!bar) return 0;
        c = bar + 1;
    }
}

/* Integral bounds print as integers ("1000000", not "1e+06"). */
static const char *fmt_bound(double x, char *buf, size_t cap) {
    if (x == floor(x) && fabs(x) < 1e15)
        snprintf(buf, cap, "%.0f", x);
    else
        snprintf(buf, cap, "%g", x);
    return buf;
}

static int in_range(const mpx_cfg_key *k, double x, char *why, size_t cap) {
    if (k->min > k->max || (x >= k->min && x <= k->max)) return 1;
    char lo[32], hi[32];
    snprintf(why, cap, "outside the range [%s, %s]", fmt_bound(k->min, lo, sizeof lo),
             fmt_bound(k->max, hi, sizeof hi));
    return 0;
}

/* 1 when `v` is a valid value for `k`; otherwise 0 with the reason in `why`. */
static int value_ok(const mpx_cfg_key *k, const char *v, char *why, size_t cap) {
    switch (k->type) {
    case MPX_CFG_INT: {
        int64_t x = 0;
        int r = parse_int(v, &x);
        if (r == -1) return snprintf(why, cap, "not an integer"), 0;
        if (r == -2) return snprintf(why, cap, "integer out of the 64-bit range"), 0;
        return in_range(k, (double)x, why, cap);
    }
    case MPX_CFG_FLOAT: {
        double x = 0;
        int r = parse_float(v, &x);
        if (r == -1) return snprintf(why, cap, "not a number"), 0;
        if (r == -2) return snprintf(why, cap, "not a finite number"), 0;
        return in_range(k, x, why, cap);
    }
    case MPX_CFG_BOOL: {
        int b;
        if (parse_bool(v, &b) == 0) return 1;
        return snprintf(why, cap, "not a boolean (true/false, yes/no, on/off, 1/0)"), 0;
    }
    case MPX_CFG_STRING: return 1;
    case MPX_CFG_ENUM:
        if (enum_has(k->choices, v)) return 1;
        return snprintf(why, cap, "not one of %s", k->choices), 0;
    }
    return snprintf(why, cap, "unknown type %d", (int)k->type), 0;
}

/* ---- the schema ---- */

static const mpx_cfg_key *find_key(const mpx_cfg_key *schema, size_t n, const char *section,
                                   size_t slen, const char *key, size_t klen) {
    for (size_t i = 0; i < n; i++)
        if (name_eq(schema[i].section, section, slen) && name_eq(schema[i].key, key, klen))
            return &schema[i];
    return NULL;
}

static int section_known(const mpx_cfg_key *schema, size_t n, const char *section) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(schema[i].section, section) == 0) return 1;
    return 0;
}

/* Levenshtein distance, or 3 when it is certainly above 2 (only "within 2" matters). */
static size_t edit_distance_upto2(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > m + 2 || m > n + 2) return 3;
    size_t prev[m + 1], cur[m + 1]; /* m is a schema name: short */
    for (size_t j = 0; j <= m; j++) prev[j] = j;
    for (size_t i = 1; i <= n; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof prev);
    }
    return prev[m];
}

/* The closest schema section (section NULL) or key of `section` within edit distance 2. */
static const char *nearest(const mpx_cfg_key *schema, size_t n, const char *section,
                           const char *name) {
    const char *best = NULL;
    size_t best_d = 3;
    for (size_t i = 0; i < n; i++) {
        if (section && strcmp(schema[i].section, section) != 0) continue;
        const char *cand = section ? schema[i].key : schema[i].section;
        size_t d = edit_distance_upto2(name, cand);
        if (d < best_d) best = cand, best_d = d;
    }
    return best;
}

/* Check one entry (key NULL: a header) against the schema; the message names its origin. */
static mpx_status check_entry(const mpx_cfg_key *schema, size_t n, const char *section,
                              const char *key, const char *value, const char *origin) {
    char cs[MPX_CFG_CLIP_CAP], ck[MPX_CFG_CLIP_CAP], cv[MPX_CFG_CLIP_CAP];
    mpx_cfg_clip(section, cs);
    if (!section_known(schema, n, section)) {
        const char *near = nearest(schema, n, NULL, section);
        if (near)
            return mpx_fail(MPX_ERR_INPUT, "%s: unknown section [%s] (did you mean [%s]?)", origin,
                            cs, near);
        return mpx_fail(MPX_ERR_INPUT, "%s: unknown section [%s]", origin, cs);
    }
    if (!key) return MPX_OK;
    mpx_cfg_clip(key, ck);
    const mpx_cfg_key *k = find_key(schema, n, section, strlen(section), key, strlen(key));
    if (!k) {
        const char *near = nearest(schema, n, section, key);
        if (near)
            return mpx_fail(MPX_ERR_INPUT, "%s: [%s] unknown key '%s' (did you mean '%s'?)", origin,
                            cs, ck, near);
        return mpx_fail(MPX_ERR_INPUT, "%s: [%s] unknown key '%s'", origin, cs, ck);
    }
    char why[512];
    if (!value_ok(k, value, why, sizeof why))
        return mpx_fail(MPX_ERR_INPUT, "%s: [%s] %s = %s: %s", origin, cs, ck,
                        mpx_cfg_clip(value, cv), why);
    return MPX_OK;
}

/* A broken schema is a bug in mpx, not bad input: MPX_ERR_INTERNAL. */
static mpx_status check_schema(const mpx_cfg_key *schema, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const mpx_cfg_key *k = &schema[i];
        if (!mpx_cfg_name_ok(k->section) || !mpx_cfg_name_ok(k->key) ||
            strcmp(k->key, "include") == 0)
            return mpx_fail(MPX_ERR_INTERNAL,
                            "config schema entry %zu: invalid section or key name", i);
        if ((unsigned)k->type > MPX_CFG_ENUM || !k->def ||
            (k->type == MPX_CFG_ENUM && (!k->choices || !*k->choices)))
            return mpx_fail(MPX_ERR_INTERNAL,
                            "config schema: [%s] %s: bad type, missing default or choices",
                            k->section, k->key);
        for (size_t j = 0; j < i; j++)
            if (strcmp(schema[j].section, k->section) == 0 && strcmp(schema[j].key, k->key) == 0)
                return mpx_fail(MPX_ERR_INTERNAL, "config schema: [%s] %s declared twice",
                                k->section, k->key);
        char why[512];
        const char *problem = ini_value_problem(k->def);
        if (!problem && (is_blank(k->def[0]) || (*k->def && is_blank(k->def[strlen(k->def) - 1]))))
            problem = "surrounding whitespace";
        if (problem || !value_ok(k, k->def, why, sizeof why))
            return mpx_fail(MPX_ERR_INTERNAL, "config schema: [%s] %s default '%s': %s", k->section,
                            k->key, k->def, problem ? problem : why);
    }
    return MPX_OK;
}

static int by_seq(const void *a, const void *b) {
    uint64_t x = (*(const mpx_cfg_entry *const *)a)->seq;
    uint64_t y = (*(const mpx_cfg_entry *const *)b)->seq;
    return (x > y) - (x < y);
}

mpx_status mpx_config_validate(mpx_config *cfg, const mpx_cfg_key *schema, size_t n_keys) {
    if (!cfg || (n_keys && !schema))
        return mpx_fail(MPX_ERR_INTERNAL, "mpx_config_validate: no config or no schema");
    MPX_TRY(check_schema(schema, n_keys));
    const mpx_cfg_entry **order;
    MPX_ALLOC(order, cfg->n, "config validation order");
    for (size_t i = 0; i < cfg->n; i++) order[i] = &cfg->entries[i];
    qsort(order, cfg->n, sizeof *order, by_seq);
    for (size_t i = 0; i < cfg->n; i++) {
        const mpx_cfg_entry *e = order[i];
        mpx_status st = check_entry(schema, n_keys, e->section, e->key, e->value, e->origin);
        if (st != MPX_OK) {
            free(order);
            return st;
        }
    }
    free(order);
    cfg->schema = schema;
    cfg->n_keys = n_keys;
    return MPX_OK;
}

/* ---- setting values ---- */

mpx_status mpx_config_set(mpx_config *cfg, const char *section, const char *key, const char *value,
                          const char *origin) {
    char cs[MPX_CFG_CLIP_CAP], ck[MPX_CFG_CLIP_CAP], cv[MPX_CFG_CLIP_CAP];
    if (!origin) origin = "mpx_config_set";
    if (!mpx_cfg_name_ok(section))
        return mpx_fail(MPX_ERR_INPUT, "%s: invalid section name '%s' (use a-z, 0-9, _)", origin,
                        section ? mpx_cfg_clip(section, cs) : "(null)");
    mpx_cfg_clip(section, cs);
    if (!mpx_cfg_name_ok(key))
        return mpx_fail(MPX_ERR_INPUT, "%s: [%s] invalid key '%s' (use a-z, 0-9, _)", origin, cs,
                        key ? mpx_cfg_clip(key, ck) : "(null)");
    mpx_cfg_clip(key, ck);
    if (strcmp(key, "include") == 0)
        return mpx_fail(MPX_ERR_INPUT, "%s: [%s] include is not a key (only files include files)",
                        origin, cs);
    if (!value) return mpx_fail(MPX_ERR_INPUT, "%s: [%s] %s: no value", origin, cs, ck);
    while (is_blank(*value)) value++;
    size_t n = strlen(value);
    while (n > 0 && is_blank(value[n - 1])) n--;
    char *v = strndup(value, n);
    if (!v) return mpx_fail(MPX_ERR_NOMEM, "out of memory setting [%s] %s", cs, ck);
    const char *problem = ini_value_problem(v);
    mpx_status st = MPX_OK;
    if (problem)
        st = mpx_fail(MPX_ERR_INPUT, "%s: [%s] %s = %s: %s", origin, cs, ck, mpx_cfg_clip(v, cv),
                      problem);
    else if (cfg->schema)
        st = check_entry(cfg->schema, cfg->n_keys, section, key, v, origin);
    if (st == MPX_OK) st = mpx_cfg_store(cfg, section, key, v, origin);
    free(v);
    return st;
}

mpx_status mpx_config_override(mpx_config *cfg, const char *assignment) {
    static const char *const origin = "command line";
    char ca[MPX_CFG_CLIP_CAP];
    if (!assignment) return mpx_fail(MPX_ERR_INPUT, "%s: empty override", origin);
    const char *eq = strchr(assignment, '=');
    const char *dot = strchr(assignment, '.');
    if (!eq)
        return mpx_fail(MPX_ERR_INPUT, "%s: '%s' is not section.key=value (missing '=')", origin,
                        mpx_cfg_clip(assignment, ca));
    if (!dot || dot > eq)
        return mpx_fail(MPX_ERR_INPUT, "%s: '%s' is not section.key=value (missing '.')", origin,
                        mpx_cfg_clip(assignment, ca));
    /* Names are trimmed like in a file, so "train.steps = 5" works too. */
    const char *s0 = assignment, *s1 = dot, *k0 = dot + 1, *k1 = eq;
    while (s0 < s1 && is_blank(*s0)) s0++;
    while (s1 > s0 && is_blank(s1[-1])) s1--;
    while (k0 < k1 && is_blank(*k0)) k0++;
    while (k1 > k0 && is_blank(k1[-1])) k1--;
    char *section = strndup(s0, (size_t)(s1 - s0)), *key = strndup(k0, (size_t)(k1 - k0));
    mpx_status st = (section && key) ? mpx_config_set(cfg, section, key, eq + 1, origin)
                                     : mpx_fail(MPX_ERR_NOMEM, "out of memory parsing an override");
    free(section);
    free(key);
    return st;
}

/* ---- getters ---- */

/* The schema key for "section.key" and its value (set or default); NULL when not in the schema. */
static const mpx_cfg_key *resolve(const mpx_config *cfg, const char *dotted, const char **value) {
    const char *dot = dotted ? strchr(dotted, '.') : NULL;
    if (!cfg || !dot) return NULL;
    size_t slen = (size_t)(dot - dotted), klen = strlen(dot + 1);
    const mpx_cfg_key *k = find_key(cfg->schema, cfg->n_keys, dotted, slen, dot + 1, klen);
    if (!k) return NULL;
    const mpx_cfg_entry *e = lookup(cfg, dotted, slen, dot + 1, klen);
    *value = e ? e->value : k->def;
    return k;
}

int64_t mpx_cfg_int(const mpx_config *cfg, const char *dotted) {
    const char *v;
    const mpx_cfg_key *k = resolve(cfg, dotted, &v);
    int64_t x = 0;
    if (!k || k->type != MPX_CFG_INT || parse_int(v, &x) != 0) return 0;
    return x;
}

double mpx_cfg_float(const mpx_config *cfg, const char *dotted) {
    const char *v;
    const mpx_cfg_key *k = resolve(cfg, dotted, &v);
    if (k && k->type == MPX_CFG_INT) return (double)mpx_cfg_int(cfg, dotted);
    double x = 0;
    if (!k || k->type != MPX_CFG_FLOAT || parse_float(v, &x) != 0) return 0;
    return x;
}

int mpx_cfg_bool(const mpx_config *cfg, const char *dotted) {
    const char *v;
    const mpx_cfg_key *k = resolve(cfg, dotted, &v);
    int b = 0;
    if (!k || k->type != MPX_CFG_BOOL || parse_bool(v, &b) != 0) return 0;
    return b;
}

const char *mpx_cfg_str(const mpx_config *cfg, const char *dotted) {
    const char *v;
    const mpx_cfg_key *k = resolve(cfg, dotted, &v);
    if (!k || (k->type != MPX_CFG_STRING && k->type != MPX_CFG_ENUM)) return "";
    return v;
}

const char *mpx_cfg_raw(const mpx_config *cfg, const char *dotted) {
    const char *v;
    return resolve(cfg, dotted, &v) ? v : "";
}

static const mpx_cfg_entry *find_set(const mpx_config *cfg, const char *dotted) {
    const char *dot = dotted ? strchr(dotted, '.') : NULL;
    if (!cfg || !dot) return NULL;
    return lookup(cfg, dotted, (size_t)(dot - dotted), dot + 1, strlen(dot + 1));
}

int mpx_cfg_is_set(const mpx_config *cfg, const char *dotted) {
    return find_set(cfg, dotted) != NULL;
}

const char *mpx_cfg_where(const mpx_config *cfg, const char *dotted) {
    const mpx_cfg_entry *e = find_set(cfg, dotted);
    return e ? e->origin : "default";
}

/* ---- resolved text ---- */

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_str(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_section(strbuf *b, const char *section) {
    if (b->n) sb_str(b, "\n");
    sb_str(b, "[");
    sb_str(b, section);
    sb_str(b, "]\n");
}

/* "key = value  ; origin". Control characters in an origin (it can be any text given to
 * mpx_config_set) become '?', so the comment stays on its line. */
static void sb_line(strbuf *b, const char *key, const char *value, const char *origin) {
    sb_str(b, key);
    sb_str(b, " = ");
    sb_str(b, value);
    sb_str(b, "  ; ");
    for (const char *o = origin; *o; o++) {
        unsigned char c = (unsigned char)*o;
        sb_put(b, (c < 0x20 || c == 0x7f) ? "?" : o, 1);
    }
    sb_str(b, "\n");
}

char *mpx_config_resolved_text(const mpx_config *cfg) {
    strbuf b = {0};
    sb_str(&b, ""); /* an empty configuration is "", not NULL */
    if (cfg && cfg->schema) {
        for (size_t i = 0; i < cfg->n_keys; i++) {
            const char *sec = cfg->schema[i].section;
            int seen = 0;
            for (size_t j = 0; j < i && !seen; j++) seen = strcmp(cfg->schema[j].section, sec) == 0;
            if (seen) continue;
            sb_section(&b, sec);
            for (size_t j = i; j < cfg->n_keys; j++) {
                const mpx_cfg_key *k = &cfg->schema[j];
                if (strcmp(k->section, sec) != 0) continue;
                const mpx_cfg_entry *e = lookup(cfg, sec, strlen(sec), k->key, strlen(k->key));
                sb_line(&b, k->key, e ? e->value : k->def, e ? e->origin : "default");
            }
        }
    } else if (cfg) {
        /* Not validated: every entry in the order first set, re-opening a section as needed. */
        const char *cur = NULL;
        for (size_t i = 0; i < cfg->n; i++) {
            const mpx_cfg_entry *e = &cfg->entries[i];
            if (!e->key) continue;
            if (!cur || strcmp(cur, e->section) != 0) sb_section(&b, cur = e->section);
            sb_line(&b, e->key, e->value, e->origin);
        }
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
