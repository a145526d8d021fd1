/* fuzz_frontend.c - the libFuzzer target for the front end (docs/testing.md).
 *
 * Each input is compiled twice over:
 *
 *   1. as a .sym file ("fuzz.sym"): parse, elaborate and every pass of the
 *      driver's pass_pipeline with default options, as frontend_compile()
 *      does, but with smaller elaboration limits so that a short input
 *      cannot legitimately ask for millions of nodes (slow and big, not a
 *      bug).  The IR must verify after every pass, and the final graph's
 *      text dump must read back (ir_read) and print again identically;
 *   2. as an IR dump ("fuzz.ir"): ir_read and the checks of what its
 *      banner promises (frontend_check_dump), then the passes after the one
 *      the banner names (as `ampc --from-ir` runs them), verified after each.
 *
 * Diagnostics go to /dev/null.  Anything that crashes, leaks, hangs, trips
 * ASan/UBSan or fails one of the checks above (abort()) is a bug.
 *
 *   make build/fuzz/fuzz_frontend && tests/fuzz/run.sh build/fuzz/fuzz_frontend check
 */
#include "driver.h"
#include "fuzz_common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Elaboration limits for fuzzing: well above anything in examples/ and
 * tests/golden/ (ResNet-50's forward graph has under 500 nodes), small
 * enough that every input runs in well under a second under ASan. */
static const ElabOptions fuzz_limits = {
    .max_call_depth = 100,
    .max_loop_iters = 100000,
    .max_nodes = 50000,
    .max_work = 1000000,
    .max_memory = 256 << 20,
};

static void bug(const char *what, const char *text, size_t len)
{
    fprintf(stderr, "fuzz_frontend: %s\n", what);
    if (text)
        fprintf(stderr, "---- dump ----\n%.*s---- end ----\n", (int)len, text);
    abort();
}

/* The passes after `done` (as the driver runs them), verifying the IR after
 * each.  Frees g and returns NULL when a pass reports a user error. */
static Graph *run_passes(Graph *g, int done)
{
    /* The reader accepts only what is defined before use and named, so what
     * it returns verifies; the front end's output must too. */
    if (!ir_verify(g, pass_pipeline[done].name))
        bug("the IR verifier failed on the input of the passes", NULL, 0);
    static const PassOptions defaults = {0};
    for (int i = done + 1; i < pass_count; i++) {
        if (!pass_pipeline[i].run(&g, &defaults)) {
            graph_free(g);
            return NULL;
        }
        if (!ir_verify(g, pass_pipeline[i].name))
            bug("the IR verifier failed after a pass", NULL, 0);
    }
    return g;
}

static char *print_graph(const Graph *g, size_t *len)
{
    char *buf = NULL;
    FILE *m = open_memstream(&buf, len);
    if (!m)
        abort();
    char banner[64];
    snprintf(banner, sizeof banner, "after %s", pass_pipeline[pass_count - 1].name);
    ir_print(m, g, banner);
    if (fclose(m))
        abort();
    return buf;
}

/* A graph the front end built must print, read back, and print the same. */
static void check_round_trip(Diag *d, const Graph *g)
{
    size_t len, len2;
    char *text = print_graph(g, &len);
    int f = diag_add_buffer(d, "roundtrip.ir", text, len);
    Graph *back = ir_read(d, f);
    if (!back)
        bug("the dump of a valid graph does not read back", text, len);
    char *text2 = print_graph(back, &len2);
    if (len != len2 || memcmp(text, text2, len) != 0)
        bug("the dump changes after reading it back", text2, len2);
    graph_free(back);
    free(text);
    free(text2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Diag d;
    diag_init(&d, null_out());

    /* 1. as a model definition */
    Graph *g = frontend_elaborate(&d, "fuzz.sym", (const char *)data, size, &fuzz_limits);
    if (g)
        g = run_passes(g, 0);
    if (g) {
        check_round_trip(&d, g);
        graph_free(g);
    }

    /* 2. as an IR dump, as `ampc --from-ir` reads it: held to what its
     * banner promises, then on from the pass after it */
    int f = diag_add_buffer(&d, "fuzz.ir", (const char *)data, size);
    Graph *h = ir_read(&d, f);
    static const PassOptions defaults = {0};
    int after = frontend_dump_after(diag_file(&d, f));
    if (h && after >= 0 && !frontend_check_dump(h, after, &defaults)) {
        graph_free(h);
        h = NULL;
    }
    if (h)
        h = run_passes(h, after < 0 ? 0 : after);
    if (h)
        graph_free(h);

    diag_free(&d);
    return 0;
}
