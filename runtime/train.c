/* train.c - the training driver: the command line, buffers, the loop and
 * MXNet-style logs (docs/training.md).
 *
 * Settings come in three layers: built-in defaults, the model's
 * train_defaults ("key=value" from the train block), then the flags.  The
 * loop, per step: fill the batch, train_step (forward and backward),
 * moving_update (BatchNorm statistics), the optimizer over every parameter
 * (optim.c), then the metrics; a Speedometer line every --log-interval
 * batches and, per epoch, the training accuracy, the time and a validation
 * pass through infer_step.  main() lives in main.c, so tests link this file
 * with their own models.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/half.h"
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

/* ---- options ------------------------------------------------------------------ */

void rt_train_options_default(RtTrainOptions *o)
{
    memset(o, 0, sizeof *o);
    o->max_steps = -1;
    o->loss_scale = 1.0f;
    o->epochs = 1;
    o->batch_size = 32;
    o->lr = 0.01f;
    o->momentum = 0.9f;
    o->wd = 1e-4f;
    o->clip_gradient = -1.0f;
    o->optimizer = RT_OPT_SGD;
    o->sched.kind = RT_LR_CONSTANT;
    o->seed = 42;
    o->data = "synthetic";
    const char *dir = getenv("AMPC_DATA_DIR");
#ifdef AMPC_DEFAULT_DATA_DIR
    o->data_dir = dir && *dir ? dir : AMPC_DEFAULT_DATA_DIR;
#else
    o->data_dir = dir && *dir ? dir : "./data";
#endif
    o->init = "xavier(rnd_type=\"uniform\", factor_type=\"avg\", magnitude=3)";
    o->log_interval = 50;
    o->threads = 0;
    o->prog = "train";
}

static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || *end || errno == ERANGE || x < lo || x > hi)
        return false;
    *v = x;
    return true;
}

static bool parse_u64(const char *s, uint64_t *v)
{
    char *end;
    errno = 0;
    if (*s == '-')
        return false;
    unsigned long long x = strtoull(s, &end, 0);
    if (end == s || *end || errno == ERANGE)
        return false;
    *v = x;
    return true;
}

static bool parse_float(const char *s, double lo, double hi, float *v)
{
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(x) || x < lo || x > hi)
        return false;
    *v = (float)x;
    return true;
}

/* A number argument of a call into *dst (kept when absent). */
static bool call_float(const RtCall *c, const char *key, float *dst, const char *what, char *err,
                       size_t errlen)
{
    double v;
    bool bad = false;
    if (!rt_call_num(c, key, &v, &bad))
        return true;
    if (bad) {
        snprintf(err, errlen, "%s: %s must be a number", what, key);
        return false;
    }
    *dst = (float)v;
    return true;
}

static bool parse_optimizer(RtTrainOptions *o, const char *v, char *err, size_t errlen)
{
    RtCall c;
    if (!rt_call_parse(v, &c, err, errlen))
        return false;
    if (strcmp(c.name, "sgd") == 0)
        o->optimizer = RT_OPT_SGD;
    else if (strcmp(c.name, "nag") == 0)
        o->optimizer = RT_OPT_NAG;
    else {
        snprintf(err, errlen, "optimizer '%s' is not supported by this runtime (sgd, nag)", c.name);
        return false;
    }
    return call_float(&c, "momentum", &o->momentum, v, err, errlen) &&
           call_float(&c, "wd", &o->wd, v, err, errlen) &&
           call_float(&c, "clip_gradient", &o->clip_gradient, v, err, errlen) &&
           call_float(&c, "learning_rate", &o->lr, v, err, errlen) &&
           call_float(&c, "lr", &o->lr, v, err, errlen);
}

/* lr = 0.1, or cosine(base=, final=, warmup_epochs=, warmup_begin=) (the
 * MXNet names base_lr, final_lr, warmup_begin_lr too). */
