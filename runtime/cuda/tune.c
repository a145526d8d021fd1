/* tune.c - bounded autotune and the plan cache file (tune.h): no CUDA, so
 * the choice and the file are tested on the host with a fake engine list
 * (tests/runtime/test_cuda_tune.c) and fuzzed (tests/fuzz/fuzz_plancache.c). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda/tune.h"
#include "fileio.h"

/* ---- bounded autotune ------------------------------------------------------------ */

/* candidate i may run under p: counted into r when it may not */
static bool admissible(const AmpcCandidate *c, RtDType dt, const AmpcTunePolicy *p,
                       AmpcTuneResult *r, bool count)
{
    unsigned refusal = ampc_engine_refusal(c->notes, dt, &p->engines);
    if (refusal) {
        if (count)
            r->refused++, r->refused_notes |= refusal;
        return false;
    }
    if (c->runtime_compiled && !p->runtime_compiled) {
        if (count)
            r->skipped_rtc++;
        return false;
    }
    return true;
}

static bool builds_within(const AmpcTuneOps *ops, void *ctx, int i, size_t limit, size_t *ws)
{
    if (!ops->build(ctx, i, ws))
        return false;
    if (*ws > limit) {
        ops->drop(ctx, i);
        return false;
    }
    return true;
}

void ampc_tune_choose(const AmpcCandidate *c, int n, RtDType dt, const AmpcTunePolicy *p,
                      const AmpcTuneOps *ops, void *ctx, int cached, int64_t cached_engine,
                      AmpcTuneResult *r)
{
    memset(r, 0, sizeof *r);
    r->chosen = -1;
    r->proposed = n;
    size_t ws = 0;
    if (cached >= 0 && cached < n && c[cached].engine == cached_engine &&
        admissible(&c[cached], dt, p, r, false) &&
        builds_within(ops, ctx, cached, p->workspace_limit, &ws)) {
        r->chosen = cached, r->ws = ws, r->cached = true;
        return;
    }
    int max_timed = p->max_timed > 0 ? p->max_timed : 1;
    float best = INFINITY;
    for (int i = 0; i < n && r->timed < max_timed; i++) {
        if (!admissible(&c[i], dt, p, r, true) ||
            !builds_within(ops, ctx, i, p->workspace_limit, &ws))
            continue;
        if (!p->autotune) { /* the heuristic's first usable one */
            r->chosen = i, r->ws = ws;
            return;
        }
        float ms = ops->time(ctx, i);
        r->timed++;
        if (isfinite(ms) && (r->chosen < 0 || ms < best)) {
            if (r->chosen >= 0)
                ops->drop(ctx, r->chosen);
            r->chosen = i, r->ws = ws, best = ms;
        } else {
            ops->drop(ctx, i);
        }
    }
}

/* ---- the plan cache file: bytes ------------------------------------------------------ */

#define ENTRY_WORDS (AMPC_KEY_LEN + 11 + 3)
enum {
    HEADER_BYTES = 8 + 4 + 4 + 8, /* magic, version, entry size, count */
    ENTRY_BYTES = ENTRY_WORDS * 8,
    MAX_FILE_BYTES = 64 << 20,
};

uint64_t ampc_planfile_hash(const void *data, size_t n, uint64_t h)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static void put_u(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* an entry as words, in the file's order */
static void entry_words(const AmpcTuneEntry *e, int64_t w[ENTRY_WORDS])
{
    const AmpcTuneEnv *v = &e->env;
    memcpy(w, e->key.v, sizeof e->key.v);
    int64_t rest[] = {v->cc_major,        v->cc_minor,  v->sm_count,         v->cudnn_version,
                      v->cuda_runtime,    v->fp32,      v->nondeterministic, v->runtime_compiled,
                      v->workspace_limit, v->alignment, v->runtime_version,  e->mode,
                      e->candidate,       e->engine};
    _Static_assert(AMPC_KEY_LEN + sizeof rest / sizeof rest[0] == ENTRY_WORDS, "entry words");
    memcpy(w + AMPC_KEY_LEN, rest, sizeof rest);
}

static void words_entry(const int64_t w[ENTRY_WORDS], AmpcTuneEntry *e)
{
    memcpy(e->key.v, w, sizeof e->key.v);
    const int64_t *r = w + AMPC_KEY_LEN;
    e->env = (AmpcTuneEnv){r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10]};
    e->mode = r[11], e->candidate = r[12], e->engine = r[13];
}

uint8_t *ampc_planfile_serialize(const AmpcPlanFile *f, size_t *size)
{
    if (f->n > (MAX_FILE_BYTES - HEADER_BYTES - 8) / ENTRY_BYTES)
        return NULL;
    size_t bytes = HEADER_BYTES + f->n * ENTRY_BYTES + 8;
    uint8_t *b = malloc(bytes), *p = b + HEADER_BYTES;
    if (!b)
        return NULL;
    memcpy(b, AMPC_PLANFILE_MAGIC, 8);
    put_u(b + 8, AMPC_PLANFILE_VERSION, 4);
    put_u(b + 12, ENTRY_BYTES, 4);
    put_u(b + 16, f->n, 8);
    for (size_t i = 0; i < f->n; i++) {
        int64_t w[ENTRY_WORDS];
        entry_words(&f->e[i], w);
        for (int j = 0; j < ENTRY_WORDS; j++, p += 8)
            put_u(p, (uint64_t)w[j], 8);
    }
    put_u(p, ampc_planfile_hash(b, bytes - 8, AMPC_FNV_START), 8);
    *size = bytes;
    return b;
}

