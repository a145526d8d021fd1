/* train.c - the training driver: the command line, buffers, the loop, loss
 * scaling, checkpoints and MXNet-style logs (docs/training.md).
 *
 * Settings come in three layers: built-in defaults, the model's
 * train_defaults ("key=value" from the train block), then the flags.  The
 * loop, per step: fill the batch, train_step (forward and backward) with
 * ctx.loss_scale, the finite check over every gradient, then, unless a
 * dynamic loss scale skips the step, moving_update (BatchNorm statistics)
 * and the optimizer over every parameter (optim.c); the loss scaler's rule
 * (lossscale.c); the metrics; a Speedometer line every --log-interval
 * batches and, per epoch, the training metrics, the time, a checkpoint
 * (checkpoint.c) and a validation pass through infer_step.  main() lives in
 * main.c, so tests link this file with their own models.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "data/data_ext.h"
#include "fileio.h"
#include "kernels/half.h"
#include "settings.h"
#include "train.h"

void openblas_set_num_threads(int num_threads);

/* ---- the workspace ---------------------------------------------------------- */

void *rt_ctx_ws(RtCtx *ctx, size_t bytes)
{
    if (bytes <= ctx->ws_bytes && ctx->ws)
        return ctx->ws;
    size_t size = (bytes + RT_WS_ALIGN - 1) / RT_WS_ALIGN * RT_WS_ALIGN;
    void *p = aligned_alloc(RT_WS_ALIGN, size ? size : RT_WS_ALIGN);
    if (!p) {
        fprintf(stderr, "error: out of memory for a workspace of %zu bytes\n", bytes);
        exit(1);
    }
    free(ctx->ws);
    ctx->ws = p;
    ctx->ws_bytes = size;
    return p;
}

/* ---- options: parsed in settings.c, one table for the train block and the flags */

/* The data source's parsed form (settings.c), by its local names. */
typedef RtDataSpec DataSpec;
enum { DS_SYNTHETIC = RT_DS_SYNTHETIC, DS_DIGITS = RT_DS_DIGITS, DS_FASHION = RT_DS_FASHION,
       DS_IDX = RT_DS_IDX, DS_CIFAR10 = RT_DS_CIFAR10 };

static bool parse_data(const char *s, DataSpec *d, char *err, size_t errlen)
{
    return rt_data_spec_parse(s, d, err, errlen);
}

static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *v)
{
    return rt_parse_i64(s, lo, hi, v);
}

static void usage(const RtTrainOptions *o, FILE *out)
{
    const RtLossScaleConfig *ls = &o->loss_scale;
    char lsd[160];
    if (ls->mode == RT_LS_DEFAULT)
        snprintf(lsd, sizeof lsd, "float16: dynamic, else off");
    else if (ls->mode == RT_LS_STATIC)
        snprintf(lsd, sizeof lsd, "%g", (double)ls->init);
    else
        snprintf(lsd, sizeof lsd, "%s", rt_loss_scale_mode_name(ls->mode));
    fprintf(out,
            "Usage: %s [options]\n"
            "Trains the model compiled into this program (docs/training.md).\n"
            "\n"
            "  --epochs N          passes over the training set (%d)\n"
            "  --max-steps N       stop after N steps (batches) in all (no limit)\n"
            "  --batch-size N      samples per step (%lld)\n"
            "  --lr X              learning rate%s (%g), or a schedule: constant(base=),\n"
            "                      cosine(...), step(factor=, steps=), poly(power=, final=)\n"
            "  --optimizer SPEC    sgd(...), nag(...) or adam(beta1=0.9, beta2=0.999,\n"
            "                      epsilon=1e-8, wd=) (%s)\n"
            "  --init SPEC         the weights' initialiser: xavier(...), msra_prelu(...),\n"
            "                      uniform(scale=0.07), normal(sigma=0.01), zero, one\n"
            "  --momentum X        SGD/NAG momentum, 0 for none (%g)\n"
            "  --wd X              weight decay (%g)\n"
            "  --loss-scale S      dynamic, dynamic(init=, growth=, backoff=, interval=, min=,\n"
            "                      max=), off, or a number: a static scale (%s)\n"
            "  --seed N            initialisation, shuffling and synthetic data (%llu)\n"
            "  --data SOURCE       synthetic | digits | fashion_mnist | fashion_mnist(\"DIR\")\n"
            "                      | idx(TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS)\n"
            "                      | cifar10 | cifar10(\"DIR\") (%s)\n"
            "  --data-dir DIR      where digits.csv.gz, fashion-mnist/ and cifar10/ are\n"
            "                      (%s; default $AMPC_DATA_DIR)\n"
            "  --augment LIST      training images: crop=PAD (zero padding, then a random\n"
            "                      crop), mirror (random flips), off (%s)\n"
            "  --random-crop PAD, --random-mirror   the same as separate flags\n"
            "  --json-log FILE     every log event as one JSON object per line\n"
            "  --profile           time per node, node kind and phase, printed at the end\n"
            "  --log-interval N    batches between progress lines, 0 for none (%d)\n"
            "  --save-dir DIR      a checkpoint per epoch: DIR/<model>-<epoch>.params\n"
            "  --resume FILE       continue from a checkpoint\n"
            "  --eval-only         validate the resumed (or initial) parameters and stop\n"
            "  --threads N         OpenBLAS threads (OpenBLAS's default)\n"
            "  --check-numerics    name the first node whose output holds inf or NaN\n"
            "  -h, --help          this text\n"
            "Testing: --inject-inf-at-step=K (step K's gradients overflow),\n"
            "  --inject-nan=NODE:STEP (a NaN in NODE's output at STEP),\n"
            "  --dump-state FILE (write the first step's gradients and stop)\n",
            o->prog, o->epochs, (long long)o->batch_size,
            o->sched.kind != RT_LR_CONSTANT ? " (the schedule's base)" : "", (double)o->lr,
            o->optimizer == RT_OPT_ADAM ? "adam" : o->optimizer == RT_OPT_NAG ? "nag" : "sgd",
            (double)o->momentum, (double)o->wd, lsd, (unsigned long long)o->seed, o->data,
            o->data_dir,
            o->augment_pad && o->augment_mirror ? "crop and mirror"
            : o->augment_pad ? "crop" : o->augment_mirror ? "mirror" : "off",
            o->log_interval);
}

/* The long options of every flag in the table (getopt_long's val: 256 + its
 * index), then --help. */
static const struct option *long_options(void)
{
    static struct option longopts[64];
    if (longopts[0].name)
        return longopts;
    int n = 0;
    for (int i = 0; i < rt_nsettings && n < 62; i++)
        if (rt_settings[i].flag)
            longopts[n++] = (struct option){rt_settings[i].flag,
                                            rt_settings[i].has_arg ? required_argument
                                                                   : no_argument,
                                            NULL, 256 + i};
    longopts[n] = (struct option){"help", no_argument, NULL, 'h'};
    return longopts;
}

int rt_train_parse_args(RtTrainOptions *o, int argc, char **argv, FILE *out, FILE *err)
{
    const struct option *longopts = long_options();
    if (argc > 0 && argv[0]) {
        const char *slash = strrchr(argv[0], '/');
        o->prog = slash ? slash + 1 : argv[0];
    }
    opterr = 0;
    optind = 0; /* GNU: rescan from the start (several parses in one process) */
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        if (c == 'h') {
            usage(o, out);
            return 0;
        }
        if (c == ':') {
            fprintf(err, "%s: option '%s' needs a value\nTry '%s --help'.\n", o->prog,
                    argv[optind - 1], o->prog);
            return 2;
        }
        if (c < 256 || c >= 256 + rt_nsettings) {
            if (optopt && strncmp(argv[optind - 1], "--", 2) == 0)
                fprintf(err, "%s: option '%.*s' takes no value\n", o->prog,
                        (int)strcspn(argv[optind - 1], "="), argv[optind - 1]);
            else if (optopt)
                fprintf(err, "%s: unknown option '-%c'\n", o->prog, optopt);
            else
                fprintf(err, "%s: unknown option '%s'\n", o->prog, argv[optind - 1]);
            fprintf(err, "Try '%s --help'.\n", o->prog);
            return 2;
        }
        const RtSetting *s = &rt_settings[c - 256];
        char msg[512];
        if (!rt_setting_apply(o, s, optarg, RT_FROM_FLAG, msg, sizeof msg)) {
            fprintf(err, "%s: --%s: %s\nTry '%s --help'.\n", o->prog, s->flag, msg, o->prog);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(err, "%s: unexpected argument '%s'\nTry '%s --help'.\n", o->prog, argv[optind],
                o->prog);
        return 2;
    }
    return -1;
}

/* ---- buffers ------------------------------------------------------------------- */

static void *alloc64(size_t bytes)
{
    size_t size = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, size ? size : 64);
    if (p)
        memset(p, 0, size ? size : 64);
    return p;
}

static int64_t buffer_elems(const RtBuffer *b, int64_t batch)
{
    if (b->fixed < 0 || b->per_sample < 0 ||
        (b->per_sample > 0 && batch > (INT64_MAX / 8 - b->fixed) / b->per_sample))
        return -1;
    return b->fixed + b->per_sample * batch;
}

int64_t rt_buffer_elems(const RtModel *m, int b, int64_t batch)
{
    return b >= 0 && b < m->nbuffers ? buffer_elems(&m->buffers[b], batch) : -1;
}

