/* digits.c - the `digits` data source: scikit-learn's 1,797 8x8 handwritten
 * digits (sklearn/datasets/data/digits.csv.gz in Debian's python3-sklearn;
 * DESIGN.md 6), read with zlib.
 *
 * Each row is 64 pixel values 0..16 then the label 0..9, comma-separated; a
 * first line that does not start with a number is a header and skipped;
 * blank lines are skipped.  Pixels are scaled to [0, 1] (x/16).  The split
 * is fixed and needs no random numbers: every sixth data row (0-based rows
 * 5, 11, 17, ...; X[5::6] in numpy) is the validation set, the others the
 * training set, in file order: 1,498 and 299 rows.  The file runs through
 * its writers in order, so this spreads both sets over all writers; the
 * last rows alone (a new-writers split) top out near 92% with a small MLP,
 * against 96% here.  Errors name the file and the line (or, for gzip
 * errors, the decompressed offset).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "fileio.h"
#include "data.h"
#include "decimal.h" /* the pixels' number grammar */
#include "kernels/ingest.h"

/* The most decompressed bytes a digits file may hold: the real one is
 * 0.5 MB, so 64 MiB is no digits file (and bounds a gzip bomb). */
#define DIGITS_MAX_BYTES ((int64_t)64 << 20)

void rt_data_free(RtDataset *ds)
{
    if (ds->release)
        ds->release(ds);
    ds->release = NULL;
    free(ds->x);
    free(ds->y);
    ds->x = ds->y = NULL;
}

static void digits_fill(const RtDataset *ds, RtSplit split, const int64_t *idx, int64_t n,
                        float *x, float *y)
{
    size_t size = (size_t)ds->sample_size;
    int64_t every = RT_DIGITS_VAL_EVERY;
    for (int64_t j = 0; j < n; j++) {
        int64_t k = idx[j];
        int64_t r = split == RT_SPLIT_VAL ? k * every + every - 1
                                          : k / (every - 1) * every + k % (every - 1);
        memcpy(x + (size_t)j * size, ds->x + (size_t)r * size, size * sizeof *x);
        y[j] = ds->y[r];
    }
}

/* The raw form (data.h's fill_raw): the pixels as bytes 0..16, kept in
 * ds->src when every pixel's float is (float)byte / 16 (a file of whole
 * numbers, as scikit-learn's is); the row order is digits_fill's. */
static void digits_fill_raw(const RtDataset *ds, RtSplit split, const int64_t *idx, int64_t n,
                            uint8_t *raw, float *y)
{
    const uint8_t *px = ds->src;
    int64_t every = RT_DIGITS_VAL_EVERY;
    for (int64_t j = 0; j < n; j++) {
        int64_t k = idx[j];
        int64_t r = split == RT_SPLIT_VAL ? k * every + every - 1
                                          : k / (every - 1) * every + k % (every - 1);
        memcpy(raw + j * RT_DIGITS_PIXELS, px + r * RT_DIGITS_PIXELS, RT_DIGITS_PIXELS);
        y[j] = ds->y[r];
    }
}

static void digits_release(RtDataset *ds)
{
    free(ds->src);
    ds->src = NULL;
}

/* ds->src := the pixels as bytes, where each float is exactly a byte's
 * ingest value (else no raw form: a pixel such as 2.5 has none) */
static void digits_raw(RtDataset *ds, int64_t rows)
{
    size_t n = (size_t)rows * RT_DIGITS_PIXELS;
    RtIngestNorm g = rt_ingest_scale(16.0f);
    uint8_t *b = malloc(n ? n : 1);
    for (size_t i = 0; b && i < n; i++) {
        float v = ds->x[i] * 16.0f; /* exact for a pixel that is a whole number */
        b[i] = (uint8_t)(v >= 0.0f && v <= 16.0f ? v : 0.0f);
        float back = ampc_ingest_value(b[i], g.div, g.mean[0], g.std[0]);
        if (memcmp(&back, &ds->x[i], sizeof back)) {
            free(b);
            return;
        }
    }
    if (!b)
        return; /* out of memory: floats only, as before */
    ds->src = b;
    ds->release = digits_release;
    ds->fill_raw = digits_fill_raw;
    ds->norm = g;
}

/* Parses one data row of 65 values into px[64] and *label; false with a
 * message (without the file name) otherwise. */
