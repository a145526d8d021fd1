/* cuda_libs_smoke.c - run by `make cuda-check` on any machine with the
 * toolkit (no GPU needed): cuDNN, cuBLASLt, cuBLAS and NCCL are found at
 * run time (runtime/cuda/libs.h) and report their versions; the checking
 * macro's message names FILE:LINE, the call and each library's own error
 * string; and rt_cuda_open either works (a GPU) or fails with a message
 * naming the call.  Exit 0 when all hold, 1 with the first failure.
 *
 * --env (the first-run kit's first row, tests/gpu/first_run.sh): prints the
 * machine instead, one "env: KEY: VALUE" line each: the GPU's name, compute
 * capability, SM count, memory and L2, the driver's and the runtime's CUDA
 * versions, and each library's version and the file it was loaded from.
 * Exit 0 with a GPU, 3 without one (the libraries are still listed). */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn_graph.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/libs.h"
#include "cuda/rt_cuda.h"

static int fails;

static void expect(bool ok, const char *what, const char *got)
{
    if (!ok) {
        fprintf(stderr, "cuda_libs_smoke: FAIL: %s (got: %s)\n", what, got);
        fails++;
    }
}

static void message_has(AmpcApi api, long status, const char *want)
{
    int line = __LINE__ + 1;
    bool ok = AMPC_TRY(api, status);
    const char *m = ampc_api_last_error();
    char where[64];
    snprintf(where, sizeof where, "cuda_libs_smoke.c:%d: status: ", line);
    expect(!ok, "a non-zero status fails", m);
    expect(strstr(m, where) != NULL, "the message starts with FILE:LINE: CALL", m);
    expect(strstr(m, want) != NULL, want, m);
}

/* the version a library reports through its own call (0 when absent) */
static long lib_version(AmpcLibId id)
{
    static const char *const fn[AMPC_LIB_COUNT] = {
        [AMPC_LIB_CUDNN] = "cudnnGetVersion", [AMPC_LIB_CUBLASLT] = "cublasLtGetVersion"};
    char err[512];
    void *h = ampc_lib_open(id, err, sizeof err);
    if (!h)
        return 0;
    if (id == AMPC_LIB_NCCL) {
        int v = 0;
        int (*get)(int *) = (int (*)(int *))dlsym(h, "ncclGetVersion");
        return get && get(&v) == 0 ? v : 0;
    }
    if (id == AMPC_LIB_CUBLAS) {
        int v = 0;
        int (*get)(void *, int *) = (int (*)(void *, int *))dlsym(h, "cublasGetVersion_v2");
        return get && get(NULL, &v) == 0 ? v : 0;
    }
    size_t (*get)(void) = fn[id] ? (size_t(*)(void))dlsym(h, fn[id]) : NULL;
    return get ? (long)get() : 0;
}

static int env(void)
{
    char err[4096];
    int drv = 0, rtv = 0, n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rtv);
    printf("env: CUDA driver: %d, runtime (static cudart): %d\n", drv, rtv);
    for (int d = 0; e == cudaSuccess && d < n; d++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, d) != cudaSuccess)
            continue;
        printf("env: GPU %d: %s, compute capability %d.%d, %d SMs, %.1f GiB, L2 %.1f MiB, "
               "%d-bit memory bus\n", d, p.name, p.major, p.minor, p.multiProcessorCount,
               (double)p.totalGlobalMem / 1073741824.0, (double)p.l2CacheSize / 1048576.0,
               p.memoryBusWidth);
    }
    if (e != cudaSuccess || n == 0)
        printf("env: no GPU: cudaGetDeviceCount: %s\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    for (int id = 0; id < AMPC_LIB_COUNT; id++) {
        void *h = ampc_lib_open((AmpcLibId)id, err, sizeof err);
        if (h)
            printf("env: %s: version %ld, from %s\n", ampc_lib_name((AmpcLibId)id),
                   lib_version((AmpcLibId)id), ampc_lib_where((AmpcLibId)id));
        else
            printf("env: %s: not found: %s\n", ampc_lib_name((AmpcLibId)id), err);
    }
    return e == cudaSuccess && n > 0 ? 0 : 3;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--env") == 0)
        return env();
    char err[4096];
    for (int id = 0; id < AMPC_LIB_COUNT; id++) {
        void *h = ampc_lib_open((AmpcLibId)id, err, sizeof err);
        expect(h != NULL, ampc_lib_name((AmpcLibId)id), err);
        if (h)
            printf("cuda_libs_smoke: %s from %s\n", ampc_lib_name((AmpcLibId)id),
                   ampc_lib_where((AmpcLibId)id));
    }
    void *dnn = ampc_lib_open(AMPC_LIB_CUDNN, err, sizeof err);
    size_t (*dnn_version)(void) = dnn ? (size_t(*)(void))dlsym(dnn, "cudnnGetVersion") : NULL;
    expect(dnn_version && dnn_version() >= 90000, "cuDNN 9 or later", "");
    if (dnn_version)
        printf("cuda_libs_smoke: cuDNN version %zu\n", dnn_version());

    message_has(AMPC_API_CUDNN, CUDNN_STATUS_BAD_PARAM, "CUDNN_STATUS_BAD_PARAM");
    message_has(AMPC_API_CUBLAS, CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED");
    message_has(AMPC_API_CUDA, cudaErrorMemoryAllocation, "out of memory");
    expect(AMPC_TRY(AMPC_API_CUDNN, CUDNN_STATUS_SUCCESS), "success passes", "");

    RtCudaConfig cfg = {.workspace_limit = 64 << 20};
    RtCudaCtx *cx = rt_cuda_open(&cfg, err, sizeof err);
    if (cx) {
        printf("cuda_libs_smoke: rt_cuda_open works (a GPU is here)\n");
        rt_cuda_close(cx);
    } else {
        expect(strstr(err, "Create(") != NULL, "rt_cuda_open fails naming the handle call", err);
        printf("SKIPPED: cuDNN/cuBLASLt handles (no GPU): %s\n", err);
    }
    if (fails)
        return 1;
    printf("cuda_libs_smoke: libraries found, error messages name file:line, call and error\n");
    return 0;
}
