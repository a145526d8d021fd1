/* fuzz_mxnet_json.c - the libFuzzer target for the MXNet symbol JSON reader
 * (compiler/mxnet_json.c, ampc --from-mxnet; docs/testing.md).
 *
 * Each input is imported as a symbol file, with an --input-shape for an
 * input named data and --loss=softmax on every other input.  What the
 * importer writes must parse as ampc source and hold no control character
 * but its newlines (either is the importer's bug: a name or value not
 * escaped or refused); it is then elaborated with
 * small limits and run through every pass, verified after each, as
 * `ampc --from-mxnet` would.  Diagnostics go to /dev/null.  A crash, leak,
 * sanitizer report or failed check (abort()) is a bug.
 *
 *   make build/fuzz/fuzz_mxnet_json && tests/fuzz/run.sh build/fuzz/fuzz_mxnet_json check
 * Seeds: tests/fuzz/corpus_mxnet_json/. */
#include "driver.h"
#include "fuzz_common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static const ElabOptions fuzz_limits = {
    .max_call_depth = 100,
    .max_loop_iters = 100000,
    .max_nodes = 50000,
    .max_work = 1000000,
    .max_memory = 256 << 20,
};

static void bug(const char *what, const char *text, size_t len)
{
    fprintf(stderr, "fuzz_mxnet_json: %s\n", what);
    if (text)
        fprintf(stderr, "---- source ----\n%.*s---- end ----\n", (int)len, text);
    abort();
}

/* The importer's source must parse: its own output, never the user's text.
 * And it holds no control character but the newlines that end its lines
 * (docs/mxnet.md, "Strings"): the lexer takes a raw tab or CR inside a
 * string, so parsing alone would not see one copied from the file. */
static void check_parses(const char *text, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i],
                      next = i + 1 < len ? (unsigned char)text[i + 1] : 0;
        if ((c < 0x20 && c != '\n') || c == 0x7f || (c == 0xc2 && next >= 0x80 && next < 0xa0))
            bug("the importer wrote a control character into ampc source", text, len);
    }
    Diag d;
    diag_init(&d, null_out());
    Arena a;
    arena_init(&a);
    AstProgram prog = {0};
    bool ok = ast_load(&a, &d, "imported.sym", text, len, &prog);
    arena_free(&a);
    diag_free(&d);
    if (!ok)
        bug("the importer wrote ampc source that does not parse", text, len);
}

static void import_and_compile(const uint8_t *data, size_t size, const MxImportOptions *o)
{
    Diag d;
    diag_init(&d, null_out());
    size_t len;
    char *text = mxnet_import(&d, "fuzz-symbol.json", (const char *)data, size, o, &len);
    if (text) {
        check_parses(text, len);
        Graph *g = frontend_elaborate(&d, "fuzz-symbol.json.sym", text, len, &fuzz_limits);
        static const PassOptions defaults = {0};
        for (int i = 1; g && i < pass_count; i++) {
            if (!pass_pipeline[i].run(&g, &defaults)) {
                graph_free(g);
                g = NULL;
            } else if (!ir_verify(g, pass_pipeline[i].name)) {
                bug("the IR verifier failed after a pass", text, len);
            }
        }
        if (g)
            graph_free(g);
        free(text);
    }
    diag_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const shapes[] = {"data=1,3,8,8"};
    MxImportOptions plain = {.shapes = shapes, .nshapes = 1};
    import_and_compile(data, size, &plain);
    MxImportOptions loss = {.shapes = shapes, .nshapes = 1, .loss = "softmax"};
    import_and_compile(data, size, &loss);
    return 0;
}
