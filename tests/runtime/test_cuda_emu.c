/*
 * test_cuda_emu.c - the CUDA backend's custom kernels (runtime/cuda/
 * kernels.cuh, step.cuh) under the emulator (libampcemu.a: the same
 * kernels.cu built by the host's C++ compiler; runtime/emu/), through their
 * launchers, against their CPU twins bit for bit:
 *
 *   casts (every dtype pair, overwrite and accumulate)   rt_cast_forward/backward
 *   add, sub, mul (also in place); add+relu; relu and its backward
 *                                                         rt_elemwise_forward, ...
 *   fill                                                  the CPU device's fill
 *   the finite check, one tensor and many (the flag)      rt_all_finite, rt_multi_all_finite
 *   the fused multi-tensor optimizer: SGD, SGD momentum, NAG, Adam; fp16/bf16
 *     gradients and shadows with fp32 masters, fp32, 16-bit without a master,
 *     fp32 gradients of 16-bit weights; clip on and off; lr_mult, wd_mult;
 *     the rescale from a device loss scale; 70 tensors in one launch, chunks
 *     of 1000 and 65536 elements, sizes around 1000 and 2048  rt_optim_step2
 *   the skipped step: flag set, nothing written; the fused check's flag
 *   the loss-scale kernel over sequences of flags       rt_loss_scaler_update
 *   the block table (chunk edges, empty tensors, overflow)
 *   the step's one-thread kernels (step.cuh)            the CPU device's rules
 *
 * Data: odd sizes, the grid-stride edges (the emulation build caps grids at
 * 3 blocks of 256), subnormals of fp32 and fp16, values beyond the fp16
 * range, -0, inf and NaN, in device buffers of exactly the case's size (so
 * the emulator's bounds check sees an overrun).  Every case runs under two
 * scheduler seeds and the reversed order (emu_test.h), with every access
 * checked.  NaN is compared as NaN, not by payload, except in copies (C does
 * not fix which operand's payload an operation keeps, and the GPU returns
 * the canonical NaN).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/ampc_cuda.h"
#include "cuda/mt_table.h"
#include "device.h"
#include "emu_test.h"
#include "kernels/half.h"
#include "train.h"
#include "lossscale.h"
#include "cpu/cpu.h"

/* ---- data ------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static float rng_unit(uint64_t *s) { return (float)(rng_next(s) >> 40) / 16777216.0f; }

/* Mostly ordinary values; with `specials`, also inf and NaN (with payloads). */
static float rand_value(uint64_t *s, int specials)
{
    unsigned r = (unsigned)(rng_next(s) % 100);
    float sign = (rng_next(s) & 1) ? -1.0f : 1.0f;
    if (r < 5)
        return ampc_bits_f32((uint32_t)(rng_next(s) & 0x807fffffu)); /* fp32 subnormal or 0 */
    if (r < 10)
        return sign * rng_unit(s) * 6.0e-5f; /* the fp16 subnormal range */
    if (r < 13)
        return sign * (65504.0f + rng_unit(s) * 100.0f); /* around the fp16 overflow */
    if (r < 15)
        return -0.0f;
    if (specials && r < 17)
        return sign * INFINITY;
    if (specials && r < 19)
        return ampc_bits_f32(0x7f800001u | (uint32_t)(rng_next(s) & 0x803fffffu)); /* NaN */
    return sign * rng_unit(s) * 8.0f;
}

/* element i of a dt buffer, on the host */
static void put(void *p, size_t i, int dt, float v)
{
    if (dt == AMPC_DT_F32)
        ((float *)p)[i] = v;
    else if (dt == AMPC_DT_F16)
        ((ampc_half *)p)[i] = ampc_float_to_half(v);
    else
        ((ampc_bf16 *)p)[i] = ampc_float_to_bf16(v);
}

static void fill(void *p, int dt, size_t n, uint64_t *s, int specials)
{
    for (size_t i = 0; i < n; i++)
        put(p, i, dt, rand_value(s, specials));
}

static size_t esize(int dt) { return dt == AMPC_DT_F32 ? 4 : 2; }

static int is_nan(const void *p, size_t i, int dt)
{
    if (dt == AMPC_DT_F32) {
        float v = ((const float *)p)[i];
        return v != v;
    }
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == AMPC_DT_F16 ? ampc_half_isnan(h) : ampc_bf16_isnan(h);
}

/* Bit for bit, NaN as NaN; fails naming the first difference. */
static void check_same(const char *what, const void *got, const void *want, size_t n, int dt)
{
    size_t es = esize(dt);
    for (size_t i = 0; i < n; i++) {
        const char *a = (const char *)got + i * es, *b = (const char *)want + i * es;
        if (memcmp(a, b, es) == 0 || (is_nan(got, i, dt) && is_nan(want, i, dt)))
            continue;
        uint32_t x = 0, y = 0;
        memcpy(&x, a, es);
        memcpy(&y, b, es);
        fail_msg("%s: element %zu of %zu: emulated kernel 0x%08x, CPU 0x%08x", what, i, n, x, y);
    }
}

static const size_t sizes[] = {0, 1, 7, 255, 256, 257, 767, 768, 769, 1000, 3001};
enum { NSIZES = sizeof sizes / sizeof sizes[0], MAXN = 3001 };

