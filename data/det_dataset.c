/* det_dataset.c — the in-memory detection dataset (allocation, validation, statistics) and
 * box IoU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpx/detect.h"

double mpx_det_iou(const mpx_det_box *a, const mpx_det_box *b) {
    double iw = fmin(a->xmax, b->xmax) - fmax(a->xmin, b->xmin);
    double ih = fmin(a->ymax, b->ymax) - fmax(a->ymin, b->ymin);
    double area_a = ((double)a->xmax - a->xmin) * ((double)a->ymax - a->ymin);
    double area_b = ((double)b->xmax - b->xmin) * ((double)b->ymax - b->ymin);
    if (!(area_a > 0) || !(area_b > 0) || iw <= 0 || ih <= 0) return 0;
    double inter = iw * ih;
    return inter / (area_a + area_b - inter);
}

void mpx_det_dataset_free(mpx_det_dataset *ds) {
    if (!ds) return;
    for (int k = 0; ds->class_names && k < ds->num_classes; k++) free(ds->class_names[k]);
    for (int64_t i = 0; ds->ids && i < ds->n; i++) free(ds->ids[i]);
    free(ds->class_names);
    free(ds->ids);
    free(ds->images);
    free(ds->counts);
    free(ds->boxes);
    memset(ds, 0, sizeof *ds);
}

mpx_status mpx_det_dataset_alloc(mpx_det_dataset *ds, int64_t n, int size, int num_classes,
                                 const char *const *class_names) {
    memset(ds, 0, sizeof *ds);
    if (n < 0 || size <= 0 || size > 16384 || num_classes <= 0)
        return mpx_fail(MPX_ERR_INPUT,
                        "detection dataset of %lld images %dx%d, %d classes: bad size",
                        (long long)n, size, size, num_classes);
    ds->images = mpx_calloc((size_t)n ? (size_t)n : 1, (size_t)size * size * 3);
    ds->counts = mpx_calloc((size_t)n ? (size_t)n : 1, sizeof *ds->counts);
    ds->boxes = mpx_calloc(((size_t)n ? (size_t)n : 1) * MPX_DET_MAX_BOXES, sizeof *ds->boxes);
    ds->class_names = mpx_calloc((size_t)num_classes, sizeof *ds->class_names);
    ds->num_classes = num_classes;
    int ok = ds->images && ds->counts && ds->boxes && ds->class_names;
    for (int k = 0; ok && k < num_classes; k++) {
        char name[16];
        snprintf(name, sizeof name, "%d", k);
        ok = (ds->class_names[k] = strdup(class_names ? class_names[k] : name)) != NULL;
    }
    if (!ok) {
        mpx_det_dataset_free(ds);
        return mpx_fail(MPX_ERR_NOMEM, "out of memory for %lld detection images %dx%d",
                        (long long)n, size, size);
    }
    ds->n = n;
    ds->size = size;
    return MPX_OK;
}

mpx_status mpx_det_dataset_validate(const mpx_det_dataset *ds, const char *what) {
    if (ds->n < 0 || ds->size <= 0 || ds->num_classes <= 0 ||
        (ds->n > 0 && (!ds->images || !ds->counts || !ds->boxes)))
        return mpx_fail(MPX_ERR_INPUT,
                        "detection dataset %s: bad shape [%lld,%d,%d,3] / %d classes", what,
                        (long long)ds->n, ds->size, ds->size, ds->num_classes);
    for (int64_t i = 0; i < ds->n; i++) {
        if (ds->counts[i] < 0 || ds->counts[i] > MPX_DET_MAX_BOXES)
            return mpx_fail(MPX_ERR_INPUT, "detection dataset %s: image %lld has %d boxes (0..%d)",
                            what, (long long)i, ds->counts[i], MPX_DET_MAX_BOXES);
        for (int k = 0; k < ds->counts[i]; k++) {
            const mpx_det_box *b = &ds->boxes[i * MPX_DET_MAX_BOXES + k];
            if (b->label < 0 || b->label >= ds->num_classes || !(b->xmin >= 0) ||
                !(b->xmin < b->xmax) || !(b->xmax <= 1) || !(b->ymin >= 0) ||
                !(b->ymin < b->ymax) || !(b->ymax <= 1))
                return mpx_fail(MPX_ERR_INPUT,
                                "detection dataset %s: image %lld box %d (%g %g %g %g, label %d) "
                                "is not a box in [0,1] with a label in [0, %d)",
                                what, (long long)i, k, b->xmin, b->ymin, b->xmax, b->ymax, b->label,
                                ds->num_classes);
        }
    }
    return MPX_OK;
}

void mpx_det_dataset_channel_stats(const mpx_det_dataset *ds, float mean[3], float std[3]) {
    /* The images have mpx_dataset's layout, so its statistics apply unchanged. */
    mpx_dataset view = {.n = ds->n, .h = ds->size, .w = ds->size, .c = 3, .images = ds->images};
    mpx_dataset_channel_stats(&view, mean, std);
}
