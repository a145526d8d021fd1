/*
 * test_mxparams.c - MXNet's NDArray-list file (runtime/mxparams.c): every
 * header version (legacy, V1, V2, V3) and dtype (float32, float16,
 * bfloat16) written and read back bit for bit, named and unnamed; files
 * laid out byte by byte as MXNet 1.9.1 writes them parse; every malformed
 * case is refused with a message naming the file and the problem (wrong
 * magic, truncation at every offset, a dtype or storage type not read,
 * sizes that overflow, duplicate names, trailing bytes); none arrays;
 * writes are atomic and never replace one of the run's inputs.
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
#include "kernels/half.h"
#include "mxparams.h"

/* ---- building files byte by byte (the layout of NDArray::Save) ------------------- */

typedef struct {
    unsigned char b[4096];
    size_t n;
} Bytes;

static void put(Bytes *o, const void *p, size_t n)
{
    assert_true(o->n + n <= sizeof o->b);
    memcpy(o->b + o->n, p, n);
    o->n += n;
}
static void u32(Bytes *o, uint32_t v) { put(o, &v, 4); }
static void u64(Bytes *o, uint64_t v) { put(o, &v, 8); }

static void list_head(Bytes *o, uint64_t n)
{
    u64(o, 0x112);
    u64(o, 0);
    u64(o, n);
}

/* a V2 float32 array of the given shape, values 1, 2, 3, ... */
static void v2_f32(Bytes *o, int rank, const int64_t *shape)
{
    u32(o, 0xF993fac9);
    u32(o, 0); /* dense */
    u32(o, (uint32_t)rank);
    int64_t n = 1;
    for (int d = 0; d < rank; d++) {
        u64(o, (uint64_t)shape[d]);
        n *= shape[d];
    }
    u32(o, 1); /* cpu */
    u32(o, 0);
    u32(o, 0); /* float32 */
    for (int64_t i = 0; i < n; i++) {
        float f = (float)(i + 1);
        put(o, &f, 4);
    }
}

static void names(Bytes *o, int n, const char *const *name)
{
    u64(o, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        u64(o, strlen(name[i]));
        put(o, name[i], strlen(name[i]));
    }
}

/* parse must fail with a message holding each of the fragments */
static void refused(const Bytes *f, const char *frag1, const char *frag2)
{
    RtMxList l;
    char err[1024];
    assert_false(rt_mx_parse(f->b, f->n, "f.params", &l, err, sizeof err));
    if (strncmp(err, "f.params: ", 10) != 0 || !strstr(err, frag1) ||
        (frag2 && !strstr(err, frag2)))
        fail_msg("message '%s' lacks 'f.params: ', '%s'%s%s", err, frag1, frag2 ? ", " : "",
                 frag2 ? frag2 : "");
    assert_null(l.a);
}

/* ---- round trips --------------------------------------------------------------------- */

static void fill_list(RtMxList *l, RtMxArray *a, void **data, int type_flag)
{
    static const int64_t shapes[3][4] = {{3, 4}, {5}, {2, 1, 3, 2}};
    static const int ranks[3] = {2, 1, 4};
    static const char *const keys[3] = {"arg:fc1_weight", "arg:fc1_bias", "aux:bn_moving_var"};
    memset(l, 0, sizeof *l);
    l->n = 3;
    l->a = a;
    l->named = true;
    for (int i = 0; i < 3; i++) {
        memset(&a[i], 0, sizeof a[i]);
        a[i].name = (char *)keys[i];
        a[i].type_flag = type_flag;
        a[i].rank = ranks[i];
        a[i].numel = 1;
        for (int d = 0; d < ranks[i]; d++) {
            a[i].shape[d] = shapes[i][d];
            a[i].numel *= shapes[i][d];
        }
        size_t es = rt_mx_dtype_size(type_flag);
        unsigned char *p = malloc((size_t)a[i].numel * es);
        for (int64_t e = 0; e < a[i].numel; e++) {
            float v = (float)(e - 3) * 0.37f + (float)i;
            if (type_flag == RT_MX_FLOAT32)
                memcpy(p + 4 * e, &v, 4);
            else {
                uint16_t h = type_flag == RT_MX_FLOAT16 ? ampc_float_to_half(v)
                                                        : ampc_float_to_bf16(v);
                memcpy(p + 2 * e, &h, 2);
            }
        }
        data[i] = p;
        a[i].data = p;
    }
}

