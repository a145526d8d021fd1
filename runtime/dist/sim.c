/* sim.c - --sim-ranks K as a device (device.h) around the run's one device,
 * as the MPI engine wraps the CPU device (mpi.c): the single-process
 * reference of the MPI engine that tests/e2e/mpi.sh compares mpirun with.
 *
 * Its world is the K simulated ranks and its rank the one whose micro-batch
 * the loop computes now: the loop runs the step's train_step once per rank
 * (rt_dev_rank says whose batch and Dropout seed), and after each it
 * all-reduces the gradients.  The all-reduce of ranks 0 .. K - 2 adds their
 * gradients into fp32 sums this device owns (in the order and the precision
 * mpi.c sums the ranks': rank 0's + rank 1's + ..., so with two ranks the sum
 * a + b is the bits either rank computes); the last rank's writes the sums
 * back, rounded to each gradient's dtype once, and the next step starts at
 * rank 0 again.  Every other call is the inner device's.
 */
#include <stdlib.h>
#include <string.h>

#include "fwd.h"
#include "mpi_rt.h"

typedef struct {
    RtFwd f;         /* first: an RtDevice * is a SimDev * */
    RtDeviceOps ops; /* this device's table */
    int nsim, at;    /* the ranks simulated; the one computing now */
    float *acc;      /* the running fp32 sums, every gradient end to end */
    size_t nacc;
} SimDev;

static SimDev *sd(RtDevice *d) { return (SimDev *)d; }
static int sim_world_size(const RtDevice *d) { return ((const SimDev *)d)->nsim; }
static int sim_rank(const RtDevice *d) { return ((const SimDev *)d)->at; }

/* The sums' room for the step's gradients, made by rank 0. */
static bool sim_room(SimDev *s, const RtDevTensor *g, int n, char *err, size_t errlen)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (g[i].n > SIZE_MAX / sizeof(float) - total) {
            snprintf(err, errlen, "--sim-ranks: the gradients overflow the size of memory");
            return false;
        }
        total += g[i].n;
    }
    if (total <= s->nacc)
        return true;
    free(s->acc);
    s->nacc = 0;
    if (!(s->acc = malloc(total ? total * sizeof(float) : 1))) {
        snprintf(err, errlen, "--sim-ranks: out of memory for %zu gradient values", total);
        return false;
    }
    s->nacc = total;
    return true;
}

/* This rank's gradients into the sums (the last rank: the sums back). */
static bool sim_allreduce(RtDevice *d, const RtDevTensor *g, int n, RtReduceOp op, char *err,
                          size_t errlen)
{
    SimDev *s = sd(d);
    RtDevice *in = fwd_in(d);
    int r = s->at;
    if (op != RT_REDUCE_SUM) {
        snprintf(err, errlen, "--sim-ranks: only the gradients' sum is simulated");
        return false;
    }
    if (n < 0 || (n > 0 && !g)) {
        snprintf(err, errlen, "--sim-ranks: all-reduce of %d tensors", n);
        return false;
    }
    if (r == 0 && !sim_room(s, g, n, err, errlen))
        return false;
    enum { CH = 4096 };
    uint16_t raw[CH * 2]; /* one chunk of any dtype */
    float tmp[CH];
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        size_t es = rt_dtype_size(g[i].dt);
        for (size_t j = 0; j < g[i].n; j += CH) {
            size_t k = g[i].n - j < CH ? g[i].n - j : CH;
            float *acc = s->acc + at + j;
            d->syncs++; /* a read-back, counted as the loop's own would be */
            in->ops->to_host(in, raw, (const char *)g[i].ptr + j * es, k * es);
            rt_to_f32(tmp, raw, k, g[i].dt);
            for (size_t q = 0; q < k; q++)
                acc[q] = r == 0 ? tmp[q] : acc[q] + tmp[q];
            if (r == s->nsim - 1) { /* the sums, rounded to the dtype once */
                rt_from_f32(raw, acc, k, g[i].dt);
                in->ops->to_device(in, (char *)g[i].ptr + j * es, raw, k * es);
            }
        }
        at += g[i].n;
    }
    if (r < s->nsim - 1) {
        s->at = r + 1;
        return true;
    }
    s->at = 0;
    free(s->acc);
    s->acc = NULL;
    s->nacc = 0;
    return in->ops->allreduce(in, g, n, op, err, errlen); /* the inner device's own ranks */
}

static void sim_close(RtDevice *d)
{
    SimDev *s = sd(d);
    RtDevice *in = fwd_in(d);
    free(s->acc);
    free(s);
    rt_device_close(in);
}

RtDevice *rt_sim_wrap(RtDevice *inner, int nsim, char *err, size_t errlen)
{
    SimDev *s = inner && nsim > 1 ? calloc(1, sizeof *s) : NULL;
    if (!s) {
        snprintf(err, errlen, "--sim-ranks %d: %s", nsim,
                 !inner     ? "no device"
                 : nsim > 1 ? "out of memory for the device"
                            : "not > 1");
        return NULL;
    }
    s->ops = rt_fwd_ops("sim", inner, sim_close);
    s->ops.allreduce = sim_allreduce;
    s->ops.world_size = sim_world_size;
    s->ops.rank = sim_rank;
    s->f.base.ops = &s->ops;
    s->f.in = inner;
    s->nsim = nsim;
    return &s->f.base;
}
