/* test_cuda_synthetic_emu.c - the synthetic batch made on the device
 * (runtime/cuda/synthetic.cuh) under the emulator (libampcemu.a), under two
 * scheduler seeds and the reversed order with every access checked, against
 * the CPU's synthetic source (runtime/data/synthetic.c, what training reads
 * on the CPU) cast by the CPU's Cast (rt_cast_forward), laid out by its
 * layout conversion (rt_layout_convert) and padded with zero channels, bit
 * for bit: fp32, fp16 and bf16; NCHW and NHWC; padded 3 -> 4 and 3 -> 8 and
 * unpadded; both splits; shuffled sample indices, large ones included; the
 * labels, or none; and the CPU device's synthetic_batch (its twin, what the
 * loop runs on the CPU) in each unpadded form gives the kernel's bytes.
 * Also: the generator's header (kernels/splitmix.h) gives rand.c's values,
 * and a known draw, so a change to either shows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "cuda/rt_cuda.h"
#include "data/data.h"
#include "device.h"
#include "form_ref.h"
#include "emu_test.h"
#include "kernels/splitmix.h"
#include "rand.h"
#include "rt.h"

/* the generator's first values, fixed: the CPU's data, initial weights and
 * shuffles are these numbers (a changed constant changes every run) */
static void test_generator_pinned(void **state)
{
    (void)state;
    assert_int_equal(rt_mix64(0), 0);
    assert_true(rt_rand_u64(1, 2, 3) == ampc_rand_u64(1, 2, 3));
    assert_true(rt_rand_u64(0, 0, 0) == 0x3cf11a8c42acbfb8ull);
    for (uint64_t i = 0; i < 1000; i++) {
        uint64_t seed = i * 77 + 5, stream = rt_hash_name("synthetic/train") ^ i;
        assert_true(rt_rand_u64(seed, stream, i * i) ==
                    ampc_rand_keyed(ampc_rand_key(seed, stream), i * i));
        assert_true(rt_rand_uniform(seed, stream, i) ==
                    ampc_rand_unit(ampc_rand_u64(seed, stream, i)));
    }
}

typedef struct {
    int64_t n, c, cp, inner, classes;
    bool nhwc, labels;
    RtSplit split;
} Case;

/* the CPU's batch as the first layer sees it: the source's fp32 [n][c][inner]
 * in the first layer's form (form_ref.h) */
static void *cpu_batch(const Case *k, RtDType dt, uint64_t seed, const int64_t *idx, float *y)
{
    RtDataset ds;
    int64_t sample = k->c * k->inner;
    rt_data_synthetic(&ds, sample, k->classes, seed, RT_SYNTHETIC_TRAIN, RT_SYNTHETIC_VAL);
    float *x = malloc((size_t)(k->n * sample) * sizeof *x);
    assert_non_null(x);
    ds.fill(&ds, k->split, idx, k->n, x, y);
    void *out = form_ref(x, k->n, k->c, k->cp, k->inner, dt, k->nhwc);
    assert_non_null(out);
    free(x);
    return out;
}

/* The CPU device's synthetic_batch (the CPU twin, which the loop runs on the
 * CPU) in the unpadded form: the same bytes as the kernel's */
static void cpu_twin(const Case *k, RtDType dt, uint64_t seed, const int64_t *idx,
                     const char *kernel_x)
{
    char err[256];
    RtDevice *d = rt_device_cpu_open(err, sizeof err);
    assert_non_null(d);
    size_t nout = (size_t)(k->n * k->c * k->inner) * rt_dtype_size(dt);
    char *x = malloc(nout);
    float *y = malloc((size_t)k->n * sizeof *y);
    assert_non_null(x), assert_non_null(y);
    RtSyntheticKeys key = rt_synthetic_keys(seed, k->split);
    RtDevSynth s = {.n = (size_t)k->n,
                    .sample = (size_t)(k->c * k->inner),
                    .key_x = key.x,
                    .key_y = key.y,
                    .classes = (uint64_t)k->classes,
                    .form = {.c = (size_t)k->c, .dt = dt, .nhwc = k->nhwc}};
    rt_dev_synthetic_batch(d, &s, idx, x, y);
    assert_memory_equal(x, kernel_x, nout);
    free(x), free(y);
    rt_device_close(d);
}

