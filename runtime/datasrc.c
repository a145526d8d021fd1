/* datasrc.c - the data source of a run: --data parsed (settings.c) and
 * opened (synthetic, digits, Fashion-MNIST, IDX files, CIFAR-10), its paths
 * found under --data-dir, its sample size, classes and image shape checked
 * against the model's input, and the per-epoch order of the training
 * samples.  Apart from the loop so that its messages and exit codes
 * (docs/training.md, Data) are in one place.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data_ext.h"
#include "data/recordio.h"
#include "fileio.h"
#include "rand.h"
#include "train_internal.h"

/* The data source's parsed form (settings.c), by its local names. */
typedef RtDataSpec DataSpec;
enum { DS_SYNTHETIC = RT_DS_SYNTHETIC, DS_DIGITS = RT_DS_DIGITS, DS_FASHION = RT_DS_FASHION,
       DS_IDX = RT_DS_IDX, DS_CIFAR10 = RT_DS_CIFAR10, DS_RECORDIO = RT_DS_RECORDIO };

static bool parse_data(const char *s, DataSpec *d, char *err, size_t errlen)
{
    return rt_data_spec_parse(s, d, err, errlen);
}

static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *v)
{
    return rt_parse_i64(s, lo, hi, v);
}
/* Fisher-Yates from (seed, epoch): a pure function of both. */
void rt_shuffle(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch)
{
    uint64_t stream = rt_mix64(rt_hash_name("shuffle") + (uint64_t)epoch);
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(rt_rand_u64(seed, stream, (uint64_t)i) % (uint64_t)(i + 1));
        int64_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
}

static bool has_file(const char *dir, const char *name)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
        return true;
    snprintf(path, sizeof path, "%s/%s.gz", dir, name);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A path argument of a data source: as given when it exists (or is
 * absolute), else under the data directory when it exists there. */
static void data_path(char *dst, size_t cap, const char *arg, const char *data_dir)
{
    struct stat st;
    snprintf(dst, cap, "%s", arg);
    if (arg[0] == '/' || stat(arg, &st) == 0)
        return;
    char alt[4200];
    snprintf(alt, sizeof alt, "%s/%s", data_dir, arg);
    if (stat(alt, &st) == 0)
        snprintf(dst, cap, "%s", alt);
}

/* --data-threads, else what the machine has beyond the step's own threads
 * (--threads; OpenBLAS takes every core without it: then half). */
static int data_threads(const RtTrainOptions *o)
{
    if (o->data_threads > 0)
        return o->data_threads;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    long n = o->threads > 0 ? ncpu - o->threads : ncpu / 2;
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

/* recordio(TRAIN.rec, VAL.rec, KEY=VALUE, ...): images of the model's input
 * [C, H, W] (C 1 or 3) or [H, W] (grey). */
static int open_recordio(const RtModel *m, const RtTrainOptions *o, const DataSpec *d,
                         uint64_t seed, RtDataset *ds, FILE *err)
{
    char msg[1400];
    const int64_t *sh = m->data_shape;
    int64_t c, h, w;
    if (m->data_rank == 3 && (sh[0] == 1 || sh[0] == 3))
        c = sh[0], h = sh[1], w = sh[2];
    else if (m->data_rank == 2)
        c = 1, h = sh[0], w = sh[1];
    else {
        fprintf(err, "%s: data recordio: images need a model input [C, H, W] with C 1 (grey) or "
                "3 (RGB), or [H, W]; model %s's input has rank %d\n", o->prog, m->name,
                m->data_rank);
        return 2;
    }
    if (h < 1 || w < 1 || h > 65535 || w > 65535) {
        fprintf(err, "%s: data recordio: model %s's images of %lldx%lld are out of range\n",
                o->prog, m->name, (long long)h, (long long)w);
        return 2;
    }
    RtRecOptions ro;
    rt_rec_options_default(&ro);
    struct stat st;
    if (d->given[1] && rt_rec_option_known(d->arg[1]) && stat(d->arg[1], &st) != 0) {
        fprintf(err, "%s: data source recordio(): '%s' is an option without a value (write "
                "%s=VALUE), not a validation file\n", o->prog, d->arg[1], d->arg[1]);
        return 2;
    }
    data_path(ro.train, sizeof ro.train, d->arg[0], o->data_dir);
    if (d->given[1])
        data_path(ro.val, sizeof ro.val, d->arg[1], o->data_dir);
    for (int k = 0; k < d->nopts; k++)
        if (!rt_rec_option_set(&ro, d->opt_key[k], d->opt_val[k], msg, sizeof msg)) {
            fprintf(err, "%s: data source %s\n", o->prog, msg);
            return 2;
        }
    ro.threads = data_threads(o);
    ro.decode_mb = o->data_decode_mb;
    if (!rt_data_recordio(ds, &ro, (int)c, (int)h, (int)w, m->classes, seed, msg, sizeof msg)) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        return 1;
    }
    return 0;
}

/* The data set of o->data (docs/training.md, Data).  Returns 0, 1 (a data
 * error) or 2 (a source the model cannot take). */