/* ---- casts and element-wise ------------------------------------------------------ */

static void test_cast(void **st)
{
    (void)st;
    uint64_t s = 1;
    static float y0[MAXN];
    EMU_PASSES for (int from = 0; from < 3; from++) for (int to = 0; to < 3; to++)
        for (int acc = 0; acc < 2; acc++) for (int k = 0; k < NSIZES; k++)
    {
        /* 16-byte aligned (8 elements a thread, then the tail), and for
         * every third size x, for the next y, one element off (one at a time) */
        size_t n = sizes[k], xo = k % 3 == 2, yo = k % 3 == 1;
        char *xb = dev((n + xo) * esize(from), "x"), *yb = dev((n + yo) * esize(to), "y");
        void *x = xb + xo * esize(from), *y1 = yb + yo * esize(to);
        fill(x, from, n, &s, 1);
        fill(y0, to, n, &s, 1);
        memcpy(y1, y0, n * esize(to));
        if (acc)
            rt_cast_backward(n, (RtDType)from, x, (RtDType)to, y0, true);
        else
            rt_cast_forward(n, (RtDType)from, x, (RtDType)to, y0);
        assert_int_equal(ampc_cu_cast(NULL, n, from, x, to, y1, acc), 0);
        if (from == to && !acc)
            assert_memory_equal(y1, y0, n * esize(to)); /* a copy: bits */
        else
            check_same("cast", y1, y0, n, to);
        ampc_emu_free(xb), ampc_emu_free(yb);
    }
}

static void test_binary_and_relu(void **st)
{
    (void)st;
    uint64_t s = 2;
    static float y0[MAXN];
    EMU_PASSES for (int dt = 0; dt < 3; dt++) for (int k = 0; k < NSIZES; k++)
    {
        /* 16-byte aligned, and every third size one element off */
        size_t n = sizes[k], bytes = n * esize(dt), off = (k % 3 == 2) * esize(dt);
        char *ab = dev(bytes + off, "a"), *bb = dev(bytes + off, "b"), *yb = dev(bytes + off, "y");
        void *a = ab + off, *b = bb + off, *y1 = yb + off;
        fill(a, dt, n, &s, 1);
        fill(b, dt, n, &s, 1);
        for (int op = 0; op < 3; op++) {
            rt_elemwise_forward((RtBinOp)op, n, (RtDType)dt, a, b, y0);
            ampc_cu_binary(NULL, op, n, dt, a, b, y1);
            check_same("binary", y1, y0, n, dt);
            memcpy(y1, a, bytes); /* in place: y aliases a */
            ampc_cu_binary(NULL, op, n, dt, y1, b, y1);
            check_same("binary in place", y1, y0, n, dt);
        }
        rt_add_relu_forward(n, (RtDType)dt, a, b, y0);
        ampc_cu_add_relu(NULL, n, dt, a, b, y1);
        check_same("add_relu", y1, y0, n, dt);
        rt_activation_forward(RT_ACT_RELU, n, (RtDType)dt, a, y0);
        ampc_cu_relu(NULL, n, dt, a, y1);
        check_same("relu", y1, y0, n, dt);
        for (int acc = 0; acc < 2; acc++) {
            fill(y0, dt, n, &s, 1);
            memcpy(y1, y0, bytes);
            /* y = a (an output of relu or not), dy = b */
            rt_activation_backward(RT_ACT_RELU, n, (RtDType)dt, NULL, a, b, y0, acc);
            ampc_cu_relu_backward(NULL, n, dt, a, b, y1, acc);
            check_same("relu backward", y1, y0, n, dt);
        }
        ampc_emu_free(ab), ampc_emu_free(bb), ampc_emu_free(yb);
    }
}

