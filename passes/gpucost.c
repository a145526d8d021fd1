/* gpucost.c - the GPU cost model (gpucost.h, docs/gpucost.md).
 *
 * One sweep of the lowered program: each call becomes the runtime functions
 * the emitted C calls (codegen/emit_c.c's choice, made here from the same
 * facts: the call's outputs and the node's attributes), each function the
 * launches its GPUK rows describe (ir/kernels.def), each launch a time
 * range on the machine.  Then the runtime's own work of a step, the host's
 * side and the waits.  No kernel is special-cased by name: a launch's time
 * follows from its counts and the machine; the constants below are the only
 * free numbers, each with its source, each a [fast, slow] pair.
 * Deterministic, no clock; a few milliseconds for ResNet-50. */
#include "gpucost.h"

#include "../runtime/kernels/bn_tree.h" /* BatchNorm's scratch */

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const gc_family_names[GF_COUNT] = {
    "conv_fwd", "conv_dgrad", "conv_wgrad", "bn_fwd", "bn_bwd", "elementwise",
    "pooling",  "loss_head",  "optimizer",  "copies", "other",
};
const char *const gc_bound_names[GB_COUNT] = {"memory", "compute", "latency", "serial", "launch"};

/* ---- the constants: the one table (docs/gpucost.md lists it with sources) ----- */

typedef enum {
    K_BW_VEC,       /* share of DRAM bandwidth: 16-byte accesses */
    K_BW_SCALAR,    /* 2- and 4-byte accesses, consecutive threads on consecutive elements */
    K_BW_STRIDED,   /* consecutive threads a plane apart (NCHW-ordered threads over NHWC) */
    K_BW_LIB,       /* a cuDNN or cuBLASLt call's own bytes */
    K_LATENCY,      /* times the machine's load latency: queueing under load */
    K_DEP_CYCLES,   /* cycles of one dependent arithmetic operation in a thread's chain */
    K_CVT_SLOTS,    /* fp32 issue slots per conversion (16/clk/SM against 64-128 fp32) */
    K_SFU_SLOTS,    /* fp32 slots per correctly rounded div, sqrt or libm call */
    K_LAUNCH,       /* times the machine's launch_us: a kernel's fixed device cost */
    K_LIB_KERNELS,  /* kernels per cuDNN execution (a split-K reduction adds one) */
    K_DGRAD,        /* the data gradient's efficiency over the forward's */
    K_WGRAD,        /* the filter gradient's */
    K_STRIDED_CONV, /* a strided convolution's over an unstrided one */
    K_GEMM_LARGE,   /* cuBLASLt: all of M, N, K >= 1024: share of the tensor peak */
    K_GEMM_SMALL,   /* otherwise */
    K_CUDNN_HOST,   /* host us per cuDNN execution (conv.c: its call site's pack reused) */
    K_FILL_NS,      /* host ns per element the synthetic source fills */
    K_PCIE,         /* share of the machine's pcie_GBps a pinned copy gets */
    K_WAIT_US,      /* a host wait: the event's completion seen by a sleeping thread */
    K_PLAN_MS,      /* autotune off: one plan's heuristic query and finalize */
    K_CAND_MS,      /* autotune: one candidate's finalize (its runs added apart) */
    K_CANDIDATES,   /* candidates timed per plan (tune.h: --cudnn-autotune-max, 4) */
    K_SCRATCH_MS,   /* autotune: one growth of the shared scratch (a buffer freed, allocated) */
    K_SCRATCH_N,    /* autotune: growths of the shared scratch in a start-up */
    K_CONTEXT_MB,   /* the CUDA context, cuDNN and cuBLASLt handles */
    K_COUNT
} GcKey;

static const GcConst konst[K_COUNT] = {
    [K_BW_VEC] = {"bw_vec", 0.90, 0.75, "estimate: copy kernels reach 85-92% of HBM peak"},
    [K_BW_SCALAR] = {"bw_scalar", 0.80, 0.55, "estimate: 2-byte loads, no unrolling"},
    [K_BW_STRIDED] = {"bw_strided", 0.30, 0.06,
                      "estimate: 1 of 16 bytes of a sector used, L2 recovers some"},
    [K_BW_LIB] = {"bw_lib", 0.85, 0.60, "estimate"},
    [K_LATENCY] = {"latency", 0.8, 1.5, "estimate: around the machine's dram/l2_latency_ns"},
    [K_DEP_CYCLES] = {"dep_cycles", 4, 8,
                      "CUDA C++ Programming Guide, arithmetic latency; estimate"},
    [K_CVT_SLOTS] = {"cvt_slots", 4, 8,
                     "CUDA C++ Programming Guide, throughput table (cc 8.0, 9.0)"},
    [K_SFU_SLOTS] = {"sfu_slots", 8, 24, "estimate: IEEE div/sqrt without fast math, libm calls"},
    [K_LAUNCH] = {"launch", 1.0, 2.0, "times the machine's launch_us"},
    [K_LIB_KERNELS] = {"lib_kernels", 1, 2, "estimate: cuDNN engines with a reduction kernel"},
    [K_DGRAD] = {"dgrad", 0.95, 0.85, "estimate (docs/gpucost.md)"},
    [K_WGRAD] = {"wgrad", 0.85, 0.65, "estimate (docs/gpucost.md)"},
    [K_STRIDED_CONV] = {"strided_conv", 0.90, 0.80, "estimate"},
    [K_GEMM_LARGE] = {"gemm_large", 0.75, 0.50, "estimate"},
    [K_GEMM_SMALL] = {"gemm_small", 0.35, 0.10, "estimate"},
    [K_CUDNN_HOST] = {"cudnn_host_us", 5, 15,
                      "estimate: the execute call, the call site's variant pack reused "
                      "(issue 26; 10-30 with a pack per call, shared/notes/cuda-read.md)"},
    [K_FILL_NS] = {"fill_ns", 6.5, 9.0,
                   "measured on this project's build machine, not the GPU's host: "
                   "bench/fill_rate.sh, fastest and median pass"},
    [K_PCIE] = {"pcie", 1.0, 0.8, "estimate: pinned memory"},
    [K_WAIT_US] = {"wait_us", 5, 20, "estimate"},
    [K_PLAN_MS] = {"plan_ms", 1, 20, "estimate"},
    [K_CAND_MS] = {"cand_ms", 2, 10,
                   "estimate: runtime-compiled engines are skipped unless asked (tune.h)"},
    [K_CANDIDATES] = {"candidates", 3, 4,
                      "runtime/cuda/tune.h: at most --cudnn-autotune-max (4) timed; estimate"},
    [K_SCRATCH_MS] = {"scratch_ms", 1, 5, "estimate: a cudaFree and a cudaMalloc"},
    [K_SCRATCH_N] = {"scratch_grows", 4, 40,
                     "estimate: x, w, y and a workspace, each grown a few times (tune.h)"},
    [K_CONTEXT_MB] = {"context_mb", 300, 600, "estimate"},
};

/* a constant at end e (0 fast, 1 slow) */
static double kv(GcKey k, int e) { return e ? konst[k].slow : konst[k].fast; }

/* cuDNN efficiency: share of the tensor-core peak, by filter class (1x1,
 * 3x3 and smaller, larger) and channel class (the smaller of the padded
 * input channels and the outputs: at most 8, under 64, under 256, more);
 * the forward's, the gradients scaled by K_DGRAD and K_WGRAD.  Estimates
 * (docs/gpucost.md, "cuDNN and cuBLASLt") until a GPU run calibrates them. */
static const GcRange conv_eff[3][4] = {
    {{0.08, 0.03}, {0.35, 0.20}, {0.55, 0.35}, {0.70, 0.45}}, /* 1x1 */
    {{0.12, 0.04}, {0.45, 0.25}, {0.65, 0.40}, {0.75, 0.50}}, /* 3x3 */
    {{0.15, 0.05}, {0.40, 0.20}, {0.55, 0.30}, {0.65, 0.40}}, /* 5x5 and larger */
};
#define GC_TILE 128.0   /* a library GEMM's output tile, each way */
#define GC_SPLIT_K 16.0 /* the most ways a filter gradient's reduction is split */

/* ---- sizes of a call ------------------------------------------------------------ */

static const char *const kfamily[OP_COUNT] = {
#define KERNEL(id, family, cpu, ws, mode, cuda, overwrites, unread, vectorized) [OP_##id] = #family,
#include "kernels.def"
#undef KERNEL
};

static bool is_family(const Node *n, const char *f)
{
    return kfamily[n->op] && strcmp(kfamily[n->op], f) == 0;
}

static double dimv(Dim d, int64_t batch) { return d < 0 ? (double)-d * (double)batch : (double)d; }

static double prod(const Shape *s, int lo, int hi, int64_t batch)
{
    double p = 1;
    for (int i = lo; i < hi && i < s->rank; i++)
        p *= dimv(s->d[i], batch);
    return p;
}

static double numel(const Node *n, int64_t batch)
{
    return prod(&n->shape, 0, n->shape.rank, batch);
}

static void dtype_dims(DType t, double *s, double *h)
{
    *s = dtype_size(t);
    *h = t == DT_F16;
}

typedef struct {
    const Graph *g;
    const Program *p;
    const KvMachine *m;
    const GcOptions *o;
    int64_t N;
} Gc;

static const Node *in_node(const Gc *c, const Node *n, int j) { return c->g->nodes[n->in[j]]; }

