/*
 * batchnorm.cuh - BatchNorm (training forward, inference forward, backward)
 * on the GPU, bit for bit runtime/cpu/batchnorm.c, in one CUDA C++17 source
 * for nvcc (batchnorm.cu builds it after layout.cuh's helpers) and the
 * emulator (tests/runtime/test_cuda_layout_emu.c).
 *
 * x is viewed as [outer, c, inner] as RtBnDims says (NCHW: N, C, H*W; NHWC:
 * N*H*W, C, 1).  Each op is two launches:
 *   1. one thread per channel computes the channel's sums exactly as
 *      batchnorm.c does: segment by segment (image by image, chunks of 512
 *      along inner), each segment summed in double with two four-lane
 *      accumulators, their lanes combined as (a0+a1) then ((l0+l1)+(l2+l3)),
 *      the tail added one by one, then the segment added to the channel's
 *      total; then the per-channel constants (save_mean, save_invstd, the
 *      affine's scale and shift, or the backward's dgamma, dbeta, k, mdy,
 *      mdyx) into a small workspace;
 *   2. one thread per element applies them (y = x*scale + shift; dx =
 *      k*(dy - mdy - (x - mean)*invstd*mdyx), or k*dy with global stats),
 *      rounded once, accumulating when asked.
 * The first launch is sequential per channel: correct and bit-exact, but
 * slow for large N*H*W (a ResNet layer's 3.2 M elements per channel): the
 * reference, not the fast path.  In NCHW a two-level version (segments in
 * parallel, their sums added in order by a second launch) would give the
 * same bits; NHWC's view (inner 1) makes the CPU's order one sequential sum,
 * so a fast 16-bit BatchNorm (a block reduction, cuDNN) differs by rounding
 * and is tested against this one with a tolerance (docs/backend-cuda.md).
 * No shared memory, barriers or warp intrinsics; the two launches
 * communicate through global memory only.
 * The fused BatchNorm + relu's backward is the backward with dy masked by
 * the relu's output as it is read (ry); its forward (batchnorm.c) is the
 * forward then ampc_cu_relu in place.  The moving statistics' update is
 * one thread per channel, writing nothing on a step the step state's flag
 * skips.
 */
#ifndef AMPC_CUDA_BATCHNORM_CUH
#define AMPC_CUDA_BATCHNORM_CUH

#include <math.h>

#include "cuda/rt_cuda.h"
#include "kernels/act.h"

#ifndef AMPC_CUDA_LAYOUT_CUH
#error "include cuda/layout.cuh before cuda/batchnorm.cuh"
#endif

#define AMPC_BN_CHUNK 512 /* runtime/cpu/cpu.h's RT_CHUNK: the segments' length */

/* the workspace: per channel three floats (scale, shift / k, mdy, mdyx) */

/* batchnorm.c's seg_moments on x[at, at+m): *s1 += sum (v-k), *s2 += sum (v-k)^2 */
static inline __device__ void ampc_bn_seg_moments(ampc_dptr<const void> x, size_t at, size_t m,
                                                  int dt, double k, double *s1, double *s2)
{
    double a0[4] = {0, 0, 0, 0}, a1[4] = {0, 0, 0, 0}, q0[4] = {0, 0, 0, 0},
           q1[4] = {0, 0, 0, 0};
    size_t i = 0;
    for (; i + 8 <= m; i += 8)
        for (int l = 0; l < 4; l++) {
            double e0 = (double)ampc_lay_load(x, at + i + l, dt) - k;
            double e1 = (double)ampc_lay_load(x, at + i + 4 + l, dt) - k;
            a0[l] += e0;
            a1[l] += e1;
            q0[l] += e0 * e0;
            q1[l] += e1 * e1;
        }
    double a[4], q[4];
    for (int l = 0; l < 4; l++)
        a[l] = a0[l] + a1[l], q[l] = q0[l] + q1[l];
    double t1 = (a[0] + a[1]) + (a[2] + a[3]), t2 = (q[0] + q[1]) + (q[2] + q[3]);
    for (; i < m; i++) {
        double e = (double)ampc_lay_load(x, at + i, dt) - k;
        t1 += e;
        t2 += e * e;
    }
    *s1 += t1;
    *s2 += t2;
}

