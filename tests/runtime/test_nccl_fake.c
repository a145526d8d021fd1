/*
 * test_nccl_fake.c - the NCCL engine's host logic (runtime/dist/nccl_engine.c)
 * against the in-process fake transport (runtime/dist/nccl_fake.c: threads
 * as ranks, sums in rank order), around the CPU device:
 *   - bootstrap: only rank 0 makes the unique id, the fake MPI bcast hands
 *     it to every rank before any comm init, every rank inits with it; a
 *     failure on rank 0 is reported on every rank, none waits;
 *   - several GPUs in one process: comm_init_all, one comm per device;
 *   - buckets: the size rule cuts them in completion order as grad_ready
 *     fires, the program's buckets launch in bucket order, every gradient
 *     in exactly one bucket, the last one flushed before the update (also
 *     when the trainer's all-reduce is not called);
 *   - the order of reductions and updates: the fake's log shows every
 *     all-reduce of a step, and the compute stream's wait for them, before
 *     that step's update; each bucket's launch after the comm stream's wait
 *     for the compute stream;
 *   - the results: both ranks end bit-identical, and equal to one CPU device
 *     trained on the sequential sum of the ranks' gradients; three ranks sum
 *     in rank order, rounding 16-bit partial sums;
 *   - the finite flag is reduced (max): an inf on one rank skips the update
 *     on every rank;
 *   - a failing NCCL call is an error naming the call, file:line and NCCL's
 *     string; a real transport without the device's compute stream is refused;
 *   - the deadline: a rank whose all-reduce never completes (its peer
 *     stalled) aborts the comm and ends the job within the deadline, with a
 *     message naming itself, the step and what it waited for; an
 *     asynchronous error of the comm does the same at once;
 *   - the start-up check (runtime/rankcheck.c) through the engine: equal
 *     records pass and the ranks train; records differing in one field stop
 *     both ranks before any step with the same message naming rank 1, the
 *     field and both values; a rank that never arrives ends the job at the
 *     deadline, naming the check.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "device.h"
#include "dist/coll.h"
#include "dist/fwd.h"
#include "nccl_fake.h"
#include "rankcheck.h"
#include "rt.h"
#include "train.h"

/* ---- a model of five gradients: fp32, fp16 and bf16 ------------------------------ */

enum { NP = 5, NB = 2 * NP };
static const int sizes[NP] = {37, 64, 19, 100, 8};
/* designated: the tables gain trailing fields (RtParam.layout) */
#define PARAM(nm, dt, mp, n, b)                                                              \
    {.name = nm, .kind = RT_PK_WEIGHT, .dtype = dt, .has_master = mp, .rank = 1, .shape = {n}, \
     .numel = n, .init = "default", .wd_mult = 1, .lr_mult = 1, .buffer = b, .grad = NP + b}
static const RtParam params[NP] = {
    PARAM("p0_weight", RT_F32, false, 37, 0), PARAM("p1_weight", RT_F16, true, 64, 1),
    PARAM("p2_weight", RT_BF16, true, 19, 2), PARAM("p3_weight", RT_F32, false, 100, 3),
    PARAM("p4_weight", RT_F16, true, 8, 4),
};
#define BUF(nm, dt, n) {.name = nm, .dtype = dt, .fixed = n}
static const RtBuffer buffers[NB] = {
    BUF("p0", RT_F32, 37),  BUF("p1", RT_F16, 64),  BUF("p2", RT_BF16, 19), BUF("p3", RT_F32, 100),
    BUF("p4", RT_F16, 8),   BUF("g0", RT_F32, 37),  BUF("g1", RT_F16, 64),  BUF("g2", RT_BF16, 19),
    BUF("g3", RT_F32, 100), BUF("g4", RT_F16, 8),
};
static const RtModel model = {
    .name = "nccl_test", .nparams = NP, .params = params, .nbuffers = NB, .buffers = buffers,
    .data = -1, .label = -1, .prob_train = -1, .prob_infer = -1,
};
/* the kvstore pass's buckets: {p4, p3}, then {p2, p1, p0} */
static const int kv_start[] = {0, 2, 5};
static const int kv_params[] = {4, 3, 2, 1, 0};
static const RtModel model_kv = {
    .name = "nccl_test_kv", .nparams = NP, .params = params, .nbuffers = NB,
    .buffers = buffers, .data = -1, .label = -1, .prob_train = -1, .prob_infer = -1,
    .kv_nbuckets = 2, .kv_bucket_start = kv_start, .kv_bucket_params = kv_params,
};

static RtDType gdt(int k) { return buffers[params[k].grad].dtype; }

/* rank r's gradient element i of parameter k at step s (exact in every dtype
 * before rounding, so that the sums round) */
static float grad_value(int r, int s, int k, int i)
{
    return (float)((i * 7 + k * 3 + r * 5 + s) % 17 - 8) * 0.0137f * (float)(r + 1) +
           (float)r * 1e-3f;
}

/* ---- a recorder: logs the inner device's update into the fake's log --------------- */

typedef struct {
    RtFwd f;
    RtDeviceOps ops;
    RtCollFake *fake;
    int rank;
} Rec;

static void rec_update(RtDevice *d, float *const *s, float *const *s2, const RtOptConfig *oc)
{
    Rec *r = (Rec *)d;
    rt_coll_fake_log(r->fake, "r%d update", r->rank);
    fwd_train_update(d, s, s2, oc);
}

static void rec_close(RtDevice *d)
{
    RtDevice *in = fwd_in(d);
    free(d);
    rt_device_close(in);
}

static RtDevice *recorder(RtCollFake *fake, int rank)
{
    char err[256];
    Rec *r = calloc(1, sizeof *r);
    RtDevice *cpu = rt_device_cpu_open(err, sizeof err);
    if (!r || !cpu)
        return NULL;
    r->ops = rt_fwd_ops("rec", cpu, rec_close);
    r->ops.train_update = rec_update;
    r->f.base.ops = &r->ops;
    r->f.in = cpu;
    r->fake = fake;
    r->rank = rank;
    return &r->f.base;
}

