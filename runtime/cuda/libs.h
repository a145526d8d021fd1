/*
 * libs.h - finding cuDNN, cuBLAS(Lt) and NCCL at run time.
 *
 * A program built for CUDA links cudart statically and opens the large
 * libraries with dlopen, so the same binary runs where they are system
 * libraries (/usr/local/cuda/lib64 on the ld path, ld.so.cache) and where
 * they come with Python wheels (nvidia-cudnn-cu13, nvidia-cublas,
 * nvidia-nccl-cu13: site-packages/nvidia/cudnn/lib, nvidia/cublas/lib,
 * nvidia/cu13/lib, nvidia/nccl/lib), as on a machine with PyTorch.
 *
 * The order, for each library (first that loads wins):
 *   1. every directory of $AMPC_CUDA_LIB_PATH (colon-separated), both as
 *      the library's directory and as a site-packages root;
 *   2. the bare soname: the system's search (LD_LIBRARY_PATH, the
 *      runpath, ld.so.cache, /lib, /usr/lib);
 *   3. every directory of python3's sys.path, as a site-packages root
 *      (python3 is run without a shell, once, only when 1 and 2 failed).
 * A failure names the library and every place looked, with the last
 * loader error.  Dependencies load first (cuBLASLt before cuBLAS), with
 * RTLD_GLOBAL, so a wheel's cuBLAS finds its own cuBLASLt.
 *
 * No CUDA header: the search is unit-tested with a fake directory tree
 * (tests/runtime/test_cuda_libs.c).
 */
#ifndef AMPC_CUDA_LIBS_H
#define AMPC_CUDA_LIBS_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { AMPC_LIB_CUDNN, AMPC_LIB_CUBLASLT, AMPC_LIB_CUBLAS, AMPC_LIB_NCCL,
               AMPC_LIB_COUNT } AmpcLibId;

const char *ampc_lib_soname(AmpcLibId id); /* "libcudnn.so.9", ... */
const char *ampc_lib_name(AmpcLibId id);   /* "cuDNN 9", ... */

/* the candidates in search order (see above), each a malloc'd string: a
 * path, or the bare soname for the system search.  NULL-terminated array;
 * NULL on allocation failure.  pydirs: NULL-terminated, may be NULL. */
char **ampc_lib_candidates(AmpcLibId id, const char *env_path, const char *const *pydirs);
void ampc_lib_free_list(char **list);

/* tries one candidate: true when it loaded (into *handle); else a reason */
typedef bool (*AmpcLibProbe)(const char *cand, void *ctx, void **handle, char *why,
                             size_t whylen);

/* the search itself, with a probe (dlopen in the program, a fake in the
 * tests): the handle, or NULL and the message in err.  found, when not
 * NULL, receives the candidate that loaded.  pydirs_fn is called only
 * when the directories before it failed; it returns a NULL-terminated
 * list the search frees with ampc_lib_free_list. */
void *ampc_lib_search(AmpcLibId id, const char *env_path, char **(*pydirs_fn)(void),
                      AmpcLibProbe probe, void *ctx, char *found, size_t foundlen, char *err,
                      size_t errlen);

/* python3's sys.path (python3 run once, with no shell), NULL-terminated;
 * an empty list when there is no python3 */
char **ampc_python_sys_path(void);

/* the process-wide handle of a library (dependencies first), opened once
 * with dlopen; NULL and a message on failure */
void *ampc_lib_open(AmpcLibId id, char *err, size_t errlen);
/* where it was loaded from ("" before) */
const char *ampc_lib_where(AmpcLibId id);

#ifdef __cplusplus
}
#endif

#endif /* AMPC_CUDA_LIBS_H */
