/*
 * test_device.c - the device interface (runtime/device.h) on the CPU device
 * (runtime/cpu/device.c): every call's contract (alloc alignment, zeroing
 * and its failure message, copies both ways, fill, the finite flag over
 * fp32/fp16/bf16 gradients with an inf or NaN planted anywhere, the fused
 * optimizer step against optim.c's, events (and the lagging mode's),
 * all-reduce and broadcast on one device, setup's idempotence, --sim-ranks'
 * device around it), the trainer's staging path, and the loop
 * built on the interface (train.c) against a reference loop that calls the
 * kernels directly (ref_loop.h): the trained parameters bit for bit, fp32,
 * fp16 and bf16, SGD momentum and Adam, with a skipped overflow step.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device.h"
#include "kernels/half.h"
#include "model_tiny.c"
#include "ref_loop.h"
#include "train.h"
#include "cpu/cpu.h"
#include "data/data.h"
#include "dist/fwd.h"
#include "dist/mpi_rt.h"

static RtDevice *open_cpu(void)
{
    char err[256];
    RtDevice *d = rt_device_cpu_open(err, sizeof err);
    if (!d)
        fail_msg("%s", err);
    return d;
}

/* ---- memory ------------------------------------------------------------------------- */

static void test_alloc_aligned_zeroed(void **state)
{
    (void)state;
    RtDevice *d = open_cpu();
    char err[256];
    static const size_t sizes[] = {0, 1, 2, 63, 64, 65, 1000, 4096, 100003, 1 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        /* dirty a block of the same size first, so a reused one must be cleared */
        unsigned char *p = rt_dev_alloc(d, sizes[k], "dirty", err, sizeof err);
        assert_non_null(p);
        rt_dev_fill(d, p, RT_F32, sizes[k] / 4, -3.5f);
        rt_dev_free(d, p);
        p = rt_dev_alloc(d, sizes[k], "a tensor", err, sizeof err);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % RT_DEV_ALIGN, 0);
        unsigned char back[64];
        for (size_t at = 0; at < sizes[k]; at += sizeof back) {
            size_t n = sizes[k] - at < sizeof back ? sizes[k] - at : sizeof back;
            memset(back, 0xee, sizeof back);
            rt_dev_to_host(d, back, p + at, n);
            for (size_t i = 0; i < n; i++)
                assert_int_equal(back[i], 0);
        }
        rt_dev_free(d, p);
    }
    rt_dev_free(d, NULL); /* nothing */
    void *h = rt_dev_host_alloc(d, 100, "staging", err, sizeof err);
    assert_non_null(h);
    assert_int_equal((uintptr_t)h % RT_DEV_ALIGN, 0);
    for (int i = 0; i < 100; i++)
        assert_int_equal(((unsigned char *)h)[i], 0);
    rt_dev_host_free(d, h);
    rt_device_close(d);
}

static void test_alloc_failure_message(void **state)
{
    (void)state;
    RtDevice *d = open_cpu();
    char err[256] = "";
    /* sizes whose rounding to the alignment overflows: refused before any
     * allocator sees them */
    assert_null(rt_dev_alloc(d, SIZE_MAX, "the arena", err, sizeof err));
    assert_non_null(strstr(err, "out of memory"));
    assert_non_null(strstr(err, "the arena"));
    char bytes[32];
    snprintf(bytes, sizeof bytes, "%zu bytes", (size_t)SIZE_MAX);
    assert_non_null(strstr(err, bytes));
    err[0] = 0;
    assert_null(rt_dev_host_alloc(d, SIZE_MAX - 1, "the batch", err, sizeof err));
    assert_non_null(strstr(err, "out of memory for the batch"));
    rt_device_close(d);
}

static void test_copies(void **state)
{
    (void)state;
    RtDevice *d = open_cpu();
    char err[256];
    enum { NB = 1000 };
    unsigned char src[NB], back[NB];
    for (int i = 0; i < NB; i++)
        src[i] = (unsigned char)(i * 37 + 11);
    unsigned char *p = rt_dev_alloc(d, NB, "x", err, sizeof err);
    assert_non_null(p);
    rt_dev_to_device(d, p, src, NB);
    memset(back, 0, NB);
    rt_dev_to_host(d, back, p, NB);
    assert_memory_equal(back, src, NB);
    /* a part, at an offset into the block (device pointer arithmetic) */
    unsigned char part[7] = {1, 2, 3, 4, 5, 6, 7};
    rt_dev_to_device(d, p + 501, part, sizeof part);
    rt_dev_to_host(d, back, p, NB);
    assert_memory_equal(back + 501, part, sizeof part);
    assert_memory_equal(back, src, 501);
    assert_memory_equal(back + 508, src + 508, NB - 508);
    memset(back, 0, NB);
    rt_dev_to_host(d, back + 3, p + 500, 9);
    assert_int_equal(back[3], src[500]);
    assert_memory_equal(back + 4, part, sizeof part);
    assert_int_equal(back[11], src[508]);
    assert_int_equal(back[12], 0);
    rt_dev_to_device(d, p, src, 0); /* zero bytes: nothing */
    rt_dev_free(d, p);
    rt_device_close(d);
}

