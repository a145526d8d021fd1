/* fc.c - FullyConnected with flatten semantics, by cblas_sgemm.
 *
 *   forward          y [n, h]  = x [n, in] . w^T [in, h] + bias
 *   backward data    dx [n, in] = dy [n, h] . w [h, in]
 *   backward weight  dw [h, in] = dy^T . x,   dbias = sum over n of dy
 * 16-bit tensors are widened into the workspace, the GEMM runs in fp32
 * (beta = 1 folds in the bias or the old gradient) and the result is
 * rounded once.
 */
#include <cblas.h>

#include "cpu.h"

size_t rt_fc_workspace_bytes(const RtFcDims *d, RtDType dt, RtPass pass)
{
    size_t t = 0, f = sizeof(float);
    size_t xn = (size_t)d->n * d->in, wn = (size_t)d->hidden * d->in,
           yn = (size_t)d->n * d->hidden;
    bool half = dt != RT_F32;
    switch (pass) {
    case RT_PASS_FORWARD:
        if (half) {
            rt__ws_add(&t, xn * f);
            rt__ws_add(&t, wn * f);
            rt__ws_add(&t, yn * f);
            rt__ws_add(&t, (size_t)d->hidden * f);
        }
        break;
    case RT_PASS_BACKWARD:
        if (half) {
            rt__ws_add(&t, wn * f);
            rt__ws_add(&t, yn * f);
            rt__ws_add(&t, xn * f);
        }
        break;
    case RT_PASS_BACKWARD_WEIGHT:
        if (half) {
            rt__ws_add(&t, xn * f);
            rt__ws_add(&t, yn * f);
            rt__ws_add(&t, wn * f);
        }
        break;
    }
    return t;
}

void rt_fc_forward(const RtFcDims *d, RtDType dt, const void *x, const void *w,
                   const void *bias, void *y, void *ws)
{
    char *p = ws;
    bool half = dt != RT_F32;
    size_t yn = (size_t)d->n * d->hidden;
    const float *x32 = rt__whole_view(x, (size_t)d->n * d->in, dt, &p);
    const float *w32 = rt__whole_view(w, (size_t)d->hidden * d->in, dt, &p);
    float *y32 = half ? rt__ws_take(&p, yn * sizeof(float)) : y;
    if (bias) {
        const float *b32 = rt__whole_view(bias, (size_t)d->hidden, dt, &p);
        for (int i = 0; i < d->n; i++)
            memcpy(y32 + (size_t)i * d->hidden, b32, (size_t)d->hidden * sizeof(float));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d->n, d->hidden, d->in, 1.0f, x32,
                d->in, w32, d->in, bias ? 1.0f : 0.0f, y32, d->hidden);
    if (half)
        rt_from_f32(y, y32, yn, dt);
}

void rt_fc_backward_data(const RtFcDims *d, RtDType dt, const void *w, const void *dy, void *dx,
                         bool accumulate, void *ws)
{
    char *p = ws;
    bool half = dt != RT_F32;
    size_t xn = (size_t)d->n * d->in;
    const float *w32 = rt__whole_view(w, (size_t)d->hidden * d->in, dt, &p);
    const float *dy32 = rt__whole_view(dy, (size_t)d->n * d->hidden, dt, &p);
    float *dx32 = dx;
    if (half) {
        dx32 = rt__ws_take(&p, xn * sizeof(float));
        if (accumulate)
            rt_to_f32(dx32, dx, xn, dt);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d->n, d->in, d->hidden, 1.0f, dy32,
                d->hidden, w32, d->in, accumulate ? 1.0f : 0.0f, dx32, d->in);
    if (half)
        rt_from_f32(dx, dx32, xn, dt);
}

void rt_fc_backward_weight(const RtFcDims *d, RtDType dt, const void *x, const void *dy,
                           void *dw, void *dbias, bool accumulate, void *ws)
{
    char *p = ws;
    bool half = dt != RT_F32;
    size_t wn = (size_t)d->hidden * d->in;
    const float *x32 = rt__whole_view(x, (size_t)d->n * d->in, dt, &p);
    const float *dy32 = rt__whole_view(dy, (size_t)d->n * d->hidden, dt, &p);
    float *dw32 = dw;
    if (half) {
        dw32 = rt__ws_take(&p, wn * sizeof(float));
        if (accumulate)
            rt_to_f32(dw32, dw, wn, dt);
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d->hidden, d->in, d->n, 1.0f, dy32,
                d->hidden, x32, d->in, accumulate ? 1.0f : 0.0f, dw32, d->in);
    if (half)
        rt_from_f32(dw, dw32, wn, dt);
    if (dbias)
        for (int h = 0; h < d->hidden; h++) {
            double s = 0.0;
            for (int i = 0; i < d->n; i++)
                s += dy32[(size_t)i * d->hidden + h];
            rt__set(dbias, (size_t)h, (float)s, dt, accumulate);
        }
}
