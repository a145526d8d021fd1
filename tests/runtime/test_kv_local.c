/*
 * test_kv_local.c - the `local` and `device` placements (runtime/dist/
 * kvplace.c) around the CPU device: `local` (gradients to host memory, the
 * CPU's fused optimizer on host masters and state, the weights back) trains
 * to the same bits as the CPU device alone, fp32, fp16 and bf16 weights,
 * SGD with momentum, NAG and Adam, with a dynamic loss scale's skipped step;
 * the masters and state read through the device (a checkpoint) come from
 * the host copies; the bytes it moves are counted exactly; `device` on one
 * device is the device itself; a placement that needs a communicator is an
 * error for rt_kv_wrap; rt_kv_open (the trainer's one call) in a single
 * process gives nccl and dist_sync the device itself.
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

#include "device.h"
#include "dist/coll.h"
#include "rt.h"
#include "train.h"

enum { NP = 4, NB = 2 * NP, STEPS = 5, BAD_STEP = 2 };
static const int sizes[NP] = {37, 64, 19, 9};
#define PARAM(nm, dt, mp, n, b)                                                              \
    {.name = nm, .kind = RT_PK_WEIGHT, .dtype = dt, .has_master = mp, .rank = 1, .shape = {n}, \
     .numel = n, .init = "default", .wd_mult = 1, .lr_mult = 1, .buffer = b, .grad = NP + b}
static const RtParam params[NP] = {
    PARAM("a_weight", RT_F32, false, 37, 0), PARAM("b_weight", RT_F16, true, 64, 1),
    PARAM("c_weight", RT_BF16, true, 19, 2), PARAM("d_weight", RT_F16, true, 9, 3),
};
#define BUF(nm, dt, n) {.name = nm, .dtype = dt, .fixed = n}
static const RtBuffer buffers[NB] = {
    BUF("a", RT_F32, 37), BUF("b", RT_F16, 64), BUF("c", RT_BF16, 19), BUF("d", RT_F16, 9),
    BUF("ga", RT_F32, 37), BUF("gb", RT_F16, 64), BUF("gc", RT_BF16, 19), BUF("gd", RT_F32, 9),
};
static const RtModel model = {
    .name = "kv_local_test", .nparams = NP, .params = params, .nbuffers = NB,
    .buffers = buffers, .data = -1, .label = -1, .prob_train = -1, .prob_infer = -1,
};

typedef struct {
    RtDevice *d;
    void *buf[NB];
    float *master[NP], *state[NP], *state2[NP];
    RtCtx ctx;
} Run;

static void run_open(Run *r, bool local)
{
    char err[256];
    memset(r, 0, sizeof *r);
    RtDevice *cpu = rt_device_cpu_open(err, sizeof err);
    assert_non_null(cpu);
    r->d = local ? rt_kv_wrap(cpu, RT_KV_LOCAL, err, sizeof err) : cpu;
    if (!r->d)
        fail_msg("%s", err);
    for (int b = 0; b < NB; b++)
        assert_non_null(r->buf[b] = rt_dev_alloc(r->d, (size_t)buffers[b].fixed *
                                                           rt_dtype_size(buffers[b].dtype),
                                                 buffers[b].name, err, sizeof err));
    for (int i = 0; i < NP; i++) {
        size_t n = (size_t)sizes[i] * sizeof(float);
        assert_non_null(r->state[i] = rt_dev_alloc(r->d, n, "m", err, sizeof err));
        assert_non_null(r->state2[i] = rt_dev_alloc(r->d, n, "v", err, sizeof err));
        if (params[i].has_master)
            assert_non_null(r->master[i] = rt_dev_alloc(r->d, n, "master", err, sizeof err));
        float w[64];
        char tmp[256];
        for (int j = 0; j < sizes[i]; j++)
            w[j] = 0.25f - 0.013f * (float)(j * (i + 1) % 29);
        if (params[i].has_master)
            rt_dev_to_device(r->d, r->master[i], w, n);
        rt_from_f32(tmp, w, (size_t)sizes[i], params[i].dtype);
        rt_dev_to_device(r->d, r->buf[i], tmp, (size_t)sizes[i] * rt_dtype_size(params[i].dtype));
    }
    r->ctx.buf = r->buf;
    r->ctx.master = r->master;
    r->ctx.batch = 4;
    assert_true(rt_dev_setup(r->d, &model, &r->ctx, err, sizeof err));
}

static void run_close(Run *r)
{
    for (int b = 0; b < NB; b++)
        rt_dev_free(r->d, r->buf[b]);
    for (int i = 0; i < NP; i++) {
        rt_dev_free(r->d, r->state[i]);
        rt_dev_free(r->d, r->state2[i]);
        rt_dev_free(r->d, r->master[i]);
    }
    rt_device_close(r->d);
}

/* The loop's calls (train.c): a dynamic scale checks before the update;
 * step BAD_STEP holds an inf in one gradient. */