static void test_fill(void **state)
{
    (void)state;
    RtDevice *d = open_cpu();
    char err[256];
    enum { NE = 33 };
    float f[NE + 1];
    uint16_t h[NE + 1];
    float *pf = rt_dev_alloc(d, (NE + 1) * sizeof(float), "f", err, sizeof err);
    uint16_t *ph = rt_dev_alloc(d, (NE + 1) * sizeof(uint16_t), "h", err, sizeof err);
    assert_non_null(pf);
    assert_non_null(ph);
    rt_dev_fill(d, pf, RT_F32, NE, 1.5f);
    rt_dev_to_host(d, f, pf, sizeof f);
    for (int i = 0; i < NE; i++)
        assert_true(f[i] == 1.5f);
    assert_true(f[NE] == 0.0f); /* not past n */
    rt_dev_fill(d, ph, RT_F16, NE, 1.5f);
    rt_dev_to_host(d, h, ph, sizeof h);
    for (int i = 0; i < NE; i++)
        assert_int_equal(h[i], 0x3e00);
    assert_int_equal(h[NE], 0);
    rt_dev_fill(d, ph, RT_BF16, NE, -2.0f);
    rt_dev_to_host(d, h, ph, sizeof h);
    for (int i = 0; i < NE; i++)
        assert_int_equal(h[i], 0xc000);
    /* one rounding, as rt_from_f32: 1/3 in fp16, NaN as the quiet NaN */
    rt_dev_fill(d, ph + 1, RT_F16, 1, 1.0f / 3.0f);
    rt_dev_fill(d, ph + 2, RT_F16, 1, NAN);
    rt_dev_fill(d, ph + 3, RT_BF16, 1, NAN);
    rt_dev_to_host(d, h, ph, sizeof h);
    assert_int_equal(h[0], 0xc000);
    assert_int_equal(h[1], ampc_float_to_half(1.0f / 3.0f));
    assert_int_equal(h[2], 0x7e00);
    assert_int_equal(h[3], 0x7fc0);
    assert_int_equal(h[4], 0xc000);
    rt_dev_free(d, pf);
    rt_dev_free(d, ph);
    rt_device_close(d);
}

/* ---- a model with fp32, fp16 and bf16 gradients -------------------------------------- */

enum { NP = 4, NG = 37 };
static const RtParam mix_params[NP] = {
    {"a_weight", RT_PK_WEIGHT, RT_F32, false, 1, {NG}, NG, "default", 1, 1, 0, NP + 0, RT_LAYOUT_NCHW},
    {"b_weight", RT_PK_WEIGHT, RT_F16, true, 1, {NG}, NG, "default", 1, 1, 1, NP + 1, RT_LAYOUT_NCHW},
    {"c_weight", RT_PK_WEIGHT, RT_BF16, true, 1, {NG}, NG, "default", 1, 1, 2, NP + 2, RT_LAYOUT_NCHW},
    {"d_moving_mean", RT_PK_MOVING_MEAN, RT_F32, false, 1, {NG}, NG, "default", 0, 1, 3, -1, RT_LAYOUT_NCHW},
};
static const RtBuffer mix_buffers[2 * NP + 3] = {
    {"a_weight", RT_F32, NG, 0, false, 0, 0}, {"b_weight", RT_F16, NG, 0, false, 0, 0},
    {"c_weight", RT_BF16, NG, 0, false, 0, 0}, {"d_moving_mean", RT_F32, NG, 0, false, 0, 0},
    {"ga", RT_F32, NG, 0, false, 0, 0}, {"gb", RT_F16, NG, 0, false, 0, 0},
    {"gc", RT_BF16, NG, 0, false, 0, 0}, {"unused", RT_F32, NG, 0, false, 0, 0},
    {"data", RT_F32, 0, 4, false, 0, 0}, {"label", RT_F32, 0, 1, false, 0, 0},
    {"prob", RT_F32, 0, 3, false, 0, 0},
};
static const RtModel mix = {
    .name = "device_test", .nparams = NP, .params = mix_params, .nbuffers = 2 * NP + 3,
    .buffers = mix_buffers, .data = 2 * NP, .label = 2 * NP + 1, .prob_train = 2 * NP + 2,
    .prob_infer = 2 * NP + 2, .data_rank = 1, .data_shape = {4}, .classes = 3,
};

static void mix_trainer(RtTrainer *t, int nstate)
{
    char err[256];
    if (!rt_trainer_init(t, &mix, 2, nstate, NULL, err, sizeof err) ||
        !rt_trainer_init_params(t, "uniform(scale=0.5)", 7, err, sizeof err) ||
        !rt_trainer_setup(t, err, sizeof err))
        fail_msg("%s", err);
    /* every gradient finite and nonzero */
    for (int i = 0; i < NP; i++)
        if (mix_params[i].grad >= 0)
            rt_dev_fill(t->dev, t->ctx.buf[mix_params[i].grad],
                        mix_buffers[mix_params[i].grad].dtype, NG, 0.25f * (float)(i + 1));
}

static void test_finite_flag(void **state)
{
    (void)state;
    RtTrainer t;
    mix_trainer(&t, 1);
    RtDevice *d = t.dev;
    rt_dev_check_grads(d);
    assert_true(rt_dev_read_flag(d));
    assert_int_equal(rt_dev_first_nonfinite(d), -1);
    static const float bad[] = {NAN, INFINITY, -INFINITY};
    static const int where[] = {0, 17, NG - 1};
    for (int i = 0; i < NP; i++) {
        const RtParam *p = &mix_params[i];
        if (p->grad < 0)
            continue;
        RtDType dt = mix_buffers[p->grad].dtype;
        char *g = t.ctx.buf[p->grad];
        for (int b = 0; b < 3; b++)
            for (int w = 0; w < 3; w++) {
                size_t at = (size_t)where[w] * rt_dtype_size(dt);
                rt_dev_fill(d, g + at, dt, 1, bad[b]);
                rt_dev_check_grads(d);
                if (rt_dev_read_flag(d))
                    fail_msg("%s (%s): %g at %d not found", p->name, rt_dtype_name(dt),
                             (double)bad[b], where[w]);
                assert_int_equal(rt_dev_first_nonfinite(d), i);
                rt_dev_check_finite(d, g, NG, dt);
                assert_false(rt_dev_read_flag(d));
                rt_dev_fill(d, g + at, dt, 1, 1.0f);
                rt_dev_check_grads(d);
                assert_true(rt_dev_read_flag(d));
            }
    }
    /* the largest finite values are finite; the unused buffer is not a gradient */
    rt_dev_fill(d, t.ctx.buf[NP + 1], RT_F16, 1, 65504.0f);
    rt_dev_fill(d, t.ctx.buf[NP + 3], RT_F32, NG, NAN);
    rt_dev_check_grads(d);
    assert_true(rt_dev_read_flag(d));
    rt_dev_check_finite(d, t.ctx.buf[NP + 3], 0, RT_F32); /* no elements: finite */
    assert_true(rt_dev_read_flag(d));
    rt_trainer_free(&t);
}

