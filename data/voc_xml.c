/* voc_xml.c — see voc_xml.h. expat parses; this file keeps the element stack and each leaf
 * element's text, enforces the limits, and turns expat's error codes into messages that say
 * what is wrong with the file (expat's own text where there is nothing better to say). */
#include "data/voc_xml.h"

#include <expat.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    XML_Parser p;
    const char *buf, *path;
    size_t n;
    mpx_xml_handler handler;
    void *user;
    mpx_status st;  /* a handler's or a limit's failure (the parse then stops) */
    int depth, root_seen;
    char names[MPX_XML_MAX_DEPTH + 1][MPX_XML_MAX_NAME + 1];
    int has_child[MPX_XML_MAX_DEPTH + 1];
    char text[MPX_XML_MAX_TEXT + 1];
    size_t text_n;
} reader;

static int line_of(const reader *r) { return (int)XML_GetCurrentLineNumber(r->p); }

static void stop(reader *r, mpx_status st) {
    if (r->st == MPX_OK) r->st = st;
    XML_StopParser(r->p, XML_FALSE);
}

static void fail_here(reader *r, const char *what) {
    stop(r, mpx_fail(MPX_ERR_INPUT, "annotation '%s' line %d: %s", r->path, line_of(r), what));
}

static void XMLCALL on_start(void *u, const XML_Char *name, const XML_Char **attrs) {
    reader *r = u;
    (void)attrs;
    if (r->depth == MPX_XML_MAX_DEPTH) return fail_here(r, "elements nested deeper than 32");
    if (strlen(name) > MPX_XML_MAX_NAME) return fail_here(r, "name longer than 255 bytes");
    r->has_child[r->depth] = 1;
    r->depth++;
    r->root_seen = 1;
    snprintf(r->names[r->depth], sizeof r->names[r->depth], "%s", name);
    r->has_child[r->depth] = 0;
    r->text_n = 0;
    mpx_status st = r->handler(r->user, r->depth, name, NULL, line_of(r));
    if (st != MPX_OK) stop(r, st);
}

static void XMLCALL on_end(void *u, const XML_Char *name) {
    reader *r = u;
    r->text[r->text_n] = '\0';
    mpx_status st =
        r->handler(r->user, r->depth, name, r->has_child[r->depth] ? "" : r->text, line_of(r));
    r->depth--;
    r->text_n = 0;
    if (st != MPX_OK) stop(r, st);
}

static void XMLCALL on_text(void *u, const XML_Char *s, int len) {
    reader *r = u;
    if (r->text_n + (size_t)len > MPX_XML_MAX_TEXT) return fail_here(r, "text longer than 4095 bytes");
    memcpy(r->text + r->text_n, s, (size_t)len);
    r->text_n += (size_t)len;
}

static void XMLCALL on_doctype(void *u, const XML_Char *name, const XML_Char *sys,
                               const XML_Char *pub, int internal) {
    (void)name, (void)sys, (void)pub, (void)internal;
    fail_here(u, "DOCTYPE and other <!...> declarations are not supported");
}

/* The byte expat stopped at (0 past the end). */
static char at_error(const reader *r) {
    const XML_Index i = XML_GetCurrentByteIndex(r->p);
    return i >= 0 && (size_t)i < r->n ? r->buf[i] : 0;
}

