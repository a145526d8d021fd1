/*
 * test_train_ckpt.c - checkpoints (runtime/checkpoint.c) on the hand-written
 * MLP of model_tiny.c: a round trip restores masters, 16-bit shadows, fp32
 * parameters, momentum and the run state bit for bit; a checkpoint truncated
 * at every offset and one with any byte flipped is refused, with a message
 * naming the file; a table that does not match the model (count, names,
 * shapes) is refused; a save replaces the file atomically (the old file's
 * inode is never written, no temporary file is left behind); write errors
 * name the file.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model_tiny.c"
#include <zlib.h>

#include "train.h"

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ampc_ckpt_test.XXXXXX");
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

/* A trainer with random parameters and momentum. */
static void trainer(RtTrainer *t, const RtModel *m, uint64_t seed)
{
    char err[256];
    assert_true(rt_trainer_init(t, m, 8, true, err, sizeof err));
    assert_true(rt_trainer_init_params(t, "xavier()", seed, err, sizeof err));
    for (int i = 0; i < m->nparams; i++)
        for (int64_t e = 0; e < m->params[i].numel; e++)
            t->state[i][e] = (float)rt_rand_normal(seed, 99 + (uint64_t)i, (uint64_t)e);
}

static RtRunState run_state(void)
{
    RtRunState rs;
    memset(&rs, 0, sizeof rs);
    rs.seed = 1234567890123ull;
    rs.batch_size = 8;
    rs.epoch = 3;
    rs.batch_in_epoch = 17;
    rs.step = 155;
    rs.num_update = 149;
    rs.optimizer = RT_OPT_NAG;
    rs.momentum = 0.9f;
    rs.ls.mode = RT_LS_DYNAMIC;
    rs.ls.s.scale = 8192;
    rs.ls.s.tracker = 42;
    rs.ls.skipped = 6;
    rs.ls.nonfinite = 0;
    return rs;
}

