/* program.c - the device of a program ampc built for a GPU (--target=cuda):
 * rt_cuda_open_device, the emitted RtModel's open_device.
 *
 * The trainer (runtime/trainer.c) calls it once, before allocating anything:
 * it opens the CUDA device (device.cu) on GPU $AMPC_CUDA_DEVICE (0 when
 * unset), initialises cuDNN and cuBLASLt (rt_cuda_init: found at run time by
 * libs.c) on that device's one stream, so kernels, copies and the optimizer
 * are ordered without a wait, and reserves the BatchNorm kernels' scratch
 * for the model's widest BatchNorm (their contract has no workspace, and a
 * first-use allocation would stall a step).  Closing the device shuts the
 * libraries down first.  Each failure names what failed;
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

/* The device's own table with close preceded by the libraries' shutdown:
 * their handles, plan caches and the BatchNorm scratch go before the stream
 * and the device they were made on. */
static RtDeviceOps ops_with_libraries;
static void (*device_close)(RtDevice *d);

static void close_with_libraries(RtDevice *d)
{
    d->ops->synchronize(d); /* nothing queued may still use a plan or the scratch */
    rt_cuda_shutdown();
    device_close(d);
}

/* rt_kv_open's view of the device's one stream (the NCCL engine orders its
 * reductions after the compute stream's work) */
static void *compute_stream(RtDevice *d) { return rt_device_cuda_stream(d); }

/* MiB of gradients per NCCL all-reduce when the program carries no buckets
 * (the MPI engine's --mpi-bucket-mb default) */
#define KV_BUCKET_MB 4.0

/* the libraries' configuration from the program's --cudnn-* flags */
static RtCudaConfig cuda_config(AmpcStream stream)
{
    const RtDeviceConfig *dc = rt_device_config();
    return (RtCudaConfig){.stream = stream,
                          .workspace_limit = (size_t)dc->cudnn_workspace_mb << 20,
                          .autotune = dc->cudnn_autotune,
                          .fp32 = dc->cudnn_fp32,
                          .nondeterministic = dc->cudnn_nondeterministic};
}

int rt_cuda_check_model(const RtModel *m, int64_t batch, FILE *out, FILE *err)
{
    char why[512];
    RtCudaConfig cfg = cuda_config(NULL);
    if (!m->workspace_bytes) {
        fprintf(err, "--cudnn-check: model %s has no workspace sizer to walk\n", m->name);
        return 2;
    }
    if (!rt_cuda_check_open(&cfg, why, sizeof why)) {
        fprintf(err, "--cudnn-check: model %s: %s\n", m->name, why);
        return 1;
    }
    /* the sizers see every convolution and GEMM of both steps at this batch */
    (void)m->workspace_bytes(batch);
    int bad = rt_cuda_check_report(out, err);
    fprintf(out, "cudnn-check: model %s at batch %lld: %zu distinct convolutions (cuDNN %zu), %zu "
            "distinct GEMMs: %s\n", m->name, (long long)batch, rt_cuda_dnn_check_count(),
            rt_cuda_dnn_version(), rt_cuda_blas_check_count(),
            bad ? "FAILED" : "every descriptor built, every convolution has candidates");
    rt_cuda_check_close();
    return bad ? 1 : 0;
}

RtDevice *rt_cuda_open_device(const RtModel *m, char *err, size_t errlen)
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
    RtCudaConfig cfg = cuda_config(rt_device_cuda_stream(d));
    int64_t c = widest_batchnorm(m);
    if (!rt_cuda_init(&cfg, why, sizeof why)) {
        snprintf(err, errlen, "model %s on GPU %d: %s", m->name, ordinal, why);
        rt_device_close(d);
        return NULL;
    }
    if (c > 0 && !rt_cuda_bn_reserve(c, why, sizeof why)) {
        snprintf(err, errlen, "model %s on GPU %d: the BatchNorm scratch for %lld channels: %s",
                 m->name, ordinal, (long long)c, why);
        rt_cuda_shutdown();
        rt_device_close(d);
        return NULL;
    }
    ops_with_libraries = *d->ops;
    device_close = d->ops->close;
    ops_with_libraries.close = close_with_libraries;
    d->ops = &ops_with_libraries;
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