static void test_round_trip(void **state)
{
    (void)state;
    static const int flags[3] = {RT_MX_FLOAT32, RT_MX_FLOAT16, RT_MX_BFLOAT16};
    for (int v = RT_MX_LEGACY; v <= RT_MX_V3; v++)
        for (int k = 0; k < 3; k++)
            for (int named = 0; named < 2; named++) {
                RtMxArray a[3];
                void *data[3];
                RtMxList l, back;
                fill_list(&l, a, data, flags[k]);
                l.named = named;
                unsigned char *buf;
                size_t n;
                char err[512];
                assert_true(rt_mx_serialize(&l, (RtMxVersion)v, &buf, &n, err, sizeof err));
                assert_true(rt_mx_parse(buf, n, "rt.params", &back, err, sizeof err));
                assert_int_equal(back.n, 3);
                assert_int_equal(back.named, named);
                for (int i = 0; i < 3; i++) {
                    assert_int_equal(back.a[i].version, v);
                    assert_false(back.a[i].none);
                    assert_int_equal(back.a[i].type_flag, flags[k]);
                    assert_int_equal(back.a[i].rank, a[i].rank);
                    assert_memory_equal(back.a[i].shape, a[i].shape,
                                        (size_t)a[i].rank * sizeof(int64_t));
                    assert_int_equal(back.a[i].numel, a[i].numel);
                    assert_memory_equal(back.a[i].data, a[i].data,
                                        (size_t)a[i].numel * rt_mx_dtype_size(flags[k]));
                    if (named)
                        assert_string_equal(back.a[i].name, a[i].name);
                    else
                        assert_null(back.a[i].name);
                    /* values widened exactly */
                    float want = (float)(2 - 3) * 0.37f + (float)i;
                    float got = rt_mx_get(&back.a[i], 2);
                    if (flags[k] == RT_MX_FLOAT32)
                        assert_true(got == want);
                    else
                        assert_true(got == (flags[k] == RT_MX_FLOAT16
                                                ? ampc_half_to_float(ampc_float_to_half(want))
                                                : ampc_bf16_to_float(ampc_float_to_bf16(want))));
                }
                /* every shorter prefix is refused, with a message, no crash */
                for (size_t cut = 0; cut < n; cut++) {
                    RtMxList t;
                    err[0] = 0;
                    assert_false(rt_mx_parse(buf, cut, "cut.params", &t, err, sizeof err));
                    assert_true(strncmp(err, "cut.params: ", 12) == 0);
                }
                rt_mx_free(&back);
                free(buf);
                for (int i = 0; i < 3; i++)
                    free(data[i]);
            }
}

/* A file laid out as MXNet 1.9.1's mx.nd.save writes {'arg:w': ones(2,3)}:
 * the bytes below are spelled out from NDArray::Save, not made by ampc. */
static void test_mxnet_layout(void **state)
{
    (void)state;
    Bytes f = {.n = 0};
    list_head(&f, 1);
    v2_f32(&f, 2, (const int64_t[]){2, 3});
    names(&f, 1, (const char *const[]){"arg:w"});
    assert_int_equal(f.n, 24 + 4 + 4 + 4 + 16 + 8 + 4 + 24 + 8 + 8 + 5);
    RtMxList l;
    char err[512];
    assert_true(rt_mx_parse(f.b, f.n, "f.params", &l, err, sizeof err));
    assert_int_equal(l.n, 1);
    assert_string_equal(l.a[0].name, "arg:w");
    assert_int_equal(l.a[0].version, RT_MX_V2);
    assert_int_equal(l.a[0].rank, 2);
    assert_int_equal(l.a[0].shape[1], 3);
    assert_true(rt_mx_get(&l.a[0], 5) == 6.0f);
    rt_mx_free(&l);
    /* and ampc writes the same bytes */
    float v[6] = {1, 2, 3, 4, 5, 6};
    RtMxArray a = {.name = "arg:w", .type_flag = 0, .rank = 2, .shape = {2, 3}, .numel = 6,
                   .data = v};
    RtMxList w = {.n = 1, .a = &a, .named = true};
    unsigned char *buf;
    size_t n;
    assert_true(rt_mx_serialize(&w, RT_MX_V2, &buf, &n, err, sizeof err));
    assert_int_equal(n, f.n);
    assert_memory_equal(buf, f.b, n);
    free(buf);
}

/* ---- malformed files --------------------------------------------------------------- */

