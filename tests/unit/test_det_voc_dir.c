/* test_det_voc_dir.c — mpx_voc_load on generated VOC trees: the VOC layout with ImageSets, the
 * same tree as a .tar.gz (identical result, SHA256SUMS honoured), the hash split rule (checked
 * with sha256sum(1)), the raccoon layout with its CSVs, class mapping (collected or given),
 * box and pixel placement after resizing, and every dataset-level error: CSV/XML
 * disagreements, missing or mis-sized or corrupt JPEGs, a hostile annotation, several
 * datasets in one source, no annotations, a missing source, a truncated archive. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/fixtures.h"
#include "data/sha256.h"
#include "mpx/detect.h"
#include "testutil.h"

enum { S = 32, NIMG = 6 };

typedef struct {
    const char *cls;
    int x0, y0, x1, y1; /* VOC 1-based inclusive pixels */
    int difficult;
} obj;

typedef struct {
    const char *id;
    int w, h, n;
    obj o[2];
} image;

static const image IMAGES[NIMG] = {
    {"img01", 64, 48, 1, {{"cat", 9, 9, 40, 30, 0}}},
    {"img02", 80, 64, 2, {{"dog", 17, 9, 64, 56, 0}, {"bird", 1, 1, 16, 16, 0}}},
    {"img03", 48, 64, 1, {{"cat", 1, 1, 48, 64, 0}}},
    {"img04", 96, 40, 1, {{"bird", 33, 5, 80, 36, 1}}},
    {"img05", 64, 64, 1, {{"dog", 9, 17, 56, 48, 0}}},
    {"img06", 40, 72, 1, {{"cat", 5, 9, 36, 64, 0}}},
};

static char tmp[1024];

static void sh(const char *fmt, const char *a, const char *b) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    CHECK(system(cmd) == 0, "command failed: %s", cmd);
}

static void write_text(const char *path, const char *text) {
    CHECK(fx_write_file(path, text, strlen(text)), "cannot write %s", path);
}

static void xml_of(const image *im, char *buf, size_t cap) {
    int k = snprintf(buf, cap,
                     "<annotation>\n  <folder>x</folder>\n  <filename>%s.jpg</filename>\n"
                     "  <size><width>%d</width><height>%d</height><depth>3</depth></size>\n",
                     im->id, im->w, im->h);
    for (int j = 0; j < im->n; j++)
        k += snprintf(buf + k, cap - (size_t)k,
                      "  <object><name>%s</name><difficult>%d</difficult><bndbox><xmin>%d</xmin>"
                      "<ymin>%d</ymin><xmax>%d</xmax><ymax>%d</ymax></bndbox></object>\n",
                      im->o[j].cls, im->o[j].difficult, im->o[j].x0, im->o[j].y0, im->o[j].x1,
                      im->o[j].y1);
    snprintf(buf + k, cap - (size_t)k, "</annotation>\n");
}

/* Dark background, bright rectangles over the boxes' pixels. */
static void write_jpeg(const char *path, const image *im) {
    uint8_t *pix = malloc((size_t)im->w * im->h * 3);
    for (int y = 0; y < im->h; y++)
        for (int x = 0; x < im->w; x++) {
            int in = 0;
            for (int j = 0; j < im->n; j++)
                in |= x + 1 >= im->o[j].x0 && x + 1 <= im->o[j].x1 && y + 1 >= im->o[j].y0 &&
                      y + 1 <= im->o[j].y1;
            uint8_t *p = pix + ((size_t)y * im->w + x) * 3;
            p[0] = in ? 230 : 30;
            p[1] = in ? 225 : 35;
            p[2] = in ? 220 : 40;
        }
    CHECK(fx_write_jpeg(path, pix, im->h, im->w, 3, 95), "cannot write %s", path);
    free(pix);
}

/* A tree at `root` in the VOC (voc = 1) or raccoon layout with the given images. */
static void write_tree(const char *root, int voc, const image *ims, int n) {
    char path[2048], xml[2048];
    snprintf(path, sizeof path, "%s/%s", root, voc ? "Annotations" : "annotations");
    sh("mkdir -p '%s' '%s'", path, path);
    snprintf(path, sizeof path, "%s/%s", root, voc ? "JPEGImages" : "images");
    sh("mkdir -p '%s' '%s'", path, path);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s/%s.xml", root, voc ? "Annotations" : "annotations",
                 ims[i].id);
        xml_of(&ims[i], xml, sizeof xml);
        write_text(path, xml);
        snprintf(path, sizeof path, "%s/%s/%s.jpg", root, voc ? "JPEGImages" : "images", ims[i].id);
        write_jpeg(path, &ims[i]);
    }
}

