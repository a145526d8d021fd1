/* nccl_link_smoke.c - the NCCL engine linked as a CUDA program links it
 * (libampccuda.a, libampcrt.a, the static cudart; NCCL not linked), and the
 * real transport's NCCL functions resolved by name from the library libs.c
 * finds (make nccl-check).  Needs no GPU: it calls only ncclGetErrorString.
 * --link-only: the link alone (under ASan, whose dlopen interceptor the
 * CUDA libraries do not survive; docs/backend-cuda.md). */
#include <stdio.h>
#include <string.h>

#include "cuda/libs.h"
#include "dist/coll.h"

int main(int argc, char **argv)
{
    /* every entry point a program built for nccl calls, linked */
    void *volatile used[] = {(void *)rt_nccl_bootstrap, (void *)rt_nccl_init_all,
                             (void *)rt_nccl_wrap, (void *)rt_coll_boot_device,
                             (void *)rt_kv_wrap, (void *)rt_nccl_local_device,
                             (void *)rt_kv_open, (void *)rt_coll_nccl};
    for (size_t i = 0; i < sizeof used / sizeof used[0]; i++)
        if (!used[i])
            return 1;
    char err[1024];
    /* a wrong use is an error, not a crash */
    RtNcclConfig cfg = {0};
    if (rt_nccl_wrap(NULL, NULL, NULL, 0, 1, &cfg, err, sizeof err) || !strstr(err, "nccl:")) {
        fprintf(stderr, "nccl_link_smoke: rt_nccl_wrap(NULL) did not fail\n");
        return 1;
    }
    if (argc > 1 && strcmp(argv[1], "--link-only") == 0) {
        printf("nccl_link_smoke: linked (NCCL not loaded: --link-only)\n");
        return 0;
    }
    const RtCollOps *t = rt_coll_nccl(err, sizeof err);
    if (!t) {
        fprintf(stderr, "nccl_link_smoke: %s\n", err);
        return 1;
    }
    /* the deadline's calls (ncclCommAbort and ncclCommGetAsyncError resolved) */
    if (!t->stream_query || !t->comm_async_error || !t->comm_abort) {
        fprintf(stderr, "nccl_link_smoke: the transport has no deadline calls\n");
        return 1;
    }
    const char *s = t->error_string(t->self, "ncclAllReduce", 3);
    if (!s || !strstr(s, "internal error")) {
        fprintf(stderr, "nccl_link_smoke: ncclGetErrorString(3) = '%s'\n", s ? s : "(null)");
        return 1;
    }
    printf("nccl_link_smoke: %s from %s: 11 functions resolved; ncclGetErrorString(3) = '%s'\n",
           ampc_lib_name(AMPC_LIB_NCCL), ampc_lib_where(AMPC_LIB_NCCL), s);
    return 0;
}