void rt_trainer_free(RtTrainer *t)
{
    if (t->ctx.buf)
        for (int i = 0; i < t->m->nbuffers; i++)
            free(t->ctx.buf[i]);
    if (t->ctx.master)
        for (int i = 0; i < t->m->nparams; i++)
            free(t->ctx.master[i]);
    if (t->state)
        for (int i = 0; i < t->m->nparams; i++)
            free(t->state[i]);
    if (t->state2)
        for (int i = 0; i < t->m->nparams; i++)
            free(t->state2[i]);
    free(t->ctx.buf);
    free(t->ctx.master);
    free(t->state);
    free(t->state2);
    free(t->ctx.ws);
    memset(t, 0, sizeof *t);
}

static bool check_buffer(const RtModel *m, int b, RtDType dt, int64_t need, int64_t batch,
                         const char *what, char *err, size_t errlen)
{
    if (b < 0 || b >= m->nbuffers) {
        snprintf(err, errlen, "model %s: %s is buffer %d of %d", m->name, what, b, m->nbuffers);
        return false;
    }
    if (m->buffers[b].dtype != dt) {
        snprintf(err, errlen, "model %s: %s (buffer %d) is %s, expected %s", m->name, what, b,
                 rt_dtype_name(m->buffers[b].dtype), rt_dtype_name(dt));
        return false;
    }
    if (buffer_elems(&m->buffers[b], batch) < need) {
        snprintf(err, errlen, "model %s: %s (buffer %d) holds %lld elements, needs %lld", m->name,
                 what, b, (long long)buffer_elems(&m->buffers[b], batch), (long long)need);
        return false;
    }
    return true;
}

bool rt_trainer_init(RtTrainer *t, const RtModel *m, int64_t batch, int nstate, char *err,
                     size_t errlen)
{
    bool with_state = nstate >= 1;
    memset(t, 0, sizeof *t);
    t->m = m;
    t->batch = batch;
    t->ctx.batch = batch;
    t->ctx.loss_scale = 1.0f;
    int64_t sample = 1;
    for (int i = 0; i < m->data_rank; i++)
        sample *= m->data_shape[i];
    if (m->classes < 1 || m->data_rank < 0 || m->data_rank > RT_MAX_RANK || batch < 1) {
        snprintf(err, errlen, "model %s: %lld classes, input rank %d, batch %lld", m->name,
                 (long long)m->classes, m->data_rank, (long long)batch);
        return false;
    }
    if (!check_buffer(m, m->data, RT_F32, sample * batch, batch, "the data input", err, errlen) ||
        !check_buffer(m, m->label, RT_F32, batch, batch, "the label input", err, errlen) ||
        !check_buffer(m, m->prob_train, RT_F32, m->classes * batch, batch,
                      "the train step's output", err, errlen) ||
        !check_buffer(m, m->prob_infer, RT_F32, m->classes * batch, batch,
                      "the inference step's output", err, errlen))
        return false;
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        char what[160];
        snprintf(what, sizeof what, "parameter %s", p->name);
        if (!check_buffer(m, p->buffer, p->dtype, p->numel, batch, what, err, errlen))
            return false;
        if (p->grad >= 0) {
            snprintf(what, sizeof what, "the gradient of %s", p->name);
            if (p->grad >= m->nbuffers) {
                snprintf(err, errlen, "model %s: %s is buffer %d of %d", m->name, what, p->grad,
                         m->nbuffers);
                return false;
            }
            if (!check_buffer(m, p->grad, m->buffers[p->grad].dtype, p->numel, batch, what, err,
                              errlen))
                return false;
        }
    }
    t->ctx.buf = calloc((size_t)m->nbuffers + 1, sizeof *t->ctx.buf);
    t->ctx.master = calloc((size_t)m->nparams + 1, sizeof *t->ctx.master);
    t->state = calloc((size_t)m->nparams + 1, sizeof *t->state);
    if (nstate >= 2)
        t->state2 = calloc((size_t)m->nparams + 1, sizeof *t->state2);
    bool ok = t->ctx.buf && t->ctx.master && t->state && (nstate < 2 || t->state2);
    for (int i = 0; ok && i < m->nbuffers; i++) {
        int64_t n = buffer_elems(&m->buffers[i], batch);
        ok = n >= 0 && (t->ctx.buf[i] = alloc64((size_t)n * rt_dtype_size(m->buffers[i].dtype)));
    }
    for (int i = 0; ok && i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        if (p->has_master)
            ok = (t->ctx.master[i] = alloc64((size_t)p->numel * sizeof(float))) != NULL;
        if (ok && with_state && p->grad >= 0)
            ok = (t->state[i] = alloc64((size_t)p->numel * sizeof(float))) != NULL;
        if (ok && nstate >= 2 && p->grad >= 0)
            ok = (t->state2[i] = alloc64((size_t)p->numel * sizeof(float))) != NULL;
    }
    if (!ok) {
        snprintf(err, errlen, "model %s: out of memory for the buffers at batch size %lld",
                 m->name, (long long)batch);
        rt_trainer_free(t);
        return false;
    }
    return true;
}

bool rt_trainer_init_params(RtTrainer *t, const char *weight_init, uint64_t seed, char *err,
                            size_t errlen)
{
    const RtModel *m = t->m;
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        void *buf = t->ctx.buf[p->buffer];
        float *w32 = p->has_master ? t->ctx.master[i]
                   : p->dtype == RT_F32 ? buf : malloc((size_t)p->numel * sizeof(float));
        if (!w32) {
            snprintf(err, errlen, "out of memory");
            return false;
        }
        bool ok = rt_init_param(p, weight_init, seed, w32, err, errlen);
        if (ok && p->dtype == RT_F16)
            ampc_float_to_half_n(buf, w32, (size_t)p->numel);
        else if (ok && p->dtype == RT_BF16)
            ampc_float_to_bf16_n(buf, w32, (size_t)p->numel);
        else if (ok && p->has_master) /* an fp32 parameter with a master: keep both */
            memcpy(buf, w32, (size_t)p->numel * sizeof(float));
        if (w32 != buf && !p->has_master)
            free(w32);
        if (!ok)
            return false;
    }
    return true;
}


/* ---- the learning rate -------------------------------------------------------- */

float rt_lr_at(const RtLrSchedule *s, float base_lr, int64_t t, int64_t steps_per_epoch,
               int64_t total_steps)
{
    if (s->kind == RT_LR_CONSTANT)
        return base_lr;
    /* MXNet's LRScheduler warmup (shared by Cosine, Poly, Factor and
     * MultiFactor), in double as Python computes it */
    double warm = s->warmup_steps > 0
                      ? (double)s->warmup_steps
                      : floor((double)s->warmup_epochs * (double)steps_per_epoch + 0.5);
    double tt = (double)t, base = (double)base_lr;
    if (tt < warm) {
        if (s->warmup_mode == RT_WARMUP_CONSTANT)
            return s->warmup_begin;
        return (float)(s->warmup_begin + (base - s->warmup_begin) * tt / warm);
    }
    if (s->kind == RT_LR_STEP) {
        /* FactorScheduler: while t > count + step: count += step, lr *= factor,
         * floored at stop_factor_lr.  MultiFactorScheduler: lr *= factor for
         * every listed step s_i with t > s_i.  Both multiply repeatedly. */
        double lr = base;
        if (s->period > 0) {
            for (int64_t count = 0; tt > (double)(count + s->period); count += s->period) {
                lr *= (double)s->factor;
                if (lr < (double)s->stop_lr)
                    lr = (double)s->stop_lr;
            }
        } else {
            for (int i = 0; i < s->nsteps; i++) {
                double at = (double)s->steps[i] *
                            (s->steps_in_epochs ? (double)steps_per_epoch : 1.0);
                if (tt > at)
                    lr *= (double)s->factor;
            }
        }
        return (float)lr;
    }
    double max_update = s->max_update > 0 ? (double)s->max_update : (double)total_steps;
    if (tt > max_update || max_update <= warm)
        return s->final_lr; /* MXNet keeps the last value, which is final_lr */
    if (s->kind == RT_LR_POLY) {
        /* PolyScheduler: final + (base - final) * (1 - (t - warm)/(max - warm))^pwr */
        double frac = 1.0 - (tt - warm) / (max_update - warm);
        return (float)(s->final_lr + (base - s->final_lr) * pow(frac, (double)s->power));
    }
    /* CosineScheduler(max_update, base_lr, final_lr, warmup_steps,
     * warmup_begin_lr, warmup_mode) */
    double cosine = 1.0 + cos(3.141592653589793 * (tt - warm) / (max_update - warm));
    return (float)(s->final_lr + (base - s->final_lr) * cosine / 2.0);
}

/* ---- metrics ------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define TOP_K 5

typedef struct {
    int64_t correct, topk, ce_count, samples;
    double ce_sum;
} Metric;

/* Rows whose label is among the k most probable classes, ties broken as
 * the accuracy's argmax (the first maximum): MXNet's TopKAccuracy. */
static int64_t topk_count(int64_t n, int64_t classes, const float *p, const float *label, int k)
{
    int64_t hit = 0;
    for (int64_t r = 0; r < n; r++) {
        const float *row = p + r * classes;
        float lf = label[r];
        if (!(lf >= 0 && lf < (float)classes))
            continue;
        int64_t l = (int64_t)lf, rank = 0;
        for (int64_t j = 0; j < classes; j++)
            rank += row[j] > row[l] || (j < l && row[j] == row[l]);
        hit += rank < k;
    }
    return hit;
}

