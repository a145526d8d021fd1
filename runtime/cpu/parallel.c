/* parallel.c - what the CPU kernels know about the machine: the SIMD level
 * they may use and the threads they may run on, and a small pool of
 * persistent threads (pthreads, no OpenMP) that runs one job at a time.
 *
 * The thread count is OpenBLAS's (openblas_get_num_threads(), which the
 * training driver sets from --threads), so one knob governs both the GEMMs
 * OpenBLAS still runs and the kernels here.  Workspace queries that depend
 * on it read the same value as the kernels, so they stay exact.
 *
 * A job is fn(arg, tid, nt), called on the caller (tid 0) and on up to nt-1
 * pool threads (tid 1..), each of which pulls work items from a counter in
 * arg until none is left; a pool thread that arrives after the caller has
 * run out of work does not join (so the result must not depend on which
 * threads ran).  Pool threads sleep on a condition variable between jobs,
 * after a short spin, so the back-to-back jobs of one training step do not
 * pay a wake-up each.  Jobs never nest: a job started from a pool thread (or
 * from inside a job) runs on its caller alone.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu.h"
#if RT_HAVE_X86_SIMD
#include <cpuid.h>
#endif

int openblas_get_num_threads(void);

/* ---- SIMD level --------------------------------------------------------------- */

static int simd_level = -1;

int rt__simd(void)
{
    int l = __atomic_load_n(&simd_level, __ATOMIC_RELAXED);
    if (l >= 0)
        return l;
    l = RT_SIMD_NONE;
#if RT_HAVE_X86_SIMD
    __builtin_cpu_init();
    unsigned a, b, c, d;
    bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c)
        l = RT_SIMD_AVX2;
    if (l == RT_SIMD_AVX2 && __builtin_cpu_supports("avx512f"))
        l = RT_SIMD_AVX512;
#endif
    /* AMPC_RT_SIMD=0|1|2 caps the level (tests run every path on one machine) */
    const char *e = getenv("AMPC_RT_SIMD");
    if (e && *e >= '0' && *e <= '2' && *e - '0' < l)
        l = *e - '0';
    __atomic_store_n(&simd_level, l, __ATOMIC_RELAXED);
    return l;
}

int rt__threads(void)
{
    int n = openblas_get_num_threads();
    return n < 1 ? 1 : n > RT_MAX_THREADS ? RT_MAX_THREADS : n;
}

/* ---- the pool ------------------------------------------------------------------ */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv_work = PTHREAD_COND_INITIALIZER, cv_done = PTHREAD_COND_INITIALIZER;
/* one job at a time, even if several threads of a program call kernels */
static pthread_mutex_t caller_mu = PTHREAD_MUTEX_INITIALIZER;

static void (*job_fn)(void *, int, int);
static void *job_arg;
static int job_nt;
static unsigned long job_gen; /* bumped per job; read by spinning workers */
static unsigned long jobs_shared; /* jobs handed to the pool (rt__parallel_jobs) */
static int nworkers, nsleeping;
static _Thread_local int in_job;

/* The job's state: its generation (high 32 bits), CLOSED, and how many pool
 * threads joined it and have not finished.  Every job function pulls its
 * work items from a shared counter until none is left, so the caller, once
 * its own call returns, has seen all work taken: it closes the job and
 * waits only for the threads that joined, not for one the OS has not run
 * yet (on a busy machine that can take milliseconds). */
#define ST_CLOSED (1ull << 16)
#define ST_COUNT 0xffffull
static uint64_t job_state;

#define SPIN_ITERS 4000 /* pause takes 10-40 ns (CPU model): 0.04-0.16 ms */

static inline void cpu_relax(void)
{
#if RT_HAVE_X86_SIMD
    __builtin_ia32_pause();
#endif
}

