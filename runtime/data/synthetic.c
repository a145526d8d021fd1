/* synthetic.c - the `synthetic` data source: deterministic random samples of
 * the model's input shape, for throughput runs and tests (DESIGN.md 6).
 *
 * Nothing is stored: element e of sample k of a split is U(-1, 1) drawn
 * from the runtime's counter-based generator (rand.c) at (seed, stream,
 * k*size + e), its label uniform in [0, classes) from a second stream, so
 * any batch of any epoch can be produced in any order, at any batch size,
 * and the same seed gives the same data.  The labels are unrelated to the
 * inputs.  The arithmetic is kernels/splitmix.h's, which the CUDA kernel
 * that makes the batch on the device (cuda/synthetic.cuh) shares.
 */
#include <string.h>

#include "data.h"
#include "kernels/splitmix.h"
#include "rand.h"

RtSyntheticKeys rt_synthetic_keys(uint64_t seed, RtSplit split)
{
    bool train = split == RT_SPLIT_TRAIN;
    uint64_t sx = rt_hash_name(train ? "synthetic/train" : "synthetic/val");
    uint64_t sy = rt_hash_name(train ? "synthetic/train/label" : "synthetic/val/label");
    return (RtSyntheticKeys){ampc_rand_key(seed, sx), ampc_rand_key(seed, sy)};
}

static void synthetic_fill(const RtDataset *ds, RtSplit split, const int64_t *idx, int64_t n,
                           float *x, float *y)
{
    RtSyntheticKeys key = rt_synthetic_keys(ds->seed, split);
    uint64_t size = (uint64_t)ds->sample_size;
    for (int64_t j = 0; j < n; j++) {
        uint64_t k = (uint64_t)idx[j];
        float *row = x + (size_t)j * size;
        for (uint64_t e = 0; e < size; e++)
            row[e] = ampc_synthetic_x(key.x, k * size + e);
    }
    rt_synthetic_labels(ds, split, idx, n, y);
}

bool rt_data_is_synthetic(const RtDataset *ds) { return ds->fill == synthetic_fill; }

void rt_synthetic_labels(const RtDataset *ds, RtSplit split, const int64_t *idx, int64_t n,
                         float *y)
{
    RtSyntheticKeys key = rt_synthetic_keys(ds->seed, split);
    for (int64_t j = 0; j < n; j++)
        y[j] = ampc_synthetic_y(key.y, (uint64_t)idx[j], (uint64_t)ds->classes);
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
