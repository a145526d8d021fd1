/*
 * test_predict.c - the program's MXNet side (runtime/predict.c) on the
 * hand-written models of model_tiny.c: --save-params then --load-params
 * restores every parameter bit for bit (fp32, and fp16 with fp32 masters;
 * the 16-bit values with --save-params-16bit); keys are arg:/aux: by kind;
 * a refused file (a name matching nothing, a wrong shape, a parameter
 * missing, a wrong prefix, unnamed arrays, one parameter named twice)
 * leaves the parameters as they were; --predict runs the inference step
 * over any number of rows (the last batch padded, the outputs independent
 * of the batch size), also for a model without a train step, which refuses
 * to train; the flags' combinations are checked.
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

#include "model_tiny.c"
#include "fileio.h"
#include "mxparams.h"
#include "npy.h"
#include "train_internal.h"

static char dir[64];
static char out_text[1 << 14], err_text[1 << 14];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ampc_predict.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *file(const char *name)
{
    static char p[64][128]; /* a ring: a name stays valid for 64 calls */
    static int k;
    k = (k + 1) % 64;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void trainer(RtTrainer *t, const RtModel *m, uint64_t seed)
{
    char err[256];
    assert_true(rt_trainer_init(t, m, 4, 0, NULL, err, sizeof err));
    assert_true(rt_trainer_init_params(t, "xavier()", seed, err, sizeof err));
}

/* The bytes of parameter i's buffer (and its master) */
static void param_bytes(const RtTrainer *t, int i, void *buf, float *master)
{
    const RtParam *p = &t->m->params[i];
    memcpy(buf, t->ctx.buf[p->buffer], (size_t)p->numel * rt_dtype_size(p->dtype));
    if (master && t->ctx.master[i])
        memcpy(master, t->ctx.master[i], (size_t)p->numel * 4);
}

static void assert_same_params(const RtTrainer *a, const RtTrainer *b)
{
    static unsigned char x[1 << 16], y[1 << 16];
    static float mx[1 << 14], my[1 << 14];
    for (int i = 0; i < a->m->nparams; i++) {
        const RtParam *p = &a->m->params[i];
        param_bytes(a, i, x, mx);
        param_bytes(b, i, y, my);
        assert_memory_equal(x, y, (size_t)p->numel * rt_dtype_size(p->dtype));
        if (p->has_master)
            assert_memory_equal(mx, my, (size_t)p->numel * 4);
    }
}

static void test_save_load(void **state)
{
    (void)state;
    const RtModel *models[2] = {&ampc_model, &tiny_model_f16};
    char err[512];
    for (int k = 0; k < 2; k++) {
        const RtModel *m = models[k];
        RtTrainer a, b;
        trainer(&a, m, 1);
        trainer(&b, m, 2);
        rt_inputs_reset();
        const char *f32 = file("a.params"), *f16 = file("a16.params");
        assert_true(rt_params_save(&a, f32, false, err, sizeof err));
        assert_true(rt_params_save(&a, f16, true, err, sizeof err));
        RtMxList l;
        assert_true(rt_mx_read(f32, &l, err, sizeof err));
        assert_int_equal(l.n, m->nparams);
        for (int i = 0; i < l.n; i++) {
            char key[128];
            snprintf(key, sizeof key, "arg:%s", m->params[i].name);
            assert_string_equal(l.a[i].name, key);
            assert_int_equal(l.a[i].type_flag, RT_MX_FLOAT32);
            assert_int_equal(l.a[i].version, RT_MX_V2);
        }
        rt_mx_free(&l);
        assert_true(rt_mx_read(f16, &l, err, sizeof err));
        for (int i = 0; i < l.n; i++)
            assert_int_equal(l.a[i].type_flag, k ? RT_MX_FLOAT16 : RT_MX_FLOAT32);
        /* the 16-bit values are the bits the steps read */
        if (k)
            assert_memory_equal(l.a[0].data, a.ctx.buf[m->params[0].buffer],
                                (size_t)m->params[0].numel * 2);
        rt_mx_free(&l);
        rt_inputs_reset();
        assert_true(rt_params_load(&b, f32, err, sizeof err));
        assert_same_params(&a, &b);
        /* from the 16-bit file: the same 16-bit values, masters their widening */
        RtTrainer c;
        trainer(&c, m, 3);
        assert_true(rt_params_load(&c, f16, err, sizeof err));
        for (int i = 0; i < m->nparams; i++) {
            const RtParam *p = &m->params[i];
            size_t bytes = (size_t)p->numel * rt_dtype_size(p->dtype);
            assert_memory_equal(c.ctx.buf[p->buffer], a.ctx.buf[p->buffer], bytes);
        }
        rt_trainer_free(&a);
        rt_trainer_free(&b);
        rt_trainer_free(&c);
    }
}