static void train(Run *r, RtOptKind kind, bool dynamic)
{
    char err[256];
    RtDevLsInit li = {.dynamic = dynamic, .s = {dynamic ? 8.0f : 1.0f, 0},
                      .rule = ampc_loss_scale_rule_default(), .batch = 4, .num_update = 0};
    assert_true(rt_dev_ls_init(r->d, &li, err, sizeof err));
    RtOptConfig oc = {.kind = kind, .momentum = kind == RT_OPT_ADAM ? 0 : 0.9f, .wd = 1e-3f,
                      .rescale_grad = 1, .clip_gradient = -1, .beta1 = 0.9f, .beta2 = 0.999f,
                      .epsilon = 1e-8f};
    float lr[RT_DEV_LS_RING + 1];
    for (int i = 0; i <= RT_DEV_LS_RING; i++)
        lr[i] = 0.05f / (float)(1 + i);
    rt_dev_lr_ahead(r->d, &oc, lr, 0, RT_DEV_LS_RING + 1);
    for (int s = 0; s < STEPS; s++) {
        rt_dev_step_begin(r->d, false);
        for (int p = 0; p < NP; p++) {
            RtDType dt = buffers[params[p].grad].dtype;
            float g[64];
            char tmp[256];
            for (int i = 0; i < sizes[p]; i++)
                g[i] = (float)((i * 5 + p * 3 + s * 7) % 13 - 6) * 0.37f;
            if (s == BAD_STEP && p == 2)
                g[3] = INFINITY;
            rt_from_f32(tmp, g, (size_t)sizes[p], dt);
            rt_dev_to_device(r->d, r->buf[params[p].grad], tmp, (size_t)sizes[p] * rt_dtype_size(dt));
        }
        if (dynamic)
            rt_dev_check_grads(r->d);
        rt_dev_moving_update(r->d, NULL, &r->ctx);
        rt_dev_train_update(r->d, r->state, kind == RT_OPT_ADAM ? r->state2 : NULL, &oc);
        rt_dev_ls_update(r->d);
    }
}

/* Everything the update changes, read through the device. */
static void assert_same(Run *a, Run *b)
{
    for (int i = 0; i < NP; i++) {
        size_t n = (size_t)sizes[i];
        char x[256], y[256];
        size_t wb = n * rt_dtype_size(params[i].dtype);
        rt_dev_to_host(a->d, x, a->buf[i], wb);
        rt_dev_to_host(b->d, y, b->buf[i], wb);
        assert_memory_equal(x, y, wb);
        float *more[3][2] = {{a->master[i], b->master[i]}, {a->state[i], b->state[i]},
                             {a->state2[i], b->state2[i]}};
        for (int k = 0; k < 3; k++) {
            if (!more[k][0])
                continue;
            rt_dev_to_host(a->d, x, more[k][0], n * 4);
            rt_dev_to_host(b->d, y, more[k][1], n * 4);
            if (memcmp(x, y, n * 4) != 0)
                fail_msg("%s: tensor %d differs", params[i].name, k);
        }
    }
    RtDevLsState sa, sb;
    AmpcLossScaleStep fa[STEPS], fb[STEPS]; /* the steps' records, the update count too */
    rt_dev_ls_read(a->d, &sa, fa, 0);
    rt_dev_ls_read(b->d, &sb, fb, 0);
    assert_int_equal(sa.num_update, sb.num_update);
    assert_int_equal(sa.skipped, sb.skipped);
    assert_int_equal(sa.nonfinite, sb.nonfinite);
    assert_true(sa.s.scale == sb.s.scale);
    assert_memory_equal(fa, fb, sizeof fa);
}

