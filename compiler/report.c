/* report.c - `ampc --report`: what the model costs.
 *
 * Trainable parameters are those the optimizer updates (weights, biases,
 * gamma, beta); BatchNorm moving statistics are state and are counted
 * separately, as MXNet's aux states are.  FLOPs are forward, per sample,
 * multiply-adds counted as two.  Activation bytes are the outputs of every
 * op for one sample in their dtypes (no memory planning yet). */
#include "driver.h"

#include <stdlib.h>
#include <string.h>

/* *acc += e * k, saturating at INT64_MAX: a dump read with --from-ir is not
 * re-inferred, and even shapes within AMPC_MAX_NUMEL add up past int64.
 * report_print shows a saturated count as such. */
static void add_sat(int64_t *acc, int64_t e, int64_t k)
{
    int64_t p;
    if (__builtin_mul_overflow(e, k, &p) || __builtin_add_overflow(*acc, p, acc))
        *acc = INT64_MAX;
}

void graph_stats(const Graph *g, GraphStats *s)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        s->op_count[n->op]++;
        int64_t e = 0;
        if (n->op == OP_Param) {
            if (n->shape.rank < 0)
                continue;
            if (!shape_numel_per_sample(&n->shape, &e))
                e = INT64_MAX; /* counted as overflowing, not skipped */
            int k = node_param_kind(n);
            bool shadow = node_dtype_attr(n, PARAM_MASTER) == DT_F32 && n->dtype != DT_F32;
            if (k == PK_MOVING_MEAN || k == PK_MOVING_VAR)
                add_sat(&s->aux, e, 1), s->aux_tensors++;
            else
                add_sat(&s->trainable, e, 1), s->trainable_tensors++;
            if (shadow)
                add_sat(&s->shadow, e, 1), s->shadow_tensors++;
            add_sat(&s->param_bytes, e, (n->dtype ? dtype_size(n->dtype) : 4) + (shadow ? 4 : 0));
            continue;
        }
        if (n->op == OP_Cast || n->op == OP_amp_cast) {
            s->casts++;
            s->user_casts += n->op == OP_Cast;
            int64_t c;
            if (n->shape.rank >= 0 && !shape_numel_per_sample(&n->shape, &c))
                c = INT64_MAX;
            if (n->shape.rank >= 0)
                add_sat(&s->cast_bytes, c, dtype_size(g->nodes[n->in[0]]->dtype) + dtype_size(n->dtype));
        }
        if (n->op == OP_Input)
            continue;
        if (n->shape.rank >= 0 && !shape_numel_per_sample(&n->shape, &e))
            e = INT64_MAX;
        if (n->shape.rank >= 0)
            add_sat(&s->act_bytes, e, n->dtype ? dtype_size(n->dtype) : 4);
        if (n->shape.rank >= 0) {
            double fl = op_info(n->op)->flops(g, n);
            s->flops += fl;
            if (n->dtype == DT_F16 || n->dtype == DT_BF16)
                s->low_flops += fl;
        }
    }
}

static const char *human(double v, char *buf, size_t cap)
{
    const char *units = " KMGTP";
    int u = 0;
    while (v >= 1000 && u < 5)
        v /= 1000, u++;
    if (u)
        snprintf(buf, cap, "%.2f %c", v, units[u]);
    else
        snprintf(buf, cap, "%.0f ", v);
    return buf;
}

static const char *bytes(int64_t v, char *buf, size_t cap)
{
    if (v == INT64_MAX)
        snprintf(buf, cap, "over 8 EiB (the count overflows int64)");
    else
        snprintf(buf, cap, "%.2f MiB", (double)v / (1024.0 * 1024.0));
    return buf;
}

/* A count from add_sat. */
static const char *count(int64_t v, char *buf, size_t cap)
{
    if (v == INT64_MAX)
        snprintf(buf, cap, "over %lld (the count overflows int64)", (long long)INT64_MAX - 1);
    else
        snprintf(buf, cap, "%lld", (long long)v);
    return buf;
}

