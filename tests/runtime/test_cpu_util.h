/* test_cpu_util.h - shared pieces of the CPU kernel tests (test_cpu_*.c).
 *
 * Every kernel is checked against a naive reference written in the test
 * (plain loops, double accumulation) with the shared tolerance checker of
 * runtime/kernels/tolerance.h (|got - ref| <= atol + rtol*|ref|, first
 * mismatches and the largest difference printed), in fp32 and with 16-bit
 * storage; and its fp32 backward against central differences of the double
 * reference's forward (fd_check).  Inputs are rounded to the storage dtype
 * before the reference sees them, so both compute on the same values.
 * Include after cmocka.h.
 */
#ifndef TEST_CPU_UTIL_H
#define TEST_CPU_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/tolerance.h"
#include "rt.h"

/* ---- deterministic random numbers (splitmix64) ---------------------------- */

static uint64_t tu_rng = 0x1234567887654321ull;

static inline void tu_seed(uint64_t s) { tu_rng = s * 0x9E3779B97F4A7C15ull + 1; }

static inline uint64_t tu_next(void)
{
    uint64_t z = (tu_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline double tu_uniform(double lo, double hi)
{
    return lo + (hi - lo) * (double)(tu_next() >> 11) * (1.0 / 9007199254740992.0);
}

static inline size_t tu_index(size_t n) { return (size_t)(tu_next() % n); }

static inline void tu_fill(double *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = tu_uniform(lo, hi);
}

/* Uniform in +-[lo, hi]: kept at least lo away from 0 (kinks). */
static inline void tu_fill_away(double *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++) {
        double v = tu_uniform(lo, hi);
        x[i] = tu_next() & 1 ? v : -v;
    }
}

static inline double *tu_dalloc(size_t n)
{
    double *p = calloc(n ? n : 1, sizeof *p);
    if (!p)
        abort();
    return p;
}

static inline float *tu_falloc(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof *p);
    if (!p)
        abort();
    return p;
}

static inline void *tu_walloc(size_t bytes)
{
    /* workspaces: exactly the queried size (ASan sees an overrun), NULL when
     * it is 0 (a kernel that touches it crashes), poisoned so that reading
     * scratch before writing it shows up */
    if (bytes == 0)
        return NULL;
    size_t sz = (bytes + RT_WS_ALIGN - 1) / RT_WS_ALIGN * RT_WS_ALIGN;
    void *p = aligned_alloc(RT_WS_ALIGN, sz);
    if (!p)
        abort();
    memset(p, 0xff, sz);
    return p;
}

/* ---- dtypes --------------------------------------------------------------- */

static inline double tu_round(double v, RtDType dt)
{
    float f = (float)v, r;
    if (dt == RT_F32)
        return (double)f;
    uint16_t h;
    rt_from_f32(&h, &f, 1, dt);
    rt_to_f32(&r, &h, 1, dt);
    return (double)r;
}

/* Rounds x in place to what dt can hold. */
static inline void tu_round_all(double *x, size_t n, RtDType dt)
{
    for (size_t i = 0; i < n; i++)
        x[i] = tu_round(x[i], dt);
}

/* A new buffer of dt holding x (rounded). */
static inline void *tu_pack(const double *x, size_t n, RtDType dt)
{
    float *f = tu_falloc(n);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)x[i];
    void *p = malloc((n ? n : 1) * rt_dtype_size(dt));
    if (!p)
        abort();
    rt_from_f32(p, f, n, dt);
    free(f);
    return p;
}

/* A new fp32 copy of a dt buffer. */
static inline float *tu_unpack(const void *p, size_t n, RtDType dt)
{
    float *f = tu_falloc(n);
    rt_to_f32(f, p, n, dt);
    return f;
}

static inline double *tu_unpack_d(const void *p, size_t n, RtDType dt)
{
    float *f = tu_unpack(p, n, dt);
    double *d = tu_dalloc(n);
    for (size_t i = 0; i < n; i++)
        d[i] = f[i];
    free(f);
    return d;
}

/* Tolerances per storage dtype: a relative part at the dtype's rounding
 * (with headroom for a few roundings) and an absolute part scaled by the
 * magnitude of the data. */
typedef struct {
    RtDType dt;
    double atol, rtol;
} TuTol;

