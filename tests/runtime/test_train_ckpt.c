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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model_tiny.c"
#include <zlib.h>

#include "train.h"
#include "checkpoint.h"
#include "rand.h"

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
    assert_true(rt_trainer_init(t, m, 8, true, NULL, err, sizeof err));
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
        snprintf(path, sizeof path, "%s/%s-0004.ckpt", dir, m->name);
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
        if (!rt_checkpoint_apply(&ck, &b, NULL, path, NULL, err, sizeof err))
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
    RtModel amp_build = tiny_model_f16; /* ampc names both builds after the model */
    amp_build.name = ampc_model.name;
    trainer(&a, &ampc_model, 7);
    trainer(&b, &amp_build, 8);
    RtRunState rs = run_state();
    snprintf(path, sizeof path, "%s/fp32.params", dir);
    assert_true(rt_checkpoint_save(path, &a, &rs, err, sizeof err));
    RtCheckpoint ck;
    assert_true(rt_checkpoint_read(path, &ck, err, sizeof err));
    assert_true(rt_checkpoint_apply(&ck, &b, NULL, path, NULL, err, sizeof err));
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
    /* a payload size of 2^64-1 (header checksum mended) is reported as it is,
     * not wrapped by adding the header's 32 bytes (issue 21: "31") */
    unsigned char *forged = malloc(len);
    memcpy(forged, buf, len);
    memset(forged + 16, 0xff, 8);
    uint32_t hc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), forged, 28);
    memcpy(forged + 28, &hc, 4);
    assert_false(rt_checkpoint_parse(forged, len, "huge.params", &ck, err, sizeof err));
    assert_non_null(strstr(err, "truncated"));
    assert_non_null(strstr(err, "the header says a payload of 18446744073709551615 after its 32"));
    free(forged);
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
    assert_false(rt_checkpoint_apply(&ck, &b, NULL, path, NULL, err, sizeof err));
    assert_non_null(strstr(err, "does not match model tiny_mlp: parameter 2 is fc2_weight "
                                "[10,32] in the checkpoint, head_weight [10,32] in the model"));
    assert_non_null(strstr(err, path));
    rt_trainer_free(&b);
    /* a different shape (same count) */
    memcpy(p, par_f32, sizeof p);
    p[2].shape[0] = 5;
    p[2].shape[1] = 64;
    trainer(&b, &m, 11);
    assert_false(rt_checkpoint_apply(&ck, &b, NULL, path, NULL, err, sizeof err));
    assert_non_null(strstr(err, "fc2_weight [10,32] in the checkpoint, fc2_weight [5,64]"));
    rt_trainer_free(&b);
    /* fewer parameters */
    memcpy(p, par_f32, sizeof p);
    m.nparams = 3;
    trainer(&b, &m, 11);
    assert_false(rt_checkpoint_apply(&ck, &b, NULL, path, NULL, err, sizeof err));
    assert_non_null(strstr(err, "it holds 4 parameters (model tiny_mlp), the model has 3"));
    rt_trainer_free(&b);
    /* momentum in the checkpoint, none in this run: loaded without it, said */
    m = ampc_model;
    char ebuf[512];
    assert_true(rt_trainer_init(&b, &m, 8, false, NULL, ebuf, sizeof ebuf));
    FILE *warn = tmpfile();
    assert_true(rt_checkpoint_apply(&ck, &b, "train_tiny", path, warn, err, sizeof err));
    rewind(warn);
    size_t n = fread(ebuf, 1, sizeof ebuf - 1, warn);
    ebuf[n] = 0;
    fclose(warn);
    assert_non_null(strstr(ebuf, "holds momentum for 4 parameters that this run does not use"));
    /* a warning names the program, as every message does (issue 21) */
    assert_int_equal(strncmp(ebuf, "train_tiny: warning: checkpoint ", 32), 0);
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
    assert_true(rt_trainer_init(&a, m, 8, 2, NULL, err, sizeof err));
    assert_true(rt_trainer_init_params(&a, "xavier()", 5, err, sizeof err));
    assert_true(rt_trainer_init(&b, m, 8, 2, NULL, err, sizeof err));
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
    snprintf(path, sizeof path, "%s/adam-0001.ckpt", dir);
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
    if (!rt_checkpoint_apply(&ck, &b, NULL, path, stderr, err, sizeof err))
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
    assert_true(rt_trainer_init(&c, m, 8, 1, NULL, err, sizeof err));
    FILE *w = tmpfile();
    assert_true(rt_checkpoint_apply(&ck, &c, NULL, path, w, err, sizeof err));
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
    snprintf(path2, sizeof path2, "%s/mom-0001.ckpt", dir);
    rs.optimizer = RT_OPT_NAG;
    for (int i = 0; i < m->nparams; i++)
        if (c.state[i])
            c.state[i][0] = 1;
    assert_true(rt_checkpoint_save(path2, &c, &rs, err, sizeof err));
    assert_true(rt_checkpoint_read(path2, &ck, err, sizeof err));
    w = tmpfile();
    assert_true(rt_checkpoint_apply(&ck, &b, NULL, path2, w, err, sizeof err));
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