/* A file with the tiny model's arrays under the given keys and shapes. */
static const char *write_params(const char *name, int n, const char *const *keys,
                                const int64_t *dim0, bool named)
{
    static float zeros[4096];
    RtMxArray a[8];
    memset(a, 0, sizeof a);
    for (int i = 0; i < n; i++) {
        const RtParam *p = &ampc_model.params[i % ampc_model.nparams];
        a[i].name = (char *)keys[i];
        a[i].rank = p->rank;
        memcpy(a[i].shape, p->shape, sizeof a[i].shape);
        if (dim0)
            a[i].shape[0] = dim0[i];
        a[i].numel = 1;
        for (int d = 0; d < a[i].rank; d++)
            a[i].numel *= a[i].shape[d];
        a[i].data = zeros;
    }
    RtMxList l = {.n = n, .a = a, .named = named};
    char err[256];
    const char *path = file(name);
    rt_inputs_reset();
    assert_true(rt_mx_write(path, "test", &l, RT_MX_V2, err, sizeof err));
    return path;
}

static void load_refused(const char *path, const char *frag)
{
    RtTrainer t, ref;
    trainer(&t, &ampc_model, 5);
    trainer(&ref, &ampc_model, 5);
    char err[1024];
    assert_false(rt_params_load(&t, path, err, sizeof err));
    if (!strstr(err, path) || !strstr(err, frag))
        fail_msg("message '%s' lacks the file or '%s'", err, frag);
    assert_same_params(&t, &ref); /* nothing was loaded */
    rt_trainer_free(&t);
    rt_trainer_free(&ref);
}