static bool parse_lr(RtTrainOptions *o, const char *v, char *err, size_t errlen)
{
    if (parse_float(v, 0, 1e30, &o->lr)) {
        o->sched.kind = RT_LR_CONSTANT;
        return true;
    }
    RtCall c;
    if (!rt_call_parse(v, &c, err, errlen))
        return false;
    if (strcmp(c.name, "cosine") != 0) {
        snprintf(err, errlen, "lr '%s': a number or cosine(base=, final=, warmup_epochs=, "
                 "warmup_begin=)", v);
        return false;
    }
    o->sched.kind = RT_LR_COSINE;
    o->sched.final_lr = 0;
    o->sched.warmup_epochs = 0;
    o->sched.warmup_begin = 0;
    return call_float(&c, "base", &o->lr, v, err, errlen) &&
           call_float(&c, "base_lr", &o->lr, v, err, errlen) &&
           call_float(&c, "final", &o->sched.final_lr, v, err, errlen) &&
           call_float(&c, "final_lr", &o->sched.final_lr, v, err, errlen) &&
           call_float(&c, "warmup_epochs", &o->sched.warmup_epochs, v, err, errlen) &&
           call_float(&c, "warmup_begin", &o->sched.warmup_begin, v, err, errlen) &&
           call_float(&c, "warmup_begin_lr", &o->sched.warmup_begin, v, err, errlen);
}

static const char *unquote(const char *v, char *buf, size_t cap)
{
    size_t n = strlen(v);
    if (n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n - 1] == v[0] && n - 2 < cap) {
        memcpy(buf, v + 1, n - 2);
        buf[n - 2] = 0;
        return buf;
    }
    return v;
}

bool rt_train_apply_defaults(RtTrainOptions *o, const char *const *kv, char *err, size_t errlen)
{
    for (; kv && *kv; kv++) {
        const char *eq = strchr(*kv, '=');
        char key[64], e[256];
        if (!eq || eq == *kv || (size_t)(eq - *kv) >= sizeof key) {
            snprintf(err, errlen, "train default '%s' is not key=value", *kv);
            return false;
        }
        memcpy(key, *kv, (size_t)(eq - *kv));
        key[eq - *kv] = 0;
        const char *v = eq + 1;
        bool ok = true;
        int64_t i;
        e[0] = 0;
        if (strcmp(key, "batch_size") == 0)
            ok = parse_i64(v, 1, INT32_MAX, &o->batch_size);
        else if (strcmp(key, "epochs") == 0) {
            ok = parse_i64(v, 0, INT32_MAX, &i);
            if (ok)
                o->epochs = (int)i;
        } else if (strcmp(key, "max_steps") == 0)
            ok = parse_i64(v, 0, INT64_MAX, &o->max_steps);
        else if (strcmp(key, "log_interval") == 0) {
            ok = parse_i64(v, 0, INT32_MAX, &i);
            if (ok)
                o->log_interval = (int)i;
        } else if (strcmp(key, "lr") == 0)
            ok = parse_lr(o, v, e, sizeof e);
        else if (strcmp(key, "momentum") == 0)
            ok = parse_float(v, 0, 1, &o->momentum);
        else if (strcmp(key, "wd") == 0)
            ok = parse_float(v, 0, 1e30, &o->wd);
        else if (strcmp(key, "clip_gradient") == 0)
            ok = parse_float(v, -1e30, 1e30, &o->clip_gradient);
        else if (strcmp(key, "seed") == 0)
            ok = parse_u64(v, &o->seed);
        else if (strcmp(key, "optimizer") == 0)
            ok = parse_optimizer(o, v, e, sizeof e);
        else if (strcmp(key, "data") == 0 || strcmp(key, "data_dir") == 0 ||
                 strcmp(key, "init") == 0) {
            /* the strings live as long as the model's table (quotes kept
             * only where they are part of an initialiser) */
            if (key[0] == 'i') {
                RtInit ini;
                ok = rt_init_parse(v, &ini, e, sizeof e);
                o->init = v;
            } else if (strcmp(key, "data") == 0) {
                char b[64];
                const char *u = unquote(v, b, sizeof b);
                o->data = strcmp(u, "digits") == 0 ? "digits"
                        : strcmp(u, "synthetic") == 0 ? "synthetic" : v;
            } else {
                o->data_dir = v;
            }
        }
        /* other keys (amp, kvstore, loss_scale, ...) are the compiler's */
        if (!ok) {
            if (e[0])
                snprintf(err, errlen, "train default '%s': %s", *kv, e);
            else
                snprintf(err, errlen, "train default '%s': bad value", *kv);
            return false;
        }
    }
    return true;
}