static void run_case(const Case *k, RtDType dt, uint64_t seed)
{
    size_t es = rt_dtype_size(dt), nout = (size_t)(k->n * k->cp * k->inner);
    int64_t *idx = dev((size_t)k->n * sizeof *idx, "idx");
    for (int64_t j = 0; j < k->n; j++) /* shuffled, and past 2^32 elements */
        idx[j] = j % 3 == 2 ? (int64_t)3000000000 + j : (k->n - j) * 7 % 10240;
    float *want_y = malloc((size_t)k->n * sizeof *want_y);
    void *want = cpu_batch(k, dt, seed, idx, want_y);
    char *x = dev(nout * es, "x");
    float *y = dev((size_t)k->n * sizeof *y, "y");
    memset(x, 0x5a, nout * es); /* garbage the kernel must overwrite, padding too */
    RtSyntheticKeys key = rt_synthetic_keys(seed, k->split);
    AmpcSynthBatch b = {(size_t)k->n, (size_t)k->c, (size_t)k->cp, (size_t)k->inner,    k->nhwc,
                        (int)dt,      key.x,        key.y,         (uint64_t)k->classes};
    long before = ampc_emu_launches();
    assert_int_equal(ampc_cu_synthetic_batch(NULL, &b, idx, x, k->labels ? y : NULL), 0);
    assert_int_equal(ampc_emu_launches(), before + 1);
    for (size_t i = 0; i < nout; i++)
        if (memcmp(x + i * es, (char *)want + i * es, es))
            fail_msg("%s %s c=%lld cp=%lld: element %zu differs from the CPU source's",
                     rt_dtype_name(dt), k->nhwc ? "NHWC" : "NCHW", (long long)k->c,
                     (long long)k->cp, i);
    if (k->labels)
        assert_memory_equal(y, want_y, (size_t)k->n * sizeof *y);
    if (k->cp == k->c) /* the forms the loop asks for: the data's channels */
        cpu_twin(k, dt, seed, idx, x);
    ampc_emu_free(idx), ampc_emu_free(x), ampc_emu_free(y);
    free(want), free(want_y);
}

static void test_batch_is_the_cpu_source(void **state)
{
    (void)state;
    static const Case cases[] = {
        {5, 3, 3, 7 * 5, 10, false, true, RT_SPLIT_TRAIN}, /* NCHW, the data buffer's shape */
        {5, 3, 4, 7 * 5, 10, true, true, RT_SPLIT_TRAIN},  /* a 16-bit NHWC stem: 3 -> 4 */
        {4, 3, 8, 6 * 3, 1000, true, false, RT_SPLIT_VAL}, /* 3 -> 8, no labels */
        {3, 5, 5, 11, 7, true, true, RT_SPLIT_VAL},        /* NHWC unpadded */
        {2, 1, 1, 64, 2, false, true, RT_SPLIT_TRAIN},     /* a flat sample */
    };
    static const RtDType dts[] = {RT_F32, RT_F16, RT_BF16};
    int ran = 0;
    EMU_PASSES for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) for (int t = 0; t < 3;
                                                                                t++, ran++)
        run_case(&cases[c], dts[t], 42 + (uint64_t)c);
    assert_int_equal(ran, 3 * 5 * 3);
}

/* an empty batch launches nothing */
static void test_empty(void **state)
{
    (void)state;
    AmpcSynthBatch b = {0, 3, 4, 9, 0, AMPC_DT_F16, 1, 2, 10};
    long before = ampc_emu_launches();
    assert_int_equal(ampc_cu_synthetic_batch(NULL, &b, NULL, NULL, NULL), 0);
    assert_int_equal(ampc_emu_launches(), before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generator_pinned),
        cmocka_unit_test(test_batch_is_the_cpu_source),
        cmocka_unit_test(test_empty),
    };
    return cmocka_run_group_tests(tests, emu_test_setup, emu_test_teardown);
}