static void metric_add(Metric *mt, const RtModel *m, const RtCtx *ctx, int prob, int64_t n)
{
    const void *p = ctx->buf[prob];
    const float *label = ctx->buf[m->label];
    RtDType dt = m->buffers[prob].dtype;
    int64_t cnt = 0;
    mt->correct += rt_accuracy_count(n, m->classes, dt, p, label);
    mt->ce_sum += rt_cross_entropy_sum(n, m->classes, dt, p, label, &cnt);
    mt->ce_count += cnt;
    if (m->classes > TOP_K && dt == RT_F32)
        mt->topk += topk_count(n, m->classes, p, label, TOP_K);
    mt->samples += n;
}

static double metric_acc(const Metric *mt)
{
    return mt->samples ? (double)mt->correct / (double)mt->samples : 0.0;
}

static double metric_topk(const Metric *mt)
{
    return mt->samples ? (double)mt->topk / (double)mt->samples : 0.0;
}

static double metric_ce(const Metric *mt)
{
    return mt->ce_count ? mt->ce_sum / (double)mt->ce_count : 0.0;
}

/* "accuracy=..\tcross-entropy=..[\ttop_k_accuracy_5=..]" with a prefix per
 * name ("" for the Speedometer, "Train-"/"Validation-" per line). */
static void metric_print_inline(FILE *out, const RtModel *m, const Metric *mt)
{
    fprintf(out, "accuracy=%f\tcross-entropy=%f", metric_acc(mt), metric_ce(mt));
    if (m->classes > TOP_K)
        fprintf(out, "\ttop_k_accuracy_%d=%f", TOP_K, metric_topk(mt));
}

static void metric_print_lines(FILE *out, const RtModel *m, const Metric *mt, const char *pre)
{
    fprintf(out, "%saccuracy=%f\n", pre, metric_acc(mt));
    fprintf(out, "%scross-entropy=%f\n", pre, metric_ce(mt));
    if (m->classes > TOP_K)
        fprintf(out, "%stop_k_accuracy_%d=%f\n", pre, TOP_K, metric_topk(mt));
}

/* Fisher-Yates from (seed, epoch): a pure function of both. */
static void shuffle(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch)
{
    uint64_t stream = rt_mix64(rt_hash_name("shuffle") + (uint64_t)epoch);
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(rt_rand_u64(seed, stream, (uint64_t)i) % (uint64_t)(i + 1));
        int64_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
}

/* ---- --check-numerics and --inject-nan: the after_node hook ------------------- */

typedef struct {
    bool check;            /* --check-numerics */
    bool train;            /* in the train step (else the inference step) */
    bool past_head;        /* the loss head has run: later nodes are the backward pass */
    const char *nan_node;  /* --inject-nan */
    int64_t nan_step;
    bool found;            /* a node's output held inf/NaN in this step */
    bool backward;         /* ... in the backward pass */
    char name[128];
    int buffer;
} Numerics;

static void numerics_node(RtCtx *ctx, Numerics *nm, const RtModel *m, const char *name,
                          int buffer)
{
    if (!nm || !name || buffer < 0 || buffer >= m->nbuffers)
        return;
    RtDType dt = m->buffers[buffer].dtype;
    if (nm->train && nm->nan_node && (int64_t)ctx->step == nm->nan_step &&
        strcmp(name, nm->nan_node) == 0) {
        if (dt == RT_F32) {
            float nan = NAN;
            memcpy(ctx->buf[buffer], &nan, sizeof nan);
        } else {
            uint16_t bits = dt == RT_F16 ? 0x7e00u : 0x7fc0u;
            memcpy(ctx->buf[buffer], &bits, sizeof bits);
        }
    }
    if (nm->check && !nm->found) {
        int64_t n = rt_buffer_elems(m, buffer, ctx->batch);
        if (n > 0 && !rt_all_finite(ctx->buf[buffer], (size_t)n, dt)) {
            nm->found = true;
            nm->backward = nm->train && nm->past_head;
            nm->buffer = buffer;
            snprintf(nm->name, sizeof nm->name, "%s", name);
        }
    }
    if (nm->train && buffer == m->prob_train)
        nm->past_head = true;
}

static void numerics_report(FILE *err, const char *prog, const RtModel *m, const Numerics *nm,
                            const char *where)
{
    fprintf(err, "%s: --check-numerics: %s: the output of node '%s' (buffer %d, %s) holds inf "
            "or NaN\n", prog, where, nm->name, nm->buffer,
            rt_dtype_name(m->buffers[nm->buffer].dtype));
}

/* The validation set through infer_step, batch by batch; the last partial
 * batch is padded by repeating its first sample and only its real rows
 * count.  False when --check-numerics found inf/NaN (reported to err). */
typedef struct Prof Prof;
static void prof_infer(Prof *pf, bool begin);

static bool validate(const RtModel *m, RtTrainer *t, const RtDataset *ds, int64_t *idx,
                     Numerics *nm, Prof *pf, Metric *res, FILE *err, const char *prog,
                     const char *when)
{
    Metric mt = {0};
    int64_t b = t->batch;
    float *x = t->ctx.buf[m->data], *y = t->ctx.buf[m->label];
    for (int64_t at = 0; at < ds->nval; at += b) {
        int64_t n = ds->nval - at < b ? ds->nval - at : b;
        for (int64_t j = 0; j < b; j++)
            idx[j] = at + (j < n ? j : 0);
        ds->fill(ds, RT_SPLIT_VAL, idx, b, x, y);
        t->ctx.batch = b;
        nm->train = false;
        nm->found = false;
        if (pf)
            prof_infer(pf, true);
        m->infer_step(&t->ctx);
        if (pf)
            prof_infer(pf, false);
        if (nm->found) {
            char where[160];
            snprintf(where, sizeof where, "validation %s, samples %lld-%lld (inference step)",
                     when, (long long)at, (long long)(at + n - 1));
            numerics_report(err, prog, m, nm, where);
            return false;
        }
        metric_add(&mt, m, &t->ctx, m->prob_infer, n);
    }
    *res = mt;
    return true;
}

static bool has_file(const char *dir, const char *name)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
        return true;
    snprintf(path, sizeof path, "%s/%s.gz", dir, name);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A path argument of a data source: as given when it exists (or is
 * absolute), else under the data directory when it exists there. */
static void data_path(char *dst, size_t cap, const char *arg, const char *data_dir)
{
    struct stat st;
    snprintf(dst, cap, "%s", arg);
    if (arg[0] == '/' || stat(arg, &st) == 0)
        return;
    char alt[4200];
    snprintf(alt, sizeof alt, "%s/%s", data_dir, arg);
    if (stat(alt, &st) == 0)
        snprintf(dst, cap, "%s", alt);
}

/* The data set of o->data (docs/training.md, Data).  Returns 0, 1 (a data
 * error) or 2 (a source the model cannot take). */
