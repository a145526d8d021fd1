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
#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "model_tiny.c"
#include "npy.h"
#include "train.h"
#include "checkpoint.h"

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
        count_lines(out_text,
                    "^Epoch\\[0\\] Batch \\[0-50\\]\tSpeed: [0-9]+\\.[0-9]{2} samples/sec\t"
                    "accuracy=" NUM "\tcross-entropy=" NUM "\ttop_k_accuracy_5=" NUM "$") != 1 ||
        count_lines(out_text,
                    "^Epoch\\[0\\] Batch \\[50-100\\]\tSpeed: [0-9]+\\.[0-9]{2} samples/sec\t"
                    "accuracy=" NUM "\tcross-entropy=" NUM "\ttop_k_accuracy_5=" NUM "$") != 1 ||
        /* the last, partial interval has its line too */
        count_lines(out_text,
                    "^Epoch\\[0\\] Batch \\[100-119\\]\tSpeed: [0-9]+\\.[0-9]{2} samples/sec\t"
                    "accuracy=" NUM "\tcross-entropy=" NUM "\ttop_k_accuracy_5=" NUM "$") != 1 ||
        count_lines(out_text, "Batch") != 3 ||
        count_lines(out_text, "^Epoch\\[0\\] Train-accuracy=" NUM "$") != 1 ||
        count_lines(out_text, "^Epoch\\[0\\] Train-cross-entropy=" NUM "$") != 1 ||
        count_lines(out_text, "^Epoch\\[0\\] Train-top_k_accuracy_5=" NUM "$") != 1 ||
        count_lines(out_text, "^Epoch\\[0\\] Validation-top_k_accuracy_5=" NUM "$") != 1 ||
        count_lines(out_text, "Loss") != 0 || /* fp32: no loss-scale lines */
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
    o.data = "record(\"dir\")";
    assert_int_equal(run(&ampc_model, &o, &r), 2);
    assert_non_null(strstr(err_text, "data source 'record(\"dir\")' is not synthetic, digits"));
    /* CIFAR-10 images do not fit an 8x8 model: refused before the files are
     * looked for (rt_settings_check, as ampc refuses it in a train block) */
    o.data = "cifar10(\"/nonexistent/cifar\")";
    assert_int_equal(run(&ampc_model, &o, &r), 2);
    assert_non_null(strstr(err_text, "--data: CIFAR-10: 3x32x32 images of 10 classes; model"));
    /* augmentation is never on for digits */
    o.data = "digits";
    o.data_dir = "/nonexistent/dir";
    o.augment_mirror = true;
    assert_int_equal(run(&ampc_model, &o, &r), 2);
    assert_non_null(strstr(err_text, "the digits data are never augmented"));
    o.augment_mirror = false;
    o.augment_pad = 2;
    assert_int_equal(run(&ampc_model, &o, &r), 2);
    o.augment_pad = 0;
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

/* ---- loss scaling, checkpoints, resume, numerics ---------------------------------- */

static char tmp_root[256];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int group_setup(void **state)
{
    (void)state;
    snprintf(tmp_root, sizeof tmp_root, "/tmp/ampc_train_e2e.XXXXXX");
    return mkdtemp(tmp_root) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    return nftw(tmp_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *sub(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmp_root, name);
    return buf[k];
}

static RtCheckpoint read_ck(const char *path)
{
    RtCheckpoint ck;
    char err[1024];
    if (!rt_checkpoint_read(path, &ck, err, sizeof err))
        fail_msg("%s", err);
    return ck;
}

static unsigned char *file_bytes(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    unsigned char *b = malloc((size_t)n + 1);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void set_loss_scale(RtTrainOptions *o, const char *s)
{
    char err[256];
    if (!rt_loss_scale_parse(s, &o->loss_scale, err, sizeof err))
        fail_msg("%s", err);
}

/* The lines of a log that must repeat exactly: metrics without speeds. */
static char *metric_lines(const char *log, int from_epoch)
{
    size_t cap = strlen(log) + 1, at = 0;
    char *dst = malloc(cap), line[1024];
    const char *p = log;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p + 1) : strlen(p);
        snprintf(line, sizeof line, "%.*s", (int)n, p);
        p += n;
        int ep;
        if (sscanf(line, "Epoch[%d]", &ep) != 1 || ep < from_epoch || strstr(line, "Time cost"))
            continue;
        char *sp = strstr(line, "Speed: ");
        if (sp) /* drop the speed */
            memmove(sp, strchr(sp, '\t'), strlen(strchr(sp, '\t')) + 1);
        at += (size_t)snprintf(dst + at, cap - at, "%s", line);
    }
    return dst;
}

