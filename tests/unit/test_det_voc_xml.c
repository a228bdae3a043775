/* test_det_voc_xml.c — the Pascal VOC annotation reader on generated text: valid files (the
 * raccoon style, and one using every XML feature annotation tools emit) give the right fields;
 * each hostile case gives MPX_ERR_INPUT with a message naming the file, the object and what
 * is wrong; every prefix of a valid file (truncation) and thousands of random byte mutations
 * are rejected or parsed without a crash (buffers are malloc'ed to their exact size, so the
 * sanitizer build catches any read past the end). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/detect.h"
#include "mpx/rng.h"
#include "testutil.h"

static const char *const RACCOON =
    "<annotation verified=\"yes\">\n"
    "\t<folder>images</folder>\n"
    "\t<filename>raccoon-1.jpg</filename>\n"
    "\t<path>/Users/datitran/Desktop/raccoon/images/raccoon-1.jpg</path>\n"
    "\t<source>\n\t\t<database>Unknown</database>\n\t</source>\n"
    "\t<size>\n\t\t<width>650</width>\n\t\t<height>417</height>\n\t\t<depth>3</depth>\n\t</size>\n"
    "\t<segmented>0</segmented>\n"
    "\t<object>\n\t\t<name>raccoon</name>\n\t\t<pose>Unspecified</pose>\n"
    "\t\t<truncated>0</truncated>\n\t\t<difficult>0</difficult>\n"
    "\t\t<bndbox>\n\t\t\t<xmin>81</xmin>\n\t\t\t<ymin>88</ymin>\n\t\t\t<xmax>522</xmax>\n"
    "\t\t\t<ymax>408</ymax>\n\t\t</bndbox>\n\t</object>\n"
    "</annotation>\n";

/* BOM, declaration, comments, CRLF, CDATA, entities, a character reference, self-closing tags,
 * single-quoted attributes, <part> boxes (ignored), size after the objects, decimals. */
static const char *const FANCY =
    "\xEF\xBB\xBF<?xml version=\"1.0\" encoding=\"utf-8\"?>\r\n"
    "<!-- written by a tool -->\r\n"
    "<annotation a='1' b=\"x > y\">\r\n"
    "  <filename> 000005.jpg </filename>\r\n"
    "  <object>\r\n"
    "    <name>salt &amp; pepper&#x21;</name><difficult>1</difficult>\r\n"
    "    <bndbox><xmin> 12.5 </xmin><ymin>+3</ymin><xmax>200</xmax><ymax>100.25</ymax></bndbox>\r\n"
    "    <part><name>head</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>999</xmax>"
    "<ymax>999</ymax></bndbox></part>\r\n"
    "  </object>\r\n"
    "  <segmented/>\r\n"
    "  <object><name><![CDATA[caf\xC3\xA9 <table>]]></name>"
    "<bndbox><xmin>1</xmin><ymin>1</ymin><xmax>500</xmax><ymax>375</ymax></bndbox></object>\r\n"
    "  <object><name>caf&#233;</name><bndbox><ymax>2</ymax><xmax>2</xmax><ymin>1</ymin>"
    "<xmin>1</xmin></bndbox><!-- a comment inside --></object>\r\n"
    "  <size><depth>3</depth><width>500</width><height>375</height></size>\r\n"
    "</annotation>\r\n";

/* Parse `text` from an exact-size heap copy (no NUL after it). */
static mpx_status parse_n(const char *text, size_t n, int zero_based, mpx_voc_annotation *a) {
    char *buf = malloc(n ? n : 1);
    memcpy(buf, text, n);
    mpx_status st = mpx_voc_parse(buf, n, "ann.xml", zero_based, a);
    free(buf);
    return st;
}

static mpx_status parse(const char *text, int zero_based, mpx_voc_annotation *a) {
    return parse_n(text, strlen(text), zero_based, a);
}

