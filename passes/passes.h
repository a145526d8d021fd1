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
    int64_t max_nodes;      /* graph nodes (0: 1,000,000) */
    int64_t max_work;       /* statements, loop iterations, calls and expressions
                               evaluated (0: 10,000,000, well under a second) */
    int64_t max_memory;     /* bytes held by values, names and the graph, of the
                               calls in progress and the nodes made (0: 1 GiB) */
    int64_t *probes;        /* when set, gets the slots elaboration's name tables
                               (variables, counters, functions, node names) looked at:
                               linear in the model (tests/unit/test_passes.c) */
} ElabOptions;
Graph *elaborate(const AstProgram *prog, Diag *d, const ElabOptions *opt);

/* infer_shapes.c: output shapes of every node and the shapes of implicit
 * parameters; N stays symbolic. */
bool infer_shapes(Graph *g);

/* infer_types.c: dtypes by MXNet's rules: parameters follow their op's data
 * dtype, BatchNorm's parameters and statistics stay fp32, inputs and labels
 * keep their declared dtype, Cast gives its dtype. */
bool infer_types(Graph *g);

/* amp.c: the AMP rewrite.  Assigns every op the dtype its class asks for
 * (fp16/bf16 list, fp32 list, follow, widest, conditional fp32), inserts
 * one amp_cast per (value, dtype) where a consumer needs another dtype, gives
 * parameters read in 16 bits an fp32 master, and casts 16-bit graph outputs
 * back to the dtype the model declares.  With amp off it only adds masters
 * to 16-bit parameters when multi_precision is set.  Replaces *g. */
/* How amp chooses the dtype of follow and widest ops: the exact minimum
 * (amp_place.c), greedy (each follows its inputs, as MXNet does), or given
 * per node (tests). */
typedef enum { AMP_PLACE_OPTIMAL, AMP_PLACE_GREEDY, AMP_PLACE_GIVEN } AmpPlacement;
typedef struct {
    DType target;            /* DT_F16 or DT_BF16; DT_UNKNOWN: off */
    AmpPlacement placement;  /* --amp-placement (default: optimal) */
    const DType *labels;     /* AMP_PLACE_GIVEN: per node id of the graph given, the dtype
                              * a free op runs in (others, or DT_UNKNOWN: greedy's) */
    const char *fp16_ops;    /* --amp-fp16=Op,... moves ops to the low-precision class */
    const char *fp32_ops;    /* --amp-fp32=Op,... */
    const char *exclude;     /* --amp-exclude=name,... keeps named nodes in fp32 */
    bool multi_precision;    /* fp32 masters for 16-bit parameters when amp is off */
    bool explain;            /* record why each node got its dtype (Graph.why) */
} AmpOptions;
bool amp(Graph **g, const AmpOptions *opt);
/* The dtype AMP returns graph output o in: the dtype the model declares,
 * except that a loss head (an op with a label slot) stays in fp32, the dtype
 * it runs in, since autodiff seeds the gradients there and the program logs
 * its probabilities (casting it back to a hand-written fp16 would hide the
 * head).  amp.c and amp_place.c both use it, so the cost model is exact. */
DType amp_output_dtype(const Node *o, DType target);
/* The attribute values for which op runs in fp32 whatever its class (MXNet's
 * CONDITIONAL_FP32_FUNCS), as text ("Activation act_type=softrelu"): up to
 * max into texts; returns how many (the op reference prints them). */
int amp_conditional_fp32(OpKind op, const char **texts, int max);

/* amp_place.c: the exact cast placement (docs/amp.md, "Cast placement").
 * Given every node's dtype as greedy decides it, chooses the dtype of each
 * free op (a follow or widest op whose inputs are fp32 or the target) to
 * minimise the bytes converted per sample, then the bytes free ops move in
 * 32 bits: a minimum s-t cut per connected group of free ops. */
typedef struct {
    int64_t converted; /* bytes read + written by casts, per sample */
    int64_t wide32;    /* bytes follow and widest ops read + write in fp32, per sample */
} AmpCost;
typedef struct {
    const Graph *g;          /* the graph before the rewrite */
    DType target;
    const DType *run;        /* per node: its dtype as greedy decides it */
    const uint8_t *cls;      /* per node: its effective AmpClass */
    /* the dtype input j of n is read in when n runs in run (DT_UNKNOWN: as it
     * arrives); whether input j is an operand a widest op is as wide as */
    DType (*read_dtype)(const Graph *g, const Node *n, int j, DType run);
    bool (*operand)(const Graph *g, const Node *n, int j);
    AmpPlacement mode;
    const DType *given;      /* AMP_PLACE_GIVEN */
    DType *label;            /* out: per node, a free op's dtype; DT_UNKNOWN for others */
    AmpCost greedy, optimal, used; /* out: the costs of greedy's, the optimal and the
                                    * chosen placement */
} AmpPlace;
void amp_place(AmpPlace *p);

