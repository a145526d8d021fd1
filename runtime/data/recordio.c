/* recordio.c - the reader of MXNet's RecordIO files (format and sources:
 * recordio.h, docs/training.md RecordIO).
 *
 * Untrusted input: every length is checked against the file's size before
 * anything is read, a joined record is refused above RT_REC_MAX_RECORD, and
 * every error names the file and the byte offset of the part at fault.
 * Reads use pread, so worker threads share one descriptor.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "decimal.h"
#include "recordio.h"

static uint32_t le32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static uint64_t le64(const uint8_t *b)
{
    return (uint64_t)le32(b) | (uint64_t)le32(b + 4) << 32;
}

/* n bytes at off (the caller checked off + n <= size). */
static bool rec_pread(const RtRecFile *f, int64_t off, void *dst, size_t n, char *err,
                      size_t errlen)
{
    if (f->mem) {
        memcpy(dst, f->mem + off, n);
        return true;
    }
    uint8_t *p = dst;
    while (n > 0) {
        ssize_t got = pread(f->fd, p, n, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            snprintf(err, errlen, "%s: byte offset %lld: %s", f->path, (long long)off,
                     got < 0 ? strerror(errno) : "the file ended early (it shrank while read)");
            return false;
        }
        p += got;
        off += got;
        n -= (size_t)got;
    }
    return true;
}

static bool grow(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 4096;
    while (c < need)
        c *= 2;
    uint8_t *nb = realloc(*buf, c);
    if (!nb)
        return false;
    *buf = nb;
    *cap = c;
    return true;
}

/* One part's header at off: its flag and length, checked. */
static bool part_header(const RtRecFile *f, int64_t off, uint32_t *cflag, uint32_t *len,
                        char *err, size_t errlen)
{
    uint8_t h[8];
    if (f->size - off < 8) {
        snprintf(err, errlen, "%s: byte offset %lld: truncated: a record header needs 8 bytes, "
                 "the file has %lld left", f->path, (long long)off, (long long)(f->size - off));
        return false;
    }
    if (!rec_pread(f, off, h, 8, err, errlen))
        return false;
    uint32_t magic = le32(h), lrec = le32(h + 4);
    if (magic != RT_REC_MAGIC) {
        snprintf(err, errlen, "%s: byte offset %lld: bad magic 0x%08x (a RecordIO record starts "
                 "with 0x%08x): not a RecordIO file, or corrupt", f->path, (long long)off, magic,
                 RT_REC_MAGIC);
        return false;
    }
    *cflag = lrec >> 29;
    *len = lrec & RT_REC_MAX_PART;
    uint64_t padded = ((uint64_t)*len + 3) & ~(uint64_t)3;
    if (*cflag > 3) {
        snprintf(err, errlen, "%s: byte offset %lld: continuation flag %u is not 0..3", f->path,
                 (long long)off + 4, *cflag);
        return false;
    }
    if (padded > (uint64_t)(f->size - off - 8)) {
        snprintf(err, errlen, "%s: byte offset %lld: a record part of %u bytes runs past the end "
                 "of the file (%lld bytes left after its header)", f->path, (long long)off,
                 *len, (long long)(f->size - off - 8));
        return false;
    }
    return true;
}

bool rt_rec_read(const RtRecFile *f, int64_t off, size_t limit, uint8_t **buf, size_t *cap,
                 size_t *n, size_t *total, int64_t *next, char *err, size_t errlen)
{
    size_t have = 0, joined = 0;
    int64_t at = off;
    for (int part = 0;; part++) {
        uint32_t cflag, len;
        if (!part_header(f, at, &cflag, &len, err, errlen))
            return false;
        bool first = part == 0;
        if (first ? cflag >= 2 : cflag < 2) {
            snprintf(err, errlen, "%s: byte offset %lld: continuation flag %u %s", f->path,
                     (long long)at + 4, cflag,
                     first ? "where a record starts (2 and 3 continue a split record)"
                           : "inside a split record (its parts after the first are 2 or 3)");
            return false;
        }
        /* the magic the writer dropped goes back between two parts */
        size_t add = (first ? 0 : 4) + len;
        if (joined + add > RT_REC_MAX_RECORD) {
            snprintf(err, errlen, "%s: byte offset %lld: the record starting at offset %lld "
                     "joins to more than %zu bytes", f->path, (long long)at, (long long)off,
                     RT_REC_MAX_RECORD);
            return false;
        }
        /* the magic bytes, then the part's data, as far as limit */
        size_t room = have < limit ? limit - have : 0, take = add < room ? add : room;
        if (take > 0 && !grow(buf, cap, have + take)) {
            snprintf(err, errlen, "%s: byte offset %lld: out of memory", f->path, (long long)at);
            return false;
        }
        size_t mk = first ? 0 : 4;
        for (size_t k = 0; k < mk && take > 0; k++, take--)
            (*buf)[have++] = (uint8_t)(RT_REC_MAGIC >> (8 * k));
        if (take > 0) {
            if (!rec_pread(f, at + 8, *buf + have, take, err, errlen))
                return false;
            have += take;
        }
        joined += add;
        at += 8 + (int64_t)(((uint64_t)len + 3) & ~(uint64_t)3);
        if (cflag == 0 || cflag == 3)
            break;
    }
    *n = have;
    *total = joined;
    *next = at;
    return true;
}

