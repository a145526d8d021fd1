/* train.c - the training loop (docs/training.md, "The loop").  Per step
 * (run_step): for each rank the device computes (--sim-ranks: each of its
 * simulated ranks, dist/sim.c; else this process's), the batch filled on
 * the host and copied to the device, train_step (forward and backward, the
 * loss head scaled by the device's step state) and the gradients
 * all-reduced over the run's devices (run_micro_batch); the finite check
 * over every gradient, then, unless a dynamic loss scale skips the step,
 * moving_update (BatchNorm statistics), the fused optimizer over every
 * parameter and the loss scale's rule, all on the device; the metrics
 * (metrics.c); a Speedometer line every --log-interval batches and, per
 * epoch (run_epoch), the training metrics, the time, a checkpoint
 * (checkpoint.c) and a validation pass through infer_step.  rt_train_run is
 * run_open, run_epoch per epoch, run_end and run_done over one Run.
 *
 * The loop reaches the memory the steps run on only through the device
 * interface (device.h, through the trainer's calls in trainer.c): it calls
 * no kernel and reads no buffer (tests/runtime/device_seam.sh checks).  The
 * other jobs of a run are in their own files (train_internal.h): the
 * command line (options.c), buffers (trainer.c), learning-rate schedules
 * (lr.c), the data source (datasrc.c), the logs (log.c) and the per-node
 * hooks (hooks.c).  main() lives in main.c, so tests link the runtime with
 * their own models.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data_ext.h"
#include "dist/coll.h"
#include "fileio.h"
#include "dist/mpi_rt.h"
#include "rankcheck.h"
#include "settings.h"
#include "train_internal.h"

void openblas_set_num_threads(int num_threads);

/* A validation pass that takes long says where it is, every this many
 * seconds (on a short one nothing changes, so logs stay comparable). */
#define RT_VALIDATION_PROGRESS_S 10.0

/* The validation set through infer_step, batch by batch; the last partial
 * batch is padded by repeating its first sample and only its real rows
 * count.  False when --check-numerics found inf/NaN (reported to err). */
static bool validate(const RtModel *m, RtTrainer *t, const RtDataset *ds, int64_t *idx,
                     Numerics *nm, Prof *pf, Metric *res, FILE *out, FILE *err, const char *prog,
                     const char *when)
{
    Metric mt = {0};
    int64_t b = t->batch;
    double t0 = rt_now_s(), said = t0;
    for (int64_t at = 0; at < ds->nval; at += b) {
        double now = at > 0 ? rt_now_s() : t0;
        if (now - said >= RT_VALIDATION_PROGRESS_S) {
            fprintf(out, "Validation %s: %lld of %lld samples, %.0f s\n", when, (long long)at,
                    (long long)ds->nval, now - t0);
            fflush(out);
            said = now;
        }
        int64_t n = ds->nval - at < b ? ds->nval - at : b;
        for (int64_t j = 0; j < b; j++)
            idx[j] = at + (j < n ? j : 0);
        rt_trainer_staging_ready(t);
        if (t->raw_dev) /* the raw path (run_raw_on_device) */
            ds->fill_raw(ds, RT_SPLIT_VAL, idx, b, t->raw_host, t->y_host);
        else
            ds->fill(ds, RT_SPLIT_VAL, idx, b, t->x_host, t->y_host);
        if (ds->error && ds->error(ds)) { /* a record that did not decode */
            fprintf(err, "%s: %s\n", prog, ds->error(ds));
            return false;
        }
        if (t->raw_dev)
            rt_trainer_ingest_batch(t, &ds->norm, true);
        else
            rt_trainer_load_batch(t);
        t->ctx.batch = b;
        nm->train = false;
        nm->found = false;
        if (pf)
            rt_prof_infer(pf, true);
        m->infer_step(&t->ctx);
        if (pf)
            rt_prof_infer(pf, false);
        if (nm->found) {
            char where[160];
            snprintf(where, sizeof where, "validation %s, samples %lld-%lld (inference step)",
                     when, (long long)at, (long long)(at + n - 1));
            rt_numerics_report(err, prog, m, nm, where);
            return false;
        }
        rt_metric_add(&mt, t, m->prob_infer, n);
    }
    *res = mt;
    return true;
}

/* The clock once the device has finished the work queued before: the
 * profile's phases and the Speedometer time the device's work, not its
 * queueing (the CPU device is synchronous: just the clock). */
static double dev_now(RtTrainer *t)
{
    rt_dev_synchronize(t->dev);
    return rt_now_s();
}

/* ---- what the host reads only when it logs ------------------------------------ */

/* A step reads nothing back (docs/training.md, "What the host reads"): the
 * device keeps the loss scale, the skip decision, the update count and each
 * step's record (device.h: its flag, the scale after the rule, the update
 * count), and the loss head's rows are copied without waiting into slots
 * here.  flush() waits for the device once, then reports the steps since
 * the last flush from the device's records (the log lines, in the order the
 * per-step loop printed them; the host applies no rule), adds the rows to
 * the metrics and writes the learning rates of the next updates ahead.  It runs before a Speedometer line, at
 * the first step of an epoch (the Speedometer's clock starts there), at
 * the end of an epoch, after every step under --check-numerics or
 * --inject-nan (their hooks read the device per node anyway), and when the
 * slots are full. */
typedef struct {
    RtTrainer *t;
    const RtModel *m;
    const RtTrainOptions *o;
    FILE *out, *err;
    JLog *jl;
    RtLossScaler *ls;             /* the device's scale as its records report it */
    RtDevLsState dev;             /* the device's state at the last flush */
    const RtOptConfig *oc;
    int64_t *num_update;
    float *lr_last;               /* the learning rate of the last update */
    int64_t steps_per_epoch, total;
    int64_t step0;                /* the loop's step of the device's step 0 */
    int64_t skipped0, nonfinite0; /* the host scaler's counts at ls_init */
    int64_t read_to;              /* device steps reported */
    int64_t flushes;              /* flush calls */
    int64_t epoch, ep_step, ep_batch; /* step ep_step is batch ep_batch of epoch */
    int64_t inject_k;             /* the device step whose loss scale was inf, or -1 */
    AmpcLossScaleStep rec[RT_DEV_LS_RING]; /* the device's records of the steps */
    float lr[RT_DEV_LS_RING + 1];
    /* the rows of the loss head's output, one slot per train step call */
    unsigned char *rows;          /* host_alloc: cap slots of row_bytes */
    float *labels;                /* cap slots of batch labels */
    int cap, used;
    int cap_steps, steps;         /* steps a flush is due after; steps since the last */
    size_t row_bytes;
    Metric *global, *local;
} Later;

static bool later_init(Later *l, int nsim, char *err, size_t errlen)
{
    RtTrainer *t = l->t;
    const RtModel *m = l->m;
    int interval = l->o->log_interval;
    l->row_bytes = rt_trainer_rows_bytes(t, m->prob_train);
    /* the slots hold one log interval's steps (and one more, so that the
     * Speedometer's flush comes first), at most the flag ring's steps and
     * 64 MiB (beyond: a flush waits early, in a step that does not log) */
    int64_t steps = interval > 0 && interval < RT_DEV_LS_RING ? interval + 1 : RT_DEV_LS_RING;
    int64_t fit = (int64_t)((64u << 20) / (l->row_bytes * (size_t)nsim + 1));
    steps = steps < fit ? steps : fit > 0 ? fit : 1;
    l->cap_steps = (int)steps;
    l->cap = (int)steps * nsim;
    l->rows = rt_dev_host_alloc(t->dev, l->row_bytes * (size_t)l->cap, "the metrics' rows", err,
                                errlen);
    l->labels = malloc((size_t)l->cap * (size_t)t->batch * sizeof *l->labels);
    if (!l->rows || !l->labels) {
        snprintf(err, errlen, "out of memory for the metrics' rows");
        return false;
    }
    return true;
}

