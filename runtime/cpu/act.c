/* act.c - Activation, LeakyReLU and Dropout.
 *
 * The per-element math (values and derivatives) is runtime/kernels/act.h,
 * shared with the CUDA kernels; this file only walks the buffers in chunks.
 * Dropout draws its mask from Philox-4x32-10 keyed by the seed, with the
 * element index, the tensor's stream id and the step as the counter, so the
 * backward regenerates the mask instead of storing it.
 */
#include "cpu.h"
#include "kernels/act.h"
#include "kernels/philox.h"

/* fp32 relu and its gradient, four lanes at a time (cpu.h): the same
 * values as ampc_relu / dy * ampc_relu_grad_y, including NaN -> 0 and
 * inf * 0 -> NaN */
static void relu_f32(float *r, const float *v, size_t m)
{
    const rt_v4 z = rt__splat4(0.0f);
    size_t i = 0;
    for (; i + 8 <= m; i += 8) {
        rt_v4 a = rt__ld4(v + i), b = rt__ld4(v + i + 4);
        rt__st4(r + i, rt__and4(a, a > z));
        rt__st4(r + i + 4, rt__and4(b, b > z));
    }
    for (; i < m; i++)
        r[i] = ampc_relu(v[i]);
}

static void relu_grad_f32(float *r, const float *g, const float *y, size_t m)
{
    const rt_v4 z = rt__splat4(0.0f), one = rt__splat4(1.0f);
    size_t i = 0;
    for (; i + 8 <= m; i += 8) {
        rt_v4 a = rt__ld4(y + i), b = rt__ld4(y + i + 4);
        rt__st4(r + i, rt__ld4(g + i) * rt__and4(one, a > z));
        rt__st4(r + i + 4, rt__ld4(g + i + 4) * rt__and4(one, b > z));
    }
    for (; i < m; i++)
        r[i] = g[i] * ampc_relu_grad_y(y[i]);
}

typedef struct {
    RtAct act;
    RtDType dt;
    const void *x, *y, *dy;
    void *out;
    bool acc;
} ActJob;

static void act_fwd_range(void *p, size_t lo, size_t hi)
{
    const ActJob *j = p;
    float xb[RT_CHUNK], yb[RT_CHUNK];
    RT_CHUNKS_IN(lo, hi, off, m) {
        const float *v = rt__view(j->x, off, m, j->dt, xb);
        float *r = rt__out(j->out, off, j->dt, false, yb);
        switch (j->act) {
        case RT_ACT_RELU: relu_f32(r, v, m); break;
        case RT_ACT_SIGMOID: for (size_t i = 0; i < m; i++) r[i] = ampc_sigmoid(v[i]); break;
        case RT_ACT_TANH: for (size_t i = 0; i < m; i++) r[i] = ampc_tanh(v[i]); break;
        case RT_ACT_SOFTRELU: for (size_t i = 0; i < m; i++) r[i] = ampc_softrelu(v[i]); break;
        case RT_ACT_SOFTSIGN: for (size_t i = 0; i < m; i++) r[i] = ampc_softsign(v[i]); break;
        }
        rt__commit(j->out, off, r, m, j->dt, false);
    }
}

void rt_activation_forward(RtAct act, size_t n, RtDType dt, const void *x, void *y)
{
    ActJob j = {act, dt, x, NULL, NULL, y, false};
    rt__parallel_range(n, act_fwd_range, &j);
}

static void act_bwd_range(void *p, size_t lo, size_t hi)
{
    const ActJob *j = p;
    float vb[RT_CHUNK], gb[RT_CHUNK], ob[RT_CHUNK];
    const void *src = j->act == RT_ACT_SOFTSIGN ? j->x : j->y;
    RT_CHUNKS_IN(lo, hi, off, m) {
        const float *v = rt__view(src, off, m, j->dt, vb);
        const float *g = rt__view(j->dy, off, m, j->dt, gb);
        float *r = rt__out(j->out, off, j->dt, j->acc, ob);
        switch (j->act) {
        case RT_ACT_RELU: relu_grad_f32(r, g, v, m); break;
        case RT_ACT_SIGMOID:
            for (size_t i = 0; i < m; i++) r[i] = g[i] * ampc_sigmoid_grad_y(v[i]);
            break;
        case RT_ACT_TANH:
            for (size_t i = 0; i < m; i++) r[i] = g[i] * ampc_tanh_grad_y(v[i]);
            break;
        case RT_ACT_SOFTRELU:
            for (size_t i = 0; i < m; i++) r[i] = g[i] * ampc_softrelu_grad_y(v[i]);
            break;
        case RT_ACT_SOFTSIGN:
            for (size_t i = 0; i < m; i++) r[i] = g[i] * ampc_softsign_grad(v[i]);
            break;
        }
        rt__commit(j->out, off, r, m, j->dt, j->acc);
    }
}

void rt_activation_backward(RtAct act, size_t n, RtDType dt, const void *x, const void *y,
                            const void *dy, void *dx, bool accumulate)
{
    ActJob j = {act, dt, x, y, dy, dx, accumulate};
    rt__parallel_range(n, act_bwd_range, &j);
}

/* ---- LeakyReLU ------------------------------------------------------------ */

