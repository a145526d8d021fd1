/* settings.c - the training settings: their parsers and the one table of
 * train-block keys and program flags (settings.h).
 *
 * A leaf of the runtime (nothing here calls another runtime file), compiled
 * into libampcrt for the program and into libampc for the compiler, which
 * checks the train block and its own --optimizer/--loss-scale flags with
 * these same parsers.  Also here: the parser of "name(key=value, ...)"
 * calls, initialiser specs and loss-scale specs.
 */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "settings.h"

/* ---- "name(key=value, ...)" -------------------------------------------------- */

static const char *skip_ws(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    return s;
}

/* An identifier into dst[cap]; NULL if none or too long. */
static const char *ident(const char *s, char *dst, size_t cap)
{
    size_t n = 0;
    if (!isalpha((unsigned char)*s) && *s != '_')
        return NULL;
    while (isalnum((unsigned char)s[n]) || s[n] == '_')
        n++;
    if (n >= cap)
        return NULL;
    memcpy(dst, s, n);
    dst[n] = 0;
    return s + n;
}

bool rt_call_parse(const char *s, RtCall *c, char *err, size_t errlen)
{
    const char *s0 = s;
    memset(c, 0, sizeof *c);
    s = skip_ws(s);
    if (!(s = ident(s, c->name, sizeof c->name)))
        goto bad;
    s = skip_ws(s);
    if (*s == 0)
        return true;
    if (*s++ != '(')
        goto bad;
    s = skip_ws(s);
    if (*s == ')')
        goto end;
    for (;;) {
        if (c->nargs == RT_CALL_MAX_ARGS) {
            snprintf(err, errlen, "'%s': more than %d arguments", s0, RT_CALL_MAX_ARGS);
            return false;
        }
        int k = c->nargs++;
        if (!(s = ident(s, c->key[k], sizeof c->key[k])))
            goto bad;
        s = skip_ws(s);
        if (*s++ != '=')
            goto bad;
        s = skip_ws(s);
        size_t n = 0;
        if (*s == '"' || *s == '\'') {
            char q = *s++;
            while (s[n] && s[n] != q)
                n++;
            if (s[n] != q || n >= sizeof c->val[k])
                goto bad;
            memcpy(c->val[k], s, n);
            s += n + 1;
        } else {
            while (s[n] && s[n] != ',' && s[n] != ')' && !isspace((unsigned char)s[n]))
                n++;
            if (n == 0 || n >= sizeof c->val[k])
                goto bad;
            memcpy(c->val[k], s, n);
            s += n;
        }
        c->val[k][n] = 0;
        for (int j = 0; j < k; j++)
            if (strcmp(c->key[j], c->key[k]) == 0) {
                snprintf(err, errlen, "'%s': argument '%s' given twice", s0, c->key[k]);
                return false;
            }
        s = skip_ws(s);
        if (*s == ',') {
            s = skip_ws(s + 1);
            continue;
        }
        if (*s == ')')
            break;
        goto bad;
    }
end:
    s = skip_ws(s + 1);
    if (*s == 0)
        return true;
bad:
    snprintf(err, errlen, "'%s' is not of the form name or name(key=value, ...)", s0);
    return false;
}

static int call_find(const RtCall *c, const char *key)
{
    for (int i = 0; i < c->nargs; i++)
        if (strcmp(c->key[i], key) == 0)
            return i;
    return -1;
}

bool rt_call_num(const RtCall *c, const char *key, double *v, bool *bad)
{
    int i = call_find(c, key);
    if (i < 0)
        return false;
    if (!rt_parse_f64(c->val[i], -HUGE_VAL, HUGE_VAL, v))
        *bad = true;
    return true;
}

const char *rt_call_str(const RtCall *c, const char *key)
{
    int i = call_find(c, key);
    return i < 0 ? NULL : c->val[i];
}

/* ---- initialisers ------------------------------------------------------------ */

/* Checks that every argument of c is one of the NULL-ended keys. */
static bool only_keys(const RtCall *c, const char *const *keys, const char *s, char *err,
                      size_t errlen)
{
    for (int i = 0; i < c->nargs; i++) {
        const char *const *k = keys;
        while (*k && strcmp(*k, c->key[i]) != 0)
            k++;
        if (!*k) {
            snprintf(err, errlen, "initialiser '%s': %s() has no argument '%s'", s, c->name,
                     c->key[i]);
            return false;
        }
    }
    return true;
}

static bool call_float(const RtCall *c, const char *key, float *dst, const char *what, char *err,
                       size_t errlen);

static bool get_num(const RtCall *c, const char *key, float *dst, const char *s, char *err,
                    size_t errlen)
{
    char what[300];
    snprintf(what, sizeof what, "initialiser '%.250s'", s);
    return call_float(c, key, dst, what, err, errlen);
}

static bool get_factor(const RtCall *c, RtFanType *f, const char *s, char *err, size_t errlen)
{
    const char *v = rt_call_str(c, "factor_type");
    if (!v)
        return true;
    if (strcmp(v, "avg") == 0)
        *f = RT_FAN_AVG;
    else if (strcmp(v, "in") == 0)
        *f = RT_FAN_IN;
    else if (strcmp(v, "out") == 0)
        *f = RT_FAN_OUT;
    else {
        snprintf(err, errlen, "initialiser '%s': factor_type must be avg, in or out", s);
        return false;
    }
    return true;
}

