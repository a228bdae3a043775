/* detect.h — object-detection data for SSD-style experiments: boxes, the Pascal VOC reader,
 * procedural scenes, SSD's augmentation with exact box transforms, and the batch loader.
 *
 * A box is (xmin, ymin, xmax, ymax) in normalised image coordinates: 0 is the left (top) edge
 * of the first pixel, 1 the right (bottom) edge of the last, so x = pixel-edge position /
 * image width. Resizing an image therefore leaves its boxes unchanged. An image has at most
 * MPX_DET_MAX_BOXES boxes.
 *
 * Sources:
 *   - Pascal VOC: a directory or .tar.gz in the VOC layout (Annotations/ *.xml, JPEGImages/)
 *     or the raccoon layout (annotations/, images/, train_labels.csv, test_labels.csv).
 *     mpx_voc_load decodes one split into memory at size x size (no cache: the raccoon set
 *     loads in well under a second).
 *   - Procedural scenes (the default dataset): objects of an image-classification dataset
 *     (CIFAR-10 or Fashion-MNIST) pasted onto textured backgrounds with exact boxes; scene i
 *     is a pure function of (seed, i), rendered on demand.
 *
 * The loader turns either source into float NHWC batches [B, N, N, 3] with boxes
 * [B, MPX_DET_MAX_BOXES, 4], labels [B, MPX_DET_MAX_BOXES] (-1: no box) and counts [B],
 * prepared by a background thread exactly like data/loader.c: a batch is a pure function of
 * (seed, epoch, batch index), so a loader created at a saved position continues exactly.
 * data/README.md ("Detection") gives the formats, the split rules and the augmentation.
 */
#ifndef MPX_DETECT_H
#define MPX_DETECT_H

#include <stddef.h>
#include <stdint.h>

#include "mpx/data.h"
#include "mpx/error.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    MPX_DET_MAX_BOXES = 64, /* per image (VOC 2007/2012 have at most 42 / 56) */
    MPX_VOC_NAME_MAX = 256  /* bytes of a file or class name, NUL included */
};

typedef struct {
    float xmin, ymin, xmax, ymax; /* normalised, 0 <= xmin < xmax <= 1, 0 <= ymin < ymax <= 1 */
    int32_t label;                /* class id in [0, num_classes) */
    int32_t difficult;            /* VOC's "difficult" flag (0 for scenes) */
} mpx_det_box;

/* Intersection over union of two boxes (0 when either is empty). */
double mpx_det_iou(const mpx_det_box *a, const mpx_det_box *b);

/* ---- in-memory detection dataset ---- */

typedef struct {
    int64_t n;          /* images */
    int size;           /* every image is size x size x 3 (RGB) */
    uint8_t *images;    /* [n, size, size, 3] */
    int32_t *counts;    /* [n] boxes per image, <= MPX_DET_MAX_BOXES */
    mpx_det_box *boxes; /* [n, MPX_DET_MAX_BOXES]: image i's are the first counts[i] */
    int num_classes;
    char **class_names; /* [num_classes], owned */
    char **ids;         /* [n] image ids (VOC: the annotation's file stem), owned; may be NULL */
} mpx_det_dataset;

/* Allocate zeroed images, counts and boxes and copy the class names; ids stay NULL. `ds` is
 * overwritten (free it first if it held data). */
mpx_status mpx_det_dataset_alloc(mpx_det_dataset *ds, int64_t n, int size, int num_classes,
                                 const char *const *class_names);
/* Free everything and zero the struct (safe on a zeroed struct). */
void mpx_det_dataset_free(mpx_det_dataset *ds);
/* Check sizes, counts, labels and that every box is well-formed; `what` names the dataset. */
mpx_status mpx_det_dataset_validate(const mpx_det_dataset *ds, const char *what);
static inline const uint8_t *mpx_det_dataset_image(const mpx_det_dataset *ds, int64_t i) {
    return ds->images + (size_t)i * (size_t)ds->size * (size_t)ds->size * 3;
}
/* Per-channel mean and standard deviation of pixel/255 over all images. */
void mpx_det_dataset_channel_stats(const mpx_det_dataset *ds, float mean[3], float std[3]);

