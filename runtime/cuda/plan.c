/* plan.c - the host-side logic of the cuDNN and cuBLASLt calls (plan.h
 * says what and why).  No CUDA header: unit-tested on any machine. */
#include "cuda/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

AmpcLayout ampc_conv_layout(RtDType dt) { return dt == RT_F32 ? AMPC_NCHW : AMPC_NHWC; }

AmpcLayout ampc_dims_layout(RtLayout l) { return l == RT_LAYOUT_NHWC ? AMPC_NHWC : AMPC_NCHW; }

/* Tensor-core NHWC kernels want the channel count a multiple of 8; cuDNN
 * also has first-layer kernels for exactly 4 (MLPerf's ResNet pads its RGB
 * input to 4).  Zero channels change no output and no other gradient. */
int ampc_conv_padded_c(const RtConvDims *d, AmpcLayout lay)
{
    if (lay != AMPC_NHWC || d->groups != 1)
        return d->c;
    if (d->c <= 4)
        return 4;
    if (d->c < 8)
        return 8;
    return d->c;
}

/* a *= b, false on int64 overflow (every factor here is positive) */
static bool mul_ok(int64_t *a, int64_t b)
{
    if (b != 0 && *a > INT64_MAX / b)
        return false;
    *a *= b;
    return true;
}

/* dims (n, c, s0, s1[, s2]) with c innermost (NHWC) or after n (NCHW) */
static bool fill_desc(AmpcTensorDesc *t, int64_t n, int64_t c, int nsp, const int64_t *sp,
                      AmpcLayout lay)
{
    t->nd = 2 + nsp;
    t->dims[0] = n;
    t->dims[1] = c;
    for (int i = 0; i < nsp; i++)
        t->dims[2 + i] = sp[i];
    int64_t s = 1;
    if (lay == AMPC_NCHW) {
        for (int i = t->nd - 1; i >= 0; i--) {
            t->strides[i] = s;
            if (!mul_ok(&s, t->dims[i]))
                return false;
        }
        return true;
    }
    t->strides[1] = 1;
    s = c;
    for (int i = t->nd - 1; i >= 2; i--) {
        t->strides[i] = s;
        if (!mul_ok(&s, t->dims[i]))
            return false;
    }
    t->strides[0] = s;
    return mul_ok(&s, n);
}

/* bytes of rows x cp elements, rounded up to 256 (cuDNN's alignment), 0
 * on overflow */
size_t ampc_padded_bytes(int64_t rows, int cp, RtDType dt)
{
    int64_t b = rows;
    if (rows <= 0 || cp <= 0 || !mul_ok(&b, cp) || !mul_ok(&b, (int64_t)rt_dtype_size(dt)) ||
        b > INT64_MAX - 255)
        return 0;
    return (size_t)((b + 255) / 256 * 256);
}

bool ampc_conv_geom(const RtConvDims *din, RtDType dt, RtPass pass, AmpcConvGeom *g, char *err,
                    size_t errlen)
{
    RtConvDims d = *din;
    (void)pass; /* every pass pads the same two tensors (plan.h) */
    memset(g, 0, sizeof *g);
    if (!rt_conv_dims_init(&d)) {
        snprintf(err, errlen, "convolution: invalid dims (n %d, c %d, k %d, groups %d, %d-D)",
                 d.n, d.c, d.k, d.groups, d.nsp);
        return false;
    }
    g->layout = ampc_dims_layout(d.layout);
    g->c = ampc_conv_padded_c(&d, g->layout);
    /* cuDNN convolves 2-D and 3-D: a 1-D convolution gets a leading unit axis */
    int lead = d.nsp == 1 ? 1 : 0;
    g->nsp = d.nsp + lead;
    int64_t in[3], out[3], ker[3];
    for (int i = 0; i < g->nsp; i++) {
        int s = i - lead;
        bool unit = s < 0;
        in[i] = unit ? 1 : d.in[s];
        out[i] = unit ? 1 : d.out[s];
        ker[i] = unit ? 1 : d.kernel[s];
        g->pad[i] = unit ? 0 : d.pad[s];
        g->stride[i] = unit ? 1 : d.stride[s];
        g->dilate[i] = unit ? 1 : d.dilate[s];
    }
    int64_t cg = g->c / d.groups;
    if (!fill_desc(&g->x, d.n, g->c, g->nsp, in, g->layout) ||
        !fill_desc(&g->w, d.k, cg, g->nsp, ker, g->layout) ||
        !fill_desc(&g->y, d.n, d.k, g->nsp, out, g->layout) ||
        !fill_desc(&g->stats, 1, d.k, g->nsp, (int64_t[3]){1, 1, 1}, g->layout)) {
        snprintf(err, errlen, "convolution: a tensor of more than 2^63 elements");
        return false;
    }
    if (g->c != d.c) {
        int64_t xrows = d.n, wrows = d.k;
        for (int i = 0; i < g->nsp; i++)
            if (!mul_ok(&xrows, in[i]) || !mul_ok(&wrows, ker[i]))
                xrows = -1;
        size_t xb = ampc_padded_bytes(xrows, g->c, dt), wb = ampc_padded_bytes(wrows, g->c, dt);
        if (!xb || !wb || xb > SIZE_MAX - wb) {
            snprintf(err, errlen, "convolution: the channel-padded copies overflow size_t");
            return false;
        }
        g->pad_bytes = xb + wb;
    }
    return true;
}

