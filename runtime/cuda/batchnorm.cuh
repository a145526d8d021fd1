/*
 * batchnorm.cuh - BatchNorm on the GPU as two-level deterministic
 * reductions (issue 25), in one CUDA C++17 source for nvcc (batchnorm.cu
 * builds it after layout.cuh's helpers) and the emulator
 * (tests/runtime/test_cuda_layout_emu.c).  The functions batchnorm.c's
 * rt_cuda_batchnorm_* call: plain, with its relu fused, and with the
 * residual add and relu fused; and the moving statistics' update.
 *
 * x is viewed as [outer, c, inner] (NHWC: N*H*W, C, 1).  The sums of a
 * channel follow kernels/bn_tree.h's tree, which depends on the sizes only:
 *   1. ampc_k_bn_tiles: a block of 256 threads takes one tile of a group of
 *      channels (8 slots of 8 channels when each row's channels can be read
 *      16 bytes at a time, else of 1) and 32 rows; row r sums the tile's
 *      elements r, r + 32, ... in double, 8 channels a load; the rows are
 *      combined in shared memory pairwise (row r += row r + h, h = 16..1)
 *      and the tile's partial written to the scratch: [tiles][c][2] doubles.
 *   2. ampc_k_bn_final: a warp per channel; lane l sums the partials of
 *      tiles l, l + 32, ... in order, the lanes combine by __shfl_down_sync
 *      (the same pairwise tree), and lane 0 writes the channel's results
 *      (save_mean, save_invstd and the affine; or dgamma, dbeta and dx's
 *      constants) as runtime/cpu/batchnorm.c computes them from its sums.
 *   3. one thread per 8 elements (ampc_k_bn_apply, ampc_k_bn_dx) writes y =
 *      x*scale + shift (then the add and the relu, each rounded to the dtype
 *      where the unfused ops store), or dx, with 16-byte loads and stores;
 *      per element where a vector would cross a channel's constants or a
 *      pointer is not 16-byte aligned.
 * No atomics: the results never depend on how the blocks are scheduled, and
 * the CPU twin's ordered mode (RtBnDims.order = RT_BN_ORDER_TILED) gives the
 * same bits, which the emulator tests compare, and the GPU tests too.  The
 * backward of the add fusion writes the relu's gradient (the shortcut's)
 * in step 1, where it reads dy and y, and step 3 reads it back instead of
 * dy and y.  The inference forward is ampc_k_bn_infer_params's constants
 * (1.0f/sqrtf, correctly rounded on both sides), then step 3.  The moving
 * statistics' update is one thread per channel, writing nothing on a step
 * the step state's flag skips.
 */
#ifndef AMPC_CUDA_BATCHNORM_CUH
#define AMPC_CUDA_BATCHNORM_CUH

#include <math.h>

#include "cuda/rt_cuda.h"
#include "cuda/vec.cuh"
#include "kernels/act.h"
#include "kernels/bn_tree.h"

#ifndef AMPC_CUDA_LAYOUT_CUH
#error "include cuda/layout.cuh before cuda/batchnorm.cuh"
#endif

/* the inference's constants from the moving statistics (batchnorm.c's
 * bn_infer_range): scale into ws[0, c), shift into ws[c, 2c) */
__global__ void ampc_k_bn_infer_params(int c, ampc_dptr<const float> gamma,
                                       ampc_dptr<const float> beta, ampc_dptr<const float> mean,
                                       ampc_dptr<const float> var, float eps, int fix_gamma,
                                       ampc_dptr<float> save_mean, ampc_dptr<float> save_invstd,
                                       ampc_dptr<float> ws)
{
    AMPC_LAY_FOR(ch, (size_t)c)
    {
        float invstd = 1.0f / sqrtf(var[ch] + eps);
        float scale = (fix_gamma ? 1.0f : (float)gamma[ch]) * invstd;
        ws[ch] = scale;
        ws[(size_t)c + ch] = beta[ch] - mean[ch] * scale;
        if (save_mean)
            save_mean[ch] = mean[ch];
        if (save_invstd)
            save_invstd[ch] = invstd;
    }
}

#define AMPC_BNR_THREADS 256 /* AMPC_BN_ROWS rows x AMPC_BNR_SLOTS channel slots */
#define AMPC_BNR_SLOTS 8
#define AMPC_BNR_WIDE (AMPC_BNR_SLOTS * AMPC_V8) /* channels of a block, 8 a slot */

/* The scratch, in floats from ws: the constants of the affine or of dx
 * (scale, shift; or k, mdy, mdyx, then mean and invstd again) in 5 rows of
 * c, then from a 256-byte boundary the tiles' partials, 2 doubles each. */
