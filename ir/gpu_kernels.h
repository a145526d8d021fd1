/* gpu_kernels.h - what each GPU launch of a lowered call does, as counts:
 * the inputs of the GPU cost model (passes/gpucost.c, docs/gpucost.md) and
 * what the kernel emulator (issue 22) counts when it runs the same launch.
 *
 * ir/kernels.def keeps, beside each op's KERNEL row, one GPUK row per launch
 * the op's CUDA call makes, in the order the runtime makes them: the
 * __global__ kernel's name (or the library operation: a cuDNN execution, a
 * cuBLASLt matmul) and, as C expressions of the call's sizes (GkDims), its
 * grid and block, the global bytes it reads and writes, its FLOPs by kind,
 * the global loads its busiest thread issues (its serial load count) and how
 * many of those the thread has in flight at once.  The launches no op owns
 * (the runtime's per-step work: the batch's copies, the finite check, the
 * optimizer, the loss scale) are kernels.def's GPU_STEP rows, with sizes of
 * the whole parameter table (GkStepDims).
 *
 * The counts follow the emulator's rules (runtime/emu/emu.h of issue 22): a
 * byte is counted each time a thread loads or stores it, cached or not; a
 * load of S bytes is ceil(S/16) load instructions; FLOPs are the float and
 * double operations the source performs, a conversion between float, double
 * and integers is one GK_CVT, and a libm call one FUNC.  So a test can run a
 * kernel in the emulator at two sizes and compare counts one for one.
 * Cheap: a call is described in a few microseconds, no allocation. */
#ifndef AMPC_GPU_KERNELS_H
#define AMPC_GPU_KERNELS_H

#include "ir.h"

/* FLOPs by kind: the emulator's AmpcEmuFlop, in its order, then the tensor
 * cores' multiply-adds (counted as two FLOPs) of a library call */
typedef enum {
    GK_F32_ADD, /* + and - */
    GK_F32_MUL,
    GK_F32_DIV,
    GK_F32_SQRT,
    GK_F32_FUNC, /* expf, logf, tanhf, ... */
    GK_F32_CMP,
    GK_F64_ADD,
    GK_F64_MUL,
    GK_F64_DIV,
    GK_F64_SQRT,
    GK_F64_FUNC,
    GK_F64_CMP,
    GK_CVT,
    GK_TENSOR, /* a library call's matrix FLOPs, in the call's dtype */
    GK_NFLOP
} GkFlop;
extern const char *const gk_flop_names[GK_NFLOP]; /* "f32_add", ... */

/* who runs the launch */
typedef enum {
    GK_CUSTOM,    /* one of ampc's __global__ kernels (runtime/cuda/) */
    GK_CUDNN_FWD, /* a cuDNN convolution: forward, data gradient, filter gradient */
    GK_CUDNN_DGRAD,
    GK_CUDNN_WGRAD,
    GK_GEMM,     /* a cuBLASLt matmul */
    GK_COPY_H2D, /* cudaMemcpyAsync from pinned host memory */
    GK_COPY_D2H,
    GK_NKIND
} GkKind;

/* how a custom kernel's threads touch memory: the bandwidth it can reach */
typedef enum {
    GK_SCALAR,  /* consecutive threads, consecutive elements of 2 or 4 bytes */
    GK_VEC16,   /* 16-byte loads and stores (ir/kernels.def's vectorized column) */
    GK_STRIDED, /* consecutive threads far apart: every access its own 32-byte sector */
} GkAccess;

/* One launch, as a GPUK or GPU_STEP row says at given sizes.  Any field a
 * row leaves out is 0 (absent 0: the launch is made). */
typedef struct {
    const char *kernel; /* the __global__ function, or "cudnn:fwd" and the like */
    GkKind kind;
    double absent;        /* nonzero: this call makes no such launch at these sizes */
    double count;         /* launches the row stands for, alike (0: 1); its counts are
                           * their sums, serial the busiest thread's of one */
    double blocks, block; /* grid and block: blocks * block threads */
    double rd, wr;        /* global bytes read and written: every load and store */
    double ru;            /* of rd, the distinct bytes (DRAM's share when the caches keep
                           * what the launch reads again); 0: all of rd */
    double serial;        /* global loads issued by the busiest thread, one after another */
    double inflight;      /* of those, how many it has outstanding at once (0: 1) */
    GkAccess access;
    double flops[GK_NFLOP];
    double cvt_const; /* conversions of integer constants to double (an accumulator zeroed
                       * from a literal 0): the emulator counts them, nvcc folds them, so
                       * the cross-check adds them to GK_CVT and the model never prices them */
    /* a library call: its GEMM's shape M x N over a reduction of K, and the
     * convolution's filter taps, stride and channels (the efficiency table's
     * classes, passes/gpucost.c) */
    double gm, gn, gk, taps, stride, chan;
} GkLaunch;

/* The sizes of one call, as its kernels see them (each family of
 * kernels.def sets what its rows read; the rest stay 0).  Counts are
 * elements unless named otherwise. */