/* ---- forged checkpoints: valid checksums, fields out of range --------------------- */

/* Offsets (in the file) of the run-state fields of a checkpoint of model
 * `model` with amp `amp` (docs/training.md, Format). */
typedef struct {
    size_t model, amp, seed, batch, epoch, bie, step, nupd, opt, mom, mode, scale, tracker,
        skipped, nonfinite, np, p0name, p0dtype, p0flags;
} Offs;

static Offs offsets(const unsigned char *b)
{
    Offs o;
    uint32_t n;
    o.model = 32;
    memcpy(&n, b + o.model, 4);
    o.amp = o.model + 4 + n;
    memcpy(&n, b + o.amp, 4);
    o.seed = o.amp + 4 + n;
    o.batch = o.seed + 8;
    o.epoch = o.batch + 8;
    o.bie = o.epoch + 8;
    o.step = o.bie + 8;
    o.nupd = o.step + 8;
    o.opt = o.nupd + 8;
    o.mom = o.opt + 4;
    o.mode = o.mom + 4;
    o.scale = o.mode + 4;
    o.tracker = o.scale + 4;
    o.skipped = o.tracker + 4;
    o.nonfinite = o.skipped + 8;
    o.np = o.nonfinite + 8;
    o.p0name = o.np + 4;
    memcpy(&n, b + o.p0name, 4);
    o.p0dtype = o.p0name + 4 + n;
    o.p0flags = o.p0dtype + 4;
    return o;
}

/* Both checksums again, as a forger would (little-endian host). */
static void reseal(unsigned char *b, size_t len)
{
    uint32_t c = (uint32_t)crc32(crc32(0L, Z_NULL, 0), b + 32, (uInt)(len - 32));
    memcpy(b + 24, &c, 4);
    c = (uint32_t)crc32(crc32(0L, Z_NULL, 0), b, 28);
    memcpy(b + 28, &c, 4);
}

static void put64(unsigned char *b, size_t at, int64_t v) { memcpy(b + at, &v, 8); }
static void put32(unsigned char *b, size_t at, uint32_t v) { memcpy(b + at, &v, 4); }
static void putf(unsigned char *b, size_t at, float v) { memcpy(b + at, &v, 4); }

/* A copy of good with one field changed and resealed must be refused with
 * a message naming the file and containing want. */
typedef void (*Forge)(unsigned char *b, const Offs *o);

static void expect_forged(const unsigned char *good, size_t len, Forge forge, const char *want)
{
    unsigned char *b = malloc(len);
    memcpy(b, good, len);
    Offs o = offsets(b);
    forge(b, &o);
    reseal(b, len);
    RtCheckpoint ck;
    char err[512];
    if (rt_checkpoint_parse(b, len, "forged.params", &ck, err, sizeof err)) {
        rt_checkpoint_free(&ck);
        fail_msg("forged field (%s) accepted", want);
    }
    if (!strstr(err, "checkpoint forged.params: ") || !strstr(err, want))
        fail_msg("expected '%s' in: %s", want, err);
    free(b);
}