/* "the forward graph after cast-elide", "the training graph after schedule" */
static const char *describes(const Graph *g)
{
    return g->info.predict_only || !g->infer ? "forward" : "training";
}

static void report_print(FILE *f, const Graph *g, const char *after, int64_t batch)
{
    GraphStats s;
    graph_stats(g, &s);
    char b1[64], b2[64];
    fprintf(f, "model %s: %d nodes (the %s graph after %s)\n", g->model, g->nnodes, describes(g),
            after);
    fprintf(f, "ops:\n");
    for (int k = 0; k < OP_COUNT; k++)
        if (s.op_count[k] && k != OP_Param && k != OP_Input)
            fprintf(f, "  %-16s %6d\n", op_table[k].name, s.op_count[k]);
    fprintf(f, "inputs:\n");
    int *order = graph_canonical_order(g); /* not the storage order: the same for every one */
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[order[i]];
        if (n->op == OP_Input)
            fprintf(f, "  %-16s %s%s\n", n->name, dtype_short(n->dtype),
                    shape_str(&n->shape, b1, sizeof b1));
    }
    free(order);
    fprintf(f, "outputs:\n");
    for (int i = 0; i < g->noutputs; i++) {
        const Node *n = g->nodes[g->outputs[i]];
        fprintf(f, "  %-16s %s%s\n", n->name, dtype_short(n->dtype), shape_str(&n->shape, b1, sizeof b1));
    }
    fprintf(f, "trainable parameters: %s in %lld tensors\n", count(s.trainable, b1, sizeof b1),
            (long long)s.trainable_tensors);
    fprintf(f, "aux state (BatchNorm moving statistics): %s in %lld tensors\n",
            count(s.aux, b1, sizeof b1), (long long)s.aux_tensors);
    if (s.shadow_tensors)
        fprintf(f, "  stored as fp32 master + %s shadow: %s in %lld tensors\n",
                dtype_long(g->info.amp ? g->info.amp : DT_F16), count(s.shadow, b1, sizeof b1),
                (long long)s.shadow_tensors);
    fprintf(f, "parameter bytes: %s\n", bytes(s.param_bytes, b1, sizeof b1));
    fprintf(f, "forward FLOPs per sample: %sFLOP\n", human(s.flops, b1, sizeof b1));
    fprintf(f, "activation bytes per sample: %s\n", bytes(s.act_bytes, b1, sizeof b1));
    fprintf(f, "amp: %s\n", g->info.amp ? dtype_long(g->info.amp) : "off");
    fprintf(f, "casts: %d inserted, %d elided, %d remaining (%d the user's)\n",
            g->info.casts_inserted, g->info.casts_elided, s.casts, s.user_casts);
    fprintf(f, "bytes converted per sample: %s\n", bytes(s.cast_bytes, b1, sizeof b1));
    /* the objective of the cast placement (docs/amp.md), for both placements */
    for (int i = 0; g->info.place_mode && i < 2; i++) {
        const int64_t *p = i ? g->info.place_greedy : g->info.place_optimal;
        fprintf(f, "placement cost per sample, %s%s: %lld bytes converted, %lld bytes moved in "
                   "fp32 by follow/widest ops\n",
                i ? "greedy" : "optimal", g->info.place_mode == 1 + i ? " (used)" : "",
                (long long)p[0], (long long)p[1]);
    }
    fprintf(f, "forward FLOPs in 16 bits: %.2f%%\n",
            s.flops > 0 ? 100.0 * s.low_flops / s.flops : 0.0);
    if (batch > 0) {
        fprintf(f, "at batch %lld: forward %sFLOP, activations %s\n", (long long)batch,
                human(s.flops * (double)batch, b1, sizeof b1),
                bytes(__builtin_mul_overflow(s.act_bytes, batch, &s.act_bytes) ? INT64_MAX
                                                                              : s.act_bytes,
                      b2, sizeof b2));
    }
}