static void check_case(RtOptKind kind, bool dynamic)
{
    Run a, b;
    run_open(&a, false);
    run_open(&b, true);
    train(&a, kind, dynamic);
    train(&b, kind, dynamic);
    assert_same(&a, &b);
    RtDevLsState st;
    rt_dev_ls_read(a.d, &st, NULL, 0);
    assert_int_equal(st.num_update, dynamic ? STEPS - 1 : STEPS);
    /* the bytes: the first update loads every host copy; then each applied
     * update copies the gradients and the scale down and the weights up */
    uint64_t grads = 0, weights = 0, owned = 0;
    for (int i = 0; i < NP; i++) {
        grads += (uint64_t)sizes[i] * rt_dtype_size(buffers[params[i].grad].dtype);
        weights += (uint64_t)sizes[i] * rt_dtype_size(params[i].dtype);
        owned += (uint64_t)sizes[i] * 4 * ((params[i].has_master ? 1 : 0) + 1 +
                                           (kind == RT_OPT_ADAM ? 1 : 0));
    }
    RtKvLocalStats ls;
    rt_kv_local_stats(b.d, &ls);
    uint64_t applied = (uint64_t)st.num_update;
    assert_int_equal(ls.updates, applied);
    assert_int_equal(ls.d2h_bytes, grads + weights + owned + applied * (grads + sizeof(float)));
    assert_int_equal(ls.h2d_bytes, applied * weights);
    /* the masters live on the host: the device's own copy is stale (its
     * first element is the initial one), the read above came from the host */
    float dev0 = b.master[1][0], host0;
    rt_dev_to_host(b.d, &host0, b.master[1], sizeof host0);
    assert_true(dev0 == 0.25f && host0 != dev0);
    run_close(&a);
    run_close(&b);
}

static void test_local_sgd_momentum(void **state)
{
    (void)state;
    check_case(RT_OPT_SGD, false);
}

static void test_local_nag_dynamic(void **state)
{
    (void)state;
    check_case(RT_OPT_NAG, true);
}

static void test_local_adam_dynamic(void **state)
{
    (void)state;
    check_case(RT_OPT_ADAM, true);
}

/* A write to a master after the first update (a resume) reaches the host copy. */
static void test_local_write_through(void **state)
{
    (void)state;
    Run b;
    run_open(&b, true);
    train(&b, RT_OPT_SGD, false);
    float v[64];
    for (int i = 0; i < 64; i++)
        v[i] = (float)i;
    rt_dev_to_device(b.d, b.master[1], v, sizeof v);
    rt_dev_fill(b.d, b.state[1], RT_F32, 64, 0.5f);
    float back[64];
    rt_dev_to_host(b.d, back, b.master[1], sizeof back);
    assert_memory_equal(back, v, sizeof v);
    rt_dev_to_host(b.d, back, b.state[1], sizeof back);
    assert_true(back[0] == 0.5f && back[63] == 0.5f);
    run_close(&b);
}

static void test_placements(void **state)
{
    (void)state;
    char err[256];
    RtDevice *cpu = rt_device_cpu_open(err, sizeof err);
    assert_ptr_equal(rt_kv_wrap(cpu, RT_KV_DEVICE, err, sizeof err), cpu); /* one device */
    assert_ptr_equal(rt_kv_wrap(cpu, RT_KV_NONE, err, sizeof err), cpu);
    assert_null(rt_kv_wrap(cpu, RT_KV_NCCL, err, sizeof err)); /* closes cpu */
    assert_non_null(strstr(err, "placement 'nccl' needs the NCCL engine's communicator"));
    /* the trainer's one call, in a single process (no MPI): nccl and
     * dist_sync on one device are the device itself; local wraps */
    cpu = rt_device_cpu_open(err, sizeof err);
    assert_ptr_equal(rt_kv_open(cpu, RT_KV_NCCL, NULL, NULL, 4, err, sizeof err), cpu);
    assert_ptr_equal(rt_kv_open(cpu, RT_KV_DIST_SYNC, NULL, NULL, 4, err, sizeof err), cpu);
    RtDevice *l = rt_kv_open(cpu, RT_KV_LOCAL, NULL, NULL, 4, err, sizeof err);
    assert_non_null(l);
    assert_string_equal(l->ops->name, "local");
    rt_device_close(l); /* closes cpu */
    assert_string_equal(rt_kv_place_name(RT_KV_LOCAL), "local");
    assert_string_equal(rt_kv_place_name(RT_KV_DIST_SYNC), "dist_sync");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_sgd_momentum),
        cmocka_unit_test(test_local_nag_dynamic),
        cmocka_unit_test(test_local_adam_dynamic),
        cmocka_unit_test(test_local_write_through),
        cmocka_unit_test(test_placements),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
