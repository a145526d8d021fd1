/* init.c - parameter initialisers with MXNet 1.x semantics
 * (mx@v1.x python/mxnet/initializer.py; FACTS.md E 4.4), on a counter-based
 * random generator so that every value is a pure function of (seed, the
 * parameter's name, the element's index): runs are reproducible, and adding
 * a parameter does not change the values of the others.
 *
 * The generator is rand.c's.  The parsers of initialiser specs and of
 * "name(key=value, ...)" calls are in settings.c.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "init.h"
#include "paramlayout.h"
#include "rand.h"

bool rt_init_fans(int rank, const int64_t *shape, double *fan_in, double *fan_out)
{
    if (rank < 2)
        return false;
    double hw = 1.0;
    for (int i = 2; i < rank; i++)
        hw *= (double)shape[i];
    *fan_in = (double)shape[1] * hw;
    *fan_out = (double)shape[0] * hw;
    return true;
}

bool rt_init_fill(const RtInit *ini, int rank, const int64_t *shape, int64_t numel, float *w,
                  uint64_t seed, uint64_t stream, char *err, size_t errlen)
{
    double scale = ini->scale;
    bool gaussian = ini->kind == RT_INIT_NORMAL;
    switch (ini->kind) {
    case RT_INIT_CONSTANT:
        for (int64_t i = 0; i < numel; i++)
            w[i] = ini->value;
        return true;
    case RT_INIT_UNIFORM:
    case RT_INIT_NORMAL:
        break;
    case RT_INIT_XAVIER: {
        double fin, fout;
        if (!rt_init_fans(rank, shape, &fin, &fout)) {
            snprintf(err, errlen, "xavier needs a tensor of rank 2 or more (MXNet: 'Xavier "
                     "initializer cannot be applied to vector'), this one has rank %d", rank);
            return false;
        }
        double factor = ini->factor == RT_FAN_IN ? fin
                      : ini->factor == RT_FAN_OUT ? fout : (fin + fout) / 2.0;
        scale = sqrt((double)ini->magnitude / factor);
        gaussian = ini->gaussian;
        break;
    }
    }
    for (int64_t i = 0; i < numel; i++)
        w[i] = gaussian ? (float)(scale * rt_rand_normal(seed, stream, (uint64_t)i))
                        : (float)(scale * (2.0 * rt_rand_uniform(seed, stream, (uint64_t)i) - 1.0));
    return true;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

const char *rt_init_rule(const RtParam *p, const char *weight_init)
{
    if (p->init && *p->init && strcmp(p->init, "default") != 0)
        return p->init;
    switch (p->kind) {
    case RT_PK_WEIGHT: return weight_init;
    case RT_PK_BIAS:
    case RT_PK_BETA:
    case RT_PK_MOVING_MEAN: return "zero";
    case RT_PK_GAMMA:
    case RT_PK_MOVING_VAR: return "one";
    case RT_PK_OTHER: break;
    }
    /* MXNet's Initializer.__call__ dispatch by name suffix */
    const char *n = p->name ? p->name : "";
    if (ends_with(n, "gamma") || ends_with(n, "moving_var") || ends_with(n, "max"))
        return "one";
    if (ends_with(n, "bias") || ends_with(n, "beta") || ends_with(n, "moving_mean") ||
        ends_with(n, "moving_inv_var") || ends_with(n, "moving_avg") || ends_with(n, "min"))
        return "zero";
    return weight_init;
}

bool rt_init_param(const RtParam *p, const char *weight_init, uint64_t seed, float *w, char *err,
                   size_t errlen)
{
    const char *rule = rt_init_rule(p, weight_init);
    RtInit ini;
    char e[256];
    if (!rt_init_parse(rule, &ini, e, sizeof e) ||
        !rt_init_fill(&ini, p->rank, p->shape, p->numel, w, seed, rt_hash_name(p->name), e,
                      sizeof e)) {
        snprintf(err, errlen, "parameter %s: %s", p->name, e);
        return false;
    }
    /* canonical order first (the values are a function of the canonical
     * index), then the device's layout */
    if (!rt_param_convert_inplace(p, RT_F32, w, RT_LAYOUT_NHWC)) {
        snprintf(err, errlen, "parameter %s: out of memory", p->name);
        return false;
    }
    return true;
}
