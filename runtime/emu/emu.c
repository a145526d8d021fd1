/*
 * emu.c - the CUDA emulator (emu.h; docs/backend-cuda.md, "The emulator").
 *
 * Launch: blocks one after another in the schedule's order (seeded
 * permutation, forward or reverse); in a block every CUDA thread is a
 * fiber (ucontext; annotated for AddressSanitizer) and the scheduler picks
 * the next runnable thread at random (seeded) or by index.  A thread runs
 * until it waits at a barrier or warp primitive, yields before an atomic,
 * or ends; a thread that ends lets the scheduler start the next one on the
 * same fiber, so a kernel without barriers costs one fiber per block.
 * When no thread can run and some have not ended, a barrier or warp
 * primitive will never complete: the launch fails naming the call sites
 * and the threads at each, never hangs.
 *
 * Memory: device buffers live in one memfd mapped twice, the view kernels
 * get (PROT_NONE while a launch runs, so a raw pointer faults) and the
 * checker's.  Every ampc_dptr access calls ampc_emu_access, which finds
 * the buffer (or the block's shared declaration), checks bounds and
 * alignment, and keeps per byte one write and two read stamps (launch,
 * block, thread, barrier generation, warp clock) to find races: two
 * accesses, one a write, not both atomic, from two blocks of a launch, or
 * from two threads of a block with no __syncthreads between them (or, in
 * one warp, no __syncwarp naming both).  Shared memory is a 48 KiB arena
 * per block (plus the dynamic size), poisoned at the block's start; a read
 * of a byte no thread of the block wrote fails.  Float atomic adds are
 * logged per address and replayed in thread order when the value is next
 * read (or the block or launch ends): a different result fails, unless the
 * kernel declared itself nondeterministic.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create, MADV_REMOVE */
#endif
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "emu/emu.h"
#include "cuda/rt_cuda.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#define EMU_SHARED_STATIC (48u << 10) /* __shared__ per block (the default limit) */
#define EMU_MAX_THREADS 1024
#define EMU_HEAP_SPAN ((size_t)32 << 30) /* address space for every buffer of a run */
#define EMU_STACK ((size_t)256 << 10)
#define EMU_PAGE ((size_t)4096)

const char *const ampc_emu_flop_names[AMPC_EMU_NFLOP] = {
    "f32_add", "f32_mul", "f32_div",  "f32_sqrt", "f32_func", "f32_cmp", "f64_add",
    "f64_mul", "f64_div", "f64_sqrt", "f64_func", "f64_cmp",  "cvt"};

AmpcEmuDim3 ampc_emu_thread_idx, ampc_emu_block_idx, ampc_emu_block_dim, ampc_emu_grid_dim;
static uint64_t flop_sink[AMPC_EMU_NFLOP];
uint64_t *ampc_emu_flop_count = flop_sink;

/* ---- stamps: who touched a byte, and when --------------------------------------------- */

enum { ST_ATOMIC = 1, ST_FLOG = 2 };

typedef struct {
    uint32_t epoch; /* the launch (global) or block run (shared); 0: none */
    uint32_t block; /* linear block index */
    uint32_t gen;   /* __syncthreads the thread had passed */
    uint32_t clk;   /* its own warp clock */
    uint16_t tid;   /* linear thread index */
    uint16_t flags;
} Stamp;

typedef struct {
    Stamp w, r1, r2; /* the last write; two reads not ordered before later ones */
} Cell;

/* ---- device memory --------------------------------------------------------------------- */

typedef struct {
    char *base;
    size_t bytes, span; /* span: page-rounded, what the heap gave */
    char name[40];
    long id;
    bool freed;
    Cell *cells; /* lazily, one per byte */
} Buf;