/* The device's optimizer is optim.c's, and its flag the update's fused check. */
static void test_optim_step(void **state)
{
    (void)state;
    RtTrainer a, b;
    mix_trainer(&a, 2);
    mix_trainer(&b, 2);
    RtOptConfig oc = {.kind = RT_OPT_ADAM, .lr = 0.01f, .wd = 1e-4f, .rescale_grad = 0.5f,
                      .clip_gradient = -1, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-8f,
                      .t = 1};
    for (int k = 0; k < 3; k++, oc.t++) {
        rt_dev_optim_step(a.dev, a.state, a.state2, &oc);
        assert_true(rt_dev_read_flag(a.dev));
        assert_true(rt_optim_step2(&mix, &b.ctx, b.state, b.state2, &oc));
    }
    for (int i = 0; i < NP; i++) {
        const RtParam *p = &mix_params[i];
        assert_memory_equal(a.ctx.buf[p->buffer], b.ctx.buf[p->buffer],
                            NG * rt_dtype_size(p->dtype));
        if (p->has_master)
            assert_memory_equal(a.ctx.master[i], b.ctx.master[i], NG * sizeof(float));
        if (p->grad >= 0) {
            assert_memory_equal(a.state[i], b.state[i], NG * sizeof(float));
            assert_memory_equal(a.state2[i], b.state2[i], NG * sizeof(float));
        }
    }
    /* a NaN gradient: the update is applied and the flag says so */
    rt_dev_fill(a.dev, a.ctx.buf[NP + 2], RT_BF16, 1, NAN);
    rt_dev_optim_step(a.dev, a.state, a.state2, &oc);
    assert_false(rt_dev_read_flag(a.dev));
    rt_trainer_free(&a);
    rt_trainer_free(&b);
}

/* Setup twice on the same buffers changes nothing; on moved buffers it
 * rebuilds (the finite check follows the gradient to its new place). */
static void test_setup_idempotent(void **state)
{
    (void)state;
    RtTrainer t;
    mix_trainer(&t, 1);
    char err[256];
    assert_true(rt_trainer_setup(&t, err, sizeof err));
    assert_true(rt_trainer_setup(&t, err, sizeof err));
    rt_dev_check_grads(t.dev);
    assert_true(rt_dev_read_flag(t.dev));
    void *other = rt_dev_alloc(t.dev, NG * sizeof(float), "moved", err, sizeof err);
    assert_non_null(other);
    rt_dev_fill(t.dev, other, RT_F32, NG, INFINITY);
    void *was = t.ctx.buf[NP + 0];
    t.ctx.buf[NP + 0] = other;
    rt_dev_check_grads(t.dev); /* not set up again: the old gradient */
    assert_true(rt_dev_read_flag(t.dev));
    assert_true(rt_trainer_setup(&t, err, sizeof err));
    rt_dev_check_grads(t.dev);
    assert_false(rt_dev_read_flag(t.dev));
    assert_int_equal(rt_dev_first_nonfinite(t.dev), 0);
    t.ctx.buf[NP + 0] = was;
    assert_true(rt_trainer_setup(&t, err, sizeof err));
    rt_dev_check_grads(t.dev);
    assert_true(rt_dev_read_flag(t.dev));
    rt_dev_free(t.dev, other);
    rt_trainer_free(&t);
}

static void test_events(void **state)
{
    (void)state;
    RtDevice *d = open_cpu();
    RtDevEvent never = {0}, e1 = {0}, e2 = {0};
    assert_true(rt_dev_event_done(d, &never)); /* never recorded: complete */
    rt_dev_event_record(d, &e1);
    rt_dev_event_record(d, &e2);
    assert_true(e1.seq > 0 && e2.seq > e1.seq); /* recorded in order */
    rt_dev_event_wait(d, &e2);
    assert_true(rt_dev_event_done(d, &e1));
    assert_true(rt_dev_event_done(d, &e2));
    rt_dev_synchronize(d);
    rt_device_close(d);
}

/* The lagging mode (a device a step behind the host): an event completes
 * once the host has ended the step after its own, or waited for it; each
 * wait for an incomplete event is counted, none for a complete one. */
