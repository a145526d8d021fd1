/* prefetch.c - the `recordio` data source: its options, the shard of the
 * training file, and the pool of decoding threads with a bounded queue of
 * batches decoded ahead (recordio.h; docs/training.md, RecordIO).
 *
 * The queue: the training loop gives each epoch's order before its first
 * batch (ds->plan); from the first fill on, the pool decodes up to
 * `prefetch` batches of that order ahead into slots of its own, and each
 * fill waits for its slot and copies it out.  Anything else (validation,
 * a fill that does not follow the plan) cancels what is ahead and decodes
 * the asked batch straight into the caller's buffers, the threads sharing
 * its samples.  Which thread decodes a sample never changes its values
 * (image.c: the draws are a function of seed, epoch and record).
 *
 * Errors: a record that does not read or decode makes the batch fail:
 * ds->error returns the first message (file, byte offset, record) and the
 * loop stops with exit 1.
 *
 * Memory: the decoded pixels and the resized image of every thread come out
 * of one budget (--data-decode-mb; default a quarter of physical memory, at
 * most 4 GiB), which a thread reserves before it decodes, from the image's
 * header (image.c, rt_img_plan).  A thread whose image does not fit waits
 * for its turn (first come, first served; it gives back what it holds
 * first, so no two waiters hold each other's memory), and a thread gives
 * back its buffers after an image when another waits, and when it has no
 * work.  An image that needs more than the whole budget stops the run,
 * naming the record.  (The compressed record itself, at most 1 GiB, is read
 * before and not counted.)
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "image.h"

typedef struct {
    bool busy;
    int64_t seq;      /* the planned batch number; -1: a direct batch */
    int64_t ticket;   /* enqueue order: the oldest is decoded first */
    int split;
    uint64_t epoch;
    int64_t n, limit; /* samples; limit: those that may still be claimed */
    int64_t claimed, done;
    int64_t *ids;     /* [batch] sample indices of the split */
    float *x, *y;     /* where they go: own buffers or the caller's */
    float *own_x, *own_y;
} Slot;

typedef struct {
    RtRecOptions o;
    int c, h, w;
    uint64_t seed;
    RtRecFile file[2];
    RtRecEntry *ent[2];
    int64_t first[2], count[2]; /* the split's records: ent[first .. first+count) */
    int64_t sample;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t *thr;
    int nthr;
    bool stop;
    Slot *slot;
    int nslot;
    int64_t batch_cap; /* the own buffers' batch */
    int64_t ticket;
    int64_t in_flight;
    /* the plan of the epoch */
    bool planned;
    uint64_t plan_epoch;
    int64_t *order, norder, ncap;
    int64_t b, consumed, enqueued;
    bool failed;
    char error[1024];
    char summary[2600];
    /* the decoding budget (under mu) */
    int64_t budget, used;      /* bytes */
    uint64_t tickets, serving; /* the queue of waiting threads, in order */
    pthread_cond_t budget_cv;
} Src;

/* ---- one sample --------------------------------------------------------------- */

typedef struct {
    RtImgWorker img;
    uint8_t *buf;
    size_t cap;
    int64_t held; /* bytes of the budget its pixel buffers stand for */
} Worker;

/* ---- the decoding budget ------------------------------------------------------------- */

/* The worker's pixel buffers freed and their share given back (caller
 * holds mu). */
static void budget_release(Src *s, Worker *wk)
{
    if (!wk->held)
        return;
    rt_img_worker_shrink(&wk->img);
    s->used -= wk->held;
    wk->held = 0;
    pthread_cond_broadcast(&s->budget_cv);
}

/* Enough of the budget for the planned image: at once when the buffers
 * the worker holds already fit it; else it gives them back and waits its
 * turn.  False (err) when the image needs more than the whole budget. */