/* ---- one rank's training ------------------------------------------------------------ */

typedef struct {
    RtCollFake *fake;
    int rank, world;
    const RtModel *m;
    RtCollComm *comm;   /* given (init_all), or made by the bootstrap */
    bool bootstrap;
    double bucket_mb;
    int steps;
    const int *announce; /* the order backward completes the gradients */
    bool call_allreduce; /* the trainer's all-reduce after the step */
    bool dynamic;
    int poison_rank;     /* an inf planted after the reduction, on this rank (-1: none) */
    double timeout_s;    /* RtNcclConfig.timeout_s (0: the default) */
    int stall_at;        /* from this step on, this rank's collectives never complete (-1) */
    int stall_grad;      /* ... from the announcement of this gradient of that step on */
    const RtRankRecord *check; /* the start-up check with this record before any step */
    bool stall_check;    /* its peer stalled at the check: never completes */
    int check_rc;        /* rt_rank_check's verdict */
    char check_msg[2048];
    /* results */
    bool ok;
    char err[512];
    RtDevice *dev;       /* kept open for the checks (closed by the test) */
    void *buf[NB];
    float *master[NP], *state[NP];
    RtCtx ctx;
} Rank;

static const int backward_order[NP] = {4, 3, 2, 1, 0};

static bool rank_alloc(RtDevice *d, Rank *k)
{
    for (int b = 0; b < NB; b++)
        if (!(k->buf[b] = rt_dev_alloc(d, (size_t)buffers[b].fixed * rt_dtype_size(buffers[b].dtype),
                                       buffers[b].name, k->err, sizeof k->err)))
            return false;
    for (int i = 0; i < NP; i++) {
        size_t n = (size_t)sizes[i] * sizeof(float);
        if (!(k->state[i] = rt_dev_alloc(d, n, "state", k->err, sizeof k->err)) ||
            (params[i].has_master &&
             !(k->master[i] = rt_dev_alloc(d, n, "master", k->err, sizeof k->err))))
            return false;
        /* the same initial weights on every rank */
        float w[128];
        for (int j = 0; j < sizes[i]; j++)
            w[j] = 0.5f - 0.01f * (float)(j + i);
        if (params[i].has_master)
            rt_dev_to_device(d, k->master[i], w, n);
        char tmp[512];
        rt_from_f32(tmp, w, (size_t)sizes[i], params[i].dtype);
        rt_dev_to_device(d, k->buf[i], tmp, (size_t)sizes[i] * rt_dtype_size(params[i].dtype));
    }
    k->ctx.buf = k->buf;
    k->ctx.master = k->master;
    k->ctx.batch = 1;
    return true;
}

static RtOptConfig opt_config(void)
{
    return (RtOptConfig){.kind = RT_OPT_SGD, .lr = 0.1f, .momentum = 0.9f, .wd = 1e-4f,
                         .rescale_grad = 1, .clip_gradient = -1};
}

static bool loop_init(RtDevice *d, Rank *k)
{
    RtDevLsInit li = {.dynamic = k->dynamic, .s = {k->dynamic ? 4.0f : 1.0f, 0},
                      .rule = ampc_loss_scale_rule_default(), .batch = 2, .num_update = 0};
    if (!rt_dev_ls_init(d, &li, k->err, sizeof k->err))
        return false;
    float lr[RT_DEV_LS_RING + 1];
    for (int i = 0; i <= RT_DEV_LS_RING; i++)
        lr[i] = 0.1f / (float)(1 + i);
    RtOptConfig oc = opt_config();
    rt_dev_lr_ahead(d, &oc, lr, 0, RT_DEV_LS_RING + 1);
    return true;
}

/* The step after backward, as train.c: reduce, check, BatchNorm, update. */
static bool after_backward(RtDevice *d, Rank *k, RtDevTensor *grads)
{
    if (k->call_allreduce && !rt_dev_allreduce(d, grads, NP, RT_REDUCE_SUM, k->err, sizeof k->err))
        return false;
    if (k->rank == k->poison_rank) { /* after the sum: only this rank's check sees it */
        float inf = INFINITY;
        rt_dev_to_device(d, k->buf[NP + 3], &inf, sizeof inf);
    }
    if (k->dynamic)
        rt_dev_check_grads(d);
    rt_dev_moving_update(d, NULL, &k->ctx);
    RtOptConfig oc = opt_config();
    rt_dev_train_update(d, k->state, NULL, &oc);
    rt_dev_ls_update(d);
    return true;
}

static void *rank_main(void *arg)
{
    Rank *k = arg;
    const RtCollOps *t = rt_coll_fake_ops(k->fake);
    if (k->bootstrap) {
        RtCollBoot boot = rt_coll_fake_boot(k->fake, k->rank);
        if (!rt_nccl_bootstrap(t, &boot, &k->comm, k->err, sizeof k->err))
            return NULL;
    }
    RtDevice *inner = recorder(k->fake, k->rank);
    RtNcclConfig cfg = {.compute_stream = NULL, .device = k->rank, .bucket_mb = k->bucket_mb,
                        .timeout_s = k->timeout_s};
    RtDevice *d = inner ? rt_nccl_wrap(inner, t, k->comm, k->rank, k->world, &cfg, k->err,
                                       sizeof k->err)
                        : NULL;
    if (!d) {
        rt_device_close(inner);
        return NULL;
    }
    k->dev = d;
    if (!rank_alloc(d, k) || !rt_dev_setup(d, k->m, &k->ctx, k->err, sizeof k->err) ||
        !loop_init(d, k))
        return NULL;
    if (!k->ctx.grad_ready) {
        snprintf(k->err, sizeof k->err, "setup did not install the grad_ready hook");
        return NULL;
    }
    if (k->stall_check)
        rt_coll_fake_stall(k->fake, k->rank);
    if (k->check && (k->check_rc = rt_rank_check(k->check, k->world, rt_nccl_allgather, d,
                                                 k->check_msg, sizeof k->check_msg)) != 0)
        return NULL; /* the ranks stop here, before any step */
    RtDevTensor grads[NP];
    for (int i = 0; i < NP; i++)
        grads[i] = (RtDevTensor){k->buf[NP + i], (size_t)sizes[i], gdt(i)};
    for (int s = 0; s < k->steps; s++) {
        rt_dev_step_begin(d, false);
        /* backward: each gradient written, then announced */
        for (int j = 0; j < NP; j++) {
            int p = k->announce[j];
            if (s == k->stall_at && j == k->stall_grad)
                rt_coll_fake_stall(k->fake, k->rank);
            float v[128];
            char tmp[512];
            for (int i = 0; i < sizes[p]; i++)
                v[i] = grad_value(k->rank, s, p, i);
            rt_from_f32(tmp, v, (size_t)sizes[p], gdt(p));
            rt_dev_to_device(d, k->buf[NP + p], tmp, (size_t)sizes[p] * rt_dtype_size(gdt(p)));
            rt_coll_fake_log(k->fake, "r%d grad %d", k->rank, p);
            k->ctx.grad_ready(&k->ctx, p);
        }
        if (!after_backward(d, k, grads))
            return NULL;
    }
    k->ok = true;
    return NULL;
}