static void test_backward_and_scalar(void **st)
{
    (void)st;
    uint64_t s = 5;
    static float d0[MAXN], e0[MAXN];
    const float scalars[] = {0.75f, -3.0f, 0.0f, 1e-40f};
    EMU_PASSES for (int dt = 0; dt < 3; dt++) for (int k = 0; k < NSIZES; k++)
    {
        size_t n = sizes[k], bytes = n * esize(dt);
        void *a = dev(bytes, "a"), *b = dev(bytes, "b"), *g = dev(bytes, "dy");
        void *d1 = dev(bytes, "da"), *e1 = dev(bytes, "db");
        fill(a, dt, n, &s, 1);
        fill(b, dt, n, &s, 1);
        fill(g, dt, n, &s, 1);
        for (int op = 0; op < 3; op++)
            for (int acc = 0; acc < 4; acc++) {
                fill(d0, dt, n, &s, 1);
                fill(e0, dt, n, &s, 1);
                memcpy(d1, d0, bytes);
                memcpy(e1, e0, bytes);
                rt_elemwise_backward((RtBinOp)op, n, (RtDType)dt, g, a, b, d0, e0, acc & 1,
                                     acc >> 1);
                ampc_cu_binary_backward(NULL, op, n, dt, g, a, b, d1, e1, acc & 1, acc >> 1);
                check_same("binary backward da", d1, d0, n, dt);
                check_same("binary backward db", e1, e0, n, dt);
                /* y = x op x: one gradient buffer, the second part accumulating */
                memcpy(d1, d0, bytes);
                rt_elemwise_backward((RtBinOp)op, n, (RtDType)dt, g, a, a, d0, d0, acc & 1, true);
                ampc_cu_binary_backward(NULL, op, n, dt, g, a, a, d1, d1, acc & 1, 1);
                check_same("binary backward da == db", d1, d0, n, dt);
            }
        for (int op = 0; op < 6; op++)
            for (size_t si = 0; si < sizeof scalars / sizeof scalars[0]; si++) {
                float sc = scalars[si];
                rt_scalar_forward((RtScalarOp)op, n, (RtDType)dt, a, sc, d0);
                ampc_cu_scalar(NULL, op, n, dt, a, sc, d1);
                check_same("scalar", d1, d0, n, dt);
                for (int acc = 0; acc < 2; acc++) {
                    fill(d0, dt, n, &s, 1);
                    memcpy(d1, d0, bytes);
                    rt_scalar_backward((RtScalarOp)op, n, (RtDType)dt, a, sc, g, d0, acc);
                    ampc_cu_scalar_backward(NULL, op, n, dt, a, sc, g, d1, acc);
                    check_same("scalar backward", d1, d0, n, dt);
                }
                /* dx over dy */
                memcpy(d0, g, bytes);
                memcpy(d1, g, bytes);
                rt_scalar_backward((RtScalarOp)op, n, (RtDType)dt, a, sc, d0, d0, false);
                ampc_cu_scalar_backward(NULL, op, n, dt, a, sc, d1, d1, 0);
                check_same("scalar backward in place", d1, d0, n, dt);
            }
        ampc_emu_free(a), ampc_emu_free(b), ampc_emu_free(g), ampc_emu_free(d1),
            ampc_emu_free(e1);
    }
}

static void test_fill(void **st)
{
    (void)st;
    char err[200];
    RtDevice *d = rt_device_cpu_open(err, sizeof err);
    assert_non_null(d);
    static float y0[1001];
    const float values[] = {0.0f, -0.0f, 1.0f / 3, 65520.0f, 1e-8f, 1e-45f, NAN, -INFINITY};
    EMU_PASSES for (int dt = 0; dt < 3; dt++)
        for (size_t v = 0; v < sizeof values / sizeof values[0]; v++)
    {
        void *y1 = dev(1001 * esize(dt), "y");
        rt_dev_fill(d, y0, (RtDType)dt, 1001, values[v]);
        ampc_cu_fill(NULL, y1, dt, 1001, values[v]);
        assert_memory_equal(y1, y0, 1001 * esize(dt)); /* bits (nothing past n: the checker) */
        ampc_emu_free(y1);
    }
    rt_device_close(d);
}

/* ---- the finite checks ------------------------------------------------------------ */

static void put_nonfinite(void *p, size_t i, int dt, int which)
{
    static const uint32_t f32[3] = {0x7f800000u, 0xff800000u, 0x7fc00001u};
    static const uint16_t f16[3] = {0x7c00u, 0xfc00u, 0x7d01u}, b16[3] = {0x7f80u, 0xff80u, 0xffc1u};
    if (dt == AMPC_DT_F32)
        ((uint32_t *)p)[i] = f32[which];
    else
        ((uint16_t *)p)[i] = dt == AMPC_DT_F16 ? f16[which] : b16[which];
}

static void test_finite(void **st)
{
    (void)st;
    uint64_t s = 3;
    int32_t *flag = dev(sizeof *flag, "flag");
    EMU_PASSES for (int dt = 0; dt < 3; dt++) for (int k = 0; k < NSIZES; k++)
    {
        size_t n = sizes[k];
        void *x = dev(n * esize(dt), "x");
        fill(x, dt, n, &s, 0); /* subnormals, 65504+ (inf in fp16), -0 */
        *flag = 7;
        ampc_cu_set_flag(NULL, flag, 0);
        assert_int_equal(*flag, 0);
        ampc_cu_finite(NULL, x, n, dt, flag);
        assert_int_equal(*flag, !rt_all_finite(x, n, (RtDType)dt));
        const size_t where[] = {0, n / 2, n - 1, 767, 768};
        for (size_t w = 0; n && w < sizeof where / sizeof where[0]; w++) {
            if (where[w] >= n)
                continue;
            fill(x, dt, n, &s, 0);
            if (dt == AMPC_DT_F16) /* fp16 overflows to inf: keep it finite */
                for (size_t i = 0; i < n; i++)
                    ((uint16_t *)x)[i] &= 0xbfffu;
            put_nonfinite(x, where[w], dt, (int)(w % 3));
            assert_false(rt_all_finite(x, n, (RtDType)dt));
            ampc_cu_set_flag(NULL, flag, 0);
            ampc_cu_finite(NULL, x, n, dt, flag);
            assert_int_equal(*flag, 1);
        }
        ampc_emu_free(x);
    }
    ampc_emu_free(flag);
}

/* a host table copied into device memory, where the launch reads it */
static void *to_dev(const void *p, size_t bytes, const char *name)
{
    void *d = dev(bytes, name);
    memcpy(d, p, bytes);
    return d;
}

