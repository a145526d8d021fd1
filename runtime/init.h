/* init.h - the parameters' initial values (init.c): MXNet 1.x's
 * initialisers over the counter-based generator of rand.h, so every value is
 * a pure function of (seed, the parameter's name, the element's index).
 */
#ifndef AMPC_RT_INIT_H
#define AMPC_RT_INIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "program.h"
#include "settings.h" /* RtInit */

/* MXNet's Xavier fans: hw = prod(shape[2:]), fan_in = shape[1]*hw,
 * fan_out = shape[0]*hw.  False for rank < 2. */
bool rt_init_fans(int rank, const int64_t *shape, double *fan_in, double *fan_out);
/* Fills w[numel] from (seed, stream); false (err) for xavier on rank < 2. */
bool rt_init_fill(const RtInit *ini, int rank, const int64_t *shape, int64_t numel, float *w,
                  uint64_t seed, uint64_t stream, char *err, size_t errlen);
/* The initialiser text of a parameter: its init when not "default", else by
 * kind (MXNet's name rules for RT_PK_OTHER): weight -> weight_init, bias, beta,
 * moving_mean -> "zero", gamma, moving_var -> "one". */
const char *rt_init_rule(const RtParam *p, const char *weight_init);
/* Initialises parameter p into w[p->numel] (fp32); stream = rt_hash_name(name).
 * The values are made in the canonical order and then put in p's device
 * layout (paramlayout.h), so a KRSC weight starts from the OIHW one's values. */
bool rt_init_param(const RtParam *p, const char *weight_init, uint64_t seed, float *w, char *err,
                   size_t errlen);

#endif
