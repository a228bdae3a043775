/* cifar10_format.c — the CIFAR-10 binary format's names, shared by the reader (cifar10.c) and
 * the converter (cifar10_convert.c), which both build on them. */
#include "data/cifar10.h"
#include "mpx/data.h"

const char *const mpx_cifar10_class_names[10] = {
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};

const char *mpx_cifar10_file_name(int split, int i) {
    static const char *const names[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                        "data_batch_4.bin", "data_batch_5.bin"};
    return split == MPX_SPLIT_TRAIN ? names[i] : "test_batch.bin";
}
