/*
 * emu.h - the CUDA emulator's C interface (docs/backend-cuda.md, "The
 * emulator").  Every kernel of libampccuda.a is also compiled by the host's
 * C++ compiler from the same source (the emulation build: runtime/cuda/
 * emu_cuda.h stands in for nvcc's built-ins) into libampcemu.a, whose
 * launches run here: each CUDA thread a fiber under a seeded scheduler,
 * blocks in a seeded order, barriers and warp primitives as rendezvous
 * with sm_70's rules, and every device access checked (bounds, alignment,
 * races, shared memory never written, order-dependent float atomics) and
 * counted (bytes, loads per thread, FLOPs by kind).
 *
 * A test (C) allocates device memory with ampc_emu_malloc, calls the
 * library's launchers (ampc_cu_*, rt_cuda_*) as a program would, and reads
 * the results and ampc_emu_last_counts().  The second half of this file is
 * what emu_cuda.h calls from inside kernels; tests do not use it.
 */
#ifndef AMPC_CUDA_EMU_H
#define AMPC_CUDA_EMU_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct AmpcEmuDim3 {
    unsigned x, y, z;
} AmpcEmuDim3;

/* ---- device memory ------------------------------------------------------------------ */

/* Device memory of `bytes` (0 allowed), named in the checker's messages.
 * Outside launches the host reads and writes it like any memory; during a
 * launch only ampc_dptr accesses reach it (a raw pointer faults, and the
 * fault names the buffer).  Its bytes start as 0xa5.  Exits on exhaustion. */
void *ampc_emu_malloc(size_t bytes, const char *name);
void ampc_emu_free(void *p); /* NULL is fine; a kernel touching it later is reported */

/* ---- schedules ---------------------------------------------------------------------- */

typedef enum {
    AMPC_EMU_SEEDED,  /* blocks in a seeded permutation, threads picked at random */
    AMPC_EMU_FORWARD, /* blocks and threads in index order */
    AMPC_EMU_REVERSE  /* blocks and threads last to first */
} AmpcEmuOrder;

/* Sets the schedule of the launches that follow (and restarts the launch
 * count the seeded choices derive from, so a pass replays exactly). */
void ampc_emu_schedule(AmpcEmuOrder order, uint64_t seed);
/* The tests' loop: `for (int p = 0; ampc_emu_pass(p); p++)` runs the body
 * under seed 1, seed 2 and the reversed order; with AMPC_EMU_SCHEDULE set
 * (seed:N, forward or reverse: what a failure prints) only under that. */
int ampc_emu_pass(int pass);
/* "seed:1", "reverse", ...: the current schedule as AMPC_EMU_SCHEDULE takes it */
const char *ampc_emu_schedule_name(void);

/* The grid cap of the library's grid-stride launchers in this build
 * (AMPC_CU_GRID_CAP, AMPC_LAY_GRID_CAP; default 3, so the loops wrap). */
unsigned ampc_emu_grid_cap(void);
void ampc_emu_set_grid_cap(unsigned cap);

/* ---- failures ----------------------------------------------------------------------- */

/* A failed launch stops at the first failure and returns an error to its
 * launcher.  The message names the kernel, the launch, the schedule (to
 * rerun with), and what failed: the buffer and offset and both threads, or
 * the barrier's call site and the threads at it.  fn (NULL: print to stderr
 * and exit 1) is then called on the host's stack, after the emulator's
 * state is clean, so it may longjmp (cmocka's fail_msg). */
typedef void (*AmpcEmuFailFn)(const char *msg, void *ctx);
void ampc_emu_on_failure(AmpcEmuFailFn fn, void *ctx);
/* the last launch's failure message, or NULL when it passed */
const char *ampc_emu_failure(void);

/* ---- counts ------------------------------------------------------------------------- */

/* FLOPs by kind, counted by the emulation build's number types (emu_cuda.h:
 * float and double are counting classes there).  A libm call (exp, log,
 * tanh, pow, ...) is one FUNC; CVT counts conversions between float, double
 * and integers (also of integer constants); negation and fabs are free. */
typedef enum {
    AMPC_EMU_F32_ADD, /* + and - */
    AMPC_EMU_F32_MUL,
    AMPC_EMU_F32_DIV,
    AMPC_EMU_F32_SQRT,
    AMPC_EMU_F32_FUNC,
    AMPC_EMU_F32_CMP,
    AMPC_EMU_F64_ADD,
    AMPC_EMU_F64_MUL,
    AMPC_EMU_F64_DIV,
    AMPC_EMU_F64_SQRT,
    AMPC_EMU_F64_FUNC,
    AMPC_EMU_F64_CMP,
    AMPC_EMU_CVT,
    AMPC_EMU_NFLOP
} AmpcEmuFlop;
extern const char *const ampc_emu_flop_names[AMPC_EMU_NFLOP];

/* One launch (docs/backend-cuda.md, "Counts").  Global memory is every
 * ampc_emu_malloc buffer; a load or store of S bytes counts ceil(S/16)
 * instructions (a 16-byte vector access is one); an atomic counts in
 * atomics and its bytes both as read and written, not as a load. */
