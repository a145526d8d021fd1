/* fuzz_rec_options.c - libFuzzer target of the recordio(...) option string
 * (--data recordio(TRAIN.rec, VAL.rec, KEY=VALUE, ...); docs/training.md,
 * RecordIO): "recordio(" followed by any bytes goes through the data-source
 * parser (runtime/settings.c, rt_data_spec_parse) and, when it is accepted,
 * every option through rt_rec_option_set (runtime/data/recordio.c), as the
 * program's data source does.  A refusal must say why; an accepted spec
 * must hold what the parser promises (the files given, at most
 * RT_DS_MAX_OPTS options with distinct, NUL-terminated names) and accepted
 * options values within their bounds.  Seeds: tests/fuzz/corpus_rec_options/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/recordio.h"
#include "settings.h"

static void check_options(const RtRecOptions *o)
{
    if (o->resize < 0 || o->resize > 65535 || o->num_parts < 1 || o->num_parts > 1 << 20 ||
        o->part_index < 0 || o->part_index > 1 << 20 || o->prefetch < 1 || o->prefetch > 64 ||
        !(o->min_random_area > 0 && o->min_random_area <= 1) ||
        !(o->std[0] > 0 && o->std[1] > 0 && o->std[2] > 0))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char head[] = "recordio(";
    char *s = malloc(sizeof head + size);
    if (!s)
        return 0;
    memcpy(s, head, sizeof head - 1);
    memcpy(s + sizeof head - 1, data, size);
    s[sizeof head - 1 + size] = 0;
    RtDataSpec d;
    char err[4096];
    err[0] = 0;
    if (!rt_data_spec_parse(s, &d, err, sizeof err)) {
        if (!err[0])
            abort(); /* a refusal always says why */
        free(s);
        return 0;
    }
    if (d.kind != RT_DS_RECORDIO || !d.given[0] || !d.arg[0][0] || d.nopts < 0 ||
        d.nopts > RT_DS_MAX_OPTS)
        abort();
    RtRecOptions o;
    rt_rec_options_default(&o);
    for (int k = 0; k < d.nopts; k++) {
        if (!memchr(d.opt_key[k], 0, sizeof d.opt_key[k]) || !d.opt_key[k][0] ||
            !memchr(d.opt_val[k], 0, sizeof d.opt_val[k]))
            abort();
        for (int j = 0; j < k; j++)
            if (strcmp(d.opt_key[j], d.opt_key[k]) == 0)
                abort(); /* a repeated key is refused */
        err[0] = 0;
        if (!rt_rec_option_set(&o, d.opt_key[k], d.opt_val[k], err, sizeof err)) {
            if (!err[0])
                abort();
            break;
        }
        check_options(&o);
    }
    free(s);
    return 0;
}