/* What an expat error means for an annotation file, as the message to return. */
static mpx_status explain(reader *r, enum XML_Error code) {
    const int line = line_of(r);
    const char *what = XML_ErrorString(code);
    char buf[512];
    const XML_Index i = XML_GetCurrentByteIndex(r->p);
    const char c = at_error(r);
    switch (code) {
    case XML_ERROR_NO_ELEMENTS:
    case XML_ERROR_UNCLOSED_TOKEN:
    case XML_ERROR_UNCLOSED_CDATA_SECTION:
    case XML_ERROR_PARTIAL_CHAR:
        if (!r->root_seen && code == XML_ERROR_NO_ELEMENTS)
            return mpx_fail(MPX_ERR_INPUT, "annotation '%s' line %d: no root element (empty file?)",
                            r->path, line);
        if (r->depth > 0)
            snprintf(buf, sizeof buf, "element <%s>", r->names[r->depth]);
        else
            snprintf(buf, sizeof buf, "%s", code == XML_ERROR_NO_ELEMENTS ? "the prolog" : "a tag");
        return mpx_fail(MPX_ERR_INPUT, "annotation '%s' is truncated: the file ends inside %s (line %d)",
                        r->path, buf, line);
    case XML_ERROR_TAG_MISMATCH: {
        /* expat stops in the end tag that does not match: its name runs from after "</" */
        size_t b = i >= 0 ? (size_t)i : r->n;
        if (b < r->n && r->buf[b] == '<')
            b++;
        else
            while (b > 0 && b <= r->n && r->buf[b - 1] != '<') b--;
        if (b < r->n && r->buf[b] == '/') b++;
        const char *e = b < r->n ? r->buf + b : "";
        int len = 0;
        while (b + (size_t)len < r->n && e[len] != '>' && len < 64) len++;
        snprintf(buf, sizeof buf, "</%.*s> does not close <%s>", len, e,
                 r->depth > 0 ? r->names[r->depth] : "?");
        what = buf;
        break;
    }
    case XML_ERROR_UNDEFINED_ENTITY:
        what = "unknown entity (only &lt; &gt; &amp; &quot; &apos; and &#N; are allowed)";
        break;
    case XML_ERROR_BAD_CHAR_REF:
        what = "character reference to an invalid character";
        break;
    case XML_ERROR_JUNK_AFTER_DOC_ELEMENT:
        what = c == '<' ? "a second root element" : "text outside the root element";
        break;
    case XML_ERROR_INVALID_TOKEN:
    case XML_ERROR_SYNTAX:
    case XML_ERROR_UNKNOWN_ENCODING:
    case XML_ERROR_INCORRECT_ENCODING: {
        if (c == '\0' && i >= 0 && (size_t)i < r->n) {
            what = "NUL byte (not a text file)";
        } else if (c == '&' || (i > 0 && r->buf[i - 1] == '&')) {
            what = "'&' that does not start an entity reference (write &amp;)";
        } else if (c == '<' || (i > 0 && r->buf[i - 1] == '<')) {
            what = "expected an element or attribute name after '<'";
        } else {
            /* an attribute value without quotes: the token after '=' */
            XML_Index k = i;
            while (k > 0 && (r->buf[k - 1] == ' ' || r->buf[k - 1] == '\t')) k--;
            if (k > 0 && r->buf[k - 1] == '=') what = "attribute value without quotes";
        }
        break;
    }
    default: break;
    }
    return mpx_fail(MPX_ERR_INPUT, "annotation '%s' line %d: %s", r->path, line, what);
}

mpx_status mpx_xml_parse(const char *buf, size_t n, const char *path, mpx_xml_handler handler,
                         void *user) {
    reader rd;
    memset(&rd, 0, sizeof rd);
    reader *r = &rd;
    r->buf = buf, r->n = n, r->path = path, r->handler = handler, r->user = user;
    if (n > (size_t)0x7fffffff)
        return mpx_fail(MPX_ERR_INPUT, "annotation '%s' is larger than 2 GiB", path);
    r->p = XML_ParserCreate(NULL);
    if (!r->p) return mpx_fail(MPX_ERR_NOMEM, "out of memory reading annotation '%s'", path);
    XML_SetUserData(r->p, r);
    XML_SetElementHandler(r->p, on_start, on_end);
    XML_SetCharacterDataHandler(r->p, on_text);
    XML_SetStartDoctypeDeclHandler(r->p, on_doctype);
    mpx_status st = MPX_OK;
    if (XML_Parse(r->p, buf, (int)n, XML_TRUE) == XML_STATUS_ERROR)
        st = r->st != MPX_OK ? r->st : explain(r, XML_GetErrorCode(r->p));
    XML_ParserFree(r->p);
    return st;
}
