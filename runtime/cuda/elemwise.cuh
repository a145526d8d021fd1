/*
 * elemwise.cuh - the twins of runtime/cpu/elemwise.c: binary ops and their
 * backward, scalar ops, the fused add + relu, clip, Concat, broadcasting
 * (forward, and the backward's reduction over the broadcast axes, one thread
 * per reduced element in the CPU's order of summation: bit for bit, not
 * fast; reduce.cuh's sum and mean use it too).  Built by kernels.cu.
 */
#ifndef AMPC_CUDA_ELEMWISE_CUH
#define AMPC_CUDA_ELEMWISE_CUH

#ifndef AMPC_CUDA_KERNELS_CUH
#error "include cuda/kernels.cuh before cuda/elemwise.cuh"
#endif

static inline __device__ float ampc_cu_bin_op(int op, float va, float vb)
{
    return op == AMPC_BIN_ADD ? va + vb : op == AMPC_BIN_SUB ? va - vb : va * vb;
}

__global__ void ampc_k_binary(int op, size_t n, int dt, ampc_dptr<const void> a,
                              ampc_dptr<const void> b, ampc_dptr<void> y, int vec)
{
    for (size_t q = ampc_cu_first(); q < AMPC_CU_VECS(n, vec); q += ampc_cu_stride()) {
        float va[AMPC_V8], vb[AMPC_V8];
        ampc_v8_load(a, q, dt, va);
        ampc_v8_load(b, q, dt, vb);
        for (int j = 0; j < AMPC_V8; j++)
            va[j] = ampc_cu_bin_op(op, va[j], vb[j]);
        ampc_v8_store(y, q, dt, va);
    }
    for (size_t i = AMPC_CU_TAIL(n, vec); i < n; i += ampc_cu_stride())
        ampc_cu_store(y, i, dt, ampc_cu_bin_op(op, ampc_cu_load(a, i, dt), ampc_cu_load(b, i, dt)));
}

/* dA = dy (add, sub) or dy*b (mul); dB = dy, -dy or dy*a; dA stored before
 * dB, so da == db accumulates as the CPU's two passes do */
__global__ void ampc_k_binary_backward(int op, size_t n, int dt, ampc_dptr<const void> dy,
                                       ampc_dptr<const void> a, ampc_dptr<const void> b,
                                       ampc_dptr<void> da, ampc_dptr<void> db, int acc_a,
                                       int acc_b)
{
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride()) {
        float g = ampc_cu_load(dy, i, dt);
        if (da)
            ampc_cu_store_acc(da, i, dt, op == AMPC_BIN_MUL ? g * ampc_cu_load(b, i, dt) : g,
                              acc_a);
        if (db) {
            float r = op == AMPC_BIN_ADD ? g : op == AMPC_BIN_SUB ? -g : g * ampc_cu_load(a, i, dt);
            ampc_cu_store_acc(db, i, dt, r, acc_b);
        }
    }
}

static inline AMPC_HD float ampc_cu_scalar_op(int op, float v, float s)
{
    switch (op) {
    case AMPC_SCALAR_PLUS: return v + s;
    case AMPC_SCALAR_MINUS: return v - s;
    case AMPC_SCALAR_RMINUS: return s - v;
    case AMPC_SCALAR_MUL: return v * s;
    case AMPC_SCALAR_DIV: return v / s;
    default: return s / v;
    }
}

__global__ void ampc_k_scalar(int op, size_t n, int dt, ampc_dptr<const void> x, float s,
                              ampc_dptr<void> y)
{
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride())
        ampc_cu_store(y, i, dt, ampc_cu_scalar_op(op, ampc_cu_load(x, i, dt), s));
}

/* rt_scalar_backward's expressions: rdiv is -dy*s / (x*x) */
__global__ void ampc_k_scalar_backward(int op, size_t n, int dt, ampc_dptr<const void> x, float s,
                                       ampc_dptr<const void> dy, ampc_dptr<void> dx, int acc)
{
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride()) {
        float g = ampc_cu_load(dy, i, dt), r;
        if (op == AMPC_SCALAR_PLUS || op == AMPC_SCALAR_MINUS) {
            r = g;
        } else if (op == AMPC_SCALAR_RMINUS) {
            r = -g;
        } else if (op == AMPC_SCALAR_MUL) {
            r = g * s;
        } else if (op == AMPC_SCALAR_DIV) {
            r = g / s;
        } else {
            float v = ampc_cu_load(x, i, dt);
            r = -g * s / (v * v);
        }
        ampc_cu_store_acc(dx, i, dt, r, acc);
    }
}

