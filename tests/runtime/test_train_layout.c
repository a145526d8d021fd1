/* test_train_layout.c - parameters stored in another layout on the device
 * (RtParam.layout = RT_LAYOUT_NHWC: a 4-D weight as KRSC) are canonical at
 * every host boundary (runtime/paramlayout.h).  One hand-written model,
 * declared twice: every parameter NCHW, and the same with NHWC.
 *   - initialisation: the same seed gives device bytes that are the
 *     permutation of each other (values, fp32 masters);
 *   - checkpoints, both ways: a checkpoint written by one loads into the
 *     other as the permutation (weights, masters, momentum and Adam state),
 *     the two writers' files are byte for byte the same, and a file goes
 *     back into its own layout unchanged;
 *   - .params files (--save-params, --load-params) and --dump-state hold the
 *     canonical layout;
 *   - a short or corrupt checkpoint is still refused with the file's name.
 * The expected permutation is computed here, element by element, not with
 * the runtime's conversion. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train.h"
#include "train_internal.h"
#include "rand.h"

enum { NP = 5, NG = 4 };

/* parameter i reads buffer i; gradients follow; then data, label, prob */
#define PARAMS(L)                                                                              \
    {                                                                                          \
        {"conv_weight", RT_PK_WEIGHT, RT_F16, true, 4, {6, 5, 3, 2}, 180, "default", 1, 1, 0,  \
         NP + 0, L},                                                                           \
        {"conv_bias", RT_PK_BIAS, RT_F32, false, 1, {6}, 6, "uniform(scale=0.5)", 0, 1, 1,     \
         NP + 1, L},                                                                           \
        {"k3_weight", RT_PK_WEIGHT, RT_BF16, true, 3, {4, 3, 7}, 84, "default", 1, 1, 2,       \
         NP + 2, L},                                                                           \
        {"conv2_weight", RT_PK_WEIGHT, RT_F32, false, 4, {3, 4, 2, 2}, 48, "default", 1, 1, 3, \
         NP + 3, L},                                                                           \
        {"bn_moving_mean", RT_PK_MOVING_MEAN, RT_F32, false, 1, {6}, 6, "uniform(scale=1)", 0, \
         1, 4, -1, L},                                                                         \
    }
static const RtParam par_nchw[NP] = PARAMS(RT_LAYOUT_NCHW);
static const RtParam par_nhwc[NP] = PARAMS(RT_LAYOUT_NHWC);

static const RtBuffer buffers[NP + NG + 3] = {
    {"conv_weight", RT_F16, 180, 0, false, 0, 0}, {"conv_bias", RT_F32, 6, 0, false, 0, 0},
    {"k3_weight", RT_BF16, 84, 0, false, 0, 0},   {"conv2_weight", RT_F32, 48, 0, false, 0, 0},
    {"bn_moving_mean", RT_F32, 6, 0, false, 0, 0}, {"g0", RT_F16, 180, 0, false, 0, 0},
    {"g1", RT_F32, 6, 0, false, 0, 0},            {"g2", RT_BF16, 84, 0, false, 0, 0},
    {"g3", RT_F32, 48, 0, false, 0, 0},           {"data", RT_F32, 0, 4, false, 0, 0},
    {"label", RT_F32, 0, 1, false, 0, 0},         {"prob", RT_F32, 0, 3, false, 0, 0},
};

#define MODEL(P)                                                                               \
    {.name = "layout_test", .nparams = NP, .params = P, .nbuffers = NP + NG + 3,               \
     .buffers = buffers, .data = NP + NG, .label = NP + NG + 1, .prob_train = NP + NG + 2,     \
     .prob_infer = NP + NG + 2, .data_rank = 1, .data_shape = {4}, .classes = 3}
static const RtModel m_nchw = MODEL(par_nchw);
static const RtModel m_nhwc = MODEL(par_nhwc);

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ampc_layout_test.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[600];
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(dir);
    return 0;
}

