/*
 * test_train_cli.c - the program's settings (runtime/train.c): built-in
 * defaults, the model's train_defaults, the command line (getopt_long) with
 * its errors (exit status 2), and the learning-rate schedule.
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

#include "train.h"

/* ---- helpers ------------------------------------------------------------------ */

static char out_text[8192], err_text[8192];

static void slurp(FILE *f, char *dst, size_t cap)
{
    rewind(f);
    size_t n = fread(dst, 1, cap - 1, f);
    dst[n] = 0;
    fclose(f);
}

/* Parses a NULL-ended argument list after the program name; fills out_text
 * and err_text. */
static int parse(RtTrainOptions *o, const char *const *args)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)"./bin/train_tiny";
    for (; *args; args++)
        argv[argc++] = (char *)*args;
    argv[argc] = NULL;
    FILE *out = tmpfile(), *err = tmpfile();
    int rc = rt_train_parse_args(o, argc, argv, out, err);
    slurp(out, out_text, sizeof out_text);
    slurp(err, err_text, sizeof err_text);
    return rc;
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void expect_error(const char *const *args, const char *msg)
{
    RtTrainOptions o;
    rt_train_options_default(&o);
    int rc = parse(&o, args);
    if (rc != 2 || !strstr(err_text, msg))
        fail_msg("rc %d, expected 2 and '%s' in: %s", rc, msg, err_text);
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_builtin_defaults(void **state)
{
    (void)state;
    RtTrainOptions o;
    unsetenv("AMPC_DATA_DIR");
    rt_train_options_default(&o);
    assert_int_equal(o.epochs, 1);
    assert_int_equal(o.batch_size, 32);
    assert_true(o.max_steps < 0);
    assert_float_equal(o.lr, 0.01, 1e-9);
    assert_float_equal(o.momentum, 0.9, 1e-7);
    assert_int_equal(o.log_interval, 50);
    assert_string_equal(o.data, "synthetic");
    /* the compiled-in default (the Makefile's build/data), else ./data */
    assert_non_null(o.data_dir);
    assert_true(o.data_dir[0] != 0);
    assert_string_not_equal(o.data_dir, "/somewhere/data");
    setenv("AMPC_DATA_DIR", "/somewhere/data", 1);
    rt_train_options_default(&o);
    assert_string_equal(o.data_dir, "/somewhere/data");
    unsetenv("AMPC_DATA_DIR");
    RtInit ini;
    char err[256];
    assert_true(rt_init_parse(o.init, &ini, err, sizeof err));
    assert_int_equal(ini.kind, RT_INIT_XAVIER);
    assert_float_equal(ini.magnitude, 3, 0);
}

static void test_train_defaults(void **state)
{
    (void)state;
    RtTrainOptions o;
    char err[512];
    rt_train_options_default(&o);
    const char *const kv[] = {
        "batch_size=512", "epochs=120", "optimizer=nag(momentum=0.8, wd=0.0001, multi_precision=true)",
        "lr=cosine(base=0.2, final=0.001, warmup_epochs=5, warmup_begin=0.01)",
        "init=msra_prelu()", "amp=float16", "loss_scale=dynamic", "kvstore=auto",
        "data=digits", "seed=7", "log_interval=20", "max_steps=1000", NULL,
    };
    assert_true(rt_train_apply_defaults(&o, kv, err, sizeof err));
    assert_int_equal(o.batch_size, 512);
    assert_int_equal(o.epochs, 120);
    assert_int_equal(o.optimizer, RT_OPT_NAG);
    assert_float_equal(o.momentum, 0.8, 1e-7);
    assert_float_equal(o.wd, 1e-4, 1e-10);
    assert_int_equal(o.sched.kind, RT_LR_COSINE);
    assert_float_equal(o.lr, 0.2, 1e-7);
    assert_float_equal(o.sched.final_lr, 0.001, 1e-9);
    assert_float_equal(o.sched.warmup_epochs, 5, 0);
    assert_float_equal(o.sched.warmup_begin, 0.01, 1e-9);
    assert_string_equal(o.init, "msra_prelu()");
    assert_string_equal(o.data, "digits");
    assert_int_equal(o.seed, 7);
    assert_int_equal(o.log_interval, 20);
    assert_int_equal(o.max_steps, 1000);
    /* a plain lr, an sgd optimizer, a quoted data source */
    const char *const kv2[] = {"lr=0.05", "optimizer=sgd(momentum=0)", "data=\"synthetic\"", NULL};
    assert_true(rt_train_apply_defaults(&o, kv2, err, sizeof err));
    assert_int_equal(o.sched.kind, RT_LR_CONSTANT);
    assert_float_equal(o.lr, 0.05, 1e-9);
    assert_int_equal(o.optimizer, RT_OPT_SGD);
    assert_float_equal(o.momentum, 0, 0);
    assert_string_equal(o.data, "synthetic");
    assert_true(rt_train_apply_defaults(&o, NULL, err, sizeof err));

    /* errors name the entry */
    static const struct {
        const char *kv, *msg;
    } bad[] = {
        {"batch_size=0", "train default 'batch_size=0': bad value"},
        {"epochs=ten", "'epochs=ten'"},
        {"lr=fast", "lr 'fast'"},
        {"lr=cosine(base=x)", "base must be a number"},
        {"optimizer=adam()", "optimizer 'adam' is not supported"},
        {"optimizer=sgd(momentum=", "not of the form"},
        {"init=orthogonal()", "unknown initialiser"},
        {"momentum=2", "'momentum=2'"},
        {"nokey", "is not key=value"},
        {"=3", "is not key=value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *one[2] = {bad[i].kv, NULL};
        rt_train_options_default(&o);
        if (rt_train_apply_defaults(&o, one, err, sizeof err) || !strstr(err, bad[i].msg))
            fail_msg("'%s': expected an error with '%s', got '%s'", bad[i].kv, bad[i].msg, err);
    }
}

static void test_flags(void **state)
{
    (void)state;
    RtTrainOptions o;
    rt_train_options_default(&o);
    int rc = parse(&o, ARGS("--max-steps", "100", "--epochs=3", "--batch-size", "64", "--lr",
                            "0.5", "--momentum", "0", "--wd", "0.001", "--seed", "0x10", "--data",
                            "digits", "--data-dir", "/d", "--log-interval", "10", "--threads", "2"));
    assert_int_equal(rc, -1);
    assert_string_equal(err_text, "");
    assert_int_equal(o.max_steps, 100);
    assert_int_equal(o.epochs, 3);
    assert_int_equal(o.batch_size, 64);
    assert_float_equal(o.lr, 0.5, 0);
    assert_float_equal(o.momentum, 0, 0);
    assert_float_equal(o.wd, 0.001, 1e-9);
    assert_int_equal(o.seed, 16);
    assert_string_equal(o.data, "digits");
    assert_string_equal(o.data_dir, "/d");
    assert_int_equal(o.log_interval, 10);
    assert_int_equal(o.threads, 2);
    assert_string_equal(o.prog, "train_tiny");
    /* flags override train defaults; a second parse in the same process works */
    const char *const kv[] = {"batch_size=8", "epochs=9", NULL};
    char err[256];
    rt_train_options_default(&o);
    assert_true(rt_train_apply_defaults(&o, kv, err, sizeof err));
    assert_int_equal(parse(&o, ARGS("--epochs", "2")), -1);
    assert_int_equal(o.epochs, 2);
    assert_int_equal(o.batch_size, 8);
    assert_int_equal(parse(&o, ARGS("--max-steps=0", "--log-interval=0")), -1);
    assert_int_equal(o.max_steps, 0);
    assert_int_equal(o.log_interval, 0);
}

static void test_help(void **state)
{
    (void)state;
    RtTrainOptions o;
    rt_train_options_default(&o);
    assert_int_equal(parse(&o, ARGS("--help")), 0);
    assert_non_null(strstr(out_text, "Usage: train_tiny [options]"));
    const char *flags[] = {"--epochs", "--max-steps", "--batch-size", "--lr", "--momentum", "--wd",
                           "--seed", "--data ", "--data-dir", "--log-interval", "--threads", "--help"};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
        if (!strstr(out_text, flags[i]))
            fail_msg("--help does not mention %s", flags[i]);
    rt_train_options_default(&o);
    assert_int_equal(parse(&o, ARGS("-h")), 0);
    assert_string_equal(err_text, "");
}

static void test_flag_errors(void **state)
{
    (void)state;
    expect_error(ARGS("--epochz", "3"), "train_tiny: unknown option '--epochz'");
    expect_error(ARGS("--bogus"), "unknown option '--bogus'\nTry 'train_tiny --help'.");
    expect_error(ARGS("-x"), "unknown option '-x'");
    expect_error(ARGS("--lr"), "option '--lr' needs a value");
    expect_error(ARGS("--lr", "fast"), "--lr: 'fast' is not a number >= 0");
    expect_error(ARGS("--lr=-1"), "--lr: '-1' is not a number >= 0");
    expect_error(ARGS("--lr", "nan"), "--lr: 'nan'");
    expect_error(ARGS("--batch-size", "0"), "--batch-size: '0' is not an integer >= 1");
    expect_error(ARGS("--batch-size", "12abc"), "--batch-size: '12abc'");
    expect_error(ARGS("--epochs", "99999999999"), "--epochs: '99999999999'");
    expect_error(ARGS("--max-steps", "-5"), "--max-steps: '-5' is not an integer >= 0");
    expect_error(ARGS("--momentum", "1.5"), "--momentum: '1.5' is not a number in [0, 1]");
    expect_error(ARGS("--seed", "-1"), "--seed: '-1' is not an unsigned integer");
    expect_error(ARGS("--data", "cifar10"), "--data: 'cifar10' is not synthetic or digits");
    expect_error(ARGS("--data-dir="), "--data-dir: '' is not a directory");
    expect_error(ARGS("--threads", "0"), "--threads: '0'");
    expect_error(ARGS("--epochs", "2", "extra"), "unexpected argument 'extra'");
    expect_error(ARGS("--help=3"), "option '--help' takes no value");
}

static void test_main_exit_codes(void **state)
{
    (void)state;
    /* a model whose defaults are broken: rt_train_main stops before running */
    static const char *const bad[] = {"lr=fast", NULL};
    RtModel m;
    memset(&m, 0, sizeof m);
    m.name = "none";
    m.train_defaults = bad;
    char *argv[] = {(char *)"prog", NULL};
    assert_int_equal(rt_train_main(1, argv, &m), 2);
    m.train_defaults = NULL;
    char *argv2[] = {(char *)"prog", (char *)"--nope", NULL};
    assert_int_equal(rt_train_main(2, argv2, &m), 2);
}

static void test_lr_schedule(void **state)
{
    (void)state;
    RtLrSchedule c = {.kind = RT_LR_CONSTANT};
    assert_float_equal(rt_lr_at(&c, 0.1f, 1, 10, 100), 0.1f, 0);
    assert_float_equal(rt_lr_at(&c, 0.1f, 1000, 10, 100), 0.1f, 0);
    /* MXNet's CosineScheduler: max_update 100, warmup 2 epochs of 10 steps */
    RtLrSchedule s = {.kind = RT_LR_COSINE, .final_lr = 0.0f, .warmup_epochs = 2, .warmup_begin = 0.01f};
    double base = 0.2;
    assert_float_equal(rt_lr_at(&s, 0.2f, 0, 10, 100), 0.01, 1e-7);
    assert_float_equal(rt_lr_at(&s, 0.2f, 10, 10, 100), 0.01 + (base - 0.01) * 10 / 20, 1e-6);
    assert_float_equal(rt_lr_at(&s, 0.2f, 20, 10, 100), base, 1e-6);
    assert_float_equal(rt_lr_at(&s, 0.2f, 60, 10, 100), base / 2, 1e-6);
    assert_float_equal(rt_lr_at(&s, 0.2f, 40, 10, 100),
                       base * (1 + cos(3.141592653589793 * 20 / 80)) / 2, 1e-6);
    assert_float_equal(rt_lr_at(&s, 0.2f, 100, 10, 100), 0, 1e-7);
    assert_float_equal(rt_lr_at(&s, 0.2f, 150, 10, 100), 0, 0); /* stays at final */
    s.final_lr = 0.002f;
    assert_float_equal(rt_lr_at(&s, 0.2f, 150, 10, 100), 0.002, 1e-9);
    assert_float_equal(rt_lr_at(&s, 0.2f, 60, 10, 100), (0.2 + 0.002) / 2, 1e-6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtin_defaults), cmocka_unit_test(test_train_defaults),
        cmocka_unit_test(test_flags),            cmocka_unit_test(test_help),
        cmocka_unit_test(test_flag_errors),      cmocka_unit_test(test_main_exit_codes),
        cmocka_unit_test(test_lr_schedule),
    };
    return cmocka_run_group_tests_name("train_cli", tests, NULL, NULL);
}
