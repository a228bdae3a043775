/* json.h — writing JSON for `mpx bench --json`: objects, arrays, strings escaped as RFC 8259
 * asks (quote, backslash, control characters; other bytes as they are, so UTF-8 passes), numbers
 * with %.9g and null for NaN and Inf (which JSON has no words for). */
#ifndef MPX_CLI_JSON_H
#define MPX_CLI_JSON_H

#include <stdio.h>

enum { JSON_MAX_DEPTH = 16 };

typedef struct {
    FILE *f;
    int depth;
    int count[JSON_MAX_DEPTH]; /* members written at each open level */
} json_writer;

/* Each takes the member's key inside an object, NULL inside an array or at the top. */
void json_begin_object(json_writer *w, const char *key);
void json_end_object(json_writer *w);
void json_begin_array(json_writer *w, const char *key);
void json_end_array(json_writer *w);
void json_string(json_writer *w, const char *key, const char *value);
void json_number(json_writer *w, const char *key, double value);
void json_integer(json_writer *w, const char *key, long long value);
void json_bool(json_writer *w, const char *key, int value);
void json_null(json_writer *w, const char *key);

#endif
