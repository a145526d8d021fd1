/* lagcount.c - linked with the C that `ampc -S` emits for a model (built for
 * the CPU runtime: --target=cpu, or --target=cuda --kernels=cpu): trains it
 * on the CPU device in its lagging mode (device.h's rt_device_cpu_lagging,
 * a device that runs a step behind the host, as a GPU does) and checks the
 * waits for the device that the loop makes in the steady steps, those that
 * log nothing after a step that logged nothing (RtTrainResult's
 * steady_syncs over steady_steps; a step after one that logged finds the
 * device idle), which the synchronous CPU device never shows
 * (tests/e2e/device_loop.sh).  In the device's capture mode too: a step
 * that waits for, reads back, allocates or frees between its begin and its
 * end fails the run (device.h's rt_dev_capture_mode).
 *
 *   lagcount WAITS [the program's flags...]
 *
 * Prints the counts; exit 0 when the steady steps waited WAITS times each,
 * 1 when not (or the run failed, or no step was steady), 2 on bad usage.
 */
#include <stdio.h>
#include <stdlib.h>

#include "program.h"
#include "train.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: lagcount WAITS [flags...]\n");
        return 2;
    }
    char *end;
    long long want = strtoll(argv[1], &end, 10);
    if (*end || want < 0) {
        fprintf(stderr, "lagcount: WAITS '%s' is not a number >= 0\n", argv[1]);
        return 2;
    }
    const RtModel *m = &ampc_model;
    RtTrainOptions o;
    char err[1024];
    rt_train_options_default(&o);
    o.prog = "lagcount";
    if (!rt_train_apply_defaults(&o, m->train_defaults, err, sizeof err)) {
        fprintf(stderr, "lagcount: %s\n", err);
        return 2;
    }
    /* the flags after WAITS, as the program's main parses them */
    argv[1] = argv[0];
    if (rt_train_parse_args(&o, argc - 1, argv + 1, stdout, stderr) >= 0)
        return 2;
    o.device_lag = true;
    o.device_capture = true; /* every step one a CUDA graph could hold, or the run fails */
    RtTrainResult r;
    int rc = rt_train_run(m, &o, stdout, stderr, &r);
    if (rc != 0) {
        fprintf(stderr, "lagcount: the run failed (exit %d)\n", rc);
        return 1;
    }
    printf("lagcount: %lld waits for the device in %lld steady steps (%lld in the %lld steps "
           "that did not log)\n",
           (long long)r.steady_syncs, (long long)r.steady_steps, (long long)r.quiet_syncs,
           (long long)r.quiet_steps);
    printf("lagcount: %lld of %lld batches uploaded as bytes, %lld in the first layer's form\n",
           (long long)r.ingested, (long long)r.steps, (long long)r.formed);
    if (r.graph_replays > 0) /* --cuda-graph 1 */
        printf("lagcount: %lld steps replayed the captured CUDA graph\n",
               (long long)r.graph_replays);
    if (r.steady_steps == 0 || r.steady_syncs != want * r.steady_steps) {
        fprintf(stderr, "lagcount: expected %lld per step\n", want);
        return 1;
    }
    return 0;
}
