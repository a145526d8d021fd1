/* elemwise.c - elementwise binary ops, numpy broadcasting, tensor-scalar
 * ops, exp/log/sqrt, and Concat.
 *
 * All walk their tensors in chunks (cpu.h): fp32 chunks in place, 16-bit
 * chunks widened on the stack and rounded once.  Broadcasting walks the
 * output row by row (the last axis is the row); the backward reduces each
 * input's gradient over its broadcast axes in double, in the workspace.
 */
#include <math.h>

#include "cpu.h"
#include "kernels/act.h"

static inline float bin(RtBinOp op, float a, float b)
{
    switch (op) {
    case RT_BIN_ADD: return a + b;
    case RT_BIN_SUB: return a - b;
    case RT_BIN_MUL: return a * b;
    }
    return 0.0f;
}

/* ---- elemwise_add/sub/mul ------------------------------------------------- */

typedef struct {
    RtBinOp op;
    RtDType dt;
    const void *a, *b, *dy;
    void *y, *da, *db;
    bool acc_a, acc_b;
} BinJob;

static void add_f32(float *r, const float *a, const float *b, size_t m)
{
    size_t i = 0;
    for (; i + 8 <= m; i += 8) {
        rt__st4(r + i, rt__ld4(a + i) + rt__ld4(b + i));
        rt__st4(r + i + 4, rt__ld4(a + i + 4) + rt__ld4(b + i + 4));
    }
    for (; i < m; i++)
        r[i] = a[i] + b[i];
}

static void bin_fwd_range(void *p, size_t lo, size_t hi)
{
    const BinJob *j = p;
    float ab[RT_CHUNK], bb[RT_CHUNK], yb[RT_CHUNK];
    RT_CHUNKS_IN(lo, hi, off, m) {
        const float *va = rt__view(j->a, off, m, j->dt, ab), *vb = rt__view(j->b, off, m, j->dt, bb);
        float *r = rt__out(j->y, off, j->dt, false, yb);
        switch (j->op) {
        case RT_BIN_ADD: add_f32(r, va, vb, m); break;
        case RT_BIN_SUB: for (size_t i = 0; i < m; i++) r[i] = va[i] - vb[i]; break;
        case RT_BIN_MUL: for (size_t i = 0; i < m; i++) r[i] = va[i] * vb[i]; break;
        }
        rt__commit(j->y, off, r, m, j->dt, false);
    }
}

void rt_elemwise_forward(RtBinOp op, size_t n, RtDType dt, const void *a, const void *b, void *y)
{
    BinJob j = {op, dt, a, b, NULL, y, NULL, NULL, false, false};
    rt__parallel_range(n, bin_fwd_range, &j);
}

/* relu(a + b): the sum as add_f32 makes it, rounded to dt where the unfused
 * add stores it, then the unfused relu's ampc_relu (NaN -> 0). */
static void add_relu_range(void *p, size_t lo, size_t hi)
{
    const BinJob *j = p;
    float ab[RT_CHUNK], bb[RT_CHUNK], yb[RT_CHUNK];
    RT_CHUNKS_IN(lo, hi, off, m) {
        const float *va = rt__view(j->a, off, m, j->dt, ab), *vb = rt__view(j->b, off, m, j->dt, bb);
        float *r = rt__out(j->y, off, j->dt, false, yb);
        add_f32(r, va, vb, m);
        rt__round_through(r, m, j->dt);
        /* branch-free, four lanes at a time: act.c's relu_f32, the same bits */
        const rt_v4 z = rt__splat4(0.0f);
        size_t i = 0;
        for (; i + 4 <= m; i += 4) {
            rt_v4 a = rt__ld4(r + i);
            rt__st4(r + i, rt__and4(a, a > z));
        }
        for (; i < m; i++)
            r[i] = ampc_relu(r[i]);
        rt__commit(j->y, off, r, m, j->dt, false);
    }
}

