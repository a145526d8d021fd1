/* test_cuda_tune.c - bounded autotune and the plan cache file
 * (runtime/cuda/tune.c) with a fake engine list: at most K candidates
 * timed, in the heuristic's order, runtime-compiled engines skipped unless
 * asked, refused ones counted, the fastest kept and every other built plan
 * dropped; a second start with the cache file times no candidate; a plan
 * chosen under another engine filter, device or cuDNN is not taken; the
 * file: not ours refused and left alone, damaged or stale ignored and
 * rewritten, truncations and every single-byte corruption caught by the
 * checksum or the header, eight processes saving at once lose nothing; a
 * variant pack built once per call site. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda/plan.c"
#include "cuda/tune.c"

/* ---- the fake engines ---------------------------------------------------------------- */

enum { NCAND = 10 };
typedef struct {
    AmpcCandidate c[NCAND];
    float ms[NCAND];   /* what timing one says */
    size_t ws[NCAND];  /* its workspace */
    bool fails[NCAND]; /* does not build */
    bool built[NCAND]; /* built and not dropped */
    int builds, times, drops;
} Fake;

static bool fake_build(void *ctx, int i, size_t *ws)
{
    Fake *f = ctx;
    assert_false(f->built[i]);
    if (f->fails[i])
        return false;
    f->builds++, f->built[i] = true, *ws = f->ws[i];
    return true;
}

static float fake_time(void *ctx, int i)
{
    Fake *f = ctx;
    assert_true(f->built[i]);
    f->times++;
    return f->ms[i];
}

static void fake_drop(void *ctx, int i)
{
    Fake *f = ctx;
    assert_true(f->built[i]);
    f->built[i] = false, f->drops++;
}

static const AmpcTuneOps ops = {fake_build, fake_time, fake_drop};

static void fake_init(Fake *f)
{
    memset(f, 0, sizeof *f);
    for (int i = 0; i < NCAND; i++) {
        f->c[i] = (AmpcCandidate){100 + i, AMPC_NOTE_TENSOR_CORE, false};
        f->ms[i] = 10.0f - (float)i * 0.5f; /* later ones faster: the bound decides */
        f->ws[i] = 1024;
    }
}

static AmpcTunePolicy policy(bool autotune, int k)
{
    return (AmpcTunePolicy){{AMPC_FP32_EXACT, false}, autotune, k, false, 1 << 20};
}

/* exactly one plan stays built: the chosen one */
static void one_built(const Fake *f, int chosen)
{
    for (int i = 0; i < NCAND; i++)
        assert_int_equal(f->built[i], i == chosen);
}

static void test_bounded(void **state)
{
    (void)state;
    Fake f;
    fake_init(&f);
    f.c[1].runtime_compiled = true;             /* skipped */
    f.c[2].notes |= AMPC_NOTE_NONDETERMINISTIC; /* refused */
    f.ws[3] = (size_t)2 << 20;                  /* over the limit */
    f.fails[4] = true;                          /* does not build */
    AmpcTunePolicy p = policy(true, 4);
    AmpcTuneResult r;
    ampc_tune_choose(f.c, NCAND, RT_F16, &p, &ops, &f, -1, 0, &r);
    /* timed: 0, 5, 6, 7 (the first four usable); 7 the fastest of them */
    assert_int_equal(r.timed, 4);
    assert_int_equal(f.times, 4);
    assert_int_equal(f.builds, 5); /* 0, 3 (too large), 5, 6, 7: none past the bound */
    assert_int_equal(r.chosen, 7);
    assert_int_equal(r.skipped_rtc, 1);
    assert_int_equal(r.refused, 1);
    assert_int_equal(r.refused_notes, AMPC_NOTE_NONDETERMINISTIC);
    assert_false(r.cached);
    one_built(&f, 7);
    /* K = 1: the first usable, timed once */
    fake_init(&f);
    p = policy(true, 1);
    ampc_tune_choose(f.c, NCAND, RT_F16, &p, &ops, &f, -1, 0, &r);
    assert_int_equal(r.timed, 1), assert_int_equal(r.chosen, 0);
    one_built(&f, 0);
    /* runtime-compiled engines when asked; without autotune the first that builds */
    fake_init(&f);
    f.c[0].runtime_compiled = true;
    p = policy(false, 4);
    ampc_tune_choose(f.c, NCAND, RT_F16, &p, &ops, &f, -1, 0, &r);
    assert_int_equal(r.chosen, 1), assert_int_equal(r.timed, 0);
    fake_init(&f);
    f.c[0].runtime_compiled = true;
    p.runtime_compiled = true;
    ampc_tune_choose(f.c, NCAND, RT_F16, &p, &ops, &f, -1, 0, &r);
    assert_int_equal(r.chosen, 0);
    /* a candidate whose run fails is not chosen; none usable: -1, nothing built */
    fake_init(&f);
    f.ms[0] = INFINITY;
    p = policy(true, 2);
    ampc_tune_choose(f.c, NCAND, RT_F16, &p, &ops, &f, -1, 0, &r);
    assert_int_equal(r.chosen, 1);
    one_built(&f, 1);
    fake_init(&f);
    for (int i = 0; i < NCAND; i++)
        f.fails[i] = true;
    ampc_tune_choose(f.c, NCAND, RT_F16, &p, &ops, &f, -1, 0, &r);
    assert_int_equal(r.chosen, -1);
    one_built(&f, -1);
}