static const image *image_by_id(const char *id) {
    for (int i = 0; i < NIMG; i++)
        if (strcmp(IMAGES[i].id, id) == 0) return &IMAGES[i];
    return NULL;
}

static int class_id(const mpx_det_dataset *ds, const char *name) {
    for (int c = 0; c < ds->num_classes; c++)
        if (strcmp(ds->class_names[c], name) == 0) return c;
    return -1;
}

/* Boxes exactly the normalised VOC boxes; pixels well inside a box bright, well outside dark.
 * Margin 2 output pixels: the antialiased resize spreads an edge over < 1 output pixel each
 * side and JPEG (q95, chroma subsampled) smears it by <= 2 source pixels (< 1 output pixel
 * here, every image is downscaled to 32); levels 230/30 leave room for ringing (+-40). */
static void check_dataset(const mpx_det_dataset *ds, const char *what) {
    for (int64_t i = 0; i < ds->n; i++) {
        const image *im = image_by_id(ds->ids[i]);
        REQUIRE_VOID(im != NULL, "%s: unknown id %s", what, ds->ids[i]);
        CHECK(ds->counts[i] == im->n, "%s %s: %d boxes", what, im->id, ds->counts[i]);
        for (int j = 0; j < im->n && j < ds->counts[i]; j++) {
            const mpx_det_box *b = &ds->boxes[i * MPX_DET_MAX_BOXES + j];
            const obj *o = &im->o[j];
            CHECK(b->xmin == (float)((o->x0 - 1.0) / im->w) &&
                      b->ymin == (float)((o->y0 - 1.0) / im->h) &&
                      b->xmax == (float)((double)o->x1 / im->w) &&
                      b->ymax == (float)((double)o->y1 / im->h),
                  "%s %s box %d: %g %g %g %g", what, im->id, j, b->xmin, b->ymin, b->xmax, b->ymax);
            CHECK(b->label == class_id(ds, o->cls) && b->difficult == o->difficult,
                  "%s %s box %d: label %d difficult %d", what, im->id, j, b->label, b->difficult);
        }
        const uint8_t *img = mpx_det_dataset_image(ds, i);
        int wrong = 0;
        double m = 2.0 / S;
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                double cx = (x + 0.5) / S, cy = (y + 0.5) / S;
                int inside = 0, near = 0;
                for (int j = 0; j < im->n; j++) {
                    double x0 = (im->o[j].x0 - 1.0) / im->w, x1 = (double)im->o[j].x1 / im->w;
                    double y0 = (im->o[j].y0 - 1.0) / im->h, y1 = (double)im->o[j].y1 / im->h;
                    inside |= cx > x0 + m && cx < x1 - m && cy > y0 + m && cy < y1 - m;
                    near |= cx > x0 - m && cx < x1 + m && cy > y0 - m && cy < y1 + m;
                }
                int g = img[(y * S + x) * 3 + 1];
                if ((inside && g < 190) || (!near && g > 75)) wrong++;
            }
        CHECK(wrong == 0, "%s %s: %d pixels on the wrong side of the boxes", what, im->id, wrong);
    }
}

static int same(const mpx_det_dataset *a, const mpx_det_dataset *b) {
    if (a->n != b->n || a->size != b->size || a->num_classes != b->num_classes) return 0;
    for (int64_t i = 0; i < a->n; i++)
        if (strcmp(a->ids[i], b->ids[i]) != 0) return 0;
    return memcmp(a->images, b->images, (size_t)a->n * a->size * a->size * 3) == 0 &&
           memcmp(a->counts, b->counts, (size_t)a->n * sizeof *a->counts) == 0 &&
           memcmp(a->boxes, b->boxes, (size_t)a->n * MPX_DET_MAX_BOXES * sizeof *a->boxes) == 0;
}