static int open_data(const RtModel *m, const RtTrainOptions *o, uint64_t seed, int64_t sample,
                     RtDataset *ds, FILE *err)
{
    char msg[1024];
    DataSpec d;
    if (!parse_data(o->data, &d, msg, sizeof msg)) {
        fprintf(err, "%s: data source %s\n", o->prog, msg);
        return 2;
    }
    if (d.kind == DS_SYNTHETIC) {
        rt_data_synthetic(ds, sample, m->classes, seed, RT_SYNTHETIC_TRAIN, RT_SYNTHETIC_VAL);
        return 0;
    }
    if (d.kind == DS_DIGITS) {
        if (sample != RT_DIGITS_PIXELS || m->classes < RT_DIGITS_CLASSES) {
            fprintf(err, "%s: the digits data are 8x8 images of 10 classes; model %s takes %lld "
                    "values per sample and has %lld classes\n", o->prog, m->name,
                    (long long)sample, (long long)m->classes);
            return 2;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/digits.csv.gz", o->data_dir);
        if (!rt_data_digits(ds, path, msg, sizeof msg)) {
            fprintf(err, "%s: %s\n", o->prog, msg);
            if (strstr(msg, "cannot open"))
                fprintf(err, "%s: set --data-dir or AMPC_DATA_DIR to the directory of "
                        "digits.csv.gz (Debian's python3-sklearn: sklearn/datasets/data/)\n",
                        o->prog);
            return 1;
        }
        return 0;
    }
    bool ok;
    const char *what;
    if (d.kind == DS_FASHION) {
        what = "Fashion-MNIST";
        char dir[4200];
        /* fashion_mnist("DIR"); else DATA_DIR/fashion-mnist, DATA_DIR, then
         * Debian's /usr/share/datasets/fashion-mnist */
        if (d.given[0])
            data_path(dir, sizeof dir, d.arg[0], o->data_dir);
        else {
            snprintf(dir, sizeof dir, "%s/fashion-mnist", o->data_dir);
            if (!has_file(dir, "train-images-idx3-ubyte"))
                snprintf(dir, sizeof dir, "%s", o->data_dir);
            if (!has_file(dir, "train-images-idx3-ubyte"))
                snprintf(dir, sizeof dir, "%s", RT_FASHION_MNIST_DIR);
        }
        ok = rt_data_fashion_mnist(ds, dir, msg, sizeof msg);
        if (!ok) {
            fprintf(err, "%s: %s\n", o->prog, msg);
            fprintf(err, "%s: Fashion-MNIST is Debian's dataset-fashion-mnist (apt-get install "
                    "dataset-fashion-mnist: %s), or 'make fashion' (into DATA_DIR/fashion-mnist); "
                    "set --data-dir, AMPC_DATA_DIR or fashion_mnist(\"DIR\")\n", o->prog,
                    RT_FASHION_MNIST_DIR);
            return 1;
        }
    } else if (d.kind == DS_IDX) {
        what = "the IDX files";
        int64_t classes = 10;
        if (d.given[4])
            parse_i64(d.arg[4], 2, 1 << 20, &classes);
        static char f[4][4200];
        for (int k = 0; k < 4; k++)
            data_path(f[k], sizeof f[k], d.arg[k], o->data_dir);
        ok = d.given[4] ? rt_data_idx_classes(ds, f[0], f[1], f[2], f[3], classes, msg, sizeof msg)
                        : rt_data_idx(ds, f[0], f[1], f[2], f[3], msg, sizeof msg);
        if (!ok) {
            fprintf(err, "%s: %s\n", o->prog, msg);
            return 1;
        }
    } else {
        what = "CIFAR-10";
        char dir[4200];
        if (d.given[0])
            data_path(dir, sizeof dir, d.arg[0], o->data_dir);
        else {
            snprintf(dir, sizeof dir, "%s/cifar10", o->data_dir);
            if (!is_dir(dir))
                snprintf(dir, sizeof dir, "%s", o->data_dir);
        }
        if (!rt_data_cifar10(ds, dir, msg, sizeof msg)) {
            fprintf(err, "%s: %s\n", o->prog, msg);
            return 1;
        }
    }
    if (ds->sample_size != sample || ds->classes > m->classes) {
        fprintf(err, "%s: %s hold %lld values per sample in %lld classes; model %s takes %lld "
                "values per sample and has %lld classes\n", o->prog, what,
                (long long)ds->sample_size, (long long)ds->classes, m->name, (long long)sample,
                (long long)m->classes);
        return 2;
    }
    return 0;
}

/* An image source's [C, H, W] against the model's input: equal once the
 * dimensions of size 1 are dropped from both (1x64 images are not 8x8 ones,
 * though both hold 64 values).  A flat (rank 1) input takes any image.
 * Returns 0, or 2 with a message. */
static int check_image_shape(const RtModel *m, const RtDataset *ds, const RtTrainOptions *o,
                             FILE *err)
{
    if (!ds->image[0] || m->data_rank <= 1)
        return 0;
    int64_t a[RT_MAX_RANK + 3], b[3];
    int na = 0, nb = 0;
    for (int d = 0; d < m->data_rank; d++)
        if (m->data_shape[d] != 1)
            a[na++] = m->data_shape[d];
    for (int d = 0; d < 3; d++)
        if (ds->image[d] != 1)
            b[nb++] = ds->image[d];
    bool same = na == nb;
    for (int d = 0; same && d < na; d++)
        same = a[d] == b[d];
    if (same)
        return 0;
    char ms[160] = "";
    size_t at = 0;
    for (int d = 0; d < m->data_rank && at < sizeof ms; d++)
        at += (size_t)snprintf(ms + at, sizeof ms - at, "%s%lld", d ? "x" : "",
                               (long long)m->data_shape[d]);
    fprintf(err, "%s: data %s: its images are %lldx%lldx%lld (channels x rows x columns); model "
            "%s takes %s per sample\n", o->prog, ds->name, (long long)ds->image[0],
            (long long)ds->image[1], (long long)ds->image[2], m->name, ms);
    return 2;
}

/* ---- --json-log: one JSON object per event, per line (JSON Lines) ------------ */

typedef struct {
    FILE *f;
    double t0;
    bool comma; /* a member precedes: the next needs a comma */
    int werr;   /* errno of the first failed write (a full disk): the run stops; 0: none */
} JLog;

static void jl_raw_str(FILE *f, const char *s)
{
    fputc('"', f);
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned char c = *p;
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc(c, f);
            p++;
        } else if (c < 0x20 || c == 0x7f) {
            switch (c) {
            case '\n': fputs("\\n", f); break;
            case '\t': fputs("\\t", f); break;
            case '\r': fputs("\\r", f); break;
            default: fprintf(f, "\\u%04x", c);
            }
            p++;
        } else if (c < 0x80) {
            fputc(c, f);
            p++;
        } else {
            /* UTF-8 passes through when well formed; any other byte is U+FFFD */
            int n = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
            bool good = n > 0;
            for (int k = 1; good && k < n; k++)
                good = (p[k] & 0xc0) == 0x80;
            if (good && n == 3 && ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0)))
                good = false; /* overlong or a surrogate */
            if (good && n == 4 && ((c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] >= 0x90)))
                good = false;
            if (good) {
                fwrite(p, 1, (size_t)n, f);
                p += n;
            } else {
                fputs("\\ufffd", f);
                p++;
            }
        }
    }
    fputc('"', f);
}

static void jl_key(JLog *j, const char *key)
{
    if (j->comma)
        fputc(',', j->f);
    jl_raw_str(j->f, key);
    fputc(':', j->f);
    j->comma = true;
}

static void jl_begin(JLog *j, const char *event)
{
    if (!j->f)
        return;
    fputc('{', j->f);
    j->comma = false;
    jl_key(j, "event");
    jl_raw_str(j->f, event);
    jl_key(j, "time");
    fprintf(j->f, "%.6f", now_s() - j->t0);
}

static void jl_str(JLog *j, const char *key, const char *v)
{
    if (!j->f)
        return;
    jl_key(j, key);
    if (v)
        jl_raw_str(j->f, v);
    else
        fputs("null", j->f);
}

/* a finite number, else null (JSON has no inf or NaN) */
static void jl_num(JLog *j, const char *key, double v)
{
    if (!j->f)
        return;
    jl_key(j, key);
    if (isfinite(v))
        fprintf(j->f, "%.17g", v);
    else
        fputs("null", j->f);
}

static void jl_int(JLog *j, const char *key, long long v)
{
    if (!j->f)
        return;
    jl_key(j, key);
    fprintf(j->f, "%lld", v);
}

static void jl_bool(JLog *j, const char *key, bool v)
{
    if (!j->f)
        return;
    jl_key(j, key);
    fputs(v ? "true" : "false", j->f);
}

static void jl_obj(JLog *j, const char *key)
{
    if (!j->f)
        return;
    jl_key(j, key);
    fputc('{', j->f);
    j->comma = false;
}

static void jl_close(JLog *j, char c)
{
    if (!j->f)
        return;
    fputc(c, j->f);
    j->comma = true;
}

static void jl_end(JLog *j)
{
    if (!j->f)
        return;
    fputs("}\n", j->f);
    if ((fflush(j->f) != 0 || ferror(j->f)) && !j->werr)
        j->werr = errno ? errno : EIO;
}

/* A failed write of the JSON log is an error: a log cut mid-object must
 * not end in exit status 0.  Says so once; true when it failed. */
static bool jl_failed(const JLog *j, const RtTrainOptions *o, FILE *err)
{
    if (!j->werr)
        return false;
    fprintf(err, "%s: --json-log %s: write error: %s\n", o->prog, o->json_log,
            strerror(j->werr));
    return true;
}

/* "key": {"accuracy": .., "cross_entropy": .., "top_k_accuracy_5": ..} */
static void jl_metrics(JLog *j, const char *key, const RtModel *m, const Metric *mt)
{
    if (!j->f)
        return;
    jl_obj(j, key);
    jl_num(j, "accuracy", metric_acc(mt));
    jl_num(j, "cross_entropy", metric_ce(mt));
    if (m->classes > TOP_K)
        jl_num(j, "top_k_accuracy_5", metric_topk(mt));
    jl_int(j, "samples", (long long)mt->samples);
    jl_close(j, '}');
}

/* ---- --profile: time per node (the after_node hook) and per phase ----------- */

enum { PH_DATA, PH_FORWARD, PH_BACKWARD, PH_CHECK, PH_MOVING, PH_OPTIM, PH_OTHER, PH_N };
static const char *const phase_names[PH_N] = {
    "data (fill, augment)", "forward", "backward", "loss-scale check (all finite)",
    "BatchNorm moving statistics", "optimizer (fused update)", "metrics and logs"};
static const char *const phase_keys[PH_N] = {"data", "forward", "backward", "loss_scale_check",
                                             "moving_update", "optimizer", "other"};

typedef struct {
    const char *name;
    double sec;
    int64_t calls;
    bool backward;
} ProfNode;

struct Prof {
    bool on;          /* collecting (the first step of a run is not counted) */
    bool past_head;   /* the loss head has run in this train step */
    int step_fn;      /* 0 the train step, 1 the inference step */
    double last;      /* the end of the previous node (or the start of the step) */
    ProfNode *node[2];
    int cap[2];
    double phase[PH_N];
    double step_sec;  /* the train steps, whole */
    int64_t steps;
    double infer_sec; /* inference steps (validation) */
    int64_t infer_steps;
    double infer_t0;
    bool was_on;
};

static void prof_infer(Prof *pf, bool begin)
{
    double now = now_s();
    if (begin) {
        pf->was_on = pf->on;
        pf->on = true;
        pf->step_fn = 1;
        pf->last = pf->infer_t0 = now;
    } else {
        pf->infer_sec += now - pf->infer_t0;
        pf->infer_steps++;
        pf->step_fn = 0;
        pf->on = pf->was_on;
    }
}

