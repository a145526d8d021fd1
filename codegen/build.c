/* build.c - compiles an emitted C file into a program.
 *
 * The runtime is found next to the compiler: an installed ampc
 * (PREFIX/bin/ampc) uses PREFIX/include/ampc and PREFIX/lib/ampc; ampc in
 * the build tree (build/ampc, or build/asan/ampc) uses runtime/ and the
 * libampcrt.a beside it.
 * $AMPC_RUNTIME_DIR names a folder holding both include/ and lib/ instead.
 * $CC and $CFLAGS are honoured, so a program can be built with sanitizers;
 * ampc's -O0..-O3 and -g come after $CFLAGS (default -O2).
 * A program built for MPI (ampc --mpi, docs/kvstore.md) also links
 * ampcmpi.o, found beside libampcrt.a, through $MPICC (default mpicc, which
 * adds Open MPI's flags; its compiler is $OMPI_CC) instead of $CC; no other
 * program links or initialises MPI.
 *
 * A program for a GPU (ampc --target=cuda, docs/backend-cuda.md) also links
 * libampccuda.a, found beside libampcrt.a, and the CUDA toolkit's static
 * runtime (libcudart_static.a) from $AMPC_CUDA_HOME/lib64, or else the
 * toolkit's lib64 that make found beside nvcc when it built ampc
 * (AMPC_CUDA_LIBDIR); cuDNN, cuBLAS(Lt) and NCCL are opened at run time
 * (runtime/cuda/libs.c), so none is linked, and no nvcc runs per model.
 *
 * The compiler runs through posix_spawnp with an argument vector, never a
 * shell, so no path or flag is interpreted: $CC and $CFLAGS are split on
 * blanks (spaces, tabs, newlines) into words, with no quoting or expansion
 * (docs/codegen.md), and every path is one argument as given. */
#include "codegen.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* The folder of the running ampc. */
static bool self_dir(char *out, size_t cap, const char *argv0)
{
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) {
        if (!argv0 || !realpath(argv0, buf))
            return false;
    } else {
        buf[n] = 0;
    }
    char *slash = strrchr(buf, '/');
    if (!slash)
        return false;
    *slash = 0;
    if (strlen(buf) + 1 > cap)
        return false;
    memcpy(out, buf, strlen(buf) + 1);
    return true;
}

static bool find_runtime(char *inc, char *lib, size_t cap, const char *argv0)
{
    const char *env = getenv("AMPC_RUNTIME_DIR");
    if (env && *env) {
        snprintf(inc, cap, "%s/include", env);
        snprintf(lib, cap, "%s/lib/libampcrt.a", env);
        return exists(lib);
    }
    char dir[PATH_MAX / 2];
    if (!self_dir(dir, sizeof dir, argv0))
        return false;
    snprintf(inc, cap, "%s/../include/ampc", dir);
    snprintf(lib, cap, "%s/../lib/ampc/libampcrt.a", dir);
    if (exists(lib) && exists(inc))
        return true;
    /* the build tree: build/ampc or build/<variant>/ampc next to its runtime */
    snprintf(lib, cap, "%s/libampcrt.a", dir);
    for (const char *up = "/..", *up2 = "/../.."; up; up = up2, up2 = NULL) {
        snprintf(inc, cap, "%s%s/runtime/program.h", dir, up);
        if (exists(lib) && exists(inc)) {
            snprintf(inc, cap, "%s%s/runtime", dir, up);
            return true;
        }
    }
    return false;
}

typedef struct {
    char **v;
    int n, cap;
} Argv;

static void argv_add(Argv *a, const char *s)
{
    if (a->n + 2 > a->cap) {
        a->cap = a->cap ? a->cap * 2 : 32;
        a->v = realloc(a->v, sizeof(char *) * (size_t)a->cap);
        if (!a->v)
            DIE("out of memory");
    }
    if (!(a->v[a->n++] = strdup(s)))
        DIE("out of memory");
    a->v[a->n] = NULL;
}

/* The words of s, split on blanks: no quotes, escapes or expansions. */
static void argv_split(Argv *a, const char *s)
{
    const char *blank = " \t\n\r\v\f";
    while (*(s += strspn(s, blank))) {
        size_t k = strcspn(s, blank);
        char *w = strndup(s, k);
        if (!w)
            DIE("out of memory");
        argv_add(a, w);
        free(w);
        s += k;
    }
}

static void argv_free(Argv *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->v[i]);
    free(a->v);
}

/* The command for a message: words with anything but [-+_./=:,@%A-Za-z0-9]
 * in single quotes (shell style, for reading only; nothing runs it).
 * Control bytes are shown as '?' so a path cannot drive the terminal. */
