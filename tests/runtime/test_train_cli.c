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

#include "settings.h"
#include "train.h"
#include "lr.h"

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
    char *argv[64];
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
    assert_int_equal(o.loss_scale.mode, RT_LS_DEFAULT); /* by the model's amp */
    assert_float_equal(o.loss_scale.init, 65536, 0);
    assert_true(o.clip_gradient < 0);
    assert_true(o.inject_inf_step < 0 && o.inject_nan_step < 0);
    assert_null(o.save_dir);
    assert_null(o.resume);
    assert_false(o.eval_only || o.check_numerics);
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
        "init=msra_prelu()", "amp=float16", "loss_scale=dynamic(init=1024, interval=500)",
        "kvstore=auto",
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
    assert_int_equal(o.loss_scale.mode, RT_LS_DYNAMIC);
    assert_float_equal(o.loss_scale.init, 1024, 0);
    assert_int_equal(o.loss_scale.interval, 500);
    /* the compiler's --optimizer/--loss-scale overrides arrive the same way */
    const char *const lead[] = {"optimizer=nag(momentum=0.9, wd=0.0001, multi_precision=true)",
                                "loss_scale=dynamic(init=65536)", "loss_scale=off",
                                "loss_scale=128", NULL};
    assert_true(rt_train_apply_defaults(&o, lead, err, sizeof err));
    assert_int_equal(o.loss_scale.mode, RT_LS_STATIC);
    assert_float_equal(o.loss_scale.init, 128, 0);
    /* clip_gradient 0 is off (MXNet's Python layer passes it only when truthy) */
    const char *const clip[] = {"optimizer=sgd(clip_gradient=0)", NULL};
    assert_true(rt_train_apply_defaults(&o, clip, err, sizeof err));
    assert_true(o.clip_gradient < 0);
    const char *const clip2[] = {"optimizer=sgd(clip_gradient=2.5)", NULL};
    assert_true(rt_train_apply_defaults(&o, clip2, err, sizeof err));
    assert_float_equal(o.clip_gradient, 2.5, 0);
    /* schedules: warmup_steps, warmup_mode, max_update; constant */
    const char *const sch[] = {"lr=cosine(base_lr=0.4, final_lr=0.01, warmup_steps=30, "
                               "warmup_begin_lr=0.1, warmup_mode=constant, max_update=900)", NULL};
    assert_true(rt_train_apply_defaults(&o, sch, err, sizeof err));
    assert_int_equal(o.sched.kind, RT_LR_COSINE);
    assert_float_equal(o.lr, 0.4, 1e-7);
    assert_int_equal(o.sched.warmup_steps, 30);
    assert_int_equal(o.sched.warmup_mode, RT_WARMUP_CONSTANT);
    assert_int_equal(o.sched.max_update, 900);
    const char *const cst[] = {"lr=constant(base=0.3)", NULL};
    assert_true(rt_train_apply_defaults(&o, cst, err, sizeof err));
    assert_int_equal(o.sched.kind, RT_LR_CONSTANT);
    assert_float_equal(o.lr, 0.3, 1e-7);
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
        {"batch_size=0",
         "train default 'batch_size=0': '0' is not an integer from 1 to 2147483647"},
        {"epochs=ten", "'epochs=ten'"},
        {"lr=fast", "lr 'fast'"},
        {"lr=cosine(base=x)", "base must be a decimal number"},
        {"optimizer=rmsprop()", "optimizer 'rmsprop' is not supported"},
        {"optimizer=sgd(momentum=", "not of the form"},
        {"optimizer=sgd(lazy_update=true)", "sgd() has no argument 'lazy_update' (momentum, wd, "},
        {"optimizer=nag(multi_precision=maybe)", "multi_precision must be true or false"},
        {"optimizer=sgd(momentum=1.5)", "needs momentum in [0, 1]"},
        {"lr=cosine(warmup_steps=5, warmup_epochs=1)", "not both"},
        {"lr=cosine(warmup_steps=2.5)", "warmup_steps must be an integer"},
        {"lr=cosine(warmup_mode=exp)", "warmup_mode must be linear or constant"},
        {"lr=cosine(final=-1)", "must be >= 0"},
        {"lr=cosine(cycles=2)", "cosine() has no argument 'cycles'"},
        {"lr=exp(base=1)", "a number, constant(base=), cosine("},
        {"loss_scale=sometimes", "expected dynamic"},
        {"loss_scale=dynamic(growth=0.5)", "growth must be in"},
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
    int rc = parse(&o, ARGS("--max-steps", "100", "--epochs=3", "--batch-size", "64", "--lr", "0.5",
                            "--momentum", "0", "--wd", "0.001", "--seed", "16", "--data", "digits",
                            "--data-dir", "/d", "--log-interval", "10", "--threads", "2",
                            "--loss-scale", "dynamic(init=1024, backoff=0.25)", "--save-dir", "ck",
                            "--resume", "ck/m-0002.ckpt", "--eval-only", "--check-numerics",
                            "--inject-inf-at-step=7", "--inject-nan=stage1_unit1_conv1:12"));
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
    assert_int_equal(o.loss_scale.mode, RT_LS_DYNAMIC);
    assert_float_equal(o.loss_scale.init, 1024, 0);
    assert_float_equal(o.loss_scale.backoff, 0.25, 0);
    assert_string_equal(o.save_dir, "ck");
    assert_string_equal(o.resume, "ck/m-0002.ckpt");
    assert_true(o.eval_only);
    assert_true(o.check_numerics);
    assert_int_equal(o.inject_inf_step, 7);
    assert_string_equal(o.inject_nan_node, "stage1_unit1_conv1");
    assert_int_equal(o.inject_nan_step, 12);
    /* a node name may hold ':' (the last one separates the step) */
    assert_int_equal(parse(&o, ARGS("--inject-nan", "a:b:3", "--loss-scale", "off")), -1);
    assert_string_equal(o.inject_nan_node, "a:b");
    assert_int_equal(o.inject_nan_step, 3);
    assert_int_equal(o.loss_scale.mode, RT_LS_OFF);
    assert_int_equal(parse(&o, ARGS("--loss-scale=512")), -1);
    assert_int_equal(o.loss_scale.mode, RT_LS_STATIC);
    assert_float_equal(o.loss_scale.init, 512, 0);
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
                           "--seed", "--data ", "--data-dir", "--log-interval", "--threads", "--help",
                           "--loss-scale", "--save-dir", "--resume", "--eval-only",
                           "--check-numerics", "--inject-inf-at-step", "--inject-nan"};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
        if (!strstr(out_text, flags[i]))
            fail_msg("--help does not mention %s", flags[i]);
    /* every flag of the settings table (runtime/settings.c) is in the usage */
    for (int i = 0; i < rt_nsettings; i++) {
        char flag[80];
        snprintf(flag, sizeof flag, "--%s", rt_settings[i].flag ? rt_settings[i].flag : "help");
        if (!strstr(out_text, flag))
            fail_msg("--help does not mention %s", flag);
    }
    /* and every one is a flag the program takes (getopt's table is built from it) */
    for (int i = 0; i < rt_nsettings; i++) {
        if (!rt_settings[i].flag)
            continue;
        char flag[80];
        snprintf(flag, sizeof flag, "--%s", rt_settings[i].flag);
        rt_train_options_default(&o);
        int rc = parse(&o, rt_settings[i].has_arg ? ARGS(flag) : ARGS(flag, "extra"));
        /* a flag with a value given none, or one without given a stray word */
        if (rc != 2 || !strstr(err_text, rt_settings[i].has_arg ? "needs a value"
                                                                  : "unexpected argument"))
            fail_msg("%s: rc %d, %s", flag, rc, err_text);
    }
    rt_train_options_default(&o);
    assert_int_equal(parse(&o, ARGS("-h")), 0);
    assert_string_equal(err_text, "");
}

