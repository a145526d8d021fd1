/*
 * test_emu_checker.c - the CUDA emulator itself (runtime/emu/; issue 22):
 *
 *   - a correct tiled reduction (16-byte loads, shared memory, barriers, a
 *     warp shuffle) gives the bits of its CPU twin in the same fixed order,
 *     under every schedule, and the emulator reports nothing;
 *   - every planted defect of emu_fixtures.cu is reported, under every
 *     schedule, with the kernel, the buffer or call site, the offset and the
 *     threads in the message (a checker that reports nothing fails here);
 *   - a raw pointer into device memory faults with the buffer named;
 *   - the counts of three fixtures equal hand-computed values: a scalar
 *     copy, a 16-byte vector copy, a one-thread-per-channel serial sum.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu_test.h"

/* emu_fixtures.cu's launchers */
int fx_run_block_sum(size_t n4, const float *x, float *partial, float *out, unsigned grid);
int fx_run(const char *which, unsigned grid, unsigned block, size_t n, float *x, float *y);
int fx_run_channel_sum(unsigned grid, unsigned block, size_t outer, size_t c, size_t inner,
                       const float *x, float *y);

static uint32_t rng = 12345;
static float unit(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / 16777216.0f;
}

static float *data_zero(size_t n)
{
    float *p = dev(n * sizeof(float), "x");
    memset(p, 0, n * sizeof(float));
    return p;
}

/* ---- a correct reduction against its twin in the same order ----------------------------- */

enum { THREADS = 128 };

/* fx_block_sum's order: each thread's share in index order, the tree over
 * 128 then 64 lanes, the shuffle tree over the last 32, blocks in order */
static float twin_block_sum(size_t n4, const float *x, unsigned grid)
{
    float total = 0.0f;
    for (unsigned b = 0; b < grid; b++) {
        float part[THREADS];
        for (unsigned t = 0; t < THREADS; t++) {
            float v = 0.0f;
            for (size_t i = b * THREADS + t; i < n4; i += (size_t)grid * THREADS) {
                const float *q = x + 4 * i;
                v = v + ((q[0] + q[1]) + (q[2] + q[3]));
            }
            part[t] = v;
        }
        for (unsigned s = THREADS / 2; s >= 32; s /= 2)
            for (unsigned t = 0; t < s; t++)
                part[t] = part[t] + part[t + s];
        for (unsigned off = 16; off > 0; off /= 2)
            for (unsigned t = 0; t + off < 32; t++) /* lanes read before they write */
                part[t] = part[t] + part[t + off];
        total = total + part[0];
    }
    return total;
}

static void test_reduction_matches_twin(void **st)
{
    (void)st;
    const size_t n4 = 517;
    const unsigned grid = 3;
    float *x = dev(4 * n4 * sizeof(float), "x");
    float *partial = dev(grid * sizeof(float), "partial"), *out = dev(sizeof(float), "out");
    for (size_t i = 0; i < 4 * n4; i++)
        x[i] = (unit() - 0.5f) * (i % 13 == 0 ? 1e4f : 1.0f);
    float want = twin_block_sum(n4, x, grid);
    EMU_PASSES
    {
        *out = -1.0f;
        assert_int_equal(fx_run_block_sum(n4, x, partial, out, grid), 0);
        assert_memory_equal(out, &want, sizeof want);
    }
    const AmpcEmuCounts *c = ampc_emu_last_counts(); /* fx_combine's */
    assert_string_equal(c->kernel, "fx_combine");
    assert_int_equal(c->global_loads, grid);
    assert_int_equal(c->max_thread_loads, grid);
    ampc_emu_free(x), ampc_emu_free(partial), ampc_emu_free(out);
}

/* fx_block_sum's own counts, caught as the launch ends: per block 3 barriers,
 * 5 shuffles, 512 bytes of shared memory */
static AmpcEmuCounts block_sum_counts;
static void catch_block_sum(const AmpcEmuCounts *c, void *ctx)
{
    (void)ctx;
    if (!strcmp(c->kernel, "fx_block_sum"))
        block_sum_counts = *c;
}

