/* config_parse.c — the INI reader behind mpx_config_load and mpx_config_parse_string.
 *
 * A line is blank, a comment (';' or '#' first), `[section]`, or `key = value`. A ';' or '#'
 * that begins the value or follows whitespace starts a comment. `include = path` may appear
 * anywhere; the path is relative to the including file's directory and the included lines
 * are read in place, so later lines override them. Each file keeps its own current section,
 * so an included file starts outside any section and the includer's section resumes after.
 *
 * Hostile input: CRLF and a leading UTF-8 BOM are accepted; NUL and other control bytes are
 * errors naming the line; there is no line-length limit (files are read whole), but all input
 * together, counting every include each time it is read, is capped at MAX_INPUT bytes, which
 * also stops a file that includes another many times over from blowing up exponentially.
 * Include loops (same device and inode) and nesting deeper than MAX_DEPTH files are errors.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_internal.h"
#include "mpx/config.h"

enum { MAX_DEPTH = 32, MAX_ENTRIES = 1 << 16 }; /* entries: distinct keys and sections */
#define MAX_INPUT ((size_t)16 << 20)

typedef struct {
    const char *name; /* as shown in messages and origins */
    dev_t dev;
    ino_t ino;
    int has_id; /* 0 for text given to mpx_config_parse_string */
} frame;

typedef struct {
    mpx_config *cfg;
    frame stack[MAX_DEPTH];
    int depth;
    size_t bytes; /* input read so far, all files */
} parser;

/* printf into a fresh allocation; NULL when out of memory. */
static char *str_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *str_printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static int is_blank(char c) { return c == ' ' || c == '\t'; }

static char *trim(char *s) {
    while (is_blank(*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && is_blank(s[n - 1])) s[--n] = '\0';
    return s;
}

/* Cut the line at a ';' or '#' that starts it (after indentation) or follows whitespace. */
static void strip_comment(char *s) {
    for (size_t i = 0; s[i]; i++) {
        if ((s[i] == ';' || s[i] == '#') && (i == 0 || is_blank(s[i - 1]))) {
            s[i] = '\0';
            return;
        }
    }
}

/* "cannot open 'path': why", or "from: cannot open include 'path': why" for an include. */
static mpx_status file_error(const char *verb, const char *path, const char *from,
                             const char *why) {
    if (from)
        return mpx_fail(MPX_ERR_INPUT, "%s: cannot %s include '%s': %s", from, verb, path, why);
    return mpx_fail(MPX_ERR_INPUT, "cannot %s '%s': %s", verb, path, why);
}

/* Open a regular file (O_NONBLOCK so a FIFO cannot hang us before it is refused). */
static mpx_status open_file(const char *path, const char *from, int *fd_out, struct stat *st) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return file_error("open", path, from, strerror(errno));
    const char *why = NULL;
    if (fstat(fd, st) != 0)
        why = strerror(errno);
    else if (S_ISDIR(st->st_mode))
        why = strerror(EISDIR);
    else if (!S_ISREG(st->st_mode))
        why = "not a regular file";
    if (why) {
        mpx_status s = file_error("open", path, from, why);
        close(fd);
        return s;
    }
    *fd_out = fd;
    return MPX_OK;
}

/* Read the whole file, NUL-terminated, counting it against the input budget. */
static mpx_status read_all(parser *p, int fd, const char *path, const char *from, size_t size_hint,
                           char **out, size_t *len_out) {
    size_t cap = (size_hint < MAX_INPUT ? size_hint : MAX_INPUT) + 1, len = 0;
    char *buf = malloc(cap + 1);
    if (!buf) return mpx_fail(MPX_ERR_NOMEM, "out of memory reading '%s'", path);
    for (;;) {
        if (len == cap) {
            char *grown = realloc(buf, 2 * cap + 1);
            if (!grown) {
                free(buf);
                return mpx_fail(MPX_ERR_NOMEM, "out of memory reading '%s'", path);
            }
            buf = grown;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            mpx_status s = file_error("read", path, from, strerror(errno));
            free(buf);
            return s;
        }
        if (r == 0) break;
        len += (size_t)r;
        if (p->bytes + len > MAX_INPUT) {
            free(buf);
            return file_error("read", path, from,
                              "configuration larger than 16 MiB (all files and includes together)");
        }
    }
    p->bytes += len;
    buf[len] = '\0';
    *out = buf;
    *len_out = len;
    return MPX_OK;
}

static mpx_status parse_buffer(parser *p, char *text, size_t len, const char *name,
                               const char *dir);