static bool push(AmpcPlanFile *f, const AmpcTuneEntry *e)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 64;
        AmpcTuneEntry *g = realloc(f->e, cap * sizeof *g);
        if (!g)
            return false;
        f->e = g, f->cap = cap;
    }
    f->e[f->n++] = *e;
    return true;
}

bool ampc_planfile_parse(AmpcPlanFile *f, const uint8_t *data, size_t size, const char *where,
                         bool *ours, char *err, size_t errlen)
{
    *ours = size >= 8 && memcmp(data, AMPC_PLANFILE_MAGIC, 8) == 0;
    if (!*ours) {
        snprintf(err, errlen, "%s: not an ampc plan cache file (it does not start with \"%s\")",
                 where, AMPC_PLANFILE_MAGIC);
        return false;
    }
    if (size < HEADER_BYTES + 8) {
        snprintf(err, errlen, "%s: truncated (%zu bytes, a header needs %d)", where, size,
                 HEADER_BYTES + 8);
        return false;
    }
    uint64_t version = get_u(data + 8, 4), esize = get_u(data + 12, 4), n = get_u(data + 16, 8);
    if (version != AMPC_PLANFILE_VERSION) {
        snprintf(err, errlen, "%s: format version %llu, this program reads %d", where,
                 (unsigned long long)version, AMPC_PLANFILE_VERSION);
        return false;
    }
    if (esize != ENTRY_BYTES || n > (size - HEADER_BYTES - 8) / ENTRY_BYTES ||
        size != HEADER_BYTES + n * ENTRY_BYTES + 8) {
        snprintf(err, errlen, "%s: %llu entries of %llu bytes do not make its %zu bytes", where,
                 (unsigned long long)n, (unsigned long long)esize, size);
        return false;
    }
    if (get_u(data + size - 8, 8) != ampc_planfile_hash(data, size - 8, AMPC_FNV_START)) {
        snprintf(err, errlen, "%s: checksum mismatch (damaged)", where);
        return false;
    }
    const uint8_t *p = data + HEADER_BYTES;
    for (uint64_t i = 0; i < n; i++) {
        int64_t w[ENTRY_WORDS];
        for (int j = 0; j < ENTRY_WORDS; j++, p += 8)
            w[j] = (int64_t)get_u(p, 8);
        AmpcTuneEntry e;
        words_entry(w, &e);
        if ((e.mode != 0 && e.mode != 1) || e.candidate < 0 || e.candidate >= 1 << 20) {
            snprintf(err, errlen, "%s: entry %llu: heuristic list %lld, candidate %lld", where,
                     (unsigned long long)i, (long long)e.mode, (long long)e.candidate);
            return false;
        }
        if (!ampc_planfile_find(f, &e.key, &e.env) && !push(f, &e)) {
            snprintf(err, errlen, "%s: out of memory", where);
            return false;
        }
    }
    return true;
}

/* ---- the plan cache file: the file ---------------------------------------------------- */

static bool same_entry(const AmpcTuneEntry *e, const AmpcPlanKey *key, const AmpcTuneEnv *env)
{
    return memcmp(&e->key, key, sizeof *key) == 0 && memcmp(&e->env, env, sizeof *env) == 0;
}

const AmpcTuneEntry *ampc_planfile_find(const AmpcPlanFile *f, const AmpcPlanKey *key,
                                        const AmpcTuneEnv *env)
{
    for (size_t i = 0; i < f->n; i++)
        if (same_entry(&f->e[i], key, env))
            return &f->e[i];
    return NULL;
}

bool ampc_planfile_add(AmpcPlanFile *f, const AmpcTuneEntry *e)
{
    for (size_t i = 0; i < f->n; i++)
        if (same_entry(&f->e[i], &e->key, &e->env)) {
            f->e[i] = *e;
            f->learnt++;
            return true;
        }
    if (!push(f, e))
        return false;
    f->learnt++;
    return true;
}

/* The file's bytes (*data NULL, *size 0: no file).  Read without blocking
 * and only from a regular file; not noted as an input (fileio.h), since
 * the save replaces it. */
static bool read_file(const char *path, uint8_t **data, size_t *size, char *err, size_t errlen)
{
    *data = NULL, *size = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return true;
        snprintf(err, errlen, "--cudnn-plan-cache %s: %s", path, strerror(errno));
        return false;
    }
    struct stat st;
    bool ok = fstat(fd, &st) == 0;
    if (!ok || !S_ISREG(st.st_mode) || st.st_size > MAX_FILE_BYTES) {
        snprintf(err, errlen, "--cudnn-plan-cache %s: %s", path,
                 !ok                    ? strerror(errno)
                 : !S_ISREG(st.st_mode) ? "not a regular file"
                                        : "larger than 64 MiB");
        close(fd);
        return false;
    }
    uint8_t *b = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (b && got < (size_t)st.st_size) {
        ssize_t k = read(fd, b + got, (size_t)st.st_size - got);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    close(fd);
    if (!b || got != (size_t)st.st_size) {
        snprintf(err, errlen, "--cudnn-plan-cache %s: %s", path,
                 b ? "short read" : "out of memory");
        free(b);
        return false;
    }
    *data = b, *size = got;
    return true;
}