/* dy[i], or with the fused relu (ry) dy[i] * relu'(ry[i]) rounded to dt, as the
 * unfused relu backward stores it (batchnorm.c's relu_masked) */
static inline __device__ float ampc_bn_dy(ampc_dptr<const void> dy, ampc_dptr<const void> ry,
                                          size_t i, int dt)
{
    float g = ampc_lay_load(dy, i, dt);
    if (!ry)
        return g;
    g = g * ampc_relu_grad_y(ampc_lay_load(ry, i, dt));
    if (dt == AMPC_DT_F16)
        return ampc_half_to_float(ampc_float_to_half(g));
    if (dt == AMPC_DT_BF16)
        return ampc_bf16_to_float(ampc_float_to_bf16(g));
    return g;
}

/* batchnorm.c's seg_bwd_sums: *sdy += sum g, *sdyx += sum g*((v - mean)*invstd) */
static inline __device__ void ampc_bn_seg_bwd(ampc_dptr<const void> dy, ampc_dptr<const void> ry,
                                              ampc_dptr<const void> x, size_t at, size_t m, int dt,
                                              float mean, float invstd, double *sdy, double *sdyx)
{
    double a0[4] = {0, 0, 0, 0}, a1[4] = {0, 0, 0, 0}, b0[4] = {0, 0, 0, 0},
           b1[4] = {0, 0, 0, 0};
    size_t i = 0;
    for (; i + 8 <= m; i += 8)
        for (int l = 0; l < 4; l++) {
            double g0 = ampc_bn_dy(dy, ry, at + i + l, dt);
            double g1 = ampc_bn_dy(dy, ry, at + i + 4 + l, dt);
            double x0 = (double)((ampc_lay_load(x, at + i + l, dt) - mean) * invstd);
            double x1 = (double)((ampc_lay_load(x, at + i + 4 + l, dt) - mean) * invstd);
            a0[l] += g0;
            a1[l] += g1;
            b0[l] += g0 * x0;
            b1[l] += g1 * x1;
        }
    double a[4], b[4];
    for (int l = 0; l < 4; l++)
        a[l] = a0[l] + a1[l], b[l] = b0[l] + b1[l];
    double s = (a[0] + a[1]) + (a[2] + a[3]), t = (b[0] + b[1]) + (b[2] + b[3]);
    for (; i < m; i++) {
        float g = ampc_bn_dy(dy, ry, at + i, dt);
        s += g;
        t += (double)g * (double)((ampc_lay_load(x, at + i, dt) - mean) * invstd);
    }
    *sdy += s;
    *sdyx += t;
}

/* the segments of channel ch: image by image, chunks of AMPC_BN_CHUNK */
#define AMPC_BN_SEGMENTS(outer, c, inner, ch, at, m, body)                                   \
    for (size_t o_ = 0; o_ < (outer); o_++)                                                 \
        for (size_t j_ = 0; j_ < (inner); j_ += AMPC_BN_CHUNK) {                            \
            size_t at = (o_ * (size_t)(c) + (ch)) * (inner) + j_;                           \
            size_t m = (inner) - j_ < AMPC_BN_CHUNK ? (inner) - j_ : AMPC_BN_CHUNK;         \
            body                                                                            \
        }