/* the call's outputs: its value written, and part k (1..3) */
static bool writes(const ProgCall *call, int k) { return k < call->nout && call->out[k] >= 0; }

/* emit_c.c's bn_dims: NHWC is [N*H*W, C, 1] */
static void bn_view(const Node *bn, const Node *x, int64_t N, GkDims *d)
{
    int64_t axis = node_int(bn, BN_AXIS);
    if (axis < 0)
        axis += x->shape.rank;
    if (bn->layout == LAYOUT_NHWC) {
        d->outer = prod(&x->shape, 0, 1, N) * prod(&x->shape, 2, 4, N);
        d->c = prod(&x->shape, 1, 2, N);
        d->inner = 1;
    } else {
        d->outer = prod(&x->shape, 0, (int)axis, N);
        d->c = prod(&x->shape, (int)axis, (int)axis + 1, N);
        d->inner = prod(&x->shape, (int)axis + 1, x->shape.rank, N);
    }
    d->n = d->outer * d->c * d->inner;
}

/* runtime/cuda/plan.c's ampc_conv_padded_c: NHWC without groups pads 1..4
 * channels to 4 and 5..7 to 8 */
static double padded_c(double c, double groups, bool nhwc)
{
    if (!nhwc || groups != 1)
        return c;
    return c <= 4 ? 4 : c < 8 ? 8 : c;
}

/* conv: x's shape, the output's (dy's or the node's) and the attributes */
static void conv_view(const Node *n, const Node *x, const Node *y, int64_t N, GkDims *d)
{
    d->N = dimv(x->shape.d[0], N);
    d->C = dimv(x->shape.d[1], N);
    d->K = (double)node_int(n, CONV_NUM_FILTER);
    d->G = (double)node_int(n, CONV_NUM_GROUP);
    d->HW = prod(&x->shape, 2, x->shape.rank, N);
    d->PQ = prod(&y->shape, 2, y->shape.rank, N);
    const AttrVal *k = node_tuple(n, CONV_KERNEL), *st = node_tuple(n, CONV_STRIDE);
    d->RS = 1;
    d->stride = 1;
    for (int i = 0; i < k->t.n; i++)
        d->RS *= (double)k->t.v[i];
    for (int i = 0; i < st->t.n; i++)
        d->stride = fmax(d->stride, (double)st->t.v[i]);
    d->cp = padded_c(d->C, d->G, n->layout == LAYOUT_NHWC);
    d->pad = d->cp != d->C;
}

/* Pooling's windows along each spatial axis (pool.cuh's window and range;
 * a window's taps are the product of its axes', so are the means below):
 * the mean taps a clipped window holds and of their squares, a full
 * window's taps, the outputs whose window holds an input (the mean and the
 * most) */
static void pool_view(const Node *n, const Node *x, const Node *y, int64_t N, GkDims *d)
{
    bool global = node_bool(n, POOL_GLOBAL_POOL);
    const AttrVal *kt = node_tuple(n, POOL_KERNEL), *st = node_tuple(n, POOL_STRIDE),
                  *pt = node_tuple(n, POOL_PAD);
    d->win = d->wmax = d->cover = d->cmax = 1;
    for (int a = 2; a < x->shape.rank; a++) {
        int i = a - 2;
        double is = dimv(x->shape.d[a], N), os = dimv(y->shape.d[a], N);
        double k = global ? is : i < kt->t.n ? (double)kt->t.v[i] : 1;
        double s = global ? 1 : i < st->t.n ? (double)st->t.v[i] : 1;
        double p = global ? 0 : i < pt->t.n ? (double)pt->t.v[i] : 0;
        double taps = 0, cov = 0, most = 0;
        for (double o = 0; o < os; o++) {
            double lo = o * s - p, hi = fmin(lo + k, is + p);
            double t = fmax(0, fmin(hi, is) - fmax(lo, 0));
            taps += t;
        }
        for (double e = 0; e < is; e++) { /* outputs o with o*s - p <= e < o*s - p + k */
            double first = ceil(fmax(0, e + p - k + 1) / s),
                   last = fmin(floor((e + p) / s), os - 1);
            cov += fmax(0, last - first + 1);
            most = fmax(most, last - first + 1);
        }
        d->win *= os > 0 ? taps / os : 0;
        d->wmax *= k;
        d->cover *= is > 0 ? cov / is : 0;
        d->cmax *= most;
    }
    d->mode = node_enum(n, POOL_POOL_TYPE);
}

/* ampc_k_bcast_reduce's 512-wide chunk sums over full's rows (its last
 * axis) when the reduced side is 1 along that axis */
static double chunk_sums(const Shape *full, bool chunked, int64_t N)
{
    if (!chunked || full->rank == 0)
        return 0;
    double row = dimv(full->d[full->rank - 1], N), all = prod(full, 0, full->rank, N);
    return row > 0 ? all / row * ceil(row / 512) : 0;
}

/* a broadcast side's size along the last axis is 1 (or it has no axes) */
static bool one_along_last(const Shape *s, int64_t N)
{
    return s->rank == 0 || dimv(s->d[s->rank - 1], N) == 1;
}

/* the reduction reduces x's last axis (REDUCE_AXIS empty: all axes) */
static bool reduces_last(const Node *n, const Node *x)
{
    const AttrVal *ax = node_tuple(n, REDUCE_AXIS);
    for (int i = 0; i < ax->t.n; i++)
        if (ax->t.v[i] == x->shape.rank - 1 || ax->t.v[i] == -1)
            return true;
    return ax->t.n == 0;
}

/* the sizes the family's rows read (kernels.def), from the node and its
 * inputs as codegen/emit_c.c prints them */
static void call_dims(const Gc *c, const Node *n, const ProgCall *call, GkDims *d)
{
    int64_t N = c->N;
    memset(d, 0, sizeof *d);
    d->n = numel(n, N);
    d->dtype = n->dtype;
    dtype_dims(n->dtype, &d->s, &d->h);
    d->s2 = d->s, d->h2 = d->h;
    d->dx = writes(call, 0);
    d->dgamma = writes(call, 1);
    d->dbeta = writes(call, 2);
    d->skip = c->o->dynamic;
    if (is_family(n, "conv_forward") || is_family(n, "conv_stats_forward") ||
        is_family(n, "conv_backward")) {
        bool fwd = !is_family(n, "conv_backward");
        conv_view(n, in_node(c, n, fwd ? 0 : 1), fwd ? n : in_node(c, n, 0), N, d);
        d->bias = fwd ? n->nin > 2 : writes(call, 2);
    } else if (is_family(n, "fc_forward") || is_family(n, "fc_backward")) {
        const Node *x = in_node(c, n, is_family(n, "fc_forward") ? 0 : 1);
        int r = x->shape.rank;
        bool flat = node_bool(n, FC_FLATTEN);
        d->N = prod(&x->shape, 0, flat ? 1 : r - 1, N);
        d->C = prod(&x->shape, flat ? 1 : r - 1, r, N);
        d->K = (double)node_int(n, FC_NUM_HIDDEN);
        d->bias = is_family(n, "fc_forward") ? n->nin > 2 : writes(call, 2);
    } else if (is_family(n, "bn_forward") || is_family(n, "bn_backward") ||
               is_family(n, "bn_relu_backward") || is_family(n, "bn_add_forward") ||
               is_family(n, "bn_add_relu_backward") || is_family(n, "bn_sums_forward")) {
        bool fwd = is_family(n, "bn_forward") || is_family(n, "bn_add_forward") ||
                   is_family(n, "bn_sums_forward");
        int xi = fwd ? 0 : is_family(n, "bn_backward") ? 1 : 2;
        if (is_family(n, "bn_add_relu_backward")) { /* its value is the shortcut's gradient */
            d->dsc = d->dx;
            d->dx = writes(call, 3);
        }
        const Node *x = in_node(c, n, xi);
        bn_view(n, x, N, d);
        dtype_dims(x->dtype, &d->s, &d->h);
        d->fix = node_bool(n, BN_FIX_GAMMA);
        d->glob = node_bool(n, BN_USE_GLOBAL_STATS);
        d->saves = writes(call, 1);
    } else if (is_family(n, "bn_moving")) {
        const Node *bn = c->g->nodes[in_node(c, n, 0)->in[0]];
        bn_view(bn, c->g->nodes[bn->in[0]], N, d);
    } else if (is_family(n, "pool_forward") || is_family(n, "pool_backward")) {
        bool fwd = is_family(n, "pool_forward");
        const Node *x = in_node(c, n, fwd ? 0 : 1), *y = fwd ? n : in_node(c, n, 0);
        pool_view(n, x, y, N, d);
        d->n = numel(y, N);
        d->m = numel(x, N);
    } else if (is_family(n, "cast")) {
        dtype_dims(in_node(c, n, 0)->dtype, &d->s, &d->h);
        dtype_dims(n->dtype, &d->s2, &d->h2);
    } else if (is_family(n, "softmax_forward") || is_family(n, "softmax_backward")) {
        const Node *x = in_node(c, n, is_family(n, "softmax_forward") ? 0 : 1);
        int64_t axis = node_int(n, SOFTMAX_AXIS);
        if (axis < 0)
            axis += x->shape.rank;
        d->len = prod(&x->shape, (int)axis, (int)axis + 1, N);
        d->c = d->len > 0 ? d->n / d->len : 0;
    } else if (is_family(n, "smo_forward") || is_family(n, "smo_backward")) {
        bool fwd = is_family(n, "smo_forward");
        const Node *x = in_node(c, n, 0);
        d->c = dimv(n->shape.d[0], N);
        d->len = n->shape.rank > 1 ? dimv(n->shape.d[1], N) : 1;
        dtype_dims(fwd ? n->dtype : x->dtype, &d->s, &d->h);   /* y / prob */
        dtype_dims(fwd ? x->dtype : n->dtype, &d->s2, &d->h2); /* x / dx */
        d->mode = fwd ? 0 : node_enum(n, SMO_NORMALIZATION);
    } else if (is_family(n, "reduce_forward")) {
        const Node *x = in_node(c, n, 0);
        d->m = d->n;
        d->n = numel(x, N);
        d->chunks = chunk_sums(&x->shape, reduces_last(n, x), N);
    } else if (is_family(n, "reduce_backward")) {
        d->m = numel(in_node(c, n, 0), N);
    } else if (is_family(n, "bcast_forward")) {
        d->m = numel(in_node(c, n, 0), N);
        d->len = numel(in_node(c, n, 1), N);
    } else if (is_family(n, "bcast_backward")) {
        d->n = numel(in_node(c, n, 0), N);
        d->m = numel(in_node(c, n, 1), N);
        d->len = numel(in_node(c, n, 2), N);
        d->mode = node_enum(n, BCAST_OP);
        d->da = writes(call, 0);
        d->db = writes(call, 1);
        const Shape *full = &in_node(c, n, 0)->shape;
        d->chunks = chunk_sums(full, one_along_last(&in_node(c, n, 1)->shape, N), N);
        d->chunks2 = chunk_sums(full, one_along_last(&in_node(c, n, 2)->shape, N), N);
    } else if (is_family(n, "concat")) {
        d->m = n->nin;
    } else if (is_family(n, "lrelu_forward") || is_family(n, "lrelu_backward")) {
        const Node *x = in_node(c, n, is_family(n, "lrelu_forward") ? 0 : 1);
        d->mode = node_enum(n, LRELU_TYPE);
        d->c = x->shape.rank >= 2 ? dimv(x->shape.d[1], N) : 1;
        d->outer = d->c > 0 ? d->n / d->c : 0;
        d->inner = 1;
    } else if (is_family(n, "act_forward") || is_family(n, "act_backward")) {
        d->mode = node_enum(n, ACT_TYPE);
    } else if (is_family(n, "unary_backward_op")) {
        d->mode = node_enum(n, BWD_UNARY_OP); /* AMPC_UNARY_<NAME> */
    } else if (is_family(n, "relu_backward")) {
        d->mode = ACT_RELU;
    } else if (is_family(n, "dropout_forward") || is_family(n, "dropout_backward")) {
        const Node *f = is_family(n, "dropout_forward") ? n : in_node(c, n, 1);
        d->prob = node_float(f, DROPOUT_P);
    }
}

