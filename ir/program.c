/* program.c - the lowered program's text form: print, read back, verify
 * (plan.h).  codegen/lower.c makes a program from the training graph and
 * its plans.
 *
 *   # ampc program 1
 *   model "mlp"
 *   arena 68928+1664N align 64
 *   buffer 0 input f32 0+64N "data"
 *   buffer 4 value f32 0+128N @68928+0N "dense1_fc1"
 *   step train
 *   call %4 FullyConnected cpu ws in=(0,2,3) out=(4)
 *   results (13,16,17)
 *   end
 *
 * `align`: every buffer starts at a multiple of it, at least 16 (the vector
 * kernels' promise): arena offsets are multiples, and the runtime places
 * the others so (RT_DEV_ALIGN).
 * Buffer sizes are elements (fixed+per_sampleN), offsets bytes; `-` is an
 * argument the kernel leaves alone, `mK` the fp32 master of parameter K.
 * When the kvstore pass ran (passes/kvstore.c, docs/kvstore.md), the
 * gradient placement follows the steps, before `end`: a `kvstore` line,
 * one `kvbucket` per bucket and one `kvoption` per placement.
 * The reader trusts nothing: program_verify re-derives every step's
 * liveness from its calls and proves the offsets against it. */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

const char *step_name(StepKind k)
{
    static const char *const n[] = {"train", "moving_update", "infer"};
    return n[k];
}

const char *kv_place_name(KvPlace k)
{
    static const char *const n[] = {"local", "device", "nccl", "dist_sync"};
    return n[k];
}

const char *placement_name(Placement p)
{
    (void)p;
    return "cpu";
}

static const char *const kind_names[] = {"value", "param", "input"};

void program_free(Program *p)
{
    arena_free(&p->a);
    memset(p, 0, sizeof *p);
}

/* ---- printing -------------------------------------------------------------- */

void program_put_name(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++)
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c < 0x20 || *c > 0x7e)
            fprintf(f, "\\%03o", *c);
        else
            fputc(*c, f);
    fputc('"', f);
}

static void put_args(FILE *f, const char *what, const int *a, int n)
{
    if (what)
        fprintf(f, " %s=(", what);
    else
        fputs(" (", f);
    for (int i = 0; i < n; i++) {
        if (i)
            fputc(',', f);
        if (a[i] == -1)
            fputc('-', f);
        else if (a[i] <= -2)
            fprintf(f, "m%d", -2 - a[i]);
        else
            fprintf(f, "%d", a[i]);
    }
    fputc(')', f);
}

/* the gradient placement (passes/kvstore.c):
 *   kvstore nccl wire=f16 devices=8 machines=1 bucket_cap=26214400
 *   kvbucket 0 bytes=1024 grads=(12,15)
 *   kvoption local 123456us      (or `-`: not available) */
static void print_kv(FILE *f, const KvPlan *kv)
{
    fprintf(f, "kvstore %s wire=%s devices=%d machines=%d bucket_cap=%lld\n",
            kv_place_name(kv->place), dtype_short(kv->wire), kv->devices, kv->machines,
            (long long)kv->bucket_cap);
    for (int b = 0; b < kv->nbuckets; b++) {
        fprintf(f, "kvbucket %d bytes=%lld", b, (long long)kv->buckets[b].bytes);
        put_args(f, "grads", kv->buckets[b].bufs, kv->buckets[b].nbufs);
        fputc('\n', f);
    }
    for (int k = 0; k < KV_COUNT; k++)
        if (kv->step_us[k] < 0)
            fprintf(f, "kvoption %s -\n", kv_place_name((KvPlace)k));
        else
            fprintf(f, "kvoption %s %lldus\n", kv_place_name((KvPlace)k), (long long)kv->step_us[k]);
}

void program_print(FILE *f, const Program *p) { program_print_with(f, p, NULL); }