static void test_valid(mpx_voc_annotation *a) {
    CHECK_OK(parse(RACCOON, 0, a));
    CHECK(strcmp(a->filename, "raccoon-1.jpg") == 0 && a->width == 650 && a->height == 417 &&
              a->n_objects == 1,
          "raccoon: '%s' %dx%d %d objects", a->filename, a->width, a->height, a->n_objects);
    const mpx_voc_object *o = &a->objects[0];
    CHECK(strcmp(o->name, "raccoon") == 0 && o->difficult == 0 && o->xmin == 81 && o->ymin == 88 &&
              o->xmax == 522 && o->ymax == 408,
          "raccoon object: '%s' %g %g %g %g", o->name, o->xmin, o->ymin, o->xmax, o->ymax);
    /* VOC's 1-based inclusive pixels 81..522 are pixel edges [80, 522]; float rounding only */
    mpx_det_box b = mpx_voc_object_box(o, a->width, a->height, 0);
    CHECK(fabs(b.xmin - 80.0 / 650) < 1e-7 && fabs(b.ymin - 87.0 / 417) < 1e-7 &&
              fabs(b.xmax - 522.0 / 650) < 1e-7 && fabs(b.ymax - 408.0 / 417) < 1e-7,
          "normalised box %g %g %g %g", b.xmin, b.ymin, b.xmax, b.ymax);
    b = mpx_voc_object_box(o, a->width, a->height, 1);
    CHECK(fabs(b.xmin - 81.0 / 650) < 1e-7, "zero-based xmin %g", b.xmin);

    CHECK_OK(parse(FANCY, 0, a));
    CHECK(strcmp(a->filename, "000005.jpg") == 0 && a->width == 500 && a->height == 375 &&
              a->n_objects == 3,
          "fancy: '%s' %dx%d %d objects", a->filename, a->width, a->height, a->n_objects);
    if (a->n_objects == 3) {
        o = a->objects;
        CHECK(strcmp(o[0].name, "salt & pepper!") == 0 && o[0].difficult == 1 &&
                  o[0].xmin == 12.5 && o[0].ymin == 3 && o[0].xmax == 200 && o[0].ymax == 100.25,
              "fancy object 0: '%s' d%d %g %g %g %g", o[0].name, o[0].difficult, o[0].xmin,
              o[0].ymin, o[0].xmax, o[0].ymax);
        CHECK(strcmp(o[1].name, "caf\xC3\xA9 <table>") == 0 && o[1].difficult == 0 &&
                  o[1].xmax == 500 && o[1].ymax == 375,
              "fancy object 1 (CDATA): '%s'", o[1].name);
        CHECK(strcmp(o[2].name, "caf\xC3\xA9") == 0 && o[2].xmin == 1 && o[2].ymin == 1 &&
                  o[2].xmax == 2 && o[2].ymax == 2,
              "fancy object 2 (&#233;, reordered fields): '%s' %g %g %g %g", o[2].name, o[2].xmin,
              o[2].ymin, o[2].xmax, o[2].ymax);
    }
    /* 0 is outside VOC's 1-based range but fine for 0-based tools */
    const char *zero =
        "<annotation><filename>z.jpg</filename><size><width>10</width>"
        "<height>10</height></size><object><name>a</name><bndbox><xmin>0</xmin>"
        "<ymin>0</ymin><xmax>10</xmax><ymax>10</ymax></bndbox></object></annotation>";
    CHECK_OK(parse(zero, 1, a));
    CHECK(parse(zero, 0, a) == MPX_ERR_INPUT, "xmin 0 accepted as a 1-based coordinate");
    /* no objects is a valid (empty) image */
    CHECK_OK(
        parse("<annotation><filename>e.jpg</filename><size><width>5</width><height>7</height>"
              "</size></annotation>",
              0, a));
    CHECK(a->n_objects == 0 && a->width == 5 && a->height == 7, "empty annotation");
}

/* The message must name the file and contain each of the (up to two) fragments. */
static void expect(const char *text, size_t n, const char *what, const char *frag1,
                   const char *frag2) {
    mpx_voc_annotation a;
    mpx_status st = parse_n(text, n, 0, &a);
    const char *msg = mpx_error_message();
    CHECK(st == MPX_ERR_INPUT && strstr(msg, "ann.xml") && strstr(msg, frag1) &&
              (!frag2 || strstr(msg, frag2)),
          "%s: got %s '%s', expected '%s'%s%s", what, mpx_status_name(st), st == MPX_OK ? "" : msg,
          frag1, frag2 ? " and " : "", frag2 ? frag2 : "");
}