static void later_free(Later *l)
{
    if (l->rows)
        rt_dev_host_free(l->t->dev, l->rows);
    free(l->labels);
}

/* The learning rates of the next RT_DEV_LS_RING + 1 updates, ahead. */
static void later_lr(Later *l)
{
    for (int i = 0; i <= RT_DEV_LS_RING; i++)
        l->lr[i] = rt_lr_at(&l->o->sched, l->o->lr, *l->num_update + 1 + i, l->steps_per_epoch,
                            l->total);
    rt_dev_lr_ahead(l->t->dev, l->oc, l->lr, *l->num_update, RT_DEV_LS_RING + 1);
}

/* The loss head's rows of the train step just run, queued for the metrics. */
static void later_rows(Later *l)
{
    RtTrainer *t = l->t;
    rt_trainer_queue_rows(t, l->m->prob_train, l->rows + (size_t)l->used * l->row_bytes);
    memcpy(l->labels + (size_t)l->used * (size_t)t->batch, t->y_host,
           (size_t)t->batch * sizeof *l->labels);
    l->used++;
}

/* One step the device recorded: its log lines, as the per-step loop
 * printed them. */
static bool later_step(Later *l, int64_t k, const AmpcLossScaleStep *rec, const Numerics *nm,
                       bool eager)
{
    RtLossScaler *ls = l->ls;
    bool finite = rec->finite != 0;
    int64_t step = l->step0 + k;
    RtStepAt here = {.epoch = l->epoch, .batch = l->ep_batch + (step - l->ep_step), .step = step};
    float used = k == l->inject_k ? INFINITY : ls->s.scale;
    if (!finite) {
        const char *node = eager && nm->found ? nm->name : NULL;
        int pi = eager && l->o->check_numerics && !nm->found ? rt_dev_first_nonfinite(l->t->dev)
                                                             : -1;
        rt_log_nonfinite(l->out, l->err, l->jl, l->o, ls, &here, used, node,
                         pi >= 0 ? l->m->params[pi].name : NULL);
    }
    if (rec->num_update != *l->num_update) { /* the device applied the update */
        *l->num_update = rec->num_update;
        *l->lr_last = rt_lr_at(&l->o->sched, l->o->lr, *l->num_update, l->steps_per_epoch,
                               l->total);
    }
    float before = ls->s.scale;
    rt_loss_scaler_report(ls, finite, rec->s, l->out, l->err);
    rt_log_scale_change(l->jl, &here, before, ls->s.scale);
    if (rt_loss_scaler_exhausted(ls)) {
        fprintf(l->err, "%s: error: step %lld: the loss scale underflowed to %g (the "
                "gradients overflow at every scale): the forward pass or the data hold "
                "inf or NaN (find the node with --check-numerics)\n", l->o->prog,
                (long long)step, (double)ls->s.scale);
        return false;
    }
    return true;
}

/* Waits for the device once and catches up (above).  0, or an exit status. */
static int flush(Later *l, const Numerics *nm, bool eager)
{
    RtDevLsState st;
    l->flushes++;
    rt_dev_ls_read(l->t->dev, &st, l->rec, l->read_to);
    l->dev = st;
    for (int64_t k = l->read_to; k < st.steps; k++)
        if (!later_step(l, k, &l->rec[k - l->read_to], nm, eager))
            return 1;
    l->read_to = st.steps;
    for (int i = 0; i < l->used; i++) {
        const void *p = l->rows + (size_t)i * l->row_bytes;
        const float *y = l->labels + (size_t)i * (size_t)l->t->batch;
        RtDType dt = l->m->buffers[l->m->prob_train].dtype;
        rt_metric_add_rows(l->global, l->m, dt, p, y, l->t->batch);
        rt_metric_add_rows(l->local, l->m, dt, p, y, l->t->batch);
    }
    l->used = 0;
    l->steps = 0;
    /* the device's state is its last record's: any difference is its bug */
    const RtLossScaler *ls = l->ls;
    if (memcmp(&st.s.scale, &ls->s.scale, sizeof st.s.scale) != 0 ||
        st.s.tracker != ls->s.tracker || st.num_update != *l->num_update ||
        st.skipped != ls->skipped - l->skipped0 || st.nonfinite != ls->nonfinite - l->nonfinite0) {
        fprintf(l->err, "%s: internal error: the device's loss scale %g (tracker %d, %lld "
                "updates, %lld skipped) differs from its steps' records' %g (%d, %lld, %lld)\n",
                l->o->prog, (double)st.s.scale, (int)st.s.tracker, (long long)st.num_update,
                (long long)st.skipped, (double)ls->s.scale, (int)ls->s.tracker,
                (long long)*l->num_update, (long long)(ls->skipped - l->skipped0));
        return 1;
    }
    later_lr(l);
    return 0;
}

/* ---- the run ------------------------------------------------------------------- */

/* Everything a run holds, so that one cleanup frees it on every path, and
 * what its functions share: run_open sets the run up, run_epoch runs one
 * epoch (run_step per step, flush when the host reads), run_end validates
 * and reports, run_done fills the result, run_free frees. */
typedef struct {
    /* what runs */
    const RtModel *m;
    const RtTrainOptions *o; /* under MPI: this rank's (ro) */
    FILE *out, *err;         /* under MPI, ranks > 0: out is /dev/null (quiet) */
    RtTrainResult r;
    double t_start;
    char msg[1024];
    bool exit_now; /* --dump-state wrote its state: the status as it is */
    /* what it holds */
    RtDataset ds;
    RtTrainer t;
    bool have_t;
    RtCheckpoint ck;
    bool have_ck;
    int64_t *perm, *idx;
    /* the synthetic source's batch made on the device (device.h's
     * synthetic_batch): the epoch's order there, its sample indices; NULL:
     * the host fills the staging buffers and copies them */
    int64_t *perm_dev;
    char *path;
    float *scratch; /* --augment: one sample */
    Prof prof, *pf; /* --profile (pf: NULL without) */
    FILE *json;     /* --json-log */
    FILE *quiet;    /* under MPI, ranks > 0: the log goes here (/dev/null) */
    RtTrainOptions ro; /* under MPI: this rank's options (ranks > 0 log and save nothing) */
    char *rank_dir; /* --save-all-ranks: SAVE_DIR/rankR */
    int64_t *order; /* under MPI: this rank's samples of the epoch, in order (ds->plan) */
    int save_lock;  /* --independent-runs: the save directory, flock'd (-1: none) */
    Later later;    /* what the host reads when it logs */
    /* the run's constants */
    RtDeviceConfig dc; /* a GPU program's device options (--cudnn-*) */
    int rank, world, nsim; /* MPI's rank and ranks; --sim-ranks (1: none) */
    uint64_t seed;
    int64_t b, gb, sample, steps_per_epoch; /* the batch per rank and per step */
    bool augment, amp_on, eager; /* eager: the hooks read the device per node */
    RtOptConfig oc;
    /* the run's state */
    Numerics nm;
    Hooks hooks;
    JLog jl;
    RtLossScaler ls; /* the device's scale as its records report it */
    int64_t epoch0, nb0, step, num_update, run_steps; /* run_steps: the profile skips the first */
    Metric global, local, val;
    bool validated;
    /* the epoch's */
    int64_t epoch, nbatch, logged; /* logged: the batch of the last Speedometer line */
    bool first, after_quiet;
    double t0, tic;
    /* --cuda-graph 1 (device.h's graph_begin): off, eager until the capture
     * (the run's second step), or each step a replay of the captured one */
    enum { GRAPH_OFF, GRAPH_WARM, GRAPH_REPLAY } graph;
    int64_t graph_step; /* the step captured */
    bool capturing;     /* this step's calls are captured */
} Run;

/* run_open's and the steps' "go on" (any other value is an exit status) */
enum { RUN_GO = -1 };

