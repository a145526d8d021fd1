/*
 * test_device_ls.c - the step without the host (runtime/device.h): the loss
 * scale, the skip decision, the update count and the schedule kept on the
 * CPU device, and the loop (train.c) that reads the device only when it
 * logs.
 *   - the device's scale, tracker and counters equal the host's state
 *     machine (rt_loss_scaler_update) step by step over forced overflow
 *     patterns, dynamic and static, and the ring gives each step's record back
 *     (its flag, the scale after the rule, the update count);
 *   - a skipped step changes no weight, master, optimizer state or
 *     BatchNorm statistic (the moving update's kernel reads the step's
 *     state and writes nothing) and no update count; the next finite step updates with the learning rate
 *     of the next update (lr_ahead), as rt_optim_step2 does;
 *   - the loop makes 0 device->host waits (RtDevice.syncs, counted in
 *     device.h's wrappers) in a step that does not log, with a dynamic
 *     scale and an injected overflow too; --profile and the JSON profile
 *     event print the count.
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
#include <unistd.h>

#include "device.h"
#include "model_tiny.c"
#include "train.h"
#include "lossscale.h"
#include "cpu/cpu.h"

static RtDevice *open_cpu(void)
{
    char err[256];
    RtDevice *d = rt_device_cpu_open(err, sizeof err);
    if (!d)
        fail_msg("%s", err);
    return d;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* A deterministic overflow pattern: bursts, isolated overflows, long runs. */
static bool finite_at(int k, int pattern)
{
    uint32_t x = (uint32_t)k * 2654435761u + (uint32_t)pattern * 97u;
    switch (pattern) {
    case 0: return (x >> 7) % 11 != 0;                  /* ~1 in 11 */
    case 1: return !(k % 37 >= 30 && k % 37 < 36);      /* bursts of 6 */
    case 2: return k < 20 || k > 260 || k % 2 == 0;     /* alternating in the middle */
    default: return (x >> 9) % 3 != 0;                  /* every third, roughly */
    }
}

/* The device's rule against the host's, step by step and through the ring. */
static void check_sequence(RtLossScaleMode mode, int pattern)
{
    RtDevice *d = open_cpu();
    RtLossScaleConfig c;
    rt_loss_scale_default(&c);
    c.mode = mode;
    c.init = 1024.0f;
    c.interval = 7; /* growth within the sequence */
    c.max_scale = 8192.0f;
    RtLossScaler ls;
    rt_loss_scaler_init(&ls, &c, "float16");
    RtDevLsInit in = {.dynamic = mode == RT_LS_DYNAMIC, .s = ls.s, .rule = ls.rule, .batch = 16,
                      .num_update = 5};
    char err[256];
    assert_true(rt_dev_ls_init(d, &in, err, sizeof err));
    enum { STEPS = 400 };
    AmpcLossScaleStep ring[RT_DEV_LS_RING];
    AmpcLossScale want[STEPS]; /* the oracle's scale after each step */
    int64_t from = 0;
    for (int k = 0; k < STEPS; k++) {
        bool f = finite_at(k, pattern);
        rt_dev_set_flag(d, f);
        rt_dev_ls_update(d);
        rt_loss_scaler_update(&ls, f, NULL, NULL);
        want[k] = ls.s;
        if (k % 50 == 49 || k == STEPS - 1) { /* read now and then, as the loop does */
            RtDevLsState st;
            rt_dev_ls_read(d, &st, ring, from);
            assert_int_equal(st.steps, k + 1);
            for (int64_t j = from; j <= k; j++) { /* each step's record: what the device decided */
                assert_int_equal(ring[j - from].finite, finite_at((int)j, pattern) ? 1 : 0);
                assert_int_equal(bits(ring[j - from].s.scale), bits(want[j].scale));
                assert_int_equal(ring[j - from].s.tracker, want[j].tracker);
                assert_int_equal(ring[j - from].num_update, 5);
            }
            from = st.steps;
            assert_int_equal(bits(st.s.scale), bits(ls.s.scale));
            assert_int_equal(st.s.tracker, ls.s.tracker);
            assert_int_equal(st.skipped, ls.skipped);
            assert_int_equal(st.nonfinite, ls.nonfinite);
            assert_int_equal(st.num_update, 5); /* no train_update here */
        }
    }
    /* the pattern overflowed, and a dynamic scale both fell and grew */
    if (mode == RT_LS_DYNAMIC)
        assert_true(ls.skipped > 10 && ls.nonfinite == 0);
    else
        assert_true(ls.nonfinite > 10 && ls.skipped == 0 && ls.s.scale == 1024.0f);
    rt_device_close(d);
}