/* 24 gradients: every size below in two dtypes (the sizes around the chunks) */
enum { NT = 24 };
static const int64_t mt_sizes[] = {1, 7, 999, 1000, 1001, 2000, 2001, 0, 511, 512, 513, 3};

static void test_mt_finite(void **st)
{
    (void)st;
    uint64_t s = 4;
    static AmpcMtTensor t[NT];
    static RtTensorRef refs[NT];
    static AmpcMtBlock blocks[NT * 4 + 8];
    for (int i = 0; i < NT; i++) {
        int64_t n = i == 5 ? 2049 : mt_sizes[i % 12];
        int dt = i % 3;
        void *g = dev((size_t)n * esize(dt), "grad");
        fill(g, dt, (size_t)n, &s, 0);
        if (dt == AMPC_DT_F16)
            for (int64_t e = 0; e < n; e++)
                ((uint16_t *)g)[e] &= 0xbfffu;
        memset(&t[i], 0, sizeof t[i]);
        t[i].grad = g;
        t[i].n = n;
        t[i].gdt = dt;
        refs[i] = (RtTensorRef){g, (size_t)n, (RtDType)dt};
    }
    int32_t *flag = dev(sizeof *flag, "flag");
    AmpcMtTensor *td = to_dev(t, sizeof t, "tensors");
    const int64_t chunks[] = {1000, 512};
    EMU_PASSES for (int c = 0; c < 2; c++)
    {
        int64_t chunk = chunks[c];
        int64_t nb = ampc_mt_fill_blocks(t, NT, chunk, blocks);
        assert_true(nb > 0 && nb <= (int64_t)(sizeof blocks / sizeof blocks[0]));
        AmpcMtBlock *bd = to_dev(blocks, (size_t)nb * sizeof *blocks, "blocks");
        *flag = 0;
        long before = ampc_emu_launches();
        ampc_cu_mt_finite(NULL, td, bd, nb, chunk, flag);
        assert_int_equal(ampc_emu_launches() - before, 1); /* one launch for all */
        assert_int_equal(*flag, 0);
        assert_true(rt_multi_all_finite(refs, NT));
        /* one bad element at a time: first, chunk edges, last; every tensor of
         * one dtype per schedule */
        for (int i = emu_pass_; i < NT; i += 3) {
            int64_t n = t[i].n;
            const int64_t where[] = {0, chunk - 1, chunk, n - 1, n / 2};
            for (int w = 0; w < 5; w++) {
                if (where[w] < 0 || where[w] >= n)
                    continue;
                void *g = (void *)t[i].grad;
                size_t es = esize(t[i].gdt);
                uint32_t keep = 0;
                memcpy(&keep, (char *)g + where[w] * es, es);
                put_nonfinite(g, (size_t)where[w], t[i].gdt, w % 3);
                *flag = 0;
                ampc_cu_mt_finite(NULL, td, bd, nb, chunk, flag);
                assert_int_equal(*flag, 1);
                assert_false(rt_multi_all_finite(refs, NT));
                memcpy((char *)g + where[w] * es, &keep, es);
            }
        }
        ampc_emu_free(bd);
    }
    for (int i = 0; i < NT; i++)
        ampc_emu_free((void *)t[i].grad);
    ampc_emu_free(td), ampc_emu_free(flag);
}

static void test_mt_blocks(void **st)
{
    (void)st;
    AmpcMtTensor t[4];
    AmpcMtBlock b[16];
    memset(t, 0, sizeof t);
    t[0].n = 1000;
    t[1].n = 0;
    t[2].n = 1001;
    t[3].n = 1;
    assert_int_equal(ampc_mt_count_blocks(t, 4, 1000), 4);
    assert_int_equal(ampc_mt_fill_blocks(t, 4, 1000, b), 4);
    const int32_t want[4][2] = {{0, 0}, {2, 0}, {2, 1}, {3, 0}};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(b[i].tensor, want[i][0]);
        assert_int_equal(b[i].chunk, want[i][1]);
    }
    assert_int_equal(ampc_mt_count_blocks(t, 0, 1000), 0);
    assert_int_equal(ampc_mt_count_blocks(t, 4, 0), -1);
    t[0].n = (int64_t)INT32_MAX + 1; /* more chunks than a grid holds */
    assert_int_equal(ampc_mt_count_blocks(t, 1, 1), -1);
    t[0].n = -1;
    assert_int_equal(ampc_mt_count_blocks(t, 1, 1000), -1);
}

/* ---- the optimizer ------------------------------------------------------------------- */

enum { NP = 70 };

/* parameter kinds: (weight dtype, master, gradient dtype) */
static const struct {
    RtDType w;
    bool master;
    RtDType g;
} kinds[] = {
    {RT_F16, true, RT_F16}, {RT_BF16, true, RT_BF16}, {RT_F32, false, RT_F32},
    {RT_F16, false, RT_F16}, {RT_F16, true, RT_F32}, {RT_F32, true, RT_F32},
    {RT_BF16, false, RT_BF16},
};
enum { NKINDS = sizeof kinds / sizeof kinds[0] };

