/* synthetic.c - the `synthetic` data source: deterministic random samples of
 * the model's input shape, for throughput runs and tests (DESIGN.md 6).
 *
 * Nothing is stored: element e of sample k of a split is U(-1, 1) drawn
 * from the counter-based generator of init.c at (seed, stream, k*size + e),
 * its label uniform in [0, classes) from a second stream, so any batch of
 * any epoch can be produced in any order, at any batch size, and the same
 * seed gives the same data.  The labels are unrelated to the inputs.
 */
#include <string.h>

#include "data.h"
#include "rand.h"

static uint64_t stream_of(RtSplit split, bool label)
{
    if (split == RT_SPLIT_TRAIN)
        return rt_hash_name(label ? "synthetic/train/label" : "synthetic/train");
    return rt_hash_name(label ? "synthetic/val/label" : "synthetic/val");
}

static void synthetic_fill(const RtDataset *ds, RtSplit split, const int64_t *idx, int64_t n,
                           float *x, float *y)
{
    uint64_t sx = stream_of(split, false), sy = stream_of(split, true);
    uint64_t size = (uint64_t)ds->sample_size;
    for (int64_t j = 0; j < n; j++) {
        uint64_t k = (uint64_t)idx[j];
        float *row = x + (size_t)j * size;
        for (uint64_t e = 0; e < size; e++)
            row[e] = (float)(2.0 * rt_rand_uniform(ds->seed, sx, k * size + e) - 1.0);
        y[j] = (float)(rt_rand_u64(ds->seed, sy, k) % (uint64_t)ds->classes);
    }
}

void rt_data_synthetic(RtDataset *ds, int64_t sample_size, int64_t classes, uint64_t seed,
                       int64_t ntrain, int64_t nval)
{
    memset(ds, 0, sizeof *ds);
    ds->name = "synthetic";
    ds->sample_size = sample_size;
    ds->classes = classes > 0 ? classes : 1;
    ds->ntrain = ntrain;
    ds->nval = nval;
    ds->seed = seed;
    ds->fill = synthetic_fill;
}
