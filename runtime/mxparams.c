/* mxparams.c - MXNet's NDArray-list file format (mxparams.h; docs/mxnet.md,
 * "Weights and prediction").  Written from the format's description (MXNet
 * 1.9.1's NDArray::Save/Load), not from its code: the reader checks every
 * size against the bytes left before it allocates or copies anything.
 */
#include "mxparams.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fileio.h"
#include "checkpoint.h" /* RT_CKPT_MAGIC */
#include "kernels/half.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "mxparams.c reads and writes little-endian files on a little-endian host"
#endif

/* The names of mshadow's TypeFlag values (mshadow/base.h). */
static const char *const dtype_names[] = {
    "float32", "float64", "float16", "uint8", "int32", "int8", "int64",
    "bool", "int16", "uint16", "uint32", "uint64", "bfloat16",
};

const char *rt_mx_dtype_name(int type_flag)
{
    int n = (int)(sizeof dtype_names / sizeof dtype_names[0]);
    return type_flag >= 0 && type_flag < n ? dtype_names[type_flag] : NULL;
}

size_t rt_mx_dtype_size(int type_flag)
{
    return type_flag == RT_MX_FLOAT32 ? 4 : type_flag == RT_MX_FLOAT16 ? 2
           : type_flag == RT_MX_BFLOAT16 ? 2 : 0;
}

