/* batchnorm.c - BatchNorm over [outer, c, inner] (NCHW with axis 1: N, C, H*W).
 *
 * Training: per channel, mean and biased variance over the m = outer*inner
 * elements (two passes, double accumulators), save_mean and save_invstd =
 * 1/sqrt(var + eps) for the backward, y = x*scale + shift in fp32 with
 * scale = gamma*invstd and shift = beta - mean*scale.  The moving statistics
 * are updated by a separate call (rt_batchnorm_update_moving) with the
 * unbiased variance, as cuDNN does (MXNet's CPU path uses the biased one;
 * see docs/backend-cpu.md).  Backward with batch statistics:
 *   dbeta = sum dy,  dgamma = sum dy*xhat,
 *   dx = gamma*invstd * (dy - dbeta/m - xhat*dgamma/m)
 * and with global statistics (constants) dx = gamma*invstd*dy.
 */
#include <math.h>

#include "cpu.h"

/* Calls body(float *v, size_t m, size_t off) over channel c's segments:
 * v is a fp32 view of x[off, off+m). */
#define FOR_CHANNEL_CHUNKS(d, c, x, dt, buf, v, m, off, body)                          \
    for (int64_t o_ = 0; o_ < (d)->outer; o_++) {                                     \
        size_t base_ = ((size_t)o_ * (size_t)(d)->c + (size_t)(c)) * (size_t)(d)->inner; \
        for (size_t j_ = 0; j_ < (size_t)(d)->inner; j_ += RT_CHUNK) {                \
            size_t m = (size_t)(d)->inner - j_ < RT_CHUNK ? (size_t)(d)->inner - j_ : RT_CHUNK; \
            size_t off = base_ + j_;                                                  \
            const float *v = rt__view(x, off, m, dt, buf);                            \
            body                                                                      \
        }                                                                             \
    }

/* y = x*scale[c] + shift[c] */
static void apply_affine(const RtBnDims *d, RtDType dt, const void *x, int64_t c, float scale,
                         float shift, void *y)
{
    float in[RT_CHUNK], out[RT_CHUNK];
    FOR_CHANNEL_CHUNKS(d, c, x, dt, in, v, m, off, {
        float *r = rt__out(y, off, dt, false, out);
        for (size_t i = 0; i < m; i++)
            r[i] = v[i] * scale + shift;
        if (r == out)
            rt__commit(y, off, out, m, dt, false);
    })
}

void rt_batchnorm_forward_train(const RtBnDims *d, RtDType dt, const void *x,
                                const float *gamma, const float *beta, float eps,
                                bool fix_gamma, void *y, float *save_mean, float *save_invstd)
{
    double cnt = (double)d->outer * (double)d->inner;
    float buf[RT_CHUNK];
    for (int64_t c = 0; c < d->c; c++) {
        double s = 0.0;
        FOR_CHANNEL_CHUNKS(d, c, x, dt, buf, v, m, off, {
            (void)off;
            for (size_t i = 0; i < m; i++)
                s += v[i];
        })
        double mean = s / cnt, q = 0.0;
        FOR_CHANNEL_CHUNKS(d, c, x, dt, buf, v, m, off, {
            (void)off;
            for (size_t i = 0; i < m; i++) {
                double e = (double)v[i] - mean;
                q += e * e;
            }
        })
        float fmean = (float)mean, invstd = (float)(1.0 / sqrt(q / cnt + (double)eps));
        save_mean[c] = fmean;
        save_invstd[c] = invstd;
        float scale = (fix_gamma ? 1.0f : gamma[c]) * invstd;
        apply_affine(d, dt, x, c, scale, beta[c] - fmean * scale, y);
    }
}

void rt_batchnorm_update_moving(int64_t c, int64_t count, const float *save_mean,
                                const float *save_invstd, float eps, float momentum,
                                float *moving_mean, float *moving_var)
{
    for (int64_t i = 0; i < c; i++) {
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

void rt_batchnorm_forward_inference(const RtBnDims *d, RtDType dt, const void *x,
                                    const float *gamma, const float *beta,
                                    const float *moving_mean, const float *moving_var,
                                    float eps, bool fix_gamma, void *y, float *save_mean,
                                    float *save_invstd)
{
    for (int64_t c = 0; c < d->c; c++) {
        float invstd = 1.0f / sqrtf(moving_var[c] + eps);
        float scale = (fix_gamma ? 1.0f : gamma[c]) * invstd;
        if (save_mean)
            save_mean[c] = moving_mean[c];
        if (save_invstd)
            save_invstd[c] = invstd;
        apply_affine(d, dt, x, c, scale, beta[c] - moving_mean[c] * scale, y);
    }
}

void rt_batchnorm_backward(const RtBnDims *d, RtDType dt, const void *x, const void *dy,
                           const float *gamma, const float *save_mean, const float *save_invstd,
                           bool fix_gamma, bool use_global_stats, void *dx, float *dgamma,
                           float *dbeta, bool acc_dx, bool acc_param)
{
    double cnt = (double)d->outer * (double)d->inner;
    float xb[RT_CHUNK], dyb[RT_CHUNK], out[RT_CHUNK];
    for (int64_t c = 0; c < d->c; c++) {
        float mean = save_mean[c], invstd = save_invstd[c];
        double sdy = 0.0, sdyx = 0.0;
        FOR_CHANNEL_CHUNKS(d, c, dy, dt, dyb, g, m, off, {
            const float *v = rt__view(x, off, m, dt, xb);
            for (size_t i = 0; i < m; i++) {
                sdy += g[i];
                sdyx += (double)g[i] * (double)((v[i] - mean) * invstd);
            }
        })
        if (dbeta)
            dbeta[c] = (acc_param ? dbeta[c] : 0.0f) + (float)sdy;
        if (dgamma && !(fix_gamma && acc_param))
            dgamma[c] = fix_gamma ? 0.0f : (acc_param ? dgamma[c] : 0.0f) + (float)sdyx;
        if (!dx)
            continue;
        float k = (fix_gamma ? 1.0f : gamma[c]) * invstd;
        float mdy = (float)(sdy / cnt), mdyx = (float)(sdyx / cnt);
        FOR_CHANNEL_CHUNKS(d, c, dy, dt, dyb, g, m, off, {
            float *r = rt__out(dx, off, dt, acc_dx, out);
            if (use_global_stats) {
                for (size_t i = 0; i < m; i++)
                    r[i] = k * g[i];
            } else {
                const float *v = rt__view(x, off, m, dt, xb);
                for (size_t i = 0; i < m; i++)
                    r[i] = k * (g[i] - mdy - (v[i] - mean) * invstd * mdyx);
            }
            if (r == out)
                rt__commit(dx, off, out, m, dt, acc_dx);
        })
    }
}