/* Runs world ranks (threads) to the end. */
static void run_ranks(Rank *r, int world)
{
    pthread_t th[8];
    for (int i = 0; i < world; i++)
        assert_int_equal(pthread_create(&th[i], NULL, rank_main, &r[i]), 0);
    for (int i = 0; i < world; i++)
        pthread_join(th[i], NULL);
}

static void ranks_init(Rank *r, int world, RtCollFake *f, const RtModel *m)
{
    memset(r, 0, sizeof *r * (size_t)world);
    for (int i = 0; i < world; i++)
        r[i] = (Rank){.fake = f, .rank = i, .world = world, .m = m, .bootstrap = true,
                      .bucket_mb = 0, .steps = 2, .announce = backward_order,
                      .call_allreduce = true, .poison_rank = -1, .stall_at = -1};
}

static void ranks_close(Rank *r, int world)
{
    for (int i = 0; i < world; i++) {
        if (!r[i].dev)
            continue;
        for (int b = 0; b < NB; b++)
            rt_dev_free(r[i].dev, r[i].buf[b]);
        for (int p = 0; p < NP; p++) {
            rt_dev_free(r[i].dev, r[i].state[p]);
            rt_dev_free(r[i].dev, r[i].master[p]);
        }
        rt_device_close(r[i].dev);
        r[i].dev = NULL;
    }
}

static void assert_ranks_ok(const Rank *r, int world)
{
    for (int i = 0; i < world; i++)
        if (!r[i].ok)
            fail_msg("rank %d: %s", i, r[i].err);
}

/* The lines of the log that start with "rR ", in order. */
static int rank_lines(const char *log, int rank, char lines[][96], int cap)
{
    char pre[8];
    snprintf(pre, sizeof pre, "r%d ", rank);
    int n = 0;
    for (const char *p = log; *p && n < cap;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (strncmp(p, pre, strlen(pre)) == 0) {
            snprintf(lines[n], 96, "%.*s", (int)(len < 95 ? len : 95), p);
            n++;
        }
        p += len + (e != NULL);
    }
    return n;
}

static int find_line(char lines[][96], int n, int from, const char *s)
{
    for (int i = from; i < n; i++)
        if (strstr(lines[i], s))
            return i;
    return -1;
}

/* ---- bootstrap ------------------------------------------------------------------------ */

static void *boot_only(void *arg)
{
    Rank *k = arg;
    RtCollBoot boot = rt_coll_fake_boot(k->fake, k->rank);
    k->ok = rt_nccl_bootstrap(rt_coll_fake_ops(k->fake), &boot, &k->comm, k->err, sizeof k->err);
    return NULL;
}

static void test_bootstrap(void **state)
{
    (void)state;
    enum { W = 3 };
    RtCollFake *f = rt_coll_fake_new(W);
    Rank r[W];
    ranks_init(r, W, f, &model);
    pthread_t th[W];
    for (int i = 0; i < W; i++)
        pthread_create(&th[i], NULL, boot_only, &r[i]);
    for (int i = 0; i < W; i++)
        pthread_join(th[i], NULL);
    assert_ranks_ok(r, W);
    assert_int_equal(rt_coll_fake_ids_made(f), 1); /* rank 0 only */
    const char *log = rt_coll_fake_log_text(f);
    char lines[64][96];
    for (int i = 0; i < W; i++) {
        int n = rank_lines(log, i, lines, 64);
        int made = find_line(lines, n, 0, "ncclGetUniqueId");
        int bc = find_line(lines, n, 0, "MPI_Bcast");
        char want[64];
        snprintf(want, sizeof want, "ncclCommInitRank %d/%d id=fake-nccl-id-1", i, W);
        int init = find_line(lines, n, 0, want);
        if (bc < 0 || init < 0 || init < bc)
            fail_msg("rank %d: bcast at %d, init at %d:\n%s", i, bc, init, log);
        assert_true(i == 0 ? made >= 0 && made < bc : made < 0);
        rt_coll_fake_ops(f)->comm_destroy(f, r[i].comm);
    }
    rt_coll_fake_free(f);

    /* rank 0 cannot make the id: every rank fails, none waits */
    f = rt_coll_fake_new(W);
    ranks_init(r, W, f, &model);
    rt_coll_fake_fail(f, "ncclGetUniqueId", 0, 2);
    for (int i = 0; i < W; i++)
        pthread_create(&th[i], NULL, boot_only, &r[i]);
    for (int i = 0; i < W; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < W; i++)
        assert_false(r[i].ok);
    assert_non_null(strstr(r[0].err, "ncclGetUniqueId failed at "));
    assert_non_null(strstr(r[0].err, "nccl_engine.c:"));
    assert_non_null(strstr(r[0].err, "unhandled system error"));
    assert_non_null(strstr(r[1].err, "rank 0 could not make NCCL's unique id"));
    assert_null(strstr(rt_coll_fake_log_text(f), "ncclCommInitRank"));
    rt_coll_fake_free(f);
}