static void prof_node(Prof *pf, const RtModel *m, int node, const char *name, int buffer,
                      double now)
{
    int f = pf->step_fn;
    if (node < 0 || node > 1000000)
        return;
    if (node >= pf->cap[f]) {
        int cap = node + 64;
        ProfNode *nn = realloc(pf->node[f], (size_t)cap * sizeof *nn);
        if (!nn)
            return;
        memset(nn + pf->cap[f], 0, (size_t)(cap - pf->cap[f]) * sizeof *nn);
        pf->node[f] = nn;
        pf->cap[f] = cap;
    }
    ProfNode *pn = &pf->node[f][node];
    pn->name = name;
    pn->sec += now - pf->last;
    pn->calls++;
    pn->backward = f == 0 && (pf->past_head || strstr(name, "_bwd") != NULL);
    if (f == 0)
        pf->phase[pn->backward ? PH_BACKWARD : PH_FORWARD] += now - pf->last;
    if (f == 0 && buffer == m->prob_train)
        pf->past_head = true;
}

/* The node kind from its name: the backward suffix ("_bwd" and what
 * follows) dropped, the scope prefixes (tokens up to one ending in a digit,
 * "basic1_") dropped, trailing digits dropped: "basic2_conv3_bwd" -> conv,
 * "softmax_output1" -> softmax_output; casts ("_amp_") -> amp_cast; a
 * backward node's suffix names a gradient sum ("conv3_bwd_plus" -> plus). */
static void node_kind(const char *name, char *kind, size_t cap)
{
    if (strstr(name, "_amp_") || strncmp(name, "amp_", 4) == 0) {
        snprintf(kind, cap, "amp_cast");
        return;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", name);
    char *bwd = strstr(buf, "_bwd");
    if (bwd) {
        char *suffix = bwd + 4;
        if (*suffix == '_' && suffix[1]) {
            snprintf(kind, cap, "%s", suffix + 1);
            return;
        }
        *bwd = 0;
    }
    /* the last token preceded by one that ends in a digit */
    size_t n = strlen(buf);
    size_t start = 0;
    for (size_t i = 1; i + 1 < n; i++)
        if (buf[i] == '_' && buf[i - 1] >= '0' && buf[i - 1] <= '9')
            start = i + 1;
    char *k = buf + start;
    size_t kl = strlen(k);
    while (kl > 1 && k[kl - 1] >= '0' && k[kl - 1] <= '9')
        k[--kl] = 0;
    if (kl > 0 && k[kl - 1] == '_')
        k[--kl] = 0;
    snprintf(kind, cap, "%s", kl ? k : name);
}

typedef struct {
    char kind[64];
    double fwd, bwd;
} ProfKind;

static int cmp_node(const void *a, const void *b)
{
    const ProfNode *x = *(const ProfNode *const *)a, *y = *(const ProfNode *const *)b;
    return x->sec < y->sec ? 1 : x->sec > y->sec ? -1 : strcmp(x->name, y->name);
}

static int cmp_kind(const void *a, const void *b)
{
    const ProfKind *x = a, *y = b;
    double sx = x->fwd + x->bwd, sy = y->fwd + y->bwd;
    return sx < sy ? 1 : sx > sy ? -1 : strcmp(x->kind, y->kind);
}

#define PROF_TOP 15

static void prof_report(const Prof *pf, FILE *out, JLog *jl)
{
    if (pf->steps == 0) {
        fprintf(out, "Profile: no train step was timed (the first step of a run is not "
                "counted)\n");
        return;
    }
    double n = (double)pf->steps, step = pf->step_sec / n;
    double ms = 1e3;
    fprintf(out, "Profile: %lld train steps timed (the first step of the run excluded), %.3f ms "
            "per step\n", (long long)pf->steps, step * ms);
    fprintf(out, "  %-32s %10s %7s\n", "phase", "ms/step", "share");
    for (int k = 0; k < PH_N; k++)
        fprintf(out, "  %-32s %10.3f %6.1f%%\n", phase_names[k], pf->phase[k] / n * ms,
                step > 0 ? 100.0 * pf->phase[k] / pf->step_sec : 0.0);
    /* kinds */
    int nn = pf->cap[0];
    ProfKind *kinds = calloc((size_t)nn + 1, sizeof *kinds);
    const ProfNode **order = calloc((size_t)nn + 1, sizeof *order);
    int nk = 0, no = 0;
    for (int i = 0; kinds && order && i < nn; i++) {
        const ProfNode *pn = &pf->node[0][i];
        if (!pn->name || pn->calls == 0)
            continue;
        order[no++] = pn;
        char kind[64];
        node_kind(pn->name, kind, sizeof kind);
        int k = 0;
        while (k < nk && strcmp(kinds[k].kind, kind) != 0)
            k++;
        if (k == nk)
            snprintf(kinds[nk++].kind, sizeof kinds[0].kind, "%s", kind);
        if (pn->backward)
            kinds[k].bwd += pn->sec;
        else
            kinds[k].fwd += pn->sec;
    }
    if (kinds && order) {
        qsort(kinds, (size_t)nk, sizeof *kinds, cmp_kind);
        qsort(order, (size_t)no, sizeof *order, cmp_node);
        fprintf(out, "  per node kind (train step)          forward   backward      total   share\n");
        for (int k = 0; k < nk; k++)
            fprintf(out, "  %-32s %10.3f %10.3f %10.3f %6.1f%%\n", kinds[k].kind,
                    kinds[k].fwd / n * ms, kinds[k].bwd / n * ms,
                    (kinds[k].fwd + kinds[k].bwd) / n * ms,
                    100.0 * (kinds[k].fwd + kinds[k].bwd) / pf->step_sec);
        fprintf(out, "  top nodes (train step)           pass       ms/step   share\n");
        for (int i = 0; i < no && i < PROF_TOP; i++)
            fprintf(out, "  %-32s %-8s %10.3f %6.1f%%\n", order[i]->name,
                    order[i]->backward ? "backward" : "forward", order[i]->sec / n * ms,
                    100.0 * order[i]->sec / pf->step_sec);
    }
    if (pf->infer_steps > 0)
        fprintf(out, "  inference step (validation): %lld batches, %.3f ms per batch\n",
                (long long)pf->infer_steps, pf->infer_sec / (double)pf->infer_steps * ms);
    fflush(out);
    if (jl->f) {
        jl_begin(jl, "profile");
        jl_int(jl, "steps", (long long)pf->steps);
        jl_num(jl, "step_ms", step * ms);
        jl_obj(jl, "phases_ms");
        for (int k = 0; k < PH_N; k++)
            jl_num(jl, phase_keys[k], pf->phase[k] / n * ms);
        jl_close(jl, '}');
        if (kinds && order) {
            jl_obj(jl, "kinds_ms");
            for (int k = 0; k < nk; k++)
                jl_num(jl, kinds[k].kind, (kinds[k].fwd + kinds[k].bwd) / n * ms);
            jl_close(jl, '}');
            jl_key(jl, "top_nodes");
            fputc('[', jl->f);
            for (int i = 0; i < no && i < PROF_TOP; i++) {
                fputs(i ? ",{" : "{", jl->f);
                jl->comma = false;
                jl_str(jl, "name", order[i]->name);
                jl_str(jl, "pass", order[i]->backward ? "backward" : "forward");
                jl_num(jl, "ms", order[i]->sec / n * ms);
                jl_close(jl, '}');
            }
            jl_close(jl, ']');
        }
        if (pf->infer_steps > 0)
            jl_num(jl, "infer_batch_ms", pf->infer_sec / (double)pf->infer_steps * ms);
        jl_end(jl);
    }
    free(kinds);
    free(order);
}

/* ---- the after_node hook: --check-numerics, --inject-nan, --profile ------- */

typedef struct {
    Numerics *nm; /* NULL when neither --check-numerics nor --inject-nan */
    Prof *pf;     /* NULL without --profile */
} Hooks;

static void after_node(RtCtx *ctx, int node, const char *name, int buffer)
{
    RtTrainer *t = (RtTrainer *)(void *)((char *)ctx - offsetof(RtTrainer, ctx));
    Hooks *h = t->hook;
    if (!h || !name)
        return;
    Prof *pf = h->pf && h->pf->on ? h->pf : NULL;
    double now = pf ? now_s() : 0;
    if (pf)
        prof_node(pf, t->m, node, name, buffer, now);
    if (h->nm) {
        numerics_node(ctx, h->nm, t->m, name, buffer);
        if (pf)
            now = now_s(); /* the check's own time is not the next node's */
    }
    if (pf)
        pf->last = now;
}

/* ---- the run ------------------------------------------------------------------- */

/* Everything a run holds, so that one cleanup frees it on every path. */
typedef struct {
    RtDataset ds;
    RtTrainer t;
    bool have_t;
    RtCheckpoint ck;
    bool have_ck;
    int64_t *perm, *idx;
    char *path;
    float *scratch; /* --augment: one sample */
    Prof *prof;     /* --profile: its node arrays */
    FILE *json;     /* --json-log */
} Run;

static void run_free(Run *r)
{
    if (r->have_t)
        rt_trainer_free(&r->t);
    if (r->have_ck)
        rt_checkpoint_free(&r->ck);
    rt_data_free(&r->ds);
    free(r->perm);
    free(r->idx);
    free(r->path);
    free(r->scratch);
    if (r->prof) {
        free(r->prof->node[0]);
        free(r->prof->node[1]);
    }
    if (r->json)
        fclose(r->json);
}

static bool has_node(const RtModel *m, const char *name)
{
    for (int i = 0; i < m->nbuffers; i++)
        if (m->buffers[i].name && strcmp(m->buffers[i].name, name) == 0)
            return true;
    return false;
}

/* mkdir -p */
static bool ensure_dir(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return true;
        snprintf(err, errlen, "--save-dir %s: not a directory", dir);
        return false;
    }
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        snprintf(err, errlen, "--save-dir: the path is too long");
        return false;
    }
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != 0)
            continue;
        char c = *p;
        *p = 0;
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "--save-dir: cannot create %.400s: %.200s", path,
                     strerror(errno));
            return false;
        }
        *p = c;
        if (c == 0)
            break;
    }
    return true;
}