static void f_epoch_max(unsigned char *b, const Offs *o) { put64(b, o->epoch, INT64_MAX); }
static void f_epoch_neg(unsigned char *b, const Offs *o) { put64(b, o->epoch, -1); }
static void f_batch0(unsigned char *b, const Offs *o) { put64(b, o->batch, 0); }
static void f_batch_huge(unsigned char *b, const Offs *o) { put64(b, o->batch, (int64_t)1 << 40); }
static void f_step_neg(unsigned char *b, const Offs *o) { put64(b, o->step, -5); }
static void f_step_max(unsigned char *b, const Offs *o) { put64(b, o->step, INT64_MAX); }
static void f_bie(unsigned char *b, const Offs *o) { put64(b, o->bie, 156); }
static void f_nupd(unsigned char *b, const Offs *o) { put64(b, o->nupd, 156); }
static void f_nupd_neg(unsigned char *b, const Offs *o) { put64(b, o->nupd, -1); }
static void f_opt(unsigned char *b, const Offs *o) { put32(b, o->opt, 7); }
static void f_opt_adam(unsigned char *b, const Offs *o) { put32(b, o->opt, RT_OPT_ADAM); }
static void f_mom_nan(unsigned char *b, const Offs *o) { putf(b, o->mom, NAN); }
static void f_mom_2(unsigned char *b, const Offs *o) { putf(b, o->mom, 2); }
static void f_mom_0(unsigned char *b, const Offs *o) { putf(b, o->mom, 0); }
static void f_mode0(unsigned char *b, const Offs *o) { put32(b, o->mode, 0); }
static void f_mode4(unsigned char *b, const Offs *o) { put32(b, o->mode, 4); }
static void f_scale_inf(unsigned char *b, const Offs *o) { putf(b, o->scale, INFINITY); }
static void f_scale_nan(unsigned char *b, const Offs *o) { putf(b, o->scale, NAN); }
static void f_scale_0(unsigned char *b, const Offs *o) { putf(b, o->scale, 0); }
static void f_scale_neg(unsigned char *b, const Offs *o) { putf(b, o->scale, -1); }
static void f_scale_tiny(unsigned char *b, const Offs *o) { putf(b, o->scale, 1e-40f); }
static void f_off_scale(unsigned char *b, const Offs *o)
{
    put32(b, o->mode, RT_LS_OFF);
    putf(b, o->scale, 2);
    put32(b, o->tracker, 0);
}
static void f_static_tracker(unsigned char *b, const Offs *o)
{
    put32(b, o->mode, RT_LS_STATIC);
}
static void f_tracker_max(unsigned char *b, const Offs *o) { put32(b, o->tracker, INT32_MAX); }
static void f_tracker_neg(unsigned char *b, const Offs *o) { put32(b, o->tracker, 0xffffffffu); }
static void f_skipped(unsigned char *b, const Offs *o) { put64(b, o->skipped, 7); }
static void f_skipped_neg(unsigned char *b, const Offs *o) { put64(b, o->skipped, -1); }
static void f_nonfinite(unsigned char *b, const Offs *o) { put64(b, o->nonfinite, 150); }
static void f_amp(unsigned char *b, const Offs *o) { memcpy(b + o->amp + 4, "float64", 7); }
static void f_dtype(unsigned char *b, const Offs *o) { put32(b, o->p0dtype, 9); }
static void f_flags(unsigned char *b, const Offs *o) { put32(b, o->p0flags, 16 | 7); }
static void f_flags_state_only(unsigned char *b, const Offs *o) { put32(b, o->p0flags, 4 | 1); }

/* Every field of the run state and of a parameter's head is range-checked
 * on load, with a message naming the file and the field (a forger can
 * always make the checksums match). */