static void *worker(void *p)
{
    int tid = (int)(intptr_t)p;
    in_job = 1;
    unsigned long seen = 0;
    for (;;) {
        /* spin a little: the next kernel usually follows within microseconds */
        for (int i = 0; i < SPIN_ITERS && __atomic_load_n(&job_gen, __ATOMIC_ACQUIRE) == seen; i++)
            cpu_relax();
        pthread_mutex_lock(&mu);
        while (job_gen == seen) {
            nsleeping++;
            pthread_cond_wait(&cv_work, &mu);
            nsleeping--;
        }
        seen = job_gen;
        void (*fn)(void *, int, int) = job_fn;
        void *arg = job_arg;
        int nt = job_nt;
        pthread_mutex_unlock(&mu);
        if (tid >= nt)
            continue;
        uint64_t gen = (uint64_t)(uint32_t)seen << 32;
        uint64_t st = __atomic_load_n(&job_state, __ATOMIC_ACQUIRE);
        bool joined = false;
        while ((st & ~(ST_CLOSED | ST_COUNT)) == gen && !(st & ST_CLOSED))
            if (__atomic_compare_exchange_n(&job_state, &st, st + 1, false, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
                joined = true;
                break;
            }
        if (!joined)
            continue;
        fn(arg, tid, nt);
        st = __atomic_sub_fetch(&job_state, 1, __ATOMIC_ACQ_REL);
        if ((st & ST_CLOSED) && !(st & ST_COUNT)) {
            pthread_mutex_lock(&mu);
            pthread_cond_signal(&cv_done);
            pthread_mutex_unlock(&mu);
        }
    }
    return NULL;
}

void rt__parallel(int nt, void (*fn)(void *arg, int tid, int nt), void *arg)
{
    if (nt > RT_MAX_THREADS)
        nt = RT_MAX_THREADS;
    if (nt <= 1 || in_job) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&caller_mu);
    pthread_mutex_lock(&mu);
    while (nworkers < nt - 1) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&th, &at, worker, (void *)(intptr_t)(nworkers + 1));
        pthread_attr_destroy(&at);
        if (rc != 0)
            break;
        nworkers++;
    }
    if (nt > nworkers + 1)
        nt = nworkers + 1;
    if (nt <= 1) {
        pthread_mutex_unlock(&mu);
        pthread_mutex_unlock(&caller_mu);
        fn(arg, 0, 1);
        return;
    }
    job_fn = fn;
    job_arg = arg;
    job_nt = nt;
    jobs_shared++;
    unsigned long gen = job_gen + 1;
    __atomic_store_n(&job_state, (uint64_t)(uint32_t)gen << 32, __ATOMIC_RELEASE);
    __atomic_store_n(&job_gen, gen, __ATOMIC_RELEASE);
    if (nsleeping)
        pthread_cond_broadcast(&cv_work);
    pthread_mutex_unlock(&mu);

    in_job = 1;
    fn(arg, 0, nt);
    in_job = 0;

    uint64_t st = __atomic_or_fetch(&job_state, ST_CLOSED, __ATOMIC_ACQ_REL);
    for (int i = 0; i < SPIN_ITERS && (st & ST_COUNT); i++) {
        cpu_relax();
        st = __atomic_load_n(&job_state, __ATOMIC_ACQUIRE);
    }
    if (st & ST_COUNT) {
        pthread_mutex_lock(&mu);
        while (__atomic_load_n(&job_state, __ATOMIC_ACQUIRE) & ST_COUNT)
            pthread_cond_wait(&cv_done, &mu);
        pthread_mutex_unlock(&mu);
    }
    pthread_mutex_unlock(&caller_mu);
}

/* How many jobs were handed to the pool threads so far (not run on the
 * caller alone): tests/runtime/test_threads.c checks with it that a kernel
 * shares its work out at all, which the bit comparisons alone cannot show.
 * Declared where it is used (no kernel needs it). */
unsigned long rt__parallel_jobs(void);
unsigned long rt__parallel_jobs(void)
{
    pthread_mutex_lock(&mu);
    unsigned long n = jobs_shared;
    pthread_mutex_unlock(&mu);
    return n;
}

/* Splits [0, n) into nt nearly equal contiguous ranges; range tid. */
void rt__split(size_t n, int tid, int nt, size_t *lo, size_t *hi)
{
    *lo = n * (size_t)tid / (size_t)nt;
    *hi = n * (size_t)(tid + 1) / (size_t)nt;
}

typedef struct {
    void (*fn)(void *, size_t, size_t);
    void *ctx;
    size_t n, piece;
    size_t next; /* the next piece (threads take pieces as they finish) */
} RangeJob;

static void range_job(void *arg, int tid, int nt)
{
    (void)tid;
    (void)nt;
    RangeJob *r = arg;
    for (;;) {
        size_t lo = __atomic_fetch_add(&r->next, r->piece, __ATOMIC_RELAXED);
        if (lo >= r->n)
            return;
        r->fn(r->ctx, lo, lo + r->piece < r->n ? lo + r->piece : r->n);
    }
}

/* Pieces of `align` units (a multiple of it): about 4 per thread, so a
 * thread that the OS preempts delays the job by a quarter of its share. */
static void run_ranges(size_t n, size_t align, size_t work_per_unit, size_t min_work,
                       void (*fn)(void *, size_t, size_t), void *ctx)
{
    int nt = rt__threads();
    if (n == 0)
        return;
    if (nt > 1) {
        size_t by_work = n * work_per_unit / min_work;
        if (by_work < (size_t)nt)
            nt = (int)by_work;
    }
    if (nt <= 1) {
        fn(ctx, 0, n);
        return;
    }
    size_t units = (n + align - 1) / align;
    size_t pieces = 4 * (size_t)nt, per = (units + pieces - 1) / pieces;
    RangeJob r = {fn, ctx, n, per * align, 0};
    rt__parallel(nt, range_job, &r);
}

void rt__parallel_range(size_t n, void (*fn)(void *ctx, size_t lo, size_t hi), void *ctx)
{
    run_ranges(n, RT_CHUNK, 1, RT_PAR_MIN, fn, ctx);
}

void rt__parallel_items(size_t n, size_t work_per_item,
                        void (*fn)(void *ctx, size_t lo, size_t hi), void *ctx)
{
    run_ranges(n, 1, work_per_item ? work_per_item : 1, RT_PAR_MIN, fn, ctx);
}