void program_print_with(FILE *f, const Program *p, const char *header)
{
    fputs("# ampc program 1\n", f);
    if (header)
        fputs(header, f);
    fputs("model ", f);
    program_put_name(f, p->model ? p->model : "");
    fprintf(f, "\narena %lld+%lldN align %d\n", (long long)p->arena.fixed,
            (long long)p->arena.per_sample, p->align);
    for (int i = 0; i < p->nbuf; i++) {
        const ProgBuffer *b = &p->buf[i];
        fprintf(f, "buffer %d %s %s %lld+%lldN ", i, kind_names[b->kind], dtype_short(b->dtype),
                (long long)b->elems.fixed, (long long)b->elems.per_sample);
        if (b->layout != LAYOUT_NCHW)
            fprintf(f, "%s ", layout_name(b->layout));
        if (b->in_arena)
            fprintf(f, "@%lld+%lldN ", (long long)b->offset.fixed, (long long)b->offset.per_sample);
        program_put_name(f, b->name ? b->name : "");
        fputc('\n', f);
    }
    for (int k = 0; k < STEP_COUNT; k++) {
        const ProgStep *s = &p->step[k];
        fprintf(f, "step %s\n", step_name((StepKind)k));
        for (int c = 0; c < s->ncalls; c++) {
            const ProgCall *x = &s->calls[c];
            fprintf(f, "call %%%d %s %s%s", x->node, op_info(x->op)->name, placement_name(x->place),
                    x->workspace ? " ws" : "");
            put_args(f, "in", x->in, x->nin);
            put_args(f, "out", x->out, x->nout);
            fputc('\n', f);
        }
        fputs("results", f);
        put_args(f, NULL, s->results, s->nresults);
        fputc('\n', f);
    }
    if (p->kv.set)
        print_kv(f, &p->kv);
    fputs("end\n", f);
}

void program_grad_ready(const Program *p, int *ready)
{
    const ProgStep *s = &p->step[STEP_TRAIN];
    for (int k = 0; k < p->nparams; k++) {
        ready[k] = -1;
        for (int c = 0; p->param_grad[k] >= 0 && c < s->ncalls; c++)
            for (int j = 0; j < s->calls[c].nout; j++)
                if (s->calls[c].out[j] == p->param_grad[k])
                    ready[k] = c;
    }
}

/* ---- reading --------------------------------------------------------------- */

typedef struct {
    Diag *d;
    int file;
    const char *p, *end, *line;
    int lineno;
    Program *out;
    bool ok;
} Rd;

static bool rd_fail(Rd *r, const char *what)
{
    if (r->ok) {
        Loc l = {r->file, r->lineno, (int)(r->p - r->line) + 1};
        diag_error(r->d, l, "%s", what);
    }
    r->ok = false;
    return false;
}

static bool lit(Rd *r, const char *s)
{
    size_t n = strlen(s);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, s, n) != 0)
        return false;
    r->p += n;
    return true;
}

static bool expect(Rd *r, const char *s)
{
    if (lit(r, s))
        return true;
    char m[96];
    snprintf(m, sizeof m, "expected '%s' in a program dump", s);
    return rd_fail(r, m);
}

static bool num(Rd *r, int64_t *v)
{
    bool neg = lit(r, "-");
    if (r->p >= r->end || *r->p < '0' || *r->p > '9')
        return rd_fail(r, "expected a number");
    int64_t x = 0;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
        if (__builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, *r->p - '0', &x))
            return rd_fail(r, "a number out of range");
        r->p++;
    }
    *v = neg ? -x : x;
    return true;
}

static bool small(Rd *r, int *v)
{
    int64_t x;
    if (!num(r, &x))
        return false;
    if (x < -2 || x > (1 << 30))
        return rd_fail(r, "a number out of range");
    *v = (int)x;
    return true;
}

static bool lin_expr(Rd *r, LinExpr *e)
{
    return num(r, &e->fixed) && expect(r, "+") && num(r, &e->per_sample) && expect(r, "N");
}

static bool word(Rd *r, char *buf, size_t cap)
{
    size_t n = 0;
    while (r->p < r->end && *r->p != ' ' && *r->p != '\n' && *r->p != '(' && n + 1 < cap)
        buf[n++] = *r->p++;
    buf[n] = 0;
    if (n == 0 || (r->p < r->end && *r->p != ' ' && *r->p != '\n' && *r->p != '('))
        return rd_fail(r, "expected a word");
    return true;
}