/* several GPUs in one process: one comm per device, rank = position */
static void test_init_all(void **state)
{
    (void)state;
    RtCollFake *f = rt_coll_fake_new(2);
    RtCollComm *c[2] = {NULL, NULL};
    int devs[2] = {0, 1};
    char err[256];
    assert_true(rt_nccl_init_all(rt_coll_fake_ops(f), 2, devs, c, err, sizeof err));
    assert_non_null(strstr(rt_coll_fake_log_text(f), "ncclCommInitAll ndev=2"));
    /* the two comms train as two threads */
    Rank r[2];
    ranks_init(r, 2, f, &model);
    for (int i = 0; i < 2; i++)
        r[i].bootstrap = false, r[i].comm = c[i];
    run_ranks(r, 2);
    assert_ranks_ok(r, 2);
    for (int p = 0; p < NP; p++)
        assert_memory_equal(r[0].buf[p], r[1].buf[p], (size_t)sizes[p] * rt_dtype_size(params[p].dtype));
    ranks_close(r, 2);
    /* a failure names the call */
    rt_coll_fake_fail(f, "ncclCommInitAll", -1, 1);
    assert_false(rt_nccl_init_all(rt_coll_fake_ops(f), 2, devs, c, err, sizeof err));
    assert_non_null(strstr(err, "ncclCommInitAll failed at "));
    assert_non_null(strstr(err, "unhandled cuda error"));
    rt_coll_fake_free(f);
}

/* ---- buckets -------------------------------------------------------------------------- */

static void assert_partition(RtDevice *d, int nb, const int *expect, const int *expect_start)
{
    bool seen[NP] = {false};
    int at = 0;
    for (int b = 0; b < nb; b++) {
        int p[NP];
        int n = rt_nccl_bucket_params(d, b, p, NP);
        assert_int_equal(n, expect_start[b + 1] - expect_start[b]);
        for (int i = 0; i < n; i++) {
            assert_int_equal(p[i], expect[at++]);
            assert_false(seen[p[i]]);
            seen[p[i]] = true;
        }
    }
    for (int k = 0; k < NP; k++)
        assert_true(seen[k]); /* every gradient in exactly one bucket */
}

/* The size rule: 400 bytes per bucket, in completion order: p4 (16 B) and
 * p3 (400 B) close the first during backward; p2, p1, p0 (314 B) are the
 * last, flushed by the trainer's all-reduce. */
static void test_buckets_size_rule(void **state)
{
    (void)state;
    RtCollFake *f = rt_coll_fake_new(2);
    Rank r[2];
    ranks_init(r, 2, f, &model);
    for (int i = 0; i < 2; i++)
        r[i].bucket_mb = 400.0 / 1048576.0;
    run_ranks(r, 2);
    assert_ranks_ok(r, 2);
    RtNcclStats st;
    rt_nccl_stats(r[0].dev, &st);
    assert_int_equal(st.nbuckets, 2);
    assert_int_equal(st.launched_early, 1);
    assert_int_equal(st.steps, 2);
    assert_false(st.program_buckets);
    static const int want[] = {4, 3, 2, 1, 0}, start[] = {0, 2, 5};
    assert_partition(r[0].dev, 2, want, start);
    /* rank 0's second step: the first bucket launches right after p3's
     * gradient, after the comm stream waits for the compute stream; the
     * second after p0's; the update after the compute stream waits */
    char lines[128][96];
    int n = rank_lines(rt_coll_fake_log_text(f), 0, lines, 128);
    int s2 = find_line(lines, n, find_line(lines, n, 0, "update") + 1, "grad 4");
    int g3 = find_line(lines, n, s2, "grad 3"), w1 = find_line(lines, n, s2, "wait comm after compute");
    int a1 = find_line(lines, n, s2, "ncclAllReduce n=8 f16 sum");
    int g2 = find_line(lines, n, s2, "grad 2");
    int w2 = find_line(lines, n, g2, "wait comm after compute");
    int a2 = find_line(lines, n, s2, "ncclAllReduce n=37 f32 sum");
    int wc = find_line(lines, n, s2, "wait compute after comm");
    int up = find_line(lines, n, s2, "update");
    if (!(s2 >= 0 && g3 < w1 && w1 < a1 && a1 < g2 && g2 < w2 && w2 < a2 && a2 < wc && wc < up))
        fail_msg("order: grad3 %d wait %d ar %d grad2 %d wait %d ar %d wait %d update %d\n%s", g3,
                 w1, a1, g2, w2, a2, wc, up, rt_coll_fake_log_text(f));
    ranks_close(r, 2);
    rt_coll_fake_free(f);
}

/* The program's buckets launch in bucket order: bucket 1 ({p2, p1, p0})
 * completes first, but waits for bucket 0 ({p4, p3}). */
static void test_buckets_program(void **state)
{
    (void)state;
    static const int order[NP] = {4, 2, 1, 0, 3};
    RtCollFake *f = rt_coll_fake_new(2);
    Rank r[2];
    ranks_init(r, 2, f, &model_kv);
    for (int i = 0; i < 2; i++)
        r[i].announce = order;
    run_ranks(r, 2);
    assert_ranks_ok(r, 2);
    RtNcclStats st;
    rt_nccl_stats(r[1].dev, &st);
    assert_true(st.program_buckets);
    assert_int_equal(st.nbuckets, 2);
    assert_int_equal(st.launched_early, 2);
    assert_partition(r[1].dev, 2, kv_params, kv_start);
    char lines[128][96];
    int n = rank_lines(rt_coll_fake_log_text(f), 1, lines, 128);
    int g0 = find_line(lines, n, 0, "grad 0"), g3 = find_line(lines, n, 0, "grad 3");
    int a = find_line(lines, n, 0, "ncclAllReduce");
    assert_true(g0 < g3 && g3 < a); /* nothing before bucket 0 is complete */
    ranks_close(r, 2);
    rt_coll_fake_free(f);
}

