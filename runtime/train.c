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
    o->epochs = 1;
    o->batch_size = 32;
    o->lr = 0.01f;
    o->momentum = 0.9f;
    o->wd = 1e-4f;
    o->clip_gradient = -1.0f;
    o->optimizer = RT_OPT_SGD;
    o->sched.kind = RT_LR_CONSTANT;
    o->sched.warmup_mode = RT_WARMUP_LINEAR;
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
    rt_loss_scale_default(&o->loss_scale);
    o->inject_inf_step = -1;
    o->inject_nan_step = -1;
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

/* Every argument of c is one of the NULL-ended keys. */
static bool call_keys(const RtCall *c, const char *const *keys, const char *what, char *err,
                      size_t errlen)
{
    for (int i = 0; i < c->nargs; i++) {
        const char *const *k = keys;
        while (*k && strcmp(*k, c->key[i]) != 0)
            k++;
        if (!*k) {
            size_t at = (size_t)snprintf(err, errlen, "%s: %s() has no argument '%s' (", what,
                                         c->name, c->key[i]);
            for (k = keys; *k && at < errlen; k++)
                at += (size_t)snprintf(err + at, errlen - at, "%s%s", k == keys ? "" : ", ", *k);
            if (at < errlen)
                snprintf(err + at, errlen - at, ")");
            return false;
        }
    }
    return true;
}

/* MXNet's Python layer passes clip_gradient only when it is truthy: 0 is off. */
static float clip_setting(float c) { return c > 0 ? c : -1.0f; }

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
    /* multi_precision is the compiler's (the table's has_master); accepted here */
    static const char *const keys[] = {"momentum", "wd", "clip_gradient", "learning_rate", "lr",
                                       "multi_precision", NULL};
    if (!call_keys(&c, keys, v, err, errlen))
        return false;
    const char *mp = rt_call_str(&c, "multi_precision");
    if (mp && strcmp(mp, "true") != 0 && strcmp(mp, "false") != 0 && strcmp(mp, "1") != 0 &&
        strcmp(mp, "0") != 0) {
        snprintf(err, errlen, "%s: multi_precision must be true or false", v);
        return false;
    }
    float clip = o->clip_gradient;
    if (!call_float(&c, "momentum", &o->momentum, v, err, errlen) ||
        !call_float(&c, "wd", &o->wd, v, err, errlen) ||
        !call_float(&c, "clip_gradient", &clip, v, err, errlen) ||
        !call_float(&c, "learning_rate", &o->lr, v, err, errlen) ||
        !call_float(&c, "lr", &o->lr, v, err, errlen))
        return false;
    o->clip_gradient = clip_setting(clip);
    if (!(o->momentum >= 0 && o->momentum <= 1) || !(o->wd >= 0) || !(o->lr >= 0)) {
        snprintf(err, errlen, "%s: needs momentum in [0, 1], wd >= 0 and lr >= 0", v);
        return false;
    }
    return true;
}

/* lr = 0.1, constant(base=0.1), or cosine(base=, final=, warmup_epochs= |
 * warmup_steps=, warmup_begin=, warmup_mode=linear|constant, max_update=)
 * (the MXNet names base_lr, final_lr and warmup_begin_lr too). */
