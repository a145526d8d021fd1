/* train.h - the training driver of an emitted program: the run
 * (rt_train_run, train.c with options.c), the memory it trains in
 * (RtTrainer, trainer.c) and the state of one step for gradient tests
 * (state.c).
 *
 * An emitted program defines `const RtModel ampc_model` (program.h); main.c
 * calls rt_train_main(argc, argv, &ampc_model).  Everything below takes the
 * model as an argument, so tests drive it with hand-written models.
 * docs/training.md describes the program a user sees.
 *
 * The driver's other parts have their own headers: the loss scaler
 * (lossscale.h), the learning-rate schedules (lr.h), the initialisers
 * (init.h), checkpoints (checkpoint.h), the per-node hooks (hooks.h); the
 * data sets are data/data.h's.  The interfaces between train.c and the files
 * split from it by job are in train_internal.h.  The backends (cpu/, cuda/),
 * the data readers (data/) and the engines of several devices (dist/)
 * include none of these (tests/runtime/device_seam.sh checks).
 */
#ifndef AMPC_TRAIN_H
#define AMPC_TRAIN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "device.h"
#include "program.h"
#include "settings.h" /* the settings' types and parsers */

/* ---- train.c (the loop), options.c (the command line), trainer.c (buffers),
 * lr.c (the learning rate); the options themselves: settings.h ------------ */

/* What a run ends with (for tests). */
typedef struct {
    int64_t steps;          /* steps (batches) taken in all, skipped ones included */
    int64_t num_update;     /* optimizer updates (skipped steps excluded) */
    int64_t skipped;        /* overflow steps skipped */
    float loss_scale;       /* the scale the next step would use */
    float lr;               /* the lr of the last update */
    int epochs;             /* epochs started */
    double train_accuracy;  /* of the last epoch */
    double val_accuracy, val_cross_entropy, val_top_k; /* the last validation */
    /* the device's waits (RtDevice.syncs) in the train steps that logged
     * nothing, --profile's own not counted, and those steps; steady: those
     * of them after a step that logged nothing too (a step after one that
     * logged finds the device idle: the log waited for it) */
    int64_t quiet_syncs, quiet_steps, steady_syncs, steady_steps;
    int64_t graph_replays; /* --cuda-graph 1: the steps the captured step's replay ran */
    /* train batches uploaded as the source's bytes and normalised by the
     * device (device.h's ingest), and those written in the first layer's
     * form (the step skipping its input's cast and layout calls) */
    int64_t ingested, formed;
} RtTrainResult;

/* Parses the command line (getopt_long; resets optind).  Returns -1 to go on,
 * 0 after --help (usage printed to out), 2 on a bad flag (message to err). */
int rt_train_parse_args(RtTrainOptions *o, int argc, char **argv, FILE *out, FILE *err);

/* Buffers, masters and optimizer state of one model at one batch size, in
 * the memory of one device (device.h): every pointer below except the host
 * staging buffers is a device pointer, read and written only through it. */
typedef struct {
    const RtModel *m;
    int64_t batch;       /* the N buffers are sized for */
    RtDevice *dev;       /* the device the buffers live on (the CPU's) */
    RtCtx ctx;           /* ctx.buf, ctx.master point into the arrays below */
    void *arena;         /* the planned buffers (program.h), or NULL */
    int64_t arena_bytes;
    int64_t own_bytes;   /* the buffers outside the arena (parameters, inputs, unplanned values) */
    int64_t state_bytes; /* fp32 masters and optimizer state */
    size_t ws_start;     /* the workspace sized at start-up (workspace_bytes) */
    float **state;       /* per parameter: momentum or Adam's mean (fp32, numel), or NULL */
    float **state2;      /* per parameter: Adam's var (fp32, numel), or NULL */
    RtDevTensor *grads;  /* every trainable parameter's gradient: the all-reduce bucket */
    int ngrads;
    /* host staging: the data loader fills x_host [batch, sample] and y_host
     * [batch], rt_trainer_load_batch copies them to the data and label
     * buffers; prob_host receives the loss head's output for the metrics.
     * Two slots used in turn (x_host, y_host: the current one's), so that
     * the next batch is filled while the device may still copy the last:
     * a device one step behind the host never makes it wait (issue 26) */
    float *x_host, *y_host;
    float *x_slot[2], *y_slot[2];
    int slot;
    void *prob_host;
    RtDevEvent copied[2]; /* a slot may be refilled once its event is done */
    void *hook;          /* the driver's after_node state (--check-numerics, --inject-nan) */
    /* a source's raw samples (rt_trainer_raw_staging): raw_host [batch,
     * sample] bytes, the current slot's of raw_slot (the slots turn with
     * x_host's), copied through raw_dev (device memory) by the device's
     * ingest; NULL when not used */
    uint8_t *raw_host, *raw_slot[2];
    void *raw_dev;
    /* the batches the device writes take the first layer's form
     * (RtModel.input_form; rt_trainer_form) */
    bool formed;
} RtTrainer;

/* How the trainer opens its device. */
typedef struct {
    const RtDeviceConfig *config; /* a GPU program's options (--cudnn-*); NULL: the defaults */
    bool lagging; /* testing: the CPU device's lagging mode (rt_device_cpu_lagging) */
    int sim_ranks; /* > 1: --sim-ranks, the device wrapped by dist/sim.c's */
} RtDeviceOpen;