/* --report's kvstore line: the placement the cost model chose on the
 * machine assumed, its predicted step and every available option's
 * (passes/kvstore.c, docs/kvstore.md) */
static void report_kvstore(FILE *f, const KvPlan *kv, const KvResult *r, const char *machine)
{
    fprintf(f, "kvstore: %s on %s (%d x %d, %d bucket%s, wire %s): predicted %.3f ms per step, "
               "compute %.3f ms;", kv_place_name(kv->place), machine, kv->devices, kv->machines,
            kv->nbuckets, kv->nbuckets == 1 ? "" : "s", dtype_short(kv->wire),
            r->step_ms[kv->place], r->compute_ms);
    for (int k = 0; k < KV_COUNT; k++)
        if (r->step_ms[k] >= 0)
            fprintf(f, " %s %.3f", kv_place_name((KvPlace)k), r->step_ms[k]);
    fputs(" ms\n", f);
}

/* ---- the report as a whole: text (--report) and JSON (--report=json) ---- */

/* The memory plan's lines and the target's, after the graph's. */
void report_text(FILE *f, const Report *r)
{
    report_print(f, r->graph, r->after, r->batch);
    if (r->plan) {
        plan_report(f, r->plan, r->batch);
        plan_report_params(f, r->train, r->nstate);
    }
    if (r->kv) /* the machine as resolved (a GPU program's default is not the CPU's) */
        report_kvstore(f, r->kv, r->kvr, r->kvr->machine[0] ? r->kvr->machine : "cpu");
    if (r->gpu) /* the GPU cost model of the program (docs/gpucost.md) */
        gpucost_print_report(f, r->graph, r->gpu);
    else if (r->gpu_none)
        fprintf(f, "gpu: no cost model on %s: it has no devices (--machine=h100, h200 or a100)\n",
                r->gpu_none);
    /* what a program would be built for, and why auto chose it */
    fprintf(f, "target: %s%s%s%s%s\n", target_name(r->target),
            r->kernels != r->target ? ", calling the CPU runtime's kernels (--kernels=cpu)" : "",
            r->target_why[0] ? " (--target=auto: " : "", r->target_why,
            r->target_why[0] ? ")" : "");
}

/* --target=auto's reason for the CPU (codegen/build.c's words) as a code. */
static const char *target_reason(const char *why)
{
    static const char *const codes[][2] = {
        {"no CUDA driver", "no_cuda_driver"},
        {"the CUDA driver reports error", "cuda_driver_error"},
        {"no CUDA device", "no_cuda_device"},
        {"this ampc was built without nvcc", "built_without_nvcc"},
        {"the CUDA toolkit's static runtime", "no_cudart_static"},
        {"this ampc has no CUDA runtime library", "no_cuda_runtime_library"},
    };
    if (!why || !*why)
        return NULL;
    for (int i = 0; i < (int)(sizeof codes / sizeof codes[0]); i++)
        if (strncmp(why, codes[i][0], strlen(codes[i][0])) == 0)
            return codes[i][1];
    return "other";
}

/* a count from add_sat: null when it overflowed int64 */
static void json_count(JsonW *w, const char *k, int64_t v)
{
    if (v == INT64_MAX)
        jw_null(w, k);
    else
        jw_int(w, k, v);
}

static void json_tensor(JsonW *w, const Node *n)
{
    char sb[160];
    Shape s = n->shape;
    jw_object_inline(w, NULL);
    jw_str(w, "name", n->name);
    jw_str(w, "dtype", dtype_short(n->dtype));
    jw_str(w, "shape", shape_str(&s, sb, sizeof sb));
    jw_end_object(w);
}

