/* fuzz_common.h - what both fuzz targets (fuzz_frontend.c, fuzz_emit_c.c)
 * share: diagnostics go to /dev/null, opened once per process. */
#ifndef AMPC_FUZZ_COMMON_H
#define AMPC_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>

static FILE *null_out(void)
{
    static FILE *f;
    if (!f) {
        f = fopen("/dev/null", "w");
        if (!f)
            abort();
    }
    return f;
}

#endif
