/*
 * tune.h - how a convolution's cuDNN plan is chosen, and the plan cache file
 * that lets the next start skip the choosing (runtime/cuda/tune.c; issue 26).
 * Free of CUDA and cuDNN: conv.c hands it the heuristic's candidates and
 * callbacks that build and time one; tests/runtime/test_cuda_tune.c hands it
 * a fake engine list.
 *
 * Bounded autotune: the candidates in the heuristic's order, those the
 * engine rule refuses (plan.h's ampc_engine_refusal) and, unless asked,
 * runtime-compiled engines skipped (compiling one takes seconds); those
 * that build within the workspace limit are timed (one warm-up and one
 * timed run each, on one shared scratch) until max_timed have been, and the
 * fastest wins.  Without autotune the first that builds wins.
 *
 * The plan cache file (--cudnn-plan-cache FILE) maps a convolution's key
 * (plan.h's: shape, dtype, layout, pass, accumulate) under an environment
 * (compute capability, SM count, the full cuDNN version, the engine
 * filter's settings, the workspace limit and alignment, the runtime's
 * version: a plan chosen under tf32 never serves exact) to the heuristic
 * list's candidate that won and its engine.  A hit is taken without timing
 * when the same candidate still carries that engine and still builds.
 *
 * The file is untrusted input: "AMPCPLAN", a format version, the entry size
 * and count, the entries, an FNV-1a 64 checksum of everything before it.
 * A file that does not start with the magic is refused (it is not ours:
 * never overwritten); one of ours that is damaged or of another version is
 * ignored with a warning and rewritten.  Saving takes an exclusive lock on
 * FILE.lock, reads the file again, adds what this process learnt that it
 * lacks, and replaces it atomically (fileio.h: a temporary file renamed
 * over it), so eight ranks starting at once lose nothing and never leave a
 * torn file.
 */
#ifndef AMPC_CUDA_TUNE_H
#define AMPC_CUDA_TUNE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- bounded autotune ------------------------------------------------------------ */

enum { AMPC_TUNE_MAX_DEFAULT = 4 }; /* --cudnn-autotune-max's default */

typedef struct {
    int64_t engine;        /* cuDNN's global engine index (-1: it did not say) */
    unsigned notes;        /* plan.h's AMPC_NOTE_* bits */
    bool runtime_compiled; /* CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION */
} AmpcCandidate;

typedef struct {
    /* builds candidate i's plan: its workspace bytes; false when it does not build */
    bool (*build)(void *ctx, int i, size_t *ws);
    /* one warm-up and one timed run of the built plan i: ms, inf when a run fails */
    float (*time)(void *ctx, int i);
    /* frees built plan i (one that lost, or that did not fit) */
    void (*drop)(void *ctx, int i);
} AmpcTuneOps;

typedef struct {
    AmpcEnginePolicy engines;
    bool autotune;         /* time candidates (else the first that builds wins) */
    int max_timed;         /* --cudnn-autotune-max: candidates timed at most (>= 1) */
    bool runtime_compiled; /* --cudnn-runtime-compiled: such engines allowed */
    size_t workspace_limit;
} AmpcTunePolicy;

typedef struct {
    int chosen;             /* the candidate kept built (-1: none) */
    size_t ws;              /* its workspace */
    int proposed, refused;  /* candidates seen, refused by the engine rule */
    int skipped_rtc;        /* runtime-compiled ones skipped */
    int timed;              /* candidates timed */
    bool cached;            /* the cached choice was taken */
    unsigned refused_notes; /* the notes that refused them */
} AmpcTuneResult;

/* Chooses among c[0..n) for a convolution of dt.  cached: a plan cache
 * file's candidate (-1: none), taken untimed when it is in range, carries
 * cached_engine, passes the policy and builds within the limit; otherwise
 * the search above.  Every built plan but the chosen one is dropped. */
void ampc_tune_choose(const AmpcCandidate *c, int n, RtDType dt, const AmpcTunePolicy *p,
                      const AmpcTuneOps *ops, void *ctx, int cached, int64_t cached_engine,
                      AmpcTuneResult *r);

/* ---- the plan cache file ----------------------------------------------------------- */