static void test_forged_fields(void **state)
{
    (void)state;
    RtTrainer a;
    char err[512], path[400];
    trainer(&a, &tiny_model_f16, 21);
    RtRunState rs = run_state(); /* step 155, update 149, 6 skipped, NAG 0.9, dynamic 8192 */
    snprintf(path, sizeof path, "%s/forge.params", dir);
    assert_true(rt_checkpoint_save(path, &a, &rs, err, sizeof err));
    size_t len;
    unsigned char *good = slurp_file(path, &len);
    /* resealing an unchanged file keeps it good */
    unsigned char *same = malloc(len);
    memcpy(same, good, len);
    reseal(same, len);
    assert_memory_equal(same, good, len);
    free(same);
    static const struct {
        Forge f;
        const char *want;
    } cases[] = {
        {f_epoch_max, "epoch is 9223372036854775807, not in 0..2147483647"},
        {f_epoch_neg, "epoch is -1"},
        {f_batch0, "batch size is 0, not in 1..2147483647"},
        {f_batch_huge, "batch size is 1099511627776"},
        {f_step_neg, "step is -5"},
        {f_step_max, "step is 9223372036854775807, not in 0..9007199254740992"},
        {f_bie, "batch in epoch is 156, not in 0..155 (the step count)"},
        {f_nupd, "update count is 156, not in 0..155"},
        {f_nupd_neg, "update count is -1"},
        {f_opt, "optimizer is 7, not 0 (sgd), 1 (nag) or 2 (adam)"},
        {f_opt_adam, "a momentum (one state), not Adam's mean and var, but the run state's "
                     "optimizer is adam"},
        {f_mom_nan, "momentum is nan, not in [0, 1]"},
        {f_mom_2, "momentum is 2, not in [0, 1]"},
        {f_mom_0, "a momentum, but the run state's momentum is 0"},
        {f_mode0, "loss-scale mode is 0, not 1 (off), 2 (static) or 3 (dynamic)"},
        {f_mode4, "loss-scale mode is 4"},
        {f_scale_inf, "loss scale is inf, not a positive finite number"},
        {f_scale_nan, "loss scale is nan, not a positive finite number"},
        {f_scale_0, "loss scale is 0, not a positive finite number"},
        {f_scale_neg, "loss scale is -1, not a positive finite number"},
        {f_scale_tiny, "not a positive finite number of at least 2^-126"},
        {f_off_scale, "loss scale is 2; with loss scaling off it is 1"},
        {f_static_tracker, "clean-step count is 42; a static scale has none (0)"},
        {f_tracker_max, "clean-step count is 2147483647, not in 0..2147483646"},
        {f_tracker_neg, "clean-step count is -1"},
        {f_skipped, "skipped steps is 7, not in 0..6 (steps without an update)"},
        {f_skipped_neg, "skipped steps is -1"},
        {f_nonfinite, "non-finite steps is 150, not in 0..149 (the update count)"},
        {f_amp, "amp is 'float64', not off, float16 or bfloat16"},
        {f_dtype, "parameter 0 (fc1_weight): dtype 9 is not 0 (float32), 1 (float16) or 2"},
        {f_flags, "parameter 0 (fc1_weight): flags 23 are not a valid set"},
        {f_flags_state_only, "optimizer state for a parameter that is not trainable"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        expect_forged(good, len, cases[k].f, cases[k].want);
    /* the message of the file reader names the path */
    unsigned char *b = malloc(len);
    memcpy(b, good, len);
    Offs o = offsets(b);
    f_epoch_max(b, &o);
    reseal(b, len);
    char fpath[420];
    snprintf(fpath, sizeof fpath, "%s/forged-epoch.params", dir);
    FILE *f = fopen(fpath, "wb");
    assert_int_equal(fwrite(b, 1, len, f), len);
    fclose(f);
    RtCheckpoint ck;
    assert_false(rt_checkpoint_read(fpath, &ck, err, sizeof err));
    assert_non_null(strstr(err, fpath));
    assert_non_null(strstr(err, "run state out of range: epoch is 9223372036854775807"));
    free(b);
    /* another model's name with an identical table: parse accepts, apply refuses */
    b = malloc(len);
    memcpy(b, good, len);
    o = offsets(b);
    memcpy(b + o.model + 4, "tiny_mlp_x16", 12); /* as long as tiny_mlp_f16 */
    reseal(b, len);
    assert_true(rt_checkpoint_parse(b, len, "renamed.params", &ck, err, sizeof err));
    RtTrainer c;
    trainer(&c, &tiny_model_f16, 22);
    assert_false(rt_checkpoint_apply(&ck, &c, NULL, "renamed.params", NULL, err, sizeof err));
    assert_non_null(strstr(err, "checkpoint renamed.params does not match model tiny_mlp_f16: "
                                "it was written by model tiny_mlp_x16"));
    rt_checkpoint_free(&ck);
    rt_trainer_free(&c);
    free(b);
    free(good);
    rt_trainer_free(&a);
}

/* A FIFO or a device as the checkpoint is refused at once, without
 * blocking (a FIFO without a writer would block the open forever). */
static void test_non_regular_input(void **state)
{
    (void)state;
    char fifo[420], err[512];
    snprintf(fifo, sizeof fifo, "%s/fifo.params", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    RtCheckpoint ck;
    alarm(10); /* a hang fails the test instead of stalling it */
    assert_false(rt_checkpoint_read(fifo, &ck, err, sizeof err));
    alarm(0);
    assert_non_null(strstr(err, fifo));
    assert_non_null(strstr(err, "not a regular file (a FIFO)"));
    unlink(fifo);
    assert_false(rt_checkpoint_read("/dev/zero", &ck, err, sizeof err));
    assert_non_null(strstr(err, "checkpoint /dev/zero: not a regular file (a character device)"));
}

/* A FIFO in --save-dir named like an old-style checkpoint (.params) is not
 * one and is never opened for reading in a way that blocks: the directory
 * check answers at once and still finds the real checkpoint beside it. */
static void test_save_dir_fifo(void **state)
{
    (void)state;
    char sub[420], fifo[460], err[512];
    snprintf(sub, sizeof sub, "%s/savefifo", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    snprintf(fifo, sizeof fifo, "%s/other-0001.params", sub);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    alarm(10); /* a hang fails the test instead of stalling it */
    assert_true(rt_save_dir_check(sub, "tiny_mlp_f16", err, sizeof err));
    char ck[460];
    snprintf(ck, sizeof ck, "%s/tiny_mlp_f16-0001.ckpt", sub);
    FILE *f = fopen(ck, "wb");
    assert_non_null(f);
    fclose(f);
    assert_false(rt_save_dir_check(sub, "tiny_mlp_f16", err, sizeof err));
    alarm(0);
    assert_non_null(strstr(err, "holds 1 checkpoint of another run"));
    unlink(ck);
    unlink(fifo);
    rmdir(sub);
}

/* A checkpoint path that is a device is written directly, never renamed
 * over (as root a rename would replace the node): a node made with mknod in
 * the scratch folder, never the real /dev. */
static void test_device_target(void **state)
{
    (void)state;
    char node[420], err[512];
    snprintf(node, sizeof node, "%s/null.params", dir);
    if (mknod(node, S_IFCHR | 0666, makedev(1, 3)) != 0) {
        print_message("mknod failed (not root, or nodev): using a FIFO with a reader\n");
        assert_int_equal(mkfifo(node, 0600), 0);
    }
    struct stat st0, st1;
    assert_int_equal(stat(node, &st0), 0);
    pid_t pid = 0;
    if (S_ISFIFO(st0.st_mode)) {
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) { /* drain the FIFO */
            FILE *r = fopen(node, "rb");
            char buf[4096];
            while (r && fread(buf, 1, sizeof buf, r) > 0)
                ;
            _exit(0);
        }
    }
    RtTrainer a;
    trainer(&a, &ampc_model, 23);
    RtRunState rs = run_state();
    if (!rt_checkpoint_save(node, &a, &rs, err, sizeof err))
        fail_msg("%s", err);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    assert_int_equal(stat(node, &st1), 0);
    assert_int_equal(st1.st_ino, st0.st_ino); /* the same node, not a file renamed over it */
    assert_int_equal(st1.st_mode & S_IFMT, st0.st_mode & S_IFMT);
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp."))
            fail_msg("left behind: %s", e->d_name);
    closedir(d);
    unlink(node);
    /* a directory is refused */
    assert_false(rt_checkpoint_save(dir, &a, &rs, err, sizeof err));
    assert_non_null(strstr(err, "it is a directory"));
    rt_trainer_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_corruption),
        cmocka_unit_test(test_table_mismatch),
        cmocka_unit_test(test_atomic_replace),
        cmocka_unit_test(test_adam_state),
        cmocka_unit_test(test_forged_fields),
        cmocka_unit_test(test_non_regular_input),
        cmocka_unit_test(test_device_target),
        cmocka_unit_test(test_save_dir_fifo),
    };
    return cmocka_run_group_tests_name("train_ckpt", tests, setup, teardown);
}
