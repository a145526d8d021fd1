/* opref.c - the op reference: ampc --list-ops, ampc --describe-op=NAME, and
 * docs/ops.md (ampc --describe-op=all, make ops-doc).
 *
 * Everything is printed from the tables the compiler itself runs on, so the
 * reference cannot say what the compiler does not do: the inputs and the
 * attribute schemas (ir/ops.def, ir/ops/<family>.c), the AMP class and its
 * conditional exceptions (passes/amp.c), the kernels of each target
 * (ir/kernels.def); only the words (a summary, the shape rule, notes) come
 * from ir/opdoc.def.  tests/opsdoc.sh regenerates docs/ops.md and fails on
 * any difference. */
#include "driver.h"
#include "../ir/plan.h"

#include <string.h>

typedef struct {
    const char *summary, *shape, *notes;
} OpDoc;

static const OpDoc op_docs[OP_COUNT] = {
#define OPDOC(id, summary, shape, notes) [OP_##id] = {summary, shape, notes},
#include "opdoc.def"
#undef OPDOC
};

static const OpDoc *op_doc(OpKind k)
{
    if (!op_docs[k].summary)
        DIE("op %s has no row in ir/opdoc.def", op_info(k)->name);
    return &op_docs[k];
}

static const char *amp_class_name(AmpClass c)
{
    switch (c) {
    case AMP_F16: return "fp16";
    case AMP_F32: return "fp32";
    case AMP_FOLLOW: return "follow";
    case AMP_WIDEST: return "widest";
    default: return "-";
    }
}

static const char *amp_class_text(AmpClass c)
{
    switch (c) {
    case AMP_F16:
        return "fp16 class: runs in the low precision (`--amp=float16` or `bfloat16`); "
               "its inputs are cast down, its weights stored as 16-bit shadows of fp32 "
               "masters";
    case AMP_F32: return "fp32 class: always runs in fp32; 16-bit inputs are cast up";
    case AMP_FOLLOW: return "follow class: runs in the dtype that arrives, no cast";
    case AMP_WIDEST: return "widest class: narrower float inputs are cast up to the widest";
    default: return "none: not a compute op";
    }
}

/* ---- attributes ----------------------------------------------------------------- */

static void attr_type(FILE *f, const AttrSpec *as)
{
    static const char *const names[] = {
        [AT_INT] = "int",     [AT_FLOAT] = "float",         [AT_BOOL] = "bool",
        [AT_ENUM] = "string", [AT_TUPLE] = "tuple of ints", [AT_DTYPE] = "dtype",
        [AT_STR] = "string"};
    fputs(names[as->type], f);
}

static void attr_default(FILE *f, const AttrSpec *as)
{
    if (as->required || !as->def)
        fputs("required", f);
    else if (as->type == AT_ENUM)
        fprintf(f, "`\"%s\"`", as->def);
    else
        fprintf(f, "`%s`", as->def);
}

/* the values an attribute takes: its choices, or its range */
static void attr_values(FILE *f, const AttrSpec *as)
{
    bool low = as->min <= -1e29, high = as->max >= 1e29 || as->max >= 2147483647.0;
    switch (as->type) {
    case AT_ENUM:
        for (int i = 0; as->choices[i]; i++)
            fprintf(f, "%s`\"%s\"`", i ? ", " : "", as->choices[i]);
        return;
    case AT_DTYPE:
        for (int t = 0; t < DT_COUNT; t++)
            if (dtype_is_float((DType)t))
                fprintf(f, "%s`%s`", t == DT_F16 ? "" : ", ", dtype_long((DType)t));
        return;
    case AT_BOOL: fputs("`true`, `false`", f); return;
    case AT_STR: fputs("a string", f); return;
    case AT_INT:
    case AT_TUPLE:
        fputs(as->type == AT_TUPLE ? "each " : "", f);
        if (high)
            fprintf(f, ">= %.0f", as->min);
        else
            fprintf(f, "%.0f to %.0f", as->min, as->max);
        return;
    case AT_FLOAT:
        if (low && high)
            fputs("any", f);
        else if (high)
            fprintf(f, ">= %g", as->min);
        else
            fprintf(f, "%g to %g", as->min, as->max);
        return;
    }
}

