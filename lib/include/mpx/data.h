/* data.h — image-classification data: datasets, readers, augmentation, the batch loader.
 *
 * An in-memory dataset holds n uint8 images [n, h, w, c] (HWC, like the engine's NHWC) and
 * int32 labels. Readers fill one from the standard formats:
 *   - CIFAR-10 binary batches (data_batch_1..5.bin, test_batch.bin). mpx_cifar10_load finds
 *     them in the cache, or converts ../shared/data/cifar10-jpg.tar.gz into the cache once
 *     (checksummed); it never substitutes another dataset.
 *   - IDX files (MNIST, Fashion-MNIST), gzip-compressed or raw.
 * A large image folder (ImageNet layout root/<split>/<class>/NAME.JPEG) stays on disk and is
 * decoded on demand by the loader.
 *
 * The loader turns either source into float NHWC batches [B, H, W, C] with int32 labels [B],
 * prepared by a background thread. Its output is a pure function of (seed, epoch, batch index):
 * the order of epoch e is a permutation drawn from stream MPX_RNG_DATA_ORDER, the augmentation
 * of example i in epoch e comes from stream MPX_RNG_AUGMENT keyed by (e, i), so batches do not
 * depend on thread timing and a loader created at a saved position continues exactly.
 * data/README.md describes the formats, the cache layout and the conversion order.
 */
#ifndef MPX_DATA_H
#define MPX_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "mpx/error.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { MPX_DATA_MAX_CHANNELS = 4 };

typedef enum { MPX_SPLIT_TRAIN = 0, MPX_SPLIT_TEST } mpx_split;

/* ---- in-memory dataset ---- */

typedef struct {
    int64_t n;       /* examples */
    int h, w, c;     /* image size; c <= MPX_DATA_MAX_CHANNELS */
    uint8_t *images; /* [n, h, w, c] */
    int32_t *labels; /* [n], each in [0, num_classes) */
    int num_classes;
    char **class_names; /* [num_classes], owned; "0", "1", ... until set */
} mpx_dataset;

/* Allocate zeroed images and labels; `ds` is overwritten (free it first if it held data). */
mpx_status mpx_dataset_alloc(mpx_dataset *ds, int64_t n, int h, int w, int c, int num_classes);
/* Copy num_classes names. */
mpx_status mpx_dataset_set_class_names(mpx_dataset *ds, const char *const *names);
/* Free everything and zero the struct (safe on a zeroed struct). */
void mpx_dataset_free(mpx_dataset *ds);
/* Check sizes and that every label is in [0, num_classes); `what` names the dataset. */
mpx_status mpx_dataset_validate(const mpx_dataset *ds, const char *what);
static inline const uint8_t *mpx_dataset_image(const mpx_dataset *ds, int64_t i) {
    return ds->images + (size_t)i * (size_t)ds->h * (size_t)ds->w * (size_t)ds->c;
}
/* Per-channel mean and standard deviation of pixel/255 over the whole dataset (for
 * normalisation); mean and std have ds->c entries. */
void mpx_dataset_channel_stats(const mpx_dataset *ds, float *mean, float *std);

/* ---- CIFAR-10 ---- */

/* airplane, automobile, bird, cat, deer, dog, frog, horse, ship, truck (labels 0..9). */
extern const char *const mpx_cifar10_class_names[10];

typedef struct {
    /* NULL: <source>/data/cache; the batches live in <cache_dir>/cifar-10-batches-bin/ */
    const char *cache_dir;
    const char *shared_dir; /* NULL: <source>/../shared/data; holds cifar10-jpg.tar.gz */
    int64_t n_train;        /* expected counts; 0: the official 50000 / 10000 (tests: tiny) */
    int64_t n_test;
    int progress;           /* 1: one line on stderr when a conversion starts and ends */
} mpx_cifar10_opts;

typedef struct {
    char batches_dir[1024]; /* where the binary batches are */
    int converted;          /* 1 when this call converted the JPEG archive */
    int checksummed;        /* 1 when the files read were checked against the cache's SHA256SUMS */
    double convert_s;       /* wall seconds of the conversion (0 when none) */
} mpx_cifar10_info;

