/* idx.c - IDX files (the MNIST format) and the `fashion_mnist` data source
 * (Debian's dataset-fashion-mnist; DESIGN.md 6).  API: data_ext.h.
 *
 * An IDX file is a big-endian u32 magic 0x0000TTDD (TT the element type,
 * 0x08 for unsigned bytes; DD the rank), DD big-endian u32 dimensions, then
 * the elements row-major.  Images are [n, rows, cols] (0x00000803), labels
 * [n] (0x00000801).  zlib's gzopen/gzread read plain and gzip files alike,
 * so byte offsets in messages are offsets into the decompressed stream,
 * which for a plain file are file offsets.
 *
 * The four headers are read and checked against each other before any
 * data, so a mismatch is reported before 47 MB are decompressed.  Pixels
 * stay bytes in memory (data_ext.h: storage) and become x/255 in fill;
 * there is no standardisation (BatchNorm models do not need it, and [0, 1]
 * is what MXNet's gluon ToTensor gives).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data_ext.h"
#include "fileio.h"

typedef struct {
    const char *path;
    gzFile f;
    int fd;        /* the file itself, for rt_gz_check; -1 when closed */
    int rank;
    uint32_t dim[3];
    int64_t off;   /* decompressed bytes read so far */
    int64_t count; /* elements after the header */
} IdxIn;

static void idx_close(IdxIn *in)
{
    if (in->f)
        gzclose(in->f);
    in->f = NULL;
    if (in->fd >= 0)
        close(in->fd);
    in->fd = -1;
}

/* zlib's message for the last error, without its "path: " prefix; NULL
 * when there was none. */
static const char *zerr(IdxIn *in)
{
    int errnum = Z_OK;
    const char *msg = gzerror(in->f, &errnum);
    if (errnum == Z_OK || errnum == Z_STREAM_END)
        return NULL;
    if (errnum == Z_ERRNO)
        return strerror(errno);
    size_t plen = strlen(in->path);
    if (strncmp(msg, in->path, plen) == 0 && msg[plen] == ':' && msg[plen + 1] == ' ')
        msg += plen + 2;
    return msg;
}

/* Reads n bytes at in->off; false with a message naming the file and the
 * offset where the data stopped (what: what was being read). */
static bool idx_read(IdxIn *in, void *dst, int64_t n, const char *what, char *err, size_t errlen)
{
    unsigned char *p = dst;
    int64_t start = in->off;
    while (n > 0) {
        unsigned chunk = n > (1 << 30) ? 1u << 30 : (unsigned)n;
        int got = gzread(in->f, p, chunk);
        if (got > 0) {
            in->off += got;
            p += got;
            n -= got;
        }
        if (got < (int)chunk) {
            const char *z = zerr(in);
            if (z)
                snprintf(err, errlen, "%s: corrupt or truncated gzip data at byte %lld "
                         "(decompressed) while reading %s at offset %lld: %s", in->path,
                         (long long)in->off, what, (long long)start, z);
            else
                snprintf(err, errlen, "%s: truncated at byte offset %lld: %lld bytes missing "
                         "from %s (which start at offset %lld)", in->path, (long long)in->off,
                         (long long)n, what, (long long)start);
            return false;
        }
    }
    return true;
}

static uint32_t be32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Opens in->path and reads and checks its header: rank want_rank. */
static bool idx_open(IdxIn *in, const char *path, int want_rank, char *err, size_t errlen)
{
    memset(in, 0, sizeof *in);
    in->path = path;
    /* a regular file only: a FIFO would block, a device never end */
    in->fd = rt_open_input(path, NULL, NULL, err, errlen);
    if (in->fd < 0)
        return false;
    errno = 0;
    int fd2 = dup(in->fd); /* gzdopen owns the copy; in->fd stays for rt_gz_check */
    in->f = fd2 >= 0 ? gzdopen(fd2, "rb") : NULL;
    if (!in->f) {
        snprintf(err, errlen, "cannot open %s: %s", path, errno ? strerror(errno) : "out of memory");
        if (fd2 >= 0)
            close(fd2);
        return false;
    }
    gzbuffer(in->f, 1 << 18);
    unsigned char b[12];
    const char *kind = want_rank == 3 ? "images" : "labels";
    uint32_t want = want_rank == 3 ? RT_IDX_MAGIC_IMAGES : RT_IDX_MAGIC_LABELS;
    if (!idx_read(in, b, 4, "the magic number", err, errlen))
        return false;
    uint32_t magic = be32(b);
    if ((magic & 0xffffff00u) != 0x00000800u) {
        snprintf(err, errlen, "%s: offset 0: bad magic 0x%08x: not an IDX file of unsigned "
                 "bytes (%s: 0x%08x)", path, magic, kind, want);
        return false;
    }
    in->rank = (int)(magic & 0xff);
    if (in->rank != want_rank) {
        snprintf(err, errlen, "%s: offset 3: wrong dimensions: %d, expected %d for %s (%s; "
                 "magic 0x%08x, expected 0x%08x)", path, in->rank, want_rank, kind,
                 want_rank == 3 ? "[n, rows, cols]" : "[n]", magic, want);
        return false;
    }
    if (!idx_read(in, b, 4 * (int64_t)want_rank, "the dimensions", err, errlen))
        return false;
    in->count = 1;
    for (int d = 0; d < want_rank; d++) {
        in->dim[d] = be32(b + 4 * d);
        if (in->dim[d] == 0) {
            snprintf(err, errlen, "%s: offset %d: wrong dimensions: dimension %d is 0", path,
                     4 + 4 * d, d);
            return false;
        }
        in->count *= in->dim[d];
        if (in->count > ((int64_t)1 << 40)) {
            snprintf(err, errlen, "%s: offset %d: wrong dimensions: more than 2^40 elements",
                     path, 4 + 4 * d);
            return false;
        }
    }
    return true;
}

