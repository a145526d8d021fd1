/* test_cuda_libs.c - finding cuDNN, cuBLAS(Lt) and NCCL at run time
 * (runtime/cuda/libs.c): the candidate list and its order, and the search
 * over a fake directory tree with a fake loader (no CUDA library needed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sys/stat.h>

#include "cuda/libs.c"

static char root[64];

static void mkfile(const char *rel)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    for (char *s = p + strlen(root) + 1; (s = strchr(s, '/')); s++) {
        *s = 0;
        mkdir(p, 0700);
        *s = '/';
    }
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("not an ELF file\n", f);
    fclose(f);
}

/* the fake loader: a path loads when the file exists, the bare soname when
 * "the system" has it; every probe is recorded */
typedef struct {
    bool system_has;
    char log[64][512];
    int n;
} Fake;

static bool fake_probe(const char *cand, void *ctx, void **handle, char *why, size_t whylen)
{
    Fake *f = ctx;
    if (f->n < 64)
        snprintf(f->log[f->n++], 512, "%s", cand);
    bool ok = strchr(cand, '/') ? access(cand, F_OK) == 0 : f->system_has;
    if (!ok && !strchr(cand, '/'))
        snprintf(why, whylen, "%s: cannot open shared object file", cand);
    *handle = ok ? (void *)1 : NULL;
    return ok;
}

static int py_calls;
static char **fake_pydirs(void)
{
    py_calls++;
    char **v = calloc(4, sizeof *v);
    char a[256], b[256];
    snprintf(a, sizeof a, "%s/py/lib/python3.12/site-packages", root);
    snprintf(b, sizeof b, "%s/py/dist-packages", root);
    v[0] = strdup("");          /* sys.path's working directory: skipped */
    v[1] = strdup(a);
    v[2] = strdup(b);
    return v;
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/ampc-libs-XXXXXX");
    assert_non_null(mkdtemp(root));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char *argv[] = {"rm", "-rf", root, NULL};
    pid_t p = fork();
    if (p == 0) {
        execvp("rm", argv);
        _exit(1);
    }
    waitpid(p, NULL, 0);
    return 0;
}

static void test_candidates_order(void **state)
{
    (void)state;
    const char *py[] = {"/site", "", "relative/dir", "/site2", NULL};
    char **c = ampc_lib_candidates(AMPC_LIB_CUDNN, "/env1:rel:/env2::", py);
    const char *want[] = {
        "/env1/libcudnn.so.9", "/env1/nvidia/cudnn/lib/libcudnn.so.9",
        "/env1/nvidia/cu13/lib/libcudnn.so.9", "/env2/libcudnn.so.9",
        "/env2/nvidia/cudnn/lib/libcudnn.so.9", "/env2/nvidia/cu13/lib/libcudnn.so.9",
        "libcudnn.so.9", "/site/nvidia/cudnn/lib/libcudnn.so.9",
        "/site/nvidia/cu13/lib/libcudnn.so.9", "/site2/nvidia/cudnn/lib/libcudnn.so.9",
        "/site2/nvidia/cu13/lib/libcudnn.so.9", NULL};
    for (int i = 0; want[i] || c[i]; i++) {
        assert_non_null(c[i]);
        assert_non_null(want[i]);
        assert_string_equal(c[i], want[i]);
    }
    ampc_lib_free_list(c);
    c = ampc_lib_candidates(AMPC_LIB_NCCL, NULL, NULL);
    assert_string_equal(c[0], "libnccl.so.2");
    assert_null(c[1]);
    ampc_lib_free_list(c);
    c = ampc_lib_candidates(AMPC_LIB_CUBLAS, "", NULL);
    assert_string_equal(c[0], "libcublas.so.13");
    ampc_lib_free_list(c);
    assert_string_equal(ampc_lib_soname(AMPC_LIB_CUBLASLT), "libcublasLt.so.13");
}

static void test_search_system_first(void **state)
{
    (void)state;
    mkfile("py/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9");
    Fake f = {.system_has = true};
    char found[512], err[2048];
    py_calls = 0;
    assert_non_null(ampc_lib_search(AMPC_LIB_CUDNN, NULL, fake_pydirs, fake_probe, &f, found,
                                    sizeof found, err, sizeof err));
    assert_string_equal(found, "libcudnn.so.9");
    assert_int_equal(py_calls, 0); /* python3 is not even run */
}

