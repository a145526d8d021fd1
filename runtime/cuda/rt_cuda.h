/*
 * rt_cuda.h - the CUDA twins of rt.h's Convolution and FullyConnected
 * kernels (cuDNN's graph API, runtime/cuda/dnn.c; cuBLASLt, blas.c), the
 * checking macro every CUDA, cuDNN and cuBLAS(Lt) call goes through
 * (check.c), and the kernels around them (layout.cuh).
 *
 * Same shapes as the CPU contract (rt.h): the same dims structs, dtypes and
 * accumulate flags, workspace sizers, NULL bias / dbias.  Pointers are
 * device memory; everything runs on the stream given to rt_cuda_init,
 * asynchronously.  Layouts: fp32 convolutions are NCHW with OIHW filters as
 * on the CPU; fp16 and bf16 convolutions are NHWC (x, y) with KRSC filters
 * (plan.h).  FullyConnected is row-major [n, in] as on the CPU.
 *
 * A failing call prints "ampc: FILE:LINE: CALL: ERROR" and exits with
 * status 1 (the contract's functions return nothing); set-up errors
 * (rt_cuda_init) return false with the message.  One host thread calls
 * these (the emitted program's), as with the CPU kernels: the plan caches
 * are not locked.
 */
#ifndef AMPC_RT_CUDA_H
#define AMPC_RT_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "cuda/ampc_cuda.h"
#include "cuda/pool_geom.h"
#include "rt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the checking macro (check.c) -------------------------------------------- */

typedef enum { AMPC_API_CUDA, AMPC_API_CUDNN, AMPC_API_CUBLAS } AmpcApi;

/* status 0 is success in all three APIs.  Otherwise the message
 * "FILE:LINE: CALL: NAME (STATUS)[: detail]" with the library's own error
 * string; fatal prints it and exits 1, else it is kept for
 * ampc_api_last_error() and false returned. */
bool ampc_api_check(AmpcApi api, long status, const char *call, const char *file, int line,
                    bool fatal);