static void test_malformed(void **state)
{
    (void)state;
    const int64_t s23[2] = {2, 3};
    Bytes f = {.n = 0};
    refused(&f, "truncated: 0 bytes, shorter than the 16-byte header", NULL);
    /* the wrong magic */
    u64(&f, 0x113);
    u64(&f, 0);
    u64(&f, 0);
    u64(&f, 0);
    refused(&f, "not an MXNet NDArray file", "0x0000000000000113");
    /* an array count the file cannot hold */
    f.n = 0;
    list_head(&f, 1000);
    u64(&f, 0);
    refused(&f, "truncated: 1000 arrays cannot fit", NULL);
    /* names: a count that is neither 0 nor the array count */
    f.n = 0;
    list_head(&f, 1);
    v2_f32(&f, 2, s23);
    names(&f, 2, (const char *const[]){"a", "b"});
    refused(&f, "holds 2 names for 1 arrays", NULL);
    /* duplicate names */
    f.n = 0;
    list_head(&f, 2);
    v2_f32(&f, 2, s23);
    v2_f32(&f, 2, s23);
    names(&f, 2, (const char *const[]){"arg:w", "arg:w"});
    refused(&f, "the name 'arg:w' appears twice (arrays 0 and 1)", NULL);
    /* a NUL inside a name */
    f.n = 0;
    list_head(&f, 1);
    v2_f32(&f, 2, s23);
    u64(&f, 1);
    u64(&f, 3);
    put(&f, "a\0b", 3);
    refused(&f, "name 0 (at byte", "holds a NUL byte");
    /* a name longer than the file */
    f.n = 0;
    list_head(&f, 1);
    v2_f32(&f, 2, s23);
    u64(&f, 1);
    u64(&f, UINT64_MAX);
    refused(&f, "truncated: name 0 is 18446744073709551615 bytes", NULL);
    /* trailing bytes */
    f.n = 0;
    list_head(&f, 1);
    v2_f32(&f, 2, s23);
    names(&f, 1, (const char *const[]){"w"});
    u32(&f, 7);
    refused(&f, "4 bytes of trailing data after the names", NULL);
    /* dtypes and storage types that are not read */
    static const struct {
        uint32_t flag;
        const char *name;
    } other[] = {{1, "float64"}, {3, "uint8"}, {4, "int32"}, {5, "int8"}, {6, "int64"},
                 {7, "bool"}, {11, "uint64"}, {99, "unknown"}};
    for (size_t k = 0; k < sizeof other / sizeof other[0]; k++) {
        f.n = 0;
        list_head(&f, 1);
        u32(&f, 0xF993fac9);
        u32(&f, 0);
        u32(&f, 1);
        u64(&f, 2);
        u32(&f, 1);
        u32(&f, 0);
        u32(&f, other[k].flag);
        u64(&f, 0);
        char want[64];
        snprintf(want, sizeof want, "dtype %s (type flag %u) is not read", other[k].name,
                 other[k].flag);
        refused(&f, "array 0 of 1 (at byte 24)", want);
    }
    f.n = 0;
    list_head(&f, 1);
    u32(&f, 0xF993fac9);
    u32(&f, 1);
    refused(&f, "storage type 1 (row_sparse): only dense arrays (0) are read", NULL);
    f.b[28] = 2;
    refused(&f, "storage type 2 (csr)", NULL);
    /* a device type that is not one */
    f.n = 0;
    list_head(&f, 1);
    u32(&f, 0xF993fac9);
    u32(&f, 0);
    u32(&f, 1);
    u64(&f, 2);
    u32(&f, 9);
    u32(&f, 0);
    refused(&f, "device type 9 is not cpu (1)", NULL);
    /* dimensions whose product overflows: refused before any allocation */
    f.n = 0;
    list_head(&f, 1);
    u32(&f, 0xF993fac9);
    u32(&f, 0);
    u32(&f, 3);
    u64(&f, (uint64_t)1 << 40);
    u64(&f, (uint64_t)1 << 40);
    u64(&f, (uint64_t)1 << 40);
    u32(&f, 1);
    u32(&f, 0);
    u32(&f, 0);
    refused(&f, "truncated: array 0 of 1", "elements need more bytes than the 0 left");
    /* a negative dimension, a rank below -1, a rank above the limit */
    f.n = 0;
    list_head(&f, 1);
    u32(&f, 0xF993fac8); /* V1 */
    u32(&f, 1);
    u64(&f, (uint64_t)-5);
    refused(&f, "dimension 0 is -5", NULL);
    f.n = 0;
    list_head(&f, 1);
    u32(&f, 0xF993fac8);
    u32(&f, (uint32_t)-2);
    refused(&f, "rank -2", "is negative");
    f.n = 0;
    list_head(&f, 1);
    u32(&f, 0xF993fac8);
    u32(&f, 9);
    for (int d = 0; d < 9; d++)
        u64(&f, 1);
    refused(&f, "rank 9 exceeds 8", NULL);
    /* a legacy header whose rank word is garbage */
    f.n = 0;
    list_head(&f, 1);
    u32(&f, 0x12345678);
    u64(&f, 0);
    refused(&f, "rank 305419896 needs", "legacy header");
    /* an unknown dimension in a V2 array (MXNet itself cannot load it) */
    f.n = 0;
    list_head(&f, 1);
    u32(&f, 0xF993fac9);
    u32(&f, 0);
    u32(&f, 1);
    u64(&f, (uint64_t)-1);
    refused(&f, "an unknown dimension (-1) outside numpy shape semantics", NULL);
}

