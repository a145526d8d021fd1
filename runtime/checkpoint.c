/* checkpoint.c - checkpoints: every parameter in fp32 (the master where
 * there is one), the BatchNorm moving statistics (parameters without a
 * gradient), the optimizer's momentum, the loss scaler's state and where the
 * run stands (seed, epoch, batch, step, update count), so that a resumed run
 * continues bit for bit.  The format is in docs/training.md:
 *
 *   header (32 bytes): "AMPCCKPT", u32 version, u32 header size, u64 payload
 *   size, u32 crc32(payload), u32 crc32(header bytes 0..27)
 *   payload: the run state, then per parameter its name, dtype, flags,
 *   shape and fp32 values (and momentum)
 *
 * All integers and floats little endian.  A file is written to a temporary
 * file in the same directory, fsynced, renamed over the target, and the
 * directory fsynced: a crash leaves the old checkpoint or the new one, never
 * a mix, and a good checkpoint is never overwritten in place.  Reading
 * checks everything before anything is used: the size, both checksums (zlib's
 * crc32) and a payload that parses to its exact end; then the parameter
 * table must match the model's (count, names, shapes).
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "fileio.h"
#include "kernels/half.h"
#include "paramlayout.h"
#include "checkpoint.h"

/* ---- a growable little-endian byte buffer ------------------------------------ */

typedef struct {
    unsigned char *p;
    size_t len, cap;
    bool oom;
} Buf;

static void grow(Buf *b, size_t more)
{
    if (b->oom || b->len + more <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more)
        cap *= 2;
    unsigned char *np = realloc(b->p, cap);
    if (!np) {
        b->oom = true;
        return;
    }
    b->p = np;
    b->cap = cap;
}