typedef struct {
    double n;                 /* elements the call's kernels walk: its main tensor */
    double m;                 /* a second count: pooling's input elements, a broadcast's
                               * other operand, a concat's segment */
    double c, outer, inner;   /* n viewed as [outer, c, inner] (BatchNorm, bias, softmax rows) */
    double len;               /* a softmax or loss row's length (classes); a reduction's */
    double win, wmax, cover;  /* pooling: mean window taps after clipping at the border,
                               * a full window's taps, the outputs whose window holds an input
                               * (mean over the inputs) */
    double cmax;              /* pooling: the most outputs whose window holds one input */
    double s, s2;             /* bytes of an element of the main dtype and of a second one */
    double h, h2;             /* 1 when that dtype is fp16 (a load decodes it: kernels/half.h) */
    double acc;               /* the call adds into its output */
    double fix, glob, dx, ry; /* BatchNorm: fix_gamma, use_global_stats, dx written, a fused relu */
    double dgamma, dbeta, saves; /* BatchNorm: the parameter gradients, saved statistics written */
    double dsc;                  /* BatchNorm + add + relu's backward writes the relu's gradient */
    double bias, pad;            /* a bias; a convolution's channels padded (cp > C) */
    double skip;                 /* the step state's loss scale is dynamic: BatchNorm's
                                  * moving update reads its flag too */
    double prob;                 /* Dropout's p: the share of elements dropped (not read) */
    double da, db;               /* a broadcast's backward writes the gradient of a, of b */
    double chunks, chunks2;      /* a reduction's 512-wide chunk sums (ampc_k_bcast_reduce):
                                  * (n / row) * ceil(row / 512), row the last axis, where the
                                  * reduced side (chunks2: a broadcast's b) is 1 along it */
    double mode;                 /* the op's variant: its act_type, pool_type (1: max), unary op */
    double N, C, K, G, cp;       /* convolution and FullyConnected: batch, in and out channels,
                               * groups, C padded for cuDNN (3 -> 4, 5..7 -> 8) */
    double HW, PQ, RS, stride; /* input and output pixels per image, filter taps, largest stride */
    int dtype;                 /* the call's DType (the tensor-core rate of a library call) */
} GkDims;

/* The runtime function of a lowered call that a launch belongs to: the
 * row's cuda column itself, or with a suffix (kernels.def's families). */
typedef enum { GE_MAIN, GE_DATA, GE_WEIGHT, GE_TRAIN, GE_INFER, GE_COUNT } GkEntry;
extern const char *const gk_entry_suffix[GE_COUNT]; /* "", "_data", "_weight", ... */

#define GK_MAX_LAUNCHES 8 /* of one runtime function */

/* The launches entry e of op's call makes at sizes d, in the runtime's
 * order, into out (GK_MAX_LAUNCHES); returns their count (absent rows left
 * out).  0 for an op without GPUK rows for e. */
int gk_describe(OpKind op, GkEntry e, const GkDims *d, GkLaunch *out);

/* The sizes of the runtime's per-step work (GPU_STEP rows). */
typedef struct {
    double xb, yb, rb; /* bytes: the batch's data and labels (host to device), the loss
                               * head's rows read back (device to host) */
    double dyn;        /* 1: a dynamic loss scale (the check before the update) */
    double e16, e32;   /* trainable elements with an fp32 master (16-bit weights and
                               * gradients), and fp32 ones without */
    double nblk;       /* multi-tensor blocks: sum over tensors of ceil(n / chunk) */
    double chunk0;     /* elements of the largest block (min(chunk, largest tensor)) */
    double nstate;     /* fp32 optimizer state tensors per parameter */
    double adam, nag;  /* the update's kind (neither: SGD, with momentum when nstate) */
    double h16;        /* 1: the 16-bit weights and gradients are fp16 (a load decodes) */
} GkStepDims;

/* The launch of a kernel no call or step makes (kernels.def's GPU_AUX rows:
 * the fill, the one-tensor finite check, the binary ops' backward) at sizes
 * d, into out[0]; 1, or 0 for a kernel without such a row. */
int gk_describe_aux(const char *kernel, const GkDims *d, GkLaunch *out);

#define GK_MAX_STEP 16
/* The runtime's per-step launches and copies, in its order (docs/gpucost.md,
 * "The step"); returns their count.  names[i] says which runtime call made
 * launch i ("batch to device", "check", "update", ...). */
int gk_describe_step(const GkStepDims *d, GkLaunch *out, const char **names);

/* The launch geometry of the runtime's kernels (runtime/cuda/kernels.cuh and
 * layout.cuh; the emulator cross-check pins them): threads per block and
 * the most blocks of a grid-stride launch; the multi-tensor kernels' block
 * and chunk (BatchNorm's tiles: runtime/kernels/bn_tree.h, read by
 * gpu_kernels.c). */
#define GK_THREADS 256
#define GK_GRID_CAP 4096
#define GK_MT_THREADS 512
#define GK_MT_CHUNK 65536

/* The emulator cross-check's: the rows' grids capped at cap blocks (the
 * emulation build's ampc_emu_grid_cap, so its loops wrap at small sizes);
 * 0 restores GK_GRID_CAP.  ampc itself never calls it. */
void gk_set_grid_cap(double cap);

#endif
