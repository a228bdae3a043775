/* det_voc_split.c — which annotations belong to a split, in this order of precedence:
 *   1. raccoon CSVs (<root>/train_labels.csv and test_labels.csv, both required when either
 *      exists): an image is in the split whose CSV lists it. Every CSV row must match an object
 *      of that image's annotation (file name, width, height, class, xmin, ymin, xmax, ymax)
 *      and every object of a listed image must be listed, so the CSVs and the XML agree.
 *   2. VOC lists: ImageSets/Main/trainval.txt (else train.txt) for train, test.txt (else
 *      val.txt) for test; one id (annotation stem) per line, first token.
 *   3. A hash rule: an id is in test when the first 32 bits (big-endian) of SHA-256(id) are
 *      0 modulo 5 (about 20 %), else in train — stable when images are added or removed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/det_voc.h"
#include "data/sha256.h"

typedef struct {
    const char *key;
    int64_t index;
} keyed;

static int cmp_keyed(const void *pa, const void *pb) {
    return strcmp(((const keyed *)pa)->key, ((const keyed *)pb)->key);
}

static int64_t lookup(const keyed *k, size_t n, const char *key) {
    keyed probe = {key, 0};
    const keyed *hit = bsearch(&probe, k, n, sizeof *k, cmp_keyed);
    return hit ? hit->index : -1;
}

/* Next line of a text entry (\n or \r\n), NUL-terminated in place; NULL at the end. */
static char *next_line(char **cursor, const char *end) {
    char *s = *cursor;
    if (s >= end) return NULL;
    char *nl = memchr(s, '\n', (size_t)(end - s));
    char *e = nl ? nl : (char *)end;
    *cursor = nl ? nl + 1 : (char *)end;
    if (e > s && e[-1] == '\r') e--;
    *e = '\0';
    return s;
}

static mpx_status csv_file(const char *source, const mpx_voc_tree *t, const mpx_voc_entry *csv,
                           int which, const mpx_voc_image *anns, const keyed *by_file,
                           uint64_t *matched, int8_t *split_of) {
    static const char header[] = "filename,width,height,class,xmin,ymin,xmax,ymax";
    char *text = malloc(csv->size + 1), *cursor = text, *line;
    if (!text) return mpx_fail(MPX_ERR_NOMEM, "out of memory reading '%s'", csv->name);
    memcpy(text, csv->data, csv->size);
    const char *end = text + csv->size;
    char where[1400];
    mpx_voc_where(source, t, NULL, csv->name, where, sizeof where);
    mpx_status st = MPX_OK;
    line = next_line(&cursor, end);
    if (!line || strcmp(line, header) != 0)
        st = mpx_fail(MPX_ERR_INPUT, "'%s' does not start with the header '%s'", where, header);
    for (int row = 2; st == MPX_OK && (line = next_line(&cursor, end)) != NULL; row++) {
        if (!line[0]) continue;
        char *f[8];
        int nf = 1;
        for (const char *p = line; *p; p++) nf += *p == ',';
        int ok = nf == 8 && !strchr(line, '"');
        char *p = line;
        for (int i = 0; ok && i < 8; i++) {
            f[i] = p;
            char *comma = strchr(p, ',');
            if (comma) {
                *comma = '\0';
                p = comma + 1;
            }
        }
        double v[6];
        for (int i = 0; ok && i < 6; i++)
            ok = mpx_voc_parse_decimal(f[i < 2 ? 1 + i : 2 + i], &v[i]);
        if (!ok) {
            st = mpx_fail(MPX_ERR_INPUT,
                          "'%s' row %d: expected 8 fields filename,width,height,class,xmin,ymin,"
                          "xmax,ymax with numbers (quoted fields are not supported)",
                          where, row);
            break;
        }
        int64_t a = lookup(by_file, t->n_xml, f[0]);
        if (a < 0) {
            st = mpx_fail(MPX_ERR_INPUT, "'%s' row %d: no annotation names the image '%s'", where,
                          row, f[0]);
            break;
        }
        const mpx_voc_image *an = &anns[a];
        if (split_of[a] == 1 - which) {
            st = mpx_fail(MPX_ERR_INPUT, "'%s' row %d: image '%s' is listed in both CSVs", where,
                          row, f[0]);
            break;
        }
        split_of[a] = (int8_t)which;
        int k = -1;
        for (int j = 0; j < an->n_objects && k < 0; j++) {
            const mpx_voc_object *o = &an->objects[j];
            if (!(matched[a] >> j & 1) && strcmp(o->name, f[3]) == 0 && o->xmin == v[2] &&
                o->ymin == v[3] && o->xmax == v[4] && o->ymax == v[5])
                k = j;
        }
        if (v[0] != an->width || v[1] != an->height || k < 0) {
            st = mpx_fail(MPX_ERR_INPUT,
                          "'%s' row %d (%s %gx%g, %s %g %g %g %g) matches no object of annotation "
                          "'%s' (%dx%d, %d objects): the CSV and the XML disagree",
                          where, row, f[0], v[0], v[1], f[3], v[2], v[3], v[4], v[5],
                          t->xml[a]->name, an->width, an->height, an->n_objects);
            break;
        }
        matched[a] |= (uint64_t)1 << k;
    }
    free(text);
    return st;
}