static struct {
    char *dev, *alias; /* the kernels' view and the checker's */
    size_t used;
    Buf *bufs; /* by address (the heap only grows) */
    size_t n, cap;
} heap;

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("emu: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void heap_init(void)
{
    if (heap.dev)
        return;
    int fd = memfd_create("ampc-emu-device", 0);
    if (fd < 0 || ftruncate(fd, (off_t)EMU_HEAP_SPAN) != 0)
        die("cannot make the device heap (memfd_create/ftruncate): %s", strerror(errno));
    void *a = mmap(NULL, EMU_HEAP_SPAN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    void *b = mmap(NULL, EMU_HEAP_SPAN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (a == MAP_FAILED || b == MAP_FAILED)
        die("cannot map the device heap: %s", strerror(errno));
    close(fd); /* the mappings keep it */
    heap.dev = a;
    heap.alias = b;
}

void *ampc_emu_malloc(size_t bytes, const char *name)
{
    static long ids;
    heap_init();
    /* a page beyond the last, so p + n of a buffer is still that buffer's (out of bounds) */
    size_t span = (bytes + EMU_PAGE - 1) / EMU_PAGE * EMU_PAGE + EMU_PAGE;
    if (bytes > EMU_HEAP_SPAN || span > EMU_HEAP_SPAN - heap.used)
        die("device heap exhausted: %zu bytes for '%s' after %zu", bytes, name ? name : "?",
            heap.used);
    if (heap.n == heap.cap) {
        heap.cap = heap.cap ? 2 * heap.cap : 256;
        heap.bufs = realloc(heap.bufs, heap.cap * sizeof *heap.bufs);
        if (!heap.bufs)
            die("out of memory");
    }
    Buf *b = &heap.bufs[heap.n++];
    memset(b, 0, sizeof *b);
    b->base = heap.dev + heap.used;
    b->bytes = bytes;
    b->span = span;
    b->id = ++ids;
    snprintf(b->name, sizeof b->name, "%s", name ? name : "buffer");
    heap.used += span;
    memset(b->base, 0xa5, bytes);
#ifdef EMU_ASAN
    /* the host may not run past the end either (the checker's view is apart) */
    size_t end = (bytes + 7) / 8 * 8;
    ASAN_POISON_MEMORY_REGION(b->base + end, span - end);
#endif
    return b->base;
}

/* the buffer at or below p (freed ones too), or NULL: a buffer owns whole
 * pages, so a page's buffer is cached */
static Buf *heap_find(const char *p)
{
    static struct {
        size_t page, buf; /* page + 1: 0 is empty */
    } cache[1024];
    if (!heap.n || p < heap.dev || p >= heap.dev + heap.used)
        return NULL;
    size_t page = (size_t)(p - heap.dev) / EMU_PAGE, slot = page % 1024;
    if (cache[slot].page == page + 1 && cache[slot].buf < heap.n)
        return &heap.bufs[cache[slot].buf];
    size_t lo = 0, hi = heap.n;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (heap.bufs[mid].base <= p)
            lo = mid;
        else
            hi = mid;
    }
    cache[slot].page = page + 1;
    cache[slot].buf = lo;
    return &heap.bufs[lo];
}

void ampc_emu_free(void *p)
{
    if (!p)
        return;
    Buf *b = heap_find(p);
    if (!b || b->base != p || b->freed)
        die("ampc_emu_free(%p): not a live device buffer", p);
    b->freed = true;
#ifdef EMU_ASAN
    ASAN_UNPOISON_MEMORY_REGION(b->base, b->span);
#endif
    free(b->cells);
    b->cells = NULL;
    /* give the pages back; the addresses are never reused, so a late access names it */
    madvise(b->base, b->span, MADV_REMOVE);
}

/* ---- configuration ----------------------------------------------------------------------- */

static struct {
    AmpcEmuOrder order;
    uint64_t seed;
    long pass_launches; /* launches since the schedule was set: the seeded choices' input */
    unsigned grid_cap;
    AmpcEmuFailFn fail_fn;
    void *fail_ctx;
    AmpcEmuLaunchFn launch_fn;
    void *launch_ctx;
    char name[40];
} cfg = {AMPC_EMU_SEEDED, 1, 0, 3, NULL, NULL, NULL, NULL, "seed:1"};

void ampc_emu_schedule(AmpcEmuOrder order, uint64_t seed)
{
    cfg.order = order;
    cfg.seed = seed;
    cfg.pass_launches = 0;
    if (order == AMPC_EMU_SEEDED)
        snprintf(cfg.name, sizeof cfg.name, "seed:%llu", (unsigned long long)seed);
    else
        snprintf(cfg.name, sizeof cfg.name, "%s",
                 order == AMPC_EMU_FORWARD ? "forward" : "reverse");
}

const char *ampc_emu_schedule_name(void) { return cfg.name; }

/* AMPC_EMU_SCHEDULE: seed:N, forward or reverse; false when unset */
static bool schedule_from_env(AmpcEmuOrder *order, uint64_t *seed)
{
    const char *s = getenv("AMPC_EMU_SCHEDULE");
    if (!s || !*s)
        return false;
    char *end;
    if (!strncmp(s, "seed:", 5)) {
        *order = AMPC_EMU_SEEDED;
        *seed = strtoull(s + 5, &end, 0);
        if (*end || end == s + 5)
            die("AMPC_EMU_SCHEDULE=%s: expected seed:N, forward or reverse", s);
    } else if (!strcmp(s, "forward") || !strcmp(s, "reverse")) {
        *order = s[0] == 'f' ? AMPC_EMU_FORWARD : AMPC_EMU_REVERSE;
        *seed = 0;
    } else {
        die("AMPC_EMU_SCHEDULE=%s: expected seed:N, forward or reverse", s);
    }
    return true;
}

int ampc_emu_pass(int pass)
{
    AmpcEmuOrder order;
    uint64_t seed;
    if (schedule_from_env(&order, &seed)) {
        if (pass > 0)
            return 0;
    } else {
        if (pass > 2)
            return 0;
        order = pass == 2 ? AMPC_EMU_REVERSE : AMPC_EMU_SEEDED;
        seed = (uint64_t)pass + 1;
    }
    ampc_emu_schedule(order, seed);
    return 1;
}

unsigned ampc_emu_grid_cap(void) { return cfg.grid_cap; }
void ampc_emu_set_grid_cap(unsigned cap) { cfg.grid_cap = cap ? cap : 1; }

void ampc_emu_on_failure(AmpcEmuFailFn fn, void *ctx)
{
    cfg.fail_fn = fn;
    cfg.fail_ctx = ctx;
}

void ampc_emu_on_launch(AmpcEmuLaunchFn fn, void *ctx)
{
    cfg.launch_fn = fn;
    cfg.launch_ctx = ctx;
}

/* ---- the launch, the block, the threads --------------------------------------------------- */

enum { T_FRESH, T_READY, T_RUN, T_WAIT, T_DONE };
enum { W_BAR = -1 }; /* wop of a thread at __syncthreads; else AMPC_EMU_SYNCWARP, ... */

typedef struct Fiber Fiber;

typedef struct {
    uint32_t tid;
    AmpcEmuDim3 idx;
    int state;
    Fiber *fiber;
    uint32_t gen;    /* __syncthreads passed */
    uint32_t vc[32]; /* the warp's vector clock as this lane knows it */
    /* where it waits */
    int wop;
    const char *wfile;
    int wline;
    unsigned wmask;
    uint64_t wvalue, wresult;
    int warg, wwidth;
    uint64_t loads;
} Thr;

struct Fiber {
    ucontext_t uc;
    char *stack;
    Thr *thr;
    Fiber *next_free;
};

typedef struct {
    const void *tag;
    size_t off, bytes;
    const char *name, *file;
    int line;
} SharedDecl;

typedef struct {
    char *addr;
    int type;
    uint64_t init;
    size_t n, cap;
    struct FlogItem {
        uint32_t block, tid;
        uint64_t seq, v; /* seq: the order they ran */
    } * items;
} Flog;

static struct {
    bool active;
    const char *kernel;
    AmpcEmuDim3 grid, block;
    size_t dyn;
    void (*run)(void *);
    void *arg;
    uint32_t epoch;
    AmpcEmuCounts counts;
    bool failed, nondet;
    char msg[4096];
    uint64_t rng;
    /* shared memory */
    char *arena;
    Cell *arena_cells;
    size_t arena_size;
    SharedDecl decls[64];
    int ndecl;
    size_t static_used, static_max;
    const char *dyn_name;
    /* float atomic add logs */
    Flog *flogs;
    size_t nflog, capflog;
} L;

static struct {
    uint32_t index, n, ndone;
    AmpcEmuDim3 idx;
    Thr *thr;
    uint32_t *fresh, nfresh;
    uint32_t *ready, nready;
    uint32_t bar_count;
    const char *bar_file;
    int bar_line;
    uint32_t shared_epoch;
} B;

static long launch_count, last_status;
static uint32_t shared_runs;
static Thr *cur;
static Fiber *fibers_free, *fiber_starting;
static Fiber **fibers_all;
static size_t nfibers;
static ucontext_t main_uc;
#ifdef EMU_ASAN
static const void *main_bottom;
static size_t main_size;
static bool from_main;
#endif

static uint64_t rng_next(void)
{
    uint64_t z = (L.rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- failure messages ----------------------------------------------------------------- */

static void fail_return(void);

/* "block 1 thread 37 (warp 1 lane 5)" */
static void thread_name(char *s, size_t n, uint32_t block, uint32_t tid)
{
    snprintf(s, n, "block %u thread %u (warp %u lane %u)", block, tid, tid / 32, tid % 32);
}

/* Records the failure of the running launch (the first one wins) and
 * leaves the launch: from a fiber it never returns. */
static void fail(const char *fmt, ...)
{
    if (!L.failed) {
        int k = snprintf(L.msg, sizeof L.msg,
                         "emu: kernel %s (launch %ld: grid %ux%ux%u, block %ux%ux%u; schedule %s, "
                         "rerun with AMPC_EMU_SCHEDULE=%s): ",
                         L.kernel, launch_count, L.grid.x, L.grid.y, L.grid.z, L.block.x, L.block.y,
                         L.block.z, cfg.name, cfg.name);
        va_list ap;
        va_start(ap, fmt);
        if (k > 0 && (size_t)k < sizeof L.msg)
            vsnprintf(L.msg + k, sizeof L.msg - (size_t)k, fmt, ap);
        va_end(ap);
        L.failed = true;
    }
    fail_return();
}

/* ---- fibers ------------------------------------------------------------------------------- */

static void fiber_entry(void);

static Fiber *fiber_get(void)
{
    Fiber *f = fibers_free;
    if (f) {
        fibers_free = f->next_free;
    } else {
        f = calloc(1, sizeof *f);
        char *m = mmap(NULL, EMU_STACK + EMU_PAGE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (!f || m == MAP_FAILED)
            die("out of memory for a fiber's stack");
        mprotect(m, EMU_PAGE, PROT_NONE); /* a guard below the stack */
        f->stack = m + EMU_PAGE;
        Fiber **all = realloc(fibers_all, (nfibers + 1) * sizeof *all);
        if (!all)
            die("out of memory");
        fibers_all = all;
        fibers_all[nfibers++] = f;
    }
    f->next_free = NULL;
#ifdef EMU_ASAN
    /* frames a fiber left (it switched away for good) keep their redzones */
    ASAN_UNPOISON_MEMORY_REGION(f->stack, EMU_STACK);
#endif
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack;
    f->uc.uc_stack.ss_size = EMU_STACK;
    f->uc.uc_link = NULL;
    makecontext(&f->uc, fiber_entry, 0);
    return f;
}

static void fiber_put(Fiber *f)
{
    f->thr = NULL;
    f->next_free = fibers_free;
    fibers_free = f;
}

/* Switches from `from` to `to` (main_uc when to is NULL); dying: `from`
 * is never resumed (its fake stack may go). */
static void switch_to(ucontext_t *from, Fiber *to, bool dying)
{
#ifdef EMU_ASAN
    void *fake = NULL;
    const void *bottom = to ? (const void *)to->stack : main_bottom;
    size_t size = to ? EMU_STACK : main_size;
    from_main = from == &main_uc;
    __sanitizer_start_switch_fiber(dying ? NULL : &fake, bottom, size);
#else
    (void)dying;
#endif
    if (to)
        fiber_starting = to;
    swapcontext(from, to ? &to->uc : &main_uc);
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
}

static void set_current(Thr *t)
{
    cur = t;
    ampc_emu_thread_idx = t->idx;
    t->state = T_RUN;
}

/* ---- picking the next thread ------------------------------------------------------------ */

/* A thread to run next (fresh or ready), taken off its list, or NULL. */
static Thr *pick(void)
{
    uint32_t nr = B.nready, nf = B.nfresh;
    if (!nr && !nf)
        return NULL;
    if (cfg.order == AMPC_EMU_SEEDED) {
        uint32_t k = (uint32_t)(rng_next() % (nr + nf));
        if (k < nr) {
            uint32_t t = B.ready[k];
            B.ready[k] = B.ready[--B.nready];
            return &B.thr[t];
        }
        k -= nr;
        uint32_t t = B.fresh[k];
        B.fresh[k] = B.fresh[--B.nfresh];
        return &B.thr[t];
    }
    /* by index: the fresh list is kept so its end is next; ready ones by scan */
    bool fwd = cfg.order == AMPC_EMU_FORWARD;
    uint32_t best = UINT32_MAX, at = 0;
    for (uint32_t i = 0; i < nr; i++)
        if (best == UINT32_MAX || (fwd ? B.ready[i] < best : B.ready[i] > best))
            best = B.ready[i], at = i;
    if (nf && (best == UINT32_MAX || (fwd ? B.fresh[nf - 1] < best : B.fresh[nf - 1] > best)))
        return &B.thr[B.fresh[--B.nfresh]];
    B.ready[at] = B.ready[--B.nready];
    return &B.thr[best];
}

static void make_ready(Thr *t)
{
    t->state = T_READY;
    B.ready[B.nready++] = t->tid;
}

static void deadlock(void);

/* cur waits (T_WAIT) or yields (T_READY, already listed): run something
 * else until cur is picked again. */
static void wait_here(void)
{
    Thr *self = cur;
    Fiber *f = self->fiber;
    Thr *n = pick();
    if (!n)
        deadlock();
    if (n == self) {
        set_current(self);
        return;
    }
    if (n->state == T_FRESH) {
        Fiber *nf = fiber_get();
        nf->thr = n;
        switch_to(&f->uc, nf, false);
    } else {
        switch_to(&f->uc, n->fiber, false);
    }
    set_current(self); /* resumed: whoever switched here picked this thread */
}

static void thread_done(Thr *t)
{
    t->state = T_DONE;
    t->fiber = NULL;
    B.ndone++;
    if (t->loads > L.counts.max_thread_loads)
        L.counts.max_thread_loads = t->loads;
}

static void fiber_entry(void)
{
    Fiber *f = fiber_starting;
#ifdef EMU_ASAN
    const void *bottom;
    size_t size;
    __sanitizer_finish_switch_fiber(NULL, &bottom, &size);
    if (from_main)
        main_bottom = bottom, main_size = size;
#endif
    for (;;) {
        Thr *t = f->thr;
        t->fiber = f;
        set_current(t);
        L.run(L.arg);
        thread_done(t);
        cur = NULL;
        Thr *n = pick();
        if (n && n->state == T_FRESH) {
            f->thr = n; /* started here, no switch */
            continue;
        }
        fiber_put(f);
        if (!n) {
            if (B.ndone != B.n)
                deadlock();
            switch_to(&f->uc, NULL, true); /* the block is done */
        } else {
            switch_to(&f->uc, n->fiber, true);
        }
        /* never resumed: a reused fiber starts over (fiber_get) */
    }
}

/* back to the launch (from a fiber, for good) */
static void fail_return(void)
{
    if (cur && cur->fiber) {
        Fiber *f = cur->fiber;
        cur = NULL;
        switch_to(&f->uc, NULL, true);
    }
    cur = NULL;
}

/* "0-27, 31, 40-63" */
static void ranges(char *s, size_t n, const uint32_t *t, uint32_t k)
{
    size_t at = 0;
    s[0] = 0;
    for (uint32_t i = 0; i < k && at + 24 < n;) {
        uint32_t j = i;
        while (j + 1 < k && t[j + 1] == t[j] + 1)
            j++;
        at += (size_t)snprintf(s + at, n - at, "%s%u", i ? ", " : "", t[i]);
        if (j > i)
            at += (size_t)snprintf(s + at, n - at, "-%u", t[j]);
        i = j + 1;
    }
}

static const char *wop_name(int op)
{
    static const char *const names[] = {"__syncwarp",       "__shfl_sync",     "__shfl_up_sync",
                                        "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync",
                                        "__any_sync",       "__all_sync"};
    return op == W_BAR ? "__syncthreads" : names[op];
}

/* No thread can run and some have not ended: name every call site where
 * threads wait, and the threads that ended. */
static void deadlock(void)
{
    static char msg[3000], list[1200];
    static uint32_t ids[EMU_MAX_THREADS];
    bool seen[EMU_MAX_THREADS];
    memset(seen, 0, sizeof seen);
    size_t at = (size_t)snprintf(
        msg, sizeof msg, "block %u: a barrier or warp primitive is never completed:", B.index);
    for (uint32_t i = 0; i < B.n; i++) {
        Thr *t = &B.thr[i];
        if (t->state != T_WAIT || seen[i])
            continue;
        uint32_t k = 0;
        for (uint32_t j = i; j < B.n; j++) {
            Thr *u = &B.thr[j];
            if (u->state == T_WAIT && !seen[j] && u->wop == t->wop && u->wline == t->wline &&
                !strcmp(u->wfile, t->wfile) && (t->wop == W_BAR || u->wmask == t->wmask)) {
                seen[j] = true;
                ids[k++] = j;
            }
        }
        ranges(list, sizeof list, ids, k);
        if (t->wop == W_BAR)
            at += (size_t)snprintf(msg + at, sizeof msg - at,
                                   " %s at %s:%d waits with threads %s (%u of %u);",
                                   wop_name(t->wop), t->wfile, t->wline, list, k, B.n);
        else
            at += (size_t)snprintf(msg + at, sizeof msg - at,
                                   " %s(0x%08x) at %s:%d waits with threads %s;", wop_name(t->wop),
                                   t->wmask, t->wfile, t->wline, list);
        if (at >= sizeof msg)
            break;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < B.n; i++)
        if (B.thr[i].state == T_DONE)
            ids[k++] = i;
    if (k) {
        ranges(list, sizeof list, ids, k);
        snprintf(msg + (at < sizeof msg ? at : sizeof msg - 1),
                 sizeof msg - (at < sizeof msg ? at : sizeof msg - 1),
                 " threads %s returned without reaching it", list);
    } else {
        snprintf(msg + (at < sizeof msg ? at : sizeof msg - 1),
                 sizeof msg - (at < sizeof msg ? at : sizeof msg - 1),
                 " the threads disagree on the call site or the mask");
    }
    fail("%s", msg);
}

/* ---- stamps and races ------------------------------------------------------------------- */

/* Did the access s happen before what the running thread does now? */
static inline bool ordered(const Stamp *s, const Thr *u)
{
    if (s->block != B.index)
        return false; /* two blocks of one launch are never ordered */
    if (s->tid == u->tid || s->gen < u->gen)
        return true;
    return s->tid / 32 == u->tid / 32 && u->vc[s->tid % 32] >= s->clk;
}

static Stamp stamp_now(uint32_t epoch, uint16_t flags)
{
    Stamp s;
    s.epoch = epoch;
    s.block = B.index;
    s.gen = cur->gen;
    s.clk = cur->vc[cur->tid % 32];
    s.tid = (uint16_t)cur->tid;
    s.flags = flags;
    return s;
}

typedef struct {
    bool shared;
    const char *name; /* the buffer or declaration */
    const char *file; /* shared: where declared */
    int line;
    char *base; /* its first byte */
    size_t bytes;
    Cell *cells; /* its bytes' cells */
    uint32_t epoch;
} Region;

static const char *kind_name(int kind)
{
    return kind == AMPC_EMU_LOAD    ? "loads"
           : kind == AMPC_EMU_STORE ? "stores"
                                    : "atomically updates";
}

static void where(char *s, size_t n, const Region *r, size_t off)
{
    if (r->shared)
        snprintf(s, n, "shared '%s' (%zu bytes, declared at %s:%d) at byte %zu", r->name, r->bytes,
                 r->file, r->line, off);
    else
        snprintf(s, n, "buffer '%s' (%zu bytes) at byte %zu", r->name, r->bytes, off);
}

static void race(const Region *r, size_t off, const Stamp *prev, int prev_kind, int kind)
{
    char w[200], a[80], b[80];
    where(w, sizeof w, r, off);
    thread_name(a, sizeof a, B.index, cur->tid);
    thread_name(b, sizeof b, prev->block, prev->tid);
    const char *why = prev->block != B.index ? "two blocks of one launch are never ordered"
                      : prev->tid / 32 == cur->tid / 32
                          ? "the same warp with no __syncwarp or __syncthreads between (lanes are "
                            "not in lockstep)"
                          : "no __syncthreads between";
    fail("race on %s: %s %s it, %s %s it earlier: %s", w, a, kind_name(kind), b,
         prev_kind == AMPC_EMU_LOAD    ? "loaded"
         : prev_kind == AMPC_EMU_STORE ? "stored"
                                       : "atomically updated",
         why);
}

static inline bool live(const Stamp *s, uint32_t epoch) { return s->epoch == epoch; }

static void flog_check_at(char *addr, size_t size, const Region *r);

enum { K_ATOMIC = 2 };

/* one byte's cell: check against what came before, then stamp it (s: the
 * running thread's stamp, without flags) */
static inline void touch(Cell *c, const Region *r, size_t off, int kind, const Stamp *s)
{
    uint32_t ep = r->epoch;
    bool atomic = kind == K_ATOMIC;
    if (live(&c->w, ep) && !ordered(&c->w, cur) && !(atomic && (c->w.flags & ST_ATOMIC)))
        race(r, off, &c->w, (c->w.flags & ST_ATOMIC) ? K_ATOMIC : AMPC_EMU_STORE, kind);
    if (kind == AMPC_EMU_LOAD) {
        if (!live(&c->r1, ep) || (c->r1.tid == s->tid && c->r1.block == s->block) ||
            ordered(&c->r1, cur)) {
            c->r1 = *s;
            if (live(&c->r2, ep) && ordered(&c->r2, cur))
                c->r2.epoch = 0;
        } else {
            c->r2 = *s;
        }
        return;
    }
    const Stamp *rd[2] = {&c->r1, &c->r2};
    for (int i = 0; i < 2; i++)
        if (live(rd[i], ep) && !ordered(rd[i], cur) && !(atomic && (rd[i]->flags & ST_ATOMIC)))
            race(r, off, rd[i], (rd[i]->flags & ST_ATOMIC) ? K_ATOMIC : AMPC_EMU_LOAD, kind);
    if (atomic) {
        /* keep an earlier unordered atomic writer, so a plain access later races with it too */
        if (live(&c->w, ep) && (c->w.flags & ST_ATOMIC) && !ordered(&c->w, cur))
            c->r2 = c->w;
        else if (live(&c->r2, ep) && ordered(&c->r2, cur))
            c->r2.epoch = 0;
        if (live(&c->r1, ep) && ordered(&c->r1, cur))
            c->r1.epoch = 0;
        c->w = *s;
        c->w.flags = ST_ATOMIC;
    } else {
        c->r1.epoch = c->r2.epoch = 0;
        c->w = *s;
    }
}

/* ---- finding what an address is ----------------------------------------------------------- */

static bool shared_region(char *p, Region *r)
{
    if (!L.arena || p < L.arena || p >= L.arena + L.arena_size)
        return false;
    size_t off = (size_t)(p - L.arena);
    memset(r, 0, sizeof *r);
    r->shared = true;
    r->epoch = B.shared_epoch;
    if (off >= EMU_SHARED_STATIC) {
        r->name = L.dyn_name ? L.dyn_name : "extern __shared__";
        r->file = "the launch's dynamic size";
        r->base = L.arena + EMU_SHARED_STATIC;
        r->bytes = L.dyn;
    } else {
        /* the declaration holding p, or the one below it (past its end) */
        const SharedDecl *d = NULL;
        for (int i = 0; i < L.ndecl; i++)
            if (L.decls[i].off <= off && (!d || L.decls[i].off > d->off))
                d = &L.decls[i];
        if (!d) {
            r->name = "(no declaration)";
            r->file = "?";
            r->base = L.arena;
            r->bytes = 0;
        } else {
            r->name = d->name;
            r->file = d->file;
            r->line = d->line;
            r->base = L.arena + d->off;
            r->bytes = d->bytes;
        }
    }
    r->cells = L.arena_cells + (r->base - L.arena);
    return true;
}

static void global_region(const char *p, size_t size, Region *r)
{
    Buf *b = heap_find(p);
    if (!b || b->freed) {
        char a[80];
        thread_name(a, sizeof a, B.index, cur ? cur->tid : 0);
        if (!b)
            fail("%s accesses %zu bytes at %p, which is no device memory (a host pointer?)", a,
                 size, (const void *)p);
        fail("%s accesses buffer '%s' (%zu bytes) at byte %zu after ampc_emu_free", a, b->name,
             b->bytes, (size_t)(p - b->base));
    }
    if (!b->cells) {
        b->cells = calloc(b->bytes ? b->bytes : 1, sizeof(Cell));
        if (!b->cells)
            die("out of memory for the race checker's cells of '%s'", b->name);
    }
    memset(r, 0, sizeof *r);
    r->name = b->name;
    r->base = b->base;
    r->bytes = b->bytes;
    r->cells = b->cells;
    r->epoch = L.epoch;
}

static void *access_checked(const void *p, size_t size, size_t align, int kind)
{
    char *q = (char *)p;
    Region r;
    char w[200], a[80];
    bool shared = shared_region(q, &r);
    if (!shared)
        global_region(q, size, &r);
    size_t off = (size_t)(q - r.base);
    const char *what = kind == AMPC_EMU_LOAD ? "load" : kind == AMPC_EMU_STORE ? "store" : "atomic";
    if (q < r.base || off + size > r.bytes) {
        thread_name(a, sizeof a, B.index, cur->tid);
        where(w, sizeof w, &r, off);
        fail("out of bounds: %s: a %zu-byte %s by %s (the %s ends at byte %zu)", w, size, what, a,
             shared ? "declaration" : "buffer", r.bytes);
    }
    if (align > 1 && (uintptr_t)q % align) {
        thread_name(a, sizeof a, B.index, cur->tid);
        where(w, sizeof w, &r, off);
        fail("misaligned %zu-byte %s: %s (address %% %zu = %zu) by %s", size, what, w, align,
             (size_t)((uintptr_t)q % align), a);
    }
    Cell *c = r.cells + off;
    Stamp now = stamp_now(r.epoch, 0);
    for (size_t i = 0; i < size; i++) {
        if (!live(&c[i].w, r.epoch)) {
            if (shared && kind != AMPC_EMU_STORE) { /* a load or an atomic's read */
                thread_name(a, sizeof a, B.index, cur->tid);
                where(w, sizeof w, &r, off + i);
                fail("read of shared memory never written: %s, by %s (no thread of block %u "
                     "stored it)",
                     w, a, B.index);
            }
        } else if ((c[i].w.flags & ST_FLOG) && kind != K_ATOMIC) {
            flog_check_at(q, size, &r); /* a plain access reads or replaces the float adds' sum */
        }
        touch(&c[i], &r, off + i, kind, &now);
    }
    size_t units = (size + 15) / 16;
    if (shared) {
        if (kind != AMPC_EMU_STORE)
            L.counts.shared_read_bytes += size;
        if (kind != AMPC_EMU_LOAD)
            L.counts.shared_write_bytes += size;
        return q;
    }
    if (kind == AMPC_EMU_LOAD) {
        L.counts.global_read_bytes += size;
        L.counts.global_loads += units;
        cur->loads += units;
    } else if (kind == AMPC_EMU_STORE) {
        L.counts.global_write_bytes += size;
        L.counts.global_stores += units;
    } else {
        L.counts.global_read_bytes += size;
        L.counts.global_write_bytes += size;
    }
    return heap.alias + (q - heap.dev);
}

void *ampc_emu_access(const void *p, size_t size, size_t align, int kind)
{
    if (!L.active || !cur)
        return (void *)p;
    return access_checked(p, size, align, kind);
}

/* ---- atomics and the float add logs -------------------------------------------------------- */

static uint64_t atomic_apply(int type, int op, uint64_t old, uint64_t v, uint64_t cmp)
{
    float fo, fv;
    double dO, dv;
    int32_t io = (int32_t)(uint32_t)old, iv = (int32_t)(uint32_t)v;
    int64_t lo = (int64_t)old, lv = (int64_t)v;
    uint32_t uo = (uint32_t)old, uv = (uint32_t)v;
    switch (type) {
    case AMPC_EMU_T_F32: {
        uint32_t b = (uint32_t)old, c = (uint32_t)v;
        memcpy(&fo, &b, 4);
        memcpy(&fv, &c, 4);
        if (op == AMPC_EMU_ATOM_ADD)
            fo = fo + fv;
        else if (op == AMPC_EMU_ATOM_EXCH)
            fo = fv;
        memcpy(&b, &fo, 4);
        return b;
    }
    case AMPC_EMU_T_F64:
        memcpy(&dO, &old, 8);
        memcpy(&dv, &v, 8);
        if (op == AMPC_EMU_ATOM_ADD)
            dO = dO + dv;
        else if (op == AMPC_EMU_ATOM_EXCH)
            dO = dv;
        memcpy(&old, &dO, 8);
        return old;
    default: break;
    }
    bool is64 = type == AMPC_EMU_U64 || type == AMPC_EMU_I64;
    uint64_t r;
    switch (op) {
    case AMPC_EMU_ATOM_ADD: r = old + v; break;
    case AMPC_EMU_ATOM_SUB: r = old - v; break;
    case AMPC_EMU_ATOM_EXCH: r = v; break;
    case AMPC_EMU_ATOM_AND: r = old & v; break;
    case AMPC_EMU_ATOM_OR: r = old | v; break;
    case AMPC_EMU_ATOM_XOR: r = old ^ v; break;
    case AMPC_EMU_ATOM_CAS:
        r = (is64 ? old : (uint32_t)old) == (is64 ? cmp : (uint32_t)cmp) ? v : old;
        break;
    case AMPC_EMU_ATOM_INC: r = uo >= uv ? 0 : uo + 1; break;
    case AMPC_EMU_ATOM_DEC: r = (uo == 0 || uo > uv) ? uv : uo - 1; break;
    case AMPC_EMU_ATOM_MIN:
    case AMPC_EMU_ATOM_MAX: {
        bool less = type == AMPC_EMU_I32   ? io < iv
                    : type == AMPC_EMU_I64 ? lo < lv
                    : type == AMPC_EMU_U32 ? uo < uv
                                           : old < v;
        r = (op == AMPC_EMU_ATOM_MIN) == less ? old : v;
        break;
    }
    default: r = old; break;
    }
    return is64 ? r : (uint32_t)r;
}

static Flog *flog_for(char *addr, int type, uint64_t old)
{
    for (size_t i = 0; i < L.nflog; i++)
        if (L.flogs[i].addr == addr)
            return &L.flogs[i];
    if (L.nflog == L.capflog) {
        L.capflog = L.capflog ? 2 * L.capflog : 16;
        L.flogs = realloc(L.flogs, L.capflog * sizeof *L.flogs);
        if (!L.flogs)
            die("out of memory");
    }
    Flog *g = &L.flogs[L.nflog++];
    memset(g, 0, sizeof *g);
    g->addr = addr;
    g->type = type;
    g->init = old;
    return g;
}

static void flog_add(Flog *g, uint64_t v)
{
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 8;
        g->items = realloc(g->items, g->cap * sizeof *g->items);
        if (!g->items)
            die("out of memory");
    }
    g->items[g->n].block = B.index;
    g->items[g->n].tid = cur->tid;
    g->items[g->n].seq = g->n;
    g->items[g->n].v = v;
    g->n++;
}

static int flog_cmp(const void *a, const void *b)
{
    const struct FlogItem *x = a, *y = b;
    if (x->block != y->block)
        return x->block < y->block ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq; /* one thread's adds stay in its order */
}

static uint64_t flog_fold(const Flog *g, const struct FlogItem *it, bool backwards)
{
    uint64_t r = g->init;
    for (size_t i = 0; i < g->n; i++)
        r = atomic_apply(g->type, AMPC_EMU_ATOM_ADD, r, it[backwards ? g->n - 1 - i : i].v, 0);
    return r;
}

static bool same_value(int type, uint64_t a, uint64_t b)
{
    if (a == b)
        return true;
    if (type == AMPC_EMU_T_F32) {
        float x, y;
        uint32_t p = (uint32_t)a, q = (uint32_t)b;
        memcpy(&x, &p, 4);
        memcpy(&y, &q, 4);
        return x != x && y != y;
    }
    double x, y;
    memcpy(&x, &a, 8);
    memcpy(&y, &b, 8);
    return x != x && y != y;
}

static double as_double(int type, uint64_t b)
{
    if (type == AMPC_EMU_T_F32) {
        float f;
        uint32_t u = (uint32_t)b;
        memcpy(&f, &u, 4);
        return f;
    }
    double d;
    memcpy(&d, &b, 8);
    return d;
}

/* Does the log's sum depend on the order?  Replays it in the order it
 * ran, in thread order and backwards. */
static void flog_eval(Flog *g, const Region *r)
{
    if (L.nondet || g->n < 2)
        return;
    struct FlogItem *sorted = malloc(g->n * sizeof *sorted);
    if (!sorted)
        die("out of memory");
    memcpy(sorted, g->items, g->n * sizeof *sorted);
    qsort(sorted, g->n, sizeof *sorted, flog_cmp);
    uint64_t ran = flog_fold(g, g->items, false), fwd = flog_fold(g, sorted, false),
             back = flog_fold(g, sorted, true);
    if (same_value(g->type, ran, fwd) && same_value(g->type, ran, back)) {
        free(sorted);
        return;
    }
    /* two adds that ran against thread order (or the first two, when the
     * backward replay is what differs) */
    size_t i = 0;
    while (i + 1 < g->n && flog_cmp(&g->items[i], &g->items[i + 1]) <= 0)
        i++;
    if (i + 1 >= g->n)
        i = 0;
    char w[200], a[80], b[80];
    where(w, sizeof w, r, (size_t)(g->addr - r->base));
    thread_name(a, sizeof a, g->items[i].block, g->items[i].tid);
    thread_name(b, sizeof b, g->items[i + 1].block, g->items[i + 1].tid);
    double x = as_double(g->type, ran),
           y = as_double(g->type, same_value(g->type, ran, fwd) ? back : fwd);
    free(sorted);
    fail("order-dependent float atomicAdd on %s: %zu adds give %.17g in the order they ran and "
         "%.17g in another; %s added %.9g, then %s added %.9g (the kernel promises "
         "deterministic results; AMPC_NONDETERMINISTIC() says it does not)",
         w, g->n, x, y, a, as_double(g->type, g->items[i].v), b,
         as_double(g->type, g->items[i + 1].v));
}

static void flog_drop(size_t i)
{
    free(L.flogs[i].items);
    L.flogs[i] = L.flogs[--L.nflog];
}

/* a plain access at [p, p+size): the logs there are done */
static void flog_check_at(char *p, size_t size, const Region *r)
{
    for (size_t i = 0; i < L.nflog;) {
        Flog *g = &L.flogs[i];
        size_t gs = g->type == AMPC_EMU_T_F64 ? 8 : 4;
        if (g->addr < p + size && p < g->addr + gs) {
            for (size_t k = 0; k < gs; k++) /* no longer logged */
                r->cells[g->addr - r->base + k].w.flags &= (uint16_t)~ST_FLOG;
            flog_eval(g, r);
            flog_drop(i);
        } else {
            i++;
        }
    }
}

/* the logs of shared memory (at a block's end) or all (at the launch's) */
static void flog_finish(bool shared_only)
{
    for (size_t i = 0; i < L.nflog;) {
        Region r;
        Flog *g = &L.flogs[i];
        bool sh = shared_region(g->addr, &r);
        if (shared_only && !sh) {
            i++;
            continue;
        }
        if (!sh)
            global_region(g->addr, 4, &r);
        flog_eval(g, &r);
        flog_drop(i);
    }
}

uint64_t ampc_emu_atomic(void *p, int type, int op, uint64_t v, uint64_t cmp)
{
    size_t size = type == AMPC_EMU_U64 || type == AMPC_EMU_I64 || type == AMPC_EMU_T_F64 ? 8 : 4;
    if (!L.active || !cur) {
        uint64_t old = 0;
        memcpy(&old, p, size);
        uint64_t r = atomic_apply(type, op, old, v, cmp);
        memcpy(p, &r, size);
        return old;
    }
    if (cfg.order == AMPC_EMU_SEEDED && (rng_next() & 1)) {
        make_ready(cur); /* another thread's atomic may come first */
        wait_here();
    }
    char *real = access_checked(p, size, size, K_ATOMIC);
    L.counts.atomics++;
    uint64_t old = 0;
    memcpy(&old, real, size);
    uint64_t r = atomic_apply(type, op, old, v, cmp);
    memcpy(real, &r, size);
    bool fadd = (type == AMPC_EMU_T_F32 || type == AMPC_EMU_T_F64) && op == AMPC_EMU_ATOM_ADD;
    if (fadd && !L.nondet) {
        Region reg;
        if (!shared_region(p, &reg))
            global_region(p, size, &reg);
        Flog *g = flog_for(p, type, old);
        flog_add(g, v);
        Cell *c = reg.cells + ((char *)p - reg.base);
        for (size_t k = 0; k < size; k++)
            c[k].w.flags |= ST_FLOG;
    }
    return old;
}

void ampc_emu_nondeterministic(void)
{
    if (L.active)
        L.nondet = true;
}

/* ---- barriers and warp primitives ---------------------------------------------------------- */

static void outside(const char *what, const char *file, int line)
{
    die("%s at %s:%d called outside a kernel", what, file, line);
}

void ampc_emu_syncthreads(const char *file, int line)
{
    if (!L.active || !cur)
        outside("__syncthreads", file, line);
    if (B.bar_count && (B.bar_line != line || strcmp(B.bar_file, file))) {
        char a[80];
        thread_name(a, sizeof a, B.index, cur->tid);
        fail("divergent __syncthreads: %s reaches the one at %s:%d while %u threads wait at the "
             "one at %s:%d",
             a, file, line, B.bar_count, B.bar_file, B.bar_line);
    }
    B.bar_file = file;
    B.bar_line = line;
    cur->state = T_WAIT;
    cur->wop = W_BAR;
    cur->wfile = file;
    cur->wline = line;
    if (++B.bar_count == B.n) {
        B.bar_count = 0;
        L.counts.barriers++;
        for (uint32_t i = 0; i < B.n; i++) {
            Thr *t = &B.thr[i];
            t->gen++;
            memset(t->vc, 0, sizeof t->vc);
            t->vc[i % 32] = 1;
            make_ready(t);
        }
    }
    wait_here();
}

static bool same_wait(const Thr *a, const Thr *b)
{
    return a->state == T_WAIT && a->wop == b->wop && a->wline == b->wline && a->wmask == b->wmask &&
           !strcmp(a->wfile, b->wfile);
}

/* every lane of the mask is at this primitive: results, clocks, go */
static void warp_complete(Thr *u)
{
    uint32_t base = u->tid - u->tid % 32;
    unsigned mask = u->wmask;
    int op = u->wop;
    uint32_t merged[32];
    uint64_t ballot = 0;
    memset(merged, 0, sizeof merged);
    for (unsigned l = 0; l < 32; l++) {
        if (!(mask >> l & 1))
            continue;
        Thr *t = &B.thr[base + l];
        for (int k = 0; k < 32; k++)
            merged[k] = t->vc[k] > merged[k] ? t->vc[k] : merged[k];
        if (t->wvalue)
            ballot |= 1ull << l;
    }
    for (unsigned l = 0; l < 32; l++) {
        if (!(mask >> l & 1))
            continue;
        Thr *t = &B.thr[base + l];
        unsigned w = (unsigned)t->wwidth, seg = l / w * w, src = l;
        switch (op) {
        case AMPC_EMU_SHFL: src = seg + ((unsigned)t->warg & (w - 1)); break;
        case AMPC_EMU_SHFL_UP: src = (int)l - t->warg < (int)seg ? l : l - (unsigned)t->warg; break;
        case AMPC_EMU_SHFL_DOWN:
            src = l + (unsigned)t->warg >= seg + w ? l : l + (unsigned)t->warg;
            break;
        case AMPC_EMU_SHFL_XOR:
            src = (l ^ (unsigned)t->warg) >= seg + w ? l : l ^ (unsigned)t->warg;
            break;
        default: break;
        }
        if (op >= AMPC_EMU_SHFL && op <= AMPC_EMU_SHFL_XOR) {
            if (src >= 32 || !(mask >> src & 1)) {
                char a[80];
                thread_name(a, sizeof a, B.index, base + l);
                fail("%s(0x%08x) at %s:%d: %s reads lane %u, which is not in the mask (its value "
                     "is undefined)",
                     wop_name(op), mask, t->wfile, t->wline, a, src);
            }
            t->wresult = B.thr[base + src].wvalue;
        } else if (op == AMPC_EMU_BALLOT) {
            t->wresult = ballot;
        } else if (op == AMPC_EMU_ANY) {
            t->wresult = ballot != 0;
        } else if (op == AMPC_EMU_ALL) {
            t->wresult = ballot == (uint64_t)mask;
        }
        if (op == AMPC_EMU_SYNCWARP) { /* memory ordering among the lanes */
            memcpy(t->vc, merged, sizeof merged);
            t->vc[l]++;
        }
    }
    L.counts.warp_syncs++;
    for (unsigned l = 0; l < 32; l++)
        if (mask >> l & 1)
            make_ready(&B.thr[base + l]);
}

uint64_t ampc_emu_warp(int op, unsigned mask, uint64_t value, int arg, int width, const char *file,
                       int line)
{
    if (!L.active || !cur)
        outside(wop_name(op), file, line);
    Thr *u = cur;
    uint32_t lane = u->tid % 32, base = u->tid - lane;
    char a[80];
    thread_name(a, sizeof a, B.index, u->tid);
    if (!(mask >> lane & 1))
        fail("%s(0x%08x) at %s:%d: %s calls it with a mask that does not name its own lane",
             wop_name(op), mask, file, line, a);
    for (unsigned l = 0; l < 32; l++)
        if ((mask >> l & 1) && base + l >= B.n)
            fail("%s(0x%08x) at %s:%d: the mask names lane %u, beyond the block's %u threads "
                 "(called by %s)",
                 wop_name(op), mask, file, line, l, B.n, a);
    if (op >= AMPC_EMU_SHFL && op <= AMPC_EMU_SHFL_XOR &&
        (width < 1 || width > 32 || (width & (width - 1))))
        fail("%s at %s:%d: width %d is not a power of 2 up to 32 (called by %s)", wop_name(op),
             file, line, width, a);
    u->state = T_WAIT;
    u->wop = op;
    u->wfile = file;
    u->wline = line;
    u->wmask = mask;
    u->wvalue = op >= AMPC_EMU_BALLOT ? value != 0 : value;
    u->warg = arg;
    u->wwidth = width;
    bool all = true;
    for (unsigned l = 0; l < 32 && all; l++)
        if (mask >> l & 1)
            all = same_wait(&B.thr[base + l], u);
    if (all)
        warp_complete(u);
    wait_here();
    return u->wresult;
}

/* ---- shared memory ------------------------------------------------------------------------ */

void *ampc_emu_shared(const void *tag, size_t bytes, size_t align, const char *name,
                      const char *file, int line)
{
    if (!L.active || !cur)
        outside("a __shared__ declaration", file, line);
    for (int i = 0; i < L.ndecl; i++)
        if (L.decls[i].tag == tag)
            return L.arena + L.decls[i].off;
    align = align < 16 ? 16 : align;
    size_t off = (L.static_used + align - 1) / align * align;
    if (L.ndecl == (int)(sizeof L.decls / sizeof L.decls[0]) || off + bytes > EMU_SHARED_STATIC ||
        off + bytes + L.dyn > EMU_SHARED_STATIC)
        fail("shared memory: '%s' (%zu bytes, at %s:%d) makes %zu bytes of static shared memory, "
             "%zu with the dynamic; a block has 48 KiB",
             name, bytes, file, line, off + bytes, off + bytes + L.dyn);
    SharedDecl *d = &L.decls[L.ndecl++];
    d->tag = tag;
    d->off = off;
    d->bytes = bytes;
    d->name = name;
    d->file = file;
    d->line = line;
    L.static_used = off + bytes;
    if (L.static_used > L.static_max)
        L.static_max = L.static_used;
    return L.arena + off;
}

void *ampc_emu_shared_dynamic(const char *name)
{
    if (!L.active || !cur)
        die("extern __shared__ '%s' used outside a kernel", name);
    L.dyn_name = name;
    return L.arena + EMU_SHARED_STATIC;
}

/* ---- the raw-pointer guard -------------------------------------------------------------- */

static struct sigaction old_segv;

/* A fault in the kernels' view of the heap during a launch: the kernel
 * dereferenced a raw pointer.  Name it, then let the old handler have the
 * fault (it recurs). */
static void segv(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)uc;
    char *a = si->si_addr;
    if (L.active && a >= heap.dev && a < heap.dev + heap.used) {
        char m[400];
        Buf *b = heap_find(a);
        int k = snprintf(m, sizeof m,
                         "emu: kernel %s touched device buffer '%s' at byte %zu through a raw "
                         "pointer (thread %u of block %u): device memory is reached through "
                         "ampc_dptr only, so the checker sees every access\n",
                         L.kernel, b ? b->name : "?", b ? (size_t)(a - b->base) : 0,
                         cur ? cur->tid : 0, B.index);
        if (k > 0)
            (void)!write(2, m, (size_t)k < sizeof m ? (size_t)k : sizeof m - 1);
    }
    sigaction(SIGSEGV, &old_segv, NULL);
}

static void guard(bool on)
{
    if (!heap.used)
        return;
    mprotect(heap.dev, heap.used, on ? PROT_NONE : PROT_READ | PROT_WRITE);
    if (on) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = segv;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGSEGV, &sa, &old_segv);
    } else {
        sigaction(SIGSEGV, &old_segv, NULL);
    }
}

/* ---- the per-kernel table ----------------------------------------------------------------- */

typedef struct {
    const char *name;
    long launches;
    uint64_t threads, read, written, max_loads, flops[AMPC_EMU_NFLOP];
} KernelRow;

static KernelRow *rows;
static size_t nrows;

static void log_kernels(void)
{
    const char *path = getenv("AMPC_EMU_KERNEL_LOG");
    FILE *f = path && *path ? fopen(path, "a") : NULL;
    if (!f)
        return;
    for (size_t i = 0; i < nrows; i++)
        fprintf(f, "%s\n", rows[i].name);
    fclose(f);
}

static void row_add(const AmpcEmuCounts *c)
{
    size_t i = 0;
    while (i < nrows && strcmp(rows[i].name, c->kernel))
        i++;
    if (i == nrows) {
        if (!nrows)
            atexit(log_kernels);
        KernelRow *r = realloc(rows, (nrows + 1) * sizeof *rows);
        if (!r)
            die("out of memory");
        rows = r;
        memset(&rows[nrows], 0, sizeof rows[nrows]);
        rows[nrows++].name = c->kernel;
    }
    KernelRow *r = &rows[i];
    r->launches++;
    r->threads += c->threads;
    r->read += c->global_read_bytes;
    r->written += c->global_write_bytes;
    for (int k = 0; k < AMPC_EMU_NFLOP; k++)
        r->flops[k] += c->flops[k];
    if (c->max_thread_loads > r->max_loads)
        r->max_loads = c->max_thread_loads;
}

void ampc_emu_print_kernels(FILE *f)
{
    fprintf(f, "%-24s %8s %10s %11s %11s %9s  %s\n", "emulated kernel", "launches", "threads",
            "bytes read", "written", "max loads", "FLOPs by kind (all launches)");
    for (size_t i = 0; i < nrows; i++) {
        const KernelRow *r = &rows[i];
        fprintf(f, "%-24s %8ld %10llu %11llu %11llu %9llu ", r->name, r->launches,
                (unsigned long long)r->threads, (unsigned long long)r->read,
                (unsigned long long)r->written, (unsigned long long)r->max_loads);
        for (int k = 0; k < AMPC_EMU_NFLOP; k++)
            if (r->flops[k])
                fprintf(f, " %s=%llu", ampc_emu_flop_names[k], (unsigned long long)r->flops[k]);
        fputc('\n', f);
    }
}

/* ---- the launch ------------------------------------------------------------------------------ */

static AmpcEmuCounts last_counts;

const AmpcEmuCounts *ampc_emu_last_counts(void) { return &last_counts; }
const char *ampc_emu_failure(void) { return last_status ? L.msg : NULL; }
long ampc_emu_launches(void) { return launch_count; }
int ampc_emu_launch_status(void) { return (int)last_status; }

static void block_setup(uint32_t index, uint32_t nthreads)
{
    B.index = index;
    B.idx.x = index % L.grid.x;
    B.idx.y = index / L.grid.x % L.grid.y;
    B.idx.z = index / L.grid.x / L.grid.y;
    ampc_emu_block_idx = B.idx;
    B.n = nthreads;
    B.ndone = 0;
    B.nready = 0;
    B.bar_count = 0;
    B.nfresh = nthreads;
    for (uint32_t i = 0; i < nthreads; i++) {
        Thr *t = &B.thr[i];
        memset(t, 0, sizeof *t);
        t->tid = i;
        t->idx.x = i % L.block.x;
        t->idx.y = i / L.block.x % L.block.y;
        t->idx.z = i / L.block.x / L.block.y;
        t->vc[i % 32] = 1;
        t->state = T_FRESH;
        /* by index, the list's end is next */
        B.fresh[i] = cfg.order == AMPC_EMU_REVERSE ? i : nthreads - 1 - i;
    }
    /* shared memory: poisoned, nothing declared, nothing written */
    memset(L.arena, 0xcd, L.static_used);
    memset(L.arena + EMU_SHARED_STATIC, 0xcd, L.dyn);
    L.static_used = 0;
    L.ndecl = 0;
    B.shared_epoch = ++shared_runs;
}

static bool launch_config_ok(AmpcEmuDim3 g, AmpcEmuDim3 b, size_t dyn)
{
    uint64_t nt = (uint64_t)b.x * b.y * b.z;
    if (!g.x || !g.y || !g.z || !nt || nt > EMU_MAX_THREADS || b.x > 1024 || b.y > 1024 ||
        b.z > 64 || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) {
        snprintf(L.msg, sizeof L.msg,
                 "emu: kernel %s: invalid launch configuration: grid %ux%ux%u, block %ux%ux%u "
                 "(cudaErrorInvalidConfiguration)",
                 L.kernel, g.x, g.y, g.z, b.x, b.y, b.z);
        return false;
    }
    if (dyn > EMU_SHARED_STATIC) {
        snprintf(L.msg, sizeof L.msg,
                 "emu: kernel %s: %zu bytes of dynamic shared memory, more than 48 KiB (a launch "
                 "past that needs cudaFuncSetAttribute, which AMPC_LAUNCH_SMEM does not make)",
                 L.kernel, dyn);
        return false;
    }
    return true;
}

static void launch_alloc(uint32_t nthreads)
{
    static uint32_t cap;
    if (nthreads > cap) {
        free(B.thr);
        free(B.fresh);
        free(B.ready);
        B.thr = calloc(nthreads, sizeof *B.thr);
        B.fresh = calloc(nthreads, sizeof *B.fresh);
        B.ready = calloc(nthreads, sizeof *B.ready);
        if (!B.thr || !B.fresh || !B.ready)
            die("out of memory");
        cap = nthreads;
    }
    size_t size = EMU_SHARED_STATIC + L.dyn;
    if (size > L.arena_size) {
        free(L.arena);
        if (L.arena_cells)
            munmap(L.arena_cells, L.arena_size * sizeof(Cell));
        L.arena = malloc(size);
        L.arena_cells = mmap(NULL, size * sizeof(Cell), PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (!L.arena || L.arena_cells == MAP_FAILED)
            die("out of memory for shared memory");
        L.arena_size = size;
        memset(L.arena, 0xcd, size);
        L.static_used = 0;
    }
}

/* every fiber back to the pool (after a failure some were waiting) */
static void fibers_reset(void)
{
    fibers_free = NULL;
    for (size_t i = 0; i < nfibers; i++)
        fiber_put(fibers_all[i]);
}

static void run_blocks(uint32_t nthreads, uint64_t nblocks)
{
    uint32_t *order = malloc((size_t)nblocks * sizeof *order);
    if (!order)
        die("out of memory for %llu blocks", (unsigned long long)nblocks);
    for (uint64_t i = 0; i < nblocks; i++)
        order[i] = (uint32_t)(cfg.order == AMPC_EMU_REVERSE ? nblocks - 1 - i : i);
    if (cfg.order == AMPC_EMU_SEEDED)
        for (uint64_t i = nblocks; i > 1; i--) {
            uint64_t j = rng_next() % i;
            uint32_t t = order[i - 1];
            order[i - 1] = order[j];
            order[j] = t;
        }
    for (uint64_t k = 0; k < nblocks && !L.failed; k++) {
        block_setup(order[k], nthreads);
        Thr *t = pick();
        Fiber *f = fiber_get();
        f->thr = t;
        switch_to(&main_uc, f, false);
        cur = NULL;
        if (L.failed)
            break;
        flog_finish(true);
    }
    free(order);
}

int ampc_emu_launch(const char *kernel, AmpcEmuDim3 grid, AmpcEmuDim3 block, size_t dyn_shared,
                    void (*run)(void *arg), void *arg)
{
    if (L.active)
        die("kernel %s launched from inside kernel %s (no dynamic parallelism)", kernel, L.kernel);
    launch_count++;
    memset(&L.counts, 0, sizeof L.counts);
    L.kernel = kernel;
    L.grid = grid;
    L.block = block;
    L.dyn = dyn_shared;
    L.run = run;
    L.arg = arg;
    L.failed = L.nondet = false;
    L.msg[0] = 0;
    L.dyn_name = NULL;
    L.static_max = 0;
    L.epoch = (uint32_t)launch_count;
    L.rng = cfg.seed * 0x9e3779b97f4a7c15ull + (uint64_t)++cfg.pass_launches;
    L.counts.kernel = kernel;
    L.counts.launch = launch_count;
    L.counts.grid = grid;
    L.counts.block = block;
    if (!launch_config_ok(grid, block, dyn_shared)) {
        L.failed = true;
    } else {
        uint32_t nthreads = block.x * block.y * block.z;
        uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
        launch_alloc(nthreads);
        ampc_emu_grid_dim = grid;
        ampc_emu_block_dim = block;
        L.counts.blocks = nblocks;
        L.counts.threads = nblocks * nthreads;
        ampc_emu_flop_count = L.counts.flops;
        L.active = true;
        guard(true);
        run_blocks(nthreads, nblocks);
        if (!L.failed)
            flog_finish(false);
        guard(false);
        L.active = false;
        cur = NULL;
        ampc_emu_flop_count = flop_sink;
        fibers_reset();
        for (size_t i = 0; i < L.nflog; i++)
            free(L.flogs[i].items);
        L.nflog = 0;
        L.counts.shared_bytes = L.static_max + dyn_shared;
    }
    last_counts = L.counts;
    last_status = L.failed ? -1 : 0;
    if (!L.failed) {
        row_add(&last_counts);
        if (cfg.launch_fn)
            cfg.launch_fn(&last_counts, cfg.launch_ctx);
        return 0;
    }
    if (cfg.fail_fn) {
        cfg.fail_fn(L.msg, cfg.fail_ctx);
    } else {
        fprintf(stderr, "%s\n", L.msg);
        exit(1);
    }
    return -1;
}

/* ---- what check.c gives the launchers in a GPU build (the stream is the
 * caller's context's: RtCudaCtx, whose stream the tests leave NULL) ---------- */

bool ampc_api_check(AmpcApi api, long status, const char *call, const char *file, int line,
                    bool fatal)
{
    (void)api;
    if (!status)
        return true;
    fprintf(stderr, "ampc: %s:%d: %s: the emulated launch failed%s%s\n", file, line, call,
            last_status ? ": " : "", last_status ? L.msg : "");
    if (fatal)
        exit(1);
    return false;
}