static void test_flag_errors(void **state)
{
    (void)state;
    expect_error(ARGS("--epochz", "3"), "train_tiny: unknown option '--epochz' (did you mean "
                                        "'--epochs'?)");
    expect_error(ARGS("--batchsize", "3"), "unknown option '--batchsize' (did you mean "
                                           "'--batch-size'?)");
    expect_error(ARGS("--e"), "option '--e' is ambiguous: it could be --epochs --eval-only");
    expect_error(ARGS("--bogus"), "unknown option '--bogus'\nTry 'train_tiny --help'.");
    expect_error(ARGS("-x"), "unknown option '-x'");
    expect_error(ARGS("--lr"), "option '--lr' needs a value");
    expect_error(ARGS("--lr", "fast"), "--lr: 'fast' is not a number from 0 to 1e30");
    expect_error(ARGS("--lr=-1"), "--lr: '-1' is not a number from 0 to 1e30");
    expect_error(ARGS("--lr", "nan"), "--lr: 'nan'");
    expect_error(ARGS("--batch-size", "0"),
                 "--batch-size: '0' is not an integer from 1 to 2147483647");
    expect_error(ARGS("--batch-size", "12abc"), "--batch-size: '12abc'");
    expect_error(ARGS("--epochs", "99999999999"), "--epochs: '99999999999'");
    expect_error(ARGS("--max-steps", "-5"),
                 "--max-steps: '-5' is not an integer from 0 to 9223372036854775807");
    expect_error(ARGS("--momentum", "1.5"), "--momentum: '1.5' is not a number in [0, 1]");
    expect_error(ARGS("--seed", "-1"),
                 "--seed: '-1' is not an integer from 0 to 18446744073709551615");
    expect_error(ARGS("--data", "mnist"), "--data: 'mnist' is not synthetic, digits, fashion_mnist");
    expect_error(ARGS("--data", "idx(a, b, c)"), "idx() needs train_images");
    expect_error(ARGS("--data", "cifar10(\"a\", \"b\")"), "too many arguments");
    expect_error(ARGS("--data", "digits(\"x\")"), "too many arguments");
    expect_error(ARGS("--augment", "crop"), "--augment: 'crop': expected crop=PAD");
    expect_error(ARGS("--random-crop", "-1"), "--random-crop: '-1' is not a padding 0..64");
    expect_error(ARGS("--optimizer", "adam(beta1=1)"), "beta1 and beta2 in [0, 1)");
    expect_error(ARGS("--optimizer", "adam(momentum=0.9)"), "adam() has no argument 'momentum'");
    expect_error(ARGS("--optimizer", "rmsprop"), "optimizer 'rmsprop' is not supported");
    expect_error(ARGS("--lr", "step(factor=0.5)"), "give one of steps=");
    expect_error(ARGS("--lr", "step(factor=0.5, steps=\"30,20\")"), "increasing");
    expect_error(ARGS("--lr", "poly(power=-1)"), "power must be >= 0");
    expect_error(ARGS("--json-log="), "--json-log: '' is not a file name");
    expect_error(ARGS("--data-dir="), "--data-dir: '' is not a directory");
    expect_error(ARGS("--threads", "0"), "--threads: '0'");
    expect_error(ARGS("--epochs", "2", "extra"), "unexpected argument 'extra'");
    expect_error(ARGS("--help=3"), "option '--help' takes no value");
    expect_error(ARGS("--eval-only=yes"), "option '--eval-only' takes no value");
    expect_error(ARGS("--loss-scale", "0"), "--loss-scale: loss scale '0': a static scale must be "
                                            "a number above 0 and at most 3.4028235e+38");
    /* the number grammar (settings.h): decimal only, real bounds (issue 21) */
    expect_error(ARGS("--lr", "0x10"), "train_tiny: --lr: '0x10' is not a number from 0 to 1e30");
    expect_error(ARGS("--lr", "1e39"), "--lr: '1e39' is not a number from 0 to 1e30");
    expect_error(ARGS("--seed", "0x10"), "--seed: '0x10' is not an integer from 0 to");
    expect_error(ARGS("--epochs", "9223372036854775807"),
                 "--epochs: '9223372036854775807' is not an integer from 0 to 2147483647");
    expect_error(ARGS("--loss-scale", "dynamic(init=1024"), "--loss-scale: loss scale ");
    expect_error(ARGS("--loss-scale=dynamic(interval=0)"), "interval must be an integer >= 1");
    expect_error(ARGS("--inject-inf-at-step", "-1"), "--inject-inf-at-step: '-1' is not a step number");
    expect_error(ARGS("--inject-nan", "fc1"), "--inject-nan: 'fc1' is not NODE:STEP");
    expect_error(ARGS("--inject-nan", ":3"), "is not NODE:STEP");
    expect_error(ARGS("--inject-nan", "fc1:x"), "is not NODE:STEP");
    expect_error(ARGS("--resume="), "--resume: '' is not a checkpoint file");
    expect_error(ARGS("--save-dir="), "--save-dir: '' is not a directory");
}