static void expect_error(const char *source, mpx_split split, const mpx_voc_opts *o,
                         const char *what, const char *frag1, const char *frag2) {
    mpx_det_dataset ds;
    mpx_status st = mpx_voc_load(source, split, o, &ds, NULL);
    const char *msg = mpx_error_message();
    CHECK(st != MPX_OK && strstr(msg, frag1) && (!frag2 || strstr(msg, frag2)),
          "%s: got %s '%s', expected '%s'%s%s", what, mpx_status_name(st), st ? msg : "", frag1,
          frag2 ? " and " : "", frag2 ? frag2 : "");
    CHECK(ds.n == 0 && ds.images == NULL, "%s: the dataset was not left empty", what);
    if (st == MPX_OK) mpx_det_dataset_free(&ds);
}

/* Add the tree under `dir` (relative names from `rel`) to a tar.gz, like tar czf. */
static void tar_tree(gzFile gz, const char *dir, const char *rel) {
    char cmd[2300], line[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && find '%s' -type f | sort", dir, rel);
    FILE *p = popen(cmd, "r");
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = '\0';
        char full[4200], *data;
        snprintf(full, sizeof full, "%s/%s", dir, line);
        FILE *f = fopen(full, "rb");
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        data = malloc((size_t)n + 1);
        CHECK(fread(data, 1, (size_t)n, f) == (size_t)n, "read %s", full);
        fclose(f);
        fx_tar_add(gz, line, '0', data, (size_t)n);
        free(data);
    }
    pclose(p);
}