/* An overflow injected at step K: the step is skipped, and the checkpoints
 * written after K steps and after K+1 hold the same parameters (masters and
 * shadows), momentum and update count; the scale halves; training goes on. */
static void test_overflow_skipped(void **state)
{
    (void)state;
    const int64_t K = 7;
    RtTrainOptions o = options(&tiny_model_f16);
    RtTrainResult a, b;
    o.data = "synthetic";
    o.batch_size = 64;
    o.log_interval = 0;
    o.epochs = 1;
    o.lr = 0.2f;
    o.sched = (RtLrSchedule){.kind = RT_LR_COSINE, .warmup_steps = 4, .warmup_begin = 0.01f};
    set_loss_scale(&o, "dynamic(init=1024)");
    o.max_steps = K;
    o.save_dir = sub("skip_before");
    assert_int_equal(run(&tiny_model_f16, &o, &a), 0);
    assert_int_equal(a.skipped, 0);
    o.max_steps = K + 1;
    o.inject_inf_step = K;
    o.save_dir = sub("skip_after");
    assert_int_equal(run(&tiny_model_f16, &o, &b), 0);
    if (!strstr(out_text, "Epoch[0] Batch [7]\tAMP: gradient overflow at step 7: step skipped "
                          "(1 skipped in all)\nAMP: decreasing loss scale to 512\n") ||
        !strstr(out_text, "Epoch[0] Loss-scale=512 Skipped-steps=1\n"))
        fail_msg("log:\n%s", out_text);
    assert_int_equal(b.steps, K + 1);
    assert_int_equal(b.num_update, a.num_update);
    assert_int_equal(b.num_update, K);
    assert_int_equal(b.skipped, 1);
    assert_float_equal(b.loss_scale, a.loss_scale / 2, 0);
    assert_memory_equal(&b.lr, &a.lr, sizeof a.lr); /* the schedule did not advance */
    /* runs stopped inside the epoch: their checkpoints are named by step */
    RtCheckpoint ca = read_ck(sub("skip_before/tiny_mlp_f16-step000007.ckpt"));
    RtCheckpoint cb = read_ck(sub("skip_after/tiny_mlp_f16-step000008.ckpt"));
    assert_int_equal(ca.run.step, K);
    assert_int_equal(cb.run.step, K + 1);
    assert_int_equal(cb.run.batch_in_epoch, K + 1);
    assert_int_equal(ca.run.num_update, cb.run.num_update);
    assert_float_equal(cb.run.ls.s.scale, ca.run.ls.s.scale / 2, 0);
    assert_int_equal(cb.run.ls.s.tracker, 0);
    assert_int_equal(ca.run.ls.s.tracker, K);
    for (int i = 0; i < ca.nparams; i++) {
        size_t n = (size_t)ca.params[i].numel * sizeof(float);
        assert_memory_equal(ca.params[i].values, cb.params[i].values, n);
        assert_non_null(ca.params[i].state);
        assert_memory_equal(ca.params[i].state, cb.params[i].state, n);
    }
    rt_checkpoint_free(&ca);
    rt_checkpoint_free(&cb);
    /* and on through the epoch: one skip, the rest trains */
    o.max_steps = -1;
    o.save_dir = NULL;
    assert_int_equal(run(&tiny_model_f16, &o, &b), 0);
    assert_int_equal(b.skipped, 1);
    assert_int_equal(b.num_update, b.steps - 1);
    /* a static scale never skips: the update is applied and a warning said */
    set_loss_scale(&o, "256");
    o.max_steps = 5;
    o.inject_inf_step = 3;
    assert_int_equal(run(&tiny_model_f16, &o, &b), 0);
    assert_int_equal(b.skipped, 0);
    assert_int_equal(b.num_update, 5);
    assert_non_null(strstr(err_text, "test: warning: step 3 (epoch 0, batch 3): the gradients hold "
                                     "inf or NaN and the update was applied (loss scale static 256"));
    assert_non_null(strstr(out_text, "Loss scale: static 256\n"));
}