/* A trainer that does not call the all-reduce: the update flushes the last
 * bucket first. */
static void test_flush_before_update(void **state)
{
    (void)state;
    RtCollFake *f = rt_coll_fake_new(2);
    Rank r[2];
    ranks_init(r, 2, f, &model);
    for (int i = 0; i < 2; i++)
        r[i].call_allreduce = false, r[i].steps = 1, r[i].bucket_mb = 400.0 / 1048576.0;
    run_ranks(r, 2);
    assert_ranks_ok(r, 2);
    char lines[128][96];
    int n = rank_lines(rt_coll_fake_log_text(f), 0, lines, 128);
    int a = find_line(lines, n, 0, "ncclAllReduce n=37 f32 sum");
    int up = find_line(lines, n, 0, "update");
    assert_true(a >= 0 && a < up);
    ranks_close(r, 2);
    rt_coll_fake_free(f);
}

/* ---- the results ---------------------------------------------------------------------- */

/* One CPU device trained on the sequential sum (rank 0's + rank 1's, fp32,
 * rounded to the gradient's dtype) ends with the ranks' bits. */
static void test_equals_sequential_sum(void **state)
{
    (void)state;
    enum { W = 2, S = 3 };
    RtCollFake *f = rt_coll_fake_new(W);
    Rank r[W];
    ranks_init(r, W, f, &model);
    for (int i = 0; i < W; i++)
        r[i].steps = S, r[i].bucket_mb = 100.0 / 1048576.0;
    run_ranks(r, W);
    assert_ranks_ok(r, W);
    /* every step's all-reduces before its update, on every rank */
    char lines[256][96];
    for (int i = 0; i < W; i++) {
        int n = rank_lines(rt_coll_fake_log_text(f), i, lines, 256), at = 0;
        for (int s = 0; s < S; s++) {
            int up = find_line(lines, n, at, "update");
            int reduces = 0;
            for (int j = at; j < up; j++)
                reduces += strstr(lines[j], "ncclAllReduce") != NULL &&
                           strstr(lines[j], "i32") == NULL;
            assert_int_equal(reduces, NP);
            at = up + 1;
        }
    }
    /* the reference */
    Rank ref = {.rank = 0, .world = 1, .m = &model, .steps = S, .poison_rank = -1};
    char err[256];
    RtDevice *d = rt_device_cpu_open(err, sizeof err);
    assert_non_null(d);
    assert_true(rank_alloc(d, &ref));
    assert_true(rt_dev_setup(d, &model, &ref.ctx, err, sizeof err));
    assert_true(loop_init(d, &ref));
    for (int s = 0; s < S; s++) {
        rt_dev_step_begin(d, false);
        for (int p = 0; p < NP; p++) {
            float sum[128];
            char tmp[512];
            for (int i = 0; i < sizes[p]; i++) {
                float a, b, v[2] = {grad_value(0, s, p, i), grad_value(1, s, p, i)};
                rt_from_f32(tmp, v, 2, gdt(p)); /* each rank's gradient in its dtype */
                rt_to_f32(v, tmp, 2, gdt(p));
                a = v[0], b = v[1];
                sum[i] = a + b;
            }
            rt_from_f32(tmp, sum, (size_t)sizes[p], gdt(p));
            rt_dev_to_device(d, ref.buf[NP + p], tmp, (size_t)sizes[p] * rt_dtype_size(gdt(p)));
        }
        ref.call_allreduce = false;
        assert_true(after_backward(d, &ref, NULL));
    }
    for (int i = 0; i < W; i++)
        for (int p = 0; p < NP; p++) {
            size_t wb = (size_t)sizes[p] * rt_dtype_size(params[p].dtype);
            assert_memory_equal(r[i].buf[p], ref.buf[p], wb);
            assert_memory_equal(r[i].state[p], ref.state[p], (size_t)sizes[p] * sizeof(float));
            if (params[p].has_master)
                assert_memory_equal(r[i].master[p], ref.master[p], (size_t)sizes[p] * 4);
        }
    for (int b = 0; b < NB; b++)
        rt_dev_free(d, ref.buf[b]);
    for (int p = 0; p < NP; p++)
        rt_dev_free(d, ref.state[p]), rt_dev_free(d, ref.master[p]);
    rt_device_close(d);
    ranks_close(r, W);
    rt_coll_fake_free(f);
}

/* Three ranks: the fake sums in rank order, a 16-bit partial sum rounded
 * after each addition; the engine's all-reduce of other tensors (mean too). */
typedef struct {
    RtCollFake *f;
    RtCollComm *c;
    int rank;
    uint16_t h[2];
    float x[2];
    bool ok;
    char err[256];
} Tri;

static void *tri_main(void *arg)
{
    Tri *t = arg;
    RtDevice *cpu = rt_device_cpu_open(t->err, sizeof t->err);
    RtNcclConfig cfg = {0};
    RtDevice *d = rt_nccl_wrap(cpu, rt_coll_fake_ops(t->f), t->c, t->rank, 3, &cfg, t->err,
                               sizeof t->err);
    if (!d)
        return NULL;
    RtDevTensor a = {t->h, 2, RT_F16}, b = {t->x, 2, RT_F32};
    t->ok = rt_dev_allreduce(d, &a, 1, RT_REDUCE_SUM, t->err, sizeof t->err) &&
            rt_dev_allreduce(d, &b, 1, RT_REDUCE_MEAN, t->err, sizeof t->err);
    rt_device_close(d);
    return NULL;
}

