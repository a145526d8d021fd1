/* fill_rate.c - the synthetic data source's fill rate on this machine, in ns
 * per element: the GPU cost model's fill_ns constant (passes/gpucost.c,
 * docs/gpucost.md, "The host").  A batch of ResNet-50's 3x224x224 images,
 * filled REPS times by the runtime's own rt_data_synthetic (one thread, as
 * the training loop fills); the median and the fastest pass.  Prints,
 * asserts nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "train.h"
#include "data/data.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int64_t batch = argc > 1 ? atoll(argv[1]) : 32, sample = 3 * 224 * 224;
    int reps = argc > 2 ? atoi(argv[2]) : 7;
    if (batch < 1 || reps < 1 || reps > 99)
        return 2;
    RtDataset ds;
    rt_data_synthetic(&ds, sample, 1000, 42, 1281167, 50000);
    float *x = malloc(sizeof *x * (size_t)(batch * sample)), *y = malloc(sizeof *y * (size_t)batch);
    int64_t *idx = malloc(sizeof *idx * (size_t)batch);
    if (!x || !y || !idx)
        return 1;
    double t[99];
    for (int r = 0; r < reps; r++) {
        for (int64_t i = 0; i < batch; i++)
            idx[i] = r * batch + i;
        double t0 = now();
        ds.fill(&ds, RT_SPLIT_TRAIN, idx, batch, x, y);
        t[r] = (now() - t0) / (double)(batch * sample) * 1e9;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp);
    printf("fill_rate: synthetic, batch %lld of %lld elements, %d passes: median %.2f ns per "
           "element, fastest %.2f (checksum %g)\n",
           (long long)batch, (long long)sample, reps, t[reps / 2], t[0], (double)x[sample - 1]);
    free(x), free(y), free(idx);
    return 0;
}
