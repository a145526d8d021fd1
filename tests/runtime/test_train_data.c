/*
 * test_train_data.c - the data sources: the digits reader (runtime/data/
 * digits.c) on small generated .csv.gz files, good and broken, and the
 * synthetic source's determinism.
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
#include "train.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ampc_test_data_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *path_of(const char *name)
{
    static char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

/* Writes text gzipped to dir/name; returns the path. */
static const char *write_gz(const char *name, const char *text)
{
    const char *p = path_of(name);
    gzFile f = gzopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, text, (unsigned)strlen(text)), (int)strlen(text));
    assert_int_equal(gzclose(f), Z_OK);
    return p;
}

/* n rows: row r has pixel c = (r + c) % 17 and label r % 10 */
static char *rows_text(int n, const char *header, const char *eol)
{
    size_t cap = (size_t)n * 65 * 4 + 256;
    char *s = malloc(cap), *q = s;
    q += sprintf(q, "%s", header);
    for (int r = 0; r < n; r++) {
        for (int c = 0; c < 64; c++)
            q += sprintf(q, "%d,", (r + c) % 17);
        q += sprintf(q, "%d%s", r % 10, eol);
    }
    return s;
}

static void check_row(const float *x, float y, int r)
{
    for (int c = 0; c < 64; c++)
        assert_float_equal(x[c], ((r + c) % 17) / 16.0f, 0);
    assert_float_equal(y, (float)(r % 10), 0);
}

static void test_digits_good(void **state)
{
    (void)state;
    char *text = rows_text(13, "", "\n");
    const char *p = write_gz("good.csv.gz", text);
    free(text);
    RtDataset ds;
    char err[512];
    assert_true(rt_data_digits(&ds, p, err, sizeof err));
    assert_string_equal(ds.name, "digits");
    assert_int_equal(ds.sample_size, 64);
    assert_int_equal(ds.classes, 10);
    /* every sixth row (5, 11) is validation */
    assert_int_equal(ds.nval, 2);
    assert_int_equal(ds.ntrain, 11);
    float x[3 * 64], y[3];
    int64_t tr[3] = {0, 5, 10}; /* rows 0, 6, 12 */
    ds.fill(&ds, RT_SPLIT_TRAIN, tr, 3, x, y);
    check_row(x, y[0], 0);
    check_row(x + 64, y[1], 6);
    check_row(x + 128, y[2], 12);
    int64_t tr2[2] = {4, 9}; /* rows 4, 10 */
    ds.fill(&ds, RT_SPLIT_TRAIN, tr2, 2, x, y);
    check_row(x, y[0], 4);
    check_row(x + 64, y[1], 10);
    int64_t va[2] = {1, 0}; /* rows 11, 5 */
    ds.fill(&ds, RT_SPLIT_VAL, va, 2, x, y);
    check_row(x, y[0], 11);
    check_row(x + 64, y[1], 5);
    /* pixel 16 -> 1, 8 -> 0.5 (row 0: pixel c = c % 17) */
    ds.fill(&ds, RT_SPLIT_TRAIN, tr, 1, x, y);
    assert_float_equal(x[16], 1.0f, 0);
    assert_float_equal(x[8], 0.5f, 0);
    rt_data_free(&ds);
}

static void test_digits_variants(void **state)
{
    (void)state;
    /* a header, CRLF line ends, floats, blank lines */
    char *text = rows_text(6, "p0,p1,...,label\r\n", "\r\n\n");
    const char *p = write_gz("variants.csv.gz", text);
    free(text);
    RtDataset ds;
    char err[512];
    assert_true(rt_data_digits(&ds, p, err, sizeof err));
    assert_int_equal(ds.ntrain + ds.nval, 6);
    assert_int_equal(ds.nval, 1);
    rt_data_free(&ds);
    static char line[8192];
    char *q = line;
    for (int r = 0; r < 6; r++) {
        for (int c = 0; c < 64; c++)
            q += sprintf(q, "%s.0, ", c == 3 ? "16" : "0");
        q += sprintf(q, "%d.0\n", r);
    }
    (void)q;
    p = write_gz("floats.csv.gz", line);
    assert_true(rt_data_digits(&ds, p, err, sizeof err));
    float x[64], y;
    int64_t i = 2;
    ds.fill(&ds, RT_SPLIT_TRAIN, &i, 1, x, &y);
    assert_float_equal(x[3], 1.0f, 0);
    assert_float_equal(x[4], 0.0f, 0);
    assert_float_equal(y, 2.0f, 0);
    rt_data_free(&ds);
}

