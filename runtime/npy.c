/* npy.c - float32 .npy files (npy.h): the header is parsed as the small
 * subset of a Python dict literal that NumPy writes, strictly, so that a
 * file is either read exactly as NumPy would read it or refused with a
 * message that says what is wrong.
 */
#include "npy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fileio.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c reads and writes '<f4' data on a little-endian host"
#endif

static const char MAGIC[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

static bool fail(char *err, size_t errlen, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool fail(char *err, size_t errlen, const char *name, const char *fmt, ...)
{
    int k = snprintf(err, errlen, "%s: ", name);
    if (k < 0 || (size_t)k >= errlen)
        return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
    va_end(ap);
    return false;
}

/* ---- the header dict ------------------------------------------------------------ */

typedef struct {
    const char *p, *end;
} Cur;

static void skip_ws(Cur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool eat(Cur *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A quoted string without escapes into dst[cap]. */
static bool get_string(Cur *c, char *dst, size_t cap)
{
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return false;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || n + 1 >= cap)
            return false;
        dst[n++] = *c->p++;
    }
    if (c->p >= c->end)
        return false;
    c->p++;
    dst[n] = 0;
    return true;
}

static bool get_word(Cur *c, const char *w)
{
    skip_ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0)
        return false;
    c->p += n;
    return true;
}

/* A tuple of non-negative decimal integers: (), (3,), (3, 4) or (3, 4,). */
static bool get_shape(Cur *c, RtNpyHeader *h, char *why, size_t cap)
{
    if (!eat(c, '('))
        return snprintf(why, cap, "'shape' is not a tuple"), false;
    h->rank = 0;
    bool comma = true; /* an element may follow */
    int n = 0;
    for (;;) {
        skip_ws(c);
        if (eat(c, ')'))
            break;
        if (!comma || c->p >= c->end || *c->p < '0' || *c->p > '9')
            return snprintf(why, cap, "'shape' is not a tuple of integers"), false;
        int64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (INT64_MAX - 9) / 10)
                return snprintf(why, cap, "a dimension of 'shape' overflows"), false;
            v = v * 10 + (*c->p++ - '0');
        }
        if (n >= RT_MAX_RANK)
            return snprintf(why, cap, "'shape' has more than %d dimensions", RT_MAX_RANK), false;
        h->shape[n++] = v;
        comma = eat(c, ',');
    }
    if (n == 1 && !comma) /* (3) is an integer in Python, not a tuple */
        return snprintf(why, cap, "'shape' is (%lld), an integer, not a tuple",
                        (long long)h->shape[0]), false;
    h->rank = n;
    return true;
}

static bool parse_dict(const char *text, size_t len, RtNpyHeader *h, char *why, size_t cap)
{
    Cur c = {text, text + len};
    bool seen[3] = {false, false, false};
    char key[32], descr[64];
    bool fortran = false;
    if (!eat(&c, '{'))
        return snprintf(why, cap, "the header is not a dict"), false;
    for (;;) {
        if (eat(&c, '}'))
            break;
        if (!get_string(&c, key, sizeof key) || !eat(&c, ':'))
            return snprintf(why, cap, "the header is not a dict of 'descr', 'fortran_order' "
                            "and 'shape'"), false;
        int k = strcmp(key, "descr") == 0 ? 0 : strcmp(key, "fortran_order") == 0 ? 1
                : strcmp(key, "shape") == 0 ? 2 : -1;
        if (k < 0)
            return snprintf(why, cap, "the header has the key '%.20s' (only 'descr', "
                            "'fortran_order' and 'shape' are allowed)", key), false;
        if (seen[k])
            return snprintf(why, cap, "the header has the key '%s' twice", key), false;
        seen[k] = true;
        if (k == 0 && !get_string(&c, descr, sizeof descr))
            return snprintf(why, cap, "'descr' is not a plain dtype string (a structured "
                            "array?)"), false;
        if (k == 1 && !(fortran = get_word(&c, "True")) && !get_word(&c, "False"))
            return snprintf(why, cap, "'fortran_order' is not True or False"), false;
        if (k == 2 && !get_shape(&c, h, why, cap))
            return false;
        if (!eat(&c, ',')) {
            if (!eat(&c, '}'))
                return snprintf(why, cap, "the header dict is malformed after '%s'", key), false;
            break;
        }
    }
    skip_ws(&c);
    if (c.p != c.end)
        return snprintf(why, cap, "text after the header dict"), false;
    if (!seen[0] || !seen[1] || !seen[2])
        return snprintf(why, cap, "the header lacks '%s'",
                        !seen[0] ? "descr" : !seen[1] ? "fortran_order" : "shape"), false;
    if (strcmp(descr, "<f4") != 0)
        return snprintf(why, cap, "dtype '%s'%s: only '<f4' (little-endian float32) is read; "
                        "convert with x.astype('<f4')", descr,
                        strcmp(descr, "<f8") == 0 ? " (float64)" : strcmp(descr, "<f2") == 0
                        ? " (float16)" : strcmp(descr, ">f4") == 0 ? " (big-endian float32)"
                        : ""), false;
    if (fortran)
        return snprintf(why, cap, "fortran_order is True: save a C-ordered array "
                        "(np.ascontiguousarray)"), false;
    return true;
}

