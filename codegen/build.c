/* build.c - compiles an emitted C file into a program.
 *
 * The runtime is found next to the compiler: an installed ampc
 * (PREFIX/bin/ampc) uses PREFIX/include/ampc and PREFIX/lib/ampc; ampc in
 * the build tree (build/ampc, or build/asan/ampc) uses runtime/ and the
 * libampcrt.a beside it.
 * $AMPC_RUNTIME_DIR names a folder holding both include/ and lib/ instead.
 * $CC and $CFLAGS are honoured, so a program can be built with sanitizers. */
#include "codegen.h"

#include <errno.h>
#include <limits.h>
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

bool cg_build(Diag *d, const char *c_file, const char *exe, const char *argv0)
{
    char inc[PATH_MAX], lib[PATH_MAX];
    if (!find_runtime(inc, lib, sizeof inc, argv0)) {
        diag_plain_error(d, "cannot find the ampc runtime (libampcrt.a and its headers) next to "
                            "ampc; set AMPC_RUNTIME_DIR");
        return false;
    }
    const char *cc = getenv("CC");
    const char *cflags = getenv("CFLAGS");
    if (!cc || !*cc)
        cc = "cc";
    if (!cflags)
        cflags = "-O2";
    size_t cap = strlen(cc) + strlen(cflags) + strlen(inc) + strlen(lib) + strlen(c_file) +
                 strlen(exe) + 256;
    char *cmd = malloc(cap);
    if (!cmd)
        DIE("out of memory");
    /* the flags are the user's to split, as make does */
    snprintf(cmd, cap, "%s %s -std=c11 -I'%s' '%s' '%s' -lopenblas -lz -lm -o '%s'", cc, cflags,
             inc, c_file, lib, exe);
    int rc = system(cmd);
    bool ok = rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
    if (!ok)
        diag_plain_error(d, "building the program failed: %s", cmd);
    free(cmd);
    return ok;
}