/* path's entries into f: a damaged or stale file of ours is a warning */
static bool load_into(AmpcPlanFile *f, const char *path, char *warn, size_t warnlen, char *err,
                      size_t errlen)
{
    uint8_t *data;
    size_t size;
    if (!read_file(path, &data, &size, err, errlen))
        return false;
    if (!data)
        return true;
    bool ours = false;
    char why[512];
    bool ok = ampc_planfile_parse(f, data, size, path, &ours, why, sizeof why);
    free(data);
    if (!ok && !ours) {
        snprintf(err, errlen, "--cudnn-plan-cache %s", why);
        return false;
    }
    if (!ok)
        snprintf(warn, warnlen, "--cudnn-plan-cache %s: its plans are ignored and it is rewritten",
                 why);
    return true;
}

bool ampc_planfile_open(AmpcPlanFile *f, const char *path, char *warn, size_t warnlen, char *err,
                        size_t errlen)
{
    memset(f, 0, sizeof *f);
    warn[0] = 0;
    if (!(f->path = strdup(path))) {
        snprintf(err, errlen, "out of memory");
        return false;
    }
    if (load_into(f, path, warn, warnlen, err, errlen)) {
        f->n = warn[0] ? 0 : f->n; /* a damaged file: none of its entries */
        return true;
    }
    ampc_planfile_free(f);
    return false;
}

static bool write_locked(AmpcPlanFile *f, char *err, size_t errlen)
{
    /* what other processes saved since this one read it, then this one's on top */
    AmpcPlanFile now = {0};
    char warn[512] = "";
    if (!load_into(&now, f->path, warn, sizeof warn, err, errlen))
        return false;
    if (warn[0])
        now.n = 0;
    bool ok = true;
    for (size_t i = 0; ok && i < f->n; i++)
        ok = ampc_planfile_add(&now, &f->e[i]);
    size_t size = 0;
    uint8_t *b = ok ? ampc_planfile_serialize(&now, &size) : NULL;
    ampc_planfile_free(&now);
    RtOutFile o;
    ok = b && rt_out_open(&o, f->path, "--cudnn-plan-cache", err, errlen);
    if (!b)
        snprintf(err, errlen, "--cudnn-plan-cache %s: out of memory", f->path);
    if (ok && fwrite(b, 1, size, o.f) != size) {
        rt_out_abort(&o);
        snprintf(err, errlen, "--cudnn-plan-cache %s: write failed", f->path);
        ok = false;
    } else if (ok) {
        ok = rt_out_commit(&o, "--cudnn-plan-cache", err, errlen);
    }
    free(b);
    return ok;
}

bool ampc_planfile_save(AmpcPlanFile *f, char *err, size_t errlen)
{
    if (f->learnt == 0)
        return true;
    size_t len = strlen(f->path);
    char *lock = malloc(len + 6);
    if (!lock) {
        snprintf(err, errlen, "out of memory");
        return false;
    }
    memcpy(lock, f->path, len);
    memcpy(lock + len, ".lock", 6);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) {
        snprintf(err, errlen, "--cudnn-plan-cache: cannot lock %s: %s", lock, strerror(errno));
        if (fd >= 0)
            close(fd);
        free(lock);
        return false;
    }
    bool ok = write_locked(f, err, errlen);
    close(fd); /* releases the lock */
    free(lock);
    if (ok)
        f->learnt = 0;
    return ok;
}

void ampc_planfile_free(AmpcPlanFile *f)
{
    free(f->e);
    free(f->path);
    memset(f, 0, sizeof *f);
}

/* ---- call sites ---------------------------------------------------------------------- */

void *ampc_site_get(const AmpcSiteTable *t, const void *const ptr[AMPC_SITE_PTRS])
{
    for (size_t i = 0; i < t->n; i++)
        if (memcmp(t->e[i].ptr, ptr, sizeof t->e[i].ptr) == 0)
            return t->e[i].value;
    return NULL;
}

bool ampc_site_put(AmpcSiteTable *t, const void *const ptr[AMPC_SITE_PTRS], void *value)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 4;
        AmpcSite *e = realloc(t->e, cap * sizeof *e);
        if (!e)
            return false;
        t->e = e, t->cap = cap;
    }
    memcpy(t->e[t->n].ptr, ptr, sizeof t->e[t->n].ptr);
    t->e[t->n++].value = value;
    return true;
}

void ampc_site_free(AmpcSiteTable *t, void (*drop)(void *ctx, void *value), void *ctx)
{
    for (size_t i = 0; drop && i < t->n; i++)
        drop(ctx, t->e[i].value);
    free(t->e);
    memset(t, 0, sizeof *t);
}
