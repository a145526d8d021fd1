/* cifar10.c - the `cifar10` data source: the CIFAR-10 binary format
 * (https://www.cs.toronto.edu/~kriz/cifar.html, "binary version";
 * DESIGN.md 6).  API: data_ext.h.
 *
 * data_batch_1.bin .. data_batch_5.bin are the training set (in that
 * order), test_batch.bin the validation set.  A record is 1 label byte
 * (0..9) then 3,072 pixel bytes: the red, green and blue planes, each 32x32
 * row-major, i.e. already CHW.  The real files hold 10,000 records each;
 * any whole, non-zero number of records is accepted, so tests run on small
 * generated files.
 *
 * Normalisation: x/255, then per channel (v - mean[c]) / std[c] with the
 * CIFAR-10 training set's mean 0.4914, 0.4822, 0.4465 and standard
 * deviation 0.2470, 0.2435, 0.2616 (over all 50,000 x 32 x 32 pixels of a
 * channel).  Not computed here (no copy of CIFAR-10 is reachable); they are
 * the values computed and reported independently in
 * github.com/facebookarchive/fb.resnet.torch issue 180 (0.49140, 0.48216,
 * 0.44653 / 0.24703, 0.24349, 0.26159) and kuangliu/pytorch-cifar issue 129
 * (the same to 7 digits), which also explains the other, wrong std triple
 * (0.2023, 0.1994, 0.2010) that circulates.  Pixels stay bytes in memory
 * (data_ext.h: storage); fill normalises through a 3 x 256 table.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data_ext.h"
#include "fileio.h"

const float rt_cifar10_mean[3] = {0.4914f, 0.4822f, 0.4465f};
const float rt_cifar10_std[3] = {0.2470f, 0.2435f, 0.2616f};

/* the records of samples idx[0..n) of a split, as bytes (CHW), and their labels */
static void cifar_fill_raw(const RtDataset *ds, RtSplit split, const int64_t *idx, int64_t n,
                           uint8_t *raw, float *y)
{
    int64_t base = split == RT_SPLIT_VAL ? ds->ntrain : 0;
    const uint8_t *px = rt_data_bytes(ds);
    for (int64_t j = 0; j < n; j++) {
        int64_t r = base + idx[j];
        memcpy(raw + (size_t)j * RT_CIFAR10_PIXELS, px + (size_t)r * RT_CIFAR10_PIXELS,
               RT_CIFAR10_PIXELS);
        y[j] = ds->y[r];
    }
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

bool rt_data_cifar10(RtDataset *ds, const char *dir, char *err, size_t errlen)
{
    memset(ds, 0, sizeof *ds);
    enum { NFILES = RT_CIFAR10_BATCHES + 1 };
    char path[NFILES][1100];
    char base[1050];
    if (strlen(dir) > 1000) {
        snprintf(err, errlen, "cifar10: the directory name is longer than 1000 bytes");
        return false;
    }
    snprintf(base, sizeof base, "%s", dir);
    snprintf(path[0], sizeof path[0], "%s/data_batch_1.bin", dir);
    if (!exists(path[0])) {
        char sub[1100];
        snprintf(sub, sizeof sub, "%s/cifar-10-batches-bin/data_batch_1.bin", dir);
        if (exists(sub))
            snprintf(base, sizeof base, "%s/cifar-10-batches-bin", dir);
    }
    for (int k = 0; k < NFILES; k++) {
        if (k < RT_CIFAR10_BATCHES)
            snprintf(path[k], sizeof path[k], "%s/data_batch_%d.bin", base, k + 1);
        else
            snprintf(path[k], sizeof path[k], "%s/test_batch.bin", base);
    }
    /* sizes first: nothing is read from a set with a bad file */
    FILE *f[NFILES] = {0};
    int64_t recs[NFILES], total = 0;
    uint8_t *px = NULL;
    float *y = NULL;
    bool ok = false;
    for (int k = 0; k < NFILES; k++) {
        /* a regular file only, opened without blocking (fileio.h) */
        int64_t size;
        int fd = rt_open_input(path[k], NULL, &size, err, errlen);
        if (fd < 0)
            goto out;
        f[k] = fdopen(fd, "rb");
        if (!f[k]) {
            snprintf(err, errlen, "cannot open %s: %s", path[k], strerror(errno));
            close(fd);
            goto out;
        }
        if (size == 0 || size % RT_CIFAR10_RECORD != 0) {
            snprintf(err, errlen, "%s: size %lld is not a non-zero multiple of %d (a CIFAR-10 "
                     "record: 1 label byte and 3,072 pixel bytes); the last record starts at "
                     "offset %lld", path[k], (long long)size, RT_CIFAR10_RECORD,
                     (long long)(size / RT_CIFAR10_RECORD * RT_CIFAR10_RECORD));
            goto out;
        }
        recs[k] = size / RT_CIFAR10_RECORD;
        total += recs[k];
    }
    px = malloc((size_t)total * RT_CIFAR10_PIXELS);
    y = malloc((size_t)total * sizeof *y);
    if (!px || !y) {
        snprintf(err, errlen, "%s: out of memory for %lld images", path[0], (long long)total);
        goto out;
    }
    int64_t row = 0;
    for (int k = 0; k < NFILES; k++) {
        uint8_t rec[RT_CIFAR10_RECORD];
        for (int64_t i = 0; i < recs[k]; i++, row++) {
            long long off = (long long)i * RT_CIFAR10_RECORD;
            size_t got = fread(rec, 1, sizeof rec, f[k]);
            if (got != sizeof rec) {
                snprintf(err, errlen, "%s: read error at offset %lld: %s", path[k],
                         off + (long long)got,
                         ferror(f[k]) ? strerror(errno) : "unexpected end of file");
                goto out;
            }
            if (rec[0] >= RT_CIFAR10_CLASSES) {
                snprintf(err, errlen, "%s: offset %lld: label %u of record %lld is outside "
                         "0..9", path[k], off, rec[0], (long long)i);
                goto out;
            }
            y[row] = rec[0];
            memcpy(px + (size_t)row * RT_CIFAR10_PIXELS, rec + 1, RT_CIFAR10_PIXELS);
        }
    }
    ds->name = "cifar10";
    ds->sample_size = RT_CIFAR10_PIXELS;
    ds->image[0] = 3;
    ds->image[1] = ds->image[2] = 32;
    ds->classes = RT_CIFAR10_CLASSES;
    ds->nval = recs[NFILES - 1];
    ds->ntrain = total - ds->nval;
    ds->x = (float *)(void *)px; /* bytes: data_ext.h, storage */
    ds->y = y;
    ds->fill = rt_fill_from_raw;
    ds->fill_raw = cifar_fill_raw;
    ds->norm = (RtIngestNorm){.channels = 3, .div = 255.0f};
    for (int c = 0; c < 3; c++) {
        ds->norm.mean[c] = rt_cifar10_mean[c];
        ds->norm.std[c] = rt_cifar10_std[c];
    }
    px = NULL;
    y = NULL;
    ok = true;
out:
    for (int k = 0; k < NFILES; k++)
        if (f[k])
            fclose(f[k]);
    free(px);
    free(y);
    return ok;
}
