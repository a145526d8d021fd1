/* rankcheck.c - the start-up check of a data-parallel run (rankcheck.h;
 * docs/kvstore.md, "The start-up check"): each rank's record of its run,
 * exchanged and compared with rank 0's, field by field, by name. */
#include "rankcheck.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/coll.h"

/* ---- hashes of what a field cannot spell out ---------------------------------------- */

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t h_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * FNV_PRIME;
    return h;
}

static uint64_t h_str(uint64_t h, const char *s)
{
    return h_bytes(h, s ? s : "", s ? strlen(s) + 1 : 1);
}
static uint64_t h_u64(uint64_t h, uint64_t v) { return h_bytes(h, &v, sizeof v); }

/* Floats a word at a time (a checkpoint's tensors: tens of millions). */
static uint64_t h_floats(uint64_t h, const float *v, int64_t n)
{
    for (int64_t i = 0; v && i < n; i++) {
        uint32_t w;
        memcpy(&w, &v[i], sizeof w);
        h = (h ^ w) * FNV_PRIME;
    }
    return h;
}

/* A float as the shortest decimal that reads back to it ("0.1", not
 * "0.100000001"), so that two values that print alike are alike. */
typedef struct {
    char s[32];
} F32;

static F32 f32(float v)
{
    F32 o;
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(o.s, sizeof o.s, "%.*g", digits, (double)v);
        if (strtof(o.s, NULL) == v || v != v)
            break;
    }
    return o;
}

/* ---- the record -------------------------------------------------------------------- */

void rt_rank_record_init(RtRankRecord *r)
{
    memset(r, 0, sizeof *r);
    r->magic = RT_RANK_MAGIC;
    r->version = RT_RANK_VERSION;
    r->size = (uint32_t)sizeof *r;
}