bool rt_init_parse(const char *s, RtInit *ini, char *err, size_t errlen)
{
    RtCall c;
    if (!rt_call_parse(s, &c, err, errlen))
        return false;
    memset(ini, 0, sizeof *ini);
    if (strcmp(c.name, "zero") == 0 || strcmp(c.name, "zeros") == 0 ||
        strcmp(c.name, "one") == 0 || strcmp(c.name, "ones") == 0) {
        static const char *const none[] = {NULL};
        ini->kind = RT_INIT_CONSTANT;
        ini->value = c.name[1] == 'n' ? 1.0f : 0.0f;
        return only_keys(&c, none, s, err, errlen);
    }
    if (strcmp(c.name, "constant") == 0) {
        static const char *const keys[] = {"value", NULL};
        ini->kind = RT_INIT_CONSTANT;
        return only_keys(&c, keys, s, err, errlen) &&
               get_num(&c, "value", &ini->value, s, err, errlen);
    }
    if (strcmp(c.name, "uniform") == 0) {
        static const char *const keys[] = {"scale", NULL};
        ini->kind = RT_INIT_UNIFORM;
        ini->scale = 0.07f; /* MXNet's Uniform default */
        if (!only_keys(&c, keys, s, err, errlen) ||
            !get_num(&c, "scale", &ini->scale, s, err, errlen))
            return false;
        if (!(ini->scale >= 0)) { /* MXNet: low must be less or equal to high */
            snprintf(err, errlen, "initialiser '%s': scale must be >= 0", s);
            return false;
        }
        return true;
    }
    if (strcmp(c.name, "normal") == 0) {
        static const char *const keys[] = {"sigma", NULL};
        ini->kind = RT_INIT_NORMAL;
        ini->scale = 0.01f; /* MXNet's Normal default */
        if (!only_keys(&c, keys, s, err, errlen) ||
            !get_num(&c, "sigma", &ini->scale, s, err, errlen))
            return false;
        if (!(ini->scale > 0)) { /* MXNet: the scale "has to be positive" */
            snprintf(err, errlen, "initialiser '%s': sigma must be > 0", s);
            return false;
        }
        return true;
    }
    if (strcmp(c.name, "xavier") == 0) {
        static const char *const keys[] = {"rnd_type", "factor_type", "magnitude", NULL};
        ini->kind = RT_INIT_XAVIER;
        ini->factor = RT_FAN_AVG;
        ini->magnitude = 3.0f;
        if (!only_keys(&c, keys, s, err, errlen) || !get_factor(&c, &ini->factor, s, err, errlen) ||
            !get_num(&c, "magnitude", &ini->magnitude, s, err, errlen))
            return false;
        const char *r = rt_call_str(&c, "rnd_type");
        if (r && strcmp(r, "uniform") != 0 && strcmp(r, "gaussian") != 0) {
            snprintf(err, errlen, "initialiser '%s': rnd_type must be uniform or gaussian", s);
            return false;
        }
        ini->gaussian = r && strcmp(r, "gaussian") == 0;
        if (!(ini->magnitude >= 0)) {
            snprintf(err, errlen, "initialiser '%s': magnitude must be >= 0", s);
            return false;
        }
        return true;
    }
    if (strcmp(c.name, "msra_prelu") == 0 || strcmp(c.name, "msraprelu") == 0) {
        /* msraprelu: MXNet's registry name (the class name lower-cased) */
        static const char *const keys[] = {"factor_type", "slope", NULL};
        float slope = 0.25f;
        ini->kind = RT_INIT_XAVIER;
        ini->gaussian = true;
        ini->factor = RT_FAN_AVG;
        if (!only_keys(&c, keys, s, err, errlen) || !get_factor(&c, &ini->factor, s, err, errlen) ||
            !get_num(&c, "slope", &slope, s, err, errlen))
            return false;
        ini->magnitude = (float)(2.0 / (1.0 + (double)slope * slope));
        return true;
    }
    snprintf(err, errlen, "unknown initialiser '%s' (zero, one, constant, uniform, normal, "
             "xavier, msra_prelu)", s);
    return false;
}

/* ---- loss scale --------------------------------------------------------------- */

void rt_loss_scale_default(RtLossScaleConfig *c)
{
    c->mode = RT_LS_DEFAULT;
    c->init = 65536.0f;
    c->growth = 2.0f;
    c->backoff = 0.5f;
    c->interval = 2000;
    c->min_scale = 0.0f;
    c->max_scale = 16777216.0f; /* 2^24, MXNet's _max_loss_scale */
}

/* The one rule of the effective mode: the program's loss scaler and ampc's
 * kvstore cost model (through compiler/frontend.c) both call it. */
const char *rt_loss_scale_mode_name(RtLossScaleMode mode)
{
    switch (mode) {
    case RT_LS_OFF: return "off";
    case RT_LS_STATIC: return "static";
    case RT_LS_DYNAMIC: return "dynamic";
    case RT_LS_DEFAULT: break;
    }
    return "default";
}

RtLossScaleMode rt_loss_scale_mode(const RtLossScaleConfig *c, const char *amp)
{
    if (c->mode != RT_LS_DEFAULT)
        return c->mode;
    return amp && strcmp(amp, "float16") == 0 ? RT_LS_DYNAMIC : RT_LS_OFF;
}


/* A number argument under either of two names (ampc's, PyTorch's). */
static bool arg(const RtCall *c, const char *key, const char *alt, double *v, bool *seen,
                const char *s, char *err, size_t errlen)
{
    bool bad = false;
    bool a = rt_call_num(c, key, v, &bad);
    if (!a && alt)
        a = rt_call_num(c, alt, v, &bad);
    if (a && rt_call_str(c, key) && alt && rt_call_str(c, alt)) {
        snprintf(err, errlen, "loss scale '%s': %s and %s are the same setting", s, key, alt);
        return false;
    }
    if (bad) {
        snprintf(err, errlen, "loss scale '%s': %s must be a number", s, key);
        return false;
    }
    *seen = a;
    return true;
}