static void put_bytes(Buf *b, const void *src, size_t n)
{
    grow(b, n);
    if (b->oom)
        return;
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void put_u32(Buf *b, uint32_t v)
{
    unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    put_bytes(b, x, 4);
}

static void put_u64(Buf *b, uint64_t v)
{
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static void put_f32(Buf *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put_u32(b, u);
}

static void put_str(Buf *b, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    put_u32(b, (uint32_t)n);
    put_bytes(b, s, n);
}

static void put_f32s(Buf *b, const float *v, int64_t n)
{
    grow(b, (size_t)n * 4);
    for (int64_t i = 0; i < n && !b->oom; i++)
        put_f32(b, v[i]);
}

/* ---- a bounds-checked reader ----------------------------------------------------- */

typedef struct {
    const unsigned char *p;
    size_t len, at;
    bool bad;
} Rd;

static const unsigned char *take(Rd *r, size_t n)
{
    if (r->bad || n > r->len - r->at) {
        r->bad = true;
        return NULL;
    }
    const unsigned char *q = r->p + r->at;
    r->at += n;
    return q;
}

static uint32_t get_u32(Rd *r)
{
    const unsigned char *q = take(r, 4);
    return q ? (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24
             : 0;
}

static uint64_t get_u64(Rd *r)
{
    uint64_t lo = get_u32(r);
    return lo | (uint64_t)get_u32(r) << 32;
}

static float get_f32(Rd *r)
{
    uint32_t u = get_u32(r);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A string of at most max bytes, malloc'ed and NUL-terminated. */
static char *get_str(Rd *r, size_t max)
{
    uint32_t n = get_u32(r);
    if (r->bad || n > max) {
        r->bad = true;
        return NULL;
    }
    const unsigned char *q = take(r, n);
    char *s = q ? malloc((size_t)n + 1) : NULL;
    if (!s) {
        r->bad = true;
        return NULL;
    }
    memcpy(s, q, n);
    s[n] = 0;
    if (strlen(s) != n) { /* an embedded NUL */
        free(s);
        r->bad = true;
        return NULL;
    }
    return s;
}

static float *get_f32s(Rd *r, int64_t n)
{
    if (n < 0 || (uint64_t)n > (r->len - r->at) / 4) {
        r->bad = true;
        return NULL;
    }
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) {
        r->bad = true;
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        v[i] = get_f32(r);
    return v;
}

static uint32_t crc(const void *p, size_t n)
{
    uLong c = crc32(0L, Z_NULL, 0);
    const unsigned char *q = p;
    while (n > 0) { /* crc32 takes a uInt length */
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, q, k);
        q += k;
        n -= k;
    }
    return (uint32_t)c;
}

/* ---- writing ------------------------------------------------------------------------ */

enum { F_MASTER = 1, F_TRAINABLE = 2, F_STATE = 4, F_STATE2 = 8 };

/* p->numel values of dtype dt at device pointer src as fp32 in the
 * canonical layout (files are canonical whatever the device's layout,
 * paramlayout.h): read into raw, and permuted into out where p's device
 * layout is another. */
static const float *canonical(const RtTrainer *t, const RtParam *p, const void *src, RtDType dt,
                              float *raw, float *out)
{
    rt_trainer_read_f32(t, raw, src, (size_t)p->numel, dt);
    if (!rt_param_permuted(p))
        return raw;
    rt_param_convert(p, RT_F32, raw, out, RT_LAYOUT_NCHW);
    return out;
}

/* The fp32 values of parameter i: the master, the fp32 buffer, or the
 * 16-bit buffer widened. */
static const float *param_values(const RtTrainer *t, int i, float *raw, float *out)
{
    const RtParam *p = &t->m->params[i];
    if (p->has_master && t->ctx.master && t->ctx.master[i])
        return canonical(t, p, t->ctx.master[i], RT_F32, raw, out);
    return canonical(t, p, t->ctx.buf[p->buffer], p->dtype, raw, out);
}

static bool payload(Buf *b, const RtTrainer *t, const RtRunState *rs)
{
    const RtModel *m = t->m;
    put_str(b, m->name);
    put_str(b, m->amp ? m->amp : "off");
    put_u64(b, rs->seed);
    put_u64(b, (uint64_t)rs->batch_size);
    put_u64(b, (uint64_t)rs->epoch);
    put_u64(b, (uint64_t)rs->batch_in_epoch);
    put_u64(b, (uint64_t)rs->step);
    put_u64(b, (uint64_t)rs->num_update);
    put_u32(b, rs->optimizer);
    put_f32(b, rs->momentum);
    put_u32(b, (uint32_t)rs->ls.mode);
    put_f32(b, rs->ls.s.scale);
    put_u32(b, (uint32_t)rs->ls.s.tracker);
    put_u64(b, (uint64_t)rs->ls.skipped);
    put_u64(b, (uint64_t)rs->ls.nonfinite);
    put_u32(b, (uint32_t)m->nparams);
    int64_t maxn = 0;
    for (int i = 0; i < m->nparams; i++)
        maxn = m->params[i].numel > maxn ? m->params[i].numel : maxn;
    float *tmp = malloc((size_t)(maxn ? maxn : 1) * sizeof *tmp);
    float *perm = malloc((size_t)(maxn ? maxn : 1) * sizeof *perm);
    if (!tmp || !perm) {
        free(tmp);
        free(perm);
        return false;
    }
    for (int i = 0; i < m->nparams && !b->oom; i++) {
        const RtParam *p = &m->params[i];
        const float *st = t->state ? t->state[i] : NULL;
        const float *st2 = st && t->state2 ? t->state2[i] : NULL;
        put_str(b, p->name);
        put_u32(b, (uint32_t)p->dtype);
        put_u32(b, (p->has_master ? F_MASTER : 0) | (p->grad >= 0 ? F_TRAINABLE : 0) |
                       (st ? F_STATE : 0) | (st2 ? F_STATE2 : 0));
        put_u32(b, (uint32_t)p->rank);
        for (int d = 0; d < p->rank; d++)
            put_u64(b, (uint64_t)p->shape[d]);
        put_u64(b, (uint64_t)p->numel);
        put_f32s(b, param_values(t, i, tmp, perm), p->numel);
        if (st)
            put_f32s(b, canonical(t, p, st, RT_F32, tmp, perm), p->numel);
        if (st2)
            put_f32s(b, canonical(t, p, st2, RT_F32, tmp, perm), p->numel);
    }
    free(tmp);
    free(perm);
    return !b->oom;
}

static bool write_all(int fd, const void *p, size_t n)
{
    const unsigned char *q = p;
    while (n > 0) {
        ssize_t k = write(fd, q, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        q += k;
        n -= (size_t)k;
    }
    return true;
}

/* A target that is not a regular file: a directory is refused; a device or
 * a FIFO is written directly, never renamed over (as root, a rename would
 * replace the device node itself). */
static bool write_special(const char *path, const struct stat *st, const unsigned char *hdr,
                          const Buf *b, char *err, size_t errlen)
{
    if (S_ISDIR(st->st_mode)) {
        snprintf(err, errlen, "cannot write checkpoint %s: it is a directory", path);
        return false;
    }
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    bool ok = fd >= 0 && write_all(fd, hdr, RT_CKPT_HEADER_BYTES) && write_all(fd, b->p, b->len);
    int e = errno;
    if (fd >= 0 && close(fd) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (!ok)
        snprintf(err, errlen, "cannot write checkpoint %s: %s", path, strerror(e));
    return ok;
}

bool rt_checkpoint_save(const char *path, const RtTrainer *t, const RtRunState *rs, char *err,
                        size_t errlen)
{
    Buf b = {0};
    unsigned char hdr[RT_CKPT_HEADER_BYTES];
    memset(hdr, 0, sizeof hdr);
    if (!payload(&b, t, rs)) {
        free(b.p);
        snprintf(err, errlen, "cannot write checkpoint %s: out of memory", path);
        return false;
    }
    Buf h = {.p = hdr, .cap = sizeof hdr};
    put_bytes(&h, RT_CKPT_MAGIC, 8);
    put_u32(&h, RT_CKPT_VERSION);
    put_u32(&h, RT_CKPT_HEADER_BYTES);
    put_u64(&h, (uint64_t)b.len);
    put_u32(&h, crc(b.p, b.len));
    put_u32(&h, crc(hdr, 28));

    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        bool ok = write_special(path, &st, hdr, &b, err, errlen);
        free(b.p);
        return ok;
    }
    /* a temporary file in the target's directory, so the rename is atomic */
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    char *dir = malloc(plen + 2);
    if (!tmp || !dir) {
        free(tmp);
        free(dir);
        free(b.p);
        snprintf(err, errlen, "cannot write checkpoint %s: out of memory", path);
        return false;
    }
    snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
    const char *slash = strrchr(path, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == path)
        strcpy(dir, "/");
    else {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = 0;
    }
    const char *what = "cannot create a temporary file in its directory";
    int fd = mkstemp(tmp);
    bool ok = fd >= 0;
    if (ok) {
        what = "write error";
        ok = fchmod(fd, 0644) == 0 && write_all(fd, hdr, sizeof hdr) &&
             write_all(fd, b.p, b.len);
        if (ok) {
            what = "fsync failed";
            ok = fsync(fd) == 0;
        }
        int e = errno;
        if (close(fd) != 0 && ok) {
            what = "close failed";
            ok = false;
        } else
            errno = e;
        if (ok) {
            what = "cannot rename the temporary file onto it";
            ok = rename(tmp, path) == 0;
        }
        if (!ok) {
            e = errno;
            unlink(tmp);
            errno = e;
        }
    }
    if (ok) { /* make the rename durable */
        int dfd = open(dir, O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) {
            if (fsync(dfd) != 0 && errno != EINVAL) {
                what = "fsync of its directory failed";
                ok = false;
            }
            close(dfd);
        }
    }
    if (!ok)
        snprintf(err, errlen, "cannot write checkpoint %s: %s: %s", path, what, strerror(errno));
    free(tmp);
    free(dir);
    free(b.p);
    return ok;
}

/* ---- reading ---------------------------------------------------------------------- */

void rt_checkpoint_free(RtCheckpoint *ck)
{
    if (ck->params)
        for (int i = 0; i < ck->nparams; i++) {
            free(ck->params[i].name);
            free(ck->params[i].values);
            free(ck->params[i].state);
            free(ck->params[i].state2);
        }
    free(ck->params);
    free(ck->model);
    free(ck->amp);
    memset(ck, 0, sizeof *ck);
}

/* The largest count a checkpoint may hold (steps, updates, skipped steps):
 * 2^53, exact in a double and far from int64's end, so no counter of a
 * resumed run can wrap. */
#define CKPT_MAX_COUNT ((int64_t)1 << 53)

static bool count_ok(const char *key, int64_t v, int64_t lo, int64_t hi, const char *hi_what,
                     char *msg, size_t cap)
{
    if (v >= lo && v <= hi)
        return true;
    snprintf(msg, cap, "%s is %lld, not in %lld..%lld%s", key, (long long)v, (long long)lo,
             (long long)hi, hi_what);
    return false;
}

/* Every field of the run state against what a run can have written
 * (docs/training.md, Reading); false with the field and why in msg. */
static bool run_state_ok(const RtCheckpoint *ck, uint32_t mode, uint32_t version, char *msg,
                         size_t cap)
{
    const RtRunState *rs = &ck->run;
    if (!ck->model || !ck->amp)
        return snprintf(msg, cap, "malformed strings"), false;
    if (!ck->model[0])
        return snprintf(msg, cap, "the model name is empty"), false;
    if (strcmp(ck->amp, "off") != 0 && strcmp(ck->amp, "float16") != 0 &&
        strcmp(ck->amp, "bfloat16") != 0)
        return snprintf(msg, cap, "amp is '%.40s', not off, float16 or bfloat16", ck->amp), false;
    if (!count_ok("batch size", rs->batch_size, 1, INT32_MAX, "", msg, cap) ||
        !count_ok("epoch", rs->epoch, 0, INT32_MAX, " (the most epochs a run has)", msg, cap) ||
        !count_ok("step", rs->step, 0, CKPT_MAX_COUNT, "", msg, cap) ||
        !count_ok("batch in epoch", rs->batch_in_epoch, 0, rs->step, " (the step count)", msg,
                  cap) ||
        !count_ok("update count", rs->num_update, 0, rs->step, " (the step count)", msg, cap))
        return false;
    uint32_t maxopt = version >= 2 ? (uint32_t)RT_OPT_ADAM : (uint32_t)RT_OPT_NAG;
    if (rs->optimizer > maxopt)
        return snprintf(msg, cap, "optimizer is %u, not 0 (sgd), 1 (nag)%s", rs->optimizer,
                        version >= 2 ? " or 2 (adam)" : " (version 1)"), false;
    if (!(rs->momentum >= 0 && rs->momentum <= 1))
        return snprintf(msg, cap, "momentum is %g, not in [0, 1]", (double)rs->momentum), false;
    if (mode < RT_LS_OFF || mode > RT_LS_DYNAMIC)
        return snprintf(msg, cap, "loss-scale mode is %u, not 1 (off), 2 (static) or 3 "
                        "(dynamic)", mode), false;
    float sc = rs->ls.s.scale;
    const char *mname = rt_loss_scale_mode_name((RtLossScaleMode)mode);
    if (mode == RT_LS_OFF && sc != 1.0f)
        return snprintf(msg, cap, "loss scale is %g; with loss scaling off it is 1", (double)sc),
               false;
    /* a dynamic scale below FLT_MIN stops a run before it can be saved */
    if (!(sc >= (mode == RT_LS_DYNAMIC ? FLT_MIN : 0) && sc <= FLT_MAX && sc > 0))
        return snprintf(msg, cap, "loss scale is %g, not a positive finite number%s",
                        (double)sc, mode == RT_LS_DYNAMIC ? " of at least 2^-126" : ""), false;
    int32_t tr = rs->ls.s.tracker;
    if (mode != RT_LS_DYNAMIC && tr != 0)
        return snprintf(msg, cap, "the loss scale's clean-step count is %d; a %s scale has "
                        "none (0)", (int)tr, mname), false;
    if (tr < 0 || tr == INT32_MAX)
        return snprintf(msg, cap, "the loss scale's clean-step count is %d, not in 0..%d",
                        (int)tr, INT32_MAX - 1), false;
    return count_ok("skipped steps", rs->ls.skipped, 0, rs->step - rs->num_update,
                    " (steps without an update)", msg, cap) &&
           count_ok("non-finite steps", rs->ls.nonfinite, 0, rs->num_update,
                    " (the update count)", msg, cap);
}

/* A parameter's dtype, flags and rank, and its state against the run
 * state's optimizer. */
static bool param_head_ok(const RtCheckpoint *ck, int i, uint32_t dt, uint32_t flags,
                          uint32_t rank, uint32_t version, char *msg, size_t cap)
{
    (void)i;
    const RtRunState *rs = &ck->run;
    uint32_t maxflags = version >= 2 ? 15 : 7; /* flag 8 (a second state) needs 4 */
    if (dt > RT_BF16)
        return snprintf(msg, cap, "dtype %u is not 0 (float32), 1 (float16) or 2 (bfloat16)",
                        dt), false;
    if (flags > maxflags || ((flags & F_STATE2) && !(flags & F_STATE)))
        return snprintf(msg, cap, "flags %u are not a valid set (1 master, 2 trainable, 4 state, "
                        "8 second state with 4%s)", flags, version >= 2 ? "" : ", version 2"),
               false;
    if (rank > RT_MAX_RANK)
        return snprintf(msg, cap, "rank %u exceeds %d", rank, RT_MAX_RANK), false;
    if ((flags & F_STATE) && !(flags & F_TRAINABLE))
        return snprintf(msg, cap, "optimizer state for a parameter that is not trainable"), false;
    bool adam = rs->optimizer == RT_OPT_ADAM;
    if ((flags & F_STATE) && adam != ((flags & F_STATE2) != 0))
        return snprintf(msg, cap, "%s, but the run state's optimizer is %s",
                        adam ? "a momentum (one state), not Adam's mean and var"
                             : "Adam's mean and var",
                        adam ? "adam" : rs->optimizer == RT_OPT_NAG ? "nag" : "sgd"), false;
    if ((flags & F_STATE) && !adam && rs->momentum == 0)
        return snprintf(msg, cap, "a momentum, but the run state's momentum is 0"), false;
    return true;
}

bool rt_checkpoint_parse(const void *buf, size_t len, const char *name, RtCheckpoint *ck,
                         char *err, size_t errlen)
{
    memset(ck, 0, sizeof *ck);
    const unsigned char *p = buf;
    size_t k = len < 8 ? len : 8;
    if (memcmp(p, RT_CKPT_MAGIC, k) != 0) {
        snprintf(err, errlen, "checkpoint %s: not an ampc checkpoint (no %s magic number)", name,
                 RT_CKPT_MAGIC);
        return false;
    }
    if (len < RT_CKPT_HEADER_BYTES) {
        snprintf(err, errlen, "checkpoint %s: truncated: %zu bytes, shorter than the %d-byte "
                 "header", name, len, RT_CKPT_HEADER_BYTES);
        return false;
    }
    Rd h = {.p = p, .len = RT_CKPT_HEADER_BYTES, .at = 8};
    uint32_t version = get_u32(&h), hsize = get_u32(&h);
    uint64_t plen = get_u64(&h);
    uint32_t pcrc = get_u32(&h), hcrc = get_u32(&h);
    if (crc(p, 28) != hcrc) {
        snprintf(err, errlen, "checkpoint %s: corrupt: the header checksum does not match",
                 name);
        return false;
    }
    if (version < 1 || version > RT_CKPT_VERSION || hsize != RT_CKPT_HEADER_BYTES) {
        snprintf(err, errlen, "checkpoint %s: format version %u (header %u bytes); this "
                 "program reads version %d", name, version, hsize, RT_CKPT_VERSION);
        return false;
    }
    if (plen != len - RT_CKPT_HEADER_BYTES) {
        /* the payload size as the header holds it: plus the header it could
         * wrap (2^64-1 was reported as 31) */
        snprintf(err, errlen,
                 "checkpoint %s: %s: %zu bytes, the header says a payload of %llu "
                 "after its %d",
                 name,
                 plen > len - RT_CKPT_HEADER_BYTES ? "truncated" : "trailing data after the end",
                 len, (unsigned long long)plen, RT_CKPT_HEADER_BYTES);
        return false;
    }
    if (crc(p + RT_CKPT_HEADER_BYTES, (size_t)plen) != pcrc) {
        snprintf(err, errlen, "checkpoint %s: corrupt: the payload checksum (crc32) does not "
                 "match", name);
        return false;
    }
    Rd r = {.p = p + RT_CKPT_HEADER_BYTES, .len = (size_t)plen};
    ck->model = get_str(&r, 4096);
    ck->amp = get_str(&r, 64);
    RtRunState *rs = &ck->run;
    rs->seed = get_u64(&r);
    rs->batch_size = (int64_t)get_u64(&r);
    rs->epoch = (int64_t)get_u64(&r);
    rs->batch_in_epoch = (int64_t)get_u64(&r);
    rs->step = (int64_t)get_u64(&r);
    rs->num_update = (int64_t)get_u64(&r);
    rs->optimizer = get_u32(&r);
    rs->momentum = get_f32(&r);
    uint32_t mode = get_u32(&r);
    rs->ls.mode = (RtLossScaleMode)mode;
    rs->ls.s.scale = get_f32(&r);
    rs->ls.s.tracker = (int32_t)get_u32(&r);
    rs->ls.skipped = (int64_t)get_u64(&r);
    rs->ls.nonfinite = (int64_t)get_u64(&r);
    uint32_t np = get_u32(&r);
    const char *why = "malformed payload";
    char field[320];
    if (!r.bad && !run_state_ok(ck, mode, version, field, sizeof field)) {
        /* the checksums matched: a forged file or a writer's bug; say which field */
        snprintf(err, errlen, "checkpoint %s: run state out of range: %s", name, field);
        rt_checkpoint_free(ck);
        return false;
    }
    if (!r.bad && np > (r.len - r.at) / 16) {
        r.bad = true;
        why = "parameter count out of range";
    }
    if (!r.bad) {
        ck->params = calloc((size_t)np + 1, sizeof *ck->params);
        if (!ck->params)
            r.bad = true;
        else
            ck->nparams = (int)np;
    }
    for (int i = 0; !r.bad && i < ck->nparams; i++) {
        RtCkptParam *q = &ck->params[i];
        q->name = get_str(&r, 4096);
        uint32_t dt = get_u32(&r), flags = get_u32(&r), rank = get_u32(&r);
        if (r.bad)
            break;
        if (!param_head_ok(ck, i, dt, flags, rank, version, field, sizeof field)) {
            snprintf(err, errlen, "checkpoint %s: parameter %d (%s): %s", name, i, q->name,
                     field);
            rt_checkpoint_free(ck);
            return false;
        }
        q->dtype = (RtDType)dt;
        q->has_master = flags & F_MASTER;
        q->trainable = flags & F_TRAINABLE;
        q->rank = (int)rank;
        int64_t prod = 1;
        for (uint32_t d = 0; d < rank; d++) {
            q->shape[d] = (int64_t)get_u64(&r);
            if (q->shape[d] < 0 || (q->shape[d] > 0 && prod > INT64_MAX / q->shape[d]))
                r.bad = true;
            else
                prod *= q->shape[d];
        }
        q->numel = (int64_t)get_u64(&r);
        if (r.bad || q->numel != prod) {
            r.bad = true;
            why = "a parameter's element count does not match its shape";
            break;
        }
        q->values = get_f32s(&r, q->numel);
        if (flags & F_STATE)
            q->state = get_f32s(&r, q->numel);
        if (flags & F_STATE2)
            q->state2 = get_f32s(&r, q->numel);
    }
    if (!r.bad && r.at != r.len) {
        r.bad = true;
        why = "trailing bytes in the payload";
    }
    if (r.bad) {
        /* the checksums matched, so this is a writer's bug or a forged file */
        snprintf(err, errlen, "checkpoint %s: corrupt: %s (at payload offset %zu)", name, why,
                 r.at);
        rt_checkpoint_free(ck);
        return false;
    }
    return true;
}

bool rt_checkpoint_read(const char *path, RtCheckpoint *ck, char *err, size_t errlen)
{
    memset(ck, 0, sizeof *ck);
    int64_t size;
    int fd = rt_open_input(path, "checkpoint", &size, err, errlen); /* no FIFO, no device */
    if (fd < 0)
        return false;
    size_t len = (size_t)size;
    unsigned char *buf = malloc(len ? len : 1);
    if (!buf) {
        snprintf(err, errlen, "checkpoint %s: out of memory for %zu bytes", path, len);
        close(fd);
        return false;
    }
    size_t got = 0;
    bool ioerr = false;
    while (got < len) {
        ssize_t k = read(fd, buf + got, len - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            ioerr = k < 0;
            break;
        }
        got += (size_t)k;
    }
    int e = errno;
    close(fd);
    if (got != len) {
        snprintf(err, errlen, "checkpoint %s: read error after %zu of %zu bytes%s%s", path, got,
                 len, ioerr ? ": " : " (the file shrank)", ioerr ? strerror(e) : "");
        free(buf);
        return false;
    }
    bool ok = rt_checkpoint_parse(buf, len, path, ck, err, errlen);
    free(buf);
    return ok;
}

static void shape_text(char *dst, size_t cap, int rank, const int64_t *shape)
{
    size_t at = 0;
    at += (size_t)snprintf(dst + at, cap - at, "[");
    for (int d = 0; d < rank && at < cap; d++)
        at += (size_t)snprintf(dst + at, cap - at, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (at < cap)
        snprintf(dst + at, cap - at, "]");
}

/* n fp32 values rounded once to the 16-bit dt on the host, then copied to
 * device pointer dst */
static bool to_device_16(RtDevice *d, void *dst, const float *src, size_t n, RtDType dt)
{
    uint16_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!tmp)
        return false;
    rt_from_f32(tmp, src, n, dt);
    rt_dev_to_device(d, dst, tmp, n * sizeof *tmp);
    free(tmp);
    return true;
}

/* canonical fp32 values v in p's device layout: v itself, or permuted into
 * perm (p->numel elements) */
static const float *device_order(const RtParam *p, const float *v, float *perm)
{
    if (!rt_param_permuted(p))
        return v;
    rt_param_convert(p, RT_F32, v, perm, RT_LAYOUT_NHWC);
    return perm;
}

bool rt_checkpoint_apply(const RtCheckpoint *ck, RtTrainer *t, const char *prog, const char *name,
                         FILE *warn, char *err, size_t errlen)
{
    const RtModel *m = t->m;
    if (ck->nparams != m->nparams) {
        snprintf(err, errlen, "checkpoint %s does not match model %s: it holds %d parameters "
                 "(model %s), the model has %d", name, m->name, ck->nparams, ck->model,
                 m->nparams);
        return false;
    }
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        const RtCkptParam *q = &ck->params[i];
        bool same = strcmp(p->name, q->name) == 0 && p->rank == q->rank && p->numel == q->numel;
        for (int d = 0; same && d < p->rank; d++)
            same = p->shape[d] == q->shape[d];
        if (!same) {
            char a[128], b[128];
            shape_text(a, sizeof a, q->rank, q->shape);
            shape_text(b, sizeof b, p->rank, p->shape);
            snprintf(err, errlen, "checkpoint %s does not match model %s: parameter %d is %s %s "
                     "in the checkpoint, %s %s in the model", name, m->name, i, q->name, a,
                     p->name, b);
            return false;
        }
    }
    /* the tables agree, but a checkpoint of another model is still another
     * model's (the fp32 and AMP builds of one model share its name) */
    if (strcmp(ck->model, m->name) != 0) {
        snprintf(err, errlen, "checkpoint %s does not match model %s: it was written by model "
                 "%s (the parameter tables agree)", name, m->name, ck->model);
        return false;
    }
    int missing = 0, unused = 0;
    bool ck_adam = false;
    for (int i = 0; i < ck->nparams; i++)
        ck_adam |= ck->params[i].state2 != NULL;
    RtDevice *d = t->dev;
    /* the file is canonical; a parameter stored in another layout on the
     * device is permuted into perm on the way (paramlayout.h) */
    int64_t maxn = 1;
    for (int i = 0; i < m->nparams; i++)
        if (rt_param_permuted(&m->params[i]) && m->params[i].numel > maxn)
            maxn = m->params[i].numel;
    float *perm = malloc((size_t)maxn * sizeof *perm);
    if (!perm) {
        snprintf(err, errlen, "out of memory loading checkpoint %s", name);
        return false;
    }
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        const RtCkptParam *q = &ck->params[i];
        void *buf = t->ctx.buf[p->buffer];
        size_t n = (size_t)p->numel;
        const float *values = device_order(p, q->values, perm);
        if (p->has_master && t->ctx.master && t->ctx.master[i])
            rt_dev_to_device(d, t->ctx.master[i], values, n * sizeof(float));
        if (p->dtype == RT_F32) {
            rt_dev_to_device(d, buf, values, n * sizeof(float));
        } else if (!to_device_16(d, buf, values, n, p->dtype)) {
            snprintf(err, errlen, "out of memory loading checkpoint %s", name);
            free(perm);
            return false;
        }
        float *st = t->state ? t->state[i] : NULL;
        float *st2 = t->state2 ? t->state2[i] : NULL;
        /* a momentum is not an Adam mean: state is used only when the
         * second state agrees (both there or both absent) */
        bool fits = (st2 != NULL) == (q->state2 != NULL);
        if (st && q->state && fits) {
            rt_dev_to_device(d, st, device_order(p, q->state, perm), n * sizeof(float));
            if (st2)
                rt_dev_to_device(d, st2, device_order(p, q->state2, perm), n * sizeof(float));
        } else if (st) {
            rt_dev_fill(d, st, RT_F32, n, 0.0f);
            if (st2)
                rt_dev_fill(d, st2, RT_F32, n, 0.0f);
            missing++;
            if (q->state)
                unused++;
        } else if (q->state)
            unused++;
    }
    free(perm);
    const char *sep = prog ? ": " : "";
    prog = prog ? prog : "";
    if (warn && missing)
        fprintf(warn,
                "%s%swarning: checkpoint %s holds no %s for %d parameters: it starts "
                "from zero\n",
                prog, sep, name, t->state2 ? "Adam state (mean, var)" : "momentum", missing);
    if (warn && unused)
        fprintf(warn,
                "%s%swarning: checkpoint %s holds %s for %d parameters that this run "
                "does not use (%s)\n",
                prog, sep, name, ck_adam ? "Adam state (mean, var)" : "momentum", unused,
                t->state2  ? "Adam"
                : t->state ? "another optimizer"
                           : "momentum 0");
    return true;
}

/* ---- the files of a save directory ------------------------------------------------ */

/* Whether name is a checkpoint file name of model (any model when model is
 * NULL) followed by exactly tail: "<model>-NNNN" (4 to 12 digits: the epoch)
 * or "<model>-stepNNNNNN" (6 to 12: the step of a run stopped mid-epoch),
 * then ".ckpt", or ".params" as checkpoints were named before they had
 * their own extension (MXNet's .params files are another format). */
static bool ckpt_name(const char *name, const char *model, const char *tail)
{
    const char *p;
    if (model) {
        size_t ml = strlen(model);
        if (strncmp(name, model, ml) != 0 || name[ml] != '-')
            return false;
        p = name + ml + 1;
    } else if (!(p = strrchr(name, '-')) || p == name) {
        return false;
    } else {
        p++;
    }
    bool by_step = strncmp(p, "step", 4) == 0;
    p += by_step ? 4 : 0;
    size_t digits = strspn(p, "0123456789"), min = by_step ? 6 : 4;
    if (digits < min || digits > 12)
        return false;
    p += digits;
    size_t ext = strncmp(p, RT_CKPT_EXT, strlen(RT_CKPT_EXT)) == 0 ? strlen(RT_CKPT_EXT)
                 : strncmp(p, ".params", 7) == 0                   ? 7
                                                                   : 0;
    return ext && strcmp(p + ext, tail) == 0;
}

/* mkstemp's six characters */
static bool mkstemp_suffix(const char *s)
{
    if (strlen(s) != 6)
        return false;
    for (int i = 0; i < 6; i++)
        if (!isalnum((unsigned char)s[i]))
            return false;
    return true;
}

int rt_checkpoint_clean_stale(const char *dir, const char *model, FILE *note, const char *prog)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        /* "<model>-NNNN.ckpt.tmp.XXXXXX", exactly what rt_checkpoint_save makes */
        const char *t = strstr(e->d_name, ".tmp.");
        if (!t || !mkstemp_suffix(t + 5) || !ckpt_name(e->d_name, model, t))
            continue;
        char path[4200];
        struct stat st;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path ||
            lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || rt_is_input(path))
            continue;
        if (unlink(path) == 0) {
            removed++;
            if (note)
                fprintf(note, "%s: note: removed %s, a temporary checkpoint file left by a run "
                        "that stopped while saving\n", prog, path);
        }
    }
    closedir(d);
    return removed;
}

