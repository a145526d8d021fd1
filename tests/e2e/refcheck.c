/* refcheck.c - checks a compiled program's gradients against finite
 * differences of a float64 reference of the same model.
 *
 *   refcheck MODEL.ir STATE [--samples K] [--tol T]
 *
 * MODEL.ir is the model's forward graph (ampc --dump=infer-types, fp32).
 * STATE is what the program wrote with --dump-state after one training step
 * on a fixed batch (runtime/train.c documents the format): its parameters,
 * the batch, and the gradients it computed.  This file evaluates the loss
 * the program's SoftmaxOutput differentiates (the sum over the batch of the
 * smoothed cross-entropy, times grad_scale, normalised as asked) with its own
 * double-precision implementation of every forward op, written separately
 * from the runtime's kernels, and compares central differences on K sampled
 * coordinates of every parameter with the program's gradients.
 *
 * Only Dropout's mask comes from the runtime (rt_dropout_uniform is a pure
 * function of seed, step and the node's name hash), so both sides drop the
 * same elements. */
#include "../../ir/ir.h"
#include "../../runtime/rt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *name;
    int64_t numel;
    float *value, *grad;
} PState;

typedef struct {
    int nparams;
    PState *p;
    int64_t batch, data_numel;
    float *data, *label;
    uint64_t seed, step;
    double loss;
} State;

static void die(const char *msg)
{
    fprintf(stderr, "refcheck: %s\n", msg);
    exit(2);
}

static void rd(void *p, size_t n, FILE *f)
{
    if (fread(p, 1, n, f) != n)
        die("state file truncated");
}

static void load_state(const char *path, State *s)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die("cannot open the state file");
    char magic[8];
    uint32_t version, np;
    rd(magic, 8, f);
    if (memcmp(magic, "AMPCSTAT", 8) != 0)
        die("not a state file");
    rd(&version, 4, f);
    rd(&np, 4, f);
    rd(&s->batch, 8, f);
    rd(&s->data_numel, 8, f);
    rd(&s->seed, 8, f);
    rd(&s->step, 8, f);
    rd(&s->loss, 8, f);
    s->nparams = (int)np;
    s->p = calloc(np, sizeof *s->p);
    for (uint32_t i = 0; i < np; i++) {
        uint32_t len;
        rd(&len, 4, f);
        s->p[i].name = calloc(len + 1, 1);
        rd(s->p[i].name, len, f);
        rd(&s->p[i].numel, 8, f);
        s->p[i].value = malloc(sizeof(float) * (size_t)s->p[i].numel);
        s->p[i].grad = malloc(sizeof(float) * (size_t)s->p[i].numel);
        rd(s->p[i].value, sizeof(float) * (size_t)s->p[i].numel, f);
        rd(s->p[i].grad, sizeof(float) * (size_t)s->p[i].numel, f);
    }
    s->data = malloc(sizeof(float) * (size_t)s->data_numel);
    s->label = malloc(sizeof(float) * (size_t)s->batch);
    rd(s->data, sizeof(float) * (size_t)s->data_numel, f);
    rd(s->label, sizeof(float) * (size_t)s->batch, f);
    fclose(f);
}

/* ---- the float64 reference --------------------------------------------- */

typedef struct {
    const Graph *g;
    const State *s;
    double **v;       /* node -> values */
    double **param;   /* node -> parameter values (double copies), for Param nodes */
} Ref;

static int64_t dimv(Dim d, int64_t n) { return d < 0 ? -d * n : d; }

static int64_t numel(const Node *x, int64_t n)
{
    int64_t e = 1;
    for (int i = 0; i < x->shape.rank; i++)
        e *= dimv(x->shape.d[i], n);
    return e;
}

static uint32_t name_hash(const char *name)
{
    uint32_t h = 2166136261u;
    for (; *name; name++)
        h = (h ^ (unsigned char)*name) * 16777619u;
    return h;
}

