/* det_voc_parse.c — one Pascal VOC annotation file: the XML events (voc_xml.c, expat) mapped onto
 * the VOC subset we use, then every field and box checked. Paths used:
 *   annotation/filename, annotation/size/{width,height},
 *   annotation/object/{name,difficult}, annotation/object/bndbox/{xmin,ymin,xmax,ymax};
 * everything else (pose, truncated, part/..., source, ...) is ignored. Boxes are checked at the
 * end because <size> may come after the objects. */
#include <stdio.h>
#include <string.h>

#include "data/det_voc.h"
#include "data/voc_xml.h"
#include "mpx/detect.h"

enum { MAX_DIGITS = 12 };
enum { F_XMIN, F_YMIN, F_XMAX, F_YMAX };
static const char *const coord_names[4] = {"xmin", "ymin", "xmax", "ymax"};

typedef struct {
    const char *path;
    mpx_voc_annotation *a;
    char parents[MPX_XML_MAX_DEPTH + 1][MPX_XML_MAX_NAME + 1]; /* element name per depth */
    int have_filename, have_size, have_width, have_height;
    int in_object; /* index of the open <object>, -1 outside */
    int have_name, have_bndbox, have_coord[4], have_difficult;
} voc_state;

/* Text without leading and trailing XML whitespace, into out[cap]; 0 when it does not fit. */
static int trimmed(const char *text, char *out, size_t cap) {
    const char *s = text, *e = text + strlen(text);
    while (s < e && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')) s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) e--;
    if ((size_t)(e - s) >= cap) return 0;
    memcpy(out, s, (size_t)(e - s));
    out[e - s] = '\0';
    return 1;
}

/* A plain decimal: [+-]digits[.digits], at most MAX_DIGITS digits (no exponent, inf or nan),
 * so every accepted value is exact enough and far from overflow. */
int mpx_voc_parse_decimal(const char *s, double *out) {
    int neg = 0, digits = 0, frac = 0;
    double v = 0, scale = 1;
    if (*s == '+' || *s == '-') neg = *s++ == '-';
    for (; *s; s++) {
        if (*s == '.' && !frac) {
            frac = 1;
            continue;
        }
        if (*s < '0' || *s > '9' || ++digits > MAX_DIGITS) return 0;
        v = v * 10 + (*s - '0');
        if (frac) scale *= 10;
    }
    if (digits == 0) return 0;
    *out = (neg ? -v : v) / scale;
    return 1;
}

static mpx_status bad_text(const voc_state *st, const char *field, const char *text, int line,
                           const char *why) {
    char shown[64];
    snprintf(shown, sizeof shown, "%.60s", text);
    if (st->in_object >= 0)
        return mpx_fail(MPX_ERR_INPUT, "annotation '%s' object %d (line %d): <%s> '%s' %s",
                        st->path, st->in_object, line, field, shown, why);
    return mpx_fail(MPX_ERR_INPUT, "annotation '%s' (line %d): <%s> '%s' %s", st->path, line, field,
                    shown, why);
}

static mpx_status duplicate(const voc_state *st, const char *field, int line) {
    if (st->in_object >= 0)
        return mpx_fail(MPX_ERR_INPUT, "annotation '%s' object %d (line %d): duplicate <%s>",
                        st->path, st->in_object, line, field);
    return mpx_fail(MPX_ERR_INPUT, "annotation '%s' (line %d): duplicate <%s>", st->path, line,
                    field);
}

static mpx_status size_field(voc_state *st, const char *name, const char *text, int line) {
    int *have = strcmp(name, "width") == 0 ? &st->have_width : &st->have_height;
    int *dst = strcmp(name, "width") == 0 ? &st->a->width : &st->a->height;
    char t[64];
    double v;
    if (*have) return duplicate(st, name, line);
    if (!trimmed(text, t, sizeof t) || !mpx_voc_parse_decimal(t, &v) || v < 1 || v > 65535 ||
        v != (int)v)
        return bad_text(st, name, text, line, "is not an image side in pixels (1..65535)");
    *dst = (int)v;
    *have = 1;
    return MPX_OK;
}

static mpx_status object_end(voc_state *st, int line) {
    int k = st->in_object;
    if (!st->have_name)
        return mpx_fail(MPX_ERR_INPUT, "annotation '%s' object %d (ending line %d) has no <name>",
                        st->path, k, line);
    if (!st->have_bndbox)
        return mpx_fail(MPX_ERR_INPUT, "annotation '%s' object %d (ending line %d) has no <bndbox>",
                        st->path, k, line);
    for (int c = 0; c < 4; c++)
        if (!st->have_coord[c])
            return mpx_fail(MPX_ERR_INPUT,
                            "annotation '%s' object %d (ending line %d): <bndbox> has no <%s>",
                            st->path, k, line, coord_names[c]);
    st->a->n_objects++;
    st->in_object = -1;
    return MPX_OK;
}

static mpx_status on_start(voc_state *st, int depth, const char *name, int line) {
    if (depth == 1 && strcmp(name, "annotation") != 0)
        return mpx_fail(MPX_ERR_INPUT,
                        "annotation '%s': the root element is <%s>, not <annotation> (not a "
                        "Pascal VOC file)",
                        st->path, name);
    const char *parent = st->parents[depth - 1];
    if (depth == 2 && strcmp(name, "object") == 0) {
        if (st->a->n_objects == MPX_DET_MAX_BOXES)
            return mpx_fail(MPX_ERR_INPUT,
                            "annotation '%s' (line %d): more than %d objects in one image",
                            st->path, line, MPX_DET_MAX_BOXES);
        st->in_object = st->a->n_objects;
        memset(&st->a->objects[st->in_object], 0, sizeof st->a->objects[0]);
        st->have_name = st->have_bndbox = st->have_difficult = 0;
        memset(st->have_coord, 0, sizeof st->have_coord);
    } else if (depth == 2 && strcmp(name, "size") == 0) {
        if (st->have_size) return duplicate(st, name, line);
        st->have_size = 1;
    } else if (depth == 3 && strcmp(parent, "object") == 0 && strcmp(name, "bndbox") == 0) {
        if (st->have_bndbox) return duplicate(st, name, line);
        st->have_bndbox = 1;
    }
    return MPX_OK;
}

static mpx_status on_end(voc_state *st, int depth, const char *name, const char *text, int line) {
    const char *parent = st->parents[depth - 1];
    if (depth == 2 && strcmp(name, "object") == 0) return object_end(st, line);
    if (depth == 2 && strcmp(name, "filename") == 0) {
        char *f = st->a->filename;
        if (st->have_filename) return duplicate(st, name, line);
        if (!trimmed(text, f, MPX_VOC_NAME_MAX) || !f[0] || strchr(f, '/') || strchr(f, '\\') ||
            strcmp(f, ".") == 0 || strcmp(f, "..") == 0)
            return bad_text(st, name, text, line,
                            "is not a plain file name (empty, too long, or with a directory)");
        for (const char *c = f; *c; c++)
            if ((unsigned char)*c < 0x20)
                return bad_text(st, name, text, line, "has a control character");
        st->have_filename = 1;
        return MPX_OK;
    }
    if (depth == 3 && strcmp(parent, "size") == 0 &&
        (strcmp(name, "width") == 0 || strcmp(name, "height") == 0))
        return size_field(st, name, text, line);
    if (st->in_object < 0) return MPX_OK;
    mpx_voc_object *o = &st->a->objects[st->in_object];
    if (depth == 3 && strcmp(name, "name") == 0) {
        if (st->have_name) return duplicate(st, name, line);
        if (!trimmed(text, o->name, sizeof o->name) || !o->name[0])
            return bad_text(st, name, text, line, "is not a class name (empty or too long)");
        for (const char *c = o->name; *c; c++)
            if ((unsigned char)*c < 0x20)
                return bad_text(st, name, text, line, "has a control character");
        st->have_name = 1;
    } else if (depth == 3 && strcmp(name, "difficult") == 0) {
        char t[8];
        if (st->have_difficult) return duplicate(st, name, line);
        if (!trimmed(text, t, sizeof t) || (strcmp(t, "0") != 0 && strcmp(t, "1") != 0))
            return bad_text(st, name, text, line, "is not 0 or 1");
        o->difficult = t[0] == '1';
        st->have_difficult = 1;
    } else if (depth == 4 && strcmp(parent, "bndbox") == 0) {
        for (int c = 0; c < 4; c++) {
            if (strcmp(name, coord_names[c]) != 0) continue;
            char t[64];
            double v;
            if (st->have_coord[c]) return duplicate(st, name, line);
            if (!trimmed(text, t, sizeof t) || !mpx_voc_parse_decimal(t, &v))
                return bad_text(st, name, text, line,
                                "is not a plain decimal number of at most 12 digits");
            double *dst[4] = {&o->xmin, &o->ymin, &o->xmax, &o->ymax};
            *dst[c] = v;
            st->have_coord[c] = 1;
        }
    }
    return MPX_OK;
}

static mpx_status on_event(void *user, int depth, const char *name, const char *text, int line) {
    voc_state *st = user;
    if (!text) {
        snprintf(st->parents[depth], sizeof st->parents[depth], "%s", name);
        return on_start(st, depth, name, line);
    }
    return on_end(st, depth, name, text, line);
}

/* Every box inside the image and not empty: lo <= xmin < xmax <= width (lo 1 or 0). */
static mpx_status check_boxes(const voc_state *st, int zero_based) {
    const mpx_voc_annotation *a = st->a;
    double lo = zero_based ? 0 : 1;
    for (int k = 0; k < a->n_objects; k++) {
        const mpx_voc_object *o = &a->objects[k];
        if (!(o->xmax > o->xmin) || !(o->ymax > o->ymin))
            return mpx_fail(MPX_ERR_INPUT,
                            "annotation '%s' object %d ('%s'): empty or inverted box xmin %g "
                            "ymin %g xmax %g ymax %g (need xmin < xmax and ymin < ymax)",
                            st->path, k, o->name, o->xmin, o->ymin, o->xmax, o->ymax);
        if (o->xmin < lo || o->ymin < lo || o->xmax > a->width || o->ymax > a->height)
            return mpx_fail(MPX_ERR_INPUT,
                            "annotation '%s' object %d ('%s'): box xmin %g ymin %g xmax %g ymax "
                            "%g lies outside the %dx%d image (%s coordinates: %g <= x <= width)",
                            st->path, k, o->name, o->xmin, o->ymin, o->xmax, o->ymax, a->width,
                            a->height, zero_based ? "0-based" : "VOC 1-based", lo);
    }
    return MPX_OK;
}

mpx_status mpx_voc_parse(const char *text, size_t n, const char *path, int zero_based,
                         mpx_voc_annotation *out) {
    memset(out, 0, sizeof *out);
    voc_state st;
    memset(&st, 0, sizeof st);
    st.path = path;
    st.a = out;
    st.in_object = -1;
    mpx_status s = mpx_xml_parse(text, n, path, on_event, &st);
    if (s == MPX_OK && !st.have_filename)
        s = mpx_fail(MPX_ERR_INPUT, "annotation '%s' has no <filename>", path);
    if (s == MPX_OK && (!st.have_size || !st.have_width || !st.have_height))
        s = mpx_fail(MPX_ERR_INPUT, "annotation '%s' has no <size> with <width> and <height>",
                     path);
    if (s == MPX_OK) s = check_boxes(&st, zero_based);
    if (s != MPX_OK) memset(out, 0, sizeof *out);
    return s;
}

mpx_det_box mpx_voc_object_box(const mpx_voc_object *o, int width, int height, int zero_based) {
    double off = zero_based ? 0 : 1;
    mpx_det_box b = {(float)((o->xmin - off) / width),
                     (float)((o->ymin - off) / height),
                     (float)(o->xmax / width),
                     (float)(o->ymax / height),
                     0,
                     0};
    return b;
}
