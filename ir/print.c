/* print.c - the text dump of a graph, in canonical order.
 *
 *   # ampc-ir 1: after infer-shapes
 *   model resnet50_v1d
 *   train batch_size = 512
 *   %0:f32[N,3,224,224] = Input() {name="data", role=data}
 *   %2:f32[N,32,112,112] = Convolution(%0, %1) {name="conv1", kernel=(3,3), ...}
 *   %9:f16[N,64,56,56]@nhwc = Convolution(%7, %8) {...}   (after schedule, --target=cuda)
 *   return %200
 *
 * Every attribute is printed, defaults included, so reading the dump back
 * (read.c) and printing it again gives the same text.  Ids are positions in
 * the canonical order, so two graphs that differ only in storage order print
 * identically. */
#include "ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int *graph_canonical_order(const Graph *g)
{
    int n = g->nnodes;
    int *order = malloc(sizeof(int) * (size_t)(n ? n : 1));
    char *state = calloc((size_t)(n ? n : 1), 1); /* 0 new, 1 on stack, 2 done */
    int *stack = malloc(sizeof(int) * (size_t)(n ? n : 1) * 2);
    if (!order || !state || !stack)
        DIE("out of memory");
    int len = 0;
    /* Iterative post-order DFS: a stack entry is (node, next input index).
     * Each node is pushed at most once (state 1), so the stack fits in 2n. */
    for (int r = 0; r < g->noutputs + n; r++) {
        int root = r < g->noutputs ? g->outputs[r] : r - g->noutputs;
        if (state[root])
            continue;
        int sp = 0;
        stack[sp++] = root;
        stack[sp++] = 0;
        state[root] = 1;
        while (sp) {
            int id = stack[sp - 2], k = stack[sp - 1];
            const Node *nd = g->nodes[id];
            if (k < nd->nin) {
                stack[sp - 1] = k + 1;
                int in = nd->in[k];
                if (!state[in]) {
                    state[in] = 1;
                    stack[sp++] = in;
                    stack[sp++] = 0;
                }
                continue;
            }
            state[id] = 2;
            order[len++] = id;
            sp -= 2;
        }
    }
    free(state);
    free(stack);
    return order;
}

/* Shortest text that reads back to the same double. */
static void print_float(FILE *f, double v)
{
    char buf[40];
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v || isnan(v))
            break;
    }
    /* keep a float recognisable as one: 1 -> 1.0 */
    if (!strpbrk(buf, ".eEn"))
        strcat(buf, ".0");
    fputs(buf, f);
}

/* s with quotes, backslashes, newlines and tabs escaped (as both the
 * reader and Graphviz take them), without the surrounding quotes. */
static void print_escaped(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if (*s == '\n')
            fputs("\\n", f);
        else if (*s == '\t')
            fputs("\\t", f);
        else
            fputc(*s, f);
    }
}

static void print_string(FILE *f, const char *s)
{
    fputc('"', f);
    print_escaped(f, s);
    fputc('"', f);
}

void attr_print(FILE *f, const AttrSpec *as, const AttrVal *v)
{
    switch (v->type) {
    case AT_INT: fprintf(f, "%lld", (long long)v->i); break;
    case AT_FLOAT: print_float(f, v->f); break;
    case AT_BOOL: fputs(v->b ? "true" : "false", f); break;
    case AT_ENUM: fputs(as->choices[v->e], f); break;
    case AT_DTYPE: fputs(dtype_long((DType)v->e), f); break;
    case AT_STR: print_string(f, v->s); break;
    case AT_TUPLE:
        fputc('(', f);
        for (int i = 0; i < v->t.n; i++)
            fprintf(f, "%s%lld", i ? "," : "", (long long)v->t.v[i]);
        fputs(v->t.n == 1 ? ",)" : ")", f);
        break;
    }
}

void config_print(FILE *f, const ConfigVal *v)
{
    switch (v->kind) {
    case CV_INT: fprintf(f, "%lld", (long long)v->i); break;
    case CV_FLOAT: print_float(f, v->f); break;
    case CV_BOOL: fputs(v->b ? "true" : "false", f); break;
    case CV_STR: print_string(f, v->s); break;
    case CV_SYM: fputs(v->s, f); break;
    case CV_CALL:
        fprintf(f, "%s(", v->s);
        for (int i = 0; i < v->nargs; i++) {
            if (i)
                fputs(", ", f);
            if (v->argnames[i])
                fprintf(f, "%s=", v->argnames[i]);
            config_print(f, v->args[i]);
        }
        fputc(')', f);
        break;
    }
}

/* n's shape with N replaced by --batch-size, when one was given. */
static Shape bound_shape(const Graph *g, const Node *n)
{
    Shape s = n->shape;
    for (int k = 0; g->info.bind_batch > 0 && k < s.rank; k++)
        if (dim_is_sym(s.d[k]))
            s.d[k] = -s.d[k] * g->info.bind_batch;
    return s;
}

/* Whether a name prints bare after '%' in --dump-ids=names: an identifier
 * that is not all digits (those are positions), so the reader tells the
 * two forms apart by the first character. */
