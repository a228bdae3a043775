/* det_voc.h — the pieces of mpx_voc_load (internal to data/): collecting a source's files
 * (det_voc.c), choosing a split (det_voc_split.c), decoding (det_voc.c). */
#ifndef MPX_DATA_DET_VOC_H
#define MPX_DATA_DET_VOC_H

#include <stddef.h>
#include <stdint.h>

#include "mpx/detect.h"

typedef enum {
    MPX_VOC_XML,
    MPX_VOC_JPEG,
    MPX_VOC_CSV_TRAIN,
    MPX_VOC_CSV_TEST,
    MPX_VOC_SET
} mpx_voc_kind;

typedef struct {
    mpx_voc_kind kind;
    mpx_voc_layout layout; /* the folder naming the file was found under */
    char *root;            /* dataset folder relative to the source ("" for the source) */
    char *name;            /* file name */
    char *path;            /* on disk (directory sources), else NULL */
    uint8_t *data;         /* contents (+ a NUL), NULL for a JPEG on disk */
    size_t size;
} mpx_voc_entry;

typedef struct {
    mpx_voc_entry *e;
    size_t n, cap;
    int archive; /* 1: read from an archive, 0: from a directory */
} mpx_voc_files;

/* The files of the chosen dataset root, sorted by name. */
typedef struct {
    char root[1024];
    mpx_voc_layout layout;
    int archive;
    mpx_voc_entry **xml, **jpeg;
    size_t n_xml, n_jpeg;
    const mpx_voc_entry *csv[2];  /* train_labels.csv, test_labels.csv (or NULL) */
    const mpx_voc_entry *sets[4]; /* ImageSets/Main/{trainval,train,test,val}.txt (or NULL) */
} mpx_voc_tree;

/* A parsed annotation, compact: its objects live in one array shared by all images. */
typedef struct {
    char filename[MPX_VOC_NAME_MAX];
    int width, height, n_objects;
    const mpx_voc_object *objects;
} mpx_voc_image;

/* Read the files that matter from a directory (up to 6 levels deep) or an archive (checked
 * against a SHA256SUMS beside it; *checksummed = 1 when listed there). */
mpx_status mpx_voc_collect(const char *source, mpx_voc_files *f, int *checksummed);
void mpx_voc_files_free(mpx_voc_files *f);
/* The one folder holding annotations, and its files (t points into f). */
mpx_status mpx_voc_select_root(const char *source, mpx_voc_files *f, mpx_voc_tree *t);
void mpx_voc_tree_free(mpx_voc_tree *t);
const mpx_voc_entry *mpx_voc_find_jpeg(const mpx_voc_tree *t, const char *filename);
/* The path of a dataset file for messages: <source>/<root>/<folder>/<name> for a directory,
 * <source>:<root>/<folder>/<name> inside an archive (folder may be NULL). */
const char *mpx_voc_where(const char *source, const mpx_voc_tree *t, const char *folder,
                          const char *name, char *buf, size_t cap);

/* split_of[i] for annotation i (tree order): 0 train, 1 test, -1 neither (VOC lists: only the
 * requested split is read). *rule names the file `split` came from, or "hash". */
mpx_status mpx_voc_split(const char *source, const mpx_voc_tree *t, const mpx_voc_image *anns,
                         mpx_split split, int8_t *split_of, char *rule, size_t rule_cap);
/* A plain decimal [+-]digits[.digits] with at most 12 digits (det_voc_parse.c); 0 if not. */
int mpx_voc_parse_decimal(const char *s, double *out);

/* Decode, check and resize the images of annotations which[0 .. ds->n) into ds (allocated,
 * ids set), with labels[a * MPX_DET_MAX_BOXES + k] the class of object k of annotation a. */
mpx_status mpx_voc_decode(const char *source, const mpx_voc_tree *t, const mpx_voc_image *anns,
                          const int32_t *labels, const int64_t *which, int zero_based,
                          mpx_det_dataset *ds);

#endif