static inline float lrelu(RtLeaky t, float x, float a)
{
    switch (t) {
    case RT_LRELU_LEAKY: return ampc_leaky(x, a);
    case RT_LRELU_ELU: return ampc_elu(x, a);
    case RT_LRELU_SELU: return ampc_selu(x);
    case RT_LRELU_PRELU: return ampc_prelu(x, a);
    }
    return 0.0f;
}

/* d y / d x, through the input */
static inline float lrelu_grad(RtLeaky t, float x, float a)
{
    switch (t) {
    case RT_LRELU_LEAKY: return ampc_leaky_grad(x, a);
    case RT_LRELU_ELU: return ampc_elu_grad(x, a);
    case RT_LRELU_SELU: return ampc_selu_grad(x);
    case RT_LRELU_PRELU: return ampc_prelu_grad(x, a);
    }
    return 0.0f;
}

/* The slope of channel ch: gamma[ch] for prelu, else the attribute. */
static inline float slope_of(RtLeaky t, const void *gamma, int64_t ch, RtDType dt, float slope)
{
    return t == RT_LRELU_PRELU ? rt__get(gamma, (size_t)ch, dt) : slope;
}

void rt_leaky_relu_forward(RtLeaky t, int64_t outer, int64_t c, int64_t inner, RtDType dt,
                           const void *x, const void *gamma, float slope, void *y)
{
    float xb[RT_CHUNK], yb[RT_CHUNK];
    size_t inn = (size_t)inner;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t ch = 0; ch < c; ch++) {
            float a = slope_of(t, gamma, ch, dt, slope);
            size_t base = ((size_t)o * (size_t)c + (size_t)ch) * inn;
            RT_CHUNKS(inn, j, m) {
                size_t off = base + j;
                const float *v = rt__view(x, off, m, dt, xb);
                float *r = rt__out(y, off, dt, false, yb);
                for (size_t i = 0; i < m; i++)
                    r[i] = lrelu(t, v[i], a);
                rt__commit(y, off, r, m, dt, false);
            }
        }
}

void rt_leaky_relu_backward(RtLeaky t, int64_t outer, int64_t c, int64_t inner, RtDType dt,
                            const void *x, const void *gamma, float slope, const void *dy,
                            void *dx, void *dgamma, bool acc_dx, bool acc_dgamma)
{
    float xb[RT_CHUNK], gb[RT_CHUNK], ob[RT_CHUNK];
    size_t inn = (size_t)inner;
    bool want_dgamma = t == RT_LRELU_PRELU && dgamma;
    for (int64_t ch = 0; ch < c; ch++) {
        float a = slope_of(t, gamma, ch, dt, slope);
        double sg = 0.0;
        for (int64_t o = 0; o < outer; o++) {
            size_t base = ((size_t)o * (size_t)c + (size_t)ch) * inn;
            RT_CHUNKS(inn, j, m) {
                size_t off = base + j;
                const float *v = rt__view(x, off, m, dt, xb);
                const float *g = rt__view(dy, off, m, dt, gb);
                if (want_dgamma)
                    for (size_t i = 0; i < m; i++)
                        sg += (double)(g[i] * ampc_prelu_grad_gamma(v[i]));
                if (!dx)
                    continue;
                float *r = rt__out(dx, off, dt, acc_dx, ob);
                for (size_t i = 0; i < m; i++)
                    r[i] = g[i] * lrelu_grad(t, v[i], a);
                rt__commit(dx, off, r, m, dt, acc_dx);
            }
        }
        if (want_dgamma)
            rt__set(dgamma, (size_t)ch, (float)sg, dt, acc_dgamma);
    }
}

/* ---- Dropout ---------------------------------------------------------------- */

void rt_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    ampc_philox4x32(ctr, key, out);
}

float rt_dropout_uniform(uint64_t seed, uint64_t step, uint32_t stream, uint64_t i)
{
    uint32_t r[4];
    ampc_dropout_block(seed, step, stream, i / 4, r);
    return ampc_u24(r[i % 4]);
}

/* out[i] = in[i] * (kept ? 1/(1-p) : 0) over [0, n) */
static void dropout_apply(size_t n, RtDType dt, const void *in, float p, uint64_t seed,
                          uint64_t step, uint32_t stream, void *out, bool acc)
{
    float scale = 1.0f / (1.0f - p);
    float vb[RT_CHUNK], ob[RT_CHUNK];
    RT_CHUNKS(n, off, m) { /* RT_CHUNK is a multiple of 4, so blocks align */
        const float *v = rt__view(in, off, m, dt, vb);
        float *r = rt__out(out, off, dt, acc, ob);
        for (size_t i = 0; i < m; i += 4) {
            uint32_t u[4];
            ampc_dropout_block(seed, step, stream, (off + i) / 4, u);
            for (size_t k = 0; k < 4 && i + k < m; k++)
                r[i + k] = ampc_u24(u[k]) >= p ? v[i + k] * scale : 0.0f;
        }
        rt__commit(out, off, r, m, dt, acc);
    }
}

void rt_dropout_forward(size_t n, RtDType dt, const void *x, float p, uint64_t seed,
                        uint64_t step, uint32_t stream, void *y)
{
    dropout_apply(n, dt, x, p, seed, step, stream, y, false);
}

void rt_dropout_backward(size_t n, RtDType dt, const void *dy, float p, uint64_t seed,
                         uint64_t step, uint32_t stream, void *dx, bool accumulate)
{
    dropout_apply(n, dt, dy, p, seed, step, stream, dx, accumulate);
}
