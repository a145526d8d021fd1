/* check.c - the one checking macro of the CUDA runtime (rt_cuda.h): the
 * message names FILE:LINE, the call, and the library's own error string
 * (cudaGetErrorString, cudnnGetErrorString plus cudnnGetLastErrorString,
 * cublasLtGetStatusName and ...String), looked up through libs.h. */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn_graph.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/libs.h"
#include "cuda/rt_cuda.h"

static _Thread_local char last[2048];

const char *ampc_api_last_error(void) { return last; }

/* a function of an opened library, or NULL */
static void *sym(AmpcLibId id, const char *name)
{
    char err[64];
    void *h = ampc_lib_open(id, err, sizeof err);
    return h ? dlsym(h, name) : NULL;
}

static void describe(AmpcApi api, long status, char *out, size_t len)
{
    switch (api) {
    case AMPC_API_CUDA:
        snprintf(out, len, "%s", cudaGetErrorString((cudaError_t)status));
        return;
    case AMPC_API_CUDNN: {
        __typeof__(cudnnGetErrorString) *name = sym(AMPC_LIB_CUDNN, "cudnnGetErrorString");
        __typeof__(cudnnGetLastErrorString) *detail =
            sym(AMPC_LIB_CUDNN, "cudnnGetLastErrorString");
        char d[1024] = "";
        if (detail)
            detail(d, sizeof d);
        snprintf(out, len, "%s (%ld)%s%s", name ? name((cudnnStatus_t)status) : "cuDNN error",
                 status, d[0] ? ": " : "", d);
        return;
    }
    case AMPC_API_CUBLAS: {
        __typeof__(cublasLtGetStatusName) *name = sym(AMPC_LIB_CUBLASLT, "cublasLtGetStatusName");
        __typeof__(cublasLtGetStatusString) *str =
            sym(AMPC_LIB_CUBLASLT, "cublasLtGetStatusString");
        snprintf(out, len, "%s (%ld): %s", name ? name((cublasStatus_t)status) : "cuBLAS error",
                 status, str ? str((cublasStatus_t)status) : "");
        return;
    }
    }
    snprintf(out, len, "status %ld", status);
}

bool ampc_api_check(AmpcApi api, long status, const char *call, const char *file, int line,
                    bool fatal)
{
    if (status == 0)
        return true;
    char what[1536];
    describe(api, status, what, sizeof what);
    snprintf(last, sizeof last, "%s:%d: %s: %s", file, line, call, what);
    if (fatal) {
        fprintf(stderr, "ampc: %s\n", last);
        exit(1);
    }
    return false;
}
