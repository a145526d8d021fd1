/* hooks.h - the optional per-node hooks of a run (hooks.c): --check-numerics,
 * --inject-nan and --profile, which the emitted steps reach through
 * RtCtx.after_node when either is on.
 */
#ifndef AMPC_RT_HOOKS_H
#define AMPC_RT_HOOKS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "device.h"
#include "program.h"

struct JLog; /* train_internal.h: the JSON log */

typedef struct {
    bool check;           /* --check-numerics */
    bool train;           /* in the train step (else the inference step) */
    bool past_head;       /* the loss head has run: later nodes are the backward pass */
    const char *nan_node; /* --inject-nan */
    int64_t nan_step;
    bool found;    /* a node's output held inf/NaN in this step */
    bool backward; /* ... in the backward pass */
    char name[128];
    int buffer;
} Numerics;
/* Whether a node (its output buffer) is called name: --inject-nan's check. */
bool rt_has_node(const RtModel *m, const char *name);
/* "--check-numerics: WHERE: the output of node ... holds inf or NaN" to err */
void rt_numerics_report(FILE *err, const char *prog, const RtModel *m, const Numerics *nm,
                        const char *where);

/* --profile: time per node (the after_node hook) and per phase */
enum { PH_DATA, PH_FORWARD, PH_BACKWARD, PH_CHECK, PH_MOVING, PH_OPTIM, PH_OTHER, PH_N };

typedef struct {
    const char *name, *op;
    int dtype; /* RtDType of its output */
    double sec;
    int64_t calls;
    int order; /* when it first ran in its step (1, 2, ...; 0: never) */
    bool backward;
} ProfNode;

/* a node of the current train step timed by a device mark */
typedef struct {
    int node, buffer;
    const char *name, *op;
    bool backward;
    bool marked; /* t holds a mark (false: the device had no slot left) */
    RtDevTime t;
} ProfMark;

struct Prof {
    bool on;        /* collecting (the first step of a run is not counted) */
    bool past_head; /* the loss head has run in this train step */
    int step_fn;    /* 0 the train step, 1 the inference step */
    double last;    /* the end of the previous node (or the start of the step) */
    ProfNode *node[2];
    int cap[2];
    double phase[PH_N];
    double step_sec; /* the train steps, whole */
    int64_t steps;
    double infer_sec; /* inference steps (validation) */
    int64_t infer_steps;
    double infer_t0;
    bool was_on;
    /* device->host waits (RtDevice.syncs) in the counted train steps, the
     * profile's own (its timing waits) left out; "quiet" steps log nothing */
    uint64_t own_syncs;   /* the profile's waits so far */
    uint64_t syncs;       /* in the counted steps */
    uint64_t quiet_syncs; /* in the counted steps that did not log */
    int64_t quiet_steps;
    /* per-call times from the device's timing marks (rt_dev_has_timing:
     * CUDA events, the CPU's clock) instead of a wait after every node */
    bool timed;      /* this step's nodes are marked */
    bool any_timed;  /* some step was: the report says whose times these are */
    RtDevTime start; /* the train step's first mark */
    ProfMark *mark;
    int nmark, capmark;
    int norder[2];
};
typedef struct Prof Prof;
/* an inference step (validation) begins (true) or ends (false) */
void rt_prof_infer(Prof *pf, bool begin);
/* the profile to out, and as a "profile" event to jl; m gives the calls'
 * dtypes */
void rt_prof_report(const Prof *pf, const RtModel *m, FILE *out, struct JLog *jl);
/* A counted train step's nodes begin (after its batch): on a device with
 * timing marks, the nodes are marked from here and read at the end. */
void rt_prof_step_begin(Prof *pf, RtDevice *d);
/* The train step's nodes end: their marks read (one wait, the profile's
 * own), each node's device time added to it and to the forward or backward
 * phase.  False when the step was not marked (the nodes were timed one by
 * one with a wait each). */
bool rt_prof_step_nodes(Prof *pf, RtDevice *d, const RtModel *m);

/* What t->hook points to when either hook is on. */
typedef struct {
    Numerics *nm; /* NULL when neither --check-numerics nor --inject-nan */
    Prof *pf;     /* NULL without --profile */
} Hooks;
/* RtCtx.after_node: both hooks after each node. */
void rt_after_node(RtCtx *ctx, int node, const char *name, const char *op, int buffer);

#endif