/* Reads the elements into dst (in->count bytes), then checks that the
 * stream ends there. */
static bool idx_body(IdxIn *in, uint8_t *dst, char *err, size_t errlen)
{
    if (!idx_read(in, dst, in->count, in->rank == 3 ? "the images" : "the labels", err, errlen))
        return false;
    unsigned char extra[64];
    int got = gzread(in->f, extra, sizeof extra);
    const char *z = zerr(in);
    if (z) {
        snprintf(err, errlen, "%s: corrupt gzip data after the last element (decompressed "
                 "offset %lld): %s", in->path, (long long)in->off, z);
        return false;
    }
    if (got > 0) {
        snprintf(err, errlen, "%s: offset %lld: data after the last element (the header "
                 "describes %lld bytes of elements)", in->path, (long long)in->off,
                 (long long)in->count);
        return false;
    }
    /* zlib ignores bytes after the gzip stream: the compressed file must end
     * with it (the decompressed size is known, which bounds the work) */
    return rt_gz_check(in->fd, in->path, in->off, err, errlen);
}

/* the rows of samples idx[0..n) of a split, as bytes, and their labels */
static void idx_fill_raw(const RtDataset *ds, RtSplit split, const int64_t *idx, int64_t n,
                         uint8_t *raw, float *y)
{
    size_t size = (size_t)ds->sample_size;
    int64_t base = split == RT_SPLIT_VAL ? ds->ntrain : 0;
    const uint8_t *px = rt_data_bytes(ds);
    for (int64_t j = 0; j < n; j++) {
        int64_t r = base + idx[j];
        memcpy(raw + (size_t)j * size, px + (size_t)r * size, size);
        y[j] = ds->y[r];
    }
}