static bool budget_take(Src *s, Worker *wk, const RtImgPlan *p, char *err, size_t errlen)
{
    size_t px = wk->img.px_cap > p->px_bytes ? wk->img.px_cap : p->px_bytes;
    size_t tmp = wk->img.tmp_cap > p->tmp_bytes ? wk->img.tmp_cap : p->tmp_bytes;
    if ((int64_t)(px + tmp) <= wk->held)
        return true;
    int64_t need = (int64_t)(p->px_bytes + p->tmp_bytes);
    if (need > s->budget) {
        snprintf(err, errlen, "decoding this %dx%d image needs %.1f MiB (decoded %dx%d%s), more "
                 "than the %lld MiB all decoding threads share (--data-decode-mb)", p->w, p->h,
                 (double)need / 1048576.0, p->dw, p->dh, p->tmp_bytes ? ", then resized" : "",
                 (long long)(s->budget >> 20));
        return false;
    }
    pthread_mutex_lock(&s->mu);
    budget_release(s, wk);
    uint64_t me = s->tickets++;
    while (s->serving != me || s->used + need > s->budget)
        pthread_cond_wait(&s->budget_cv, &s->mu);
    s->used += need;
    s->serving++;
    wk->held = need;
    pthread_cond_broadcast(&s->budget_cv);
    pthread_mutex_unlock(&s->mu);
    return true;
}

/* --data-decode-mb, else a quarter of physical memory, at most 4 GiB. */
static int64_t budget_bytes(int64_t mb)
{
    if (mb > 0)
        return mb << 20;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    int64_t quarter = pages > 0 && page > 0 ? (int64_t)pages * page / 4 : (int64_t)1 << 30;
    return quarter < (int64_t)4 << 30 ? quarter : (int64_t)4 << 30;
}

static bool decode_one(Src *s, Worker *wk, int split, int64_t i, uint64_t epoch, float *x,
                       float *y, char *err, size_t errlen)
{
    const RtRecFile *f = &s->file[split];
    int64_t r = s->first[split] + i;
    const RtRecEntry *e = &s->ent[split][r];
    size_t n, total;
    int64_t next;
    if (!rt_rec_read(f, e->off, RT_REC_MAX_RECORD, &wk->buf, &wk->cap, &n, &total, &next, err,
                     errlen))
        return false;
    char msg[512];
    RtRecImage im;
    RtImgPlan plan;
    bool ok = rt_rec_image(wk->buf, n, total, &im, msg, sizeof msg) &&
              rt_img_plan(&wk->img, im.image, im.image_size, im.format, s->c, &s->o, &plan, msg,
                          sizeof msg) &&
              budget_take(s, wk, &plan, msg, sizeof msg) &&
              rt_img_decode(&wk->img, im.image, im.image_size, im.format, s->c, &plan, msg,
                            sizeof msg) &&
              rt_img_augment(&wk->img, &plan, &s->o, split == RT_SPLIT_TRAIN, s->c, s->h, s->w,
                             s->seed, epoch, (uint64_t)r, x, msg, sizeof msg);
    if (!ok) {
        snprintf(err, errlen, "%s: byte offset %lld: record %lld (id %llu): %s", f->path,
                 (long long)e->off, (long long)r, (unsigned long long)e->id, msg);
        return false;
    }
    *y = e->label;
    return true;
}

/* ---- the pool ------------------------------------------------------------------ */

/* The busy slot with work left whose ticket is the oldest; NULL: none. */
static Slot *next_work(Src *s)
{
    Slot *best = NULL;
    for (int k = 0; k < s->nslot; k++) {
        Slot *sl = &s->slot[k];
        if (sl->busy && sl->claimed < sl->limit && (!best || sl->ticket < best->ticket))
            best = sl;
    }
    return best;
}

static void *worker_main(void *arg)
{
    Src *s = arg;
    Worker wk;
    memset(&wk, 0, sizeof wk);
    char err[1024];
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        Slot *sl = next_work(s);
        if (!sl) {
            budget_release(s, &wk); /* idle: its memory to the others */
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        int64_t j = sl->claimed++;
        s->in_flight++;
        int split = sl->split;
        int64_t id = sl->ids[j];
        uint64_t epoch = sl->epoch;
        float *x = sl->x + j * s->sample, *y = sl->y + j;
        pthread_mutex_unlock(&s->mu);
        bool ok = decode_one(s, &wk, split, id, epoch, x, y, err, sizeof err);
        if (!ok)
            memset(x, 0, (size_t)s->sample * sizeof *x);
        pthread_mutex_lock(&s->mu);
        if (s->tickets != s->serving) /* a thread waits for memory */
            budget_release(s, &wk);
        if (!ok && !s->failed) {
            s->failed = true;
            snprintf(s->error, sizeof s->error, "%s", err);
        }
        s->in_flight--;
        sl->done++;
        pthread_cond_broadcast(&s->done);
    }
    budget_release(s, &wk);
    pthread_mutex_unlock(&s->mu);
    rt_img_worker_free(&wk.img);
    free(wk.buf);
    return NULL;
}