/* The runtime functions a call's emitted C makes (codegen/emit_c.c): a
 * dense backward its data gradient when its value is read and its weight
 * gradient when it writes one; BatchNorm's forward on the batch's or the
 * moving statistics; every other family its row's function. */
static int call_entries(const Node *n, const ProgCall *call, GkEntry *e)
{
    if (is_family(n, "conv_backward") || is_family(n, "fc_backward")) {
        int k = 0;
        if (writes(call, 0))
            e[k++] = GE_DATA;
        if (writes(call, 1))
            e[k++] = GE_WEIGHT;
        return k;
    }
    if (is_family(n, "bn_forward") || is_family(n, "bn_add_forward") ||
        is_family(n, "bn_sums_forward")) {
        e[0] = node_bool(n, BN_USE_GLOBAL_STATS) ? GE_INFER : GE_TRAIN;
        return 1;
    }
    e[0] = GE_MAIN;
    return 1;
}

/* the family a runtime function's time goes to (the report's and
 * --calibrate's grouping; pricing never reads it) */
static GcFamily family_of(const Node *n, GkEntry e)
{
    const char *f = kfamily[n->op] ? kfamily[n->op] : "";
    if (strcmp(f, "conv_forward") == 0 || strcmp(f, "conv_stats_forward") == 0)
        return GF_CONV_FWD;
    if (strcmp(f, "conv_backward") == 0)
        return e == GE_DATA ? GF_CONV_DGRAD : GF_CONV_WGRAD;
    if (strcmp(f, "bn_forward") == 0 || strcmp(f, "bn_add_forward") == 0 ||
        strcmp(f, "bn_sums_forward") == 0)
        return GF_BN_FWD;
    if (strcmp(f, "bn_backward") == 0 || strcmp(f, "bn_relu_backward") == 0 ||
        strcmp(f, "bn_add_relu_backward") == 0)
        return GF_BN_BWD;
    if (strcmp(f, "pool_forward") == 0 || strcmp(f, "pool_backward") == 0)
        return GF_POOL;
    if (strncmp(f, "smo_", 4) == 0)
        return GF_LOSS;
    static const char *const copies[] = {"copy", "concat", "slice", "cast", "layout"};
    for (size_t i = 0; i < sizeof copies / sizeof copies[0]; i++)
        if (strcmp(f, copies[i]) == 0)
            return GF_COPY;
    static const char *const other[] = {"fc_forward",      "fc_backward",      "bn_moving",
                                        "softmax_forward", "softmax_backward", "reduce_forward",
                                        "reduce_backward"};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        if (strcmp(f, other[i]) == 0)
            return GF_OTHER;
    return GF_ELEMWISE;
}

/* ---- pricing one launch ------------------------------------------------------------ */

typedef struct {
    GcRange t;
    GcBound bound; /* at the slow end */
    int launches;  /* device kernels at the fast end */
} Priced;

static double tensor_tflops(const KvMachine *m, int dtype)
{
    return dtype == DT_F16    ? m->tc_f16_tflops
           : dtype == DT_BF16 ? m->tc_bf16_tflops
                              : m->fp32_tflops;
}

/* a custom kernel at end e: the longest of its bytes at the bandwidth its
 * accesses reach, its FLOPs at their rates, and its busiest thread's chain of
 * dependent loads and operations, each over the share of the GPU its blocks
 * fill; plus the launch */
static double custom_time(const KvMachine *m, const GkLaunch *l, int e, GcBound *bound)
{
    double count = l->count > 0 ? l->count : 1;
    double blocks = fmax(l->blocks / count, 1), block = fmax(l->block, 1);
    double threads = blocks * block, sms = m->sm_count;
    double share = fmin(blocks, sms) / sms; /* the SMs it occupies */
    double waves = fmax(1, ceil(threads / (sms * m->threads_per_sm)));
    /* DRAM serves each distinct byte once (the caches keep what the launch
     * reads again), except where every access takes its own sector */
    double bytes = (l->access == GK_STRIDED || l->ru <= 0 ? l->rd : l->ru) + l->wr;
    GcKey bwk = l->access == GK_VEC16     ? K_BW_VEC
                : l->access == GK_STRIDED ? K_BW_STRIDED
                                          : K_BW_SCALAR;
    double t_mem = bytes / (m->device_mem_GBps * 1e9 * kv(bwk, e) * share);
    const double *f = l->flops;
    double f32 = f[GK_F32_ADD] + f[GK_F32_MUL] + f[GK_F32_CMP] + f[GK_CVT] * kv(K_CVT_SLOTS, e) +
                 (f[GK_F32_DIV] + f[GK_F32_SQRT] + f[GK_F32_FUNC]) * kv(K_SFU_SLOTS, e);
    double f64 = f[GK_F64_ADD] + f[GK_F64_MUL] + f[GK_F64_CMP] +
                 (f[GK_F64_DIV] + f[GK_F64_SQRT] + f[GK_F64_FUNC]) * kv(K_SFU_SLOTS, e);
    /* an fp32 or fp64 operation takes one FMA slot: half the FLOP rate */
    double t_comp = (f32 / (m->fp32_tflops * 0.5e12) + f64 / (m->fp64_tflops * 0.5e12)) / share;
    double ops = 0;
    for (int k = 0; k < GK_TENSOR; k++)
        ops += f[k];
    /* L2 policy: no reuse credited to bandwidth; a thread's dependent loads
     * take L2's latency when the launch's bytes fit in L2, else DRAM's */
    double lat = (bytes / count <= m->l2_MB * 1e6 ? m->l2_latency_ns : m->dram_latency_ns) * 1e-9 *
                 kv(K_LATENCY, e);
    double chain = ops / count / threads * kv(K_DEP_CYCLES, e) / (m->sm_clock_GHz * 1e9);
    double t_serial = waves * (l->serial / fmax(l->inflight, 1) * lat + chain);
    double launch = m->launch_us * 1e-6 * kv(K_LAUNCH, e);
    double t = fmax(t_mem, fmax(t_comp, t_serial));
    *bound = t == t_mem            ? GB_MEMORY
             : t == t_comp         ? GB_COMPUTE
             : threads < sms * 128 ? GB_SERIAL
                                   : GB_LATENCY; /* under 4 warps an SM: serial */
    if (launch > t)
        *bound = GB_LAUNCH;
    return count * (t + launch);
}