/* Two copies of every buffer a step changes (A: the CPU's, in host memory;
 * B: the emulated kernel's, in device buffers of the tensor's size); the
 * gradients are shared (device buffers, read only). */
typedef struct {
    RtParam params[NP];
    RtBuffer buffers[2 * NP];
    RtModel model;
    void *bufA[2 * NP], *bufB[2 * NP];
    float *masterA[NP], *masterB[NP], *momA[NP], *momB[NP], *varA[NP], *varB[NP];
    RtCtx ctxA, ctxB;
} Opt;

static void opt_init(Opt *o, uint64_t *s)
{
    memset(o, 0, sizeof *o);
    for (int i = 0; i < NP; i++) {
        RtParam *p = &o->params[i];
        int k = i % NKINDS;
        int64_t n = i == 3 ? 2049 : i == 10 ? 2048 : mt_sizes[(i / NKINDS + i) % 12];
        p->name = "p";
        p->kind = RT_PK_WEIGHT;
        p->dtype = kinds[k].w;
        p->has_master = kinds[k].master;
        p->rank = 1;
        p->shape[0] = n;
        p->numel = n;
        p->init = "default";
        p->wd_mult = (i % 4 == 1) ? 0.0f : (i % 4 == 2) ? 0.5f : 1.0f;
        p->lr_mult = (i % 5 == 3) ? 2.0f : (i % 5 == 4) ? 0.1f : 1.0f;
        p->buffer = i;
        p->grad = i % 11 == 9 ? -1 : NP + i; /* a few without a gradient */
        o->buffers[i] = (RtBuffer){"w", p->dtype, n, 0, false, 0, 0};
        o->buffers[NP + i] = (RtBuffer){"g", kinds[k].g, n, 0, false, 0, 0};
        size_t cnt = (size_t)(n ? n : 1), un = (size_t)n;
        o->bufA[i] = calloc(cnt, 4);
        o->bufB[i] = dev(un * esize(p->dtype), "weight");
        o->bufA[NP + i] = o->bufB[NP + i] = dev(un * esize(kinds[k].g), "grad");
        o->masterA[i] = p->has_master ? calloc(cnt, 4) : NULL;
        o->masterB[i] = p->has_master ? dev(un * 4, "master") : NULL;
        o->momA[i] = calloc(cnt, 4), o->momB[i] = dev(un * 4, "mom");
        o->varA[i] = calloc(cnt, 4), o->varB[i] = dev(un * 4, "var");
        assert_non_null(o->bufA[i]);
        assert_non_null(o->bufB[i]);
        assert_non_null(o->bufA[NP + i]);
        assert_non_null(o->momA[i]);
        assert_non_null(o->momB[i]);
        assert_non_null(o->varA[i]);
        assert_non_null(o->varB[i]);
        /* weights and masters (some beyond the fp16 range), states */
        if (p->has_master) {
            assert_non_null(o->masterA[i]);
            assert_non_null(o->masterB[i]);
            fill(o->masterA[i], AMPC_DT_F32, (size_t)n, s, 0);
            for (int64_t e = 0; e < n; e++)
                put(o->bufA[i], (size_t)e, p->dtype, o->masterA[i][e]);
            memcpy(o->masterB[i], o->masterA[i], (size_t)n * 4);
        } else {
            fill(o->bufA[i], p->dtype, (size_t)n, s, 0);
        }
        memcpy(o->bufB[i], o->bufA[i], (size_t)n * esize(p->dtype));
        for (int64_t e = 0; e < n; e++) {
            o->momA[i][e] = o->momB[i][e] = rand_value(s, 0) * 0.01f;
            o->varA[i][e] = o->varB[i][e] = fabsf(rand_value(s, 0)) * 0.01f;
        }
    }
    o->model.name = "cuda_emu";
    o->model.nparams = NP;
    o->model.params = o->params;
    o->model.nbuffers = 2 * NP;
    o->model.buffers = o->buffers;
    o->ctxA.buf = o->bufA;
    o->ctxA.master = o->masterA;
    o->ctxB.buf = o->bufB;
    o->ctxB.master = o->masterB;
}

static void opt_free(Opt *o)
{
    for (int i = 0; i < NP; i++) {
        free(o->bufA[i]);
        ampc_emu_free(o->bufB[i]);
        ampc_emu_free(o->bufA[NP + i]);
        free(o->masterA[i]);
        ampc_emu_free(o->masterB[i]);
        free(o->momA[i]);
        ampc_emu_free(o->momB[i]);
        free(o->varA[i]);
        ampc_emu_free(o->varB[i]);
    }
}

static void new_grads(Opt *o, uint64_t *s, int specials)
{
    for (int i = 0; i < NP; i++) {
        const RtParam *p = &o->params[i];
        if (p->grad < 0)
            continue;
        int dt = o->buffers[p->grad].dtype;
        fill(o->bufA[p->grad], dt, (size_t)p->numel, s, specials);
        if (!specials && dt == AMPC_DT_F16) /* 65504+ rounded to inf: halve those */
            for (int64_t e = 0; e < p->numel; e++)
                ((uint16_t *)o->bufA[p->grad])[e] &= 0xbfffu;
    }
}