static void print_command(FILE *f, const Argv *a)
{
    for (int i = 0; i < a->n; i++) {
        const char *w = a->v[i];
        bool plain = *w && strspn(w, "-+_./=:,@%ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                     "0123456789") == strlen(w);
        fputs(i ? " " : "", f);
        if (!plain)
            fputc('\'', f);
        for (const unsigned char *p = (const unsigned char *)w; *p; p++) {
            if (*p == '\'')
                fputs("'\\''", f);
            else
                fputc(*p < 0x20 || *p == 0x7f ? '?' : *p, f);
        }
        if (!plain)
            fputc('\'', f);
    }
}

extern char **environ;

/* out := the file `name` in the folder of lib (libampcrt.a), if it exists:
 * ampcmpi.o (--mpi) and libampccuda.a (--target=cuda) are installed beside it */
static bool beside_runtime(const char *lib, const char *name, char *out, size_t cap)
{
    const char *slash = strrchr(lib, '/');
    size_t dir = slash ? (size_t)(slash - lib) + 1 : 0, len = strlen(name) + 1;
    if (dir + len > cap)
        return false;
    memcpy(out, lib, dir);
    memcpy(out + dir, name, len);
    return exists(out);
}

static bool build_mpi; /* cg_build_set_mpi */

void cg_build_set_mpi(bool on) { build_mpi = on; }

static bool build_cuda; /* cg_build_set_cuda */

void cg_build_set_cuda(bool on) { build_cuda = on; }

static const char *build_cflags = ""; /* cg_build_set_cflags: ampc's -O and -g */

void cg_build_set_cflags(const char *flags) { build_cflags = flags ? flags : ""; }

static char *built_with_define; /* cg_build_set_command_line: -DAMPC_BUILT_WITH="..." */

/* text as a C string literal (every byte outside printable ASCII, and the
 * quote and backslash, octal-escaped), the value of one -D argument: no
 * shell reads it, so nothing else is special */
void cg_build_set_command_line(const char *text)
{
    free(built_with_define);
    built_with_define = NULL;
    if (!text)
        return;
    size_t len = 0;
    FILE *m = open_memstream(&built_with_define, &len);
    if (!m)
        DIE("out of memory");
    fputs("-DAMPC_BUILT_WITH=\"", m);
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        if (*p < 0x20 || *p > 0x7e || *p == '"' || *p == '\\' || *p == '?')
            fprintf(m, "\\%03o", *p);
        else
            fputc(*p, m);
    fputc('"', m);
    if (fclose(m) != 0)
        DIE("out of memory");
}

/* The driver API's two calls, through dlopen: ampc itself links no CUDA. */
static bool driver_has_device(char *why, size_t whylen)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, whylen, "no CUDA driver (libcuda.so.1)");
        return false;
    }
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
    int (*count)(int *) = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
    int n = 0, e = init && count ? init(0) : -1;
    if (e == 0)
        e = count(&n);
    if (e != 0 || n <= 0)
        snprintf(why, whylen, e ? "the CUDA driver reports error %d" : "no CUDA device", e);
    dlclose(h);
    return e == 0 && n > 0;
}

/* The folder of the toolkit's libcudart_static.a: $AMPC_CUDA_HOME/lib64,
 * else the one make found beside nvcc (AMPC_CUDA_LIBDIR).  False with a
 * message naming the file and where it looked. */
#ifndef AMPC_CUDA_LIBDIR
#define AMPC_CUDA_LIBDIR "" /* make found no nvcc */
#endif
static bool find_cudart(char *dir, size_t cap, char *why, size_t whylen)
{
    const char *home = getenv("AMPC_CUDA_HOME");
    const char *where;
    if (home && *home) {
        snprintf(dir, cap, "%s/lib64", home);
        where = " ($AMPC_CUDA_HOME/lib64)";
    } else if (*AMPC_CUDA_LIBDIR) {
        snprintf(dir, cap, "%s", AMPC_CUDA_LIBDIR);
        where = " (the toolkit's, found beside nvcc when ampc was built)";
    } else {
        snprintf(why, whylen, "this ampc was built without nvcc, so it knows no CUDA toolkit: "
                              "set AMPC_CUDA_HOME to one (e.g. /usr/local/cuda)");
        return false;
    }
    char file[PATH_MAX];
    if ((size_t)snprintf(file, sizeof file, "%s/libcudart_static.a", dir) >= sizeof file ||
        !exists(file)) {
        snprintf(why, whylen, "the CUDA toolkit's static runtime libcudart_static.a is not in "
                              "%.300s%s: install the CUDA toolkit or set AMPC_CUDA_HOME to it",
                 dir, where);
        return false;
    }
    return true;
}

bool cg_cuda_usable(const char *argv0, char *why, size_t whylen)
{
    char inc[PATH_MAX], lib[PATH_MAX], cu[PATH_MAX], spare[512];
    if (!why)
        why = spare, whylen = sizeof spare;
    if (!find_runtime(inc, lib, sizeof inc, argv0) ||
        !beside_runtime(lib, "libampccuda.a", cu, sizeof cu)) {
        snprintf(why, whylen, "this ampc has no CUDA runtime library (libampccuda.a)");
        return false;
    }
    return find_cudart(cu, sizeof cu, why, whylen) && driver_has_device(why, whylen);
}

