/* checkpoint.h - checkpoints (checkpoint.c): ampc's own format of a run's
 * tensors and where it stands, written atomically, read with every check of
 * the format, applied to a trainer; the save directory's rules.
 */
#ifndef AMPC_RT_CHECKPOINT_H
#define AMPC_RT_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lossscale.h"
#include "train.h"

/* Where a run stands (what a checkpoint holds besides the tensors). */
typedef struct {
    uint64_t seed;
    int64_t batch_size;
    int64_t epoch;          /* the epoch of the next step */
    int64_t batch_in_epoch; /* batches of that epoch already done */
    int64_t step;           /* batches done in all (ctx.step of the next one) */
    int64_t num_update;     /* optimizer updates done (skipped steps excluded) */
    uint32_t optimizer;     /* RtOptKind */
    float momentum;
    RtLossScaler ls; /* mode, scale, tracker, skipped, nonfinite (the rule is a setting) */
} RtRunState;

typedef struct {
    char *name;
    RtDType dtype; /* the storage dtype of the model that wrote it */
    bool has_master, trainable;
    int rank;
    int64_t shape[RT_MAX_RANK];
    int64_t numel;
    float *values; /* fp32: the master, the fp32 parameter or the widened 16-bit one */
    float *state;  /* the momentum or Adam's mean, or NULL */
    float *state2; /* Adam's var, or NULL */
} RtCkptParam;

typedef struct {
    char *model, *amp;
    RtRunState run;
    int nparams;
    RtCkptParam *params;
} RtCheckpoint;

#define RT_CKPT_MAGIC "AMPCCKPT"
/* Checkpoints are ampc's own format, not MXNet's .params: DIR/MODEL-NNNN.ckpt
 * (the old name, MODEL-NNNN.params, is still read and recognised) */
#define RT_CKPT_EXT ".ckpt"
#define RT_CKPT_VERSION 2 /* 2 adds Adam (optimizer 2, flag 8: var); 1 is still read */
#define RT_CKPT_HEADER_BYTES 32

/* Writes the trainer's tensors and rs to path: a temporary file in the same
 * directory, fsynced, renamed over path, the directory fsynced. */
bool rt_checkpoint_save(const char *path, const RtTrainer *t, const RtRunState *rs, char *err,
                        size_t errlen);
/* --save-dir: made (mkdir -p), then cleared of the temporary files a run
 * killed while saving left (notes to note).  False with a message. */
bool rt_save_dir_prepare(const char *dir, const char *model, FILE *note, const char *prog,
                         char *err, size_t errlen);
/* Where a run resumed from a checkpoint's run state rs starts (at: epoch,
 * batch_in_epoch, step, num_update; the next epoch when rs's batch size
 * differs mid-epoch or its epoch was whole) and its loss scaler's state;
 * notes and warnings to err. */
/* --save-dir: false, with a message, when dir already holds checkpoints
 * (of another run of model, or of another model), which this run's would
 * mix with or overwrite; the caller skips it under --resume or --overwrite. */
bool rt_save_dir_check(const char *dir, const char *model, char *err, size_t errlen);
void rt_checkpoint_resume(const RtRunState *rs, const RtTrainOptions *o, int64_t steps_per_epoch,
                          RtLossScaler *ls, RtRunState *at, FILE *err);
/* The checkpoint at the end of epoch rs.epoch, after rs.batch_in_epoch
 * batches: DIR/MODEL-NNNN.ckpt (NNNN = epoch + 1) after a whole epoch,
 * DIR/MODEL-stepSSSSSS.ckpt (the step) when the run stopped mid-epoch; its
 * path left in *path (the previous one freed). */
bool rt_checkpoint_save_epoch(const char *dir, const RtTrainer *t, RtRunState rs,
                              int64_t steps_per_epoch, char **path, char *err, size_t errlen);
/* Parses a checkpoint from memory (name is the file for messages); every
 * check of the format: magic, version, sizes, both checksums, the payload
 * parsed to its exact end.  rt_checkpoint_free releases it. */
bool rt_checkpoint_parse(const void *buf, size_t len, const char *name, RtCheckpoint *ck, char *err,
                         size_t errlen);
bool rt_checkpoint_read(const char *path, RtCheckpoint *ck, char *err, size_t errlen);
void rt_checkpoint_free(RtCheckpoint *ck);
/* Checks that ck's parameter table matches the trainer's model (count, names,
 * shapes) and loads it: masters and shadows, fp32 parameters, BatchNorm
 * moving statistics, momentum.  Warnings (a momentum missing on one side) go
 * to warn, "PROG: warning: ..." (prog may be NULL).  False with a message
 * naming name otherwise. */
bool rt_checkpoint_apply(const RtCheckpoint *ck, RtTrainer *t, const char *prog,
                         const char *name, FILE *warn, char *err, size_t errlen);

#endif