__global__ void ampc_k_bn_train_stats(size_t outer, int c, size_t inner, int dt,
                                      ampc_dptr<const void> x, ampc_dptr<const float> gamma,
                                      ampc_dptr<const float> beta, float eps, int fix_gamma,
                                      ampc_dptr<float> save_mean, ampc_dptr<float> save_invstd,
                                      ampc_dptr<float> ws)
{
    AMPC_LAY_FOR(ch, (size_t)c)
    {
        double s1 = 0.0, s2 = 0.0, cnt = (double)outer * (double)inner;
        double k = ampc_lay_load(x, ch * inner, dt);
        AMPC_BN_SEGMENTS(outer, c, inner, ch, at, m,
                         { ampc_bn_seg_moments(x, at, m, dt, k, &s1, &s2); })
        double m1 = s1 / cnt, var = s2 / cnt - m1 * m1;
        double mean = k + m1;
        var = var > 0.0 ? var : 0.0;
        float fmean = (float)mean, invstd = (float)(1.0 / sqrt(var + (double)eps));
        save_mean[ch] = fmean;
        save_invstd[ch] = invstd;
        float scale = (fix_gamma ? 1.0f : (float)gamma[ch]) * invstd;
        ws[ch] = scale;
        ws[(size_t)c + ch] = beta[ch] - fmean * scale;
    }
}

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

__global__ void ampc_k_bn_affine(size_t outer, int c, size_t inner, int dt,
                                 ampc_dptr<const void> x, ampc_dptr<const float> ws,
                                 ampc_dptr<void> y)
{
    AMPC_LAY_FOR(i, outer * (size_t)c * inner)
    {
        size_t ch = i / inner % (size_t)c;
        ampc_lay_store(y, i, dt, ampc_lay_load(x, i, dt) * ws[ch] + ws[(size_t)c + ch], 0);
    }
}

__global__ void ampc_k_bn_bwd_sums(size_t outer, int c, size_t inner, int dt,
                                   ampc_dptr<const void> x, ampc_dptr<const void> ry,
                                   ampc_dptr<const void> dy, ampc_dptr<const float> gamma,
                                   ampc_dptr<const float> save_mean,
                                   ampc_dptr<const float> save_invstd, int fix_gamma,
                                   ampc_dptr<float> dgamma, ampc_dptr<float> dbeta, int acc_param,
                                   ampc_dptr<float> ws)
{
    AMPC_LAY_FOR(ch, (size_t)c)
    {
        double sdy = 0.0, sdyx = 0.0, cnt = (double)outer * (double)inner;
        float mean = save_mean[ch], invstd = save_invstd[ch];
        AMPC_BN_SEGMENTS(outer, c, inner, ch, at, m,
                         { ampc_bn_seg_bwd(dy, ry, x, at, m, dt, mean, invstd, &sdy, &sdyx); })
        if (dbeta)
            dbeta[ch] = (acc_param ? (float)dbeta[ch] : 0.0f) + (float)sdy;
        if (dgamma && !(fix_gamma && acc_param))
            dgamma[ch] = fix_gamma ? 0.0f : (acc_param ? (float)dgamma[ch] : 0.0f) + (float)sdyx;
        ws[ch] = (fix_gamma ? 1.0f : (float)gamma[ch]) * invstd;
        ws[(size_t)c + ch] = (float)(sdy / cnt);
        ws[2 * (size_t)c + ch] = (float)(sdyx / cnt);
    }
}

__global__ void ampc_k_bn_bwd_dx(size_t outer, int c, size_t inner, int dt,
                                 ampc_dptr<const void> x, ampc_dptr<const void> ry,
                                 ampc_dptr<const void> dy, ampc_dptr<const float> save_mean,
                                 ampc_dptr<const float> save_invstd, int use_global_stats,
                                 ampc_dptr<const float> ws, ampc_dptr<void> dx, int acc)
{
    AMPC_LAY_FOR(i, outer * (size_t)c * inner)
    {
        size_t ch = i / inner % (size_t)c;
        float k = ws[ch], g = ampc_bn_dy(dy, ry, i, dt), r;
        if (use_global_stats)
            r = k * g;
        else
            r = k * (g - ws[(size_t)c + ch] -
                     (ampc_lay_load(x, i, dt) - save_mean[ch]) * save_invstd[ch] *
                         ws[2 * (size_t)c + ch]);
        ampc_lay_store(dx, i, dt, r, acc);
    }
}

/* ---- launchers: 0 or the first launch error; ws: 3*c floats of device memory ---- */

