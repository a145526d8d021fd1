/* npy.h - NumPy's .npy files of float32 arrays: the training program's
 * --predict input and --output file (runtime/predict.c).
 *
 * The format is NumPy's documented one (numpy/lib/format.py, "NPY format";
 * docs/mxnet.md has the summary): the 6 bytes "\x93NUMPY", a major and a
 * minor version byte, the header length (u16 little endian in version 1.0,
 * u32 in 2.0), then the header: the ASCII text of a Python dict literal
 * with the keys 'descr', 'fortran_order' and 'shape', padded with spaces and
 * ended by '\n' so that the data start at a multiple of 64 bytes (16 in
 * files of older NumPy releases, also read), then the elements.
 *
 * Only what ampc exchanges is read: descr '<f4' (little-endian float32),
 * fortran_order False (C order), a shape of up to RT_MAX_RANK dimensions,
 * and exactly prod(shape) elements after the header.  Anything else gets a
 * message naming the file and the first problem.
 */
#ifndef AMPC_NPY_H
#define AMPC_NPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rt.h" /* RT_MAX_RANK */

typedef struct {
    int rank;
    int64_t shape[RT_MAX_RANK];
    int64_t numel;
    size_t data_offset; /* where the elements start */
} RtNpyHeader;

/* Parses the magic and header at buf[len] (len: the whole file, or at
 * least the header); the data must then be numel * 4 bytes from
 * data_offset to the file's end (checked by rt_npy_parse and rt_npy_read).
 * False with "NAME: ..." in err. */
bool rt_npy_parse_header(const void *buf, size_t len, const char *name, RtNpyHeader *h,
                         char *err, size_t errlen);
/* The header, then exactly numel float32 values to the end of buf.  *data
 * (malloc'ed, aligned) receives them. */
bool rt_npy_parse(const void *buf, size_t len, const char *name, RtNpyHeader *h, float **data,
                  char *err, size_t errlen);
/* Reads a whole .npy file (a regular file, noted as an input: fileio.h);
 * *data is malloc'ed. */
bool rt_npy_read(const char *path, RtNpyHeader *h, float **data, char *err, size_t errlen);

/* The header of a C-order '<f4' array of this shape (version 1.0, or 2.0
 * when it does not fit a u16 length), padded to 64 bytes, into dst[cap];
 * returns its length, 0 when cap is too small. */
size_t rt_npy_header(char *dst, size_t cap, int rank, const int64_t *shape);
/* Writes the array atomically (a temporary file renamed over path, never
 * one of the run's inputs); what names the flag for messages. */
bool rt_npy_write(const char *path, const char *what, int rank, const int64_t *shape,
                  const float *data, char *err, size_t errlen);

#endif /* AMPC_NPY_H */