static int image_format(const uint8_t *p, size_t n)
{
    static const uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff)
        return RT_IMG_JPEG;
    if (n >= 8 && memcmp(p, png, 8) == 0)
        return RT_IMG_PNG;
    return RT_IMG_NONE;
}

bool rt_rec_image(const uint8_t *data, size_t n, size_t total, RtRecImage *im, char *err,
                  size_t errlen)
{
    memset(im, 0, sizeof *im);
    if (total < RT_REC_IRHEADER || n < RT_REC_IRHEADER) {
        snprintf(err, errlen, "a record of %zu bytes is shorter than the 24-byte image record "
                 "header (IRHeader)", total);
        return false;
    }
    im->flag = le32(data);
    uint32_t bits = le32(data + 4);
    memcpy(&im->label, &bits, 4);
    im->id = le64(data + 8);
    im->id2 = le64(data + 16);
    size_t lab = (size_t)im->flag * 4;
    if (im->flag > 0 && (uint64_t)im->flag * 4 > total - RT_REC_IRHEADER) {
        snprintf(err, errlen, "the header says %u labels (%llu bytes), but only %zu bytes follow "
                 "it", im->flag, (unsigned long long)im->flag * 4, total - RT_REC_IRHEADER);
        return false;
    }
    size_t at = RT_REC_IRHEADER + lab;
    if (im->flag > 0) {
        if (n < RT_REC_IRHEADER + 4) {
            snprintf(err, errlen, "the labels were not read");
            return false;
        }
        im->labels = data + RT_REC_IRHEADER;
        bits = le32(im->labels);
        memcpy(&im->label, &bits, 4);
    }
    im->image = at <= n ? data + at : NULL;
    im->image_size = total - at;
    im->format = at <= n ? image_format(data + at, n - at) : RT_IMG_NONE;
    return true;
}

/* ---- the walk over a file, the .idx ---------------------------------------- */

static int cmp_off(const void *a, const void *b)
{
    int64_t x = ((const RtRecEntry *)a)->off, y = ((const RtRecEntry *)b)->off;
    return x < y ? -1 : x > y;
}

/* Each line of the .idx "KEY\tOFFSET" names the offset of a record. */
static bool check_idx(const char *idx_path, const RtRecEntry *e, int64_t n, char *err,
                      size_t errlen)
{
    FILE *fi = fopen(idx_path, "r");
    if (!fi) {
        snprintf(err, errlen, "cannot open %s: %s", idx_path, strerror(errno));
        return false;
    }
    char line[256];
    bool ok = true;
    for (long ln = 1; ok && fgets(line, sizeof line, fi); ln++) {
        char *tab = strchr(line, '\t'), *end = NULL;
        long long off = -1;
        if (tab) {
            errno = 0;
            off = strtoll(tab + 1, &end, 10);
        }
        if (!tab || !end || end == tab + 1 || errno || (*end && *end != '\n' && *end != '\r')) {
            snprintf(err, errlen, "%s: line %ld: not KEY<tab>OFFSET", idx_path, ln);
            ok = false;
            break;
        }
        RtRecEntry k = {.off = off};
        if (!bsearch(&k, e, (size_t)n, sizeof *e, cmp_off)) {
            snprintf(err, errlen, "%s: line %ld: offset %lld is not where a record of the .rec "
                     "starts (a .idx of another file?)", idx_path, ln, off);
            ok = false;
        }
    }
    fclose(fi);
    return ok;
}

bool rt_rec_scan(const RtRecFile *f, const char *idx_path, RtRecEntry **e, int64_t *n, char *err,
                 size_t errlen)
{
    *e = NULL;
    *n = 0;
    RtRecEntry *v = NULL;
    int64_t cnt = 0, capn = 0;
    uint8_t *buf = NULL;
    size_t cap = 0;
    bool ok = true;
    for (int64_t off = 0; off < f->size;) {
        size_t got, total;
        int64_t next;
        if (!rt_rec_read(f, off, 64, &buf, &cap, &got, &total, &next, err, errlen)) {
            ok = false;
            break;
        }
        RtRecImage im;
        char msg[256];
        ok = rt_rec_image(buf, got, total, &im, msg, sizeof msg);
        if (ok && !im.image) { /* many labels: read as far as the image */
            size_t lim = RT_REC_IRHEADER + (size_t)im.flag * 4 + 8;
            ok = rt_rec_read(f, off, lim, &buf, &cap, &got, &total, &next, err, errlen);
            if (!ok)
                break;
            ok = rt_rec_image(buf, got, total, &im, msg, sizeof msg);
        }
        if (ok && im.format == RT_IMG_NONE) {
            snprintf(msg, sizeof msg, "its image (%zu bytes) is neither a JPEG nor a PNG file",
                     im.image_size);
            ok = false;
        }
        if (!ok) {
            snprintf(err, errlen, "%s: byte offset %lld: record %lld: %s", f->path,
                     (long long)off, (long long)cnt, msg);
            break;
        }
        if (cnt == capn) {
            capn = capn ? 2 * capn : 1024;
            RtRecEntry *nv = realloc(v, (size_t)capn * sizeof *v);
            if (!nv) {
                snprintf(err, errlen, "%s: out of memory for %lld records", f->path,
                         (long long)capn);
                ok = false;
                break;
            }
            v = nv;
        }
        v[cnt++] = (RtRecEntry){.off = off, .label = im.label, .id = im.id};
        off = next;
    }
    free(buf);
    if (ok && cnt == 0) {
        snprintf(err, errlen, "%s: no records (an empty file)", f->path);
        ok = false;
    }
    if (ok && idx_path)
        ok = check_idx(idx_path, v, cnt, err, errlen); /* v is in offset order */
    if (!ok) {
        free(v);
        return false;
    }
    *e = v;
    *n = cnt;
    return true;
}