bool rt_loss_scale_parse(const char *s, RtLossScaleConfig *c, char *err, size_t errlen)
{
    size_t len = rt_decimal_len(s, false);
    if (len && !s[len + strspn(s + len, " ")]) { /* a number: a static scale */
        char num[64];
        double x = 0;
        if (len < sizeof num) {
            memcpy(num, s, len);
            num[len] = 0;
        }
        if (len >= sizeof num || !rt_parse_f64(num, 0, FLT_MAX, &x) || !(x > 0)) {
            snprintf(err, errlen,
                     "loss scale '%s': a static scale must be a number above 0 and "
                     "at most 3.4028235e+38 (the largest float)",
                     s);
            return false;
        }
        c->mode = RT_LS_STATIC;
        c->init = (float)x;
        return true;
    }
    RtCall call;
    char e[256];
    if (!rt_call_parse(s, &call, e, sizeof e)) {
        snprintf(err, errlen, "loss scale %s (expected dynamic, dynamic(init=, growth=, "
                 "backoff=, interval=, min=, max=), off or a number)", e);
        return false;
    }
    if (strcmp(call.name, "off") == 0 || strcmp(call.name, "none") == 0) {
        if (call.nargs) {
            snprintf(err, errlen, "loss scale '%s': %s takes no arguments", s, call.name);
            return false;
        }
        c->mode = RT_LS_OFF;
        return true;
    }
    if (strcmp(call.name, "dynamic") != 0) {
        snprintf(err, errlen, "loss scale '%s': expected dynamic, dynamic(init=, growth=, "
                 "backoff=, interval=, min=, max=), off or a number", s);
        return false;
    }
    static const char *const keys[] = {"init", "init_scale", "growth", "growth_factor",
                                       "backoff", "backoff_factor", "interval", "growth_interval",
                                       "min", "min_scale", "max", "max_scale", NULL};
    for (int i = 0; i < call.nargs; i++) {
        const char *const *k = keys;
        while (*k && strcmp(*k, call.key[i]) != 0)
            k++;
        if (!*k) {
            snprintf(err, errlen, "loss scale '%s': dynamic() has no argument '%s' (init, "
                     "growth, backoff, interval, min, max)", s, call.key[i]);
            return false;
        }
    }
    RtLossScaleConfig n = *c;
    if (n.mode != RT_LS_DYNAMIC && n.mode != RT_LS_DEFAULT)
        rt_loss_scale_default(&n);
    n.mode = RT_LS_DYNAMIC;
    double v;
    bool seen;
    if (!arg(&call, "init", "init_scale", &v, &seen, s, err, errlen))
        return false;
    if (seen)
        n.init = (float)v;
    if (seen && (!(v > 0) || v > FLT_MAX)) {
        snprintf(err, errlen, "loss scale '%s': init must be a positive finite number", s);
        return false;
    }
    if (!arg(&call, "growth", "growth_factor", &v, &seen, s, err, errlen))
        return false;
    if (seen && !(v > 1 && v <= 1e6)) {
        snprintf(err, errlen, "loss scale '%s': growth must be in (1, 1e6]", s);
        return false;
    }
    if (seen)
        n.growth = (float)v;
    if (!arg(&call, "backoff", "backoff_factor", &v, &seen, s, err, errlen))
        return false;
    if (seen && !(v > 0 && v < 1)) {
        snprintf(err, errlen, "loss scale '%s': backoff must be in (0, 1)", s);
        return false;
    }
    if (seen)
        n.backoff = (float)v;
    if (!arg(&call, "interval", "growth_interval", &v, &seen, s, err, errlen))
        return false;
    if (seen && !(v >= 1 && v <= INT32_MAX && v == floor(v))) {
        snprintf(err, errlen, "loss scale '%s': interval must be an integer >= 1", s);
        return false;
    }
    if (seen)
        n.interval = (int32_t)v;
    if (!arg(&call, "min", "min_scale", &v, &seen, s, err, errlen))
        return false;
    if (seen && !(v >= 0 && v <= FLT_MAX)) {
        snprintf(err, errlen, "loss scale '%s': min must be a number >= 0 (0: no minimum)", s);
        return false;
    }
    if (seen)
        n.min_scale = (float)v;
    if (!arg(&call, "max", "max_scale", &v, &seen, s, err, errlen))
        return false;
    if (seen && !(v > 0 && v <= FLT_MAX)) {
        snprintf(err, errlen, "loss scale '%s': max must be a positive finite number", s);
        return false;
    }
    if (seen)
        n.max_scale = (float)v;
    if (n.min_scale > n.max_scale || n.init > n.max_scale || n.init < n.min_scale) {
        snprintf(err, errlen, "loss scale '%s': needs min <= init <= max (here %g, %g, %g)", s,
                 (double)n.min_scale, (double)n.init, (double)n.max_scale);
        return false;
    }
    *c = n;
    return true;
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
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->epsilon = 1e-8f;
    o->sched.kind = RT_LR_CONSTANT;
    o->sched.warmup_mode = RT_WARMUP_LINEAR;
    o->seed = 42;
    o->data = "synthetic";
    const char *dir = getenv("AMPC_DATA_DIR");
    o->data_dir = dir && *dir ? dir : rt_default_data_dir();
    o->init = "xavier(rnd_type=\"uniform\", factor_type=\"avg\", magnitude=3)";
    o->log_interval = 50;
    o->threads = 0;
    rt_loss_scale_default(&o->loss_scale);
    o->inject_inf_step = -1;
    o->inject_nan_step = -1;
    o->mpi_timeout = 60;
    o->mpi_bucket_mb = 4;
    o->inject_rank = -1;
    o->cudnn_autotune = -1;
    o->cudnn_workspace_mb = -1;
    o->cudnn_fp32 = -1;
    o->cudnn_nondeterministic = -1;
    o->cudnn_autotune_max = -1;
    o->cudnn_runtime_compiled = -1;
    o->prog = "train";
}

/* ---- the number grammar ------------------------------------------------------ */

bool rt_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *v)
{
    size_t n = rt_decimal_len(s, true);
    if (n == 0 || s[n])
        return false;
    errno = 0;
    long long x = strtoll(s, NULL, 10);
    if (errno == ERANGE || x < lo || x > hi)
        return false;
    *v = x;
    return true;
}

bool rt_parse_f64(const char *s, double lo, double hi, double *v)
{
    size_t n = rt_decimal_len(s, false);
    if (n == 0 || s[n])
        return false;
    errno = 0;
    double x = strtod(s, NULL);
    if ((errno == ERANGE && (x == HUGE_VAL || x == -HUGE_VAL)) || !isfinite(x) || x < lo || x > hi)
        return false;
    *v = x;
    return true;
}

static bool parse_u64(const char *s, uint64_t *v)
{
    size_t n = rt_decimal_len(s, true);
    if (n == 0 || s[n] || *s == '-' || *s == '+')
        return false;
    errno = 0;
    unsigned long long x = strtoull(s, NULL, 10);
    if (errno == ERANGE)
        return false;
    *v = x;
    return true;
}

/* A float setting: the bounds are doubles (0.001 as a float is above 0.001). */
static bool parse_float(const char *s, double lo, double hi, float *v)
{
    double x;
    if (!rt_parse_f64(s, lo, hi, &x))
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
    if (bad || !(fabs(v) <= FLT_MAX)) {
        snprintf(err, errlen,
                 "%s: %s must be a decimal number from -3.4028235e+38 to "
                 "3.4028235e+38 (a float)",
                 what, key);
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
    RtOptKind kind;
    if (strcmp(c.name, "sgd") == 0)
        kind = RT_OPT_SGD;
    else if (strcmp(c.name, "nag") == 0)
        kind = RT_OPT_NAG;
    else if (strcmp(c.name, "adam") == 0)
        kind = RT_OPT_ADAM;
    else {
        snprintf(err, errlen, "optimizer '%s' is not supported (sgd, nag, adam)",
                 c.name);
        return false;
    }
    /* multi_precision is the compiler's (the table's has_master); accepted here */
    static const char *const keys[] = {"momentum", "wd", "clip_gradient", "learning_rate", "lr",
                                       "multi_precision", NULL};
    static const char *const adam_keys[] = {"beta1", "beta2", "epsilon", "wd", "clip_gradient",
                                            "learning_rate", "lr", "multi_precision", NULL};
    if (!call_keys(&c, kind == RT_OPT_ADAM ? adam_keys : keys, v, err, errlen))
        return false;
    float b1 = o->beta1, b2 = o->beta2, eps = o->epsilon;
    if (!call_float(&c, "beta1", &b1, v, err, errlen) ||
        !call_float(&c, "beta2", &b2, v, err, errlen) ||
        !call_float(&c, "epsilon", &eps, v, err, errlen))
        return false;
    if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1) || !(eps > 0)) {
        snprintf(err, errlen, "%s: needs beta1 and beta2 in [0, 1) and epsilon > 0", v);
        return false;
    }
    o->optimizer = kind;
    o->beta1 = b1;
    o->beta2 = b2;
    o->epsilon = eps;
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

/* A list of up to RT_LR_MAX_STEPS increasing integers >= 1, "30,60,90"
 * (commas or spaces; brackets allowed). */
