/* dtype.c - storage dtypes: bulk conversion, finite checks, copies and casts.
 *
 * The conversions themselves are runtime/kernels/half.h (shared with the CUDA
 * kernels); this file only loops over buffers. */
#include "cpu.h"

size_t rt_dtype_size(RtDType dt) { return dt == RT_F32 ? 4 : 2; }

const char *rt_dtype_name(RtDType dt)
{
    switch (dt) {
    case RT_F32: return "float32";
    case RT_F16: return "float16";
    case RT_BF16: return "bfloat16";
    }
    return "?";
}

void rt_to_f32(float *dst, const void *src, size_t n, RtDType dt)
{
    switch (dt) {
    case RT_F32:
        if ((const void *)dst != src)
            memcpy(dst, src, n * sizeof *dst);
        return;
    case RT_F16: ampc_half_to_float_n(dst, (const ampc_half *)src, n); return;
    case RT_BF16: ampc_bf16_to_float_n(dst, (const ampc_bf16 *)src, n); return;
    }
}

void rt_from_f32(void *dst, const float *src, size_t n, RtDType dt)
{
    rt__commit(dst, 0, src, n, dt, false);
}

void rt_store_f32(void *dst, const float *src, size_t n, RtDType dt, bool accumulate)
{
    rt__commit(dst, 0, src, n, dt, accumulate);
}

bool rt_all_finite(const void *p, size_t n, RtDType dt)
{
    /* OR of a per-element flag, no early exit, so the loops vectorise */
    unsigned bad = 0;
    switch (dt) {
    case RT_F32: {
        const uint32_t *u = p;
        for (size_t i = 0; i < n; i++)
            bad |= (u[i] & 0x7f800000u) == 0x7f800000u;
        break;
    }
    case RT_F16: {
        const ampc_half *h = p;
        for (size_t i = 0; i < n; i++)
            bad |= (h[i] & 0x7c00u) == 0x7c00u;
        break;
    }
    case RT_BF16: {
        const ampc_bf16 *b = p;
        for (size_t i = 0; i < n; i++)
            bad |= (b[i] & 0x7f80u) == 0x7f80u;
        break;
    }
    }
    return !bad;
}

bool rt_multi_all_finite(const RtTensorRef *t, int count)
{
    bool ok = true;
    for (int i = 0; i < count; i++)
        ok &= rt_all_finite(t[i].ptr, t[i].n, t[i].dt);
    return ok;
}

void rt_copy(size_t n, RtDType dt, const void *x, void *y)
{
    if (x != y)
        memcpy(y, x, n * rt_dtype_size(dt));
}

void rt_reshape_forward(size_t n, RtDType dt, const void *x, void *y) { rt_copy(n, dt, x, y); }

void rt_reshape_backward(size_t n, RtDType dt, const void *dy, void *dx, bool accumulate)
{
    if (!accumulate) {
        rt_copy(n, dt, dy, dx);
        return;
    }
    float buf[RT_CHUNK];
    for (size_t off = 0; off < n; off += RT_CHUNK) {
        size_t m = n - off < RT_CHUNK ? n - off : RT_CHUNK;
        rt__commit(dx, off, rt__view(dy, off, m, dt, buf), m, dt, true);
    }
}

void rt_cast_forward(size_t n, RtDType from, const void *x, RtDType to, void *y)
{
    if (from == to) {
        rt_copy(n, to, x, y);
        return;
    }
    float buf[RT_CHUNK];
    for (size_t off = 0; off < n; off += RT_CHUNK) {
        size_t m = n - off < RT_CHUNK ? n - off : RT_CHUNK;
        rt__commit(y, off, rt__view(x, off, m, from, buf), m, to, false);
    }
}

void rt_cast_backward(size_t n, RtDType ydt, const void *dy, RtDType xdt, void *dx,
                      bool accumulate)
{
    if (!accumulate) {
        rt_cast_forward(n, ydt, dy, xdt, dx);
        return;
    }
    float buf[RT_CHUNK];
    for (size_t off = 0; off < n; off += RT_CHUNK) {
        size_t m = n - off < RT_CHUNK ? n - off : RT_CHUNK;
        rt__commit(dx, off, rt__view(dy, off, m, ydt, buf), m, xdt, true);
    }
}
