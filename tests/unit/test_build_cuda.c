/*
 * test_build_cuda.c - how codegen/build.c links a program for a GPU
 * (cg_build_set_cuda, ampc --target=cuda): libampccuda.a beside
 * libampcrt.a, or a clear error that this ampc was built without nvcc; the
 * toolkit's libcudart_static.a from $AMPC_CUDA_HOME/lib64 (or the lib64
 * make found), or a clear error naming the file and the folder; never with
 * the MPI engine.  Then a real link: a C file calling rt_cuda_open_device
 * and cudart builds against this build's libraries, and runs (no GPU here:
 * the device does not open, cleanly).  Each runtime is a fake folder named
 * by $AMPC_RUNTIME_DIR.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../codegen/codegen.h"

static char dir[PATH_MAX]; /* the fake runtime: include/, lib/ */
static char out[1 << 14];  /* the diagnostics */

static void touch(const char *name)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ampc-build-cuda-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/include", dir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/lib", dir);
    mkdir(p, 0700);
    touch("lib/libampcrt.a");
    touch("prog.c");
    setenv("AMPC_RUNTIME_DIR", dir, 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    const char *names[] = {"lib/libampcrt.a", "lib/libampccuda.a", "lib/ampcmpi.o", "prog.c",
                           "prog", "lib", "include"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        remove(p);
    }
    rmdir(dir);
    unsetenv("AMPC_RUNTIME_DIR");
    unsetenv("AMPC_CUDA_HOME");
    cg_build_set_cuda(false);
    cg_build_set_mpi(false);
    return 0;
}

/* cg_build of prog.c; false expected; the diagnostics in out */
static bool build(void)
{
    memset(out, 0, sizeof out);
    FILE *f = fmemopen(out, sizeof out - 1, "w");
    Diag d;
    diag_init(&d, f);
    char c[PATH_MAX + 16], exe[PATH_MAX + 16];
    snprintf(c, sizeof c, "%s/prog.c", dir);
    snprintf(exe, sizeof exe, "%s/prog", dir);
    bool ok = cg_build(&d, c, exe, NULL);
    diag_free(&d);
    fclose(f);
    return ok;
}

static void test_no_cuda_library(void **state)
{
    (void)state;
    cg_build_set_cuda(true);
    assert_false(build());
    assert_non_null(strstr(out, "--target=cuda: this ampc was built without nvcc"));
    assert_non_null(strstr(out, "libampccuda.a"));
    assert_non_null(strstr(out, dir));
}

static void test_no_cudart(void **state)
{
    (void)state;
    touch("lib/libampccuda.a");
    cg_build_set_cuda(true);
    setenv("AMPC_CUDA_HOME", "/nonexistent/toolkit", 1);
    assert_false(build());
    assert_non_null(strstr(out, "libcudart_static.a"));
    assert_non_null(strstr(out, "/nonexistent/toolkit/lib64"));
    assert_non_null(strstr(out, "AMPC_CUDA_HOME"));
}

/* A GPU program for mpirun (nccl, dist_sync: NCCL's id goes over MPI) links
 * the MPI engine and the CUDA runtime together, through $MPICC: `false`
 * stands in for it, so the build fails and its message shows the command. */
static void test_with_mpi(void **state)
{
    (void)state;
    touch("lib/libampccuda.a");
    touch("lib/ampcmpi.o");
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/lib64", dir);
    assert_int_equal(mkdir(p, 0700), 0);
    touch("lib64/libcudart_static.a");
    setenv("AMPC_CUDA_HOME", dir, 1);
    setenv("MPICC", "false", 1);
    cg_build_set_cuda(true);
    cg_build_set_mpi(true);
    assert_false(build());
    unsetenv("MPICC");
    assert_non_null(strstr(out, "building the program failed (exit 1): false "));
    const char *mpi = strstr(out, "ampcmpi.o"), *cu = strstr(out, "libampccuda.a");
    const char *rt = strstr(out, "libampcrt.a"), *cudart = strstr(out, "-lcudart_static");
    assert_non_null(mpi);
    assert_non_null(cu);
    assert_non_null(rt);
    assert_non_null(cudart);
    assert_true(mpi < cu && cu < rt && rt < cudart); /* each before what it calls */
    snprintf(p, sizeof p, "%s/lib64/libcudart_static.a", dir);
    remove(p);
    snprintf(p, sizeof p, "%s/lib64", dir);
    rmdir(p);
}