static Slot *free_slot(Src *s)
{
    for (int k = 0; k < s->nslot; k++)
        if (!s->slot[k].busy)
            return &s->slot[k];
    return NULL;
}

/* Queues a batch (caller holds mu; a slot is free). */
static Slot *enqueue(Src *s, int split, uint64_t epoch, int64_t seq, const int64_t *ids,
                     int64_t n, float *x, float *y)
{
    Slot *sl = free_slot(s);
    sl->busy = true;
    sl->seq = seq;
    sl->ticket = s->ticket++;
    sl->split = split;
    sl->epoch = epoch;
    sl->n = sl->limit = n;
    sl->claimed = sl->done = 0;
    memcpy(sl->ids, ids, (size_t)n * sizeof *ids);
    sl->x = x ? x : sl->own_x;
    sl->y = y ? y : sl->own_y;
    pthread_cond_broadcast(&s->work);
    return sl;
}

/* Stops claiming the planned batches, waits for those being decoded and
 * frees their slots (caller holds mu). */
static void cancel_plan(Src *s)
{
    s->planned = false;
    for (int k = 0; k < s->nslot; k++)
        if (s->slot[k].busy)
            s->slot[k].limit = s->slot[k].claimed;
    while (s->in_flight > 0)
        pthread_cond_wait(&s->done, &s->mu);
    for (int k = 0; k < s->nslot; k++)
        s->slot[k].busy = false;
}

/* Fills the free slots with the next planned batches (caller holds mu). */
static void top_up(Src *s)
{
    while (s->planned && s->enqueued < s->consumed + s->nslot &&
           (s->enqueued + 1) * s->b <= s->norder && free_slot(s)) {
        enqueue(s, RT_SPLIT_TRAIN, s->plan_epoch, s->enqueued, s->order + s->enqueued * s->b,
                s->b, NULL, NULL);
        s->enqueued++;
    }
}

static bool own_buffers(Src *s, int64_t n)
{
    if (n <= s->batch_cap)
        return true;
    for (int k = 0; k < s->nslot; k++) {
        Slot *sl = &s->slot[k];
        free(sl->ids);
        free(sl->own_x);
        free(sl->own_y);
        sl->ids = malloc((size_t)n * sizeof *sl->ids);
        sl->own_x = malloc((size_t)(n * s->sample) * sizeof *sl->own_x);
        sl->own_y = malloc((size_t)n * sizeof *sl->own_y);
        if (!sl->ids || !sl->own_x || !sl->own_y) {
            s->batch_cap = 0;
            return false;
        }
    }
    s->batch_cap = n;
    return true;
}

static void wait_slot(Src *s, Slot *sl)
{
    while (sl->done < sl->n)
        pthread_cond_wait(&s->done, &s->mu);
}

static void rec_fill(const RtDataset *ds, RtSplit split, const int64_t *idx, int64_t n, float *x,
                     float *y)
{
    Src *s = ds->src;
    pthread_mutex_lock(&s->mu);
    bool follows = split == RT_SPLIT_TRAIN && s->planned && (s->b == 0 || s->b == n) &&
                   (s->consumed + 1) * n <= s->norder &&
                   memcmp(idx, s->order + s->consumed * n, (size_t)n * sizeof *idx) == 0;
    if (s->planned && !follows)
        cancel_plan(s);
    if (!own_buffers(s, n)) {
        s->failed = true;
        snprintf(s->error, sizeof s->error, "recordio: out of memory for the decode queue");
        memset(x, 0, (size_t)(n * s->sample) * sizeof *x);
        memset(y, 0, (size_t)n * sizeof *y);
        pthread_mutex_unlock(&s->mu);
        return;
    }
    if (follows) {
        s->b = n;
        top_up(s);
        Slot *sl = NULL;
        for (int k = 0; k < s->nslot; k++)
            if (s->slot[k].busy && s->slot[k].seq == s->consumed)
                sl = &s->slot[k];
        wait_slot(s, sl);
        memcpy(x, sl->own_x, (size_t)(n * s->sample) * sizeof *x);
        memcpy(y, sl->own_y, (size_t)n * sizeof *y);
        sl->busy = false;
        s->consumed++;
        top_up(s);
    } else {
        Slot *sl = enqueue(s, split, s->plan_epoch, -1, idx, n, x, y);
        wait_slot(s, sl);
        sl->busy = false;
    }
    pthread_mutex_unlock(&s->mu);
}

