/* lr.h - the learning-rate schedules (lr.c): MXNet's LRScheduler rules,
 * a pure function of the update count (the schedule's settings: settings.h).
 */
#ifndef AMPC_RT_LR_H
#define AMPC_RT_LR_H

#include <stdint.h>

#include "settings.h"

/* The learning rate of update t (1 on the first update; MXNet's num_update). */
float rt_lr_at(const RtLrSchedule *s, float base_lr, int64_t t, int64_t steps_per_epoch,
               int64_t total_steps);

#endif