/* An annotation of a 500x375 image with up to three objects given as XML fragments. */
static char *doc(const char *extra, const char *o0, const char *o1, const char *o2) {
    static char buf[1 << 16];
    snprintf(buf, sizeof buf,
             "<annotation><filename>x.jpg</filename>%s<size><width>500</width>"
             "<height>375</height></size>%s%s%s</annotation>",
             extra, o0, o1, o2);
    return buf;
}

#define OBJ(name, x0, y0, x1, y1)                                                          \
    "<object><name>" name "</name><bndbox><xmin>" x0 "</xmin><ymin>" y0 "</ymin><xmax>" x1 \
    "</xmax><ymax>" y1 "</ymax></bndbox></object>"
#define GOOD OBJ("dog", "10", "10", "20", "20")

static void expect_doc(const char *what, const char *extra, const char *o0, const char *o1,
                       const char *o2, const char *frag1, const char *frag2) {
    const char *d = doc(extra, o0, o1, o2);
    expect(d, strlen(d), what, frag1, frag2);
}

static void test_hostile(void) {
    expect_doc("xmax < xmin", "", GOOD, OBJ("cat", "30", "10", "20", "20"), "", "object 1",
               "empty or inverted box");
    expect_doc("ymax == ymin", "", OBJ("cat", "10", "20", "30", "20"), "", "", "object 0",
               "empty or inverted box");
    expect_doc("xmax past the width", "", GOOD, GOOD, OBJ("cat", "10", "10", "501", "20"),
               "object 2", "outside the 500x375 image");
    expect_doc("ymax past the height", "", OBJ("cat", "10", "10", "20", "376"), "", "", "object 0",
               "outside");
    expect_doc("negative xmin", "", OBJ("cat", "-5", "10", "20", "20"), "", "", "object 0",
               "outside");
    expect_doc("xmin 0 (1-based)", "", GOOD, OBJ("cat", "0", "10", "20", "20"), "", "object 1",
               "outside");
    expect_doc("huge number", "", OBJ("cat", "99999999999999999999", "10", "20", "20"), "", "",
               "object 0", "not a plain decimal");
    expect_doc("exponent", "", OBJ("cat", "10", "1e400", "20", "20"), "", "", "<ymin> '1e400'",
               "not a plain decimal");
    expect_doc("nan", "", GOOD, OBJ("cat", "10", "10", "nan", "20"), "", "object 1",
               "not a plain decimal");
    expect_doc("inf", "", OBJ("cat", "10", "10", "20", "inf"), "", "", "<ymax>",
               "not a plain decimal");
    expect_doc("empty number", "", OBJ("cat", "", "10", "20", "20"), "", "", "<xmin> ''",
               "not a plain decimal");
    expect_doc("trailing junk", "", OBJ("cat", "10px", "10", "20", "20"), "", "", "'10px'",
               "not a plain decimal");
    expect_doc("hex number", "", OBJ("cat", "0x10", "10", "20", "20"), "", "", "'0x10'",
               "not a plain decimal");
    expect_doc("missing bndbox", "", GOOD, GOOD, "<object><name>cat</name></object>", "object 2",
               "has no <bndbox>");
    expect_doc("missing xmax", "",
               "<object><name>cat</name><bndbox><xmin>1</xmin><ymin>1</ymin>"
               "<ymax>5</ymax></bndbox></object>",
               "", "", "object 0", "has no <xmax>");
    expect_doc("missing name", "", GOOD,
               "<object><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>5"
               "</xmax><ymax>5</ymax></bndbox></object>",
               "", "object 1", "has no <name>");
    expect_doc("empty name", "", OBJ("  ", "10", "10", "20", "20"), "", "", "object 0",
               "not a class name");
    expect_doc("duplicate xmin", "",
               "<object><name>cat</name><bndbox><xmin>1</xmin><xmin>2"
               "</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax></bndbox></object>",
               "", "", "object 0", "duplicate <xmin>");
    expect_doc("duplicate bndbox", "", "<object><name>cat</name><bndbox/><bndbox/></object>", "",
               "", "object 0", "duplicate <bndbox>");
    expect_doc("difficult 2", "",
               "<object><name>cat</name><difficult>2</difficult><bndbox>"
               "<xmin>1</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax></bndbox></object>",
               "", "", "object 0", "is not 0 or 1");
    expect_doc("second filename", "<filename>y.jpg</filename>", "", "", "", "duplicate <filename>",
               NULL);
    const char *t;
    t = "<annotation><size><width>5</width><height>5</height></size></annotation>";
    expect(t, strlen(t), "no filename", "has no <filename>", NULL);
    t = "<annotation><filename>../etc/passwd</filename><size><width>5</width><height>5</height>"
        "</size></annotation>";
    expect(t, strlen(t), "filename with a directory", "not a plain file name", NULL);
    t = "<annotation><filename>a.jpg</filename></annotation>";
    expect(t, strlen(t), "no size", "has no <size>", NULL);
    t = "<annotation><filename>a.jpg</filename><size><width>5</width></size></annotation>";
    expect(t, strlen(t), "no height", "has no <size> with <width> and <height>", NULL);
    t = "<annotation><filename>a.jpg</filename><size><width>0</width><height>5</height></size>"
        "</annotation>";
    expect(t, strlen(t), "width 0", "<width> '0'", "not an image side");
    t = "<annotation><filename>a.jpg</filename><size><width>5</width><height>70000</height>"
        "</size></annotation>";
    expect(t, strlen(t), "height 70000", "<height> '70000'", "not an image side");
    t = "<annotation><filename>a.jpg</filename><size><width>5.5</width><height>5</height></size>"
        "</annotation>";
    expect(t, strlen(t), "fractional width", "<width> '5.5'", "not an image side");
    t = "<annotation><filename>a.jpg</filename><size><width>5</width><height>5</height></size>"
        "<object><name>cat</name>";
    expect(t, strlen(t), "truncated", "is truncated", "element <object>");
    expect(RACCOON, 300, "cut inside a tag", "is truncated", NULL);
    t = "<annotation><filename>a.jpg</filenam></annotation>";
    expect(t, strlen(t), "mismatched tags", "</filenam> does not close <filename>", NULL);
    t = "<voc><filename>a.jpg</filename></voc>";
    expect(t, strlen(t), "wrong root", "root element is <voc>", NULL);
    t = "<!DOCTYPE a [<!ENTITY x \"y\">]><annotation></annotation>";
    expect(t, strlen(t), "DOCTYPE", "DOCTYPE", NULL);
    t = "<annotation><filename>&x;</filename></annotation>";
    expect(t, strlen(t), "unknown entity", "unknown entity", NULL);
    t = "<annotation><filename>a & b</filename></annotation>";
    expect(t, strlen(t), "bare ampersand", "does not start an entity", NULL);
    t = "<annotation><filename>&#0;</filename></annotation>";
    expect(t, strlen(t), "character reference 0", "invalid character", NULL);
    t = "<annotation><filename>&#x110000;</filename></annotation>";
    expect(t, strlen(t), "character reference too big", "character reference", NULL);
    const char nul[] = "<annotation><filename>a\0b</filename></annotation>";
    expect(nul, sizeof nul - 1, "NUL byte", "NUL byte", NULL);
    t = "<annotation></annotation><annotation></annotation>";
    expect(t, strlen(t), "two roots", "second root element", NULL);
    t = "<annotation></annotation> trailing";
    expect(t, strlen(t), "text after the root", "text outside the root element", NULL);
    expect("", 0, "empty file", "no root element", NULL);
    t = "   \n\n  ";
    expect(t, strlen(t), "blank file", "no root element", NULL);
    t = "<annotation><filename a=b>x</filename></annotation>";
    expect(t, strlen(t), "unquoted attribute", "without quotes", NULL);
    t = "<annotation>< filename>x</filename></annotation>";
    expect(t, strlen(t), "space after <", "expected an element", NULL);
    t = "\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
    expect(t, 16, "binary file", "line", NULL);

    char *deep = malloc(40 * 6 + 64);
    strcpy(deep, "<annotation>");
    for (int i = 0; i < 40; i++) strcat(deep, "<a>");
    expect(deep, strlen(deep), "deep nesting", "nested deeper than 32", NULL);
    free(deep);

    static char many[1 << 16];
    snprintf(many, sizeof many,
             "<annotation><filename>m.jpg</filename><size><width>500</width>"
             "<height>375</height></size>");
    for (int i = 0; i < MPX_DET_MAX_BOXES; i++) strcat(many, GOOD);
    mpx_voc_annotation a;
    size_t len = strlen(many);
    strcat(many, "</annotation>");
    CHECK_OK(parse(many, 0, &a));
    CHECK(a.n_objects == MPX_DET_MAX_BOXES, "%d objects, expected %d", a.n_objects,
          MPX_DET_MAX_BOXES);
    strcpy(many + len, GOOD "</annotation>");
    expect(many, strlen(many), "too many objects", "more than 64 objects", NULL);

    char long_name[400];
    memset(long_name, 'x', 300);
    long_name[300] = '\0';
    char obj[600];
    snprintf(obj, sizeof obj, "<object><name>%s</name></object>", long_name);
    expect_doc("300-byte class name", "", obj, "", "", "object 0", "not a class name");
    char *huge = malloc(6000);
    strcpy(huge, "<annotation><filename>");
    memset(huge + strlen(huge), 'y', 5000);
    strcpy(huge + 22 + 5000, "</filename></annotation>");
    expect(huge, strlen(huge), "5000-byte text", "text longer than 4095", NULL);
    free(huge);
}