/* ---- Pascal VOC annotations ---- */

typedef struct {
    char name[MPX_VOC_NAME_MAX];   /* class name as written (entities decoded, spaces trimmed) */
    int difficult;                 /* 0 or 1 (0 when absent) */
    double xmin, ymin, xmax, ymax; /* <bndbox> as written, in pixels */
} mpx_voc_object;

typedef struct {
    char filename[MPX_VOC_NAME_MAX]; /* the image's file name (no directory part) */
    int width, height;               /* <size> in pixels */
    int n_objects;
    mpx_voc_object objects[MPX_DET_MAX_BOXES]; /* in file order */
} mpx_voc_annotation;

/* Parse one annotation: `text` holds n bytes (no NUL needed); `path` names it in errors.
 * Required: root <annotation>, <filename>, <size> with <width> and <height> (1..65535), and
 * per <object> a <name> and a <bndbox> with <xmin> <ymin> <xmax> <ymax>. VOC coordinates are
 * 1-based inclusive pixel indices, 1 <= xmin < xmax <= width (0 <= xmin with `zero_based`).
 * Malformed or truncated XML, a missing field, a number that is not a plain decimal (or has
 * more than 12 digits), an impossible box and more than MPX_DET_MAX_BOXES objects are
 * MPX_ERR_INPUT naming the file and the object (counted from 0 in file order). */
mpx_status mpx_voc_parse(const char *text, size_t n, const char *path, int zero_based,
                         mpx_voc_annotation *out);
/* The normalised box of an object of a width x height image: pixel edges [xmin - 1, xmax]
 * (or [xmin, xmax] when zero_based) divided by the width, likewise in y; label and difficult
 * are left 0. */
mpx_det_box mpx_voc_object_box(const mpx_voc_object *o, int width, int height, int zero_based);

typedef struct {
    int size; /* images are resized (aspect not kept, as in SSD) to size x size; 0: 300 */
    /* class ids: the index in class_names (an unknown name is an error); NULL: the names in
     * all annotations of the source (every split), sorted bytewise */
    const char *const *class_names;
    int num_classes;
    int zero_based; /* 1: coordinates are 0-based pixel edges (some tools); 0: VOC 1-based */
} mpx_voc_opts;

typedef enum { MPX_VOC_LAYOUT_VOC = 1, MPX_VOC_LAYOUT_RACCOON } mpx_voc_layout;

typedef struct {
    char root[1024]; /* the dataset folder found (inside the archive for a .tar.gz) */
    mpx_voc_layout layout;
    char split_rule[1200]; /* the file the split came from, or "hash" (see data/README.md) */
    int64_t annotations;   /* annotation files parsed (all splits) */
    int64_t images;        /* images in this split */
    int64_t boxes;         /* boxes in this split */
    int checksummed;       /* 1: the archive matched a SHA256SUMS beside it */
    double load_s;         /* wall seconds: read, parse, decode and resize */
} mpx_voc_info;

/* Load one split of a VOC-layout source (a directory, or a .tar.gz / .tgz / .tar read as a
 * stream) into memory at opts->size. The dataset folder is the source itself or its single
 * subfolder (inside an archive: the one folder holding the annotations). Splits: the raccoon
 * CSVs (train_labels.csv / test_labels.csv, cross-checked against the XML), else VOC's
 * ImageSets/Main/{trainval|train}.txt and {test|val}.txt, else a hash rule. JPEGs are decoded
 * with libjpeg (grayscale expanded to RGB) and must have the size the annotation states.
 * `opts` and `info` may be NULL. */
mpx_status mpx_voc_load(const char *source, mpx_split split, const mpx_voc_opts *opts,
                        mpx_det_dataset *out, mpx_voc_info *info);

/* ---- procedural scenes ---- */

typedef struct {
    int size;                     /* scenes are size x size RGB */
    int min_objects, max_objects; /* per scene, uniform (some may not fit: see min_visible) */
    float scale_min, scale_max;   /* object side sqrt(w h) / size, uniform in [min, max] */
    float aspect_max;             /* w / h log-uniform in [1 / aspect_max, aspect_max] */
    float max_iou;                /* boxes of one scene have pairwise IoU < max_iou */
    float min_visible;            /* objects pasted later leave this fraction of a box visible */
    float max_outside;            /* fraction of an object's side that may lie outside */
    int64_t n;                    /* scenes in the set: indices [0, n) */
    uint64_t seed;
} mpx_scene_config;