static void print_attrs(FILE *f, const OpInfo *oi)
{
    if (oi->nattrs == 0) {
        fputs("No attributes.\n\n", f);
        return;
    }
    fputs("| attribute | type | default | values |\n| --- | --- | --- | --- |\n", f);
    for (int a = 0; a < oi->nattrs; a++) {
        const AttrSpec *as = &oi->attrs[a];
        fprintf(f, "| `%s` | ", as->name);
        attr_type(f, as);
        fputs(" | ", f);
        attr_default(f, as);
        fputs(" | ", f);
        attr_values(f, as);
        fputs(" |\n", f);
    }
    fputc('\n', f);
}

/* ---- inputs ----------------------------------------------------------------------- */

static void print_inputs(FILE *f, const OpInfo *oi)
{
    if (oi->nslots == 0) {
        fputs("Inputs: any number of tensors, positional.\n\n", f);
        return;
    }
    fputs("| input | what |\n| --- | --- |\n", f);
    for (int s = 0; s < oi->nslots; s++) {
        const SlotSpec *ss = &oi->slots[s];
        fprintf(f, "| `%s` | ", ss->name);
        switch (ss->kind) {
        case SLOT_DATA: fputs("a tensor", f); break;
        case SLOT_LABEL: fputs("the label: a model input, never cast, no gradient", f); break;
        case SLOT_PARAM:
        case SLOT_AUX:
            fprintf(f, "%s, made as `NODE_%s` when not given%s",
                    ss->kind == SLOT_PARAM ? "a trained parameter" : "state that is not trained",
                    ss->suffix, ss->keep_fp32 ? "; always fp32" : "");
            break;
        }
        fputs(" |\n", f);
    }
    fputc('\n', f);
}

/* ---- kernels and AMP ---------------------------------------------------------------- */

static void print_kernel_row(FILE *f, OpKind k)
{
    const KernelRow *r = kernel_row(k);
    if (!r->has) {
        fputs("none (it makes no call)", f);
        return;
    }
    fprintf(f, "CPU `%s`", r->cpu);
    if (r->mode)
        fprintf(f, " (`%s`)", r->mode);
    if (r->cuda)
        fprintf(f, ", CUDA `%s`", r->cuda);
    else
        fputs(", CUDA none (a `--target=cuda` program refuses it)", f);
}

static void print_kernels(FILE *f, OpKind k)
{
    fputs("- **Kernels:** ", f);
    print_kernel_row(f, k);
    char name[96];
    snprintf(name, sizeof name, "_backward_%s", op_info(k)->name);
    OpKind b = op_lookup(name);
    if (b != OP_COUNT) {
        fprintf(f, "; backward (`%s`): ", name);
        print_kernel_row(f, b);
    } else if (op_has_grad(k)) {
        fputs("; its gradient is made of other ops of this table", f);
    }
    fputs(".\n", f);
}

static void print_amp(FILE *f, OpKind k)
{
    const char *cond[4];
    int n = amp_conditional_fp32(k, cond, 4);
    fprintf(f, "- **AMP:** %s", amp_class_text(op_info(k)->amp));
    for (int i = 0; i < n; i++)
        fprintf(f, "%s`%s`", i ? ", " : "; fp32 whatever its class for ", cond[i]);
    fputs(" ([amp.md](amp.md)).\n", f);
}

/* ---- one op, the list, the whole reference ------------------------------------------ */

static void describe(FILE *f, OpKind k)
{
    const OpInfo *oi = op_info(k);
    const OpDoc *doc = op_doc(k);
    fprintf(f, "### %s\n\n%s\n\n", oi->name, doc->summary);
    print_inputs(f, oi);
    print_attrs(f, oi);
    fprintf(f, "- **Shape:** %s.\n", doc->shape);
    print_amp(f, k);
    print_kernels(f, k);
    if (*doc->notes)
        fprintf(f, "- **Notes:** %s\n", doc->notes);
    fputc('\n', f);
}