static bool parse_lr(RtTrainOptions *o, const char *v, char *err, size_t errlen)
{
    if (parse_float(v, 0, 1e30, &o->lr)) {
        o->sched.kind = RT_LR_CONSTANT;
        return true;
    }
    RtCall c;
    if (!rt_call_parse(v, &c, err, errlen))
        return false;
    float base = o->lr;
    if (strcmp(c.name, "constant") == 0) {
        static const char *const keys[] = {"base", "base_lr", "lr", NULL};
        if (!call_keys(&c, keys, v, err, errlen) ||
            !call_float(&c, "base", &base, v, err, errlen) ||
            !call_float(&c, "base_lr", &base, v, err, errlen) ||
            !call_float(&c, "lr", &base, v, err, errlen))
            return false;
        if (!(base >= 0)) {
            snprintf(err, errlen, "%s: base must be >= 0", v);
            return false;
        }
        o->lr = base;
        o->sched.kind = RT_LR_CONSTANT;
        return true;
    }
    if (strcmp(c.name, "cosine") != 0) {
        snprintf(err, errlen, "lr '%s': a number, constant(base=) or cosine(base=, final=, "
                 "warmup_epochs=, warmup_begin=)", v);
        return false;
    }
    static const char *const keys[] = {"base", "base_lr", "final", "final_lr", "warmup_epochs",
                                       "warmup_steps", "warmup_begin", "warmup_begin_lr",
                                       "warmup_mode", "max_update", NULL};
    if (!call_keys(&c, keys, v, err, errlen))
        return false;
    RtLrSchedule s = {.kind = RT_LR_COSINE, .warmup_mode = RT_WARMUP_LINEAR};
    float wsteps = -1, maxu = 0;
    if (!call_float(&c, "base", &base, v, err, errlen) ||
        !call_float(&c, "base_lr", &base, v, err, errlen) ||
        !call_float(&c, "final", &s.final_lr, v, err, errlen) ||
        !call_float(&c, "final_lr", &s.final_lr, v, err, errlen) ||
        !call_float(&c, "warmup_epochs", &s.warmup_epochs, v, err, errlen) ||
        !call_float(&c, "warmup_steps", &wsteps, v, err, errlen) ||
        !call_float(&c, "warmup_begin", &s.warmup_begin, v, err, errlen) ||
        !call_float(&c, "warmup_begin_lr", &s.warmup_begin, v, err, errlen) ||
        !call_float(&c, "max_update", &maxu, v, err, errlen))
        return false;
    if (rt_call_str(&c, "warmup_steps") && rt_call_str(&c, "warmup_epochs")) {
        snprintf(err, errlen, "%s: give warmup_epochs or warmup_steps, not both", v);
        return false;
    }
    if (rt_call_str(&c, "warmup_steps")) {
        if (!(wsteps >= 0) || wsteps != floorf(wsteps)) {
            snprintf(err, errlen, "%s: warmup_steps must be an integer >= 0", v);
            return false;
        }
        s.warmup_steps = (int64_t)wsteps;
    }
    if (rt_call_str(&c, "max_update")) {
        if (!(maxu >= 1) || maxu != floorf(maxu)) {
            snprintf(err, errlen, "%s: max_update must be an integer >= 1", v);
            return false;
        }
        s.max_update = (int64_t)maxu;
    }
    const char *mode = rt_call_str(&c, "warmup_mode");
    if (mode && strcmp(mode, "linear") != 0 && strcmp(mode, "constant") != 0) {
        snprintf(err, errlen, "%s: warmup_mode must be linear or constant", v);
        return false;
    }
    s.warmup_mode = mode && mode[0] == 'c' ? RT_WARMUP_CONSTANT : RT_WARMUP_LINEAR;
    if (!(base >= 0) || !(s.final_lr >= 0) || !(s.warmup_begin >= 0) || !(s.warmup_epochs >= 0)) {
        snprintf(err, errlen, "%s: the learning rates and the warmup must be >= 0", v);
        return false;
    }
    o->lr = base;
    o->sched = s;
    return true;
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
        char key[64], e[512];
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
        else if (strcmp(key, "clip_gradient") == 0) {
            ok = parse_float(v, -1e30, 1e30, &o->clip_gradient);
            o->clip_gradient = clip_setting(o->clip_gradient);
        } else if (strcmp(key, "seed") == 0)
            ok = parse_u64(v, &o->seed);
        else if (strcmp(key, "optimizer") == 0)
            ok = parse_optimizer(o, v, e, sizeof e);
        else if (strcmp(key, "loss_scale") == 0)
            ok = rt_loss_scale_parse(v, &o->loss_scale, e, sizeof e);
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
        /* other keys (amp, kvstore, ...) are the compiler's */
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
            "  --lr X              learning rate%s (%g)\n"
            "  --momentum X        SGD/NAG momentum, 0 for none (%g)\n"
            "  --wd X              weight decay (%g)\n"
            "  --loss-scale S      dynamic, dynamic(init=, growth=, backoff=, interval=, min=,\n"
            "                      max=), off, or a number: a static scale (%s)\n"
            "  --seed N            initialisation, shuffling and synthetic data (%llu)\n"
            "  --data SOURCE       synthetic | digits (%s)\n"
            "  --data-dir DIR      where digits.csv.gz is (%s; default $AMPC_DATA_DIR)\n"
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
            o->sched.kind == RT_LR_COSINE ? " (the cosine schedule's base)" : "", (double)o->lr,
            (double)o->momentum, (double)o->wd, lsd, (unsigned long long)o->seed, o->data,
            o->data_dir, o->log_interval);
}