static inline AMPC_HD size_t ampc_bnr_const_bytes(int64_t c)
{
    return ((size_t)c * 5 * sizeof(float) + 255) / 256 * 256;
}

/* One tile's threads: the tile, its elements [t0, t1) of each channel, the
 * thread's row, its slot's first channel, whether the slot holds channels.
 * W, a template argument (8 or 1) so that the per-channel arrays stay in
 * registers, is the channels a slot takes. */
typedef struct {
    size_t tile, t0, t1;
    int ch0, row;
    bool active;
} AmpcBnTile;

template <int W>
static inline __device__ AmpcBnTile ampc_bnr_tile(size_t r, int c, size_t inner, int ngroups)
{
    AmpcBnTile t;
    size_t te = (size_t)ampc_bn_tile((int64_t)r, c);
    size_t group = blockIdx.x % (unsigned)ngroups;
    int slot;
    t.tile = blockIdx.x / (unsigned)ngroups;
    if (inner == 1) { /* a row's channels adjacent: slots across, rows down */
        slot = (int)(threadIdx.x % AMPC_BNR_SLOTS);
        t.row = (int)(threadIdx.x / AMPC_BNR_SLOTS);
    } else { /* a channel's elements adjacent: a warp's rows along them */
        slot = (int)(threadIdx.x / AMPC_BN_ROWS);
        t.row = (int)(threadIdx.x % AMPC_BN_ROWS);
    }
    t.ch0 = (int)(group * (size_t)(AMPC_BNR_SLOTS * W)) + slot * W;
    t.active = t.ch0 < c;
    t.t0 = t.tile * te;
    t.t1 = t.t0 + te < r ? t.t0 + te : r;
    return t;
}

/* element e of channel ch: (o, ch, i) for e = o*inner + i */
static inline __device__ size_t ampc_bnr_at(size_t e, int c, size_t inner, int ch)
{
    if (inner == 1)
        return e * (size_t)c + (size_t)ch;
    size_t o = e / inner;
    return (o * (size_t)c + (size_t)ch) * inner + (e - o * inner);
}

/* v[0, W) = the thread's channels of element e of p (8 through 16 bytes) */
template <int W>
static inline __device__ void ampc_bnr_read(ampc_dptr<const void> p, const AmpcBnTile *t, size_t e,
                                            int c, size_t inner, int dt, float *v)
{
    size_t at = ampc_bnr_at(e, c, inner, t->ch0);
    if (W == AMPC_V8)
        ampc_v8_load(p, at / AMPC_V8, dt, v);
    else
        v[0] = ampc_lay_load(p, at, dt);
}

template <int W>
static inline __device__ void ampc_bnr_write(ampc_dptr<void> p, const AmpcBnTile *t, size_t e,
                                             int c, size_t inner, int dt, const float *v)
{
    size_t at = ampc_bnr_at(e, c, inner, t->ch0);
    if (W == AMPC_V8)
        ampc_v8_store(p, at / AMPC_V8, dt, v);
    else
        ampc_lay_store(p, at, dt, v[0], 0);
}

/* The block's rows combined (row r += row r + h, h = 16..1) in shared memory,
 * then row 0 writes each channel's two sums as the tile's partials. */
template <int W>
static inline __device__ void ampc_bnr_tile_out(const AmpcBnTile *t, const double *a1,
                                                const double *a2, int c, ampc_dptr<double> sh,
                                                ampc_dptr<double> part)
{
    const size_t G = AMPC_BNR_WIDE, second = (size_t)AMPC_BN_ROWS * G;
    const size_t col = (size_t)(t->ch0 % AMPC_BNR_WIDE);
    if (t->active)
        for (int j = 0; j < W; j++) {
            sh[t->row * G + col + j] = a1[j];
            sh[second + t->row * G + col + j] = a2[j];
        }
    for (int h = AMPC_BN_ROWS / 2; h >= 1; h /= 2) {
        __syncthreads();
        if (t->active && t->row < h)
            for (int j = 0; j < W; j++) {
                size_t a = t->row * G + col + j, b = a + h * G;
                sh[a] = sh[a] + sh[b];
                sh[second + a] = sh[second + a] + sh[second + b];
            }
    }
    __syncthreads();
    if (t->active && t->row == 0)
        for (int j = 0; j < W; j++) {
            size_t at = (t->tile * (size_t)c + (size_t)t->ch0 + j) * 2;
            part[at] = sh[col + j];
            part[at + 1] = sh[second + col + j];
        }
}

