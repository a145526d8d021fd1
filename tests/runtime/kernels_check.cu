/*
 * kernels_check.cu - compiles every runtime/kernels header with nvcc and
 * calls every function both in a __global__ kernel and on the host, so the
 * element math the CPU and CUDA backends share cannot drift into C-only
 * (or host-only) code.  `make nvcc-check` builds it; where a GPU is present
 * running it checks the device results against the host ones bit for bit
 * (conversions, loss-scale rule) or within the tolerance checker (math
 * library calls: expf, tanhf, ... may differ by an ulp or two).
 */
#include <cstdio>
#include <cstdlib>

#include "kernels/elem.h"
#include "kernels/splitmix.h"
#include "kernels/tolerance.h"

enum { NX = 64, NOUT = 64 };

/* One pass over every function; writes NOUT floats per input x[i].  The
 * same code runs on the host and on the device. */
static inline AMPC_HD void all_functions(float x, int i, float *o, unsigned short *h)
{
    int k = 0;
    /* half.h */
    h[0] = ampc_float_to_half(x);
    h[1] = ampc_float_to_bf16(x);
    o[k++] = ampc_half_to_float(h[0]);
    o[k++] = ampc_bf16_to_float(h[1]);
    o[k++] = ampc_bits_f32(ampc_f32_bits(x));
    o[k++] = (float)(ampc_isfinite(x) + 2 * ampc_half_isfinite(h[0]) + 4 * ampc_half_isnan(h[0]) +
                     8 * ampc_bf16_isfinite(h[1]) + 16 * ampc_bf16_isnan(h[1]));
    {
        float src[2] = {x, -x}, dst[2];
        ampc_half hh[2];
        ampc_bf16 bb[2];
        ampc_float_to_half_n(hh, src, 2);
        ampc_half_to_float_n(dst, hh, 2);
        o[k++] = dst[1];
        ampc_float_to_bf16_n(bb, src, 2);
        ampc_bf16_to_float_n(dst, bb, 2);
        o[k++] = dst[1];
    }
    /* act.h */
    o[k++] = ampc_relu(x);
    o[k++] = ampc_relu_grad(x);
    o[k++] = ampc_relu_grad_y(x);
    o[k++] = ampc_sigmoid(x);
    o[k++] = ampc_sigmoid_grad(x);
    o[k++] = ampc_sigmoid_grad_y(x);
    o[k++] = ampc_tanh(x);
    o[k++] = ampc_tanh_grad(x);
    o[k++] = ampc_tanh_grad_y(x);
    o[k++] = ampc_softrelu(x);
    o[k++] = ampc_softrelu_grad(x);
    o[k++] = ampc_softrelu_grad_y(x);
    o[k++] = ampc_softsign(x);
    o[k++] = ampc_softsign_grad(x);
    o[k++] = ampc_leaky(x, 0.1f);
    o[k++] = ampc_leaky_grad(x, 0.1f);
    o[k++] = ampc_prelu(x, 0.2f);
    o[k++] = ampc_prelu_grad(x, 0.2f);
    o[k++] = ampc_prelu_grad_gamma(x);
    o[k++] = ampc_elu(x, 0.3f);
    o[k++] = ampc_elu_grad(x, 0.3f);
    o[k++] = ampc_elu_grad_y(x, 0.3f);
    o[k++] = ampc_selu(x);
    o[k++] = ampc_selu_grad(x);
    o[k++] = ampc_selu_grad_y(x);
    /* loss.h */
    {
        float p = ampc_sigmoid(x);
        float off = ampc_smooth_off(0.1f, 10);
        o[k++] = ampc_softmax_ce_grad(p, i & 1, 0.1f, off, 0.5f);
        o[k++] = ampc_ce_loss(p);
    }
    /* optim.h */
    {
        AmpcOptParam p;
        p.lr = 0.1f;
        p.wd = 1e-4f;
        p.momentum = 0.9f;
        p.rescale_grad = 1.0f / 256;
        p.clip_gradient = (i & 2) ? 1.0f : -1.0f;
        p.beta1 = 0.9f;
        p.beta2 = 0.999f;
        p.epsilon = 1e-8f;
        float w = 0.5f, m = 0.01f, v = 0.02f;
        o[k++] = ampc_clip(x, 1.0f);
        ampc_sgd_update(&w, x, p);
        ampc_sgd_mom_update(&w, &m, x, p);
        ampc_nag_mom_update(&w, &m, x, p);
        p.lr = ampc_adam_lr(1e-3, 0.9, 0.999, 1 + (i & 7));
        o[k++] = p.lr;
        ampc_adam_update(&w, &m, &v, x, p);
        o[k++] = w;
        o[k++] = m;
        o[k++] = v;
        ampc_half g16 = ampc_float_to_half(x);
        ampc_bf16 gb = ampc_float_to_bf16(x);
        o[k++] = ampc_half_to_float(ampc_mp_sgd_update(&w, g16, p));
        o[k++] = ampc_half_to_float(ampc_mp_sgd_mom_update(&w, &m, g16, p));
        o[k++] = ampc_half_to_float(ampc_mp_nag_mom_update(&w, &m, g16, p));
        o[k++] = ampc_half_to_float(ampc_mp_adam_update(&w, &m, &v, g16, p));
        o[k++] = ampc_bf16_to_float(ampc_mp_sgd_update_bf16(&w, gb, p));
        o[k++] = ampc_bf16_to_float(ampc_mp_sgd_mom_update_bf16(&w, &m, gb, p));
        o[k++] = ampc_bf16_to_float(ampc_mp_nag_mom_update_bf16(&w, &m, gb, p));
        o[k++] = ampc_bf16_to_float(ampc_mp_adam_update_bf16(&w, &m, &v, gb, p));
        o[k++] = w;
    }
    /* lossscale.h */
    {
        AmpcLossScaleRule r = ampc_loss_scale_rule_default();
        r.interval = 2;
        r.max_scale = 16777216.0f;
        AmpcLossScale s;
        s.scale = 65536.0f;
        s.tracker = 0;
        s = ampc_loss_scale_update(s, !ampc_isfinite(x), r);
        s = ampc_loss_scale_update(s, i & 1, r);
        o[k++] = s.scale;
        o[k++] = (float)s.tracker;
        o[k++] = ampc_unscale(x, ampc_inv_scale(s.scale));
    }
    while (k < NOUT)
        o[k++] = 0.0f;
}

