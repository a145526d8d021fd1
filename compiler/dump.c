/* dump.c - --dump: what each entry of the pass table leaves, as text (the
 * IR, the memory plan, the lowered program, the placement table), Graphviz
 * or JSON (docs/schema/), to stdout or one file per entry in --dump-dir.
 *
 * Every dump carries its provenance (provenance.c): a JSON document as its
 * "provenance" member, a text dump on the `# provenance:` line after its
 * first line, which the readers skip.  A dump is made in memory first and
 * written whole, so a failure leaves no half file, and a dump file is never
 * written over an input (codegen/output.c). */
#include "driver.h"
#include "../codegen/codegen.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

bool dump_wanted(const DumpOptions *o, const char *name)
{
    for (int i = 0; i < o->nnames; i++)
        if (strcmp(o->names[i], "all") == 0 || strcmp(o->names[i], name) == 0)
            return true;
    return false;
}

bool dump_named(const DumpOptions *o, const char *name)
{
    for (int i = 0; i < o->nnames; i++)
        if (strcmp(o->names[i], name) == 0)
            return true;
    return false;
}

/* A dump being made: in memory until dump_end writes it. */
typedef struct {
    MemFile m;
    FILE *f;
    char path[4200]; /* "" for stdout */
} DumpOut;

static const char *extension(const DumpOptions *o, const char *name)
{
    bool graph = pass_index(name) < pass_count;
    if (o->format == DF_JSON)
        return "json";
    if (o->format == DF_DOT && (graph || strcmp(name, "memplan") == 0))
        return "dot"; /* the program and the placement have no Graphviz form: text */
    return graph ? "ir" : "txt";
}

bool dump_path(const DumpOptions *o, const char *name, char *buf, size_t cap)
{
    return snprintf(buf, cap, "%s/%02d.%s.%s", o->dir, pass_index(name) + 1, name,
                    extension(o, name)) < (int)cap;
}

static void dump_begin(const DumpOptions *o, const char *name, DumpOut *out)
{
    out->path[0] = 0;
    out->f = mem_open(&out->m);
    if (o->dir && !dump_path(o, name, out->path, sizeof out->path))
        out->path[0] = 1; /* too long: dump_end says so */
}

static bool dump_end(const DumpOptions *o, DumpOut *out)
{
    mem_close(&out->m);
    bool ok = true;
    if (!out->path[0]) {
        fwrite(out->m.text, 1, out->m.len, stdout);
    } else if (out->path[0] == 1) {
        diag_plain_error(o->d, "--dump-dir: the path '%s/...' is too long", o->dir);
        ok = false;
    } else if (mkdir(o->dir, 0777) != 0 && errno != EEXIST) {
        diag_plain_error(o->d, "cannot create '%s': %s", o->dir, strerror(errno));
        ok = false;
    } else {
        ok = cg_write_file(o->d, out->path, out->m.text, out->m.len);
    }
    free(out->m.text);
    return ok;
}

/* The provenance line, as a string for the printers' header. */
static char *provenance_text(const DumpOptions *o)
{
    MemFile m;
    FILE *f = mem_open(&m);
    if (o->prov)
        provenance_line(f, o->prov);
    return mem_close(&m);
}

/* Graphviz with the provenance as a comment after its first line. */
static void dot_with_provenance(FILE *f, const DumpOptions *o, const char *dot)
{
    size_t first = strcspn(dot, "\n") + (strchr(dot, '\n') != NULL);
    fwrite(dot, 1, first, f);
    if (o->prov) { /* "// provenance: {...}": a comment of Graphviz's */
        char *line = provenance_text(o);
        fprintf(f, "//%s", line + 1);
        free(line);
    }
    fputs(dot + first, f);
}

static void json_head(JsonW *w, const DumpOptions *o, const char *schema)
{
    jw_object(w, NULL);
    jw_str(w, "schema", schema);
    provenance_json(w, o->prov);
}

/* ---- graphs ---------------------------------------------------------------- */

static char *attr_text(const AttrSpec *as, const AttrVal *v)
{
    MemFile m;
    fprintf(mem_open(&m), "%s=", as->name);
    attr_print(m.f, as, v);
    return mem_close(&m);
}

/* One node on one line, its inputs by name; attributes as the text dump
 * writes them ("kernel=(3,3)"): one closed form for every op's. */