/* None arrays (no shape, no data) as MXNet writes them: V2 rank 0, V3 rank
 * -1 or an unknown dimension, V1 rank -1; V3 rank 0 is a scalar. */
static void test_none_arrays(void **state)
{
    (void)state;
    Bytes f = {.n = 0};
    list_head(&f, 4);
    u32(&f, 0xF993fac9);
    u32(&f, 0);
    u32(&f, 0); /* V2, rank 0: none */
    u32(&f, 0xF993faca);
    u32(&f, 0);
    u32(&f, (uint32_t)-1); /* V3, unknown rank: none */
    u32(&f, 0xF993faca);
    u32(&f, 0);
    u32(&f, 2);
    u64(&f, 3);
    u64(&f, (uint64_t)-1); /* V3, an unknown dimension: none */
    u32(&f, 0xF993faca);
    u32(&f, 0);
    u32(&f, 0); /* V3, rank 0: a scalar */
    u32(&f, 1);
    u32(&f, 0);
    u32(&f, 2); /* float16 */
    uint16_t h = ampc_float_to_half(2.5f);
    put(&f, &h, 2);
    names(&f, 4, (const char *const[]){"a", "b", "c", "d"});
    RtMxList l;
    char err[512];
    assert_true(rt_mx_parse(f.b, f.n, "f.params", &l, err, sizeof err));
    assert_true(l.a[0].none && l.a[1].none && l.a[2].none);
    assert_false(l.a[3].none);
    assert_int_equal(l.a[3].rank, 0);
    assert_int_equal(l.a[3].numel, 1);
    assert_true(rt_mx_get(&l.a[3], 0) == 2.5f);
    rt_mx_free(&l);
}

/* Every single-byte change of a valid file parses or is refused with a
 * message: never a crash, never an unbounded allocation. */
static void test_flipped_bytes(void **state)
{
    (void)state;
    Bytes f = {.n = 0};
    list_head(&f, 2);
    v2_f32(&f, 2, (const int64_t[]){2, 3});
    v2_f32(&f, 1, (const int64_t[]){4});
    names(&f, 2, (const char *const[]){"arg:w", "aux:m"});
    for (size_t i = 0; i < f.n; i++)
        for (int bit = 0; bit < 8; bit++) {
            Bytes g = f;
            g.b[i] ^= (unsigned char)(1u << bit);
            RtMxList l;
            char err[512];
            err[0] = 0;
            if (rt_mx_parse(g.b, g.n, "g.params", &l, err, sizeof err))
                rt_mx_free(&l);
            else
                assert_true(strncmp(err, "g.params: ", 10) == 0);
        }
}

/* ---- files -------------------------------------------------------------------------- */

static void test_write_read_files(void **state)
{
    (void)state;
    char dir[] = "/tmp/ampc_mxparams.XXXXXX", path[128], tmpl[160];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.params", dir);
    RtMxArray a[3];
    void *data[3];
    RtMxList l, back;
    fill_list(&l, a, data, RT_MX_FLOAT32);
    char err[512];
    rt_inputs_reset();
    assert_true(rt_mx_write(path, "--save-params", &l, RT_MX_V2, err, sizeof err));
    struct stat st1, st2;
    assert_int_equal(stat(path, &st1), 0);
    /* written again: a new file renamed over the old one, no temporary left */
    assert_true(rt_mx_write(path, "--save-params", &l, RT_MX_V2, err, sizeof err));
    assert_int_equal(stat(path, &st2), 0);
    assert_true(st1.st_ino != st2.st_ino);
    snprintf(tmpl, sizeof tmpl, "ls %s | grep -c tmp >/dev/null", dir);
    assert_int_not_equal(system(tmpl), 0);
    assert_true(rt_mx_read(path, &back, err, sizeof err));
    assert_int_equal(back.n, 3);
    assert_non_null(back.owned);
    assert_memory_equal(back.a[0].data, a[0].data, (size_t)a[0].numel * 4);
    rt_mx_free(&back);
    /* read, the file is one of the run's inputs: never written over */
    assert_false(rt_mx_write(path, "--save-params", &l, RT_MX_V2, err, sizeof err));
    assert_non_null(strstr(err, "this file is one of the run's inputs"));
    assert_int_equal(stat(path, &st1), 0);
    assert_true(st1.st_ino == st2.st_ino);
    /* a missing file, a directory */
    rt_inputs_reset();
    assert_false(rt_mx_read("/nonexistent/x.params", &back, err, sizeof err));
    assert_non_null(strstr(err, "cannot open params file /nonexistent/x.params"));
    assert_false(rt_mx_read(dir, &back, err, sizeof err));
    assert_non_null(strstr(err, "not a regular file"));
    unlink(path);
    rmdir(dir);
    for (int i = 0; i < 3; i++)
        free(data[i]);
}

