/* gpu_kernels.c - the GPUK and GPU_STEP rows of kernels.def evaluated at
 * given sizes (gpu_kernels.h): the counts of each launch a call makes. */
#include "gpu_kernels.h"
#include "../runtime/kernels/unary.h"

#include <math.h>
#include <string.h>

#include "../runtime/kernels/bn_tree.h" /* the GPU BatchNorm's tiles */

const char *const gk_flop_names[GK_NFLOP] = {
    "f32_add", "f32_mul", "f32_div",  "f32_sqrt", "f32_func", "f32_cmp", "f64_add",
    "f64_mul", "f64_div", "f64_sqrt", "f64_func", "f64_cmp",  "cvt",     "tensor",
};

const char *const gk_entry_suffix[GE_COUNT] = {"", "_data", "_weight", "_forward_train",
                                               "_forward_inference"};

/* the helpers the rows' expressions use (kernels.def's comment) */
static double cdiv(double a, double b) { return b > 0 ? ceil(a / b) : 0; }

/* the most blocks of a grid-stride launch: GK_GRID_CAP, or the emulation
 * build's (gk_set_grid_cap) */
static double grid_cap = GK_GRID_CAP;

void gk_set_grid_cap(double cap) { grid_cap = cap >= 1 ? cap : GK_GRID_CAP; }

/* ampc_cu_grid / ampc_lay_grid: 256-thread blocks, at most grid_cap */
static double grid(double x)
{
    double b = cdiv(x, GK_THREADS);
    return b < 1 ? 1 : b > grid_cap ? grid_cap : b;
}

/* a grid-stride loop over x: thread 0 takes elements 0, T, 2T, ... */
static double ept(double x) { return cdiv(x, grid(x) * GK_THREADS); }

static double mn(double a, double b) { return a < b ? a : b; }

/* BatchNorm's tiles (batchnorm.cuh; kernels/bn_tree.h): how many, and
 * the elements of a channel the longest takes */
static double bn_ntiles(double r, double c)
{
    return r > 0 && c > 0 ? (double)ampc_bn_tiles((int64_t)r, (int64_t)c) : 0;
}
static double bn_tile1(double r, double c)
{
    return r > 0 && c > 0 ? mn((double)ampc_bn_tile((int64_t)r, (int64_t)c), r) : 0;
}

/* kernels/unary.h's math per element, as the emulator counts it: each + -
 * * / one, a sqrtf one SQRT, any other libm call one FUNC, a compare one
 * CMP, sign's int to float one CVT; literals, fabsf and negation free.
 * ampc_unary (the forward) and ampc_unary_grad (f'(x) of _backward_unary,
 * whose dy * f'(x) the row adds) by AMPC_UNARY_<NAME>. */
typedef struct {
    unsigned char add, mul, div, sqrt, func, cmp, cvt;
} UFlops;
#define F1                                                                                         \
    {                                                                                              \
        .func = 1                                                                                  \
    }