/* A compiler that exits 0 must have written the program: a regular file
 * that is not empty (CC=true would leave the empty file the caller made
 * for it, and ampc would install it as the program).  A device or FIFO
 * written in place (-o /dev/null) cannot be checked. */
static bool made_program(Diag *d, const char *cc, const char *exe)
{
    struct stat st;
    bool found = stat(exe, &st) == 0;
    if (found && (!S_ISREG(st.st_mode) || st.st_size > 0))
        return true;
    diag_plain_error(d, "the C compiler '%s' exited 0 but wrote no program (%s): check CC", cc,
                     found ? "the output is empty" : "no output file");
    return false;
}

bool cg_build(Diag *d, const char *c_file, const char *exe, const char *argv0)
{
    char inc[PATH_MAX], lib[PATH_MAX];
    if (!find_runtime(inc, lib, sizeof inc, argv0)) {
        diag_plain_error(d, "cannot find the ampc runtime (libampcrt.a and its headers) next to "
                            "ampc; set AMPC_RUNTIME_DIR");
        return false;
    }
    char mpi_obj[PATH_MAX];
    if (build_mpi && !beside_runtime(lib, "ampcmpi.o", mpi_obj, sizeof mpi_obj)) {
        diag_plain_error(d,
                         "--mpi: this ampc's runtime has no MPI engine (ampcmpi.o beside %s): "
                         "build ampc where mpicc is (make deps-test installs Open MPI)",
                         lib);
        return false;
    }
    char cuda_lib[PATH_MAX], cudart_dir[PATH_MAX], why[768];
    if (build_cuda && !beside_runtime(lib, "libampccuda.a", cuda_lib, sizeof cuda_lib)) {
        diag_plain_error(d, "--target=cuda: this ampc was built without nvcc: its runtime has no "
                            "CUDA library (libampccuda.a beside %s); build ampc where the CUDA "
                            "toolkit is (make finds /usr/local/cuda/bin/nvcc or nvcc on PATH)", lib);
        return false;
    }
    if (build_cuda && !find_cudart(cudart_dir, sizeof cudart_dir, why, sizeof why)) {
        diag_plain_error(d, "--target=cuda: %s", why);
        return false;
    }
    const char *cc = getenv(build_mpi ? "MPICC" : "CC");
    const char *cflags = getenv("CFLAGS");
    if (!cc || !cc[strspn(cc, " \t\n\r\v\f")])
        cc = build_mpi ? "mpicc" : "cc";
    if (!cflags)
        cflags = "-O2";
    Argv a = {0};
    argv_split(&a, cc);
    argv_split(&a, cflags);
    argv_split(&a, build_cflags); /* after $CFLAGS: ampc -O3 wins over its -O2 */
    if (built_with_define)
        argv_add(&a, built_with_define);
    argv_add(&a, "-std=c11");
    argv_add(&a, "-I");
    argv_add(&a, inc);
    argv_add(&a, c_file);
    if (build_mpi) /* before the archive: its definitions replace mpi_none.c's weak ones */
        argv_add(&a, mpi_obj);
    if (build_cuda) /* before libampcrt.a, whose functions it calls */
        argv_add(&a, cuda_lib);
    argv_add(&a, lib);
    if (build_cuda) {
        argv_add(&a, "-L");
        argv_add(&a, cudart_dir);
        argv_split(&a, "-lcudart_static -ldl -lpthread -lrt -lstdc++");
    }
    argv_add(&a, "-lopenblas");
    argv_add(&a, "-lz");
    argv_add(&a, "-lm");
    argv_add(&a, "-o");
    argv_add(&a, exe);
    fflush(NULL);
    pid_t pid;
    int err = posix_spawnp(&pid, a.v[0], NULL, NULL, a.v, environ);
    int status = 0;
    bool ok = false;
    if (err) {
        diag_plain_error(d, "cannot run the C compiler '%s': %s (set CC)", a.v[0], strerror(err));
    } else {
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    if (!ok && !err) {
        char *cmd = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&cmd, &len);
        if (!m)
            DIE("out of memory");
        print_command(m, &a);
        fclose(m);
        if (WIFEXITED(status))
            diag_plain_error(d, "building the program failed (exit %d): %s", WEXITSTATUS(status), cmd);
        else
            diag_plain_error(d, "building the program failed (signal %d): %s",
                             WIFSIGNALED(status) ? WTERMSIG(status) : 0, cmd);
        free(cmd);
    }
    ok = ok && made_program(d, a.v[0], exe);
    argv_free(&a);
    return ok;
}