static bool string(Rd *r, const char **out)
{
    if (!expect(r, "\""))
        return false;
    const char *q = r->p; /* the string's extent first: its escapes only shrink it */
    while (q < r->end && *q != '"' && *q != '\n')
        q += *q == '\\' && q + 1 < r->end ? 2 : 1;
    char *s = arena_alloc(&r->out->a, (size_t)(q - r->p) + 1);
    size_t n = 0;
    while (r->p < r->end && *r->p != '"' && *r->p != '\n') {
        char c = *r->p++;
        if (c == '\\' && r->p < r->end && (*r->p == '"' || *r->p == '\\')) {
            c = *r->p++;
        } else if (c == '\\' && r->end - r->p >= 3) {
            int v = 0;
            for (int k = 0; k < 3; k++) {
                if (r->p[k] < '0' || r->p[k] > '7')
                    return rd_fail(r, "a bad escape in a string");
                v = v * 8 + (r->p[k] - '0');
            }
            if (v == 0 || v > 255)
                return rd_fail(r, "a bad escape in a string");
            c = (char)v;
            r->p += 3;
        } else if (c == '\\') {
            return rd_fail(r, "a bad escape in a string");
        }
        s[n++] = c;
    }
    s[n] = 0;
    *out = s;
    return expect(r, "\"");
}

static bool eol(Rd *r)
{
    if (!expect(r, "\n"))
        return false;
    r->lineno++;
    r->line = r->p;
    return true;
}

/* "(a,b,-,m3)" into an arena array */
static bool args(Rd *r, int **out, int *n)
{
    if (!expect(r, "("))
        return false;
    Vec v = {0};
    while (r->ok && !lit(r, ")")) {
        if (v.len && !expect(r, ","))
            break;
        int x;
        if (lit(r, "-"))
            x = -1;
        else if (lit(r, "m") && small(r, &x))
            x = -2 - x;
        else if (!small(r, &x) || x < 0)
            rd_fail(r, "expected a buffer number, '-' or mK");
        if (!r->ok)
            break;
        *(int *)vec_push(&v, sizeof(int)) = x;
    }
    *n = v.len;
    *out = arena_alloc(&r->out->a, sizeof(int) * (size_t)(v.len + 1));
    if (v.len)
        memcpy(*out, v.data, sizeof(int) * (size_t)v.len);
    vec_free(&v);
    return r->ok;
}

static bool read_buffer(Rd *r, Vec *bufs)
{
    int64_t idx;
    char kind[16], dt[16];
    if (!num(r, &idx) || !expect(r, " ") || !word(r, kind, sizeof kind) || !expect(r, " ") ||
        !word(r, dt, sizeof dt) || !expect(r, " "))
        return false;
    if (idx != bufs->len)
        return rd_fail(r, "buffers must be numbered 0, 1, 2, ... in order");
    ProgBuffer *b = vec_push(bufs, sizeof(ProgBuffer));
    memset(b, 0, sizeof *b);
    int k = 0;
    while (k < 3 && strcmp(kind_names[k], kind) != 0)
        k++;
    if (k == 3)
        return rd_fail(r, "a buffer kind is value, param or input");
    b->kind = (ProgBufKind)k;
    b->dtype = dtype_parse(dt);
    if (b->dtype == DT_UNKNOWN)
        return rd_fail(r, "an unknown dtype");
    if (!lin_expr(r, &b->elems) || !expect(r, " "))
        return false;
    if (lit(r, "nhwc "))
        b->layout = LAYOUT_NHWC;
    if (lit(r, "@")) {
        b->in_arena = true;
        if (!lin_expr(r, &b->offset) || !expect(r, " "))
            return false;
    }
    return string(r, &b->name) && eol(r);
}

static bool read_step(Rd *r, StepKind k)
{
    ProgStep *s = &r->out->step[k];
    if (!expect(r, "step ") || !expect(r, step_name(k)) || !eol(r))
        return false;
    Vec calls = {0};
    while (r->ok && lit(r, "call %")) {
        ProgCall *c = vec_push(&calls, sizeof(ProgCall));
        memset(c, 0, sizeof *c);
        char op[64], place[16];
        if (!small(r, &c->node) || c->node < 0 || !expect(r, " ") || !word(r, op, sizeof op) ||
            !expect(r, " ") || !word(r, place, sizeof place))
            break;
        c->op = op_lookup(op);
        if (c->op == OP_COUNT) {
            rd_fail(r, "an unknown op");
            break;
        }
        if (strcmp(place, "cpu") != 0) {
            rd_fail(r, "an unknown placement (cpu is the only one)");
            break;
        }
        c->workspace = lit(r, " ws");
        if (!expect(r, " in=") || !args(r, &c->in, &c->nin) || !expect(r, " out=") ||
            !args(r, &c->out, &c->nout) || !eol(r))
            break;
    }
    s->ncalls = calls.len;
    s->calls = arena_alloc(&r->out->a, sizeof(ProgCall) * (size_t)(calls.len + 1));
    if (calls.len)
        memcpy(s->calls, calls.data, sizeof(ProgCall) * (size_t)calls.len);
    vec_free(&calls);
    return r->ok && expect(r, "results ") && args(r, &s->results, &s->nresults) && eol(r);
}