static void conv(const Ref *r, const Node *n, double *y)
{
    const Node *xn = r->g->nodes[n->in[0]], *wn = r->g->nodes[n->in[1]];
    const double *x = r->v[xn->id], *w = r->v[wn->id], *b = n->nin > 2 ? r->v[n->in[2]] : NULL;
    int64_t N = r->s->batch, C = xn->shape.d[1], F = node_int(n, CONV_NUM_FILTER),
            G = node_int(n, CONV_NUM_GROUP);
    int k = n->attrs[CONV_KERNEL].t.n;
    int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, ks[3] = {1, 1, 1}, st[3] = {1, 1, 1},
            pd[3] = {0, 0, 0}, dl[3] = {1, 1, 1};
    for (int i = 0; i < k; i++) {
        in[i] = xn->shape.d[2 + i];
        out[i] = n->shape.d[2 + i];
        ks[i] = n->attrs[CONV_KERNEL].t.v[i];
        st[i] = n->attrs[CONV_STRIDE].t.v[i];
        pd[i] = n->attrs[CONV_PAD].t.v[i];
        dl[i] = n->attrs[CONV_DILATE].t.v[i];
    }
    int64_t cg = C / G, fg = F / G, isz = in[0] * in[1] * in[2], osz = out[0] * out[1] * out[2];
    for (int64_t b0 = 0; b0 < N; b0++)
        for (int64_t f = 0; f < F; f++) {
            int64_t g = f / fg;
            for (int64_t o = 0; o < osz; o++) {
                int64_t o0 = o / (out[1] * out[2]), o1 = o / out[2] % out[1], o2 = o % out[2];
                double acc = b ? b[f] : 0;
                for (int64_t c = 0; c < cg; c++)
                    for (int64_t a0 = 0; a0 < ks[0]; a0++)
                        for (int64_t a1 = 0; a1 < ks[1]; a1++)
                            for (int64_t a2 = 0; a2 < ks[2]; a2++) {
                                int64_t i0 = o0 * st[0] - pd[0] + a0 * dl[0],
                                        i1 = o1 * st[1] - pd[1] + a1 * dl[1],
                                        i2 = o2 * st[2] - pd[2] + a2 * dl[2];
                                if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 ||
                                    i2 >= in[2])
                                    continue;
                                acc += x[((b0 * C + g * cg + c) * isz) + (i0 * in[1] + i1) * in[2] + i2] *
                                       w[(((f * cg + c) * ks[0] + a0) * ks[1] + a1) * ks[2] + a2];
                            }
                y[(b0 * F + f) * osz + o] = acc;
            }
        }
}

static void fc(const Ref *r, const Node *n, double *y)
{
    const Node *xn = r->g->nodes[n->in[0]];
    int64_t H = node_int(n, FC_NUM_HIDDEN), rows, K;
    int64_t total = numel(xn, r->s->batch);
    K = node_bool(n, FC_FLATTEN) ? total / dimv(xn->shape.d[0], r->s->batch)
                                 : dimv(xn->shape.d[xn->shape.rank - 1], r->s->batch);
    rows = total / K;
    const double *x = r->v[xn->id], *w = r->v[n->in[1]], *b = n->nin > 2 ? r->v[n->in[2]] : NULL;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t h = 0; h < H; h++) {
            double acc = b ? b[h] : 0;
            for (int64_t k = 0; k < K; k++)
                acc += x[i * K + k] * w[h * K + k];
            y[i * H + h] = acc;
        }
}

static void split(const Node *x, int axis, int64_t n, int64_t *outer, int64_t *len, int64_t *inner)
{
    *outer = *len = *inner = 1;
    for (int i = 0; i < x->shape.rank; i++) {
        int64_t d = dimv(x->shape.d[i], n);
        if (i < axis)
            *outer *= d;
        else if (i == axis)
            *len = d;
        else
            *inner *= d;
    }
}