bool rt_npy_parse_header(const void *buf, size_t len, const char *name, RtNpyHeader *h,
                         char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    const unsigned char *p = buf;
    if (len < 10 || memcmp(p, MAGIC, 6) != 0)
        return fail(err, errlen, name, "not a .npy file (%s)", len < 6 || memcmp(p, MAGIC, 6)
                    ? "no \\x93NUMPY magic string" : "truncated: shorter than its preamble");
    if (p[6] < 1 || p[6] > 3 || p[7] != 0)
        return fail(err, errlen, name, ".npy version %d.%d: only 1.0, 2.0 and 3.0 are read",
                    p[6], p[7]);
    size_t hlen, at;
    if (p[6] == 1) {
        hlen = (size_t)p[8] | (size_t)p[9] << 8;
        at = 10;
    } else {
        if (len < 12)
            return fail(err, errlen, name, "truncated: shorter than its preamble");
        hlen = (size_t)p[8] | (size_t)p[9] << 8 | (size_t)p[10] << 16 | (size_t)p[11] << 24;
        at = 12;
    }
    if (hlen > len - at)
        return fail(err, errlen, name, "truncated: the header is %zu bytes, the file has %zu "
                    "after the preamble", hlen, len - at);
    for (size_t i = 0; i < hlen; i++)
        if (p[at + i] == 0 || p[at + i] >= 0x80)
            return fail(err, errlen, name, "the header holds a byte 0x%02x at %zu (not ASCII)",
                        p[at + i], at + i);
    char why[256];
    if (!parse_dict((const char *)p + at, hlen, h, why, sizeof why))
        return fail(err, errlen, name, "%s", why);
    int64_t n = 1;
    for (int d = 0; d < h->rank; d++)
        if (h->shape[d] != 0 && n > INT64_MAX / 4 / h->shape[d])
            return fail(err, errlen, name, "the shape's element count overflows");
        else
            n *= h->shape[d];
    h->numel = n;
    h->data_offset = at + hlen;
    return true;
}

/* The data must be exactly numel elements: len is the whole file. */
static bool check_size(const RtNpyHeader *h, size_t len, const char *name, char *err,
                       size_t errlen)
{
    size_t have = len - h->data_offset, want = (size_t)h->numel * 4;
    if (have < want)
        return fail(err, errlen, name, "truncated: the shape holds %lld float32 values (%zu "
                    "bytes), the file has %zu bytes of data", (long long)h->numel, want, have);
    if (have > want)
        return fail(err, errlen, name, "%zu bytes of trailing data after the %lld float32 "
                    "values of the shape", have - want, (long long)h->numel);
    return true;
}

static float *alloc_data(int64_t numel)
{
    size_t bytes = ((size_t)numel * 4 + 63) / 64 * 64;
    return aligned_alloc(64, bytes ? bytes : 64);
}

bool rt_npy_parse(const void *buf, size_t len, const char *name, RtNpyHeader *h, float **data,
                  char *err, size_t errlen)
{
    *data = NULL;
    if (!rt_npy_parse_header(buf, len, name, h, err, errlen) ||
        !check_size(h, len, name, err, errlen))
        return false;
    if (!(*data = alloc_data(h->numel)))
        return fail(err, errlen, name, "out of memory");
    memcpy(*data, (const unsigned char *)buf + h->data_offset, (size_t)h->numel * 4);
    return true;
}