static GcRange eff_of(const GkLaunch *l)
{
    int fc = l->taps <= 1 ? 0 : l->taps <= 9 ? 1 : 2;
    int cc = l->chan <= 8 ? 0 : l->chan < 64 ? 1 : l->chan < 256 ? 2 : 3;
    GcRange r = conv_eff[fc][cc];
    GcKey pass = l->kind == GK_CUDNN_DGRAD   ? K_DGRAD
                 : l->kind == GK_CUDNN_WGRAD ? K_WGRAD
                                             : K_COUNT;
    for (int e = 0; e < 2; e++) {
        double *x = e ? &r.slow : &r.fast;
        if (pass != K_COUNT)
            *x *= kv(pass, e);
        if (l->stride > 1)
            *x *= kv(K_STRIDED_CONV, e);
    }
    return r;
}

/* The share of the SMs the last wave of output tiles leaves busy: a
 * forward or data gradient tiles its output; a filter gradient also splits
 * its reduction (at most GC_SPLIT_K ways) when its tiles are few. */
static double wave_share(const KvMachine *m, const GkLaunch *l)
{
    double tiles = ceil(l->gm / GC_TILE) * ceil(l->gn / GC_TILE);
    if (l->kind == GK_CUDNN_WGRAD)
        tiles *= fmax(1, fmin(GC_SPLIT_K, floor(m->sm_count / fmax(tiles, 1))));
    tiles = fmax(tiles, 1);
    return tiles / (ceil(tiles / m->sm_count) * m->sm_count);
}

/* a library call at end e: max(FLOPs / (peak x eff x wave), bytes / (bw x eff)) + launches */
static double library_time(const KvMachine *m, const GkLaunch *l, int dtype, int e, GcBound *bound)
{
    GcRange eff;
    if (l->kind == GK_GEMM)
        eff = fmin(l->gm, fmin(l->gn, l->gk)) >= 1024
                  ? (GcRange){kv(K_GEMM_LARGE, 0), kv(K_GEMM_LARGE, 1)}
                  : (GcRange){kv(K_GEMM_SMALL, 0), kv(K_GEMM_SMALL, 1)};
    else
        eff = eff_of(l);
    double t_comp = l->flops[GK_TENSOR] /
                    (tensor_tflops(m, dtype) * 1e12 * (e ? eff.slow : eff.fast) * wave_share(m, l));
    double t_mem = (l->rd + l->wr) / (m->device_mem_GBps * 1e9 * kv(K_BW_LIB, e));
    double kernels = l->kind == GK_GEMM ? 1 : kv(K_LIB_KERNELS, e);
    double launch = kernels * m->launch_us * 1e-6 * kv(K_LAUNCH, e);
    double t = fmax(t_comp, t_mem);
    *bound = launch > t ? GB_LAUNCH : t == t_comp ? GB_COMPUTE : GB_MEMORY;
    return t + launch;
}

static double copy_time(const KvMachine *m, const GkLaunch *l, int e)
{
    return l->rd / (m->pcie_GBps * 1e9 * kv(K_PCIE, e)) + m->pcie_latency_us * 1e-6;
}

static Priced price(const KvMachine *m, const GkLaunch *l, int dtype)
{
    Priced p = {{0, 0}, GB_MEMORY, 0};
    for (int e = 0; e < 2; e++) {
        GcBound b = GB_MEMORY;
        double t;
        if (l->kind == GK_CUSTOM)
            t = custom_time(m, l, e, &b);
        else if (l->kind == GK_COPY_H2D || l->kind == GK_COPY_D2H)
            t = copy_time(m, l, e);
        else
            t = library_time(m, l, dtype, e, &b);
        *(e ? &p.t.slow : &p.t.fast) = t;
        if (e)
            p.bound = b;
    }
    p.launches = (int)(l->count > 0 ? l->count : 1);
    return p;
}

void gpucost_price_launch(const KvMachine *m, const GkLaunch *l, int dtype, GcRange *t,
                          GcBound *bound)
{
    Priced p = price(m, l, dtype);
    *t = p.t;
    *bound = p.bound;
}

/* ---- a call -------------------------------------------------------------------------- */

static void add_launch(GcCall *c, const GkLaunch *l, const Priced *p, double *worst)
{
    c->rd += l->rd;
    c->wr += l->wr;
    for (int k = 0; k < GK_NFLOP; k++)
        c->flops[k] += l->flops[k];
    c->threads = fmax(c->threads, l->blocks * l->block / fmax(l->count, 1));
    c->serial = fmax(c->serial, l->serial);
    c->t.fast += p->t.fast;
    c->t.slow += p->t.slow;
    if (l->kind != GK_COPY_H2D && l->kind != GK_COPY_D2H)
        c->launches += p->launches;
    c->libcalls += l->kind != GK_CUSTOM && l->kind != GK_COPY_H2D && l->kind != GK_COPY_D2H;
    if (p->t.slow > *worst)
        *worst = p->t.slow, c->bound = p->bound;
    size_t used = strlen(c->kernels);
    snprintf(c->kernels + used, sizeof c->kernels - used, "%s%s", used ? "+" : "", l->kernel);
}

static GcCall *push_call(GcResult *r, int *cap)
{
    if (r->ncalls == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        r->calls = realloc(r->calls, sizeof *r->calls * (size_t)*cap);
        if (!r->calls)
            DIE("out of memory");
    }
    GcCall *c = &r->calls[r->ncalls++];
    memset(c, 0, sizeof *c);
    return c;
}

static void add_range(GcRange *a, GcRange b)
{
    a->fast += b.fast;
    a->slow += b.slow;
}

/* The conv_bn_stats fusion's BatchNorm (off unless --fuse=conv_bn_stats:
 * docs/backend-cuda.md): a training forward whose x a convolution writes
 * takes its statistics from the convolution's GEN_STATS, so its launches
 * lose the tiles' sums and their final step (ampc_k_bn_tiles, ampc_k_bn_final)
 * and gain ampc_k_bn_final_sums.  The convolution is priced as before: the
 * statistics come from its epilogue, 8 bytes a channel a block, which the
 * model does not price (an assumption until a GPU measures it).  c: the
 * call as priced; into r's stats_bn_fwd. */
static void stats_fusion(const Gc *gc, GcResult *r, const Node *n, const GkDims *d,
                         const GkLaunch *l, int nl, const GcCall *c)
{
    if (c->step != STEP_TRAIN || c->family != GF_BN_FWD)
        return;
    r->bns++;
    if (is_family(n, "bn_sums_forward")) { /* built with --fuse=conv_bn_stats: priced as it is */
        r->stats_bns++;
        add_range(&r->stats_bn_fwd, c->t);
        return;
    }
    if (in_node(gc, n, 0)->op != OP_Convolution) {
        add_range(&r->stats_bn_fwd, c->t);
        return;
    }
    r->stats_bns++;
    GkDims f;
    memset(&f, 0, sizeof f);
    f.n = d->c, f.s = 4, f.da = !d->fix;
    GkLaunch fs;
    if (gk_describe_aux("ampc_k_bn_final_sums", &f, &fs) != 1)
        DIE("kernels.def has no row for ampc_k_bn_final_sums");
    add_range(&r->stats_bn_fwd, price(gc->m, &fs, DT_F32).t);
    for (int q = 0; q < nl; q++)
        if (strcmp(l[q].kernel, "ampc_k_bn_tiles") && strcmp(l[q].kernel, "ampc_k_bn_final"))
            add_range(&r->stats_bn_fwd, price(gc->m, &l[q], d->dtype).t);
}

/* n's launches (kernels.def's GPUK rows).  conv_bn_stats' ops have none:
 * the convolution is priced as alone (its statistics come from cuDNN's
 * epilogue, unpriced, as in stats_fusion), the BatchNorm from the sums as
 * its op's training forward without the tiles' sums and their final step,
 * with ampc_k_bn_final_sums. */
static int describe(const Node *n, GkEntry e, const GkDims *d, GkLaunch *l)
{
    OpKind op = n->op;
    bool sums = is_family(n, "bn_sums_forward");
    if (op == OP__fused_Convolution_stats)
        op = OP_Convolution;
    else if (sums)
        op = op == OP__fused_BatchNorm_stats        ? OP_BatchNorm
             : op == OP__fused_BatchNorm_relu_stats ? OP__fused_BatchNorm_relu
                                                    : OP__fused_BatchNorm_add_relu;
    if (!sums)
        return gk_describe(op, e, d, l);
    GkLaunch all[GK_MAX_LAUNCHES];
    int nl = gk_describe(op, e, d, all), k = 0;
    GkDims f;
    memset(&f, 0, sizeof f);
    f.n = d->c, f.s = 4, f.da = !d->fix;
    if (gk_describe_aux("ampc_k_bn_final_sums", &f, &l[k++]) != 1)
        DIE("kernels.def has no row for ampc_k_bn_final_sums");
    for (int q = 0; q < nl; q++)
        if (strcmp(all[q].kernel, "ampc_k_bn_tiles") && strcmp(all[q].kernel, "ampc_k_bn_final"))
            l[k++] = all[q];
    return k;
}

