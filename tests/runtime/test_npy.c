/*
 * test_npy.c - float32 .npy files (runtime/npy.c): the header ampc writes
 * is NumPy's (version 1.0, 64-byte aligned, '\n' last) for every rank;
 * headers as NumPy writes them (1.0, 2.0, 16-byte aligned ones of older
 * releases, 1-tuples, scalars, key order, double quotes) parse; a written
 * file reads back bit for bit; every malformed or mismatched file is
 * refused with a message naming the file (magic, version, truncation at
 * every offset, non-ASCII, keys, dtype, Fortran order, shapes, trailing
 * data).
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

#include "fileio.h"
#include "npy.h"

/* A v1.0 file: the preamble, the dict text padded to 64 with spaces and
 * '\n', then nbytes of data (zeros). */
static size_t make(unsigned char *dst, const char *dict, int major, size_t align, size_t nbytes)
{
    size_t pre = major == 1 ? 10 : 12, k = strlen(dict);
    size_t total = (pre + k + 1 + align - 1) / align * align, hlen = total - pre;
    memcpy(dst, "\x93NUMPY", 6);
    dst[6] = (unsigned char)major;
    dst[7] = 0;
    for (size_t i = 0; i < pre - 8; i++)
        dst[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(dst + pre, dict, k);
    memset(dst + pre + k, ' ', total - pre - k - 1);
    dst[total - 1] = '\n';
    memset(dst + total, 0, nbytes);
    return total + nbytes;
}

static void parses(const char *dict, int major, size_t align, int rank, const int64_t *shape)
{
    unsigned char buf[1024];
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= shape[d];
    size_t len = make(buf, dict, major, align, (size_t)n * 4);
    RtNpyHeader h;
    float *x;
    char err[512];
    if (!rt_npy_parse(buf, len, "x.npy", &h, &x, err, sizeof err))
        fail_msg("%s: %s", dict, err);
    assert_int_equal(h.rank, rank);
    assert_memory_equal(h.shape, shape, (size_t)rank * sizeof *shape);
    assert_int_equal(h.numel, n);
    free(x);
}

static void refused(const char *dict, int major, size_t nbytes, const char *frag)
{
    unsigned char buf[1024];
    size_t len = make(buf, dict, major, 64, nbytes);
    RtNpyHeader h;
    float *x = (float *)1;
    char err[512];
    assert_false(rt_npy_parse(buf, len, "x.npy", &h, &x, err, sizeof err));
    assert_null(x);
    if (strncmp(err, "x.npy: ", 7) != 0 || !strstr(err, frag))
        fail_msg("%s: message '%s' lacks 'x.npy: ' or '%s'", dict, err, frag);
}

static void test_header_writer(void **state)
{
    (void)state;
    int64_t shape[RT_MAX_RANK] = {37, 1, 8, 8, 2, 3, 1, 5};
    for (int rank = 0; rank <= RT_MAX_RANK; rank++) {
        char head[1024];
        size_t k = rt_npy_header(head, sizeof head, rank, shape);
        assert_true(k > 0 && k % 64 == 0);
        assert_int_equal(head[k - 1], '\n');
        assert_memory_equal(head, "\x93NUMPY\x01\x00", 8);
        RtNpyHeader h;
        char err[256];
        assert_true(rt_npy_parse_header(head, k, "w.npy", &h, err, sizeof err));
        assert_int_equal(h.rank, rank);
        assert_int_equal(h.data_offset, k);
    }
    /* NumPy's own text for a (37, 10) array, byte for byte */
    char head[256];
    size_t k = rt_npy_header(head, sizeof head, 2, (const int64_t[]){37, 10});
    const char *np = "{'descr': '<f4', 'fortran_order': False, 'shape': (37, 10), }";
    assert_int_equal(k, 128);
    assert_int_equal(head[8], 118); /* header length 118: 10 + 118 = 128 */
    assert_memory_equal(head + 10, np, strlen(np));
    k = rt_npy_header(head, sizeof head, 1, (const int64_t[]){5});
    assert_non_null(memmem(head, k, "'shape': (5,), }", 16));
    assert_int_equal(rt_npy_header(head, 16, 1, (const int64_t[]){5}), 0);
}

static void test_numpy_headers(void **state)
{
    (void)state;
    parses("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 1, 64, 2,
           (const int64_t[]){3, 4});
    parses("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 1, 64, 1,
           (const int64_t[]){3});
    parses("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 1, 64, 0, NULL);
    parses("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 8, 8)}", 2, 64, 4,
           (const int64_t[]){2, 1, 8, 8});
    parses("{\"shape\": (0, 5), \"fortran_order\": False, \"descr\": \"<f4\"}", 1, 16, 2,
           (const int64_t[]){0, 5});
    parses("{'descr':'<f4','fortran_order':False,'shape':(7,3,)}", 3, 64, 2,
           (const int64_t[]){7, 3});
}

static void test_refused(void **state)
{
    (void)state;
    const char *ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    refused("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 1, 48,
            "dtype '<f8' (float64): only '<f4' (little-endian float32) is read");
    refused("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 1, 24,
            "dtype '>f4' (big-endian float32)");
    refused("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", 1, 24, "dtype '<i4'");
    refused("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 1, 8,
            "'descr' is not a plain dtype string");
    refused("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 1, 24,
            "fortran_order is True");
    refused("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }", 1, 24,
            "'fortran_order' is not True or False");
    refused("{'descr': '<f4', 'fortran_order': False, 'shape': (3), }", 1, 12,
            "'shape' is (3), an integer, not a tuple");
    refused("{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 3), }", 1, 0,
            "'shape' is not a tuple of integers");
    refused("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }", 1, 24,
            "'shape' is not a tuple");
    refused("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 1, 0,
            "a dimension of 'shape' overflows");
    refused("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", 1,
            0, "the shape's element count overflows");
    refused("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 1, 4,
            "'shape' has more than 8 dimensions");
    refused("{'descr': '<f4', 'shape': (2, 3), }", 1, 24, "the header lacks 'fortran_order'");
    refused("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", 1, 24,
            "the header has the key 'x'");
    refused("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", 1, 24,
            "the key 'descr' twice");
    refused("{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}", 1, 24,
            "malformed after 'descr'");
    refused("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} x", 1, 24,
            "text after the header dict");
    refused("['descr']", 1, 0, "the header is not a dict");
    refused(ok, 1, 23, "truncated: the shape holds 6 float32 values (24 bytes), the file has 23");
    refused(ok, 1, 25, "1 bytes of trailing data after the 6 float32 values");
    refused(ok, 4, 24, ".npy version 4.0: only 1.0, 2.0 and 3.0 are read");
    /* the preamble: magic, non-ASCII header, a header longer than the file */
    unsigned char buf[256];
    size_t len = make(buf, ok, 1, 64, 24);
    RtNpyHeader h;
    float *x;
    char err[512];
    buf[1] = 'X';
    assert_false(rt_npy_parse(buf, len, "x.npy", &h, &x, err, sizeof err));
    assert_non_null(strstr(err, "x.npy: not a .npy file (no \\x93NUMPY magic string)"));
    buf[1] = 'N';
    unsigned char keep = buf[20];
    buf[20] = 0xe9;
    assert_false(rt_npy_parse(buf, len, "x.npy", &h, &x, err, sizeof err));
    assert_non_null(strstr(err, "the header holds a byte 0xe9 at 20 (not ASCII)"));
    buf[20] = keep;
    buf[9] = 0xff;
    assert_false(rt_npy_parse(buf, len, "x.npy", &h, &x, err, sizeof err));
    assert_non_null(strstr(err, "truncated: the header is 65398 bytes"));
    buf[9] = 0;
    /* every prefix of a good file is refused */
    assert_true(rt_npy_parse(buf, len, "x.npy", &h, &x, err, sizeof err));
    free(x);
    for (size_t cut = 0; cut < len; cut++) {
        err[0] = 0;
        assert_false(rt_npy_parse(buf, cut, "x.npy", &h, &x, err, sizeof err));
        assert_true(strncmp(err, "x.npy: ", 7) == 0);
    }
}

static void test_files(void **state)
{
    (void)state;
    char dir[] = "/tmp/ampc_npy.XXXXXX", path[128], bad[128];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/y.npy", dir);
    float v[3 * 5];
    for (int i = 0; i < 15; i++)
        v[i] = (float)i * -0.3f + 1e-30f;
    char err[512];
    rt_inputs_reset();
    assert_true(rt_npy_write(path, "--output", 2, (const int64_t[]){3, 5}, v, err, sizeof err));
    RtNpyHeader h;
    float *x;
    assert_true(rt_npy_read(path, &h, &x, err, sizeof err));
    assert_int_equal(h.rank, 2);
    assert_int_equal(h.shape[0], 3);
    assert_int_equal(h.shape[1], 5);
    assert_memory_equal(x, v, sizeof v);
    free(x);
    /* an input is never written over */
    assert_false(rt_npy_write(path, "--output", 2, (const int64_t[]){3, 5}, v, err, sizeof err));
    assert_non_null(strstr(err, "--output"));
    assert_non_null(strstr(err, "one of the run's inputs"));
    /* a truncated file on disk */
    snprintf(bad, sizeof bad, "%s/t.npy", dir);
    FILE *f = fopen(bad, "wb");
    char head[128];
    size_t k = rt_npy_header(head, sizeof head, 2, (const int64_t[]){3, 5});
    fwrite(head, 1, k, f);
    fwrite(v, 4, 14, f);
    fclose(f);
    assert_false(rt_npy_read(bad, &h, &x, err, sizeof err));
    assert_null(x);
    assert_non_null(strstr(err, "t.npy: truncated: the shape holds 15 float32 values"));
    /* a header that claims more than the file */
    f = fopen(bad, "wb");
    fwrite("\x93NUMPY\x02\x00\xff\xff\xff\x7f", 1, 12, f);
    fclose(f);
    assert_false(rt_npy_read(bad, &h, &x, err, sizeof err));
    assert_non_null(strstr(err, "truncated: the header is 2147483647 bytes"));
    f = fopen(bad, "wb");
    fwrite("\x93NUM", 1, 4, f);
    fclose(f);
    assert_false(rt_npy_read(bad, &h, &x, err, sizeof err));
    assert_non_null(strstr(err, "not a .npy file"));
    assert_false(rt_npy_read("/nonexistent/in.npy", &h, &x, err, sizeof err));
    assert_non_null(strstr(err, "cannot open input /nonexistent/in.npy"));
    unlink(bad);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_writer),
        cmocka_unit_test(test_numpy_headers),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