/* Defaults: 128 x 128, 1..6 objects, scale 0.15..0.6, aspect up to 2, IoU < 0.5, visible
 * >= 0.5, up to 0.25 outside; seed 1 for MPX_SPLIT_TRAIN and 2 for MPX_SPLIT_TEST (pair them
 * with the object pool of that split: CIFAR-10 train vs test images). */
mpx_scene_config mpx_scene_config_default(mpx_split split, int64_t n);

typedef struct mpx_scenes mpx_scenes;

/* A generator pasting the images of `objects` (c = 1 or 3, e.g. mpx_cifar10_load or
 * mpx_fashion_mnist_load; it must outlive the generator), labelled with their classes. */
mpx_status mpx_scenes_create(const mpx_dataset *objects, const mpx_scene_config *cfg,
                             mpx_scenes **out);
void mpx_scenes_free(mpx_scenes *s);
const mpx_scene_config *mpx_scenes_config(const mpx_scenes *s);

typedef struct {
    int64_t source; /* index of the pasted image in the object pool */
    int32_t label;
    int x, y, w, h; /* pasted rectangle in scene pixels (may extend past the edges) */
} mpx_scene_object;

typedef struct {
    int background; /* 0 gradient, 1 stripes, 2 blobs (value noise), 3 magnified image crop */
    int count;
    mpx_scene_object objects[MPX_DET_MAX_BOXES]; /* paint order: later ones on top */
} mpx_scene_layout;

/* Render scene `index` into image[size, size, 3] with its boxes (the pasted rectangles clipped
 * to the scene, / size, in paint order) and *count; `layout` (may be NULL) receives what was
 * drawn. Allocates scratch per call (the loader keeps its own). */
mpx_status mpx_scenes_render(const mpx_scenes *s, int64_t index, uint8_t *image, mpx_det_box *boxes,
                             int *count, mpx_scene_layout *layout);
/* All n scenes into an in-memory dataset (ids "scene-<i>"), rendered in parallel. */
mpx_status mpx_scenes_render_dataset(const mpx_scenes *s, mpx_det_dataset *out);

/* ---- augmentation and the batch loader ---- */

typedef struct {
    int batch_size;
    uint64_t seed;
    int shuffle;   /* 1: a new permutation every epoch; 0: source order */
    int drop_last; /* 1: floor(n/B) full batches per epoch; 0: ceil(n/B), the last partial */
    int size;      /* network input: batches are size x size; 0: the source's size */
    /* SSD augmentation (none in eval); applied in this order, each drawn per example */
    int photometric;  /* brightness, contrast, saturation, hue jitter (each p = 1/2) */
    int expand;       /* p = 1/2: zoom out onto a mean-coloured canvas, ratio [1, expand_max] */
    float expand_max; /* 4 in SSD */
    int crop;         /* SSD's crop: min IoU in {0.1, 0.3, 0.5, 0.7, 0.9}, any, or none
                         (a mode whose 50 trials fail is redrawn, up to 12 times) */
    int flip;         /* horizontal, p = 1/2 */
    /* x = (pixel/255 - mean[ch]) / std[ch]; the expand canvas is round(255 mean) */
    float mean[3], std[3];
    int prefetch; /* batches prepared ahead of the caller, >= 1 */
    int threads;  /* OpenMP threads preparing one batch, >= 1 */
} mpx_det_loader_config;

/* Training: shuffle, drop_last, expand (max 4) + crop + flip, no photometric jitter, mean 0
 * std 1, prefetch 2, threads 1. */
mpx_det_loader_config mpx_det_loader_config_train(int batch_size, uint64_t seed);
/* Evaluation: source order, no augmentation, every example once, the last batch partial. */
mpx_det_loader_config mpx_det_loader_config_eval(int batch_size);