static void batchnorm(const Ref *r, const Node *n, double *y)
{
    const Node *xn = r->g->nodes[n->in[0]];
    int64_t axis = node_int(n, BN_AXIS), O, C, I;
    if (axis < 0)
        axis += xn->shape.rank;
    split(xn, (int)axis, r->s->batch, &O, &C, &I);
    const double *x = r->v[xn->id], *gamma = r->v[n->in[1]], *beta = r->v[n->in[2]];
    const double *mm = r->v[n->in[3]], *mv = r->v[n->in[4]];
    double eps = node_float(n, BN_EPS);
    bool global = node_bool(n, BN_USE_GLOBAL_STATS), fix = node_bool(n, BN_FIX_GAMMA);
    for (int64_t c = 0; c < C; c++) {
        double mean = 0, var = 0, cnt = (double)(O * I);
        if (global) {
            mean = mm[c], var = mv[c];
        } else {
            for (int64_t o = 0; o < O; o++)
                for (int64_t i = 0; i < I; i++)
                    mean += x[(o * C + c) * I + i];
            mean /= cnt;
            for (int64_t o = 0; o < O; o++)
                for (int64_t i = 0; i < I; i++) {
                    double d = x[(o * C + c) * I + i] - mean;
                    var += d * d;
                }
            var /= cnt;
        }
        double g = fix ? 1.0 : gamma[c], inv = 1.0 / sqrt(var + eps);
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = 0; i < I; i++)
                y[(o * C + c) * I + i] = (x[(o * C + c) * I + i] - mean) * inv * g + beta[c];
    }
}

static double act(int t, double x)
{
    switch (t) {
    case ACT_RELU: return x > 0 ? x : 0;
    case ACT_SIGMOID: return 1 / (1 + exp(-x));
    case ACT_TANH: return tanh(x);
    case ACT_SOFTRELU: return x > 30 ? x : log1p(exp(x));
    default: return x / (1 + fabs(x));
    }
}

static void leaky(const Ref *r, const Node *n, double *y)
{
    const Node *xn = r->g->nodes[n->in[0]];
    int64_t O = 1, C = 1, I = 1, e = numel(xn, r->s->batch);
    if (xn->shape.rank >= 2)
        split(xn, 1, r->s->batch, &O, &C, &I);
    else
        O = e;
    const double *x = r->v[xn->id], *gm = n->nin > 1 ? r->v[n->in[1]] : NULL;
    double slope = node_float(n, LRELU_SLOPE);
    const double alpha = 1.6732632423543772848170429916717, lambda = 1.0507009873554804934193349852946;
    for (int64_t k = 0; k < e; k++) {
        double v = x[k];
        switch (node_enum(n, LRELU_TYPE)) {
        case LRELU_LEAKY: y[k] = v > 0 ? v : slope * v; break;
        case LRELU_ELU: y[k] = v > 0 ? v : slope * expm1(v); break;
        case LRELU_SELU: y[k] = lambda * (v > 0 ? v : alpha * expm1(v)); break;
        default: y[k] = v > 0 ? v : gm[(k / I) % C] * v;
        }
    }
}

static void pooling(const Ref *r, const Node *n, double *y)
{
    const Node *xn = r->g->nodes[n->in[0]];
    int64_t N = dimv(xn->shape.d[0], r->s->batch), C = xn->shape.d[1];
    int nsp = xn->shape.rank - 2;
    bool global = node_bool(n, POOL_GLOBAL_POOL), incl = node_bool(n, POOL_COUNT_INCLUDE_PAD);
    int type = node_enum(n, POOL_POOL_TYPE);
    int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, ks[3] = {1, 1, 1}, st[3] = {1, 1, 1}, pd[3] = {0, 0, 0};
    for (int i = 0; i < nsp; i++) {
        in[i] = xn->shape.d[2 + i];
        out[i] = n->shape.d[2 + i];
        ks[i] = global ? in[i] : n->attrs[POOL_KERNEL].t.v[i];
        st[i] = global ? 1 : n->attrs[POOL_STRIDE].t.v[i];
        pd[i] = global ? 0 : n->attrs[POOL_PAD].t.v[i];
    }
    const double *x = r->v[xn->id];
    int64_t isz = in[0] * in[1] * in[2], osz = out[0] * out[1] * out[2];
    for (int64_t p = 0; p < N * C; p++)
        for (int64_t o = 0; o < osz; o++) {
            int64_t oc[3] = {o / (out[1] * out[2]), o / out[2] % out[1], o % out[2]};
            int64_t lo[3], hi[3], plo[3], phi[3];
            for (int i = 0; i < 3; i++) {
                plo[i] = oc[i] * st[i] - pd[i];
                phi[i] = plo[i] + ks[i];
                if (phi[i] > in[i] + pd[i])
                    phi[i] = in[i] + pd[i];
                lo[i] = plo[i] < 0 ? 0 : plo[i];
                hi[i] = phi[i] > in[i] ? in[i] : phi[i];
            }
            double acc = type == POOL_MAX ? -INFINITY : 0;
            for (int64_t a = lo[0]; a < hi[0]; a++)
                for (int64_t b = lo[1]; b < hi[1]; b++)
                    for (int64_t c = lo[2]; c < hi[2]; c++) {
                        double v = x[p * isz + (a * in[1] + b) * in[2] + c];
                        acc = type == POOL_MAX ? (v > acc ? v : acc) : acc + v;
                    }
            if (type == POOL_AVG) {
                double cnt = incl ? (double)((phi[0] - plo[0]) * (phi[1] - plo[1]) * (phi[2] - plo[2]))
                                  : (double)((hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]));
                acc /= cnt;
            }
            y[p * osz + o] = acc;
        }
}