const char *ampc_api_last_error(void);
#define AMPC_CHECK(api, call) \
    ((void)ampc_api_check((api), (long)(call), #call, __FILE__, __LINE__, true))
#define AMPC_TRY(api, call) ampc_api_check((api), (long)(call), #call, __FILE__, __LINE__, false)

/* ---- set-up ------------------------------------------------------------------------ */

typedef struct {
    AmpcStream stream;       /* every call runs on it */
    size_t workspace_limit;  /* the most workspace one convolution or GEMM may use */
    bool autotune;           /* time the candidate cuDNN plans (MXNET_CUDNN_AUTOTUNE_DEFAULT=1)
                                instead of taking the heuristic's first that fits */
} RtCudaConfig;

/* opens cuDNN and cuBLASLt (libs.h), creates their handles; false and a
 * message naming the library or call on failure.  Plans are chosen per
 * shape on first use (or by the workspace sizer, at set-up) and cached. */
bool rt_cuda_init(const RtCudaConfig *cfg, char *err, size_t errlen);
void rt_cuda_shutdown(void);
/* each library alone (a model without convolutions needs no cuDNN) */
bool rt_cuda_dnn_init(const RtCudaConfig *cfg, char *err, size_t errlen);
void rt_cuda_dnn_shutdown(void);
bool rt_cuda_blas_init(const RtCudaConfig *cfg, char *err, size_t errlen);
void rt_cuda_blas_shutdown(void);

/* ---- Convolution (cuDNN graph API) ----------------------------------------------- */

size_t rt_cuda_conv_workspace_bytes(const RtConvDims *d, RtDType dt, RtPass pass);
void rt_cuda_conv_forward(const RtConvDims *d, RtDType dt, const void *x, const void *w,
                          const void *bias, void *y, void *ws);
void rt_cuda_conv_backward_data(const RtConvDims *d, RtDType dt, const void *w, const void *dy,
                                void *dx, bool accumulate, void *ws);
void rt_cuda_conv_backward_weight(const RtConvDims *d, RtDType dt, const void *x,
                                  const void *dy, void *dw, void *dbias, bool accumulate,
                                  void *ws);
/* which engine the cached plan of a shape uses (-1 when none yet), for logs */
long rt_cuda_conv_engine(const RtConvDims *d, RtDType dt, RtPass pass, bool accumulate);

/* ---- FullyConnected (cuBLASLt) ---------------------------------------------------- */

size_t rt_cuda_fc_workspace_bytes(const RtFcDims *d, RtDType dt, RtPass pass);
void rt_cuda_fc_forward(const RtFcDims *d, RtDType dt, const void *x, const void *w,
                        const void *bias, void *y, void *ws);
void rt_cuda_fc_backward_data(const RtFcDims *d, RtDType dt, const void *w, const void *dy,
                              void *dx, bool accumulate, void *ws);
void rt_cuda_fc_backward_weight(const RtFcDims *d, RtDType dt, const void *x, const void *dy,
                                void *dw, void *dbias, bool accumulate, void *ws);

/* ---- Pooling (custom kernels, pool.cuh; needs rt_cuda_dnn_init's stream) ---------- */

/* the layout is the convolutions' for dt (NCHW fp32, NHWC 16-bit); no workspace */
size_t rt_cuda_pool_workspace_bytes(const RtPoolDims *d, RtDType dt, RtPass pass);
void rt_cuda_pool_forward(const RtPoolDims *d, RtDType dt, const void *x, void *y, void *ws);
void rt_cuda_pool_backward(const RtPoolDims *d, RtDType dt, const void *x, const void *dy,
                           void *dx, bool accumulate, void *ws);

/* ---- BatchNorm (custom kernels, bn.cuh; needs rt_cuda_dnn_init's stream) ----------- */

/* rt.h's contract, bit for bit runtime/cpu/batchnorm.c; x as [outer, c, inner]
 * (NHWC: outer = N*H*W, inner = 1).  gamma, beta, the statistics: fp32 device
 * arrays.  The per-channel constants go to a device scratch of 3*c floats,
 * grown on first use; rt_cuda_bn_reserve(max_c) allocates it at set-up. */
bool rt_cuda_bn_reserve(int64_t max_c, char *err, size_t errlen);
void rt_cuda_batchnorm_forward_train(const RtBnDims *d, RtDType dt, const void *x,
                                     const float *gamma, const float *beta, float eps,
                                     bool fix_gamma, void *y, float *save_mean,
                                     float *save_invstd);
void rt_cuda_batchnorm_forward_inference(const RtBnDims *d, RtDType dt, const void *x,
                                         const float *gamma, const float *beta,
                                         const float *moving_mean, const float *moving_var,
                                         float eps, bool fix_gamma, void *y, float *save_mean,
                                         float *save_invstd);
void rt_cuda_batchnorm_backward(const RtBnDims *d, RtDType dt, const void *x, const void *dy,
                                const float *gamma, const float *save_mean,
                                const float *save_invstd, bool fix_gamma, bool use_global_stats,
                                void *dx, float *dgamma, float *dbeta, bool acc_dx,
                                bool acc_param);

/* ---- the kernels of layout.cuh ------------------------------------------------------- */

int ampc_cu_pad_channels(AmpcStream s, size_t rows, int c, int cp, int dt, const void *src,
                         void *dst);
int ampc_cu_unpad_channels(AmpcStream s, size_t rows, int c, int cp, int dt, const void *src,
                           void *dst, int acc);
int ampc_cu_bias_add(AmpcStream s, size_t outer, int c, size_t inner, int dt, void *y,
                     const void *bias);
int ampc_cu_bias_grad(AmpcStream s, size_t outer, int c, size_t inner, int dt, const void *dy,
                      void *dbias, int acc);
/* pool.cuh: rt_pool_forward / rt_pool_backward bit for bit, in g's layout */
int ampc_cu_pool_forward(AmpcStream s, const AmpcPoolGeom *g, int dt, const void *x, void *y);
int ampc_cu_pool_backward(AmpcStream s, const AmpcPoolGeom *g, int dt, const void *x,
                          const void *dy, void *dx, int acc);
/* bn.cuh: rt_batchnorm_* bit for bit; ws: 3*c floats of device memory */
int ampc_cu_bn_forward_train(AmpcStream s, size_t outer, int c, size_t inner, int dt,
                             const void *x, const float *gamma, const float *beta, float eps,
                             int fix_gamma, void *y, float *save_mean, float *save_invstd,
                             float *ws);
int ampc_cu_bn_forward_inference(AmpcStream s, size_t outer, int c, size_t inner, int dt,
                                 const void *x, const float *gamma, const float *beta,
                                 const float *moving_mean, const float *moving_var, float eps,
                                 int fix_gamma, void *y, float *save_mean, float *save_invstd,
                                 float *ws);
int ampc_cu_bn_backward(AmpcStream s, size_t outer, int c, size_t inner, int dt, const void *x,
                        const void *dy, const float *gamma, const float *save_mean,
                        const float *save_invstd, int fix_gamma, int use_global_stats, void *dx,
                        float *dgamma, float *dbeta, int acc_dx, int acc_param, float *ws);

#ifdef __cplusplus
}
#endif

#endif /* AMPC_RT_CUDA_H */
