/* det_xml.c — see det_xml.h. One forward pass over the bytes; every read checks the end of
 * the buffer first, so a file cut anywhere fails with "truncated" instead of reading past it. */
#include "data/det_xml.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *p, *end, *path;
    int line;
    int depth, root_seen, root_done;
    char stack[MPX_XML_MAX_DEPTH][MPX_XML_MAX_NAME + 1];
    int has_child; /* the innermost open element has child elements */
    char text[MPX_XML_MAX_TEXT + 1];
    size_t tlen;
    mpx_xml_handler handler;
    void *user;
} parser;

static mpx_status fail(const parser *x, const char *what) {
    return mpx_fail(MPX_ERR_INPUT, "annotation '%s' line %d: %s", x->path, x->line, what);
}

static mpx_status truncated(const parser *x, const char *inside) {
    return mpx_fail(MPX_ERR_INPUT,
                    "annotation '%s' is truncated: the file ends inside %s (line %d)", x->path,
                    inside, x->line);
}

static int starts(const parser *x, const char *s) {
    size_t k = strlen(s);
    return (size_t)(x->end - x->p) >= k && memcmp(x->p, s, k) == 0;
}

/* Advance to just after `close`, counting lines; 0 when the file ends first. */
static int skip_past(parser *x, const char *close) {
    size_t k = strlen(close);
    while ((size_t)(x->end - x->p) >= k) {
        if (memcmp(x->p, close, k) == 0) {
            x->p += k;
            return 1;
        }
        if (*x->p == '\n') x->line++;
        x->p++;
    }
    x->p = x->end;
    return 0;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void skip_space(parser *x) {
    while (x->p < x->end && is_space(*x->p)) {
        if (*x->p == '\n') x->line++;
        x->p++;
    }
}

static int name_start(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || c >= 0x80;
}

static int name_char(unsigned char c) {
    return name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

static mpx_status read_name(parser *x, char *out, const char *inside) {
    if (x->p >= x->end) return truncated(x, inside);
    if (!name_start((unsigned char)*x->p)) return fail(x, "expected an element or attribute name");
    size_t k = 0;
    while (x->p < x->end && name_char((unsigned char)*x->p)) {
        if (k == MPX_XML_MAX_NAME) return fail(x, "name longer than 255 bytes");
        out[k++] = *x->p++;
    }
    out[k] = '\0';
    if (x->p >= x->end) return truncated(x, inside);
    return MPX_OK;
}

static mpx_status add_text(parser *x, const char *s, size_t k) {
    if (x->tlen + k > MPX_XML_MAX_TEXT) return fail(x, "text longer than 4095 bytes");
    memcpy(x->text + x->tlen, s, k);
    x->tlen += k;
    return MPX_OK;
}

/* UTF-8 encoding of code point cp (valid XML characters only). */
static mpx_status add_codepoint(parser *x, uint32_t cp) {
    char u[4];
    size_t k;
    if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) ||
        (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r'))
        return fail(x, "character reference to an invalid character");
    if (cp < 0x80) {
        u[0] = (char)cp;
        k = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        k = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        k = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        k = 4;
    }
    return add_text(x, u, k);
}

/* An entity reference at x->p ('&'), decoded into the text. */
static mpx_status entity(parser *x) {
    static const struct {
        const char *name;
        char ch;
    } known[] = {{"lt", '<'}, {"gt", '>'}, {"amp", '&'}, {"quot", '"'}, {"apos", '\''}};
    size_t avail = (size_t)(x->end - x->p), look = avail < 12 ? avail : 12;
    const char *semi = memchr(x->p, ';', look);
    if (!semi) {
        if (avail < 12) return truncated(x, "an entity reference");
        return fail(x, "'&' that does not start an entity reference (write &amp;)");
    }
    const char *s = x->p + 1;
    size_t len = (size_t)(semi - s);
    x->p = semi + 1;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strlen(known[i].name) == len && memcmp(s, known[i].name, len) == 0)
            return add_text(x, &known[i].ch, 1);
    if (len >= 2 && s[0] == '#') {
        int hex = s[1] == 'x';
        size_t i = hex ? 2 : 1;
        uint32_t cp = 0;
        if (i == len) return fail(x, "empty character reference");
        for (; i < len; i++) {
            char c = s[i];
            int d = (c >= '0' && c <= '9')          ? c - '0'
                    : (hex && c >= 'a' && c <= 'f') ? c - 'a' + 10
                    : (hex && c >= 'A' && c <= 'F') ? c - 'A' + 10
                                                    : -1;
            if (d < 0 || cp > 0x10FFFF) return fail(x, "malformed character reference");
            cp = cp * (hex ? 16u : 10u) + (uint32_t)d;
        }
        return add_codepoint(x, cp);
    }
    return fail(x, "unknown entity (only &lt; &gt; &amp; &quot; &apos; and &#N; are allowed)");
}

/* Skip the attributes of a start tag up to '>' or "/>"; *self_closing set for the latter. */
static mpx_status attributes(parser *x, int *self_closing) {
    char name[MPX_XML_MAX_NAME + 1];
    for (;;) {
        skip_space(x);
        if (x->p >= x->end) return truncated(x, "a start tag");
        if (*x->p == '>') {
            x->p++;
            *self_closing = 0;
            return MPX_OK;
        }
        if (*x->p == '/') {
            if (x->end - x->p < 2) return truncated(x, "a start tag");
            if (x->p[1] != '>') return fail(x, "'/' inside a start tag");
            x->p += 2;
            *self_closing = 1;
            return MPX_OK;
        }
        MPX_TRY(read_name(x, name, "a start tag"));
        skip_space(x);
        if (x->p >= x->end) return truncated(x, "a start tag");
        if (*x->p != '=') return fail(x, "attribute without '=' and a quoted value");
        x->p++;
        skip_space(x);
        if (x->p >= x->end) return truncated(x, "a start tag");
        char q = *x->p;
        if (q != '"' && q != '\'') return fail(x, "attribute value without quotes");
        for (x->p++;; x->p++) {
            if (x->p >= x->end) return truncated(x, "an attribute value");
            if (*x->p == q) break;
            if (*x->p == '<' || *x->p == '\0') return fail(x, "'<' or NUL in an attribute value");
            if (*x->p == '\n') x->line++;
        }
        x->p++;
    }
}

static mpx_status start_tag(parser *x) {
    x->p++; /* '<' */
    if (x->root_done) return fail(x, "a second root element");
    if (x->depth == MPX_XML_MAX_DEPTH) return fail(x, "elements nested deeper than 32");
    char *name = x->stack[x->depth];
    MPX_TRY(read_name(x, name, "a start tag"));
    int self_closing = 0;
    MPX_TRY(attributes(x, &self_closing));
    x->depth++;
    x->root_seen = 1;
    x->has_child = 0;
    x->tlen = 0;
    MPX_TRY(x->handler(x->user, x->depth, name, NULL, x->line));
    if (!self_closing) return MPX_OK;
    x->text[0] = '\0';
    MPX_TRY(x->handler(x->user, x->depth, name, x->text, x->line));
    x->depth--;
    x->has_child = 1; /* the parent now has a child */
    if (x->depth == 0) x->root_done = 1;
    return MPX_OK;
}

static mpx_status end_tag(parser *x) {
    x->p += 2; /* "</" */
    char name[MPX_XML_MAX_NAME + 1];
    MPX_TRY(read_name(x, name, "an end tag"));
    skip_space(x);
    if (x->p >= x->end) return truncated(x, "an end tag");
    if (*x->p != '>') return fail(x, "malformed end tag");
    x->p++;
    if (x->depth == 0 || strcmp(name, x->stack[x->depth - 1]) != 0)
        return mpx_fail(MPX_ERR_INPUT, "annotation '%s' line %d: </%s> does not close <%s>",
                        x->path, x->line, name, x->depth ? x->stack[x->depth - 1] : "(nothing)");
    if (x->has_child) x->tlen = 0;
    x->text[x->tlen] = '\0';
    MPX_TRY(x->handler(x->user, x->depth, name, x->text, x->line));
    x->depth--;
    x->has_child = 1;
    x->tlen = 0;
    if (x->depth == 0) x->root_done = 1;
    return MPX_OK;
}

/* Character data up to the next '<' (outside the root only whitespace is allowed). */
static mpx_status char_data(parser *x) {
    while (x->p < x->end && *x->p != '<') {
        char c = *x->p;
        if (c == '\0') return fail(x, "NUL byte (not a text file)");
        if (x->depth == 0) {
            if (!is_space(c)) return fail(x, "text outside the root element");
            if (c == '\n') x->line++;
            x->p++;
            continue;
        }
        if (c == '&') {
            MPX_TRY(entity(x));
            continue;
        }
        if (c == '\n') x->line++;
        MPX_TRY(add_text(x, &c, 1));
        x->p++;
    }
    return MPX_OK;
}

mpx_status mpx_xml_parse(const char *buf, size_t n, const char *path, mpx_xml_handler handler,
                         void *user) {
    parser x;
    memset(&x, 0, sizeof x);
    x.p = buf;
    x.end = buf + n;
    x.path = path;
    x.line = 1;
    x.handler = handler;
    x.user = user;
    if (starts(&x, "\xEF\xBB\xBF")) x.p += 3;
    while (x.p < x.end) {
        if (*x.p != '<') {
            MPX_TRY(char_data(&x));
            continue;
        }
        if (starts(&x, "<?")) {
            if (!skip_past(&x, "?>")) return truncated(&x, "a <?...?> declaration");
        } else if (starts(&x, "<!--")) {
            if (!skip_past(&x, "-->")) return truncated(&x, "a comment");
        } else if (starts(&x, "<![CDATA[")) {
            if (x.depth == 0) return fail(&x, "CDATA outside the root element");
            x.p += 9;
            const char *s = x.p;
            int line = x.line;
            if (!skip_past(&x, "]]>")) return truncated(&x, "a CDATA section");
            size_t k = (size_t)(x.p - 3 - s);
            if (memchr(s, '\0', k)) {
                x.line = line;
                return fail(&x, "NUL byte (not a text file)");
            }
            MPX_TRY(add_text(&x, s, k));
        } else if (starts(&x, "<!")) {
            return fail(&x, "DOCTYPE and other <!...> declarations are not supported");
        } else if (starts(&x, "</")) {
            MPX_TRY(end_tag(&x));
        } else {
            if (x.end - x.p < 2) return truncated(&x, "a tag");
            MPX_TRY(start_tag(&x));
        }
    }
    if (x.depth > 0) {
        char what[MPX_XML_MAX_NAME + 16];
        snprintf(what, sizeof what, "element <%s>", x.stack[x.depth - 1]);
        return truncated(&x, what);
    }
    if (!x.root_seen) return fail(&x, "no root element (empty file?)");
    return MPX_OK;
}
