/* passes.h - the passes, each one file with one entry point, run by the
 * driver as a straight list (compiler/main.c; DESIGN.md section 4):
 *
 *   elaborate -> infer-shapes -> infer-types -> (amp -> cast-elide -> ...)
 *
 * Every pass reports user errors through the graph's Diag and returns false
 * (or NULL) when it found any. */
#ifndef AMPC_PASSES_H
#define AMPC_PASSES_H

#include "../grammar/ast.h"
#include "../ir/ir.h"

/* elaborate.c: runs the DSL (calls inlined, loops unrolled, scalar
 * arithmetic folded) and builds the graph of the model named `model`, or of
 * the first model of the main file when model is NULL.  Returns NULL on error. */
typedef struct {
    const char *model;      /* which model to build, or NULL */
    int max_call_depth;     /* nested DSL calls (0: 100) */
    int64_t max_loop_iters; /* iterations of one loop (0: 1,000,000) */
    int64_t max_nodes;      /* graph nodes (0: 10,000,000) */
} ElabOptions;
Graph *elaborate(const AstProgram *prog, Diag *d, const ElabOptions *opt);

/* infer_shapes.c: output shapes of every node and the shapes of implicit
 * parameters; N stays symbolic. */
bool infer_shapes(Graph *g);

/* infer_types.c: dtypes by MXNet's rules: parameters follow their op's data
 * dtype, BatchNorm's parameters and statistics stay fp32, inputs and labels
 * keep their declared dtype, Cast gives its dtype. */
bool infer_types(Graph *g);

#endif
