/* gpu_kernels.c - the GPUK and GPU_STEP rows of kernels.def evaluated at
 * given sizes (gpu_kernels.h): the counts of each launch a call makes. */
#include "gpu_kernels.h"

#include <math.h>
#include <string.h>

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

/* BatchNorm's segments (batchnorm.cuh): image by image, chunks of GK_BN_CHUNK along
 * inner; of a channel's elements, those the 8-wide loops take */
static double bn_main(double outer, double inner)
{
    double full = floor(inner / GK_BN_CHUNK), rest = inner - full * GK_BN_CHUNK;
    return outer * (full * GK_BN_CHUNK + 8 * floor(rest / 8));
}

static void add(GkLaunch *out, int *k, const GkLaunch *l)
{
    if (!l->absent && *k < GK_MAX_LAUNCHES)
        out[(*k)++] = *l;
}

int gk_describe(OpKind op, GkEntry e, const GkDims *d, GkLaunch *out)
{
    const double n = d->n, m = d->m, c = d->c, outer = d->outer, inner = d->inner, len = d->len;
    const double win = d->win, wmax = d->wmax, cover = d->cover, win2 = d->win2, cmax = d->cmax,
                 s = d->s, s2 = d->s2, h = d->h, h2 = d->h2, acc = d->acc, fix = d->fix,
                 glob = d->glob, dx = d->dx;
    const double dgamma = d->dgamma, dbeta = d->dbeta, saves = d->saves, bias = d->bias,
                 pad = d->pad, skip = d->skip, prob = d->prob, da = d->da, db = d->db;
    const double chunks = d->chunks, chunks2 = d->chunks2;
    const int mode = (int)d->mode;
    const double N = d->N, C = d->C, K = d->K, G = d->G > 0 ? d->G : 1, cp = d->cp, HW = d->HW,
                 PQ = d->PQ, RS = d->RS, stride = d->stride;
    const double R = outer * inner, segs = outer * cdiv(inner, GK_BN_CHUNK);
    const double bmain = bn_main(outer, inner), btail = R - bmain;
    (void)n, (void)m, (void)c, (void)len, (void)win, (void)wmax, (void)cover, (void)s, (void)s2;
    (void)h, (void)h2, (void)acc, (void)fix, (void)glob, (void)dx, (void)dgamma, (void)dbeta;
    (void)saves, (void)bias, (void)pad, (void)skip, (void)prob, (void)da, (void)db, (void)mode;
    (void)N, (void)C, (void)K, (void)G, (void)cp, (void)HW, (void)PQ, (void)RS, (void)stride;
    (void)segs, (void)bmain, (void)btail, (void)chunks, (void)chunks2;
    (void)win2, (void)cmax;
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
    const double n = d->n, s = d->s, h = d->h, acc = d->acc, da = d->da, db = d->db;
    const int mode = (int)d->mode;
    (void)n, (void)s, (void)h, (void)acc, (void)da, (void)db, (void)mode;
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