/* Resuming continues bit for bit: the last checkpoint of a 4-epoch run
 * equals, byte for byte, that of a run stopped inside epoch 1 (and one
 * stopped at an epoch boundary) and resumed; the logged metrics agree. */
static void test_resume_bit_exact(void **state)
{
    (void)state;
    RtTrainOptions o = options(&tiny_model_f16);
    RtTrainResult r, ra;
    o.data = "synthetic";
    o.batch_size = 1024; /* 10 steps per epoch */
    o.epochs = 4;
    o.log_interval = 3;
    o.lr = 0.2f;
    o.sched = (RtLrSchedule){.kind = RT_LR_COSINE, .final_lr = 0.01f, .warmup_epochs = 1,
                             .warmup_begin = 0.0f};
    o.save_dir = sub("full");
    assert_int_equal(run(&tiny_model_f16, &o, &ra), 0);
    char *full_log = strdup(out_text);
    assert_int_equal(count_lines(full_log, "^Saved checkpoint to \".*/full/tiny_mlp_f16-000[1-4]"
                                           "\\.ckpt\"$"),
                     4);
    size_t la;
    unsigned char *fa = file_bytes(sub("full/tiny_mlp_f16-0004.ckpt"), &la);
    static const int64_t stops[] = {13, 20};
    for (size_t k = 0; k < 2; k++) {
        const char *d = sub(stops[k] == 13 ? "part13" : "part20");
        char dir[512], ck[600];
        snprintf(dir, sizeof dir, "%s", d);
        o.save_dir = dir;
        o.max_steps = stops[k];
        o.resume = NULL;
        assert_int_equal(run(&tiny_model_f16, &o, &r), 0);
        assert_int_equal(r.steps, stops[k]);
        /* 13 steps stop inside epoch 1: the checkpoint is named by step */
        if (stops[k] == 13)
            snprintf(ck, sizeof ck, "%s/tiny_mlp_f16-step000013.ckpt", dir);
        else
            snprintf(ck, sizeof ck, "%s/tiny_mlp_f16-0002.ckpt", dir);
        RtCheckpoint c = read_ck(ck);
        assert_int_equal(c.run.epoch, stops[k] == 13 ? 1 : 2);
        assert_int_equal(c.run.batch_in_epoch, stops[k] == 13 ? 3 : 0);
        rt_checkpoint_free(&c);
        o.max_steps = -1;
        o.resume = ck;
        assert_int_equal(run(&tiny_model_f16, &o, &r), 0);
        assert_non_null(strstr(out_text, "Resumed from \""));
        snprintf(ck, sizeof ck, "%s/tiny_mlp_f16-0004.ckpt", dir);
        size_t lb;
        unsigned char *fb = file_bytes(ck, &lb);
        assert_int_equal(la, lb);
        assert_memory_equal(fa, fb, la);
        free(fb);
        assert_int_equal(r.steps, ra.steps);
        assert_int_equal(r.num_update, ra.num_update);
        assert_memory_equal(&r.val_accuracy, &ra.val_accuracy, sizeof(double));
        assert_memory_equal(&r.val_cross_entropy, &ra.val_cross_entropy, sizeof(double));
        /* epochs 2 and 3 log the same metrics, line for line */
        char *x = metric_lines(full_log, 2), *y = metric_lines(out_text, 2);
        if (strlen(x) <= 200)
            fail_msg("metric lines: [%s] of\n%s", x, full_log);
        assert_string_equal(x, y);
        free(x);
        free(y);
    }
    /* --eval-only on the last checkpoint reproduces its validation */
    o.resume = sub("full/tiny_mlp_f16-0004.ckpt");
    o.eval_only = true;
    o.save_dir = NULL;
    assert_int_equal(run(&tiny_model_f16, &o, &r), 0);
    assert_memory_equal(&r.val_accuracy, &ra.val_accuracy, sizeof(double));
    assert_int_equal(count_lines(out_text, "^Validation-accuracy=" NUM "$"), 1);
    assert_int_equal(count_lines(out_text, "^Validation-top_k_accuracy_5=" NUM "$"), 1);
    assert_int_equal(count_lines(out_text, "^Final validation-accuracy=" NUM "$"), 1);
    assert_int_equal(count_lines(out_text, "Batch|Train-"), 0);
    /* without --resume: the initial parameters, as --max-steps 0 */
    RtTrainResult z;
    o.resume = NULL;
    assert_int_equal(run(&tiny_model_f16, &o, &r), 0);
    o.eval_only = false;
    o.max_steps = 0;
    assert_int_equal(run(&tiny_model_f16, &o, &z), 0);
    assert_memory_equal(&r.val_cross_entropy, &z.val_cross_entropy, sizeof(double));
    /* a broken checkpoint stops the run (exit status 1), naming the file */
    o.max_steps = -1;
    const char *bad = sub("bad.params");
    FILE *f = fopen(bad, "wb");
    fwrite(fa, 1, la / 2, f);
    fclose(f);
    o.resume = bad;
    assert_int_equal(run(&tiny_model_f16, &o, &r), 1);
    assert_non_null(strstr(err_text, "checkpoint"));
    assert_non_null(strstr(err_text, bad));
    assert_non_null(strstr(err_text, "truncated"));
    free(fa);
    free(full_log);
}

