/* image.h - JPEG and PNG decoding and ImageRecordIter's augmentation for
 * the recordio source (data/image.c; docs/training.md, RecordIO).
 *
 * The libraries (libjpeg-turbo's TurboJPEG API, libpng's simplified API)
 * are loaded with dlopen on first use, so that programs which never read an
 * image, and every test that links libampcrt.a by hand, need neither.
 */
#ifndef AMPC_IMAGE_H
#define AMPC_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recordio.h"

/* One thread's decoder (a TurboJPEG handle) and scratch buffers. */
typedef struct {
    void *tj;
    uint8_t *px, *tmp; /* decoded image, resized image: HWC bytes */
    size_t px_cap, tmp_cap;
    void *taps;        /* the resampler's per-axis tables */
    size_t taps_cap;
} RtImgWorker;
void rt_img_worker_free(RtImgWorker *wk);

/* Loads the libraries; false with a message naming the one missing. */
bool rt_img_libs(char *err, size_t errlen);

/* Frees the worker's pixel buffers (px, tmp): what the decoding budget
 * counts; the decoder handle and the small tables stay. */
void rt_img_worker_shrink(RtImgWorker *wk);

/* How an image will be decoded, from its header alone: its size in the
 * file, the size it decodes to (a JPEG is decoded with libjpeg-turbo's 1/2,
 * 1/4 or 1/8 scaling to the smallest size whose shorter side is not below
 * resize=; a PNG, or without resize, at its own size) and the bytes the
 * decoding needs (the decoded pixels, and the resized image). */
typedef struct {
    int w, h;         /* in the file */
    int dw, dh;       /* decoded */
    size_t px_bytes;  /* dw x dh x c */
    size_t tmp_bytes; /* the image resize= makes (0 without) */
} RtImgPlan;
bool rt_img_plan(RtImgWorker *wk, const uint8_t *data, size_t n, int format, int c,
                 const RtRecOptions *o, RtImgPlan *p, char *err, size_t errlen);

/* Decodes an image file as planned into wk->px: p->dh rows of p->dw pixels
 * of c bytes (c 1: grey, 3: RGB).  False with the library's message. */
bool rt_img_decode(RtImgWorker *wk, const uint8_t *data, size_t n, int format, int c,
                   const RtImgPlan *p, char *err, size_t errlen);

/* Where the output image [c, h, w] comes from: wk->px (decoded as p says)
 * resized (resize: the size MXNet computes from the file's size), cropped
 * (the options), mirrored, then normalised into dst, CHW.  Randomness: a
 * pure function of (seed, epoch, key) when train. */
bool rt_img_augment(RtImgWorker *wk, const RtImgPlan *p, const RtRecOptions *o, bool train,
                    int c, int h, int w, uint64_t seed, uint64_t epoch, uint64_t key, float *dst,
                    char *err, size_t errlen);

#endif /* AMPC_IMAGE_H */