static void test_scale_sequence_dynamic(void **state)
{
    (void)state;
    for (int p = 0; p < 4; p++)
        check_sequence(RT_LS_DYNAMIC, p);
}

static void test_scale_sequence_static(void **state)
{
    (void)state;
    check_sequence(RT_LS_STATIC, 0);
    check_sequence(RT_LS_STATIC, 1);
}

/* ---- a skipped step changes nothing -------------------------------------------------- */

/* the stand-in BatchNorm commit: the CPU kernel on a one-channel statistic
 * (stat_buf: moving mean, moving var), reading the step's state as the
 * emitted moving_update does; counts its calls */
static int commits;
static float *stat_buf;
static void commit(RtCtx *ctx)
{
    static const float mean = 2.0f, invstd = 0.5f;
    commits++;
    rt_batchnorm_update_moving(1, 4, &mean, &invstd, 1e-5f, 0.9f, &stat_buf[0], &stat_buf[1],
                               ctx->step_state);
}

typedef struct {
    unsigned char *p;
    size_t n;
} Snap;

/* Every parameter, master and optimizer state of the trainer, copied. */
static Snap snapshot(const RtTrainer *t)
{
    const RtModel *m = t->m;
    size_t n = 0;
    for (int i = 0; i < m->nparams; i++)
        n += (size_t)m->params[i].numel * (rt_dtype_size(m->params[i].dtype) + 3 * 4);
    Snap s = {calloc(n + 1, 1), 0};
    assert_non_null(s.p);
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        size_t k = (size_t)p->numel;
        memcpy(s.p + s.n, t->ctx.buf[p->buffer], k * rt_dtype_size(p->dtype));
        s.n += k * rt_dtype_size(p->dtype);
        const float *more[3] = {t->ctx.master[i], t->state[i], t->state2 ? t->state2[i] : NULL};
        for (int j = 0; j < 3; j++)
            if (more[j]) {
                memcpy(s.p + s.n, more[j], k * 4);
                s.n += k * 4;
            }
    }
    return s;
}