static void run_free(Run *r)
{
    if (r->have_t) {
        later_free(&r->later);
        rt_dev_free(r->t.dev, r->perm_dev);
        rt_trainer_free(&r->t);
    }
    if (r->have_ck)
        rt_checkpoint_free(&r->ck);
    rt_data_free(&r->ds);
    free(r->perm);
    free(r->idx);
    free(r->path);
    free(r->scratch);
    if (r->pf) {
        free(r->pf->node[0]);
        free(r->pf->node[1]);
        free(r->pf->mark);
    }
    if (r->json)
        fclose(r->json);
    if (r->quiet)
        fclose(r->quiet);
    free(r->rank_dir);
    free(r->order);
    if (r->save_lock >= 0)
        close(r->save_lock);
    r->save_lock = -1;
}

/* The samples this rank fills from step `from` on, in order: one process
 * (or --sim-ranks, whose ranks fill in turn) reads the epoch's order as it
 * is; under MPI rank r reads the r-th b of every step. */
static const int64_t *rank_order(Run *run, int64_t from, int64_t steps, int64_t gb, int rank,
                                 int64_t b, int world)
{
    if (world == 1)
        return run->perm + from * gb;
    for (int64_t s = from; s < steps; s++)
        memcpy(run->order + (s - from) * b, run->perm + s * gb + (int64_t)rank * b,
               (size_t)b * sizeof *run->order);
    return run->order;
}

/* Under MPI (docs/kvstore.md, "Running on several processes"): only rank 0
 * logs, writes the JSON log, checkpoints and --save-params (ranks > 0 write
 * checkpoints into SAVE_DIR/rankR with --save-all-ranks, for tests); the
 * --inject-* flags act on --inject-rank only.  0, or an exit status. */
static int rank_options(Run *run, const RtTrainOptions **o, FILE **out, int rank,
                        const char *model, FILE *err)
{
    const RtTrainOptions *g = *o;
    if (rank == 0 && g->inject_rank < 0)
        return 0;
    run->ro = *g;
    RtTrainOptions *ro = &run->ro;
    if (g->inject_rank >= 0 && g->inject_rank != rank && g->sim_ranks <= 1) {
        ro->inject_inf_step = -1;
        ro->inject_nan_node[0] = 0;
        ro->inject_stop_at_start = false;
    }
    *o = ro;
    if (rank == 0)
        return 0;
    ro->json_log = NULL;
    ro->save_params = NULL;
    ro->profile = false;
    if (!(run->quiet = fopen("/dev/null", "w"))) {
        fprintf(err, "%s: rank %d: cannot open /dev/null for its log\n", g->prog, rank);
        return 1;
    }
    *out = run->quiet;
    ro->save_dir = NULL;
    if (g->save_dir && g->save_all_ranks) {
        size_t n = strlen(g->save_dir) + 32;
        if (!(run->rank_dir = malloc(n))) {
            fprintf(err, "%s: out of memory\n", g->prog);
            return 1;
        }
        snprintf(run->rank_dir, n, "%s/rank%d", g->save_dir, rank);
        char msg[1024];
        if (!rt_save_dir_prepare(run->rank_dir, model, NULL, g->prog, msg, sizeof msg)) {
            fprintf(err, "%s: %s\n", g->prog, msg);
            return 1;
        }
        ro->save_dir = run->rank_dir;
    }
    return 0;
}

/* A program built without MPI under a launcher of several processes
 * (mpirun, srun: rt_launcher_size) would train one independent copy per
 * process, every copy writing the same files: refused (exit 2) unless
 * --independent-runs asks for copies.  0, or an exit status. */
static int launched_alone(const RtTrainOptions *o, FILE *err)
{
    char which[96];
    int n = rt_mpi_linked() ? 1 : rt_launcher_size(which, sizeof which);
    if (n <= 1 || o->independent_runs)
        return 0;
    fprintf(err, "%s: error: started as one of %d processes (%s), but this program was built "
            "without MPI: each process would train alone and write the same files; build it "
            "for mpirun with ampc --mpi (or --kvstore=dist_sync), or give --independent-runs "
            "for %d independent copies, each with its own --save-dir and --json-log\n", o->prog,
            n, which, n);
    return 2;
}

/* --independent-runs: path (a save directory, or the JSON log's open
 * descriptor when *fd >= 0 already) is this process's alone for the run, an
 * exclusive flock(2) another copy cannot take (released at exit, so a killed
 * run leaves no stale lock).  False with a message when another holds it. */
bool rt_own_exclusively(const char *path, const char *flag, int *fd, char *err, size_t errlen)
{
    if (*fd < 0)
        *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) {
        snprintf(err, errlen, "%s %s: %s", flag, path, strerror(errno));
        return false;
    }
    if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(err, errlen, "%s %s: another run writes it (--independent-runs: give each copy "
                 "its own %s)", flag, path, flag);
        return false;
    }
    return true;
}

/* The start-up check (rankcheck.h): 0 when every rank runs what rank 0
 * runs; else every rank stops with status 2 (rank 0 says which rank, field
 * and values: one message), or 1 when the exchange itself failed. */
static int check_ranks(const RtRankRecord *rec, int world, int rank, RtGatherFn gather,
                       void *self, const RtTrainOptions *o, FILE *err)
{
    char msg[2048];
    int v = rt_rank_check(rec, world, gather, self, msg, sizeof msg);
    if (v < 0)
        fprintf(err, "%s: %s\n", o->prog, msg);
    if (v > 0 && rank == 0)
        fprintf(err, "%s: error: %s\n", o->prog, msg);
    if (v > 0)
        rt_mpi_agreed(); /* every rank reached this verdict: no abort needed */
    return v < 0 ? 1 : v > 0 ? 2 : 0;
}

/* The profile's phase k gets the time since *since, which moves to now. */
static void prof_phase(Prof *pf, RtTrainer *t, int k, double *since)
{
    if (!pf || !pf->on)
        return;
    double now = dev_now(t);
    pf->own_syncs++;
    pf->phase[k] += now - *since;
    *since = now;
}

/* The options, together and against the model, and the device's (into
 * R->dc).  RUN_GO, or an exit status. */
static int run_check(Run *R)
{
    const RtModel *m = R->m;
    const RtTrainOptions *o = R->o;
    FILE *err = R->err;
    char *msg = R->msg;
    size_t msgsz = sizeof R->msg;
    int rc;
    rt_inputs_reset(); /* the files this run reads: no output may be one of them */
    /* nor may two outputs name one file: one of them would be lost */
    const char *outs[] = {o->save_params, o->json_log, o->dump_state, o->output};
    const char *flags[] = {"--save-params", "--json-log", "--dump-state", "--output"};
    if (!rt_outputs_distinct(outs, flags, 4, msg, msgsz)) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        return 2;
    }
    if (!m->infer_step) {
        fprintf(err, "%s: model %s has no inference step\n", o->prog, m->name);
        return 2;
    }
    if ((rc = rt_predict_check_options(o, err)) != 0)
        return rc;
    if (!m->train_step && !o->predict) {
        fprintf(err, "%s: model %s has no train step (a model needs a loss head to train); it "
                "predicts: --predict INPUT.npy --output OUT.npy\n", o->prog, m->name);
        return 2;
    }
    if (o->threads > 0)
        openblas_set_num_threads(o->threads);
    RtInit ini;
    if (!rt_init_parse(o->init, &ini, msg, msgsz)) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        return 2;
    }
    /* the settings together and against the model (ampc checked them too) */
    const char *key =
        rt_settings_check(o, m->name, m->data_rank, m->data_shape, m->classes, msg, msgsz);
    if (key) {
        fprintf(err, "%s: --%s: %s\n", o->prog, rt_setting_by_key(key)->flag, msg);
        return 2;
    }
    /* a GPU program's device flags (a CPU program refuses them) */
    RtDeviceFlags df = {.autotune = o->cudnn_autotune, .workspace_mb = o->cudnn_workspace_mb,
                        .fp32 = o->cudnn_fp32, .nondeterministic = o->cudnn_nondeterministic,
                        .autotune_max = o->cudnn_autotune_max,
                        .runtime_compiled = o->cudnn_runtime_compiled,
                        .plan_cache = o->cudnn_plan_cache};
    if (!rt_device_configure(m, &df, &R->dc, msg, msgsz)) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        return 2;
    }
    return RUN_GO;
}