static void test_reduction_counts(void **st)
{
    (void)st;
    const size_t n4 = 300;
    float *x = data_zero(4 * n4), *partial = dev(2 * sizeof(float), "partial");
    float *out = dev(sizeof(float), "out");
    ampc_emu_on_launch(catch_block_sum, NULL);
    EMU_PASSES
    {
        memset(&block_sum_counts, 0, sizeof block_sum_counts);
        assert_int_equal(fx_run_block_sum(n4, x, partial, out, 2), 0);
        const AmpcEmuCounts *c = &block_sum_counts;
        assert_int_equal(c->threads, 2 * THREADS);
        assert_int_equal(c->barriers, 2 * 3);
        assert_int_equal(c->warp_syncs, 2 * 5);
        assert_int_equal(c->shared_bytes, THREADS * sizeof(float));
        /* stores: 128 + 64 + 32 floats; loads: 2 x 64 + 2 x 32 + 32 */
        assert_int_equal(c->shared_write_bytes, 2 * 4 * (128 + 64 + 32));
        assert_int_equal(c->shared_read_bytes, 2 * 4 * (128 + 64 + 32));
        assert_int_equal(c->global_loads, n4); /* one 16-byte load a float4 */
        assert_int_equal(c->global_read_bytes, 16 * n4);
        assert_int_equal(c->max_thread_loads, 2); /* 300 float4s over 256 threads */
        assert_int_equal(c->global_write_bytes, 2 * sizeof(float));
    }
    ampc_emu_on_launch(NULL, NULL);
    ampc_emu_free(x), ampc_emu_free(partial), ampc_emu_free(out);
}

/* ---- planted defects --------------------------------------------------------------------- */

static char failure[4096];
static int failures;

static void record(const char *msg, void *ctx)
{
    (void)ctx;
    snprintf(failure, sizeof failure, "%s", msg);
    failures++;
}

static void want_in(const char *msg, const char *part)
{
    if (!strstr(msg, part))
        fail_msg("the emulator's message lacks \"%s\":\n%s", part, msg);
}

/* fixture `which` must fail under every schedule, its message holding each
 * of the NULL-terminated parts; y's first ybytes are zeroed before each */
static void expect_failure(const char *which, unsigned grid, unsigned block, size_t n, float *x,
                           float *y, size_t ybytes, ...)
{
    ampc_emu_on_failure(record, NULL);
    EMU_PASSES
    {
        if (ybytes)
            memset(y, 0, ybytes);
        failures = 0;
        failure[0] = 0;
        int e = fx_run(which, grid, block, n, x, y);
        ampc_emu_on_failure(emu_test_fail, NULL);
        if (e == 0 || failures != 1)
            fail_msg(
                "planted defect %s: launch returned %d with %d failures reported (schedule %s)",
                which, e, failures, ampc_emu_schedule_name());
        char kernel[80];
        snprintf(kernel, sizeof kernel, "kernel fx_%s (launch", which);
        want_in(failure, kernel);
        want_in(failure, "rerun with AMPC_EMU_SCHEDULE=");
        want_in(failure, ampc_emu_schedule_name());
        va_list ap;
        va_start(ap, ybytes);
        for (const char *p = va_arg(ap, const char *); p; p = va_arg(ap, const char *))
            want_in(failure, p);
        va_end(ap);
        ampc_emu_on_failure(record, NULL);
    }
    if (getenv("EMU_SHOW"))
        printf("%s\n", failure);
    ampc_emu_on_failure(emu_test_fail, NULL);
}

static float *data(size_t n, const char *name)
{
    float *p = dev(n * sizeof(float), name);
    for (size_t i = 0; i < n; i++)
        p[i] = unit();
    return p;
}

static void test_missing_syncthreads(void **st)
{
    (void)st;
    float *x = data(2 * THREADS, "x"), *out = dev(2 * sizeof(float), "out");
    expect_failure("no_syncthreads", 2, THREADS, 0, x, out, 0, "race on shared 'part' (512 bytes",
                   "it earlier: ", NULL);
    ampc_emu_free(x), ampc_emu_free(out);
}

static void test_warp_without_syncwarp(void **st)
{
    (void)st;
    float *x = data(32, "x"), *out = dev(sizeof(float), "out");
    expect_failure("warp_no_syncwarp", 1, 32, 0, x, out, 0, "race on shared 'lanes' (128 bytes",
                   "block 0 thread", "(warp 0 lane",
                   "the same warp with no __syncwarp or __syncthreads between", NULL);
    ampc_emu_free(x), ampc_emu_free(out);
}