/* "dir/" of a path ("" when it has no directory), the prefix for its relative includes. */
static char *dir_prefix(const char *path) {
    const char *slash = strrchr(path, '/');
    return strndup(path, slash ? (size_t)(slash - path) + 1 : 0);
}

/* The loop message: "a.cfg -> b.cfg -> a.cfg", from the first file of the cycle. */
static mpx_status loop_error(const parser *p, int first, const char *path, const char *from) {
    size_t n = strlen(path) + 1;
    for (int i = first; i < p->depth; i++) n += strlen(p->stack[i].name) + 4;
    char *chain = malloc(n);
    if (!chain) return mpx_fail(MPX_ERR_NOMEM, "out of memory reporting an include loop");
    chain[0] = '\0';
    for (int i = first; i < p->depth; i++) {
        strcat(chain, p->stack[i].name);
        strcat(chain, " -> ");
    }
    strcat(chain, path);
    mpx_status s = mpx_fail(MPX_ERR_INPUT, "%s: include loop: %s", from, chain);
    free(chain);
    return s;
}

/* Read `path` in place. `from` is "file:line" of the include, NULL for the top file. */
static mpx_status parse_file(parser *p, const char *path, const char *from) {
    int fd = -1;
    struct stat st;
    MPX_TRY(open_file(path, from, &fd, &st));
    for (int i = 0; i < p->depth; i++) {
        if (p->stack[i].has_id && p->stack[i].dev == st.st_dev && p->stack[i].ino == st.st_ino) {
            close(fd);
            return loop_error(p, i, path, from);
        }
    }
    if (p->depth == MAX_DEPTH) {
        close(fd);
        return mpx_fail(MPX_ERR_INPUT, "%s: include '%s' nested deeper than %d files", from, path,
                        MAX_DEPTH);
    }
    char *text = NULL;
    size_t len = 0;
    mpx_status s = read_all(p, fd, path, from, (size_t)st.st_size, &text, &len);
    close(fd);
    if (s != MPX_OK) return s;
    char *dir = dir_prefix(path);
    if (!dir) {
        free(text);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory reading '%s'", path);
    }
    p->stack[p->depth++] = (frame){path, st.st_dev, st.st_ino, 1};
    s = parse_buffer(p, text, len, path, dir);
    p->depth--;
    free(dir);
    free(text);
    return s;
}

static mpx_status include(parser *p, const char *rel, const char *name, long line,
                          const char *dir) {
    if (!*rel) return mpx_fail(MPX_ERR_INPUT, "%s:%ld: include needs a path", name, line);
    char *path = rel[0] == '/' ? strdup(rel) : str_printf("%s%s", dir, rel);
    char *from = str_printf("%s:%ld", name, line);
    mpx_status s = (path && from) ? parse_file(p, path, from)
                                  : mpx_fail(MPX_ERR_NOMEM, "out of memory for an include");
    free(path);
    free(from);
    return s;
}

/* Store one entry; past MAX_ENTRIES the input is not a configuration (and would cost ~200
 * bytes of memory per line). */
static mpx_status store(parser *p, const char *section, const char *key, const char *value,
                        const char *name, long line) {
    char *origin = str_printf("%s:%ld", name, line);
    if (!origin) return mpx_fail(MPX_ERR_NOMEM, "out of memory reading '%s'", name);
    mpx_status st = mpx_cfg_store(p->cfg, section, key, value, origin);
    free(origin);
    if (st == MPX_OK && p->cfg->n > MAX_ENTRIES)
        return mpx_fail(MPX_ERR_INPUT, "%s:%ld: more than %d distinct keys and sections", name,
                        line, MAX_ENTRIES);
    return st;
}