/* ---- the options of recordio(...) ------------------------------------------ */

void rt_rec_options_default(RtRecOptions *o)
{
    memset(o, 0, sizeof *o);
    o->min_random_area = 0.08f;
    o->max_random_area = 1.0f;
    o->min_aspect_ratio = 3.0f / 4.0f;
    o->max_aspect_ratio = 4.0f / 3.0f;
    for (int c = 0; c < 3; c++)
        o->std[c] = 1.0f;
    o->scale = 1.0f;
    o->num_parts = 1;
    o->threads = 1;
    o->prefetch = 4;
}

/* decimal.h's grammar: resize=0x10 is refused, not read as 16 (issue 21) */
static bool num(const char *v, double lo, double hi, double *out)
{
    size_t n = rt_decimal_len(v, false);
    if (n == 0 || v[n])
        return false;
    double d = strtod(v, NULL);
    if (!(d >= lo && d <= hi))
        return false;
    *out = d;
    return true;
}

static const struct {
    const char *key;
    double lo, hi;
    int kind; /* 0 int, 1 bool, 2 float */
    size_t at;
} keys[] = {
    {"resize", 0, 65535, 0, offsetof(RtRecOptions, resize)},
    {"rand_crop", 0, 1, 1, offsetof(RtRecOptions, rand_crop)},
    {"rand_mirror", 0, 1, 1, offsetof(RtRecOptions, rand_mirror)},
    {"random_resized_crop", 0, 1, 1, offsetof(RtRecOptions, random_resized_crop)},
    {"min_random_area", 1e-6, 1, 2, offsetof(RtRecOptions, min_random_area)},
    {"max_random_area", 1e-6, 1, 2, offsetof(RtRecOptions, max_random_area)},
    {"min_aspect_ratio", 1e-3, 1e3, 2, offsetof(RtRecOptions, min_aspect_ratio)},
    {"max_aspect_ratio", 1e-3, 1e3, 2, offsetof(RtRecOptions, max_aspect_ratio)},
    {"mean_r", -1e6, 1e6, 2, offsetof(RtRecOptions, mean[0])},
    {"mean_g", -1e6, 1e6, 2, offsetof(RtRecOptions, mean[1])},
    {"mean_b", -1e6, 1e6, 2, offsetof(RtRecOptions, mean[2])},
    {"std_r", 1e-6, 1e6, 2, offsetof(RtRecOptions, std[0])},
    {"std_g", 1e-6, 1e6, 2, offsetof(RtRecOptions, std[1])},
    {"std_b", 1e-6, 1e6, 2, offsetof(RtRecOptions, std[2])},
    {"scale", -1e6, 1e6, 2, offsetof(RtRecOptions, scale)},
    {"num_parts", 1, 1 << 20, 0, offsetof(RtRecOptions, num_parts)},
    {"part_index", 0, 1 << 20, 0, offsetof(RtRecOptions, part_index)},
    {"prefetch", 1, 64, 0, offsetof(RtRecOptions, prefetch)},
};

bool rt_rec_option_known(const char *key)
{
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (strcmp(keys[k].key, key) == 0)
            return true;
    return false;
}

bool rt_rec_option_set(RtRecOptions *o, const char *key, const char *v, char *err, size_t errlen)
{
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        if (strcmp(keys[k].key, key) != 0)
            continue;
        double d;
        if (!num(v, keys[k].lo, keys[k].hi, &d) || (keys[k].kind < 2 && d != (int)d)) {
            snprintf(err, errlen, "recordio(): %s=%s is not %s in [%.10g, %.10g]", key, v,
                     keys[k].kind == 2 ? "a number" : "an integer", keys[k].lo, keys[k].hi);
            return false;
        }
        char *p = (char *)o + keys[k].at;
        if (keys[k].kind == 0)
            *(int *)(void *)p = (int)d;
        else if (keys[k].kind == 1)
            *(bool *)(void *)p = d != 0;
        else
            *(float *)(void *)p = (float)d;
        return true;
    }
    snprintf(err, errlen, "recordio() has no option '%s'", key);
    return false;
}