/* ---- the cache file ------------------------------------------------------------------- */

static char dir[64];
static char *path_in(const char *name)
{
    static char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static AmpcTuneEnv env_of(int fp32)
{
    return (AmpcTuneEnv){9,
                         0,
                         132,
                         91900,
                         0,
                         fp32,
                         0,
                         0,
                         1 << 20,
                         256,
                         (int64_t)ampc_planfile_hash("ampc test", 9, AMPC_FNV_START)};
}

static AmpcPlanKey key_of(int64_t shape)
{
    AmpcPlanKey k;
    memset(&k, 0, sizeof k);
    for (int i = 0; i < AMPC_KEY_LEN; i++)
        k.v[i] = shape * 31 + i;
    return k;
}

/* One start: each of nconv convolutions chosen through the cache file; the
 * candidates timed in all. */
static int start(const char *file, int nconv, int fp32)
{
    char warn[512], err[512];
    AmpcPlanFile pf;
    assert_true(ampc_planfile_open(&pf, file, warn, sizeof warn, err, sizeof err));
    assert_string_equal(warn, "");
    AmpcTuneEnv env = env_of(fp32);
    int timed = 0;
    for (int s = 0; s < nconv; s++) {
        Fake f;
        fake_init(&f);
        AmpcPlanKey key = key_of(s);
        const AmpcTuneEntry *hit = ampc_planfile_find(&pf, &key, &env);
        AmpcTunePolicy p = policy(true, AMPC_TUNE_MAX_DEFAULT);
        AmpcTuneResult r;
        ampc_tune_choose(f.c, NCAND, RT_F16, &p, &ops, &f, hit ? (int)hit->candidate : -1,
                         hit ? hit->engine : 0, &r);
        assert_int_equal(r.chosen, 3); /* the fastest of the first four, or the cached one */
        assert_int_equal(r.cached, hit != NULL);
        timed += r.timed;
        AmpcTuneEntry e = {key, env, 0, r.chosen, f.c[r.chosen].engine};
        if (!hit)
            assert_true(ampc_planfile_add(&pf, &e));
    }
    assert_true(ampc_planfile_save(&pf, err, sizeof err));
    ampc_planfile_free(&pf);
    return timed;
}

static void test_second_start_times_nothing(void **state)
{
    (void)state;
    char *file = path_in("plans");
    assert_int_equal(start(file, 5, AMPC_FP32_EXACT), 5 * AMPC_TUNE_MAX_DEFAULT);
    assert_int_equal(start(file, 5, AMPC_FP32_EXACT), 0);
    /* a plan chosen under tf32 never serves exact, nor the reverse */
    assert_int_equal(start(file, 5, AMPC_FP32_TF32), 5 * AMPC_TUNE_MAX_DEFAULT);
    assert_int_equal(start(file, 6, AMPC_FP32_EXACT), AMPC_TUNE_MAX_DEFAULT);
    /* the cached candidate no longer carrying its engine (another list): timed again */
    char warn[512], err[512];
    AmpcPlanFile pf;
    assert_true(ampc_planfile_open(&pf, file, warn, sizeof warn, err, sizeof err));
    assert_int_equal(pf.n, 5 + 5 + 1);
    AmpcTuneEnv env = env_of(AMPC_FP32_EXACT);
    AmpcPlanKey key = key_of(0);
    const AmpcTuneEntry *hit = ampc_planfile_find(&pf, &key, &env);
    assert_non_null(hit);
    Fake f;
    fake_init(&f);
    f.c[hit->candidate].engine = 7;
    AmpcTunePolicy p = policy(true, 4);
    AmpcTuneResult r;
    ampc_tune_choose(f.c, NCAND, RT_F16, &p, &ops, &f, (int)hit->candidate, hit->engine, &r);
    assert_false(r.cached), assert_int_equal(r.timed, 4);
    ampc_planfile_free(&pf);
    unlink(file);
}

static void write_bytes(const char *file, const void *b, size_t n)
{
    FILE *fp = fopen(file, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(b, 1, n, fp), n);
    fclose(fp);
}

static void test_untrusted_file(void **state)
{
    (void)state;
    char warn[512], err[512];
    AmpcPlanFile pf;
    /* not ours: refused, and never overwritten */
    char *file = path_in("notours");
    write_bytes(file, "hello, world\n", 13);
    assert_false(ampc_planfile_open(&pf, file, warn, sizeof warn, err, sizeof err));
    assert_non_null(strstr(err, "not an ampc plan cache file"));
    /* a valid file; each single byte changed, and each truncation, is caught */
    AmpcPlanFile mem = {0};
    for (int s = 0; s < 3; s++) {
        AmpcTuneEntry e = {key_of(s), env_of(0), s & 1, s, 100 + s};
        assert_true(ampc_planfile_add(&mem, &e));
    }
    size_t size;
    uint8_t *b = ampc_planfile_serialize(&mem, &size);
    assert_non_null(b);
    bool ours;
    AmpcPlanFile back = {0};
    assert_true(ampc_planfile_parse(&back, b, size, "x", &ours, err, sizeof err));
    assert_int_equal(back.n, 3);
    assert_memory_equal(back.e, mem.e, 3 * sizeof *mem.e);
    ampc_planfile_free(&back);
    for (size_t i = 0; i < size; i++) {
        b[i] ^= 0x10;
        assert_false(ampc_planfile_parse(&back, b, size, "x", &ours, err, sizeof err));
        assert_int_equal(ours, i >= 8);
        b[i] ^= 0x10;
    }
    for (size_t k = 0; k < size; k++)
        assert_false(ampc_planfile_parse(&back, b, k, "x", &ours, err, sizeof err));
    ampc_planfile_free(&back);
    /* a damaged file of ours: a warning, no entries, rewritten whole on save */
    file = path_in("damaged");
    b[size - 1] ^= 1;
    write_bytes(file, b, size);
    assert_true(ampc_planfile_open(&pf, file, warn, sizeof warn, err, sizeof err));
    assert_non_null(strstr(warn, "checksum mismatch"));
    assert_int_equal(pf.n, 0);
    AmpcTuneEntry e = {key_of(9), env_of(0), 0, 1, 101};
    assert_true(ampc_planfile_add(&pf, &e));
    assert_true(ampc_planfile_save(&pf, err, sizeof err));
    ampc_planfile_free(&pf);
    assert_true(ampc_planfile_open(&pf, file, warn, sizeof warn, err, sizeof err));
    assert_string_equal(warn, "");
    assert_int_equal(pf.n, 1);
    ampc_planfile_free(&pf);
    /* another format version: stale, a warning naming it */
    b[size - 1] ^= 1;
    b[8] = 2;
    write_bytes(file, b, size);
    assert_true(ampc_planfile_open(&pf, file, warn, sizeof warn, err, sizeof err));
    assert_non_null(strstr(warn, "format version 2"));
    ampc_planfile_free(&pf);
    /* a directory is not a file */
    assert_false(ampc_planfile_open(&pf, dir, warn, sizeof warn, err, sizeof err));
    assert_non_null(strstr(err, "not a regular file"));
    free(b);
    ampc_planfile_free(&mem);
}

/* eight ranks starting at once, each learning its own plans and one shared */
static void test_eight_ranks(void **state)
{
    (void)state;
    char *file = path_in("ranks");
    enum { RANKS = 8, EACH = 10 };
    pid_t pid[RANKS];
    for (int r = 0; r < RANKS; r++) {
        if ((pid[r] = fork()) == 0) {
            char warn[512], err[512];
            AmpcPlanFile pf;
            if (!ampc_planfile_open(&pf, file, warn, sizeof warn, err, sizeof err) || warn[0])
                _exit(2);
            for (int s = 0; s < EACH; s++) {
                AmpcTuneEntry e = {key_of(r == 0 && s == 0 ? 999 : 1000 + r * EACH + s), env_of(0),
                                   0, s, 100 + s};
                if (!ampc_planfile_add(&pf, &e) || !ampc_planfile_save(&pf, err, sizeof err))
                    _exit(3);
            }
            AmpcTuneEntry shared = {key_of(999), env_of(0), 0, 0, 100};
            if (!ampc_planfile_add(&pf, &shared) || !ampc_planfile_save(&pf, err, sizeof err))
                _exit(4);
            ampc_planfile_free(&pf);
            _exit(0);
        }
        assert_true(pid[r] > 0);
    }
    for (int r = 0; r < RANKS; r++) {
        int st;
        assert_int_equal(waitpid(pid[r], &st, 0), pid[r]);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    char warn[512], err[512];
    AmpcPlanFile pf;
    assert_true(ampc_planfile_open(&pf, file, warn, sizeof warn, err, sizeof err));
    assert_string_equal(warn, "");
    assert_int_equal(pf.n, RANKS * EACH); /* rank 0's first is the shared one */
    ampc_planfile_free(&pf);
}

/* a variant pack per call site: a step's calls of one plan at three sites
 * (three blocks' buffers, one with statistics) build three, then find them */
static int packs_built;
static void *build_pack(const void *const site[AMPC_SITE_PTRS])
{
    packs_built++;
    return (void *)((uintptr_t)site[0] + 1);
}

static void test_site_table(void **state)
{
    (void)state;
    AmpcSiteTable t = {0};
    char arena[64];
    for (int step = 0; step < 50; step++)
        for (int s = 0; s < 3; s++) {
            const void *site[AMPC_SITE_PTRS] = {arena + s, arena + 10 + s, arena + 20, arena + 30,
                                                s == 2 ? arena + 40 : NULL};
            void *vp = ampc_site_get(&t, site);
            if (!vp) {
                vp = build_pack(site);
                assert_true(ampc_site_put(&t, site, vp));
            }
            assert_ptr_equal(vp, (void *)((uintptr_t)site[0] + 1));
        }
    assert_int_equal(packs_built, 3);
    assert_int_equal(t.n, 3);
    const void *other[AMPC_SITE_PTRS] = {arena, arena + 10, arena + 20,
                                         arena + 31}; /* another ws */
    assert_null(ampc_site_get(&t, other));
    const void *stats[AMPC_SITE_PTRS] = {arena + 2, arena + 12, arena + 20, arena + 30, arena + 41};
    assert_null(ampc_site_get(&t, stats)); /* another statistics buffer */
    ampc_site_free(&t, NULL, NULL);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ampc-tune.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    static const char *const names[] = {"plans",        "plans.lock", "notours",   "damaged",
                                        "damaged.lock", "ranks",      "ranks.lock"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unlink(path_in(names[i]));
    return rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bounded),        cmocka_unit_test(test_second_start_times_nothing),
        cmocka_unit_test(test_untrusted_file), cmocka_unit_test(test_eight_ranks),
        cmocka_unit_test(test_site_table),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
