/* mxnet_export.c - ampc --emit-mxnet-json: a forward graph as MXNet symbol
 * JSON (the nodes/arg_nodes/node_row_ptr/heads format MXNet 1.x writes), so
 * an ampc model loads in MXNet with mx.sym.load (docs/mxnet.md).
 *
 * ampc's ops are MXNet's by name and attribute, so each node becomes one
 * MXNet node with its attributes as MXNet spells them ("(3, 3)", "True");
 * inputs and parameters become variables carrying __shape__ (0 for the batch
 * dimension N, as MXNet writes an unknown one) and __dtype__.  After --amp the
 * graph holds the rewrite: amp_cast nodes where ampc casts, and parameters
 * read in 16 bits stored as 16-bit variables, as MXNet's
 * amp.convert_symbol(..., cast_optional_params=True) stores them.  The file
 * is built with json-c and written atomically, never over an input. */
#include "driver.h"
#include "../codegen/codegen.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

/* mshadow's type flags, MXNet's __dtype__ */
static int mx_type_flag(DType t)
{
    switch (t) {
    case DT_F32: return 0;
    case DT_F64: return 1;
    case DT_F16: return 2;
    case DT_U8: return 3;
    case DT_I32: return 4;
    case DT_I8: return 5;
    case DT_I64: return 6;
    case DT_BF16: return 12;
    default: return 0;
    }
}

/* The shortest text that reads back to the same double. */
static void float_text(double v, char *buf, size_t cap)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

static void add_str(json_object *o, const char *key, const char *val)
{
    json_object_object_add(o, key, json_object_new_string(val));
}

/* "(2, 3)", "(2,)", "()" */
static void tuple_text(const int64_t *v, int n, char *buf, size_t cap)
{
    size_t k = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < n && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)v[i]);
    if (k < cap)
        snprintf(buf + k, cap - k, n == 1 ? ",)" : ")");
}

/* One attribute in MXNet's string form. */
static void attr_text(const AttrSpec *as, const AttrVal *v, char *buf, size_t cap)
{
    switch (as->type) {
    case AT_INT: snprintf(buf, cap, "%lld", (long long)v->i); break;
    case AT_FLOAT: float_text(v->f, buf, cap); break;
    case AT_BOOL: snprintf(buf, cap, "%s", v->b ? "True" : "False"); break;
    case AT_ENUM: snprintf(buf, cap, "%s", as->choices[v->e]); break;
    case AT_DTYPE: snprintf(buf, cap, "%s", dtype_long((DType)v->e)); break;
    case AT_STR: break; /* op_attrs adds it as it is */
    case AT_TUPLE: tuple_text(v->t.v, v->t.n, buf, cap); break;
    }
}

static json_object *var_attrs(const Node *n)
{
    json_object *a = json_object_new_object();
    char buf[256];
    int64_t d[AMPC_MAX_RANK];
    for (int k = 0; k < n->shape.rank; k++)
        d[k] = dim_is_sym(n->shape.d[k]) ? 0 : n->shape.d[k]; /* N: MXNet's unknown */
    if (n->shape.rank >= 0) {
        tuple_text(d, n->shape.rank, buf, sizeof buf);
        add_str(a, "__shape__", buf);
    }
    snprintf(buf, sizeof buf, "%d", mx_type_flag(n->dtype));
    add_str(a, "__dtype__", buf);
    if (n->op == OP_Param) {
        float_text(node_float(n, PARAM_LR_MULT), buf, sizeof buf);
        add_str(a, "__lr_mult__", buf);
        float_text(node_float(n, PARAM_WD_MULT), buf, sizeof buf);
        add_str(a, "__wd_mult__", buf);
        /* Gluon's names for the two constant initialisers */
        const char *init = n->attrs[PARAM_INIT].s;
        if (init && (strcmp(init, "zero") == 0 || strcmp(init, "one") == 0))
            add_str(a, "__init__", strcmp(init, "zero") == 0 ? "zeros" : "ones");
    }
    return a;
}

static json_object *op_attrs(const Node *n)
{
    const OpInfo *oi = op_info(n->op);
    json_object *a = json_object_new_object();
    char buf[512];
    for (int k = 0; k < oi->nattrs; k++) {
        if (oi->attrs[k].type == AT_STR) { /* the whole string, however long */
            add_str(a, oi->attrs[k].name, n->attrs[k].s ? n->attrs[k].s : "");
            continue;
        }
        attr_text(&oi->attrs[k], &n->attrs[k], buf, sizeof buf);
        add_str(a, oi->attrs[k].name, buf);
    }
    if (n->op == OP_Concat) { /* MXNet's Concat needs its input count */
        snprintf(buf, sizeof buf, "%d", n->nin);
        add_str(a, "num_args", buf);
    }
    return a;
}

static json_object *entry(int id, int version)
{
    json_object *e = json_object_new_array();
    json_object_array_add(e, json_object_new_int(id));
    json_object_array_add(e, json_object_new_int(0));
    json_object_array_add(e, json_object_new_int(version));
    return e;
}

/* Every string the file will hold from the model (the node's name, a string
 * attribute) as MXNet reads it back, and ampc's --from-mxnet too: valid
 * UTF-8 without control characters (mx_text_ok).  dmlc-core's reader knows
 * only the escapes \n \r \t \" and \\, not json-c's \u0001, so a control
 * character would make a file MXNet refuses. */
