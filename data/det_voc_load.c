/* det_voc_load.c — mpx_voc_load: collect the files, parse every annotation, map class names to
 * ids, choose the split, decode. Decoding happens on every load (no cache): the raccoon set
 * (200 JPEGs, 13 MB) takes well under a second, which a cache would barely improve. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/det_voc.h"
#include "mpx/runtime.h"

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Class names: the given list, or every name in the annotations, sorted and unique. */
static mpx_status class_list(const mpx_voc_image *anns, size_t n, const mpx_voc_opts *o,
                             const char ***names, int *count) {
    if (o->class_names) {
        if (o->num_classes <= 0)
            return mpx_fail(MPX_ERR_INPUT, "VOC: class_names given with num_classes %d",
                            o->num_classes);
        *names = (const char **)o->class_names;
        *count = o->num_classes;
        return MPX_OK;
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += (size_t)anns[i].n_objects;
    const char **all = malloc((total + 1) * sizeof *all);
    if (!all) return mpx_fail(MPX_ERR_NOMEM, "out of memory collecting class names");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        for (int j = 0; j < anns[i].n_objects; j++) all[k++] = anns[i].objects[j].name;
    qsort(all, total, sizeof *all, cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < total; i++)
        if (u == 0 || strcmp(all[u - 1], all[i]) != 0) all[u++] = all[i];
    if (u == 0) {
        free(all);
        return mpx_fail(MPX_ERR_INPUT, "VOC: the annotations hold no objects, so no classes");
    }
    *names = all;
    *count = (int)u;
    return MPX_OK;
}

static mpx_status map_labels(const mpx_voc_tree *t, const mpx_voc_image *anns, const char **names,
                             int count, int32_t *labels) {
    for (size_t i = 0; i < t->n_xml; i++)
        for (int j = 0; j < anns[i].n_objects; j++) {
            int id = -1;
            for (int c = 0; c < count && id < 0; c++)
                if (strcmp(names[c], anns[i].objects[j].name) == 0) id = c;
            if (id < 0)
                return mpx_fail(MPX_ERR_INPUT,
                                "annotation '%s' object %d: class '%s' is not in the given class "
                                "list (%d names)",
                                t->xml[i]->name, j, anns[i].objects[j].name, count);
            labels[i * MPX_DET_MAX_BOXES + j] = id;
        }
    return MPX_OK;
}

typedef struct {
    mpx_voc_files files;
    mpx_voc_tree tree;
    mpx_voc_image *anns;
    mpx_voc_object *objects; /* every image's, in order */
    int32_t *labels;
    int8_t *split_of;
    int64_t *which;
    const char **names;
    int names_owned;
} load_state;

static void state_free(load_state *s) {
    mpx_voc_tree_free(&s->tree);
    mpx_voc_files_free(&s->files);
    free(s->anns);
    free(s->objects);
    free(s->labels);
    free(s->split_of);
    free(s->which);
    if (s->names_owned) free(s->names);
}

/* Parse every annotation into the compact form (one object array for all images). */
static mpx_status parse_all(const char *source, const mpx_voc_tree *t, int zero_based,
                            load_state *s) {
    mpx_voc_annotation *a = malloc(sizeof *a);
    size_t n_obj = 0, cap = 0;
    mpx_status st = a ? MPX_OK : mpx_fail(MPX_ERR_NOMEM, "out of memory parsing annotations");
    for (size_t i = 0; st == MPX_OK && i < t->n_xml; i++) {
        const mpx_voc_entry *e = t->xml[i];
        char where[1400];
        mpx_voc_where(source, t, t->layout == MPX_VOC_LAYOUT_VOC ? "Annotations" : "annotations",
                      e->name, where, sizeof where);
        if ((st = mpx_voc_parse((const char *)e->data, e->size, where, zero_based, a)) != MPX_OK)
            break;
        if (n_obj + (size_t)a->n_objects > cap) {
            size_t nc = cap ? 2 * cap : 1024;
            mpx_voc_object *no = realloc(s->objects, nc * sizeof *no);
            if (!no) {
                st = mpx_fail(MPX_ERR_NOMEM, "out of memory parsing annotations");
                break;
            }
            s->objects = no;
            cap = nc;
        }
        mpx_voc_image *im = &s->anns[i];
        memcpy(im->filename, a->filename, sizeof im->filename);
        im->width = a->width;
        im->height = a->height;
        im->n_objects = a->n_objects;
        im->objects = NULL;
        memcpy(s->objects + n_obj, a->objects, (size_t)a->n_objects * sizeof *a->objects);
        n_obj += (size_t)a->n_objects;
    }
    free(a);
    /* the object array has stopped moving: point every image at its objects */
    for (size_t i = 0, k = 0; st == MPX_OK && i < t->n_xml; k += (size_t)s->anns[i].n_objects, i++)
        s->anns[i].objects = s->objects + k;
    return st;
}

static mpx_status load(const char *source, mpx_split split, const mpx_voc_opts *o,
                       mpx_det_dataset *out, mpx_voc_info *info, load_state *s) {
    int size = o->size ? o->size : 300;
    if (size < 1 || size > 4096)
        return mpx_fail(MPX_ERR_INPUT, "VOC: image size %d (1..4096)", size);
    MPX_TRY(mpx_voc_collect(source, &s->files, &info->checksummed));
    MPX_TRY(mpx_voc_select_root(source, &s->files, &s->tree));
    const mpx_voc_tree *t = &s->tree;
    info->layout = t->layout;
    int len =
        snprintf(info->root, sizeof info->root, "%s%s%s", source, t->root[0] ? "/" : "", t->root);
    if (len < 0 || len >= (int)sizeof info->root)
        return mpx_fail(MPX_ERR_INPUT, "VOC: path too long: '%s/%s'", source, t->root);
    size_t n = t->n_xml;
    s->anns = malloc(n * sizeof *s->anns);
    s->labels = calloc(n * MPX_DET_MAX_BOXES, sizeof *s->labels);
    s->split_of = malloc(n);
    s->which = malloc(n * sizeof *s->which);
    if (!s->anns || !s->labels || !s->split_of || !s->which)
        return mpx_fail(MPX_ERR_NOMEM, "out of memory for %zu annotations", n);
    MPX_TRY(parse_all(source, t, o->zero_based, s));
    info->annotations = (int64_t)n;
    int num_classes = 0;
    MPX_TRY(class_list(s->anns, n, o, &s->names, &num_classes));
    s->names_owned = !o->class_names;
    MPX_TRY(map_labels(t, s->anns, s->names, num_classes, s->labels));
    MPX_TRY(mpx_voc_split(source, t, s->anns, split, s->split_of, info->split_rule,
                          sizeof info->split_rule));
    int64_t count = 0;
    for (size_t i = 0; i < n; i++)
        if (s->split_of[i] == (int8_t)split) {
            s->which[count++] = (int64_t)i;
            info->boxes += s->anns[i].n_objects;
        }
    if (count == 0)
        return mpx_fail(MPX_ERR_INPUT, "VOC source '%s': the %s split (%s) holds no images", source,
                        split == MPX_SPLIT_TRAIN ? "training" : "test", info->split_rule);
    info->images = count;
    MPX_TRY(mpx_det_dataset_alloc(out, count, size, num_classes, s->names));
    out->ids = calloc((size_t)count, sizeof *out->ids);
    if (!out->ids) return mpx_fail(MPX_ERR_NOMEM, "out of memory for %lld ids", (long long)count);
    for (int64_t i = 0; i < count; i++) {
        const char *name = t->xml[s->which[i]]->name;
        if (!(out->ids[i] = strndup(name, strlen(name) - 4)))
            return mpx_fail(MPX_ERR_NOMEM, "out of memory for ids");
    }
    return mpx_voc_decode(source, t, s->anns, s->labels, s->which, o->zero_based, out);
}

mpx_status mpx_voc_load(const char *source, mpx_split split, const mpx_voc_opts *opts,
                        mpx_det_dataset *out, mpx_voc_info *info) {
    static const mpx_voc_opts defaults = {0};
    mpx_voc_info scratch;
    if (!info) info = &scratch;
    memset(info, 0, sizeof *info);
    memset(out, 0, sizeof *out);
    if (!source) return mpx_fail(MPX_ERR_INPUT, "VOC: no source given");
    if (split != MPX_SPLIT_TRAIN && split != MPX_SPLIT_TEST)
        return mpx_fail(MPX_ERR_INPUT, "VOC: unknown split %d", (int)split);
    double t0 = mpx_now();
    load_state s;
    memset(&s, 0, sizeof s);
    mpx_status st = load(source, split, opts ? opts : &defaults, out, info, &s);
    state_free(&s);
    if (st != MPX_OK) {
        mpx_det_dataset_free(out);
        return st;
    }
    info->load_s = mpx_now() - t0;
    return MPX_OK;
}