/* --version: the runtime's release and git revision (build_info.c), and
 * with rt_train_main's model what ampc wrote into it (no paths) */
static void test_version(void **state)
{
    (void)state;
    RtTrainOptions o;
    rt_train_options_default(&o);
    assert_int_equal(parse(&o, ARGS("--version")), 0);
    char want[128];
    snprintf(want, sizeof want, "runtime: ampc %s", rt_release_version());
    assert_non_null(strstr(out_text, want));
    assert_non_null(strstr(out_text, *rt_git_revision() ? " (git " : "\n"));
    RtModel m;
    memset(&m, 0, sizeof m);
    m.name = "tiny";
    m.ampc_version = "9.9.9";
    m.model_hash = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    m.built_with = "ampc tiny.sym -o tiny";
    char *argv[] = {(char *)"/some/where/tiny", (char *)"--version", NULL};
    FILE *keep = stdout, *out = tmpfile();
    stdout = out;
    assert_int_equal(rt_train_main(2, argv, &m), 0);
    stdout = keep;
    slurp(out, out_text, sizeof out_text);
    assert_non_null(strstr(out_text, "tiny: model tiny (sha256 0123456789abcdef0123456789abcdef01234"
                                     "56789abcdef0123456789abcdef), compiled by ampc 9.9.9\n"
                                     "built with: ampc tiny.sym -o tiny\nruntime: ampc "));
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
    /* warmup_steps instead of epochs, and a constant warmup */
    RtLrSchedule w = {.kind = RT_LR_COSINE, .warmup_steps = 5, .warmup_begin = 0.05f};
    assert_float_equal(rt_lr_at(&w, 0.2f, 1, 1000, 105), 0.05 + 0.15 * 1 / 5, 1e-7);
    assert_float_equal(rt_lr_at(&w, 0.2f, 4, 1000, 105), 0.05 + 0.15 * 4 / 5, 1e-7);
    assert_float_equal(rt_lr_at(&w, 0.2f, 5, 1000, 105), 0.2, 1e-7);
    assert_float_equal(rt_lr_at(&w, 0.2f, 55, 1000, 105), 0.1, 1e-7);
    w.warmup_mode = RT_WARMUP_CONSTANT;
    assert_float_equal(rt_lr_at(&w, 0.2f, 4, 1000, 105), 0.05, 0);
    assert_float_equal(rt_lr_at(&w, 0.2f, 5, 1000, 105), 0.2, 1e-7);
    /* an explicit max_update wins over epochs x steps */
    w.max_update = 205;
    assert_float_equal(rt_lr_at(&w, 0.2f, 105, 1000, 105), 0.1, 1e-7);
    assert_float_equal(rt_lr_at(&w, 0.2f, 300, 1000, 105), 0, 0);
    /* MXNet's formula step by step (steps counted from 1, final held) */
    RtLrSchedule m = {.kind = RT_LR_COSINE, .final_lr = 0.001f, .warmup_epochs = 1,
                      .warmup_begin = 0};
    for (int64_t t = 1; t <= 60; t++) {
        double want;
        if (t < 10)
            want = 0.1 * (double)t / 10;
        else if (t <= 50)
            want = 0.001 + (0.1 - 0.001) * (1 + cos(3.141592653589793 * (double)(t - 10) / 40)) / 2;
        else
            want = 0.001;
        assert_float_equal(rt_lr_at(&m, 0.1f, t, 10, 50), want, 1e-7);
    }
}