/* int in [lo, hi] */
static bool ranged(Rd *r, int64_t lo, int64_t hi, int64_t *v)
{
    if (!num(r, v))
        return false;
    if (*v < lo || *v > hi)
        return rd_fail(r, "a number out of range");
    return true;
}

static bool read_kv_head(Rd *r, KvPlan *kv)
{
    char place[16], wire[16];
    int64_t dev, mach;
    if (!word(r, place, sizeof place) || !expect(r, " wire=") || !word(r, wire, sizeof wire) ||
        !expect(r, " devices=") || !ranged(r, 0, 1 << 20, &dev) || !expect(r, " machines=") ||
        !ranged(r, 1, 1 << 20, &mach) || !expect(r, " bucket_cap=") ||
        !ranged(r, 0, INT64_MAX, &kv->bucket_cap) || !eol(r))
        return false;
    int k = 0;
    while (k < KV_COUNT && strcmp(kv_place_name((KvPlace)k), place) != 0)
        k++;
    if (k == KV_COUNT)
        return rd_fail(r, "an unknown kvstore (local, device, nccl or dist_sync)");
    kv->place = (KvPlace)k;
    kv->wire = dtype_parse(wire);
    if (kv->wire == DT_UNKNOWN)
        return rd_fail(r, "an unknown dtype");
    kv->devices = (int)dev;
    kv->machines = (int)mach;
    kv->set = true;
    return true;
}

/* the lines print_kv writes, after `kvstore ` */
static bool read_kv(Rd *r, KvPlan *kv)
{
    if (!read_kv_head(r, kv))
        return false;
    Vec bk = {0};
    while (r->ok && lit(r, "kvbucket ")) {
        KvBucket *b = vec_push(&bk, sizeof(KvBucket));
        memset(b, 0, sizeof *b);
        int64_t idx;
        if (!num(r, &idx))
            break;
        if (idx != bk.len - 1) {
            rd_fail(r, "buckets must be numbered 0, 1, 2, ... in order");
            break;
        }
        if (!expect(r, " bytes=") || !ranged(r, 0, INT64_MAX, &b->bytes) || !expect(r, " grads=") ||
            !args(r, &b->bufs, &b->nbufs) || !eol(r))
            break;
    }
    kv->nbuckets = bk.len;
    kv->buckets = arena_alloc(&r->out->a, sizeof(KvBucket) * (size_t)(bk.len + 1));
    if (bk.len)
        memcpy(kv->buckets, bk.data, sizeof(KvBucket) * (size_t)bk.len);
    vec_free(&bk);
    for (int k = 0; r->ok && k < KV_COUNT; k++) {
        if (!expect(r, "kvoption ") || !expect(r, kv_place_name((KvPlace)k)) || !expect(r, " "))
            return false;
        if (lit(r, "-"))
            kv->step_us[k] = -1;
        else if (!ranged(r, 0, INT64_MAX, &kv->step_us[k]) || !expect(r, "us"))
            return false;
        if (!eol(r))
            return false;
    }
    return r->ok;
}