static void price_step(Gc *gc, GcResult *r, StepKind k, int *cap)
{
    const ProgStep *st = &gc->p->step[k];
    for (int i = 0; i < st->ncalls; i++) {
        const ProgCall *call = &st->calls[i];
        const Node *n = gc->g->nodes[call->node];
        const KernelRow *row = kernel_row(n->op);
        GkDims d;
        call_dims(gc, n, call, &d);
        GkEntry entries[2];
        int ne = call_entries(n, call, entries);
        double mid = 0;
        for (int j = 0; j < ne; j++) {
            GcCall *c = push_call(r, cap);
            c->step = k, c->call = i, c->node = n->name;
            c->family = family_of(n, entries[j]);
            snprintf(c->entry, sizeof c->entry, "%s%s", row->cuda ? row->cuda : "?",
                     gk_entry_suffix[entries[j]]);
            GkLaunch l[GK_MAX_LAUNCHES];
            int nl = describe(n, entries[j], &d, l);
            double worst = -1;
            for (int q = 0; q < nl; q++) {
                Priced p = price(gc->m, &l[q], d.dtype);
                add_launch(c, &l[q], &p, &worst);
            }
            stats_fusion(gc, r, n, &d, l, nl, c);
            mid += 0.5 * (c->t.fast + c->t.slow);
        }
        if (k == STEP_TRAIN)
            r->train_sec[i] = mid;
    }
}

/* ---- the runtime's per-step work -------------------------------------------------------- */

static void step_dims(const Gc *gc, GkStepDims *s)
{
    const Program *p = gc->p;
    memset(s, 0, sizeof *s);
    for (int b = 0; b < p->nbuf; b++) {
        const ProgBuffer *pb = &p->buf[b];
        double bytes = ((double)pb->elems.fixed + (double)pb->elems.per_sample * (double)gc->N) *
                       dtype_size(pb->dtype);
        if (pb->kind == PB_INPUT)
            *(s->xb == 0 ? &s->xb : &s->yb) += bytes;
    }
    for (int q = 0; q < p->nparams; q++) {
        int gb = p->param_grad[q];
        if (gb < 0)
            continue;
        double e = (double)p->buf[gb].elems.fixed;
        DType wt = p->buf[p->param_buf[q]].dtype;
        *(dtype_size(wt) < 4 ? &s->e16 : &s->e32) += e;
        s->h16 = s->h16 || wt == DT_F16;
        s->nblk += ceil(e / GK_MT_CHUNK);
        s->chunk0 = fmax(s->chunk0, fmin(e, GK_MT_CHUNK));
    }
    /* the loss head's rows: the train step's first result */
    const ProgStep *t = &p->step[STEP_TRAIN];
    if (t->nresults > 0 && t->results[0] >= 0) {
        const ProgBuffer *pb = &p->buf[t->results[0]];
        s->rb = ((double)pb->elems.fixed + (double)pb->elems.per_sample * (double)gc->N) *
                dtype_size(pb->dtype);
    }
    s->dyn = gc->o->dynamic;
    s->nstate = gc->o->nstate;
    s->adam = gc->o->optimizer == 2;
    s->nag = gc->o->optimizer == 1;
}

static void price_runtime(Gc *gc, GcResult *r, int *cap)
{
    GkStepDims sd;
    step_dims(gc, &sd);
    GkLaunch l[GK_MAX_STEP];
    const char *names[GK_MAX_STEP];
    int nl = gk_describe_step(&sd, l, names);
    for (int q = 0; q < nl; q++) {
        GcCall *c = push_call(r, cap);
        c->step = -1, c->call = -1, c->node = names[q];
        c->family = l[q].kind == GK_COPY_H2D || l[q].kind == GK_COPY_D2H ? GF_COPY : GF_OPTIM;
        snprintf(c->entry, sizeof c->entry, "%s", l[q].kernel);
        Priced p = price(gc->m, &l[q], DT_F32);
        double worst = -1;
        add_launch(c, &l[q], &p, &worst);
        r->copies += l[q].kind == GK_COPY_H2D || l[q].kind == GK_COPY_D2H;
    }
}

/* ---- the step: host, waits, memory, start-up --------------------------------------------- */

/* The host's side of a step: the batch filled (the synthetic source's rate
 * measured on this project's machine), every launch's API call, each cuDNN
 * execution's variant pack. */
static void host_path(const Gc *gc, GcResult *r, double batch_elems)
{
    int custom = r->launches - r->libcalls;
    for (int e = 0; e < 2; e++) {
        double fill = batch_elems * kv(K_FILL_NS, e) * 1e-9;
        double t = fill + (custom + r->copies + 2) * gc->m->api_us * 1e-6 +
                   r->libcalls * kv(K_CUDNN_HOST, e) * 1e-6;
        *(e ? &r->fill.slow : &r->fill.fast) = fill;
        *(e ? &r->host.slow : &r->host.fast) = t;
    }
}

/* The waits: the batch's staging has two pinned slots used in turn
 * (runtime/trainer.c, issue 26), so a steady step does not wait for its
 * copy; once per log interval the metrics' read-back waits for the device
 * to drain, which then idles while the host fills the next batch (the
 * shorter of the two sides). */
static void step_of(const Gc *gc, GcRange host, GcRange dev, double nwaits, GcRange *waits_cost,
                    GcRange *step, GcRange *images_s)
{
    int interval = gc->o->log_interval > 0 ? gc->o->log_interval : 50;
    double per = 1.0 / (interval + 1);
    for (int e = 0; e < 2; e++) {
        double h = e ? host.slow : host.fast, d = e ? dev.slow : dev.fast;
        double w = nwaits * kv(K_WAIT_US, e) * 1e-6 + per * fmin(h, d);
        *(e ? &waits_cost->slow : &waits_cost->fast) = w;
        *(e ? &step->slow : &step->fast) = fmax(h, d) + w;
        *(e ? &images_s->slow : &images_s->fast) = (double)gc->N / (fmax(h, d) + w);
    }
}

static void waits(const Gc *gc, GcResult *r)
{
    int interval = gc->o->log_interval > 0 ? gc->o->log_interval : 50;
    r->waits = 1.0 / (interval + 1);
    step_of(gc, r->host, r->device, r->waits, &r->waits_cost, &r->step, &r->images_s);
}

/* The data input's chain of the train step (ir/program.c's
 * program_input_chain): its calls, which a batch the device writes in the
 * first layer's form skips (runtime/trainer.c), and that form's bytes per
 * element (4, fp32, without one). */
static int input_chain(const Gc *gc, double *elem_bytes)
{
    const Program *p = gc->p;
    int data = -1, form;
    for (int b = 0; b < p->nbuf && data < 0; b++)
        if (p->buf[b].kind == PB_INPUT)
            data = b; /* the first input is the data (step_dims' xb) */
    int calls = program_input_chain(p, STEP_TRAIN, data, &form);
    *elem_bytes = calls ? (double)dtype_size(p->buf[form].dtype) : 4;
    return calls;
}

/* The device's step without the batch's copies to the device and the
 * data input's first `chain` calls, plus `instead`. */
static GcRange device_with(const GcResult *r, int chain, GcRange instead)
{
    GcRange dev = r->device;
    for (int i = 0; i < r->ncalls; i++) {
        const GcCall *c = &r->calls[i];
        if ((c->step == -1 && strcmp(c->entry, "copy_h2d") == 0) ||
            (c->step == STEP_TRAIN && c->call >= 0 && c->call < chain))
            dev.fast -= c->t.fast, dev.slow -= c->t.slow;
    }
    add_range(&dev, instead);
    return dev;
}

/* What the synthetic batch made on the device (cuda/synthetic.cuh, issue
 * 26; the trainer calls it on --data synthetic without --augment) gives: its
 * kernel (GPU_AUX's row, writing the first layer's form, with the labels) on
 * the device in place of the batch's copies and the data input's cast and
 * layout calls, and the host's fill gone. */
static void synthetic_on_device(const Gc *gc, GcResult *r, const GkStepDims *sd)
{
    GkDims d;
    memset(&d, 0, sizeof d);
    r->chain = input_chain(gc, &d.s);
    d.n = d.m = sd->xb / 4, d.N = (double)gc->N, d.da = 1;
    GkLaunch l;
    if (gk_describe_aux("ampc_k_synthetic_batch", &d, &l) != 1)
        DIE("kernels.def has no row for ampc_k_synthetic_batch");
    r->synth = price(gc->m, &l, DT_F32).t;
    GcRange host = r->host;
    host.fast -= r->fill.fast, host.slow -= r->fill.slow;
    GcRange w;
    GcRange dev = device_with(r, r->chain, r->synth);
    step_of(gc, host, dev, r->waits, &w, &r->synth_step, &r->synth_images_s);
    /* --cuda-graph 1 as well (issue 26): the host's API calls per step are the
     * synthetic kernel's launch, the graph's and the rows' copy; the device
     * keeps every kernel's launch_us (a graph's kernel nodes start sooner:
     * not counted) */
    double graph = 3 * gc->m->api_us * 1e-6;
    r->graph_host = (GcRange){graph, graph};
    step_of(gc, r->graph_host, dev, r->waits, &w, &r->graph_step, &r->graph_images_s);
}

/* the step with the conv_bn_stats fusion: BatchNorm's forward as
 * stats_fusion priced it in place of its family's time, with the synthetic
 * batch made on the device (synthetic_on_device's step, which the program
 * takes on --data synthetic): with the host's fill the step is the host's
 * and would show no change */