static void test_load_refused(void **state)
{
    (void)state;
    const char *good[4] = {"arg:fc1_weight", "fc1_bias", "arg:fc2_weight", "arg:fc2_bias"};
    const char *p = write_params("ok.params", 4, good, NULL, true);
    RtTrainer t;
    trainer(&t, &ampc_model, 5);
    char err[512];
    assert_true(rt_params_load(&t, p, err, sizeof err)); /* bare and arg: keys */
    rt_trainer_free(&t);
    const char *extra[5] = {"arg:fc1_weight", "fc1_bias", "arg:fc2_weight", "arg:fc2_bias",
                            "arg:stage2_conv0_weight"};
    load_refused(write_params("extra.params", 5, extra, NULL, true),
                 "'arg:stage2_conv0_weight' matches no parameter of model tiny_mlp");
    load_refused(write_params("missing.params", 3, good, NULL, true),
                 "parameter fc2_bias (10,) of model tiny_mlp is missing (arg:fc2_bias; 1 of the "
                 "model's 4 parameters are missing)");
    load_refused(write_params("shape.params", 4, good, (const int64_t[]){32, 32, 10, 9}, true),
                 "shape mismatch for parameter fc2_bias: the file's 'arg:fc2_bias' is (9,), the "
                 "model's is (10,)");
    const char *aux[4] = {"arg:fc1_weight", "aux:fc1_bias", "arg:fc2_weight", "arg:fc2_bias"};
    load_refused(write_params("aux.params", 4, aux, NULL, true),
                 "'aux:fc1_bias' names fc1_bias of model tiny_mlp, which is an argument");
    load_refused(write_params("unnamed.params", 4, good, NULL, false),
                 "its 4 arrays have no names");
    const char *twice[5] = {"arg:fc1_weight", "fc1_bias", "arg:fc2_weight", "arg:fc2_bias",
                            "arg:fc1_bias"};
    load_refused(write_params("twice.params", 5, twice, (const int64_t[]){32, 32, 10, 10, 32},
                              true),
                 "'fc1_bias' and 'arg:fc1_bias' both name parameter fc1_bias");
    const char *odd[4] = {"arg:fc1_weight", "fc1_bias\x01\xff", "arg:fc2_weight", "arg:fc2_bias"};
    load_refused(write_params("odd.params", 4, odd, NULL, true),
                 "'fc1_bias\\x01\\xff' matches no parameter");
    /* a moving statistic is aux:, and an aux: file key loads only into one */
    RtModel m = ampc_model;
    RtParam ps[4];
    memcpy(ps, ampc_model.params, sizeof ps);
    ps[3].kind = RT_PK_MOVING_MEAN;
    ps[3].grad = -1;
    m.params = ps;
    RtTrainer a;
    trainer(&a, &m, 1);
    const char *path = file("bn.params");
    rt_inputs_reset();
    assert_true(rt_params_save(&a, path, false, err, sizeof err));
    RtMxList l;
    assert_true(rt_mx_read(path, &l, err, sizeof err));
    assert_string_equal(l.a[3].name, "aux:fc2_bias");
    rt_mx_free(&l);
    assert_true(rt_params_load(&a, path, err, sizeof err));
    /* ok.params has arg:fc2_bias: refused for the moving statistic */
    assert_false(rt_params_load(&a, p, err, sizeof err));
    assert_non_null(strstr(err, "'arg:fc2_bias' names fc2_bias of model tiny_mlp, which is an "
                                "auxiliary state (aux:fc2_bias)"));
    rt_trainer_free(&a);
}

/* ---- --predict through rt_train_run ------------------------------------------------ */

static RtTrainOptions options(const RtModel *m)
{
    RtTrainOptions o;
    char err[256];
    rt_train_options_default(&o);
    if (!rt_train_apply_defaults(&o, m->train_defaults, err, sizeof err))
        fail_msg("%s", err);
    o.prog = "test";
    o.data = "synthetic";
    return o;
}

static void slurp(FILE *f, char *dst, size_t cap)
{
    rewind(f);
    size_t n = fread(dst, 1, cap - 1, f);
    dst[n] = 0;
    fclose(f);
}

static int run(const RtModel *m, const RtTrainOptions *o)
{
    FILE *out = tmpfile(), *err = tmpfile();
    int rc = rt_train_run(m, o, out, err, NULL);
    slurp(out, out_text, sizeof out_text);
    slurp(err, err_text, sizeof err_text);
    return rc;
}

static float *read_out(const char *path, int64_t rows)
{
    RtNpyHeader h;
    float *y;
    char err[256];
    rt_inputs_reset();
    assert_true(rt_npy_read(path, &h, &y, err, sizeof err));
    assert_int_equal(h.rank, 2);
    assert_int_equal(h.shape[0], rows);
    assert_int_equal(h.shape[1], 10);
    return y;
}