static void usage(const RtTrainOptions *o, FILE *out)
{
    fprintf(out,
            "Usage: %s [options]\n"
            "Trains the model compiled into this program (docs/training.md).\n"
            "\n"
            "  --epochs N          passes over the training set (%d)\n"
            "  --max-steps N       stop after N optimizer steps in all (no limit)\n"
            "  --batch-size N      samples per step (%lld)\n"
            "  --lr X              learning rate%s (%g)\n"
            "  --momentum X        SGD/NAG momentum, 0 for none (%g)\n"
            "  --wd X              weight decay (%g)\n"
            "  --seed N            initialisation, shuffling and synthetic data (%llu)\n"
            "  --data SOURCE       synthetic | digits (%s)\n"
            "  --data-dir DIR      where digits.csv.gz is (%s; default $AMPC_DATA_DIR)\n"
            "  --log-interval N    batches between progress lines, 0 for none (%d)\n"
            "  --threads N         OpenBLAS threads (OpenBLAS's default)\n"
            "  --loss-scale X      a static loss scale (1)\n"
            "  --dump-state FILE   testing: write the first step's gradients and stop\n"
            "  -h, --help          this text\n",
            o->prog, o->epochs, (long long)o->batch_size,
            o->sched.kind == RT_LR_COSINE ? " (the cosine schedule's base)" : "", (double)o->lr,
            (double)o->momentum, (double)o->wd, (unsigned long long)o->seed, o->data,
            o->data_dir, o->log_interval);
}

enum { OPT_MAX_STEPS = 256, OPT_EPOCHS, OPT_BATCH, OPT_LR, OPT_MOMENTUM, OPT_WD, OPT_SEED,
       OPT_DATA, OPT_DATA_DIR, OPT_LOG_INTERVAL, OPT_THREADS, OPT_LOSS_SCALE, OPT_DUMP_STATE };