bool ampc_desc_check(const AmpcTensorDesc *t, AmpcLayout lay, char *err, size_t errlen)
{
    AmpcTensorDesc want;
    int64_t sp[3] = {1, 1, 1};
    bool ok = t->nd >= 3 && t->nd <= AMPC_DESC_MAX_DIMS;
    for (int i = 2; ok && i < t->nd; i++)
        sp[i - 2] = t->dims[i];
    for (int i = 0; ok && i < t->nd; i++)
        ok = t->dims[i] >= 1;
    ok = ok && fill_desc(&want, t->dims[0], t->dims[1], t->nd - 2, sp, lay);
    for (int i = 0; ok && i < t->nd; i++)
        ok = t->strides[i] == want.strides[i];
    if (!ok) {
        int at = snprintf(err, errlen, "a %d-D tensor whose strides (", t->nd);
        for (int i = 0; i < t->nd && i < AMPC_DESC_MAX_DIMS && at > 0 && (size_t)at < errlen; i++)
            at += snprintf(err + at, errlen - (size_t)at, "%s%lld", i ? "," : "",
                           (long long)t->strides[i]);
        if (at > 0 && (size_t)at < errlen)
            snprintf(err + at, errlen - (size_t)at, ") are not the packed %s strides of its dims",
                     lay == AMPC_NHWC ? "NHWC" : "NCHW");
    }
    return ok;
}

bool ampc_stats_check(const AmpcConvGeom *g, char *err, size_t errlen)
{
    const AmpcTensorDesc *t = &g->stats;
    bool ok = t->nd == g->y.nd && t->dims[0] == 1 && t->dims[1] == g->y.dims[1];
    for (int i = 2; ok && i < t->nd; i++)
        ok = t->dims[i] == 1;
    if (!ok) {
        snprintf(err, errlen,
                 "dims [%lld,%lld,...] (%d-D) for a %d-D y of %lld channels: not "
                 "one sum per channel",
                 (long long)t->dims[0], (long long)t->dims[1], t->nd, g->y.nd,
                 (long long)g->y.dims[1]);
        return false;
    }
    return ampc_desc_check(t, g->layout, err, errlen);
}

/* ---- keys and the cache ------------------------------------------------------ */

void ampc_conv_key(const RtConvDims *d, RtDType dt, RtPass pass, AmpcPlanKey *k)
{
    memset(k, 0, sizeof *k);
    int64_t *v = k->v;
    int i = 0;
    v[i++] = 1; /* op: convolution */
    v[i++] = d->n, v[i++] = d->c, v[i++] = d->k, v[i++] = d->groups, v[i++] = d->nsp;
    /* only the used axes: rt_conv_dims_init normalises the rest */
    for (int s = 0; s < RT_MAX_SPATIAL; s++) {
        bool used = s < d->nsp;
        v[i++] = used ? d->in[s] : 0;
        v[i++] = used ? d->kernel[s] : 0;
        v[i++] = used ? ((int64_t)d->stride[s] << 32 | (uint32_t)d->pad[s]) : 0;
        v[i++] = used ? d->dilate[s] : 0;
    }
    v[i++] = dt;
    v[i++] = ampc_dims_layout(d->layout);
    v[i++] = pass;
}

void ampc_fc_key(const RtFcDims *d, RtDType dt, RtPass pass, AmpcPlanKey *k)
{
    memset(k, 0, sizeof *k);
    k->v[0] = 2; /* op: FullyConnected */
    k->v[1] = d->n, k->v[2] = d->in, k->v[3] = d->hidden;
    k->v[4] = dt, k->v[5] = pass;
}

bool ampc_key_equal(const AmpcPlanKey *a, const AmpcPlanKey *b)
{
    return memcmp(a->v, b->v, sizeof a->v) == 0;
}