void rt_rank_field(RtRankRecord *r, const char *name, const char *fmt, ...)
{
    if (r->nfields >= RT_RANK_NFIELDS)
        return; /* a new field needs room: RT_RANK_NFIELDS (the unit test counts) */
    RtRankField *f = &r->field[r->nfields++];
    snprintf(f->name, sizeof f->name, "%s", name);
    char full[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(full, sizeof full, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof f->value) {
        memcpy(f->value, full, (size_t)n + 1);
        return;
    }
    /* too long: its start and a hash of the whole */
    snprintf(f->value, sizeof f->value, "%.60s... #%016llx", full,
             (unsigned long long)h_str(FNV_OFFSET, full));
}

static uint64_t params_hash(const RtModel *m)
{
    uint64_t h = FNV_OFFSET;
    for (int i = 0; i < m->nparams; i++) {
        const RtParam *p = &m->params[i];
        h = h_str(h, p->name);
        int64_t v[] = {p->kind, p->dtype, p->has_master, p->rank, p->layout, p->grad >= 0};
        h = h_bytes(h, v, sizeof v);
        h = h_bytes(h, p->shape, sizeof p->shape[0] * (size_t)(p->rank > 0 ? p->rank : 0));
    }
    return h;
}

static uint64_t multipliers_hash(const RtModel *m)
{
    uint64_t h = FNV_OFFSET;
    for (int i = 0; i < m->nparams; i++) {
        float v[] = {m->params[i].lr_mult, m->params[i].wd_mult};
        h = h_bytes(h, v, sizeof v);
    }
    return h;
}

static void kv_field(RtRankRecord *r, const RtModel *m)
{
    uint64_t h = FNV_OFFSET;
    int nb = m->kv_nbuckets > 0 && m->kv_bucket_start && m->kv_bucket_params ? m->kv_nbuckets : 0;
    for (int b = 0; nb && b <= nb; b++)
        h = h_u64(h, (uint64_t)m->kv_bucket_start[b]);
    for (int j = 0; nb && j < m->kv_bucket_start[nb]; j++)
        h = h_u64(h, (uint64_t)m->kv_bucket_params[j]);
    const char *place = m->kv_place ? rt_kv_place_name(m->kv_place) : "unplaced";
    if (nb)
        rt_rank_field(r, "kvstore buckets", "%s, %d buckets #%016llx", place, nb,
                      (unsigned long long)h);
    else
        rt_rank_field(r, "kvstore buckets", "%s, the engine's own buckets", place);
}

static void loss_scale_field(RtRankRecord *r, const RtTrainOptions *o, const char *amp)
{
    const RtLossScaleConfig *c = &o->loss_scale;
    switch (rt_loss_scale_mode(c, amp)) {
    case RT_LS_DYNAMIC:
        rt_rank_field(r, "loss scale",
                      "dynamic(init=%s, growth=%s, backoff=%s, interval=%d, "
                      "min=%s, max=%s)",
                      f32(c->init).s, f32(c->growth).s, f32(c->backoff).s, (int)c->interval,
                      f32(c->min_scale).s, f32(c->max_scale).s);
        break;
    case RT_LS_STATIC: rt_rank_field(r, "loss scale", "static(%s)", f32(c->init).s); break;
    default: rt_rank_field(r, "loss scale", "off"); break;
    }
}

static void optimizer_field(RtRankRecord *r, const RtTrainOptions *o)
{
    F32 c = f32(o->clip_gradient);
    const char *clip = o->clip_gradient > 0 ? c.s : "off";
    if (o->optimizer == RT_OPT_ADAM)
        rt_rank_field(r, "optimizer", "adam(beta1=%s, beta2=%s, epsilon=%s, clip_gradient=%s)",
                      f32(o->beta1).s, f32(o->beta2).s, f32(o->epsilon).s, clip);
    else
        rt_rank_field(r, "optimizer", "%s(clip_gradient=%s)",
                      o->optimizer == RT_OPT_NAG ? "nag" : "sgd", clip);
}

static void schedule_field(RtRankRecord *r, const RtLrSchedule *s)
{
    char what[512] = "", warm[160] = "", steps[400] = "";
    size_t at = 0;
    for (int i = 0; i < s->nsteps && i < RT_LR_MAX_STEPS && at < sizeof steps - 24; i++)
        at += (size_t)snprintf(steps + at, sizeof steps - at, "%s%lld", i ? "," : "",
                               (long long)s->steps[i]);
    const char *mode = s->warmup_mode == RT_WARMUP_CONSTANT ? "constant" : "linear";
    if (s->warmup_steps > 0)
        snprintf(warm, sizeof warm, ", warmup %lld updates from %s (%s)",
                 (long long)s->warmup_steps, f32(s->warmup_begin).s, mode);
    else if (s->warmup_epochs > 0)
        snprintf(warm, sizeof warm, ", warmup %s epochs from %s (%s)", f32(s->warmup_epochs).s,
                 f32(s->warmup_begin).s, mode);
    switch (s->kind) {
    case RT_LR_COSINE:
        snprintf(what, sizeof what, "cosine(final=%s, max_update=%lld%s)", f32(s->final_lr).s,
                 (long long)s->max_update, warm);
        break;
    case RT_LR_POLY:
        snprintf(what, sizeof what, "poly(final=%s, power=%s, max_update=%lld%s)",
                 f32(s->final_lr).s, f32(s->power).s, (long long)s->max_update, warm);
        break;
    case RT_LR_STEP:
        if (s->period > 0)
            snprintf(what, sizeof what, "step(factor=%s, every %lld updates, stop=%s%s)",
                     f32(s->factor).s, (long long)s->period, f32(s->stop_lr).s, warm);
        else
            snprintf(what, sizeof what, "step(factor=%s, at %s %s%s)", f32(s->factor).s, steps,
                     s->steps_in_epochs ? "epochs" : "updates", warm);
        break;
    default: snprintf(what, sizeof what, "constant%s", warm); break;
    }
    rt_rank_field(r, "lr schedule", "%s", what);
}

static void data_fields(RtRankRecord *r, const RtDataset *ds, int64_t steps_per_epoch)
{
    rt_rank_field(r, "data source", "%s", ds->name ? ds->name : "?");
    if (ds->image[0] || ds->image[1] || ds->image[2])
        rt_rank_field(r, "sample shape", "%lldx%lldx%lld", (long long)ds->image[0],
                      (long long)ds->image[1], (long long)ds->image[2]);
    else
        rt_rank_field(r, "sample shape", "%lld values", (long long)ds->sample_size);
    rt_rank_field(r, "classes", "%lld", (long long)ds->classes);
    rt_rank_field(r, "samples per epoch", "%lld", (long long)ds->ntrain);
    rt_rank_field(r, "steps per epoch", "%lld", (long long)steps_per_epoch);
}

static void resume_fields(RtRankRecord *r, const RtCheckpoint *ck)
{
    if (!ck) {
        static const char *const names[] = {"resume step", "resume epoch", "resume loss scale",
                                            "resume parameters"};
        for (int i = 0; i < 4; i++)
            rt_rank_field(r, names[i], "none (not resuming)");
        return;
    }
    rt_rank_field(r, "resume step", "%lld", (long long)ck->run.step);
    rt_rank_field(r, "resume epoch", "%lld (batch %lld)", (long long)ck->run.epoch,
                  (long long)ck->run.batch_in_epoch);
    rt_rank_field(r, "resume loss scale", "%s (%lld clean steps)", f32(ck->run.ls.s.scale).s,
                  (long long)ck->run.ls.s.tracker);
    uint64_t h = FNV_OFFSET;
    for (int i = 0; i < ck->nparams; i++) {
        const RtCkptParam *p = &ck->params[i];
        h = h_str(h, p->name);
        h = h_floats(h, p->values, p->numel);
        h = h_floats(h, p->state, p->numel);
        h = h_floats(h, p->state2, p->numel);
    }
    rt_rank_field(r, "resume parameters", "%d tensors #%016llx", ck->nparams,
                  (unsigned long long)h);
}

void rt_rank_record_make(const RtRankInfo *in, RtRankRecord *r)
{
    const RtModel *m = in->m;
    const RtTrainOptions *o = in->o;
    const char *amp = m->amp ? m->amp : "off";
    rt_rank_record_init(r);
    /* the program */
    rt_rank_field(r, "model", "%s", m->name);
    rt_rank_field(r, "parameters", "%d tensors #%016llx", m->nparams,
                  (unsigned long long)params_hash(m));
    rt_rank_field(r, "amp", "%s", amp);
    rt_rank_field(r, "lr/wd multipliers", "#%016llx", (unsigned long long)multipliers_hash(m));
    kv_field(r, m);
    rt_rank_field(r, "kv wire", "%s", m->kv_wire ? m->kv_wire : "each gradient's own dtype");
    /* ampc stamped a hash of the emitted C and its version; the runtime adds its own */
    uint64_t id = h_str(h_u64(FNV_OFFSET, m->build_id), RT_RUNTIME_VERSION);
    rt_rank_field(r, "build id", "%016llx (C and ampc %016llx, runtime %s)", (unsigned long long)id,
                  (unsigned long long)m->build_id, RT_RUNTIME_VERSION);
    rt_rank_field(r, "world size", "%d", in->world);
    /* the run */
    rt_rank_field(r, "global batch", "%lld", (long long)in->global_batch);
    rt_rank_field(r, "batch per rank", "%lld", (long long)in->batch);
    loss_scale_field(r, o, amp);
    optimizer_field(r, o);
    rt_rank_field(r, "lr", "%s", f32(o->lr).s);
    schedule_field(r, &o->sched);
    rt_rank_field(r, "momentum", "%s", f32(o->momentum).s);
    rt_rank_field(r, "wd", "%s", f32(o->wd).s);
    rt_rank_field(r, "seed", "%llu", (unsigned long long)in->seed);
    data_fields(r, in->ds, in->steps_per_epoch);
    rt_rank_field(r, "epochs", "%d", o->epochs);
    if (o->max_steps >= 0)
        rt_rank_field(r, "max steps", "%lld", (long long)o->max_steps);
    else
        rt_rank_field(r, "max steps", "none");
    rt_rank_field(r, "--mpi-bucket-mb", "%s", f32(o->mpi_bucket_mb).s);
    resume_fields(r, in->ck);
}

/* ---- the comparison ------------------------------------------------------------------ */

/* The header of the record at p (RT_RANK_WIRE bytes); false when it is not
 * one of ours or does not fit. */
static bool header(const uint8_t *p, RtRankRecord *h)
{
    memcpy(h, p, offsetof(RtRankRecord, field));
    return h->magic == RT_RANK_MAGIC && h->size <= RT_RANK_WIRE &&
           h->size >= offsetof(RtRankRecord, field) &&
           (size_t)h->nfields <= (h->size - offsetof(RtRankRecord, field)) / sizeof(RtRankField);
}

static void field_at(const uint8_t *p, uint32_t i, RtRankField *f)
{
    memcpy(f, p + offsetof(RtRankRecord, field) + (size_t)i * sizeof *f, sizeof *f);
    f->name[sizeof f->name - 1] = 0;
    f->value[sizeof f->value - 1] = 0;
}

/* The index of the field called name in the record at p, or -1. */
static int find_field(const uint8_t *p, const RtRankRecord *h, const char *name, RtRankField *f)
{
    for (uint32_t i = 0; i < h->nfields; i++) {
        field_at(p, i, f);
        if (strcmp(f->name, name) == 0)
            return (int)i;
    }
    return -1;
}

/* Rank r's record against rank 0's: the fields that differ, in rank 0's
 * order then r's own; the first spelled out in msg. */
static int compare(const uint8_t *r0, const uint8_t *rr, int r, char *msg, size_t cap)
{
    RtRankRecord h0, hr;
    bool ok0 = header(r0, &h0), okr = header(rr, &hr);
    if (!ok0 || !okr) {
        uint32_t magic;
        memcpy(&magic, ok0 ? rr : r0, sizeof magic);
        snprintf(msg, cap,
                 "rank %d's start-up record is not an ampc runtime's (magic 0x%08x, "
                 "size or fields out of range): another program, or one built before the "
                 "start-up check",
                 ok0 ? r : 0, (unsigned)magic);
        return 1;
    }
    int ndiff = 0;
    char first[512] = "", more[512] = "";
    size_t at = 0;
    RtRankField f0, fr;
    for (int pass = 0; pass < 2; pass++) { /* rank 0's fields, then those only rank r has */
        const uint8_t *a = pass ? rr : r0, *b = pass ? r0 : rr;
        const RtRankRecord *ha = pass ? &hr : &h0, *hb = pass ? &h0 : &hr;
        for (uint32_t i = 0; i < ha->nfields; i++) {
            field_at(a, i, &f0);
            bool there = find_field(b, hb, f0.name, &fr) >= 0;
            if ((pass && there) || (there && strcmp(f0.value, fr.value) == 0))
                continue;
            const char *v0 = pass ? "(no such field)" : f0.value;
            const char *vr = pass ? f0.value : there ? fr.value : "(no such field)";
            if (ndiff++ == 0)
                snprintf(first, sizeof first, "rank %d's %s is %s where rank 0's is %s", r, f0.name,
                         vr, v0);
            else if (at < sizeof more - 40)
                at +=
                    (size_t)snprintf(more + at, sizeof more - at, "%s%s", at ? ", " : "", f0.name);
        }
    }
    if (!ndiff) /* another version of the record with the same fields agrees too */
        return 0;
    snprintf(msg, cap,
             "the ranks do not run the same training: %s%s%s%s; every rank must run "
             "the same program with the same settings (docs/kvstore.md, \"The start-up check\")",
             first, ndiff > 1 ? " (also " : "", more, ndiff > 1 ? ")" : "");
    return 1;
}

int rt_rank_records_differ(const uint8_t *all, int world, char *msg, size_t cap)
{
    for (int r = 1; r < world; r++)
        if (compare(all, all + (size_t)r * RT_RANK_WIRE, r, msg, cap))
            return r;
    return -1;
}

int rt_rank_check(const RtRankRecord *mine, int world, RtGatherFn gather, void *self, char *msg,
                  size_t cap)
{
    if (world <= 1)
        return 0;
    uint8_t *wire = calloc(1, RT_RANK_WIRE);
    uint8_t *all = calloc((size_t)world, RT_RANK_WIRE);
    if (!wire || !all) {
        free(wire);
        free(all);
        snprintf(msg, cap, "out of memory for the start-up check of %d ranks", world);
        return -1;
    }
    memcpy(wire, mine, sizeof *mine);
    int rc = !gather(self, wire, all, RT_RANK_WIRE, msg, cap)    ? -1
             : rt_rank_records_differ(all, world, msg, cap) >= 0 ? 1
                                                                 : 0;
    free(wire);
    free(all);
    return rc;
}