/* A file of `size` bytes (sparse: no disk taken) that starts with head. */
static void sparse_file(const char *path, const Bytes *head, off_t size)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(head->b, 1, head->n, f), head->n);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(truncate(path, size), 0);
}

/* --load-params reads a file only as far as its parse has got (issue 21: a
 * 3 GB sparse file of zeros took 14 s and 3 GB before its refusal): the
 * header is checked first, every size against the file's size before its
 * bytes are read.  Counted in bytes read, not timed.  A file larger than
 * the read-ahead, with more arrays than the first table, reads whole. */
static void test_read_as_far_as_proven(void **state)
{
    (void)state;
    char dir[] = "/tmp/ampc_mxparams.XXXXXX", path[128], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/big.params", dir);
    const off_t three_gb = (off_t)3 << 30;
    RtMxList l;
    Bytes zeros = {.n = 0};
    sparse_file(path, &zeros, three_gb);
    rt_inputs_reset();
    assert_false(rt_mx_read(path, &l, err, sizeof err));
    assert_non_null(strstr(err, "not an MXNet NDArray file"));
    assert_true(l.bytes_read <= 65536);
    /* a good header, then array 0 with a storage type that is not read */
    Bytes head = {.n = 0};
    list_head(&head, 2);
    u32(&head, 0xF993fac9);
    u32(&head, 1); /* row_sparse */
    sparse_file(path, &head, three_gb);
    rt_inputs_reset();
    assert_false(rt_mx_read(path, &l, err, sizeof err));
    assert_non_null(strstr(err, "array 0 of 2 (at byte 24): storage type 1 (row_sparse)"));
    assert_true(l.bytes_read <= 65536);
    /* 300 arrays, one of 100,000 floats: several reads, the table grown */
    static Bytes many; /* 4 KiB is too small: written in parts below */
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    many.n = 0;
    list_head(&many, 300);
    int64_t big = 100000, one = 3;
    v2_f32(&many, 1, &one);
    fwrite(many.b, 1, many.n, f);
    many.n = 0;
    u32(&many, 0xF993fac9), u32(&many, 0), u32(&many, 1), u64(&many, (uint64_t)big);
    u32(&many, 1), u32(&many, 0), u32(&many, 0);
    fwrite(many.b, 1, many.n, f);
    for (int64_t i = 0; i < big; i++) {
        float v = (float)i;
        fwrite(&v, 4, 1, f);
    }
    for (int i = 2; i < 300; i++) {
        many.n = 0;
        v2_f32(&many, 1, &one);
        fwrite(many.b, 1, many.n, f);
    }
    many.n = 0;
    u64(&many, 0);
    fwrite(many.b, 1, many.n, f);
    long size = ftell(f);
    assert_int_equal(fclose(f), 0);
    rt_inputs_reset();
    assert_true(rt_mx_read(path, &l, err, sizeof err));
    assert_int_equal(l.n, 300);
    assert_int_equal(l.bytes_read, (size_t)size);
    assert_int_equal(l.a[1].numel, big);
    float last;
    memcpy(&last, (const char *)l.a[1].data + (big - 1) * 4, 4);
    assert_true(last == (float)(big - 1));
    memcpy(&last, (const char *)l.a[299].data + 8, 4);
    assert_true(last == 3.0f);
    rt_mx_free(&l);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_mxnet_layout),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_none_arrays),
        cmocka_unit_test(test_flipped_bytes),
        cmocka_unit_test(test_write_read_files),
        cmocka_unit_test(test_read_as_far_as_proven),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
