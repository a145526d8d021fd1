/*
 * loss.cuh - the twin of runtime/cpu/loss.c's SoftmaxOutput backward: one
 * thread per element, the valid count a block reduction, the scale with
 * the step state's loss scale (read on the device), kernels/loss.h per
 * element.  Its forward is softmax's and calls libm: math.cuh.  Built by
 * kernels.cu.
 */
#ifndef AMPC_CUDA_LOSS_CUH
#define AMPC_CUDA_LOSS_CUH

#ifndef AMPC_CUDA_KERNELS_CUH
#error "include cuda/kernels.cuh before cuda/loss.cuh"
#endif

#include "kernels/loss.h"

/* SoftmaxOutput's backward, one thread per element (before: one per row,
 * each walking its row's k classes and, for the valid count, every label).
 * Each block counts the valid labels itself, a block reduction of integers
 * (exact in any order: loss.c's count), so no second launch and no
 * atomics; then the scale from it and the device's loss scale (*scale_dev;
 * 1 when NULL), and loss.c's gradient of each element, bit for bit. */
__global__ void ampc_k_smo_grad(size_t n, size_t k, int dt, ampc_dptr<const void> prob,
                                ampc_dptr<const float> label, RtSmoParams p,
                                ampc_dptr<const float> scale_dev, int dxdt, ampc_dptr<void> dx,
                                int acc)
{
    AMPC_SHARED(int64_t, part, AMPC_CU_WARPS);
    double valid = 1.0;
    if (p.normalization == RT_SMO_NORM_BATCH) {
        valid = (double)n;
    } else if (p.normalization == RT_SMO_NORM_VALID) {
        int64_t cnt = 0;
        int ign = (int)p.ignore_label;
        for (size_t i = threadIdx.x; i < n; i += blockDim.x)
            cnt += (int)label[i] != ign;
        cnt = ampc_cu_block_sum<int64_t>(cnt, part);
        valid = cnt > 0 ? (double)cnt : 1.0;
    }
    float ls = scale_dev ? (float)*scale_dev : 1.0f;
    float scale = (float)((double)p.grad_scale / valid * (double)ls);
    float off = ampc_smooth_off(p.smooth_alpha, (int)k);
    for (size_t i = ampc_cu_first(); i < n * k; i += ampc_cu_stride()) {
        int lab = (int)label[i / k];
        float r = p.use_ignore && lab == (int)p.ignore_label
                      ? 0.0f
                      : ampc_softmax_ce_grad(ampc_cu_load(prob, i, dt), (int64_t)(i % k) == lab,
                                             p.smooth_alpha, off, scale);
        ampc_cu_store_acc(dx, i, dxdt, r, acc);
    }
}

/* the kernel reads the step's scale on the device (step: a device pointer;
 * the address of its scale is formed here, nothing is read) */
AMPC_CU_API void rt_cuda_softmax_output_backward(RtCudaCtx *cx, int64_t n, int64_t k, RtDType dt,
                                                 const void *prob, const float *label,
                                                 const RtSmoParams *p, const RtStepState *step,
                                                 RtDType dxdt, void *dx, bool accumulate)
{
    const float *scale = step ? &step->scale : (const float *)NULL;
    AMPC_CU_GO(ampc_k_smo_grad, (size_t)n * (size_t)k, (size_t)n, (size_t)k, (int)dt, prob, label,
               *p, scale, (int)dxdt, dx, (int)accumulate);
}

#endif /* AMPC_CUDA_LOSS_CUH */
