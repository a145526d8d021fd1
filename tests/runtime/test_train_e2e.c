/*
 * test_train_e2e.c - whole runs of the training driver (runtime/train.c) on
 * the hand-written MLP of model_tiny.c (compiled into this test): the log
 * format, --max-steps, determinism, validation with a padded last batch, the
 * run-time errors, and convergence on the real digits data in fp32, fp16 and
 * bf16 (AMP with fp32 masters).
 *
 * The digits runs need $AMPC_DATA_DIR/digits.csv.gz (the Makefile fetches
 * it into build/data).  With AMPC_DATA_DIR unset they are skipped and say
 * so; with it set and the file missing they fail.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "model_tiny.c"
#include "train.h"

static char out_text[1 << 17], err_text[1 << 14];

static void slurp(FILE *f, char *dst, size_t cap)
{
    rewind(f);
    size_t n = fread(dst, 1, cap - 1, f);
    dst[n] = 0;
    fclose(f);
}

/* Options as main() builds them: built-in defaults, then the model's. */
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

static int run(const RtModel *m, const RtTrainOptions *o, RtTrainResult *res)
{
    FILE *out = tmpfile(), *err = tmpfile();
    int rc = rt_train_run(m, o, out, err, res);
    slurp(out, out_text, sizeof out_text);
    slurp(err, err_text, sizeof err_text);
    return rc;
}

static int count_lines(const char *text, const char *pattern)
{
    regex_t re;
    assert_int_equal(regcomp(&re, pattern, REG_EXTENDED | REG_NEWLINE), 0);
    int n = 0;
    const char *p = text;
    regmatch_t mt;
    while (regexec(&re, p, 1, &mt, 0) == 0) {
        n++;
        p += mt.rm_eo;
    }
    regfree(&re);
    return n;
}

#define NUM "[0-9]+\\.[0-9]{6}"

static void test_log_format(void **state)
{
    (void)state;
    RtTrainOptions o = options(&ampc_model);
    RtTrainResult r;
    o.data = "synthetic";
    o.batch_size = 16;
    o.max_steps = 120;
    o.log_interval = 50;
    assert_int_equal(run(&ampc_model, &o, &r), 0);
    assert_int_equal(r.steps, 120);
    assert_int_equal(r.epochs, 1);
    assert_string_equal(err_text, "");
    if (count_lines(out_text, "^Model tiny_mlp: 2410 trainable values, amp off; data synthetic: "
                              "10240 training and 1024 validation samples; batch 16, 640 steps per "
                              "epoch$") != 1 ||
        count_lines(out_text, "^Epoch\\[0\\] Batch \\[0-50\\]\tSpeed: [0-9]+\\.[0-9]{2} samples/sec\t"
                              "accuracy=" NUM "\tcross-entropy=" NUM "$") != 1 ||
        count_lines(out_text, "^Epoch\\[0\\] Batch \\[50-100\\]\tSpeed: [0-9]+\\.[0-9]{2} samples/sec\t"
                              "accuracy=" NUM "\tcross-entropy=" NUM "$") != 1 ||
        count_lines(out_text, "Batch") != 2 ||
        count_lines(out_text, "^Epoch\\[0\\] Train-accuracy=" NUM "$") != 1 ||
        count_lines(out_text, "^Epoch\\[0\\] Train-cross-entropy=" NUM "$") != 1 ||
        count_lines(out_text, "^Epoch\\[0\\] Time cost=[0-9]+\\.[0-9]{3}$") != 1 ||
        count_lines(out_text, "^Epoch\\[0\\] Validation-accuracy=" NUM "$") != 1 ||
        count_lines(out_text, "^Epoch\\[0\\] Validation-cross-entropy=" NUM "$") != 1 ||
        count_lines(out_text, "^Final validation-accuracy=" NUM "\n$") != 1 ||
        count_lines(out_text, "Epoch\\[1\\]") != 0)
        fail_msg("unexpected log:\n%s", out_text);
    /* the order: Train-accuracy, Time cost, then validation */
    const char *a = strstr(out_text, "Train-accuracy"), *t = strstr(out_text, "Time cost"),
               *v = strstr(out_text, "Validation-accuracy"), *f = strstr(out_text, "Final");
    assert_true(a < t && t < v && v < f);
    /* random labels: about 1/10 */
    assert_true(r.val_accuracy > 0.03 && r.val_accuracy < 0.2);
}

