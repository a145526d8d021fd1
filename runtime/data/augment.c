/* augment.c - training-time augmentation: a random crop with zero padding
 * and a random horizontal mirror (the CIFAR recipe of He et al. 2016 and of
 * MXNet's ImageRecordIter pad=4, rand_crop, rand_mirror).  API: data_ext.h.
 *
 * Every choice is a pure function of (seed, epoch, sample index), drawn
 * from init.c's counter-based generator, so a run is reproducible whatever
 * the batch size, the order of the samples in a batch or the number of
 * threads that fill them.  The training driver calls it on each training
 * sample after fill (never on validation samples, never for digits); it is
 * off unless asked for.
 *
 * The padding value is 0 in the normalised values the model sees: for
 * CIFAR-10 that is the mean colour, which is what padding after Normalize
 * (or MXNet's mean subtraction before padding) gives.
 */
#include <string.h>

#include "data_ext.h"
#include "rand.h"

RtAugment rt_augment_draw(int pad, bool mirror, uint64_t seed, uint64_t epoch, int64_t index)
{
    RtAugment a = {0, 0, false};
    if (pad <= 0 && !mirror)
        return a;
    uint64_t stream = rt_mix64(rt_hash_name("augment") + epoch);
    uint64_t r = rt_rand_u64(seed, stream, (uint64_t)index);
    if (pad > 0) {
        /* two 24-bit draws: the modulo bias is below 2^-20 for any pad < 16 */
        uint64_t span = 2 * (uint64_t)pad + 1;
        a.dy = (int)((r & 0xffffff) % span) - pad;
        a.dx = (int)(((r >> 24) & 0xffffff) % span) - pad;
    }
    a.flip = mirror && (r >> 63);
    return a;
}

void rt_augment_apply(float *x, int c, int h, int w, RtAugment a, float *scratch)
{
    if (a.dy == 0 && a.dx == 0 && !a.flip)
        return;
    size_t plane = (size_t)h * w;
    memcpy(scratch, x, (size_t)c * plane * sizeof *x);
    for (int ch = 0; ch < c; ch++) {
        const float *in = scratch + ch * plane;
        float *out = x + ch * plane;
        for (int y = 0; y < h; y++) {
            int sy = y + a.dy;
            float *o = out + (size_t)y * w;
            if (sy < 0 || sy >= h) {
                memset(o, 0, (size_t)w * sizeof *o);
                continue;
            }
            const float *row = in + (size_t)sy * w;
            for (int xx = 0; xx < w; xx++) {
                int sx = (a.flip ? w - 1 - xx : xx) + a.dx;
                o[xx] = sx >= 0 && sx < w ? row[sx] : 0.0f;
            }
        }
    }
}

void rt_augment(float *x, int c, int h, int w, int pad, bool mirror, uint64_t seed,
                uint64_t epoch, int64_t index, float *scratch)
{
    rt_augment_apply(x, c, h, w, rt_augment_draw(pad, mirror, seed, epoch, index), scratch);
}