static void json_node(JsonW *w, const Graph *g, const Node *n)
{
    char sb[160];
    const OpInfo *oi = op_info(n->op);
    Shape s = n->shape;
    for (int k = 0; g->info.bind_batch > 0 && k < s.rank; k++)
        if (dim_is_sym(s.d[k]))
            s.d[k] = -s.d[k] * g->info.bind_batch;
    jw_object_inline(w, NULL);
    jw_str(w, "name", n->name);
    jw_str(w, "op", oi->name);
    jw_str(w, "dtype", dtype_short(n->dtype));
    jw_str(w, "shape", s.rank < 0 ? "?" : shape_str(&s, sb, sizeof sb));
    jw_str(w, "layout", layout_name(n->layout));
    jw_array(w, "inputs");
    for (int j = 0; j < n->nin; j++)
        jw_str(w, NULL, g->nodes[n->in[j]]->name);
    jw_end_array(w);
    jw_array(w, "attrs");
    for (int a = 0; a < oi->nattrs; a++) {
        char *t = attr_text(&oi->attrs[a], &n->attrs[a]);
        jw_str(w, NULL, t);
        free(t);
    }
    jw_end_array(w);
    jw_end_object(w);
}

/* nodes and outputs, in the canonical order of the text dump */
static void json_graph_body(JsonW *w, const Graph *g)
{
    int *order = graph_canonical_order(g);
    jw_array(w, "nodes");
    for (int i = 0; i < g->nnodes; i++)
        json_node(w, g, g->nodes[order[i]]);
    jw_end_array(w);
    free(order);
    jw_array_inline(w, "outputs");
    for (int i = 0; i < g->noutputs; i++)
        jw_str(w, NULL, g->nodes[g->outputs[i]]->name);
    jw_end_array(w);
}

void graph_json(FILE *f, const Graph *g, const char *after, const Provenance *prov)
{
    JsonW w;
    jw_init(&w, f);
    DumpOptions o = {.prov = prov};
    json_head(&w, &o, GRAPH_SCHEMA);
    jw_str(&w, "after", after);
    jw_str(&w, "model", g->model);
    jw_array(&w, "train");
    for (int i = 0; i < g->ntrain; i++) {
        MemFile m;
        config_print(mem_open(&m), g->train[i].val);
        jw_object_inline(&w, NULL);
        jw_str(&w, "key", g->train[i].key);
        jw_str(&w, "value", mem_close(&m));
        jw_end_object(&w);
        free(m.text);
    }
    jw_end_array(&w);
    json_graph_body(&w, g);
    if (g->infer) {
        jw_object(&w, "inference");
        json_graph_body(&w, g->infer);
        jw_end_object(&w);
    } else {
        jw_null(&w, "inference");
    }
    jw_end_object(&w);
}

static void text_graph(FILE *f, const DumpOptions *o, const Graph *g, const char *name)
{
    char banner[96];
    snprintf(banner, sizeof banner, "after %s", name);
    char *head = provenance_text(o);
    IrPrintOptions po = {.names = o->ids_names, .header = head};
    MemFile m;
    if (o->format == DF_DOT) {
        ir_print_dot(mem_open(&m), g, banner);
        dot_with_provenance(f, o, mem_close(&m));
        free(m.text);
    } else {
        ir_print_with(f, g, banner, &po);
    }
    if (g->infer) {
        snprintf(banner, sizeof banner, "after %s (inference graph)", name);
        fputc('\n', f);
        po.header = NULL;
        if (o->format == DF_DOT)
            ir_print_dot(f, g->infer, banner);
        else
            ir_print_with(f, g->infer, banner, &po);
    }
    free(head);
}

bool dump_graph(const DumpOptions *o, const Graph *g, int pass)
{
    const char *name = pass_pipeline[pass].name;
    if (!dump_wanted(o, name))
        return true;
    DumpOut out;
    dump_begin(o, name, &out);
    if (o->format == DF_JSON)
        graph_json(out.f, g, name, o->prov);
    else
        text_graph(out.f, o, g, name);
    return dump_end(o, &out);
}

/* ---- the memory plan --------------------------------------------------------- */