/* ---- the expected layout ------------------------------------------------------ */

/* canonical [k][c][rest] as the NHWC model stores it: [k][rest][c] (rank >= 3) */
static size_t device_index(const RtParam *p, size_t canon)
{
    if (p->rank < 3)
        return canon;
    size_t c = (size_t)p->shape[1], rest = (size_t)p->numel / ((size_t)p->shape[0] * c);
    size_t k = canon / (c * rest), ch = canon / rest % c, r = canon % rest;
    return (k * rest + r) * c + ch;
}

/* a (NCHW model's) and b (NHWC model's) hold the same values: b[perm(i)] == a[i] */
static void same_permuted(const char *what, const RtParam *p, const void *a, const void *b,
                          size_t esz)
{
    for (size_t i = 0; i < (size_t)p->numel; i++)
        if (memcmp((const char *)a + i * esz, (const char *)b + device_index(p, i) * esz, esz))
            fail_msg("%s of %s: canonical element %zu differs", what, p->name, i);
}

/* every tensor of parameter i: value, master, momentum/mean, Adam's var */
static void same_trainers(const RtTrainer *a, const RtTrainer *b)
{
    for (int i = 0; i < NP; i++) {
        const RtParam *p = &par_nhwc[i];
        same_permuted("value", p, a->ctx.buf[p->buffer], b->ctx.buf[p->buffer],
                      rt_dtype_size(p->dtype));
        if (p->has_master)
            same_permuted("master", p, a->ctx.master[i], b->ctx.master[i], sizeof(float));
        if (a->state && a->state[i])
            same_permuted("state", p, a->state[i], b->state[i], sizeof(float));
        if (a->state2 && a->state2[i])
            same_permuted("state2", p, a->state2[i], b->state2[i], sizeof(float));
    }
}

static void trainer(RtTrainer *t, const RtModel *m, uint64_t seed)
{
    char err[256];
    if (!rt_trainer_init(t, m, 2, 2, NULL, err, sizeof err) ||
        !rt_trainer_init_params(t, "xavier(rnd_type=gaussian)", seed, err, sizeof err))
        fail_msg("%s", err);
}

/* optimizer state and gradients with values that tell every element apart */
static void fill_states(RtTrainer *t, uint64_t seed)
{
    for (int i = 0; i < NP; i++)
        for (int64_t e = 0; t->state && t->state[i] && e < t->m->params[i].numel; e++) {
            t->state[i][e] = (float)rt_rand_normal(seed, 99 + (uint64_t)i, (uint64_t)e);
            t->state2[i][e] = (float)rt_rand_uniform(seed, 199 + (uint64_t)i, (uint64_t)e);
        }
}