/* One line, NUL-terminated and free of control bytes. `section` is this file's current one. */
static mpx_status parse_line(parser *p, char *s, const char *name, long line, const char *dir,
                             char **section) {
    char clip[MPX_CFG_CLIP_CAP];
    strip_comment(s);
    s = trim(s);
    if (!*s) return MPX_OK;
    if (*s == '[') {
        char *rb = strchr(s, ']');
        if (!rb)
            return mpx_fail(MPX_ERR_INPUT, "%s:%ld: unterminated section header '%s'", name, line,
                            mpx_cfg_clip(s, clip));
        if (rb[1])
            return mpx_fail(MPX_ERR_INPUT, "%s:%ld: unexpected text after ']': '%s'", name, line,
                            mpx_cfg_clip(rb + 1, clip));
        *rb = '\0';
        char *sec = trim(s + 1);
        if (!mpx_cfg_name_ok(sec))
            return mpx_fail(MPX_ERR_INPUT, "%s:%ld: invalid section name '%s' (use a-z, 0-9, _)",
                            name, line, mpx_cfg_clip(sec, clip));
        *section = sec;
        return store(p, sec, NULL, NULL, name, line);
    }
    char *eq = strchr(s, '=');
    if (!eq)
        return mpx_fail(MPX_ERR_INPUT, "%s:%ld: expected 'key = value' or '[section]', got '%s'",
                        name, line, mpx_cfg_clip(s, clip));
    *eq = '\0';
    char *key = trim(s), *value = trim(eq + 1);
    if (*value == ';' || *value == '#') *value = '\0'; /* "key =;x": a comment, as documented */
    if (!*key) return mpx_fail(MPX_ERR_INPUT, "%s:%ld: empty key before '='", name, line);
    if (!mpx_cfg_name_ok(key))
        return mpx_fail(MPX_ERR_INPUT, "%s:%ld: invalid key '%s' (use a-z, 0-9, _)", name, line,
                        mpx_cfg_clip(key, clip));
    if (strcmp(key, "include") == 0) return include(p, value, name, line, dir);
    if (!*section)
        return mpx_fail(MPX_ERR_INPUT,
                        "%s:%ld: key '%s' before any [section] (only include may appear there)",
                        name, line, mpx_cfg_clip(key, clip));
    return store(p, *section, key, value, name, line);
}

/* Split `text` (len bytes plus a terminating NUL, modified in place) into lines. */
static mpx_status parse_buffer(parser *p, char *text, size_t len, const char *name,
                               const char *dir) {
    char *section = NULL;
    size_t pos = 0;
    long line = 0;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) pos = 3;
    while (pos < len) {
        line++;
        char *s = text + pos;
        char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + 1;
        if (n > 0 && s[n - 1] == '\r') n--;
        s[n] = '\0';
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)s[i];
            if (c == 0)
                return mpx_fail(MPX_ERR_INPUT, "%s:%ld: NUL byte in line (not a text file?)", name,
                                line);
            if ((c < 0x20 && c != '\t') || c == 0x7f)
                return mpx_fail(MPX_ERR_INPUT, "%s:%ld: control character 0x%02x in line", name,
                                line, c);
        }
        MPX_TRY(parse_line(p, s, name, line, dir, &section));
    }
    return MPX_OK;
}

mpx_status mpx_config_load(const char *path, mpx_config **out) {
    if (!out) return mpx_fail(MPX_ERR_INTERNAL, "mpx_config_load: no output pointer");
    *out = NULL;
    if (!path || !*path) return mpx_fail(MPX_ERR_INPUT, "no configuration file given");
    parser p = {0};
    MPX_TRY(mpx_config_new(&p.cfg));
    mpx_status s = parse_file(&p, path, NULL);
    if (s != MPX_OK) {
        mpx_config_free(p.cfg);
        return s;
    }
    *out = p.cfg;
    return MPX_OK;
}

mpx_status mpx_config_parse_string(const char *text, const char *name, const char *base_dir,
                                   mpx_config **out) {
    if (!out) return mpx_fail(MPX_ERR_INTERNAL, "mpx_config_parse_string: no output pointer");
    *out = NULL;
    if (!name) name = "<string>";
    if (!text) return mpx_fail(MPX_ERR_INPUT, "%s: no text", name);
    size_t len = strlen(text);
    if (len > MAX_INPUT)
        return mpx_fail(MPX_ERR_INPUT, "%s: configuration larger than 16 MiB", name);
    char *copy = strdup(text);
    char *dir = !base_dir || !*base_dir                 ? strdup("")
                : base_dir[strlen(base_dir) - 1] == '/' ? strdup(base_dir)
                                                        : str_printf("%s/", base_dir);
    parser p = {.bytes = len};
    mpx_status s = (copy && dir) ? mpx_config_new(&p.cfg)
                                 : mpx_fail(MPX_ERR_NOMEM, "out of memory parsing %s", name);
    if (s == MPX_OK) {
        p.stack[p.depth++] = (frame){name, 0, 0, 0};
        s = parse_buffer(&p, copy, len, name, dir);
    }
    free(copy);
    free(dir);
    if (s != MPX_OK) {
        mpx_config_free(p.cfg);
        return s;
    }
    *out = p.cfg;
    return MPX_OK;
}