/* MXNet 1.x's schedulers (python/mxnet/lr_scheduler.py), written out as the
 * stateful Python classes are, called once per update t = 1, 2, ... */
typedef struct {
    double base_lr;
    int64_t count;
} PyFactor;

static double py_factor(PyFactor *f, int64_t num_update, int64_t step, double factor,
                        double stop_factor_lr)
{
    while (num_update > f->count + step) {
        f->count += step;
        f->base_lr *= factor;
        if (f->base_lr < stop_factor_lr)
            f->base_lr = stop_factor_lr;
    }
    return f->base_lr;
}

static double py_multifactor(double *base_lr, int *cur, int64_t num_update, const int64_t *steps,
                             int n, double factor)
{
    while (*cur <= n - 1) {
        if (num_update > steps[*cur]) {
            (*cur)++;
            *base_lr *= factor;
        } else
            return *base_lr;
    }
    return *base_lr;
}

static double py_poly(int64_t num_update, double base, double final, double pwr, int64_t warm,
                      double warm_begin, int64_t max_update, double *last)
{
    if (num_update < warm)
        return warm_begin + (base - warm_begin) * (double)num_update / (double)warm;
    if (num_update <= max_update)
        *last = final + (base - final) *
                            pow(1 - (double)(num_update - warm) / (double)(max_update - warm), pwr);
    return *last;
}