static unsigned char *slurp_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    unsigned char *b = malloc((size_t)n);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void test_round_trip(void **state)
{
    (void)state;
    const RtModel *models[] = {&tiny_model_f16, &ampc_model, &tiny_model_bf16};
    for (int k = 0; k < 3; k++) {
        const RtModel *m = models[k];
        RtTrainer a, b;
        char err[512], path[400];
        trainer(&a, m, 5);
        trainer(&b, m, 6); /* different values everywhere */
        RtRunState rs = run_state();
        snprintf(path, sizeof path, "%s/%s-0004.params", dir, m->name);
        if (!rt_checkpoint_save(path, &a, &rs, err, sizeof err))
            fail_msg("%s", err);
        RtCheckpoint ck;
        if (!rt_checkpoint_read(path, &ck, err, sizeof err))
            fail_msg("%s", err);
        assert_string_equal(ck.model, m->name);
        assert_string_equal(ck.amp, m->amp);
        assert_memory_equal(&ck.run.seed, &rs.seed, sizeof rs.seed);
        assert_int_equal(ck.run.batch_size, 8);
        assert_int_equal(ck.run.epoch, 3);
        assert_int_equal(ck.run.batch_in_epoch, 17);
        assert_int_equal(ck.run.step, 155);
        assert_int_equal(ck.run.num_update, 149);
        assert_int_equal(ck.run.optimizer, RT_OPT_NAG);
        assert_int_equal(ck.run.ls.mode, RT_LS_DYNAMIC);
        assert_float_equal(ck.run.ls.s.scale, 8192, 0);
        assert_int_equal(ck.run.ls.s.tracker, 42);
        assert_int_equal(ck.run.ls.skipped, 6);
        assert_int_equal(ck.nparams, m->nparams);
        for (int i = 0; i < m->nparams; i++) {
            const RtParam *p = &m->params[i];
            assert_string_equal(ck.params[i].name, p->name);
            assert_int_equal(ck.params[i].dtype, p->dtype);
            assert_int_equal(ck.params[i].has_master, p->has_master);
            assert_int_equal(ck.params[i].rank, p->rank);
            assert_non_null(ck.params[i].state);
        }
        if (!rt_checkpoint_apply(&ck, &b, path, NULL, err, sizeof err))
            fail_msg("%s", err);
        for (int i = 0; i < m->nparams; i++) {
            const RtParam *p = &m->params[i];
            size_t n = (size_t)p->numel;
            if (p->has_master)
                assert_memory_equal(a.ctx.master[i], b.ctx.master[i], n * sizeof(float));
            /* the buffer the steps read: fp32, or the 16-bit shadow of the master */
            assert_memory_equal(a.ctx.buf[p->buffer], b.ctx.buf[p->buffer],
                                n * rt_dtype_size(p->dtype));
            assert_memory_equal(a.state[i], b.state[i], n * sizeof(float));
        }
        rt_checkpoint_free(&ck);
        rt_trainer_free(&a);
        rt_trainer_free(&b);
    }
    /* an fp32 model's checkpoint loads into the AMP model: the values are
     * the fp32 masters either way, only the shadows are rounded */
    RtTrainer a, b;
    char err[512], path[400];
    trainer(&a, &ampc_model, 7);
    trainer(&b, &tiny_model_f16, 8);
    RtRunState rs = run_state();
    snprintf(path, sizeof path, "%s/fp32.params", dir);
    assert_true(rt_checkpoint_save(path, &a, &rs, err, sizeof err));
    RtCheckpoint ck;
    assert_true(rt_checkpoint_read(path, &ck, err, sizeof err));
    assert_true(rt_checkpoint_apply(&ck, &b, path, NULL, err, sizeof err));
    assert_memory_equal(b.ctx.master[0], a.ctx.buf[tiny_model_f16.params[0].buffer],
                        (size_t)tiny_model_f16.params[0].numel * sizeof(float));
    for (int64_t e = 0; e < tiny_model_f16.params[0].numel; e++)
        assert_int_equal(((ampc_half *)b.ctx.buf[tiny_model_f16.params[0].buffer])[e],
                         ampc_float_to_half(b.ctx.master[0][e]));
    rt_checkpoint_free(&ck);
    rt_trainer_free(&a);
    rt_trainer_free(&b);
}

/* Any truncation and any flipped byte is refused; the message names the file. */
static void test_corruption(void **state)
{
    (void)state;
    RtTrainer a;
    char err[512], path[400];
    trainer(&a, &tiny_model_f16, 9);
    RtRunState rs = run_state();
    snprintf(path, sizeof path, "%s/good.params", dir);
    assert_true(rt_checkpoint_save(path, &a, &rs, err, sizeof err));
    size_t len;
    unsigned char *buf = slurp_file(path, &len);
    RtCheckpoint ck;
    assert_true(rt_checkpoint_parse(buf, len, "good.params", &ck, err, sizeof err));
    rt_checkpoint_free(&ck);
    print_message("checkpoint of tiny_mlp_f16: %zu bytes; truncating at every offset and "
                  "flipping every byte\n", len);
    for (size_t cut = 0; cut < len; cut++) {
        if (rt_checkpoint_parse(buf, cut, "cut.params", &ck, err, sizeof err))
            fail_msg("truncated at %zu of %zu: accepted", cut, len);
        if (!strstr(err, "checkpoint cut.params: "))
            fail_msg("truncated at %zu: message without the file name: %s", cut, err);
        if (cut >= 8 && !strstr(err, "truncated"))
            fail_msg("truncated at %zu: %s", cut, err);
    }
    /* trailing garbage */
    unsigned char *longer = malloc(len + 1);
    memcpy(longer, buf, len);
    longer[len] = 0;
    assert_false(rt_checkpoint_parse(longer, len + 1, "long.params", &ck, err, sizeof err));
    assert_non_null(strstr(err, "trailing data"));
    free(longer);
    for (size_t at = 0; at < len; at++)
        for (int bit = 0; bit < 8; bit += 3) {
            buf[at] ^= (unsigned char)(1u << bit);
            if (rt_checkpoint_parse(buf, len, "flip.params", &ck, err, sizeof err))
                fail_msg("byte %zu bit %d flipped: accepted", at, bit);
            if (!strstr(err, "checkpoint flip.params: "))
                fail_msg("byte %zu flipped: %s", at, err);
            buf[at] ^= (unsigned char)(1u << bit);
        }
    assert_true(rt_checkpoint_parse(buf, len, "good.params", &ck, err, sizeof err));
    rt_checkpoint_free(&ck);
    /* the file reader: a truncated file on disk */
    char cut[420];
    snprintf(cut, sizeof cut, "%s/cut.params", dir);
    FILE *f = fopen(cut, "wb");
    fwrite(buf, 1, len - 5, f);
    fclose(f);
    assert_false(rt_checkpoint_read(cut, &ck, err, sizeof err));
    assert_non_null(strstr(err, cut));
    assert_non_null(strstr(err, "truncated"));
    char missing[420];
    snprintf(missing, sizeof missing, "%s/none.params", dir);
    assert_false(rt_checkpoint_read(missing, &ck, err, sizeof err));
    assert_non_null(strstr(err, "cannot open checkpoint"));
    assert_non_null(strstr(err, "none.params"));
    assert_false(rt_checkpoint_read(dir, &ck, err, sizeof err)); /* a directory */
    free(buf);
    rt_trainer_free(&a);
}