/* need_side > 0: images must be need_side x need_side (of `what`). */
static bool idx_load(RtDataset *ds, const char *train_images, const char *train_labels,
                     const char *test_images, const char *test_labels, int64_t classes,
                     uint32_t need_side, const char *what, char *err, size_t errlen)
{
    memset(ds, 0, sizeof *ds);
    IdxIn in[4];
    memset(in, 0, sizeof in);
    for (int k = 0; k < 4; k++)
        in[k].fd = -1; /* not open: idx_close must not close descriptor 0 */
    const char *paths[4] = {train_images, train_labels, test_images, test_labels};
    uint8_t *px = NULL, *lab = NULL;
    float *y = NULL;
    bool ok = false;
    if (classes < 1 || classes > 256) {
        snprintf(err, errlen, "IDX labels are bytes: %lld classes is not in 1..256",
                 (long long)classes);
        return false;
    }
    for (int k = 0; k < 4; k++) {
        if (!idx_open(&in[k], paths[k], k % 2 ? 1 : 3, err, errlen))
            goto out;
        if (k % 2 == 0 && need_side && (in[k].dim[1] != need_side || in[k].dim[2] != need_side)) {
            snprintf(err, errlen, "%s: offset 8: wrong dimensions: images are %ux%u, %s's are "
                     "%ux%u", paths[k], in[k].dim[1], in[k].dim[2], what, need_side, need_side);
            goto out;
        }
    }
    for (int s = 0; s < 2; s++) {
        IdxIn *im = &in[2 * s], *lb = &in[2 * s + 1];
        if (im->dim[0] != lb->dim[0]) {
            snprintf(err, errlen, "%s: offset 4: %u images, but %s: offset 4: %u labels",
                     im->path, im->dim[0], lb->path, lb->dim[0]);
            goto out;
        }
    }
    if (in[0].dim[1] != in[2].dim[1] || in[0].dim[2] != in[2].dim[2]) {
        snprintf(err, errlen, "%s: offset 8: wrong dimensions: images are %ux%u, but %s: "
                 "offset 8: %ux%u", in[2].path, in[2].dim[1], in[2].dim[2], in[0].path,
                 in[0].dim[1], in[0].dim[2]);
        goto out;
    }
    int64_t ntrain = in[0].dim[0], nval = in[2].dim[0];
    int64_t size = (int64_t)in[0].dim[1] * in[0].dim[2];
    px = malloc((size_t)((ntrain + nval) * size));
    lab = malloc((size_t)(ntrain + nval));
    y = malloc((size_t)(ntrain + nval) * sizeof *y);
    if (!px || !lab || !y) {
        snprintf(err, errlen, "%s: out of memory for %lld images", train_images,
                 (long long)(ntrain + nval));
        goto out;
    }
    if (!idx_body(&in[0], px, err, errlen) || !idx_body(&in[1], lab, err, errlen) ||
        !idx_body(&in[2], px + ntrain * size, err, errlen) ||
        !idx_body(&in[3], lab + ntrain, err, errlen))
        goto out;
    for (int64_t r = 0; r < ntrain + nval; r++) {
        if (lab[r] >= classes) {
            bool tr = r < ntrain;
            int64_t i = tr ? r : r - ntrain;
            snprintf(err, errlen, "%s: offset %lld: label %u of item %lld is outside 0..%lld",
                     tr ? train_labels : test_labels, (long long)(8 + i), lab[r], (long long)i,
                     (long long)classes - 1);
            goto out;
        }
        y[r] = lab[r];
    }
    ds->name = "idx";
    ds->sample_size = size;
    ds->image[0] = 1;
    ds->image[1] = in[0].dim[1];
    ds->image[2] = in[0].dim[2];
    ds->classes = classes;
    ds->ntrain = ntrain;
    ds->nval = nval;
    ds->x = (float *)(void *)px; /* bytes: data_ext.h, storage */
    ds->y = y;
    ds->fill = rt_fill_from_raw;
    ds->fill_raw = idx_fill_raw;
    ds->norm = rt_ingest_scale(255.0f);
    px = NULL;
    y = NULL;
    ok = true;
out:
    for (int k = 0; k < 4; k++)
        idx_close(&in[k]);
    free(px);
    free(lab);
    free(y);
    return ok;
}

bool rt_data_idx_classes(RtDataset *ds, const char *train_images, const char *train_labels,
                         const char *test_images, const char *test_labels, int64_t classes,
                         char *err, size_t errlen)
{
    return idx_load(ds, train_images, train_labels, test_images, test_labels, classes, 0, NULL,
                    err, errlen);
}

bool rt_data_idx(RtDataset *ds, const char *train_images, const char *train_labels,
                 const char *test_images, const char *test_labels, char *err, size_t errlen)
{
    return rt_data_idx_classes(ds, train_images, train_labels, test_images, test_labels, 10, err,
                               errlen);
}

/* dir/name when it exists, else dir/name.gz (reported when neither does). */
static void find_file(char *path, size_t len, const char *dir, const char *name)
{
    struct stat st;
    snprintf(path, len, "%s/%s", dir, name);
    if (stat(path, &st) == 0) /* stat, not open: opening a FIFO blocks */
        return;
    snprintf(path, len, "%s/%s.gz", dir, name);
}

bool rt_data_fashion_mnist(RtDataset *ds, const char *dir, char *err, size_t errlen)
{
    static const char *const names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                         "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    if (!dir || !*dir)
        dir = RT_FASHION_MNIST_DIR;
    if (strlen(dir) > 1000) {
        snprintf(err, errlen, "fashion_mnist: the directory name is longer than 1000 bytes");
        memset(ds, 0, sizeof *ds);
        return false;
    }
    char path[4][1100];
    for (int k = 0; k < 4; k++) {
        find_file(path[k], sizeof path[k], dir, names[k]);
        struct stat st;
        if (stat(path[k], &st) != 0) {
            snprintf(err, errlen, "cannot open %s (nor %s/%s): %s", path[k], dir, names[k],
                     strerror(errno));
            memset(ds, 0, sizeof *ds);
            return false;
        }
    }
    if (!idx_load(ds, path[0], path[1], path[2], path[3], RT_FASHION_MNIST_CLASSES,
                  RT_FASHION_MNIST_SIDE, "Fashion-MNIST", err, errlen))
        return false;
    ds->name = "fashion_mnist";
    return true;
}