__global__ void all_functions_kernel(const float *x, float *o, unsigned short *h, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        all_functions(x[i], i, o + (size_t)i * NOUT, h + 2 * i);
}

#define CUDA_CHECK(call)                                                                   \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                  \
                    cudaGetErrorString(e_));                                               \
            return 2;                                                                      \
        }                                                                                  \
    } while (0)

int main(void)
{
    static float x[NX], ho[NX * NOUT], dout[NX * NOUT];
    static unsigned short hh[2 * NX], dh[2 * NX];
    for (int i = 0; i < NX; i++)
        x[i] = (float)(i - NX / 2) * 0.37f;
    x[0] = ampc_bits_f32(0x7f800000u); /* inf */
    x[1] = ampc_bits_f32(0x7fc00000u); /* NaN */
    x[2] = 65520.0f;
    x[3] = 2.9802322387695312e-8f; /* 2^-25 */
    for (int i = 0; i < NX; i++)
        all_functions(x[i], i, ho + (size_t)i * NOUT, hh + 2 * i);

    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("kernels_check: host pass done; no GPU, device pass skipped\n");
        return 0;
    }
    float *dx, *dOut;
    unsigned short *dH;
    CUDA_CHECK(cudaMalloc(&dx, sizeof x));
    CUDA_CHECK(cudaMalloc(&dOut, sizeof dout));
    CUDA_CHECK(cudaMalloc(&dH, sizeof dh));
    CUDA_CHECK(cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice));
    all_functions_kernel<<<1, NX>>>(dx, dOut, dH, NX);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(dout, dOut, sizeof dout, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(dh, dH, sizeof dh, cudaMemcpyDeviceToHost));
    cudaFree(dx);
    cudaFree(dOut);
    cudaFree(dH);

    /* the conversions must agree bit for bit */
    int bad = 0;
    for (int i = 0; i < 2 * NX; i++)
        if (hh[i] != dh[i]) {
            fprintf(stderr, "16-bit conversion %d: host %04x, device %04x\n", i, hh[i], dh[i]);
            bad++;
        }
    /* the rest within a few ulps (device libm, FMA contraction) */
    size_t off = ampc_check_close("device vs host", dout, ho, (size_t)NX * NOUT, 1e-6f, 1e-5f);
    printf("kernels_check: device pass: %d conversion mismatches, %zu values out of tolerance\n",
           bad, off);
    return bad || off ? 1 : 0;
}