static inline TuTol tu_tol(RtDType dt, double scale)
{
    switch (dt) {
    case RT_F32: return (TuTol){dt, 2e-5 * scale, 2e-4};
    case RT_F16: return (TuTol){dt, 2e-3 * scale, 4e-3};
    case RT_BF16: return (TuTol){dt, 2e-2 * scale, 3e-2};
    }
    return (TuTol){dt, 0, 0};
}

/* Compares a dt buffer with a double reference; returns the mismatches. */
static inline size_t tu_check(const char *name, const void *got, RtDType dt, const double *ref,
                              size_t n, TuTol t)
{
    float *g = tu_unpack(got, n, dt);
    float *r = tu_falloc(n);
    for (size_t i = 0; i < n; i++)
        r[i] = (float)ref[i];
    char label[160];
    snprintf(label, sizeof label, "%s (%s)", name, rt_dtype_name(dt));
    size_t bad = ampc_check_close(label, g, r, n, (float)t.atol, (float)t.rtol);
    free(g);
    free(r);
    return bad;
}

/* ---- finite differences ------------------------------------------------------- */

/* The reference loss: sum over outputs of ref_forward(inputs) * w, computed
 * in double from the inputs the context points at. */
typedef double (*TuLoss)(void *ctx);

/* Central differences of loss() in the coordinates of p (about `samples` of
 * them, chosen at random; all when n is small), compared with the kernel's
 * gradient got (fp32).  Returns the mismatches. */
static inline size_t tu_fd_check(const char *name, double *p, size_t n, const float *got,
                                 TuLoss loss, void *ctx, int samples, double h, double atol,
                                 double rtol)
{
    size_t bad = 0, worst = 0;
    double maxdiff = 0.0;
    size_t count = n <= (size_t)samples ? n : (size_t)samples;
    for (size_t s = 0; s < count; s++) {
        size_t i = n <= (size_t)samples ? s : tu_index(n);
        double old = p[i];
        p[i] = old + h;
        double lp = loss(ctx);
        p[i] = old - h;
        double lm = loss(ctx);
        p[i] = old;
        double fd = (lp - lm) / (2.0 * h);
        double diff = fabs(fd - (double)got[i]);
        if (diff > maxdiff) {
            maxdiff = diff;
            worst = i;
        }
        if (!(diff <= atol + rtol * fabs(fd))) {
            if (bad < 5)
                fprintf(stderr, "fd %s[%zu]: kernel %.9g, central difference %.9g\n", name, i,
                        (double)got[i], fd);
            bad++;
        }
    }
    if (bad)
        fprintf(stderr,
                "fd %s: %zu of %zu sampled out of tolerance (atol %g, rtol %g); "
                "max |diff| %.3g at %zu\n",
                name, bad, count, atol, rtol, maxdiff, worst);
    return bad;
}

/* Same for a double-precision result (a parameter gradient held as double). */
static inline size_t tu_fd_check_d(const char *name, double *p, size_t n, const double *got,
                                   TuLoss loss, void *ctx, int samples, double h, double atol,
                                   double rtol)
{
    float *g = tu_falloc(n);
    for (size_t i = 0; i < n; i++)
        g[i] = (float)got[i];
    size_t bad = tu_fd_check(name, p, n, g, loss, ctx, samples, h, atol, rtol);
    free(g);
    return bad;
}

