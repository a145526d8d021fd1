/* lossscale.h - the loss scaler of a run (lossscale.c): the host's
 * record of the device's loss scale, its MXNet log lines, and the rule
 * applied on the host as the tests' oracle (the settings: settings.h; the
 * rule itself: kernels/lossscale.h, which the device applies).
 */
#ifndef AMPC_RT_LOSSSCALE_H
#define AMPC_RT_LOSSSCALE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/lossscale.h"
#include "settings.h"

/* The loss scaler of a run: PyTorch's update rule (kernels/lossscale.h), the
 * new scale used from the next step. */
typedef struct {
    RtLossScaleMode mode; /* RT_LS_OFF, RT_LS_STATIC or RT_LS_DYNAMIC */
    AmpcLossScale s;      /* the scale and the count of finite steps since the last change */
    AmpcLossScaleRule rule;
    int64_t skipped;   /* dynamic: overflow steps skipped, in all */
    int64_t nonfinite; /* off/static: steps whose gradients held inf/NaN (applied: no skip) */
    /* dynamic, a fresh run before its first finite step: its overflows
     * calibrate the initial scale, said in one line, not one per step */
    bool calibrating;
    const char *prog; /* names the program in warnings ("PROG: warning: ..."), or NULL */
} RtLossScaler;

void rt_loss_scaler_init(RtLossScaler *ls, const RtLossScaleConfig *c, const char *amp);
/* A step as the device decided it (its record: the flag, and next, the
 * scale and tracker after the device's rule).  Dynamic: counts a skip on
 * overflow, takes next as the scale, logs MXNet's "AMP: decreasing loss
 * scale to %f" / "AMP: increasing loss scale to %f" to log when the scale
 * changes, and a warning to warn when it falls below 1.  Returns true when
 * the step was skipped (dynamic and !finite).  Off/static: counts non-finite
 * steps and returns false (the update was applied). */
bool rt_loss_scaler_report(RtLossScaler *ls, bool finite, AmpcLossScale next, FILE *log,
                           FILE *warn);
/* The tests' oracle: the rule (kernels/lossscale.h) applied on the host, then
 * reported as above.  The loop never calls it: the device decides. */
bool rt_loss_scaler_update(RtLossScaler *ls, bool finite, FILE *log, FILE *warn);
/* Dynamic: true once the scale has underflowed below FLT_MIN (every step
 * overflows at every scale: the forward pass holds inf or NaN). */
bool rt_loss_scaler_exhausted(const RtLossScaler *ls);

#endif