static void test_events_lagging(void **state)
{
    (void)state;
    RtDevice *d = open_cpu();
    char err[256];
    RtDevLsInit in = {.s = {.scale = 1.0f}, .rule = ampc_loss_scale_rule_default(), .batch = 1};
    assert_true(rt_dev_ls_init(d, &in, err, sizeof err));
    rt_device_cpu_lagging(d, true);
    RtDevEvent never = {0}, e1 = {0}, e2 = {0}, e3 = {0};
    assert_true(rt_dev_event_done(d, &never));
    rt_dev_event_record(d, &e1); /* step 0 */
    assert_false(rt_dev_event_done(d, &e1));
    rt_dev_ls_update(d); /* step 0 ends: the device is still in it */
    assert_false(rt_dev_event_done(d, &e1));
    rt_dev_event_record(d, &e2); /* step 1 */
    rt_dev_ls_update(d);         /* step 1 ends: step 0's work is done */
    assert_true(rt_dev_event_done(d, &e1));
    assert_false(rt_dev_event_done(d, &e2));
    uint64_t syncs = d->syncs;
    rt_dev_event_wait(d, &e1); /* complete: no wait */
    assert_int_equal(d->syncs, syncs);
    rt_dev_event_record(d, &e3);
    rt_dev_event_wait(d, &e2); /* a real wait, counted; e3 after it stays */
    assert_int_equal(d->syncs, syncs + 1);
    assert_true(rt_dev_event_done(d, &e2));
    assert_false(rt_dev_event_done(d, &e3));
    RtDevLsState st;
    rt_dev_ls_read(d, &st, NULL, 0); /* a read-back waits for everything */
    assert_true(rt_dev_event_done(d, &e3));
    rt_dev_event_record(d, &e3);
    rt_dev_synchronize(d);
    assert_true(rt_dev_event_done(d, &e3));
    rt_device_cpu_lagging(d, false); /* synchronous again: every event done */
    rt_dev_event_record(d, &e3);
    assert_true(rt_dev_event_done(d, &e3));
    rt_device_close(d);
}

/* --sim-ranks' device (dist/sim.c): its world is the K ranks and its rank
 * the one computing now, advanced by each all-reduce; after the last rank's
 * the gradients hold the fp32 sum of every rank's in rank order, rounded to
 * their dtype once. */
static void test_sim_ranks(void **state)
{
    (void)state;
    char err[256];
    RtDevice *d = rt_sim_wrap(open_cpu(), 3, err, sizeof err);
    assert_non_null(d);
    assert_int_equal(rt_dev_world_size(d), 3);
    enum { N = 5000 }; /* more than one chunk of the wrapper's copies */
    uint16_t *g = rt_dev_alloc(d, N * sizeof *g, "fp16 gradient", err, sizeof err);
    float *f = rt_dev_alloc(d, N * sizeof *f, "fp32 gradient", err, sizeof err);
    assert_non_null(g);
    assert_non_null(f);
    RtDevTensor bucket[2] = {{g, N, RT_F16}, {f, N, RT_F32}};
    const float v[3] = {1.0f, 0.0004f, 0.0004f}; /* each rank's value */
    for (int step = 0; step < 2; step++)
        for (int r = 0; r < 3; r++) {
            assert_int_equal(rt_dev_rank(d), r);
            for (int i = 0; i < N; i++) {
                g[i] = ampc_float_to_half(v[r] * (float)(1 + i % 3));
                f[i] = v[r] * (float)(1 + i % 7);
            }
            assert_true(rt_dev_allreduce(d, bucket, 2, RT_REDUCE_SUM, err, sizeof err));
        }
    assert_int_equal(rt_dev_rank(d), 0); /* the next step starts at rank 0 */
    for (int i = 0; i < N; i++) {
        float h[3], s = 0.0f;
        for (int r = 0; r < 3; r++) {
            h[r] = ampc_half_to_float(ampc_float_to_half(v[r] * (float)(1 + i % 3)));
            s = r == 0 ? h[r] : s + h[r];
        }
        /* ranks 1 and 2 hold the rank's value in the buffer: the sum is
         * rank 0's + rank 1's + rank 2's, though the buffer was overwritten */
        assert_int_equal(g[i], ampc_float_to_half(s));
        float w = v[0] * (float)(1 + i % 7);
        w += v[1] * (float)(1 + i % 7);
        w += v[2] * (float)(1 + i % 7);
        assert_memory_equal(&f[i], &w, sizeof w);
    }
    RtDevTensor none = {NULL, 1, RT_F32};
    assert_false(rt_dev_allreduce(d, &none, -1, RT_REDUCE_SUM, err, sizeof err));
    assert_false(rt_dev_allreduce(d, bucket, 2, RT_REDUCE_MEAN, err, sizeof err));
    assert_non_null(strstr(err, "sum"));
    rt_dev_free(d, g);
    rt_dev_free(d, f);
    rt_device_close(d); /* closes the CPU device too (ASan: nothing leaks) */
    assert_null(rt_sim_wrap(NULL, 2, err, sizeof err));
    RtDevice *one = open_cpu();
    assert_null(rt_sim_wrap(one, 1, err, sizeof err));
    rt_device_close(one);
}

/* The synthetic batch the device makes (synthetic_batch, the loop's on the
 * CPU device and, wrapped, --sim-ranks') equals the source's host fill bit
 * for bit, the labels rt_synthetic_labels gives the host too; a device
 * without the call is asked for none (the wrapper's follows its inner's). */
