/* im2rec.c - makes an MXNet RecordIO file (.rec and .idx) from a list file
 * and a folder of images, as MXNet's tools/im2rec.py does with
 * --pass-through (the image files stored as they are, not re-encoded), so
 * that users and tests need no MXNet to build data (docs/training.md,
 * RecordIO).  The output is byte for byte what MXNet 1.9.1's
 * mx.recordio.MXIndexedRecordIO.write_idx(i, mx.recordio.pack(header, img))
 * writes for the same records (tests/recordio/mxnet_compare.py checks).
 *
 *   im2rec [--pack-label] [--allow-outside-root] LIST ROOT OUT.rec
 *
 * LIST: MXNet's .lst, one image a line: INDEX<tab>LABEL[<tab>LABEL...]<tab>PATH
 * (im2rec.py: fields stripped; the index an integer, the labels numbers,
 * the path last, joined to ROOT).  Without --pack-label only the first
 * label is stored (IRHeader flag 0); with it, every label (flag = count).
 * The record: IRHeader {flag, label, id = INDEX, id2 = 0}, [labels], the
 * image's bytes.  OUT.idx gets "INDEX<tab>OFFSET" per record.
 *
 * What the reader (runtime/data/recordio.c) would refuse is refused here,
 * naming the list line: a file that is neither a JPEG nor a PNG (a text
 * file, an empty file), a label that is not a finite float32 (nan, 1e40),
 * an index listed twice, a record of 2^29 bytes or more; and, unlike
 * im2rec.py, an image outside ROOT (an absolute path, "..", a link leading
 * out) unless --allow-outside-root.  The list and the images must be regular
 * files, checked without blocking (a FIFO is refused, not waited for); a
 * line holds at most 1 MiB and the list at most 1 GiB.
 *
 * Nothing is left behind: both outputs are written to temporary files and
 * renamed at the end through the one file-safety module
 * (runtime/fileio.c), which removes them on an error and on SIGINT, SIGTERM
 * or SIGHUP; OUT must be a regular file or a new path (a FIFO or a device
 * would get OUT.idx created beside it), never one of the inputs.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"

#define REC_MAGIC 0xced7230au
#define MAX_LABELS 4096
#define MAX_LINE ((size_t)1 << 20)    /* bytes of one list line */
#define MAX_LIST ((int64_t)1 << 30)   /* bytes of the list */
#define MAX_IMAGE ((int64_t)1 << 29)  /* a record's 29-bit length */

typedef struct {
    RtOutFile f;
    uint64_t pos;
} Out;

static void put32(uint8_t *b, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        b[k] = (uint8_t)(v >> (8 * k));
}

static void put64(uint8_t *b, uint64_t v)
{
    put32(b, (uint32_t)v);
    put32(b + 4, (uint32_t)(v >> 32));
}

static bool out_write(Out *o, const void *p, size_t n)
{
    o->pos += n;
    return n == 0 || fwrite(p, 1, n, o->f.f) == n;
}

/* dmlc-core's RecordIOWriter::WriteRecord, in its own words: the data are
 * cut where they hold the magic at an offset that is a multiple of 4 (those
 * 4 bytes dropped: the reader puts them back), each part a header with its
 * continuation flag (0 whole, 1 first, 2 middle, 3 last); zero padding to
 * 4 bytes after the last part only (the others end aligned). */
static bool write_record(Out *o, const uint8_t *d, uint32_t len)
{
    uint8_t h[8], zero[4] = {0};
    uint32_t from = 0;
    put32(h, REC_MAGIC);
    for (uint32_t i = 0; i + 4 <= (len & ~3u); i += 4) {
        if (d[i] != (REC_MAGIC & 0xff) || d[i + 1] != ((REC_MAGIC >> 8) & 0xff) ||
            d[i + 2] != ((REC_MAGIC >> 16) & 0xff) || d[i + 3] != REC_MAGIC >> 24)
            continue;
        put32(h + 4, (from == 0 ? 1u : 2u) << 29 | (i - from));
        if (!out_write(o, h, 8) || !out_write(o, d + from, i - from))
            return false;
        from = i + 4;
    }
    put32(h + 4, (from != 0 ? 3u : 0u) << 29 | (len - from));
    uint32_t pad = ((len + 3) & ~3u) - len;
    return out_write(o, h, 8) && out_write(o, d + from, len - from) && out_write(o, zero, pad);
}

/* An output: a regular file or a new path, written through a temporary
 * file (fileio.h). */