void rt_add_relu_forward(size_t n, RtDType dt, const void *a, const void *b, void *y)
{
    BinJob j = {RT_BIN_ADD, dt, a, b, NULL, y, NULL, NULL, false, false};
    rt__parallel_range(n, add_relu_range, &j);
}

static void bin_bwd_range(void *p, size_t lo, size_t hi)
{
    const BinJob *j = p;
    RtBinOp op = j->op;
    RtDType dt = j->dt;
    float gb[RT_CHUNK], vb[RT_CHUNK], ob[RT_CHUNK];
    RT_CHUNKS_IN(lo, hi, off, m) {
        const float *g = rt__view(j->dy, off, m, dt, gb);
        if (j->da) {
            /* dA = dy (add, sub) or dy*b (mul) */
            float *r = rt__out(j->da, off, dt, j->acc_a, ob);
            if (op == RT_BIN_MUL) {
                const float *v = rt__view(j->b, off, m, dt, vb);
                for (size_t i = 0; i < m; i++)
                    r[i] = g[i] * v[i];
            } else if (r != g) {
                memcpy(r, g, m * sizeof *r);
            }
            rt__commit(j->da, off, r, m, dt, j->acc_a);
        }
        if (j->db) {
            /* dB = dy, -dy or dy*a */
            float *r = rt__out(j->db, off, dt, j->acc_b, ob);
            const float *v = op == RT_BIN_MUL ? rt__view(j->a, off, m, dt, vb) : NULL;
            for (size_t i = 0; i < m; i++)
                r[i] = op == RT_BIN_ADD ? g[i] : op == RT_BIN_SUB ? -g[i] : g[i] * v[i];
            rt__commit(j->db, off, r, m, dt, j->acc_b);
        }
    }
}

void rt_elemwise_backward(RtBinOp op, size_t n, RtDType dt, const void *dy, const void *a,
                          const void *b, void *da, void *db, bool acc_a, bool acc_b)
{
    BinJob j = {op, dt, a, b, dy, NULL, da, db, acc_a, acc_b};
    rt__parallel_range(n, bin_bwd_range, &j);
}

/* ---- broadcasting ------------------------------------------------------------ */

size_t rt_broadcast_workspace_bytes(const RtBcastDims *d, RtDType dt, RtPass pass)
{
    (void)dt;
    if (pass == RT_PASS_FORWARD)
        return 0;
    size_t t = 0, no = rt__numel(d->out, d->rank);
    size_t na = rt__numel(d->a, d->rank), nb = rt__numel(d->b, d->rank);
    if (na != no)
        rt__ws_add(&t, na * sizeof(double));
    if (nb != no)
        rt__ws_add(&t, nb * sizeof(double));
    return t;
}

void rt_broadcast_forward(RtBinOp op, const RtBcastDims *d, RtDType dt, const void *a,
                          const void *b, void *y)
{
    RtBWalk w;
    rt__bwalk_init(&w, d);
    int64_t ra = w.sa[d->rank - 1], rb = w.sb[d->rank - 1];
    float ab[RT_CHUNK], bb[RT_CHUNK], yb[RT_CHUNK];
    for (size_t r = 0; r < w.rows; r++) {
        size_t oa, ob, oy = r * w.len;
        rt__brow(&w, r, &oa, &ob);
        RT_CHUNKS(w.len, j, m) {
            const float *va = rt__brow_vals(a, oa + j * (size_t)ra, m, ra, dt, ab);
            const float *vb = rt__brow_vals(b, ob + j * (size_t)rb, m, rb, dt, bb);
            float *o = rt__out(y, oy + j, dt, false, yb);
            for (size_t i = 0; i < m; i++)
                o[i] = bin(op, va[i], vb[i]);
            rt__commit(y, oy + j, o, m, dt, false);
        }
    }
}

