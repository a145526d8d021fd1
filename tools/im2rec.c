/* im2rec.c - makes an MXNet RecordIO file (.rec and .idx) from a list file
 * and a folder of images, as MXNet's tools/im2rec.py does with
 * --pass-through (the image files stored as they are, not re-encoded), so
 * that users and tests need no MXNet to build data (docs/training.md,
 * RecordIO).  The output is byte for byte what MXNet 1.9.1's
 * mx.recordio.MXIndexedRecordIO.write_idx(i, mx.recordio.pack(header, img))
 * writes for the same records (tests/recordio/mxnet_compare.py checks).
 *
 *   im2rec [--pack-label] LIST ROOT OUT.rec
 *
 * LIST: MXNet's .lst, one image a line: INDEX<tab>LABEL[<tab>LABEL...]<tab>PATH
 * (im2rec.py: fields stripped; the index an integer, the labels numbers,
 * the path last, joined to ROOT).  Without --pack-label only the first
 * label is stored (IRHeader flag 0); with it, every label (flag = count).
 * The record: IRHeader {flag, label, id = INDEX, id2 = 0}, [labels], the
 * image's bytes.  OUT.idx gets "INDEX<tab>OFFSET" per record.
 *
 * Bad input (a malformed line, a missing image, a record of 2^29 bytes or
 * more) stops with a message naming the list line; nothing is left
 * behind: both outputs are written to temporary files and renamed at the
 * end, and an output that is one of the inputs is refused.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define REC_MAGIC 0xced7230au
#define MAX_LABELS 4096

typedef struct {
    FILE *f;
    char *path, *tmp;
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
    return n == 0 || fwrite(p, 1, n, o->f) == n;
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

static bool out_open(Out *o, const char *path)
{
    o->path = strdup(path);
    o->tmp = malloc(strlen(path) + 16);
    if (!o->path || !o->tmp)
        return false;
    sprintf(o->tmp, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(o->tmp);
    mode_t um = umask(0); /* mkstemp's 0600 -> what a new file gets */
    umask(um);
    if (fd >= 0 && fchmod(fd, 0666 & ~um) != 0) {
        close(fd);
        fd = -1;
    }
    if (fd < 0 || !(o->f = fdopen(fd, "wb"))) {
        fprintf(stderr, "im2rec: cannot write %s: %s\n", o->tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
        free(o->tmp);
        o->tmp = NULL;
        return false;
    }
    return true;
}

static bool out_commit(Out *o)
{
    bool ok = fflush(o->f) == 0 && !ferror(o->f) && fsync(fileno(o->f)) == 0;
    ok &= fclose(o->f) == 0;
    o->f = NULL;
    if (ok && rename(o->tmp, o->path) != 0)
        ok = false;
    if (!ok) {
        fprintf(stderr, "im2rec: cannot write %s: %s\n", o->path, strerror(errno));
        return false;
    }
    free(o->tmp); /* renamed: nothing to remove */
    o->tmp = NULL;
    return true;
}

static void out_abort(Out *o)
{
    if (o->f)
        fclose(o->f);
    if (o->tmp)
        unlink(o->tmp);
    free(o->path);
    free(o->tmp);
    memset(o, 0, sizeof *o);
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

/* The whole image file; NULL with a message. */
static uint8_t *read_file(const char *path, size_t *n, const char *list, long ln)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "im2rec: %s: line %ld: cannot read image %s: %s\n", list, ln, path,
                f ? "not a regular file" : strerror(errno));
        if (f)
            fclose(f);
        return NULL;
    }
    if (st.st_size >= (1 << 29)) {
        fprintf(stderr, "im2rec: %s: line %ld: image %s: %lld bytes: a record holds less than "
                "2^29\n", list, ln, path, (long long)st.st_size);
        fclose(f);
        return NULL;
    }
    uint8_t *b = malloc((size_t)st.st_size + 1);
    *n = b ? fread(b, 1, (size_t)st.st_size, f) : 0;
    if (!b || *n != (size_t)st.st_size) {
        fprintf(stderr, "im2rec: %s: line %ld: cannot read image %s\n", list, ln, path);
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

/* One list line into a record: false with a message. */
static bool do_line(char *line, long ln, const char *list, const char *root, bool pack,
                    const char *rec_path, Out *rec, Out *idx)
{
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
    }
    const char *name = field[nf - 1];
    size_t plen = strlen(root) + strlen(name) + 2;
    char *path = malloc(plen);
    if (!path)
        return false;
    if (name[0] == '/') /* os.path.join: an absolute path replaces the root */
        snprintf(path, plen, "%s", name);
    else
        snprintf(path, plen, "%s%s%s", root, root[0] && root[strlen(root) - 1] != '/' ? "/" : "",
                 name);
    if (same_file(path, rec_path)) {
        fprintf(stderr, "im2rec: %s: line %ld: %s is the output\n", list, ln, path);
        free(path);
        return false;
    }
    size_t n;
    uint8_t *img = read_file(path, &n, list, ln);
    free(path);
    if (!img)
        return false;
    bool multi = pack && nl > 1;
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
    fprintf(idx->f, "%lld\t%llu\n", index, (unsigned long long)rec->pos);
    bool ok = write_record(rec, d, (uint32_t)len);
    free(d);
    return ok;
}

int main(int argc, char **argv)
{
    bool pack = argc > 1 && strcmp(argv[1], "--pack-label") == 0;
    if (argc - pack != 4) {
        fprintf(stderr, "usage: im2rec [--pack-label] LIST ROOT OUT.rec\n"
                        "  (MXNet's .lst: INDEX<tab>LABEL[<tab>LABEL...]<tab>PATH per line;\n"
                        "  writes OUT.rec and OUT.idx, the images stored as they are)\n");
        return 2;
    }
    const char *list = argv[1 + pack], *root = argv[2 + pack], *out = argv[3 + pack];
    size_t ol = strlen(out);
    char *idx_path = malloc(ol + 5);
    if (!idx_path)
        return 1;
    if (ol >= 4 && strcmp(out + ol - 4, ".rec") == 0)
        snprintf(idx_path, ol + 5, "%.*s.idx", (int)(ol - 4), out);
    else
        snprintf(idx_path, ol + 5, "%s.idx", out);
    if (same_file(list, out) || same_file(list, idx_path)) {
        fprintf(stderr, "im2rec: the output %s is the list file\n", out);
        free(idx_path);
        return 2;
    }
    FILE *fl = fopen(list, "r");
    if (!fl) {
        fprintf(stderr, "im2rec: cannot open %s: %s\n", list, strerror(errno));
        free(idx_path);
        return 1;
    }
    Out rec = {0}, idx = {0};
    bool ok = out_open(&rec, out) && out_open(&idx, idx_path);
    char *line = NULL;
    size_t cap = 0;
    long ln = 0, count = 0;
    while (ok && getline(&line, &cap, fl) >= 0) {
        ln++;
        char *t = trim(line);
        if (!*t) /* im2rec.py skips a line of fewer than three fields: here an error, but a
                    blank line is nothing */
            continue;
        ok = do_line(t, ln, list, root, pack, out, &rec, &idx);
        count += ok;
    }
    free(line);
    fclose(fl);
    if (ok && count == 0) {
        fprintf(stderr, "im2rec: %s: no images listed\n", list);
        ok = false;
    }
    ok = ok && out_commit(&rec) && out_commit(&idx);
    out_abort(&rec);
    out_abort(&idx);
    free(idx_path);
    if (ok)
        printf("im2rec: %ld records to %s\n", count, out);
    return ok ? 0 : 1;
}