uint64_t ampc_key_hash(const AmpcPlanKey *k) /* FNV-1a over the values */
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < AMPC_KEY_LEN; i++) {
        uint64_t x = (uint64_t)k->v[i];
        for (int b = 0; b < 8; b++) {
            h ^= (x >> (8 * b)) & 0xff;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}

struct AmpcPlanEntry {
    AmpcPlanKey key;
    void *value;
    AmpcPlanEntry *next;
};

void *ampc_cache_get(const AmpcPlanCache *c, const AmpcPlanKey *k)
{
    if (!c->nbucket)
        return NULL;
    for (AmpcPlanEntry *e = c->bucket[ampc_key_hash(k) % c->nbucket]; e; e = e->next)
        if (ampc_key_equal(&e->key, k))
            return e->value;
    return NULL;
}

static bool grow(AmpcPlanCache *c)
{
    size_t nb = c->nbucket ? c->nbucket * 2 : 16;
    AmpcPlanEntry **b = calloc(nb, sizeof *b);
    if (!b)
        return false;
    for (size_t i = 0; i < c->nbucket; i++)
        for (AmpcPlanEntry *e = c->bucket[i], *next; e; e = next) {
            next = e->next;
            size_t h = ampc_key_hash(&e->key) % nb;
            e->next = b[h];
            b[h] = e;
        }
    free(c->bucket);
    c->bucket = b;
    c->nbucket = nb;
    return true;
}

bool ampc_cache_put(AmpcPlanCache *c, const AmpcPlanKey *k, void *value)
{
    if (c->count >= c->nbucket && !grow(c))
        return false;
    AmpcPlanEntry *e = malloc(sizeof *e);
    if (!e)
        return false;
    e->key = *k;
    e->value = value;
    size_t h = ampc_key_hash(k) % c->nbucket;
    e->next = c->bucket[h];
    c->bucket[h] = e;
    c->count++;
    return true;
}

void ampc_cache_free(AmpcPlanCache *c, void (*drop)(void *ctx, void *value), void *ctx)
{
    for (size_t i = 0; i < c->nbucket; i++)
        for (AmpcPlanEntry *e = c->bucket[i], *next; e; e = next) {
            next = e->next;
            if (drop)
                drop(ctx, e->value);
            free(e);
        }
    free(c->bucket);
    memset(c, 0, sizeof *c);
}

/* ---- FullyConnected's GEMMs --------------------------------------------------- */

/* A row-major [r, c] tensor is a column-major c x r matrix with ld c, so
 * each row-major product P = L R becomes P^T = R^T L^T:
 *   forward    y [n,h]  = x [n,in] w^T        y^T  = w (T) . x^T      m h,  n n, k in
 *   backward   dx[n,in] = dy[n,h] w [h,in]    dx^T = w^T . dy^T       m in, n n, k h
 *   weight     dw[h,in] = dy^T x              dw^T = x^T . dy (T)     m in, n h, k n */
bool ampc_fc_gemm(const RtFcDims *d, RtPass pass, AmpcGemm *g, char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    if (d->n <= 0 || d->in <= 0 || d->hidden <= 0) {
        snprintf(err, errlen, "FullyConnected: invalid dims (n %d, in %d, hidden %d)", d->n,
                 d->in, d->hidden);
        return false;
    }
    int64_t n = d->n, in = d->in, h = d->hidden;
    switch (pass) {
    case RT_PASS_FORWARD:
        *g = (AmpcGemm){h, n, in, true, false, in, h, in, in, n, in, h, AMPC_OP_W, AMPC_OP_X};
        break;
    case RT_PASS_BACKWARD:
        *g = (AmpcGemm){in, n, h, false, false, in, h, in, h, n, h, in, AMPC_OP_W, AMPC_OP_DY};
        break;
    case RT_PASS_BACKWARD_WEIGHT:
        *g = (AmpcGemm){in, h, n, false, true, in, n, in, h, n, h, in, AMPC_OP_X, AMPC_OP_DY};
        break;
    default:
        snprintf(err, errlen, "FullyConnected: unknown pass %d", (int)pass);
        return false;
    }
    return true;
}

bool ampc_gemm_check(const AmpcGemm *g, char *err, size_t errlen)
{
    int64_t ar = g->transa ? g->k : g->m, ac = g->transa ? g->m : g->k;
    int64_t br = g->transb ? g->n : g->k, bc = g->transb ? g->k : g->n;
    const char *bad = NULL;
    if (g->m < 1 || g->n < 1 || g->k < 1)
        bad = "a size below 1";
    else if (g->rowsa != ar || g->colsa != ac)
        bad = "A is not m x k under its transpose";
    else if (g->rowsb != br || g->colsb != bc)
        bad = "B is not k x n under its transpose";
    else if (g->lda < g->rowsa || g->ldb < g->rowsb || g->ldd < g->m)
        bad = "a leading dimension below its rows";
    else if (g->lda > INT32_MAX || g->ldb > INT32_MAX || g->ldd > INT32_MAX)
        bad = "a leading dimension beyond int32";
    if (bad)
        snprintf(err, errlen, "GEMM m %lld n %lld k %lld (A %lldx%lld ld %lld%s, B %lldx%lld ld "
                 "%lld%s, D ld %lld): %s", (long long)g->m, (long long)g->n, (long long)g->k,
                 (long long)g->rowsa, (long long)g->colsa, (long long)g->lda,
                 g->transa ? " T" : "", (long long)g->rowsb, (long long)g->colsb,
                 (long long)g->ldb, g->transb ? " T" : "", (long long)g->ldd, bad);
    return !bad;
}

/* ---- Pooling ------------------------------------------------------------------------- */

bool ampc_pool_geom(const RtPoolDims *din, AmpcLayout lay, AmpcPoolGeom *g, char *err,
                    size_t errlen)
{
    RtPoolDims d = *din;
    memset(g, 0, sizeof *g);
    if (!rt_pool_dims_init(&d)) {
        snprintf(err, errlen, "pooling: invalid dims (n %d, c %d, %d-D)", d.n, d.c, d.nsp);
        return false;
    }
    int64_t in = (int64_t)d.n * d.c, out = in;
    int off = 3 - d.nsp;
    for (int a = 0; a < 3; a++) {
        bool real = a >= off;
        g->IS[a] = real ? d.in[a - off] : 1;
        g->K[a] = real ? d.kernel[a - off] : 1;
        g->S[a] = real ? d.stride[a - off] : 1;
        g->P[a] = real ? d.pad[a - off] : 0;
        g->O[a] = real ? d.out[a - off] : 1;
        if (!mul_ok(&in, g->IS[a]) || !mul_ok(&out, g->O[a]) || in > INT64_MAX / 8 ||
            out > INT64_MAX / 8) {
            snprintf(err, errlen, "pooling: a tensor of more than 2^60 elements");
            return false;
        }
    }
    g->n = d.n, g->c = d.c;
    g->type = (int)d.type;
    g->count_include_pad = d.count_include_pad;
    g->nhwc = lay == AMPC_NHWC;
    return true;
}

/* ---- engine policy ---------------------------------------------------------------------- */

unsigned ampc_engine_refusal(unsigned notes, RtDType dt, const AmpcEnginePolicy *p)
{
    unsigned refused = AMPC_NOTE_DOWN_CONVERT;
    if (!p->nondeterministic)
        refused |= AMPC_NOTE_NONDETERMINISTIC;
    if (dt == RT_F32) {
        if (p->fp32 == AMPC_FP32_EXACT)
            refused |= AMPC_NOTE_TENSOR_CORE;
        if (p->fp32 != AMPC_FP32_FAST)
            refused |= AMPC_NOTE_FFT | AMPC_NOTE_WINOGRAD;
    }
    if (!(dt == RT_F32 && p->fp32 == AMPC_FP32_FAST))
        refused |= AMPC_NOTE_REDUCED_REDUCTION;
    return notes & refused;
}

const char *ampc_note_names(unsigned notes, char *buf, size_t len)
{
    static const char *const name[] = {"tensor_core", "down_convert", "reduced_precision_reduction",
                                       "fft", "nondeterministic", "winograd", "strict_nan"};
    size_t at = 0;
    if (len)
        buf[0] = 0;
    for (unsigned b = 0; b < sizeof name / sizeof *name; b++) {
        if (!(notes & (1u << b)))
            continue;
        int w = snprintf(buf + at, at < len ? len - at : 0, "%s%s", at ? "," : "", name[b]);
        at += w > 0 ? (size_t)w : 0;
    }
    if (!at && len)
        snprintf(buf, len, "none");
    return buf;
}

static const char *const fp32_mode_name[] = {"exact", "tf32", "fast"};

bool ampc_fp32_mode_parse(const char *s, AmpcFp32Mode *mode)
{
    for (int m = 0; m < 3; m++)
        if (strcmp(s, fp32_mode_name[m]) == 0) {
            *mode = (AmpcFp32Mode)m;
            return true;
        }
    return false;
}

const char *ampc_fp32_mode_name(AmpcFp32Mode mode)
{
    return (unsigned)mode < 3 ? fp32_mode_name[mode] : "?";
}