float rt_mx_get(const RtMxArray *a, int64_t i)
{
    const unsigned char *p = a->data;
    if (a->type_flag == RT_MX_FLOAT32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return a->type_flag == RT_MX_FLOAT16 ? ampc_half_to_float(h) : ampc_bf16_to_float(h);
}

/* ---- reading ------------------------------------------------------------------- */

/* The bytes being parsed: a whole buffer (rt_mx_parse), or a file read as
 * the parse needs it (rt_mx_read: fd >= 0).  len is the size either way, so
 * every size is checked against the whole file before it is used, but a
 * file is read only as far as the parse has got: a 3 GB file that is not a
 * params file is refused after its first 16 bytes, not read. */
typedef struct {
    const unsigned char *p; /* byte 0 (moves when buf grows) */
    size_t len, at;
    int fd;             /* -1: p holds all len bytes */
    unsigned char *buf; /* fd >= 0: the first `loaded` bytes of the file */
    size_t loaded, cap;
    const char *file;
    char *err;
    size_t errlen;
    bool failed;
} Rd;

static bool fail(Rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(Rd *r, const char *fmt, ...)
{
    if (r->failed)
        return false;
    r->failed = true;
    int k = snprintf(r->err, r->errlen, "%s: ", r->file);
    if (k < 0 || (size_t)k >= r->errlen)
        return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + k, r->errlen - (size_t)k, fmt, ap);
    va_end(ap);
    return false;
}

static size_t left(const Rd *r) { return r->len - r->at; }

/* Reading from a file: the first `end` bytes (end <= len) in r->buf, read
 * ahead by at least 64 KiB, the buffer grown by doubling. */
static bool load_to(Rd *r, size_t end)
{
    if (r->fd < 0 || end <= r->loaded)
        return true;
    size_t want = end - r->loaded < 65536 ? r->loaded + 65536 : end;
    want = want < r->len ? want : r->len;
    if (want > r->cap) {
        size_t cap = r->cap * 2 > want && r->cap * 2 <= r->len ? r->cap * 2 : want;
        unsigned char *b = realloc(r->buf, cap);
        if (!b)
            return fail(r, "out of memory for %zu bytes", cap);
        r->buf = b, r->cap = cap, r->p = b;
    }
    while (r->loaded < want) {
        ssize_t k = pread(r->fd, r->buf + r->loaded, want - r->loaded, (off_t)r->loaded);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return fail(r, "read error after %zu of %zu bytes%s%s", r->loaded, r->len,
                        k < 0 ? ": " : " (the file shrank)", k < 0 ? strerror(errno) : "");
        r->loaded += (size_t)k;
    }
    return true;
}

/* n bytes at the cursor, or a "truncated" message saying what was wanted.
 * The pointer holds until the next take (the buffer may move). */
static const unsigned char *take(Rd *r, size_t n, const char *what)
{
    if (r->failed)
        return NULL;
    if (n > left(r)) {
        fail(r, "truncated: %s needs %zu bytes at byte %zu, the file has %zu left", what, n,
             r->at, left(r));
        return NULL;
    }
    if (!load_to(r, r->at + n))
        return NULL;
    const unsigned char *q = r->p + r->at;
    r->at += n;
    return q;
}

static bool get_u32(Rd *r, uint32_t *v, const char *what)
{
    const unsigned char *q = take(r, 4, what);
    if (q)
        memcpy(v, q, 4);
    return q != NULL;
}

static bool get_u64(Rd *r, uint64_t *v, const char *what)
{
    const unsigned char *q = take(r, 8, what);
    if (q)
        memcpy(v, q, 8);
    return q != NULL;
}

/* A shape: V1/V2/V3 an i32 rank and i64 dimensions, legacy u32 dimensions
 * (its rank was the magic word).  *rank -1: an unknown (none) shape. */
static bool get_shape(Rd *r, RtMxArray *a, int64_t legacy_rank, const char *where)
{
    int64_t rank = legacy_rank;
    char what[160];
    snprintf(what, sizeof what, "%s: the rank", where);
    if (legacy_rank < 0) {
        uint32_t u;
        if (!get_u32(r, &u, what))
            return false;
        rank = (int32_t)u;
    }
    if (rank < -1)
        return fail(r, "%s: rank %lld (at byte %zu) is negative", where, (long long)rank,
                    r->at - 4);
    if (rank == -1) {
        a->rank = -1;
        return true;
    }
    size_t dsize = legacy_rank >= 0 ? 4 : 8;
    if (rank > RT_MAX_RANK) {
        if ((uint64_t)rank > left(r) / dsize)
            return fail(r, "%s: rank %lld needs %llu bytes of dimensions, the file has %zu "
                        "left%s", where, (long long)rank,
                        (unsigned long long)rank * dsize, left(r),
                        legacy_rank >= 0 ? " (no NDArray magic number: a legacy header whose "
                                           "first word is the rank, or not an array at all)"
                                         : "");
        return fail(r, "%s: rank %lld exceeds %d", where, (long long)rank, RT_MAX_RANK);
    }
    a->rank = (int)rank;
    snprintf(what, sizeof what, "%s: the dimensions", where);
    for (int d = 0; d < a->rank; d++) {
        if (dsize == 4) {
            uint32_t u;
            if (!get_u32(r, &u, what))
                return false;
            a->shape[d] = u;
        } else {
            uint64_t u;
            if (!get_u64(r, &u, what))
                return false;
            a->shape[d] = (int64_t)u;
        }
        if (a->shape[d] < -1)
            return fail(r, "%s: dimension %d is %lld", where, d, (long long)a->shape[d]);
    }
    return true;
}

static bool read_array(Rd *r, RtMxArray *a, int i, uint64_t n)
{
    char where[96];
    size_t start = r->at;
    snprintf(where, sizeof where, "array %d of %llu (at byte %zu)", i, (unsigned long long)n,
             start);
    uint32_t magic;
    char what[160];
    snprintf(what, sizeof what, "%s: its header", where);
    if (!get_u32(r, &magic, what))
        return false;
    a->version = magic == RT_MX_V3_MAGIC ? RT_MX_V3 : magic == RT_MX_V2_MAGIC ? RT_MX_V2
                 : magic == RT_MX_V1_MAGIC ? RT_MX_V1 : RT_MX_LEGACY;
    if (a->version >= RT_MX_V2) {
        uint32_t st;
        snprintf(what, sizeof what, "%s: the storage type", where);
        if (!get_u32(r, &st, what))
            return false;
        if (st != 0)
            return fail(r, "%s: storage type %s: only dense arrays (0) are read", where,
                        st == 1 ? "1 (row_sparse)" : st == 2 ? "2 (csr)" : "unknown");
    }
    if (!get_shape(r, a, a->version == RT_MX_LEGACY ? (int64_t)magic : -1, where))
        return false;
    /* a none array stops after its shape: V2 by rank 0, the others by an
     * unknown rank or dimension */
    bool unknown = a->rank < 0;
    for (int d = 0; d < a->rank; d++)
        unknown |= a->shape[d] < 0;
    if ((a->version == RT_MX_V2 && a->rank == 0) || unknown) {
        if (a->version == RT_MX_V2 && a->rank > 0)
            return fail(r, "%s: an unknown dimension (-1) outside numpy shape semantics",
                        where);
        a->none = true;
        a->rank = a->rank < 0 ? 0 : a->rank;
        return true;
    }
    uint32_t dev[2];
    snprintf(what, sizeof what, "%s: its device", where);
    if (!get_u32(r, &dev[0], what) || !get_u32(r, &dev[1], what))
        return false;
    if (dev[0] != 1 && dev[0] != 2 && dev[0] != 3 && dev[0] != 5)
        return fail(r, "%s: device type %d is not cpu (1), gpu (2), cpu_pinned (3) or "
                    "cpu_shared (5)", where, (int)dev[0]);
    uint32_t tf;
    snprintf(what, sizeof what, "%s: its type flag", where);
    if (!get_u32(r, &tf, what))
        return false;
    size_t es = rt_mx_dtype_size((int)tf);
    if (es == 0) {
        const char *dn = rt_mx_dtype_name((int)tf);
        return fail(r, "%s: dtype %s (type flag %d) is not read: only float32, float16 and "
                    "bfloat16 arrays are", where, dn ? dn : "unknown", (int)tf);
    }
    a->type_flag = (int)tf;
    /* the element count, bounded by what is left before any product can wrap */
    uint64_t cap = left(r) / es, numel = 1;
    bool big = false;
    for (int d = 0; d < a->rank; d++) {
        uint64_t dim = (uint64_t)a->shape[d];
        if (dim == 0) {
            numel = 0;
            big = false;
            break;
        }
        if (big || numel > cap / dim)
            big = true;
        else
            numel *= dim;
    }
    if (big || numel > cap)
        return fail(r, "truncated: %s: its %s elements need more bytes than the %zu left after "
                    "byte %zu", where, rt_mx_dtype_name(a->type_flag), left(r), r->at);
    a->numel = (int64_t)numel;
    snprintf(what, sizeof what, "%s: its elements", where);
    a->offset = r->at; /* data is set once the buffer stops moving */
    return take(r, (size_t)numel * es, what) != NULL;
}

/* A name for messages: printable ASCII as it is, other bytes as \xNN, cut at
 * 120 characters (names come from the file). */
static void show_name(char *dst, size_t cap, const char *s)
{
    size_t o = 0;
    for (; *s && o + 5 < cap && o < 120; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 32 && c < 127 && c != '\\')
            dst[o++] = (char)c;
        else
            o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c);
    }
    dst[o] = 0;
    if (*s && o + 4 < cap)
        strcpy(dst + o, "...");
}