static void test_predict(void **state)
{
    (void)state;
    enum { ROWS = 10 };
    static float x[ROWS * 64];
    for (int i = 0; i < ROWS * 64; i++)
        x[i] = (float)sin(i * 0.7);
    char err[256];
    char in[128];
    snprintf(in, sizeof in, "%s", file("x.npy"));
    rt_inputs_reset();
    assert_true(rt_npy_write(in, "test", 4, (const int64_t[]){ROWS, 1, 8, 8}, x, err, sizeof err));
    const RtModel *models[2] = {&ampc_model, &tiny_model_f16};
    for (int k = 0; k < 2; k++) {
        RtTrainOptions o = options(models[k]);
        o.predict = in;
        o.output = file("y4.npy");
        /* without weights (no --load-params, no --resume): refused, nothing written */
        unlink(o.output);
        assert_int_equal(run(models[k], &o), 1);
        assert_non_null(strstr(err_text, "--predict needs the trained weights: --resume CKPT"));
        assert_int_equal(access(o.output, F_OK), -1);
        /* the weights: the run's own initial ones (its init and seed), saved */
        RtTrainer w;
        assert_true(rt_trainer_init(&w, models[k], 4, 0, NULL, err, sizeof err));
        assert_true(rt_trainer_init_params(&w, o.init, o.seed, err, sizeof err));
        rt_inputs_reset();
        assert_true(rt_params_save(&w, file("w.params"), false, err, sizeof err));
        rt_trainer_free(&w);
        o.load_params = file("w.params");
        o.batch_size = 4; /* batches of 4, 4 and 2 (padded) */
        o.save_params = file("p.params");
        if (run(models[k], &o) != 0)
            fail_msg("%s", err_text);
        assert_non_null(strstr(out_text, "Predicted 10 samples of"));
        assert_non_null(strstr(out_text, "Saved parameters to"));
        float *y4 = read_out(o.output, ROWS);
        o.output = file("y64.npy");
        o.batch_size = 64;
        o.save_params = NULL;
        assert_int_equal(run(models[k], &o), 0);
        float *y64 = read_out(o.output, ROWS);
        for (int r = 0; r < ROWS; r++) {
            double sum = 0;
            for (int c = 0; c < 10; c++) {
                sum += y4[r * 10 + c];
                assert_true(fabsf(y4[r * 10 + c] - y64[r * 10 + c]) <= 1e-6f);
            }
            assert_true(fabs(sum - 1) < 1e-5);
        }
        /* --load-params of the parameters it saved (another seed): the same outputs */
        o.load_params = file("p.params");
        o.seed = 99;
        o.output = file("yl.npy");
        assert_int_equal(run(models[k], &o), 0);
        float *yl = read_out(o.output, ROWS);
        assert_memory_equal(yl, y64, sizeof(float) * ROWS * 10);
        free(y4);
        free(y64);
        free(yl);
    }
    /* an input of the wrong sample shape */
    RtTrainOptions o = options(&ampc_model);
    o.predict = file("bad.npy");
    o.output = file("o.npy");
    rt_inputs_reset();
    assert_true(rt_npy_write(o.predict, "test", 2, (const int64_t[]){2, 63}, x, err, sizeof err));
    assert_int_equal(run(&ampc_model, &o), 1);
    assert_non_null(strstr(err_text, "bad.npy: shape (2, 63) does not match model tiny_mlp's "
                                     "input (N, 1, 8, 8) with any N >= 1"));
    assert_int_equal(access(o.output, F_OK), -1); /* nothing written */
}

/* A model without a loss head: no train step, no label, predicts only. */
static void test_no_train_step(void **state)
{
    (void)state;
    RtModel m = ampc_model;
    m.train_step = NULL;
    m.moving_update = NULL;
    m.label = -1;
    m.prob_train = -1;
    static float x[3 * 64];
    char err[256];
    RtTrainOptions o = options(&m);
    o.predict = file("nx.npy");
    o.output = file("ny.npy");
    RtTrainer w;
    trainer(&w, &m, 7);
    rt_inputs_reset();
    assert_true(rt_params_save(&w, file("nw.params"), false, err, sizeof err));
    rt_trainer_free(&w);
    o.load_params = file("nw.params");
    rt_inputs_reset();
    assert_true(rt_npy_write(o.predict, "test", 4, (const int64_t[]){3, 1, 8, 8}, x, err,
                             sizeof err));
    assert_int_equal(run(&m, &o), 0);
    free(read_out(o.output, 3));
    o.predict = NULL;
    o.output = NULL;
    o.load_params = NULL;
    assert_int_equal(run(&m, &o), 2);
    assert_non_null(strstr(err_text, "model tiny_mlp has no train step (a model needs a loss "
                                     "head to train); it predicts: --predict INPUT.npy"));
}

