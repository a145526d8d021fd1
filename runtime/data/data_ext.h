/* data_ext.h - the IDX (MNIST format), Fashion-MNIST and CIFAR-10 data
 * sources and the training-time augmentation (data/idx.c, data/cifar10.c,
 * data/augment.c), beside data.h's data set and its simplest sources.
 *
 * Storage.  Both readers keep the pixels as bytes, as the files have them
 * (Fashion-MNIST: 55 MB instead of 220 MB of floats; CIFAR-10: 184 MB
 * instead of 737 MB), and normalise in `fill`; `fill_raw` hands the bytes
 * out as they are, for a device that normalises them (data.h's raw form,
 * with the normalisation in ds->norm).  RtDataset has no byte field
 * yet, so the byte block hangs off ds->x (a malloc'd block, only ever read
 * through rt_data_bytes); ds->y holds the labels as floats.  Rows are
 * [ntrain + nval, sample_size]: the training set, then the validation set,
 * each in file order.  rt_data_free frees both.  (When data.h's RtDataset
 * grows a `uint8_t *bytes` field, rt_data_bytes is the one place to change,
 * plus rt_data_free.)
 */
#ifndef AMPC_DATA_EXT_H
#define AMPC_DATA_EXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data.h"

static inline const uint8_t *rt_data_bytes(const RtDataset *ds)
{
    return (const uint8_t *)(const void *)ds->x;
}

/* ---- data/idx.c: IDX files (the MNIST format) --------------------------- */

/* IDX: big-endian u32 magic 0x0000TTDD (TT the element type, 0x08 = u8;
 * DD the rank), DD big-endian u32 dimensions, then the elements, row-major.
 * Images are rank 3 [n, rows, cols] (0x00000803), labels rank 1 [n]
 * (0x00000801).  Plain or gzip-compressed files (zlib's gzopen reads both). */
#define RT_IDX_MAGIC_IMAGES 0x00000803u
#define RT_IDX_MAGIC_LABELS 0x00000801u

/* A two-split data set from four IDX files: the training images and labels
 * and the validation (test) images and labels.  Pixels are scaled to [0, 1]
 * (x/255) and not standardised; the data shape is [1, rows, cols]; labels
 * must be below `classes`.  Errors (false, message in err) name the file
 * and the byte offset (of the decompressed stream, for gzip files): a
 * missing file, a bad magic number, a rank other than 3 (images) or 1
 * (labels), a zero dimension, image sizes that differ between the two
 * splits, image and label counts that disagree, a label out of range, a
 * truncated file, bytes after the last element, corrupt gzip data. */
bool rt_data_idx_classes(RtDataset *ds, const char *train_images, const char *train_labels,
                         const char *test_images, const char *test_labels, int64_t classes,
                         char *err, size_t errlen);
/* The same with 10 classes (MNIST, Fashion-MNIST, KMNIST); ds->name "idx". */
bool rt_data_idx(RtDataset *ds, const char *train_images, const char *train_labels,
                 const char *test_images, const char *test_labels, char *err, size_t errlen);

/* data/idx.c: Fashion-MNIST (Debian's dataset-fashion-mnist: IDX files
 * under RT_FASHION_MNIST_DIR).  In dir, each of train-images-idx3-ubyte,
 * train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte
 * is read plain when present, else with .gz appended.  dir NULL or "" means
 * RT_FASHION_MNIST_DIR.  60,000 training and 10,000 validation (the test
 * set) 28x28 images, 10 classes; data shape [1, 28, 28]; pixels x/255 in
 * [0, 1], not standardised (mean 0.286, std 0.353 over the training set);
 * ds->name "fashion_mnist".  Any other image size is an error. */
#define RT_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#define RT_FASHION_MNIST_TRAIN 60000
#define RT_FASHION_MNIST_VAL 10000
#define RT_FASHION_MNIST_SIDE 28
#define RT_FASHION_MNIST_CLASSES 10
bool rt_data_fashion_mnist(RtDataset *ds, const char *dir, char *err, size_t errlen);

/* ---- data/cifar10.c: the CIFAR-10 binary format ------------------------- */

/* In dir (or, when data_batch_1.bin is not there, dir/cifar-10-batches-bin,
 * as the archive unpacks): data_batch_1.bin .. data_batch_5.bin (training,
 * in that order) and test_batch.bin (validation).  Each record is a label
 * byte 0..9 then 3,072 pixel bytes: 1,024 red, 1,024 green, 1,024 blue,
 * each 32x32 row-major, i.e. CHW.  Data shape [3, 32, 32].  Each value is
 * (x/255 - mean[c]) / std[c] with CIFAR-10's training-set per-channel mean
 * and standard deviation (below).  Each file may hold any whole number of
 * records (the real ones hold 10,000).  Errors name the file and, where
 * there is one, the byte offset: a missing file, a size that is not a
 * multiple of 3,073, a label above 9, a read error. */
#define RT_CIFAR10_RECORD 3073
#define RT_CIFAR10_PIXELS 3072
#define RT_CIFAR10_CLASSES 10
#define RT_CIFAR10_BATCHES 5
extern const float rt_cifar10_mean[3], rt_cifar10_std[3];
bool rt_data_cifar10(RtDataset *ds, const char *dir, char *err, size_t errlen);

/* ---- data/augment.c: random crop with padding and horizontal mirror ------ */

/* The parameters of one sample's augmentation, a pure function of (seed,
 * epoch, index): the crop shift dy, dx uniform in [-pad, pad] and, when
 * mirror, a fair coin flip. */
typedef struct {
    int dy, dx;
    bool flip;
} RtAugment;
RtAugment rt_augment_draw(int pad, bool mirror, uint64_t seed, uint64_t epoch, int64_t index);
/* Applies a: out[ch][y][x] = in[ch][y + dy][x' + dx], x' = flip ? w-1-x : x,
 * and 0 where y + dy or x' + dx falls outside the image (zero padding, in
 * the normalised values' space).  scratch holds c*h*w floats. */
void rt_augment_apply(float *x, int c, int h, int w, RtAugment a, float *scratch);
/* rt_augment_apply(x, ..., rt_augment_draw(pad, mirror, seed, epoch, index)):
 * pad 4 on 32x32 is the usual "pad 4, random 32x32 crop".  pad 0 and
 * mirror false leave x unchanged. */
void rt_augment(float *x, int c, int h, int w, int pad, bool mirror, uint64_t seed,
                uint64_t epoch, int64_t index, float *scratch);

#endif /* AMPC_DATA_EXT_H */