/* A table that differs in count, name or shape is refused. */
static void test_table_mismatch(void **state)
{
    (void)state;
    RtTrainer a, b;
    char err[512], path[400];
    trainer(&a, &ampc_model, 10);
    RtRunState rs = run_state();
    snprintf(path, sizeof path, "%s/table.params", dir);
    assert_true(rt_checkpoint_save(path, &a, &rs, err, sizeof err));
    RtCheckpoint ck;
    assert_true(rt_checkpoint_read(path, &ck, err, sizeof err));
    RtParam p[4];
    memcpy(p, par_f32, sizeof p);
    RtModel m = ampc_model;
    m.params = p;
    /* a renamed parameter */
    p[2].name = "head_weight";
    trainer(&b, &m, 11);
    assert_false(rt_checkpoint_apply(&ck, &b, path, NULL, err, sizeof err));
    assert_non_null(strstr(err, "does not match model tiny_mlp: parameter 2 is fc2_weight "
                                "[10,32] in the checkpoint, head_weight [10,32] in the model"));
    assert_non_null(strstr(err, path));
    rt_trainer_free(&b);
    /* a different shape (same count) */
    memcpy(p, par_f32, sizeof p);
    p[2].shape[0] = 5;
    p[2].shape[1] = 64;
    trainer(&b, &m, 11);
    assert_false(rt_checkpoint_apply(&ck, &b, path, NULL, err, sizeof err));
    assert_non_null(strstr(err, "fc2_weight [10,32] in the checkpoint, fc2_weight [5,64]"));
    rt_trainer_free(&b);
    /* fewer parameters */
    memcpy(p, par_f32, sizeof p);
    m.nparams = 3;
    trainer(&b, &m, 11);
    assert_false(rt_checkpoint_apply(&ck, &b, path, NULL, err, sizeof err));
    assert_non_null(strstr(err, "it holds 4 parameters (model tiny_mlp), the model has 3"));
    rt_trainer_free(&b);
    /* momentum in the checkpoint, none in this run: loaded without it, said */
    m = ampc_model;
    char ebuf[512];
    assert_true(rt_trainer_init(&b, &m, 8, false, ebuf, sizeof ebuf));
    FILE *warn = tmpfile();
    assert_true(rt_checkpoint_apply(&ck, &b, path, warn, err, sizeof err));
    rewind(warn);
    size_t n = fread(ebuf, 1, sizeof ebuf - 1, warn);
    ebuf[n] = 0;
    fclose(warn);
    assert_non_null(strstr(ebuf, "holds momentum for 4 parameters that this run does not use"));
    assert_memory_equal(b.ctx.buf[par_f32[0].buffer], a.ctx.buf[par_f32[0].buffer],
                        (size_t)par_f32[0].numel * sizeof(float));
    rt_trainer_free(&b);
    rt_checkpoint_free(&ck);
    rt_trainer_free(&a);
}