static const UFlops ufwd[AMPC_UNARY_COUNT] = {
    [AMPC_UNARY_EXP] = F1,
    [AMPC_UNARY_LOG] = F1,
    [AMPC_UNARY_SQRT] = {.sqrt = 1},
    [AMPC_UNARY_SIN] = F1,
    [AMPC_UNARY_COS] = F1,
    [AMPC_UNARY_TAN] = F1,
    [AMPC_UNARY_ARCSIN] = F1,
    [AMPC_UNARY_ARCCOS] = F1,
    [AMPC_UNARY_ARCTAN] = F1,
    [AMPC_UNARY_SINH] = F1,
    [AMPC_UNARY_COSH] = F1,
    [AMPC_UNARY_ARCSINH] = F1,
    [AMPC_UNARY_ARCCOSH] = F1,
    [AMPC_UNARY_ARCTANH] = F1,
    [AMPC_UNARY_EXPM1] = F1,
    [AMPC_UNARY_LOG1P] = F1,
    [AMPC_UNARY_LOG2] = F1,
    [AMPC_UNARY_LOG10] = F1,
    [AMPC_UNARY_CBRT] = F1,
    [AMPC_UNARY_RCBRT] = {.div = 1, .func = 1}, /* 1 / cbrtf(x) */
    [AMPC_UNARY_RSQRT] = {.div = 1, .sqrt = 1}, /* 1 / sqrtf(x) */
    [AMPC_UNARY_RECIPROCAL] = {.div = 1},       /* 1 / x */
    [AMPC_UNARY_SQUARE] = {.mul = 1},           /* x * x */
    [AMPC_UNARY_ABS] = {0},                     /* fabsf */
    [AMPC_UNARY_NEGATIVE] = {0},                /* -x */
    [AMPC_UNARY_SIGN] = {.cmp = 2, .cvt = 1},   /* (x > 0) - (x < 0) */
    [AMPC_UNARY_ERF] = F1,
    [AMPC_UNARY_DEGREES] = {.mul = 1},
    [AMPC_UNARY_RADIANS] = {.mul = 1},
    [AMPC_UNARY_FLOOR] = F1,
    [AMPC_UNARY_CEIL] = F1,
    [AMPC_UNARY_ROUND] = F1,
    [AMPC_UNARY_TRUNC] = F1,
    [AMPC_UNARY_FIX] = F1,
    [AMPC_UNARY_RINT] = F1,
};
static const UFlops ugrad[AMPC_UNARY_COUNT] = {
    [AMPC_UNARY_EXP] = F1,                                           /* expf(x) */
    [AMPC_UNARY_LOG] = {.div = 1},                                   /* 1 / x */
    [AMPC_UNARY_SQRT] = {.div = 1, .sqrt = 1},                       /* 0.5 / sqrtf(x) */
    [AMPC_UNARY_SIN] = F1,                                           /* cosf(x) */
    [AMPC_UNARY_COS] = F1,                                           /* -sinf(x) */
    [AMPC_UNARY_TAN] = {.add = 1, .mul = 1, .func = 1},              /* 1 + t * t */
    [AMPC_UNARY_ARCSIN] = {.add = 1, .mul = 1, .div = 1, .sqrt = 1}, /* 1 / sqrt(1 - x x) */
    [AMPC_UNARY_ARCCOS] = {.add = 1, .mul = 1, .div = 1, .sqrt = 1},
    [AMPC_UNARY_ARCTAN] = {.add = 1, .mul = 1, .div = 1}, /* 1 / (1 + x x) */
    [AMPC_UNARY_SINH] = F1,
    [AMPC_UNARY_COSH] = F1,
    [AMPC_UNARY_ARCSINH] = {.add = 1, .mul = 1, .div = 1, .sqrt = 1},
    [AMPC_UNARY_ARCCOSH] = {.add = 1, .mul = 1, .div = 1, .sqrt = 1},
    [AMPC_UNARY_ARCTANH] = {.add = 1, .mul = 1, .div = 1},
    [AMPC_UNARY_EXPM1] = F1,
    [AMPC_UNARY_LOG1P] = {.add = 1, .div = 1}, /* 1 / (1 + x) */
    [AMPC_UNARY_LOG2] = {.mul = 1, .div = 1},  /* 1 / (x ln 2) */
    [AMPC_UNARY_LOG10] = {.mul = 1, .div = 1},
    [AMPC_UNARY_CBRT] = {.mul = 2, .div = 1, .func = 1},  /* 1 / (3 c c) */
    [AMPC_UNARY_RCBRT] = {.mul = 2, .div = 1, .func = 1}, /* -1 / (3 x c) */
    [AMPC_UNARY_RSQRT] = {.mul = 1, .div = 1, .sqrt = 1}, /* -0.5 / (x sqrt) */
    [AMPC_UNARY_RECIPROCAL] = {.mul = 1, .div = 1},       /* -1 / (x x) */
    [AMPC_UNARY_SQUARE] = {.mul = 1},                     /* 2 x */
    [AMPC_UNARY_ABS] = {.cmp = 2, .cvt = 1},              /* sign(x) */
    [AMPC_UNARY_ERF] = {.mul = 2, .func = 1},             /* c exp(-x x) */
    /* negative, degrees, radians: a literal; sign and the rounding ops: 0 */
};
#undef F1

static double uflops(int u, int grad, GkFlop f)
{
    if (u < 0 || u >= AMPC_UNARY_COUNT)
        return 0;
    const UFlops *t = grad ? &ugrad[u] : &ufwd[u];
    switch (f) {
    case GK_F32_ADD: return t->add;
    case GK_F32_MUL: return t->mul;
    case GK_F32_DIV: return t->div;
    case GK_F32_SQRT: return t->sqrt;
    case GK_F32_FUNC: return t->func;
    case GK_F32_CMP: return t->cmp;
    case GK_CVT: return t->cvt;
    default: return 0;
    }
}

static void add(GkLaunch *out, int *k, const GkLaunch *l)
{
    if (!l->absent && *k < GK_MAX_LAUNCHES)
        out[(*k)++] = *l;
}

