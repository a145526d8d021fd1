/* fuzz_mxparams.c - libFuzzer target of the MXNet .params reader
 * (runtime/mxparams.c, --load-params): any bytes are parsed; a file it
 * accepts is written back (rt_mx_serialize) and must parse again to the
 * same arrays.  Crashes, leaks and sanitizer reports are the failures. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mxparams.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    RtMxList l, again;
    char err[1024];
    if (!rt_mx_parse(data, size, "fuzz.params", &l, err, sizeof err)) {
        if (!err[0])
            abort(); /* a refusal always says why */
        return 0;
    }
    for (int i = 0; i < l.n; i++)
        for (int64_t e = 0; !l.a[i].none && e < l.a[i].numel && e < 64; e++)
            (void)rt_mx_get(&l.a[i], e);
    bool writable = true;
    for (int i = 0; i < l.n; i++)
        writable &= !l.a[i].none && l.a[i].rank >= 1;
    unsigned char *out = NULL;
    size_t n = 0;
    if (writable && rt_mx_serialize(&l, RT_MX_V2, &out, &n, err, sizeof err)) {
        if (!rt_mx_parse(out, n, "again", &again, err, sizeof err) || again.n != l.n)
            abort();
        for (int i = 0; i < l.n; i++) {
            size_t bytes = (size_t)l.a[i].numel * rt_mx_dtype_size(l.a[i].type_flag);
            if (again.a[i].rank != l.a[i].rank || again.a[i].numel != l.a[i].numel ||
                memcmp(again.a[i].data, l.a[i].data, bytes) != 0 ||
                (l.named && strcmp(again.a[i].name, l.a[i].name) != 0))
                abort();
        }
        rt_mx_free(&again);
    }
    free(out);
    rt_mx_free(&l);
    return 0;
}