enum { OPT_MAX_STEPS = 256, OPT_EPOCHS, OPT_BATCH, OPT_LR, OPT_MOMENTUM, OPT_WD, OPT_SEED,
       OPT_DATA, OPT_DATA_DIR, OPT_LOG_INTERVAL, OPT_THREADS, OPT_LOSS_SCALE, OPT_DUMP_STATE,
       OPT_SAVE_DIR, OPT_RESUME, OPT_EVAL_ONLY, OPT_CHECK_NUMERICS, OPT_INJECT_INF,
       OPT_INJECT_NAN };

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
        {"save-dir", required_argument, NULL, OPT_SAVE_DIR},
        {"resume", required_argument, NULL, OPT_RESUME},
        {"eval-only", no_argument, NULL, OPT_EVAL_ONLY},
        {"check-numerics", no_argument, NULL, OPT_CHECK_NUMERICS},
        {"inject-inf-at-step", required_argument, NULL, OPT_INJECT_INF},
        {"inject-nan", required_argument, NULL, OPT_INJECT_NAN},
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
        char msg[512] = "";
        int64_t i;
        switch (c) {
        case 'h': usage(o, out); return 0;
        case OPT_MAX_STEPS:
            what = "an integer >= 0";
            ok = parse_i64(a, 0, INT64_MAX, &o->max_steps);
            break;
        case OPT_LOSS_SCALE:
            ok = rt_loss_scale_parse(a, &o->loss_scale, msg, sizeof msg);
            break;
        case OPT_DUMP_STATE:
            what = "a file name";
            ok = *a != 0;
            o->dump_state = a;
            break;
        case OPT_SAVE_DIR:
            what = "a directory";
            ok = *a != 0;
            o->save_dir = a;
            break;
        case OPT_RESUME:
            what = "a checkpoint file";
            ok = *a != 0;
            o->resume = a;
            break;
        case OPT_EVAL_ONLY: o->eval_only = true; break;
        case OPT_CHECK_NUMERICS: o->check_numerics = true; break;
        case OPT_INJECT_INF:
            what = "a step number >= 0";
            ok = parse_i64(a, 0, INT64_MAX, &o->inject_inf_step);
            break;
        case OPT_INJECT_NAN: {
            what = "NODE:STEP (a node name, a step number >= 0)";
            const char *colon = strrchr(a, ':');
            size_t n = colon ? (size_t)(colon - a) : 0;
            ok = colon && n > 0 && n < sizeof o->inject_nan_node &&
                 parse_i64(colon + 1, 0, INT64_MAX, &o->inject_nan_step);
            if (ok) {
                memcpy(o->inject_nan_node, a, n);
                o->inject_nan_node[n] = 0;
            }
            break;
        }
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
            if (msg[0])
                fprintf(err, "%s: --%s: %s\nTry '%s --help'.\n", o->prog, name, msg, o->prog);
            else
                fprintf(err, "%s: --%s: '%s' is not %s\nTry '%s --help'.\n", o->prog, name, a,
                        what, o->prog);
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
    /* MXNet's CosineScheduler(max_update, base_lr, final_lr, warmup_steps,
     * warmup_begin_lr, warmup_mode), in double as Python computes it */
    double warm = s->warmup_steps > 0
                      ? (double)s->warmup_steps
                      : floor((double)s->warmup_epochs * (double)steps_per_epoch + 0.5);
    double max_update = s->max_update > 0 ? (double)s->max_update : (double)total_steps;
    double tt = (double)t;
    if (tt < warm) {
        if (s->warmup_mode == RT_WARMUP_CONSTANT)
            return s->warmup_begin;
        return (float)(s->warmup_begin + ((double)base_lr - s->warmup_begin) * tt / warm);
    }
    if (tt > max_update || max_update <= warm)
        return s->final_lr; /* MXNet keeps the last value, which is final_lr */
    double cosine = 1.0 + cos(3.141592653589793 * (tt - warm) / (max_update - warm));
    return (float)(s->final_lr + ((double)base_lr - s->final_lr) * cosine / 2.0);
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

static void after_node(RtCtx *ctx, int node, const char *name, int buffer)
{
    (void)node;
    RtTrainer *t = (RtTrainer *)(void *)((char *)ctx - offsetof(RtTrainer, ctx));
    Numerics *nm = t->hook;
    const RtModel *m = t->m;
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
static bool validate(const RtModel *m, RtTrainer *t, const RtDataset *ds, int64_t *idx,
                     Numerics *nm, Metric *res, FILE *err, const char *prog, const char *when)
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
        m->infer_step(&t->ctx);
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

static int open_data(const RtModel *m, const RtTrainOptions *o, uint64_t seed, int64_t sample,
                     RtDataset *ds, FILE *err)
{
    char msg[1024];
    if (strcmp(o->data, "synthetic") == 0) {
        rt_data_synthetic(ds, sample, m->classes, seed, RT_SYNTHETIC_TRAIN, RT_SYNTHETIC_VAL);
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
    if (o->inject_nan_node[0] && !has_node(m, o->inject_nan_node)) {
        fprintf(err, "%s: --inject-nan: model %s has no node named '%s'\n", o->prog, m->name,
                o->inject_nan_node);
        return 2;
    }
    if (o->save_dir && !ensure_dir(o->save_dir, msg, sizeof msg)) {
        fprintf(err, "%s: %s\n", o->prog, msg);
        return 2;
    }
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
    if ((rc = open_data(m, o, seed, sample, &run.ds, err)) != 0) {
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
                      .rescale_grad = 1.0f / (float)b, .clip_gradient = o->clip_gradient};
    run.perm = malloc((size_t)ds->ntrain * sizeof *run.perm);
    run.idx = malloc((size_t)b * sizeof *run.idx);
    if (!run.perm || !run.idx) {
        fprintf(err, "%s: out of memory\n", o->prog);
        run_free(&run);
        return 1;
    }
    RtTrainer *t = &run.t;
    bool ok = rt_trainer_init(t, m, b, rt_optim_has_state(&oc), msg, sizeof msg);
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
    if (nm.check || nm.nan_node) {
        t->hook = &nm;
        t->ctx.after_node = after_node;
        t->ctx.check_node = 1;
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
        if (rs->ls.mode == ls.mode && ls.mode == RT_LS_DYNAMIC)
            ls.s = rs->ls.s;
        else if (rs->ls.mode != ls.mode)
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
    if (run.have_ck)
        fprintf(out, "Resumed from \"%s\": epoch %lld, batch %lld, step %lld, update %lld, loss "
                "scale %g\n", o->resume, (long long)epoch0, (long long)nb0, (long long)step,
                (long long)num_update, (double)ls.s.scale);
    fflush(out);

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
            ds->fill(ds, RT_SPLIT_TRAIN, run.perm + nbatch * b, b, x, y);
            t->ctx.batch = b;
            t->ctx.step = (uint64_t)step;
            t->ctx.loss_scale = step == o->inject_inf_step ? INFINITY : ls.s.scale;
            nm.train = true;
            nm.past_head = false;
            nm.found = false;
            m->train_step(&t->ctx);
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
            if (ls.mode == RT_LS_DYNAMIC)
                finite = rt_optim_grads_finite(m, &t->ctx);
            if (finite || ls.mode != RT_LS_DYNAMIC) {
                if (m->moving_update)
                    m->moving_update(&t->ctx);
                oc.lr = rt_lr_at(&o->sched, o->lr, num_update + 1, steps_per_epoch, total);
                oc.rescale_grad = (float)(1.0 / ((double)b * (double)t->ctx.loss_scale));
                bool f = rt_optim_step(m, &t->ctx, t->state, &oc);
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
            }
            rt_loss_scaler_update(&ls, finite, out, err);
            if (rt_loss_scaler_exhausted(&ls)) {
                fprintf(err, "%s: error: step %lld: the loss scale underflowed to %g (the "
                        "gradients overflow at every scale): the forward pass or the data hold "
                        "inf or NaN (find the node with --check-numerics)\n", o->prog,
                        (long long)step, (double)ls.s.scale);
                rc = 1;
                goto done;
            }
            step++;
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
                local = (Metric){0};
                tic = now;
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
        }
        char when[64];
        snprintf(when, sizeof when, "after epoch %lld", (long long)epoch);
        if (!validate(m, t, ds, run.idx, &nm, &val, err, o->prog, when)) {
            rc = 1;
            goto done;
        }
        validated = true;
        snprintf(pre, sizeof pre, "Epoch[%lld] Validation-", (long long)epoch);
        metric_print_lines(out, m, &val, pre);
        fflush(out);
    }
final:
    if (!validated) {
        if (!validate(m, t, ds, run.idx, &nm, &val, err, o->prog, "of the parameters")) {
            rc = 1;
            goto done;
        }
        metric_print_lines(out, m, &val, "Validation-");
    }
    fprintf(out, "Final validation-accuracy=%f\n", metric_acc(&val));
    fflush(out);
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
    fflush(out);
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