static void test_synthetic_batch(void **state)
{
    (void)state;
    enum { SAMPLE = 3 * 5 * 7, N = 6 };
    RtDataset ds;
    rt_data_synthetic(&ds, SAMPLE, 1000, 42, RT_SYNTHETIC_TRAIN, RT_SYNTHETIC_VAL);
    assert_true(rt_data_is_synthetic(&ds));
    const int64_t idx[N] = {0, 9, 10239, 3, 3, 4000};
    static float hx[N * SAMPLE], hy[N], ly[N];
    ds.fill(&ds, RT_SPLIT_TRAIN, idx, N, hx, hy);
    rt_synthetic_labels(&ds, RT_SPLIT_TRAIN, idx, N, ly);
    assert_memory_equal(ly, hy, sizeof hy);
    char err[256];
    RtDevice *d = rt_sim_wrap(open_cpu(), 2, err, sizeof err);
    assert_non_null(d);
    assert_true(rt_dev_has_synthetic(d));
    float *x = rt_dev_alloc(d, sizeof hx, "x", err, sizeof err);
    float *y = rt_dev_alloc(d, sizeof hy, "y", err, sizeof err);
    int64_t *di = rt_dev_alloc(d, sizeof idx, "idx", err, sizeof err);
    assert_true(x && y && di);
    rt_dev_to_device(d, di, idx, sizeof idx);
    RtSyntheticKeys k = rt_synthetic_keys(42, RT_SPLIT_TRAIN);
    RtDevSynth s = {.n = N, .sample = SAMPLE, .key_x = k.x, .key_y = k.y, .classes = 1000};
    rt_dev_synthetic_batch(d, &s, di, x, y);
    assert_memory_equal(x, hx, sizeof hx);
    assert_memory_equal(y, hy, sizeof hy);
    assert_false(memcmp(x, x + SAMPLE, SAMPLE * sizeof *x) == 0); /* samples differ */
    rt_dev_free(d, x);
    rt_dev_free(d, y);
    rt_dev_free(d, di);
    rt_device_close(d);
    RtDevice *cpu = open_cpu();
    RtDeviceOps none = *cpu->ops;
    rt_device_close(cpu);
    none.synthetic_batch = NULL;
    RtDevice bare = {.ops = &none};
    assert_false(rt_dev_has_synthetic(&bare));
}

/* A raw batch the device uploads and normalises (ingest, the loop's for a
 * source with fill_raw, and, wrapped, --sim-ranks'): the source's floats
 * (rt_ingest_floats, what fill gives), in the data input's own form and,
 * cast and laid out as the program's own calls would (rt_cast_forward,
 * rt_layout_convert), in a first layer's fp16 NHWC; the labels; the copy's
 * event recorded; the host's buffers unchanged.  The synthetic batch in the
 * same form likewise.  A device without the call is asked for none. */
static void test_ingest_batch(void **state)
{
    (void)state;
    enum { C = 3, INNER = 5 * 7, SAMPLE = C * INNER, N = 4 };
    static uint8_t raw[N * SAMPLE];
    static float hy[N], want[N * SAMPLE], got[N * SAMPLE];
    static uint16_t cast[N * SAMPLE], laid[N * SAMPLE], x16[N * SAMPLE];
    for (int i = 0; i < N * SAMPLE; i++)
        raw[i] = (uint8_t)(i * 29 + 3);
    for (int j = 0; j < N; j++)
        hy[j] = (float)(9 - j);
    RtIngestNorm g = {
        .channels = 3, .div = 255.0f, .mean = {0.5f, 0.4f, 0.3f}, .std = {0.2f, 0.25f, 0.3f}};
    rt_ingest_floats(&g, raw, N, SAMPLE, want);
    rt_cast_forward(N * SAMPLE, RT_F32, want, RT_F16, cast);
    rt_layout_convert(N, C, INNER, RT_F16, cast, laid, RT_LAYOUT_NHWC);
    char err[256];
    RtDevice *d = rt_sim_wrap(open_cpu(), 2, err, sizeof err);
    assert_non_null(d);
    assert_true(rt_dev_has_ingest(d));
    uint8_t *hraw = rt_dev_host_alloc(d, sizeof raw, "raw", err, sizeof err);
    float *hlab = rt_dev_host_alloc(d, sizeof hy, "labels", err, sizeof err);
    void *scratch = rt_dev_alloc(d, rt_dev_ingest_scratch_bytes(N, SAMPLE), "s", err, sizeof err);
    void *x = rt_dev_alloc(d, sizeof got, "x", err, sizeof err);
    float *y = rt_dev_alloc(d, sizeof hy, "y", err, sizeof err);
    assert_true(hraw && hlab && scratch && x && y);
    memcpy(hraw, raw, sizeof raw);
    memcpy(hlab, hy, sizeof hy);
    RtDevIngest in = {.n = N,
                      .sample = SAMPLE,
                      .host_raw = hraw,
                      .host_y = hlab,
                      .scratch = scratch,
                      .x = x,
                      .y = y,
                      .norm = g,
                      .form = {.c = C}};
    RtDevEvent copied = {0};
    rt_dev_ingest(d, &in, &copied);
    assert_true(copied.seq > 0);
    rt_dev_to_host(d, got, x, sizeof got);
    assert_memory_equal(got, want, sizeof want);
    assert_memory_equal(y, hy, sizeof hy);
    in.form = (RtDevForm){.c = C, .dt = RT_F16, .nhwc = true};
    in.y = NULL;
    rt_dev_ingest(d, &in, &copied);
    rt_dev_to_host(d, x16, x, sizeof x16);
    assert_memory_equal(x16, laid, sizeof laid);
    assert_memory_equal(hraw, raw, sizeof raw); /* the host's buffers are the loop's */
    assert_memory_equal(hlab, hy, sizeof hy);
    /* the synthetic batch in that form: the source's fill, cast and laid out */
    RtDataset ds;
    rt_data_synthetic(&ds, SAMPLE, 10, 42, RT_SYNTHETIC_TRAIN, RT_SYNTHETIC_VAL);
    const int64_t idx[N] = {7, 0, 10000, 7};
    ds.fill(&ds, RT_SPLIT_TRAIN, idx, N, want, hy);
    rt_cast_forward(N * SAMPLE, RT_F32, want, RT_F16, cast);
    rt_layout_convert(N, C, INNER, RT_F16, cast, laid, RT_LAYOUT_NHWC);
    int64_t *di = rt_dev_alloc(d, sizeof idx, "idx", err, sizeof err);
    assert_non_null(di);
    rt_dev_to_device(d, di, idx, sizeof idx);
    RtSyntheticKeys k = rt_synthetic_keys(42, RT_SPLIT_TRAIN);
    RtDevSynth s = {.n = N,
                    .sample = SAMPLE,
                    .key_x = k.x,
                    .key_y = k.y,
                    .classes = 10,
                    .form = {.c = C, .dt = RT_F16, .nhwc = true}};
    rt_dev_synthetic_batch(d, &s, di, x, y);
    rt_dev_to_host(d, x16, x, sizeof x16);
    assert_memory_equal(x16, laid, sizeof laid);
    assert_memory_equal(y, hy, sizeof hy);
    rt_dev_host_free(d, hraw), rt_dev_host_free(d, hlab);
    rt_dev_free(d, scratch), rt_dev_free(d, x), rt_dev_free(d, y), rt_dev_free(d, di);
    rt_device_close(d);
    RtDevice *cpu = open_cpu();
    RtDeviceOps none = *cpu->ops;
    rt_device_close(cpu);
    none.ingest = NULL;
    RtDevice bare = {.ops = &none};
    assert_false(rt_dev_has_ingest(&bare));
    RtDeviceOps wrapped = rt_fwd_ops("wrapper", &bare, NULL); /* the wrappers' table */
    assert_null(wrapped.ingest);
    assert_non_null(wrapped.to_device);
}