static void test_voc_layout(void) {
    char root[1200], voc[1300], path[1500], archive[1300];
    snprintf(root, sizeof root, "%s/voc", tmp);
    snprintf(voc, sizeof voc, "%s/VOCdevkit/VOC2007", root);
    write_tree(voc, 1, IMAGES, NIMG);
    snprintf(path, sizeof path, "%s/ImageSets/Main", voc);
    sh("mkdir -p '%s' '%s'", path, path);
    snprintf(path, sizeof path, "%s/ImageSets/Main/trainval.txt", voc);
    write_text(path, "img01\nimg02\r\nimg03\n\nimg04  \n");
    snprintf(path, sizeof path, "%s/ImageSets/Main/test.txt", voc);
    write_text(path, "img06\nimg05");

    mpx_voc_opts o = {.size = S};
    mpx_voc_info info;
    mpx_det_dataset train, test;
    CHECK_OK(mpx_voc_load(root, MPX_SPLIT_TRAIN, &o, &train, &info));
    CHECK(train.n == 4 && info.images == 4 && info.boxes == 5 && info.annotations == NIMG,
          "VOC train: %lld images, %lld boxes, %lld annotations", (long long)train.n,
          (long long)info.boxes, (long long)info.annotations);
    CHECK(info.layout == MPX_VOC_LAYOUT_VOC && strstr(info.root, "VOCdevkit/VOC2007") &&
              strstr(info.split_rule, "ImageSets/Main/trainval.txt"),
          "VOC: layout %d root %s rule %s", info.layout, info.root, info.split_rule);
    CHECK(train.num_classes == 3 && strcmp(train.class_names[0], "bird") == 0 &&
              strcmp(train.class_names[1], "cat") == 0 && strcmp(train.class_names[2], "dog") == 0,
          "collected classes are not bird, cat, dog");
    for (int64_t i = 0; i < train.n && i < 4; i++)
        CHECK(strcmp(train.ids[i], IMAGES[i].id) == 0, "train id %lld is %s", (long long)i,
              train.ids[i]);
    check_dataset(&train, "VOC train");
    CHECK_OK(mpx_voc_load(root, MPX_SPLIT_TEST, &o, &test, &info));
    CHECK(test.n == 2 && strcmp(test.ids[0], "img05") == 0 && strcmp(test.ids[1], "img06") == 0,
          "VOC test split");
    CHECK(strstr(info.split_rule, "test.txt") != NULL, "test rule %s", info.split_rule);
    check_dataset(&test, "VOC test");

    /* a given class list fixes the ids; a name outside it is an error */
    const char *given[4] = {"dog", "horse", "cat", "bird"};
    mpx_voc_opts og = {.size = S, .class_names = given, .num_classes = 4};
    mpx_det_dataset g;
    CHECK_OK(mpx_voc_load(root, MPX_SPLIT_TRAIN, &og, &g, NULL));
    CHECK(g.num_classes == 4 && strcmp(g.class_names[1], "horse") == 0, "given class names");
    check_dataset(&g, "VOC given classes");
    mpx_det_dataset_free(&g);
    og.num_classes = 3;
    given[2] = "person";
    expect_error(root, MPX_SPLIT_TRAIN, &og, "class outside the list", "class 'cat' is not in",
                 "img01.xml");

    /* the same tree as a .tar.gz loads identically; a SHA256SUMS beside it is honoured */
    snprintf(archive, sizeof archive, "%s/voc.tar.gz", tmp);
    gzFile gz = gzopen(archive, "wb");
    tar_tree(gz, root, "VOCdevkit");
    fx_tar_end(gz);
    gzclose(gz);
    mpx_det_dataset a;
    CHECK_OK(mpx_voc_load(archive, MPX_SPLIT_TRAIN, &o, &a, &info));
    CHECK(same(&a, &train) && info.checksummed == 0, "archive and directory differ");
    mpx_det_dataset_free(&a);
    char hex[65], sums[1400];
    CHECK_OK(mpx_sha256_file(archive, hex));
    snprintf(sums, sizeof sums, "%s/SHA256SUMS", tmp);
    char line[200];
    snprintf(line, sizeof line, "%s  voc.tar.gz\n", hex);
    write_text(sums, line);
    CHECK_OK(mpx_voc_load(archive, MPX_SPLIT_TEST, &o, &a, &info));
    CHECK(same(&a, &test) && info.checksummed == 1, "checksummed archive load");
    mpx_det_dataset_free(&a);
    line[0] = line[0] == '0' ? '1' : '0';
    write_text(sums, line);
    expect_error(archive, MPX_SPLIT_TRAIN, &o, "archive not matching SHA256SUMS", "corrupt copy",
                 "voc.tar.gz");
    remove(sums);

    /* a truncated archive */
    char cut[1400];
    snprintf(cut, sizeof cut, "%s/cut.tar.gz", tmp);
    char cmd[5000];
    snprintf(cmd, sizeof cmd, "head -c $(( $(stat -c %%s '%s') / 2 )) '%s' > '%s'", archive,
             archive, cut);
    CHECK(system(cmd) == 0, "%s", cmd);
    expect_error(cut, MPX_SPLIT_TRAIN, &o, "truncated archive", "cut.tar.gz", NULL);

    /* a hostile annotation inside the archive is named with its path */
    gz = gzopen(archive, "wb");
    tar_tree(gz, root, "VOCdevkit");
    const char *bad =
        "<annotation><filename>img09.jpg</filename><size><width>9</width><height>9"
        "</height></size><object><name>cat</name><bndbox><xmin>5</xmin><ymin>1"
        "</ymin><xmax>3</xmax><ymax>4</ymax></bndbox></object></annotation>";
    fx_tar_add(gz, "VOCdevkit/VOC2007/Annotations/img09.xml", '0', bad, strlen(bad));
    fx_tar_end(gz);
    gzclose(gz);
    expect_error(archive, MPX_SPLIT_TRAIN, &o, "hostile XML in an archive",
                 "voc.tar.gz:VOCdevkit/VOC2007/Annotations/img09.xml' object 0",
                 "empty or inverted box");

    /* a list naming an id without annotation; a missing list */
    snprintf(path, sizeof path, "%s/ImageSets/Main/test.txt", voc);
    write_text(path, "img05\nimg77\n");
    expect_error(root, MPX_SPLIT_TEST, &o, "unknown id in test.txt", "test.txt' line 2",
                 "no annotation 'img77.xml'");
    remove(path);
    expect_error(root, MPX_SPLIT_TEST, &o, "no test list", "has no test list", "test.txt, val.txt");
    snprintf(path, sizeof path, "%s/ImageSets/Main/val.txt", voc);
    write_text(path, "img03\n");
    CHECK_OK(mpx_voc_load(root, MPX_SPLIT_TEST, &o, &a, &info));
    CHECK(a.n == 1 && strcmp(a.ids[0], "img03") == 0 && strstr(info.split_rule, "val.txt"),
          "val.txt stands in for test.txt");
    mpx_det_dataset_free(&a);

    /* image errors: missing, another size than annotated, corrupt */
    snprintf(path, sizeof path, "%s/JPEGImages/img02.jpg", voc);
    char moved[1500];
    snprintf(moved, sizeof moved, "%s/img02.jpg.away", tmp);
    CHECK(rename(path, moved) == 0, "rename");
    expect_error(root, MPX_SPLIT_TRAIN, &o, "missing JPEG", "img02.xml' names image",
                 "which is missing");
    image wrong = IMAGES[1];
    wrong.w = 70;
    write_jpeg(path, &wrong);
    expect_error(root, MPX_SPLIT_TRAIN, &o, "JPEG of another size", "is 70x64 but its annotation",
                 "img02.xml' says 80x64");
    sh("head -c 200 '%s' > '%s'", moved, path);
    expect_error(root, MPX_SPLIT_TRAIN, &o, "truncated JPEG", "JPEG", "img02.jpg");
    CHECK(rename(moved, path) == 0, "rename back");

    /* two datasets in one source; no annotations; no source */
    char second[1500];
    snprintf(second, sizeof second, "%s/VOCdevkit/VOC2012", root);
    write_tree(second, 1, IMAGES, 1);
    expect_error(root, MPX_SPLIT_TRAIN, &o, "two datasets", "more than one folder", "VOC2012");
    snprintf(path, sizeof path, "%s/empty", tmp);
    sh("mkdir -p '%s/sub' '%s'", path, path);
    expect_error(path, MPX_SPLIT_TRAIN, &o, "no annotations", "has no annotations", NULL);
    snprintf(path, sizeof path, "%s/nothing-here", tmp);
    expect_error(path, MPX_SPLIT_TRAIN, &o, "missing source", "neither a directory nor an archive",
                 NULL);
    mpx_det_dataset_free(&train);
    mpx_det_dataset_free(&test);
}

