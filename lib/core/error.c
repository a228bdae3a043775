/* error.c — the thread-local error message behind mpx_fail / mpx_error_message. */
#include "mpx/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MSG_CAP = 2048 };
static _Thread_local char g_msg[MSG_CAP];

mpx_status mpx_fail(mpx_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, MSG_CAP, fmt, ap);
    va_end(ap);
    return code;
}

mpx_status mpx_fail_context(mpx_status code, const char *fmt, ...) {
    char prefix[512];
    char old[MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_msg, MSG_CAP);
    size_t n = strlen(prefix);
    if (n > MSG_CAP / 2) n = MSG_CAP / 2;
    memcpy(g_msg, prefix, n);
    memcpy(g_msg + n, ": ", 2);
    size_t room = MSG_CAP - n - 3;
    size_t m = strnlen(old, room);
    memcpy(g_msg + n + 2, old, m);
    g_msg[n + 2 + m] = '\0';
    return code;
}

const char *mpx_error_message(void) { return g_msg; }


const char *mpx_status_name(mpx_status s) {
    switch (s) {
    case MPX_OK: return "ok";
    case MPX_ERR_INPUT: return "bad input";
    case MPX_ERR_IO: return "i/o error";
    case MPX_ERR_NOMEM: return "out of memory";
    case MPX_ERR_BACKEND: return "backend error";
    case MPX_ERR_NUMERIC: return "numerical failure";
    case MPX_ERR_UNSUPPORTED: return "unsupported";
    case MPX_ERR_INTERNAL: return "internal error";
    }
    return "unknown";
}

void *mpx_calloc(size_t count, size_t size) {
    if (count == 0 || size == 0) count = size = 1;
    return calloc(count, size);
}