static void rec_plan(const RtDataset *ds, int64_t epoch, const int64_t *order, int64_t n)
{
    Src *s = ds->src;
    pthread_mutex_lock(&s->mu);
    if (s->planned)
        cancel_plan(s);
    s->plan_epoch = (uint64_t)epoch;
    if (n > s->ncap) {
        int64_t *no = realloc(s->order, (size_t)n * sizeof *no);
        if (!no) { /* no plan: each batch is decoded when asked */
            pthread_mutex_unlock(&s->mu);
            return;
        }
        s->order = no;
        s->ncap = n;
    }
    memcpy(s->order, order, (size_t)n * sizeof *order);
    s->norder = n;
    s->b = 0;
    s->consumed = s->enqueued = 0;
    s->planned = true;
    pthread_mutex_unlock(&s->mu);
}

static const char *rec_error(const RtDataset *ds)
{
    Src *s = ds->src;
    pthread_mutex_lock(&s->mu);
    bool failed = s->failed;
    pthread_mutex_unlock(&s->mu);
    return failed ? s->error : NULL;
}

static void src_free(Src *s)
{
    if (s->thr) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_broadcast(&s->work);
        pthread_mutex_unlock(&s->mu);
        for (int k = 0; k < s->nthr; k++)
            pthread_join(s->thr[k], NULL);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->done);
    pthread_cond_destroy(&s->budget_cv);
    for (int k = 0; s->slot && k < s->nslot; k++) {
        free(s->slot[k].ids);
        free(s->slot[k].own_x);
        free(s->slot[k].own_y);
    }
    for (int k = 0; k < 2; k++) {
        if (s->file[k].fd >= 0)
            close(s->file[k].fd);
        free(s->ent[k]);
    }
    free(s->slot);
    free(s->thr);
    free(s->order);
    free(s);
}

static void rec_release(RtDataset *ds)
{
    src_free(ds->src);
    ds->src = NULL;
}

/* ---- opening ---------------------------------------------------------------------- */

/* PATH.idx for PATH.rec (or PATH + ".idx"): 1 when it exists, 0 when it
 * does not, -1 (with a message) when it exists but is not a regular file (a
 * FIFO, a device: never skipped silently, never opened). */
static int idx_beside(const char *rec, char *idx, size_t cap, char *err, size_t errlen)
{
    size_t n = strlen(rec);
    if (n >= 4 && strcmp(rec + n - 4, ".rec") == 0)
        snprintf(idx, cap, "%.*s.idx", (int)(n - 4), rec);
    else
        snprintf(idx, cap, "%s.idx", rec);
    struct stat st;
    if (lstat(idx, &st) != 0 && errno == ENOENT)
        return 0;
    int fd = rt_open_input(idx, "the RecordIO index", NULL, err, errlen);
    if (fd < 0)
        return -1;
    close(fd);
    return 1;
}

static bool open_split(Src *s, int k, const char *path, int64_t max_classes, char *err,
                       size_t errlen)
{
    RtRecFile *f = &s->file[k];
    f->path = path;
    f->fd = rt_open_input(path, "RecordIO file", &f->size, err, errlen);
    if (f->fd < 0)
        return false;
    char idx[1100];
    int64_t n;
    int has_idx = idx_beside(path, idx, sizeof idx, err, errlen);
    if (has_idx < 0 || !rt_rec_scan(f, has_idx ? idx : NULL, &s->ent[k], &n, err, errlen))
        return false;
    for (int64_t r = 0; r < n; r++) {
        float l = s->ent[k][r].label;
        if (!(l >= 0 && l < (float)max_classes && l == (float)(int64_t)l)) {
            snprintf(err, errlen, "%s: byte offset %lld: record %lld: label %g is not a class "
                     "0..%lld of the model", path, (long long)s->ent[k][r].off, (long long)r,
                     (double)l, (long long)max_classes - 1);
            return false;
        }
    }
    s->first[k] = 0;
    s->count[k] = n;
    return true;
}