static void test_three_ranks_order(void **state)
{
    (void)state;
    RtCollFake *f = rt_coll_fake_new(3);
    RtCollComm *c[3];
    int devs[3] = {0, 1, 2};
    char err[256];
    assert_true(rt_nccl_init_all(rt_coll_fake_ops(f), 3, devs, c, err, sizeof err));
    /* 2048 + 1 + 1: rank order rounds 2049 to 2048 twice (ties to even),
     * one fp32 sum would round 2050 once */
    static const float v[3][2] = {{2048, 65504}, {1, 65504}, {1, -65504}};
    Tri t[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        t[i] = (Tri){.f = f, .c = c[i], .rank = i, .x = {(float)i, 3.0f * (float)i}};
        rt_from_f32(t[i].h, v[i], 2, RT_F16);
        pthread_create(&th[i], NULL, tri_main, &t[i]);
    }
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) {
        if (!t[i].ok)
            fail_msg("rank %d: %s", i, t[i].err);
        float got[2];
        rt_to_f32(got, t[i].h, 2, RT_F16);
        assert_true(got[0] == 2048.0f);
        assert_true(isinf(got[1])); /* 65504 + 65504 overflows before the third term */
        assert_true(t[i].x[0] == 1.0f && t[i].x[1] == 3.0f);
    }
    rt_coll_fake_free(f);
}

/* ---- the finite flag, errors ------------------------------------------------------------ */

/* An inf only rank 1's check sees: the reduced flag skips the update on
 * both ranks, and their weights stay equal. */
static void test_flag_reduced(void **state)
{
    (void)state;
    RtCollFake *f = rt_coll_fake_new(2);
    Rank r[2];
    ranks_init(r, 2, f, &model);
    for (int i = 0; i < 2; i++)
        r[i].dynamic = true, r[i].poison_rank = 1, r[i].steps = 1;
    run_ranks(r, 2);
    assert_ranks_ok(r, 2);
    for (int i = 0; i < 2; i++) {
        RtDevLsState st;
        rt_dev_ls_read(r[i].dev, &st, NULL, 0);
        assert_int_equal(st.skipped, 1);
        assert_int_equal(st.num_update, 0);
        assert_true(st.s.scale == 2.0f); /* backed off on both */
        assert_false(rt_dev_read_flag(r[i].dev));
    }
    assert_memory_equal(r[0].master[1], r[1].master[1], 64 * sizeof(float));
    assert_non_null(strstr(rt_coll_fake_log_text(f), "ncclAllReduce n=1 i32 max"));
    ranks_close(r, 2);
    rt_coll_fake_free(f);
}

static void test_error_names_call(void **state)
{
    (void)state;
    RtCollFake *f = rt_coll_fake_new(1);
    Rank r[1];
    ranks_init(r, 1, f, &model);
    rt_coll_fake_fail(f, "ncclAllReduce", 0, 3);
    run_ranks(r, 1);
    assert_false(r[0].ok);
    if (!strstr(r[0].err, "nccl: rank 0 of 1: ncclAllReduce failed at ") ||
        !strstr(r[0].err, "runtime/dist/nccl_engine.c:") ||
        !strstr(r[0].err, "internal error - please report this issue to the NCCL developers") ||
        !strstr(r[0].err, "(error 3)"))
        fail_msg("message: %s", r[0].err);
    ranks_close(r, 1);
    rt_coll_fake_free(f);

    /* the comm init of the bootstrap */
    f = rt_coll_fake_new(1);
    ranks_init(r, 1, f, &model);
    rt_coll_fake_fail(f, "ncclCommInitRank", 0, 6);
    run_ranks(r, 1);
    assert_false(r[0].ok);
    assert_non_null(strstr(r[0].err, "ncclCommInitRank failed at "));
    assert_non_null(strstr(r[0].err, "remote process exited"));
    rt_coll_fake_free(f);

    /* a mean of the model's gradients is refused, not silently summed */
    f = rt_coll_fake_new(1);
    ranks_init(r, 1, f, &model);
    r[0].steps = 0;
    run_ranks(r, 1);
    assert_ranks_ok(r, 1);
    RtDevTensor g[NP];
    for (int i = 0; i < NP; i++)
        g[i] = (RtDevTensor){r[0].buf[NP + i], (size_t)sizes[i], gdt(i)};
    char err[256];
    assert_false(rt_dev_allreduce(r[0].dev, g, NP, RT_REDUCE_MEAN, err, sizeof err));
    assert_non_null(strstr(err, "mean"));
    ranks_close(r, 1);
    /* a real transport without the device's compute stream is refused */
    RtCollOps real = *rt_coll_fake_ops(f);
    real.name = "nccl";
    RtNcclConfig cfg = {0};
    RtDevice *cpu = rt_device_cpu_open(err, sizeof err);
    RtCollComm *dummy = (RtCollComm *)&real;
    assert_null(rt_nccl_wrap(cpu, &real, dummy, 0, 1, &cfg, err, sizeof err));
    assert_non_null(strstr(err, "compute stream is needed"));
    rt_device_close(cpu);
    rt_coll_fake_free(f);
}

/* ---- the deadline ------------------------------------------------------------------------ */

static pthread_mutex_t end_mu = PTHREAD_MUTEX_INITIALIZER;
static char end_msg[512];
static char end_all[2048]; /* every message, one a line */
static int end_calls;

/* The test's "end the job": records (the engine fails then, and launches
 * nothing more; the watchdog's thread or the host's calls it). */
static void record_end(const char *msg)
{
    pthread_mutex_lock(&end_mu);
    snprintf(end_msg, sizeof end_msg, "%s", msg);
    size_t n = strlen(end_all);
    snprintf(end_all + n, sizeof end_all - n, "%s\n", msg);
    end_calls++;
    pthread_mutex_unlock(&end_mu);
}