static void memplan_json(FILE *f, const DumpOptions *o, const Graph *g, const BufferPlan *p)
{
    JsonW w;
    jw_init(&w, f);
    json_head(&w, o, MEMPLAN_SCHEMA);
    jw_str(&w, "model", g->model);
    jw_int(&w, "steps", p->nsteps);
    jw_int(&w, "alignment", PLAN_ALIGN);
    jw_array(&w, "values");
    for (int i = 0; i < p->n; i++) {
        const PlanValue *v = &p->v[i];
        const Node *n = g->nodes[v->node];
        bool arena = v->kind == PV_ARENA;
        jw_object_inline(&w, NULL);
        jw_str(&w, "name", n->name);
        jw_str(&w, "op", op_info(n->op)->name);
        jw_str(&w, "kind", arena ? "arena" : "external");
        jw_int(&w, "first", v->first);
        jw_int(&w, "last", v->last);
        jw_lin(&w, "size", v->size);
        if (arena)
            jw_lin(&w, "offset", v->offset);
        else
            jw_null(&w, "offset");
        jw_str(&w, "overwrites", arena && v->in_place ? g->nodes[v->overwrites]->name : NULL);
        jw_end_object(&w);
    }
    jw_end_array(&w);
    jw_lin(&w, "arena", p->arena);
    jw_lin(&w, "unplanned", p->unplanned);
    jw_lin(&w, "lower_bound", p->lower);
    jw_lin(&w, "external", p->external);
    jw_lin(&w, "gradients", p->grads);
    jw_end_object(&w);
}

bool dump_memplan(const DumpOptions *o, const Graph *g, const BufferPlan *p)
{
    if (!dump_wanted(o, "memplan"))
        return true;
    DumpOut out;
    dump_begin(o, "memplan", &out);
    if (o->format == DF_JSON) {
        memplan_json(out.f, o, g, p);
    } else if (o->format == DF_DOT) {
        MemFile m;
        plan_print_dot(mem_open(&m), g, p);
        dot_with_provenance(out.f, o, mem_close(&m));
        free(m.text);
    } else {
        char *head = provenance_text(o);
        plan_print_with(out.f, g, p, head);
        free(head);
    }
    return dump_end(o, &out);
}

/* ---- the lowered program ------------------------------------------------------- */

static void json_bufs(JsonW *w, const char *k, const Program *p, const int *b, int n)
{
    jw_array_inline(w, k);
    for (int i = 0; i < n; i++)
        if (b[i] >= 0)
            jw_int(w, NULL, b[i]);
        else if (b[i] == -1)
            jw_null(w, NULL);
        else /* <= -2: the fp32 master of parameter -2 - b, as the text's mK */
            jw_str(w, NULL, p->buf[p->param_buf[-2 - b[i]]].name);
    jw_end_array(w);
}

static void program_json(FILE *f, const DumpOptions *o, const Program *p, const Graph *g)
{
    static const char *const kinds[] = {"value", "param", "input", "master"};
    JsonW w;
    jw_init(&w, f);
    json_head(&w, o, PROGRAM_SCHEMA);
    jw_str(&w, "model", p->model);
    jw_lin(&w, "arena", p->arena);
    jw_array(&w, "buffers");
    for (int i = 0; i < p->nbuf; i++) {
        const ProgBuffer *b = &p->buf[i];
        jw_object_inline(&w, NULL);
        jw_str(&w, "name", b->name ? b->name : "");
        jw_str(&w, "kind", kinds[b->kind]);
        jw_str(&w, "dtype", dtype_short(b->dtype));
        jw_lin(&w, "elems", b->elems);
        jw_str(&w, "layout", layout_name(b->layout));
        if (b->in_arena)
            jw_lin(&w, "offset", b->offset);
        else
            jw_null(&w, "offset");
        jw_end_object(&w);
    }
    jw_end_array(&w);
    jw_array(&w, "steps");
    for (int k = 0; k < STEP_COUNT; k++) {
        const ProgStep *s = &p->step[k];
        const Graph *sg = k == STEP_INFER ? (g ? g->infer : NULL) : g;
        jw_object(&w, NULL);
        jw_str(&w, "step", step_name((StepKind)k));
        jw_array(&w, "calls");
        for (int c = 0; c < s->ncalls; c++) {
            const ProgCall *x = &s->calls[c];
            jw_object_inline(&w, NULL);
            jw_str(&w, "node", sg && x->node < sg->nnodes ? sg->nodes[x->node]->name : NULL);
            jw_str(&w, "op", op_info(x->op)->name);
            jw_str(&w, "place", placement_name(x->place));
            jw_bool(&w, "workspace", x->workspace);
            json_bufs(&w, "in", p, x->in, x->nin);
            json_bufs(&w, "out", p, x->out, x->nout);
            jw_end_object(&w);
        }
        jw_end_array(&w);
        json_bufs(&w, "results", p, s->results, s->nresults);
        jw_end_object(&w);
    }
    jw_end_array(&w);
    if (!p->kv.set) {
        jw_null(&w, "kvstore");
    } else {
        jw_object(&w, "kvstore");
        jw_str(&w, "place", kv_place_name(p->kv.place));
        jw_str(&w, "wire", dtype_short(p->kv.wire));
        jw_int(&w, "devices", p->kv.devices);
        jw_int(&w, "machines", p->kv.machines);
        jw_int(&w, "bucket_cap", p->kv.bucket_cap);
        jw_array(&w, "buckets");
        for (int b = 0; b < p->kv.nbuckets; b++) {
            jw_object_inline(&w, NULL);
            jw_int(&w, "bytes", p->kv.buckets[b].bytes);
            json_bufs(&w, "grads", p, p->kv.buckets[b].bufs, p->kv.buckets[b].nbufs);
            jw_end_object(&w);
        }
        jw_end_array(&w);
        jw_object_inline(&w, "predicted_step_us");
        for (int k = 0; k < KV_COUNT; k++)
            if (p->kv.step_us[k] < 0)
                jw_null(&w, kv_place_name((KvPlace)k));
            else
                jw_int(&w, kv_place_name((KvPlace)k), p->kv.step_us[k]);
        jw_end_object(&w);
        jw_end_object(&w);
    }
    jw_end_object(&w);
}