static void test_skipped_step_changes_nothing(void **state)
{
    (void)state;
    const RtModel *m = &tiny_model_f16;
    RtTrainer t;
    char err[256];
    RtOptConfig oc = {.kind = RT_OPT_ADAM, .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
                      .epsilon = 1e-8f, .clip_gradient = -1.0f, .wd = 1e-4f};
    assert_true(rt_trainer_init(&t, m, 16, rt_optim_nstate(&oc), NULL, err, sizeof err));
    assert_true(rt_trainer_init_params(&t, "xavier()", 7, err, sizeof err));
    assert_true(rt_trainer_setup(&t, err, sizeof err));
    float stat[2] = {0.0f, 1.0f};
    stat_buf = stat;
    commits = 0;
    RtDevLsInit in = {.dynamic = true, .s = {.scale = 256.0f}, .batch = 16};
    in.rule = ampc_loss_scale_rule_default();
    assert_true(rt_dev_ls_init(t.dev, &in, err, sizeof err));
    float lr[RT_DEV_LS_RING + 1];
    for (int i = 0; i <= RT_DEV_LS_RING; i++)
        lr[i] = 0.01f / (float)(i + 1); /* a schedule: update u gets 0.01 / u */
    rt_dev_lr_ahead(t.dev, &oc, lr, 0, RT_DEV_LS_RING + 1);
    /* gradients: small values, one NaN */
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        rt_dev_fill(t.dev, t.ctx.buf[p->grad], m->buffers[p->grad].dtype, (size_t)p->numel,
                    0.25f);
    }
    const RtParam *p0 = &m->params[0];
    rt_dev_fill(t.dev, t.ctx.buf[p0->grad], m->buffers[p0->grad].dtype, 1, NAN);
    Snap before = snapshot(&t);
    rt_dev_step_begin(t.dev, false);
    /* the step's state the loss head reads (the CPU device's memory is the host's) */
    assert_true(t.ctx.step_state == rt_dev_step_state(t.dev));
    assert_true(t.ctx.step_state->scale == 256.0f && t.ctx.step_state->dynamic);
    rt_dev_step_begin(t.dev, true); /* --inject-inf-at-step */
    assert_true(isinf(t.ctx.step_state->scale));
    rt_dev_step_begin(t.dev, false);
    rt_dev_check_grads(t.dev);
    rt_dev_moving_update(t.dev, commit, &t.ctx);
    rt_dev_train_update(t.dev, t.state, t.state2, &oc);
    rt_dev_ls_update(t.dev);
    Snap after = snapshot(&t);
    assert_int_equal(before.n, after.n);
    assert_memory_equal(before.p, after.p, before.n); /* no weight, master or state bit */
    assert_int_equal(commits, 1);                     /* the commit ran, and wrote nothing: */
    assert_true(stat[0] == 0.0f && stat[1] == 1.0f && t.ctx.step_state->flag);
    RtDevLsState st;
    rt_dev_ls_read(t.dev, &st, NULL, 0);
    assert_int_equal(st.num_update, 0);
    assert_int_equal(st.skipped, 1);
    assert_true(st.s.scale == 128.0f);
    free(after.p);
    /* the next step is finite: the update is rt_optim_step2's with update 1's
     * learning rate, t = 1 and rescale_grad from the halved scale */
    rt_dev_fill(t.dev, t.ctx.buf[p0->grad], m->buffers[p0->grad].dtype, 1, 0.5f);
    rt_dev_step_begin(t.dev, false);
    assert_true(t.ctx.step_state->scale == 128.0f);
    /* the reference first, on copies of the state */
    RtTrainer r;
    assert_true(rt_trainer_init(&r, m, 16, rt_optim_nstate(&oc), NULL, err, sizeof err));
    for (int i = 0; i < m->nbuffers; i++) {
        int64_t n = rt_buffer_elems(m, i, 16);
        memcpy(r.ctx.buf[i], t.ctx.buf[i], (size_t)n * rt_dtype_size(m->buffers[i].dtype));
    }
    for (int i = 0; i < m->nparams; i++) {
        size_t k = (size_t)m->params[i].numel * 4;
        if (t.ctx.master[i])
            memcpy(r.ctx.master[i], t.ctx.master[i], k);
        memcpy(r.state[i], t.state[i], k);
        memcpy(r.state2[i], t.state2[i], k);
    }
    RtOptConfig ro = oc;
    ro.lr = lr[0];
    ro.t = 1;
    ro.rescale_grad = (float)(1.0 / (16.0 * 128.0));
    assert_true(rt_optim_step2(m, &r.ctx, r.state, r.state2, &ro));
    rt_dev_check_grads(t.dev);
    rt_dev_moving_update(t.dev, commit, &t.ctx);
    rt_dev_train_update(t.dev, t.state, t.state2, &oc);
    rt_dev_ls_update(t.dev);
    assert_int_equal(commits, 2);
    assert_true(stat[0] != 0.0f && stat[1] != 1.0f); /* a finite step commits */
    Snap got = snapshot(&t), want = snapshot(&r);
    assert_int_equal(got.n, want.n);
    assert_memory_equal(got.p, want.p, got.n);
    assert_memory_not_equal(got.p, before.p, got.n);
    rt_dev_ls_read(t.dev, &st, NULL, 0);
    assert_int_equal(st.num_update, 1);
    free(got.p);
    free(want.p);
    free(before.p);
    rt_trainer_free(&r);
    rt_trainer_free(&t);
}