bool program_read(Diag *d, int file, Program *out)
{
    const SrcFile *f = diag_file(d, file);
    memset(out, 0, sizeof *out);
    arena_init(&out->a);
    Rd r = {.d = d, .file = file, .p = f->text, .end = f->text + f->len, .line = f->text,
            .lineno = 1, .out = out, .ok = true};
    Vec bufs = {0};
    /* the provenance line (docs/ci.md) says how the dump was made: skipped */
    bool head = expect(&r, "# ampc program 1") && eol(&r);
    if (head && lit(&r, "# provenance: ")) {
        while (r.p < r.end && *r.p != '\n')
            r.p++;
        head = eol(&r);
    }
    int64_t align = 0;
    if (head && expect(&r, "model ") && string(&r, &out->model) && eol(&r) &&
        expect(&r, "arena ") && lin_expr(&r, &out->arena) && expect(&r, " align ") &&
        ranged(&r, 1, 1 << 20, &align) && eol(&r))
        while (r.ok && lit(&r, "buffer "))
            read_buffer(&r, &bufs);
    out->align = (int)align;
    out->nbuf = bufs.len;
    out->buf = arena_alloc(&out->a, sizeof(ProgBuffer) * (size_t)(bufs.len + 1));
    if (bufs.len)
        memcpy(out->buf, bufs.data, sizeof(ProgBuffer) * (size_t)bufs.len);
    vec_free(&bufs);
    for (int k = 0; r.ok && k < STEP_COUNT; k++)
        read_step(&r, (StepKind)k);
    if (r.ok && lit(&r, "kvstore "))
        read_kv(&r, &out->kv);
    if (r.ok && expect(&r, "end") && eol(&r) && r.p != r.end)
        rd_fail(&r, "text after 'end'");
    return r.ok;
}

/* ---- verifying --------------------------------------------------------------- */

#define ERR(...) (ok = false, err ? (void)fprintf(err, __VA_ARGS__) : (void)0)

static bool arg_ok(const Program *p, int a) { return a == -1 || (a <= -2) || a < p->nbuf; }

/* The calls of `steps` run one after another (moving_update continues the
 * train step: it reads what that step wrote), as one sequence to prove. */
static bool verify_sequence(const Program *p, const StepKind *steps, int nsteps, int results_of,
                            FILE *err)
{
    bool ok = true;
    int n = 0;
    for (int k = 0; k < nsteps; k++)
        n += p->step[steps[k]].ncalls;
    int T = n > p->nbuf ? n : p->nbuf; /* the plan's steps; T means "after" */
    int *first = malloc(sizeof(int) * (size_t)(p->nbuf + 1));
    int *last = malloc(sizeof(int) * (size_t)(p->nbuf + 1));
    int *over = malloc(sizeof(int) * (size_t)(p->nbuf + 1));
    if (!first || !last || !over)
        DIE("out of memory");
    for (int i = 0; i < p->nbuf; i++)
        first[i] = last[i] = over[i] = -1;
    int t = 0;
    for (int k = 0; k < nsteps; k++) {
        const ProgStep *s = &p->step[steps[k]];
        for (int c = 0; c < s->ncalls; c++, t++) {
            const ProgCall *x = &s->calls[c];
            for (int j = 0; j < x->nin; j++) {
                int b = x->in[j];
                if (!arg_ok(p, x->in[j])) {
                    ERR("program: %s call %d reads buffer %d of %d\n", step_name(steps[k]), c, b, p->nbuf);
                    continue;
                }
                if (b < 0 || !p->buf[b].in_arena)
                    continue;
                if (first[b] < 0)
                    ERR("program: %s call %d (%%%d) reads arena buffer %d before any call writes "
                        "it\n", step_name(steps[k]), c, x->node, b);
                last[b] = t;
            }
            for (int j = 0; j < x->nout; j++) {
                int b = x->out[j];
                if (!arg_ok(p, b) || b <= -2) {
                    ERR("program: %s call %d writes buffer %d\n", step_name(steps[k]), c, b);
                    continue;
                }
                if (b < 0 || !p->buf[b].in_arena)
                    continue;
                if (first[b] >= 0 && first[b] != t)
                    ERR("program: arena buffer %d is written by two calls\n", b);
                first[b] = t;
                if (last[b] < t)
                    last[b] = t;
                /* an output at an input's offset: a write in place */
                for (int q = 0; q < x->nin; q++) {
                    int a = x->in[q];
                    if (a >= 0 && a != b && p->buf[a].in_arena && last[a] == t &&
                        p->buf[a].offset.fixed == p->buf[b].offset.fixed &&
                        p->buf[a].offset.per_sample == p->buf[b].offset.per_sample)
                        over[b] = a;
                }
            }
        }
    }
    const ProgStep *rs = &p->step[results_of];
    for (int i = 0; i < rs->nresults; i++) {
        int b = rs->results[i];
        if (b < 0 || b >= p->nbuf)
            ERR("program: result buffer %d of %d\n", b, p->nbuf);
        else if (p->buf[b].in_arena && first[b] < 0)
            ERR("program: result buffer %d is never written\n", b);
        else
            last[b] = T;
    }
    BufferPlan bp = {.nsteps = T, .arena = p->arena};
    bp.v = malloc(sizeof(PlanValue) * (size_t)(p->nbuf + 1));
    if (!bp.v)
        DIE("out of memory");
    for (int b = 0; ok && b < p->nbuf; b++) {
        const ProgBuffer *pb = &p->buf[b];
        if (!pb->in_arena || first[b] < 0)
            continue;
        int64_t ds = dtype_size(pb->dtype), f0, f1;
        if (pb->elems.fixed < 0 || pb->elems.per_sample < 0 ||
            __builtin_mul_overflow(pb->elems.fixed, ds, &f0) ||
            __builtin_mul_overflow(pb->elems.per_sample, ds, &f1)) {
            ERR("program: buffer %d: a bad size\n", b);
            break;
        }
        PlanValue *v = &bp.v[bp.n++];
        *v = (PlanValue){.node = b, .kind = PV_ARENA, .size = {f0, f1}, .offset = pb->offset,
                         .first = first[b], .last = last[b]};
        if (over[b] >= 0) {
            v->in_place = true;
            v->overwrites = over[b];
        }
    }
    if (ok && !memplan_verify(NULL, &bp, err))
        ok = false;
    free(bp.v);
    free(first);
    free(last);
    free(over);
    return ok;
}

