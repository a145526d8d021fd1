/*
 * test_data_cifar.c - the CIFAR-10 binary reader (runtime/data/cifar10.c)
 * on small generated batch files (no copy of CIFAR-10 is reachable here):
 * record layout, channel order and normalisation, the training/validation
 * split, the cifar-10-batches-bin subdirectory, and each error.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data_ext.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ampc_test_cifar_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* records per file: data_batch_1..5, test_batch */
static const int nrec[6] = {2, 1, 3, 1, 2, 3};

/* the global record number g (training 0..8, validation 9..11) */
static unsigned label_of(int g) { return (unsigned)(g * 7 + 3) % 10; }
static unsigned pixel_of(int g, int c, int e) { return (unsigned)(g * 31 + c * 85 + e * 3) % 256; }

static const char *file_name(int k)
{
    static char name[32];
    if (k < 5)
        snprintf(name, sizeof name, "data_batch_%d.bin", k + 1);
    else
        snprintf(name, sizeof name, "test_batch.bin");
    return name;
}

/* Writes file k of the set into d (records from global number g0);
 * extra bytes appended; bad_label: record index whose label is 10+. */
static void write_file(const char *d, int k, int g0, int extra, int bad_label)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", d, file_name(k));
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    unsigned char rec[RT_CIFAR10_RECORD];
    for (int i = 0; i < nrec[k]; i++) {
        int g = g0 + i;
        rec[0] = (unsigned char)(i == bad_label ? 10u + (unsigned)g : label_of(g));
        for (int c = 0; c < 3; c++)
            for (int e = 0; e < 1024; e++)
                rec[1 + c * 1024 + e] = (unsigned char)pixel_of(g, c, e);
        assert_int_equal(fwrite(rec, 1, sizeof rec, f), sizeof rec);
    }
    for (int i = 0; i < extra; i++)
        fputc(0, f);
    assert_int_equal(fclose(f), 0);
}

static void write_set(const char *d)
{
    mkdir(d, 0755);
    for (int k = 0, g = 0; k < 6; g += nrec[k], k++)
        write_file(d, k, g, 0, -1);
}

static const char *sub(const char *name)
{
    static char p[4][256];
    static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof p[i], "%s/%s", dir, name);
    return p[i];
}

static float norm(unsigned v, int c)
{
    return ((float)v / 255.0f - rt_cifar10_mean[c]) / rt_cifar10_std[c];
}

static void check_sample(const float *x, float y, int g)
{
    for (int c = 0; c < 3; c++)
        for (int e = 0; e < 1024; e++)
            assert_float_equal(x[c * 1024 + e], norm(pixel_of(g, c, e), c), 0);
    assert_float_equal(y, (float)label_of(g), 0);
}

static void test_cifar_good(void **state)
{
    (void)state;
    const char *d = sub("good");
    write_set(d);
    RtDataset ds;
    char err[1024];
    if (!rt_data_cifar10(&ds, d, err, sizeof err))
        fail_msg("%s", err);
    assert_string_equal(ds.name, "cifar10");
    assert_int_equal(ds.sample_size, 3072);
    assert_int_equal(ds.classes, 10);
    assert_int_equal(ds.ntrain, 9);
    assert_int_equal(ds.nval, 3);
    float *x = malloc(3 * 3072 * sizeof *x), y[3];
    /* 8: the last record of data_batch_5; 2: the first of data_batch_2; 0 */
    int64_t tr[3] = {8, 2, 0};
    ds.fill(&ds, RT_SPLIT_TRAIN, tr, 3, x, y);
    check_sample(x, y[0], 8);
    check_sample(x + 3072, y[1], 2);
    check_sample(x + 6144, y[2], 0);
    int64_t va[3] = {2, 0, 1};
    ds.fill(&ds, RT_SPLIT_VAL, va, 3, x, y);
    check_sample(x, y[0], 9 + 2);
    check_sample(x + 3072, y[1], 9);
    check_sample(x + 6144, y[2], 10);
    /* the raw form (data.h's fill_raw): the records' bytes and labels, which
     * the normalisation ds.norm (the devices' ingest) makes fill's floats */
    assert_non_null(ds.fill_raw);
    assert_int_equal(ds.norm.channels, 3);
    uint8_t *raw = malloc(3 * 3072);
    float *back = malloc(3 * 3072 * sizeof *back), ry[3];
    assert_non_null(raw), assert_non_null(back);
    ds.fill_raw(&ds, RT_SPLIT_VAL, va, 3, raw, ry);
    static const int g[3] = {9 + 2, 9, 10};
    for (int j = 0; j < 3; j++)
        for (int c = 0; c < 3; c++)
            for (int e = 0; e < 1024; e += 97)
                assert_int_equal(raw[j * 3072 + c * 1024 + e], pixel_of(g[j], c, e));
    assert_memory_equal(ry, y, sizeof y);
    rt_ingest_floats(&ds.norm, raw, 3, 3072, back);
    assert_memory_equal(back, x, 3 * 3072 * sizeof *x);
    free(raw), free(back);
    free(x);
    rt_data_free(&ds);
}

