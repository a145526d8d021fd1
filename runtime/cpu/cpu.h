/* cpu.h - helpers shared by the CPU kernels (not part of the runtime API).
 *
 * Elementwise kernels walk their tensors in chunks of RT_CHUNK elements: a
 * 16-bit chunk is widened into a stack buffer, computed on in fp32 and
 * rounded back once; fp32 chunks are used in place (no copies), which is the
 * fp32 fast path.  Kernels with scratch larger than a chunk carve it out of
 * the caller's workspace with ws_take, in the same order as their
 * *_workspace_bytes query adds it up with ws_add.
 */
#ifndef AMPC_RT_CPU_H
#define AMPC_RT_CPU_H

#include <assert.h>
#include <string.h>

#include "device.h" /* RtOptConfig, for optim.c */
#include "kernels/half.h"
#include "kernels/optim.h" /* AmpcOptParam, for optim_simd.c */
#include "rt.h"

#define RT_CHUNK 512

/* ---- the machine (parallel.c) ----
 * rt__simd(): the vector ISA the kernels may use, detected once (gcc/clang
 * __builtin_cpu_supports, which also checks that the OS saves the registers)
 * and capped by the environment variable AMPC_RT_SIMD=0|1|2, so the tests
 * can run every path on one machine.  Kernels with a SIMD path compile it
 * with target attributes, so the runtime itself needs no -march flag. */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define RT_HAVE_X86_SIMD 1
#else
#define RT_HAVE_X86_SIMD 0
#endif
enum { RT_SIMD_NONE, RT_SIMD_AVX2, RT_SIMD_AVX512 };
int rt__simd(void);

/* Threads the kernels may use: OpenBLAS's thread count (--threads). */
#define RT_MAX_THREADS 64
int rt__threads(void);
/* Runs fn(arg, tid, nt) on the caller (tid 0) and on the pool threads (tid
 * in [1, nt)) that join in time, and returns when all that started are
 * done.  fn must pull its work from a shared counter until none is left
 * (tid only picks per-thread scratch): a pool thread may not run it at all.
 * Nested calls run serially. */
void rt__parallel(int nt, void (*fn)(void *arg, int tid, int nt), void *arg);
/* [lo, hi): part tid of nt of [0, n), contiguous and nearly equal. */
void rt__split(size_t n, int tid, int nt, size_t *lo, size_t *hi);
/* fn(ctx, lo, hi) over [0, n) cut into one range per thread, the cuts on
 * multiples of RT_CHUNK (so chunk walks see the same chunks); serial below
 * RT_PAR_MIN elements per thread. */
#define RT_PAR_MIN 16384
void rt__parallel_range(size_t n, void (*fn)(void *ctx, size_t lo, size_t hi), void *ctx);
/* fn(ctx, lo, hi) over [0, n) items of at least `grain` elements of work
 * each: one contiguous range per thread. */
void rt__parallel_items(size_t n, size_t work_per_item,
                        void (*fn)(void *ctx, size_t lo, size_t hi), void *ctx);

static inline size_t rt__chunk_len(size_t n, size_t off)
{
    return n - off < RT_CHUNK ? n - off : RT_CHUNK;
}

/* for (off, m) over [0, n) in chunks: off the chunk's start, m its length */
#define RT_CHUNKS(n, off, m) \
    for (size_t off = 0, m; off < (n) && (m = rt__chunk_len((n), off), 1); off += RT_CHUNK)
/* the same over [lo, hi) */
#define RT_CHUNKS_IN(lo, hi, off, m) \
    for (size_t off = (lo), m; off < (hi) && (m = rt__chunk_len((hi), off), 1); off += RT_CHUNK)

/* ---- portable 4-lane vectors (gcc/clang vector extensions) ----
 * gcc 12 at -O2 does not vectorise a loop whose trip count is unknown, so
 * the hot fp32 loops are written with these: SSE2 on any x86-64, NEON on
 * arm64, no target flags.  Lane by lane they compute exactly what the
 * scalar code does (same operations, same order); only long sums are
 * reassociated (in double). */