static int run_device(Run *R);
static int run_start(Run *R, double t_device);
static int run_synthetic_on_device(Run *R);

/* The run up to its first step: the options checked (run_check), the ranks
 * started, the data, the device and its parameters (run_device; or a
 * checkpoint's, run_start), the logs, the loss scale and the schedule on the
 * device.  RUN_GO, or an exit status (--cudnn-check and --predict end here
 * with theirs). */
static int run_open(Run *R, const RtModel *m, const RtTrainOptions *o, FILE *out, FILE *err)
{
    char *msg = R->msg;
    size_t msgsz = sizeof R->msg;
    int rc;
    R->m = m;
    R->o = o;
    R->out = out;
    R->err = err;
    R->t_start = rt_now_s();
    R->save_lock = -1;
    if ((rc = run_check(R)) != RUN_GO)
        return rc;
    if (o->cudnn_check)
        return rt_device_check(m, &R->dc, o->batch_size, out, err);
    if (o->predict)
        return rt_predict_run(m, o, &R->dc, out, err);
    /* several processes: only under mpirun in a program built with ampc --mpi */
    int rank = 0, world = 1;
    RtMpiConfig mc = {.timeout_s = o->mpi_timeout, .bucket_mb = o->mpi_bucket_mb};
    if (!rt_mpi_start(&mc, &rank, &world, msg, msgsz)) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        return 1;
    }
    R->rank = rank;
    R->world = world;
    if ((rc = launched_alone(o, err)) != 0)
        return rc;
    if ((rc = rank_options(R, &o, &out, rank, m->name, err)) != 0)
        return rc;
    R->o = o;
    R->out = out;
    R->augment = o->augment_pad > 0 || o->augment_mirror;
    if (o->inject_nan_node[0] && !rt_has_node(m, o->inject_nan_node)) {
        fprintf(err, "%s: --inject-nan: model %s has no node named '%s'\n", o->prog, m->name,
                o->inject_nan_node);
        return 2;
    }
    /* --independent-runs: the save directory is this copy's before anything
     * in it is touched (prepare removes stale temporary files: another
     * copy's would be live); and a directory of another run's checkpoints
     * is not this run's to fill, nor to clean */
    struct stat sd;
    bool lock = o->independent_runs && o->save_dir;
    if ((lock && stat(o->save_dir, &sd) == 0 &&
         !rt_own_exclusively(o->save_dir, "--save-dir", &R->save_lock, msg, msgsz)) ||
        (o->save_dir && !o->resume && !o->overwrite &&
         !rt_save_dir_check(o->save_dir, m->name, msg, msgsz)) ||
        (o->save_dir && !rt_save_dir_prepare(o->save_dir, m->name, err, o->prog, msg, msgsz)) ||
        (lock && R->save_lock < 0 &&
         !rt_own_exclusively(o->save_dir, "--save-dir", &R->save_lock, msg, msgsz))) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        return 2;
    }
    /* a checkpoint first: its seed decides the data */
    R->seed = o->seed;
    if (o->resume) {
        if (!rt_checkpoint_read(o->resume, &R->ck, msg, msgsz)) {
            fprintf(err, "%s: %s\n", o->prog, msg);
            return 1;
        }
        R->have_ck = true;
        R->seed = R->ck.run.seed;
    }
    R->sample = 1;
    for (int i = 0; i < m->data_rank; i++)
        R->sample *= m->data_shape[i];
    if ((rc = rt_open_data(m, o, R->seed, R->sample, &R->ds, err)) != 0 ||
        (rc = rt_check_image_shape(m, &R->ds, o, err)) != 0)
        return rc;
    RtDataset *ds = &R->ds;
    int64_t b = R->b = o->batch_size;
    /* Under MPI a step takes world x b samples: rank r the r-th b of them,
     * so every rank runs the same steps per epoch and the remainder of each
     * epoch's order is dropped (as a single process drops it) */
    int nsim = R->nsim = o->sim_ranks > 1 ? o->sim_ranks : 1;
    if (nsim > 1 && world > 1) {
        fprintf(err, "%s: --sim-ranks is for a single process, not under mpirun (%d ranks)\n",
                o->prog, world);
        return 2;
    }
    int64_t gb = R->gb = b * world * nsim;
    int64_t steps_per_epoch = R->steps_per_epoch = ds->ntrain / gb;
    if (steps_per_epoch == 0) {
        fprintf(err, "%s: the batch size %lld%s exceeds the %lld training samples of %s\n",
                o->prog, (long long)gb, world > 1 || nsim > 1 ? " (over all ranks)" : "",
                (long long)ds->ntrain, ds->name);
        return 2;
    }
    R->oc = (RtOptConfig){.kind = o->optimizer, .lr = o->lr, .momentum = o->momentum,
                          .wd = o->wd, .rescale_grad = 1.0f / (float)gb,
                          .clip_gradient = o->clip_gradient, .beta1 = o->beta1,
                          .beta2 = o->beta2, .epsilon = o->epsilon};
    R->perm = malloc((size_t)ds->ntrain * sizeof *R->perm);
    R->order = world > 1 ? malloc((size_t)ds->ntrain * sizeof *R->order) : NULL;
    R->idx = malloc((size_t)b * sizeof *R->idx);
    if (R->augment)
        R->scratch = malloc((size_t)R->sample * sizeof *R->scratch);
    if (!R->perm || !R->idx || (R->augment && !R->scratch) || (world > 1 && !R->order)) {
        fprintf(err, "%s: out of memory\n", o->prog);
        return 1;
    }
    return run_device(R);
}

/* The ranks checked against each other, the device opened with the model's
 * buffers and parameters, the hooks and the JSON log.  RUN_GO, or an exit
 * status. */
static int run_device(Run *R)
{
    const RtModel *m = R->m;
    const RtTrainOptions *o = R->o;
    FILE *err = R->err;
    RtDataset *ds = &R->ds;
    char *msg = R->msg;
    size_t msgsz = sizeof R->msg;
    int rc, rank = R->rank, world = R->world, nsim = R->nsim;
    int64_t b = R->b, gb = R->gb, steps_per_epoch = R->steps_per_epoch;
    /* several ranks: their runs checked against each other before the first
     * collective (rankcheck.h), over MPI, and again through the NCCL engine */
    RtRankRecord rec;
    RtRankInfo ri = {.m = m, .o = o, .ds = ds, .world = world, .batch = b, .global_batch = gb,
                     .steps_per_epoch = steps_per_epoch, .seed = R->seed,
                     .ck = R->have_ck ? &R->ck : NULL};
    rt_rank_record_make(&ri, &rec);
    if (o->inject_stop_at_start) /* testing: a rank that never arrives */
        raise(SIGSTOP);
    if (world > 1 && (rc = check_ranks(&rec, world, rank, rt_mpi_allgather, NULL, o, err)) != 0)
        return rc;
    RtTrainer *t = &R->t;
    double t_device = rt_now_s();
    RtDeviceOpen how = {.config = &R->dc, .lagging = o->device_lag, .sim_ranks = nsim};
    bool ok = rt_trainer_init(t, m, b, rt_optim_nstate(&R->oc), &how, msg, msgsz);
    t_device = rt_now_s() - t_device;
    R->have_t = ok;
    if (ok) /* a test mode: every step one a CUDA graph could hold */
        rt_dev_capture_mode(t->dev, o->device_capture);
    if (ok && world > 1 && rt_nccl_is(t->dev) &&
        (rc = check_ranks(&rec, world, rank, rt_nccl_allgather, t->dev, o, err)) != 0)
        return rc;
    /* the ranks mpirun started (or --sim-ranks simulates) must be the ranks
     * the device reduces over, or each would train alone on its shard */
    if (ok && rt_dev_world_size(t->dev) != world * nsim) {
        snprintf(msg, msgsz, "model %s: %d ranks under mpirun, but its device reduces the "
                 "gradients over %d (a GPU program needs --kvstore=nccl or dist_sync)", m->name,
                 world, rt_dev_world_size(t->dev));
        ok = false;
    }
    if (ok) {
        t->ctx.seed = R->seed;
        ok = rt_trainer_init_params(t, o->init, R->seed, msg, msgsz);
    }
    if (!ok) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        return 1;
    }
    R->nm = (Numerics){.check = o->check_numerics,
                       .nan_node = o->inject_nan_node[0] ? o->inject_nan_node : NULL,
                       .nan_step = o->inject_nan_step};
    R->pf = o->profile ? &R->prof : NULL;
    R->hooks = (Hooks){.nm = R->nm.check || R->nm.nan_node ? &R->nm : NULL, .pf = R->pf};
    if (R->hooks.nm || R->hooks.pf) {
        t->hook = &R->hooks;
        t->ctx.after_node = rt_after_node;
        t->ctx.check_node = 1;
    }
    R->jl = (JLog){.t0 = rt_now_s()};
    rc = rt_jl_open(&R->jl, o, err);
    R->json = R->jl.f;
    if (rc != 0)
        return rc;
    return run_start(R, t_device);
}

