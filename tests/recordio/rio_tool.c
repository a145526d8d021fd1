/* rio_tool.c - the helper of tests/recordio/run.sh (docs/testing.md):
 *
 *   rio_tool images IMAGES.gz LABELS.gz N OUTDIR
 *       the first N Fashion-MNIST images as OUTDIR/png/I.png (lossless) and
 *       OUTDIR/jpg/I.jpg (quality 90), the lists png.lst and jpg.lst, their
 *       pixels as OUTDIR/pixels.bin (N x 784 bytes), and magic.lst: image 0
 *       under index 0xced7230a (the IRHeader's id holds the record magic at
 *       an aligned offset) as OUTDIR/magic.png, a PNG followed by the magic
 *       at an aligned offset of the record: two split points.
 *   rio_tool read REC OUT C H W THREADS SEED EPOCHS BATCH [KEY=VALUE...]
 *       the recordio source over REC (training split): for each epoch the
 *       loop's shuffle, planned, then every batch filled; the floats and
 *       labels of every batch to OUT.  EPOCHS 0: one pass in file order,
 *       no plan (what validation does).  Prints the images per second
 *       (bench/data.sh).  decode_mb=N among the options: --data-decode-mb N.
 *   rio_tool photo W H jpg|png PATH
 *       a W x H RGB picture (gradients and texture) as a JPEG (quality 90)
 *       or a PNG: a 12-24 MP photograph made here, never committed.
 */
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <zlib.h>

#include "data/recordio.h"
#include "train_internal.h"

static int die(const char *msg)
{
    fprintf(stderr, "rio_tool: %s\n", msg);
    return 1;
}

static bool gz_bytes(const char *path, int skip, uint8_t *dst, size_t n)
{
    gzFile f = gzopen(path, "rb");
    uint8_t head[16];
    bool ok = f && gzread(f, head, (unsigned)skip) == skip && gzread(f, dst, (unsigned)n) == (int)n;
    if (f)
        gzclose(f);
    return ok;
}

static bool write_png(const char *path, const uint8_t *px, int w, int h, size_t tail_magic)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = PNG_FORMAT_GRAY;
    png_alloc_size_t len = 0;
    if (!png_image_write_to_memory(&im, NULL, &len, 0, px, 0, NULL))
        return false;
    uint8_t *buf = malloc(len + 16);
    if (!buf || !png_image_write_to_memory(&im, buf, &len, 0, px, 0, NULL))
        return false;
    if (tail_magic) { /* zero bytes to an aligned record offset, then the magic */
        size_t pad = (4 - (24 + len) % 4) % 4;
        memset(buf + len, 0, pad);
        len += pad;
        static const uint8_t m[4] = {0x0a, 0x23, 0xd7, 0xce};
        memcpy(buf + len, m, 4);
        len += 4;
        memcpy(buf + len, "tail", 4);
        len += 4;
    }
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(buf, 1, len, f) == len;
    ok &= f && fclose(f) == 0;
    free(buf);
    return ok;
}

static bool write_jpeg(tjhandle tj, const char *path, const uint8_t *px, int w, int h)
{
    unsigned char *jpg = NULL;
    unsigned long len = 0;
    if (tjCompress2(tj, px, w, 0, h, TJPF_GRAY, &jpg, &len, TJSAMP_GRAY, 90, 0) != 0)
        return false;
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(jpg, 1, len, f) == len;
    ok &= f && fclose(f) == 0;
    tjFree(jpg);
    return ok;
}

static int images(char **a)
{
    int n = atoi(a[2]);
    const char *dir = a[3];
    if (n < 1 || n > 60000)
        return die("N must be 1..60000");
    uint8_t *px = malloc((size_t)n * 784), *lab = malloc((size_t)n);
    if (!px || !lab || !gz_bytes(a[0], 16, px, (size_t)n * 784) || !gz_bytes(a[1], 8, lab, (size_t)n))
        return die("cannot read the IDX files");
    char path[4200];
    snprintf(path, sizeof path, "%s/png", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/jpg", dir);
    mkdir(path, 0755);
    tjhandle tj = tjInitCompress();
    FILE *lp, *lj, *lm;
    snprintf(path, sizeof path, "%s/png.lst", dir);
    lp = fopen(path, "w");
    snprintf(path, sizeof path, "%s/jpg.lst", dir);
    lj = fopen(path, "w");
    snprintf(path, sizeof path, "%s/magic.lst", dir);
    lm = fopen(path, "w");
    if (!tj || !lp || !lj || !lm)
        return die("cannot write the lists");
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/png/%d.png", dir, i);
        if (!write_png(path, px + (size_t)i * 784, 28, 28, 0))
            return die("cannot write a PNG");
        snprintf(path, sizeof path, "%s/jpg/%d.jpg", dir, i);
        if (!write_jpeg(tj, path, px + (size_t)i * 784, 28, 28))
            return die("cannot write a JPEG");
        fprintf(lp, "%d\t%d\tpng/%d.png\n", i, lab[i], i);
        fprintf(lj, "%d\t%d\tjpg/%d.jpg\n", i, lab[i], i);
    }
    snprintf(path, sizeof path, "%s/magic.png", dir);
    if (!write_png(path, px, 28, 28, 1))
        return die("cannot write magic.png");
    fprintf(lm, "%u\t%d\tmagic.png\n", 0xced7230au, lab[0]);
    fprintf(lm, "1\t%d\tpng/1.png\n", lab[1]);
    fclose(lp);
    fclose(lj);
    fclose(lm);
    tjDestroy(tj);
    snprintf(path, sizeof path, "%s/pixels.bin", dir);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(px, 1, (size_t)n * 784, f) != (size_t)n * 784 || fclose(f) != 0)
        return die("cannot write pixels.bin");
    free(px);
    free(lab);
    return 0;
}

