/* lossscale.c - loss-scale settings and the run's loss scaler.
 *
 * Settings: loss_scale = dynamic(init=65536, growth=2, backoff=0.5,
 * interval=2000, min=0, max=2^24) | <number> | off, from the train block
 * (RtModel.train_defaults) or --loss-scale.  Unset, the mode follows the
 * model's amp: dynamic for float16, off otherwise (bfloat16 has fp32's
 * exponent range).
 *
 * The rule is PyTorch's _amp_update_scale_ (kernels/lossscale.h, shared with
 * the CUDA backend): on overflow scale *= backoff and the step is skipped;
 * after `interval` finite steps in a row scale *= growth, capped at max.  The
 * new scale is used from the next step (PyTorch; MXNet applies it a step
 * later).  MXNet's defaults (2^16, x2 per 2000 clean steps, x0.5, cap 2^24)
 * are ampc's.  MXNet's log lines: "AMP: decreasing loss scale to %f" and
 * "AMP: increasing loss scale to %f".
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

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
    char *end;
    double x = strtod(s, &end);
    if (end != s) {
        while (*end == ' ')
            end++;
        if (*end == 0) {
            if (!(x > 0) || !isfinite(x) || x > FLT_MAX) {
                snprintf(err, errlen, "loss scale '%s': a static scale must be a positive "
                         "finite number", s);
                return false;
            }
            c->mode = RT_LS_STATIC;
            c->init = (float)x;
            return true;
        }
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

void rt_loss_scaler_init(RtLossScaler *ls, const RtLossScaleConfig *c, const char *amp)
{
    memset(ls, 0, sizeof *ls);
    ls->mode = rt_loss_scale_mode(c, amp);
    ls->s.scale = ls->mode == RT_LS_OFF ? 1.0f : c->init;
    ls->s.tracker = 0;
    ls->rule.growth = c->growth;
    ls->rule.backoff = c->backoff;
    ls->rule.interval = c->interval;
    ls->rule.min_scale = c->min_scale;
    ls->rule.max_scale = c->max_scale;
}

bool rt_loss_scaler_update(RtLossScaler *ls, bool finite, FILE *log, FILE *warn)
{
    if (ls->mode != RT_LS_DYNAMIC) {
        if (!finite)
            ls->nonfinite++;
        return false;
    }
    float old = ls->s.scale;
    if (!finite)
        ls->skipped++;
    ls->s = ampc_loss_scale_update(ls->s, !finite, ls->rule);
    float now = ls->s.scale;
    if (now != old && log) {
        fprintf(log, "AMP: %s loss scale to %f\n", now < old ? "decreasing" : "increasing",
                (double)now);
        fflush(log);
    }
    if (now < 1.0f && old >= 1.0f && warn) {
        fprintf(warn, "warning: AMP: the loss scale fell below 1 (to %g): the gradients "
                "overflow even unscaled, so the forward pass, the loss or the data may hold inf "
                "or NaN (find the node with --check-numerics)\n", (double)now);
        fflush(warn);
    }
    return !finite;
}

bool rt_loss_scaler_exhausted(const RtLossScaler *ls)
{
    return ls->mode == RT_LS_DYNAMIC && !(ls->s.scale >= FLT_MIN);
}
