/* mxparams.h - MXNet's NDArray-list file (what mx.nd.save, Module.save_checkpoint's
 * PREFIX-NNNN.params and HybridBlock.export write): read and written by the
 * training program's --load-params and --save-params (runtime/predict.c).
 *
 * The format, from MXNet 1.9.1's src/ndarray/ndarray.cc (NDArray::Save/Load,
 * LegacyLoad) and dmlc-core's serializer (docs/mxnet.md, "Weights and
 * prediction", has the table), all little endian:
 *
 *   u64 0x112 (kMXAPINDArrayListMagic), u64 reserved,
 *   u64 array count, each array, u64 name count (0 or the array count),
 *   each name as u64 length + bytes.
 *
 *   An array: u32 magic.  V2 (0xF993fac9) and V3 (0xF993faca, numpy shape
 *   semantics): i32 storage type (0 dense), shape, i32 device type, i32
 *   device id, i32 type flag, the elements.  V1 (0xF993fac8): the same
 *   without the storage type.  Anything else is a legacy array whose magic
 *   word is its rank, followed by u32 dimensions (then device, type flag,
 *   elements).  A shape is i32 rank + i64 dimensions.
 *
 * Only dense float32 (type flag 0), float16 (2) and bfloat16 (12) arrays are
 * kept; every other dtype and the sparse storage types are refused by name.
 * The reader never trusts a size: every count, rank, dimension and byte
 * length is checked against what is left of the file before it is used, so
 * a malformed file gets a message naming the file, the array and the byte
 * offset, never a crash or an allocation larger than the file.
 */
#ifndef AMPC_MXPARAMS_H
#define AMPC_MXPARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rt.h" /* RT_MAX_RANK */

#define RT_MX_LIST_MAGIC 0x112u
#define RT_MX_V1_MAGIC 0xF993fac8u
#define RT_MX_V2_MAGIC 0xF993fac9u
#define RT_MX_V3_MAGIC 0xF993facau

/* mshadow's type flags of the dtypes kept */
enum { RT_MX_FLOAT32 = 0, RT_MX_FLOAT16 = 2, RT_MX_BFLOAT16 = 12 };

/* The array header a writer uses (the reader takes all four). */
typedef enum { RT_MX_LEGACY, RT_MX_V1, RT_MX_V2, RT_MX_V3 } RtMxVersion;

typedef struct {
    char *name;        /* the key as stored ("arg:fc1_weight"); NULL in an unnamed list */
    RtMxVersion version;
    bool none;         /* an empty NDArray (no shape, no data) */
    int type_flag;     /* RT_MX_FLOAT32, RT_MX_FLOAT16 or RT_MX_BFLOAT16 */
    int rank;
    int64_t shape[RT_MAX_RANK];
    int64_t numel;
    const void *data;  /* numel elements of type_flag, little endian, maybe unaligned */
    size_t offset;     /* where data starts in the file */
} RtMxArray;

typedef struct {
    int n;
    RtMxArray *a;
    bool named;        /* the file holds a name per array */
    void *owned;       /* the file's bytes (the data point into them), freed with the list */
    size_t bytes_read; /* rt_mx_read: bytes of the file read, also after a refusal (it reads
                          only as far as the parse has got) */
} RtMxList;

/* mshadow's name of a type flag ("float32", "int8", ...), or NULL. */
const char *rt_mx_dtype_name(int type_flag);
/* Bytes per element of a kept type flag (4 or 2), 0 for any other. */
size_t rt_mx_dtype_size(int type_flag);

/* Parses a whole file held in buf[len] (name is the file, for messages).
 * The arrays' data point into buf, which must outlive the list.  False with
 * "NAME: ..." in err on the first problem. */
bool rt_mx_parse(const void *buf, size_t len, const char *name, RtMxList *l, char *err,
                 size_t errlen);
/* Reads and parses path (a regular file, noted as one of the run's
 * inputs: fileio.h), reading only as far as the parse has got: the header
 * is checked before the rest is read, and every size against the file's
 * size before its bytes are read. */
bool rt_mx_read(const char *path, RtMxList *l, char *err, size_t errlen);
void rt_mx_free(RtMxList *l);

/* Element i of array a as fp32 (16-bit values widened exactly). */
float rt_mx_get(const RtMxArray *a, int64_t i);

/* The file of l's arrays in memory (malloc'ed into *out, *outlen bytes);
 * each array with the header v.  False on a rank, dtype or name the format
 * cannot hold, or out of memory. */
bool rt_mx_serialize(const RtMxList *l, RtMxVersion v, unsigned char **out, size_t *outlen,
                     char *err, size_t errlen);
/* Writes it to path atomically (a temporary file renamed over path, never
 * one of the run's inputs: fileio.h); what names the flag for messages. */
bool rt_mx_write(const char *path, const char *what, const RtMxList *l, RtMxVersion v, char *err,
                 size_t errlen);

#endif /* AMPC_MXPARAMS_H */