int rt_open_data(const RtModel *m, const RtTrainOptions *o, uint64_t seed, int64_t sample,
                 RtDataset *ds, FILE *err)
{
    char msg[1024];
    DataSpec d;
    if (!parse_data(o->data, &d, msg, sizeof msg)) {
        fprintf(err, "%s: data source %s\n", o->prog, msg);
        return 2;
    }
    if (d.kind == DS_SYNTHETIC) {
        rt_data_synthetic(ds, sample, m->classes, seed, RT_SYNTHETIC_TRAIN, RT_SYNTHETIC_VAL);
        return 0;
    }
    if (d.kind == DS_DIGITS) {
        if (sample != RT_DIGITS_PIXELS || m->classes < RT_DIGITS_CLASSES) {
            fprintf(err, "%s: the digits data are 8x8 images of 10 classes; model %s takes %lld "
                    "values per sample and has %lld classes\n", o->prog, m->name,
                    (long long)sample, (long long)m->classes);
            return 2;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/digits.csv.gz", o->data_dir);
        if (!rt_data_digits(ds, path, msg, sizeof msg)) {
            fprintf(err, "%s: %s\n", o->prog, msg);
            if (strstr(msg, "cannot open"))
                fprintf(err, "%s: set --data-dir or AMPC_DATA_DIR to the directory of "
                        "digits.csv.gz (Debian's python3-sklearn: sklearn/datasets/data/)\n",
                        o->prog);
            return 1;
        }
        return 0;
    }
    if (d.kind == DS_RECORDIO)
        return open_recordio(m, o, &d, seed, ds, err);
    bool ok;
    const char *what;
    if (d.kind == DS_FASHION) {
        what = "Fashion-MNIST";
        char dir[4200];
        /* fashion_mnist("DIR"); else DATA_DIR/fashion-mnist, DATA_DIR, then
         * Debian's /usr/share/datasets/fashion-mnist */
        if (d.given[0])
            data_path(dir, sizeof dir, d.arg[0], o->data_dir);
        else {
            snprintf(dir, sizeof dir, "%s/fashion-mnist", o->data_dir);
            if (!has_file(dir, "train-images-idx3-ubyte"))
                snprintf(dir, sizeof dir, "%s", o->data_dir);
            if (!has_file(dir, "train-images-idx3-ubyte"))
                snprintf(dir, sizeof dir, "%s", RT_FASHION_MNIST_DIR);
        }
        ok = rt_data_fashion_mnist(ds, dir, msg, sizeof msg);
        if (!ok) {
            fprintf(err, "%s: %s\n", o->prog, msg);
            fprintf(err, "%s: Fashion-MNIST is Debian's dataset-fashion-mnist (apt-get install "
                    "dataset-fashion-mnist: %s), or 'make fashion' (into DATA_DIR/fashion-mnist); "
                    "set --data-dir, AMPC_DATA_DIR or fashion_mnist(\"DIR\")\n", o->prog,
                    RT_FASHION_MNIST_DIR);
            return 1;
        }
    } else if (d.kind == DS_IDX) {
        what = "the IDX files";
        int64_t classes = 10;
        if (d.given[4])
            parse_i64(d.arg[4], 2, 1 << 20, &classes);
        static char f[4][4200];
        for (int k = 0; k < 4; k++)
            data_path(f[k], sizeof f[k], d.arg[k], o->data_dir);
        ok = d.given[4] ? rt_data_idx_classes(ds, f[0], f[1], f[2], f[3], classes, msg, sizeof msg)
                        : rt_data_idx(ds, f[0], f[1], f[2], f[3], msg, sizeof msg);
        if (!ok) {
            fprintf(err, "%s: %s\n", o->prog, msg);
            return 1;
        }
    } else {
        what = "CIFAR-10";
        char dir[4200];
        if (d.given[0])
            data_path(dir, sizeof dir, d.arg[0], o->data_dir);
        else {
            snprintf(dir, sizeof dir, "%s/cifar10", o->data_dir);
            if (!is_dir(dir))
                snprintf(dir, sizeof dir, "%s", o->data_dir);
        }
        if (!rt_data_cifar10(ds, dir, msg, sizeof msg)) {
            fprintf(err, "%s: %s\n", o->prog, msg);
            return 1;
        }
    }
    if (ds->sample_size != sample || ds->classes > m->classes) {
        fprintf(err, "%s: %s hold %lld values per sample in %lld classes; model %s takes %lld "
                "values per sample and has %lld classes\n", o->prog, what,
                (long long)ds->sample_size, (long long)ds->classes, m->name, (long long)sample,
                (long long)m->classes);
        return 2;
    }
    return 0;
}

/* An image source's [C, H, W] against the model's input: equal once the
 * dimensions of size 1 are dropped from both (1x64 images are not 8x8 ones,
 * though both hold 64 values).  A flat (rank 1) input takes any image.
 * Returns 0, or 2 with a message. */
int rt_check_image_shape(const RtModel *m, const RtDataset *ds, const RtTrainOptions *o,
                         FILE *err)
{
    if (!ds->image[0] || m->data_rank <= 1)
        return 0;
    int64_t a[RT_MAX_RANK + 3], b[3];
    int na = 0, nb = 0;
    for (int d = 0; d < m->data_rank; d++)
        if (m->data_shape[d] != 1)
            a[na++] = m->data_shape[d];
    for (int d = 0; d < 3; d++)
        if (ds->image[d] != 1)
            b[nb++] = ds->image[d];
    bool same = na == nb;
    for (int d = 0; same && d < na; d++)
        same = a[d] == b[d];
    if (same)
        return 0;
    char ms[160] = "";
    size_t at = 0;
    for (int d = 0; d < m->data_rank && at < sizeof ms; d++)
        at += (size_t)snprintf(ms + at, sizeof ms - at, "%s%lld", d ? "x" : "",
                               (long long)m->data_shape[d]);
    fprintf(err, "%s: data %s: its images are %lldx%lldx%lld (channels x rows x columns); model "
            "%s takes %s per sample\n", o->prog, ds->name, (long long)ds->image[0],
            (long long)ds->image[1], (long long)ds->image[2], m->name, ms);
    return 2;
}