bool rt_data_recordio(RtDataset *ds, const RtRecOptions *ro, int c, int h, int w,
                      int64_t max_classes, uint64_t seed, char *err, size_t errlen)
{
    memset(ds, 0, sizeof *ds);
    if (ro->part_index >= ro->num_parts) {
        snprintf(err, errlen, "recordio(): part_index %d is not below num_parts %d",
                 ro->part_index, ro->num_parts);
        return false;
    }
    if (ro->min_random_area > ro->max_random_area ||
        ro->min_aspect_ratio > ro->max_aspect_ratio) {
        snprintf(err, errlen, "recordio(): min_random_area/min_aspect_ratio above the max_");
        return false;
    }
    if (!rt_img_libs(err, errlen))
        return false;
    Src *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "recordio: out of memory");
        return false;
    }
    s->o = *ro;
    s->c = c;
    s->h = h;
    s->w = w;
    s->seed = seed;
    s->sample = (int64_t)c * h * w;
    s->file[0].fd = s->file[1].fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->done, NULL);
    pthread_cond_init(&s->budget_cv, NULL);
    s->budget = budget_bytes(ro->decode_mb);
    bool ok = open_split(s, RT_SPLIT_TRAIN, s->o.train, max_classes, err, errlen) &&
              (!s->o.val[0] || open_split(s, RT_SPLIT_VAL, s->o.val, max_classes, err, errlen));
    /* the shard: equal parts, contiguous as MXNet's byte ranges, the
     * remainder of the division left out */
    int64_t all = s->count[0], per = all / ro->num_parts;
    if (ok && per == 0) {
        snprintf(err, errlen, "%s: %lld records cannot make %d parts", s->o.train,
                 (long long)all, ro->num_parts);
        ok = false;
    }
    s->first[0] = per * ro->part_index;
    s->count[0] = per;
    s->nthr = ro->threads > 0 ? ro->threads : 1;
    s->nslot = ro->prefetch + 1;
    s->slot = ok ? calloc((size_t)s->nslot, sizeof *s->slot) : NULL;
    s->thr = ok ? calloc((size_t)s->nthr, sizeof *s->thr) : NULL;
    if (ok && (!s->slot || !s->thr)) {
        snprintf(err, errlen, "recordio: out of memory");
        ok = false;
    }
    int started = 0;
    for (; ok && started < s->nthr; started++)
        if (pthread_create(&s->thr[started], NULL, worker_main, s) != 0) {
            snprintf(err, errlen, "recordio: cannot start decoding thread %d", started + 1);
            ok = false;
            break;
        }
    s->nthr = started;
    if (!ok) {
        if (!started) {
            free(s->thr);
            s->thr = NULL;
        }
        src_free(s);
        return false;
    }
    ds->name = "recordio";
    ds->sample_size = s->sample;
    ds->classes = max_classes;
    ds->ntrain = s->count[0];
    ds->nval = s->count[1];
    ds->image[0] = c;
    ds->image[1] = h;
    ds->image[2] = w;
    ds->seed = seed;
    ds->src = s;
    ds->fill = rec_fill;
    ds->plan = rec_plan;
    ds->error = rec_error;
    ds->release = rec_release;
    ds->summary = s->summary;
    snprintf(s->summary, sizeof s->summary, "RecordIO %s: %lld records (part %d of %d: %lld), %s%s%lld "
             "validation records; %d decoding threads sharing %lld MiB, %d batches ahead",
             s->o.train, (long long)all, ro->part_index + 1, ro->num_parts, (long long)per,
             s->o.val[0] ? s->o.val : "", s->o.val[0] ? ": " : "", (long long)s->count[1],
             s->nthr, (long long)(s->budget >> 20), ro->prefetch);
    return true;
}