/* step 1 of the statistics: the moments of x - k, k the channel's first element */
template <int W>
static inline __device__ void ampc_bnr_tiles(size_t outer, int c, size_t inner, int dt, int ngroups,
                                             ampc_dptr<const void> x, ampc_dptr<double> sh,
                                             ampc_dptr<double> part)
{
    AmpcBnTile t = ampc_bnr_tile<W>(outer * inner, c, inner, ngroups);
    double a1[W], a2[W], k[W];
    float v[W];
    for (int j = 0; j < W; j++)
        a1[j] = a2[j] = 0.0;
    if (t.active) {
        ampc_bnr_read<W>(x, &t, 0, c, inner, dt, v);
        for (int j = 0; j < W; j++)
            k[j] = (double)v[j];
        for (size_t e = t.t0 + (size_t)t.row; e < t.t1; e += AMPC_BN_ROWS) {
            ampc_bnr_read<W>(x, &t, e, c, inner, dt, v);
            for (int j = 0; j < W; j++) {
                double d = (double)v[j] - k[j];
                a1[j] += d;
                a2[j] += d * d;
            }
        }
    }
    ampc_bnr_tile_out<W>(&t, a1, a2, c, sh, part);
}

__global__ void ampc_k_bn_tiles(size_t outer, int c, size_t inner, int dt, int vec, int ngroups,
                                ampc_dptr<const void> x, ampc_dptr<double> part)
{
    AMPC_SHARED(double, sh, 2 * AMPC_BN_ROWS * AMPC_BNR_WIDE);
    if (vec == AMPC_V8)
        ampc_bnr_tiles<AMPC_V8>(outer, c, inner, dt, ngroups, x, sh, part);
    else
        ampc_bnr_tiles<1>(outer, c, inner, dt, ngroups, x, sh, part);
}

/* dy's value in the backward's sums: masked by the fused relu's y > 0 and
 * rounded to dt as the unfused relu backward stores it (ry), else itself */
static inline __device__ float ampc_bnr_masked(float g, ampc_dptr<const void> ry, float y, int dt)
{
    return ry ? ampc_v8_round(g * ampc_relu_grad_y(y), dt) : g;
}

/* step 1 of the backward: dy and dy * xhat (xhat = (x - mean)*invstd in
 * fp32); with dsc, dy masked by ry is stored there too (the relu's
 * gradient, which the add's shortcut receives) */
template <int W>
static inline __device__ void
ampc_bnr_grad_tiles(size_t outer, int c, size_t inner, int dt, int ngroups, ampc_dptr<const void> x,
                    ampc_dptr<const void> ry, ampc_dptr<const void> dy,
                    ampc_dptr<const float> save_mean, ampc_dptr<const float> save_invstd,
                    ampc_dptr<void> dsc, ampc_dptr<double> sh, ampc_dptr<double> part)
{
    AmpcBnTile t = ampc_bnr_tile<W>(outer * inner, c, inner, ngroups);
    double a1[W], a2[W];
    float mean[W], invstd[W], g[W], y[W], v[W];
    for (int j = 0; j < W; j++)
        a1[j] = a2[j] = 0.0;
    if (t.active) {
        for (int j = 0; j < W; j++) {
            mean[j] = save_mean[(size_t)t.ch0 + j];
            invstd[j] = save_invstd[(size_t)t.ch0 + j];
        }
        for (size_t e = t.t0 + (size_t)t.row; e < t.t1; e += AMPC_BN_ROWS) {
            ampc_bnr_read<W>(dy, &t, e, c, inner, dt, g);
            if (ry) {
                ampc_bnr_read<W>(ry, &t, e, c, inner, dt, y);
                for (int j = 0; j < W; j++)
                    g[j] = ampc_bnr_masked(g[j], ry, y[j], dt);
            }
            if (dsc)
                ampc_bnr_write<W>(dsc, &t, e, c, inner, dt, g);
            ampc_bnr_read<W>(x, &t, e, c, inner, dt, v);
            for (int j = 0; j < W; j++) {
                float xh = (v[j] - mean[j]) * invstd[j];
                a1[j] += (double)g[j];
                a2[j] += (double)g[j] * (double)xh;
            }
        }
    }
    ampc_bnr_tile_out<W>(&t, a1, a2, c, sh, part);
}

__global__ void ampc_k_bn_grad_tiles(size_t outer, int c, size_t inner, int dt, int vec,
                                     int ngroups, ampc_dptr<const void> x, ampc_dptr<const void> ry,
                                     ampc_dptr<const void> dy, ampc_dptr<const float> save_mean,
                                     ampc_dptr<const float> save_invstd, ampc_dptr<void> dsc,
                                     ampc_dptr<double> part)
{
    AMPC_SHARED(double, sh, 2 * AMPC_BN_ROWS * AMPC_BNR_WIDE);
    if (vec == AMPC_V8)
        ampc_bnr_grad_tiles<AMPC_V8>(outer, c, inner, dt, ngroups, x, ry, dy, save_mean,
                                     save_invstd, dsc, sh, part);
    else
        ampc_bnr_grad_tiles<1>(outer, c, inner, dt, ngroups, x, ry, dy, save_mean, save_invstd, dsc,
                               sh, part);
}