#define AMPC_PLANFILE_MAGIC "AMPCPLAN"
enum { AMPC_PLANFILE_VERSION = 1 };

/* what a choice is valid for besides the convolution itself */
typedef struct {
    int64_t cc_major, cc_minor, sm_count;
    int64_t cudnn_version; /* cudnnGetVersion() */
    int64_t cuda_runtime;  /* cudaRuntimeGetVersion(): the CUDA runtime the engines use */
    int64_t fp32, nondeterministic, runtime_compiled; /* the engine filter's settings */
    int64_t workspace_limit, alignment;
    int64_t runtime_version; /* FNV-1a 64 of the runtime's version string */
} AmpcTuneEnv;

typedef struct {
    AmpcPlanKey key;
    AmpcTuneEnv env;
    int64_t mode;      /* the heuristic's list: 0 mode A, 1 fallback */
    int64_t candidate; /* its position in that list */
    int64_t engine;    /* the engine it carried */
} AmpcTuneEntry;

typedef struct {
    AmpcTuneEntry *e;
    size_t n, cap;
    size_t learnt; /* entries added since load (what a save contributes) */
    char *path;
} AmpcPlanFile;

/* Parses a plan cache file's bytes into f (appending).  false with a
 * message naming `where` and the fault; *ours then says whether the bytes
 * began with the magic (a damaged file of ours, to be rewritten). */
bool ampc_planfile_parse(AmpcPlanFile *f, const uint8_t *data, size_t size, const char *where,
                         bool *ours, char *err, size_t errlen);
/* The file's bytes for f's entries: malloc'd, *size set; NULL when out of memory. */
uint8_t *ampc_planfile_serialize(const AmpcPlanFile *f, size_t *size);
/* Opens path's cache: a missing file is an empty cache; one of ours that is
 * damaged or stale empty with a warning in warn (warn[0] == 0 otherwise);
 * anything else not ours, or unreadable, false with a message. */
bool ampc_planfile_open(AmpcPlanFile *f, const char *path, char *warn, size_t warnlen, char *err,
                        size_t errlen);
/* the entry of (key, env), or NULL */
const AmpcTuneEntry *ampc_planfile_find(const AmpcPlanFile *f, const AmpcPlanKey *key,
                                        const AmpcTuneEnv *env);
/* adds (or replaces) an entry learnt now; false when out of memory */
bool ampc_planfile_add(AmpcPlanFile *f, const AmpcTuneEntry *e);
/* Writes what was learnt into the file (nothing learnt: nothing written),
 * under its lock, merged with what other processes wrote meanwhile. */
bool ampc_planfile_save(AmpcPlanFile *f, char *err, size_t errlen);
void ampc_planfile_free(AmpcPlanFile *f);
/* FNV-1a 64 (the checksum, and the runtime version's hash) */
uint64_t ampc_planfile_hash(const void *data, size_t n, uint64_t h);
#define AMPC_FNV_START 0xcbf29ce484222325ull

/* ---- call sites ---------------------------------------------------------------------- */

/* What a plan keeps per call site (its pointers: x, w, y, workspace, and
 * the statistics of a convolution fused with their generation, else NULL), so
 * that a cuDNN variant pack is built once per site instead of once per call
 * (a convolution of one shape runs at a few sites, with the arena's fixed
 * buffers).  Linear: a plan has few sites. */
#define AMPC_SITE_PTRS 5
typedef struct {
    const void *ptr[AMPC_SITE_PTRS];
    void *value;
} AmpcSite;
typedef struct {
    AmpcSite *e;
    size_t n, cap;
} AmpcSiteTable;

void *ampc_site_get(const AmpcSiteTable *t, const void *const ptr[AMPC_SITE_PTRS]);
/* false when out of memory */
bool ampc_site_put(AmpcSiteTable *t, const void *const ptr[AMPC_SITE_PTRS], void *value);
/* calls drop(ctx, value) for each (drop may be NULL), frees the table */
void ampc_site_free(AmpcSiteTable *t, void (*drop)(void *ctx, void *value), void *ctx);

#ifdef __cplusplus
}
#endif

#endif /* AMPC_CUDA_TUNE_H */