/* The placement's buckets hold train-step results (the gradients), each at
 * most once, with sizes that do not depend on N and bytes that add up (a
 * 16-bit gradient in the wire's dtype, a wider one in its own); the chosen
 * placement has a prediction. */
static bool verify_kv(const Program *p, FILE *err)
{
    const KvPlan *kv = &p->kv;
    bool ok = true;
    if (!kv->set)
        return true;
    if (kv->wire <= DT_UNKNOWN || dtype_size(kv->wire) <= 0)
        ERR("program: kvstore: the wire has no dtype\n");
    if (kv->step_us[kv->place] < 0)
        ERR("program: kvstore %s is chosen but not available (no prediction)\n",
            kv_place_name(kv->place));
    if (!ok)
        return false;
    const ProgStep *t = &p->step[STEP_TRAIN];
    char *seen = calloc((size_t)p->nbuf + 1, 1);
    if (!seen)
        DIE("out of memory");
    for (int b = 0; b < kv->nbuckets; b++) {
        const KvBucket *k = &kv->buckets[b];
        int64_t bytes = 0;
        for (int j = 0; j < k->nbufs; j++) {
            int x = k->bufs[j], in = 0;
            for (int i = 0; x >= 0 && x < p->nbuf && i < t->nresults; i++)
                in |= t->results[i] == x;
            if (!in) {
                ERR("program: kvbucket %d: buffer %d is not a result of the train step\n", b, x);
                continue;
            }
            if (seen[x]++)
                ERR("program: kvbucket %d: buffer %d is in two buckets\n", b, x);
            /* fp32 gradients travel as they are; 16-bit ones in the wire's dtype */
            int64_t e, es = dtype_size(p->buf[x].dtype) >= 4 ? dtype_size(p->buf[x].dtype)
                                                             : dtype_size(kv->wire);
            if (p->buf[x].elems.per_sample != 0 || p->buf[x].elems.fixed < 0 ||
                __builtin_mul_overflow(p->buf[x].elems.fixed, es, &e) ||
                __builtin_add_overflow(bytes, e, &bytes))
                ERR("program: kvbucket %d: buffer %d has no fixed size\n", b, x);
        }
        if (ok && bytes != k->bytes)
            ERR("program: kvbucket %d holds %lld bytes (16-bit gradients as %s), not %lld\n", b,
                (long long)bytes, dtype_short(kv->wire), (long long)k->bytes);
    }
    free(seen);
    return ok;
}

/* A _layout call converts: one buffer in, one out, the same dtype and
 * elements, the other layout. */