/* ---- the loop: no wait in a step that does not log ----------------------------------- */

static char out_text[1 << 17], err_text[1 << 14], json_text[1 << 17];

static void slurp(FILE *f, char *dst, size_t cap)
{
    rewind(f);
    size_t n = fread(dst, 1, cap - 1, f);
    dst[n] = 0;
    fclose(f);
}

static RtTrainOptions options(const RtModel *m)
{
    RtTrainOptions o;
    char err[256];
    rt_train_options_default(&o);
    if (!rt_train_apply_defaults(&o, m->train_defaults, err, sizeof err))
        fail_msg("%s", err);
    o.prog = "test";
    return o;
}

/* --profile's count of waits in the steps that did not log, from the text
 * and the JSON profile event (which must agree) */
static void run_quiet(const RtModel *m, const char *loss_scale, int64_t inject)
{
    RtTrainOptions o = options(m);
    char err[256], json[] = "/tmp/ampc-test-device-ls-XXXXXX";
    int fd = mkstemp(json);
    assert_true(fd >= 0);
    close(fd);
    o.data = "synthetic";
    o.batch_size = 16;
    o.max_steps = 90;
    o.log_interval = 20;
    o.profile = true;
    o.json_log = json;
    o.inject_inf_step = inject;
    if (loss_scale)
        assert_true(rt_loss_scale_parse(loss_scale, &o.loss_scale, err, sizeof err));
    RtTrainResult r;
    FILE *out = tmpfile(), *errf = tmpfile();
    int rc = rt_train_run(m, &o, out, errf, &r);
    slurp(out, out_text, sizeof out_text);
    slurp(errf, err_text, sizeof err_text);
    FILE *jf = fopen(json, "r");
    assert_non_null(jf);
    slurp(jf, json_text, sizeof json_text);
    unlink(json);
    if (rc != 0)
        fail_msg("rc %d: %s", rc, err_text);
    assert_int_equal(r.steps, 90);
    /* 89 timed steps (the first is not); 4 log a Speedometer line (20, 40,
     * 60, 80): the other 85 make no wait */
    const char *line = strstr(out_text, "device->host syncs per step: ");
    if (!line)
        fail_msg("no sync count in the profile:\n%s", out_text);
    double per = -1, quiet = -1;
    long long nq = -1;
    assert_int_equal(sscanf(line, "device->host syncs per step: %lf; in the %lld steps that did "
                            "not log: %lf", &per, &nq, &quiet), 3);
    assert_int_equal(nq, 85);
    if (quiet != 0.0)
        fail_msg("%g waits per step that did not log:\n%s", quiet, line);
    assert_true(per > 0.0); /* the logging steps do wait: the count can see a wait */
    assert_non_null(strstr(json_text, "\"quiet_steps\":85"));
    assert_non_null(strstr(json_text, "\"syncs_per_quiet_step\":0}"));
    if (inject >= 0 && strncmp(loss_scale, "dynamic", 7) == 0) {
        char want[160];
        snprintf(want, sizeof want, "AMP: gradient overflow at step %lld: step skipped (1 "
                 "skipped in all)", (long long)inject);
        if (!strstr(out_text, want))
            fail_msg("no \"%s\" in:\n%s", want, out_text);
        assert_int_equal(r.skipped, 1);
        assert_int_equal(r.num_update, 89);
    }
}

static void test_no_sync_fp32(void **state)
{
    (void)state;
    run_quiet(&ampc_model, NULL, -1);
}

static void test_no_sync_dynamic_overflow(void **state)
{
    (void)state;
    run_quiet(&tiny_model_f16, "dynamic(init=256)", 33);
}

static void test_no_sync_static(void **state)
{
    (void)state;
    run_quiet(&tiny_model_bf16, "1e30", -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scale_sequence_dynamic),
        cmocka_unit_test(test_scale_sequence_static),
        cmocka_unit_test(test_skipped_step_changes_nothing),
        cmocka_unit_test(test_no_sync_fp32),
        cmocka_unit_test(test_no_sync_dynamic_overflow),
        cmocka_unit_test(test_no_sync_static),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