static void json_graph_facts(JsonW *w, const Report *r, const GraphStats *s)
{
    const Graph *g = r->graph;
    jw_object_inline(w, "graph");
    jw_str(w, "describes", describes(g));
    jw_str(w, "after", r->after);
    jw_int(w, "nodes", g->nnodes);
    jw_end_object(w);
    jw_array(w, "ops");
    for (int k = 0; k < OP_COUNT; k++)
        if (s->op_count[k] && k != OP_Param && k != OP_Input) {
            jw_object_inline(w, NULL);
            jw_str(w, "op", op_table[k].name);
            jw_int(w, "count", s->op_count[k]);
            jw_end_object(w);
        }
    jw_end_array(w);
    jw_array(w, "inputs");
    int *order = graph_canonical_order(g);
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[order[i]]->op == OP_Input)
            json_tensor(w, g->nodes[order[i]]);
    free(order);
    jw_end_array(w);
    jw_array(w, "outputs");
    for (int i = 0; i < g->noutputs; i++)
        json_tensor(w, g->nodes[g->outputs[i]]);
    jw_end_array(w);
    jw_object(w, "params");
    json_count(w, "trainable", s->trainable);
    jw_int(w, "trainable_tensors", s->trainable_tensors);
    json_count(w, "aux", s->aux);
    jw_int(w, "aux_tensors", s->aux_tensors);
    json_count(w, "shadow", s->shadow);
    jw_int(w, "shadow_tensors", s->shadow_tensors);
    json_count(w, "bytes", s->param_bytes);
    jw_end_object(w);
    jw_object(w, "flops");
    jw_num(w, "forward_per_sample", s->flops);
    jw_num(w, "low_precision_percent", s->flops > 0 ? 100.0 * s->low_flops / s->flops : 0.0);
    jw_end_object(w);
    jw_object(w, "activations");
    json_count(w, "bytes_per_sample", s->act_bytes);
    jw_end_object(w);
}

static void json_amp(JsonW *w, const Graph *g, const GraphStats *s)
{
    jw_object(w, "amp");
    jw_str(w, "dtype", g->info.amp ? dtype_long(g->info.amp) : "off");
    static const char *const modes[] = {NULL, "optimal", "greedy", "given"};
    jw_str(w, "placement",
           g->info.place_mode > 0 && g->info.place_mode < 4 ? modes[g->info.place_mode] : NULL);
    if (g->info.place_mode) {
        jw_object(w, "placement_cost");
        for (int i = 0; i < 2; i++) {
            const int64_t *p = i ? g->info.place_greedy : g->info.place_optimal;
            jw_object_inline(w, i ? "greedy" : "optimal");
            jw_int(w, "converted_bytes", p[0]);
            jw_int(w, "fp32_moved_bytes", p[1]);
            jw_end_object(w);
        }
        jw_end_object(w);
    } else {
        jw_null(w, "placement_cost");
    }
    jw_end_object(w);
    jw_object(w, "casts");
    jw_int(w, "inserted", g->info.casts_inserted);
    jw_int(w, "elided", g->info.casts_elided);
    jw_int(w, "remaining", s->casts);
    jw_int(w, "user", s->user_casts);
    json_count(w, "bytes_per_sample", s->cast_bytes);
    jw_end_object(w);
}

/* The fusions of the scheduled training graph, by --no-fuse rule name: the
 * nodes each rule made (the forward node of a pair). */
static void json_fusions(JsonW *w, const Graph *t)
{
    static const struct {
        const char *rule;
        OpKind op;
    } rules[] = {
        {"bn_relu", OP__fused_BatchNorm_relu},
        {"add_relu", OP__fused_add_relu},
        {"bn_add_relu", OP__fused_BatchNorm_add_relu},
        {"cast_softmax_output", OP__fused_cast_SoftmaxOutput},
        {"softmax_output_bwd_cast", OP__backward_fused_SoftmaxOutput_cast},
    };
    if (!t) {
        jw_null(w, "fusions");
        return;
    }
    jw_object(w, "fusions");
    for (int k = 0; k < (int)(sizeof rules / sizeof rules[0]); k++) {
        int n = 0;
        for (int i = 0; i < t->nnodes; i++)
            n += t->nodes[i]->op == rules[k].op;
        jw_int(w, rules[k].rule, n);
    }
    jw_end_object(w);
}