static bool strings_ok(Diag *d, const Node *n)
{
    const OpInfo *oi = op_info(n->op);
    char why[64];
    if (!mx_text_ok(n->name, why, sizeof why)) {
        diag_plain_error(
            d, "--emit-mxnet-json: node '%s' (%s): the name: %s (MXNet's names hold none)", n->name,
            oi->name, why);
        return false;
    }
    for (int k = 0; k < oi->nattrs; k++)
        if (oi->attrs[k].type == AT_STR && n->attrs[k].s &&
            !mx_text_ok(n->attrs[k].s, why, sizeof why)) {
            diag_plain_error(d, "--emit-mxnet-json: node '%s' (%s): attribute '%s': %s", n->name,
                             oi->name, oi->attrs[k].name, why);
            return false;
        }
    return true;
}

/* The forward ops MXNet has under the same name: the DSL's, and amp_cast. */
static bool exportable(OpKind k)
{
    return k != OP_part && k != OP_grad_of && !op_made_by_autodiff(k) && !op_made_by_fuse(k);
}

/* The symbol as a json-c tree, or NULL after an error. */
static json_object *build(Diag *d, const Graph *g)
{
    int *idx = malloc(sizeof(int) * (size_t)(g->nnodes ? g->nnodes : 1));
    if (!idx)
        DIE("out of memory");
    json_object *nodes = json_object_new_array(), *args = json_object_new_array();
    int count = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const Node *n = g->nodes[i];
        bool forward = exportable(n->op);
        if (!forward)
            diag_plain_error(d,
                             "--emit-mxnet-json: node '%s' (%s) is not a forward op: export "
                             "a forward graph",
                             n->name, op_info(n->op)->name);
        if (!forward || !strings_ok(d, n)) {
            free(idx);
            json_object_put(nodes);
            json_object_put(args);
            return NULL;
        }
        if (n->op == OP_param_master) { /* the parameter itself, in its forward dtype */
            idx[i] = idx[n->in[0]];
            continue;
        }
        json_object *o = json_object_new_object();
        bool var = n->op == OP_Input || n->op == OP_Param;
        add_str(o, "op", var ? "null" : op_info(n->op)->name);
        add_str(o, "name", n->name);
        json_object_object_add(o, "attrs", var ? var_attrs(n) : op_attrs(n));
        json_object *in = json_object_new_array();
        const OpInfo *oi = op_info(n->op);
        for (int k = 0; k < n->nin; k++) {
            /* slots present in order; aux state is read at version 1, as MXNet writes it */
            bool aux = oi->nslots && n->in[k] >= 0 && g->nodes[n->in[k]]->op == OP_Param &&
                       (node_param_kind(g->nodes[n->in[k]]) == PK_MOVING_MEAN ||
                        node_param_kind(g->nodes[n->in[k]]) == PK_MOVING_VAR);
            json_object_array_add(in, entry(idx[n->in[k]], aux));
        }
        json_object_object_add(o, "inputs", in);
        if (var)
            json_object_array_add(args, json_object_new_int(count));
        json_object_array_add(nodes, o);
        idx[i] = count++;
    }
    json_object *rows = json_object_new_array(), *heads = json_object_new_array();
    for (int i = 0; i <= count; i++)
        json_object_array_add(rows, json_object_new_int(i));
    for (int i = 0; i < g->noutputs; i++)
        json_object_array_add(heads, entry(idx[g->outputs[i]], 0));
    free(idx);
    json_object *root = json_object_new_object(), *attrs = json_object_new_object();
    json_object *version = json_object_new_array();
    json_object_array_add(version, json_object_new_string("int"));
    json_object_array_add(version, json_object_new_int(10901));
    json_object_object_add(attrs, "mxnet_version", version);
    json_object_object_add(root, "nodes", nodes);
    json_object_object_add(root, "arg_nodes", args);
    json_object_object_add(root, "node_row_ptr", rows);
    json_object_object_add(root, "heads", heads);
    json_object_object_add(root, "attrs", attrs);
    return root;
}

/* MXNet's layout, one node a line: {"nodes": [ ... ], "arg_nodes": ...} */
static char *print(json_object *root, size_t *len)
{
    char *text = NULL;
    FILE *m = open_memstream(&text, len);
    if (!m)
        DIE("out of memory");
    const int flags = JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE;
    json_object *nodes = NULL;
    json_object_object_get_ex(root, "nodes", &nodes);
    fputs("{\n  \"nodes\": [\n", m);
    size_t n = json_object_array_length(nodes);
    for (size_t i = 0; i < n; i++)
        fprintf(m, "    %s%s\n",
                json_object_to_json_string_ext(json_object_array_get_idx(nodes, i), flags),
                i + 1 < n ? "," : "");
    fputs("  ]", m);
    json_object_object_foreach(root, key, val)
    {
        if (strcmp(key, "nodes") != 0)
            fprintf(m, ",\n  \"%s\": %s", key, json_object_to_json_string_ext(val, flags));
    }
    fputs("\n}\n", m);
    if (fclose(m) != 0)
        DIE("out of memory");
    return text;
}

bool mxnet_export(Diag *d, const Graph *g, const char *path)
{
    json_object *root = build(d, g);
    if (!root)
        return false;
    size_t len;
    char *text = print(root, &len);
    json_object_put(root);
    bool ok = cg_write_file(d, path, text, len);
    free(text);
    return ok;
}