static int photo(char **a)
{
    int w = atoi(a[0]), h = atoi(a[1]);
    bool jpg = strcmp(a[2], "jpg") == 0;
    if (w < 1 || h < 1 || w > 30000 || h > 30000 || (!jpg && strcmp(a[2], "png") != 0))
        return die("photo W H jpg|png PATH: W and H 1..30000");
    uint8_t *px = malloc((size_t)w * (size_t)h * 3);
    if (!px)
        return die("out of memory");
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = px + ((size_t)y * (size_t)w + (size_t)x) * 3;
            p[0] = (uint8_t)(255 * x / w);
            p[1] = (uint8_t)(255 * y / h);
            p[2] = (uint8_t)((x ^ y) & 0x3f) + 96;
        }
    bool ok;
    if (jpg) {
        tjhandle tj = tjInitCompress();
        unsigned char *buf = NULL;
        unsigned long len = 0;
        ok = tj && tjCompress2(tj, px, w, 0, h, TJPF_RGB, &buf, &len, TJSAMP_420, 90, 0) == 0;
        FILE *f = ok ? fopen(a[3], "wb") : NULL;
        ok = f && fwrite(buf, 1, len, f) == len;
        ok &= f && fclose(f) == 0;
        tjFree(buf);
        if (tj)
            tjDestroy(tj);
    } else {
        png_image im;
        memset(&im, 0, sizeof im);
        im.version = PNG_IMAGE_VERSION;
        im.width = (png_uint_32)w;
        im.height = (png_uint_32)h;
        im.format = PNG_FORMAT_RGB;
        ok = png_image_write_to_file(&im, a[3], 0, px, 0, NULL) != 0;
    }
    free(px);
    return ok ? 0 : die("cannot write the picture");
}

static int read_rec(int argc, char **a)
{
    RtRecOptions o;
    rt_rec_options_default(&o);
    snprintf(o.train, sizeof o.train, "%s", a[0]);
    int c = atoi(a[2]), h = atoi(a[3]), w = atoi(a[4]);
    o.threads = atoi(a[5]);
    uint64_t seed = strtoull(a[6], NULL, 10);
    int epochs = atoi(a[7]);
    int64_t b = atoll(a[8]);
    char err[1400];
    for (int k = 9; k < argc; k++) {
        char key[64];
        const char *eq = strchr(a[k], '=');
        if (!eq || eq - a[k] >= 64)
            return die("options are KEY=VALUE");
        memcpy(key, a[k], (size_t)(eq - a[k]));
        key[eq - a[k]] = 0;
        if (strcmp(key, "decode_mb") == 0) {
            o.decode_mb = atoll(eq + 1);
            continue;
        }
        if (!rt_rec_option_set(&o, key, eq + 1, err, sizeof err))
            return die(err);
    }
    RtDataset ds;
    if (!rt_data_recordio(&ds, &o, c, h, w, 1 << 20, seed, err, sizeof err))
        return die(err);
    printf("%s\n", ds.summary);
    FILE *out = fopen(a[1], "wb");
    int64_t *perm = malloc((size_t)ds.ntrain * sizeof *perm);
    float *x = malloc((size_t)(b * ds.sample_size) * sizeof *x), *y = malloc((size_t)b * sizeof *y);
    if (!out || !perm || !x || !y)
        return die("out of memory or cannot write OUT");
    int rc = 0;
    int64_t images = 0;
    double t0 = rt_now_s();
    for (int e = 0; e < (epochs ? epochs : 1) && !rc; e++) {
        if (epochs) {
            rt_shuffle(perm, ds.ntrain, seed, e);
            ds.plan(&ds, e, perm, ds.ntrain / b * b);
        } else
            for (int64_t i = 0; i < ds.ntrain; i++)
                perm[i] = i;
        for (int64_t at = 0; at + b <= ds.ntrain; at += b) {
            ds.fill(&ds, RT_SPLIT_TRAIN, perm + at, b, x, y);
            if (ds.error(&ds)) {
                fprintf(stderr, "rio_tool: %s\n", ds.error(&ds));
                rc = 1;
                break;
            }
            fwrite(x, sizeof *x, (size_t)(b * ds.sample_size), out);
            fwrite(y, sizeof *y, (size_t)b, out);
            images += b;
        }
    }
    double dt = rt_now_s() - t0;
    /* bench/data.sh reads this line */
    printf("read: %lld images in %.3f s: %.1f images/s\n", (long long)images, dt,
           dt > 0 ? (double)images / dt : 0.0);
    if (fclose(out) != 0)
        rc = 1;
    free(perm);
    free(x);
    free(y);
    rt_data_free(&ds);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 6 && strcmp(argv[1], "images") == 0)
        return images(argv + 2);
    if (argc >= 11 && strcmp(argv[1], "read") == 0)
        return read_rec(argc - 2, argv + 2);
    if (argc == 6 && strcmp(argv[1], "photo") == 0)
        return photo(argv + 2);
    fprintf(stderr, "usage: rio_tool images IMAGES.gz LABELS.gz N OUTDIR\n"
                    "       rio_tool read REC OUT C H W THREADS SEED EPOCHS BATCH [KEY=VALUE...]\n"
                    "       rio_tool photo W H jpg|png PATH\n");
    return 2;
}