void rt_broadcast_backward(RtBinOp op, const RtBcastDims *d, RtDType dt, const void *dy,
                           const void *a, const void *b, void *da, void *db, bool acc_a,
                           bool acc_b, void *ws)
{
    RtBWalk w;
    rt__bwalk_init(&w, d);
    size_t no = rt__numel(d->out, d->rank), na = rt__numel(d->a, d->rank);
    size_t nb = rt__numel(d->b, d->rank);
    char *p = ws;
    /* reduced inputs accumulate in double; the others are written directly */
    double *sa = na != no ? rt__ws_take(&p, na * sizeof(double)) : NULL;
    double *sb = nb != no ? rt__ws_take(&p, nb * sizeof(double)) : NULL;
    if (sa && da)
        memset(sa, 0, na * sizeof *sa);
    if (sb && db)
        memset(sb, 0, nb * sizeof *sb);
    int64_t ra = w.sa[d->rank - 1], rb = w.sb[d->rank - 1];
    float gb[RT_CHUNK], vb[RT_CHUNK], ob[RT_CHUNK];
    for (size_t r = 0; r < w.rows; r++) {
        size_t oa, obb, oy = r * w.len;
        rt__brow(&w, r, &oa, &obb);
        RT_CHUNKS(w.len, j, m) {
            const float *g = rt__view(dy, oy + j, m, dt, gb);
            for (int side = 0; side < 2; side++) {
                void *dst = side ? db : da;
                if (!dst)
                    continue;
                double *acc = side ? sb : sa;
                int64_t rs = side ? rb : ra;
                size_t base = (side ? obb : oa) + j * (size_t)rs;
                bool accf = side ? acc_b : acc_a;
                /* this side's gradient before reduction: dy, -dy or dy*other */
                const float *other = NULL;
                if (op == RT_BIN_MUL)
                    other = side ? rt__brow_vals(a, oa + j * (size_t)ra, m, ra, dt, vb)
                                 : rt__brow_vals(b, obb + j * (size_t)rb, m, rb, dt, vb);
                float sign = side && op == RT_BIN_SUB ? -1.0f : 1.0f;
                if (acc) {
                    if (rs)
                        for (size_t i = 0; i < m; i++)
                            acc[base + i] += (double)(other ? g[i] * other[i] : sign * g[i]);
                    else {
                        double s = 0.0;
                        for (size_t i = 0; i < m; i++)
                            s += (double)(other ? g[i] * other[i] : sign * g[i]);
                        acc[base] += s;
                    }
                } else {
                    float *o = rt__out(dst, oy + j, dt, accf, ob);
                    for (size_t i = 0; i < m; i++)
                        o[i] = other ? g[i] * other[i] : sign * g[i];
                    rt__commit(dst, oy + j, o, m, dt, accf);
                }
            }
        }
    }
    for (int side = 0; side < 2; side++) {
        void *dst = side ? db : da;
        double *acc = side ? sb : sa;
        if (!dst || !acc)
            continue;
        size_t n = side ? nb : na;
        bool accf = side ? acc_b : acc_a;
        float buf[RT_CHUNK];
        RT_CHUNKS(n, off, m) {
            for (size_t i = 0; i < m; i++)
                buf[i] = (float)acc[off + i];
            rt__commit(dst, off, buf, m, dt, accf);
        }
    }
}

/* ---- tensor-scalar ops --------------------------------------------------- */