/* Checkpoints cannot be confused (issue 28): a whole epoch's is
 * MODEL-NNNN.ckpt, a run stopped inside one MODEL-stepSSSSSS.ckpt; a
 * --save-dir holding checkpoints (of this model's other run, of another
 * model, or under their old .params name) is refused unless --resume or
 * --overwrite; a checkpoint renamed to the old name still resumes;
 * --load-params on one says to use --resume; --resume CKPT --predict says
 * nothing about the optimizer state it does not use. */
static void test_checkpoint_names(void **state)
{
    (void)state;
    RtTrainOptions o = options(&tiny_model_f16);
    RtTrainResult r;
    o.data = "synthetic";
    o.batch_size = 1024; /* 10 steps per epoch */
    o.log_interval = 0;
    o.epochs = 2;
    o.max_steps = 14;
    o.save_dir = sub("names");
    assert_int_equal(run(&tiny_model_f16, &o, &r), 0);
    assert_int_equal(count_lines(out_text, "^Saved checkpoint to \".*/names/tiny_mlp_f16-0001"
                                           "\\.ckpt\"$"),
                     1);
    assert_int_equal(count_lines(out_text, "^Saved checkpoint to \".*/names/tiny_mlp_f16-"
                                           "step000014\\.ckpt\"$"),
                     1);
    /* the same directory again: refused, naming what is there and the ways out */
    assert_int_equal(run(&tiny_model_f16, &o, &r), 2);
    assert_non_null(strstr(err_text, "holds 2 checkpoints of another run (tiny_mlp_f16-"));
    assert_non_null(strstr(err_text, "give a new directory, --resume one of them to continue "
                                     "that run, or --overwrite"));
    /* another model's checkpoints */
    RtTrainOptions p = options(&ampc_model);
    p.data = "synthetic";
    p.max_steps = 1;
    p.log_interval = 0;
    p.save_dir = sub("names");
    assert_int_equal(run(&ampc_model, &p, &r), 2);
    assert_non_null(strstr(err_text, "of another model (tiny_mlp_f16-"));
    p.overwrite = true;
    assert_int_equal(run(&ampc_model, &p, &r), 0);
    /* the old name of a checkpoint: recognised in a save dir, and resumed */
    char old[600], now[600];
    snprintf(now, sizeof now, "%s", sub("names/tiny_mlp_f16-0001.ckpt"));
    snprintf(old, sizeof old, "%s", sub("old/tiny_mlp_f16-0001.params"));
    assert_int_equal(mkdir(sub("old"), 0777), 0);
    assert_int_equal(rename(now, old), 0);
    o.save_dir = sub("old");
    o.max_steps = -1;
    assert_int_equal(run(&tiny_model_f16, &o, &r), 2);
    assert_non_null(
        strstr(err_text, "holds 1 checkpoint of another run (tiny_mlp_f16-0001.params)"));
    o.resume = old;
    assert_int_equal(run(&tiny_model_f16, &o, &r), 0);
    assert_non_null(strstr(out_text, "Resumed from \""));
    assert_int_equal(r.steps, 20);
    /* --load-params on a checkpoint: use --resume */
    RtTrainOptions q = options(&tiny_model_f16);
    q.data = "synthetic";
    q.max_steps = 1;
    q.load_params = old;
    assert_int_equal(run(&tiny_model_f16, &q, &r), 1);
    assert_non_null(strstr(err_text, "this is an ampc checkpoint (--save-dir), not an MXNet "
                                     ".params file: continue from it with --resume"));
    /* --resume CKPT --predict: no word on the momentum it does not use */
    static float x[2 * 64];
    char err[256];
    q.load_params = NULL;
    q.resume = old;
    q.momentum = 0; /* this run would use none: a warning if it were training */
    q.predict = sub("x.npy");
    q.output = sub("y.npy");
    assert_true(
        rt_npy_write(q.predict, "test", 4, (const int64_t[]){2, 1, 8, 8}, x, err, sizeof err));
    assert_int_equal(run(&tiny_model_f16, &q, &r), 0);
    assert_null(strstr(err_text, "momentum"));
    assert_non_null(strstr(out_text, "Predicted 2 samples"));
}