/* The synthetic source's batches made by the device, where it can and
 * nothing on the host changes them (--augment does): the epoch's order kept
 * in device memory too, so that a step neither fills nor copies a batch and
 * never waits for its staging buffer (issue 26).  The same values as the
 * host's fill, bit for bit (device.h).  RUN_GO, or an exit status. */
static int run_synthetic_on_device(Run *R)
{
    RtTrainer *t = &R->t;
    const RtModel *m = R->m;
    if (!rt_data_is_synthetic(&R->ds) || R->augment || !rt_dev_has_synthetic(t->dev) ||
        m->label < 0 || m->label >= m->nbuffers)
        return RUN_GO;
    char derr[256];
    R->perm_dev = rt_dev_alloc(t->dev, (size_t)R->ds.ntrain * sizeof *R->perm_dev,
                               "the epoch's order", derr, sizeof derr);
    if (!R->perm_dev) {
        fprintf(R->err, "%s: %s\n", R->o->prog, derr);
        return 1;
    }
    return RUN_GO;
}

/* --cuda-graph 1: the steps from the run's second on replay the captured
 * step, unless something needs the host inside a step; then the steps run
 * eagerly, said once. */
static void graph_setup(Run *R)
{
    const RtTrainOptions *o = R->o;
    const RtDevice *d = R->t.dev;
    static const char *const cannot = "the device cannot capture a step: ";
    const char *why = !o->cuda_graph     ? NULL
                      : o->profile         ? "--profile times each call"
                      : o->check_numerics  ? "--check-numerics reads each node's flag"
                      : o->inject_nan_node[0] ? "--inject-nan writes one step's node output"
                      : R->nsim > 1        ? "--sim-ranks computes its ranks' micro-batches in turn"
                      : !rt_dev_has_graph(d) ? cannot
                                             : NULL;
    R->graph = o->cuda_graph && !why ? GRAPH_WARM : GRAPH_OFF;
    if (why) /* the device's name after its reason */
        fprintf(R->out, "CUDA graph: off (%s%s): the steps run eagerly\n", why,
                why == cannot ? d->ops->name : "");
}

/* A source's raw samples uploaded as bytes and normalised by the device
 * (issue 26, point 2; device.h's ingest), where the source has them
 * (data.h's fill_raw), nothing on the host changes its floats (--augment
 * does) and the device can; and the batches the device writes, synthetic
 * or raw, in the first layer's form where nothing on the host reads the
 * data buffer (rt_trainer_form).  RUN_GO, or an exit status. */
static int run_raw_on_device(Run *R)
{
    RtTrainer *t = &R->t;
    const RtModel *m = R->m;
    const RtIngestNorm *g = &R->ds.norm;
    rt_trainer_form(t, !t->ctx.after_node && !R->o->dump_state);
    bool channels = g->channels == 1 || (m->data_rank == 3 && g->channels == m->data_shape[0]);
    if (!R->ds.fill_raw || R->augment || !rt_dev_has_ingest(t->dev) || !channels ||
        g->channels > RT_INGEST_MAXC || R->ds.sample_size != R->sample)
        return RUN_GO;
    if (!rt_trainer_raw_staging(t, R->msg, sizeof R->msg)) {
        fprintf(R->err, "%s: %s\n", R->o->prog, R->msg);
        return 1;
    }
    return RUN_GO;
}

/* run_open's second half: where the run starts (a checkpoint's step, scale
 * and parameters), its first log lines, and the device's per-run state. */
static int run_start(Run *R, double t_device)
{
    const RtModel *m = R->m;
    const RtTrainOptions *o = R->o;
    FILE *out = R->out, *err = R->err;
    RtTrainer *t = &R->t;
    char *msg = R->msg;
    size_t msgsz = sizeof R->msg;
    rt_loss_scaler_init(&R->ls, &o->loss_scale, m->amp);
    R->ls.prog = o->prog;
    RtRunState at = {0}; /* epoch, batch_in_epoch, step, num_update */
    if (R->have_ck) {
        if (!rt_checkpoint_apply(&R->ck, t, o->prog, o->resume, err, msg, msgsz)) {
            fprintf(err, "%s: %s\n", o->prog, msg);
            return 1;
        }
        /* a checkpoint keeps the global batch: any number of ranks resumes it */
        RtTrainOptions go = *o;
        go.batch_size = R->gb;
        rt_checkpoint_resume(&R->ck.run, &go, R->steps_per_epoch, &R->ls, &at, err);
    }
    if (o->load_params && !rt_params_load(t, o->load_params, msg, msgsz)) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        return 1;
    }
    R->epoch0 = at.epoch;
    R->nb0 = at.batch_in_epoch;
    R->step = at.step;
    R->num_update = at.num_update;
    int64_t nvalues = 0;
    for (int i = 0; i < m->nparams; i++)
        nvalues += m->params[i].grad >= 0 ? m->params[i].numel : 0;
    R->amp_on = (m->amp && strcmp(m->amp, "off") != 0) || R->ls.mode != RT_LS_OFF;
    RtLogStart start = {.batch = R->b, .steps_per_epoch = R->steps_per_epoch,
                        .nvalues = nvalues, .seed = R->seed, .amp_on = R->amp_on,
                        .resumed = R->have_ck, .epoch = R->epoch0, .batch_in_epoch = R->nb0,
                        .step = R->step, .num_update = R->num_update, .arena = t->arena_bytes,
                        .own = t->own_bytes, .state = t->state_bytes,
                        .workspace = (int64_t)t->ctx.ws_bytes,
                        .setup_s = rt_now_s() - R->t_start, .device_s = t_device};
    rt_log_start(out, &R->jl, m, o, &R->ds, &R->ls, &start);
    if (R->nsim > 1)
        fprintf(out, "Simulating %d ranks in turn (--sim-ranks): batch %lld per rank (%lld per "
                "step), %lld steps per epoch\n", R->nsim, (long long)R->b, (long long)R->gb,
                (long long)R->steps_per_epoch);
    if (R->world > 1)
        fprintf(out, "MPI: %d ranks, batch %lld per rank (%lld per step), %lld steps per epoch "
                "(the last %lld samples of each epoch's order dropped); only rank 0 logs\n",
                R->world, (long long)R->b, (long long)R->gb, (long long)R->steps_per_epoch,
                (long long)(R->ds.ntrain - R->steps_per_epoch * R->gb));
    if (rt_jl_failed(&R->jl, o, err)) {
        fflush(out);
        return 1;
    }
    /* the device's per-call state, and every device starting from rank 0's
     * parameters (one device: nothing moves) */
    if (!rt_trainer_setup(t, msg, msgsz) || !rt_trainer_broadcast_params(t, msg, msgsz)) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        return 1;
    }
    /* the loss scale, the update count and the schedule on the device */
    Later *lt = &R->later;
    *lt = (Later){.t = t, .m = m, .o = o, .out = out, .err = err, .jl = &R->jl, .ls = &R->ls,
                  .oc = &R->oc, .num_update = &R->num_update, .lr_last = &R->r.lr,
                  .steps_per_epoch = R->steps_per_epoch,
                  .total = R->steps_per_epoch * o->epochs, .step0 = R->step,
                  .skipped0 = R->ls.skipped, .nonfinite0 = R->ls.nonfinite, .inject_k = -1,
                  .global = &R->global, .local = &R->local};
    /* one device per process: --inject-inf-at-step decided on the device too
     * (--sim-ranks picks the rank's micro-batch: step_begin's flag) */
    RtDevLsInit lsi = {.dynamic = R->ls.mode == RT_LS_DYNAMIC, .s = R->ls.s, .rule = R->ls.rule,
                       .batch = (double)R->gb, .num_update = R->num_update, .step = R->step,
                       .inject_inf = R->nsim == 1 && o->inject_inf_step >= 0,
                       .inject_inf_at = o->inject_inf_step};
    if (!later_init(lt, R->nsim, msg, msgsz) || !rt_dev_ls_init(t->dev, &lsi, msg, msgsz)) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        return 1;
    }
    later_lr(lt);
    /* the hooks read the device per node: then the step's lines come at once */
    R->eager = R->hooks.nm != NULL;
    graph_setup(R);
    int rc = run_synthetic_on_device(R);
    return rc == RUN_GO ? run_raw_on_device(R) : rc;
}

