/* ingest.c - the raw samples' normalisation (data.h's RtIngestNorm) on the
 * host: what the sources' fill computes from their bytes and what the
 * devices' ingest (device.h) computes on the device, through one function
 * of kernels/ingest.h, so the two are the same bits. */
#include "data.h"
#include "kernels/ingest.h"

_Static_assert(RT_INGEST_MAXC == AMPC_INGEST_MAXC, "one channel limit");

RtIngestNorm rt_ingest_scale(float div)
{
    RtIngestNorm g = {.channels = 1, .div = div};
    g.mean[0] = 0.0f;
    g.std[0] = 1.0f;
    return g;
}

void rt_ingest_floats(const RtIngestNorm *g, const uint8_t *raw, int64_t n, int64_t sample_size,
                      float *x)
{
    int c = g->channels > 1 ? g->channels : 1;
    int64_t inner = sample_size / c;
    float lut[RT_INGEST_MAXC][256]; /* the same expression, once per byte value */
    for (int ch = 0; ch < c; ch++)
        for (int v = 0; v < 256; v++)
            lut[ch][v] = ampc_ingest_value((unsigned char)v, g->div, g->mean[ch], g->std[ch]);
    for (int64_t j = 0; j < n; j++)
        for (int ch = 0; ch < c; ch++) {
            const uint8_t *s = raw + j * sample_size + ch * inner;
            float *d = x + j * sample_size + ch * inner;
            for (int64_t e = 0; e < inner; e++)
                d[e] = lut[ch][s[e]];
        }
}

/* The batch's bytes go at the end of x, where each is read before a float
 * reaches it (float k ends at byte 4k + 3, below raw byte k at 3N + k for
 * every k < N of the N elements), so fill needs no buffer of its own. */
void rt_fill_from_raw(const RtDataset *ds, RtSplit split, const int64_t *idx, int64_t n, float *x,
                      float *y)
{
    int64_t size = ds->sample_size;
    uint8_t *raw = (uint8_t *)(x + n * size) - n * size;
    ds->fill_raw(ds, split, idx, n, raw, y);
    rt_ingest_floats(&ds->norm, raw, n, size, x);
}