/* Without lists or CSVs: test iff the first 32 bits of SHA-256(id) are 0 mod 5, computed
 * here with sha256sum(1), independently of the library's SHA-256. */
static void test_hash_split(void) {
    enum { NH = 20 };
    image ims[NH];
    char ids[NH][16], root[1200];
    for (int i = 0; i < NH; i++) {
        snprintf(ids[i], sizeof ids[i], "h%02d", i);
        ims[i] = (image){ids[i], 40, 40, 1, {{i % 2 ? "a" : "b", 1 + i, 2, 30, 39, 0}}};
    }
    snprintf(root, sizeof root, "%s/hash/data", tmp);
    write_tree(root, 1, ims, NH);
    int want_test[NH], n_test = 0;
    for (int i = 0; i < NH; i++) {
        char cmd[200], out[100] = "";
        snprintf(cmd, sizeof cmd, "printf %%s '%s' | sha256sum", ids[i]);
        FILE *p = popen(cmd, "r");
        CHECK(p && fgets(out, sizeof out, p), "sha256sum");
        if (p) pclose(p);
        out[8] = '\0';
        want_test[i] = strtoul(out, NULL, 16) % 5 == 0;
        n_test += want_test[i];
    }
    mpx_voc_opts o = {.size = 16};
    mpx_voc_info info;
    mpx_det_dataset train, test;
    CHECK_OK(mpx_voc_load(root, MPX_SPLIT_TRAIN, &o, &train, &info));
    CHECK(strcmp(info.split_rule, "hash") == 0, "rule %s", info.split_rule);
    CHECK_OK(mpx_voc_load(root, MPX_SPLIT_TEST, &o, &test, &info));
    CHECK(n_test > 0 && test.n == n_test && train.n == NH - n_test,
          "hash split: %lld test / %lld train, expected %d / %d", (long long)test.n,
          (long long)train.n, n_test, NH - n_test);
    for (int64_t i = 0; i < test.n; i++) {
        int k = atoi(test.ids[i] + 1);
        CHECK(want_test[k], "%s is in test but its hash says train", test.ids[i]);
    }
    mpx_det_dataset_free(&train);
    mpx_det_dataset_free(&test);
}

static const char *const HEADER = "filename,width,height,class,xmin,ymin,xmax,ymax\n";