/* The summed, smoothed cross-entropy the program's SoftmaxOutput
 * differentiates. */
static double smo_loss(const Ref *r, const Node *n)
{
    const Node *xn = r->g->nodes[n->in[0]];
    int64_t N = dimv(xn->shape.d[0], r->s->batch), K = xn->shape.d[1];
    const double *x = r->v[xn->id];
    double a = node_float(n, SMO_SMOOTH_ALPHA), gs = node_float(n, SMO_GRAD_SCALE), total = 0;
    int64_t valid = 0;
    for (int64_t i = 0; i < N; i++) {
        int64_t lab = (int64_t)r->s->label[i];
        if (node_bool(n, SMO_USE_IGNORE) && r->s->label[i] == node_float(n, SMO_IGNORE_LABEL))
            continue;
        valid++;
        double m = -INFINITY, z = 0;
        for (int64_t k = 0; k < K; k++)
            m = x[i * K + k] > m ? x[i * K + k] : m;
        for (int64_t k = 0; k < K; k++)
            z += exp(x[i * K + k] - m);
        for (int64_t k = 0; k < K; k++) {
            double t = k == lab ? 1 - a : a / (double)(K - 1);
            total -= t * (x[i * K + k] - m - log(z));
        }
    }
    int norm = node_enum(n, SMO_NORMALIZATION);
    double div = norm == SMO_NORM_BATCH ? (double)N : norm == SMO_NORM_VALID ? (double)(valid ? valid : 1) : 1.0;
    return total * gs / div;
}

/* The unary math (runtime/kernels/unary.h) in double, MXNet's definitions. */
static double unary_ref(OpKind op, double x)
{
    switch (op) {
    case OP_exp: return exp(x);
    case OP_log: return log(x);
    case OP_sqrt: return sqrt(x);
    case OP_sin: return sin(x);
    case OP_cos: return cos(x);
    case OP_tan: return tan(x);
    case OP_arcsin: return asin(x);
    case OP_arccos: return acos(x);
    case OP_arctan: return atan(x);
    case OP_sinh: return sinh(x);
    case OP_cosh: return cosh(x);
    case OP_arcsinh: return asinh(x);
    case OP_arccosh: return acosh(x);
    case OP_arctanh: return atanh(x);
    case OP_expm1: return expm1(x);
    case OP_log1p: return log1p(x);
    case OP_log2: return log2(x);
    case OP_log10: return log10(x);
    case OP_cbrt: return cbrt(x);
    case OP_rcbrt: return 1 / cbrt(x);
    case OP_rsqrt: return 1 / sqrt(x);
    case OP_reciprocal: return 1 / x;
    case OP_square: return x * x;
    case OP_abs: return fabs(x);
    case OP_negative: return -x;
    case OP_sign: return x > 0 ? 1 : x < 0 ? -1 : 0;
    case OP_erf: return erf(x);
    case OP_degrees: return x * 180 / M_PI;
    case OP_radians: return x * M_PI / 180;
    case OP_floor: return floor(x);
    case OP_ceil: return ceil(x);
    case OP_round: return round(x);
    case OP_trunc:
    case OP_fix: return trunc(x);
    case OP_rint: return rint(x);
    default: return NAN;
    }
}