static void test_two_blocks_one_word(void **st)
{
    (void)st;
    float *out = dev(sizeof(int), "out");
    expect_failure("two_blocks", 3, 32, 0, NULL, out, 0, "race on buffer 'out' (4 bytes) at byte 0",
                   "thread 0 (warp 0 lane 0) stores it, block ",
                   "two blocks of one launch are never ordered", NULL);
    ampc_emu_free(out);
}

static void test_shared_one_past_end(void **st)
{
    (void)st;
    float *out = dev(THREADS * sizeof(float), "out");
    expect_failure("shared_past_end", 1, THREADS, 0, NULL, out, 0,
                   "out of bounds: shared 's' (512 bytes, declared at", "at byte 512",
                   "a 4-byte store by block 0 thread 127", NULL);
    ampc_emu_free(out);
}

static void test_misaligned_vector_load(void **st)
{
    (void)st;
    float *x = data(16, "x"), *out = dev(sizeof(float), "out");
    expect_failure("misaligned_vec", 1, 32, 0, x, out, 0,
                   "misaligned 16-byte load: buffer 'x' (64 bytes) at byte 4",
                   "(address % 16 = 4) by block 0 thread 0", NULL);
    ampc_emu_free(x), ampc_emu_free(out);
}

static void test_divergent_syncthreads(void **st)
{
    (void)st;
    float *out = dev(THREADS * sizeof(float), "out");
    expect_failure("divergent_sync", 1, THREADS, 0, NULL, out, 0,
                   "block 0: a barrier or warp primitive is never completed",
                   "__syncthreads at tests/runtime/emu_fixtures.cu:", "waits with threads 0-99",
                   "threads 100-127 returned without reaching it", NULL);
    ampc_emu_free(out);
}

static void test_order_dependent_atomic(void **st)
{
    (void)st;
    const size_t n = 700;
    float *x = dev(n * sizeof(float), "x"), *sum = dev(sizeof(float), "sum");
    for (size_t i = 0; i < n; i++) /* every add rounds: the order shows in the low bits */
        x[i] = 1.0f + unit();
    expect_failure("atomic_order", 3, 64, n, x, sum, sizeof(float),
                   "order-dependent float atomicAdd on buffer 'sum' (4 bytes) at byte 0",
                   "700 adds give", "then block ", NULL);
    /* the same adds, declared nondeterministic: allowed */
    EMU_PASSES
    {
        *sum = 0.0f;
        assert_int_equal(fx_run("atomic_nondet", 3, 64, n, x, sum), 0);
    }
    /* small integers add exactly in any order: no order dependence to report */
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(i % 9);
    EMU_PASSES
    {
        *sum = 0.0f;
        assert_int_equal(fx_run("atomic_order", 3, 64, n, x, sum), 0);
        assert_true(*sum == 2793.0f); /* 77 rounds of 0..8, plus 0..6 */
    }
    ampc_emu_free(x), ampc_emu_free(sum);
}

static void test_shared_never_written(void **st)
{
    (void)st;
    float *out = dev(2 * THREADS * sizeof(float), "out");
    expect_failure("shared_unwritten", 1, THREADS, 0, NULL, out, 0,
                   "read of shared memory never written: shared 's' (512 bytes", NULL);
    expect_failure("shared_across_blocks", 2, THREADS, 0, NULL, out, 0,
                   "read of shared memory never written: shared 's'",
                   "(no thread of block 1 stored it)", NULL);
    expect_failure("shared_too_big", 1, 32, 0, NULL, out, 0,
                   "shared memory: 'big' (52000 bytes, at tests/runtime/emu_fixtures.cu:",
                   "a block has 48 KiB", NULL);
    ampc_emu_free(out);
}

static void test_global_past_end(void **st)
{
    (void)st;
    float *y = dev(1000 * sizeof(float), "y");
    expect_failure("global_past_end", 3, 128, 1000, NULL, y, 0,
                   "out of bounds: buffer 'y' (4000 bytes) at byte 4000", "a 4-byte store by block",
                   NULL);
    ampc_emu_free(y);
}

static void test_shuffle_outside_mask(void **st)
{
    (void)st;
    float *out = dev(32 * sizeof(float), "out");
    expect_failure("shfl_outside", 1, 32, 0, NULL, out, 0, "__shfl_sync(0x0000ffff) at",
                   "reads lane 16, which is not in the mask", NULL);
    ampc_emu_free(out);
}