/* The old file is replaced by a rename, never written in place; no
 * temporary file is left; errors name the file. */
static void test_atomic_replace(void **state)
{
    (void)state;
    RtTrainer a, b;
    char err[512], path[400], link_path[420];
    trainer(&a, &ampc_model, 12);
    trainer(&b, &ampc_model, 13);
    RtRunState rs = run_state();
    snprintf(path, sizeof path, "%s/atomic.params", dir);
    snprintf(link_path, sizeof link_path, "%s/old.link", dir);
    assert_true(rt_checkpoint_save(path, &a, &rs, err, sizeof err));
    size_t len_a;
    unsigned char *before = slurp_file(path, &len_a);
    struct stat st0, st1;
    assert_int_equal(stat(path, &st0), 0);
    assert_int_equal(st0.st_mode & 0777, 0644);
    assert_int_equal(link(path, link_path), 0); /* a second name for the old inode */
    rs.step = 999;
    assert_true(rt_checkpoint_save(path, &b, &rs, err, sizeof err));
    assert_int_equal(stat(path, &st1), 0);
    assert_true(st1.st_ino != st0.st_ino);
    size_t len_l, len_n;
    unsigned char *old = slurp_file(link_path, &len_l), *now = slurp_file(path, &len_n);
    assert_int_equal(len_l, len_a);
    assert_memory_equal(old, before, len_a); /* the old checkpoint is intact */
    RtCheckpoint ck;
    assert_true(rt_checkpoint_parse(now, len_n, path, &ck, err, sizeof err));
    assert_int_equal(ck.run.step, 999);
    rt_checkpoint_free(&ck);
    /* no temporary file left behind */
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp."))
            fail_msg("left behind: %s", e->d_name);
    closedir(d);
    /* a directory that does not exist */
    char bad[450];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.params", dir);
    assert_false(rt_checkpoint_save(bad, &a, &rs, err, sizeof err));
    assert_non_null(strstr(err, "cannot write checkpoint"));
    assert_non_null(strstr(err, "cannot create a temporary file in its directory"));
    assert_non_null(strstr(err, bad));
    free(before);
    free(old);
    free(now);
    rt_trainer_free(&a);
    rt_trainer_free(&b);
}

/* Adam's state: mean and var of every trainable parameter survive a round
 * trip bit for bit (flag 8, optimizer 2, format version 2); a momentum
 * checkpoint loaded into an Adam run (and the reverse) starts the state from
 * zero and says so; a version-1 file still loads. */
