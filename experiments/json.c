/* json.c — see json.h. */
#include "json.h"

#include <math.h>

static void put_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20) fprintf(f, "\\u%04x", *p);
            else fputc(*p, f);
        }
    }
    fputc('"', f);
}

/* The separator, indentation and key before a member. */
static void member(json_writer *w, const char *key) {
    if (w->depth > 0) {
        fputs(w->count[w->depth - 1]++ ? ",\n" : "\n", w->f);
        for (int i = 0; i < w->depth; i++) fputs("  ", w->f);
    }
    if (key) {
        put_string(w->f, key);
        fputs(": ", w->f);
    }
}

static void open_level(json_writer *w, const char *key, char c) {
    member(w, key);
    fputc(c, w->f);
    if (w->depth < JSON_MAX_DEPTH) w->count[w->depth++] = 0;
}

static void close_level(json_writer *w, char c) {
    const int had = w->depth > 0 ? w->count[w->depth - 1] : 0;
    if (w->depth > 0) w->depth--;
    if (had) {
        fputc('\n', w->f);
        for (int i = 0; i < w->depth; i++) fputs("  ", w->f);
    }
    fputc(c, w->f);
    if (w->depth == 0) fputc('\n', w->f);
}

void json_begin_object(json_writer *w, const char *key) { open_level(w, key, '{'); }
void json_end_object(json_writer *w) { close_level(w, '}'); }
void json_begin_array(json_writer *w, const char *key) { open_level(w, key, '['); }
void json_end_array(json_writer *w) { close_level(w, ']'); }

void json_string(json_writer *w, const char *key, const char *value) {
    member(w, key);
    put_string(w->f, value);
}

void json_number(json_writer *w, const char *key, double value) {
    member(w, key);
    if (isfinite(value)) fprintf(w->f, "%.9g", value);
    else fputs("null", w->f);
}

void json_integer(json_writer *w, const char *key, long long value) {
    member(w, key);
    fprintf(w->f, "%lld", value);
}

void json_bool(json_writer *w, const char *key, int value) {
    member(w, key);
    fputs(value ? "true" : "false", w->f);
}

void json_null(json_writer *w, const char *key) {
    member(w, key);
    fputs("null", w->f);
}