static bool eval_node(const Ref *r, const Node *n, double *y)
{
    const Graph *g = r->g;
    int64_t e = numel(n, r->s->batch);
    const double *x = n->nin ? r->v[n->in[0]] : NULL;
    switch (n->op) {
    case OP_Convolution: conv(r, n, y); break;
    case OP_FullyConnected: fc(r, n, y); break;
    case OP_BatchNorm: batchnorm(r, n, y); break;
    case OP_Activation:
        for (int64_t k = 0; k < e; k++)
            y[k] = act(node_enum(n, ACT_TYPE), x[k]);
        break;
    case OP_LeakyReLU: leaky(r, n, y); break;
    case OP_Dropout: {
        double p = node_float(n, DROPOUT_P);
        uint32_t stream = name_hash(n->name);
        for (int64_t k = 0; k < e; k++)
            y[k] = rt_dropout_uniform(r->s->seed, r->s->step, stream, (uint64_t)k) >= p ? x[k] / (1 - p) : 0;
        break;
    }
    case OP_Pooling: pooling(r, n, y); break;
    case OP_Flatten:
    case OP_Reshape:
    case OP_Cast:
    case OP_amp_cast: memcpy(y, x, sizeof(double) * (size_t)e); break;
    case OP_Concat: {
        int64_t dim = node_int(n, CONCAT_DIM), O, L, I, off = 0;
        if (dim < 0)
            dim += n->shape.rank;
        split(n, (int)dim, r->s->batch, &O, &L, &I);
        for (int j = 0; j < n->nin; j++) {
            int64_t o2, l2, i2;
            split(g->nodes[n->in[j]], (int)dim, r->s->batch, &o2, &l2, &i2);
            for (int64_t o = 0; o < O; o++)
                memcpy(y + (o * L + off) * I, r->v[n->in[j]] + o * l2 * I, sizeof(double) * (size_t)(l2 * I));
            off += l2;
        }
        break;
    }
    case OP_elemwise_add:
    case OP_elemwise_sub:
    case OP_elemwise_mul: {
        const double *b = r->v[n->in[1]];
        for (int64_t k = 0; k < e; k++)
            y[k] = n->op == OP_elemwise_add ? x[k] + b[k] : n->op == OP_elemwise_sub ? x[k] - b[k] : x[k] * b[k];
        break;
    }
    case OP__plus_scalar:
    case OP__minus_scalar:
    case OP__rminus_scalar:
    case OP__mul_scalar:
    case OP__div_scalar:
    case OP__rdiv_scalar: {
        double s = node_float(n, SCALAR_SCALAR);
        for (int64_t k = 0; k < e; k++)
            y[k] = n->op == OP__plus_scalar ? x[k] + s : n->op == OP__minus_scalar ? x[k] - s
                 : n->op == OP__rminus_scalar ? s - x[k] : n->op == OP__mul_scalar ? x[k] * s
                 : n->op == OP__div_scalar ? x[k] / s : s / x[k];
        break;
    }
#define UNARY_CASE(N, n) case OP_##n:
        AMPC_UNARY_LIST(UNARY_CASE)
#undef UNARY_CASE
        for (int64_t k = 0; k < e; k++)
            y[k] = unary_ref(n->op, x[k]);
        break;
    case OP_clip: {
        double lo = node_float(n, CLIP_A_MIN), hi = node_float(n, CLIP_A_MAX);
        for (int64_t k = 0; k < e; k++)
            y[k] = x[k] < lo ? lo : x[k] > hi ? hi : x[k];
        break;
    }
    case OP_SoftmaxOutput: break; /* the loss is taken at the end */
    default:
        fprintf(stderr, "refcheck: no reference for %s\n", op_info(n->op)->name);
        return false;
    }
    return true;
}