/* Step 2's sums of the warp's channel: lane l the tiles l, l + 32, ..., the
 * lanes by __shfl_down_sync; lane 0's are the channel's. */
static inline __device__ void ampc_bnr_lanes(ampc_dptr<const double> part, size_t ntiles, int c,
                                             int ch, double *s1, double *s2)
{
    unsigned lane = threadIdx.x % 32u;
    double a = 0.0, b = 0.0;
    for (size_t t = lane; t < ntiles; t += AMPC_BN_LANES) {
        a += part[(t * (size_t)c + (size_t)ch) * 2];
        b += part[(t * (size_t)c + (size_t)ch) * 2 + 1];
    }
    for (int h = AMPC_BN_LANES / 2; h >= 1; h /= 2) {
        a = a + __shfl_down_sync(0xffffffffu, a, h);
        b = b + __shfl_down_sync(0xffffffffu, b, h);
    }
    *s1 = a;
    *s2 = b;
}

/* The warp's channel *ch (8 a block) and its two sums; true in its lane 0,
 * which writes the channel's results (a warp past the last channel does
 * nothing, all its lanes alike) */
static inline __device__ bool ampc_bnr_channel(ampc_dptr<const double> part, size_t ntiles, int c,
                                               int *ch, double *s1, double *s2)
{
    *ch = (int)(blockIdx.x * 8 + threadIdx.x / 32);
    if (*ch >= c)
        return false;
    ampc_bnr_lanes(part, ntiles, c, *ch, s1, s2);
    return threadIdx.x % 32 == 0;
}

/* step 2 of the statistics: batchnorm.c's bn_train_range from the sums */
__global__ void ampc_k_bn_final(size_t outer, int c, size_t inner, size_t ntiles,
                                ampc_dptr<const double> part, ampc_dptr<const void> x, int dt,
                                ampc_dptr<const float> gamma, ampc_dptr<const float> beta,
                                float eps, int fix_gamma, ampc_dptr<float> save_mean,
                                ampc_dptr<float> save_invstd, ampc_dptr<float> ws)
{
    int ch;
    double s1, s2;
    if (!ampc_bnr_channel(part, ntiles, c, &ch, &s1, &s2))
        return;
    double cnt = (double)outer * (double)inner;
    double m1 = s1 / cnt, var = s2 / cnt - m1 * m1;
    double mean = (double)ampc_lay_load(x, (size_t)ch * inner, dt) + m1;
    var = var > 0.0 ? var : 0.0;
    float fmean = (float)mean, invstd = (float)(1.0 / sqrt(var + (double)eps));
    save_mean[ch] = fmean;
    save_invstd[ch] = invstd;
    float scale = (fix_gamma ? 1.0f : (float)gamma[ch]) * invstd;
    ws[ch] = scale;
    ws[(size_t)c + ch] = beta[ch] - fmean * scale;
}

/* step 2 from statistics given (the conv_bn_stats fusion: cuDNN's GEN_STATS
 * after the convolution wrote them): stats[0, c) the sums, [c, 2c) the sums
 * of squares, fp32; batchnorm.c's bn_train_range with them, a thread per
 * channel (nothing to reduce) */
__global__ void ampc_k_bn_final_sums(size_t outer, int c, size_t inner,
                                     ampc_dptr<const float> stats, ampc_dptr<const float> gamma,
                                     ampc_dptr<const float> beta, float eps, int fix_gamma,
                                     ampc_dptr<float> save_mean, ampc_dptr<float> save_invstd,
                                     ampc_dptr<float> ws)
{
    AMPC_LAY_FOR(ch, (size_t)c)
    {
        double cnt = (double)outer * (double)inner;
        double m1 = (double)stats[ch] / cnt, var = (double)stats[(size_t)c + ch] / cnt - m1 * m1;
        var = var > 0.0 ? var : 0.0;
        float fmean = (float)m1, invstd = (float)(1.0 / sqrt(var + (double)eps));
        save_mean[ch] = fmean;
        save_invstd[ch] = invstd;
        float scale = (fix_gamma ? 1.0f : (float)gamma[ch]) * invstd;
        ws[ch] = scale;
        ws[(size_t)c + ch] = beta[ch] - fmean * scale;
    }
}

/* step 2 of the backward: batchnorm.c's bn_bwd_range from the sums: dgamma,
 * dbeta, and dx's constants k, mdy, mdyx with mean and invstd beside them */