static void opt_compare(const Opt *o, const char *what)
{
    char name[120];
    for (int i = 0; i < NP; i++) {
        const RtParam *p = &o->params[i];
        size_t n = (size_t)p->numel;
        snprintf(name, sizeof name, "%s: parameter %d weight", what, i);
        check_same(name, o->bufB[i], o->bufA[i], n, p->dtype);
        if (p->has_master) {
            snprintf(name, sizeof name, "%s: parameter %d master", what, i);
            check_same(name, o->masterB[i], o->masterA[i], n, AMPC_DT_F32);
        }
        snprintf(name, sizeof name, "%s: parameter %d state", what, i);
        check_same(name, o->momB[i], o->momA[i], n, AMPC_DT_F32);
        snprintf(name, sizeof name, "%s: parameter %d var", what, i);
        check_same(name, o->varB[i], o->varA[i], n, AMPC_DT_F32);
    }
}

/* The emulated step over table t (nt tensors) with chunk; returns the
 * fused check's flag. */
static int32_t emu_step(Opt *o, const RtOptConfig *c, int64_t chunk, const AmpcLossScale *scale,
                        double batch, const int32_t *skip, int from_device)
{
    static AmpcMtTensor t[NP];
    static AmpcMtBlock blocks[4096];
    int nt = ampc_mt_optim_from_model(&o->model, o->ctxB.buf, o->ctxB.master, o->momB, o->varB,
                                      c, t);
    int64_t nb = ampc_mt_count_blocks(t, nt, chunk);
    assert_true(nb >= 0 && nb <= 4096);
    assert_int_equal(ampc_mt_fill_blocks(t, nt, chunk, blocks), nb);
    AmpcMtStep step = ampc_mt_step_from_config(c);
    step.batch = batch;
    /* the tables, the step, the scale, the flags: device memory */
    AmpcMtTensor *td = to_dev(t, (size_t)nt * sizeof *t, "tensors");
    AmpcMtBlock *bd = to_dev(blocks, (size_t)nb * sizeof *blocks, "blocks");
    AmpcMtStep *sd = to_dev(&step, sizeof step, "step");
    float *scd = scale ? to_dev(&scale->scale, sizeof scale->scale, "scale") : NULL;
    int32_t *skd = skip ? to_dev(skip, sizeof *skip, "skip") : NULL;
    int32_t zero = 0, *flag = to_dev(&zero, sizeof zero, "flag");
    long before = ampc_emu_launches();
    /* from_device: the step read from device memory (the launch gets
     * garbage by value, so a kernel that ignored step_dev would fail) */
    AmpcMtStep junk;
    memset(&junk, 0x7f, sizeof junk);
    assert_int_equal(ampc_cu_mt_optim(NULL, td, bd, nb, chunk, from_device ? &junk : &step,
                                      from_device ? sd : NULL, skd, skip ? NULL : flag, scd),
                     0);
    assert_int_equal(ampc_emu_launches() - before, nb > 0); /* one launch for all tensors */
    int32_t found = *flag;
    ampc_emu_free(td), ampc_emu_free(bd), ampc_emu_free(sd), ampc_emu_free(scd);
    ampc_emu_free(skd), ampc_emu_free(flag);
    return found;
}

static void run_opt(RtOptKind kind, float momentum, float clip, int64_t chunk, int with_scale,
                    uint64_t seed)
{
    static Opt o;
    uint64_t s = seed;
    opt_init(&o, &s);
    RtOptConfig c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.momentum = momentum;
    c.wd = 1e-3f;
    c.clip_gradient = clip;
    c.beta1 = 0.9f;
    c.beta2 = 0.999f;
    c.epsilon = 1e-8f;
    for (int step = 0; step < 3; step++) {
        ampc_emu_pass(step); /* seed 1, seed 2, reversed */
        c.lr = 0.1f / (float)(step + 1);
        c.t = step + 1;
        AmpcLossScale ls = {65536.0f * (float)(step + 1), 0};
        double batch = 8;
        c.rescale_grad = with_scale ? (float)(1.0 / (batch * (double)ls.scale)) : 1.0f / 8;
        /* the last step with inf/NaN gradients: the update goes ahead (a
         * static scale), the fused check reports it */
        new_grads(&o, &s, step == 2);
        bool ok = rt_optim_step2(&o.model, &o.ctxA, o.momA, kind == RT_OPT_ADAM ? o.varA : NULL,
                                 &c);
        int32_t found = emu_step(&o, &c, chunk, with_scale ? &ls : NULL, batch, NULL, step == 1);
        assert_int_equal(found, !ok);
        if (step == 2)
            assert_int_equal(found, 1);
        opt_compare(&o, "optimizer");
    }
    opt_free(&o);
}

static void test_sgd(void **st)
{
    (void)st;
    run_opt(RT_OPT_SGD, 0.0f, -1.0f, 1000, 0, 11);
    run_opt(RT_OPT_SGD, 0.0f, 0.5f, AMPC_MT_CHUNK, 1, 12);
}

static void test_sgd_momentum(void **st)
{
    (void)st;
    run_opt(RT_OPT_SGD, 0.9f, -1.0f, 1000, 1, 13);
    run_opt(RT_OPT_SGD, 0.9f, 0.5f, AMPC_MT_CHUNK, 0, 14);
}