/* Allocates every buffer (fixed + per_sample*batch elements, 64-byte
 * aligned, zeroed; those in_arena at their planned offsets in one arena,
 * bounds checked), the fp32 masters of parameters with has_master and
 * nstate zeroed fp32 state tensors per trainable parameter (0: none; 1:
 * momentum, in state; 2: Adam's mean and var, in state and state2; a bool
 * true means 1), on the device the model opens (how: NULL for the
 * defaults), whose step state and kernel context ctx then carries.  False
 * with a message on a bad table or out of memory. */
bool rt_trainer_init(RtTrainer *t, const RtModel *m, int64_t batch, int nstate,
                     const RtDeviceOpen *how, char *err, size_t errlen);
void rt_trainer_free(RtTrainer *t);
/* Initialises every parameter in fp32 (rt_init_param) and writes the 16-bit
 * shadow of those with a master. */
bool rt_trainer_init_params(RtTrainer *t, const char *weight_init, uint64_t seed, char *err,
                            size_t errlen);
/* Elements of buffer b at the trainer's batch size. */
int64_t rt_buffer_elems(const RtModel *m, int b, int64_t batch);
/* The device's setup step (rt_dev_setup over the trainer's buffers), once
 * before the first step; false with a message. */
bool rt_trainer_setup(RtTrainer *t, char *err, size_t errlen);
/* The next staging slot becomes x_host, y_host, and may be written once
 * this returns (the copy from it two batches ago has finished). */
void rt_trainer_staging_ready(RtTrainer *t);
/* The staged batch (x_host, y_host) to the data and label buffers. */
void rt_trainer_load_batch(RtTrainer *t);
/* The synthetic batch of the sample indices at idx (device memory) made by
 * the device into the data and label buffers (rt_dev_has_synthetic). */
void rt_trainer_synthetic_batch(RtTrainer *t, const RtDevSynth *s, const int64_t *idx);
/* Whether the batches the device writes (synthetic_batch, ingest) take the
 * first layer's form where the program has one (RtModel.input_form, the
 * step then skipping its input's cast and layout calls), or the data
 * input's own: only when nothing on the host reads the data buffer or a
 * skipped call's value (no after_node hook, no --dump-state). */
void rt_trainer_form(RtTrainer *t, bool formed);
/* The raw path's buffers: two pinned slots of a batch's bytes and the
 * device scratch ingest copies through; false with a message. */
bool rt_trainer_raw_staging(RtTrainer *t, char *err, size_t errlen);
/* The staged raw batch (raw_host, y_host) uploaded and normalised by the
 * device (rt_dev_ingest) into the data (or first-layer, rt_trainer_form)
 * and label buffers of step `infer` (false: the train step's). */
void rt_trainer_ingest_batch(RtTrainer *t, const RtIngestNorm *norm, bool infer);
/* The first n rows of the loss head's output in buffer prob, copied to
 * prob_host. */
const void *rt_trainer_read_rows(const RtTrainer *t, int prob, int64_t n);
/* The bytes of a batch's rows of buffer prob, and those rows queued into
 * dst (host_alloc memory) without waiting: dst holds them once the host
 * has waited for the device (device.h, to_host_async). */
size_t rt_trainer_rows_bytes(const RtTrainer *t, int prob);
void rt_trainer_queue_rows(RtTrainer *t, int prob, void *dst);
/* n elements of dtype dt at device pointer src into host dst as fp32 (a
 * 16-bit one widened). */
void rt_trainer_read_f32(const RtTrainer *t, float *dst, const void *src, size_t n, RtDType dt);
/* The loss scale the last step's loss head multiplied by: the step state's,
 * read back from the device (a wait). */
float rt_trainer_step_scale(const RtTrainer *t);
/* The gradients summed over the run's devices (the identity on one). */
bool rt_trainer_reduce_grads(RtTrainer *t, char *err, size_t errlen);
/* Every device takes rank 0's parameters, masters and optimizer state. */
bool rt_trainer_broadcast_params(RtTrainer *t, char *err, size_t errlen);

/* The whole run with parsed options; logs to out, errors to err.  Returns the
 * exit status (0, 1 for a data, checkpoint or run-time error, 2 for bad
 * settings). */
int rt_train_run(const RtModel *m, const RtTrainOptions *o, FILE *out, FILE *err,
                 RtTrainResult *res);
/* main(): defaults, train_defaults, flags, then rt_train_run. */
int rt_train_main(int argc, char **argv, const RtModel *m);

/* ---- state.c: the state of one step, for gradient tests ---------------- */

/* Writes, after a train step and before any update: the model's parameters
 * (fp32: the master where there is one), their gradients (fp32, divided by
 * the step's loss scale), the batch and its labels, and the summed cross-entropy.
 * Format (little endian): "AMPCSTAT", u32 version 1, u32 nparams, i64 batch,
 * i64 data values, u64 seed, u64 step, f64 loss; per parameter u32 name
 * length, the name, i64 numel, f32 values[numel], f32 grads[numel]; then
 * f32 data, f32 labels.  tests/e2e/refcheck.c reads it. */
bool rt_dump_state(const RtModel *m, const RtTrainer *t, const char *path, char *err,
                   size_t errlen);

#endif /* AMPC_TRAIN_H */