/* Forward in double; returns the summed loss over the loss heads. */
static double forward(const Ref *r)
{
    double loss = 0;
    for (int i = 0; i < r->g->nnodes; i++) {
        const Node *n = r->g->nodes[i];
        if (n->op == OP_Param) {
            memcpy(r->v[i], r->param[i], sizeof(double) * (size_t)numel(n, 1));
            continue;
        }
        if (n->op == OP_Input)
            continue;
        if (!eval_node(r, n, r->v[i]))
            exit(2);
        if (n->op == OP_SoftmaxOutput)
            loss += smo_loss(r, n);
    }
    return loss;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        die("usage: refcheck MODEL.ir STATE [--samples K] [--tol T]");
    int samples = 20;
    double tol = 2e-3;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--samples") == 0)
            samples = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--tol") == 0)
            tol = atof(argv[i + 1]);
    }
    Diag d;
    diag_init(&d, stderr);
    int file = diag_load_file(&d, argv[1]);
    Graph *g = file >= 0 ? ir_read(&d, file) : NULL;
    if (!g)
        die("cannot read the model");
    State s;
    load_state(argv[2], &s);
    Ref r = {.g = g, .s = &s};
    r.v = calloc((size_t)g->nnodes, sizeof(double *));
    r.param = calloc((size_t)g->nnodes, sizeof(double *));
    const PState **ps = calloc((size_t)g->nnodes, sizeof(PState *));
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        r.v[i] = calloc((size_t)numel(n, s.batch) + 1, sizeof(double));
        if (n->op == OP_Param) {
            for (int k = 0; k < s.nparams; k++)
                if (strcmp(s.p[k].name, n->name) == 0)
                    ps[i] = &s.p[k];
            if (!ps[i] || ps[i]->numel != numel(n, 1)) {
                fprintf(stderr, "refcheck: parameter %s missing or of another size in the state\n", n->name);
                return 2;
            }
            r.param[i] = malloc(sizeof(double) * (size_t)ps[i]->numel);
            for (int64_t k = 0; k < ps[i]->numel; k++)
                r.param[i][k] = ps[i]->value[k];
        } else if (n->op == OP_Input) {
            bool label = node_enum(n, INPUT_ROLE) == INPUT_LABEL;
            const float *src = label ? s.label : s.data;
            for (int64_t k = 0; k < numel(n, s.batch); k++)
                r.v[i][k] = src[k];
        }
    }
    double loss = forward(&r);
    printf("refcheck: %s: loss %.9g (program %.9g)\n", g->model, loss, s.loss);
    int bad = 0, checked = 0;
    double worst = 0;
    uint64_t rng = 12345;
    for (int i = 0; i < g->nnodes; i++) {
        if (!ps[i])
            continue;
        const Node *n = g->nodes[i];
        int kind = node_param_kind(n);
        if (kind == PK_MOVING_MEAN || kind == PK_MOVING_VAR)
            continue;
        double tmax = 0;
        for (int t = 0; t < samples && t < ps[i]->numel; t++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int64_t k = (int64_t)((rng >> 33) % (uint64_t)ps[i]->numel);
            double keep = r.param[i][k], h = 1e-7 * (fabs(keep) > 1 ? fabs(keep) : 1);
            r.param[i][k] = keep + h;
            double up = forward(&r);
            r.param[i][k] = keep - h;
            double down = forward(&r);
            r.param[i][k] = keep;
            double fd = (up - down) / (2 * h), got = ps[i]->grad[k];
            double err = fabs(fd - got) / (fabs(fd) + fabs(got) + 1e-3);
            tmax = err > tmax ? err : tmax;
            checked++;
            if (err > tol) {
                if (bad++ < 10)
                    printf("  MISMATCH %s[%lld]: finite difference %.9g, program %.9g (rel %.2e)\n",
                           n->name, (long long)k, fd, (double)got, err);
            }
        }
        worst = tmax > worst ? tmax : worst;
    }
    printf("refcheck: %d coordinates, worst relative error %.3e (tolerance %.1e): %s\n", checked,
           worst, tol, bad ? "FAIL" : "ok");
    double lrel = fabs(loss - s.loss) / (fabs(loss) + 1e-12);
    if (lrel > 1e-4) {
        printf("refcheck: the loss differs: %.3e relative\n", lrel);
        bad++;
    }
    graph_free(g);
    diag_free(&d);
    return bad ? 1 : 0;
}