static void test_nag(void **st)
{
    (void)st;
    run_opt(RT_OPT_NAG, 0.9f, -1.0f, AMPC_MT_CHUNK, 0, 15);
    run_opt(RT_OPT_NAG, 0.9f, 0.5f, 1000, 1, 16);
    run_opt(RT_OPT_NAG, 0.0f, -1.0f, 1000, 0, 17); /* momentum 0: sgd */
}

static void test_adam(void **st)
{
    (void)st;
    run_opt(RT_OPT_ADAM, 0.0f, -1.0f, 1000, 1, 18);
    run_opt(RT_OPT_ADAM, 0.0f, 0.5f, AMPC_MT_CHUNK, 0, 19);
}

/* Dynamic loss scaling: the check sets the flag, the optimizer reads it and
 * writes nothing; with finite gradients the flag stays clear and the step
 * equals the CPU's. */
static void test_skipped_step(void **st)
{
    (void)st;
    static Opt o;
    uint64_t s = 21;
    opt_init(&o, &s);
    RtOptConfig c;
    memset(&c, 0, sizeof c);
    c.kind = RT_OPT_NAG;
    c.momentum = 0.9f;
    c.lr = 0.05f;
    c.wd = 1e-4f;
    c.rescale_grad = 1.0f / 64;
    c.clip_gradient = -1.0f;
    static AmpcMtTensor g[NP];
    static AmpcMtBlock blocks[4096];
    int ng = ampc_mt_grads_from_model(&o.model, o.ctxB.buf, g);
    int64_t nb = ampc_mt_fill_blocks(g, ng, 1000, blocks);
    assert_true(nb > 0 && nb <= 4096);
    AmpcMtTensor *gd = to_dev(g, (size_t)ng * sizeof *g, "grads");
    AmpcMtBlock *bd = to_dev(blocks, (size_t)nb * sizeof *blocks, "blocks");
    int32_t *flag = dev(sizeof *flag, "flag");
    for (int round = 0; round < 4; round++) {
        ampc_emu_pass(round % 3);
        int bad = round % 2 == 0;
        new_grads(&o, &s, 0);
        if (bad) /* one non-finite element, in a different tensor each time */
            for (int i = 3 + round * 17; i < NP; i++)
                if (o.params[i].grad >= 0 && o.params[i].numel > 0) {
                    put_nonfinite(o.bufA[o.params[i].grad], (size_t)o.params[i].numel - 1,
                                  o.buffers[o.params[i].grad].dtype, round % 3);
                    break;
                }
        *flag = 0;
        ampc_cu_mt_finite(NULL, gd, bd, nb, 1000, flag);
        bool finite = rt_optim_grads_finite(&o.model, &o.ctxA);
        assert_int_equal(*flag, !finite);
        assert_int_equal(*flag, bad);
        if (finite)
            rt_optim_step2(&o.model, &o.ctxA, o.momA, NULL, &c); /* the CPU loop skips */
        emu_step(&o, &c, 1000, NULL, 0, flag, round == 3);
        opt_compare(&o, bad ? "skipped step" : "step after a skip");
    }
    ampc_emu_free(gd), ampc_emu_free(bd), ampc_emu_free(flag);
    opt_free(&o);
}

/* ---- the loss scale ----------------------------------------------------------------- */

static void run_loss_scale(float init, float growth, float backoff, int32_t interval,
                           float min_scale, float max_scale, int pct_bad, uint64_t seed)
{
    RtLossScaleConfig cfg = {RT_LS_DYNAMIC, init, growth, backoff, interval, min_scale, max_scale};
    RtLossScaler ls;
    rt_loss_scaler_init(&ls, &cfg, "float16");
    AmpcLossScale *dls = to_dev(&ls.s, sizeof ls.s, "loss scale");
    AmpcLossScaleStats *stats = dev(sizeof *stats, "stats");
    int32_t *flag = dev(sizeof *flag, "flag");
    memset(stats, 0, sizeof *stats);
    uint64_t s = seed;
    int64_t grown = 0, backed = 0;
    for (int step = 0; step < 400; step++) {
        if (step % 100 == 0)
            ampc_emu_pass(step / 100 % 3);
        *flag = (int32_t)(rng_next(&s) % 100) < pct_bad;
        float before = ls.s.scale;
        rt_loss_scaler_update(&ls, !*flag, NULL, NULL);
        grown += ls.s.scale > before;
        backed += ls.s.scale < before;
        assert_int_equal(ampc_cu_loss_scale(NULL, dls, flag, ls.rule, stats), 0);
        assert_int_equal(ampc_f32_bits(dls->scale), ampc_f32_bits(ls.s.scale));
        assert_int_equal(dls->tracker, ls.s.tracker);
    }
    assert_int_equal(stats->steps, 400);
    assert_int_equal(stats->skipped, ls.skipped);
    assert_int_equal(stats->grown, grown);
    assert_int_equal(stats->backed_off, backed);
    ampc_emu_free(dls), ampc_emu_free(stats), ampc_emu_free(flag);
}