static int run_micro_batch_calls(Run *R, int me, bool inject, double *ph);
static int run_step_calls(Run *R, double *php, bool capture);

/* --cuda-graph 1: the capture of this step begun, or false (said once: the
 * steps then run eagerly). */
static bool graph_begin(Run *R)
{
    if (rt_dev_graph_begin(R->t.dev, R->msg, sizeof R->msg))
        return true;
    fprintf(R->out, "CUDA graph: off (step %lld cannot be captured: %s): the steps run eagerly\n",
            (long long)R->step, R->msg);
    R->graph = GRAPH_OFF;
    return false;
}

/* The capture ended: the graph made and run once, the later steps replay
 * it; else (said once) nothing of the step ran, and it runs now, eagerly,
 * as every later step.  RUN_GO, or an exit status. */
static int graph_end(Run *R, double *ph)
{
    R->capturing = false;
    if (rt_dev_graph_end(R->t.dev, R->msg, sizeof R->msg)) {
        R->graph = GRAPH_REPLAY;
        R->graph_step = R->step;
        return RUN_GO;
    }
    fprintf(R->out, "CUDA graph: off (step %lld made no graph: %s): the steps run eagerly\n",
            (long long)R->step, R->msg);
    R->graph = GRAPH_OFF;
    int rc = run_micro_batch_calls(R, R->rank, R->step == R->o->inject_inf_step, ph);
    return rc != RUN_GO ? rc : run_step_calls(R, ph, false);
}

/* One micro-batch of the step: the batch of the rank the device computes now
 * (--sim-ranks: each simulated rank's in turn, dist/sim.c; else this
 * process's), filled and augmented on the host and copied, the train step,
 * and its gradients all-reduced over the device's ranks.  RUN_GO, or an exit
 * status. */
static int run_micro_batch(Run *R, double *ph)
{
    const RtModel *m = R->m;
    const RtTrainOptions *o = R->o;
    RtTrainer *t = &R->t;
    RtDataset *ds = &R->ds;
    Later *lt = &R->later;
    int64_t step = R->step, b = R->b;
    int me = R->nsim > 1 ? rt_dev_rank(t->dev) : R->rank; /* the rank whose batch this is */
    rt_trainer_staging_ready(t); /* the next staging slot */
    float *x = t->x_host;        /* the device's batch is loaded from it */
    int64_t at = R->nbatch * R->gb + (int64_t)me * b;
    const int64_t *shard = R->perm + at; /* this rank's */
    if (R->perm_dev) {
        /* made by the device; the host keeps the labels for the metrics */
        RtSyntheticKeys key = rt_synthetic_keys(ds->seed, RT_SPLIT_TRAIN);
        RtDevSynth s = {.n = (size_t)b, .sample = (size_t)R->sample, .key_x = key.x,
                        .key_y = key.y, .classes = (uint64_t)ds->classes};
        rt_trainer_synthetic_batch(t, &s, R->perm_dev + at);
        rt_synthetic_labels(ds, RT_SPLIT_TRAIN, shard, b, t->y_host);
    } else if (t->raw_dev) {
        ds->fill_raw(ds, RT_SPLIT_TRAIN, shard, b, t->raw_host, t->y_host);
    } else {
        ds->fill(ds, RT_SPLIT_TRAIN, shard, b, x, t->y_host);
    }
    if (R->augment)
        for (int64_t j = 0; j < b; j++)
            rt_augment(x + j * R->sample, (int)m->data_shape[0], (int)m->data_shape[1],
                       (int)m->data_shape[2], o->augment_pad, o->augment_mirror, R->seed,
                       (uint64_t)R->epoch, shard[j], R->scratch);
    if (ds->error && ds->error(ds)) {
        fprintf(R->err, "%s: %s\n", o->prog, ds->error(ds));
        return 1;
    }
    if (t->raw_dev)
        rt_trainer_ingest_batch(t, &ds->norm, false);
    else if (!R->perm_dev)
        rt_trainer_load_batch(t);
    R->r.ingested += t->raw_dev != NULL;
    R->r.formed += t->ctx.input_formed;
    /* the step's loss scale, from the device's (no read-back); one device
     * injects on its own (ls_init's inject_inf_at) */
    bool inject = step == o->inject_inf_step &&
                  (R->nsim == 1 || o->inject_rank < 0 || o->inject_rank == me);
    if (step == o->inject_inf_step)
        lt->inject_k = inject ? step - lt->step0 : -1;
    /* a replay: the captured step makes the calls; the run's second step
     * captured (the first has made what the device makes lazily), from its
     * begin: the batch is in the device's buffers already */
    if (R->graph == GRAPH_REPLAY)
        return RUN_GO;
    R->capturing = R->graph == GRAPH_WARM && R->run_steps >= 1 && graph_begin(R);
    return run_micro_batch_calls(R, me, inject, ph);
}

/* run_micro_batch's calls from the step's begin: the train step on the
 * micro-batch the device holds, its gradients all-reduced.  RUN_GO, or an
 * exit status. */
static int run_micro_batch_calls(Run *R, int me, bool inject, double *ph)
{
    const RtModel *m = R->m;
    const RtTrainOptions *o = R->o;
    RtTrainer *t = &R->t;
    Later *lt = &R->later;
    Prof *pf = R->pf;
    int64_t step = R->step, b = R->b;
    t->ctx.batch = b;
    t->ctx.step = (uint64_t)step; /* the host's (the hooks'); the kernels read the device's */
    rt_dev_step_begin(t->dev, inject && R->nsim > 1);
    t->ctx.seed = rt_rank_seed(R->seed, me); /* Dropout masks differ between ranks */
    R->nm.train = true;
    R->nm.past_head = false;
    R->nm.found = false;
    prof_phase(pf, t, PH_DATA, ph);
    if (pf) {
        pf->last = *ph;
        rt_prof_step_begin(pf, t->dev);
    }
    rt_dev_launch(t->dev, m->train_step, &t->ctx);
    if (R->nsim > 1)
        later_rows(lt);
    rt_mpi_set_step(step);
    if (!rt_trainer_reduce_grads(t, R->msg, sizeof R->msg)) {
        fprintf(R->err, "%s: %s\n", o->prog, R->msg);
        return 1;
    }
    return RUN_GO;
}

/* The Speedometer (MXNet's): the first batch of an epoch starts the clock;
 * every log_interval batches a line, then the local metric resets.  Whether
 * this step logged, or an exit status (> 0). */