static const char intro[] =
    "# Op reference\n"
    "\n"
    "Generated by `ampc --describe-op=all` (`make ops-doc`) from the tables the compiler runs\n"
    "on: the inputs and attributes from `ir/ops.def` and `ir/ops/*.c`, the AMP class from\n"
    "`passes/amp.c`, the kernels from `ir/kernels.def`, the words from `ir/opdoc.def`. Do not\n"
    "edit it: `tests/opsdoc.sh` (`make golden`) fails when it differs from what ampc prints.\n"
    "`ampc --list-ops` lists the ops, `ampc --describe-op=NAME` prints one section.\n"
    "\n"
    "## Calling an op\n"
    "\n"
    "```\n"
    "y = Convolution(x, num_filter=16, kernel=(3,3), pad=(1,1), no_bias=true)\n"
    "y = Activation(BatchNorm(y), act_type=\"relu\")\n"
    "y = FullyConnected(Flatten(y), num_hidden=10, bias=param(wd_mult=0), name=\"fc\")\n"
    "```\n"
    "\n"
    "The ops are MXNet's, with its names and attributes. A call gives the tensor inputs\n"
    "first, positionally or by name (`data=x`), then the attributes by name; positional\n"
    "arguments after the inputs fill the attributes in the order of the tables below.\n"
    "Values are ints, floats, `true`/`false`, strings (`\"relu\"`), tuples (`(3,3)`) and\n"
    "dtype names (`float16`). The parameters an op takes (weights, biases, BatchNorm's\n"
    "gamma and beta and its moving statistics) are made for you and named after the node\n"
    "(`NODE_weight`); a node is named from its call path ([ir.md](ir.md)), or by\n"
    "`name=\"...\"`. Pass one explicitly with `param(init=..., wd_mult=..., lr_mult=...,\n"
    "shape=...)`. In expressions, `x + y`, `x - y` and `x * y` on two tensors are\n"
    "`elemwise_add`, `elemwise_sub` and `elemwise_mul`, and a tensor with a number is one\n"
    "of the scalar ops. A model that returns a loss head (`SoftmaxOutput`) trains.\n"
    "\n";

void opref_list(FILE *f)
{
    for (int k = 0; k < OP_COUNT; k++)
        if (op_user_callable((OpKind)k))
            fprintf(f, "%-16s %-7s %s\n", op_info((OpKind)k)->name,
                    amp_class_name(op_info((OpKind)k)->amp), op_doc((OpKind)k)->summary);
    fputs("\nThe AMP class: docs/amp.md.  One op in full: ampc --describe-op=NAME; all of them\n"
          "with the ops the passes make (docs/ops.md): ampc --describe-op=all.\n",
          f);
}

/* GitHub's heading anchor: the name in lower case */
static const char *anchor(const char *name, char *buf, size_t cap)
{
    size_t i = 0;
    for (; name[i] && i + 1 < cap; i++)
        buf[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a' : name[i]);
    buf[i] = 0;
    return buf;
}

static void describe_all(FILE *f)
{
    char a[64];
    fputs(intro, f);
    fputs("## Ops a model calls\n\n| op | AMP | what |\n| --- | --- | --- |\n", f);
    for (int k = 0; k < OP_COUNT; k++)
        if (op_user_callable((OpKind)k))
            fprintf(f, "| [%s](#%s) | %s | %s |\n", op_info((OpKind)k)->name,
                    anchor(op_info((OpKind)k)->name, a, sizeof a),
                    amp_class_name(op_info((OpKind)k)->amp), op_doc((OpKind)k)->summary);
    fputc('\n', f);
    for (int k = 0; k < OP_COUNT; k++)
        if (op_user_callable((OpKind)k))
            describe(f, (OpKind)k);
    fputs("## Ops a model does not call\n\n"
          "The graph's leaves (declared inputs, parameters) and the ops the passes make; they\n"
          "appear in dumps (`--dump`) and `--explain`.\n\n"
          "| op | what | kernels |\n| --- | --- | --- |\n",
          f);
    for (int k = 0; k < OP_COUNT; k++) {
        if (op_user_callable((OpKind)k))
            continue;
        fprintf(f, "| `%s` | %s | ", op_info((OpKind)k)->name, op_doc((OpKind)k)->summary);
        print_kernel_row(f, (OpKind)k);
        fputs(" |\n", f);
    }
}

bool opref_describe(Diag *d, FILE *f, const char *name)
{
    if (strcmp(name, "all") == 0) {
        describe_all(f);
        return true;
    }
    OpKind k = op_lookup(name);
    if (k != OP_COUNT) {
        describe(f, k);
        return true;
    }
    char hint[128];
    if (op_call_hint(name, hint, sizeof hint)) {
        diag_plain_error(d, "--describe-op: no op '%s': write %s", name, hint);
        return false;
    }
    Suggest s = {0};
    for (int i = 0; i < OP_COUNT; i++)
        suggest_try(&s, name, op_info((OpKind)i)->name);
    diag_plain_error(d, "--describe-op: no op '%s'%s%s%s (ampc --list-ops lists them)", name,
                     s.best ? " (did you mean '" : "", s.best ? s.best : "", s.best ? "'?)" : "");
    return false;
}
