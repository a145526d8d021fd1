/* test_cuda_ingest_emu.c - a raw batch normalised on the device
 * (runtime/cuda/ingest.cuh) under the emulator (libampcemu.a), under two
 * scheduler seeds and the reversed order with every access checked, bit for
 * bit against the floats the sources' fill gives (data/ingest.c's
 * rt_ingest_floats, through which IDX, CIFAR-10 and digits fill) in the
 * first layer's form as the CPU program's own calls make it (form_ref.h):
 * CIFAR-10's per-channel mean and std, IDX's x/255, digits' x/16; every byte
 * value; fp32, fp16 and bf16; NCHW and NHWC; padded 3 -> 4 and unpadded;
 * the labels, or none.  And the CPU device's ingest (its twin, what the loop
 * runs on the CPU) in each unpadded form gives the kernel's bytes and
 * labels, records the copy's event, and leaves the host's buffers alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "cuda/rt_cuda.h"
#include "data/data_ext.h"
#include "device.h"
#include "emu_test.h"
#include "form_ref.h"
#include "rt.h"

typedef struct {
    int64_t n, c, cp, inner;
    bool nhwc, labels;
    int norm; /* 0 CIFAR-10, 1 IDX, 2 digits */
} Case;

static RtIngestNorm norm_of(int which)
{
    if (which == 1)
        return rt_ingest_scale(255.0f);
    if (which == 2)
        return rt_ingest_scale(16.0f);
    RtIngestNorm g = {.channels = 3, .div = 255.0f};
    for (int c = 0; c < 3; c++)
        g.mean[c] = rt_cifar10_mean[c], g.std[c] = rt_cifar10_std[c];
    return g;
}

/* The CPU device's ingest of the same bytes in the unpadded form: the
 * kernel's x and labels, its event recorded. */
static void cpu_twin(const Case *k, RtDType dt, const RtIngestNorm *g, const uint8_t *raw,
                     const float *labels, const char *kernel_x)
{
    char err[256];
    RtDevice *d = rt_device_cpu_open(err, sizeof err);
    assert_non_null(d);
    size_t n = (size_t)k->n, sample = (size_t)(k->c * k->inner);
    size_t nout = n * sample * rt_dtype_size(dt);
    void *scratch = rt_dev_alloc(d, rt_dev_ingest_scratch_bytes(n, sample), "s", err, sizeof err);
    char *x = rt_dev_alloc(d, nout, "x", err, sizeof err);
    float *y = rt_dev_alloc(d, n * sizeof *y, "y", err, sizeof err);
    assert_true(scratch && x && y);
    RtDevIngest in = {.n = n,
                      .sample = sample,
                      .host_raw = raw,
                      .host_y = labels,
                      .scratch = scratch,
                      .x = x,
                      .y = y,
                      .norm = *g,
                      .form = {.c = (size_t)k->c, .dt = dt, .nhwc = k->nhwc}};
    RtDevEvent copied = {0};
    assert_true(rt_dev_has_ingest(d));
    rt_dev_ingest(d, &in, &copied);
    assert_true(copied.seq > 0);
    assert_memory_equal(x, kernel_x, nout);
    assert_memory_equal(y, labels, n * sizeof *y);
    rt_dev_free(d, scratch), rt_dev_free(d, x), rt_dev_free(d, y);
    rt_device_close(d);
}

