/* driver.h - the compiler layer: the front end as one call (for the driver,
 * the tests and the fuzzer) and the --report printer. */
#ifndef AMPC_DRIVER_H
#define AMPC_DRIVER_H

#include "../passes/passes.h"

/* frontend.c: parse `path` (or the buffer text/len named path) with its
 * imports and elaborate it.  NULL on error (reported through d). */
Graph *frontend_elaborate(Diag *d, const char *path, const char *text, size_t len,
                          const ElabOptions *opt);

/* The pass pipeline after elaborate, as a straight list (DESIGN.md 4). */
typedef struct {
    const char *name;       /* what --dump takes */
    bool (*run)(Graph *g);  /* NULL for elaborate, which builds the graph */
} PassDesc;
extern const PassDesc pass_pipeline[];
extern const int pass_count;
int pass_index(const char *name); /* -1 if unknown */

/* Runs elaborate + infer-shapes + infer-types on a buffer: the fuzzer's and
 * unit tests' entry point.  Returns the graph or NULL. */
Graph *frontend_compile(Diag *d, const char *path, const char *text, size_t len);

/* report.c: --report. batch > 0 also gives per-batch totals. */
void report_print(FILE *f, const Graph *g, int64_t batch);

typedef struct {
    int64_t trainable, trainable_tensors; /* parameters the optimizer updates */
    int64_t aux, aux_tensors;             /* BatchNorm moving statistics */
    int64_t param_bytes;                  /* in their dtypes */
    double flops;                         /* forward, per sample */
    int64_t act_bytes;                    /* outputs of every op, per sample */
    int op_count[OP_COUNT];
} GraphStats;
void graph_stats(const Graph *g, GraphStats *s);

#endif