__global__ void ampc_k_bn_grad_final(size_t outer, int c, size_t inner, size_t ntiles,
                                     ampc_dptr<const double> part, ampc_dptr<const float> gamma,
                                     ampc_dptr<const float> save_mean,
                                     ampc_dptr<const float> save_invstd, int fix_gamma,
                                     ampc_dptr<float> dgamma, ampc_dptr<float> dbeta, int acc_param,
                                     ampc_dptr<float> ws)
{
    int ch;
    double sdy, sdyx;
    if (!ampc_bnr_channel(part, ntiles, c, &ch, &sdy, &sdyx))
        return;
    double cnt = (double)outer * (double)inner;
    if (dbeta)
        dbeta[ch] = (acc_param ? (float)dbeta[ch] : 0.0f) + (float)sdy;
    if (dgamma && !(fix_gamma && acc_param))
        dgamma[ch] = fix_gamma ? 0.0f : (acc_param ? (float)dgamma[ch] : 0.0f) + (float)sdyx;
    float invstd = save_invstd[ch];
    size_t cc = (size_t)c;
    ws[ch] = (fix_gamma ? 1.0f : (float)gamma[ch]) * invstd;
    ws[cc + ch] = (float)(sdy / cnt);
    ws[2 * cc + ch] = (float)(sdyx / cnt);
    ws[3 * cc + ch] = save_mean[ch];
    ws[4 * cc + ch] = invstd;
}

/* ---- step 3: one thread per 8 elements --------------------------------------------- */

/* the constants row `row` of ws for elements i..i+7: 8 channels (NHWC) or one */
static inline __device__ void ampc_bnr_consts(ampc_dptr<const float> ws, int row, size_t i, int c,
                                              size_t inner, float *k)
{
    size_t cc = (size_t)c;
    if (inner == 1) {
        ampc_v8_load_f32(ws, (row * cc + i % cc) / AMPC_V8, k);
    } else {
        float v = ws[row * cc + i / inner % cc];
        for (int j = 0; j < AMPC_V8; j++)
            k[j] = v;
    }
}

/* y = x*scale + shift, then + sc and relu, each rounded to dt where the
 * unfused ops store (batchnorm.c's group_affine) */
static inline __device__ float ampc_bnr_y(float x, float scale, float shift, float sc, int add,
                                          int relu, int dt)
{
    float r = x * scale + shift;
    if (add)
        r = ampc_v8_round(r, dt) + sc;
    if (relu)
        r = ampc_relu(ampc_v8_round(r, dt));
    return r;
}

__global__ void ampc_k_bn_apply(size_t outer, int c, size_t inner, int dt, int vec,
                                ampc_dptr<const void> x, ampc_dptr<const void> sc, int relu,
                                ampc_dptr<const float> ws, ampc_dptr<void> y)
{
    size_t n = outer * (size_t)c * inner, nq = vec ? n / AMPC_V8 : 0;
    AMPC_LAY_FOR(q, nq)
    {
        float xv[AMPC_V8], sv[AMPC_V8], a[AMPC_V8], b[AMPC_V8], r[AMPC_V8];
        ampc_v8_load(x, q, dt, xv);
        if (sc)
            ampc_v8_load(sc, q, dt, sv);
        ampc_bnr_consts(ws, 0, q * AMPC_V8, c, inner, a);
        ampc_bnr_consts(ws, 1, q * AMPC_V8, c, inner, b);
        for (int j = 0; j < AMPC_V8; j++)
            r[j] = ampc_bnr_y(xv[j], a[j], b[j], sc ? sv[j] : 0.0f, sc ? 1 : 0, relu, dt);
        ampc_v8_store(y, q, dt, r);
    }
    AMPC_LAY_FOR(i0, n - nq * AMPC_V8)
    {
        size_t i = nq * AMPC_V8 + i0, ch = i / inner % (size_t)c;
        float s = sc ? ampc_lay_load(sc, i, dt) : 0.0f;
        ampc_lay_store(y, i, dt,
                       ampc_bnr_y(ampc_lay_load(x, i, dt), ws[ch], ws[(size_t)c + ch], s,
                                  sc ? 1 : 0, relu, dt),
                       0);
    }
}

/* dx = k*(g - mdy - (x - mean)*invstd*mdyx), or k*g with global statistics
 * (batchnorm.c's seg_bwd_dx, seg_scale), g = dy masked by ry (or dsc, the
 * masked dy step 1 wrote: ry NULL) */
static inline __device__ float ampc_bnr_dx(float g, float x, const float *k, int glob)
{
    return glob ? k[0] * g : k[0] * (g - k[1] - (x - k[3]) * k[4] * k[2]);
}

