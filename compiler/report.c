/* report.c - `ampc --report`: what the model costs.
 *
 * Trainable parameters are those the optimizer updates (weights, biases,
 * gamma, beta); BatchNorm moving statistics are state and are counted
 * separately, as MXNet's aux states are.  FLOPs are forward, per sample,
 * multiply-adds counted as two.  Activation bytes are the outputs of every
 * op for one sample in their dtypes (no memory planning yet). */
#include "driver.h"

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

void report_print(FILE *f, const Graph *g, int64_t batch)
{
    GraphStats s;
    graph_stats(g, &s);
    char b1[64], b2[64];
    fprintf(f, "model %s: %d nodes\n", g->model, g->nnodes);
    fprintf(f, "ops:\n");
    for (int k = 0; k < OP_COUNT; k++)
        if (s.op_count[k] && k != OP_Param && k != OP_Input)
            fprintf(f, "  %-16s %6d\n", op_table[k].name, s.op_count[k]);
    fprintf(f, "inputs:\n");
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == OP_Input)
            fprintf(f, "  %-16s %s%s\n", g->nodes[i]->name, dtype_short(g->nodes[i]->dtype),
                    shape_str(&g->nodes[i]->shape, b1, sizeof b1));
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
void report_kvstore(FILE *f, const KvPlan *kv, const KvResult *r, const char *machine)
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
