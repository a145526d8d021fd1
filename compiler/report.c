/* report.c - `ampc --report`: what the model costs.
 *
 * Trainable parameters are those the optimizer updates (weights, biases,
 * gamma, beta); BatchNorm moving statistics are state and are counted
 * separately, as MXNet's aux states are.  FLOPs are forward, per sample,
 * multiply-adds counted as two.  Activation bytes are the outputs of every
 * op for one sample in their dtypes (no memory planning yet). */
#include "driver.h"

#include <string.h>

void graph_stats(const Graph *g, GraphStats *s)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        s->op_count[n->op]++;
        int64_t e = 0;
        if (n->op == OP_Param) {
            if (n->shape.rank < 0 || !shape_numel_per_sample(&n->shape, &e))
                continue;
            int k = node_param_kind(n);
            bool shadow = node_dtype_attr(n, PARAM_MASTER) == DT_F32 && n->dtype != DT_F32;
            if (k == PK_MOVING_MEAN || k == PK_MOVING_VAR)
                s->aux += e, s->aux_tensors++;
            else
                s->trainable += e, s->trainable_tensors++;
            if (shadow)
                s->shadow += e, s->shadow_tensors++;
            s->param_bytes += e * ((n->dtype ? dtype_size(n->dtype) : 4) + (shadow ? 4 : 0));
            continue;
        }
        if (n->op == OP_Cast || n->op == OP_amp_cast) {
            s->casts++;
            s->user_casts += n->op == OP_Cast;
            int64_t c;
            if (shape_numel_per_sample(&n->shape, &c))
                s->cast_bytes += c * (dtype_size(g->nodes[n->in[0]]->dtype) + dtype_size(n->dtype));
        }
        if (n->op == OP_Input)
            continue;
        if (n->shape.rank >= 0 && shape_numel_per_sample(&n->shape, &e))
            s->act_bytes += e * (n->dtype ? dtype_size(n->dtype) : 4);
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

static const char *bytes(double v, char *buf, size_t cap)
{
    snprintf(buf, cap, "%.2f MiB", v / (1024.0 * 1024.0));
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
    fprintf(f, "trainable parameters: %lld in %lld tensors\n", (long long)s.trainable,
            (long long)s.trainable_tensors);
    fprintf(f, "aux state (BatchNorm moving statistics): %lld in %lld tensors\n", (long long)s.aux,
            (long long)s.aux_tensors);
    if (s.shadow_tensors)
        fprintf(f, "  stored as fp32 master + %s shadow: %lld in %lld tensors\n",
                dtype_long(g->info.amp ? g->info.amp : DT_F16), (long long)s.shadow,
                (long long)s.shadow_tensors);
    fprintf(f, "parameter bytes: %s\n", bytes((double)s.param_bytes, b1, sizeof b1));
    fprintf(f, "forward FLOPs per sample: %sFLOP\n", human(s.flops, b1, sizeof b1));
    fprintf(f, "activation bytes per sample: %s\n", bytes((double)s.act_bytes, b1, sizeof b1));
    fprintf(f, "amp: %s\n", g->info.amp ? dtype_long(g->info.amp) : "off");
    fprintf(f, "casts: %d inserted, %d elided, %d remaining (%d the user's)\n",
            g->info.casts_inserted, g->info.casts_elided, s.casts, s.user_casts);
    fprintf(f, "bytes converted per sample: %s\n", bytes((double)s.cast_bytes, b1, sizeof b1));
    fprintf(f, "forward FLOPs in 16 bits: %.2f%%\n",
            s.flops > 0 ? 100.0 * s.low_flops / s.flops : 0.0);
    if (batch > 0) {
        fprintf(f, "at batch %lld: forward %sFLOP, activations %s\n", (long long)batch,
                human(s.flops * (double)batch, b1, sizeof b1),
                bytes((double)s.act_bytes * (double)batch, b2, sizeof b2));
    }
}
