/* fuzz_recordio.c - libFuzzer target of the RecordIO reader
 * (runtime/data/recordio.c, --data recordio(...)): any bytes are a .rec
 * file in memory.  The walk (rt_rec_scan) either refuses them with a
 * message or lists records; each listed record must then read back whole
 * (rt_rec_read) and parse (rt_rec_image) with its image inside it, and a
 * prefix read must agree with the whole.  Crashes, leaks, reads past the
 * input and sanitizer reports are the failures. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/recordio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* a copy of exactly size bytes: ASan sees any read past the end */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    RtRecFile f = {.path = "fuzz.rec", .fd = -1, .mem = copy, .size = (int64_t)size};
    RtRecEntry *e;
    int64_t n;
    char err[1024];
    err[0] = 0;
    if (!rt_rec_scan(&f, NULL, &e, &n, err, sizeof err)) {
        if (!err[0])
            abort(); /* a refusal always says why */
        free(copy);
        return 0;
    }
    uint8_t *buf = NULL, *head = NULL;
    size_t cap = 0, hcap = 0;
    for (int64_t r = 0; r < n; r++) {
        size_t got, total, hgot, htotal;
        int64_t next, hnext;
        RtRecImage im;
        if (!rt_rec_read(&f, e[r].off, RT_REC_MAX_RECORD, &buf, &cap, &got, &total, &next, err,
                         sizeof err) ||
            got != total || next > f.size || (r + 1 < n && next != e[r + 1].off))
            abort(); /* the walk accepted it */
        if (!rt_rec_image(buf, got, total, &im, err, sizeof err) || im.format == RT_IMG_NONE ||
            im.image + im.image_size != buf + got || im.id != e[r].id)
            abort();
        if (!rt_rec_read(&f, e[r].off, 13, &head, &hcap, &hgot, &htotal, &hnext, err,
                         sizeof err) ||
            htotal != total || hnext != next || hgot != (total < 13 ? total : 13) ||
            memcmp(head, buf, hgot) != 0)
            abort();
    }
    free(buf);
    free(head);
    free(e);
    free(copy);
    return 0;
}