void rt_scalar_forward(RtScalarOp op, size_t n, RtDType dt, const void *x, float s, void *y)
{
    float xb[RT_CHUNK], yb[RT_CHUNK];
    RT_CHUNKS(n, off, m) {
        const float *v = rt__view(x, off, m, dt, xb);
        float *r = rt__out(y, off, dt, false, yb);
        switch (op) {
        case RT_SCALAR_PLUS: for (size_t i = 0; i < m; i++) r[i] = v[i] + s; break;
        case RT_SCALAR_MINUS: for (size_t i = 0; i < m; i++) r[i] = v[i] - s; break;
        case RT_SCALAR_RMINUS: for (size_t i = 0; i < m; i++) r[i] = s - v[i]; break;
        case RT_SCALAR_MUL: for (size_t i = 0; i < m; i++) r[i] = v[i] * s; break;
        case RT_SCALAR_DIV: for (size_t i = 0; i < m; i++) r[i] = v[i] / s; break;
        case RT_SCALAR_RDIV: for (size_t i = 0; i < m; i++) r[i] = s / v[i]; break;
        }
        rt__commit(y, off, r, m, dt, false);
    }
}

void rt_scalar_backward(RtScalarOp op, size_t n, RtDType dt, const void *x, float s,
                        const void *dy, void *dx, bool accumulate)
{
    float xb[RT_CHUNK], gb[RT_CHUNK], ob[RT_CHUNK];
    RT_CHUNKS(n, off, m) {
        const float *g = rt__view(dy, off, m, dt, gb);
        float *r = rt__out(dx, off, dt, accumulate, ob);
        switch (op) {
        case RT_SCALAR_PLUS:
        case RT_SCALAR_MINUS:
            for (size_t i = 0; i < m; i++) r[i] = g[i];
            break;
        case RT_SCALAR_RMINUS: for (size_t i = 0; i < m; i++) r[i] = -g[i]; break;
        case RT_SCALAR_MUL: for (size_t i = 0; i < m; i++) r[i] = g[i] * s; break;
        case RT_SCALAR_DIV: for (size_t i = 0; i < m; i++) r[i] = g[i] / s; break;
        case RT_SCALAR_RDIV: {
            const float *v = rt__view(x, off, m, dt, xb);
            for (size_t i = 0; i < m; i++) r[i] = -g[i] * s / (v[i] * v[i]);
            break;
        }
        }
        rt__commit(dx, off, r, m, dt, accumulate);
    }
}

/* ---- clip ---------------------------------------------------------------------- */

void rt_clip_forward(size_t n, RtDType dt, const void *x, float lo, float hi, void *y)
{
    float xb[RT_CHUNK], yb[RT_CHUNK];
    RT_CHUNKS(n, off, m) {
        const float *v = rt__view(x, off, m, dt, xb);
        float *r = rt__out(y, off, dt, false, yb);
        for (size_t i = 0; i < m; i++)
            r[i] = v[i] < lo ? lo : v[i] > hi ? hi : v[i]; /* a NaN passes, as in MXNet */
        rt__commit(y, off, r, m, dt, false);
    }
}

void rt_clip_backward(size_t n, RtDType dt, const void *x, float lo, float hi, const void *dy,
                      void *dx, bool accumulate)
{
    float xb[RT_CHUNK], gb[RT_CHUNK], ob[RT_CHUNK];
    RT_CHUNKS(n, off, m) {
        const float *v = rt__view(x, off, m, dt, xb);
        const float *g = rt__view(dy, off, m, dt, gb);
        float *r = rt__out(dx, off, dt, accumulate, ob);
        for (size_t i = 0; i < m; i++)
            r[i] = v[i] > hi || v[i] < lo ? 0.0f : g[i];
        rt__commit(dx, off, r, m, dt, accumulate);
    }
}

/* ---- exp, log, sqrt and the other unary math (kernels/unary.h) ---------------- */

