/* init.c - parameter initialisers with MXNet 1.x semantics
 * (mx@v1.x python/mxnet/initializer.py; FACTS.md E 4.4), on a counter-based
 * random generator so that every value is a pure function of (seed, the
 * parameter's name, the element's index): runs are reproducible, and adding
 * a parameter does not change the values of the others.
 *
 * The generator is splitmix64's finaliser over a mixed counter; normals come
 * from Box-Muller (cosine branch) on two uniforms.  Also here: the parser of
 * "name(key=value, ...)" calls, shared with the train-block defaults.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

/* ---- random numbers -------------------------------------------------------- */

uint64_t rt_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t rt_rand_u64(uint64_t seed, uint64_t stream, uint64_t i)
{
    uint64_t key = rt_mix64(seed + 0x9E3779B97F4A7C15ull) ^
                   rt_mix64(stream ^ 0xD1B54A32D192ED03ull);
    return rt_mix64(key + (i + 1) * 0x9E3779B97F4A7C15ull);
}

double rt_rand_uniform(uint64_t seed, uint64_t stream, uint64_t i)
{
    return (double)(rt_rand_u64(seed, stream, i) >> 11) * (1.0 / 9007199254740992.0);
}

double rt_rand_normal(uint64_t seed, uint64_t stream, uint64_t i)
{
    double u1 = 1.0 - rt_rand_uniform(seed, stream, 2 * i); /* (0, 1]: log is finite */
    double u2 = rt_rand_uniform(seed, stream, 2 * i + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t rt_hash_name(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

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
    char *end;
    errno = 0;
    double d = strtod(c->val[i], &end);
    if (end == c->val[i] || *end || errno == ERANGE || !isfinite(d))
        *bad = true;
    else
        *v = d;
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

static bool get_num(const RtCall *c, const char *key, float *dst, const char *s, char *err,
                    size_t errlen)
{
    double v;
    bool bad = false;
    if (!rt_call_num(c, key, &v, &bad))
        return true;
    if (bad) {
        snprintf(err, errlen, "initialiser '%s': %s must be a number", s, key);
        return false;
    }
    *dst = (float)v;
    return true;
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
        return only_keys(&c, keys, s, err, errlen) &&
               get_num(&c, "scale", &ini->scale, s, err, errlen);
    }
    if (strcmp(c.name, "normal") == 0) {
        static const char *const keys[] = {"sigma", NULL};
        ini->kind = RT_INIT_NORMAL;
        ini->scale = 0.01f; /* MXNet's Normal default */
        return only_keys(&c, keys, s, err, errlen) &&
               get_num(&c, "sigma", &ini->scale, s, err, errlen);
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
    return true;
}
