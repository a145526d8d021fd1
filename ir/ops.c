/* ops.c - the op table built from ops.def, and lookups over it.
 *
 * The per-op data (slots, attribute schemas) and rules (check, shape, FLOPs)
 * live in ir/ops/<family>.c; this file only gathers them. */
#include "ir.h"
#include "ops/ops_impl.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

const OpInfo op_table[OP_COUNT] = {
#define OP(id, name, prefix, amp, nslots, slots, nattrs, attrs, check, shape, flops, grad) \
    [OP_##id] = {name, prefix, amp, slots, nslots, attrs, nattrs, check, shape, flops, grad},
#include "ops.def"
#undef OP
};

OpKind op_lookup(const char *name)
{
    /* A linear scan over ~35 names is faster than hashing at this size and
     * only runs once per call site. */
    for (int k = 0; k < OP_COUNT; k++)
        if (strcmp(op_table[k].name, name) == 0)
            return (OpKind)k;
    return OP_COUNT;
}

bool op_user_callable(OpKind k)
{
    return k != OP_Input && k != OP_Param && k != OP_amp_cast && k != OP_param_master &&
           k < OP_part;
}

bool op_has_grad(OpKind k) { return op_table[k].grad != no_grad; }

/* Other frameworks' names for calls of these ops (case does not matter). */
static const struct {
    const char *names, *call;
} call_aliases[] = {
    {" conv conv2d conv1d conv3d convolution2d ", "Convolution(x, num_filter=16, kernel=(3,3))"},
    {" dense linear fc fully_connected fullyconnected ", "FullyConnected(x, num_hidden=10)"},
    {" bn batchnorm batch_norm batchnorm2d ", "BatchNorm(x)"},
    {" maxpool max_pool max_pool2d maxpool2d ",
     "Pooling(x, pool_type=\"max\", kernel=(2,2), stride=(2,2))"},
    {" avgpool avg_pool avg_pool2d avgpool2d ",
     "Pooling(x, pool_type=\"avg\", kernel=(2,2), stride=(2,2))"},
    {" global_avg_pool global_avg_pool2d globalavgpool2d adaptive_avg_pool2d ",
     "Pooling(x, pool_type=\"avg\", global_pool=true)"},
    {" add plus ", "x + y, or elemwise_add(x, y)"},
    {" concatenate cat ", "Concat(x, y, dim=1)"},
    {" leaky_relu leakyrelu ", "LeakyReLU(x, slope=0.25)"},
    {" cross_entropy softmax_cross_entropy softmaxcrossentropy ", "SoftmaxOutput(x, label)"},
};

bool op_call_hint(const char *name, char *buf, size_t cap)
{
    /* an activation or LeakyReLU type: relu, sigmoid, elu, prelu, ... */
    static const OpKind act_ops[] = {OP_Activation, OP_LeakyReLU};
    for (int i = 0; i < 2; i++) {
        const AttrSpec *as = &op_info(act_ops[i])->attrs[0]; /* act_type */
        for (int c = 0; as->choices[c]; c++)
            if (strcasecmp(as->choices[c], name) == 0) {
                snprintf(buf, cap, "%s(x, act_type=\"%s\")", op_info(act_ops[i])->name,
                         as->choices[c]);
                return true;
            }
    }
    char key[64];
    if (strlen(name) > sizeof key - 3 || strchr(name, ' '))
        return false;
    snprintf(key, sizeof key, " %s ", name);
    for (size_t i = 0; i < sizeof call_aliases / sizeof call_aliases[0]; i++)
        if (strcasestr(call_aliases[i].names, key)) {
            snprintf(buf, cap, "%s", call_aliases[i].call);
            return true;
        }
    return false;
}

const char *op_names_text(Arena *a, OpKind k, bool inputs)
{
    const OpInfo *oi = op_info(k);
    char *attrs = arena_strdup(a, oi->nattrs ? "" : "none");
    for (int i = 0; i < oi->nattrs; i++)
        attrs = arena_printf(a, "%s%s%s", attrs, i ? ", " : "", oi->attrs[i].name);
    if (!inputs)
        return attrs;
    char *ins = arena_strdup(a, oi->nslots ? "" : "any number, positional");
    for (int i = 0; i < oi->nslots; i++)
        ins = arena_printf(a, "%s%s%s", ins, i ? ", " : "", oi->slots[i].name);
    return arena_printf(a, "inputs %s and attributes %s", ins, attrs);
}

int op_attr_index(OpKind k, const char *name)
{
    const OpInfo *oi = op_info(k);
    for (int i = 0; i < oi->nattrs; i++)
        if (strcmp(oi->attrs[i].name, name) == 0)
            return i;
    return -1;
}

int op_slot_index(OpKind k, const char *name)
{
    const OpInfo *oi = op_info(k);
    for (int i = 0; i < oi->nslots; i++)
        if (strcmp(oi->slots[i].name, name) == 0)
            return i;
    return -1;
}

bool op_slot_present(OpKind k, int slot, const AttrVal *attrs)
{
    if (k == OP_Convolution && slot == 2)
        return !attrs[CONV_NO_BIAS].b;
    if (k == OP_FullyConnected && slot == 2)
        return !attrs[FC_NO_BIAS].b;
    if (k == OP_LeakyReLU && slot == 1)
        return attrs[LRELU_TYPE].e == LRELU_PRELU;
    if (k == OP__backward_LeakyReLU && slot == 2) /* the forward op's gamma */
        return attrs[LRELU_TYPE].e == LRELU_PRELU;
    return true;
}

/* Defaults are written as DSL text in the schemas; this reads the few forms
 * they use: integers, floats, true/false, "(a,b)", "\"choice\"" and dtype
 * names. */
static void parse_tuple(const char *s, AttrVal *v)
{
    v->t.n = 0;
    for (s++; *s && *s != ')';) {
        char *end;
        long long x = strtoll(s, &end, 10);
        if (end == s)
            DIE("bad tuple default");
        if (v->t.n == AMPC_MAX_RANK)
            DIE("tuple default too long");
        v->t.v[v->t.n++] = x;
        s = end;
        while (*s == ',' || *s == ' ')
            s++;
    }
}

static void parse_default(OpKind k, int attr, AttrVal *v)
{
    const AttrSpec *as = &op_info(k)->attrs[attr];
    memset(v, 0, sizeof *v);
    v->type = as->type;
    const char *d = as->def;
    if (!d)
        return; /* required: the caller supplies it */
    switch (as->type) {
    case AT_INT: v->i = strtoll(d, NULL, 10); break;
    case AT_FLOAT: v->f = strtod(d, NULL); break;
    case AT_BOOL: v->b = strcmp(d, "true") == 0; break;
    case AT_TUPLE: parse_tuple(d, v); break;
    case AT_DTYPE: v->e = dtype_parse(d); break;
    case AT_STR: v->s = d; break;
    case AT_ENUM:
        for (int i = 0; as->choices[i]; i++)
            if (strcmp(as->choices[i], d) == 0)
                v->e = i;
        break;
    }
}

/* Every node created (and every node a pass copies) gets its defaults from
 * here, so each is parsed once (the compiler is single-threaded): parsing
 * them per node was a quarter of the front end's time. */
void op_attr_default(OpKind k, int attr, AttrVal *v)
{
    enum { CACHED = 16 };
    static AttrVal cache[OP_COUNT][CACHED];
    static bool ready[OP_COUNT][CACHED];
    if (attr >= CACHED) {
        parse_default(k, attr, v);
        return;
    }
    if (!ready[k][attr]) {
        parse_default(k, attr, &cache[k][attr]);
        ready[k][attr] = true;
    }
    *v = cache[k][attr];
}

bool op_table_check(void)
{
    bool ok = true;
    for (int k = 0; k < OP_COUNT; k++) {
        const OpInfo *oi = &op_table[k];
        int n = 0;
        while (oi->attrs[n].name)
            n++;
        if (n != oi->nattrs) {
            fprintf(stderr, "op %s: %d attributes in its schema, %d in ops.def\n", oi->name, n,
                    oi->nattrs);
            ok = false;
        }
        n = 0;
        while (oi->slots[n].name)
            n++;
        if (n != oi->nslots) {
            fprintf(stderr, "op %s: %d slots in its schema, %d in ops.def\n", oi->name, n,
                    oi->nslots);
            ok = false;
        }
    }
    return ok;
}