/* Make sure the binary batches exist, in this order: (1) <cache_dir>/cifar-10-batches-bin/
 * when it holds all six files; (2) else convert <shared_dir>/cifar10-jpg.tar.gz into it once
 * (under a lock file, so concurrent callers convert once); (3) else MPX_ERR_INPUT naming every
 * path tried and how to provide the data. `info` may be NULL. */
mpx_status mpx_cifar10_prepare(const mpx_cifar10_opts *opts, mpx_cifar10_info *info);
/* mpx_cifar10_prepare, then read one split (checked against the manifest and the expected
 * count). `opts` may be NULL (defaults), `info` may be NULL. */
mpx_status mpx_cifar10_load(const mpx_cifar10_opts *opts, mpx_split split, mpx_dataset *out,
                            mpx_cifar10_info *info);
/* Read a split from a directory of binary batches (train: data_batch_1..5.bin concatenated;
 * test: test_batch.bin). When the directory has a SHA256SUMS manifest every file read must
 * match it. Wrong sizes, labels > 9 and checksum mismatches are MPX_ERR_INPUT naming the file
 * (and the record). *checksummed (may be NULL) tells whether a manifest was used. */
mpx_status mpx_cifar10_read_dir(const char *batches_dir, mpx_split split, mpx_dataset *out,
                                int *checksummed);
/* Convert a JPEG archive (train/<class>/NNNN.jpg, test/<class>/NNNN.jpg) into binary batches in
 * `batches_dir`; n_train / n_test are the required counts, a tenth of them per class. */
mpx_status mpx_cifar10_convert(const char *archive, const char *batches_dir, int64_t n_train,
                               int64_t n_test);

/* ---- IDX (MNIST, Fashion-MNIST) ---- */

/* Read an unsigned-byte IDX image file ([n, rows, cols] or [n, rows, cols, c]) and its label
 * file ([n]); gzip or raw. num_classes 0: max label + 1. Errors name the file and what is wrong. */
mpx_status mpx_idx_read(const char *images_path, const char *labels_path, int num_classes,
                        mpx_dataset *out);
/* {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `dir` (NULL:
 * /usr/share/datasets/fashion-mnist), with the ten Fashion-MNIST class names. */
mpx_status mpx_fashion_mnist_load(const char *dir, mpx_split split, mpx_dataset *out);
/* The same file names for MNIST (digits "0".."9"); `dir` is required. */
mpx_status mpx_mnist_load(const char *dir, mpx_split split, mpx_dataset *out);

/* ---- image folder (ImageNet layout) ---- */

typedef struct mpx_image_folder mpx_image_folder;

/* List root/<split>/<class>/ *.jpg|*.jpeg (any case), sorted by class then file name (bytes).
 * Classes are the sorted subdirectory names of root/train (of root/<split> when there is no
 * train folder), so train and val share labels; a val class missing from train is an error. */
mpx_status mpx_image_folder_open(const char *root, const char *split, mpx_image_folder **out);
void mpx_image_folder_free(mpx_image_folder *f);
int64_t mpx_image_folder_count(const mpx_image_folder *f);
int mpx_image_folder_num_classes(const mpx_image_folder *f);
const char *mpx_image_folder_class_name(const mpx_image_folder *f, int k);
int32_t mpx_image_folder_label(const mpx_image_folder *f, int64_t i);
/* root/<split>/<class>/<file> of example i, written into buf; returns buf. */
const char *mpx_image_folder_path(const mpx_image_folder *f, int64_t i, char *buf, size_t cap);
/* Decode example i to RGB uint8 HWC into *buf (grown with realloc when too small; *cap in
 * bytes). Grayscale and CMYK JPEGs are converted to RGB. */
mpx_status mpx_image_folder_decode(const mpx_image_folder *f, int64_t i, uint8_t **buf, size_t *cap,
                                   int *h, int *w);

/* ---- batch loader ---- */