/* --json-log's numbers are the shortest that read back: an fp32 lr of 0.1
 * is 0.1, not the double it widens to (0.10000000149011612). */
static void test_json_numbers(void **state)
{
    (void)state;
    RtTrainOptions o = options(&tiny_model_f16);
    RtTrainResult r;
    o.data = "synthetic";
    o.max_steps = 2;
    o.log_interval = 1;
    o.lr = 0.1f;
    o.json_log = sub("numbers.jsonl");
    assert_int_equal(run(&tiny_model_f16, &o, &r), 0);
    size_t n;
    char *text = (char *)file_bytes(o.json_log, &n);
    text = realloc(text, n + 1);
    text[n] = 0;
    assert_non_null(strstr(text, "\"lr\":0.1,"));
    assert_non_null(strstr(text, "\"loss_scale\":65536"));
    assert_null(strstr(text, "0.1000000"));
    free(text);
}

static void test_check_numerics(void **state)
{
    (void)state;
    RtTrainOptions o = options(&tiny_model_f16);
    RtTrainResult r;
    o.data = "synthetic";
    o.max_steps = 5;
    o.log_interval = 0;
    set_loss_scale(&o, "dynamic(init=256)");
    o.check_numerics = true;
    /* a NaN in a forward node: named, with the step; the run stops */
    snprintf(o.inject_nan_node, sizeof o.inject_nan_node, "fc1");
    o.inject_nan_step = 2;
    assert_int_equal(run(&tiny_model_f16, &o, &r), 1);
    if (!strstr(err_text, "test: --check-numerics: step 2 (epoch 0, batch 2), forward pass of the "
                          "train step: the output of node 'fc1' (buffer 7, float16) holds inf or "
                          "NaN\n"))
        fail_msg("%s", err_text);
    assert_int_equal(r.steps, 2);
    /* in the backward pass under dynamic loss scaling: an overflow, logged and skipped */
    snprintf(o.inject_nan_node, sizeof o.inject_nan_node, "relu1_grad");
    assert_int_equal(run(&tiny_model_f16, &o, &r), 0);
    assert_non_null(strstr(out_text, "Epoch[0] Batch [2]\tNumerics: gradient overflow at step 2, "
                                     "first in the output of node 'relu1_grad' (loss scale 256)\n"
                                     "Epoch[0] Batch [2]\tAMP: gradient overflow at step 2: step "
                                     "skipped"));
    assert_int_equal(r.skipped, 1);
    /* ... and without: an error */
    set_loss_scale(&o, "off");
    assert_int_equal(run(&tiny_model_f16, &o, &r), 1);
    assert_non_null(strstr(err_text, "backward pass of the train step: the output of node "
                                     "'relu1_grad'"));
    /* the NaN without --check-numerics: the dynamic scaler skips the step */
    set_loss_scale(&o, "dynamic(init=256)");
    o.check_numerics = false;
    assert_int_equal(run(&tiny_model_f16, &o, &r), 0);
    assert_int_equal(r.skipped, 1);
    assert_null(strstr(out_text, "Numerics"));
    /* a clean fp32 run says nothing */
    RtTrainOptions c = options(&ampc_model);
    c.data = "synthetic";
    c.max_steps = 20;
    c.check_numerics = true;
    assert_int_equal(run(&ampc_model, &c, &r), 0);
    assert_null(strstr(out_text, "Numerics"));
    assert_string_equal(err_text, "");
    /* a node the model does not have */
    snprintf(c.inject_nan_node, sizeof c.inject_nan_node, "fc9");
    c.inject_nan_step = 1;
    assert_int_equal(run(&ampc_model, &c, &r), 2);
    assert_non_null(strstr(err_text, "--inject-nan: model tiny_mlp has no node named 'fc9'"));
}