bool dump_program(const DumpOptions *o, const Program *p, const Graph *g)
{
    if (!dump_wanted(o, "program"))
        return true;
    DumpOut out;
    dump_begin(o, "program", &out);
    if (o->format == DF_JSON) {
        program_json(out.f, o, p, g);
    } else {
        char *head = provenance_text(o);
        program_print_with(out.f, p, head);
        free(head);
    }
    return dump_end(o, &out);
}

/* ---- the placement ------------------------------------------------------------ */

static void kvstore_json(FILE *f, const DumpOptions *o, const Graph *g, const Program *p,
                         const KvResult *r)
{
    JsonW w;
    jw_init(&w, f);
    json_head(&w, o, KVSTORE_SCHEMA);
    jw_str(&w, "model", g->model);
    jw_object(&w, "machine");
    jw_str(&w, "name", r->machine);
    jw_bool(&w, "cpu_only", r->cpu);
    jw_int(&w, "devices", r->devices);
    jw_int(&w, "machines", r->machines);
    jw_end_object(&w);
    jw_int(&w, "batch_per_device", r->batch);
    jw_object(&w, "gradients");
    jw_int(&w, "tensors", r->ngrads);
    jw_int(&w, "elements", r->params);
    jw_int(&w, "wire_bytes", r->grad_bytes);
    jw_str(&w, "wire_dtype", dtype_short(r->wire));
    jw_end_object(&w);
    jw_object(&w, "optimizer");
    jw_str(&w, "name", r->optimizer);
    jw_int(&w, "state_tensors", r->nstate);
    jw_bool(&w, "multi_precision", r->mp);
    jw_bool(&w, "dynamic_loss_scale", r->dynamic);
    jw_end_object(&w);
    jw_object(&w, "placement");
    jw_str(&w, "kvstore", kv_place_name(r->chosen));
    jw_bool(&w, "named", r->named);
    jw_int(&w, "buckets", p->kv.nbuckets);
    jw_int(&w, "bucket_cap_bytes", p->kv.bucket_cap);
    jw_end_object(&w);
    /* the cost model's figures, apart from the placement it chose */
    jw_object(&w, "predicted");
    jw_num(&w, "forward_ms", r->fwd_ms);
    jw_num(&w, "backward_ms", r->bwd_ms);
    jw_num(&w, "compute_ms", r->compute_ms);
    jw_str(&w, "cheapest", kv_place_name(r->best));
    jw_array(&w, "options");
    for (int k = 0; k < KV_COUNT; k++) {
        bool ok = r->step_ms[k] >= 0;
        jw_object_inline(&w, NULL);
        jw_str(&w, "kvstore", kv_place_name((KvPlace)k));
        jw_str(&w, "unavailable", ok ? NULL : r->unavailable[k]);
        if (ok) {
            jw_num(&w, "step_ms", r->step_ms[k]);
            jw_int(&w, "buckets", r->nbuckets[k]);
            jw_num(&w, "bucket_mib", r->bucket_mib[k]);
        } else {
            jw_null(&w, "step_ms");
            jw_null(&w, "buckets");
            jw_null(&w, "bucket_mib");
        }
        jw_end_object(&w);
    }
    jw_end_array(&w);
    jw_end_object(&w);
    jw_end_object(&w);
}

