/* gpucost.h - the GPU cost model (passes/gpucost.c, docs/gpucost.md): what
 * one training step of the program the build emits costs on one GPU of a
 * machine description, call by call, as a range.
 *
 * Every lowered call becomes the runtime functions the emitted C calls
 * (rt_cuda_conv_forward, ...), each priced from the launches kernels.def's
 * GPUK rows describe: a custom kernel by its bytes, FLOPs, threads and
 * serial loads against the machine's bandwidth, FLOP rates and latency; a
 * cuDNN or cuBLASLt call by its FLOPs at the tensor-core rate times an
 * efficiency from a table, or its bytes at the bandwidth.  Then the
 * runtime's own work of a step (the batch's copies, the finite check, the
 * fused optimizer, the loss scale), the host's side (the data source's
 * fill, launches, cuDNN's variant packs) and the waits the program makes:
 * step = max(host, device) + waits.  Every figure is a range, [fast, slow],
 * from the constants' two ends (one table, gpucost.c, each with its source). */
#ifndef AMPC_GPUCOST_H
#define AMPC_GPUCOST_H

#include "../ir/gpu_kernels.h"
#include "../ir/plan.h"
#include "kvstore.h"

/* where a call's time goes, for the report and --calibrate */
typedef enum {
    GF_CONV_FWD,
    GF_CONV_DGRAD,
    GF_CONV_WGRAD,
    GF_BN_FWD,
    GF_BN_BWD,
    GF_ELEMWISE,
    GF_POOL,
    GF_LOSS,
    GF_OPTIM,
    GF_COPY,
    GF_OTHER,
    GF_COUNT
} GcFamily;
extern const char *const gc_family_names[GF_COUNT]; /* "conv_fwd", ... */

/* what bounds a launch: bytes at the bandwidth, FLOPs at the rate, one
 * thread's dependent loads with the GPU full (latency) or nearly empty
 * (serial), or the launch itself */
typedef enum { GB_MEMORY, GB_COMPUTE, GB_LATENCY, GB_SERIAL, GB_LAUNCH, GB_COUNT } GcBound;
extern const char *const gc_bound_names[GB_COUNT];

typedef struct {
    double fast, slow; /* seconds (or as named): the constants' fast and slow ends */
} GcRange;

/* One runtime call of a step: a function of the emitted C (train_step,
 * moving_update) or one of the runtime's per-step launches or copies. */
typedef struct {
    int step;          /* STEP_TRAIN, STEP_MOVING, or -1: the runtime's own work */
    int call;          /* the lowered call's index in its step; -1 for the runtime's */
    const char *node;  /* the node's name, or what the runtime does ("update", ...) */
    char entry[96];    /* the emitted C's function (rt_cuda_conv_forward), or the
                         * runtime's kernel or copy */
    char kernels[160]; /* the launches, '+'-joined */
    GcFamily family;
    int launches;  /* device launches (a cuDNN execution: its fewest kernels) */
    int libcalls;  /* of those, cuDNN executions and cuBLASLt matmuls */
    double rd, wr; /* global bytes read and written */
    double flops[GK_NFLOP];
    double threads, serial; /* most threads of one launch; the most serial loads */
    GcBound bound;          /* of its costliest launch, at the slow end */
    GcRange t;              /* device time */
} GcCall;

typedef struct {
    int64_t batch;       /* per device */
    int nstate;          /* fp32 optimizer state tensors per parameter */
    int optimizer;       /* 0 SGD, 1 NAG, 2 Adam (runtime/settings.h's RtOptKind) */
    bool dynamic;        /* a dynamic loss scale */
    int log_interval;    /* the Speedometer's: a read-back of the step's flags per interval */
    bool autotune;       /* --cudnn-autotune (the programs' default: 1) */
    double workspace_mb; /* --cudnn-workspace-mb (default 1024) */
} GcOptions;