/* A CPU program's build never looks for CUDA: with no libampccuda.a and an
 * empty libampcrt.a (an archive of nothing) a program of its own builds. */
static void test_cpu_build_links_no_cuda(void **state)
{
    (void)state;
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/lib/libampcrt.a", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("!<arch>\n", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/prog.c", dir);
    f = fopen(p, "w");
    assert_non_null(f);
    fputs("int main(void) { return 0; }\n", f);
    fclose(f);
    setenv("AMPC_CUDA_HOME", "/nonexistent/toolkit", 1);
    if (!build())
        fail_msg("a CPU program's build failed: %s", out);
    assert_string_equal(out, "");
}

/* This build's folder (the test is BUILD/tests/test_build_cuda). */
static bool build_dir(char *b, size_t cap)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return false;
    self[n] = 0;
    for (int k = 0; k < 2; k++)
        *strrchr(self, '/') = 0;
    return snprintf(b, cap, "%s", self) < (int)cap;
}

static void test_real_link(void **state)
{
    (void)state;
    char b[PATH_MAX], p[PATH_MAX * 2 + 64], q[PATH_MAX * 2 + 64], cwd[PATH_MAX];
    assert_true(build_dir(b, sizeof b));
    snprintf(p, sizeof p, "%s/libampccuda.a", b);
    if (access(p, R_OK) != 0) {
        printf("SKIPPED: test_build_cuda's real link: no %s (this build had no nvcc)\n", p);
        return;
    }
    /* the fake runtime's files become this build's (include: the sources) */
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(q, sizeof q, "%s/include", dir);
    rmdir(q);
    snprintf(p, sizeof p, "%s/runtime", cwd);
    assert_int_equal(symlink(p, q), 0);
    const char *libs[] = {"libampcrt.a", "libampccuda.a"};
    for (int i = 0; i < 2; i++) {
        snprintf(q, sizeof q, "%s/lib/%s", dir, libs[i]);
        remove(q);
        snprintf(p, sizeof p, "%s/%s", b, libs[i]);
        assert_int_equal(symlink(p, q), 0);
    }
    snprintf(q, sizeof q, "%s/prog.c", dir);
    FILE *f = fopen(q, "w");
    assert_non_null(f);
    /* the device opens through libampccuda.a (which calls libampcrt.a) and cudart */
    fputs("#include <stdio.h>\n#include \"cuda/program_cuda.h\"\n"
          "const RtModel ampc_model = {.name = \"t\"};\n"
          "int main(void)\n{\n    char err[1024];\n"
          "    RtDeviceConfig dc = rt_device_config_default();\n"
          "    struct RtDevice *d = rt_cuda_open_device(&ampc_model, &dc, err, sizeof err);\n"
          "    if (!d)\n        printf(\"%s\\n\", err);\n    return d ? 0 : 3;\n}\n",
          f);
    fclose(f);
    cg_build_set_cuda(true);
    bool ok = build();
    snprintf(q, sizeof q, "%s/include", dir);
    remove(q);
    mkdir(q, 0700);
    if (!ok)
        fail_msg("the link failed: %s", out);
    snprintf(q, sizeof q, "%s/prog", dir);
    setenv("ASAN_OPTIONS", "detect_leaks=0", 1); /* cudart's, under asan-check */
    FILE *run = popen(q, "r");
    assert_non_null(run);
    char line[1024] = "";
    if (!fgets(line, sizeof line, run))
        line[0] = 0;
    int st = pclose(run);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) == 0) {
        printf("note: a GPU opened (%s)\n", q);
        return;
    }
    assert_int_equal(WEXITSTATUS(st), 3);
    assert_non_null(strstr(line, "no CUDA device: GPU 0 cannot be opened: "));
    assert_non_null(strstr(line, "--target=cuda"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_no_cuda_library, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_cudart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_with_mpi, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cpu_build_links_no_cuda, setup, teardown),
        cmocka_unit_test_setup_teardown(test_real_link, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