static bool verify_conversion(const Program *p, StepKind k, const ProgCall *c, FILE *err)
{
    bool ok = true;
    if (c->op != OP__layout)
        return true;
    if (c->nin != 1 || c->nout != 1 || c->in[0] < 0 || c->out[0] < 0 || c->in[0] >= p->nbuf ||
        c->out[0] >= p->nbuf) {
        ERR("program: step %s: the _layout call of %%%d does not read one buffer and write "
            "another\n", step_name(k), c->node);
        return ok;
    }
    const ProgBuffer *a = &p->buf[c->in[0]], *b = &p->buf[c->out[0]];
    if (a->layout == b->layout)
        ERR("program: step %s: the _layout call of %%%d writes buffer %d in the layout of "
            "buffer %d (%s): it converts nothing\n",
            step_name(k), c->node, c->out[0], c->in[0], layout_name(a->layout));
    else if (a->dtype != b->dtype || a->elems.fixed != b->elems.fixed ||
             a->elems.per_sample != b->elems.per_sample)
        ERR("program: step %s: the _layout call of %%%d converts buffer %d into buffer %d of "
            "another dtype or size\n",
            step_name(k), c->node, c->in[0], c->out[0]);
    return ok;
}

/* The dtypes a call's operands must have, from the text alone: each in
 * the call's dtype (that of its first D operand present, outputs first),
 * except where a signature below says F, fp32 (BatchNorm's parameters,
 * moving and saved statistics, whatever its data), or *, any (a label,
 * either side of a cast).  Inputs, then '|', then outputs; the last letter
 * of a side stands for the operands after it (Concat).  An fp32 master
 * (mK) is fp32.  Ops without a row: "D|D", every operand in one dtype, as
 * their kernels take one dtype argument for all (codegen/emit_c.c). */
static const char *const dtype_sigs[OP_COUNT] = {
    [OP_Cast] = "*|*",
    [OP_amp_cast] = "*|*",
    [OP_BatchNorm] = "DFFFF|DFF",
    [OP__fused_BatchNorm_relu] = "DFFFF|DFF",
    [OP__backward_BatchNorm] = "DDFFF|DFF",
    [OP__backward_fused_BatchNorm_relu] = "DDDFFF|DFF",
    [OP__fused_BatchNorm_add_relu] = "DFFFFD|DFF",
    [OP__backward_fused_BatchNorm_add_relu] = "DDDFFF|DFFD",
    [OP__fused_Convolution_stats] = "DD|DF",
    [OP__fused_BatchNorm_stats] = "DFFFFF|DFF",
    [OP__fused_BatchNorm_relu_stats] = "DFFFFF|DFF",
    [OP__fused_BatchNorm_add_relu_stats] = "DFFFFDF|DFF",
    [OP_bn_moving_update] = "FFFF|F",
    [OP_SoftmaxOutput] = "D*|D",
    [OP__backward_SoftmaxOutput] = "D*|D",
    [OP__fused_cast_SoftmaxOutput] = "**|F",
    [OP__backward_fused_SoftmaxOutput_cast] = "F*|*",
};

/* The letter of operand j of one side of a signature. */
static char sig_at(const char *side, size_t len, int j)
{
    return side[(size_t)j < len ? (size_t)j : len - 1];
}

static DType arg_dtype(const Program *p, int a) { return a <= -2 ? DT_F32 : p->buf[a].dtype; }

/* Operand dtypes against the op's signature (issue 21: a parameter buffer
 * whose dtype no longer matched its op's operands passed). */
