/* fuzz_plancache.c - libFuzzer target of the cuDNN plan cache file's reader
 * (runtime/cuda/tune.c, --cudnn-plan-cache: untrusted input): any bytes are
 * parsed; an accepted file, written again, must parse to the same entries
 * and serialize to the same bytes.  Crashes, leaks and sanitizer reports
 * are the failures. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/tune.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    AmpcPlanFile f = {0}, g = {0};
    char err[512] = "";
    bool ours;
    if (!ampc_planfile_parse(&f, data, size, "fuzz", &ours, err, sizeof err)) {
        if (!err[0] || (ours != (size >= 8 && memcmp(data, AMPC_PLANFILE_MAGIC, 8) == 0)))
            abort();
        ampc_planfile_free(&f);
        return 0;
    }
    size_t n1 = 0, n2 = 0;
    uint8_t *b1 = ampc_planfile_serialize(&f, &n1);
    if (!b1 || !ampc_planfile_parse(&g, b1, n1, "again", &ours, err, sizeof err) || g.n != f.n ||
        (f.n && memcmp(f.e, g.e, f.n * sizeof *f.e) != 0))
        abort();
    uint8_t *b2 = ampc_planfile_serialize(&g, &n2);
    if (!b2 || n1 != n2 || memcmp(b1, b2, n1) != 0)
        abort();
    free(b1), free(b2);
    ampc_planfile_free(&f), ampc_planfile_free(&g);
    return 0;
}