typedef struct {
    int batch_size;
    uint64_t seed;
    int shuffle;   /* 1: a new permutation every epoch; 0: dataset order */
    int drop_last; /* 1: floor(n/B) full batches per epoch; 0: ceil(n/B), the last partial */
    /* augmentation (off in eval) */
    int pad;  /* random crop with zero padding `pad` (CIFAR: 4); needs out size == image size */
    int flip; /* random horizontal flip, p = 1/2 */
    int random_resized_crop; /* area in [scale_min, 1], aspect in [3/4, 4/3], resized to out size */
    float scale_min;         /* 0: 0.08 */
    /* geometry: images of another size than out_h x out_w (and not random-resized-cropped)
     * are resized (shorter side to `resize`) and center-cropped */
    int out_h, out_w; /* 0: the dataset's image size (in-memory datasets only) */
    int resize;       /* 0: out * 8/7 (224 -> 256) */
    /* x = (pixel/255 - mean[ch]) / std[ch] */
    float mean[MPX_DATA_MAX_CHANNELS], std[MPX_DATA_MAX_CHANNELS];
    int prefetch; /* batches prepared ahead of the caller, >= 1 */
    int threads;  /* threads decoding one batch of an image folder (OpenMP), >= 1 */
} mpx_loader_config;

/* Training: shuffle, drop_last, no augmentation yet (set pad/flip/random_resized_crop),
 * mean 0 std 1, prefetch 2, threads 1. */
mpx_loader_config mpx_loader_config_train(int batch_size, uint64_t seed);
/* Evaluation: dataset order, no augmentation, every example once, the last batch partial. */
mpx_loader_config mpx_loader_config_eval(int batch_size);

/* Position of a batch: epoch and batch index within the epoch. */
typedef struct {
    int64_t epoch, batch;
} mpx_loader_pos;

typedef struct {
    const float *x;   /* [batch_size, h, w, c]; rows >= n are zero */
    const int32_t *y; /* [batch_size]; entries >= n are -1 */
    int n;            /* examples in this batch (< batch_size only for a partial last batch) */
    int batch_size, h, w, c;
    mpx_loader_pos pos;
} mpx_batch;

typedef struct mpx_loader mpx_loader;

/* A loader over an in-memory dataset / an image folder (both must outlive the loader) whose
 * first batch is the one at `start` ({0, 0} from the beginning). All memory is allocated here
 * (the image-folder decode buffers grow to the largest image seen); the worker thread starts. */
mpx_status mpx_loader_create(const mpx_dataset *ds, const mpx_loader_config *cfg,
                             mpx_loader_pos start, mpx_loader **out);
mpx_status mpx_loader_create_folder(const mpx_image_folder *f, const mpx_loader_config *cfg,
                                    mpx_loader_pos start, mpx_loader **out);
/* Wait for the next batch. Its pointers stay valid until the next mpx_loader_next or
 * mpx_loader_free. A worker failure (a corrupt JPEG) is returned here, with its message, on
 * this and every later call. */
mpx_status mpx_loader_next(mpx_loader *L, mpx_batch *out);
/* The position of the batch the next mpx_loader_next returns (save it in checkpoints). */
mpx_loader_pos mpx_loader_position(const mpx_loader *L);
int64_t mpx_loader_batches_per_epoch(const mpx_loader *L);
/* Stop the worker (it finishes the batch it is on) and free everything. NULL is fine. */
void mpx_loader_free(mpx_loader *L);

/* The augmentation drawn for `example` in `epoch` from an image of src_h x src_w, as the
 * loader applies it: the output pixel (y, x) of a pad-crop is the source pixel
 * (y + crop_y - pad, x + crop_x - pad), zero outside the image; a resampled example covers the
 * source box (box_x, box_y, box_w, box_h) in pixel-edge coordinates; then `flip` mirrors x. */
typedef struct {
    int resample;       /* 1: box resampled to the output size; 0: integer pad-crop */
    int crop_x, crop_y; /* pad-crop offsets in [0, 2 * pad] */
    double box_x, box_y, box_w, box_h;
    int flip;
} mpx_augment;
mpx_status mpx_loader_augment(const mpx_loader_config *cfg, int src_h, int src_w, int64_t epoch,
                              int64_t example, mpx_augment *out);

#ifdef __cplusplus
}
#endif

#endif