static int run_speedometer(Run *R, bool *logs)
{
    const RtTrainOptions *o = R->o;
    RtTrainer *t = &R->t;
    int rc;
    if (R->first) {
        R->first = false;
        if ((rc = flush(&R->later, &R->nm, R->eager)) != 0)
            return rc;
        R->tic = dev_now(t);
    } else if (o->log_interval > 0 && R->nbatch % o->log_interval == 0) {
        if ((rc = flush(&R->later, &R->nm, R->eager)) != 0)
            return rc;
        *logs = true;
        double now = dev_now(t);
        double dt = now - R->tic > 0 ? now - R->tic : 1e-9;
        double speed = (double)o->log_interval * (double)R->gb / dt;
        rt_log_speedometer(R->out, &R->jl, R->m, R->epoch, R->nbatch, o->log_interval, R->step,
                           speed, &R->local, R->r.lr, R->ls.s.scale);
        R->local = (Metric){0};
        R->tic = now;
        R->logged = R->nbatch;
    }
    return 0;
}

/* One step: every rank's micro-batch the device computes (run_micro_batch),
 * the numerics' verdict, the finite check, the BatchNorm commit, the update
 * and the loss scale's rule on the device, then the host's reads when a
 * line is due (flush).  RUN_GO, or an exit status. */
static int run_step(Run *R)
{
    const RtTrainOptions *o = R->o;
    FILE *err = R->err;
    RtTrainer *t = &R->t;
    Later *lt = &R->later;
    Prof *pf = R->pf;
    Numerics *nm = &R->nm;
    int rc;
    double ph0 = pf ? dev_now(t) : 0, ph = ph0;
    /* the step's waits for the device, the profile's own left out */
    uint64_t syncs0 = t->dev->syncs, own0 = pf ? ++pf->own_syncs : 0;
    bool logs = R->first;
    if (pf) {
        pf->on = R->run_steps > 0;
        pf->past_head = false;
    }
    for (int k = 0; k < R->nsim; k++)
        if ((rc = run_micro_batch(R, &ph)) != RUN_GO)
            return rc;
    if (R->graph == GRAPH_REPLAY) {
        if (!rt_dev_graph_replay(t->dev, R->msg, sizeof R->msg)) {
            fprintf(err, "%s: step %lld: the CUDA graph's replay failed: %s\n", o->prog,
                    (long long)R->step, R->msg);
            return 1;
        }
    } else if ((rc = run_step_calls(R, &ph, R->capturing)) != RUN_GO) {
        return rc;
    }
    /* the loss head's rows, after the step's end: a CUDA graph's copy would
     * keep the slot it captured */
    if (R->nsim == 1)
        later_rows(lt);
    lt->steps++;
    if ((R->eager || lt->steps >= lt->cap_steps) && (rc = flush(lt, nm, R->eager)) != 0)
        return rc;
    R->step++;
    R->run_steps++;
    if ((rc = run_speedometer(R, &logs)) != 0)
        return rc;
    prof_phase(pf, t, PH_OTHER, &ph);
    /* a step that logs nothing (a flush of full slots in it counts) */
    uint64_t n = t->dev->syncs - syncs0 - (pf ? pf->own_syncs - own0 : 0);
    if (!logs) {
        R->r.quiet_syncs += (int64_t)n;
        R->r.quiet_steps++;
        R->r.steady_syncs += R->after_quiet ? (int64_t)n : 0;
        R->r.steady_steps += R->after_quiet;
    }
    R->after_quiet = !logs;
    if (pf && pf->on) {
        pf->step_sec += ph - ph0;
        pf->steps++;
        pf->syncs += n;
        if (!logs) {
            pf->quiet_syncs += n;
            pf->quiet_steps++;
        }
    }
    if (rt_jl_failed(&R->jl, o, err))
        return 1;
    return RUN_GO;
}

/* The step's calls after its micro-batches, up to its end (ls_update): the
 * hooks' verdicts, the finite check, the BatchNorm commit, the update and
 * the loss scale's rule; a capture ended (capture: graph_end, and the step
 * run eagerly when it made no graph).  RUN_GO, or an exit status. */
static int run_step_calls(Run *R, double *php, bool capture)
{
    const RtModel *m = R->m;
    const RtTrainOptions *o = R->o;
    FILE *out = R->out, *err = R->err;
    RtTrainer *t = &R->t;
    Prof *pf = R->pf;
    Numerics *nm = &R->nm;
    double ph = *php;
    /* the nodes have added their times to forward and backward (marked
     * nodes now, from the device's marks); what follows the last node goes
     * to its pass */
    if (pf && pf->on) {
        if (rt_prof_step_nodes(pf, t->dev, m))
            pf->last = dev_now(t);
        else
            prof_phase(pf, t, pf->past_head ? PH_BACKWARD : PH_FORWARD, &pf->last);
        ph = pf->last;
    }
    if (o->dump_state) {
        bool ok = rt_dump_state(m, t, o->dump_state, R->msg, sizeof R->msg);
        if (!ok)
            fprintf(err, "%s: %s\n", o->prog, R->msg);
        R->exit_now = true;
        return ok ? 0 : 1;
    }
    if (nm->found && (!nm->backward || R->ls.mode != RT_LS_DYNAMIC)) {
        char where[160];
        snprintf(where, sizeof where, "step %lld (epoch %lld, batch %lld), %s pass of the train "
                 "step", (long long)R->step, (long long)R->epoch, (long long)R->nbatch,
                 nm->backward ? "backward" : "forward");
        rt_numerics_report(err, o->prog, m, nm, where);
        return 1;
    }
    if (nm->found)
        fprintf(out, "Epoch[%lld] Batch [%lld]\tNumerics: gradient overflow at step %lld, first "
                "in the output of node '%s' (loss scale %g)\n", (long long)R->epoch,
                (long long)R->nbatch, (long long)R->step, nm->name,
                (double)rt_trainer_step_scale(t));
    prof_phase(pf, t, PH_OTHER, &ph);
    /* dynamic: every gradient checked before anything changes, and the
     * device skips the BatchNorm statistics and the update on its own flag;
     * else the check is fused into the update (which cannot be skipped) */
    if (R->ls.mode == RT_LS_DYNAMIC)
        rt_dev_check_grads(t->dev);
    prof_phase(pf, t, PH_CHECK, &ph);
    rt_dev_moving_update(t->dev, m->moving_update, &t->ctx);
    prof_phase(pf, t, PH_MOVING, &ph);
    rt_dev_train_update(t->dev, t->state, t->state2, &R->oc);
    rt_dev_ls_update(t->dev);
    if (t->dev->capture_errors) {
        fprintf(err, "%s: capture mode: step %lld called %s between its begin and its end (%llu "
                "such calls): a captured step may not wait for the device, read it back, "
                "allocate or free\n", o->prog, (long long)R->step, t->dev->capture_what,
                (unsigned long long)t->dev->capture_errors);
        return 1;
    }
    prof_phase(pf, t, PH_OPTIM, &ph);
    *php = ph;
    return capture ? graph_end(R, php) : RUN_GO;
}

/* The end of an epoch: the last lines, the epoch's metrics, its checkpoint
 * (the device's scale state, as the last flush read it) and the validation
 * pass.  RUN_GO, or an exit status. */