AMPC_LAY_API int ampc_cu_bn_forward_train(AmpcStream s, size_t outer, int c, size_t inner,
                                          int dt, const void *x, const float *gamma,
                                          const float *beta, float eps, int fix_gamma, void *y,
                                          float *save_mean, float *save_invstd, float *ws)
{
    size_t n = outer * (size_t)c * inner;
    if (n == 0)
        return 0;
    AMPC_LAUNCH(ampc_k_bn_train_stats, ampc_lay_grid((size_t)c), AMPC_LAY_THREADS, s, outer, c,
                inner, dt, x, gamma, beta, eps, fix_gamma, save_mean, save_invstd, ws);
    int e = AMPC_LAUNCH_ERROR();
    if (e)
        return e;
    AMPC_LAUNCH(ampc_k_bn_affine, ampc_lay_grid(n), AMPC_LAY_THREADS, s, outer, c, inner, dt, x,
                ws, y);
    return AMPC_LAUNCH_ERROR();
}

AMPC_LAY_API int ampc_cu_bn_forward_inference(AmpcStream s, size_t outer, int c, size_t inner,
                                              int dt, const void *x, const float *gamma,
                                              const float *beta, const float *moving_mean,
                                              const float *moving_var, float eps, int fix_gamma,
                                              void *y, float *save_mean, float *save_invstd,
                                              float *ws)
{
    size_t n = outer * (size_t)c * inner;
    if (n == 0)
        return 0;
    AMPC_LAUNCH(ampc_k_bn_infer_params, ampc_lay_grid((size_t)c), AMPC_LAY_THREADS, s, c, gamma,
                beta, moving_mean, moving_var, eps, fix_gamma, save_mean, save_invstd, ws);
    int e = AMPC_LAUNCH_ERROR();
    if (e)
        return e;
    AMPC_LAUNCH(ampc_k_bn_affine, ampc_lay_grid(n), AMPC_LAY_THREADS, s, outer, c, inner, dt, x,
                ws, y);
    return AMPC_LAUNCH_ERROR();
}

AMPC_LAY_API int ampc_cu_bn_relu_backward(AmpcStream s, size_t outer, int c, size_t inner,
                                          int dt, const void *x, const void *ry, const void *dy,
                                          const float *gamma, const float *save_mean,
                                          const float *save_invstd, int fix_gamma,
                                          int use_global_stats, void *dx, float *dgamma,
                                          float *dbeta, int acc_dx, int acc_param, float *ws)
{
    size_t n = outer * (size_t)c * inner;
    if (n == 0)
        return 0;
    AMPC_LAUNCH(ampc_k_bn_bwd_sums, ampc_lay_grid((size_t)c), AMPC_LAY_THREADS, s, outer, c,
                inner, dt, x, ry, dy, gamma, save_mean, save_invstd, fix_gamma, dgamma, dbeta,
                acc_param, ws);
    int e = AMPC_LAUNCH_ERROR();
    if (e || !dx)
        return e;
    AMPC_LAUNCH(ampc_k_bn_bwd_dx, ampc_lay_grid(n), AMPC_LAY_THREADS, s, outer, c, inner, dt, x,
                ry, dy, save_mean, save_invstd, use_global_stats, ws, dx, acc_dx);
    return AMPC_LAUNCH_ERROR();
}

AMPC_LAY_API int ampc_cu_bn_backward(AmpcStream s, size_t outer, int c, size_t inner, int dt,
                                     const void *x, const void *dy, const float *gamma,
                                     const float *save_mean, const float *save_invstd,
                                     int fix_gamma, int use_global_stats, void *dx,
                                     float *dgamma, float *dbeta, int acc_dx, int acc_param,
                                     float *ws)
{
    return ampc_cu_bn_relu_backward(s, outer, c, inner, dt, x, NULL, dy, gamma, save_mean,
                                    save_invstd, fix_gamma, use_global_stats, dx, dgamma, dbeta,
                                    acc_dx, acc_param, ws);
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