static void test_flag_combinations(void **state)
{
    (void)state;
    static const struct {
        const char *predict, *output, *load, *resume, *save;
        bool sixteen, eval_only;
        const char *msg;
    } cases[] = {
        {"x.npy", NULL, NULL, NULL, NULL, false, false, "--predict needs --output FILE.npy"},
        {NULL, "y.npy", NULL, NULL, NULL, false, false, "--output is where --predict writes"},
        {NULL, NULL, "a.params", "c.params", NULL, false, false,
         "--load-params and --resume both set the parameters"},
        {NULL, NULL, NULL, NULL, NULL, true, false, "--save-params-16bit needs --save-params"},
        {"x.npy", "y.npy", NULL, NULL, "y.npy", false, false,
         "--save-params y.npy and --output y.npy name the same file"},
        {"x.npy", "y.npy", NULL, NULL, NULL, false, true, "--predict and --eval-only"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        RtTrainOptions o = options(&ampc_model);
        o.predict = cases[i].predict;
        o.output = cases[i].output;
        o.load_params = cases[i].load;
        o.resume = cases[i].resume;
        o.save_params = cases[i].save;
        o.save_params_16bit = cases[i].sixteen;
        o.eval_only = cases[i].eval_only;
        assert_int_equal(run(&ampc_model, &o), 2);
        if (!strstr(err_text, cases[i].msg))
            fail_msg("case %zu: '%s' lacks '%s'", i, err_text, cases[i].msg);
    }
    /* the flags parse */
    RtTrainOptions o = options(&ampc_model);
    char *argv[] = {"prog", "--load-params", "a.params", "--save-params=b.params",
                    "--save-params-16bit", "--predict", "x.npy", "--output", "y.npy", NULL};
    FILE *null = fopen("/dev/null", "w");
    assert_int_equal(rt_train_parse_args(&o, 9, argv, null, null), -1);
    fclose(null);
    assert_string_equal(o.load_params, "a.params");
    assert_string_equal(o.save_params, "b.params");
    assert_true(o.save_params_16bit);
    assert_string_equal(o.predict, "x.npy");
    assert_string_equal(o.output, "y.npy");
}

/* A training run: --load-params before the first step, --save-params at the end. */
static void test_train_load_save(void **state)
{
    (void)state;
    RtTrainer a;
    trainer(&a, &ampc_model, 17);
    char err[256];
    const char *start = file("start.params");
    rt_inputs_reset();
    assert_true(rt_params_save(&a, start, false, err, sizeof err));
    rt_trainer_free(&a);
    RtTrainOptions o = options(&ampc_model);
    o.max_steps = 0;
    o.epochs = 1;
    o.load_params = start;
    o.save_params = file("end.params");
    o.log_interval = 0;
    assert_int_equal(run(&ampc_model, &o), 0);
    assert_non_null(strstr(out_text, "Saved parameters to"));
    /* no step was taken: the saved parameters are the loaded ones */
    unsigned char *b1, *b2;
    RtMxList l1, l2;
    rt_inputs_reset();
    assert_true(rt_mx_read(start, &l1, err, sizeof err));
    assert_true(rt_mx_read(o.save_params, &l2, err, sizeof err));
    size_t n1, n2;
    assert_true(rt_mx_serialize(&l1, RT_MX_V2, &b1, &n1, err, sizeof err));
    assert_true(rt_mx_serialize(&l2, RT_MX_V2, &b2, &n2, err, sizeof err));
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    free(b1);
    free(b2);
    rt_mx_free(&l1);
    rt_mx_free(&l2);
    /* a bad file stops the run before any step, exit 1 */
    o.load_params = file("nonexistent.params");
    assert_int_equal(run(&ampc_model, &o), 1);
    assert_non_null(strstr(err_text, "cannot open params file"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_load),
        cmocka_unit_test(test_load_refused),
        cmocka_unit_test(test_predict),
        cmocka_unit_test(test_no_train_step),
        cmocka_unit_test(test_flag_combinations),
        cmocka_unit_test(test_train_load_save),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
