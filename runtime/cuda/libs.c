/* libs.c - finding cuDNN, cuBLAS(Lt) and NCCL at run time (libs.h). */
#include "cuda/libs.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    const char *soname, *name, *wheel;
    const char *sub[3]; /* where the wheels put it, under site-packages */
} LibInfo;

static const LibInfo libs[AMPC_LIB_COUNT] = {
    [AMPC_LIB_CUDNN] = {"libcudnn.so.9", "cuDNN 9", "nvidia-cudnn-cu13",
                        {"nvidia/cudnn/lib", "nvidia/cu13/lib", NULL}},
    [AMPC_LIB_CUBLASLT] = {"libcublasLt.so.13", "cuBLASLt 13", "nvidia-cublas",
                           {"nvidia/cublas/lib", "nvidia/cu13/lib", NULL}},
    [AMPC_LIB_CUBLAS] = {"libcublas.so.13", "cuBLAS 13", "nvidia-cublas",
                         {"nvidia/cublas/lib", "nvidia/cu13/lib", NULL}},
    [AMPC_LIB_NCCL] = {"libnccl.so.2", "NCCL 2", "nvidia-nccl-cu13",
                       {"nvidia/nccl/lib", "nvidia/cu13/lib", NULL}},
};

const char *ampc_lib_soname(AmpcLibId id) { return libs[id].soname; }
const char *ampc_lib_name(AmpcLibId id) { return libs[id].name; }

/* ---- the candidate list --------------------------------------------------------- */

typedef struct {
    char **v;
    size_t n, cap;
    bool failed;
} List;

static void push(List *l, const char *a, const char *b, const char *c)
{
    if (l->failed)
        return;
    if (l->n + 2 > l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            l->failed = true;
            return;
        }
        l->v = v, l->cap = cap;
    }
    size_t len = strlen(a) + (b ? strlen(b) + 1 : 0) + (c ? strlen(c) + 1 : 0) + 1;
    char *s = malloc(len);
    if (!s) {
        l->failed = true;
        return;
    }
    snprintf(s, len, "%s%s%s%s%s", a, b ? "/" : "", b ? b : "", c ? "/" : "", c ? c : "");
    l->v[l->n++] = s;
    l->v[l->n] = NULL;
}

static char **finish(List *l)
{
    if (l->failed || !l->v) {
        if (l->v)
            l->v[l->n] = NULL;
        ampc_lib_free_list(l->v);
        return l->failed ? NULL : calloc(1, sizeof(char *));
    }
    return l->v;
}

/* a site-packages root: every wheel directory of the library under it */
static void push_root(List *l, const LibInfo *li, const char *dir)
{
    for (int s = 0; li->sub[s]; s++)
        push(l, dir, li->sub[s], li->soname);
}

/* a relative directory (sys.path's "" is the working directory) is
 * skipped: the program must not load a library from where it was run */
static bool usable_dir(const char *d) { return d[0] == '/'; }

static void push_env(List *l, const LibInfo *li, const char *env_path)
{
    if (!env_path)
        return;
    const char *p = env_path;
    while (*p) {
        size_t len = strcspn(p, ":");
        char *dir = strndup(p, len);
        if (!dir) {
            l->failed = true;
            return;
        }
        if (usable_dir(dir)) {
            push(l, dir, li->soname, NULL);
            push_root(l, li, dir);
        }
        free(dir);
        p += len;
        if (*p == ':')
            p++;
    }
}

char **ampc_lib_candidates(AmpcLibId id, const char *env_path, const char *const *pydirs)
{
    const LibInfo *li = &libs[id];
    List l = {0};
    push_env(&l, li, env_path);
    push(&l, li->soname, NULL, NULL);
    for (int i = 0; pydirs && pydirs[i]; i++)
        if (usable_dir(pydirs[i]))
            push_root(&l, li, pydirs[i]);
    return finish(&l);
}

void ampc_lib_free_list(char **list)
{
    for (size_t i = 0; list && list[i]; i++)
        free(list[i]);
    free(list);
}

/* ---- the search ---------------------------------------------------------------- */

/* tries list[from..]; the handle or NULL, the reason of the last failure
 * that was more than "no such file" in why */
static void *try_list(char **list, size_t from, AmpcLibProbe probe, void *ctx, char *found,
                      size_t foundlen, char *why, size_t whylen)
{
    for (size_t i = from; list[i]; i++) {
        void *h = NULL;
        char w[512] = "";
        if (probe(list[i], ctx, &h, w, sizeof w)) {
            if (found)
                snprintf(found, foundlen, "%s", list[i]);
            return h;
        }
        if (w[0])
            snprintf(why, whylen, "%s", w);
    }
    return NULL;
}