static mpx_status csv_split(const char *source, const mpx_voc_tree *t, const mpx_voc_image *anns,
                            int8_t *split_of) {
    if (!t->csv[0] || !t->csv[1])
        return mpx_fail(MPX_ERR_INPUT,
                        "VOC source '%s': '%s' has %s but not %s (both CSVs define the splits)",
                        source, t->root, t->csv[0] ? "train_labels.csv" : "test_labels.csv",
                        t->csv[0] ? "test_labels.csv" : "train_labels.csv");
    keyed *by_file = malloc((t->n_xml + 1) * sizeof *by_file);
    uint64_t *matched = calloc(t->n_xml + 1, sizeof *matched);
    mpx_status st = MPX_OK;
    if (!by_file || !matched) st = mpx_fail(MPX_ERR_NOMEM, "out of memory splitting '%s'", source);
    for (size_t i = 0; st == MPX_OK && i < t->n_xml; i++)
        by_file[i] = (keyed){anns[i].filename, (int64_t)i};
    if (st == MPX_OK) qsort(by_file, t->n_xml, sizeof *by_file, cmp_keyed);
    for (size_t i = 1; st == MPX_OK && i < t->n_xml; i++)
        if (strcmp(by_file[i - 1].key, by_file[i].key) == 0)
            st = mpx_fail(MPX_ERR_INPUT, "annotations '%s' and '%s' both name the image '%s'",
                          t->xml[by_file[i - 1].index]->name, t->xml[by_file[i].index]->name,
                          by_file[i].key);
    for (int s = 0; s < 2 && st == MPX_OK; s++)
        st = csv_file(source, t, t->csv[s], s, anns, by_file, matched, split_of);
    for (size_t a = 0; st == MPX_OK && a < t->n_xml; a++) {
        if (split_of[a] < 0) continue;
        for (int k = 0; k < anns[a].n_objects; k++)
            if (!(matched[a] >> k & 1)) {
                st = mpx_fail(MPX_ERR_INPUT,
                              "annotation '%s' object %d ('%s') is missing from %s, which lists "
                              "the image: the CSV and the XML disagree",
                              t->xml[a]->name, k, anns[a].objects[k].name,
                              t->csv[split_of[a]]->name);
                break;
            }
    }
    free(by_file);
    free(matched);
    return st;
}

static mpx_status list_split(const char *source, const mpx_voc_tree *t, mpx_split split,
                             int8_t *split_of, char *rule, size_t cap) {
    const mpx_voc_entry *e = split == MPX_SPLIT_TRAIN ? (t->sets[0] ? t->sets[0] : t->sets[1])
                                                      : (t->sets[2] ? t->sets[2] : t->sets[3]);
    if (!e)
        return mpx_fail(MPX_ERR_INPUT,
                        "VOC source '%s': '%s/ImageSets/Main' has no %s list (looked for %s)",
                        source, t->root, split == MPX_SPLIT_TRAIN ? "training" : "test",
                        split == MPX_SPLIT_TRAIN ? "trainval.txt, train.txt" : "test.txt, val.txt");
    mpx_voc_where(source, t, "ImageSets/Main", e->name, rule, cap);
    keyed *by_id = malloc((t->n_xml + 1) * sizeof *by_id);
    char **ids = calloc(t->n_xml + 1, sizeof *ids);
    char *text = malloc(e->size + 1);
    mpx_status st = MPX_OK;
    if (!by_id || !ids || !text)
        st = mpx_fail(MPX_ERR_NOMEM, "out of memory splitting '%s'", source);
    for (size_t i = 0; st == MPX_OK && i < t->n_xml; i++) {
        const char *name = t->xml[i]->name;
        if (!(ids[i] = strndup(name, strlen(name) - 4)))
            st = mpx_fail(MPX_ERR_NOMEM, "out of memory splitting '%s'", source);
        else
            by_id[i] = (keyed){ids[i], (int64_t)i};
    }
    if (st == MPX_OK) {
        qsort(by_id, t->n_xml, sizeof *by_id, cmp_keyed);
        memcpy(text, e->data, e->size);
    }
    char *cursor = text, *line;
    const char *end = text ? text + e->size : NULL;
    for (int row = 1; st == MPX_OK && (line = next_line(&cursor, end)) != NULL; row++) {
        char *tok = strtok(line, " \t");
        if (!tok) continue;
        int64_t a = lookup(by_id, t->n_xml, tok);
        if (a < 0)
            st = mpx_fail(MPX_ERR_INPUT, "'%s' line %d: no annotation '%s.xml' for id '%s'", rule,
                          row, tok, tok);
        else
            split_of[a] = (int8_t)split;
    }
    for (size_t i = 0; ids && i < t->n_xml; i++) free(ids[i]);
    free(ids);
    free(by_id);
    free(text);
    return st;
}

mpx_status mpx_voc_split(const char *source, const mpx_voc_tree *t, const mpx_voc_image *anns,
                         mpx_split split, int8_t *split_of, char *rule, size_t cap) {
    memset(split_of, -1, t->n_xml);
    if (t->csv[0] || t->csv[1]) {
        mpx_voc_where(source, t, NULL,
                      split == MPX_SPLIT_TRAIN ? "train_labels.csv" : "test_labels.csv", rule, cap);
        return csv_split(source, t, anns, split_of);
    }
    if (t->sets[0] || t->sets[1] || t->sets[2] || t->sets[3])
        return list_split(source, t, split, split_of, rule, cap);
    snprintf(rule, cap, "hash");
    for (size_t i = 0; i < t->n_xml; i++) {
        const char *name = t->xml[i]->name;
        mpx_sha256 sha;
        char hex[65];
        mpx_sha256_init(&sha);
        mpx_sha256_update(&sha, name, strlen(name) - 4);
        mpx_sha256_final_hex(&sha, hex);
        hex[8] = '\0';
        split_of[i] = strtoul(hex, NULL, 16) % 5 == 0 ? MPX_SPLIT_TEST : MPX_SPLIT_TRAIN;
    }
    return MPX_OK;
}
