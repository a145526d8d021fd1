/* mpi_sim.c - the single-process reference of the MPI engine (mpi_rt.h):
 * --sim-ranks K sums the K micro-batches' gradients in the order and the
 * precision runtime/dist/mpi.c sums the ranks' (fp32; with two ranks the
 * sum a + b is the bits either rank computes), and each rank's Dropout seed. */
#include <stdlib.h>
#include <string.h>

#include "mpi_rt.h"
#include "rand.h"

uint64_t rt_rank_seed(uint64_t seed, int r)
{
    return r == 0 ? seed : rt_mix64(seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)r));
}

static float *sim_acc; /* the running fp32 sums, every gradient end to end */
static size_t sim_n;

bool rt_sim_accumulate(RtDevice *d, const RtDevTensor *g, int n, int r, int nsim, char *err,
                       size_t errlen)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (g[i].n > SIZE_MAX / sizeof(float) - total) {
            snprintf(err, errlen, "--sim-ranks: the gradients overflow the size of memory");
            return false;
        }
        total += g[i].n;
    }
    if (r == 0 && total > sim_n) {
        free(sim_acc);
        sim_n = 0;
        if (!(sim_acc = malloc(total ? total * sizeof(float) : 1))) {
            snprintf(err, errlen, "--sim-ranks: out of memory for %zu gradient values", total);
            return false;
        }
        sim_n = total;
    }
    enum { CH = 4096 };
    uint16_t raw[CH * 2]; /* one chunk of any dtype */
    float tmp[CH];
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        size_t es = rt_dtype_size(g[i].dt);
        for (size_t j = 0; j < g[i].n; j += CH) {
            size_t k = g[i].n - j < CH ? g[i].n - j : CH;
            float *acc = sim_acc + at + j;
            rt_dev_to_host(d, raw, (const char *)g[i].ptr + j * es, k * es);
            rt_to_f32(tmp, raw, k, g[i].dt);
            for (size_t q = 0; q < k; q++)
                acc[q] = r == 0 ? tmp[q] : acc[q] + tmp[q];
            if (r == nsim - 1) { /* the sums, rounded to the dtype once */
                rt_from_f32(raw, acc, k, g[i].dt);
                rt_dev_to_device(d, (char *)g[i].ptr + j * es, raw, k * es);
            }
        }
        at += g[i].n;
    }
    if (r == nsim - 1) {
        free(sim_acc);
        sim_acc = NULL;
        sim_n = 0;
    }
    return true;
}