/* The capture mode: between step_begin and ls_update every wait, read-back,
 * allocation, free and set_flag is counted and the first named; queued work
 * (copies to the device, fills, the update) is not; outside a step nothing
 * is; the mode off counts nothing. */
static void test_capture_mode(void **state)
{
    (void)state;
    char err[256];
    RtDevice *d = open_cpu();
    float *p = rt_dev_alloc(d, 64, "p", err, sizeof err), h[4] = {1, 2, 3, 4}, q[4];
    assert_non_null(p);
    rt_dev_capture_mode(d, true);
    rt_dev_to_host(d, q, p, sizeof q); /* before the step: allowed */
    rt_dev_step_begin(d, false);
    rt_dev_to_device(d, p, h, sizeof h);
    rt_dev_fill(d, p, RT_F32, 4, 0.5f);
    RtDevEvent e = {0};
    rt_dev_event_record(d, &e);
    assert_int_equal(d->capture_errors, 0);
    (void)rt_dev_read_flag(d);
    assert_int_equal(d->capture_errors, 1);
    assert_string_equal(d->capture_what, "read_flag");
    void *more = rt_dev_alloc(d, 64, "more", err, sizeof err);
    rt_dev_free(d, more);
    rt_dev_event_wait(d, &e);
    rt_dev_synchronize(d);
    rt_dev_to_host(d, q, p, sizeof q);
    rt_dev_set_flag(d, true);
    assert_int_equal(d->capture_errors, 7);
    assert_string_equal(d->capture_what, "read_flag"); /* the first */
    rt_dev_ls_update(d);
    rt_dev_synchronize(d); /* after the step's end: allowed */
    assert_int_equal(d->capture_errors, 7);
    rt_dev_capture_mode(d, false);
    rt_dev_step_begin(d, false);
    (void)rt_dev_read_flag(d);
    assert_int_equal(d->capture_errors, 0);
    rt_dev_ls_update(d);
    rt_dev_free(d, p);
    rt_device_close(d);
}

/* The CPU device's emulated CUDA graph (--cuda-graph 1): the captured calls
 * do not run; graph_end runs them once and each replay again, the step's
 * number and --inject-inf-at-step coming from the device's step state; a
 * wait in the capture is an error as in the capture mode; a value the host
 * changed since the capture (RtCtx.step passed by value, the optimizer's
 * settings) is refused by name; a capture without its step's end, or a
 * replay without a graph, makes none. */
static uint64_t graph_steps[8];
static float graph_scales[8];
static int graph_calls;
static void graph_fn(RtCtx *ctx)
{
    if (graph_calls < 8) {
        graph_steps[graph_calls] = rt_ctx_step(ctx);
        graph_scales[graph_calls] = ctx->step_state->scale;
    }
    graph_calls++;
}

