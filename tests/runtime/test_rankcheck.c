/* test_rankcheck.c - the ranks' start-up check (runtime/rankcheck.c;
 * docs/kvstore.md, "The start-up check"): the record holds every field the
 * check promises, and a difference in any one of them, alone, is found and
 * named with both values; records of another version still compare by
 * name; a record that is not ours is said to be so.  The 2-rank mpirun of
 * each field a flag can change is tests/e2e/mpi_check.sh; the NCCL engine's
 * exchange is test_nccl_fake.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/coll.h"
#include "rankcheck.h"
#include "checkpoint.h"
#include "data/data.h"

static const RtParam params[] = {
    {.name = "fc_weight",
     .kind = RT_PK_WEIGHT,
     .dtype = RT_F32,
     .rank = 2,
     .shape = {10, 64},
     .numel = 640,
     .wd_mult = 1,
     .lr_mult = 1,
     .buffer = 0,
     .grad = 2},
    {.name = "fc_bias",
     .kind = RT_PK_BIAS,
     .dtype = RT_F32,
     .rank = 1,
     .shape = {10},
     .numel = 10,
     .wd_mult = 0,
     .lr_mult = 1,
     .buffer = 1,
     .grad = 3},
};
static const int kv_start[] = {0, 2};
static const int kv_params[] = {1, 0};

static RtModel model(void)
{
    return (RtModel){.name = "tiny",
                     .nparams = 2,
                     .params = params,
                     .amp = "off",
                     .kv_nbuckets = 1,
                     .kv_bucket_start = kv_start,
                     .kv_bucket_params = kv_params,
                     .kv_place = RT_KV_DIST_SYNC,
                     .build_id = 0x1234,
                     .kv_wire = "float32"};
}

typedef struct {
    RtModel m;
    RtTrainOptions o;
    RtDataset ds;
    RtRankInfo in;
} Run;

static void run_init(Run *r)
{
    memset(r, 0, sizeof *r);
    r->m = model();
    rt_train_options_default(&r->o);
    r->ds = (RtDataset){
        .name = "digits", .sample_size = 64, .classes = 10, .ntrain = 1498, .image = {1, 8, 8}};
    r->in = (RtRankInfo){.m = &r->m,
                         .o = &r->o,
                         .ds = &r->ds,
                         .world = 2,
                         .batch = 16,
                         .global_batch = 32,
                         .steps_per_epoch = 46,
                         .seed = 42};
}

/* The records of two ranks, side by side as the exchange leaves them. */
static uint8_t *pair(const RtRankRecord *a, const RtRankRecord *b)
{
    uint8_t *all = calloc(2, RT_RANK_WIRE);
    assert_non_null(all);
    memcpy(all, a, sizeof *a);
    memcpy(all + RT_RANK_WIRE, b, sizeof *b);
    return all;
}

static const RtRankField *field(const RtRankRecord *r, const char *name)
{
    for (uint32_t i = 0; i < r->nfields; i++)
        if (strcmp(r->field[i].name, name) == 0)
            return &r->field[i];
    return NULL;
}

/* Every field the issue lists is in the record. */
static void test_record_holds_every_field(void **state)
{
    (void)state;
    static const char *const names[] = {"model",
                                        "parameters",
                                        "amp",
                                        "lr/wd multipliers",
                                        "kvstore buckets",
                                        "kv wire",
                                        "build id",
                                        "world size",
                                        "global batch",
                                        "batch per rank",
                                        "loss scale",
                                        "optimizer",
                                        "lr",
                                        "lr schedule",
                                        "momentum",
                                        "wd",
                                        "seed",
                                        "data source",
                                        "sample shape",
                                        "classes",
                                        "samples per epoch",
                                        "steps per epoch",
                                        "epochs",
                                        "max steps",
                                        "--mpi-bucket-mb",
                                        "resume step",
                                        "resume epoch",
                                        "resume loss scale",
                                        "resume parameters"};
    Run r;
    run_init(&r);
    RtRankRecord rec;
    rt_rank_record_make(&r.in, &rec);
    assert_int_equal(rec.magic, RT_RANK_MAGIC);
    assert_int_equal(rec.version, RT_RANK_VERSION);
    assert_int_equal(rec.size, sizeof rec);
    assert_true(sizeof rec <= RT_RANK_WIRE);
    assert_int_equal(rec.nfields, sizeof names / sizeof names[0]);
    assert_true(rec.nfields < RT_RANK_NFIELDS); /* room for a later field */
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!field(&rec, names[i]))
            fail_msg("the record has no field '%s'", names[i]);
    assert_string_equal(field(&rec, "loss scale")->value, "off");
    assert_string_equal(field(&rec, "lr")->value, "0.01");
    assert_non_null(strstr(field(&rec, "kvstore buckets")->value, "dist_sync, 1 buckets #"));
    assert_string_equal(field(&rec, "sample shape")->value, "1x8x8");
    assert_string_equal(field(&rec, "resume step")->value, "none (not resuming)");
}