/* ---- the run's side: --save-dir, resuming, the checkpoint of an epoch -------------- */

/* mkdir -p */
static bool ensure_dir(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return true;
        snprintf(err, errlen, "--save-dir %s: not a directory", dir);
        return false;
    }
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        snprintf(err, errlen, "--save-dir: the path is too long");
        return false;
    }
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != 0)
            continue;
        char c = *p;
        *p = 0;
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "--save-dir: cannot create %.400s: %.200s", path,
                     strerror(errno));
            return false;
        }
        *p = c;
        if (c == 0)
            break;
    }
    return true;
}

bool rt_save_dir_prepare(const char *dir, const char *model, FILE *note, const char *prog,
                         char *err, size_t errlen)
{
    if (!ensure_dir(dir, err, errlen))
        return false;
    /* what a run killed while saving left (docs/training.md, Writing) */
    rt_checkpoint_clean_stale(dir, model, note, prog);
    return true;
}

/* Whether the file is a checkpoint: one named as rt_checkpoint_save_epoch
 * names them (.ckpt), or by the old name (.params) with a checkpoint's
 * magic number (an MXNet .params file of that name is not one). */
static bool is_checkpoint(const char *dir, const char *name)
{
    if (!ckpt_name(name, NULL, ""))
        return false;
    size_t n = strlen(name);
    if (n > 7 && strcmp(name + n - 7, ".params") != 0)
        return true;
    char path[4200], magic[8];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return false;
    /* O_NONBLOCK: a FIFO of that name without a writer would block the open
     * forever; only a regular file is read */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    bool ck = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
              read(fd, magic, 8) == 8 && memcmp(magic, RT_CKPT_MAGIC, 8) == 0;
    if (fd >= 0)
        close(fd);
    return ck;
}