int rt_train_run(const RtModel *m, const RtTrainOptions *o, FILE *out, FILE *err,
                 RtTrainResult *res)
{
    RtTrainResult r = {0};
    Run run;
    memset(&run, 0, sizeof run);
    char msg[1024];
    int rc = 0;
    rt_inputs_reset(); /* the files this run reads: no output may be one of them */
    if (!m->train_step || !m->infer_step) {
        fprintf(err, "%s: model %s has no %s step (a model needs a loss head to train)\n",
                o->prog, m->name, m->train_step ? "inference" : "train");
        return 2;
    }
    if (o->threads > 0)
        openblas_set_num_threads(o->threads);
    RtInit ini;
    if (!rt_init_parse(o->init, &ini, msg, sizeof msg)) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        return 2;
    }
    /* the settings together and against the model (ampc checked them too) */
    const char *key =
        rt_settings_check(o, m->name, m->data_rank, m->data_shape, m->classes, msg, sizeof msg);
    if (key) {
        fprintf(err, "%s: --%s: %s\n", o->prog, rt_setting_by_key(key)->flag, msg);
        return 2;
    }
    bool augment = o->augment_pad > 0 || o->augment_mirror;
    if (o->inject_nan_node[0] && !has_node(m, o->inject_nan_node)) {
        fprintf(err, "%s: --inject-nan: model %s has no node named '%s'\n", o->prog, m->name,
                o->inject_nan_node);
        return 2;
    }
    if (o->save_dir && !ensure_dir(o->save_dir, msg, sizeof msg)) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        return 2;
    }
    if (o->save_dir) /* what a run killed while saving left (docs/training.md, Writing) */
        rt_checkpoint_clean_stale(o->save_dir, m->name, err, o->prog);
    /* a checkpoint first: its seed decides the data */
    uint64_t seed = o->seed;
    if (o->resume) {
        if (!rt_checkpoint_read(o->resume, &run.ck, msg, sizeof msg)) {
            fprintf(err, "%s: %s\n", o->prog, msg);
            return 1;
        }
        run.have_ck = true;
        seed = run.ck.run.seed;
    }
    int64_t sample = 1;
    for (int i = 0; i < m->data_rank; i++)
        sample *= m->data_shape[i];
    if ((rc = open_data(m, o, seed, sample, &run.ds, err)) != 0 ||
        (rc = check_image_shape(m, &run.ds, o, err)) != 0) {
        run_free(&run);
        return rc;
    }
    RtDataset *ds = &run.ds;
    int64_t b = o->batch_size;
    int64_t steps_per_epoch = ds->ntrain / b;
    if (steps_per_epoch == 0) {
        fprintf(err, "%s: the batch size %lld exceeds the %lld training samples of %s\n", o->prog,
                (long long)b, (long long)ds->ntrain, ds->name);
        run_free(&run);
        return 2;
    }
    RtOptConfig oc = {.kind = o->optimizer, .lr = o->lr, .momentum = o->momentum, .wd = o->wd,
                      .rescale_grad = 1.0f / (float)b, .clip_gradient = o->clip_gradient,
                      .beta1 = o->beta1, .beta2 = o->beta2, .epsilon = o->epsilon};
    run.perm = malloc((size_t)ds->ntrain * sizeof *run.perm);
    run.idx = malloc((size_t)b * sizeof *run.idx);
    if (augment)
        run.scratch = malloc((size_t)sample * sizeof *run.scratch);
    if (!run.perm || !run.idx || (augment && !run.scratch)) {
        fprintf(err, "%s: out of memory\n", o->prog);
        run_free(&run);
        return 1;
    }
    RtTrainer *t = &run.t;
    bool ok = rt_trainer_init(t, m, b, rt_optim_nstate(&oc), msg, sizeof msg);
    run.have_t = ok;
    if (ok) {
        t->ctx.seed = seed;
        ok = rt_trainer_init_params(t, o->init, seed, msg, sizeof msg);
    }
    if (!ok) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        run_free(&run);
        return 1;
    }
    Numerics nm = {.check = o->check_numerics,
                   .nan_node = o->inject_nan_node[0] ? o->inject_nan_node : NULL,
                   .nan_step = o->inject_nan_step};
    Prof prof;
    memset(&prof, 0, sizeof prof);
    Prof *pf = o->profile ? &prof : NULL;
    run.prof = pf;
    Hooks hooks = {.nm = nm.check || nm.nan_node ? &nm : NULL, .pf = pf};
    if (hooks.nm || hooks.pf) {
        t->hook = &hooks;
        t->ctx.after_node = after_node;
        t->ctx.check_node = 1;
    }
    JLog jl = {.t0 = now_s()};
    const char *clash = o->json_log && rt_is_input(o->json_log) ? "--json-log"
                        : o->dump_state && rt_is_input(o->dump_state) ? "--dump-state"
                                                                      : NULL;
    if (clash) {
        fprintf(err, "%s: %s %s: this file is one of the run's inputs; refusing to overwrite "
                "it\n", o->prog, clash, clash[2] == 'j' ? o->json_log : o->dump_state);
        run_free(&run);
        return 2;
    }
    if (o->json_log) {
        /* written as the run goes (a log of a killed run is still read), so
         * not through a temporary file; a device or FIFO works as well */
        jl.f = fopen(o->json_log, "w");
        if (!jl.f) {
            fprintf(err, "%s: --json-log: cannot open %s: %s\n", o->prog, o->json_log,
                    strerror(errno));
            run_free(&run);
            return 1;
        }
        run.json = jl.f;
    }

    /* where the run starts */
    RtLossScaler ls;
    rt_loss_scaler_init(&ls, &o->loss_scale, m->amp);
    int64_t epoch0 = 0, nb0 = 0, step = 0, num_update = 0;
    if (run.have_ck) {
        const RtRunState *rs = &run.ck.run;
        if (!rt_checkpoint_apply(&run.ck, t, o->resume, err, msg, sizeof msg)) {
            fprintf(err, "%s: %s\n", o->prog, msg);
            run_free(&run);
            return 1;
        }
        if (seed != o->seed)
            fprintf(err, "%s: note: resuming with the checkpoint's seed %llu (not %llu)\n",
                    o->prog, (unsigned long long)seed, (unsigned long long)o->seed);
        if (rs->optimizer != (uint32_t)o->optimizer) { /* in range: checkpoint.c checked it */
            static const char *const names[] = {"sgd", "nag", "adam"};
            fprintf(err, "%s: note: the checkpoint was written with optimizer %s; this run uses "
                    "%s\n", o->prog, names[rs->optimizer], names[o->optimizer]);
        }
        epoch0 = rs->epoch;
        nb0 = rs->batch_in_epoch;
        step = rs->step;
        num_update = rs->num_update;
        if (rs->batch_size != b && nb0 > 0) {
            fprintf(err, "%s: warning: the checkpoint was written at batch size %lld, this run "
                    "uses %lld: it starts at the next epoch\n", o->prog,
                    (long long)rs->batch_size, (long long)b);
            epoch0++;
            nb0 = 0;
        }
        if (nb0 >= steps_per_epoch) {
            epoch0++;
            nb0 = 0;
        }
        ls.skipped = rs->ls.skipped;
        ls.nonfinite = rs->ls.nonfinite;
        if (rs->ls.mode == ls.mode && ls.mode == RT_LS_DYNAMIC) {
            ls.s = rs->ls.s;
            if (ls.s.tracker >= ls.rule.interval) { /* a shorter interval than the saved run's */
                fprintf(err, "%s: note: the checkpoint's count of clean steps (%d) reaches this "
                        "run's growth interval (%d): the scale grows after the next clean "
                        "step\n", o->prog, (int)ls.s.tracker, (int)ls.rule.interval);
                ls.s.tracker = ls.rule.interval - 1;
            }
        } else if (rs->ls.mode != ls.mode)
            fprintf(err, "%s: note: the checkpoint's loss scale is %s, this run's %s: the "
                    "scale starts at %g\n", o->prog, rt_loss_scale_mode_name(rs->ls.mode),
                    rt_loss_scale_mode_name(ls.mode), (double)ls.s.scale);
    }
    int64_t nvalues = 0;
    for (int i = 0; i < m->nparams; i++)
        nvalues += m->params[i].grad >= 0 ? m->params[i].numel : 0;
    fprintf(out, "Model %s: %lld trainable values, amp %s; data %s: %lld training and %lld "
            "validation samples; batch %lld, %lld steps per epoch\n", m->name,
            (long long)nvalues, m->amp ? m->amp : "off", ds->name, (long long)ds->ntrain,
            (long long)ds->nval, (long long)b, (long long)steps_per_epoch);
    bool amp_on = (m->amp && strcmp(m->amp, "off") != 0) || ls.mode != RT_LS_OFF;
    if (ls.mode == RT_LS_DYNAMIC)
        fprintf(out, "Loss scale: dynamic, init %.9g, growth %g, backoff %g, interval %d, min %g, "
                "max %.9g\n", (double)o->loss_scale.init, (double)ls.rule.growth,
                (double)ls.rule.backoff, ls.rule.interval, (double)ls.rule.min_scale,
                (double)ls.rule.max_scale);
    else if (amp_on)
        fprintf(out, "Loss scale: %s %g\n", rt_loss_scale_mode_name(ls.mode), (double)ls.s.scale);
    if (augment) {
        fprintf(out, "Augment: training images");
        if (o->augment_pad)
            fprintf(out, ", zero padding by %d then a random crop", o->augment_pad);
        if (o->augment_mirror)
            fprintf(out, ", a random horizontal mirror");
        fprintf(out, " (validation images unchanged)\n");
    }
    if (run.have_ck)
        fprintf(out, "Resumed from \"%s\": epoch %lld, batch %lld, step %lld, update %lld, loss "
                "scale %g\n", o->resume, (long long)epoch0, (long long)nb0, (long long)step,
                (long long)num_update, (double)ls.s.scale);
    fflush(out);
    static const char *const opt_names[] = {"sgd", "nag", "adam"};
    jl_begin(&jl, "start");
    jl_str(&jl, "model", m->name);
    jl_str(&jl, "amp", m->amp ? m->amp : "off");
    jl_str(&jl, "data", ds->name);
    jl_int(&jl, "train_samples", (long long)ds->ntrain);
    jl_int(&jl, "validation_samples", (long long)ds->nval);
    jl_int(&jl, "batch_size", (long long)b);
    jl_int(&jl, "steps_per_epoch", (long long)steps_per_epoch);
    jl_int(&jl, "epochs", o->epochs);
    if (o->max_steps >= 0)
        jl_int(&jl, "max_steps", (long long)o->max_steps);
    else
        jl_str(&jl, "max_steps", NULL);
    jl_int(&jl, "trainable_values", (long long)nvalues);
    jl_str(&jl, "optimizer", opt_names[o->optimizer]);
    jl_num(&jl, "lr", o->lr);
    jl_str(&jl, "loss_scale_mode", rt_loss_scale_mode_name(ls.mode));
    jl_num(&jl, "loss_scale", ls.s.scale);
    jl_int(&jl, "seed", (long long)seed);
    jl_int(&jl, "augment_crop", o->augment_pad);
    jl_bool(&jl, "augment_mirror", o->augment_mirror);
    jl_end(&jl);
    if (run.have_ck) {
        jl_begin(&jl, "resume");
        jl_str(&jl, "file", o->resume);
        jl_int(&jl, "epoch", (long long)epoch0);
        jl_int(&jl, "batch", (long long)nb0);
        jl_int(&jl, "step", (long long)step);
        jl_int(&jl, "num_update", (long long)num_update);
        jl_num(&jl, "loss_scale", ls.s.scale);
        jl_end(&jl);
    }
    if (jl_failed(&jl, o, err)) {
        fflush(out);
        run_free(&run);
        return 1;
    }
    int64_t run_steps = 0; /* steps of this run (the profile skips the first) */

    float *x = t->ctx.buf[m->data], *y = t->ctx.buf[m->label];
    int64_t total = steps_per_epoch * o->epochs;
    bool validated = false;
    Metric val = {0};
    if (o->eval_only)
        goto final;
    for (int64_t epoch = epoch0; epoch < o->epochs; epoch++) {
        if (o->max_steps >= 0 && step >= o->max_steps)
            break;
        r.epochs = (int)epoch + 1;
        shuffle(run.perm, ds->ntrain, seed, epoch);
        Metric global = {0}, local = {0};
        double t0 = now_s(), tic = t0;
        int64_t skipped0 = ls.skipped, nonfinite0 = ls.nonfinite;
        int64_t nbatch = epoch == epoch0 ? nb0 : 0;
        bool first = true;
        for (; nbatch < steps_per_epoch; nbatch++) {
            if (o->max_steps >= 0 && step >= o->max_steps)
                break;
            double ph0 = pf ? now_s() : 0, ph1 = 0;
            if (pf) {
                pf->on = run_steps > 0;
                pf->past_head = false;
            }
            ds->fill(ds, RT_SPLIT_TRAIN, run.perm + nbatch * b, b, x, y);
            if (augment)
                for (int64_t j = 0; j < b; j++)
                    rt_augment(x + j * sample, (int)m->data_shape[0], (int)m->data_shape[1],
                               (int)m->data_shape[2], o->augment_pad, o->augment_mirror, seed,
                               (uint64_t)epoch, run.perm[nbatch * b + j], run.scratch);
            t->ctx.batch = b;
            t->ctx.step = (uint64_t)step;
            t->ctx.loss_scale = step == o->inject_inf_step ? INFINITY : ls.s.scale;
            nm.train = true;
            nm.past_head = false;
            nm.found = false;
            if (pf) {
                ph1 = now_s();
                pf->last = ph1;
            }
            m->train_step(&t->ctx);
            if (pf && pf->on) {
                /* the nodes have added their times to forward and backward;
                 * what follows the last node goes to its pass */
                double now = now_s();
                pf->phase[PH_DATA] += ph1 - ph0;
                pf->phase[pf->past_head ? PH_BACKWARD : PH_FORWARD] += now - pf->last;
                ph1 = now;
            }
            if (o->dump_state) {
                ok = rt_dump_state(m, t, o->dump_state, msg, sizeof msg);
                if (!ok)
                    fprintf(err, "%s: %s\n", o->prog, msg);
                run_free(&run);
                return ok ? 0 : 1;
            }
            if (nm.found && (!nm.backward || ls.mode != RT_LS_DYNAMIC)) {
                char where[160];
                snprintf(where, sizeof where, "step %lld (epoch %lld, batch %lld), %s pass of "
                         "the train step", (long long)step, (long long)epoch, (long long)nbatch,
                         nm.backward ? "backward" : "forward");
                numerics_report(err, o->prog, m, &nm, where);
                rc = 1;
                goto done;
            }
            if (nm.found)
                fprintf(out, "Epoch[%lld] Batch [%lld]\tNumerics: gradient overflow at step %lld, "
                        "first in the output of node '%s' (loss scale %g)\n", (long long)epoch,
                        (long long)nbatch, (long long)step, nm.name, (double)t->ctx.loss_scale);
            metric_add(&global, m, &t->ctx, m->prob_train, b);
            metric_add(&local, m, &t->ctx, m->prob_train, b);
            /* dynamic: every gradient checked before anything changes; else
             * the check is fused into the update (which cannot be skipped) */
            bool finite = true;
            double ph2 = pf ? now_s() : 0;
            if (pf && pf->on)
                pf->phase[PH_OTHER] += ph2 - ph1; /* the metrics */
            if (ls.mode == RT_LS_DYNAMIC)
                finite = rt_optim_grads_finite(m, &t->ctx);
            if (pf && pf->on) {
                double now = now_s();
                pf->phase[PH_CHECK] += now - ph2;
                ph2 = now;
            }
            if (finite || ls.mode != RT_LS_DYNAMIC) {
                if (m->moving_update)
                    m->moving_update(&t->ctx);
                if (pf && pf->on) {
                    double now = now_s();
                    pf->phase[PH_MOVING] += now - ph2;
                    ph2 = now;
                }
                oc.lr = rt_lr_at(&o->sched, o->lr, num_update + 1, steps_per_epoch, total);
                oc.rescale_grad = (float)(1.0 / ((double)b * (double)t->ctx.loss_scale));
                oc.t = num_update + 1;
                bool f = rt_optim_step2(m, &t->ctx, t->state, t->state2, &oc);
                if (pf && pf->on) {
                    double now = now_s();
                    pf->phase[PH_OPTIM] += now - ph2;
                    ph2 = now;
                }
                if (ls.mode != RT_LS_DYNAMIC)
                    finite = f;
                num_update++;
                r.lr = oc.lr;
            }
            if (!finite) {
                int pi = o->check_numerics && !nm.found ? rt_optim_first_nonfinite(m, &t->ctx) : -1;
                if (pi >= 0)
                    fprintf(out, "Epoch[%lld] Batch [%lld]\tNumerics: the gradient of parameter "
                            "'%s' holds inf or NaN\n", (long long)epoch, (long long)nbatch,
                            m->params[pi].name);
                if (ls.mode == RT_LS_DYNAMIC)
                    fprintf(out, "Epoch[%lld] Batch [%lld]\tAMP: gradient overflow at step %lld: "
                            "step skipped (%lld skipped in all)\n", (long long)epoch,
                            (long long)nbatch, (long long)step, (long long)ls.skipped + 1);
                else if (ls.nonfinite < 10)
                    fprintf(err, "%s: warning: step %lld (epoch %lld, batch %lld): the gradients "
                            "hold inf or NaN and the update was applied (loss scale %s %g: "
                            "only dynamic loss scaling skips steps)%s\n", o->prog,
                            (long long)step, (long long)epoch, (long long)nbatch,
                            rt_loss_scale_mode_name(ls.mode), (double)ls.s.scale,
                            ls.nonfinite == 9 ? "; further such steps are counted, not reported"
                                              : "");
                jl_begin(&jl, ls.mode == RT_LS_DYNAMIC ? "skipped_step" : "nonfinite_step");
                jl_int(&jl, "epoch", (long long)epoch);
                jl_int(&jl, "batch", (long long)nbatch);
                jl_int(&jl, "step", (long long)step);
                jl_num(&jl, "loss_scale", t->ctx.loss_scale);
                jl_int(&jl, ls.mode == RT_LS_DYNAMIC ? "skipped_total" : "nonfinite_total",
                       (long long)(ls.mode == RT_LS_DYNAMIC ? ls.skipped : ls.nonfinite) + 1);
                jl_str(&jl, "first_nonfinite_node", nm.found ? nm.name : NULL);
                jl_str(&jl, "first_nonfinite_param", pi >= 0 ? m->params[pi].name : NULL);
                jl_end(&jl);
            }
            float scale_before = ls.s.scale;
            rt_loss_scaler_update(&ls, finite, out, err);
            if (ls.s.scale != scale_before) {
                jl_begin(&jl, "loss_scale");
                jl_int(&jl, "epoch", (long long)epoch);
                jl_int(&jl, "batch", (long long)nbatch);
                jl_int(&jl, "step", (long long)step);
                jl_num(&jl, "old", scale_before);
                jl_num(&jl, "new", ls.s.scale);
                jl_str(&jl, "change", ls.s.scale < scale_before ? "decrease" : "increase");
                jl_end(&jl);
            }
            if (rt_loss_scaler_exhausted(&ls)) {
                fprintf(err, "%s: error: step %lld: the loss scale underflowed to %g (the "
                        "gradients overflow at every scale): the forward pass or the data hold "
                        "inf or NaN (find the node with --check-numerics)\n", o->prog,
                        (long long)step, (double)ls.s.scale);
                rc = 1;
                goto done;
            }
            step++;
            run_steps++;
            /* MXNet's Speedometer: the first batch starts the clock; every
             * log_interval batches a line, then the local metric resets */
            if (first) {
                first = false;
                tic = now_s();
            } else if (o->log_interval > 0 && nbatch % o->log_interval == 0) {
                double now = now_s();
                double dt = now - tic > 0 ? now - tic : 1e-9;
                double speed = (double)o->log_interval * (double)b / dt;
                fprintf(out, "Epoch[%lld] Batch [%lld-%lld]\tSpeed: %.2f samples/sec\t",
                        (long long)epoch, (long long)(nbatch - o->log_interval),
                        (long long)nbatch, speed);
                metric_print_inline(out, m, &local);
                fputc('\n', out);
                fflush(out);
                jl_begin(&jl, "speedometer");
                jl_int(&jl, "epoch", (long long)epoch);
                jl_int(&jl, "batch_begin", (long long)(nbatch - o->log_interval));
                jl_int(&jl, "batch_end", (long long)nbatch);
                jl_int(&jl, "step", (long long)step);
                jl_num(&jl, "samples_per_sec", speed);
                jl_metrics(&jl, "metrics", m, &local);
                jl_num(&jl, "lr", r.lr);
                jl_num(&jl, "loss_scale", ls.s.scale);
                jl_end(&jl);
                local = (Metric){0};
                tic = now;
            }
            if (pf && pf->on) {
                double now = now_s();
                pf->phase[PH_OTHER] += now - ph2;
                pf->step_sec += now - ph0;
                pf->steps++;
            }
            if (jl_failed(&jl, o, err)) {
                rc = 1;
                goto done;
            }
        }
        double cost = now_s() - t0;
        r.train_accuracy = metric_acc(&global);
        char pre[64];
        snprintf(pre, sizeof pre, "Epoch[%lld] Train-", (long long)epoch);
        metric_print_lines(out, m, &global, pre);
        if (amp_on)
            fprintf(out, "Epoch[%lld] Loss-scale=%.9g Skipped-steps=%lld\n", (long long)epoch,
                    (double)ls.s.scale, (long long)(ls.skipped - skipped0));
        if (ls.nonfinite > nonfinite0)
            fprintf(out, "Epoch[%lld] Nonfinite-steps=%lld\n", (long long)epoch,
                    (long long)(ls.nonfinite - nonfinite0));
        fprintf(out, "Epoch[%lld] Time cost=%.3f\n", (long long)epoch, cost);
        fflush(out);
        if (o->save_dir) {
            RtRunState rs = {.seed = seed, .batch_size = b, .epoch = epoch,
                             .batch_in_epoch = nbatch, .step = step, .num_update = num_update,
                             .optimizer = (uint32_t)o->optimizer, .momentum = o->momentum,
                             .ls = ls};
            if (nbatch >= steps_per_epoch) {
                rs.epoch = epoch + 1;
                rs.batch_in_epoch = 0;
            }
            size_t cap = strlen(o->save_dir) + strlen(m->name) + 40;
            free(run.path);
            run.path = malloc(cap);
            if (!run.path) {
                fprintf(err, "%s: out of memory\n", o->prog);
                rc = 1;
                goto done;
            }
            snprintf(run.path, cap, "%s/%s-%04lld.params", o->save_dir, m->name,
                     (long long)epoch + 1);
            if (!rt_checkpoint_save(run.path, t, &rs, msg, sizeof msg)) {
                fprintf(err, "%s: %s\n", o->prog, msg);
                rc = 1;
                goto done;
            }
            fprintf(out, "Saved checkpoint to \"%s\"\n", run.path);
            jl_begin(&jl, "checkpoint");
            jl_int(&jl, "epoch", (long long)epoch);
            jl_str(&jl, "file", run.path);
            jl_int(&jl, "step", (long long)step);
            jl_int(&jl, "num_update", (long long)num_update);
            jl_end(&jl);
        }
        char when[64];
        snprintf(when, sizeof when, "after epoch %lld", (long long)epoch);
        if (!validate(m, t, ds, run.idx, &nm, pf, &val, err, o->prog, when)) {
            rc = 1;
            goto done;
        }
        validated = true;
        snprintf(pre, sizeof pre, "Epoch[%lld] Validation-", (long long)epoch);
        metric_print_lines(out, m, &val, pre);
        fflush(out);
        jl_begin(&jl, "epoch");
        jl_int(&jl, "epoch", (long long)epoch);
        jl_int(&jl, "batches", (long long)(nbatch - (epoch == epoch0 ? nb0 : 0)));
        jl_int(&jl, "step", (long long)step);
        jl_int(&jl, "num_update", (long long)num_update);
        jl_metrics(&jl, "train", m, &global);
        jl_num(&jl, "time_cost", cost);
        jl_num(&jl, "samples_per_sec", cost > 0 ? (double)global.samples / cost : NAN);
        jl_num(&jl, "lr", r.lr);
        jl_num(&jl, "loss_scale", ls.s.scale);
        jl_int(&jl, "skipped_steps", (long long)(ls.skipped - skipped0));
        jl_int(&jl, "nonfinite_steps", (long long)(ls.nonfinite - nonfinite0));
        jl_str(&jl, "checkpoint", o->save_dir ? run.path : NULL);
        jl_metrics(&jl, "validation", m, &val);
        jl_end(&jl);
        if (jl_failed(&jl, o, err)) {
            rc = 1;
            goto done;
        }
    }