/* rt.h spells RtUnaryOp out; kernels/unary.h's list is the order */
#define UNARY_AGREE(N, n)                                                                          \
    _Static_assert((int)RT_UNARY_##N == AMPC_UNARY_##N, "rt.h and kernels/unary.h: " #n);
AMPC_UNARY_LIST(UNARY_AGREE)
#undef UNARY_AGREE
_Static_assert((int)RT_UNARY_COUNT == AMPC_UNARY_COUNT, "rt.h and kernels/unary.h agree");

void rt_unary_forward(RtUnaryOp op, size_t n, RtDType dt, const void *x, void *y)
{
    float xb[RT_CHUNK], yb[RT_CHUNK];
    RT_CHUNKS(n, off, m) {
        const float *v = rt__view(x, off, m, dt, xb);
        float *r = rt__out(y, off, dt, false, yb);
        switch (op) { /* the common three without a switch per element */
        case RT_UNARY_EXP: for (size_t i = 0; i < m; i++) r[i] = expf(v[i]); break;
        case RT_UNARY_LOG: for (size_t i = 0; i < m; i++) r[i] = logf(v[i]); break;
        case RT_UNARY_SQRT: for (size_t i = 0; i < m; i++) r[i] = sqrtf(v[i]); break;
        default:
            for (size_t i = 0; i < m; i++)
                r[i] = ampc_unary((int)op, v[i]);
            break;
        }
        rt__commit(y, off, r, m, dt, false);
    }
}

void rt_unary_backward(RtUnaryOp op, size_t n, RtDType dt, const void *x, const void *y,
                       const void *dy, void *dx, bool accumulate)
{
    float vb[RT_CHUNK], gb[RT_CHUNK], ob[RT_CHUNK];
    bool by_y = op == RT_UNARY_EXP || op == RT_UNARY_SQRT;
    RT_CHUNKS(n, off, m) {
        const float *v = rt__view(by_y ? y : x, off, m, dt, vb);
        const float *g = rt__view(dy, off, m, dt, gb);
        float *r = rt__out(dx, off, dt, accumulate, ob);
        switch (op) {
        case RT_UNARY_EXP: for (size_t i = 0; i < m; i++) r[i] = g[i] * v[i]; break;
        case RT_UNARY_LOG: for (size_t i = 0; i < m; i++) r[i] = g[i] / v[i]; break;
        case RT_UNARY_SQRT: for (size_t i = 0; i < m; i++) r[i] = g[i] * 0.5f / v[i]; break;
        default:
            for (size_t i = 0; i < m; i++)
                r[i] = g[i] * ampc_unary_grad((int)op, v[i]);
            break;
        }
        rt__commit(dx, off, r, m, dt, accumulate);
    }
}

/* ---- Concat ------------------------------------------------------------------- */

void rt_concat_forward(int nin, const void *const *x, const int64_t *len, int64_t outer,
                       int64_t inner, RtDType dt, void *y)
{
    size_t esz = rt_dtype_size(dt);
    char *dst = y;
    for (int64_t o = 0; o < outer; o++)
        for (int i = 0; i < nin; i++) {
            size_t bytes = (size_t)len[i] * (size_t)inner * esz;
            memcpy(dst, (const char *)x[i] + (size_t)o * bytes, bytes);
            dst += bytes;
        }
}

void rt_concat_backward(int nin, const void *dy, const int64_t *len, int64_t outer,
                        int64_t inner, RtDType dt, void *const *dx, const bool *accumulate)
{
    size_t total = 0;
    for (int i = 0; i < nin; i++)
        total += (size_t)len[i];
    size_t start = 0;
    for (int i = 0; i < nin; i++) {
        size_t seg = (size_t)len[i] * (size_t)inner;
        if (dx[i]) {
            bool acc = accumulate && accumulate[i];
            for (int64_t o = 0; o < outer; o++) {
                size_t src = (size_t)o * total * (size_t)inner + start, dst = (size_t)o * seg;
                if (!acc) {
                    size_t esz = rt_dtype_size(dt);
                    memcpy((char *)dx[i] + dst * esz, (const char *)dy + src * esz, seg * esz);
                    continue;
                }
                float buf[RT_CHUNK];
                RT_CHUNKS(seg, j, m) {
                    const float *v = rt__view(dy, src + j, m, dt, buf);
                    rt__commit(dx[i], dst + j, v, m, dt, true);
                }
            }
        }
        start += seg;
    }
}