typedef struct AmpcEmuCounts {
    const char *kernel; /* the __global__ function's name */
    long launch;        /* 1 for the first launch of the process */
    AmpcEmuDim3 grid, block;
    uint64_t blocks, threads; /* launched: grid and grid x block */
    size_t shared_bytes;      /* per block: static declared + dynamic */
    uint64_t global_read_bytes, global_write_bytes;
    uint64_t global_loads, global_stores;
    uint64_t max_thread_loads; /* the most global loads one thread issued: its serial count */
    uint64_t shared_read_bytes, shared_write_bytes;
    uint64_t atomics;    /* global and shared */
    uint64_t barriers;   /* __syncthreads completed, over all blocks */
    uint64_t warp_syncs; /* warp rendezvous completed (__syncwarp, shuffles, votes) */
    uint64_t flops[AMPC_EMU_NFLOP];
} AmpcEmuCounts;

/* the last launch's counts (zeroed before any launch) */
const AmpcEmuCounts *ampc_emu_last_counts(void);
/* fn sees every launch's counts as it ends (NULL: none) */
typedef void (*AmpcEmuLaunchFn)(const AmpcEmuCounts *c, void *ctx);
void ampc_emu_on_launch(AmpcEmuLaunchFn fn, void *ctx);
long ampc_emu_launches(void); /* launches so far */
/* One line per kernel launched so far: launches, threads, bytes read and
 * written, FLOPs, the most loads of one thread (sums, the max for that).
 * With AMPC_EMU_KERNEL_LOG set, the names are also appended to that file
 * at exit (make emu-check's coverage of every __global__). */
void ampc_emu_print_kernels(FILE *f);

/* ---- the kernel side (emu_cuda.h): not for tests ------------------------------------ */

/* Runs run(arg) once per thread of the grid; 0, or -1 when a check failed. */
int ampc_emu_launch(const char *kernel, AmpcEmuDim3 grid, AmpcEmuDim3 block, size_t dyn_shared,
                    void (*run)(void *arg), void *arg);
int ampc_emu_launch_status(void); /* the last launch's: 0 or -1 */

enum { AMPC_EMU_LOAD, AMPC_EMU_STORE };
/* Checks and counts one access of `size` bytes at device address p, of a
 * type aligned to `align`; returns where the bytes really are.  Outside a
 * launch it returns p. */
void *ampc_emu_access(const void *p, size_t size, size_t align, int kind);

enum {
    AMPC_EMU_ATOM_ADD,
    AMPC_EMU_ATOM_SUB,
    AMPC_EMU_ATOM_EXCH,
    AMPC_EMU_ATOM_MIN,
    AMPC_EMU_ATOM_MAX,
    AMPC_EMU_ATOM_AND,
    AMPC_EMU_ATOM_OR,
    AMPC_EMU_ATOM_XOR,
    AMPC_EMU_ATOM_CAS,
    AMPC_EMU_ATOM_INC, /* CUDA's atomicInc: old >= v ? 0 : old + 1 */
    AMPC_EMU_ATOM_DEC
};
enum { AMPC_EMU_I32, AMPC_EMU_U32, AMPC_EMU_U64, AMPC_EMU_I64, AMPC_EMU_T_F32, AMPC_EMU_T_F64 };
/* One atomic read-modify-write of type `type` at p; returns the old bits.
 * A float or double add is logged: its result may not depend on the
 * order of the adds unless the kernel said AMPC_NONDETERMINISTIC(). */
uint64_t ampc_emu_atomic(void *p, int type, int op, uint64_t v, uint64_t cmp);
void ampc_emu_nondeterministic(void);

void ampc_emu_syncthreads(const char *file, int line);
enum {
    AMPC_EMU_SYNCWARP,
    AMPC_EMU_SHFL,
    AMPC_EMU_SHFL_UP,
    AMPC_EMU_SHFL_DOWN,
    AMPC_EMU_SHFL_XOR,
    AMPC_EMU_BALLOT,
    AMPC_EMU_ANY,
    AMPC_EMU_ALL
};
/* A warp primitive: a rendezvous of exactly the lanes of mask at this call
 * site.  value: the lane's operand (the shuffled bits, or the predicate);
 * arg: srcLane, delta or laneMask; returns the lane's result. */
uint64_t ampc_emu_warp(int op, unsigned mask, uint64_t value, int arg, int width, const char *file,
                       int line);

/* The shared array a declaration names (tag: a static at the declaration),
 * allocated in the block's 48 KiB of static shared memory the first time a
 * thread of the block reaches it; poisoned, never written. */
void *ampc_emu_shared(const void *tag, size_t bytes, size_t align, const char *name,
                      const char *file, int line);
/* extern __shared__: the launch's dynamic shared memory */
void *ampc_emu_shared_dynamic(const char *name);

/* the counters the number types add to: the running launch's, else a sink */
extern uint64_t *ampc_emu_flop_count;

/* the built-in variables of the running thread */
extern AmpcEmuDim3 ampc_emu_thread_idx, ampc_emu_block_idx, ampc_emu_block_dim, ampc_emu_grid_dim;

#ifdef __cplusplus
}
#endif

#endif /* AMPC_CUDA_EMU_H */