/* cast_elide.c: drops casts whose input already has their dtype (user Casts
 * too), collapses chains of amp_casts, merges duplicate casts of one value,
 * then drops what became dead.  Never folds a user-written round trip.
 * Adds the count to info.casts_elided.  Replaces *g. */
bool cast_elide(Graph **g);

/* autodiff.c: appends the backward graph (gradients of every trainable
 * parameter, marked by grad_of; BatchNorm moving-statistics updates as
 * bn_moving_update) and builds the inference graph (g->infer).  Replaces *g. */
bool autodiff(Graph **g);
/* autodiff.c, for a model without a loss head that is compiled to a program
 * (it predicts and cannot train): no backward graph; g stays the forward
 * graph, marked info.predict_only, and g->infer is its inference graph,
 * whose one output is cast to float32 when it is not (the program writes
 * float32).  False (reported) for a model with several outputs. */
bool autodiff_predict(Graph **g);
/* A training graph read from a dump after autodiff (after train-cast-elide
 * when `elided`), checked: autodiff (and cast-elide) run again on its
 * forward part (what its outputs other than grad_of and bn_moving_update
 * depend on) must give it exactly, its inference graph included; the first
 * difference is reported at its node.  Shape and type rules cannot see a
 * grad_of swapped between two parameters of one shape; this can. */
bool autodiff_check(const Graph *g, bool elided);

/* fuse.c: the fusions (docs/codegen.md, "Fusions"), rules of one table
 * applied to the training graph and its inference graph after
 * train-cast-elide: BatchNorm + relu (bn_relu) and elemwise_add + relu
 * (add_relu), each with its backward.  For TARGET_CUDA, a rule whose fused
 * op (or fused backward) has no CUDA kernel (ir/kernels.def) is not applied.  Bit `k` of disabled turns rule k
 * off (--no-fuse); with explain, each fusion made is listed on out (stdout
 * when NULL), only those naming explain_name when that is set.  Replaces *g. */
typedef struct {
    unsigned disabled;
    unsigned enabled; /* the rules off unless asked (--fuse: conv_bn_stats) that are asked */
    bool warn;        /* say at each pair such a rule refuses why (the driver's run) */
    bool explain;
    const char *explain_name;
    FILE *out;
    Target target; /* a rule whose fused op has no kernel in its column is not applied */
} FuseOptions;
bool fuse(Graph **g, const FuseOptions *o);
/* --no-fuse=LIST: sets the bits of the rules a comma-separated list names
 * ("all": every one); an unknown name is reported, with the valid ones. */
bool fuse_disable(Diag *d, const char *list, unsigned *disabled);
/* --fuse=LIST: sets the bits of the rules off unless asked that a list
 * names; a rule on by default, or an unknown name, is reported. */
bool fuse_enable(Diag *d, const char *list, unsigned *enabled);
int fuse_rule_count(void);
const char *fuse_rule_name(int k); /* NULL past the last */
/* A training graph read from a dump after fuse, checked: its fused nodes
 * expanded back (by their `absorbed` names) must give what autodiff and
 * train-cast-elide derive (autodiff_check), and fusing that again with the
 * rules the dump shows must give the dump. */
bool fuse_check(const Graph *g);

/* layout.c: the layouts of target's kernels (docs/codegen.md, "Layouts"):
 * for TARGET_CUDA, 16-bit 2-D convolutions and the per-element and
 * per-channel ops around them in NHWC, their weights KRSC, with _layout
 * conversions where a value meets a reader wanting the other layout, in
 * the training graph and its inference graph; nothing for TARGET_CPU.
 * Called by schedule; replaces *g. */
bool layout_assign(Graph **g, Target target);
/* A copy of g (and its inference graph) without layouts: the _layout
 * conversions bypassed, every value canonical, as the schedule pass found
 * it (checking a dump after schedule against the passes before it). */
Graph *layout_strip(const Graph *g);

/* schedule.c: stores the training graph and its inference graph in the
 * execution order of lowest peak memory it finds (a greedy list schedule,
 * kept only when its liveness lower bound beats the order they came in;
 * docs/codegen.md, "Schedule"), then gives its values the target's layouts
 * (layout_assign; --no-schedule: reorder = false, layouts all the same). */
bool schedule(Graph **g, Target target, bool reorder);

#endif