/* The raw form (data.h's fill_raw): the pixels as bytes in fill's rows,
 * the labels, and rt_ingest_floats over the bytes gives fill's floats bit
 * for bit; a file with a pixel that is no byte / 16 has no raw form (the
 * loop then copies floats), and its fill is as before. */
static void test_digits_raw(void **state)
{
    (void)state;
    char *text = rows_text(13, "", "\n");
    const char *p = write_gz("raw.csv.gz", text);
    free(text);
    RtDataset ds;
    char err[512];
    assert_true(rt_data_digits(&ds, p, err, sizeof err));
    assert_non_null(ds.fill_raw);
    assert_int_equal(ds.norm.channels, 1);
    float x[3 * 64], y[3], ry[3], back[3 * 64];
    uint8_t raw[3 * 64];
    int64_t tr[3] = {0, 5, 10}, va[2] = {1, 0}; /* rows 0, 6, 12; rows 11, 5 */
    for (int split = 0; split < 2; split++) {
        RtSplit sp = split ? RT_SPLIT_VAL : RT_SPLIT_TRAIN;
        int n = split ? 2 : 3;
        ds.fill(&ds, sp, split ? va : tr, n, x, y);
        ds.fill_raw(&ds, sp, split ? va : tr, n, raw, ry);
        static const int rows[2][3] = {{0, 6, 12}, {11, 5, 0}};
        for (int j = 0; j < n; j++)
            for (int c = 0; c < 64; c++)
                assert_int_equal(raw[j * 64 + c], (rows[split][j] + c) % 17);
        assert_memory_equal(ry, y, (size_t)n * sizeof *y);
        rt_ingest_floats(&ds.norm, raw, n, 64, back);
        assert_memory_equal(back, x, (size_t)n * 64 * sizeof *x);
    }
    rt_data_free(&ds);
    static char line[8192];
    char *q = line;
    for (int r = 0; r < 6; r++) {
        for (int c = 0; c < 64; c++)
            q += sprintf(q, "%s,", c == 3 ? "2.5" : "1");
        q += sprintf(q, "%d\n", r);
    }
    p = write_gz("half.csv.gz", line);
    assert_true(rt_data_digits(&ds, p, err, sizeof err));
    assert_null(ds.fill_raw);
    int64_t i = 0;
    ds.fill(&ds, RT_SPLIT_TRAIN, &i, 1, x, y);
    assert_float_equal(x[3], 2.5f / 16.0f, 0);
    assert_float_equal(x[4], 1.0f / 16.0f, 0);
    rt_data_free(&ds);
}

/* a file whose row `bad` (0-based, of 8) is replaced by `row` fails with a
 * message naming the file, the line and `what` */
static void check_bad_row(const char *row, const char *what)
{
    char *text = rows_text(8, "", "\n");
    /* cut after row 2 and append the bad row, then the good rows 3.. */
    char *third = text;
    for (int k = 0; k < 3; k++)
        third = strchr(third, '\n') + 1;
    size_t head = (size_t)(third - text);
    char *s = malloc(strlen(text) + strlen(row) + 4);
    memcpy(s, text, head);
    sprintf(s + head, "%s\n%s", row, third);
    const char *p = write_gz("bad.csv.gz", s);
    free(s);
    free(text);
    RtDataset ds;
    char err[512], expect[300];
    assert_false(rt_data_digits(&ds, p, err, sizeof err));
    snprintf(expect, sizeof expect, "%s:4: ", p);
    if (!strstr(err, expect) || !strstr(err, what))
        fail_msg("expected '%s' and '%s' in: %s", expect, what, err);
    assert_null(ds.x);
}