static bool verify_dtypes(const Program *p, StepKind k, int ci, const ProgCall *c, FILE *err)
{
    const char *sig = dtype_sigs[c->op] ? dtype_sigs[c->op] : "D|D", *bar = strchr(sig, '|');
    const char *side[2] = {bar + 1, sig};
    size_t len[2] = {strlen(bar + 1), (size_t)(bar - sig)};
    const int *args[2] = {c->out, c->in}, nargs[2] = {c->nout, c->nin};
    int call_arg = -1; /* the operand that sets the call's dtype */
    for (int s = 0; s < 2 && call_arg < 0; s++)
        for (int j = 0; j < nargs[s] && call_arg < 0; j++)
            if (args[s][j] != -1 && arg_ok(p, args[s][j]) && sig_at(side[s], len[s], j) == 'D')
                call_arg = args[s][j];
    bool ok = true;
    for (int s = 0; s < 2; s++)
        for (int j = 0; j < nargs[s]; j++) {
            int a = args[s][j];
            char want = sig_at(side[s], len[s], j);
            if (a == -1 || !arg_ok(p, a) || want == '*')
                continue;
            DType need = want == 'F' ? DT_F32 : arg_dtype(p, call_arg);
            if (arg_dtype(p, a) == need)
                continue;
            const char *name = a <= -2 ? "an fp32 master" : p->buf[a].name;
            if (want == 'F')
                ERR("program: %s call %d (%%%d %s): %s buffer %d ('%s') is %s, but the op takes "
                    "it in float32\n",
                    step_name(k), ci, c->node, op_info(c->op)->name, s ? "input" : "output", a,
                    name, dtype_short(arg_dtype(p, a)));
            else
                ERR("program: %s call %d (%%%d %s): %s buffer %d ('%s') is %s, but the call's "
                    "operands are %s (buffer %d)\n",
                    step_name(k), ci, c->node, op_info(c->op)->name, s ? "input" : "output", a,
                    name, dtype_short(arg_dtype(p, a)), dtype_short(need), call_arg);
            return ok;
        }
    return ok;
}

bool program_verify(const Program *p, FILE *err)
{
    bool ok = verify_kv(p, err);
    int al = p->align;
    if (al < PLAN_VEC_ALIGN || (al & (al - 1)) || al > PLAN_ALIGN)
        ERR("program: align %d: buffers start at a multiple of a power of two from %d to %d\n", al,
            PLAN_VEC_ALIGN, PLAN_ALIGN);
    for (int i = 0; i < p->nbuf; i++) {
        const ProgBuffer *b = &p->buf[i];
        if (b->kind != PB_VALUE && b->in_arena)
            ERR("program: buffer %d (a %s) lies in the arena\n", i, kind_names[b->kind]);
        if (b->in_arena && al > 0 && (b->offset.fixed % al || b->offset.per_sample % al))
            ERR("program: buffer %d at %lld+%lldN does not start at a multiple of %d bytes\n", i,
                (long long)b->offset.fixed, (long long)b->offset.per_sample, al);
        if (b->dtype <= DT_UNKNOWN || dtype_size(b->dtype) <= 0)
            ERR("program: buffer %d has no dtype\n", i);
    }
    for (int k = 0; k < STEP_COUNT; k++)
        for (int c = 0; c < p->step[k].ncalls; c++)
            ok = verify_conversion(p, (StepKind)k, &p->step[k].calls[c], err) &&
                 verify_dtypes(p, (StepKind)k, c, &p->step[k].calls[c], err) && ok;
    if (!ok)
        return false;
    static const StepKind train[] = {STEP_TRAIN, STEP_MOVING}, infer[] = {STEP_INFER};
    bool a = verify_sequence(p, train, 2, STEP_TRAIN, err);
    bool b = verify_sequence(p, infer, 1, STEP_INFER, err);
    return a && b;
}

/* whether a call of st from `from` on, or what is read after the step,
 * reads buffer b */
static bool read_from(const ProgStep *st, int from, int b)
{
    for (int i = from; i < st->ncalls; i++)
        for (int j = 0; j < st->calls[i].nin; j++)
            if (st->calls[i].in[j] == b)
                return true;
    for (int i = 0; i < st->nresults; i++)
        if (st->results[i] == b)
            return true;
    return false;
}

int program_input_chain(const Program *p, StepKind k, int data, int *form)
{
    const ProgStep *st = &p->step[k];
    *form = data;
    if (data < 0 || st->ncalls < 2)
        return 0;
    const ProgCall *cast = &st->calls[0], *lay = &st->calls[1];
    if (cast->op != OP_amp_cast || cast->nin != 1 || cast->in[0] != data || cast->nout != 1 ||
        cast->out[0] < 0 || read_from(st, 1, data))
        return 0;
    int b = cast->out[0];
    if (lay->op != OP__layout || lay->nin != 1 || lay->in[0] != b || lay->nout != 1 ||
        lay->out[0] < 0 || read_from(st, 2, b)) {
        *form = b;
        return 1;
    }
    *form = lay->out[0];
    return 2;
}