static void test_syncwarp_two_call_sites(void **st)
{
    (void)st;
    float *out = dev(32 * sizeof(float), "out");
    expect_failure("syncwarp_two_sites", 1, 32, 0, NULL, out, 0,
                   "block 0: a barrier or warp primitive is never completed",
                   "__syncwarp(0xffffffff) at tests/runtime/emu_fixtures.cu:", "waits with threads 0-15",
                   "waits with threads 16-31", NULL);
    ampc_emu_free(out);
}

/* a failure's AMPC_EMU_SCHEDULE replays that schedule alone */
static void test_schedule_from_environment(void **st)
{
    (void)st;
    const char *old = getenv("AMPC_EMU_SCHEDULE");
    char keep[64];
    snprintf(keep, sizeof keep, "%s", old ? old : "");
    setenv("AMPC_EMU_SCHEDULE", "seed:77", 1);
    int passes = 0;
    EMU_PASSES
    {
        passes++;
        assert_string_equal(ampc_emu_schedule_name(), "seed:77");
    }
    assert_int_equal(passes, 1);
    setenv("AMPC_EMU_SCHEDULE", "reverse", 1);
    assert_true(ampc_emu_pass(0));
    assert_string_equal(ampc_emu_schedule_name(), "reverse");
    assert_false(ampc_emu_pass(1));
    unsetenv("AMPC_EMU_SCHEDULE");
    passes = 0;
    EMU_PASSES passes++;
    assert_int_equal(passes, 3); /* seed:1, seed:2, reverse */
    if (old)
        setenv("AMPC_EMU_SCHEDULE", keep, 1);
}

static void test_bad_launch(void **st)
{
    (void)st;
    float *x = data(8, "x"), *y = dev(8 * sizeof(float), "y");
    ampc_emu_on_failure(record, NULL);
    failures = 0;
    assert_int_not_equal(fx_run("copy_scalar", 1, 2048, 8, x, y), 0);
    ampc_emu_on_failure(emu_test_fail, NULL);
    assert_int_equal(failures, 1);
    want_in(failure, "invalid launch configuration: grid 1x1x1, block 2048x1x1");
    ampc_emu_free(x), ampc_emu_free(y);
}

/* A raw pointer that reaches device memory faults, naming the buffer: the
 * launch runs in a child whose stderr comes back through a pipe. */