static void test_digits_bad_rows(void **state)
{
    (void)state;
    char row[1024];
    strcpy(row, "1,2,3");
    check_bad_row(row, "expected 65 comma-separated values (64 pixels and a label), found 3");
    char *q = row;
    for (int c = 0; c < 64; c++)
        q += sprintf(q, "%d,", c == 7 ? 17 : 0);
    sprintf(q, "3");
    check_bad_row(row, "column 8: pixel value 17 outside 0..16");
    q = row;
    for (int c = 0; c < 64; c++)
        q += sprintf(q, "0,");
    sprintf(q, "10");
    check_bad_row(row, "column 65: label 10 is not an integer 0..9");
    sprintf(q, "2.5");
    check_bad_row(row, "label 2.5");
    sprintf(q, "3,4");
    check_bad_row(row, "found 66");
    sprintf(q, "x");
    check_bad_row(row, "column 65: expected a number");
    sprintf(q, "3;");
    check_bad_row(row, "unexpected character ';'");
}

static void test_digits_missing_and_short(void **state)
{
    (void)state;
    RtDataset ds;
    char err[512];
    const char *p = path_of("nonexistent.csv.gz");
    assert_false(rt_data_digits(&ds, p, err, sizeof err));
    assert_non_null(strstr(err, p));
    assert_non_null(strstr(err, "No such file"));
    char *text = rows_text(5, "", "\n");
    p = write_gz("short.csv.gz", text);
    free(text);
    assert_false(rt_data_digits(&ds, p, err, sizeof err));
    assert_non_null(strstr(err, "5 data rows; need at least 6"));
    p = write_gz("empty.csv.gz", "");
    assert_false(rt_data_digits(&ds, p, err, sizeof err));
    assert_non_null(strstr(err, "0 data rows"));
    /* not gzip at all: zlib reads it as plain text, so the parser reports */
    p = path_of("plain.csv.gz");
    FILE *f = fopen(p, "wb");
    fputs("hello world\nnot,a,digits,file\n", f);
    fclose(f);
    assert_false(rt_data_digits(&ds, p, err, sizeof err));
    assert_non_null(strstr(err, ":2: "));
}