/* count bytes at offset off of fd (pread, retried); false on a short read */
static bool read_at(int fd, void *dst, size_t count, size_t off, int *e)
{
    size_t got = 0;
    while (got < count) {
        ssize_t k = pread(fd, (char *)dst + got, count - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            *e = k < 0 ? errno : 0;
            return false;
        }
        got += (size_t)k;
    }
    return true;
}

bool rt_npy_read(const char *path, RtNpyHeader *h, float **data, char *err, size_t errlen)
{
    *data = NULL;
    memset(h, 0, sizeof *h);
    int64_t size;
    int fd = rt_open_input(path, "input", &size, err, errlen);
    if (fd < 0)
        return false;
    /* the preamble and header first (bounded by the file), then the data */
    if (errlen)
        err[0] = 0;
    size_t len = (size_t)size, e0 = len < 12 ? len : 12;
    unsigned char pre[12] = {0};
    int e = 0;
    bool ok = read_at(fd, pre, e0, 0, &e);
    size_t hend = e0; /* what the header parser gets: the preamble and the header */
    bool v1 = pre[6] == 1;
    if (ok && e0 >= (v1 ? 10u : 12u) && memcmp(pre, MAGIC, 6) == 0) {
        size_t at = v1 ? 10 : 12;
        size_t hlen = v1 ? ((size_t)pre[8] | (size_t)pre[9] << 8)
                         : ((size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 |
                            (size_t)pre[11] << 24);
        hend = hlen <= len - at ? at + hlen : len;
    }
    unsigned char *head = ok ? malloc(hend ? hend : 1) : NULL;
    ok = ok && head && read_at(fd, head, hend, 0, &e);
    ok = ok && rt_npy_parse_header(head, hend, path, h, err, errlen) &&
         check_size(h, len, path, err, errlen);
    free(head);
    if (ok && !(*data = alloc_data(h->numel))) {
        ok = false;
        fail(err, errlen, path, "out of memory for %lld values", (long long)h->numel);
    }
    if (ok && !read_at(fd, *data, (size_t)h->numel * 4, h->data_offset, &e)) {
        ok = false;
        fail(err, errlen, path, "read error%s%s", e ? ": " : " (the file shrank)",
             e ? strerror(e) : "");
    }
    if (!ok && errlen && !err[0])
        fail(err, errlen, path, "read error%s%s", e ? ": " : " (the file shrank)",
             e ? strerror(e) : "");
    close(fd);
    if (!ok) {
        free(*data);
        *data = NULL;
    }
    return ok;
}

/* ---- writing ------------------------------------------------------------------- */

size_t rt_npy_header(char *dst, size_t cap, int rank, const int64_t *shape)
{
    char dict[512];
    size_t k = (size_t)snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, "
                                "'shape': (");
    for (int d = 0; d < rank; d++)
        k += (size_t)snprintf(dict + k, sizeof dict - k, "%s%lld", d ? ", " : "",
                              (long long)shape[d]);
    k += (size_t)snprintf(dict + k, sizeof dict - k, "%s), }", rank == 1 ? "," : "");
    /* version 1.0 unless the length needs more than 16 bits (never, for
     * up to RT_MAX_RANK dimensions; kept for the format's sake) */
    size_t pre = k + 1 + 10 <= 65535 ? 10 : 12;
    size_t total = (pre + k + 1 + 63) / 64 * 64;
    if (total > cap || k >= sizeof dict - 1)
        return 0;
    size_t hlen = total - pre;
    memcpy(dst, MAGIC, 6);
    dst[6] = pre == 10 ? 1 : 2;
    dst[7] = 0;
    for (size_t i = 0; i < pre - 8; i++)
        dst[8 + i] = (char)(hlen >> (8 * i));
    memcpy(dst + pre, dict, k);
    memset(dst + pre + k, ' ', total - pre - k - 1);
    dst[total - 1] = '\n';
    return total;
}

bool rt_npy_write(const char *path, const char *what, int rank, const int64_t *shape,
                  const float *data, char *err, size_t errlen)
{
    char head[1024];
    size_t k = rt_npy_header(head, sizeof head, rank, shape);
    if (!k) {
        snprintf(err, errlen, "%s %s: the shape cannot be written", what, path);
        return false;
    }
    size_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= (size_t)shape[d];
    RtOutFile o;
    if (!rt_out_open(&o, path, what, err, errlen))
        return false;
    fwrite(head, 1, k, o.f);
    fwrite(data, sizeof(float), n, o.f);
    return rt_out_commit(&o, what, err, errlen);
}