static void stats_step(const Gc *gc, GcResult *r)
{
    GcRange dev = r->device;
    dev.fast += r->stats_bn_fwd.fast - r->family[GF_BN_FWD].fast;
    dev.slow += r->stats_bn_fwd.slow - r->family[GF_BN_FWD].slow;
    r->stats_device = dev;
    GcRange host = r->host, w;
    host.fast -= r->fill.fast, host.slow -= r->fill.slow;
    GcRange on_dev = device_with(r, r->chain, r->synth);
    on_dev.fast += r->stats_bn_fwd.fast - r->family[GF_BN_FWD].fast;
    on_dev.slow += r->stats_bn_fwd.slow - r->family[GF_BN_FWD].slow;
    step_of(gc, host, on_dev, r->waits, &w, &r->stats_step, &r->stats_images_s);
}

/* A source's raw bytes (device.h's ingest, issue 26; the trainer uploads
 * them for idx, fashion_mnist, cifar10 and digits without --augment): the
 * batch's bytes and labels, a quarter of the fp32 data's bytes, copied on a
 * copy stream that overlaps the step before, and the ingest kernel
 * (GPU_AUX's row, writing the first layer's form) in place of the fp32
 * copies and the data input's cast and layout calls.  The host's side is
 * the launches alone: the source's own fill (a copy of its bytes) is not
 * priced. */
static void ingest_on_device(const Gc *gc, GcResult *r, const GkStepDims *sd)
{
    GkDims d;
    memset(&d, 0, sizeof d);
    input_chain(gc, &d.s);
    d.n = d.m = sd->xb / 4, d.N = (double)gc->N, d.da = 1;
    GkLaunch l;
    if (gk_describe_aux("ampc_k_ingest", &d, &l) != 1)
        DIE("kernels.def has no row for ampc_k_ingest");
    r->ingest = price(gc->m, &l, DT_F32).t;
    r->upload_f32 = sd->xb + sd->yb;
    r->upload_raw = sd->xb / 4 + sd->yb;
    GkLaunch bytes = {
        .kernel = "copy_h2d", .kind = GK_COPY_H2D, .rd = sd->xb / 4, .wr = sd->xb / 4};
    GkLaunch labels = {.kernel = "copy_h2d", .kind = GK_COPY_H2D, .rd = sd->yb, .wr = sd->yb};
    r->ingest_copy = price(gc->m, &bytes, DT_F32).t;
    if (sd->yb > 0)
        add_range(&r->ingest_copy, price(gc->m, &labels, DT_F32).t);
    GcRange dev = device_with(r, r->chain, r->ingest), host = r->host, w;
    dev.fast = fmax(dev.fast, r->ingest_copy.fast); /* the copy stream's, beside it */
    dev.slow = fmax(dev.slow, r->ingest_copy.slow);
    host.fast -= r->fill.fast, host.slow -= r->fill.slow;
    step_of(gc, host, dev, r->waits, &w, &r->ingest_step, &r->ingest_images_s);
}

static double lin_bytes(LinExpr e, int64_t N)
{
    return (double)e.fixed + (double)e.per_sample * (double)N;
}

/* Peak device memory: the arena (the larger step's plan), the workspace
 * (the channel pads and max pooling's argmax exactly; cuDNN's own between
 * nothing and its limit), the parameters, fp32 masters and optimizer state,
 * the inputs, BatchNorm's scratch (5 floats a channel and the tiles' partials:
 * batchnorm_reduce.cuh's ampc_batchnorm_ws_max) and the context. */
static void memory(const Gc *gc, GcResult *r, double pad_max, double max_c)
{
    const Program *p = gc->p;
    r->arena = lin_bytes(p->arena, gc->N);
    for (int b = 0; b < p->nbuf; b++) {
        const ProgBuffer *pb = &p->buf[b];
        double bytes = lin_bytes(pb->elems, gc->N) * dtype_size(pb->dtype);
        if (pb->kind == PB_PARAM)
            r->params += bytes;
        else if (pb->kind == PB_INPUT)
            r->inputs += bytes;
    }
    for (int q = 0; q < p->nparams; q++) {
        int gb = p->param_grad[q];
        if (gb < 0)
            continue;
        double e = (double)p->buf[gb].elems.fixed;
        if (dtype_size(p->buf[p->param_buf[q]].dtype) < 4)
            r->masters += 4 * e;
        r->state += 4.0 * gc->o->nstate * e;
    }
    r->scratch = max_c > 0 ? ceil(20 * max_c / 256) * 256 +
                                 16 * fmax((double)AMPC_BN_BLOCKS * AMPC_BN_GROUP, max_c)
                           : 0;
    double limit = (gc->o->workspace_mb > 0 ? gc->o->workspace_mb : 1024) * 1048576.0;
    r->workspace = (GcRange){pad_max, pad_max + limit};
    r->context = (GcRange){kv(K_CONTEXT_MB, 0) * 1048576.0, kv(K_CONTEXT_MB, 1) * 1048576.0};
    double fixed = r->arena + r->params + r->masters + r->state + r->inputs + r->scratch;
    r->memory = (GcRange){fixed + r->workspace.fast + r->context.fast,
                          fixed + r->workspace.slow + r->context.slow};
}

/* Start-up: every distinct cuDNN plan chosen once (conv.c's cache; the
 * workspace sizer plans the accumulating variant of an unpadded backward
 * too).  With autotune (tune.h) each plan times at most `candidates`, each
 * finalized and run twice (a warm-up, one timed), on one shared scratch
 * grown `scratch_grows` times in all; with the plan cache file the next
 * start finalizes each plan's cached candidate, untimed (plan_ms). */
static void startup(const Gc *gc, GcResult *r)
{
    r->plans = 0;
    double run[2] = {0, 0};
    for (int i = 0; i < r->ncalls; i++) {
        const GcCall *c = &r->calls[i];
        if (c->step != STEP_TRAIN ||
            (c->family != GF_CONV_FWD && c->family != GF_CONV_DGRAD && c->family != GF_CONV_WGRAD))
            continue;
        /* one plan per call site stands for its shape (a repeated shape is
         * cached: counted once below by its key) */
        bool seen = false;
        for (int j = 0; j < i && !seen; j++) {
            const GcCall *o = &r->calls[j];
            seen = o->step == STEP_TRAIN && o->family == c->family && o->rd == c->rd &&
                   o->wr == c->wr && o->flops[GK_TENSOR] == c->flops[GK_TENSOR];
        }
        if (seen)
            continue;
        int variants = c->family == GF_CONV_FWD || strstr(c->kernels, "pad_channels") ? 1 : 2;
        r->plans += variants;
        run[0] += variants * c->t.fast;
        run[1] += variants * c->t.slow;
    }
    for (int e = 0; e < 2; e++) {
        double untimed = r->plans * kv(K_PLAN_MS, e) * 1e-3;
        double t = gc->o->autotune
                       ? kv(K_SCRATCH_N, e) * kv(K_SCRATCH_MS, e) * 1e-3 +
                             r->plans * kv(K_CANDIDATES, e) * kv(K_CAND_MS, e) * 1e-3 +
                             kv(K_CANDIDATES, e) * 2 * run[e]
                       : untimed;
        *(e ? &r->autotune.slow : &r->autotune.fast) = t;
        *(e ? &r->autotune_cached.slow : &r->autotune_cached.fast) = untimed;
    }
}

/* the workspace's exact part (the largest channel pads of a convolution, or
 * max pooling's argmax, 4 bytes an output) and the most BatchNorm channels
 * (its scratch) */
static void pads_and_channels(const Gc *gc, double *pad_max, double *max_c)
{
    *pad_max = *max_c = 0;
    const ProgStep *st = &gc->p->step[STEP_TRAIN];
    for (int i = 0; i < st->ncalls; i++) {
        const Node *n = gc->g->nodes[st->calls[i].node];
        GkDims d;
        call_dims(gc, n, &st->calls[i], &d);
        if (d.pad) /* x and w padded to cp channels, each rounded to 256 bytes */
            *pad_max = fmax(
                *pad_max,
                (ceil(d.N * d.HW * d.cp * d.s / 256) + ceil(d.K * d.RS * d.cp * d.s / 256)) * 256);
        if (is_family(n, "pool_backward") && d.mode == POOL_MAX)
            *pad_max = fmax(*pad_max, 4 * d.n);
        if (kfamily[n->op] && strncmp(kfamily[n->op], "bn_", 3) == 0)
            *max_c = fmax(*max_c, d.c);
    }
}

bool gpucost_predict(const Graph *train, const Program *p, const KvMachine *m, const GcOptions *o,
                     Diag *d, GcResult *r)
{
    memset(r, 0, sizeof *r);
    if (m->devices < 1) {
        diag_plain_error(d,
                         "the GPU cost model needs a machine with devices; '%s' has none "
                         "(--machine=h100, h200, a100 or a file: docs/kvstore.md)",
                         m->name);
        return false;
    }
    r->m = m;
    r->o = *o;
    Gc gc = {.g = train, .p = p, .m = m, .o = &r->o, .N = o->batch > 0 ? o->batch : 1};
    r->o.batch = gc.N;
    r->ntrain = p->step[STEP_TRAIN].ncalls;
    r->train_sec = calloc((size_t)r->ntrain + 1, sizeof *r->train_sec);
    if (!r->train_sec)
        DIE("out of memory");
    int cap = 0;
    price_step(&gc, r, STEP_TRAIN, &cap);
    price_step(&gc, r, STEP_MOVING, &cap);
    price_runtime(&gc, r, &cap);
    for (int i = 0; i < r->ncalls; i++) {
        const GcCall *c = &r->calls[i];
        add_range(&r->device, c->t);
        add_range(&r->family[c->family], c->t);
        r->launches += c->launches;
        r->libcalls += c->libcalls;
    }
    GkStepDims sd;
    step_dims(&gc, &sd);
    host_path(&gc, r, sd.xb / 4);
    waits(&gc, r);
    synthetic_on_device(&gc, r, &sd);
    stats_step(&gc, r);
    ingest_on_device(&gc, r, &sd);
    double pad_max, max_c;
    pads_and_channels(&gc, &pad_max, &max_c);
    memory(&gc, r, pad_max, max_c);
    startup(&gc, r);
    return true;
}

