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

#include "kernels/half.h"
#include "rt.h"

#define RT_CHUNK 512

static inline size_t rt__chunk_len(size_t n, size_t off)
{
    return n - off < RT_CHUNK ? n - off : RT_CHUNK;
}

/* for (off, m) over [0, n) in chunks: off the chunk's start, m its length */
#define RT_CHUNKS(n, off, m) \
    for (size_t off = 0, m; off < (n) && (m = rt__chunk_len((n), off), 1); off += RT_CHUNK)

/* A read view of src[off, off+n) as fp32: src itself when fp32, else the
 * widened copy in buf (n <= RT_CHUNK). */
static inline const float *rt__view(const void *src, size_t off, size_t n, RtDType dt, float *buf)
{
    switch (dt) {
    case RT_F32: return (const float *)src + off;
    case RT_F16: ampc_half_to_float_n(buf, (const ampc_half *)src + off, n); return buf;
    case RT_BF16: ampc_bf16_to_float_n(buf, (const ampc_bf16 *)src + off, n); return buf;
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
            for (size_t i = 0; i < n; i++)
                d[i] += val[i];
        } else if (d != val) {
            memcpy(d, val, n * sizeof *d);
        }
        return;
    }
    case RT_F16: {
        ampc_half *d = (ampc_half *)dst + off;
        if (acc)
            for (size_t i = 0; i < n; i++)
                d[i] = ampc_float_to_half(ampc_half_to_float(d[i]) + val[i]);
        else
            ampc_float_to_half_n(d, val, n);
        return;
    }
    case RT_BF16: {
        ampc_bf16 *d = (ampc_bf16 *)dst + off;
        if (acc)
            for (size_t i = 0; i < n; i++)
                d[i] = ampc_float_to_bf16(ampc_bf16_to_float(d[i]) + val[i]);
        else
            ampc_float_to_bf16_n(d, val, n);
        return;
    }
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

#endif /* AMPC_RT_CPU_H */