typedef float rt_v4 __attribute__((vector_size(16)));
typedef int32_t rt_v4i __attribute__((vector_size(16)));
typedef double rt_v4d __attribute__((vector_size(32)));
static inline rt_v4 rt__ld4(const float *p)
{
    rt_v4 v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void rt__st4(float *p, rt_v4 v) { memcpy(p, &v, sizeof v); }
static inline rt_v4 rt__splat4(float x) { return (rt_v4){x, x, x, x}; }
/* lanes where m is set keep x, the others become +0 */
static inline rt_v4 rt__and4(rt_v4 x, rt_v4i m) { return (rt_v4)((rt_v4i)x & m); }

/* Bulk 16-bit <-> fp32 conversion (dtype.c): half.h's bits, SIMD where the
 * machine has it.  No overlap between d and s. */
void rt__h2f(float *d, const uint16_t *s, size_t n);
void rt__f2h(uint16_t *d, const float *s, size_t n);
void rt__b2f(float *d, const uint16_t *s, size_t n);
void rt__f2b(uint16_t *d, const float *s, size_t n);

/* A read view of src[off, off+n) as fp32: src itself when fp32, else the
 * widened copy in buf (n <= RT_CHUNK). */
static inline const float *rt__view(const void *src, size_t off, size_t n, RtDType dt, float *buf)
{
    switch (dt) {
    case RT_F32: return (const float *)src + off;
    case RT_F16: rt__h2f(buf, (const ampc_half *)src + off, n); return buf;
    case RT_BF16: rt__b2f(buf, (const ampc_bf16 *)src + off, n); return buf;
    }
    return buf;
}

/* Where to compute dst[off, off+n): dst itself when fp32 and overwriting,
 * else buf; rt__commit then stores (and adds) buf into dst. */
static inline float *rt__out(void *dst, size_t off, RtDType dt, bool acc, float *buf)
{
    return dt == RT_F32 && !acc ? (float *)dst + off : buf;
}

static inline void rt__commit(void *dst, size_t off, const float *val, size_t n, RtDType dt,
                              bool acc)
{
    switch (dt) {
    case RT_F32: {
        float *d = (float *)dst + off;
        if (acc) {
            size_t i = 0;
            for (; i + 4 <= n; i += 4)
                rt__st4(d + i, rt__ld4(d + i) + rt__ld4(val + i));
            for (; i < n; i++)
                d[i] += val[i];
        } else if (d != val) {
            memcpy(d, val, n * sizeof *d);
        }
        return;
    }
    case RT_F16:
    case RT_BF16: {
        uint16_t *d = (uint16_t *)dst + off;
        if (!acc) {
            if (dt == RT_F16)
                rt__f2h(d, val, n);
            else
                rt__f2b(d, val, n);
            return;
        }
        /* d = d + val, in fp32, rounded once */
        float t[RT_CHUNK];
        for (size_t o = 0; o < n; o += RT_CHUNK) {
            size_t m = n - o < RT_CHUNK ? n - o : RT_CHUNK;
            if (dt == RT_F16)
                rt__h2f(t, d + o, m);
            else
                rt__b2f(t, d + o, m);
            size_t i = 0;
            for (; i + 4 <= m; i += 4)
                rt__st4(t + i, rt__ld4(t + i) + rt__ld4(val + o + i));
            for (; i < m; i++)
                t[i] += val[o + i];
            if (dt == RT_F16)
                rt__f2h(d + o, t, m);
            else
                rt__f2b(d + o, t, m);
        }
        return;
    }
    }
}

/* v[0, n) rounded to dt and widened back, in place (n <= RT_CHUNK): the
 * value a fused kernel computes with where the unfused ops would store it
 * in dt and read it back (nothing to do in fp32). */
static inline void rt__round_through(float *v, size_t n, RtDType dt)
{
    uint16_t t[RT_CHUNK];
    if (dt == RT_F16) {
        rt__f2h(t, v, n);
        rt__h2f(v, t, n);
    } else if (dt == RT_BF16) {
        rt__f2b(t, v, n);
        rt__b2f(v, t, n);
    }
}

/* One element. */
static inline float rt__get(const void *src, size_t i, RtDType dt)
{
    switch (dt) {
    case RT_F32: return ((const float *)src)[i];
    case RT_F16: return ampc_half_to_float(((const ampc_half *)src)[i]);
    case RT_BF16: return ampc_bf16_to_float(((const ampc_bf16 *)src)[i]);
    }
    return 0.0f;
}

static inline void rt__set(void *dst, size_t i, float v, RtDType dt, bool acc)
{
    switch (dt) {
    case RT_F32: ((float *)dst)[i] = acc ? ((float *)dst)[i] + v : v; return;
    case RT_F16: {
        ampc_half *d = (ampc_half *)dst + i;
        *d = ampc_float_to_half(acc ? ampc_half_to_float(*d) + v : v);
        return;
    }
    case RT_BF16: {
        ampc_bf16 *d = (ampc_bf16 *)dst + i;
        *d = ampc_float_to_bf16(acc ? ampc_bf16_to_float(*d) + v : v);
        return;
    }
    }
}

/* Workspace carving: sizes rounded up to RT_WS_ALIGN. */
static inline size_t rt__round(size_t bytes)
{
    return (bytes + RT_WS_ALIGN - 1) / RT_WS_ALIGN * RT_WS_ALIGN;
}
static inline void rt__ws_add(size_t *total, size_t bytes) { *total += rt__round(bytes); }
static inline void *rt__ws_take(char **ws, size_t bytes)
{
    void *p = *ws;
    *ws += rt__round(bytes);
    return p;
}

/* The NHWC kernels' NCHW copies (layout.c): adds rt__round(a*b elements of
 * dt) to *total; on overflow sets *total to SIZE_MAX (an allocation that
 * then fails names its size) and returns false. */
bool rt__nhwc_add(size_t *total, size_t a, size_t b, RtDType dt);

/* A fp32 view of a whole tensor: the tensor itself when fp32, else a widened
 * copy in scratch carved from *ws (n elements). */
static inline const float *rt__whole_view(const void *src, size_t n, RtDType dt, char **ws)
{
    if (dt == RT_F32)
        return (const float *)src;
    float *buf = (float *)rt__ws_take(ws, n * sizeof(float));
    rt_to_f32(buf, src, n, dt);
    return buf;
}

/* ---- walking a tensor against a broadcast (or reduced) view of another ----
 * The big tensor (shape out[]) is walked row by row, a row being its last
 * axis; a smaller operand of the same rank whose axes are each equal or 1
 * is addressed with strides that are 0 on its size-1 axes. */
static inline size_t rt__numel(const int64_t *s, int r)
{
    size_t n = 1;
    for (int i = 0; i < r; i++)
        n *= (size_t)s[i];
    return n;
}

/* Element strides of an input inside the output's index space (0 on its
 * broadcast axes). */
static inline void rt__bstrides(const int64_t *shape, int r, int64_t *st)
{
    int64_t s = 1;
    for (int i = r - 1; i >= 0; i--) {
        st[i] = shape[i] == 1 ? 0 : s;
        s *= shape[i];
    }
}

/* Row r of out starts at element r*len; rt__brow gives where it starts in a
 * and b, and sa/sb[rank-1] (0 or 1) how they advance along it. */
typedef struct {
    const RtBcastDims *d;
    int64_t sa[RT_MAX_RANK], sb[RT_MAX_RANK];
    size_t rows, len;
} RtBWalk;

static inline void rt__bwalk_init(RtBWalk *w, const RtBcastDims *d)
{
    w->d = d;
    rt__bstrides(d->a, d->rank, w->sa);
    rt__bstrides(d->b, d->rank, w->sb);
    w->len = (size_t)d->out[d->rank - 1];
    w->rows = w->len ? rt__numel(d->out, d->rank) / w->len : 0;
}

/* Offsets of row r in a and b. */
static inline void rt__brow(const RtBWalk *w, size_t r, size_t *oa, size_t *ob)
{
    size_t a = 0, b = 0;
    for (int i = w->d->rank - 2; i >= 0; i--) {
        size_t k = r % (size_t)w->d->out[i];
        r /= (size_t)w->d->out[i];
        a += k * (size_t)w->sa[i];
        b += k * (size_t)w->sb[i];
    }
    *oa = a;
    *ob = b;
}

/* fp32 values of an input along a row chunk: a view when it runs along the
 * row, else its one value repeated. */
static inline const float *rt__brow_vals(const void *src, size_t off, size_t m, int64_t stride,
                                         RtDType dt, float *buf)
{
    if (stride)
        return rt__view(src, off, m, dt, buf);
    float v = rt__get(src, off, dt);
    for (size_t i = 0; i < m; i++)
        buf[i] = v;
    return buf;
}

/* Softmax of n contiguous rows of k (reduce.c), x in xdt and y in dt: the
 * rows of rt_softmax_forward, whose x is widened on reading as it is in
 * every dtype (SoftmaxOutput reading 16-bit logits, loss.c). */
void rt__softmax_rows(int64_t n, int64_t k, RtDType xdt, const void *x, RtDType dt, void *y);

/* ---- optim.c: the fused optimizer over all parameters (the CPU device's
 * optim_step and train_update; device.h's RtOptConfig) ---- */

/* The parameter's wd_mult as the table gives it (the compiler emits the
 * effective value: MXNet's 0 for names not ending in _weight or _gamma). */
float rt_optim_wd_mult(const RtParam *p);
/* rt_multi_all_finite over every parameter gradient: one read of each. */
bool rt_optim_grads_finite(const RtModel *m, const RtCtx *ctx);
/* The first parameter whose gradient holds inf/NaN, or -1. */
int rt_optim_first_nonfinite(const RtModel *m, const RtCtx *ctx);
/* One update of every parameter with a gradient (grad >= 0), in one pass
 * over each tensor: the gradient read once (and checked for inf/NaN in the
 * same pass), the fp32 master (or fp32 weight) and the momentum state[i]
 * updated, the 16-bit shadow written (optim.h's ampc_mp_*).  lr and wd are
 * multiplied by each parameter's lr_mult and wd_mult.  Returns whether every
 * gradient was finite (the update is applied either way). */
bool rt_optim_step(const RtModel *m, RtCtx *ctx, float *const *state, const RtOptConfig *c);
/* The same with the second state (Adam's var, state2[i]); rt_optim_step is
 * this with state2 NULL (sgd and nag).  Adam skips parameters without both
 * states. */
bool rt_optim_step2(const RtModel *m, const RtCtx *ctx, float *const *state,
                    float *const *state2, const RtOptConfig *c);
/* Bytes moved per parameter element by one update; separate_check adds the
 * read of the gradient by a finite check before the update (dynamic loss
 * scaling; docs/training.md). */
int rt_optim_bytes_per_param(const RtParam *p, RtDType grad_dt, const RtOptConfig *c,
                             bool separate_check);

/* ---- optim_simd.c: the AVX2 + F16C body of optim.c's multi-precision and
 * fp32 loops, bit-identical to them, chosen at run time (CPUID;
 * AMPC_NO_SIMD=1 in the environment turns it off, read once).  It updates
 * the first n - n % 8 elements of a tensor (0 where it is off), optim.c's
 * loops the rest. ---- */
enum { RT_SIMD_SGD, RT_SIMD_SGD_MOM, RT_SIMD_NAG, RT_SIMD_ADAM };
bool rt_optim_simd_active(void);
void rt_optim_simd_reread(void);
size_t rt_optim_simd_mp(int op, bool bf16, const uint16_t *g, float *w, float *m, float *v,
                        uint16_t *s, size_t n, const AmpcOptParam *q, unsigned *bad);
size_t rt_optim_simd_f32(int op, const float *g, float *w, float *m, float *v, size_t n,
                         const AmpcOptParam *q, unsigned *bad);

#endif /* AMPC_RT_CPU_H */
