/*
 * test_data_idx.c - the IDX reader and the fashion_mnist source
 * (runtime/data/idx.c): small generated IDX files, plain and gzipped, good
 * and broken (each message checked for the file and the byte offset), and
 * the real Fashion-MNIST files of Debian's dataset-fashion-mnist when they
 * are installed.
 *
 * The real-data test reads $AMPC_FASHION_DIR, else /usr/share/datasets/
 * fashion-mnist.  When the files are missing it says so and is skipped;
 * with AMPC_REQUIRE_FASHION=1 it fails instead.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data/data_ext.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ampc_test_idx_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* dir/name in one of 8 rotating buffers (tests hold four paths at once) */
static const char *path_of(const char *name)
{
    static char p[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void put32(unsigned char *b, uint32_t v)
{
    b[0] = (unsigned char)(v >> 24);
    b[1] = (unsigned char)(v >> 16);
    b[2] = (unsigned char)(v >> 8);
    b[3] = (unsigned char)v;
}

/* Writes bytes to dir/name, gzipped when gz. */
static const char *write_bytes(const char *name, const unsigned char *b, size_t n, bool gz)
{
    const char *p = path_of(name);
    if (gz) {
        gzFile f = gzopen(p, "wb");
        assert_non_null(f);
        if (n)
            assert_int_equal(gzwrite(f, b, (unsigned)n), (int)n);
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(p, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(b, 1, n, f), n);
        assert_int_equal(fclose(f), 0);
    }
    return p;
}

/* An IDX file in memory: magic, dims, then `body` bytes (the caller's, or
 * the generated pattern when body is NULL and n is the element count). */
static unsigned char *idx_bytes(uint32_t magic, int rank, const uint32_t *dims, size_t *len)
{
    size_t count = 1;
    for (int d = 0; d < rank; d++)
        count *= dims[d];
    size_t hdr = 4 + 4 * (size_t)rank;
    unsigned char *b = malloc(hdr + count + 1);
    put32(b, magic);
    for (int d = 0; d < rank; d++)
        put32(b + 4 + 4 * d, dims[d]);
    *len = hdr + count;
    return b;
}

/* pixel e of image r of a split (0 train, 1 test) */
static unsigned pix(int split, int r, int e) { return (unsigned)(split * 101 + r * 13 + e * 7) % 256; }
/* label of image r of a split */
static unsigned lab(int split, int r) { return (unsigned)(r * 3 + split) % 10; }

/* Writes images [n, rows, cols] of split s with the pattern. */
static const char *write_images(const char *name, int s, uint32_t n, uint32_t rows, uint32_t cols,
                                bool gz)
{
    uint32_t dims[3] = {n, rows, cols};
    size_t len;
    unsigned char *b = idx_bytes(RT_IDX_MAGIC_IMAGES, 3, dims, &len);
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t e = 0; e < rows * cols; e++)
            b[16 + r * rows * cols + e] = (unsigned char)pix(s, (int)r, (int)e);
    const char *p = write_bytes(name, b, len, gz);
    free(b);
    return p;
}

static const char *write_labels(const char *name, int s, uint32_t n, bool gz)
{
    size_t len;
    unsigned char *b = idx_bytes(RT_IDX_MAGIC_LABELS, 1, &n, &len);
    for (uint32_t r = 0; r < n; r++)
        b[8 + r] = (unsigned char)lab(s, (int)r);
    const char *p = write_bytes(name, b, len, gz);
    free(b);
    return p;
}

/* The standard small set: 7 training and 3 test images of 3x4. */
typedef struct {
    const char *ti, *tl, *vi, *vl;
} Paths;

static Paths write_set(bool gz)
{
    Paths p;
    p.ti = write_images(gz ? "ti.gz" : "ti", 0, 7, 3, 4, gz);
    p.tl = write_labels(gz ? "tl.gz" : "tl", 0, 7, gz);
    p.vi = write_images(gz ? "vi.gz" : "vi", 1, 3, 3, 4, gz);
    p.vl = write_labels(gz ? "vl.gz" : "vl", 1, 3, gz);
    return p;
}

static void check_sample(const float *x, float y, int s, int r)
{
    for (int e = 0; e < 12; e++)
        assert_float_equal(x[e], (float)pix(s, r, e) / 255.0f, 0);
    assert_float_equal(y, (float)lab(s, r), 0);
}

static void check_good(bool gz)
{
    Paths p = write_set(gz);
    RtDataset ds;
    char err[512];
    if (!rt_data_idx(&ds, p.ti, p.tl, p.vi, p.vl, err, sizeof err))
        fail_msg("%s", err);
    assert_string_equal(ds.name, "idx");
    assert_int_equal(ds.sample_size, 12);
    assert_int_equal(ds.classes, 10);
    assert_int_equal(ds.ntrain, 7);
    assert_int_equal(ds.nval, 3);
    float x[3 * 12], y[3];
    int64_t tr[3] = {6, 0, 3};
    ds.fill(&ds, RT_SPLIT_TRAIN, tr, 3, x, y);
    check_sample(x, y[0], 0, 6);
    check_sample(x + 12, y[1], 0, 0);
    check_sample(x + 24, y[2], 0, 3);
    int64_t va[3] = {2, 1, 0};
    ds.fill(&ds, RT_SPLIT_VAL, va, 3, x, y);
    check_sample(x, y[0], 1, 2);
    check_sample(x + 12, y[1], 1, 1);
    check_sample(x + 24, y[2], 1, 0);
    /* the raw form (data.h's fill_raw): the bytes and labels, which ds.norm
     * (x/255, the devices' ingest) makes fill's floats bit for bit */
    assert_non_null(ds.fill_raw);
    uint8_t raw[3 * 12];
    float ry[3], back[3 * 12];
    ds.fill_raw(&ds, RT_SPLIT_VAL, va, 3, raw, ry);
    for (int j = 0; j < 3; j++)
        for (int e = 0; e < 12; e++)
            assert_int_equal(raw[j * 12 + e], pix(1, 2 - j, e));
    assert_memory_equal(ry, y, sizeof y);
    rt_ingest_floats(&ds.norm, raw, 3, 12, back);
    assert_memory_equal(back, x, sizeof x);
    rt_data_free(&ds);
}

static void test_idx_good_plain(void **state)
{
    (void)state;
    check_good(false);
}

static void test_idx_good_gzip(void **state)
{
    (void)state;
    check_good(true);
}

/* pixels 0 and 255 map to exactly 0 and 1 */
static void test_idx_range(void **state)
{
    (void)state;
    uint32_t dims[3] = {2, 1, 2};
    size_t len;
    unsigned char *b = idx_bytes(RT_IDX_MAGIC_IMAGES, 3, dims, &len);
    memcpy(b + 16, "\x00\xff\x80\x01", 4);
    const char *ti = write_bytes("r_ti", b, len, false);
    free(b);
    const char *tl = write_labels("r_tl", 0, 2, false);
    const char *vi = write_images("r_vi", 1, 1, 1, 2, false);
    const char *vl = write_labels("r_vl", 1, 1, false);
    RtDataset ds;
    char err[512];
    assert_true(rt_data_idx(&ds, ti, tl, vi, vl, err, sizeof err));
    float x[4], y[2];
    int64_t tr[2] = {0, 1};
    ds.fill(&ds, RT_SPLIT_TRAIN, tr, 2, x, y);
    assert_float_equal(x[0], 0.0f, 0);
    assert_float_equal(x[1], 1.0f, 0);
    assert_float_equal(x[2], 128.0f / 255.0f, 0);
    assert_float_equal(x[3], 1.0f / 255.0f, 0);
    rt_data_free(&ds);
}

/* Expects rt_data_idx to fail with a message containing each of the
 * NULL-ended strings. */
static void expect_error(const char *ti, const char *tl, const char *vi, const char *vl, ...)
{
    RtDataset ds;
    char err[512];
    if (rt_data_idx(&ds, ti, tl, vi, vl, err, sizeof err)) {
        rt_data_free(&ds);
        fail_msg("no error");
    }
    va_list ap;
    va_start(ap, vl);
    for (const char *s; (s = va_arg(ap, const char *));)
        if (!strstr(err, s))
            fail_msg("message '%s' lacks '%s'", err, s);
    va_end(ap);
    assert_null(ds.x);
    assert_null(ds.y);
}

static void test_idx_missing(void **state)
{
    (void)state;
    Paths p = write_set(false);
    const char *none = path_of("no-such-file");
    expect_error(p.ti, p.tl, none, p.vl, "cannot open", none, "No such file", NULL);
}

static void test_idx_bad_magic(void **state)
{
    (void)state;
    Paths p = write_set(false);
    uint32_t dims[3] = {7, 3, 4};
    size_t len;
    unsigned char *b = idx_bytes(0x12345678u, 3, dims, &len);
    memset(b + 16, 0, len - 16);
    const char *bad = write_bytes("bad_magic", b, len, false);
    expect_error(bad, p.tl, p.vi, p.vl, bad, "offset 0", "bad magic 0x12345678",
                 "0x00000803", NULL);
    /* a label file where images belong: right type, wrong rank */
    expect_error(p.tl, p.tl, p.vi, p.vl, p.tl, "offset 3", "wrong dimensions", "0x00000801",
                 NULL);
    /* an image file where labels belong */
    expect_error(p.ti, p.tl, p.vi, p.ti, p.ti, "offset 3", "wrong dimensions: 3, expected 1",
                 NULL);
    /* element type float (0x0d) */
    put32(b, 0x00000d03u);
    bad = write_bytes("float_type", b, len, true);
    expect_error(bad, p.tl, p.vi, p.vl, bad, "offset 0", "bad magic 0x00000d03", NULL);
    free(b);
}

static void test_idx_zero_dim(void **state)
{
    (void)state;
    Paths p = write_set(false);
    uint32_t dims[3] = {7, 0, 4};
    size_t len;
    unsigned char *b = idx_bytes(RT_IDX_MAGIC_IMAGES, 3, dims, &len);
    const char *bad = write_bytes("zero_dim", b, len, false);
    free(b);
    expect_error(bad, p.tl, p.vi, p.vl, bad, "offset 8", "dimension 1 is 0", NULL);
}

static void test_idx_counts_disagree(void **state)
{
    (void)state;
    Paths p = write_set(true);
    const char *tl6 = write_labels("tl6", 0, 6, true);
    expect_error(p.ti, tl6, p.vi, p.vl, p.ti, tl6, "7 images", "6 labels", "offset 4", NULL);
}

static void test_idx_sizes_disagree(void **state)
{
    (void)state;
    Paths p = write_set(false);
    const char *vi = write_images("vi_4x3", 1, 3, 4, 3, false);
    expect_error(p.ti, p.tl, vi, p.vl, vi, "offset 8", "wrong dimensions", "4x3", "3x4", NULL);
}

static void test_idx_label_range(void **state)
{
    (void)state;
    Paths p = write_set(false);
    uint32_t n = 3;
    size_t len;
    unsigned char *b = idx_bytes(RT_IDX_MAGIC_LABELS, 1, &n, &len);
    memcpy(b + 8, "\x01\x00\x0a", 3); /* label 10 at item 2, offset 10 */
    const char *bad = write_bytes("vl_range", b, len, true);
    free(b);
    expect_error(p.ti, p.tl, p.vi, bad, bad, "offset 10", "label 10 of item 2",
                 "outside 0..9", NULL);
    /* with 3 classes, the training labels (r*3 % 10) go out of range at item 1 */
    RtDataset ds;
    char err[512];
    assert_false(rt_data_idx_classes(&ds, p.ti, p.tl, p.vi, p.vl, 3, err, sizeof err));
    assert_non_null(strstr(err, p.tl));
    assert_non_null(strstr(err, "offset 9: label 3 of item 1 is outside 0..2"));
    /* classes is carried into the data set */
    assert_true(rt_data_idx_classes(&ds, p.ti, p.tl, p.vi, p.vl, 12, err, sizeof err));
    assert_int_equal(ds.classes, 12);
    rt_data_free(&ds);
    assert_false(rt_data_idx_classes(&ds, p.ti, p.tl, p.vi, p.vl, 0, err, sizeof err));
    assert_non_null(strstr(err, "classes"));
}

static void test_idx_truncated(void **state)
{
    (void)state;
    Paths p = write_set(false);
    uint32_t dims[3] = {7, 3, 4};
    size_t len;
    unsigned char *b = idx_bytes(RT_IDX_MAGIC_IMAGES, 3, dims, &len);
    memset(b + 16, 1, len - 16);
    /* the body cut after 50 of 84 bytes: the file ends at offset 66 */
    const char *cut = write_bytes("cut_body", b, 66, false);
    expect_error(cut, p.tl, p.vi, p.vl, cut, "truncated at byte offset 66",
                 "34 bytes missing from the images (which start at offset 16)", NULL);
    /* the same, gzipped: a clean gzip stream that ends early */
    cut = write_bytes("cut_body.gz", b, 66, true);
    expect_error(cut, p.tl, p.vi, p.vl, cut, "truncated at byte offset 66", NULL);
    /* cut inside the dimensions */
    cut = write_bytes("cut_dims", b, 10, false);
    expect_error(cut, p.tl, p.vi, p.vl, cut, "truncated at byte offset 10",
                 "6 bytes missing from the dimensions (which start at offset 4)", NULL);
    /* an empty file */
    cut = write_bytes("empty", b, 0, false);
    expect_error(cut, p.tl, p.vi, p.vl, cut, "truncated at byte offset 0",
                 "4 bytes missing from the magic number", NULL);
    free(b);
}

/* A gzip file cut short in the compressed stream. */
static void test_idx_truncated_gzip(void **state)
{
    (void)state;
    Paths p = write_set(false);
    uint32_t dims[3] = {100, 20, 20};
    size_t len;
    unsigned char *b = idx_bytes(RT_IDX_MAGIC_IMAGES, 3, dims, &len);
    for (size_t i = 16; i < len; i++)
        b[i] = (unsigned char)(i * 2654435761u >> 13); /* incompressible */
    const char *full = write_bytes("big.gz", b, len, true);
    free(b);
    FILE *f = fopen(full, "rb");
    assert_non_null(f);
    unsigned char *z = malloc(len * 2);
    size_t zn = fread(z, 1, len * 2, f);
    fclose(f);
    assert_true(zn > 1000);
    const char *cut = write_bytes("big_cut.gz", z, zn / 2, false);
    free(z);
    /* headers are checked against each other first: give it a matching set */
    const char *tl = write_labels("tl100", 0, 100, false);
    const char *vi = write_images("vi20", 1, 3, 20, 20, false);
    expect_error(cut, tl, vi, p.vl, cut, "corrupt or truncated gzip data at byte",
                 "while reading the images at offset 16", "unexpected end of file", NULL);
}

/* Bytes after the last element. */
static void test_idx_trailing(void **state)
{
    (void)state;
    Paths p = write_set(false);
    uint32_t n = 7;
    size_t len;
    unsigned char *b = idx_bytes(RT_IDX_MAGIC_LABELS, 1, &n, &len);
    memset(b + 8, 0, 8);
    const char *bad = write_bytes("trailing", b, len + 1, false);
    free(b);
    expect_error(p.ti, bad, p.vi, p.vl, bad, "offset 15: data after the last element", NULL);
}

/* fashion_mnist on generated files: plain and .gz found, 28x28 required */
static void test_fashion_generated(void **state)
{
    (void)state;
    char sub[128];
    snprintf(sub, sizeof sub, "%s/fm", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    RtDataset ds;
    char err[1024];
    assert_false(rt_data_fashion_mnist(&ds, sub, err, sizeof err));
    assert_non_null(strstr(err, "cannot open"));
    assert_non_null(strstr(err, "fm/train-images-idx3-ubyte.gz"));
    assert_non_null(strstr(err, "nor"));
    assert_non_null(strstr(err, "No such file"));
    write_images("fm/train-images-idx3-ubyte", 0, 5, 28, 28, false); /* plain */
    write_labels("fm/train-labels-idx1-ubyte.gz", 0, 5, true);
    write_images("fm/t10k-images-idx3-ubyte.gz", 1, 2, 28, 28, true);
    assert_false(rt_data_fashion_mnist(&ds, sub, err, sizeof err));
    assert_non_null(strstr(err, "fm/t10k-labels-idx1-ubyte.gz"));
    write_labels("fm/t10k-labels-idx1-ubyte.gz", 1, 2, true);
    if (!rt_data_fashion_mnist(&ds, sub, err, sizeof err))
        fail_msg("%s", err);
    assert_string_equal(ds.name, "fashion_mnist");
    assert_int_equal(ds.sample_size, 784);
    assert_int_equal(ds.ntrain, 5);
    assert_int_equal(ds.nval, 2);
    float x[784], y[1];
    int64_t k = 1;
    ds.fill(&ds, RT_SPLIT_VAL, &k, 1, x, y);
    assert_float_equal(x[783], (float)pix(1, 1, 783) / 255.0f, 0);
    assert_float_equal(y[0], (float)lab(1, 1), 0);
    rt_data_free(&ds);
    /* 28x27 test images */
    const char *bad = write_images("fm/t10k-images-idx3-ubyte", 1, 2, 28, 27, false);
    assert_false(rt_data_fashion_mnist(&ds, sub, err, sizeof err));
    assert_non_null(strstr(err, bad));
    assert_non_null(strstr(err, "offset 8: wrong dimensions: images are 28x27, Fashion-MNIST's "
                                "are 28x28"));
}

/* The real files.  Expected values were read from the files themselves:
 *   python3 -c "import gzip; d=gzip.open('train-labels-idx1-ubyte.gz').read();
 *               print(list(d[8:28]))"
 * (and the same for t10k-labels; pixel sums as sum(d[16:16+784]) of the
 * image files), cross-checked with `zcat ... | od -A d -t u1 -j 8 -N 20`. */
static void test_fashion_real(void **state)
{
    (void)state;
    const char *d = getenv("AMPC_FASHION_DIR");
    if (!d || !*d)
        d = RT_FASHION_MNIST_DIR;
    bool require = getenv("AMPC_REQUIRE_FASHION") && strcmp(getenv("AMPC_REQUIRE_FASHION"), "1") == 0;
    char probe[512];
    snprintf(probe, sizeof probe, "%s/train-images-idx3-ubyte.gz", d);
    if (access(probe, R_OK) != 0) {
        snprintf(probe, sizeof probe, "%s/train-images-idx3-ubyte", d);
        if (access(probe, R_OK) != 0) {
            if (require)
                fail_msg("AMPC_REQUIRE_FASHION=1 but the Fashion-MNIST files are not in %s "
                         "(apt-get install dataset-fashion-mnist, or set AMPC_FASHION_DIR)", d);
            print_message("Fashion-MNIST is not installed in %s: the real-data test is SKIPPED "
                          "(apt-get install dataset-fashion-mnist; AMPC_REQUIRE_FASHION=1 makes "
                          "this a failure)\n", d);
            skip();
        }
    }
    RtDataset ds;
    char err[1024];
    if (!rt_data_fashion_mnist(&ds, d, err, sizeof err))
        fail_msg("%s", err);
    assert_string_equal(ds.name, "fashion_mnist");
    assert_int_equal(ds.ntrain, 60000);
    assert_int_equal(ds.nval, 10000);
    assert_int_equal(ds.sample_size, 784);
    assert_int_equal(ds.classes, 10);
    static const int train_first[20] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5, 0, 9, 5, 5, 7, 9, 1, 0, 6, 4};
    static const int test_first[20] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7, 4, 5, 7, 3, 4, 1, 2, 4, 8, 0};
    static const int train_last[5] = {5, 1, 3, 0, 5}, test_last[5] = {9, 1, 8, 1, 5};
    int64_t idx[20];
    float *x = malloc(20 * 784 * sizeof *x), y[20];
    for (int i = 0; i < 20; i++)
        idx[i] = i;
    ds.fill(&ds, RT_SPLIT_TRAIN, idx, 20, x, y);
    for (int i = 0; i < 20; i++)
        assert_int_equal((int)y[i], train_first[i]);
    double sum = 0;
    for (int e = 0; e < 784; e++) {
        assert_true(x[e] >= 0 && x[e] <= 1);
        sum += x[e] * 255.0;
    }
    assert_float_equal(sum, 76247, 0.01); /* the first training image's pixel sum */
    /* pixels 400..409 of the first training image: 0 0 0 0 237 226 217 223 222 219 */
    assert_float_equal(x[404], 237.0f / 255.0f, 0);
    assert_float_equal(x[409], 219.0f / 255.0f, 0);
    ds.fill(&ds, RT_SPLIT_VAL, idx, 20, x, y);
    for (int i = 0; i < 20; i++)
        assert_int_equal((int)y[i], test_first[i]);
    sum = 0;
    for (int e = 0; e < 784; e++)
        sum += x[e] * 255.0;
    assert_float_equal(sum, 33456, 0.01);
    for (int i = 0; i < 5; i++) {
        idx[i] = 60000 - 5 + i;
        idx[5 + i] = 10000 - 5 + i;
    }
    ds.fill(&ds, RT_SPLIT_TRAIN, idx, 5, x, y);
    for (int i = 0; i < 5; i++)
        assert_int_equal((int)y[i], train_last[i]);
    ds.fill(&ds, RT_SPLIT_VAL, idx + 5, 5, x, y);
    for (int i = 0; i < 5; i++)
        assert_int_equal((int)y[i], test_last[i]);
    /* every class has 6,000 training images */
    int count[10] = {0};
    for (int64_t k = 0; k < ds.ntrain; k++)
        count[(int)ds.y[k]]++;
    for (int c = 0; c < 10; c++)
        assert_int_equal(count[c], 6000);
    free(x);
    rt_data_free(&ds);
}