static void test_graph_emulation(void **state)
{
    (void)state;
    char err[256];
    RtDevice *d = open_cpu();
    assert_true(rt_dev_has_graph(d));
    RtDevLsInit li = {.s = {.scale = 8}, .rule = ampc_loss_scale_rule_default(), .batch = 4,
                      .step = 10, .inject_inf = true, .inject_inf_at = 12};
    assert_true(rt_dev_ls_init(d, &li, err, sizeof err));
    RtCtx ctx = {.step_state = rt_dev_step_state(d), .step = 10};
    RtOptConfig oc = {.kind = RT_OPT_SGD, .lr = 0.1f, .clip_gradient = -1};
    float *p = rt_dev_alloc(d, 64, "p", err, sizeof err), q[4];
    assert_non_null(p);
    graph_calls = 0;
    assert_false(rt_dev_graph_replay(d, err, sizeof err)); /* no graph yet */
    assert_non_null(strstr(err, "without a captured graph"));
    assert_true(rt_dev_graph_begin(d, err, sizeof err));
    rt_dev_step_begin(d, false);
    rt_dev_launch(d, graph_fn, &ctx);
    rt_dev_fill(d, p, RT_F32, 4, 2.5f);
    rt_dev_train_update(d, NULL, NULL, &oc);
    rt_dev_ls_update(d);
    assert_int_equal(d->capture_errors, 0);
    assert_int_equal(graph_calls, 0); /* captured, not run */
    rt_dev_to_host(d, q, p, sizeof q);
    assert_float_equal(q[0], 0.0f, 0);
    assert_true(rt_dev_graph_end(d, err, sizeof err)); /* launched once: step 10 */
    rt_dev_to_host(d, q, p, sizeof q);
    assert_float_equal(q[3], 2.5f, 0);
    for (int k = 0; k < 3; k++) /* steps 11, 12 (injected), 13 */
        assert_true(rt_dev_graph_replay(d, err, sizeof err));
    assert_int_equal(d->graph_replays, 3);
    assert_int_equal(graph_calls, 4);
    for (int k = 0; k < 4; k++) {
        assert_int_equal(graph_steps[k], 10 + k);
        assert_true(k == 2 ? isinf(graph_scales[k]) : graph_scales[k] == 8.0f);
    }
    RtDevLsState st;
    rt_dev_ls_read(d, &st, NULL, 0);
    assert_int_equal(st.steps, 4);
    /* what the host passes by value, changed since the capture */
    ctx.step = 14;
    assert_false(rt_dev_graph_replay(d, err, sizeof err));
    assert_non_null(strstr(err, "RtCtx.step,"));
    ctx.step = 10;
    oc.lr = 0.2f;
    assert_false(rt_dev_graph_replay(d, err, sizeof err));
    assert_non_null(strstr(err, "the optimizer's settings"));
    oc.lr = 0.1f;
    assert_true(rt_dev_graph_replay(d, err, sizeof err));
    assert_int_equal(graph_calls, 5);
    /* a wait inside a capture: the capture mode's error; no step's end: no graph */
    assert_true(rt_dev_graph_begin(d, err, sizeof err));
    rt_dev_step_begin(d, false);
    (void)rt_dev_read_flag(d);
    assert_int_equal(d->capture_errors, 1);
    assert_string_equal(d->capture_what, "read_flag");
    assert_false(rt_dev_graph_end(d, err, sizeof err));
    assert_non_null(strstr(err, "no step's end"));
    assert_false(rt_dev_graph_replay(d, err, sizeof err));
    assert_int_equal(graph_calls, 5);
    rt_dev_free(d, p);
    rt_device_close(d);
}

/* One device: the sum and the mean over it are the tensor itself, bit for
 * bit; broadcast from rank 0 keeps it; bad requests are refused. */
static void test_collectives(void **state)
{
    (void)state;
    RtDevice *d = open_cpu();
    char err[256];
    assert_int_equal(rt_dev_world_size(d), 1);
    assert_int_equal(rt_dev_rank(d), 0);
    float f[5] = {1.5f, -0.0f, NAN, INFINITY, 3e-45f};
    uint16_t h[3] = {0x7e01, 0x8001, 0x3c00};
    unsigned char ref_f[sizeof f], ref_h[sizeof h];
    float *pf = rt_dev_alloc(d, sizeof f, "f", err, sizeof err);
    uint16_t *ph = rt_dev_alloc(d, sizeof h, "h", err, sizeof err);
    rt_dev_to_device(d, pf, f, sizeof f);
    rt_dev_to_device(d, ph, h, sizeof h);
    memcpy(ref_f, f, sizeof f);
    memcpy(ref_h, h, sizeof h);
    RtDevTensor bucket[3] = {{pf, 5, RT_F32}, {ph, 3, RT_F16}, {ph, 3, RT_BF16}};
    assert_true(rt_dev_allreduce(d, bucket, 3, RT_REDUCE_SUM, err, sizeof err));
    assert_true(rt_dev_allreduce(d, bucket, 3, RT_REDUCE_MEAN, err, sizeof err));
    assert_true(rt_dev_broadcast(d, bucket, 3, 0, err, sizeof err));
    assert_true(rt_dev_allreduce(d, NULL, 0, RT_REDUCE_SUM, err, sizeof err)); /* empty */
    rt_dev_to_host(d, f, pf, sizeof f);
    rt_dev_to_host(d, h, ph, sizeof h);
    assert_memory_equal(f, ref_f, sizeof f);
    assert_memory_equal(h, ref_h, sizeof h);
    assert_false(rt_dev_broadcast(d, bucket, 3, 1, err, sizeof err));
    assert_string_equal(err, "cpu: broadcast from device 1 of 1");
    assert_false(rt_dev_broadcast(d, bucket, 3, -1, err, sizeof err));
    assert_false(rt_dev_allreduce(d, bucket, 3, (RtReduceOp)7, err, sizeof err));
    assert_non_null(strstr(err, "unknown reduction 7"));
    assert_false(rt_dev_allreduce(d, bucket, -1, RT_REDUCE_SUM, err, sizeof err));
    assert_false(rt_dev_allreduce(d, NULL, 2, RT_REDUCE_SUM, err, sizeof err));
    RtDevTensor hole = {NULL, 4, RT_F32};
    assert_false(rt_dev_allreduce(d, &hole, 1, RT_REDUCE_SUM, err, sizeof err));
    assert_non_null(strstr(err, "tensor 0"));
    hole.n = 0; /* no elements, no memory: fine */
    assert_true(rt_dev_allreduce(d, &hole, 1, RT_REDUCE_SUM, err, sizeof err));
    rt_dev_free(d, pf);
    rt_dev_free(d, ph);
    rt_device_close(d);
}

/* ---- the trainer's staging path ------------------------------------------------------- */