void *ampc_lib_search(AmpcLibId id, const char *env_path, char **(*pydirs_fn)(void),
                      AmpcLibProbe probe, void *ctx, char *found, size_t foundlen, char *err,
                      size_t errlen)
{
    const LibInfo *li = &libs[id];
    char why[512] = "";
    char **first = ampc_lib_candidates(id, env_path, NULL);
    if (!first) {
        snprintf(err, errlen, "%s: out of memory", li->name);
        return NULL;
    }
    void *h = try_list(first, 0, probe, ctx, found, foundlen, why, sizeof why);
    size_t nfirst = 0;
    while (first[nfirst])
        nfirst++;
    ampc_lib_free_list(first);
    if (h)
        return h;
    char **py = pydirs_fn ? pydirs_fn() : NULL;
    char **all = ampc_lib_candidates(id, env_path, (const char *const *)py);
    if (all)
        h = try_list(all, nfirst, probe, ctx, found, foundlen, why, sizeof why);
    if (!h) {
        char dirs[1024] = "";
        size_t at = 0;
        for (int i = 0; py && py[i] && at < sizeof dirs - 1; i++)
            if (usable_dir(py[i]))
                at += (size_t)snprintf(dirs + at, sizeof dirs - at, "%s%s", at ? ":" : "",
                                       py[i]);
        snprintf(err, errlen,
                 "cannot load %s (%s): looked in $AMPC_CUDA_LIB_PATH (%s), the system's library "
                 "path (LD_LIBRARY_PATH, ld.so.cache), and python3's sys.path (%s) under "
                 "%s/ and %s/%s%s; install %s (pip) or the CUDA toolkit's library, or set "
                 "AMPC_CUDA_LIB_PATH",
                 li->soname, li->name, env_path && *env_path ? env_path : "unset",
                 dirs[0] ? dirs : "no python3", li->sub[0], li->sub[1],
                 why[0] ? "; last loader error: " : "", why, li->wheel);
    }
    ampc_lib_free_list(py);
    ampc_lib_free_list(all);
    return h;
}

/* ---- python3's sys.path, without a shell ----------------------------------------- */

char **ampc_python_sys_path(void)
{
    List l = {0};
    int fd[2];
    if (pipe(fd) != 0)
        return finish(&l);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, 2);
        char *argv[] = {"python3", "-c", "import sys\nfor p in sys.path: print(p)", NULL};
        execvp("python3", argv);
        _exit(127);
    }
    close(fd[1]);
    if (pid < 0) {
        close(fd[0]);
        return finish(&l);
    }
    FILE *f = fdopen(fd[0], "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (line[0])
            push(&l, line, NULL, NULL);
    }
    if (f)
        fclose(f);
    else
        close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    return finish(&l);
}

/* ---- the process-wide handles ---------------------------------------------------- */

/* cuDNN 9's libcudnn.so.9 is a shim that dlopens its sub-libraries by
 * soname, relying on its own RUNPATH ($ORIGIN).  Where the loader does not
 * apply that RUNPATH (under AddressSanitizer, whose dlopen interceptor makes
 * libasan the caller) and no loader-cache entry lists the toolkit (a fresh
 * machine), the shim prints "Invalid handle. Cannot load symbol ..." and
 * aborts.  So the sub-libraries beside a libcudnn.so found by path are
 * loaded first, by path: the shim's dlopen by soname then finds them
 * loaded.  Process-wide, as the libraries themselves. */
static void preload_cudnn_parts(const char *cand)
{
    static const char *const parts[] = {
        "libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcudnn_heuristic.so.9",
        "libcudnn_engines_precompiled.so.9", "libcudnn_engines_runtime_compiled.so.9",
        "libcudnn_cnn.so.9", "libcudnn_adv.so.9"};
    const char *slash = strrchr(cand, '/');
    if (!slash || strncmp(slash + 1, "libcudnn.so", 11) != 0)
        return;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        char path[4096];
        int n = snprintf(path, sizeof path, "%.*s/%s", (int)(slash - cand), cand, parts[i]);
        if (n > 0 && (size_t)n < sizeof path && access(path, F_OK) == 0)
            (void)dlopen(path, RTLD_NOW | RTLD_GLOBAL); /* the shim reports what is missing */
    }
}

static bool dl_probe(const char *cand, void *ctx, void **handle, char *why, size_t whylen)
{
    (void)ctx;
    bool path = strchr(cand, '/') != NULL;
    if (path && access(cand, F_OK) != 0)
        return false; /* not there: not worth a loader error */
    if (path)
        preload_cudnn_parts(cand);
    *handle = dlopen(cand, RTLD_NOW | RTLD_GLOBAL);
    if (!*handle) {
        const char *e = dlerror();
        snprintf(why, whylen, "%s", e ? e : cand);
    }
    return *handle != NULL;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *handles[AMPC_LIB_COUNT];
static char where[AMPC_LIB_COUNT][1024];

const char *ampc_lib_where(AmpcLibId id) { return where[id]; }

void *ampc_lib_open(AmpcLibId id, char *err, size_t errlen)
{
    if (id == AMPC_LIB_CUBLAS && !ampc_lib_open(AMPC_LIB_CUBLASLT, err, errlen))
        return NULL;
    pthread_mutex_lock(&lock);
    if (!handles[id])
        handles[id] = ampc_lib_search(id, getenv("AMPC_CUDA_LIB_PATH"), ampc_python_sys_path,
                                      dl_probe, NULL, where[id], sizeof where[id], err, errlen);
    void *h = handles[id];
    pthread_mutex_unlock(&lock);
    return h;
}