void gpucost_free(GcResult *r)
{
    free(r->calls);
    free(r->train_sec);
    memset(r, 0, sizeof *r);
}

/* ---- printing -------------------------------------------------------------------------- */

static double mid(GcRange r) { return 0.5 * (r.fast + r.slow); }

const char *gc_step_name(int step)
{
    return step == STEP_TRAIN ? "train" : step == STEP_MOVING ? "moving" : "step";
}

const int gc_nconst = K_COUNT;
const GcConst *gc_const(int k) { return k >= 0 && k < K_COUNT ? &konst[k] : NULL; }

void gpucost_print_calls(FILE *f, const Graph *train, const GcResult *r, const char *header)
{
    const KvMachine *m = r->m;
    fprintf(f,
            "gpu-cost: model %s on %s (one device), batch %lld; times are [fast, slow] ranges "
            "(docs/gpucost.md)\n",
            train->model, m->name, (long long)r->o.batch);
    if (header)
        fputs(header, f);
    for (int k = 0; k < K_COUNT; k++)
        fprintf(f, "constant %s %g %g # %s\n", konst[k].name, konst[k].fast, konst[k].slow,
                konst[k].source);
    for (int i = 0; i < r->ncalls; i++) {
        const GcCall *c = &r->calls[i];
        if (c->call >= 0)
            fprintf(f, "call %s %d %s ", gc_step_name(c->step), c->call, c->entry);
        else
            fprintf(f, "call %s - %s ", gc_step_name(c->step), c->entry);
        program_put_name(f, c->node);
        fprintf(f, " family=%s rd=%.0f wr=%.0f flops=", gc_family_names[c->family], c->rd, c->wr);
        int any = 0;
        for (int k = 0; k < GK_NFLOP; k++)
            if (c->flops[k] > 0)
                fprintf(f, "%s%s:%.0f", any++ ? "," : "", gk_flop_names[k], c->flops[k]);
        fprintf(f, "%s threads=%.0f serial=%.0f bound=%s ms=%.6g..%.6g kernels=%s\n",
                any ? "" : "-", c->threads, c->serial, gc_bound_names[c->bound], c->t.fast * 1e3,
                c->t.slow * 1e3, c->kernels[0] ? c->kernels : "-");
    }
    fprintf(f,
            "total device %.4g..%.4g ms, host %.4g..%.4g ms, waits %.4g..%.4g ms, step %.4g..%.4g "
            "ms, %.4g..%.4g images/s\n",
            r->device.fast * 1e3, r->device.slow * 1e3, r->host.fast * 1e3, r->host.slow * 1e3,
            r->waits_cost.fast * 1e3, r->waits_cost.slow * 1e3, r->step.fast * 1e3,
            r->step.slow * 1e3, r->images_s.slow, r->images_s.fast);
}

static int by_slow(const void *a, const void *b)
{
    const GcCall *x = *(const GcCall *const *)a, *y = *(const GcCall *const *)b;
    return x->t.slow < y->t.slow ? 1 : x->t.slow > y->t.slow ? -1 : (x < y ? -1 : x > y);
}

static const char *fmt_s(double s, char *buf, size_t cap)
{
    if (s >= 1)
        snprintf(buf, cap, "%.3g s", s);
    else if (s >= 1e-3)
        snprintf(buf, cap, "%.3g ms", s * 1e3);
    else
        snprintf(buf, cap, "%.3g us", s * 1e6);
    return buf;
}

static void print_range(FILE *f, GcRange r)
{
    char a[32], b[32];
    fprintf(f, "%s-%s", fmt_s(r.fast, a, sizeof a), fmt_s(r.slow, b, sizeof b));
}

/* the end of a batch-on-the-device line: what it replaces, the step, its rate */
static void print_instead(FILE *f, int chain, const char *host, GcRange step, GcRange images_s)
{
    fprintf(f, " in place of the batch's copies and %d input call%s, %s: step ", chain,
            chain == 1 ? "" : "s", host);
    print_range(f, step);
    fprintf(f, ": %.4g-%.4g images/s\n", images_s.slow, images_s.fast);
}

void gpucost_print_report(FILE *f, const Graph *train, const GcResult *r)
{
    const KvMachine *m = r->m;
    const double GiB = 1073741824.0;
    fprintf(f,
            "gpu: model %s, batch %lld, on one device of %s (%d SMs, %g GB/s, %g TFLOP/s f16 "
            "tensor, %g GB): the program as built, every call (--dump=gpu-cost; "
            "docs/gpucost.md)\n",
            train->model, (long long)r->o.batch, m->name, m->sm_count, m->device_mem_GBps,
            m->tc_f16_tflops, m->device_mem_GB);
    fprintf(f, "gpu: step ");
    print_range(f, r->step);
    fprintf(f, " = max(device ");
    print_range(f, r->device);
    fprintf(f, ", host ");
    print_range(f, r->host);
    fprintf(f, ") + waits ");
    print_range(f, r->waits_cost);
    fprintf(f, ": %.4g-%.4g images/s\n", r->images_s.slow, r->images_s.fast);
    fprintf(f,
            "gpu: per step %d device launches (%d cuDNN executions and cuBLASLt matmuls, "
            "%d custom kernels), %d copies; %.3g host waits (the metrics' read-back, once "
            "every %d steps; the batch's two staging slots make no wait)\n",
            r->launches, r->libcalls, r->launches - r->libcalls, r->copies, r->waits,
            (r->o.log_interval > 0 ? r->o.log_interval : 50) + 1);
    fprintf(f, "gpu: host per step: the batch's fill ");
    print_range(f, r->fill);
    fprintf(f, " (a batch filled on the host, at the synthetic source's rate on this "
               "project's build machine: --augment; the lines below make it on the device), "
               "launches and cuDNN executions: ");
    print_range(f, (GcRange){r->host.fast - r->fill.fast, r->host.slow - r->fill.slow});
    fputc('\n', f);
    fprintf(f, "gpu: with the synthetic batch made on the device (cuda/synthetic.cuh, as the "
               "program does on --data synthetic): its kernel ");
    print_range(f, r->synth);
    fprintf(f, " in the first layer's form");
    print_instead(f, r->chain, "no fill", r->synth_step, r->synth_images_s);
    fprintf(f, "gpu: and with --cuda-graph 1 (the step one graph launch): host ");
    print_range(f, r->graph_host);
    fprintf(f, ", step ");
    print_range(f, r->graph_step);
    fprintf(f, ": %.4g-%.4g images/s\n", r->graph_images_s.slow, r->graph_images_s.fast);
    fprintf(f,
            "gpu: with real data uploaded as bytes (device.h's ingest, as the program does "
            "on an image source without --augment): %.3g MB a step instead of %.3g MB, "
            "copied ",
            r->upload_raw / 1e6, r->upload_f32 / 1e6);
    print_range(f, r->ingest_copy);
    fprintf(f, " on the copy stream, its kernel ");
    print_range(f, r->ingest);
    print_instead(f, r->chain, "the source's fill not priced", r->ingest_step, r->ingest_images_s);
    fprintf(f,
            "gpu: with conv_bn_stats (--fuse=conv_bn_stats, off by default: BatchNorm's statistics from its "
            "convolution's cuDNN GEN_STATS, the convolution priced as alone): %d of %d "
            "training BatchNorms, their forward ",
            r->stats_bns, r->bns);
    print_range(f, r->stats_bn_fwd);
    fprintf(f, " (now ");
    print_range(f, r->family[GF_BN_FWD]);
    fprintf(f, "), device ");
    print_range(f, r->stats_device);
    fprintf(f, ", with the synthetic batch made on the device: step ");
    print_range(f, r->stats_step);
    fprintf(f, ": %.4g-%.4g images/s\n", r->stats_images_s.slow, r->stats_images_s.fast);
    fprintf(f,
            "gpu: peak device memory %.3g-%.3g GiB of %g GB: arena %.3g GiB, workspace "
            "%.3g-%.3g GiB, parameters %.3g GiB, fp32 masters %.3g GiB, optimizer state "
            "%.3g GiB, inputs %.3g GiB, context %.2g-%.2g GiB\n",
            r->memory.fast / GiB, r->memory.slow / GiB, m->device_mem_GB, r->arena / GiB,
            r->workspace.fast / GiB, r->workspace.slow / GiB, r->params / GiB, r->masters / GiB,
            r->state / GiB, r->inputs / GiB, r->context.fast / GiB, r->context.slow / GiB);
    if (r->memory.fast > m->device_mem_GB * 1e9)
        fprintf(f, "gpu: the step does not fit the device's %g GB\n", m->device_mem_GB);
    fprintf(f, "gpu: autotune start-up ");
    print_range(f, r->autotune);
    fprintf(f, " (%d cuDNN plans%s)", r->plans,
            r->o.autotune ? ", at most 4 candidates each timed; --cudnn-autotune 0 takes the "
                            "heuristic's first"
                          : ", the heuristic's first candidate each");
    fprintf(f, "; with --cudnn-plan-cache, the next start ");
    print_range(f, r->autotune_cached);
    fprintf(f, "\n");
    fprintf(f, "gpu: %-12s %12s %12s %7s\n", "family", "fast ms", "slow ms", "share");
    for (int k = 0; k < GF_COUNT; k++)
        if (r->family[k].slow > 0)
            fprintf(f, "gpu:   %-12s %12.3f %12.3f %6.1f%%\n", gc_family_names[k],
                    r->family[k].fast * 1e3, r->family[k].slow * 1e3,
                    100 * mid(r->family[k]) / mid(r->device));
    const GcCall **order = malloc(sizeof *order * ((size_t)r->ncalls + 1));
    if (!order)
        DIE("out of memory");
    for (int i = 0; i < r->ncalls; i++)
        order[i] = &r->calls[i];
    qsort(order, (size_t)r->ncalls, sizeof *order, by_slow);
    fprintf(f, "gpu: the ten costliest calls (slow end)\n");
    for (int i = 0; i < r->ncalls && i < 10; i++) {
        const GcCall *c = order[i];
        fprintf(f, "gpu:   %10.3f-%-10.3f ms %5.1f%%  %-7s %-11s ", c->t.fast * 1e3,
                c->t.slow * 1e3, 100 * c->t.slow / r->device.slow, gc_bound_names[c->bound],
                gc_family_names[c->family]);
        program_put_name(f, c->node);
        fprintf(f, " %s\n", c->entry);
    }
    free(order);
}

