/*
 * emu_test.h - what the emulator's tests share (test_cuda_emu.c,
 * test_cuda_ops_emu.c, test_cuda_layout_emu.c, test_emu_checker.c): device
 * buffers, the schedules every case runs under, a failed launch as a cmocka
 * failure, and the per-kernel counts printed at the end.  Include after
 * <cmocka.h>.
 */
#ifndef AMPC_TESTS_EMU_TEST_H
#define AMPC_TESTS_EMU_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/emu.h"

/* The body runs under seed 1, seed 2 and the reversed order (or only under
 * $AMPC_EMU_SCHEDULE, which a failure names). */
#define EMU_PASSES for (int emu_pass_ = 0; ampc_emu_pass(emu_pass_); emu_pass_++)

static void emu_test_fail(const char *msg, void *ctx)
{
    (void)ctx;
    fail_msg("%s", msg);
}

/* a group's setup: every launch's checks fail the running test */
static int emu_test_setup(void **state)
{
    (void)state;
    ampc_emu_on_failure(emu_test_fail, NULL);
    return 0;
}

/* a group's teardown: the counts of every kernel that ran (issue 24's cost
 * model is checked against these) */
static int emu_test_teardown(void **state)
{
    (void)state;
    ampc_emu_print_kernels(stdout);
    return 0;
}

/* device memory for a kernel (the CPU twins read and write it too) */
static void *dev(size_t bytes, const char *name) { return ampc_emu_malloc(bytes, name); }

#endif