static void test_max_steps(void **state)
{
    (void)state;
    RtTrainOptions o = options(&ampc_model);
    RtTrainResult r;
    o.data = "synthetic";
    o.batch_size = 1024; /* 10 steps per epoch */
    o.epochs = 5;
    o.log_interval = 0;
    o.max_steps = 10; /* exactly one epoch: no empty second epoch */
    assert_int_equal(run(&ampc_model, &o, &r), 0);
    assert_int_equal(r.steps, 10);
    assert_int_equal(count_lines(out_text, "^Epoch\\[0\\] Validation-accuracy="), 1);
    assert_int_equal(count_lines(out_text, "Epoch\\[1\\]"), 0);
    assert_int_equal(count_lines(out_text, "Batch"), 0);
    o.max_steps = 13; /* stops 3 steps into epoch 1, which still validates */
    assert_int_equal(run(&ampc_model, &o, &r), 0);
    assert_int_equal(r.steps, 13);
    assert_int_equal(r.epochs, 2);
    assert_int_equal(count_lines(out_text, "^Epoch\\[1\\] Validation-accuracy="), 1);
    assert_int_equal(count_lines(out_text, "Epoch\\[2\\]"), 0);
    o.max_steps = 0; /* validation of the initial parameters only */
    assert_int_equal(run(&ampc_model, &o, &r), 0);
    assert_int_equal(r.steps, 0);
    assert_int_equal(count_lines(out_text, "Epoch"), 0);
    assert_int_equal(count_lines(out_text, "^Validation-accuracy=" NUM "$"), 1);
    assert_int_equal(count_lines(out_text, "^Final validation-accuracy=" NUM "$"), 1);
    o.max_steps = -1; /* no limit: all epochs */
    o.epochs = 2;
    assert_int_equal(run(&ampc_model, &o, &r), 0);
    assert_int_equal(r.steps, 20);
}

static void test_deterministic(void **state)
{
    (void)state;
    RtTrainOptions o = options(&ampc_model);
    RtTrainResult a, b, c;
    o.data = "synthetic";
    o.max_steps = 30;
    o.log_interval = 0;
    o.seed = 5;
    assert_int_equal(run(&ampc_model, &o, &a), 0);
    assert_int_equal(run(&ampc_model, &o, &b), 0);
    o.seed = 6;
    assert_int_equal(run(&ampc_model, &o, &c), 0);
    assert_memory_equal(&a.val_cross_entropy, &b.val_cross_entropy, sizeof(double));
    assert_memory_equal(&a.train_accuracy, &b.train_accuracy, sizeof(double));
    assert_true(a.val_cross_entropy != c.val_cross_entropy);
}

/* The validation count does not depend on the batch size: the padded rows
 * of the last batch are not counted. */
static void test_validation_padding(void **state)
{
    (void)state;
    RtTrainOptions o = options(&ampc_model);
    RtTrainResult a, b;
    o.data = "synthetic";
    o.max_steps = 0;
    o.batch_size = 1024; /* 1024 validation samples: one full batch */
    assert_int_equal(run(&ampc_model, &o, &a), 0);
    o.batch_size = 100; /* ten full batches and one of 24 */
    assert_int_equal(run(&ampc_model, &o, &b), 0);
    assert_float_equal(a.val_accuracy, b.val_accuracy, 0);
    assert_float_equal(a.val_cross_entropy, b.val_cross_entropy, 1e-6);
    /* the accuracy is a count out of 1024 */
    double k = a.val_accuracy * 1024;
    assert_float_equal(k, (double)(long)(k + 0.5), 1e-9);
}