static bool out_open(Out *o, const char *path)
{
    char err[PATH_MAX + 256];
    struct stat st;
    memset(o, 0, sizeof *o);
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        fprintf(stderr, "im2rec: %s is %s: the output must be a regular file or a new path (its "
                "index is written beside it)\n", path, rt_file_kind(st.st_mode));
        return false;
    }
    if (!rt_out_open(&o->f, path, "output", err, sizeof err)) {
        fprintf(stderr, "im2rec: %s\n", err);
        return false;
    }
    return true;
}

static bool out_commit(Out *o)
{
    char err[PATH_MAX + 256];
    if (!rt_out_commit(&o->f, "output", err, sizeof err)) {
        fprintf(stderr, "im2rec: %s\n", err);
        return false;
    }
    return true;
}

/* Inputs may not be outputs. */
static bool same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n' || *s == '\v' || *s == '\f')
        s++;
    size_t n = strlen(s);
    while (n > 0 && strchr(" \t\r\n\v\f", s[n - 1]))
        s[--n] = 0;
    return s;
}

/* ---- what the list says ------------------------------------------------------------ */

typedef struct {
    const char *list, *root;
    char *root_real;     /* ROOT after links; NULL with --allow-outside-root */
    bool pack;
    const char *rec_path, *idx_path;
    /* the indices seen: an open-addressing table of (index, line) */
    int64_t *seen_index;
    long *seen_line;
    size_t seen_cap, seen_n;
} List;

/* Notes index at line ln; false (with a message) when an earlier line has it. */
static bool note_index(List *l, int64_t index, long ln)
{
    if (2 * (l->seen_n + 1) > l->seen_cap) {
        size_t cap = l->seen_cap ? 2 * l->seen_cap : 1024;
        int64_t *ix = malloc(cap * sizeof *ix);
        long *lx = malloc(cap * sizeof *lx);
        if (!ix || !lx) {
            free(ix);
            free(lx);
            fprintf(stderr, "im2rec: %s: line %ld: out of memory for the indices\n", l->list, ln);
            return false;
        }
        for (size_t k = 0; k < cap; k++)
            lx[k] = 0;
        for (size_t k = 0; k < l->seen_cap; k++)
            if (l->seen_line[k]) {
                size_t h = (size_t)((uint64_t)l->seen_index[k] * 0x9e3779b97f4a7c15ull) & (cap - 1);
                while (lx[h])
                    h = (h + 1) & (cap - 1);
                ix[h] = l->seen_index[k], lx[h] = l->seen_line[k];
            }
        free(l->seen_index);
        free(l->seen_line);
        l->seen_index = ix, l->seen_line = lx, l->seen_cap = cap;
    }
    size_t h = (size_t)((uint64_t)index * 0x9e3779b97f4a7c15ull) & (l->seen_cap - 1);
    for (; l->seen_line[h]; h = (h + 1) & (l->seen_cap - 1))
        if (l->seen_index[h] == index) {
            fprintf(stderr, "im2rec: %s: line %ld: index %lld is already line %ld's (the .idx "
                    "keys must be unique)\n", l->list, ln, (long long)index, l->seen_line[h]);
            return false;
        }
    l->seen_index[h] = index, l->seen_line[h] = ln;
    l->seen_n++;
    return true;
}

/* The image's path under ROOT (os.path.join: an absolute path replaces
 * it), refused outside ROOT unless allowed; malloc'd, NULL with a message. */
static char *image_path(const List *l, const char *name, long ln)
{
    const char *root = l->root;
    size_t plen = strlen(root) + strlen(name) + 2;
    char *path = malloc(plen);
    if (!path)
        return NULL;
    if (name[0] == '/')
        snprintf(path, plen, "%s", name);
    else
        snprintf(path, plen, "%s%s%s", root, root[0] && root[strlen(root) - 1] != '/' ? "/" : "",
                 name);
    if (!l->root_real)
        return path;
    char *real = realpath(path, NULL);
    size_t rl = strlen(l->root_real);
    bool inside = real && strncmp(real, l->root_real, rl) == 0 &&
                  (real[rl] == '/' || (rl == 1 && l->root_real[0] == '/'));
    if (!inside) {
        if (real)
            fprintf(stderr, "im2rec: %s: line %ld: image %s is outside the image root %s (it is "
                    "%s; --allow-outside-root allows it)\n", l->list, ln, name, root, real);
        else
            fprintf(stderr, "im2rec: %s: line %ld: cannot read image %s: %s\n", l->list, ln, path,
                    strerror(errno));
        free(real);
        free(path);
        return NULL;
    }
    free(real);
    return path;
}