static bool parse_row(char *s, float *px, float *label, char *err, size_t errlen)
{
    int col = 0;
    for (;;) {
        while (*s == ' ' || *s == '\t')
            s++;
        char *end;
        errno = 0;
        size_t n = rt_decimal_len(s, false);
        double v = n ? strtod(s, &end) : 0;
        if (n == 0 || end != s + n || errno == ERANGE || !isfinite(v)) {
            /* strtod alone would take 0x10, inf and nan */
            size_t k = strcspn(s, ",\n\r\t ");
            snprintf(err, errlen, "column %d: expected a number (decimal digits), found '%.*s'",
                     col + 1, (int)(k > 24 ? 24 : k), s);
            return false;
        }
        while (*end == ' ' || *end == '\t' || *end == '\r')
            end++;
        /* a value is shown as the file spells it: %g would print 16.0000001 as 16 */
        int shown = (int)(n > 40 ? 40 : n);
        if (col < RT_DIGITS_PIXELS) {
            if (v < 0 || v > 16) {
                snprintf(err, errlen, "column %d: pixel value %.*s outside 0..16", col + 1, shown,
                         s);
                return false;
            }
            px[col] = (float)(v / 16.0);
        } else if (col == RT_DIGITS_PIXELS) {
            if (v != floor(v) || v < 0 || v >= RT_DIGITS_CLASSES) {
                snprintf(err, errlen, "column %d: label %.*s is not an integer 0..%d", col + 1,
                         shown, s, RT_DIGITS_CLASSES - 1);
                return false;
            }
            *label = (float)v;
        }
        col++;
        if (*end == ',') {
            s = end + 1;
            continue;
        }
        if (*end == 0 || *end == '\n')
            break;
        snprintf(err, errlen, "column %d: unexpected character '%c'", col, *end);
        return false;
    }
    if (col != RT_DIGITS_PIXELS + 1) {
        snprintf(err, errlen, "expected %d comma-separated values (64 pixels and a label), "
                 "found %d", RT_DIGITS_PIXELS + 1, col);
        return false;
    }
    return true;
}

bool rt_data_digits(RtDataset *ds, const char *path, char *err, size_t errlen)
{
    memset(ds, 0, sizeof *ds);
    /* a regular file only (a FIFO would block, /dev/zero never ends), whose
     * gzip framing is whole (zlib ignores trailing bytes) */
    int fd = rt_open_input(path, NULL, NULL, err, errlen);
    if (fd < 0)
        return false;
    if (!rt_gz_check(fd, path, DIGITS_MAX_BYTES, err, errlen)) {
        close(fd);
        return false;
    }
    errno = 0;
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open %s: %s", path,
                 errno ? strerror(errno) : "out of memory");
        close(fd);
        return false;
    }
    char line[4096], msg[200];
    int64_t n = 0, cap = 0, lineno = 0;
    float *x = NULL, *y = NULL;
    bool ok = true;
    for (;;) {
        z_off_t at = gztell(f);
        if (!gzgets(f, line, sizeof line))
            break;
        lineno++;
        size_t len = strlen(line);
        if ((z_off_t)len != gztell(f) - at) { /* gzgets reads past a NUL */
            snprintf(err, errlen, "%s:%lld: column %zu: a NUL byte (decompressed offset %lld): "
                     "not a text file", path, (long long)lineno, len + 1,
                     (long long)(at + (z_off_t)len));
            ok = false;
            break;
        }
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            snprintf(err, errlen, "%s:%lld: line too long (not a digits CSV file?)", path,
                     (long long)lineno);
            ok = false;
            break;
        }
        char *s = line;
        while (isspace((unsigned char)*s))
            s++;
        if (*s == 0)
            continue;
        if (lineno == 1 && !isdigit((unsigned char)*s) && *s != '.' && *s != '-' && *s != '+')
            continue; /* a header */
        if (n == cap) {
            cap = cap ? 2 * cap : 2048;
            float *nx = realloc(x, (size_t)cap * RT_DIGITS_PIXELS * sizeof *x);
            float *ny = nx ? realloc(y, (size_t)cap * sizeof *y) : NULL;
            if (nx)
                x = nx;
            if (ny)
                y = ny;
            if (!nx || !ny) {
                snprintf(err, errlen, "%s: out of memory", path);
                ok = false;
                break;
            }
        }
        if (!parse_row(s, x + (size_t)n * RT_DIGITS_PIXELS, y + n, msg, sizeof msg)) {
            int errnum = Z_OK;
            gzerror(f, &errnum);
            if (errnum == Z_OK || errnum == Z_STREAM_END) /* else: a cut line; say why below */
                snprintf(err, errlen, "%s:%lld: %s", path, (long long)lineno, msg);
            ok = errnum != Z_OK && errnum != Z_STREAM_END;
            break;
        }
        n++;
    }
    if (ok) {
        int errnum = Z_OK;
        const char *zmsg = gzerror(f, &errnum);
        size_t plen = strlen(path); /* zlib's message starts "path: " */
        if (strncmp(zmsg, path, plen) == 0 && zmsg[plen] == ':' && zmsg[plen + 1] == ' ')
            zmsg += plen + 2;
        if (errnum != Z_OK && errnum != Z_STREAM_END) {
            snprintf(err, errlen, "%s: corrupt or truncated gzip data after line %lld "
                     "(decompressed offset %lld): %s", path, (long long)lineno,
                     (long long)gztell(f), zmsg);
            ok = false;
        } else if (n < RT_DIGITS_VAL_EVERY) {
            snprintf(err, errlen, "%s: %lld data rows; need at least %d", path, (long long)n,
                     RT_DIGITS_VAL_EVERY);
            ok = false;
        }
    }
    gzclose(f);
    if (!ok) {
        free(x);
        free(y);
        return false;
    }
    int64_t nval = n / RT_DIGITS_VAL_EVERY;
    ds->name = "digits";
    ds->sample_size = RT_DIGITS_PIXELS;
    ds->image[0] = 1;
    ds->image[1] = ds->image[2] = 8;
    ds->classes = RT_DIGITS_CLASSES;
    ds->ntrain = n - nval;
    ds->nval = nval;
    ds->x = x;
    ds->y = y;
    ds->fill = digits_fill;
    digits_raw(ds, n);
    return true;
}
