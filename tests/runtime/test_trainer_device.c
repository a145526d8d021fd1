/*
 * test_trainer_device.c - a model's own device (RtModel.open_device, as a
 * CUDA program sets it; runtime/trainer.c): the trainer opens it once with
 * the model, allocates the workspace once through it, and rt_ctx_ws refuses
 * to grow that workspace (a device's memory is not the host's); a failing
 * open is the trainer's error; a model without open_device keeps the CPU's
 * growing host workspace.  And the device flags (--cudnn-autotune,
 * --cudnn-workspace-mb: rt_device_configure) a CPU program refuses.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "train.h"

/* ---- a model of three buffers (data [N, 4], label [N], prob [N, 2]) ---------- */

static const RtBuffer buffers[] = {
    {"data", RT_F32, 0, 4, false, 0, 0},
    {"label", RT_F32, 0, 1, false, 0, 0},
    {"prob", RT_F32, 0, 2, false, 0, 0},
};

static void step(RtCtx *ctx) { (void)ctx; }
static const RtCtx *sized; /* the ctx the sizer was given */
static size_t ws_bytes(const RtCtx *ctx, int64_t n)
{
    sized = ctx;
    return (size_t)(1000 + 8 * n);
}

static int opened;              /* open_device calls */
static const RtModel *seen;     /* the model it was given */
static RtDeviceConfig seen_cfg; /* and the options */
static RtDevice *fake_open(const RtModel *m, const RtDeviceConfig *dc, char *err, size_t errlen)
{
    opened++;
    seen = m;
    seen_cfg = *dc;
    return rt_device_cpu_open(err, errlen); /* a device: its blocks are rt_dev_alloc's */
}

static RtDevice *failing_open(const RtModel *m, const RtDeviceConfig *dc, char *err, size_t errlen)
{
    (void)m, (void)dc;
    opened++;
    snprintf(err, errlen, "no CUDA device: (a test)");
    return NULL;
}

static RtModel model(RtDevice *(*open)(const RtModel *, const RtDeviceConfig *, char *, size_t))
{
    return (RtModel){.name = "dev", .nbuffers = 3, .buffers = buffers, .data = 0, .label = 1,
                     .prob_train = 2, .prob_infer = 2, .data_rank = 1, .data_shape = {4},
                     .classes = 2, .workspace_bytes = ws_bytes, .train_step = step,
                     .infer_step = step, .open_device = open};
}

static void test_open_device_and_workspace(void **state)
{
    (void)state;
    RtModel m = model(fake_open);
    RtTrainer t;
    char err[256];
    opened = 0;
    RtDeviceConfig dc = rt_device_config_default();
    dc.cudnn_workspace_mb = 7;
    RtDeviceOpen how = {.config = &dc};
    assert_true(rt_trainer_init(&t, &m, 3, 0, &how, err, sizeof err));
    assert_int_equal(opened, 1);
    assert_ptr_equal(seen, &m);
    assert_int_equal(seen_cfg.cudnn_workspace_mb, 7); /* the options reach open_device */
    assert_ptr_equal(sized, &t.ctx);                  /* the sizers ask the opened device's ctx */
    assert_ptr_equal(t.ctx.step_state, rt_dev_step_state(t.dev));
    assert_null(t.ctx.cuda); /* the CPU device's kernels take no context */
    assert_true(t.ctx.ws_device);
    assert_int_equal(t.ctx.ws_bytes, 1024);
    assert_non_null(t.ctx.ws);
    assert_int_equal((uintptr_t)t.ctx.ws % RT_WS_ALIGN, 0);
    void *ws = t.ctx.ws;
    assert_ptr_equal(rt_ctx_ws(&t.ctx, 1024), ws);
    assert_ptr_equal(rt_ctx_ws(&t.ctx, 0), ws);
    /* asking for more ends the program (exit 1) with a message */
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], 2);
        rt_ctx_ws(&t.ctx, 1025);
        _exit(0); /* not reached when it refuses */
    }
    close(fd[1]);
    char msg[512] = {0};
    ssize_t n = read(fd[0], msg, sizeof msg - 1);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 1);
    assert_true(n > 0);
    assert_non_null(strstr(msg, "workspace of 1025 bytes"));
    assert_non_null(strstr(msg, "1024"));
    assert_non_null(strstr(msg, "cannot grow"));
    rt_trainer_free(&t); /* the workspace goes back to the device (ASan: no leak, no double free) */
}

static void test_open_device_fails(void **state)
{
    (void)state;
    RtModel m = model(failing_open);
    RtTrainer t;
    char err[256] = "";
    opened = 0;
    assert_false(rt_trainer_init(&t, &m, 3, 0, NULL, err, sizeof err));
    assert_int_equal(opened, 1);
    assert_string_equal(err, "no CUDA device: (a test)");
}

static void test_cpu_workspace_grows(void **state)
{
    (void)state;
    RtModel m = model(NULL);
    RtTrainer t;
    char err[256];
    assert_true(rt_trainer_init(&t, &m, 3, 0, NULL, err, sizeof err));
    assert_false(t.ctx.ws_device);
    assert_true(t.ctx.ws_bytes >= 1024);
    void *p = rt_ctx_ws(&t.ctx, 1 << 20); /* the host's grows */
    assert_non_null(p);
    assert_true(t.ctx.ws_bytes >= 1 << 20);
    rt_trainer_free(&t);
}