static void test_staging(void **state)
{
    (void)state;
    RtTrainer t;
    mix_trainer(&t, 0);
    rt_trainer_staging_ready(&t);
    for (int i = 0; i < 8; i++)
        t.x_host[i] = (float)i + 0.5f;
    t.y_host[0] = 2;
    t.y_host[1] = 1;
    rt_trainer_load_batch(&t);
    assert_true(rt_dev_event_done(t.dev, &t.copied[t.slot]));
    float back[8];
    rt_trainer_read_f32(&t, back, t.ctx.buf[mix.data], 8, RT_F32);
    assert_memory_equal(back, t.x_host, sizeof back);
    rt_trainer_read_f32(&t, back, t.ctx.buf[mix.label], 2, RT_F32);
    assert_true(back[0] == 2 && back[1] == 1);
    /* the loss head's rows come back to prob_host */
    float prob[6] = {0.1f, 0.2f, 0.7f, 0.5f, 0.25f, 0.25f};
    rt_dev_to_device(t.dev, t.ctx.buf[mix.prob_train], prob, sizeof prob);
    const float *rows = rt_trainer_read_rows(&t, mix.prob_train, 2);
    assert_ptr_equal(rows, t.prob_host);
    assert_memory_equal(rows, prob, sizeof prob);
    /* a 16-bit buffer widened */
    float w[NG];
    rt_trainer_read_f32(&t, w, t.ctx.buf[NP + 1], NG, RT_F16);
    assert_true(w[0] == 0.5f && w[NG - 1] == 0.5f);
    char err[256];
    assert_true(rt_trainer_reduce_grads(&t, err, sizeof err));
    assert_true(rt_trainer_broadcast_params(&t, err, sizeof err));
    rt_trainer_free(&t);
    /* the two slots in turn: on a device one step behind the host the
     * staging never waits (one slot waited once per step) */
    RtDeviceOpen lag = {.lagging = true};
    assert_true(rt_trainer_init(&t, &mix, 2, 0, &lag, err, sizeof err));
    uint64_t syncs = t.dev->syncs;
    float *seen[2] = {NULL, NULL};
    for (int step = 0; step < 6; step++) {
        rt_trainer_staging_ready(&t);
        seen[step % 2] = t.x_host;
        rt_trainer_load_batch(&t);
        rt_dev_ls_update(t.dev); /* the step's end */
    }
    assert_int_equal(t.dev->syncs, syncs);
    assert_true(seen[0] && seen[1] && seen[0] != seen[1]);
    rt_trainer_free(&t);
}

/* ---- the loop on the interface against the reference loop ---------------------------- */

static char tmp_root[256];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void loop_case(const RtModel *m, const char *opt, const char *loss_scale, int64_t inject,
                      int64_t steps)
{
    RtTrainOptions o;
    char err[512];
    rt_train_options_default(&o);
    if (!rt_train_apply_defaults(&o, m->train_defaults, err, sizeof err))
        fail_msg("%s", err);
    o.prog = "test";
    o.data = "synthetic";
    o.batch_size = 16;
    o.max_steps = steps;
    o.log_interval = 0;
    o.inject_inf_step = inject;
    const char *const set[] = {opt ? opt : NULL, loss_scale, NULL};
    char line[128];
    for (int i = 0; i < 2; i++) {
        if (!set[i])
            continue;
        snprintf(line, sizeof line, "%s", set[i]);
        const char *const one[] = {line, NULL};
        if (!rt_train_apply_defaults(&o, one, err, sizeof err))
            fail_msg("%s: %s", line, err);
    }
    char dir[300];
    snprintf(dir, sizeof dir, "%s/%s-%s-%lld", tmp_root, m->name, m->amp ? m->amp : "off",
             (long long)steps);
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    o.save_dir = dir;
    FILE *out = tmpfile(), *errf = tmpfile();
    RtTrainResult r;
    assert_int_equal(rt_train_run(m, &o, out, errf, &r), 0);
    fclose(out);
    fclose(errf);
    assert_int_equal(r.steps, steps);
    if (inject >= 0 && o.loss_scale.mode == RT_LS_DYNAMIC)
        assert_true(r.skipped >= 1);
    /* the run stops inside its first epoch: its checkpoint is named by step */
    char path[400];
    snprintf(path, sizeof path, "%s/%s-step%06lld.ckpt", dir, m->name, (long long)steps);
    if (ref_loop_run(m, &o, steps, path, err, sizeof err) != 0)
        fail_msg("%s %s %s: %s", m->name, opt ? opt : "", loss_scale ? loss_scale : "", err);
}

static void test_loop_matches_reference(void **state)
{
    (void)state;
    loop_case(&ampc_model, NULL, NULL, -1, 9);
    loop_case(&ampc_model, "optimizer=adam", NULL, -1, 7);
    loop_case(&tiny_model_f16, NULL, "loss_scale=dynamic", 3, 8);
    loop_case(&tiny_model_f16, "optimizer=adam", "loss_scale=1024", 2, 6);
    loop_case(&tiny_model_bf16, "optimizer=nag(momentum=0.9)", NULL, -1, 5);
}

static int group_setup(void **state)
{
    (void)state;
    snprintf(tmp_root, sizeof tmp_root, "/tmp/ampc_test_device_XXXXXX");
    return mkdtemp(tmp_root) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    return nftw(tmp_root, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_aligned_zeroed),
        cmocka_unit_test(test_alloc_failure_message),
        cmocka_unit_test(test_copies),
        cmocka_unit_test(test_fill),
        cmocka_unit_test(test_finite_flag),
        cmocka_unit_test(test_optim_step),
        cmocka_unit_test(test_setup_idempotent),
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_events_lagging),
        cmocka_unit_test(test_sim_ranks),
        cmocka_unit_test(test_synthetic_batch),
        cmocka_unit_test(test_ingest_batch),
        cmocka_unit_test(test_capture_mode),
        cmocka_unit_test(test_graph_emulation),
        cmocka_unit_test(test_collectives),
        cmocka_unit_test(test_staging),
        cmocka_unit_test(test_loop_matches_reference),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
