/* kvstore.h - the gradient-placement pass (passes/kvstore.c, docs/kvstore.md):
 * a cost model that chooses where gradients are summed and the optimizer
 * runs (MXNet's kvstore names: local, device, nccl, dist_sync), buckets the
 * gradients, and writes the choice into the lowered program. */
#ifndef AMPC_KVSTORE_H
#define AMPC_KVSTORE_H

#include "../ir/plan.h"

/* A machine description (docs/kvstore.md, "The machine file"): one machine
 * of a cluster.  Rates are as the keys name them; every key is required. */
typedef struct {
    char name[64];
    int devices;            /* accelerators per machine; 0: CPU only */
    double device_mem_GBps; /* device memory bandwidth, GB/s */
    int device_fused_mp;    /* 1: a fused multi-precision update on the device */
    double link_GBps;       /* device to device inside a machine, per device and direction */
    double link_latency_us; /* per message */
    double pcie_GBps;       /* device to host, per device and direction */
    double pcie_latency_us;
    double host_mem_GBps;   /* host memory bandwidth the reduction and update get */
    double host_cvt_Gelem_s;/* host fp16/bf16 <-> fp32 conversions, G elements/s */
    double host_tflops;     /* sustained training rate of the host (CPU-only machines) */
    int host_fused_mp;      /* 1: a fused multi-precision update on the host */
    double net_Gbps;        /* between machines, per machine and direction, Gbit/s */
    double net_latency_us;
    /* one device, as the GPU cost model sees it (passes/gpucost.h; 0 on a
     * CPU-only machine): vendor figures and published measurements */
    int sm_count;           /* streaming multiprocessors */
    double sm_clock_GHz;    /* the boost clock the FLOP figures assume */
    int threads_per_sm;     /* resident threads an SM holds at most */
    double l2_MB;           /* L2 cache, MB (1e6 bytes) */
    double device_mem_GB;   /* device memory, GB (1e9 bytes) */
    double tc_f16_tflops;   /* dense tensor-core TFLOP/s, fp16 in, fp32 accumulate */
    double tc_bf16_tflops;  /* the same for bf16 */
    double tc_tf32_tflops;  /* the same for TF32 (fp32 convolutions only with --cudnn-fp32=tf32) */
    double fp32_tflops;     /* fp32 FMA TFLOP/s (an FMA is two FLOPs) */
    double fp64_tflops;     /* fp64 FMA TFLOP/s, without the tensor cores */
    double dram_latency_ns; /* one dependent load that misses L2 */
    double l2_latency_ns;   /* one dependent load that hits L2 */
    double launch_us;       /* the device's time per kernel launched back to back */
    double api_us;          /* the host's time per launch call */
} KvMachine;

/* Reads a machine file (key = value lines, # comments) into *m; false after
 * reporting the first problem as file:line:col: error (an unknown, repeated
 * or missing key, a bad number). */
bool kv_machine_load(Diag *d, const char *path, KvMachine *m);
/* The same for the text of one (name names it in messages): the fuzz
 * target's entry (tests/fuzz/fuzz_machine.c). */
bool kv_machine_parse_text(Diag *d, const char *name, const char *text, size_t len, KvMachine *m);
/* A built-in description by name (its text parsed as a file is), or false
 * when there is none of that name. */
bool kv_machine_builtin(Diag *d, const char *name, KvMachine *m);
/* The built-in names, NULL-terminated. */
extern const char *const kv_builtin_names[];

typedef struct {
    const char *kvstore;   /* "auto" (NULL too) or a placement name */
    int devices;           /* per machine (CPU only: processes); 0: the machine's (CPU: 1) */
    int machines;          /* 0: 1 */
    double bucket_mb;      /* MiB; < 0: sized by the model (the search); 0: one bucket */
    DType wire;            /* DT_UNKNOWN: the gradients' dtype */
    int64_t batch;         /* per device; 0: the train block's batch_size (or 32) */
    int nstate;            /* fp32 optimizer tensors per parameter */
    bool dynamic_scale;    /* the run's loss scale is dynamic (rt_loss_scale_mode, the
                            * program's rule: fp16 without a loss_scale is dynamic) */
    const double *call_sec; /* a machine with devices: seconds of each train-step call on one
                             * device at the batch, the GPU cost model's (passes/gpucost.h);
                             * unused on a CPU-only machine */
} KvOptions;

/* What the pass predicts, for the dumps and --report. */
typedef struct {
    KvPlace best;             /* the cheapest available */
    double step_ms[KV_COUNT]; /* < 0: not available */
    double compute_ms;        /* forward + backward on one device (on a GPU: the cost model's) */
    double bucket_mib[KV_COUNT];
    int nbuckets[KV_COUNT];
    int64_t params, grad_bytes;
    /* the rest is set for the JSON documents when the pass succeeds */
    KvPlace chosen;                    /* best, or the placement --kvstore named */
    bool named;                        /* --kvstore named it */
    const char *unavailable[KV_COUNT]; /* reason code where step_ms < 0 ("no_devices", ...) */
    int devices, machines;             /* as resolved */
    int64_t batch;                     /* per device */
    int ngrads;                        /* gradient tensors */
    double fwd_ms, bwd_ms;             /* on one device */
    DType wire;
    bool cpu, mp, dynamic; /* a CPU-only machine; fp32 masters; a dynamic loss scale */
    const char *optimizer; /* its name (the graph's text) */
    int nstate;
    char machine[64];
} KvResult;

/* kvstore.c: plans the placement of p's gradients (p lowered from train,
 * the training graph) on machine m and writes it into p->kv.  With dump,
 * prints the table of options (--dump=kvstore); with explain, the
 * reasoning (--explain=kvstore).  A named placement not available here is
 * an error (reported through d, false); a named one much slower than the
 * cheapest is honoured with a warning on stderr. */
bool kvstore_place(const Graph *train, Program *p, const KvMachine *m, const KvOptions *o,
                   Diag *d, FILE *dump, FILE *explain, KvResult *res);

#endif