static int parse_steps(const char *v, int64_t *steps)
{
    int n = 0;
    const char *q = v;
    while (*q) {
        while (*q == ' ' || *q == ',' || *q == '[' || *q == ']')
            q++;
        if (!*q)
            break;
        size_t len = rt_decimal_len(q, true);
        char *end;
        errno = 0;
        long long x = len ? strtoll(q, &end, 10) : 0;
        if (len == 0 || errno == ERANGE || x < 1 || n == RT_LR_MAX_STEPS ||
            (n > 0 && x <= steps[n - 1]))
            return -1;
        steps[n++] = x;
        q = end;
        if (*q && *q != ',' && *q != ' ' && *q != ']')
            return -1;
    }
    return n;
}

/* lr = 0.1, constant(base=0.1), cosine(base=, final=, warmup_epochs= |
 * warmup_steps=, warmup_begin=, warmup_mode=linear|constant, max_update=)
 * (the MXNet names base_lr, final_lr and warmup_begin_lr too),
 * step(factor=, steps= | step_epochs=, stop_factor_lr=, warmups) or
 * poly(power=2, final=0, max_update=, warmups). */
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
    RtLrSchedule s = {.warmup_mode = RT_WARMUP_LINEAR, .power = 2.0f, .factor = 1.0f,
                      .stop_lr = 1e-8f};
    static const char *const cos_keys[] = {"base", "base_lr", "final", "final_lr", "warmup_epochs",
                                           "warmup_steps", "warmup_begin", "warmup_begin_lr",
                                           "warmup_mode", "max_update", NULL};
    static const char *const poly_keys[] = {"base", "base_lr", "final", "final_lr", "power", "pwr",
                                            "warmup_epochs", "warmup_steps", "warmup_begin",
                                            "warmup_begin_lr", "warmup_mode", "max_update", NULL};
    static const char *const step_keys[] = {"base", "base_lr", "factor", "steps", "step",
                                            "step_epochs", "stop_factor_lr", "warmup_epochs",
                                            "warmup_steps", "warmup_begin", "warmup_begin_lr",
                                            "warmup_mode", NULL};
    const char *const *keys;
    if (strcmp(c.name, "cosine") == 0) {
        s.kind = RT_LR_COSINE;
        keys = cos_keys;
    } else if (strcmp(c.name, "poly") == 0) {
        s.kind = RT_LR_POLY;
        keys = poly_keys;
    } else if (strcmp(c.name, "step") == 0 || strcmp(c.name, "factor") == 0 ||
               strcmp(c.name, "multifactor") == 0) {
        s.kind = RT_LR_STEP;
        keys = step_keys;
    } else {
        snprintf(err, errlen, "lr '%s': a number, constant(base=), cosine(base=, final=, "
                 "warmup_epochs=, warmup_begin=), step(factor=, steps=) or poly(power=, final=)",
                 v);
        return false;
    }
    if (!call_keys(&c, keys, v, err, errlen))
        return false;
    /* one key may not be given twice under two names */
    float wsteps = -1, maxu = 0;
    if (!call_float(&c, "base", &base, v, err, errlen) ||
        !call_float(&c, "base_lr", &base, v, err, errlen) ||
        !call_float(&c, "final", &s.final_lr, v, err, errlen) ||
        !call_float(&c, "final_lr", &s.final_lr, v, err, errlen) ||
        !call_float(&c, "power", &s.power, v, err, errlen) ||
        !call_float(&c, "pwr", &s.power, v, err, errlen) ||
        !call_float(&c, "factor", &s.factor, v, err, errlen) ||
        !call_float(&c, "stop_factor_lr", &s.stop_lr, v, err, errlen) ||
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
    if (s.kind == RT_LR_STEP) {
        const char *st = rt_call_str(&c, "steps");
        const char *st1 = rt_call_str(&c, "step");
        const char *se = rt_call_str(&c, "step_epochs");
        if ((st != NULL) + (st1 != NULL) + (se != NULL) != 1) {
            snprintf(err, errlen, "%s: give one of steps= (updates: one number for every N, a "
                     "list \"N1,N2,...\" for those updates) or step_epochs= (a list of epochs)", v);
            return false;
        }
        if (!st)
            st = st1;
        int n = parse_steps(st ? st : se, s.steps);
        bool list = strchr(st ? st : se, ',') != NULL || se != NULL;
        if (n < 1 || (!list && n != 1)) {
            snprintf(err, errlen, "%s: the steps must be integers >= 1, increasing, at most %d",
                     v, RT_LR_MAX_STEPS);
            return false;
        }
        if (list) {
            s.nsteps = n;
            s.steps_in_epochs = se != NULL;
        } else {
            s.period = s.steps[0];
        }
        if (!(s.factor > 0 && s.factor <= 1) || !(s.stop_lr >= 0)) {
            snprintf(err, errlen, "%s: factor must be in (0, 1] and stop_factor_lr >= 0", v);
            return false;
        }
    }
    if (s.kind == RT_LR_POLY && !(s.power >= 0)) {
        snprintf(err, errlen, "%s: power must be >= 0", v);
        return false;
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

/* --augment crop=PAD,mirror | mirror | crop=PAD | off */
static bool parse_augment(RtTrainOptions *o, const char *v, char *err, size_t errlen)
{
    int pad = 0;
    bool mirror = false;
    char buf[128];
    if (strlen(v) >= sizeof buf) {
        snprintf(err, errlen, "'%s': too long", v);
        return false;
    }
    strcpy(buf, v);
    if (strcmp(buf, "off") != 0 && strcmp(buf, "none") != 0) {
        for (char *save = NULL, *tok = strtok_r(buf, ", ", &save); tok;
             tok = strtok_r(NULL, ", ", &save)) {
            int64_t i;
            if (strcmp(tok, "mirror") == 0 || strcmp(tok, "flip") == 0)
                mirror = true;
            else if (strncmp(tok, "crop=", 5) == 0 && rt_parse_i64(tok + 5, 0, 64, &i))
                pad = (int)i;
            else {
                snprintf(err, errlen, "'%s': expected crop=PAD (0..64), mirror, or off", v);
                return false;
            }
        }
    }
    o->augment_pad = pad;
    o->augment_mirror = mirror;
    return true;
}

/* v without its quotes when it is one quoted string (the train block's
 * form of a string), else v. */
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

/* ---- one parser per setting (the table below) ------------------------------ */

#define SETTING(name)                                                                       \
    static bool name(RtTrainOptions *o, const char *v, RtSettingFrom from, char *err,     \
                     size_t errlen)
#define UNUSED_ARGS (void)o, (void)v, (void)from, (void)err, (void)errlen

static bool int_into(const char *v, int64_t lo, int64_t hi, int *dst)
{
    int64_t i;
    if (!rt_parse_i64(v, lo, hi, &i))
        return false;
    *dst = (int)i;
    return true;
}

SETTING(set_epochs) { UNUSED_ARGS; return int_into(v, 0, INT32_MAX, &o->epochs); }
SETTING(set_max_steps) { UNUSED_ARGS; return rt_parse_i64(v, 0, INT64_MAX, &o->max_steps); }
SETTING(set_batch_size) { UNUSED_ARGS; return rt_parse_i64(v, 1, INT32_MAX, &o->batch_size); }
SETTING(set_log_interval) { UNUSED_ARGS; return int_into(v, 0, INT32_MAX, &o->log_interval); }
SETTING(set_threads) { UNUSED_ARGS; return int_into(v, 1, 4096, &o->threads); }
SETTING(set_momentum) { UNUSED_ARGS; return parse_float(v, 0, 1, &o->momentum); }
SETTING(set_wd) { UNUSED_ARGS; return parse_float(v, 0, 1e30, &o->wd); }
SETTING(set_seed) { UNUSED_ARGS; return parse_u64(v, &o->seed); }
SETTING(set_optimizer) { UNUSED_ARGS; return parse_optimizer(o, v, err, errlen); }
SETTING(set_loss_scale) { UNUSED_ARGS; return rt_loss_scale_parse(v, &o->loss_scale, err, errlen); }

/* A number is the learning rate: a flag's keeps the schedule (as its base), a
 * train block's makes it constant.  Anything else is a schedule. */
SETTING(set_lr)
{
    UNUSED_ARGS;
    bool number = from == RT_FROM_FLAG
                      ? !strchr(v, '(') && strcmp(v, "cosine") != 0 && strcmp(v, "poly") != 0
                      : v[0] && strchr("0123456789+-.", v[0]) && !strchr(v, '(');
    if (number) {
        if (!parse_float(v, 0, 1e30, &o->lr))
            return false;
        if (from == RT_FROM_TRAIN)
            o->sched.kind = RT_LR_CONSTANT;
        return true;
    }
    return parse_lr(o, v, err, errlen);
}

SETTING(set_init)
{
    UNUSED_ARGS;
    RtInit ini;
    if (!rt_init_parse(v, &ini, err, errlen))
        return false;
    o->init = v;
    return true;
}

/* The names the runtime knows are kept as its own strings (v may be quoted). */
SETTING(set_data)
{
    UNUSED_ARGS;
    char b[64];
    const char *u = from == RT_FROM_TRAIN ? unquote(v, b, sizeof b) : v;
    static const char *const known[] = {"digits", "synthetic", "fashion_mnist", "cifar10", NULL};
    const char *keep = v;
    for (int k = 0; known[k]; k++)
        if (strcmp(u, known[k]) == 0)
            keep = known[k];
    RtDataSpec d;
    if (!rt_data_spec_parse(keep, &d, err, errlen))
        return false;
    o->data = keep;
    return true;
}

SETTING(set_augment)
{
    UNUSED_ARGS;
    char b[128];
    return parse_augment(o, from == RT_FROM_TRAIN ? unquote(v, b, sizeof b) : v, err, errlen);
}

SETTING(set_random_crop) { UNUSED_ARGS; return int_into(v, 0, 64, &o->augment_pad); }
SETTING(set_data_threads) { UNUSED_ARGS; return int_into(v, 1, 256, &o->data_threads); }
SETTING(set_data_decode_mb)
{
    UNUSED_ARGS;
    return rt_parse_i64(v, 1, (int64_t)1 << 30, &o->data_decode_mb);
}
SETTING(set_random_mirror) { UNUSED_ARGS; o->augment_mirror = true; return true; }
SETTING(set_eval_only) { UNUSED_ARGS; o->eval_only = true; return true; }
SETTING(set_overwrite) { UNUSED_ARGS; o->overwrite = true; return true; }
SETTING(set_check_numerics) { UNUSED_ARGS; o->check_numerics = true; return true; }
SETTING(set_profile) { UNUSED_ARGS; o->profile = true; return true; }
SETTING(set_cuda_graph) { UNUSED_ARGS; return int_into(v, 0, 1, &o->cuda_graph); }

/* A file or directory name: any non-empty string. */
static bool path_into(const char *v, const char **dst)
{
    if (!*v)
        return false;
    *dst = v;
    return true;
}

SETTING(set_data_dir) { UNUSED_ARGS; return path_into(v, &o->data_dir); }
SETTING(set_json_log) { UNUSED_ARGS; return path_into(v, &o->json_log); }
SETTING(set_save_dir) { UNUSED_ARGS; return path_into(v, &o->save_dir); }
SETTING(set_resume) { UNUSED_ARGS; return path_into(v, &o->resume); }
SETTING(set_dump_state) { UNUSED_ARGS; return path_into(v, &o->dump_state); }
SETTING(set_load_params) { UNUSED_ARGS; return path_into(v, &o->load_params); }
SETTING(set_save_params) { UNUSED_ARGS; return path_into(v, &o->save_params); }
SETTING(set_save_params_16bit) { UNUSED_ARGS; o->save_params_16bit = true; return true; }
SETTING(set_predict) { UNUSED_ARGS; return path_into(v, &o->predict); }
SETTING(set_output) { UNUSED_ARGS; return path_into(v, &o->output); }
SETTING(set_inject_inf) { UNUSED_ARGS; return rt_parse_i64(v, 0, INT64_MAX, &o->inject_inf_step); }

/* NODE:STEP; a node name may hold ':' (the last one separates the step). */
SETTING(set_inject_nan)
{
    UNUSED_ARGS;
    const char *colon = strrchr(v, ':');
    size_t n = colon ? (size_t)(colon - v) : 0;
    if (!colon || n == 0 || n >= sizeof o->inject_nan_node ||
        !rt_parse_i64(colon + 1, 0, INT64_MAX, &o->inject_nan_step))
        return false;
    memcpy(o->inject_nan_node, v, n);
    o->inject_nan_node[n] = 0;
    return true;
}

/* MPI runs (runtime/dist/mpi.c): accepted by every program, used by one
 * built with ampc --mpi. */
/* the bounds as doubles: 0.001f is above 0.001, which the message offers */
SETTING(set_mpi_timeout) { UNUSED_ARGS; return parse_float(v, 0.001, 1e6, &o->mpi_timeout); }
SETTING(set_mpi_bucket_mb) { UNUSED_ARGS; return parse_float(v, 0, 65536, &o->mpi_bucket_mb); }
SETTING(set_inject_rank) { UNUSED_ARGS; return int_into(v, 0, 1 << 20, &o->inject_rank); }
SETTING(set_inject_stop) { UNUSED_ARGS; o->inject_stop_at_start = true; return true; }
SETTING(set_save_all_ranks) { UNUSED_ARGS; o->save_all_ranks = true; return true; }
SETTING(set_independent_runs) { UNUSED_ARGS; o->independent_runs = true; return true; }
SETTING(set_sim_ranks) { UNUSED_ARGS; return int_into(v, 1, 4096, &o->sim_ranks); }

/* A CUDA program's device (runtime/trainer.c, rt_device_configure: a CPU
 * program refuses them). */
SETTING(set_cudnn_autotune) { UNUSED_ARGS; return int_into(v, 0, 1, &o->cudnn_autotune); }
SETTING(set_cudnn_workspace_mb)
{
    UNUSED_ARGS;
    return rt_parse_i64(v, 0, 1 << 20, &o->cudnn_workspace_mb);
}
SETTING(set_cudnn_fp32)
{
    UNUSED_ARGS;
    static const char *const modes[] = {"exact", "tf32", "fast"}; /* plan.h's order */
    for (int k = 0; k < 3; k++)
        if (strcmp(v, modes[k]) == 0) {
            o->cudnn_fp32 = k;
            return true;
        }
    return false;
}
SETTING(set_cudnn_nondeterministic)
{
    UNUSED_ARGS;
    o->cudnn_nondeterministic = 1;
    return true;
}
SETTING(set_cudnn_autotune_max)
{
    UNUSED_ARGS;
    return int_into(v, 1, 64, &o->cudnn_autotune_max);
}
SETTING(set_cudnn_runtime_compiled)
{
    UNUSED_ARGS;
    o->cudnn_runtime_compiled = 1;
    return true;
}
SETTING(set_cudnn_plan_cache)
{
    UNUSED_ARGS;
    o->cudnn_plan_cache = v;
    return v[0] != 0;
}
SETTING(set_cudnn_check)
{
    UNUSED_ARGS;
    o->cudnn_check = true;
    return true;
}

/* The compiler's settings: checked here so that the table knows every key. */
SETTING(set_amp)
{
    UNUSED_ARGS;
    static const char *const names[] = {"off", "float16", "fp16", "bfloat16", "bf16", NULL};
    for (int k = 0; names[k]; k++)
        if (strcmp(v, names[k]) == 0)
            return true;
    snprintf(err, errlen, "'%s' is not off, float16 or bfloat16", v);
    return false;
}

/* kvstore: ampc's placement (passes/kvstore.c; docs/kvstore.md), one of
 * MXNet's names the kvstore pass knows; ampc's --kvstore overrides it. */
SETTING(set_kvstore)
{
    UNUSED_ARGS;
    static const char *const names[] = {"auto", "local", "device", "nccl", "dist_sync", NULL};
    char b[64];
    const char *u = unquote(v, b, sizeof b);
    for (int k = 0; names[k]; k++)
        if (strcmp(u, names[k]) == 0)
            return true;
    snprintf(err, errlen, "'%s' is not auto, local, device, nccl or dist_sync", u);
    return false;
}

/* ---- the table -------------------------------------------------------------------- */

#define KEY RT_SET_KEY
#define FLAG RT_SET_FLAG
#define AMPC RT_SET_COMPILER
/* Every train-block key and every flag of the program.  A key with a flag is
 * the flag's name with '_' for '-'; docs/training.md lists the exceptions. */
const RtSetting rt_settings[] = {
    {"epochs", "epochs", KEY | FLAG, true, "an integer from 0 to 2147483647", set_epochs},
    {"max_steps", "max-steps", KEY | FLAG, true, "an integer from 0 to 9223372036854775807",
     set_max_steps},
    {"batch_size", "batch-size", KEY | FLAG, true, "an integer from 1 to 2147483647",
     set_batch_size},
    {"lr", "lr", KEY | FLAG, true, "a number from 0 to 1e30", set_lr},
    {"optimizer", "optimizer", KEY | FLAG | AMPC, true, "sgd(...), nag(...) or adam(...)",
     set_optimizer},
    {"init", "init", KEY | FLAG, true, "an initialiser", set_init},
    {"momentum", "momentum", KEY | FLAG, true, "a number in [0, 1]", set_momentum},
    {"wd", "wd", KEY | FLAG, true, "a number from 0 to 1e30", set_wd},
    {"loss_scale", "loss-scale", KEY | FLAG | AMPC, true, "a loss scale", set_loss_scale},
    {"seed", "seed", KEY | FLAG, true, "an integer from 0 to 18446744073709551615", set_seed},
    {"data", "data", KEY | FLAG, true, "a data source", set_data},
    {"augment", "augment", KEY | FLAG, true, "crop=PAD, mirror or off", set_augment},
    {"log_interval", "log-interval", KEY | FLAG, true, "an integer from 0 to 2147483647",
     set_log_interval},
    {"amp", NULL, KEY | AMPC, true, "off, float16 or bfloat16", set_amp},
    {"kvstore", NULL, KEY | AMPC, true, "auto, local, device, nccl or dist_sync", set_kvstore},
    {NULL, "data-dir", FLAG, true, "a directory", set_data_dir},
    {NULL, "threads", FLAG, true, "an integer from 1 to 4096", set_threads},
    {NULL, "data-threads", FLAG, true, "an integer from 1 to 256", set_data_threads},
    {NULL, "data-decode-mb", FLAG, true, "MiB from 1 to 1073741824", set_data_decode_mb},
    {NULL, "random-crop", FLAG, true, "a padding 0..64", set_random_crop},
    {NULL, "random-mirror", FLAG, false, "", set_random_mirror},
    {NULL, "json-log", FLAG, true, "a file name", set_json_log},
    {NULL, "profile", FLAG, false, "", set_profile},
    {NULL, "save-dir", FLAG, true, "a directory", set_save_dir},
    {NULL, "resume", FLAG, true, "a checkpoint file", set_resume},
    {NULL, "overwrite", FLAG, false, "", set_overwrite},
    {NULL, "eval-only", FLAG, false, "", set_eval_only},
    {NULL, "check-numerics", FLAG, false, "", set_check_numerics},
    {NULL, "inject-inf-at-step", FLAG, true, "a step number from 0 to 9223372036854775807",
     set_inject_inf},
    {NULL, "inject-nan", FLAG, true, "NODE:STEP (a node name, a step number from 0 to 9223372036854775807)",
     set_inject_nan},
    {NULL, "dump-state", FLAG, true, "a file name", set_dump_state},
    {NULL, "mpi-timeout", FLAG, true, "seconds from 0.001 to 1e6", set_mpi_timeout},
    {NULL, "mpi-bucket-mb", FLAG, true, "MiB from 0 to 65536", set_mpi_bucket_mb},
    {NULL, "inject-rank", FLAG, true, "a rank from 0 to 1048576", set_inject_rank},
    {NULL, "inject-stop-at-start", FLAG, false, "", set_inject_stop},
    {NULL, "save-all-ranks", FLAG, false, "", set_save_all_ranks},
    {NULL, "independent-runs", FLAG, false, "", set_independent_runs},
    {NULL, "sim-ranks", FLAG, true, "a number of ranks from 1 to 4096", set_sim_ranks},
    {NULL, "cudnn-autotune", FLAG, true, "0 or 1", set_cudnn_autotune},
    {NULL, "cudnn-workspace-mb", FLAG, true, "MiB from 0 to 1048576", set_cudnn_workspace_mb},
    {NULL, "cudnn-fp32", FLAG, true, "exact, tf32 or fast", set_cudnn_fp32},
    {NULL, "cudnn-nondeterministic", FLAG, false, "", set_cudnn_nondeterministic},
    {NULL, "cudnn-autotune-max", FLAG, true, "1 to 64", set_cudnn_autotune_max},
    {NULL, "cudnn-runtime-compiled", FLAG, false, "", set_cudnn_runtime_compiled},
    {NULL, "cudnn-plan-cache", FLAG, true, "a file", set_cudnn_plan_cache},
    {NULL, "cudnn-check", FLAG, false, "", set_cudnn_check},
    {NULL, "cuda-graph", FLAG, true, "0 or 1", set_cuda_graph},
    {NULL, "load-params", FLAG, true, "an MXNet .params file", set_load_params},
    {NULL, "save-params", FLAG, true, "a file name", set_save_params},
    {NULL, "save-params-16bit", FLAG, false, "", set_save_params_16bit},
    {NULL, "predict", FLAG, true, "a .npy file", set_predict},
    {NULL, "output", FLAG, true, "a file name", set_output},
};
const int rt_nsettings = (int)(sizeof rt_settings / sizeof rt_settings[0]);

const RtSetting *rt_setting_by_key(const char *key)
{
    for (int i = 0; i < rt_nsettings; i++)
        if (rt_settings[i].key && strcmp(rt_settings[i].key, key) == 0)
            return &rt_settings[i];
    return NULL;
}

const RtSetting *rt_setting_by_flag(const char *flag)
{
    for (int i = 0; i < rt_nsettings; i++)
        if (rt_settings[i].flag && strcmp(rt_settings[i].flag, flag) == 0)
            return &rt_settings[i];
    return NULL;
}

bool rt_setting_apply(RtTrainOptions *o, const RtSetting *s, const char *v, RtSettingFrom from,
                      char *err, size_t errlen)
{
    err[0] = 0;
    if (s->parse(o, v ? v : "", from, err, errlen))
        return true;
    if (!err[0])
        snprintf(err, errlen, "'%s' is not %s", v ? v : "", s->want);
    return false;
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
        const RtSetting *s = rt_setting_by_key(key);
        if (!s) {
            snprintf(err, errlen, "train default '%s': no train setting is called '%s'", *kv, key);
            return false;
        }
        if (!rt_setting_apply(o, s, eq + 1, RT_FROM_TRAIN, e, sizeof e)) {
            snprintf(err, errlen, "train default '%s': %s", *kv, e);
            return false;
        }
    }
    return true;
}

/* ---- data sources: "name" or "name(arg, key=arg, ...)" --------------------- */

static const char *const idx_keys[] = {"train_images", "train_labels", "test_images",
                                       "test_labels", "classes", NULL};

bool rt_data_spec_parse(const char *s, RtDataSpec *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    const char *p = s;
    while (*p == ' ')
        p++;
    size_t n = strcspn(p, "( ");
    static const char *const names[] = {"synthetic", "digits", "fashion_mnist", "idx", "cifar10",
                                        "recordio"};
    d->kind = -1;
    for (int k = 0; k < 6; k++)
        if (strlen(names[k]) == n && strncmp(p, names[k], n) == 0)
            d->kind = k;
    if (d->kind < 0)
        goto bad;
    p += n;
    while (*p == ' ')
        p++;
    int maxargs = d->kind == RT_DS_IDX                                    ? 5
                  : d->kind == RT_DS_RECORDIO                            ? 2
                  : d->kind == RT_DS_FASHION || d->kind == RT_DS_CIFAR10 ? 1
                                                                         : 0;
    if (*p == '(') {
        p++;
        while (*p == ' ')
            p++;
        int pos = 0;
        while (*p != ')') {
            int slot = pos;
            if (*p == ',') { /* "a,,b", "(,b)" */
                snprintf(err, errlen, "'%s': an empty item (nothing between two commas)", s);
                return false;
            }
            /* key= */
            size_t kl = 0;
            while ((p[kl] >= 'a' && p[kl] <= 'z') || p[kl] == '_')
                kl++;
            if (kl > 0 && p[kl] == '=') {
                slot = -1;
                for (int k = 0; d->kind == RT_DS_IDX && idx_keys[k]; k++)
                    if (strlen(idx_keys[k]) == kl && strncmp(p, idx_keys[k], kl) == 0)
                        slot = k;
                if (d->kind != RT_DS_IDX && d->kind != RT_DS_RECORDIO && kl == 3 &&
                    strncmp(p, "dir", 3) == 0)
                    slot = 0;
                if (d->kind == RT_DS_RECORDIO) /* train=, val=, else an option */
                    slot = kl == 5 && strncmp(p, "train", 5) == 0 ? 0
                           : kl == 3 && strncmp(p, "val", 3) == 0 ? 1
                                                                  : RT_DS_MAX_ARGS;
                if (slot == RT_DS_MAX_ARGS) {
                    if (d->nopts == RT_DS_MAX_OPTS || kl >= sizeof d->opt_key[0]) {
                        snprintf(err, errlen, "'%s': more than %d options, or a name longer than "
                                 "31", s, RT_DS_MAX_OPTS);
                        return false;
                    }
                    memcpy(d->opt_key[d->nopts], p, kl);
                    d->opt_key[d->nopts][kl] = 0;
                    for (int k = 0; k < d->nopts; k++)
                        if (strcmp(d->opt_key[k], d->opt_key[d->nopts]) == 0) {
                            snprintf(err, errlen, "'%s': %s() option '%s' given twice", s,
                                     names[d->kind], d->opt_key[k]);
                            return false;
                        }
                }
                if (slot < 0) {
                    snprintf(err, errlen, "'%s': %s() has no argument '%.*s'", s, names[d->kind],
                             (int)kl, p);
                    return false;
                }
                p += kl + 1;
            }
            bool opt = slot == RT_DS_MAX_ARGS;
            if (!opt && slot >= maxargs && d->kind == RT_DS_RECORDIO) {
                snprintf(err, errlen, "'%s': '%.*s': recordio() takes two files (TRAIN.rec, "
                         "VAL.rec), then options as KEY=VALUE", s, (int)strcspn(p, ",)"), p);
                return false;
            }
            if (!opt && slot >= maxargs) {
                snprintf(err, errlen, "'%s': too many arguments (%s takes %d)", s, names[d->kind],
                         maxargs);
                return false;
            }
            if (!opt && d->given[slot]) {
                snprintf(err, errlen, "'%s': argument %d given twice", s, slot + 1);
                return false;
            }
            char *dst = opt ? d->opt_val[d->nopts] : d->arg[slot];
            size_t len = 0, cap = opt ? sizeof d->opt_val[0] : sizeof d->arg[0];
            if (*p == '"' || *p == '\'') {
                /* the escapes ampc writes (ir/print.c): \\ \" \' \n \t */
                char q = *p++;
                while (*p && *p != q && len + 1 < cap) {
                    char c = *p++;
                    if (c == '\\' && *p) {
                        c = *p++;
                        c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
                    }
                    dst[len++] = c;
                }
                if (*p != q)
                    goto bad;
                p++;
            } else {
                while (*p && *p != ',' && *p != ')' && len + 1 < cap)
                    dst[len++] = *p++;
                while (len > 0 && dst[len - 1] == ' ')
                    len--;
            }
            dst[len] = 0;
            if (len == 0)
                goto bad;
            if (opt)
                d->nopts++;
            else {
                d->given[slot] = true;
                pos++;
            }
            while (*p == ' ')
                p++;
            if (*p == ',') {
                p++;
                while (*p == ' ')
                    p++;
                if (*p == ')') { /* "a, )" */
                    snprintf(err, errlen, "'%s': an empty item (a comma before ')')", s);
                    return false;
                }
            } else if (*p != ')')
                goto bad;
        }
        p++;
        d->nargs = pos;
    }
    while (*p == ' ')
        p++;
    if (*p)
        goto bad;
    if (d->kind == RT_DS_IDX)
        for (int k = 0; k < 4; k++)
            if (!d->given[k]) {
                snprintf(err, errlen, "'%s': idx() needs train_images, train_labels, test_images "
                         "and test_labels (%s missing)", s, idx_keys[k]);
                return false;
            }
    if (d->kind == RT_DS_RECORDIO && !d->given[0]) {
        snprintf(err, errlen, "'%s': recordio() needs the training file (TRAIN.rec)", s);
        return false;
    }
    if (d->kind == RT_DS_IDX && d->given[4]) {
        int64_t cl;
        if (!rt_parse_i64(d->arg[4], 2, 1 << 20, &cl)) {
            snprintf(err, errlen, "'%s': classes must be an integer >= 2", s);
            return false;
        }
    }
    return true;
bad:
    snprintf(err, errlen, "'%s' is not synthetic, digits, fashion_mnist, fashion_mnist(\"DIR\"), "
             "idx(TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS), cifar10(\"DIR\") or "
             "recordio(TRAIN.rec, VAL.rec, KEY=VALUE, ...)", s);
    return false;
}


/* ---- the settings together, against the model ---------------------------------- */

/* The images of the named sources (data/digits.c, data/idx.c for Fashion-MNIST,
 * data/cifar10.c), all of 10 classes; idx() and synthetic take their shape
 * from the files or the model. */
static const struct {
    int kind;
    const char *what;
    int64_t image[3];
} fixed_sources[] = {
    {RT_DS_DIGITS, "digits", {1, 8, 8}},
    {RT_DS_FASHION, "Fashion-MNIST", {1, 28, 28}},
    {RT_DS_CIFAR10, "CIFAR-10", {3, 32, 32}},
};

/* Images of [C, H, W] fit an input of shape[rank] when they hold as many
 * values and, for an input of rank 2 or more, the same dimensions once those
 * of size 1 are dropped from both (1x64 images are not 8x8 ones). */
#define RANK_MAX 8 /* rt.h's RT_MAX_RANK */

/* The values per sample of an input; -1 when a dimension is not positive or
 * the product overflows. */
static int64_t numel(int rank, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n = n > 0 && shape[d] > 0 && n <= INT64_MAX / shape[d] ? n * shape[d] : -1;
    return n;
}

static bool image_fits(const int64_t *image, int rank, const int64_t *shape)
{
    int64_t a[RANK_MAX], b[3], na = 0, nb = 0, n = numel(rank, shape);
    for (int d = 0; d < rank; d++)
        if (shape[d] != 1)
            a[na++] = shape[d];
    for (int d = 0; d < 3; d++)
        if (image[d] != 1)
            b[nb++] = image[d];
    if (n != image[0] * image[1] * image[2])
        return false;
    bool same = rank <= 1 || na == nb;
    for (int d = 0; rank > 1 && same && d < na; d++)
        same = a[d] == b[d];
    return same;
}

static void shape_text(char *buf, size_t cap, int rank, const int64_t *shape)
{
    size_t at = 0;
    buf[0] = 0;
    for (int d = 0; d < rank && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", d ? "x" : "", (long long)shape[d]);
}

const char *rt_settings_check(const RtTrainOptions *o, const char *model, int rank,
                              const int64_t *shape, int64_t classes, char *err, size_t errlen)
{
    if (o->sched.kind != RT_LR_CONSTANT && o->sched.warmup_begin > o->lr) {
        snprintf(err, errlen, "the %s schedule's warmup_begin (%g) exceeds the lr (%g)",
                 o->sched.kind == RT_LR_COSINE ? "cosine" : o->sched.kind == RT_LR_POLY ? "poly"
                                                                                      : "step",
                 (double)o->sched.warmup_begin, (double)o->lr);
        return "lr";
    }
    bool augment = o->augment_pad > 0 || o->augment_mirror;
    if (augment && rank != 3) {
        snprintf(err, errlen, "the model's input must be images [C, H, W] (model %s has rank %d)",
                 model, rank);
        return "augment";
    }
    RtDataSpec d; /* malformed: the parser said so where it was set (or opening will) */
    if (!rt_data_spec_parse(o->data, &d, err, errlen))
        d.kind = -1;
    if (augment && d.kind == RT_DS_DIGITS) {
        snprintf(err, errlen, "the digits data are never augmented (8x8 digits: a shift or a "
                 "mirror changes the class)");
        return "augment";
    }
    for (size_t k = 0; k < sizeof fixed_sources / sizeof fixed_sources[0]; k++) {
        const int64_t *im = fixed_sources[k].image;
        /* a rank out of range is the model table's error (rt_trainer_init) */
        if (fixed_sources[k].kind != d.kind || rank < 0 || rank > RANK_MAX ||
            (image_fits(im, rank, shape) && classes >= 10))
            continue;
        int64_t n = numel(rank, shape);
        char ms[160];
        shape_text(ms, sizeof ms, rank, shape);
        if (n == im[0] * im[1] * im[2] && classes >= 10)
            snprintf(err, errlen, "%s: its images are %lldx%lldx%lld (channels x rows x "
                     "columns); model %s takes %s per sample", fixed_sources[k].what,
                     (long long)im[0], (long long)im[1], (long long)im[2], model, ms);
        else
            snprintf(err, errlen, "%s: %lldx%lldx%lld images of 10 classes; model %s takes "
                     "%lld values per sample (%s) and has %lld classes", fixed_sources[k].what,
                     (long long)im[0], (long long)im[1], (long long)im[2], model, (long long)n,
                     ms, (long long)classes);
        return "data";
    }
    return NULL;
}