/* AMP logs: the scale and the skipped steps per epoch. */
static void test_amp_log(void **state)
{
    (void)state;
    RtTrainOptions o = options(&tiny_model_f16);
    RtTrainResult r;
    o.data = "synthetic";
    o.batch_size = 1024;
    o.epochs = 2;
    o.log_interval = 0;
    assert_int_equal(run(&tiny_model_f16, &o, &r), 0);
    if (count_lines(out_text, "^Loss scale: dynamic, init 65536, growth 2, backoff 0.5, interval "
                              "2000, min 0, max 16777216$") != 1 ||
        count_lines(out_text, "^Epoch\\[[01]\\] Loss-scale=[0-9]+ Skipped-steps=[0-9]+$") != 2)
        fail_msg("%s", out_text);
    /* the skips are counted: the lines add up to the total */
    int a = 0, b = 0;
    const char *p = strstr(out_text, "Epoch[0] Loss-scale=");
    assert_non_null(p);
    assert_int_equal(sscanf(strstr(p, "Skipped-steps="), "Skipped-steps=%d", &a), 1);
    p = strstr(out_text, "Epoch[1] Loss-scale=");
    assert_non_null(p);
    assert_int_equal(sscanf(strstr(p, "Skipped-steps="), "Skipped-steps=%d", &b), 1);
    assert_int_equal(a + b, r.skipped);
    /* a line per overflow, but the first ones, which calibrate the initial
     * scale: one line for them, and one with their count when it is done */
    int calib = 0;
    const char *c = strstr(out_text, "AMP: the loss scale is calibrated: ");
    if (c)
        assert_int_equal(sscanf(strstr(c, "after "), "after %d", &calib), 1);
    assert_int_equal(count_lines(out_text, "AMP: calibrating the loss scale: the scaled gradients "
                                           "overflow at 65536, so steps are skipped"),
                     calib > 0);
    assert_int_equal(count_lines(out_text, "AMP: gradient overflow") + calib, r.skipped);
    assert_int_equal(r.num_update + r.skipped, r.steps);
    /* bfloat16: off unless set */
    o = options(&tiny_model_bf16);
    o.data = "synthetic";
    o.max_steps = 3;
    assert_int_equal(run(&tiny_model_bf16, &o, &r), 0);
    assert_non_null(strstr(out_text, "Loss scale: off 1\n"));
    assert_non_null(strstr(out_text, "Epoch[0] Loss-scale=1 Skipped-steps=0\n"));
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
        cmocka_unit_test(test_log_format),       cmocka_unit_test(test_max_steps),
        cmocka_unit_test(test_deterministic),    cmocka_unit_test(test_validation_padding),
        cmocka_unit_test(test_run_errors),       cmocka_unit_test(test_overflow_skipped),
        cmocka_unit_test(test_resume_bit_exact), cmocka_unit_test(test_checkpoint_names),
        cmocka_unit_test(test_json_numbers),     cmocka_unit_test(test_check_numerics),
        cmocka_unit_test(test_amp_log),          cmocka_unit_test(test_digits_fp32),
        cmocka_unit_test(test_digits_fp16),      cmocka_unit_test(test_digits_bf16),
    };
    return cmocka_run_group_tests_name("train_e2e", tests, group_setup, group_teardown);
}