static void test_raccoon_layout(void) {
    char root[1200], tr[1300], te[1300];
    snprintf(root, sizeof root, "%s/rac/data", tmp);
    write_tree(root, 0, IMAGES, NIMG);
    snprintf(tr, sizeof tr, "%s/train_labels.csv", root);
    snprintf(te, sizeof te, "%s/test_labels.csv", root);
    char train_csv[1000], test_csv[300];
    snprintf(train_csv, sizeof train_csv,
             "%simg02.jpg,80,64,bird,1,1,16,16\r\nimg01.jpg,64,48,cat,9,9,40,30\r\n"
             "img02.jpg,80,64,dog,17,9,64,56\r\nimg03.jpg,48,64,cat,1,1,48,64\r\n",
             HEADER);
    snprintf(test_csv, sizeof test_csv, "%simg05.jpg,64,64,dog,9,17,56,48\n", HEADER);
    write_text(tr, train_csv);
    write_text(te, test_csv);
    mpx_voc_opts o = {.size = S};
    mpx_voc_info info;
    mpx_det_dataset train, test;
    CHECK_OK(mpx_voc_load(root, MPX_SPLIT_TRAIN, &o, &train, &info));
    CHECK(train.n == 3 && info.boxes == 4 && info.layout == MPX_VOC_LAYOUT_RACCOON &&
              strstr(info.split_rule, "train_labels.csv"),
          "raccoon layout train: %lld images %lld boxes layout %d rule %s", (long long)train.n,
          (long long)info.boxes, info.layout, info.split_rule);
    check_dataset(&train, "raccoon-layout train");
    CHECK_OK(mpx_voc_load(root, MPX_SPLIT_TEST, &o, &test, &info));
    CHECK(test.n == 1 && strcmp(test.ids[0], "img05") == 0, "raccoon layout test split");
    mpx_det_dataset_free(&train);
    mpx_det_dataset_free(&test);

    /* the CSVs must agree with the XML */
    char bad[1200];
    snprintf(bad, sizeof bad, "%simg04.jpg,96,40,bird,33,5,81,36\n", HEADER);
    write_text(te, bad);
    expect_error(root, MPX_SPLIT_TRAIN, &o, "CSV box differs", "test_labels.csv' row 2",
                 "matches no object of annotation 'img04.xml'");
    snprintf(bad, sizeof bad, "%simg02.jpg,80,64,dog,17,9,64,56\n", HEADER);
    write_text(te, bad);
    expect_error(root, MPX_SPLIT_TEST, &o, "image in both CSVs", "listed in both CSVs", "img02");
    snprintf(bad, sizeof bad, "%simg04.jpg,96,41,bird,33,5,80,36\n", HEADER);
    write_text(te, bad);
    expect_error(root, MPX_SPLIT_TEST, &o, "CSV size differs", "row 2", "(96x40, 1 objects)");
    snprintf(bad, sizeof bad, "%simg04.jpg,96,40,bird,33,5,80\n", HEADER);
    write_text(te, bad);
    expect_error(root, MPX_SPLIT_TEST, &o, "7 fields", "row 2", "expected 8 fields");
    snprintf(bad, sizeof bad, "%simg09.jpg,96,40,bird,33,5,80,36\n", HEADER);
    write_text(te, bad);
    expect_error(root, MPX_SPLIT_TEST, &o, "unknown image",
                 "no annotation names the image 'img09.jpg'", NULL);
    write_text(te, "file,w,h\n");
    expect_error(root, MPX_SPLIT_TEST, &o, "wrong header", "does not start with the header", NULL);
    write_text(te, test_csv);
    snprintf(bad, sizeof bad, "%simg01.jpg,64,48,cat,9,9,40,30\nimg02.jpg,80,64,dog,17,9,64,56\n",
             HEADER);
    write_text(tr, bad);
    expect_error(root, MPX_SPLIT_TRAIN, &o, "object missing from the CSV",
                 "img02.xml' object 1 ('bird') is missing from train_labels.csv", NULL);
    remove(tr);
    expect_error(root, MPX_SPLIT_TEST, &o, "one CSV only", "has test_labels.csv but not",
                 "train_labels.csv");
}

int main(void) {
    REQUIRE(mpx_test_tmpdir("det_voc_dir", tmp, sizeof tmp)[0], "no temp dir");
    test_voc_layout();
    test_hash_split();
    test_raccoon_layout();
    sh("rm -rf '%s' '%s'", tmp, tmp);
    return mpx_test_done("test_det_voc_dir");
}