static bool read_names(Rd *r, RtMxList *l, uint64_t n)
{
    uint64_t nn;
    if (!get_u64(r, &nn, "the name count"))
        return false;
    if (nn != 0 && nn != n)
        return fail(r, "the file holds %llu names for %llu arrays (at byte %zu)",
                    (unsigned long long)nn, (unsigned long long)n, r->at - 8);
    l->named = nn != 0;
    for (int i = 0; i < (int)nn; i++) {
        uint64_t k;
        char what[96];
        snprintf(what, sizeof what, "name %d", i);
        if (!get_u64(r, &k, what))
            return false;
        if (k > left(r))
            return fail(r, "truncated: name %d is %llu bytes at byte %zu, the file has %zu left",
                        i, (unsigned long long)k, r->at, left(r));
        const unsigned char *q = take(r, (size_t)k, what);
        if (memchr(q, 0, (size_t)k))
            return fail(r, "name %d (at byte %zu) holds a NUL byte", i, r->at - (size_t)k);
        if (!(l->a[i].name = malloc((size_t)k + 1)))
            return fail(r, "out of memory");
        memcpy(l->a[i].name, q, (size_t)k);
        l->a[i].name[k] = 0;
        for (int j = 0; j < i; j++)
            if (strcmp(l->a[j].name, l->a[i].name) == 0) {
                char shown[512];
                show_name(shown, sizeof shown, l->a[i].name);
                return fail(r, "the name '%s' appears twice (arrays %d and %d)", shown, j, i);
            }
    }
    return true;
}