static inline double tu_dot(const double *a, const double *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static inline double tu_maxabs(const double *a, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

/* ---- a harness for elementwise unary ops -------------------------------------- */

/* y = f(x) elementwise; the backward gets x, the kernel's own y and dy. */
typedef struct TuUnary {
    const char *name;
    double (*f)(double x, double a);  /* reference value */
    double (*df)(double x, double a); /* reference derivative */
    void (*fwd)(const struct TuUnary *u, size_t n, RtDType dt, const void *x, void *y);
    void (*bwd)(const struct TuUnary *u, size_t n, RtDType dt, const void *x, const void *y,
                const void *dy, void *dx, bool acc);
    double lo, hi;  /* inputs: |x| in [lo, hi], both signs unless positive */
    bool positive;
    double a;       /* a parameter (slope, scalar) */
    int op;         /* the kernel's enum value */
} TuUnary;

typedef struct {
    const TuUnary *u;
    double *x, *dy;
    size_t n;
} TuUnaryCtx;

static inline double tu_unary_loss(void *p)
{
    TuUnaryCtx *c = p;
    double s = 0.0;
    for (size_t i = 0; i < c->n; i++)
        s += c->u->f(c->x[i], c->u->a) * c->dy[i];
    return s;
}

/* Forward, in-place forward, backward (overwrite and accumulate) against the
 * reference, and (fd) central differences. */
static inline size_t tu_unary_run(const TuUnary *u, size_t n, RtDType dt, bool fd)
{
    double *x = tu_dalloc(n), *dy = tu_dalloc(n), *y = tu_dalloc(n), *dx = tu_dalloc(n);
    if (u->positive)
        tu_fill(x, n, u->lo, u->hi);
    else
        tu_fill_away(x, n, u->lo, u->hi);
    tu_fill(dy, n, -1, 1);
    tu_round_all(x, n, dt);
    tu_round_all(dy, n, dt);
    for (size_t i = 0; i < n; i++) {
        y[i] = u->f(x[i], u->a);
        dx[i] = dy[i] * u->df(x[i], u->a);
    }
    size_t esz = rt_dtype_size(dt), bad = 0;
    void *xs = tu_pack(x, n, dt), *dys = tu_pack(dy, n, dt), *ys = tu_pack(y, n, dt);
    void *dxs = tu_pack(dx, n, dt), *inplace = tu_pack(x, n, dt);
    char nm[128];
    memset(ys, 0x55, n * esz);
    u->fwd(u, n, dt, xs, ys);
    snprintf(nm, sizeof nm, "%s y", u->name);
    bad += tu_check(nm, ys, dt, y, n, tu_tol(dt, tu_maxabs(y, n)));
    u->fwd(u, n, dt, inplace, inplace);
    if (memcmp(inplace, ys, n * esz)) {
        fprintf(stderr, "%s: the in-place forward differs\n", u->name);
        bad++;
    }
    memset(dxs, 0x55, n * esz);
    u->bwd(u, n, dt, xs, ys, dys, dxs, false);
    snprintf(nm, sizeof nm, "%s dx", u->name);
    bad += tu_check(nm, dxs, dt, dx, n, tu_tol(dt, tu_maxabs(dx, n)));
    float *dx32 = tu_unpack(dxs, n, dt);
    /* in place: dx written over dy */
    void *ipg = tu_pack(dy, n, dt);
    u->bwd(u, n, dt, xs, ys, ipg, ipg, false);
    if (memcmp(ipg, dxs, n * esz)) {
        fprintf(stderr, "%s: the in-place backward differs\n", u->name);
        bad++;
    }
    free(ipg);
    double *pre = tu_dalloc(n);
    tu_fill(pre, n, -1, 1);
    tu_round_all(pre, n, dt);
    void *acc = tu_pack(pre, n, dt);
    for (size_t i = 0; i < n; i++)
        pre[i] += dx[i];
    u->bwd(u, n, dt, xs, ys, dys, acc, true);
    snprintf(nm, sizeof nm, "%s dx accumulate", u->name);
    bad += tu_check(nm, acc, dt, pre, n, tu_tol(dt, tu_maxabs(pre, n)));
    if (fd) {
        TuUnaryCtx c = {u, x, dy, n};
        bad += tu_fd_check(u->name, x, n, dx32, tu_unary_loss, &c, 20, 1e-5,
                           1e-5 * (tu_maxabs(dx, n) + 1), 1e-4);
    }
    free(x), free(dy), free(y), free(dx), free(pre), free(dx32);
    free(xs), free(dys), free(ys), free(dxs), free(inplace), free(acc);
    return bad;
}

/* Runs a table of unary cases in fp32 (with fd), fp16, and bf16 (n small). */
static inline size_t tu_unary_all(const TuUnary *cases, size_t ncases, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < ncases; i++) {
        bad += tu_unary_run(&cases[i], n, RT_F32, true);
        bad += tu_unary_run(&cases[i], n, RT_F16, false);
        bad += tu_unary_run(&cases[i], 37, RT_BF16, false);
    }
    return bad;
}

#define TU_DTYPES {RT_F32, RT_F16, RT_BF16}

#endif /* TEST_CPU_UTIL_H */