static void end_reset(void)
{
    end_calls = 0;
    end_msg[0] = end_all[0] = 0;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rank 1 stops after step 0 (SIGSTOP): rank 0's all-reduce of step 1 never
 * completes.  Rank 0's host does not wait for it: it queues steps 1 and 2
 * (the device orders each update after the reductions: the compute stream
 * waits for the comm stream; the fake's streams, being the calling thread,
 * run the updates at once) and closes the device, which waits for the
 * watched steps.  The watchdog polls step 1's event for 1 s from its
 * hand-over, aborts the comm and ends the job with a message naming the
 * rank, the step and what it waited for. */
static void test_stalled_rank_deadline(void **state)
{
    (void)state;
    RtCollFake *f = rt_coll_fake_new(2);
    Rank r[2];
    ranks_init(r, 2, f, &model);
    r[0].steps = 3, r[0].stall_at = 1, r[0].timeout_s = 1.0;
    r[1].steps = 1;
    end_reset();
    rt_nccl_set_end_job(record_end);
    double t0 = mono_s();
    run_ranks(r, 2);
    ranks_close(r, 2); /* waits for the watchdog; the aborted comm is not destroyed again */
    double took = mono_s() - t0;
    rt_nccl_set_end_job(NULL);
    assert_true(r[1].ok);
    assert_int_equal(end_calls, 1);
    const char *want = "nccl: rank 0: step 1: the all-reduce of bucket 0 (of 1) did not "
                       "complete within 1 s (a rank stalled or died)";
    if (strcmp(end_msg, want) != 0)
        fail_msg("end_job: '%s'", end_msg);
    if (took < 1.0 || took > 4.0) /* the deadline, and a generous bound on a loaded machine */
        fail_msg("rank 0 gave up after %.3f s (deadline 1 s)", took);
    char lines[64][96];
    int n = rank_lines(rt_coll_fake_log_text(f), 0, lines, 64);
    int never = find_line(lines, n, 0, "-> never completes");
    int abort_at = find_line(lines, n, 0, "ncclCommAbort");
    assert_true(never >= 0 && abort_at > never);
    /* the host went on past the stalled reduction: step 1's update queued
     * after it, each behind the compute stream's wait for the comm stream */
    int up1 = find_line(lines, n, never, "update");
    assert_true(up1 > never);
    int wait1 = find_line(lines, n, never, "wait compute after comm");
    assert_true(wait1 > never && wait1 < up1);
    rt_coll_fake_free(f);
}

/* The steady state makes no host wait: a dynamic loss scale's flag is
 * reduced on the device (no read-back), every step's reductions go to the
 * watchdog, and no step finds its watch slot still held. */
static void test_no_host_waits(void **state)
{
    (void)state;
    RtCollFake *f = rt_coll_fake_new(2);
    Rank r[2];
    ranks_init(r, 2, f, &model_kv);
    for (int i = 0; i < 2; i++)
        r[i].dynamic = true, r[i].steps = 9;
    run_ranks(r, 2);
    assert_ranks_ok(r, 2);
    for (int i = 0; i < 2; i++) {
        RtNcclStats st;
        rt_nccl_stats(r[i].dev, &st);
        assert_int_equal(st.steps, 9);
        assert_int_equal(st.host_waits, 0);
        assert_int_equal(r[i].dev->syncs, 0); /* before issue 26: 2 per step */
    }
    ranks_close(r, 2);
    rt_coll_fake_free(f);
}

/* The program's buckets {4, 3} and {2, 1, 0}: the link dies after bucket 0
 * of step 1 went through, so bucket 1 never completes on either rank; each
 * names itself and bucket 1. */
static void test_stalled_bucket_named(void **state)
{
    (void)state;
    RtCollFake *f = rt_coll_fake_new(2);
    Rank r[2];
    ranks_init(r, 2, f, &model_kv);
    for (int i = 0; i < 2; i++)
        r[i].steps = 3, r[i].stall_at = 1, r[i].stall_grad = 2, r[i].timeout_s = 1.0;
    end_reset();
    rt_nccl_set_end_job(record_end);
    double t0 = mono_s();
    run_ranks(r, 2);
    ranks_close(r, 2);
    double took = mono_s() - t0;
    rt_nccl_set_end_job(NULL);
    assert_int_equal(end_calls, 2);
    for (int i = 0; i < 2; i++) {
        char want[256];
        snprintf(want, sizeof want, "nccl: rank %d: step 1: the all-reduce of bucket 1 (of 2) "
                 "did not complete within 1 s (a rank stalled or died)\n", i);
        if (!strstr(end_all, want))
            fail_msg("rank %d's message missing: '%s'", i, end_all);
    }
    if (took < 1.0 || took > 4.0)
        fail_msg("the ranks gave up after %.3f s (deadline 1 s)", took);
    rt_coll_fake_free(f);
}

/* The default end of the job, in a child process: the stalled world's
 * waiting rank exits non-zero (rt_mpi_finish(1); MPI_Abort under mpirun)
 * within the deadline, the message on stderr. */
static void test_deadline_ends_process(void **state)
{
    (void)state;
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    double t0 = mono_s();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        RtCollFake *f = rt_coll_fake_new(2);
        Rank r[2];
        ranks_init(r, 2, f, &model);
        r[0].steps = 3, r[0].stall_at = 1, r[0].timeout_s = 0.5;
        r[1].steps = 1;
        run_ranks(r, 2);
        ranks_close(r, 2); /* the program's end: the device waits for the watchdog */
        _exit(99);         /* the engine did not end the process */
    }
    close(fd[1]);
    char out[4096];
    size_t n = 0;
    ssize_t k;
    while (n + 1 < sizeof out && (k = read(fd[0], out + n, sizeof out - 1 - n)) > 0)
        n += (size_t)k;
    out[n] = 0;
    close(fd[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    double took = mono_s() - t0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 1)
        fail_msg("the child's status %#x (want exit 1); stderr: %s", st, out);
    if (!strstr(out, "nccl: rank 0: step 1: the all-reduce of bucket 0 (of 1) did not "
                     "complete within 0.5 s (a rank stalled or died)\n"))
        fail_msg("stderr: %s", out);
    if (took < 0.5 || took > 4.0)
        fail_msg("the child ended after %.3f s (deadline 0.5 s)", took);
}

/* NCCL's asynchronous error (a peer's connection died): reported at once,
 * not after the deadline, the same way. */
static void test_async_error(void **state)
{
    (void)state;
    RtCollFake *f = rt_coll_fake_new(1);
    Rank r[1];
    ranks_init(r, 1, f, &model);
    r[0].steps = 1, r[0].timeout_s = 30;
    rt_coll_fake_async_error(f, 0, 6);
    end_reset();
    rt_nccl_set_end_job(record_end);
    double t0 = mono_s();
    run_ranks(r, 1);
    ranks_close(r, 1);
    double took = mono_s() - t0;
    rt_nccl_set_end_job(NULL);
    assert_int_equal(end_calls, 1);
    const char *want = "nccl: rank 0: step 0: the all-reduce of bucket 0 (of 1) failed: "
                       "NCCL reported an asynchronous error: remote process exited or there was "
                       "a network error (error 6; a rank stalled or died)";
    if (strcmp(end_msg, want) != 0)
        fail_msg("end_job: '%s'", end_msg);
    if (took > 5.0)
        fail_msg("an asynchronous error waited %.3f s", took);
    assert_non_null(strstr(rt_coll_fake_log_text(f), "r0 ncclCommAbort"));
    rt_coll_fake_free(f);
}

/* The GPU of a process: its local rank as the launcher says it. */
/* ---- the start-up check through the engine --------------------------------------------- */

static void check_record(RtRankRecord *r, const char *lr)
{
    rt_rank_record_init(r);
    rt_rank_field(r, "model", "m");
    rt_rank_field(r, "lr", "%s", lr);
    rt_rank_field(r, "epochs", "1");
}

static int updates_logged(RtCollFake *f)
{
    int n = 0;
    for (const char *p = rt_coll_fake_log_text(f); (p = strstr(p, " update")); p++)
        n++;
    return n;
}

/* The ranks' records all-gathered over the comm (an int32 sum of zeroed
 * slots): equal ones pass and the ranks train; one field apart, both ranks
 * stop before any step with the same message. */
static void test_start_up_check(void **state)
{
    (void)state;
    RtRankRecord same, other;
    check_record(&same, "0.01");
    check_record(&other, "0.5");
    RtCollFake *f = rt_coll_fake_new(2);
    Rank r[2];
    ranks_init(r, 2, f, &model);
    r[0].check = r[1].check = &same;
    run_ranks(r, 2);
    assert_ranks_ok(r, 2);
    assert_int_equal(r[0].check_rc, 0);
    assert_int_equal(r[1].check_rc, 0);
    assert_int_equal(updates_logged(f), 4); /* 2 steps x 2 ranks */
    ranks_close(r, 2);
    rt_coll_fake_free(f);

    f = rt_coll_fake_new(2);
    ranks_init(r, 2, f, &model);
    r[0].check = &same;
    r[1].check = &other;
    run_ranks(r, 2);
    const char *want = "the ranks do not run the same training: rank 1's lr is 0.5 where rank "
                       "0's is 0.01; every rank must run";
    for (int i = 0; i < 2; i++) {
        assert_false(r[i].ok);
        assert_int_equal(r[i].check_rc, 1);
        if (!strstr(r[i].check_msg, want))
            fail_msg("rank %d: '%s'", i, r[i].check_msg);
    }
    assert_string_equal(r[0].check_msg, r[1].check_msg);
    assert_int_equal(updates_logged(f), 0);
    ranks_close(r, 2);
    rt_coll_fake_free(f);
}

/* Rank 1 never reaches the check: rank 0 waits for the deadline (1 s),
 * aborts the comm and ends the job naming the check. */
static void test_start_up_check_deadline(void **state)
{
    (void)state;
    RtRankRecord rec;
    check_record(&rec, "0.01");
    RtCollFake *f = rt_coll_fake_new(2);
    Rank r[2];
    ranks_init(r, 2, f, &model);
    r[0].check = &rec;
    r[0].stall_check = true;
    r[0].timeout_s = 1.0;
    r[1].steps = 0;
    end_reset();
    rt_nccl_set_end_job(record_end);
    run_ranks(r, 2);
    rt_nccl_set_end_job(NULL);
    assert_int_equal(r[0].check_rc, -1);
    assert_int_equal(end_calls, 1);
    if (!strstr(end_msg, "nccl: rank 0: ") ||
        !strstr(end_msg, "the start-up check did not complete within 1 s (a rank stalled or died)"))
        fail_msg("end_job: '%s'", end_msg);
    assert_string_equal(r[0].check_msg, end_msg);
    ranks_close(r, 2);
    rt_coll_fake_free(f);
}

static void test_local_device(void **state)
{
    (void)state;
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("MPI_LOCALRANKID");
    unsetenv("SLURM_LOCALID");
    assert_int_equal(rt_nccl_local_device(), 0);
    setenv("SLURM_LOCALID", "5", 1);
    assert_int_equal(rt_nccl_local_device(), 5);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
    assert_int_equal(rt_nccl_local_device(), 3); /* Open MPI's first */
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3x", 1);
    assert_int_equal(rt_nccl_local_device(), 5); /* not a number: the next */
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("SLURM_LOCALID");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bootstrap),
        cmocka_unit_test(test_init_all),
        cmocka_unit_test(test_buckets_size_rule),
        cmocka_unit_test(test_buckets_program),
        cmocka_unit_test(test_flush_before_update),
        cmocka_unit_test(test_equals_sequential_sum),
        cmocka_unit_test(test_three_ranks_order),
        cmocka_unit_test(test_flag_reduced),
        cmocka_unit_test(test_error_names_call),
        cmocka_unit_test(test_local_device),
        cmocka_unit_test(test_stalled_rank_deadline),
        cmocka_unit_test(test_no_host_waits),
        cmocka_unit_test(test_start_up_check),
        cmocka_unit_test(test_start_up_check_deadline),
        cmocka_unit_test(test_stalled_bucket_named),
        cmocka_unit_test(test_deadline_ends_process),
        cmocka_unit_test(test_async_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