static void test_step_poly_schedules(void **state)
{
    (void)state;
    RtTrainOptions o;
    char err[512];
    /* step(factor, steps=N): FactorScheduler(step=N, factor, stop_factor_lr) */
    rt_train_options_default(&o);
    const char *kv1[] = {"lr=step(base=0.1, factor=0.5, steps=7, stop_factor_lr=0.002)", NULL};
    assert_true(rt_train_apply_defaults(&o, kv1, err, sizeof err));
    assert_int_equal(o.sched.kind, RT_LR_STEP);
    assert_int_equal(o.sched.period, 7);
    PyFactor f = {.base_lr = 0.1};
    for (int64_t t = 1; t <= 80; t++) {
        double want = py_factor(&f, t, 7, 0.5, 0.002);
        assert_float_equal(rt_lr_at(&o.sched, o.lr, t, 10, 100), (float)want, 0);
    }
    assert_float_equal(rt_lr_at(&o.sched, o.lr, 7, 10, 100), 0.1f, 0);  /* t > 7 changes */
    assert_float_equal(rt_lr_at(&o.sched, o.lr, 8, 10, 100), 0.05f, 0);
    assert_float_equal(rt_lr_at(&o.sched, o.lr, 80, 10, 100), 0.002f, 0); /* the floor */
    /* step(factor, steps="a,b,c"): MultiFactorScheduler */
    rt_train_options_default(&o);
    const char *kv2[] = {"lr=step(base=0.4, factor=0.1, steps=\"5,12,30\")", NULL};
    assert_true(rt_train_apply_defaults(&o, kv2, err, sizeof err));
    assert_int_equal(o.sched.nsteps, 3);
    int64_t st[3] = {5, 12, 30};
    double base = 0.4;
    int cur = 0;
    for (int64_t t = 1; t <= 40; t++) {
        double want = py_multifactor(&base, &cur, t, st, 3, 0.1);
        assert_float_equal(rt_lr_at(&o.sched, o.lr, t, 10, 100), (float)want, 0);
    }
    /* step_epochs: the list in epochs (fit.py's --lr-step-epochs), 10 steps each */
    rt_train_options_default(&o);
    const char *kv3[] = {"lr=step(base=0.4, factor=0.1, step_epochs=\"2,3\")", NULL};
    assert_true(rt_train_apply_defaults(&o, kv3, err, sizeof err));
    assert_float_equal(rt_lr_at(&o.sched, o.lr, 20, 10, 100), 0.4f, 0);
    assert_float_equal(rt_lr_at(&o.sched, o.lr, 21, 10, 100), (float)(0.4 * 0.1), 0);
    assert_float_equal(rt_lr_at(&o.sched, o.lr, 31, 10, 100), (float)(0.4 * 0.1 * 0.1), 0);
    /* warmup before a step schedule */
    rt_train_options_default(&o);
    const char *kv4[] = {"lr=step(base=0.2, factor=0.5, steps=10, warmup_steps=4, "
                         "warmup_begin=0.04)", NULL};
    assert_true(rt_train_apply_defaults(&o, kv4, err, sizeof err));
    assert_float_equal(rt_lr_at(&o.sched, o.lr, 2, 10, 100), (float)(0.04 + 0.16 * 2 / 4), 1e-7);
    assert_float_equal(rt_lr_at(&o.sched, o.lr, 11, 10, 100), 0.1f, 0);
    /* poly(power, final): PolyScheduler, max_update from epochs x steps */
    for (int w = 0; w < 2; w++) {
        rt_train_options_default(&o);
        const char *kv5[] = {w ? "lr=poly(base=0.3, power=2, final=0.01, warmup_steps=5, "
                                 "warmup_begin=0.03)"
                               : "lr=poly(base=0.3, power=0.9, final=0)",
                             NULL};
        assert_true(rt_train_apply_defaults(&o, kv5, err, sizeof err));
        assert_int_equal(o.sched.kind, RT_LR_POLY);
        double last = 0.3;
        for (int64_t t = 1; t <= 60; t++) {
            double want = w ? py_poly(t, 0.3, 0.01, 2, 5, 0.03, 50, &last)
                            : py_poly(t, 0.3, 0, 0.9, 0, 0, 50, &last);
            assert_float_equal(rt_lr_at(&o.sched, o.lr, t, 10, 50), (float)want, 1e-7);
        }
        /* the brief's closed form without warmup: final + (base-final)(1 - t/max)^power */
        if (!w)
            assert_float_equal(rt_lr_at(&o.sched, o.lr, 20, 10, 50),
                               (float)(0.3 * pow(1 - 20.0 / 50, 0.9)), 1e-7);
    }
    /* flags: --lr takes a schedule, --optimizer adam, --init, --augment */
    rt_train_options_default(&o);
    assert_int_equal(parse(&o, ARGS("--lr", "poly(base=0.5, power=1)", "--optimizer",
                                    "adam(beta1=0.8, beta2=0.99, epsilon=1e-6, wd=0)", "--init",
                                    "normal(sigma=0.02)", "--augment", "crop=4,mirror",
                                    "--json-log", "x.jsonl", "--profile")),
                     -1);
    assert_int_equal(o.sched.kind, RT_LR_POLY);
    assert_float_equal(o.lr, 0.5f, 0);
    assert_int_equal(o.optimizer, RT_OPT_ADAM);
    assert_float_equal(o.beta1, 0.8f, 0);
    assert_float_equal(o.beta2, 0.99f, 0);
    assert_float_equal(o.epsilon, 1e-6f, 0);
    assert_float_equal(o.wd, 0, 0);
    assert_string_equal(o.init, "normal(sigma=0.02)");
    assert_int_equal(o.augment_pad, 4);
    assert_true(o.augment_mirror);
    assert_string_equal(o.json_log, "x.jsonl");
    assert_true(o.profile);
    rt_train_options_default(&o);
    assert_int_equal(parse(&o, ARGS("--random-crop", "2", "--random-mirror", "--data",
                                    "idx(train_images=\"a b\", train_labels=b, test_images=c, "
                                    "test_labels=d)")),
                     -1);
    assert_int_equal(o.augment_pad, 2);
    assert_true(o.augment_mirror);
    /* the train block's data = cifar10("dir") and augment */
    rt_train_options_default(&o);
    const char *kv6[] = {"data=cifar10(\"dir\")", "augment=crop=4,mirror",
                         "optimizer=adam(beta1=0.85, lr=0.001)", NULL};
    assert_true(rt_train_apply_defaults(&o, kv6, err, sizeof err));
    assert_string_equal(o.data, "cifar10(\"dir\")");
    assert_int_equal(o.augment_pad, 4);
    assert_int_equal(o.optimizer, RT_OPT_ADAM);
    assert_float_equal(o.beta1, 0.85f, 0);
    assert_float_equal(o.lr, 0.001f, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtin_defaults),
        cmocka_unit_test(test_train_defaults),
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_flag_errors),
        cmocka_unit_test(test_main_exit_codes),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_lr_schedule),
        cmocka_unit_test(test_step_poly_schedules),
    };
    return cmocka_run_group_tests_name("train_cli", tests, NULL, NULL);
}