int rt_train_parse_args(RtTrainOptions *o, int argc, char **argv, FILE *out, FILE *err)
{
    static const struct option longopts[] = {
        {"max-steps", required_argument, NULL, OPT_MAX_STEPS},
        {"epochs", required_argument, NULL, OPT_EPOCHS},
        {"batch-size", required_argument, NULL, OPT_BATCH},
        {"lr", required_argument, NULL, OPT_LR},
        {"momentum", required_argument, NULL, OPT_MOMENTUM},
        {"wd", required_argument, NULL, OPT_WD},
        {"seed", required_argument, NULL, OPT_SEED},
        {"data", required_argument, NULL, OPT_DATA},
        {"data-dir", required_argument, NULL, OPT_DATA_DIR},
        {"log-interval", required_argument, NULL, OPT_LOG_INTERVAL},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"loss-scale", required_argument, NULL, OPT_LOSS_SCALE},
        {"dump-state", required_argument, NULL, OPT_DUMP_STATE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    if (argc > 0 && argv[0]) {
        const char *slash = strrchr(argv[0], '/');
        o->prog = slash ? slash + 1 : argv[0];
    }
    opterr = 0;
    optind = 0; /* GNU: rescan from the start (several parses in one process) */
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        const char *a = optarg;
        bool ok = true;
        const char *what = "";
        int64_t i;
        switch (c) {
        case 'h': usage(o, out); return 0;
        case OPT_MAX_STEPS:
            what = "an integer >= 0";
            ok = parse_i64(a, 0, INT64_MAX, &o->max_steps);
            break;
        case OPT_LOSS_SCALE:
            what = "a number > 0";
            ok = parse_float(a, 1e-30, 1e30, &o->loss_scale);
            break;
        case OPT_DUMP_STATE:
            o->dump_state = a;
            break;
        case OPT_EPOCHS:
            what = "an integer >= 0";
            if ((ok = parse_i64(a, 0, INT32_MAX, &i)))
                o->epochs = (int)i;
            break;
        case OPT_BATCH:
            what = "an integer >= 1";
            ok = parse_i64(a, 1, INT32_MAX, &o->batch_size);
            break;
        case OPT_LR: what = "a number >= 0"; ok = parse_float(a, 0, 1e30, &o->lr); break;
        case OPT_MOMENTUM:
            what = "a number in [0, 1]";
            ok = parse_float(a, 0, 1, &o->momentum);
            break;
        case OPT_WD: what = "a number >= 0"; ok = parse_float(a, 0, 1e30, &o->wd); break;
        case OPT_SEED: what = "an unsigned integer"; ok = parse_u64(a, &o->seed); break;
        case OPT_DATA:
            what = "synthetic or digits";
            ok = strcmp(a, "synthetic") == 0 || strcmp(a, "digits") == 0;
            if (ok)
                o->data = a[0] == 's' ? "synthetic" : "digits";
            break;
        case OPT_DATA_DIR:
            what = "a directory";
            ok = *a != 0;
            o->data_dir = a;
            break;
        case OPT_LOG_INTERVAL:
            what = "an integer >= 0";
            if ((ok = parse_i64(a, 0, INT32_MAX, &i)))
                o->log_interval = (int)i;
            break;
        case OPT_THREADS:
            what = "an integer >= 1";
            if ((ok = parse_i64(a, 1, 4096, &i)))
                o->threads = (int)i;
            break;
        case ':':
            fprintf(err, "%s: option '%s' needs a value\nTry '%s --help'.\n", o->prog,
                    argv[optind - 1], o->prog);
            return 2;
        default:
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
        if (!ok) {
            const char *name = "?";
            for (const struct option *l = longopts; l->name; l++)
                if (l->val == c)
                    name = l->name;
            fprintf(err, "%s: --%s: '%s' is not %s\nTry '%s --help'.\n", o->prog, name, a, what,
                    o->prog);
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
    free(t->ctx.buf);
    free(t->ctx.master);
    free(t->state);
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

bool rt_trainer_init(RtTrainer *t, const RtModel *m, int64_t batch, bool with_state, char *err,
                     size_t errlen)
{
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
    bool ok = t->ctx.buf && t->ctx.master && t->state;
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
    /* MXNet's CosineScheduler(max_update = total_steps, warmup_steps) */
    double warm = floor((double)s->warmup_epochs * (double)steps_per_epoch + 0.5);
    double max_update = (double)total_steps;
    double tt = (double)t;
    if (tt < warm)
        return (float)(s->warmup_begin + (base_lr - s->warmup_begin) * tt / warm);
    if (tt > max_update || max_update <= warm)
        return s->final_lr;
    double cosine = 1.0 + cos(3.141592653589793 * (tt - warm) / (max_update - warm));
    return (float)(s->final_lr + (base_lr - s->final_lr) * cosine / 2.0);
}

/* ---- the loop ------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    int64_t correct, ce_count, samples;
    double ce_sum;
} Metric;

static void metric_add(Metric *mt, const RtModel *m, const RtCtx *ctx, int prob, int64_t n)
{
    const void *p = ctx->buf[prob];
    const float *label = ctx->buf[m->label];
    RtDType dt = m->buffers[prob].dtype;
    int64_t cnt = 0;
    mt->correct += rt_accuracy_count(n, m->classes, dt, p, label);
    mt->ce_sum += rt_cross_entropy_sum(n, m->classes, dt, p, label, &cnt);
    mt->ce_count += cnt;
    mt->samples += n;
}

static double metric_acc(const Metric *mt)
{
    return mt->samples ? (double)mt->correct / (double)mt->samples : 0.0;
}

static double metric_ce(const Metric *mt)
{
    return mt->ce_count ? mt->ce_sum / (double)mt->ce_count : 0.0;
}

/* Fisher-Yates from (seed, epoch): a pure function of both. */
static void shuffle(int64_t *perm, int64_t n, uint64_t seed, int epoch)
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

/* The validation set through infer_step, batch by batch; the last partial
 * batch is padded by repeating its first sample and only its real rows count. */
static Metric validate(const RtModel *m, RtTrainer *t, const RtDataset *ds, int64_t *idx)
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
        m->infer_step(&t->ctx);
        metric_add(&mt, m, &t->ctx, m->prob_infer, n);
    }
    return mt;
}

static int open_data(const RtModel *m, const RtTrainOptions *o, int64_t sample, RtDataset *ds,
                     FILE *err)
{
    char msg[1024];
    if (strcmp(o->data, "synthetic") == 0) {
        rt_data_synthetic(ds, sample, m->classes, o->seed, RT_SYNTHETIC_TRAIN, RT_SYNTHETIC_VAL);
        return 0;
    }
    if (strcmp(o->data, "digits") != 0) {
        fprintf(err, "%s: data source '%s' is not supported by this runtime (synthetic, digits)\n",
                o->prog, o->data);
        return 2;
    }
    if (sample != RT_DIGITS_PIXELS || m->classes < RT_DIGITS_CLASSES) {
        fprintf(err, "%s: the digits data are 8x8 images of 10 classes; model %s takes %lld "
                "values per sample and has %lld classes\n", o->prog, m->name, (long long)sample,
                (long long)m->classes);
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/digits.csv.gz", o->data_dir);
    if (!rt_data_digits(ds, path, msg, sizeof msg)) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        if (strstr(msg, "cannot open"))
            fprintf(err, "%s: set --data-dir or AMPC_DATA_DIR to the directory of digits.csv.gz "
                    "(Debian's python3-sklearn: sklearn/datasets/data/)\n", o->prog);
        return 1;
    }
    return 0;
}

int rt_train_run(const RtModel *m, const RtTrainOptions *o, FILE *out, FILE *err,
                 RtTrainResult *res)
{
    RtTrainResult r = {0};
    char msg[1024];
    int rc = 0;
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
    if (o->sched.kind == RT_LR_COSINE && o->sched.warmup_begin > o->lr) {
        fprintf(err, "%s: the cosine schedule's warmup_begin (%g) exceeds the lr (%g)\n", o->prog,
                (double)o->sched.warmup_begin, (double)o->lr);
        return 2;
    }
    int64_t sample = 1;
    for (int i = 0; i < m->data_rank; i++)
        sample *= m->data_shape[i];
    RtDataset ds;
    memset(&ds, 0, sizeof ds);
    if ((rc = open_data(m, o, sample, &ds, err)) != 0)
        return rc;
    int64_t b = o->batch_size;
    int64_t steps_per_epoch = ds.ntrain / b;
    if (steps_per_epoch == 0) {
        fprintf(err, "%s: the batch size %lld exceeds the %lld training samples of %s\n", o->prog,
                (long long)b, (long long)ds.ntrain, ds.name);
        rt_data_free(&ds);
        return 2;
    }
    /* the loss head's gradient is scaled by loss_scale: unscale in the update */
    RtOptConfig oc = {.kind = o->optimizer, .lr = o->lr, .momentum = o->momentum, .wd = o->wd,
                      .rescale_grad = 1.0f / ((float)b * o->loss_scale),
                      .clip_gradient = o->clip_gradient};
    RtTrainer t;
    int64_t *perm = malloc((size_t)ds.ntrain * sizeof *perm);
    int64_t *idx = malloc((size_t)b * sizeof *idx);
    if (!perm || !idx) {
        fprintf(err, "%s: out of memory\n", o->prog);
        free(perm);
        free(idx);
        rt_data_free(&ds);
        return 1;
    }
    bool ok = rt_trainer_init(&t, m, b, rt_optim_has_state(&oc), msg, sizeof msg);
    if (ok) {
        t.ctx.seed = o->seed;
        ok = rt_trainer_init_params(&t, o->init, o->seed, msg, sizeof msg);
        if (!ok)
            rt_trainer_free(&t);
    }
    if (!ok) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        free(perm);
        free(idx);
        rt_data_free(&ds);
        return 1;
    }
    int64_t nvalues = 0;
    for (int i = 0; i < m->nparams; i++)
        nvalues += m->params[i].grad >= 0 ? m->params[i].numel : 0;
    fprintf(out, "Model %s: %lld trainable values, amp %s; data %s: %lld training and %lld "
            "validation samples; batch %lld, %lld steps per epoch\n", m->name,
            (long long)nvalues, m->amp ? m->amp : "off", ds.name, (long long)ds.ntrain,
            (long long)ds.nval, (long long)b, (long long)steps_per_epoch);
    fflush(out);

    float *x = t.ctx.buf[m->data], *y = t.ctx.buf[m->label];
    int64_t total = steps_per_epoch * o->epochs, step = 0;
    bool validated = false;
    Metric val = {0};
    for (int epoch = 0; epoch < o->epochs; epoch++) {
        if (o->max_steps >= 0 && step >= o->max_steps)
            break;
        r.epochs = epoch + 1;
        shuffle(perm, ds.ntrain, o->seed, epoch);
        Metric global = {0}, local = {0};
        double t0 = now_s(), tic = t0;
        int64_t nbatch;
        for (nbatch = 0; nbatch < steps_per_epoch; nbatch++) {
            if (o->max_steps >= 0 && step >= o->max_steps)
                break;
            ds.fill(&ds, RT_SPLIT_TRAIN, perm + nbatch * b, b, x, y);
            t.ctx.batch = b;
            t.ctx.step = (uint64_t)step;
            t.ctx.loss_scale = o->loss_scale;
            m->train_step(&t.ctx);
            if (o->dump_state) {
                ok = rt_dump_state(m, &t, o->dump_state, msg, sizeof msg);
                if (!ok)
                    fprintf(err, "%s: %s\n", o->prog, msg);
                rt_trainer_free(&t);
                free(perm);
                free(idx);
                rt_data_free(&ds);
                return ok ? 0 : 1;
            }
            if (m->moving_update)
                m->moving_update(&t.ctx);
            oc.lr = rt_lr_at(&o->sched, o->lr, step + 1, steps_per_epoch, total);
            rt_optim_step(m, &t.ctx, t.state, &oc);
            metric_add(&global, m, &t.ctx, m->prob_train, b);
            metric_add(&local, m, &t.ctx, m->prob_train, b);
            step++;
            /* MXNet's Speedometer: batch 0 starts the clock; every
             * log_interval batches a line, then the local metric resets */
            if (nbatch == 0) {
                tic = now_s();
            } else if (o->log_interval > 0 && nbatch % o->log_interval == 0) {
                double now = now_s();
                double dt = now - tic > 0 ? now - tic : 1e-9;
                double speed = (double)o->log_interval * (double)b / dt;
                fprintf(out, "Epoch[%d] Batch [%lld-%lld]\tSpeed: %.2f samples/sec\t"
                        "accuracy=%f\tcross-entropy=%f\n", epoch,
                        (long long)(nbatch - o->log_interval), (long long)nbatch, speed,
                        metric_acc(&local), metric_ce(&local));
                fflush(out);
                local = (Metric){0};
                tic = now;
            }
        }
        double cost = now_s() - t0;
        r.train_accuracy = metric_acc(&global);
        fprintf(out, "Epoch[%d] Train-accuracy=%f\n", epoch, metric_acc(&global));
        fprintf(out, "Epoch[%d] Train-cross-entropy=%f\n", epoch, metric_ce(&global));
        fprintf(out, "Epoch[%d] Time cost=%.3f\n", epoch, cost);
        val = validate(m, &t, &ds, idx);
        validated = true;
        fprintf(out, "Epoch[%d] Validation-accuracy=%f\n", epoch, metric_acc(&val));
        fprintf(out, "Epoch[%d] Validation-cross-entropy=%f\n", epoch, metric_ce(&val));
        fflush(out);
    }
    if (!validated) {
        val = validate(m, &t, &ds, idx);
        fprintf(out, "Validation-accuracy=%f\n", metric_acc(&val));
        fprintf(out, "Validation-cross-entropy=%f\n", metric_ce(&val));
    }
    fprintf(out, "Final validation-accuracy=%f\n", metric_acc(&val));
    fflush(out);
    r.steps = step;
    r.val_accuracy = metric_acc(&val);
    r.val_cross_entropy = metric_ce(&val);
    if (res)
        *res = r;
    rt_trainer_free(&t);
    free(perm);
    free(idx);
    rt_data_free(&ds);
    return 0;
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