static void test_device_flags(void **state)
{
    (void)state;
    RtModel cpu = model(NULL), gpu = model(fake_open);
    char err[256] = "";
    RtDeviceConfig dc;
    /* not given: fine anywhere, the defaults */
    assert_true(rt_device_configure(&cpu, &(RtDeviceFlags){-1, -1, -1, -1, -1, -1, NULL}, &dc, err,
                                    sizeof err));
    assert_true(dc.cudnn_autotune);
    assert_int_equal(dc.cudnn_workspace_mb, RT_CUDNN_WORKSPACE_MB_DEFAULT);
    /* a CPU program refuses either, naming it */
    assert_false(rt_device_configure(&cpu, &(RtDeviceFlags){0, -1, -1, -1, -1, -1, NULL}, &dc, err,
                                     sizeof err));
    assert_non_null(strstr(err, "--cudnn-autotune"));
    assert_non_null(strstr(err, "--target=cuda"));
    assert_false(rt_device_configure(&cpu, &(RtDeviceFlags){-1, 64, -1, -1, -1, -1, NULL}, &dc, err,
                                     sizeof err));
    assert_non_null(strstr(err, "--cudnn-workspace-mb"));
    /* a GPU program takes them, each call from the defaults (no state between runs) */
    assert_true(rt_device_configure(&gpu, &(RtDeviceFlags){0, 64, -1, -1, -1, -1, NULL}, &dc, err,
                                    sizeof err));
    assert_false(dc.cudnn_autotune);
    assert_int_equal(dc.cudnn_workspace_mb, 64);
    assert_true(rt_device_configure(&gpu, &(RtDeviceFlags){1, -1, -1, -1, -1, -1, NULL}, &dc, err,
                                    sizeof err));
    assert_true(dc.cudnn_autotune);
    assert_int_equal(dc.cudnn_workspace_mb, RT_CUDNN_WORKSPACE_MB_DEFAULT);
    /* the fp32 engine rule and the nondeterministic engines: exact and
     * refused by default, refused by a CPU program, taken by a GPU one */
    assert_int_equal(dc.cudnn_fp32, 0);
    assert_false(dc.cudnn_nondeterministic);
    assert_false(rt_device_configure(&cpu, &(RtDeviceFlags){-1, -1, 1, -1, -1, -1, NULL}, &dc, err,
                                     sizeof err));
    assert_non_null(strstr(err, "--cudnn-fp32"));
    assert_false(rt_device_configure(&cpu, &(RtDeviceFlags){-1, -1, -1, 1, -1, -1, NULL}, &dc, err,
                                     sizeof err));
    assert_non_null(strstr(err, "--cudnn-nondeterministic"));
    assert_true(rt_device_configure(&gpu, &(RtDeviceFlags){-1, -1, 2, 1, -1, -1, NULL}, &dc, err,
                                    sizeof err));
    assert_int_equal(dc.cudnn_fp32, 2);
    assert_true(dc.cudnn_nondeterministic);
    /* bounded autotune and the plan cache (issue 26): 4, skipped, none by default;
     * refused by a CPU program, taken by a GPU one */
    assert_true(rt_device_configure(&gpu, &(RtDeviceFlags){-1, -1, -1, -1, -1, -1, NULL}, &dc, err,
                                    sizeof err));
    assert_int_equal(dc.cudnn_autotune_max, RT_CUDNN_AUTOTUNE_MAX_DEFAULT);
    assert_int_equal(RT_CUDNN_AUTOTUNE_MAX_DEFAULT, 4);
    assert_false(dc.cudnn_runtime_compiled);
    assert_null(dc.cudnn_plan_cache);
    assert_false(rt_device_configure(&cpu, &(RtDeviceFlags){-1, -1, -1, -1, 2, -1, NULL}, &dc, err,
                                     sizeof err));
    assert_non_null(strstr(err, "--cudnn-autotune-max"));
    assert_false(rt_device_configure(&cpu, &(RtDeviceFlags){-1, -1, -1, -1, -1, 1, NULL}, &dc, err,
                                     sizeof err));
    assert_non_null(strstr(err, "--cudnn-runtime-compiled"));
    assert_false(rt_device_configure(&cpu, &(RtDeviceFlags){-1, -1, -1, -1, -1, -1, "p"}, &dc, err,
                                     sizeof err));
    assert_non_null(strstr(err, "--cudnn-plan-cache"));
    assert_true(rt_device_configure(&gpu, &(RtDeviceFlags){-1, -1, -1, -1, 2, 1, "p"}, &dc, err,
                                    sizeof err));
    assert_int_equal(dc.cudnn_autotune_max, 2);
    assert_true(dc.cudnn_runtime_compiled);
    assert_string_equal(dc.cudnn_plan_cache, "p");
    /* --cudnn-check: a CPU program refuses it */
    FILE *sink = tmpfile();
    assert_non_null(sink);
    assert_int_equal(rt_device_check(&cpu, &dc, 4, sink, sink), 2);
    rewind(sink);
    char line[256] = "";
    assert_non_null(fgets(line, sizeof line, sink));
    assert_non_null(strstr(line, "--cudnn-check"));
    fclose(sink);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_device_and_workspace),
        cmocka_unit_test(test_open_device_fails),
        cmocka_unit_test(test_cpu_workspace_grows),
        cmocka_unit_test(test_device_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