/* the bytes of a gzip file of 300 rows */
static unsigned char *gz_bytes(size_t *n)
{
    char *text = rows_text(300, "", "\n");
    const char *p = write_gz("big.csv.gz", text);
    free(text);
    FILE *f = fopen(p, "rb");
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    unsigned char *b = malloc(*n);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void write_bytes(const char *p, const unsigned char *b, size_t n)
{
    FILE *f = fopen(p, "wb");
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

static void test_digits_truncated(void **state)
{
    (void)state;
    size_t n;
    unsigned char *b = gz_bytes(&n);
    RtDataset ds;
    char err[512];
    /* the whole file reads */
    const char *p = path_of("whole.csv.gz");
    write_bytes(p, b, n);
    assert_true(rt_data_digits(&ds, p, err, sizeof err));
    assert_int_equal(ds.ntrain + ds.nval, 300);
    rt_data_free(&ds);
    /* cut in the middle, and just before the trailer */
    size_t cuts[3] = {n / 2, n - 4, n - 9};
    for (int k = 0; k < 3; k++) {
        p = path_of("cut.csv.gz");
        write_bytes(p, b, cuts[k]);
        if (rt_data_digits(&ds, p, err, sizeof err))
            fail_msg("a file cut at %zu of %zu bytes was accepted", cuts[k], n);
        assert_non_null(strstr(err, p));
        if (!strstr(err, "corrupt or truncated gzip data"))
            fail_msg("cut at %zu: %s", cuts[k], err);
    }
    free(b);
}

static void test_digits_corrupt(void **state)
{
    (void)state;
    size_t n;
    unsigned char *b = gz_bytes(&n);
    RtDataset ds;
    char err[512];
    const char *p = path_of("corrupt.csv.gz");
    /* a flipped byte in the deflate stream, and one in the CRC */
    size_t at[2] = {n / 2, n - 6};
    for (int k = 0; k < 2; k++) {
        unsigned char *c = malloc(n);
        memcpy(c, b, n);
        c[at[k]] ^= 0x5a;
        write_bytes(p, c, n);
        free(c);
        if (rt_data_digits(&ds, p, err, sizeof err))
            fail_msg("a file with byte %zu of %zu flipped was accepted", at[k], n);
        assert_non_null(strstr(err, p));
    }
    free(b);
}

static void test_synthetic(void **state)
{
    (void)state;
    RtDataset a, b;
    rt_data_synthetic(&a, 12, 5, 1, 100, 10);
    rt_data_synthetic(&b, 12, 5, 2, 100, 10);
    assert_int_equal(a.ntrain, 100);
    assert_int_equal(a.nval, 10);
    assert_int_equal(a.classes, 5);
    float x1[4 * 12], y1[4], x2[4 * 12], y2[4];
    int64_t idx[4] = {0, 1, 2, 99}, rev[4] = {99, 2, 1, 0};
    a.fill(&a, RT_SPLIT_TRAIN, idx, 4, x1, y1);
    a.fill(&a, RT_SPLIT_TRAIN, idx, 4, x2, y2);
    assert_memory_equal(x1, x2, sizeof x1);
    assert_memory_equal(y1, y2, sizeof y1);
    /* a sample does not depend on where in the batch it is */
    a.fill(&a, RT_SPLIT_TRAIN, rev, 4, x2, y2);
    for (int j = 0; j < 4; j++) {
        assert_memory_equal(x1 + 12 * j, x2 + 12 * (3 - j), 12 * sizeof(float));
        assert_float_equal(y1[j], y2[3 - j], 0);
    }
    /* values in [-1, 1), labels integers in [0, classes) */
    for (int i = 0; i < 48; i++)
        assert_true(x1[i] >= -1 && x1[i] < 1);
    int64_t all[100];
    float xs[100 * 12], ys[100];
    int hist[5] = {0};
    for (int i = 0; i < 100; i++)
        all[i] = i;
    a.fill(&a, RT_SPLIT_TRAIN, all, 100, xs, ys);
    for (int i = 0; i < 100; i++) {
        assert_true(ys[i] == (float)(int)ys[i] && ys[i] >= 0 && ys[i] < 5);
        hist[(int)ys[i]]++;
    }
    for (int c = 0; c < 5; c++)
        assert_in_range(hist[c], 5, 40);
    /* another seed, or the other split, gives other data */
    b.fill(&b, RT_SPLIT_TRAIN, idx, 4, x2, y2);
    assert_memory_not_equal(x1, x2, sizeof x1);
    a.fill(&a, RT_SPLIT_VAL, idx, 4, x2, y2);
    assert_memory_not_equal(x1, x2, sizeof x1);
    rt_data_free(&a); /* nothing to free; must be harmless */
}

/* The real Fashion-MNIST files (Debian's dataset-fashion-mnist), read as
 * the driver reads them: 60,000 + 10,000 images of [1, 28, 28], pixels x/255,
 * and the first labels of both files (train 9 0 0 3 0 2 7 2 5 5, test 9 2 1
 * 1 6 1 4 6 5 7).  Skipped (said so) when the files are missing, failed
 * when AMPC_REQUIRE_FASHION=1. */
static void test_fashion_real_files(void **state)
{
    (void)state;
    const char *dirs[3] = {NULL, RT_FASHION_MNIST_DIR, NULL};
    char dd[4200];
    const char *env = getenv("AMPC_DATA_DIR");
    if (env && *env) {
        snprintf(dd, sizeof dd, "%s/fashion-mnist", env);
        dirs[0] = dd;
    }
    const char *dir = NULL;
    for (int k = 0; k < 2 && !dir; k++) {
        char p[4300];
        if (!dirs[k])
            continue;
        snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dirs[k]);
        if (access(p, R_OK) == 0)
            dir = dirs[k];
        snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dirs[k]);
        if (access(p, R_OK) == 0)
            dir = dirs[k];
    }
    const char *req = getenv("AMPC_REQUIRE_FASHION");
    if (!dir) {
        if (req && strcmp(req, "1") == 0)
            fail_msg("Fashion-MNIST not found in %s (AMPC_REQUIRE_FASHION=1)", RT_FASHION_MNIST_DIR);
        printf("test_fashion_real_files: skipped: no Fashion-MNIST in %s "
               "(apt-get install dataset-fashion-mnist)\n", RT_FASHION_MNIST_DIR);
        skip();
    }
    RtDataset ds;
    char err[1024];
    if (!rt_data_fashion_mnist(&ds, dir, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(ds.ntrain, 60000);
    assert_int_equal(ds.nval, 10000);
    assert_int_equal(ds.sample_size, 784);
    assert_int_equal(ds.classes, 10);
    static const int train0[10] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
    static const int test0[10] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
    int64_t idx[10];
    float x[10 * 784], y[10];
    for (int k = 0; k < 10; k++)
        idx[k] = k;
    ds.fill(&ds, RT_SPLIT_TRAIN, idx, 10, x, y);
    double sum = 0;
    for (int k = 0; k < 10; k++)
        assert_int_equal((int)y[k], train0[k]);
    for (int e = 0; e < 784; e++) {
        assert_true(x[e] >= 0 && x[e] <= 1);
        sum += x[e];
    }
    assert_float_equal(sum, 76247.0 / 255, 1e-3); /* the first image's pixel sum */
    ds.fill(&ds, RT_SPLIT_VAL, idx, 10, x, y);
    for (int k = 0; k < 10; k++)
        assert_int_equal((int)y[k], test0[k]);
    sum = 0;
    for (int e = 0; e < 784; e++)
        sum += x[e];
    assert_float_equal(sum, 33456.0 / 255, 1e-3);
    rt_data_free(&ds);
}

/* ---- hostile files ------------------------------------------------------------- */

/* Expects rt_data_digits(p) to fail naming p, with want in the message. */
static void expect_digits_error(const char *p, const char *want)
{
    RtDataset ds;
    char err[512];
    alarm(20); /* a hang fails the test instead of stalling it */
    bool ok = rt_data_digits(&ds, p, err, sizeof err);
    alarm(0);
    if (ok) {
        rt_data_free(&ds);
        fail_msg("%s: accepted (expected '%s')", p, want);
    }
    if (!strstr(err, p) || !strstr(err, want))
        fail_msg("expected '%s' and '%s' in: %s", p, want, err);
    assert_null(ds.x);
}

/* gzip with bytes after the stream (zlib alone ignores them), a NUL inside
 * a row, numbers strtod takes but the CSV must not have (hex, inf, nan), a
 * FIFO, a device and a gzip bomb: each an error with its location. */
static void test_digits_hostile(void **state)
{
    (void)state;
    size_t n;
    unsigned char *b = gz_bytes(&n);
    /* trailing garbage after a good stream */
    unsigned char *g = malloc(n + 5);
    memcpy(g, b, n);
    memcpy(g + n, "junk\n", 5);
    const char *p = path_of("trailing.csv.gz");
    write_bytes(p, g, n + 5);
    char want[400];
    snprintf(want, sizeof want, "trailing data at byte %zu after the end of the gzip stream", n);
    expect_digits_error(p, want);
    free(g);
    /* two whole members are one valid gzip file */
    g = malloc(2 * n);
    memcpy(g, b, n);
    memcpy(g + n, b, n);
    p = path_of("two.csv.gz");
    write_bytes(p, g, 2 * n);
    RtDataset ds;
    char err[512];
    if (!rt_data_digits(&ds, p, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(ds.ntrain + ds.nval, 600);
    rt_data_free(&ds);
    free(g);
    free(b);
    /* a NUL in the middle of row 3 (line 3) */
    char *text = rows_text(20, "", "\n");
    char *third = strchr(strchr(text, '\n') + 1, '\n') + 1;
    size_t len = strlen(text);
    third[4] = 0;
    p = path_of("nul.csv.gz");
    gzFile f = gzopen(p, "wb");
    assert_int_equal(gzwrite(f, text, (unsigned)len), (int)len);
    gzclose(f);
    snprintf(want, sizeof want, "%s:3: column 5: a NUL byte (decompressed offset %zu)", p,
             (size_t)(third - text) + 4);
    expect_digits_error(p, want);
    free(text);
    /* hex, inf, nan as values */
    static const char *const bad[][2] = {{"0x10", "found '0x10'"}, {"inf", "found 'inf'"},
                                         {"nan", "found 'nan'"},   {"1e", "found '1e'"},
                                         {"0x1p3", "found '0x1p3'"}};
    for (int k = 0; k < 5; k++) {
        text = rows_text(20, "", "\n");
        char *row = malloc(strlen(text) + 700), *q = row;
        q += sprintf(q, "a header line\n%s,", bad[k][0]); /* line 1 may be a header */
        for (int c = 1; c < 64; c++)
            q += sprintf(q, "0,");
        sprintf(q, "1\n%s", text);
        p = write_gz("hex.csv.gz", row);
        char w[200];
        snprintf(w, sizeof w, "%s:2: column 1: expected a number (decimal digits), %s", p,
                 bad[k][1]);
        expect_digits_error(p, w);
        free(text);
        free(row);
    }
    /* a value out of range is shown as the file spells it: %g printed a
     * pixel of 16.0000001 as 16 (issue 21) */
    text = rows_text(20, "", "\n");
    char *row = malloc(strlen(text) + 700), *q = row;
    q += sprintf(q, "16.0000001,");
    for (int c = 1; c < 64; c++)
        q += sprintf(q, "0,");
    sprintf(q, "1\n%s", text);
    p = write_gz("over.csv.gz", row);
    snprintf(want, sizeof want, "%s:1: column 1: pixel value 16.0000001 outside 0..16", p);
    expect_digits_error(p, want);
    free(text);
    free(row);
    /* a FIFO (no writer: the open must not block) and a device */
    p = path_of("fifo.csv.gz");
    assert_int_equal(mkfifo(p, 0600), 0);
    expect_digits_error(p, "not a regular file (a FIFO)");
    p = path_of("zero.csv.gz");
    assert_int_equal(symlink("/dev/zero", p), 0);
    expect_digits_error(p, "not a regular file (a character device)");
    /* a gzip bomb: 65 MiB of zeros (65 KB compressed) */
    p = path_of("bomb.csv.gz");
    f = gzopen(p, "wb9");
    char *zeros = calloc(1, 1 << 20);
    for (int k = 0; k < 65; k++)
        assert_int_equal(gzwrite(f, zeros, 1 << 20), 1 << 20);
    gzclose(f);
    free(zeros);
    expect_digits_error(p, "decompresses to more than 67108864 bytes");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_digits_good),
        cmocka_unit_test(test_digits_variants),
        cmocka_unit_test(test_digits_raw),
        cmocka_unit_test(test_digits_bad_rows),
        cmocka_unit_test(test_digits_missing_and_short),
        cmocka_unit_test(test_digits_truncated),
        cmocka_unit_test(test_digits_corrupt),
        cmocka_unit_test(test_digits_hostile),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_fashion_real_files),
    };
    return cmocka_run_group_tests_name("train_data", tests, setup, teardown);
}