static void json_memplan(JsonW *w, const Report *r)
{
    if (!r->plan) {
        jw_null(w, "memplan");
        return;
    }
    const BufferPlan *p = r->plan;
    PlanParamBytes pb;
    plan_param_bytes(r->train, r->nstate, &pb);
    jw_object(w, "memplan");
    jw_int(w, "fixed_bytes", p->arena.fixed);
    jw_int(w, "per_sample_bytes", p->arena.per_sample);
    jw_lin(w, "unplanned", p->unplanned);
    jw_lin(w, "lower_bound", p->lower);
    jw_lin(w, "external", p->external);
    jw_lin(w, "gradients", p->grads);
    jw_int(w, "param_bytes", pb.values);
    jw_int(w, "master_bytes", pb.masters);
    jw_int(w, "optimizer_state_bytes", pb.state);
    jw_int(w, "optimizer_state_tensors", r->nstate);
    jw_end_object(w);
}

static void json_placement(JsonW *w, const Report *r)
{
    if (!r->kv) {
        jw_null(w, "placement");
        jw_null(w, "predicted");
        return;
    }
    const KvPlan *kv = r->kv;
    const KvResult *x = r->kvr;
    jw_object(w, "placement");
    jw_str(w, "kvstore", kv_place_name(kv->place));
    jw_str(w, "machine", x->machine);
    jw_int(w, "devices", kv->devices);
    jw_int(w, "machines", kv->machines);
    jw_int(w, "buckets", kv->nbuckets);
    jw_int(w, "bucket_cap_bytes", kv->bucket_cap);
    jw_str(w, "wire", dtype_short(kv->wire));
    jw_end_object(w);
    /* the cost model's figures: predictions, kept apart from the facts */
    jw_object(w, "predicted");
    jw_num(w, "step_ms", x->step_ms[kv->place]);
    jw_num(w, "compute_ms", x->compute_ms);
    jw_object(w, "options");
    for (int k = 0; k < KV_COUNT; k++)
        if (x->step_ms[k] >= 0)
            jw_num(w, kv_place_name((KvPlace)k), x->step_ms[k]);
        else
            jw_null(w, kv_place_name((KvPlace)k));
    jw_end_object(w);
    jw_end_object(w);
}

void report_json(FILE *f, const Report *r)
{
    GraphStats s;
    graph_stats(r->graph, &s);
    JsonW w;
    jw_init(&w, f);
    jw_object(&w, NULL);
    jw_str(&w, "schema", REPORT_SCHEMA);
    provenance_json(&w, r->prov);
    jw_str(&w, "model", r->graph->model);
    json_graph_facts(&w, r, &s);
    json_amp(&w, r->graph, &s);
    if (r->batch > 0) {
        int64_t act;
        jw_object(&w, "batch");
        jw_int(&w, "size", r->batch);
        jw_num(&w, "forward_flops", s.flops * (double)r->batch);
        json_count(&w, "activation_bytes",
                   __builtin_mul_overflow(s.act_bytes, r->batch, &act) ? INT64_MAX : act);
        jw_end_object(&w);
    } else {
        jw_null(&w, "batch");
    }
    json_fusions(&w, r->train);
    json_memplan(&w, r);
    json_placement(&w, r);
    jw_object(&w, "host");
    jw_str(&w, "target", target_name(r->target));
    jw_str(&w, "kernels", target_name(r->kernels));
    jw_str(&w, "target_reason", target_reason(r->target_why));
    jw_end_object(&w);
    jw_end_object(&w);
}