static void test_raw_pointer_faults(void **st)
{
    (void)st;
    float *y = dev(16 * sizeof(float), "smuggled");
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        signal(SIGSEGV, SIG_DFL); /* not cmocka's: the fault must end the child */
        freopen("/dev/null", "w", stdout);
        fx_run("raw_pointer", 1, 32, 0, NULL, y);
        _exit(0); /* not reached when the guard works */
    }
    close(fd[1]);
    char buf[4096];
    size_t got = 0;
    ssize_t k;
    while (got < sizeof buf - 1 && (k = read(fd[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)k;
    buf[got] = 0;
    close(fd[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_false(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    want_in(buf, "emu: kernel fx_raw_pointer touched device buffer 'smuggled' at byte 0 through a "
                 "raw pointer");
    ampc_emu_free(y);
}

/* ---- the counters against hand-computed values --------------------------------------------- */

static void no_flops(const AmpcEmuCounts *c)
{
    for (int k = 0; k < AMPC_EMU_NFLOP; k++)
        if (c->flops[k])
            fail_msg("%s: %llu %s, expected none", c->kernel, (unsigned long long)c->flops[k],
                     ampc_emu_flop_names[k]);
}

static void test_count_scalar_copy(void **st)
{
    (void)st;
    const size_t n = 1000;
    float *x = data(n, "x"), *y = dev(n * sizeof(float), "y");
    EMU_PASSES
    {
        assert_int_equal(fx_run("copy_scalar", 3, 128, n, x, y), 0);
        assert_memory_equal(y, x, n * sizeof(float));
        const AmpcEmuCounts *c = ampc_emu_last_counts();
        assert_string_equal(c->kernel, "fx_copy_scalar");
        assert_int_equal(c->blocks, 3);
        assert_int_equal(c->threads, 384);
        assert_int_equal(c->global_read_bytes, 4 * n);
        assert_int_equal(c->global_write_bytes, 4 * n);
        assert_int_equal(c->global_loads, n);
        assert_int_equal(c->global_stores, n);
        assert_int_equal(c->max_thread_loads, 3); /* threads 0-231 copy 3: ceil(1000 / 384) */
        assert_int_equal(c->shared_bytes, 0);
        assert_int_equal(c->atomics + c->barriers + c->warp_syncs, 0);
        no_flops(c);
    }
    ampc_emu_free(x), ampc_emu_free(y);
}

static void test_count_vector_copy(void **st)
{
    (void)st;
    const size_t n4 = 250;
    float *x = data(4 * n4, "x"), *y = dev(4 * n4 * sizeof(float), "y");
    EMU_PASSES
    {
        assert_int_equal(fx_run("copy_vec4", 2, 64, n4, x, y), 0);
        assert_memory_equal(y, x, 4 * n4 * sizeof(float));
        const AmpcEmuCounts *c = ampc_emu_last_counts();
        assert_int_equal(c->threads, 128);
        assert_int_equal(c->global_read_bytes, 16 * n4);
        assert_int_equal(c->global_write_bytes, 16 * n4);
        assert_int_equal(c->global_loads, n4); /* one 16-byte load a float4 */
        assert_int_equal(c->global_stores, n4);
        assert_int_equal(c->max_thread_loads, 2); /* ceil(250 / 128) */
        no_flops(c);
    }
    ampc_emu_free(x), ampc_emu_free(y);
}

static void test_count_channel_sum(void **st)
{
    (void)st;
    const size_t outer = 3, c = 5, inner = 7, n = outer * c * inner;
    float *x = data(n, "x"), *y = dev(c * sizeof(float), "y");
    EMU_PASSES
    {
        assert_int_equal(fx_run_channel_sum(1, 32, outer, c, inner, x, y), 0);
        const AmpcEmuCounts *k = ampc_emu_last_counts();
        assert_int_equal(k->threads, 32);
        assert_int_equal(k->global_read_bytes, 4 * n);
        assert_int_equal(k->global_write_bytes, 4 * c);
        assert_int_equal(k->global_loads, n);
        assert_int_equal(k->global_stores, c);
        assert_int_equal(k->max_thread_loads, outer * inner); /* the serial walk: 21 */
        assert_int_equal(k->flops[AMPC_EMU_F64_ADD], n);
        assert_int_equal(k->flops[AMPC_EMU_CVT], n + c); /* each x to double, each sum to float */
        for (int f = 0; f < AMPC_EMU_NFLOP; f++)
            if (f != AMPC_EMU_F64_ADD && f != AMPC_EMU_CVT)
                assert_int_equal(k->flops[f], 0);
    }
    for (size_t ch = 0; ch < c; ch++) { /* and the sum itself */
        double s = 0.0;
        for (size_t o = 0; o < outer; o++)
            for (size_t i = 0; i < inner; i++)
                s += x[(o * c + ch) * inner + i];
        float want = (float)s;
        assert_memory_equal(&y[ch], &want, sizeof want);
    }
    ampc_emu_free(x), ampc_emu_free(y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reduction_matches_twin),
        cmocka_unit_test(test_reduction_counts),
        cmocka_unit_test(test_missing_syncthreads),
        cmocka_unit_test(test_warp_without_syncwarp),
        cmocka_unit_test(test_two_blocks_one_word),
        cmocka_unit_test(test_shared_one_past_end),
        cmocka_unit_test(test_misaligned_vector_load),
        cmocka_unit_test(test_divergent_syncthreads),
        cmocka_unit_test(test_order_dependent_atomic),
        cmocka_unit_test(test_shared_never_written),
        cmocka_unit_test(test_global_past_end),
        cmocka_unit_test(test_shuffle_outside_mask),
        cmocka_unit_test(test_syncwarp_two_call_sites),
        cmocka_unit_test(test_schedule_from_environment),
        cmocka_unit_test(test_bad_launch),
        cmocka_unit_test(test_raw_pointer_faults),
        cmocka_unit_test(test_count_scalar_copy),
        cmocka_unit_test(test_count_vector_copy),
        cmocka_unit_test(test_count_channel_sum),
    };
    return cmocka_run_group_tests(tests, emu_test_setup, emu_test_teardown);
}