int gk_describe(OpKind op, GkEntry e, const GkDims *d, GkLaunch *out)
{
    const double n = d->n, m = d->m, c = d->c, outer = d->outer, inner = d->inner, len = d->len;
    const double win = d->win, wmax = d->wmax, cover = d->cover, cmax = d->cmax, s = d->s,
                 s2 = d->s2, h = d->h, h2 = d->h2, acc = d->acc, fix = d->fix, glob = d->glob,
                 dx = d->dx;
    const double dgamma = d->dgamma, dbeta = d->dbeta, saves = d->saves, bias = d->bias,
                 pad = d->pad, skip = d->skip, prob = d->prob, da = d->da, db = d->db;
    const double chunks = d->chunks, chunks2 = d->chunks2;
    const int mode = (int)d->mode;
    const double N = d->N, C = d->C, K = d->K, G = d->G > 0 ? d->G : 1, cp = d->cp, HW = d->HW,
                 PQ = d->PQ, RS = d->RS, stride = d->stride;
    const double R = outer * inner;
    /* the tiled BatchNorm: tiles T, the longest's te1 elements; a tile's
     * channels 8 a load (bv 8) when a row's are adjacent and 8 divide c;
     * step 3 8 elements a thread (av) when they share constants (nq
     * vectors, nt left over) */
    const double T = bn_ntiles(R, c), te1 = bn_tile1(R, c);
    const double bv = inner == 1 && fmod(c, 8) == 0 ? 8 : 1;
    const double av = (inner == 1 && fmod(c, 8) == 0) || fmod(inner, 8) == 0;
    const double nq = av ? floor(n / 8) : 0, nt = n - 8 * nq;
    const double dsc = d->dsc;
    /* the vectorized element-wise kernels: 8-element vectors, the rest */
    const double eq = n >= 8 ? floor(n / 8) : 0, et = n - 8 * eq;
    (void)n, (void)m, (void)c, (void)len, (void)win, (void)wmax, (void)cover, (void)s, (void)s2;
    (void)h, (void)h2, (void)acc, (void)fix, (void)glob, (void)dx, (void)dgamma, (void)dbeta;
    (void)saves, (void)bias, (void)pad, (void)skip, (void)prob, (void)da, (void)db, (void)mode;
    (void)N, (void)C, (void)K, (void)G, (void)cp, (void)HW, (void)PQ, (void)RS, (void)stride;
    (void)chunks, (void)chunks2;
    (void)cmax, (void)T, (void)te1, (void)bv, (void)av, (void)nq, (void)nt, (void)dsc;
    (void)eq, (void)et;
    int k = 0;
#define GPUK(id, entry, kname, ...)                                                                \
    if (op == OP_##id && e == entry) {                                                             \
        GkLaunch l_ = {.kernel = #kname, __VA_ARGS__};                                             \
        add(out, &k, &l_);                                                                         \
    }
#include "kernels.def"
#undef GPUK
    return k;
}

int gk_describe_aux(const char *kernel, const GkDims *d, GkLaunch *out)
{
    const double n = d->n, m = d->m, s = d->s, h = d->h, acc = d->acc, da = d->da, db = d->db;
    const double N = d->N; /* the synthetic batch's samples */
    const int mode = (int)d->mode;
    (void)n, (void)m, (void)s, (void)h, (void)acc, (void)da, (void)db, (void)mode, (void)N;
    int k = 0;
#define GPU_AUX(kname, ...)                                                                        \
    if (k == 0 && strcmp(kernel, #kname) == 0) {                                                   \
        GkLaunch l_ = {.kernel = #kname, __VA_ARGS__};                                             \
        add(out, &k, &l_);                                                                         \
    }
#include "kernels.def"
#undef GPU_AUX
    return k;
}

int gk_describe_step(const GkStepDims *d, GkLaunch *out, const char **names)
{
    const double xb = d->xb, yb = d->yb, rb = d->rb, dyn = d->dyn, e16 = d->e16, e32 = d->e32;
    const double nblk = d->nblk, chunk0 = d->chunk0, ns = d->nstate, adam = d->adam, nag = d->nag,
                 h16 = d->h16;
    int k = 0;
#define GPU_STEP(what, kname, ...)                                                                 \
    {                                                                                              \
        GkLaunch l_ = {.kernel = #kname, __VA_ARGS__};                                             \
        if (!l_.absent && k < GK_MAX_STEP) {                                                       \
            names[k] = what;                                                                       \
            out[k++] = l_;                                                                         \
        }                                                                                          \
    }
#include "kernels.def"
#undef GPU_STEP
    return k;
}
