/*
 * reduce.cuh - the twins of runtime/cpu/reduce.c's sum and mean: the
 * reduction as a broadcast of the kept shape (elemwise.cuh's reduction
 * kernel), the backward's spread.  softmax and log_softmax call libm:
 * math.cuh.  Built by kernels.cu, after elemwise.cuh.
 */
#ifndef AMPC_CUDA_REDUCE_CUH
#define AMPC_CUDA_REDUCE_CUH

#ifndef AMPC_CUDA_KERNELS_CUH
#error "include cuda/kernels.cuh before cuda/reduce.cuh"
#endif

#ifndef AMPC_CUDA_ELEMWISE_CUH
#error "include cuda/elemwise.cuh before cuda/reduce.cuh"
#endif

/* sum/mean backward: dx (+)= dy at the kept position * scale */
__global__ void ampc_k_reduce_bwd(AmpcBcast g, int dt, ampc_dptr<const void> dy, float scale,
                                  ampc_dptr<void> dx, int acc)
{
    size_t n = ampc_cu_numel(g.out, g.rank);
    for (size_t e = ampc_cu_first(); e < n; e += ampc_cu_stride()) {
        size_t oa, ob;
        ampc_cu_offsets(&g, e, &oa, &ob);
        ampc_cu_store_acc(dx, e, dt, ampc_cu_load(dy, oa, dt) * scale, acc);
    }
}

/* reduce.c's reduce_view: the reduction as a broadcast of the kept shape */
static AmpcBcast ampc_cu_reduce_view(const RtReduceDims *d, size_t *nx, size_t *ny)
{
    RtBcastDims b;
    memset(&b, 0, sizeof b);
    b.rank = d->rank > 0 ? d->rank : 1;
    *nx = *ny = 1;
    for (int i = 0; i < b.rank; i++) {
        int64_t s = d->rank > 0 ? d->in[i] : 1;
        b.out[i] = s;
        b.a[i] = d->rank > 0 && d->reduce[i] ? 1 : s;
        b.b[i] = 1;
        *nx *= (size_t)s;
        *ny *= (size_t)b.a[i];
    }
    return ampc_cu_bcast(&b);
}

AMPC_CU_API size_t rt_cuda_reduce_workspace_bytes(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt, RtPass pass)
{
    (void)cx, (void)d, (void)dt, (void)pass;
    return 0;
}

static void ampc_cu_reduce_fwd(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt, const void *x, void *y,
                                int mean)
{
    size_t nx, ny;
    AmpcBcast g = ampc_cu_reduce_view(d, &nx, &ny);
    double scale = mean && ny ? (double)ny / (double)nx : 1.0;
    AMPC_CU_RUN(ampc_cu_bcast_reduce(cx->stream, &g, 0, (int)dt, x, NULL, 1.0f, scale, y, 0));
}

static void ampc_cu_reduce_bwd(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt, const void *dy, void *dx,
                                bool acc, int mean)
{
    size_t nx, ny;
    AmpcBcast g = ampc_cu_reduce_view(d, &nx, &ny);
    float scale = mean && nx ? (float)((double)ny / (double)nx) : 1.0f;
    AMPC_CU_GO(ampc_k_reduce_bwd, nx, g, (int)dt, dy, scale, dx, (int)acc);
}

AMPC_CU_API void rt_cuda_sum_forward(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt, const void *x, void *y,
                                     void *ws)
{
    (void)ws;
    ampc_cu_reduce_fwd(cx, d, dt, x, y, 0);
}

AMPC_CU_API void rt_cuda_mean_forward(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt, const void *x, void *y,
                                      void *ws)
{
    (void)ws;
    ampc_cu_reduce_fwd(cx, d, dt, x, y, 1);
}

AMPC_CU_API void rt_cuda_sum_backward(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt, const void *dy,
                                      void *dx, bool accumulate)
{
    ampc_cu_reduce_bwd(cx, d, dt, dy, dx, accumulate, 0);
}

AMPC_CU_API void rt_cuda_mean_backward(RtCudaCtx *cx, const RtReduceDims *d, RtDType dt, const void *dy,
                                       void *dx, bool accumulate)
{
    ampc_cu_reduce_bwd(cx, d, dt, dy, dx, accumulate, 1);
}

#endif /* AMPC_CUDA_REDUCE_CUH */