static void test_search_env_before_system(void **state)
{
    (void)state;
    mkfile("envlib/nvidia/cu13/lib/libcublas.so.13");
    char env[256], want[512], found[512], err[2048];
    snprintf(env, sizeof env, "%s/nothing:%s/envlib", root, root);
    snprintf(want, sizeof want, "%s/envlib/nvidia/cu13/lib/libcublas.so.13", root);
    Fake f = {.system_has = true};
    assert_non_null(ampc_lib_search(AMPC_LIB_CUBLAS, env, fake_pydirs, fake_probe, &f, found,
                                    sizeof found, err, sizeof err));
    assert_string_equal(found, want);
}

static void test_search_python_last(void **state)
{
    (void)state;
    mkfile("py/dist-packages/nvidia/nccl/lib/libnccl.so.2");
    char env[256], want[512], found[512], err[2048];
    snprintf(env, sizeof env, "%s/nothing", root);
    snprintf(want, sizeof want, "%s/py/dist-packages/nvidia/nccl/lib/libnccl.so.2", root);
    Fake f = {.system_has = false};
    py_calls = 0;
    assert_non_null(ampc_lib_search(AMPC_LIB_NCCL, env, fake_pydirs, fake_probe, &f, found,
                                    sizeof found, err, sizeof err));
    assert_string_equal(found, want);
    assert_int_equal(py_calls, 1);
    /* the env dir, then the system, then python: each candidate once, in order */
    assert_int_equal(f.n, 3 + 1 + 2 + 1); /* dist-packages: found at its first */
    assert_string_equal(f.log[3], "libnccl.so.2");
    assert_non_null(strstr(f.log[4], "site-packages/nvidia/nccl/lib"));
}

static void test_search_fails_naming_everything(void **state)
{
    (void)state;
    Fake f = {.system_has = false};
    char found[512] = "", err[2048];
    assert_null(ampc_lib_search(AMPC_LIB_CUBLASLT, "/no/such/dir", fake_pydirs, fake_probe, &f,
                                found, sizeof found, err, sizeof err));
    assert_string_equal(found, "");
    assert_non_null(strstr(err, "cannot load libcublasLt.so.13 (cuBLASLt 13)"));
    assert_non_null(strstr(err, "/no/such/dir"));
    assert_non_null(strstr(err, "site-packages"));
    assert_non_null(strstr(err, "nvidia/cublas/lib"));
    assert_non_null(strstr(err, "nvidia-cublas"));
    assert_non_null(strstr(err, "cannot open shared object file"));
    assert_non_null(strstr(err, "AMPC_CUDA_LIB_PATH"));
}

/* the real loader's probe: a missing file is no error worth reporting, a
 * file that is not a library gives the loader's message */
static void test_dl_probe(void **state)
{
    (void)state;
    char p[512], why[512] = "";
    void *h = (void *)1;
    snprintf(p, sizeof p, "%s/missing/libcudnn.so.9", root);
    assert_false(dl_probe(p, NULL, &h, why, sizeof why));
    assert_string_equal(why, "");
    mkfile("bad/libcudnn.so.9");
    snprintf(p, sizeof p, "%s/bad/libcudnn.so.9", root);
    assert_false(dl_probe(p, NULL, &h, why, sizeof why));
    assert_null(h);
    assert_non_null(strstr(why, "libcudnn.so.9"));
}

static void test_python_sys_path(void **state)
{
    (void)state;
    char **v = ampc_python_sys_path();
    assert_non_null(v);
    for (int i = 0; v[i]; i++)
        assert_true(v[i][0] != 0);
    ampc_lib_free_list(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_candidates_order),
        cmocka_unit_test(test_search_system_first),
        cmocka_unit_test(test_search_env_before_system),
        cmocka_unit_test(test_search_python_last),
        cmocka_unit_test(test_search_fails_naming_everything),
        cmocka_unit_test(test_dl_probe),
        cmocka_unit_test(test_python_sys_path),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