__global__ void ampc_k_bn_dx(size_t outer, int c, size_t inner, int dt, int vec,
                             ampc_dptr<const void> x, ampc_dptr<const void> ry,
                             ampc_dptr<const void> g, int glob, ampc_dptr<const float> ws,
                             ampc_dptr<void> dx, int acc)
{
    size_t n = outer * (size_t)c * inner, nq = vec ? n / AMPC_V8 : 0;
    AMPC_LAY_FOR(q, nq)
    {
        float gv[AMPC_V8], yv[AMPC_V8], xv[AMPC_V8], k[5][AMPC_V8], r[AMPC_V8], old[AMPC_V8];
        ampc_v8_load(g, q, dt, gv);
        if (ry)
            ampc_v8_load(ry, q, dt, yv);
        if (!glob)
            ampc_v8_load(x, q, dt, xv);
        for (int row = 0; row < (glob ? 1 : 5); row++)
            ampc_bnr_consts(ws, row, q * AMPC_V8, c, inner, k[row]);
        if (acc)
            ampc_v8_load(dx, q, dt, old);
        for (int j = 0; j < AMPC_V8; j++) {
            float kj[5] = {k[0][j], glob ? 0.0f : k[1][j], glob ? 0.0f : k[2][j],
                           glob ? 0.0f : k[3][j], glob ? 0.0f : k[4][j]};
            float gj = ampc_bnr_masked(gv[j], ry, ry ? yv[j] : 0.0f, dt);
            r[j] = ampc_bnr_dx(gj, glob ? 0.0f : xv[j], kj, glob);
            if (acc)
                r[j] = old[j] + r[j];
        }
        ampc_v8_store(dx, q, dt, r);
    }
    AMPC_LAY_FOR(i0, n - nq * AMPC_V8)
    {
        size_t i = nq * AMPC_V8 + i0, ch = i / inner % (size_t)c, cc = (size_t)c;
        float k[5] = {ws[ch], 0.0f, 0.0f, 0.0f, 0.0f};
        for (int row = 1; !glob && row < 5; row++)
            k[row] = ws[row * cc + ch];
        float gi =
            ampc_bnr_masked(ampc_lay_load(g, i, dt), ry, ry ? ampc_lay_load(ry, i, dt) : 0.0f, dt);
        ampc_lay_store(dx, i, dt, ampc_bnr_dx(gi, glob ? 0.0f : ampc_lay_load(x, i, dt), k, glob),
                       acc);
    }
}

/* ---- launchers: 0 or the first launch error -------------------------------------------- */

/* the scratch the calls on [outer, c, inner] need, and the most any of c
 * channels needs whatever outer and inner (rt_cuda_bn_reserve's) */
AMPC_LAY_API size_t ampc_batchnorm_ws_bytes(size_t outer, int c, size_t inner)
{
    return ampc_bnr_const_bytes(c) +
           2 * sizeof(double) * (size_t)ampc_bn_partials((int64_t)(outer * inner), c);
}

AMPC_LAY_API size_t ampc_batchnorm_ws_max(int c)
{
    size_t most = (size_t)AMPC_BN_BLOCKS * AMPC_BN_GROUP;
    return ampc_bnr_const_bytes(c) + 2 * sizeof(double) * (most > (size_t)c ? most : (size_t)c);
}

/* 8 when a row's channels can be read 16 bytes at a time (NHWC's view, c a
 * multiple of 8, every pointer 16-byte aligned), else 1 */
static inline int ampc_bnr_vec(int c, size_t inner, const void *a, const void *b, const void *p,
                               const void *q)
{
    return inner == 1 && c % AMPC_V8 == 0 && ampc_v8_aligned(a) && ampc_v8_aligned(b) &&
                   ampc_v8_aligned(p) && ampc_v8_aligned(q)
               ? AMPC_V8
               : 1;
}

/* step 3 runs 8 elements a thread when 8 neighbours share a channel (inner
 * a multiple of 8) or are 8 channels' (NHWC, c a multiple of 8) */
static inline int ampc_bnr_vec3(int c, size_t inner, const void *a, const void *b, const void *p,
                                const void *q, const void *ws)
{
    return ((inner == 1 && c % AMPC_V8 == 0) || inner % AMPC_V8 == 0) && ampc_v8_aligned(a) &&
           ampc_v8_aligned(b) && ampc_v8_aligned(p) && ampc_v8_aligned(q) && ampc_v8_aligned(ws);
}

/* step 2's block: a warp per channel, 8 at most (fewer for fewer channels) */
static inline unsigned ampc_bnr_final_threads(int c) { return 32u * (unsigned)(c < 8 ? c : 8); }

static inline unsigned ampc_bnr_groups(int c, int vec)
{
    return (unsigned)((c + AMPC_BNR_SLOTS * vec - 1) / (AMPC_BNR_SLOTS * vec));
}