static bool parse(Rd *r, RtMxList *l);

bool rt_mx_parse(const void *buf, size_t len, const char *name, RtMxList *l, char *err,
                 size_t errlen)
{
    memset(l, 0, sizeof *l);
    Rd r = {.p = buf, .len = len, .fd = -1, .file = name, .err = err, .errlen = errlen};
    return parse(&r, l);
}

/* The list in r; the arrays' data point into r->p. */
static bool parse(Rd *r, RtMxList *l)
{
    size_t len = r->len;
    uint64_t magic, reserved, n;
    if (len < 16)
        return fail(r,
                    "truncated: %zu bytes, shorter than the 16-byte header of an MXNet "
                    "NDArray file",
                    len);
    if (!get_u64(r, &magic, "the header") || !get_u64(r, &reserved, "the header"))
        return false;
    if (magic != RT_MX_LIST_MAGIC && memcmp(r->p, RT_CKPT_MAGIC, 8) == 0)
        return fail(r,
                    "this is an ampc checkpoint (--save-dir), not an MXNet .params file: "
                    "continue from it with --resume %s (or predict from it: --resume %s "
                    "--predict X.npy)",
                    r->file, r->file);
    if (magic != RT_MX_LIST_MAGIC)
        return fail(r,
                    "not an MXNet NDArray file (mx.nd.save, .params): its first 8 bytes "
                    "are 0x%016llx, not the list magic 0x112",
                    (unsigned long long)magic);
    if (!get_u64(r, &n, "the array count"))
        return false;
    /* every array takes at least its 4-byte header */
    if (n > left(r) / 4)
        return fail(r, "truncated: %llu arrays cannot fit the %zu bytes left after byte 24",
                    (unsigned long long)n, left(r));
    if (n > INT32_MAX / 2)
        return fail(r, "%llu arrays: more than ampc reads", (unsigned long long)n);
    /* the table grows with the arrays read, not with the count the file claims */
    size_t cap = 0;
    for (int i = 0; (uint64_t)i < n && !r->failed; i++) {
        if ((size_t)i == cap) {
            cap = cap ? (cap * 2 < n ? cap * 2 : n) : (n < 64 ? n : 64);
            RtMxArray *a = realloc(l->a, cap * sizeof *a);
            if (!a)
                return fail(r, "out of memory");
            l->a = a;
        }
        memset(&l->a[i], 0, sizeof l->a[i]);
        l->n = i + 1;
        read_array(r, &l->a[i], i, n);
    }
    if (!r->failed)
        read_names(r, l, n);
    if (!r->failed && left(r) != 0)
        fail(r, "%zu bytes of trailing data after the names (at byte %zu)", left(r), r->at);
    if (r->failed) {
        rt_mx_free(l);
        return false;
    }
    for (int i = 0; i < l->n; i++)
        if (!l->a[i].none)
            l->a[i].data = r->p + l->a[i].offset;
    return true;
}

void rt_mx_free(RtMxList *l)
{
    for (int i = 0; l->a && i < l->n; i++)
        free(l->a[i].name);
    free(l->a);
    free(l->owned);
    memset(l, 0, sizeof *l);
}