/* ---- calibration ------------------------------------------------------------------------ */

/* Solves the n x n system a x = b (row-major a, n <= GF_COUNT) by Gaussian
 * elimination with partial pivoting; false when it is singular. */
static bool solve(double *a, double *b, int n, double *x)
{
    for (int c = 0; c < n; c++) {
        int p = c;
        for (int r = c + 1; r < n; r++)
            if (fabs(a[r * n + c]) > fabs(a[p * n + c]))
                p = r;
        if (fabs(a[p * n + c]) < 1e-300)
            return false;
        for (int k = 0; k < n; k++) {
            double t = a[c * n + k];
            a[c * n + k] = a[p * n + k];
            a[p * n + k] = t;
        }
        double t = b[c];
        b[c] = b[p];
        b[p] = t;
        for (int r = c + 1; r < n; r++) {
            double q = a[r * n + c] / a[c * n + c];
            for (int k = c; k < n; k++)
                a[r * n + k] -= q * a[c * n + k];
            b[r] -= q * b[c];
        }
    }
    for (int c = n - 1; c >= 0; c--) {
        double s = b[c];
        for (int k = c + 1; k < n; k++)
            s -= a[c * n + k] * x[k];
        x[c] = s / a[c * n + c];
    }
    return true;
}

/* a node's (or phase's) predicted middles by family, ms, into row */
static bool row_of(const GcResult *r, const char *name, int step, GcFamily only, double *row)
{
    bool hit = false;
    for (int j = 0; j < r->ncalls; j++) {
        const GcCall *c = &r->calls[j];
        if (c->step == step && (name ? strcmp(c->node, name) == 0 : c->family == only)) {
            row[c->family] += mid(c->t) * 1e3;
            hit = true;
        }
    }
    return hit;
}

/* what each family reached of its peak at the model's middle: the tensor
 * rate where it does tensor FLOPs, else DRAM bandwidth */
static void family_eff(const GcResult *r, GcFit *fit)
{
    double fl[GF_COUNT] = {0}, by[GF_COUNT] = {0}, t[GF_COUNT] = {0};
    for (int j = 0; j < r->ncalls; j++) {
        const GcCall *c = &r->calls[j];
        fl[c->family] += c->flops[GK_TENSOR];
        by[c->family] += c->rd + c->wr;
        t[c->family] += mid(c->t);
    }
    for (int f = 0; f < GF_COUNT; f++) {
        fit->eff_tensor[f] = fl[f] > 0;
        double peak = fl[f] > 0 ? r->m->tc_f16_tflops * 1e12 : r->m->device_mem_GBps * 1e9;
        fit->eff_model[f] = t[f] > 0 ? (fl[f] > 0 ? fl[f] : by[f]) / (t[f] * peak) : 0;
        fit->eff_fitted[f] =
            fit->fitted[f] && fit->factor[f] > 0 ? fit->eff_model[f] / fit->factor[f] : 0;
    }
}

bool gpucost_fit(const GcResult *r, const GcMeasured *meas, int n, const GcPhases *ph, GcFit *fit,
                 FILE *err)
{
    memset(fit, 0, sizeof *fit);
    /* the rows: each measured node, then the two phases when given */
    int rows = n + 2;
    double *a = calloc((size_t)rows * GF_COUNT + 1, sizeof *a),
           *y = calloc((size_t)rows + 1, sizeof *y);
    if (!a || !y)
        DIE("out of memory");
    for (int i = 0; i < n; i++) {
        row_of(r, meas[i].name, STEP_TRAIN, GF_COUNT, &a[i * GF_COUNT]) ? fit->matched++
                                                                        : fit->unmatched++;
        y[i] = meas[i].ms;
    }
    if (fit->matched <= fit->unmatched) {
        fprintf(err,
                "ampc: --calibrate: %d of the profile's %d calls name no call of this "
                "program (a profile of another model or build?)\n",
                fit->unmatched, n);
        free(a), free(y);
        return false;
    }
    if (ph && ph->optimizer_ms >= 0 && row_of(r, NULL, -1, GF_OPTIM, &a[n * GF_COUNT]))
        y[n] = ph->optimizer_ms;
    else
        memset(&a[n * GF_COUNT], 0, sizeof(double) * GF_COUNT);
    for (int j = 0; ph && ph->moving_ms >= 0 && j < r->ncalls; j++)
        if (r->calls[j].step == STEP_MOVING)
            a[(n + 1) * GF_COUNT + r->calls[j].family] += mid(r->calls[j].t) * 1e3;
    y[n + 1] = ph && ph->moving_ms >= 0 ? ph->moving_ms : 0;
    /* the normal equations over the families some row has */
    int cols[GF_COUNT], nc = 0;
    for (int f = 0; f < GF_COUNT; f++) {
        double col = 0;
        for (int i = 0; i < rows; i++)
            col += a[i * GF_COUNT + f];
        if (col > 0)
            cols[nc++] = f;
    }
    double ata[GF_COUNT * GF_COUNT] = {0}, aty[GF_COUNT] = {0}, k[GF_COUNT] = {0};
    for (int i = 0; i < rows; i++)
        for (int p = 0; p < nc; p++) {
            aty[p] += a[i * GF_COUNT + cols[p]] * y[i];
            for (int q = 0; q < nc; q++)
                ata[p * nc + q] += a[i * GF_COUNT + cols[p]] * a[i * GF_COUNT + cols[q]];
        }
    bool ok = solve(ata, aty, nc, k);
    for (int p = 0; ok && p < nc; p++) {
        fit->factor[cols[p]] = k[p];
        fit->fitted[cols[p]] = true;
    }
    if (!ok)
        fprintf(err, "ampc: --calibrate: the families cannot be told apart by these nodes (each "
                     "family's time always comes with another's): no fit\n");
    /* each row's measured time shared out by the fitted parts */
    for (int i = 0; i < rows; i++) {
        double whole = 0;
        for (int f = 0; f < GF_COUNT; f++) {
            fit->predicted_ms[f] += a[i * GF_COUNT + f];
            whole += a[i * GF_COUNT + f] * (ok ? fit->factor[f] : 1);
        }
        for (int f = 0; f < GF_COUNT && whole > 0; f++)
            fit->measured_ms[f] += y[i] * a[i * GF_COUNT + f] * (ok ? fit->factor[f] : 1) / whole;
    }
    family_eff(r, fit);
    free(a), free(y);
    return ok;
}

void gpucost_print_fit(FILE *f, const GcResult *r, const GcFit *fit)
{
    fprintf(f,
            "calibrate: %s, batch %lld: %d profile calls matched, %d not; the model's time is "
            "the middle of its range; factor = measured / predicted\n",
            r->m->name, (long long)r->o.batch, fit->matched, fit->unmatched);
    fprintf(f, "calibrate: %-12s %13s %13s %9s  %s\n", "family", "predicted ms", "measured ms",
            "factor", "share of peak reached: the model's, the fit's");
    for (int k = 0; k < GF_COUNT; k++) {
        if (fit->predicted_ms[k] <= 0)
            continue;
        if (!fit->fitted[k]) {
            fprintf(f, "calibrate: %-12s %13.6g %13s %9s  not fitted\n", gc_family_names[k],
                    fit->predicted_ms[k], "-", "-");
            continue;
        }
        fprintf(f, "calibrate: %-12s %13.6g %13.6g %9.4f  %.3g%% -> %.3g%% of the %s\n",
                gc_family_names[k], fit->predicted_ms[k], fit->measured_ms[k], fit->factor[k],
                100 * fit->eff_model[k], 100 * fit->eff_fitted[k],
                fit->eff_tensor[k] ? "tensor-core rate" : "DRAM bandwidth");
    }
}