/* Step 1's launch: the tiles, the groups of channels, the partials in ws */
typedef struct {
    size_t ntiles;
    int vec, ngroups;
    unsigned blocks;
    double *part;
} AmpcBnrPlan;

static inline AmpcBnrPlan ampc_bnr_plan(size_t outer, int c, size_t inner, int vec, void *ws)
{
    AmpcBnrPlan p;
    p.ntiles = (size_t)ampc_bn_tiles((int64_t)(outer * inner), c);
    p.vec = vec;
    p.ngroups = (int)ampc_bnr_groups(c, vec);
    p.blocks = (unsigned)p.ntiles * (unsigned)p.ngroups;
    p.part = (double *)((char *)ws + ampc_bnr_const_bytes(c));
    return p;
}

/* step 3 of the forward, after the constants (train or inference) */
static inline int ampc_bnr_apply(AmpcStream s, size_t outer, int c, size_t inner, int dt,
                                 const void *x, const void *sc, int relu, const float *ws, void *y)
{
    size_t n = outer * (size_t)c * inner;
    int v = ampc_bnr_vec3(c, inner, x, sc, y, NULL, ws);
    AMPC_LAUNCH(ampc_k_bn_apply, ampc_lay_grid(v ? n / AMPC_V8 : n), AMPC_LAY_THREADS, s, outer, c,
                inner, dt, v, x, sc, relu, ws, y);
    return AMPC_LAUNCH_ERROR();
}

/* BatchNorm's training forward: y = x*scale + shift (sc: + sc, relu: then
 * relu), save_mean and save_invstd; ws: ampc_batchnorm_ws_bytes of device memory */
AMPC_LAY_API int ampc_cu_batchnorm_forward_train(AmpcStream s, size_t outer, int c, size_t inner,
                                                 int dt, const void *x, const void *sc, int relu,
                                                 const float *gamma, const float *beta, float eps,
                                                 int fix_gamma, void *y, float *save_mean,
                                                 float *save_invstd, void *ws)
{
    if (outer * inner == 0 || c <= 0)
        return 0;
    AmpcBnrPlan p = ampc_bnr_plan(outer, c, inner, ampc_bnr_vec(c, inner, x, NULL, NULL, NULL), ws);
    AMPC_LAUNCH(ampc_k_bn_tiles, p.blocks, AMPC_BNR_THREADS, s, outer, c, inner, dt, p.vec,
                p.ngroups, x, p.part);
    int e = AMPC_LAUNCH_ERROR();
    if (e)
        return e;
    AMPC_LAUNCH(ampc_k_bn_final, (unsigned)((c + 7) / 8), ampc_bnr_final_threads(c), s, outer, c,
                inner, p.ntiles, p.part, x, dt, gamma, beta, eps, fix_gamma, save_mean, save_invstd,
                (float *)ws);
    e = AMPC_LAUNCH_ERROR();
    return e ? e : ampc_bnr_apply(s, outer, c, inner, dt, x, sc, relu, (const float *)ws, y);
}

/* The training forward from statistics given (stats: sums [c], then sums of
 * squares [c], fp32): their constants (ampc_k_bn_final_sums), then step 3,
 * reading x once.  Prepared for the conv_bn_stats fusion, which no program
 * enables yet (docs/backend-cuda.md). */
AMPC_LAY_API int ampc_cu_batchnorm_forward_train_sums(
    AmpcStream s, size_t outer, int c, size_t inner, int dt, const void *x, const void *sc,
    int relu, const float *stats, const float *gamma, const float *beta, float eps, int fix_gamma,
    void *y, float *save_mean, float *save_invstd, void *ws)
{
    if (outer * inner == 0 || c <= 0)
        return 0;
    AMPC_LAUNCH(ampc_k_bn_final_sums, ampc_lay_grid((size_t)c), AMPC_LAY_THREADS, s, outer, c,
                inner, stats, gamma, beta, eps, fix_gamma, save_mean, save_invstd, (float *)ws);
    int e = AMPC_LAUNCH_ERROR();
    return e ? e : ampc_bnr_apply(s, outer, c, inner, dt, x, sc, relu, (const float *)ws, y);
}

/* the inference forward: ampc_k_bn_infer_params's constants from the moving statistics */
AMPC_LAY_API int ampc_cu_batchnorm_forward_inference(AmpcStream s, size_t outer, int c,
                                                     size_t inner, int dt, const void *x,
                                                     const void *sc, int relu, const float *gamma,
                                                     const float *beta, const float *moving_mean,
                                                     const float *moving_var, float eps,
                                                     int fix_gamma, void *y, float *save_mean,
                                                     float *save_invstd, void *ws)
{
    if (outer * inner == 0 || c <= 0)
        return 0;
    AMPC_LAUNCH(ampc_k_bn_infer_params, ampc_lay_grid((size_t)c), AMPC_LAY_THREADS, s, c, gamma,
                beta, moving_mean, moving_var, eps, fix_gamma, save_mean, save_invstd, (float *)ws);
    int e = AMPC_LAUNCH_ERROR();
    return e ? e : ampc_bnr_apply(s, outer, c, inner, dt, x, sc, relu, (const float *)ws, y);
}