/* The augmentation drawn for one example, in the source's pixel-edge coordinates:
 * photometric jitter of the source; the source placed at (left, top) on a canvas_w x canvas_h
 * canvas of the mean colour; the canvas rectangle (crop_x, crop_y, crop_w, crop_h) cut out,
 * keeping the boxes whose centre lies strictly inside it (clipped to it); the cut-out
 * resized to size x size; then `flip` mirrors x. Identity values when a step is off. */
typedef struct {
    float brightness;  /* added to every channel, in [-32, 32] (0: off) */
    float contrast;    /* multiplier in [0.5, 1.5] (1: off) */
    float saturation;  /* x = gray + saturation (x - gray), in [0.5, 1.5] (1: off) */
    float hue;         /* chroma rotation in degrees (YIQ), in [-18, 18] (0: off) */
    int contrast_last; /* 1: contrast after saturation and hue, 0: right after brightness */
    int canvas_w, canvas_h, left, top;
    float min_iou; /* the crop's constraint: 0 any, 0.1 .. 0.9; -1 no crop ("none" drawn) */
    int crop_x, crop_y, crop_w, crop_h;
    int flip;
} mpx_det_augment;

/* Draw the augmentation of example `example` in `epoch` for a src_size x src_size source with
 * the given boxes, exactly as the loader does (stream MPX_RNG_AUGMENT, counters from
 * (epoch << 40) | (example << 12)). */
mpx_status mpx_det_augment_draw(const mpx_det_loader_config *cfg, int src_size,
                                const mpx_det_box *boxes, int count, int64_t epoch, int64_t example,
                                mpx_det_augment *out);
/* Apply it: dst[N, N, 3] = normalise(augment(src[src_size, src_size, 3])), N = cfg->size (or
 * src_size), with the transformed boxes in out_boxes and their number in *out_count.
 * Allocates scratch per call (the loader keeps its own). */
mpx_status mpx_det_augment_apply(const mpx_det_loader_config *cfg, const mpx_det_augment *a,
                                 const uint8_t *src, int src_size, const mpx_det_box *boxes,
                                 int count, float *dst, mpx_det_box *out_boxes, int *out_count);

typedef struct {
    const float *x;           /* [batch_size, size, size, 3]; rows >= n are zero */
    const float *boxes;       /* [batch_size, MPX_DET_MAX_BOXES, 4] xmin ymin xmax ymax; 0: none */
    const int32_t *labels;    /* [batch_size, MPX_DET_MAX_BOXES]; -1 where there is no box */
    const uint8_t *difficult; /* [batch_size, MPX_DET_MAX_BOXES] */
    const int32_t *counts;    /* [batch_size] boxes per example (0 for padding rows) */
    const int64_t *index;     /* [batch_size] example index in the source; -1 for padding */
    int n;                    /* examples in this batch (< batch_size only for a last partial) */
    int batch_size, size;
    mpx_loader_pos pos;
} mpx_det_batch;

typedef struct mpx_det_loader mpx_det_loader;

/* A loader over an in-memory dataset / a scene generator (either must outlive the loader)
 * whose first batch is the one at `start`. All memory is allocated here; the worker thread
 * starts. */
mpx_status mpx_det_loader_create(const mpx_det_dataset *ds, const mpx_det_loader_config *cfg,
                                 mpx_loader_pos start, mpx_det_loader **out);
mpx_status mpx_det_loader_create_scenes(const mpx_scenes *s, const mpx_det_loader_config *cfg,
                                        mpx_loader_pos start, mpx_det_loader **out);
/* Wait for the next batch; its pointers stay valid until the next call or the free. A worker
 * failure is returned here, with its message, on this and every later call. */
mpx_status mpx_det_loader_next(mpx_det_loader *L, mpx_det_batch *out);
/* The position of the batch the next mpx_det_loader_next returns (save it in checkpoints). */
mpx_loader_pos mpx_det_loader_position(const mpx_det_loader *L);
int64_t mpx_det_loader_batches_per_epoch(const mpx_det_loader *L);
/* Stop the worker (it finishes the batch it is on) and free everything. NULL is fine. */
void mpx_det_loader_free(mpx_det_loader *L);

#ifdef __cplusplus
}
#endif

#endif