bool dump_kvstore(const DumpOptions *o, const Graph *g, const Program *p, const KvResult *r,
                  const char *text)
{
    if (!dump_wanted(o, "kvstore"))
        return true;
    DumpOut out;
    dump_begin(o, "kvstore", &out);
    if (o->format == DF_JSON) {
        kvstore_json(out.f, o, g, p, r);
    } else {
        /* the pass's table (kvstore_place wrote it), after the provenance */
        if (o->prov)
            provenance_line(out.f, o->prov);
        fputs(text, out.f);
    }
    return dump_end(o, &out);
}

/* ---- the GPU cost model -------------------------------------------------------- */

static void json_range(JsonW *w, const char *k, GcRange r, double scale)
{
    jw_object_inline(w, k);
    jw_num(w, "fast", r.fast * scale);
    jw_num(w, "slow", r.slow * scale);
    jw_end_object(w);
}

static void json_gpu_call(JsonW *w, const GcCall *c)
{
    jw_object_inline(w, NULL);
    jw_str(w, "step", gc_step_name(c->step));
    if (c->call >= 0)
        jw_int(w, "call", c->call);
    else
        jw_null(w, "call");
    jw_str(w, "function", c->entry);
    jw_str(w, "node", c->node);
    jw_str(w, "family", gc_family_names[c->family]);
    jw_num(w, "rd", c->rd);
    jw_num(w, "wr", c->wr);
    jw_object_inline(w, "flops");
    for (int k = 0; k < GK_NFLOP; k++)
        jw_num(w, gk_flop_names[k], c->flops[k]);
    jw_end_object(w);
    jw_num(w, "threads", c->threads);
    jw_num(w, "serial", c->serial);
    jw_str(w, "bound", gc_bound_names[c->bound]);
    json_range(w, "ms", c->t, 1e3);
    jw_array_inline(w, "kernels");
    char k[sizeof c->kernels];
    snprintf(k, sizeof k, "%s", c->kernels);
    for (char *save = NULL, *t = strtok_r(k, "+", &save); t; t = strtok_r(NULL, "+", &save))
        jw_str(w, NULL, t);
    jw_end_array(w);
    jw_end_object(w);
}

/* the text dump's content, as an ampc-gpu-cost document (docs/schema/) */
static void gpucost_json(FILE *f, const DumpOptions *o, const Graph *g, const GcResult *r)
{
    JsonW w;
    jw_init(&w, f);
    json_head(&w, o, GPUCOST_SCHEMA);
    jw_str(&w, "model", g->model);
    jw_str(&w, "machine", r->m->name);
    jw_int(&w, "batch", r->o.batch);
    jw_array(&w, "constants");
    for (int k = 0; k < gc_nconst; k++) {
        const GcConst *c = gc_const(k);
        jw_object_inline(&w, NULL);
        jw_str(&w, "name", c->name);
        jw_num(&w, "fast", c->fast);
        jw_num(&w, "slow", c->slow);
        jw_str(&w, "source", c->source);
        jw_end_object(&w);
    }
    jw_end_array(&w);
    jw_array(&w, "calls");
    for (int i = 0; i < r->ncalls; i++)
        json_gpu_call(&w, &r->calls[i]);
    jw_end_array(&w);
    jw_object(&w, "totals");
    json_range(&w, "device_ms", r->device, 1e3);
    json_range(&w, "host_ms", r->host, 1e3);
    json_range(&w, "waits_ms", r->waits_cost, 1e3);
    json_range(&w, "step_ms", r->step, 1e3);
    json_range(&w, "images_s", r->images_s, 1);
    jw_int(&w, "launches", r->launches);
    jw_int(&w, "library_calls", r->libcalls);
    jw_int(&w, "copies", r->copies);
    jw_num(&w, "host_waits", r->waits);
    json_range(&w, "memory_bytes", r->memory, 1);
    json_range(&w, "autotune_s", r->autotune, 1);
    jw_int(&w, "cudnn_plans", r->plans);
    jw_end_object(&w);
    jw_end_object(&w);
}

bool dump_gpucost(const DumpOptions *o, const Graph *g, const GcResult *r)
{
    if (!dump_wanted(o, "gpu-cost"))
        return true;
    DumpOut out;
    dump_begin(o, "gpu-cost", &out);
    if (o->format == DF_JSON) {
        gpucost_json(out.f, o, g, r);
    } else {
        char *head = provenance_text(o);
        gpucost_print_calls(out.f, g, r, head);
        free(head);
    }
    return dump_end(o, &out);
}
