/* loopref.c - linked with the C that `ampc -S` emits for a model: trains it
 * with the reference loop of tests/runtime/ref_loop.h (the CPU kernels on
 * host pointers, no device interface) and compares the parameters and
 * optimizer state, bit for bit, with a checkpoint the compiled program
 * wrote after the same steps with the same flags (tests/e2e/device_loop.sh).
 *
 *   loopref CHECKPOINT STEPS [the program's flags...]
 *
 * Exit 0: identical; 1: a difference (named on stderr); 2: bad usage.
 */
#include <stdio.h>
#include <stdlib.h>

#include "program.h"
#include "ref_loop.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: loopref CHECKPOINT STEPS [flags...]\n");
        return 2;
    }
    const RtModel *m = &ampc_model;
    RtTrainOptions o;
    char err[1024];
    rt_train_options_default(&o);
    o.prog = "loopref";
    if (!rt_train_apply_defaults(&o, m->train_defaults, err, sizeof err)) {
        fprintf(stderr, "loopref: %s\n", err);
        return 2;
    }
    char *end;
    long long steps = strtoll(argv[2], &end, 10);
    if (*end || steps < 1) {
        fprintf(stderr, "loopref: STEPS '%s' is not a number >= 1\n", argv[2]);
        return 2;
    }
    /* the flags after STEPS, as the program's main parses them */
    const char *ckpt = argv[1];
    argv[2] = argv[0];
    if (rt_train_parse_args(&o, argc - 2, argv + 2, stdout, stderr) >= 0)
        return 2;
    if (ref_loop_run(m, &o, steps, ckpt, err, sizeof err) != 0) {
        fprintf(stderr, "loopref: %s (model %s, checkpoint %s)\n", err, m->name, ckpt);
        return 1;
    }
    return 0;
}