/* A FIFO (no writer: the open must not block), a device, and a gzip file
 * with bytes after its stream (zlib alone ignores them) are refused with
 * the file and the byte offset. */
static void test_idx_hostile(void **state)
{
    (void)state;
    Paths p = write_set(true);
    const char *fifo = path_of("fifo-labels");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    alarm(20); /* a hang fails the test instead of stalling it */
    expect_error(p.ti, fifo, p.vi, p.vl, fifo, "not a regular file (a FIFO)", NULL);
    expect_error(p.ti, p.tl, "/dev/zero", p.vl, "/dev/zero: not a regular file (a character device)", NULL);
    alarm(0);
    /* the test labels, gzipped, then "junk" */
    FILE *f = fopen(p.vl, "rb");
    unsigned char b[4096];
    size_t n = fread(b, 1, sizeof b - 4, f);
    fclose(f);
    memcpy(b + n, "junk", 4);
    const char *bad = write_bytes("vl_trailing.gz", b, n + 4, false);
    char want[120];
    snprintf(want, sizeof want, "trailing data at byte %zu after the end of the gzip stream", n);
    expect_error(p.ti, p.tl, p.vi, bad, bad, want, NULL);
    /* two gzip members are one valid file */
    memcpy(b + n, b, n);
    const char *two = write_bytes("vl_two.gz", b, 2 * n, false);
    RtDataset ds;
    char err[512];
    /* the second member adds bytes after the last element */
    assert_false(rt_data_idx(&ds, p.ti, p.tl, p.vi, two, err, sizeof err));
    assert_non_null(strstr(err, "data after the last element"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx_good_plain),
        cmocka_unit_test(test_idx_good_gzip),
        cmocka_unit_test(test_idx_range),
        cmocka_unit_test(test_idx_missing),
        cmocka_unit_test(test_idx_bad_magic),
        cmocka_unit_test(test_idx_zero_dim),
        cmocka_unit_test(test_idx_counts_disagree),
        cmocka_unit_test(test_idx_sizes_disagree),
        cmocka_unit_test(test_idx_label_range),
        cmocka_unit_test(test_idx_truncated),
        cmocka_unit_test(test_idx_truncated_gzip),
        cmocka_unit_test(test_idx_hostile),
        cmocka_unit_test(test_idx_trailing),
        cmocka_unit_test(test_fashion_generated),
        cmocka_unit_test(test_fashion_real),
    };
    return cmocka_run_group_tests_name("data_idx", tests, setup, teardown);
}
