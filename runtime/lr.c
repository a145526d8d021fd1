/* lr.c - the learning-rate schedules (--lr constant, cosine, step, poly
 * with warmup), MXNet's LRScheduler rules computed in double as Python
 * does.  A pure function of the step, apart from the loop so that tests
 * check it against MXNet's values directly.
 */
#include <math.h>

#include "lr.h"

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