/* relu(a + b) with the sum rounded to dt first, where the unfused add
 * stores it (rt_add_relu_forward) */
__global__ void ampc_k_add_relu(size_t n, int dt, ampc_dptr<const void> a, ampc_dptr<const void> b,
                                ampc_dptr<void> y, int vec)
{
    for (size_t q = ampc_cu_first(); q < AMPC_CU_VECS(n, vec); q += ampc_cu_stride()) {
        float va[AMPC_V8], vb[AMPC_V8];
        ampc_v8_load(a, q, dt, va);
        ampc_v8_load(b, q, dt, vb);
        for (int j = 0; j < AMPC_V8; j++)
            va[j] = ampc_relu(ampc_v8_round(va[j] + vb[j], dt));
        ampc_v8_store(y, q, dt, va);
    }
    for (size_t i = AMPC_CU_TAIL(n, vec); i < n; i += ampc_cu_stride())
        ampc_cu_store(
            y, i, dt,
            ampc_relu(ampc_v8_round(ampc_cu_load(a, i, dt) + ampc_cu_load(b, i, dt), dt)));
}

AMPC_CU_API int ampc_cu_binary(AmpcStream s, int op, size_t n, int dt, const void *a,
                               const void *b, void *y)
{
    if (n == 0)
        return 0;
    int v = ampc_cu_vec(n, a, b, y);
    AMPC_LAUNCH(ampc_k_binary, ampc_cu_vgrid(n, v), AMPC_CU_THREADS, s, op, n, dt, a, b, y, v);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_binary_backward(AmpcStream s, int op, size_t n, int dt, const void *dy,
                                        const void *a, const void *b, void *da, void *db,
                                        int acc_a, int acc_b)
{
    if (n == 0 || (!da && !db))
        return 0;
    AMPC_LAUNCH(ampc_k_binary_backward, ampc_cu_grid(n), AMPC_CU_THREADS, s, op, n, dt, dy, a, b,
                da, db, acc_a, acc_b);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_scalar(AmpcStream s, int op, size_t n, int dt, const void *x,
                               float scalar, void *y)
{
    if (n == 0)
        return 0;
    AMPC_LAUNCH(ampc_k_scalar, ampc_cu_grid(n), AMPC_CU_THREADS, s, op, n, dt, x, scalar, y);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_scalar_backward(AmpcStream s, int op, size_t n, int dt, const void *x,
                                        float scalar, const void *dy, void *dx, int acc)
{
    if (n == 0)
        return 0;
    AMPC_LAUNCH(ampc_k_scalar_backward, ampc_cu_grid(n), AMPC_CU_THREADS, s, op, n, dt, x, scalar,
                dy, dx, acc);
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API int ampc_cu_add_relu(AmpcStream s, size_t n, int dt, const void *a, const void *b,
                                 void *y)
{
    if (n == 0)
        return 0;
    int v = ampc_cu_vec(n, a, b, y);
    AMPC_LAUNCH(ampc_k_add_relu, ampc_cu_vgrid(n, v), AMPC_CU_THREADS, s, n, dt, a, b, y, v);
    return AMPC_LAUNCH_ERROR();
}

/* grad 0: y = clip(x) (a NaN passes); grad 1: dx (+)= lo <= x <= hi ? dy : 0 */
__global__ void ampc_k_clip(int grad, size_t n, int dt, ampc_dptr<const void> x, float lo,
                            float hi, ampc_dptr<const void> dy, ampc_dptr<void> out, int acc)
{
    for (size_t i = ampc_cu_first(); i < n; i += ampc_cu_stride()) {
        float v = ampc_cu_load(x, i, dt);
        if (grad)
            ampc_cu_store_acc(out, i, dt, v > hi || v < lo ? 0.0f : ampc_cu_load(dy, i, dt), acc);
        else
            ampc_cu_store(out, i, dt, v < lo ? lo : v > hi ? hi : v);
    }
}

/* part [outer, seg] <-> its columns [start, start+seg) of whole [outer, row]: to_whole 1
 * copies the part in (Concat), 0 out (slice: the copy, or the fp32 sum when acc) */
__global__ void ampc_k_concat(int to_whole, size_t outer, size_t seg, size_t row, size_t start,
                              int dt, ampc_dptr<const void> src, ampc_dptr<void> dst, int acc)
{
    size_t n = outer * seg;
    for (size_t e = ampc_cu_first(); e < n; e += ampc_cu_stride()) {
        size_t w = e / seg * row + start + e % seg;
        if (to_whole)
            ampc_cu_copy(dst, w, src, e, dt);
        else if (acc)
            ampc_cu_store_acc(dst, e, dt, ampc_cu_load(src, w, dt), 1);
        else
            ampc_cu_copy(dst, e, src, w, dt);
    }
}

/* RtBcastDims with cpu.h's strides (0 along a size-1 axis) */
typedef struct {
    int rank;
    int64_t out[RT_MAX_RANK], a[RT_MAX_RANK], b[RT_MAX_RANK], sa[RT_MAX_RANK], sb[RT_MAX_RANK];
} AmpcBcast;

static inline AMPC_HD void ampc_cu_strides(const int64_t *shape, int r, int64_t *st)
{
    int64_t s = 1;
    for (int i = r - 1; i >= 0; i--) {
        st[i] = shape[i] == 1 ? 0 : s;
        s *= shape[i];
    }
}

static inline AMPC_HD size_t ampc_cu_numel(const int64_t *shape, int r)
{
    size_t n = 1;
    for (int i = 0; i < r; i++)
        n *= (size_t)shape[i];
    return n;
}

/* element e of out: its offsets in a and b */
static inline __device__ void ampc_cu_offsets(const AmpcBcast *g, size_t e, size_t *oa,
                                               size_t *ob)
{
    size_t a = 0, b = 0;
    for (int i = g->rank - 1; i >= 0; i--) {
        size_t k = e % (size_t)g->out[i];
        e /= (size_t)g->out[i];
        a += k * (size_t)g->sa[i];
        b += k * (size_t)g->sb[i];
    }
    *oa = a;
    *ob = b;
}

/* y = a op b */
__global__ void ampc_k_bcast_fwd(int op, AmpcBcast g, int dt, ampc_dptr<const void> a,
                                 ampc_dptr<const void> b, ampc_dptr<void> y)
{
    size_t n = ampc_cu_numel(g.out, g.rank);
    for (size_t e = ampc_cu_first(); e < n; e += ampc_cu_stride()) {
        size_t oa, ob;
        ampc_cu_offsets(&g, e, &oa, &ob);
        float va = ampc_cu_load(a, oa, dt), vb = ampc_cu_load(b, ob, dt);
        ampc_cu_store(y, e, dt, op == RT_BIN_ADD ? va + vb : op == RT_BIN_SUB ? va - vb : va * vb);
    }
}

/* An element of one side's gradient before reduction: sign*dy, or dy*other (mul). */
static inline __device__ float ampc_cu_bgrad(ampc_dptr<const void> dy, size_t e,
                                              ampc_dptr<const void> other, size_t oo, int dt,
                                              float sign)
{
    float gv = ampc_cu_load(dy, e, dt);
    return other ? gv * ampc_cu_load(other, oo, dt) : sign * gv;
}

/* The side of the broadcast backward with out's size: written per element. */
__global__ void ampc_k_bcast_bwd_full(AmpcBcast g, int side, int dt, ampc_dptr<const void> dy,
                                      ampc_dptr<const void> other, float sign, ampc_dptr<void> dst,
                                      int acc)
{
    size_t n = ampc_cu_numel(g.out, g.rank);
    for (size_t e = ampc_cu_first(); e < n; e += ampc_cu_stride()) {
        size_t oa, ob;
        ampc_cu_offsets(&g, e, &oa, &ob);
        ampc_cu_store_acc(dst, e, dt, ampc_cu_bgrad(dy, e, other, side ? oa : ob, dt, sign),
                          acc);
    }
}

/* A reduced side (a when side is 0, b when 1): each of its elements sums
 * in double, in the CPU's order, the items of its rows: the rows of out
 * (all axes but the last) where the side has size 1, in order, the last of
 * those axes fastest; a row's item is its one term where the side runs
 * along the row, else each 512-wide chunk of the row, summed first from 0
 * (elemwise.c's rt_broadcast_backward; reduce.c's sum with b all 1s).
 * dst = the sum times scale (1, or mean's count ratio), rounded once; acc
 * adds.  ampc_k_bcast_reduce: a thread an element, its items in order:
 * the CPU's bits.  ampc_k_bcast_reduce_block (an element with
 * AMPC_CU_BLOCK_MIN terms or more): a block an element; thread t adds the
 * items t, t + 256, ... in order, then ampc_cu_block_sum's fixed tree: an
 * order of the sizes alone, another than the CPU's (within rounding of it;
 * test_cuda_ops_emu's twin follows it bit for bit). */
#define AMPC_CU_CHUNK 512
#define AMPC_CU_BLOCK_MIN 2048

/* the reduced element idx's coordinates k (0 where it is reduced over) */
static inline __device__ void ampc_cu_reduced_at(const AmpcBcast *g, int side, size_t idx,
                                                 int64_t *k)
{
    const int64_t *xs = side ? g->b : g->a, *sx = side ? g->sb : g->sa;
    for (int i = g->rank - 1; i >= 0; i--) {
        k[i] = (int64_t)(idx % (size_t)xs[i]);
        idx /= (size_t)xs[i];
    }
    for (int i = 0; i < g->rank - 1; i++)
        if (!sx[i])
            k[i] = 0;
}

/* a row's items (1, or its chunks), and an element's rows */
static inline AMPC_HD size_t ampc_cu_row_items(const AmpcBcast *g, int side)
{
    size_t len = (size_t)g->out[g->rank - 1];
    return (side ? g->sb : g->sa)[g->rank - 1] ? 1 : (len + AMPC_CU_CHUNK - 1) / AMPC_CU_CHUNK;
}
static inline AMPC_HD size_t ampc_cu_rows(const AmpcBcast *g, int side)
{
    const int64_t *sx = side ? g->sb : g->sa;
    size_t rows = 1;
    for (int i = 0; i < g->rank - 1; i++)
        rows *= sx[i] ? 1 : (size_t)g->out[i];
    return rows;
}

/* item `item` of the row at coordinates k (the last one's ignored) */
static inline __device__ double ampc_cu_item(const AmpcBcast *g, int side, const int64_t *k,
                                             size_t item, int dt, ampc_dptr<const void> dy,
                                             ampc_dptr<const void> other, float sign)
{
    const int64_t *sx = side ? g->sb : g->sa, *so = side ? g->sa : g->sb;
    int r = g->rank;
    size_t len = (size_t)g->out[r - 1], row = 0, oo = 0;
    for (int i = 0; i < r - 1; i++) {
        row = row * (size_t)g->out[i] + (size_t)k[i];
        oo += (size_t)k[i] * (size_t)so[i];
    }
    if (sx[r - 1]) {
        size_t col = (size_t)k[r - 1];
        return (double)ampc_cu_bgrad(dy, row * len + col, other, oo + col * (size_t)so[r - 1], dt,
                                     sign);
    }
    size_t j = item * AMPC_CU_CHUNK, m = len - j < AMPC_CU_CHUNK ? len - j : AMPC_CU_CHUNK;
    double cs = 0.0;
    for (size_t i = 0; i < m; i++)
        cs += (double)ampc_cu_bgrad(dy, row * len + j + i, other, oo + (j + i) * (size_t)so[r - 1],
                                    dt, sign);
    return cs;
}

/* k's free coordinates (where the side has size 1) of the element's row q */
static inline __device__ void ampc_cu_row_at(const AmpcBcast *g, int side, size_t q, int64_t *k)
{
    const int64_t *sx = side ? g->sb : g->sa;
    for (int i = g->rank - 2; i >= 0; i--)
        if (!sx[i]) {
            k[i] = (int64_t)(q % (size_t)g->out[i]);
            q /= (size_t)g->out[i];
        }
}

__global__ void ampc_k_bcast_reduce(AmpcBcast g, int side, int dt, ampc_dptr<const void> dy,
                                    ampc_dptr<const void> other, float sign, double scale,
                                    ampc_dptr<void> dst, int acc)
{
    size_t nx = ampc_cu_numel(side ? g.b : g.a, g.rank), per = ampc_cu_row_items(&g, side);
    size_t rows = ampc_cu_rows(&g, side);
    for (size_t idx = ampc_cu_first(); idx < nx; idx += ampc_cu_stride()) {
        int64_t k[RT_MAX_RANK];
        ampc_cu_reduced_at(&g, side, idx, k);
        double s = 0.0;
        for (size_t q = 0; q < rows; q++) {
            ampc_cu_row_at(&g, side, q, k);
            for (size_t c = 0; c < per; c++)
                s += ampc_cu_item(&g, side, k, c, dt, dy, other, sign);
        }
        ampc_cu_store_acc(dst, idx, dt, (float)(s * scale), acc);
    }
}

__global__ void ampc_k_bcast_reduce_block(AmpcBcast g, int side, int dt, ampc_dptr<const void> dy,
                                          ampc_dptr<const void> other, float sign, double scale,
                                          ampc_dptr<void> dst, int acc)
{
    AMPC_SHARED(double, part, AMPC_CU_WARPS);
    size_t nx = ampc_cu_numel(side ? g.b : g.a, g.rank), per = ampc_cu_row_items(&g, side);
    size_t items = ampc_cu_rows(&g, side) * per;
    for (size_t idx = blockIdx.x; idx < nx; idx += gridDim.x) {
        int64_t k[RT_MAX_RANK];
        ampc_cu_reduced_at(&g, side, idx, k);
        double s = 0.0;
        for (size_t j = threadIdx.x; j < items; j += blockDim.x) {
            ampc_cu_row_at(&g, side, j / per, k);
            s += ampc_cu_item(&g, side, k, j % per, dt, dy, other, sign);
        }
        s = ampc_cu_block_sum<double>(s, part);
        if (threadIdx.x == 0)
            ampc_cu_store_acc(dst, idx, dt, (float)(s * scale), acc);
    }
}

/* A reduced side's launch: a block an element where each sums
 * AMPC_CU_BLOCK_MIN terms or more, else a thread an element */
static int ampc_cu_bcast_reduce(AmpcStream s, const AmpcBcast *g, int side, int dt, const void *dy,
                                const void *other, float sign, double scale, void *dst, int acc)
{
    size_t nx = ampc_cu_numel(side ? g->b : g->a, g->rank);
    size_t terms = ampc_cu_rows(g, side) *
                   ((side ? g->sb : g->sa)[g->rank - 1] ? 1 : (size_t)g->out[g->rank - 1]);
    if (nx == 0)
        return 0;
    if (terms >= AMPC_CU_BLOCK_MIN) {
        unsigned grid = nx < AMPC_CU_GRID_CAP ? (unsigned)nx : (unsigned)AMPC_CU_GRID_CAP;
        AMPC_LAUNCH(ampc_k_bcast_reduce_block, grid, AMPC_CU_THREADS, s, *g, side, dt, dy, other,
                    sign, scale, dst, acc);
    } else {
        AMPC_LAUNCH(ampc_k_bcast_reduce, ampc_cu_grid(nx), AMPC_CU_THREADS, s, *g, side, dt, dy,
                    other, sign, scale, dst, acc);
    }
    return AMPC_LAUNCH_ERROR();
}

AMPC_CU_API void rt_cuda_elemwise_forward(RtCudaCtx *cx, RtBinOp op, size_t n, RtDType dt, const void *a,
                                          const void *b, void *y)
{
    AMPC_CU_RUN(ampc_cu_binary(cx->stream, (int)op, n, (int)dt, a, b, y));
}

AMPC_CU_API void rt_cuda_add_relu_forward(RtCudaCtx *cx, size_t n, RtDType dt, const void *a, const void *b,
                                          void *y)
{
    AMPC_CU_RUN(ampc_cu_add_relu(cx->stream, n, (int)dt, a, b, y));
}

AMPC_CU_API void rt_cuda_elemwise_backward(RtCudaCtx *cx, RtBinOp op, size_t n, RtDType dt, const void *dy,
                                           const void *a, const void *b, void *da, void *db,
                                           bool acc_a, bool acc_b)
{
    AMPC_CU_RUN(ampc_cu_binary_backward(cx->stream, (int)op, n, (int)dt, dy, a, b, da, db,
                                         acc_a, acc_b));
}

static AmpcBcast ampc_cu_bcast(const RtBcastDims *d)
{
    AmpcBcast g;
    memset(&g, 0, sizeof g);
    g.rank = d->rank;
    for (int i = 0; i < d->rank; i++) {
        g.out[i] = d->out[i];
        g.a[i] = d->a[i];
        g.b[i] = d->b[i];
    }
    ampc_cu_strides(g.a, g.rank, g.sa);
    ampc_cu_strides(g.b, g.rank, g.sb);
    return g;
}

/* no scratch: each reduced element is summed by its own thread or block */
AMPC_CU_API size_t rt_cuda_broadcast_workspace_bytes(RtCudaCtx *cx, const RtBcastDims *d, RtDType dt,
                                                     RtPass pass)
{
    (void)cx, (void)d, (void)dt, (void)pass;
    return 0;
}

AMPC_CU_API void rt_cuda_broadcast_forward(RtCudaCtx *cx, RtBinOp op, const RtBcastDims *d, RtDType dt,
                                           const void *a, const void *b, void *y)
{
    AmpcBcast g = ampc_cu_bcast(d);
    size_t n = ampc_cu_numel(g.out, g.rank);
    AMPC_CU_GO(ampc_k_bcast_fwd, n, (int)op, g, (int)dt, a, b, y);
}

AMPC_CU_API void rt_cuda_broadcast_backward(RtCudaCtx *cx, RtBinOp op, const RtBcastDims *d, RtDType dt,
                                            const void *dy, const void *a, const void *b,
                                            void *da, void *db, bool acc_a, bool acc_b, void *ws)
{
    AmpcBcast g = ampc_cu_bcast(d);
    size_t no = ampc_cu_numel(g.out, g.rank);
    (void)ws;
    for (int side = 0; side < 2; side++) {
        void *dst = side ? db : da;
        if (!dst)
            continue;
        const void *other = op == RT_BIN_MUL ? (side ? a : b) : NULL;
        float sign = side && op == RT_BIN_SUB ? -1.0f : 1.0f;
        int acc = side ? acc_b : acc_a;
        size_t nx = ampc_cu_numel(side ? g.b : g.a, g.rank);
        if (nx == no)
            AMPC_CU_GO(ampc_k_bcast_bwd_full, no, g, side, (int)dt, dy, other, sign, dst, acc);
        else
            AMPC_CU_RUN(ampc_cu_bcast_reduce(cx->stream, &g, side, (int)dt, dy, other, sign, 1.0,
                                             dst, acc));
    }
}

AMPC_CU_API void rt_cuda_scalar_forward(RtCudaCtx *cx, RtScalarOp op, size_t n, RtDType dt, const void *x,
                                        float s, void *y)
{
    AMPC_CU_RUN(ampc_cu_scalar(cx->stream, (int)op, n, (int)dt, x, s, y));
}

AMPC_CU_API void rt_cuda_scalar_backward(RtCudaCtx *cx, RtScalarOp op, size_t n, RtDType dt, const void *x,
                                         float s, const void *dy, void *dx, bool accumulate)
{
    AMPC_CU_RUN(ampc_cu_scalar_backward(cx->stream, (int)op, n, (int)dt, x, s, dy, dx,
                                         accumulate));
}

AMPC_CU_API void rt_cuda_clip_forward(RtCudaCtx *cx, size_t n, RtDType dt, const void *x, float lo, float hi,
                                      void *y)
{
    AMPC_CU_GO(ampc_k_clip, n, 0, n, (int)dt, x, lo, hi, (const void *)NULL, y, 0);
}

AMPC_CU_API void rt_cuda_clip_backward(RtCudaCtx *cx, size_t n, RtDType dt, const void *x, float lo, float hi,
                                       const void *dy, void *dx, bool accumulate)
{
    AMPC_CU_GO(ampc_k_clip, n, 1, n, (int)dt, x, lo, hi, dy, dx, (int)accumulate);
}

/* one launch per input: x is a host array of device pointers */
AMPC_CU_API void rt_cuda_concat_forward(RtCudaCtx *cx, int nin, const void *const *x, const int64_t *len,
                                        int64_t outer, int64_t inner, RtDType dt, void *y)
{
    size_t row = 0, start = 0;
    for (int i = 0; i < nin; i++)
        row += (size_t)len[i] * (size_t)inner;
    for (int i = 0; i < nin; i++) {
        size_t seg = (size_t)len[i] * (size_t)inner;
        AMPC_CU_GO(ampc_k_concat, (size_t)outer * seg, 1, (size_t)outer, seg, row, start,
                    (int)dt, x[i], y, 0);
        start += seg;
    }
}

AMPC_CU_API void rt_cuda_concat_backward(RtCudaCtx *cx, int nin, const void *dy, const int64_t *len,
                                         int64_t outer, int64_t inner, RtDType dt,
                                         void *const *dx, const bool *accumulate)
{
    size_t row = 0, start = 0;
    for (int i = 0; i < nin; i++)
        row += (size_t)len[i] * (size_t)inner;
    for (int i = 0; i < nin; i++) {
        size_t seg = (size_t)len[i] * (size_t)inner;
        if (dx[i])
            AMPC_CU_GO(ampc_k_concat, (size_t)outer * seg, 0, (size_t)outer, seg, row, start,
                        (int)dt, dy, dx[i], accumulate && accumulate[i]);
        start += seg;
    }
}

#endif /* AMPC_CUDA_ELEMWISE_CUH */
