/* program.c - the device of a program ampc built for a GPU (--target=cuda):
 * rt_cuda_open_device, the emitted RtModel's open_device.
 *
 * The trainer (runtime/trainer.c) calls it once, before allocating anything:
 * it opens the CUDA device (device.cu) on GPU $AMPC_CUDA_DEVICE (0 when
 * unset), opens cuDNN and cuBLASLt (rt_cuda_open: found at run time by
 * libs.c) on that device's one stream, so kernels, copies and the optimizer
 * are ordered without a wait, into a context the device owns (RtCtx.cuda),
 * and reserves the BatchNorm kernels' scratch there for the model's widest
 * BatchNorm (their contract has no workspace, and a first-use allocation
 * would stall a step).  Closing the device closes the context first.  Each failure names what failed;
 * no GPU or no driver says so and that the program was built for one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda/device_cuda.h"
#include "cuda/program_cuda.h"
#include "cuda/rt_cuda.h"
#include "dist/coll.h"

/* $AMPC_CUDA_DEVICE: a GPU ordinal; when unset or empty, the GPU of this
 * rank among the ranks on its machine for a placement that reduces across
 * processes (nccl, dist_sync: one process per GPU under mpirun; modulo the
 * GPUs this process sees), else 0. */
static bool device_ordinal(const RtModel *m, int *ordinal, char *err, size_t errlen)
{
    const char *s = getenv("AMPC_CUDA_DEVICE");
    *ordinal = 0;
    if (!s || !*s) {
        int local = m->kv_place == RT_KV_NCCL || m->kv_place == RT_KV_DIST_SYNC
                        ? rt_nccl_local_device() : 0, n = 0;
        /* a launcher that binds one GPU to each rank shows each only its own */
        if (local > 0 && cudaGetDeviceCount(&n) == cudaSuccess && n > 0)
            local %= n;
        (void)cudaGetLastError(); /* no driver: the open below says so */
        *ordinal = local;
        return true;
    }
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < 0 || v > 1023) {
        snprintf(err, errlen, "AMPC_CUDA_DEVICE='%.40s' is not a GPU number (0, 1, ...)", s);
        return false;
    }
    *ordinal = (int)v;
    return true;
}

/* The most channels of a BatchNorm of m: its gamma, beta and statistics are
 * parameters of that many elements. */
static int64_t widest_batchnorm(const RtModel *m)
{
    int64_t c = 0;
    for (int i = 0; i < m->nparams; i++) {
        RtParamKind k = m->params[i].kind;
        if ((k == RT_PK_GAMMA || k == RT_PK_BETA || k == RT_PK_MOVING_MEAN ||
             k == RT_PK_MOVING_VAR) && m->params[i].numel > c)
            c = m->params[i].numel;
    }
    return c;
}

/* rt_kv_open's view of the device's one stream (the NCCL engine orders its
 * reductions after the compute stream's work) */
static void *compute_stream(RtDevice *d) { return rt_device_cuda_stream(d); }

/* MiB of gradients per NCCL all-reduce when the program carries no buckets
 * (the MPI engine's --mpi-bucket-mb default) */
#define KV_BUCKET_MB 4.0

/* the libraries' configuration from the program's --cudnn-* flags */
static RtCudaConfig cuda_config(const RtDeviceConfig *dc, AmpcStream stream)
{
    return (RtCudaConfig){.stream = stream,
                          .workspace_limit = (size_t)dc->cudnn_workspace_mb << 20,
                          .autotune = dc->cudnn_autotune,
                          .fp32 = dc->cudnn_fp32,
                          .nondeterministic = dc->cudnn_nondeterministic,
                          .autotune_max = dc->cudnn_autotune_max,
                          .runtime_compiled = dc->cudnn_runtime_compiled,
                          .plan_cache = dc->cudnn_plan_cache};
}

int rt_cuda_check_model(const RtModel *m, const RtDeviceConfig *dc, int64_t batch, FILE *out,
                        FILE *err)
{
    char why[512];
    RtCudaConfig cfg = cuda_config(dc, NULL);
    if (!m->workspace_bytes) {
        fprintf(err, "--cudnn-check: model %s has no workspace sizer to walk\n", m->name);
        return 2;
    }
    RtCudaCtx *cx = rt_cuda_check_open(&cfg, why, sizeof why);
    if (!cx) {
        fprintf(err, "--cudnn-check: model %s: %s\n", m->name, why);
        return 1;
    }
    /* the sizers see every convolution and GEMM of both steps at this batch */
    RtCtx ctx = {.batch = batch, .cuda = cx};
    (void)m->workspace_bytes(&ctx, batch);
    int bad = rt_cuda_check_report(cx, out, err);
    fprintf(out,
            "cudnn-check: model %s at batch %lld: %zu distinct convolutions (cuDNN %zu), %zu "
            "distinct GEMMs: %s\n",
            m->name, (long long)batch, rt_cuda_dnn_check_count(cx), rt_cuda_dnn_version(cx),
            rt_cuda_blas_check_count(cx),
            bad ? "FAILED" : "every descriptor built, every convolution has candidates");
    rt_cuda_close(cx);
    return bad ? 1 : 0;
}

RtDevice *rt_cuda_open_device(const RtModel *m, const RtDeviceConfig *dc, char *err, size_t errlen)
{
    int ordinal;
    if (!device_ordinal(m, &ordinal, err, errlen))
        return NULL;
    char why[512];
    RtDevice *d = rt_device_cuda_open(ordinal, why, sizeof why);
    if (!d) {
        snprintf(err, errlen, "no CUDA device: GPU %d cannot be opened: %s (the program was built "
                 "with --target=cuda; build it with --target=cpu to train on the CPU)", ordinal, why);
        return NULL;
    }
    RtCudaConfig cfg = cuda_config(dc, rt_device_cuda_stream(d));
    int64_t c = widest_batchnorm(m);
    RtCudaCtx *cx = rt_cuda_open(&cfg, why, sizeof why);
    if (!cx) {
        snprintf(err, errlen, "model %s on GPU %d: %s", m->name, ordinal, why);
        rt_device_close(d);
        return NULL;
    }
    /* the device owns the libraries' run state from here: closing it
     * closes them first */
    rt_device_cuda_adopt(d, cx);
    if (c > 0 && !rt_cuda_bn_reserve(cx, c, why, sizeof why)) {
        snprintf(err, errlen, "model %s on GPU %d: the BatchNorm scratch for %lld channels: %s",
                 m->name, ordinal, (long long)c, why);
        rt_device_close(d);
        return NULL;
    }
    /* the gradient placement (docs/kvstore.md): local wraps the device with
     * the host's update, nccl and dist_sync with the NCCL engine in a job of
     * several ranks; device and an unplaced program run as they are */
    RtDevice *placed = rt_kv_open(d, m->kv_place, rt_coll_nccl, compute_stream, KV_BUCKET_MB,
                                  why, sizeof why);
    if (!placed)
        snprintf(err, errlen, "model %s on GPU %d: the %s placement: %s", m->name, ordinal,
                 rt_kv_place_name(m->kv_place), why);
    return placed;
}