static RtRunState run_state(void)
{
    RtRunState rs;
    memset(&rs, 0, sizeof rs);
    rs.seed = 77;
    rs.batch_size = 2;
    rs.epoch = 1;
    rs.step = 10;
    rs.num_update = 10;
    rs.optimizer = RT_OPT_ADAM;
    rs.ls.mode = RT_LS_DYNAMIC;
    rs.ls.s.scale = 1024;
    return rs;
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    unsigned char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void same_files(const char *a, const char *b)
{
    size_t la, lb;
    unsigned char *x = slurp(a, &la), *y = slurp(b, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(x, y, la);
    free(x);
    free(y);
}

/* ---- the tests ------------------------------------------------------------------- */

static void test_init(void **state)
{
    (void)state;
    RtTrainer a, b;
    trainer(&a, &m_nchw, 5);
    trainer(&b, &m_nhwc, 5);
    same_trainers(&a, &b);
    /* and the permutation is not the identity: KRSC differs from OIHW */
    for (int i = 0; i < NP; i++) {
        const RtParam *p = &par_nhwc[i];
        size_t bytes = (size_t)p->numel * rt_dtype_size(p->dtype);
        bool differ = memcmp(a.ctx.buf[p->buffer], b.ctx.buf[p->buffer], bytes) != 0;
        if (differ != (p->rank >= 3))
            fail_msg("%s: the NHWC bytes %s the NCHW ones", p->name,
                     differ ? "differ from" : "equal");
    }
    rt_trainer_free(&a);
    rt_trainer_free(&b);
}

static void test_checkpoint_both_ways(void **state)
{
    (void)state;
    char err[512], fa[400], fb[400];
    RtTrainer a, b, c, d;
    trainer(&a, &m_nchw, 6);
    fill_states(&a, 6);
    RtRunState rs = run_state();
    snprintf(fa, sizeof fa, "%s/nchw-0001.ckpt", dir);
    snprintf(fb, sizeof fb, "%s/nhwc-0001.ckpt", dir);
    if (!rt_checkpoint_save(fa, &a, &rs, err, sizeof err))
        fail_msg("%s", err);
    /* NCHW's file into the NHWC model */
    trainer(&b, &m_nhwc, 999);
    RtCheckpoint ck;
    if (!rt_checkpoint_read(fa, &ck, err, sizeof err) ||
        !rt_checkpoint_apply(&ck, &b, NULL, fa, stderr, err, sizeof err))
        fail_msg("%s", err);
    rt_checkpoint_free(&ck);
    same_trainers(&a, &b);
    /* the NHWC model writes the same canonical file */
    if (!rt_checkpoint_save(fb, &b, &rs, err, sizeof err))
        fail_msg("%s", err);
    same_files(fa, fb);
    /* NHWC's file into the NCHW model, and into the NHWC one */
    trainer(&c, &m_nchw, 1000);
    trainer(&d, &m_nhwc, 1001);
    if (!rt_checkpoint_read(fb, &ck, err, sizeof err) ||
        !rt_checkpoint_apply(&ck, &c, NULL, fb, stderr, err, sizeof err) ||
        !rt_checkpoint_apply(&ck, &d, NULL, fb, stderr, err, sizeof err))
        fail_msg("%s", err);
    rt_checkpoint_free(&ck);
    for (int i = 0; i < NP; i++) {
        const RtParam *p = &par_nchw[i];
        size_t n = (size_t)p->numel;
        assert_memory_equal(a.ctx.buf[p->buffer], c.ctx.buf[p->buffer], n * rt_dtype_size(p->dtype));
        assert_memory_equal(b.ctx.buf[p->buffer], d.ctx.buf[p->buffer], n * rt_dtype_size(p->dtype));
        if (p->has_master) {
            assert_memory_equal(a.ctx.master[i], c.ctx.master[i], n * sizeof(float));
            assert_memory_equal(b.ctx.master[i], d.ctx.master[i], n * sizeof(float));
        }
        if (a.state[i]) {
            assert_memory_equal(a.state[i], c.state[i], n * sizeof(float));
            assert_memory_equal(a.state2[i], c.state2[i], n * sizeof(float));
            assert_memory_equal(b.state[i], d.state[i], n * sizeof(float));
            assert_memory_equal(b.state2[i], d.state2[i], n * sizeof(float));
        }
    }
    rt_trainer_free(&a);
    rt_trainer_free(&b);
    rt_trainer_free(&c);
    rt_trainer_free(&d);
}

/* A short or corrupt file is refused before anything is loaded, naming it. */
static void test_bad_checkpoint(void **state)
{
    (void)state;
    char err[512], path[400], cut[400];
    RtTrainer a, b;
    trainer(&a, &m_nhwc, 7);
    fill_states(&a, 7);
    RtRunState rs = run_state();
    snprintf(path, sizeof path, "%s/good-0001.ckpt", dir);
    snprintf(cut, sizeof cut, "%s/cut-0001.ckpt", dir);
    if (!rt_checkpoint_save(path, &a, &rs, err, sizeof err))
        fail_msg("%s", err);
    size_t len;
    unsigned char *bytes = slurp(path, &len);
    RtCheckpoint ck;
    trainer(&b, &m_nhwc, 8);
    size_t cuts[] = {len - 1, len / 2, 40, 10};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        FILE *f = fopen(cut, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(bytes, 1, cuts[k], f), cuts[k]);
        fclose(f);
        assert_false(rt_checkpoint_read(cut, &ck, err, sizeof err));
        assert_non_null(strstr(err, cut));
    }
    bytes[len - 5] ^= 0x10; /* a weight's bit */
    FILE *f = fopen(cut, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, len, f), len);
    fclose(f);
    assert_false(rt_checkpoint_read(cut, &ck, err, sizeof err));
    assert_non_null(strstr(err, cut));
    free(bytes);
    rt_trainer_free(&a);
    rt_trainer_free(&b);
}