final:
    if (!validated) {
        if (!validate(m, t, ds, run.idx, &nm, pf, &val, err, o->prog, "of the parameters")) {
            rc = 1;
            goto done;
        }
        metric_print_lines(out, m, &val, "Validation-");
    }
    fprintf(out, "Final validation-accuracy=%f\n", metric_acc(&val));
    fflush(out);
    jl_begin(&jl, "end");
    jl_int(&jl, "steps", (long long)step);
    jl_int(&jl, "num_update", (long long)num_update);
    jl_int(&jl, "skipped_steps", (long long)ls.skipped);
    jl_num(&jl, "loss_scale", ls.s.scale);
    jl_metrics(&jl, "validation", m, &val);
    jl_end(&jl);
    if (pf)
        prof_report(pf, out, &jl);
    if (jl_failed(&jl, o, err))
        rc = 1;
done:
    r.steps = step;
    r.num_update = num_update;
    r.skipped = ls.skipped;
    r.loss_scale = ls.s.scale;
    r.val_accuracy = metric_acc(&val);
    r.val_cross_entropy = metric_ce(&val);
    r.val_top_k = metric_topk(&val);
    if (res)
        *res = r;
    /* the text log is checked too: a run whose log was lost is not a success */
    errno = 0;
    if ((fflush(out) != 0 || ferror(out)) && rc == 0) {
        fprintf(err, "%s: cannot write the log to standard output%s%s\n", o->prog,
                errno ? ": " : "", errno ? strerror(errno) : "");
        rc = 1;
    }
    run_free(&run);
    return rc;
}

int rt_train_main(int argc, char **argv, const RtModel *m)
{
    RtTrainOptions o;
    char err[1024];
    rt_train_options_default(&o);
    if (argc > 0 && argv[0]) {
        const char *slash = strrchr(argv[0], '/');
        o.prog = slash ? slash + 1 : argv[0];
    }
    if (!rt_train_apply_defaults(&o, m->train_defaults, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", o.prog, err);
        return 2;
    }
    int rc = rt_train_parse_args(&o, argc, argv, stdout, stderr);
    if (rc >= 0)
        return rc;
    return rt_train_run(m, &o, stdout, stderr, NULL);
}