/* Each field, changed alone on rank 1: found, named, both values given. */
static void test_each_field_alone(void **state)
{
    (void)state;
    Run r;
    run_init(&r);
    RtRankRecord a;
    rt_rank_record_make(&r.in, &a);
    uint8_t *same = pair(&a, &a);
    char msg[2048];
    assert_int_equal(rt_rank_records_differ(same, 2, msg, sizeof msg), -1);
    free(same);
    for (uint32_t i = 0; i < a.nfields; i++) {
        RtRankRecord b = a;
        snprintf(b.field[i].value, sizeof b.field[i].value, "changed");
        uint8_t *all = pair(&a, &b);
        msg[0] = 0;
        assert_int_equal(rt_rank_records_differ(all, 2, msg, sizeof msg), 1);
        char want[512];
        snprintf(want, sizeof want, "rank 1's %s is changed where rank 0's is %s", a.field[i].name,
                 a.field[i].value);
        if (!strstr(msg, want) || strstr(msg, "(also"))
            fail_msg("field '%s': the message '%s' lacks '%s' or names more", a.field[i].name, msg,
                     want);
        free(all);
    }
}

/* The record made from settings that differ in one thing names that thing
 * first: the model's amp, the world size, the batch per rank, the classes,
 * the resumed checkpoint. */
static void test_made_records_differ(void **state)
{
    (void)state;
    Run r0, r1;
    run_init(&r0);
    RtRankRecord a, b;
    rt_rank_record_make(&r0.in, &a);
    char msg[2048];
    /* case k changes one thing (below) */
    static const char *const want[] = {
        "amp is float16 where rank 0's is off", "world size is 3 where rank 0's is 2",
        "batch per rank is 8 where rank 0's is 16", "classes is 7 where rank 0's is 10",
        ("loss scale is dynamic(init=65536, growth=2, backoff=0.5, interval=2000, min=0, "
         "max=16777216) where rank 0's is off")};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        run_init(&r1);
        if (k == 0)
            r1.m.amp = "float16";
        if (k == 1)
            r1.in.world = 3;
        if (k == 2)
            r1.in.batch = 8;
        if (k == 3)
            r1.ds.classes = 7;
        if (k == 4)
            r1.o.loss_scale.mode = RT_LS_DYNAMIC;
        rt_rank_record_make(&r1.in, &b);
        uint8_t *all = pair(&a, &b);
        assert_int_equal(rt_rank_records_differ(all, 2, msg, sizeof msg), 1);
        if (!strstr(msg, want[k]))
            fail_msg("case %zu: '%s' lacks '%s'", k, msg, want[k]);
        free(all);
    }
    /* amp float16 with the loss scale unset: the effective mode is dynamic */
    run_init(&r1);
    r1.m.amp = "float16";
    rt_rank_record_make(&r1.in, &b);
    assert_non_null(strstr(field(&b, "loss scale")->value, "dynamic(init=65536"));
    /* resuming: a checkpoint's step, epoch, scale and tensors */
    float v[3] = {1, 2, 3}, w[3] = {1, 2, 4};
    RtCkptParam p = {.name = "fc_weight", .numel = 3, .values = v};
    RtCheckpoint ck = {.nparams = 1, .params = &p};
    ck.run.step = 46, ck.run.epoch = 1, ck.run.ls.s.scale = 1024;
    run_init(&r1);
    r1.in.ck = &ck;
    rt_rank_record_make(&r1.in, &a);
    p.values = w;
    rt_rank_record_make(&r1.in, &b);
    uint8_t *all = pair(&a, &b);
    assert_int_equal(rt_rank_records_differ(all, 2, msg, sizeof msg), 1);
    assert_non_null(strstr(msg, "rank 1's resume parameters is 1 tensors #"));
    free(all);
    assert_string_equal(field(&a, "resume step")->value, "46");
    assert_string_equal(field(&a, "resume loss scale")->value, "1024 (0 clean steps)");
}

/* Another version of the record: compared by name (a field only one side
 * has is a difference, the same fields agree); a record that is not ours;
 * the third of three ranks; a long value keeps its difference. */