/* Every prefix of a valid file is either rejected as MPX_ERR_INPUT or (only when nothing but
 * trailing whitespace was cut) parsed to the same result; none crashes. */
static void test_prefixes(void) {
    size_t n = strlen(FANCY), complete = n;
    while (complete > 0 && (FANCY[complete - 1] == '\n' || FANCY[complete - 1] == '\r')) complete--;
    int bad = 0;
    for (size_t k = 0; k < n; k++) {
        mpx_voc_annotation a;
        mpx_status st = parse_n(FANCY, k, 0, &a);
        int want_ok = k >= complete;
        if (want_ok ? st != MPX_OK || a.n_objects != 3 : st != MPX_ERR_INPUT) bad++;
    }
    CHECK(bad == 0, "%d of %zu prefixes handled wrongly", bad, n);
}

/* Random byte changes (Philox, fixed seed): the reader returns OK or MPX_ERR_INPUT and any
 * annotation it accepts satisfies the documented invariants. Half of the trials write any
 * byte, half printable ASCII (the XML reader checks the encoding, so a byte past 0x7f that
 * breaks UTF-8 is refused: those trials alone would hardly ever give an accepted file). */
static void test_mutations(void) {
    size_t n = strlen(RACCOON);
    char *buf = malloc(n);
    mpx_rng r = mpx_rng_make(7, MPX_RNG_TEST, 0);
    int ok = 0, rejected = 0, broken = 0;
    for (int trial = 0; trial < 3000; trial++) {
        memcpy(buf, RACCOON, n);
        int edits = 1 + (int)mpx_rng_below(&r, 4);
        for (int e = 0; e < edits; e++) {
            const uint32_t at = mpx_rng_below(&r, (uint32_t)n);
            buf[at] = (char)(trial % 2 ? mpx_rng_u32(&r) : 32 + mpx_rng_below(&r, 95));
        }
        size_t len = trial % 3 == 0 ? mpx_rng_below(&r, (uint32_t)n + 1) : n;
        mpx_voc_annotation a;
        mpx_status st = mpx_voc_parse(buf, len, "ann.xml", 0, &a);
        if (st == MPX_OK) {
            ok++;
            for (int k = 0; k < a.n_objects; k++) {
                const mpx_voc_object *o = &a.objects[k];
                broken += !(o->xmin >= 1 && o->xmin < o->xmax && o->xmax <= a.width &&
                            o->ymin >= 1 && o->ymin < o->ymax && o->ymax <= a.height);
            }
            broken += a.width < 1 || a.height < 1 || !a.filename[0];
        } else {
            rejected += st == MPX_ERR_INPUT;
            broken += st != MPX_ERR_INPUT;
        }
    }
    free(buf);
    CHECK(broken == 0, "%d mutated files broke an invariant", broken);
    CHECK(ok > 100 && rejected > 100, "mutations: %d accepted, %d rejected (expected both many)",
          ok, rejected);
}

int main(void) {
    static mpx_voc_annotation a;
    test_valid(&a);
    test_hostile();
    test_prefixes();
    test_mutations();
    return mpx_test_done("test_det_voc_xml");
}