static void test_run_errors(void **state)
{
    (void)state;
    RtTrainOptions o = options(&ampc_model);
    RtTrainResult r;
    o.data = "digits";
    o.data_dir = "/nonexistent/dir";
    assert_int_equal(run(&ampc_model, &o, &r), 1);
    assert_non_null(strstr(err_text, "test: cannot open /nonexistent/dir/digits.csv.gz: No such file"));
    assert_non_null(strstr(err_text, "AMPC_DATA_DIR"));
    /* a model whose input is not 8x8 cannot take digits */
    RtModel m = ampc_model;
    m.data_shape[1] = 4;
    assert_int_equal(run(&m, &o, &r), 2);
    assert_non_null(strstr(err_text, "takes 32 values per sample"));
    /* a data source this runtime does not have */
    o.data = "cifar10(\"dir\")";
    assert_int_equal(run(&ampc_model, &o, &r), 2);
    assert_non_null(strstr(err_text, "data source 'cifar10(\"dir\")' is not supported"));
    /* a batch larger than the training set */
    o.data = "synthetic";
    o.batch_size = 20000;
    assert_int_equal(run(&ampc_model, &o, &r), 2);
    assert_non_null(strstr(err_text, "the batch size 20000 exceeds the 10240 training samples"));
    o.batch_size = 32;
    o.init = "nonsense(";
    assert_int_equal(run(&ampc_model, &o, &r), 2);
    o.init = "xavier()";
    m = ampc_model;
    m.train_step = NULL;
    assert_int_equal(run(&m, &o, &r), 2);
    assert_non_null(strstr(err_text, "model tiny_mlp has no train step"));
    o.sched.kind = RT_LR_COSINE;
    o.sched.warmup_begin = 1;
    assert_int_equal(run(&ampc_model, &o, &r), 2);
    assert_non_null(strstr(err_text, "warmup_begin"));
}

/* ---- digits -------------------------------------------------------------------------- */

static const char *digits_dir(void)
{
    const char *dir = getenv("AMPC_DATA_DIR");
    if (!dir || !*dir) {
        print_message("AMPC_DATA_DIR is not set: the convergence runs on the digits data are "
                      "not run (the Makefile sets it to build/data, where it fetches "
                      "digits.csv.gz)\n");
        return NULL;
    }
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/digits.csv.gz", dir);
    if (stat(path, &st) != 0)
        fail_msg("AMPC_DATA_DIR is %s but %s does not exist (fetch it: apt-get download "
                 "python3-sklearn; dpkg -x python3-sklearn_*.deb x; cp "
                 "x/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz %s/)",
                 dir, path, dir);
    return dir;
}

static void converge(const RtModel *m)
{
    const char *dir = digits_dir();
    if (!dir) {
        skip();
        return;
    }
    RtTrainOptions o = options(m); /* model_tiny's defaults: 20 epochs of 32, lr 0.1, momentum 0.9 */
    RtTrainResult r;
    o.data = "digits";
    o.data_dir = dir;
    o.log_interval = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = run(m, &o, &r);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (rc != 0)
        fail_msg("rc %d: %s", rc, err_text);
    print_message("%s: validation accuracy %.4f, cross-entropy %.4f after %d epochs (%lld steps) "
                  "in %.2f s\n", m->name, r.val_accuracy, r.val_cross_entropy, r.epochs,
                  (long long)r.steps, secs);
    assert_non_null(strstr(out_text, "data digits: 1498 training and 299 validation samples"));
    if (r.val_accuracy < 0.90)
        fail_msg("%s reached only %.4f validation accuracy:\n%s", m->name, r.val_accuracy, out_text);
    assert_true(secs < 30);
}

static void test_digits_fp32(void **state)
{
    (void)state;
    converge(&ampc_model);
}

static void test_digits_fp16(void **state)
{
    (void)state;
    converge(&tiny_model_f16);
}

static void test_digits_bf16(void **state)
{
    (void)state;
    converge(&tiny_model_bf16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log_format),   cmocka_unit_test(test_max_steps),
        cmocka_unit_test(test_deterministic), cmocka_unit_test(test_validation_padding),
        cmocka_unit_test(test_run_errors),   cmocka_unit_test(test_digits_fp32),
        cmocka_unit_test(test_digits_fp16),  cmocka_unit_test(test_digits_bf16),
    };
    return cmocka_run_group_tests_name("train_e2e", tests, NULL, NULL);
}