static int run_epoch_end(Run *R, int64_t skipped0, int64_t nonfinite0)
{
    const RtModel *m = R->m;
    const RtTrainOptions *o = R->o;
    FILE *out = R->out, *err = R->err;
    RtTrainer *t = &R->t;
    Later *lt = &R->later;
    int64_t epoch = R->epoch, nbatch = R->nbatch;
    int rc;
    if ((rc = flush(lt, &R->nm, R->eager)) != 0)
        return rc;
    /* the batches after the last Speedometer line get theirs too (MXNet's
     * Speedometer drops them) */
    if (o->log_interval > 0 && nbatch - 1 > R->logged) {
        double dt = dev_now(t) - R->tic > 0 ? dev_now(t) - R->tic : 1e-9;
        int n = (int)(nbatch - 1 - R->logged);
        rt_log_speedometer(out, &R->jl, m, epoch, nbatch - 1, n, R->step,
                           (double)n * (double)R->gb / dt, &R->local, R->r.lr, R->ls.s.scale);
    }
    RtEpochLog el = {.epoch = epoch, .batches = nbatch - (epoch == R->epoch0 ? R->nb0 : 0),
                     .step = R->step, .num_update = R->num_update, .train = &R->global,
                     .val = &R->val, .cost = dev_now(t) - R->t0, .amp_on = R->amp_on,
                     .skipped = R->ls.skipped - skipped0,
                     .nonfinite = R->ls.nonfinite - nonfinite0};
    R->r.train_accuracy = rt_metric_acc(&R->global);
    el.loss_scale = R->ls.s.scale;
    rt_log_epoch_train(out, m, &el);
    if (o->save_dir) {
        /* the device's scale state, as the flush above read it */
        RtRunState rs = {.seed = R->seed, .batch_size = R->gb, .epoch = epoch,
                         .batch_in_epoch = nbatch, .step = R->step,
                         .num_update = lt->dev.num_update,
                         .optimizer = (uint32_t)o->optimizer, .momentum = o->momentum,
                         .ls = R->ls};
        rs.ls.s = lt->dev.s;
        rs.ls.skipped = lt->skipped0 + lt->dev.skipped;
        rs.ls.nonfinite = lt->nonfinite0 + lt->dev.nonfinite;
        if (!rt_checkpoint_save_epoch(o->save_dir, t, rs, R->steps_per_epoch, &R->path, R->msg,
                                      sizeof R->msg)) {
            fprintf(err, "%s: %s\n", o->prog, R->msg);
            return 1;
        }
        el.checkpoint = R->path;
        rt_log_checkpoint(out, &R->jl, &el);
    }
    char when[64];
    snprintf(when, sizeof when, "after epoch %lld", (long long)epoch);
    if (!validate(m, t, &R->ds, R->idx, &R->nm, R->pf, &R->val, out, err, o->prog, when))
        return 1;
    R->validated = true;
    el.lr = R->r.lr;
    rt_log_epoch_end(out, &R->jl, m, &el);
    if (rt_jl_failed(&R->jl, o, err))
        return 1;
    return RUN_GO;
}

/* One epoch, R->epoch, from its first batch (a resumed epoch: from where the
 * checkpoint stopped) to --max-steps or its end.  RUN_GO, or an exit status. */
static int run_epoch(Run *R)
{
    const RtTrainOptions *o = R->o;
    RtTrainer *t = &R->t;
    RtDataset *ds = &R->ds;
    Later *lt = &R->later;
    int64_t epoch = R->epoch;
    R->r.epochs = (int)epoch + 1;
    rt_shuffle(R->perm, ds->ntrain, R->seed, epoch);
    if (R->perm_dev) /* in stream order: after the last epoch's batches */
        rt_dev_to_device(t->dev, R->perm_dev, R->perm, (size_t)ds->ntrain * sizeof *R->perm);
    R->global = (Metric){0};
    R->local = (Metric){0};
    lt->epoch = epoch;
    lt->ep_step = R->step;
    R->t0 = dev_now(t);
    R->tic = R->t0;
    int64_t skipped0 = R->ls.skipped, nonfinite0 = R->ls.nonfinite;
    R->nbatch = epoch == R->epoch0 ? R->nb0 : 0;
    lt->ep_batch = R->nbatch;
    if (ds->plan) /* a source that decodes ahead learns the epoch's order: this rank's */
        ds->plan(ds, epoch,
                 rank_order(R, R->nbatch, R->steps_per_epoch, R->gb, R->rank, R->b, R->world),
                 (R->steps_per_epoch - R->nbatch) * R->b * R->nsim);
    R->first = true;
    R->after_quiet = false;
    R->logged = R->nbatch; /* the Speedometer's clock starts at the epoch's first batch */
    for (; R->nbatch < R->steps_per_epoch; R->nbatch++) {
        if (o->max_steps >= 0 && R->step >= o->max_steps)
            break;
        int rc = run_step(R);
        if (rc != RUN_GO)
            return rc;
    }
    return run_epoch_end(R, skipped0, nonfinite0);
}

/* After the last epoch (or --eval-only at once): a validation when no epoch
 * ran one, --save-params, the last lines and the profile.  An exit status. */
static int run_end(Run *R)
{
    const RtModel *m = R->m;
    const RtTrainOptions *o = R->o;
    FILE *out = R->out, *err = R->err;
    RtTrainer *t = &R->t;
    if (!R->validated) {
        if (!validate(m, t, &R->ds, R->idx, &R->nm, R->pf, &R->val, out, err, o->prog,
                      "of the parameters"))
            return 1;
        if (R->val.samples)
            rt_metric_print_lines(out, m, &R->val, "Validation-");
    }
    if (o->save_params) {
        if (!rt_params_save(t, o->save_params, o->save_params_16bit, R->msg, sizeof R->msg)) {
            fprintf(err, "%s: %s\n", o->prog, R->msg);
            return 1;
        }
        fprintf(out, "Saved parameters to %s\n", o->save_params);
    }
    rt_log_end(out, &R->jl, m, &R->ls, R->step, R->num_update, &R->val);
    if (R->graph == GRAPH_REPLAY) /* counted, never timed */
        fprintf(out, "CUDA graph: step %lld captured, replayed %llu times\n",
                (long long)R->graph_step, (unsigned long long)t->dev->graph_replays);
    if (m->workspace_bytes && t->ctx.ws_bytes > t->ws_start)
        fprintf(err, "%s: warning: the workspace grew from %zu to %zu bytes after start-up (the "
                "program's workspace_bytes asked for too little)\n", o->prog, t->ws_start,
                t->ctx.ws_bytes);
    if (R->pf)
        rt_prof_report(R->pf, m, out, &R->jl);
    return rt_jl_failed(&R->jl, o, err) ? 1 : 0;
}

/* What a run that trained ends with: its result, and a text log that was
 * written (a run whose log was lost is not a success).  The exit status. */
static int run_done(Run *R, int rc, RtTrainResult *res)
{
    RtTrainResult *r = &R->r;
    r->steps = R->step;
    r->num_update = R->num_update;
    r->skipped = R->ls.skipped;
    r->graph_replays = R->have_t ? (int64_t)R->t.dev->graph_replays : 0;
    r->loss_scale = R->ls.s.scale;
    r->val_accuracy = rt_metric_acc(&R->val);
    r->val_cross_entropy = rt_metric_ce(&R->val);
    r->val_top_k = rt_metric_topk(&R->val);
    if (res)
        *res = *r;
    errno = 0;
    if ((fflush(R->out) != 0 || ferror(R->out)) && rc == 0) {
        fprintf(R->err, "%s: cannot write the log to standard output%s%s\n", R->o->prog,
                errno ? ": " : "", errno ? strerror(errno) : "");
        rc = 1;
    }
    return rc;
}

int rt_train_run(const RtModel *m, const RtTrainOptions *o, FILE *out, FILE *err,
                 RtTrainResult *res)
{
    Run run;
    memset(&run, 0, sizeof run);
    int rc = run_open(&run, m, o, out, err);
    if (rc != RUN_GO) {
        run_free(&run);
        return rc;
    }
    o = run.o; /* under MPI: this rank's */
    if (!o->eval_only)
        for (run.epoch = run.epoch0; rc == RUN_GO && run.epoch < o->epochs; run.epoch++) {
            if (o->max_steps >= 0 && run.step >= o->max_steps)
                break;
            rc = run_epoch(&run);
        }
    if (rc == RUN_GO)
        rc = run_end(&run);
    if (!run.exit_now)
        rc = run_done(&run, rc, res);
    run_free(&run);
    return rc;
}