/* --save-params and --load-params: the MXNet file is canonical. */
static void test_params_files(void **state)
{
    (void)state;
    char err[512], pa[400], pb[400];
    RtTrainer a, b, c;
    trainer(&a, &m_nchw, 9);
    trainer(&b, &m_nhwc, 9);
    for (int sixteen = 0; sixteen < 2; sixteen++) {
        snprintf(pa, sizeof pa, "%s/a%d.params", dir, sixteen);
        snprintf(pb, sizeof pb, "%s/b%d.params", dir, sixteen);
        if (!rt_params_save(&a, pa, sixteen, err, sizeof err) ||
            !rt_params_save(&b, pb, sixteen, err, sizeof err))
            fail_msg("%s", err);
        same_files(pa, pb);
    }
    /* the NCHW model's file loaded into the NHWC model: its weights */
    snprintf(pa, sizeof pa, "%s/a0.params", dir);
    trainer(&c, &m_nhwc, 12345);
    if (!rt_params_load(&c, pa, err, sizeof err))
        fail_msg("%s", err);
    for (int i = 0; i < NP; i++) {
        const RtParam *p = &par_nhwc[i];
        assert_memory_equal(b.ctx.buf[p->buffer], c.ctx.buf[p->buffer],
                            (size_t)p->numel * rt_dtype_size(p->dtype));
        if (p->has_master)
            assert_memory_equal(b.ctx.master[i], c.ctx.master[i], (size_t)p->numel * 4);
    }
    rt_trainer_free(&a);
    rt_trainer_free(&b);
    rt_trainer_free(&c);
}

/* --dump-state writes values and gradients in the canonical layout. */
static void test_dump_state(void **state)
{
    (void)state;
    char err[512], pa[400], pb[400];
    RtTrainer a, b;
    trainer(&a, &m_nchw, 13);
    trainer(&b, &m_nhwc, 13);
    for (int i = 0; i < NP; i++) {
        const RtParam *p = &par_nchw[i];
        if (p->grad < 0)
            continue;
        RtDType dt = buffers[p->grad].dtype;
        size_t esz = rt_dtype_size(dt);
        for (size_t e = 0; e < (size_t)p->numel; e++) {
            float v = (float)rt_rand_normal(13, 7 + (uint64_t)i, e);
            char *ga = (char *)a.ctx.buf[p->grad] + e * esz;
            char *gb = (char *)b.ctx.buf[p->grad] + device_index(p, e) * esz;
            rt_from_f32(ga, &v, 1, dt);
            memcpy(gb, ga, esz);
        }
    }
    snprintf(pa, sizeof pa, "%s/a.state", dir);
    snprintf(pb, sizeof pb, "%s/b.state", dir);
    if (!rt_dump_state(&m_nchw, &a, pa, err, sizeof err) ||
        !rt_dump_state(&m_nhwc, &b, pb, err, sizeof err))
        fail_msg("%s", err);
    same_files(pa, pb);
    rt_trainer_free(&a);
    rt_trainer_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init),          cmocka_unit_test(test_checkpoint_both_ways),
        cmocka_unit_test(test_bad_checkpoint), cmocka_unit_test(test_params_files),
        cmocka_unit_test(test_dump_state),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
