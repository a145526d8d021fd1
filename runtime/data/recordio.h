/* recordio.h - MXNet's RecordIO files (.rec, with an optional .idx) of
 * image records, and the `recordio(TRAIN.rec, VAL.rec, ...)` data source
 * (data/recordio.c: the record reader; data/image.c: decoding and
 * augmentation; data/prefetch.c: the worker pool).  docs/training.md,
 * RecordIO, has the format with its sources.
 *
 * The format (dmlc-core include/dmlc/recordio.h and src/recordio.cc; MXNet
 * python/mxnet/recordio.py), all integers little endian as x86 writes them:
 *   a record is one or more parts; a part is u32 magic 0xced7230a, u32
 *   lrecord = cflag << 29 | length (cflag 3 bits, length 29 bits), length
 *   bytes of data, then zero bytes up to a multiple of 4.  cflag 0: a whole
 *   record; 1: the first part of a split record, 2: a middle part, 3: the
 *   last.  A writer splits a record where its data hold the magic at an
 *   offset that is a multiple of 4, dropping those 4 bytes; a reader joins
 *   the parts putting the magic back between them.
 *   The data of an image record: the IRHeader, u32 flag, f32 label, u64 id,
 *   u64 id2 (24 bytes); flag 0: one label, in the header; flag n > 0: n f32
 *   labels follow the header (its label field is 0); then the image file
 *   (JPEG or PNG).
 *   The .idx: one text line per record, "KEY\tOFFSET\n", the byte offset of
 *   the record's first part.
 */
#ifndef AMPC_RECORDIO_H
#define AMPC_RECORDIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data.h"

#define RT_REC_MAGIC 0xced7230au
#define RT_REC_IRHEADER 24
#define RT_REC_MAX_PART ((1u << 29) - 1)  /* the 29-bit length */
#define RT_REC_MAX_RECORD ((size_t)1 << 30) /* a joined record: refused above */

/* A .rec file: read with pread from fd, or from mem (tests, the fuzz
 * target) when mem is not NULL. */
typedef struct {
    const char *path;
    int fd;
    const uint8_t *mem;
    int64_t size;
} RtRecFile;

/* The record whose first part starts at off: at most limit bytes of its
 * joined data into *buf (grown as needed; *cap its size), their count in
 * *n, the whole joined length in *total and the offset after its last part
 * in *next.  Every part's header is checked, and nothing past a part's end
 * is read.  False with "PATH: byte offset X: ..." in err. */
bool rt_rec_read(const RtRecFile *f, int64_t off, size_t limit, uint8_t **buf, size_t *cap,
                 size_t *n, size_t *total, int64_t *next, char *err, size_t errlen);

/* One image record's data parsed: the IRHeader, the labels, the image. */
typedef struct {
    uint32_t flag;        /* 0: one label (label); else that many in labels */
    float label;          /* the first label */
    uint64_t id, id2;
    const uint8_t *labels; /* flag f32 values (unaligned), or NULL */
    const uint8_t *image;
    size_t image_size;
    int format;           /* RT_IMG_JPEG, RT_IMG_PNG, or RT_IMG_NONE (unrecognised) */
} RtRecImage;
enum { RT_IMG_NONE, RT_IMG_JPEG, RT_IMG_PNG };

/* Parses data[0..n) (n may be a prefix of the record when total > n: the
 * image then ends early).  False with a message (without the file and
 * offset, which the caller has) when the header or the labels do not fit. */
bool rt_rec_image(const uint8_t *data, size_t n, size_t total, RtRecImage *im, char *err,
                  size_t errlen);

/* What an open of a .rec finds about each record. */
typedef struct {
    int64_t off;  /* its first part */
    float label;  /* its first label */
    uint64_t id;
} RtRecEntry;

/* Walks the whole file, part headers and each record's IRHeader: every
 * record's entry, in file order, into *e (malloc'd; *n of them).  A
 * record whose image is neither JPEG nor PNG is an error.  When idx_path
 * names a file, each of its lines must name a record's offset (an error
 * naming the line otherwise).  False with "PATH: byte offset X: ...". */
bool rt_rec_scan(const RtRecFile *f, const char *idx_path, RtRecEntry **e, int64_t *n, char *err,
                 size_t errlen);

/* ---- the data source --------------------------------------------------- */

/* The options of recordio(...), named as ImageRecordIter names them. */
typedef struct {
    char train[1024], val[1024]; /* .rec paths (val "": no validation set) */
    int resize;                  /* shorter side to this first; 0: off */
    bool rand_crop, rand_mirror, random_resized_crop;
    float min_random_area, max_random_area;   /* random_resized_crop: area fraction */
    float min_aspect_ratio, max_aspect_ratio; /* ... width/height */
    float mean[3], std[3], scale;
    int num_parts, part_index;
    int threads;  /* decoding threads (--data-threads) */
    int64_t decode_mb; /* the memory the decoding threads share, MiB (--data-decode-mb);
                        * 0: a quarter of physical memory, at most 4096 */
    int prefetch; /* batches decoded ahead */
} RtRecOptions;
void rt_rec_options_default(RtRecOptions *o);
/* Sets one key=value of recordio(...); false with a message (the bounds
 * printed exactly).  Both in recordio.c, with the reader: they need no
 * thread (the fuzz target of the option string links them alone). */
bool rt_rec_option_set(RtRecOptions *o, const char *key, const char *value, char *err,
                       size_t errlen);
/* Whether key is an option of recordio(...). */
bool rt_rec_option_known(const char *key);

/* Opens the source for images [c, h, w] (c 1 or 3) of up to max_classes
 * classes.  ds->fill decodes; ds->plan starts decoding an epoch ahead;
 * ds->error says why a fill failed; ds->summary is the start line. */
bool rt_data_recordio(RtDataset *ds, const RtRecOptions *ro, int c, int h, int w,
                      int64_t max_classes, uint64_t seed, char *err, size_t errlen);

#endif /* AMPC_RECORDIO_H */