static void test_versions_magic_and_ranks(void **state)
{
    (void)state;
    Run r;
    run_init(&r);
    RtRankRecord a, b;
    rt_rank_record_make(&r.in, &a);
    char msg[2048];
    /* the same fields, in another order and version: they agree */
    b = a;
    b.version = RT_RANK_VERSION + 1;
    RtRankField t = b.field[0];
    b.field[0] = b.field[3];
    b.field[3] = t;
    uint8_t *all = pair(&a, &b);
    assert_int_equal(rt_rank_records_differ(all, 2, msg, sizeof msg), -1);
    free(all);
    /* a later version with one more field */
    b = a;
    rt_rank_field(&b, "new thing", "on");
    all = pair(&a, &b);
    assert_int_equal(rt_rank_records_differ(all, 2, msg, sizeof msg), 1);
    assert_non_null(strstr(msg, "rank 1's new thing is on where rank 0's is (no such field)"));
    free(all);
    /* an earlier one without a field */
    b = a;
    b.nfields--;
    all = pair(&a, &b);
    assert_int_equal(rt_rank_records_differ(all, 2, msg, sizeof msg), 1);
    assert_non_null(strstr(msg, "is (no such field) where rank 0's is"));
    free(all);
    /* not ours */
    b = a;
    b.magic = 0xdeadbeef;
    all = pair(&a, &b);
    assert_int_equal(rt_rank_records_differ(all, 2, msg, sizeof msg), 1);
    assert_non_null(strstr(msg, "rank 1's start-up record is not an ampc runtime's (magic "
                                "0xdeadbeef"));
    free(all);
    /* three ranks, the third differs */
    uint8_t *three = calloc(3, RT_RANK_WIRE);
    b = a;
    snprintf(b.field[1].value, sizeof b.field[1].value, "other");
    memcpy(three, &a, sizeof a);
    memcpy(three + RT_RANK_WIRE, &a, sizeof a);
    memcpy(three + 2 * RT_RANK_WIRE, &b, sizeof b);
    assert_int_equal(rt_rank_records_differ(three, 3, msg, sizeof msg), 2);
    assert_non_null(strstr(msg, "rank 2's parameters is other"));
    free(three);
    /* values longer than the room: still different */
    char l1[300], l2[300];
    memset(l1, 'x', sizeof l1 - 1);
    l1[sizeof l1 - 1] = 0;
    memcpy(l2, l1, sizeof l2);
    l2[sizeof l2 - 2] = 'y';
    rt_rank_record_init(&a);
    rt_rank_record_init(&b);
    rt_rank_field(&a, "model", "%s", l1);
    rt_rank_field(&b, "model", "%s", l2);
    assert_true(strlen(a.field[0].value) < RT_RANK_VALUE);
    all = pair(&a, &b);
    assert_int_equal(rt_rank_records_differ(all, 2, msg, sizeof msg), 1);
    free(all);
}

static bool gather_fails(void *self, const void *mine, void *all, size_t bytes, char *err,
                         size_t errlen)
{
    (void)self, (void)mine, (void)all, (void)bytes;
    snprintf(err, errlen, "the exchange broke");
    return false;
}

/* A gather of a 2-rank world whose rank 1 sends a changed record. */
static bool gather_two(void *self, const void *mine, void *all, size_t bytes, char *err,
                       size_t errlen)
{
    (void)err, (void)errlen;
    memcpy(all, mine, bytes);
    memcpy((char *)all + bytes, self, sizeof(RtRankRecord));
    return true;
}

static void test_check(void **state)
{
    (void)state;
    Run r;
    run_init(&r);
    RtRankRecord a, b;
    rt_rank_record_make(&r.in, &a);
    char msg[2048];
    assert_int_equal(rt_rank_check(&a, 1, gather_fails, NULL, msg, sizeof msg), 0);
    assert_int_equal(rt_rank_check(&a, 2, gather_fails, NULL, msg, sizeof msg), -1);
    assert_string_equal(msg, "the exchange broke");
    b = a;
    assert_int_equal(rt_rank_check(&a, 2, gather_two, &b, msg, sizeof msg), 0);
    r.o.epochs = 3;
    rt_rank_record_make(&r.in, &b);
    assert_int_equal(rt_rank_check(&a, 2, gather_two, &b, msg, sizeof msg), 1);
    assert_string_equal(msg, "the ranks do not run the same training: rank 1's epochs is 3 where "
                             "rank 0's is 1; every rank must run the same program with the same "
                             "settings (docs/kvstore.md, \"The start-up check\")");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_holds_every_field),
        cmocka_unit_test(test_each_field_alone),
        cmocka_unit_test(test_made_records_differ),
        cmocka_unit_test(test_versions_magic_and_ranks),
        cmocka_unit_test(test_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