/* The backward: dgamma, dbeta and dx (any may be NULL) from dy, masked by
 * ry > 0 when ry is given (the fused relu's y); dsc: the masked dy written
 * too (the add fusion's shortcut gradient; may be dy itself).  dx may be
 * ry or x (it is written after both are read, at the same index). */
AMPC_LAY_API int ampc_cu_batchnorm_backward(AmpcStream s, size_t outer, int c, size_t inner, int dt,
                                            const void *x, const void *ry, const void *dy,
                                            void *dsc, const float *gamma, const float *save_mean,
                                            const float *save_invstd, int fix_gamma,
                                            int use_global_stats, void *dx, float *dgamma,
                                            float *dbeta, int acc_dx, int acc_param, void *ws)
{
    size_t r = outer * inner;
    if (r == 0 || c <= 0)
        return 0;
    AmpcBnrPlan p = ampc_bnr_plan(outer, c, inner, ampc_bnr_vec(c, inner, x, ry, dy, dsc), ws);
    AMPC_LAUNCH(ampc_k_bn_grad_tiles, p.blocks, AMPC_BNR_THREADS, s, outer, c, inner, dt, p.vec,
                p.ngroups, x, ry, dy, save_mean, save_invstd, dsc, p.part);
    int e = AMPC_LAUNCH_ERROR();
    if (e)
        return e;
    AMPC_LAUNCH(ampc_k_bn_grad_final, (unsigned)((c + 7) / 8), ampc_bnr_final_threads(c), s, outer,
                c, inner, p.ntiles, p.part, gamma, save_mean, save_invstd, fix_gamma, dgamma, dbeta,
                acc_param, (float *)ws);
    e = AMPC_LAUNCH_ERROR();
    if (e || !dx)
        return e;
    const void *g = dsc ? dsc : dy, *mask = dsc ? NULL : ry;
    size_t n = r * (size_t)c;
    int v = ampc_bnr_vec3(c, inner, x, mask, g, dx, ws);
    AMPC_LAUNCH(ampc_k_bn_dx, ampc_lay_grid(v ? n / AMPC_V8 : n), AMPC_LAY_THREADS, s, outer, c,
                inner, dt, v, x, mask, g, use_global_stats, (const float *)ws, dx, acc_dx);
    return AMPC_LAUNCH_ERROR();
}

/* ---- the moving statistics (rt_batchnorm_update_moving), skipped on the device ---------- */

__global__ void ampc_k_bn_moving(size_t c, int64_t count, ampc_dptr<const float> save_mean,
                                 ampc_dptr<const float> save_invstd, float eps, float momentum,
                                 ampc_dptr<float> moving_mean, ampc_dptr<float> moving_var,
                                 ampc_dptr<const RtStepState> step)
{
    /* a step a dynamic loss scale skips (its flag set) changes nothing */
    if (step && *AMPC_FIELD(step, dynamic) && *AMPC_FIELD(step, flag))
        return;
    AMPC_LAY_FOR(i, c)
    {
        double is = save_invstd[i];
        double var = 1.0 / (is * is) - (double)eps;
        if (var < 0.0)
            var = 0.0;
        if (count > 1)
            var *= (double)count / (double)(count - 1);
        moving_mean[i] = moving_mean[i] * momentum + save_mean[i] * (1.0f - momentum);
        moving_var[i] = moving_var[i] * momentum + (float)var * (1.0f - momentum);
    }
}

/* nothing on a step the step's state skips (read on the device) */
AMPC_LAY_API void rt_cuda_batchnorm_update_moving(RtCudaCtx *cx, int64_t c, int64_t count,
                                                 const float *save_mean, const float *save_invstd,
                                                 float eps, float momentum, float *moving_mean,
                                                 float *moving_var, const RtStepState *step)
{
    if (c <= 0)
        return;
    AMPC_LAUNCH(ampc_k_bn_moving, ampc_lay_grid((size_t)c), AMPC_LAY_THREADS, cx->stream, (size_t)c,
                count, save_mean, save_invstd, eps, momentum, moving_mean, moving_var, step);
    AMPC_CHECK(AMPC_API_CUDA, AMPC_LAUNCH_ERROR());
}

#endif /* AMPC_CUDA_BATCHNORM_CUH */
