/* data.h - the data sets of a run: one RtDataset per source, filled by its
 * reader under data/ (synthetic.c, digits.c; the other sources:
 * data_ext.h, recordio.h).  The loop (train.c) opens one through datasrc.c
 * and asks it for batches; the readers know nothing of the loop.
 */
#ifndef AMPC_DATA_DATA_H
#define AMPC_DATA_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the data set ---------------------------------------------------------- */

typedef enum { RT_SPLIT_TRAIN, RT_SPLIT_VAL } RtSplit;

/* How a raw byte v of channel ch (the sample's [channels][inner] order:
 * element e is in channel e / (sample_size / channels)) becomes a float:
 * ((float)v / div - mean[ch]) / std[ch] (kernels/ingest.h).  channels 1:
 * one mean and std for every element. */
#define RT_INGEST_MAXC 4 /* kernels/ingest.h's AMPC_INGEST_MAXC */
typedef struct {
    int channels;
    float div, mean[RT_INGEST_MAXC], std[RT_INGEST_MAXC];
} RtIngestNorm;
/* the scaling alone (IDX: 255, digits: 16): mean 0, std 1 */
RtIngestNorm rt_ingest_scale(float div);
/* fill's floats from fill_raw's bytes: n samples of sample_size, as the
 * devices' ingest computes them (the sources' fill and the tests) */
void rt_ingest_floats(const RtIngestNorm *g, const uint8_t *raw, int64_t n, int64_t sample_size,
                      float *x);
struct RtDataset;
/* fill for a source with fill_raw: its bytes, then rt_ingest_floats */
void rt_fill_from_raw(const struct RtDataset *ds, RtSplit split, const int64_t *idx, int64_t n,
                      float *x, float *y);

typedef struct RtDataset {
    const char *name;
    int64_t sample_size; /* floats per sample */
    int64_t classes;
    int64_t ntrain, nval;
    float *x, *y;     /* digits: every row [ntrain + nval, sample_size], labels; file order
                              (idx, cifar10: x is a byte block, data_ext.h) */
    uint64_t seed;    /* synthetic */
    int64_t image[3]; /* [C, H, W] of an image source (digits [1, 8, 8]); all 0: none */
    /* Copies samples idx[0..n) of a split into x [n, sample_size] and y [n]. */
    void (*fill)(const struct RtDataset *ds, RtSplit split, const int64_t *idx, int64_t n, float *x,
                 float *y);
    /* Optional (NULL: none), for a source that decodes ahead (recordio):
     * src its state; plan gets the training samples of an epoch in the
     * order its batches will be asked for (before the first); error says
     * why a fill failed (NULL: it did not); release frees src. */
    void *src;
    void (*plan)(const struct RtDataset *ds, int64_t epoch, const int64_t *order, int64_t n);
    const char *(*error)(const struct RtDataset *ds);
    void (*release)(struct RtDataset *ds);
    const char *summary; /* a line the run starts with (recordio: records, parts, threads) */
    /* Optional (NULL: the source gives only floats): the raw form of the
     * same samples, for a device that uploads bytes and normalises them
     * itself (device.h's ingest; docs/data.md, "Raw samples").  Copies
     * samples idx[0..n) of a split as the source keeps them, one byte per
     * element, into raw [n, sample_size] and their labels into y; `norm`
     * says how each byte becomes fill's float (kernels/ingest.h's
     * ampc_ingest_value, bit for bit what fill gives). */
    void (*fill_raw)(const struct RtDataset *ds, RtSplit split, const int64_t *idx, int64_t n,
                     uint8_t *raw, float *y);
    RtIngestNorm norm;
} RtDataset;

/* data/digits.c: frees what a reader allocated (x, y, its source state). */
void rt_data_free(RtDataset *ds);

/* ---- data/synthetic.c ------------------------------------------------------ */

/* Virtual samples, element e of sample k of a split is
 * U(-1, 1) from (seed, split, k, e), its label uniform in [0, classes).
 * Nothing is stored. */
#define RT_SYNTHETIC_TRAIN 10240
#define RT_SYNTHETIC_VAL 1024
/* the generator's keys (kernels/splitmix.h's ampc_rand_key) of a split's data
 * and label streams: what a device that makes the batch itself needs
 * (cuda/synthetic.cuh), so both compute the same values */
typedef struct {
    uint64_t x, y;
} RtSyntheticKeys;
RtSyntheticKeys rt_synthetic_keys(uint64_t seed, RtSplit split);
void rt_data_synthetic(RtDataset *ds, int64_t sample_size, int64_t classes, uint64_t seed,
                       int64_t ntrain, int64_t nval);
/* whether ds is rt_data_synthetic's (a device may make its batches: the
 * loop asks the device, device.h's synthetic_batch) */
bool rt_data_is_synthetic(const RtDataset *ds);
/* the labels of samples idx[0..n) alone (fill's y): the host's copy of a
 * batch the device made, for the metrics */
void rt_synthetic_labels(const RtDataset *ds, RtSplit split, const int64_t *idx, int64_t n,
                         float *y);

/* ---- data/digits.c ---------------------------------------------------------- */

/* scikit-learn's digits.csv.gz (1,797 rows of 64 pixels 0..16
 * and a label 0..9; an optional header line).  Pixels are scaled by 1/16.
 * Validation: every sixth data row (0-based rows 5, 11, ...: 299 of 1,797),
 * training: the other rows (1,498), both in file order.  False with a
 * message naming the file (and line) on error. */
#define RT_DIGITS_ROWS 1797
#define RT_DIGITS_VAL_EVERY 6
#define RT_DIGITS_PIXELS 64
#define RT_DIGITS_CLASSES 10
bool rt_data_digits(RtDataset *ds, const char *path, char *err, size_t errlen);

#endif