/* The whole image file, a JPEG or a PNG; NULL with a message. */
static uint8_t *read_image(const char *path, size_t *n, const char *list, long ln)
{
    char err[PATH_MAX + 256];
    int64_t size;
    int fd = rt_open_input(path, "image", &size, err, sizeof err); /* no FIFO, no device */
    if (fd < 0) {
        fprintf(stderr, "im2rec: %s: line %ld: %s\n", list, ln, err);
        return NULL;
    }
    if (size >= MAX_IMAGE) {
        fprintf(stderr, "im2rec: %s: line %ld: image %s: %lld bytes: a record holds less than "
                "2^29\n", list, ln, path, (long long)size);
        close(fd);
        return NULL;
    }
    uint8_t *b = malloc((size_t)size + 1);
    size_t got = 0;
    while (b && got < (size_t)size) {
        ssize_t r = read(fd, b + got, (size_t)size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (!b || got != (size_t)size) {
        fprintf(stderr, "im2rec: %s: line %ld: cannot read image %s\n", list, ln, path);
        free(b);
        return NULL;
    }
    /* what the reader recognises (recordio.c): JPEG's SOI and a marker, PNG's signature */
    static const uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    bool jpeg = got >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff;
    if (!jpeg && !(got >= 8 && memcmp(b, png, 8) == 0)) {
        fprintf(stderr, "im2rec: %s: line %ld: image %s (%zu bytes) is neither a JPEG nor a PNG "
                "file\n", list, ln, path, got);
        free(b);
        return NULL;
    }
    *n = got;
    return b;
}

/* One list line into a record: false with a message. */
static bool do_line(List *l, char *line, long ln, Out *rec, Out *idx)
{
    const char *list = l->list;
    char *field[MAX_LABELS + 2];
    int nf = 0;
    for (char *p = line;;) {
        char *tab = strchr(p, '\t');
        if (nf == MAX_LABELS + 2) {
            fprintf(stderr, "im2rec: %s: line %ld: more than %d labels\n", list, ln, MAX_LABELS);
            return false;
        }
        field[nf++] = p;
        if (!tab)
            break;
        *tab = 0;
        p = tab + 1;
    }
    for (int k = 0; k < nf; k++)
        field[k] = trim(field[k]);
    char *end;
    errno = 0;
    long long index = nf >= 3 ? strtoll(field[0], &end, 10) : -1;
    if (nf < 3 || errno || *end || end == field[0] || index < 0) {
        fprintf(stderr, "im2rec: %s: line %ld: not INDEX<tab>LABEL...<tab>PATH with INDEX an "
                "integer >= 0\n", list, ln);
        return false;
    }
    if (!note_index(l, index, ln))
        return false;
    int nl = nf - 2;
    float labels[MAX_LABELS];
    for (int k = 0; k < nl; k++) {
        errno = 0;
        double v = strtod(field[1 + k], &end);
        if (errno || *end || end == field[1 + k]) {
            fprintf(stderr, "im2rec: %s: line %ld: label %d '%s' is not a number\n", list, ln,
                    k + 1, field[1 + k]);
            return false;
        }
        labels[k] = (float)v;
        if (!isfinite(labels[k])) { /* nan, inf, 1e40: no float32 label */
            fprintf(stderr, "im2rec: %s: line %ld: label %d '%s' is not a finite float32 (at "
                    "most 3.4e38 in magnitude)\n", list, ln, k + 1, field[1 + k]);
            return false;
        }
    }
    const char *name = field[nf - 1];
    char *path = image_path(l, name, ln);
    if (!path)
        return false;
    if (same_file(path, l->rec_path) || same_file(path, l->idx_path)) {
        fprintf(stderr, "im2rec: %s: line %ld: %s is the output\n", list, ln, path);
        free(path);
        return false;
    }
    size_t n;
    uint8_t *img = read_image(path, &n, list, ln);
    free(path);
    if (!img)
        return false;
    bool multi = l->pack && nl > 1;
    size_t head = 24 + (multi ? 4 * (size_t)nl : 0), len = head + n;
    uint8_t *d = len < (1u << 29) ? malloc(len) : NULL;
    if (!d) {
        fprintf(stderr, "im2rec: %s: line %ld: the record is too large (%zu bytes)\n", list, ln,
                len);
        free(img);
        return false;
    }
    uint32_t bits;
    float zero = 0.0f;
    put32(d, multi ? (uint32_t)nl : 0);
    memcpy(&bits, multi ? &zero : &labels[0], 4);
    put32(d + 4, bits);
    put64(d + 8, (uint64_t)index);
    put64(d + 16, 0);
    for (int k = 0; multi && k < nl; k++) {
        memcpy(&bits, &labels[k], 4);
        put32(d + 24 + 4 * k, bits);
    }
    memcpy(d + head, img, n);
    free(img);
    fprintf(idx->f.f, "%lld\t%llu\n", index, (unsigned long long)rec->pos);
    bool ok = write_record(rec, d, (uint32_t)len);
    free(d);
    return ok;
}

/* The list, line by line (each at most MAX_LINE bytes); the number of
 * records, or -1 after a message. */
static long read_list(List *l, FILE *fl, Out *rec, Out *idx)
{
    char *line = malloc(MAX_LINE + 2);
    if (!line)
        return -1;
    long ln = 0, count = 0;
    bool ok = true;
    while (ok && fgets(line, (int)MAX_LINE + 2, fl)) {
        ln++;
        size_t n = strlen(line);
        if (n == MAX_LINE + 1 && line[n - 1] != '\n') { /* no newline in MAX_LINE + 1 bytes */
            fprintf(stderr, "im2rec: %s: line %ld is longer than %zu bytes\n", l->list, ln,
                    MAX_LINE);
            ok = false;
            break;
        }
        char *t = trim(line);
        if (!*t) /* im2rec.py skips a line of fewer than three fields: here an error, but a
                    blank line is nothing */
            continue;
        ok = do_line(l, t, ln, rec, idx);
        count += ok;
    }
    if (ok && ferror(fl)) {
        fprintf(stderr, "im2rec: %s: read error\n", l->list);
        ok = false;
    }
    free(line);
    return ok ? count : -1;
}

static FILE *open_list(const char *list)
{
    char err[PATH_MAX + 256];
    int64_t size;
    int fd = rt_open_input(list, "list", &size, err, sizeof err); /* no FIFO, no /dev/zero */
    if (fd < 0) {
        fprintf(stderr, "im2rec: %s\n", err);
        return NULL;
    }
    if (size > MAX_LIST) {
        fprintf(stderr, "im2rec: list %s: %lld bytes, more than a list may hold (1 GiB)\n", list,
                (long long)size);
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        fprintf(stderr, "im2rec: cannot open %s: %s\n", list, strerror(errno));
        close(fd);
    }
    return f;
}

int main(int argc, char **argv)
{
    List l = {0};
    int a = 1;
    bool outside = false;
    for (; a < argc && argv[a][0] == '-' && argv[a][1] == '-'; a++) {
        if (strcmp(argv[a], "--pack-label") == 0)
            l.pack = true;
        else if (strcmp(argv[a], "--allow-outside-root") == 0)
            outside = true;
        else
            break;
    }
    if (argc - a != 3) {
        fprintf(stderr, "usage: im2rec [--pack-label] [--allow-outside-root] LIST ROOT OUT.rec\n"
                        "  (MXNet's .lst: INDEX<tab>LABEL[<tab>LABEL...]<tab>PATH per line;\n"
                        "  writes OUT.rec and OUT.idx, the images stored as they are)\n");
        return 2;
    }
    l.list = argv[a];
    l.root = argv[a + 1];
    const char *out = argv[a + 2];
    size_t ol = strlen(out);
    char *idx_path = malloc(ol + 5);
    if (!idx_path)
        return 1;
    if (ol >= 4 && strcmp(out + ol - 4, ".rec") == 0)
        snprintf(idx_path, ol + 5, "%.*s.idx", (int)(ol - 4), out);
    else
        snprintf(idx_path, ol + 5, "%s.idx", out);
    l.rec_path = out;
    l.idx_path = idx_path;
    if (same_file(l.list, out) || same_file(l.list, idx_path)) {
        fprintf(stderr, "im2rec: the output %s is the list file\n", out);
        free(idx_path);
        return 2;
    }
    if (!outside && !(l.root_real = realpath(l.root, NULL))) {
        fprintf(stderr, "im2rec: the image root %s: %s\n", l.root, strerror(errno));
        free(idx_path);
        return 1;
    }
    rt_out_remove_on_signal(); /* a killed run leaves no temporary file */
    FILE *fl = open_list(l.list);
    Out rec = {0}, idx = {0};
    bool ok = fl && out_open(&rec, out) && out_open(&idx, idx_path);
    long count = ok ? read_list(&l, fl, &rec, &idx) : -1;
    ok = count >= 0;
    if (fl)
        fclose(fl);
    if (ok && count == 0) {
        fprintf(stderr, "im2rec: %s: no images listed\n", l.list);
        ok = false;
    }
    ok = ok && out_commit(&rec) && out_commit(&idx);
    rt_out_abort(&rec.f);
    rt_out_abort(&idx.f);
    free(idx_path);
    free(l.root_real);
    free(l.seen_index);
    free(l.seen_line);
    if (ok)
        printf("im2rec: %ld records to %s\n", count, out);
    return ok ? 0 : 1;
}