static bool bare_name(const char *s)
{
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return false;
    return true;
}

/* A value: %12 (its position), or with names %stage1_conv1 / %"odd name" */
static void print_ref(FILE *f, const Graph *g, const int *pos, int id, bool names)
{
    const char *name = g->nodes[id]->name ? g->nodes[id]->name : "";
    if (!names)
        fprintf(f, "%%%d", pos[id]);
    else if (bare_name(name))
        fprintf(f, "%%%s", name);
    else {
        fputc('%', f);
        print_string(f, name);
    }
}

void ir_print_with(FILE *f, const Graph *g, const char *pass, const IrPrintOptions *o)
{
    bool names = o && o->names;
    int *order = graph_canonical_order(g);
    int *pos = malloc(sizeof(int) * (size_t)(g->nnodes ? g->nnodes : 1));
    if (!pos)
        DIE("out of memory");
    for (int i = 0; i < g->nnodes; i++)
        pos[order[i]] = i;
    fprintf(f, "# ampc-ir 1: %s\n", pass ? pass : "graph");
    if (o && o->header)
        fputs(o->header, f);
    fprintf(f, "model %s\n", g->model);
    for (int i = 0; i < g->ntrain; i++) {
        fprintf(f, "train %s = ", g->train[i].key);
        config_print(f, g->train[i].val);
        fputc('\n', f);
    }
    char sb[160];
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[order[i]];
        const OpInfo *oi = op_info(n->op);
        Shape s = bound_shape(g, n);
        /* a layout other than the canonical one follows the shape: f16[N,64,56,56]@nhwc */
        bool lay = n->layout != LAYOUT_NCHW;
        print_ref(f, g, pos, n->id, names);
        fprintf(f, ":%s%s%s%s = %s(", dtype_short(n->dtype), shape_str(&s, sb, sizeof sb),
                lay ? "@" : "", lay ? layout_name(n->layout) : "", oi->name);
        for (int j = 0; j < n->nin; j++) {
            fputs(j ? ", " : "", f);
            print_ref(f, g, pos, n->in[j], names);
        }
        fputs(") {", f);
        if (!names) { /* with names, the value's own name is its key */
            fputs("name=", f);
            print_string(f, n->name ? n->name : "");
        }
        for (int a = 0; a < oi->nattrs; a++) {
            fprintf(f, "%s%s=", a || !names ? ", " : "", oi->attrs[a].name);
            attr_print(f, &oi->attrs[a], &n->attrs[a]);
        }
        fputs("}\n", f);
    }
    fputs("return", f);
    for (int i = 0; i < g->noutputs; i++) {
        fputs(i ? ", " : " ", f);
        print_ref(f, g, pos, g->outputs[i], names);
    }
    fputc('\n', f);
    free(pos);
    free(order);
}

void ir_print(FILE *f, const Graph *g, const char *pass) { ir_print_with(f, g, pass, NULL); }

/* Graphviz: ops as boxes, graph inputs as ovals, parameters hidden as in
 * MXNet's plot_network (they would double the node count). */
void ir_print_dot(FILE *f, const Graph *g, const char *pass)
{
    int *order = graph_canonical_order(g);
    char sb[160];
    fprintf(f, "// ampc-ir 1: %s\ndigraph \"%s\" {\n  node [fontname=\"Helvetica\"];\n",
            pass ? pass : "graph", g->model);
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[order[i]];
        if (n->op == OP_Param)
            continue;
        /* casts and layout conversions move data: one colour */
        bool cast = n->op == OP_Cast || n->op == OP_amp_cast || n->op == OP__layout;
        Shape s = bound_shape(g, n);
        /* "Op\nname f32[..]", or "name\nf32[..]" for an input; names are
         * user text, so escaped */
        fprintf(f, "  n%d [label=\"", n->id);
        print_escaped(f, n->op == OP_Input ? n->name : op_info(n->op)->name);
        fputs("\\n", f);
        if (n->op != OP_Input) {
            print_escaped(f, n->name);
            fputc(' ', f);
        }
        bool lay = n->layout != LAYOUT_NCHW;
        fprintf(f, "%s%s%s%s\", shape=%s%s];\n", dtype_short(n->dtype),
                shape_str(&s, sb, sizeof sb), lay ? " " : "", lay ? layout_name(n->layout) : "",
                n->op == OP_Input ? "oval" : "box",
                cast ? ", style=filled, fillcolor=\"#fb8072\""
                     : n->dtype == DT_F16 || n->dtype == DT_BF16 ? ", style=filled, fillcolor=\"#8dd3c7\""
                                                                 : "");
    }
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        for (int j = 0; j < n->nin; j++)
            if (g->nodes[n->in[j]]->op != OP_Param)
                fprintf(f, "  n%d -> n%d;\n", n->in[j], n->id);
    }
    fputs("}\n", f);
    free(order);
}

char *ir_print_string(const Graph *g)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        DIE("out of memory");
    ir_print(f, g, NULL);
    if (fclose(f) != 0)
        DIE("out of memory");
    return text;
}
