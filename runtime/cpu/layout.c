/* layout.c - NCHW <-> NHWC permutation (rt_layout_convert) and the sizes
 * the NHWC convolution and pooling kernels add to their workspace.
 *
 * The CPU runs NHWC (and KRSC weights) by converting into NCHW copies in the
 * workspace, running the NCHW kernel and converting the result back
 * (conv.c, pool.c): a permutation moves bits and computes nothing, so the
 * NHWC kernels give exactly the NCHW kernels' bits on the permuted tensors,
 * and the CUDA plan's layouts can be executed (and checked) on the CPU.
 * Speed is not the point here: a CPU program never asks for NHWC itself.
 */
#include <stdint.h>

#include "cpu.h"

/* Square tiles keep both the reads and the writes within a few cache lines
 * per row. */
enum { TILE = 32 };

typedef struct {
    size_t rows, cols;   /* each image: src [rows][cols] -> dst [cols][rows] */
    size_t tiles_r, tiles_c;
    size_t esz;
    const char *src;
    char *dst;
} Transpose;

/* One tile of one image: tile t of image i (row-tile major). */
static void tile(const Transpose *t, size_t img, size_t tr, size_t tc)
{
    size_t r0 = tr * TILE, c0 = tc * TILE;
    size_t r1 = r0 + TILE < t->rows ? r0 + TILE : t->rows;
    size_t c1 = c0 + TILE < t->cols ? c0 + TILE : t->cols;
    size_t plane = t->rows * t->cols;
    if (t->esz == 4) {
        const uint32_t *s = (const uint32_t *)t->src + img * plane;
        uint32_t *d = (uint32_t *)t->dst + img * plane;
        for (size_t c = c0; c < c1; c++)
            for (size_t r = r0; r < r1; r++)
                d[c * t->rows + r] = s[r * t->cols + c];
    } else {
        const uint16_t *s = (const uint16_t *)t->src + img * plane;
        uint16_t *d = (uint16_t *)t->dst + img * plane;
        for (size_t c = c0; c < c1; c++)
            for (size_t r = r0; r < r1; r++)
                d[c * t->rows + r] = s[r * t->cols + c];
    }
}

static void tiles(void *ctx, size_t lo, size_t hi)
{
    const Transpose *t = ctx;
    size_t per_img = t->tiles_r * t->tiles_c;
    for (size_t i = lo; i < hi; i++) {
        size_t img = i / per_img, k = i % per_img;
        tile(t, img, k / t->tiles_c, k % t->tiles_c);
    }
}

void rt_layout_convert(int64_t n, int64_t c, int64_t hw, RtDType dt, const void *src, void *dst,
                       RtLayout to)
{
    if (n <= 0 || c <= 0 || hw <= 0)
        return;
    Transpose t = {.esz = rt_dtype_size(dt), .src = src, .dst = dst};
    /* to NHWC: each image [c][hw] -> [hw][c]; to NCHW: [hw][c] -> [c][hw] */
    t.rows = (size_t)(to == RT_LAYOUT_NHWC ? c : hw);
    t.cols = (size_t)(to == RT_LAYOUT_NHWC ? hw : c);
    if (t.rows == 1 || t.cols == 1) { /* the same bytes in either layout */
        memcpy(dst, src, (size_t)n * t.rows * t.cols * t.esz);
        return;
    }
    t.tiles_r = (t.rows + TILE - 1) / TILE;
    t.tiles_c = (t.cols + TILE - 1) / TILE;
    rt__parallel_items((size_t)n * t.tiles_r * t.tiles_c, TILE * TILE, tiles, &t);
}

bool rt__nhwc_add(size_t *total, size_t elems, size_t elems2, RtDType dt)
{
    size_t e, b;
    if (__builtin_mul_overflow(elems, elems2, &e) ||
        __builtin_mul_overflow(e, rt_dtype_size(dt), &b) || b > SIZE_MAX / 2 ||
        *total > SIZE_MAX / 2 - b - RT_WS_ALIGN) {
        *total = SIZE_MAX;
        return false;
    }
    rt__ws_add(total, b);
    return true;
}
