/* fuzz_npy.c - libFuzzer target of the .npy reader (runtime/npy.c,
 * --predict): any bytes are parsed; an accepted array's header, written
 * again by rt_npy_header, must parse to the same shape.  Crashes, leaks
 * and sanitizer reports are the failures. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    RtNpyHeader h, h2;
    float *x = NULL;
    char err[1024];
    if (!rt_npy_parse(data, size, "fuzz.npy", &h, &x, err, sizeof err)) {
        if (!err[0] || x)
            abort();
        return 0;
    }
    char head[1024];
    size_t k = rt_npy_header(head, sizeof head, h.rank, h.shape);
    if (!k || !rt_npy_parse_header(head, k, "again", &h2, err, sizeof err) ||
        h2.rank != h.rank || h2.numel != h.numel || h2.data_offset != k ||
        memcmp(h2.shape, h.shape, sizeof h.shape) != 0)
        abort();
    free(x);
    return 0;
}