typedef struct {
    GcCall *calls; /* malloc'ed: train_step's, moving_update's, then the runtime's */
    int ncalls;
    double *train_sec; /* malloc'ed: each train-step lowered call's time, the middle of its
                         * range (the kvstore pass's compute) */
    int ntrain;
    GcRange device, host, step, images_s;
    GcRange waits_cost;             /* what the waits add to a step */
    double waits;                   /* host waits per step */
    int launches, libcalls, copies; /* per step: device launches, library calls, copies */
    GcRange family[GF_COUNT];
    /* peak device memory, bytes */
    double arena, params, masters, state, inputs, scratch;
    GcRange workspace, context, memory;
    GcRange autotune; /* start-up: cuDNN plans chosen (and timed, with autotune) */
    int plans;        /* distinct cuDNN plans */
    GcRange fill;     /* host: the data source's fill of one batch */
    GcRange autotune_cached; /* start-up with the plan cache file: each plan untimed */
    /* the synthetic batch made on the device: its kernel, the step; the
     * data input's calls it skips (its cast and layout: the first layer's form) */
    GcRange synth, synth_step, synth_images_s;
    /* the conv_bn_stats fusion (off unless --fuse=conv_bn_stats; docs/backend-cuda.md):
     * the training BatchNorms whose x a convolution writes, their forward's
     * time with the statistics from the convolution's GEN_STATS, the step */
    int stats_bns, bns;
    GcRange stats_bn_fwd, stats_device, stats_step, stats_images_s;
    /* ... and with --cuda-graph 1: the host's launches one graph launch */
    GcRange graph_host, graph_step, graph_images_s;
    int chain;
    /* real data uploaded as bytes (device.h's ingest): the copy (on a copy
     * stream), the kernel, the step; bytes uploaded a step, as bytes and as fp32 */
    GcRange ingest_copy, ingest, ingest_step, ingest_images_s;
    double upload_raw, upload_f32;
    const KvMachine *m;
    GcOptions o;
} GcResult;

/* gpucost.c: prices one training step of p (lowered from train) on one
 * device of m.  False, with a message through d, when m has no devices.
 * *r is the caller's to gpucost_free. */
bool gpucost_predict(const Graph *train, const Program *p, const KvMachine *m, const GcOptions *o,
                     Diag *d, GcResult *r);
void gpucost_free(GcResult *r);
/* One launch on one device of m, at both ends of the constants: its time
 * (a library call's in dtype's tensor rate) and, at the slow end, its bound.
 * What gpucost_predict sums; the unit tests' hand-computed cases. */
void gpucost_price_launch(const KvMachine *m, const GkLaunch *l, int dtype, GcRange *t,
                          GcBound *bound);
/* One constant of the model (the one table of gpucost.c, with its source):
 * gc_const(k) for k < gc_nconst, for the dumps. */
typedef struct {
    const char *name;
    double fast, slow;
    const char *source;
} GcConst;
extern const int gc_nconst;
const GcConst *gc_const(int k);
/* A call's step as the dumps name it: "train", "moving", or "step" (the
 * runtime's own work) */
const char *gc_step_name(int step);
/* --dump=gpu-cost: the constants, one line per call, the totals; header
 * (the provenance line, or NULL) after the first line */
void gpucost_print_calls(FILE *f, const Graph *train, const GcResult *r, const char *header);
/* --report's lines (the step, memory, start-up, families, the ten costliest calls) */
void gpucost_print_report(FILE *f, const Graph *train, const GcResult *r);

/* --calibrate: measured ms per call of the train step, by node name (the
 * profile record's `calls`), and the phases no call covers (the record's
 * phases_ms: the check and the update, the moving statistics), against the
 * model's.  The fit: per family a factor k_f with measured time = sum over
 * the node's calls of k_f times the middle of the predicted range (least
 * squares over the nodes and the two phases); a family nothing measures is
 * left unfitted.  Returns false, with a message to err, when half the
 * measured nodes or more match no call or the families cannot be told apart. */
typedef struct {
    const char *name; /* node name as the profile gives it */
    double ms;        /* per step */
} GcMeasured;
typedef struct {
    double optimizer_ms; /* phases_ms: loss_scale_check + optimizer; < 0: not given */
    double moving_ms;    /* phases_ms: moving_update; < 0: not given */
} GcPhases;
typedef struct {
    double predicted_ms[GF_COUNT], measured_ms[GF_COUNT], factor[GF_COUNT];
    bool fitted[GF_COUNT];
    /* what the family reached of its peak, by the model and by the fit: the
     * tensor-core rate for the convolution families, else DRAM bandwidth */
    double eff_model[GF_COUNT], eff_fitted[GF_COUNT];
    bool eff_tensor[GF_COUNT];
    int matched, unmatched; /* profile calls matched to predicted calls, and not */
} GcFit;
bool gpucost_fit(const GcResult *r, const GcMeasured *meas, int n, const GcPhases *ph, GcFit *fit,
                 FILE *err);
void gpucost_print_fit(FILE *f, const GcResult *r, const GcFit *fit);

#endif