static void run_case(const Case *k, RtDType dt)
{
    size_t es = rt_dtype_size(dt), nout = (size_t)(k->n * k->cp * k->inner);
    int64_t sample = k->c * k->inner;
    RtIngestNorm g = norm_of(k->norm);
    /* every byte value, in an order that differs between channels */
    uint8_t *raw = dev((size_t)(k->n * sample), "raw");
    float *labels = dev((size_t)k->n * sizeof *labels, "labels");
    for (int64_t i = 0; i < k->n * sample; i++)
        raw[i] = (uint8_t)(i * 37 + i / 256);
    for (int64_t j = 0; j < k->n; j++)
        labels[j] = (float)(j * 3 % 10);
    float *floats = malloc((size_t)(k->n * sample) * sizeof *floats);
    assert_non_null(floats);
    rt_ingest_floats(&g, raw, k->n, sample, floats); /* the sources' fill */
    void *want = form_ref(floats, k->n, k->c, k->cp, k->inner, dt, k->nhwc);
    assert_non_null(want);
    char *x = dev(nout * es, "x");
    float *y = dev((size_t)k->n * sizeof *y, "y");
    memset(x, 0x5a, nout * es); /* garbage the kernel must overwrite, padding too */
    memset(y, 0x5a, (size_t)k->n * sizeof *y);
    AmpcIngest b = {(size_t)k->n,
                    (size_t)k->c,
                    (size_t)k->cp,
                    (size_t)k->inner,
                    k->nhwc,
                    (int)dt,
                    {g.channels, g.div, {0}, {0}}};
    memcpy(b.norm.mean, g.mean, sizeof b.norm.mean);
    memcpy(b.norm.std, g.std, sizeof b.norm.std);
    long before = ampc_emu_launches();
    assert_int_equal(ampc_cu_ingest(NULL, &b, raw, labels, x, k->labels ? y : NULL), 0);
    assert_int_equal(ampc_emu_launches(), before + 1);
    for (size_t i = 0; i < nout; i++)
        if (memcmp(x + i * es, (char *)want + i * es, es))
            fail_msg("%s %s c=%lld cp=%lld norm %d: element %zu differs from the source's fill",
                     rt_dtype_name(dt), k->nhwc ? "NHWC" : "NCHW", (long long)k->c,
                     (long long)k->cp, k->norm, i);
    if (k->labels)
        assert_memory_equal(y, labels, (size_t)k->n * sizeof *y);
    if (k->cp == k->c)
        cpu_twin(k, dt, &g, raw, labels, x);
    ampc_emu_free(raw), ampc_emu_free(labels), ampc_emu_free(x), ampc_emu_free(y);
    free(floats), free(want);
}

static void test_batch_is_the_sources_fill(void **state)
{
    (void)state;
    static const Case cases[] = {
        {3, 3, 3, 16 * 6, false, true, 0}, /* CIFAR-10's NCHW, the data buffer's */
        {3, 3, 3, 16 * 6, true, true, 0},  /* a 16-bit NHWC stem */
        {2, 3, 4, 10 * 7, true, false, 0}, /* padded 3 -> 4, no labels */
        {4, 1, 1, 28 * 3, false, true, 1}, /* IDX */
        {5, 1, 1, 64, false, true, 2},     /* digits */
    };
    static const RtDType dts[] = {RT_F32, RT_F16, RT_BF16};
    int ran = 0;
    EMU_PASSES for (size_t c = 0; c < sizeof cases / sizeof cases[0];
                    c++) for (int t = 0; t < 3; t++, ran++) run_case(&cases[c], dts[t]);
    assert_int_equal(ran, 3 * 5 * 3);
}

/* the arithmetic itself: kernels/ingest.h's order, the sources' old tables */
static void test_values(void **state)
{
    (void)state;
    RtIngestNorm cifar = norm_of(0), idx = norm_of(1);
    uint8_t raw[3 * 256];
    float x[3 * 256];
    for (int i = 0; i < 3 * 256; i++)
        raw[i] = (uint8_t)i;
    rt_ingest_floats(&cifar, raw, 1, 3 * 256, x);
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) {
            float want = ((float)v / 255.0f - rt_cifar10_mean[c]) / rt_cifar10_std[c];
            assert_memory_equal(&x[c * 256 + v], &want, sizeof want);
        }
    rt_ingest_floats(&idx, raw, 3, 256, x);
    for (int v = 0; v < 256; v++) {
        float want = (float)v / 255.0f;
        assert_memory_equal(&x[512 + v], &want, sizeof want);
    }
}

/* an empty batch launches nothing */
static void test_empty(void **state)
{
    (void)state;
    AmpcIngest b = {0, 3, 4, 9, 1, AMPC_DT_F16, {1, 255.0f, {0}, {1}}};
    long before = ampc_emu_launches();
    assert_int_equal(ampc_cu_ingest(NULL, &b, NULL, NULL, NULL, NULL), 0);
    assert_int_equal(ampc_emu_launches(), before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_is_the_sources_fill),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_empty),
    };
    return cmocka_run_group_tests(tests, emu_test_setup, emu_test_teardown);
}
