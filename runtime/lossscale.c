/* lossscale.c - loss-scale settings and the run's loss scaler.
 *
 * Settings: loss_scale = dynamic(init=65536, growth=2, backoff=0.5,
 * interval=2000, min=0, max=2^24) | <number> | off, from the train block
 * (RtModel.train_defaults) or --loss-scale, parsed in settings.c (ampc checks
 * the train block with the same parser).  Unset, the mode follows the
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
 *
 * The device applies the rule (device.h, "the step without the host"); the
 * loop takes each step's outcome from the device's records and reports it
 * here (rt_loss_scaler_report).  rt_loss_scaler_update, the rule applied on
 * the host, is the tests' oracle for the device's; the loop never calls it.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lossscale.h"

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
    ls->calibrating = ls->mode == RT_LS_DYNAMIC;
}

bool rt_loss_scaler_update(RtLossScaler *ls, bool finite, FILE *log, FILE *warn)
{
    AmpcLossScale next = ls->s;
    if (ls->mode == RT_LS_DYNAMIC)
        next = ampc_loss_scale_update(ls->s, !finite, ls->rule);
    return rt_loss_scaler_report(ls, finite, next, log, warn);
}

bool rt_loss_scaler_report(RtLossScaler *ls, bool finite, AmpcLossScale next, FILE *log, FILE *warn)
{
    if (ls->mode != RT_LS_DYNAMIC) {
        if (!finite)
            ls->nonfinite++;
        return false;
    }
    float old = ls->s.scale;
    bool calibrating = ls->calibrating;
    if (!finite)
        ls->skipped++;
    else
        ls->calibrating = false;
    ls->s = next;
    float now = ls->s.scale;
    /* MXNet's lines, the scale as the integer it usually is (%.9g: exact) */
    if (now != old && log && !calibrating) {
        fprintf(log, "AMP: %s loss scale to %.9g\n", now < old ? "decreasing" : "increasing",
                (double)now);
        fflush(log);
    }
    if (calibrating && finite && ls->skipped > 0 && log) {
        fprintf(log, "AMP: the loss scale is calibrated: %.9g, after %lld skipped step%s\n",
                (double)now, (long long)ls->skipped, ls->skipped == 1 ? "" : "s");
        fflush(log);
    }
    if (now < 1.0f && old >= 1.0f && warn) {
        fprintf(warn,
                "%s%swarning: AMP: the loss scale fell below 1 (to %g): the gradients "
                "overflow even unscaled, so the forward pass, the loss or the data may hold inf "
                "or NaN (find the node with --check-numerics)\n",
                ls->prog ? ls->prog : "", ls->prog ? ": " : "", (double)now);
        fflush(warn);
    }
    return !finite;
}

bool rt_loss_scaler_exhausted(const RtLossScaler *ls)
{
    return ls->mode == RT_LS_DYNAMIC && !(ls->s.scale >= FLT_MIN);
}