bool rt_mx_read(const char *path, RtMxList *l, char *err, size_t errlen)
{
    memset(l, 0, sizeof *l);
    int64_t size;
    int fd = rt_open_input(path, "params file", &size, err, errlen);
    if (fd < 0)
        return false;
    Rd r = {.len = (size_t)size, .fd = fd, .file = path, .err = err, .errlen = errlen};
    bool ok = parse(&r, l);
    close(fd);
    if (!ok) {
        free(r.buf);
        l->bytes_read = r.loaded;
        return false;
    }
    l->owned = r.buf;
    l->bytes_read = r.loaded;
    return true;
}

/* ---- writing ------------------------------------------------------------------- */

typedef struct {
    unsigned char *p;
    size_t len, cap;
    bool oom;
} Buf;

static void put(Buf *b, const void *src, size_t n)
{
    if (b->oom)
        return;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        unsigned char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void put_u32(Buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(Buf *b, uint64_t v) { put(b, &v, 8); }

static bool write_array(Buf *b, const RtMxArray *a, RtMxVersion v, char *err, size_t errlen)
{
    if (a->rank < 1 || a->rank > RT_MAX_RANK || !rt_mx_dtype_size(a->type_flag)) {
        snprintf(err, errlen, "array %s: rank %d, type flag %d cannot be written",
                 a->name ? a->name : "", a->rank, a->type_flag);
        return false;
    }
    if (v == RT_MX_LEGACY) {
        put_u32(b, (uint32_t)a->rank);
        for (int d = 0; d < a->rank; d++)
            put_u32(b, (uint32_t)a->shape[d]);
    } else {
        put_u32(b, v == RT_MX_V1 ? RT_MX_V1_MAGIC : v == RT_MX_V2 ? RT_MX_V2_MAGIC
                                                                  : RT_MX_V3_MAGIC);
        if (v != RT_MX_V1)
            put_u32(b, 0); /* dense */
        put_u32(b, (uint32_t)a->rank);
        for (int d = 0; d < a->rank; d++)
            put_u64(b, (uint64_t)a->shape[d]);
    }
    put_u32(b, 1); /* cpu */
    put_u32(b, 0); /* device 0 */
    put_u32(b, (uint32_t)a->type_flag);
    put(b, a->data, (size_t)a->numel * rt_mx_dtype_size(a->type_flag));
    return true;
}

bool rt_mx_serialize(const RtMxList *l, RtMxVersion v, unsigned char **out, size_t *outlen,
                     char *err, size_t errlen)
{
    Buf b = {0};
    put_u64(&b, RT_MX_LIST_MAGIC);
    put_u64(&b, 0);
    put_u64(&b, (uint64_t)l->n);
    for (int i = 0; i < l->n; i++)
        if (!write_array(&b, &l->a[i], v, err, errlen)) {
            free(b.p);
            return false;
        }
    put_u64(&b, l->named ? (uint64_t)l->n : 0);
    for (int i = 0; l->named && i < l->n; i++) {
        size_t k = strlen(l->a[i].name);
        put_u64(&b, k);
        put(&b, l->a[i].name, k);
    }
    if (b.oom) {
        free(b.p);
        snprintf(err, errlen, "out of memory");
        return false;
    }
    *out = b.p;
    *outlen = b.len;
    return true;
}

bool rt_mx_write(const char *path, const char *what, const RtMxList *l, RtMxVersion v, char *err,
                 size_t errlen)
{
    unsigned char *p;
    size_t n;
    char msg[512];
    if (!rt_mx_serialize(l, v, &p, &n, msg, sizeof msg)) {
        snprintf(err, errlen, "%s %s: %s", what, path, msg);
        return false;
    }
    RtOutFile o;
    bool ok = rt_out_open(&o, path, what, err, errlen);
    if (ok) {
        fwrite(p, 1, n, o.f);
        ok = rt_out_commit(&o, what, err, errlen);
    }
    free(p);
    return ok;
}