static void test_adam_state(void **state)
{
    (void)state;
    const RtModel *m = &tiny_model_f16;
    char err[512], path[400], path2[400];
    RtTrainer a, b;
    assert_true(rt_trainer_init(&a, m, 8, 2, err, sizeof err));
    assert_true(rt_trainer_init_params(&a, "xavier()", 5, err, sizeof err));
    assert_true(rt_trainer_init(&b, m, 8, 2, err, sizeof err));
    for (int i = 0; i < m->nparams; i++) {
        if (!a.state[i])
            continue;
        assert_non_null(a.state2[i]);
        for (int64_t e = 0; e < m->params[i].numel; e++) {
            a.state[i][e] = (float)rt_rand_normal(5, 99 + (uint64_t)i, (uint64_t)e);
            a.state2[i][e] = (float)rt_rand_uniform(5, 199 + (uint64_t)i, (uint64_t)e);
        }
    }
    RtRunState rs = run_state();
    rs.optimizer = RT_OPT_ADAM;
    snprintf(path, sizeof path, "%s/adam-0001.params", dir);
    if (!rt_checkpoint_save(path, &a, &rs, err, sizeof err))
        fail_msg("%s", err);
    size_t len;
    unsigned char *bytes = slurp_file(path, &len);
    assert_int_equal(bytes[8], 2); /* version 2 */
    free(bytes);
    RtCheckpoint ck;
    if (!rt_checkpoint_read(path, &ck, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(ck.run.optimizer, RT_OPT_ADAM);
    assert_int_equal(ck.run.num_update, 149);
    if (!rt_checkpoint_apply(&ck, &b, path, stderr, err, sizeof err))
        fail_msg("%s", err);
    for (int i = 0; i < m->nparams; i++) {
        if (!a.state[i])
            continue;
        size_t n = (size_t)m->params[i].numel * sizeof(float);
        assert_memory_equal(a.state[i], b.state[i], n);
        assert_memory_equal(a.state2[i], b.state2[i], n);
        assert_memory_equal(a.ctx.master[i] ? a.ctx.master[i] : a.ctx.buf[m->params[i].buffer],
                            b.ctx.master[i] ? b.ctx.master[i] : b.ctx.buf[m->params[i].buffer],
                            a.ctx.master[i] ? n : n / 2 * (m->params[i].dtype == RT_F32 ? 2 : 1));
    }
    /* an Adam checkpoint into a momentum run: its mean is not a momentum */
    RtTrainer c;
    assert_true(rt_trainer_init(&c, m, 8, 1, err, sizeof err));
    FILE *w = tmpfile();
    assert_true(rt_checkpoint_apply(&ck, &c, path, w, err, sizeof err));
    char text[1024] = "";
    rewind(w);
    size_t got = fread(text, 1, sizeof text - 1, w);
    text[got] = 0;
    fclose(w);
    assert_non_null(strstr(text, "holds no momentum"));
    assert_non_null(strstr(text, "holds Adam state (mean, var)"));
    for (int i = 0; i < m->nparams; i++)
        if (c.state[i])
            assert_true(c.state[i][0] == 0);
    rt_checkpoint_free(&ck);
    /* a momentum (version 2, flag 4 only) checkpoint into an Adam run */
    snprintf(path2, sizeof path2, "%s/mom-0001.params", dir);
    rs.optimizer = RT_OPT_NAG;
    for (int i = 0; i < m->nparams; i++)
        if (c.state[i])
            c.state[i][0] = 1;
    assert_true(rt_checkpoint_save(path2, &c, &rs, err, sizeof err));
    assert_true(rt_checkpoint_read(path2, &ck, err, sizeof err));
    w = tmpfile();
    assert_true(rt_checkpoint_apply(&ck, &b, path2, w, err, sizeof err));
    rewind(w);
    got = fread(text, 1, sizeof text - 1, w);
    text[got] = 0;
    fclose(w);
    assert_non_null(strstr(text, "holds no Adam state (mean, var)"));
    rt_checkpoint_free(&ck);
    /* version 1 (no flag 8) is still read: rewrite the version, both checksums */
    bytes = slurp_file(path2, &len);
    bytes[8] = 1;
    uint32_t h = (uint32_t)crc32(crc32(0L, Z_NULL, 0), bytes, 28);
    memcpy(bytes + 28, &h, 4); /* little-endian host */
    assert_true(rt_checkpoint_parse(bytes, len, "v1", &ck, err, sizeof err));
    rt_checkpoint_free(&ck);
    /* ... but flag 8 in a version-1 file is refused */
    free(bytes);
    bytes = slurp_file(path, &len);
    bytes[8] = 1;
    h = (uint32_t)crc32(crc32(0L, Z_NULL, 0), bytes, 28);
    memcpy(bytes + 28, &h, 4);
    assert_false(rt_checkpoint_parse(bytes, len, "v1adam", &ck, err, sizeof err));
    free(bytes);
    rt_trainer_free(&a);
    rt_trainer_free(&b);
    rt_trainer_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_corruption),
        cmocka_unit_test(test_table_mismatch),
        cmocka_unit_test(test_atomic_replace),
        cmocka_unit_test(test_adam_state),
    };
    return cmocka_run_group_tests_name("train_ckpt", tests, setup, teardown);
}