bool rt_save_dir_check(const char *dir, const char *model, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d)
        return true; /* not there yet: rt_save_dir_prepare makes it */
    char first[256] = "", other[256] = "";
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_checkpoint(dir, e->d_name))
            continue;
        n++;
        if (!first[0])
            snprintf(first, sizeof first, "%s", e->d_name);
        if (!other[0] && !ckpt_name(e->d_name, model, ""))
            snprintf(other, sizeof other, "%s", e->d_name);
    }
    closedir(d);
    if (n == 0)
        return true;
    snprintf(err, errlen,
             "--save-dir %.300s holds %d checkpoint%s of %s (%.200s%s): this run "
             "would mix its own with them; give a new directory, --resume one of them to "
             "continue that run, or --overwrite",
             dir, n, n == 1 ? "" : "s", other[0] ? "another model" : "another run",
             other[0] ? other : first, n > 1 ? ", ..." : "");
    return false;
}

void rt_checkpoint_resume(const RtRunState *rs, const RtTrainOptions *o, int64_t steps_per_epoch,
                          RtLossScaler *ls, RtRunState *at, FILE *err)
{
    if (rs->seed != o->seed)
        fprintf(err, "%s: note: resuming with the checkpoint's seed %llu (not %llu)\n", o->prog,
                (unsigned long long)rs->seed, (unsigned long long)o->seed);
    if (rs->optimizer != (uint32_t)o->optimizer) { /* in range: the reader checked it */
        static const char *const names[] = {"sgd", "nag", "adam"};
        fprintf(err, "%s: note: the checkpoint was written with optimizer %s; this run uses "
                "%s\n", o->prog, names[rs->optimizer], names[o->optimizer]);
    }
    at->epoch = rs->epoch;
    at->batch_in_epoch = rs->batch_in_epoch;
    at->step = rs->step;
    at->num_update = rs->num_update;
    if (rs->batch_size != o->batch_size && at->batch_in_epoch > 0) {
        fprintf(err, "%s: warning: the checkpoint was written at batch size %lld, this run "
                "uses %lld: it starts at the next epoch\n", o->prog, (long long)rs->batch_size,
                (long long)o->batch_size);
        at->epoch++;
        at->batch_in_epoch = 0;
    }
    if (at->batch_in_epoch >= steps_per_epoch) {
        at->epoch++;
        at->batch_in_epoch = 0;
    }
    ls->skipped = rs->ls.skipped;
    ls->nonfinite = rs->ls.nonfinite;
    ls->calibrating = false; /* the saved run's scale is calibrated */
    if (rs->ls.mode == ls->mode && ls->mode == RT_LS_DYNAMIC) {
        ls->s = rs->ls.s;
        if (ls->s.tracker >= ls->rule.interval) { /* a shorter interval than the saved run's */
            fprintf(err, "%s: note: the checkpoint's count of clean steps (%d) reaches this "
                    "run's growth interval (%d): the scale grows after the next clean step\n",
                    o->prog, (int)ls->s.tracker, (int)ls->rule.interval);
            ls->s.tracker = ls->rule.interval - 1;
        }
    } else if (rs->ls.mode != ls->mode)
        fprintf(err, "%s: note: the checkpoint's loss scale is %s, this run's %s: the scale "
                "starts at %g\n", o->prog, rt_loss_scale_mode_name(rs->ls.mode),
                rt_loss_scale_mode_name(ls->mode), (double)ls->s.scale);
}

bool rt_checkpoint_save_epoch(const char *dir, const RtTrainer *t, RtRunState rs,
                              int64_t steps_per_epoch, char **path, char *err, size_t errlen)
{
    const char *model = t->m->name;
    int64_t epoch = rs.epoch;
    if (rs.batch_in_epoch >= steps_per_epoch) { /* a whole epoch: the next one starts */
        rs.epoch = epoch + 1;
        rs.batch_in_epoch = 0;
    }
    size_t cap = strlen(dir) + strlen(model) + 48;
    free(*path);
    if (!(*path = malloc(cap))) {
        snprintf(err, errlen, "out of memory");
        return false;
    }
    /* a run stopped mid-epoch (--max-steps) is named by its step: it is not
     * the checkpoint of a finished epoch */
    if (rs.batch_in_epoch == 0)
        snprintf(*path, cap, "%s/%s-%04lld%s", dir, model, (long long)epoch + 1, RT_CKPT_EXT);
    else
        snprintf(*path, cap, "%s/%s-step%06lld%s", dir, model, (long long)rs.step, RT_CKPT_EXT);
    return rt_checkpoint_save(*path, t, &rs, err, errlen);
}