static void test_loss_scale(void **st)
{
    (void)st;
    run_loss_scale(65536.0f, 2.0f, 0.5f, 3, 0.0f, 16777216.0f, 20, 31);   /* MXNet's cap */
    run_loss_scale(65536.0f, 2.0f, 0.5f, 2, 0.0f, 0.0f, 1, 32);           /* grows to inf: kept */
    run_loss_scale(3.0e38f, 3.0f, 0.25f, 1, 0.0f, 0.0f, 10, 33);          /* growth past FLT_MAX */
    run_loss_scale(1.0f, 2.0f, 0.5f, 5, 0.0078125f, 0.0f, 90, 34);        /* the floor */
    run_loss_scale(1e-36f, 2.0f, 0.5f, 4, 0.0f, 0.0f, 80, 35);            /* into subnormals */
}

/* ---- the step without the host (step.cuh) ------------------------------------------ */

/* The one-thread kernels over ten steps, a static and a dynamic scale, an
 * injected inf (the host's flag at step 4, the device's own at step 7: the
 * step's number, which the ring's kernel advances) and steps past the
 * schedule written, against the CPU
 * device's rules (runtime/cpu/device.c: step_begin, train_update's count
 * and learning rate, ls_update's ring and counters). */
static void test_step_kernels(void **st)
{
    (void)st;
    AmpcDevLs *ls = dev(sizeof *ls, "ls");
    AmpcMtStep *table = dev(3 * sizeof *table, "lr table"), *cur = dev(sizeof *cur, "cur");
    AmpcLossScaleStep *ring = dev(RT_DEV_LS_RING * sizeof *ring, "ring");
    int32_t *flag = &ls->st.flag; /* the step state's, as device.cu's */
    for (int dynamic = 0; dynamic < 2; dynamic++) {
        memset(ls, 0, sizeof *ls);
        ls->ls.scale = 1024.0f;
        ls->ls.tracker = 3;
        ls->st.dynamic = dynamic;
        ls->st.num_update = 5;
        ls->lr_first = 5;
        ls->lr_n = 3; /* updates 6, 7, 8 are written */
        ls->st.step = 100;
        ls->inject = 1;
        ls->inject_at = 107;
        for (int i = 0; i < 3; i++) {
            memset(&table[i], 0, sizeof table[i]);
            table[i].kind = AMPC_OPT_NAG;
            table[i].lr = 0.1f * (float)(i + 1);
            table[i].momentum = 0.9f;
            table[i].batch = 8;
        }
        int64_t num_update = 5, steps = 0, nonfinite = 0;
        for (int step = 0; step < 10; step++) {
            ampc_emu_pass(step % 3);
            int inject = step == 4;
            assert_int_equal(ls->st.step, 100 + step);
            assert_int_equal(ampc_cu_step_begin(NULL, ls, inject), 0);
            assert_int_equal(ampc_f32_bits(ls->st.scale), inject || step == 7
                                                              ? 0x7f800000u
                                                              : ampc_f32_bits(ls->ls.scale));
            assert_int_equal(ampc_cu_step_pick(NULL, ls, table, cur), 0);
            int64_t i = num_update - 5;
            if (i >= 0 && i < 3) {
                assert_memory_equal(cur, &table[i], sizeof *cur);
            } else { /* past the schedule: table[0] with a NaN learning rate */
                assert_true(cur->lr != cur->lr);
                assert_int_equal(cur->kind, table[0].kind);
            }
            *flag = step % 3 == 1; /* a non-finite step */
            assert_int_equal(ampc_cu_step_count(NULL, ls, flag), 0);
            num_update += !dynamic || !*flag;
            assert_int_equal(ls->st.num_update, num_update);
            assert_int_equal(ampc_cu_step_ring(NULL, ls, flag, ring, RT_DEV_LS_RING), 0);
            const AmpcLossScaleStep *r = &ring[steps % RT_DEV_LS_RING];
            assert_int_equal(r->finite, !*flag); /* the step's record, after the rule */
            assert_int_equal(ampc_f32_bits(r->s.scale), ampc_f32_bits(ls->ls.scale));
            assert_int_equal(r->s.tracker, ls->ls.tracker);
            assert_int_equal(r->num_update, num_update);
            steps++;
            nonfinite += !dynamic && *flag;
            assert_int_equal(ls->steps, steps);
            assert_int_equal(ls->nonfinite, nonfinite);
        }
    }
    ampc_emu_free(ls), ampc_emu_free(table), ampc_emu_free(cur), ampc_emu_free(ring);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cast),
        cmocka_unit_test(test_binary_and_relu),
        cmocka_unit_test(test_backward_and_scalar),
        cmocka_unit_test(test_fill),
        cmocka_unit_test(test_finite),
        cmocka_unit_test(test_mt_blocks),
        cmocka_unit_test(test_mt_finite),
        cmocka_unit_test(test_sgd),
        cmocka_unit_test(test_sgd_momentum),
        cmocka_unit_test(test_nag),
        cmocka_unit_test(test_adam),
        cmocka_unit_test(test_skipped_step),
        cmocka_unit_test(test_loss_scale),
        cmocka_unit_test(test_step_kernels),
    };
    return cmocka_run_group_tests(tests, emu_test_setup, emu_test_teardown);
}