/* the constants and the three planes land in channels R, G, B */
static void test_cifar_normalisation(void **state)
{
    (void)state;
    const char *d = sub("norm");
    mkdir(d, 0755);
    unsigned char rec[RT_CIFAR10_RECORD] = {0};
    rec[0] = 9;
    rec[1] = 255;               /* R(0,0) */
    rec[1 + 1024 + 33] = 128;   /* G(1,1) */
    rec[1 + 2048 + 1023] = 255; /* B(31,31) */
    for (int k = 0; k < 6; k++) {
        char p[256];
        snprintf(p, sizeof p, "%s/%s", d, file_name(k));
        FILE *f = fopen(p, "wb");
        assert_non_null(f);
        fwrite(rec, 1, sizeof rec, f);
        fclose(f);
    }
    RtDataset ds;
    char err[1024];
    assert_true(rt_data_cifar10(&ds, d, err, sizeof err));
    assert_int_equal(ds.ntrain, 5);
    assert_int_equal(ds.nval, 1);
    float *x = malloc(3072 * sizeof *x), y;
    int64_t k = 4;
    ds.fill(&ds, RT_SPLIT_TRAIN, &k, 1, x, &y);
    assert_float_equal(y, 9, 0);
    assert_float_equal(x[0], (1.0f - 0.4914f) / 0.2470f, 1e-6);
    assert_float_equal(x[1], -0.4914f / 0.2470f, 1e-6);
    assert_float_equal(x[1024 + 33], (128 / 255.0f - 0.4822f) / 0.2435f, 1e-6);
    assert_float_equal(x[1024], -0.4822f / 0.2435f, 1e-6);
    assert_float_equal(x[2048 + 1023], (1.0f - 0.4465f) / 0.2616f, 1e-6);
    assert_float_equal(x[2048], -0.4465f / 0.2616f, 1e-6);
    free(x);
    rt_data_free(&ds);
}

/* dir/cifar-10-batches-bin, as the archive unpacks */
static void test_cifar_subdir(void **state)
{
    (void)state;
    const char *top = sub("top");
    mkdir(top, 0755);
    write_set(sub("top/cifar-10-batches-bin"));
    RtDataset ds;
    char err[1024];
    if (!rt_data_cifar10(&ds, top, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(ds.ntrain, 9);
    rt_data_free(&ds);
}

static void expect_error(const char *d, const char *a, const char *b, const char *c)
{
    RtDataset ds;
    char err[1024];
    if (rt_data_cifar10(&ds, d, err, sizeof err)) {
        rt_data_free(&ds);
        fail_msg("no error");
    }
    const char *want[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (want[i] && !strstr(err, want[i]))
            fail_msg("message '%s' lacks '%s'", err, want[i]);
    assert_null(ds.x);
    assert_null(ds.y);
}

static void test_cifar_missing(void **state)
{
    (void)state;
    const char *d = sub("missing");
    write_set(d);
    char p[256];
    snprintf(p, sizeof p, "%s/test_batch.bin", d);
    assert_int_equal(unlink(p), 0);
    expect_error(d, "cannot open", p, "No such file");
    snprintf(p, sizeof p, "%s/data_batch_1.bin", d);
    assert_int_equal(unlink(p), 0);
    expect_error(d, "cannot open", p, "No such file");
    expect_error(sub("nowhere"), "cannot open", "nowhere/data_batch_1.bin", NULL);
}

static void test_cifar_bad_size(void **state)
{
    (void)state;
    const char *d = sub("size");
    write_set(d);
    write_file(d, 2, 3, 100, -1); /* data_batch_3: 3 records + 100 bytes */
    char p[256];
    snprintf(p, sizeof p, "%s/data_batch_3.bin", d);
    expect_error(d, p, "size 9319 is not a non-zero multiple of 3073",
                 "last record starts at offset 9219");
    /* cut inside a record */
    assert_int_equal(truncate(p, 3073 + 10), 0);
    expect_error(d, p, "size 3083 is not", NULL);
    /* empty */
    assert_int_equal(truncate(p, 0), 0);
    expect_error(d, p, "size 0 is not a non-zero multiple", NULL);
}

static void test_cifar_bad_label(void **state)
{
    (void)state;
    const char *d = sub("label");
    write_set(d);
    write_file(d, 2, 3, 0, 1); /* data_batch_3, record 1 (global 4): label 14 */
    char p[256];
    snprintf(p, sizeof p, "%s/data_batch_3.bin", d);
    expect_error(d, p, "offset 3073: label 14 of record 1 is outside 0..9", NULL);
    write_file(d, 2, 3, 0, -1);
    write_file(d, 5, 9, 0, 0); /* test_batch record 0: label 19 */
    snprintf(p, sizeof p, "%s/test_batch.bin", d);
    expect_error(d, p, "offset 0: label 19 of record 0", NULL);
}

static void test_cifar_not_a_file(void **state)
{
    (void)state;
    const char *d = sub("dirfile");
    write_set(d);
    char p[256];
    snprintf(p, sizeof p, "%s/data_batch_4.bin", d);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(mkdir(p, 0755), 0);
    expect_error(d, p, "not a regular file", NULL);
}

/* A FIFO as a batch file is refused at once (opening it would block). */
static void test_cifar_fifo(void **state)
{
    (void)state;
    const char *d = sub("fifo");
    write_set(d);
    char p[256];
    snprintf(p, sizeof p, "%s/data_batch_2.bin", d);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(mkfifo(p, 0600), 0);
    alarm(20); /* a hang fails the test instead of stalling it */
    expect_error(d, p, "not a regular file (a FIFO)", NULL);
    alarm(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cifar_good),
        cmocka_unit_test(test_cifar_normalisation),
        cmocka_unit_test(test_cifar_subdir),
        cmocka_unit_test(test_cifar_missing),
        cmocka_unit_test(test_cifar_bad_size),
        cmocka_unit_test(test_cifar_bad_label),
        cmocka_unit_test(test_cifar_not_a_file),
        cmocka_unit_test(test_cifar_fifo),
    };
    return cmocka_run_group_tests_name("data_cifar", tests, setup, teardown);
}
