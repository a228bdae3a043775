/* cifar10.h — CIFAR-10 binary-format constants shared by the reader and the converter
 * (internal to data/). */
#ifndef MPX_DATA_CIFAR10_H
#define MPX_DATA_CIFAR10_H

enum {
    MPX_CIFAR10_SIDE = 32,
    MPX_CIFAR10_PLANE = 32 * 32,
    MPX_CIFAR10_RECORD = 1 + 3 * 32 * 32, /* label byte + R, G, B planes (row-major) */
    MPX_CIFAR10_TRAIN_FILES = 5,
    MPX_CIFAR10_OFFICIAL_TRAIN = 50000,
    MPX_CIFAR10_OFFICIAL_TEST = 10000
};

#define MPX_CIFAR10_DIRNAME "cifar-10-batches-bin"
#define MPX_CIFAR10_ARCHIVE "cifar10-jpg.tar.gz"
#define MPX_CIFAR10_MANIFEST "SHA256SUMS"

/* File i of a split: data_batch_<i+1>.bin (train, i < 5) or test_batch.bin. */
const char *mpx_cifar10_file_name(int split, int i);

#endif
